//! The only crate of recall that talks to the CUDA driver.
//!
//! Three levels, as in cudarc (which this crate wraps, loading `libcuda` at run time): raw driver calls
//! (`cudarc::driver::sys`), calls turned into `Result` (`cudarc::driver::result`), and owning handles
//! ([`Gpu`], and cudarc's streams, slices and modules, re-exported here). Every status code becomes a
//! [`GpuError`] at the call; out-of-memory and a lost device are variants of their own, because the
//! executor acts differently on each.
//!
//! Architecture invariant: no other recall crate depends on cudarc or calls the driver. `memory-pool` and
//! `gpu-kernels` build on the handles exported here.
//!
//! Architecture invariant: discovery never panics. No `libcuda`, no device, a driver older than
//! [`MIN_DRIVER_VERSION`], or an initialisation error each give a [`NoGpu`] reason, which callers turn into
//! the CPU path.

mod discovery;
mod error;
mod gpu;
mod host;
pub mod memory;
mod tensor_map;

pub use discovery::{DeviceInfo, MIN_DRIVER_VERSION, NoGpu, Probe, driver_version_string, probe};
pub use error::GpuError;
pub use gpu::{Gpu, MappedReadback, ModuleImage};
pub use host::{CopyStream, Fence, HostRegistration};
pub use tensor_map::{Element, TensorMap, tensor_map_2d};

/// Driver handle types used by the crates above this one. They are cudarc's owning types; recall code
/// names them through this module so that only `gpu-sys` depends on cudarc.
pub mod driver {
    pub use cudarc::driver::{
        CudaContext, CudaEvent, CudaFunction, CudaModule, CudaSlice, CudaStream, CudaView,
        CudaViewMut, DevicePtr, DevicePtrMut, DeviceRepr, LaunchConfig, PinnedHostSlice,
        ValidAsZeroBits,
    };
}
