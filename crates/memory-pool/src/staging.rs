//! Double-buffered pinned staging for streaming host data to the device while kernels run, and for
//! uploading large pageable slices at pinned speed: the host copies chunk i + 1 into one page-locked slot
//! (with as many threads as the caller's copy closure uses) while the copy engine DMAs chunk i from the other.
//! Downloads run the same pipeline the other way: the copy engine DMAs chunk i + 1 into one slot while the
//! host copies chunk i out of the other into the caller's pageable memory.

use crate::buffers::{DeviceBuffer, DeviceCopy, DeviceSlice};
use crate::cuda::{CudaPinned, GpuMemory, Stream};
use crate::error::{PoolError, byte_len};
use crate::pool::Block;
use recall_gpu_sys::driver::{CudaEvent, CudaSlice, DevicePtrMut};
use recall_gpu_sys::memory;
use std::fmt;
use std::ops::Range;

struct Slot {
    block: Block<CudaPinned>,
    /// Completes when the last DMA that used this slot (out of it for an upload, into it for a download) has.
    done: CudaEvent,
    /// A DMA recorded in `done` may still be running: wait for `done` before the host touches the slot.
    in_flight: bool,
}

/// Two pinned chunks used in turn: while the copy engine moves chunk A to the device on the ring's
/// (copy) stream, the host fills chunk B. Kernels on other streams keep running; the destination
/// buffer's stream is ordered around the copies with events. Downloads ([`StagingRing::download_with`])
/// use the same slots the other way round: the copy engine fills one while the host empties the other.
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

