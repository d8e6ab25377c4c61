//! Activation spreading: one hop in the pull order of `docs/numerics.md` ("Activation spreading").
//!
//! Thread mapping: nodes are binned by in-degree once, on the host; `spread_hub` covers the hubs (on a stream
//! of its own, beside the rest) and one `spread_hop` launch the three other classes, each a block-uniform
//! range of blocks:
//! - hubs (at least `SPREAD_HUB_MIN` in-edges): 1 to 32 blocks each, by size, each block some of the hub's
//!   lane chains (see [`hub`]);
//! - more than 16 in-edges: two nodes per warp (see [`pair32`]). Lane `l` walks positions `l, l + 32, ...` of
//!   each with one FMA chain, 2 terms at a time (sources, weights and gathered activations of both nodes are
//!   loaded before the FMAs run in order);
//! - 9 to 16 in-edges: two per warp, 16 lanes each; at most 8: four per warp, 8 lanes each; four such rounds
//!   per warp with all their loads in flight together (see [`small`]).
//!
//! The hop is bound by chains of dependent loads (list entry, in-edge span, source, gathered activation), not
//! by bytes: the dense hop reads each node's span from `spans` beside its id, and every warp keeps several
//! nodes' loads in flight.
//!
//! The 32 lane sums are combined by five `shfl.sync.bfly` steps (`s = s + shfl_xor(s, off)`, off =
//! 16, 8, 4, 2, 1), after which lane 0 holds exactly the fixed tree of the contract. A node with few in-edges
//! leaves lanes at `+0.0`, and adding `+0.0` to the non-negative sums is exact, as the contract notes.
//! Measured on an H200 (docs/results/): with one warp per node only, a hub with ~170,000 in-edges kept a few
//! SMs busy for 60 % of the hop while the rest idled.
//!
//! A sparse hop (few active sources: see "Sparse frontiers" below) runs the same code over lists of the touched
//! targets only, its grid striding over their blocks.

use crate::util::{
    ballot, block_x, dynamic_shared_f32, fma, grid_dim_x, last_to_arrive, shfl_xor_f32,
    shfl_xor_u64, sync_threads, thread_x,
};
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use recall_kernel_shared::{
    GRAPH_BLOCK, SPREAD_CTR_ACTIVE, SPREAD_CTR_EDGES, SPREAD_CTR_TOUCHED, SPREAD_HUB_CHUNK,
    SPREAD_HUB_MIN, SPREAD_PAIR, SPREAD_SCAN_BLOCK, SPREAD_SMALL_ROUNDS, SpreadFrontierParams,
    SpreadHopParams, spread_hop_blocks, spread_hub_groups, spread_hub_run,
};

/// One hop over the three warp classes (the hubs are `spread_hub`'s): `next[v] = (decay * pulled(v) >=
/// threshold) ? decay * pulled(v) : 0`, `total[v] += next[v]`, for every node of their lists.
///
/// Dense hop (`counts == 0`): the lists are all nodes and the grid has exactly one block per list block. Sparse
/// hop: the lists are the touched targets (`spread_collect`), their lengths are read from `counts`, and the grid
/// strides over the list blocks; every other node must already hold `next[v] = +0.0`, which is exactly what its
/// chain of terms from inactive sources gives (see `spread_mark`).
///
/// Kept apart from the hubs so that its registers (and no shared memory) set its occupancy: the hop is bound by
/// dependent loads, and warps in flight are what hides them.
///
/// # Safety
/// Dense: grid of `spread_hop_blocks(n_class)[1..]` summed; sparse: any grid of at least one block. Blocks of
/// `GRAPH_BLOCK` threads; the graph was validated (every source below `n_nodes`, `in_ptr` non-decreasing and
/// within the edge arrays), each list `c` at `nodes + class_off[c]` holds only nodes of that in-degree class, no
/// node twice, and the buffers are sized as `SpreadHopParams` documents.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn spread_hop(p: SpreadHopParams) {
    // SAFETY: forwarded launcher contract.
    let counts = unsafe { hop_counts(&p) };
    let blocks = spread_hop_blocks(counts);
    let all = blocks[1] + blocks[2] + blocks[3];
    let mut b = block_x();
    while b < all {
        // SAFETY: forwarded launcher contract; b < all.
        unsafe { class_block(&p, counts, blocks, b) };
        b += grid_dim_x();
    }
}

