//! Fast mode: similarity and knn on tensor cores (sm_80 and newer), from f16 or bf16 operands with f32
//! accumulation.
//!
//! Every kernel here is named `tc_*`: `cargo xtask build-kernels` leaves them out of the images for SMs
//! below 80, whose PTX has no `mma.sync ... f16/bf16` with f32 accumulation of this shape, `cp.async` or
//! `cvt.rn.bf16.f32`. The launcher falls back to the exact kernels there.
//!
//! Fast mode does not follow the exact order of `docs/numerics.md`: the operands are rounded to 16 bits and
//! the tensor cores sum in their own order. Its error bound is written in `docs/numerics.md`, "Fast mode".
//!
//! Main loop ([`stream`], shared by `tc_gemm_*` and `tc_knn_*`, so both compute the same bits): a block of 256
//! threads (8 warps) computes tiles of 128 queries x 256 corpus rows. Warp `w` owns queries `64 * (w % 2) ..`
//! (four m16 tiles) and rows `64 * (w / 2) ..` (eight n8 tiles): 32 `mma.sync.m16n8k16` per 16 columns, 128
//! f32 accumulators per thread. Operand tiles of 32 columns are copied global -> shared with `cp.async` (16
//! bytes per copy, rows past the end zero-filled) into a ring of [`TC_STAGES`] stages, so two steps' copies
//! run under each step's math; a block that walks several row tiles keeps the ring running across them.
//! Shared rows are padded to 40 values (80 bytes): the eight 16-byte row pieces that one `ldmatrix` phase
//! reads fall in eight different bank groups. Fragments come from `ldmatrix.x4`: both operands are K-major,
//! which is what `mma .row.col` wants. Accumulator `acc[i][j][2h + e]` holds query `64 (w % 2) + 16 i +
//! lane / 4 + 8 h` against row `64 (w / 2) + 8 j + 2 (lane % 4) + e` of the tile.

use crate::util::{
    block_x, block_y, cp_async_commit, cp_async_wait, cp_async16, dynamic_shared_f32, shared_addr,
    sync_threads, thread_x,
};
use core::arch::asm;
use recall_kernel_shared::math::cosine_from_parts;
use recall_kernel_shared::{
    HalfRowsParams, METRIC_COSINE, METRIC_DOT, METRIC_L2, TC_SROW, TC_STAGES, TC_TILE_K, TC_TILE_Q,
    TC_TILE_R, TcGemmParams,
};

/// Bytes of one query tile and of one stage (query tile, then corpus tile) in shared memory.
const A_BYTES: u32 = TC_TILE_Q * TC_SROW * 2;
const STAGE_BYTES: u32 = (TC_TILE_Q + TC_TILE_R) * TC_SROW * 2;

/// A warp's accumulators: 4 m16 tiles x 8 n8 tiles x 4 f32 (as bits).
pub(crate) type Acc = [[[u32; 4]; 8]; 4];

/// Four 8x8 16-bit matrices from shared memory, one row address per lane (`ldmatrix.x4`).
///
/// # Safety
/// `addr` is a 16-byte aligned shared address with 16 readable bytes; all 32 lanes call it together.
#[inline(always)]
unsafe fn ldmatrix_x4(addr: u32) -> [u32; 4] {
    let (a, b, c, d): (u32, u32, u32, u32);
    // SAFETY: caller.
    unsafe {
        asm!(
            "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{{a}, {b}, {c}, {d}}}, [{p}];",
            a = out(reg32) a, b = out(reg32) b, c = out(reg32) c, d = out(reg32) d,
            p = in(reg32) addr,
            options(nostack)
        );
    }
    [a, b, c, d]
}

