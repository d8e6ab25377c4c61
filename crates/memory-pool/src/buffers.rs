//! Typed RAII buffers: device, pinned host, managed, and unified (managed or pinned plus copies).
//!
//! Every buffer is ordered on one stream (its block's stream): its copies, prefetches and the kernels
//! that use it go on that stream, and it is freed on that stream. Buffers are `Send` and `Sync`: the
//! memory is reached only through methods that order on the stream or wait for it first.

use crate::cuda::{CudaDevice, CudaPinned, GpuMemory, Stream, UnifiedMode};
use crate::error::{OomScope, PoolError, byte_len};
use crate::pool::{Block, Reservation, TenantId};
use parking_lot::Mutex;
use recall_gpu_sys::driver::{CudaEvent, CudaSlice};
use recall_gpu_sys::memory::{self, Advice, BorrowedSlice, Location};
use std::fmt;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut, Range};
use std::sync::atomic::{AtomicBool, Ordering};

/// Plain data that is copied to and from the device byte for byte.
///
/// # Safety
/// Every bit pattern of `size_of::<Self>()` bytes is a valid value, and the type has no padding and no
/// pointers or references.
pub unsafe trait DeviceCopy: Copy + Send + Sync + 'static {}

macro_rules! device_copy {
    ($($t:ty),*) => {$(
        // SAFETY: a primitive number: no padding, every bit pattern valid.
        unsafe impl DeviceCopy for $t {}
    )*};
}
device_copy!(
    u8,
    i8,
    u16,
    i16,
    u32,
    i32,
    u64,
    i64,
    usize,
    isize,
    f32,
    f64,
    half::f16,
    half::bf16
);
// SAFETY: an array of `DeviceCopy` values has no padding between elements and every bit pattern valid.
unsafe impl<T: DeviceCopy, const N: usize> DeviceCopy for [T; N] {}

fn check_len(expected: usize, found: usize) -> Result<(), PoolError> {
    if expected == found {
        Ok(())
    } else {
        Err(PoolError::LengthMismatch { expected, found })
    }
}

fn zeroed_vec<T: DeviceCopy>(len: usize) -> Vec<T> {
    // SAFETY: `DeviceCopy` types are valid for every bit pattern, the all-zero one included.
    vec![unsafe { std::mem::zeroed::<T>() }; len]
}

/// A cudarc slice over a buffer's memory, for launchers that take `&CudaSlice<T>`. Borrows the buffer.
pub struct SliceRef<'a, T> {
    inner: BorrowedSlice<T>,
    _buf: PhantomData<&'a ()>,
}

impl<T> fmt::Debug for SliceRef<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SliceRef")
            .field("len", &self.len())
            .finish()
    }
}

impl<T> Deref for SliceRef<'_, T> {
    type Target = CudaSlice<T>;
    fn deref(&self) -> &CudaSlice<T> {
        &self.inner
    }
}

/// A mutable cudarc slice over a buffer's memory, for launcher outputs. Borrows the buffer mutably.
pub struct SliceMut<'a, T> {
    inner: BorrowedSlice<T>,
    _buf: PhantomData<&'a mut ()>,
}

impl<T> fmt::Debug for SliceMut<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SliceMut")
            .field("len", &self.len())
            .finish()
    }
}

impl<T> Deref for SliceMut<'_, T> {
    type Target = CudaSlice<T>;
    fn deref(&self) -> &CudaSlice<T> {
        &self.inner
    }
}

impl<T> DerefMut for SliceMut<'_, T> {
    fn deref_mut(&mut self) -> &mut CudaSlice<T> {
        &mut self.inner
    }
}

/// `len` elements of `T` in device memory from the device pool; back to the pool on drop.
pub struct DeviceBuffer<T: DeviceCopy> {
    block: Block<CudaDevice>,
    len: usize,
    _t: PhantomData<T>,
}

impl<T: DeviceCopy> fmt::Debug for DeviceBuffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("len", &self.len)
            .field("block", &self.block)
            .finish()
    }
}

impl<T: DeviceCopy> DeviceBuffer<T> {
    /// `len` elements (contents unspecified) on `mem`'s stream for the default tenant.
    pub fn try_alloc(mem: &GpuMemory, len: usize) -> Result<Self, PoolError> {
        Self::try_alloc_on(mem, len, mem.stream(), TenantId::DEFAULT)
    }

