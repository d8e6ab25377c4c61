//! Small fixed cases whose results are pinned, so that any change in results shows up in review.

use recall_cpu_simd::*;
use recall_kernel_shared::math;
use std::fmt::Write;

fn show(top: &TopK) -> String {
    let mut s = String::new();
    for q in 0..top.n_queries() {
        let (ids, scores) = top.query(q);
        let pairs: Vec<String> = ids
            .iter()
            .zip(scores)
            .map(|(i, v)| format!("{i}:{v:e}({:#010x})", v.to_bits()))
            .collect();
        let _ = writeln!(s, "q{q}: {}", pairs.join(" "));
    }
    s
}

const CORPUS: [f32; 20] = [
    1.0, 0.0, 0.0, 0.0, //
    0.0, 1.0, 0.0, 0.0, //
    0.5, 0.5, 0.5, 0.5, //
    -1.0, 2.0, -0.25, 0.125, //
    0.1, 0.2, 0.3, 0.4,
];
const QUERIES: [f32; 8] = [1.0, 0.5, 0.25, 0.0, -0.5, 0.0, 2.0, 1.0];

#[test]
fn knn_small_fixed_cases() {
    let mut s = String::new();
    for dtype in ["f32", "f16", "bf16"] {
        let f16s: Vec<half::f16> = CORPUS.iter().map(|v| half::f16::from_f32(*v)).collect();
        let bf16s: Vec<half::bf16> = CORPUS.iter().map(|v| half::bf16::from_f32(*v)).collect();
        let vectors = match dtype {
            "f32" => Vectors::F32(&CORPUS),
            "f16" => Vectors::F16(&f16s),
            _ => Vectors::Bf16(&bf16s),
        };
        for metric in [Metric::Cosine, Metric::Dot, Metric::L2] {
            let top = knn(&QUERIES, &Corpus::new(vectors, 4), metric, 5).expect("valid");
            let _ = write!(s, "{dtype} {metric:?}\n{}", show(&top));
        }
    }
    let cand = score_candidates(
        &QUERIES,
        &Corpus::f32(&CORPUS, 4),
        Metric::Cosine,
        &[0, 3, 5],
        &[4, 2, 0, 3, 1],
        2,
    )
    .expect("valid");
    let _ = write!(s, "candidates cosine\n{}", show(&cand));
    let t = topk(&[0.0, -0.0, 1.0, 1.0, -2.0, 0.5], 3, 3, Order::HigherFirst).expect("valid");
    let _ = write!(s, "topk with ties\n{}", show(&t));
    insta::assert_snapshot!(s);
}

#[test]
fn spread_small_fixed_case() {
    // 0 -> 1 (0.5), 0 -> 2 (1.0), 1 -> 3 (2.0), 2 -> 3 (0.25), 3 -> 0 (1.0), 3 -> 4 (0.125)
    let indptr = [0, 2, 3, 4, 6, 6];
    let indices = [1, 2, 3, 3, 0, 4];
    let weights = [0.5, 1.0, 2.0, 0.25, 1.0, 0.125];
    let g = SpreadGraph::from_csr(&indptr, &indices, &weights).expect("valid");
    let r = spread(
        &g,
        &[1.0, 0.0, 0.0, 0.0, 0.0],
        &SpreadParams {
            decay: 0.7,
            threshold: 0.05,
            hops: 3,
            k: 5,
        },
    )
    .expect("valid");
    let acts: Vec<String> = r.activation.iter().map(|v| format!("{v:e}")).collect();
    insta::assert_snapshot!(format!(
        "activation: {}\ntop:\n{}",
        acts.join(" "),
        show(&r.top)
    ));
}

#[test]
fn kmeans_small_fixed_case() {
    let pts: Vec<f32> = (0..24)
        .map(|i| ((i * 7) % 11) as f32 - 5.0 + (i / 8) as f32 * 0.25)
        .collect();
    let r = kmeans(&pts, 2, 3, 4, 2026).expect("valid");
    let seeds = kmeans_seed_indices(1000, 8, 2026).expect("valid k");
    insta::assert_snapshot!(format!(
        "seed indices (n = 1000, k = 8): {seeds:?}\ncentroids: {:?}\nassignments: {:?}\ninertia: {:?}",
        r.centroids, r.assignments, r.inertia
    ));
}

#[test]
fn clip_and_noise_small_fixed_case() {
    let x = [
        3.0f32, 4.0, 0.0, 0.0, 0.1, 0.2, 0.3, 0.4, -1.0, 0.0, 0.0, 0.0, 0.0,
    ];
    let out = clip_and_noise(&x[..12], 6, 1.0, 0.5, 7).expect("valid");
    let g = math::gaussian4(math::philox_key(7), 0, 0);
    let words = math::philox4x32_10([0, 0, 0, math::DOMAIN_NOISE], math::philox_key(7));
    insta::assert_snapshot!(format!(
        "out: {out:?}\ngaussian4(seed 7, row 0, block 0): {g:?}\nphilox words: {words:08x?}\nln_unit(0.5) = {:e}\nsincos_turns(2^21) = {:?}",
        math::ln_unit(0.5),
        math::sincos_turns(1 << 21)
    ));
}
