//! Fast mode on Hopper (sm_90a): `tensor.rs`'s tiles on warpgroup MMA (`wgmma.mma_async`), for the
//! `sm90a_gemm_*` and `sm90a_knn_*` kernels. `cargo xtask build-kernels` puts them in an image of their own
//! (`sm_90a`: PTX ISA 8.0, `ptxas -arch=sm_90a`), which the launcher loads beside the sm_90 image on devices
//! of compute capability 9.0 exactly; everywhere else fast mode runs `tc_*`.
//!
//! A block of 256 threads (two warpgroups) computes tiles of 128 queries x 256 corpus rows, like `tc_*`:
//! warpgroup `wg` owns queries `64 wg ..` against all 256 rows, one `m64n256k16` per 16 columns, 128 f32
//! accumulators per thread. Operand tiles of 64 columns (128 bytes per row) are copied global -> shared with
//! `cp.async` into a ring of [`H_STAGES`] stages, stored in the 128-byte swizzle that `wgmma` reads through
//! a matrix descriptor: row `r`'s 16-byte piece `p` lands at `r * 128 + ((p ^ (r % 8)) * 16)` from a
//! 1,024-byte aligned tile, so the eight rows of each 1,024-byte group spread over all 32 banks. Each step
//! issues the warpgroup's four `wgmma`s (columns `0, 16, 32, 48` of the stage: the descriptor's start
//! advanced by 32 bytes each) and waits for them; the copies of the next two steps are in flight meanwhile.
//!
//! Accumulator `acc[4 j + 2 h + e]` of thread `t` holds query `64 wg + 16 (t / 32 % 4) + (t % 32) / 4 + 8 h`
//! against row `8 j + 2 (t % 4) + e` of the tile (the `wgmma` D fragment of `m64nNk16`).
//!
//! The scores are not the bits of `tc_*`: the tensor cores may sum each 16-column product in another order.
//! Both are fast mode, within the bound of `docs/numerics.md`; within one image `sm90a_knn_*` gives exactly
//! the lists of `select_topk` over `sm90a_gemm_*`'s scores (the same main loop and score function).

use crate::tc_knn::Lists;
use crate::tensor::{Epilogue, Operands, score};
use crate::util::{
    block_x, block_y, cp_async_commit, cp_async_wait, cp_async16, dynamic_shared_f32, shared_addr,
    sync_threads, thread_x, warp_uniform,
};
use core::arch::asm;
use recall_kernel_shared::{
    H_KNN_CAP, H_PIPE_BYTES, H_STAGES, H_TILE_K, METRIC_COSINE, METRIC_DOT, METRIC_L2, TC_TILE_Q,
    TC_TILE_R, TcGemmParams, TcKnnParams,
};

/// Bytes of one operand row in a stage (64 16-bit columns: one row of the 128-byte swizzle).
const ROW_BYTES: u32 = H_TILE_K * 2;
const A_BYTES: u32 = TC_TILE_Q * ROW_BYTES;
const STAGE_BYTES: u32 = (TC_TILE_Q + TC_TILE_R) * ROW_BYTES;
const CAP: usize = H_KNN_CAP as usize;

/// A thread's accumulators (f32 as bits), in the `wgmma` D fragment order (module documentation).
pub(crate) type Acc90 = [u32; 128];

/// The shared-memory matrix descriptor of a K-major operand tile at shared address `addr` (1,024-byte
/// aligned, or advanced by a multiple of 32 bytes inside the first 128-byte row for a later 16-column
/// slice) in the 128-byte swizzle: start address >> 4 (bits 0-13), leading offset 1 (unused for this
/// layout, bits 16-29), stride 1,024 bytes between 8-row groups >> 4 (bits 32-45), swizzle mode 1 =
/// 128 bytes (bits 62-63).
#[inline(always)]
fn descriptor(addr: u32) -> u64 {
    (u64::from(addr & 0x3_ffff) >> 4) | (1 << 16) | (64 << 32) | (1 << 62)
}

