//! The launcher of `sm80_knn1_*`: one query against at most [`KNN1_MAX_ROWS`] rows, similarity and top-k
//! (k <= 32) in one launch. The host's part is two queued calls and one wait: the query into a pinned
//! buffer and across, and the kernel, which writes its `2k` answer words straight into mapped pinned memory
//! (or, with `RECALL_ONE_QUERY_READBACK=copy`, into device memory, copied back as a third call).

use crate::launch::{KernelError, Kernels, SimMetric, TopKResult};
use recall_gpu_sys::driver::{CudaFunction, CudaSlice, LaunchConfig, PinnedHostSlice};
use recall_gpu_sys::{Gpu, GpuError, MappedReadback};
use recall_kernel_shared::{Knn1Params, SMALL_K_MAX, knn1_shared_bytes};
use std::sync::OnceLock;

/// The most rows [`Kernels::knn1`] takes. Above it the separate scan (more warps per SM in flight) and
/// selection are faster: at 1,000,000 x 768 on an H200 `knn1` moved 2.5 TB/s against the scan's 3.9.
pub const KNN1_MAX_ROWS: usize = 262_144;
/// The longest rows [`Kernels::knn1`] takes (its query lives in shared memory).
pub const KNN1_MAX_DIM: usize = 4096;

/// The three metric variants, and the most warps per block the device's shared memory allows.
#[derive(Debug)]
pub(crate) struct Knn1Kernels {
    funcs: [CudaFunction; 3],
    max_warps: u32,
}

impl Knn1Kernels {
    /// Look the kernels up and opt them into the shared memory their largest block needs; `None` when the
    /// device has too little for even one warp per block of `KNN1_MAX_DIM`.
    pub(crate) fn load(
        gpu: &Gpu,
        f: impl Fn(&str) -> Result<CudaFunction, GpuError>,
    ) -> Result<Option<Knn1Kernels>, GpuError> {
        let funcs = [
            f("sm80_knn1_dot")?,
            f("sm80_knn1_cosine")?,
            f("sm80_knn1_l2")?,
        ];
        for warps in [2, 1] {
            let bytes = knn1_shared_bytes(KNN1_MAX_DIM as u32, warps);
            if funcs
                .iter()
                .all(|func| gpu.allow_dynamic_shared(func, bytes).is_ok())
            {
                return Ok(Some(Knn1Kernels {
                    funcs,
                    max_warps: warps,
                }));
            }
        }
        tracing::debug!("sm80_knn1: not enough shared memory per block; the separate kernels run");
        Ok(None)
    }
}

/// Device and pinned buffers of a one-query launch (`knn1`, `scan1`), grown on demand and reused: the query
/// going in, the scores, the partial lists and their tickets, the `2k` answer words coming back.
#[derive(Debug)]
pub(crate) struct OneQueryScratch {
    query_host: PinnedHostSlice<f32>,
    pub(crate) query: CudaSlice<f32>,
    pub(crate) scores: CudaSlice<f32>,
    pub(crate) partial: CudaSlice<u64>,
    /// Zero between launches (the kernel's last block or mergers reset them).
    pub(crate) tickets: CudaSlice<u32>,
    answer: Answer,
}

/// Where a one-query launch's `2k` answer words land: pinned host memory mapped into the device, written by
/// the kernel itself, or (by setting, or where the mapping failed) a device buffer copied back into a pinned
/// readback.
#[derive(Debug)]
enum Answer {
    Mapped(MappedReadback<u64>),
    Copied {
        device: CudaSlice<u64>,
        host: PinnedHostSlice<u64>,
    },
}

