//! Activation spreading: one hop in the pull order of `docs/numerics.md` ("Activation spreading").
//!
//! Thread mapping, two paths in one launch (block-uniform):
//! - blocks `0 .. n_hubs`: one block per hub (a node with at least `SPREAD_HUB_MIN` in-edges, see
//!   [`hub`]);
//! - the other blocks: one warp per remaining node `v` (8 warps per 256-thread block). Lane `l` walks
//!   positions `l, l + 32, ...` of `v`'s in-edge list with one FMA chain, 8 terms at a time (the 8 sources,
//!   weights and gathered activations are loaded before the 8 FMAs run in position order).
//!
//! Either way the 32 lane sums are combined by five `shfl.sync.bfly` steps (`s = s + shfl_xor(s, off)`, off =
//! 16, 8, 4, 2, 1), after which lane 0 holds exactly the fixed tree of the contract. A node with few in-edges
//! leaves lanes at `+0.0`, and adding `+0.0` to the non-negative sums is exact, as the contract notes.
//! Measured on an H200 (docs/results/): with one warp per node only, a hub with ~170,000 in-edges kept a few
//! SMs busy for 60 % of the hop while the rest idled.

use crate::util::{block_x, dynamic_shared_f32, fma, shfl_xor_f32, sync_threads, thread_x};
use core::sync::atomic::{AtomicU32, Ordering};
use recall_kernel_shared::{GRAPH_BLOCK, SPREAD_HUB_CHUNK, SPREAD_HUB_MIN, SpreadHopParams};

/// One hop: `next[v] = (decay * pulled(v) >= threshold) ? decay * pulled(v) : 0`, `total[v] += next[v]`.
///
/// # Safety
/// Grid `n_hubs + ceil(n_nodes / 8)` blocks of `GRAPH_BLOCK` threads with `4 * SPREAD_HUB_CHUNK * 4` bytes of
/// dynamic shared memory; the graph was validated (every source below `n_nodes`, `in_ptr` non-decreasing and
/// within the edge arrays), `hubs` lists exactly the nodes with at least `SPREAD_HUB_MIN` in-edges, and the
/// buffers are sized as `SpreadHopParams` documents.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn spread_hop(p: SpreadHopParams) {
    if block_x() < p.n_hubs {
        // SAFETY: forwarded launcher contract; block-uniform branch.
        unsafe { hub(&p) };
        return;
    }
    let t = thread_x();
    let lane = t % 32;
    let v = (block_x() - p.n_hubs) * (GRAPH_BLOCK / 32) + t / 32;
    if v >= p.n_nodes {
        return; // Warp-uniform: the whole warp has the same v.
    }
    let in_ptr = p.in_ptr as *const u64;
    // SAFETY: v < n_nodes and in_ptr holds n_nodes + 1 values.
    let (start, end) = unsafe { (*in_ptr.add(v as usize), *in_ptr.add(v as usize + 1)) };
    if end - start >= SPREAD_HUB_MIN {
        return; // Warp-uniform: a hub, handled by its own block.
    }
    let (src, w, prev) = (
        p.in_src as *const u32,
        p.in_w as *const f32,
        p.prev as *const f32,
    );
    let mut acc = 0.0f32;
    const UNROLL: u64 = 8;
    let mut j0 = start + u64::from(lane);
    while j0 < end {
        let mut sw = [(0u32, 0.0f32); UNROLL as usize];
        let mut i = 0;
        while i < UNROLL {
            let j = j0 + 32 * i;
            if j < end {
                // SAFETY: j < end <= number of edges.
                sw[i as usize] = unsafe { (*src.add(j as usize), *w.add(j as usize)) };
            }
            i += 1;
        }
        let mut a = [0.0f32; UNROLL as usize];
        let mut i = 0;
        while i < UNROLL {
            if j0 + 32 * i < end {
                // SAFETY: sources are below n_nodes (validated); prev holds n_nodes values.
                a[i as usize] = unsafe { *prev.add(sw[i as usize].0 as usize) };
            }
            i += 1;
        }
        let mut i = 0;
        while i < UNROLL {
            if j0 + 32 * i < end {
                acc = fma(sw[i as usize].1, a[i as usize], acc);
            }
            i += 1;
        }
        j0 += 32 * UNROLL;
    }
    // The lanes reconverge here; every lane takes part in the shuffles.
    // SAFETY: v < n_nodes.
    unsafe { finish(&p, v, lane, acc) };
}

