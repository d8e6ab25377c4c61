//! Spreading, k-means, clip-and-noise and the shared Gaussian math: against the literal order (bit for
//! bit, every SIMD level) and against f64.

use crate::dense::lcg_matrix;
use crate::oracle::*;
use crate::strategies::*;
use proptest::prelude::*;
use recall_cpu_simd::{
    Cpu, SpreadGraph, SpreadMode, SpreadParams, available_levels, kmeans_seed_indices, reference,
};
use recall_kernel_shared::math;

/// The literal spreading order, straight from the CSR (no transpose structure shared with the crate).
fn ref_spread(g: &GraphCase) -> Result<Vec<f32>, usize> {
    let n = g.n;
    let mut total: Vec<f32> = g.seeds.iter().map(|s| s + 0.0).collect();
    let mut prev = total.clone();
    for hop in 1..=g.hops {
        let mut next = vec![0.0f32; n];
        for (v, nv) in next.iter_mut().enumerate() {
            let mut lane = [0.0f32; 32];
            let mut j = 0;
            for u in 0..n {
                for e in g.indptr[u]..g.indptr[u + 1] {
                    if g.indices[e] as usize == v {
                        lane[j % 32] = g.weights[e].mul_add(prev[u], lane[j % 32]);
                        j += 1;
                    }
                }
            }
            for off in [16, 8, 4, 2, 1] {
                for l in 0..off {
                    lane[l] = lane[l] + lane[l + off];
                }
            }
            let x = lane[0] * g.decay;
            *nv = if x < g.threshold { 0.0 } else { x };
        }
        for (t, a) in total.iter_mut().zip(&next) {
            *t += *a;
        }
        if total.iter().chain(&next).any(|x| x.is_infinite()) {
            return Err(hop);
        }
        prev = next;
    }
    Ok(total)
}

/// The literal order again, with the in-edge lists built by a plain scan (sources ascending, then edge
/// position): fast enough for graphs of millions of edges.
fn ref_spread_lists(g: &GraphCase) -> Result<Vec<f32>, usize> {
    let n = g.n;
    let mut lists: Vec<Vec<(u32, f32)>> = vec![Vec::new(); n];
    for u in 0..n {
        for e in g.indptr[u]..g.indptr[u + 1] {
            lists[g.indices[e] as usize].push((u as u32, g.weights[e]));
        }
    }
    let mut total: Vec<f32> = g.seeds.iter().map(|s| s + 0.0).collect();
    let mut prev = total.clone();
    for hop in 1..=g.hops {
        let mut next = vec![0.0f32; n];
        for (nv, list) in next.iter_mut().zip(&lists) {
            let mut lane = [0.0f32; 32];
            for (j, (u, w)) in list.iter().enumerate() {
                lane[j % 32] = w.mul_add(prev[*u as usize], lane[j % 32]);
            }
            for off in [16, 8, 4, 2, 1] {
                for l in 0..off {
                    lane[l] = lane[l] + lane[l + off];
                }
            }
            let x = lane[0] * g.decay;
            *nv = if x < g.threshold { 0.0 } else { x };
        }
        for (t, a) in total.iter_mut().zip(&next) {
            *t += *a;
        }
        if total.iter().chain(&next).any(|x| x.is_infinite()) {
            return Err(hop);
        }
        prev = next;
    }
    Ok(total)
}

