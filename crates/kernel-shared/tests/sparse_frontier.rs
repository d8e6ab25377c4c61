//! Why a sparse hop may skip inactive sources and give untouched targets `+0.0`: the arithmetic facts the
//! spreading kernels rely on (`kernels-rs/src/graph.rs`, "Sparse frontiers"), checked over edge values.

use recall_kernel_shared::math::fma;

/// Non-negative finite values as validated inputs make them: zeros, subnormals, ordinary and huge values.
const NON_NEGATIVE: [f32; 9] = [
    0.0,
    f32::from_bits(1),
    f32::MIN_POSITIVE,
    1e-30,
    0.25,
    0.999_999_9,
    1.0,
    3.5e20,
    f32::MAX,
];

#[test]
fn a_term_from_an_inactive_source_leaves_the_lane_unchanged() {
    // An inactive source holds +0.0 (seeds are read as `seed + 0.0`, every later activation is 0.0 or
    // >= threshold >= 0). Its product with a weight w >= 0 is +0.0; and even a -0.0 activation (w * -0.0 =
    // -0.0) adds nothing: x + (+0.0) and x + (-0.0) are x for every x >= +0.0, +0.0 included.
    for &w in &NON_NEGATIVE {
        for &lane in &NON_NEGATIVE {
            for zero in [0.0f32, -0.0] {
                let got = fma(w, zero, lane);
                assert_eq!(
                    got.to_bits(),
                    lane.to_bits(),
                    "fma({w:e}, {zero:?}, {lane:e})"
                );
            }
        }
    }
}

#[test]
fn a_target_with_only_inactive_sources_gets_positive_zero() {
    // The contract's pull for such a target: 32 lanes from +0.0, terms of +0.0 activations, the fixed
    // tree, decay, threshold. Every step keeps +0.0 (never -0.0), so `next = +0.0` and `total + 0.0 ==
    // total`: what the sparse hop leaves in place.
    for &w in &NON_NEGATIVE {
        let mut lanes = [0.0f32; 32];
        for j in 0..100 {
            lanes[j % 32] = fma(w, 0.0, lanes[j % 32]);
        }
        for off in [16, 8, 4, 2, 1] {
            for l in 0..off {
                lanes[l] += lanes[l + off];
            }
        }
        for decay in [f32::MIN_POSITIVE, 0.5, 1.0] {
            for threshold in [0.0f32, 0.01] {
                let x = lanes[0] * decay;
                let a = if x < threshold { 0.0 } else { x };
                assert_eq!(a.to_bits(), 0.0f32.to_bits());
                for &total in &NON_NEGATIVE {
                    assert_eq!((total + a).to_bits(), total.to_bits());
                }
            }
        }
    }
}

#[test]
fn negative_zero_sums_would_differ_which_is_why_no_negative_value_is_admitted() {
    // The one case where skipping would not be exact: a lane at -0.0 (only reachable with negative inputs,
    // which validation refuses) becomes +0.0 when a +0.0 term is added, so skipping that term would keep -0.0.
    let lane = -0.0f32;
    assert_eq!(fma(1.0, 0.0, lane).to_bits(), 0.0f32.to_bits());
    assert_ne!(lane.to_bits(), 0.0f32.to_bits());
}
