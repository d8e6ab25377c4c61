use crate::device::Device;
use recall_cpu_simd::{Corpus, CpuError, Metric, TopK};
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
    ) -> Result<Vec<f32>, BackendError> {
        self.similarity(queries, corpus, dim, Metric::Cosine)
    }

    /// Scores of every query against every corpus row for `metric`, query-major (`n_queries x n_rows`).
    fn similarity(
        &self,
        queries: &[f32],
        corpus: &[f32],
        dim: usize,
        metric: Metric,
    ) -> Result<Vec<f32>, BackendError>;

    /// The `k` best corpus rows of each query for `metric` (similarity fused with top-k).
    fn knn(
        &self,
        queries: &[f32],
        corpus: &[f32],
        dim: usize,
        metric: Metric,
        k: usize,
    ) -> Result<TopK, BackendError>;

    /// The `k` best of each query's candidate rows `ids[offsets[q] .. offsets[q + 1]]`.
    #[allow(clippy::too_many_arguments)]
    fn score_candidates(
        &self,
        queries: &[f32],
        corpus: &[f32],
        dim: usize,
        metric: Metric,
        offsets: &[usize],
        ids: &[u32],
        k: usize,
    ) -> Result<TopK, BackendError>;
}

/// Every op on the CPU (`recall-cpu-simd`).
#[derive(Debug, Default, Clone, Copy)]
pub struct CpuBackend;

impl Backend for CpuBackend {
    fn device(&self) -> Device {
        Device::Cpu
    }

    fn similarity(
        &self,
        queries: &[f32],
        corpus: &[f32],
        dim: usize,
        metric: Metric,
    ) -> Result<Vec<f32>, BackendError> {
        Ok(recall_cpu_simd::similarity(
            queries,
            &Corpus::f32(corpus, dim),
            metric,
        )?)
    }

    fn knn(
        &self,
        queries: &[f32],
        corpus: &[f32],
        dim: usize,
        metric: Metric,
        k: usize,
    ) -> Result<TopK, BackendError> {
        Ok(recall_cpu_simd::knn(
            queries,
            &Corpus::f32(corpus, dim),
            metric,
            k,
        )?)
    }

    fn score_candidates(
        &self,
        queries: &[f32],
        corpus: &[f32],
        dim: usize,
        metric: Metric,
        offsets: &[usize],
        ids: &[u32],
        k: usize,
    ) -> Result<TopK, BackendError> {
        Ok(recall_cpu_simd::score_candidates(
            queries,
            &Corpus::f32(corpus, dim),
            metric,
            offsets,
            ids,
            k,
        )?)
    }
}
