//! The launcher of `sm80_knn1_*`: one query against at most [`KNN1_MAX_ROWS`] rows, similarity and top-k
//! (k <= 32) in one launch. The host's part is one queued call and one wait: a launch whose blocks would read
//! much of the query over the bus carries it inside its parameters (`*_knn1q_*`, up to [`KNN1_PARAM_QUERY`]
//! floats, [`KNN1_BULK_PARAM_QUERY`] for `sm90a_knn1q_*`); otherwise the query goes into mapped pinned
//! memory, which the kernel reads over the bus. The kernel writes its `2k` answer words straight into mapped
//! pinned memory, and the host spins on those words ([`Gpu::wait_mapped_filled`]) instead of waiting for
//! the stream. Settings for comparison: `RECALL_KNN1_QUERY=params|memory` always or never carries the query
//! in the parameters; `RECALL_ONE_QUERY_WAIT=sync` copies the query in and waits for the stream;
//! `RECALL_ONE_QUERY_READBACK=copy` also copies the answer back (a third call).

use crate::env::{env_number, env_switch};
use crate::launch::{KernelError, Kernels, SimMetric, TopKResult};
use recall_gpu_sys::driver::{CudaFunction, CudaSlice, LaunchConfig, PinnedHostSlice};
use recall_gpu_sys::{Gpu, GpuError, MappedReadback};
use recall_kernel_shared::{
    KNN1_BULK_PARAM_QUERY, KNN1_BULK_WARPS, KNN1_PARAM_QUERY, Knn1Params, Knn1QueryParams,
    SMALL_K_MAX, knn1_bulk_shared_bytes, knn1_shared_bytes,
};
use std::sync::OnceLock;
use std::time::Duration;

/// What the host puts in each answer word before a spinning launch: no answer word is ever this (a key's
/// low half is a row id, below `u32::MAX`; a score word's high half is zero).
const UNSET: u64 = u64::MAX;
/// How long a one-query call spins on its answer words before it waits for the stream instead (the driver's
/// default wait spins too; this bounds the spin for the largest one-query launches).
const ONE_QUERY_SPIN: Duration = Duration::from_millis(2);

/// The most rows [`Kernels::knn1`] takes. Above it the separate scan (more warps per SM in flight) and
/// selection are faster: at 1,000,000 x 768 on an H200 `knn1` moved 2.5 TB/s against the scan's 3.9.
pub const KNN1_MAX_ROWS: usize = 262_144;
/// The longest rows [`Kernels::knn1`] takes (its query lives in shared memory).
pub const KNN1_MAX_DIM: usize = 4096;

/// The longest rows `sm90a_knn1_*` takes (its block holds 32 whole rows in shared memory).
pub const KNN1_BULK_MAX_DIM: usize = 1536;
/// The most rows `sm90a_knn1_*` runs for: 128 blocks, one per SM of an H100/H200. Above it `sm80_knn1_*`,
/// whose ring keeps more blocks per SM: on an H200 (docs/results/2026-11-22-h200-session13, run D) 1,000
/// rows took 20.1-21.0 us with `sm90a_knn1` against 22.4-23.5 us, 10,000 rows 36.1-36.4 against 35.1.
pub const KNN1_BULK_MAX_ROWS: usize = 4096;

/// One family's entry points (dot, cosine, l2): those reading the query from memory and, where the image has
/// them, those carrying it in their parameters (`*_knn1q_*`).
#[derive(Debug)]
pub(crate) struct Knn1Funcs {
    memory: [CudaFunction; 3],
    carried: Option<[CudaFunction; 3]>,
}

