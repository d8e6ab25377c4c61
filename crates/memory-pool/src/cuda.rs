//! The CUDA allocators and [`GpuMemory`], the per-engine owner of a device's pools.

use crate::allocator::{Allocator, StreamKey};
use crate::error::PoolError;
use crate::pool::{CachingPool, PoolConfig, ReusePolicy};
use recall_gpu_sys::driver::{CudaContext, CudaEvent, CudaStream};
use recall_gpu_sys::memory::{self, PinnedFlags};
use recall_gpu_sys::{Gpu, GpuError};
use std::ptr::NonNull;
use std::sync::Arc;

/// A CUDA stream, as the pools and buffers name it.
pub type Stream = Arc<CudaStream>;

fn stream_key(stream: &Stream) -> StreamKey {
    stream.cu_stream() as usize as StreamKey
}

fn record_fence(ctx: &Arc<CudaContext>, stream: &Stream) -> Result<CudaEvent, GpuError> {
    let event = memory::new_fence(ctx)?;
    memory::record_event(&event, stream)?;
    Ok(event)
}

/// Device memory from `cuMemAlloc`, fenced with CUDA events.
#[derive(Debug, Clone)]
pub struct CudaDevice {
    ctx: Arc<CudaContext>,
}

impl CudaDevice {
    /// An allocator on `ctx`'s device.
    pub fn new(ctx: Arc<CudaContext>) -> CudaDevice {
        CudaDevice { ctx }
    }
}

impl Allocator for CudaDevice {
    type Stream = Stream;
    type Fence = CudaEvent;

    fn stream_key(&self, stream: &Stream) -> StreamKey {
        stream_key(stream)
    }

    fn allocate(&self, bytes: usize) -> Result<u64, GpuError> {
        memory::device_alloc(&self.ctx, bytes)
    }

    unsafe fn deallocate(&self, addr: u64, _bytes: usize) -> Result<(), GpuError> {
        // SAFETY: forwarded to the caller (the trait's `# Safety`).
        unsafe { memory::device_free(&self.ctx, addr) }
    }

    fn stream_idle(&self, stream: &Stream) -> Result<bool, GpuError> {
        memory::stream_is_idle(stream)
    }

    fn record_fence(&self, stream: &Stream) -> Result<CudaEvent, GpuError> {
        record_fence(&self.ctx, stream)
    }

    fn fence_complete(&self, fence: &CudaEvent) -> Result<bool, GpuError> {
        memory::event_is_complete(fence)
    }

    fn wait_fence(&self, fence: &CudaEvent) -> Result<(), GpuError> {
        memory::event_synchronize(fence)
    }
}

/// Page-locked host memory from `cuMemHostAlloc`, fenced with CUDA events. Its pool must use
/// [`ReusePolicy::HostVisible`].
#[derive(Debug, Clone)]
pub struct CudaPinned {
    ctx: Arc<CudaContext>,
    flags: PinnedFlags,
}

impl CudaPinned {
    /// An allocator of pinned host memory registered with `ctx`.
    pub fn new(ctx: Arc<CudaContext>, flags: PinnedFlags) -> CudaPinned {
        CudaPinned { ctx, flags }
    }
}

impl Allocator for CudaPinned {
    type Stream = Stream;
    type Fence = CudaEvent;

    fn stream_key(&self, stream: &Stream) -> StreamKey {
        stream_key(stream)
    }

    fn allocate(&self, bytes: usize) -> Result<u64, GpuError> {
        let p = memory::pinned_alloc(&self.ctx, bytes, self.flags)?;
        Ok(p.as_ptr() as usize as u64)
    }

    unsafe fn deallocate(&self, addr: u64, _bytes: usize) -> Result<(), GpuError> {
        match NonNull::new(addr as usize as *mut u8) {
            // SAFETY: forwarded to the caller (the trait's `# Safety`).
            Some(p) => unsafe { memory::pinned_free(&self.ctx, p) },
            None => Ok(()),
        }
    }

    fn stream_idle(&self, stream: &Stream) -> Result<bool, GpuError> {
        memory::stream_is_idle(stream)
    }

    fn record_fence(&self, stream: &Stream) -> Result<CudaEvent, GpuError> {
        record_fence(&self.ctx, stream)
    }

    fn fence_complete(&self, fence: &CudaEvent) -> Result<bool, GpuError> {
        memory::event_is_complete(fence)
    }

    fn wait_fence(&self, fence: &CudaEvent) -> Result<(), GpuError> {
        memory::event_synchronize(fence)
    }
}

/// The VRAM budget of an engine.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Budget {
    /// A fraction (0, 1] of the device's total memory.
    FractionOfDevice(f64),
    /// A number of bytes.
    Bytes(usize),
}

impl Default for Budget {
    /// 80 % of the device's memory.
    fn default() -> Self {
        Budget::FractionOfDevice(0.8)
    }
}

impl Budget {
    /// The budget in bytes on a device of `total` bytes.
    pub fn resolve(self, total: usize) -> Result<usize, PoolError> {
        match self {
            Budget::Bytes(b) => Ok(b),
            Budget::FractionOfDevice(f) if f > 0.0 && f <= 1.0 => Ok((total as f64 * f) as usize),
            Budget::FractionOfDevice(f) => Err(PoolError::InvalidConfig(format!(
                "budget fraction {f} is outside (0, 1]"
            ))),
        }
    }
}

