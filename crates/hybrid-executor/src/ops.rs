//! The ops beyond cosine scores, as [`Op`]s: each validates once, then goes through `Executor::run_op`
//! (policy, break-even, breaker, OOM splitting by queries, fallback, tenants, metrics).

use crate::backend::{Backend, BackendError, FastFormat};
use crate::executor::{CallOptions, CorpusCheck, ExecError, Executor, Mode, Outcome};
use crate::op::{Op, OpKind};
use crate::shared_corpus::SharedCorpus;
use rayon::prelude::*;
use recall_cpu_simd::{
    Corpus, CpuError, KMeans, Metric, Spread, SpreadGraph, SpreadParams, TopK,
    check_candidate_rows, check_clip_noise_shape, check_kmeans_inputs, check_matrix,
    check_matrix_shape, check_spread_inputs,
};
use std::ops::Range;

/// An open-addressing set of u32 ids that is emptied in O(1) between lists: a slot holds
/// `(generation << 32) | id` and counts as empty unless its generation is the current one.
#[derive(Default)]
struct DupTable {
    slots: Vec<u64>,
    generation: u32,
}

impl DupTable {
    /// Whether `list` holds an id twice.
    fn has_duplicate(&mut self, list: &[u32]) -> bool {
        if list.len() < 2 {
            return false;
        }
        let bits = (2 * list.len()).next_power_of_two().trailing_zeros();
        let cap = 1usize << bits;
        if self.slots.len() < cap {
            self.slots = vec![0; cap];
            self.generation = 0;
        }
        self.generation = self.generation.wrapping_add(1);
        if self.generation == 0 {
            // Wrapped: stamps of the old generation 1 would read as present.
            self.slots.fill(0);
            self.generation = 1;
        }
        let g = self.generation;
        let mask = cap - 1;
        for &id in list {
            // Fibonacci hashing: the top `bits` bits of the product.
            let mut h = (u64::from(id).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - bits)) as usize;
            loop {
                let s = self.slots[h];
                if (s >> 32) as u32 != g {
                    self.slots[h] = (u64::from(g) << 32) | u64::from(id);
                    break;
                }
                if s as u32 == id {
                    return true;
                }
                h = (h + 1) & mask;
            }
        }
        false
    }
}

pub(crate) fn check_k(k: usize, n: usize) -> Result<(), CpuError> {
    if k == 0 || k > n {
        Err(CpuError::KOutOfRange { k, n })
    } else {
        Ok(())
    }
}

fn append_topk(acc: &mut TopK, part: TopK) {
    acc.ids.extend(part.ids);
    acc.scores.extend(part.scores);
}

/// Dense scores for any metric.
struct SimilarityOp<'a> {
    queries: &'a [f32],
    corpus: &'a [f32],
    dim: usize,
    metric: Metric,
    /// The corpus's value check, left to where the op runs.
    corpus_check: CorpusCheck,
}

impl Op for SimilarityOp<'_> {
    type Output = Vec<f32>;
    fn kind(&self) -> OpKind {
        let rows = self.corpus.len() / self.dim;
        if crate::calibration::probe_shape::is_scores_batch(self.units(), rows, self.dim) {
            OpKind::SimilarityBatch
        } else {
            OpKind::Similarity
        }
    }
    fn work(&self) -> u64 {
        let rows = self.corpus.len() / self.dim;
        if self.kind() == OpKind::SimilarityBatch {
            return crate::calibration::probe_shape::batch_work(self.units(), rows, self.dim);
        }
        (self.queries.len() as u64).saturating_mul(rows as u64)
    }
    fn units(&self) -> usize {
        self.queries.len() / self.dim
    }
    fn device_bytes(&self, range: Range<usize>) -> u64 {
        let (q, n, d) = (
            range.len() as u64,
            (self.corpus.len() / self.dim) as u64,
            self.dim as u64,
        );
        4 * (q * d + n * d + q + n + q * n)
    }
    fn run(&self, backend: &dyn Backend, range: Range<usize>) -> Result<Vec<f32>, BackendError> {
        self.corpus_check.before(backend, self.corpus)?;
        backend.similarity(
            &self.queries[range.start * self.dim..range.end * self.dim],
            self.corpus,
            self.dim,
            self.metric,
        )
    }
    fn append(&self, acc: &mut Vec<f32>, part: Vec<f32>) {
        acc.extend_from_slice(&part);
    }
}

