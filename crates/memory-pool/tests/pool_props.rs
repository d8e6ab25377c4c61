//! Property tests of the caching pool against a plain model, with the fake allocator: random sequences of
//! allocate, free, queued work, stream completion, trim, reservations, stream moves and capacity changes
//! keep the accounting exact, never hand one block to two owners, never exceed the budget or a quota, and
//! respect the stream-order rule.

use proptest::prelude::*;
use recall_memory_pool::fake::{FakeAllocator, FakeStream};
use recall_memory_pool::{
    Block, CachingPool, OomScope, PoolConfig, PoolError, Reservation, ReusePolicy, TenantId,
    size_class,
};
use std::collections::HashSet;

const MIB: usize = 1 << 20;

#[derive(Debug, Clone)]
enum Op {
    Alloc {
        stream: u64,
        bytes: usize,
        tenant: u32,
    },
    Free(usize),
    Use(usize),
    Complete(u64),
    Trim,
    TrimAll,
    Reserve {
        tenant: u32,
        bytes: usize,
    },
    Unreserve(usize),
    Move {
        idx: usize,
        stream: u64,
    },
    Capacity(usize),
}

fn bytes() -> impl Strategy<Value = usize> {
    prop_oneof![
        4 => 0usize..4096,
        3 => 4096usize..(1 << 20),
        2 => (1usize << 20)..(6 << 20),
        1 => Just(512usize),
        1 => Just(2 << 20),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0u64..3, bytes(), 0u32..3).prop_map(|(stream, bytes, tenant)| Op::Alloc { stream, bytes, tenant }),
        5 => any::<usize>().prop_map(Op::Free),
        4 => any::<usize>().prop_map(Op::Use),
        3 => (0u64..3).prop_map(Op::Complete),
        1 => Just(Op::Trim),
        1 => Just(Op::TrimAll),
        1 => (0u32..3, 1usize..(4 << 20)).prop_map(|(tenant, bytes)| Op::Reserve { tenant, bytes }),
        1 => any::<usize>().prop_map(Op::Unreserve),
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

fn run(setup: Setup, ops: Vec<Op>) -> Result<(), TestCaseError> {
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
    let mut live: Vec<Live> = Vec::new();
    let mut reservations: Vec<(Reservation<FakeAllocator>, u32)> = Vec::new();
    let (mut requests, mut failures) = (0u64, 0u64);

    for op in ops {
        match op {
            Op::Alloc {
                stream,
                bytes,
                tenant,
            } => {
                requests += 1;
                let Some(class) = size_class(bytes) else {
                    return Err(TestCaseError::fail("no size class"));
                };
                let tenant_live: usize = live
                    .iter()
                    .filter(|l| l.tenant == tenant)
                    .map(|l| l.block.size())
                    .sum::<usize>()
                    + reservations
                        .iter()
                        .filter(|r| r.1 == tenant)
                        .map(|r| r.0.bytes())
                        .sum::<usize>();
                let in_use: usize = live.iter().map(|l| l.block.size()).sum();
                let external: usize = reservations.iter().map(|r| r.0.bytes()).sum();
                let expect = match setup.quotas[tenant as usize] {
                    Some(q) if tenant_live + class > q => Err(OomScope::Tenant(TenantId(tenant))),
                    _ if in_use + external + class > setup.budget => Err(OomScope::Pool),
                    _ if in_use + class > capacity => Err(OomScope::Device),
                    _ => Ok(()),
                };
                let allocs_before = fake.allocations();
                match pool.allocate_for(TenantId(tenant), bytes, &FakeStream(stream)) {
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
                        budget,
                        ..
                    }) => {
                        failures += 1;
                        prop_assert_eq!(expect, Err(scope));
                        prop_assert_eq!(requested, class);
                        if scope != OomScope::Device {
                            // Budget and quota are checked before the driver is asked.
                            prop_assert_eq!(fake.allocations(), allocs_before);
                        }
                        if scope == OomScope::Pool {
                            prop_assert_eq!(budget, setup.budget);
                        }
                    }
                    Err(e) => prop_assert!(false, "unexpected error {e}"),
                }
            }
            Op::Free(i) if !live.is_empty() => {
                let i = i % live.len();
                drop(live.swap_remove(i));
            }
            Op::Use(i) if !live.is_empty() => {
                let b = &live[i % live.len()].block;
                fake.use_block(b.addr(), *b.stream());
            }
            Op::Complete(s) => fake.complete(FakeStream(s)),
            Op::Trim => {
                pool.trim();
            }
            Op::TrimAll => {
                pool.trim_all();
                prop_assert_eq!(pool.stats().cached_bytes, 0);
            }
            Op::Reserve { tenant, bytes } => {
                requests += 1;
                let tenant_live: usize = live
                    .iter()
                    .filter(|l| l.tenant == tenant)
                    .map(|l| l.block.size())
                    .sum::<usize>()
                    + reservations
                        .iter()
                        .filter(|r| r.1 == tenant)
                        .map(|r| r.0.bytes())
                        .sum::<usize>();
                let in_use: usize = live.iter().map(|l| l.block.size()).sum();
                let external: usize = reservations.iter().map(|r| r.0.bytes()).sum();
                let quota_ok =
                    setup.quotas[tenant as usize].is_none_or(|q| tenant_live + bytes <= q);
                let ok = quota_ok && in_use + external + bytes <= setup.budget;
                match pool.reserve(TenantId(tenant), bytes) {
                    Ok(r) => {
                        prop_assert!(ok);
                        reservations.push((r, tenant));
                    }
                    Err(e) => {
                        failures += 1;
                        prop_assert!(!ok, "reservation failed: {e}");
                        prop_assert!(e.is_out_of_memory());
                    }
                }
            }
            Op::Unreserve(i) if !reservations.is_empty() => {
                let i = i % reservations.len();
                drop(reservations.swap_remove(i));
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
        prop_assert!(
            s.held_bytes() <= setup.budget,
            "held {} over budget {}",
            s.held_bytes(),
            setup.budget
        );
        prop_assert!(s.peak_in_use_bytes >= in_use + external);
        prop_assert!(s.peak_held_bytes >= s.held_bytes());
        prop_assert_eq!(s.requests, requests);
        prop_assert_eq!(s.failed_requests, failures);
        prop_assert!(s.hits + s.misses <= s.requests);
        prop_assert_eq!(s.recorded_errors, 0);
        for t in 0..3u32 {
            let ts = pool.tenant_stats(TenantId(t));
            let mine: usize = live
                .iter()
                .filter(|l| l.tenant == t)
                .map(|l| l.block.size())
                .sum::<usize>()
                + reservations
                    .iter()
                    .filter(|r| r.1 == t)
                    .map(|r| r.0.bytes())
                    .sum::<usize>();
            prop_assert_eq!(ts.in_use_bytes, mine);
            if let Some(q) = setup.quotas[t as usize] {
                prop_assert!(mine <= q);
            }
        }
        let addrs: HashSet<u64> = live.iter().map(|l| l.block.addr()).collect();
        prop_assert_eq!(addrs.len(), live.len());
        let v = fake.violations();
        prop_assert!(v.is_empty(), "allocator saw {:?}", v);
    }

    // Everything back: drop the live blocks and the pool; the allocator ends empty.
    let handle = pool.clone();
    drop(live);
    drop(reservations);
    let s = handle.stats();
    prop_assert_eq!(s.in_use_bytes, 0);
    prop_assert_eq!(s.reserved_external_bytes, 0);
    handle.trim_all();
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
        run(setup, ops)?;
    }
}
