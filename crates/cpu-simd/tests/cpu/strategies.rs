//! Every proptest strategy of the crate's tests, in one place.

use proptest::prelude::*;

/// Dimensions that stress the tails of every SIMD path (8 and 16 lanes), plus small random ones.
pub fn dim() -> impl Strategy<Value = usize> {
    prop_oneof![
        1 => Just(1usize),
        1 => Just(3usize),
        1 => Just(33usize),
        1 => Just(767usize),
        1 => Just(768usize),
        1 => Just(1025usize),
        4 => 1usize..=40,
    ]
}

/// Moderate values (plus exact zeros of both signs): the f64 comparisons' error bounds hold.
pub fn value() -> impl Strategy<Value = f32> + Clone {
    prop_oneof![
        12 => -4.0f32..4.0,
        1 => Just(0.0f32),
        1 => Just(-0.0f32),
        1 => (-8i32..8).prop_map(|i| i as f32 * 0.5),
    ]
}

/// Anything finite: subnormals, huge values that overflow a dot product, zeros of both signs.
pub fn wide_value() -> impl Strategy<Value = f32> + Clone {
    prop_oneof![
        6 => -4.0f32..4.0,
        1 => Just(0.0f32),
        1 => Just(-0.0f32),
        1 => -1e-38f32..1e-38,
        1 => -3e19f32..3e19,
        1 => proptest::num::f32::NORMAL | proptest::num::f32::SUBNORMAL | proptest::num::f32::ZERO,
    ]
}

/// A dense case: `nq` queries and `n` corpus rows of dimension `dim`, and a `k` in `1 ..= n` (often `n`).
#[derive(Clone, Debug)]
pub struct DenseCase {
    pub dim: usize,
    pub nq: usize,
    pub n: usize,
    pub queries: Vec<f32>,
    pub corpus: Vec<f32>,
    pub k: usize,
}

fn dense_case_with<S: Strategy<Value = f32> + Clone>(v: S) -> impl Strategy<Value = DenseCase> {
    dim()
        .prop_flat_map(|d| {
            let cap: usize = if d > 100 { 12 } else { 40 };
            (Just(d), 1..=cap, 1..=cap)
        })
        .prop_flat_map(move |(dim, nq, n)| {
            (
                Just(dim),
                Just(nq),
                Just(n),
                proptest::collection::vec(v.clone(), nq * dim),
                proptest::collection::vec(v.clone(), n * dim),
                1..=n,
                any::<bool>(),
            )
        })
        .prop_map(|(dim, nq, n, queries, corpus, k, full)| DenseCase {
            dim,
            nq,
            n,
            queries,
            corpus,
            k: if full { n } else { k },
        })
}

pub fn dense_case() -> impl Strategy<Value = DenseCase> {
    dense_case_with(value())
}

pub fn wide_dense_case() -> impl Strategy<Value = DenseCase> {
    dense_case_with(wide_value())
}

/// A score matrix with many ties (few distinct values, zeros of both signs).
pub fn score_matrix() -> impl Strategy<Value = (usize, Vec<f32>, usize)> {
    (1usize..50, 1usize..6).prop_flat_map(|(n_cols, n_rows)| {
        let v = prop_oneof![
            Just(0.0f32),
            Just(-0.0f32),
            Just(1.0f32),
            Just(-1.0f32),
            -2.0f32..2.0,
            Just(f32::MAX),
            Just(f32::MIN)
        ];
        (
            Just(n_cols),
            proptest::collection::vec(v, n_cols * n_rows),
            1..=n_cols,
        )
    })
}

/// A random weighted CSR graph: (indptr, indices, weights).
#[derive(Clone, Debug)]
pub struct GraphCase {
    pub n: usize,
    pub indptr: Vec<usize>,
    pub indices: Vec<u32>,
    pub weights: Vec<f32>,
    pub seeds: Vec<f32>,
    pub decay: f32,
    pub threshold: f32,
    pub hops: usize,
    pub k: usize,
}

pub fn graph_case() -> impl Strategy<Value = GraphCase> {
    (1usize..60)
        .prop_flat_map(|n| {
            // Per node out-degree; a few hubs get up to 150 in-edges to exercise every lane and the tree.
            let degs = proptest::collection::vec(prop_oneof![6 => 0usize..5, 1 => 30usize..80], n);
            (Just(n), degs)
        })
        .prop_flat_map(|(n, degs)| {
            let e: usize = degs.iter().sum();
            let hub = prop_oneof![3 => 0..n as u32, 1 => Just(0u32)];
            let w = prop_oneof![8 => 0.0f32..2.0, 1 => Just(0.0f32), 1 => Just(-0.0f32)];
            let seed = prop_oneof![2 => 0.0f32..3.0, 3 => Just(0.0f32), 1 => Just(-0.0f32)];
            (
                Just(n),
                Just(degs),
                proptest::collection::vec(hub, e),
                proptest::collection::vec(w, e),
                proptest::collection::vec(seed, n),
                prop_oneof![0.05f32..=1.0, Just(1.0f32)],
                prop_oneof![Just(0.0f32), 0.0f32..0.5],
                1usize..4,
                1..=n,
            )
        })
        .prop_map(
            |(n, degs, indices, weights, seeds, decay, threshold, hops, k)| {
                let mut indptr = vec![0usize];
                for d in &degs {
                    indptr.push(indptr[indptr.len() - 1] + d);
                }
                GraphCase {
                    n,
                    indptr,
                    indices,
                    weights,
                    seeds,
                    decay,
                    threshold,
                    hops,
                    k,
                }
            },
        )
}

/// Points for k-means: (dim, points, k, iters, seed); duplicates on purpose to make ties and empty clusters.
pub fn kmeans_case() -> impl Strategy<Value = (usize, Vec<f32>, usize, usize, u64)> {
    (
        prop_oneof![Just(1usize), Just(3), Just(33), 1usize..20],
        1usize..80,
    )
        .prop_flat_map(|(d, n)| {
            let v = prop_oneof![4 => -4.0f32..4.0, 1 => (-2i32..3).prop_map(|i| i as f32)];
            (
                Just(d),
                proptest::collection::vec(v, n * d),
                1..=n,
                1usize..5,
                any::<u64>(),
            )
        })
}
