//! Activation spreading: one hop in the pull order of `docs/numerics.md` ("Activation spreading").
//!
//! Thread mapping: nodes are binned by in-degree once, on the host; one launch covers the four classes, each a
//! block-uniform range of blocks:
//! - hubs (at least `SPREAD_HUB_MIN` in-edges): a block each (see [`hub`]);
//! - more than 16 in-edges: a warp each. Lane `l` walks positions `l, l + 32, ...` with one FMA chain, 8 terms
//!   at a time (sources, weights and gathered activations are loaded before the 8 FMAs run in order);
//! - 9 to 16 in-edges: two per warp, 16 lanes each; at most 8: four per warp, 8 lanes each (see [`small`]).
//!
//! The 32 lane sums are combined by five `shfl.sync.bfly` steps (`s = s + shfl_xor(s, off)`, off =
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
    let [n_hubs, n32, n16, n8] = p.n_class;
    let warps_per_block = GRAPH_BLOCK / 32;
    let b = block_x();
    if b < n_hubs {
        // SAFETY: forwarded launcher contract; block-uniform branch.
        unsafe { hub(&p, b) };
        return;
    }
    let b = b - n_hubs;
    let t = thread_x();
    let (lane, warp) = (t % 32, b * warps_per_block + t / 32);
    let nodes = p.nodes as *const u32;
    // Block ranges of the three warp classes; every branch below is block-uniform.
    let blocks32 = n32.div_ceil(warps_per_block);
    let blocks16 = n16.div_ceil(2 * warps_per_block);
    if b < blocks32 {
        if warp >= n32 {
            return; // Warp-uniform.
        }
        // SAFETY: index below n_hubs + n32.
        let v = unsafe { *nodes.add((n_hubs + warp) as usize) };
        // SAFETY: v is a node (launcher contract).
        let acc = unsafe { lanes32(&p, v, lane) };
        // SAFETY: as above.
        unsafe { finish(&p, v, lane, acc, 16) };
    } else if b < blocks32 + blocks16 {
        let warp = warp - blocks32 * warps_per_block;
        // SAFETY: the class's list follows the hubs and the 32-lane nodes.
        unsafe { small::<16>(&p, nodes.add((n_hubs + n32) as usize), n16, warp, lane) };
    } else {
        let warp = warp - (blocks32 + blocks16) * warps_per_block;
        // SAFETY: the class's list follows the 16-lane nodes.
        unsafe { small::<8>(&p, nodes.add((n_hubs + n32 + n16) as usize), n8, warp, lane) };
    }
}

/// The 32 lane chains of node `v` (fewer than `SPREAD_HUB_MIN` in-edges), 8 terms per lane in flight.
///
/// # Safety
/// `v < n_nodes`; the graph validated as `spread_hop` requires.
#[inline(always)]
unsafe fn lanes32(p: &SpreadHopParams, v: u32, lane: u32) -> f32 {
    let in_ptr = p.in_ptr as *const u64;
    // SAFETY: v < n_nodes and in_ptr holds n_nodes + 1 values.
    let (start, end) = unsafe { (*in_ptr.add(v as usize), *in_ptr.add(v as usize + 1)) };
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
    acc
}

/// Nodes with at most `W` in-edges, `32 / W` per warp: group `lane / W` owns one node, its lane `l` the single
/// term at position `l` (lanes past the degree hold `+0.0`). The contract's 32-lane tree over such a node adds
/// only `+0.0` in its steps 16 .. W, which is exact for the non-negative sums, so the group's tree over
/// offsets `W / 2 .. 1` gives the same bits.
///
/// # Safety
/// `list` holds `count` node ids with at most `W` in-edges each; the graph validated as `spread_hop` requires.
#[inline(always)]
unsafe fn small<const W: u32>(
    p: &SpreadHopParams,
    list: *const u32,
    count: u32,
    warp: u32,
    lane: u32,
) {
    if warp * (32 / W) >= count {
        return; // Warp-uniform: no group of this warp has a node.
    }
    let (group, l) = (lane / W, lane % W);
    let idx = warp * (32 / W) + group;
    let valid = idx < count;
    let mut acc = 0.0f32;
    let mut v = 0;
    if valid {
        // SAFETY: idx < count.
        v = unsafe { *list.add(idx as usize) };
        let in_ptr = p.in_ptr as *const u64;
        // SAFETY: v < n_nodes.
        let (start, end) = unsafe { (*in_ptr.add(v as usize), *in_ptr.add(v as usize + 1)) };
        let j = start + u64::from(l);
        if j < end {
            // SAFETY: j < end; sources below n_nodes.
            acc = unsafe {
                let s = *(p.in_src as *const u32).add(j as usize);
                fma(
                    *(p.in_w as *const f32).add(j as usize),
                    *(p.prev as *const f32).add(s as usize),
                    0.0,
                )
            };
        }
    }
    // Every lane of the warp takes part in the shuffles, valid or not; offsets below W stay in the group.
    // SAFETY: only group leaders of valid groups write.
    unsafe { finish_group(p, v, l, acc, W / 2, valid) };
}

