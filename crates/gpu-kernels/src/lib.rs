//! recall's compiled GPU kernels: the embedded bundle, the loader that picks the image for the device in
//! hand, and one typed, shape-checked launcher per kernel.
//!
//! The bundle (`bundle/`, written by `cargo xtask build-kernels` and committed) holds a cubin and the PTX
//! of every supported arch, sm_50 to sm_90, and an sm_90a image of the `wgmma` kernels. The loader uses the cubin that matches the device's SM exactly,
//! otherwise the newest PTX not newer than the device, which the driver JIT-compiles. It can be forced to
//! one arch's code (`diff-test --arch`), and it reports which image it loaded.
//!
//! Architecture invariant: every launch goes through a launcher here that checks shapes, lengths and
//! limits and returns [`KernelError`]; kernels trust their parameters. Nothing here decides *where* an op
//! runs: that is `recall-hybrid-executor`.

mod bundle;
mod cand;
mod env;
mod host;
mod knn1;
mod launch;
mod scan1;
mod serve;
mod sgemm;
mod spread;
mod tc_knn;
mod wgmma;

pub use bundle::{ARCHES, BundleImage, ImageKind, MANIFEST, Selection, image, select_image};
pub use cand::{CAND_MAX_DIM, CandidateBatch};
pub use host::on_host_pool;
pub use knn1::{KNN1_MAX_DIM, KNN1_MAX_ROWS, OneQuery, one_query_readback_mapped};
pub use launch::{
    CLIP_NOISE_TWO_PASS, DeviceGraph, FILTER_MIN_LEN, GemmTail, GraphUpload, HalfKind, HalfSource,
    INERTIA_BLOCK, KMeansScratch, KernelError, Kernels, LoadedImage, PREFETCH_MAX_ROWS,
    PageableUpload, PendingTopK, SCAN_MAX_QUERIES, Segments, SimMetric, TC_MIN_SM, TopKResult,
    WARP_MAX_ROWS, group_by_cluster, half_ld, offsets_u64,
};
/// The largest `k` that `Kernels::select_topk` selects in one pass over dense segments (radix select above).
pub use recall_kernel_shared::{GEMM_TILE, SMALL_K_MAX};
pub use scan1::{SCAN1_MAX_DIM, Scan1Mode};
pub use serve::{
    KNN1_SERVE_MAX_ROWS, SERVE_IDLE_DEFAULT_US, SERVE_LIFE, SERVE_MAX_FAILURES, ServeStats,
};
pub use sgemm::{GemmKernel, SGEMM_MAX_DIM, query_chunk};
pub use spread::{Frontier, Seeds, SpreadOutcome};
pub use wgmma::wgmma_enabled;
