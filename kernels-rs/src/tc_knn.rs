//! Fast-mode knn with the top-k fused into the tensor-core GEMM (`tc_knn_*`, sm_80 and newer), and the merge
//! of its per-split lists (`tc_knn_merge`). No score matrix is written: the scores are `tc_gemm_*`'s (the
//! same main loop and the same score function, so the same bits), and the lists equal `select_topk` over them.
//!
//! Block `(x, y)` takes queries `128 x ..` and walks the row tiles `y, y + n_splits, ..` (256 rows each)
//! through the main loop of `tensor.rs`; the blocks of one split run side by side, so a row tile is read from
//! memory once and from L2 by the other query tiles. Per query of its tile the block keeps a sorted list of
//! its `k` smallest pair keys `(score_key(score) << 32) | row` (and their scores) in shared memory, the
//! `k`-th key being the query's threshold. After each row tile:
//!
//! 1. Filter: every thread checks its 128 accumulators (8 queries x 16 rows, the mma C-fragment layout)
//!    against their queries' thresholds and appends the pairs that beat it to the query's candidate list in
//!    shared memory (an atomic slot; at most `TC_KNN_CAP`). Cosine first compares `dot * (1/nq) * (1/nc)`,
//!    widened by a margin far above its rounding error, so that the division runs only for pairs that can
//!    pass; the pairs it lets through are decided by the exact score and key.
//! 2. Merge: warp `w` takes queries `w, w + 8, ..`: lane `l` holds list entry `l` and candidate `l`; each
//!    computes its rank in the union (its index plus the candidates below it; for a candidate, the list
//!    entries and candidates below it) and the entries ranked below `k` are written at their rank.
//! 3. A candidate list that overflowed leaves its pairs unmarked in the filtering thread's bit mask; the
//!    block repeats 1 and 2 (the thresholds have fallen meanwhile) until nothing overflows.
//!
//! `sm90a_knn_*` merges lazily ([`Lists::merge_lazy`]): once the lists are full, about one pair in four
//! thousand passes, so most tiles would merge a candidate or two behind two block barriers. Its candidates
//! stay in their lists across tiles until one overflows, a query holds [`Lists::MERGE_FILL`] of them at a
//! tile's start, or the block ends ([`Lists::flush`]); meanwhile a query's threshold is the one its last merge
//! left, higher than an eager merge's, so more pairs become candidates but none that belongs in the answer is
//! dropped, and the lists are the same.
//!
//! A query's threshold is the smaller of its list's `k`-th key and a key the blocks share through device
//! memory (`TcKnnParams::thresholds`: each merge that fills or improves a list lowers it atomically): a pair
//! at or above it has `k` better pairs in some block, so it cannot be in the answer, and each split keeps
//! only the pairs that can. Without the shared key every split would gather its own `k` best.
//!
//! Before step 1, each pair meets a quick test ([`Lists::might_pass`]: one multiply or FMA and a compare
//! against a per-query limit widened far beyond its rounding error); only the few that pass take step 1.
//!
//! Keys are unique (one row id per pair), so the ranks are distinct and the order is the total order of
//! `docs/numerics.md`, "Top-k": the same keys as `select_topk`, so the same lists.

use crate::select::atomic_add;
use crate::tensor::{Acc, Epilogue, Operands, score, stream};
use crate::util::{
    ballot, block_dim_x, block_min, block_x, block_y, dynamic_shared_f32, fma, grid_dim_y,
    load_relaxed_gpu_u64, score_key, shared_addr, shfl_xor_f32, shfl_xor_u64,
    store_relaxed_gpu_u64, sync_threads, sync_threads_or, sync_warp, thread_x,
};
use core::sync::atomic::{AtomicU64, Ordering};
use recall_kernel_shared::{
    METRIC_COSINE, METRIC_DOT, METRIC_L2, TC_KNN_CAP, TC_PIPE_BYTES, TC_TILE_Q, TC_TILE_R,
    TcKnnParams, TcMergeParams, tc_knn_heads_per_split,
};

const TQ: usize = TC_TILE_Q as usize;
/// Best quick values a thread keeps per query for [`Lists::seed_limit`].
pub(crate) const SEED_SLOTS: usize = 4;
const _: () = assert!(SEED_SLOTS == 4, "the seed's loops are unrolled for 4 slots");

/// Insert `v` into `top` (best first; NaN counts as no value), keeping the [`SEED_SLOTS`] best.
#[inline(always)]
pub(crate) fn seed_insert(top: &mut [f32; SEED_SLOTS], v: f32) {
    let mut v = if v == v { v } else { f32::NEG_INFINITY };
    unroll!(2, S: usize => {
        let hi = top[S].max(v);
        v = top[S].min(v);
        top[S] = hi;
    });
    let hi = top[2].max(v);
    v = top[2].min(v);
    top[2] = hi;
    // The last slot keeps the better of the two; what falls out is dropped.
    top[3] = top[3].max(v);
}
const CAP: usize = TC_KNN_CAP as usize;
/// The cosine pre-filter's relative margin (its rounding error is below 8 * 2^-24).
const MARGIN: f32 = 1.0 / 65536.0;
/// And its absolute margin (covers subnormal scores).
const TINY: f32 = 1e-30;

/// The score whose [`score_key`] is the high half of `key` (its inverse; every key a list holds comes from a
/// score that is not NaN, and `-0.0` keys as `0.0`).
#[inline(always)]
fn key_score(key: u64, higher_first: bool) -> f32 {
    let k = (key >> 32) as u32;
    let ascending = if higher_first { !k } else { k };
    f32::from_bits(if ascending & 0x8000_0000 != 0 {
        ascending & 0x7fff_ffff
    } else {
        !ascending
    })
}

/// `1 / x` for norms where the pre-filter's products stay normal, else 0 (the pre-filter is skipped).
#[inline(always)]
fn inv_or_zero(x: f32) -> f32 {
    // 2^-60 and 2^60: the product of two inverses and a score stays far from subnormal and infinite.
    if x >= 8.673_617e-19 && x <= 1.152_921_5e18 {
        1.0 / x
    } else {
        0.0
    }
}