/// Similarity fused with top-k.
struct KnnOp<'a> {
    queries: &'a [f32],
    corpus: &'a [f32],
    dim: usize,
    metric: Metric,
    k: usize,
    /// Set when the corpus is a shared one (the backend may keep it resident).
    shared: Option<&'a SharedCorpus>,
    mode: Mode,
    /// The corpus's value check, left to where the op runs (done for a shared corpus, when it was made).
    corpus_check: CorpusCheck,
}

impl Op for KnnOp<'_> {
    type Output = TopK;
    fn kind(&self) -> OpKind {
        if self.shared.is_some() {
            OpKind::KnnResident
        } else if crate::calibration::probe_shape::is_batch(
            self.units(),
            self.corpus.len() / self.dim,
        ) {
            // Its own break-even: see `OpKind::KnnBatch` and `calibration::probe_shape::BATCH_QUERIES`.
            OpKind::KnnBatch
        } else {
            OpKind::Knn
        }
    }
    fn work(&self) -> u64 {
        let rows = self.corpus.len() / self.dim;
        if self.kind() == OpKind::KnnBatch {
            return crate::calibration::probe_shape::batch_work(self.units(), rows, self.dim);
        }
        (self.queries.len() as u64).saturating_mul(rows as u64)
    }
    fn units(&self) -> usize {
        self.queries.len() / self.dim
    }
    fn device_bytes(&self, range: Range<usize>) -> u64 {
        let (q, n, d) = (
            range.len() as u64,
            (self.corpus.len() / self.dim) as u64,
            self.dim as u64,
        );
        // queries, corpus, norms, one bounded chunk of scores (at most 1 GiB)
        4 * (q * d + n * d + q + n) + (4 * q * n).min(1 << 30)
    }
    fn run(&self, backend: &dyn Backend, range: Range<usize>) -> Result<TopK, BackendError> {
        self.corpus_check.before(backend, self.corpus)?;
        let q = &self.queries[range.start * self.dim..range.end * self.dim];
        let fast = match self.mode {
            Mode::Exact => None,
            Mode::FastF16 => Some(FastFormat::F16),
            Mode::FastBf16 => Some(FastFormat::Bf16),
        };
        match (self.shared, fast) {
            (Some(c), None) => backend.knn_shared(q, c, self.metric, self.k),
            (None, None) => backend.knn(q, self.corpus, self.dim, self.metric, self.k),
            (Some(c), Some(f)) => backend.knn_shared_fast(q, c, self.metric, self.k, f),
            (None, Some(f)) => backend.knn_fast(q, self.corpus, self.dim, self.metric, self.k, f),
        }
    }
    fn append(&self, acc: &mut TopK, part: TopK) {
        append_topk(acc, part);
    }
}

/// Top-k over per-query candidate lists.
struct CandidatesOp<'a> {
    queries: &'a [f32],
    corpus: &'a [f32],
    dim: usize,
    metric: Metric,
    offsets: &'a [usize],
    ids: &'a [u32],
    k: usize,
    /// Set when the corpus is a shared one (the backend may keep it resident).
    shared: Option<&'a SharedCorpus>,
    /// The value check of the rows the lists name in a plain slice (done for a shared corpus, when it was made).
    /// The CPU makes it in its scoring pass; before a GPU runs the op it is made here, once per call.
    corpus_check: CorpusCheck,
}

