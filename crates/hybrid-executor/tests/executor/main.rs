//! The executor's robustness, dispatch, tenancy and batching, on fake backends (no GPU needed).

#![allow(clippy::unwrap_used)] // a test crate: helpers panic on failure like the tests do

mod batching;
mod break_even;
mod calibrate;
mod faults;
mod knn_batching;
mod lifecycle;
mod ops;
mod tenants;

use recall_hybrid_executor::{
    Backend, BackendError, BreakerConfig, CpuBackend, Device, DevicePolicy, Executor,
    ExecutorConfig, FaultInjecting, FaultPlan, ManualClock,
};
use std::sync::Arc;
use std::time::Duration;

/// Deterministic values in [-1, 1).
pub fn matrix(seed: u64, rows: usize, dim: usize) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..rows * dim)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// The reference answer.
pub fn cpu(queries: &[f32], corpus: &[f32], dim: usize) -> Vec<f32> {
    CpuBackend.cosine_scores(queries, corpus, dim).unwrap()
}

pub fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

pub const GPU: Device = Device::Gpu { ordinal: 0 };

/// Every call GPU-sized, no calibration, no cache, a manual clock.
pub fn config(clock: &Arc<ManualClock>) -> ExecutorConfig {
    ExecutorConfig {
        policy: DevicePolicy::Auto,
        gpu_min_work: 0,
        calibrate: false,
        use_cache: false,
        breaker: BreakerConfig {
            failure_threshold: 3,
            backoff: Duration::from_secs(10),
            max_backoff: Duration::from_secs(40),
        },
        clock: clock.clone(),
        ..ExecutorConfig::default()
    }
}

/// An executor whose GPU is the CPU backend with `plan`'s faults.
pub fn faulty(
    plan: FaultPlan,
    tweak: impl FnOnce(&mut ExecutorConfig),
) -> (Executor, Arc<FaultInjecting<CpuBackend>>, Arc<ManualClock>) {
    let clock = ManualClock::new();
    let mut cfg = config(&clock);
    tweak(&mut cfg);
    let gpu = Arc::new(FaultInjecting::new(CpuBackend, plan));
    let exec = Executor::with_backends(cfg, Arc::new(CpuBackend), Some(gpu.clone())).unwrap();
    (exec, gpu, clock)
}

/// A backend that passes calls to the CPU and records what it saw.
#[derive(Debug, Default)]
pub struct Recording {
    pub units: parking_lot::Mutex<Vec<usize>>,
    pub tenants: parking_lot::Mutex<Vec<Option<recall_hybrid_executor::TenantContext>>>,
}

impl Backend for Recording {
    fn device(&self) -> Device {
        GPU
    }

    fn cosine_scores(&self, q: &[f32], c: &[f32], dim: usize) -> Result<Vec<f32>, BackendError> {
        self.units.lock().push(q.len() / dim);
        self.tenants
            .lock()
            .push(recall_hybrid_executor::current_tenant());
        CpuBackend.cosine_scores(q, c, dim)
    }
}

/// A GPU double that, like the real kernels, trusts the corpus values it is given: it answers through the CPU
/// on a copy of the corpus whose NaNs and infinities are zeros. A value check the executor owes before a GPU
/// runs an op, if skipped, shows as an answer where an error was due (a double that answered through the CPU
/// unchanged would make the CPU's own check and hide it). Clip-and-noise, whose values the backend that runs
/// it checks (`Backend::clip_and_noise_into`), goes to the CPU as it is.
#[derive(Debug, Default)]
pub struct Trusting;

fn zero_non_finite(corpus: &[f32]) -> Vec<f32> {
    corpus
        .iter()
        .map(|&x| if x.is_finite() { x } else { 0.0 })
        .collect()
}

impl Backend for Trusting {
    fn device(&self) -> Device {
        GPU
    }

    fn similarity(
        &self,
        q: &[f32],
        c: &[f32],
        dim: usize,
        metric: recall_cpu_simd::Metric,
    ) -> Result<Vec<f32>, BackendError> {
        CpuBackend.similarity(q, &zero_non_finite(c), dim, metric)
    }

    fn knn(
        &self,
        q: &[f32],
        c: &[f32],
        dim: usize,
        metric: recall_cpu_simd::Metric,
        k: usize,
    ) -> Result<recall_cpu_simd::TopK, BackendError> {
        CpuBackend.knn(q, &zero_non_finite(c), dim, metric, k)
    }

    fn score_candidates(
        &self,
        q: &[f32],
        c: &[f32],
        dim: usize,
        metric: recall_cpu_simd::Metric,
        offsets: &[usize],
        ids: &[u32],
        k: usize,
    ) -> Result<recall_cpu_simd::TopK, BackendError> {
        CpuBackend.score_candidates(q, &zero_non_finite(c), dim, metric, offsets, ids, k)
    }

    fn clip_and_noise_into(
        &self,
        x: &[f32],
        dim: usize,
        clip: f32,
        sigma: f32,
        seed: u64,
        out: &mut [f32],
    ) -> Result<(), BackendError> {
        CpuBackend.clip_and_noise_into(x, dim, clip, sigma, seed, out)
    }
}
