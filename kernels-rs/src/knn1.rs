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

use crate::dense::{chain_tile, chain32, finish, load32};
use crate::util::{
    F4, block_dim_x, block_min, block_x, cp_async_commit, cp_async_wait, cp_async16,
    dynamic_shared_f32, fma, grid_dim_x, last_to_arrive, mbarrier_wait, named_barrier, score_key,
    shared_addr, sqrt, stage_query, stage_query_params, sync_threads, sync_warp, thread_x,
    warp_sort_u64,
};
use core::arch::asm;
use recall_kernel_shared::{
    KNN1_BULK_CHUNKS, KNN1_BULK_PARAM_QUERY, KNN1_PARAM_QUERY, KNN1_ROW_STRIDE, KNN1_STAGES,
    KNN1_TILE, Knn1Params, Knn1QueryParams, METRIC_COSINE, METRIC_DOT, METRIC_L2,
    knn1_bulk_chunk_cols, knn1_bulk_row_stride, knn1_bulk_rows_area,
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
#[inline(always)]
unsafe fn knn1<const METRIC: u32>(p: &Knn1Params, query_piece: impl Fn(usize) -> F4) {
    let smem = dynamic_shared_f32();
    let t = thread_x() as usize;
    let (lane, warp) = (t % 32, t / 32);
    let warps = p.warps as usize;
    let (n, dim, k) = (p.n_rows as usize, p.dim as usize, p.k as usize);
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
        select_and_merge::<METRIC, false>(p, r, acc, acc_q, nc, keys_s, mins, last_flag, warps)
    };
}

