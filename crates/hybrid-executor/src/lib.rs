//! Where each recall call runs, and the guarantee that it is answered.
//!
//! One [`Backend`] interface with a CPU implementation (always present), a GPU implementation (cargo
//! feature `gpu`, on by default; without it the build is CPU-only and never looks for a driver) and a
//! fault-injecting wrapper for tests ([`FaultInjecting`]). The [`Executor`] validates the input once
//! and sends every op through one path (`run_op`, see `docs/dispatch.md`):
//!
//! 1. tenancy: calls made for a tenant wait their turn in its bounded queue ([`TenantConfig`],
//!    [`CallOptions`]); a full queue is [`ExecError::BackPressure`] or a wait bounded by the caller;
//! 2. policy: [`DevicePolicy`] (`RECALL_DEVICE`), then the op's break-even size (measured on first
//!    use, cached per device, overridable, moved by live throughput; [`Executor::explain_op`] says why);
//! 3. the circuit breaker ([`BreakerState`]) keeps calls off a GPU that keeps failing;
//! 4. on the GPU, out-of-memory halves the batch down to a floor; any GPU failure then reruns the call
//!    on the CPU, which returns the same answer (exact mode); a metric and a log line record it;
//! 5. [`Metrics`] count calls, fallbacks, OOM events, batch sizes and latencies
//!    ([`Executor::prometheus_text`]).
//!
//! Single-query calls against the same corpus are coalesced into batches
//! ([`Executor::cosine_scores_single`], [`BatchConfig`]).
//!
//! Architecture invariant: the executor sees backends, never the driver: GPU specifics stay behind
//! `recall-gpu-kernels` and `recall-gpu-sys`.
//! Architecture invariant: input is validated here, before any backend runs; backends may assume it valid.
//! Two exceptions, so that a call the CPU answers reads its largest input once: clip-and-noise's values (NaN,
//! infinity) are checked by the backend that runs the op (`Backend::clip_and_noise_into`), and a knn or
//! similarity corpus slice's values by the op before a GPU runs it (once per call), the CPU's knn and
//! similarity checking them in their own pass with the same error.
//! Architecture invariant: every op goes through `Executor::run_op`; no op method picks a backend itself.
//! Architecture invariant: a GPU failure is never returned to the caller; only bad input, a required but
//! missing GPU, back-pressure and queue timeouts are.
//! Architecture invariant: no `unsafe` in this crate.

#![forbid(unsafe_code)]

mod backend;
mod batching;
pub mod bench;
mod breaker;
pub mod calibration;
mod clock;
mod device;
pub mod difftest;
pub use difftest::power_law_graph;
mod executor;
mod fault;
mod gpu_backend;
#[cfg(feature = "gpu")]
mod gpu_shared_graph;
mod gpu_test_fault;
mod metrics;
mod multi_gpu;
mod op;
mod ops;
mod shared_corpus;
mod shared_graph;
mod tenant;

pub use backend::{Backend, BackendError, CpuBackend, FastFormat};
pub use batching::BatchConfig;
pub use breaker::{Admission, BreakerConfig, BreakerState, CircuitBreaker, Transition};
pub use calibration::{Calibration, CalibrationConfig, LinearModel, ThresholdSource};
pub use clock::{Clock, ManualClock, SystemClock};
pub use device::{Device, DevicePolicy, GpuDescription, GpuStatus};
pub use executor::{
    CallOptions, CorpusRef, Decision, ExecError, Executor, ExecutorConfig, Mode, Outcome, Reason,
    parse_gpu_list,
};
pub use fault::{FaultInjecting, FaultKind, FaultPlan, FaultRule, FaultStats, FaultStep, Trigger};
pub use gpu_backend::{
    GpuBackend, STAGED_CHUNK_BYTES, STAGED_DOWNLOAD_MIN_BYTES, STAGED_UPLOAD_MIN_BYTES,
    STAGING_PAYBACK, STAGING_RING_CHUNK_BYTES, bundle_arches,
};
pub use gpu_test_fault::{TEST_FAULT_ENV, TestFault, TestFaultAction, TestFaultOp};
pub use metrics::{
    BatchPhase, FallbackReason, LogHistogram, Metrics, Pow2Histogram, TenantCounters,
};
pub use multi_gpu::{GpuLoad, MultiGpu};
pub use op::{Op, OpKind};
pub use shared_corpus::SharedCorpus;
pub use shared_graph::SharedGraph;
pub use tenant::{TenantConfig, TenantContext, TenantId, VramLedger, Wait, current_tenant};

/// True when this build contains the GPU backend (cargo feature `gpu`).
pub const GPU_COMPILED_IN: bool = cfg!(feature = "gpu");