    /// `len` elements (contents unspecified) ordered on `stream`, counted against `tenant`.
    pub fn try_alloc_on(
        mem: &GpuMemory,
        len: usize,
        stream: &Stream,
        tenant: TenantId,
    ) -> Result<Self, PoolError> {
        let bytes = byte_len::<T>(len)?;
        let block = mem.device_pool().allocate_for(tenant, bytes, stream)?;
        Ok(DeviceBuffer {
            block,
            len,
            _t: PhantomData,
        })
    }

    /// `len` zeroed elements (the zeroing is queued on the stream).
    pub fn try_zeroed(mem: &GpuMemory, len: usize) -> Result<Self, PoolError> {
        Self::try_zeroed_for(mem, TenantId::DEFAULT, len)
    }

    /// `len` zeroed elements on `mem`'s stream, counted against `tenant`'s quota.
    pub fn try_zeroed_for(
        mem: &GpuMemory,
        tenant: TenantId,
        len: usize,
    ) -> Result<Self, PoolError> {
        let buf = Self::try_alloc_on(mem, len, mem.stream(), tenant)?;
        // SAFETY: the range is this live block; the set is ordered on the block's stream.
        unsafe { memory::memset_d8_async(buf.device_ptr(), 0, buf.byte_len(), buf.stream()) }?;
        Ok(buf)
    }

    /// A copy of `data` (the copy is queued; `data` may be dropped when this returns).
    pub fn try_from_host(mem: &GpuMemory, data: &[T]) -> Result<Self, PoolError> {
        Self::try_from_host_for(mem, TenantId::DEFAULT, data)
    }

    /// A copy of `data` on `mem`'s stream, counted against `tenant`'s quota.
    pub fn try_from_host_for(
        mem: &GpuMemory,
        tenant: TenantId,
        data: &[T],
    ) -> Result<Self, PoolError> {
        let mut buf = Self::try_alloc_on(mem, data.len(), mem.stream(), tenant)?;
        buf.copy_from_host(data)?;
        Ok(buf)
    }

    /// Elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes of the elements (the block may be larger).
    pub fn byte_len(&self) -> usize {
        self.len * std::mem::size_of::<T>()
    }

    /// The device address, for a kernel's parameter struct.
    pub fn device_ptr(&self) -> u64 {
        self.block.addr()
    }

    /// The stream the buffer is ordered on.
    pub fn stream(&self) -> &Stream {
        self.block.stream()
    }

    /// The tenant the buffer counts against.
    pub fn tenant(&self) -> TenantId {
        self.block.tenant()
    }

    /// Queue a copy of `src` (same length) into the buffer. `src` is staged by the driver before this
    /// returns, so it may be changed or dropped at once; the copy is synchronous for pageable memory.
    pub fn copy_from_host(&mut self, src: &[T]) -> Result<(), PoolError> {
        check_len(self.len, src.len())?;
        if self.len == 0 {
            return Ok(());
        }
        // SAFETY: the destination is this live block of at least `byte_len` bytes; `src` is borrowed for
        // the call and pageable copies are staged before the call returns.
        unsafe {
            memory::copy_htod_async(
                self.device_ptr(),
                src.as_ptr().cast(),
                self.byte_len(),
                self.stream(),
            )
        }?;
        Ok(())
    }

    /// Copy the buffer into `dst` (same length), waiting for the stream.
    pub fn copy_to_host(&self, dst: &mut [T]) -> Result<(), PoolError> {
        check_len(self.len, dst.len())?;
        if self.len == 0 {
            return Ok(());
        }
        // SAFETY: the source is this live block; `dst` is exclusively borrowed and the stream is waited
        // for before this returns, so the copy has finished writing it.
        unsafe {
            memory::copy_dtoh_async(
                dst.as_mut_ptr().cast(),
                self.device_ptr(),
                self.byte_len(),
                self.stream(),
            )
        }?;
        memory::stream_synchronize(self.stream())?;
        Ok(())
    }

    /// The buffer's contents in a new `Vec` (waits for the stream).
    pub fn to_vec(&self) -> Result<Vec<T>, PoolError> {
        let mut v = zeroed_vec(self.len);
        self.copy_to_host(&mut v)?;
        Ok(v)
    }