/// The fixed tree over the warp's 32 lane sums, then lane 0 applies decay and threshold and updates `next`,
/// `total` and the overflow flag. Every lane of the warp must call it.
///
/// # Safety
/// `v < n_nodes`; buffers as `SpreadHopParams` documents.
#[inline(always)]
unsafe fn finish(p: &SpreadHopParams, v: u32, lane: u32, mut acc: f32) {
    let mut off = 16;
    while off > 0 {
        acc = acc + shfl_xor_f32(acc, off);
        off /= 2;
    }
    if lane == 0 {
        let x = acc * p.decay;
        let a = if x < p.threshold { 0.0 } else { x };
        let (next, total) = (p.next as *mut f32, p.total as *mut f32);
        // SAFETY: v < n_nodes; next and total hold n_nodes values.
        let sum = unsafe {
            *next.add(v as usize) = a;
            let sum = *total.add(v as usize) + a;
            *total.add(v as usize) = sum;
            sum
        };
        if !a.is_finite() || !sum.is_finite() {
            // SAFETY: overflow_hop points to one u32 that lives for the launch and is only used atomically.
            unsafe { AtomicU32::from_ptr(p.overflow_hop as *mut u32) }
                .fetch_min(p.hop, Ordering::Relaxed);
        }
    }
}

/// A hub, one block of `GRAPH_BLOCK` threads: warps 1..8 gather the weights and activations of
/// `SPREAD_HUB_CHUNK` positions into shared memory (double-buffered) while warp 0 runs the 32 lane chains
/// over the previous chunk, lane `l` taking positions `l, l + 32, ...` in order (the chunk length is a
/// multiple of 32, so lane `l` owns the same positions as in the warp path). Then warp 0 finishes exactly
/// like the warp path.
///
/// # Safety
/// `block_x() < n_hubs`; `hubs` lists nodes below `n_nodes`; `4 * SPREAD_HUB_CHUNK` floats of dynamic shared
/// memory.
#[inline(always)]
unsafe fn hub(p: &SpreadHopParams) {
    const CHUNK: usize = SPREAD_HUB_CHUNK as usize;
    let smem = dynamic_shared_f32();
    // [w0, a0, w1, a1], CHUNK floats each.
    let buf = |b: usize, which: usize| smem.wrapping_add((2 * b + which) * CHUNK);
    let t = thread_x() as usize;
    let (lane, warp) = (t % 32, t / 32);
    // SAFETY: block_x() < n_hubs.
    let v = unsafe { *(p.hubs as *const u32).add(block_x() as usize) };
    let in_ptr = p.in_ptr as *const u64;
    // SAFETY: v < n_nodes and in_ptr holds n_nodes + 1 values.
    let (start, end) = unsafe { (*in_ptr.add(v as usize), *in_ptr.add(v as usize + 1)) };
    let len = (end - start) as usize;
    let n_chunks = len.div_ceil(CHUNK);
    let (src, w, prev) = (
        p.in_src as *const u32,
        p.in_w as *const f32,
        p.prev as *const f32,
    );
    let loaders = GRAPH_BLOCK as usize - 32;
    // Warps 1..8 stage chunk c into buffer c % 2.
    let stage = |c: usize| {
        if warp == 0 || c >= n_chunks {
            return;
        }
        let base = c * CHUNK;
        let (wb, ab) = (buf(c % 2, 0), buf(c % 2, 1));
        let mut i = t - 32;
        while i < CHUNK && base + i < len {
            let j = start as usize + base + i;
            // SAFETY: j < end; sources are below n_nodes; i < CHUNK inside the buffers.
            unsafe {
                let s = *src.add(j);
                *wb.add(i) = *w.add(j);
                *ab.add(i) = *prev.add(s as usize);
            }
            i += loaders;
        }
    };
    let mut acc = 0.0f32;
    stage(0);
    sync_threads();
    let mut c = 0;
    // Block-uniform loop: every thread reaches the barrier.
    while c < n_chunks {
        stage(c + 1);
        if warp == 0 {
            let (wb, ab) = (buf(c % 2, 0), buf(c % 2, 1));
            let here = (len - c * CHUNK).min(CHUNK);
            let mut i = lane;
            while i < here {
                // SAFETY: i < CHUNK inside the buffers, staged before the last barrier.
                acc = unsafe { fma(*wb.add(i), *ab.add(i), acc) };
                i += 32;
            }
        }
        sync_threads();
        c += 1;
    }
    if warp == 0 {
        // SAFETY: v < n_nodes.
        unsafe { finish(p, v, lane as u32, acc) };
    }
}