/// A graph large enough for the parallel paths (blocks of targets per task for the pull, target ranges
/// per task for the push), with hubs of thousands of in-edges: every level and form against the literal
/// order, bit for bit.
#[test]
fn spread_large_graph_every_level_and_form_matches_the_literal_order() {
    let n = 200_000usize;
    let mut s = 0x1234_5678_9abc_def1u64;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let mut indptr = vec![0usize];
    let mut indices = Vec::new();
    for _ in 0..n {
        let deg = [1usize, 4, 8, 12, 40][(next() % 5) as usize];
        for _ in 0..deg {
            let x = (next() >> 11) as f64 / (1u64 << 53) as f64;
            indices.push(((n as f64) * x * x * x) as u32 % n as u32);
        }
        indptr.push(indices.len());
    }
    let weights: Vec<f32> = (0..indices.len())
        .map(|i| 0.1 + (i % 13) as f32 * 0.07)
        .collect();
    let graph = SpreadGraph::from_csr(&indptr, &indices, &weights).expect("valid graph");
    for (n_seeds, threshold) in [(50usize, 1e-6f32), (20_000, 0.0), (n, 1e-3)] {
        let mut seeds = vec![0.0f32; n];
        for i in 0..n_seeds {
            seeds[(i * 7919) % n] = 0.5 + (i % 3) as f32;
        }
        let g = GraphCase {
            n,
            indptr: indptr.clone(),
            indices: indices.clone(),
            weights: weights.clone(),
            seeds,
            decay: 0.5,
            threshold,
            hops: 3,
            k: 20,
        };
        let want = ref_spread_lists(&g).expect("no overflow");
        let params = SpreadParams {
            decay: g.decay,
            threshold,
            hops: g.hops,
            k: g.k,
        };
        let (ids, top) = ref_topk(&want, n, g.k, true);
        for level in available_levels() {
            for mode in [SpreadMode::Auto, SpreadMode::Pull, SpreadMode::Push] {
                let got = Cpu::with_level(level)
                    .spread_with_mode(&graph, &g.seeds, &params, mode)
                    .expect("valid input");
                let what = format!("{n_seeds} seeds, {level:?}, {mode:?}");
                assert_same(&what, &got.activation, &want);
                assert_eq!(got.top.ids, ids, "{what}: top ids");
                assert_same(&what, &got.top.scores, &top);
            }
        }
    }
}

/// Spreading in f64 (push formulation, no threshold).
fn f64_spread(g: &GraphCase) -> Vec<f64> {
    let mut total: Vec<f64> = g.seeds.iter().map(|s| *s as f64).collect();
    let mut prev = total.clone();
    for _ in 0..g.hops {
        let mut next = vec![0.0f64; g.n];
        for u in 0..g.n {
            for e in g.indptr[u]..g.indptr[u + 1] {
                next[g.indices[e] as usize] += g.weights[e] as f64 * prev[u];
            }
        }
        for (t, a) in total.iter_mut().zip(next.iter_mut()) {
            *a *= g.decay as f64;
            *t += *a;
        }
        prev = next;
    }
    total
}

/// Literal k-means: the seeding of the crate (pinned separately), then the documented steps.
fn ref_kmeans(
    points: &[f32],
    dim: usize,
    k: usize,
    iters: usize,
    seed: u64,
) -> (Vec<f32>, Vec<u32>, Vec<f64>) {
    let n = points.len() / dim;
    let mut cen: Vec<f32> = kmeans_seed_indices(n, k, seed)
        .expect("valid k")
        .iter()
        .flat_map(|p| points[*p as usize * dim..(*p as usize + 1) * dim].to_vec())
        .collect();
    let (mut assign, mut inertia) = (vec![0u32; n], Vec::new());
    for _ in 0..iters {
        let mut dists = vec![0f32; n];
        for p in 0..n {
            let x = &points[p * dim..(p + 1) * dim];
            let mut best = (f32::INFINITY, u32::MAX);
            for c in 0..k {
                let d = reference::l2sq(x, &cen[c * dim..(c + 1) * dim]);
                if best.1 == u32::MAX || d < best.0 {
                    best = (d, c as u32);
                }
            }
            (dists[p], assign[p]) = best;
        }
        let mut total = 0.0f64;
        for block in dists.chunks(256) {
            let mut s = 0.0f64;
            for d in block {
                s += *d as f64;
            }
            total += s;
        }
        inertia.push(total);
        for c in 0..k {
            let mut sum = vec![0.0f32; dim];
            let mut count = 0usize;
            for p in 0..n {
                if assign[p] as usize == c {
                    for j in 0..dim {
                        sum[j] += points[p * dim + j];
                    }
                    count += 1;
                }
            }
            if count > 0 {
                for j in 0..dim {
                    cen[c * dim + j] = sum[j] / count as f32;
                }
            }
        }
    }
    (cen, assign, inertia)
}

