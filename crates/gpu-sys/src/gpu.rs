//! The owning handle of one device: its primary context and a stream.

use crate::discovery::{DeviceInfo, device_info};
use crate::error::{DriverResultExt, GpuError};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DevicePtr, DevicePtrMut,
    DeviceRepr, LaunchConfig, PinnedHostSlice, PushKernelArg, ValidAsZeroBits,
};
use cudarc::nvrtc::Ptx;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

/// A kernel image to load: a cubin for exactly this device's SM, or PTX that the driver JIT-compiles.
#[derive(Debug, Clone, Copy)]
pub enum ModuleImage<'a> {
    Cubin(&'a [u8]),
    Ptx(&'a str),
}

#[repr(transparent)]
#[derive(Clone, Copy)]
struct ParamBlock<T>(T);
// SAFETY: `launch`'s contract makes `T` the `#[repr(C)]` plain-data struct the kernel reads by value.
unsafe impl<T: Copy> DeviceRepr for ParamBlock<T> {}

/// One CUDA device opened for work: its primary context and a stream on which recall orders its work.
///
/// cudarc's per-buffer event tracking is switched off: recall orders all work on a context through its
/// streams explicitly (one stream per handle; cross-stream use goes through events), so the implicit
/// events would be pure overhead on every launch.
#[derive(Debug)]
pub struct Gpu {
    info: DeviceInfo,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
}

/// Page-locked host memory that a kernel writes directly (see [`Gpu::alloc_mapped_readback`]), or reads: the
/// host writes an input into it ([`MappedReadback::write_host`]) with no copy call. Kernels get its address
/// through [`MappedReadback::device_ptr`] and may write it only from work queued on the stream of the [`Gpu`]
/// that reads it ([`Gpu::read_mapped`], [`Gpu::wait_mapped_filled`]). Freed on drop; drop it only when no
/// queued work reads or writes it.
pub struct MappedReadback<T> {
    ctx: Arc<CudaContext>,
    host: std::ptr::NonNull<u8>,
    len: usize,
    device: u64,
    _values: std::marker::PhantomData<T>,
}

// SAFETY: the allocation is owned by this value alone; host access goes through `&mut self`
// (`Gpu::read_mapped`), and the context handle is thread-safe.
unsafe impl<T: Send> Send for MappedReadback<T> {}
// SAFETY: a shared reference gives only the device address and the length, no access to the memory.
unsafe impl<T: Sync> Sync for MappedReadback<T> {}

impl<T> MappedReadback<T> {
    /// The device's address of the memory, for a kernel's parameter struct.
    pub fn device_ptr(&self) -> u64 {
        self.device
    }

    /// Values it holds.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never: it holds at least one value.
    pub fn is_empty(&self) -> bool {
        false
    }
}

impl<T: Copy> MappedReadback<T> {
    /// Write `values` into the memory from the host, from the first value on: an input that a kernel then
    /// reads through [`MappedReadback::device_ptr`], with no copy call (fewer than `values.len()` values
    /// held is an error).
    ///
    /// # Safety
    /// No queued or running device work reads or writes the values written: work that used them has
    /// finished (its stream was synchronised, or its answer, written after its last read of them, was seen).
    pub unsafe fn write_host(&mut self, values: &[T]) -> Result<(), GpuError> {
        room("host write to mapped memory", self.len, values.len())?;
        // SAFETY: `host` holds `len >= values.len()` values of `T`; the mutable borrow keeps other host
        // access out and the caller keeps device access out (see `# Safety`); the regions cannot overlap
        // (`values` is not this page-locked allocation: `&mut self` forbids a borrow of it).
        unsafe {
            std::ptr::copy_nonoverlapping(
                values.as_ptr(),
                self.host.as_ptr().cast::<T>(),
                values.len(),
            )
        };
        Ok(())
    }

    /// Set the first `n` values to `value` from the host (see [`MappedReadback::write_host`]).
    ///
    /// # Safety
    /// As [`MappedReadback::write_host`].
    pub unsafe fn fill_host(&mut self, n: usize, value: T) -> Result<(), GpuError> {
        room("host write to mapped memory", self.len, n)?;
        let base = self.host.as_ptr().cast::<T>();
        for i in 0..n {
            // SAFETY: i < n <= len; access as in `write_host`.
            unsafe { base.add(i).write(value) };
        }
        Ok(())
    }
}

impl MappedReadback<u64> {
    /// Store `words` into the words from `at` on, each with one 8-byte atomic store, then a release fence: a
    /// kernel reading any of them sees its old or its new value whole, never a mix (more words than fit is an
    /// error, before any is stored).
    pub fn store_words(
        &self,
        at: usize,
        words: impl ExactSizeIterator<Item = u64>,
    ) -> Result<(), GpuError> {
        let n = words.len();
        room_from("host store to mapped memory", self.len, at, n)?;
        let base = self.host.as_ptr().cast::<u64>();
        // `take(n)`: an iterator that yields more than it said stops at the room checked.
        for (i, w) in words.take(n).enumerate() {
            // SAFETY: word `at + i < len` of the live page-locked allocation, 8-byte aligned (the allocation is
            // page-aligned); the host writes these words only through atomic stores (this method) while a
            // kernel may read them, so an atomic view of each is sound.
            let word = unsafe { std::sync::atomic::AtomicU64::from_ptr(base.add(at + i)) };
            word.store(w, std::sync::atomic::Ordering::Relaxed);
        }
        std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
        Ok(())
    }
}

impl<T> std::fmt::Debug for MappedReadback<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MappedReadback")
            .field("len", &self.len)
            .field("device", &format_args!("{:#x}", self.device))
            .finish()
    }
}

