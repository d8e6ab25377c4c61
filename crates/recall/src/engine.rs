use crate::Error;
use recall_hybrid_executor::{Device, DevicePolicy, Executor, ExecutorConfig, GpuStatus};

/// The entry point: owns the backends and answers every op.
///
/// Create one per process (it opens the GPU and loads the kernels once) and share it; it is `Send + Sync`.
#[derive(Debug)]
pub struct Engine {
    exec: Executor,
}

/// Options for an [`Engine`]; [`Engine::new`] uses the defaults and the environment.
#[derive(Debug, Clone, Default)]
pub struct EngineBuilder {
    device: Option<DevicePolicy>,
    force_sm: Option<u32>,
    gpu_min_work: Option<u64>,
}

impl EngineBuilder {
    /// Which devices calls may use. Overrides `RECALL_DEVICE`.
    pub fn device(mut self, policy: DevicePolicy) -> Self {
        self.device = Some(policy);
        self
    }

    /// Run one arch's kernel code only (e.g. `86` for sm_86 PTX, JIT-compiled for the device at hand).
    /// For differential testing; normal use lets the loader pick.
    pub fn force_arch(mut self, sm: u32) -> Self {
        self.force_sm = Some(sm);
        self
    }

    /// Under the `auto` policy, calls with fewer multiply-adds than this run on the CPU. Setting it turns
    /// off the measured break-even sizes (calibration) in favour of this one.
    pub fn gpu_min_work(mut self, multiply_adds: u64) -> Self {
        self.gpu_min_work = Some(multiply_adds);
        self
    }

    pub fn build(self) -> Result<Engine, Error> {
        let policy = match self.device {
            Some(p) => p,
            None => DevicePolicy::from_env().map_err(Error::Config)?,
        };
        let mut config = ExecutorConfig {
            policy,
            force_sm: self.force_sm,
            ..ExecutorConfig::default()
        };
        if let Some(w) = self.gpu_min_work {
            config.gpu_min_work = w;
            config.calibrate = false;
        }
        Ok(Engine {
            exec: Executor::new(config)?,
        })
    }
}

/// A score matrix and where it was computed.
#[derive(Debug, Clone, PartialEq)]
pub struct Scores {
    /// Row-major `n_queries x n_rows`: `values[q * n_rows + r]`.
    pub values: Vec<f32>,
    pub n_queries: usize,
    pub n_rows: usize,
    pub device: Device,
    /// Set when the GPU was chosen, failed, and the CPU answered instead.
    pub fallback: Option<String>,
}

impl Engine {
    /// An engine with the default options and `RECALL_DEVICE` from the environment.
    pub fn new() -> Result<Engine, Error> {
        Engine::builder().build()
    }

    pub fn builder() -> EngineBuilder {
        EngineBuilder::default()
    }

    /// The GPU in use, or why there is none.
    pub fn gpu_status(&self) -> &GpuStatus {
        self.exec.gpu_status()
    }

    pub fn device_policy(&self) -> DevicePolicy {
        self.exec.config().policy
    }

    /// Where a call of `multiply_adds` work would run, and why.
    pub fn explain(&self, multiply_adds: u64) -> (Device, String) {
        self.exec.explain(multiply_adds)
    }

    /// (calls run on the CPU, on the GPU, GPU calls that fell back to the CPU) since the engine started.
    pub fn counters(&self) -> (u64, u64, u64) {
        self.exec.counters()
    }

    /// Every executor metric (calls by op and device, fallbacks by reason, OOM events, batch sizes,
    /// latency quantiles, GPU memory in use) in the Prometheus text format.
    pub fn metrics_text(&self) -> String {
        self.exec.prometheus_text()
    }

    /// Cosine similarity of each query (`n_queries x dim`, row-major) against each corpus row
    /// (`n_rows x dim`). Exact mode: the same bits on every device (`docs/numerics.md`).
    pub fn cosine_similarity(
        &self,
        queries: &[f32],
        corpus: &[f32],
        dim: usize,
    ) -> Result<Scores, Error> {
        let out = self.exec.cosine_scores(queries, corpus, dim)?;
        Ok(Scores {
            n_queries: queries.len() / dim,
            n_rows: corpus.len() / dim,
            values: out.value,
            device: out.device,
            fallback: out.fallback,
        })
    }

    /// The GPU backend in use, for the benchmark harness and self-tests.
    #[doc(hidden)]
    pub fn gpu_backend(&self) -> Option<&recall_hybrid_executor::GpuBackend> {
        self.exec.gpu_backend()
    }

    pub(crate) fn diff_test(
        &self,
        arches: Option<&[u32]>,
        quick: bool,
    ) -> Result<crate::diagnostics::DiffReport, Error> {
        #[cfg(feature = "gpu")]
        {
            match self.exec.gpu_backend() {
                Some(gpu) => Ok(recall_hybrid_executor::difftest::run(gpu, arches, quick)),
                None => Err(Error::GpuRequired(match self.exec.gpu_status() {
                    GpuStatus::Unavailable(why) => why.clone(),
                    GpuStatus::Ready(_) => "the GPU was taken out of use after a failure".into(),
                })),
            }
        }
        #[cfg(not(feature = "gpu"))]
        {
            let _ = (arches, quick);
            Err(Error::GpuRequired(
                "this build has no GPU support (cargo feature `gpu` is off)".into(),
            ))
        }
    }
}
