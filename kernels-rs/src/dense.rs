//! Dense similarity kernels over f32 rows: norms, the row scan (one or a few queries, memory-bound), the
//! gathered row scan (candidate scoring), and the GEMM-style kernel (many queries, compute-bound).
//!
//! Every score is one chain over `k` ascending, as `docs/numerics.md` requires: `fma(q, c, acc)` for dot and
//! cosine, `t = q - c; fma(t, t, acc)` for l2, then the metric's last step. Tiles never add padding to a
//! chain: the inner loops stop at the matrix's last column.
//!
//! Row scan thread mapping (`scan_*`, `gather_*`, `row_norms_f32`): a block of `ROW_BLOCK` (256) threads
//! owns 256 rows, one per thread. Rows are staged through shared memory `ROW_TILE_K` (32) columns at a time:
//! each warp instruction loads 32 columns (128 contiguous bytes) of one row; the 32 values per thread are
//! loaded into registers first (all in flight at once), then stored to a 256 x 33 shared tile (stride 33: no
//! bank conflicts), and each thread walks its own row. Latency is hidden by occupancy (63 registers: 4 blocks
//! per SM), not by register prefetch. Measured on an H200 (docs/results/): prefetching the next tile in
//! registers (96 registers, 2 blocks per SM) was 1.3 % slower; 16-column tiles were 1.5x slower.
//!
//! GEMM thread mapping (`gemm_*`): a block of 256 threads computes a 128 (queries) x 128 (rows) tile of
//! scores; thread `(tx, ty) = (t % 16, t / 16)` owns queries `ty*4 + i` and `64 + ty*4 + i` and rows
//! `tx*4 + j` and `64 + tx*4 + j` (i, j < 4): 64 accumulators. Query and row tiles of 8 columns are staged
//! transposed in shared memory (`[k][128 + 4]`), so each thread reads its 8 queries and 8 rows for one `k`
//! as four 16-byte loads, conflict-free, and the next tile is prefetched into registers meanwhile.
//! `gemm_l2_argmin` (k-means assignment) replaces the store of scores by a per-query minimum of pair keys.
//! On sm_80 and newer `sm80_gemm_*` (`sgemm.rs`: `cp.async` stages of 16 columns, 3 in flight) runs instead;
//! these kernels are the fallback below sm_80 and the comparison the diff-test and `bench knn` run beside it.

use crate::util::{
    F4, block_x, block_y, dynamic_shared_f32, fma, score_key, shfl_xor_u64, sqrt, sync_threads,
    thread_x,
};
use core::sync::atomic::{AtomicU64, Ordering};
use recall_kernel_shared::math::cosine_from_parts;
use recall_kernel_shared::{
    GEMM_TILE, GEMM_TILE_K, HalfRowsParams, METRIC_COSINE, METRIC_DOT, METRIC_L2, ROW_BLOCK,
    ROW_QUERIES_PER_BLOCK, ROW_TILE_K, RowNormsParams, SimParams,
};

const TK: usize = ROW_TILE_K as usize;
const STRIDE: usize = TK + 1;
const QB: usize = ROW_QUERIES_PER_BLOCK as usize;
/// Values each thread loads per row tile: 256 rows x 32 columns / 256 threads.
const LOADS: usize = TK;

/// One staged tile of a lane's chain (`docs/numerics.md`: one FMA chain per pair, `k` ascending): `cols` columns
/// (at most 32, a multiple of 4) of the query `q_t` and of this lane's row `row_s`, both in shared memory, stepped
/// into `acc` in column order; when `norm`, the query's norm chain `acc_q` runs beside it; returns both (the steps of
/// `row_norms`, so the same bits). A full tile keeps eight 16-byte loads of each operand in flight before its 32
/// steps. Used by the one-launch kernels that stream rows through a shared ring (`knn1`, `cand`).
///
/// # Safety
/// `q_t` and `row_s` are 16-byte aligned and each has `cols` readable f32.
#[inline(always)]
pub(crate) unsafe fn chain_tile<const METRIC: u32>(
    q_t: *const F4,
    row_s: *const F4,
    cols: usize,
    mut acc: f32,
    mut acc_q: f32,
    norm: bool,
) -> (f32, f32) {
    if cols == 32 {
        // SAFETY: 32 columns of both operands (cols == 32).
        let (qv, cv) = unsafe { load32(q_t, row_s) };
        (acc, acc_q) = chain32::<METRIC>(&qv, &cv, acc, acc_q, norm);
    } else {
        let mut c = 0;
        while c < cols / 4 {
            // SAFETY: 4c + 4 <= cols: inside both operands.
            let (qv, cv) = unsafe { (*q_t.add(c), *row_s.add(c)) };
            unroll!(4, V: usize => {
                acc = step::<METRIC>(qv.0[V], cv.0[V], acc);
                if norm {
                    acc_q = fma(qv.0[V], qv.0[V], acc_q);
                }
            });
            c += 1;
        }
    }
    (acc, acc_q)
}

