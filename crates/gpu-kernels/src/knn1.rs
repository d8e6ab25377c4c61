//! The launcher of `sm80_knn1_*`: one query against at most [`KNN1_MAX_ROWS`] rows, similarity and top-k
//! (k <= 32) in one launch. The host's part is one queued call and one wait: a launch whose blocks would read
//! much of the query over the bus carries it inside its parameters (`*_knn1q_*`, up to [`KNN1_PARAM_QUERY`]
//! floats, [`KNN1_BULK_PARAM_QUERY`] for `sm90a_knn1q_*`); otherwise the query goes into mapped pinned
//! memory, which the kernel reads over the bus. The kernel writes its `2k` answer words straight into mapped
//! pinned memory (`sm90a_knn1_*` with few blocks: each block its own `2k` words, its `k` best keys and their
//! scores, which the host merges, so no block waits on a fence and a ticket), and the host spins on those
//! words ([`Gpu::wait_mapped_filled`]) instead of waiting for the stream. Settings for comparison:
//! `RECALL_KNN1_QUERY=params|memory` always or never carries the query in the parameters;
//! `RECALL_KNN1_MERGE=host|device` always or never merges `sm90a_knn1`'s lists on the host;
//! `RECALL_KNN1_BULK=off` runs `sm80_knn1_*` instead; `RECALL_KNN1_BULK_WARPS` fixes its blocks' warps;
//! `RECALL_ONE_QUERY_WAIT=sync` copies the query in and waits for the stream;
//! `RECALL_ONE_QUERY_READBACK=copy` also copies the answer back (a third call).

use crate::env::{choice_value, env_choice, env_number, env_switch};
use crate::launch::{KernelError, Kernels, SimMetric, TopKResult};
use recall_gpu_sys::driver::{CudaFunction, CudaSlice, LaunchConfig, PinnedHostSlice};
use recall_gpu_sys::{Element, Gpu, GpuError, MappedReadback, TensorMap, tensor_map_2d};
use recall_kernel_shared::{
    KNN1_BULK_MAX_SLOTS, KNN1_BULK_MIN_SLOTS, KNN1_BULK_PARAM_QUERY, KNN1_BULK_TILE_BYTES,
    KNN1_BULK_WARPS, KNN1_EMPTY_KEY, KNN1_PARAM_QUERY, Knn1BulkParams, Knn1Params, Knn1QueryParams,
    LISTS_OUT_BLOCKS, LISTS_OUT_GROUPS, SMALL_K_MAX, knn1_bulk_shared_bytes, knn1_shared_bytes,
};
use std::sync::OnceLock;
use std::time::Duration;

/// What the host puts in each answer word before a spinning launch: no answer word is ever this (a key's
/// low half is a row id, below `u32::MAX`; a score word's high half is zero).
pub(crate) const UNSET: u64 = u64::MAX;
/// How long a one-query call spins on its answer words before it waits for the stream instead (the driver's
/// default wait spins too; this bounds the spin for the largest one-query launches).
const ONE_QUERY_SPIN: Duration = Duration::from_millis(2);

/// The most rows [`Kernels::knn1`] takes. Above it the separate scan (more warps per SM in flight) and
/// selection are faster: at 1,000,000 x 768 on an H200 `knn1` moved 2.5 TB/s against the scan's 3.9.
pub const KNN1_MAX_ROWS: usize = 262_144;
/// The longest rows [`Kernels::knn1`] takes (its query lives in shared memory).
pub const KNN1_MAX_DIM: usize = 4096;

/// The most rows `sm90a_knn1_*` runs for: 1,024 blocks of 32 rows, merged in groups of 32 by one warp (32
/// groups at most). Above it `sm80_knn1_*`.
pub const KNN1_BULK_MAX_ROWS: usize = 32 * 32 * 32;

/// One family's entry points (dot, cosine, l2): those reading the query from memory and, where the image has
/// them, those carrying it in their parameters (`*_knn1q_*`).
#[derive(Debug)]
pub(crate) struct Knn1Funcs {
    memory: [CudaFunction; 3],
    carried: Option<[CudaFunction; 3]>,
    /// `sm90a_knn1_*` only: the last launch's corpus tensor map and the `(address, rows, dim)` it describes,
    /// encoded again only for another corpus.
    corpus_map: parking_lot::Mutex<Option<(MapKey, TensorMap)>>,
}

