//! The launcher of `sm80_scan1_*`: one query against many rows in one persistent launch (about one block per
//! SM), scores and, for knn, the top-k (k <= 32) folded in. The host's part of a knn is three queued calls and
//! one wait, as for `knn1`: the query into a pinned buffer and across, the kernel, `2k` values back.
//!
//! Which scan a single query runs above [`KNN1_MAX_ROWS`](crate::KNN1_MAX_ROWS) rows is a [`Scan1Mode`],
//! read from `RECALL_SCAN1` when the kernels load (default [`Scan1Mode::New`]; `old` is the row scan `scan_*` and
//! the separate selection) and set with [`Kernels::set_scan1_mode`]. Both give the same bits.

use crate::env::env_number;
use crate::knn1::{OneQuery, OneQueryNeeds, one_query_round_trip};
use crate::launch::{KernelError, Kernels, SimMetric, TopKResult};
use recall_gpu_sys::driver::{CudaFunction, CudaSlice, LaunchConfig};
use recall_gpu_sys::{Gpu, GpuError};
use recall_kernel_shared::{
    SCAN1_MAX_WARPS, SCAN1_ROW_STRIDE, SMALL_K_MAX, Scan1Params, scan1_shared_bytes,
};
use std::sync::atomic::{AtomicU8, Ordering};

/// The most warps a block of `sm90a_scan1_*` may have: `cargo xtask build-kernels` gives those entry points a
/// launch bound of 512 threads (a bundle test checks the two agree); larger blocks run `sm80_scan1_*`.
pub(crate) const SCAN1_HOPPER_MAX_WARPS: u32 = 16;

/// The longest rows `sm80_scan1_*` takes (its query lives in shared memory).
pub const SCAN1_MAX_DIM: usize = 4096;

/// Which kernel one query against many rows runs (`RECALL_SCAN1`): the separate row scan and selection, or
/// the persistent `sm80_scan1_*` in one of its variants. [`Scan1Mode::NewS8`] differs only for cosine (other
/// metrics run `New`'s kernel).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Scan1Mode {
    /// `scan_*` (+ norm kernel + selection kernels).
    Old,
    /// `sm80_scan1_*`: 4 ring stages per warp. The default (measured faster on an H200: docs/tuning.md).
    #[default]
    New,
    /// 8 ring stages per warp (half as many warps fit).
    NewS8,
}

impl Scan1Mode {
    const ALL: [Scan1Mode; 3] = [Scan1Mode::Old, Scan1Mode::New, Scan1Mode::NewS8];

    /// The name `RECALL_SCAN1` takes: `old`, `new`, `new-s8`.
    ///
    /// ```
    /// use recall_gpu_kernels::Scan1Mode;
    /// assert_eq!(Scan1Mode::parse(Scan1Mode::NewS8.name()), Some(Scan1Mode::NewS8));
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            Scan1Mode::Old => "old",
            Scan1Mode::New => "new",
            Scan1Mode::NewS8 => "new-s8",
        }
    }

    /// The mode named `s` (as [`Scan1Mode::name`] writes it), if any.
    pub fn parse(s: &str) -> Option<Scan1Mode> {
        Scan1Mode::ALL.into_iter().find(|m| m.name() == s.trim())
    }

    fn to_u8(self) -> u8 {
        Scan1Mode::ALL.iter().position(|&m| m == self).unwrap_or(0) as u8
    }

    fn from_u8(v: u8) -> Scan1Mode {
        Scan1Mode::ALL.get(v as usize).copied().unwrap_or_default()
    }
}

/// The mode `RECALL_SCAN1` asks for (unset or unknown: the default, [`Scan1Mode::New`], an unknown value logged).
fn mode_from_env() -> Scan1Mode {
    match std::env::var("RECALL_SCAN1") {
        Ok(v) => Scan1Mode::parse(&v).unwrap_or_else(|| {
            tracing::warn!(value = %v, "RECALL_SCAN1: unknown value (old, new, new-s8); the default (new) runs");
            Scan1Mode::default()
        }),
        // The default since run D of session 6 (H200): `Engine::knn_in` at 1M x 768 took 814 us against 844
        // with the old scan (the same bits; docs/tuning.md).
        Err(_) => Scan1Mode::default(),
    }
}