/// 32 columns of the query and of a row (8 loads of 16 bytes each), for [`chain32`].
///
/// # Safety
/// Both point to 32 readable f32, 16-byte aligned.
#[inline(always)]
pub(crate) unsafe fn load32(q: *const F4, row: *const F4) -> ([F4; 8], [F4; 8]) {
    let (mut qv, mut cv) = ([F4([0.0; 4]); 8], [F4([0.0; 4]); 8]);
    unroll!(8, U: usize => {
        // SAFETY: U < 8: inside both operands (caller).
        unsafe {
            qv[U] = *q.add(U);
            cv[U] = *row.add(U);
        }
    });
    (qv, cv)
}

/// The chains' 32 steps over loaded columns ([`load32`]), in column order: the row's (and, with `norm`, the
/// query's norm's).
#[inline(always)]
pub(crate) fn chain32<const METRIC: u32>(
    qv: &[F4; 8],
    cv: &[F4; 8],
    mut acc: f32,
    mut acc_q: f32,
    norm: bool,
) -> (f32, f32) {
    unroll!(8, U: usize => {
        unroll!(4, V: usize => {
            acc = step::<METRIC>(qv[U].0[V], cv[U].0[V], acc);
            if norm {
                acc_q = fma(qv[U].0[V], qv[U].0[V], acc_q);
            }
        });
    });
    (acc, acc_q)
}

/// One step of a metric's chain.
#[inline(always)]
pub(crate) fn step<const METRIC: u32>(q: f32, c: f32, acc: f32) -> f32 {
    if METRIC == METRIC_L2 {
        let t = q - c;
        fma(t, t, acc)
    } else {
        fma(q, c, acc)
    }
}

/// A metric's last step.
#[inline(always)]
pub(crate) fn finish<const METRIC: u32>(acc: f32, nq: f32, nc: f32) -> f32 {
    if METRIC == METRIC_COSINE {
        cosine_from_parts(acc, nq, nc)
    } else {
        acc
    }
}

/// Where thread `t`'s loads of a row tile go: tile row `8 * i + warp`, column `lane`.
#[inline(always)]
fn tile_slot(i: usize) -> (u32, u32) {
    let t = thread_x();
    let (lane, warp) = (t % 32, t / 32);
    (8 * i as u32 + warp, lane)
}

/// Load columns `k0 .. k0 + 16` of the block's rows into registers. `row_of(r)` maps a tile row (0..256)
/// to a matrix row, or `None` past the end. All loads are issued before any is used.
///
/// # Safety
/// `x` points to a `* x dim` f32 matrix holding every row `row_of` returns.
#[inline(always)]
unsafe fn load_tile(
    x: *const f32,
    dim: u32,
    k0: u32,
    row_of: impl Fn(u32) -> Option<u32>,
) -> [f32; LOADS] {
    let mut v = [0.0f32; LOADS];
    let mut i = 0;
    while i < LOADS {
        let (r, c) = tile_slot(i);
        let col = k0 + c;
        if col < dim {
            if let Some(row) = row_of(r) {
                // SAFETY: `row` is a row of `x` (caller) and col < dim.
                v[i] = unsafe { *x.add(row as usize * dim as usize + col as usize) };
            }
        }
        i += 1;
    }
    v
}

/// [`load_tile`] for the contiguous rows `row0 .. n_rows` of `x`: one running address instead of 32 live
/// ones (thread `t`'s rows are `row0 + warp + 8 * i`).
///
/// # Safety
/// `x` points to `n_rows * dim` f32.
#[inline(always)]
unsafe fn load_rows(x: *const f32, n_rows: u32, dim: u32, row0: u32, k0: u32) -> [f32; LOADS] {
    let t = thread_x();
    let (lane, warp) = (t % 32, t / 32);
    let first = row0 + warp;
    let col = k0 + lane;
    let valid = if col < dim && first < n_rows {
        (n_rows - first).div_ceil(8).min(LOADS as u32)
    } else {
        0
    };
    let stride = 8 * dim as usize;
    // `wrapping_add`: the address may step past the end after the last valid row; it is not read there.
    let mut ptr = x.wrapping_add(first as usize * dim as usize + col as usize);
    let mut v = [0.0f32; LOADS];
    let mut i = 0;
    while i < LOADS {
        if (i as u32) < valid {
            // SAFETY: row first + 8 * i < n_rows and col < dim.
            v[i] = unsafe { *ptr };
        }
        ptr = ptr.wrapping_add(stride);
        i += 1;
    }
    v
}

