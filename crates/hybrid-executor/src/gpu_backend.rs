//! The GPU backend: `recall-gpu-kernels` launches on a device opened through `recall-gpu-sys`.
//! Without the `gpu` feature the same names exist and report the GPU as compiled out (as candle's
//! `dummy_cuda_backend` does), so callers compile unchanged.

#[cfg(feature = "gpu")]
mod imp {
    use crate::backend::{Backend, BackendError};
    use crate::device::{Device, GpuDescription};
    use parking_lot::Mutex;
    use recall_gpu_kernels::{KernelError, Kernels};
    use recall_gpu_sys::{Gpu, GpuError, driver_version_string, probe};

    /// A GPU with the kernel bundle loaded.
    ///
    /// Calls are serialised on the device's stream by a lock: each call uploads, launches and downloads
    /// as one unit. (Per-tenant streams come with the executor's tenants.)
    #[derive(Debug)]
    pub struct GpuBackend {
        gpu: Gpu,
        kernels: Kernels,
        description: GpuDescription,
        lock: Mutex<()>,
    }

    pub(crate) fn map_gpu_error(e: GpuError) -> BackendError {
        if e.is_out_of_memory() {
            BackendError::OutOfMemory(e.to_string())
        } else if e.is_device_lost() {
            BackendError::DeviceLost(e.to_string())
        } else {
            BackendError::Gpu(e.to_string())
        }
    }

    pub(crate) fn map_kernel_error(e: KernelError) -> BackendError {
        match e {
            KernelError::Gpu(g) => map_gpu_error(g),
            other => BackendError::Gpu(other.to_string()),
        }
    }

    /// The arches the compiled-in kernel bundle covers, e.g. "sm_50, sm_52, …, sm_90".
    pub fn bundle_arches() -> String {
        recall_gpu_kernels::ARCHES
            .iter()
            .map(|s| format!("sm_{s}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    impl GpuBackend {
        /// Find a usable GPU (the first device that opens and loads the bundle), or say why there is none.
        /// `force_sm` makes it load that arch's code only (see `recall_gpu_kernels::select_image`).
        pub fn discover(force_sm: Option<u32>) -> Result<GpuBackend, String> {
            let found = probe();
            let driver = found
                .driver_version
                .map(driver_version_string)
                .unwrap_or_default();
            let devices = found.result.map_err(|why| why.to_string())?;
            let mut reasons = Vec::new();
            for info in devices {
                match Self::open(info.ordinal, force_sm, &driver) {
                    Ok(b) => return Ok(b),
                    Err(e) => reasons.push(format!("gpu {} ({}): {e}", info.ordinal, info.name)),
                }
            }
            Err(reasons.join("; "))
        }

        fn open(ordinal: usize, force_sm: Option<u32>, driver: &str) -> Result<GpuBackend, String> {
            let gpu = Gpu::open(ordinal).map_err(|e| e.to_string())?;
            let kernels = Kernels::load(&gpu, force_sm).map_err(|e| e.to_string())?;
            let info = gpu.info();
            let description = GpuDescription {
                ordinal,
                name: info.name.clone(),
                sm: info.sm(),
                sm_count: info.sm_count,
                total_memory: info.total_memory,
                free_memory: info.free_memory,
                l2_cache_bytes: info.l2_cache_bytes,
                managed_memory_usable: info.managed_memory_usable,
                driver: driver.to_string(),
                image: kernels.image().to_string(),
            };
            Ok(GpuBackend {
                gpu,
                kernels,
                description,
                lock: Mutex::new(()),
            })
        }

        pub fn description(&self) -> &GpuDescription {
            &self.description
        }

        /// The device and its kernels, for the differential tests and benchmarks.
        pub fn parts(&self) -> (&Gpu, &Kernels) {
            (&self.gpu, &self.kernels)
        }

        fn cosine_inner(
            &self,
            queries: &[f32],
            corpus: &[f32],
            dim: usize,
        ) -> Result<Vec<f32>, BackendError> {
            let (n_queries, n_rows) = (queries.len() / dim, corpus.len() / dim);
            let g = &self.gpu;
            let q = g.upload(queries).map_err(map_gpu_error)?;
            let c = g.upload(corpus).map_err(map_gpu_error)?;
            let mut qn = g.alloc_zeros::<f32>(n_queries).map_err(map_gpu_error)?;
            let mut cn = g.alloc_zeros::<f32>(n_rows).map_err(map_gpu_error)?;
            let mut out = g
                .alloc_zeros::<f32>(n_queries * n_rows)
                .map_err(map_gpu_error)?;
            let k = &self.kernels;
            k.row_norms_f32(g, &q, n_queries, dim, &mut qn)
                .map_err(map_kernel_error)?;
            k.row_norms_f32(g, &c, n_rows, dim, &mut cn)
                .map_err(map_kernel_error)?;
            k.cosine_f32_rows(g, &q, &qn, &c, &cn, n_queries, n_rows, dim, &mut out)
                .map_err(map_kernel_error)?;
            g.download(&out).map_err(map_gpu_error)
        }
    }

    impl Backend for GpuBackend {
        fn device(&self) -> Device {
            Device::Gpu {
                ordinal: self.description.ordinal,
            }
        }

        fn cosine_scores(
            &self,
            queries: &[f32],
            corpus: &[f32],
            dim: usize,
        ) -> Result<Vec<f32>, BackendError> {
            let _serial = self.lock.lock();
            self.cosine_inner(queries, corpus, dim)
        }
    }
}

#[cfg(not(feature = "gpu"))]
mod imp {
    use crate::backend::{Backend, BackendError};
    use crate::device::{Device, GpuDescription};

    /// No bundle in a CPU-only build.
    pub fn bundle_arches() -> String {
        "none".into()
    }

    /// Stand-in for builds without the `gpu` feature: it never opens.
    #[derive(Debug)]
    pub struct GpuBackend {
        description: GpuDescription,
    }

    impl GpuBackend {
        pub fn discover(_force_sm: Option<u32>) -> Result<GpuBackend, String> {
            Err("this build of recall has no GPU support (cargo feature `gpu` is off)".into())
        }

        pub fn description(&self) -> &GpuDescription {
            &self.description
        }
    }

    impl Backend for GpuBackend {
        fn device(&self) -> Device {
            Device::Gpu {
                ordinal: self.description.ordinal,
            }
        }

        fn cosine_scores(&self, _: &[f32], _: &[f32], _: usize) -> Result<Vec<f32>, BackendError> {
            Err(BackendError::Gpu("gpu support compiled out".into()))
        }
    }
}

pub use imp::{GpuBackend, bundle_arches};