/// `x`, through an instruction the compiler may not move or merge: keeps the filter's per-pair work inside
/// its round instead of hoisted out of the retry loop for all 128 pairs at once (which spills registers).
#[inline(always)]
fn opaque(x: u32) -> u32 {
    let y: u32;
    // SAFETY: a register move.
    unsafe {
        core::arch::asm!("mov.b32 {y}, {x};", y = out(reg32) y, x = in(reg32) x, options(nomem, nostack))
    };
    y
}

/// The block's shared state (generic pointers into its dynamic shared memory, laid out as
/// `tc_knn_shared_bytes` counts it, with `CAP` candidates per query) and the epilogue that folds each row
/// tile into the lists. `sm90a_knn_*` (`wgmma.rs`) uses it too, through [`Lists::fold`] with its own
/// accumulator layout.
pub(crate) struct Lists<const METRIC: u32, const CAP: usize, const MULTI: bool> {
    pub(crate) list_key: *mut u64,
    pub(crate) cand_key: *mut u64,
    /// Per query its threshold key for this tile ([`Lists::threshold_key`]): the launch's shared key as read
    /// at the tile's start ([`Lists::publish_tile`]), lowered by the block's own merges since.
    pub(crate) thr: *mut u64,
    pub(crate) list_score: *mut f32,
    pub(crate) cand_score: *mut f32,
    pub(crate) count: *mut u32,
    pub(crate) qn: *mut f32,
    pub(crate) qinv: *mut f32,
    pub(crate) rn: *mut f32,
    pub(crate) rinv: *mut f32,
    pub(crate) corpus_norms: u64,
    /// The launch's shared thresholds, at this block's first query (`TcKnnParams::thresholds`).
    pub(crate) shared_thr: *mut u64,
    /// The launch's list heads of this block's first query (`TcKnnParams::heads`), how many a query has, and
    /// where this block's start: one a split (`n_splits` a query, this block's at its split), `None` with fewer
    /// than `k` splits (the heads then bound nothing); with `MULTI`, `h = tc_knn_heads_per_split(k, n_splits)`
    /// a split (`n_splits * h` a query, this block's `h` from `split * h`), `None` when a query would have more
    /// than `32 * HEAD_SLOTS`.
    pub(crate) heads: Option<(*mut u64, usize, usize)>,
    pub(crate) n_rows: u32,
    pub(crate) n_queries: u32,
    pub(crate) q0: u32,
    pub(crate) k: usize,
    /// This thread's row norm of the tile in flight (row `r0 + thread`), loaded by `begin`.
    pub(crate) nc_next: f32,
    /// Whether this thread's query (threads below 128) held at least [`Lists::MERGE_FILL`] unmerged candidates at
    /// the tile's start ([`Lists::publish_tile`]): the lazy merge of `sm90a_knn_*` ([`Lists::merge_lazy`]).
    pub(crate) pending_high: bool,
}

/// One query's filter state for a round: its current threshold key, norm, inverse norm and threshold score.
#[derive(Clone, Copy)]
pub(crate) struct Threshold {
    pub(crate) live: bool,
    thr: u64,
    nq: f32,
    qi: f32,
    thr_s: f32,
}

impl<const METRIC: u32, const CAP: usize, const MULTI: bool> Lists<METRIC, CAP, MULTI> {
    /// Lay out the block's shared state after the first `pipe_bytes` bytes of its dynamic shared memory
    /// (the ring), reset the lists and load the tile's query norms. The writes are read after a block
    /// barrier (the main loop's first).
    ///
    /// # Safety
    /// The dynamic shared memory holds `pipe_bytes` and then the lists of `k` for `CAP` candidates; 256
    /// threads; the query norms hold `n_queries` f32 for cosine and l2; `1 <= k <= 32`.
    #[inline(always)]
    pub(crate) unsafe fn new(p: &TcKnnParams, pipe_bytes: u32, q0: u32) -> Self {
        let base = dynamic_shared_f32() as *mut u8;
        let k = p.k as usize;
        let list_key = base.wrapping_add(pipe_bytes as usize) as *mut u64;
        let cand_key = list_key.wrapping_add(TQ * k);
        let thr = cand_key.wrapping_add(TQ * CAP);
        let list_score = thr.wrapping_add(TQ) as *mut f32;
        let cand_score = list_score.wrapping_add(TQ * k);
        let count = cand_score.wrapping_add(TQ * CAP) as *mut u32;
        let qn = count.wrapping_add(TQ) as *mut f32;
        let qinv = qn.wrapping_add(TQ);
        let rn = qinv.wrapping_add(TQ);
        let rinv = rn.wrapping_add(TC_TILE_R as usize);
        let t = thread_x() as usize;
        let mut i = t;
        while i < TQ * k {
            // SAFETY: i < 128 k: inside the lists.
            unsafe {
                *list_key.add(i) = u64::MAX;
                *list_score.add(i) = 0.0;
            }
            i += 256;
        }
        // Every candidate slot holds a key ([`Lists::merge_one`] reads whole groups of 8).
        let mut i = t;
        while i < TQ * CAP {
            // SAFETY: i < 128 CAP: inside the candidates.
            unsafe { *cand_key.add(i) = u64::MAX };
            i += 256;
        }
        if t < TQ {
            let q = q0 + t as u32;
            let nq = if METRIC != METRIC_DOT && q < p.n_queries {
                // SAFETY: q < n_queries; cosine and l2 launches pass n_queries query norms.
                unsafe { *(p.query_norms as *const f32).add(q as usize) }
            } else {
                0.0
            };
            // SAFETY: t < 128: inside the counts and query norms.
            unsafe {
                *count.add(t) = 0;
                *thr.add(t) = u64::MAX;
                *qn.add(t) = nq;
                *qinv.add(t) = inv_or_zero(nq);
            }
        }
        Lists {
            list_key,
            cand_key,
            thr,
            list_score,
            cand_score,
            count,
            qn,
            qinv,
            rn,
            rinv,
            corpus_norms: p.corpus_norms,
            shared_thr: (p.thresholds as *mut u64).wrapping_add(q0 as usize),
            heads: if MULTI {
                let h = tc_knn_heads_per_split(p.k, p.n_splits) as usize;
                let per_query = p.n_splits as usize * h;
                (per_query <= 32 * HEAD_SLOTS).then(|| {
                    (
                        (p.heads as *mut u64).wrapping_add(q0 as usize * per_query),
                        per_query,
                        block_y() as usize * h,
                    )
                })
            } else {
                (p.n_splits >= p.k && p.n_splits as usize <= 32 * HEAD_SLOTS).then(|| {
                    let ns = p.n_splits as usize;
                    (
                        (p.heads as *mut u64).wrapping_add(q0 as usize * ns),
                        ns,
                        block_y() as usize,
                    )
                })
            },
            n_rows: p.n_rows,
            n_queries: p.n_queries,
            q0,
            k,
            nc_next: 0.0,
            pending_high: false,
        }
    }

