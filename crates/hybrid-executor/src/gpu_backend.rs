//! The GPU backend: `recall-gpu-kernels` launches on a device opened through `recall-gpu-sys`.
//! Without the `gpu` feature the same names exist and report the GPU as compiled out (as candle's
//! `dummy_cuda_backend` does), so callers compile unchanged.

/// The most corpus bytes per chunk of the GPU's staged out-of-core path (`GpuBackend::knn_streamed`: a plain slice
/// over the corpus budget). Page-locking its two staging buffers (`cuMemHostAlloc`) costs about 0.4 s a GiB on an
/// H200 host: over 1 M x 768, with the buffers page-locked on every call, the staged call took 121 ms with 16 MiB
/// chunks, 130 with 64, 321 with 256 and 968 with 1,024 (session 32, run E), while the registered path took 56-57 ms
/// with any of them. The buffers are now kept between calls; the cap keeps what they hold small.
pub const STAGED_CHUNK_BYTES: usize = 32 << 20;

/// Bytes per chunk of the staging ring that large uploads of caller data ([`STAGED_UPLOAD_MIN_BYTES`]) and large
/// results ([`STAGED_DOWNLOAD_MIN_BYTES`]) go through: two page-locked chunks, one filled or emptied by the host
/// pool's threads while the other is DMA'd. Measured on the H200 host (session 35, run F, `staging_bench`), per
/// chunk size, making the ring (page-locking and zeroing its two chunks) and moving 1 GiB up / down:
/// 4 MiB 3.9 ms, 19 / 23 GB/s; 8 MiB 6.8-8.5 ms, 29 / 33; **16 MiB 19.5 ms, 44 / 44**; 32 MiB 27-41 ms, 50 / 51.
/// Pageable copies ran at 9.6 / 18 GB/s there.
pub const STAGING_RING_CHUNK_BYTES: usize = 16 << 20;

/// The staging ring is made once the large copies of a process (the one at hand included) add up to this many
/// times its page-locked bytes; until then they stay pageable. Page-locking costs about 0.6 ms a MiB (a ring of
/// two 16 MiB chunks, 19.5 ms), and the ring saves about 0.08 ms for every MiB it moves instead of a pageable copy
/// (9.6 against 44 GB/s, run F), so it pays for itself after about 12 times its size. Made at the first large copy,
/// a one-shot `recall knn` of 16 queries over 24 MiB took 45-61 ms against 13-18 ms pageable (run E); a process
/// that keeps copying makes the ring after a few calls, and one copy of 384 MiB or more makes it at once.
pub const STAGING_PAYBACK: u64 = 12;

/// Whether a large copy of `bytes`, after `moved` bytes of large copies before it, makes the staging ring: the
/// copies, this one included, add up to `payback` times the ring's page-locked bytes ([`STAGING_PAYBACK`]).
#[cfg_attr(not(feature = "gpu"), allow(dead_code))]
fn makes_ring(moved: u64, bytes: usize, payback: u64) -> bool {
    moved.saturating_add(bytes as u64)
        >= payback.saturating_mul(2 * STAGING_RING_CHUNK_BYTES as u64)
}

/// Caller data of at least this many bytes (a plain slice's rows or queries, k-means' points, clip-and-noise's
/// vectors, a corpus handle's first upload) goes to the device through pinned staging once the ring is made
/// ([`STAGING_PAYBACK`]): chunks of at most [`STAGING_RING_CHUNK_BYTES`], each copied into one of two page-locked
/// buffers by the host pool's threads while the previous one is DMA'd. Smaller data goes in one pageable
/// `cuMemcpyHtoDAsync`.
///
/// Why a threshold: a pageable copy runs at about 10.5 GB/s on the H200 host, a pinned DMA at about 55 and the
/// staged pipeline at what the parallel host copy allows (`knn_streamed`'s reached about 25). The staged path
/// has fixed costs of its own (its first use page-locks two chunks; every use wakes the host pool and waits on
/// events), which only pay off where the copy itself takes a millisecond or more: 16 MiB is about 1.6 ms
/// pageable. A starting point, to be measured (`pool_bench`'s staged rows).
pub const STAGED_UPLOAD_MIN_BYTES: usize = 16 << 20;

/// Results of at least this many bytes (similarity's and cosine's query x row score matrix, clip-and-noise's
/// vectors) come back from the device through the same pinned staging, the other way round: the copy engine DMAs
/// chunk i + 1 into one page-locked buffer while the host pool's threads copy chunk i out of the other into the
/// caller's memory (`StagingRing::download_with`). Smaller results come back in one pageable `cuMemcpyDtoH`.
///
/// A constant of its own, equal to [`STAGED_UPLOAD_MIN_BYTES`] for now: the same fixed costs (the ring, the host
/// pool's wake-up, one event wait per chunk) stand against the same kind of pageable copy (about 6 GB/s
/// device-to-host on the H200 host), but the two directions' break-evens are measured apart (`pool_bench`'s
/// device-to-host rows) and may settle apart.
pub const STAGED_DOWNLOAD_MIN_BYTES: usize = STAGED_UPLOAD_MIN_BYTES;

/// Whether an upload of `bytes` of caller data goes through pinned staging ([`STAGED_UPLOAD_MIN_BYTES`]).
#[cfg_attr(not(feature = "gpu"), allow(dead_code))]
fn stages_upload(bytes: usize) -> bool {
    bytes >= STAGED_UPLOAD_MIN_BYTES
}

/// Whether a result of `bytes` comes back through pinned staging ([`STAGED_DOWNLOAD_MIN_BYTES`]).
#[cfg_attr(not(feature = "gpu"), allow(dead_code))]
fn stages_download(bytes: usize) -> bool {
    bytes >= STAGED_DOWNLOAD_MIN_BYTES
}

#[cfg(test)]
mod tests {
    use super::{
        STAGED_DOWNLOAD_MIN_BYTES, STAGED_UPLOAD_MIN_BYTES, STAGING_PAYBACK,
        STAGING_RING_CHUNK_BYTES, makes_ring, stages_download, stages_upload,
    };

    #[test]
    fn uploads_stage_from_the_threshold_up() {
        assert!(!stages_upload(0));
        assert!(!stages_upload(STAGED_UPLOAD_MIN_BYTES - 1));
        assert!(stages_upload(STAGED_UPLOAD_MIN_BYTES));
        assert!(stages_upload(STAGED_UPLOAD_MIN_BYTES + 1));
        assert!(stages_upload(usize::MAX));
        // The 500,000 x 768 f32 corpus of the motivating call stages; one 768-dim query does not.
        assert!(stages_upload(500_000 * 768 * 4));
        assert!(!stages_upload(768 * 4));
        // A staged upload of the smallest staged size fits one chunk or more: the threshold is not below what
        // a pipeline of chunks can be built from, and a chunk is whole pages.
        const { assert!(STAGED_UPLOAD_MIN_BYTES <= STAGING_RING_CHUNK_BYTES) };
        const { assert!(STAGING_RING_CHUNK_BYTES.is_multiple_of(4096)) };
    }

    #[test]
    fn the_ring_is_made_once_the_large_copies_repay_it() {
        let ring = 2 * STAGING_RING_CHUNK_BYTES as u64;
        let mib = 1usize << 20;
        // A one-shot call over 24 MiB stays pageable; one of 384 MiB (12 x 32 MiB) makes the ring at once.
        assert!(!makes_ring(0, 24 * mib, STAGING_PAYBACK));
        assert!(!makes_ring(0, 384 * mib - 1, STAGING_PAYBACK));
        assert!(makes_ring(0, 384 * mib, STAGING_PAYBACK));
        // Calls of 24 MiB: the sixteenth makes it (15 x 24 = 360 MiB before it, 384 with it).
        let calls = (1..100u64)
            .find(|i| makes_ring((i - 1) * 24 * mib as u64, 24 * mib, STAGING_PAYBACK))
            .expect("some call makes the ring");
        assert_eq!(calls, 16);
        // Payback 0: the first large copy makes it (tests and benchmarks).
        assert!(makes_ring(0, STAGED_UPLOAD_MIN_BYTES, 0));
        // No overflow at the extremes.
        assert!(makes_ring(u64::MAX, usize::MAX, u64::MAX));
        assert!(!makes_ring(0, 0, u64::MAX));
        assert_eq!(STAGING_PAYBACK * ring, 384 * mib as u64);
    }

    #[test]
    fn downloads_stage_from_their_threshold_up() {
        assert!(!stages_download(0));
        assert!(!stages_download(STAGED_DOWNLOAD_MIN_BYTES - 1));
        assert!(stages_download(STAGED_DOWNLOAD_MIN_BYTES));
        assert!(stages_download(usize::MAX));
        // A 1,000 x 1,000,000 f32 score matrix stages; one query's scores over 100,000 rows do not.
        assert!(stages_download(1000 * 1_000_000 * 4));
        assert!(!stages_download(100_000 * 4));
        // The download shares the upload's ring: its smallest staged size is at least one chunk's worth of
        // pipeline too.
        const { assert!(STAGED_DOWNLOAD_MIN_BYTES <= STAGING_RING_CHUNK_BYTES) };
    }
}

#[cfg(feature = "gpu")]
mod imp {
    use crate::backend::FastFormat;
    use crate::backend::{Backend, BackendError};
    use crate::device::{Device, GpuDescription};
    use crate::shared_corpus::SharedCorpus;
    use parking_lot::Mutex;
    use recall_cpu_simd::{
        KMeans, Metric, Spread, SpreadGraph, SpreadParams, TopK, kmeans_seed_indices,
    };
    use recall_gpu_kernels::{
        GraphUpload, HalfKind, HalfSource, KMeansScratch, KernelError, Kernels, OneQuery,
        SCAN_MAX_QUERIES, Seeds, Segments, SimMetric, TopKResult, half_ld,
    };
    use recall_gpu_sys::driver::{CudaSlice, DeviceRepr, ValidAsZeroBits};
    use recall_gpu_sys::{Gpu, GpuError, driver_version_string, probe};
    use recall_memory_pool::{
        Budget, DeviceBuffer, DeviceCopy, DeviceSlice, GpuMemory, MemoryConfig, PoolError,
        PoolStats, StagingRing, TenantId as PoolTenant,
    };
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// The score buffer of one knn chunk stays below this many bytes (queries are processed in chunks).
    const SCORE_CHUNK_BYTES: usize = 1 << 30;

    fn sim_metric(m: Metric) -> SimMetric {
        match m {
            Metric::Dot => SimMetric::Dot,
            Metric::Cosine => SimMetric::Cosine,
            Metric::L2 => SimMetric::L2,
        }
    }

    fn topk(r: TopKResult) -> TopK {
        TopK {
            k: r.k,
            ids: r.ids,
            scores: r.scores,
        }
    }