impl Op for CandidatesOp<'_> {
    type Output = TopK;
    fn kind(&self) -> OpKind {
        if self.shared.is_some() {
            OpKind::ScoreCandidatesResident
        } else {
            OpKind::ScoreCandidates
        }
    }
    fn work(&self) -> u64 {
        (self.ids.len() as u64).saturating_mul(self.dim as u64)
    }
    fn units(&self) -> usize {
        self.queries.len() / self.dim
    }
    fn device_bytes(&self, range: Range<usize>) -> u64 {
        let cands = (self.offsets[range.end] - self.offsets[range.start]) as u64;
        4 * (range.len() as u64 * self.dim as u64 + self.corpus.len() as u64) + 12 * cands
    }
    fn run(&self, backend: &dyn Backend, range: Range<usize>) -> Result<TopK, BackendError> {
        self.corpus_check.before_with(backend, || {
            check_candidate_rows(&Corpus::f32(self.corpus, self.dim), self.ids)
        })?;
        let base = self.offsets[range.start];
        let offsets: Vec<usize> = self.offsets[range.start..=range.end]
            .iter()
            .map(|o| o - base)
            .collect();
        let ids = &self.ids[base..self.offsets[range.end]];
        let queries = &self.queries[range.start * self.dim..range.end * self.dim];
        match self.shared {
            Some(c) => {
                backend.score_candidates_shared(queries, c, self.metric, &offsets, ids, self.k)
            }
            None => backend.score_candidates(
                queries,
                self.corpus,
                self.dim,
                self.metric,
                &offsets,
                ids,
                self.k,
            ),
        }
    }
    fn append(&self, acc: &mut TopK, part: TopK) {
        append_topk(acc, part);
    }
}

/// Activation spreading (one unit: hops depend on each other).
struct SpreadOp<'a> {
    graph: &'a SpreadGraph,
    seeds: &'a [f32],
    params: &'a SpreadParams,
}

impl Op for SpreadOp<'_> {
    type Output = Spread;
    fn kind(&self) -> OpKind {
        OpKind::Spread
    }
    fn work(&self) -> u64 {
        (self.graph.n_edges() as u64).saturating_mul(self.params.hops as u64)
    }
    fn device_bytes(&self, _: Range<usize>) -> u64 {
        // The graph (pull arrays, class lists, out-edge targets: 20 B a node, 12 an edge) and the call's
        // buffers (activations, lists, bitmap, seed pairs: about 22 B a node).
        (self.graph.n_nodes() as u64) * 44 + (self.graph.n_edges() as u64) * 12
    }
    fn run(&self, backend: &dyn Backend, _: Range<usize>) -> Result<Spread, BackendError> {
        backend.spread(self.graph, self.seeds, self.params)
    }
    fn append(&self, _: &mut Spread, _: Spread) {}
}

/// k-means (one unit: iterations depend on each other).
struct KMeansOp<'a> {
    points: &'a [f32],
    dim: usize,
    k: usize,
    iters: usize,
    seed: u64,
}

impl Op for KMeansOp<'_> {
    type Output = KMeans;
    fn kind(&self) -> OpKind {
        OpKind::KMeans
    }
    fn work(&self) -> u64 {
        (self.points.len() as u64)
            .saturating_mul(self.k as u64)
            .saturating_mul(self.iters as u64)
    }
    fn device_bytes(&self, _: Range<usize>) -> u64 {
        let n = (self.points.len() / self.dim) as u64;
        4 * self.points.len() as u64 + 4 * (self.k * self.dim) as u64 + 16 * n
    }
    fn run(&self, backend: &dyn Backend, _: Range<usize>) -> Result<KMeans, BackendError> {
        backend.kmeans(self.points, self.dim, self.k, self.iters, self.seed)
    }
    fn append(&self, _: &mut KMeans, _: KMeans) {}
}

