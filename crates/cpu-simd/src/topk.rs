//! Top-k selection under the total order of `docs/numerics.md` ("Top-k" and "Top-k: the CPU's selection
//! key and non-finite scores"). Every (score, id) pair becomes one `u64` key, smaller is better, so any
//! selection algorithm returns the same list.

use crate::CpuError;
use crate::simd::SimdLevel;
use rayon::prelude::*;

/// Whether a higher or a lower score ranks first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Order {
    /// Higher score first (cosine, dot, activations).
    HigherFirst,
    /// Lower score first (`l2`: squared distance).
    LowerFirst,
}

/// The best `k` (score, id) pairs of each query, best first, query-major: the pairs of query `q` are
/// `ids[q * k .. (q + 1) * k]` and `scores[q * k .. (q + 1) * k]`.
#[derive(Clone, Debug, PartialEq)]
pub struct TopK {
    pub k: usize,
    pub ids: Vec<u32>,
    pub scores: Vec<f32>,
}

impl TopK {
    /// How many queries the result holds.
    pub fn n_queries(&self) -> usize {
        self.ids.len().checked_div(self.k).unwrap_or(0)
    }

    /// The pairs of query `q`, best first.
    ///
    /// # Panics
    /// If `q >= self.n_queries()`, like slice indexing.
    pub fn query(&self, q: usize) -> (&[u32], &[f32]) {
        (
            &self.ids[q * self.k..(q + 1) * self.k],
            &self.scores[q * self.k..(q + 1) * self.k],
        )
    }
}

/// The order-preserving 32-bit key of a score: smaller is better; `-0.0` and `+0.0` share a key; NaN is
/// `u32::MAX`, after every number. Branch-free (a select for NaN), so a loop of them vectorises.
#[inline]
pub fn score_key(score: f32, order: Order) -> u32 {
    let bits = (score + 0.0).to_bits();
    // The usual sign flip: a negative score's bits all flip, a positive one's sign bit only.
    let ascending = bits ^ ((((bits as i32) >> 31) as u32) | 0x8000_0000);
    let key = match order {
        Order::LowerFirst => ascending,
        Order::HigherFirst => !ascending,
    };
    if score.is_nan() { u32::MAX } else { key }
}

