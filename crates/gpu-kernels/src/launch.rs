//! Loading the bundle into a context and the typed launchers.

use crate::bundle::{ImageKind, image, select_image};
use crate::sgemm::{GemmKernel, SGEMM_SMEM_BYTES};
use recall_gpu_sys::driver::{
    CudaEvent, CudaFunction, CudaModule, CudaSlice, LaunchConfig, PinnedHostSlice,
};
use recall_gpu_sys::memory::{event_synchronize, new_fence, record_event};
use recall_gpu_sys::{Gpu, GpuError};
use recall_kernel_shared::{
    CentroidParams, FillParams, GEMM_THREADS, GEMM_TILE, GEMM_TILE_K, H_PIPE_BYTES, HalfRowsParams,
    InertiaParams, METRIC_COSINE, METRIC_DOT, METRIC_L2, NOISE_RADII, NOISE_ROWS_MAX,
    NOISE_THREADS, NoiseParams, ROW_BLOCK, ROW_QUERIES_PER_BLOCK, ROW_TILE_K, RadiiParams,
    RowNormsParams, SELECT_BINS, SELECT_BLOCK, SELECT_ITEMS, SELECT_PASSES, SMALL_K_16,
    SMALL_K_MAX, SelectParams, SelectState, SimParams, TC_LD_ALIGN, TC_PIPE_BYTES, TC_THREADS,
    TC_TILE_Q, TC_TILE_R, TcGemmParams, TopkFilterParams, TopkSmallParams, WARP_ROW_DIM_MAX,
    noise_rows_shared_bytes,
};
use std::fmt;
use std::sync::Arc;
use thiserror::Error;

/// Why a launch was refused or failed.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum KernelError {
    /// The arguments do not describe a launch the kernel supports. Raised before anything is queued.
    #[error("invalid launch of {kernel}: {reason}")]
    Shape {
        kernel: &'static str,
        reason: String,
    },
    /// The device's answer failed a check after the launch (an id or a count no correct run gives): a fault of
    /// the device, never of the caller's input.
    #[error("invalid answer from {kernel}: {reason}")]
    Answer {
        kernel: &'static str,
        reason: String,
    },
    /// No image of the bundle loads on this device (or the forced arch cannot run here).
    #[error("no kernel image for this device: {0}")]
    NoImage(String),
    #[error(transparent)]
    Gpu(#[from] GpuError),
}

impl KernelError {
    /// The driver error inside, if the failure came from the device.
    pub fn gpu_error(&self) -> Option<&GpuError> {
        match self {
            KernelError::Gpu(e) => Some(e),
            _ => None,
        }
    }
}

/// Which bundle image a [`Kernels`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadedImage {
    pub sm: u32,
    pub kind: ImageKind,
}

impl fmt::Display for LoadedImage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            ImageKind::Cubin => write!(f, "sm_{} cubin", self.sm),
            ImageKind::Ptx => write!(f, "compute_{} PTX (driver JIT)", self.sm),
        }
    }
}

/// The bundle loaded into one device's context, with a handle per kernel.
#[derive(Debug)]
pub struct Kernels {
    image: LoadedImage,
    _module: Arc<CudaModule>,
    row_norms_f32: CudaFunction,
    /// The row-norm kernel with register prefetch, for launches of few blocks.
    row_norms_f32_pf: CudaFunction,
    /// `[dot, cosine, l2]` for each family.
    scan: [CudaFunction; 3],
    /// The row scan with register prefetch, for launches of few blocks.
    scan_pf: [CudaFunction; 3],
    /// Warp-per-row kernels for one query against few rows (latency-bound launches).
    scan_warp: [CudaFunction; 3],
    row_norms_warp: CudaFunction,
    gather: [CudaFunction; 3],
    gemm: [CudaFunction; 3],
    select_init: CudaFunction,
    select_histogram: CudaFunction,
    select_choose: CudaFunction,
    select_collect: CudaFunction,
    pub(crate) spread_hop: CudaFunction,
    pub(crate) spread_hub: CudaFunction,
    /// The sparse-frontier kernels of spreading (`spread.rs`).
    pub(crate) spread_seed: CudaFunction,
    pub(crate) spread_frontier: CudaFunction,
    pub(crate) spread_mark: CudaFunction,
    pub(crate) spread_collect: CudaFunction,
    gemm_l2_argmin: CudaFunction,
    fill_u64: CudaFunction,
    kmeans_inertia_blocks: CudaFunction,
    kmeans_update: CudaFunction,
    clip_noise: CudaFunction,
    noise_radii: CudaFunction,
    /// The one-pass clip-and-noise kernel (norms and noise in one pass), the dynamic shared memory it was
    /// opted into and its name: `sm90a_clip_noise_rows` where the sm_90a image loaded (bulk copies), else
    /// `sm80_clip_noise_rows` (sm_80 and newer images).
    clip_noise_rows: Option<(CudaFunction, u32, &'static str)>,
    /// Whether `clip_noise` runs `sm80_clip_noise_rows` where it can ([`Kernels::set_clip_noise_fused`]).
    clip_noise_fused: std::sync::atomic::AtomicBool,
    widen_half_rows: CudaFunction,
    /// Fast mode (tensor cores), only in images for sm_80 and newer.
    tc: Option<TcKernels>,
    /// `[16 slots, 32 slots]`: one-pass selection for small k.
    topk_small: [CudaFunction; 2],
    topk_group_min: CudaFunction,
    topk_filter: CudaFunction,
    /// Scratch of `select_topk`, grown on demand and reused (no allocation or memset per call).
    select_scratch: parking_lot::Mutex<Option<SelectScratch>>,
    /// One query against few rows in one launch (`knn1.rs`), only in images for sm_80 and newer.
    pub(crate) knn1: Option<crate::knn1::Knn1Kernels>,
    pub(crate) knn1_scratch: parking_lot::Mutex<Option<crate::knn1::OneQueryScratch>>,
    /// The one-query server (`serve.rs`), only in images for sm_80 and newer.
    pub(crate) knn1_serve: Option<crate::serve::ServeKernels>,
    /// One query against many rows in one persistent launch (`scan1.rs`), only in images for sm_80 and newer.
    pub(crate) scan1: Option<crate::scan1::Scan1Kernels>,
    pub(crate) scan1_scratch: parking_lot::Mutex<Option<crate::knn1::OneQueryScratch>>,
    /// Candidate scoring in one launch (`cand.rs`), only in images for sm_80 and newer.
    pub(crate) cand: Option<crate::cand::CandKernels>,
    pub(crate) cand_staging: parking_lot::Mutex<crate::cand::CandStaging>,
    /// The exact GEMM of sm_80 and newer (`sgemm.rs`); `None` below sm_80 or without its shared memory.
    pub(crate) sgemm: Option<crate::sgemm::Sm80Gemm>,
    /// Fast-mode knn with top-k fused (`tc_knn.rs`), only in images for sm_80 and newer.
    pub(crate) tc_knn: Option<crate::tc_knn::TcKnnKernels>,
    pub(crate) tc_knn_scratch: parking_lot::Mutex<Option<crate::tc_knn::TcKnnScratch>>,
    /// Fast mode on `wgmma` (`wgmma.rs`), in place of `tc_*` where loaded: sm_90 image on a 9.0 device.
    pub(crate) hopper: Option<crate::wgmma::HopperKernels>,
}

/// The tensor-core kernels of fast mode.
#[derive(Debug)]
struct TcKernels {
    to_half_rows: CudaFunction,
    /// `[f16, bf16]` x `[dot, cosine, l2]`.
    gemm: [[CudaFunction; 3]; 2],
}

impl TcKernels {
    /// Look the kernels up and opt the GEMM into its ring's shared memory; `None` when the device has less
    /// per block (fast mode then runs exact).
    fn load(
        gpu: &Gpu,
        f: impl Fn(&str) -> Result<CudaFunction, GpuError>,
    ) -> Result<Option<TcKernels>, GpuError> {
        let gemm = [
            [
                f("tc_gemm_f16_dot")?,
                f("tc_gemm_f16_cosine")?,
                f("tc_gemm_f16_l2")?,
            ],
            [
                f("tc_gemm_bf16_dot")?,
                f("tc_gemm_bf16_cosine")?,
                f("tc_gemm_bf16_l2")?,
            ],
        ];
        if !gemm
            .iter()
            .flatten()
            .all(|func| gpu.allow_dynamic_shared(func, TC_PIPE_BYTES).is_ok())
        {
            tracing::debug!("tc_gemm: not enough shared memory per block; fast mode runs exact");
            return Ok(None);
        }
        Ok(Some(TcKernels {
            to_half_rows: f("tc_to_half_rows")?,
            gemm,
        }))
    }
}

/// The oldest SM whose images hold the tensor-core kernels (`tc_*`).
pub const TC_MIN_SM: u32 = 80;

/// A 16-bit floating-point format of fast mode and of 16-bit corpora.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HalfKind {
    /// IEEE binary16: 11 significant bits, range up to 65504.
    F16,
    /// bfloat16: 8 significant bits, the range of f32.
    Bf16,
}

impl HalfKind {
    fn index(self) -> usize {
        match self {
            HalfKind::F16 => 0,
            HalfKind::Bf16 => 1,
        }
    }
}

/// Where [`Kernels::to_half_rows`] reads from.
#[derive(Debug, Clone, Copy)]
pub enum HalfSource<'a> {
    /// f32 rows, rounded to the target format (nearest even).
    F32(&'a CudaSlice<f32>),
    /// Rows already in the target format (copied, padded).
    Half(&'a CudaSlice<u16>),
}

/// The row stride, in 16-bit values, of fast mode's padded operands for rows of `dim` values.
pub fn half_ld(dim: usize) -> usize {
    dim.div_ceil(TC_LD_ALIGN as usize) * TC_LD_ALIGN as usize
}

/// Device scratch of the radix select: per-segment state and histograms, and the output region (keys, then
/// scores) that comes back in one download.
#[derive(Debug)]
struct SelectScratch {
    segments: usize,
    outputs: usize,
    state: CudaSlice<u8>,
    hist: CudaSlice<u32>,
    out: CudaSlice<u64>,
    /// Page-locked copy of `out` for the host (when `out` has at most `PINNED_OUT_WORDS` words; larger
    /// outputs come back into pageable memory after the fence), and the fence after the selection (and
    /// after its download into `out_host`).
    out_host: Option<PinnedHostSlice<u64>>,
    out_fence: CudaEvent,
    /// The small-k levels' keys, two halves used in turn (`small_len` u64 each).
    small: Option<CudaSlice<u64>>,
    small_len: usize,
    /// The threshold filter's group minima, thresholds, candidates and counters.
    filter: Option<CudaSlice<u64>>,
}

/// Where [`Kernels::similarity`] runs the queries past a call's last full 128-query GEMM tile
/// ([`Kernels::gemm_tail`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GemmTail {
    /// The row scan (`scan_*`), for up to 8 of them after full tiles.
    Scan,
    /// A narrow tile of the sm_80 GEMM with this many queries (`sm80_gemm_q32_*`, `sm80_gemm_q64_*`).
    Narrow(usize),
    /// The widest narrow tile, full with this many queries, then the row scan for the rest (up to 8).
    NarrowThenScan(usize),
}

/// [`GemmTail`] resolved: the scan, the narrow tile itself, or the widest narrow tile full and the scan after it.
enum Tail<'a> {
    Scan,
    Narrow(&'a crate::sgemm::NarrowTile),
    NarrowThenScan(&'a crate::sgemm::NarrowTile),
}

/// Where a many-query similarity call's last queries go ([`Kernels::gemm_tail`]) given the sm_80 GEMM as read for
/// the call (`None`: `gemm_*` runs), and how many they are.
fn resolve_tail(
    sg: Option<&crate::sgemm::Sm80Gemm>,
    n_queries: usize,
    dim: usize,
) -> Option<(Tail<'_>, usize)> {
    let tile = GEMM_TILE as usize;
    if n_queries <= SCAN_MAX_QUERIES {
        return None;
    }
    let tail = if n_queries > tile {
        n_queries % tile
    } else {
        n_queries
    };
    if tail == 0 {
        None
    } else if n_queries > tile && tail <= SCAN_MAX_QUERIES {
        Some((Tail::Scan, tail))
    } else if let Some(t) = sg?.narrow_for(tail, dim) {
        Some((Tail::Narrow(t), tail))
    } else {
        // At most 8 past the widest narrow tile: that tile full and the scan cost less than a 128-query tile row.
        let widest = sg?.narrow.last()?;
        (widest.queries < tail
            && tail <= widest.queries + SCAN_MAX_QUERIES
            && widest.takes(widest.queries, dim))
        .then_some((Tail::NarrowThenScan(widest), tail))
    }
}

/// One kind of launch of the dense similarity kernels: the kernel, the queries and corpus rows of one block,
/// its threads and its dynamic shared memory.
#[derive(Clone, Copy)]
struct DenseLaunch<'a> {
    func: &'a CudaFunction,
    queries: usize,
    rows: usize,
    threads: u32,
    shared_bytes: u32,
}

impl DenseLaunch<'_> {
    /// A narrow tile of the sm_80 GEMM for metric index `m`.
    fn narrow(t: &crate::sgemm::NarrowTile, m: usize) -> DenseLaunch<'_> {
        DenseLaunch {
            func: &t.sim[m],
            queries: t.queries,
            rows: t.rows,
            threads: GEMM_THREADS,
            shared_bytes: t.shared_bytes,
        }
    }
}

/// A similarity metric as the kernels implement it (`docs/numerics.md`, "Scores by metric").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SimMetric {
    Dot,
    Cosine,
    L2,
}

impl SimMetric {
    pub(crate) fn index(self) -> usize {
        match self {
            SimMetric::Dot => METRIC_DOT as usize,
            SimMetric::Cosine => METRIC_COSINE as usize,
            SimMetric::L2 => METRIC_L2 as usize,
        }
    }

    /// Whether higher scores rank first (cosine, dot) or lower (l2).
    pub fn higher_first(self) -> bool {
        self != SimMetric::L2
    }
}

/// The scores a top-k selection runs over: equal-length segments (one per query, dense search) or the
/// per-query candidate lists of candidate scoring.
#[derive(Debug, Clone, Copy)]
pub enum Segments<'a> {
    /// `n_segments` segments of `seg_len` scores each; ids are positions within a segment.
    Dense { n_segments: usize, seg_len: usize },
    /// Segment `s` is `offsets[s] .. offsets[s + 1]`; `offsets` on the host (validated here) and on the
    /// device (the same values).
    Ragged {
        offsets: &'a [u64],
        offsets_dev: &'a CudaSlice<u64>,
    },
}

/// The k best (score, id) pairs per segment, best first, as the CPU's `TopK` lays them out.
#[derive(Debug, Clone, PartialEq)]
pub struct TopKResult {
    pub k: usize,
    pub ids: Vec<u32>,
    pub scores: Vec<f32>,
}

/// [`KernelError::Answer`]: the device's answer failed a check after the launch.
pub(crate) fn bad_answer(kernel: &'static str, reason: impl Into<String>) -> KernelError {
    KernelError::Answer {
        kernel,
        reason: reason.into(),
    }
}

pub(crate) fn shape(kernel: &'static str, reason: impl Into<String>) -> KernelError {
    KernelError::Shape {
        kernel,
        reason: reason.into(),
    }
}

pub(crate) fn to_u32(kernel: &'static str, what: &str, v: usize) -> Result<u32, KernelError> {
    u32::try_from(v).map_err(|_| shape(kernel, format!("{what} = {v} exceeds u32")))
}

fn need_len<T>(
    kernel: &'static str,
    what: &str,
    buf: &CudaSlice<T>,
    needed: usize,
) -> Result<(), KernelError> {
    if buf.len() < needed {
        return Err(shape(
            kernel,
            format!("{what} holds {} elements, needs {needed}", buf.len()),
        ));
    }
    Ok(())
}

pub(crate) fn elems(kernel: &'static str, a: usize, b: usize) -> Result<usize, KernelError> {
    a.checked_mul(b)
        .ok_or_else(|| shape(kernel, format!("{a} x {b} elements overflow")))
}