/// `acc += A (16x16) * B (16x8)` on tensor cores, f32 accumulators as bits.
#[inline(always)]
fn mma<const BF16: bool>(acc: &mut [u32; 4], a: &[u32; 4], b0: u32, b1: u32) {
    // SAFETY: a register-only warp-wide instruction; every lane of the warp executes it together.
    unsafe {
        if BF16 {
            asm!(
                "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {{{c0}, {c1}, {c2}, {c3}}}, {{{a0}, {a1}, {a2}, {a3}}}, {{{b0}, {b1}}}, {{{c0}, {c1}, {c2}, {c3}}};",
                c0 = inout(reg32) acc[0], c1 = inout(reg32) acc[1], c2 = inout(reg32) acc[2], c3 = inout(reg32) acc[3],
                a0 = in(reg32) a[0], a1 = in(reg32) a[1], a2 = in(reg32) a[2], a3 = in(reg32) a[3],
                b0 = in(reg32) b0, b1 = in(reg32) b1,
                options(pure, nomem, nostack)
            );
        } else {
            asm!(
                "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {{{c0}, {c1}, {c2}, {c3}}}, {{{a0}, {a1}, {a2}, {a3}}}, {{{b0}, {b1}}}, {{{c0}, {c1}, {c2}, {c3}}};",
                c0 = inout(reg32) acc[0], c1 = inout(reg32) acc[1], c2 = inout(reg32) acc[2], c3 = inout(reg32) acc[3],
                a0 = in(reg32) a[0], a1 = in(reg32) a[1], a2 = in(reg32) a[2], a3 = in(reg32) a[3],
                b0 = in(reg32) b0, b1 = in(reg32) b1,
                options(pure, nomem, nostack)
            );
        }
    }
}

/// Queue the copies of one `ROWS` x 32 operand tile (rows `r0 ..`, columns `k0 ..`) into shared `dst`.
///
/// # Safety
/// `x` holds `n * ld` 16-bit values, `ld` a multiple of 32 and `k0 + 32 <= ld`; `dst` is a tile of `ROWS`
/// rows of this block's shared memory; `ROWS` a multiple of 64.
#[inline(always)]
unsafe fn load_tile<const ROWS: u32>(dst: u32, x: u64, n: u32, ld: u32, r0: u32, k0: u32) {
    let t = thread_x();
    let mut i = 0;
    while i < ROWS / 64 {
        let c = t + 256 * i;
        let (row, piece) = (c / 4, c % 4);
        let r = r0 + row;
        let (src, bytes) = if r < n {
            (
                x + 2 * (u64::from(r) * u64::from(ld) + u64::from(k0 + 8 * piece)),
                16,
            )
        } else {
            (x, 0)
        };
        // SAFETY: row < ROWS and piece < 4: inside the tile; the source is in bounds when copied.
        unsafe { cp_async16(dst + row * TC_SROW * 2 + piece * 16, src, bytes) };
        i += 1;
    }
}

/// What the main loop hands each row tile to: `begin` before its first step (the tile's first row), `end`
/// after its last, with the accumulators. Both are called from block-uniform control flow.
/// `A` is the accumulator layout of the main loop ([`Acc`] here, `wgmma::Acc90` on sm_90a).
pub(crate) trait Epilogue<A> {
    fn begin(&mut self, r0: u32);
    fn end(&mut self, r0: u32, acc: &A);
}

/// The operands of one block's main loop.
pub(crate) struct Operands {
    pub(crate) queries: u64,
    pub(crate) corpus: u64,
    pub(crate) n_queries: u32,
    pub(crate) n_rows: u32,
    pub(crate) ld: u32,
    /// The block's first query.
    pub(crate) q0: u32,
}

