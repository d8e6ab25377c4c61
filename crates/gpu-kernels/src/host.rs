//! The host's share of a GPU call, done while the call holds the device (a corpus chunk copied into pinned
//! staging, k-means' member sort between two kernels), runs its parallel pieces on a pool of its own, never on
//! rayon's global pool.
//!
//! Callers of a GPU backend are often rayon workers (`queries.par_iter()` over GPU calls), and all of them but the
//! one in the device may be blocked, waiting for it. A thread outside the global pool that holds the device (or a
//! helper of it) and hands parallel work to that pool would wait for a free worker that never comes (session 32:
//! the out-of-core knn's staging copy and k-means' sort both could). This pool's threads never take the device,
//! so its pieces always find a thread.

use std::sync::OnceLock;

/// The host pool: as many threads as rayon's global pool (`RAYON_NUM_THREADS` holds for both), at most 32; made
/// at first use. `None` where the threads could not be started.
fn host_pool() -> Option<&'static rayon::ThreadPool> {
    static POOL: OnceLock<Option<rayon::ThreadPool>> = OnceLock::new();
    POOL.get_or_init(|| {
        let threads = rayon::current_num_threads().clamp(1, 32);
        match rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("recall-gpu-host-{i}"))
            .build()
        {
            Ok(pool) => Some(pool),
            Err(e) => {
                tracing::warn!(error = %e, "recall: no host pool for GPU calls; their host work runs in place");
                None
            }
        }
    })
    .as_ref()
}

/// Run `f`, whose parallel iterators then run on the host pool (see the module doc). Where the pool could not be
/// made, `f` runs in place.
pub fn on_host_pool<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    match host_pool() {
        Some(pool) => pool.install(f),
        None => f(),
    }
}

#[cfg(test)]
mod tests {
    use super::on_host_pool;
    use rayon::prelude::*;
    use std::sync::mpsc;
    use std::time::Duration;

    /// Parallel work handed over while every worker of rayon's global pool is blocked still finishes: the
    /// situation of a GPU call whose callers fill the global pool, waiting for the device it holds.
    #[test]
    fn parallel_work_finishes_while_the_global_pool_is_blocked() {
        // Every global worker waits at the barrier until this test has its answer (or gave up).
        let threads = rayon::current_num_threads();
        let release = std::sync::Arc::new(std::sync::Barrier::new(threads + 1));
        for _ in 0..threads {
            let r = release.clone();
            rayon::spawn(move || {
                r.wait();
            });
        }
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let sum: u64 = on_host_pool(|| (0..1_000_000u64).into_par_iter().sum());
            let _ = tx.send(sum);
        });
        let got = rx.recv_timeout(Duration::from_secs(60));
        release.wait();
        assert_eq!(
            got,
            Ok(499_999_500_000),
            "the host pool's work waited on rayon's global pool"
        );
    }
}
