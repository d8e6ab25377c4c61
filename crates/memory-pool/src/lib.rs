//! Every byte recall puts on or near the GPU: device, pinned-host and managed buffers, a caching pool with
//! size classes and stream-ordered reuse, a VRAM budget with per-tenant quotas, and pinned staging.
//!
//! Layers, bottom up:
//! - [`Allocator`]: raw blocks plus streams and fences. [`CudaDevice`] and [`CudaPinned`] implement it on
//!   `recall-gpu-sys`; [`fake::FakeAllocator`] implements it for tests without a GPU.
//! - [`CachingPool`]: size classes ([`size_class`]), stream-ordered reuse ([`ReusePolicy`]), trimming,
//!   a budget checked before the allocator is asked ([`PoolError::OutOfMemory`]), a driver OOM turned
//!   into the same error after a trim and one retry, tenant quotas ([`TenantId`]) and [`PoolStats`].
//!   Small blocks freed by a thread are parked in that thread's cache and taken back by it without a
//!   lock or an atomic read-modify-write (the hit path; see [`THREAD_CACHE_MAX_CLASS`] and
//!   [`CachingPool::flush_thread_cache`]).
//! - [`GpuMemory`]: one engine's pools on one device ([`MemoryConfig`]: budget 80 % of VRAM by default,
//!   `RECALL_FORCE_PINNED=1` forces the pinned fallback).
//! - Typed RAII buffers: [`DeviceBuffer`] (and [`DeviceSlice`], one that reads as a cudarc slice),
//!   [`PinnedBuffer`], [`ManagedBuffer`], [`UnifiedBuffer`] (managed, or pinned plus explicit copies), and
//!   [`StagingRing`] (double-buffered pinned upload and download; with [`StagingRing::upload_with`] /
//!   [`StagingRing::download_with`] the host copy into or out of each slot is the caller's closure, e.g. a
//!   parallel one).
//!
//! Architecture invariant: memory-pool never calls the CUDA driver or cudarc itself; every driver call
//! is a function of `recall_gpu_sys::memory` (or `Gpu`). It names cudarc types only through
//! `recall_gpu_sys::driver`.
//!
//! Architecture invariant: memory-pool never launches kernels and knows nothing of ops, tenants' queues
//! or dispatch; the executor decides what to allocate, this crate only makes it fit.
//!
//! Architecture invariant: the pool logic ([`CachingPool`]) depends only on the [`Allocator`] trait, so
//! everything about accounting, reuse and budgets is tested without a GPU.
//!
//! Architecture invariant: a block has at most one owner. The pool hands a cached block to a stream
//! other than the one that freed it (or to anyone, for host-visible memory) only after a fence recorded
//! on the freeing stream after the free has completed, and gives memory back to the driver only then.

mod allocator;
mod buffers;
mod cuda;
mod error;
pub mod fake;
mod pool;
mod staging;
mod thread_cache;

pub use allocator::{Allocator, StreamKey};
pub use buffers::{
    DeviceBuffer, DeviceCopy, DeviceSlice, ManagedBuffer, PinnedBuffer, SliceMut, SliceRef,
    UnifiedBuffer,
};
pub use cuda::{
    Budget, CudaDevice, CudaPinned, FORCE_PINNED_ENV, FallbackReason, GpuMemory, MemoryConfig,
    Stream, UnifiedMode, force_pinned_from_env,
};
pub use error::{OomScope, PoolError};
pub use pool::{
    Block, CachingPool, LARGE_GRANULE_BYTES, MIN_BLOCK_BYTES, PoolConfig, PoolStats, Reservation,
    ReusePolicy, SMALL_LIMIT_BYTES, TenantId, TenantStats, size_class,
};
pub use staging::StagingRing;
pub use thread_cache::{THREAD_CACHE_MAX_BLOCKS, THREAD_CACHE_MAX_BYTES, THREAD_CACHE_MAX_CLASS};

/// Advice and locations for managed memory (from `recall-gpu-sys`).
pub use recall_gpu_sys::memory::{Advice, Location};
