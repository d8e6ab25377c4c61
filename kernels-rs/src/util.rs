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

unsafe extern "C" {
    #[link_name = "llvm.nvvm.shfl.sync.bfly.f32"]
    fn shfl_sync_bfly_f32(mask: u32, value: f32, lane_mask: u32, clamp: u32) -> f32;
    #[link_name = "llvm.nvvm.shfl.sync.bfly.i32"]
    fn shfl_sync_bfly_i32(mask: u32, value: i32, lane_mask: u32, clamp: u32) -> i32;
}

/// The value of lane `lane ^ lane_mask` (`shfl.sync.bfly`, all 32 lanes). Every lane of the warp must call it.
#[inline(always)]
pub fn shfl_xor_f32(value: f32, lane_mask: u32) -> f32 {
    // SAFETY: a full-warp shuffle; callers reach it from warp-uniform control flow.
    unsafe { shfl_sync_bfly_f32(0xffff_ffff, value, lane_mask, 0x1f) }
}

/// [`shfl_xor_f32`] for a `u64`, as two 32-bit shuffles.
#[inline(always)]
pub fn shfl_xor_u64(value: u64, lane_mask: u32) -> u64 {
    // SAFETY: as above.
    let (lo, hi) = unsafe {
        (
            shfl_sync_bfly_i32(0xffff_ffff, value as u32 as i32, lane_mask, 0x1f),
            shfl_sync_bfly_i32(0xffff_ffff, (value >> 32) as u32 as i32, lane_mask, 0x1f),
        )
    };
    (u64::from(hi as u32) << 32) | u64::from(lo as u32)
}

/// The score's order-preserving key, smaller is better; `-0.0` and `+0.0` share a key: the same function as
/// `recall_cpu_simd::score_key` (the differential tests compare the two through every top-k).
#[inline(always)]
pub fn score_key(score: f32, higher_first: bool) -> u32 {
    if score.is_nan() {
        return u32::MAX;
    }
    let bits = (score + 0.0).to_bits();
    let ascending = if bits & 0x8000_0000 != 0 {
        !bits
    } else {
        bits | 0x8000_0000
    };
    if higher_first { !ascending } else { ascending }
}

#[inline(always)]
pub fn block_dim_x() -> u32 {
    // SAFETY: reads a special register; always defined inside a kernel.
    unsafe { core::arch::nvptx::_block_dim_x() as u32 }
}

#[inline(always)]
pub fn grid_dim_x() -> u32 {
    // SAFETY: reads a special register; always defined inside a kernel.
    unsafe { core::arch::nvptx::_grid_dim_x() as u32 }
}
