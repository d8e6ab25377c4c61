//! Finding GPUs without ever panicking.

use crate::error::{DriverResultExt, GpuError};
use cudarc::driver::{CudaContext, result, sys};
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// The oldest driver recall uses: CUDA 12.0 (driver 525 and newer). The bundle's cubins come from CUDA 12.9's
/// `ptxas` and its newest PTX is ISA 7.8; a 12.x driver loads both.
pub const MIN_DRIVER_VERSION: i32 = 12000;

/// Why no GPU is usable. Each is an ordinary outcome that sends work to the CPU.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NoGpu {
    /// `libcuda` could not be loaded: no NVIDIA driver on this machine.
    NoDriver,
    /// The driver is older than [`MIN_DRIVER_VERSION`].
    DriverTooOld { found: i32, required: i32 },
    /// `cuInit` or a query failed.
    InitFailed(GpuError),
    /// The driver reports no CUDA device.
    NoDevice,
}

impl fmt::Display for NoGpu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NoGpu::NoDriver => write!(f, "no NVIDIA driver found (libcuda could not be loaded)"),
            NoGpu::DriverTooOld { found, required } => write!(
                f,
                "the NVIDIA driver supports CUDA {}, recall needs CUDA {} or newer",
                driver_version_string(*found),
                driver_version_string(*required)
            ),
            NoGpu::InitFailed(e) => write!(f, "the CUDA driver failed to initialise: {e}"),
            NoGpu::NoDevice => write!(f, "the NVIDIA driver reports no CUDA device"),
        }
    }
}

/// `12080` -> `"12.8"`.
pub fn driver_version_string(v: i32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

/// Facts about one device, read once at discovery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    pub ordinal: usize,
    pub name: String,
    /// `(major, minor)`, e.g. `(9, 0)` for Hopper.
    pub compute_capability: (u32, u32),
    pub sm_count: u32,
    pub total_memory: usize,
    /// Free memory when discovery ran.
    pub free_memory: usize,
    pub l2_cache_bytes: usize,
    /// Managed (unified) memory with concurrent access from host and device: the condition under which
    /// recall uses managed memory at all.
    pub managed_memory_usable: bool,
    pub max_shared_memory_per_block_optin: usize,
    /// Theoretical DRAM bandwidth from clock and bus width, in bytes per second (0 if unknown).
    pub theoretical_bandwidth: u64,
}

impl DeviceInfo {
    /// `"sm_90"` style name of the device's architecture.
    pub fn sm(&self) -> String {
        format!(
            "sm_{}{}",
            self.compute_capability.0, self.compute_capability.1
        )
    }
}

/// What discovery found: the driver version and the devices, or why there is no usable GPU.
#[derive(Debug, Clone)]
pub struct Probe {
    pub driver_version: Option<i32>,
    pub result: Result<Vec<DeviceInfo>, NoGpu>,
}

/// Look for CUDA devices. Never panics; cheap enough to call at start-up.
pub fn probe() -> Probe {
    // SAFETY: `is_culib_present` only tries to open the library by name and drops it.
    if !unsafe { sys::is_culib_present() } {
        return Probe {
            driver_version: None,
            result: Err(NoGpu::NoDriver),
        };
    }
    // cudarc panics when a symbol is missing from an old libcuda; keep that from reaching the caller.
    match catch_unwind(AssertUnwindSafe(probe_loaded)) {
        Ok(p) => p,
        Err(_) => Probe {
            driver_version: None,
            result: Err(NoGpu::InitFailed(GpuError::BindingPanicked {
                call: "device discovery",
            })),
        },
    }
}

fn probe_loaded() -> Probe {
    if let Err(e) = result::init().gpu("cuInit") {
        return Probe {
            driver_version: None,
            result: Err(NoGpu::InitFailed(e)),
        };
    }
    let mut version = 0i32;
    // SAFETY: the library is loaded (checked above) and `version` is a valid out pointer.
    if let Err(e) = unsafe { sys::cuDriverGetVersion(&mut version) }
        .result()
        .gpu("cuDriverGetVersion")
    {
        return Probe {
            driver_version: None,
            result: Err(NoGpu::InitFailed(e)),
        };
    }
    if version < MIN_DRIVER_VERSION {
        return Probe {
            driver_version: Some(version),
            result: Err(NoGpu::DriverTooOld {
                found: version,
                required: MIN_DRIVER_VERSION,
            }),
        };
    }
    let count = match result::device::get_count().gpu("cuDeviceGetCount") {
        Ok(n) => n,
        Err(e) => {
            return Probe {
                driver_version: Some(version),
                result: Err(NoGpu::InitFailed(e)),
            };
        }
    };
    if count <= 0 {
        return Probe {
            driver_version: Some(version),
            result: Err(NoGpu::NoDevice),
        };
    }
    let mut devices = Vec::new();
    for ordinal in 0..count as usize {
        match device_info(ordinal) {
            Ok(info) => devices.push(info),
            Err(e) => {
                tracing::warn!(ordinal, error = %e, "skipping CUDA device that failed its queries");
            }
        }
    }
    if devices.is_empty() {
        return Probe {
            driver_version: Some(version),
            result: Err(NoGpu::NoDevice),
        };
    }
    Probe {
        driver_version: Some(version),
        result: Ok(devices),
    }
}

fn attr(dev: sys::CUdevice, a: sys::CUdevice_attribute) -> Result<i32, GpuError> {
    // SAFETY: `dev` came from `cuDeviceGet` after a successful `cuInit`.
    unsafe { result::device::get_attribute(dev, a) }.gpu("cuDeviceGetAttribute")
}

/// Read the facts of device `ordinal`. Retains (and releases on return) its primary context to read free
/// memory.
pub(crate) fn device_info(ordinal: usize) -> Result<DeviceInfo, GpuError> {
    use sys::CUdevice_attribute_enum as A;
    let dev = result::device::get(ordinal as i32).gpu("cuDeviceGet")?;
    let name = result::device::get_name(dev).gpu("cuDeviceGetName")?;
    let major = attr(dev, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
    let minor = attr(dev, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
    let sm_count = attr(dev, A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
    let l2 = attr(dev, A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)?;
    let managed = attr(dev, A::CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY)?;
    let concurrent = attr(dev, A::CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS)?;
    let smem_optin = attr(
        dev,
        A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
    )?;
    let mem_clock_khz = attr(dev, A::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE).unwrap_or(0);
    let bus_bits = attr(dev, A::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH).unwrap_or(0);
    // SAFETY: `dev` is a valid device handle.
    let total_memory = unsafe { result::device::total_mem(dev) }.gpu("cuDeviceTotalMem")?;
    let ctx = CudaContext::new(ordinal).gpu("cuDevicePrimaryCtxRetain")?;
    let (free_memory, _) = ctx.mem_get_info().gpu("cuMemGetInfo")?;
    Ok(DeviceInfo {
        ordinal,
        name,
        compute_capability: (major.max(0) as u32, minor.max(0) as u32),
        sm_count: sm_count.max(0) as u32,
        total_memory,
        free_memory,
        l2_cache_bytes: l2.max(0) as usize,
        managed_memory_usable: managed > 0 && concurrent > 0,
        max_shared_memory_per_block_optin: smem_optin.max(0) as usize,
        // DDR: two transfers per clock.
        theoretical_bandwidth: 2 * (mem_clock_khz.max(0) as u64) * 1000 * (bus_bits.max(0) as u64)
            / 8,
    })
}
