//! Single-query knn against a shared corpus: concurrent calls are coalesced, a lone call is not held back,
//! and every caller gets exactly its own neighbours.

use super::*;
use recall_cpu_simd::{Metric, TopK};
use recall_hybrid_executor::{BatchConfig, CallOptions, SharedCorpus};
use std::sync::Barrier;
use std::sync::mpsc;

const DIM: usize = 16;
const K: usize = 5;

/// A "GPU" that answers like the CPU and records each knn call's query count; its first call blocks
/// until released, so that a test can hold one call in flight.
struct Gate {
    sizes: parking_lot::Mutex<Vec<usize>>,
    entered: parking_lot::Mutex<Option<mpsc::Sender<()>>>,
    release: parking_lot::Mutex<Option<mpsc::Receiver<()>>>,
}

impl Backend for Gate {
    fn device(&self) -> Device {
        GPU
    }
    fn knn(
        &self,
        queries: &[f32],
        corpus: &[f32],
        dim: usize,
        metric: Metric,
        k: usize,
    ) -> Result<TopK, BackendError> {
        self.sizes.lock().push(queries.len() / dim);
        let first = self.entered.lock().take(); // the guard is dropped here, before any waiting
        if let Some(tx) = first {
            tx.send(()).unwrap();
            let rx = self.release.lock().take().unwrap();
            rx.recv().unwrap();
        }
        CpuBackend.knn(queries, corpus, dim, metric, k)
    }
}