/// The kernels, the device's limits, and the mode.
#[derive(Debug)]
pub(crate) struct Scan1Kernels {
    /// `[dot, cosine, l2]` of [`Scan1Mode::New`].
    base: [CudaFunction; 3],
    /// Cosine of `NewS8`.
    s8: CudaFunction,
    max_smem: u32,
    sm_count: u32,
    /// `RECALL_SCAN1_WARPS`: warps per block instead of the most that fit.
    warps_override: Option<u32>,
    /// `RECALL_SCAN1_L2_AHEAD`: tiles of L2 prefetch ahead of the copies (0: none).
    l2_ahead: u32,
    /// `RECALL_SCAN1_L2_256` (`on` / `off`, default on): on a 9.0 device with the sm_90a image, mode `New` runs
    /// `sm90a_scan1_*`, whose copies ask the L2 for 256 bytes (the row's next tile with this one), up to 16
    /// warps: 6 % faster at 1 query x 1M x 768 on an H100 (session 19, run R). The `.L2::256B` qualifier needs
    /// PTX ISA 7.4, above what the bundle's sm_80 and sm_86 images declare, hence the Hopper-only entry points.
    l2_256: bool,
    mode: AtomicU8,
}

impl Scan1Kernels {
    /// Look the kernels up and opt them into the device's shared memory per block; `None` when that is too
    /// little for one warp at [`SCAN1_MAX_DIM`] with 8 stages.
    pub(crate) fn load(
        gpu: &Gpu,
        f: impl Fn(&str) -> Result<CudaFunction, GpuError>,
    ) -> Result<Option<Scan1Kernels>, GpuError> {
        let base = [
            f("sm80_scan1_dot")?,
            f("sm80_scan1_cosine")?,
            f("sm80_scan1_l2")?,
        ];
        let s8 = f("sm80_scan1_s8_cosine")?;
        let info = gpu.info();
        let max_smem = u32::try_from(info.max_shared_memory_per_block_optin).unwrap_or(0);
        if max_smem < scan1_shared_bytes(SCAN1_MAX_DIM as u32, 1, 8) {
            tracing::debug!("sm80_scan1: not enough shared memory per block; the row scan runs");
            return Ok(None);
        }
        for func in base.iter().chain([&s8]) {
            if gpu.allow_dynamic_shared(func, max_smem).is_err() {
                tracing::debug!("sm80_scan1: shared memory opt-in refused; the row scan runs");
                return Ok(None);
            }
        }
        Ok(Some(Scan1Kernels {
            base,
            s8,
            max_smem,
            sm_count: info.sm_count.max(1),
            warps_override: env_number("RECALL_SCAN1_WARPS", 1..=SCAN1_MAX_WARPS),
            l2_ahead: env_number("RECALL_SCAN1_L2_AHEAD", 0..=64).unwrap_or(0),
            l2_256: crate::env::env_switch("RECALL_SCAN1_L2_256", "on", "off"),
            mode: AtomicU8::new(mode_from_env().to_u8()),
        }))
    }

    fn func(&self, mode: Scan1Mode, metric: SimMetric) -> (&CudaFunction, u32) {
        let cosine = metric == SimMetric::Cosine;
        match mode {
            Scan1Mode::NewS8 if cosine => (&self.s8, 8),
            _ => (&self.base[metric.index()], 4),
        }
    }

    fn layout(&self, n_rows: usize, dim: usize, stages: u32) -> (u32, u32, u32) {
        layout(
            n_rows,
            dim,
            stages,
            self.max_smem,
            self.sm_count,
            self.warps_override,
        )
    }
}

