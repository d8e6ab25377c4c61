//! The launcher of fast-mode knn with top-k fused (`tc_knn_*` and `tc_knn_merge`, sm_80 and newer): the
//! scores of [`Kernels::similarity_fast`] never reach device memory; each block keeps its queries' best `k`
//! in shared memory and a small merge kernel joins the per-split lists.

use crate::launch::{
    HalfKind, KernelError, Kernels, SimMetric, TopKResult, elems, fast_operands, shape, to_u32,
};
use recall_gpu_sys::driver::{CudaFunction, CudaSlice, LaunchConfig};
use recall_gpu_sys::{Element, Gpu, GpuError, tensor_map_2d};
use recall_kernel_shared::{
    TC_KNN_K_MAX, TC_THREADS, TC_TILE_Q, TC_TILE_R, TcKnnParams, TcMergeParams, h_knn_shared_bytes,
    tc_knn_heads_per_split, tc_knn_shared_bytes,
};

/// The most lists per query that `tc_knn_merge` joins (one per thread of its block).
const MAX_SPLITS: usize = 1024;

/// `[f16, bf16]` x `[dot, cosine, l2]`, the merge, and the device's SM count (for the split count).
#[derive(Debug)]
pub(crate) struct TcKnnKernels {
    knn: [[CudaFunction; 3]; 2],
    merge: CudaFunction,
    sm_count: usize,
    /// The largest `k` whose shared memory the device gives a block ([`tc_knn_k_max`]).
    k_max: u32,
}

/// The largest `k <= TC_KNN_K_MAX` whose `tc_knn_*` block fits `optin` bytes of shared memory per block (the
/// device's opt-in limit), or `None` when not even `k = 1` does. An H100/H200 (227 KiB) takes every `k`; an
/// A100 (163 KiB) up to 13; sm_86/sm_89 (99 KiB) none, the ring alone being 90 KiB.
pub(crate) fn tc_knn_k_max(optin: usize) -> Option<u32> {
    (1..=TC_KNN_K_MAX)
        .rev()
        .find(|&k| tc_knn_shared_bytes(k) as usize <= optin)
}

impl TcKnnKernels {
    /// Look the kernels up and opt them into the shared memory of the largest `k` the device has room for
    /// ([`tc_knn_k_max`]); `None` when it has room for none (then fast knn runs the GEMM and the separate
    /// selection, as it does above that `k`).
    pub(crate) fn load(
        gpu: &Gpu,
        f: impl Fn(&str) -> Result<CudaFunction, GpuError>,
    ) -> Result<Option<TcKnnKernels>, GpuError> {
        let knn = [
            [
                f("tc_knn_f16_dot")?,
                f("tc_knn_f16_cosine")?,
                f("tc_knn_f16_l2")?,
            ],
            [
                f("tc_knn_bf16_dot")?,
                f("tc_knn_bf16_cosine")?,
                f("tc_knn_bf16_l2")?,
            ],
        ];
        let optin = gpu.info().max_shared_memory_per_block_optin;
        let Some(k_max) = tc_knn_k_max(optin) else {
            tracing::debug!(
                optin,
                "tc_knn: not enough shared memory per block; fast knn runs the GEMM and the selection"
            );
            return Ok(None);
        };
        let bytes = tc_knn_shared_bytes(k_max);
        if !knn
            .iter()
            .flatten()
            .all(|func| gpu.allow_dynamic_shared(func, bytes).is_ok())
        {
            tracing::debug!(
                bytes,
                "tc_knn: the driver refused the shared memory; fast knn runs the GEMM and the selection"
            );
            return Ok(None);
        }
        if k_max < TC_KNN_K_MAX {
            tracing::debug!(
                k_max,
                "tc_knn: fused fast knn up to this k; larger k runs the GEMM and the selection"
            );
        }
        Ok(Some(TcKnnKernels {
            knn,
            merge: f("tc_knn_merge")?,
            sm_count: (gpu.info().sm_count as usize).max(1),
            k_max,
        }))
    }
}