    /// Queue an asynchronous copy from pinned memory (same length). `src` waits for the copy before its
    /// host memory can be touched again.
    pub fn copy_from_pinned_async(&mut self, src: &mut PinnedBuffer<T>) -> Result<(), PoolError> {
        check_len(self.len, src.len)?;
        src.join_stream(self.block.stream())?;
        // SAFETY: both ranges are live blocks of at least `byte_len` bytes; `src` records a fence below
        // and waits for it before any host access or reuse.
        unsafe {
            memory::copy_htod_async(
                self.device_ptr(),
                src.host_ptr().cast(),
                self.byte_len(),
                self.stream(),
            )
        }?;
        src.fence_on(self.block.stream())
    }

    /// Queue an asynchronous copy into pinned memory (same length). `dst` waits for the copy before its
    /// host memory can be read.
    pub fn copy_to_pinned_async(&self, dst: &mut PinnedBuffer<T>) -> Result<(), PoolError> {
        check_len(self.len, dst.len)?;
        dst.join_stream(self.block.stream())?;
        // SAFETY: as in `copy_from_pinned_async`.
        unsafe {
            memory::copy_dtoh_async(
                dst.host_ptr_mut().cast(),
                self.device_ptr(),
                self.byte_len(),
                self.stream(),
            )
        }?;
        dst.fence_on(self.block.stream())
    }

    /// Wait for all work queued on the buffer's stream.
    pub fn synchronize(&self) -> Result<(), PoolError> {
        Ok(memory::stream_synchronize(self.stream())?)
    }

    /// The buffer as a cudarc slice on its stream, for launchers.
    pub fn as_cuda_slice(&self) -> Result<SliceRef<'_, T>, PoolError> {
        // SAFETY: the block is live for the borrow and holds `len` elements; recall's contexts have event
        // tracking disabled.
        let inner = unsafe { BorrowedSlice::new(self.stream(), self.device_ptr(), self.len) }?;
        Ok(SliceRef {
            inner,
            _buf: PhantomData,
        })
    }

    /// The buffer as a mutable cudarc slice on its stream, for launcher outputs.
    pub fn as_cuda_slice_mut(&mut self) -> Result<SliceMut<'_, T>, PoolError> {
        // SAFETY: as in `as_cuda_slice`; the buffer is borrowed mutably.
        let inner = unsafe { BorrowedSlice::new(self.stream(), self.device_ptr(), self.len) }?;
        Ok(SliceMut {
            inner,
            _buf: PhantomData,
        })
    }

    /// Order the buffer on `stream` from now on.
    ///
    /// # Safety
    /// All work queued on the current stream that uses the buffer is complete or ordered before later
    /// work on `stream` (for example `stream` waits for an event recorded on the current stream).
    pub unsafe fn set_stream(&mut self, stream: Stream) {
        // SAFETY: forwarded to the caller.
        unsafe { self.block.set_stream(stream) }
    }
}

/// A [`DeviceBuffer`] that reads as a cudarc `CudaSlice<T>` for as long as it lives, for code that keeps
/// device buffers in fields and hands them to launchers taking `&CudaSlice<T>` / `&mut CudaSlice<T>`
/// (the executor's resident corpora and scratch): `&slice` coerces to `&CudaSlice<T>`, and
/// `Option<DeviceSlice<T>>::as_deref()` gives `Option<&CudaSlice<T>>`. The memory is the pool's: the budget,
/// the tenant's quota and the statistics count it, and dropping the slice gives it back to the pool's cache.
///
/// The view never frees the memory (see [`BorrowedSlice`]); use the `CudaSlice` it derefs to only as a
/// launcher argument or for its length, never to replace or take it (`std::mem::swap`/`replace` on the
/// `&mut CudaSlice<T>` would separate the view from its block).
pub struct DeviceSlice<T: DeviceCopy> {
    /// Declared first, so dropped before `buf`: the view goes before the memory it points into.
    view: BorrowedSlice<T>,
    buf: DeviceBuffer<T>,
}

impl<T: DeviceCopy> fmt::Debug for DeviceSlice<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceSlice")
            .field("buf", &self.buf)
            .finish()
    }
}