/// The hubs' part of a hop: block `32 h + g` is group `g` of hub `h` of the hub list (see [`hub`]; a hub has
/// at most 32 groups, and the blocks past its groups return at once), grid-strided. It runs on a stream of its
/// own beside `spread_hop` over the same buffers: the two write different nodes, and a hop's hubs are a few
/// blocks of long chains (about a hundred blocks on a graph of a million nodes whose largest hub has 170,000
/// in-edges), which the rest of the hop's blocks run beside.
///
/// # Safety
/// As `spread_hop` (any grid of at least one block), with `4 * SPREAD_HUB_CHUNK * 4` bytes of dynamic shared
/// memory and one hub per block (a grid of at least `32 * n_class[0]` blocks, or of the touched hubs in a
/// sparse hop); the hub list holds nodes with at least `SPREAD_HUB_MIN` in-edges, and the hub tickets are zero.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn spread_hub(p: SpreadHopParams) {
    // SAFETY: forwarded launcher contract.
    let counts = unsafe { hop_counts(&p) };
    let all = spread_hop_blocks(counts)[0];
    let nodes = p.nodes as *const u32;
    // Block-uniform loop: the hub path's barriers are reached by every thread.
    let mut b = block_x();
    while b < all {
        let (h, l) = (b / 32, b % 32);
        // SAFETY: h is below the hubs listed; their list starts at class_off[0].
        unsafe { hub(&p, h, *nodes.add((p.class_off[0] + h) as usize), l) };
        b += grid_dim_x();
    }
}

/// The four class lengths of this hop: `n_class` (dense) or the touched counts (sparse).
///
/// # Safety
/// `counts` is 0 or points to four u32 written by an earlier launch.
#[inline(always)]
unsafe fn hop_counts(p: &SpreadHopParams) -> [u32; 4] {
    if p.counts == 0 {
        p.n_class
    } else {
        let c = p.counts as *const u32;
        // SAFETY: caller.
        unsafe { [*c, *c.add(1), *c.add(2), *c.add(3)] }
    }
}

/// List block `b` of the three warp classes (`blocks` from `spread_hop_blocks(counts)`; hubs excluded).
///
/// # Safety
/// As `spread_hop`; `b` below the classes' list blocks, block-uniform.
#[inline(always)]
unsafe fn class_block(p: &SpreadHopParams, counts: [u32; 4], blocks: [u32; 4], b: u32) {
    let [_, n32, n16, n8] = counts;
    let [_, off32, off16, off8] = p.class_off;
    let warps_per_block = GRAPH_BLOCK / 32;
    let t = thread_x();
    let (lane, warp) = (t % 32, b * warps_per_block + t / 32);
    // Block ranges of the three warp classes; every branch below is block-uniform.
    if b < blocks[1] {
        // SAFETY: the class's list.
        unsafe { pair32(p, off32, n32, warp, lane) };
    } else if b < blocks[1] + blocks[2] {
        let warp = warp - blocks[1] * warps_per_block;
        // SAFETY: the class's list.
        unsafe { small::<16>(p, off16, n16, warp, lane) };
    } else {
        let warp = warp - (blocks[1] + blocks[2]) * warps_per_block;
        // SAFETY: the class's list.
        unsafe { small::<8>(p, off8, n8, warp, lane) };
    }
}

// `pair32` and `small` unroll for exactly these.
const _: () = assert!(SPREAD_PAIR == 2 && SPREAD_SMALL_ROUNDS == 4);

/// In-edge positions `start .. end` of the node at entry `at` of `nodes`, whose id is `v`: from `spans` when
/// the launch has them (the dense hop: a load that does not wait for `v`), else from `in_ptr`.
///
/// # Safety
/// `at` is an entry of `nodes` and `v` its id (`< n_nodes`), not a hub when `spans` is set.
#[inline(always)]
unsafe fn span(p: &SpreadHopParams, at: u32, v: u32) -> (u64, u64) {
    if p.spans != 0 {
        // SAFETY: spans has one entry per entry of nodes.
        let s = unsafe { *(p.spans as *const u64).add(at as usize) };
        (s >> 16, (s >> 16) + (s & 0xFFFF))
    } else {
        let in_ptr = p.in_ptr as *const u64;
        // SAFETY: v < n_nodes and in_ptr holds n_nodes + 1 values.
        unsafe { (*in_ptr.add(v as usize), *in_ptr.add(v as usize + 1)) }
    }
}