/// Store a tile loaded by [`load_tile`] into the 256 x 33 shared tile.
///
/// # Safety
/// `tile` points to `256 * 17` f32 of shared memory.
#[inline(always)]
unsafe fn store_tile(v: &[f32; LOADS], tile: *mut f32) {
    let mut i = 0;
    while i < LOADS {
        let (r, c) = tile_slot(i);
        // SAFETY: r < 256 and c < 32: inside the tile.
        unsafe { *tile.add(r as usize * STRIDE + c as usize) = v[i] };
        i += 1;
    }
}

/// Squared-norm chain then IEEE sqrt, one row per thread. `PREFETCH`: the next column tile's loads are
/// issued before this tile's arithmetic (latency hidden within the thread, at the cost of registers: for
/// launches of few blocks, where occupancy cannot hide it).
///
/// # Safety
/// Launched by `recall-gpu-kernels` with `ROW_BLOCK` threads, `ceil(n_rows / 256)` blocks and
/// `256 * 33 * 4` bytes of dynamic shared memory; pointers as `RowNormsParams` documents.
#[inline(always)]
unsafe fn row_norms<const PREFETCH: bool>(p: &RowNormsParams) {
    let tile = dynamic_shared_f32();
    let t = thread_x();
    let row0 = block_x() * ROW_BLOCK;
    let x = p.x as *const f32;
    let mut acc = 0.0f32;
    let mut k0 = 0;
    let mut v = if PREFETCH {
        // SAFETY: `x` holds n_rows * dim f32.
        unsafe { load_rows(x, p.n_rows, p.dim, row0, 0) }
    } else {
        [0.0; LOADS]
    };
    // Block-uniform loop: every thread runs the same iterations, so the barriers are reached by all.
    while k0 < p.dim {
        if !PREFETCH {
            // SAFETY: as above.
            v = unsafe { load_rows(x, p.n_rows, p.dim, row0, k0) };
        }
        // SAFETY: the launcher sized the shared memory for the tile.
        unsafe { store_tile(&v, tile) };
        sync_threads();
        if PREFETCH && k0 + ROW_TILE_K < p.dim {
            // SAFETY: as above.
            v = unsafe { load_rows(x, p.n_rows, p.dim, row0, k0 + ROW_TILE_K) };
        }
        let kn = (p.dim - k0).min(ROW_TILE_K) as usize;
        let mut k = 0;
        while k < kn {
            // SAFETY: t < 256, k < 32: inside the tile.
            let v = unsafe { *tile.add(t as usize * STRIDE + k) };
            acc = fma(v, v, acc);
            k += 1;
        }
        sync_threads();
        k0 += ROW_TILE_K;
    }
    if row0 + t < p.n_rows {
        // SAFETY: the row is below n_rows; `out` holds n_rows f32.
        unsafe { *(p.out as *mut f32).add((row0 + t) as usize) = sqrt(acc) };
    }
}

/// [`row_norms`] without prefetch (large launches).
///
/// # Safety
/// As `row_norms`.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn row_norms_f32(p: RowNormsParams) {
    // SAFETY: forwarded launcher contract.
    unsafe { row_norms::<false>(&p) }
}

/// [`row_norms`] with prefetch (launches of few blocks).
///
/// # Safety
/// As `row_norms`.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn row_norms_f32_pf(p: RowNormsParams) {
    // SAFETY: forwarded launcher contract.
    unsafe { row_norms::<true>(&p) }
}

