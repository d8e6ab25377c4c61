//! Every op beyond cosine through `run_op`: a fault at any step, of any kind, still gives exactly the CPU's
//! answer, and OOM splitting by queries (knn, similarity, candidate scoring) gives the unsplit answer.

use super::*;
use recall_cpu_simd::{Metric, SpreadGraph, SpreadParams};
use recall_hybrid_executor::{CallOptions, FaultKind, FaultStep, OpKind, Trigger};

const DIM: usize = 12;
const NQ: usize = 8;

struct Inputs {
    queries: Vec<f32>,
    corpus: Vec<f32>,
    offsets: Vec<usize>,
    ids: Vec<u32>,
    graph: SpreadGraph,
    seeds: Vec<f32>,
}

fn inputs() -> Inputs {
    let corpus = matrix(5, 50, DIM);
    // Candidate lists of different lengths, distinct ids within each.
    let mut offsets = vec![0];
    let mut ids = Vec::new();
    for q in 0..NQ {
        ids.extend((0..(5 + q as u32)).map(|i| (i * 7 + q as u32) % 50));
        offsets.push(ids.len());
    }
    // A ring with chords; weights in [0, 1).
    let n = 40;
    let indptr: Vec<usize> = (0..=n).map(|u| 3 * u).collect();
    let indices: Vec<u32> = (0..n)
        .flat_map(|u| [(u + 1) % n, (u + 7) % n, u].map(|v| v as u32))
        .collect();
    let weights: Vec<f32> = matrix(6, 3 * n, 1)
        .iter()
        .map(|w| (w + 1.0) * 0.5)
        .collect();
    let graph = SpreadGraph::from_csr(&indptr, &indices, &weights).unwrap();
    let mut seeds = vec![0.0; n];
    seeds[3] = 1.0;
    seeds[17] = 0.5;
    Inputs {
        queries: matrix(4, NQ, DIM),
        corpus,
        offsets,
        ids,
        graph,
        seeds,
    }
}

/// Every op's answer, as bits, in one comparable value.
fn answers(exec: &Executor, i: &Inputs) -> Vec<Vec<u32>> {
    let o = CallOptions::default();
    let params = SpreadParams {
        decay: 0.5,
        threshold: 0.01,
        hops: 3,
        k: 5,
    };
    let knn = exec
        .knn(&o, &i.queries, &i.corpus, DIM, Metric::L2, 4)
        .unwrap()
        .value;
    let sim = exec
        .similarity(&o, &i.queries, &i.corpus, DIM, Metric::Dot)
        .unwrap()
        .value;
    let cand = exec
        .score_candidates(
            &o,
            &i.queries,
            &i.corpus,
            DIM,
            Metric::Cosine,
            &i.offsets,
            &i.ids,
            3,
        )
        .unwrap()
        .value;
    let spread = exec.spread(&o, &i.graph, &i.seeds, &params).unwrap().value;
    let km = exec.kmeans(&o, &i.corpus, DIM, 4, 3, 9).unwrap().value;
    let noise = exec
        .clip_and_noise(&o, &i.corpus, DIM, 1.0, 0.3, 11)
        .unwrap()
        .value;
    // Into a buffer that holds other values: a fallback after a fault must still write every value.
    let mut noise_into = vec![f32::NAN; i.corpus.len()];
    exec.clip_and_noise_into(&o, &i.corpus, DIM, 1.0, 0.3, 11, &mut noise_into)
        .unwrap();
    let shared = recall_hybrid_executor::SharedCorpus::new(i.corpus.clone(), DIM).unwrap();
    let knn_shared = exec
        .knn_shared(&o, &i.queries, &shared, Metric::L2, 4)
        .unwrap()
        .value;
    let cand_shared = exec
        .score_candidates_shared(&o, &i.queries, &shared, Metric::Dot, &i.offsets, &i.ids, 3)
        .unwrap()
        .value;
    vec![
        knn.ids.clone(),
        bits(&knn.scores),
        bits(&sim),
        cand.ids.clone(),
        bits(&cand.scores),
        bits(&spread.activation),
        spread.top.ids.clone(),
        bits(&km.centroids),
        km.assignments.clone(),
        km.inertia
            .iter()
            .map(|x| x.to_bits() as u32 ^ (x.to_bits() >> 32) as u32)
            .collect(),
        bits(&noise),
        bits(&noise_into),
        knn_shared.ids.clone(),
        bits(&knn_shared.scores),
        cand_shared.ids.clone(),
        bits(&cand_shared.scores),
    ]
}