/// Nodes with 17 up to `SPREAD_HUB_MIN` in-edges, `SPREAD_PAIR` per warp: entries `off + PAIR * warp ..` of
/// the list of `count`. Lane `l` runs each node's chain over positions `l, l + 32, ...`, 2 terms per node at a
/// time, the nodes' loads interleaved (sources and weights of all, then all gathers, then each node's FMAs in
/// order), then each node's fixed tree.
///
/// # Safety
/// Entries `off .. off + count` of `nodes` are nodes of this class; the graph validated as `spread_hop` requires.
#[inline(always)]
unsafe fn pair32(p: &SpreadHopParams, off: u32, count: u32, warp: u32, lane: u32) {
    const P: usize = SPREAD_PAIR as usize;
    const UNROLL: u64 = 2;
    let first = warp * SPREAD_PAIR;
    if first >= count {
        return; // Warp-uniform.
    }
    let nodes = p.nodes as *const u32;
    let (mut v, mut start, mut end) = ([0u32; P], [0u64; P], [0u64; P]);
    // Lane R holds node R's total before the hop (see `write`): one register across the loop, not two.
    let mut old = 0.0f32;
    unroll!(2, R: usize => {
        let i = first + R as u32;
        if i < count {
            // SAFETY: i < count: an entry of the class's list.
            v[R] = unsafe { *nodes.add((off + i) as usize) };
            // SAFETY: as above; v[R] is that entry's id.
            (start[R], end[R]) = unsafe { span(p, off + i, v[R]) };
            if lane == R as u32 {
                // SAFETY: v[R] < n_nodes.
                old = unsafe { *(p.total as *const f32).add(v[R] as usize) };
            }
        }
    });
    let (src, w, prev) = (
        p.in_src as *const u32,
        p.in_w as *const f32,
        p.prev as *const f32,
    );
    // The sources and weights of the 2 x 32 positions from `base` on, for both nodes.
    let load = |base: u64| {
        let mut sw = [[(0u32, 0.0f32); UNROLL as usize]; P];
        unroll!(2, R: usize => {
            let j0 = start[R] + base + u64::from(lane);
            unroll!(2, I: usize => {
                let j = j0 + 32 * (I as u64);
                if j < end[R] {
                    // SAFETY: j < end <= number of edges.
                    sw[R][I] = unsafe { (*src.add(j as usize), *w.add(j as usize)) };
                }
            });
        });
        sw
    };
    let left = |base: u64| start[0] + base < end[0] || start[1] + base < end[1];
    let mut acc = [0.0f32; P];
    let mut base = 0u64;
    let mut sw = load(0);
    // Warp-uniform: while any node has positions left. The next step's sources and weights are loaded
    // before this step's gathers are used, so a step waits for one memory latency, not two.
    while left(base) {
        let mut a = [[0.0f32; UNROLL as usize]; P];
        unroll!(2, R: usize => {
            let j0 = start[R] + base + u64::from(lane);
            unroll!(2, I: usize => {
                if j0 + 32 * (I as u64) < end[R] {
                    // SAFETY: sources are below n_nodes (validated); prev holds n_nodes values.
                    a[R][I] = unsafe { *prev.add(sw[R][I].0 as usize) };
                }
            });
        });
        let step = 32 * UNROLL;
        let next = if left(base + step) {
            load(base + step)
        } else {
            [[(0u32, 0.0f32); UNROLL as usize]; P]
        };
        unroll!(2, R: usize => {
            let j0 = start[R] + base + u64::from(lane);
            unroll!(2, I: usize => {
                if j0 + 32 * (I as u64) < end[R] {
                    acc[R] = fma(sw[R][I].1, a[R][I], acc[R]);
                }
            });
        });
        sw = next;
        base += step;
    }
    unroll!(2, R: usize => {
        if first + (R as u32) < count {
            // Warp-uniform branch: lane 0 takes node R's total from lane R.
            let old = if R == 0 { old } else { shfl_xor_f32(old, R as u32) };
            // SAFETY: v[R] is a node.
            unsafe { finish(p, v[R], lane, acc[R], old, 16) };
        }
    });
}

