//! Every recall op on the CPU: SIMD chosen at run time, rayon across cores.
//!
//! This crate is two things at once: the fallback that keeps recall answering when there is no GPU, and
//! the reference the GPU kernels are tested against. Every op follows the order in `docs/numerics.md`
//! exactly, so its results are bit-identical to the GPU's in exact mode.
//!
//! Architecture invariant: `recall-cpu-simd` never depends on any `recall-gpu-*` crate or on the driver.
//! Architecture invariant: inputs are validated here before any work; bad input is a [`CpuError`], never
//! a panic.

mod dense;
mod error;
pub mod reference;

pub use dense::{cosine_scores, row_norms};
pub use error::CpuError;

/// Check that every value is finite (no NaN, no infinity): the contract's first step for every op.
pub fn check_finite(what: &'static str, values: &[f32]) -> Result<(), CpuError> {
    match values.iter().position(|v| !v.is_finite()) {
        None => Ok(()),
        Some(index) => Err(CpuError::NonFinite { what, index }),
    }
}
