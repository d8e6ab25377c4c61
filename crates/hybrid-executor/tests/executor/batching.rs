//! Dynamic batching: coalescing, one answer per caller, none lost or duplicated.

use super::*;
use recall_hybrid_executor::{
    BatchConfig, BatchPhase, CallOptions, CorpusRef, ExecError, TenantConfig,
};
use std::sync::Barrier;

const DIM: usize = 12;

fn exec_with(gpu: Arc<dyn Backend>, batching: BatchConfig) -> Executor {
    let clock = ManualClock::new();
    let cfg = ExecutorConfig {
        batching,
        ..config(&clock)
    };
    Executor::with_backends(cfg, Arc::new(CpuBackend), Some(gpu)).unwrap()
}

#[test]
fn concurrent_single_queries_become_one_batch() {
    let gpu = Arc::new(Recording::default());
    let exec = exec_with(
        gpu.clone(),
        BatchConfig {
            max_batch: 4,
            max_wait: Duration::from_secs(600),
            ..BatchConfig::default()
        },
    );
    let data = matrix(5, 40, DIM);
    let corpus = CorpusRef::new(&data, DIM).unwrap();
    let barrier = Barrier::new(4);
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let (exec, corpus, data, barrier) = (&exec, &corpus, &data, &barrier);
            s.spawn(move || {
                let q = matrix(100 + t, 1, DIM);
                barrier.wait();
                let out = exec
                    .cosine_scores_single(&CallOptions::default(), &q, corpus)
                    .unwrap();
                assert_eq!(out.device, GPU);
                assert_eq!(bits(&out.value), bits(&cpu(&q, data, DIM)));
            });
        }
    });
    // A full batch runs at once: one backend call of four queries.
    assert_eq!(*gpu.units.lock(), vec![4]);
    let h = exec.metrics().batch_sizes();
    assert_eq!((h.count(), h.sum()), (1, 4));
}

#[test]
fn batching_under_load_loses_and_duplicates_nothing() {
    let plan = FaultPlan::new()
        .seed(3)
        .fail(
            recall_hybrid_executor::FaultStep::Sync,
            recall_hybrid_executor::Trigger::Probability(0.05),
        )
        .oom_above_units(5);
    let gpu = Arc::new(FaultInjecting::new(CpuBackend, plan));
    let exec = exec_with(
        gpu.clone(),
        BatchConfig {
            max_batch: 16,
            max_wait: Duration::from_micros(300),
            ..BatchConfig::default()
        },
    );
    let data_a = matrix(6, 50, DIM);
    let data_b = matrix(7, 31, DIM);
    let corpora = [
        CorpusRef::new(&data_a, DIM).unwrap(),
        CorpusRef::new(&data_b, DIM).unwrap(),
    ];
    let tenants = [
        exec.add_tenant(TenantConfig::new("x")),
        exec.add_tenant(TenantConfig::new("y")),
    ];
    let threads = 8;
    let per_thread = 150;
    std::thread::scope(|s| {
        for th in 0..threads {
            let (exec, corpora, tenants) = (&exec, &corpora, &tenants);
            s.spawn(move || {
                for i in 0..per_thread {
                    let q = matrix((th * 10_000 + i) as u64, 1, DIM);
                    let corpus = &corpora[i % 2];
                    let opts = match i % 3 {
                        0 => CallOptions::default(),
                        k => CallOptions::tenant(tenants[k - 1]).wait(Duration::from_secs(600)),
                    };
                    let out = exec.cosine_scores_single(&opts, &q, corpus).unwrap();
                    assert_eq!(
                        bits(&out.value),
                        bits(&cpu(&q, corpus.data(), DIM)),
                        "thread {th} call {i}"
                    );
                }
            });
        }
    });
    let h = exec.metrics().batch_sizes();
    // Every query was in exactly one batch.
    assert_eq!(h.sum() as usize, threads * per_thread);
    assert!(h.count() as usize <= threads * per_thread);
    let (c_calls, g_calls, _) = exec.counters();
    assert_eq!(c_calls + g_calls, h.count());
    // Every batch's phases were recorded: a wait and a run each, a gap each but the first.
    let m = exec.metrics();
    let phase = |p| m.batch_phase_ns(p).count();
    assert_eq!(phase(BatchPhase::Wait), h.count());
    assert_eq!(phase(BatchPhase::Run), h.count());
    assert_eq!(phase(BatchPhase::Gap), h.count() - 1);
    let text = exec.prometheus_text();
    let runs = format!(
        "recall_batch_phase_seconds_count{{phase=\"run\"}} {}",
        h.count()
    );
    assert!(text.contains(&runs), "{text}");
}

#[test]
fn a_bad_query_fails_alone() {
    let exec = exec_with(Arc::new(CpuBackend), BatchConfig::default());
    let data = matrix(5, 10, DIM);
    let corpus = CorpusRef::new(&data, DIM).unwrap();
    let mut q = matrix(1, 1, DIM);
    q[3] = f32::INFINITY;
    assert!(matches!(
        exec.cosine_scores_single(&CallOptions::default(), &q, &corpus),
        Err(ExecError::InvalidInput(_))
    ));
    assert!(
        exec.cosine_scores_single(&CallOptions::default(), &q[..5], &corpus)
            .is_err()
    );
    let mut bad = data.clone();
    bad[7] = f32::NAN;
    assert!(CorpusRef::new(&bad, DIM).is_err());
    // Batching off: each call runs alone.
    let exec = exec_with(
        Arc::new(CpuBackend),
        BatchConfig {
            max_batch: 1,
            max_wait: Duration::ZERO,
            ..BatchConfig::default()
        },
    );
    let q = matrix(2, 1, DIM);
    let out = exec
        .cosine_scores_single(&CallOptions::default(), &q, &corpus)
        .unwrap();
    assert_eq!(bits(&out.value), bits(&cpu(&q, &data, DIM)));
}

/// A batch told to wait for its members without a time limit (`max_wait: Duration::MAX`): the leader waits
/// until the batch is full (its deadline saturates instead of overflowing), and every caller gets its answer.
#[test]
fn a_wait_without_end_waits_for_a_full_batch() {
    let gpu = Arc::new(Recording::default());
    let exec = exec_with(
        gpu.clone(),
        BatchConfig {
            max_batch: 2,
            max_wait: Duration::MAX,
            ..BatchConfig::default()
        },
    );
    let data = matrix(6, 30, DIM);
    let corpus = CorpusRef::new(&data, DIM).unwrap();
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let (exec, corpus, data) = (&exec, &corpus, &data);
            s.spawn(move || {
                let q = matrix(200 + t, 1, DIM);
                let out = exec
                    .cosine_scores_single(&CallOptions::default(), &q, corpus)
                    .unwrap();
                assert_eq!(bits(&out.value), bits(&cpu(&q, data, DIM)));
            });
        }
    });
    assert_eq!(*gpu.units.lock(), vec![2]);
}