/// The checks of the fast-mode (tensor-core) launchers' operands: at least one query and one row, `ld` a positive
/// multiple of [`TC_LD_ALIGN`], `n * ld` 16-bit values each, and for cosine and l2 the f32 norms of both sides.
/// Returns the norms' device addresses (0 for dot).
pub(crate) fn fast_operands(
    kernel: &'static str,
    gpu: &Gpu,
    metric: SimMetric,
    (queries, query_norms, n_queries): (&CudaSlice<u16>, Option<&CudaSlice<f32>>, usize),
    (corpus, corpus_norms, n_rows): (&CudaSlice<u16>, Option<&CudaSlice<f32>>, usize),
    ld: usize,
) -> Result<(u64, u64), KernelError> {
    if n_queries == 0 || n_rows == 0 || ld == 0 || !ld.is_multiple_of(TC_LD_ALIGN as usize) {
        return Err(shape(
            kernel,
            "n_queries and n_rows must be at least 1 and ld a positive multiple of 32",
        ));
    }
    need_len(kernel, "queries", queries, elems(kernel, n_queries, ld)?)?;
    need_len(kernel, "corpus", corpus, elems(kernel, n_rows, ld)?)?;
    match (metric, query_norms, corpus_norms) {
        (SimMetric::Dot, _, _) => Ok((0, 0)),
        (_, Some(qn), Some(cn)) => {
            need_len(kernel, "query_norms", qn, n_queries)?;
            need_len(kernel, "corpus_norms", cn, n_rows)?;
            Ok((gpu.device_ptr(qn), gpu.device_ptr(cn)))
        }
        _ => Err(shape(kernel, "cosine and l2 need query and corpus norms")),
    }
}

