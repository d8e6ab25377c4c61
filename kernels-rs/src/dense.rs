//! Dense similarity kernels over f32 rows.
//!
//! Thread mapping of the row-scan kernels (`row_norms_f32`, `cosine_f32_rows`): a block of `ROW_BLOCK`
//! (256) threads owns 256 consecutive corpus rows, one row per thread. The rows are staged through shared
//! memory `ROW_TILE_K` (32) columns at a time: warp `w` loads rows `8*i + w` (i = 0..32, each a coalesced
//! 128-byte read of one row) into registers, stores them to shared memory, and prefetches the next tile
//! while thread `t` walks its own row's 32 staged values in order. The
//! shared tile has a row stride of 33 floats, so both the loads (one row per warp) and the per-thread walk
//! (one row per thread) are free of bank conflicts. Each thread keeps one accumulator per query: one FMA
//! chain over `k` ascending, as `docs/numerics.md` requires.

use crate::util::{block_x, block_y, dynamic_shared_f32, fma, sqrt, sync_threads, thread_x};
use recall_kernel_shared::math::cosine_from_parts;
use recall_kernel_shared::{
    CosineParams, ROW_BLOCK, ROW_QUERIES_PER_BLOCK, ROW_TILE_K, RowNormsParams,
};

const STRIDE: usize = ROW_TILE_K as usize + 1;
const QB: usize = ROW_QUERIES_PER_BLOCK as usize;

/// Rows each thread loads per tile: 256 rows / 8 warps.
const LOADS: usize = (ROW_BLOCK / 8) as usize;

/// Load columns `k0 .. k0 + 32` of the block's 256 rows into registers: thread (warp `w`, lane `l`) takes
/// column `k0 + l` of rows `8 * i + w`, so each warp instruction reads 128 contiguous bytes of one row.
/// All 32 loads are issued before any is used. Values past the end of the matrix are 0 and never used.
///
/// # Safety
/// `x` points to `n_rows * dim` f32.
#[inline(always)]
unsafe fn load_tile(x: *const f32, n_rows: u32, dim: u32, row0: u32, k0: u32) -> [f32; LOADS] {
    let t = thread_x();
    let (lane, warp) = (t % 32, t / 32);
    let col = k0 + lane;
    let mut v = [0.0f32; LOADS];
    // Rows this thread loads are row0 + warp + 8 * i for i < valid.
    let first = row0 + warp;
    let valid = if col < dim && first < n_rows { (n_rows - first).div_ceil(8).min(LOADS as u32) } else { 0 };
    let stride = 8 * dim as usize;
    // One running address instead of 32 live ones; `wrapping_add` because it may step past the end
    // after the last valid row (it is never dereferenced there).
    let mut ptr = x.wrapping_add(first as usize * dim as usize + col as usize);
    let mut i = 0;
    while i < LOADS {
        if (i as u32) < valid {
            // SAFETY: row first + 8 * i < n_rows and col < dim: inside the `n_rows * dim` matrix.
            v[i] = unsafe { *ptr };
        }
        ptr = ptr.wrapping_add(stride);
        i += 1;
    }
    v
}

/// Store a tile loaded by [`load_tile`] into shared memory (row stride 33: no bank conflicts either way).
///
/// # Safety
/// `tile` points to `256 * 33` f32 of shared memory.
#[inline(always)]
unsafe fn store_tile(v: &[f32; LOADS], tile: *mut f32) {
    let t = thread_x();
    let (lane, warp) = (t % 32, t / 32);
    let mut i = 0;
    while i < LOADS {
        let r = i * 8 + warp as usize;
        // SAFETY: r < 256 and lane < 32: inside the 256 x 33 tile.
        unsafe { *tile.add(r * STRIDE + lane as usize) = v[i] };
        i += 1;
    }
}

/// Squared L2 norm chain followed by IEEE sqrt, one row per thread.
///
/// # Safety
/// Launched by `recall-gpu-kernels` with `ROW_BLOCK` threads, `ceil(n_rows / 256)` blocks and
/// `256 * 33 * 4` bytes of dynamic shared memory; pointers as `RowNormsParams` documents.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn row_norms_f32(p: RowNormsParams) {
    let tile = dynamic_shared_f32();
    let t = thread_x();
    let row0 = block_x() * ROW_BLOCK;
    let x = p.x as *const f32;
    let mut acc = 0.0f32;
    let mut k0 = 0;
    // SAFETY: `x` holds n_rows * dim f32 (launcher contract).
    let mut next = unsafe { load_tile(x, p.n_rows, p.dim, row0, 0) };
    // Block-uniform loop: every thread runs the same iterations, so the barriers are reached by all.
    while k0 < p.dim {
        // SAFETY: the launcher sized the shared memory for the tile.
        unsafe { store_tile(&next, tile) };
        sync_threads();
        if k0 + ROW_TILE_K < p.dim {
            // Prefetch the next tile while this one is consumed.
            // SAFETY: as above.
            next = unsafe { load_tile(x, p.n_rows, p.dim, row0, k0 + ROW_TILE_K) };
        }
        let kn = if p.dim - k0 < ROW_TILE_K { p.dim - k0 } else { ROW_TILE_K };
        let mut k = 0;
        while k < kn {
            // SAFETY: t < 256, k < 32: inside the tile.
            let v = unsafe { *tile.add(t as usize * STRIDE + k as usize) };
            acc = fma(v, v, acc);
            k += 1;
        }
        sync_threads();
        k0 += ROW_TILE_K;
    }
    let row = row0 + t;
    if row < p.n_rows {
        // SAFETY: row < n_rows; `out` holds n_rows f32.
        unsafe { *(p.out as *mut f32).add(row as usize) = sqrt(acc) };
    }
}