    /// A GPU with the kernel bundle loaded.
    ///
    /// Calls are serialised on the device's stream by a lock: each call uploads, launches and downloads
    /// as one unit. Spreading is the exception: it takes no lock here, and runs on a stream and buffers of
    /// its own per call (`gpu_shared_graph.rs`), beside the serialised calls.
    #[derive(Debug)]
    pub struct GpuBackend {
        gpu: Gpu,
        kernels: Kernels,
        /// The device memory recall holds (resident corpora, knn scratch, per-call uploads of caller data:
        /// rows, queries, k-means' points, clip-and-noise's vectors; similarity's and clip-and-noise's
        /// outputs), from the memory pool: its VRAM
        /// budget is checked before the driver is asked (`RECALL_GPU_VRAM_BUDGET_MIB`, else 80 % of the
        /// device's memory) and its statistics count these bytes.
        mem: GpuMemory,
        /// The tenants' VRAM quotas as last set in the memory pool (see `call_tenant`).
        pool_quotas: Mutex<std::collections::HashMap<PoolTenant, Option<usize>>>,
        description: GpuDescription,
        lock: Mutex<()>,
        /// Device copies of shared corpora, kept while the corpus lives (checked on every shared call).
        resident: Mutex<Vec<Resident>>,
        /// knn's query, norm and score buffers, reused between calls (no allocation or free per call).
        scratch: Mutex<Scratch>,
        /// The staged out-of-core path's two pinned staging buffers, kept from one call to the next of the same
        /// chunk length: page-locking them costs about 0.4 s a GiB, some 25 ms a call at their most
        /// ([`super::STAGED_CHUNK_BYTES`] each). Given back by `release_cached`.
        staging: Mutex<Option<[recall_gpu_sys::driver::PinnedHostSlice<f32>; 2]>>,
        /// The staged upload of large caller data ([`super::STAGED_UPLOAD_MIN_BYTES`]) and download of large
        /// results ([`super::STAGED_DOWNLOAD_MIN_BYTES`]): two pinned chunks of [`super::STAGING_RING_CHUNK_BYTES`]
        /// from the memory pool's pinned pool, copying on the device's stream. Made once the large copies repay it
        /// ([`super::STAGING_PAYBACK`]) and kept (page-locking is paid once); dropped after an error and by `trim`.
        /// The calls' copies hold `lock` too, so they never wait here for each other; spreading graphs' uploads
        /// ([`GraphStaging`]) do not, so they may wait here for one another or for one serialised call's copy. It
        /// is what lets `&self` lend the ring out.
        uploader: Mutex<Option<StagingRing>>,
        /// Set once the pinned staging could not be had (and said so): large uploads and downloads then copy
        /// through pageable memory; each one still tries to make the staging first.
        staging_warned: AtomicBool,
        /// Bytes of large copies (uploads and downloads from the thresholds up) so far: the ring is made once they
        /// reach `staging_payback` times its size ([`super::makes_ring`]).
        staging_moved: std::sync::atomic::AtomicU64,
        /// [`super::STAGING_PAYBACK`], or what [`GpuBackend::set_staging_payback`] set.
        staging_payback: std::sync::atomic::AtomicU64,
        /// A corpus larger than this many bytes is not made resident: knn streams it through the device
        /// in chunks instead (`RECALL_GPU_CORPUS_BUDGET_MIB`, else 80 % of the memory free at start).
        corpus_budget: std::sync::atomic::AtomicUsize,
        /// Device copies of shared graphs, kept while the graph lives (`gpu_shared_graph.rs`).
        graphs: crate::gpu_shared_graph::GraphCache,
        /// Streams beside `gpu`'s for calls that run outside `lock` ([`Lane`]), made on first use.
        lanes: Mutex<Vec<Arc<Lane>>>,
        /// Set when a lane could not be made: calls then stay under `lock` (until `trim`).
        no_more_lanes: AtomicBool,
        /// The arch the kernels were forced to (the lanes load the same image).
        force_sm: Option<u32>,
        /// TEST ONLY: real launch failures on purpose (`gpu_test_fault.rs`); unset unless a test sets it.
        test_fault: crate::gpu_test_fault::TestFaultSwitch,
    }

    /// A shared corpus on the device: its rows and, once a cosine call needed them, its norms.
    #[derive(Debug)]
    struct Resident {
        id: u64,
        alive: std::sync::Weak<crate::shared_corpus::Inner>,
        /// Shared with calls that run on a lane (outside `lock`): freed after the last of them.
        rows: Arc<DeviceSlice<f32>>,
        norms: Option<Arc<DeviceSlice<f32>>>,
        /// Fast mode's padded 16-bit copy, made by the first fast call in that format.
        half: Option<(HalfKind, DeviceSlice<u16>)>,
    }

    /// Most [`Lane`]s per device.
    const MAX_LANES: usize = 4;

    /// A stream beside the device's main one, with its own load of the kernels (so its own launch scratch):
    /// candidate scoring against a resident corpus runs on one outside the backend's `lock`, beside the
    /// serialised calls. Reads only buffers that are complete (resident copies: `resident_entry` waits).
    #[derive(Debug)]
    struct Lane {
        gpu: Gpu,
        kernels: Kernels,
        busy: AtomicBool,
    }

    /// A lane taken for one call; free again when dropped.
    struct LaneGuard(Arc<Lane>);

    impl Drop for LaneGuard {
        fn drop(&mut self) {
            self.0.busy.store(false, Ordering::Release);
        }
    }

    /// Candidate scoring in one launch on sm_80+ (`sm80_cand_*`: gather, score and select; inputs staged through
    /// page-locked buffers, the query norms computed in the kernel) against rows on the device (`c`, with its
    /// norms for cosine), on `g`'s stream with `kern`'s scratch: the backend's own under its lock, or a lane's.
    #[allow(clippy::too_many_arguments)]
    fn fused_candidates(
        g: &Gpu,
        kern: &Kernels,
        queries: &[f32],
        c: &CudaSlice<f32>,
        cn: Option<&CudaSlice<f32>>,
        dim: usize,
        metric: Metric,
        offsets: &[usize],
        ids: &[u32],
        k: usize,
    ) -> Result<TopK, BackendError> {
        let offsets64: Vec<u64> = offsets.iter().map(|&o| o as u64).collect();
        let r = kern
            .score_candidates(
                g,
                sim_metric(metric),
                queries,
                c,
                cn,
                c.len() / dim,
                dim,
                ids,
                &offsets64,
                k,
            )
            .map_err(map_kernel_error)?;
        Ok(topk(r))
    }

    fn half_kind(f: FastFormat) -> HalfKind {
        match f {
            FastFormat::F16 => HalfKind::F16,
            FastFormat::Bf16 => HalfKind::Bf16,
        }
    }

    /// Whether fast mode can take these values: f16 holds magnitudes up to 65504 (bf16 has f32's range).
    fn fits_format(x: &[f32], f: FastFormat) -> bool {
        f == FastFormat::Bf16 || recall_cpu_simd::max_abs(x) <= F16_MAX
    }

    /// The largest finite f16.
    const F16_MAX: f32 = 65504.0;

    /// The metric whose row upload computes the norms a call needs: cosine's norms serve cosine and, in fast
    /// mode, l2 (`nq^2 + nc^2 - 2 dot`); dot needs none.
    fn fast_norm_metric(metric: Metric) -> Metric {
        if metric == Metric::Dot {
            Metric::Dot
        } else {
            Metric::Cosine
        }
    }

    /// Drop the cached device copies whose handle no longer exists (corpora or graphs) and, when any went,
    /// give their memory back to the driver. Returns how many are left.
    pub(crate) fn drop_dead<T>(
        gpu: &Gpu,
        entries: &mut Vec<T>,
        alive: impl Fn(&T) -> bool,
    ) -> Result<usize, BackendError> {
        let before = entries.len();
        entries.retain(alive);
        if entries.len() < before {
            gpu.release_cached_memory().map_err(map_gpu_error)?;
        }
        Ok(entries.len())
    }

    /// Device buffers reused by every knn call (grown on demand; the score buffer is kept only up to
    /// `KEEP_SCORES_BYTES`), from the memory pool.
    #[derive(Debug, Default)]
    struct Scratch {
        q: Option<DeviceSlice<f32>>,
        qn: Option<DeviceSlice<f32>>,
        qh: Option<DeviceSlice<u16>>,
        scores: Option<DeviceSlice<f32>>,
    }

    /// The VRAM budget of the backend's memory pool: `RECALL_GPU_VRAM_BUDGET_MIB` (MiB) when set and valid,
    /// else 80 % of the device's memory.
    fn vram_budget_from_env() -> Budget {
        std::env::var("RECALL_GPU_VRAM_BUDGET_MIB")
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .map_or(Budget::default(), |mib| {
                Budget::Bytes(mib.saturating_mul(1 << 20))
            })
    }

    /// A memory-pool error as the executor's error: out-of-memory (the budget, or the device after the pool
    /// trimmed and retried) and a lost device keep their kinds, so the executor splits or falls back.
    pub(crate) fn map_pool_error(e: PoolError) -> BackendError {
        if e.is_out_of_memory() {
            BackendError::OutOfMemory(e.to_string())
        } else if e.is_device_lost() {
            BackendError::DeviceLost(e.to_string())
        } else {
            BackendError::Gpu(format!("{e}: {}", error_chain(&e)))
        }
    }

    fn error_chain(e: &dyn std::error::Error) -> String {
        let mut parts = Vec::new();
        let mut cur = e.source();
        while let Some(c) = cur {
            parts.push(c.to_string());
            cur = c.source();
        }
        parts.join(": ")
    }

    /// The corpus budget: `RECALL_GPU_CORPUS_BUDGET_MIB` (MiB) when set and valid, else 80 % of `free` but
    /// at most `cap` (three quarters of the memory pool's budget: a resident corpus leaves room there for
    /// its norms, a 16-bit copy and the knn scratch).
    fn corpus_budget_from_env(free: usize, cap: usize) -> usize {
        std::env::var("RECALL_GPU_CORPUS_BUDGET_MIB")
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .map_or((free / 10 * 8).min(cap), |mib| mib.saturating_mul(1 << 20))
    }

    /// Bytes of corpus rows per streamed chunk (at most).
    const STREAM_CHUNK_BYTES: usize = 256 << 20;

    /// Rows per streamed chunk: at most `chunk_rows`, few enough that every query's scores of a chunk
    /// (`nq x chunk`) fit the score budget, at least one, at most the corpus.
    fn stream_chunk_rows(chunk_rows: usize, nq: usize, n: usize) -> usize {
        chunk_rows
            .min(SCORE_CHUNK_BYTES / (4 * nq).max(1))
            .clamp(1, n.max(1))
    }