fn cpu_only() -> Executor {
    Executor::with_backends(
        ExecutorConfig {
            policy: DevicePolicy::Cpu,
            ..config(&ManualClock::new())
        },
        Arc::new(CpuBackend),
        None,
    )
    .unwrap()
}

#[test]
fn every_op_survives_a_fault_at_every_step() {
    let i = inputs();
    let want = answers(&cpu_only(), &i);
    for step in FaultStep::ALL {
        for kind in [
            FaultKind::Gpu,
            FaultKind::OutOfMemory,
            FaultKind::DeviceLost,
        ] {
            let (exec, gpu, _) = faulty(
                FaultPlan::new().fail_as(step, Trigger::Always, kind),
                |_| {},
            );
            assert_eq!(answers(&exec, &i), want, "{step:?} {kind:?}");
            assert!(
                gpu.stats().injected > 0,
                "the plan never fired for {step:?} {kind:?}"
            );
            let (cpu_calls, _, fallbacks) = exec.counters();
            assert!(
                cpu_calls > 0 && fallbacks > 0,
                "{step:?} {kind:?}: no fallback recorded"
            );
        }
    }
}

#[test]
fn without_faults_the_gpu_backend_answers_every_op() {
    let i = inputs();
    let (exec, gpu, _) = faulty(FaultPlan::new(), |_| {});
    assert_eq!(answers(&exec, &i), answers(&cpu_only(), &i));
    assert_eq!(exec.counters().2, 0, "no fallbacks");
    assert_eq!(gpu.stats().calls, 9, "one GPU call per op");
}

#[test]
fn oom_splitting_by_queries_gives_the_unsplit_answer() {
    let i = inputs();
    let want = answers(&cpu_only(), &i);
    // More than 2 queries at once is "out of memory": splittable ops halve down to 2 and stay on the GPU.
    let (exec, gpu, _) = faulty(FaultPlan::new().oom_above_units(2), |c| {
        c.oom_split_floor = 1
    });
    assert_eq!(answers(&exec, &i), want);
    assert!(
        gpu.stats().calls > 6,
        "the splittable ops were retried in parts"
    );
}

#[test]
fn candidates_against_a_handle_have_their_own_break_even() {
    // The slice op's break-even includes uploading the corpus, so it can be "never" while the resident one is
    // small: a handle's candidate lists must go by the resident op's (before, they went to the CPU forever).
    let i = inputs();
    let never = u64::MAX;
    let (exec, gpu, _) = faulty(FaultPlan::new(), |c| {
        c.break_even = vec![
            (OpKind::ScoreCandidates, never),
            (OpKind::ScoreCandidatesResident, 0),
        ]
    });
    let o = CallOptions::default();
    let shared = recall_hybrid_executor::SharedCorpus::new(i.corpus.clone(), DIM).unwrap();
    let on_handle = exec
        .score_candidates_shared(&o, &i.queries, &shared, Metric::Dot, &i.offsets, &i.ids, 3)
        .unwrap();
    assert_eq!(on_handle.device, GPU);
    let on_slice = exec
        .score_candidates(
            &o,
            &i.queries,
            &i.corpus,
            DIM,
            Metric::Dot,
            &i.offsets,
            &i.ids,
            3,
        )
        .unwrap();
    assert_eq!(on_slice.device, Device::Cpu);
    assert_eq!(bits(&on_handle.value.scores), bits(&on_slice.value.scores));
    assert_eq!(on_handle.value.ids, on_slice.value.ids);
    assert_eq!(gpu.stats().calls, 1);
    let m = exec.metrics();
    assert_eq!(m.calls(OpKind::ScoreCandidatesResident, GPU), 1);
    assert_eq!(m.calls(OpKind::ScoreCandidates, Device::Cpu), 1);
}

/// `check` on an executor whose policy is the CPU, then on one whose policy is the GPU (the [`crate::Trusting`]
/// double, which checks no corpus value, as the kernels do not), each asserted to have fallen back never; with the
/// device each policy answers on.
fn on_each_device(check: impl Fn(&Executor, Device)) {
    use recall_hybrid_executor::{CpuBackend, DevicePolicy, FallbackReason};
    for (policy, ran) in [(DevicePolicy::Cpu, Device::Cpu), (DevicePolicy::Gpu, GPU)] {
        let mut cfg = config(&ManualClock::new());
        cfg.policy = policy;
        let gpu = std::sync::Arc::new(crate::Trusting);
        let exec =
            Executor::with_backends(cfg, std::sync::Arc::new(CpuBackend), Some(gpu)).unwrap();
        check(&exec, ran);
        for reason in FallbackReason::ALL {
            assert_eq!(exec.metrics().fallbacks(reason), 0, "{ran:?} {reason:?}");
        }
    }
}

