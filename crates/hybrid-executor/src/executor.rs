use crate::backend::{Backend, BackendError, CpuBackend, panic_is_lost};
use crate::batching::{BatchConfig, BatchKey, Batcher};
use crate::breaker::{Admission, BreakerConfig, BreakerState, CircuitBreaker, Transition};
use crate::calibration::{self, Calibration, CalibrationConfig, LiveRates, Probe, ThresholdSource};
use crate::clock::{Clock, system_clock};
use crate::device::{Device, DevicePolicy, GpuDescription, GpuStatus};
use crate::gpu_backend::GpuBackend;
use crate::metrics::{FallbackReason, Metrics};
use crate::multi_gpu::MultiGpu;
use crate::op::{CosineOp, Op, OpKind};
use crate::shared_corpus::SharedCorpus;
use crate::tenant::{
    AdmissionError, ContextGuard, Scheduler, TenantConfig, TenantId, TenantInfo, VramLedger, Wait,
};
use recall_cpu_simd::{CpuError, Metric, TopK, check_finite, check_matrix, check_matrix_shape};
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
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
    /// The tenant's queue is full and the caller chose not to wait ([`Wait::Reject`]).
    #[error("tenant {tenant:?} queue is full ({capacity} calls waiting)")]
    BackPressure { tenant: String, capacity: usize },
    /// The caller waited for room or a turn in the tenant's queue as long as it allowed.
    #[error("tenant {tenant:?} call timed out after waiting {waited:?} in the queue")]
    QueueTimeout { tenant: String, waited: Duration },
    /// No tenant with this id was added to this executor.
    #[error("no tenant {0}")]
    UnknownTenant(TenantId),
    /// A broken internal invariant (a bug): reported, never a panic.
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<AdmissionError> for ExecError {
    fn from(e: AdmissionError) -> Self {
        match e {
            AdmissionError::BackPressure { tenant, capacity } => {
                ExecError::BackPressure { tenant, capacity }
            }
            AdmissionError::Timeout { tenant, waited } => {
                ExecError::QueueTimeout { tenant, waited }
            }
            AdmissionError::UnknownTenant(id) => ExecError::UnknownTenant(id),
        }
    }
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
    /// copies and launches outweighs its speed below it). The break-even size used until calibration
    /// has measured one, or always when `calibrate` is off.
    pub gpu_min_work: u64,
    /// Measure each op's break-even size on its first call (GPU present, policy `Auto`, no override and
    /// no cache entry). `RECALL_CALIBRATE=0` turns it off.
    pub calibrate: bool,
    /// Sizes and repetitions of calibration.
    pub calibration: CalibrationConfig,
    /// Break-even sizes per op that win over cache and calibration (`RECALL_BREAK_EVEN=op=work,…`
    /// adds to these).
    pub break_even: Vec<(OpKind, u64)>,
    /// Read and write calibration results under this directory; `None`: [`calibration::default_cache_dir`].
    pub cache_dir: Option<PathBuf>,
    /// Whether calibration results are cached on disk at all.
    pub use_cache: bool,
    /// When the circuit breaker opens and how long it keeps calls off the GPU.
    pub breaker: BreakerConfig,
    /// After out-of-memory, batches are halved down to this many units (queries), then the call falls
    /// back to the CPU.
    pub oom_split_floor: usize,
    /// Dynamic batching of single-query calls.
    pub batching: BatchConfig,
    /// Tenant calls running at once (the rest wait in their tenants' queues).
    pub max_in_flight: usize,
    /// The clock for breaker back-off, latencies and calibration timings.
    pub clock: Arc<dyn Clock>,
    /// The GPUs to use, by ordinal (`RECALL_GPUS=0,1`); `None`: every GPU that opens. With more than one,
    /// corpus handles are sharded over them and other calls go to the least-loaded one
    /// (`docs/adr/0014-multi-gpu-sharding.md`).
    pub gpus: Option<Vec<usize>>,
}

impl Default for ExecutorConfig {
    fn default() -> Self {
        ExecutorConfig {
            policy: DevicePolicy::Auto,
            force_sm: None,
            gpu_min_work: 1 << 24,
            calibrate: true,
            calibration: CalibrationConfig::default(),
            break_even: Vec::new(),
            cache_dir: None,
            use_cache: true,
            breaker: BreakerConfig::default(),
            oom_split_floor: 1,
            batching: BatchConfig::default(),
            max_in_flight: 4,
            clock: system_clock(),
            gpus: None,
        }
    }
}

impl ExecutorConfig {
    /// Apply `RECALL_BREAK_EVEN` (per-op overrides; those already in the config win) and
    /// `RECALL_CALIBRATE=0|1` and `RECALL_GPUS=0,1` (when the config names no GPUs). [`Executor::new`]
    /// calls it.
    pub fn with_env(mut self) -> Result<ExecutorConfig, ExecError> {
        if self.gpus.is_none()
            && let Ok(v) = std::env::var("RECALL_GPUS")
        {
            self.gpus = Some(
                parse_gpu_list(&v).map_err(|e| ExecError::Config(format!("RECALL_GPUS: {e}")))?,
            );
        }
        if let Ok(v) = std::env::var("RECALL_BREAK_EVEN") {
            let parsed = calibration::parse_overrides(&v)
                .map_err(|e| ExecError::Config(format!("RECALL_BREAK_EVEN: {e}")))?;
            for (op, w) in parsed {
                if !self.break_even.iter().any(|(o, _)| *o == op) {
                    self.break_even.push((op, w));
                }
            }
        }
        if let Ok(v) = std::env::var("RECALL_CALIBRATE") {
            self.calibrate = match v.trim() {
                "0" | "off" | "false" | "no" => false,
                "1" | "on" | "true" | "yes" | "" => true,
                other => {
                    return Err(ExecError::Config(format!(
                        "RECALL_CALIBRATE={other:?} is not 0 or 1"
                    )));
                }
            };
        }
        Ok(self)
    }
}