/// `Ok` when `len` elements of `T` from element `at` lie inside a device buffer of `dst_len` elements (the
/// destination of an upload, the source of a download).
fn fits<T>(len: usize, at: usize, dst_len: usize) -> Result<(), PoolError> {
    let end = at.checked_add(len).ok_or(PoolError::SizeOverflow {
        len,
        elem_size: std::mem::size_of::<T>(),
    })?;
    if end > dst_len {
        return Err(PoolError::LengthMismatch {
            expected: dst_len,
            found: end,
        });
    }
    Ok(())
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
    /// are. If `copy` panics, nothing of that chunk has been queued, the ring waits for its stream while
    /// unwinding (the earlier chunks' copies into `dst` are done before `dst` can be dropped or reused), and it
    /// stays usable.
    pub fn upload_with<T: DeviceCopy>(
        &mut self,
        src: &[T],
        dst: &mut DeviceBuffer<T>,
        dst_offset: usize,
        copy: impl Fn(&mut [u8], &[u8]) + Sync,
    ) -> Result<(), PoolError> {
        fits::<T>(src.len(), dst_offset, dst.len())?;
        if src.is_empty() {
            return Ok(());
        }
        let dst_addr = dst.device_ptr() + byte_len::<T>(dst_offset)? as u64;
        let dst_stream = dst.stream().clone();
        // SAFETY: `dst_addr..` + `src`'s bytes lies inside `dst` (checked above), which is borrowed mutably for the
        // call (no other stream of ours uses it meanwhile) and is freed or reused on its own stream, which the
        // body orders after these copies.
        unsafe { self.upload_ordered(src, dst_addr, &dst_stream, copy) }
    }

    /// As [`StagingRing::upload_with`], into a buffer that is not the pool's: a driver allocation (cudarc's
    /// `CudaSlice`, such as a spreading graph's arrays) ordered on a stream of its own. `src` into `dst` from element
    /// `dst_offset`. The copies start after the work already queued on `dst`'s stream, and work queued there
    /// afterwards sees the data (events order the two streams where they differ); `dst` is freed on its stream, so
    /// after the copies. Returns when the last chunk is queued; `src` may change then.
    pub fn upload_cuda_with<T: DeviceCopy>(
        &mut self,
        src: &[T],
        dst: &mut CudaSlice<T>,
        dst_offset: usize,
        copy: impl Fn(&mut [u8], &[u8]) + Sync,
    ) -> Result<(), PoolError> {
        fits::<T>(src.len(), dst_offset, dst.len())?;
        if src.is_empty() {
            return Ok(());
        }
        let dst_stream = dst.stream().clone();
        // The guard records cudarc's write event on `dst_stream` when it drops: after the copies below and the
        // stream's wait for them, so that work ordered by that event sees the bytes (with cudarc's event tracking
        // off, as `recall_gpu_sys::Gpu` opens contexts, it records nothing).
        let (base, record) = dst.device_ptr_mut(&dst_stream);
        let dst_addr = base + byte_len::<T>(dst_offset)? as u64;
        // SAFETY: `dst_addr..` + `src`'s bytes lies inside `dst` (checked above), device memory of its stream's
        // context, borrowed mutably for the call; cudarc frees it on that stream (asynchronously, or after a
        // synchronise of it), which the body orders after these copies.
        let copied = unsafe { self.upload_ordered(src, dst_addr, &dst_stream, copy) };
        drop(record);
        copied
    }

    /// The body of the typed uploads: `src` to `dst_addr` through the slots, the copies ordered after the work
    /// queued on `dst_stream` so far and before the work queued there afterwards (events, where it is not the ring's
    /// stream; also after a failed chunk, so that the copies already queued come first).
    ///
    /// # Safety
    /// `dst_addr..dst_addr + size_of_val(src)` is live device memory of the ring's context, used by no stream but
    /// `dst_stream` (and these copies) until this returns, and freed or reused only by work queued on `dst_stream`
    /// after this returns.
    unsafe fn upload_ordered<T: DeviceCopy>(
        &mut self,
        src: &[T],
        dst_addr: u64,
        dst_stream: &Stream,
        copy: impl Fn(&mut [u8], &[u8]) + Sync,
    ) -> Result<(), PoolError> {
        let bytes = byte_len::<T>(src.len())?;
        // SAFETY: `DeviceCopy` values are plain bytes; the view covers exactly `src`.
        let src_bytes = unsafe { std::slice::from_raw_parts(src.as_ptr().cast::<u8>(), bytes) };
        let other = dst_stream.cu_stream() != self.stream.cu_stream();
        if other {
            // Copies start after the work already queued on the destination's stream.
            memory::record_event(&self.before, dst_stream)?;
            memory::stream_wait_event(&self.stream, &self.before)?;
        }
        // SAFETY: the destination is the caller's (see `# Safety`); `dst_stream` waits for these copies below
        // before any later work.
        let copied = unsafe { self.upload_bytes_with(src_bytes, dst_addr, copy) };
        if other {
            // Also after a failed chunk: the copies already queued must come before the destination's later
            // work (its free included).
            let ordered = memory::record_event(&self.after, &self.stream)
                .and_then(|()| memory::stream_wait_event(dst_stream, &self.after));
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
        // A panicking `copy` leaves the earlier chunks' DMAs queued, writing the destination: wait for them while
        // unwinding, so that the caller may free or reuse it (its stream is ordered after them only on return).
        let _unwind = WaitOnUnwind(self.stream.clone());
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

    /// Copy `src[src_offset .. src_offset + dst.len()]` into the caller's `dst`, chunk by chunk through the two
    /// slots, with the host's copy out of each slot done serially. Returns when every byte is in `dst`.
    pub fn download<T: DeviceCopy>(
        &mut self,
        src: &DeviceBuffer<T>,
        src_offset: usize,
        dst: &mut [T],
    ) -> Result<(), PoolError> {
        self.download_with(src, src_offset, dst, copy_serial)
    }

    /// As [`StagingRing::download`], with the host's copy of each chunk out of its pinned slot done by `copy`:
    /// `copy(dst_chunk, slot)` must fill `dst_chunk` (as long as `slot`, at most [`StagingRing::chunk_bytes`])
    /// with `slot`'s bytes, for example with several threads (the same closure as an upload's serves: it copies
    /// its second argument into its first). It runs on the calling thread while the copy engine moves the next
    /// chunk into the other slot, so a parallel `copy` is what makes the pipeline fast.
    ///
    /// The copies run on the ring's stream after the work already queued on `src`'s stream (an event orders them
    /// where the streams differ), so a kernel queued before this call that writes `src` is seen. A slot is
    /// refilled only after the host has copied it out, and read by the host only after the event behind its
    /// DMA has completed. Returns when every byte is in `dst` and no copy of this call is running.
    ///
    /// Chunks end at byte boundaries that need not be element boundaries: `copy` must move bytes as they are.
    /// After an error the ring has waited for its stream (no DMA is left writing a slot); `dst` then holds
    /// some chunks and not others. If `copy` panics, the ring waits for its stream while unwinding.
    pub fn download_with<T: DeviceCopy>(
        &mut self,
        src: &DeviceBuffer<T>,
        src_offset: usize,
        dst: &mut [T],
        copy: impl Fn(&mut [u8], &[u8]) + Sync,
    ) -> Result<(), PoolError> {
        fits::<T>(dst.len(), src_offset, src.len())?;
        if dst.is_empty() {
            return Ok(());
        }
        let src_addr = src.device_ptr() + byte_len::<T>(src_offset)? as u64;
        let bytes = byte_len::<T>(dst.len())?;
        // SAFETY: `DeviceCopy` values are plain bytes, valid for every bit pattern; the view covers exactly
        // `dst`, which is borrowed mutably for the call (no other view of it is used while this one lives).
        let dst_bytes =
            unsafe { std::slice::from_raw_parts_mut(dst.as_mut_ptr().cast::<u8>(), bytes) };
        let other = src.stream().cu_stream() != self.stream.cu_stream();
        if other {
            // The copies start after the work already queued on the source's stream (a kernel writing it).
            memory::record_event(&self.before, src.stream())?;
            memory::stream_wait_event(&self.stream, &self.before)?;
        }
        // SAFETY: `src_addr..+bytes` lies inside `src` (checked above), which is borrowed for the call; the copies
        // are ordered after the work queued on its stream (above, or by the stream itself), and every one has
        // completed when this returns `Ok` (each chunk is waited for before the host reads it). After an error
        // the ring waited for its stream; where even that failed, `src`'s stream waits for the ring's below.
        let copied = unsafe { self.download_bytes_with(src_addr, dst_bytes, copy) };
        if other && copied.is_err() {
            // Best effort, after a failure that already is the error: `src`'s later work (its free included)
            // comes after any copy of this call that might still read it.
            let _ = memory::record_event(&self.after, &self.stream)
                .and_then(|()| memory::stream_wait_event(src.stream(), &self.after));
        }
        copied
    }

    /// [`StagingRing::download_with`] from the buffer under a [`DeviceSlice`] (a launcher's output kept as one):
    /// `src[src_offset .. src_offset + dst.len()]` into `dst`.
    pub fn download_slice_with<T: DeviceCopy>(
        &mut self,
        src: &DeviceSlice<T>,
        src_offset: usize,
        dst: &mut [T],
        copy: impl Fn(&mut [u8], &[u8]) + Sync,
    ) -> Result<(), PoolError> {
        self.download_with(src.buffer(), src_offset, dst, copy)
    }

    /// Copy `dst.len()` raw device bytes from `src_addr` into `dst` through the slots, pipelined: the DMA of
    /// chunk i + 1 into one slot (on the copy stream) runs while `copy(dst_chunk, slot)` copies chunk i out of
    /// the other (see [`StagingRing::download_with`]). Returns when every byte is in `dst`; on an error, after
    /// waiting for the copy stream (no DMA is left writing a slot).
    ///
    /// # Safety
    /// `src_addr..src_addr + dst.len()` is live device memory of the ring's context that stays allocated, and is
    /// not written, until the copy stream has passed these copies (they have when this returns `Ok`, or after an
    /// error once the copy stream is idle). The copies see what work queued on the copy stream before this call
    /// wrote; work on other streams must be ordered before the copy stream by the caller (an event).
    pub unsafe fn download_bytes_with(
        &mut self,
        src_addr: u64,
        dst: &mut [u8],
        copy: impl Fn(&mut [u8], &[u8]) + Sync,
    ) -> Result<(), PoolError> {
        let len = dst.len();
        let n = len.div_ceil(self.chunk_bytes);
        if n == 0 {
            return Ok(());
        }
        let first = self.next;
        // A panicking `copy` leaves a DMA into the other slot queued, reading `src`: wait for it while unwinding.
        let _unwind = WaitOnUnwind(self.stream.clone());
        let mut run = || -> Result<(), PoolError> {
            for step in download_steps(n, first) {
                match step {
                    Step::Dma { chunk, slot } => {
                        let span = chunk_span(len, self.chunk_bytes, chunk);
                        let slot = &mut self.slots[slot];
                        let host = slot.block.addr() as usize as *mut u8;
                        // The slot is marked before the queue, so that an error from here on leaves it to be
                        // waited for (the error path below waits for the whole stream).
                        slot.in_flight = true;
                        // SAFETY: the slot's block holds `chunk_bytes >= span.len()` bytes owned by this ring
                        // alone (`&mut self`); the host does not touch it until `done`, recorded right after,
                        // has completed (the `CopyOut` step, or the stream wait on an error); the schedule
                        // queues a slot's DMA only after its last chunk was copied out. The source is the
                        // caller's (see `# Safety`).
                        unsafe {
                            memory::copy_dtoh_async(
                                host,
                                src_addr + span.start as u64,
                                span.len(),
                                &self.stream,
                            )
                        }?;
                        memory::record_event(&slot.done, &self.stream)?;
                    }
                    Step::CopyOut { chunk, slot } => {
                        let span = chunk_span(len, self.chunk_bytes, chunk);
                        let slot = &mut self.slots[slot];
                        memory::event_synchronize(&slot.done)?;
                        slot.in_flight = false;
                        let host = slot.block.addr() as usize as *const u8;
                        // SAFETY: the slot's block holds `chunk_bytes >= span.len()` bytes, initialised (zeroed
                        // in `new`, then written by DMAs), owned by this ring alone; the DMA that filled it has
                        // completed (its event, above) and none is queued into it until this view is gone
                        // (the next `Dma` step for this slot comes after this one).
                        let staged = unsafe { std::slice::from_raw_parts(host, span.len()) };
                        copy(&mut dst[span], staged);
                    }
                }
            }
            Ok(())
        };
        let r = run();
        if r.is_err() {
            // No DMA may be left writing a slot (or reading the caller's source) once this returns.
            if memory::stream_synchronize(&self.stream).is_ok() {
                for slot in &mut self.slots {
                    slot.in_flight = false;
                }
            }
        }
        self.next = first ^ (n & 1);
        r
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

/// The serial host copy of [`StagingRing::upload`] and [`StagingRing::download`]: `from` into `to`.
fn copy_serial(to: &mut [u8], from: &[u8]) {
    to.copy_from_slice(from);
}

/// Waits for a stream when dropped during a panic (a host copy closure that panicked mid-upload or mid-download).
struct WaitOnUnwind(Stream);

impl Drop for WaitOnUnwind {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // Nothing to report to: the panic is already the outcome. A failure leaves the copy stream to the
            // pool's fences (the ring's slots go back to the pool only after them).
            let _ = memory::stream_synchronize(&self.0);
        }
    }
}

/// The byte ranges, in order, of the chunks that a `len`-byte upload goes through with slots of
/// `chunk_bytes` (> 0): every one `chunk_bytes` long but the last, which holds the rest; none for
/// `len == 0`.
fn chunk_spans(len: usize, chunk_bytes: usize) -> impl Iterator<Item = Range<usize>> {
    let step = chunk_bytes.max(1);
    (0..len.div_ceil(step)).map(move |i| chunk_span(len, step, i))
}

/// Chunk `i` of [`chunk_spans`]`(len, chunk_bytes)` (`chunk_bytes` > 0, `i` < the chunk count).
fn chunk_span(len: usize, chunk_bytes: usize, i: usize) -> Range<usize> {
    i * chunk_bytes..((i + 1) * chunk_bytes).min(len)
}

/// One step of a download's pipeline (see [`download_steps`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Queue the DMA of `chunk` into `slot`, and record the slot's event behind it.
    Dma { chunk: usize, slot: usize },
    /// Wait for `slot`'s event, then copy `chunk` out of it into the caller's memory.
    CopyOut { chunk: usize, slot: usize },
}

/// The steps of a download of `n` chunks through two slots, starting with slot `first` (0 or 1): chunk i goes
/// through slot `first ^ (i & 1)`; the DMA of chunk i + 1 is queued before the host copies chunk i out (so the
/// two overlap), and a slot's next DMA is queued only after its last chunk was copied out.
fn download_steps(n: usize, first: usize) -> impl Iterator<Item = Step> {
    let slot = move |chunk: usize| (first ^ chunk) & 1;
    let prime = (n > 0).then_some(Step::Dma {
        chunk: 0,
        slot: slot(0),
    });
    prime.into_iter().chain((0..n).flat_map(move |i| {
        let next = (i + 1 < n).then_some(Step::Dma {
            chunk: i + 1,
            slot: slot(i + 1),
        });
        next.into_iter().chain(std::iter::once(Step::CopyOut {
            chunk: i,
            slot: slot(i),
        }))
    }))
}

#[cfg(test)]
mod tests {
    use super::{Step, chunk_span, chunk_spans, download_steps};

    /// Play a download's steps against a model of the two slots: a DMA only into a slot the host has emptied,
    /// a copy out only of the chunk whose DMA last went into that slot; chunks move in order, each once.
    fn check_schedule(n: usize, first: usize) {
        #[derive(Clone, Copy, PartialEq, Debug)]
        enum SlotState {
            Empty,
            Filling(usize),
        }
        let mut slots = [SlotState::Empty; 2];
        let (mut dma_next, mut out_next) = (0, 0);
        let steps: Vec<Step> = download_steps(n, first).collect();
        assert_eq!(
            steps.len(),
            2 * n,
            "n {n}: one DMA and one copy out per chunk"
        );
        for (at, step) in steps.iter().enumerate() {
            match *step {
                Step::Dma { chunk, slot } => {
                    assert_eq!(chunk, dma_next, "n {n}: DMAs in order");
                    assert_eq!(
                        slots[slot],
                        SlotState::Empty,
                        "n {n}, step {at}: a DMA into a full slot"
                    );
                    assert_eq!(
                        slot,
                        (first + chunk) % 2,
                        "n {n}: the slots alternate from `first`"
                    );
                    slots[slot] = SlotState::Filling(chunk);
                    dma_next += 1;
                }
                Step::CopyOut { chunk, slot } => {
                    assert_eq!(chunk, out_next, "n {n}: copies out in order");
                    assert_eq!(
                        slots[slot],
                        SlotState::Filling(chunk),
                        "n {n}, step {at}: wrong slot"
                    );
                    slots[slot] = SlotState::Empty;
                    out_next += 1;
                    // Pipelined: the next chunk's DMA is already queued while this one is copied out.
                    if chunk + 1 < n {
                        assert_eq!(
                            dma_next,
                            chunk + 2,
                            "n {n}: chunk {} not queued ahead",
                            chunk + 1
                        );
                    }
                }
            }
        }
        assert_eq!((dma_next, out_next), (n, n), "n {n}: every chunk moved");
        assert_eq!(
            slots,
            [SlotState::Empty; 2],
            "n {n}: nothing left in a slot"
        );
    }

    #[test]
    fn download_schedule_overlaps_and_never_refills_a_slot_before_it_is_copied_out() {
        for n in 0..9 {
            for first in [0, 1] {
                check_schedule(n, first);
            }
        }
        assert_eq!(download_steps(0, 0).count(), 0);
        assert_eq!(
            download_steps(3, 1).collect::<Vec<_>>(),
            vec![
                Step::Dma { chunk: 0, slot: 1 },
                Step::Dma { chunk: 1, slot: 0 },
                Step::CopyOut { chunk: 0, slot: 1 },
                Step::Dma { chunk: 2, slot: 1 },
                Step::CopyOut { chunk: 1, slot: 0 },
                Step::CopyOut { chunk: 2, slot: 1 },
            ]
        );
    }

    #[test]
    fn chunk_span_is_the_ith_of_chunk_spans() {
        let c = 64 << 10;
        for len in [1, c - 1, c, c + 1, 2 * c + c / 2] {
            for (i, s) in chunk_spans(len, c).enumerate() {
                assert_eq!(chunk_span(len, c, i), s, "len {len}, chunk {i}");
            }
        }
    }

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