/// Nodes with at most `W` in-edges, `32 / W` per warp and round, `SPREAD_SMALL_ROUNDS` rounds: group `lane /
/// W` of round `r` owns entry `off + (ROUNDS * warp + r) * (32 / W) + lane / W` of the list of `count`, its
/// lane `l` the single term at position `l` (lanes past the degree hold `+0.0`). Every round's loads are
/// issued before any round's sum. The contract's 32-lane tree over such a node adds only `+0.0` in its steps
/// 16 .. W, which is exact for the non-negative sums, so the group's tree over offsets `W / 2 .. 1` gives the
/// same bits.
///
/// # Safety
/// Entries `off .. off + count` of `nodes` are nodes with at most `W` in-edges; the graph validated as
/// `spread_hop` requires.
#[inline(always)]
unsafe fn small<const W: u32>(p: &SpreadHopParams, off: u32, count: u32, warp: u32, lane: u32) {
    const R: usize = SPREAD_SMALL_ROUNDS as usize;
    let per_round = 32 / W;
    let first = warp * per_round * SPREAD_SMALL_ROUNDS;
    if first >= count {
        return; // Warp-uniform: no group of this warp has a node.
    }
    let (group, l) = (lane / W, lane % W);
    let nodes = p.nodes as *const u32;
    let (mut v, mut pos) = ([0u32; R], [u64::MAX; R]);
    let mut old = [0.0f32; R];
    unroll!(4, Q: usize => {
        let i = first + Q as u32 * per_round + group;
        if i < count {
            // SAFETY: i < count: an entry of the class's list.
            v[Q] = unsafe { *nodes.add((off + i) as usize) };
            // SAFETY: v[Q] < n_nodes; read beside the in-edges (see `write`).
            old[Q] = unsafe { *(p.total as *const f32).add(v[Q] as usize) };
            // SAFETY: as above; v[Q] is that entry's id.
            let (start, end) = unsafe { span(p, off + i, v[Q]) };
            if start + u64::from(l) < end {
                pos[Q] = start + u64::from(l);
            }
        }
    });
    let mut sw = [(0u32, 0.0f32); R];
    unroll!(4, Q: usize => {
        if pos[Q] != u64::MAX {
            // SAFETY: pos < end <= number of edges.
            sw[Q] = unsafe {
                (
                    *(p.in_src as *const u32).add(pos[Q] as usize),
                    *(p.in_w as *const f32).add(pos[Q] as usize),
                )
            };
        }
    });
    let mut acc = [0.0f32; R];
    unroll!(4, Q: usize => {
        if pos[Q] != u64::MAX {
            // SAFETY: sources are below n_nodes (validated); prev holds n_nodes values.
            acc[Q] = fma(sw[Q].1, unsafe { *(p.prev as *const f32).add(sw[Q].0 as usize) }, 0.0);
        }
    });
    unroll!(4, Q: usize => {
        let i = first + Q as u32 * per_round + group;
        // Every lane of the warp takes part in the shuffles, valid or not; offsets below W stay in the group.
        // SAFETY: only group leaders of valid groups write; v[Q] is then a node.
        unsafe { finish_group(p, v[Q], l, acc[Q], old[Q], W / 2, i < count) };
    });
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
    old: f32,
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
        unsafe { write(p, v, acc, old) };
    }
}

/// The fixed tree over the warp's 32 lane sums (offsets `first_off`, ..., 1; `first_off` = 16 for the full
/// tree), then lane 0 writes. Every lane of the warp must call it.
///
/// # Safety
/// `v < n_nodes`; buffers as `SpreadHopParams` documents.
#[inline(always)]
unsafe fn finish(p: &SpreadHopParams, v: u32, lane: u32, mut acc: f32, old: f32, first_off: u32) {
    let mut off = first_off;
    while off > 0 {
        acc = acc + shfl_xor_f32(acc, off);
        off /= 2;
    }
    if lane == 0 {
        // SAFETY: v < n_nodes.
        unsafe { write(p, v, acc, old) };
    }
}

