//! One query against few rows: similarity and top-k in one launch (`sm80_knn1_*`).
//!
//! The latency of a small search is the number of round trips, not bytes: a norm kernel, a scan kernel,
//! selection levels and a download each wait for the one before. Here one kernel does all of it, and the
//! host's whole call is: copy the query in, launch, copy `2k` values out.
//!
//! Thread mapping (see `Knn1Params`): warp `w` of block `b` owns rows `32 * (warps * b + w) ..`, lane `l` one
//! row. The warp copies its 32 rows global -> shared with `cp.async`, [`KNN1_TILE`] columns per tile and
//! [`KNN1_STAGES`] tiles in flight, so a whole row's worth of loads is outstanding at once instead of one
//! tile per round trip. Lane `l` then runs row `l`'s chain over the tile exactly as `scan` does
//! (`docs/numerics.md`: one FMA chain per pair, `k` ascending); for cosine it runs the query's norm chain
//! beside it (the same steps as `row_norms`, so the same bits). Keys are those of `topk_small`: the block
//! extracts its `k` smallest keys in `k` rounds of warp and block minima (a one-warp block sorts its 32 keys
//! across the warp instead, `warp_sort_u64`); the block that takes the last ticket of its group of blocks
//! merges the group's lists in `k` rounds of minima over their heads, and the merger that takes the last
//! group ticket merges the groups' lists into the answer. Most merging happens while other blocks still scan.
//!
//! `cp.async` needs sm_80: `cargo xtask build-kernels` leaves `sm80_*` kernels out of older images, where
//! the launcher runs the separate kernels instead.

use crate::dense::{chain_tile, finish, step};
use crate::util::{
    F4, MERGE_BARRIER, block_dim_x, block_min, block_x, cp_async_commit, cp_async_wait, cp_async16,
    dynamic_shared_f32, fence_mbarrier_init, fma, grid_dim_x, last_to_arrive_of, mbarrier_init,
    mbarrier_wait, named_barrier, named_barrier_arrive, score_key, shared_addr, shfl_idx_u64, sqrt,
    stage_query, stage_query_params, sync_threads, sync_warp, thread_x, warp_sort_u64,
};
use core::arch::asm;
use recall_kernel_shared::{
    KNN1_BULK_PARAM_QUERY, KNN1_BULK_TILE_BYTES, KNN1_EMPTY_KEY, KNN1_PARAM_QUERY, KNN1_ROW_STRIDE,
    KNN1_STAGES, KNN1_TILE, Knn1BulkParams, Knn1Params, Knn1QueryParams, LISTS_OUT_BLOCKS,
    LISTS_OUT_GROUPS, METRIC_COSINE, METRIC_DOT, METRIC_L2, knn1_bulk_query_floats,
};

const TILE: usize = KNN1_TILE as usize;
const STAGES: usize = KNN1_STAGES as usize;
const RS: usize = KNN1_ROW_STRIDE as usize;
/// f32 of one warp's ring.
const RING: usize = STAGES * 32 * RS;

/// See the module comment.
///
/// # Safety
/// Grid `ceil(n_rows / (32 * warps))`, `32 * warps` threads, `knn1_shared_bytes(dim, warps)` bytes of
/// dynamic shared memory; pointers and sizes as `Knn1Params` documents; `1 <= k <= SMALL_K_MAX`, `k <=
/// n_rows`, the tickets zero.
/// Returns whether this block wrote the answer (block-uniform).
#[inline(always)]
pub(crate) unsafe fn knn1<const METRIC: u32>(
    p: &Knn1Params,
    query_piece: impl Fn(usize) -> F4,
) -> bool {
    let smem = dynamic_shared_f32();
    let t = thread_x() as usize;
    let (lane, warp) = (t % 32, t / 32);
    let warps = p.warps as usize;
    let (n, dim) = (p.n_rows as usize, p.dim as usize);
    let q_s = smem;
    let ring = smem.wrapping_add(dim.div_ceil(4) * 4 + warp * RING);
    let mins = smem.wrapping_add(dim.div_ceil(4) * 4 + warps * RING) as *mut u64;
    let last_flag = mins.wrapping_add(2 * warps) as *mut u32;
    // The query joins the first copy group (its pieces spread over the block's threads): one round trip
    // for all of it, overlapped with the first tiles. (From the parameters it is stored after the first
    // tiles are queued: see below.)
    if p.query != 0 {
        // SAFETY: the query area at q_s holds dim floats (launcher); p.query holds dim (a multiple of 4)
        // floats, 16-byte aligned.
        unsafe { stage_query(q_s, p.query, dim, t, 32 * warps) };
    }
    let row0 = (block_x() as usize * warps + warp) * 32;
    let n_tiles = dim.div_ceil(TILE);
    // Lane `l` copies piece `l % 8` (16 bytes) of rows `l / 8 + 4 i`, i < 8, of every tile: 4 rows of 128
    // bytes per instruction. Per lane, everything but the tile offset is fixed: the first row's source and
    // destination, the row steps, and which of its 8 rows exist. Rows past the end and columns past `dim`
    // are zero-filled without a read. Always commits one group (empty past the last tile), so the wait below
    // counts groups uniformly.
    let piece = lane % 8;
    let first = row0 + lane / 8;
    let src0 = p.corpus + ((first * dim + piece * 4) * 4) as u64;
    let src_step = (4 * dim * 4) as u64;
    let dst0 = shared_addr(ring.wrapping_add((lane / 8) * RS + piece * 4));
    const DST_STEP: u32 = (4 * RS * 4) as u32;
    let mut rows_ok = 0u32;
    unroll!(8, I: usize => {
        if first + 4 * I < n {
            rows_ok |= 1 << I;
        }
    });
    let corpus = p.corpus;
    let issue = |tile: usize| {
        if tile < n_tiles {
            let col_ok = tile * TILE + piece * 4 < dim;
            let dst = dst0 + ((tile % STAGES) * 32 * RS * 4) as u32;
            let src = src0 + (tile * TILE * 4) as u64;
            unroll!(8, I: usize => {
                let ok = col_ok && (rows_ok >> I) & 1 != 0;
                // SAFETY: the destination is row `lane / 8 + 4 I` of this warp's slot, 16-byte aligned (RS and
                // the query area are multiples of 4 floats); when ok, that row is < n and col + 4 <= dim (dim
                // is a multiple of 4), so the 16 source bytes are inside the corpus, 16-byte aligned.
                unsafe {
                    cp_async16(
                        dst + I as u32 * DST_STEP,
                        if ok { src + I as u64 * src_step } else { corpus },
                        if ok { 16 } else { 0 },
                    )
                };
            });
        }
        cp_async_commit();
    };
    let mut s = 0;
    while s + 1 < STAGES {
        issue(s);
        s += 1;
    }
    if p.query == 0 {
        // The parameter's loads (each line a constant-cache miss) while the first tiles are on their way;
        // stored before tile 0's barrier.
        // SAFETY: the query area at q_s holds dim floats (launcher); with p.query == 0 the entry point
        // carries the query (launcher).
        unsafe { stage_query_params(q_s, query_piece, dim, t, 32 * warps) };
    }
    // This row's norm, loaded now so that its latency hides under the scan.
    let r = row0 + lane;
    let nc = if METRIC == METRIC_COSINE && r < n {
        // SAFETY: cosine launches pass n_rows corpus norms; r < n_rows.
        unsafe { *(p.corpus_norms as *const f32).add(r) }
    } else {
        0.0
    };
    let mut acc = 0.0f32;
    let mut acc_q = 0.0f32;
    let mut tile = 0;
    let keys_s = smem.wrapping_add(dim.div_ceil(4) * 4) as *mut u64;
    while tile < n_tiles {
        issue(tile + STAGES - 1);
        cp_async_wait::<{ KNN1_STAGES - 1 }>();
        // Every lane's copies of this tile are complete; the barrier makes them visible to the whole warp,
        // and the first time to the whole block (the query's pieces came from every warp). Block-uniform:
        // every warp runs the same tiles.
        if tile == 0 {
            sync_threads();
        } else {
            sync_warp();
        }
        let row_s = ring.wrapping_add((tile % STAGES) * 32 * RS + lane * RS) as *const F4;
        let q_t = q_s.wrapping_add(tile * TILE) as *const F4;
        let cols = TILE.min(dim - tile * TILE);
        // SAFETY: both operands hold `cols` staged f32 of this tile, 16-byte aligned.
        (acc, acc_q) =
            unsafe { chain_tile::<METRIC>(q_t, row_s, cols, acc, acc_q, METRIC == METRIC_COSINE) };
        // No lane's copy of tile + STAGES (issued next round into this slot) starts before all have read it.
        sync_warp();
        tile += 1;
    }
    // SAFETY: forwarded launcher contract; the ring is free once the copies below have landed.
    unsafe {
        select_and_merge::<METRIC, false>(
            p, r, acc, acc_q, nc, keys_s, mins, last_flag, warps, false,
        )
    }
}

