//! The sm_80 exact GEMM (`sm80_gemm_*`, `kernels-rs/src/sgemm.rs`): the kernel behind
//! [`Kernels::similarity`](crate::Kernels::similarity) for more than [`SCAN_MAX_QUERIES`](crate::SCAN_MAX_QUERIES)
//! queries and behind [`Kernels::kmeans_assign`](crate::Kernels::kmeans_assign) on sm_80 and newer, with
//! `gemm_*` (`dense.rs`) as the fallback below sm_80, for `dim` above [`SGEMM_MAX_DIM`], and on request
//! ([`Kernels::set_gemm_kernel`](crate::Kernels::set_gemm_kernel)). Both give the same bits: each score is one
//! chain over `k` ascending (`docs/numerics.md`).

use recall_gpu_sys::driver::CudaFunction;
use recall_gpu_sys::{Gpu, GpuError};
use recall_kernel_shared::{
    GEMM_THREADS, SGEMM_STAGES, SGEMM_TILE_K, sgemm_shared_bytes, sgemm_tile_queries,
    sgemm_tile_rows, sgemm_tile_shared_bytes,
};
use std::sync::atomic::{AtomicBool, Ordering};

/// Dynamic shared memory of one `sm80_gemm_*` block (3 stages of two 16 x 132 f32 tiles: 50,688 bytes, above
/// the 48 KiB default, so the kernels are opted in at load).
pub(crate) const SGEMM_SMEM_BYTES: u32 = sgemm_shared_bytes(SGEMM_TILE_K, SGEMM_STAGES);

/// The longest rows `sm80_gemm_*` takes: its per-block element offsets (`128 * dim`) stay below 2^32.
pub const SGEMM_MAX_DIM: usize = 1 << 24;

/// Which kernel runs the exact many-query GEMM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GemmKernel {
    /// `sm80_gemm_*`: `cp.async` staging, 16-column stages, 3 in flight (sm_80 and newer).
    Sm80,
    /// `gemm_*`: register-staged 8-column tiles (every arch).
    Legacy,
}

impl GemmKernel {
    /// The kernel family's name prefix, as the bundle and the diff-test name it.
    pub fn prefix(self) -> &'static str {
        match self {
            GemmKernel::Sm80 => "sm80_gemm",
            GemmKernel::Legacy => "gemm",
        }
    }
}

/// A narrower tile of the same GEMM for calls with few queries: `sm80_gemm_q64_*` (64 queries x 256 rows) or
/// `sm80_gemm_q32_*` (32 x 512). The 128 x 128 tile computes 128 chains per row whatever the call's queries, so
/// 64 queries cost what 128 do; these tiles give the rows' cost to the queries there are. Each chain is the same
/// sequential chain as in the 128 x 128 tile, so the bits are the same.
#[derive(Debug)]
pub(crate) struct NarrowTile {
    /// `[dot, cosine, l2]`.
    pub(crate) sim: [CudaFunction; 3],
    /// Queries of the tile.
    pub(crate) queries: usize,
    /// Corpus rows of the tile.
    pub(crate) rows: usize,
    /// Dynamic shared memory of one block.
    pub(crate) shared_bytes: u32,
}

impl NarrowTile {
    /// The tile with `qw` warps along the queries, named `sm80_gemm_q{32 * qw}_*`; `None` when the device cannot
    /// keep two of its blocks on an SM (as the 128 x 128 tile is built for; the smaller shared memory of sm_86 and
    /// sm_89 holds one 64 x 256 block): the 128 x 128 tile runs those calls.
    fn load(
        gpu: &Gpu,
        f: &impl Fn(&str) -> Result<CudaFunction, GpuError>,
        qw: u32,
    ) -> Result<Option<NarrowTile>, GpuError> {
        let queries = sgemm_tile_queries(qw);
        let sim = [
            f(&format!("sm80_gemm_q{queries}_dot"))?,
            f(&format!("sm80_gemm_q{queries}_cosine"))?,
            f(&format!("sm80_gemm_q{queries}_l2"))?,
        ];
        let bytes = sgemm_tile_shared_bytes(qw);
        for func in &sim {
            if gpu.allow_dynamic_shared(func, bytes).is_err()
                || gpu
                    .max_resident_blocks_per_sm(func, GEMM_THREADS, bytes)
                    .is_ok_and(|b| b < 2)
            {
                tracing::debug!(
                    queries,
                    "sm80_gemm: a narrow tile does not fit twice an SM; the 128 x 128 tile runs"
                );
                return Ok(None);
            }
        }
        Ok(Some(NarrowTile {
            sim,
            queries: queries as usize,
            rows: sgemm_tile_rows(qw) as usize,
            shared_bytes: bytes,
        }))
    }