/// What a corpus tensor map describes: the rows' device address, the rows, the dimension.
type MapKey = (u64, usize, usize);

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
        let Some(memory) = metric_triple(gpu, &f, prefix, bytes)? else {
            return Ok(None);
        };
        Ok(Some(Knn1Funcs {
            memory,
            carried: metric_triple(gpu, &f, &format!("{prefix}q"), bytes)?,
            corpus_map: parking_lot::Mutex::new(None),
        }))
    }

    /// The tensor map of the `n_rows x dim` f32 rows at `corpus` (boxes of 32 x 32, in the 128-byte swizzle:
    /// what `sm90a_knn1_*` copies), encoded when the last launch's corpus was another.
    fn corpus_map(&self, corpus: u64, n_rows: usize, dim: usize) -> Result<TensorMap, GpuError> {
        let key = (corpus, n_rows, dim);
        let mut cached = self.corpus_map.lock();
        if let Some((k, map)) = &*cached
            && *k == key
        {
            return Ok(*map);
        }
        let (rows, cols) = (n_rows as u64, dim as u64);
        let map = tensor_map_2d(Element::F32, corpus, rows, cols, cols, 32)?;
        *cached = Some((key, map));
        Ok(map)
    }
}

/// `{prefix}_{dot,cosine,l2}`, each opted into `bytes` of dynamic shared memory; `None` (logged) when one is
/// missing or refuses the shared memory. Device loss is an error.
pub(crate) fn metric_triple(
    gpu: &Gpu,
    f: &impl Fn(&str) -> Result<CudaFunction, GpuError>,
    prefix: &str,
    bytes: u32,
) -> Result<Option<[CudaFunction; 3]>, GpuError> {
    let mut out = Vec::with_capacity(3);
    for metric in ["dot", "cosine", "l2"] {
        let func = match f(&format!("{prefix}_{metric}")) {
            Ok(func) => func,
            Err(e) if e.is_device_lost() => return Err(e),
            Err(e) => {
                tracing::debug!(error = %e, "{prefix}_{metric} not in the image");
                return Ok(None);
            }
        };
        match gpu.allow_dynamic_shared(&func, bytes) {
            Ok(()) => out.push(func),
            Err(e) if e.is_device_lost() => return Err(e),
            Err(e) => {
                tracing::debug!(error = %e, "{prefix}_{metric}: not enough shared memory per block");
                return Ok(None);
            }
        }
    }
    Ok(<[CudaFunction; 3]>::try_from(out).ok())
}

/// `sm90a_knn1_*` (and `sm90a_knn1q_*`) from the sm_90a module, opted into the shared memory of their
/// largest block ([`KNN1_MAX_DIM`], [`KNN1_BULK_MAX_SLOTS`] tiles); `None` when they are missing or the device
/// has too little shared memory (logged; then `sm80_knn1_*` runs). Device loss is an error.
pub(crate) fn load_bulk(
    gpu: &Gpu,
    module: &std::sync::Arc<recall_gpu_sys::driver::CudaModule>,
) -> Result<Option<Knn1Funcs>, GpuError> {
    Knn1Funcs::load(
        gpu,
        |name| gpu.function(module, name),
        "sm90a_knn1",
        knn1_bulk_shared_bytes(KNN1_MAX_DIM as u32, KNN1_BULK_MAX_SLOTS),
    )
}

/// `RECALL_KNN1_BULK_WARPS` (2 to 8), read once: the warps of every `sm90a_knn1_*` block instead of
/// [`bulk_plan`]'s choice. The answer is the same.
pub(crate) fn knn1_bulk_warps_setting() -> Option<u32> {
    static WARPS: OnceLock<Option<u32>> = OnceLock::new();
    *WARPS.get_or_init(|| env_number("RECALL_KNN1_BULK_WARPS", 2..=8))
}