/// Decay, threshold, `next[v]`, `total[v] = old + next[v]` and the overflow flag, from node `v`'s pulled sum
/// and `old`, its `total[v]` before this hop. Only `v`'s own writer writes `total[v]` during a hop, so the
/// warps read `old` with their nodes' in-edges instead of after the sums: one memory latency fewer on each
/// warp's path.
///
/// # Safety
/// `v < n_nodes`; buffers as `SpreadHopParams` documents.
#[inline(always)]
unsafe fn write(p: &SpreadHopParams, v: u32, acc: f32, old: f32) {
    let x = acc * p.decay;
    let a = if x < p.threshold { 0.0 } else { x };
    let (next, total) = (p.next as *mut f32, p.total as *mut f32);
    let sum = old + a;
    // SAFETY: v < n_nodes; next and total hold n_nodes values.
    unsafe {
        *next.add(v as usize) = a;
        *total.add(v as usize) = sum;
    }
    if !a.is_finite() || !sum.is_finite() {
        // SAFETY: overflow_hop points to one u32 that lives for the launch and is only used atomically.
        unsafe { AtomicU32::from_ptr(p.overflow_hop as *mut u32) }
            .fetch_max(u32::MAX - p.hop, Ordering::Relaxed);
    }
}

/// Group `g` of hub `v` (entry `h` of the hub list), one block of `GRAPH_BLOCK` threads: of the hub's `G =
/// spread_hub_groups(len)` blocks, this one runs the lane chains `g, g + G, ...` (`32 / G` of them), which
/// take the in-edge positions `g, g + G, g + 2 G, ...` (slot `m` of the block holds position `g + G m`: step
/// `m / (32 / G)` of its chain `m % (32 / G)`), stored as one run (`spread_hub_run`). Warps 1..8 gather the
/// slots' weights and activations `SPREAD_HUB_CHUNK` at a time into shared memory (double-buffered) while
/// lanes `0 .. 32 / G` of warp 0 run the chains over the previous chunk, each in order. They store the chain sums in `hub_lanes[32 h + chain]`;
/// the block that takes the hub's last ticket loads the 32 sums into its warp 0 (lane `l` the sum of chain
/// `l`) and finishes exactly like the warp path, then resets the ticket. Blocks with `g >= G` return at once.
///
/// The contract fixes 32 sequential chains per node; the chain of a hub with 170,000 in-edges is 5,300 FMAs,
/// about 11 us, so the largest hubs take 32 blocks of one chain each. A small hub is one block whose loads
/// read the in-edges whole: 32 blocks of one chain each for every hub kept 1,632 blocks busy on an H200 for
/// 33 us, mostly waiting for one thread's chain, and with so many blocks the hubs could not run beside the
/// rest of the hop.
///
/// # Safety
/// `v < n_nodes`, called by every thread of the block; `4 * SPREAD_HUB_CHUNK` floats of dynamic shared memory;
/// `hub_lanes` and `hub_tickets` hold entry `h` as `SpreadHopParams` documents, the ticket zero before the hop.
#[inline(always)]
unsafe fn hub(p: &SpreadHopParams, h: u32, v: u32, g: u32) {
    const CHUNK: usize = SPREAD_HUB_CHUNK as usize;
    let in_ptr = p.in_ptr as *const u64;
    // SAFETY: v < n_nodes and in_ptr holds n_nodes + 1 values.
    let (start, end) = unsafe { (*in_ptr.add(v as usize), *in_ptr.add(v as usize + 1)) };
    let len = (end - start) as usize;
    let groups = spread_hub_groups(len as u64) as usize;
    let g = g as usize;
    if g >= groups {
        return; // Block-uniform.
    }
    let chains = 32 / groups;
    let smem = dynamic_shared_f32();
    // [w0, a0, w1, a1], CHUNK floats each.
    let buf = |b: usize, which: usize| smem.wrapping_add((2 * b + which) * CHUNK);
    let t = thread_x() as usize;
    let warp = t / 32;
    // The hub's in-edges are stored group by group (the launcher's `hub_order`): this group's slots are one
    // run.
    let (first, slots) = spread_hub_run(len as u64, g as u32);
    let (run, slots) = (start as usize + first as usize, slots as usize);
    let n_chunks = slots.div_ceil(CHUNK);
    let (src, w, prev) = (
        p.in_src as *const u32,
        p.in_w as *const f32,
        p.prev as *const f32,
    );
    let loaders = GRAPH_BLOCK as usize - 32;
    // Warps 1..8 stage chunk c into buffer c % 2. Each loader owns slots `t - 32 + loaders * m`: all its
    // sources and weights are loaded, then all gathers issued, then all stores done, so a chunk costs about
    // two memory latencies instead of two per slot.
    const PER: usize = CHUNK.div_ceil(GRAPH_BLOCK as usize - 32);
    let stage = |c: usize| {
        if warp == 0 || c >= n_chunks {
            return;
        }
        let base = c * CHUNK;
        let (wb, ab) = (buf(c % 2, 0), buf(c % 2, 1));
        let here = (slots - base).min(CHUNK);
        let mut sw = [(0u32, 0.0f32); PER];
        let mut m = 0;
        while m < PER {
            let i = t - 32 + loaders * m;
            if i < here {
                let j = run + base + i;
                // SAFETY: slot base + i < slots: j is in this group's run, below end.
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
        if t < chains {
            let (wb, ab) = (buf(c % 2, 0), buf(c % 2, 1));
            let here = (slots - c * CHUNK).min(CHUNK);
            // Chunks start at a multiple of 32 slots, so chain t's steps here are slots t, t + chains, ...
            if chains == 1 {
                // One chain (t = 0): consecutive slots, the loop the compiler reads in 16-byte pieces.
                let mut i = 0;
                while i < here {
                    // SAFETY: i < CHUNK inside the buffers, staged before the last barrier.
                    acc = unsafe { fma(*wb.add(i), *ab.add(i), acc) };
                    i += 1;
                }
            } else {
                // Eight steps' operands loaded before their FMAs: the chain waits on its FMAs, not on
                // shared-memory latency.
                let mut i = t;
                while i + 7 * chains < here {
                    let mut wa = [(0.0f32, 0.0f32); 8];
                    unroll!(8, U: usize => {
                        // SAFETY: i + U * chains < here <= CHUNK: inside the buffers, staged.
                        wa[U] = unsafe { (*wb.add(i + U * chains), *ab.add(i + U * chains)) };
                    });
                    unroll!(8, U: usize => {
                        acc = fma(wa[U].0, wa[U].1, acc);
                    });
                    i += 8 * chains;
                }
                while i < here {
                    // SAFETY: as above.
                    acc = unsafe { fma(*wb.add(i), *ab.add(i), acc) };
                    i += chains;
                }
            }
        }
        sync_threads();
        c += 1;
    }
    let lanes = p.hub_lanes as *mut f32;
    let slot = 32 * h as usize;
    if t < chains {
        // SAFETY: entry h of hub_lanes has 32 values; g + groups * t < 32.
        unsafe { *lanes.add(slot + g + groups * t) = acc };
    }
    // The buffers are free (the last barrier passed): the flag lives in their first word.
    let ticket = (p.hub_tickets as *mut u32).wrapping_add(h as usize);
    // SAFETY: the ticket is a device u32 used only atomically during the hop; the flag is shared memory.
    if !unsafe { last_to_arrive(ticket, groups, smem as *mut u32) } {
        return;
    }
    if warp == 0 {
        // SAFETY: the hub's blocks stored their sums before their tickets (volatile: not a stale cache line).
        let s = unsafe { lanes.add(slot + t).read_volatile() };
        // SAFETY: v < n_nodes; only this block writes total[v] in this hop.
        let old = unsafe { *(p.total as *const f32).add(v as usize) };
        // SAFETY: v < n_nodes.
        unsafe { finish(p, v, t as u32, s, old, 16) };
        if t == 0 {
            // SAFETY: every block of the hub has taken its ticket; the next hop starts from zero.
            unsafe { ticket.write_volatile(0) };
        }
    }
}

// ---- Sparse frontiers ----
//
// When the active sources of a hop have few out-edges, the hop runs only over the targets they reach. Every
// other target `v` has only inactive in-neighbours: each of its terms is `fma(w, +0.0, lane)` with `w >= 0`
// finite (validated), i.e. `lane + (+0.0)`, and `x + (+0.0) == x` for every `x >= +0.0`; so its 32 lanes stay
// `+0.0`, the tree gives `+0.0`, `+0.0 * decay = +0.0`, `next[v] = +0.0` whatever the threshold, and
// `total[v] + 0.0 == total[v]`. The host zeroes `next` and the kernels below list the touched targets:
// `spread_seed` (hop 1 from a sparse seed list) or `spread_frontier` (from `prev`) lists the active sources,
// `spread_mark` sets a bit per target they reach, `spread_collect` lists the marked targets by in-degree class,
// and `spread_hop` pulls exactly those, in the same lane order as the dense hop (so the same bits).

/// Seeds from a sparse list: `prev[v] = total[v] = x` for each pair, the nodes listed as active.
///
/// # Safety
/// Grid `ceil(count / GRAPH_BLOCK)` blocks of `GRAPH_BLOCK`; `seeds` holds `count` distinct node ids below
/// `n_nodes`, then `count` f32 values; `prev`, `total` hold `n_nodes` values, `active` at least `count`.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn spread_seed(p: SpreadFrontierParams) {
    let i = block_x() * GRAPH_BLOCK + thread_x();
    let seeds = p.seeds as *const u32;
    if i < p.count {
        // SAFETY: i < count; the node is below n_nodes (launcher contract), every node once.
        unsafe {
            let v = *seeds.add(i as usize) as usize;
            let x = f32::from_bits(*seeds.add((p.count + i) as usize));
            *(p.prev as *mut f32).add(v) = x;
            *(p.total as *mut f32).add(v) = x;
            *(p.active as *mut u32).add(i as usize) = v as u32;
        }
    }
    if i == 0 {
        // SAFETY: the counters hold SPREAD_COUNTERS u32.
        unsafe { *(p.counters as *mut u32).add(SPREAD_CTR_ACTIVE) = p.count };
    }
}

/// Reserve one slot per flagged thread of the block in the list whose length is `*counter` (one atomic per
/// block); returns the thread's slot (meaningless without `flag`). Every thread of the block calls it with the
/// same `counter`; `smem` holds 33 u32.
///
/// # Safety
/// Block of `SPREAD_SCAN_BLOCK` threads (32 warps), block-uniform call; `counter` a device u32 only used
/// atomically while the kernel runs.
#[inline(always)]
unsafe fn block_append(flag: bool, counter: *mut u32, smem: *mut u32) -> u32 {
    let t = thread_x();
    let (lane, warp) = (t % 32, t / 32);
    let mask = ballot(flag);
    if lane == 0 {
        // SAFETY: warp < 32.
        unsafe { *smem.add(warp as usize) = mask.count_ones() };
    }
    sync_threads();
    if t == 0 {
        let mut run = 0u32;
        let mut w = 0;
        while w < SPREAD_SCAN_BLOCK as usize / 32 {
            // SAFETY: w < 32.
            unsafe {
                let c = *smem.add(w);
                *smem.add(w) = run;
                run += c;
            }
            w += 1;
        }
        let base = if run > 0 {
            // SAFETY: forwarded contract.
            unsafe { AtomicU32::from_ptr(counter) }.fetch_add(run, Ordering::Relaxed)
        } else {
            0
        };
        // SAFETY: index 32 < 33.
        unsafe { *smem.add(32) = base };
    }
    sync_threads();
    // SAFETY: written before the barrier.
    let slot = unsafe { *smem.add(32) + *smem.add(warp as usize) }
        + (mask & ((1u32 << lane) - 1)).count_ones();
    sync_threads(); // `smem` is reused by the next call.
    slot
}

/// The active sources of `prev` (nonzero activations) listed in `active`, with their count and their out-edges'
/// count added to the counters.
///
/// # Safety
/// Grid `ceil(n_nodes / SPREAD_SCAN_BLOCK)` blocks of `SPREAD_SCAN_BLOCK`, 512 bytes of dynamic shared memory;
/// buffers as `SpreadFrontierParams` documents, counters zero before the launch.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn spread_frontier(p: SpreadFrontierParams) {
    let t = thread_x();
    let v = block_x() * SPREAD_SCAN_BLOCK + t;
    let smem = dynamic_shared_f32() as *mut u32;
    // SAFETY: v < n_nodes before each read; prev and out_ptr hold n_nodes (+ 1) values.
    let (active, degree) = unsafe {
        if v < p.n_nodes && *(p.prev as *const f32).add(v as usize) != 0.0 {
            let out_ptr = p.out_ptr as *const u64;
            (
                true,
                *out_ptr.add(v as usize + 1) - *out_ptr.add(v as usize),
            )
        } else {
            (false, 0)
        }
    };
    let counters = p.counters as *mut u32;
    // SAFETY: block-uniform call; the counter is only used atomically.
    let slot = unsafe { block_append(active, counters.add(SPREAD_CTR_ACTIVE), smem) };
    if active {
        // SAFETY: at most n_nodes sources are listed.
        unsafe { *(p.active as *mut u32).add(slot as usize) = v };
    }
    let mut sum = degree;
    let mut off = 16;
    while off > 0 {
        sum += shfl_xor_u64(sum, off);
        off /= 2;
    }
    // u64 per warp after the 33 u32 of `block_append` (bytes 256 .. 512).
    let sums = smem.wrapping_add(64) as *mut u64;
    if t % 32 == 0 {
        // SAFETY: warp < 32.
        unsafe { *sums.add((t / 32) as usize) = sum };
    }
    sync_threads();
    if t == 0 {
        let mut total = 0u64;
        let mut w = 0;
        while w < SPREAD_SCAN_BLOCK as usize / 32 {
            // SAFETY: w < 32, written before the barrier.
            total += unsafe { *sums.add(w) };
            w += 1;
        }
        if total > 0 {
            // SAFETY: the u64 counter is 8-byte aligned (word 6 of a device allocation), only used atomically.
            unsafe { AtomicU64::from_ptr(counters.add(SPREAD_CTR_EDGES) as *mut u64) }
                .fetch_add(total, Ordering::Relaxed);
        }
    }
}

