//! The multi-GPU layer with CPU and fault-injecting backends standing in for GPUs: sharded knn equals the
//! CPU's answer bit for bit (scores and ids, ties to the lower global id), independent calls go to the
//! least-loaded GPU, and a GPU failing at upload, at launch or mid-batch moves its shard's work elsewhere
//! without changing the answer.

use recall_cpu_simd::{Metric, TopK};
use recall_hybrid_executor::{
    Backend, BackendError, BatchConfig, BreakerState, CallOptions, CpuBackend, Device,
    DevicePolicy, Executor, ExecutorConfig, FaultInjecting, FaultKind, FaultPlan, FaultStep,
    MultiGpu, SharedCorpus, Trigger,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

fn matrix(seed: u64, rows: usize, dim: usize) -> Vec<f32> {
    let mut rng = recall_hybrid_executor::difftest::SplitMix::new(seed);
    (0..rows * dim)
        .map(|_| rng.next_f32() * 2.0 - 1.0)
        .collect()
}

/// Rows drawn from a few distinct ones, so that many scores tie and the id order decides.
fn tied_matrix(seed: u64, rows: usize, dim: usize) -> Vec<f32> {
    let base = matrix(seed, 5, dim);
    (0..rows)
        .flat_map(|r| base[(r * 7 % 5) * dim..(r * 7 % 5 + 1) * dim].to_vec())
        .collect()
}

fn bits(t: &TopK) -> (Vec<u32>, Vec<u32>) {
    (
        t.ids.clone(),
        t.scores.iter().map(|s| s.to_bits()).collect(),
    )
}

fn gpu(ordinal: usize, plan: FaultPlan) -> Arc<FaultInjecting<CpuBackend>> {
    Arc::new(FaultInjecting::new(CpuBackend, plan).as_device(Device::Gpu { ordinal }))
}

fn multi(gpus: &[Arc<FaultInjecting<CpuBackend>>]) -> MultiGpu {
    MultiGpu::new(gpus.iter().map(|g| g.clone() as Arc<dyn Backend>).collect())
}

/// An executor whose GPU slot is `m`, every call sent to it (no calibration, no cache).
#[allow(clippy::unwrap_used)] // a test helper
fn gpu_executor(m: Arc<MultiGpu>, batching: BatchConfig) -> Executor {
    Executor::with_multi_gpu(
        ExecutorConfig {
            policy: DevicePolicy::Gpu,
            calibrate: false,
            use_cache: false,
            batching,
            ..ExecutorConfig::default()
        },
        Arc::new(CpuBackend),
        m,
    )
    .unwrap()
}

#[test]
fn sharded_knn_is_the_cpu_answer_for_every_metric_k_and_gpu_count() {
    let dim = 13;
    for (n, data) in [
        (101, matrix(1, 101, dim)),
        (64, tied_matrix(2, 64, dim)),
        (3, matrix(3, 3, dim)),
    ] {
        let queries = matrix(9, 6, dim);
        let corpus = SharedCorpus::new(data.clone(), dim).unwrap();
        for n_gpus in [2, 3, 5] {
            let gpus: Vec<_> = (0..n_gpus).map(|i| gpu(i, FaultPlan::new())).collect();
            let m = multi(&gpus);
            for metric in [Metric::Cosine, Metric::Dot, Metric::L2] {
                for k in [1, 2, n.min(40), n] {
                    let want = CpuBackend.knn(&queries, &data, dim, metric, k).unwrap();
                    let got = m.knn_shared(&queries, &corpus, metric, k).unwrap();
                    assert_eq!(
                        bits(&got),
                        bits(&want),
                        "n {n}, {n_gpus} gpus, {metric:?}, k {k}"
                    );
                }
            }
            // Every GPU that holds a shard answered one.
            let shards = n.min(n_gpus);
            for l in &m.loads()[..shards] {
                assert!(l.calls > 0, "a GPU holding a shard never answered: {l:?}");
            }
            assert_eq!(m.moved_to_cpu(), 0);
        }
    }
}

#[test]
fn a_dropped_handle_forgets_its_shards() {
    let dim = 4;
    let gpus: Vec<_> = (0..2).map(|i| gpu(i, FaultPlan::new())).collect();
    let m = multi(&gpus);
    let corpus = SharedCorpus::new(matrix(4, 20, dim), dim).unwrap();
    m.knn_shared(&matrix(5, 2, dim), &corpus, Metric::Dot, 3)
        .unwrap();
    assert_eq!(m.sharded_corpora(), 1);
    drop(corpus);
    assert_eq!(m.sharded_corpora(), 0);
}

/// Each fault plan on GPU 1 of 2 (or 3): the answer stays the CPU's, and the shard's work was moved.
#[test]
fn a_failing_gpu_moves_its_shard_and_the_answer_stays_exact() {
    let dim = 11;
    let data = matrix(6, 90, dim);
    let queries = matrix(7, 5, dim);
    let want = CpuBackend
        .knn(&queries, &data, dim, Metric::Cosine, 7)
        .unwrap();
    let plans = [
        (
            "upload",
            FaultPlan::new().fail(FaultStep::CopyIn, Trigger::Always),
        ),
        (
            "alloc (out of memory)",
            FaultPlan::new().fail(FaultStep::Alloc, Trigger::Always),
        ),
        (
            "launch on the second call",
            FaultPlan::new().fail_at(FaultStep::Launch, 2),
        ),
        (
            "sync",
            FaultPlan::new().fail(FaultStep::Sync, Trigger::FromCall(1)),
        ),
        ("lost mid-batch", FaultPlan::new().lose_device_after(1)),
        (
            "lost at once",
            FaultPlan::new().fail_as(FaultStep::Launch, Trigger::Always, FaultKind::DeviceLost),
        ),
    ];
    for n_gpus in [2, 3] {
        for (what, plan) in &plans {
            let gpus: Vec<_> = (0..n_gpus)
                .map(|i| {
                    gpu(
                        i,
                        if i == 1 {
                            plan.clone()
                        } else {
                            FaultPlan::new()
                        },
                    )
                })
                .collect();
            let m = multi(&gpus);
            let corpus = SharedCorpus::new(data.clone(), dim).unwrap();
            for call in 0..4 {
                let got = m.knn_shared(&queries, &corpus, Metric::Cosine, 7).unwrap();
                assert_eq!(
                    bits(&got),
                    bits(&want),
                    "{what}, {n_gpus} gpus, call {call}"
                );
            }
            let loads = m.loads();
            assert!(
                loads[1].moved_away > 0,
                "{what}: GPU 1's failure was not recorded: {loads:?}"
            );
            if what.starts_with("lost") {
                assert!(loads[1].lost, "{what}: a lost GPU is still in use");
            }
            // The other GPUs took the work (the CPU is the last resort, not needed here).
            assert_eq!(m.moved_to_cpu(), 0, "{what}");
        }
    }
}

/// Work no GPU can answer fails back to the executor, which answers it on the CPU as it does any failed GPU
/// call: reported as the CPU's, with the GPU's error as the fallback, not as GPU 0's.
#[test]
fn when_every_gpu_fails_the_executor_answers_on_the_cpu_and_says_so() {
    let dim = 6;
    let data = matrix(8, 40, dim);
    let queries = matrix(9, 3, dim);
    let plan = FaultPlan::new().fail(FaultStep::Launch, Trigger::Always);
    let gpus: Vec<_> = (0..2).map(|i| gpu(i, plan.clone())).collect();
    let m = Arc::new(multi(&gpus));
    let corpus = SharedCorpus::new(data.clone(), dim).unwrap();
    let want = CpuBackend.knn(&queries, &data, dim, Metric::L2, 5).unwrap();
    // The layer itself: both GPUs tried, then the last one's error.
    let e = m.knn_shared(&queries, &corpus, Metric::L2, 5).unwrap_err();
    assert!(matches!(e, BackendError::Gpu(_)), "{e:?}");
    let e = m.knn(&queries, &data, dim, Metric::L2, 5).unwrap_err();
    assert!(matches!(e, BackendError::Gpu(_)), "{e:?}");
    assert!(m.moved_to_cpu() >= 2);
    assert!(m.loads().iter().all(|l| l.moved_away >= 2 && l.calls == 0));
    // Through the executor: the CPU's answer, said to be the CPU's.
    let exec = gpu_executor(m, BatchConfig::default());
    let opts = CallOptions::default();
    let got = exec
        .knn_shared(&opts, &queries, &corpus, Metric::L2, 5)
        .unwrap();
    assert_eq!(bits(&got.value), bits(&want));
    assert_eq!(got.device, Device::Cpu);
    assert!(got.fallback.is_some(), "the GPUs' failure was not reported");
    let got = exec
        .knn(&opts, &queries, &data, dim, Metric::L2, 5)
        .unwrap();
    assert_eq!(bits(&got.value), bits(&want));
    assert_eq!(got.device, Device::Cpu);
    let (cpu_calls, gpu_calls, fallbacks) = exec.counters();
    assert_eq!((cpu_calls, gpu_calls, fallbacks), (2, 0, 2));
    // The breaker counts these failures: the third opens it, and the next call does not try the GPUs.
    exec.knn(&opts, &queries, &data, dim, Metric::L2, 5)
        .unwrap();
    assert!(
        matches!(exec.breaker_state(), BreakerState::Open { .. }),
        "{:?}",
        exec.breaker_state()
    );
    let tried: Vec<u64> = gpus.iter().map(|g| g.stats().injected).collect();
    let got = exec
        .knn(&opts, &queries, &data, dim, Metric::L2, 5)
        .unwrap();
    assert_eq!(bits(&got.value), bits(&want));
    assert_eq!(
        gpus.iter().map(|g| g.stats().injected).collect::<Vec<_>>(),
        tried
    );
}

#[test]
fn bad_input_is_returned_not_moved() {
    let gpus: Vec<_> = (0..2).map(|i| gpu(i, FaultPlan::new())).collect();
    let m = multi(&gpus);
    // k larger than the corpus: every device refuses it the same way.
    let e = m
        .knn(&[1.0, 0.0], &[1.0, 0.0], 2, Metric::Dot, 3)
        .unwrap_err();
    assert!(matches!(e, BackendError::Input(_)), "{e:?}");
    assert!(m.loads().iter().all(|l| l.moved_away == 0));
}

#[test]
fn candidates_against_a_handle_are_the_cpu_answer() {
    let dim = 9;
    let data = tied_matrix(10, 200, dim);
    let queries = matrix(11, 4, dim);
    let corpus = SharedCorpus::new(data.clone(), dim).unwrap();
    let mut rng = recall_hybrid_executor::difftest::SplitMix::new(12);
    let mut offsets = vec![0];
    let mut ids = Vec::new();
    for _ in 0..4 {
        let mut list: Vec<u32> = (0..200)
            .filter(|_| rng.next_u64().is_multiple_of(3))
            .collect();
        // Not sorted: the order of a list must not matter.
        list.reverse();
        ids.extend(&list);
        offsets.push(ids.len());
    }
    let gpus: Vec<_> = (0..2).map(|i| gpu(i, FaultPlan::new())).collect();
    let m = multi(&gpus);
    for metric in [Metric::Cosine, Metric::Dot, Metric::L2] {
        let want = CpuBackend
            .score_candidates(&queries, &data, dim, metric, &offsets, &ids, 10)
            .unwrap();
        let got = m
            .score_candidates_shared(&queries, &corpus, metric, &offsets, &ids, 10)
            .unwrap();
        assert_eq!(bits(&got), bits(&want), "{metric:?}");
    }
}

/// A backend whose knn blocks until released, so that calls stay in flight.
struct Gated {
    device: Device,
    open: Arc<AtomicBool>,
}

impl Backend for Gated {
    fn device(&self) -> Device {
        self.device
    }

    fn knn(
        &self,
        queries: &[f32],
        corpus: &[f32],
        dim: usize,
        metric: Metric,
        k: usize,
    ) -> Result<TopK, BackendError> {
        while !self.open.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(1));
        }
        CpuBackend.knn(queries, corpus, dim, metric, k)
    }
}

