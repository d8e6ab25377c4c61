//! Driver memory calls for `recall-memory-pool`: device, pinned-host and managed allocation, advice,
//! prefetch, copies, events used as fences, and memory info.
//!
//! This is the "calls turned into `Result`" level: each function binds the context to the calling thread,
//! makes one driver call inside `guard` (a cudarc panic becomes [`GpuError::BindingPanicked`]) and maps
//! the status code with [`GpuError::from_driver`], so a driver OOM is [`GpuError::OutOfMemory`]. Nothing
//! here caches, counts or owns memory; `recall-memory-pool` does.
//!
//! Only entry points present in CUDA 12.0 ([`crate::MIN_DRIVER_VERSION`]) are called unconditionally.
//! Advice and prefetch use the `_v2` entry points (CUDA 12.2) when the driver has them and the original
//! ones otherwise.

use crate::error::{DriverResultExt, GpuError};
use crate::gpu::guard;
use cudarc::driver::{CudaContext, CudaEvent, CudaSlice, CudaStream, result, sys};
use std::ffi::c_void;
use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::OnceLock;

/// The first driver version with `cuMemAdvise_v2` and `cuMemPrefetchAsync_v2`.
const V2_UNIFIED_DRIVER: i32 = 12020;

fn bind(ctx: &CudaContext) -> Result<(), GpuError> {
    ctx.bind_to_thread().gpu("cuCtxSetCurrent")
}

/// The driver's CUDA version (`12080` for 12.8), read once.
pub fn driver_version() -> Result<i32, GpuError> {
    static VERSION: OnceLock<i32> = OnceLock::new();
    if let Some(v) = VERSION.get() {
        return Ok(*v);
    }
    let v = guard("cuDriverGetVersion", || {
        let mut v = 0i32;
        // SAFETY: `v` is a valid out pointer; the library is loaded (the caller holds a context).
        unsafe { sys::cuDriverGetVersion(&mut v) }
            .result()
            .gpu("cuDriverGetVersion")?;
        Ok(v)
    })?;
    Ok(*VERSION.get_or_init(|| v))
}

/// Free and total device memory of `ctx`'s device, in bytes.
pub fn mem_get_info(ctx: &CudaContext) -> Result<(usize, usize), GpuError> {
    guard("cuMemGetInfo", || {
        bind(ctx)?;
        result::mem_get_info().gpu("cuMemGetInfo")
    })
}

/// `cuMemAlloc`: `bytes` of device memory (256-byte aligned, uninitialised). `bytes` must be non-zero.
pub fn device_alloc(ctx: &CudaContext, bytes: usize) -> Result<u64, GpuError> {
    guard("cuMemAlloc", || {
        bind(ctx)?;
        // SAFETY: the memory is returned as an address only; nobody reads it as a typed value here.
        unsafe { result::malloc_sync(bytes) }.gpu("cuMemAlloc")
    })
}

/// `cuMemFree`.
///
/// # Safety
/// - `ptr` came from [`device_alloc`] on `ctx` and is freed once.
/// - No queued or running work uses it (the caller has waited for a fence covering that work).
pub unsafe fn device_free(ctx: &CudaContext, ptr: u64) -> Result<(), GpuError> {
    guard("cuMemFree", || {
        bind(ctx)?;
        // SAFETY: forwarded to the caller (see `# Safety`).
        unsafe { result::free_sync(ptr) }.gpu("cuMemFree")
    })
}

/// How pinned host memory is mapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PinnedFlags {
    /// Write-combined: faster host-to-device copies, very slow host reads. For upload staging only.
    pub write_combined: bool,
    /// Mapped into the device's address space (`CU_MEMHOSTALLOC_DEVICEMAP`): kernels read and write it
    /// through the address [`pinned_device_ptr`] gives, over the bus, with no copy call.
    pub device_mapped: bool,
}

