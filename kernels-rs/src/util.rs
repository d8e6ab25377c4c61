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

/// Fused multiply-add with one rounding (`fma.rn.f32`), the numerics contract's FMA.
#[inline(always)]
pub fn fma(a: f32, b: f32, c: f32) -> f32 {
    core::intrinsics::fmaf32(a, b, c)
}

/// IEEE square root, correctly rounded (`sqrt.rn.f32`).
#[inline(always)]
pub fn sqrt(x: f32) -> f32 {
    core::intrinsics::sqrtf32(x)
}
