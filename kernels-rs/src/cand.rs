//! Candidate scoring in one launch: gather, score and top-k (`sm80_cand_*`).
//!
//! Every candidate is a random corpus row (3 KB at 768 dims), so the kernel is a gather at memory bandwidth.
//! Thread mapping (see `CandParams`): block `(q, x)` owns slice `x` of query `q`'s list, at most
//! [`CAND_SLICE`] candidates. Warp `w` owns the groups of 32 candidates `w, w + warps, ..` of the slice, lane
//! `l` candidate `l` of a group. The warp copies its group's 32 rows global -> shared with `cp.async`, 16
//! bytes per lane and 512 contiguous-per-row bytes per instruction (four rows of 128 bytes), [`CAND_TILE`]
//! columns per tile and [`CAND_STAGES`] tiles in flight; the ring runs on across the warp's groups, so the
//! copies of the next group start while the last tiles of this one are scored. Lane `l` runs its
//! candidate's chain over the tile exactly as `scan` does (`docs/numerics.md`: one FMA chain per pair, `k`
//! ascending); for cosine it also runs the query's norm chain in its first group (the same steps as
//! `row_norms`, so the same bits). Each score goes to shared memory; the block then extracts its `k`
//! smallest pair keys `(score_key << 32) | id` in `k` rounds of warp and block minima (ids are unique in a
//! list, so exactly one thread holds each minimum), as `topk_small` does. The keys are those of radix select
//! and of the CPU, so the list is theirs.
//!
//! The launcher validated every id (below `n_rows`) and offset before the launch; the kernel reads a corpus
//! row only through an id of the list, and a column only below `dim`.
//!
//! `cp.async` needs sm_80: `cargo xtask build-kernels` leaves `sm80_*` kernels out of older images, where
//! the launcher runs `gather_*` and the radix select instead.

use crate::dense::{chain_tile, finish};
use crate::util::{
    F4, block_min, block_x, block_y, cp_async_commit, cp_async_wait, cp_async16,
    dynamic_shared_f32, score_key, shared_addr, sqrt, sync_threads, sync_warp, thread_x,
};
use recall_kernel_shared::{
    CAND_ROW_STRIDE, CAND_SLICE, CAND_STAGES, CAND_TILE, CAND_WARPS, CandParams, METRIC_COSINE,
    METRIC_DOT, METRIC_L2,
};

const TILE: usize = CAND_TILE as usize;
const STAGES: usize = CAND_STAGES as usize;
const RS: usize = CAND_ROW_STRIDE as usize;
const WARPS: usize = CAND_WARPS as usize;
const THREADS: usize = 32 * WARPS;
const SLICE: usize = CAND_SLICE as usize;
/// f32 of one warp's ring.
const RING: usize = STAGES * 32 * RS;
/// Slice positions each thread owns in the selection: `t, t + THREADS, ..` (the unrolled loops below
/// assume 8).
const OWN: usize = SLICE / THREADS;
const _: () = assert!(OWN == 8);