    /// Whether the tile takes `queries` queries of rows of `dim` values in one launch row: they fit in the tile,
    /// and its element offsets (`max(queries, rows) * dim`) stay below 2^32.
    pub(crate) fn takes(&self, queries: usize, dim: usize) -> bool {
        queries <= self.queries
            && self
                .queries
                .max(self.rows)
                .checked_mul(dim)
                .is_some_and(|e| e < 1 << 32)
    }
}

/// The loaded `sm80_gemm_*` kernels and the switch that sets them aside.
#[derive(Debug)]
pub(crate) struct Sm80Gemm {
    /// `[dot, cosine, l2]`.
    pub(crate) sim: [CudaFunction; 3],
    pub(crate) l2_argmin: CudaFunction,
    /// The narrow tiles, narrowest first (those the device holds twice an SM).
    pub(crate) narrow: Vec<NarrowTile>,
    /// Run `gemm_*` instead (benchmarks and the diff-test compare the two).
    legacy: AtomicBool,
}

impl Sm80Gemm {
    /// Look the kernels up and opt them into their shared memory; `None` when the device cannot give a block
    /// that much (the legacy kernel runs).
    pub(crate) fn load(
        gpu: &Gpu,
        f: impl Fn(&str) -> Result<CudaFunction, GpuError>,
    ) -> Result<Option<Sm80Gemm>, GpuError> {
        let sim = [
            f("sm80_gemm_dot")?,
            f("sm80_gemm_cosine")?,
            f("sm80_gemm_l2")?,
        ];
        let l2_argmin = f("sm80_gemm_l2_argmin")?;
        let all_fit = sim
            .iter()
            .chain(std::iter::once(&l2_argmin))
            .all(|func| gpu.allow_dynamic_shared(func, SGEMM_SMEM_BYTES).is_ok());
        if !all_fit {
            tracing::debug!("sm80_gemm: not enough shared memory per block; gemm_* runs");
            return Ok(None);
        }
        let mut narrow = Vec::new();
        for qw in [1, 2] {
            narrow.extend(NarrowTile::load(gpu, &f, qw)?);
        }
        Ok(Some(Sm80Gemm {
            sim,
            l2_argmin,
            narrow,
            legacy: AtomicBool::new(false),
        }))
    }

    /// The narrowest tile that takes a launch of `queries` queries of `dim` values ([`NarrowTile::takes`]);
    /// `None`: the 128 x 128 tile.
    pub(crate) fn narrow_for(&self, queries: usize, dim: usize) -> Option<&NarrowTile> {
        self.narrow.iter().find(|t| t.takes(queries, dim))
    }

    /// Whether this GEMM runs a problem of `dim` columns now.
    pub(crate) fn runs(&self, dim: usize) -> bool {
        dim <= SGEMM_MAX_DIM && !self.legacy.load(Ordering::Relaxed)
    }

    pub(crate) fn set_legacy(&self, legacy: bool) {
        self.legacy.store(legacy, Ordering::Relaxed);
    }

    pub(crate) fn legacy(&self) -> bool {
        self.legacy.load(Ordering::Relaxed)
    }
}

/// How many queries one similarity call should take so that its `chunk x n_rows` f32 scores fit in
/// `budget_bytes`: at least 1, at most `n_queries`, and a multiple of the GEMM's 128-query tile whenever more
/// than one tile is left and fits. A chunk of 268 queries costs as much GEMM time as 384 (three tiles, the
/// last one 12 % used); 256 costs two.
pub fn query_chunk(n_rows: usize, n_queries: usize, budget_bytes: usize) -> usize {
    let tile = recall_kernel_shared::GEMM_TILE as usize;
    let fit = (budget_bytes / n_rows.saturating_mul(4).max(1)).clamp(1, n_queries.max(1));
    if fit >= n_queries || fit < tile {
        fit
    } else {
        fit / tile * tile
    }
}

#[cfg(test)]
mod tests {
    use super::query_chunk;

    #[test]
    fn chunks_are_whole_gemm_tiles_when_a_tile_fits() {
        // 1,024 queries x 1,000,000 rows in 1 GiB of scores: 268 fit, 256 = two tiles are taken.
        assert_eq!(query_chunk(1_000_000, 1024, 1 << 30), 256);
        // Everything fits: one call, whatever its size.
        assert_eq!(query_chunk(1000, 300, 1 << 30), 300);
        // Less than a tile fits: as many as fit.
        assert_eq!(query_chunk(10_000_000, 1024, 1 << 30), 26);
        // Always at least one query.
        assert_eq!(query_chunk(usize::MAX / 2, 5, 1 << 30), 1);
    }
}