/// `cuMemHostAlloc` (portable): `bytes` of page-locked host memory, uninitialised. `bytes` must be
/// non-zero.
pub fn pinned_alloc(
    ctx: &CudaContext,
    bytes: usize,
    flags: PinnedFlags,
) -> Result<NonNull<u8>, GpuError> {
    guard("cuMemHostAlloc", || {
        bind(ctx)?;
        let mut f = sys::CU_MEMHOSTALLOC_PORTABLE;
        if flags.write_combined {
            f |= sys::CU_MEMHOSTALLOC_WRITECOMBINED;
        }
        if flags.device_mapped {
            f |= sys::CU_MEMHOSTALLOC_DEVICEMAP;
        }
        // SAFETY: the memory is returned as an address only.
        let p = unsafe { result::malloc_host(bytes, f) }.gpu("cuMemHostAlloc")?;
        NonNull::new(p.cast::<u8>()).ok_or(GpuError::OutOfMemory {
            call: "cuMemHostAlloc",
        })
    })
}

/// `cuMemHostGetDevicePointer`: the device address of pinned memory allocated with
/// [`PinnedFlags::device_mapped`].
///
/// # Safety
/// `ptr` came from [`pinned_alloc`] on `ctx` with `device_mapped` set and has not been freed.
pub unsafe fn pinned_device_ptr(ctx: &CudaContext, ptr: NonNull<u8>) -> Result<u64, GpuError> {
    guard("cuMemHostGetDevicePointer", || {
        bind(ctx)?;
        let mut dptr: sys::CUdeviceptr = 0;
        // SAFETY: `ptr` is a live mapped pinned allocation (see `# Safety`); `dptr` is a valid out slot;
        // the flags argument must be 0.
        unsafe { sys::cuMemHostGetDevicePointer_v2(&mut dptr, ptr.as_ptr().cast::<c_void>(), 0) }
            .result()
            .gpu("cuMemHostGetDevicePointer")?;
        Ok(dptr)
    })
}

/// `cuMemFreeHost`.
///
/// # Safety
/// - `ptr` came from [`pinned_alloc`] and is freed once.
/// - No queued or running copy reads or writes it, and no host reference to it outlives this call.
pub unsafe fn pinned_free(ctx: &CudaContext, ptr: NonNull<u8>) -> Result<(), GpuError> {
    guard("cuMemFreeHost", || {
        bind(ctx)?;
        // SAFETY: forwarded to the caller (see `# Safety`).
        unsafe { result::free_host(ptr.as_ptr().cast::<c_void>()) }.gpu("cuMemFreeHost")
    })
}

/// `cuMemAllocManaged` with `CU_MEM_ATTACH_GLOBAL`: `bytes` of managed memory, addressable from host and
/// device. `bytes` must be non-zero. The caller checks that the device supports concurrent managed access
/// and that `bytes` fits in the device's free memory (over-subscription can hang the GPU).
pub fn managed_alloc(ctx: &CudaContext, bytes: usize) -> Result<u64, GpuError> {
    guard("cuMemAllocManaged", || {
        bind(ctx)?;
        // SAFETY: the memory is returned as an address only.
        unsafe { result::malloc_managed(bytes, sys::CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL) }
            .gpu("cuMemAllocManaged")
    })
}

/// Where managed memory should live or be prefetched to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Location {
    /// Host memory.
    Host,
    /// The device of this ordinal.
    Device(usize),
}

impl Location {
    fn v1(self) -> sys::CUdevice {
        match self {
            // CU_DEVICE_CPU
            Location::Host => -1,
            Location::Device(d) => d as sys::CUdevice,
        }
    }

    fn v2(self) -> sys::CUmemLocation {
        match self {
            Location::Host => sys::CUmemLocation {
                type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST,
                id: 0,
            },
            Location::Device(d) => sys::CUmemLocation {
                type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
                id: d as i32,
            },
        }
    }
}

