//! Bad input is a typed error, never a panic; the messages are snapshotted for review.

use recall_cpu_simd::*;

fn graph() -> (Vec<usize>, Vec<u32>, Vec<f32>) {
    (vec![0, 2, 3, 3], vec![1, 2, 0], vec![0.5, 1.0, 2.0])
}

#[test]
fn every_bad_input_is_a_typed_error() {
    let c = vec![1.0f32; 12];
    let q = vec![1.0f32; 4];
    let corpus = Corpus::f32(&c, 4);
    let (ip, ix, w) = graph();
    let g = SpreadGraph::from_csr(&ip, &ix, &w).expect("valid graph");
    let p = SpreadParams {
        decay: 0.5,
        threshold: 0.0,
        hops: 2,
        k: 1,
    };
    let nan = [1.0, f32::NAN, 0.0, 0.0];
    let inf = [f32::INFINITY, 0.0, 0.0, 0.0];
    let cases: Vec<(&str, CpuError)> = vec![
        (
            "dim mismatch",
            knn(&[1.0; 3], &corpus, Metric::Dot, 1).unwrap_err(),
        ),
        (
            "zero dim",
            knn(&q, &Corpus::f32(&c, 0), Metric::Dot, 1).unwrap_err(),
        ),
        (
            "ragged corpus",
            knn(&q, &Corpus::f32(&c[..10], 4), Metric::Dot, 1).unwrap_err(),
        ),
        (
            "empty corpus",
            knn(&q, &Corpus::f32(&[], 4), Metric::Dot, 1).unwrap_err(),
        ),
        (
            "empty queries",
            knn(&[], &corpus, Metric::Dot, 1).unwrap_err(),
        ),
        ("k = 0", knn(&q, &corpus, Metric::Cosine, 0).unwrap_err()),
        ("k > n", knn(&q, &corpus, Metric::L2, 4).unwrap_err()),
        ("nan query", knn(&nan, &corpus, Metric::Dot, 1).unwrap_err()),
        (
            "inf corpus",
            similarity(&q, &Corpus::f32(&inf, 4), Metric::Dot).unwrap_err(),
        ),
        (
            "inf f16 corpus",
            knn(
                &q,
                &Corpus::new(Vectors::F16(&[half::f16::INFINITY; 4]), 4),
                Metric::Dot,
                1,
            )
            .unwrap_err(),
        ),
        (
            "nan bf16 corpus",
            knn(
                &q,
                &Corpus::new(Vectors::Bf16(&[half::bf16::NAN; 4]), 4),
                Metric::Dot,
                1,
            )
            .unwrap_err(),
        ),
        (
            "norms length",
            knn(&q, &corpus.with_norms(&[1.0]), Metric::Cosine, 1).unwrap_err(),
        ),
        (
            "negative norm",
            knn(&q, &corpus.with_norms(&[1.0, -1.0, 1.0]), Metric::Cosine, 1).unwrap_err(),
        ),
        (
            "candidate id out of range",
            score_candidates(&q, &corpus, Metric::Dot, &[0, 2], &[0, 3], 1).unwrap_err(),
        ),
        (
            "duplicate candidate",
            score_candidates(&q, &corpus, Metric::Dot, &[0, 2], &[1, 1], 1).unwrap_err(),
        ),
        (
            "candidate offsets",
            score_candidates(&q, &corpus, Metric::Dot, &[0, 3, 2], &[0, 1], 1).unwrap_err(),
        ),
        (
            "candidate k > list",
            score_candidates(&q, &corpus, Metric::Dot, &[0, 1], &[2], 2).unwrap_err(),
        ),
        (
            "topk nan score",
            topk(&[1.0, f32::NAN], 2, 1, Order::HigherFirst).unwrap_err(),
        ),
        (
            "topk ragged",
            topk(&[1.0, 2.0, 3.0], 2, 1, Order::HigherFirst).unwrap_err(),
        ),
        (
            "cosine_scores output",
            cosine_scores(&q, &[2.0], &c, &[2.0; 3], 4, &mut [0.0; 2]).unwrap_err(),
        ),
        ("row_norms ragged", row_norms(&c[..5], 4).unwrap_err()),
        (
            "indptr decreases",
            SpreadGraph::from_csr(&[0, 2, 1, 3], &ix, &w).unwrap_err(),
        ),
        (
            "indptr start",
            SpreadGraph::from_csr(&[1, 2, 3, 3], &ix, &w).unwrap_err(),
        ),
        (
            "indptr end",
            SpreadGraph::from_csr(&[0, 2, 3, 4], &ix, &w).unwrap_err(),
        ),
        (
            "column out of range",
            SpreadGraph::from_csr(&ip, &[1, 3, 0], &w).unwrap_err(),
        ),
        (
            "weights length",
            SpreadGraph::from_csr(&ip, &ix, &[1.0]).unwrap_err(),
        ),
        (
            "negative weight",
            SpreadGraph::from_csr(&ip, &ix, &[1.0, -1.0, 1.0]).unwrap_err(),
        ),
        (
            "nan weight",
            SpreadGraph::from_csr(&ip, &ix, &[1.0, f32::NAN, 1.0]).unwrap_err(),
        ),
        (
            "empty graph",
            SpreadGraph::from_csr(&[0], &[], &[]).unwrap_err(),
        ),
        ("seeds length", spread(&g, &[1.0], &p).unwrap_err()),
        (
            "negative seed",
            spread(&g, &[1.0, -2.0, 0.0], &p).unwrap_err(),
        ),
        (
            "decay 0",
            spread(&g, &[1.0; 3], &SpreadParams { decay: 0.0, ..p }).unwrap_err(),
        ),
        (
            "decay > 1",
            spread(&g, &[1.0; 3], &SpreadParams { decay: 1.5, ..p }).unwrap_err(),
        ),
        (
            "decay nan",
            spread(
                &g,
                &[1.0; 3],
                &SpreadParams {
                    decay: f32::NAN,
                    ..p
                },
            )
            .unwrap_err(),
        ),
        (
            "threshold < 0",
            spread(
                &g,
                &[1.0; 3],
                &SpreadParams {
                    threshold: -0.1,
                    ..p
                },
            )
            .unwrap_err(),
        ),
        (
            "threshold inf",
            spread(
                &g,
                &[1.0; 3],
                &SpreadParams {
                    threshold: f32::INFINITY,
                    ..p
                },
            )
            .unwrap_err(),
        ),
        (
            "hops 0",
            spread(&g, &[1.0; 3], &SpreadParams { hops: 0, ..p }).unwrap_err(),
        ),
        (
            "spread k > n",
            spread(&g, &[1.0; 3], &SpreadParams { k: 4, ..p }).unwrap_err(),
        ),
        (
            "overflow",
            spread(&g, &[3e38, 3e38, 3e38], &SpreadParams { decay: 1.0, ..p }).unwrap_err(),
        ),
        ("kmeans k > n", kmeans(&c, 4, 4, 1, 0).unwrap_err()),
        ("kmeans k = 0", kmeans(&c, 4, 0, 1, 0).unwrap_err()),
        ("kmeans iters", kmeans(&c, 4, 1, 0, 0).unwrap_err()),
        ("kmeans nan", kmeans(&nan, 2, 1, 1, 0).unwrap_err()),
        (
            "kmeans distance overflow",
            kmeans(&[0.0, 0.0, 2e19, 2e19], 2, 1, 3, 0).unwrap_err(),
        ),
        (
            "kmeans centroid overflow",
            kmeans(&[3e38; 4], 1, 1, 1, 0).unwrap_err(),
        ),
        (
            "kmeans centroid overflow, then distances",
            kmeans(&[3e38; 4], 1, 1, 2, 0).unwrap_err(),
        ),
        ("clip 0", clip_and_noise(&c, 4, 0.0, 1.0, 0).unwrap_err()),
        (
            "sigma < 0",
            clip_and_noise(&c, 4, 1.0, -1.0, 0).unwrap_err(),
        ),
        (
            "sigma nan",
            clip_and_noise(&c, 4, 1.0, f32::NAN, 0).unwrap_err(),
        ),
        ("simd name", SimdLevel::parse("sse9").unwrap_err()),
        ("seed k > n", kmeans_seed_indices(3, 4, 0).unwrap_err()),
        ("seed k = 0", kmeans_seed_indices(3, 0, 0).unwrap_err()),
    ];
    let text: String = cases
        .iter()
        .map(|(what, e)| format!("{what}: {e}\n  {e:?}\n"))
        .collect();
    insta::assert_snapshot!(text);
}