/// Row scan for up to 4 queries (blockIdx.y selects them) against 256 rows (blockIdx.x).
///
/// # Safety
/// Grid `(ceil(n_rows / 256), ceil(n_queries / 4))`, `ROW_BLOCK` threads, `(256 * 33 + 4 * 32) * 4` bytes
/// of dynamic shared memory; pointers as `SimParams` documents for dense kernels.
#[inline(always)]
unsafe fn scan<const METRIC: u32, const PREFETCH: bool>(p: &SimParams) {
    let smem = dynamic_shared_f32();
    let tile = smem;
    // SAFETY: the launcher allocates the query tile right after the row tile.
    let qtile = unsafe { smem.add(ROW_BLOCK as usize * STRIDE) };
    let t = thread_x();
    let row0 = block_x() * ROW_BLOCK;
    let q0 = block_y() * ROW_QUERIES_PER_BLOCK;
    let corpus = p.corpus as *const f32;
    let queries = p.queries as *const f32;
    let mut acc = [0.0f32; QB];
    let mut k0 = 0;
    // Thread t < 128 stages query t / 32, column t % 32 of each column tile.
    let query_value = |k0: u32| -> f32 {
        let (qj, kk) = (t / ROW_TILE_K, t % ROW_TILE_K);
        let (q, col) = (q0 + qj, k0 + kk);
        if t < ROW_QUERIES_PER_BLOCK * ROW_TILE_K && q < p.n_queries && col < p.dim {
            // SAFETY: q < n_queries and col < dim.
            unsafe { *queries.add(q as usize * p.dim as usize + col as usize) }
        } else {
            0.0
        }
    };
    let (mut v, mut qv) = if PREFETCH {
        // SAFETY: `corpus` holds n_rows * dim f32.
        (
            unsafe { load_rows(corpus, p.n_rows, p.dim, row0, 0) },
            query_value(0),
        )
    } else {
        ([0.0; LOADS], 0.0)
    };
    // Block-uniform loop: every thread runs the same iterations, so the barriers are reached by all.
    while k0 < p.dim {
        if !PREFETCH {
            // SAFETY: as above.
            v = unsafe { load_rows(corpus, p.n_rows, p.dim, row0, k0) };
            qv = query_value(k0);
        }
        // SAFETY: the launcher sized the shared memory for both tiles.
        unsafe { store_tile(&v, tile) };
        if t < ROW_QUERIES_PER_BLOCK * ROW_TILE_K {
            // SAFETY: t < 128: inside the 4 x 32 query tile.
            unsafe { *qtile.add(t as usize) = qv };
        }
        sync_threads();
        if PREFETCH && k0 + ROW_TILE_K < p.dim {
            // SAFETY: as above.
            v = unsafe { load_rows(corpus, p.n_rows, p.dim, row0, k0 + ROW_TILE_K) };
            qv = query_value(k0 + ROW_TILE_K);
        }
        let kn = (p.dim - k0).min(ROW_TILE_K) as usize;
        let mut k = 0;
        while k < kn {
            // SAFETY: t < 256, k < 32: inside the tile.
            let c = unsafe { *tile.add(t as usize * STRIDE + k) };
            let mut j = 0;
            while j < QB {
                // SAFETY: j < 4, k < 32: inside the query tile.
                let qv = unsafe { *qtile.add(j * TK + k) };
                acc[j] = step::<METRIC>(qv, c, acc[j]);
                j += 1;
            }
            k += 1;
        }
        sync_threads();
        k0 += ROW_TILE_K;
    }
    let row = row0 + t;
    if row < p.n_rows {
        let nc = if METRIC == METRIC_COSINE {
            // SAFETY: row < n_rows; cosine launches pass n_rows corpus norms.
            unsafe { *(p.corpus_norms as *const f32).add(row as usize) }
        } else {
            0.0
        };
        let mut j = 0;
        while j < QB {
            let q = q0 + j as u32;
            if q < p.n_queries {
                let nq = if METRIC == METRIC_COSINE {
                    // SAFETY: q < n_queries; cosine launches pass n_queries query norms.
                    unsafe { *(p.query_norms as *const f32).add(q as usize) }
                } else {
                    0.0
                };
                // SAFETY: q < n_queries and row < n_rows: inside the n_queries x n_rows output.
                unsafe {
                    *(p.out as *mut f32).add(q as usize * p.n_rows as usize + row as usize) =
                        finish::<METRIC>(acc[j], nq, nc)
                };
            }
            j += 1;
        }
    }
}