/// Shared memory of the row-scan kernels: the 256 x 33 row tile plus the 4 x 32 query tile.
const ROW_TILE_BYTES: u32 = ROW_BLOCK * (ROW_TILE_K + 1) * 4;
const QUERY_TILE_BYTES: u32 = ROW_QUERIES_PER_BLOCK * ROW_TILE_K * 4;
/// Shared memory of the GEMM kernels: two buffers of two 8 x 132 tiles.
const GEMM_SMEM_BYTES: u32 = 2 * 2 * GEMM_TILE_K * (GEMM_TILE + 4) * 4;
/// A grid-stride launch over `total` elements: 256 threads per block, at most 65,536 blocks.
fn grid_stride(total: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (total.div_ceil(256).min(65_536) as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Up to this many rows, one query (or a few rows of norms) runs the warp-per-row kernels: a launch this
/// small is bound by latency, and staging a whole row with one warp pays one round of it instead of one per
/// column tile.
pub const WARP_MAX_ROWS: usize = 16_384;
/// Shared memory of the warp-per-row kernels: the query and 8 rows of `WARP_ROW_DIM_MAX` values.
const WARP_SMEM_BYTES: u32 = 9 * WARP_ROW_DIM_MAX * 4;
/// Up to this many rows the row kernels (norms, scan) run their register-prefetch variant: a launch of at
/// most 512 blocks cannot hide a tile's load latency by occupancy, so each thread hides it itself. Above it,
/// the variant without prefetch (fewer registers, more blocks per SM) was measured faster.
pub const PREFETCH_MAX_ROWS: usize = 131_072;
/// Up to this many queries the row scan (memory-bound) beats the GEMM kernel.
pub const SCAN_MAX_QUERIES: usize = 8;
/// CUDA's limit on `gridDim.x`.
const MAX_GRID_X: usize = (1 << 31) - 1;
/// CUDA's limit on `gridDim.y`.
const MAX_GRID_Y: usize = 65_535;

impl Kernels {
    /// Load the bundle into `gpu`'s context: the image [`select_image`] picks, trying candidates in order.
    pub fn load(gpu: &Gpu, force_sm: Option<u32>) -> Result<Kernels, KernelError> {
        let (major, minor) = gpu.info().compute_capability;
        let selection = select_image(major, minor, force_sm).map_err(KernelError::NoImage)?;
        let mut last_err = None;
        for (sm, kind) in selection.candidates {
            let Some(img) = image(sm, kind) else { continue };
            match img.load(gpu) {
                Ok(module) => {
                    let f = |name: &str| gpu.function(&module, name);
                    let knn1 = if sm >= TC_MIN_SM {
                        crate::knn1::Knn1Kernels::load(gpu, f)?
                    } else {
                        None
                    };
                    let knn1_serve = match &knn1 {
                        Some(kn) => crate::serve::ServeKernels::load(gpu, f, kn.max_warps())?,
                        None => None,
                    };
                    let hopper = if sm >= TC_MIN_SM {
                        crate::wgmma::HopperKernels::load(gpu, sm)?
                    } else {
                        None
                    };
                    // The one-pass clip-and-noise: the sm_90a image's where it loaded, else the sm_80 one.
                    let clip_noise_rows =
                        match hopper.as_ref().and_then(|h| h.clip_noise_rows.clone()) {
                            Some((func, bytes)) => Some((func, bytes, "sm90a_clip_noise_rows")),
                            None if sm >= TC_MIN_SM => {
                                let func = f("sm80_clip_noise_rows")?;
                                let bytes = noise_rows_opt_in(gpu, &func);
                                Some((func, bytes, "sm80_clip_noise_rows"))
                            }
                            None => None,
                        };
                    let kernels = Kernels {
                        image: LoadedImage { sm, kind },
                        row_norms_f32: f("row_norms_f32")?,
                        row_norms_f32_pf: f("row_norms_f32_pf")?,
                        scan: [f("scan_dot")?, f("scan_cosine")?, f("scan_l2")?],
                        scan_pf: [f("scan_pf_dot")?, f("scan_pf_cosine")?, f("scan_pf_l2")?],
                        scan_warp: [
                            f("scan_warp_dot")?,
                            f("scan_warp_cosine")?,
                            f("scan_warp_l2")?,
                        ],
                        row_norms_warp: f("row_norms_warp")?,
                        gather: [f("gather_dot")?, f("gather_cosine")?, f("gather_l2")?],
                        gemm: [f("gemm_dot")?, f("gemm_cosine")?, f("gemm_l2")?],
                        select_init: f("select_init")?,
                        select_histogram: f("select_histogram")?,
                        select_choose: f("select_choose")?,
                        select_collect: f("select_collect")?,
                        spread_hop: f("spread_hop")?,
                        spread_hub: f("spread_hub")?,
                        spread_seed: f("spread_seed")?,
                        spread_frontier: f("spread_frontier")?,
                        spread_mark: f("spread_mark")?,
                        spread_collect: f("spread_collect")?,
                        gemm_l2_argmin: f("gemm_l2_argmin")?,
                        fill_u64: f("fill_u64")?,
                        kmeans_inertia_blocks: f("kmeans_inertia_blocks")?,
                        kmeans_update: f("kmeans_update")?,
                        clip_noise: f("clip_noise")?,
                        noise_radii: f("noise_radii")?,
                        clip_noise_rows,
                        clip_noise_fused: std::sync::atomic::AtomicBool::new(true),
                        topk_small: [f("topk_small_16")?, f("topk_small_32")?],
                        topk_group_min: f("topk_group_min")?,
                        topk_filter: f("topk_filter")?,
                        widen_half_rows: f("widen_half_rows")?,
                        tc: if sm >= TC_MIN_SM {
                            TcKernels::load(gpu, f)?
                        } else {
                            None
                        },
                        tc_knn: if sm >= TC_MIN_SM {
                            crate::tc_knn::TcKnnKernels::load(gpu, f)?
                        } else {
                            None
                        },
                        tc_knn_scratch: parking_lot::Mutex::new(None),
                        select_scratch: parking_lot::Mutex::new(None),
                        knn1,
                        knn1_scratch: parking_lot::Mutex::new(None),
                        knn1_serve,
                        scan1: if sm >= TC_MIN_SM {
                            crate::scan1::Scan1Kernels::load(gpu, f)?
                        } else {
                            None
                        },
                        scan1_scratch: parking_lot::Mutex::new(None),
                        cand: if sm >= TC_MIN_SM {
                            crate::cand::CandKernels::load(gpu, f)?
                        } else {
                            None
                        },
                        cand_staging: parking_lot::Mutex::new(Default::default()),
                        sgemm: if sm >= TC_MIN_SM {
                            crate::sgemm::Sm80Gemm::load(gpu, f)?
                        } else {
                            None
                        },
                        hopper,
                        _module: module,
                    };
                    return Ok(kernels);
                }
                Err(e) if e.is_device_lost() => return Err(e.into()),
                Err(e) => {
                    tracing::debug!(sm, %kind, error = %e, "kernel image did not load, trying the next");
                    last_err = Some(e);
                }
            }
        }
        Err(KernelError::NoImage(match last_err {
            Some(e) => e.to_string(),
            None => "no candidate image".into(),
        }))
    }

    /// Set the first `len` values of `buf` to `value` (`fill_u64`, one thread per value).
    pub(crate) fn fill_u64(
        &self,
        gpu: &Gpu,
        buf: &CudaSlice<u64>,
        len: usize,
        value: u64,
    ) -> Result<(), KernelError> {
        need_len("fill_u64", "buf", buf, len)?;
        // SAFETY: buf holds at least len u64 (checked).
        unsafe { self.fill_u64_at(gpu, gpu.device_ptr(buf), len, value) }
    }

    /// Queue `fill_u64` over `len` u64 at device address `ptr` (none for `len == 0`).
    ///
    /// # Safety
    /// `ptr` addresses at least `len` writable u64 of this context until the launch has run.
    unsafe fn fill_u64_at(
        &self,
        gpu: &Gpu,
        ptr: u64,
        len: usize,
        value: u64,
    ) -> Result<(), KernelError> {
        const K: &str = "fill_u64";
        if len == 0 {
            return Ok(());
        }
        let fill = FillParams {
            ptr,
            len: len as u64,
            value,
        };
        let cfg = LaunchConfig {
            grid_dim: (to_u32(K, "blocks", len.div_ceil(256))?, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: ptr holds at least len u64 (caller); one thread per value, the rest return.
        unsafe { gpu.launch(&self.fill_u64, cfg, fill) }?;
        Ok(())
    }

    /// Diagnostics: the host's cost of one small launch and its wait, as a one-query call pays it. Launches
    /// `fill_u64` over the first `n` values of `buf` (mapped pinned memory: [`Gpu::alloc_mapped_readback`])
    /// with a value other than `u64::MAX`, after the host set them to `u64::MAX`, then waits for the stream
    /// (`spin == false`) or spins on the values ([`Gpu::wait_mapped_filled`]). Returns whether the device's
    /// values arrived.
    pub fn launch_floor_probe(
        &self,
        gpu: &Gpu,
        buf: &mut recall_gpu_sys::MappedReadback<u64>,
        n: usize,
        spin: bool,
    ) -> Result<bool, KernelError> {
        let n = n.clamp(1, buf.len());
        // SAFETY: every earlier probe on `buf` ended with the stream synchronised or its values seen.
        unsafe { buf.fill_host(n, u64::MAX) }?;
        // SAFETY: the mapped buffer holds at least n u64 and outlives the wait below.
        unsafe { self.fill_u64_at(gpu, buf.device_ptr(), n, 7) }?;
        let got = if spin {
            gpu.wait_mapped_filled(buf, n, u64::MAX, std::time::Duration::from_millis(2))?
        } else {
            &gpu.read_mapped(buf)?[..n]
        };
        Ok(got.iter().all(|&v| v == 7))
    }

    /// The image this instance runs.
    pub fn image(&self) -> LoadedImage {
        self.image
    }

    /// The kernels fast mode runs: `sm90a_*` (`wgmma`, from the sm_90a cubin or its PTX), `tc_*` (`mma.sync`),
    /// or none (below sm_80, or without the shared memory: fast mode runs exact).
    pub fn fast_kernels(&self) -> &'static str {
        match (&self.hopper, &self.tc) {
            (Some(h), _) if h.kind == ImageKind::Cubin => "sm90a_* (wgmma, sm_90a cubin)",
            (Some(_), _) => "sm90a_* (wgmma, sm_90a PTX)",
            (None, Some(_)) => "tc_* (mma.sync)",
            (None, None) => "none (fast mode runs exact)",
        }
    }

    /// Choose clip-and-noise's kernels: `true` (the default) runs the one-pass kernel (norms and noise in one
    /// pass: `sm90a_clip_noise_rows` on sm_90, `sm80_clip_noise_rows` on other sm_80 and newer devices) wherever
    /// it can, `false` the norm kernel then `clip_noise` (for comparisons: benchmarks, the diff-test). Both give
    /// the same bits. Returns the previous setting.
    pub fn set_clip_noise_fused(&self, fused: bool) -> bool {
        self.clip_noise_fused
            .swap(fused, std::sync::atomic::Ordering::Relaxed)
    }

    /// The kernels [`Kernels::clip_noise`] runs for rows of `dim` values (and 16-byte aligned buffers, as
    /// every device allocation is): `sm90a_clip_noise_rows` or `sm80_clip_noise_rows` (one pass), or
    /// [`CLIP_NOISE_TWO_PASS`].
    pub fn clip_noise_kernels(&self, dim: usize) -> &'static str {
        match self.clip_noise_rows_plan(dim) {
            Some((_, _, name)) => name,
            None => CLIP_NOISE_TWO_PASS,
        }
    }

    /// The one-pass kernel, its rows per block and its name for rows of `dim` values, where it runs: an sm_80+
    /// image, the one-pass setting ([`Kernels::set_clip_noise_fused`]), `dim` a multiple of 4 with a row in the
    /// shared memory the function was opted into.
    fn clip_noise_rows_plan(&self, dim: usize) -> Option<(&CudaFunction, u32, &'static str)> {
        if !self
            .clip_noise_fused
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            return None;
        }
        let (func, bytes, name) = self.clip_noise_rows.as_ref()?;
        Some((
            func,
            noise_rows_for(dim, noise_rows_preferred(), *bytes)?,
            name,
        ))
    }

    /// The kernel that runs the exact many-query GEMM (similarity of more than [`SCAN_MAX_QUERIES`] queries,
    /// k-means assignment) for rows of `dim` values.
    pub fn gemm_kernel(&self, dim: usize) -> GemmKernel {
        match &self.sgemm {
            Some(g) if g.runs(dim) => GemmKernel::Sm80,
            _ => GemmKernel::Legacy,
        }
    }

    /// Choose the GEMM kernel: [`GemmKernel::Legacy`] sets `sm80_gemm_*` aside (for comparisons: benchmarks,
    /// the diff-test), [`GemmKernel::Sm80`] takes it back where the image has it. Both give the same bits.
    /// Applies to every later launch through this instance, from any thread. Returns the kernel that runs
    /// now for a typical `dim`.
    pub fn set_gemm_kernel(&self, kernel: GemmKernel) -> GemmKernel {
        if let Some(g) = &self.sgemm {
            g.set_legacy(kernel == GemmKernel::Legacy);
        }
        match &self.sgemm {
            Some(g) if !g.legacy() => GemmKernel::Sm80,
            _ => GemmKernel::Legacy,
        }
    }

    /// The `sm80_gemm_*` kernels when they run for `dim`.
    fn sgemm_for(&self, dim: usize) -> Option<&crate::sgemm::Sm80Gemm> {
        self.sgemm.as_ref().filter(|g| g.runs(dim))
    }

    /// Where a [`Kernels::similarity`] call of more than [`SCAN_MAX_QUERIES`] queries of `dim` values sends the
    /// queries past its last full 128-query GEMM tile (all of them, up to 128), when not to the 128-query tile:
    /// - up to 8 of them after full tiles: the row scan (a 128-query tile row would cost as much as 128 queries,
    ///   the scan about one read of the corpus);
    /// - up to 64 on the sm_80 GEMM: the narrowest tile that takes them (`sgemm::NarrowTile`);
    /// - 65 to 72 on the sm_80 GEMM where the 64-query tile runs: that tile full, then the scan (on an H200 a
    ///   64-query tile row costs about 58 % of a 128-query one, and the scan of 1 to 8 queries 20-38 %).
    ///
    /// `None`: the 128-query tile runs every query (or the call has at most 8, all on the scan).
    pub fn gemm_tail(&self, n_queries: usize, dim: usize) -> Option<GemmTail> {
        resolve_tail(self.sgemm_for(dim), n_queries, dim).map(|(t, _)| match t {
            Tail::Scan => GemmTail::Scan,
            Tail::Narrow(t) => GemmTail::Narrow(t.queries),
            Tail::NarrowThenScan(t) => GemmTail::NarrowThenScan(t.queries),
        })
    }

    /// `out[r] = norm(x[r])` for the `n_rows x dim` row-major matrix `x` (`docs/numerics.md`).
    pub fn row_norms_f32(
        &self,
        gpu: &Gpu,
        x: &CudaSlice<f32>,
        n_rows: usize,
        dim: usize,
        out: &mut CudaSlice<f32>,
    ) -> Result<(), KernelError> {
        const K: &str = "row_norms_f32";
        if n_rows == 0 || dim == 0 {
            return Err(shape(K, "n_rows and dim must be at least 1"));
        }
        need_len(K, "x", x, elems(K, n_rows, dim)?)?;
        need_len(K, "out", out, n_rows)?;
        let params = RowNormsParams {
            x: gpu.device_ptr(x),
            out: gpu.device_ptr(out),
            n_rows: to_u32(K, "n_rows", n_rows)?,
            dim: to_u32(K, "dim", dim)?,
        };
        let cfg = LaunchConfig {
            grid_dim: (params.n_rows.div_ceil(ROW_BLOCK), 1, 1),
            block_dim: (ROW_BLOCK, 1, 1),
            shared_mem_bytes: ROW_TILE_BYTES,
        };
        if n_rows <= WARP_MAX_ROWS && dim <= WARP_ROW_DIM_MAX as usize {
            let cfg = LaunchConfig {
                grid_dim: (params.n_rows.div_ceil(8), 1, 1),
                block_dim: (256, 1, 1),
                shared_mem_bytes: WARP_SMEM_BYTES,
            };
            // SAFETY: as below; the warp kernel stages rows of dim <= WARP_ROW_DIM_MAX values, one warp per
            // row, 8 rows per block.
            unsafe { gpu.launch(&self.row_norms_warp, cfg, params) }?;
            return Ok(());
        }
        let func = if n_rows <= PREFETCH_MAX_ROWS {
            &self.row_norms_f32_pf
        } else {
            &self.row_norms_f32
        };
        // SAFETY: `x` holds n_rows * dim f32 and `out` n_rows f32 (checked above); the grid covers every
        // row with ROW_BLOCK threads per block and the shared memory the kernel documents.
        unsafe { gpu.launch(func, cfg, params) }?;
        Ok(())
    }

    /// Scores of every query against every corpus row, `out[q * n_rows + r]`, for `metric` (norms only for
    /// cosine, as [`Kernels::row_norms_f32`] computes them). Up to [`SCAN_MAX_QUERIES`] queries run the row
    /// scan (memory-bound), more run the GEMM-style kernel (compute-bound); both give the same bits.
    #[allow(clippy::too_many_arguments)]
    pub fn similarity(
        &self,
        gpu: &Gpu,
        metric: SimMetric,
        queries: &CudaSlice<f32>,
        query_norms: Option<&CudaSlice<f32>>,
        corpus: &CudaSlice<f32>,
        corpus_norms: Option<&CudaSlice<f32>>,
        n_queries: usize,
        n_rows: usize,
        dim: usize,
        out: &mut CudaSlice<f32>,
    ) -> Result<(), KernelError> {
        const K: &str = "similarity";
        if n_queries == 0 || n_rows == 0 || dim == 0 {
            return Err(shape(K, "n_queries, n_rows and dim must be at least 1"));
        }
        need_len(K, "queries", queries, elems(K, n_queries, dim)?)?;
        need_len(K, "corpus", corpus, elems(K, n_rows, dim)?)?;
        need_len(K, "out", out, elems(K, n_queries, n_rows)?)?;
        let (qn, cn) = norm_ptrs(gpu, K, metric, query_norms, n_queries, corpus_norms, n_rows)?;
        let n_rows32 = to_u32(K, "n_rows", n_rows)?;
        let dim32 = to_u32(K, "dim", dim)?;
        to_u32(K, "n_queries", n_queries)?;
        let (q_base, c_base, out_base) = (
            gpu.device_ptr(queries),
            gpu.device_ptr(corpus),
            gpu.device_ptr(out),
        );
        if n_queries == 1 && n_rows <= WARP_MAX_ROWS && dim <= WARP_ROW_DIM_MAX as usize {
            let params = SimParams {
                queries: q_base,
                query_norms: qn,
                corpus: c_base,
                corpus_norms: cn,
                out: out_base,
                ids: 0,
                offsets: 0,
                n_queries: 1,
                n_rows: n_rows32,
                dim: dim32,
                _pad: 0,
            };
            let cfg = LaunchConfig {
                grid_dim: (n_rows32.div_ceil(8), 1, 1),
                block_dim: (256, 1, 1),
                shared_mem_bytes: WARP_SMEM_BYTES,
            };
            // SAFETY: one query of dim <= WARP_ROW_DIM_MAX values, n_rows rows, norms for cosine and the
            // 1 x n_rows output were all checked above; one warp per row, 8 rows per block, and the shared
            // memory the kernel documents.
            unsafe { gpu.launch(&self.scan_warp[metric.index()], cfg, params) }?;
            return Ok(());
        }
        if n_queries == 1 && self.scan1_routes(n_rows, dim, 0) {
            // One query against many rows in a Scan1Mode other than Old: the persistent scan (same bits).
            return self.scan1_similarity(
                gpu,
                metric,
                queries,
                query_norms,
                corpus,
                corpus_norms,
                n_rows,
                dim,
                out,
            );
        }
        let m = metric.index();
        let scan = DenseLaunch {
            func: if n_rows <= PREFETCH_MAX_ROWS {
                &self.scan_pf[m]
            } else {
                &self.scan[m]
            },
            queries: ROW_QUERIES_PER_BLOCK as usize,
            rows: ROW_BLOCK as usize,
            threads: ROW_BLOCK,
            shared_bytes: ROW_TILE_BYTES + QUERY_TILE_BYTES,
        };
        // The sm_80 GEMM read once for the call: the switch to `gemm_*` may change meanwhile, and the body and
        // the tail must come from one reading of it (a tail planned for a narrow tile must find it).
        let sg = self.sgemm_for(dim);
        let wide = match sg {
            Some(g) => DenseLaunch {
                func: &g.sim[m],
                queries: GEMM_TILE as usize,
                rows: GEMM_TILE as usize,
                threads: GEMM_THREADS,
                shared_bytes: SGEMM_SMEM_BYTES,
            },
            None => DenseLaunch {
                func: &self.gemm[m],
                queries: GEMM_TILE as usize,
                rows: GEMM_TILE as usize,
                threads: GEMM_THREADS,
                shared_bytes: GEMM_SMEM_BYTES,
            },
        };
        // Which kernel takes which queries: the row scan up to 8; above, the GEMM's 128-query tiles, and the queries
        // past the last full one (all of them up to 128) on the scan, a narrow tile, or the 64-query tile and the
        // scan when `gemm_tail` says so.
        let tail = resolve_tail(sg, n_queries, dim);
        let tail_queries = tail.as_ref().map_or(0, |(_, q)| *q);
        let body = if n_queries <= SCAN_MAX_QUERIES {
            scan
        } else {
            wide
        };
        let body_queries = n_queries - tail_queries;
        // The tail's launches: (kernel, first query, queries).
        let tail_launches = match tail.map(|(t, _)| t) {
            None => [None, None],
            Some(Tail::Scan) => [Some((scan, body_queries, tail_queries)), None],
            Some(Tail::Narrow(t)) => [
                Some((DenseLaunch::narrow(t, m), body_queries, tail_queries)),
                None,
            ],
            Some(Tail::NarrowThenScan(t)) => [
                Some((DenseLaunch::narrow(t, m), body_queries, t.queries)),
                Some((scan, body_queries + t.queries, tail_queries - t.queries)),
            ],
        };
        let params_at = |q0: usize, nq: usize| SimParams {
            queries: q_base + (q0 * dim * 4) as u64,
            query_norms: if qn == 0 { 0 } else { qn + (q0 * 4) as u64 },
            corpus: c_base,
            corpus_norms: cn,
            out: out_base + (q0 * n_rows * 4) as u64,
            ids: 0,
            offsets: 0,
            n_queries: nq as u32,
            n_rows: n_rows32,
            dim: dim32,
            _pad: 0,
        };
        let plan = [(body, 0, body_queries)]
            .into_iter()
            .chain(tail_launches.into_iter().flatten());
        for (l, first, count) in plan {
            // Launches of at most `MAX_GRID_Y` rows of blocks.
            let mut q0 = first;
            while q0 < first + count {
                let nq = (MAX_GRID_Y * l.queries).min(first + count - q0);
                let cfg = LaunchConfig {
                    grid_dim: (
                        n_rows.div_ceil(l.rows) as u32,
                        nq.div_ceil(l.queries) as u32,
                        1,
                    ),
                    block_dim: (l.threads, 1, 1),
                    shared_mem_bytes: l.shared_bytes,
                };
                // SAFETY: every buffer was checked above to hold what the kernel reads or writes for queries
                // q0 .. q0 + nq; offsets stay inside them (a narrow tile's element offsets too:
                // `NarrowTile::takes`); grid, block and shared memory are as the kernels document.
                unsafe { gpu.launch(l.func, cfg, params_at(q0, nq)) }?;
                q0 += nq;
            }
        }
        Ok(())
    }

    /// Candidate scoring: query `q` scores corpus rows `ids[offsets[q] .. offsets[q + 1]]` into the same
    /// positions of `out`. `ids` and `offsets` are checked on the host here (every id below `n_rows`,
    /// offsets non-decreasing and ending at `ids.len()`) before they are uploaded, so the kernel cannot read
    /// outside the corpus whatever the lists hold. Returns the uploaded ids and offsets for the selection.
    #[allow(clippy::too_many_arguments)]
    pub fn similarity_gather(
        &self,
        gpu: &Gpu,
        metric: SimMetric,
        queries: &CudaSlice<f32>,
        query_norms: Option<&CudaSlice<f32>>,
        corpus: &CudaSlice<f32>,
        corpus_norms: Option<&CudaSlice<f32>>,
        n_queries: usize,
        n_rows: usize,
        dim: usize,
        ids: &[u32],
        offsets: &[u64],
        out: &mut CudaSlice<f32>,
    ) -> Result<(CudaSlice<u32>, CudaSlice<u64>), KernelError> {
        const K: &str = "similarity_gather";
        if n_queries == 0 || n_rows == 0 || dim == 0 {
            return Err(shape(K, "n_queries, n_rows and dim must be at least 1"));
        }
        need_len(K, "queries", queries, elems(K, n_queries, dim)?)?;
        need_len(K, "corpus", corpus, elems(K, n_rows, dim)?)?;
        need_len(K, "out", out, ids.len())?;
        let longest = check_offsets(K, offsets, n_queries, ids.len())?;
        if let Some(bad) = ids.iter().find(|&&id| id as usize >= n_rows) {
            return Err(shape(
                K,
                format!("candidate id {bad} is not below the corpus size {n_rows}"),
            ));
        }
        let (qn, cn) = norm_ptrs(gpu, K, metric, query_norms, n_queries, corpus_norms, n_rows)?;
        if n_queries > MAX_GRID_Y {
            return Err(shape(
                K,
                format!("{n_queries} queries exceed {MAX_GRID_Y} per launch"),
            ));
        }
        let ids_dev = gpu.upload(if ids.is_empty() { &[0u32][..] } else { ids })?;
        let offsets_dev = gpu.upload(offsets)?;
        if longest == 0 {
            return Ok((ids_dev, offsets_dev));
        }
        let params = SimParams {
            queries: gpu.device_ptr(queries),
            query_norms: qn,
            corpus: gpu.device_ptr(corpus),
            corpus_norms: cn,
            out: gpu.device_ptr(out),
            ids: gpu.device_ptr(&ids_dev),
            offsets: gpu.device_ptr(&offsets_dev),
            n_queries: n_queries as u32,
            n_rows: to_u32(K, "n_rows", n_rows)?,
            dim: to_u32(K, "dim", dim)?,
            _pad: 0,
        };
        let cfg = LaunchConfig {
            grid_dim: (
                to_u32(K, "blocks", longest.div_ceil(ROW_BLOCK as usize))?,
                n_queries as u32,
                1,
            ),
            block_dim: (ROW_BLOCK, 1, 1),
            shared_mem_bytes: ROW_TILE_BYTES + ROW_TILE_K * 4 + ROW_BLOCK * 4,
        };
        // SAFETY: ids (all below n_rows) and offsets were validated above and uploaded as they are; every
        // other buffer was checked for its size; grid and shared memory are as the kernel documents.
        unsafe { gpu.launch(&self.gather[metric.index()], cfg, params) }?;
        Ok((ids_dev, offsets_dev))
    }

    /// The `k` best (score, id) pairs of every segment of `scores`, best first (`docs/numerics.md`,
    /// "Top-k"), by radix select on the GPU and a sort of the `k` survivors on the host. `ids` gives the id
    /// of each position (candidate scoring); without it the id is the position within the segment.
    pub fn select_topk(
        &self,
        gpu: &Gpu,
        scores: &CudaSlice<f32>,
        ids: Option<&CudaSlice<u32>>,
        segments: Segments<'_>,
        k: usize,
        higher_first: bool,
    ) -> Result<TopKResult, KernelError> {
        self.begin_topk(gpu, scores, ids, segments, k, higher_first)?
            .finish()
    }

    /// The first half of [`Kernels::select_topk`]: check the call, queue the selection and the download of
    /// its k survivors per segment, and return without waiting. [`PendingTopK::finish`] waits for that
    /// download (only) and sorts; meanwhile the host may queue and wait for other work. The selection's
    /// scratch stays locked until then.
    pub fn begin_topk<'a>(
        &'a self,
        gpu: &'a Gpu,
        scores: &'a CudaSlice<f32>,
        ids: Option<&'a CudaSlice<u32>>,
        segments: Segments<'a>,
        k: usize,
        higher_first: bool,
    ) -> Result<PendingTopK<'a>, KernelError> {
        const K: &str = "select_topk";
        let (n_segments, seg_len, longest, total, offsets_ptr) = match segments {
            Segments::Dense {
                n_segments,
                seg_len,
            } => (
                n_segments,
                seg_len,
                seg_len,
                elems(K, n_segments, seg_len)?,
                0,
            ),
            Segments::Ragged {
                offsets,
                offsets_dev,
            } => {
                let n = offsets.len().saturating_sub(1);
                let total = offsets.last().copied().unwrap_or(0) as usize;
                let longest = check_offsets(K, offsets, n, total)?;
                need_len(K, "offsets_dev", offsets_dev, offsets.len())?;
                if let Some(short) = offsets
                    .windows(2)
                    .map(|w| (w[1] - w[0]) as usize)
                    .find(|&len| len < k)
                {
                    return Err(shape(
                        K,
                        format!("a segment of {short} scores is shorter than k = {k}"),
                    ));
                }
                (n, 0, longest, total, gpu.device_ptr(offsets_dev))
            }
        };
        let mut pending = PendingTopK {
            kernels: self,
            scratch: None,
            scores,
            ids,
            segments,
            offsets_ptr,
            n_segments,
            seg_len,
            longest,
            k,
            higher_first,
            small_k: false,
        };
        if n_segments == 0 {
            return Ok(pending);
        }
        if k == 0 || (matches!(segments, Segments::Dense { .. }) && k > seg_len) {
            return Err(shape(
                K,
                format!("k = {k} must be between 1 and the segment length"),
            ));
        }
        need_len(K, "scores", scores, total)?;
        if let Some(ids) = ids {
            need_len(K, "ids", ids, total)?;
        }
        if n_segments > MAX_GRID_Y
            || longest.div_ceil((SELECT_BLOCK * SELECT_ITEMS) as usize) > MAX_GRID_X
        {
            return Err(shape(
                K,
                "too many segments or too long a segment for one launch",
            ));
        }
        let n_out = n_segments * k;
        let mut queued = QueuedScratch {
            guard: self.select_scratch.lock(),
            gpu,
            armed: true,
        };
        let scratch = &mut *queued.guard;
        if !scratch
            .as_ref()
            .is_some_and(|sc| sc.segments >= n_segments && sc.outputs >= n_out)
        {
            let (segs, outs) = scratch
                .as_ref()
                .map_or((0, 0), |sc| (sc.segments, sc.outputs));
            let (segs, outs) = (segs.max(n_segments), outs.max(n_out));
            *scratch = Some(SelectScratch {
                segments: segs,
                outputs: outs,
                state: gpu.alloc_zeros::<u8>(segs * std::mem::size_of::<SelectState>())?,
                hist: gpu.alloc_zeros::<u32>(segs * SELECT_BINS as usize)?,
                // keys (u64 each) followed by scores (f32 each, two per u64)
                out: gpu.alloc_zeros::<u64>(outs + outs.div_ceil(2))?,
                out_host: {
                    let words = outs + outs.div_ceil(2);
                    (words <= PINNED_OUT_WORDS)
                        .then(|| gpu.alloc_pinned_readback::<u64>(words))
                        .transpose()?
                },
                out_fence: new_fence(gpu.context())?,
                small: None,
                small_len: 0,
                filter: None,
            });
        }
        pending.small_k = matches!(segments, Segments::Dense { .. })
            && ids.is_none()
            && k <= SMALL_K_MAX as usize;
        let Some(sc) = scratch.as_mut() else {
            return Err(shape(K, "select scratch missing"));
        };
        if pending.small_k {
            self.topk_small_select(gpu, sc, scores, n_segments, seg_len, k, higher_first)?;
        } else {
            pending.radix_select(gpu, sc)?;
        }
        pending.queue_download(gpu, sc)?;
        pending.scratch = Some(queued);
        Ok(pending)
    }

    /// Free the selection's cached scratch buffers (they are made again by the next selection).
    pub fn release_scratch(&self) {
        *self.select_scratch.lock() = None;
        *self.knn1_scratch.lock() = None;
        if let Some(s) = &self.knn1_serve {
            s.stop();
        }
        *self.scan1_scratch.lock() = None;
        *self.cand_staging.lock() = Default::default();
        *self.tc_knn_scratch.lock() = None;
    }

    /// TEST ONLY (fault drills, `recall faults kernel-failure`): a real launch that the driver refuses,
    /// returned as its error. The block asks for more threads than any NVIDIA GPU allows, so
    /// `cuLaunchKernel` fails with `CUDA_ERROR_INVALID_VALUE`, nothing runs, and the context stays usable.
    pub fn test_launch_error(&self, gpu: &Gpu) -> Result<(), KernelError> {
        let params = RowNormsParams {
            x: 0,
            out: 0,
            n_rows: 0,
            dim: 0,
        };
        let cfg = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (4096, 1, 1),
            shared_mem_bytes: ROW_TILE_BYTES,
        };
        // SAFETY: no GPU accepts 4096 threads per block (the limit is 1024), so the driver refuses the launch
        // and the kernel never runs; were it to run, `n_rows = 0` makes every thread return before any access.
        unsafe { gpu.launch(&self.row_norms_f32, cfg, params) }?;
        Err(KernelError::Shape {
            kernel: "row_norms_f32",
            reason: "test launch error: the driver accepted a 4096-thread block".into(),
        })
    }

    /// TEST ONLY (fault drills, `recall faults device-lost`): make this context unusable for real. A kernel
    /// reads and writes an address that no allocation covers; the GPU's memory management faults on it and
    /// the driver marks the context failed (`CUDA_ERROR_ILLEGAL_ADDRESS`, sticky: every later call on the
    /// context fails). Returns the error the synchronisation reports.
    pub fn test_poison_context(&self, gpu: &Gpu) -> Result<(), KernelError> {
        // In the first 64 KiB of the device's address space, where the driver maps nothing.
        const UNMAPPED: u64 = 0x1000;
        let params = RowNormsParams {
            x: UNMAPPED,
            out: UNMAPPED,
            n_rows: 1,
            dim: 1,
        };
        let cfg = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (ROW_BLOCK, 1, 1),
            shared_mem_bytes: ROW_TILE_BYTES,
        };
        // SAFETY: deliberately not: the parameters point at device addresses no allocation covers. Only the
        // device touches them, and its memory management turns the access into a fault of this context (no
        // other allocation, context or host memory is read or written). This is the point of the function.
        unsafe { gpu.launch(&self.row_norms_f32, cfg, params) }?;
        gpu.synchronize()?;
        Err(KernelError::Shape {
            kernel: "row_norms_f32",
            reason: "test poison: the read of an unmapped address did not fault".into(),
        })
    }

    /// Whether fast mode (tensor cores) runs here: the loaded image is for sm_80 or newer.
    pub fn fast_mode_available(&self) -> bool {
        self.tc.is_some()
    }

    /// `out` = the `n_rows x dim` rows of `src` as 16-bit `kind` values, each row zero-padded to
    /// [`half_ld`]`(dim)` values: the operand layout of [`Kernels::similarity_fast`].
    pub fn to_half_rows(
        &self,
        gpu: &Gpu,
        src: HalfSource<'_>,
        kind: HalfKind,
        n_rows: usize,
        dim: usize,
        out: &mut CudaSlice<u16>,
    ) -> Result<(), KernelError> {
        const K: &str = "to_half_rows";
        let Some(tc) = &self.tc else {
            return Err(shape(K, "fast mode needs sm_80 or newer"));
        };
        if n_rows == 0 || dim == 0 {
            return Err(shape(K, "n_rows and dim must be at least 1"));
        }
        let ld = half_ld(dim);
        let n_src = elems(K, n_rows, dim)?;
        let (ptr, src_f32) = match src {
            HalfSource::F32(x) => {
                need_len(K, "src", x, n_src)?;
                (gpu.device_ptr(x), 1)
            }
            HalfSource::Half(x) => {
                need_len(K, "src", x, n_src)?;
                (gpu.device_ptr(x), 0)
            }
        };
        let total = elems(K, n_rows, ld)?;
        need_len(K, "out", out, total)?;
        let params = HalfRowsParams {
            src: ptr,
            dst: gpu.device_ptr(out),
            n_rows: to_u32(K, "n_rows", n_rows)?,
            dim: to_u32(K, "dim", dim)?,
            ld: to_u32(K, "ld", ld)?,
            src_f32,
            bf16: u32::from(kind == HalfKind::Bf16),
            _pad: 0,
        };
        let cfg = grid_stride(total);
        // SAFETY: src holds n_rows * dim values of its kind and out n_rows * ld (checked above); the kernel
        // is grid-stride over exactly n_rows * ld outputs.
        unsafe { gpu.launch(&tc.to_half_rows, cfg, params) }?;
        Ok(())
    }

    /// `out` = the `n_rows x dim` 16-bit `kind` values of `src` widened to f32 (exact): how a 16-bit corpus
    /// reaches the exact kernels.
    pub fn widen_half_rows(
        &self,
        gpu: &Gpu,
        src: &CudaSlice<u16>,
        kind: HalfKind,
        n_rows: usize,
        dim: usize,
        out: &mut CudaSlice<f32>,
    ) -> Result<(), KernelError> {
        const K: &str = "widen_half_rows";
        let total = elems(K, n_rows, dim)?;
        if total == 0 {
            return Err(shape(K, "n_rows and dim must be at least 1"));
        }
        need_len(K, "src", src, total)?;
        need_len(K, "out", out, total)?;
        let params = HalfRowsParams {
            src: gpu.device_ptr(src),
            dst: gpu.device_ptr(out),
            n_rows: to_u32(K, "n_rows", n_rows)?,
            dim: to_u32(K, "dim", dim)?,
            ld: 0,
            src_f32: 0,
            bf16: u32::from(kind == HalfKind::Bf16),
            _pad: 0,
        };
        let cfg = grid_stride(total);
        // SAFETY: src and out hold n_rows * dim values (checked above); the kernel is grid-stride over them.
        unsafe { gpu.launch(&self.widen_half_rows, cfg, params) }?;
        Ok(())
    }

    /// Fast mode: scores of every query against every row on tensor cores, `out[q * n_rows + r]`, from
    /// operands laid out by [`Kernels::to_half_rows`] (row stride `ld` = [`half_ld`]`(dim)`). Cosine and l2
    /// need the f32 norms of the original rows. Not bit-exact: the bound is in `docs/numerics.md`.
    #[allow(clippy::too_many_arguments)]
    pub fn similarity_fast(
        &self,
        gpu: &Gpu,
        kind: HalfKind,
        metric: SimMetric,
        queries: &CudaSlice<u16>,
        query_norms: Option<&CudaSlice<f32>>,
        corpus: &CudaSlice<u16>,
        corpus_norms: Option<&CudaSlice<f32>>,
        n_queries: usize,
        n_rows: usize,
        ld: usize,
        out: &mut CudaSlice<f32>,
    ) -> Result<(), KernelError> {
        const K: &str = "similarity_fast";
        let Some(tc) = &self.tc else {
            return Err(shape(K, "fast mode needs sm_80 or newer"));
        };
        let (qn, cn) = fast_operands(
            K,
            gpu,
            metric,
            (queries, query_norms, n_queries),
            (corpus, corpus_norms, n_rows),
            ld,
        )?;
        need_len(K, "out", out, elems(K, n_queries, n_rows)?)?;
        let n_rows32 = to_u32(K, "n_rows", n_rows)?;
        let ld32 = to_u32(K, "ld", ld)?;
        to_u32(K, "n_queries", n_queries)?;
        let per_launch = MAX_GRID_Y * TC_TILE_Q as usize;
        let mut q0 = 0;
        while q0 < n_queries {
            let nq = per_launch.min(n_queries - q0);
            let params = TcGemmParams {
                queries: gpu.device_ptr(queries) + (q0 * ld * 2) as u64,
                query_norms: if qn == 0 { 0 } else { qn + (q0 * 4) as u64 },
                corpus: gpu.device_ptr(corpus),
                corpus_norms: cn,
                out: gpu.device_ptr(out) + (q0 * n_rows * 4) as u64,
                n_queries: nq as u32,
                n_rows: n_rows32,
                ld: ld32,
                _pad: 0,
            };
            let (func, shared_mem_bytes) = match &self.hopper {
                Some(h) => (&h.gemm[kind.index()][metric.index()], H_PIPE_BYTES),
                None => (&tc.gemm[kind.index()][metric.index()], TC_PIPE_BYTES),
            };
            let cfg = LaunchConfig {
                grid_dim: (
                    n_rows32.div_ceil(TC_TILE_R),
                    (nq as u32).div_ceil(TC_TILE_Q),
                    1,
                ),
                block_dim: (TC_THREADS, 1, 1),
                shared_mem_bytes,
            };
            // SAFETY: every buffer was checked above for queries q0 .. q0 + nq with row stride ld (a
            // multiple of 32, as the kernel's column tiles need); the image is sm_80+ (tc present), and
            // sm90a_* was loaded only for a 9.0 device and opted into its shared memory; grid, block and
            // shared memory are as the kernels document (the same grid for both).
            unsafe { gpu.launch(func, cfg, params) }?;
            q0 += nq;
        }
        Ok(())
    }

    /// The radix-select passes (any k, dense or ragged segments): the k smallest keys of every segment, in
    /// any order, with their scores, into `sc.out`.
    #[allow(clippy::too_many_arguments)]
    fn radix_select(
        &self,
        gpu: &Gpu,
        sc: &SelectScratch,
        scores: &CudaSlice<f32>,
        ids: Option<&CudaSlice<u32>>,
        offsets_ptr: u64,
        n_segments: usize,
        seg_len: usize,
        longest: usize,
        k: usize,
        higher_first: bool,
    ) -> Result<(), KernelError> {
        const K: &str = "select_topk";
        let n_out = n_segments * k;
        let out_base = gpu.device_ptr(&sc.out);
        let mut params = SelectParams {
            scores: gpu.device_ptr(scores),
            ids: ids.map(|i| gpu.device_ptr(i)).unwrap_or(0),
            offsets: offsets_ptr,
            state: gpu.device_ptr(&sc.state),
            hist: gpu.device_ptr(&sc.hist),
            out_keys: out_base,
            out_scores: out_base + 8 * n_out as u64,
            n_segments: n_segments as u32,
            seg_len: to_u32(K, "segment length", seg_len)?,
            k: to_u32(K, "k", k)?,
            higher_first: u32::from(higher_first),
            pass: 0,
            _pad: 0,
        };
        let n_init = (n_segments * SELECT_BINS as usize).div_ceil(SELECT_BLOCK as usize);
        let scan_grid = (
            longest.div_ceil((SELECT_BLOCK * SELECT_ITEMS) as usize) as u32,
            n_segments as u32,
            1,
        );
        let block = (SELECT_BLOCK, 1, 1);
        let init = LaunchConfig {
            grid_dim: (to_u32(K, "blocks", n_init)?, 1, 1),
            block_dim: block,
            shared_mem_bytes: 0,
        };
        let hist_cfg = LaunchConfig {
            grid_dim: scan_grid,
            block_dim: block,
            shared_mem_bytes: SELECT_BINS * 4,
        };
        let choose = LaunchConfig {
            grid_dim: (n_segments as u32, 1, 1),
            block_dim: block,
            shared_mem_bytes: (SELECT_BLOCK + 2) * 4,
        };
        let collect = LaunchConfig {
            grid_dim: scan_grid,
            block_dim: block,
            shared_mem_bytes: 0,
        };
        // SAFETY (all launches below): every buffer was sized above for n_segments segments, k outputs each
        // and SELECT_BINS bins each; offsets were validated; grids and shared memory are as the kernels
        // document; the passes run in stream order.
        // SAFETY: see above.
        unsafe { gpu.launch(&self.select_init, init, params) }?;
        for pass in 0..SELECT_PASSES {
            params.pass = pass;
            // SAFETY: see above.
            unsafe { gpu.launch(&self.select_histogram, hist_cfg, params) }?;
            // SAFETY: see above.
            unsafe { gpu.launch(&self.select_choose, choose, params) }?;
        }
        // SAFETY: see above.
        unsafe { gpu.launch(&self.select_collect, collect, params) }?;
        Ok(())
    }

    /// Small-k selection over dense segments (`k <= SMALL_K_MAX`) into `sc.out` (keys ascending, then
    /// scores): the threshold filter for long segments, else `topk_small` levels over the scores.
    #[allow(clippy::too_many_arguments)]
    fn topk_small_select(
        &self,
        gpu: &Gpu,
        sc: &mut SelectScratch,
        scores: &CudaSlice<f32>,
        n_segments: usize,
        seg_len: usize,
        k: usize,
        higher_first: bool,
    ) -> Result<(), KernelError> {
        const K: &str = "select_topk";
        let n_out = n_segments * k;
        let out_base = gpu.device_ptr(&sc.out);
        let final_out = (out_base, out_base + 8 * n_out as u64);
        let scores_ptr = gpu.device_ptr(scores);
        if seg_len < FILTER_MIN_LEN {
            let src = LevelInput {
                ptr: scores_ptr,
                keys: false,
                len: seg_len,
                counts: 0,
            };
            return self.topk_levels(
                gpu,
                sc,
                src,
                scores_ptr,
                n_segments,
                seg_len,
                k,
                higher_first,
                final_out,
            );
        }
        // Groups of 32 * items scores per warp, about 4k groups per segment (at most 1024 scores each).
        let group_len = 32 * (seg_len / (4 * k * 32)).clamp(1, 32);
        let n_groups = seg_len.div_ceil(group_len);
        let cap = (k * group_len).min(seg_len);
        let need = elems(K, n_segments, n_groups + k + cap)? + n_segments.div_ceil(2);
        if sc.filter.as_ref().is_none_or(|b| b.len() < need) {
            sc.filter = Some(gpu.alloc_zeros::<u64>(need)?);
        }
        let Some(buf) = sc.filter.as_mut() else {
            return Err(shape(K, "filter scratch missing"));
        };
        let base = gpu.device_ptr(buf);
        let group_min = base;
        let threshold = group_min + 8 * (n_segments * n_groups) as u64;
        let cand = threshold + 8 * n_out as u64;
        let counts = cand + 8 * (n_segments * cap) as u64;
        let params = TopkFilterParams {
            scores: scores_ptr,
            group_min,
            threshold,
            cand,
            counts,
            n_segments: to_u32(K, "segments", n_segments)?,
            seg_len: to_u32(K, "segment length", seg_len)?,
            group_len: group_len as u32,
            n_groups: to_u32(K, "groups", n_groups)?,
            k: to_u32(K, "k", k)?,
            cap: to_u32(K, "cap", cap)?,
            higher_first: u32::from(higher_first),
            _pad: 0,
        };
        let cfg = LaunchConfig {
            grid_dim: (
                to_u32(K, "blocks", n_groups.div_ceil(8))?,
                params.n_segments,
                1,
            ),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: `scores` holds n_segments * seg_len f32 (checked by the caller); group_min has room for
        // n_segments * n_groups keys (the scratch was sized above); the grid has one warp per group.
        unsafe { gpu.launch(&self.topk_group_min, cfg, params) }?;
        let minima = LevelInput {
            ptr: group_min,
            keys: true,
            len: n_groups,
            counts: 0,
        };
        self.topk_levels(
            gpu,
            sc,
            minima,
            scores_ptr,
            n_segments,
            seg_len,
            k,
            higher_first,
            (threshold, 0),
        )?;
        // Zero the counters (they follow the candidates, n_segments u32).
        let fill = FillParams {
            ptr: counts,
            len: n_segments.div_ceil(2) as u64,
            value: 0,
        };
        let fill_cfg = LaunchConfig {
            grid_dim: (fill.len.div_ceil(256) as u32, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: the counters occupy ceil(n_segments / 2) u64 of the scratch, after the candidates.
        unsafe { gpu.launch(&self.fill_u64, fill_cfg, fill) }?;
        let cfg = LaunchConfig {
            grid_dim: (
                to_u32(K, "blocks", seg_len.div_ceil(4096))?,
                params.n_segments,
                1,
            ),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: threshold holds n_segments * k keys (written by the levels above), cand n_segments * cap
        // keys and counts n_segments zeroed u32; positions below seg_len only.
        unsafe { gpu.launch(&self.topk_filter, cfg, params) }?;
        let candidates = LevelInput {
            ptr: cand,
            keys: true,
            len: cap,
            counts,
        };
        self.topk_levels(
            gpu,
            sc,
            candidates,
            scores_ptr,
            n_segments,
            seg_len,
            k,
            higher_first,
            final_out,
        )
    }

    /// `topk_small` in levels over `src` until one slice per segment is left; the last level writes each
    /// segment's k keys, ascending, to `out.0` and, when `out.1 != 0`, their scores (read from `scores`,
    /// `n_segments x seg_len`) to `out.1`.
    #[allow(clippy::too_many_arguments)]
    fn topk_levels(
        &self,
        gpu: &Gpu,
        sc: &mut SelectScratch,
        src: LevelInput,
        scores: u64,
        n_segments: usize,
        seg_len: usize,
        k: usize,
        higher_first: bool,
        out: (u64, u64),
    ) -> Result<(), KernelError> {
        const K: &str = "select_topk";
        // Items per thread and slices for `len` inputs per segment: enough blocks to fill the device, at
        // least 8 items per thread so that the threshold filters, at most 64 so that few keys move on.
        let plan = |len: usize| -> (usize, usize) {
            let target = (2048 / n_segments).max(1);
            let items = len.div_ceil(256 * target).clamp(8, 64);
            (items, len.div_ceil(256 * items))
        };
        let (_, first_slices) = plan(src.len);
        let need = elems(K, elems(K, n_segments, first_slices)?, k)?;
        if first_slices > 1 && (sc.small.is_none() || sc.small_len < need) {
            sc.small = Some(gpu.alloc_zeros::<u64>(2 * need)?);
            sc.small_len = need;
        }
        let small_base = sc.small.as_ref().map_or(0, |b| gpu.device_ptr(b));
        let func = &self.topk_small[usize::from(k > SMALL_K_16 as usize)];
        let mut input = src;
        let mut half = 0;
        loop {
            let (items, n_slices) = plan(input.len);
            let last = n_slices == 1;
            let out_keys = if last {
                out.0
            } else {
                small_base + (half * sc.small_len * 8) as u64
            };
            let params = TopkSmallParams {
                input: input.ptr,
                out_keys,
                out_scores: if last { out.1 } else { 0 },
                scores,
                n_segments: to_u32(K, "segments", n_segments)?,
                seg_len: to_u32(K, "segment length", input.len)?,
                score_seg_len: to_u32(K, "segment length", seg_len)?,
                k: to_u32(K, "k", k)?,
                items: items as u32,
                n_slices: to_u32(K, "slices", n_slices)?,
                keys_in: u32::from(input.keys),
                higher_first: u32::from(higher_first),
                counts: input.counts,
            };
            let cfg = LaunchConfig {
                grid_dim: (params.n_slices, params.n_segments, 1),
                block_dim: (256, 1, 1),
                shared_mem_bytes: 64,
            };
            // SAFETY: the input holds n_segments * len values of its kind (scores checked by the caller,
            // or keys sized by the caller or by the previous level: n_segments * n_slices * k); the output
            // half holds `small_len >= n_segments * n_slices * k` keys (the first level has the most
            // slices), the last level's `out` n_segments * k keys and scores; every key's position is below
            // seg_len; k <= 32 and the 16-slot variant runs only for k <= 16.
            unsafe { gpu.launch(func, cfg, params) }?;
            if last {
                return Ok(());
            }
            input = LevelInput {
                ptr: out_keys,
                keys: true,
                len: n_slices * k,
                counts: 0,
            };
            half ^= 1;
        }
    }
}

/// A top-k selection queued by [`Kernels::begin_topk`]: the kernels and the download of their output are on
/// the stream; [`PendingTopK::finish`] waits for that download and returns the sorted answer. Holds the
/// selection's scratch (locked) until then.
#[derive(Debug)]
pub struct PendingTopK<'a> {
    kernels: &'a Kernels,
    /// The locked scratch, `None` when there is nothing to select (no segments).
    scratch: Option<QueuedScratch<'a>>,
    scores: &'a CudaSlice<f32>,
    ids: Option<&'a CudaSlice<u32>>,
    segments: Segments<'a>,
    offsets_ptr: u64,
    n_segments: usize,
    seg_len: usize,
    longest: usize,
    k: usize,
    higher_first: bool,
    small_k: bool,
}

/// The selection's scratch, locked while kernels that use it may be queued on `gpu`'s stream. Dropped while
/// armed (an error between queueing and reading the answer, or a pending selection never finished), it waits
/// for that stream before it unlocks: the next selection may run on another stream (spreading's slots each have
/// their own) and must not share the buffers with kernels still queued. `finish` disarms it once the answer's
/// fence has passed, which orders everything the selection queued.
#[derive(Debug)]
struct QueuedScratch<'a> {
    guard: parking_lot::MutexGuard<'a, Option<SelectScratch>>,
    gpu: &'a Gpu,
    armed: bool,
}

impl Drop for QueuedScratch<'_> {
    fn drop(&mut self) {
        if self.armed
            && let Err(e) = self.gpu.synchronize()
        {
            // A failed wait means a failed context: nothing queued on it runs any more.
            tracing::debug!(error = %e, "select scratch released after a failed stream wait");
        }
    }
}