#[test]
fn streamed_finiteness_check_reports_the_first_bad_value() {
    // Large enough for the parallel, block-by-block check inside knn.
    let (n, d) = (100_000, 32);
    let q = vec![0.5f32; 2 * d];
    for bad in [
        [3_000_000usize, 3_000_001],
        [100, 3_000_000],
        [2_999_999, 40],
    ] {
        let mut c = vec![1.0f32; n * d];
        c[bad[0]] = f32::NAN;
        c[bad[1]] = f32::NEG_INFINITY;
        let first = bad[0].min(bad[1]);
        for level in available_levels() {
            let e = Cpu::with_level(level)
                .knn(&q, &Corpus::f32(&c, d), Metric::Dot, 5)
                .unwrap_err();
            assert_eq!(
                e,
                CpuError::NonFinite {
                    what: "corpus",
                    index: first
                }
            );
            // Similarity checks in its own pass too, on a prevalidated handle as well.
            for cpu in [
                Cpu::with_level(level),
                Cpu::with_level(level).prevalidated(),
            ] {
                let e = cpu
                    .similarity(&q, &Corpus::f32(&c, d), Metric::L2)
                    .unwrap_err();
                assert_eq!(
                    e,
                    CpuError::NonFinite {
                        what: "corpus",
                        index: first
                    }
                );
            }
        }
        let bf: Vec<half::bf16> = c.iter().map(|v| half::bf16::from_f32(*v)).collect();
        let e = knn(&q, &Corpus::new(Vectors::Bf16(&bf), d), Metric::L2, 5).unwrap_err();
        assert_eq!(
            e,
            CpuError::NonFinite {
                what: "corpus",
                index: first
            }
        );
    }
}

