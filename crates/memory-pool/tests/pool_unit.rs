//! Unit tests of the caching pool with the fake allocator: one behaviour each.

use recall_memory_pool::fake::{FakeAllocator, FakeStream};
use recall_memory_pool::{
    CachingPool, DeviceBuffer, GpuMemory, ManagedBuffer, OomScope, PinnedBuffer, PoolConfig,
    PoolError, ReusePolicy, StagingRing, TenantId, UnifiedBuffer, size_class,
};

const MIB: usize = 1 << 20;
const S0: FakeStream = FakeStream(0);
const S1: FakeStream = FakeStream(1);

fn pool(budget: usize, capacity: usize) -> CachingPool<FakeAllocator> {
    CachingPool::new(
        FakeAllocator::new(capacity),
        PoolConfig::with_budget(budget),
    )
}

#[test]
fn size_classes_are_powers_of_two_then_2_mib_multiples() {
    assert_eq!(size_class(0), Some(512));
    assert_eq!(size_class(1), Some(512));
    assert_eq!(size_class(513), Some(1024));
    assert_eq!(size_class(MIB), Some(MIB));
    assert_eq!(size_class(MIB + 1), Some(2 * MIB));
    assert_eq!(size_class(2 * MIB + 1), Some(4 * MIB));
    assert_eq!(size_class(5 * MIB), Some(6 * MIB));
    assert_eq!(size_class(usize::MAX), None);
}

#[test]
fn same_stream_reuses_at_once_without_a_fence() {
    let p = pool(64 * MIB, 64 * MIB);
    let a = p.allocate(1000, &S0).unwrap();
    let addr = a.addr();
    p.allocator().use_block(addr, S0);
    drop(a);
    let b = p.allocate(1000, &S0).unwrap();
    assert_eq!(b.addr(), addr);
    let s = p.stats();
    assert_eq!((s.hits, s.misses, s.fences_recorded), (1, 1, 0));
    assert_eq!(p.allocator().fences(), 0);
}

#[test]
fn another_stream_waits_for_the_fence() {
    let p = pool(64 * MIB, 64 * MIB);
    let a = p.allocate(1000, &S0).unwrap();
    let addr = a.addr();
    p.allocator().use_block(addr, S0);
    drop(a);
    // Stream 0's work is still queued: stream 1 gets a fresh block, and stream 0 gets fenced.
    let b = p.allocate(1000, &S1).unwrap();
    assert_ne!(b.addr(), addr);
    assert_eq!(p.stats().fences_recorded, 1);
    p.allocator().complete(S0);
    let c = p.allocate(1000, &S1).unwrap();
    assert_eq!(
        c.addr(),
        addr,
        "fence completed: the cached block is reused"
    );
    assert_eq!(p.stats().hits, 1);
}

#[test]
fn host_visible_memory_waits_even_on_the_same_stream() {
    let p = CachingPool::new(
        FakeAllocator::new(64 * MIB),
        PoolConfig {
            reuse: ReusePolicy::HostVisible,
            ..PoolConfig::with_budget(64 * MIB)
        },
    );
    let a = p.allocate(4096, &S0).unwrap();
    let addr = a.addr();
    p.allocator().use_block(addr, S0);
    drop(a);
    assert_ne!(p.allocate(4096, &S0).unwrap().addr(), addr);
    p.allocator().complete(S0);
    assert_eq!(p.allocate(4096, &S0).unwrap().addr(), addr);
}

#[test]
fn over_budget_is_a_typed_error_before_the_driver() {
    let p = pool(8 * MIB, 64 * MIB);
    let _a = p.allocate(6 * MIB, &S0).unwrap();
    let allocs = p.allocator().allocations();
    let err = p.allocate(4 * MIB, &S0).unwrap_err();
    assert_eq!(
        err,
        PoolError::OutOfMemory {
            requested: 4 * MIB,
            in_use: 6 * MIB,
            budget: 8 * MIB,
            scope: OomScope::Pool
        }
    );
    assert!(err.is_out_of_memory());
    assert_eq!(p.allocator().allocations(), allocs);
    assert_eq!(p.stats().failed_requests, 1);
    assert_eq!(
        err.to_string(),
        "out of memory: 4194304 bytes requested, 6291456 in use, pool budget 8388608"
    );
}

