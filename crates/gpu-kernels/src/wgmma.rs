//! Fast mode on Hopper: the `sm90a_*` kernels (`kernels-rs/src/wgmma.rs`: the tensor-core tiles of
//! `tc_gemm_*` and `tc_knn_*` on warpgroup MMA) from the bundle's sm_90a image. They take the same
//! parameters and grids as `tc_*`, so [`Kernels::similarity_fast`] and [`Kernels::knn_fast`] launch them in
//! their place when they are loaded; only the shared memory differs.
//!
//! Loaded by [`Kernels::load`] when the image is sm_90 and the device is compute capability 9.0 exactly
//! (sm_90a code runs nowhere else), unless `RECALL_WGMMA=off`. Any failure (module, function, shared
//! memory) is logged and leaves fast mode on `tc_*`.
//!
//! [`Kernels::similarity_fast`]: crate::Kernels::similarity_fast
//! [`Kernels::knn_fast`]: crate::Kernels::knn_fast
//! [`Kernels::load`]: crate::Kernels::load

use crate::bundle::{ImageKind, SM90A_IMAGES};
use recall_gpu_sys::driver::{CudaFunction, CudaModule};
use recall_gpu_sys::{Gpu, GpuError};
use recall_kernel_shared::{H_PIPE_BYTES, TC_KNN_K_MAX, h_knn_shared_bytes};
use std::sync::Arc;

/// Whether `RECALL_WGMMA` leaves the `sm90a_*` kernels enabled (unset or `on`; `off` disables them; any other
/// value is logged and means on).
pub fn wgmma_enabled() -> bool {
    crate::env::env_switch("RECALL_WGMMA", "on", "off")
}

/// `[f16, bf16]` x `[dot, cosine, l2]` of `sm90a_gemm_*`, `sm90a_knn_*` and `sm90a_knnm_*`, and their module.
#[derive(Debug)]
pub(crate) struct HopperKernels {
    pub(crate) gemm: [[CudaFunction; 3]; 2],
    pub(crate) knn: [[CudaFunction; 3]; 2],
    /// `sm90a_knnm_*`: `sm90a_knn_*` for launches with fewer splits than `k` (each split publishes
    /// `tc_knn_heads_per_split(k, n_splits)` list heads).
    pub(crate) knn_multi: [[CudaFunction; 3]; 2],
    /// `sm90a_knn1_*` and `sm90a_knn1q_*` (dot, cosine, l2: one query, few rows, tensor-map copies), opted
    /// into the shared memory of their largest block (`knn1::load_bulk`); `None` where that did not work (then
    /// `sm80_knn1_*` runs).
    pub(crate) knn1: Option<crate::knn1::Knn1Funcs>,
    /// `sm90a_scan1_*` (dot, cosine, l2): `sm80_scan1_*` whose copies ask the L2 for 256 bytes
    /// (`RECALL_SCAN1_L2_256`), opted into the device's shared memory per block; `None` where that failed.
    pub(crate) scan1: Option<[CudaFunction; 3]>,
    /// `sm90a_knn1s_*` (dot, cosine, l2): the one-query server with `sm90a_knn1_*`'s body (`serve.rs`), opted
    /// into the shared memory of its largest block; `None` where that failed (then `sm80_knn1s_*` serves).
    pub(crate) knn1_serve: Option<[CudaFunction; 3]>,
    /// `sm90a_clip_noise_rows` (`sm80_clip_noise_rows` with bulk copies) and the dynamic shared memory it was
    /// opted into; `None` where it is missing (then `sm80_clip_noise_rows` runs).
    pub(crate) clip_noise_rows: Option<(CudaFunction, u32)>,
    /// Which image loaded: the cubin, or the PTX through the driver's JIT.
    pub(crate) kind: ImageKind,
    _module: Arc<CudaModule>,
}