/// Whether one-query answers come back through mapped memory (the default) or a copy
/// (`RECALL_ONE_QUERY_READBACK=copy`), read once. A copy call costs about as much as a small launch on some
/// hosts; both give the same words.
pub fn one_query_readback_mapped() -> bool {
    static MAPPED: OnceLock<bool> = OnceLock::new();
    *MAPPED.get_or_init(|| match std::env::var("RECALL_ONE_QUERY_READBACK") {
        Ok(v) if v.trim() == "copy" => false,
        Ok(v) if v.trim() == "mapped" || v.trim().is_empty() => true,
        Ok(v) => {
            tracing::warn!(value = %v, "RECALL_ONE_QUERY_READBACK: expected copy or mapped; using mapped");
            true
        }
        Err(_) => true,
    })
}

/// What a one-query launch needs of its [`OneQueryScratch`]: the query's length, scores for `n_rows`, at least
/// `partial` partial keys (`partial_made` when the scratch is made anew), and `tickets` tickets.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OneQueryNeeds {
    pub(crate) dim: usize,
    pub(crate) n_rows: usize,
    pub(crate) partial: usize,
    pub(crate) partial_made: usize,
    pub(crate) tickets: usize,
}

impl OneQueryScratch {
    fn new(gpu: &Gpu, n: OneQueryNeeds) -> Result<OneQueryScratch, GpuError> {
        let out_len = 2 * SMALL_K_MAX as usize;
        let mapped = if one_query_readback_mapped() {
            gpu.alloc_mapped_readback::<u64>(out_len)
                .inspect_err(|e| {
                    tracing::debug!(error = %e, "mapped readback unavailable; one-query answers are copied")
                })
                .ok()
        } else {
            None
        };
        let answer = match mapped {
            Some(m) => Answer::Mapped(m),
            None => Answer::Copied {
                device: gpu.alloc_zeros::<u64>(out_len)?,
                host: gpu.alloc_pinned_readback::<u64>(out_len)?,
            },
        };
        Ok(OneQueryScratch {
            query_host: gpu.alloc_pinned::<f32>(n.dim)?,
            query: gpu.alloc_zeros::<f32>(n.dim)?,
            scores: gpu.alloc_zeros::<f32>(n.n_rows)?,
            partial: gpu.alloc_zeros::<u64>(n.partial_made)?,
            tickets: gpu.alloc_zeros::<u32>(n.tickets)?,
            answer,
        })
    }

    /// Where the kernel writes the `2k` answer words.
    pub(crate) fn out_ptr(&self, gpu: &Gpu) -> u64 {
        match &self.answer {
            Answer::Mapped(m) => m.device_ptr(),
            Answer::Copied { device, .. } => gpu.device_ptr(device),
        }
    }

    fn fits(&self, n: OneQueryNeeds) -> bool {
        self.query_host.len() == n.dim
            && self.scores.len() >= n.n_rows
            && self.partial.len() >= n.partial
            && self.tickets.len() >= n.tickets
    }
}

/// The host's part of a one-query top-`k` launch (`knn1`, `scan1`): the scratch in `slot` (kept when it fits
/// `needs`, else made anew), the query into its pinned buffer and across, `launch` (which reads the scratch's
/// device buffers and writes the answer at [`OneQueryScratch::out_ptr`]), the `2k` answer words read from the
/// mapped readback after the wait (or copied back into the pinned readback). Two queued calls (three with
/// the copy) and one wait.
/// After an error the stream is synchronised and the scratch dropped: a launch that failed part-way may leave
/// a ticket non-zero.
pub(crate) fn one_query_round_trip(
    kernel: &'static str,
    gpu: &Gpu,
    slot: &mut Option<OneQueryScratch>,
    needs: OneQueryNeeds,
    query: &[f32],
    k: usize,
    launch: impl FnOnce(&OneQueryScratch) -> Result<(), KernelError>,
) -> Result<TopKResult, KernelError> {
    if !slot.as_ref().is_some_and(|s| s.fits(needs)) {
        *slot = None; // free first
        *slot = Some(OneQueryScratch::new(gpu, needs)?);
    }
    let Some(sc) = slot.as_mut() else {
        return Err(KernelError::Shape {
            kernel,
            reason: "scratch missing".into(),
        });
    };
    let result = (|| {
        // No copy from it is in flight: every call ends with the stream synchronised.
        gpu.pinned_write(&mut sc.query_host)?.copy_from_slice(query);
        // SAFETY: query_host is not written again before this call's closing synchronise
        // (the answer's read below, which waits for the stream, or the synchronise on the error path).
        unsafe { gpu.upload_pinned_raw(&sc.query_host, &mut sc.query) }?;
        launch(sc)?;
        let out = match &mut sc.answer {
            Answer::Mapped(m) => gpu.read_mapped(m)?,
            Answer::Copied { device, host } => gpu.download_pinned(device, host)?,
        };
        Ok::<_, KernelError>(TopKResult {
            k,
            ids: out[..k].iter().map(|&key| key as u32).collect(),
            scores: out[k..2 * k]
                .iter()
                .map(|&bits| f32::from_bits(bits as u32))
                .collect(),
        })
    })();
    if result.is_err() {
        // Start from fresh buffers, once no copy can still be using the pinned ones (a failed wait leaves
        // nothing running worth keeping).
        let _ = gpu.synchronize();
        *slot = None;
    }
    result
}

