//! Similarity, knn, candidate scoring and top-k: every SIMD level and dtype against the literal order
//! (bit for bit) and against f64 (within the error bound of the chain).

use crate::oracle::*;
use crate::strategies::*;
use proptest::prelude::*;
use recall_cpu_simd::{Corpus, Cpu, Metric, Order, available_levels, topk};

fn check_f64(metric: Metric, queries: &[f32], corpus: &[f32], dim: usize, got: &[f32]) {
    for (i, (g, (e, bound))) in got
        .iter()
        .zip(f64_scores(metric, queries, corpus, dim))
        .enumerate()
    {
        let err = (*g as f64 - e).abs();
        assert!(
            err <= bound,
            "{metric:?}[{i}]: f32 {g:e} vs f64 {e:e}: error {err:e} > bound {bound:e}"
        );
    }
}

fn coprime_step(n: usize) -> usize {
    let gcd = |mut a: usize, mut b: usize| {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    };
    (7..).find(|p| gcd(*p, n) == 1).unwrap_or(1)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn similarity_and_knn_every_level_dtype_metric(case in dense_case()) {
        let dim = case.dim;
        for dtype in DTYPES {
            let st = Stored::new(dtype, &case.corpus);
            for metric in METRICS {
                let want = ref_scores(metric, &case.queries, &st.f32s, dim);
                check_f64(metric, &case.queries, &st.f32s, dim, &want);
                let (want_ids, want_top) = ref_topk(&want, case.n, case.k, metric.order() == Order::HigherFirst);
                for level in available_levels() {
                    let cpu = Cpu::with_level(level);
                    let got = cpu.similarity(&case.queries, &st.corpus(dim), metric).expect("valid input");
                    assert_same(&format!("{level:?} {dtype:?} {metric:?} similarity"), &got, &want);
                    let top = cpu.knn(&case.queries, &st.corpus(dim), metric, case.k).expect("valid input");
                    prop_assert_eq!(&top.ids, &want_ids, "{:?} {:?} {:?} knn ids", level, dtype, metric);
                    assert_same(&format!("{level:?} {dtype:?} {metric:?} knn scores"), &top.scores, &want_top);
                }
            }
        }
    }

    #[test]
    fn wide_values_stay_bit_identical(case in wide_dense_case()) {
        // Subnormals, huge values whose dot products overflow to inf and NaN: every level still agrees.
        let dim = case.dim;
        for dtype in [Dtype::F32, Dtype::Bf16] {
            let st = Stored::new(dtype, &case.corpus);
            if st.f32s.iter().any(|v| !v.is_finite()) {
                // Rounding to bf16 overflowed: that input is refused, not computed.
                let err = Cpu::new().knn(&case.queries, &st.corpus(dim), Metric::Dot, 1);
                let refused = matches!(err, Err(recall_cpu_simd::CpuError::NonFinite { .. }));
                prop_assert!(refused);
                continue;
            }
            for metric in METRICS {
                let want = ref_scores(metric, &case.queries, &st.f32s, dim);
                let (want_ids, want_top) = ref_topk(&want, case.n, case.k, metric.order() == Order::HigherFirst);
                for level in available_levels() {
                    let cpu = Cpu::with_level(level);
                    let got = cpu.similarity(&case.queries, &st.corpus(dim), metric).expect("valid input");
                    assert_same(&format!("{level:?} {dtype:?} {metric:?}"), &got, &want);
                    let top = cpu.knn(&case.queries, &st.corpus(dim), metric, case.k).expect("valid input");
                    prop_assert_eq!(&top.ids, &want_ids);
                    assert_same("knn scores", &top.scores, &want_top);
                }
            }
        }
    }

    #[test]
    fn row_norms_and_cosine_scores(case in wide_dense_case()) {
        let dim = case.dim;
        let want_norms: Vec<f32> = case.corpus.chunks_exact(dim).map(recall_cpu_simd::reference::norm).collect();
        let qn: Vec<f32> = case.queries.chunks_exact(dim).map(recall_cpu_simd::reference::norm).collect();
        let want = ref_scores(Metric::Cosine, &case.queries, &case.corpus, dim);
        for level in available_levels() {
            let cpu = Cpu::with_level(level);
            let norms = cpu.row_norms(&case.corpus, dim).expect("valid input");
            assert_same("row norms", &norms, &want_norms);
            let mut out = vec![0.0; case.nq * case.n];
            cpu.cosine_scores(&case.queries, &qn, &case.corpus, &norms, dim, &mut out).expect("valid input");
            assert_same("cosine_scores", &out, &want);
            // Precomputed norms give the same knn as computed ones.
            let corpus = Corpus::f32(&case.corpus, dim).with_norms(&norms);
            let a = cpu.knn(&case.queries, &corpus, Metric::Cosine, case.k).expect("valid input");
            let b = cpu.knn(&case.queries, &Corpus::f32(&case.corpus, dim), Metric::Cosine, case.k).expect("valid input");
            prop_assert_eq!(&a.ids, &b.ids);
            assert_same("knn with given norms", &a.scores, &b.scores);
        }
    }

    #[test]
    fn score_candidates_every_level_dtype_metric(case in dense_case()) {
        let (dim, n, k) = (case.dim, case.n, case.k);
        let step = coprime_step(n);
        let mut offsets = vec![0usize];
        let mut ids = Vec::new();
        for q in 0..case.nq {
            let m = n - (q % (n - k + 1));
            ids.extend((0..m).map(|i| ((i * step + q) % n) as u32));
            offsets.push(ids.len());
        }
        for dtype in DTYPES {
            let st = Stored::new(dtype, &case.corpus);
            for metric in METRICS {
                let all = ref_scores(metric, &case.queries, &st.f32s, dim);
                let (mut want_ids, mut want_top) = (Vec::new(), Vec::new());
                for q in 0..case.nq {
                    let mut pairs: Vec<(f32, u32)> = ids[offsets[q]..offsets[q + 1]].iter().map(|id| (all[q * n + *id as usize], *id)).collect();
                    pairs.sort_by(|a, b| rank(*a, *b, metric.order() == Order::HigherFirst));
                    want_ids.extend(pairs[..k].iter().map(|p| p.1));
                    want_top.extend(pairs[..k].iter().map(|p| p.0));
                }
                for level in available_levels() {
                    let top = Cpu::with_level(level)
                        .score_candidates(&case.queries, &st.corpus(dim), metric, &offsets, &ids, k)
                        .expect("valid input");
                    prop_assert_eq!(&top.ids, &want_ids);
                    assert_same("candidate scores", &top.scores, &want_top);
                }
            }
        }
    }

    #[test]
    fn topk_of_any_score_matrix((n, scores, k) in score_matrix()) {
        for order in [Order::HigherFirst, Order::LowerFirst] {
            let got = topk(&scores, n, k, order).expect("valid input");
            let (ids, top) = ref_topk(&scores, n, k, order == Order::HigherFirst);
            prop_assert_eq!(&got.ids, &ids);
            assert_same("topk", &got.scores, &top);
            prop_assert_eq!(got.n_queries(), scores.len() / n);
        }
    }
}