impl<T> Drop for MappedReadback<T> {
    fn drop(&mut self) {
        // SAFETY: `host` came from `pinned_alloc` and is freed only here; by the type's contract no queued
        // work writes it any more. A failure leaks the pages, which is all that can be done in a drop.
        let _ = unsafe { crate::memory::pinned_free(&self.ctx, self.host) };
    }
}

/// How often [`Gpu::wait_mapped_filled`] asks the driver about its stream while it spins.
pub const MAPPED_POLL_QUERY_EVERY: std::time::Duration = std::time::Duration::from_micros(50);

/// The error of a stream that finished without writing the answer a spin waited for.
fn unfilled() -> GpuError {
    GpuError::Driver {
        call: "wait on mapped memory",
        code: 0,
        name: "the stream finished without writing every awaited value".into(),
    }
}

/// Run a driver call, turning a cudarc panic (a symbol missing from an old driver) into
/// [`GpuError::BindingPanicked`]. Shared with `memory.rs`.
pub(crate) fn guard<T>(
    call: &'static str,
    f: impl FnOnce() -> Result<T, GpuError>,
) -> Result<T, GpuError> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(Err(GpuError::BindingPanicked { call }))
}

/// `Ok` when a copy's destination (`have` elements) takes its source (`need`), else the call's error.
fn room(call: &'static str, have: usize, need: usize) -> Result<(), GpuError> {
    if have < need {
        return Err(GpuError::Driver {
            call,
            code: 0,
            name: format!("{need} elements do not fit a {have}-element buffer"),
        });
    }
    Ok(())
}

/// `Ok` when elements `at .. at + n` lie inside a buffer of `have` elements (an end past `usize::MAX` does
/// not: a wrapped `at + n` would pass [`room`] and index outside the buffer).
fn room_from(call: &'static str, have: usize, at: usize, n: usize) -> Result<(), GpuError> {
    match at.checked_add(n) {
        Some(end) => room(call, have, end),
        None => Err(GpuError::Driver {
            call,
            code: 0,
            name: format!("{n} elements from position {at} do not fit a {have}-element buffer"),
        }),
    }
}

impl Gpu {
    /// Open device `ordinal`. Call [`crate::probe`] first: this assumes the driver is present.
    pub fn open(ordinal: usize) -> Result<Gpu, GpuError> {
        guard("open device", || {
            let info = device_info(ordinal)?;
            let ctx = CudaContext::new(ordinal).gpu("cuDevicePrimaryCtxRetain")?;
            // SAFETY: see the type's doc: every use of this context's buffers is ordered by the
            // handle's stream or by explicit events.
            unsafe { ctx.disable_event_tracking() };
            let stream = ctx.new_stream().gpu("cuStreamCreate")?;
            Ok(Gpu { info, ctx, stream })
        })
    }

    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// The stream this handle orders its work on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// A further stream on the same context (for tenants, copies overlapping kernels).
    pub fn new_stream(&self) -> Result<Arc<CudaStream>, GpuError> {
        guard("cuStreamCreate", || {
            self.ctx.new_stream().gpu("cuStreamCreate")
        })
    }