/// The main loop (see the module documentation): the row tiles `tile0, tile0 + tile_step, ..` (`n_tiles` of
/// them) against the block's queries, each tile's accumulators handed to `e.end`. Block-uniform.
///
/// # Safety
/// `smem` is the shared address of `TC_PIPE_BYTES` bytes of this block's shared memory, 16-byte aligned;
/// the operands hold `n_queries * ld` and `n_rows * ld` 16-bit values, `ld` a positive multiple of 32;
/// 256 threads; sm_80 or newer.
#[inline(always)]
pub(crate) unsafe fn stream<const BF16: bool, E: Epilogue<Acc>>(
    o: &Operands,
    smem: u32,
    tile0: u32,
    tile_step: u32,
    n_tiles: u32,
    e: &mut E,
) {
    let lane = thread_x() % 32;
    let warp = thread_x() / 32;
    let (wm, wn) = (warp % 2, warp / 2);
    let steps = o.ld / TC_TILE_K;
    let total = n_tiles * steps;
    let r0_of = |g: u32| (tile0 + (g / steps) * tile_step) * TC_TILE_R;
    // Queue the copies of global step g (row tile g / steps, column step g % steps) into its stage.
    let load = |g: u32| {
        let stage = smem + (g % TC_STAGES) * STAGE_BYTES;
        let k0 = (g % steps) * TC_TILE_K;
        // SAFETY: k0 + 32 <= ld; the stage is inside the ring.
        unsafe {
            load_tile::<TC_TILE_Q>(stage, o.queries, o.n_queries, o.ld, o.q0, k0);
            load_tile::<TC_TILE_R>(stage + A_BYTES, o.corpus, o.n_rows, o.ld, r0_of(g), k0);
        }
    };
    // Every thread commits one group per step, empty or not, so the waits below count uniformly.
    let mut g = 0;
    while g + 1 < TC_STAGES {
        if g < total {
            load(g);
        }
        cp_async_commit();
        g += 1;
    }
    let mut acc: Acc = [[[0u32; 4]; 8]; 4];
    let mut g = 0;
    // Block-uniform loop: the barriers are reached by every thread.
    while g < total {
        // Step g's group is complete for this thread; the barrier makes every thread's visible, and tells
        // that every warp is done with step g - 1's stage, which the copies queued next overwrite.
        cp_async_wait::<{ TC_STAGES - 2 }>();
        sync_threads();
        if g + TC_STAGES - 1 < total {
            load(g + TC_STAGES - 1);
        }
        cp_async_commit();
        let ks = g % steps;
        if ks == 0 {
            e.begin(r0_of(g));
        }
        let sa = smem + (g % TC_STAGES) * STAGE_BYTES;
        let sb = sa + A_BYTES;
        unroll!(2, KK: u32 => {
            let mut a = [[0u32; 4]; 4];
            unroll!(4, I: u32 => {
                let row = wm * 64 + I * 16 + lane % 16;
                let col = KK * 16 + (lane / 16) * 8;
                // SAFETY: row < 128, col + 8 <= 32: inside the tile, 16-byte aligned.
                a[I as usize] = unsafe { ldmatrix_x4(sa + (row * TC_SROW + col) * 2) };
            });
            unroll!(4, JP: u32 => {
                let n = wn * 64 + JP * 16 + lane % 8 + 8 * (lane / 16);
                let col = KK * 16 + 8 * ((lane / 8) % 2);
                // SAFETY: n < 256, col + 8 <= 32.
                let b = unsafe { ldmatrix_x4(sb + (n * TC_SROW + col) * 2) };
                unroll!(4, I: u32 => {
                    mma::<BF16>(&mut acc[I as usize][(2 * JP) as usize], &a[I as usize], b[0], b[1]);
                    mma::<BF16>(&mut acc[I as usize][(2 * JP + 1) as usize], &a[I as usize], b[2], b[3]);
                });
            });
        });
        if ks == steps - 1 {
            e.end(r0_of(g), &acc);
            acc = [[[0u32; 4]; 8]; 4];
        }
        g += 1;
    }
    // Only empty groups can be pending; leave none behind.
    cp_async_wait::<0>();
}

/// A fast-mode score from its dot product and the f32 norms (`docs/numerics.md`, "Fast mode"): the one
/// definition both kernels use.
#[inline(always)]
pub(crate) fn score<const METRIC: u32>(dot: f32, nq: f32, nc: f32) -> f32 {
    if METRIC == METRIC_COSINE {
        cosine_from_parts(dot, nq, nc)
    } else if METRIC == METRIC_L2 {
        let d = nq * nq + nc * nc - 2.0 * dot;
        if d > 0.0 { d } else { 0.0 }
    } else {
        dot
    }
}

/// `tc_gemm_*`'s epilogue: every score of the tile to `out[q * n_rows + r]`.
struct ScoresOut<const METRIC: u32> {
    p: TcGemmParams,
    q0: u32,
}

impl<const METRIC: u32> Epilogue<Acc> for ScoresOut<METRIC> {
    #[inline(always)]
    fn begin(&mut self, _r0: u32) {}

