//! The launcher of `sm80_cand_*`: candidate scoring (gather, score, top-k) in one launch.
//!
//! The host's part: the queries, ids and offsets are checked while they are copied into page-locked
//! staging buffers (every id below the corpus size, offsets from 0 to `ids.len()` and non-decreasing), then
//! copied across at full bus speed ([`Kernels::candidate_batch`]); one launch scores every list and selects
//! each slice's `k` best; the `(key, score)` pairs come back into a page-locked buffer, and lists longer than
//! one slice ([`CAND_SLICE`] candidates) are merged here by the same key
//! ([`Kernels::score_candidate_batch`]).

use crate::launch::{KernelError, Kernels, SimMetric, TopKResult};
use recall_gpu_sys::driver::{CudaFunction, CudaSlice, LaunchConfig, PinnedHostSlice};
use recall_gpu_sys::{Gpu, GpuError};
use recall_kernel_shared::{
    CAND_K_MAX, CAND_SLICE, CAND_WARPS, CandParams, METRIC_COSINE, METRIC_DOT, METRIC_L2,
    cand_shared_bytes,
};

/// The longest rows [`Kernels::score_candidates`] takes (its query lives in shared memory).
pub const CAND_MAX_DIM: usize = 4096;
/// CUDA's limit on `gridDim.y` (slices per list).
const MAX_SLICES: usize = 65_535;
/// CUDA's limit on `gridDim.x` (queries).
const MAX_QUERIES: usize = (1 << 31) - 1;

/// The three metric variants, opted into the shared memory of the longest rows.
#[derive(Debug)]
pub(crate) struct CandKernels {
    funcs: [CudaFunction; 3],
}

impl CandKernels {
    /// Look the kernels up and opt them into the shared memory a block of [`CAND_MAX_DIM`] needs; `None`
    /// when the device has too little.
    pub(crate) fn load(
        gpu: &Gpu,
        f: impl Fn(&str) -> Result<CudaFunction, GpuError>,
    ) -> Result<Option<CandKernels>, GpuError> {
        let funcs = [
            f("sm80_cand_dot")?,
            f("sm80_cand_cosine")?,
            f("sm80_cand_l2")?,
        ];
        let bytes = cand_shared_bytes(CAND_MAX_DIM as u32);
        if funcs
            .iter()
            .all(|func| gpu.allow_dynamic_shared(func, bytes).is_ok())
        {
            return Ok(Some(CandKernels { funcs }));
        }
        tracing::debug!("sm80_cand: not enough shared memory per block; gather + select run");
        Ok(None)
    }
}

/// Page-locked staging buffers of candidate scoring, grown on demand and reused.
#[derive(Debug, Default)]
pub(crate) struct CandStaging {
    queries: Option<PinnedHostSlice<f32>>,
    ids: Option<PinnedHostSlice<u32>>,
    offsets: Option<PinnedHostSlice<u64>>,
    /// The readback of keys and scores, and the device buffer it is copied from (the same length).
    out_host: Option<PinnedHostSlice<u64>>,
    out: Option<CudaSlice<u64>>,
    /// A copy from the staging buffers may still be running: wait for the stream before writing them.
    in_flight: bool,
}

/// A pinned buffer of at least `len` values (grown to 1.5x the request when too small).
fn grow<T: recall_gpu_sys::driver::DeviceRepr + recall_gpu_sys::driver::ValidAsZeroBits>(
    gpu: &Gpu,
    slot: &mut Option<PinnedHostSlice<T>>,
    len: usize,
) -> Result<(), GpuError> {
    if slot.as_ref().is_none_or(|b| b.len() < len) {
        *slot = None; // free first
        *slot = Some(gpu.alloc_pinned::<T>(len + len / 2)?);
    }
    Ok(())
}