/// Device buffers of `knn_fast`, grown on demand and reused: the per-split lists and the merged answer.
#[derive(Debug)]
pub(crate) struct TcKnnScratch {
    part_keys: CudaSlice<u64>,
    part_scores: CudaSlice<f32>,
    out_keys: CudaSlice<u64>,
    out_scores: CudaSlice<f32>,
    /// Per query the launch's shared threshold key (`TcKnnParams::thresholds`), then per query and split its
    /// `h` list heads (`TcKnnParams::heads`), all reset to `u64::MAX`.
    thresholds: CudaSlice<u64>,
    /// The two tensor maps of an `sm90a_knn_*` launch (`TcKnnParams::maps`), rewritten for each launch while
    /// the scratch is held (so no other launch's copy can overwrite them before this one's kernel is done).
    maps: CudaSlice<u64>,
}

/// Splits (row-tile strides) for `query_tiles` query tiles over `row_tiles` row tiles: enough blocks for one
/// per SM (each block holds an SM's shared memory), at most one per row tile and [`MAX_SPLITS`].
fn splits(sm_count: usize, query_tiles: usize, row_tiles: usize) -> usize {
    (sm_count / query_tiles).clamp(1, row_tiles.min(MAX_SPLITS))
}

/// Which fused kernel family a [`Kernels::knn_fast`] launch runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FastFamily {
    /// `sm90a_knn_*`: Hopper, at least `k` splits (one list head a split).
    Hopper,
    /// `sm90a_knnm_*`: Hopper, fewer splits than `k` (`tc_knn_heads_per_split` heads a split).
    HopperMulti,
    /// `tc_knn_*` (`mma.sync`).
    Mma,
}

impl FastFamily {
    fn name(self) -> &'static str {
        match self {
            FastFamily::Hopper => "sm90a_knn",
            FastFamily::HopperMulti => "sm90a_knnm",
            FastFamily::Mma => "tc_knn",
        }
    }
}

impl Kernels {
    /// The splits and the kernel family of a [`Kernels::knn_fast`] launch (`tc` present).
    fn knn_fast_plan(
        &self,
        tk: &TcKnnKernels,
        n_queries: usize,
        n_rows: usize,
        k: usize,
    ) -> (usize, FastFamily) {
        let query_tiles = n_queries.div_ceil(TC_TILE_Q as usize);
        let row_tiles = n_rows.div_ceil(TC_TILE_R as usize);
        let n_splits = splits(tk.sm_count, query_tiles, row_tiles);
        // sm90a_knn_* when loaded, unless rows or queries exceed the TMA's signed 32-bit coordinates.
        let family = if self.hopper.is_none() || n_rows >= 1 << 31 || n_queries >= 1 << 31 {
            FastFamily::Mma
        } else if n_splits < k {
            FastFamily::HopperMulti
        } else {
            FastFamily::Hopper
        };
        (n_splits, family)
    }