/// Parse a list of GPU ordinals such as `0,1` (spaces allowed; at least one; no repeats).
pub fn parse_gpu_list(s: &str) -> Result<Vec<usize>, String> {
    let mut out = Vec::new();
    for part in s.split(',') {
        let p = part.trim();
        let n: usize = p
            .parse()
            .map_err(|_| format!("{p:?} is not a GPU ordinal (expected a list such as 0,1)"))?;
        if out.contains(&n) {
            return Err(format!("GPU {n} is named twice"));
        }
        out.push(n);
    }
    Ok(out)
}

/// Exact or fast arithmetic (`docs/numerics.md`, "Fast mode").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Mode {
    /// The numerics contract's order in f32: the same bits on every device. The default.
    #[default]
    Exact,
    /// Batch knn (more than 8 queries) on tensor cores from f16 operands with f32 accumulation, within the
    /// documented bound. Where no tensor cores run (CPU, GPUs older than sm_80, small batches) the exact
    /// answer is returned, which is within the bound too.
    FastF16,
    /// As [`Mode::FastF16`] from bf16 operands: 8 significant bits instead of 11, the range of f32.
    FastBf16,
}

impl Mode {
    /// The terms of fast mode's bound on a dot product of dimension `dim` (`docs/numerics.md`, "Fast mode"):
    /// `(c, t)` in `|dot_fast - dot| <= c * S + t * (||q||_1 ||c||_inf + ||c||_1 ||q||_inf)`, where
    /// `S = sum_i |q_i c_i|`. `None` in exact mode, whose scores are the CPU's bits.
    ///
    /// ```
    /// use recall_hybrid_executor::Mode;
    /// assert_eq!(Mode::Exact.fast_dot_bound(768), None);
    /// let (c, t) = Mode::FastBf16.fast_dot_bound(768).unwrap();
    /// assert!(c > 2.0 * 2f64.powi(-8) && t == 0.0);
    /// ```
    pub fn fast_dot_bound(self, dim: usize) -> Option<(f64, f64)> {
        let (u, t) = match self {
            Mode::Exact => return None,
            Mode::FastF16 => (2f64.powi(-11), 2f64.powi(-25)),
            Mode::FastBf16 => (2f64.powi(-8), 0.0),
        };
        Some((2.0 * u + u * u + dim as f64 * 2f64.powi(-23), t))
    }
}

/// Options of one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CallOptions {
    /// Whose call it is; `None` runs at once, outside the tenants' queues.
    pub tenant: Option<TenantId>,
    /// What to do when the tenant's queue is full.
    pub wait: Wait,
    /// Exact (default) or fast arithmetic, for the ops that have a fast mode (batch knn).
    pub mode: Mode,
}

impl CallOptions {
    /// A call for `tenant` that is refused when its queue is full.
    pub fn tenant(tenant: TenantId) -> CallOptions {
        CallOptions {
            tenant: Some(tenant),
            wait: Wait::Reject,
            mode: Mode::Exact,
        }
    }

    /// Run with `mode` (exact or fast arithmetic).
    pub fn mode(mut self, mode: Mode) -> CallOptions {
        self.mode = mode;
        self
    }

    /// Wait for room and a turn at most `timeout`.
    pub fn wait(mut self, timeout: Duration) -> CallOptions {
        self.wait = Wait::Timeout(timeout);
        self
    }
}

/// Why a call goes where it goes.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Reason {
    /// `DevicePolicy::Cpu` / `RECALL_DEVICE=cpu`.
    PolicyCpu,
    /// No usable GPU, and why.
    NoGpu(String),
    /// `DevicePolicy::Gpu` / `RECALL_DEVICE=gpu`.
    PolicyGpu,
    /// The circuit breaker keeps calls off the GPU for `retry_in` more.
    BreakerOpen { retry_in: Duration },
    /// The breaker is half-open: the next GPU-sized call probes the GPU.
    BreakerProbe,
    /// `work >= break_even`.
    AboveBreakEven {
        work: u64,
        break_even: u64,
        source: ThresholdSource,
        /// Calibrated break-even before live throughput moved it, when it did.
        calibrated: Option<u64>,
    },
    /// `work < break_even`.
    BelowBreakEven {
        work: u64,
        break_even: u64,
        source: ThresholdSource,
        calibrated: Option<u64>,
    },
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let moved = |f: &mut fmt::Formatter<'_>, c: &Option<u64>, be: u64| match c {
            Some(c) if *c != be => write!(f, ", moved from {c} by live throughput"),
            _ => Ok(()),
        };
        match self {
            Reason::PolicyCpu => f.write_str("device policy is cpu"),
            Reason::NoGpu(why) => write!(f, "no usable GPU ({why})"),
            Reason::PolicyGpu => f.write_str("device policy is gpu"),
            Reason::BreakerOpen { retry_in } => write!(
                f,
                "the GPU failed repeatedly: circuit breaker open, probing again in {retry_in:?}"
            ),
            Reason::BreakerProbe => {
                f.write_str("circuit breaker half-open: this call probes the GPU")
            }
            Reason::AboveBreakEven {
                work,
                break_even,
                source,
                calibrated,
            } => {
                write!(f, "{work} work units >= break-even {break_even} ({source}")?;
                moved(f, calibrated, *break_even)?;
                f.write_str(")")
            }
            Reason::BelowBreakEven {
                work,
                break_even,
                source,
                calibrated,
            } => {
                write!(f, "{work} work units < break-even {break_even} ({source}")?;
                moved(f, calibrated, *break_even)?;
                f.write_str(")")
            }
        }
    }
}

/// Where a call would run, and why ([`Executor::explain_op`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub op: OpKind,
    pub work: u64,
    pub device: Device,
    pub reason: Reason,
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} on {}: {}", self.op, self.device, self.reason)
    }
}

/// A break-even size and where it came from.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Threshold {
    break_even: u64,
    source: ThresholdSource,
    calibration: Option<Calibration>,
}

/// A single query's corpus, validated once (shape and finiteness) so that batched single-query calls do
/// not scan it again per call.
#[derive(Debug, Clone, Copy)]
pub struct CorpusRef<'a> {
    data: &'a [f32],
    dim: usize,
}