impl Knn1Funcs {
    /// `{prefix}_{dot,cosine,l2}` and `{prefix}q_{dot,cosine,l2}`, each opted into `bytes` of dynamic shared
    /// memory; `None` (logged) when the first three are missing or refuse the shared memory. Device loss is
    /// an error.
    fn load(
        gpu: &Gpu,
        f: impl Fn(&str) -> Result<CudaFunction, GpuError>,
        prefix: &str,
        bytes: u32,
    ) -> Result<Option<Knn1Funcs>, GpuError> {
        let three = |p: &str| -> Result<Option<[CudaFunction; 3]>, GpuError> {
            let mut out = Vec::with_capacity(3);
            for metric in ["dot", "cosine", "l2"] {
                let func = match f(&format!("{p}_{metric}")) {
                    Ok(func) => func,
                    Err(e) if e.is_device_lost() => return Err(e),
                    Err(e) => {
                        tracing::debug!(error = %e, "{p}_{metric} not in the image");
                        return Ok(None);
                    }
                };
                match gpu.allow_dynamic_shared(&func, bytes) {
                    Ok(()) => out.push(func),
                    Err(e) if e.is_device_lost() => return Err(e),
                    Err(e) => {
                        tracing::debug!(error = %e, "{p}_{metric}: not enough shared memory per block");
                        return Ok(None);
                    }
                }
            }
            Ok(<[CudaFunction; 3]>::try_from(out).ok())
        };
        let Some(memory) = three(prefix)? else {
            return Ok(None);
        };
        Ok(Some(Knn1Funcs {
            memory,
            carried: three(&format!("{prefix}q"))?,
        }))
    }
}

/// `sm90a_knn1_*` (and `sm90a_knn1q_*`) from the sm_90a module, opted into the shared memory of
/// [`KNN1_BULK_MAX_DIM`]; `None` when they are missing or the device has too little shared memory
/// (logged; then `sm80_knn1_*` runs). Device loss is an error.
pub(crate) fn load_bulk(
    gpu: &Gpu,
    module: &std::sync::Arc<recall_gpu_sys::driver::CudaModule>,
) -> Result<Option<Knn1Funcs>, GpuError> {
    Knn1Funcs::load(
        gpu,
        |name| gpu.function(module, name),
        "sm90a_knn1",
        knn1_bulk_shared_bytes(KNN1_BULK_MAX_DIM as u32),
    )
}

/// Warps of an `sm90a_knn1_*` block: [`KNN1_BULK_WARPS`], or `RECALL_KNN1_BULK_WARPS` (1 to 8), read once.
/// With one, warp 0 also queues the copies and stages the query; the answer is the same.
pub fn knn1_bulk_warps() -> u32 {
    static WARPS: OnceLock<u32> = OnceLock::new();
    *WARPS.get_or_init(|| env_number("RECALL_KNN1_BULK_WARPS", 1..=8).unwrap_or(KNN1_BULK_WARPS))
}

/// Whether `sm90a_knn1_*` runs one-query launches (the default where it loaded), or `sm80_knn1_*`
/// (`RECALL_KNN1_BULK=off`), read once.
pub fn knn1_bulk_enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| env_switch("RECALL_KNN1_BULK", "on", "off"))
}

/// The entry points, and the most warps per block the device's shared memory allows.
#[derive(Debug)]
pub(crate) struct Knn1Kernels {
    funcs: Knn1Funcs,
    max_warps: u32,
}