/// `(blocks, warps per block, shared bytes)` of `sm80_scan1_*` with `stages` stages for `n_rows x dim` on a device
/// of `sm_count` SMs and `max_smem` bytes of shared memory per block: as many warps as fit one block (at most
/// 16, or `warps`), as many blocks per SM as fit beside each other (at most 64 warps), no more blocks than the
/// groups of 32 rows need.
fn layout(
    n_rows: usize,
    dim: usize,
    stages: u32,
    max_smem: u32,
    sm_count: u32,
    warps: Option<u32>,
) -> (u32, u32, u32) {
    let dim32 = dim as u32;
    let fits = |w: u32| scan1_shared_bytes(dim32, w, stages) <= max_smem;
    let mut warps = warps.unwrap_or(16).min(SCAN1_MAX_WARPS);
    while warps > 1 && !fits(warps) {
        warps -= 1;
    }
    let smem = scan1_shared_bytes(dim32, warps, stages);
    // The SM's shared memory is the per-block limit plus the 1 KiB the driver reserves per block.
    let per_sm = ((max_smem + 1024) / (smem + 1024)).clamp(1, (64 / warps).max(1));
    let groups = n_rows.div_ceil(32);
    let blocks = (sm_count as usize * per_sm as usize)
        .min(groups.div_ceil(warps as usize))
        .max(1);
    (blocks as u32, warps, smem)
}

/// One launch of `sm80_scan1_*`, decided once per call: the kernel, its grid and block, its shared memory.
#[derive(Debug, Clone, Copy)]
struct Scan1Plan<'a> {
    func: &'a CudaFunction,
    blocks: u32,
    warps: u32,
    smem: u32,
    l2_ahead: u32,
}

impl Kernels {
    /// The scan a single query runs against more than [`KNN1_MAX_ROWS`](crate::KNN1_MAX_ROWS) rows
    /// ([`Scan1Mode::Old`] where the image has no `sm80_scan1_*`).
    pub fn scan1_mode(&self) -> Scan1Mode {
        self.scan1.as_ref().map_or(Scan1Mode::Old, |s| {
            Scan1Mode::from_u8(s.mode.load(Ordering::Relaxed))
        })
    }

    /// Choose the scan of a single query against many rows (for comparisons; `RECALL_SCAN1` sets the
    /// default). Applies to every later launch through this instance. Returns the mode now in force
    /// ([`Scan1Mode::Old`] where the image has no `sm80_scan1_*`).
    pub fn set_scan1_mode(&self, mode: Scan1Mode) -> Scan1Mode {
        if let Some(s) = &self.scan1 {
            s.mode.store(mode.to_u8(), Ordering::Relaxed);
        }
        self.scan1_mode()
    }

    /// Whether `sm80_scan1_*` takes one query against `n_rows x dim` here with top-`k` (`k == 0`: scores
    /// only): an sm_80+ image, `1 <= n_rows < 2^31`, `dim` a multiple of 4 up to [`SCAN1_MAX_DIM`], `k <=
    /// min(32, n_rows)`. Whatever the mode.
    pub fn scan1_supported(&self, n_rows: usize, dim: usize, k: usize) -> bool {
        self.scan1.is_some()
            && (1..(1usize << 31)).contains(&n_rows)
            && (4..=SCAN1_MAX_DIM).contains(&dim)
            && dim.is_multiple_of(4)
            && k <= (SMALL_K_MAX as usize).min(n_rows)
    }

    /// Whether a single query against `n_rows` rows runs `sm80_scan1_*` in the current mode (more than
    /// [`KNN1_MAX_ROWS`](crate::KNN1_MAX_ROWS) rows, a mode other than [`Scan1Mode::Old`], and
    /// [`Kernels::scan1_supported`]).
    pub(crate) fn scan1_routes(&self, n_rows: usize, dim: usize, k: usize) -> bool {
        n_rows > crate::KNN1_MAX_ROWS
            && self.scan1_mode() != Scan1Mode::Old
            && self.scan1_supported(n_rows, dim, k)
    }