    /// The name of the fused kernel family [`Kernels::knn_fast`] runs for this shape (`sm90a_knn`,
    /// `sm90a_knnm` or `tc_knn`; the entry point adds the format and metric), `None` where it does not run.
    pub fn knn_fast_family(
        &self,
        n_queries: usize,
        n_rows: usize,
        k: usize,
    ) -> Option<&'static str> {
        let tk = self.tc_knn.as_ref()?;
        self.knn_fast_supported(n_rows, k)
            .then(|| self.knn_fast_plan(tk, n_queries, n_rows, k).1.name())
    }

    /// Whether [`Kernels::knn_fast`] runs here for this shape: an sm_80+ image whose device has the shared
    /// memory, and `1 <= k <= min(k_max, n_rows)`, `k_max` the largest `k` (at most `TC_KNN_K_MAX`) whose
    /// block fits the device's shared memory.
    pub fn knn_fast_supported(&self, n_rows: usize, k: usize) -> bool {
        self.tc_knn
            .as_ref()
            .is_some_and(|tk| k >= 1 && k <= (tk.k_max as usize).min(n_rows))
    }

    /// Fast-mode knn with top-k fused: the `k` best (score, id) pairs of every query against every row, best
    /// first, from operands laid out by [`Kernels::to_half_rows`] (row stride `ld`), with the f32 norms for
    /// cosine and l2. The same lists as [`Kernels::similarity_fast`] followed by [`Kernels::select_topk`]
    /// (same scores bit for bit, same order), without the score matrix.
    #[allow(clippy::too_many_arguments)]
    pub fn knn_fast(
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
        k: usize,
    ) -> Result<TopKResult, KernelError> {
        const K: &str = "knn_fast";
        let Some(tk) = &self.tc_knn else {
            return Err(shape(
                K,
                "needs an sm_80+ image and the shared memory of tc_knn",
            ));
        };
        let (qn, cn) = fast_operands(
            K,
            gpu,
            metric,
            (queries, query_norms, n_queries),
            (corpus, corpus_norms, n_rows),
            ld,
        )?;
        if !self.knn_fast_supported(n_rows, k) {
            return Err(shape(
                K,
                format!(
                    "k = {k} must be between 1 and min({}, n_rows = {n_rows})",
                    tk.k_max
                ),
            ));
        }
        let n_rows32 = to_u32(K, "n_rows", n_rows)?;
        let n_queries32 = to_u32(K, "n_queries", n_queries)?;
        let query_tiles = n_queries.div_ceil(TC_TILE_Q as usize);
        if query_tiles > (1 << 31) - 1 {
            return Err(shape(K, "too many queries for one launch"));
        }
        let (n_splits, family) = self.knn_fast_plan(tk, n_queries, n_rows, k);
        let part = elems(K, elems(K, n_queries, n_splits)?, k)?;
        let out = elems(K, n_queries, k)?;
        // The thresholds, then the heads (`h` a split per query: 1 with at least `k` splits; more with fewer,
        // where `sm90a_knnm_*` publishes them and `tc_knn_*` publishes none).
        let heads = n_splits * tc_knn_heads_per_split(k as u32, n_splits as u32) as usize;
        let shared = elems(K, n_queries, heads + 1)?;
        let mut slot = self.tc_knn_scratch.lock();
        if !slot.as_ref().is_some_and(|s| {
            s.part_keys.len() >= part && s.out_keys.len() >= out && s.thresholds.len() >= shared
        }) {
            *slot = None; // free first
            *slot = Some(TcKnnScratch {
                part_keys: gpu.alloc_zeros::<u64>(part)?,
                part_scores: gpu.alloc_zeros::<f32>(part)?,
                out_keys: gpu.alloc_zeros::<u64>(out)?,
                out_scores: gpu.alloc_zeros::<f32>(out)?,
                thresholds: gpu.alloc_zeros::<u64>(shared.max(1))?,
                maps: gpu.alloc_zeros::<u64>(32)?,
            });
        }
        let Some(sc) = slot.as_mut() else {
            return Err(shape(K, "scratch missing"));
        };
        self.fill_u64(gpu, &sc.thresholds, shared, u64::MAX)?;
        let thresholds = gpu.device_ptr(&sc.thresholds);
        let hopper = self.hopper.as_ref().filter(|_| family != FastFamily::Mma);
        if hopper.is_some() {
            let half = match kind {
                HalfKind::F16 => Element::F16,
                HalfKind::Bf16 => Element::Bf16,
            };
            let l = ld as u64;
            let q = tensor_map_2d(
                half,
                gpu.device_ptr(queries),
                n_queries as u64,
                l,
                l,
                TC_TILE_Q,
            )?;
            let c = tensor_map_2d(half, gpu.device_ptr(corpus), n_rows as u64, l, l, TC_TILE_R)?;
            let mut both = [0u64; 32];
            both[..16].copy_from_slice(&q.0);
            both[16..].copy_from_slice(&c.0);
            gpu.upload_into(&both, &mut sc.maps)?;
        }
        let params = TcKnnParams {
            queries: gpu.device_ptr(queries),
            query_norms: qn,
            corpus: gpu.device_ptr(corpus),
            corpus_norms: cn,
            out_keys: gpu.device_ptr(&sc.part_keys),
            out_scores: gpu.device_ptr(&sc.part_scores),
            thresholds,
            heads: thresholds + 8 * n_queries as u64,
            maps: gpu.device_ptr(&sc.maps),
            n_queries: n_queries32,
            n_rows: n_rows32,
            ld: to_u32(K, "ld", ld)?,
            k: k as u32,
            n_splits: n_splits as u32,
            _pad: 0,
        };
        let (variant, metric_i) = (usize::from(kind == HalfKind::Bf16), metric.index());
        let (func, shared_mem_bytes) = match hopper {
            Some(h) if family == FastFamily::HopperMulti => (
                &h.knn_multi[variant][metric_i],
                h_knn_shared_bytes(k as u32),
            ),
            Some(h) => (&h.knn[variant][metric_i], h_knn_shared_bytes(k as u32)),
            None => (&tk.knn[variant][metric_i], tc_knn_shared_bytes(k as u32)),
        };
        let cfg = LaunchConfig {
            grid_dim: (query_tiles as u32, n_splits as u32, 1),
            block_dim: (TC_THREADS, 1, 1),
            shared_mem_bytes,
        };
        // SAFETY: the operands hold n_queries * ld and n_rows * ld values with ld a multiple of 32, the norms
        // n_queries and n_rows (cosine, l2); the outputs n_queries * n_splits * k; 1 <= k <= 32; n_splits is
        // at most the row tiles (<= 1024, so the grid's y fits); the function was opted into the shared memory
        // of k = 32, the most a launch asks for (sm90a_knn_* and sm90a_knnm_* too, when loaded: 9.0 devices
        // only); the image is sm_80+ (tc_knn present); all take the same grid and parameters, the heads
        // sized for tc_knn_heads_per_split(k, n_splits) a split; for sm90a_knn*_ the maps describe these
        // operands (uploaded above on this stream, and the scratch stays held until the
        // results are back, so no other launch rewrites them meanwhile).
        unsafe { gpu.launch(func, cfg, params) }?;
        let warps = n_splits.div_ceil(32) as u32;
        let merge = TcMergeParams {
            keys: gpu.device_ptr(&sc.part_keys),
            scores: gpu.device_ptr(&sc.part_scores),
            out_keys: gpu.device_ptr(&sc.out_keys),
            out_scores: gpu.device_ptr(&sc.out_scores),
            n_queries: n_queries32,
            n_lists: n_splits as u32,
            k: k as u32,
            _pad: 0,
        };
        let cfg = LaunchConfig {
            grid_dim: (n_queries32, 1, 1),
            block_dim: (32 * warps, 1, 1),
            shared_mem_bytes: 16 * warps,
        };
        // SAFETY: the lists were written by the launch above (same stream) for n_queries x n_splits x k; the
        // outputs hold n_queries * k; n_splits <= 1024 threads; 2 * warps u64 of shared memory.
        unsafe { gpu.launch(&tk.merge, cfg, merge) }?;
        let mut keys = vec![0u64; out];
        let mut scores = vec![0f32; out];
        gpu.download_prefix(&sc.out_keys, &mut keys)?;
        gpu.download_prefix(&sc.out_scores, &mut scores)?;
        drop(slot);
        let mut ids = Vec::with_capacity(out);
        for &key in &keys {
            // Every merged key names a row; one that does not is a device fault, reported, not returned.
            if key == u64::MAX || (key as u32) >= n_rows32 {
                return Err(crate::launch::bad_answer(
                    K,
                    format!("the device selected an invalid key {key:#x}"),
                ));
            }
            ids.push(key as u32);
        }
        Ok(TopKResult { k, ids, scores })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_fill_the_sms_once_and_stay_in_range() {
        // 1,024 queries (8 tiles) on 132 SMs: 16 splits, 128 blocks.
        assert_eq!(splits(132, 8, 3907), 16);
        // One query tile: a block per SM.
        assert_eq!(splits(132, 1, 3907), 132);
        // More query tiles than SMs: one split.
        assert_eq!(splits(132, 500, 3907), 1);
        // Few row tiles: at most one split per tile.
        assert_eq!(splits(132, 1, 3), 3);
        // Never above the merge's limit.
        assert_eq!(splits(4096, 1, 1 << 20), MAX_SPLITS);
    }

    #[test]
    fn the_largest_k_follows_the_devices_shared_memory() {
        // Opt-in shared memory per block: H100/H200 227 KiB, A100 163 KiB, sm_86/sm_89 99 KiB.
        assert_eq!(tc_knn_k_max(232_448), Some(TC_KNN_K_MAX));
        assert_eq!(tc_knn_k_max(166_912), Some(13));
        assert_eq!(tc_knn_k_max(101_376), None);
        // Exactly at a k's size, that k; a byte less, the one below.
        let b = tc_knn_shared_bytes(10) as usize;
        assert_eq!(tc_knn_k_max(b), Some(10));
        assert_eq!(tc_knn_k_max(b - 1), Some(9));
    }
}
