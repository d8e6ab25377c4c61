use cudarc::driver::{DriverError, sys::CUresult};
use thiserror::Error;

/// A failed driver call, classified by what the caller should do about it.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum GpuError {
    /// The device could not satisfy an allocation. Retry smaller, or fall back to the CPU.
    #[error("gpu out of memory during {call}")]
    OutOfMemory { call: &'static str },
    /// The context is unusable: a sticky error (illegal address, launch failure, ECC error, device
    /// removed). Every later call on this context fails too; fall back and stop using this device.
    #[error("gpu device lost during {call}: {name} ({code})")]
    DeviceLost {
        call: &'static str,
        code: u32,
        name: String,
    },
    /// Any other driver error; the context remains usable.
    #[error("cuda driver call {call} failed: {name} ({code})")]
    Driver {
        call: &'static str,
        code: u32,
        name: String,
    },
    /// A kernel image in the bundle could not be loaded for this device.
    #[error("no loadable kernel image for sm_{major}{minor}: {reason}")]
    NoImage {
        major: u32,
        minor: u32,
        reason: String,
    },
    /// The driver library panicked inside cudarc (a missing symbol on an old driver); caught here.
    #[error("cuda driver binding panicked during {call}")]
    BindingPanicked { call: &'static str },
}

impl GpuError {
    /// Classify a driver status code from the call named `call`.
    pub fn from_driver(call: &'static str, err: DriverError) -> Self {
        let code = err.0 as u32;
        let name = err
            .error_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|_| format!("{:?}", err.0));
        match err.0 {
            CUresult::CUDA_ERROR_OUT_OF_MEMORY => GpuError::OutOfMemory { call },
            CUresult::CUDA_ERROR_ILLEGAL_ADDRESS
            | CUresult::CUDA_ERROR_LAUNCH_FAILED
            | CUresult::CUDA_ERROR_LAUNCH_TIMEOUT
            | CUresult::CUDA_ERROR_ECC_UNCORRECTABLE
            | CUresult::CUDA_ERROR_HARDWARE_STACK_ERROR
            | CUresult::CUDA_ERROR_ILLEGAL_INSTRUCTION
            | CUresult::CUDA_ERROR_MISALIGNED_ADDRESS
            | CUresult::CUDA_ERROR_INVALID_ADDRESS_SPACE
            | CUresult::CUDA_ERROR_INVALID_PC
            | CUresult::CUDA_ERROR_CONTEXT_IS_DESTROYED
            | CUresult::CUDA_ERROR_DEVICE_UNAVAILABLE
            | CUresult::CUDA_ERROR_DEINITIALIZED => GpuError::DeviceLost { call, code, name },
            _ => GpuError::Driver { call, code, name },
        }
    }

    /// True for errors after which the device must not be used again in this process.
    pub fn is_device_lost(&self) -> bool {
        matches!(
            self,
            GpuError::DeviceLost { .. } | GpuError::BindingPanicked { .. }
        )
    }

    /// True for out-of-memory.
    pub fn is_out_of_memory(&self) -> bool {
        matches!(self, GpuError::OutOfMemory { .. })
    }
}

/// `result.map_err(..)` shorthand: `.gpu("cuMemAlloc")?`.
pub(crate) trait DriverResultExt<T> {
    fn gpu(self, call: &'static str) -> Result<T, GpuError>;
}

impl<T> DriverResultExt<T> for Result<T, DriverError> {
    fn gpu(self, call: &'static str) -> Result<T, GpuError> {
        self.map_err(|e| GpuError::from_driver(call, e))
    }
}