macro_rules! d128 {
    () => {
        "{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}, {8}, {9}, {10}, {11}, {12}, {13}, {14}, {15}, {16}, {17}, {18}, {19}, {20}, {21}, {22}, {23}, {24}, {25}, {26}, {27}, {28}, {29}, {30}, {31}, {32}, {33}, {34}, {35}, {36}, {37}, {38}, {39}, {40}, {41}, {42}, {43}, {44}, {45}, {46}, {47}, {48}, {49}, {50}, {51}, {52}, {53}, {54}, {55}, {56}, {57}, {58}, {59}, {60}, {61}, {62}, {63}, {64}, {65}, {66}, {67}, {68}, {69}, {70}, {71}, {72}, {73}, {74}, {75}, {76}, {77}, {78}, {79}, {80}, {81}, {82}, {83}, {84}, {85}, {86}, {87}, {88}, {89}, {90}, {91}, {92}, {93}, {94}, {95}, {96}, {97}, {98}, {99}, {100}, {101}, {102}, {103}, {104}, {105}, {106}, {107}, {108}, {109}, {110}, {111}, {112}, {113}, {114}, {115}, {116}, {117}, {118}, {119}, {120}, {121}, {122}, {123}, {124}, {125}, {126}, {127}"
    };
}

/// One step of a warpgroup: `acc += A (64 x 64) * B^T (256 x 64)` by four `wgmma.m64n256k16`, `$ty` f16 or
/// bf16, `$a` and `$b` the descriptors of the four 16-column slices; waits for them before it returns.
macro_rules! wgmma_step {
    ($ty:literal, $acc:ident, $a:ident, $b:ident) => {
        asm!(
            "{{",
            ".reg .pred p;",
            "setp.ne.b32 p, {one}, 0;",
            "wgmma.fence.sync.aligned;",
            concat!("wgmma.mma_async.sync.aligned.m64n256k16.f32.", $ty, ".", $ty, " {{", d128!(), "}}, {a0}, {b0}, p, 1, 1, 0, 0;"),
            concat!("wgmma.mma_async.sync.aligned.m64n256k16.f32.", $ty, ".", $ty, " {{", d128!(), "}}, {a1}, {b1}, p, 1, 1, 0, 0;"),
            concat!("wgmma.mma_async.sync.aligned.m64n256k16.f32.", $ty, ".", $ty, " {{", d128!(), "}}, {a2}, {b2}, p, 1, 1, 0, 0;"),
            concat!("wgmma.mma_async.sync.aligned.m64n256k16.f32.", $ty, ".", $ty, " {{", d128!(), "}}, {a3}, {b3}, p, 1, 1, 0, 0;"),
            "wgmma.commit_group.sync.aligned;",
            "wgmma.wait_group.sync.aligned 0;",
            "}}",
            inout(reg32) $acc[0],
            inout(reg32) $acc[1],
            inout(reg32) $acc[2],
            inout(reg32) $acc[3],
            inout(reg32) $acc[4],
            inout(reg32) $acc[5],
            inout(reg32) $acc[6],
            inout(reg32) $acc[7],
            inout(reg32) $acc[8],
            inout(reg32) $acc[9],
            inout(reg32) $acc[10],
            inout(reg32) $acc[11],
            inout(reg32) $acc[12],
            inout(reg32) $acc[13],
            inout(reg32) $acc[14],
            inout(reg32) $acc[15],
            inout(reg32) $acc[16],
            inout(reg32) $acc[17],
            inout(reg32) $acc[18],
            inout(reg32) $acc[19],
            inout(reg32) $acc[20],
            inout(reg32) $acc[21],
            inout(reg32) $acc[22],
            inout(reg32) $acc[23],
            inout(reg32) $acc[24],
            inout(reg32) $acc[25],
            inout(reg32) $acc[26],
            inout(reg32) $acc[27],
            inout(reg32) $acc[28],
            inout(reg32) $acc[29],
            inout(reg32) $acc[30],
            inout(reg32) $acc[31],
            inout(reg32) $acc[32],
            inout(reg32) $acc[33],
            inout(reg32) $acc[34],
            inout(reg32) $acc[35],
            inout(reg32) $acc[36],
            inout(reg32) $acc[37],
            inout(reg32) $acc[38],
            inout(reg32) $acc[39],
            inout(reg32) $acc[40],
            inout(reg32) $acc[41],
            inout(reg32) $acc[42],
            inout(reg32) $acc[43],
            inout(reg32) $acc[44],
            inout(reg32) $acc[45],
            inout(reg32) $acc[46],
            inout(reg32) $acc[47],
            inout(reg32) $acc[48],
            inout(reg32) $acc[49],
            inout(reg32) $acc[50],
            inout(reg32) $acc[51],
            inout(reg32) $acc[52],
            inout(reg32) $acc[53],
            inout(reg32) $acc[54],
            inout(reg32) $acc[55],
            inout(reg32) $acc[56],
            inout(reg32) $acc[57],
            inout(reg32) $acc[58],
            inout(reg32) $acc[59],
            inout(reg32) $acc[60],
            inout(reg32) $acc[61],
            inout(reg32) $acc[62],
            inout(reg32) $acc[63],
            inout(reg32) $acc[64],
            inout(reg32) $acc[65],
            inout(reg32) $acc[66],
            inout(reg32) $acc[67],
            inout(reg32) $acc[68],
            inout(reg32) $acc[69],
            inout(reg32) $acc[70],
            inout(reg32) $acc[71],
            inout(reg32) $acc[72],
            inout(reg32) $acc[73],
            inout(reg32) $acc[74],
            inout(reg32) $acc[75],
            inout(reg32) $acc[76],
            inout(reg32) $acc[77],
            inout(reg32) $acc[78],
            inout(reg32) $acc[79],
            inout(reg32) $acc[80],
            inout(reg32) $acc[81],
            inout(reg32) $acc[82],
            inout(reg32) $acc[83],
            inout(reg32) $acc[84],
            inout(reg32) $acc[85],
            inout(reg32) $acc[86],
            inout(reg32) $acc[87],
            inout(reg32) $acc[88],
            inout(reg32) $acc[89],
            inout(reg32) $acc[90],
            inout(reg32) $acc[91],
            inout(reg32) $acc[92],
            inout(reg32) $acc[93],
            inout(reg32) $acc[94],
            inout(reg32) $acc[95],
            inout(reg32) $acc[96],
            inout(reg32) $acc[97],
            inout(reg32) $acc[98],
            inout(reg32) $acc[99],
            inout(reg32) $acc[100],
            inout(reg32) $acc[101],
            inout(reg32) $acc[102],
            inout(reg32) $acc[103],
            inout(reg32) $acc[104],
            inout(reg32) $acc[105],
            inout(reg32) $acc[106],
            inout(reg32) $acc[107],
            inout(reg32) $acc[108],
            inout(reg32) $acc[109],
            inout(reg32) $acc[110],
            inout(reg32) $acc[111],
            inout(reg32) $acc[112],
            inout(reg32) $acc[113],
            inout(reg32) $acc[114],
            inout(reg32) $acc[115],
            inout(reg32) $acc[116],
            inout(reg32) $acc[117],
            inout(reg32) $acc[118],
            inout(reg32) $acc[119],
            inout(reg32) $acc[120],
            inout(reg32) $acc[121],
            inout(reg32) $acc[122],
            inout(reg32) $acc[123],
            inout(reg32) $acc[124],
            inout(reg32) $acc[125],
            inout(reg32) $acc[126],
            inout(reg32) $acc[127],
            a0 = in(reg64) $a[0], a1 = in(reg64) $a[1], a2 = in(reg64) $a[2], a3 = in(reg64) $a[3],
            b0 = in(reg64) $b[0], b1 = in(reg64) $b[1], b2 = in(reg64) $b[2], b3 = in(reg64) $b[3],
            one = in(reg32) 1u32,
            options(nostack)
        )
    };
}