impl PendingTopK<'_> {
    /// Keys then scores of the k survivors per segment: how many u64 words come back.
    fn words(&self) -> usize {
        let n_out = self.n_segments * self.k;
        n_out + n_out.div_ceil(2)
    }

    /// Queue the radix-select passes over this selection's scores.
    fn radix_select(&self, gpu: &Gpu, sc: &SelectScratch) -> Result<(), KernelError> {
        self.kernels.radix_select(
            gpu,
            sc,
            self.scores,
            self.ids,
            self.offsets_ptr,
            self.n_segments,
            self.seg_len,
            self.longest,
            self.k,
            self.higher_first,
        )
    }

    /// Queue one download of the output region (the keys, then the scores packed two to a u64) into the
    /// scratch's page-locked buffer when it has one, and a fence after it.
    fn queue_download(&self, gpu: &Gpu, sc: &mut SelectScratch) -> Result<(), KernelError> {
        let words = self.words();
        if let Some(out_host) = sc.out_host.as_mut() {
            // Nothing reads the buffer until the fence below has completed (`read_region`), and nothing
            // else copies into it while the scratch is locked.
            let host = gpu.pinned_write(out_host)?;
            gpu.download_prefix(&sc.out, &mut host[..words])?;
        }
        record_event(&sc.out_fence, gpu.stream())?;
        Ok(())
    }

    /// Wait for the output (and its download) and read it (a copy, so the scratch may be reused).
    fn read_region(&self, gpu: &Gpu, sc: &mut SelectScratch) -> Result<Vec<u64>, KernelError> {
        event_synchronize(&sc.out_fence)?;
        let words = self.words();
        match sc.out_host.as_mut() {
            Some(out_host) => Ok(gpu.pinned_write(out_host)?[..words].to_vec()),
            None => {
                // A large output: one copy into pageable memory (done when it returns).
                let mut region = vec![0u64; words];
                gpu.download_prefix(&sc.out, &mut region)?;
                Ok(region)
            }
        }
    }

    /// Wait for the selection's output (not for anything queued after it, on the stream `begin_topk` queued it
    /// on) and return the k best pairs per segment, best first.
    pub fn finish(mut self) -> Result<TopKResult, KernelError> {
        const K: &str = "select_topk";
        let (n_segments, k) = (self.n_segments, self.k);
        let Some(mut queued) = self.scratch.take() else {
            return Ok(TopKResult {
                k,
                ids: Vec::new(),
                scores: Vec::new(),
            });
        };
        // The stream the selection was queued on: the one the guard waits for on an error path.
        let gpu = queued.gpu;
        let Some(sc) = queued.guard.as_mut() else {
            return Err(shape(K, "select scratch missing"));
        };
        let n_out = n_segments * k;
        let words = self.words();
        let mut region = self.read_region(gpu, sc)?;
        if self.small_k && region[..n_out].contains(&0) {
            // The threshold filter's candidates overflowed (the sizing rules it out; defence in depth):
            // select again by radix.
            tracing::warn!("small-k candidates overflowed; selecting by radix");
            self.radix_select(gpu, sc)?;
            self.queue_download(gpu, sc)?;
            region = self.read_region(gpu, sc)?;
        }
        // The answer's fence has passed: nothing the selection queued is still to run.
        queued.armed = false;
        let keys = &region[..n_out];
        let vals: Vec<f32> = region[n_out..words]
            .iter()
            .flat_map(|w| [f32::from_bits(*w as u32), f32::from_bits((*w >> 32) as u32)])
            .take(n_out)
            .collect();
        let mut ids_out = Vec::with_capacity(n_segments * k);
        let mut scores_out = Vec::with_capacity(n_segments * k);
        let mut order: Vec<usize> = Vec::with_capacity(k);
        let seg_len = match self.segments {
            Segments::Dense { seg_len, .. } => seg_len as u64,
            Segments::Ragged { .. } => u64::from(u32::MAX) + 1,
        };
        for s in 0..n_segments {
            order.clear();
            order.extend(s * k..(s + 1) * k);
            order.sort_unstable_by_key(|&i| keys[i]);
            for &i in &order {
                // Every selected key names a position of its segment (dense) or a candidate id; a key that
                // does not is a device fault, reported instead of returned as an answer.
                if keys[i] == 0 || u64::from(keys[i] as u32) >= seg_len {
                    return Err(bad_answer(
                        K,
                        format!("the device selected an invalid key {:#x}", keys[i]),
                    ));
                }
                ids_out.push(keys[i] as u32);
                scores_out.push(vals[i]);
            }
        }
        Ok(TopKResult {
            k,
            ids: ids_out,
            scores: scores_out,
        })
    }
}