impl<'a> CorpusRef<'a> {
    /// Validate `data` as `n_rows x dim` (O(n)).
    pub fn new(data: &'a [f32], dim: usize) -> Result<CorpusRef<'a>, ExecError> {
        check_matrix("corpus", data, dim)?;
        Ok(CorpusRef { data, dim })
    }

    /// The rows, row-major.
    pub fn data(&self) -> &'a [f32] {
        self.data
    }

    /// Values per row.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Number of rows.
    pub fn n_rows(&self) -> usize {
        self.data.len() / self.dim
    }

    fn identity(&self) -> (usize, usize) {
        (self.data.as_ptr() as usize, self.data.len())
    }
}

/// How a GPU attempt ended.
enum GpuAttempt<T> {
    Done(T),
    Input(CpuError),
    Failed(FallbackReason, String),
}

/// Chooses a backend per call and makes sure the call is answered.
pub struct Executor {
    config: ExecutorConfig,
    cpu: Arc<dyn Backend>,
    gpu: Option<Arc<dyn Backend>>,
    gpu_real: Option<Arc<GpuBackend>>,
    /// Every GPU in use (more than one: `multi` spreads over them).
    gpu_all: Vec<Arc<GpuBackend>>,
    multi: Option<Arc<MultiGpu>>,
    gpu_status: GpuStatus,
    device_key: Option<String>,
    cache_dir: Option<PathBuf>,
    thresholds: [OnceLock<Threshold>; OpKind::COUNT],
    /// Held by the call that calibrates an op ([`Executor::threshold`]).
    calibrating: [parking_lot::Mutex<()>; OpKind::COUNT],
    live: LiveRates,
    breaker: CircuitBreaker,
    metrics: Metrics,
    scheduler: Scheduler,
    ledger: VramLedger,
    cosine_batcher: Batcher<Vec<f32>>,
    knn_batcher: Batcher<(Vec<u32>, Vec<f32>)>,
    /// Single-query knn calls in flight (a lone caller runs at once instead of waiting for a batch).
    knn_single_in_flight: std::sync::atomic::AtomicUsize,
    /// Whether knn batches may mix tenants ([`Executor::set_batch_across_tenants`]).
    batch_across_tenants: std::sync::atomic::AtomicBool,
}

impl fmt::Debug for Executor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Executor")
            .field("config", &self.config)
            .field("gpu_status", &self.gpu_status)
            .field("breaker", &self.breaker.state())
            .finish_non_exhaustive()
    }
}

impl Executor {
    /// Set up the backends. Looks for a GPU unless the policy is `Cpu`; fails only when the policy is
    /// `Gpu` and there is none. Applies the environment ([`ExecutorConfig::with_env`]).
    pub fn new(config: ExecutorConfig) -> Result<Executor, ExecError> {
        let config = config.with_env()?;
        let (gpus, gpu_status) = match config.policy {
            DevicePolicy::Cpu => (
                Vec::new(),
                GpuStatus::Unavailable("the CPU was chosen (device policy cpu)".into()),
            ),
            DevicePolicy::Auto | DevicePolicy::Gpu => {
                match GpuBackend::discover_all(config.force_sm, config.gpus.as_deref()) {
                    Ok(found) => {
                        for b in &found {
                            let d = b.description();
                            tracing::info!(ordinal = d.ordinal, gpu = %d.name, sm = %d.sm, image = %d.image,
                                "recall: using the GPU");
                        }
                        let d = found[0].description().clone();
                        (
                            found.into_iter().map(Arc::new).collect::<Vec<_>>(),
                            GpuStatus::Ready(d),
                        )
                    }
                    Err(why) => {
                        tracing::info!(reason = %why, "recall: no usable GPU, running on the CPU");
                        (Vec::new(), GpuStatus::Unavailable(why))
                    }
                }
            }
        };
        let cpu: Arc<dyn Backend> = Arc::new(CpuBackend);
        let multi = (gpus.len() > 1).then(|| {
            Arc::new(MultiGpu::new(
                gpus.iter().map(|g| g.clone() as Arc<dyn Backend>).collect(),
            ))
        });
        let dyn_gpu = match &multi {
            Some(m) => Some(m.clone() as Arc<dyn Backend>),
            None => gpus.first().map(|g| g.clone() as Arc<dyn Backend>),
        };
        let first = gpus.first().cloned();
        let mut exec = Executor::assemble(config, cpu, dyn_gpu, first, gpu_status)?;
        exec.gpu_all = gpus;
        exec.multi = multi;
        Ok(exec)
    }

    /// An executor whose GPU slot is a [`MultiGpu`] over given backends (tests with stand-in GPUs): as
    /// [`Executor::with_backends`], with the multi-GPU metrics in [`Executor::prometheus_text`].
    pub fn with_multi_gpu(
        config: ExecutorConfig,
        cpu: Arc<dyn Backend>,
        multi: Arc<MultiGpu>,
    ) -> Result<Executor, ExecError> {
        let mut exec =
            Executor::with_backends(config, cpu, Some(multi.clone() as Arc<dyn Backend>))?;
        exec.multi = Some(multi);
        Ok(exec)
    }

    /// An executor over given backends (tests, fault injection, benchmarks). `gpu` stands in the GPU's
    /// place. The environment is not read.
    pub fn with_backends(
        config: ExecutorConfig,
        cpu: Arc<dyn Backend>,
        gpu: Option<Arc<dyn Backend>>,
    ) -> Result<Executor, ExecError> {
        let (gpu, status) = match (config.policy, gpu) {
            (DevicePolicy::Cpu, _) => (
                None,
                GpuStatus::Unavailable("the CPU was chosen (device policy cpu)".into()),
            ),
            (_, None) => (None, GpuStatus::Unavailable("no GPU backend given".into())),
            (_, Some(g)) => {
                let ordinal = match g.device() {
                    Device::Gpu { ordinal } => ordinal,
                    Device::Cpu => 0,
                };
                let desc = GpuDescription {
                    ordinal,
                    name: "substitute backend".into(),
                    sm: "none".into(),
                    sm_count: 0,
                    total_memory: 0,
                    free_memory: 0,
                    l2_cache_bytes: 0,
                    managed_memory_usable: false,
                    driver: "none".into(),
                    image: "none".into(),
                };
                (Some(g), GpuStatus::Ready(desc))
            }
        };
        Executor::assemble(config, cpu, gpu, None, status)
    }