    /// Write the lists of this block (split `split` of `p.n_splits`) to the outputs. Block-uniform: it starts
    /// with a barrier.
    ///
    /// # Safety
    /// The launch's outputs as [`TcKnnParams`] documents; `split < n_splits`.
    #[inline(always)]
    pub(crate) unsafe fn write_out(&self, p: &TcKnnParams, split: u32) {
        sync_threads();
        let k = self.k;
        let (s, ns) = (split as usize, p.n_splits as usize);
        let mut i = thread_x() as usize;
        while i < TQ * k {
            let q = self.q0 as usize + i / k;
            if q < p.n_queries as usize {
                let at = (q * ns + s) * k + i % k;
                // SAFETY: q < n_queries, s < n_splits: inside the outputs; i < 128 k: inside the lists.
                unsafe {
                    *(p.out_keys as *mut u64).add(at) = *self.list_key.add(i);
                    *(p.out_scores as *mut f32).add(at) = *self.list_score.add(i);
                }
            }
            i += 256;
        }
    }

    /// Tile-local query `ql`'s filter state for this round (`live` false past the last query).
    #[inline(always)]
    pub(crate) fn threshold(&self, ql: usize) -> Threshold {
        if self.q0 as usize + ql >= self.n_queries as usize {
            return Threshold {
                live: false,
                thr: 0,
                nq: 0.0,
                qi: 0.0,
                thr_s: 0.0,
            };
        }
        let thr = self.threshold_key(ql);
        // SAFETY: ql < 128: inside the query norms.
        unsafe {
            let nq = if METRIC != METRIC_DOT {
                *self.qn.add(ql)
            } else {
                0.0
            };
            let (qi, thr_s) = if METRIC == METRIC_COSINE {
                (
                    *self.qinv.add(ql),
                    if thr == u64::MAX {
                        f32::NEG_INFINITY
                    } else {
                        key_score(thr, true)
                    },
                )
            } else {
                (0.0, 0.0)
            };
            Threshold {
                live: true,
                thr,
                nq,
                qi,
                thr_s,
            }
        }
    }

    /// Tile-local query `ql`'s threshold key: the smaller of its list's `k`-th key and the launch's shared
    /// threshold as this tile read it (`u64::MAX` while neither is known). A pair whose key is not below it is
    /// not needed.
    #[inline(always)]
    pub(crate) fn threshold_key(&self, ql: usize) -> u64 {
        // SAFETY: ql < 128: inside the thresholds (written by this block only, between barriers).
        unsafe { *self.thr.add(ql) }
    }

    /// Tile-local query `ql`'s limit for [`Lists::might_pass`] this round: from its threshold score, widened
    /// by a margin far above the rounding error of the quick test (`2 * MARGIN` relative), so that a pair it
    /// stops would also fail the exact test. A query past the last stops every pair; one whose list is not
    /// full (or whose norm the pre-filters skip) lets every pair through.
    #[inline(always)]
    pub(crate) fn limit(&self, ql: usize) -> f32 {
        let (stop_all, pass_all) = if METRIC == METRIC_L2 {
            (f32::NEG_INFINITY, f32::INFINITY)
        } else {
            (f32::INFINITY, f32::NEG_INFINITY)
        };
        if self.q0 as usize + ql >= self.n_queries as usize {
            return stop_all;
        }
        let thr = self.threshold_key(ql);
        if thr == u64::MAX {
            return pass_all;
        }
        let s = key_score(thr, METRIC != METRIC_L2);
        // SAFETY: ql < 128: inside the query norms.
        unsafe {
            if METRIC == METRIC_COSINE {
                if *self.qinv.add(ql) == 0.0 {
                    pass_all
                } else {
                    (s - f32::from_bits(s.to_bits() & 0x7fff_ffff) * (2.0 * MARGIN) - 2.0 * TINY)
                        * *self.qn.add(ql)
                }
            } else if METRIC == METRIC_L2 {
                let nq = *self.qn.add(ql);
                s - nq * nq * (1.0 - 2.0 * MARGIN) + TINY
            } else {
                s
            }
        }
    }

    /// Tile-local row `rl`'s value for [`Lists::might_pass`]: its inverse norm (cosine; NaN where skipped), its
    /// squared norm less `2 * MARGIN` of it (l2), nothing (dot). Published by [`Lists::publish_tile`].
    #[inline(always)]
    pub(crate) fn row_quick(&self, rl: usize) -> f32 {
        if METRIC == METRIC_DOT {
            0.0
        } else {
            // SAFETY: rl < 256.
            unsafe { *self.rinv.add(rl) }
        }
    }

    /// [`Lists::row_quick`] of the tile-local rows `rl` and `rl + 1` (`rl` even), in one 8-byte read.
    #[inline(always)]
    pub(crate) fn row_quick_pair(&self, rl: usize) -> [f32; 2] {
        if METRIC == METRIC_DOT {
            [0.0; 2]
        } else {
            // SAFETY: rl + 1 < 256; the row values start 8-byte aligned (after whole u64 and f32 pairs from the
            // 8-byte aligned lists) and rl is even.
            let v = unsafe { *(self.rinv.add(rl) as *const u64) };
            [f32::from_bits(v as u32), f32::from_bits((v >> 32) as u32)]
        }
    }

