use crate::device::Device;
use recall_cpu_simd::CpuError;
use thiserror::Error;

/// A backend's failure. Only the GPU backend fails for reasons other than the input.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BackendError {
    #[error(transparent)]
    Input(#[from] CpuError),
    /// The device could not hold the call's data.
    #[error("gpu out of memory: {0}")]
    OutOfMemory(String),
    /// The device is gone or its context is poisoned: stop using it.
    #[error("gpu device lost: {0}")]
    DeviceLost(String),
    /// Any other GPU failure (load, launch, copy).
    #[error("gpu failure: {0}")]
    Gpu(String),
}

/// One device's implementation of every op. Input arrives validated (see the crate's invariants).
pub trait Backend: Send + Sync {
    fn device(&self) -> Device;

    /// Cosine similarity of `queries` (`n_queries x dim`) against `corpus` (`n_rows x dim`), query-major.
    fn cosine_scores(
        &self,
        queries: &[f32],
        corpus: &[f32],
        dim: usize,
    ) -> Result<Vec<f32>, BackendError>;
}

/// Every op on the CPU (`recall-cpu-simd`).
#[derive(Debug, Default, Clone, Copy)]
pub struct CpuBackend;

impl Backend for CpuBackend {
    fn device(&self) -> Device {
        Device::Cpu
    }

    fn cosine_scores(
        &self,
        queries: &[f32],
        corpus: &[f32],
        dim: usize,
    ) -> Result<Vec<f32>, BackendError> {
        let qn = recall_cpu_simd::row_norms(queries, dim)?;
        let cn = recall_cpu_simd::row_norms(corpus, dim)?;
        let mut out = vec![0.0f32; qn.len() * cn.len()];
        recall_cpu_simd::cosine_scores(queries, &qn, corpus, &cn, dim, &mut out)?;
        Ok(out)
    }
}