#[test]
fn candidate_scoring_checks_the_rows_it_reads() {
    let mut c = vec![1.0f32; 5 * 4];
    c[2 * 4 + 1] = f32::NAN; // row 2
    c[4 * 4 + 3] = f32::INFINITY; // row 4
    let q = [1.0f32; 4];
    let corpus = Corpus::f32(&c, 4);
    let ok = score_candidates(&q, &corpus, Metric::Dot, &[0, 2], &[0, 3], 1)
        .expect("rows 0 and 3 are finite");
    assert_eq!(ok.ids.len(), 1);
    let e = score_candidates(&q, &corpus, Metric::Dot, &[0, 3], &[4, 0, 2], 1).unwrap_err();
    assert_eq!(
        e,
        CpuError::NonFinite {
            what: "corpus",
            index: 9
        }
    );
}

#[test]
fn a_hub_with_100k_in_edges_follows_the_lane_order() {
    // Node 0 sends 100,003 parallel edges of varied weight to node 1: one in-edge list of 100,003 entries.
    let m = 100_003usize;
    let weights: Vec<f32> = (0..m).map(|i| 1.0 + (i % 97) as f32 * 0.013).collect();
    let g = SpreadGraph::from_csr(&[0, m, m], &vec![1u32; m], &weights).expect("valid");
    let a0 = 0.37f32;
    let mut lane = [0.0f32; 32];
    for (j, w) in weights.iter().enumerate() {
        lane[j % 32] = w.mul_add(a0, lane[j % 32]);
    }
    for off in [16, 8, 4, 2, 1] {
        for l in 0..off {
            lane[l] += lane[l + off];
        }
    }
    let want = lane[0] * 0.5;
    for mode in [SpreadMode::Pull, SpreadMode::Push, SpreadMode::Auto] {
        let r = spread_with_mode(
            &g,
            &[a0, 0.0],
            &SpreadParams {
                decay: 0.5,
                threshold: 0.0,
                hops: 1,
                k: 2,
            },
            mode,
        )
        .expect("valid");
        assert_eq!(r.activation[1].to_bits(), want.to_bits(), "{mode:?}");
        assert_eq!(r.activation[0].to_bits(), a0.to_bits());
    }
}