/// Row scan over gathered rows: block (x, q) scores query `q` against its candidates
/// `ids[offsets[q] + 256 * x + t]`.
///
/// # Safety
/// Grid `(ceil(longest list / 256), n_queries)`, `ROW_BLOCK` threads, `(256 * 33 + 32 + 256) * 4` bytes of
/// dynamic shared memory; every id below `n_rows` (the launcher checks); pointers as `SimParams` documents.
#[inline(always)]
unsafe fn gather<const METRIC: u32>(p: &SimParams) {
    let smem = dynamic_shared_f32();
    let tile = smem;
    // SAFETY: the launcher allocates the query tile right after the row tile.
    let qtile = unsafe { smem.add(ROW_BLOCK as usize * STRIDE) };
    let t = thread_x();
    let q = block_y();
    let offsets = p.offsets as *const u64;
    let ids = p.ids as *const u32;
    // SAFETY: q < n_queries (grid) and `offsets` holds n_queries + 1 values.
    let (start, end) = unsafe { (*offsets.add(q as usize), *offsets.add(q as usize + 1)) };
    let first = start + u64::from(block_x() * ROW_BLOCK);
    if first >= end {
        return; // Block-uniform: the whole block has no candidates of this query.
    }
    // The block's candidate ids, staged once in shared memory (u32::MAX past the end of the list).
    // SAFETY: the launcher allocates 256 u32 after the query tile.
    let sids = unsafe { qtile.add(TK) } as *mut u32;
    let j = first + u64::from(t);
    // SAFETY: j < end <= len(ids) when read; t < 256 inside `sids`.
    unsafe {
        *sids.add(t as usize) = if j < end {
            *ids.add(j as usize)
        } else {
            u32::MAX
        }
    };
    sync_threads();
    let row_of = |r: u32| {
        // SAFETY: r < 256; every staged id is below n_rows (launcher contract) or u32::MAX.
        let id = unsafe { *sids.add(r as usize) };
        if id != u32::MAX { Some(id) } else { None }
    };
    let corpus = p.corpus as *const f32;
    let query = (p.queries as *const f32).wrapping_add(q as usize * p.dim as usize);
    let mut acc = 0.0f32;
    // SAFETY: `row_of` returns valid corpus rows.
    let mut next = unsafe { load_tile(corpus, p.dim, 0, row_of) };
    let mut k0 = 0;
    while k0 < p.dim {
        // SAFETY: the launcher sized the shared memory for both tiles.
        unsafe { store_tile(&next, tile) };
        if t < ROW_TILE_K {
            let col = k0 + t;
            // SAFETY: col < dim: inside query q's row.
            let v = if col < p.dim {
                unsafe { *query.add(col as usize) }
            } else {
                0.0
            };
            // SAFETY: t < 32: inside the query tile.
            unsafe { *qtile.add(t as usize) = v };
        }
        sync_threads();
        if k0 + ROW_TILE_K < p.dim {
            // SAFETY: as above.
            next = unsafe { load_tile(corpus, p.dim, k0 + ROW_TILE_K, row_of) };
        }
        let kn = (p.dim - k0).min(ROW_TILE_K) as usize;
        let mut k = 0;
        while k < kn {
            // SAFETY: inside the tiles.
            let (c, qv) = unsafe { (*tile.add(t as usize * STRIDE + k), *qtile.add(k)) };
            acc = step::<METRIC>(qv, c, acc);
            k += 1;
        }
        sync_threads();
        k0 += ROW_TILE_K;
    }
    if let Some(row) = row_of(t) {
        let (nq, nc) = if METRIC == METRIC_COSINE {
            // SAFETY: q < n_queries, row < n_rows; cosine launches pass both norm arrays.
            unsafe {
                (
                    *(p.query_norms as *const f32).add(q as usize),
                    *(p.corpus_norms as *const f32).add(row as usize),
                )
            }
        } else {
            (0.0, 0.0)
        };
        // SAFETY: first + t < end <= len(out).
        unsafe {
            *(p.out as *mut f32).add((first + u64::from(t)) as usize) =
                finish::<METRIC>(acc, nq, nc)
        };
    }
}

const GT: usize = GEMM_TILE as usize;
const GK: usize = GEMM_TILE_K as usize;
/// Row stride of the transposed shared tiles: 128 + 4 keeps 16-byte alignment and spreads the stores over
/// all banks.
const GS: usize = GT + 4;
/// Values each thread loads per operand per k-tile: 128 x 8 / 256.
const GL: usize = GT * GK / 256;

#[repr(C, align(16))]
#[derive(Clone, Copy)]
struct V4([f32; 4]);

/// Load an 8-column tile of 128 rows of `x` (rows `r0 ..`, columns `k0 ..`) into registers: element
/// `e = t + 256 * i` is row `e / 8`, column `e % 8` (8 threads read 32 contiguous bytes of one row).
///
/// # Safety
/// `x` points to `n * dim` f32.
#[inline(always)]
unsafe fn gemm_load(x: *const f32, n: u32, dim: u32, r0: u32, k0: u32) -> [f32; GL] {
    let t = thread_x() as usize;
    let mut v = [0.0f32; GL];
    let mut i = 0;
    while i < GL {
        let e = t + 256 * i;
        let (r, c) = (r0 + (e / GK) as u32, k0 + (e % GK) as u32);
        if r < n && c < dim {
            // SAFETY: r < n and c < dim.
            v[i] = unsafe { *x.add(r as usize * dim as usize + c as usize) };
        }
        i += 1;
    }
    v
}

/// Store a [`gemm_load`] tile transposed: `s[c][r]`.
///
/// # Safety
/// `s` points to `8 * 132` f32 of shared memory.
#[inline(always)]
unsafe fn gemm_store(v: &[f32; GL], s: *mut f32) {
    let t = thread_x() as usize;
    let mut i = 0;
    while i < GL {
        let e = t + 256 * i;
        // SAFETY: e / 8 < 128 and e % 8 < 8: inside the 8 x 132 tile.
        unsafe { *s.add((e % GK) * GS + e / GK) = v[i] };
        i += 1;
    }
}

/// Four consecutive shared floats at a 16-byte aligned offset.
///
/// # Safety
/// `s.add(i)` is 16-byte aligned and 4 floats are in bounds.
#[inline(always)]
unsafe fn read4(s: *const f32, i: usize) -> [f32; 4] {
    // SAFETY: caller guarantees alignment and bounds.
    unsafe { (*(s.add(i) as *const V4)).0 }
}