    /// The quick test of a pair (dot product bits `dot`, row value `rq`, query limit `lim`): one multiply or
    /// fused multiply-add and one comparison. `false` only when the exact test ([`Lists::offer`]) would drop
    /// the pair too, so a thread whose pairs all fail it skips the filter. NaN passes.
    #[inline(always)]
    pub(crate) fn might_pass(dot: u32, rq: f32, lim: f32) -> bool {
        if METRIC == METRIC_L2 {
            !(fma(-2.0, f32::from_bits(dot), rq) > lim)
        } else {
            !(Self::quick_value(dot, rq) < lim)
        }
    }

    /// Whether this tile's filter seeds its quick limits ([`Lists::seed_limit`]): cosine and dot, `k <= 16`
    /// (four values a thread of a quad cover `k`). Uniform.
    #[inline(always)]
    pub(crate) fn seeds(&self) -> bool {
        METRIC != METRIC_L2 && self.k <= 4 * SEED_SLOTS
    }

    /// Whether to seed this tile's quick limits ([`Lists::seed_limits`]): some query of the warp has a limit
    /// this round (`lim`, from [`Lists::limit`], for this thread's tile-local queries `ql`) that lets every
    /// pair through (its list not full, no shared threshold yet, and a norm the quick test uses).
    /// Warp-collective: every lane of the warp calls it.
    #[inline(always)]
    pub(crate) fn seed_needed<const NQ: usize>(&self, ql: &[usize; NQ], lim: &[f32; NQ]) -> bool {
        if !self.seeds() {
            return false;
        }
        // (Unrolled for up to 8 queries, so that the arrays stay in registers.)
        let mut need = false;
        unroll!(8, X: usize => {
            if X < NQ {
                // SAFETY: ql < 128: inside the query norms.
                let norm_ok = METRIC != METRIC_COSINE || unsafe { *self.qinv.add(ql[X]) } != 0.0;
                need |= lim[X] == f32::NEG_INFINITY && norm_ok;
            }
        });
        ballot(need) != 0
    }

    /// The seeds ([`Lists::seed_limit`]) of this thread's queries `ql` from their slots `top`
    /// ([`seed_insert`] over this thread's quick values of each). Warp-collective.
    #[inline(always)]
    pub(crate) fn seed_limits<const NQ: usize>(
        &self,
        ql: &[usize; NQ],
        top: &[[f32; SEED_SLOTS]; NQ],
    ) -> [f32; NQ] {
        let mut seed = [f32::NEG_INFINITY; NQ];
        unroll!(8, X: usize => {
            if X < NQ {
                seed[X] = self.seed_limit(ql[X], &top[X]);
            }
        });
        seed
    }

    /// A quick-test limit for tile-local query `ql` from this tile's own pairs, for a tile whose list is not
    /// yet full (when the first tiles would otherwise take every pair through the exact filter, 16 at a time).
    /// `top` holds this thread's [`SEED_SLOTS`] best quick values of the query (best first, [`seed_insert`]);
    /// the quad's four threads (lanes `4 i ..= 4 i + 3`) hold the same query. With `m = ceil(k / 4)`, the
    /// smallest of the quad's `m`-th values, `v`, has at least `k` pairs at or above it, each with an exact
    /// score at least `v`'s (as a score) less the quick test's margin; a pair below the returned limit has
    /// an exact score below all of them, so it is not among the query's `k` best. Negative infinity (no
    /// limit) when the quad has fewer than `k` such values or the query's norm skips the quick test.
    /// Warp-collective: every lane of the warp calls it.
    #[inline(always)]
    pub(crate) fn seed_limit(&self, ql: usize, top: &[f32; SEED_SLOTS]) -> f32 {
        let m = self.k.div_ceil(4);
        let mut mine = top[0];
        unroll!(4, S: usize => {
            if S + 1 == m {
                mine = top[S];
            }
        });
        let v = mine.min(shfl_xor_f32(mine, 1));
        let v = v.min(shfl_xor_f32(v, 2));
        if v == f32::NEG_INFINITY || self.q0 as usize + ql >= self.n_queries as usize {
            return f32::NEG_INFINITY;
        }
        if METRIC == METRIC_COSINE {
            // SAFETY: ql < 128: inside the query norms.
            let (qi, qn) = unsafe { (*self.qinv.add(ql), *self.qn.add(ql)) };
            if qi == 0.0 {
                return f32::NEG_INFINITY;
            }
            // A lower bound of those pairs' exact scores, then `limit`'s widening of a threshold score.
            let s = v * qi;
            let s = s - f32::from_bits(s.to_bits() & 0x7fff_ffff) * (2.0 * MARGIN) - 2.0 * TINY;
            (s - f32::from_bits(s.to_bits() & 0x7fff_ffff) * (2.0 * MARGIN) - 2.0 * TINY) * qn
        } else {
            // Dot: the quick value is the score.
            v
        }
    }

    /// The value [`Lists::might_pass`] compares (cosine and dot: higher is better), for [`seed_insert`].
    #[inline(always)]
    pub(crate) fn quick_value(dot: u32, rq: f32) -> f32 {
        let dot = f32::from_bits(dot);
        if METRIC == METRIC_COSINE {
            dot * rq
        } else {
            dot
        }
    }