impl Knn1Kernels {
    /// Look the kernels up and opt them into the shared memory their largest block needs; `None` when the
    /// device has too little for even one warp per block of `KNN1_MAX_DIM`.
    pub(crate) fn load(
        gpu: &Gpu,
        f: impl Fn(&str) -> Result<CudaFunction, GpuError>,
    ) -> Result<Option<Knn1Kernels>, GpuError> {
        for warps in [2, 1] {
            let bytes = knn1_shared_bytes(KNN1_MAX_DIM as u32, warps);
            if let Some(funcs) = Knn1Funcs::load(gpu, &f, "sm80_knn1", bytes)? {
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
    query: CudaSlice<f32>,
    /// The query in mapped pinned memory, for spinning launches (see [`one_query_spin`]).
    query_mapped: Option<MappedReadback<f32>>,
    /// Whether this call's kernel reads the query from `query_mapped` (else from `query`).
    query_from_host: bool,
    /// Whether this call's launch carries the query in its parameters (it reads neither buffer).
    query_in_params: bool,
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

/// Where a `knn1` launch takes its query from, by `RECALL_KNN1_QUERY` (read once): `auto` (the default)
/// carries it in the launch's parameters when it fits and the launch's blocks would read more than
/// [`KNN1_PARAMS_MIN_BUS_BYTES`] of it over the bus; `params` whenever it fits; `memory` never. All give
/// the same words.
fn knn1_query_in_params(needs: OneQueryNeeds, capacity: usize) -> bool {
    static SETTING: OnceLock<QuerySetting> = OnceLock::new();
    let setting = *SETTING
        .get_or_init(|| QuerySetting::parse(std::env::var("RECALL_KNN1_QUERY").ok().as_deref()));
    setting.carries(needs, capacity)
}

/// `RECALL_KNN1_QUERY`'s values (see [`knn1_query_in_params`]).
#[derive(Clone, Copy, Debug, PartialEq)]
enum QuerySetting {
    Auto,
    Params,
    Memory,
}

impl QuerySetting {
    /// The setting of a value (`None`: unset); a bad value is logged and means `Auto`.
    fn parse(value: Option<&str>) -> QuerySetting {
        match value.map(str::trim) {
            None | Some("" | "auto") => QuerySetting::Auto,
            Some("params") => QuerySetting::Params,
            Some("memory") => QuerySetting::Memory,
            Some(v) => {
                tracing::warn!(value = %v, "RECALL_KNN1_QUERY: expected auto, params or memory; using auto");
                QuerySetting::Auto
            }
        }
    }

    /// Whether a launch of `needs` carries its query in parameters of `capacity` floats.
    fn carries(self, needs: OneQueryNeeds, capacity: usize) -> bool {
        needs.dim <= capacity
            && match self {
                QuerySetting::Auto => {
                    needs.blocks.saturating_mul(needs.dim * 4) > KNN1_PARAMS_MIN_BUS_BYTES
                }
                QuerySetting::Params => true,
                QuerySetting::Memory => false,
            }
    }
}

/// Above this many query bytes read over the bus by a launch's blocks, `knn1` carries the query in its
/// parameters. On an H100 and an H200 (docs/results/2026-11-26-session16, runs A, C, D) 1,000 rows x 768
/// (32 blocks, 96 KiB) took about 2 us less with the query in the parameters, 100 rows (4 blocks, 12 KiB)
/// about 1 us more: there the launch's larger parameters cost more than the blocks' reads.
pub const KNN1_PARAMS_MIN_BUS_BYTES: usize = 32 << 10;

/// `base` with the query's floats inside and `base.query` set to 0.
fn with_query<const Q: usize>(mut base: Knn1Params, query: &[f32]) -> Knn1QueryParams<Q> {
    let mut floats = [0.0; Q];
    base.query = 0;
    for (d, s) in floats.iter_mut().zip(query) {
        *d = *s;
    }
    Knn1QueryParams {
        base,
        query: floats,
    }
}

/// Whether one-query answers come back through mapped memory (the default) or a copy
/// (`RECALL_ONE_QUERY_READBACK=copy`), read once. A copy call costs about as much as a small launch on some
/// hosts; both give the same words.
pub fn one_query_readback_mapped() -> bool {
    static MAPPED: OnceLock<bool> = OnceLock::new();
    *MAPPED.get_or_init(|| env_switch("RECALL_ONE_QUERY_READBACK", "mapped", "copy"))
}

/// Whether a one-query call with a mapped answer takes its query from mapped memory and spins on the answer
/// words (the default), or copies the query in and waits for the stream (`RECALL_ONE_QUERY_WAIT=sync`),
/// read once. Both give the same words.
pub fn one_query_spin() -> bool {
    static SPIN: OnceLock<bool> = OnceLock::new();
    *SPIN.get_or_init(|| env_switch("RECALL_ONE_QUERY_WAIT", "spin", "sync"))
}

/// What a one-query launch needs of its [`OneQueryScratch`]: the query's length (and how many blocks read it),
/// scores for `n_rows`, at least
/// `partial` partial keys (`partial_made` when the scratch is made anew), and `tickets` tickets.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OneQueryNeeds {
    pub(crate) dim: usize,
    /// Blocks of the launch: each reads the whole query.
    pub(crate) blocks: usize,
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
        // Spinning needs both ends mapped; where the query's mapping fails, the call copies and waits.
        let query_mapped = match answer {
            Answer::Mapped(_) if one_query_spin() => gpu
                .alloc_mapped_readback::<f32>(n.dim)
                .inspect_err(|e| {
                    tracing::debug!(error = %e, "mapped query unavailable; one-query calls copy and wait")
                })
                .ok(),
            _ => None,
        };
        Ok(OneQueryScratch {
            query_host: gpu.alloc_pinned::<f32>(n.dim)?,
            query: gpu.alloc_zeros::<f32>(n.dim)?,
            query_mapped,
            query_from_host: false,
            query_in_params: false,
            scores: gpu.alloc_zeros::<f32>(n.n_rows)?,
            partial: gpu.alloc_zeros::<u64>(n.partial_made)?,
            tickets: gpu.alloc_zeros::<u32>(n.tickets)?,
            answer,
        })
    }

    /// Where the kernel reads the query: 0 when the launch carries it.
    pub(crate) fn query_ptr(&self, gpu: &Gpu) -> u64 {
        if self.query_in_params {
            return 0;
        }
        match &self.query_mapped {
            Some(q) if self.query_from_host => q.device_ptr(),
            _ => gpu.device_ptr(&self.query),
        }
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
/// `needs`, else made anew), then either
/// - (spinning, the default) the query into mapped memory (unless `query_in_params`: the launch carries it)
///   and the answer words set to [`UNSET`], `launch`, and a spin until every answer word is written: one
///   queued call, no stream wait;
/// - or the query into its pinned buffer and across (unless `query_in_params`), `launch`, and the answer
///   words read from the mapped readback after a stream wait (or copied back into the pinned readback): two
///   or three queued calls.
///
/// `launch` reads the query at [`OneQueryScratch::query_ptr`] (0: in its parameters, which it fills itself)
/// and the scratch's device buffers, and writes each answer word once at [`OneQueryScratch::out_ptr`], after
/// its blocks' last reads of the query (the kernels' last block merges only after every block's ticket). A spinning call can return while the
/// kernel's last block still resets its tickets; the next call's launch queues behind it on the stream, and
/// the scratch is freed only after a synchronise.
/// After an error the stream is synchronised and the scratch dropped: a launch that failed part-way may leave
/// a ticket non-zero.
#[allow(clippy::too_many_arguments)]
pub(crate) fn one_query_round_trip(
    kernel: &'static str,
    gpu: &Gpu,
    slot: &mut Option<OneQueryScratch>,
    needs: OneQueryNeeds,
    query: &[f32],
    query_in_params: bool,
    k: usize,
    launch: impl FnOnce(&OneQueryScratch) -> Result<(), KernelError>,
) -> Result<TopKResult, KernelError> {
    if !slot.as_ref().is_some_and(|s| s.fits(needs)) {
        if slot.is_some() {
            // A spinning call may have returned before its kernel ended.
            gpu.synchronize()?;
        }
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
        // Spinning needs the answer mapped and the query mapped or in the parameters.
        let spin = matches!(sc.answer, Answer::Mapped(_))
            && one_query_spin()
            && (query_in_params || sc.query_mapped.is_some());
        sc.query_in_params = query_in_params;
        sc.query_from_host = !query_in_params && spin && query_from_host(needs);
        match (&mut sc.query_mapped, sc.query_from_host) {
            _ if query_in_params => {}
            (Some(q), true) => {
                // SAFETY: the last call on this scratch ended with its answer words seen, each written
                // after every block's last read of the query, or with the stream synchronised (sync, error
                // and refit paths); a new scratch has had no launch.
                unsafe { q.write_host(query) }?
            }
            _ => {
                // No copy from it is in flight: the last call ended with the stream synchronised, or with
                // its answer seen, written by the kernel queued after that call's copy.
                gpu.pinned_write(&mut sc.query_host)?.copy_from_slice(query);
                // SAFETY: query_host is not written again before this copy has finished: before the next
                // call the stream is synchronised or this call's answer, queued after the copy, is seen.
                unsafe { gpu.upload_pinned_raw(&sc.query_host, &mut sc.query) }?;
            }
        }
        if let (Answer::Mapped(answer), true) = (&mut sc.answer, spin) {
            // SAFETY: as for the query above: no device work of an earlier call still writes the words.
            unsafe { answer.fill_host(2 * k, UNSET) }?;
        }
        launch(sc)?;
        let out = match (&mut sc.answer, spin) {
            (Answer::Mapped(m), true) => gpu.wait_mapped_filled(m, 2 * k, UNSET, ONE_QUERY_SPIN)?,
            (Answer::Mapped(m), false) => gpu.read_mapped(m)?,
            (Answer::Copied { device, host }, _) => gpu.download_pinned(device, host)?,
        };
        Ok::<_, KernelError>(answer_of(out, k))
    })();
    if result.is_err() {
        // Start from fresh buffers, once no copy can still be using the pinned ones (a failed wait leaves
        // nothing running worth keeping).
        let _ = gpu.synchronize();
        *slot = None;
    }
    result
}

/// Whether a spinning call's kernel reads the query from mapped host memory (no copy call): when the bytes
/// its blocks read over the bus stay under `RECALL_ONE_QUERY_INPUT_MAX_BYTES` (default
/// [`QUERY_FROM_HOST_MAX_BYTES`]; `0` always copies), read once.
fn query_from_host(needs: OneQueryNeeds) -> bool {
    static MAX: OnceLock<usize> = OnceLock::new();
    let max = *MAX.get_or_init(|| {
        env_number("RECALL_ONE_QUERY_INPUT_MAX_BYTES", 0..=u32::MAX)
            .map_or(QUERY_FROM_HOST_MAX_BYTES, |v| v as usize)
    });
    needs.blocks.saturating_mul(needs.dim * 4) <= max
}

/// The default of [`query_from_host`]'s limit: 128 KiB. On an H200 (docs/results/2026-11-22-h200-session13,
/// run A) 1,000 rows x 768 (32 blocks, 96 KiB over the bus) took 23.1-24.2 us with the query read from host
/// memory against 24.7-26.5 us copied; 10,000 rows (157 blocks, 471 KiB) 44.6-46.3 against 34.4-34.7 us.
pub const QUERY_FROM_HOST_MAX_BYTES: usize = 128 << 10;

/// The list in a one-query launch's `2k` answer words: `k` keys (the row id in the low half), then `k`
/// scores' bits.
fn answer_of(out: &[u64], k: usize) -> TopKResult {
    TopKResult {
        k,
        ids: out[..k].iter().map(|&key| key as u32).collect(),
        scores: out[k..2 * k]
            .iter()
            .map(|&bits| f32::from_bits(bits as u32))
            .collect(),
    }
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
        // sm90a_knn1 where it loaded and takes the shape: 32 rows per block (one computing warp and its
        // helpers), groups of 32 blocks.
        let bulk = self
            .hopper
            .as_ref()
            .and_then(|h| h.knn1.as_ref())
            .filter(|_| {
                knn1_bulk_enabled() && n_rows <= KNN1_BULK_MAX_ROWS && dim <= KNN1_BULK_MAX_DIM
            });
        let (warps, (n_blocks, n_groups, threads), smem) = match bulk {
            Some(_) => (
                1,
                (n_rows.div_ceil(32), n_rows.div_ceil(32 * 32), 32),
                knn1_bulk_shared_bytes(dim as u32),
            ),
            None => (
                warps_for(n_rows, kernels.max_warps),
                layout(n_rows, kernels.max_warps),
                knn1_shared_bytes(dim as u32, warps_for(n_rows, kernels.max_warps)),
            ),
        };
        let needs = OneQueryNeeds {
            dim,
            blocks: n_blocks,
            n_rows,
            partial: (n_blocks + n_groups) * k,
            partial_made: (n_blocks + n_groups) * SMALL_K_MAX as usize,
            tickets: 1 + n_groups,
        };
        let (funcs, capacity) = match bulk {
            Some(b) => (b, KNN1_BULK_PARAM_QUERY),
            None => (&kernels.funcs, KNN1_PARAM_QUERY),
        };
        let carried = funcs
            .carried
            .as_ref()
            .filter(|_| knn1_query_in_params(needs, capacity));
        let in_params = carried.is_some();
        let mut slot = self.knn1_scratch.lock();
        one_query_round_trip(K, gpu, &mut slot, needs, query, in_params, k, |sc| {
            let base = Knn1Params {
                query: sc.query_ptr(gpu),
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
                block_dim: (
                    32 * if bulk.is_some() {
                        knn1_bulk_warps()
                    } else {
                        warps
                    },
                    1,
                    1,
                ),
                shared_mem_bytes: smem,
            };
            // SAFETY: knn1_supported holds (1 <= k <= min(32, n_rows), dim a multiple of 4 up to
            // KNN1_MAX_DIM, whose shared memory the function was opted into for `max_warps >= warps`);
            // the query holds dim values, the corpus n_rows * dim (16-byte aligned: a device allocation),
            // the norms n_rows for cosine; scores n_rows, partial (n_blocks + n_groups) * k, tickets
            // 1 + n_groups, out 64 >= 2k (`needs`); the tickets are zero (fresh, or reset by the last
            // launch's mergers); grid and block as `Knn1Params` documents. sm90a_knn1 (`bulk`): 32 rows and
            // 1 to 8 warps per block (`knn1_bulk_warps`), groups of 32 blocks, n_rows <= KNN1_BULK_MAX_ROWS
            // so at most 4 groups; dim up to KNN1_BULK_MAX_DIM, whose shared memory `load_bulk` opted it
            // into. A query in the parameters (`carried`: `*_knn1q_*`, with the parameter struct each was
            // compiled with, base.query 0) has dim <= that struct's capacity (`knn1_query_in_params`).
            unsafe {
                match (carried, bulk.is_some()) {
                    (Some(c), true) => gpu.launch(
                        &c[metric.index()],
                        cfg,
                        with_query::<KNN1_BULK_PARAM_QUERY>(base, query),
                    ),
                    (Some(c), false) => gpu.launch(
                        &c[metric.index()],
                        cfg,
                        with_query::<KNN1_PARAM_QUERY>(base, query),
                    ),
                    (None, _) => gpu.launch(&funcs.memory[metric.index()], cfg, base),
                }
            }?;
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

#[cfg(test)]
mod tests {
    use super::{KNN1_PARAMS_MIN_BUS_BYTES, OneQueryNeeds, QuerySetting, with_query};
    use recall_kernel_shared::{KNN1_BULK_PARAM_QUERY, Knn1Params};

    fn needs(dim: usize, blocks: usize) -> OneQueryNeeds {
        OneQueryNeeds {
            dim,
            blocks,
            n_rows: 32 * blocks,
            partial: 0,
            partial_made: 0,
            tickets: 0,
        }
    }

    #[test]
    fn the_query_is_carried_by_setting_size_and_bus_bytes() {
        assert_eq!(QuerySetting::parse(None), QuerySetting::Auto);
        assert_eq!(QuerySetting::parse(Some(" params ")), QuerySetting::Params);
        assert_eq!(QuerySetting::parse(Some("memory")), QuerySetting::Memory);
        assert_eq!(QuerySetting::parse(Some("bogus")), QuerySetting::Auto);
        let auto = QuerySetting::Auto;
        // 100 rows x 768 (4 blocks, 12 KiB over the bus): from memory; 1,000 rows (32 blocks): carried.
        assert!(!auto.carries(needs(768, 4), 1024));
        assert!(auto.carries(needs(768, 32), 1024));
        let at = KNN1_PARAMS_MIN_BUS_BYTES / (768 * 4);
        assert!(!auto.carries(needs(768, at), 1024));
        assert!(auto.carries(needs(768, at + 1), 1024));
        // Never a query longer than the parameters hold, whatever the setting.
        assert!(!auto.carries(needs(1028, 1000), 1024));
        assert!(!QuerySetting::Params.carries(needs(1028, 1), 1024));
        assert!(QuerySetting::Params.carries(needs(1024, 1), 1024));
        assert!(!QuerySetting::Memory.carries(needs(768, 1000), 1024));
    }

    #[test]
    fn with_query_copies_the_query_and_clears_the_pointer() {
        let base = Knn1Params {
            query: 0xdead_0000,
            dim: 8,
            ..Knn1Params::default()
        };
        let q: Vec<f32> = (1..=8).map(|v| v as f32).collect();
        let p = with_query::<KNN1_BULK_PARAM_QUERY>(base, &q);
        assert_eq!(p.base.query, 0);
        assert_eq!(p.base.dim, 8);
        assert_eq!(&p.query[..8], &q[..]);
        assert!(p.query[8..].iter().all(|&v| v == 0.0));
    }
}
