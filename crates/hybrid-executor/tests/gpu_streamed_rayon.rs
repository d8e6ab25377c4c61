//! Out-of-core knn of a corpus slice (streamed through pinned staging buffers) called from rayon's worker
//! threads: the staging copy of the next chunk must not need a free worker of rayon's global pool, because while
//! the call holds the device every other worker may be a caller blocked on it. Its own test binary: it sets the
//! global pool to one thread (the call's own), and a hang here would hold the process. Skips, saying why, where
//! there is no GPU.

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

#[test]
fn a_streamed_knn_on_rayons_only_worker_finishes() {
    let gpu = match GpuBackend::discover(None) {
        Ok(g) => Arc::new(g),
        Err(why) => {
            let _ = writeln!(std::io::stderr(), "skipped: no usable GPU here ({why})");
            return;
        }
    };
    // Every worker of the global pool is busy in a GPU call: here the one worker is the caller itself.
    rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build_global()
        .unwrap();
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
            let r = gpu.knn_streamed(&queries, &corpus, dim, Metric::Dot, 10, chunk_rows);
            let _ = tx.send(r);
        });
    }
    match rx.recv_timeout(Duration::from_secs(120)) {
        Ok(got) => assert_eq!(bits(&got.unwrap()), bits(&want)),
        Err(_) => panic!(
            "knn_streamed called on rayon's only worker did not finish in 120 s: the staging copy waits \
             for a rayon worker that is blocked in the call"
        ),
    }
}
