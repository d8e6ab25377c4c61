//! Page-locking memory the caller already owns (`cuMemHostRegister`), and a copy stream that DMAs from it
//! while kernels run on the handle's stream.
//!
//! Out-of-core knn reads a corpus that lives in the user's (pageable) memory. Copying it chunk by chunk into
//! a pinned staging buffer costs a host memcpy per byte, which bounds the stream at host memcpy speed; page-
//! locking the corpus once lets every chunk go to the device by DMA straight from where it lies.
//!
//! Safety by ownership: a [`HostRegistration`] holds an `Arc` of the memory it registered, so the memory
//! cannot be freed (nor, the `Arc` being shared, written) before the registration ends; its `Drop`
//! unregisters first, then releases its share of the memory.

use crate::error::{DriverResultExt, GpuError};
use crate::gpu::{Gpu, guard};
use cudarc::driver::{
    CudaContext, CudaEvent, CudaSlice, CudaStream, DevicePtrMut, DeviceRepr, sys,
};
use std::ops::Range;
use std::sync::Arc;

/// Host memory page-locked for the device by `cuMemHostRegister` (portable: every context may DMA from it),
/// kept alive by the registration itself. Unregistered on drop.
#[derive(Debug)]
pub struct HostRegistration<T> {
    /// The registered memory; shared, so never freed or mutated while registered.
    owner: Arc<Vec<T>>,
    /// The context the registration was made in (kept alive to unregister in it).
    ctx: Arc<CudaContext>,
    /// The registered address (`owner.as_ptr()` at registration time; an `Arc<Vec>` never moves its data).
    addr: usize,
}

impl<T> HostRegistration<T> {
    /// The registered values.
    pub fn values(&self) -> &[T] {
        &self.owner
    }

    /// How many values are registered.
    pub fn len(&self) -> usize {
        self.owner.len()
    }

    /// Whether no values are registered (never: an empty vector is refused).
    pub fn is_empty(&self) -> bool {
        self.owner.is_empty()
    }
}

impl<T> Drop for HostRegistration<T> {
    fn drop(&mut self) {
        let ctx = &self.ctx;
        let addr = self.addr;
        let r = guard("cuMemHostUnregister", || {
            ctx.bind_to_thread().gpu("cuCtxSetCurrent")?;
            // SAFETY: `addr` was registered by `Gpu::register_host` in this context and is unregistered
            // once, here; the memory is still allocated (this value holds an `Arc` of it until after this
            // call). No copy from it is in flight: a `CopyStream` holds the registrations it copied from
            // until it has waited for its copies.
            unsafe { sys::cuMemHostUnregister(addr as *mut std::ffi::c_void) }
                .result()
                .gpu("cuMemHostUnregister")
        });
        if let Err(e) = r {
            // Recorded, not lost (cudarc's habit): the pages stay locked until the process ends.
            tracing::warn!(error = %e, "recall: could not unregister page-locked host memory");
        }
    }
}

/// A second stream of a [`Gpu`] for host-to-device copies that overlap the kernels queued on the handle's
/// own stream, with the events that order the two. Dropping it waits for its copies.
#[derive(Debug)]
pub struct CopyStream {
    stream: Arc<CudaStream>,
    /// Recorded after each copy; the handle's stream waits on it in [`Gpu::wait_for_copies`].
    copied: CudaEvent,
    /// The registrations copies were queued from, kept alive until the stream has been waited for.
    sources: parking_lot::Mutex<Vec<Arc<dyn std::any::Any + Send + Sync>>>,
}

impl Drop for CopyStream {
    fn drop(&mut self) {
        // Nothing may still read host memory or write device memory once the stream's owner moves on
        // (the buffers it copied into are freed on the handle's stream, which may not have waited).
        if let Err(e) = guard("cuStreamSynchronize", || {
            self.stream.synchronize().gpu("cuStreamSynchronize")
        }) {
            tracing::warn!(error = %e, "recall: could not wait for the copy stream");
            // The copies may still read the registered memory: keep it registered and allocated.
            for s in self.sources.get_mut().drain(..) {
                std::mem::forget(s);
            }
        }
    }
}

/// A point in the handle's stream (`cuEventRecord`), for a copy to wait on.
#[derive(Debug)]
pub struct Fence {
    event: CudaEvent,
}