/// Candidate lists, checked and on the device: what [`Kernels::score_candidate_batch`] scores. Made only by
/// [`Kernels::candidate_batch`], which checks every id against the corpus size it is given.
#[derive(Debug)]
pub struct CandidateBatch {
    n_queries: usize,
    dim: usize,
    /// Every id is below this (the corpus size the batch was checked against).
    n_rows: usize,
    /// The host's copy of the offsets (slice sizes for the merge).
    offsets: Vec<u64>,
    shortest: usize,
    /// Candidates per block (see [`slice_for`]).
    slice: usize,
    n_slices: usize,
    queries: CudaSlice<f32>,
    ids: CudaSlice<u32>,
    offsets_dev: CudaSlice<u64>,
}

impl CandidateBatch {
    /// Queries in the batch.
    pub fn n_queries(&self) -> usize {
        self.n_queries
    }

    /// Candidates in the batch, over all lists.
    pub fn n_candidates(&self) -> usize {
        self.offsets.last().copied().unwrap_or(0) as usize
    }
}

fn shape(reason: impl Into<String>) -> KernelError {
    KernelError::Shape {
        kernel: "score_candidates",
        reason: reason.into(),
    }
}

impl Kernels {
    /// Whether [`Kernels::score_candidates`] takes this shape here: an sm_80+ image, `dim` a multiple of 4
    /// up to [`CAND_MAX_DIM`], `1 <= k <= CAND_K_MAX`.
    pub fn cand_supported(&self, dim: usize, k: usize) -> bool {
        self.cand.is_some()
            && (4..=CAND_MAX_DIM).contains(&dim)
            && dim.is_multiple_of(4)
            && (1..=CAND_K_MAX as usize).contains(&k)
    }

    /// Check candidate lists and copy them to the device with their queries: query `q` (`dim` values of
    /// `queries`) has the candidates `ids[offsets[q] .. offsets[q + 1]]`, corpus row ids that must be below
    /// `n_rows` (checked here, so the kernel cannot read outside the corpus whatever the lists hold). Ids
    /// must be unique within a list (the caller's check: the executor refuses duplicates before any work).
    pub fn candidate_batch(
        &self,
        gpu: &Gpu,
        queries: &[f32],
        dim: usize,
        ids: &[u32],
        offsets: &[u64],
        n_rows: usize,
    ) -> Result<CandidateBatch, KernelError> {
        if dim == 0 || offsets.len() < 2 {
            return Err(shape("dim and the number of queries must be at least 1"));
        }
        let n_queries = offsets.len() - 1;
        if queries.len() != n_queries * dim {
            return Err(shape(format!(
                "{} query values for {n_queries} queries of {dim}",
                queries.len()
            )));
        }
        if offsets[0] != 0 || offsets[n_queries] as usize != ids.len() {
            return Err(shape(format!("offsets must run from 0 to {}", ids.len())));
        }
        let (mut longest, mut shortest) = (0, usize::MAX);
        for w in offsets.windows(2) {
            if w[1] < w[0] {
                return Err(shape("offsets decrease"));
            }
            let len = (w[1] - w[0]) as usize;
            longest = longest.max(len);
            shortest = shortest.min(len);
        }
        let slice = slice_for(n_queries, longest, gpu.info().sm_count as usize);
        let n_slices = longest.div_ceil(slice).max(1);
        if n_slices > MAX_SLICES || n_queries > MAX_QUERIES {
            return Err(shape(format!(
                "{n_queries} queries with lists of up to {longest} candidates exceed one launch"
            )));
        }
        let mut slot = self.cand_staging.lock();
        let st = &mut *slot;
        if st.in_flight {
            // The staging buffers are written below: the last copies from them must have finished.
            gpu.synchronize()?;
            st.in_flight = false;
        }
        let staged = (|| {
            grow(gpu, &mut st.ids, ids.len().max(1))?;
            grow(gpu, &mut st.queries, queries.len())?;
            grow(gpu, &mut st.offsets, offsets.len())?;
            Ok::<_, GpuError>(())
        })();
        staged?;
        let (Some(ids_host), Some(q_host), Some(o_host)) =
            (st.ids.as_mut(), st.queries.as_mut(), st.offsets.as_mut())
        else {
            return Err(shape("staging buffers missing"));
        };
        // Copy the ids and check them in one pass (the maximum of a chunk vectorises; a bad id is reported
        // with its position).
        let ids_pinned = &mut gpu.pinned_write(ids_host)?[..ids.len()];
        let mut max_id = 0u32;
        for (dst, src) in ids_pinned.chunks_mut(4096).zip(ids.chunks(4096)) {
            dst.copy_from_slice(src);
            max_id = max_id.max(src.iter().copied().max().unwrap_or(0));
        }
        if !ids.is_empty() && max_id as usize >= n_rows {
            let (at, bad) = ids
                .iter()
                .enumerate()
                .find(|(_, id)| **id as usize >= n_rows)
                .map_or((0, max_id), |(i, id)| (i, *id));
            return Err(shape(format!(
                "candidate id {bad} at position {at} is not below the corpus size {n_rows}"
            )));
        }
        gpu.pinned_write(q_host)?[..queries.len()].copy_from_slice(queries);
        gpu.pinned_write(o_host)?[..offsets.len()].copy_from_slice(offsets);
        let mut ids_dev = gpu.alloc_zeros::<u32>(ids.len().max(1))?;
        let mut queries_dev = gpu.alloc_zeros::<f32>(queries.len())?;
        let mut offsets_dev = gpu.alloc_zeros::<u64>(offsets.len())?;
        st.in_flight = true;
        if !ids.is_empty() {
            let ids_src = &gpu.pinned_write(ids_host)?[..ids.len()];
            gpu.upload_into(ids_src, &mut ids_dev)?;
        }
        let q_src = &gpu.pinned_write(q_host)?[..queries.len()];
        gpu.upload_into(q_src, &mut queries_dev)?;
        let o_src = &gpu.pinned_write(o_host)?[..offsets.len()];
        gpu.upload_into(o_src, &mut offsets_dev)?;
        Ok(CandidateBatch {
            n_queries,
            dim,
            n_rows,
            offsets: offsets.to_vec(),
            shortest,
            slice,
            n_slices,
            queries: queries_dev,
            ids: ids_dev,
            offsets_dev,
        })
    }