/// Row `r`'s score from its chains (`acc`, the query's norm chain `acc_q`, the row's norm `nc`), this block's
/// `k` smallest keys, and the two levels of "the last one merges" (see the module comment). Every thread of
/// the block calls it. `WIDE` as for [`merge`].
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
) {
    let t = thread_x() as usize;
    let (n, k) = (p.n_rows as usize, p.k as usize);
    let higher_first = p.higher_first != 0;
    let mut mine = u64::MAX;
    if r < n {
        let nq = if METRIC == METRIC_COSINE {
            sqrt(acc_q)
        } else {
            0.0
        };
        let score = finish::<METRIC>(acc, nq, nc);
        // SAFETY: r < n_rows: inside the scores.
        unsafe { *(p.scores as *mut f32).add(r) = score };
        mine = (u64::from(score_key(score, higher_first)) << 32) | r as u64;
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
    if !unsafe { last_to_arrive(tickets.wrapping_add(1 + g), in_group, last_flag) } {
        return;
    }
    let one_group = n_groups == 1;
    // Every copy into the ring has landed (the ones still counted are empty groups): it holds the lists now.
    cp_async_wait::<0>();
    // SAFETY: this group's blocks wrote their k keys each (one ascending list per block, in_group <= the
    // block's threads) before their tickets; the destination is the group's k keys (or, for one group, out's
    // 2k values); the rings (warps * RING floats) hold in_group * k <= 32 * warps * 32 u64.
    unsafe {
        merge::<WIDE>(
            partial.wrapping_add(g * group_blocks * k),
            in_group,
            k,
            if one_group {
                p.out as *mut u64
            } else {
                group_keys.wrapping_add(g * k)
            },
            if one_group { p.scores } else { 0 },
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
    // SAFETY: as above, for the groups' counter.
    if one_group || !unsafe { last_to_arrive(tickets, n_groups, last_flag) } {
        return;
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
    sync_threads();
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
            // SAFETY: round < k: inside dst.
            unsafe { *dst.add(round) = best };
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
/// tensor memory accelerator. One computing warp per block (and its helpers, below), 32 rows, whole rows in
/// shared memory: one lane queues each row's [`KNN1_BULK_CHUNKS`] column chunks as bulk copies
/// (`cp.async.bulk`, one instruction each), chunk `c` of every row completing on barrier `c`; the chains run
/// over chunk `c` as soon as its barrier completes (loads of the next 32 columns ahead of the current ones'
/// FMAs, [`chain_run`]), and the block's keys are sorted across the warp (`warp_sort_u64`) instead of `k`
/// rounds of minima.
///
/// `knn1` spends most of a small launch issuing copies (eight `cp.async` with their addresses per lane and
/// tile) and waiting on them one tile at a time: a lone warp ran at about three cycles an instruction (ncu,
/// docs/results/). Here the copies are `KNN1_BULK_CHUNKS * 32` instructions of one lane, and the loop is the
/// loads and FMAs of the chains. Copying the rows with `cp.async` instead (16 bytes a lane, one group per
/// chunk) was slower: 27 against 21 us at 1,000 rows, its address loop outweighing the copies (session 15).
///
/// A block may have helper warps (`KNN1_BULK_WARPS`): warp 1 then queues the rows' copies while the others
/// stage the query (from the parameters, each line a constant-cache miss that a lone warp waits for one after
/// another), and the helpers leave after one barrier; warp 0 alone runs the chains, the selection and the
/// merges (barriers wait only for threads that have not exited).
///
/// # Safety
/// Grid `ceil(n_rows / 32)`, 32 to 256 threads (warp 0 and up to seven helpers), `knn1_bulk_shared_bytes(dim)`
/// bytes of dynamic shared memory; sm_90; the rest as `knn1` (`warps == 1`, `group_blocks == 32`).
#[inline(always)]
unsafe fn knn1_bulk<const METRIC: u32>(p: &Knn1Params, query_piece: impl Fn(usize) -> F4) {
    const CHUNKS: usize = KNN1_BULK_CHUNKS as usize;
    let smem = dynamic_shared_f32();
    let (lane, warp) = (thread_x() as usize % 32, thread_x() as usize / 32);
    let block_warps = block_dim_x() as usize / 32;
    // The warp that queues the rows' copies, and the warps that stage a query from the parameters (their
    // rank and number): warp 1 and the others when there are helpers, else warp 0 for both.
    let issuer = usize::from(block_warps > 1);
    let (stage_rank, stagers) = if block_warps > 1 {
        (warp.saturating_sub(1), block_warps - 1)
    } else {
        (0, 1)
    };
    let (n, dim) = (p.n_rows as usize, p.dim as usize);
    let q_s = smem;
    let rs = knn1_bulk_row_stride(p.dim) as usize;
    let rows_s = smem.wrapping_add(dim.div_ceil(4) * 4);
    let area = knn1_bulk_rows_area(p.dim) as usize;
    let bars = shared_addr(rows_s.wrapping_add(area));
    let mins = rows_s.wrapping_add(area + 2 * CHUNKS) as *mut u64;
    let last_flag = mins.wrapping_add(2) as *mut u32;
    let row0 = block_x() as usize * 32;
    let rows = 32.min(n - row0);
    let cw = knn1_bulk_chunk_cols(p.dim) as usize;
    // The query's pieces from memory first (one round trip over the bus, the longest wait), waited for before
    // the first chunk; from the parameters, after the rows' copies are queued (below).
    // Warp 0 issues them: it waits for its own copies.
    if p.query != 0 && warp == 0 {
        // SAFETY: the query area holds dim floats; p.query holds dim (a multiple of 4) floats, 16-byte
        // aligned.
        unsafe { stage_query(q_s, p.query, dim, lane, 32) };
    }
    cp_async_commit();
    if warp == issuer && lane == 0 {
        let mut c = 0;
        while c < CHUNKS {
            let bytes = (dim.min((c + 1) * cw).saturating_sub(c * cw) * 4 * rows) as u32;
            // SAFETY: barrier c of this block's shared memory, used by nothing else; lane 0 announces every
            // byte of the chunk's copies (an empty chunk completes at once), which it queues below.
            unsafe {
                asm!(
                    "mbarrier.init.shared::cta.b64 [{b}], 1;",
                    "fence.mbarrier_init.release.cluster;",
                    "{{",
                    ".reg .b64 st;",
                    "mbarrier.arrive.expect_tx.shared::cta.b64 st, [{b}], {bytes};",
                    "}}",
                    b = in(reg32) bars + 8 * c as u32,
                    bytes = in(reg32) bytes,
                    options(nostack)
                );
            }
            c += 1;
        }
        // Lane 0 queues every copy, chunk by chunk (chunk 0 of every row first). Its operands are the same
        // in every lane (block index, parameters, loop counters), so they stay in uniform registers, with no
        // lane-by-lane loop (`R2UR` per lane) around each copy as when every lane queued its own row's. What
        // the copies cost is their number (~65 cycles each): hence one chunk ([`KNN1_BULK_CHUNKS`]).
        let src0 = p.corpus + (row0 * dim * 4) as u64;
        let dst0 = shared_addr(rows_s);
        let mut c = 0;
        while c < CHUNKS {
            let (c0, c1) = (c * cw, dim.min((c + 1) * cw));
            if c1 > c0 {
                let mut i = 0;
                while i < rows {
                    // SAFETY: row row0 + i < n_rows: columns c0..c1 of it are inside the corpus (16-byte
                    // aligned, a multiple of 16 bytes: dim, c0 and c1 are multiples of 4) and land inside row
                    // i of shared memory (16-byte aligned: the query area and the stride are multiples of 4
                    // floats); barrier c was initialised above by this thread.
                    unsafe {
                        asm!(
                            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [{d}], [{s}], {n}, [{b}];",
                            d = in(reg32) dst0 + ((i * rs + c0) * 4) as u32,
                            s = in(reg64) src0 + ((i * dim + c0) * 4) as u64,
                            n = in(reg32) ((c1 - c0) * 4) as u32,
                            b = in(reg32) bars + 8 * c as u32,
                            options(nostack)
                        );
                    }
                    i += 1;
                }
            }
            c += 1;
        }
    }
    if p.query == 0 && (warp != issuer || block_warps == 1) {
        // The parameter's lines, spread over the staging warps (beside the issuer's copies, or, for a lone
        // warp, once the rows' copies are queued): their constant-cache misses are served while the rows
        // arrive.
        // SAFETY: the query area holds dim floats; the entry point carries the query (launcher).
        unsafe { stage_query_params(q_s, query_piece, dim, 32 * stage_rank + lane, 32 * stagers) };
    }
    if block_warps > 1 {
        // The barriers' initialisation and the query's stores, for warp 0; then the helpers leave.
        named_barrier(1, 32 * block_warps as u32);
        if warp != 0 {
            return;
        }
    }
    sync_warp();
    let r = row0 + lane;
    let nc = if METRIC == METRIC_COSINE && r < n {
        // SAFETY: cosine launches pass n_rows corpus norms; r < n_rows.
        unsafe { *(p.corpus_norms as *const f32).add(r) }
    } else {
        0.0
    };
    cp_async_wait::<0>();
    sync_warp();
    let (mut acc, mut acc_q) = (0.0f32, 0.0f32);
    let row = rows_s.wrapping_add(lane * rs);
    let mut c = 0;
    while c < CHUNKS {
        // SAFETY: barrier c of this block, initialised above; its first phase.
        unsafe { mbarrier_wait(bars + 8 * c as u32, 0) };
        // SAFETY: both operands hold the chunk's columns (the query staged; the row's chunk landed, or, for a
        // lane past the rows, shared memory it only computes an unused chain from), 16-byte aligned (the
        // chunk starts at a multiple of 4).
        (acc, acc_q) =
            unsafe { chain_run::<METRIC>(q_s, row, c * cw, dim.min((c + 1) * cw), acc, acc_q) };
        c += 1;
    }
    // Every chunk has landed: the rows' area is free for the merge's lists.
    // SAFETY: forwarded launcher contract; the rows' area holds at least 32 * 32 u64.
    unsafe {
        select_and_merge::<METRIC, true>(
            p,
            r,
            acc,
            acc_q,
            nc,
            rows_s as *mut u64,
            mins,
            last_flag,
            1,
        )
    };
}

/// The chains over columns `col0 .. col1` (multiples of 4) of the staged query `q` and row `row`: the steps of
/// `chain_tile`, 32 columns at a time, with the next 32 columns' operands loaded before the current 32's
/// steps run, so that a lone warp's chain waits on shared-memory loads once per chunk rather than once per
/// 32 columns. The same steps in the same order: the same bits.
///
/// # Safety
/// `q` and `row` hold readable f32 over `col0 .. col1`, 16-byte aligned at `col0`.
#[inline(always)]
unsafe fn chain_run<const METRIC: u32>(
    q: *const f32,
    row: *const f32,
    col0: usize,
    col1: usize,
    mut acc: f32,
    mut acc_q: f32,
) -> (f32, f32) {
    let norm = METRIC == METRIC_COSINE;
    let at = |p: *const f32, col: usize| p.wrapping_add(col) as *const F4;
    let mut col = col0;
    if col + TILE <= col1 {
        // SAFETY: columns col .. col + 32 are inside both operands (the caller's range).
        let (mut qv, mut cv) = unsafe { load32(at(q, col), at(row, col)) };
        while col + 2 * TILE <= col1 {
            // SAFETY: as above, for the next 32 columns.
            let (qn, cn) = unsafe { load32(at(q, col + TILE), at(row, col + TILE)) };
            (acc, acc_q) = chain32::<METRIC>(&qv, &cv, acc, acc_q, norm);
            (qv, cv) = (qn, cn);
            col += TILE;
        }
        (acc, acc_q) = chain32::<METRIC>(&qv, &cv, acc, acc_q, norm);
        col += TILE;
    }
    if col < col1 {
        // SAFETY: the last columns (fewer than 32) of the caller's range.
        (acc, acc_q) =
            unsafe { chain_tile::<METRIC>(at(q, col), at(row, col), col1 - col, acc, acc_q, norm) };
    }
    (acc, acc_q)
}

/// The entry points that carry the query in their parameters (`*_knn1q_*`), each reading the query's pieces
/// from its own parameter: Rust passes the parameter struct by value as an array of integers, so indexing
/// its `query` at a run-time offset would first copy all of it to local memory; `ld.param` at the
/// parameter's address plus the offset reads the constant bank directly (PTX: the address of a kernel
/// parameter, moved into a register, is in the `.param` space).
macro_rules! knn1q_kernels {
    ($q:ident; $($name:ident => $body:ident::<$metric:ident>;)*) => {$(
        /// See the generic body named in the macro call; its metric is fixed per entry point.
        ///
        /// # Safety
        /// Launched only through its typed launcher in `recall-gpu-kernels`.
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $name(p: Knn1QueryParams<$q>) {
            let piece = |i: usize| {
                let (x, y, z, w): (f32, f32, f32, f32);
                // SAFETY: bytes `16 i ..+ 16` of the parameter's query, inside it for i < Q / 4 (the body
                // reads pieces below dim / 4, dim <= Q: the launcher); the parameter and its query are
                // 16-byte aligned.
                unsafe {
                    asm!(
                        "{{",
                        ".reg .b64 a;",
                        concat!("mov.b64 a, ", stringify!($name), "_param_0;"),
                        "add.s64 a, a, {off};",
                        "ld.param.v4.f32 {{{x}, {y}, {z}, {w}}}, [a+{base}];",
                        "}}",
                        off = in(reg64) (16 * i) as u64,
                        base = const core::mem::offset_of!(Knn1QueryParams<$q>, query),
                        x = out(reg32) x,
                        y = out(reg32) y,
                        z = out(reg32) z,
                        w = out(reg32) w,
                        options(pure, readonly, nostack)
                    );
                }
                F4([x, y, z, w])
            };
            // SAFETY: forwarded launcher contract (the launcher sets `p.base.query` to 0).
            unsafe { $body::<$metric>(&p.base, piece) }
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
            unsafe { $body::<$metric>(&p, |_| F4([0.0; 4])) }
        }
    )*};
}

knn1_kernels! {
    sm80_knn1_dot => knn1::<METRIC_DOT>;
    sm80_knn1_cosine => knn1::<METRIC_COSINE>;
    sm80_knn1_l2 => knn1::<METRIC_L2>;
    sm90a_knn1_dot => knn1_bulk::<METRIC_DOT>;
    sm90a_knn1_cosine => knn1_bulk::<METRIC_COSINE>;
    sm90a_knn1_l2 => knn1_bulk::<METRIC_L2>;
}

knn1q_kernels! {
    KNN1_PARAM_QUERY;
    sm80_knn1q_dot => knn1::<METRIC_DOT>;
    sm80_knn1q_cosine => knn1::<METRIC_COSINE>;
    sm80_knn1q_l2 => knn1::<METRIC_L2>;
}

knn1q_kernels! {
    KNN1_BULK_PARAM_QUERY;
    sm90a_knn1q_dot => knn1_bulk::<METRIC_DOT>;
    sm90a_knn1q_cosine => knn1_bulk::<METRIC_COSINE>;
    sm90a_knn1q_l2 => knn1_bulk::<METRIC_L2>;
}