/// [`finish`] for a group whose tree starts at offset `first_off` (< 16), writing only when `valid`.
///
/// # Safety
/// As [`finish`] when `valid`.
#[inline(always)]
unsafe fn finish_group(
    p: &SpreadHopParams,
    v: u32,
    l: u32,
    mut acc: f32,
    first_off: u32,
    valid: bool,
) {
    let mut off = first_off;
    while off > 0 {
        acc = acc + shfl_xor_f32(acc, off);
        off /= 2;
    }
    if valid && l == 0 {
        // SAFETY: v < n_nodes.
        unsafe { write(p, v, acc) };
    }
}

/// The fixed tree over the warp's 32 lane sums (offsets `first_off`, ..., 1; `first_off` = 16 for the full
/// tree), then lane 0 writes. Every lane of the warp must call it.
///
/// # Safety
/// `v < n_nodes`; buffers as `SpreadHopParams` documents.
#[inline(always)]
unsafe fn finish(p: &SpreadHopParams, v: u32, lane: u32, mut acc: f32, first_off: u32) {
    let mut off = first_off;
    while off > 0 {
        acc = acc + shfl_xor_f32(acc, off);
        off /= 2;
    }
    if lane == 0 {
        // SAFETY: v < n_nodes.
        unsafe { write(p, v, acc) };
    }
}

/// Decay, threshold, `next[v]`, `total[v]` and the overflow flag, from node `v`'s pulled sum.
///
/// # Safety
/// `v < n_nodes`; buffers as `SpreadHopParams` documents.
#[inline(always)]
unsafe fn write(p: &SpreadHopParams, v: u32, acc: f32) {
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

/// A hub, one block of `GRAPH_BLOCK` threads: warps 1..8 gather the weights and activations of
/// `SPREAD_HUB_CHUNK` positions into shared memory (double-buffered) while warp 0 runs the 32 lane chains
/// over the previous chunk, lane `l` taking positions `l, l + 32, ...` in order (the chunk length is a
/// multiple of 32, so lane `l` owns the same positions as in the warp path). Then warp 0 finishes exactly
/// like the warp path.
///
/// # Safety
/// `b < n_hubs`; the first `n_hubs` entries of `nodes` are nodes below `n_nodes`; `4 * SPREAD_HUB_CHUNK`
/// floats of dynamic shared memory.
#[inline(always)]
unsafe fn hub(p: &SpreadHopParams, b: u32) {
    const CHUNK: usize = SPREAD_HUB_CHUNK as usize;
    let smem = dynamic_shared_f32();
    // [w0, a0, w1, a1], CHUNK floats each.
    let buf = |b: usize, which: usize| smem.wrapping_add((2 * b + which) * CHUNK);
    let t = thread_x() as usize;
    let (lane, warp) = (t % 32, t / 32);
    // SAFETY: b < n_hubs: the hubs come first in `nodes`.
    let v = unsafe { *(p.nodes as *const u32).add(b as usize) };
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
    // Warps 1..8 stage chunk c into buffer c % 2. Each loader owns positions `t - 32 + loaders * m`: all
    // its sources and weights are loaded, then all gathers issued, then all stores done, so a chunk costs
    // about two memory latencies instead of two per position.
    const PER: usize = CHUNK.div_ceil(GRAPH_BLOCK as usize - 32);
    let stage = |c: usize| {
        if warp == 0 || c >= n_chunks {
            return;
        }
        let base = c * CHUNK;
        let (wb, ab) = (buf(c % 2, 0), buf(c % 2, 1));
        let here = (len - base).min(CHUNK);
        let mut sw = [(0u32, 0.0f32); PER];
        let mut m = 0;
        while m < PER {
            let i = t - 32 + loaders * m;
            if i < here {
                let j = start as usize + base + i;
                // SAFETY: j < end.
                sw[m] = unsafe { (*src.add(j), *w.add(j)) };
            }
            m += 1;
        }
        let mut a = [0.0f32; PER];
        let mut m = 0;
        while m < PER {
            if t - 32 + loaders * m < here {
                // SAFETY: sources are below n_nodes.
                a[m] = unsafe { *prev.add(sw[m].0 as usize) };
            }
            m += 1;
        }
        let mut m = 0;
        while m < PER {
            let i = t - 32 + loaders * m;
            if i < here {
                // SAFETY: i < CHUNK: inside the buffers.
                unsafe {
                    *wb.add(i) = sw[m].1;
                    *ab.add(i) = a[m];
                }
            }
            m += 1;
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
        unsafe { finish(p, v, lane as u32, acc, 16) };
    }
}