    /// Another handle on the same device and context whose work goes on a stream of its own, so that it
    /// runs beside this handle's work instead of after it. A buffer made through one handle and used through
    /// the other must be complete first (a synchronise of the stream that made it, or an event).
    pub fn with_new_stream(&self) -> Result<Gpu, GpuError> {
        Ok(self.with_stream(self.new_stream()?))
    }

    /// A handle on this device and context that orders its work on `stream`.
    fn with_stream(&self, stream: Arc<CudaStream>) -> Gpu {
        Gpu {
            info: self.info.clone(),
            ctx: self.ctx.clone(),
            stream,
        }
    }

    /// [`Gpu::with_new_stream`] with the device's highest stream priority: as SMs free up, the blocks its
    /// kernels still have to start go before those of kernels on other streams, so that a few blocks launched
    /// on it run beside a large kernel launched just before instead of after it.
    pub fn with_new_priority_stream(&self) -> Result<Gpu, GpuError> {
        guard("cuStreamCreateWithPriority", || {
            self.ctx.bind_to_thread().gpu("cuCtxSetCurrent")?;
            let (_, greatest) = cudarc::driver::result::stream::get_priority_range()
                .gpu("cuCtxGetStreamPriorityRange")?;
            let stream = self
                .ctx
                .new_stream_with_priority(greatest)
                .gpu("cuStreamCreateWithPriority")?;
            Ok(self.with_stream(stream))
        })
    }

    /// Free and total device memory now.
    pub fn memory_info(&self) -> Result<(usize, usize), GpuError> {
        guard("cuMemGetInfo", || {
            self.ctx.mem_get_info().gpu("cuMemGetInfo")
        })
    }

    /// Load a module image into this context.
    pub fn load_module(&self, image: ModuleImage<'_>) -> Result<Arc<CudaModule>, GpuError> {
        guard("cuModuleLoadData", || {
            let ptx = match image {
                ModuleImage::Cubin(bytes) => Ptx::from_binary(bytes.to_vec()),
                ModuleImage::Ptx(src) => {
                    if src.contains('\0') {
                        return Err(GpuError::NoImage {
                            major: self.info.compute_capability.0,
                            minor: self.info.compute_capability.1,
                            reason: "PTX text contains a NUL byte".into(),
                        });
                    }
                    Ptx::from_src(src)
                }
            };
            self.ctx.load_module(ptx).gpu("cuModuleLoadData")
        })
    }

    /// Look up a kernel in a loaded module.
    pub fn function(&self, module: &Arc<CudaModule>, name: &str) -> Result<CudaFunction, GpuError> {
        guard("cuModuleGetFunction", || {
            if name.contains('\0') {
                return Err(GpuError::Driver {
                    call: "cuModuleGetFunction",
                    code: 0,
                    name: "kernel name contains a NUL byte".into(),
                });
            }
            module.load_function(name).gpu("cuModuleGetFunction")
        })
    }

    /// Copy `data` to a new device buffer (ordered on the handle's stream).
    pub fn upload<T: DeviceRepr>(&self, data: &[T]) -> Result<CudaSlice<T>, GpuError> {
        guard("cuMemcpyHtoDAsync", || {
            self.stream.clone_htod(data).gpu("cuMemcpyHtoDAsync")
        })
    }

    /// Copy `data` into the front of the existing buffer `dst` (ordered on the handle's stream; `data` may
    /// be reused as soon as this returns).
    pub fn upload_into<T: DeviceRepr>(
        &self,
        data: &[T],
        dst: &mut CudaSlice<T>,
    ) -> Result<(), GpuError> {
        self.upload_at(data, dst, 0)
    }

    /// Copy `data` into `dst` from position `at` (ordered on the handle's stream; `data` may be reused as soon as
    /// this returns). A range past `dst`'s end is an error, not a copy.
    pub fn upload_at<T: DeviceRepr>(
        &self,
        data: &[T],
        dst: &mut CudaSlice<T>,
        at: usize,
    ) -> Result<(), GpuError> {
        room_from("cuMemcpyHtoDAsync", dst.len(), at, data.len())?;
        guard("cuMemcpyHtoDAsync", || {
            self.stream
                .memcpy_htod(data, &mut dst.slice_mut(at..at + data.len()))
                .gpu("cuMemcpyHtoDAsync")
        })
    }