/// `acc += A * B^T` over one stage (see [`wgmma_step`]) for the warpgroup's A tile at `sa` and the B tile at
/// `sb` (shared addresses, 1,024-byte aligned).
///
/// # Safety
/// The tiles hold 64 (A) and 256 (B) rows of this stage, written in the swizzled layout and made visible to
/// the async proxy before a block barrier; all 128 threads of the warpgroup call it together; sm_90a.
#[inline(always)]
unsafe fn mma_stage<const BF16: bool>(acc: &mut Acc90, sa: u32, sb: u32) {
    let a = [
        descriptor(sa),
        descriptor(sa + 32),
        descriptor(sa + 64),
        descriptor(sa + 96),
    ];
    let b = [
        descriptor(sb),
        descriptor(sb + 32),
        descriptor(sb + 64),
        descriptor(sb + 96),
    ];
    // SAFETY: caller; the instruction reads only the two tiles the descriptors name and writes only `acc`.
    unsafe {
        if BF16 {
            wgmma_step!("bf16", acc, a, b);
        } else {
            wgmma_step!("f16", acc, a, b);
        }
    }
}

/// Make this thread's completed shared-memory writes (its `cp.async` copies) visible to the async proxy
/// that `wgmma` reads through; a block barrier after it publishes them to the other threads' `wgmma`s.
#[inline(always)]
fn fence_proxy_async() {
    // SAFETY: a fence; no operands.
    unsafe { asm!("fence.proxy.async.shared::cta;", options(nostack)) }
}