/// Row `r`'s score from its chains (`acc`, the query's norm chain `acc_q`, the row's norm `nc`), this block's
/// `k` smallest keys, and the two levels of "the last one merges" (see the module comment). Every thread of
/// the block calls it. `WIDE` as for [`merge`]. `groups_out`: each group's merger writes the group's list
/// into `out` (list `g` at `2k g`) for the host to merge, and no block merges the groups. Returns whether this
/// block wrote the answer or, with `groups_out`, its group's list (block-uniform).
///
/// # Safety
/// As the kernels' contract; `keys_s` is shared memory for `32 * warps * 32` u64 that no copy still writes
/// once this thread's pending `cp.async` groups are waited for; `mins` 2 * warps u64 and `last_flag` one u32
/// of shared memory.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn select_and_merge<const METRIC: u32, const WIDE: bool>(
    p: &Knn1Params,
    r: usize,
    acc: f32,
    acc_q: f32,
    nc: f32,
    keys_s: *mut u64,
    mins: *mut u64,
    last_flag: *mut u32,
    warps: usize,
    groups_out: bool,
) -> bool {
    let t = thread_x() as usize;
    let (n, k) = (p.n_rows as usize, p.k as usize);
    let (mut mine, score) = row_key::<METRIC>(p, r, acc, acc_q, nc);
    if r < n {
        // SAFETY: r < n_rows: inside the scores.
        unsafe { *(p.scores as *mut f32).add(r) = score };
    }
    // This block's k smallest keys, ascending (keys are unique: exactly one thread holds each minimum).
    let block = block_x() as usize;
    let n_blocks = grid_dim_x() as usize;
    let group_blocks = p.group_blocks as usize;
    let n_groups = n_blocks.div_ceil(group_blocks);
    let partial = p.partial as *mut u64;
    let group_keys = partial.wrapping_add(n_blocks * k);
    if warps == 1 {
        // One warp: sort its 32 keys across the lanes; lane `i < k` holds the block's `i`-th smallest.
        let sorted = warp_sort_u64(mine, t as u32);
        if t < k {
            // SAFETY: block * k + t < n_blocks * k.
            unsafe { *partial.add(block * k + t) = sorted };
        }
    } else {
        let mut round = 0;
        while round < k {
            // SAFETY: mins holds 2 * warps u64.
            let best = unsafe { block_min(mine, mins, warps, round) };
            if mine == best {
                mine = u64::MAX;
            }
            if t == 0 {
                // SAFETY: block * k + round < n_blocks * k.
                unsafe { *partial.add(block * k + round) = best };
            }
            round += 1;
        }
    }
    // Two levels of "the last one merges": the last block of each group of `group_blocks` merges the
    // group's keys; the last group's merger merges the groups' (with one group, it writes the answer).
    let g = block / group_blocks;
    let in_group = group_blocks.min(n_blocks - g * group_blocks);
    let tickets = p.ticket as *mut u32;
    // SAFETY: the ticket array holds 1 + n_groups u32; the flag lives in this block's shared memory.
    let threads = 32 * warps as u32;
    if !unsafe { last_to_arrive_of(tickets.wrapping_add(1 + g), in_group, last_flag, threads) } {
        return false;
    }
    let one_group = n_groups == 1;
    // The group's list goes out (the answer, or with `groups_out` one of the lists the host merges) or to the
    // last merge.
    let to_out = one_group || groups_out;
    // Every copy into the ring has landed (the ones still counted are empty groups): it holds the lists now.
    cp_async_wait::<0>();
    // SAFETY: this group's blocks wrote their k keys each (one ascending list per block, in_group <= the
    // block's threads) before their tickets; the destination is the group's k keys, or out's 2k values (list
    // g of n_groups with `groups_out`: the launcher); the rings (warps * RING floats) hold in_group * k <= 32 *
    // warps * 32 u64.
    unsafe {
        merge::<WIDE>(
            partial.wrapping_add(g * group_blocks * k),
            in_group,
            k,
            if to_out {
                (p.out as *mut u64).wrapping_add(if one_group { 0 } else { 2 * k * g })
            } else {
                group_keys.wrapping_add(g * k)
            },
            if to_out { p.scores } else { 0 },
            n,
            mins,
            warps,
            keys_s,
        );
    }
    if t == 0 {
        // SAFETY: every block of the group has taken its ticket; the next launch starts from zero.
        unsafe { tickets.add(1 + g).write_volatile(0) };
    }
    if to_out {
        return true;
    }
    // SAFETY: as above, for the groups' counter.
    if !unsafe { last_to_arrive_of(tickets, n_groups, last_flag, threads) } {
        return false;
    }
    // SAFETY: every group's merger wrote its k keys (an ascending list) before its ticket; n_groups <= the
    // block's threads (the launcher's limit); out holds 2k; keys_s as above (its last readers passed the
    // group ticket's barriers).
    unsafe {
        merge::<WIDE>(
            group_keys,
            n_groups,
            k,
            p.out as *mut u64,
            p.scores,
            n,
            mins,
            warps,
            keys_s,
        )
    };
    if t == 0 {
        // SAFETY: every group has taken its ticket.
        unsafe { tickets.write_volatile(0) };
    }
    true
}

