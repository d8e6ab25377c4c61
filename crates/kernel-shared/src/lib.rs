//! Launch parameters shared by the device crate (`kernels-rs`, built for `nvptx64-nvidia-cuda`) and the
//! host launchers in `recall-gpu-kernels`.
//!
//! Architecture invariant: this crate is `no_std`, has no dependencies and holds only `#[repr(C)]` plain
//! data, so one definition serves both sides and a layout is written exactly once. Every kernel takes one
//! of these structs by value as its only parameter. Device pointers are carried as `u64`.
//!
//! Architecture invariant: the kernels trust these values. The host launchers validate every field (sizes,
//! bounds, alignment) before a launch; see `recall-gpu-kernels`.
#![no_std]
#![cfg_attr(target_arch = "nvptx64", feature(core_intrinsics))]
#![cfg_attr(target_arch = "nvptx64", allow(internal_features))]

#[cfg(not(target_arch = "nvptx64"))]
extern crate std;

/// Threads per block of the row-scan kernels (one thread per corpus row).
pub const ROW_BLOCK: u32 = 256;
/// Columns of a row staged through shared memory per step by the row-scan kernels.
pub const ROW_TILE_K: u32 = 32;
/// Queries handled by one block of `cosine_f32_rows` (one accumulator per query per thread).
pub const ROW_QUERIES_PER_BLOCK: u32 = 4;

/// `row_norms_f32`: `out[r] = sqrt(sum_k x[r][k] * x[r][k])`, the sum one FMA chain over `k` ascending.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RowNormsParams {
    /// `n_rows * dim` f32, row-major.
    pub x: u64,
    /// `n_rows` f32.
    pub out: u64,
    pub n_rows: u32,
    pub dim: u32,
}

/// `cosine_f32_rows`: `out[q][r] = dot(queries[q], corpus[r]) / (query_norms[q] * corpus_norms[r])`,
/// or `0.0` when either norm is zero. The dot product is one FMA chain over `k` ascending.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CosineParams {
    /// `n_queries * dim` f32, row-major.
    pub queries: u64,
    /// `n_queries` f32.
    pub query_norms: u64,
    /// `n_rows * dim` f32, row-major.
    pub corpus: u64,
    /// `n_rows` f32.
    pub corpus_norms: u64,
    /// `n_queries * n_rows` f32, row-major (query-major).
    pub out: u64,
    pub n_queries: u32,
    pub n_rows: u32,
    pub dim: u32,
    pub _pad: u32,
}

/// Scalar math that the device and the host must evaluate identically: written once, compiled into the
/// kernels and into `recall-cpu-simd`. See `docs/numerics.md`.
pub mod math {
    /// Fused multiply-add with one rounding: `fma.rn.f32` on the device, `f32::mul_add` on the host.
    #[inline(always)]
    pub fn fma(a: f32, b: f32, c: f32) -> f32 {
        #[cfg(target_arch = "nvptx64")]
        {
            core::intrinsics::fmaf32(a, b, c)
        }
        #[cfg(not(target_arch = "nvptx64"))]
        {
            a.mul_add(b, c)
        }
    }

    /// Correctly rounded IEEE square root: `sqrt.rn.f32` on the device, `f32::sqrt` on the host.
    #[inline(always)]
    pub fn sqrt(x: f32) -> f32 {
        #[cfg(target_arch = "nvptx64")]
        {
            core::intrinsics::sqrtf32(x)
        }
        #[cfg(not(target_arch = "nvptx64"))]
        {
            x.sqrt()
        }
    }

    /// The last step of cosine similarity: `dot / (nq * nc)`, or `0.0` when either norm is zero.
    #[inline(always)]
    pub fn cosine_from_parts(dot: f32, nq: f32, nc: f32) -> f32 {
        if nq == 0.0 || nc == 0.0 {
            0.0
        } else {
            dot / (nq * nc)
        }
    }
}
