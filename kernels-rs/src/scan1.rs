//! One query against many rows: a persistent scan with the top-k folded in (`sm80_scan1_*`).
//!
//! At a million rows the single query is a stream of the corpus through the SMs; what counts is bytes in
//! flight and no idle phases. The grid is about one block per SM and stays resident: global warp `gw` of `W`
//! owns the groups of 32 rows `gw, gw + W, ..`, and its ring of `STAGES` shared tiles ([`SCAN1_TILE`] columns,
//! 16-byte `cp.async`, 4 rows of 128 bytes per instruction) runs on from one group into the next, so the
//! loads of the next group are in flight while the last tiles of this one are summed, and there is no block
//! start-up, barrier or selection phase between groups. Only warp barriers order a warp's ring (it is
//! private to the warp).
//!
//! Lane `l` runs row `32 g + l`'s chain over each tile exactly as `scan` and `knn1` do (`chain_tile`:
//! `docs/numerics.md`, one FMA chain per pair, `k` ascending), so the scores are the same bits. For cosine
//! the query's norm chain runs beside it (the steps of `row_norms`, so the same bits as the separate kernel).
//!
//! Top-k (`k >= 1`): each warp keeps its `k` smallest pair keys (`score_key << 32 | row`, unique) in
//! registers, lane `i` holding the `i`-th; after a group, the lanes whose key is below the warp's `k`-th are
//! inserted one by one (ballot, broadcast, a shift by one lane). After the first groups almost no row
//! enters, so the selection costs a compare and a ballot per group. A row that enters writes its score, so
//! the final `k` rows' scores are in `scores`. The block then merges its warps' lists, and the last block to
//! take a ticket merges the blocks' lists and writes the answer (keys, then scores), as `knn1` does.
//!
//! `cp.async` needs sm_80: `cargo xtask build-kernels` leaves `sm80_*` kernels out of older images.

use crate::dense::{chain_tile, finish};
use crate::util::{
    F4, ballot, block_x, cp_async_commit, cp_async_wait, cp_async16, cp_async16_l2_256,
    dynamic_shared_f32, grid_dim_x, last_to_arrive, prefetch_l2, score_key, shared_addr,
    shfl_idx_u64, shfl_up1_u64, sqrt, stage_query, sync_threads, sync_warp, thread_x,
};
use recall_kernel_shared::{
    METRIC_COSINE, METRIC_DOT, METRIC_L2, SCAN1_ROW_STRIDE, SCAN1_TILE, Scan1Params,
};

const TILE: usize = SCAN1_TILE as usize;
const RS: usize = SCAN1_ROW_STRIDE as usize;

/// Offer each lane's `cand` to the warp's sorted list (lane `i` holds the `i`-th smallest of `k`; `u64::MAX`
/// for none): every candidate below the current `k`-th is inserted, in lane order. Returns the lane's new
/// entry. Keys are unique (a row id in the low half) or `u64::MAX`. Warp-uniform: every lane calls it.
#[inline(always)]
fn warp_offer(list: u64, cand: u64, k: u32) -> u64 {
    let lane = thread_x() % 32;
    let mut list = list;
    let mut thr = shfl_idx_u64(list, k - 1);
    let mut mask = ballot(cand < thr);
    while mask != 0 {
        let j = mask.trailing_zeros();
        mask &= mask - 1;
        let x = shfl_idx_u64(cand, j);
        if x < thr {
            let prev = shfl_up1_u64(list);
            if list > x {
                list = if lane == 0 || prev < x { x } else { prev };
            }
            thr = shfl_idx_u64(list, k - 1);
        }
    }
    list
}

/// Merge `count` keys at `src` (any order; read volatile: written by other blocks) into the warp's list, 32 x
/// 8 loads in flight at a time; this warp takes keys `first + 32 * (8 i + u) + lane`, stepping by `32 * step`
/// after each 32.
///
/// # Safety
/// `src` holds `count` u64, published before the caller's acquire.
#[inline(always)]
unsafe fn warp_merge_global(
    mut list: u64,
    src: *const u64,
    count: usize,
    k: u32,
    first: usize,
    step: usize,
) -> u64 {
    let lane = (thread_x() % 32) as usize;
    let mut base = first * 32;
    while base < count {
        let mut v = [u64::MAX; 8];
        unroll!(8, U: usize => {
            let at = base + U * 32 * step + lane;
            if at < count {
                // SAFETY: at < count.
                v[U] = unsafe { src.add(at).read_volatile() };
            }
        });
        unroll!(8, U: usize => {
            list = warp_offer(list, v[U], k);
        });
        base += 8 * 32 * step;
    }
    list
}