/// Row `r`'s pair key `(score_key << 32) | r` and score from its chains (`acc`, the query's norm chain
/// `acc_q`, the row's norm `nc`); `u64::MAX` (and 0.0) for a lane past the rows.
#[inline(always)]
fn row_key<const METRIC: u32>(
    p: &Knn1Params,
    r: usize,
    acc: f32,
    acc_q: f32,
    nc: f32,
) -> (u64, f32) {
    if r >= p.n_rows as usize {
        return (u64::MAX, 0.0);
    }
    let nq = if METRIC == METRIC_COSINE {
        sqrt(acc_q)
    } else {
        0.0
    };
    let score = finish::<METRIC>(acc, nq, nc);
    let key = (u64::from(score_key(score, p.higher_first != 0)) << 32) | r as u64;
    (key, score)
}

/// Merge `lists` ascending lists of `k` keys each (list `i` at `src[i * k ..]`, `lists <=` the block's
/// threads) into the `k` smallest, ascending, in `dst[0..k]`; when `scores != 0` also each one's score (read
/// at the key's position, `< n`) into `dst[k..2k]` as f32 bits. The lists go to shared memory first; thread
/// `i` then offers list `i`'s head in `k` rounds of block minima and the winner moves to its next key.
/// Block-uniform. `WIDE`: sixteen loads in flight per thread instead of eight (one round trip for a one-warp
/// merger's 32 lists of up to 16 keys; the wider loop costs `sm80_knn1_*` registers).
///
/// # Safety
/// `src` holds `lists * k` keys written by other blocks before their tickets; `keys_s` has room for them in
/// this block's shared memory, with no copy into it pending; `dst` holds `k` (or `2k`) u64; `mins` as for
/// `block_min`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn merge<const WIDE: bool>(
    src: *const u64,
    lists: usize,
    k: usize,
    dst: *mut u64,
    scores: u64,
    n: usize,
    mins: *mut u64,
    warps: usize,
    keys_s: *mut u64,
) {
    let t = thread_x() as usize;
    let count = lists * k;
    let threads = 32 * warps;
    // `$n` loads in flight per thread (volatile: from the device's memory, not a stale cache line).
    macro_rules! stage_lists {
        ($n:tt) => {{
            let mut j = t;
            while j < count {
                let mut keys = [u64::MAX; $n];
                unroll!($n, U: usize => {
                    let at = j + U * threads;
                    if at < count {
                        // SAFETY: at < count.
                        keys[U] = unsafe { src.add(at).read_volatile() };
                    }
                });
                unroll!($n, U: usize => {
                    let at = j + U * threads;
                    if at < count {
                        // SAFETY: at < count: inside keys_s.
                        unsafe { *keys_s.add(at) = keys[U] };
                    }
                });
                j += $n * threads;
            }
        }};
    }
    if WIDE {
        stage_lists!(16)
    } else {
        stage_lists!(8)
    }
    named_barrier(MERGE_BARRIER, threads as u32);
    let mut pos = 0;
    // SAFETY: t < lists: list t's first key.
    let mut head = if t < lists {
        unsafe { *keys_s.add(t * k) }
    } else {
        u64::MAX
    };
    let mut round = 0;
    // Thread `t < k` keeps round `t`'s key (every thread sees each round's minimum), so that the `k` scores
    // are read at once after the rounds instead of one dependent load per round.
    let mut chosen = u64::MAX;
    while round < k {
        // SAFETY: mins as the caller guarantees.
        let best = unsafe { block_min(head, mins, warps, round) };
        if head == best && best != u64::MAX {
            pos += 1;
            // SAFETY: pos < k: inside list t.
            head = if pos < k {
                unsafe { *keys_s.add(t * k + pos) }
            } else {
                u64::MAX
            };
        }
        if t == 0 {
            // A list for the host (`scores != 0`) marks places no row fills with [`KNN1_EMPTY_KEY`]: the host
            // waits for every word to differ from `u64::MAX` (a group's list with fewer than k rows; the
            // answer itself always has k).
            let key = if scores != 0 && best == u64::MAX {
                KNN1_EMPTY_KEY
            } else {
                best
            };
            // SAFETY: round < k: inside dst.
            unsafe { *dst.add(round) = key };
        }
        if t == round {
            chosen = best;
        }
        round += 1;
    }
    // k <= 32 <= the block's threads: every round's key has its thread.
    if scores != 0 && t < k {
        let at = (chosen as u32 as usize).min(n - 1);
        // SAFETY: at < n (k <= n, so every selected key is a real row's; the scores were written before the
        // tickets this block acquired); k + t < 2k: inside dst.
        unsafe {
            let score = (scores as *const f32).add(at).read_volatile();
            *dst.add(k + t) = u64::from(score.to_bits());
        }
    }
}