/// Queue the copies of one `ROWS` x 64 operand tile (rows `r0 ..`, columns `k0 ..`) into shared `dst` in the
/// 128-byte swizzle; rows past `n` and columns past `ld` are zeros.
///
/// # Safety
/// `x` holds `n * ld` 16-bit values, `ld` a multiple of 8; `dst` is a 1,024-byte aligned tile of `ROWS`
/// rows of 128 bytes of this block's shared memory; `ROWS` a multiple of 32; 256 threads.
#[inline(always)]
unsafe fn load_tile<const ROWS: u32>(dst: u32, x: u64, n: u32, ld: u32, r0: u32, k0: u32) {
    let t = thread_x();
    let mut i = 0;
    while i < ROWS / 32 {
        let c = t + 256 * i;
        let (row, piece) = (c / 8, c % 8);
        let (r, col) = (r0 + row, k0 + 8 * piece);
        let (src, bytes) = if r < n && col < ld {
            (x + 2 * (u64::from(r) * u64::from(ld) + u64::from(col)), 16)
        } else {
            (x, 0)
        };
        // SAFETY: row < ROWS and piece < 8: inside the tile; the source is in bounds when copied.
        unsafe {
            cp_async16(
                dst + row * ROW_BYTES + ((piece ^ (row % 8)) * 16),
                src,
                bytes,
            )
        };
        i += 1;
    }
}

/// The main loop of `tensor.rs`'s `stream` on `wgmma`: the row tiles `tile0, tile0 + tile_step, ..`
/// (`n_tiles` of them) against the block's queries, each tile's accumulators handed to `e.end`.
/// Block-uniform.
///
/// # Safety
/// `smem` is the shared address of `H_PIPE_BYTES` bytes of this block's shared memory, 16-byte aligned;
/// the operands hold `n_queries * ld` and `n_rows * ld` 16-bit values, `ld` a positive multiple of 32;
/// 256 threads; sm_90a.
#[inline(always)]
unsafe fn stream90<const BF16: bool, E: Epilogue<Acc90>>(
    o: &Operands,
    smem: u32,
    tile0: u32,
    tile_step: u32,
    n_tiles: u32,
    e: &mut E,
) {
    let ring = (smem + 1023) & !1023;
    // Uniform per warp (and known so): the descriptors built from it stay in uniform registers.
    let wg = warp_uniform(thread_x() / 128);
    let steps = o.ld.div_ceil(H_TILE_K);
    let total = n_tiles * steps;
    let r0_of = |g: u32| (tile0 + (g / steps) * tile_step) * TC_TILE_R;
    let load = |g: u32| {
        let stage = ring + (g % H_STAGES) * STAGE_BYTES;
        let k0 = (g % steps) * H_TILE_K;
        // SAFETY: the stage is inside the ring (aligned, H_PIPE_BYTES holds the slack); k0 < ld.
        unsafe {
            load_tile::<TC_TILE_Q>(stage, o.queries, o.n_queries, o.ld, o.q0, k0);
            load_tile::<TC_TILE_R>(stage + A_BYTES, o.corpus, o.n_rows, o.ld, r0_of(g), k0);
        }
    };
    // Every thread commits one group per step, empty or not, so the waits below count uniformly.
    let mut g = 0;
    while g + 1 < H_STAGES {
        if g < total {
            load(g);
        }
        cp_async_commit();
        g += 1;
    }
    let mut acc: Acc90 = [0u32; 128];
    let mut g = 0;
    // Block-uniform loop: the barriers are reached by every thread.
    while g < total {
        // Step g's group is complete for this thread; the fence hands it to the async proxy and the barrier
        // to every warpgroup, and tells that both finished step g - 1's `wgmma`s (each waits for its own),
        // whose stage the copies queued next overwrite.
        cp_async_wait::<{ H_STAGES - 2 }>();
        fence_proxy_async();
        sync_threads();
        if g + H_STAGES - 1 < total {
            load(g + H_STAGES - 1);
        }
        cp_async_commit();
        let ks = g % steps;
        if ks == 0 {
            e.begin(r0_of(g));
        }
        let sa = ring + (g % H_STAGES) * STAGE_BYTES;
        // SAFETY: the stage's tiles are complete and published (above); both warpgroups reach this together.
        unsafe { mma_stage::<BF16>(&mut acc, sa + wg * 64 * ROW_BYTES, sa + A_BYTES) };
        if ks == steps - 1 {
            e.end(r0_of(g), &acc);
            acc = [0u32; 128];
        }
        g += 1;
    }
    // Only empty groups can be pending; leave none behind.
    cp_async_wait::<0>();
}

