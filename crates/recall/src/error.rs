use recall_hybrid_executor::ExecError;
use thiserror::Error;

/// Everything a recall call can return instead of an answer. GPU failures are not among them: they are
/// answered on the CPU.
///
/// ```
/// let engine = recall::Engine::new()?;
/// let err = engine.knn(&[f32::NAN], &[1.0], 1, recall::Metric::Dot, 1).unwrap_err();
/// assert!(matches!(err, recall::Error::InvalidInput(_)));
/// assert!(err.to_string().starts_with("invalid input"));
/// # Ok::<(), recall::Error>(())
/// ```
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The input is malformed (shape, NaN or infinity, empty, out of range); nothing was run.
    #[error("invalid input: {0}")]
    InvalidInput(#[from] recall_cpu_simd::CpuError),
    /// A GPU was required (`RECALL_DEVICE=gpu` or `DevicePolicy::Gpu`) and none is usable.
    #[error("a GPU was required but none is usable: {0}")]
    GpuRequired(String),
    /// A configuration value is malformed (for example `RECALL_DEVICE=fast`).
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A tenant's queue was full, or the call waited for its turn longer than it allowed.
    #[error("overloaded: {0}")]
    Overloaded(String),
    /// A bug in recall, reported instead of a panic.
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<ExecError> for Error {
    fn from(e: ExecError) -> Self {
        match e {
            ExecError::InvalidInput(e) => Error::InvalidInput(e),
            ExecError::GpuRequired(why) => Error::GpuRequired(why),
            ExecError::Config(why) => Error::Config(why),
            // A caller's mistake (an id from another engine), not a bug in recall.
            ExecError::UnknownTenant(id) => {
                Error::Config(format!("{id} was not added to this engine"))
            }
            e @ (ExecError::BackPressure { .. } | ExecError::QueueTimeout { .. }) => {
                Error::Overloaded(e.to_string())
            }
            other => Error::Internal(other.to_string()),
        }
    }
}