/// `sm90a_knn1_*`: the same answer as `knn1` (same chains, same keys and merges), with the copies on the
/// tensor memory accelerator. A block covers 32 rows with one computing warp: the rows arrive in tiles of 32
/// rows x 32 columns, one tensor-map copy each ([`KNN1_BULK_TILE_BYTES`], in the 128-byte swizzle), through a
/// ring of `slots` tiles with a full and an empty `mbarrier` per tile. Warp 1 queues the copies (one lane, no
/// addresses: the tensor map knows the corpus), waiting for a slot to be emptied once the ring is full; warp
/// 0 runs the chains tile by tile as the tiles land (the next tile's operands loaded before the current one's
/// steps), frees each slot, then sorts its block's keys across the warp and either
/// ([`LISTS_OUT_BLOCKS`]) writes its `k` smallest with their scores for the host to merge, with no fence and no
/// ticket, or merges as `knn1` does (with [`LISTS_OUT_GROUPS`] only within its group of 32 blocks, the groups'
/// lists going to the host).
///
/// The launcher picks `slots`: the whole rows (every copy in flight at once) where the blocks have an SM
/// each, fewer where several blocks share an SM, so that all of them are resident together. The other warps
/// stage the query from the parameters (plain loads through the parameter's generic address,
/// [`param_piece`]) and leave; warp 0 waits for them at one named barrier (barriers wait only for
/// threads that have not exited).
///
/// Before session 17 a block held its 32 whole rows, queued as one bulk copy per row (~65 cycles of queueing
/// each, so 32 a block), and the chains waited for all of them: a tile's copy covers 32 rows, so the chains
/// start on the first tile, and the ring keeps more blocks per SM (10,000 rows x 768: 21-22 us end to end
/// against 28-29 us on an H200, session 17). The fence, ticket and device merge that `lists_out` skips took
/// about a third of a block's path after its chains (ncu, session 17).
///
/// # Safety
/// Grid `ceil(n_rows / 32)`, 64 to 256 threads (warp 0, the copying warp 1 and up to six stagers),
/// `knn1_bulk_shared_bytes(dim, slots)` bytes of dynamic shared memory; `map` the generic address of the
/// corpus's tensor map in the parameters, as [`Knn1BulkParams`] describes; `KNN1_BULK_MIN_SLOTS
/// <= slots <= KNN1_BULK_MAX_SLOTS`; `p.out` holds `2k` words per block with [`LISTS_OUT_BLOCKS`], per group
/// with [`LISTS_OUT_GROUPS`]; sm_90; the rest as `knn1` (`warps == 1`, `group_blocks == 32`).
///
/// Returns whether this thread's block wrote its part of the answer: the answer, its group's list, or with
/// [`LISTS_OUT_BLOCKS`] its own list (warp 0; the other warps `false`).
#[inline(always)]
pub(crate) unsafe fn knn1_bulk<const METRIC: u32>(
    p: &Knn1Params,
    slots: usize,
    lists_out: u32,
    map: u64,
    query_piece: impl Fn(usize) -> F4,
) -> bool {
    let (lane, warp) = (thread_x() as usize % 32, thread_x() as usize / 32);
    let block_warps = block_dim_x() as usize / 32;
    let (n, dim) = (p.n_rows as usize, p.dim as usize);
    let n_tiles = dim.div_ceil(TILE);
    let sm = BulkSmem::of(p.dim, slots);
    let row0 = block_x() as usize * 32;
    let all = 32 * block_warps as u32;
    // The query's pieces from memory (one round trip over the bus), waited for before the first tile.
    if p.query != 0 && warp == 0 {
        // SAFETY: the query area holds dim floats; p.query holds dim (a multiple of 4) floats, 16-byte
        // aligned.
        unsafe { stage_query(sm.q_s, p.query, dim, lane, 32) };
    }
    cp_async_commit();
    if warp == 1 {
        if lane == 0 {
            // SAFETY: this block's barriers, before any use; map as the launcher guarantees.
            unsafe { bulk_init_barriers(&sm, slots, map) };
        }
        sync_warp();
        // The barriers exist: warp 0 may wait on them (it waits for this arrival at barrier 1).
        named_barrier_arrive(1, all);
        let mut at = RingPos::default();
        let mut t = 0;
        while t < n_tiles {
            // SAFETY: tile t < n_tiles into slot at (its last tile, t - slots, read by warp 0 when t >= slots);
            // map as the launcher guarantees.
            unsafe { bulk_issue(&sm, map, at, t >= slots, t, row0, lane) };
            at = at.next(slots as u32);
            t += 1;
        }
        return false;
    }
    if p.query == 0 {
        // The parameter's lines, spread over warp 0 and the stagers (warps 2 ..), loaded while the first tiles
        // arrive.
        let (rank, stagers) = (warp.saturating_sub(1), block_warps - 1);
        // SAFETY: the query area holds dim floats; the entry point carries the query (launcher).
        unsafe { stage_query_params(sm.q_s, query_piece, dim, 32 * rank + lane, 32 * stagers) };
    }
    if warp != 0 {
        named_barrier_arrive(1, all);
        return false;
    }
    // The barriers' initialisation and the query's stores.
    named_barrier(1, all);
    let r = row0 + lane;
    let nc = if METRIC == METRIC_COSINE && r < n {
        // SAFETY: cosine launches pass n_rows corpus norms; r < n_rows.
        unsafe { *(p.corpus_norms as *const f32).add(r) }
    } else {
        0.0
    };
    cp_async_wait::<0>();
    sync_warp();
    // SAFETY: the barriers were initialised before barrier 1; warp 1 queues every tile once.
    let (acc, acc_q, _) = unsafe {
        bulk_chains::<METRIC, false, false>(
            p,
            &sm,
            slots as u32,
            RingPos::default(),
            false,
            lane as u32,
        )
    };
    // Every tile has landed and been read: the ring is free for the merge's lists.
    // SAFETY: forwarded launcher contract; the ring holds at least 2 tiles = 32 * 32 u64.
    unsafe { bulk_finish::<METRIC>(p, &sm, lists_out, r, acc, acc_q, nc, sm.ring as *mut u64) }
}

