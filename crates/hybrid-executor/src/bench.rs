//! Measurements behind `recall bench`: the GPU kernels with data resident on the device, the CPU engine,
//! and the device's copy bandwidth as the ceiling of memory-bound kernels.

use crate::difftest::SplitMix;
use std::time::Instant;

/// Median of a set of milliseconds.
pub fn median(mut xs: Vec<f64>) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// A random `n_rows x dim` matrix, uniform in [-1, 1).
pub fn random_matrix(seed: u64, n_rows: usize, dim: usize) -> Vec<f32> {
    let mut rng = SplitMix::new(seed);
    (0..n_rows * dim).map(|_| rng.next_f32()).collect()
}

/// One cosine measurement.
#[derive(Debug, Clone, PartialEq)]
pub struct CosineFigures {
    pub n_queries: usize,
    pub n_rows: usize,
    pub dim: usize,
    /// Kernel only, corpus and norms resident: median ms.
    pub gpu_kernel_ms: Option<f64>,
    /// Query upload, query norm, kernel and score download, corpus resident: median ms.
    pub gpu_resident_call_ms: Option<f64>,
    /// Device-to-device copy bandwidth in GB/s (bytes read + bytes written per second).
    pub gpu_copy_gbps: Option<f64>,
    /// The CPU engine, one call: median ms.
    pub cpu_ms: Option<f64>,
    /// Whether GPU and CPU scores were bit-identical.
    pub bit_identical: Option<bool>,
}

impl CosineFigures {
    /// Bytes the kernel must move at least: the corpus, its norms, the scores.
    pub fn min_bytes(&self) -> f64 {
        (self.n_rows * self.dim * 4 + self.n_rows * 4 + self.n_queries * self.n_rows * 4) as f64
    }
    /// Achieved bandwidth of the kernel in GB/s.
    pub fn kernel_gbps(&self) -> Option<f64> {
        self.gpu_kernel_ms
            .map(|ms| self.min_bytes() / (ms * 1e-3) / 1e9)
    }
}

/// Time the CPU engine on the cosine op.
pub fn cpu_cosine_ms(
    queries: &[f32],
    corpus: &[f32],
    dim: usize,
    iters: usize,
) -> Result<(f64, Vec<f32>), String> {
    let qn = recall_cpu_simd::row_norms(queries, dim).map_err(|e| e.to_string())?;
    let cn = recall_cpu_simd::row_norms(corpus, dim).map_err(|e| e.to_string())?;
    let mut out = vec![0.0f32; qn.len() * cn.len()];
    let mut times = Vec::new();
    for _ in 0..iters.max(1) {
        let t = Instant::now();
        recall_cpu_simd::cosine_scores(queries, &qn, corpus, &cn, dim, &mut out)
            .map_err(|e| e.to_string())?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    Ok((median(times), out))
}

#[cfg(feature = "gpu")]
mod gpu {
    use super::*;
    use crate::gpu_backend::GpuBackend;

    fn err(e: impl std::fmt::Display) -> String {
        e.to_string()
    }

    /// Device-to-device copy of `bytes`, median GB/s counting the bytes read and written.
    pub fn copy_gbps(backend: &GpuBackend, bytes: usize, iters: usize) -> Result<f64, String> {
        let (g, _) = backend.parts();
        let n = bytes / 4;
        let src = g.alloc_zeros::<f32>(n).map_err(err)?;
        let mut dst = g.alloc_zeros::<f32>(n).map_err(err)?;
        g.copy_dtod(&src, &mut dst).map_err(err)?;
        g.synchronize().map_err(err)?;
        let mut times = Vec::new();
        for _ in 0..iters.max(1) {
            let t = Instant::now();
            g.copy_dtod(&src, &mut dst).map_err(err)?;
            g.synchronize().map_err(err)?;
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
        let ms = median(times);
        Ok(2.0 * (n * 4) as f64 / (ms * 1e-3) / 1e9)
    }

    /// GPU cosine with the corpus resident: (kernel-only ms, resident-call ms, scores of the last call).
    pub fn cosine_ms(
        backend: &GpuBackend,
        queries: &[f32],
        corpus: &[f32],
        dim: usize,
        iters: usize,
    ) -> Result<(f64, f64, Vec<f32>), String> {
        let (g, k) = backend.parts();
        let (nq, n) = (queries.len() / dim, corpus.len() / dim);
        let c = g.upload(corpus).map_err(err)?;
        let mut cn = g.alloc_zeros::<f32>(n).map_err(err)?;
        k.row_norms_f32(g, &c, n, dim, &mut cn).map_err(err)?;
        let q = g.upload(queries).map_err(err)?;
        let mut qn = g.alloc_zeros::<f32>(nq).map_err(err)?;
        k.row_norms_f32(g, &q, nq, dim, &mut qn).map_err(err)?;
        let mut out = g.alloc_zeros::<f32>(nq * n).map_err(err)?;
        // Warm-up.
        k.cosine_f32_rows(g, &q, &qn, &c, &cn, nq, n, dim, &mut out)
            .map_err(err)?;
        g.synchronize().map_err(err)?;
        let mut kernel = Vec::new();
        for _ in 0..iters.max(1) {
            let t = Instant::now();
            k.cosine_f32_rows(g, &q, &qn, &c, &cn, nq, n, dim, &mut out)
                .map_err(err)?;
            g.synchronize().map_err(err)?;
            kernel.push(t.elapsed().as_secs_f64() * 1e3);
        }
        let mut host = vec![0.0f32; nq * n];
        let mut call = Vec::new();
        for _ in 0..iters.max(1) {
            let t = Instant::now();
            let q = g.upload(queries).map_err(err)?;
            let mut qn = g.alloc_zeros::<f32>(nq).map_err(err)?;
            k.row_norms_f32(g, &q, nq, dim, &mut qn).map_err(err)?;
            k.cosine_f32_rows(g, &q, &qn, &c, &cn, nq, n, dim, &mut out)
                .map_err(err)?;
            g.download_into(&out, &mut host).map_err(err)?;
            call.push(t.elapsed().as_secs_f64() * 1e3);
        }
        Ok((median(kernel), median(call), host))
    }
}

#[cfg(feature = "gpu")]
pub use gpu::{copy_gbps, cosine_ms};

#[cfg(not(feature = "gpu"))]
mod no_gpu {
    use crate::gpu_backend::GpuBackend;

    /// Without GPU support there is nothing to measure.
    pub fn copy_gbps(_: &GpuBackend, _: usize, _: usize) -> Result<f64, String> {
        Err("this build has no GPU support".into())
    }

    /// Without GPU support there is nothing to measure.
    pub fn cosine_ms(
        _: &GpuBackend,
        _: &[f32],
        _: &[f32],
        _: usize,
        _: usize,
    ) -> Result<(f64, f64, Vec<f32>), String> {
        Err("this build has no GPU support".into())
    }
}

#[cfg(not(feature = "gpu"))]
pub use no_gpu::{copy_gbps, cosine_ms};
