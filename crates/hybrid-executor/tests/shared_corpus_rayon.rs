//! `SharedCorpus::max_abs` (computed once, on rayon's pool for a large corpus) asked for by rayon's workers while
//! another thread computes it. Its own test binary: a deadlock here would hold the process's global rayon pool.

#![allow(clippy::unwrap_used)] // a test crate

use recall_hybrid_executor::SharedCorpus;
use std::sync::{Arc, Barrier, mpsc};
use std::time::Duration;

/// Every worker is busy when a thread off the pool starts computing the largest magnitude (its parallel scan
/// waits for a worker); then every worker asks for it too. The workers must not wait for a computation that
/// waits for them.
#[test]
fn max_abs_asked_for_on_every_rayon_worker_during_its_computation_still_finishes() {
    // Values enough for the scan to split over rayon's threads (2^18 and more).
    let mut data = vec![0.5f32; 1 << 20];
    data[12_345] = -3.0;
    let corpus = SharedCorpus::new(data, 16).unwrap();
    let workers = rayon::current_num_threads();
    let hold = Arc::new(Barrier::new(workers + 1));
    let (done_tx, done_rx) = mpsc::channel();
    {
        let (corpus, hold, done_tx) = (corpus.clone(), hold.clone(), done_tx.clone());
        std::thread::spawn(move || {
            let outs = rayon::broadcast(|_| {
                hold.wait();
                corpus.max_abs()
            });
            for v in outs {
                done_tx.send(("rayon worker", v)).unwrap();
            }
        });
    }
    // Every worker is in the broadcast (held): start the computation off the pool, let it reach its scan, then
    // let the workers go on to ask for the value.
    std::thread::sleep(Duration::from_millis(200));
    {
        let (corpus, done_tx) = (corpus.clone(), done_tx.clone());
        std::thread::spawn(move || {
            done_tx
                .send(("caller off the pool", corpus.max_abs()))
                .unwrap();
        });
    }
    std::thread::sleep(Duration::from_millis(200));
    hold.wait();
    for _ in 0..1 + workers {
        let (who, v) = done_rx.recv_timeout(Duration::from_secs(60)).expect(
            "every call finished (no deadlock between the computation and rayon's workers)",
        );
        assert_eq!(v, 3.0, "{who}");
    }
}
