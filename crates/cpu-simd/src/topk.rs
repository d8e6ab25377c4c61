//! Top-k selection under the total order of `docs/numerics.md` ("Top-k" and "Top-k: the CPU's selection
//! key and non-finite scores"). Every (score, id) pair becomes one `u64` key, smaller is better, so any
//! selection algorithm returns the same list.

use crate::CpuError;
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
/// `u32::MAX`, after every number.
#[inline]
pub fn score_key(score: f32, order: Order) -> u32 {
    if score.is_nan() {
        return u32::MAX;
    }
    let bits = (score + 0.0).to_bits();
    let ascending = if bits & 0x8000_0000 != 0 {
        !bits
    } else {
        bits | 0x8000_0000
    };
    match order {
        Order::LowerFirst => ascending,
        Order::HigherFirst => !ascending,
    }
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

/// Keeps the best `k` entries pushed into it (amortised O(1) per push): a buffer of up to `2k + 8`
/// entries, cut back to the best `k` by partial selection when full.
#[derive(Debug)]
pub(crate) struct Selector {
    k: usize,
    cap: usize,
    bound: u64,
    buf: Vec<Entry>,
}

impl Selector {
    pub fn new(k: usize) -> Selector {
        let cap = 2 * k + 8;
        Selector {
            k,
            cap,
            bound: u64::MAX,
            buf: Vec::new(),
        }
    }

    #[inline]
    pub fn push(&mut self, key: u64, score: f32) {
        if key >= self.bound {
            return;
        }
        self.buf.push(Entry { key, score });
        if self.buf.len() >= self.cap {
            self.shrink();
        }
    }

    /// `push(pair_key(scores[i], first_id + i, order), scores[i])` for every `i`, 16 scores at a time: their
    /// score keys computed branch-free (one vector pass), and only a group with a key that can beat the bound
    /// pushed one by one. The same entries as the loop of pushes, at a fraction of its cost once the selector
    /// is full and most scores are out.
    pub fn push_scores(&mut self, scores: &[f32], first_id: u32, order: Order) {
        const W: usize = 16;
        let mut chunks = scores.chunks_exact(W);
        let mut id = first_id;
        for ch in chunks.by_ref() {
            let keys: [u32; W] = core::array::from_fn(|l| score_key(ch[l], order));
            // A pair key beats the bound only if its score key is at most the bound's.
            let cut = (self.bound >> 32) as u32;
            if keys.iter().fold(false, |any, k| any | (*k <= cut)) {
                for (l, (k, s)) in keys.iter().zip(ch).enumerate() {
                    self.push(((*k as u64) << 32) | id.wrapping_add(l as u32) as u64, *s);
                }
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
            self.push(e.key, e.score);
        }
    }

    /// The best `k` entries, best first.
    pub fn finish(mut self) -> Vec<Entry> {
        self.shrink();
        self.buf.sort_unstable_by_key(|e| e.key);
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
    let mut ids = vec![0u32; n_queries * k];
    let mut out = vec![0f32; n_queries * k];
    let work = |((row, ids), out): ((&[f32], &mut [u32]), &mut [f32])| {
        let mut sel = Selector::new(k);
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

    /// `push_scores` keeps the same entries as a push per score, in both orders, for runs of every length around
    /// its 16-score groups, with ties, signed zeros, infinities and NaNs, and ids near the top of the range.
    #[test]
    fn push_scores_is_a_push_per_score() {
        let pool = [
            0.0f32,
            -0.0,
            1.0,
            -1.0,
            0.5,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            3.0,
        ];
        let mut s = 0x2545_F491_4F6C_DD1Du64;
        for len in 0..=80usize {
            for k in [1, 2, 5, 16, 40] {
                for order in [Order::HigherFirst, Order::LowerFirst] {
                    for first_id in [0u32, 17, u32::MAX - 200] {
                        let scores: Vec<f32> = (0..len)
                            .map(|_| {
                                s = s
                                    .wrapping_mul(6364136223846793005)
                                    .wrapping_add(1442695040888963407);
                                pool[(s >> 33) as usize % pool.len()]
                            })
                            .collect();
                        let mut one = Selector::new(k);
                        for (i, v) in scores.iter().enumerate() {
                            one.push(pair_key(*v, first_id + i as u32, order), *v);
                        }
                        // Two runs, so the second starts with a full selector and a bound.
                        let (a, b) = scores.split_at(len / 2);
                        let mut batched = Selector::new(k);
                        batched.push_scores(a, first_id, order);
                        batched.push_scores(b, first_id + a.len() as u32, order);
                        let bits = |e: Vec<Entry>| {
                            e.iter()
                                .map(|e| (e.key, e.score.to_bits()))
                                .collect::<Vec<_>>()
                        };
                        assert_eq!(
                            bits(batched.finish()),
                            bits(one.finish()),
                            "{scores:?} k {k} {order:?}"
                        );
                    }
                }
            }
        }
    }
}