    /// One pair of a filter round (tile-local query `ql` with limit `lim`, row `rl` with quick value `rq`, dot
    /// product bits `dot`; bit `mask` of `done` marks it decided): the quick test, then, for the few pairs
    /// that pass it, step 1 (the exact filter). Returns whether it beat its query's threshold but found the
    /// candidate list full (it stays undecided for the next round).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(crate) fn consider(
        &self,
        ql: usize,
        rl: usize,
        r0: u32,
        dot: u32,
        rq: f32,
        lim: f32,
        done: &mut u32,
        mask: u32,
    ) -> bool {
        if !Self::might_pass(dot, rq, lim) || *done & mask != 0 {
            return false;
        }
        if self.decide(ql, rl, r0, dot) {
            *done |= mask;
            false
        } else {
            true
        }
    }

    /// The rare path of [`Lists::consider`]: the exact filter for one pair; `true` when decided. Not inlined,
    /// so that the unrolled rounds keep their registers for the accumulators and pay for this path only when
    /// a pair takes it.
    #[inline(never)]
    fn decide(&self, ql: usize, rl: usize, r0: u32, dot: u32) -> bool {
        let t = self.threshold(ql);
        !t.live || self.offer(&t, ql, rl, r0, dot)
    }

    /// Step 1 of the module documentation for one pair (tile-local query `ql` with state `t`, tile-local row
    /// `rl` of the tile at `r0`, dot product bits `dot`): filtered out, or appended to the query's
    /// candidates. `false` when it beat the threshold but the candidate list was full (still undecided).
    #[inline(always)]
    pub(crate) fn offer(&self, t: &Threshold, ql: usize, rl: usize, r0: u32, dot: u32) -> bool {
        let higher_first = METRIC != METRIC_L2;
        let r = r0 + rl as u32;
        let dot = f32::from_bits(opaque(dot));
        let mut pass = r < self.n_rows;
        if pass && METRIC == METRIC_COSINE {
            // SAFETY: rl < 256.
            let ri = unsafe { *self.rinv.add(rl) };
            if t.qi != 0.0 && ri != 0.0 {
                let approx = dot * (t.qi * ri);
                let upper = approx + f32::from_bits(approx.to_bits() & 0x7fff_ffff) * MARGIN + TINY;
                // NaN passes: the exact key decides.
                pass = !(upper < t.thr_s);
            }
        }
        if !pass {
            return true;
        }
        let nc = if METRIC != METRIC_DOT {
            // SAFETY: rl < 256.
            unsafe { *self.rn.add(rl) }
        } else {
            0.0
        };
        let s = score::<METRIC>(dot, t.nq, nc);
        let key = (u64::from(score_key(s, higher_first)) << 32) | u64::from(r);
        if key >= t.thr {
            return true;
        }
        let slot = atomic_add(self.count.wrapping_add(ql), 1) as usize;
        if slot >= CAP {
            return false;
        }
        // SAFETY: ql < 128, slot < CAP.
        unsafe {
            *self.cand_key.add(ql * CAP + slot) = key;
            *self.cand_score.add(ql * CAP + slot) = s;
        }
        true
    }

    /// Publish the tile's row norms (loaded by [`Lists::load_norm`]) and each query's threshold key (the
    /// launch's shared key read once a tile, so that the filter reads only shared memory) to the block before
    /// the filter rounds of [`Lists::offer`] and [`Lists::merge_round`]. Block-uniform.
    #[inline(always)]
    pub(crate) fn publish_tile(&mut self) {
        let t = thread_x() as usize;
        if t < TQ && (self.q0 as usize + t) < self.n_queries as usize {
            // SAFETY: the query exists: inside the launch's thresholds, which other blocks change only
            // atomically; t < 128: inside the block's thresholds and counts, which the last tile's readers and
            // writers passed the barrier that ended its epilogue.
            unsafe {
                let shared = load_relaxed_gpu_u64(self.shared_thr.wrapping_add(t));
                let own = self.thr.add(t);
                *own = (*own).min(shared);
                self.pending_high = *self.count.add(t) as usize >= Self::MERGE_FILL;
            }
        }
        if METRIC != METRIC_DOT {
            // SAFETY: t < 256 rows of the tile. The last readers of the previous tile's values passed the
            // barrier that ended its epilogue.
            unsafe {
                *self.rn.add(t) = self.nc_next;
                *self.rinv.add(t) = if METRIC == METRIC_COSINE {
                    // NaN where the pre-filters are skipped: every comparison with it lets the pair through.
                    let ri = inv_or_zero(self.nc_next);
                    if ri == 0.0 { f32::NAN } else { ri }
                } else {
                    self.nc_next * self.nc_next * (1.0 - 2.0 * MARGIN)
                };
            }
        }
        sync_threads();
    }

    /// Unmerged candidates of one query at a tile's start that make [`Lists::merge_lazy`] merge.
    pub(crate) const MERGE_FILL: usize = CAP / 4;

    /// End a filter round: merge the candidates (step 2) and return whether any thread found a candidate
    /// list full (`overflow`), in which case the caller runs another round. Block-uniform.
    #[inline(always)]
    pub(crate) fn merge_round(&self, overflow: bool) -> bool {
        // The candidates are visible to every warp after this barrier.
        let again = sync_threads_or(overflow);
        self.merge_pending();
        sync_threads();
        again
    }

    /// Merge the candidates that [`Lists::merge_lazy`] left, before [`Lists::write_out`]. Block-uniform.
    #[inline(always)]
    pub(crate) fn flush(&self) {
        sync_threads();
        self.merge_pending();
    }

    /// [`Lists::merge_round`], merging only when some thread found a candidate list full (`overflow`) or
    /// asks for it (`want`: [`Lists::pending_high`] in the first round of a tile); the candidates otherwise
    /// wait in their lists for a later tile (or [`Lists::write_out`]), each query's threshold staying as its
    /// last merge left it. One block barrier when nothing merges, two when it does. Block-uniform.
    #[inline(always)]
    pub(crate) fn merge_lazy(&self, overflow: bool, want: bool) -> bool {
        // The candidates are visible to every warp after this barrier.
        if !sync_threads_or(overflow || want) {
            return false;
        }
        self.merge_pending();
        sync_threads_or(overflow)
    }

    /// Merge every query's candidates: warp `w` takes the queries `w, w + 8, ..` that have any (step 2). Call
    /// between two block barriers, the candidates written before the first.
    #[inline(always)]
    fn merge_pending(&self) {
        const { assert!(TQ == 8 * 16, "eight warps take sixteen queries each") };
        let t = thread_x() as usize;
        let (lane, warp) = (t % 32, t / 32);
        // Lane `l < 16` reads query `warp + 8 l`'s count: one vote finds the queries to merge.
        let mine = if lane < 16 {
            // SAFETY: warp + 8 lane < 128: inside the counts.
            unsafe { *self.count.add(warp + 8 * lane) }
        } else {
            0
        };
        let mut todo = ballot(mine != 0);
        while todo != 0 {
            let i = todo.trailing_zeros() as usize;
            todo &= todo - 1;
            // SAFETY: warp + 8 i < 128; warp `warp` alone touches queries warp, warp + 8, .. until the
            // barrier that follows (the caller's).
            unsafe { self.merge_one(warp + 8 * i, lane) };
        }
    }

    /// The row norm of row `r0 + thread` for the next [`Lists::fold`].
    #[inline(always)]
    pub(crate) fn load_norm(&mut self, r0: u32) {
        if METRIC == METRIC_DOT {
            return;
        }
        // Without a branch (a row past the end loads the last row's norm and drops it): `sm90a_knn_*` calls
        // this while MMAs run, where `ptxas` would otherwise serialise them.
        let r = r0 + thread_x();
        let inside = r < self.n_rows;
        let at = if inside { r } else { self.n_rows - 1 };
        // SAFETY: at < n_rows (n_rows >= 1); cosine and l2 launches pass n_rows corpus norms.
        let nc = unsafe { *(self.corpus_norms as *const f32).add(at as usize) };
        self.nc_next = if inside { nc } else { 0.0 };
    }

    /// Merge query `ql`'s candidates into its list (step 2 of the module documentation). Warp-uniform.
    ///
    /// # Safety
    /// `ql < TC_TILE_Q`; the candidates were written before a block barrier; no other warp touches this
    /// query's list, candidates or count until the next block barrier.
    #[inline(always)]
    unsafe fn merge_one(&self, ql: usize, lane: usize) {
        let k = self.k;
        // SAFETY: (all accesses) ql < 128, lane < 32, k <= 32 and cnt <= CAP <= 32: inside the query's slots.
        unsafe {
            let cnt = (*self.count.add(ql) as usize).min(CAP);
            if cnt == 0 {
                return;
            }
            let (base, cb) = (ql * k, ql * CAP);
            let old_head = *self.list_key.add(base);
            let (lk, ls) = if lane < k {
                (
                    *self.list_key.add(base + lane),
                    *self.list_score.add(base + lane),
                )
            } else {
                (u64::MAX, 0.0)
            };
            let (ck, cs) = if lane < cnt {
                (
                    *self.cand_key.add(cb + lane),
                    *self.cand_score.add(cb + lane),
                )
            } else {
                (u64::MAX, 0.0)
            };
            // Eight independent reads at a time (the ranks are the only chain): a merge is latency-bound.
            const { assert!(CAP % 8 == 0, "the candidates are read 8 at a time") };
            let mut rank_l = lane;
            let mut rank_c = 0usize;
            let mut j = 0;
            while j < cnt {
                unroll!(8, U: usize => {
                    // (CAP is a multiple of 8: the read stays inside the query's candidates.)
                    let x = *self.cand_key.add(cb + j + U);
                    if j + U < cnt {
                        rank_l += usize::from(x < lk);
                        rank_c += usize::from(x < ck);
                    }
                });
                j += 8;
            }
            let mut i = 0;
            while i < k {
                unroll!(8, U: usize => {
                    if i + U < k {
                        rank_c += usize::from(*self.list_key.add(base + i + U) < ck);
                    }
                });
                i += 8;
            }
            // Every lane has read the list and the count before any lane writes them.
            sync_warp();
            if lane < k && rank_l < k {
                *self.list_key.add(base + rank_l) = lk;
                *self.list_score.add(base + rank_l) = ls;
            }
            if lane < cnt && rank_c < k {
                *self.list_key.add(base + rank_c) = ck;
                *self.list_score.add(base + rank_c) = cs;
            }
            if lane == 0 {
                *self.count.add(ql) = 0;
            }
            // The list's new k-th key, once every lane's writes are in, to the block's threshold and the
            // launch's shared one.
            sync_warp();
            let kth = *self.list_key.add(base + k - 1);
            let mut bound = kth;
            if lane == 0 && kth != u64::MAX {
                AtomicU64::from_ptr(self.shared_thr.wrapping_add(ql))
                    .fetch_min(kth, Ordering::Relaxed);
            }
            // A new best pair: publish it among the launch's heads, and bound the query by the k-th smallest
            // head (warp-uniform: every lane read the same list before and after).
            let head = *self.list_key.add(base);
            if MULTI {
                // A new pair among the list's first `h`: publish them, and bound the query by the k-th smallest
                // of all splits' heads (warp-uniform: the vote).
                if let Some((heads, per_query, own)) = self.heads {
                    let h = tc_knn_heads_per_split(k as u32, grid_dim_y()) as usize;
                    if ballot(lane < cnt && rank_c < h) != 0 {
                        let row = heads.wrapping_add(ql * per_query);
                        let fresh = self.list_key.add(base);
                        if lane < h {
                            store_relaxed_gpu_u64(row.wrapping_add(own + lane), *fresh.add(lane));
                        }
                        let t = kth_smallest_heads(row, per_query, (own, h, fresh), k, lane);
                        if lane == 0 && t != u64::MAX {
                            AtomicU64::from_ptr(self.shared_thr.wrapping_add(ql))
                                .fetch_min(t, Ordering::Relaxed);
                        }
                        bound = bound.min(t);
                    }
                }
            } else if let Some((heads, ns, split)) = self.heads
                && head != old_head
            {
                let row = heads.wrapping_add(ql * ns);
                if lane == 0 {
                    store_relaxed_gpu_u64(row.wrapping_add(split), head);
                }
                let t = kth_smallest_head(row, ns, split, head, k, lane);
                if lane == 0 && t != u64::MAX {
                    AtomicU64::from_ptr(self.shared_thr.wrapping_add(ql))
                        .fetch_min(t, Ordering::Relaxed);
                }
                bound = bound.min(t);
            }
            if lane == 0 {
                let own = self.thr.add(ql);
                *own = (*own).min(bound);
            }
        }
    }
}