    /// Page-locked (pinned), write-combined host memory for `len` values: a staging buffer that the device
    /// reads by DMA at full bus speed. Its contents start unset; write them through [`Gpu::pinned_write`]
    /// once no copy from the buffer can still be running. `PinnedHostSlice::as_mut_slice` does not wait
    /// for one: with event tracking off (see [`Gpu::open`]) cudarc records no event for pinned buffers.
    pub fn alloc_pinned<T: DeviceRepr + ValidAsZeroBits>(
        &self,
        len: usize,
    ) -> Result<PinnedHostSlice<T>, GpuError> {
        guard("cuMemHostAlloc", || {
            // SAFETY: the memory is handed out only through `as_mut_slice`/`as_slice`, and every value type
            // allowed here is valid for any bit pattern.
            unsafe { self.ctx.alloc_pinned::<T>(len.max(1)) }.gpu("cuMemHostAlloc")
        })
    }

    /// Copy all of the pinned buffer `src` into the front of `dst` (asynchronous on the handle's stream). The
    /// caller writes `src` again only after the copy has finished, e.g. after a synchronise of the stream
    /// (see [`Gpu::alloc_pinned`]: nothing waits for it on its own).
    pub fn upload_pinned<T: DeviceRepr>(
        &self,
        src: &PinnedHostSlice<T>,
        dst: &mut CudaSlice<T>,
    ) -> Result<(), GpuError> {
        room("cuMemcpyHtoDAsync", dst.len(), src.len())?;
        guard("cuMemcpyHtoDAsync", || {
            self.stream
                .memcpy_htod(src, &mut dst.slice_mut(0..src.len()))
                .gpu("cuMemcpyHtoDAsync")
        })
    }

    /// A new zeroed device buffer of `len` elements.
    pub fn alloc_zeros<T: DeviceRepr + ValidAsZeroBits>(
        &self,
        len: usize,
    ) -> Result<CudaSlice<T>, GpuError> {
        guard("cuMemAlloc", || {
            self.stream.alloc_zeros(len).gpu("cuMemAlloc")
        })
    }

    /// Set every byte of `buf` to zero (queued on the handle's stream).
    pub fn zero<T: DeviceRepr + ValidAsZeroBits>(
        &self,
        buf: &mut CudaSlice<T>,
    ) -> Result<(), GpuError> {
        guard("cuMemsetD8Async", || {
            self.stream.memset_zeros(buf).gpu("cuMemsetD8Async")
        })
    }

    /// Copy a device buffer back into a new `Vec` (waits for the stream).
    pub fn download<T: DeviceRepr + Default + Clone>(
        &self,
        src: &CudaSlice<T>,
    ) -> Result<Vec<T>, GpuError> {
        guard("cuMemcpyDtoH", || {
            self.stream.clone_dtoh(src).gpu("cuMemcpyDtoH")
        })
    }

    /// Copy a device buffer into `dst`. `dst.len()` must equal the buffer's (an error otherwise). Into pageable
    /// memory (a `Vec`) the call returns once the copy is done; into page-locked memory (a pinned buffer's
    /// slice) the driver copies asynchronously, so synchronise the stream before reading it
    /// ([`Gpu::download_pinned`] does).
    pub fn download_into<T: DeviceRepr>(
        &self,
        src: &CudaSlice<T>,
        dst: &mut [T],
    ) -> Result<(), GpuError> {
        // Checked here: cudarc asserts it, and a panic in the binding reads as a lost device.
        if dst.len() != src.len() {
            return Err(GpuError::Driver {
                call: "cuMemcpyDtoH",
                code: 0,
                name: format!(
                    "a {}-element buffer into {} elements: the lengths must be equal",
                    src.len(),
                    dst.len()
                ),
            });
        }
        guard("cuMemcpyDtoH", || {
            self.stream.memcpy_dtoh(src, dst).gpu("cuMemcpyDtoH")
        })
    }

    /// Copy `src` into the front of `dst` on the device (queued on the handle's stream).
    pub fn copy_dtod<T>(&self, src: &CudaSlice<T>, dst: &mut CudaSlice<T>) -> Result<(), GpuError> {
        room("cuMemcpyDtoDAsync", dst.len(), src.len())?;
        guard("cuMemcpyDtoDAsync", || {
            self.stream.memcpy_dtod(src, dst).gpu("cuMemcpyDtoDAsync")
        })
    }