/// Name of the environment variable that forces the pinned fallback for [`crate::UnifiedBuffer`].
pub const FORCE_PINNED_ENV: &str = "RECALL_FORCE_PINNED";

/// How an engine's GPU memory is set up.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryConfig {
    /// VRAM budget of the device pool (device buffers plus managed buffers).
    pub budget: Budget,
    /// Budget of the pinned host pool, in bytes.
    pub pinned_budget_bytes: usize,
    /// Cap on device bytes kept cached.
    pub max_cached_bytes: Option<usize>,
    /// Use pinned host memory plus explicit copies even where managed memory is usable.
    pub force_pinned: bool,
}

impl Default for MemoryConfig {
    /// 80 % of VRAM, 4 GiB of pinned memory, no cache cap, and `force_pinned` from
    /// `RECALL_FORCE_PINNED=1`.
    fn default() -> Self {
        MemoryConfig {
            budget: Budget::default(),
            pinned_budget_bytes: 4 << 30,
            max_cached_bytes: None,
            force_pinned: force_pinned_from_env(),
        }
    }
}

/// True when `RECALL_FORCE_PINNED` is `1` (or `true`).
pub fn force_pinned_from_env() -> bool {
    std::env::var(FORCE_PINNED_ENV).is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"))
}

/// Why [`crate::UnifiedBuffer`]s use pinned host memory plus copies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FallbackReason {
    /// `MemoryConfig::force_pinned` or `RECALL_FORCE_PINNED=1`.
    Forced,
    /// The device lacks concurrent managed access.
    NotSupported,
}

/// How [`crate::UnifiedBuffer`]s are backed on this device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnifiedMode {
    /// Managed memory with advice and prefetch.
    Managed,
    /// Pinned host memory mirrored by device memory, with explicit asynchronous copies.
    PinnedFallback(FallbackReason),
}

#[derive(Debug)]
struct MemInner {
    ctx: Arc<CudaContext>,
    ordinal: usize,
    stream: Stream,
    device: CachingPool<CudaDevice>,
    pinned: CachingPool<CudaPinned>,
    unified: UnifiedMode,
    total_memory: usize,
}

/// The GPU memory of one engine on one device: a device pool under the VRAM budget, a pinned host pool,
/// and the choice between managed memory and the pinned fallback. Cheap to clone.
#[derive(Debug, Clone)]
pub struct GpuMemory {
    inner: Arc<MemInner>,
}

impl GpuMemory {
    /// Set up pools on `gpu`'s context; buffers are ordered on `gpu`'s stream unless told otherwise.
    pub fn new(gpu: &Gpu, config: MemoryConfig) -> Result<GpuMemory, PoolError> {
        let info = gpu.info();
        let ctx = gpu.context().clone();
        let budget = config.budget.resolve(info.total_memory)?;
        let device = CachingPool::new(
            CudaDevice::new(ctx.clone()),
            PoolConfig {
                budget_bytes: budget,
                reuse: ReusePolicy::StreamOrdered,
                max_cached_bytes: config.max_cached_bytes,
            },
        );
        let pinned = CachingPool::new(
            CudaPinned::new(ctx.clone(), PinnedFlags::default()),
            PoolConfig {
                budget_bytes: config.pinned_budget_bytes,
                reuse: ReusePolicy::HostVisible,
                max_cached_bytes: None,
            },
        );
        let unified = if config.force_pinned {
            UnifiedMode::PinnedFallback(FallbackReason::Forced)
        } else if !info.managed_memory_usable {
            UnifiedMode::PinnedFallback(FallbackReason::NotSupported)
        } else {
            UnifiedMode::Managed
        };
        Ok(GpuMemory {
            inner: Arc::new(MemInner {
                ctx,
                ordinal: info.ordinal,
                stream: gpu.stream().clone(),
                device,
                pinned,
                unified,
                total_memory: info.total_memory,
            }),
        })
    }

    /// The device pool (VRAM budget, tenants, statistics).
    pub fn device_pool(&self) -> &CachingPool<CudaDevice> {
        &self.inner.device
    }

    /// The pinned host pool.
    pub fn pinned_pool(&self) -> &CachingPool<CudaPinned> {
        &self.inner.pinned
    }

    /// The stream buffers are ordered on by default (the [`Gpu`]'s stream).
    pub fn stream(&self) -> &Stream {
        &self.inner.stream
    }

    /// The context the memory belongs to.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.inner.ctx
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> usize {
        self.inner.ordinal
    }

    /// The device's total memory.
    pub fn total_memory(&self) -> usize {
        self.inner.total_memory
    }

    /// How unified buffers are backed.
    pub fn unified_mode(&self) -> UnifiedMode {
        self.inner.unified
    }

    /// Free and total device memory now.
    pub fn mem_info(&self) -> Result<(usize, usize), PoolError> {
        Ok(memory::mem_get_info(&self.inner.ctx)?)
    }

    /// Record an error met where it cannot be returned (a drop); read with the device pool's
    /// [`CachingPool::take_errors`].
    pub(crate) fn record_error(&self, e: PoolError) {
        self.inner.device.record_error(e);
    }
}