/// Where an `sm90a_knn1_*` block with `slots` tiles keeps its ring (at the first 1,024-byte boundary: the
/// swizzle's pattern repeats every 1,024 bytes and the copies place it from their shared address), then the
/// query, the full and empty barriers, the minima and the last-block flag: `knn1_bulk_shared_bytes(dim,
/// slots)` from the dynamic shared memory's base.
#[derive(Clone, Copy)]
pub(crate) struct BulkSmem {
    pub(crate) ring: *mut f32,
    /// The ring's shared address.
    pub(crate) ring_s: u32,
    pub(crate) q_s: *mut f32,
    /// Shared addresses of the full and empty barriers (`slots` each, 8 bytes apart).
    pub(crate) full: u32,
    pub(crate) empty: u32,
    pub(crate) mins: *mut u64,
    pub(crate) last_flag: *mut u32,
}

impl BulkSmem {
    /// The places for a query of `dim` values and a ring of `slots` tiles.
    #[inline(always)]
    pub(crate) fn of(dim: u32, slots: usize) -> BulkSmem {
        const TILE_F: usize = KNN1_BULK_TILE_BYTES as usize / 4;
        let smem = dynamic_shared_f32();
        let base = shared_addr(smem);
        let ring_s = (base + 1023) & !1023;
        let ring = smem.wrapping_add(((ring_s - base) / 4) as usize);
        let q_s = ring.wrapping_add(slots * TILE_F);
        let q_floats = knn1_bulk_query_floats(dim) as usize;
        let full = shared_addr(q_s.wrapping_add(q_floats));
        let mins = q_s.wrapping_add(q_floats + 4 * slots) as *mut u64;
        BulkSmem {
            ring,
            ring_s,
            q_s,
            full,
            empty: full + 8 * slots as u32,
            mins,
            last_flag: mins.wrapping_add(2) as *mut u32,
        }
    }
}

/// Initialise the ring's barriers (one thread, before any other use): each full barrier completes on its
/// tile's bytes (one arrival: the copy's `expect_tx`), each empty one when warp 0's 32 lanes have read the
/// tile; then fetch the map's line ahead of the first copy.
///
/// # Safety
/// `sm` this block's places for `slots` tiles, no barrier in use; `map` the generic address of the
/// parameter's tensor map.
#[inline(always)]
pub(crate) unsafe fn bulk_init_barriers(sm: &BulkSmem, slots: usize, map: u64) {
    let mut s = 0;
    while s < slots {
        // SAFETY: barriers s of this block's shared memory, used by nothing else yet (caller).
        unsafe {
            mbarrier_init::<1>(sm.full + 8 * s as u32);
            mbarrier_init::<32>(sm.empty + 8 * s as u32);
        }
        s += 1;
    }
    // The barriers' initialisation before the async proxy uses them.
    fence_mbarrier_init();
    // SAFETY: map as the caller guarantees.
    unsafe { asm!("prefetch.tensormap [{m}];", m = in(reg64) map, options(nostack)) };
}

/// Queue tile `t` (the block's 32 rows from `row0`, columns `32 t ..`) into slot `at.slot` (warp 1, every
/// lane; lane 0 queues): with `reuse`, first wait until warp 0 has read the slot's last tile (the phase before
/// `at`'s).
///
/// # Safety
/// `sm`'s barriers initialised; the slot free but for a last tile that `reuse` waits for; `t` below the row's
/// tiles; `map` the generic address of the corpus's tensor map.
#[inline(always)]
pub(crate) unsafe fn bulk_issue(
    sm: &BulkSmem,
    map: u64,
    at: RingPos,
    reuse: bool,
    t: usize,
    row0: usize,
    lane: usize,
) {
    let s = at.slot;
    if reuse {
        // SAFETY: barrier s, initialised (caller); the phase in which warp 0 read the slot's last tile.
        unsafe { mbarrier_wait(sm.empty + 8 * s, at.parity ^ 1) };
    }
    if lane == 0 {
        // SAFETY: slot s is free (never used, or read by warp 0: the empty barrier); the box of 32 rows from
        // row0 by 32 columns from 32 t lands inside it (KNN1_BULK_TILE_BYTES, at a 1,024-byte boundary as the
        // swizzle needs), and the full barrier expects exactly its bytes (rows and columns past the corpus
        // count, filled with zeros); map as the caller guarantees.
        unsafe {
            asm!(
                "{{",
                ".reg .b64 st;",
                "mbarrier.arrive.expect_tx.shared::cta.b64 st, [{b}], {bytes};",
                "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [{d}], [{m}, {{{c}, {r}}}], [{b}];",
                "}}",
                b = in(reg32) sm.full + 8 * s,
                bytes = const KNN1_BULK_TILE_BYTES,
                d = in(reg32) sm.ring_s + s * KNN1_BULK_TILE_BYTES,
                m = in(reg64) map,
                c = in(reg32) (t * TILE) as u32,
                r = in(reg32) row0 as u32,
                options(nostack)
            );
        }
    }
}