/// See the module comment.
///
/// # Safety
/// Grid `(n_queries, n_slices)`, `32 * CAND_WARPS` threads, `cand_shared_bytes(dim)` bytes of dynamic shared
/// memory; pointers and sizes as `CandParams` documents; every id below the corpus's row count; `dim` a
/// multiple of 4; `1 <= k <= CAND_K_MAX`; `1 <= slice <= CAND_SLICE`; every list at most `n_slices * slice`
/// long.
#[inline(always)]
unsafe fn cand<const METRIC: u32>(p: &CandParams) {
    let smem = dynamic_shared_f32();
    let t = thread_x() as usize;
    let (lane, warp) = (t % 32, t / 32);
    let q = block_x() as usize;
    let x = block_y() as usize;
    let (dim, k) = (p.dim as usize, p.k as usize);
    let offsets = p.offsets as *const u64;
    // SAFETY: q < n_queries (grid) and `offsets` holds n_queries + 1 values.
    let (start, end) = unsafe { (*offsets.add(q), *offsets.add(q + 1)) };
    // The launcher's slice length (at most SLICE, the capacity of the shared id and score areas).
    let slice = (p.slice as usize).min(SLICE);
    let first = start + (x * slice) as u64;
    if first >= end {
        return; // Block-uniform: this slice of the list is empty.
    }
    let count = ((end - first) as usize).min(slice);
    let dim4 = dim.div_ceil(4) * 4;
    let q_s = smem;
    let ring = smem.wrapping_add(dim4 + warp * RING);
    let sids = smem.wrapping_add(dim4 + WARPS * RING) as *mut u32;
    let scores_s = smem.wrapping_add(dim4 + WARPS * RING + SLICE);
    let mins = smem.wrapping_add(dim4 + WARPS * RING + 2 * SLICE) as *mut u64;
    // The query and the slice's ids into shared memory.
    let query = (p.queries as *const f32).wrapping_add(q * dim);
    let mut i = t;
    while i < dim {
        // SAFETY: i < dim: inside query q's row and the query area.
        unsafe { *q_s.add(i) = *query.add(i) };
        i += THREADS;
    }
    let ids = (p.ids as *const u32).wrapping_add(first as usize);
    let mut i = t;
    while i < count {
        // SAFETY: first + i < end <= len(ids); i < SLICE: inside the id area.
        unsafe { *sids.add(i) = *ids.add(i) };
        i += THREADS;
    }
    sync_threads();
    let n_groups = count.div_ceil(32);
    // This warp's groups: warp, warp + WARPS, ..
    let my_groups = if warp < n_groups {
        (n_groups - warp).div_ceil(WARPS)
    } else {
        0
    };
    let n_tiles = dim.div_ceil(TILE);
    let n_steps = my_groups * n_tiles;
    let corpus = p.corpus;
    // Step `s` (tile `s % n_tiles` of the warp's group `s / n_tiles`) into ring slot `s % STAGES`: 32 rows x 8
    // pieces of 16 bytes, lane `l` copies pieces `l, l + 32, ..` (4 rows of 128 bytes per instruction).
    // Candidates past the slice's end and columns past `dim` are zero-filled without a read. Always commits
    // one group (empty past the last step), so the wait below counts groups uniformly.
    let issue = |s: usize| {
        if s < n_steps {
            // 32-bit division: a 64-bit one is a long emulated sequence on the GPU.
            let (g, tile) = (
                (s as u32 / n_tiles as u32) as usize,
                (s as u32 % n_tiles as u32) as usize,
            );
            let base = (warp + g * WARPS) * 32;
            let slot = ring.wrapping_add((s % STAGES) * 32 * RS);
            let mut j = lane;
            while j < 256 {
                let (r, piece) = (j / 8, j % 8);
                let col = tile * TILE + piece * 4;
                let pos = base + r;
                let ok = pos < count && col < dim;
                let src = if ok {
                    // SAFETY: pos < count <= SLICE: an id staged above.
                    let id = unsafe { *sids.add(pos) } as usize;
                    corpus + ((id * dim + col) * 4) as u64
                } else {
                    corpus
                };
                // SAFETY: the slot's row r holds RS >= 32 floats, 16-byte aligned (RS and the query area are
                // multiples of 4 floats); when ok, the id is below n_rows (launcher) and col + 4 <= dim (dim
                // is a multiple of 4), so the 16 source bytes are inside the corpus, 16-byte aligned.
                unsafe {
                    cp_async16(
                        shared_addr(slot.wrapping_add(r * RS + piece * 4)),
                        src,
                        if ok { 16 } else { 0 },
                    )
                };
                j += 32;
            }
        }
        cp_async_commit();
    };
    let mut s = 0;
    while s + 1 < STAGES {
        issue(s);
        s += 1;
    }
    let mut acc = 0.0f32;
    let mut acc_q = 0.0f32;
    let mut nq = 0.0f32;
    let mut step_i = 0;
    // Warp-uniform loop: every lane runs every step and reaches both warp barriers of each.
    while step_i < n_steps {
        issue(step_i + STAGES - 1);
        cp_async_wait::<{ CAND_STAGES - 1 }>();
        // Every lane's copies of this tile are complete; the barrier makes them visible to the whole warp.
        sync_warp();
        let (g, tile) = (
            (step_i as u32 / n_tiles as u32) as usize,
            (step_i as u32 % n_tiles as u32) as usize,
        );
        if tile == 0 {
            acc = 0.0;
        }
        // The query's norm chain runs once per warp, in its first group.
        let norm_chain = METRIC == METRIC_COSINE && g == 0;
        let row_s = ring.wrapping_add((step_i % STAGES) * 32 * RS + lane * RS) as *const F4;
        let q_t = q_s.wrapping_add(tile * TILE) as *const F4;
        let cols = TILE.min(dim - tile * TILE);
        // SAFETY: both operands hold `cols` staged f32 of this tile, 16-byte aligned.
        (acc, acc_q) = unsafe { chain_tile::<METRIC>(q_t, row_s, cols, acc, acc_q, norm_chain) };
        if tile + 1 == n_tiles {
            if norm_chain {
                nq = sqrt(acc_q);
            }
            let pos = (warp + g * WARPS) * 32 + lane;
            if pos < count {
                let nc = if METRIC == METRIC_COSINE {
                    // SAFETY: pos < count: a staged id, below n_rows; cosine launches pass n_rows norms.
                    unsafe { *(p.corpus_norms as *const f32).add(*sids.add(pos) as usize) }
                } else {
                    0.0
                };
                // SAFETY: pos < count <= SLICE: inside the score area.
                unsafe { *scores_s.add(pos) = finish::<METRIC>(acc, nq, nc) };
            }
        }
        // No lane's copy of step + STAGES (issued next round into this slot) starts before all have read it.
        sync_warp();
        step_i += 1;
    }
    // Every copy this thread issued has landed (the trailing groups are empty) before the block moves on.
    cp_async_wait::<0>();
    // Every score is in shared memory before any thread reads it.
    sync_threads();
    let higher_first = p.higher_first != 0;
    // The thread's keys stay in registers: every index below is a constant of an unrolled loop.
    let mut keys = [u64::MAX; OWN];
    unroll!(8, I: usize => {
        let pos = t + I * THREADS;
        if pos < count {
            // SAFETY: pos < count: a score and an id written above.
            let (score, id) = unsafe { (*scores_s.add(pos), *sids.add(pos)) };
            keys[I] = (u64::from(score_key(score, higher_first)) << 32) | u64::from(id);
        }
    });
    let rounds = k.min(count);
    let out = (q * p.n_slices as usize + x) * k;
    let mut r = 0;
    // Block-uniform loop: every thread runs every round and reaches its barrier.
    while r < rounds {
        let (mut offer, mut arg) = (u64::MAX, 0);
        unroll!(8, I: usize => {
            if keys[I] < offer {
                offer = keys[I];
                arg = I;
            }
        });
        // SAFETY: mins holds 2 * WARPS u64.
        let best = unsafe { block_min(offer, mins, WARPS, r) };
        // Keys are unique (a list holds no id twice, and every key below u64::MAX): one thread matches.
        if offer == best && best != u64::MAX {
            unroll!(8, I: usize => {
                if I == arg {
                    keys[I] = u64::MAX;
                }
            });
            // SAFETY: out + r < (q * n_slices + x + 1) * k: inside both outputs; t + arg * THREADS < count:
            // a score written above.
            unsafe {
                *(p.out_keys as *mut u64).add(out + r) = best;
                *(p.out_scores as *mut f32).add(out + r) = *scores_s.add(t + arg * THREADS);
            }
        }
        r += 1;
    }
}

kernels! {
    CandParams;
    sm80_cand_dot => cand::<METRIC_DOT>;
    sm80_cand_cosine => cand::<METRIC_COSINE>;
    sm80_cand_l2 => cand::<METRIC_L2>;
}
