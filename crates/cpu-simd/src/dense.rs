//! Dense similarity, fused top-k and candidate scoring (`docs/numerics.md`, "Dot product, norms and the
//! dense metrics" and "Top-k").

use crate::kernels::{self, DOT, L2, Queries};
use crate::simd::Cpu;
use crate::topk::{Order, Selector, TopK, pair_key, write_entries};
use crate::{CpuError, PAR_MIN_WORK, check_finite, in_pool, pool_threads, reference};
use half::{bf16, f16};
use rayon::prelude::*;

/// Bytes of corpus rows processed per block (one block's rows stay in L2 while every query visits them).
const BLOCK_BYTES: usize = 256 * 1024;
/// Ranges of corpus blocks per rayon thread in a many-row `knn` (see there).
const TASKS_PER_THREAD: usize = 4;

/// Corpus rows per block for dimension `dim`: a multiple of 64 (four 16-row tiles) when that fits,
/// else of 16; at least 16.
pub(crate) fn rows_per_block(dim: usize) -> usize {
    let r = (BLOCK_BYTES / (4 * dim)).clamp(16, 4096);
    if r >= 64 { r / 64 * 64 } else { r / 16 * 16 }
}

/// The checks of a row-major matrix of `dim`-wide rows (`what` names it in the error): `dim` is not zero, `x` is
/// not empty, its length is a multiple of `dim`, every value is finite. Returns the number of rows.
///
/// ```
/// use recall_cpu_simd::{CpuError, check_matrix};
/// assert_eq!(check_matrix("queries", &[1.0, 2.0, 3.0, 4.0], 2), Ok(2));
/// assert!(matches!(check_matrix("queries", &[1.0, f32::NAN], 2), Err(CpuError::NonFinite { index: 1, .. })));
/// ```
pub fn check_matrix(what: &'static str, x: &[f32], dim: usize) -> Result<usize, CpuError> {
    let n = check_matrix_shape(what, x, dim)?;
    check_finite(what, x)?;
    Ok(n)
}

/// [`check_matrix`] without the scan over values: for callers that check the values elsewhere (in the pass that
/// reads them, or once for a corpus held across calls).
///
/// ```
/// use recall_cpu_simd::{CpuError, check_matrix_shape};
/// assert_eq!(check_matrix_shape("corpus", &[f32::NAN; 6], 3), Ok(2));
/// assert!(matches!(check_matrix_shape("corpus", &[0.0; 5], 3), Err(CpuError::RaggedMatrix { .. })));
/// ```
pub fn check_matrix_shape(what: &'static str, x: &[f32], dim: usize) -> Result<usize, CpuError> {
    if dim == 0 {
        return Err(CpuError::ZeroDim);
    }
    if x.is_empty() {
        return Err(CpuError::Empty { what });
    }
    if !x.len().is_multiple_of(dim) {
        return Err(CpuError::RaggedMatrix {
            what,
            len: x.len(),
            dim,
        });
    }
    Ok(x.len() / dim)
}

/// A similarity metric (`docs/numerics.md`, "Scores by metric").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Metric {
    /// `dot / (norm(q) * norm(c))`, or `0.0` when a norm is zero; higher first.
    Cosine,
    /// `dot(q, c)`; higher first.
    Dot,
    /// `l2sq(q, c)`, the squared Euclidean distance; lower first.
    L2,
}

impl Metric {
    /// The ranking order of the metric's scores.
    pub fn order(self) -> Order {
        match self {
            Metric::L2 => Order::LowerFirst,
            Metric::Cosine | Metric::Dot => Order::HigherFirst,
        }
    }

    fn mode(self) -> u8 {
        if self == Metric::L2 { L2 } else { DOT }
    }
}

/// Row-major corpus values in one of the supported element types. f16 and bf16 are widened to f32
/// exactly before any arithmetic.
#[derive(Clone, Copy, Debug)]
pub enum Vectors<'a> {
    F32(&'a [f32]),
    F16(&'a [f16]),
    Bf16(&'a [bf16]),
}

impl<'a> Vectors<'a> {
    /// Number of values.
    pub fn len(&self) -> usize {
        match self {
            Vectors::F32(v) => v.len(),
            Vectors::F16(v) => v.len(),
            Vectors::Bf16(v) => v.len(),
        }
    }

    /// Whether there are no values.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn check_finite(&self, what: &'static str) -> Result<(), CpuError> {
        match self.first_non_finite(0, self.len()) {
            None => Ok(()),
            Some(index) => Err(CpuError::NonFinite { what, index }),
        }
    }

    /// The index of the first NaN or infinity among values `a .. b`.
    fn first_non_finite(&self, a: usize, b: usize) -> Option<usize> {
        let i = match self {
            Vectors::F32(v) => crate::first_non_finite(&v[a..b]),
            Vectors::F16(v) => first_bad_half(&v[a..b], |x| x.to_bits(), 0x7c00),
            Vectors::Bf16(v) => first_bad_half(&v[a..b], |x| x.to_bits(), 0x7f80),
        };
        i.map(|i| a + i)
    }

    /// Rows `r0 .. r1` as f32: borrowed for f32, widened into `buf` otherwise.
    pub(crate) fn rows<'b>(
        &self,
        r0: usize,
        r1: usize,
        dim: usize,
        buf: &'b mut Vec<f32>,
    ) -> &'b [f32]
    where
        'a: 'b,
    {
        let (a, b) = (r0 * dim, r1 * dim);
        match self {
            Vectors::F32(v) => &v[a..b],
            _ => {
                buf.clear();
                buf.resize(b - a, 0.0);
                self.widen_into(a, buf);
                buf
            }
        }
    }

    /// Rows `ids` (in that order) as f32, copied into `buf`.
    pub(crate) fn gather<'b>(&self, ids: &[u32], dim: usize, buf: &'b mut Vec<f32>) -> &'b [f32] {
        buf.clear();
        match self {
            // Appended row by row: no zero fill first (a fill of the whole buffer was 13 % of a serial call).
            Vectors::F32(v) => {
                for id in ids {
                    let a = *id as usize * dim;
                    buf.extend_from_slice(&v[a..a + dim]);
                }
            }
            _ => {
                buf.resize(ids.len() * dim, 0.0);
                for (i, id) in ids.iter().enumerate() {
                    self.widen_into(*id as usize * dim, &mut buf[i * dim..(i + 1) * dim]);
                }
            }
        }
        buf
    }

    fn widen_into(&self, start: usize, dst: &mut [f32]) {
        let n = dst.len();
        match self {
            Vectors::F32(v) => dst.copy_from_slice(&v[start..start + n]),
            Vectors::F16(v) => kernels::widen_f16(&v[start..start + n], dst),
            Vectors::Bf16(v) => {
                for (d, s) in dst.iter_mut().zip(&v[start..start + n]) {
                    *d = f32::from_bits((s.to_bits() as u32) << 16);
                }
            }
        }
    }
}