/// Clip-and-noise's values are checked by the backend that runs it (the CPU in the op's own pass): a bad value
/// is the same typed error on either device, with the first bad index, and never a fallback.
#[test]
fn clip_and_noise_refuses_a_bad_value_on_either_device() {
    use recall_cpu_simd::CpuError;
    use recall_hybrid_executor::ExecError;
    let dim = 16;
    let mut x = matrix(3, 3000, dim);
    x[2900 * dim + 3] = f32::INFINITY;
    x[1200 * dim + 7] = f32::NAN;
    let want = CpuError::NonFinite {
        what: "vectors",
        index: 1200 * dim + 7,
    };
    on_each_device(|exec, ran| {
        let o = CallOptions::default();
        match exec.clip_and_noise(&o, &x, dim, 1.0, 0.2, 5) {
            Err(ExecError::InvalidInput(e)) => assert_eq!(e, want, "{ran:?}"),
            other => panic!("{ran:?}: {other:?}"),
        }
        let mut out = vec![0.0f32; x.len()];
        match exec.clip_and_noise_into(&o, &x, dim, 1.0, 0.2, 5, &mut out) {
            Err(ExecError::InvalidInput(e)) => assert_eq!(e, want, "{ran:?}"),
            other => panic!("{ran:?}: {other:?}"),
        }
        // Finite values, one row's squared norm past f32: answered, the same bits on both devices.
        let mut big = matrix(4, 600, dim);
        big[10 * dim] = 3e30;
        let got = exec.clip_and_noise(&o, &big, dim, 1.0, 0.2, 5).unwrap();
        assert_eq!(got.device, ran);
        assert_eq!(
            bits(&got.value),
            bits(&recall_cpu_simd::clip_and_noise(&big, dim, 1.0, 0.2, 5).unwrap()),
            "{ran:?}"
        );
    });
}

/// 5 queries and a 4,000-row corpus of 24 dimensions with a NaN and an infinity, and the error they must give
/// (the first: `(dim, queries, corpus, error)`).
fn bad_corpus() -> (usize, Vec<f32>, Vec<f32>, recall_cpu_simd::CpuError) {
    let dim = 24;
    let mut c = matrix(6, 4000, dim);
    c[3500 * dim + 2] = f32::NEG_INFINITY;
    c[2100 * dim + 9] = f32::NAN;
    let want = recall_cpu_simd::CpuError::NonFinite {
        what: "corpus",
        index: 2100 * dim + 9,
    };
    (dim, matrix(5, 3, dim), c, want)
}

/// knn over a corpus slice: its values are checked before a GPU runs the op, or by the CPU's knn in its own
/// pass; either way the same typed error with the first bad index, and never a fallback.
#[test]
fn knn_refuses_a_bad_corpus_value_on_either_device() {
    use recall_cpu_simd::CpuError;
    use recall_hybrid_executor::ExecError;
    let (dim, q, c, want) = bad_corpus();
    on_each_device(|exec, ran| {
        let o = CallOptions::default();
        for metric in [Metric::Cosine, Metric::Dot, Metric::L2] {
            match exec.knn(&o, &q, &c, dim, metric, 5) {
                Err(ExecError::InvalidInput(e)) => assert_eq!(e, want, "{ran:?} {metric:?}"),
                other => panic!("{ran:?} {metric:?}: {other:?}"),
            }
        }
        // A bad query is refused before any device runs, as before.
        let mut bad_q = q.clone();
        bad_q[dim + 1] = f32::NAN;
        assert!(matches!(
            exec.knn(&o, &bad_q, &matrix(6, 100, dim), dim, Metric::Dot, 3),
            Err(ExecError::InvalidInput(CpuError::NonFinite {
                what: "queries",
                ..
            }))
        ));
        // A finite corpus: answered where the policy says, with the CPU's answer.
        let c = matrix(6, 4000, dim);
        let got = exec.knn(&o, &q, &c, dim, Metric::Cosine, 5).unwrap();
        assert_eq!(got.device, ran);
        let want_top = recall_cpu_simd::knn(
            &q,
            &recall_cpu_simd::Corpus::f32(&c, dim),
            Metric::Cosine,
            5,
        )
        .unwrap();
        assert_eq!(got.value.ids, want_top.ids);
        assert_eq!(bits(&got.value.scores), bits(&want_top.scores));
    });
}