#[test]
fn fused_finiteness_check_catches_every_bad_value() {
    // Zero queries (cosine short-cuts to 0), given norms of 0, one and several queries, every metric.
    let dim = 5;
    let n = 300;
    for bad_at in [0usize, 7, 4 * dim + 2, n * dim - 1] {
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let mut c: Vec<f32> = (0..n * dim).map(|i| (i % 13) as f32 - 6.0).collect();
            c[bad_at] = bad;
            let zero_norms = vec![0.0f32; n];
            for nq in [1usize, 3, 20] {
                for q in [vec![0.0f32; nq * dim], vec![0.25f32; nq * dim]] {
                    for metric in [Metric::Cosine, Metric::Dot, Metric::L2] {
                        for with_norms in [false, true] {
                            let corpus = Corpus::f32(&c, dim);
                            let corpus = if with_norms {
                                corpus.with_norms(&zero_norms)
                            } else {
                                corpus
                            };
                            for level in available_levels() {
                                let want = CpuError::NonFinite {
                                    what: "corpus",
                                    index: bad_at,
                                };
                                let cpu = Cpu::with_level(level);
                                assert_eq!(cpu.knn(&q, &corpus, metric, 3).unwrap_err(), want);
                                assert_eq!(cpu.similarity(&q, &corpus, metric).unwrap_err(), want);
                            }
                        }
                    }
                }
            }
        }
    }
}

/// A prevalidated handle skips only the scans over values: on valid input it answers exactly as the
/// checking one, and shape, id and parameter errors (what keeps indexing in bounds) are still errors.
#[test]
fn prevalidated_handle_keeps_shape_checks_and_answers() {
    let c: Vec<f32> = (0..48).map(|i| (i % 7) as f32 - 2.5).collect();
    let q: Vec<f32> = (0..8).map(|i| (i % 3) as f32 + 0.5).collect();
    let corpus = Corpus::f32(&c, 4);
    let (full, pre) = (Cpu::new(), Cpu::new().prevalidated());
    assert!(pre.is_prevalidated() && !full.is_prevalidated());
    for m in [Metric::Cosine, Metric::Dot, Metric::L2] {
        assert_eq!(
            full.similarity(&q, &corpus, m).unwrap(),
            pre.similarity(&q, &corpus, m).unwrap()
        );
        assert_eq!(
            full.knn(&q, &corpus, m, 5).unwrap(),
            pre.knn(&q, &corpus, m, 5).unwrap()
        );
        let (offsets, ids) = ([0usize, 3, 6], [0u32, 4, 9, 11, 2, 7]);
        assert_eq!(
            full.score_candidates(&q, &corpus, m, &offsets, &ids, 2)
                .unwrap(),
            pre.score_candidates(&q, &corpus, m, &offsets, &ids, 2)
                .unwrap()
        );
    }
    assert_eq!(
        full.kmeans(&c, 4, 3, 2, 7).unwrap(),
        pre.kmeans(&c, 4, 3, 2, 7).unwrap()
    );
    assert_eq!(
        full.clip_and_noise(&c, 4, 1.0, 0.5, 3).unwrap(),
        pre.clip_and_noise(&c, 4, 1.0, 0.5, 3).unwrap()
    );
    // Shapes, ids and ranges: still errors.
    assert!(matches!(
        pre.similarity(&[1.0; 3], &corpus, Metric::Dot),
        Err(CpuError::RaggedMatrix { .. })
    ));
    assert!(matches!(
        pre.knn(&q, &corpus, Metric::Dot, 13),
        Err(CpuError::KOutOfRange { .. })
    ));
    assert!(matches!(
        pre.score_candidates(&q, &corpus, Metric::Dot, &[0, 1, 2], &[0, 12], 1),
        Err(CpuError::IdOutOfRange { .. })
    ));
    let (ip, ix, w) = graph();
    let g = SpreadGraph::from_csr(&ip, &ix, &w).expect("valid graph");
    let p = SpreadParams {
        decay: 0.5,
        threshold: 0.0,
        hops: 2,
        k: 1,
    };
    assert!(matches!(
        pre.spread(&g, &[1.0, 0.0], &p),
        Err(CpuError::LengthMismatch { .. })
    ));
    // Values: the checking handle refuses them. Similarity's corpus is checked in its own pass, as knn's,
    // on the prevalidated handle too (the scan costs nothing extra there).
    let mut bad = c.clone();
    bad[5] = f32::NAN;
    for h in [&full, &pre] {
        assert!(matches!(
            h.similarity(&q, &Corpus::f32(&bad, 4), Metric::Dot),
            Err(CpuError::NonFinite { .. })
        ));
    }
    assert!(matches!(
        full.spread(&g, &[1.0, -1.0, 0.0], &p),
        Err(CpuError::Negative { .. })
    ));
    assert!(pre.spread(&g, &[1.0, -1.0, 0.0], &p).is_ok());
}

