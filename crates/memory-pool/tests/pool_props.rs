//! Property tests of the caching pool against a plain model, with the fake allocator: random sequences of
//! allocate, free, queued work, stream completion, trim, reservations, stream moves, capacity, budget and
//! quota changes and thread-cache flushes keep the accounting exact, never hand one block to two owners,
//! never exceed the budget or a quota, and respect the stream-order rule.
//!
//! Every pool call runs on one of a few worker threads (one, or several, per case), so the lock-free hit
//! path (blocks parked in a thread's cache, taken back by the same thread) and blocks freed on another
//! thread than the one that allocated them are both covered. With one thread the model is exact; with
//! several, the only allowed differences are the documented conservative ones: blocks parked in other
//! threads' caches count as in use for the budget, quota and device checks until those threads flush.

use proptest::prelude::*;
use recall_memory_pool::fake::{FakeAllocator, FakeStream};
use recall_memory_pool::{
    Block, CachingPool, OomScope, PoolConfig, PoolError, Reservation, ReusePolicy,
    THREAD_CACHE_MAX_BYTES, TenantId, size_class,
};
use std::collections::HashSet;
use std::sync::mpsc;
use std::thread::JoinHandle;

type Job = Box<dyn FnOnce() + Send>;

/// Threads that run one closure at a time, each to completion before the next is sent.
struct Workers {
    tx: Vec<mpsc::Sender<Job>>,
    handles: Vec<JoinHandle<()>>,
}

impl Workers {
    fn new(n: usize) -> Workers {
        let mut tx = Vec::new();
        let mut handles = Vec::new();
        for _ in 0..n {
            let (t, r) = mpsc::channel::<Job>();
            tx.push(t);
            handles.push(std::thread::spawn(move || {
                for job in r {
                    job();
                }
            }));
        }
        Workers { tx, handles }
    }

    fn run<R: Send + 'static>(
        &self,
        thread: usize,
        f: impl FnOnce() -> R + Send + 'static,
    ) -> Result<R, TestCaseError> {
        let (rtx, rrx) = mpsc::channel();
        self.tx[thread % self.tx.len()]
            .send(Box::new(move || {
                let _ = rtx.send(f());
            }))
            .map_err(|_| TestCaseError::fail("worker gone"))?;
        rrx.recv()
            .map_err(|_| TestCaseError::fail("worker panicked"))
    }

    /// Stop the threads (their caches flush as they exit).
    fn join(self) -> Result<(), TestCaseError> {
        drop(self.tx);
        for h in self.handles {
            h.join()
                .map_err(|_| TestCaseError::fail("worker panicked"))?;
        }
        Ok(())
    }
}

const MIB: usize = 1 << 20;

#[derive(Debug, Clone)]
enum Op {
    Alloc {
        thread: usize,
        stream: u64,
        bytes: usize,
        tenant: u32,
    },
    Free {
        thread: usize,
        idx: usize,
    },
    Flush(usize),
    SetBudget(usize),
    SetQuota {
        tenant: u32,
        quota: Option<usize>,
    },
    Use(usize),
    Complete(u64),
    Trim(usize),
    TrimAll(usize),
    Reserve {
        thread: usize,
        tenant: u32,
        bytes: usize,
    },
    Unreserve {
        thread: usize,
        idx: usize,
    },
    Move {
        idx: usize,
        stream: u64,
    },
    Capacity(usize),
}

fn bytes() -> impl Strategy<Value = usize> {
    prop_oneof![
        6 => 0usize..4096,
        3 => 4096usize..(1 << 20),
        2 => (1usize << 20)..(6 << 20),
        1 => Just(512usize),
        1 => Just(2 << 20),
    ]
}