    /// The kernel and `(blocks, warps, shared bytes)` a launch for this shape makes in the current mode
    /// (`New` in mode `Old`), decided once per call so that the scratch and the launch agree.
    fn scan1_plan(
        &self,
        metric: SimMetric,
        n_rows: usize,
        dim: usize,
    ) -> Result<Scan1Plan<'_>, KernelError> {
        let Some(s) = &self.scan1 else {
            return Err(KernelError::Shape {
                kernel: "scan1",
                reason: "needs an sm_80+ image".into(),
            });
        };
        let mode = match self.scan1_mode() {
            Scan1Mode::Old => Scan1Mode::New,
            m => m,
        };
        let (mut func, stages) = s.func(mode, metric);
        let (blocks, warps, smem) = s.layout(n_rows, dim, stages);
        if s.l2_256
            && stages == 4
            && warps <= SCAN1_HOPPER_MAX_WARPS
            && let Some(h) = self.hopper.as_ref().and_then(|h| h.scan1.as_ref())
        {
            func = &h[metric.index()];
        }
        Ok(Scan1Plan {
            func,
            blocks,
            warps,
            smem,
            l2_ahead: s.l2_ahead,
        })
    }

    /// Launch a planned `sm80_scan1_*`.
    ///
    /// # Safety
    /// `params` as `Scan1Params` documents for a launch of `plan`'s blocks: `scan1_supported` holds, every
    /// buffer has its size, the partial keys room for `blocks * k`, the ticket is zero.
    unsafe fn scan1_launch(
        gpu: &Gpu,
        plan: Scan1Plan<'_>,
        mut params: Scan1Params,
    ) -> Result<(), KernelError> {
        params.warps = plan.warps;
        params.l2_ahead = plan.l2_ahead;
        let cfg = LaunchConfig {
            grid_dim: (plan.blocks, 1, 1),
            block_dim: (32 * plan.warps, 1, 1),
            shared_mem_bytes: plan.smem,
        };
        // SAFETY: the caller's contract; the shared memory fits the opt-in (layout).
        unsafe { gpu.launch(plan.func, cfg, params) }?;
        Ok(())
    }

    /// Scores of one query against every row, `out[r]`, through `sm80_scan1_*` (the mode's variant, `New` in
    /// mode `Old`); the same bits as [`Kernels::similarity`]. `query_norm` (cosine) as
    /// [`Kernels::row_norms_f32`] computes it; `None` computes it in the kernel (the same bits).
    #[allow(clippy::too_many_arguments)]
    pub fn scan1_similarity(
        &self,
        gpu: &Gpu,
        metric: SimMetric,
        query: &CudaSlice<f32>,
        query_norm: Option<&CudaSlice<f32>>,
        corpus: &CudaSlice<f32>,
        corpus_norms: Option<&CudaSlice<f32>>,
        n_rows: usize,
        dim: usize,
        out: &mut CudaSlice<f32>,
    ) -> Result<(), KernelError> {
        const K: &str = "scan1_similarity";
        let shape = |reason: String| KernelError::Shape { kernel: K, reason };
        if !self.scan1_supported(n_rows, dim, 0) {
            return Err(shape(format!(
                "n_rows = {n_rows}, dim = {dim} outside what sm80_scan1 takes"
            )));
        }
        if query.len() < dim || corpus.len() < n_rows * dim || out.len() < n_rows {
            return Err(shape(format!(
                "query, corpus and out hold {}, {} and {} values, expected {dim}, {} and {n_rows}",
                query.len(),
                corpus.len(),
                out.len(),
                n_rows * dim
            )));
        }
        let (qn, cn) = match (metric, query_norm, corpus_norms) {
            (SimMetric::Cosine, q, Some(cn)) if cn.len() >= n_rows => {
                (q.map_or(0, |q| gpu.device_ptr(q)), gpu.device_ptr(cn))
            }
            (SimMetric::Cosine, _, _) => {
                return Err(shape("cosine needs n_rows corpus norms".into()));
            }
            _ => (0, 0),
        };
        let params = Scan1Params {
            query: gpu.device_ptr(query),
            query_norm: qn,
            corpus: gpu.device_ptr(corpus),
            corpus_norms: cn,
            scores: gpu.device_ptr(out),
            partial: 0,
            ticket: 0,
            out: 0,
            n_rows: n_rows as u32,
            dim: dim as u32,
            k: 0,
            warps: 0,
            higher_first: u32::from(metric.higher_first()),
            l2_ahead: 0,
        };
        let plan = self.scan1_plan(metric, n_rows, dim)?;
        // SAFETY: scan1_supported and the buffers' sizes were checked above; k = 0 uses no partial keys or
        // ticket.
        unsafe { Self::scan1_launch(gpu, plan, params) }
    }

    /// The top `k` of one query against the `n_rows x dim` rows `corpus` (with their norms for cosine), in one
    /// launch of `sm80_scan1_*` (the mode's variant, `New` in mode `Old`); the same list as
    /// [`Kernels::similarity`] followed by [`Kernels::select_topk`].
    pub fn scan1_knn(&self, gpu: &Gpu, q: &OneQuery) -> Result<TopKResult, KernelError> {
        let OneQuery {
            metric,
            query,
            corpus,
            n_rows,
            dim,
            k,
            ..
        } = *q;
        const K: &str = "scan1_knn";
        let shape = |reason: String| KernelError::Shape { kernel: K, reason };
        if k == 0 || !self.scan1_supported(n_rows, dim, k) {
            return Err(shape(format!(
                "n_rows = {n_rows}, dim = {dim}, k = {k} outside what sm80_scan1 takes"
            )));
        }
        let norms = crate::knn1::one_query_inputs(K, gpu, q)?;
        let plan = self.scan1_plan(metric, n_rows, dim)?;
        let blocks = plan.blocks as usize;
        let needs = OneQueryNeeds {
            dim,
            blocks,
            n_rows,
            partial: blocks * SMALL_K_MAX as usize,
            partial_made: blocks * SMALL_K_MAX as usize,
            tickets: 1,
            lists: 1,
        };
        let mut slot = self.scan1_scratch.lock();
        one_query_round_trip(K, gpu, &mut slot, needs, query, false, k, |sc| {
            let params = Scan1Params {
                query: sc.query_ptr(gpu),
                query_norm: 0,
                corpus: gpu.device_ptr(corpus),
                corpus_norms: norms,
                scores: gpu.device_ptr(&sc.scores),
                partial: gpu.device_ptr(&sc.partial),
                ticket: gpu.device_ptr(&sc.tickets),
                out: sc.out_ptr(gpu),
                n_rows: n_rows as u32,
                dim: dim as u32,
                k: k as u32,
                warps: 0,
                higher_first: u32::from(metric.higher_first()),
                l2_ahead: 0,
            };
            // SAFETY: scan1_supported and the buffers' sizes were checked above; the scratch holds scores for
            // n_rows, partial keys for `blocks * 32 >= blocks * k` and a zero ticket (fresh, or reset by the
            // last launch's last block).
            unsafe { Self::scan1_launch(gpu, plan, params) }
        })
    }
}