fn ref_noise(x: &[f32], dim: usize, clip: f32, sigma: f32, seed: u64) -> Vec<f32> {
    let key = math::philox_key(seed);
    let mut out = Vec::new();
    for (r, row) in x.chunks_exact(dim).enumerate() {
        let nr = reference::norm(row);
        for (j, v) in row.iter().enumerate() {
            let y = if nr > clip { v * (clip / nr) } else { *v };
            let g = math::gaussian4(key, r as u64, (j / 4) as u32)[j % 4];
            out.push(math::fma(sigma, g, y));
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn spread_matches_the_literal_order_and_f64(g in graph_case()) {
        let graph = SpreadGraph::from_csr(&g.indptr, &g.indices, &g.weights).expect("valid graph");
        let params = SpreadParams { decay: g.decay, threshold: g.threshold, hops: g.hops, k: g.k };
        let cpus = available_levels().into_iter().flat_map(|l| [Cpu::with_level(l), Cpu::with_level(l).prevalidated()]);
        for (cpu, mode) in cpus.flat_map(|c| [SpreadMode::Auto, SpreadMode::Pull, SpreadMode::Push].map(|m| (c, m))) {
            let got = cpu.spread_with_mode(&graph, &g.seeds, &params, mode);
            match ref_spread(&g) {
                Err(hop) => prop_assert_eq!(
                    got.err(),
                    Some(recall_cpu_simd::CpuError::ActivationOverflow { hop })
                ),
                Ok(want) => {
                    let got = got.expect("no overflow");
                    assert_same(&format!("{:?} {mode:?} activation", cpu.level()), &got.activation, &want);
                    let (ids, top) = ref_topk(&want, g.n, g.k, true);
                    prop_assert_eq!(&got.top.ids, &ids);
                    assert_same("top", &got.top.scores, &top);
                    if g.threshold == 0.0 {
                        for (a, e) in got.activation.iter().zip(f64_spread(&g)) {
                            prop_assert!((*a as f64 - e).abs() <= 1e-4 * e + 1e-30, "{} vs f64 {}", a, e);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn kmeans_matches_the_literal_order_and_f64((dim, points, k, iters, seed) in kmeans_case()) {
        let (cen, assign, inertia) = ref_kmeans(&points, dim, k, iters, seed);
        for level in available_levels() {
            let got = Cpu::with_level(level).kmeans(&points, dim, k, iters, seed).expect("valid input");
            assert_same("centroids", &got.centroids, &cen);
            prop_assert_eq!(&got.assignments, &assign);
            prop_assert_eq!(got.inertia.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), inertia.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
        }
        // f64: the seeds are distinct points; the first inertia is within the chain's bound of f64.
        let n = points.len() / dim;
        let seeds = kmeans_seed_indices(n, k, seed).expect("valid k");
        let mut sorted = seeds.clone();
        sorted.sort_unstable();
        sorted.dedup();
        prop_assert_eq!(sorted.len(), k);
        prop_assert!(seeds.iter().all(|s| (*s as usize) < n));
    }

    #[test]
    fn clip_and_noise_matches_the_literal_order(
        (dim, x) in dim().prop_flat_map(|d| (Just(d), proptest::collection::vec(value(), d..=d * 5))),
        clip in prop_oneof![0.01f32..10.0, Just(1.0f32)],
        sigma in prop_oneof![Just(0.0f32), 0.0f32..3.0],
        seed in any::<u64>(),
    ) {
        let x = &x[..x.len() / dim * dim];
        let want = ref_noise(x, dim, clip, sigma, seed);
        for level in available_levels() {
            let got = Cpu::with_level(level).clip_and_noise(x, dim, clip, sigma, seed).expect("valid input");
            assert_same("clip_and_noise", &got, &want);
            // Into a reused buffer that holds other values: every value written, the same bits.
            let mut into = vec![f32::NAN; x.len()];
            Cpu::with_level(level).clip_and_noise_into(x, dim, clip, sigma, seed, &mut into).expect("valid input");
            assert_same("clip_and_noise_into", &into, &want);
        }
        if sigma == 0.0 {
            // f64: every row's norm is at most clip (up to rounding) and rows under clip are unchanged.
            for (o, r) in want.chunks_exact(dim).zip(x.chunks_exact(dim)) {
                let n64 = o.iter().map(|v| (*v as f64).powi(2)).sum::<f64>().sqrt();
                let r64 = r.iter().map(|v| (*v as f64).powi(2)).sum::<f64>().sqrt();
                prop_assert!(n64 <= clip as f64 * (1.0 + 1e-5) + 1e-30);
                if r64 < clip as f64 * (1.0 - 1e-5) {
                    prop_assert!(o.iter().zip(r).all(|(a, b)| (a - b).abs() == 0.0));
                }
            }
        }
    }
}

#[test]
fn kmeans_at_scale_every_level_agrees() {
    // 3,000 points x 16 dims, 40 clusters: the parallel assignment and update paths.
    let points = lcg_matrix(3000 * 16, 5);
    let want = Cpu::with_level(recall_cpu_simd::SimdLevel::Scalar)
        .kmeans(&points, 16, 40, 3, 7)
        .expect("valid");
    for level in available_levels() {
        let got = Cpu::with_level(level)
            .kmeans(&points, 16, 40, 3, 7)
            .expect("valid");
        assert_eq!(got, want, "{level:?}");
    }
    // Lloyd never increases the inertia of the assignment step.
    assert!(
        want.inertia.windows(2).all(|w| w[1] <= w[0] * (1.0 + 1e-6)),
        "{:?}",
        want.inertia
    );
}

#[test]
fn philox_known_answers() {
    // Random123's kat_vectors for philox4x32_10.
    assert_eq!(
        math::philox4x32_10([0, 0, 0, 0], [0, 0]),
        [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]
    );
    assert_eq!(
        math::philox4x32_10([u32::MAX; 4], [u32::MAX; 2]),
        [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd]
    );
    assert_eq!(
        math::philox4x32_10(
            [0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344],
            [0xa4093822, 0x299f31d0]
        ),
        [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1]
    );
}

#[test]
fn ln_and_sincos_are_accurate_against_f64() {
    let mut worst_ln = 0f64;
    let mut worst_sc = 0f64;
    for i in 0..200_000u32 {
        let w = i.wrapping_mul(2654435761) ^ (i >> 3);
        let u = math::uniform_open(w);
        assert!(u > 0.0 && u < 1.0);
        let l = math::ln_unit(u) as f64;
        let e = (u as f64).ln();
        worst_ln = worst_ln.max((l - e).abs() / e.abs().max(1e-3));
        let a = w >> 8;
        let (s, c) = math::sincos_turns(a);
        let t = std::f64::consts::TAU * a as f64 / (1u64 << 24) as f64;
        worst_sc = worst_sc
            .max((s as f64 - t.sin()).abs())
            .max((c as f64 - t.cos()).abs());
    }
    assert!(worst_ln < 4e-7, "ln_unit relative error {worst_ln:e}");
    assert!(worst_sc < 4e-7, "sincos_turns absolute error {worst_sc:e}");
    assert_eq!(math::ln_unit(1.0), 0.0);
}

#[test]
fn gaussian_stream_has_the_moments_of_a_standard_normal() {
    let key = math::philox_key(42);
    let (mut n, mut sum, mut sq, mut within1, mut min, mut max) =
        (0f64, 0f64, 0f64, 0f64, f32::MAX, f32::MIN);
    for row in 0..50_000u64 {
        for g in math::gaussian4(key, row, 0) {
            n += 1.0;
            sum += g as f64;
            sq += (g as f64).powi(2);
            within1 += ((g.abs() < 1.0) as u8) as f64;
            min = min.min(g);
            max = max.max(g);
        }
    }
    let mean = sum / n;
    let var = sq / n - mean * mean;
    assert!(mean.abs() < 0.01, "mean {mean}");
    assert!((var - 1.0).abs() < 0.02, "variance {var}");
    assert!(
        (within1 / n - 0.682_689).abs() < 0.005,
        "P(|g| < 1) = {}",
        within1 / n
    );
    assert!(
        min > -6.0 && max < 6.0 && min < -3.5 && max > 3.5,
        "range {min} .. {max}"
    );
}