    fn assemble(
        config: ExecutorConfig,
        cpu: Arc<dyn Backend>,
        gpu: Option<Arc<dyn Backend>>,
        gpu_real: Option<Arc<GpuBackend>>,
        gpu_status: GpuStatus,
    ) -> Result<Executor, ExecError> {
        if let (DevicePolicy::Gpu, GpuStatus::Unavailable(why)) = (config.policy, &gpu_status) {
            return Err(ExecError::GpuRequired(why.clone()));
        }
        let device_key = match &gpu_status {
            GpuStatus::Ready(d) => Some(calibration::device_key(d)),
            GpuStatus::Unavailable(_) => None,
        };
        let cache_dir = if config.use_cache {
            config
                .cache_dir
                .clone()
                .or_else(calibration::default_cache_dir)
        } else {
            None
        };
        let thresholds: [OnceLock<Threshold>; OpKind::COUNT] =
            std::array::from_fn(|_| OnceLock::new());
        let cached = match (&cache_dir, &device_key) {
            (Some(dir), Some(key)) => calibration::load_cache(dir, key),
            _ => Vec::new(),
        };
        for op in OpKind::ALL {
            let preset = if let Some((_, w)) = config.break_even.iter().find(|(o, _)| *o == op) {
                Some(Threshold {
                    break_even: *w,
                    source: ThresholdSource::Override,
                    calibration: None,
                })
            } else if !config.calibrate {
                Some(Threshold {
                    break_even: op.default_break_even(config.gpu_min_work),
                    source: ThresholdSource::Configured,
                    calibration: None,
                })
            } else {
                cached.iter().find(|c| c.op == op).map(|c| Threshold {
                    break_even: c.break_even,
                    source: ThresholdSource::Cached,
                    calibration: Some(*c),
                })
            };
            if let Some(t) = preset {
                let _ = thresholds[op.index()].set(t);
            }
        }
        let breaker = CircuitBreaker::new(config.breaker, config.clock.clone());
        let scheduler = Scheduler::new(config.max_in_flight);
        Ok(Executor {
            config,
            cpu,
            gpu,
            gpu_real,
            gpu_all: Vec::new(),
            multi: None,
            gpu_status,
            device_key,
            cache_dir,
            thresholds,
            calibrating: std::array::from_fn(|_| parking_lot::Mutex::new(())),
            live: LiveRates::default(),
            breaker,
            metrics: Metrics::default(),
            scheduler,
            ledger: VramLedger::default(),
            cosine_batcher: Batcher::default(),
            knn_batcher: Batcher::default(),
            knn_single_in_flight: std::sync::atomic::AtomicUsize::new(0),
            batch_across_tenants: std::sync::atomic::AtomicBool::new(false),
        })
    }

    pub fn config(&self) -> &ExecutorConfig {
        &self.config
    }

    pub fn gpu_status(&self) -> &GpuStatus {
        &self.gpu_status
    }

    /// The GPU backend, when there is a usable one (not while the breaker keeps calls off it).
    pub fn gpu_backend(&self) -> Option<&GpuBackend> {
        self.gpu_real
            .as_deref()
            .filter(|_| !matches!(self.breaker.state(), BreakerState::Open { .. }))
    }

    /// Every GPU backend in use, in shard order (empty without a GPU or while the breaker keeps calls off the
    /// GPUs; one entry unless several GPUs are in use).
    pub fn gpu_backends(&self) -> Vec<&GpuBackend> {
        if matches!(self.breaker.state(), BreakerState::Open { .. }) {
            return Vec::new();
        }
        if self.gpu_all.is_empty() {
            return self.gpu_real.as_deref().into_iter().collect();
        }
        self.gpu_all.iter().map(|g| g.as_ref()).collect()
    }

    /// The GPUs in use (their descriptions, in shard order; empty without a GPU).
    pub fn gpu_descriptions(&self) -> Vec<GpuDescription> {
        if self.gpu_all.is_empty() {
            return match &self.gpu_status {
                GpuStatus::Ready(d) => vec![d.clone()],
                GpuStatus::Unavailable(_) => Vec::new(),
            };
        }
        self.gpu_all
            .iter()
            .map(|g| g.description().clone())
            .collect()
    }

    /// The multi-GPU layer, when more than one GPU is in use.
    pub fn multi_gpu(&self) -> Option<&MultiGpu> {
        self.multi.as_deref()
    }

    /// (calls run on the CPU, calls run on the GPU, GPU calls that fell back to the CPU)
    pub fn counters(&self) -> (u64, u64, u64) {
        let gpu = Device::Gpu { ordinal: 0 };
        let (mut cpu_calls, mut gpu_calls) = (0, 0);
        for op in OpKind::ALL {
            cpu_calls += self.metrics.calls(op, Device::Cpu);
            gpu_calls += self.metrics.calls(op, gpu);
        }
        (cpu_calls, gpu_calls, self.metrics.fallbacks_total())
    }

