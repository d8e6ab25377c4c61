//! The exact f32 GEMM for sm_80 and newer (`sm80_gemm_*`): many queries against many corpus rows, in the
//! order of `docs/numerics.md` (one sequential chain per (query, row) pair, `k` ascending, starting at `+0.0`,
//! no padding in a chain). Below sm_80 the build leaves these kernels out and `gemm_*` (`dense.rs`) runs.
//!
//! Thread mapping: a block of 256 threads (8 warps) computes a tile of queries x rows whose shape depends on how
//! many warps stand along the queries, `QW`: 4 for the 128 x 128 tile (`sm80_gemm_*`), 2 for 64 x 256
//! (`sm80_gemm_q64_*`), 1 for 32 x 512 (`sm80_gemm_q32_*`; [`recall_kernel_shared::sgemm_tile_queries`]). The
//! smaller shapes serve calls with fewer queries than the 128 x 128 tile, which would leave most of its chains
//! idle (64 queries: half; the rows still cost what 128 queries cost). Warp `w` owns the 32 x 64 warp tile of
//! queries `32 * (w % QW) ..` and rows `64 * (w / QW) ..`; lane `l` owns, inside it, queries `4 * (l / 8) + i`
//! and `16 + 4 * (l / 8) + i` and rows `4 * (l % 8) + j` and `32 + 4 * (l % 8) + j` (`i, j < 4`): 64
//! accumulators. For one `k` a thread reads its 8 query values and its 8 row values with four 16-byte shared
//! loads; a warp's query load touches 4 distinct 16-byte pieces and its row load 8 (128 contiguous bytes): one
//! shared-memory wavefront each, no bank conflicts. Each chain is the same sequential chain in every shape.
//!
//! Staging: both operands are row-major (`k` contiguous) in global memory and k-major in shared memory
//! (`s[k][m]`, the tile's rows + 4 floats per `k`: 132 for 128 rows), so the copy transposes. Each thread
//! queues 2 four-byte `cp.async` per 32 tile rows of an operand per stage of [`SGEMM_TILE_K`] = 16 columns: copy
//! `i` of lane `l` in warp `w` moves column `l % 8 + 8 * (i % 2)` of tile row `l / 8 + 4 * w + 32 * (i / 2)`.
//! One warp instruction therefore reads 8 consecutive columns (one 32-byte sector) of 4 rows and writes 32
//! different banks (`4 * column + row` mod 32: every stride is 4 more than a multiple of 32). Four-byte copies need no alignment, so every `dim` takes this kernel. Values past the matrix
//! (rows past the end, columns past `dim`) are zero-filled by the copy and never enter a chain: the `k` loop
//! of the last stage stops at `dim`, and the chains of rows or queries past the end are never stored.
//! `STAGES` stages are in flight (`cp.async.wait_group`), one barrier per stage: the barrier at stage `t`
//! also tells every thread that stage `t - 1`'s buffer, the one the new copies go to, has been read.
//!
//! Epilogue: a [`TileSink`] receives each thread's 64 finished chains with their query and row indices.
//! [`Store`] writes the scores (16-byte stores where the row count allows), [`Argmin`] reduces k-means
//! assignment keys. A fused top-k plugs in as another sink: it gets every (score, query, row) of the tile.

use crate::dense::{finish, step};
use crate::util::{
    block_x, block_y, cp_async_commit, cp_async_wait, dynamic_shared_f32, score_key, shared_addr,
    shfl_xor_u64, sync_threads, thread_x,
};
use core::arch::asm;
use core::sync::atomic::{AtomicU64, Ordering};
use recall_kernel_shared::{
    METRIC_COSINE, METRIC_DOT, METRIC_L2, SGEMM_STAGES, SGEMM_TILE_K, SimParams,
    sgemm_tile_queries, sgemm_tile_rows, sgemm_tile_shared_bytes,
};

/// Columns per stage.
const BK: usize = SGEMM_TILE_K as usize;

/// The block tile with `QW` of the 8 warps along the queries (module docs): its sizes and shared-memory layout.
struct Tile<const QW: usize>;

