use thiserror::Error;

/// Why a CPU op refused its input. Every variant is raised before any work is done, except
/// [`CpuError::ActivationOverflow`], which spreading raises after the hop that overflowed, and
/// [`CpuError::KMeansOverflow`], which k-means raises on its result (at the first iteration whose inertia is not
/// finite, without running the rest).
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CpuError {
    #[error("dimension must be at least 1")]
    ZeroDim,
    #[error("{what} has {len} values, which is not a multiple of the dimension {dim}")]
    RaggedMatrix {
        what: &'static str,
        len: usize,
        dim: usize,
    },
    #[error("{what} is empty")]
    Empty { what: &'static str },
    #[error("{what} has length {got}, expected {expected}")]
    LengthMismatch {
        what: &'static str,
        expected: usize,
        got: usize,
    },
    #[error("{what} holds a NaN or infinite value at index {index}")]
    NonFinite { what: &'static str, index: usize },
    #[error("k = {k} is out of range: it must be between 1 and {n}")]
    KOutOfRange { k: usize, n: usize },
    #[error("{what}[{index}] = {id} is out of range for {n} rows")]
    IdOutOfRange {
        what: &'static str,
        index: usize,
        id: u64,
        n: usize,
    },
    #[error("id {id} appears twice in the candidate list of query {query}")]
    DuplicateId { query: usize, id: u32 },
    /// A seed list names node `id` twice, at positions `first` and `second` of the list.
    #[error("seed list names node {id} twice (at positions {first} and {second})")]
    DuplicateSeed {
        id: u32,
        first: usize,
        second: usize,
    },
    #[error("{what} has {len} entries, more than the supported {max}")]
    TooLarge {
        what: &'static str,
        len: usize,
        max: usize,
    },
    #[error("{what} holds a negative value at index {index}")]
    Negative { what: &'static str, index: usize },
    #[error("{what} = {value} is out of range: expected {expected}")]
    ParamOutOfRange {
        what: &'static str,
        value: String,
        expected: &'static str,
    },
    #[error("csr indptr is invalid at index {index}: {reason}")]
    BadIndptr { index: usize, reason: &'static str },
    #[error("activation overflowed to infinity in hop {hop}")]
    ActivationOverflow { hop: usize },
    /// Finite points whose squared distances, or a cluster's sum of members, pass `f32::MAX`: the inertia of
    /// `iteration` (1-based) is infinite, or (`iteration` = the last) a final centroid is.
    #[error(
        "k-means overflowed to infinity in iteration {iteration} (squared distances or a cluster's sum past \
         f32::MAX: scale the points down)"
    )]
    KMeansOverflow { iteration: usize },
    #[error("unknown simd level {name:?}: expected scalar, neon, avx2 or avx512")]
    UnknownSimdLevel { name: String },
}
