//! The host's parallel work inside a GPU call (the out-of-core knn's staging copy, k-means' member sort) with
//! rayon's global pool unavailable: while a call holds the device, every worker of that pool may be a caller
//! blocked on it, so that work must not need one (`recall_gpu_kernels::on_host_pool`). Its own test binary: it
//! sets the global pool to one thread, and a hang here would hold the process. Skips, saying why, where there is
//! no GPU.

#![cfg(feature = "gpu")]
#![allow(clippy::unwrap_used)] // a test crate

use recall_cpu_simd::{Metric, TopK};
use recall_hybrid_executor::{Backend, CpuBackend, GpuBackend};
use std::io::Write as _;
use std::sync::{Arc, mpsc};
use std::time::Duration;

fn matrix(seed: u64, rows: usize, dim: usize) -> Vec<f32> {
    let mut rng = recall_hybrid_executor::difftest::SplitMix::new(seed);
    (0..rows * dim)
        .map(|_| rng.next_f32() * 2.0 - 1.0)
        .collect()
}

fn bits(t: &TopK) -> (Vec<u32>, Vec<u32>) {
    (
        t.ids.clone(),
        t.scores.iter().map(|s| s.to_bits()).collect(),
    )
}

/// Rayon's global pool, one thread, for every test of this binary.
fn one_worker() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build_global()
            .unwrap();
    });
}

fn gpu_or_skip() -> Option<Arc<GpuBackend>> {
    match GpuBackend::discover(None) {
        Ok(g) => Some(Arc::new(g)),
        Err(why) => {
            let _ = writeln!(std::io::stderr(), "skipped: no usable GPU here ({why})");
            None
        }
    }
}

/// GPU k-means sorts the points by cluster on the host between two kernels, in parallel, while it holds the
/// device. Called from a thread outside rayon's pool while the pool's only worker is blocked (as every worker
/// is when all are callers waiting for the device), it must not wait for that worker.
#[test]
fn gpu_kmeans_finishes_while_rayons_workers_are_blocked() {
    let Some(gpu) = gpu_or_skip() else { return };
    one_worker();
    let (n, dim, k) = (4096, 16, 8);
    let points = Arc::new(matrix(43, n, dim));
    let want = CpuBackend.kmeans(&points, dim, k, 2, 9).unwrap();
    let release = Arc::new(std::sync::Barrier::new(2));
    {
        let release = release.clone();
        rayon::spawn(move || {
            release.wait();
        });
    }
    let (tx, rx) = mpsc::channel();
    {
        let (gpu, points) = (gpu.clone(), points.clone());
        std::thread::spawn(move || {
            let _ = tx.send(gpu.kmeans(&points, dim, k, 2, 9));
        });
    }
    let got = rx.recv_timeout(Duration::from_secs(120));
    release.wait();
    match got {
        Ok(got) => {
            let got = got.unwrap();
            assert_eq!(got.assignments, want.assignments);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got.centroids), bits(&want.centroids));
        }
        Err(_) => panic!(
            "GPU k-means did not finish in 120 s while rayon's only worker was blocked: its host sort waits \
             for that worker"
        ),
    }
}

#[test]
fn a_streamed_knn_on_rayons_only_worker_finishes() {
    let Some(gpu) = gpu_or_skip() else { return };
    // Every worker of the global pool is busy in a GPU call: here the one worker is the caller itself.
    one_worker();
    // Chunks of 2^21 values (8 MiB): the staging copy of each is large enough to be split into parallel
    // pieces; four chunks, the last one short.
    let (dim, chunk_rows) = (64, 1 << 15);
    let n = 3 * chunk_rows + 1000;
    let corpus = Arc::new(matrix(41, n, dim));
    let queries = Arc::new(matrix(42, 3, dim));
    let want = CpuBackend
        .knn(&queries, &corpus, dim, Metric::Dot, 10)
        .unwrap();
    let (tx, rx) = mpsc::channel();
    {
        let (gpu, corpus, queries) = (gpu.clone(), corpus.clone(), queries.clone());
        rayon::spawn(move || {
            // Twice: the second call reuses the first one's staging buffers.
            for _ in 0..2 {
                let r = gpu.knn_streamed(&queries, &corpus, dim, Metric::Dot, 10, chunk_rows);
                let _ = tx.send(r);
            }
        });
    }
    for _ in 0..2 {
        match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(got) => assert_eq!(bits(&got.unwrap()), bits(&want)),
            Err(_) => panic!(
                "knn_streamed called on rayon's only worker did not finish in 120 s: the staging copy waits \
                 for a rayon worker that is blocked in the call"
            ),
        }
    }
}