    /// Everything counted so far.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Every metric in the Prometheus text format.
    pub fn prometheus_text(&self) -> String {
        let mut text = self
            .metrics
            .prometheus_text_with(self.breaker.state().code());
        if let Some(m) = &self.multi {
            use std::fmt::Write as _;
            let loads = m.loads();
            let mut put =
                |name: &str, help: &str, kind: &str, value: &dyn Fn(&crate::GpuLoad) -> u64| {
                    let _ = writeln!(text, "# HELP {name} {help}");
                    let _ = writeln!(text, "# TYPE {name} {kind}");
                    for l in &loads {
                        if let Some(d) = l.device {
                            let _ = writeln!(text, "{name}{{gpu=\"{d}\"}} {}", value(l));
                        }
                    }
                };
            put(
                "recall_multi_gpu_calls_total",
                "Calls or shards each GPU of the multi-GPU layer answered.",
                "counter",
                &|l| l.calls,
            );
            put(
                "recall_multi_gpu_moved_away_total",
                "Calls or shards that failed on a GPU and were moved to another device.",
                "counter",
                &|l| l.moved_away,
            );
            put(
                "recall_multi_gpu_in_flight",
                "Calls running on each GPU now (independent calls go to the least loaded).",
                "gauge",
                &|l| l.in_flight as u64,
            );
            put(
                "recall_multi_gpu_busy_nanoseconds_total",
                "Time each GPU spent running calls or shards, from handing the work to its backend to the answer.",
                "counter",
                &|l| l.busy_ns,
            );
            put(
                "recall_multi_gpu_lost",
                "1 when the GPU reported itself lost and is no longer used.",
                "gauge",
                &|l| u64::from(l.lost),
            );
            let _ = writeln!(
                text,
                "# HELP recall_multi_gpu_moved_to_cpu_total Calls no GPU could answer (the whole call or a shard of it), answered on the CPU by the executor.\n# TYPE recall_multi_gpu_moved_to_cpu_total counter\nrecall_multi_gpu_moved_to_cpu_total {}",
                m.moved_to_cpu()
            );
            let (calls, ns) = m.sharded();
            let _ = writeln!(
                text,
                "# HELP recall_multi_gpu_sharded_calls_total Calls split into one shard per GPU and merged.\n# TYPE recall_multi_gpu_sharded_calls_total counter\nrecall_multi_gpu_sharded_calls_total {calls}\n# HELP recall_multi_gpu_sharded_nanoseconds_total Time of the sharded calls, from the call to the merged answer.\n# TYPE recall_multi_gpu_sharded_nanoseconds_total counter\nrecall_multi_gpu_sharded_nanoseconds_total {ns}"
            );
        }
        text
    }

    /// The circuit breaker's state now.
    pub fn breaker_state(&self) -> BreakerState {
        self.breaker.state()
    }

    /// The calibration in use for `op`, if one was measured or read from the cache.
    pub fn calibration(&self, op: OpKind) -> Option<Calibration> {
        self.thresholds[op.index()]
            .get()
            .and_then(|t| t.calibration)
    }

    /// Add a tenant: its own queue, quota and share of turns.
    pub fn add_tenant(&self, config: TenantConfig) -> TenantId {
        let counters = self.metrics.register_tenant(&config.name);
        self.scheduler.add(config, counters)
    }

    /// Calls waiting in `tenant`'s queue now (not counting those running).
    pub fn queued(&self, tenant: TenantId) -> usize {
        self.scheduler.queued(tenant)
    }

    /// Device memory the executor's GPU calls hold now, in bytes, as accounted against quotas.
    pub fn vram_in_use(&self) -> u64 {
        self.ledger.in_use()
    }

    /// Where a dense call of `work` multiply-adds would run, and why (for `cosine_scores`).
    pub fn explain(&self, work: u64) -> (Device, String) {
        let d = self.explain_op(OpKind::CosineScores, work);
        (d.device, d.reason.to_string())
    }

    /// Where a call of `op` with `work` work units would run now, and why. Changes nothing (does not
    /// calibrate, does not take the breaker's probe).
    pub fn explain_op(&self, op: OpKind, work: u64) -> Decision {
        let (device, reason) = self.decide(op, work, false);
        Decision {
            op,
            work,
            device,
            reason,
        }
    }

    fn threshold(&self, op: OpKind, calibrate: bool) -> Threshold {
        let slot = &self.thresholds[op.index()];
        let default = Threshold {
            break_even: op.default_break_even(self.config.gpu_min_work),
            source: ThresholdSource::Default,
            calibration: None,
        };
        if let Some(t) = slot.get() {
            return *t;
        }
        if !calibrate {
            return default;
        }
        // One call calibrates; a call on a rayon worker thread never waits for it and runs with the default
        // meanwhile: calibration's CPU probes need rayon's pool, so workers parked on it would stop the pool it
        // waits for (a deadlock), and a worker that calibrates may, while its probe waits for a stolen part,
        // pick up another call of the op on the same thread. Other threads wait, and then find it set.
        let _calibrating = if rayon::current_thread_index().is_some() {
            match self.calibrating[op.index()].try_lock() {
                Some(g) => g,
                None => return default,
            }
        } else {
            self.calibrating[op.index()].lock()
        };
        *slot.get_or_init(|| self.resolve_threshold(op))
    }

    /// First use of `op` with a GPU and nothing preset: calibrate (and cache), or the default.
    fn resolve_threshold(&self, op: OpKind) -> Threshold {
        let default = Threshold {
            break_even: op.default_break_even(self.config.gpu_min_work),
            source: ThresholdSource::Default,
            calibration: None,
        };
        let Some(gpu) = self.gpu.as_deref() else {
            return default;
        };
        let clock = &self.config.clock;
        let probe = Probe::new(op, self.config.calibration.max_work);
        let started = clock.now();
        // The probes run the GPU backend outside `try_gpu`'s `catch_unwind`: a panic below it (a driver binding,
        // a bug) must not reach the caller here either (nor every later call of the op, which would calibrate
        // again): calibration failed, the default holds.
        let calibrated = panic_is_lost("the GPU backend panicked while calibrating", || {
            calibration::calibrate_with_probe(
                op,
                &probe,
                self.cpu.as_ref(),
                gpu,
                &self.config.calibration,
                clock.as_ref(),
            )
        });
        match calibrated {
            Ok(cal) => {
                tracing::info!(op = %op, break_even = cal.break_even, took = ?clock.now().saturating_sub(started),
                    "recall: calibrated the break-even size");
                if let (Some(dir), Some(key)) = (&self.cache_dir, &self.device_key)
                    && let Err(e) = calibration::store_cache(dir, key, &cal)
                {
                    tracing::warn!(error = %e, dir = %dir.display(), "recall: could not cache the calibration");
                }
                Threshold {
                    break_even: cal.break_even,
                    source: ThresholdSource::Calibrated,
                    calibration: Some(cal),
                }
            }
            Err(e) => {
                tracing::warn!(op = %op, error = %e, "recall: calibration failed, using the default break-even");
                default
            }
        }
    }