fn spin_until(what: &str, cond: impl Fn() -> bool) {
    let t = std::time::Instant::now();
    while !cond() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn an_independent_call_goes_to_the_least_loaded_gpu() {
    let open = Arc::new(AtomicBool::new(false));
    let gpus: Vec<Arc<dyn Backend>> = (0..2)
        .map(|ordinal| {
            Arc::new(Gated {
                device: Device::Gpu { ordinal },
                open: open.clone(),
            }) as Arc<dyn Backend>
        })
        .collect();
    let m = Arc::new(MultiGpu::new(gpus));
    let data = matrix(13, 30, 4);
    let call = |m: Arc<MultiGpu>, data: Vec<f32>| {
        std::thread::spawn(move || m.knn(&data[..4], &data, 4, Metric::Dot, 2).unwrap())
    };
    let first = call(m.clone(), data.clone());
    spin_until("the first call to start", || {
        m.loads().iter().map(|l| l.in_flight).sum::<usize>() == 1
    });
    let busy = m.loads().iter().position(|l| l.in_flight == 1).unwrap();
    let second = call(m.clone(), data.clone());
    spin_until("the second call to start", || {
        m.loads().iter().map(|l| l.in_flight).sum::<usize>() == 2
    });
    assert_eq!(
        m.loads()[1 - busy].in_flight,
        1,
        "the second call did not go to the idle GPU"
    );
    open.store(true, Ordering::Release);
    let (a, b) = (first.join().unwrap(), second.join().unwrap());
    assert_eq!(a, b);
    assert!(m.loads().iter().all(|l| l.calls == 1 && l.in_flight == 0));
}

#[test]
fn through_the_executor_batch_and_single_queries_match_the_cpu() {
    let dim = 16;
    let data = matrix(14, 500, dim);
    let corpus = SharedCorpus::new(data.clone(), dim).unwrap();
    let gpus: Vec<_> = (0..2)
        .map(|i| {
            gpu(
                i,
                if i == 1 {
                    FaultPlan::new()
                        .seed(5)
                        .fail(FaultStep::Launch, Trigger::Probability(0.3))
                } else {
                    FaultPlan::new()
                },
            )
        })
        .collect();
    let m = Arc::new(multi(&gpus));
    let exec = Arc::new(gpu_executor(
        m.clone(),
        BatchConfig {
            max_batch: 8,
            max_wait: Duration::from_micros(200),
            ..BatchConfig::default()
        },
    ));
    let queries = matrix(15, 64, dim);
    let want = CpuBackend
        .knn(&queries, &data, dim, Metric::Cosine, 10)
        .unwrap();
    let got = exec
        .knn_shared(
            &CallOptions::default(),
            &queries,
            &corpus,
            Metric::Cosine,
            10,
        )
        .unwrap();
    assert_eq!(got.device, Device::Gpu { ordinal: 0 });
    assert!(got.fallback.is_none(), "a GPU failure reached the executor");
    assert_eq!(bits(&got.value), bits(&want));
    // Single queries from several threads (batched by the executor, each batch sharded).
    std::thread::scope(|s| {
        for t in 0..4 {
            let (exec, corpus, queries, want) = (&exec, &corpus, &queries, &want);
            s.spawn(move || {
                for q in (t..64).step_by(4) {
                    let one = exec
                        .knn_shared_single(
                            &CallOptions::default(),
                            &queries[q * dim..(q + 1) * dim],
                            corpus,
                            Metric::Cosine,
                            10,
                        )
                        .unwrap();
                    let (ids, scores) = want.query(q);
                    assert_eq!(one.value.ids, ids, "query {q}");
                    assert_eq!(
                        one.value
                            .scores
                            .iter()
                            .map(|x| x.to_bits())
                            .collect::<Vec<_>>(),
                        scores.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
                    );
                }
            });
        }
    });
    let text = exec.prometheus_text();
    assert!(
        text.contains("recall_multi_gpu_calls_total{gpu=\"gpu:0\"}"),
        "{text}"
    );
    assert!(
        text.contains("recall_multi_gpu_moved_away_total{gpu=\"gpu:1\"}"),
        "{text}"
    );
}

#[test]
fn spreading_from_a_seed_list_goes_to_a_gpu_and_moves_on_failure() {
    use recall_cpu_simd::SpreadParams;
    use recall_hybrid_executor::SharedGraph;
    let mut rng = recall_hybrid_executor::difftest::SplitMix::new(21);
    let (p, i, w) = recall_hybrid_executor::power_law_graph(&mut rng, 200, 1500, 40, 20);
    let graph = SharedGraph::from_csr(&p, &i, &w).unwrap();
    let params = SpreadParams {
        decay: 0.5,
        threshold: 0.01,
        hops: 3,
        k: 10,
    };
    let list = [(3u32, 1.0f32), (17, 0.5), (150, 0.75)];
    let mut dense = vec![0.0f32; 200];
    for &(v, x) in &list {
        dense[v as usize] = x;
    }
    let want = CpuBackend.spread(graph.graph(), &dense, &params).unwrap();
    let same = |a: &recall_cpu_simd::Spread| {
        a.activation.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
            == want
                .activation
                .iter()
                .map(|x| x.to_bits())
                .collect::<Vec<_>>()
            && bits(&a.top) == bits(&want.top)
    };
    // Healthy GPUs: one of them answers, through the list path of its backend.
    let gpus: Vec<_> = (0..2).map(|i| gpu(i, FaultPlan::new())).collect();
    let m = multi(&gpus);
    assert!(same(&m.spread_shared_from(&graph, &list, &params).unwrap()));
    assert_eq!(gpus.iter().map(|g| g.stats().successes).sum::<u64>(), 1);
    // GPU 0 fails at launch: the faults are injected on the list path and GPU 1 answers.
    let plan = FaultPlan::new().fail(FaultStep::Launch, Trigger::Always);
    let gpus = vec![gpu(0, plan.clone()), gpu(1, FaultPlan::new())];
    let m = multi(&gpus);
    for _ in 0..2 {
        assert!(same(&m.spread_shared_from(&graph, &list, &params).unwrap()));
    }
    assert!(gpus[0].stats().injected >= 1);
    assert_eq!(gpus[1].stats().successes, 2);
    // Every GPU fails: the call fails back (the executor answers it on the CPU).
    let gpus: Vec<_> = (0..2).map(|i| gpu(i, plan.clone())).collect();
    let m = multi(&gpus);
    let e = m
        .spread_shared_from(&graph, &list, &params)
        .map(|_| ())
        .unwrap_err();
    assert!(matches!(e, BackendError::Gpu(_)), "{e:?}");
    assert!(gpus.iter().all(|g| g.stats().injected >= 1));
    assert_eq!(m.moved_to_cpu(), 1);
}

/// A stand-in GPU that answers like the CPU and records the tenant context its calls ran under.
struct TenantSeen {
    device: Device,
    seen: std::sync::Mutex<Vec<Option<recall_hybrid_executor::TenantContext>>>,
}

impl Backend for TenantSeen {
    fn device(&self) -> Device {
        self.device
    }

    fn knn(
        &self,
        queries: &[f32],
        corpus: &[f32],
        dim: usize,
        metric: Metric,
        k: usize,
    ) -> Result<TopK, BackendError> {
        self.seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(recall_hybrid_executor::current_tenant());
        CpuBackend.knn(queries, corpus, dim, metric, k)
    }
}

/// A tenant's sharded call runs under the tenant's context on every GPU, not only on the one whose shard runs on
/// the caller's thread: the GPU backend charges a call's buffers to `current_tenant()` in its memory pool (the
/// tenant's VRAM quota there), so a shard run without it would escape the quota on GPUs 1...
#[test]
fn every_shard_of_a_tenant_call_runs_under_the_tenant() {
    use recall_hybrid_executor::TenantConfig;
    let dim = 8;
    let data = matrix(31, 300, dim);
    let corpus = SharedCorpus::new(data.clone(), dim).unwrap();
    let stand_ins: Vec<Arc<TenantSeen>> = (0..3)
        .map(|ordinal| {
            Arc::new(TenantSeen {
                device: Device::Gpu { ordinal },
                seen: std::sync::Mutex::new(Vec::new()),
            })
        })
        .collect();
    let m = Arc::new(MultiGpu::new(
        stand_ins
            .iter()
            .map(|g| g.clone() as Arc<dyn Backend>)
            .collect(),
    ));
    let exec = gpu_executor(m, BatchConfig::default());
    let mut config = TenantConfig::new("capped");
    config.vram_quota = Some(1 << 30);
    let tenant = exec.add_tenant(config);
    let queries = matrix(32, 4, dim);
    let got = exec
        .knn_shared(
            &CallOptions::tenant(tenant),
            &queries,
            &corpus,
            Metric::Dot,
            5,
        )
        .unwrap();
    let want = CpuBackend
        .knn(&queries, &data, dim, Metric::Dot, 5)
        .unwrap();
    assert_eq!(bits(&got.value), bits(&want));
    for g in &stand_ins {
        let seen = g.seen.lock().unwrap();
        assert_eq!(seen.len(), 1, "{:?} ran {} shards", g.device, seen.len());
        assert_eq!(
            seen[0].map(|c| (c.id, c.vram_quota)),
            Some((tenant, Some(1 << 30))),
            "{:?} ran its shard outside the tenant's context",
            g.device
        );
    }
}