#[test]
fn requests_past_usize_max_are_typed_errors_under_an_unbounded_budget() {
    // A budget of usize::MAX ("no limit": `RECALL_GPU_VRAM_BUDGET_MIB` saturates to it) and quota usize::MAX:
    // live or held bytes plus a request near usize::MAX overflow. That is out of memory, not a panic (debug)
    // or a check that wraps and passes (release).
    let p = pool(usize::MAX, 64 * MIB);
    drop(p.allocate(8 * MIB, &S1).unwrap());
    assert_eq!(p.stats().cached_bytes, 8 * MIB);
    // Held (8 MiB cached) + the class of this request overflows; the live bytes alone do not.
    let e = p.allocate(usize::MAX - 4 * MIB, &S0).unwrap_err();
    assert!(e.is_out_of_memory(), "{e}");
    let _live = p.allocate(4 * MIB, &S1).unwrap();
    // Live bytes + the request overflow: refused before the driver is asked.
    let allocs = p.allocator().allocations();
    let e = p.allocate(usize::MAX - 2 * MIB, &S0).unwrap_err();
    assert!(
        matches!(
            e,
            PoolError::OutOfMemory {
                scope: OomScope::Pool,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(p.allocator().allocations(), allocs);
    let e = p.reserve(TenantId::DEFAULT, usize::MAX).unwrap_err();
    assert!(
        matches!(
            e,
            PoolError::OutOfMemory {
                scope: OomScope::Pool,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(p.stats().reserved_external_bytes, 0);
    // A tenant quota of usize::MAX: the same.
    let t = TenantId(3);
    p.set_tenant_quota(t, Some(usize::MAX));
    let _t_live = p.allocate_for(t, 4 * MIB, &S1).unwrap();
    let e = p.reserve(t, usize::MAX - MIB).unwrap_err();
    assert!(
        matches!(
            e,
            PoolError::OutOfMemory {
                scope: OomScope::Tenant(_),
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(p.tenant_stats(t).in_use_bytes, 4 * MIB);
}

#[test]
fn cached_blocks_are_trimmed_to_fit_the_budget() {
    let p = pool(8 * MIB, 64 * MIB);
    let a = p.allocate(6 * MIB, &S0).unwrap();
    p.allocator().use_block(a.addr(), S0);
    drop(a);
    // 6 MiB cached + 4 MiB new > 8 MiB: the cache is given back (waiting for stream 0) first.
    let b = p.allocate(4 * MIB, &S1).unwrap();
    let s = p.stats();
    assert_eq!(s.cached_bytes, 0);
    assert_eq!(s.trimmed_bytes, 6 * MIB as u64);
    assert_eq!(p.allocator().outstanding_bytes(), 4 * MIB);
    assert!(p.allocator().violations().is_empty());
    drop(b);
}

#[test]
fn driver_oom_trims_and_retries_once() {
    let p = pool(64 * MIB, 8 * MIB);
    let a = p.allocate(6 * MIB, &S0).unwrap();
    drop(a);
    // Within budget, but the "device" has 8 MiB: the cached 6 MiB must go first.
    let b = p.allocate(4 * MIB, &S1).unwrap();
    assert_eq!(p.stats().driver_oom_retries, 1);
    assert_eq!(p.stats().cached_bytes, 0);
    // Now truly full: the same typed error, scope Device.
    let err = p.allocate(6 * MIB, &S1).unwrap_err();
    assert!(matches!(
        err,
        PoolError::OutOfMemory {
            scope: OomScope::Device,
            ..
        }
    ));
    drop(b);
}

#[test]
fn tenant_quota_is_enforced_and_does_not_touch_others() {
    let p = pool(64 * MIB, 64 * MIB);
    let t1 = TenantId(1);
    p.set_tenant_quota(t1, Some(4 * MIB));
    let _a = p.allocate_for(t1, 4 * MIB, &S0).unwrap();
    let err = p.allocate_for(t1, 512, &S0).unwrap_err();
    assert!(matches!(
        err,
        PoolError::OutOfMemory {
            scope: OomScope::Tenant(TenantId(1)),
            ..
        }
    ));
    assert!(p.allocate_for(TenantId(2), 8 * MIB, &S0).is_ok());
    let ts = p.tenant_stats(t1);
    assert_eq!((ts.in_use_bytes, ts.failed_requests), (4 * MIB, 1));
}

#[test]
fn reservations_count_against_budget_and_quota() {
    let p = pool(8 * MIB, 64 * MIB);
    let r = p.reserve(TenantId::DEFAULT, 5 * MIB).unwrap();
    assert_eq!(p.stats().reserved_external_bytes, 5 * MIB);
    assert!(p.allocate(4 * MIB, &S0).is_err());
    drop(r);
    assert!(p.allocate(4 * MIB, &S0).is_ok());
}

#[test]
fn trim_releases_only_finished_blocks_and_trim_all_everything() {
    let p = pool(64 * MIB, 64 * MIB);
    let a = p.allocate(MIB, &S0).unwrap();
    let b = p.allocate(MIB, &S1).unwrap();
    p.allocator().use_block(a.addr(), S0);
    p.allocator().use_block(b.addr(), S1);
    drop((a, b));
    p.allocator().complete(S1);
    assert_eq!(p.trim(), MIB, "only stream 1's block is finished");
    assert_eq!(p.stats().cached_bytes, MIB);
    assert_eq!(p.trim_all(), MIB);
    assert_eq!(p.allocator().outstanding_bytes(), 0);
    assert!(p.allocator().violations().is_empty());
}

#[test]
fn max_cached_caps_the_cache_on_the_next_miss() {
    let p = pool(64 * MIB, 64 * MIB);
    p.set_max_cached(Some(2 * MIB));
    let blocks: Vec<_> = (0..4).map(|_| p.allocate(MIB, &S0).unwrap()).collect();
    drop(blocks);
    assert_eq!(p.stats().cached_bytes, 4 * MIB);
    let _x = p.allocate(8 * MIB, &S0).unwrap();
    assert!(p.stats().cached_bytes <= 2 * MIB);
}

#[test]
fn dropping_the_pool_gives_everything_back() {
    let p = pool(64 * MIB, 64 * MIB);
    let a = p.allocate(3 * MIB, &S0).unwrap();
    let b = p.allocate(100, &S1).unwrap();
    drop(a);
    let alloc_view = p.clone();
    drop(p);
    assert_eq!(alloc_view.stats().blocks_in_use, 1);
    drop(b);
    assert_eq!(alloc_view.stats().blocks_cached, 2);
    alloc_view.trim_all();
    assert_eq!(alloc_view.allocator().outstanding_bytes(), 0);
}

#[test]
fn the_last_handle_gives_the_cache_back_waiting_for_streams() {
    let fake = std::sync::Arc::new(FakeAllocator::new(64 * MIB));
    let p = CachingPool::new(fake.clone(), PoolConfig::with_budget(64 * MIB));
    let a = p.allocate(3 * MIB, &S0).unwrap();
    fake.use_block(a.addr(), S0);
    drop(a);
    assert_eq!(fake.outstanding_bytes(), 4 * MIB);
    drop(p);
    assert_eq!(fake.outstanding_bytes(), 0);
    assert!(fake.violations().is_empty());
}

#[test]
fn budget_defaults_to_80_percent_and_checks_fractions() {
    use recall_memory_pool::Budget;
    assert_eq!(Budget::default().resolve(1000).unwrap(), 800);
    assert_eq!(Budget::Bytes(5).resolve(1000).unwrap(), 5);
    assert!(Budget::FractionOfDevice(1.5).resolve(1000).is_err());
    assert!(Budget::FractionOfDevice(0.0).resolve(1000).is_err());
}

#[test]
fn pool_and_blocks_cross_threads() {
    let p = pool(256 * MIB, 256 * MIB);
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..4u64)
            .map(|t| {
                let p = p.clone();
                s.spawn(move || {
                    for i in 0..200usize {
                        let b = p.allocate((i * 997) % (3 * MIB), &FakeStream(t)).unwrap();
                        p.allocator().use_block(b.addr(), FakeStream(t));
                        if i % 50 == 0 {
                            p.allocator().complete(FakeStream(t));
                        }
                    }
                })
            })
            .collect();
        // Join each thread itself: `scope` returns once the closures have returned, which can be before a
        // thread's locals (its block cache, flushed into the pool on exit) have been destroyed.
        for w in workers {
            w.join().unwrap();
        }
    });
    assert_eq!(p.stats().in_use_bytes, 0);
    p.trim_all();
    assert_eq!(p.allocator().outstanding_bytes(), 0);
    assert!(p.allocator().violations().is_empty());
}

#[test]
fn gpu_types_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<CachingPool<FakeAllocator>>();
    send_sync::<GpuMemory>();
    send_sync::<DeviceBuffer<f32>>();
    send_sync::<PinnedBuffer<f32>>();
    send_sync::<ManagedBuffer<f32>>();
    send_sync::<UnifiedBuffer<half::f16>>();
    fn send<T: Send>() {}
    send::<StagingRing>();
}

// ---- Thread caches: the lock-free hit path ----

#[test]
fn a_small_block_is_parked_and_comes_back_to_the_same_stream() {
    let p = pool(64 * MIB, 64 * MIB);
    let addr = p.allocate(4096, &S0).unwrap().addr();
    let s = p.stats();
    assert_eq!(
        (s.thread_cached_bytes, s.cached_bytes, s.in_use_bytes),
        (4096, 4096, 0)
    );
    let b = p.allocate(4000, &S0).unwrap();
    assert_eq!(b.addr(), addr);
    let s = p.stats();
    assert_eq!((s.requests, s.hits, s.misses), (2, 1, 1));
    assert_eq!((s.thread_cached_bytes, s.in_use_bytes), (0, 4096));
    assert_eq!(p.allocator().allocations(), 1);
}

#[test]
fn a_parked_block_goes_to_another_stream_only_after_its_fence() {
    let p = pool(64 * MIB, 64 * MIB);
    let a = p.allocate(4096, &S0).unwrap();
    let addr = a.addr();
    p.allocator().use_block(addr, S0);
    drop(a);
    assert_eq!(p.stats().thread_cached_bytes, 4096);
    // Stream 1 misses the thread cache; the locked path flushes it and fences stream 0.
    let b = p.allocate(4096, &S1).unwrap();
    assert_ne!(b.addr(), addr);
    assert_eq!(p.stats().thread_cached_bytes, 0);
    p.allocator().complete(S0);
    assert_eq!(p.allocate(4096, &S1).unwrap().addr(), addr);
    assert!(p.allocator().violations().is_empty());
}

#[test]
fn large_blocks_and_quota_tenants_skip_the_thread_cache() {
    let p = pool(64 * MIB, 64 * MIB);
    p.set_tenant_quota(TenantId(1), Some(8 * MIB));
    drop(p.allocate(2 * MIB, &S0).unwrap());
    drop(p.allocate_for(TenantId(1), 4096, &S0).unwrap());
    drop(p.allocate_for(TenantId(1), 4096, &S0).unwrap());
    let s = p.stats();
    assert_eq!(s.thread_cached_bytes, 0);
    assert_eq!(s.cached_bytes, 2 * MIB + 4096);
}

#[test]
fn host_visible_pools_never_park() {
    let p = CachingPool::new(
        FakeAllocator::new(64 * MIB),
        PoolConfig {
            reuse: ReusePolicy::HostVisible,
            ..PoolConfig::with_budget(64 * MIB)
        },
    );
    drop(p.allocate(4096, &S0).unwrap());
    drop(p.allocate(4096, &S0).unwrap());
    assert_eq!(p.stats().thread_cached_bytes, 0);
}

#[test]
fn a_thread_gives_its_parked_blocks_back_when_it_exits() {
    let p = pool(64 * MIB, 64 * MIB);
    let q = p.clone();
    std::thread::spawn(move || {
        drop(q.allocate(4096, &S0).unwrap());
        drop(q.allocate(4096, &S0).unwrap());
        assert_eq!(q.stats().thread_cached_bytes, 4096);
    })
    .join()
    .unwrap();
    let s = p.stats();
    assert_eq!((s.thread_cached_bytes, s.cached_bytes), (0, 4096));
    assert_eq!((s.requests, s.hits), (2, 1));
    assert_eq!(p.trim_all(), 4096);
    assert_eq!(p.allocator().outstanding_bytes(), 0);
}

#[test]
fn other_threads_flush_their_caches_at_their_next_call_after_a_trim() {
    let p = pool(64 * MIB, 64 * MIB);
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let q = p.clone();
    let worker = std::thread::spawn(move || {
        drop(q.allocate(4096, &S0).unwrap());
        done_tx.send(()).unwrap();
        go_rx.recv().unwrap();
        // Any call of the pool: the gate moved, so the cache is flushed first.
        drop(q.allocate(2 * MIB, &S0).unwrap());
        done_tx.send(()).unwrap();
        go_rx.recv().unwrap();
    });
    done_rx.recv().unwrap();
    // The worker's parked block is out of this thread's reach.
    assert_eq!(p.trim_all(), 0);
    assert_eq!(p.stats().thread_cached_bytes, 4096);
    go_tx.send(()).unwrap();
    done_rx.recv().unwrap();
    assert_eq!(p.stats().thread_cached_bytes, 0);
    assert_eq!(p.trim_all(), 4096 + 2 * MIB);
    go_tx.send(()).unwrap();
    worker.join().unwrap();
    assert_eq!(p.allocator().outstanding_bytes(), 0);
}

#[test]
fn lowering_the_budget_stops_the_thread_cache_hits() {
    let p = pool(64 * MIB, 64 * MIB);
    let _held = p.allocate(MIB, &S1).unwrap();
    drop(p.allocate(4096, &S0).unwrap());
    drop(p.allocate(4096, &S0).unwrap());
    assert_eq!(p.stats().thread_cached_bytes, 4096);
    // Held bytes (1 MiB + 4 KiB) are now over the budget: a hit would break it, so the request is
    // checked under the lock and refused.
    p.set_budget(MIB);
    let e = p.allocate(4096, &S0).unwrap_err();
    assert!(
        matches!(
            e,
            PoolError::OutOfMemory {
                scope: OomScope::Pool,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn dropping_the_last_pool_handle_gives_the_cache_back() {
    let fake = std::sync::Arc::new(FakeAllocator::new(64 * MIB));
    let p = CachingPool::new(fake.clone(), PoolConfig::with_budget(64 * MIB));
    drop(p.allocate(4 * MIB, &S0).unwrap());
    let live = p.allocate(4096, &S0).unwrap();
    drop(p.allocate(4096, &S0).unwrap());
    assert_eq!(fake.outstanding_bytes(), 4 * MIB + 8192);
    drop(p);
    // The pool lives on in `live`; its cache (the parked block too) went back with the last handle.
    assert_eq!(fake.outstanding_bytes(), 4096);
    drop(live);
    assert_eq!(fake.outstanding_bytes(), 0);
    assert!(fake.violations().is_empty());
}

#[test]
fn blocks_another_thread_parked_go_back_once_the_pool_is_closed() {
    // A worker parks a small block of pool A in its thread cache, then the last handle of A goes (an engine
    // dropped). The worker can no longer call A, so A's parked block (device memory, and A itself with its
    // context) must go back the next time the worker's cache meets a new pool, not only at thread exit.
    let fake_a = std::sync::Arc::new(FakeAllocator::new(64 * MIB));
    let a = CachingPool::new(fake_a.clone(), PoolConfig::with_budget(64 * MIB));
    let (parked_tx, parked_rx) = std::sync::mpsc::channel::<()>();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<CachingPool<FakeAllocator>>();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let q = a.clone();
    let worker = std::thread::spawn(move || {
        drop(q.allocate(4096, &S0).unwrap());
        drop(q.allocate(4096, &S0).unwrap());
        assert_eq!(q.stats().thread_cached_bytes, 4096);
        drop(q);
        parked_tx.send(()).unwrap();
        // The next engine's pool: this thread's first call of it.
        let b = go_rx.recv().unwrap();
        drop(b.allocate(4096, &S0).unwrap());
        done_tx.send(()).unwrap();
        // Stay alive: a thread of a pool that outlives engines.
        let _ = go_rx.recv();
    });
    parked_rx.recv().unwrap();
    drop(a);
    go_tx.send(pool(64 * MIB, 64 * MIB)).unwrap();
    done_rx.recv().unwrap();
    assert_eq!(fake_a.outstanding_bytes(), 0);
    assert!(fake_a.violations().is_empty());
    drop(go_tx);
    worker.join().unwrap();
}