/// Warp 0's chains over a row's tiles, the first in slot `start` (the next in the slots after it), the query in
/// `sm.q_s`: returns the row's chain, the query's norm chain and the place after the last tile. Frees each
/// tile's slot after reading it when `arrive_all` (a ring that keeps streaming, as the one-query server's), else
/// only the slots that this row's later tiles reuse. `LANDED`: every tile is known to be in the ring already (the
/// server's whole rows, after this warp waited for them once), so no tile's barrier is asked and the loop has no
/// such test (session 23 run P, session 24 run A). `PAIRS`: two tiles a round, the query's norm chain a half-tile
/// behind the row's, so that `ptxas` interleaves the two chains and reuses the halves' registers without copies
/// (it had put a half's norm steps after its row steps, which a lone in-order warp cannot hide); it needs about
/// 40 registers more than one tile a round, which the server has (170) and the launched kernel (85) has not.
/// Block 0's part of a served query went from 5.4 to 3.8 us at 1,000 rows (session 24, run A).
///
/// # Safety
/// Warp 0, every lane; the barriers initialised and every tile of the row queued in order from `start` (with
/// `LANDED`, already seen complete by this warp); the query staged (its copies waited for and the warp
/// synchronised).
#[inline(always)]
pub(crate) unsafe fn bulk_chains<const METRIC: u32, const LANDED: bool, const PAIRS: bool>(
    p: &Knn1Params,
    sm: &BulkSmem,
    slots: u32,
    start: RingPos,
    arrive_all: bool,
    lane: u32,
) -> (f32, f32, RingPos) {
    const TILE_F: u32 = KNN1_BULK_TILE_BYTES / 4;
    let dim = p.dim;
    let n_tiles = dim.div_ceil(TILE as u32);
    let swz = lane % 8;
    // Half `part` (16 columns) of tile t's operands: the query's, and this lane's row of the tile (piece c at
    // c ^ (lane % 8)); the first half waits for the tile's copy. Offsets in u32 (shared memory), so that the
    // lone computing warp spends no 64-bit arithmetic on its place in the ring.
    let load_half = |t: u32, at: RingPos, part: u32| {
        if part == 0 && !LANDED {
            // SAFETY: barrier at.slot, initialised (caller); the phase of tile t's copy.
            unsafe { mbarrier_wait(sm.full + 8 * at.slot, at.parity) };
        }
        let row = sm
            .ring
            .wrapping_add((at.slot * TILE_F + lane * TILE as u32) as usize)
            as *const F4;
        let q = sm.q_s.wrapping_add((t * TILE as u32) as usize) as *const F4;
        let (mut qv, mut cv) = ([F4([0.0; 4]); 4], [F4([0.0; 4]); 4]);
        unroll!(4, U: usize => {
            let c = 4 * part + U as u32;
            // SAFETY: piece c < 8 of the tile's row and of the padded query area (knn1_bulk_query_floats),
            // 16-byte aligned; the copy has landed (the barrier above, or before the first half).
            unsafe {
                qv[U] = *q.add(c as usize);
                cv[U] = *row.add((c ^ swz) as usize);
            }
        });
        (qv, cv)
    };
    // Tile at's values are in registers (its steps used them): its slot may take a later tile.
    let free = |at: RingPos| {
        // SAFETY: barrier at.slot, initialised (caller); 32 arrivals complete it.
        unsafe {
            asm!(
                "{{",
                ".reg .b64 st;",
                "mbarrier.arrive.shared::cta.b64 st, [{e}];",
                "}}",
                e = in(reg32) sm.empty + 8 * at.slot,
                // No compiler memory clobber: the next tile's loads may sink past it into the steps (the
                // arrival's own release semantics order this lane's earlier reads of the slot).
                options(nomem, nostack)
            );
        }
    };
    let norm = METRIC == METRIC_COSINE;
    // A half's steps: the row's chain over its first `pieces` pieces, and the query's norm chain over the
    // first `norm_pieces` of the half before (`qn`), one step of each in turn. The norm chain runs a half
    // behind so that its steps are ready beside the row's (a lone warp issues in order, and the same half's
    // norm steps were scheduled after its row steps, about 24 cycles a tile).
    let steps = |(qv, cv): &([F4; 4], [F4; 4]),
                 pieces: u32,
                 qn: &[F4; 4],
                 norm_pieces: u32,
                 mut acc: f32,
                 mut acc_q: f32| {
        unroll!(4, U: usize => {
            unroll!(4, V: usize => {
                if (U as u32) < pieces {
                    acc = step::<METRIC>(qv[U].0[V], cv[U].0[V], acc);
                }
                if norm && (U as u32) < norm_pieces {
                    acc_q = fma(qn[U].0[V], qn[U].0[V], acc_q);
                }
            });
        });
        (acc, acc_q)
    };
    let (mut acc, mut acc_q) = (0.0f32, 0.0f32);
    // The last tile, its first half `a` loaded: its first cols / 4 pieces (past dim the copy wrote zeros, which
    // are no part of the order), then the norm chain's last half.
    let last = |t: u32, at: RingPos, a: ([F4; 4], [F4; 4]), qn: &[F4; 4], acc: f32, acc_q: f32| {
        let pieces = (dim - t * TILE as u32) / 4;
        let (pa, pb) = (pieces.min(4), pieces.saturating_sub(4));
        let b = load_half(t, at, 1);
        let (acc, acc_q) = steps(&a, pa, qn, 4, acc, acc_q);
        let (acc, acc_q) = steps(&b, pb, &a.0, pa, acc, acc_q);
        let (_, acc_q) = steps(&b, 0, &b.0, pb, acc, acc_q);
        if arrive_all {
            free(at);
        }
        (acc, acc_q)
    };
    // Every tile but the last is whole (32 columns). Each half's loads are issued before the half before it
    // is stepped, so a lone warp's steps wait on shared memory only when a copy has not landed yet. Two tiles
    // a round, so that the halves' registers are reused without copies (the norm chain reads the half before's
    // query values: `dq`, the last half of the round before). The first half's norm steps take zeros:
    // fma(0, 0, +0.0) is +0.0 bit for bit, so the chain is the contract's.
    let mut at = start;
    let mut a = load_half(0, at, 0);
    let mut dq = [F4([0.0; 4]); 4];
    let mut t = 0u32;
    if !PAIRS {
        // One tile a round, the norm chain beside the row's over the same half (fewer registers: the launched
        // kernel's 85).
        while t + 1 < n_tiles {
            let b = load_half(t, at, 1);
            (acc, acc_q) = steps(&a, 4, &a.0, 4, acc, acc_q);
            let next = at.next(slots);
            a = load_half(t + 1, next, 0);
            (acc, acc_q) = steps(&b, 4, &b.0, 4, acc, acc_q);
            if arrive_all || t + slots < n_tiles {
                free(at);
            }
            at = next;
            t += 1;
        }
        let pieces = (dim - t * TILE as u32) / 4;
        let (pa, pb) = (pieces.min(4), pieces.saturating_sub(4));
        let b = load_half(t, at, 1);
        (acc, acc_q) = steps(&a, pa, &a.0, pa, acc, acc_q);
        (acc, acc_q) = steps(&b, pb, &b.0, pb, acc, acc_q);
        if arrive_all {
            free(at);
        }
        return (acc, acc_q, at.next(slots));
    }
    while t + 2 < n_tiles {
        let b = load_half(t, at, 1);
        (acc, acc_q) = steps(&a, 4, &dq, 4, acc, acc_q);
        let nx = at.next(slots);
        let c = load_half(t + 1, nx, 0);
        (acc, acc_q) = steps(&b, 4, &a.0, 4, acc, acc_q);
        if arrive_all || t + slots < n_tiles {
            free(at);
        }
        let d = load_half(t + 1, nx, 1);
        (acc, acc_q) = steps(&c, 4, &b.0, 4, acc, acc_q);
        at = nx.next(slots);
        a = load_half(t + 2, at, 0);
        (acc, acc_q) = steps(&d, 4, &c.0, 4, acc, acc_q);
        if arrive_all || t + 1 + slots < n_tiles {
            free(nx);
        }
        dq = d.0;
        t += 2;
    }
    if t + 2 == n_tiles {
        // Two tiles left: the first whole, then the last. (The loop's first tile and this one are written out
        // twice on purpose: one closure for both made `ptxas` spill 194 instructions in `sm90a_knn1s_cosine`,
        // some inside the loop.)
        let b = load_half(t, at, 1);
        (acc, acc_q) = steps(&a, 4, &dq, 4, acc, acc_q);
        let nx = at.next(slots);
        let c = load_half(t + 1, nx, 0);
        (acc, acc_q) = steps(&b, 4, &a.0, 4, acc, acc_q);
        if arrive_all || t + slots < n_tiles {
            free(at);
        }
        (acc, acc_q) = last(t + 1, nx, c, &b.0, acc, acc_q);
        at = nx;
    } else {
        (acc, acc_q) = last(t, at, a, &dq, acc, acc_q);
    }
    (acc, acc_q, at.next(slots))
}