impl HopperKernels {
    /// The kernels for a device of compute capability `(major, minor)` running the sm_`sm` image; `None`
    /// where they do not apply or did not load (logged). Device loss is an error.
    pub(crate) fn load(gpu: &Gpu, sm: u32) -> Result<Option<HopperKernels>, GpuError> {
        if sm != 90 || gpu.info().compute_capability != (9, 0) || !wgmma_enabled() {
            return Ok(None);
        }
        for img in &SM90A_IMAGES {
            let module = match img.load(gpu) {
                Ok(m) => m,
                Err(e) if e.is_device_lost() => return Err(e),
                Err(e) => {
                    tracing::debug!(kind = %img.kind, error = %e, "sm_90a image did not load");
                    continue;
                }
            };
            match Self::functions(gpu, &module) {
                Ok(Some([gemm, knn, knn_multi])) => {
                    return Ok(Some(HopperKernels {
                        gemm,
                        knn,
                        knn_multi,
                        knn1: crate::knn1::load_bulk(gpu, &module)?,
                        scan1: load_scan1(gpu, &module)?,
                        knn1_serve: crate::knn1::metric_triple(
                            gpu,
                            &|name| gpu.function(&module, name),
                            "sm90a_knn1s",
                            recall_kernel_shared::knn1_bulk_serve_shared_bytes(
                                crate::KNN1_MAX_DIM as u32,
                                recall_kernel_shared::KNN1_BULK_MAX_SLOTS,
                            ),
                        )?,
                        clip_noise_rows: load_clip_noise_rows(gpu, &module)?,
                        kind: img.kind,
                        _module: module,
                    }));
                }
                Ok(None) => return Ok(None),
                Err(e) if e.is_device_lost() => return Err(e),
                Err(e) => {
                    tracing::debug!(kind = %img.kind, error = %e, "sm_90a kernels not usable");
                }
            }
        }
        tracing::debug!("no sm_90a image loaded; fast mode runs tc_*");
        Ok(None)
    }

    /// The eighteen functions (GEMM, knn, knn with many heads), opted into their shared memory; `None` when
    /// the device has less per block.
    fn functions(
        gpu: &Gpu,
        module: &Arc<CudaModule>,
    ) -> Result<Option<[[[CudaFunction; 3]; 2]; 3]>, GpuError> {
        // `{family}_{f16,bf16}_{dot,cosine,l2}`.
        let family = |name: &str| -> Result<[[CudaFunction; 3]; 2], GpuError> {
            let f =
                |half: &str, metric: &str| gpu.function(module, &format!("{name}_{half}_{metric}"));
            Ok([
                [f("f16", "dot")?, f("f16", "cosine")?, f("f16", "l2")?],
                [f("bf16", "dot")?, f("bf16", "cosine")?, f("bf16", "l2")?],
            ])
        };
        let (gemm, knn, knn_multi) = (
            family("sm90a_gemm")?,
            family("sm90a_knn")?,
            family("sm90a_knnm")?,
        );
        let fits = gemm
            .iter()
            .flatten()
            .all(|func| gpu.allow_dynamic_shared(func, H_PIPE_BYTES).is_ok())
            && knn.iter().chain(&knn_multi).flatten().all(|func| {
                gpu.allow_dynamic_shared(func, h_knn_shared_bytes(TC_KNN_K_MAX))
                    .is_ok()
            });
        if !fits {
            tracing::debug!(
                "sm90a kernels: not enough shared memory per block; fast mode runs tc_*"
            );
            return Ok(None);
        }
        Ok(Some([gemm, knn, knn_multi]))
    }
}

/// `sm90a_scan1_*` from the sm_90a module, opted into the device's shared memory per block (as `sm80_scan1_*`);
/// `None` where a function is missing or the opt-in is refused.
fn load_scan1(gpu: &Gpu, module: &Arc<CudaModule>) -> Result<Option<[CudaFunction; 3]>, GpuError> {
    let max_smem = u32::try_from(gpu.info().max_shared_memory_per_block_optin).unwrap_or(0);
    crate::knn1::metric_triple(
        gpu,
        &|name| gpu.function(module, name),
        "sm90a_scan1",
        max_smem,
    )
}

/// `sm90a_clip_noise_rows` from the sm_90a module, opted into the one-pass kernels' shared memory; `None` when it is
/// missing (logged). Device loss is an error.
fn load_clip_noise_rows(
    gpu: &Gpu,
    module: &Arc<CudaModule>,
) -> Result<Option<(CudaFunction, u32)>, GpuError> {
    match gpu.function(module, "sm90a_clip_noise_rows") {
        Ok(func) => {
            let bytes = crate::launch::noise_rows_opt_in(gpu, &func);
            Ok(Some((func, bytes)))
        }
        Err(e) if e.is_device_lost() => Err(e),
        Err(e) => {
            tracing::debug!(error = %e, "sm90a_clip_noise_rows not in the image");
            Ok(None)
        }
    }
}