/// A deterministic pseudo-random matrix (values in `[-2, 2)`).
pub fn lcg_matrix(len: usize, seed: u64) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..len)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
        })
        .collect()
}

fn knn_against_reference(dim: usize, nq: usize, n: usize, k: usize, metrics: &[Metric]) {
    let queries = lcg_matrix(nq * dim, 1);
    let corpus = lcg_matrix(n * dim, 2);
    for metric in metrics {
        let want = ref_scores(*metric, &queries, &corpus, dim);
        let (ids, top) = ref_topk(&want, n, k, metric.order() == Order::HigherFirst);
        for level in available_levels() {
            let got = Cpu::with_level(level)
                .knn(&queries, &Corpus::f32(&corpus, dim), *metric, k)
                .expect("valid input");
            assert_eq!(got.ids, ids, "{level:?} {metric:?}");
            assert_same("knn", &got.scores, &top);
        }
    }
}

#[test]
fn knn_streams_many_blocks_in_parallel() {
    // 150 rows of 1025 dims span several blocks; 20 * 150 * 1025 multiply-adds take the parallel path.
    knn_against_reference(1025, 20, 150, 10, &METRICS);
    // 70 queries: pairs of query groups and a group left over on every level, transposed once and shared by
    // the parallel tasks (1,000 rows of 129 dims are three blocks); the last block ends in a partial tile.
    knn_against_reference(129, 70, 1_000, 10, &METRICS);
    // d = 3: 10,000 rows span three blocks.
    knn_against_reference(3, 3, 10_000, 7, &[Metric::Dot, Metric::L2]);
}