/// The input of one `topk_small` level: f32 scores or u64 keys, `len` per segment (or fewer: `counts`).
#[derive(Debug, Clone, Copy)]
struct LevelInput {
    ptr: u64,
    keys: bool,
    len: usize,
    counts: u64,
}

/// Selection outputs of at most this many u64 words (8 MiB) come back through a page-locked buffer that
/// the host reads after the selection's fence; larger ones are copied into pageable memory.
const PINNED_OUT_WORDS: usize = 1 << 20;

/// From this segment length on, small-k selection filters by a threshold (two reads of the scores) instead
/// of running `topk_small` levels over the scores.
pub const FILTER_MIN_LEN: usize = 65_536;

/// A spreading graph on the device: the transposed (pull-order) CSR arrays, the forward targets (for sparse
/// frontiers), and the per-call buffers of spreading, kept with it so that a call allocates nothing.
#[derive(Debug)]
pub struct DeviceGraph {
    pub(crate) n_nodes: usize,
    pub(crate) n_edges: usize,
    /// Node ids by in-degree class (hubs, > 16, 9-16, <= 8 in-edges), one list after the other.
    pub(crate) n_class: [u32; 4],
    pub(crate) nodes: CudaSlice<u32>,
    /// `start << 16 | count` of each entry of `nodes` (hub entries 0), or none if an offset needs more than 48
    /// bits: `SpreadHopParams::spans`.
    pub(crate) spans: Option<CudaSlice<u64>>,
    pub(crate) in_ptr: CudaSlice<u64>,
    /// The in-edges' sources and weights in pull order, except that each hub's are in [`hub_order`].
    pub(crate) in_src: CudaSlice<u32>,
    pub(crate) in_w: CudaSlice<f32>,
    /// The original (push-order) out-edges: offsets and targets.
    pub(crate) out_ptr: CudaSlice<u64>,
    pub(crate) out_dst: CudaSlice<u32>,
    /// Host copy of `out_ptr`, for deciding the first hop's form without a device round trip.
    pub(crate) out_ptr_host: Vec<u64>,
    /// Buffers and streams of `Kernels::spread_graph`, made on demand and reused (one per concurrent call).
    pub(crate) slots: crate::spread::SpreadSlots,
}

impl DeviceGraph {
    pub fn n_nodes(&self) -> usize {
        self.n_nodes
    }

    /// Number of edges.
    pub fn n_edges(&self) -> usize {
        self.n_edges
    }
}

/// The device order of one hub's in-edges (`spread_hub`): group by group of `spread_hub_groups(len)`, group
/// `g` holding positions `g, g + G, g + 2 G, ...` in order, so that each block of the hub reads its slots as one
/// run instead of one word in every `G`. The sums do not change: every lane chain still takes its positions in
/// order.
pub(crate) fn hub_order<T: Copy>(edges: &[T], out: &mut Vec<T>) {
    let groups = recall_kernel_shared::spread_hub_groups(edges.len() as u64) as usize;
    for g in 0..groups {
        out.extend(edges.iter().skip(g).step_by(groups));
    }
}

/// `edges` with each of the ascending, disjoint position `ranges` (the hubs') in [`hub_order`]: what the device
/// holds once a graph's upload has overwritten its hubs' ranges (the tests' statement of it).
#[cfg(test)]
fn with_hubs_in_order<T: Copy>(edges: &[T], ranges: &[(usize, usize)]) -> Vec<T> {
    let mut out = Vec::with_capacity(edges.len());
    let mut at = 0;
    for &(start, end) in ranges {
        out.extend_from_slice(&edges[at..start]);
        hub_order(&edges[start..end], &mut out);
        at = end;
    }
    out.extend_from_slice(&edges[at..]);
    out
}

/// Points per block of the k-means inertia sum (`docs/numerics.md`).
pub const INERTIA_BLOCK: usize = 256;

/// CSR offsets (`usize`, as `recall_cpu_simd::SpreadGraph` holds them) as the u64 values
/// [`Kernels::upload_graph`] takes: the caller's own memory where `usize` is 64 bits (no copy: 8 MB an array for a
/// million nodes), a converted copy elsewhere.
pub fn offsets_u64(p: &[usize]) -> std::borrow::Cow<'_, [u64]> {
    #[cfg(target_pointer_width = "64")]
    {
        // SAFETY: on a 64-bit target `usize` and `u64` have the same size, alignment and valid bit patterns, so
        // the view reads exactly `p`'s values, borrowed for `p`'s lifetime.
        std::borrow::Cow::Borrowed(unsafe {
            std::slice::from_raw_parts(p.as_ptr().cast::<u64>(), p.len())
        })
    }
    #[cfg(not(target_pointer_width = "64"))]
    {
        std::borrow::Cow::Owned(p.iter().map(|&x| x as u64).collect())
    }
}