    /// The device and reason for a call; with `live`, calibrates on first use.
    fn decide(&self, op: OpKind, work: u64, live: bool) -> (Device, Reason) {
        let Some(gpu) = self.gpu.as_deref() else {
            return match (self.config.policy, &self.gpu_status) {
                (DevicePolicy::Cpu, _) => (Device::Cpu, Reason::PolicyCpu),
                (_, GpuStatus::Unavailable(why)) => (Device::Cpu, Reason::NoGpu(why.clone())),
                (_, GpuStatus::Ready(_)) => (Device::Cpu, Reason::NoGpu("no backend".into())),
            };
        };
        let size_reason = match self.config.policy {
            DevicePolicy::Cpu => return (Device::Cpu, Reason::PolicyCpu),
            DevicePolicy::Gpu => Reason::PolicyGpu,
            DevicePolicy::Auto => {
                let t = self.threshold(op, live);
                let (break_even, calibrated) = match &t.calibration {
                    Some(c) => (self.live.adjust(op, c), Some(c.break_even)),
                    None => (t.break_even, None),
                };
                if work < break_even {
                    return (
                        Device::Cpu,
                        Reason::BelowBreakEven {
                            work,
                            break_even,
                            source: t.source,
                            calibrated,
                        },
                    );
                }
                Reason::AboveBreakEven {
                    work,
                    break_even,
                    source: t.source,
                    calibrated,
                }
            }
        };
        match self.breaker.state() {
            BreakerState::Open { retry_in } => (Device::Cpu, Reason::BreakerOpen { retry_in }),
            BreakerState::HalfOpen => (gpu.device(), Reason::BreakerProbe),
            BreakerState::Closed => (gpu.device(), size_reason),
        }
    }

    fn note_transition(&self, t: Option<Transition>) {
        if let Some(t) = t {
            let now = self.breaker.state();
            self.metrics.record_transition(t, now);
            match t {
                Transition::Opened => {
                    tracing::warn!(state = %now, "recall: GPU circuit breaker opened, calls go to the CPU")
                }
                Transition::HalfOpened => {
                    tracing::info!("recall: GPU circuit breaker half-open, probing the GPU")
                }
                Transition::Closed => {
                    tracing::info!("recall: GPU circuit breaker closed, the GPU is back")
                }
            }
        }
    }

    /// Run `op` wherever policy, size, breaker and tenant say, splitting on out-of-memory and falling back
    /// to the CPU on any GPU failure. Every op goes through here; its input must already be validated.
    pub fn run_op<O: Op>(
        &self,
        op: &O,
        opts: &CallOptions,
    ) -> Result<Outcome<O::Output>, ExecError> {
        let clock = &self.config.clock;
        let start = clock.now();
        let permit = match opts.tenant {
            Some(t) => Some(self.scheduler.acquire(t, opts.wait)?),
            None => None,
        };
        let tenant = permit.as_ref().map(|p| &*p.info);
        let kind = op.kind();
        let work = op.work();
        let (device, reason) = self.decide(kind, work, true);
        if let Reason::BreakerOpen { .. } = reason {
            self.metrics.record_breaker_rejection();
        }
        let mut fallback = None;
        if let (Device::Gpu { .. }, Some(gpu)) = (device, self.gpu.as_deref()) {
            let (admission, t) = self.breaker.admit();
            self.note_transition(t);
            if let Admission::Rejected { .. } = admission {
                self.metrics.record_breaker_rejection();
            } else {
                let t0 = clock.now();
                match self.try_gpu(gpu, op, tenant) {
                    GpuAttempt::Done(value) => {
                        let t = self.breaker.record_success(admission);
                        self.note_transition(t);
                        let now = clock.now();
                        let model = self.calibration(kind).map(|c| c.gpu);
                        self.live.observe(
                            kind,
                            device,
                            work,
                            now.saturating_sub(t0),
                            model.as_ref(),
                        );
                        self.metrics
                            .record_call(kind, device, now.saturating_sub(start));
                        return Ok(Outcome {
                            value,
                            device,
                            fallback: None,
                        });
                    }
                    GpuAttempt::Input(e) => {
                        self.breaker.record_neutral(admission);
                        return Err(e.into());
                    }
                    GpuAttempt::Failed(reason, msg) => {
                        let t = match reason {
                            FallbackReason::DeviceLost => {
                                self.breaker.record_failure(true, admission)
                            }
                            FallbackReason::GpuError => {
                                self.breaker.record_failure(false, admission)
                            }
                            _ => {
                                self.breaker.record_neutral(admission);
                                None
                            }
                        };
                        self.note_transition(t);
                        self.metrics.record_fallback(reason);
                        tracing::warn!(op = %kind, reason = %reason, error = %msg,
                            "recall: GPU call failed, answering on the CPU");
                        fallback = Some(msg);
                    }
                }
            }
        }
        let t0 = clock.now();
        let value = op
            .run(self.cpu.as_ref(), 0..op.units())
            .map_err(cpu_error)?;
        let now = clock.now();
        if fallback.is_none() {
            let model = self.calibration(kind).map(|c| c.cpu);
            self.live.observe(
                kind,
                Device::Cpu,
                work,
                now.saturating_sub(t0),
                model.as_ref(),
            );
        }
        self.metrics
            .record_call(kind, Device::Cpu, now.saturating_sub(start));
        Ok(Outcome {
            value,
            device: Device::Cpu,
            fallback,
        })
    }