/// The one-pass seed check names the same error, at the same index, as the finite scan then the sign scan:
/// a NaN or infinity anywhere first, else the first value below zero; `-0.0` and subnormals pass.
#[test]
fn seed_checks_name_the_first_bad_value_in_the_old_order() {
    let n = 10_000;
    let indptr: Vec<usize> = (0..=n).collect(); // node v -> (v + 1) % n
    let indices: Vec<u32> = (0..n).map(|v| ((v + 1) % n) as u32).collect();
    let weights = vec![0.5f32; n];
    let g = SpreadGraph::from_csr(&indptr, &indices, &weights).expect("valid graph");
    let p = SpreadParams {
        decay: 0.5,
        threshold: 0.0,
        hops: 1,
        k: 1,
    };
    let mut seeds = vec![0.0f32; n];
    seeds[0] = -0.0;
    seeds[1] = f32::from_bits(1); // the smallest subnormal
    seeds[n - 1] = f32::MAX;
    assert_eq!(check_spread_inputs(&g, &seeds, &p), Ok(()));
    let with = |changes: &[(usize, f32)]| {
        let mut s = seeds.clone();
        for &(i, x) in changes {
            s[i] = x;
        }
        check_spread_inputs(&g, &s, &p)
    };
    assert_eq!(
        with(&[(9_000, -f32::from_bits(1))]),
        Err(CpuError::Negative {
            what: "seeds",
            index: 9_000
        })
    );
    // A negative before a NaN: the NaN is named (the finite scan runs first over all values).
    assert_eq!(
        with(&[(10, -1.0), (8_000, f32::NAN)]),
        Err(CpuError::NonFinite {
            what: "seeds",
            index: 8_000
        })
    );
    assert_eq!(
        with(&[(4_097, f32::NEG_INFINITY), (4_096, -2.0)]),
        Err(CpuError::NonFinite {
            what: "seeds",
            index: 4_097
        })
    );
    assert_eq!(
        with(&[(4_095, -3.0), (4_096, -2.0)]),
        Err(CpuError::Negative {
            what: "seeds",
            index: 4_095
        })
    );
}

#[test]
fn clip_and_noise_into_checks_its_output_and_its_inputs() {
    let x = [3.0f32, 4.0, 0.3, 0.4];
    let mut short = [7.0f32; 3];
    assert_eq!(
        clip_and_noise_into(&x, 2, 1.0, 0.1, 5, &mut short),
        Err(CpuError::LengthMismatch {
            what: "clip-and-noise output",
            expected: 4,
            got: 3
        })
    );
    assert_eq!(short, [7.0; 3], "nothing written on an error");
    let mut out = [0.0f32; 4];
    assert!(matches!(
        clip_and_noise_into(&x, 2, 0.0, 0.1, 5, &mut out),
        Err(CpuError::ParamOutOfRange { what: "clip", .. })
    ));
    assert!(matches!(
        clip_and_noise_into(&[f32::NAN, 1.0], 2, 1.0, 0.1, 5, &mut out[..2]),
        Err(CpuError::NonFinite { .. })
    ));
}

#[test]
fn a_large_input_reports_its_first_non_finite_value() {
    // Large enough to be checked in parallel pieces of 2^21 values: the first bad value is reported, whichever
    // piece finishes first.
    let n = 9 << 20;
    let mut v = vec![1.0f32; n];
    assert_eq!(check_finite("v", &v), Ok(()));
    v[n - 1] = f32::INFINITY;
    v[(5 << 20) + 3] = f32::NAN;
    assert_eq!(
        check_finite("v", &v),
        Err(CpuError::NonFinite {
            what: "v",
            index: (5 << 20) + 3
        })
    );
    v[17] = f32::NEG_INFINITY;
    assert_eq!(
        check_finite("v", &v),
        Err(CpuError::NonFinite {
            what: "v",
            index: 17
        })
    );
}