/// How [`Kernels::upload_graph_with`] moves each of a graph's arrays from host memory into a new device buffer:
/// [`PageableUpload`] (one `cuMemcpyHtoDAsync` from the caller's memory per array), or the caller's own way (the
/// executor stages large arrays through its pinned staging ring). The launcher decides what goes up (the device
/// layout of the graph); the uploader only how.
///
/// The launcher trusts what an uploader returns: the spreading kernels index the graph by the values these buffers
/// hold, checked on the host before they went up. Each method must return a buffer of `gpu`'s context that holds
/// exactly `src`'s values once its copy has landed, with that copy ordered before the work queued on `gpu`'s stream
/// after the method returns. A buffer's length is checked (a short one is a shape error); its contents and their
/// ordering cannot be, so implement it only by copying `src` as it is ([`PageableUpload`], the executor's staging).
pub trait GraphUpload {
    /// The uploader's error. The launcher's own failures (the graph's checks, its other allocations, the final
    /// wait) are converted into it.
    type Error: From<KernelError>;
    /// A new buffer of `src.len()` values holding `src`, allocated on `gpu`'s stream, whose copy is ordered before
    /// the work queued on `gpu`'s stream after this returns (the same stream, or an event). `src` may change once
    /// this returns.
    fn upload_u32(&mut self, gpu: &Gpu, src: &[u32]) -> Result<CudaSlice<u32>, Self::Error>;
    /// As [`GraphUpload::upload_u32`], for u64 values (offsets, spans).
    fn upload_u64(&mut self, gpu: &Gpu, src: &[u64]) -> Result<CudaSlice<u64>, Self::Error>;
    /// As [`GraphUpload::upload_u32`], for f32 values (weights).
    fn upload_f32(&mut self, gpu: &Gpu, src: &[f32]) -> Result<CudaSlice<f32>, Self::Error>;
}

/// [`GraphUpload`] by one pageable copy per array on the handle's stream (`Gpu::upload`): what
/// [`Kernels::upload_graph`] uses.
#[derive(Debug, Clone, Copy, Default)]
pub struct PageableUpload;

impl GraphUpload for PageableUpload {
    type Error = KernelError;
    fn upload_u32(&mut self, gpu: &Gpu, src: &[u32]) -> Result<CudaSlice<u32>, KernelError> {
        Ok(gpu.upload(src)?)
    }
    fn upload_u64(&mut self, gpu: &Gpu, src: &[u64]) -> Result<CudaSlice<u64>, KernelError> {
        Ok(gpu.upload(src)?)
    }
    fn upload_f32(&mut self, gpu: &Gpu, src: &[f32]) -> Result<CudaSlice<f32>, KernelError> {
        Ok(gpu.upload(src)?)
    }
}

/// The host side of a graph's upload: the checks, and the arrays as the device holds them (nodes binned by
/// in-degree class, each non-hub's span, the hubs' in-edges in [`hub_order`]). The edge arrays go up as the
/// caller's own; each hub's range is then overwritten on the device by its edges in hub order (`hubs`: the
/// ranges, ascending; `hub_src`, `hub_w`: their edges in hub order, back to back). Rebuilding both edge arrays on the
/// host for the hubs' few per cent of edges took 66-69 ms of a 1 M-node, 16 M-edge graph's upload (development VM).
#[derive(Debug)]
struct GraphLayout {
    n: usize,
    n_class: [u32; 4],
    nodes: Vec<u32>,
    spans: Option<Vec<u64>>,
    hubs: Vec<(usize, usize)>,
    hub_src: Vec<u32>,
    hub_w: Vec<f32>,
}

/// The edges of each of the `hubs`' ranges of `edges` in [`hub_order`], back to back: the hubs in parallel on the
/// host pool (a strided read of each range).
fn hubs_in_order<T: Copy + Send + Sync>(edges: &[T], hubs: &[(usize, usize)]) -> Vec<T> {
    use rayon::prelude::*;
    let one = |&(start, end): &(usize, usize)| {
        let mut out = Vec::with_capacity(end - start);
        hub_order(&edges[start..end], &mut out);
        out
    };
    if hubs.len() > 1 {
        crate::on_host_pool(|| hubs.par_iter().map(one).collect::<Vec<_>>()).concat()
    } else {
        hubs.iter().flat_map(one).collect()
    }
}

/// A [`GraphUpload`] method's answer for `src`, its buffer's length checked: a short buffer is a shape error, not
/// a kernel reading past it.
fn uploaded<T, E: From<KernelError>>(
    what: &str,
    src: &[T],
    buf: Result<CudaSlice<T>, E>,
) -> Result<CudaSlice<T>, E> {
    let buf = buf?;
    need_len("upload_graph", what, &buf, src.len())?;
    Ok(buf)
}

/// Nodes per task of [`GraphLayout::new`]'s parallel passes (binning, spans).
const LAYOUT_PIECE: usize = 1 << 16;

/// Ids per task of [`first_at_or_above`]'s parallel maximum.
const ID_CHECK_PIECE: usize = 1 << 20;

/// The first id of `ids` that is `n` or more, if any: a maximum first (vectorised, in parallel pieces on the host
/// pool from two pieces up), the position only when it fails. A search for the first bad id, one branch an id,
/// took 34 ms over a 16 M-edge graph's two id arrays (development VM); the maximum, 19 ms on one thread.
fn first_at_or_above(ids: &[u32], n: usize) -> Option<u32> {
    let max_of = |c: &[u32]| c.iter().copied().max().unwrap_or(0);
    let max = if ids.len() >= 2 * ID_CHECK_PIECE {
        use rayon::prelude::*;
        crate::on_host_pool(|| {
            ids.par_chunks(ID_CHECK_PIECE)
                .map(max_of)
                .max()
                .unwrap_or(0)
        })
    } else {
        max_of(ids)
    };
    if (max as usize) < n {
        return None;
    }
    ids.iter().copied().find(|&x| x as usize >= n)
}

impl GraphLayout {
    /// See [`Kernels::upload_graph`] for what is checked.
    fn new(
        in_ptr: &[u64],
        in_src: &[u32],
        in_w: &[f32],
        out_ptr: &[u64],
        out_dst: &[u32],
    ) -> Result<GraphLayout, KernelError> {
        use rayon::prelude::*;
        const K: &str = "spread_hop";
        let n = in_ptr
            .len()
            .checked_sub(1)
            .ok_or_else(|| shape(K, "in_ptr is empty"))?;
        if n == 0 || in_src.len() != in_w.len() {
            return Err(shape(K, "need at least one node and one weight per edge"));
        }
        check_offsets(K, in_ptr, n, in_src.len())?;
        to_u32(K, "n_nodes", n)?;
        if let Some(bad) = first_at_or_above(in_src, n) {
            return Err(shape(
                K,
                format!("source {bad} is not below the node count {n}"),
            ));
        }
        if out_ptr.len() != n + 1 || out_dst.len() != in_src.len() {
            return Err(shape(
                K,
                "the out-edge arrays do not describe the same graph",
            ));
        }
        check_offsets(K, out_ptr, n, out_dst.len())?;
        if let Some(bad) = first_at_or_above(out_dst, n) {
            return Err(shape(
                K,
                format!("target {bad} is not below the node count {n}"),
            ));
        }
        let degree = |v: usize| in_ptr[v + 1] - in_ptr[v];
        let class = |v: usize| match degree(v) {
            d if d >= recall_kernel_shared::SPREAD_HUB_MIN => 0,
            d if d > 16 => 1,
            d if d > 8 => 2,
            _ => 3,
        };
        // The nodes of each class, ascending: pieces of nodes binned in parallel on the host pool, then joined in
        // order (a piece is the whole graph below two pieces).
        let bin = |r: std::ops::Range<usize>| {
            let mut lists: [Vec<u32>; 4] = Default::default();
            for v in r {
                lists[class(v)].push(v as u32);
            }
            lists
        };
        let pieces: Vec<[Vec<u32>; 4]> = if n >= 2 * LAYOUT_PIECE {
            crate::on_host_pool(|| {
                (0..n.div_ceil(LAYOUT_PIECE))
                    .into_par_iter()
                    .map(|p| bin(p * LAYOUT_PIECE..((p + 1) * LAYOUT_PIECE).min(n)))
                    .collect()
            })
        } else {
            vec![bin(0..n)]
        };
        let n_class = [0, 1, 2, 3].map(|c| pieces.iter().map(|p| p[c].len()).sum::<usize>() as u32);
        let mut nodes = Vec::with_capacity(n);
        for c in 0..4 {
            for p in &pieces {
                nodes.extend_from_slice(&p[c]);
            }
        }
        drop(pieces);
        let n_hubs = n_class[0] as usize;
        let hubs: Vec<(usize, usize)> = nodes[..n_hubs]
            .iter()
            .map(|&v| (in_ptr[v as usize] as usize, in_ptr[v as usize + 1] as usize))
            .collect();
        let hub_src = hubs_in_order(in_src, &hubs);
        let hub_w = hubs_in_order(in_w, &hubs);
        // Below the hub class a count fits 16 bits (SPREAD_HUB_MIN <= 65,536); the start needs 48.
        let span = |(i, &v): (usize, &u32)| {
            let v = v as usize;
            if i < n_hubs {
                0
            } else {
                (in_ptr[v] << 16) | degree(v)
            }
        };
        let spans = (in_src.len() < 1 << 48).then(|| {
            if n >= 2 * LAYOUT_PIECE {
                crate::on_host_pool(|| {
                    nodes
                        .par_iter()
                        .enumerate()
                        .with_min_len(LAYOUT_PIECE)
                        .map(span)
                        .collect()
                })
            } else {
                nodes.iter().enumerate().map(span).collect()
            }
        });
        Ok(GraphLayout {
            n,
            n_class,
            nodes,
            spans,
            hubs,
            hub_src,
            hub_w,
        })
    }
}

impl Kernels {
    /// Upload a pull-order graph (in-edges of each target sorted by source: `recall_cpu_simd::SpreadGraph`).
    /// Checked here: `in_ptr` has `n + 1` non-decreasing entries from 0 to the edge count, the edge arrays
    /// agree in length, every source is below `n`. The kernel then never reads outside the graph. Waits for
    /// the uploads before returning, so that spreading may read the graph from any stream.
    ///
    /// `out_ptr`/`out_dst` are the same edges in their original (push) order, source by source: checked the
    /// same way (`out_ptr` has `n + 1` non-decreasing entries from 0 to the edge count, every target below `n`).
    ///
    /// Each array goes up in one pageable copy ([`PageableUpload`]); [`Kernels::upload_graph_with`] takes another
    /// way.
    pub fn upload_graph(
        &self,
        gpu: &Gpu,
        in_ptr: &[u64],
        in_src: &[u32],
        in_w: &[f32],
        out_ptr: &[u64],
        out_dst: &[u32],
    ) -> Result<DeviceGraph, KernelError> {
        self.upload_graph_with(
            gpu,
            in_ptr,
            in_src,
            in_w,
            out_ptr,
            out_dst,
            &mut PageableUpload,
        )
    }

    /// [`Kernels::upload_graph`] with each array moved to the device by `up` (for example through pinned
    /// staging). The same checks, the same layout; waits on `gpu`'s stream before returning, so the graph is
    /// complete for any stream once this returns (`up` orders its copies before that stream's later work).
    #[allow(clippy::too_many_arguments)]
    pub fn upload_graph_with<U: GraphUpload>(
        &self,
        gpu: &Gpu,
        in_ptr: &[u64],
        in_src: &[u32],
        in_w: &[f32],
        out_ptr: &[u64],
        out_dst: &[u32],
        up: &mut U,
    ) -> Result<DeviceGraph, U::Error> {
        let layout = GraphLayout::new(in_ptr, in_src, in_w, out_ptr, out_dst)?;
        let zeros_u32 = || gpu.alloc_zeros::<u32>(1).map_err(KernelError::from);
        let (in_src_dev, in_w_dev) = if in_src.is_empty() {
            (
                zeros_u32()?,
                gpu.alloc_zeros::<f32>(1).map_err(KernelError::from)?,
            )
        } else {
            let mut src = uploaded("in_src", in_src, up.upload_u32(gpu, in_src))?;
            let mut w = uploaded("in_w", in_w, up.upload_f32(gpu, in_w))?;
            // The hubs' ranges in hub order, over the caller's order just uploaded: on `gpu`'s stream, after
            // those copies (`GraphUpload`'s contract).
            let mut at = 0;
            for &(start, end) in &layout.hubs {
                let len = end - start;
                gpu.upload_at(&layout.hub_src[at..at + len], &mut src, start)
                    .map_err(KernelError::from)?;
                gpu.upload_at(&layout.hub_w[at..at + len], &mut w, start)
                    .map_err(KernelError::from)?;
                at += len;
            }
            (src, w)
        };
        let spans = match &layout.spans {
            Some(spans) => Some(uploaded("spans", spans, up.upload_u64(gpu, spans))?),
            None => None,
        };
        let out_dst_dev = if out_dst.is_empty() {
            zeros_u32()?
        } else {
            uploaded("out_dst", out_dst, up.upload_u32(gpu, out_dst))?
        };
        let graph = DeviceGraph {
            n_nodes: layout.n,
            n_edges: in_src.len(),
            n_class: layout.n_class,
            nodes: uploaded("nodes", &layout.nodes, up.upload_u32(gpu, &layout.nodes))?,
            spans,
            in_ptr: uploaded("in_ptr", in_ptr, up.upload_u64(gpu, in_ptr))?,
            in_src: in_src_dev,
            in_w: in_w_dev,
            out_ptr: uploaded("out_ptr", out_ptr, up.upload_u64(gpu, out_ptr))?,
            out_dst: out_dst_dev,
            out_ptr_host: out_ptr.to_vec(),
            slots: crate::spread::SpreadSlots::default(),
        };
        // Spreading runs on streams of its own (`SpreadSlots`): the graph is complete before it is handed out.
        gpu.synchronize().map_err(KernelError::from)?;
        Ok(graph)
    }

    /// k-means assignment: `keys[p] = min over centroids c of (score_key(l2sq(p, c)) << 32 | c)`, i.e. the
    /// nearest centroid with ties to the lower index and its distance, without writing the distances.
    #[allow(clippy::too_many_arguments)]
    pub fn kmeans_assign(
        &self,
        gpu: &Gpu,
        points: &CudaSlice<f32>,
        n_points: usize,
        dim: usize,
        centroids: &CudaSlice<f32>,
        k: usize,
        keys: &mut CudaSlice<u64>,
    ) -> Result<(), KernelError> {
        const K: &str = "gemm_l2_argmin";
        if n_points == 0 || k == 0 || dim == 0 {
            return Err(shape(K, "points, clusters and dim must be at least 1"));
        }
        need_len(K, "points", points, elems(K, n_points, dim)?)?;
        need_len(K, "centroids", centroids, elems(K, k, dim)?)?;
        need_len(K, "keys", keys, n_points)?;
        to_u32(K, "n_points", n_points)?;
        self.fill_u64(gpu, keys, n_points, u64::MAX)?;
        let per_launch = MAX_GRID_Y * GEMM_TILE as usize;
        let k32 = to_u32(K, "k", k)?;
        let (func, smem) = match self.sgemm_for(dim) {
            Some(g) => (&g.l2_argmin, SGEMM_SMEM_BYTES),
            None => (&self.gemm_l2_argmin, GEMM_SMEM_BYTES),
        };
        let mut p0 = 0;
        while p0 < n_points {
            let m = per_launch.min(n_points - p0);
            let params = SimParams {
                queries: gpu.device_ptr(points) + (p0 * dim * 4) as u64,
                query_norms: 0,
                corpus: gpu.device_ptr(centroids),
                corpus_norms: 0,
                out: gpu.device_ptr(keys) + (p0 * 8) as u64,
                ids: 0,
                offsets: 0,
                n_queries: m as u32,
                n_rows: k32,
                dim: to_u32(K, "dim", dim)?,
                _pad: 0,
            };
            let cfg = LaunchConfig {
                grid_dim: (k32.div_ceil(GEMM_TILE), (m as u32).div_ceil(GEMM_TILE), 1),
                block_dim: (GEMM_THREADS, 1, 1),
                shared_mem_bytes: smem,
            };
            // SAFETY: points, centroids and keys were checked for the sizes the kernel uses for points
            // p0 .. p0 + m; grid and shared memory as the GEMM kernel (either one) documents; the sm80
            // kernel only for dim <= SGEMM_MAX_DIM.
            unsafe { gpu.launch(func, cfg, params) }?;
            p0 += m;
        }
        Ok(())
    }