/// The 64-bit key of a pair: score key high, id low.
#[inline]
pub fn pair_key(score: f32, id: u32, order: Order) -> u64 {
    ((score_key(score, order) as u64) << 32) | id as u64
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Entry {
    pub key: u64,
    pub score: f32,
}

/// Largest `k` whose [`Selector`] keeps its list sorted (see there).
const SORTED_MAX_K: usize = 32;

/// Keeps the best `k` entries pushed into it. Two ways, one answer (keys are unique, so the best `k` are one
/// set whatever the algorithm):
/// - `k <= SORTED_MAX_K`: the list is kept sorted, at most `k` long; a key better than the `k`-th is put in place
///   by insertion and the `k`-th leaves at once, so the bound is always the current `k`-th key. Most keys then fail
///   the bound test, and few are moved (about `k ln(n / k)` inserts of `n` keys in random order).
/// - larger `k` (amortised O(1) per push): a buffer of up to `2k + 8` entries, cut back to the best `k` by partial
///   selection when full.
#[derive(Debug)]
pub(crate) struct Selector {
    k: usize,
    cap: usize,
    /// Every key at least this one is out: the `k`-th key once `k` are held, `u64::MAX` before.
    bound: u64,
    /// Whether `buf` is kept sorted (small `k`).
    sorted: bool,
    /// Whether [`Selector::push_scores`] runs its AVX2 build (at [`SimdLevel::Avx2`] and above).
    #[cfg(target_arch = "x86_64")]
    avx2: bool,
    buf: Vec<Entry>,
}

/// Lanes of [`seed_cut`]: the scores are read as this many interleaved groups (score `i` in group `i % SEED_LANES`).
const SEED_LANES: usize = 32;

/// A score key that at least `k` of `scores` reach (are at most), so that no score past it is among their best
/// `k`: the key of the `k`-th best of the groups' best scores ([`SEED_LANES`] groups, each best a distinct score);
/// `u32::MAX` (no cut) with fewer than `SEED_LANES` scores, `k > SEED_LANES`, or fewer than `k` groups with a
/// number. A fresh selector's filter, so that the scores of its first run are not all pushed until `k` are held and
/// then most pushed again as the bound tightens (256 scores with `k` 10: about 47 pushes without it, about 12 with
/// it). Branch-free loops of compares, minima and maxima (a partial sort of the 32 keys cost as much as the rest of
/// the selection).
#[inline(always)]
fn seed_cut(scores: &[f32], order: Order, k: usize) -> u32 {
    match order {
        Order::HigherFirst => seed_cut_by(scores, order, k, f32::max, |a, b| a >= b),
        Order::LowerFirst => seed_cut_by(scores, order, k, f32::min, |a, b| a <= b),
    }
}

/// [`seed_cut`] with `order`'s better of two scores (`f32::max` or `f32::min`, which ignore NaN) and its test
/// "at least as good as" (false for NaN).
#[inline(always)]
fn seed_cut_by(
    scores: &[f32],
    order: Order,
    k: usize,
    better: impl Fn(f32, f32) -> f32,
    at_least: impl Fn(f32, f32) -> bool,
) -> u32 {
    const L: usize = SEED_LANES;
    let mut runs = scores.chunks_exact(L);
    let (Some(first), true) = (runs.next(), (1..=L).contains(&k)) else {
        return u32::MAX;
    };
    // A group's best is NaN only if all its scores are.
    let mut best: [f32; L] = core::array::from_fn(|l| first[l]);
    for run in runs {
        for (b, s) in best.iter_mut().zip(run) {
            *b = better(*b, *s);
        }
    }
    // reach[c]: how many bests are at least as good as best c (none for a NaN). The best of the bests that at
    // least `k` reach is the `k`-th best number among them; a NaN best never counts, so the cut errs only wide.
    let mut reach = [0u32; L];
    for x in best {
        for (r, c) in reach.iter_mut().zip(best) {
            *r += u32::from(at_least(x, c));
        }
    }
    reach
        .iter()
        .zip(best)
        .map(|(r, c)| {
            if *r as usize >= k {
                score_key(c, order)
            } else {
                u32::MAX
            }
        })
        .fold(u32::MAX, u32::min)
}

/// Bit `l` set where `at_least(ch[l], t)`, for 16 scores.
#[inline(always)]
fn mask16(ch: &[f32], t: f32, at_least: impl Fn(f32, f32) -> bool) -> u32 {
    ch[..16]
        .iter()
        .enumerate()
        .fold(0u32, |m, (l, s)| m | (u32::from(at_least(*s, t)) << l))
}

/// [`mask16`] with `>=` (`HIGHER`) or `<=`, as two 8-lane compares (ordered: false for NaN, as Rust's) and their
/// sign masks.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn mask16_avx2<const HIGHER: bool>(ch: &[f32], t: f32) -> u32 {
    use core::arch::x86_64::*;
    let ch = &ch[..16];
    // SAFETY: `ch` holds 16 values; the loads read values 0 .. 8 and 8 .. 16 (unaligned loads).
    let (a, b) = unsafe {
        (
            _mm256_loadu_ps(ch.as_ptr()),
            _mm256_loadu_ps(ch.as_ptr().add(8)),
        )
    };
    let t = _mm256_set1_ps(t);
    let (ma, mb) = if HIGHER {
        (
            _mm256_cmp_ps::<_CMP_GE_OQ>(a, t),
            _mm256_cmp_ps::<_CMP_GE_OQ>(b, t),
        )
    } else {
        (
            _mm256_cmp_ps::<_CMP_LE_OQ>(a, t),
            _mm256_cmp_ps::<_CMP_LE_OQ>(b, t),
        )
    };
    (_mm256_movemask_ps(ma) as u32) | ((_mm256_movemask_ps(mb) as u32) << 8)
}

/// The score a cut of score keys stands for: every non-NaN score whose key is at most `cut` is at least as good as
/// it (`>=` higher first, `<=` lower first; exactly those, unless `cut` is no score's key), and NaN never is. `None`
/// where it would be NaN (`cut` is NaN's key, `u32::MAX`, or past every number's): no filter then.
#[inline]
fn cut_score(cut: u32, order: Order) -> Option<f32> {
    // `score_key` backwards: undo the complement, then the sign flip.
    let ascending = match order {
        Order::LowerFirst => cut,
        Order::HigherFirst => !cut,
    };
    let bits = if ascending & 0x8000_0000 != 0 {
        ascending & 0x7fff_ffff
    } else {
        !ascending
    };
    let t = f32::from_bits(bits);
    (!t.is_nan()).then_some(t)
}