/// The first 16-bit value whose exponent field (`mask`) is all ones: chunked, branch-free per chunk.
fn first_bad_half<T: Copy>(v: &[T], bits: impl Fn(T) -> u16, mask: u16) -> Option<usize> {
    const CHUNK: usize = 4096;
    for (c, chunk) in v.chunks(CHUNK).enumerate() {
        if chunk
            .iter()
            .fold(0u16, |acc, x| acc | ((bits(*x) & mask) == mask) as u16)
            != 0
        {
            return chunk
                .iter()
                .position(|x| bits(*x) & mask == mask)
                .map(|i| c * CHUNK + i);
        }
    }
    None
}

/// A corpus: row-major vectors of dimension `dim`, optionally with their norms (the values
/// [`row_norms`] returns, `+inf` included; used as given, for cosine only).
#[derive(Clone, Copy, Debug)]
pub struct Corpus<'a> {
    pub vectors: Vectors<'a>,
    pub dim: usize,
    pub norms: Option<&'a [f32]>,
}

impl<'a> Corpus<'a> {
    /// A corpus without precomputed norms.
    pub fn new(vectors: Vectors<'a>, dim: usize) -> Corpus<'a> {
        Corpus {
            vectors,
            dim,
            norms: None,
        }
    }

    /// An f32 corpus without precomputed norms.
    pub fn f32(values: &'a [f32], dim: usize) -> Corpus<'a> {
        Corpus::new(Vectors::F32(values), dim)
    }

    /// The same corpus with its norms attached.
    pub fn with_norms(self, norms: &'a [f32]) -> Corpus<'a> {
        Corpus {
            norms: Some(norms),
            ..self
        }
    }

    /// Check the corpus (dimension, shape, finite values, norms) and return its number of rows.
    pub fn validate(&self) -> Result<usize, CpuError> {
        let n = self.validate_shape()?;
        self.vectors.check_finite("corpus")?;
        Ok(n)
    }

    /// Everything [`Corpus::validate`] checks except the finiteness of the vectors (which the streaming
    /// ops check block by block, in the same pass as the work, and report identically).
    fn validate_shape(&self) -> Result<usize, CpuError> {
        if self.dim == 0 {
            return Err(CpuError::ZeroDim);
        }
        let len = self.vectors.len();
        if len == 0 {
            return Err(CpuError::Empty { what: "corpus" });
        }
        if !len.is_multiple_of(self.dim) {
            return Err(CpuError::RaggedMatrix {
                what: "corpus",
                len,
                dim: self.dim,
            });
        }
        let n = len / self.dim;
        crate::check_corpus_rows(n)?;
        if let Some(norms) = self.norms {
            if norms.len() != n {
                return Err(CpuError::LengthMismatch {
                    what: "corpus norms",
                    expected: n,
                    got: norms.len(),
                });
            }
            check_norms("corpus norms", norms)?;
        }
        Ok(n)
    }
}

/// Norms handed in by a caller: `+inf` is a valid norm (the norm of finite values can overflow); NaN, `-inf` and
/// negatives are not.
fn check_norms(what: &'static str, norms: &[f32]) -> Result<(), CpuError> {
    if let Some(index) = norms
        .iter()
        .position(|x| x.is_nan() || *x == f32::NEG_INFINITY)
    {
        return Err(CpuError::NonFinite { what, index });
    }
    if let Some(index) = norms.iter().position(|x| *x < 0.0) {
        return Err(CpuError::Negative { what, index });
    }
    Ok(())
}

/// The L2 norm of every row of the row-major matrix `x` (`n_rows * dim` values).
pub fn row_norms(x: &[f32], dim: usize) -> Result<Vec<f32>, CpuError> {
    Cpu::new().row_norms(x, dim)
}

/// Cosine similarity of every query against every corpus row, written query-major into `out`
/// (`n_queries * n_rows`). Norms are the values [`row_norms`] returns for the same matrices.
pub fn cosine_scores(
    queries: &[f32],
    query_norms: &[f32],
    corpus: &[f32],
    corpus_norms: &[f32],
    dim: usize,
    out: &mut [f32],
) -> Result<(), CpuError> {
    Cpu::new().cosine_scores(queries, query_norms, corpus, corpus_norms, dim, out)
}

/// All `n_queries * n_rows` scores, query-major. See [`Cpu::similarity`].
pub fn similarity(
    queries: &[f32],
    corpus: &Corpus<'_>,
    metric: Metric,
) -> Result<Vec<f32>, CpuError> {
    Cpu::new().similarity(queries, corpus, metric)
}

/// Fused similarity + top-k. See [`Cpu::knn`].
pub fn knn(
    queries: &[f32],
    corpus: &Corpus<'_>,
    metric: Metric,
    k: usize,
) -> Result<TopK, CpuError> {
    Cpu::new().knn(queries, corpus, metric, k)
}

/// Top-k over per-query candidate lists. See [`Cpu::score_candidates`].
pub fn score_candidates(
    queries: &[f32],
    corpus: &Corpus<'_>,
    metric: Metric,
    offsets: &[usize],
    ids: &[u32],
    k: usize,
) -> Result<TopK, CpuError> {
    Cpu::new().score_candidates(queries, corpus, metric, offsets, ids, k)
}

/// Per-block scratch of the streaming ops.
#[derive(Default)]
struct Scratch {
    rows: Vec<f32>,
    chains: Vec<f32>,
    norms: Vec<f32>,
    /// `block_scores`'s rows' norms, where it computes them.
    norm_buf: Vec<f32>,
}

/// [`Cpu::score_candidates`] runs on the calling thread below this many multiply-adds (candidates times `dim`),
/// in parallel tasks from here. A parallel call pays a round trip into recall's pool (best 2.5 us, median 10 to
/// 20 us after its threads slept, on the development VM; `knn_small pool`); one thread scores about 4 multiply-adds
/// a nanosecond there (cache-resident rows, gathered), so this much work is about 30 us serially and four tasks of
/// [`CANDIDATES_TASK_MIN_WORK`] should repay the round trip (an estimate from those two numbers: the crossover
/// itself could not be timed there, its second vCPU was busy with other work). The general [`PAR_MIN_WORK`]
/// (2^21) left calls of up to 2 M multiply-adds on one thread: 8 queries x 1,760 candidates x 128 took 1,019 us
/// on a 16-core host, where 2.1 M took 227 us in parallel.
const CANDIDATES_PAR_MIN_WORK: usize = 1 << 17;

/// The least work of one parallel task of [`Cpu::score_candidates`] (about 8 us on one thread of the development
/// VM), so that a rayon task's own cost (about a microsecond) stays small; up to [`TASKS_PER_THREAD`] tasks a
/// thread, so that a slow core does not hold the whole call.
const CANDIDATES_TASK_MIN_WORK: usize = 1 << 15;

/// Bytes of candidate rows gathered per step of [`Cpu::score_candidates`] (see [`candidate_chunk`]).
const CANDIDATE_CHUNK_BYTES: usize = 16 * 1024;

/// Candidate rows gathered and scored per step for dimension `dim`: 16 KiB of rows, at least 32 (the one-query
/// kernel's widest step), a multiple of 16. The gathered rows then stay in L1 while they are scored; with
/// [`rows_per_block`]'s 256 KiB, 8 queries x 1,760 candidates at dim 128 (a corpus of 7,040 rows) took 520 us
/// on one thread of the development VM against 430 us.
fn candidate_chunk(dim: usize) -> usize {
    (CANDIDATE_CHUNK_BYTES / (4 * dim)).clamp(32, 4096) / 16 * 16
}

impl Cpu {
    /// [`check_matrix`], or only its shape checks on a [`Cpu::prevalidated`] handle.
    pub(crate) fn check_matrix(
        &self,
        what: &'static str,
        x: &[f32],
        dim: usize,
    ) -> Result<usize, CpuError> {
        if self.is_prevalidated() {
            check_matrix_shape(what, x, dim)
        } else {
            check_matrix(what, x, dim)
        }
    }

    /// The L2 norm of every row of the row-major matrix `x` (`n_rows * dim` values).
    pub fn row_norms(&self, x: &[f32], dim: usize) -> Result<Vec<f32>, CpuError> {
        let n_rows = self.check_matrix("rows", x, dim)?;
        Ok(self.norms_unchecked(x, dim, n_rows))
    }

    fn norms_unchecked(&self, x: &[f32], dim: usize, n_rows: usize) -> Vec<f32> {
        let mut out = vec![0.0f32; n_rows];
        let block = rows_per_block(dim);
        let level = self.level();
        let work = |(i, o): (usize, &mut [f32])| {
            let rows = &x[i * block * dim..(i * block + o.len()) * dim];
            kernels::sqnorms(level, rows, dim, o);
            for v in o.iter_mut() {
                *v = v.sqrt();
            }
        };
        if x.len() >= PAR_MIN_WORK {
            in_pool(|| out.par_chunks_mut(block).enumerate().for_each(work));
        } else {
            out.chunks_mut(block).enumerate().for_each(work);
        }
        out
    }

    /// Cosine similarity of every query against every corpus row, written query-major into `out`
    /// (`n_queries * n_rows`). Norms are the values [`Cpu::row_norms`] returns for the same matrices (a NaN, `-inf`
    /// or negative norm is an error, as for [`Corpus::with_norms`]).
    pub fn cosine_scores(
        &self,
        queries: &[f32],
        query_norms: &[f32],
        corpus: &[f32],
        corpus_norms: &[f32],
        dim: usize,
        out: &mut [f32],
    ) -> Result<(), CpuError> {
        let n_queries = self.check_matrix("queries", queries, dim)?;
        let n_rows = self.check_matrix("corpus", corpus, dim)?;
        for (what, got, expected) in [
            ("query norms", query_norms.len(), n_queries),
            ("corpus norms", corpus_norms.len(), n_rows),
            ("output", out.len(), n_queries * n_rows),
        ] {
            if got != expected {
                return Err(CpuError::LengthMismatch {
                    what,
                    expected,
                    got,
                });
            }
        }
        check_norms("query norms", query_norms)?;
        check_norms("corpus norms", corpus_norms)?;
        self.scores_into(
            queries,
            query_norms,
            Vectors::F32(corpus),
            Some(corpus_norms),
            dim,
            Metric::Cosine,
            out,
        )
        .map_err(|index| CpuError::NonFinite {
            what: "corpus",
            index,
        })
    }

    /// All `n_queries * n_rows` scores of `metric`, query-major. Meant for small corpora: large ones go
    /// through [`Cpu::knn`], which never materialises the matrix.
    ///
    /// The corpus's values are checked in the pass that scores them, as [`Cpu::knn`] checks them (on a
    /// [`Cpu::prevalidated`] handle too): the first NaN or infinity is the same error an upfront scan gives.
    pub fn similarity(
        &self,
        queries: &[f32],
        corpus: &Corpus<'_>,
        metric: Metric,
    ) -> Result<Vec<f32>, CpuError> {
        let n = corpus.validate_shape()?;
        let dim = corpus.dim;
        let nq = self.check_matrix("queries", queries, dim)?;
        let qn = self.query_norms(queries, dim, nq, metric);
        let mut out = crate::output_buffer(nq * n);
        self.scores_into(
            queries,
            &qn,
            corpus.vectors,
            corpus.norms,
            dim,
            metric,
            &mut out,
        )
        .map_err(|index| CpuError::NonFinite {
            what: "corpus",
            index,
        })?;
        Ok(out)
    }

    fn query_norms(&self, queries: &[f32], dim: usize, nq: usize, metric: Metric) -> Vec<f32> {
        if metric == Metric::Cosine {
            self.norms_unchecked(queries, dim, nq)
        } else {
            Vec::new()
        }
    }

    /// Scores of one block of rows (`r0 ..`, `rows` already f32) for every query, into `scratch.chains`
    /// (`nq * n_block`, query-major). Returns whether some row *may* hold a NaN or infinity: a chain
    /// (`dot`, `l2sq` or `sqnorm`) over a non-finite value is never finite (`inf` stays `inf` or turns
    /// NaN; `0 * inf` is NaN), so rows whose raw chain is finite are certainly finite; a non-finite chain
    /// can also come from overflow, so the caller then scans the block's values exactly.
    #[allow(clippy::too_many_arguments)]
    fn block_scores(
        &self,
        queries: &Queries<'_>,
        query_norms: &[f32],
        rows: &[f32],
        norms: Option<&[f32]>,
        dim: usize,
        metric: Metric,
        chains: &mut Vec<f32>,
        norm_buf: &mut Vec<f32>,
    ) -> bool {
        let nb = rows.len() / dim;
        let nq = queries.values().len() / dim;
        if metric == Metric::Cosine && norms.is_none() && nq == 1 {
            // One query: the dot chains and the rows' norm chains in one pass over the block.
            chains.clear();
            chains.resize(2 * nb, 0.0);
            kernels::chains(self.level(), kernels::DOTSQ, queries, rows, dim, chains, nb);
            let (dots, sq) = chains.split_at_mut(nb);
            let suspect = any_non_finite(sq);
            let qn = query_norms[0];
            for (s, nc) in dots.iter_mut().zip(sq.iter()) {
                *s = reference::cosine_from_parts(*s, qn, nc.sqrt());
            }
            chains.truncate(nb);
            return suspect;
        }
        chains.clear();
        chains.resize(nq * nb, 0.0);
        kernels::chains(self.level(), metric.mode(), queries, rows, dim, chains, nb);
        let suspect = any_non_finite(&chains[..nb]);
        if metric == Metric::Cosine {
            let cn: &[f32] = match norms {
                Some(n) => n,
                None => {
                    norm_buf.clear();
                    norm_buf.resize(nb, 0.0);
                    kernels::sqnorms(self.level(), rows, dim, norm_buf);
                    for v in norm_buf.iter_mut() {
                        *v = v.sqrt();
                    }
                    norm_buf
                }
            };
            for (q, row) in chains.chunks_exact_mut(nb).enumerate() {
                let nq = query_norms[q];
                for (s, nc) in row.iter_mut().zip(cn) {
                    *s = reference::cosine_from_parts(*s, nq, *nc);
                }
            }
        }
        suspect
    }

    /// Every score into `out` (query-major), the corpus's values checked block by block in the same pass
    /// (see `block_scores`): `Err` holds the index of its first NaN or infinity (`out` is then
    /// unspecified).
    #[allow(clippy::too_many_arguments)]
    fn scores_into(
        &self,
        queries: &[f32],
        query_norms: &[f32],
        vectors: Vectors<'_>,
        norms: Option<&[f32]>,
        dim: usize,
        metric: Metric,
        out: &mut [f32],
    ) -> Result<(), usize> {
        let n = vectors.len() / dim;
        let nq = queries.len() / dim;
        let block = rows_per_block(dim);
        let n_blocks = n.div_ceil(block);
        let packed = Queries::prepared(self.level(), metric.mode(), queries, dim);
        let run = |b: usize, scratch: &mut Scratch| {
            let (r0, r1) = (b * block, ((b + 1) * block).min(n));
            let rows = vectors.rows(r0, r1, dim, &mut scratch.rows);
            let nrm = norms.map(|x| &x[r0..r1]);
            let mut chains = std::mem::take(&mut scratch.chains);
            let suspect = self.block_scores(
                &packed,
                query_norms,
                rows,
                nrm,
                dim,
                metric,
                &mut chains,
                &mut scratch.norms,
            );
            if suspect && let Some(bad) = vectors.first_non_finite(r0 * dim, r1 * dim) {
                return Err(bad);
            }
            Ok(chains)
        };
        let results: Vec<Result<Vec<f32>, usize>> = if nq * n * dim >= PAR_MIN_WORK {
            in_pool(|| {
                (0..n_blocks)
                    .into_par_iter()
                    .map_init(Scratch::default, |s, b| run(b, s))
                    .collect()
            })
        } else {
            let mut s = Scratch::default();
            (0..n_blocks).map(|b| run(b, &mut s)).collect()
        };
        // Blocks are in order: the first error is the smallest bad index.
        if let Some(Err(bad)) = results.iter().find(|r| r.is_err()) {
            return Err(*bad);
        }
        for (b, chains) in results.into_iter().flatten().enumerate() {
            let r0 = b * block;
            let nb = chains.len() / nq;
            for q in 0..nq {
                out[q * n + r0..q * n + r0 + nb].copy_from_slice(&chains[q * nb..(q + 1) * nb]);
            }
        }
        Ok(())
    }

    /// Fused similarity + top-k: per query the best `k` (score, id) pairs of the whole corpus, best first,
    /// in the total order of `docs/numerics.md`. The corpus is streamed in blocks that stay in cache;
    /// the `n_queries * n_rows` score matrix is never built. `1 <= k <= n_rows`.
    pub fn knn(
        &self,
        queries: &[f32],
        corpus: &Corpus<'_>,
        metric: Metric,
        k: usize,
    ) -> Result<TopK, CpuError> {
        let n = corpus.validate_shape()?;
        let dim = corpus.dim;
        let nq = self.check_matrix("queries", queries, dim)?;
        if k == 0 || k > n {
            return Err(CpuError::KOutOfRange { k, n });
        }
        let qn = self.query_norms(queries, dim, nq, metric);
        let block = rows_per_block(dim);
        let n_blocks = n.div_ceil(block);
        let order = metric.order();
        let threads = pool_threads().max(1);

        // Stream blocks `b0 .. b1` of the corpus for the queries `q0 .. q1`.
        // The corpus's finiteness is checked block by block in the same pass (see `block_scores`): a
        // task stops at its first bad value and the smallest index over all tasks is reported, exactly
        // as an upfront scan would.
        let prepare = |q0: usize, q1: usize| {
            Queries::prepared(
                self.level(),
                metric.mode(),
                &queries[q0 * dim..q1 * dim],
                dim,
            )
        };
        let stream = |qs: &Queries<'_>,
                      q0: usize,
                      q1: usize,
                      b0: usize,
                      b1: usize|
         -> Result<Vec<Selector>, usize> {
            let qns = if qn.is_empty() { &qn[..] } else { &qn[q0..q1] };
            let mut sel: Vec<Selector> = (q0..q1).map(|_| Selector::new(k, self.level())).collect();
            let mut s = Scratch::default();
            for b in b0..b1 {
                let (r0, r1) = (b * block, ((b + 1) * block).min(n));
                let rows = corpus.vectors.rows(r0, r1, dim, &mut s.rows);
                let nrm = corpus.norms.map(|x| &x[r0..r1]);
                let suspect =
                    self.block_scores(qs, qns, rows, nrm, dim, metric, &mut s.chains, &mut s.norms);
                if suspect && let Some(bad) = corpus.vectors.first_non_finite(r0 * dim, r1 * dim) {
                    return Err(bad);
                }
                let nb = r1 - r0;
                for (sq, row) in sel.iter_mut().zip(s.chains.chunks_exact(nb)) {
                    sq.push_scores(row, r0 as u32, order);
                }
            }
            Ok(sel)
        };
        let non_finite = |index: usize| CpuError::NonFinite {
            what: "corpus",
            index,
        };

        let selectors: Vec<Selector> = if nq * n * dim < PAR_MIN_WORK || threads == 1 {
            stream(&prepare(0, nq), 0, nq, 0, n_blocks).map_err(non_finite)?
        } else {
            // One grid of tasks, query groups (whole 16-query lanes) times ranges of corpus blocks; each group's
            // ranges' selectors are merged exactly.
            // - Many queries with a large k: the queries alone are split (one range), so that each query has
            //   one selector.
            // - Otherwise several ranges per thread: rayon hands a thread that finishes early another range,
            //   so a slow core (or a vCPU the host schedules away) does not hold the whole call. A corpus of
            //   fewer blocks than that (a batch re-ranked against a few thousand rows) also splits its queries,
            //   so that every thread has a task: with the corpus alone, 256 queries over 256 rows of 128 (one
            //   block) ran on one thread, for about 1 ms on a host of 16 cores.
            let wanted = TASKS_PER_THREAD * threads;
            let (ranges, groups) = if nq >= 16 * threads && nq.saturating_mul(k) > (1 << 20) {
                (1, threads)
            } else {
                let ranges = wanted.min(n_blocks);
                (ranges, wanted / ranges)
            };
            let per = match groups {
                0 | 1 => nq,
                groups => nq.div_ceil(groups).div_ceil(16) * 16,
            };
            let groups = nq.div_ceil(per);
            // A group streamed by several tasks is prepared once, up front, for all of them; a group of one task
            // (one range) by that task, so that the transposes run in parallel (serial, they were 5 % of 256
            // queries over 256 rows of 128 on one thread, and more of it on many).
            let prepared: Vec<Queries<'_>> = if ranges > 1 {
                (0..groups)
                    .map(|g| prepare(g * per, ((g + 1) * per).min(nq)))
                    .collect()
            } else {
                Vec::new()
            };
            let parts: Vec<Result<Vec<Selector>, usize>> = in_pool(|| {
                (0..groups * ranges)
                    .into_par_iter()
                    .map(|t| {
                        let (g, r) = (t / ranges, t % ranges);
                        let (q0, q1) = (g * per, ((g + 1) * per).min(nq));
                        let (b0, b1) = (r * n_blocks / ranges, (r + 1) * n_blocks / ranges);
                        match prepared.get(g) {
                            Some(qs) => stream(qs, q0, q1, b0, b1),
                            None => stream(&prepare(q0, q1), q0, q1, b0, b1),
                        }
                    })
                    .collect()
            });
            first_error(&parts).map_err(non_finite)?;
            // Per query group (in order), its ranges' selectors merged; the groups' queries in order.
            let mut parts = parts.into_iter().flatten();
            let mut all = Vec::with_capacity(nq);
            for _ in 0..groups {
                let mut acc = parts.next().unwrap_or_default();
                for part in parts.by_ref().take(ranges - 1) {
                    for (a, p) in acc.iter_mut().zip(part) {
                        a.merge(p);
                    }
                }
                all.append(&mut acc);
            }
            all
        };
        Ok(collect_topk(selectors, k))
    }

    /// Per query, the best `k` pairs among its own candidate ids: query `q`'s candidates are
    /// `ids[offsets[q] .. offsets[q + 1]]` (`offsets` has `n_queries + 1` entries, starts at 0, never
    /// decreases, ends at `ids.len()`). Every id must be `< n_rows` and appear once per list; `k` must be
    /// at least 1 and at most the shortest list's length. Scores and order as in [`Cpu::knn`]. Only the
    /// referenced corpus rows are read, and only they are checked for NaN and infinity.
    pub fn score_candidates(
        &self,
        queries: &[f32],
        corpus: &Corpus<'_>,
        metric: Metric,
        offsets: &[usize],
        ids: &[u32],
        k: usize,
    ) -> Result<TopK, CpuError> {
        let n = corpus.validate_shape()?;
        let dim = corpus.dim;
        let nq = self.check_matrix("queries", queries, dim)?;
        check_offsets(offsets, nq, ids.len())?;
        if let Some((index, id)) = ids.iter().enumerate().find(|(_, id)| **id as usize >= n) {
            return Err(CpuError::IdOutOfRange {
                what: "candidate ids",
                index,
                id: *id as u64,
                n,
            });
        }
        let shortest = offsets.windows(2).map(|w| w[1] - w[0]).min().unwrap_or(0);
        if k == 0 || k > shortest {
            return Err(CpuError::KOutOfRange { k, n: shortest });
        }
        // Duplicates: a value check left to the caller on a prevalidated handle. The rows are checked in the scoring
        // pass on every handle, where they are in the L1 and only a suspect block is scanned (a separate pass read
        // every row twice: 1.5-1.9x the time of the same call on a prevalidated handle, development VM).
        if !self.is_prevalidated() {
            check_duplicate_ids(offsets, ids)?;
        }
        let work = ids.len().saturating_mul(dim);
        let threads = pool_threads().max(1);
        let tasks = if work < CANDIDATES_PAR_MIN_WORK || threads == 1 {
            1
        } else {
            (work / CANDIDATES_TASK_MIN_WORK).clamp(2, TASKS_PER_THREAD * threads)
        };
        let (top, suspect) =
            self.candidates_in_tasks(queries, corpus, metric, offsets, ids, k, tasks);
        // The pass found a NaN or infinity in a copy of the rows: the smallest corpus index of one is the error.
        if suspect {
            check_candidate_rows(corpus, ids)?;
        }
        Ok(top)
    }

    /// [`Cpu::score_candidates`] on checked input, its candidates cut into `tasks` runs of equal length (`ids`, all
    /// the lists back to back, cut in `tasks` equal pieces): a task scores the pieces of the lists its run meets,
    /// so a long list is scored by several tasks and a run of short lists by one. One task runs on the calling
    /// thread; more run in parallel, and each query's pieces' selectors are merged. The answer is the same for any
    /// `tasks`: every score is the one chain of its (query, id), and a selector's best `k` do not depend on how
    /// its entries arrive (keys are unique). The gathered rows are checked for NaN and infinity in the same pass
    /// (where `block_scores` finds a suspect chain), and the flag says whether one holds either.
    #[allow(clippy::too_many_arguments)]
    fn candidates_in_tasks(
        &self,
        queries: &[f32],
        corpus: &Corpus<'_>,
        metric: Metric,
        offsets: &[usize],
        ids: &[u32],
        k: usize,
        tasks: usize,
    ) -> (TopK, bool) {
        let dim = corpus.dim;
        let nq = offsets.len() - 1;
        let qn = self.query_norms(queries, dim, nq, metric);
        let block = candidate_chunk(dim);
        let order = metric.order();
        let level = self.level();
        // Query `q`'s candidates `ids[a .. b]` (a piece of its list) scored into `sel`; `true` when their rows hold a
        // NaN or infinity.
        let piece = |q: usize, a: usize, b: usize, sel: &mut Selector, s: &mut Scratch| -> bool {
            let query = &queries[q * dim..(q + 1) * dim];
            let qns = if qn.is_empty() {
                &qn[..]
            } else {
                &qn[q..q + 1]
            };
            let Scratch {
                rows,
                chains,
                norms,
                norm_buf,
            } = s;
            let mut bad = false;
            for chunk in ids[a..b].chunks(block) {
                let rows = corpus.vectors.gather(chunk, dim, rows);
                let nrm = corpus.norms.map(|x| {
                    norms.clear();
                    norms.extend(chunk.iter().map(|id| x[*id as usize]));
                    &norms[..]
                });
                let suspect = self.block_scores(
                    &Queries::plain(query),
                    qns,
                    rows,
                    nrm,
                    dim,
                    metric,
                    chains,
                    norm_buf,
                );
                if suspect && any_non_finite(rows) {
                    bad = true;
                }
                for (id, v) in chunk.iter().zip(chains.iter()) {
                    sel.push(pair_key(*v, *id, order), *v);
                }
            }
            bad
        };
        if tasks <= 1 {
            let mut s = Scratch::default();
            let mut bad = false;
            let selectors = (0..nq)
                .map(|q| {
                    let mut sel = Selector::new(k, level);
                    bad |= piece(q, offsets[q], offsets[q + 1], &mut sel, &mut s);
                    sel
                })
                .collect();
            return (collect_topk(selectors, k), bad);
        }
        let total = ids.len();
        // Task `t`'s run: `ids[t * total / tasks .. (t + 1) * total / tasks]` (in u128: no overflow).
        let cut = |t: usize| (t as u128 * total as u128 / tasks as u128) as usize;
        // Task `t`'s pieces, and whether their rows hold a NaN or infinity.
        let run = |t: usize, s: &mut Scratch| -> (Vec<(usize, Selector)>, bool) {
            let (a, b) = (cut(t), cut(t + 1));
            // The first list that ends past `a`, then every list that starts before `b`.
            let mut q = offsets[1..].partition_point(|o| *o <= a);
            let mut parts = Vec::new();
            let mut bad = false;
            while q < nq && offsets[q] < b {
                let (pa, pb) = (offsets[q].max(a), offsets[q + 1].min(b));
                if pa < pb {
                    let mut sel = Selector::new(k, level);
                    bad |= piece(q, pa, pb, &mut sel, s);
                    parts.push((q, sel));
                }
                q += 1;
            }
            (parts, bad)
        };
        let parts: Vec<(Vec<(usize, Selector)>, bool)> = in_pool(|| {
            (0..tasks)
                .into_par_iter()
                .map_init(Scratch::default, |s, t| run(t, s))
                .collect()
        });
        // A query's pieces, merged in task order.
        let mut merged: Vec<Option<Selector>> = (0..nq).map(|_| None).collect();
        let bad = parts.iter().any(|(_, bad)| *bad);
        for (q, sel) in parts.into_iter().flat_map(|(p, _)| p) {
            match &mut merged[q] {
                Some(acc) => acc.merge(sel),
                slot => *slot = Some(sel),
            }
        }
        let selectors = merged
            .into_iter()
            .map(|s| s.unwrap_or_else(|| Selector::new(k, level)))
            .collect();
        (collect_topk(selectors, k), bad)
    }
}

/// The first check of [`Cpu::score_candidates`]' values: no duplicate id in a list (the first list with one is
/// reported, with its smallest duplicate).
fn check_duplicate_ids(offsets: &[usize], ids: &[u32]) -> Result<(), CpuError> {
    let mut list = Vec::new();
    for (q, w) in offsets.windows(2).enumerate() {
        list.clear();
        list.extend_from_slice(&ids[w[0]..w[1]]);
        list.sort_unstable();
        if let Some(w) = list.windows(2).find(|w| w[0] == w[1]) {
            return Err(CpuError::DuplicateId { query: q, id: w[0] });
        }
    }
    Ok(())
}

/// Ids per task of [`check_candidate_rows`]' parallel scan.
const ROWS_CHECK_PIECE: usize = 4096;

/// The value check of the corpus rows candidate lists refer to: `Err(NonFinite)` with the smallest corpus index
/// of a NaN or infinity among the rows `ids` names (only those rows are read: a whole-corpus scan would cost more
/// than the op itself), `Err(IdOutOfRange)` for an id past the corpus. [`Cpu::score_candidates`] makes this check in
/// its scoring pass; a caller that runs the scoring elsewhere (a GPU) makes it first.
///
/// ```
/// use recall_cpu_simd::{Corpus, CpuError, check_candidate_rows};
/// let c = [1.0f32, 2.0, f32::NAN, 4.0, 5.0, 6.0]; // three rows of 2; row 1 holds a NaN
/// assert_eq!(check_candidate_rows(&Corpus::f32(&c, 2), &[0, 2]), Ok(()));
/// assert_eq!(
///     check_candidate_rows(&Corpus::f32(&c, 2), &[2, 1]),
///     Err(CpuError::NonFinite { what: "corpus", index: 2 })
/// );
/// ```
pub fn check_candidate_rows(corpus: &Corpus<'_>, ids: &[u32]) -> Result<(), CpuError> {
    let dim = corpus.dim;
    let n = corpus.vectors.len().checked_div(dim).unwrap_or(0);
    if let Some((index, id)) = ids.iter().enumerate().find(|(_, id)| **id as usize >= n) {
        return Err(CpuError::IdOutOfRange {
            what: "candidate ids",
            index,
            id: u64::from(*id),
            n,
        });
    }
    let first_bad = |ids: &[u32]| {
        ids.iter()
            .filter_map(|id| {
                let a = *id as usize * dim;
                corpus.vectors.first_non_finite(a, a + dim)
            })
            .min()
    };
    let bad = if ids.len() > 2 * ROWS_CHECK_PIECE && pool_threads() > 1 {
        in_pool(|| ids.par_chunks(ROWS_CHECK_PIECE).filter_map(first_bad).min())
    } else {
        first_bad(ids)
    };
    match bad {
        Some(index) => Err(CpuError::NonFinite {
            what: "corpus",
            index,
        }),
        None => Ok(()),
    }
}

/// Whether any value is NaN or infinite (branch-free, vectorised).
fn any_non_finite(v: &[f32]) -> bool {
    v.iter().fold(0u32, |acc, x| {
        acc | ((x.to_bits() & 0x7f80_0000) == 0x7f80_0000) as u32
    }) != 0
}

/// The smallest failing index over the tasks, if any failed.
fn first_error<T>(parts: &[Result<T, usize>]) -> Result<(), usize> {
    match parts.iter().filter_map(|p| p.as_ref().err()).min() {
        Some(i) => Err(*i),
        None => Ok(()),
    }
}

fn collect_topk(selectors: Vec<Selector>, k: usize) -> TopK {
    let nq = selectors.len();
    let mut ids = vec![0u32; nq * k];
    let mut scores = vec![0f32; nq * k];
    for ((sel, i), s) in selectors
        .into_iter()
        .zip(ids.chunks_exact_mut(k))
        .zip(scores.chunks_exact_mut(k))
    {
        write_entries(&sel.finish(), i, s);
    }
    TopK { k, ids, scores }
}

/// `offsets` of per-query lists: `n + 1` entries, starting at 0, never decreasing, ending at `total`.
pub(crate) fn check_offsets(offsets: &[usize], n: usize, total: usize) -> Result<(), CpuError> {
    if offsets.len() != n + 1 {
        return Err(CpuError::LengthMismatch {
            what: "candidate offsets",
            expected: n + 1,
            got: offsets.len(),
        });
    }
    if offsets[0] != 0 {
        return Err(CpuError::BadIndptr {
            index: 0,
            reason: "the first offset must be 0",
        });
    }
    if let Some(i) = offsets.windows(2).position(|w| w[1] < w[0]) {
        return Err(CpuError::BadIndptr {
            index: i + 1,
            reason: "offsets decrease",
        });
    }
    if offsets[n] != total {
        return Err(CpuError::BadIndptr {
            index: n,
            reason: "the last offset must equal the number of ids",
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simd::available_levels;

    #[test]
    fn check_matrix_names_the_first_bad_value() {
        let mut x = vec![1.5f32; 10_000];
        assert_eq!(check_matrix("x", &x, 10), Ok(1_000));
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -f32::NAN] {
            for i in [0, 4095, 4096, 9_999] {
                x[i] = bad;
                assert_eq!(
                    check_matrix("x", &x, 10),
                    Err(CpuError::NonFinite {
                        what: "x",
                        index: i
                    })
                );
                x[i] = f32::MAX;
            }
        }
        x[17] = f32::MIN_POSITIVE / 4.0;
        assert_eq!(check_matrix("x", &x, 10), Ok(1_000));
    }

    fn lcg(len: usize, seed: u64) -> Vec<f32> {
        let mut s = seed.wrapping_mul(6364136223846793005) | 1;
        (0..len)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    /// The scoring pass finds every NaN and infinity in the rows it reads, as the separate scan it replaced did:
    /// at every level, metric and element type, one query (cosine's one-pass norms) and three, in one task and
    /// several, a bad value anywhere in a referenced row is the error with the smallest bad index among the
    /// referenced rows, and bad values only in rows no list refers to are no error (the same scores).
    #[test]
    fn candidate_scoring_finds_bad_values_in_its_pass() {
        let (n, dim) = (300usize, 37usize);
        let c = lcg(n * dim, 21);
        // Three lists of 30: rows 0, 3, .., 87; 90, .., 177; 180, .., 267. Row 1 is in none.
        let ids: Vec<u32> = (0..90).map(|i| (i * 3) as u32).collect();
        let offsets = [0usize, 30, 60, 90];
        let q = lcg(3 * dim, 4);
        for level in available_levels() {
            let cpu = Cpu::with_level(level);
            for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
                for (row, col) in [(6usize, 0usize), (87, 36), (267, 18), (1, 5)] {
                    // With and without a second bad value in row 84 (list 0).
                    for second in [false, true] {
                        let mut x = c.clone();
                        let mut at = vec![row * dim + col];
                        if second {
                            at.push(84 * dim + 3);
                        }
                        for i in &at {
                            x[*i] = bad;
                        }
                        let halves: Vec<f16> = x.iter().map(|v| f16::from_f32(*v)).collect();
                        let brain: Vec<bf16> = x.iter().map(|v| bf16::from_f32(*v)).collect();
                        let corpora = [
                            Corpus::f32(&x, dim),
                            Corpus::new(Vectors::F16(&halves), dim),
                            Corpus::new(Vectors::Bf16(&brain), dim),
                        ];
                        for (nq, lists) in [(1usize, &offsets[..2]), (3, &offsets[..])] {
                            let list_ids = &ids[..lists[nq]];
                            let want = at
                                .iter()
                                .filter(|i| list_ids.contains(&((**i / dim) as u32)))
                                .min()
                                .copied();
                            for corpus in &corpora {
                                for metric in [Metric::Cosine, Metric::Dot, Metric::L2] {
                                    let what =
                                        format!("{level:?} {metric:?} nq {nq} at {at:?} {bad}");
                                    let want_err = want.map(|index| CpuError::NonFinite {
                                        what: "corpus",
                                        index,
                                    });
                                    let qs = &q[..nq * dim];
                                    for cpu in [cpu, cpu.prevalidated()] {
                                        let got = cpu.score_candidates(
                                            qs, corpus, metric, lists, list_ids, 5,
                                        );
                                        assert_eq!(got.err(), want_err, "{what}");
                                    }
                                    let rows = check_candidate_rows(corpus, list_ids);
                                    assert_eq!(rows.err(), want_err, "{what}");
                                    for tasks in [1usize, 2, 7] {
                                        let (_, found) = cpu.candidates_in_tasks(
                                            &q[..nq * dim],
                                            corpus,
                                            metric,
                                            lists,
                                            list_ids,
                                            5,
                                            tasks,
                                        );
                                        assert_eq!(found, want.is_some(), "{what} tasks {tasks}");
                                    }
                                }
                            }
                        }
                    }
                }
            }
            // Bad values only in rows no list refers to: the clean corpus's answer.
            let mut x = c.clone();
            x[dim + 2] = f32::NAN;
            x[299 * dim] = f32::INFINITY;
            for metric in [Metric::Cosine, Metric::Dot, Metric::L2] {
                let got = cpu
                    .score_candidates(&q, &Corpus::f32(&x, dim), metric, &offsets, &ids, 5)
                    .expect("the referenced rows are finite");
                let clean = cpu
                    .score_candidates(&q, &Corpus::f32(&c, dim), metric, &offsets, &ids, 5)
                    .expect("finite rows");
                assert_eq!(bits(&got), bits(&clean), "{level:?} {metric:?}");
            }
        }
    }

    /// Candidate scoring cut into any number of tasks (lists split across tasks, tasks that meet several lists,
    /// more tasks than candidates) gives the one-task answer bit for bit: at every level, every metric, f32
    /// (with and without norms) and f16, `k` from 1 to the whole list, with many tied scores (duplicated rows,
    /// values rounded to halves) and ids up to the corpus's last row.
    #[test]
    fn candidates_in_any_tasks_match_one_task() {
        let (n, dim) = (600usize, 20usize);
        let mut c = lcg(n * dim, 5);
        for v in c[..n / 2 * dim].iter_mut() {
            *v = (*v * 2.0).round() / 2.0;
        }
        for r in (0..n).step_by(5).skip(1) {
            c.copy_within(0..dim, r * dim);
        }
        let norms = row_norms(&c, dim).expect("finite rows");
        let halves: Vec<f16> = c.iter().map(|v| f16::from_f32(*v)).collect();
        let q = lcg(5 * dim, 9);
        // Lists of 97, 3, 260, 40 and 200 distinct ids (the last list the corpus's last rows), back to back.
        let lens = [97usize, 3, 260, 40, 200];
        let mut offsets = vec![0usize];
        let mut ids = Vec::new();
        for (i, len) in lens.iter().enumerate() {
            let step = [7usize, 11, 13, 17, 1][i];
            let first = if i == 4 { n - len } else { i * 31 };
            ids.extend((0..*len).map(|j| ((first + j * step) % n) as u32));
            offsets.push(ids.len());
        }
        let corpora = [
            Corpus::f32(&c, dim),
            Corpus::f32(&c, dim).with_norms(&norms),
            Corpus::new(Vectors::F16(&halves), dim),
        ];
        for level in available_levels() {
            let cpu = Cpu::with_level(level);
            for corpus in &corpora {
                for metric in [Metric::Cosine, Metric::Dot, Metric::L2] {
                    // (first list, lists, k): all five lists (the shortest is 3), and single long lists up to their
                    // whole length.
                    for (first, lists, k) in [
                        (0usize, 5usize, 1usize),
                        (0, 5, 3),
                        (2, 1, 33),
                        (2, 1, 260),
                        (0, 1, 97),
                        (3, 2, 32),
                    ] {
                        let queries = &q[first * dim..(first + lists) * dim];
                        let offs = &offsets[first..=first + lists];
                        let list_ids = &ids[offs[0]..offs[lists]];
                        let local: Vec<usize> = offs.iter().map(|o| o - offs[0]).collect();
                        let one = cpu
                            .candidates_in_tasks(queries, corpus, metric, &local, list_ids, k, 1)
                            .0;
                        let checked = cpu
                            .score_candidates(queries, corpus, metric, &local, list_ids, k)
                            .expect("valid input");
                        assert_eq!(bits(&one), bits(&checked));
                        for tasks in [2usize, 3, 7, 64, list_ids.len() + 5] {
                            let split = cpu
                                .candidates_in_tasks(
                                    queries, corpus, metric, &local, list_ids, k, tasks,
                                )
                                .0;
                            assert_eq!(
                                bits(&split),
                                bits(&one),
                                "{level:?} {metric:?} k {k} tasks {tasks}"
                            );
                        }
                    }
                }
            }
        }
    }

    fn bits(t: &TopK) -> (Vec<u32>, Vec<u32>) {
        (
            t.ids.clone(),
            t.scores.iter().map(|s| s.to_bits()).collect(),
        )
    }
}