    /// The GPU part of [`run_op`](Executor::run_op): sub-batches that fit the tenant's quota, halved on
    /// out-of-memory down to the floor.
    fn try_gpu<O: Op>(
        &self,
        gpu: &dyn Backend,
        op: &O,
        tenant: Option<&TenantInfo>,
    ) -> GpuAttempt<O::Output> {
        let n = op.units().max(1);
        let floor = self.config.oom_split_floor.clamp(1, n);
        let halve = |chunk: usize| (chunk / 2).max(floor);
        let mut chunk = n;
        if let Some(quota) = tenant.and_then(|t| t.config.vram_quota) {
            while op.device_bytes(0..chunk) > quota && chunk > floor {
                chunk = halve(chunk);
            }
            let need = op.device_bytes(0..chunk);
            if need > quota {
                return GpuAttempt::Failed(
                    FallbackReason::Quota,
                    format!(
                        "the tenant's VRAM quota of {quota} bytes cannot hold the smallest batch ({need} bytes)"
                    ),
                );
            }
        }
        let _ctx = ContextGuard::enter(tenant.map(TenantInfo::context));
        let mut acc: Option<O::Output> = None;
        let mut start = 0;
        while start < n {
            let end = (start + chunk).min(n);
            let bytes = op.device_bytes(start..end);
            let Some(reservation) = self.ledger.try_reserve(tenant, bytes) else {
                // The tenant's other calls hold its quota: smaller, or the CPU.
                self.metrics.record_oom();
                if chunk > floor {
                    chunk = halve(chunk);
                    self.metrics.record_oom_split();
                    continue;
                }
                return GpuAttempt::Failed(
                    FallbackReason::Quota,
                    format!(
                        "the tenant's VRAM quota is in use by its other calls ({bytes} bytes more needed)"
                    ),
                );
            };
            self.metrics.add_gpu_memory_in_use(bytes);
            // A panic below the GPU backend (a driver binding, a bug) must not reach the caller: it becomes a
            // lost device, so the call is answered on the CPU and the GPU is taken out of use.
            let result = panic_is_lost("the GPU backend panicked", || op.run(gpu, start..end));
            drop(reservation);
            self.metrics.sub_gpu_memory_in_use(bytes);
            match result {
                Ok(part) => {
                    match acc.as_mut() {
                        None => acc = Some(part),
                        Some(a) => op.append(a, part),
                    }
                    start = end;
                }
                Err(BackendError::OutOfMemory(msg)) => {
                    self.metrics.record_oom();
                    // Cached memory (the pool's or the driver's) may be what the call was missing. A panic
                    // here is a lost device, as one in the op's run is: it must not reach the caller, nor leave
                    // the breaker's probe (when this call is it) taken for good.
                    let released =
                        panic_is_lost("the GPU backend panicked giving cached memory back", || {
                            gpu.release_cached_memory();
                            Ok(())
                        });
                    if let Err(e) = released {
                        return GpuAttempt::Failed(FallbackReason::DeviceLost, e.to_string());
                    }
                    if chunk > floor {
                        let next = halve(chunk);
                        tracing::info!(op = %op.kind(), from = chunk, to = next, error = %msg,
                            "recall: GPU out of memory, halving the batch");
                        chunk = next;
                        self.metrics.record_oom_split();
                        continue;
                    }
                    let e = BackendError::OutOfMemory(msg);
                    return GpuAttempt::Failed(FallbackReason::OutOfMemory, e.to_string());
                }
                Err(BackendError::Input(e)) => return GpuAttempt::Input(e),
                Err(e @ (BackendError::Unfit(_) | BackendError::Unsupported { .. })) => {
                    return GpuAttempt::Failed(FallbackReason::Unsupported, e.to_string());
                }
                Err(e @ BackendError::DeviceLost(_)) => {
                    return GpuAttempt::Failed(FallbackReason::DeviceLost, e.to_string());
                }
                Err(e) => return GpuAttempt::Failed(FallbackReason::GpuError, e.to_string()),
            }
        }
        match acc {
            Some(v) => GpuAttempt::Done(v),
            None => GpuAttempt::Failed(FallbackReason::GpuError, "the op has no units".into()),
        }
    }

    /// Cosine similarity of every query against every corpus row (query-major `n_queries x n_rows`).
    pub fn cosine_scores(
        &self,
        queries: &[f32],
        corpus: &[f32],
        dim: usize,
    ) -> Result<Outcome<Vec<f32>>, ExecError> {
        self.cosine_scores_with(&CallOptions::default(), queries, corpus, dim)
    }

    /// [`cosine_scores`](Executor::cosine_scores) with call options (tenant, wait).
    pub fn cosine_scores_with(
        &self,
        opts: &CallOptions,
        queries: &[f32],
        corpus: &[f32],
        dim: usize,
    ) -> Result<Outcome<Vec<f32>>, ExecError> {
        check_matrix("queries", queries, dim)?;
        // The corpus's values are checked by the op: before a GPU runs it, or by the CPU in its own pass.
        check_matrix_shape("corpus", corpus, dim)?;
        self.run_op(
            &CosineOp {
                queries,
                corpus,
                dim,
                corpus_check: CorpusCheck::pending(),
            },
            opts,
        )
    }

    /// Cosine scores of one query (`dim` values) against every corpus row. Concurrent calls against the
    /// same corpus (same tenant) are coalesced into one batched call ([`BatchConfig`]); each caller gets
    /// its own row of scores. The batch runs with the options of the call that opened it. A call made on a
    /// rayon worker thread runs on its own (see `Batcher::submit`).
    pub fn cosine_scores_single(
        &self,
        opts: &CallOptions,
        query: &[f32],
        corpus: &CorpusRef<'_>,
    ) -> Result<Outcome<Vec<f32>>, ExecError> {
        let dim = corpus.dim();
        if query.len() != dim {
            return Err(CpuError::LengthMismatch {
                what: "query",
                expected: dim,
                got: query.len(),
            }
            .into());
        }
        check_finite("query", query)?;
        let key = BatchKey {
            corpus: corpus.identity(),
            dim,
            params: 0,
            tenant: opts.tenant.map(|t| t.0),
        };
        let n_rows = corpus.n_rows();
        self.cosine_batcher.submit(
            &self.metrics,
            key,
            query,
            1,
            self.config.batching,
            |queries, _| {
                let out = self.run_op(
                    &CosineOp {
                        queries,
                        corpus: corpus.data(),
                        dim,
                        corpus_check: CorpusCheck::done(),
                    },
                    opts,
                )?;
                let rows = out.value.chunks(n_rows).map(<[f32]>::to_vec).collect();
                Ok((rows, out.device, out.fallback))
            },
        )
    }
}

impl Executor {
    /// [`Executor::knn_shared`] for one query (`dim` values). Concurrent single-query calls against the same
    /// corpus (same tenant, metric, k and mode) are coalesced into one batched call ([`BatchConfig`]), and
    /// each caller gets its own k neighbours; a caller with no other such call in flight runs at once,
    /// without waiting for a batch to fill.
    pub fn knn_shared_single(
        &self,
        opts: &CallOptions,
        query: &[f32],
        corpus: &SharedCorpus,
        metric: Metric,
        k: usize,
    ) -> Result<Outcome<TopK>, ExecError> {
        let dim = corpus.dim();
        if query.len() != dim {
            return Err(CpuError::LengthMismatch {
                what: "query",
                expected: dim,
                got: query.len(),
            }
            .into());
        }
        self.knn_shared_coalesced(opts, query, corpus, metric, k)
    }