/// Warps per block for `n_rows` rows: one for few rows (more blocks, so more SMs pull), else two (fewer
/// keys to merge; three blocks still fit an SM's shared memory, so loads continue while one block merges).
fn warps_for(n_rows: usize, max_warps: u32) -> u32 {
    let w = if n_rows <= 4096 { 1 } else { 2 };
    w.min(max_warps)
}

/// `(blocks, merge groups, threads per block)` for `n_rows` rows. A group has as many blocks as a block has
/// threads (a merger gives each thread one block's list), and the last merge needs the groups to fit one
/// block the same way.
fn layout(n_rows: usize, max_warps: u32) -> (usize, usize, usize) {
    let threads = 32 * warps_for(n_rows, max_warps) as usize;
    let n_blocks = n_rows.div_ceil(threads);
    (n_blocks, n_blocks.div_ceil(threads), threads)
}

impl Kernels {
    /// Whether [`Kernels::knn1`] takes this shape here: an sm_80+ image, `1 <= n_rows <=`
    /// [`KNN1_MAX_ROWS`], `dim` a multiple of 4 up to [`KNN1_MAX_DIM`], `1 <= k <= min(32, n_rows)`; or, in
    /// a [`Scan1Mode`](crate::Scan1Mode) other than `Old`, more rows that `sm80_scan1_*` takes.
    pub fn knn1_supported(&self, n_rows: usize, dim: usize, k: usize) -> bool {
        if k >= 1 && self.scan1_routes(n_rows, dim, k) {
            return true;
        }
        self.knn1.as_ref().is_some_and(|kn| {
            let (_, n_groups, threads) = layout(n_rows, kn.max_warps);
            n_groups <= threads
        }) && (1..=KNN1_MAX_ROWS).contains(&n_rows)
            && (4..=KNN1_MAX_DIM).contains(&dim)
            && dim.is_multiple_of(4)
            && (1..=(SMALL_K_MAX as usize).min(n_rows)).contains(&k)
    }