/// An executor whose "GPU" is a [`Gate`] holding its first call until released, batching up to `max_batch`
/// calls for at most `max_wait`: the executor, the gate, the receiver told when the first call is held, and the
/// sender that releases it.
fn gated(
    clock: &Arc<ManualClock>,
    max_batch: usize,
    max_wait: Duration,
) -> (Executor, Arc<Gate>, mpsc::Receiver<()>, mpsc::Sender<()>) {
    let (entered_tx, entered_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel();
    let gate = Arc::new(Gate {
        sizes: parking_lot::Mutex::new(Vec::new()),
        entered: parking_lot::Mutex::new(Some(entered_tx)),
        release: parking_lot::Mutex::new(Some(release_rx)),
    });
    let cfg = ExecutorConfig {
        batching: BatchConfig {
            max_batch,
            max_wait,
            ..BatchConfig::default()
        },
        ..config(clock)
    };
    let exec = Executor::with_backends(cfg, Arc::new(CpuBackend), Some(gate.clone())).unwrap();
    (exec, gate, entered_rx, release_tx)
}

fn expected(q: &[f32], corpus: &SharedCorpus) -> TopK {
    CpuBackend
        .knn(q, corpus.data(), DIM, Metric::Cosine, K)
        .unwrap()
}

#[test]
fn single_knn_calls_in_flight_together_share_a_batch() {
    let clock = ManualClock::new();
    let (exec, gate, entered_rx, release_tx) = gated(&clock, 3, Duration::from_secs(600));
    let corpus = SharedCorpus::new(matrix(1, 200, DIM), DIM).unwrap();
    let barrier = Barrier::new(3);
    std::thread::scope(|s| {
        let (exec, corpus) = (&exec, &corpus);
        // A lone caller runs at once (no batch to wait for) and is held inside the backend.
        let lone = s.spawn(move || {
            let q = matrix(100, 1, DIM);
            let out = exec
                .knn_shared_single(&CallOptions::default(), &q, corpus, Metric::Cosine, K)
                .unwrap();
            assert_eq!(out.value, expected(&q, corpus));
        });
        entered_rx.recv().unwrap();
        // Three callers arrive while it is in flight: one batch of three.
        let followers: Vec<_> = (0..3u64)
            .map(|t| {
                let barrier = &barrier;
                s.spawn(move || {
                    let q = matrix(200 + t, 1, DIM);
                    barrier.wait();
                    let out = exec
                        .knn_shared_single(&CallOptions::default(), &q, corpus, Metric::Cosine, K)
                        .unwrap();
                    assert_eq!(out.device, GPU);
                    assert_eq!(out.value, expected(&q, corpus));
                })
            })
            .collect();
        for f in followers {
            f.join().unwrap();
        }
        release_tx.send(()).unwrap();
        lone.join().unwrap();
    });
    assert_eq!(*gate.sizes.lock(), vec![1, 3]);
    let h = exec.metrics().batch_sizes();
    assert_eq!((h.count(), h.sum()), (1, 3));
}

#[test]
fn concurrent_single_knn_calls_lose_and_duplicate_nothing() {
    let clock = ManualClock::new();
    let cfg = ExecutorConfig {
        batching: BatchConfig {
            max_batch: 8,
            max_wait: Duration::from_micros(300),
            ..BatchConfig::default()
        },
        ..config(&clock)
    };
    let exec = Executor::with_backends(
        cfg,
        Arc::new(CpuBackend),
        Some(Arc::new(FaultInjecting::new(CpuBackend, FaultPlan::new()))),
    )
    .unwrap();
    let corpora = [
        SharedCorpus::new(matrix(2, 120, DIM), DIM).unwrap(),
        SharedCorpus::new(matrix(3, 77, DIM), DIM).unwrap(),
    ];
    std::thread::scope(|s| {
        for t in 0..8u64 {
            let (exec, corpora) = (&exec, &corpora);
            s.spawn(move || {
                for i in 0..60u64 {
                    let corpus = &corpora[((t + i) % 2) as usize];
                    let q = matrix(1000 + t * 100 + i, 1, DIM);
                    let out = exec
                        .knn_shared_single(&CallOptions::default(), &q, corpus, Metric::Cosine, K)
                        .unwrap();
                    assert_eq!(out.value, expected(&q, corpus), "thread {t} call {i}");
                }
            });
        }
    });
    let h = exec.metrics().batch_sizes();
    assert!(h.sum() <= 8 * 60, "more batched answers than calls");
}

#[test]
fn a_wrong_length_query_is_a_typed_error() {
    let exec = Executor::with_backends(
        ExecutorConfig {
            ..config(&ManualClock::new())
        },
        Arc::new(CpuBackend),
        None,
    )
    .unwrap();
    let corpus = SharedCorpus::new(matrix(4, 10, DIM), DIM).unwrap();
    let err = exec
        .knn_shared_single(
            &CallOptions::default(),
            &[0.0; 3],
            &corpus,
            Metric::Cosine,
            K,
        )
        .unwrap_err();
    assert!(err.to_string().contains("query"), "{err}");
}

#[test]
fn multi_query_calls_join_single_query_batches_and_get_their_own_answers() {
    let clock = ManualClock::new();
    let (exec, gate, entered_rx, release_tx) = gated(&clock, 8, Duration::from_secs(5));
    let corpus = SharedCorpus::new(matrix(1, 200, DIM), DIM).unwrap();
    std::thread::scope(|s| {
        let (exec, corpus) = (&exec, &corpus);
        // A lone call runs at once and is held in the backend: the next ones queue up behind it.
        let lone = s.spawn(move || {
            let q = matrix(100, 1, DIM);
            let out = exec
                .knn_shared_single(&CallOptions::default(), &q, corpus, Metric::Cosine, K)
                .unwrap();
            assert_eq!(out.value, expected(&q, corpus));
        });
        entered_rx.recv().unwrap();
        // 1 + 3 + 4 queries fill one batch of 8 exactly.
        let joiners: Vec<_> = [(200u64, 1usize), (300, 3), (400, 4)]
            .into_iter()
            .map(|(seed, n)| {
                s.spawn(move || {
                    let q = matrix(seed, n, DIM);
                    let out = exec
                        .knn_shared_coalesced(
                            &CallOptions::default(),
                            &q,
                            corpus,
                            Metric::Cosine,
                            K,
                        )
                        .unwrap();
                    assert_eq!(out.value, expected(&q, corpus), "{n} queries");
                    assert_eq!(out.value.ids.len(), n * K);
                })
            })
            .collect();
        // Let them join while the lone call holds the device (the batch closes when full), then release it.
        std::thread::sleep(Duration::from_millis(300));
        release_tx.send(()).unwrap();
        lone.join().unwrap();
        for j in joiners {
            j.join().unwrap();
        }
    });
    let sizes = gate.sizes.lock().clone();
    assert_eq!(sizes.iter().sum::<usize>(), 1 + 1 + 3 + 4, "{sizes:?}");
    assert!(
        sizes.len() <= 3,
        "the joiners did not share batches: {sizes:?}"
    );
    // A call of max_batch queries or more runs on its own.
    let q = matrix(500, 8, DIM);
    let out = exec
        .knn_shared_coalesced(&CallOptions::default(), &q, &corpus, Metric::Cosine, K)
        .unwrap();
    assert_eq!(out.value, expected(&q, &corpus));
}

/// Two concurrent calls whose (k, metric) differ never share a batch, even when k is out of range and large
/// enough to reach the bits the batch key gave the metric: each caller gets its own answer or its own error.
#[test]
fn a_batch_mates_out_of_range_k_neither_poisons_nor_borrows_an_answer() {
    let clock = ManualClock::new();
    let (exec, _gate, entered_rx, release_tx) = gated(&clock, 2, Duration::from_millis(500));
    let corpus = SharedCorpus::new(matrix(1, 200, DIM), DIM).unwrap();
    // Cosine's code sat at bit 40 of the key, beside k: this k (Dot) read as K (Cosine).
    let huge_k = K + (1 << 40);
    let barrier = Barrier::new(2);
    std::thread::scope(|s| {
        let (exec, corpus, barrier) = (&exec, &corpus, &barrier);
        // A lone call holds the device, so the next two are batched.
        let lone = s.spawn(move || {
            let q = matrix(100, 1, DIM);
            exec.knn_shared_single(&CallOptions::default(), &q, corpus, Metric::Cosine, K)
                .unwrap();
        });
        entered_rx.recv().unwrap();
        let good = s.spawn(move || {
            let q = matrix(200, 1, DIM);
            barrier.wait();
            let out =
                exec.knn_shared_single(&CallOptions::default(), &q, corpus, Metric::Cosine, K);
            (q, out)
        });
        let bad = s.spawn(move || {
            let q = matrix(300, 1, DIM);
            barrier.wait();
            exec.knn_shared_single(&CallOptions::default(), &q, corpus, Metric::Dot, huge_k)
        });
        let (q, good) = good.join().unwrap();
        let bad = bad.join().unwrap();
        release_tx.send(()).unwrap();
        lone.join().unwrap();
        assert_eq!(
            good.map(|o| o.value),
            Ok(expected(&q, corpus)),
            "the valid call's own answer"
        );
        assert!(
            matches!(
                bad,
                Err(recall_hybrid_executor::ExecError::InvalidInput(
                    recall_cpu_simd::CpuError::KOutOfRange { k, n: 200 }
                )) if k == huge_k
            ),
            "the out-of-range k's own error: {bad:?}"
        );
    });
}

/// A batch that a larger call could not join is replaced as the open batch of its key, so nobody can join it any
/// more: it runs at once, even with a `max_wait` past what the clock can hold (a leader that waits for its batch
/// to fill), instead of waiting for members that can never come.
#[test]
fn a_batch_nobody_can_join_any_more_runs_without_waiting_to_fill() {
    let clock = ManualClock::new();
    let (exec, _gate, entered_rx, release_tx) = gated(&clock, 4, Duration::MAX);
    let exec = Arc::new(exec);
    let corpus = SharedCorpus::new(matrix(1, 200, DIM), DIM).unwrap();
    let (done_tx, done_rx) = mpsc::channel();
    let call = |seed: u64, n: usize| {
        let (exec, corpus, done_tx) = (exec.clone(), corpus.clone(), done_tx.clone());
        std::thread::spawn(move || {
            let q = matrix(seed, n, DIM);
            let out =
                exec.knn_shared_coalesced(&CallOptions::default(), &q, &corpus, Metric::Cosine, K);
            let ok = out.map(|o| o.value) == Ok(expected(&q, &corpus));
            done_tx.send((n, ok)).unwrap();
        })
    };
    // A call of max_batch queries runs at once and is held in the backend: the next ones are batched.
    call(100, 4);
    entered_rx.recv().unwrap();
    // 2 queries open a batch; 3 do not fit in it and open another, which 1 more fills.
    for (seed, n) in [(200, 2), (300, 3), (400, 1)] {
        call(seed, n);
        std::thread::sleep(Duration::from_millis(100));
    }
    release_tx.send(()).unwrap();
    let mut answered: Vec<(usize, bool)> = (0..4)
        .map(|_| {
            done_rx
                .recv_timeout(Duration::from_secs(30))
                .expect("every call answered (none waits for members that cannot join)")
        })
        .collect();
    answered.sort_unstable();
    assert_eq!(answered, vec![(1, true), (2, true), (3, true), (4, true)]);
}
