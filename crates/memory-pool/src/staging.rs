//! Double-buffered pinned staging for streaming host data to the device while kernels run, and for
//! uploading large pageable slices at pinned speed: the host copies chunk i + 1 into one page-locked slot
//! (with as many threads as the caller's copy closure uses) while the copy engine DMAs chunk i from the other.

use crate::buffers::{DeviceBuffer, DeviceCopy, DeviceSlice};
use crate::cuda::{CudaPinned, GpuMemory, Stream};
use crate::error::{PoolError, byte_len};
use crate::pool::Block;
use recall_gpu_sys::driver::CudaEvent;
use recall_gpu_sys::memory;
use std::fmt;
use std::ops::Range;

struct Slot {
    block: Block<CudaPinned>,
    /// Completes when the last copy out of this slot has.
    done: CudaEvent,
    in_flight: bool,
}

/// Two pinned chunks used in turn: while the copy engine moves chunk A to the device on the ring's
/// (copy) stream, the host fills chunk B. Kernels on other streams keep running; the destination
/// buffer's stream is ordered around the copies with events.
///
/// The slots come from the pinned pool, so a ring made again after one was dropped reuses the page-locked
/// blocks (page-locking is paid once per pool, not per ring). A slot is rewritten only after the event
/// recorded behind its last copy has completed. After an error, drop the ring.
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
            let block = mem.pinned_pool().allocate(chunk_bytes, copy_stream)?;
            // SAFETY: the block is at least `chunk_bytes` of host memory owned by this ring alone; the pool
            // hands out a pinned block only after every copy that used it has completed. Zeroed so that the
            // slot is initialised memory before `upload_bytes_with` lends it to a copy closure as `&mut [u8]`.
            unsafe { std::ptr::write_bytes(block.addr() as usize as *mut u8, 0, chunk_bytes) };
            Ok(Slot {
                block,
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
        self.upload_with(src, dst, dst_offset, copy_serial)
    }

    /// As [`StagingRing::upload`], with the host's copy of each chunk into its pinned slot done by `copy`:
    /// `copy(slot, chunk)` must fill `slot` (as long as `chunk`, at most [`StagingRing::chunk_bytes`]) with
    /// `chunk`'s bytes, for example with several threads. It runs on the calling thread while the copy
    /// engine moves the previous chunk to the device, so a parallel `copy` is what makes the pipeline fast;
    /// this crate stays free of any thread pool (the caller picks one).
    ///
    /// Chunks end at byte boundaries that need not be element boundaries: `copy` must move bytes as they
    /// are. If `copy` panics, nothing of that chunk has been queued and the ring stays usable.
    pub fn upload_with<T: DeviceCopy>(
        &mut self,
        src: &[T],
        dst: &mut DeviceBuffer<T>,
        dst_offset: usize,
        copy: impl Fn(&mut [u8], &[u8]) + Sync,
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
        if src.is_empty() {
            return Ok(());
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
        let copied = unsafe { self.upload_bytes_with(src_bytes, dst_addr, copy) };
        if other {
            // Also after a failed chunk: the copies already queued must come before `dst`'s later work
            // (its free included).
            let ordered = memory::record_event(&self.after, &self.stream)
                .and_then(|()| memory::stream_wait_event(dst.stream(), &self.after));
            copied?;
            ordered?;
            return Ok(());
        }
        copied
    }

    /// [`StagingRing::upload_with`] into the buffer under a [`DeviceSlice`] (a launcher-facing buffer kept in a
    /// field, such as a reused scratch): `src` into `dst` from element `dst_offset`.
    pub fn upload_slice_with<T: DeviceCopy>(
        &mut self,
        src: &[T],
        dst: &mut DeviceSlice<T>,
        dst_offset: usize,
        copy: impl Fn(&mut [u8], &[u8]) + Sync,
    ) -> Result<(), PoolError> {
        self.upload_with(src, dst.buffer_mut(), dst_offset, copy)
    }

    /// Stream raw bytes to `dst_addr` through the slots, on the copy stream.
    ///
    /// # Safety
    /// `dst_addr..dst_addr + src.len()` is live device memory of the ring's context that stays
    /// allocated, and is not used by other streams, until the copy stream has passed these copies.
    pub unsafe fn upload_bytes(&mut self, src: &[u8], dst_addr: u64) -> Result<(), PoolError> {
        // SAFETY: forwarded to the caller.
        unsafe { self.upload_bytes_with(src, dst_addr, copy_serial) }
    }

    /// [`StagingRing::upload_bytes`] with the host's copy into the slots done by `copy` (see
    /// [`StagingRing::upload_with`]). Returns when the last chunk is queued on the copy stream; `src` may
    /// be changed or dropped then.
    ///
    /// # Safety
    /// As [`StagingRing::upload_bytes`]: `dst_addr..dst_addr + src.len()` is live device memory of the
    /// ring's context that stays allocated, and is not used by other streams, until the copy stream has
    /// passed these copies. Work queued on the copy stream afterwards sees the bytes.
    pub unsafe fn upload_bytes_with(
        &mut self,
        src: &[u8],
        dst_addr: u64,
        copy: impl Fn(&mut [u8], &[u8]) + Sync,
    ) -> Result<(), PoolError> {
        for span in chunk_spans(src.len(), self.chunk_bytes) {
            let n = span.len();
            let slot = &mut self.slots[self.next];
            if slot.in_flight {
                // The DMA that last read this slot (two chunks ago) must be done before it is rewritten.
                memory::event_synchronize(&slot.done)?;
                slot.in_flight = false;
            }
            let host = slot.block.addr() as usize as *mut u8;
            // SAFETY: the slot's block holds `chunk_bytes >= n` bytes, initialised (zeroed in `new`), owned
            // by this ring alone (`&mut self`), and no copy reads it (its last copy completed above); the
            // view lives only for the `copy` call below.
            let staged = unsafe { std::slice::from_raw_parts_mut(host, n) };
            copy(staged, &src[span.clone()]);
            // SAFETY: the slot stays untouched until `done` completes (waited for before reuse; the pool
            // fences the copy stream before handing the block to anyone else); the destination is the
            // caller's (see `# Safety`).
            unsafe {
                memory::copy_htod_async(dst_addr + span.start as u64, host, n, &self.stream)
            }?;
            self.next ^= 1;
            if let Err(e) = memory::record_event(&slot.done, &self.stream) {
                // Without the event the slot's next use could not wait for this copy: wait for the whole
                // copy stream now (if that fails too, the error says so and the caller drops the ring).
                memory::stream_synchronize(&self.stream)?;
                return Err(e.into());
            }
            slot.in_flight = true;
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

/// The serial host copy of [`StagingRing::upload`].
fn copy_serial(staged: &mut [u8], chunk: &[u8]) {
    staged.copy_from_slice(chunk);
}

/// The byte ranges, in order, of the chunks that a `len`-byte upload goes through with slots of
/// `chunk_bytes` (> 0): every one `chunk_bytes` long but the last, which holds the rest; none for
/// `len == 0`.
fn chunk_spans(len: usize, chunk_bytes: usize) -> impl Iterator<Item = Range<usize>> {
    let step = chunk_bytes.max(1);
    (0..len.div_ceil(step)).map(move |i| i * step..((i + 1) * step).min(len))
}

#[cfg(test)]
mod tests {
    use super::chunk_spans;

    #[test]
    fn chunk_spans_cover_the_bytes_in_order_without_gaps() {
        let c = 64 << 10;
        for len in [0, 1, c - 1, c, c + 1, 2 * c + c / 2, 3 * c] {
            let spans: Vec<_> = chunk_spans(len, c).collect();
            assert_eq!(spans.len(), len.div_ceil(c), "len {len}");
            let mut at = 0;
            for (i, s) in spans.iter().enumerate() {
                assert_eq!(
                    s.start, at,
                    "len {len}: chunk {i} starts where the last ended"
                );
                assert!(
                    !s.is_empty() && s.len() <= c,
                    "len {len}: chunk {i} is {s:?}"
                );
                if i + 1 < spans.len() {
                    assert_eq!(s.len(), c, "len {len}: only the last chunk is short");
                }
                at = s.end;
            }
            assert_eq!(at, len, "len {len}: every byte is covered");
        }
        assert_eq!(
            chunk_spans(2 * c + c / 2, c).collect::<Vec<_>>(),
            vec![0..c, c..2 * c, 2 * c..2 * c + c / 2]
        );
        // A zero chunk size is read as one byte, never a division by zero or an endless loop.
        assert_eq!(chunk_spans(3, 0).count(), 3);
    }
}