    /// [`Executor::knn_shared`] for a few queries that may share a batch with other calls: concurrent calls
    /// against the same corpus (same tenant, metric, k and mode), single-query or not, are coalesced into one
    /// batched call of up to `max_batch` queries ([`BatchConfig`]), so that they share one pass over the
    /// corpus (on a GPU, one GEMM tile holds 128 queries, whether 9 or 128 use it). Each caller gets the k
    /// neighbours of each of its own queries, the same answer as [`Executor::knn_shared`]. A call of
    /// `max_batch` queries or more, with no other such call in flight, or made on a rayon worker thread (see
    /// `Batcher::submit`), runs at once.
    pub fn knn_shared_coalesced(
        &self,
        opts: &CallOptions,
        queries: &[f32],
        corpus: &SharedCorpus,
        metric: Metric,
        k: usize,
    ) -> Result<Outcome<TopK>, ExecError> {
        use std::sync::atomic::Ordering;
        let dim = corpus.dim();
        let nq = check_matrix("queries", queries, dim)?;
        struct InFlight<'a>(&'a std::sync::atomic::AtomicUsize);
        impl Drop for InFlight<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::Relaxed);
            }
        }
        let others = self.knn_single_in_flight.fetch_add(1, Ordering::Relaxed);
        let _in_flight = InFlight(&self.knn_single_in_flight);
        let max_batch = self.config.batching.max_batch;
        if others == 0 || max_batch <= 1 || nq >= max_batch {
            return self.knn_shared(opts, queries, corpus, metric, k);
        }
        check_finite("queries", queries)?;
        // k before any batch: a caller's k out of range is its own error, never its batch-mates'.
        crate::ops::check_k(k, corpus.n_rows())?;
        let metric_code = match metric {
            Metric::Dot => 0u128,
            Metric::Cosine => 1,
            Metric::L2 => 2,
        };
        let mode_code = match opts.mode {
            Mode::Exact => 0u128,
            Mode::FastF16 => 1,
            Mode::FastBf16 => 2,
        };
        let across = self.batch_across_tenants.load(Ordering::Relaxed);
        let key = BatchKey {
            // An explicit corpus id (never an address: this batcher only sees shared corpora).
            corpus: (corpus.id() as usize, usize::MAX),
            dim,
            // k in the low 64 bits, the metric and the mode above them.
            params: (k as u128) | (metric_code << 64) | (mode_code << 72),
            tenant: if across {
                None
            } else {
                opts.tenant.map(|t| t.0)
            },
        };
        let out = self.knn_batcher.submit(
            &self.metrics,
            key,
            queries,
            nq,
            self.config.batching,
            |all, sizes| {
                let out = self.knn_shared(opts, all, corpus, metric, k)?;
                let mut answers = Vec::with_capacity(sizes.len());
                let mut at = 0;
                for &n in sizes {
                    let (ids, scores) = (
                        out.value.ids.get(at..at + n * k),
                        out.value.scores.get(at..at + n * k),
                    );
                    let (Some(ids), Some(scores)) = (ids, scores) else {
                        return Err(ExecError::Internal(format!(
                            "a batch of {} queries returned {} neighbours",
                            sizes.iter().sum::<usize>(),
                            out.value.ids.len()
                        )));
                    };
                    answers.push((ids.to_vec(), scores.to_vec()));
                    at += n * k;
                }
                Ok((answers, out.device, out.fallback))
            },
        )?;
        let (ids, scores) = out.value;
        Ok(Outcome {
            value: TopK { k, ids, scores },
            device: out.device,
            fallback: out.fallback,
        })
    }

    /// Let calls of different tenants share a knn batch ([`Executor::knn_shared_coalesced`]); off by default.
    /// On, a batch runs under the tenant of the call that opened it (its queue turn and VRAM quota), with the
    /// other tenants' queries riding along: fuller batches (fewer passes over the corpus) at the price of
    /// per-tenant accounting for those queries. Leave it off where tenants have VRAM quotas.
    pub fn set_batch_across_tenants(&self, on: bool) {
        self.batch_across_tenants
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }
}

fn cpu_error(e: BackendError) -> ExecError {
    match e {
        BackendError::Input(e) => ExecError::InvalidInput(e),
        other => ExecError::Config(format!("cpu backend failed: {other}")),
    }
}

/// The value check (NaN, infinity) of a corpus slice whose op leaves it to where the op runs: the CPU's form
/// checks the corpus in its own pass with the same error, so a call the CPU answers reads the corpus once;
/// before a GPU backend runs the op (its kernels trust their input) the slice is scanned here, once per call
/// (a split batch runs the op once per chunk).
pub(crate) struct CorpusCheck(Option<std::sync::OnceLock<Result<(), CpuError>>>);

impl CorpusCheck {
    /// A slice not checked yet.
    pub(crate) fn pending() -> CorpusCheck {
        CorpusCheck(Some(std::sync::OnceLock::new()))
    }

    /// A corpus checked when it was made (a `SharedCorpus`, a [`CorpusRef`]).
    pub(crate) fn done() -> CorpusCheck {
        CorpusCheck(None)
    }

    /// Before `backend` runs the op on `corpus`: the first NaN or infinity as the error, where needed.
    pub(crate) fn before(&self, backend: &dyn Backend, corpus: &[f32]) -> Result<(), CpuError> {
        self.before_with(backend, || check_finite("corpus", corpus))
    }

    /// [`CorpusCheck::before`] with the op's own check of the values it reads (candidate scoring: only the named
    /// rows), made once per call where needed.
    pub(crate) fn before_with(
        &self,
        backend: &dyn Backend,
        check: impl FnOnce() -> Result<(), CpuError>,
    ) -> Result<(), CpuError> {
        match &self.0 {
            Some(once) if backend.device() != Device::Cpu => once.get_or_init(check).clone(),
            _ => Ok(()),
        }
    }
}