impl<const QW: usize> Tile<QW> {
    /// Queries of the tile.
    const TQ: usize = sgemm_tile_queries(QW as u32) as usize;
    /// Corpus rows of the tile.
    const TR: usize = sgemm_tile_rows(QW as u32) as usize;
    /// Floats per `k` of the k-major query tile (4 of padding).
    const SQ: usize = Self::TQ + 4;
    /// Floats per `k` of the k-major row tile (4 of padding).
    const SR: usize = Self::TR + 4;
    /// Floats of one stage: the query tile, then the row tile.
    const STAGE: usize = BK * (Self::SQ + Self::SR);
}
// The layout the launcher sizes its shared memory by (`sgemm_tile_shared_bytes`).
const _: () = assert!(
    SGEMM_STAGES as usize * Tile::<4>::STAGE * 4 == sgemm_tile_shared_bytes(4) as usize
        && SGEMM_STAGES as usize * Tile::<2>::STAGE * 4 == sgemm_tile_shared_bytes(2) as usize
        && SGEMM_STAGES as usize * Tile::<1>::STAGE * 4 == sgemm_tile_shared_bytes(1) as usize
);
// A thread's 2 copies per 32 tile rows cover an operand's rows x 16 once over the 256 threads.
const _: () = assert!(2 * 256 == 32 * BK);

#[repr(C, align(16))]
#[derive(Clone, Copy)]
struct V4([f32; 4]);

/// Copy 4 bytes from global `src` to shared `dst` asynchronously; with `bytes == 0` the 4 bytes are zeros and
/// `src` is not read.
///
/// # Safety
/// `dst` is a 4-byte aligned shared address of this block; when `bytes` is 4, `src` points to a readable f32.
#[inline(always)]
unsafe fn cp_async4(dst: u32, src: *const f32, bytes: u32) {
    // SAFETY: caller.
    unsafe {
        asm!("cp.async.ca.shared.global [{d}], [{s}], 4, {n};", d = in(reg32) dst, s = in(reg64) src as u64, n = in(reg32) bytes, options(nostack));
    }
}

/// Wait until the copies of the oldest stage in flight have landed (this thread's): `STAGES - 2` groups may
/// stay pending.
#[inline(always)]
fn wait_oldest_stage<const STAGES: usize>() {
    match STAGES {
        3 => cp_async_wait::<1>(),
        4 => cp_async_wait::<2>(),
        _ => cp_async_wait::<0>(),
    }
}

/// One thread's copies of one operand: the block's first row in `x` (`base`), the element offset from it of the
/// thread's first tile row `l / 8 + 4 * w` at column `l % 8` (`off`; its tile rows `32 * j` further are `32 * j *
/// dim` further), and which of those rows exist (bit `j` of `rows`). Offsets stay below `rows * dim` of the
/// tile, which the launcher keeps below 2^32.
struct Operand {
    base: *const f32,
    off: u32,
    dim: u32,
    rows: u32,
}

impl Operand {
    /// Rows `r0 .. r0 + 32 * groups` of the `n x dim` matrix `x` (`groups` at most 16; a constant where inlined).
    #[inline(always)]
    fn new(x: *const f32, n: u32, dim: u32, r0: u32, groups: usize) -> Operand {
        let t = thread_x();
        let (lane, warp) = (t % 32, t / 32);
        let row_lo = lane / 8 + 4 * warp;
        let mut rows = 0u32;
        unroll!(16, J: usize => {
            if J < groups && r0 + row_lo + 32 * (J as u32) < n {
                rows |= 1 << J;
            }
        });
        Operand {
            // `wrapping_add`: past the last block's rows the pointer is formed but never read through.
            base: x.wrapping_add(r0 as usize * dim as usize),
            off: row_lo * dim + lane % 8,
            dim,
            rows,
        }
    }

    /// Queue the copies of columns `k0 .. k0 + 16` of the operand's `32 * groups` tile rows into the k-major
    /// shared tile at `dst` (`stride` floats per column): copy `i` moves column `l % 8 + 8 * (i % 2)` of tile row
    /// `l / 8 + 4 * w + 32 * (i / 2)`.
    ///
    /// # Safety
    /// The matrix of [`Operand::new`] is valid, with the same `groups`; `dst` is a 16-byte aligned shared tile
    /// of `16 * stride` floats, `stride >= 32 * groups`.
    #[inline(always)]
    unsafe fn load(&self, dst: u32, k0: u32, groups: usize, stride: usize) {
        let t = thread_x();
        let (lane, warp) = (t % 32, t / 32);
        let row_lo = lane / 8 + 4 * warp;
        let col_lo = k0 + lane % 8;
        unroll!(16, J: usize => {
            if J < groups {
                unroll!(2, H: usize => {
                    let kk = lane % 8 + 8 * H as u32;
                    let ok = self.rows & (1 << J) != 0 && col_lo + 8 * (H as u32) < self.dim;
                    // The address of an element past the matrix is formed but not read (0 bytes copied).
                    let at = self.off + 32 * J as u32 * self.dim + k0 + 8 * H as u32;
                    let src = self.base.wrapping_add(at as usize);
                    let slot = kk as usize * stride + (row_lo + 32 * J as u32) as usize;
                    // SAFETY: kk < 16 and the tile row < 32 * groups <= stride: inside the tile; src is read
                    // only when the row exists and the column is below dim.
                    unsafe { cp_async4(dst + 4 * slot as u32, src, if ok { 4 } else { 0 }) };
                });
            }
        });
    }
}

