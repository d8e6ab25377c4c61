//! What the executor needs to know about an op to dispatch it: its kind, its size, whether and how it
//! can be split, and how to run a part of it on any backend.
//!
//! Adding an op is mechanical: a variant in [`OpKind`] (and its name), a method on [`crate::Backend`]
//! for each backend, a struct that implements [`Op`] (borrowing the call's inputs), a probe in
//! `calibration::probe_for`, and a public method on [`crate::Executor`] that validates the input and
//! calls `run_op`. Policy, breaker, OOM splitting, fallback, tenancy and metrics come with `run_op`.

use crate::backend::{Backend, BackendError};
use std::fmt;
use std::ops::Range;

/// Every op the executor dispatches. Metrics, break-even sizes and calibration are kept per kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum OpKind {
    /// Dense cosine scores, queries x corpus.
    CosineScores,
    /// Dense scores for any metric, queries x corpus.
    Similarity,
    /// Dense scores (`Similarity` or `CosineScores`) over a plain slice, for a batch: at least
    /// [`BATCH_QUERIES`](crate::calibration::probe_shape::BATCH_QUERIES) queries against at least as many rows of
    /// at least [`DIM`](crate::calibration::probe_shape::DIM) values. Calibrated at that many queries a call, as
    /// [`OpKind::KnnBatch`] is, for the same reason, with the same unit of work.
    SimilarityBatch,
    /// Similarity fused with top-k over a plain slice.
    Knn,
    /// Similarity fused with top-k over a plain slice, for a batch: at least
    /// [`BATCH_QUERIES`](crate::calibration::probe_shape::BATCH_QUERIES) queries against at least as many rows.
    /// Calibrated at that many queries a call (`Knn` at 8), so a batch goes to the GPU where its queries repay
    /// the corpus upload, which `Knn`'s break-even says they never do on a host with many cores. Its work is
    /// multiply-adds counted at most 128 values a row
    /// ([`batch_work`](crate::calibration::probe_shape::batch_work)).
    KnnBatch,
    /// Similarity fused with top-k against a corpus handle: on the GPU the corpus stays resident, so a
    /// call moves only its queries (a break-even of its own, far below `Knn`'s).
    KnnResident,
    /// Top-k over per-query candidate lists.
    ScoreCandidates,
    /// Top-k over per-query candidate lists against a corpus handle: on the GPU the corpus stays resident,
    /// so a call moves only its queries and lists (a break-even of its own, far below `ScoreCandidates`').
    ScoreCandidatesResident,
    /// Activation spreading over a graph.
    Spread,
    /// Activation spreading over a graph handle: on the GPU the graph stays resident (its own break-even).
    SpreadResident,
    /// k-means.
    KMeans,
    /// Per-row clip plus Gaussian noise.
    ClipAndNoise,
}

impl OpKind {
    /// Every kind, in index order.
    pub const ALL: [OpKind; 12] = [
        OpKind::CosineScores,
        OpKind::Similarity,
        OpKind::SimilarityBatch,
        OpKind::Knn,
        OpKind::KnnBatch,
        OpKind::KnnResident,
        OpKind::ScoreCandidates,
        OpKind::ScoreCandidatesResident,
        OpKind::Spread,
        OpKind::SpreadResident,
        OpKind::KMeans,
        OpKind::ClipAndNoise,
    ];
    /// The number of kinds (length of per-kind tables).
    pub const COUNT: usize = OpKind::ALL.len();