impl Selector {
    /// A selector of the best `k`, whose [`Selector::push_scores`] runs at `level` (the same entries at any).
    pub fn new(k: usize, level: SimdLevel) -> Selector {
        // Elsewhere the baseline build is the only one (NEON is aarch64's baseline).
        #[cfg(not(target_arch = "x86_64"))]
        let _ = level;
        // k = 0 is refused before any selection (`KOutOfRange`); a sorted list of 0 would never drop an entry.
        debug_assert!(k > 0, "a selector of the best 0");
        let sorted = k <= SORTED_MAX_K;
        Selector {
            k,
            cap: 2 * k + 8,
            bound: u64::MAX,
            sorted,
            #[cfg(target_arch = "x86_64")]
            // The CPU's own check too, so that the AVX2 build's soundness does not rest on every caller's level.
            avx2: level >= SimdLevel::Avx2 && std::is_x86_feature_detected!("avx2"),
            buf: if sorted {
                Vec::with_capacity(k)
            } else {
                Vec::new()
            },
        }
    }

    #[inline]
    pub fn push(&mut self, key: u64, score: f32) {
        if key >= self.bound {
            return;
        }
        if self.sorted {
            self.insert(Entry { key, score });
            return;
        }
        self.buf.push(Entry { key, score });
        if self.buf.len() >= self.cap {
            self.shrink();
        }
    }

    /// The sorted list's push of an entry that beats the bound: the `k`-th leaves if the list is full, the entry goes
    /// in its place (searched from the worst end, where most land), and the bound becomes the new `k`-th key.
    #[inline]
    fn insert(&mut self, e: Entry) {
        let buf = &mut self.buf;
        if buf.len() == self.k {
            buf.pop();
        }
        let mut i = buf.len();
        buf.push(e);
        while i > 0 && buf[i - 1].key > e.key {
            buf[i] = buf[i - 1];
            i -= 1;
        }
        buf[i] = e;
        if buf.len() == self.k {
            self.bound = buf[self.k - 1].key;
        }
    }

    /// `push(pair_key(scores[i], first_id + i, order), scores[i])` for every `i`, 16 scores at a time: the scores
    /// compared with the score of the bound's key (and of [`seed_cut`]'s on a fresh small-`k` selector, see
    /// [`cut_score`]) into a mask, as floats, and only the scores of its set lanes pushed one by one. The same
    /// entries as the loop of pushes, at a fraction of its cost once the selector is full and most scores are out.
    pub fn push_scores(&mut self, scores: &[f32], first_id: u32, order: Order) {
        #[cfg(target_arch = "x86_64")]
        if self.avx2 {
            // SAFETY: `avx2` is set only where the CPU reports AVX2 (`Selector::new` checks it).
            unsafe { self.push_scores_avx2(scores, first_id, order) };
            return;
        }
        self.push_scores_any(scores, first_id, order);
    }

    /// [`Selector::push_scores`] built for AVX2: the same steps, [`seed_cut`]'s loops 8 lanes at a time and the mask
    /// of 16 compares from two (the baseline build, SSE2, built it bit by bit: 18 % slower knn of 256 queries over
    /// 256 rows).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn push_scores_avx2(&mut self, scores: &[f32], first_id: u32, order: Order) {
        match order {
            Order::HigherFirst => {
                self.push_run(scores, first_id, order, |ch, t| mask16_avx2::<true>(ch, t))
            }
            Order::LowerFirst => {
                self.push_run(scores, first_id, order, |ch, t| mask16_avx2::<false>(ch, t))
            }
        }
    }

    /// [`Selector::push_scores`] for whatever the caller is built for.
    #[inline(always)]
    fn push_scores_any(&mut self, scores: &[f32], first_id: u32, order: Order) {
        match order {
            Order::HigherFirst => self.push_run(scores, first_id, order, |ch, t| {
                mask16(ch, t, |s, t| s >= t)
            }),
            Order::LowerFirst => self.push_run(scores, first_id, order, |ch, t| {
                mask16(ch, t, |s, t| s <= t)
            }),
        }
    }

    /// [`Selector::push_scores`] with `order`'s test of a score against the cut's score (see [`cut_score`]).
    #[inline(always)]
    fn push_run(
        &mut self,
        scores: &[f32],
        first_id: u32,
        order: Order,
        mask: impl Fn(&[f32], f32) -> u32,
    ) {
        const W: usize = 16;
        let seed = if self.sorted && self.bound == u64::MAX {
            seed_cut(scores, order, self.k)
        } else {
            u32::MAX
        };
        let mut chunks = scores.chunks_exact(W);
        let mut id = first_id;
        for ch in chunks.by_ref() {
            // A pair key beats the bound only if its score key is at most the bound's, so only if its score is at
            // least the cut's score; a superset of those is fine (`push` tests the whole key).
            let cut = ((self.bound >> 32) as u32).min(seed);
            let mut mask = match cut_score(cut, order) {
                Some(t) => mask(ch, t),
                None => (1 << W) - 1,
            };
            while mask != 0 {
                let l = mask.trailing_zeros() as usize;
                mask &= mask - 1;
                self.push(pair_key(ch[l], id.wrapping_add(l as u32), order), ch[l]);
            }
            id = id.wrapping_add(W as u32);
        }
        for (l, s) in chunks.remainder().iter().enumerate() {
            self.push(pair_key(*s, id.wrapping_add(l as u32), order), *s);
        }
    }

    fn shrink(&mut self) {
        let k = self.k;
        if self.buf.len() > k {
            self.buf.select_nth_unstable_by_key(k - 1, |e| e.key);
            self.buf.truncate(k);
        }
        if self.buf.len() == k {
            // Keys are unique (the id is part of the key), so everything not better than the k-th is out.
            self.bound = self.buf.iter().map(|e| e.key).max().unwrap_or(u64::MAX);
        }
    }

    pub fn merge(&mut self, other: Selector) {
        for e in other.buf {
            // A sorted list's later entries are worse still: once one is out, all are.
            if other.sorted && e.key >= self.bound {
                break;
            }
            self.push(e.key, e.score);
        }
    }

    /// The best `k` entries, best first.
    pub fn finish(mut self) -> Vec<Entry> {
        if !self.sorted {
            self.shrink();
            self.buf.sort_unstable_by_key(|e| e.key);
        }
        self.buf
    }
}