impl<T: DeviceCopy> DeviceSlice<T> {
    /// `buf` as a cudarc slice on the buffer's stream.
    pub fn new(buf: DeviceBuffer<T>) -> Result<Self, PoolError> {
        // SAFETY: the block holds `len` elements of `T` and lives as long as the view (both are fields of
        // the returned value, the view dropped first); recall's contexts have event tracking disabled.
        let view = unsafe { BorrowedSlice::new(buf.stream(), buf.device_ptr(), buf.len()) }?;
        Ok(DeviceSlice { view, buf })
    }

    /// `len` zeroed elements on `mem`'s stream for the default tenant.
    pub fn try_zeroed(mem: &GpuMemory, len: usize) -> Result<Self, PoolError> {
        Self::new(DeviceBuffer::try_zeroed(mem, len)?)
    }

    /// `len` zeroed elements on `mem`'s stream, counted against `tenant`'s quota.
    pub fn try_zeroed_for(
        mem: &GpuMemory,
        tenant: TenantId,
        len: usize,
    ) -> Result<Self, PoolError> {
        Self::new(DeviceBuffer::try_zeroed_for(mem, tenant, len)?)
    }

    /// A copy of `data` on `mem`'s stream for the default tenant (the copy is queued; `data` may be dropped
    /// when this returns).
    pub fn try_from_host(mem: &GpuMemory, data: &[T]) -> Result<Self, PoolError> {
        Self::new(DeviceBuffer::try_from_host(mem, data)?)
    }

    /// A copy of `data` on `mem`'s stream, counted against `tenant`'s quota.
    pub fn try_from_host_for(
        mem: &GpuMemory,
        tenant: TenantId,
        data: &[T],
    ) -> Result<Self, PoolError> {
        Self::new(DeviceBuffer::try_from_host_for(mem, tenant, data)?)
    }

    /// The pool buffer underneath.
    pub fn buffer(&self) -> &DeviceBuffer<T> {
        &self.buf
    }

    /// The pool buffer underneath, to write through this crate's copies. Crate-private: a `&mut DeviceBuffer`
    /// in a caller's hands could be swapped out from under the view.
    pub(crate) fn buffer_mut(&mut self) -> &mut DeviceBuffer<T> {
        &mut self.buf
    }
}

impl<T: DeviceCopy> Deref for DeviceSlice<T> {
    type Target = CudaSlice<T>;
    fn deref(&self) -> &CudaSlice<T> {
        &self.view
    }
}

impl<T: DeviceCopy> DerefMut for DeviceSlice<T> {
    fn deref_mut(&mut self) -> &mut CudaSlice<T> {
        &mut self.view
    }
}

/// `len` elements of `T` in page-locked host memory from the pinned pool; back to the pool on drop.
///
/// The host side waits for the last asynchronous copy that used the buffer before it hands out a
/// slice, so a copy in flight is never raced.
pub struct PinnedBuffer<T: DeviceCopy> {
    block: Block<CudaPinned>,
    len: usize,
    pending: Mutex<Option<CudaEvent>>,
    _t: PhantomData<T>,
}

impl<T: DeviceCopy> fmt::Debug for PinnedBuffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PinnedBuffer")
            .field("len", &self.len)
            .field("block", &self.block)
            .finish()
    }
}

impl<T: DeviceCopy> PinnedBuffer<T> {
    /// `len` zeroed elements ordered on `mem`'s stream.
    pub fn try_zeroed(mem: &GpuMemory, len: usize) -> Result<Self, PoolError> {
        let bytes = byte_len::<T>(len)?;
        let block = mem.pinned_pool().allocate(bytes, mem.stream())?;
        // SAFETY: the block is at least `bytes` of host memory owned by this new buffer alone; the pool
        // hands out a pinned block only after every copy that used it has completed.
        unsafe { std::ptr::write_bytes(block.addr() as usize as *mut u8, 0, bytes) };
        Ok(PinnedBuffer {
            block,
            len,
            pending: Mutex::new(None),
            _t: PhantomData,
        })
    }

    /// A copy of `data`.
    pub fn try_from_slice(mem: &GpuMemory, data: &[T]) -> Result<Self, PoolError> {
        let mut buf = Self::try_zeroed(mem, data.len())?;
        buf.as_mut_slice()?.copy_from_slice(data);
        Ok(buf)
    }

    /// Elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The host address (page aligned).
    pub fn host_ptr(&self) -> *const T {
        self.block.addr() as usize as *const T
    }