    /// Stable snake_case name: metric labels, cache files, `RECALL_BREAK_EVEN`.
    pub fn name(self) -> &'static str {
        match self {
            OpKind::CosineScores => "cosine_scores",
            OpKind::Similarity => "similarity",
            OpKind::SimilarityBatch => "similarity_batch",
            OpKind::Knn => "knn",
            OpKind::KnnBatch => "knn_batch",
            OpKind::KnnResident => "knn_resident",
            OpKind::ScoreCandidates => "score_candidates",
            OpKind::ScoreCandidatesResident => "score_candidates_resident",
            OpKind::Spread => "spread",
            OpKind::SpreadResident => "spread_resident",
            OpKind::KMeans => "kmeans",
            OpKind::ClipAndNoise => "clip_and_noise",
        }
    }

    /// The kind with this name.
    pub fn from_name(name: &str) -> Option<OpKind> {
        OpKind::ALL.into_iter().find(|k| k.name() == name.trim())
    }

    /// Index into per-kind tables (`0..COUNT`).
    pub fn index(self) -> usize {
        self as usize
    }

    /// The default break-even size, in this op's work units, used before calibration has run or when
    /// it cannot run: `gpu_min_work` from the configuration.
    pub(crate) fn default_break_even(self, gpu_min_work: u64) -> u64 {
        // One number for every op, in the op's own unit: multiply-adds (dense ops, k-means), edge visits
        // (spreading: edges x hops), values (clip-and-noise).
        let _ = self;
        gpu_min_work
    }
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One call of an op, with its inputs borrowed. Inputs are validated before an `Op` is built.
///
/// An op is made of `units()` independent units (the queries of a dense op). An op that can be split
/// runs correctly on any sub-range of its units, and the parts, appended in order, equal the whole:
/// that is what OOM recovery relies on. An op that cannot be split has one unit.
pub trait Op: Sync {
    /// The answer.
    type Output: Send;

    /// Which op this is.
    fn kind(&self) -> OpKind;

    /// The size of the call in the op's work units (multiply-adds for dense ops): what break-even
    /// sizes are compared with.
    fn work(&self) -> u64;

    /// Number of independent units; `1` when the op cannot be split.
    fn units(&self) -> usize {
        1
    }

    /// Device memory the units `range` need, in bytes (`0` when unknown): checked against the
    /// tenant's VRAM quota before the GPU is asked.
    fn device_bytes(&self, range: Range<usize>) -> u64 {
        let _ = range;
        0
    }

    /// Run the units `range` on `backend`.
    fn run(&self, backend: &dyn Backend, range: Range<usize>)
    -> Result<Self::Output, BackendError>;

    /// Append the answer for the next units to the answer so far. Called only when `units() > 1`.
    fn append(&self, acc: &mut Self::Output, part: Self::Output);
}

/// `cosine_scores` of validated inputs (the corpus's values left to where the op runs).
pub(crate) struct CosineOp<'a> {
    pub queries: &'a [f32],
    pub corpus: &'a [f32],
    pub dim: usize,
    /// The corpus's value check (done for a [`CorpusRef`], when it was made).
    ///
    /// [`CorpusRef`]: crate::CorpusRef
    pub corpus_check: crate::executor::CorpusCheck,
}

impl CosineOp<'_> {
    fn n_rows(&self) -> usize {
        self.corpus.len() / self.dim
    }
}

impl Op for CosineOp<'_> {
    type Output = Vec<f32>;

    fn kind(&self) -> OpKind {
        if crate::calibration::probe_shape::is_scores_batch(self.units(), self.n_rows(), self.dim) {
            OpKind::SimilarityBatch
        } else {
            OpKind::CosineScores
        }
    }

    fn work(&self) -> u64 {
        if self.kind() == OpKind::SimilarityBatch {
            return crate::calibration::probe_shape::batch_work(
                self.units(),
                self.n_rows(),
                self.dim,
            );
        }
        (self.units() as u64)
            .saturating_mul(self.n_rows() as u64)
            .saturating_mul(self.dim as u64)
    }

    fn units(&self) -> usize {
        self.queries.len() / self.dim
    }

    fn device_bytes(&self, range: Range<usize>) -> u64 {
        let (q, n, d) = (range.len() as u64, self.n_rows() as u64, self.dim as u64);
        // queries, corpus, both norm vectors, the score matrix
        4 * (q * d + n * d + q + n + q * n)
    }

    fn run(&self, backend: &dyn Backend, range: Range<usize>) -> Result<Vec<f32>, BackendError> {
        self.corpus_check.before(backend, self.corpus)?;
        let q = &self.queries[range.start * self.dim..range.end * self.dim];
        backend.cosine_scores(q, self.corpus, self.dim)
    }

    fn append(&self, acc: &mut Vec<f32>, part: Vec<f32>) {
        acc.extend_from_slice(&part);
    }
}