/// Top-k of each row of a score matrix (`n_queries * n_cols`, row-major): per row, the `k` best
/// (score, column) pairs under `order`. Scores must be finite.
pub fn topk(scores: &[f32], n_cols: usize, k: usize, order: Order) -> Result<TopK, CpuError> {
    if n_cols == 0 || scores.is_empty() {
        return Err(CpuError::Empty { what: "scores" });
    }
    if !scores.len().is_multiple_of(n_cols) {
        return Err(CpuError::RaggedMatrix {
            what: "scores",
            len: scores.len(),
            dim: n_cols,
        });
    }
    if n_cols > u32::MAX as usize {
        return Err(CpuError::TooLarge {
            what: "score columns",
            len: n_cols,
            max: u32::MAX as usize,
        });
    }
    if k == 0 || k > n_cols {
        return Err(CpuError::KOutOfRange { k, n: n_cols });
    }
    crate::check_finite("scores", scores)?;
    let n_queries = scores.len() / n_cols;
    let level = crate::simd_level();
    let mut ids = vec![0u32; n_queries * k];
    let mut out = vec![0f32; n_queries * k];
    let work = |((row, ids), out): ((&[f32], &mut [u32]), &mut [f32])| {
        let mut sel = Selector::new(k, level);
        sel.push_scores(row, 0, order);
        write_entries(&sel.finish(), ids, out);
    };
    if scores.len() >= crate::PAR_MIN_WORK {
        crate::in_pool(|| {
            scores
                .par_chunks_exact(n_cols)
                .zip(ids.par_chunks_exact_mut(k))
                .zip(out.par_chunks_exact_mut(k))
                .for_each(work)
        });
    } else {
        scores
            .chunks_exact(n_cols)
            .zip(ids.chunks_exact_mut(k))
            .zip(out.chunks_exact_mut(k))
            .for_each(work);
    }
    Ok(TopK {
        k,
        ids,
        scores: out,
    })
}