    /// The device buffers of a streamed call besides the corpus chunks: a chunk's norms and scores.
    struct StreamBuffers {
        norms: CudaSlice<f32>,
        scores: CudaSlice<f32>,
    }

    impl StreamBuffers {
        fn new(g: &Gpu, nq: usize, chunk_rows: usize) -> Result<StreamBuffers, BackendError> {
            Ok(StreamBuffers {
                norms: g.alloc_zeros::<f32>(chunk_rows).map_err(map_gpu_error)?,
                scores: g
                    .alloc_zeros::<f32>(nq * chunk_rows)
                    .map_err(map_gpu_error)?,
            })
        }
    }

    /// One query chunk's device buffers, handed to the scoring step of `knn_chunked`.
    struct ChunkBuffers<'a> {
        q: &'a CudaSlice<f32>,
        qn: Option<&'a CudaSlice<f32>>,
        qh: Option<&'a mut CudaSlice<u16>>,
        /// Queries in this chunk.
        m: usize,
        scores: &'a mut CudaSlice<f32>,
    }

    /// Queries per launch of the fused fast-mode knn (its scratch grows with them; no score matrix).
    const FUSED_CHUNK_QUERIES: usize = 1 << 16;

    /// Score buffers up to this size stay allocated between calls.
    const KEEP_SCORES_BYTES: usize = 64 << 20;

    /// `slot`'s buffer, replaced by a new one of `len` elements from the memory pool if it is missing or
    /// shorter.
    fn grown<'s, T: DeviceCopy>(
        mem: &GpuMemory,
        slot: &'s mut Option<DeviceSlice<T>>,
        len: usize,
    ) -> Result<&'s mut CudaSlice<T>, BackendError> {
        grown_slice(mem, slot, len).map(|s| &mut **s)
    }

    /// [`grown`], as the pool's slice (which the staged upload writes through).
    fn grown_slice<'s, T: DeviceCopy>(
        mem: &GpuMemory,
        slot: &'s mut Option<DeviceSlice<T>>,
        len: usize,
    ) -> Result<&'s mut DeviceSlice<T>, BackendError> {
        if slot.as_ref().is_none_or(|b| b.len() < len) {
            *slot = None; // free first: the old buffer's memory may be needed for the new one
            *slot = Some(DeviceSlice::try_zeroed(mem, len.max(1)).map_err(map_pool_error)?);
        }
        slot.as_mut()
            .ok_or_else(|| BackendError::Gpu("scratch buffer missing".into()))
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
            // Refused before anything was queued: the call's shape, not the device.
            e @ KernelError::Shape { .. } => BackendError::Unfit(e.to_string()),
            other => BackendError::Gpu(other.to_string()),
        }
    }

    /// For launchers generic over their caller's error (`recall_gpu_kernels::GraphUpload`): the same mapping as
    /// `map_kernel_error`.
    impl From<KernelError> for BackendError {
        fn from(e: KernelError) -> BackendError {
            map_kernel_error(e)
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

        /// Every usable GPU (or those of `only`, by ordinal, in that order), or why there is none. A GPU that
        /// fails to open is left out with a log line when others open; naming one that does not exist is
        /// an error.
        pub fn discover_all(
            force_sm: Option<u32>,
            only: Option<&[usize]>,
        ) -> Result<Vec<GpuBackend>, String> {
            let found = probe();
            let driver = found
                .driver_version
                .map(driver_version_string)
                .unwrap_or_default();
            let devices = found.result.map_err(|why| why.to_string())?;
            let wanted: Vec<usize> = match only {
                Some(list) => {
                    if let Some(missing) = list
                        .iter()
                        .find(|o| !devices.iter().any(|d| d.ordinal == **o))
                    {
                        return Err(format!(
                            "GPU {missing} was asked for (RECALL_GPUS) but the driver lists GPUs {:?}",
                            devices.iter().map(|d| d.ordinal).collect::<Vec<_>>()
                        ));
                    }
                    list.to_vec()
                }
                None => devices.iter().map(|d| d.ordinal).collect(),
            };
            let mut opened = Vec::new();
            let mut reasons = Vec::new();
            for ordinal in wanted {
                let name = devices
                    .iter()
                    .find(|d| d.ordinal == ordinal)
                    .map(|d| d.name.clone())
                    .unwrap_or_default();
                match Self::open(ordinal, force_sm, &driver) {
                    Ok(b) => opened.push(b),
                    Err(e) => {
                        tracing::warn!(ordinal, error = %e, "recall: a GPU did not open; leaving it out");
                        reasons.push(format!("gpu {ordinal} ({name}): {e}"));
                    }
                }
            }
            if opened.is_empty() {
                return Err(if reasons.is_empty() {
                    "no GPU was selected".into()
                } else {
                    reasons.join("; ")
                });
            }
            Ok(opened)
        }

        fn open(ordinal: usize, force_sm: Option<u32>, driver: &str) -> Result<GpuBackend, String> {
            let test_fault = crate::gpu_test_fault::TestFaultSwitch::from_env()?;
            let gpu = Gpu::open(ordinal).map_err(|e| e.to_string())?;
            let kernels = Kernels::load(&gpu, force_sm).map_err(|e| e.to_string())?;
            let info = gpu.info();
            let mem = GpuMemory::new(
                &gpu,
                MemoryConfig {
                    budget: vram_budget_from_env(),
                    ..MemoryConfig::default()
                },
            )
            .map_err(|e| e.to_string())?;
            let budget = corpus_budget_from_env(
                info.free_memory,
                mem.device_pool().stats().budget_bytes / 4 * 3,
            );
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
                image: format!("{} [fast: {}]", kernels.image(), kernels.fast_kernels()),
            };
            Ok(GpuBackend {
                gpu,
                kernels,
                mem,
                pool_quotas: Mutex::new(std::collections::HashMap::new()),
                description,
                lock: Mutex::new(()),
                resident: Mutex::new(Vec::new()),
                scratch: Mutex::new(Scratch::default()),
                staging: Mutex::new(None),
                uploader: Mutex::new(None),
                staging_warned: AtomicBool::new(false),
                staging_moved: std::sync::atomic::AtomicU64::new(0),
                staging_payback: std::sync::atomic::AtomicU64::new(super::STAGING_PAYBACK),
                corpus_budget: std::sync::atomic::AtomicUsize::new(budget),
                graphs: Default::default(),
                lanes: Mutex::new(Vec::new()),
                no_more_lanes: AtomicBool::new(false),
                force_sm,
                test_fault,
            })
        }

        /// TEST ONLY: make this backend fail on purpose with real driver errors (see
        /// [`TestFault`](crate::TestFault)); `None` clears it. Without it, calls pay one atomic load.
        pub fn set_test_fault(&self, fault: Option<crate::TestFault>) {
            self.test_fault.set(fault);
        }

        /// TEST ONLY: how many times the test fault switch has fired.
        pub fn test_faults_fired(&self) -> u64 {
            self.test_fault.fired()
        }

        /// TEST ONLY: the test fault switch's hook, called first by every op (under `self.lock`, except
        /// spreading).
        fn test_fault(&self, op: crate::gpu_test_fault::TestFaultOp) -> Result<(), BackendError> {
            use crate::gpu_test_fault::TestFaultAction;
            let (g, k) = (&self.gpu, &self.kernels);
            match self.test_fault.fires(op) {
                None => Ok(()),
                Some(TestFaultAction::LaunchError) => k.test_launch_error(g),
                Some(TestFaultAction::PoisonContext) => k.test_poison_context(g),
            }
            .map_err(map_kernel_error)
        }

        pub fn description(&self) -> &GpuDescription {
            &self.description
        }

        /// The device and its kernels, for the differential tests and benchmarks.
        pub fn parts(&self) -> (&Gpu, &Kernels) {
            (&self.gpu, &self.kernels)
        }

        /// (free, total) device memory now, in bytes, as the driver reports it (every process's
        /// allocations count); `None` if the driver could not say.
        pub fn memory_info(&self) -> Option<(u64, u64)> {
            let (free, total) = self.gpu.memory_info().ok()?;
            Some((free as u64, total as u64))
        }

        /// The memory-pool tenant of the call running on this thread: the executor's tenant (index + 1; the
        /// pool's tenant 0 holds what no one tenant owns: resident corpora, shared scratch), with the
        /// tenant's VRAM quota set in the pool, so a call's own buffers count against it; no tenant: 0.
        fn call_tenant(&self) -> PoolTenant {
            let Some(ctx) = crate::tenant::current_tenant() else {
                return PoolTenant::DEFAULT;
            };
            let tenant =
                PoolTenant(u32::try_from(ctx.id.index()).map_or(u32::MAX, |i| i.saturating_add(1)));
            let quota = ctx
                .vram_quota
                .map(|q| usize::try_from(q).unwrap_or(usize::MAX));
            let mut known = self.pool_quotas.lock();
            if known.get(&tenant) != Some(&quota) {
                self.mem.device_pool().set_tenant_quota(tenant, quota);
                known.insert(tenant, quota);
            }
            tenant
        }

        /// A zeroed buffer of `len` elements from the memory pool for this call's tenant.
        fn call_zeroed<T: DeviceCopy>(&self, len: usize) -> Result<DeviceSlice<T>, BackendError> {
            DeviceSlice::try_zeroed_for(&self.mem, self.call_tenant(), len).map_err(map_pool_error)
        }

        /// Upload a row-major matrix and, for cosine, compute its row norms on the device (both from the
        /// memory pool, counted against the call's tenant).
        fn upload_rows(
            &self,
            x: &[f32],
            dim: usize,
            metric: Metric,
        ) -> Result<(DeviceSlice<f32>, Option<DeviceSlice<f32>>), BackendError> {
            let (g, k) = (&self.gpu, &self.kernels);
            let rows = self.upload_slice(x)?;
            let norms = if metric == Metric::Cosine {
                let n = x.len() / dim;
                let mut norms = self.call_zeroed::<f32>(n)?;
                k.row_norms_f32(g, &rows, n, dim, &mut norms)
                    .map_err(map_kernel_error)?;
                Some(norms)
            } else {
                None
            };
            Ok((rows, norms))
        }

        /// A copy of the caller's `x` on the device, from the memory pool for this call's tenant, ordered on the
        /// device's stream (kernels queued there afterwards read it): staged through pinned memory from
        /// [`super::STAGED_UPLOAD_MIN_BYTES`] up, one pageable copy below (see [`GpuBackend::copy_in`]).
        fn upload_slice<T: DeviceCopy>(&self, x: &[T]) -> Result<DeviceSlice<T>, BackendError> {
            let mut buf = DeviceBuffer::try_alloc_on(
                &self.mem,
                x.len(),
                self.mem.stream(),
                self.call_tenant(),
            )
            .map_err(map_pool_error)?;
            self.copy_in(x, &mut buf)?;
            DeviceSlice::new(buf).map_err(map_pool_error)
        }

        /// Copy the caller's `x` into `buf` (same length, on the device's stream): through the pinned staging
        /// ring when `x` is large and the ring can be had, else one pageable copy. Returns when the last chunk is
        /// queued; `x` may change then. Work queued on `buf`'s stream afterwards sees the data.
        fn copy_in<T: DeviceCopy>(
            &self,
            x: &[T],
            buf: &mut DeviceBuffer<T>,
        ) -> Result<(), BackendError> {
            if buf.len() == x.len()
                && buf.stream().cu_stream() == self.mem.stream().cu_stream()
                && super::stages_upload(std::mem::size_of_val(x))
                && let Some(staged) = self.on_ring(std::mem::size_of_val(x), |ring| {
                    ring.upload_with(x, buf, 0, host_copy)
                })
            {
                return staged;
            }
            buf.copy_from_host(x).map_err(map_pool_error)
        }

        /// Copy the caller's queries `x` into the front of `dst` (the knn scratch, on the device's stream): staged
        /// from [`super::STAGED_UPLOAD_MIN_BYTES`] up, as [`GpuBackend::copy_in`], else one pageable copy.
        fn copy_queries_in(
            &self,
            x: &[f32],
            dst: &mut DeviceSlice<f32>,
        ) -> Result<(), BackendError> {
            if x.len() <= dst.len()
                && dst.buffer().stream().cu_stream() == self.mem.stream().cu_stream()
                && super::stages_upload(std::mem::size_of_val(x))
                && let Some(staged) = self.on_ring(std::mem::size_of_val(x), |ring| {
                    ring.upload_slice_with(x, dst, 0, host_copy)
                })
            {
                return staged;
            }
            self.gpu.upload_into(x, dst).map_err(map_gpu_error)
        }

        /// Copy a result `src` (on the device's stream, written by work queued there) into the caller's `out`
        /// (same length): through the staging ring from [`super::STAGED_DOWNLOAD_MIN_BYTES`] up when the ring can
        /// be had (the host pool copying each chunk out while the next is DMA'd), else one pageable copy. Returns
        /// when every value is in `out`. The caller holds `self.lock`.
        fn copy_out(&self, src: &DeviceSlice<f32>, out: &mut [f32]) -> Result<(), BackendError> {
            if src.len() == out.len()
                && src.buffer().stream().cu_stream() == self.mem.stream().cu_stream()
                && super::stages_download(std::mem::size_of_val(out))
                && let Some(staged) = self.on_ring(std::mem::size_of_val(out), |ring| {
                    ring.download_slice_with(src, 0, out, host_copy)
                })
            {
                return staged;
            }
            self.gpu.download_into(src, out).map_err(map_gpu_error)
        }

        /// Run `copy` on the staging ring, making the ring if there is none and the large copies so far repay it
        /// ([`super::STAGING_PAYBACK`]). `None`: no ring yet, or no pinned staging to be had (the pinned pool's
        /// budget, a page-lock failure; logged once); the caller copies through pageable memory.
        /// A failed copy drops the ring (the next large copy makes a new one) and is the call's error.
        fn on_ring(
            &self,
            bytes: usize,
            copy: impl FnOnce(&mut StagingRing) -> Result<(), PoolError>,
        ) -> Option<Result<(), BackendError>> {
            let mut slot = self.uploader.lock();
            let moved = self
                .staging_moved
                .fetch_add(bytes as u64, Ordering::Relaxed);
            if slot.is_none() {
                if !super::makes_ring(moved, bytes, self.staging_payback.load(Ordering::Relaxed)) {
                    // Not yet worth page-locking the ring: this copy stays pageable.
                    return None;
                }
                // On the device's stream: the copies are ordered with the kernels that read them by the stream
                // itself, and the destination (the pool's, on that stream) needs no events.
                match StagingRing::new(
                    &self.mem,
                    super::STAGING_RING_CHUNK_BYTES,
                    self.mem.stream(),
                ) {
                    Ok(ring) => *slot = Some(ring),
                    Err(e) => {
                        if !self.staging_warned.swap(true, Ordering::Relaxed) {
                            tracing::warn!(error = %e, bytes,
                                "recall: no pinned staging for large uploads and downloads; copying through pageable memory");
                        }
                        return None;
                    }
                }
            }
            let ring = slot.as_mut()?;
            let r = copy(ring);
            if r.is_err() {
                *slot = None;
            }
            Some(r.map_err(map_pool_error))
        }
    }

    /// How the GPU backend uploads a spreading graph's arrays (`recall_gpu_kernels::GraphUpload`): an array from
    /// [`super::STAGED_UPLOAD_MIN_BYTES`] up through the staging ring, as [`GpuBackend::copy_in`] stages caller
    /// data (the same payback, the same ring, counted in the same total), into a buffer on the graph's own stream
    /// (events order the ring's copies, on the device's stream, between that stream's allocation and its later
    /// work); smaller arrays, and every array while no ring can be had, in one pageable copy.
    ///
    /// A graph upload runs outside the backend's `lock` (spreading never takes it); it takes only the ring's own
    /// mutex, one array at a time. Its copies are queued on the device's stream, so they start after the work
    /// already queued there by a serialised call.
    #[derive(Debug)]
    pub(crate) struct GraphStaging<'a>(&'a GpuBackend);

    impl GraphStaging<'_> {
        fn upload<T: DeviceCopy + DeviceRepr + ValidAsZeroBits>(
            &mut self,
            gpu: &Gpu,
            src: &[T],
        ) -> Result<CudaSlice<T>, BackendError> {
            let bytes = std::mem::size_of_val(src);
            if !super::stages_upload(bytes) {
                return gpu.upload(src).map_err(map_gpu_error);
            }
            // Zeroed (a memset on the graph's stream, microseconds): the staged copies fill it after that.
            let mut dst = gpu.alloc_zeros::<T>(src.len()).map_err(map_gpu_error)?;
            match self.0.on_ring(bytes, |ring| {
                ring.upload_cuda_with(src, &mut dst, 0, host_copy)
            }) {
                Some(staged) => staged?,
                None => gpu.upload_into(src, &mut dst).map_err(map_gpu_error)?,
            }
            Ok(dst)
        }
    }

    // `GraphUpload`'s contract: `upload` allocates `src.len()` values in `gpu`'s context and fills them with `src`,
    // by a pageable copy on `gpu`'s stream or by the ring's copies, which `upload_cuda_with` orders before the later
    // work on the destination's stream (`gpu`'s) with an event.
    impl GraphUpload for GraphStaging<'_> {
        type Error = BackendError;
        fn upload_u32(&mut self, gpu: &Gpu, src: &[u32]) -> Result<CudaSlice<u32>, BackendError> {
            self.upload(gpu, src)
        }
        fn upload_u64(&mut self, gpu: &Gpu, src: &[u64]) -> Result<CudaSlice<u64>, BackendError> {
            self.upload(gpu, src)
        }
        fn upload_f32(&mut self, gpu: &Gpu, src: &[f32]) -> Result<CudaSlice<f32>, BackendError> {
            self.upload(gpu, src)
        }
    }

    /// Piece of a staged chunk each host-pool task copies.
    const HOST_COPY_PIECE: usize = 1 << 20;

    /// The host copy of a staged upload or download: `from` into `to` in pieces, on the host pool (not rayon's
    /// global one: the call holds the device, and every global worker may be a caller waiting for it; see
    /// `recall_gpu_kernels::on_host_pool`). An upload copies a chunk of the caller's data into a pinned slot, a
    /// download a pinned slot into a chunk of the caller's result.
    fn host_copy(to: &mut [u8], from: &[u8]) {
        recall_gpu_kernels::on_host_pool(|| {
            use rayon::prelude::*;
            to.par_chunks_mut(HOST_COPY_PIECE)
                .zip(from.par_chunks(HOST_COPY_PIECE))
                .for_each(|(d, s)| d.copy_from_slice(s));
        });
    }

    impl GpuBackend {
        /// knn of `queries` against rows already on the device: queries in chunks so that the score buffer
        /// stays under `SCORE_CHUNK_BYTES` (never the whole Q x N matrix), each chunk's top-k selected on the
        /// device. `resident`: the rows are a resident corpus's (see `Kernels::knn1_resident`).
        #[allow(clippy::too_many_arguments)]
        fn knn_on(
            &self,
            queries: &[f32],
            c: &CudaSlice<f32>,
            cn: Option<&CudaSlice<f32>>,
            n: usize,
            dim: usize,
            metric: Metric,
            k: usize,
            resident: bool,
        ) -> Result<TopK, BackendError> {
            let (g, kern) = (&self.gpu, &self.kernels);
            if queries.len() == dim && kern.knn1_supported(n, dim, k) {
                // One query against few rows: scan and selection in one launch (latency, not bytes), or
                // against a resident corpus through the one-query server where it is on.
                let q = OneQuery {
                    metric: sim_metric(metric),
                    query: queries,
                    corpus: c,
                    corpus_norms: cn,
                    n_rows: n,
                    dim,
                    k,
                };
                return if resident {
                    kern.knn1_resident(g, &q)
                } else {
                    kern.knn1(g, &q)
                }
                .map(topk)
                .map_err(map_kernel_error);
            }
            self.knn_chunked(
                queries,
                n,
                dim,
                metric,
                k,
                metric == Metric::Cosine,
                None,
                |c_| {
                    kern.similarity(
                        g,
                        sim_metric(metric),
                        c_.q,
                        c_.qn,
                        c,
                        cn,
                        c_.m,
                        n,
                        dim,
                        c_.scores,
                    )
                    .map_err(map_kernel_error)
                },
            )
        }

        /// Fast-mode knn of `queries` against padded 16-bit rows on the device (`ch`, row stride
        /// `half_ld(dim)`), with the rows' f32 norms for cosine and l2; query chunks as in `knn_on`.
        #[allow(clippy::too_many_arguments)]
        fn knn_on_fast(
            &self,
            queries: &[f32],
            ch: &CudaSlice<u16>,
            cn: Option<&CudaSlice<f32>>,
            n: usize,
            dim: usize,
            metric: Metric,
            k: usize,
            kind: HalfKind,
        ) -> Result<TopK, BackendError> {
            let (g, kern) = (&self.gpu, &self.kernels);
            let ld = half_ld(dim);
            if kern.knn_fast_supported(n, k) {
                return self.knn_fused_fast(queries, ch, cn, n, dim, metric, k, kind);
            }
            self.knn_chunked(
                queries,
                n,
                dim,
                metric,
                k,
                metric != Metric::Dot,
                Some(ld),
                |c_| {
                    let Some(qh) = c_.qh else {
                        return Err(BackendError::Gpu("16-bit query buffer missing".into()));
                    };
                    kern.to_half_rows(g, HalfSource::F32(c_.q), kind, c_.m, dim, qh)
                        .map_err(map_kernel_error)?;
                    kern.similarity_fast(
                        g,
                        kind,
                        sim_metric(metric),
                        qh,
                        c_.qn,
                        ch,
                        cn,
                        c_.m,
                        n,
                        ld,
                        c_.scores,
                    )
                    .map_err(map_kernel_error)
                },
            )
        }

        /// Fast-mode knn with top-k fused into the tensor-core GEMM (`Kernels::knn_fast`, k <= 32): no score
        /// matrix, so queries go in chunks of `FUSED_CHUNK_QUERIES` only to bound the scratch. The same lists
        /// as the GEMM followed by `select_topk`.
        #[allow(clippy::too_many_arguments)]
        fn knn_fused_fast(
            &self,
            queries: &[f32],
            ch: &CudaSlice<u16>,
            cn: Option<&CudaSlice<f32>>,
            n: usize,
            dim: usize,
            metric: Metric,
            k: usize,
            kind: HalfKind,
        ) -> Result<TopK, BackendError> {
            let (g, kern) = (&self.gpu, &self.kernels);
            let ld = half_ld(dim);
            let nq = queries.len() / dim;
            let chunk = FUSED_CHUNK_QUERIES.min(nq).max(1);
            let norms = metric != Metric::Dot;
            let mut sc = self.scratch.lock();
            let Scratch { q, qn, qh, .. } = &mut *sc;
            let mem = &self.mem;
            let q = grown_slice(mem, q, chunk * dim)?;
            let qn = grown(mem, qn, chunk)?;
            let qh = grown(mem, qh, chunk * ld)?;
            let mut result = TopK {
                k,
                ids: Vec::with_capacity(nq * k),
                scores: Vec::with_capacity(nq * k),
            };
            for q0 in (0..nq).step_by(chunk) {
                let m = chunk.min(nq - q0);
                self.copy_queries_in(&queries[q0 * dim..(q0 + m) * dim], q)?;
                if norms {
                    kern.row_norms_f32(g, q, m, dim, qn)
                        .map_err(map_kernel_error)?;
                }
                kern.to_half_rows(g, HalfSource::F32(q), kind, m, dim, qh)
                    .map_err(map_kernel_error)?;
                let part = kern
                    .knn_fast(
                        g,
                        kind,
                        sim_metric(metric),
                        qh,
                        norms.then_some(&*qn),
                        ch,
                        cn,
                        m,
                        n,
                        ld,
                        k,
                    )
                    .map_err(map_kernel_error)?;
                result.ids.extend(part.ids);
                result.scores.extend(part.scores);
            }
            Ok(result)
        }

        /// The query-chunk loop of `knn_on` and `knn_on_fast`: upload each chunk into the reused scratch,
        /// its norms when `norms` is set, a 16-bit buffer of row stride `ld` when given, then `score` fills
        /// the chunk's scores and the device selects each query's top k.
        #[allow(clippy::too_many_arguments)]
        fn knn_chunked(
            &self,
            queries: &[f32],
            n: usize,
            dim: usize,
            metric: Metric,
            k: usize,
            norms: bool,
            ld: Option<usize>,
            mut score: impl FnMut(ChunkBuffers<'_>) -> Result<(), BackendError>,
        ) -> Result<TopK, BackendError> {
            let (g, kern) = (&self.gpu, &self.kernels);
            let nq = queries.len() / dim;
            let chunk = recall_gpu_kernels::query_chunk(n, nq, SCORE_CHUNK_BYTES);
            let mut sc = self.scratch.lock();
            let Scratch { q, qn, qh, scores } = &mut *sc;
            let mem = &self.mem;
            let q = grown_slice(mem, q, chunk * dim)?;
            let qn = grown(mem, qn, chunk)?;
            let mut qh = match ld {
                Some(ld) => Some(grown(mem, qh, chunk * ld)?),
                None => None,
            };
            let scores_buf = grown(mem, scores, chunk * n)?;
            let mut result = TopK {
                k,
                ids: Vec::with_capacity(nq * k),
                scores: Vec::with_capacity(nq * k),
            };
            for q0 in (0..nq).step_by(chunk) {
                let m = chunk.min(nq - q0);
                self.copy_queries_in(&queries[q0 * dim..(q0 + m) * dim], q)?;
                if norms {
                    kern.row_norms_f32(g, q, m, dim, qn)
                        .map_err(map_kernel_error)?;
                }
                score(ChunkBuffers {
                    q,
                    qn: norms.then_some(&*qn),
                    qh: qh.as_deref_mut(),
                    m,
                    scores: scores_buf,
                })?;
                let segs = Segments::Dense {
                    n_segments: m,
                    seg_len: n,
                };
                let part = kern
                    .select_topk(
                        g,
                        scores_buf,
                        None,
                        segs,
                        k,
                        sim_metric(metric).higher_first(),
                    )
                    .map_err(map_kernel_error)?;
                result.ids.extend(part.ids);
                result.scores.extend(part.scores);
            }
            if chunk * n * 4 > KEEP_SCORES_BYTES {
                // Freed to the memory pool's cache (reused by the next large call; `trim`, or an
                // out-of-memory, gives it back).
                *scores = None;
            }
            Ok(result)
        }

        /// Give back every cached device buffer (knn and selection scratch, copies of corpora that no longer
        /// exist), then empty the memory pool's cache and trim the driver's pool, so the device's used memory
        /// drops to what live handles hold; the staged upload's pinned chunks and the pinned pool's cache go
        /// back to the host too. The caches are rebuilt on demand; call it when memory is short or before
        /// measuring memory.
        pub fn trim(&self) -> Result<(), BackendError> {
            let _serial = self.lock.lock();
            *self.scratch.lock() = Scratch::default();
            self.kernels.release_scratch();
            // Idle lanes go (their load of the kernels and its scratch: made again when needed); a lane in
            // use stays. Taking a lane also holds `lanes`, so one found idle here cannot be taken meanwhile.
            let idle: Vec<Arc<Lane>> = {
                let mut lanes = self.lanes.lock();
                let (busy, idle) = lanes
                    .drain(..)
                    .partition(|l| l.busy.load(Ordering::Acquire));
                *lanes = busy;
                idle
            };
            // Memory is given back now: a lane that could not be made before may be made again.
            self.no_more_lanes.store(false, Ordering::Relaxed);
            for lane in idle {
                if let Ok(Lane { gpu, kernels, .. }) = Arc::try_unwrap(lane) {
                    // Its scratch is freed on its stream: finished before the caches are trimmed below.
                    drop(kernels);
                    gpu.synchronize().map_err(map_gpu_error)?;
                }
            }
            self.resident.lock().retain(|r| r.alive.strong_count() > 0);
            self.graphs.drop_dead_entries();
            // The staged-upload ring's pinned chunks go back to the host (made again by the next large upload).
            *self.uploader.lock() = None;
            self.release_cached()?;
            self.mem.pinned_pool().trim_all();
            Ok(())
        }

        /// Give the cached memory of both allocators back to the driver: the memory pool's cache (waiting for
        /// the streams that freed it) and the driver's stream-ordered pool (buffers that are not the pool's
        /// yet: out-of-core chunks, k-means' centroids and keys, graphs, the kernels' own scratch). The two never hold the same bytes: each allocation comes from one of them. The staged
        /// upload's pinned chunks (host memory) stay: `trim` gives them back.
        fn release_cached(&self) -> Result<(), BackendError> {
            self.staging.lock().take();
            self.mem.device_pool().trim_all();
            self.gpu.release_cached_memory().map_err(map_gpu_error)
        }

        /// The memory pool that holds the backend's resident corpora and knn scratch (its statistics, budget
        /// and tenants).
        pub fn memory(&self) -> &GpuMemory {
            &self.mem
        }

        /// The memory pool's counters (bytes in use and cached, peak, hits, misses, failed requests).
        pub fn memory_stats(&self) -> PoolStats {
            self.mem.device_pool().stats()
        }

        /// Change the memory pool's VRAM budget (bytes). A request that would take the pool's live bytes
        /// over it is a typed out-of-memory before the driver is asked.
        pub fn set_vram_budget(&self, bytes: usize) {
            self.mem.device_pool().set_budget(bytes);
        }

        /// The corpus size above which knn streams the corpus instead of keeping it resident.
        pub fn corpus_budget(&self) -> usize {
            self.corpus_budget
                .load(std::sync::atomic::Ordering::Relaxed)
        }

        /// Change [`GpuBackend::corpus_budget`] (tests and benchmarks shrink it to exercise streaming).
        pub fn set_corpus_budget(&self, bytes: usize) {
            self.corpus_budget
                .store(bytes, std::sync::atomic::Ordering::Relaxed);
        }

        /// Change how many times its page-locked bytes the large copies must add up to before the staging ring
        /// is made ([`super::STAGING_PAYBACK`]); 0 makes it at the first large copy (tests and benchmarks).
        pub fn set_staging_payback(&self, times: u64) {
            self.staging_payback.store(times, Ordering::Relaxed);
        }

        /// How this backend uploads a spreading graph: large arrays staged ([`GraphStaging`]).
        pub(crate) fn graph_staging(&self) -> GraphStaging<'_> {
            GraphStaging(self)
        }

        /// Out-of-core knn: the corpus stays in host memory and passes through the device in chunks of
        /// `chunk_rows` rows (copied into one of two pinned staging buffers by a helper thread while the
        /// device works on the previous chunk, then DMA'd at bus speed); each chunk's top-k is merged on the
        /// host by pair key. Scores are computed exactly as in memory, so the answer is the same.
        ///
        /// This is the path for a plain slice; a corpus handle is page-locked once and DMA'd from directly
        /// ([`GpuBackend::knn_streamed_shared`]), without the host copy that bounds this path. Chunks hold at most
        /// [`super::STAGED_CHUNK_BYTES`] of corpus, whatever `chunk_rows` asks: page-locking the staging buffers costs
        /// time in proportion to their size. They are kept for the next call of the same chunk length (until
        /// `release_cached_memory`).
        #[allow(clippy::too_many_arguments)]
        pub fn knn_streamed(
            &self,
            queries: &[f32],
            corpus: &[f32],
            dim: usize,
            metric: Metric,
            k: usize,
            chunk_rows: usize,
        ) -> Result<TopK, BackendError> {
            let _serial = self.lock.lock();
            self.test_fault(crate::gpu_test_fault::TestFaultOp::Knn)?;
            let g = &self.gpu;
            let (nq, n) = (queries.len() / dim, corpus.len() / dim);
            let staged_rows = (super::STAGED_CHUNK_BYTES / (4 * dim)).max(1);
            let chunk_rows = stream_chunk_rows(chunk_rows.min(staged_rows), nq, n);
            let (q, qn) = self.upload_rows(queries, dim, metric)?;
            let mut dev = g
                .alloc_zeros::<f32>(chunk_rows * dim)
                .map_err(map_gpu_error)?;
            let mut bufs = StreamBuffers::new(g, nq, chunk_rows)?;
            // The last call's staging buffers where they have this call's chunk length (an upload copies a whole
            // buffer); their copies have finished: that call waited for its last chunk's result.
            let kept = self
                .staging
                .lock()
                .take()
                .filter(|s| s.iter().all(|b| b.len() == chunk_rows * dim));
            let mut staging = match kept {
                Some(s) => s,
                None => [
                    g.alloc_pinned::<f32>(chunk_rows * dim)
                        .map_err(map_gpu_error)?,
                    g.alloc_pinned::<f32>(chunk_rows * dim)
                        .map_err(map_gpu_error)?,
                ],
            };
            let n_chunks = n.div_ceil(chunk_rows);
            // Every chunk's top k (ids relative to its first row), merged exactly at the end.
            let mut parts = Vec::with_capacity(n_chunks);
            let fill = |buf: &mut recall_gpu_sys::driver::PinnedHostSlice<f32>,
                        c: usize|
             -> Result<(), BackendError> {
                let rows = chunk_rows.min(n - c * chunk_rows);
                let src = &corpus[c * chunk_rows * dim..(c * chunk_rows + rows) * dim];
                let dst = buf
                    .as_mut_slice()
                    .map_err(|e| BackendError::Gpu(e.to_string()))?;
                let Some(dst) = dst.get_mut(..src.len()) else {
                    return Err(BackendError::Gpu(
                        "staging buffer shorter than a chunk".into(),
                    ));
                };
                // On the host pool, not rayon's global one: this call holds the device, and every global worker
                // may be a caller waiting for it (`recall_gpu_kernels::on_host_pool`).
                recall_gpu_kernels::on_host_pool(|| {
                    use rayon::prelude::*;
                    dst.par_chunks_mut(1 << 18)
                        .zip(src.par_chunks(1 << 18))
                        .for_each(|(d, s)| d.copy_from_slice(s));
                });
                Ok(())
            };
            fill(&mut staging[0], 0)?;
            for c in 0..n_chunks {
                let rows = chunk_rows.min(n - c * chunk_rows);
                let (cur, next) = if c % 2 == 0 {
                    let (a, b) = staging.split_at_mut(1);
                    (&mut a[0], &mut b[0])
                } else {
                    let (a, b) = staging.split_at_mut(1);
                    (&mut b[0], &mut a[0])
                };
                g.upload_pinned(cur, &mut dev).map_err(map_gpu_error)?;
                // The next chunk goes into the other staging buffer while the device works on this one. That
                // buffer's own copy (chunk c - 1) has finished: chunk c - 1's selection ended by downloading
                // its result, which waited for the stream.
                let device_part = std::thread::scope(|s| {
                    let helper = (c + 1 < n_chunks).then(|| s.spawn(|| fill(next, c + 1)));
                    let part = self.chunk_topk(
                        &q,
                        qn.as_deref(),
                        &dev,
                        &mut bufs,
                        nq,
                        rows,
                        dim,
                        metric,
                        k,
                    );
                    let filled = match helper {
                        Some(h) => h.join().unwrap_or_else(|_| {
                            Err(BackendError::Gpu("staging copy panicked".into()))
                        }),
                        None => Ok(()),
                    };
                    filled.and(part)
                })?;
                parts.push((c * chunk_rows, device_part));
            }
            *self.staging.lock() = Some(staging);
            Ok(crate::backend::merge_topk(&parts, nq, k, metric))
        }

        /// Out-of-core knn over a corpus handle: its memory is page-locked once (`cuMemHostRegister`, kept
        /// while the handle lives) and each chunk is DMA'd straight from it on a copy stream into one of two
        /// device buffers while the previous chunk's kernels run on the compute stream (events order the
        /// two); per-chunk top-k merged exactly as in [`GpuBackend::knn_streamed`]. If the memory cannot be
        /// page-locked (a lock limit, for example) this logs why once and runs the staged path.
        pub fn knn_streamed_shared(
            &self,
            queries: &[f32],
            corpus: &SharedCorpus,
            metric: Metric,
            k: usize,
            chunk_rows: usize,
        ) -> Result<TopK, BackendError> {
            let dim = corpus.dim();
            let registered = corpus.pinned(|values| {
                let bytes = values.len() * 4;
                match self.gpu.register_host(values) {
                    Ok(r) => {
                        tracing::info!(bytes, "recall: page-locked a streamed corpus for direct DMA");
                        Some(std::sync::Arc::new(r))
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, bytes,
                            "recall: could not page-lock the corpus; streaming it through staging buffers");
                        None
                    }
                }
            });
            let Some((reg, range)) = registered else {
                return self.knn_streamed(queries, corpus.data(), dim, metric, k, chunk_rows);
            };
            let _serial = self.lock.lock();
            let g = &self.gpu;
            let (nq, n) = (queries.len() / dim, corpus.n_rows());
            let chunk_rows = stream_chunk_rows(chunk_rows, nq, n);
            let (q, qn) = self.upload_rows(queries, dim, metric)?;
            let mut dev = [
                g.alloc_zeros::<f32>(chunk_rows * dim)
                    .map_err(map_gpu_error)?,
                g.alloc_zeros::<f32>(chunk_rows * dim)
                    .map_err(map_gpu_error)?,
            ];
            let mut bufs = StreamBuffers::new(g, nq, chunk_rows)?;
            // Declared after the device buffers, so dropped (and so waited for) before they are freed.
            let copies = g.copy_stream().map_err(map_gpu_error)?;
            let fence = g.fence().map_err(map_gpu_error)?;
            let n_chunks = n.div_ceil(chunk_rows);
            let elems = |c: usize| {
                let r0 = c * chunk_rows;
                let r1 = (r0 + chunk_rows).min(n);
                range.start + r0 * dim..range.start + r1 * dim
            };
            g.record_fence(&fence).map_err(map_gpu_error)?;
            g.upload_registered(&copies, &fence, &reg, elems(0), &mut dev[0])
                .map_err(map_gpu_error)?;
            // Every chunk's top k (ids relative to its first row), merged exactly at the end.
            let mut parts = Vec::with_capacity(n_chunks);
            for c in 0..n_chunks {
                let rows = chunk_rows.min(n - c * chunk_rows);
                // This chunk's kernels wait for its copy (the last one queued).
                g.wait_for_copies(&copies).map_err(map_gpu_error)?;
                let (a, b) = dev.split_at_mut(1);
                let (cur, next) = if c % 2 == 0 {
                    (&a[0], &mut b[0])
                } else {
                    (&b[0], &mut a[0])
                };
                if c + 1 < n_chunks {
                    // The next chunk's copy overwrites the buffer the previous chunk's kernels read: it waits
                    // for them (the fence), not for this chunk's, which run while it copies.
                    g.record_fence(&fence).map_err(map_gpu_error)?;
                    g.upload_registered(&copies, &fence, &reg, elems(c + 1), next)
                        .map_err(map_gpu_error)?;
                }
                let part =
                    self.chunk_topk(&q, qn.as_deref(), cur, &mut bufs, nq, rows, dim, metric, k)?;
                parts.push((c * chunk_rows, part));
            }
            drop(copies);
            Ok(crate::backend::merge_topk(&parts, nq, k, metric))
        }

        /// One streamed chunk's top-k: norms for cosine, scores of every query against the chunk's `rows`
        /// rows in `dev`, selection on the device (ids relative to the chunk).
        #[allow(clippy::too_many_arguments)]
        fn chunk_topk(
            &self,
            q: &CudaSlice<f32>,
            qn: Option<&CudaSlice<f32>>,
            dev: &CudaSlice<f32>,
            bufs: &mut StreamBuffers,
            nq: usize,
            rows: usize,
            dim: usize,
            metric: Metric,
            k: usize,
        ) -> Result<TopK, BackendError> {
            let (g, kern) = (&self.gpu, &self.kernels);
            if metric == Metric::Cosine {
                kern.row_norms_f32(g, dev, rows, dim, &mut bufs.norms)
                    .map_err(map_kernel_error)?;
            }
            kern.similarity(
                g,
                sim_metric(metric),
                q,
                qn,
                dev,
                (metric == Metric::Cosine).then_some(&bufs.norms),
                nq,
                rows,
                dim,
                &mut bufs.scores,
            )
            .map_err(map_kernel_error)?;
            let segs = Segments::Dense {
                n_segments: nq,
                seg_len: rows,
            };
            kern.select_topk(
                g,
                &bufs.scores,
                None,
                segs,
                k.min(rows),
                sim_metric(metric).higher_first(),
            )
            .map(topk)
            .map_err(map_kernel_error)
        }

        /// Whether a corpus of `rows x dim` f32 is over the budget and so streamed.
        fn streams(&self, n_values: usize) -> bool {
            n_values.saturating_mul(4) > self.corpus_budget()
        }

        /// The device copy of `corpus` (uploaded on first use, dropping other corpora's copies if memory is
        /// short), with its norms once `metric` is cosine. The caller holds `self.lock`.
        fn resident_entry<'r>(
            &self,
            resident: &'r mut Vec<Resident>,
            corpus: &SharedCorpus,
            metric: Metric,
        ) -> Result<&'r mut Resident, BackendError> {
            let (g, kern) = (&self.gpu, &self.kernels);
            let (n, dim) = (corpus.n_rows(), corpus.dim());
            // Free the device copies of corpora that no longer exist.
            self.drop_dead_resident(resident)?;
            let mut made = false;
            if !resident.iter().any(|r| r.id == corpus.id()) {
                let len = corpus.data().len();
                let mut buf = match DeviceBuffer::try_alloc(&self.mem, len) {
                    Ok(buf) => buf,
                    Err(e) if e.is_out_of_memory() => {
                        // Make room: drop the other corpora's copies (they are uploaded again when used); the
                        // pool reuses or gives back their memory.
                        resident.clear();
                        self.release_cached()?;
                        DeviceBuffer::try_alloc(&self.mem, len).map_err(map_pool_error)?
                    }
                    Err(e) => return Err(map_pool_error(e)),
                };
                // Staged when large (as a plain slice's rows are); `made` below waits for it to complete.
                self.copy_in(corpus.data(), &mut buf)?;
                let rows = DeviceSlice::new(buf).map_err(map_pool_error)?;
                made = true;
                resident.push(Resident {
                    id: corpus.id(),
                    alive: corpus.weak(),
                    rows: Arc::new(rows),
                    norms: None,
                    half: None,
                });
            }
            let Some(entry) = resident.iter_mut().find(|r| r.id == corpus.id()) else {
                return Err(BackendError::Gpu(
                    "resident corpus missing after upload".into(),
                ));
            };
            if metric == Metric::Cosine && entry.norms.is_none() {
                let norms = DeviceSlice::try_zeroed(&self.mem, n)
                    .map_err(map_pool_error)
                    .and_then(|mut norms| {
                        kern.row_norms_f32(g, &entry.rows, n, dim, &mut norms)
                            .map_err(map_kernel_error)
                            .map(|()| norms)
                    });
                match norms {
                    Ok(norms) => {
                        entry.norms = Some(Arc::new(norms));
                        made = true;
                    }
                    Err(e) => {
                        // The rows' upload just made stays cached: complete it before any call (a lane, on
                        // another stream) can find it, as below (the norms' error is the one to report).
                        if made {
                            let _ = g.synchronize();
                        }
                        return Err(e);
                    }
                }
            }
            if made {
                // Complete before any call reads it, on whichever stream (lanes run outside `lock`).
                g.synchronize().map_err(map_gpu_error)?;
            }
            Ok(entry)
        }

        /// Drop the device copies of corpora that no longer exist and, when any went, give the memory back
        /// (see [`drop_dead`]; the copies are the memory pool's, so its cache is emptied too).
        fn drop_dead_resident(&self, resident: &mut Vec<Resident>) -> Result<usize, BackendError> {
            let before = resident.len();
            resident.retain(|r| r.alive.strong_count() > 0);
            if resident.len() < before {
                self.release_cached()?;
            }
            Ok(resident.len())
        }

        /// A free lane, a new one while fewer than [`MAX_LANES`] exist, or `None` (then the call runs under
        /// `lock` on the main stream, as every call did before lanes).
        fn take_lane(&self) -> Option<LaneGuard> {
            if self.no_more_lanes.load(Ordering::Relaxed) {
                return None;
            }
            let mut lanes = self.lanes.lock();
            for lane in lanes.iter() {
                if lane
                    .busy
                    .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    return Some(LaneGuard(Arc::clone(lane)));
                }
            }
            if lanes.len() >= MAX_LANES {
                return None;
            }
            let made = self
                .gpu
                .with_new_stream()
                .map_err(|e| e.to_string())
                .and_then(|gpu| {
                    let kernels = Kernels::load(&gpu, self.force_sm).map_err(|e| e.to_string())?;
                    Ok(Lane {
                        gpu,
                        kernels,
                        busy: AtomicBool::new(true),
                    })
                });
            match made {
                Ok(lane) => {
                    let lane = Arc::new(lane);
                    lanes.push(Arc::clone(&lane));
                    Some(LaneGuard(lane))
                }
                Err(e) => {
                    tracing::warn!(error = %e, "recall: no further GPU stream; calls stay serialised");
                    self.no_more_lanes.store(true, Ordering::Relaxed);
                    None
                }
            }
        }

        /// Candidate scoring against rows already on the device (`c`, with its norms for cosine): gather,
        /// score and select each query's top k of its own list. The caller holds `self.lock`.
        #[allow(clippy::too_many_arguments)]
        fn candidates_on(
            &self,
            queries: &[f32],
            c: &CudaSlice<f32>,
            cn: Option<&CudaSlice<f32>>,
            dim: usize,
            metric: Metric,
            offsets: &[usize],
            ids: &[u32],
            k: usize,
        ) -> Result<TopK, BackendError> {
            let (g, kern) = (&self.gpu, &self.kernels);
            if kern.cand_supported(dim, k) {
                return fused_candidates(g, kern, queries, c, cn, dim, metric, offsets, ids, k);
            }
            let nq = queries.len() / dim;
            let n = c.len() / dim;
            let offsets64: Vec<u64> = offsets.iter().map(|&o| o as u64).collect();
            let (q, qn) = self.upload_rows(queries, dim, metric)?;
            let mut scores = g
                .alloc_zeros::<f32>(ids.len().max(1))
                .map_err(map_gpu_error)?;
            let (ids_dev, offsets_dev) = kern
                .similarity_gather(
                    g,
                    sim_metric(metric),
                    &q,
                    qn.as_deref(),
                    c,
                    cn,
                    nq,
                    n,
                    dim,
                    ids,
                    &offsets64,
                    &mut scores,
                )
                .map_err(map_kernel_error)?;
            let segs = Segments::Ragged {
                offsets: &offsets64,
                offsets_dev: &offsets_dev,
            };
            let r = kern
                .select_topk(
                    g,
                    &scores,
                    Some(&ids_dev),
                    segs,
                    k,
                    sim_metric(metric).higher_first(),
                )
                .map_err(map_kernel_error)?;
            Ok(topk(r))
        }

        /// Whether a fast-mode call of `n_queries` runs on tensor cores here (else it runs exact).
        fn runs_fast(&self, n_queries: usize) -> bool {
            self.kernels.fast_mode_available() && n_queries > SCAN_MAX_QUERIES
        }

        /// How many shared corpora are on the device now (after dropping those that no longer exist).
        pub fn resident_corpora(&self) -> usize {
            let mut resident = self.resident.lock();
            // Best effort: the copies are freed either way; the pool keeps their memory if the release fails.
            self.drop_dead_resident(&mut resident)
                .unwrap_or(resident.len())
        }

        /// How many shared graphs are on the device now (after dropping those that no longer exist).
        pub fn resident_graphs(&self) -> usize {
            self.graphs.len(&self.gpu)
        }
    }

    impl Backend for GpuBackend {
        fn device(&self) -> Device {
            Device::Gpu {
                ordinal: self.description.ordinal,
            }
        }

        fn release_cached_memory(&self) {
            let _serial = self.lock.lock();
            if let Err(e) = self.release_cached() {
                tracing::warn!(error = %e, "recall: could not give cached GPU memory back");
            }
        }

        fn similarity(
            &self,
            queries: &[f32],
            corpus: &[f32],
            dim: usize,
            metric: Metric,
        ) -> Result<Vec<f32>, BackendError> {
            let _serial = self.lock.lock();
            self.test_fault(crate::gpu_test_fault::TestFaultOp::Similarity)?;
            let (g, k) = (&self.gpu, &self.kernels);
            let (nq, n) = (queries.len() / dim, corpus.len() / dim);
            let (q, qn) = self.upload_rows(queries, dim, metric)?;
            let (c, cn) = self.upload_rows(corpus, dim, metric)?;
            let mut out = self.call_zeroed::<f32>(nq * n)?;
            k.similarity(
                g,
                sim_metric(metric),
                &q,
                qn.as_deref(),
                &c,
                cn.as_deref(),
                nq,
                n,
                dim,
                &mut out,
            )
            .map_err(map_kernel_error)?;
            // A fresh output (huge pages from 32 MiB: the copy out first touches it), staged back when large.
            let mut scores = recall_cpu_simd::output_buffer(out.len());
            self.copy_out(&out, &mut scores)?;
            Ok(scores)
        }

        fn knn(
            &self,
            queries: &[f32],
            corpus: &[f32],
            dim: usize,
            metric: Metric,
            k: usize,
        ) -> Result<TopK, BackendError> {
            if self.streams(corpus.len()) {
                let chunk = (STREAM_CHUNK_BYTES / (4 * dim)).max(1);
                return self.knn_streamed(queries, corpus, dim, metric, k, chunk);
            }
            let _serial = self.lock.lock();
            self.test_fault(crate::gpu_test_fault::TestFaultOp::Knn)?;
            let (c, cn) = self.upload_rows(corpus, dim, metric)?;
            self.knn_on(
                queries,
                &c,
                cn.as_deref(),
                corpus.len() / dim,
                dim,
                metric,
                k,
                false,
            )
        }

        fn knn_shared(
            &self,
            queries: &[f32],
            corpus: &SharedCorpus,
            metric: Metric,
            k: usize,
        ) -> Result<TopK, BackendError> {
            if self.streams(corpus.data().len()) {
                let chunk = (STREAM_CHUNK_BYTES / (4 * corpus.dim())).max(1);
                return self.knn_streamed_shared(queries, corpus, metric, k, chunk);
            }
            let _serial = self.lock.lock();
            self.test_fault(crate::gpu_test_fault::TestFaultOp::Knn)?;
            let (n, dim) = (corpus.n_rows(), corpus.dim());
            let mut resident = self.resident.lock();
            let entry = self.resident_entry(&mut resident, corpus, metric)?;
            let norms = if metric == Metric::Cosine {
                entry.norms.as_deref().map(|n| &**n)
            } else {
                None
            };
            // Resident: complete (`resident_entry` synchronised after making it) and never written again.
            self.knn_on(queries, &entry.rows, norms, n, dim, metric, k, true)
        }

        fn knn_fast(
            &self,
            queries: &[f32],
            corpus: &[f32],
            dim: usize,
            metric: Metric,
            k: usize,
            format: FastFormat,
        ) -> Result<TopK, BackendError> {
            // Over the corpus budget: the exact path, which streams it (as `knn_shared_fast` does). Uploading it
            // whole with its 16-bit copy could not fit, and halving the queries on out-of-memory would upload it
            // again each time before the CPU answered.
            if self.streams(corpus.len())
                || !self.runs_fast(queries.len() / dim)
                || !fits_format(queries, format)
                || !fits_format(corpus, format)
            {
                return self.knn(queries, corpus, dim, metric, k);
            }
            let _serial = self.lock.lock();
            self.test_fault(crate::gpu_test_fault::TestFaultOp::Knn)?;
            let (g, kern) = (&self.gpu, &self.kernels);
            let n = corpus.len() / dim;
            let (c, cn) = self.upload_rows(corpus, dim, fast_norm_metric(metric))?;
            let kind = half_kind(format);
            let mut ch = self.call_zeroed::<u16>(n * half_ld(dim))?;
            kern.to_half_rows(g, HalfSource::F32(&c), kind, n, dim, &mut ch)
                .map_err(map_kernel_error)?;
            drop(c);
            self.knn_on_fast(queries, &ch, cn.as_deref(), n, dim, metric, k, kind)
        }

        fn knn_shared_fast(
            &self,
            queries: &[f32],
            corpus: &SharedCorpus,
            metric: Metric,
            k: usize,
            format: FastFormat,
        ) -> Result<TopK, BackendError> {
            let dim = corpus.dim();
            if !self.runs_fast(queries.len() / dim)
                || !fits_format(queries, format)
                || (format == FastFormat::F16 && corpus.max_abs() > F16_MAX)
                || self.streams(corpus.data().len())
            {
                return self.knn_shared(queries, corpus, metric, k);
            }
            let _serial = self.lock.lock();
            self.test_fault(crate::gpu_test_fault::TestFaultOp::Knn)?;
            let (g, kern) = (&self.gpu, &self.kernels);
            let n = corpus.n_rows();
            let kind = half_kind(format);
            let mut resident = self.resident.lock();
            // The corpus resident as for exact calls, with its norms for cosine and l2.
            let entry = self.resident_entry(&mut resident, corpus, fast_norm_metric(metric))?;
            if !matches!(&entry.half, Some((kd, _)) if *kd == kind) {
                entry.half = None; // one 16-bit copy at a time
                let mut ch =
                    DeviceSlice::try_zeroed(&self.mem, n * half_ld(dim)).map_err(map_pool_error)?;
                kern.to_half_rows(g, HalfSource::F32(&entry.rows), kind, n, dim, &mut ch)
                    .map_err(map_kernel_error)?;
                entry.half = Some((kind, ch));
            }
            let Some((_, ch)) = entry.half.as_ref() else {
                return Err(BackendError::Gpu("16-bit corpus copy missing".into()));
            };
            let norms = if metric == Metric::Dot {
                None
            } else {
                entry.norms.as_deref().map(|n| &**n)
            };
            self.knn_on_fast(queries, ch, norms, n, dim, metric, k, kind)
        }

        fn score_candidates_shared(
            &self,
            queries: &[f32],
            corpus: &SharedCorpus,
            metric: Metric,
            offsets: &[usize],
            ids: &[u32],
            k: usize,
        ) -> Result<TopK, BackendError> {
            let lane = if self.kernels.cand_supported(corpus.dim(), k) {
                self.take_lane()
            } else {
                None
            };
            let serial = self.lock.lock();
            self.test_fault(crate::gpu_test_fault::TestFaultOp::Candidates)?;
            let mut resident = self.resident.lock();
            let entry = self.resident_entry(&mut resident, corpus, metric)?;
            let (rows, norms) = (
                Arc::clone(&entry.rows),
                entry.norms.clone().filter(|_| metric == Metric::Cosine),
            );
            let cn = norms.as_deref().map(|n| &**n);
            let Some(lane) = lane else {
                return self.candidates_on(
                    queries,
                    &rows,
                    cn,
                    corpus.dim(),
                    metric,
                    offsets,
                    ids,
                    k,
                );
            };
            // Under the lock only to find (or make) the resident copy; the scoring runs on the lane.
            drop(resident);
            drop(serial);
            let Lane { gpu, kernels, .. } = &*lane.0;
            fused_candidates(
                gpu,
                kernels,
                queries,
                &rows,
                cn,
                corpus.dim(),
                metric,
                offsets,
                ids,
                k,
            )
        }

        fn score_candidates(
            &self,
            queries: &[f32],
            corpus: &[f32],
            dim: usize,
            metric: Metric,
            offsets: &[usize],
            ids: &[u32],
            k: usize,
        ) -> Result<TopK, BackendError> {
            let _serial = self.lock.lock();
            self.test_fault(crate::gpu_test_fault::TestFaultOp::Candidates)?;
            let (c, cn) = self.upload_rows(corpus, dim, metric)?;
            self.candidates_on(queries, &c, cn.as_deref(), dim, metric, offsets, ids, k)
        }

        fn spread(
            &self,
            graph: &SpreadGraph,
            seeds: &[f32],
            params: &SpreadParams,
        ) -> Result<Spread, BackendError> {
            self.test_fault(crate::gpu_test_fault::TestFaultOp::Spread)?;
            let (g, kern) = (&self.gpu, &self.kernels);
            let dev = crate::gpu_shared_graph::upload(g, kern, graph, &mut self.graph_staging())?;
            crate::gpu_shared_graph::spread_on(g, kern, &dev, Seeds::Dense(seeds), params)
        }

        fn spread_shared(
            &self,
            graph: &crate::shared_graph::SharedGraph,
            seeds: &[f32],
            params: &SpreadParams,
        ) -> Result<Spread, BackendError> {
            self.test_fault(crate::gpu_test_fault::TestFaultOp::Spread)?;
            crate::gpu_shared_graph::spread_resident(
                &self.gpu,
                &self.kernels,
                &self.graphs,
                &mut self.graph_staging(),
                graph,
                Seeds::Dense(seeds),
                params,
            )
        }

        /// The pairs go to the launcher as they are (no dense vector is made or scanned).
        fn spread_shared_from(
            &self,
            graph: &crate::shared_graph::SharedGraph,
            seeds: &[(u32, f32)],
            params: &SpreadParams,
        ) -> Result<Spread, BackendError> {
            self.test_fault(crate::gpu_test_fault::TestFaultOp::Spread)?;
            crate::gpu_shared_graph::spread_resident(
                &self.gpu,
                &self.kernels,
                &self.graphs,
                &mut self.graph_staging(),
                graph,
                Seeds::List(seeds),
                params,
            )
        }

        fn kmeans(
            &self,
            points: &[f32],
            dim: usize,
            k: usize,
            iters: usize,
            seed: u64,
        ) -> Result<KMeans, BackendError> {
            let _serial = self.lock.lock();
            self.test_fault(crate::gpu_test_fault::TestFaultOp::Kmeans)?;
            let (g, kern) = (&self.gpu, &self.kernels);
            let n = points.len() / dim;
            // Seeding is O(k) and runs on the host for every backend (docs/numerics.md).
            let mut init = Vec::with_capacity(k * dim);
            for p in kmeans_seed_indices(n, k, seed)? {
                init.extend_from_slice(&points[p as usize * dim..(p as usize + 1) * dim]);
            }
            // The caller's points from the memory pool (staged when large): their upload was most of a small
            // call's time.
            let pts = self.upload_slice(points)?;
            let mut centroids = g.upload(&init).map_err(map_gpu_error)?;
            let mut keys = g.alloc_zeros::<u64>(n).map_err(map_gpu_error)?;
            let mut assignments = vec![0u32; n];
            // Grown as the iterations run: `iters` is the caller's, and reserving it up front panicked (capacity
            // overflow) or aborted the process (a failed allocation) for a huge count.
            let mut inertia = Vec::new();
            let mut scratch = KMeansScratch::default();
            for _ in 0..iters {
                let it = kern
                    .kmeans_iteration(
                        g,
                        &pts,
                        n,
                        dim,
                        &mut centroids,
                        k,
                        &mut keys,
                        &mut assignments,
                        &mut scratch,
                    )
                    .map_err(map_kernel_error)?;
                inertia.push(it);
                if !it.is_finite() {
                    // `check_kmeans_result` below names this iteration whatever later ones do (as the CPU stops).
                    break;
                }
            }
            let centroids = g.download(&centroids).map_err(map_gpu_error)?;
            let r = KMeans {
                centroids,
                assignments,
                inertia,
            };
            // The same rule on the same bits as the CPU: an overflow is the caller's input, not a GPU failure.
            recall_cpu_simd::check_kmeans_result(&r)?;
            Ok(r)
        }

        fn clip_and_noise_into(
            &self,
            x: &[f32],
            dim: usize,
            clip: f32,
            sigma: f32,
            seed: u64,
            out: &mut [f32],
        ) -> Result<(), BackendError> {
            recall_cpu_simd::check_clip_noise_output(x.len(), out.len())?;
            // This op's values arrive unchecked (`Backend::clip_and_noise_into`): the kernel trusts them.
            recall_cpu_simd::check_finite("vectors", x)?;
            let _serial = self.lock.lock();
            self.test_fault(crate::gpu_test_fault::TestFaultOp::Noise)?;
            let (g, kern) = (&self.gpu, &self.kernels);
            let xs = self.upload_slice(x)?;
            // From the memory pool (counted against the call's tenant, as its input is), on the device's stream:
            // what the staged download reads from.
            let mut dev = self.call_zeroed::<f32>(x.len())?;
            kern.clip_noise(g, &xs, x.len() / dim, dim, clip, sigma, seed, &mut dev)
                .map_err(map_kernel_error)?;
            self.copy_out(&dev, out)?;
            // Into page-locked memory the pageable path's copy runs on after the call returns: done before `out`
            // is the caller's again (the staged path has waited for every chunk).
            g.synchronize().map_err(map_gpu_error)
        }
    }
}