/// Warp 0's end of an `sm90a_knn1_*` block: with [`LISTS_OUT_BLOCKS`] the block's list for the host, else the
/// selection and merges (`select_and_merge`, the lists staged in `keys_s`). Returns as [`knn1_bulk`].
///
/// # Safety
/// Warp 0, every lane, after [`bulk_chains`]; `keys_s` 32 * 32 u64 of this block's shared memory that no copy
/// writes; the rest as [`knn1_bulk`].
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(crate) unsafe fn bulk_finish<const METRIC: u32>(
    p: &Knn1Params,
    sm: &BulkSmem,
    lists_out: u32,
    r: usize,
    acc: f32,
    acc_q: f32,
    nc: f32,
    keys_s: *mut u64,
) -> bool {
    let lane = thread_x() as usize % 32;
    let row0 = block_x() as usize * 32;
    if lists_out == LISTS_OUT_BLOCKS {
        // The block's list for the host: its k smallest keys ascending, each one's score beside them (read
        // from the lane of its row), [KNN1_EMPTY_KEY] past the block's rows. No fence, no ticket: the host
        // waits for every word of every list.
        let (key, score) = row_key::<METRIC>(p, r, acc, acc_q, nc);
        let sorted = warp_sort_u64(key, lane as u32);
        let from = (sorted as u32).wrapping_sub(row0 as u32) % 32;
        let bits = shfl_idx_u64(u64::from(score.to_bits()), from);
        let k = p.k as usize;
        if lane < k {
            let out = (p.out as *mut u64).wrapping_add(2 * k * block_x() as usize);
            let (key, bits) = if sorted == u64::MAX {
                (KNN1_EMPTY_KEY, 0)
            } else {
                (sorted, bits)
            };
            // SAFETY: out holds 2 k words per block (LISTS_OUT_BLOCKS: the launcher); lane < k.
            unsafe {
                *out.add(lane) = key;
                *out.add(k + lane) = bits;
            }
        }
        return true;
    }
    // SAFETY: forwarded contract.
    unsafe {
        select_and_merge::<METRIC, true>(
            p,
            r,
            acc,
            acc_q,
            nc,
            keys_s,
            sm.mins,
            sm.last_flag,
            1,
            lists_out == LISTS_OUT_GROUPS,
        )
    }
}

/// A tile's place in an `sm90a_knn1_*` ring: its slot, and the parity of the phase in which its slot's
/// barriers complete for it (flipping each time the ring wraps). Stepped, not divided: a run-time division
/// per tile cost the lone computing warp about 40 % of its samples (session 17, run B).
#[derive(Clone, Copy, Default)]
pub(crate) struct RingPos {
    pub(crate) slot: u32,
    pub(crate) parity: u32,
}

impl RingPos {
    /// The next tile's place in a ring of `slots`.
    #[inline(always)]
    pub(crate) fn next(self, slots: u32) -> RingPos {
        if self.slot + 1 == slots {
            RingPos {
                slot: 0,
                parity: self.parity ^ 1,
            }
        } else {
            RingPos {
                slot: self.slot + 1,
                parity: self.parity,
            }
        }
    }
}