    /// The `k` best (score, id) pairs of every list of `batch` against the `n_rows x dim` rows `corpus`
    /// (with their norms for cosine), best first (`docs/numerics.md`, "Top-k"): one launch, one download.
    /// The same list as [`Kernels::similarity_gather`] followed by [`Kernels::select_topk`].
    #[allow(clippy::too_many_arguments)]
    pub fn score_candidate_batch(
        &self,
        gpu: &Gpu,
        metric: SimMetric,
        batch: &CandidateBatch,
        corpus: &CudaSlice<f32>,
        corpus_norms: Option<&CudaSlice<f32>>,
        n_rows: usize,
        k: usize,
    ) -> Result<TopKResult, KernelError> {
        let Some(kernels) = &self.cand else {
            return Err(shape("needs an sm_80+ image"));
        };
        let dim = batch.dim;
        if !self.cand_supported(dim, k) {
            return Err(shape(format!(
                "dim = {dim}, k = {k} outside what the fused kernel takes"
            )));
        }
        if k > batch.shortest {
            return Err(shape(format!(
                "k = {k} exceeds the shortest list ({})",
                batch.shortest
            )));
        }
        // The ids were checked against batch.n_rows: the corpus must hold at least that many rows.
        if n_rows < batch.n_rows || corpus.len() < n_rows * dim {
            return Err(shape(format!(
                "the corpus holds {} values, the batch was checked for {} rows of {dim}",
                corpus.len(),
                batch.n_rows
            )));
        }
        let norms = match (metric, corpus_norms) {
            (SimMetric::Cosine, Some(cn)) if cn.len() >= batch.n_rows => gpu.device_ptr(cn),
            (SimMetric::Cosine, _) => return Err(shape("cosine needs n_rows corpus norms")),
            _ => 0,
        };
        let n_out = batch.n_queries * batch.n_slices * k;
        // Keys (u64 each), then scores (f32 each, two per u64).
        let words = n_out + n_out.div_ceil(2);
        let mut slot = self.cand_staging.lock();
        let st = &mut *slot;
        let result = (|| {
            if st.out_host.as_ref().is_none_or(|b| b.len() < words)
                || st.out.as_ref().is_none_or(|b| b.len() < words)
            {
                // Both buffers the same length: the readback copies the whole device buffer.
                let len = words + words / 2;
                st.out_host = None;
                st.out = None;
                st.out_host = Some(gpu.alloc_pinned_readback::<u64>(len)?);
                st.out = Some(gpu.alloc_zeros::<u64>(len)?);
            }
            let (Some(out), Some(out_host)) = (st.out.as_ref(), st.out_host.as_mut()) else {
                return Err(shape("output buffers missing"));
            };
            let out_base = gpu.device_ptr(out);
            let params = CandParams {
                queries: gpu.device_ptr(&batch.queries),
                corpus: gpu.device_ptr(corpus),
                corpus_norms: norms,
                ids: gpu.device_ptr(&batch.ids),
                offsets: gpu.device_ptr(&batch.offsets_dev),
                out_keys: out_base,
                out_scores: out_base + 8 * n_out as u64,
                dim: dim as u32,
                k: k as u32,
                n_slices: batch.n_slices as u32,
                higher_first: u32::from(metric.higher_first()),
                slice: batch.slice as u32,
                _pad: 0,
            };
            let cfg = LaunchConfig {
                grid_dim: (batch.n_queries as u32, batch.n_slices as u32, 1),
                block_dim: (32 * CAND_WARPS, 1, 1),
                shared_mem_bytes: cand_shared_bytes(dim as u32),
            };
            let func = &kernels.funcs[match metric {
                SimMetric::Dot => METRIC_DOT,
                SimMetric::Cosine => METRIC_COSINE,
                SimMetric::L2 => METRIC_L2,
            } as usize];
            // SAFETY: cand_supported holds (dim a multiple of 4 up to CAND_MAX_DIM, whose shared memory the
            // function was opted into; 1 <= k <= CAND_K_MAX); the batch's queries hold n_queries * dim
            // values, its ids are all below batch.n_rows <= n_rows (checked when it was made) and its
            // offsets n_queries + 1 non-decreasing values ending at the ids' length, every list at most
            // n_slices * slice long with 1 <= slice <= CAND_SLICE (`slice_for`); the corpus holds n_rows * dim values (16-byte aligned: a device
            // allocation), the norms n_rows for cosine; out holds n_out keys then n_out scores; grid
            // (n_queries <= 2^31 - 1, n_slices <= 65,535) and block as `CandParams` documents.
            unsafe { gpu.launch(func, cfg, params) }?;
            let region = gpu.download_pinned(out, out_host)?;
            st.in_flight = false;
            merge(batch, k, &region[..words], n_out)
        })();
        if result.is_err() {
            // A copy may still use the pinned buffers: start from fresh ones once nothing runs.
            let _ = gpu.synchronize();
            *st = CandStaging::default();
        }
        result
    }

