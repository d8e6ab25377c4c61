//! recall's parallel CPU work started from a thread outside rayon's pools runs on recall's own pool
//! (`recall_cpu_simd::in_pool`), so it finishes while every worker of rayon's global pool is blocked: the
//! situation of a call that holds a tenant permit (or leads a batch) while the callers queued behind it are the
//! global pool's workers. Its own test binary: it blocks the process's global pool.

#![allow(clippy::unwrap_used)] // a test crate

use recall_cpu_simd::{Corpus, Metric, knn};
use std::sync::{Arc, Barrier, mpsc};
use std::time::Duration;

#[test]
fn parallel_cpu_work_finishes_while_the_global_pool_is_blocked() {
    let threads = rayon::current_num_threads();
    let release = Arc::new(Barrier::new(threads + 1));
    for _ in 0..threads {
        let r = release.clone();
        rayon::spawn(move || {
            r.wait();
        });
    }
    // 4 queries x 40,000 rows x 64: past the threshold for splitting over the cores.
    let dim = 64;
    let corpus: Vec<f32> = (0..40_000 * dim).map(|i| (i % 97) as f32 * 0.01).collect();
    let queries: Vec<f32> = (0..4 * dim).map(|i| (i % 13) as f32 * 0.1).collect();
    let (tx, rx) = mpsc::channel();
    {
        let (corpus, queries) = (corpus.clone(), queries.clone());
        std::thread::spawn(move || {
            let r = knn(&queries, &Corpus::f32(&corpus, dim), Metric::Dot, 5).map(|t| t.ids);
            let _ = tx.send(r);
        });
    }
    let got = rx.recv_timeout(Duration::from_secs(60));
    release.wait();
    let want = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap()
        .install(|| knn(&queries, &Corpus::f32(&corpus, dim), Metric::Dot, 5).map(|t| t.ids));
    assert_eq!(
        got.ok(),
        Some(want),
        "the CPU's parallel work waited on rayon's global pool"
    );
    // Worker threads keep nesting in their own pool.
    let inside = rayon::ThreadPoolBuilder::new()
        .num_threads(3)
        .build()
        .unwrap()
        .install(recall_cpu_simd::pool_threads);
    assert_eq!(inside, 3);
}