/// GEMM-style scores of a 128 x 128 (queries x rows) tile.
///
/// # Safety
/// Grid `(ceil(n_rows / 128), ceil(n_queries / 128))`, 256 threads, `2 * 2 * 8 * 132 * 4` bytes of dynamic
/// shared memory (16-byte aligned); pointers as `SimParams` documents for dense kernels.
#[inline(always)]
unsafe fn gemm<const METRIC: u32, const ARGMIN: bool>(p: &SimParams) {
    let smem = dynamic_shared_f32();
    let t = thread_x() as usize;
    let (tx, ty) = (t % 16, t / 16);
    let q0 = block_y() * GEMM_TILE;
    let r0 = block_x() * GEMM_TILE;
    let queries = p.queries as *const f32;
    let corpus = p.corpus as *const f32;
    // Two buffers per operand, each 8 x 132: [A0, B0, A1, B1].
    let buf = |b: usize, operand: usize| smem.wrapping_add((2 * b + operand) * GK * GS);
    let mut acc = [[0.0f32; 8]; 8];
    // SAFETY: the launcher passes the matrices' real sizes.
    let mut na = unsafe { gemm_load(queries, p.n_queries, p.dim, q0, 0) };
    // SAFETY: as above.
    let mut nb = unsafe { gemm_load(corpus, p.n_rows, p.dim, r0, 0) };
    let mut k0 = 0;
    let mut b = 0;
    // Block-uniform loop: every thread runs the same iterations, so the barriers are reached by all.
    while k0 < p.dim {
        let (sa, sb) = (buf(b, 0), buf(b, 1));
        // SAFETY: each buffer is 8 x 132 floats of the launcher's shared memory.
        unsafe {
            gemm_store(&na, sa);
            gemm_store(&nb, sb);
        }
        sync_threads();
        if k0 + GEMM_TILE_K < p.dim {
            // SAFETY: as above.
            unsafe {
                na = gemm_load(queries, p.n_queries, p.dim, q0, k0 + GEMM_TILE_K);
                nb = gemm_load(corpus, p.n_rows, p.dim, r0, k0 + GEMM_TILE_K);
            }
        }
        let kn = (p.dim - k0).min(GEMM_TILE_K) as usize;
        let mut k = 0;
        while k < kn {
            // SAFETY: offsets ty*4, 64+ty*4, tx*4, 64+tx*4 are multiples of 4 within a 132-float row whose
            // start (k * 132 floats, buffers at multiples of 8 * 132 floats) is 16-byte aligned.
            let (a0, a1, c0, c1) = unsafe {
                (
                    read4(sa, k * GS + ty * 4),
                    read4(sa, k * GS + 64 + ty * 4),
                    read4(sb, k * GS + tx * 4),
                    read4(sb, k * GS + 64 + tx * 4),
                )
            };
            let a = [a0[0], a0[1], a0[2], a0[3], a1[0], a1[1], a1[2], a1[3]];
            let c = [c0[0], c0[1], c0[2], c0[3], c1[0], c1[1], c1[2], c1[3]];
            unroll!(8, I: usize => {
                unroll!(8, J: usize => {
                    acc[I][J] = step::<METRIC>(a[I], c[J], acc[I][J]);
                });
            });
            k += 1;
        }
        // The next iteration writes the other buffer, so one barrier per tile suffices.
        b ^= 1;
        k0 += GEMM_TILE_K;
    }
    if ARGMIN {
        // k-means assignment: per query (point), the smallest pair key (score_key(dist) << 32 | row) over
        // this tile's rows, reduced over the 16 threads of a half-warp that share the query, then one
        // 64-bit atomicMin per query. min is order-independent, so the result is deterministic.
        unroll!(8, I: usize => {
            let q = q0 + if I < 4 { ty * 4 + I } else { 64 + ty * 4 + I - 4 } as u32;
            let mut best = u64::MAX;
            unroll!(8, J: usize => {
                let r = r0 + if J < 4 { tx * 4 + J } else { 64 + tx * 4 + J - 4 } as u32;
                if r < p.n_rows {
                    let key = (u64::from(score_key(acc[I][J], false)) << 32) | u64::from(r);
                    best = best.min(key);
                }
            });
            // Every lane takes part in the shuffles; lanes 0-15 and 16-31 are two separate half-warps.
            best = best.min(shfl_xor_u64(best, 8));
            best = best.min(shfl_xor_u64(best, 4));
            best = best.min(shfl_xor_u64(best, 2));
            best = best.min(shfl_xor_u64(best, 1));
            if tx == 0 && q < p.n_queries {
                // SAFETY: q < n_queries; `out` holds n_queries u64 keys, accessed only atomically here.
                unsafe { AtomicU64::from_ptr((p.out as *mut u64).add(q as usize)) }.fetch_min(best, Ordering::Relaxed);
            }
        });
        return;
    }
    // Epilogue, fully unrolled so the accumulators stay in registers.
    let mut nc = [0.0f32; 8];
    if METRIC == METRIC_COSINE {
        unroll!(8, J: usize => {
            let r = r0 + if J < 4 { tx * 4 + J } else { 64 + tx * 4 + J - 4 } as u32;
            if r < p.n_rows {
                // SAFETY: r < n_rows.
                nc[J] = unsafe { *(p.corpus_norms as *const f32).add(r as usize) };
            }
        });
    }
    unroll!(8, I: usize => {
        let q = q0 + if I < 4 { ty * 4 + I } else { 64 + ty * 4 + I - 4 } as u32;
        if q < p.n_queries {
            let nq = if METRIC == METRIC_COSINE {
                // SAFETY: q < n_queries.
                unsafe { *(p.query_norms as *const f32).add(q as usize) }
            } else {
                0.0
            };
            let out_row = (p.out as *mut f32).wrapping_add(q as usize * p.n_rows as usize);
            unroll!(8, J: usize => {
                let r = r0 + if J < 4 { tx * 4 + J } else { 64 + tx * 4 + J - 4 } as u32;
                if r < p.n_rows {
                    // SAFETY: q < n_queries and r < n_rows: inside the output.
                    unsafe { *out_row.add(r as usize) = finish::<METRIC>(acc[I][J], nq, nc[J]) };
                }
            });
        }
    });
}