/// Piece `$i` (16 bytes) of the query inside the parameter of entry point `$name`, whose parameter struct is
/// `$params`: `ld.param` at the parameter's own symbol. Rust passes the struct by value as an array of
/// integers, so indexing its `query` at a run-time offset would first copy all of it to local memory; the
/// address of a kernel parameter, moved into a register, is in the `.param` space (PTX).
///
/// With `generic`, through the parameter's generic address instead (`cvta.param`, PTX ISA 7.7, so the sm_90a
/// image only): `ptxas` emits a generic `LD.E.128` instead of `ld.param`'s indexed `LDC`, so a warp's 32 pieces
/// are one coalesced request through the L1 instead of constant-cache accesses whose misses are served one line
/// after another. On an H200 (session 22, run A) the kernel took 0.5-1.2 us less at 10,000 rows x 768 and one
/// query's end-to-end call 0.3-0.7 us less from 1,000 to 10,000 rows.
macro_rules! param_piece {
    ($name:ident, $params:ty, $i:expr) => {
        param_piece!(@load $name, $params, $i, "ld.param.v4.f32")
    };
    ($name:ident, $params:ty, $i:expr, generic) => {
        param_piece!(@load $name, $params, $i, "ld.v4.f32", "cvta.param.u64 a, a;")
    };
    (@load $name:ident, $params:ty, $i:expr, $load:literal $(, $to_generic:literal)?) => {{
        let (x, y, z, w): (f32, f32, f32, f32);
        // SAFETY: bytes `16 i ..+ 16` of the parameter's query, inside it for i < Q / 4 (the body reads
        // pieces below dim / 4, dim <= Q: the launcher); the parameter and its query are 16-byte aligned.
        unsafe {
            asm!(
                "{{",
                ".reg .b64 a;",
                concat!("mov.b64 a, ", stringify!($name), "_param_0;"),
                $($to_generic,)?
                "add.s64 a, a, {off};",
                concat!($load, " {{{x}, {y}, {z}, {w}}}, [a+{base}];"),
                "}}",
                off = in(reg64) (16 * $i) as u64,
                base = const core::mem::offset_of!($params, query),
                x = out(reg32) x,
                y = out(reg32) y,
                z = out(reg32) z,
                w = out(reg32) w,
                options(pure, readonly, nostack)
            );
        }
        F4([x, y, z, w])
    }};
}

/// The `sm80_knn1q_*` entry points, which carry the query in their parameters ([`param_piece`]).
macro_rules! knn1q_kernels {
    ($q:ident; $($name:ident => $body:ident::<$metric:ident>;)*) => {$(
        /// See the generic body named in the macro call; its metric is fixed per entry point.
        ///
        /// # Safety
        /// Launched only through its typed launcher in `recall-gpu-kernels`.
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $name(p: Knn1QueryParams<$q>) {
            let piece = |i: usize| param_piece!($name, Knn1QueryParams<$q>, i);
            // SAFETY: forwarded launcher contract (the launcher sets `p.base.query` to 0).
            unsafe { $body::<$metric>(&p.base, piece) };
        }
    )*};
}

/// The entry points whose query is in memory (`p.query`): no query in the parameters, so that a small launch
/// does not carry 4 KiB it does not use (about a microsecond more a launch on an H100, session 16).
macro_rules! knn1_kernels {
    ($($name:ident => $body:ident::<$metric:ident>;)*) => {$(
        /// See the generic body named in the macro call; its metric is fixed per entry point.
        ///
        /// # Safety
        /// Launched only through its typed launcher in `recall-gpu-kernels` (`p.query` non-zero).
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $name(p: Knn1Params) {
            // SAFETY: forwarded launcher contract; the query is in memory, so the pieces are never asked.
            unsafe { $body::<$metric>(&p, |_| F4([0.0; 4])) };
        }
    )*};
}

/// The `sm90a_knn1_*` (`Q = 0`, the query in memory) and `sm90a_knn1q_*` (`Q` floats of query in the
/// parameters) entry points.
macro_rules! knn1_bulk_kernels {
    ($q:expr; $($name:ident => $metric:ident;)*) => {$(
        /// See [`knn1_bulk`]; its metric is fixed per entry point.
        ///
        /// # Safety
        /// Launched only through its typed launcher in `recall-gpu-kernels`.
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $name(p: Knn1BulkParams<{ $q }>) {
            // The map: the first field of the parameter, which the build declares 64-byte aligned.
            let map = param_address!($name);
            let piece = |i: usize| {
                if $q == 0 {
                    F4([0.0; 4])
                } else {
                    param_piece!($name, Knn1BulkParams<{ $q }>, i, generic)
                }
            };
            // SAFETY: forwarded launcher contract (a query in the parameters has `p.base.query` 0, one in
            // memory a non-zero address, so `Q = 0` never asks for a piece).
            unsafe { knn1_bulk::<$metric>(&p.base, p.slots as usize, p.lists_out, map, piece) };
        }
    )*};
}

knn1_kernels! {
    sm80_knn1_dot => knn1::<METRIC_DOT>;
    sm80_knn1_cosine => knn1::<METRIC_COSINE>;
    sm80_knn1_l2 => knn1::<METRIC_L2>;
}

knn1q_kernels! {
    KNN1_PARAM_QUERY;
    sm80_knn1q_dot => knn1::<METRIC_DOT>;
    sm80_knn1q_cosine => knn1::<METRIC_COSINE>;
    sm80_knn1q_l2 => knn1::<METRIC_L2>;
}

knn1_bulk_kernels! {
    0;
    sm90a_knn1_dot => METRIC_DOT;
    sm90a_knn1_cosine => METRIC_COSINE;
    sm90a_knn1_l2 => METRIC_L2;
}

knn1_bulk_kernels! {
    KNN1_BULK_PARAM_QUERY;
    sm90a_knn1q_dot => METRIC_DOT;
    sm90a_knn1q_cosine => METRIC_COSINE;
    sm90a_knn1q_l2 => METRIC_L2;
}