    fn host_ptr_mut(&mut self) -> *mut T {
        self.block.addr() as usize as *mut T
    }

    /// Wait for the last asynchronous copy that used this buffer.
    pub fn wait(&self) -> Result<(), PoolError> {
        let mut pending = self.pending.lock();
        if let Some(e) = pending.as_ref() {
            memory::event_synchronize(e)?;
        }
        *pending = None;
        Ok(())
    }

    /// The elements, after waiting for copies in flight.
    pub fn as_slice(&self) -> Result<&[T], PoolError> {
        self.wait()?;
        // SAFETY: the block holds `len` initialised elements (zeroed at allocation, `DeviceCopy`), no copy
        // writes it (waited above; writers take `&mut self`).
        Ok(unsafe { std::slice::from_raw_parts(self.host_ptr(), self.len) })
    }

    /// The elements, mutably, after waiting for copies in flight.
    pub fn as_mut_slice(&mut self) -> Result<&mut [T], PoolError> {
        self.wait()?;
        // SAFETY: as in `as_slice`, and no copy reads it either (waited above).
        Ok(unsafe { std::slice::from_raw_parts_mut(self.host_ptr_mut(), self.len) })
    }

    /// Before a copy on `stream`: if the buffer was used on another stream, wait for that use and move
    /// the block to `stream` (so it is freed there).
    fn join_stream(&mut self, stream: &Stream) -> Result<(), PoolError> {
        if self.block.stream().cu_stream() != stream.cu_stream() {
            self.wait()?;
            // SAFETY: every copy that used the buffer has completed (waited above).
            unsafe { self.block.set_stream(stream.clone()) };
        }
        Ok(())
    }

    /// After a copy queued on `stream`: the fence host accesses wait for.
    fn fence_on(&self, stream: &Stream) -> Result<(), PoolError> {
        let event = memory::new_fence(stream.context())?;
        memory::record_event(&event, stream)?;
        *self.pending.lock() = Some(event);
        Ok(())
    }
}

/// `len` elements of `T` in managed memory, addressable from host and device. Only made where the
/// device has concurrent managed access, and never larger than the device's free memory. Counted
/// against the device pool's budget. Freed on drop after its stream is done.
pub struct ManagedBuffer<T: DeviceCopy> {
    mem: GpuMemory,
    ptr: u64,
    len: usize,
    bytes: usize,
    stream: Stream,
    /// Work on another stream may still use the memory and could not be ordered before the buffer's
    /// stream: never free it.
    leak: AtomicBool,
    _reservation: Reservation<CudaDevice>,
    _t: PhantomData<T>,
}

impl<T: DeviceCopy> fmt::Debug for ManagedBuffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManagedBuffer")
            .field("ptr", &format_args!("{:#x}", self.ptr))
            .field("len", &self.len)
            .finish()
    }
}

impl<T: DeviceCopy> ManagedBuffer<T> {
    /// `len` elements, uninitialised by the host: zeroed on the device (queued on `mem`'s stream).
    pub fn try_zeroed(mem: &GpuMemory, len: usize) -> Result<Self, PoolError> {
        let buf = Self::alloc(mem, len, TenantId::DEFAULT)?;
        // SAFETY: the range is this live managed allocation; ordered on its stream.
        unsafe { memory::memset_d8_async(buf.ptr, 0, buf.bytes, &buf.stream) }?;
        Ok(buf)
    }

    /// A copy of `data`, written by the host (the pages start on the host; prefetch them).
    pub fn try_from_slice(mem: &GpuMemory, data: &[T]) -> Result<Self, PoolError> {
        Self::try_from_slice_for(mem, data, TenantId::DEFAULT)
    }