/// Set `mark[d / 32]` bit `d % 32` for every target `d` of the listed active sources: a warp per source, its
/// lanes over the source's out-edges.
///
/// # Safety
/// Any grid of `GRAPH_BLOCK`-thread blocks; `counters[SPREAD_CTR_ACTIVE]` sources listed in `active`; buffers as
/// `SpreadFrontierParams` documents, `mark` zero before the launch.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn spread_mark(p: SpreadFrontierParams) {
    // SAFETY: the counters hold SPREAD_COUNTERS u32, written by an earlier launch.
    let count = unsafe { *(p.counters as *const u32).add(SPREAD_CTR_ACTIVE) };
    let t = thread_x();
    let lane = t % 32;
    let mut w = (block_x() * GRAPH_BLOCK + t) / 32;
    let n_warps = grid_dim_x() * (GRAPH_BLOCK / 32);
    let out_ptr = p.out_ptr as *const u64;
    while w < count {
        // SAFETY: w < count; listed sources are nodes; out_ptr holds n_nodes + 1 values, out-edges' targets are
        // below n_nodes (validated), so the word is inside the bitmap.
        unsafe {
            let u = *(p.active as *const u32).add(w as usize) as usize;
            let (start, end) = (*out_ptr.add(u), *out_ptr.add(u + 1));
            let mut j = start + u64::from(lane);
            while j < end {
                let d = *(p.out_dst as *const u32).add(j as usize);
                AtomicU32::from_ptr((p.mark as *mut u32).add((d / 32) as usize))
                    .fetch_or(1 << (d % 32), Ordering::Relaxed);
                j += 32;
            }
        }
        w += n_warps;
    }
}

