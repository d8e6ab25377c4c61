use crate::pool::TenantId;
use recall_gpu_sys::GpuError;
use std::fmt;
use thiserror::Error;

/// Which limit an out-of-memory error hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OomScope {
    /// The pool's (engine's) VRAM budget, checked before the driver is asked.
    Pool,
    /// A tenant's quota, checked before the driver is asked.
    Tenant(TenantId),
    /// The driver itself ran out, after the pool trimmed its cache and tried once more; or the device's
    /// free memory is too small for a managed allocation.
    Device,
}

impl fmt::Display for OomScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OomScope::Pool => write!(f, "pool budget"),
            OomScope::Tenant(t) => write!(f, "tenant {} quota", t.0),
            OomScope::Device => write!(f, "device memory"),
        }
    }
}

/// Errors of the memory pool and its buffers.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum PoolError {
    /// A request does not fit. `in_use` and `budget` are those of `scope` (for [`OomScope::Device`]:
    /// the pool's bytes in use and the device's free or total memory).
    #[error("out of memory: {requested} bytes requested, {in_use} in use, {scope} {budget}")]
    OutOfMemory {
        requested: usize,
        in_use: usize,
        budget: usize,
        scope: OomScope,
    },
    /// Any other driver failure.
    #[error("gpu driver error")]
    Gpu(#[from] GpuError),
    /// `len` elements of `elem_size` bytes overflow `usize`.
    #[error("size overflow: {len} elements of {elem_size} bytes")]
    SizeOverflow { len: usize, elem_size: usize },
    /// Two lengths that must match do not.
    #[error("length mismatch: expected {expected} elements, found {found}")]
    LengthMismatch { expected: usize, found: usize },
    /// A configuration value is out of range.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
}

impl PoolError {
    /// True for [`PoolError::OutOfMemory`] and for a driver out-of-memory.
    pub fn is_out_of_memory(&self) -> bool {
        match self {
            PoolError::OutOfMemory { .. } => true,
            PoolError::Gpu(e) => e.is_out_of_memory(),
            _ => false,
        }
    }

    /// True when the device must not be used again.
    pub fn is_device_lost(&self) -> bool {
        matches!(self, PoolError::Gpu(e) if e.is_device_lost())
    }
}

pub(crate) fn byte_len<T>(len: usize) -> Result<usize, PoolError> {
    len.checked_mul(std::mem::size_of::<T>())
        .ok_or(PoolError::SizeOverflow {
            len,
            elem_size: std::mem::size_of::<T>(),
        })
}