/// Clip-and-noise of inputs of checked shape and parameters into a buffer (the caller's, or a fresh one), held
/// here for the backend that runs the op: the GPU's, then the CPU's if the GPU fails; each checks the values
/// (`Backend::clip_and_noise_into`: the CPU in the op's own pass) and writes every value. Row `r`'s
/// noise depends on its absolute row number, so the op runs whole (one unit).
struct NoiseOp<'a, 'o> {
    x: &'a [f32],
    dim: usize,
    clip: f32,
    sigma: f32,
    seed: u64,
    out: parking_lot::Mutex<&'o mut [f32]>,
}

impl Op for NoiseOp<'_, '_> {
    type Output = ();
    fn kind(&self) -> OpKind {
        OpKind::ClipAndNoise
    }
    fn work(&self) -> u64 {
        self.x.len() as u64
    }
    fn device_bytes(&self, _: Range<usize>) -> u64 {
        8 * self.x.len() as u64 + 4 * (self.x.len() / self.dim) as u64
    }
    fn run(&self, backend: &dyn Backend, _: Range<usize>) -> Result<(), BackendError> {
        let mut out = self.out.lock();
        backend.clip_and_noise_into(self.x, self.dim, self.clip, self.sigma, self.seed, &mut out)
    }
    fn append(&self, _: &mut (), _: ()) {}
}

impl Executor {
    /// [`Executor::clip_and_noise`] into `out`, which must hold `x.len()` values: for a caller that reuses its
    /// output (a fresh one of hundreds of MB costs a first touch of every page, on any device).
    #[allow(clippy::too_many_arguments)]
    pub fn clip_and_noise_into(
        &self,
        opts: &CallOptions,
        x: &[f32],
        dim: usize,
        clip: f32,
        sigma: f32,
        seed: u64,
        out: &mut [f32],
    ) -> Result<Outcome<()>, ExecError> {
        // The values are checked by the backend that runs the op (`Backend::clip_and_noise_into`).
        check_clip_noise_shape(x, dim, clip, sigma)?;
        recall_cpu_simd::check_clip_noise_output(x.len(), out.len())?;
        self.run_op(
            &NoiseOp {
                x,
                dim,
                clip,
                sigma,
                seed,
                out: parking_lot::Mutex::new(out),
            },
            opts,
        )
    }

    /// Clip each row of `x` (`n x dim`) to L2 norm `clip` (> 0), then add `sigma` (>= 0) times standard
    /// normal noise from `seed`'s counter-based stream: the same values on every device.
    pub fn clip_and_noise(
        &self,
        opts: &CallOptions,
        x: &[f32],
        dim: usize,
        clip: f32,
        sigma: f32,
        seed: u64,
    ) -> Result<Outcome<Vec<f32>>, ExecError> {
        let mut out = recall_cpu_simd::output_buffer(x.len());
        let o = self.clip_and_noise_into(opts, x, dim, clip, sigma, seed, &mut out)?;
        Ok(Outcome {
            value: out,
            device: o.device,
            fallback: o.fallback,
        })
    }

    /// All `n_queries x n_rows` scores for `metric`, query-major.
    pub fn similarity(
        &self,
        opts: &CallOptions,
        queries: &[f32],
        corpus: &[f32],
        dim: usize,
        metric: Metric,
    ) -> Result<Outcome<Vec<f32>>, ExecError> {
        check_matrix("queries", queries, dim)?;
        // The corpus's values are checked by the op: before a GPU runs it, or by the CPU in its own pass.
        check_matrix_shape("corpus", corpus, dim)?;
        self.run_op(
            &SimilarityOp {
                queries,
                corpus,
                dim,
                metric,
                corpus_check: CorpusCheck::pending(),
            },
            opts,
        )
    }