/// Advice for a managed range (`cuMemAdvise`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advice {
    /// The range is mostly read: devices keep read-only copies.
    SetReadMostly,
    /// Undo [`Advice::SetReadMostly`].
    UnsetReadMostly,
    /// Pages should live at this location.
    SetPreferredLocation(Location),
    /// Undo [`Advice::SetPreferredLocation`].
    UnsetPreferredLocation,
    /// This location accesses the range: keep it mapped there.
    SetAccessedBy(Location),
}

/// `cuMemAdvise` on a managed range.
///
/// # Safety
/// `ptr..ptr + bytes` lies inside one live allocation from [`managed_alloc`] on `ctx`.
pub unsafe fn mem_advise(
    ctx: &CudaContext,
    ptr: u64,
    bytes: usize,
    advice: Advice,
) -> Result<(), GpuError> {
    use sys::CUmem_advise as A;
    let (a, loc) = match advice {
        Advice::SetReadMostly => (A::CU_MEM_ADVISE_SET_READ_MOSTLY, Location::Device(0)),
        Advice::UnsetReadMostly => (A::CU_MEM_ADVISE_UNSET_READ_MOSTLY, Location::Device(0)),
        Advice::SetPreferredLocation(l) => (A::CU_MEM_ADVISE_SET_PREFERRED_LOCATION, l),
        Advice::UnsetPreferredLocation => (
            A::CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION,
            Location::Device(0),
        ),
        Advice::SetAccessedBy(l) => (A::CU_MEM_ADVISE_SET_ACCESSED_BY, l),
    };
    let v2 = driver_version()? >= V2_UNIFIED_DRIVER;
    guard("cuMemAdvise", || {
        bind(ctx)?;
        if v2 {
            // SAFETY: the range is a live managed allocation (see `# Safety`); the driver has the
            // `_v2` entry point (version checked above).
            unsafe { sys::cuMemAdvise_v2(ptr, bytes, a, loc.v2()) }
                .result()
                .gpu("cuMemAdvise_v2")
        } else {
            // SAFETY: as above; the original entry point exists in every supported driver.
            unsafe { sys::cuMemAdvise(ptr, bytes, a, loc.v1()) }
                .result()
                .gpu("cuMemAdvise")
        }
    })
}

/// `cuMemPrefetchAsync`: migrate a managed range to `to`, ordered on `stream`.
///
/// # Safety
/// `ptr..ptr + bytes` lies inside one live allocation from [`managed_alloc`] on `stream`'s context and
/// stays allocated until the prefetch has completed.
pub unsafe fn prefetch_async(
    ptr: u64,
    bytes: usize,
    to: Location,
    stream: &CudaStream,
) -> Result<(), GpuError> {
    let v2 = driver_version()? >= V2_UNIFIED_DRIVER;
    guard("cuMemPrefetchAsync", || {
        bind(stream.context())?;
        if v2 {
            // SAFETY: see `# Safety`; the driver has the `_v2` entry point (checked above).
            unsafe { sys::cuMemPrefetchAsync_v2(ptr, bytes, to.v2(), 0, stream.cu_stream()) }
                .result()
                .gpu("cuMemPrefetchAsync_v2")
        } else {
            // SAFETY: see `# Safety`; the original entry point exists in every supported driver.
            unsafe { sys::cuMemPrefetchAsync(ptr, bytes, to.v1(), stream.cu_stream()) }
                .result()
                .gpu("cuMemPrefetchAsync")
        }
    })
}

/// `cuMemcpyHtoDAsync` of `bytes` bytes. Truly asynchronous only when `src` is pinned.
///
/// # Safety
/// - `dst..dst + bytes` is live device (or managed) memory of `stream`'s context until the copy is done.
/// - `src..src + bytes` is readable host memory that stays allocated and unmodified until the copy is
///   done (for pageable memory the driver has staged it when this returns).
pub unsafe fn copy_htod_async(
    dst: u64,
    src: *const u8,
    bytes: usize,
    stream: &CudaStream,
) -> Result<(), GpuError> {
    guard("cuMemcpyHtoDAsync", || {
        bind(stream.context())?;
        // SAFETY: see `# Safety`.
        unsafe { sys::cuMemcpyHtoDAsync_v2(dst, src.cast(), bytes, stream.cu_stream()) }
            .result()
            .gpu("cuMemcpyHtoDAsync")
    })
}

