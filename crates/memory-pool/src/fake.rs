//! A fake [`Allocator`] for testing pool logic without a GPU: bump-allocated addresses (never reused),
//! a capacity that produces driver out-of-memory answers, and streams whose queued work completes only
//! when a test says so. It checks, at the moment the pool gives a block back, that no queued work used
//! it, and records any violation.

use crate::allocator::{Allocator, StreamKey};
use parking_lot::Mutex;
use recall_gpu_sys::GpuError;
use std::collections::HashMap;

/// A fake stream: an id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FakeStream(pub u64);

/// A fake fence: complete when the stream has completed work up to `ticket`.
#[derive(Debug)]
pub struct FakeFence {
    stream: u64,
    ticket: u64,
}

#[derive(Debug, Default, Clone, Copy)]
struct StreamWork {
    submitted: u64,
    completed: u64,
}

#[derive(Debug, Default)]
struct FakeState {
    capacity: usize,
    outstanding: HashMap<u64, usize>,
    outstanding_bytes: usize,
    next_addr: u64,
    streams: HashMap<u64, StreamWork>,
    last_use: HashMap<u64, (u64, u64)>,
    violations: Vec<String>,
    allocations: u64,
    deallocations: u64,
    fences: u64,
}

/// The fake allocator. See the module doc.
#[derive(Debug)]
pub struct FakeAllocator {
    state: Mutex<FakeState>,
}

impl FakeAllocator {
    /// A fake device of `capacity` bytes.
    pub fn new(capacity: usize) -> FakeAllocator {
        FakeAllocator {
            state: Mutex::new(FakeState {
                capacity,
                next_addr: 0x1000_0000,
                ..FakeState::default()
            }),
        }
    }

    /// Change the capacity (simulates other processes taking or freeing memory).
    pub fn set_capacity(&self, capacity: usize) {
        self.state.lock().capacity = capacity;
    }

    /// Queue work on `stream` that uses the block at `addr`; returns its ticket.
    pub fn use_block(&self, addr: u64, stream: FakeStream) -> u64 {
        let mut st = self.state.lock();
        let w = st.streams.entry(stream.0).or_default();
        w.submitted += 1;
        let ticket = w.submitted;
        st.last_use.insert(addr, (stream.0, ticket));
        ticket
    }

    /// Complete all work queued on `stream`.
    pub fn complete(&self, stream: FakeStream) {
        let mut st = self.state.lock();
        let w = st.streams.entry(stream.0).or_default();
        w.completed = w.submitted;
    }

    /// Has the work with `ticket` on `stream` completed?
    pub fn is_complete(&self, stream: FakeStream, ticket: u64) -> bool {
        self.state
            .lock()
            .streams
            .get(&stream.0)
            .is_none_or(|w| w.completed >= ticket)
    }

    /// The last queued use of the block at `addr`: `(stream, ticket)`.
    pub fn last_use(&self, addr: u64) -> Option<(FakeStream, u64)> {
        self.state
            .lock()
            .last_use
            .get(&addr)
            .map(|&(s, t)| (FakeStream(s), t))
    }

    /// Bytes allocated and not given back.
    pub fn outstanding_bytes(&self) -> usize {
        self.state.lock().outstanding_bytes
    }

    /// Blocks allocated and not given back.
    pub fn outstanding_blocks(&self) -> usize {
        self.state.lock().outstanding.len()
    }

    /// Calls to `allocate` that succeeded.
    pub fn allocations(&self) -> u64 {
        self.state.lock().allocations
    }

    /// Calls to `deallocate`.
    pub fn deallocations(&self) -> u64 {
        self.state.lock().deallocations
    }

    /// Fences recorded.
    pub fn fences(&self) -> u64 {
        self.state.lock().fences
    }

    /// Broken rules seen so far (double frees, freeing memory that queued work still uses).
    pub fn violations(&self) -> Vec<String> {
        self.state.lock().violations.clone()
    }
}

impl Allocator for FakeAllocator {
    type Stream = FakeStream;
    type Fence = FakeFence;

    fn stream_key(&self, stream: &FakeStream) -> StreamKey {
        stream.0
    }

    fn allocate(&self, bytes: usize) -> Result<u64, GpuError> {
        let mut st = self.state.lock();
        if bytes == 0 {
            st.violations.push("allocate(0)".into());
        }
        if st.outstanding_bytes + bytes > st.capacity {
            return Err(GpuError::OutOfMemory {
                call: "fake allocate",
            });
        }
        let addr = st.next_addr;
        st.next_addr += bytes.max(1) as u64;
        st.outstanding.insert(addr, bytes);
        st.outstanding_bytes += bytes;
        st.allocations += 1;
        Ok(addr)
    }

    unsafe fn deallocate(&self, addr: u64, bytes: usize) -> Result<(), GpuError> {
        let mut st = self.state.lock();
        st.deallocations += 1;
        match st.outstanding.remove(&addr) {
            Some(b) if b == bytes => st.outstanding_bytes -= b,
            Some(b) => {
                st.outstanding_bytes -= b;
                st.violations
                    .push(format!("{addr:#x} freed with {bytes} bytes, allocated {b}"));
            }
            None => st
                .violations
                .push(format!("{addr:#x} freed twice or never allocated")),
        }
        if let Some(&(s, t)) = st.last_use.get(&addr) {
            let done = st.streams.get(&s).is_none_or(|w| w.completed >= t);
            if !done {
                st.violations.push(format!(
                    "{addr:#x} freed while stream {s} work {t} was queued"
                ));
            }
        }
        Ok(())
    }

    fn stream_idle(&self, stream: &FakeStream) -> Result<bool, GpuError> {
        Ok(self
            .state
            .lock()
            .streams
            .get(&stream.0)
            .is_none_or(|w| w.completed >= w.submitted))
    }

    fn record_fence(&self, stream: &FakeStream) -> Result<FakeFence, GpuError> {
        let mut st = self.state.lock();
        st.fences += 1;
        let ticket = st.streams.entry(stream.0).or_default().submitted;
        Ok(FakeFence {
            stream: stream.0,
            ticket,
        })
    }

    fn fence_complete(&self, fence: &FakeFence) -> Result<bool, GpuError> {
        Ok(self
            .state
            .lock()
            .streams
            .get(&fence.stream)
            .is_none_or(|w| w.completed >= fence.ticket))
    }

    fn wait_fence(&self, fence: &FakeFence) -> Result<(), GpuError> {
        // Waiting lets the stream run up to the fence.
        let mut st = self.state.lock();
        let w = st.streams.entry(fence.stream).or_default();
        w.completed = w.completed.max(fence.ticket);
        Ok(())
    }
}