/// Merge the block's warps' lists (lane `i < k` of warp `w` wrote its entry to `lists[w * k + i]` before
/// the barrier this follows) with warp 0: returns warp 0's merged list (other warps: undefined).
///
/// # Safety
/// `lists` holds `warps * k` u64 of shared memory, written before a block barrier.
#[inline(always)]
unsafe fn block_merge(lists: *const u64, warps: usize, k: u32) -> u64 {
    let lane = (thread_x() % 32) as usize;
    let count = warps * k as usize;
    let mut list = u64::MAX;
    let mut base = 0;
    while base < count {
        let at = base + lane;
        // SAFETY: at < count: inside the lists.
        let cand = if at < count {
            unsafe { *lists.add(at) }
        } else {
            u64::MAX
        };
        list = warp_offer(list, cand, k);
        base += 32;
    }
    list
}

/// See the module comment.
///
/// # Safety
/// Grid of any size (about one block per SM), `32 * warps` threads, `scan1_shared_bytes(dim, warps, STAGES)`
/// bytes of dynamic shared memory; pointers and sizes as `Scan1Params` documents; `k <= min(32, n_rows)`, the
/// ticket zero.
#[inline(always)]
unsafe fn scan1<const METRIC: u32, const STAGES: usize, const L2_256: bool>(p: &Scan1Params) {
    let smem = dynamic_shared_f32();
    let t = thread_x() as usize;
    let (lane, warp) = (t % 32, t / 32);
    let warps = p.warps as usize;
    let (n, dim, k) = (p.n_rows as usize, p.dim as usize, p.k);
    let ring_len = STAGES * 32 * RS;
    let qlen = dim.div_ceil(4) * 4;
    let q_s = smem;
    let ring = smem.wrapping_add(qlen + warp * ring_len);
    let lists = smem.wrapping_add(qlen + warps * ring_len) as *mut u64;
    let last_flag = lists.wrapping_add(32 * warps) as *mut u32;
    // The query joins the first copy group (its pieces spread over the block's threads).
    // SAFETY: the query area at q_s holds dim floats (launcher); p.query holds dim (a multiple of 4) floats,
    // 16-byte aligned.
    unsafe { stage_query(q_s, p.query, dim, t, 32 * warps) };
    let total_warps = grid_dim_x() as usize * warps;
    let gw = block_x() as usize * warps + warp;
    let n_groups = n.div_ceil(32);
    let my_groups = if gw < n_groups {
        (n_groups - gw).div_ceil(total_warps)
    } else {
        0
    };
    let n_tiles = dim.div_ceil(TILE);
    let my_tiles = my_groups * n_tiles;
    // Lane `l` copies piece `l % 8` (16 bytes) of rows `l / 8 + 4 i`, i < 8, of every tile. The issue side
    // walks (group, tile) ahead of the summing side by STAGES - 1 tiles; rows past the end and columns past
    // `dim` are zero-filled without a read. Always commits one group (empty past the last tile), so the waits
    // count groups uniformly.
    let piece = lane % 8;
    let group_step_rows = 32 * total_warps;
    let src_step = (4 * dim * 4) as u64;
    let dst0 = shared_addr(ring.wrapping_add((lane / 8) * RS + piece * 4));
    const DST_STEP: u32 = (4 * RS * 4) as u32;
    let corpus = p.corpus;
    // Issue state: flat tile index, tile within the group, the lane's first row of the group.
    let mut is_j = 0usize;
    let mut is_tile = 0usize;
    let mut is_row = 32 * gw + lane / 8;
    let mut issue = || {
        if is_j < my_tiles {
            let col_ok = is_tile * TILE + piece * 4 < dim;
            let dst = dst0 + ((is_j % STAGES) * 32 * RS * 4) as u32;
            let src = corpus + ((is_row * dim + is_tile * TILE + piece * 4) * 4) as u64;
            unroll!(8, I: usize => {
                let ok = col_ok && is_row + 4 * I < n;
                // SAFETY: the destination is row `lane / 8 + 4 I` of this warp's stage, 16-byte aligned (RS and
                // the query area are multiples of 4 floats); when ok, that row is < n and col + 4 <= dim (dim
                // is a multiple of 4), so the 16 source bytes are inside the corpus, 16-byte aligned.
                unsafe {
                    let (d, s, b) = (
                        dst + I as u32 * DST_STEP,
                        if ok { src + I as u64 * src_step } else { corpus },
                        if ok { 16 } else { 0 },
                    );
                    if L2_256 {
                        cp_async16_l2_256(d, s, b)
                    } else {
                        cp_async16(d, s, b)
                    }
                };
            });
            is_tile += 1;
            if is_tile == n_tiles {
                is_tile = 0;
                is_row += group_step_rows;
            }
        }
        is_j += 1;
        cp_async_commit();
    };
    // With `l2_ahead > 0`, lane `l` also asks the L2 for row `32 g + l`'s 128 bytes of the tile `l2_ahead` tiles
    // past the one being issued (one prefetch per warp and tile), so that DRAM works further ahead than the ring
    // holds. Its cursor runs like the issue side's.
    let ahead = p.l2_ahead as usize;
    let mut pf_j = ahead;
    let mut pf_tile = ahead % n_tiles.max(1);
    let mut pf_row = 32 * (gw + (ahead / n_tiles.max(1)) * total_warps) + lane;
    let mut prefetch = || {
        if ahead > 0 {
            if pf_j < my_tiles && pf_row < n {
                // SAFETY: row pf_row < n_rows and column pf_tile * TILE < dim: inside the corpus.
                unsafe { prefetch_l2(corpus + ((pf_row * dim + pf_tile * TILE) * 4) as u64) };
            }
            pf_j += 1;
            pf_tile += 1;
            if pf_tile == n_tiles {
                pf_tile = 0;
                pf_row += group_step_rows;
            }
        }
    };
    let mut s = 0;
    while s + 1 < STAGES {
        prefetch();
        issue();
        s += 1;
    }
    // The first tile (and the query, in its group) complete; the barrier shows the query to every warp.
    // Block-uniform: every warp reaches it once, whatever its share of rows.
    if STAGES == 8 {
        cp_async_wait::<6>();
    } else {
        cp_async_wait::<2>();
    }
    sync_threads();
    let higher_first = p.higher_first != 0;
    let norms = p.corpus_norms as *const f32;
    let scores = p.scores as *mut f32;
    let given_nq = if METRIC == METRIC_COSINE && p.query_norm != 0 {
        // SAFETY: a non-zero query_norm points to one f32.
        Some(unsafe { *(p.query_norm as *const f32) })
    } else {
        None
    };
    // The summing side: this lane's row of the current group, and its norm loaded a group ahead of use.
    let mut r = 32 * gw + lane;
    let norm_of = |r: usize| {
        if METRIC == METRIC_COSINE && r < n {
            // SAFETY: cosine launches pass n_rows corpus norms; r < n_rows.
            unsafe { *norms.add(r) }
        } else {
            0.0
        }
    };
    let mut nc = norm_of(r);
    let mut list = u64::MAX;
    let mut acc = 0.0f32;
    let mut acc_q = 0.0f32;
    let mut tile = 0usize;
    let mut j = 0usize;
    while j < my_tiles {
        prefetch();
        issue();
        if STAGES == 8 {
            cp_async_wait::<7>();
        } else {
            cp_async_wait::<3>();
        }
        // Every lane's copies of tile j are complete; the barrier makes them visible to the whole warp.
        sync_warp();
        let row_s = ring.wrapping_add((j % STAGES) * 32 * RS + lane * RS) as *const F4;
        let q_t = q_s.wrapping_add(tile * TILE) as *const F4;
        let cols = TILE.min(dim - tile * TILE);
        // SAFETY: both operands hold `cols` staged f32 of this tile, 16-byte aligned.
        (acc, acc_q) =
            unsafe { chain_tile::<METRIC>(q_t, row_s, cols, acc, acc_q, METRIC == METRIC_COSINE) };
        // No lane's copy into this slot (issued STAGES - 1 tiles later) starts before all have read it.
        sync_warp();
        tile += 1;
        j += 1;
        if tile == n_tiles {
            let nq = match given_nq {
                Some(v) => v,
                None if METRIC == METRIC_COSINE => sqrt(acc_q),
                None => 0.0,
            };
            let score = finish::<METRIC>(acc, nq, nc);
            if k == 0 {
                if r < n {
                    // SAFETY: r < n_rows: inside the scores.
                    unsafe { *scores.add(r) = score };
                }
            } else {
                let key = if r < n {
                    (u64::from(score_key(score, higher_first)) << 32) | r as u64
                } else {
                    u64::MAX
                };
                if key < shfl_idx_u64(list, k - 1) {
                    // SAFETY: key < MAX, so r < n_rows: inside the scores.
                    unsafe { *scores.add(r) = score };
                }
                list = warp_offer(list, key, k);
            }
            acc = 0.0;
            acc_q = 0.0;
            tile = 0;
            r += group_step_rows;
            nc = norm_of(r);
        }
    }
    if k == 0 {
        return;
    }
    // The block's list: warps' lists to shared memory, warp 0 merges them.
    if (lane as u32) < k {
        // SAFETY: warp * k + lane < warps * 32: inside the lists.
        unsafe { *lists.add(warp * k as usize + lane) = list };
    }
    sync_threads();
    let block = block_x() as usize;
    let n_blocks = grid_dim_x() as usize;
    let partial = p.partial as *mut u64;
    if warp == 0 {
        // SAFETY: the lists were written before the barrier.
        let merged = unsafe { block_merge(lists, warps, k) };
        if (lane as u32) < k {
            // SAFETY: block * k + lane < n_blocks * k.
            unsafe { *partial.add(block * k as usize + lane) = merged };
        }
    }
    // SAFETY: the ticket is one device u32 used only atomically here; the flag is this block's shared memory.
    if !unsafe { last_to_arrive(p.ticket as *mut u32, n_blocks, last_flag) } {
        return;
    }
    // The last block: every warp merges its share of the blocks' lists, then warp 0 merges the warps'.
    // SAFETY: every block wrote its k keys before its ticket (acquired by last_to_arrive).
    let mine =
        unsafe { warp_merge_global(u64::MAX, partial, n_blocks * k as usize, k, warp, warps) };
    // The lists area was last read by warp 0 before last_to_arrive's barriers.
    if (lane as u32) < k {
        // SAFETY: as above.
        unsafe { *lists.add(warp * k as usize + lane) = mine };
    }
    sync_threads();
    if warp == 0 {
        // SAFETY: written before the barrier.
        let best = unsafe { block_merge(lists, warps, k) };
        if (lane as u32) < k {
            let out = p.out as *mut u64;
            let at = (best as u32 as usize).min(n - 1);
            // SAFETY: lane < k: inside out's 2k; every selected key is a real row's (k <= n_rows), whose score
            // its warp wrote before the block's ticket.
            unsafe {
                *out.add(lane) = best;
                let score = scores.add(at).read_volatile();
                *out.add(k as usize + lane) = u64::from(score.to_bits());
            }
        }
        if lane == 0 {
            // SAFETY: every block has taken its ticket; the next launch starts from zero.
            unsafe { (p.ticket as *mut u32).write_volatile(0) };
        }
    }
}

kernels! {
    Scan1Params;
    sm80_scan1_dot => scan1::<METRIC_DOT, 4, false>;
    sm80_scan1_cosine => scan1::<METRIC_COSINE, 4, false>;
    sm80_scan1_l2 => scan1::<METRIC_L2, 4, false>;
    sm80_scan1_s8_cosine => scan1::<METRIC_COSINE, 8, false>;
    sm90a_scan1_dot => scan1::<METRIC_DOT, 4, true>;
    sm90a_scan1_cosine => scan1::<METRIC_COSINE, 4, true>;
    sm90a_scan1_l2 => scan1::<METRIC_L2, 4, true>;
}