    #[inline(always)]
    fn end(&mut self, r0: u32, acc: &Acc) {
        let p = &self.p;
        let lane = thread_x() % 32;
        let warp = thread_x() / 32;
        let (wm, wn) = (warp % 2, warp / 2);
        let g = lane / 4;
        let c = 2 * (lane % 4);
        unroll!(8, J: u32 => {
            let r = r0 + wn * 64 + J * 8 + c;
            let mut nc = [0.0f32; 2];
            if METRIC != METRIC_DOT {
                unroll!(2, E: u32 => {
                    if r + E < p.n_rows {
                        // SAFETY: r + E < n_rows.
                        nc[E as usize] = unsafe { *(p.corpus_norms as *const f32).add((r + E) as usize) };
                    }
                });
            }
            unroll!(4, I: u32 => {
                unroll!(2, H: u32 => {
                    let q = self.q0 + wm * 64 + I * 16 + g + 8 * H;
                    if q < p.n_queries {
                        let nq = if METRIC != METRIC_DOT {
                            // SAFETY: q < n_queries.
                            unsafe { *(p.query_norms as *const f32).add(q as usize) }
                        } else {
                            0.0
                        };
                        let out = (p.out as *mut f32).wrapping_add(q as usize * p.n_rows as usize);
                        unroll!(2, E: u32 => {
                            if r + E < p.n_rows {
                                let dot = f32::from_bits(acc[I as usize][J as usize][(2 * H + E) as usize]);
                                // SAFETY: q < n_queries and r + E < n_rows: inside the output.
                                unsafe {
                                    *out.add((r + E) as usize) =
                                        score::<METRIC>(dot, nq, nc[E as usize])
                                };
                            }
                        });
                    }
                });
            });
        });
    }
}

/// See the module documentation.
///
/// # Safety
/// Grid `(ceil(n_rows / 256), ceil(n_queries / 128))`, 256 threads, `TC_PIPE_BYTES` bytes of dynamic shared
/// memory; buffers as [`TcGemmParams`] documents; sm_80 or newer.
#[inline(always)]
unsafe fn tc_gemm<const METRIC: u32, const BF16: bool>(p: &TcGemmParams) {
    let smem = shared_addr(dynamic_shared_f32());
    let q0 = block_y() * TC_TILE_Q;
    let o = Operands {
        queries: p.queries,
        corpus: p.corpus,
        n_queries: p.n_queries,
        n_rows: p.n_rows,
        ld: p.ld,
        q0,
    };
    let mut e = ScoresOut::<METRIC> { p: *p, q0 };
    // SAFETY: forwarded launcher contract; one row tile per block.
    unsafe { stream::<BF16, _>(&o, smem, block_x(), 1, 1, &mut e) };
}

kernels! {
    TcGemmParams;
    tc_gemm_f16_dot => tc_gemm::<METRIC_DOT, false>;
    tc_gemm_f16_cosine => tc_gemm::<METRIC_COSINE, false>;
    tc_gemm_f16_l2 => tc_gemm::<METRIC_L2, false>;
    tc_gemm_bf16_dot => tc_gemm::<METRIC_DOT, true>;
    tc_gemm_bf16_cosine => tc_gemm::<METRIC_COSINE, true>;
    tc_gemm_bf16_l2 => tc_gemm::<METRIC_L2, true>;
}

/// f32 to f16 or bf16, round to nearest even.
#[inline(always)]
fn round_half(x: f32, bf16: bool) -> u16 {
    let h: u16;
    // SAFETY: register-only conversions.
    unsafe {
        if bf16 {
            asm!("cvt.rn.bf16.f32 {h}, {x};", h = out(reg16) h, x = in(reg32) x, options(pure, nomem, nostack));
        } else {
            asm!("cvt.rn.f16.f32 {h}, {x};", h = out(reg16) h, x = in(reg32) x, options(pure, nomem, nostack));
        }
    }
    h
}

/// `dst[r * ld + c]` = row `r`, column `c` of `src` rounded to 16 bits (or copied, when `src` already
/// holds 16-bit values), and 0 for `dim <= c < ld`. One thread per output value, grid-stride.
///
/// # Safety
/// Buffers as [`HalfRowsParams`] documents; any grid of 256-thread blocks.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn tc_to_half_rows(p: HalfRowsParams) {
    let total = u64::from(p.n_rows) * u64::from(p.ld);
    let stride = u64::from(crate::util::grid_dim_x()) * 256;
    let mut i = u64::from(block_x()) * 256 + u64::from(thread_x());
    while i < total {
        let (r, c) = (i / u64::from(p.ld), i % u64::from(p.ld));
        let v = if c < u64::from(p.dim) {
            let at = (r * u64::from(p.dim) + c) as usize;
            if p.src_f32 != 0 {
                // SAFETY: r < n_rows and c < dim.
                round_half(unsafe { *(p.src as *const f32).add(at) }, p.bf16 != 0)
            } else {
                // SAFETY: as above.
                unsafe { *(p.src as *const u16).add(at) }
            }
        } else {
            0
        };
        // SAFETY: i < n_rows * ld.
        unsafe { *(p.dst as *mut u16).add(i as usize) = v };
        i += stride;
    }
}