/// The tile-local query of this thread's accumulators `acc[4 j + 2 h + e]`, for `h` = 0 (add 8 for `h` = 1).
#[inline(always)]
fn first_query() -> usize {
    let t = thread_x() as usize;
    64 * (t / 128) + 16 * (t / 32 % 4) + (t % 32) / 4
}

/// `sm90a_gemm_*`'s epilogue: every score of the tile to `out[q * n_rows + r]`.
struct ScoresOut90<const METRIC: u32> {
    p: TcGemmParams,
    q0: u32,
}

impl<const METRIC: u32> Epilogue<Acc90> for ScoresOut90<METRIC> {
    #[inline(always)]
    fn begin(&mut self, _r0: u32) {}

    #[inline(always)]
    fn end(&mut self, r0: u32, acc: &Acc90) {
        let p = &self.p;
        let c = 2 * (thread_x() % 4);
        let q = [
            self.q0 + first_query() as u32,
            self.q0 + first_query() as u32 + 8,
        ];
        let mut nq = [0.0f32; 2];
        if METRIC != METRIC_DOT {
            unroll!(2, H: usize => {
                if q[H] < p.n_queries {
                    // SAFETY: q < n_queries.
                    nq[H] = unsafe { *(p.query_norms as *const f32).add(q[H] as usize) };
                }
            });
        }
        unroll!(4, JH: u32 => {
            unroll!(8, JL: u32 => {
                let j = JH * 8 + JL;
                unroll!(2, E: u32 => {
                    let r = r0 + 8 * j + c + E;
                    if r < p.n_rows {
                        let nc = if METRIC != METRIC_DOT {
                            // SAFETY: r < n_rows.
                            unsafe { *(p.corpus_norms as *const f32).add(r as usize) }
                        } else {
                            0.0
                        };
                        unroll!(2, H: usize => {
                            if q[H] < p.n_queries {
                                let dot = f32::from_bits(acc[(4 * j + 2 * H as u32 + E) as usize]);
                                let at = q[H] as usize * p.n_rows as usize + r as usize;
                                // SAFETY: q < n_queries and r < n_rows: inside the output.
                                unsafe { *(p.out as *mut f32).add(at) = score::<METRIC>(dot, nq[H], nc) };
                            }
                        });
                    }
                });
            });
        });
    }
}

/// `tc_gemm_*` on `wgmma`.
///
/// # Safety
/// Grid `(ceil(n_rows / 256), ceil(n_queries / 128))`, 256 threads, `H_PIPE_BYTES` bytes of dynamic shared
/// memory; buffers as [`TcGemmParams`] documents; sm_90a.
#[inline(always)]
unsafe fn sm90a_gemm<const METRIC: u32, const BF16: bool>(p: &TcGemmParams) {
    let q0 = block_y() * TC_TILE_Q;
    let o = Operands {
        queries: p.queries,
        corpus: p.corpus,
        n_queries: p.n_queries,
        n_rows: p.n_rows,
        ld: p.ld,
        q0,
    };
    let mut e = ScoresOut90::<METRIC> { p: *p, q0 };
    // SAFETY: forwarded launcher contract; one row tile per block.
    unsafe {
        stream90::<BF16, _>(
            &o,
            shared_addr(dynamic_shared_f32()),
            block_x(),
            1,
            1,
            &mut e,
        )
    };
}