/// Heads a lane of [`kth_smallest_head`] holds: the heads bound a query with at most `32 * HEAD_SLOTS` splits.
const HEAD_SLOTS: usize = 8;

/// The `k`-th smallest of one query's `ns` list heads (`row[..ns]`, this block's own, `head`, at `split`), or
/// `u64::MAX` when fewer than `k` are known. The heads are read once (lane `l` holds heads `l, l + 32, ..`);
/// round `r` takes the smallest above round `r - 1`'s, so the `k` rounds find `k` distinct keys, each a pair
/// some block held (heads only fall, so a head read while another block lowers it is still a pair's key):
/// the result has `k - 1` better pairs, whatever the other blocks do meanwhile. Warp-collective: every lane
/// of the warp calls it.
///
/// # Safety
/// `row` points at `ns` u64 of the launch's heads; `split < ns <= 32 * HEAD_SLOTS`.
#[inline(always)]
unsafe fn kth_smallest_head(
    row: *const u64,
    ns: usize,
    split: usize,
    head: u64,
    k: usize,
    lane: usize,
) -> u64 {
    let mut h = [u64::MAX; HEAD_SLOTS];
    unroll!(8, S: usize => {
        let i = lane + 32 * S;
        if i < ns {
            h[S] = if i == split {
                head
            } else {
                // SAFETY: i < ns.
                unsafe { load_relaxed_gpu_u64(row.wrapping_add(i)) }
            };
        }
    });
    kth_of(&h, k)
}