/// Four consecutive shared floats at a 16-byte aligned position.
///
/// # Safety
/// `s.add(i)` is 16-byte aligned and the 4 floats are in bounds.
#[inline(always)]
unsafe fn read4(s: *const f32, i: usize) -> [f32; 4] {
    // SAFETY: caller.
    unsafe { (*(s.add(i) as *const V4)).0 }
}

/// One step `k` of all 64 chains from the stage's tiles `sa` (queries, `sq` floats per `k`) and `sb` (rows,
/// `sr` floats per `k`).
///
/// # Safety
/// `sa`, `sb` are a stage's k-major tiles (16-byte aligned) of a [`Tile`] whose strides are `sq`, `sr`; `k <
/// 16`; `qa`, `rb` are the thread's offsets.
#[inline(always)]
unsafe fn k_step<const METRIC: u32>(
    acc: &mut [[f32; 8]; 8],
    (sa, sq): (*const f32, usize),
    (sb, sr): (*const f32, usize),
    k: usize,
    qa: usize,
    rb: usize,
) {
    // SAFETY: qa + 16 + 4 <= the tile's queries and rb + 32 + 4 <= its rows, multiples of 4, in a column of
    // `sq` or `sr` floats (multiples of 4) that starts 16-byte aligned.
    let (a0, a1, b0, b1) = unsafe {
        (
            read4(sa, k * sq + qa),
            read4(sa, k * sq + qa + 16),
            read4(sb, k * sr + rb),
            read4(sb, k * sr + rb + 32),
        )
    };
    let a = [a0[0], a0[1], a0[2], a0[3], a1[0], a1[1], a1[2], a1[3]];
    let b = [b0[0], b0[1], b0[2], b0[3], b1[0], b1[1], b1[2], b1[3]];
    unroll!(8, I: usize => {
        unroll!(8, J: usize => {
            acc[I][J] = step::<METRIC>(a[I], b[J], acc[I][J]);
        });
    });
}

/// Query offset (within the thread's first query) of accumulator row `i`.
#[inline(always)]
const fn q_off(i: usize) -> u32 {
    (i % 4 + 16 * (i / 4)) as u32
}

/// Row offset (within the thread's first row) of accumulator column `j`.
#[inline(always)]
const fn r_off(j: usize) -> u32 {
    (j % 4 + 32 * (j / 4)) as u32
}

/// What a block does with its finished chains.
pub(crate) trait TileSink {
    /// Thread's accumulator `acc[i][j]` is the chain of query `q + q_off(i)` and row `r + r_off(j)` (either
    /// may be past the end). Called by every thread of the block (warp-uniform control flow).
    ///
    /// # Safety
    /// Buffers as [`SimParams`] documents for the sink.
    unsafe fn take<const METRIC: u32>(p: &SimParams, acc: &[[f32; 8]; 8], q: u32, r: u32);
}

/// Write the scores: `out[q * n_rows + r]`.
pub(crate) struct Store;

impl TileSink for Store {
    #[inline(always)]
    unsafe fn take<const METRIC: u32>(p: &SimParams, acc: &[[f32; 8]; 8], qb: u32, rb: u32) {
        let mut nc = [0.0f32; 8];
        if METRIC == METRIC_COSINE {
            unroll!(8, J: usize => {
                let r = rb + r_off(J);
                if r < p.n_rows {
                    // SAFETY: r < n_rows; cosine launches pass n_rows corpus norms.
                    nc[J] = unsafe { *(p.corpus_norms as *const f32).add(r as usize) };
                }
            });
        }
        // A group of 4 rows starts at a multiple of 4; with n_rows a multiple of 4 and `out` 16-byte aligned
        // it lies wholly inside the matrix and 16-byte aligned whenever its first row does.
        let vec = p.n_rows % 4 == 0 && p.out % 16 == 0;
        unroll!(8, I: usize => {
            let q = qb + q_off(I);
            if q < p.n_queries {
                let nq = if METRIC == METRIC_COSINE {
                    // SAFETY: q < n_queries; cosine launches pass n_queries query norms.
                    unsafe { *(p.query_norms as *const f32).add(q as usize) }
                } else {
                    0.0
                };
                let out_row = (p.out as *mut f32).wrapping_add(q as usize * p.n_rows as usize);
                unroll!(2, H: usize => {
                    let r = rb + 32 * H as u32;
                    let v = [
                        finish::<METRIC>(acc[I][4 * H], nq, nc[4 * H]),
                        finish::<METRIC>(acc[I][4 * H + 1], nq, nc[4 * H + 1]),
                        finish::<METRIC>(acc[I][4 * H + 2], nq, nc[4 * H + 2]),
                        finish::<METRIC>(acc[I][4 * H + 3], nq, nc[4 * H + 3]),
                    ];
                    if vec {
                        if r < p.n_rows {
                            // SAFETY: r .. r + 4 < n_rows (see above), 16-byte aligned: inside the output.
                            unsafe { *(out_row.add(r as usize) as *mut V4) = V4(v) };
                        }
                    } else {
                        unroll!(4, J: usize => {
                            if r + (J as u32) < p.n_rows {
                                // SAFETY: q < n_queries and r + J < n_rows: inside the output.
                                unsafe { *out_row.add(r as usize + J) = v[J] };
                            }
                        });
                    }
                });
            }
        });
    }
}

