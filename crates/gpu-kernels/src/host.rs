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
///
/// A worker of another rayon pool (the global one, the multi-GPU shard threads) does not wait in `install`
/// itself: rayon lets such a worker run its own pool's other jobs while it waits, and with the device held one
/// of them may be the next GPU call, which would wait for the device on this very thread, forever. It waits for a
/// plain thread that waits in `install` instead (where no thread can be started, it waits in `install`).
pub fn on_host_pool<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    let Some(pool) = host_pool() else {
        return f();
    };
    if rayon::current_thread_index().is_none() || pool.current_thread_index().is_some() {
        // No pool's worker (it blocks in `install`, running nothing else), or the host pool's own (in place).
        return pool.install(f);
    }
    let mut f = Some(f);
    let mut answer = None;
    std::thread::scope(|s| {
        let (f, answer) = (&mut f, &mut answer);
        let waiter = std::thread::Builder::new()
            .name("recall-gpu-host-wait".into())
            .spawn_scoped(s, move || *answer = f.take().map(|f| pool.install(f)));
        if let Ok(waiter) = waiter
            && let Err(panic) = waiter.join()
        {
            std::panic::resume_unwind(panic);
        }
    });
    match (answer, f) {
        (Some(r), _) => r,
        // No thread could be started: wait in `install` after all.
        (None, Some(f)) => pool.install(f),
        (None, None) => {
            unreachable!("the waiting thread took the work and neither answered nor panicked")
        }
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

    /// A worker of rayon's global pool that holds the device (a GPU call from `queries.par_iter()`) and hands its
    /// host work to the host pool runs none of its own pool's other jobs while it waits: such a job may be the
    /// next GPU call, which would wait for the device this very thread holds, forever.
    #[test]
    fn a_worker_holding_the_device_runs_no_other_call_while_the_host_pool_works() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        // Stands for the GPU backend's lock, and which thread holds it.
        let device = parking_lot::Mutex::new(());
        let holder = parking_lot::Mutex::new(None);
        let reentered = AtomicUsize::new(0);
        (0..32).into_par_iter().for_each(|_| {
            let me = std::thread::current().id();
            if *holder.lock() == Some(me) {
                // This thread holds the device already: taking the lock again would never return.
                reentered.fetch_add(1, Ordering::Relaxed);
                return;
            }
            let _device = device.lock();
            *holder.lock() = Some(me);
            on_host_pool(|| {
                std::thread::sleep(Duration::from_millis(2));
                (0..10_000u64).into_par_iter().sum::<u64>()
            });
            *holder.lock() = None;
        });
        assert_eq!(
            reentered.load(Ordering::Relaxed),
            0,
            "a call ran inside another call that held the device, on the same thread"
        );
    }
}