pub(crate) fn write_entries(entries: &[Entry], ids: &mut [u32], scores: &mut [f32]) {
    for ((e, i), s) in entries.iter().zip(ids.iter_mut()).zip(scores.iter_mut()) {
        *i = e.key as u32;
        *s = e.score;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `len` scores drawn by the LCG `s` from ties, signed zeros, infinities and a NaN.
    fn awkward_scores(s: &mut u64, len: usize) -> Vec<f32> {
        (0..len)
            .map(|_| {
                *s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                AWKWARD[(*s >> 33) as usize % AWKWARD.len()]
            })
            .collect()
    }

    /// The scores [`awkward_scores`] draws from.
    const AWKWARD: [f32; 9] = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        3.0,
    ];

    /// `push_scores` keeps the same entries as a push per score (and as a sort of all the pairs), at every level of
    /// the machine (its AVX2 build and the baseline's), in both orders, for runs of every length around
    /// its 16-score groups, with ties, signed zeros, infinities and NaNs, and ids near the top of the range.
    #[test]
    fn push_scores_is_a_push_per_score() {
        let mut s = 0x2545_F491_4F6C_DD1Du64;
        for len in (0..=80usize).chain([127, 128, 129, 300]) {
            for k in [1, 2, 5, 16, 31, 32, 33, 40] {
                for order in [Order::HigherFirst, Order::LowerFirst] {
                    for first_id in [0u32, 17, u32::MAX - 300] {
                        let scores = awkward_scores(&mut s, len);
                        let mut one = Selector::new(k, SimdLevel::Scalar);
                        for (i, v) in scores.iter().enumerate() {
                            one.push(pair_key(*v, first_id + i as u32, order), *v);
                        }
                        // Two runs, so the second starts with a full selector and a bound.
                        let (a, b) = scores.split_at(len / 2);
                        let batched: Vec<Selector> = crate::available_levels()
                            .into_iter()
                            .map(|level| {
                                let mut sel = Selector::new(k, level);
                                sel.push_scores(a, first_id, order);
                                sel.push_scores(b, first_id + a.len() as u32, order);
                                sel
                            })
                            .collect();
                        let bits = |e: Vec<Entry>| {
                            e.iter()
                                .map(|e| (e.key, e.score.to_bits()))
                                .collect::<Vec<_>>()
                        };
                        // And both are the best `k` of all the pairs, sorted.
                        let mut all: Vec<(u64, u32)> = scores
                            .iter()
                            .enumerate()
                            .map(|(i, v)| (pair_key(*v, first_id + i as u32, order), v.to_bits()))
                            .collect();
                        all.sort_unstable();
                        all.truncate(k);
                        let one = bits(one.finish());
                        assert_eq!(one, all, "{scores:?} k {k} {order:?}");
                        for sel in batched {
                            assert_eq!(bits(sel.finish()), one, "{scores:?} k {k} {order:?}");
                        }
                    }
                }
            }
        }
    }

    /// A score whose key is at most a cut is always at least the cut's score (the filter of `push_scores` keeps a
    /// superset of the pairs that can beat the bound), for cuts of every kind of score and cuts no score has.
    #[test]
    fn cut_score_keeps_every_score_within_the_cut() {
        let specials = [
            0.0f32,
            -0.0,
            1.0,
            -1.0,
            f32::MIN_POSITIVE,
            -f32::MIN_POSITIVE,
            f32::from_bits(1),
            f32::from_bits(0x8000_0001),
            f32::MAX,
            f32::MIN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            -f32::NAN,
        ];
        let mut s = 0x9E37_79B9_7F4A_7C15u64;
        let mut scores: Vec<f32> = specials.to_vec();
        for _ in 0..2000 {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            scores.push(f32::from_bits((s >> 32) as u32));
        }
        for order in [Order::HigherFirst, Order::LowerFirst] {
            let cuts = scores
                .iter()
                .map(|v| score_key(*v, order))
                .chain(scores.iter().map(|v| v.to_bits()))
                .chain([0, 1, 0x7fff_ffff, 0x8000_0000, u32::MAX - 1, u32::MAX]);
            for cut in cuts {
                let t = cut_score(cut, order);
                for v in &scores {
                    let within = score_key(*v, order) <= cut;
                    let kept = match t {
                        None => true,
                        Some(t) if order == Order::HigherFirst => *v >= t,
                        Some(t) => *v <= t,
                    };
                    assert!(!within || kept, "{v:e} cut {cut:#x} {order:?}: {t:?}");
                    if let Some(t) = t
                        && score_key(t, order) == cut
                        && !v.is_nan()
                    {
                        assert_eq!(within, kept, "{v:e} cut {cut:#x} {order:?}");
                    }
                }
            }
        }
    }

    /// `seed_cut` is reached by at least `k` of the scores, for runs with ties, infinities and NaNs.
    #[test]
    fn seed_cut_is_reached_by_k_scores() {
        let mut s = 0x2545_F491_4F6C_DD1Du64;
        for len in [0usize, 31, 32, 33, 64, 100, 256] {
            for k in [1usize, 2, 10, 32, 33] {
                for order in [Order::HigherFirst, Order::LowerFirst] {
                    let scores = awkward_scores(&mut s, len);
                    let cut = seed_cut(&scores, order, k);
                    let reach = scores
                        .iter()
                        .filter(|v| score_key(**v, order) <= cut)
                        .count();
                    assert!(reach >= k.min(len), "len {len} k {k} {order:?}: {reach}");
                    if len < SEED_LANES || k > SEED_LANES {
                        assert_eq!(cut, u32::MAX);
                    }
                }
            }
        }
    }
}