    /// The iteration's inertia from the assignment keys, in the contract's order: f64 sums of blocks of
    /// [`INERTIA_BLOCK`] points on the device, the block sums added in order on the host.
    pub fn kmeans_inertia(
        &self,
        gpu: &Gpu,
        keys: &CudaSlice<u64>,
        n_points: usize,
    ) -> Result<f64, KernelError> {
        const K: &str = "kmeans_inertia_blocks";
        need_len(K, "keys", keys, n_points)?;
        let n_blocks = n_points.div_ceil(INERTIA_BLOCK);
        let sums = gpu.alloc_zeros::<f64>(n_blocks.max(1))?;
        let params = InertiaParams {
            keys: gpu.device_ptr(keys),
            block_sums: gpu.device_ptr(&sums),
            n_points: to_u32(K, "n_points", n_points)?,
            block: INERTIA_BLOCK as u32,
        };
        let cfg = LaunchConfig {
            grid_dim: (to_u32(K, "blocks", n_blocks.div_ceil(256))?, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: keys holds n_points values, sums one f64 per block; the grid covers every block.
        unsafe { gpu.launch(&self.kmeans_inertia_blocks, cfg, params) }?;
        let host = gpu.download(&sums)?;
        Ok(host[..n_blocks].iter().fold(0.0f64, |acc, s| acc + s))
    }

    /// Centroid update from the members of each cluster (point ids ascending within a cluster, `offsets`
    /// with `k + 1` entries), checked here; an empty cluster keeps its centroid.
    #[allow(clippy::too_many_arguments)]
    pub fn kmeans_update(
        &self,
        gpu: &Gpu,
        points: &CudaSlice<f32>,
        n_points: usize,
        dim: usize,
        members: &[u32],
        offsets: &[u32],
        centroids: &mut CudaSlice<f32>,
    ) -> Result<(), KernelError> {
        const K: &str = "kmeans_update";
        let k = offsets
            .len()
            .checked_sub(1)
            .ok_or_else(|| shape(K, "offsets is empty"))?;
        need_len(K, "points", points, elems(K, n_points, dim)?)?;
        need_len(K, "centroids", centroids, elems(K, k, dim)?)?;
        let offsets64: Vec<u64> = offsets.iter().map(|&o| u64::from(o)).collect();
        check_offsets(K, &offsets64, k, members.len())?;
        if let Some(bad) = members.iter().find(|&&m| m as usize >= n_points) {
            return Err(shape(K, format!("member {bad} is not a point")));
        }
        let members_dev = gpu.upload(if members.is_empty() {
            &[0u32][..]
        } else {
            members
        })?;
        let offsets_dev = gpu.upload(offsets)?;
        let params = CentroidParams {
            points: gpu.device_ptr(points),
            members: gpu.device_ptr(&members_dev),
            offsets: gpu.device_ptr(&offsets_dev),
            centroids: gpu.device_ptr(centroids),
            n_clusters: to_u32(K, "k", k)?,
            dim: to_u32(K, "dim", dim)?,
        };
        let cfg = LaunchConfig {
            grid_dim: (to_u32(K, "blocks", elems(K, k, dim)?.div_ceil(256))?, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: members (all below n_points) and offsets were validated and uploaded as they are; points
        // and centroids were checked for their sizes; the grid covers k * dim threads.
        unsafe { gpu.launch(&self.kmeans_update, cfg, params) }?;
        Ok(())
    }
}

impl Kernels {
    /// Every Box-Muller radius clip-and-noise can produce, computed on the device: `out[i] =
    /// math::box_muller_radius(i << 9)` for `i <` [`NOISE_RADII`] (the diff-test compares them with the host's,
    /// which covers every input of the device's `sqrt_in_range` and of the tables' lookups in `ln_unit`).
    pub fn noise_radii(&self, gpu: &Gpu) -> Result<Vec<f32>, KernelError> {
        const K: &str = "noise_radii";
        let out = gpu.alloc_zeros::<f32>(NOISE_RADII as usize)?;
        let params = RadiiParams {
            out: gpu.device_ptr(&out),
            len: NOISE_RADII,
            _pad: 0,
        };
        let cfg = LaunchConfig {
            grid_dim: (
                to_u32(K, "blocks", (NOISE_RADII as usize).div_ceil(256))?,
                1,
                1,
            ),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: out holds NOISE_RADII f32; one thread per radius, the rest return.
        unsafe { gpu.launch(&self.noise_radii, cfg, params) }?;
        Ok(gpu.download(&out)?)
    }

    /// Clip-and-noise of the `n_rows x dim` rows of `x` into `out` (`docs/numerics.md`): row norms, then
    /// one thread per 4 values with the shared Philox stream of `seed`.
    #[allow(clippy::too_many_arguments)]
    pub fn clip_noise(
        &self,
        gpu: &Gpu,
        x: &CudaSlice<f32>,
        n_rows: usize,
        dim: usize,
        clip: f32,
        sigma: f32,
        seed: u64,
        out: &mut CudaSlice<f32>,
    ) -> Result<(), KernelError> {
        const K: &str = "clip_noise";
        if n_rows == 0 || dim == 0 {
            return Err(shape(K, "n_rows and dim must be at least 1"));
        }
        need_len(K, "x", x, elems(K, n_rows, dim)?)?;
        need_len(K, "out", out, elems(K, n_rows, dim)?)?;
        let key = recall_kernel_shared::math::philox_key(seed);
        let one_pass = self.clip_noise_rows_plan(dim).filter(|_| {
            gpu.device_ptr(x).is_multiple_of(16) && gpu.device_ptr(out).is_multiple_of(16)
        });
        let mut params = NoiseParams {
            x: gpu.device_ptr(x),
            norms: 0,
            out: gpu.device_ptr(out),
            n_rows: to_u32(K, "n_rows", n_rows)?,
            dim: to_u32(K, "dim", dim)?,
            clip,
            sigma,
            key,
            rows_per_block: 0,
            _pad: 0,
        };
        if let Some((func, r, _)) = one_pass {
            params.rows_per_block = r;
            let cfg = LaunchConfig {
                grid_dim: (to_u32(K, "blocks", n_rows.div_ceil(r as usize))?, 1, 1),
                block_dim: (NOISE_THREADS, 1, 1),
                shared_mem_bytes: noise_rows_shared_bytes(r, dim as u32),
            };
            // SAFETY: dim is a multiple of 4, x and out 16-byte aligned with n_rows * dim f32 each; one block
            // per r rows, 1 <= r <= NOISE_ROWS_MAX, with the shared memory of r rows of dim values (within
            // what the function was opted into at load).
            unsafe { gpu.launch(func, cfg, params) }?;
            return Ok(());
        }
        let mut norms = gpu.alloc_zeros::<f32>(n_rows)?;
        self.row_norms_f32(gpu, x, n_rows, dim, &mut norms)?;
        let threads = elems(K, n_rows, dim.div_ceil(4))?;
        params.norms = gpu.device_ptr(&norms);
        let cfg = LaunchConfig {
            grid_dim: (to_u32(K, "blocks", threads.div_ceil(256))?, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: x and out hold n_rows * dim f32, norms n_rows; the grid covers every 4-value block.
        unsafe { gpu.launch(&self.clip_noise, cfg, params) }?;
        Ok(())
    }
}

/// Host buffers one k-means iteration reuses (sized for `n` points and `k` clusters).
#[derive(Debug, Clone, Default)]
pub struct KMeansScratch {
    keys: Vec<u64>,
    offsets: Vec<u32>,
    members: Vec<u32>,
}

/// Points per piece of [`group_by_cluster`]'s parallel passes: below two pieces it runs on the calling thread.
const GROUP_PIECE: usize = 1 << 16;

/// A stable counting sort of the points by cluster, in parallel pieces: `assignments[p]` = the cluster in
/// `keys[p]`'s low half, `members` the point ids grouped by cluster, ascending within each, `offsets` (`k + 1`
/// entries) where each cluster's starts. Each piece counts its points' clusters, the counts give every
/// (cluster, piece) its own range of `members`, and each piece fills its ranges in point order: the same
/// lists as one pass in point order. `Err(cluster)` for a key that names no cluster below `k`. The host half
/// of [`Kernels::kmeans_iteration`], between the keys' download and [`Kernels::kmeans_update`].
pub fn group_by_cluster(
    keys: &[u64],
    k: usize,
    assignments: &mut [u32],
    offsets: &mut Vec<u32>,
    members: &mut Vec<u32>,
) -> Result<(), u32> {
    use rayon::prelude::*;
    let n = keys.len();
    let piece = GROUP_PIECE.max(n.div_ceil(rayon::current_num_threads().max(1)));
    // 1. Each piece: its assignments and its clusters' counts.
    let counts: Vec<Vec<u32>> = assignments
        .par_chunks_mut(piece)
        .zip(keys.par_chunks(piece))
        .map(|(a, keys)| {
            let mut counts = vec![0u32; k];
            for (a, key) in a.iter_mut().zip(keys) {
                *a = *key as u32;
                *counts.get_mut(*a as usize).ok_or(*a)? += 1;
            }
            Ok(counts)
        })
        .collect::<Result<_, u32>>()?;
    // 2. Cluster starts, and each (piece, cluster) range inside its cluster's.
    offsets.clear();
    offsets.push(0);
    let mut total = 0u32;
    for c in 0..k {
        total += counts.iter().map(|cp| cp[c]).sum::<u32>();
        offsets.push(total);
    }
    members.clear();
    members.resize(n, 0);
    let mut ranges: Vec<Vec<&mut [u32]>> = counts.iter().map(|_| Vec::with_capacity(k)).collect();
    let mut rest: &mut [u32] = members;
    for c in 0..k {
        for (p, cp) in counts.iter().enumerate() {
            let (range, tail) = std::mem::take(&mut rest).split_at_mut(cp[c] as usize);
            ranges[p].push(range);
            rest = tail;
        }
    }
    // 3. Each piece fills its ranges in point order.
    ranges
        .into_par_iter()
        .zip(assignments.par_chunks(piece))
        .enumerate()
        .for_each(|(p, (mut ranges, a))| {
            let mut at = vec![0usize; k];
            for (i, &c) in a.iter().enumerate() {
                let c = c as usize;
                ranges[c][at[c]] = (p * piece + i) as u32;
                at[c] += 1;
            }
        });
    Ok(())
}

impl Kernels {
    /// One Lloyd iteration (`docs/numerics.md`, "k-means"): assignment (`gemm_l2_argmin`), the iteration's
    /// inertia, the members of each cluster in point order (a counting sort on the host, O(n)), and the
    /// centroid update. Writes each point's cluster into `assignments`; returns the inertia. A device answer
    /// that names no valid cluster is an error, not an answer.
    #[allow(clippy::too_many_arguments)]
    pub fn kmeans_iteration(
        &self,
        gpu: &Gpu,
        points: &CudaSlice<f32>,
        n_points: usize,
        dim: usize,
        centroids: &mut CudaSlice<f32>,
        k: usize,
        keys: &mut CudaSlice<u64>,
        assignments: &mut [u32],
        scratch: &mut KMeansScratch,
    ) -> Result<f64, KernelError> {
        const K: &str = "kmeans_iteration";
        if assignments.len() != n_points {
            return Err(shape(K, "one assignment per point"));
        }
        self.kmeans_assign(gpu, points, n_points, dim, centroids, k, keys)?;
        let inertia = self.kmeans_inertia(gpu, keys, n_points)?;
        scratch.keys.resize(n_points, 0);
        gpu.download_prefix(keys, &mut scratch.keys)?;
        // On the host pool: this call holds the device, and rayon's global workers may all be waiting for it.
        crate::on_host_pool(|| {
            group_by_cluster(
                &scratch.keys,
                k,
                assignments,
                &mut scratch.offsets,
                &mut scratch.members,
            )
        })
        .map_err(|a| {
            bad_answer(
                K,
                format!("the device assigned a point to cluster {a} of {k}"),
            )
        })?;
        self.kmeans_update(
            gpu,
            points,
            n_points,
            dim,
            &scratch.members,
            &scratch.offsets,
            centroids,
        )?;
        Ok(inertia)
    }
}

/// The kernels [`Kernels::clip_noise`] runs where the one-pass kernel does not (its
/// [`Kernels::clip_noise_kernels`]).
pub const CLIP_NOISE_TWO_PASS: &str = "row_norms_f32 + clip_noise";

/// Rows per `sm80_clip_noise_rows` block for rows of `dim` values: `preferred`, halved until the block fits
/// `limit` bytes of shared memory; `None` for a `dim` that is not a multiple of 4 or where one row does not fit.
fn noise_rows_for(dim: usize, preferred: u32, limit: u32) -> Option<u32> {
    let dim = u32::try_from(dim)
        .ok()
        .filter(|d| d.is_multiple_of(4) && *d <= 1 << 20)?;
    let mut r = preferred;
    while r >= 1 {
        if noise_rows_shared_bytes(r, dim) <= limit {
            return Some(r);
        }
        r /= 2;
    }
    None
}

/// Rows per `sm80_clip_noise_rows` block where they fit (`RECALL_CLIP_NOISE_ROWS`, 1 to 32, default 12), fewer
/// where they do not. 12 rows of 768 values (37 KiB) let six blocks share an SM where 16 let four: on an H200,
/// 1,976-1,995 us against 2,038-2,056 us for 1M x 768 (session 21, run E; with 16 rows every warp of a block
/// waits for its norm chains, and more blocks give the scheduler other warps meanwhile).
fn noise_rows_preferred() -> u32 {
    static ROWS: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *ROWS.get_or_init(|| {
        crate::env::env_number("RECALL_CLIP_NOISE_ROWS", 1..=NOISE_ROWS_MAX).unwrap_or(12)
    })
}

/// The dynamic shared memory `sm80_clip_noise_rows` may use: opted into blocks of 32 rows of 768 values or 16
/// of 1,536 (about 97 KiB) where the device allows it, else the 48 KiB every device gives.
pub(crate) fn noise_rows_opt_in(gpu: &Gpu, func: &CudaFunction) -> u32 {
    if gpu.allow_dynamic_shared(func, NOISE_ROWS_OPT_IN).is_ok() {
        NOISE_ROWS_OPT_IN
    } else {
        48 * 1024
    }
}

/// The shared memory `sm80_clip_noise_rows` asks to be opted into (32 rows of 768 values or 16 of 1,536).
const NOISE_ROWS_OPT_IN: u32 = {
    let (a, b) = (
        noise_rows_shared_bytes(NOISE_ROWS_MAX, 768),
        noise_rows_shared_bytes(16, 1536),
    );
    if a > b { a } else { b }
};

/// Device addresses of the norms a metric needs (cosine), checked for length; 0 for the others.
fn norm_ptrs(
    gpu: &Gpu,
    kernel: &'static str,
    metric: SimMetric,
    query_norms: Option<&CudaSlice<f32>>,
    n_queries: usize,
    corpus_norms: Option<&CudaSlice<f32>>,
    n_rows: usize,
) -> Result<(u64, u64), KernelError> {
    if metric != SimMetric::Cosine {
        return Ok((0, 0));
    }
    match (query_norms, corpus_norms) {
        (Some(qn), Some(cn)) => {
            need_len(kernel, "query_norms", qn, n_queries)?;
            need_len(kernel, "corpus_norms", cn, n_rows)?;
            Ok((gpu.device_ptr(qn), gpu.device_ptr(cn)))
        }
        _ => Err(shape(kernel, "cosine needs query and corpus norms")),
    }
}

/// Check per-query offsets (`n + 1` values, starting at 0, non-decreasing, ending at `total`); returns
/// the longest segment.
fn check_offsets(
    kernel: &'static str,
    offsets: &[u64],
    n: usize,
    total: usize,
) -> Result<usize, KernelError> {
    if offsets.len() != n + 1 {
        return Err(shape(
            kernel,
            format!(
                "{} offsets for {n} queries, expected {}",
                offsets.len(),
                n + 1
            ),
        ));
    }
    if offsets[0] != 0 || offsets[n] as usize != total {
        return Err(shape(kernel, format!("offsets must run from 0 to {total}")));
    }
    let mut longest = 0;
    for w in offsets.windows(2) {
        if w[1] < w[0] {
            return Err(shape(kernel, "offsets decrease"));
        }
        longest = longest.max((w[1] - w[0]) as usize);
    }
    Ok(longest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hub_order_puts_each_group_in_one_run_where_the_kernel_reads_it() {
        use recall_kernel_shared::{spread_hub_groups, spread_hub_run};
        for len in [4096usize, 8192, 8193, 20_000, 44_444, 170_001] {
            let edges: Vec<u32> = (0..len as u32).collect();
            let mut out = Vec::new();
            hub_order(&edges, &mut out);
            assert_eq!(out.len(), len);
            let groups = spread_hub_groups(len as u64) as usize;
            let mut covered = 0;
            for g in 0..groups {
                // Where the kernel reads group g: slot m must be position g + groups * m.
                let (first, slots) = spread_hub_run(len as u64, g as u32);
                let (first, slots) = (first as usize, slots as usize);
                assert_eq!(slots, (len - g).div_ceil(groups), "len {len}, group {g}");
                for m in 0..slots {
                    assert_eq!(
                        out[first + m] as usize,
                        g + groups * m,
                        "len {len}, group {g}, slot {m}"
                    );
                }
                covered += slots;
            }
            assert_eq!(covered, len);
        }
        // Only the hubs' ranges move.
        let edges: Vec<u32> = (0..20_000).collect();
        let moved = with_hubs_in_order(&edges, &[(100, 8300), (9000, 19_000)]);
        assert_eq!(moved[..100], edges[..100]);
        assert_eq!(moved[8300..9000], edges[8300..9000]);
        assert_eq!(moved[19_000..], edges[19_000..]);
        let mut sorted = moved.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, edges);
        assert_eq!(moved[9000 + 5000], 9000 + 1); // group 1 of the 10,000-edge hub starts at slot 5,000
    }

    /// A graph of 5 nodes whose in-degrees are one of each class (a hub of `SPREAD_HUB_MIN`, 17, 9, 8) and 0: the
    /// pull arrays (sources `(i * 7) % 5` in turn) and the same edges source by source.
    #[allow(clippy::type_complexity)]
    fn class_graph() -> (Vec<u64>, Vec<u32>, Vec<f32>, Vec<u64>, Vec<u32>) {
        let hub = recall_kernel_shared::SPREAD_HUB_MIN;
        let degrees = [hub, 17, 9, 8, 0];
        let mut in_ptr = vec![0u64];
        for d in degrees {
            in_ptr.push(in_ptr.last().copied().unwrap_or(0) + d);
        }
        let e = in_ptr[5] as usize;
        let in_src: Vec<u32> = (0..e).map(|i| (i * 7 % 5) as u32).collect();
        let in_w: Vec<f32> = (0..e).map(|i| i as f32 * 0.5).collect();
        let mut edges: Vec<(u32, u32)> = Vec::with_capacity(e);
        for v in 0..5 {
            for i in in_ptr[v]..in_ptr[v + 1] {
                edges.push((in_src[i as usize], v as u32));
            }
        }
        edges.sort_unstable();
        let mut out_ptr = vec![0u64; 6];
        for &(u, _) in &edges {
            out_ptr[u as usize + 1] += 1;
        }
        for u in 0..5 {
            out_ptr[u + 1] += out_ptr[u];
        }
        let out_dst = edges.iter().map(|&(_, v)| v).collect();
        (in_ptr, in_src, in_w, out_ptr, out_dst)
    }

    #[test]
    fn graph_layout_bins_nodes_spans_them_and_orders_hub_edges() {
        let (in_ptr, in_src, in_w, out_ptr, out_dst) = class_graph();
        let l = GraphLayout::new(&in_ptr, &in_src, &in_w, &out_ptr, &out_dst).unwrap();
        assert_eq!(l.n, 5);
        // One node per class, the node of no in-edges with the smallest.
        assert_eq!(l.n_class, [1, 1, 1, 2]);
        assert_eq!(l.nodes, [0, 1, 2, 3, 4]);
        let span = |v: usize| (in_ptr[v] << 16) | (in_ptr[v + 1] - in_ptr[v]);
        assert_eq!(
            l.spans.as_deref(),
            Some(&[0, span(1), span(2), span(3), span(4)][..])
        );
        // The hub's in-edges (node 0's, the first 4,096) in hub order, to be written over the caller's order: the
        // device then holds `with_hubs_in_order`'s arrays.
        let hub = (0, in_ptr[1] as usize);
        assert_eq!(l.hubs, [hub]);
        let patched = |edges: &[u32], order: &[u32]| {
            let mut e = edges.to_vec();
            e[hub.0..hub.1].copy_from_slice(order);
            e
        };
        assert_eq!(
            patched(&in_src, &l.hub_src),
            with_hubs_in_order(&in_src, &[hub])
        );
        let w_bits: Vec<u32> = in_w.iter().map(|x| x.to_bits()).collect();
        let hub_w_bits: Vec<u32> = l.hub_w.iter().map(|x| x.to_bits()).collect();
        let want_w: Vec<u32> = with_hubs_in_order(&in_w, &[hub])
            .iter()
            .map(|x| x.to_bits())
            .collect();
        assert_eq!(patched(&w_bits, &hub_w_bits), want_w);

        // Without a hub nothing is written over the caller's order.
        let cut = in_ptr[1];
        let ptr: Vec<u64> = in_ptr[1..].iter().map(|&p| p - cut).collect();
        let src: Vec<u32> = in_src[cut as usize..].iter().map(|&s| s % 4).collect();
        let w = &in_w[cut as usize..];
        let dst: Vec<u32> = (0..src.len() as u32).map(|i| i % 4).collect();
        let mut optr = vec![0u64; 5];
        optr[4] = src.len() as u64;
        let l = GraphLayout::new(&ptr, &src, w, &optr, &dst).unwrap();
        assert_eq!(l.n_class, [0, 1, 1, 2]);
        assert_eq!(l.nodes, [0, 1, 2, 3]);
        assert!(l.hubs.is_empty() && l.hub_src.is_empty() && l.hub_w.is_empty());
    }

    /// The id check finds the first id at or above the bound, in one piece and over several (the parallel
    /// maximum), and none when every id is below it.
    #[test]
    fn first_at_or_above_finds_the_first_bad_id() {
        for len in [0usize, 1, 1000, 2 * ID_CHECK_PIECE + 17] {
            let mut ids: Vec<u32> = (0..len as u32).map(|i| i % 1000).collect();
            assert_eq!(first_at_or_above(&ids, 1000), None, "len {len}");
            if len > 0 {
                assert_eq!(
                    first_at_or_above(&ids, 999),
                    Some(999).filter(|_| len >= 1000),
                    "len {len}"
                );
                let (a, b) = (len * 3 / 4, len - 1);
                ids[a] = 4000;
                ids[b] = 5000;
                let want = if a == b { 5000 } else { 4000 };
                assert_eq!(first_at_or_above(&ids, 1000), Some(want), "len {len}");
            }
        }
    }

    /// A graph large enough for the layout's parallel passes (binning, spans, hubs in parallel) gets what one plain
    /// pass over the nodes gives: classes and nodes in ascending order per class, spans, and the hubs' ranges in hub
    /// order once written over the caller's arrays.
    #[test]
    fn graph_layout_in_parallel_pieces_matches_one_plain_pass() {
        let n = 2 * LAYOUT_PIECE + 4321;
        let hub = recall_kernel_shared::SPREAD_HUB_MIN as usize;
        let mut in_ptr = vec![0u64];
        let mut x = 0x2545_F491_u32;
        for v in 0..n {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            let d = match v {
                7 | 70_000 | 135_000 => hub + (x as usize % 3000),
                _ => (x >> 27) as usize, // 0 to 31: the three small classes
            };
            in_ptr.push(in_ptr[v] + d as u64);
        }
        let e = in_ptr[n] as usize;
        let in_src: Vec<u32> = (0..e).map(|i| (i * 7919 % n) as u32).collect();
        let in_w: Vec<f32> = (0..e).map(|i| (i % 1000) as f32 * 0.25).collect();
        let out_ptr: Vec<u64> = (0..=n).map(|v| (v * e / n) as u64).collect();
        let out_dst: Vec<u32> = (0..e).map(|i| (i % n) as u32).collect();
        let l = GraphLayout::new(&in_ptr, &in_src, &in_w, &out_ptr, &out_dst).unwrap();
        let degree = |v: usize| (in_ptr[v + 1] - in_ptr[v]) as usize;
        let class = |v: usize| match degree(v) {
            d if d >= hub => 0,
            d if d > 16 => 1,
            d if d > 8 => 2,
            _ => 3,
        };
        let mut lists: [Vec<u32>; 4] = Default::default();
        for v in 0..n {
            lists[class(v)].push(v as u32);
        }
        assert_eq!(l.n_class, [0, 1, 2, 3].map(|c| lists[c].len() as u32));
        assert_eq!(l.n_class[0], 3);
        let nodes = lists.concat();
        assert_eq!(l.nodes, nodes);
        let spans: Vec<u64> = nodes
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                if i < 3 {
                    0
                } else {
                    (in_ptr[v as usize] << 16) | degree(v as usize) as u64
                }
            })
            .collect();
        assert_eq!(l.spans.as_deref(), Some(&spans[..]));
        let ranges: Vec<(usize, usize)> = [7, 70_000, 135_000]
            .map(|v| (in_ptr[v] as usize, in_ptr[v + 1] as usize))
            .to_vec();
        assert_eq!(l.hubs, ranges);
        let mut src = in_src.clone();
        let mut w = in_w.clone();
        let mut at = 0;
        for &(a, b) in &l.hubs {
            src[a..b].copy_from_slice(&l.hub_src[at..at + b - a]);
            w[a..b].copy_from_slice(&l.hub_w[at..at + b - a]);
            at += b - a;
        }
        assert_eq!(at, l.hub_src.len());
        assert_eq!(src, with_hubs_in_order(&in_src, &ranges));
        assert_eq!(w, with_hubs_in_order(&in_w, &ranges));
    }

    #[test]
    fn graph_layout_refuses_what_the_kernels_would_read_outside_of() {
        let (in_ptr, in_src, in_w, out_ptr, out_dst) = class_graph();
        let refused = |ip: &[u64], s: &[u32], w: &[f32], op: &[u64], d: &[u32]| {
            matches!(
                GraphLayout::new(ip, s, w, op, d),
                Err(KernelError::Shape { .. })
            )
        };
        assert!(!refused(&in_ptr, &in_src, &in_w, &out_ptr, &out_dst));
        assert!(refused(&[], &[], &[], &[], &[]), "no offsets");
        assert!(refused(&[0], &[], &[], &[0], &[]), "no node");
        assert!(
            refused(&in_ptr, &in_src, &in_w[1..], &out_ptr, &out_dst),
            "a weight short"
        );
        let mut bad = in_src.clone();
        bad[7] = 5;
        assert!(
            refused(&in_ptr, &bad, &in_w, &out_ptr, &out_dst),
            "a source out of range"
        );
        let mut bad = in_ptr.clone();
        bad.swap(1, 2);
        assert!(
            refused(&bad, &in_src, &in_w, &out_ptr, &out_dst),
            "offsets decrease"
        );
        let mut bad = in_ptr.clone();
        bad[5] -= 1;
        assert!(
            refused(&bad, &in_src, &in_w, &out_ptr, &out_dst),
            "offsets end short"
        );
        assert!(
            refused(&in_ptr, &in_src, &in_w, &out_ptr[1..], &out_dst),
            "out offsets short"
        );
        assert!(
            refused(&in_ptr, &in_src, &in_w, &out_ptr, &out_dst[1..]),
            "targets short"
        );
        let mut bad = out_dst.clone();
        bad[3] = 5;
        assert!(
            refused(&in_ptr, &in_src, &in_w, &out_ptr, &bad),
            "a target out of range"
        );
        let mut bad = out_ptr.clone();
        bad[0] = 1;
        assert!(
            refused(&in_ptr, &in_src, &in_w, &bad, &out_dst),
            "out offsets from 1"
        );
    }

    #[test]
    fn offsets_u64_are_the_values_without_a_copy_on_64_bit_targets() {
        let p: Vec<usize> = vec![0, 3, 3, 1 << 40, usize::MAX];
        let q = offsets_u64(&p);
        assert_eq!(*q, [0, 3, 3, 1 << 40, usize::MAX as u64]);
        #[cfg(target_pointer_width = "64")]
        assert!(
            matches!(q, std::borrow::Cow::Borrowed(s) if std::ptr::eq(s.as_ptr().cast::<usize>(), p.as_ptr()))
        );
        assert!(offsets_u64(&[]).is_empty());
    }

    /// One pass in point order: the lists `group_by_cluster` must equal.
    fn plain(keys: &[u64], k: usize) -> (Vec<u32>, Vec<u32>, Vec<u32>) {
        let a: Vec<u32> = keys.iter().map(|&key| key as u32).collect();
        let mut offsets = vec![0u32; k + 1];
        for &c in &a {
            offsets[c as usize + 1] += 1;
        }
        for c in 0..k {
            offsets[c + 1] += offsets[c];
        }
        let mut fill = offsets[..k].to_vec();
        let mut members = vec![0u32; a.len()];
        for (p, &c) in a.iter().enumerate() {
            members[fill[c as usize] as usize] = p as u32;
            fill[c as usize] += 1;
        }
        (a, offsets, members)
    }

    #[test]
    fn grouping_in_pieces_equals_one_pass_in_point_order() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for (n, k) in [
            (1usize, 1usize),
            (7, 3),
            (1000, 1024),
            (200_003, 1024),
            (300_000, 5),
        ] {
            let keys: Vec<u64> = (0..n)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    // A distance in the high half, the cluster in the low half.
                    (x & 0xFFFF_FFFF_0000_0000) | (x % k as u64)
                })
                .collect();
            let (mut a, mut offsets, mut members) = (vec![u32::MAX; n], Vec::new(), Vec::new());
            group_by_cluster(&keys, k, &mut a, &mut offsets, &mut members).unwrap();
            let (a0, offsets0, members0) = plain(&keys, k);
            assert_eq!(a, a0, "n = {n}, k = {k}");
            assert_eq!(offsets, offsets0, "n = {n}, k = {k}");
            assert_eq!(members, members0, "n = {n}, k = {k}");
        }
    }

    #[test]
    fn clip_noise_rows_fit_the_shared_memory() {
        let opted = NOISE_ROWS_OPT_IN;
        // 16 rows asked for: 16 up to 1,536 values, 8 at 2,048, 2 at 8,192.
        assert_eq!(noise_rows_for(768, 16, opted), Some(16));
        assert_eq!(noise_rows_for(1536, 16, opted), Some(16));
        assert_eq!(noise_rows_for(2048, 16, opted), Some(8));
        assert_eq!(noise_rows_for(8192, 16, opted), Some(2));
        assert_eq!(noise_rows_for(768, 32, opted), Some(32));
        // Not a multiple of 4, or not one row: the two kernels.
        assert_eq!(noise_rows_for(1025, 16, opted), None);
        assert_eq!(noise_rows_for(1, 16, opted), None);
        assert_eq!(noise_rows_for(1 << 16, 16, opted), None);
        // Without the opt-in (48 KiB): fewer rows.
        assert_eq!(noise_rows_for(768, 16, 48 * 1024), Some(8));
        for dim in (4..=4096).step_by(4) {
            if let Some(r) = noise_rows_for(dim, 16, opted) {
                assert!(
                    noise_rows_shared_bytes(r, dim as u32) <= opted && r >= 1,
                    "dim {dim}"
                );
            }
        }
    }

    #[test]
    fn grouping_refuses_a_cluster_past_k() {
        let mut keys = vec![1u64; 150_000];
        keys[140_000] = 7;
        let (mut a, mut offsets, mut members) = (vec![0u32; keys.len()], Vec::new(), Vec::new());
        assert_eq!(
            group_by_cluster(&keys, 4, &mut a, &mut offsets, &mut members),
            Err(7)
        );
    }
}
