use crate::backend::{Backend, BackendError, CpuBackend};
use crate::device::{Device, DevicePolicy, GpuStatus};
use crate::gpu_backend::GpuBackend;
use recall_cpu_simd::{CpuError, check_finite};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use thiserror::Error;

/// Why a call could not be answered at all. GPU trouble is never one of them: it falls back to the CPU.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ExecError {
    #[error("invalid input: {0}")]
    InvalidInput(#[from] CpuError),
    /// `DevicePolicy::Gpu` (or `RECALL_DEVICE=gpu`) and no usable GPU.
    #[error("a GPU was required but none is usable: {0}")]
    GpuRequired(String),
    #[error("invalid configuration: {0}")]
    Config(String),
}

/// A call's answer and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome<T> {
    pub value: T,
    pub device: Device,
    /// Why the call ran on the CPU after the GPU had been chosen, if it did.
    pub fallback: Option<String>,
}

/// How an [`Executor`] is set up.
#[derive(Debug, Clone)]
pub struct ExecutorConfig {
    pub policy: DevicePolicy,
    /// Run one arch's kernel code only (differential testing); `None` picks the best image.
    pub force_sm: Option<u32>,
    /// Under `Auto`, calls with fewer multiply-adds than this run on the CPU (the GPU's fixed cost of
    /// copies and launches outweighs its speed below it).
    pub gpu_min_work: u64,
}

impl Default for ExecutorConfig {
    fn default() -> Self {
        ExecutorConfig {
            policy: DevicePolicy::Auto,
            force_sm: None,
            gpu_min_work: 1 << 24,
        }
    }
}

/// Chooses a backend per call and makes sure the call is answered.
#[derive(Debug)]
pub struct Executor {
    config: ExecutorConfig,
    cpu: CpuBackend,
    gpu: Option<GpuBackend>,
    gpu_status: GpuStatus,
    gpu_healthy: AtomicBool,
    calls_cpu: AtomicU64,
    calls_gpu: AtomicU64,
    fallbacks: AtomicU64,
}

impl Executor {
    /// Set up the backends. Looks for a GPU unless the policy is `Cpu`; fails only when the policy is
    /// `Gpu` and there is none.
    pub fn new(config: ExecutorConfig) -> Result<Executor, ExecError> {
        let (gpu, gpu_status) = match config.policy {
            DevicePolicy::Cpu => (
                None,
                GpuStatus::Unavailable("the CPU was chosen (device policy cpu)".into()),
            ),
            DevicePolicy::Auto | DevicePolicy::Gpu => match GpuBackend::discover(config.force_sm) {
                Ok(b) => {
                    let d = b.description().clone();
                    tracing::info!(gpu = %d.name, sm = %d.sm, image = %d.image, "recall: using the GPU");
                    (Some(b), GpuStatus::Ready(d))
                }
                Err(why) => {
                    tracing::info!(reason = %why, "recall: no usable GPU, running on the CPU");
                    (None, GpuStatus::Unavailable(why))
                }
            },
        };
        if let (DevicePolicy::Gpu, GpuStatus::Unavailable(why)) = (config.policy, &gpu_status) {
            return Err(ExecError::GpuRequired(why.clone()));
        }
        Ok(Executor {
            config,
            cpu: CpuBackend,
            gpu,
            gpu_status,
            gpu_healthy: AtomicBool::new(true),
            calls_cpu: AtomicU64::new(0),
            calls_gpu: AtomicU64::new(0),
            fallbacks: AtomicU64::new(0),
        })
    }

    pub fn config(&self) -> &ExecutorConfig {
        &self.config
    }

    pub fn gpu_status(&self) -> &GpuStatus {
        &self.gpu_status
    }

    /// The GPU backend, when there is a usable one.
    pub fn gpu_backend(&self) -> Option<&GpuBackend> {
        self.gpu
            .as_ref()
            .filter(|_| self.gpu_healthy.load(Ordering::Relaxed))
    }