    /// Copy the first `dst.len()` elements of a device buffer into `dst`: done on return for pageable
    /// memory, asynchronous into page-locked memory (as [`Gpu::download_into`]).
    pub fn download_prefix<T: DeviceRepr>(
        &self,
        src: &CudaSlice<T>,
        dst: &mut [T],
    ) -> Result<(), GpuError> {
        room("cuMemcpyDtoH", src.len(), dst.len())?;
        guard("cuMemcpyDtoH", || {
            self.stream
                .memcpy_dtoh(&src.slice(0..dst.len()), dst)
                .gpu("cuMemcpyDtoH")
        })
    }

    /// Queue a copy of `src[offset .. offset + dst.len()]` into `dst` on the handle's stream. Into page-locked
    /// memory the copy is asynchronous: wait for the stream (or an event recorded after it) before reading
    /// `dst`, and keep `dst` alive and unread until then.
    pub fn download_range_async<T: DeviceRepr>(
        &self,
        src: &CudaSlice<T>,
        offset: usize,
        dst: &mut [T],
    ) -> Result<(), GpuError> {
        self.download_range_async_on(&self.stream, src, offset, dst)
    }

    /// [`Gpu::download_range_async`] queued on `stream` (one of this handle's context, e.g. from
    /// [`Gpu::new_stream`]) instead of the handle's stream: the copy is ordered only by `stream`, so make it
    /// wait (an event) for the work that writes `src`, and keep `src` alive until the copy has finished.
    pub fn download_range_async_on<T: DeviceRepr>(
        &self,
        stream: &Arc<CudaStream>,
        src: &CudaSlice<T>,
        offset: usize,
        dst: &mut [T],
    ) -> Result<(), GpuError> {
        let end = offset.checked_add(dst.len()).filter(|&e| e <= src.len());
        let Some(end) = end else {
            return Err(GpuError::Driver {
                call: "cuMemcpyDtoHAsync",
                code: 0,
                name: format!(
                    "asked for elements {offset}..+{} of a {}-element buffer",
                    dst.len(),
                    src.len()
                ),
            });
        };
        guard("cuMemcpyDtoHAsync", || {
            stream
                .memcpy_dtoh(&src.slice(offset..end), dst)
                .gpu("cuMemcpyDtoHAsync")
        })
    }

    /// Give the memory freed by this process back to the driver: buffers are allocated stream-ordered
    /// (`cuMemAllocAsync`) from the device's default pool, which keeps freed memory for reuse; after a large
    /// buffer is dropped (a resident corpus), this waits for the stream and trims that pool to empty, so the
    /// device's free memory (and other processes) see the release. A no-op where the driver has no pools.
    pub fn release_cached_memory(&self) -> Result<(), GpuError> {
        if !self.ctx.has_async_alloc() {
            return Ok(());
        }
        self.synchronize()?;
        guard("cuMemPoolTrimTo", || {
            self.ctx.bind_to_thread().gpu("cuCtxSetCurrent")?;
            let mut pool = std::mem::MaybeUninit::uninit();
            // SAFETY: `pool` is a valid out pointer and the device handle is the context's own.
            unsafe {
                cudarc::driver::sys::cuDeviceGetDefaultMemPool(
                    pool.as_mut_ptr(),
                    self.ctx.cu_device(),
                )
            }
            .result()
            .gpu("cuDeviceGetDefaultMemPool")?;
            // SAFETY: the driver wrote the pool handle above; the default pool lives as long as the device.
            unsafe { cudarc::driver::result::mem_pool::trim_to(pool.assume_init(), 0) }
                .gpu("cuMemPoolTrimTo")
        })
    }

    /// Wait for all work queued on the handle's stream.
    pub fn synchronize(&self) -> Result<(), GpuError> {
        guard("cuStreamSynchronize", || {
            self.stream.synchronize().gpu("cuStreamSynchronize")
        })
    }

    /// The device address of a buffer, for a parameter struct.
    pub fn device_ptr<T>(&self, buf: &CudaSlice<T>) -> u64 {
        let (ptr, _sync) = buf.device_ptr(&self.stream);
        ptr
    }