/// `cuMemcpyDtoHAsync` of `bytes` bytes.
///
/// # Safety
/// - `src..src + bytes` is live device (or managed) memory of `stream`'s context until the copy is done.
/// - `dst..dst + bytes` is writable host memory, not read or written by anyone else until the copy is
///   done (wait for the stream or an event recorded after this call).
pub unsafe fn copy_dtoh_async(
    dst: *mut u8,
    src: u64,
    bytes: usize,
    stream: &CudaStream,
) -> Result<(), GpuError> {
    guard("cuMemcpyDtoHAsync", || {
        bind(stream.context())?;
        // SAFETY: see `# Safety`.
        unsafe { sys::cuMemcpyDtoHAsync_v2(dst.cast(), src, bytes, stream.cu_stream()) }
            .result()
            .gpu("cuMemcpyDtoHAsync")
    })
}

/// `cuMemcpyHtoD` (synchronous; the pageable-copy baseline).
///
/// # Safety
/// `dst..dst + bytes` is live device memory of `ctx`; `src..src + bytes` is readable host memory.
pub unsafe fn copy_htod(
    ctx: &CudaContext,
    dst: u64,
    src: *const u8,
    bytes: usize,
) -> Result<(), GpuError> {
    guard("cuMemcpyHtoD", || {
        bind(ctx)?;
        // SAFETY: see `# Safety`.
        unsafe { sys::cuMemcpyHtoD_v2(dst, src.cast(), bytes) }
            .result()
            .gpu("cuMemcpyHtoD")
    })
}

/// `cuMemcpyDtoDAsync` of `bytes` bytes.
///
/// # Safety
/// Both ranges are live device (or managed) memory of `stream`'s context until the copy is done, and
/// they do not overlap.
pub unsafe fn copy_dtod_async(
    dst: u64,
    src: u64,
    bytes: usize,
    stream: &CudaStream,
) -> Result<(), GpuError> {
    guard("cuMemcpyDtoDAsync", || {
        bind(stream.context())?;
        // SAFETY: see `# Safety`.
        unsafe { result::memcpy_dtod_async(dst, src, bytes, stream.cu_stream()) }
            .gpu("cuMemcpyDtoDAsync")
    })
}

/// `cuMemsetD8Async`: set `bytes` bytes at `dst` to `value`.
///
/// # Safety
/// `dst..dst + bytes` is live device (or managed) memory of `stream`'s context until the set is done.
pub unsafe fn memset_d8_async(
    dst: u64,
    value: u8,
    bytes: usize,
    stream: &CudaStream,
) -> Result<(), GpuError> {
    guard("cuMemsetD8Async", || {
        bind(stream.context())?;
        // SAFETY: see `# Safety`.
        unsafe { result::memset_d8_async(dst, value, bytes, stream.cu_stream()) }
            .gpu("cuMemsetD8Async")
    })
}

/// A new event for fencing (timing disabled, so recording and querying are cheap).
pub fn new_fence(ctx: &Arc<CudaContext>) -> Result<CudaEvent, GpuError> {
    guard("cuEventCreate", || ctx.new_event(None).gpu("cuEventCreate"))
}

/// A new event that records time, for benchmarks.
pub fn new_timing_event(ctx: &Arc<CudaContext>) -> Result<CudaEvent, GpuError> {
    guard("cuEventCreate", || {
        ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
            .gpu("cuEventCreate")
    })
}

/// `cuEventRecord`: the event completes when all work queued on `stream` so far has completed.
pub fn record_event(event: &CudaEvent, stream: &CudaStream) -> Result<(), GpuError> {
    guard("cuEventRecord", || {
        event.record(stream).gpu("cuEventRecord")
    })
}

