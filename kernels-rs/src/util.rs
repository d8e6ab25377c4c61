//! Small device helpers shared by the kernels: thread indices, shared memory, IEEE arithmetic.

use core::arch::nvptx;

#[inline(always)]
pub fn thread_x() -> u32 {
    // SAFETY: reads a special register; always defined inside a kernel.
    unsafe { nvptx::_thread_idx_x() as u32 }
}

#[inline(always)]
pub fn block_x() -> u32 {
    // SAFETY: reads a special register; always defined inside a kernel.
    unsafe { nvptx::_block_idx_x() as u32 }
}

#[inline(always)]
pub fn block_y() -> u32 {
    // SAFETY: reads a special register; always defined inside a kernel.
    unsafe { nvptx::_block_idx_y() as u32 }
}

/// Barrier for all threads of the block. Every thread of the block must reach it.
#[inline(always)]
pub fn sync_threads() {
    // SAFETY: callers call it from block-uniform control flow (documented at each call site).
    unsafe { nvptx::_syncthreads() }
}

/// Base of the block's dynamic shared memory, as `f32`s.
#[inline(always)]
pub fn dynamic_shared_f32() -> *mut f32 {
    core::intrinsics::gpu::gpu_launch_sized_workgroup_mem::<f32>()
}

pub use recall_kernel_shared::math::{fma, sqrt};