    /// [`Kernels::candidate_batch`] then [`Kernels::score_candidate_batch`]: candidate scoring from host
    /// lists in one call.
    #[allow(clippy::too_many_arguments)]
    pub fn score_candidates(
        &self,
        gpu: &Gpu,
        metric: SimMetric,
        queries: &[f32],
        corpus: &CudaSlice<f32>,
        corpus_norms: Option<&CudaSlice<f32>>,
        n_rows: usize,
        dim: usize,
        ids: &[u32],
        offsets: &[u64],
        k: usize,
    ) -> Result<TopKResult, KernelError> {
        let batch = self.candidate_batch(gpu, queries, dim, ids, offsets, n_rows)?;
        self.score_candidate_batch(gpu, metric, &batch, corpus, corpus_norms, n_rows, k)
    }
}

/// Candidates per block for `n_queries` lists of at most `longest` candidates on a device of `sms` SMs:
/// [`CAND_SLICE`], halved (down to [`CAND_MIN_SLICE`]) while the launch would have fewer than two blocks per
/// SM. A block's time grows with its slice, so a few long lists (8 queries x 1,000 candidates: 8 blocks of
/// 1,024 on a 132-SM H200) would otherwise leave the device idle and take a whole slice's time; the slices'
/// best are merged on the host by the same key, so the answer does not depend on the slice length.
fn slice_for(n_queries: usize, longest: usize, sms: usize) -> usize {
    let want = 2 * sms.max(1);
    let mut slice = CAND_SLICE as usize;
    while slice > CAND_MIN_SLICE && n_queries * longest.div_ceil(slice).max(1) < want {
        slice /= 2;
    }
    slice
}