    /// As [`ManagedBuffer::try_from_slice`], counted against `tenant`.
    pub fn try_from_slice_for(
        mem: &GpuMemory,
        data: &[T],
        tenant: TenantId,
    ) -> Result<Self, PoolError> {
        let buf = Self::alloc(mem, data.len(), tenant)?;
        // SAFETY: the allocation holds `len` elements, is new (no device work uses it) and is reachable
        // from the host (managed memory on a device with concurrent managed access).
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), buf.ptr as usize as *mut T, data.len())
        };
        Ok(buf)
    }

    fn alloc(mem: &GpuMemory, len: usize, tenant: TenantId) -> Result<Self, PoolError> {
        if mem.unified_mode() != UnifiedMode::Managed {
            return Err(PoolError::InvalidConfig(format!(
                "managed memory is not used on this device ({:?})",
                mem.unified_mode()
            )));
        }
        let bytes = byte_len::<T>(len)?.max(1);
        let reservation = mem.device_pool().reserve(tenant, bytes)?;
        let (free, _) = mem.mem_info()?;
        if bytes > free {
            return Err(PoolError::OutOfMemory {
                requested: bytes,
                in_use: mem.device_pool().stats().in_use_bytes,
                budget: free,
                scope: OomScope::Device,
            });
        }
        let ptr = match memory::managed_alloc(mem.context(), bytes) {
            Ok(p) => p,
            Err(e) if e.is_out_of_memory() => {
                mem.device_pool().trim_all();
                memory::managed_alloc(mem.context(), bytes).map_err(|e| {
                    if e.is_out_of_memory() {
                        PoolError::OutOfMemory {
                            requested: bytes,
                            in_use: mem.device_pool().stats().in_use_bytes,
                            budget: free,
                            scope: OomScope::Device,
                        }
                    } else {
                        e.into()
                    }
                })?
            }
            Err(e) => return Err(e.into()),
        };
        Ok(ManagedBuffer {
            mem: mem.clone(),
            ptr,
            len,
            bytes,
            stream: mem.stream().clone(),
            leak: AtomicBool::new(false),
            _reservation: reservation,
            _t: PhantomData,
        })
    }

    /// Elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The address (the same on host and device).
    pub fn device_ptr(&self) -> u64 {
        self.ptr
    }

    /// The stream the buffer is ordered on.
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// Give the driver advice about the whole buffer.
    pub fn advise(&self, advice: Advice) -> Result<(), PoolError> {
        // SAFETY: the range is exactly this live managed allocation.
        unsafe { memory::mem_advise(self.mem.context(), self.ptr, self.bytes, advice) }?;
        Ok(())
    }

    /// Advise that the buffer is mostly read (read-only copies may be kept where it is read).
    pub fn advise_read_mostly(&self) -> Result<(), PoolError> {
        self.advise(Advice::SetReadMostly)
    }

    /// Advise that the buffer should live on this device.
    pub fn advise_preferred_device(&self) -> Result<(), PoolError> {
        self.advise(Advice::SetPreferredLocation(Location::Device(
            self.mem.ordinal(),
        )))
    }

    /// Queue a migration of the whole buffer to the device on its stream, before kernels that read it.
    pub fn prefetch_to_device(&self) -> Result<(), PoolError> {
        let to = Location::Device(self.mem.ordinal());
        // SAFETY: the range is this live managed allocation, which outlives queued work (the drop waits
        // for the stream).
        unsafe { memory::prefetch_async(self.ptr, self.bytes, to, &self.stream) }?;
        Ok(())
    }

    /// Queue a migration of elements `range` to the device on `stream` (another stream than the
    /// buffer's lets several migrations, and kernels on earlier parts, run at once), and order the
    /// buffer's stream after it: kernels queued on the buffer's stream from now on see the range on the
    /// device. Safe to call from several threads at once for disjoint or overlapping ranges.
    ///
    /// A pipelined upload: prefetch part `i + 1` on one stream while a kernel on the buffer's stream reads
    /// part `i` (`pool_bench` measures it against pinned memory with chunked asynchronous copies).
    pub fn prefetch_range_to_device_on(
        &self,
        range: Range<usize>,
        stream: &Stream,
    ) -> Result<(), PoolError> {
        if range.start > range.end || range.end > self.len {
            return Err(PoolError::LengthMismatch {
                expected: self.len,
                found: range.end.max(range.start),
            });
        }
        if range.is_empty() {
            return Ok(());
        }
        let size = std::mem::size_of::<T>();
        let ptr = self.ptr + (range.start * size) as u64;
        let bytes = range.len() * size;
        let to = Location::Device(self.mem.ordinal());
        // SAFETY: the range lies inside this live managed allocation (checked above); the buffer's
        // stream is ordered after the prefetch below (or, failing that, the host waits for `stream`, or
        // the memory is never freed), and the drop waits for the buffer's stream.
        unsafe { memory::prefetch_async(ptr, bytes, to, stream) }?;
        if stream.cu_stream() == self.stream.cu_stream() {
            return Ok(());
        }
        let ordered = memory::new_fence(stream.context()).and_then(|fence| {
            memory::record_event(&fence, stream)?;
            memory::stream_wait_event(&self.stream, &fence)
        });
        if let Err(e) = ordered {
            if memory::stream_synchronize(stream).is_err() {
                self.leak.store(true, Ordering::Relaxed);
            }
            return Err(e.into());
        }
        Ok(())
    }

    /// Queue a migration of the whole buffer to the host on its stream.
    pub fn prefetch_to_host(&self) -> Result<(), PoolError> {
        // SAFETY: as in `prefetch_to_device`.
        unsafe { memory::prefetch_async(self.ptr, self.bytes, Location::Host, &self.stream) }?;
        Ok(())
    }

    /// Wait for all work queued on the buffer's stream.
    pub fn synchronize(&self) -> Result<(), PoolError> {
        Ok(memory::stream_synchronize(&self.stream)?)
    }

    /// The elements on the host, after waiting for the buffer's stream.
    pub fn as_slice(&self) -> Result<&[T], PoolError> {
        self.synchronize()?;
        // SAFETY: `len` elements of managed memory, host-accessible on this device; queued work on the
        // buffer's stream is done, and writers need `&mut self`.
        Ok(unsafe { std::slice::from_raw_parts(self.ptr as usize as *const T, self.len) })
    }

    /// The elements on the host, mutably, after waiting for the buffer's stream.
    pub fn as_mut_slice(&mut self) -> Result<&mut [T], PoolError> {
        self.synchronize()?;
        // SAFETY: as in `as_slice`, with exclusive access.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.ptr as usize as *mut T, self.len) })
    }

    /// The buffer as a cudarc slice on its stream, for launchers.
    pub fn as_cuda_slice(&self) -> Result<SliceRef<'_, T>, PoolError> {
        // SAFETY: the allocation is live for the borrow and holds `len` elements.
        let inner = unsafe { BorrowedSlice::new(&self.stream, self.ptr, self.len) }?;
        Ok(SliceRef {
            inner,
            _buf: PhantomData,
        })
    }

    /// The buffer as a mutable cudarc slice on its stream, for launcher outputs.
    pub fn as_cuda_slice_mut(&mut self) -> Result<SliceMut<'_, T>, PoolError> {
        // SAFETY: as in `as_cuda_slice`; borrowed mutably.
        let inner = unsafe { BorrowedSlice::new(&self.stream, self.ptr, self.len) }?;
        Ok(SliceMut {
            inner,
            _buf: PhantomData,
        })
    }
}

