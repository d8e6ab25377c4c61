//! Activation spreading: one hop in the pull order of `docs/numerics.md` ("Activation spreading").
//!
//! Thread mapping: one warp per target node `v` (8 warps per 256-thread block, `v = 8 * blockIdx.x + warp`).
//! Lane `l` walks positions `l, l + 32, ...` of `v`'s in-edge list with one FMA chain; the 32 lane sums are
//! combined by five `shfl.sync.bfly` steps (`s = s + shfl_xor(s, off)`, off = 16, 8, 4, 2, 1), after which
//! lane 0 holds exactly the fixed tree of the contract. A hub with 100,000 in-edges is one warp doing 3,125
//! FMAs per lane; a node with few in-edges leaves lanes at `+0.0`, and adding `+0.0` to the non-negative
//! sums is exact, as the contract notes.

use crate::util::{block_x, fma, shfl_xor_f32, thread_x};
use core::sync::atomic::{AtomicU32, Ordering};
use recall_kernel_shared::{GRAPH_BLOCK, SpreadHopParams};

/// One hop: `next[v] = (decay * pulled(v) >= threshold) ? decay * pulled(v) : 0`, `total[v] += next[v]`.
///
/// # Safety
/// Grid `ceil(n_nodes / 8)` blocks of `GRAPH_BLOCK` threads; the graph was validated (every source below
/// `n_nodes`, `in_ptr` non-decreasing and within the edge arrays) and the buffers sized as
/// `SpreadHopParams` documents.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn spread_hop(p: SpreadHopParams) {
    let t = thread_x();
    let lane = t % 32;
    let v = block_x() * (GRAPH_BLOCK / 32) + t / 32;
    if v >= p.n_nodes {
        return; // Warp-uniform: the whole warp has the same v.
    }
    let in_ptr = p.in_ptr as *const u64;
    // SAFETY: v < n_nodes and in_ptr holds n_nodes + 1 values.
    let (start, end) = unsafe { (*in_ptr.add(v as usize), *in_ptr.add(v as usize + 1)) };
    let (src, w, prev) = (
        p.in_src as *const u32,
        p.in_w as *const f32,
        p.prev as *const f32,
    );
    let mut acc = 0.0f32;
    // Lane `lane` owns positions lane, lane + 32, ... . They are taken 8 at a time: the 8 sources and
    // weights, then the 8 gathered activations, are all loaded before the 8 FMAs run in position order, so
    // a hub's long chain waits for memory once per 8 terms instead of once per term.
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
    // The lanes reconverge here; every lane takes part in the five shuffles.
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
