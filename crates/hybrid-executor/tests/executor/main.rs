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