    /// The top `k` of one query against the `n_rows x dim` rows `corpus` (with their norms for cosine), in
    /// one launch; the same list as [`Kernels::similarity`] followed by [`Kernels::select_topk`]. Above
    /// [`KNN1_MAX_ROWS`] rows, in a [`Scan1Mode`](crate::Scan1Mode) other than `Old`, the launch is
    /// [`Kernels::scan1_knn`]'s.
    #[allow(clippy::too_many_arguments)]
    pub fn knn1(
        &self,
        gpu: &Gpu,
        metric: SimMetric,
        query: &[f32],
        corpus: &CudaSlice<f32>,
        corpus_norms: Option<&CudaSlice<f32>>,
        n_rows: usize,
        dim: usize,
        k: usize,
    ) -> Result<TopKResult, KernelError> {
        const K: &str = "knn1";
        if k >= 1 && self.scan1_routes(n_rows, dim, k) {
            return self.scan1_knn(gpu, metric, query, corpus, corpus_norms, n_rows, dim, k);
        }
        let shape = |reason: String| KernelError::Shape { kernel: K, reason };
        let Some(kernels) = &self.knn1 else {
            return Err(shape("needs an sm_80+ image".into()));
        };
        if !self.knn1_supported(n_rows, dim, k) {
            return Err(shape(format!(
                "n_rows = {n_rows}, dim = {dim}, k = {k} outside what knn1 takes"
            )));
        }
        let norms = one_query_inputs(K, gpu, metric, query, corpus, corpus_norms, n_rows, dim)?;
        let warps = warps_for(n_rows, kernels.max_warps);
        let (n_blocks, n_groups, threads) = layout(n_rows, kernels.max_warps);
        let needs = OneQueryNeeds {
            dim,
            n_rows,
            partial: (n_blocks + n_groups) * k,
            partial_made: (n_blocks + n_groups) * SMALL_K_MAX as usize,
            tickets: 1 + n_groups,
        };
        let mut slot = self.knn1_scratch.lock();
        one_query_round_trip(K, gpu, &mut slot, needs, query, k, |sc| {
            let params = Knn1Params {
                query: gpu.device_ptr(&sc.query),
                corpus: gpu.device_ptr(corpus),
                corpus_norms: norms,
                scores: gpu.device_ptr(&sc.scores),
                partial: gpu.device_ptr(&sc.partial),
                ticket: gpu.device_ptr(&sc.tickets),
                out: sc.out_ptr(gpu),
                n_rows: n_rows as u32,
                dim: dim as u32,
                k: k as u32,
                warps,
                higher_first: u32::from(metric.higher_first()),
                group_blocks: threads as u32,
            };
            let cfg = LaunchConfig {
                grid_dim: (n_blocks as u32, 1, 1),
                block_dim: (32 * warps, 1, 1),
                shared_mem_bytes: knn1_shared_bytes(dim as u32, warps),
            };
            let func = &kernels.funcs[metric.index()];
            // SAFETY: knn1_supported holds (1 <= k <= min(32, n_rows), dim a multiple of 4 up to
            // KNN1_MAX_DIM, whose shared memory the function was opted into for `max_warps >= warps`);
            // the query holds dim values, the corpus n_rows * dim (16-byte aligned: a device allocation),
            // the norms n_rows for cosine; scores n_rows, partial (n_blocks + n_groups) * k, tickets
            // 1 + n_groups, out 64 >= 2k (`needs`); the tickets are zero (fresh, or reset by the last
            // launch's mergers); grid and block as `Knn1Params` documents.
            unsafe { gpu.launch(func, cfg, params) }?;
            Ok(())
        })
    }
}

/// The checks every one-query launcher (`knn1`, `scan1`) makes of its inputs: `dim` query values, a corpus of at
/// least `n_rows * dim`, and for cosine at least `n_rows` corpus norms. Returns the norms' device address (0 when
/// the metric needs none).
#[allow(clippy::too_many_arguments)]
pub(crate) fn one_query_inputs(
    kernel: &'static str,
    gpu: &Gpu,
    metric: SimMetric,
    query: &[f32],
    corpus: &CudaSlice<f32>,
    corpus_norms: Option<&CudaSlice<f32>>,
    n_rows: usize,
    dim: usize,
) -> Result<u64, KernelError> {
    let shape = |reason: String| KernelError::Shape { kernel, reason };
    if query.len() != dim || corpus.len() < n_rows * dim {
        return Err(shape(format!(
            "query holds {} values and the corpus {}, expected {dim} and {}",
            query.len(),
            corpus.len(),
            n_rows * dim
        )));
    }
    match (metric, corpus_norms) {
        (SimMetric::Cosine, Some(cn)) if cn.len() >= n_rows => Ok(gpu.device_ptr(cn)),
        (SimMetric::Cosine, _) => Err(shape("cosine needs n_rows corpus norms".into())),
        _ => Ok(0),
    }
}