#[test]
fn knn_splits_the_queries_of_a_corpus_of_few_blocks() {
    // On a pool of two threads (eight tasks wanted): 100 queries over 200 rows of 128 (one block) run as seven
    // query groups of 16 (the last of 4); over 600 rows (two blocks), as four groups (32, 32, 32, 4) times two
    // block ranges, each group's two ranges merged.
    let two = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .expect("a pool of two threads");
    two.install(|| knn_against_reference(128, 100, 200, 10, &METRICS));
    two.install(|| knn_against_reference(128, 100, 600, 10, &METRICS));
    two.install(|| knn_against_reference(128, 100, 600, 600, &[Metric::Dot]));
}

#[test]
fn knn_with_many_queries_and_k_equal_to_n() {
    // 40 queries, k = n = 30,000: the query-split parallel path (at least 16 queries a thread), each part's
    // queries prepared on their own. On a pool of two threads, so the path is taken on any machine.
    let two = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .expect("a pool of two threads");
    two.install(|| knn_against_reference(2, 40, 30_000, 30_000, &[Metric::L2]));
    // 48 queries of 33 dims, k = n = 22,000: parts of 32 and 16 queries, each prepared on its own (pairs of
    // groups, and a group alone).
    two.install(|| knn_against_reference(33, 48, 22_000, 22_000, &[Metric::Dot, Metric::L2]));
}

#[test]
fn lanes_are_independent_of_their_neighbours() {
    // A query of all -0.0 against rows of -0.0: the chain's +0.0 start must survive (no padding of k).
    let dim = 17;
    let queries = vec![-0.0f32; 9 * dim];
    let corpus = vec![-0.0f32; 19 * dim];
    for level in available_levels() {
        let s = Cpu::with_level(level)
            .similarity(&queries, &Corpus::f32(&corpus, dim), Metric::Dot)
            .expect("valid");
        assert!(
            s.iter().all(|v| v.to_bits() == 0),
            "{level:?}: every dot must be +0.0"
        );
    }
}

#[test]
fn one_query_cosine_every_tail_shape() {
    // The fused dot + norm pass of the one-query cosine path, over every tail of rows and k.
    for dim in [1usize, 3, 4, 5, 33, 767, 768, 1025] {
        for n in [1usize, 7, 8, 15, 16, 17, 31, 33, 100] {
            let mut corpus = lcg_matrix(n * dim, (dim * 1000 + n) as u64);
            corpus[0] = -0.0;
            if n > 3 {
                // A zero row: its norm is 0 and its cosine must be exactly 0.
                corpus[3 * dim..4 * dim].fill(0.0);
            }
            let q = lcg_matrix(dim, 7);
            let want = ref_scores(Metric::Cosine, &q, &corpus, dim);
            for level in available_levels() {
                let got = Cpu::with_level(level)
                    .similarity(&q, &Corpus::f32(&corpus, dim), Metric::Cosine)
                    .expect("valid input");
                assert_same(&format!("{level:?} d{dim} n{n}"), &got, &want);
            }
        }
    }
}