/// `cuEventQuery`: has all work recorded in `event` completed? An event never recorded is complete.
pub fn event_is_complete(event: &CudaEvent) -> Result<bool, GpuError> {
    guard("cuEventQuery", || {
        bind(event.context())?;
        event.try_is_complete().gpu("cuEventQuery")
    })
}

/// `cuEventSynchronize`: wait on the host until `event` has completed.
pub fn event_synchronize(event: &CudaEvent) -> Result<(), GpuError> {
    guard("cuEventSynchronize", || {
        event.synchronize().gpu("cuEventSynchronize")
    })
}

/// Milliseconds between two recorded timing events (waits for both).
pub fn event_elapsed_ms(start: &CudaEvent, end: &CudaEvent) -> Result<f32, GpuError> {
    guard("cuEventElapsedTime", || {
        start.elapsed_ms(end).gpu("cuEventElapsedTime")
    })
}

/// `cuStreamWaitEvent`: work queued on `stream` after this waits for `event` (no host wait).
pub fn stream_wait_event(stream: &CudaStream, event: &CudaEvent) -> Result<(), GpuError> {
    guard("cuStreamWaitEvent", || {
        stream.wait(event).gpu("cuStreamWaitEvent")
    })
}

/// `cuStreamQuery`: has all work queued on `stream` completed? Never waits.
pub fn stream_is_idle(stream: &CudaStream) -> Result<bool, GpuError> {
    guard("cuStreamQuery", || {
        bind(stream.context())?;
        // SAFETY: `stream` is a live stream of its context (the handle owns or borrows it).
        match unsafe { sys::cuStreamQuery(stream.cu_stream()) }.result() {
            Ok(()) => Ok(true),
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            Err(e) => Err(GpuError::from_driver("cuStreamQuery", e)),
        }
    })
}

/// `cuStreamSynchronize`: wait on the host for all work queued on `stream`.
pub fn stream_synchronize(stream: &CudaStream) -> Result<(), GpuError> {
    guard("cuStreamSynchronize", || {
        stream.synchronize().gpu("cuStreamSynchronize")
    })
}

/// A cudarc [`CudaSlice`] over device memory that something else owns (a pool block, managed memory), so
/// that launchers taking `&CudaSlice<T>` can use it. Dropping it never frees the memory.
#[derive(Debug)]
pub struct BorrowedSlice<T> {
    slice: ManuallyDrop<CudaSlice<T>>,
}

impl<T> BorrowedSlice<T> {
    /// View `len` elements of `T` at `ptr`, ordered on `stream`.
    ///
    /// # Safety
    /// - `ptr..ptr + len * size_of::<T>()` is live device or managed memory of `stream`'s context, suitably
    ///   aligned for `T`, and outlives the returned value.
    /// - The context has cudarc event tracking disabled (as [`crate::Gpu`] does), so no events are made.
    pub unsafe fn new(stream: &Arc<CudaStream>, ptr: u64, len: usize) -> Result<Self, GpuError> {
        guard("borrow device slice", || {
            // SAFETY: forwarded to the caller (see `# Safety`); the slice is never dropped as a
            // `CudaSlice` (see `Drop`), so cudarc never frees `ptr`.
            let slice = unsafe { stream.upgrade_device_ptr::<T>(ptr, len) };
            Ok(BorrowedSlice {
                slice: ManuallyDrop::new(slice),
            })
        })
    }
}

impl<T> Deref for BorrowedSlice<T> {
    type Target = CudaSlice<T>;
    fn deref(&self) -> &CudaSlice<T> {
        &self.slice
    }
}

impl<T> DerefMut for BorrowedSlice<T> {
    fn deref_mut(&mut self) -> &mut CudaSlice<T> {
        &mut self.slice
    }
}

impl<T> Drop for BorrowedSlice<T> {
    fn drop(&mut self) {
        // SAFETY: `slice` is not used after this; `leak` releases cudarc's bookkeeping without freeing.
        let slice = unsafe { ManuallyDrop::take(&mut self.slice) };
        let _ = slice.leak();
    }
}