/// A new budget or quota: often below what is in use (small blocks), so that lowering one while blocks
/// are parked in thread caches is exercised.
fn limit() -> impl Strategy<Value = usize> {
    prop_oneof![
        1 => (4usize..48).prop_map(|m| m * MIB),
        2 => 0usize..(64 << 10),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let t = || 0usize..3;
    prop_oneof![
        10 => (t(), 0u64..3, bytes(), prop_oneof![3 => Just(0u32), 1 => 1u32..3])
            .prop_map(|(thread, stream, bytes, tenant)| Op::Alloc { thread, stream, bytes, tenant }),
        7 => (t(), any::<usize>()).prop_map(|(thread, idx)| Op::Free { thread, idx }),
        4 => any::<usize>().prop_map(Op::Use),
        3 => (0u64..3).prop_map(Op::Complete),
        1 => t().prop_map(Op::Trim),
        1 => t().prop_map(Op::TrimAll),
        1 => t().prop_map(Op::Flush),
        1 => limit().prop_map(Op::SetBudget),
        1 => (0u32..3, proptest::option::of(limit()))
            .prop_map(|(tenant, quota)| Op::SetQuota { tenant, quota }),
        1 => (t(), 0u32..3, 1usize..(4 << 20))
            .prop_map(|(thread, tenant, bytes)| Op::Reserve { thread, tenant, bytes }),
        1 => (t(), any::<usize>()).prop_map(|(thread, idx)| Op::Unreserve { thread, idx }),
        1 => (any::<usize>(), 0u64..3).prop_map(|(idx, stream)| Op::Move { idx, stream }),
        1 => (8usize..64).prop_map(|m| Op::Capacity(m * MIB)),
    ]
}

#[derive(Debug, Clone)]
struct Setup {
    budget: usize,
    capacity: usize,
    reuse: ReusePolicy,
    quotas: [Option<usize>; 3],
    max_cached: Option<usize>,
}

fn setup() -> impl Strategy<Value = Setup> {
    (
        4usize..48,
        8usize..64,
        prop_oneof![
            Just(ReusePolicy::StreamOrdered),
            Just(ReusePolicy::HostVisible)
        ],
        proptest::option::of(1usize..16),
        proptest::option::of(1usize..16),
        proptest::option::of(0usize..8),
    )
        .prop_map(|(b, c, reuse, q1, q2, mc)| Setup {
            budget: b * MIB,
            capacity: c * MIB,
            reuse,
            quotas: [None, q1.map(|q| q * MIB), q2.map(|q| q * MIB)],
            max_cached: mc.map(|m| m * MIB),
        })
}

struct Live {
    block: Block<FakeAllocator>,
    tenant: u32,
}

fn live_of(
    live: &[Live],
    reservations: &[(Reservation<FakeAllocator>, u32)],
    tenant: u32,
) -> usize {
    live.iter()
        .filter(|l| l.tenant == tenant)
        .map(|l| l.block.size())
        .sum::<usize>()
        + reservations
            .iter()
            .filter(|r| r.1 == tenant)
            .map(|r| r.0.bytes())
            .sum::<usize>()
}

fn run(setup: Setup, ops: Vec<Op>, threads: usize) -> Result<(), TestCaseError> {
    let workers = Workers::new(threads);
    let pool = CachingPool::new(
        FakeAllocator::new(setup.capacity),
        PoolConfig {
            budget_bytes: setup.budget,
            reuse: setup.reuse,
            max_cached_bytes: setup.max_cached,
        },
    );
    for (t, q) in setup.quotas.iter().enumerate() {
        pool.set_tenant_quota(TenantId(t as u32), *q);
    }
    let fake = pool.allocator();
    let mut capacity = setup.capacity;
    let mut budget = setup.budget;
    let mut quotas = setup.quotas;
    let mut live: Vec<Live> = Vec::new();
    let mut reservations: Vec<(Reservation<FakeAllocator>, u32)> = Vec::new();
    let (mut requests, mut failures) = (0u64, 0u64);
    let mut held_before = 0usize;
    // With several threads, blocks parked in other threads' caches may make a check refuse early.
    let slack = |parked: usize| if threads > 1 { parked } else { 0 };

    for op in ops {
        let parked_before = pool.stats().thread_cached_bytes;
        match op {
            Op::Alloc {
                thread,
                stream,
                bytes,
                tenant,
            } => {
                requests += 1;
                let Some(class) = size_class(bytes) else {
                    return Err(TestCaseError::fail("no size class"));
                };
                let tenant_live = live_of(&live, &reservations, tenant);
                let in_use: usize = live.iter().map(|l| l.block.size()).sum();
                let external: usize = reservations.iter().map(|r| r.0.bytes()).sum();
                let expect = match quotas[tenant as usize] {
                    Some(q) if tenant_live + class > q => Err(OomScope::Tenant(TenantId(tenant))),
                    _ if in_use + external + class > budget => Err(OomScope::Pool),
                    _ if in_use + class > capacity => Err(OomScope::Device),
                    _ => Ok(()),
                };
                let extra = slack(parked_before);
                let early_tenant =
                    quotas[tenant as usize].is_some_and(|q| tenant_live + class + extra > q);
                let early_pool = in_use + external + class + extra > budget;
                let early_device = in_use + class + extra > capacity;
                let allocs_before = fake.allocations();
                let p = pool.clone();
                let r = workers.run(thread, move || {
                    p.allocate_for(TenantId(tenant), bytes, &FakeStream(stream))
                })?;
                match r {
                    Ok(block) => {
                        // A cache hit needs no device capacity; a fresh block does.
                        let hit = fake.allocations() == allocs_before;
                        prop_assert!(
                            expect == Ok(()) || (hit && expect == Err(OomScope::Device)),
                            "allocation succeeded against the model ({:?})",
                            expect
                        );
                        prop_assert_eq!(block.size(), class);
                        prop_assert!(block.size() >= bytes);
                        // One owner: no live block has this address.
                        prop_assert!(
                            live.iter().all(|l| l.block.addr() != block.addr()),
                            "block handed to two owners"
                        );
                        // Stream order: another stream (or anyone, for host-visible memory) only after the
                        // freeing stream's work on it completed.
                        if let Some((s, t)) = fake.last_use(block.addr())
                            && (s.0 != stream || setup.reuse == ReusePolicy::HostVisible)
                        {
                            prop_assert!(
                                fake.is_complete(s, t),
                                "reused before stream {} finished work {}",
                                s.0,
                                t
                            );
                        }
                        live.push(Live { block, tenant });
                    }
                    Err(PoolError::OutOfMemory {
                        scope,
                        requested,
                        budget: reported,
                        ..
                    }) => {
                        failures += 1;
                        let allowed = expect == Err(scope)
                            || match scope {
                                OomScope::Tenant(_) => early_tenant,
                                OomScope::Pool => {
                                    expect != Err(OomScope::Tenant(TenantId(tenant))) && early_pool
                                }
                                OomScope::Device => expect == Ok(()) && early_device,
                            };
                        prop_assert!(allowed, "failed with {:?}, model {:?}", scope, expect);
                        prop_assert_eq!(requested, class);
                        if scope != OomScope::Device {
                            // Budget and quota are checked before the driver is asked.
                            prop_assert_eq!(fake.allocations(), allocs_before);
                        }
                        if scope == OomScope::Pool {
                            prop_assert_eq!(reported, budget);
                        }
                    }
                    Err(e) => prop_assert!(false, "unexpected error {e}"),
                }
            }
            Op::Free { thread, idx } if !live.is_empty() => {
                let l = live.swap_remove(idx % live.len());
                workers.run(thread, move || drop(l))?;
            }
            Op::Use(i) if !live.is_empty() => {
                let b = &live[i % live.len()].block;
                fake.use_block(b.addr(), *b.stream());
            }
            Op::Complete(s) => fake.complete(FakeStream(s)),
            Op::Trim(thread) => {
                let p = pool.clone();
                workers.run(thread, move || p.trim())?;
            }
            Op::TrimAll(thread) => {
                let p = pool.clone();
                workers.run(thread, move || p.trim_all())?;
                let s = pool.stats();
                // The shared cache is empty; only other threads' caches may still hold blocks.
                prop_assert_eq!(s.cached_bytes, s.thread_cached_bytes);
                if threads == 1 {
                    prop_assert_eq!(s.cached_bytes, 0);
                }
            }
            Op::Flush(thread) => {
                let p = pool.clone();
                workers.run(thread, move || p.flush_thread_cache())?;
                if threads == 1 {
                    prop_assert_eq!(pool.stats().thread_cached_bytes, 0);
                }
            }
            Op::SetBudget(b) => {
                budget = b;
                pool.set_budget(b);
            }
            Op::SetQuota { tenant, quota } => {
                quotas[tenant as usize] = quota;
                pool.set_tenant_quota(TenantId(tenant), quota);
            }
            Op::Reserve {
                thread,
                tenant,
                bytes,
            } => {
                requests += 1;
                let tenant_live = live_of(&live, &reservations, tenant);
                let in_use: usize = live.iter().map(|l| l.block.size()).sum();
                let external: usize = reservations.iter().map(|r| r.0.bytes()).sum();
                let quota_ok = quotas[tenant as usize].is_none_or(|q| tenant_live + bytes <= q);
                let ok = quota_ok && in_use + external + bytes <= budget;
                let extra = slack(parked_before);
                let early = quotas[tenant as usize]
                    .is_some_and(|q| tenant_live + bytes + extra > q)
                    || in_use + external + bytes + extra > budget;
                let p = pool.clone();
                match workers.run(thread, move || p.reserve(TenantId(tenant), bytes))? {
                    Ok(r) => {
                        prop_assert!(ok);
                        reservations.push((r, tenant));
                    }
                    Err(e) => {
                        failures += 1;
                        prop_assert!(!ok || early, "reservation failed: {e}");
                        prop_assert!(e.is_out_of_memory());
                    }
                }
            }
            Op::Unreserve { thread, idx } if !reservations.is_empty() => {
                let r = reservations.swap_remove(idx % reservations.len());
                workers.run(thread, move || drop(r))?;
            }
            Op::Move { idx, stream } if !live.is_empty() => {
                let n = live.len();
                let b = &mut live[idx % n].block;
                // The caller's side of `set_stream`'s contract: the old stream is done with it.
                fake.complete(*b.stream());
                // SAFETY: the old stream's work completed just above.
                unsafe { b.set_stream(FakeStream(stream)) };
            }
            Op::Capacity(c) => {
                capacity = c;
                fake.set_capacity(c);
            }
            _ => {}
        }

        // Exact accounting.
        let s = pool.stats();
        let in_use: usize = live.iter().map(|l| l.block.size()).sum();
        let external: usize = reservations.iter().map(|r| r.0.bytes()).sum();
        prop_assert_eq!(s.in_use_bytes, in_use);
        prop_assert_eq!(s.blocks_in_use, live.len());
        prop_assert_eq!(s.reserved_external_bytes, external);
        prop_assert_eq!(fake.outstanding_bytes(), s.in_use_bytes + s.cached_bytes);
        prop_assert_eq!(fake.outstanding_blocks(), s.blocks_in_use + s.blocks_cached);
        // Over the budget only after it was lowered, and then never growing.
        prop_assert!(
            s.held_bytes() <= budget || s.held_bytes() <= held_before,
            "held {} over budget {} (was {})",
            s.held_bytes(),
            budget,
            held_before
        );
        held_before = s.held_bytes();
        prop_assert!(s.thread_cached_bytes <= s.cached_bytes);
        prop_assert!(s.thread_cached_bytes <= threads * THREAD_CACHE_MAX_BYTES);
        if setup.reuse == ReusePolicy::HostVisible {
            prop_assert_eq!(s.thread_cached_bytes, 0);
        }
        prop_assert!(s.peak_in_use_bytes >= in_use + external);
        prop_assert!(s.peak_held_bytes >= s.held_bytes());
        prop_assert_eq!(s.requests, requests);
        prop_assert_eq!(s.failed_requests, failures);
        prop_assert!(s.hits + s.misses <= s.requests);
        prop_assert_eq!(s.recorded_errors, 0);
        for t in 0..3u32 {
            let ts = pool.tenant_stats(TenantId(t));
            let mine = live_of(&live, &reservations, t);
            prop_assert_eq!(ts.in_use_bytes, mine);
            prop_assert!(ts.peak_in_use_bytes >= mine);
        }
        let addrs: HashSet<u64> = live.iter().map(|l| l.block.addr()).collect();
        prop_assert_eq!(addrs.len(), live.len());
        let v = fake.violations();
        prop_assert!(v.is_empty(), "allocator saw {:?}", v);
    }

    // Everything back: drop the live blocks, stop the threads (their caches flush) and drop the pool; the
    // allocator ends empty.
    let handle = pool.clone();
    drop(pool);
    drop(live);
    drop(reservations);
    workers.join()?;
    let s = handle.stats();
    prop_assert_eq!(s.in_use_bytes, 0);
    prop_assert_eq!(s.reserved_external_bytes, 0);
    // This thread parked what it dropped; trimming flushes its cache too.
    handle.trim_all();
    prop_assert_eq!(handle.stats().thread_cached_bytes, 0);
    prop_assert_eq!(handle.allocator().outstanding_bytes(), 0);
    prop_assert!(handle.allocator().violations().is_empty());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(1000),
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_sequences_keep_the_pool_exact(setup in setup(), ops in proptest::collection::vec(op(), 1..80)) {
        run(setup, ops, 1)?;
    }

    #[test]
    fn random_sequences_on_three_threads_stay_safe(setup in setup(), ops in proptest::collection::vec(op(), 1..80)) {
        run(setup, ops, 3)?;
    }
}