/// [`kth_smallest_head`] for `h` heads a split (`MULTI`): the `k`-th smallest of one query's `n` heads
/// (`row[..n]`; this block's own `h`, at `own`, read from its list `fresh` instead), or `u64::MAX` when fewer
/// than `k` are known. A block's `h` heads are always `h` distinct pairs of its list, so whatever mix of old and
/// new values a reader sees, each is a pair's key, and a key seen twice counts once. Warp-collective.
///
/// Not inlined: it runs only when a merge changes a list's first `h` (and inlined it cost the main loop of
/// `sm90a_knnm_*` a spilled register).
///
/// # Safety
/// `row` points at `n` u64 of the launch's heads; `own + h <= n <= 32 * HEAD_SLOTS`; `fresh` points at `h`
/// u64 of this block's list.
#[inline(never)]
unsafe fn kth_smallest_heads(
    row: *const u64,
    n: usize,
    (own, h, fresh): (usize, usize, *const u64),
    k: usize,
    lane: usize,
) -> u64 {
    let mut v = [u64::MAX; HEAD_SLOTS];
    unroll!(8, S: usize => {
        let i = lane + 32 * S;
        if i < n {
            // SAFETY: i < n; i - own < h inside this block's own heads.
            v[S] = unsafe {
                if i >= own && i < own + h {
                    *fresh.add(i - own)
                } else {
                    load_relaxed_gpu_u64(row.wrapping_add(i))
                }
            };
        }
    });
    kth_of(&v, k)
}

/// The `k`-th smallest distinct key of the warp's `32 * HEAD_SLOTS` heads (`v`, this lane's; `u64::MAX` for
/// none), or `u64::MAX` when fewer than `k` are known: round `r` takes the smallest above round `r - 1`'s.
/// Warp-collective.
#[inline(always)]
fn kth_of(v: &[u64; HEAD_SLOTS], k: usize) -> u64 {
    let mut last = 0u64;
    let mut r = 0;
    while r < k {
        // The first round takes any key; later ones only keys above the last round's.
        let mut best = u64::MAX;
        unroll!(8, S: usize => {
            if (r == 0 || v[S] > last) && v[S] < best {
                best = v[S];
            }
        });
        let mut m = 16;
        while m > 0 {
            let o = shfl_xor_u64(best, m);
            best = if o < best { o } else { best };
            m /= 2;
        }
        if best == u64::MAX {
            return u64::MAX;
        }
        last = best;
        r += 1;
    }
    last
}

impl<const METRIC: u32> Epilogue<Acc> for Lists<METRIC, CAP, false> {
    #[inline(always)]
    fn begin(&mut self, r0: u32) {
        self.load_norm(r0);
    }

    #[inline(always)]
    fn end(&mut self, r0: u32, acc: &Acc) {
        let lane = thread_x() as usize % 32;
        let warp = thread_x() as usize / 32;
        let (wm, wn) = (warp % 2, warp / 2);
        let (g, c) = (lane / 4, 2 * (lane % 4));
        // Bit ((i * 2 + h) * 8 + j) * 2 + e: accumulator [i][j][2h + e] is decided (filtered out, or written).
        let mut done = [0u32; 4];
        self.publish_tile();
        let mut ql = [0usize; 8];
        let mut lim = [0.0f32; 8];
        unroll!(8, X: usize => {
            ql[X] = wm * 64 + (X / 2) * 16 + g + 8 * (X % 2);
            lim[X] = self.limit(ql[X]);
        });
        // Seed the quick limits of queries whose lists are not full (see `seed_limit`).
        let mut seed = [f32::NEG_INFINITY; 8];
        if self.seed_needed(&ql, &lim) {
            let mut top = [[f32::NEG_INFINITY; SEED_SLOTS]; 8];
            unroll!(8, J: usize => {
                unroll!(2, E: usize => {
                    let rl = wn * 64 + J * 8 + c + E;
                    let rq = self.row_quick(rl);
                    let inside = r0 + (rl as u32) < self.n_rows;
                    unroll!(4, I: usize => {
                        unroll!(2, H: usize => {
                            let v = Self::quick_value(acc[I][J][2 * H + E], rq);
                            seed_insert(&mut top[I * 2 + H], if inside { v } else { f32::NEG_INFINITY });
                        });
                    });
                });
            });
            seed = self.seed_limits(&ql, &top);
        }
        // Block-uniform loop (`merge_round` ends with a block-wide vote).
        loop {
            let mut overflow = false;
            // (Recomputed every round, the first too: carrying eight limits across the rounds costs `ptxas`
            // more stack than the loads it saves.)
            unroll!(8, X: usize => {
                lim[X] = self.limit(ql[X]).max(seed[X]);
            });
            unroll!(8, J: usize => {
                unroll!(2, E: usize => {
                    let rl = wn * 64 + J * 8 + c + E;
                    let rq = self.row_quick(rl);
                    unroll!(4, I: usize => {
                        unroll!(2, H: usize => {
                            let bit = ((I * 2 + H) * 8 + J) * 2 + E;
                            overflow |= self.consider(
                                ql[I * 2 + H],
                                rl,
                                r0,
                                acc[I][J][2 * H + E],
                                rq,
                                lim[I * 2 + H],
                                &mut done[bit / 32],
                                1 << (bit % 32),
                            );
                        });
                    });
                });
            });
            if !self.merge_round(overflow) {
                break;
            }
        }
    }
}