    /// (calls run on the CPU, calls run on the GPU, GPU calls that fell back to the CPU)
    pub fn counters(&self) -> (u64, u64, u64) {
        (
            self.calls_cpu.load(Ordering::Relaxed),
            self.calls_gpu.load(Ordering::Relaxed),
            self.fallbacks.load(Ordering::Relaxed),
        )
    }

    /// Where a call of `work` multiply-adds would run, and why.
    pub fn explain(&self, work: u64) -> (Device, String) {
        match (self.config.policy, self.gpu_backend()) {
            (DevicePolicy::Cpu, _) => (Device::Cpu, "device policy is cpu".into()),
            (_, None) => (
                Device::Cpu,
                format!("no usable GPU ({})", self.unavailable_reason()),
            ),
            (DevicePolicy::Gpu, Some(g)) => (g.device(), "device policy is gpu".into()),
            (DevicePolicy::Auto, Some(g)) if work >= self.config.gpu_min_work => (
                g.device(),
                format!(
                    "{work} multiply-adds >= break-even {}",
                    self.config.gpu_min_work
                ),
            ),
            (DevicePolicy::Auto, Some(_)) => (
                Device::Cpu,
                format!(
                    "{work} multiply-adds < break-even {}",
                    self.config.gpu_min_work
                ),
            ),
        }
    }

    fn unavailable_reason(&self) -> String {
        match &self.gpu_status {
            GpuStatus::Unavailable(why) => why.clone(),
            GpuStatus::Ready(_) => "the GPU failed earlier and was taken out of use".into(),
        }
    }

    /// Run `op` on the chosen backend; on any GPU failure, run it on the CPU.
    pub(crate) fn dispatch<T>(
        &self,
        op: &'static str,
        work: u64,
        run: impl Fn(&dyn Backend) -> Result<T, BackendError>,
    ) -> Result<Outcome<T>, ExecError> {
        let (device, _) = self.explain(work);
        if let (Device::Gpu { .. }, Some(gpu)) = (device, self.gpu_backend()) {
            match run(gpu) {
                Ok(value) => {
                    self.calls_gpu.fetch_add(1, Ordering::Relaxed);
                    return Ok(Outcome {
                        value,
                        device,
                        fallback: None,
                    });
                }
                Err(BackendError::Input(e)) => return Err(e.into()),
                Err(e) => {
                    if matches!(e, BackendError::DeviceLost(_)) {
                        self.gpu_healthy.store(false, Ordering::Relaxed);
                    }
                    self.fallbacks.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(op, error = %e, "recall: GPU call failed, answering on the CPU");
                    let value = run(&self.cpu).map_err(cpu_error)?;
                    self.calls_cpu.fetch_add(1, Ordering::Relaxed);
                    return Ok(Outcome {
                        value,
                        device: Device::Cpu,
                        fallback: Some(e.to_string()),
                    });
                }
            }
        }
        let value = run(&self.cpu).map_err(cpu_error)?;
        self.calls_cpu.fetch_add(1, Ordering::Relaxed);
        Ok(Outcome {
            value,
            device: Device::Cpu,
            fallback: None,
        })
    }

    /// Cosine similarity of every query against every corpus row (query-major `n_queries x n_rows`).
    pub fn cosine_scores(
        &self,
        queries: &[f32],
        corpus: &[f32],
        dim: usize,
    ) -> Result<Outcome<Vec<f32>>, ExecError> {
        let n_queries = check_matrix("queries", queries, dim)?;
        let n_rows = check_matrix("corpus", corpus, dim)?;
        let work = (n_queries as u64)
            .saturating_mul(n_rows as u64)
            .saturating_mul(dim as u64);
        self.dispatch("cosine_scores", work, |b| {
            b.cosine_scores(queries, corpus, dim)
        })
    }
}

fn cpu_error(e: BackendError) -> ExecError {
    match e {
        BackendError::Input(e) => ExecError::InvalidInput(e),
        other => ExecError::Config(format!("cpu backend failed: {other}")),
    }
}

/// Shape and value checks shared by the dense ops: returns the number of rows.
pub(crate) fn check_matrix(what: &'static str, x: &[f32], dim: usize) -> Result<usize, CpuError> {
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
    check_finite(what, x)?;
    Ok(x.len() / dim)
}
