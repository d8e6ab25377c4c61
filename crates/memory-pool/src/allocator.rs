//! The interface the caching pool is generic over: raw blocks, streams, and fences.

use recall_gpu_sys::GpuError;
use std::fmt;

/// Identity of a stream, stable while the stream lives (for CUDA: the `CUstream` handle value).
pub type StreamKey = u64;

/// A source of raw memory blocks plus the stream and fence notions that stream-ordered reuse needs.
///
/// The real implementations are [`crate::CudaDevice`] and [`crate::CudaPinned`]; [`crate::fake`] has one
/// for tests without a GPU. The pool owns every block it gets from `allocate` until it gives it back with
/// `deallocate`, and it only does so once no queued work can touch the block.
pub trait Allocator: Send + Sync + 'static {
    /// A queue of work (a CUDA stream). The pool keeps a clone in every cached block, so the stream
    /// outlives the blocks freed on it.
    type Stream: Clone + Send + Sync + fmt::Debug + 'static;
    /// A marker recorded on a stream that completes when all work queued before it has (a CUDA event).
    type Fence: Send + Sync + fmt::Debug + 'static;

    /// The identity of `stream`, equal for two handles of the same stream.
    fn stream_key(&self, stream: &Self::Stream) -> StreamKey;

    /// `bytes` (non-zero) of fresh memory; its address.
    fn allocate(&self, bytes: usize) -> Result<u64, GpuError>;

    /// Give `bytes` at `addr` back.
    ///
    /// # Safety
    /// `addr` came from [`Allocator::allocate`] with the same `bytes`, is given back once, and no queued
    /// or running work uses it.
    unsafe fn deallocate(&self, addr: u64, bytes: usize) -> Result<(), GpuError>;

    /// Has all work queued on `stream` so far completed? Never waits. (Lets the pool skip a fence.)
    fn stream_idle(&self, stream: &Self::Stream) -> Result<bool, GpuError>;

    /// A fence that completes when all work queued on `stream` so far has completed.
    fn record_fence(&self, stream: &Self::Stream) -> Result<Self::Fence, GpuError>;

    /// Has `fence` completed? Never waits.
    fn fence_complete(&self, fence: &Self::Fence) -> Result<bool, GpuError>;

    /// Wait on the host until `fence` has completed.
    fn wait_fence(&self, fence: &Self::Fence) -> Result<(), GpuError>;
}

/// A shared allocator (lets a test keep a handle on the allocator while the pool owns one too).
impl<A: Allocator> Allocator for std::sync::Arc<A> {
    type Stream = A::Stream;
    type Fence = A::Fence;

    fn stream_key(&self, stream: &Self::Stream) -> StreamKey {
        (**self).stream_key(stream)
    }

    fn allocate(&self, bytes: usize) -> Result<u64, GpuError> {
        (**self).allocate(bytes)
    }

    unsafe fn deallocate(&self, addr: u64, bytes: usize) -> Result<(), GpuError> {
        // SAFETY: forwarded to the caller (the trait's `# Safety`).
        unsafe { (**self).deallocate(addr, bytes) }
    }

    fn stream_idle(&self, stream: &Self::Stream) -> Result<bool, GpuError> {
        (**self).stream_idle(stream)
    }

    fn record_fence(&self, stream: &Self::Stream) -> Result<Self::Fence, GpuError> {
        (**self).record_fence(stream)
    }

    fn fence_complete(&self, fence: &Self::Fence) -> Result<bool, GpuError> {
        (**self).fence_complete(fence)
    }

    fn wait_fence(&self, fence: &Self::Fence) -> Result<(), GpuError> {
        (**self).wait_fence(fence)
    }
}