/// List the marked targets by in-degree class (the classes of `upload_graph`'s binning), each class's list at
/// `touched + class_off[c]`, lengths in `counters[SPREAD_CTR_TOUCHED + c]`.
///
/// # Safety
/// Grid `ceil(n_nodes / SPREAD_SCAN_BLOCK)` blocks of `SPREAD_SCAN_BLOCK`, 512 bytes of dynamic shared memory;
/// `class_off` the class offsets of the graph's binning; buffers as `SpreadFrontierParams` documents, the
/// touched counters zero before the launch.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn spread_collect(p: SpreadFrontierParams) {
    let v = block_x() * SPREAD_SCAN_BLOCK + thread_x();
    let smem = dynamic_shared_f32() as *mut u32;
    let mut class = 4u32;
    if v < p.n_nodes {
        // SAFETY: v < n_nodes: the word is in the bitmap, in_ptr holds n_nodes + 1 values.
        unsafe {
            if (*(p.mark as *const u32).add((v / 32) as usize) >> (v % 32)) & 1 != 0 {
                let in_ptr = p.in_ptr as *const u64;
                class = match *in_ptr.add(v as usize + 1) - *in_ptr.add(v as usize) {
                    d if d >= SPREAD_HUB_MIN => 0,
                    d if d > 16 => 1,
                    d if d > 8 => 2,
                    _ => 3,
                };
            }
        }
    }
    let counters = p.counters as *mut u32;
    let mut c = 0u32;
    while c < 4 {
        let flag = class == c;
        // SAFETY: block-uniform call; the counter is only used atomically.
        let slot =
            unsafe { block_append(flag, counters.add(SPREAD_CTR_TOUCHED + c as usize), smem) };
        if flag {
            // SAFETY: at most the class's size is listed, inside its region.
            unsafe { *(p.touched as *mut u32).add((p.class_off[c as usize] + slot) as usize) = v };
        }
        c += 1;
    }
}
