//! Double-buffered pinned staging for streaming host data to the device while kernels run.

use crate::buffers::{DeviceBuffer, DeviceCopy};
use crate::cuda::{CudaPinned, GpuMemory, Stream};
use crate::error::{PoolError, byte_len};
use crate::pool::Block;
use recall_gpu_sys::driver::CudaEvent;
use recall_gpu_sys::memory;
use std::fmt;

struct Slot {
    block: Block<CudaPinned>,
    /// Completes when the last copy out of this slot has.
    done: CudaEvent,
    in_flight: bool,
}

/// Two pinned chunks used in turn: while the copy engine moves chunk A to the device on the ring's
/// (copy) stream, the host fills chunk B. Kernels on other streams keep running; the destination
/// buffer's stream is ordered around the copies with events.
pub struct StagingRing {
    slots: [Slot; 2],
    next: usize,
    chunk_bytes: usize,
    stream: Stream,
    before: CudaEvent,
    after: CudaEvent,
}

impl fmt::Debug for StagingRing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StagingRing")
            .field("chunk_bytes", &self.chunk_bytes)
            .field("next", &self.next)
            .finish()
    }
}

impl StagingRing {
    /// Two pinned chunks of `chunk_bytes` (at least 4 KiB) from `mem`'s pinned pool; copies go on
    /// `copy_stream` (use a stream other than the kernels').
    pub fn new(
        mem: &GpuMemory,
        chunk_bytes: usize,
        copy_stream: &Stream,
    ) -> Result<StagingRing, PoolError> {
        if chunk_bytes < 4096 {
            return Err(PoolError::InvalidConfig(format!(
                "staging chunk of {chunk_bytes} bytes is below 4096"
            )));
        }
        let slot = || -> Result<Slot, PoolError> {
            Ok(Slot {
                block: mem.pinned_pool().allocate(chunk_bytes, copy_stream)?,
                done: memory::new_fence(mem.context())?,
                in_flight: false,
            })
        };
        Ok(StagingRing {
            slots: [slot()?, slot()?],
            next: 0,
            chunk_bytes,
            stream: copy_stream.clone(),
            before: memory::new_fence(mem.context())?,
            after: memory::new_fence(mem.context())?,
        })
    }

    /// Bytes per chunk.
    pub fn chunk_bytes(&self) -> usize {
        self.chunk_bytes
    }

    /// The copy stream.
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// Stream `src` into `dst` starting at element `dst_offset`, chunk by chunk through the two slots.
    /// Returns when the last chunk is queued; work queued on `dst`'s stream afterwards sees the data.
    /// `src` may be changed or dropped when this returns.
    pub fn upload<T: DeviceCopy>(
        &mut self,
        src: &[T],
        dst: &mut DeviceBuffer<T>,
        dst_offset: usize,
    ) -> Result<(), PoolError> {
        let end = dst_offset
            .checked_add(src.len())
            .ok_or(PoolError::SizeOverflow {
                len: src.len(),
                elem_size: std::mem::size_of::<T>(),
            })?;
        if end > dst.len() {
            return Err(PoolError::LengthMismatch {
                expected: dst.len(),
                found: end,
            });
        }
        let dst_addr = dst.device_ptr() + byte_len::<T>(dst_offset)? as u64;
        let bytes = byte_len::<T>(src.len())?;
        // SAFETY: `DeviceCopy` values are plain bytes; the view covers exactly `src`.
        let src_bytes = unsafe { std::slice::from_raw_parts(src.as_ptr().cast::<u8>(), bytes) };
        let other = dst.stream().cu_stream() != self.stream.cu_stream();
        if other {
            // Copies start after the work already queued on the destination's stream.
            memory::record_event(&self.before, dst.stream())?;
            memory::stream_wait_event(&self.stream, &self.before)?;
        }
        // SAFETY: `dst_addr..+bytes` lies inside `dst` (checked above), which is borrowed mutably for the
        // call and whose stream waits for these copies below before any later work.
        unsafe { self.upload_bytes(src_bytes, dst_addr) }?;
        if other {
            memory::record_event(&self.after, &self.stream)?;
            memory::stream_wait_event(dst.stream(), &self.after)?;
        }
        Ok(())
    }

    /// Stream raw bytes to `dst_addr` through the slots, on the copy stream.
    ///
    /// # Safety
    /// `dst_addr..dst_addr + src.len()` is live device memory of the ring's context that stays
    /// allocated, and is not used by other streams, until the copy stream has passed these copies.
    pub unsafe fn upload_bytes(&mut self, src: &[u8], dst_addr: u64) -> Result<(), PoolError> {
        let mut off = 0usize;
        while off < src.len() {
            let n = self.chunk_bytes.min(src.len() - off);
            let slot = &mut self.slots[self.next];
            if slot.in_flight {
                memory::event_synchronize(&slot.done)?;
                slot.in_flight = false;
            }
            let host = slot.block.addr() as usize as *mut u8;
            // SAFETY: the slot's block holds `chunk_bytes >= n` bytes and no copy reads it (its last copy
            // completed above); `src[off..off + n]` is in bounds.
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr().add(off), host, n) };
            // SAFETY: the slot stays untouched until `done` completes (waited for before reuse; the pool
            // fences the copy stream before handing the block to anyone else); the destination is the
            // caller's (see `# Safety`).
            unsafe { memory::copy_htod_async(dst_addr + off as u64, host, n, &self.stream) }?;
            memory::record_event(&slot.done, &self.stream)?;
            slot.in_flight = true;
            self.next ^= 1;
            off += n;
        }
        Ok(())
    }

    /// Wait on the host until every queued chunk has reached the device.
    pub fn finish(&mut self) -> Result<(), PoolError> {
        for slot in &mut self.slots {
            if slot.in_flight {
                memory::event_synchronize(&slot.done)?;
                slot.in_flight = false;
            }
        }
        Ok(())
    }
}