kernels! {
    TcGemmParams;
    sm90a_gemm_f16_dot => sm90a_gemm::<METRIC_DOT, false>;
    sm90a_gemm_f16_cosine => sm90a_gemm::<METRIC_COSINE, false>;
    sm90a_gemm_f16_l2 => sm90a_gemm::<METRIC_L2, false>;
    sm90a_gemm_bf16_dot => sm90a_gemm::<METRIC_DOT, true>;
    sm90a_gemm_bf16_cosine => sm90a_gemm::<METRIC_COSINE, true>;
    sm90a_gemm_bf16_l2 => sm90a_gemm::<METRIC_L2, true>;
}

impl<const METRIC: u32> Epilogue<Acc90> for Lists<METRIC, CAP> {
    #[inline(always)]
    fn begin(&mut self, r0: u32) {
        self.load_norm(r0);
    }

    #[inline(always)]
    fn end(&mut self, r0: u32, acc: &Acc90) {
        let c = 2 * (thread_x() as usize % 4);
        let ql = [first_query(), first_query() + 8];
        // Bit 2 (2 j + e) + h: accumulator [4 j + 2 h + e] is decided (filtered out, or written).
        let mut done = [0u32; 4];
        self.publish_norms();
        // Block-uniform loop (`merge_round` ends with a block-wide vote).
        loop {
            let mut overflow = false;
            let lim = [self.limit(ql[0]), self.limit(ql[1])];
            unroll!(4, JH: usize => {
                unroll!(8, JL: usize => {
                    let j = JH * 8 + JL;
                    unroll!(2, E: usize => {
                        let rl = 8 * j + c + E;
                        let rq = self.row_quick(rl);
                        unroll!(2, H: usize => {
                            let bit = 2 * (2 * j + E) + H;
                            overflow |= self.consider(
                                ql[H],
                                rl,
                                r0,
                                acc[4 * j + 2 * H + E],
                                rq,
                                lim[H],
                                &mut done[bit / 32],
                                1 << (bit % 32),
                            );
                        });
                    });
                });
            });
            if !self.merge_round(overflow) {
                break;
            }
        }
    }
}

/// `tc_knn_*` on `wgmma` (see `tc_knn.rs`; the lists hold [`H_KNN_CAP`] candidates per query).
///
/// # Safety
/// Grid `(ceil(n_queries / 128), n_splits)` with `n_splits <=` the row tiles, 256 threads,
/// `h_knn_shared_bytes(k)` bytes of dynamic shared memory; buffers as [`TcKnnParams`] documents; `1 <= k
/// <= TC_KNN_K_MAX`; sm_90a.
#[inline(always)]
unsafe fn sm90a_knn<const METRIC: u32, const BF16: bool>(p: &TcKnnParams) {
    let q0 = block_x() * TC_TILE_Q;
    // SAFETY: forwarded launcher contract: the lists follow the ring of H_PIPE_BYTES.
    let mut lists = unsafe { Lists::<METRIC, CAP>::new(p, H_PIPE_BYTES, q0) };
    let tiles = p.n_rows.div_ceil(TC_TILE_R);
    let split = block_y();
    let n_tiles = if split < tiles {
        (tiles - split).div_ceil(p.n_splits)
    } else {
        0
    };
    let o = Operands {
        queries: p.queries,
        corpus: p.corpus,
        n_queries: p.n_queries,
        n_rows: p.n_rows,
        ld: p.ld,
        q0,
    };
    // SAFETY: the ring is the first H_PIPE_BYTES bytes of the dynamic shared memory; forwarded launcher
    // contract for the operands and outputs.
    unsafe {
        stream90::<BF16, _>(
            &o,
            shared_addr(dynamic_shared_f32()),
            split,
            p.n_splits,
            n_tiles,
            &mut lists,
        );
        lists.write_out(p, split);
    }
}

kernels! {
    TcKnnParams;
    sm90a_knn_f16_dot => sm90a_knn::<METRIC_DOT, false>;
    sm90a_knn_f16_cosine => sm90a_knn::<METRIC_COSINE, false>;
    sm90a_knn_f16_l2 => sm90a_knn::<METRIC_L2, false>;
    sm90a_knn_bf16_dot => sm90a_knn::<METRIC_DOT, true>;
    sm90a_knn_bf16_cosine => sm90a_knn::<METRIC_COSINE, true>;
    sm90a_knn_bf16_l2 => sm90a_knn::<METRIC_L2, true>;
}