#[cfg(not(feature = "gpu"))]
mod imp {
    use crate::backend::{Backend, BackendError};
    use crate::device::{Device, GpuDescription};
    use recall_cpu_simd::{KMeans, Metric, Spread, SpreadGraph, SpreadParams, TopK};

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

        pub fn discover_all(
            _force_sm: Option<u32>,
            _only: Option<&[usize]>,
        ) -> Result<Vec<GpuBackend>, String> {
            Err("this build of recall has no GPU support (cargo feature `gpu` is off)".into())
        }

        pub fn description(&self) -> &GpuDescription {
            &self.description
        }

        /// Never known without a GPU.
        pub fn memory_info(&self) -> Option<(u64, u64)> {
            None
        }

        /// Nothing to give back without a GPU.
        pub fn trim(&self) -> Result<(), BackendError> {
            Ok(())
        }

        /// No corpus is ever resident without a GPU.
        pub fn set_corpus_budget(&self, _bytes: usize) {}

        /// Nothing is staged without a GPU.
        pub fn set_staging_payback(&self, _times: u64) {}

        /// TEST ONLY: nothing to fail without a GPU.
        pub fn set_test_fault(&self, _fault: Option<crate::TestFault>) {}

        /// TEST ONLY: never fires without a GPU.
        pub fn test_faults_fired(&self) -> u64 {
            0
        }
    }

    fn compiled_out<T>() -> Result<T, BackendError> {
        Err(BackendError::Gpu("gpu support compiled out".into()))
    }

    impl Backend for GpuBackend {
        fn device(&self) -> Device {
            Device::Gpu {
                ordinal: self.description.ordinal,
            }
        }

        fn similarity(
            &self,
            _: &[f32],
            _: &[f32],
            _: usize,
            _: Metric,
        ) -> Result<Vec<f32>, BackendError> {
            compiled_out()
        }

        fn knn(
            &self,
            _: &[f32],
            _: &[f32],
            _: usize,
            _: Metric,
            _: usize,
        ) -> Result<TopK, BackendError> {
            compiled_out()
        }

        fn score_candidates(
            &self,
            _: &[f32],
            _: &[f32],
            _: usize,
            _: Metric,
            _: &[usize],
            _: &[u32],
            _: usize,
        ) -> Result<TopK, BackendError> {
            compiled_out()
        }

        fn spread(
            &self,
            _: &SpreadGraph,
            _: &[f32],
            _: &SpreadParams,
        ) -> Result<Spread, BackendError> {
            compiled_out()
        }

        fn kmeans(
            &self,
            _: &[f32],
            _: usize,
            _: usize,
            _: usize,
            _: u64,
        ) -> Result<KMeans, BackendError> {
            compiled_out()
        }
    }
}

pub use imp::{GpuBackend, bundle_arches};
#[cfg(feature = "gpu")]
pub(crate) use imp::{drop_dead, map_gpu_error, map_kernel_error};