impl<T: DeviceCopy> Drop for ManagedBuffer<T> {
    fn drop(&mut self) {
        if self.leak.load(Ordering::Relaxed) {
            self.mem.record_error(PoolError::InvalidConfig(
                "managed buffer leaked: a prefetch on another stream could not be ordered".into(),
            ));
            return;
        }
        if let Err(e) = memory::stream_synchronize(&self.stream) {
            // The context is unusable or the stream failed: freeing could race queued work; leak.
            self.mem.record_error(e.into());
            return;
        }
        // SAFETY: allocated by `managed_alloc` on this context, freed once, and the stream that orders
        // all its work has finished.
        if let Err(e) = unsafe { memory::device_free(self.mem.context(), self.ptr) } {
            self.mem.record_error(e.into());
        }
    }
}

/// Host data the device reads: managed memory with advice and prefetch where the device supports it,
/// otherwise (or when forced, [`crate::MemoryConfig::force_pinned`]) pinned host memory mirrored by a
/// device buffer with explicit asynchronous copies. One API for both.
#[derive(Debug)]
pub enum UnifiedBuffer<T: DeviceCopy> {
    /// Managed memory.
    Managed(ManagedBuffer<T>),
    /// Pinned host memory plus a device copy.
    Mirrored {
        /// The host side.
        host: PinnedBuffer<T>,
        /// The device side.
        device: DeviceBuffer<T>,
        /// The host side changed since the last copy to the device.
        host_dirty: bool,
    },
}