    /// The `k` best corpus rows per query (1 <= k <= n_rows), best first, ties to the lower id.
    pub fn knn(
        &self,
        opts: &CallOptions,
        queries: &[f32],
        corpus: &[f32],
        dim: usize,
        metric: Metric,
        k: usize,
    ) -> Result<Outcome<TopK>, ExecError> {
        check_matrix("queries", queries, dim)?;
        // The corpus's values are checked by the op: before a GPU runs it, or by the CPU in its own pass.
        let n = check_matrix_shape("corpus", corpus, dim)?;
        recall_cpu_simd::check_corpus_rows(n)?;
        check_k(k, n)?;
        self.run_op(
            &KnnOp {
                queries,
                corpus,
                dim,
                metric,
                k,
                shared: None,
                mode: opts.mode,
                corpus_check: CorpusCheck::pending(),
            },
            opts,
        )
    }

    /// [`Executor::knn`] against a [`SharedCorpus`] (validated when it was made): on the GPU the corpus is
    /// uploaded once and stays on the device while the corpus lives.
    pub fn knn_shared(
        &self,
        opts: &CallOptions,
        queries: &[f32],
        corpus: &SharedCorpus,
        metric: Metric,
        k: usize,
    ) -> Result<Outcome<TopK>, ExecError> {
        let dim = corpus.dim();
        check_matrix("queries", queries, dim)?;
        check_k(k, corpus.n_rows())?;
        self.run_op(
            &KnnOp {
                queries,
                corpus: corpus.data(),
                dim,
                metric,
                k,
                shared: Some(corpus),
                mode: opts.mode,
                corpus_check: CorpusCheck::done(),
            },
            opts,
        )
    }

    /// The `k` best of each query's candidates `ids[offsets[q] .. offsets[q + 1]]` (corpus row ids, no
    /// duplicates within a list, `k` at most the shortest list). Only the rows the lists name are read, so only
    /// they are checked for NaN and infinity (an HNSW search's few candidates against a large corpus).
    #[allow(clippy::too_many_arguments)]
    pub fn score_candidates(
        &self,
        opts: &CallOptions,
        queries: &[f32],
        corpus: &[f32],
        dim: usize,
        metric: Metric,
        offsets: &[usize],
        ids: &[u32],
        k: usize,
    ) -> Result<Outcome<TopK>, ExecError> {
        let nq = check_matrix("queries", queries, dim)?;
        let n = check_matrix_shape("corpus", corpus, dim)?;
        check_candidates(nq, n, offsets, ids, k)?;
        self.run_op(
            &CandidatesOp {
                queries,
                corpus,
                dim,
                metric,
                offsets,
                ids,
                k,
                shared: None,
                corpus_check: CorpusCheck::pending(),
            },
            opts,
        )
    }

    /// [`Executor::score_candidates`] against a [`SharedCorpus`] (validated when it was made): on the GPU
    /// the corpus is uploaded once and stays on the device while the corpus lives.
    #[allow(clippy::too_many_arguments)]
    pub fn score_candidates_shared(
        &self,
        opts: &CallOptions,
        queries: &[f32],
        corpus: &SharedCorpus,
        metric: Metric,
        offsets: &[usize],
        ids: &[u32],
        k: usize,
    ) -> Result<Outcome<TopK>, ExecError> {
        let dim = corpus.dim();
        let nq = check_matrix("queries", queries, dim)?;
        check_candidates(nq, corpus.n_rows(), offsets, ids, k)?;
        self.run_op(
            &CandidatesOp {
                queries,
                corpus: corpus.data(),
                dim,
                metric,
                offsets,
                ids,
                k,
                shared: Some(corpus),
                corpus_check: CorpusCheck::done(),
            },
            opts,
        )
    }

    /// Activation spreading from `seeds` over `graph` (`docs/numerics.md`, "Activation spreading").
    pub fn spread(
        &self,
        opts: &CallOptions,
        graph: &SpreadGraph,
        seeds: &[f32],
        params: &SpreadParams,
    ) -> Result<Outcome<Spread>, ExecError> {
        check_spread_inputs(graph, seeds, params)?;
        self.run_op(
            &SpreadOp {
                graph,
                seeds,
                params,
            },
            opts,
        )
    }