/// Cosine similarity of up to 4 queries (blockIdx.y selects them) against 256 rows (blockIdx.x).
///
/// # Safety
/// Launched by `recall-gpu-kernels` with `ROW_BLOCK` threads, grid `(ceil(n_rows / 256),
/// ceil(n_queries / 4))` and `(256 * 33 + 4 * 32) * 4` bytes of dynamic shared memory; pointers as
/// `CosineParams` documents.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn cosine_f32_rows(p: CosineParams) {
    let smem = dynamic_shared_f32();
    let tile = smem;
    // SAFETY: the launcher allocates 256 * 33 + 4 * 32 floats; the query tile follows the row tile.
    let qtile = unsafe { smem.add(ROW_BLOCK as usize * STRIDE) };
    let t = thread_x();
    let row0 = block_x() * ROW_BLOCK;
    let q0 = block_y() * ROW_QUERIES_PER_BLOCK;
    let corpus = p.corpus as *const f32;
    let queries = p.queries as *const f32;
    let mut acc = [0.0f32; QB];
    let mut k0 = 0;
    // SAFETY: `corpus` holds n_rows * dim f32 (launcher contract).
    let mut next = unsafe { load_tile(corpus, p.n_rows, p.dim, row0, 0) };
    // Block-uniform loop: every thread runs the same iterations, so the barriers are reached by all.
    while k0 < p.dim {
        // SAFETY: the launcher sized the shared memory for both tiles.
        unsafe { store_tile(&next, tile) };
        if t < ROW_QUERIES_PER_BLOCK * ROW_TILE_K {
            let qj = t / ROW_TILE_K;
            let kk = t % ROW_TILE_K;
            let q = q0 + qj;
            let col = k0 + kk;
            let v = if q < p.n_queries && col < p.dim {
                // SAFETY: q < n_queries and col < dim: inside the queries matrix.
                unsafe { *queries.add(q as usize * p.dim as usize + col as usize) }
            } else {
                0.0
            };
            // SAFETY: t < 128: inside the 4 x 32 query tile.
            unsafe { *qtile.add(t as usize) = v };
        }
        sync_threads();
        if k0 + ROW_TILE_K < p.dim {
            // Prefetch the next tile while this one is consumed.
            // SAFETY: as above.
            next = unsafe { load_tile(corpus, p.n_rows, p.dim, row0, k0 + ROW_TILE_K) };
        }
        let kn = if p.dim - k0 < ROW_TILE_K { p.dim - k0 } else { ROW_TILE_K };
        let mut k = 0;
        while k < kn {
            // SAFETY: t < 256, k < 32: inside the tile.
            let c = unsafe { *tile.add(t as usize * STRIDE + k as usize) };
            let mut j = 0;
            while j < QB {
                // SAFETY: j < 4, k < 32: inside the query tile.
                let qv = unsafe { *qtile.add(j * ROW_TILE_K as usize + k as usize) };
                acc[j] = fma(qv, c, acc[j]);
                j += 1;
            }
            k += 1;
        }
        sync_threads();
        k0 += ROW_TILE_K;
    }
    let row = row0 + t;
    if row < p.n_rows {
        // SAFETY: row < n_rows.
        let nc = unsafe { *(p.corpus_norms as *const f32).add(row as usize) };
        let mut j = 0;
        while j < QB {
            let q = q0 + j as u32;
            if q < p.n_queries {
                // SAFETY: q < n_queries.
                let nq = unsafe { *(p.query_norms as *const f32).add(q as usize) };
                let s = cosine_from_parts(acc[j], nq, nc);
                // SAFETY: q < n_queries and row < n_rows: inside the n_queries x n_rows output.
                unsafe { *(p.out as *mut f32).add(q as usize * p.n_rows as usize + row as usize) = s };
            }
            j += 1;
        }
    }
}