/// The shortest slice [`slice_for`] picks: one group of 32 candidates per warp of a block.
const CAND_MIN_SLICE: usize = 32 * CAND_WARPS as usize;

/// Each list's `k` best from its slices' (key, score) pairs: slice `x` of query `q` wrote `min(k, count)`
/// keys ascending at `(q * n_slices + x) * k`, `count` being the slice's candidates. One slice per list
/// needs no merge; more are merged by key (the order of `docs/numerics.md`).
fn merge(
    batch: &CandidateBatch,
    k: usize,
    region: &[u64],
    n_out: usize,
) -> Result<TopKResult, KernelError> {
    let keys = &region[..n_out];
    let score_at = |i: usize| {
        let w = region[n_out + i / 2];
        f32::from_bits(if i.is_multiple_of(2) {
            w as u32
        } else {
            (w >> 32) as u32
        })
    };
    let slice = batch.slice;
    let mut ids = Vec::with_capacity(batch.n_queries * k);
    let mut scores = Vec::with_capacity(batch.n_queries * k);
    let mut pool: Vec<(u64, usize)> = Vec::new();
    for q in 0..batch.n_queries {
        let len = (batch.offsets[q + 1] - batch.offsets[q]) as usize;
        pool.clear();
        for x in 0..batch.n_slices {
            let count = len.saturating_sub(x * slice).min(slice);
            let base = (q * batch.n_slices + x) * k;
            pool.extend((base..base + k.min(count)).map(|i| (keys[i], i)));
        }
        if batch.n_slices > 1 {
            if pool.len() > k {
                pool.select_nth_unstable_by_key(k - 1, |p| p.0);
                pool.truncate(k);
            }
            pool.sort_unstable_by_key(|p| p.0);
        }
        if pool.len() != k {
            return Err(crate::launch::bad_answer(
                "score_candidates",
                format!("list {q} gave {} pairs, expected {k}", pool.len()),
            ));
        }
        for &(key, i) in &pool {
            // Every selected key names a candidate id; a key that cannot is a device fault, reported
            // instead of returned as an answer.
            if key == u64::MAX || key as u32 as usize >= batch.n_rows {
                return Err(crate::launch::bad_answer(
                    "score_candidates",
                    format!("the device selected an invalid key {key:#x}"),
                ));
            }
            ids.push(key as u32);
            scores.push(score_at(i));
        }
    }
    Ok(TopKResult { k, ids, scores })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_shrink_until_the_device_has_two_blocks_per_sm() {
        // Few lists: halved to the floor (8 queries x 1,000 candidates on 132 SMs: 8 slices each, 64 blocks).
        assert_eq!(slice_for(8, 1000, 132), CAND_MIN_SLICE);
        // Many lists keep whole slices.
        assert_eq!(slice_for(1024, 1000, 132), CAND_SLICE as usize);
        assert_eq!(slice_for(264, 1024, 132), CAND_SLICE as usize);
        // One long list: halved until 264 blocks (100,000 / 256 = 391 slices).
        assert_eq!(slice_for(1, 100_000, 132), 256);
        // Every choice is a power of two between the floor and CAND_SLICE.
        for (nq, longest, sms) in [(1, 1, 1), (3, 7, 0), (1, 1 << 20, 8), (100, 50, 132)] {
            let s = slice_for(nq, longest, sms);
            assert!(s.is_power_of_two() && (CAND_MIN_SLICE..=CAND_SLICE as usize).contains(&s));
        }
    }
}