    /// k-means of `points` (`n x dim`) into `k` clusters for `iters` Lloyd iterations from `seed`.
    pub fn kmeans(
        &self,
        opts: &CallOptions,
        points: &[f32],
        dim: usize,
        k: usize,
        iters: usize,
        seed: u64,
    ) -> Result<Outcome<KMeans>, ExecError> {
        check_kmeans_inputs(points, dim, k, iters)?;
        self.run_op(
            &KMeansOp {
                points,
                dim,
                k,
                iters,
                seed,
            },
            opts,
        )
    }
}

/// Ids per parallel piece of [`check_candidates`]' scans.
const CANDIDATE_PIECE: usize = 1 << 16;

/// Candidate lists for `nq` queries over `n` rows: offsets from 0 to `ids.len()`, non-decreasing; ids below
/// `n`, no duplicate within a list; `1 <= k <=` the shortest list.
fn check_candidates(
    nq: usize,
    n: usize,
    offsets: &[usize],
    ids: &[u32],
    k: usize,
) -> Result<(), ExecError> {
    if offsets.len() != nq + 1 {
        return Err(CpuError::LengthMismatch {
            what: "candidate offsets",
            expected: nq + 1,
            got: offsets.len(),
        }
        .into());
    }
    if offsets[0] != 0 || offsets[nq] != ids.len() || offsets.windows(2).any(|w| w[1] < w[0]) {
        return Err(CpuError::LengthMismatch {
            what: "candidate offsets (from 0 to ids.len(), non-decreasing)",
            expected: ids.len(),
            got: offsets[nq],
        }
        .into());
    }
    // Lists of more than one piece are checked in parallel on recall's pool; smaller ones on the calling thread,
    // with no hand-over (a candidate-scoring call is often a few hundred ids, and a hand-over costs tens of us).
    let parallel = ids.len() > CANDIDATE_PIECE;
    // The largest id first (pieces in parallel, each a vectorised maximum); the position of a bad one is
    // looked for only when there is one.
    let max_in = |c: &[u32]| c.iter().copied().max().unwrap_or(0);
    let max_id = if parallel {
        recall_cpu_simd::in_pool(|| {
            ids.par_chunks(CANDIDATE_PIECE)
                .map(max_in)
                .max()
                .unwrap_or(0)
        })
    } else {
        max_in(ids)
    };
    if !ids.is_empty()
        && max_id as usize >= n
        && let Some((index, &id)) = ids.iter().enumerate().find(|(_, id)| **id as usize >= n)
    {
        return Err(CpuError::IdOutOfRange {
            what: "candidate ids",
            index,
            id: u64::from(id),
            n,
        }
        .into());
    }
    let shortest = offsets.windows(2).map(|w| w[1] - w[0]).min().unwrap_or(0);
    check_k(k, shortest)?;
    // Duplicates: every list through a hash set in parallel; the first list with one reports its smallest
    // repeated id (found by sorting that list alone).
    let dup = |t: &mut DupTable, q: usize| t.has_duplicate(&ids[offsets[q]..offsets[q + 1]]);
    let bad = if parallel {
        recall_cpu_simd::in_pool(|| {
            (0..nq)
                .into_par_iter()
                .with_min_len(8)
                .map_init(DupTable::default, dup)
                .position_first(|d| d)
        })
    } else {
        let mut t = DupTable::default();
        (0..nq).position(|q| dup(&mut t, q))
    };
    if let Some(q) = bad {
        let mut list = ids[offsets[q]..offsets[q + 1]].to_vec();
        list.sort_unstable();
        if let Some(w) = list.windows(2).find(|w| w[0] == w[1]) {
            return Err(CpuError::DuplicateId { query: q, id: w[0] }.into());
        }
    }
    Ok(())
}

#[cfg(test)]
mod dup_tests {
    use super::DupTable;

    fn by_sort(list: &[u32]) -> bool {
        let mut v = list.to_vec();
        v.sort_unstable();
        v.windows(2).any(|w| w[0] == w[1])
    }