/// k-means assignment: per query (point), the smallest pair key `(score_key(dist) << 32) | row` over the
/// tile's rows, reduced over the 8 lanes that share the query, then one 64-bit atomic minimum into `out`
/// (`n_queries` u64). The minimum does not depend on the order, so the result is deterministic.
pub(crate) struct Argmin;

impl TileSink for Argmin {
    #[inline(always)]
    unsafe fn take<const METRIC: u32>(p: &SimParams, acc: &[[f32; 8]; 8], qb: u32, rb: u32) {
        let lane = thread_x() % 32;
        unroll!(8, I: usize => {
            let q = qb + q_off(I);
            let mut best = u64::MAX;
            unroll!(8, J: usize => {
                let r = rb + r_off(J);
                if r < p.n_rows {
                    let score = finish::<METRIC>(acc[I][J], 0.0, 0.0);
                    best = best.min((u64::from(score_key(score, false)) << 32) | u64::from(r));
                }
            });
            // Every lane takes part; lanes l ^ 1, l ^ 2, l ^ 4 hold the same queries (l / 8 is the same).
            best = best.min(shfl_xor_u64(best, 4));
            best = best.min(shfl_xor_u64(best, 2));
            best = best.min(shfl_xor_u64(best, 1));
            if lane % 8 == 0 && q < p.n_queries {
                // SAFETY: q < n_queries; `out` holds n_queries u64 keys, accessed only atomically here.
                unsafe { AtomicU64::from_ptr((p.out as *mut u64).add(q as usize)) }
                    .fetch_min(best, Ordering::Relaxed);
            }
        });
    }
}

/// Queue the copies of column tile `tile` (columns `16 * tile ..`) of both operands into stage `stage` of the
/// shared memory at `base` (a function, not a closure: inlined, its sizes stay constants).
///
/// # Safety
/// `a` and `b` are the block's operands of the [`Tile`] of `QW`; `base` holds `stage + 1` stages of its shared
/// memory.
#[inline(always)]
unsafe fn load_stage<const QW: usize>(a: &Operand, b: &Operand, base: u32, tile: u32, stage: u32) {
    let (tq, tr) = (Tile::<QW>::TQ, Tile::<QW>::TR);
    let (sq, sr) = (Tile::<QW>::SQ, Tile::<QW>::SR);
    let dst = base + 4 * stage * Tile::<QW>::STAGE as u32;
    let k0 = tile * BK as u32;
    // SAFETY: forwarded; the query tile (`16 * sq` floats) comes first in a stage, then the row tile.
    unsafe {
        a.load(dst, k0, tq / 32, sq);
        b.load(dst + 4 * (BK * sq) as u32, k0, tr / 32, sr);
    }
}

