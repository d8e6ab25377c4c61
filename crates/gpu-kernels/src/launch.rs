//! Loading the bundle into a context and the typed launchers.

use crate::bundle::{ImageKind, image, select_image};
use recall_gpu_sys::driver::{CudaFunction, CudaModule, CudaSlice, LaunchConfig};
use recall_gpu_sys::{Gpu, GpuError, ModuleImage};
use recall_kernel_shared::{
    CosineParams, ROW_BLOCK, ROW_QUERIES_PER_BLOCK, ROW_TILE_K, RowNormsParams,
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
    cosine_f32_rows: CudaFunction,
}

fn shape(kernel: &'static str, reason: impl Into<String>) -> KernelError {
    KernelError::Shape {
        kernel,
        reason: reason.into(),
    }
}

fn to_u32(kernel: &'static str, what: &str, v: usize) -> Result<u32, KernelError> {
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

fn elems(kernel: &'static str, a: usize, b: usize) -> Result<usize, KernelError> {
    a.checked_mul(b)
        .ok_or_else(|| shape(kernel, format!("{a} x {b} elements overflow")))
}

/// Shared memory of the row-scan kernels: the 256 x 33 row tile plus the 4 x 32 query tile.
const ROW_TILE_BYTES: u32 = ROW_BLOCK * (ROW_TILE_K + 1) * 4;
const QUERY_TILE_BYTES: u32 = ROW_QUERIES_PER_BLOCK * ROW_TILE_K * 4;
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
            let module_image = match kind {
                ImageKind::Cubin => ModuleImage::Cubin(img.bytes),
                ImageKind::Ptx => match std::str::from_utf8(img.bytes) {
                    Ok(s) => ModuleImage::Ptx(s),
                    Err(_) => continue,
                },
            };
            match gpu.load_module(module_image) {
                Ok(module) => {
                    let kernels = Kernels {
                        image: LoadedImage { sm, kind },
                        row_norms_f32: gpu.function(&module, "row_norms_f32")?,
                        cosine_f32_rows: gpu.function(&module, "cosine_f32_rows")?,
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

    /// The image this instance runs.
    pub fn image(&self) -> LoadedImage {
        self.image
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
        // SAFETY: `x` holds n_rows * dim f32 and `out` n_rows f32 (checked above); the grid covers every
        // row with ROW_BLOCK threads per block and the shared memory the kernel documents.
        unsafe { gpu.launch(&self.row_norms_f32, cfg, params) }?;
        Ok(())
    }

    /// Cosine similarity, `out[q][r]` for `n_queries x n_rows` (query-major), from the rows, their norms
    /// (as [`Kernels::row_norms_f32`] computes them) and the queries with theirs.
    #[allow(clippy::too_many_arguments)]
    pub fn cosine_f32_rows(
        &self,
        gpu: &Gpu,
        queries: &CudaSlice<f32>,
        query_norms: &CudaSlice<f32>,
        corpus: &CudaSlice<f32>,
        corpus_norms: &CudaSlice<f32>,
        n_queries: usize,
        n_rows: usize,
        dim: usize,
        out: &mut CudaSlice<f32>,
    ) -> Result<(), KernelError> {
        const K: &str = "cosine_f32_rows";
        if n_queries == 0 || n_rows == 0 || dim == 0 {
            return Err(shape(K, "n_queries, n_rows and dim must be at least 1"));
        }
        need_len(K, "queries", queries, elems(K, n_queries, dim)?)?;
        need_len(K, "query_norms", query_norms, n_queries)?;
        need_len(K, "corpus", corpus, elems(K, n_rows, dim)?)?;
        need_len(K, "corpus_norms", corpus_norms, n_rows)?;
        need_len(K, "out", out, elems(K, n_queries, n_rows)?)?;
        let n_rows32 = to_u32(K, "n_rows", n_rows)?;
        let dim32 = to_u32(K, "dim", dim)?;
        let (q_base, qn_base) = (gpu.device_ptr(queries), gpu.device_ptr(query_norms));
        let (c_base, cn_base, out_base) = (
            gpu.device_ptr(corpus),
            gpu.device_ptr(corpus_norms),
            gpu.device_ptr(out),
        );
        // gridDim.y is limited to 65,535 blocks of 4 queries: launch in chunks of queries.
        let chunk = MAX_GRID_Y * ROW_QUERIES_PER_BLOCK as usize;
        let mut q0 = 0;
        while q0 < n_queries {
            let nq = chunk.min(n_queries - q0);
            let params = CosineParams {
                queries: q_base + (q0 * dim * 4) as u64,
                query_norms: qn_base + (q0 * 4) as u64,
                corpus: c_base,
                corpus_norms: cn_base,
                out: out_base + (q0 * n_rows * 4) as u64,
                n_queries: nq as u32,
                n_rows: n_rows32,
                dim: dim32,
                _pad: 0,
            };
            let cfg = LaunchConfig {
                grid_dim: (
                    n_rows32.div_ceil(ROW_BLOCK),
                    (nq as u32).div_ceil(ROW_QUERIES_PER_BLOCK),
                    1,
                ),
                block_dim: (ROW_BLOCK, 1, 1),
                shared_mem_bytes: ROW_TILE_BYTES + QUERY_TILE_BYTES,
            };
            // SAFETY: every buffer was checked above to hold what the kernel reads or writes for the
            // queries q0 .. q0 + nq; the offsets stay inside them; grid and shared memory are as the
            // kernel documents.
            unsafe { gpu.launch(&self.cosine_f32_rows, cfg, params) }?;
            q0 += nq;
        }
        Ok(())
    }
}