/// `(tiles in the ring, warps, shared bytes)` of an `sm90a_knn1_*` launch of `blocks` blocks over `dim`
/// columns on `sm_count` SMs whose blocks may opt into `max_smem` bytes of shared memory each. The ring holds
/// the whole rows (every copy in flight at once) when the blocks have an SM each; when several must share an
/// SM, as many tiles as let all of them be resident together (an SM has the per-block limit plus the 1 KiB
/// the driver reserves per block), at least [`KNN1_BULK_MIN_SLOTS`]. Warps: [`KNN1_BULK_WARPS`] for a block
/// per SM (the query's staging spread over them), 4 for two or three (the SM's other blocks overlap their
/// staging), 2 beyond (warp 0 and the copying warp 1): on an H200 (session 17, run C) 10,000 rows took 22.0
/// us with 4, 23.4 with 8, 24.5 with 2; 30,000 rows 42.7 with 2, 44.8 with 8. `warps` overrides the count.
pub(crate) fn bulk_plan(
    blocks: usize,
    dim: usize,
    sm_count: u32,
    max_smem: u32,
    warps: Option<u32>,
) -> (u32, u32, u32) {
    let per_sm = blocks.div_ceil(sm_count.max(1) as usize).max(1);
    let per_sm = u32::try_from(per_sm).unwrap_or(u32::MAX);
    let dim32 = dim as u32;
    let tiles = dim32.div_ceil(32);
    let budget = ((max_smem + 1024) / per_sm).saturating_sub(1024);
    let fit = budget.saturating_sub(knn1_bulk_shared_bytes(dim32, 0)) / (KNN1_BULK_TILE_BYTES + 16);
    let slots = fit
        .min(tiles.max(KNN1_BULK_MIN_SLOTS))
        .clamp(KNN1_BULK_MIN_SLOTS, KNN1_BULK_MAX_SLOTS);
    let warps = warps.unwrap_or(match per_sm {
        1 => KNN1_BULK_WARPS,
        2 | 3 => 4,
        _ => 2,
    });
    (slots, warps, knn1_bulk_shared_bytes(dim32, slots))
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
    /// The most warps per block the device's shared memory allows `sm80_knn1_*`.
    pub(crate) fn max_warps(&self) -> u32 {
        self.max_warps
    }

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
/// carries it in the launch's parameters when it fits (`capacity` floats) and the launch's blocks would read
/// more than `min_bus_bytes` of it over the bus ([`KNN1_PARAMS_MIN_BUS_BYTES`] for `sm80_knn1q_*`,
/// [`KNN1_BULK_PARAMS_MIN_BUS_BYTES`] for `sm90a_knn1q_*`); `params` whenever it fits; `memory` never. All
/// give the same words.
fn knn1_query_in_params(needs: OneQueryNeeds, capacity: usize, min_bus_bytes: usize) -> bool {
    static SETTING: OnceLock<QuerySetting> = OnceLock::new();
    let setting = *SETTING
        .get_or_init(|| QuerySetting::parse(std::env::var("RECALL_KNN1_QUERY").ok().as_deref()));
    setting.carries(needs, capacity, min_bus_bytes)
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
        match choice_value("RECALL_KNN1_QUERY", value, &["auto", "params", "memory"]) {
            1 => QuerySetting::Params,
            2 => QuerySetting::Memory,
            _ => QuerySetting::Auto,
        }
    }

    /// Whether a launch of `needs` carries its query in parameters of `capacity` floats (`auto`: when its
    /// blocks would read more than `min_bus_bytes` of it over the bus).
    fn carries(self, needs: OneQueryNeeds, capacity: usize, min_bus_bytes: usize) -> bool {
        needs.dim <= capacity
            && match self {
                QuerySetting::Auto => needs.blocks.saturating_mul(needs.dim * 4) > min_bus_bytes,
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

/// [`KNN1_PARAMS_MIN_BUS_BYTES`] for `sm90a_knn1q_*`, whose blocks load the query through the parameter's
/// generic address instead of the constant cache. On an H200 (docs/results/2026-11-27-session22, run G)
/// 300 rows x 768 (10 blocks, 30 KiB) took 0.1-0.7 us less end to end with the query in the parameters in
/// each of four rounds (G2); 100 rows (4 blocks, 12 KiB) were within the rounds' spread either way.
pub const KNN1_BULK_PARAMS_MIN_BUS_BYTES: usize = 16 << 10;

/// `base` with the query's floats inside and `base.query` set to 0.
fn with_query<const Q: usize>(mut base: Knn1Params, query: &[f32]) -> Knn1QueryParams<Q> {
    base.query = 0;
    Knn1QueryParams {
        base,
        query: query_floats(query),
    }
}

/// The query's floats in an array of `Q`, zeros past its end (`query.len() <= Q`: the launcher).
fn query_floats<const Q: usize>(query: &[f32]) -> [f32; Q] {
    let mut floats = [0.0; Q];
    for (d, s) in floats.iter_mut().zip(query) {
        *d = *s;
    }
    floats
}

/// Which lists an `sm90a_knn1_*` launch (or `sm90a_knn1s_*` query) of `blocks` blocks hands to the host to
/// merge (`Knn1BulkParams::lists_out`), by `RECALL_KNN1_MERGE` (read once): `auto` (the default) every
/// block's `k` keys when they hold at most [`KNN1_HOST_MERGE_MAX_WORDS`], else the groups' (32 blocks each)
/// where there are several, so that no block merges the groups behind a second fence and ticket; `host` the
/// blocks' always; `groups` the groups' always (the blocks' for one group); `device` none. The same list
/// either way.
pub(crate) fn knn1_lists_mode(blocks: usize, k: usize) -> u32 {
    static SETTING: OnceLock<usize> = OnceLock::new();
    let groups = blocks.div_ceil(32);
    match *SETTING
        .get_or_init(|| env_choice("RECALL_KNN1_MERGE", &["auto", "host", "device", "groups"]))
    {
        1 => LISTS_OUT_BLOCKS,
        2 => 0,
        3 if groups > 1 => LISTS_OUT_GROUPS,
        3 => LISTS_OUT_BLOCKS,
        _ if blocks * 2 * k <= KNN1_HOST_MERGE_MAX_WORDS => LISTS_OUT_BLOCKS,
        _ if groups > 1 => LISTS_OUT_GROUPS,
        _ => 0,
    }
}

/// The lists a launch of `blocks` blocks in lists' mode `mode` writes for the host to merge (1: the answer).
pub(crate) fn knn1_lists(mode: u32, blocks: usize) -> usize {
    match mode {
        LISTS_OUT_BLOCKS => blocks,
        LISTS_OUT_GROUPS => blocks.div_ceil(32),
        _ => 1,
    }
}

/// The most answer words (`2k` per block) for which `sm90a_knn1_*` hands the blocks' lists to the host by
/// default: 2,048 (16 KiB), so 2,048 rows x top-10 (64 blocks) or 1,000 rows x top-32; above it the groups'
/// lists (32 blocks each) where there are several. Against the device's merge (session 17, H200), top-10 of
/// 1,000 rows x 768 took 15.4-16.3 us merged by the host against 17.0-17.3 us, 4,096 rows (2,560 words)
/// 18.1-18.3 against 20.2-21.1 us, 10,000 rows 23.8-26.8 against 21.1-21.4 us (the host reads every word over
/// the bus). Against the groups' lists (session 23, run L, H200, launched / served): 2,048 rows 16.2 / 14.4 us
/// against 17.2-17.8 / 14.8-15.1; 4,096 rows 18.2-19.1 / 17.7-18.1 against 17.4-18.4 / 15.0; 8,192 rows
/// 21.8-25.0 / 17.6-17.9 against 17.6-18.5 / 15.3-15.5.
pub const KNN1_HOST_MERGE_MAX_WORDS: usize = 2048;

/// The parameters of an `sm90a_knn1_*` launch (`Q = 0`: the query stays in memory at `base.query`) or an
/// `sm90a_knn1q_*` one (the query's floats inside, `base.query` set to 0).
fn bulk_params<const Q: usize>(
    map: TensorMap,
    mut base: Knn1Params,
    slots: u32,
    lists_out: u32,
    query: &[f32],
) -> Knn1BulkParams<Q> {
    if Q > 0 {
        base.query = 0;
    }
    Knn1BulkParams {
        map: map.0,
        base,
        slots,
        lists_out,
        _pad: [0; 2],
        query: query_floats(query),
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
/// scores for `n_rows`, at least `partial` partial keys (`partial_made` when the scratch is made anew),
/// `tickets` tickets, and `lists` answer lists of `2k` words (one: the merged answer; more: each block's list,
/// merged by the host).
#[derive(Debug, Clone, Copy)]
pub(crate) struct OneQueryNeeds {
    pub(crate) dim: usize,
    /// Blocks of the launch: each reads the whole query.
    pub(crate) blocks: usize,
    pub(crate) n_rows: usize,
    pub(crate) partial: usize,
    pub(crate) partial_made: usize,
    pub(crate) tickets: usize,
    pub(crate) lists: usize,
}

impl OneQueryNeeds {
    /// Answer words a scratch holds for these needs (at least one list of the largest `k`).
    fn answer_words(self) -> usize {
        (2 * SMALL_K_MAX as usize).max(self.lists * 2 * SMALL_K_MAX as usize)
    }
}

impl OneQueryScratch {
    fn new(gpu: &Gpu, n: OneQueryNeeds) -> Result<OneQueryScratch, GpuError> {
        let out_len = n.answer_words();
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
        let answer = match &self.answer {
            Answer::Mapped(m) => m.len(),
            Answer::Copied { device, .. } => device.len(),
        };
        self.query_host.len() == n.dim
            && self.scores.len() >= n.n_rows
            && self.partial.len() >= n.partial
            && self.tickets.len() >= n.tickets
            && answer >= n.answer_words()
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
/// and the scratch's device buffers, and writes each of the `needs.lists` lists' `2k` answer words once at
/// [`OneQueryScratch::out_ptr`], after its blocks' last reads of the query (a block writes its own list last;
/// a merger writes the answer only after every block's ticket); the host merges the lists. A spinning call
/// can return while the kernel's last block still resets its tickets; the next call's launch queues behind
/// it on the stream, and the scratch is freed only after a synchronise.
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
        let words = needs.lists * 2 * k;
        if let (Answer::Mapped(answer), true) = (&mut sc.answer, spin) {
            // SAFETY: as for the query above: no device work of an earlier call still writes the words.
            unsafe { answer.fill_host(words, UNSET) }?;
        }
        launch(sc)?;
        let out = match (&mut sc.answer, spin) {
            (Answer::Mapped(m), true) => gpu.wait_mapped_filled(m, words, UNSET, ONE_QUERY_SPIN)?,
            (Answer::Mapped(m), false) => gpu.read_mapped(m)?,
            (Answer::Copied { device, host }, _) => gpu.download_pinned(device, host)?,
        };
        out.get(..words)
            .and_then(|words| merge_lists(words, needs.lists, k))
            .ok_or_else(|| KernelError::Answer {
                kernel,
                reason: format!("the answer lists hold fewer than k = {k} rows"),
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

/// The `k` smallest keys of `lists` ascending lists, each `2k` words: `k` keys (the row id in the low half;
/// [`KNN1_EMPTY_KEY`] past a short list's end), then their `k` scores' bits. Keys are unique (one per row), so
/// the list is the same whichever merged it. `None` when the lists hold fewer than `k` keys.
pub(crate) fn merge_lists(out: &[u64], lists: usize, k: usize) -> Option<TopKResult> {
    // The best `k` so far, ascending: each list is ascending, so it stops at its first key that is not better
    // than the current k-th.
    let mut best: Vec<(u64, u64)> = Vec::with_capacity(k + 1);
    for list in out.chunks_exact(2 * k).take(lists) {
        let (keys, scores) = list.split_at(k);
        for (&key, &bits) in keys.iter().zip(scores) {
            if key == KNN1_EMPTY_KEY || (best.len() == k && key >= best[k - 1].0) {
                break;
            }
            let at = best.partition_point(|&(b, _)| b < key);
            best.insert(at, (key, bits));
            best.truncate(k);
        }
    }
    (best.len() == k).then(|| TopKResult {
        k,
        ids: best.iter().map(|&(key, _)| key as u32).collect(),
        scores: best
            .iter()
            .map(|&(_, bits)| f32::from_bits(bits as u32))
            .collect(),
    })
}

/// Warps per block for `n_rows` rows: one for few rows (more blocks, so more SMs pull), else two (fewer
/// keys to merge; three blocks still fit an SM's shared memory, so loads continue while one block merges).
fn warps_for(n_rows: usize, max_warps: u32) -> u32 {
    let w = if n_rows <= 4096 { 1 } else { 2 };
    w.min(max_warps)
}

/// `sm80_knn1_*`'s warps per block and [`layout`] for `n_rows` rows.
pub(crate) fn knn1_layout(n_rows: usize, max_warps: u32) -> (u32, (usize, usize, usize)) {
    (warps_for(n_rows, max_warps), layout(n_rows, max_warps))
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
    pub fn knn1(&self, gpu: &Gpu, q: &OneQuery) -> Result<TopKResult, KernelError> {
        self.knn1_any(gpu, q, false)
    }

    /// [`Kernels::knn1`] against a resident corpus: `corpus` and `corpus_norms` complete (no work still queued
    /// that writes them, as after a synchronise once they were made) and not written while calls use them.
    /// With the one-query server on ([`Kernels::set_knn1_serve`], `serve.rs`) the answer comes from a server
    /// bound to these buffers, with no launch; otherwise, or where the server does not take the shape, as
    /// [`Kernels::knn1`]. The same answer either way.
    pub fn knn1_resident(&self, gpu: &Gpu, q: &OneQuery) -> Result<TopKResult, KernelError> {
        self.knn1_any(gpu, q, true)
    }

    /// [`Kernels::knn1`], through the server where `resident` allows it.
    fn knn1_any(&self, gpu: &Gpu, q: &OneQuery, resident: bool) -> Result<TopKResult, KernelError> {
        let OneQuery {
            metric,
            query,
            corpus,
            n_rows,
            dim,
            k,
            ..
        } = *q;
        const K: &str = "knn1";
        if k >= 1 && self.scan1_routes(n_rows, dim, k) {
            return self.scan1_knn(gpu, q);
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
        let norms = one_query_inputs(K, gpu, q)?;
        // The one-query server, where it is on and takes the shape (`serve.rs`): no launch.
        if resident && let Some(answer) = self.knn1_served(gpu, q, norms)? {
            return Ok(answer);
        }
        // sm90a_knn1 where it loaded and takes the shape: 32 rows per block (one computing warp, the copying
        // warp and the stagers), groups of 32 blocks.
        // It needs the corpus's tensor map; where the driver refuses one, `sm80_knn1` answers instead.
        let bulk_map = match self
            .hopper
            .as_ref()
            .and_then(|h| h.knn1.as_ref())
            .filter(|_| knn1_bulk_enabled() && n_rows <= KNN1_BULK_MAX_ROWS)
        {
            Some(b) => match b.corpus_map(gpu.device_ptr(corpus), n_rows, dim) {
                Ok(map) => Some((b, map)),
                Err(e) if e.is_device_lost() => return Err(e.into()),
                Err(e) => {
                    tracing::warn!(error = %e, "sm90a_knn1: no tensor map for this corpus; sm80_knn1 runs");
                    None
                }
            },
            None => None,
        };
        // With its ring's tiles, warps per block and shared memory (`bulk_plan`).
        let bulk = bulk_map.map(|(b, map)| {
            let info = gpu.info();
            let plan = bulk_plan(
                n_rows.div_ceil(32),
                dim,
                info.sm_count,
                info.max_shared_memory_per_block_optin as u32,
                knn1_bulk_warps_setting(),
            );
            (b, map, plan)
        });
        // sm90a_knn1 hands each block's list to the host when the lists are few (`RECALL_KNN1_MERGE`).
        let lists_out = match bulk {
            Some(_) => knn1_lists_mode(n_rows.div_ceil(32), k),
            None => 0,
        };
        let (warps, (n_blocks, n_groups, threads), smem) = match bulk {
            Some((_, _, (_, _, smem))) => {
                (1, (n_rows.div_ceil(32), n_rows.div_ceil(32 * 32), 32), smem)
            }
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
            lists: knn1_lists(lists_out, n_blocks),
        };
        let (funcs, capacity, min_bus_bytes) = match bulk {
            Some((b, _, _)) => (b, KNN1_BULK_PARAM_QUERY, KNN1_BULK_PARAMS_MIN_BUS_BYTES),
            None => (&kernels.funcs, KNN1_PARAM_QUERY, KNN1_PARAMS_MIN_BUS_BYTES),
        };
        let carried = funcs
            .carried
            .as_ref()
            .filter(|_| knn1_query_in_params(needs, capacity, min_bus_bytes));
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
                block_dim: (32 * bulk.map_or(warps, |(_, _, (_, w, _))| w), 1, 1),
                shared_mem_bytes: smem,
            };
            // SAFETY: knn1_supported holds (1 <= k <= min(32, n_rows), dim a multiple of 4 up to
            // KNN1_MAX_DIM, whose shared memory the function was opted into for `max_warps >= warps`);
            // the query holds dim values, the corpus n_rows * dim (16-byte aligned: a device allocation),
            // the norms n_rows for cosine; scores n_rows, partial (n_blocks + n_groups) * k, tickets
            // 1 + n_groups, out `lists` x 2k words (`needs`); the tickets are zero (fresh, or reset by the last
            // launch's mergers); grid and block as `Knn1Params` documents. sm90a_knn1 (`bulk`): 32 rows and
            // 2 to 8 warps per block (`bulk_plan`), groups of 32 blocks, n_rows <= KNN1_BULK_MAX_ROWS so at
            // most 32 groups; the ring's tiles within KNN1_BULK_MIN_SLOTS..=KNN1_BULK_MAX_SLOTS and dim up
            // to KNN1_MAX_DIM, whose shared memory `load_bulk` opted it into; `map` the corpus's tensor map
            // as `Knn1BulkParams` documents (in the parameters, which the build declares 64-byte aligned).
            // A query in the parameters (`carried`: `*_knn1q_*`, with the parameter struct each was compiled
            // with, base.query 0) has dim <= that struct's capacity (`knn1_query_in_params`).
            unsafe {
                match (carried, bulk) {
                    (Some(c), Some((_, map, (slots, _, _)))) => gpu.launch(
                        &c[metric.index()],
                        cfg,
                        bulk_params::<KNN1_BULK_PARAM_QUERY>(map, base, slots, lists_out, query),
                    ),
                    (None, Some((_, map, (slots, _, _)))) => gpu.launch(
                        &funcs.memory[metric.index()],
                        cfg,
                        bulk_params::<0>(map, base, slots, lists_out, query),
                    ),
                    (Some(c), None) => gpu.launch(
                        &c[metric.index()],
                        cfg,
                        with_query::<KNN1_PARAM_QUERY>(base, query),
                    ),
                    (None, None) => gpu.launch(&funcs.memory[metric.index()], cfg, base),
                }
            }?;
            Ok(())
        })
    }
}

/// One query against a corpus on the device: the inputs of [`Kernels::knn1`], [`Kernels::knn1_resident`] and
/// [`Kernels::scan1_knn`].
#[derive(Clone, Copy, Debug)]
pub struct OneQuery<'a> {
    pub metric: SimMetric,
    /// `dim` values.
    pub query: &'a [f32],
    /// At least `n_rows * dim` values, row-major.
    pub corpus: &'a CudaSlice<f32>,
    /// At least `n_rows` corpus norms; cosine needs them, the other metrics ignore them.
    pub corpus_norms: Option<&'a CudaSlice<f32>>,
    pub n_rows: usize,
    pub dim: usize,
    pub k: usize,
}

/// The checks every one-query launcher (`knn1`, `scan1`) makes of its inputs: `dim` query values, a corpus of at
/// least `n_rows * dim`, and for cosine at least `n_rows` corpus norms. Returns the norms' device address (0 when
/// the metric needs none).
pub(crate) fn one_query_inputs(
    kernel: &'static str,
    gpu: &Gpu,
    q: &OneQuery,
) -> Result<u64, KernelError> {
    let OneQuery {
        metric,
        query,
        corpus,
        corpus_norms,
        n_rows,
        dim,
        ..
    } = *q;
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
    use super::{
        KNN1_BULK_PARAMS_MIN_BUS_BYTES, KNN1_MAX_DIM, KNN1_PARAMS_MIN_BUS_BYTES, OneQueryNeeds,
        QuerySetting, bulk_params, bulk_plan, knn1_lists, knn1_lists_mode, merge_lists, with_query,
    };
    use recall_gpu_sys::TensorMap;
    use recall_kernel_shared::KNN1_EMPTY_KEY;

    /// A list of `k` (key, score) words from `(score_key, id, score)` triples, padded with empty keys.
    fn list(k: usize, entries: &[(u32, u32, f32)]) -> Vec<u64> {
        let mut keys = vec![KNN1_EMPTY_KEY; k];
        let mut scores = vec![0u64; k];
        for (i, &(sk, id, score)) in entries.iter().enumerate() {
            keys[i] = (u64::from(sk) << 32) | u64::from(id);
            scores[i] = u64::from(score.to_bits());
        }
        keys.extend(scores);
        keys
    }

    #[test]
    fn host_merge_takes_the_k_smallest_keys_of_all_lists_with_their_scores() {
        let k = 3;
        let mut out = list(k, &[(5, 0, 0.5), (7, 1, 0.7), (9, 2, 0.9)]);
        out.extend(list(k, &[(1, 40, 0.1), (5, 32, -0.0), (8, 33, 0.8)]));
        // A short list (a last block with one row) and a list that adds nothing.
        out.extend(list(k, &[(6, 64, 0.6)]));
        out.extend(list(k, &[(10, 96, 1.0), (11, 97, 1.1), (12, 98, 1.2)]));
        let r = merge_lists(&out, 4, k).expect("three keys");
        // Equal score keys order by id: (5, 0) before (5, 32); the scores' bits come with their keys.
        assert_eq!(r.ids, vec![40, 0, 32]);
        assert_eq!(
            r.scores.iter().map(|s| s.to_bits()).collect::<Vec<_>>(),
            vec![0.1f32.to_bits(), 0.5f32.to_bits(), (-0.0f32).to_bits()]
        );
        // One list is the answer as the device merged it.
        let one = list(k, &[(1, 4, 0.1), (2, 5, 0.2), (3, 6, 0.3)]);
        assert_eq!(merge_lists(&one, 1, k).expect("whole").ids, vec![4, 5, 6]);
        // Fewer keys than k in all: no answer rather than a padded one.
        assert!(merge_lists(&list(k, &[(1, 4, 0.1)]), 1, k).is_none());
    }
    use recall_kernel_shared::{
        KNN1_BULK_MAX_SLOTS, KNN1_BULK_MIN_SLOTS, KNN1_BULK_PARAM_QUERY, KNN1_BULK_WARPS,
        Knn1Params, LISTS_OUT_BLOCKS, LISTS_OUT_GROUPS, knn1_bulk_shared_bytes,
    };

    /// An H100's and an H200's SMs and per-block shared memory (opt-in).
    const SMS: u32 = 132;
    const SMEM: u32 = 232_448;

    #[test]
    fn the_bulk_ring_holds_whole_rows_with_an_sm_per_block_and_shrinks_to_keep_blocks_resident() {
        // 1,000 rows x 768 (32 blocks): the whole 24 tiles, 8 warps.
        let (slots, warps, smem) = bulk_plan(32, 768, SMS, SMEM, None);
        assert_eq!((slots, warps), (24, KNN1_BULK_WARPS));
        assert_eq!(smem, knn1_bulk_shared_bytes(768, 24));
        // 10,000 rows (313 blocks, 3 per SM): a ring that lets three blocks share an SM, 4 warps.
        let (slots, warps, smem) = bulk_plan(313, 768, SMS, SMEM, None);
        assert!(slots < 24 && warps == 4, "{slots} {warps}");
        assert!(3 * (smem + 1024) <= SMEM + 1024);
        assert!(3 * (knn1_bulk_shared_bytes(768, slots + 1) + 1024) > SMEM + 1024);
        // 32,768 rows (1,024 blocks, 8 per SM): two warps, eight blocks' rings fit an SM.
        let (slots, warps, smem) = bulk_plan(1024, 768, SMS, SMEM, None);
        assert_eq!(warps, 2);
        assert!(slots >= KNN1_BULK_MIN_SLOTS && 8 * (smem + 1024) <= SMEM + 1024);
        // Short rows: the merge's two tiles even when the rows fill one; long rows: at most the opt-in.
        assert_eq!(bulk_plan(4, 4, SMS, SMEM, None).0, KNN1_BULK_MIN_SLOTS);
        let (slots, _, smem) = bulk_plan(1, KNN1_MAX_DIM, SMS, SMEM, None);
        assert_eq!(slots, KNN1_BULK_MAX_SLOTS);
        assert!(smem <= knn1_bulk_shared_bytes(KNN1_MAX_DIM as u32, KNN1_BULK_MAX_SLOTS));
        assert!(smem <= SMEM);
        // A setting fixes the warps.
        assert_eq!(bulk_plan(32, 768, SMS, SMEM, Some(4)).1, 4);
        // Every shape stays within the opt-in and the slot range.
        for blocks in [1, 31, 132, 133, 264, 397, 1024] {
            for dim in [4, 32, 36, 768, 1536, 1540, KNN1_MAX_DIM] {
                let (slots, _, smem) = bulk_plan(blocks, dim, SMS, SMEM, None);
                assert!((KNN1_BULK_MIN_SLOTS..=KNN1_BULK_MAX_SLOTS).contains(&slots));
                assert!(smem <= knn1_bulk_shared_bytes(KNN1_MAX_DIM as u32, KNN1_BULK_MAX_SLOTS));
            }
        }
    }

    #[test]
    fn the_bulk_parameters_carry_the_query() {
        let q: Vec<f32> = (0..768).map(|i| i as f32).collect();
        let base = Knn1Params {
            query: 7,
            dim: 768,
            ..Knn1Params::default()
        };
        let p = bulk_params::<KNN1_BULK_PARAM_QUERY>(TensorMap([0; 16]), base, 2, 0, &q);
        assert_eq!(p.base.query, 0);
        assert_eq!(p.base.dim, 768);
        assert_eq!(&p.query[..768], &q[..]);
        assert!(p.query[768..].iter().all(|&v| v == 0.0));
        assert_eq!(p.query.len(), KNN1_BULK_PARAM_QUERY);
    }

    /// By default (`RECALL_KNN1_MERGE` unset) the host merges the blocks' lists up to 2,048 words, the groups'
    /// lists above where there are several groups of 32 blocks.
    #[test]
    fn the_host_merges_the_blocks_lists_when_few_else_the_groups() {
        if std::env::var_os("RECALL_KNN1_MERGE").is_some() {
            eprintln!("skipped: RECALL_KNN1_MERGE is set");
            return;
        }
        assert_eq!(knn1_lists_mode(32, 10), LISTS_OUT_BLOCKS);
        assert_eq!(knn1_lists_mode(64, 16), LISTS_OUT_BLOCKS);
        assert_eq!(knn1_lists_mode(128, 10), LISTS_OUT_GROUPS);
        assert_eq!(knn1_lists_mode(128, 16), LISTS_OUT_GROUPS);
        assert_eq!(knn1_lists_mode(313, 10), LISTS_OUT_GROUPS);
        assert_eq!(knn1_lists(LISTS_OUT_GROUPS, 313), 10);
        assert_eq!(knn1_lists(LISTS_OUT_BLOCKS, 313), 313);
        assert_eq!(knn1_lists(0, 313), 1);
    }

    fn needs(dim: usize, blocks: usize) -> OneQueryNeeds {
        OneQueryNeeds {
            dim,
            blocks,
            n_rows: 32 * blocks,
            partial: 0,
            partial_made: 0,
            tickets: 0,
            lists: 1,
        }
    }

    #[test]
    fn the_query_is_carried_by_setting_size_and_bus_bytes() {
        assert_eq!(QuerySetting::parse(None), QuerySetting::Auto);
        assert_eq!(QuerySetting::parse(Some(" params ")), QuerySetting::Params);
        assert_eq!(QuerySetting::parse(Some("memory")), QuerySetting::Memory);
        assert_eq!(QuerySetting::parse(Some("bogus")), QuerySetting::Auto);
        let auto = QuerySetting::Auto;
        let min = KNN1_PARAMS_MIN_BUS_BYTES;
        // 100 rows x 768 (4 blocks, 12 KiB over the bus): from memory; 1,000 rows (32 blocks): carried.
        assert!(!auto.carries(needs(768, 4), 1024, min));
        assert!(auto.carries(needs(768, 32), 1024, min));
        let at = min / (768 * 4);
        assert!(!auto.carries(needs(768, at), 1024, min));
        assert!(auto.carries(needs(768, at + 1), 1024, min));
        // sm90a_knn1q's lower limit: 300 rows (10 blocks, 30 KiB) carried, 100 rows not.
        let bulk = KNN1_BULK_PARAMS_MIN_BUS_BYTES;
        assert!(auto.carries(needs(768, 10), 1024, bulk));
        assert!(!auto.carries(needs(768, 10), 1024, min));
        assert!(!auto.carries(needs(768, 4), 1024, bulk));
        // Never a query longer than the parameters hold, whatever the setting.
        assert!(!auto.carries(needs(1028, 1000), 1024, min));
        assert!(!QuerySetting::Params.carries(needs(1028, 1), 1024, min));
        assert!(QuerySetting::Params.carries(needs(1024, 1), 1024, min));
        assert!(!QuerySetting::Memory.carries(needs(768, 1000), 1024, min));
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