#[test]
fn clip_and_noise_reports_its_first_non_finite_value_from_its_own_pass() {
    // Clip-and-noise checks its values in the pass that reads them (tasks of 256 rows, in parallel at this size):
    // the first bad value is reported whichever task finds one, at every level; a row whose squared norm
    // overflows while every value is finite is no error.
    let dim = 64;
    let n = 4096;
    let mut x: Vec<f32> = (0..n * dim).map(|i| (i % 97) as f32 * 0.01 - 0.4).collect();
    x[100 * dim + 5] = 3e30;
    x[100 * dim + 6] = -3e30;
    for level in available_levels() {
        let cpu = Cpu::with_level(level);
        let ok = cpu
            .clip_and_noise(&x, dim, 1.0, 0.5, 9)
            .expect("finite values, one norm past f32");
        assert!(ok.iter().all(|v| v.is_finite()), "{level:?}");
        let mut bad = x.clone();
        bad[3000 * dim + 1] = f32::INFINITY;
        bad[1500 * dim + 63] = f32::NAN;
        bad[3700 * dim] = f32::NAN;
        let want = CpuError::NonFinite {
            what: "vectors",
            index: 1500 * dim + 63,
        };
        assert_eq!(
            cpu.clip_and_noise(&bad, dim, 1.0, 0.5, 9),
            Err(want.clone()),
            "{level:?}"
        );
        let mut out = vec![0.0f32; bad.len()];
        assert_eq!(
            cpu.clip_and_noise_into(&bad, dim, 1.0, 0.5, 9, &mut out),
            Err(want.clone()),
            "{level:?}"
        );
        // The same verdict as the scan every other op runs first.
        assert_eq!(check_clip_noise_inputs(&bad, dim, 1.0, 0.5), Err(want));
        // Small inputs (one task, on the calling thread).
        let small = &bad[1500 * dim..1502 * dim];
        assert_eq!(
            cpu.clip_and_noise(small, dim, 1.0, 0.5, 9),
            Err(CpuError::NonFinite {
                what: "vectors",
                index: 63
            }),
            "{level:?}"
        );
    }
}

/// `cosine_scores` takes the norms from the caller: a NaN, `-inf` or negative norm is refused as a corpus's
/// attached norms are (`Corpus::with_norms`), never turned into NaN or sign-flipped scores; `+inf` (the norm of
/// finite values can overflow) is a norm.
#[test]
fn cosine_scores_checks_the_norms_it_is_given() {
    let (q, c) = (vec![1.0f32, 2.0, 3.0, 4.0], vec![1.0f32; 8]);
    let (qn, cn) = (row_norms(&q, 4).unwrap(), row_norms(&c, 4).unwrap());
    let mut out = [0.0f32; 2];
    for (bad, want) in [
        (f32::NAN, "non-finite"),
        (f32::NEG_INFINITY, "non-finite"),
        (-1.0, "negative"),
    ] {
        let err = cosine_scores(&q, &[bad], &c, &cn, 4, &mut out).unwrap_err();
        let is = |what| match (&err, want) {
            (CpuError::NonFinite { what: w, index: 0 }, "non-finite") => *w == what,
            (CpuError::Negative { what: w, index: 0 }, "negative") => *w == what,
            _ => false,
        };
        assert!(is("query norms"), "query norm {bad}: {err:?}");
        let err = cosine_scores(&q, &qn, &c, &[cn[0], bad], 4, &mut out).unwrap_err();
        let is = |what, index| match (&err, want) {
            (CpuError::NonFinite { what: w, index: i }, "non-finite") => *w == what && *i == index,
            (CpuError::Negative { what: w, index: i }, "negative") => *w == what && *i == index,
            _ => false,
        };
        assert!(is("corpus norms", 1), "corpus norm {bad}: {err:?}");
    }
    cosine_scores(&q, &[f32::INFINITY], &c, &cn, 4, &mut out).unwrap();
    cosine_scores(&q, &qn, &c, &cn, 4, &mut out).unwrap();
}

/// `iters` is the caller's: it bounds the loop, and sizes no allocation made before the loop runs (an inertia
/// vector reserved for `usize::MAX` iterations panicked with "capacity overflow"; for 2^40 the allocation failed
/// and aborted the process). An overflow ends the run at its first non-finite inertia, whatever `iters` asked.
#[test]
fn kmeans_with_a_huge_iteration_count_neither_panics_nor_reserves_it() {
    // k = 1: the seed centroid is one of the points, the other is at distance (2 * f32::MAX)^2 = +inf.
    let points = [f32::MAX, -f32::MAX];
    for iters in [usize::MAX, 1 << 40, 3] {
        for level in available_levels() {
            let got = Cpu::with_level(level).kmeans(&points, 1, 1, iters, 0);
            assert_eq!(
                got,
                Err(CpuError::KMeansOverflow { iteration: 1 }),
                "{level:?}, iters {iters}"
            );
        }
    }
}
