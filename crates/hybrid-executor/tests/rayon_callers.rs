//! Single-query calls made from rayon's worker threads (`queries.par_iter().map(|q| exec.knn_shared_single(..))`)
//! beside calls from other threads: no caller may wait on a batch in a way that stops the pool the batch's own
//! run needs. Its own test binary: a deadlock here would hold the process's global rayon pool.

#![allow(clippy::unwrap_used)] // a test crate

use recall_cpu_simd::{Metric, TopK};
use recall_hybrid_executor::{
    Backend, BackendError, BatchConfig, CallOptions, CorpusRef, CpuBackend, Device, Executor,
    ExecutorConfig, ManualClock, SharedCorpus,
};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const DIM: usize = 16;
const K: usize = 3;
/// Rows enough for the CPU's knn to split over rayon's threads (1 + threads queries x rows x dim >= 2^21).
const ROWS: usize = 140_000;

fn matrix(seed: u64, rows: usize, dim: usize) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..rows * dim)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// A stand-in GPU that answers like the CPU; its first call may be held until released, so that a test can keep
/// one call in flight (the next calls are then batched).
struct Gate {
    entered: Mutex<Option<mpsc::Sender<()>>>,
    release: Mutex<Option<mpsc::Receiver<()>>>,
}

impl Gate {
    /// A gate that holds its first call until released, or (`None`) a plain pass-through.
    fn new(hold: Option<(mpsc::Sender<()>, mpsc::Receiver<()>)>) -> Arc<Gate> {
        let (entered, release) = hold.unzip();
        Arc::new(Gate {
            entered: Mutex::new(entered),
            release: Mutex::new(release),
        })
    }

    /// Hold the first call until released (when the gate holds one).
    fn pass(&self) {
        let first = self.entered.lock().unwrap().take();
        if let Some(tx) = first {
            tx.send(()).unwrap();
            let rx = self.release.lock().unwrap().take().unwrap();
            rx.recv().unwrap();
        }
    }
}

impl Backend for Gate {
    fn device(&self) -> Device {
        Device::Gpu { ordinal: 0 }
    }
    fn knn(
        &self,
        queries: &[f32],
        corpus: &[f32],
        dim: usize,
        metric: Metric,
        k: usize,
    ) -> Result<TopK, BackendError> {
        self.pass();
        CpuBackend.knn(queries, corpus, dim, metric, k)
    }
    fn similarity(
        &self,
        queries: &[f32],
        corpus: &[f32],
        dim: usize,
        metric: Metric,
    ) -> Result<Vec<f32>, BackendError> {
        self.pass();
        CpuBackend.similarity(queries, corpus, dim, metric)
    }
}

/// An executor over a [`Gate`] that batches up to `1 + ` rayon's threads calls, waiting up to 2 s for them.
fn gated_executor(gate: Arc<Gate>) -> Arc<Executor> {
    let cfg = ExecutorConfig {
        gpu_min_work: 0,
        calibrate: false,
        use_cache: false,
        clock: ManualClock::new(),
        batching: BatchConfig {
            max_batch: 1 + rayon::current_num_threads(),
            max_wait: Duration::from_secs(2),
            ..BatchConfig::default()
        },
        ..ExecutorConfig::default()
    };
    Arc::new(Executor::with_backends(cfg, Arc::new(CpuBackend), Some(gate)).unwrap())
}

/// Run `call(seed)` from a thread outside rayon's pool (it opens a batch), then from every worker of the pool;
/// true when all finished within 60 s. With `lone`, a first call is made before and held in the gate until the
/// others are done (knn batches calls only while another is in flight; `lone` receives when it is held, and is
/// then released through the sender).
fn leader_and_every_worker(
    lone: Option<(mpsc::Receiver<()>, mpsc::Sender<()>)>,
    call: impl Fn(u64) + Send + Sync + 'static,
) -> bool {
    let (done_tx, done_rx) = mpsc::channel();
    std::thread::spawn(move || {
        std::thread::scope(|s| {
            let call = &call;
            let lone = lone.map(|(entered, release)| {
                let held = s.spawn(move || call(100));
                entered.recv().unwrap();
                (held, release)
            });
            let leader = s.spawn(move || call(200));
            std::thread::sleep(Duration::from_millis(300));
            rayon::broadcast(|ctx| call(300 + ctx.index() as u64));
            leader.join().unwrap();
            if let Some((held, release)) = lone {
                release.send(()).unwrap();
                held.join().unwrap();
            }
        });
        done_tx.send(()).unwrap();
    });
    done_rx.recv_timeout(Duration::from_secs(60)).is_ok()
}

/// knn batches led by a thread outside rayon's pool, joined by every worker of the pool: the leader's CPU knn runs
/// on that pool, so a worker parked as a batch member would leave the leader (and so itself) waiting forever.
#[test]
fn knn_batches_joined_from_every_rayon_worker_still_finish() {
    let (entered_tx, entered_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel();
    let exec = gated_executor(Gate::new(Some((entered_tx, release_rx))));
    let corpus = SharedCorpus::new(matrix(1, ROWS, DIM), DIM).unwrap();
    let call = move |seed: u64| {
        let q = matrix(seed, 1, DIM);
        let out = exec
            .knn_shared_single(&CallOptions::default(), &q, &corpus, Metric::Dot, K)
            .unwrap();
        let want = CpuBackend.knn(&q, corpus.data(), DIM, Metric::Dot, K);
        assert_eq!(Ok(out.value), want);
    };
    assert!(
        leader_and_every_worker(Some((entered_rx, release_tx)), call),
        "the calls did not finish within 60 s: the batch's leader and rayon's workers wait for each other"
    );
}

/// The same for batched single-query cosine scores.
#[test]
fn cosine_batches_joined_from_every_rayon_worker_still_finish() {
    let exec = gated_executor(Gate::new(None));
    let corpus: &'static [f32] = matrix(2, ROWS, DIM).leak();
    let call = move |seed: u64| {
        let q = matrix(seed, 1, DIM);
        let c = CorpusRef::new(corpus, DIM).unwrap();
        let out = exec
            .cosine_scores_single(&CallOptions::default(), &q, &c)
            .unwrap();
        assert_eq!(Ok(out.value), CpuBackend.cosine_scores(&q, corpus, DIM));
    };
    assert!(
        leader_and_every_worker(None, call),
        "the calls did not finish within 60 s: the batch's leader and rayon's workers wait for each other"
    );
}