    /// Launch `func` with `params` as its single by-value parameter, on the handle's stream.
    ///
    /// # Safety
    /// `params` must be a `#[repr(C)]` struct of `recall-kernel-shared`: the parameter struct `func` was compiled with, every pointer in it must refer to a
    /// live device buffer of the size the kernel reads or writes under `cfg`, and `cfg` must be the
    /// launch shape the kernel documents. The typed launchers in `recall-gpu-kernels` check all of it.
    pub unsafe fn launch<P: Copy + 'static>(
        &self,
        func: &CudaFunction,
        cfg: LaunchConfig,
        params: P,
    ) -> Result<(), GpuError> {
        guard("cuLaunchKernel", || {
            let block = ParamBlock(params);
            let mut builder = self.stream.launch_builder(func);
            builder.arg(&block);
            // SAFETY: forwarded to the caller (see `# Safety`).
            unsafe { builder.launch(cfg) }
                .map(|_| ())
                .gpu("cuLaunchKernel")
        })
    }

    /// Let `func` be launched with up to `bytes` of dynamic shared memory (above the default 48 KiB needs
    /// this opt-in; the driver refuses more than the device has per block).
    pub fn allow_dynamic_shared(&self, func: &CudaFunction, bytes: u32) -> Result<(), GpuError> {
        let value = i32::try_from(bytes).map_err(|_| GpuError::Driver {
            call: "cuFuncSetAttribute",
            code: 0,
            name: format!("{bytes} bytes of shared memory"),
        })?;
        guard("cuFuncSetAttribute", || {
            self.ctx.bind_to_thread().gpu("cuCtxSetCurrent")?;
            func.set_attribute(
                cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                value,
            )
            .gpu("cuFuncSetAttribute")
        })
    }

    /// How many blocks of `threads` threads with `shared_bytes` of dynamic shared memory the driver can keep
    /// resident on one SM at once for `func` (`cuOccupancyMaxActiveBlocksPerMultiprocessor`).
    pub fn max_resident_blocks_per_sm(
        &self,
        func: &CudaFunction,
        threads: u32,
        shared_bytes: u32,
    ) -> Result<u32, GpuError> {
        let call = "cuOccupancyMaxActiveBlocksPerMultiprocessor";
        guard(call, || {
            self.ctx.bind_to_thread().gpu("cuCtxSetCurrent")?;
            func.occupancy_max_active_blocks_per_multiprocessor(
                threads,
                shared_bytes as usize,
                None,
            )
            .gpu(call)
        })
    }

    /// Page-locked host memory for `len` values that the host reads back (cached, unlike
    /// [`Gpu::alloc_pinned`]'s write-combined staging, which is slow to read). Copies into it with
    /// [`Gpu::download_pinned`].
    pub fn alloc_pinned_readback<T: DeviceRepr + ValidAsZeroBits>(
        &self,
        len: usize,
    ) -> Result<PinnedHostSlice<T>, GpuError> {
        guard("cuMemHostAlloc", || {
            // SAFETY: as in `alloc_pinned`: handed out only through `as_slice`/`as_mut_slice`, and every
            // value type allowed here is valid for any bit pattern.
            unsafe { self.ctx.alloc_pinned_with_flags::<T>(len.max(1), 0) }.gpu("cuMemHostAlloc")
        })
    }

    /// Page-locked host memory for `len` values, mapped into the device's address space: a kernel writes its
    /// answer into it through [`MappedReadback::device_ptr`], and [`Gpu::read_mapped`] reads it after one
    /// synchronise, with no copy call in between (a call that costs about as much as a small launch on
    /// some hosts). For answers of a few hundred bytes: every device write crosses the bus. Starts zeroed.
    pub fn alloc_mapped_readback<T: DeviceRepr + ValidAsZeroBits + Copy>(
        &self,
        len: usize,
    ) -> Result<MappedReadback<T>, GpuError> {
        let len = len.max(1);
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .ok_or(GpuError::OutOfMemory {
                call: "cuMemHostAlloc",
            })?;
        let flags = crate::memory::PinnedFlags {
            write_combined: false,
            device_mapped: true,
        };
        let host = crate::memory::pinned_alloc(&self.ctx, bytes, flags)?;
        let mut buf = MappedReadback {
            ctx: self.ctx.clone(),
            host,
            len,
            device: 0,
            _values: std::marker::PhantomData,
        };
        // SAFETY: `host` is a live allocation of `bytes` bytes that nothing else refers to yet.
        unsafe { std::ptr::write_bytes(host.as_ptr(), 0, bytes) };
        // SAFETY: `host` came from `pinned_alloc` on this context with `device_mapped` and is live (`buf`
        // frees it on drop, after this).
        buf.device = unsafe { crate::memory::pinned_device_ptr(&self.ctx, host) }?;
        Ok(buf)
    }

    /// Wait for the stream, then the values of `buf` (what kernels on this stream wrote into it).
    pub fn read_mapped<'a, T: DeviceRepr + ValidAsZeroBits + Copy>(
        &self,
        buf: &'a mut MappedReadback<T>,
    ) -> Result<&'a [T], GpuError> {
        self.synchronize()?;
        // SAFETY: `host` holds `len` values of `T` (allocated so, page-aligned, zeroed first; every bit
        // pattern is a valid `T`); the mutable borrow keeps host writers out, and the synchronise above has
        // finished the device writes queued on this stream, the only ones `MappedReadback`'s contract allows.
        Ok(unsafe { std::slice::from_raw_parts(buf.host.as_ptr().cast::<T>(), buf.len) })
    }

    /// Wait until work queued on this handle's stream has replaced each of the first `n` values of `buf`,
    /// which the host set to `unset` before queuing that work ([`MappedReadback::fill_host`]), and return
    /// them; the stream may still be running what follows the last of those writes.
    ///
    /// The host reads the values (volatile: the device writes them over the bus) in a spin of at most
    /// `spin`, asking the driver every `MAPPED_POLL_QUERY_EVERY` whether the stream failed or finished;
    /// past `spin` it waits with a stream synchronise. The wait the driver does for a synchronise (spinning
    /// on a completion word the device writes after the whole grid has drained) is the same kind of wait
    /// that starts later, so the answer comes sooner. An error of the stream is returned as the driver
    /// reports it; a stream that finished without replacing every value is an error too.
    ///
    /// `T`'s `PartialEq` must compare bits (the integer types): the device writes each of the `n` values
    /// at most once, never as `unset`.
    pub fn wait_mapped_filled<'a, T: DeviceRepr + ValidAsZeroBits + Copy + PartialEq>(
        &self,
        buf: &'a mut MappedReadback<T>,
        n: usize,
        unset: T,
        spin: std::time::Duration,
    ) -> Result<&'a [T], GpuError> {
        self.wait_mapped_filled_or_done(buf, n, unset, spin)
            .map(|(values, _)| values)
    }

    /// [`Gpu::wait_mapped_filled`], and whether the wait found the stream finished: `true` where it
    /// synchronised the stream (past `spin`) or the driver reported it idle, `false` where the values came
    /// while the stream ran, which may still be running. A caller that keeps a kernel running across calls
    /// (the one-query server) learns from this, and from nothing else, that its kernel has ended: a clock read
    /// after the wait cannot tell a value that came just before `spin` from a synchronise.
    pub fn wait_mapped_filled_or_done<'a, T: DeviceRepr + ValidAsZeroBits + Copy + PartialEq>(
        &self,
        buf: &'a mut MappedReadback<T>,
        n: usize,
        unset: T,
        spin: std::time::Duration,
    ) -> Result<(&'a [T], bool), GpuError> {
        room("wait on mapped memory", buf.len, n)?;
        let base = buf.host.as_ptr().cast::<T>();
        // The first value from `from` on that is still unset.
        let unset_from = |from: usize| {
            (from..n).find(|&i| {
                // SAFETY: i < n <= len values of `T` at `base` (page-locked, every bit pattern a valid
                // `T`); volatile, because the device writes them while the host reads.
                unsafe { base.add(i).read_volatile() == unset }
            })
        };
        let start = std::time::Instant::now();
        let mut next_query = MAPPED_POLL_QUERY_EVERY;
        let mut first_unset = 0;
        let done = loop {
            match unset_from(first_unset) {
                None => break false,
                Some(i) => first_unset = i,
            }
            let waited = start.elapsed();
            if waited >= spin {
                self.synchronize()?;
                if unset_from(first_unset).is_some() {
                    return Err(unfilled());
                }
                break true;
            }
            if waited >= next_query {
                next_query = waited + MAPPED_POLL_QUERY_EVERY;
                if crate::memory::stream_is_idle(&self.stream)? {
                    // Finished: every write has landed, so what is unset now stays unset.
                    if unset_from(first_unset).is_some() {
                        return Err(unfilled());
                    }
                    break true;
                }
            }
            std::hint::spin_loop();
        };
        // Order the reads of the values after the reads that saw them replaced.
        std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        // SAFETY: `host` holds `len >= n` values of `T` (page-locked, every bit pattern valid); the mutable
        // borrow keeps host writers out, and each of the first `n` has had its one device write (seen
        // above), so no device write to them is still to come.
        Ok((unsafe { std::slice::from_raw_parts(base, n) }, done))
    }

    /// Copy the first `dst.len()` values of `src` into the pinned buffer `dst`, wait for the stream, and
    /// return the values.
    ///
    /// The wait is on the stream, not on the buffer's event: with event tracking off (as [`Gpu::open`]
    /// sets it) cudarc records no event for pinned buffers, so `PinnedHostSlice::as_slice` alone would not
    /// wait for the copy.
    pub fn download_pinned<'a, T: DeviceRepr + ValidAsZeroBits>(
        &self,
        src: &CudaSlice<T>,
        dst: &'a mut PinnedHostSlice<T>,
    ) -> Result<&'a [T], GpuError> {
        room("cuMemcpyDtoHAsync", src.len(), dst.len())?;
        let (src_ptr, _read) = src.device_ptr(&self.stream);
        let host = guard("cuEventSynchronize", || {
            dst.as_mut_slice().gpu("cuEventSynchronize")
        })?;
        guard("cuMemcpyDtoHAsync", || {
            // SAFETY: `host` is page-locked memory of `dst.len()` values, borrowed mutably until this
            // function returns, which is after the stream (and so the copy) has finished; `src` holds at
            // least that many values (checked above) and lives as long.
            unsafe {
                cudarc::driver::result::memcpy_dtoh_async(host, src_ptr, self.stream.cu_stream())
            }
            .gpu("cuMemcpyDtoHAsync")
        })?;
        self.synchronize()?;
        Ok(host)
    }

    /// Copy all of the pinned buffer `src` into the front of `dst`, queued on the handle's stream with no
    /// per-buffer event bookkeeping (a plain `cuMemcpyHtoDAsync`).
    ///
    /// # Safety
    /// `src` must not be written or freed until the copy has finished (e.g. until the stream has been
    /// synchronised).
    pub unsafe fn upload_pinned_raw<T: DeviceRepr + ValidAsZeroBits>(
        &self,
        src: &PinnedHostSlice<T>,
        dst: &mut CudaSlice<T>,
    ) -> Result<(), GpuError> {
        room("cuMemcpyHtoDAsync", dst.len(), src.len())?;
        let host = guard("cuEventSynchronize", || {
            src.as_slice().gpu("cuEventSynchronize")
        })?;
        let (dst_ptr, _write) = dst.device_ptr_mut(&self.stream);
        guard("cuMemcpyHtoDAsync", || {
            // SAFETY: `host` is page-locked and, by the caller's contract, stays unchanged and alive until
            // the copy has finished; `dst` holds at least `host.len()` values (checked above).
            unsafe {
                cudarc::driver::result::memcpy_htod_async(dst_ptr, host, self.stream.cu_stream())
            }
            .gpu("cuMemcpyHtoDAsync")
        })
    }

    /// The pinned buffer's values to write. The caller makes sure no copy from or to it is still in
    /// flight: with event tracking off, cudarc's own wait in `as_mut_slice` waits for nothing (see
    /// [`Gpu::download_pinned`]); a synchronised stream is enough.
    pub fn pinned_write<'a, T: ValidAsZeroBits>(
        &self,
        buf: &'a mut PinnedHostSlice<T>,
    ) -> Result<&'a mut [T], GpuError> {
        guard("cuEventSynchronize", || {
            buf.as_mut_slice().gpu("cuEventSynchronize")
        })
    }

    // ---- Added for `memory` (issue 6): access for the memory layer. ----

    /// The primary context this handle holds, for the driver memory calls in [`crate::memory`].
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }
}

#[cfg(test)]
mod tests {
    use super::room_from;

    #[test]
    fn a_store_past_the_end_is_an_error_even_when_its_end_wraps() {
        // `MappedReadback::store_words`'s check: `at + n` must not wrap (release builds) past the bound.
        assert!(room_from("store", 4, 0, 4).is_ok());
        assert!(room_from("store", 4, 2, 2).is_ok());
        assert!(room_from("store", 4, 3, 2).is_err());
        assert!(room_from("store", 4, usize::MAX, 1).is_err());
        assert!(room_from("store", 4, usize::MAX - 1, 3).is_err());
    }
}