impl Gpu {
    /// Page-lock `values` for DMA (`cuMemHostRegister`, portable). Fails (for example when the memory-lock
    /// limit is reached, or the range is already registered): the caller keeps copying through staging.
    pub fn register_host<T: DeviceRepr>(
        &self,
        values: Arc<Vec<T>>,
    ) -> Result<HostRegistration<T>, GpuError> {
        let bytes = std::mem::size_of_val(values.as_slice());
        if bytes == 0 {
            return Err(GpuError::Driver {
                call: "cuMemHostRegister",
                code: 0,
                name: "nothing to register".into(),
            });
        }
        let ctx = self.context().clone();
        let addr = values.as_ptr() as usize;
        guard("cuMemHostRegister", || {
            ctx.bind_to_thread().gpu("cuCtxSetCurrent")?;
            // SAFETY: `addr..addr + bytes` is the live allocation of `values`, which the returned
            // registration keeps alive (and unregisters before releasing); the driver only pins its pages.
            unsafe {
                sys::cuMemHostRegister_v2(
                    addr as *mut std::ffi::c_void,
                    bytes,
                    sys::CU_MEMHOSTREGISTER_PORTABLE,
                )
            }
            .result()
            .gpu("cuMemHostRegister")
        })?;
        Ok(HostRegistration {
            owner: values,
            ctx,
            addr,
        })
    }

    /// A new stream for copies that overlap this handle's kernels.
    pub fn copy_stream(&self) -> Result<CopyStream, GpuError> {
        let stream = self.new_stream()?;
        let copied = crate::memory::new_fence(self.context())?;
        Ok(CopyStream {
            stream,
            copied,
            sources: parking_lot::Mutex::new(Vec::new()),
        })
    }

    /// A new fence (an event without timing).
    pub fn fence(&self) -> Result<Fence, GpuError> {
        Ok(Fence {
            event: crate::memory::new_fence(self.context())?,
        })
    }

    /// Record `fence` at the current end of this handle's stream.
    pub fn record_fence(&self, fence: &Fence) -> Result<(), GpuError> {
        crate::memory::record_event(&fence.event, self.stream())
    }

    /// Queue on `copies` a DMA of `src.values()[range]` into the front of `dst`, after the work of this
    /// handle's stream that `after` recorded (so kernels reading `dst` before that point have finished). The
    /// copy does not wait for anything else on the handle's stream: kernels queued after `after` must not
    /// touch `dst` (a device-side race: wrong answers). Call [`Gpu::wait_for_copies`] before queueing work
    /// that reads `dst`. `dst` is safe to drop afterwards: the handle's stream, which frees it, waits for
    /// the copy once `wait_for_copies` is called, and dropping `copies` waits for it too.
    pub fn upload_registered<T: DeviceRepr + Send + Sync + 'static>(
        &self,
        copies: &CopyStream,
        after: &Fence,
        src: &Arc<HostRegistration<T>>,
        range: Range<usize>,
        dst: &mut CudaSlice<T>,
    ) -> Result<(), GpuError> {
        let bad = |name: String| GpuError::Driver {
            call: "cuMemcpyHtoDAsync",
            code: 0,
            name,
        };
        if range.start > range.end || range.end > src.len() {
            return Err(bad(format!(
                "range {range:?} outside a registration of {} values",
                src.len()
            )));
        }
        if dst.len() < range.len() {
            return Err(bad(format!(
                "destination holds {} elements, source {}",
                dst.len(),
                range.len()
            )));
        }
        if range.is_empty() {
            return Ok(());
        }
        let size = std::mem::size_of::<T>();
        {
            let mut sources = copies.sources.lock();
            let addr = Arc::as_ptr(src) as usize;
            if !sources
                .iter()
                .any(|s| Arc::as_ptr(s) as *const () as usize == addr)
            {
                sources.push(src.clone());
            }
        }
        crate::memory::stream_wait_event(&copies.stream, &after.event)?;
        let (dst_ptr, _sync) = dst.device_ptr_mut(&copies.stream);
        let src_ptr = (src.addr + range.start * size) as *const u8;
        // SAFETY: the destination is `dst`'s live device allocation of at least `range.len()` elements, freed
        // only on the handle's stream, which waits for this copy (`wait_for_copies`) or is preceded by the
        // copy stream's synchronise on drop. The source lies inside the registration (checked above), which
        // keeps it allocated and unmodified, and `copies` holds the registration until its stream has been
        // waited for (its `Drop`).
        unsafe {
            crate::memory::copy_htod_async(dst_ptr, src_ptr, range.len() * size, &copies.stream)?
        };
        crate::memory::record_event(&copies.copied, &copies.stream)
    }

    /// Make work queued on this handle's stream from now on wait for every copy queued on `copies` so far.
    pub fn wait_for_copies(&self, copies: &CopyStream) -> Result<(), GpuError> {
        crate::memory::stream_wait_event(self.stream(), &copies.copied)
    }
}
