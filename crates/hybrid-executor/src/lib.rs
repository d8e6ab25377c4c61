//! Where each recall call runs, and the guarantee that it is answered.
//!
//! One [`Backend`] interface with a CPU implementation (always present) and a GPU implementation (cargo
//! feature `gpu`, on by default). The [`Executor`] validates the input once, picks a backend by the
//! [`DevicePolicy`] and the size of the call, and turns any GPU failure into a CPU execution of the same
//! call: the caller gets the same answer, plus the device that produced it and the reason for any
//! fallback.
//!
//! Architecture invariant: the executor sees backends, never the driver: GPU specifics stay behind
//! `recall-gpu-kernels` and `recall-gpu-sys`.
//! Architecture invariant: input is validated here, before any backend runs; backends may assume it valid.

mod backend;
pub mod bench;
mod device;
pub mod difftest;
mod executor;
mod gpu_backend;
mod ops;

pub use backend::{Backend, BackendError, CpuBackend};
pub use device::{Device, DevicePolicy, GpuDescription, GpuStatus};
pub use executor::{ExecError, Executor, ExecutorConfig, Outcome};
pub use gpu_backend::{GpuBackend, bundle_arches};

/// True when this build contains the GPU backend (cargo feature `gpu`).
pub const GPU_COMPILED_IN: bool = cfg!(feature = "gpu");