/// Similarity's and cosine scores' corpus slice, like knn's: checked by the op before a GPU runs it, by the
/// CPU in its own pass, the same typed error either way (the first bad index), no fallback; a finite corpus
/// gets the CPU's scores.
#[test]
fn similarity_refuses_a_bad_corpus_value_on_either_device() {
    use recall_hybrid_executor::ExecError;
    let (dim, q, c, want) = bad_corpus();
    on_each_device(|exec, ran| {
        let o = CallOptions::default();
        for metric in [Metric::Cosine, Metric::Dot, Metric::L2] {
            match exec.similarity(&o, &q, &c, dim, metric) {
                Err(ExecError::InvalidInput(e)) => assert_eq!(e, want, "{ran:?} {metric:?}"),
                other => panic!("{ran:?} {metric:?}: {other:?}"),
            }
        }
        match exec.cosine_scores_with(&o, &q, &c, dim) {
            Err(ExecError::InvalidInput(e)) => assert_eq!(e, want, "{ran:?} cosine_scores"),
            other => panic!("{ran:?} cosine_scores: {other:?}"),
        }
        let c = matrix(6, 4000, dim);
        let corpus = recall_cpu_simd::Corpus::f32(&c, dim);
        for metric in [Metric::Cosine, Metric::Dot, Metric::L2] {
            let got = exec.similarity(&o, &q, &c, dim, metric).unwrap();
            assert_eq!(got.device, ran);
            let want = recall_cpu_simd::similarity(&q, &corpus, metric).unwrap();
            assert_eq!(bits(&got.value), bits(&want), "{ran:?} {metric:?}");
        }
        let got = exec.cosine_scores_with(&o, &q, &c, dim).unwrap();
        assert_eq!(got.device, ran);
        let want = recall_cpu_simd::similarity(&q, &corpus, Metric::Cosine).unwrap();
        assert_eq!(bits(&got.value), bits(&want), "{ran:?} cosine_scores");
    });
}

/// Candidate scoring over a corpus slice reads only the rows its lists name, and checks only those: a bad value in
/// a named row is the same typed error on either device (the smallest bad index among the named rows, checked
/// before a GPU runs the op, by the CPU in its scoring pass), never a fallback; bad values in rows no list names are
/// no error, and the answer is the CPU's.
#[test]
fn score_candidates_checks_the_rows_it_names_on_either_device() {
    use recall_cpu_simd::{Corpus, CpuError};
    use recall_hybrid_executor::ExecError;
    // Rows 2100 (a NaN) and 3500 (an infinity) are bad.
    let (dim, q, c, want) = bad_corpus();
    let lists = |named: &[u32]| -> (Vec<usize>, Vec<u32>) {
        // Query 0: 20 good rows; query 1: 20 good rows and `named`; query 2: 20 good rows.
        let mut ids = Vec::new();
        let mut offsets = vec![0];
        for qi in 0..3u32 {
            ids.extend((0..20).map(|i| qi * 700 + i * 13));
            if qi == 1 {
                ids.extend_from_slice(named);
            }
            offsets.push(ids.len());
        }
        (offsets, ids)
    };
    let infinite = CpuError::NonFinite {
        what: "corpus",
        index: 3500 * dim + 2,
    };
    on_each_device(|exec, ran| {
        let o = CallOptions::default();
        for metric in [Metric::Cosine, Metric::Dot, Metric::L2] {
            for (named, err) in [
                (vec![3500, 2100], Some(&want)),
                (vec![3500], Some(&infinite)),
                (vec![], None),
            ] {
                let (offsets, ids) = lists(&named);
                let got = exec.score_candidates(&o, &q, &c, dim, metric, &offsets, &ids, 5);
                match (got, err) {
                    (Err(ExecError::InvalidInput(e)), Some(want)) => {
                        assert_eq!(&e, want, "{ran:?} {metric:?} {named:?}")
                    }
                    (Ok(top), None) => {
                        assert_eq!(top.device, ran);
                        let cpu = recall_cpu_simd::score_candidates(
                            &q,
                            &Corpus::f32(&c, dim),
                            metric,
                            &offsets,
                            &ids,
                            5,
                        )
                        .unwrap();
                        assert_eq!(top.value.ids, cpu.ids, "{ran:?} {metric:?}");
                        assert_eq!(
                            bits(&top.value.scores),
                            bits(&cpu.scores),
                            "{ran:?} {metric:?}"
                        );
                    }
                    (other, err) => panic!("{ran:?} {metric:?} {named:?}: {other:?}, want {err:?}"),
                }
            }
        }
    });
}