const _: () = assert!(
    SCAN1_ROW_STRIDE.is_multiple_of(4),
    "16-byte aligned shared rows"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_round_trip_through_their_names() {
        for m in Scan1Mode::ALL {
            assert_eq!(Scan1Mode::parse(m.name()), Some(m));
            assert_eq!(Scan1Mode::from_u8(m.to_u8()), m);
        }
        assert_eq!(Scan1Mode::parse(" new\n"), Some(Scan1Mode::New));
        assert_eq!(Scan1Mode::parse("fast"), None);
        assert_eq!(Scan1Mode::default(), Scan1Mode::New);
    }

    /// H200 / H100: 132 SMs, 227 KiB of shared memory per block.
    const H200: (u32, u32) = (232_448, 132);

    #[test]
    fn one_block_per_sm_of_the_most_warps_that_fit() {
        let (smem, sms) = H200;
        let (blocks, warps, bytes) = layout(1_000_000, 768, 4, smem, sms, None);
        assert_eq!((blocks, warps), (132, 12));
        assert!(bytes <= smem && scan1_shared_bytes(768, 13, 4) > smem);
        let (blocks, warps, _) = layout(1_000_000, 768, 8, smem, sms, None);
        assert_eq!((blocks, warps), (132, 6));
        // A 4096-dim query still fits with a warp of 8 stages.
        let (_, warps, bytes) = layout(1_000_000, 4096, 8, smem, sms, None);
        assert!(warps >= 1 && bytes <= smem);
    }

    #[test]
    fn smaller_blocks_share_an_sm_and_few_rows_take_few_blocks() {
        let (smem, sms) = H200;
        // 4 warps of 4 stages at 768 dims: 77,840 bytes, two blocks per SM.
        assert_eq!(layout(1_000_000, 768, 4, smem, sms, Some(4)).0, 264);
        // One warp per block: at most 64 warps per SM.
        let (blocks, warps, _) = layout(100_000_000, 4, 4, smem, sms, Some(1));
        assert_eq!(warps, 1);
        assert!(blocks as usize <= 132 * 64);
        assert_eq!(layout(1, 768, 4, smem, sms, None).0, 1);
        assert_eq!(layout(32 * 12 + 1, 768, 4, smem, sms, None).0, 2);
    }
}
