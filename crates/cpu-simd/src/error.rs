use thiserror::Error;

/// Why a CPU op refused its input. Every variant is raised before any work is done.
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
}
