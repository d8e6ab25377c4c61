//! recall: the compute hot paths of AI memory and retrieval engines, on an NVIDIA GPU when one is present
//! and worth it, on CPU SIMD otherwise, with the same answers either way (bit for bit in exact mode).
//!
//! ```
//! let engine = recall::Engine::new()?;
//! let dim = 4;
//! let corpus = [1.0, 0.0, 0.0, 0.0, /* row 1 */ 0.0, 1.0, 0.0, 0.0];
//! let query = [1.0, 1.0, 0.0, 0.0];
//! let scores = engine.cosine_similarity(&query, &corpus, dim)?;
//! assert_eq!(scores.n_rows, 2);
//! assert!((scores.values[0] - std::f32::consts::FRAC_1_SQRT_2).abs() < 1e-6);
//! println!("ran on {}", scores.device);
//! # Ok::<(), recall::Error>(())
//! ```
//!
//! Which device runs a call is decided per call ([`Engine::explain`] says why) and can be forced with
//! `RECALL_DEVICE=cpu|gpu|auto` or [`EngineBuilder::device`]. A GPU failure never reaches the caller:
//! the call is answered on the CPU and [`Scores::fallback`] says what happened.
//!
//! Architecture invariant: this crate re-exports and composes; it does not reimplement. Ops live in
//! `recall-cpu-simd` (CPU), `kernels-rs` (GPU) and `recall-gpu-kernels` (launchers); dispatch lives in
//! `recall-hybrid-executor`.

mod engine;
mod error;
pub mod io;

pub use engine::{Activation, Clusters, Engine, EngineBuilder, Neighbors, Noised, Scores};
pub use error::Error;
pub use recall_cpu_simd::{Metric, SpreadGraph, SpreadParams, TopK};
pub use recall_hybrid_executor::{
    Device, DevicePolicy, GPU_COMPILED_IN, GpuDescription, GpuStatus, SharedCorpus as Corpus,
    SharedGraph as Graph,
};

/// The CPU SIMD path in use: `avx512`, `avx2`, `neon` or `scalar` (`RECALL_CPU_SIMD` can lower it).
pub fn cpu_simd_level() -> String {
    recall_cpu_simd::simd_level().name().to_string()
}

/// Self-tests a user can run on their own machine.
pub mod diagnostics {
    pub use recall_hybrid_executor::GpuBackend;
    pub use recall_hybrid_executor::bench;
    pub use recall_hybrid_executor::bundle_arches;
    pub use recall_hybrid_executor::difftest::{
        ArchReport, DiffReport, KernelDiff, SplitMix, awkward_matrix, power_law_graph,
    };

    /// Compare every GPU kernel with the CPU, bit for bit, for the given arches' code (all the device can
    /// run when `None`). `Err` when there is no usable GPU.
    pub fn diff_test(
        engine: &crate::Engine,
        arches: Option<&[u32]>,
        quick: bool,
    ) -> Result<DiffReport, crate::Error> {
        engine.diff_test(arches, quick)
    }
}