kernels! {
    SimParams;
    scan_dot => scan::<METRIC_DOT, false>;
    scan_cosine => scan::<METRIC_COSINE, false>;
    scan_l2 => scan::<METRIC_L2, false>;
    scan_pf_dot => scan::<METRIC_DOT, true>;
    scan_pf_cosine => scan::<METRIC_COSINE, true>;
    scan_pf_l2 => scan::<METRIC_L2, true>;
    gather_dot => gather::<METRIC_DOT>;
    gather_cosine => gather::<METRIC_COSINE>;
    gather_l2 => gather::<METRIC_L2>;
    gemm_dot => gemm::<METRIC_DOT, false>;
    gemm_cosine => gemm::<METRIC_COSINE, false>;
    gemm_l2 => gemm::<METRIC_L2, false>;
    gemm_l2_argmin => gemm::<METRIC_L2, true>;
}

/// `dst[i] = src[i]` widened from f16 or bf16 to f32 (exact), for `n_rows * dim` values, grid-stride: how a
/// 16-bit corpus becomes the f32 rows the exact kernels read (`docs/numerics.md`: 16-bit corpora are widened
/// to f32, then scored as f32).
///
/// # Safety
/// Buffers as `HalfRowsParams` documents for `widen_half_rows`; any grid of 256-thread blocks.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn widen_half_rows(p: HalfRowsParams) {
    let total = u64::from(p.n_rows) * u64::from(p.dim);
    let stride = u64::from(crate::util::grid_dim_x()) * 256;
    let mut i = u64::from(block_x()) * 256 + u64::from(thread_x());
    while i < total {
        // SAFETY: i < n_rows * dim.
        let h = unsafe { *(p.src as *const u16).add(i as usize) };
        let v = if p.bf16 != 0 {
            f32::from_bits(u32::from(h) << 16)
        } else {
            let f: f32;
            // SAFETY: a register-only conversion, exact for every f16 (PTX `cvt.f32.f16`).
            unsafe {
                core::arch::asm!("cvt.f32.f16 {f}, {h};", f = out(reg32) f, h = in(reg16) h, options(pure, nomem, nostack));
            }
            f
        };
        // SAFETY: i < n_rows * dim.
        unsafe { *(p.dst as *mut f32).add(i as usize) = v };
        i += stride;
    }
}

/// Longest row the warp-per-row kernels stage in shared memory.
const WARP_DIM_MAX: usize = recall_kernel_shared::WARP_ROW_DIM_MAX as usize;

/// Copy `dim` consecutive floats from `src` to shared `dst` with the 32 lanes of a warp: eight loads in
/// flight per lane before their stores.
///
/// # Safety
/// `src` holds `dim` f32, `dst` has room for them.
#[inline(always)]
unsafe fn warp_stage(src: *const f32, dst: *mut f32, dim: usize, lane: usize) {
    let mut i = lane;
    while i < dim {
        let mut v = [0.0f32; 8];
        let mut u = 0;
        while u < 8 {
            if i + 32 * u < dim {
                // SAFETY: i + 32u < dim.
                v[u] = unsafe { *src.add(i + 32 * u) };
            }
            u += 1;
        }
        let mut u = 0;
        while u < 8 {
            if i + 32 * u < dim {
                // SAFETY: as above, inside dst.
                unsafe { *dst.add(i + 32 * u) = v[u] };
            }
            u += 1;
        }
        i += 256;
    }
}