impl<T: DeviceCopy> UnifiedBuffer<T> {
    /// A copy of `data`, backed as [`GpuMemory::unified_mode`] says. Call
    /// [`UnifiedBuffer::prefetch_to_device`] before kernels read it.
    pub fn try_from_slice(mem: &GpuMemory, data: &[T]) -> Result<Self, PoolError> {
        match mem.unified_mode() {
            UnifiedMode::Managed => {
                let m = ManagedBuffer::try_from_slice(mem, data)?;
                Ok(UnifiedBuffer::Managed(m))
            }
            UnifiedMode::PinnedFallback(_) => Ok(UnifiedBuffer::Mirrored {
                host: PinnedBuffer::try_from_slice(mem, data)?,
                device: DeviceBuffer::try_alloc(mem, data.len())?,
                host_dirty: true,
            }),
        }
    }

    /// Which backing this buffer has.
    pub fn is_managed(&self) -> bool {
        matches!(self, UnifiedBuffer::Managed(_))
    }

    /// Elements.
    pub fn len(&self) -> usize {
        match self {
            UnifiedBuffer::Managed(m) => m.len(),
            UnifiedBuffer::Mirrored { host, .. } => host.len(),
        }
    }

    /// True when there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The stream the buffer is ordered on.
    pub fn stream(&self) -> &Stream {
        match self {
            UnifiedBuffer::Managed(m) => m.stream(),
            UnifiedBuffer::Mirrored { device, .. } => device.stream(),
        }
    }

    /// The device address kernels read (valid after [`UnifiedBuffer::prefetch_to_device`]).
    pub fn device_ptr(&self) -> u64 {
        match self {
            UnifiedBuffer::Managed(m) => m.device_ptr(),
            UnifiedBuffer::Mirrored { device, .. } => device.device_ptr(),
        }
    }

    /// Advise that kernels mostly read the buffer and that it should live on the device (managed only;
    /// nothing to do for the mirrored form).
    pub fn advise_device_read_mostly(&self) -> Result<(), PoolError> {
        match self {
            UnifiedBuffer::Managed(m) => {
                m.advise_preferred_device()?;
                m.advise_read_mostly()
            }
            UnifiedBuffer::Mirrored { .. } => Ok(()),
        }
    }

    /// Queue what makes the device side current, on the buffer's stream: a prefetch (managed) or a copy
    /// of the host side if it changed (mirrored).
    pub fn prefetch_to_device(&mut self) -> Result<(), PoolError> {
        match self {
            UnifiedBuffer::Managed(m) => m.prefetch_to_device(),
            UnifiedBuffer::Mirrored {
                host,
                device,
                host_dirty,
            } => {
                if *host_dirty {
                    device.copy_from_pinned_async(host)?;
                    *host_dirty = false;
                }
                Ok(())
            }
        }
    }

    /// The elements on the host, current with the device side (waits for the buffer's stream; the
    /// mirrored form copies back first).
    pub fn host(&mut self) -> Result<&[T], PoolError> {
        match self {
            UnifiedBuffer::Managed(m) => m.as_slice(),
            UnifiedBuffer::Mirrored {
                host,
                device,
                host_dirty,
            } => {
                if !*host_dirty {
                    device.copy_to_pinned_async(host)?;
                }
                host.as_slice()
            }
        }
    }

    /// The elements on the host, to change; the next [`UnifiedBuffer::prefetch_to_device`] makes the
    /// device side current again.
    pub fn host_mut(&mut self) -> Result<&mut [T], PoolError> {
        match self {
            UnifiedBuffer::Managed(m) => m.as_mut_slice(),
            UnifiedBuffer::Mirrored {
                host,
                device,
                host_dirty,
            } => {
                if !*host_dirty {
                    device.copy_to_pinned_async(host)?;
                    *host_dirty = true;
                }
                host.as_mut_slice()
            }
        }
    }

    /// The device side as a cudarc slice, for launchers.
    pub fn as_cuda_slice(&self) -> Result<SliceRef<'_, T>, PoolError> {
        match self {
            UnifiedBuffer::Managed(m) => m.as_cuda_slice(),
            UnifiedBuffer::Mirrored { device, .. } => device.as_cuda_slice(),
        }
    }

    /// Wait for all work queued on the buffer's stream.
    pub fn synchronize(&self) -> Result<(), PoolError> {
        Ok(memory::stream_synchronize(self.stream())?)
    }
}