    #[test]
    fn the_hash_set_finds_exactly_the_lists_with_a_repeated_id() {
        let mut t = DupTable::default();
        let mut state = 0x1234_5678_9abc_def0u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let (mut with, mut without) = (0, 0);
        // Lists of many sizes through one table (generations reused, the table grown), ids from small
        // ranges (many repeats) and from the whole u32 range (few), and strided ids (hash collisions).
        for case in 0..3000u64 {
            let len = (next() % 2100) as usize;
            let range = [8u64, 5000, 1 << 32][(case % 3) as usize];
            let mut list: Vec<u32> = (0..len).map(|_| (next() % range) as u32).collect();
            if case % 7 == 0 {
                list = (0..len as u32).map(|i| i.wrapping_mul(1 << 20)).collect();
            }
            if case % 5 == 0 && len > 1 {
                let (a, b) = ((next() as usize) % len, (next() as usize) % len);
                list[a] = list[b];
            }
            let expected = by_sort(&list);
            assert_eq!(t.has_duplicate(&list), expected, "case {case}, len {len}");
            if expected {
                with += 1;
            } else {
                without += 1;
            }
        }
        assert!(
            with > 100 && without > 100,
            "{with} with, {without} without"
        );
    }

    #[test]
    fn a_wrapped_generation_clears_the_table() {
        let mut t = DupTable::default();
        assert!(!t.has_duplicate(&[1, 2, 3]));
        t.generation = u32::MAX;
        // Generation wraps to 0, the table is cleared and the stamps of generation 1 are gone.
        assert!(!t.has_duplicate(&[1, 2, 3]));
        assert!(t.has_duplicate(&[4, 5, 4]));
    }
}

#[cfg(test)]
mod size_tests {
    use crate::backend::{Backend, BackendError, CpuBackend};
    use crate::device::{Device, DevicePolicy};
    use crate::executor::{CallOptions, ExecError, Executor, ExecutorConfig};
    use recall_cpu_simd::{CpuError, Metric, TopK};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// A stand-in GPU that records whether it was asked.
    #[derive(Default)]
    struct Asked(AtomicBool);

    impl Backend for Asked {
        fn device(&self) -> Device {
            Device::Gpu { ordinal: 0 }
        }
        fn knn(
            &self,
            _: &[f32],
            _: &[f32],
            _: usize,
            _: Metric,
            _: usize,
        ) -> Result<TopK, BackendError> {
            self.0.store(true, Ordering::Relaxed);
            Err(BackendError::Gpu("stand-in".into()))
        }
    }

    /// knn of a corpus slice of more rows than `u32` ids is refused before any device runs it, as the CPU's
    /// knn refuses it: a GPU that streams the corpus merges per-chunk ids offset by the chunk's first row, which
    /// wrap past `u32::MAX`.
    #[test]
    #[ignore = "reserves 16 GiB of virtual memory (zero pages, never written)"]
    fn knn_over_more_rows_than_u32_ids_is_refused_before_a_device_runs() {
        let gpu = Arc::new(Asked::default());
        let exec = Executor::with_backends(
            ExecutorConfig {
                policy: DevicePolicy::Gpu,
                calibrate: false,
                use_cache: false,
                ..ExecutorConfig::default()
            },
            Arc::new(CpuBackend),
            Some(gpu.clone() as Arc<dyn Backend>),
        )
        .unwrap();
        let rows = u32::MAX as usize + 2;
        let corpus = vec![0.0f32; rows];
        let r = exec
            .knn(&CallOptions::default(), &[1.0], &corpus, 1, Metric::Dot, 1)
            .map(|o| o.value);
        assert!(
            matches!(r, Err(ExecError::InvalidInput(CpuError::TooLarge { len, .. })) if len == rows),
            "{r:?}"
        );
        assert!(!gpu.0.load(Ordering::Relaxed), "the GPU was asked");
    }
}