/// Small launches, one query: warp `w` of block `b` stages row `8b + w` in shared memory with all its lanes
/// (one round of load latency instead of one per column tile), then lane 0 runs the row's chain in the
/// order of `docs/numerics.md` (the same steps as `scan`, so the same bits).
///
/// # Safety
/// Grid `ceil(n_rows / 8)`, 256 threads, `9 * WARP_ROW_DIM_MAX * 4` bytes of dynamic shared memory;
/// `n_queries == 1`, `dim <= WARP_ROW_DIM_MAX`; pointers as `SimParams` documents for dense kernels.
#[inline(always)]
unsafe fn scan_warp<const METRIC: u32>(p: &SimParams) {
    let smem = dynamic_shared_f32();
    let t = thread_x() as usize;
    let (lane, warp) = (t % 32, t / 32);
    let dim = p.dim as usize;
    let q_s = smem;
    let row_s = smem.wrapping_add(WARP_DIM_MAX * (1 + warp));
    let mut i = t;
    while i < dim {
        // SAFETY: i < dim: the query's values; the query tile holds WARP_DIM_MAX >= dim floats.
        unsafe { *q_s.add(i) = *(p.queries as *const f32).add(i) };
        i += 256;
    }
    let r = (block_x() * 8) as usize + warp;
    let live = r < p.n_rows as usize;
    if live {
        // SAFETY: row r < n_rows holds dim values; this warp's row buffer holds WARP_DIM_MAX.
        unsafe { warp_stage((p.corpus as *const f32).add(r * dim), row_s, dim, lane) };
    }
    sync_threads();
    if lane == 0 && live {
        let mut acc = 0.0f32;
        let mut k = 0;
        // Eight shared loads of each operand in flight, then their eight steps of the chain (same order).
        while k + 8 <= dim {
            let (mut qv, mut cv) = ([0.0f32; 8], [0.0f32; 8]);
            let mut u = 0;
            while u < 8 {
                // SAFETY: k + u < dim: inside both staged rows.
                unsafe {
                    qv[u] = *q_s.add(k + u);
                    cv[u] = *row_s.add(k + u);
                }
                u += 1;
            }
            let mut u = 0;
            while u < 8 {
                acc = step::<METRIC>(qv[u], cv[u], acc);
                u += 1;
            }
            k += 8;
        }
        while k < dim {
            // SAFETY: k < dim: inside both staged rows.
            acc = step::<METRIC>(unsafe { *q_s.add(k) }, unsafe { *row_s.add(k) }, acc);
            k += 1;
        }
        let (nq, nc) = if METRIC == METRIC_COSINE {
            // SAFETY: cosine launches pass one query norm and n_rows corpus norms.
            unsafe {
                (
                    *(p.query_norms as *const f32),
                    *(p.corpus_norms as *const f32).add(r),
                )
            }
        } else {
            (0.0, 0.0)
        };
        // SAFETY: r < n_rows: inside the 1 x n_rows output.
        unsafe { *(p.out as *mut f32).add(r) = finish::<METRIC>(acc, nq, nc) };
    }
}

kernels! {
    SimParams;
    scan_warp_dot => scan_warp::<METRIC_DOT>;
    scan_warp_cosine => scan_warp::<METRIC_COSINE>;
    scan_warp_l2 => scan_warp::<METRIC_L2>;
}

/// [`row_norms`] for small launches: warp `w` of block `b` stages row `8b + w`, lane 0 runs its chain.
///
/// # Safety
/// Grid `ceil(n_rows / 8)`, 256 threads, `9 * WARP_ROW_DIM_MAX * 4` bytes of dynamic shared memory;
/// `dim <= WARP_ROW_DIM_MAX`; pointers as `RowNormsParams` documents.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn row_norms_warp(p: RowNormsParams) {
    let smem = dynamic_shared_f32();
    let t = thread_x() as usize;
    let (lane, warp) = (t % 32, t / 32);
    let dim = p.dim as usize;
    let row_s = smem.wrapping_add(WARP_DIM_MAX * (1 + warp));
    let r = (block_x() * 8) as usize + warp;
    let live = r < p.n_rows as usize;
    if live {
        // SAFETY: row r < n_rows holds dim values; this warp's row buffer holds WARP_DIM_MAX.
        unsafe { warp_stage((p.x as *const f32).add(r * dim), row_s, dim, lane) };
    }
    sync_threads();
    if lane == 0 && live {
        let mut acc = 0.0f32;
        let mut k = 0;
        // Eight shared loads in flight, then their eight steps of the chain (same order).
        while k + 8 <= dim {
            let mut v = [0.0f32; 8];
            let mut u = 0;
            while u < 8 {
                // SAFETY: k + u < dim.
                v[u] = unsafe { *row_s.add(k + u) };
                u += 1;
            }
            let mut u = 0;
            while u < 8 {
                acc = fma(v[u], v[u], acc);
                u += 1;
            }
            k += 8;
        }
        while k < dim {
            // SAFETY: k < dim.
            let v = unsafe { *row_s.add(k) };
            acc = fma(v, v, acc);
            k += 1;
        }
        // SAFETY: r < n_rows.
        unsafe { *(p.out as *mut f32).add(r) = sqrt(acc) };
    }
}