/// See the module documentation.
///
/// # Safety
/// Grid `(ceil(n_rows / TR), ceil(n_queries / TQ))` for the [`Tile`] of `QW`, 256 threads, STAGES stages of that
/// tile's shared memory (`sgemm_tile_shared_bytes(QW)` with the default stages; 16-byte aligned); pointers as
/// `SimParams` documents for dense kernels (or the sink's); `max(TQ, TR) * dim < 2^32`; sm_80 or newer.
#[inline(always)]
unsafe fn sgemm<const METRIC: u32, Sink: TileSink, const STAGES: usize, const QW: usize>(
    p: &SimParams,
) {
    let smem = dynamic_shared_f32();
    let base = shared_addr(smem);
    let t = thread_x() as usize;
    let (lane, warp) = (t % 32, t / 32);
    let qa = 32 * (warp % QW) + 4 * (lane / 8);
    let rb = 64 * (warp / QW) + 4 * (lane % 8);
    let (tq, tr) = (Tile::<QW>::TQ, Tile::<QW>::TR);
    let (sq, sr) = (Tile::<QW>::SQ, Tile::<QW>::SR);
    let q0 = block_y() * tq as u32;
    let r0 = block_x() * tr as u32;
    let tiles = p.dim.div_ceil(BK as u32);
    let a = Operand::new(p.queries as *const f32, p.n_queries, p.dim, q0, tq / 32);
    let b = Operand::new(p.corpus as *const f32, p.n_rows, p.dim, r0, tr / 32);
    // Prologue: stages 0 .. STAGES - 1 in flight, one copy group each (empty past the last tile, so that the
    // group count stays uniform).
    let mut s = 0;
    while s + 1 < STAGES as u32 {
        if s < tiles {
            // SAFETY: the launcher passes the matrices' real sizes and STAGES stages of the tile's shared memory.
            unsafe { load_stage::<QW>(&a, &b, base, s, s) };
        }
        cp_async_commit();
        s += 1;
    }
    let mut acc = [[0.0f32; 8]; 8];
    // The stage tile t is read from, and the stage tile t + STAGES - 1 is copied to.
    let (mut stage, mut fill) = (0u32, STAGES as u32 - 1);
    let mut tile = 0u32;
    // Block-uniform loop: every thread runs the same iterations, so the barriers are reached by all.
    while tile < tiles {
        wait_oldest_stage::<STAGES>();
        sync_threads();
        // Every thread has finished the previous tile: its buffer takes tile + STAGES - 1.
        let next = tile + STAGES as u32 - 1;
        if next < tiles {
            // SAFETY: as in the prologue.
            unsafe { load_stage::<QW>(&a, &b, base, next, fill) };
        }
        cp_async_commit();
        let sa = smem.wrapping_add(stage as usize * Tile::<QW>::STAGE) as *const f32;
        let sb = sa.wrapping_add(BK * sq);
        let kn = (p.dim - tile * BK as u32).min(BK as u32) as usize;
        if kn == BK {
            unroll!(2, KH: usize => {
                unroll!(8, KL: usize => {
                    // SAFETY: k = 8 * KH + KL < 16; the stage's copies have landed (wait + barrier).
                    unsafe { k_step::<METRIC>(&mut acc, (sa, sq), (sb, sr), 8 * KH + KL, qa, rb) };
                });
            });
        } else {
            // The last tile: columns past `dim` never enter a chain.
            let mut k = 0;
            while k < kn {
                // SAFETY: k < kn < 16; as above.
                unsafe { k_step::<METRIC>(&mut acc, (sa, sq), (sb, sr), k, qa, rb) };
                k += 1;
            }
        }
        fill = stage;
        stage = if stage + 1 == STAGES as u32 {
            0
        } else {
            stage + 1
        };
        tile += 1;
    }
    // Only empty groups can still be pending; nothing reads shared memory after this point.
    // SAFETY: forwarded launcher contract.
    unsafe { Sink::take::<METRIC>(p, &acc, q0 + qa as u32, r0 + rb as u32) };
}

kernels! {
    SimParams;
    sm80_gemm_dot => sgemm::<METRIC_DOT, Store, { SGEMM_STAGES as usize }, 4>;
    sm80_gemm_cosine => sgemm::<METRIC_COSINE, Store, { SGEMM_STAGES as usize }, 4>;
    sm80_gemm_l2 => sgemm::<METRIC_L2, Store, { SGEMM_STAGES as usize }, 4>;
    sm80_gemm_l2_argmin => sgemm::<METRIC_L2, Argmin, { SGEMM_STAGES as usize }, 4>;
    sm80_gemm_q64_dot => sgemm::<METRIC_DOT, Store, { SGEMM_STAGES as usize }, 2>;
    sm80_gemm_q64_cosine => sgemm::<METRIC_COSINE, Store, { SGEMM_STAGES as usize }, 2>;
    sm80_gemm_q64_l2 => sgemm::<METRIC_L2, Store, { SGEMM_STAGES as usize }, 2>;
    sm80_gemm_q32_dot => sgemm::<METRIC_DOT, Store, { SGEMM_STAGES as usize }, 1>;
    sm80_gemm_q32_cosine => sgemm::<METRIC_COSINE, Store, { SGEMM_STAGES as usize }, 1>;
    sm80_gemm_q32_l2 => sgemm::<METRIC_L2, Store, { SGEMM_STAGES as usize }, 1>;
}