/// See the module documentation.
///
/// # Safety
/// Grid `(ceil(n_queries / 128), n_splits)` with `n_splits <=` the row tiles, 256 threads,
/// `tc_knn_shared_bytes(k)` bytes of dynamic shared memory; buffers as [`TcKnnParams`] documents; `1 <= k
/// <= TC_KNN_K_MAX`; sm_80 or newer.
#[inline(always)]
unsafe fn tc_knn<const METRIC: u32, const BF16: bool>(p: &TcKnnParams) {
    // SAFETY: forwarded launcher contract: the lists follow the ring of TC_PIPE_BYTES.
    let (mut lists, o, split, n_tiles) =
        unsafe { knn_block::<METRIC, CAP, false>(p, TC_PIPE_BYTES) };
    // SAFETY: the ring is the first TC_PIPE_BYTES bytes of the dynamic shared memory; forwarded launcher
    // contract for the operands and outputs.
    unsafe {
        stream::<BF16, _>(
            &o,
            shared_addr(dynamic_shared_f32()),
            split,
            p.n_splits,
            n_tiles,
            &mut lists,
        );
        lists.write_out(p, split);
    }
}

/// What a fused knn block (`tc_knn_*`, `sm90a_knn_*`) sets up before its main loop: its lists (after the
/// ring's `pipe_bytes`), its operands, its split (`blockIdx.y`) and the number of row tiles it walks
/// (`split, split + n_splits, ..`).
///
/// # Safety
/// As [`Lists::new`].
#[inline(always)]
pub(crate) unsafe fn knn_block<const METRIC: u32, const C: usize, const MULTI: bool>(
    p: &TcKnnParams,
    pipe_bytes: u32,
) -> (Lists<METRIC, C, MULTI>, Operands, u32, u32) {
    let q0 = block_x() * TC_TILE_Q;
    // SAFETY: forwarded.
    let lists = unsafe { Lists::<METRIC, C, MULTI>::new(p, pipe_bytes, q0) };
    let tiles = p.n_rows.div_ceil(TC_TILE_R);
    let split = block_y();
    let n_tiles = if split < tiles {
        (tiles - split).div_ceil(p.n_splits)
    } else {
        0
    };
    let o = Operands {
        queries: p.queries,
        corpus: p.corpus,
        n_queries: p.n_queries,
        n_rows: p.n_rows,
        ld: p.ld,
        q0,
    };
    (lists, o, split, n_tiles)
}

kernels! {
    TcKnnParams;
    tc_knn_f16_dot => tc_knn::<METRIC_DOT, false>;
    tc_knn_f16_cosine => tc_knn::<METRIC_COSINE, false>;
    tc_knn_f16_l2 => tc_knn::<METRIC_L2, false>;
    tc_knn_bf16_dot => tc_knn::<METRIC_DOT, true>;
    tc_knn_bf16_cosine => tc_knn::<METRIC_COSINE, true>;
    tc_knn_bf16_l2 => tc_knn::<METRIC_L2, true>;
}

/// See [`TcMergeParams`]: thread `l` offers list `l`'s head in `k` rounds of block minima; the winner (keys are
/// unique) writes it with its score and moves to its next key.
///
/// # Safety
/// Grid `n_queries`, `32 * ceil(n_lists / 32)` threads, `16 * ceil(n_lists / 32)` bytes of dynamic shared
/// memory; buffers as [`TcMergeParams`] documents.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn tc_knn_merge(p: TcMergeParams) {
    let mins = dynamic_shared_f32() as *mut u64;
    let t = thread_x() as usize;
    let q = block_x() as usize;
    let (k, n_lists) = (p.k as usize, p.n_lists as usize);
    let warps = block_dim_x() as usize / 32;
    let keys = p.keys as *const u64;
    let base = (q * n_lists + t) * k;
    let out = q * k;
    let mut pos = 0;
    let mut head = if t < n_lists {
        // SAFETY: t < n_lists: list t's first key.
        unsafe { *keys.add(base) }
    } else {
        u64::MAX
    };
    let mut round = 0;
    // Block-uniform loop.
    while round < k {
        // SAFETY: mins holds 2 * warps u64.
        let best = unsafe { block_min(head, mins, warps, round) };
        // SAFETY: (the writes) out + round < n_queries * k; (the reads) pos < k inside list t.
        unsafe {
            if best == u64::MAX {
                // Fewer than k keys in all (the launcher rules it out): an invalid key the host rejects.
                if t == 0 {
                    *(p.out_keys as *mut u64).add(out + round) = u64::MAX;
                    *(p.out_scores as *mut f32).add(out + round) = 0.0;
                }
            } else if head == best {
                *(p.out_keys as *mut u64).add(out + round) = best;
                *(p.out_scores as *mut f32).add(out + round) =
                    *(p.scores as *const f32).add(base + pos);
                pos += 1;
                head = if pos < k {
                    *keys.add(base + pos)
                } else {
                    u64::MAX
                };
            }
        }
        round += 1;
    }
}
