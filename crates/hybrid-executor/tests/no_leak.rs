//! Memory comes back: after a warm-up, more of the load's calls (tenants, faults, fallbacks, batching)
//! leave the live heap where it was. Counted exactly by a counting allocator, so the check does not depend
//! on RSS or the allocator's caching. Its own test binary: the allocator counts everything in the process.
#![allow(clippy::unwrap_used)] // a test crate: helpers panic on failure like the tests do

use recall_cpu_simd::{Metric, SpreadGraph, SpreadParams};
use recall_hybrid_executor::{
    CallOptions, CorpusRef, CpuBackend, DevicePolicy, Executor, ExecutorConfig, FaultInjecting,
    FaultKind, FaultPlan, FaultStep, ManualClock, SharedCorpus, TenantConfig, Trigger,
    power_law_graph,
};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

/// The system allocator, counting the bytes live.
struct Counting;

static LIVE: AtomicI64 = AtomicI64::new(0);

// SAFETY: every method forwards to `System` with the caller's arguments unchanged and only adds
// bookkeeping, so `System`'s guarantees are passed on as they are.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc` is `System.alloc`'s.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size() as i64, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: `ptr` was allocated by this allocator (so by `System`) with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract for `realloc` is `System.realloc`'s.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_add(new_size as i64 - layout.size() as i64, Ordering::Relaxed);
        }
        p
    }
}

#[global_allocator]
static A: Counting = Counting;

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

const DIM: usize = 16;

#[test]
fn the_load_leaves_the_heap_where_it_was() {
    let clock = ManualClock::new();
    let mut plan = FaultPlan::new().seed(9);
    for (step, kind) in [
        (FaultStep::Alloc, FaultKind::OutOfMemory),
        (FaultStep::Launch, FaultKind::Gpu),
    ] {
        plan = plan.fail_as(step, Trigger::Probability(0.1), kind);
    }
    let cfg = ExecutorConfig {
        policy: DevicePolicy::Auto,
        gpu_min_work: 0,
        calibrate: false,
        use_cache: false,
        max_in_flight: 2,
        clock: clock.clone(),
        ..ExecutorConfig::default()
    };
    let gpu = Arc::new(FaultInjecting::new(CpuBackend, plan));
    let exec = Executor::with_backends(cfg, Arc::new(CpuBackend), Some(gpu)).unwrap();
    let tenants: Vec<_> = (0..4)
        .map(|i| exec.add_tenant(TenantConfig::new(format!("t{i}")).queue_capacity(4)))
        .collect();
    let corpus = SharedCorpus::new(matrix(1, 200, DIM), DIM).unwrap();
    let mut rng = recall_hybrid_executor::difftest::SplitMix::new(4);
    let (indptr, indices, weights) = power_law_graph(&mut rng, 100, 600, 10, 10);
    let graph = SpreadGraph::from_csr(&indptr, &indices, &weights).unwrap();
    let params = SpreadParams {
        decay: 0.5,
        threshold: 0.01,
        hops: 2,
        k: 5,
    };
    let round = |calls: usize| {
        std::thread::scope(|s| {
            for (th, t) in tenants.iter().enumerate() {
                let (exec, corpus, graph) = (&exec, &corpus, &graph);
                s.spawn(move || {
                    let opts = CallOptions::tenant(*t).wait(Duration::from_secs(600));
                    for i in 0..calls {
                        let seed = (th * 10_000 + i) as u64;
                        let q = matrix(seed, 1 + i % 3, DIM);
                        match i % 4 {
                            0 => drop(
                                exec.knn_shared(&opts, &q, corpus, Metric::Cosine, 5)
                                    .unwrap(),
                            ),
                            1 => {
                                let one = &q[..DIM];
                                let c = CorpusRef::new(corpus.data(), DIM).unwrap();
                                drop(exec.cosine_scores_single(&opts, one, &c).unwrap());
                            }
                            2 => {
                                let nq = q.len() / DIM;
                                let offsets: Vec<usize> = (0..=nq).map(|j| j * 10).collect();
                                let ids: Vec<u32> = (0..nq * 10)
                                    .map(|j| ((seed as usize + j * 7) % 200) as u32)
                                    .collect();
                                let r = exec.score_candidates(
                                    &opts,
                                    &q,
                                    corpus.data(),
                                    DIM,
                                    Metric::Dot,
                                    &offsets,
                                    &ids,
                                    5,
                                );
                                drop(r.unwrap());
                            }
                            _ => {
                                let mut seeds = vec![0.0f32; 100];
                                seeds[i % 100] = 1.0;
                                drop(exec.spread(&opts, graph, &seeds, &params).unwrap());
                            }
                        }
                    }
                });
            }
        });
    };
    // Warm-up: lazily grown tables (queues, ticket sets, batch maps) reach their size.
    round(100);
    let before = LIVE.load(Ordering::SeqCst);
    round(400);
    let after = LIVE.load(Ordering::SeqCst);
    // 1,600 more calls: a leak of even a few bytes a call would show; allow table growth of a few KiB.
    assert!(
        after - before < 16 * 1024,
        "live heap grew by {} bytes over 1,600 calls",
        after - before
    );
    assert!(exec.metrics().fallbacks_total() > 0, "faults were injected");
}
