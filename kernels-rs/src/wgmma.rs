//! Fast mode on Hopper (sm_90a): `tensor.rs`'s tiles on warpgroup MMA (`wgmma.mma_async`), for the
//! `sm90a_gemm_*` and `sm90a_knn_*` kernels. `cargo xtask build-kernels` puts them in an image of their own
//! (`sm_90a`: PTX ISA 8.3, `ptxas -arch=sm_90a`), which the launcher loads beside the sm_90 image on devices
//! of compute capability 9.0 exactly; everywhere else fast mode runs `tc_*`.
//!
//! A block of 256 threads (two warpgroups) computes tiles of 128 queries x 256 corpus rows, like `tc_*`:
//! warpgroup `wg` owns queries `64 wg ..` against all 256 rows, one `m64n256k16` per 16 columns, 128 f32
//! accumulators per thread. Operand tiles of 32 columns (64 bytes per row) are copied global -> shared with
//! `cp.async` into a ring of [`H_STAGES`] stages, stored in the 64-byte swizzle that `wgmma` reads through
//! a matrix descriptor: row `r`'s 16-byte piece `p` lands at `r * 64 + ((p ^ (r / 2 % 4)) * 16)` from a
//! 1,024-byte aligned tile, so the eight rows of each 512-byte group spread over all 32 banks.
//!
//! Pipeline: each step issues the warpgroup's two `wgmma`s (columns `0` and `16` of the stage: the
//! descriptor's start advanced by 32 bytes) and leaves them running while it waits only for the previous
//! step's, then queues the copies of the step [`LEAD`] ahead, into the stage of step `g - 2`, which both
//! warpgroups had finished before the barrier that opened step `g`. So the tensor cores work through the
//! barrier and the copies; a tile's last step waits for all before the epilogue reads the accumulators.
//!
//! Accumulator `acc[4 j + 2 h + e]` of thread `t` holds query `64 wg + 16 (t / 32 % 4) + (t % 32) / 4 + 8 h`
//! against row `8 j + 2 (t % 4) + e` of the tile (the `wgmma` D fragment of `m64nNk16`).
//!
//! The epilogue of `sm90a_knn_*` ([`Lists`] of `tc_knn.rs`, merged lazily) tests a thread's pairs eight at a
//! time without a branch (one multiply and one compare each) and takes the per-pair path only for a group
//! where one passed: the branch per pair had cost as many instructions as the main loop, and every warp
//! waited for the slowest at each tile's merge barriers.
//!
//! The scores are not the bits of `tc_*`: the tensor cores may sum each 16-column product in another order.
//! Both are fast mode, within the bound of `docs/numerics.md`; within one image `sm90a_knn_*` gives exactly
//! the lists of `select_topk` over `sm90a_gemm_*`'s scores (the same main loop and score function).

use crate::tc_knn::{Lists, SEED_SLOTS, knn_block, seed_insert};
use crate::tensor::{Epilogue, Operands, score};
use crate::util::{
    block_x, block_y, cp_async_commit, cp_async_wait, cp_async16, cp_async16_l2_256,
    dynamic_shared_f32, fence_mbarrier_init, mbarrier_init, mbarrier_wait, shared_addr,
    sync_threads, thread_x, warp_uniform,
};
use core::arch::asm;
use recall_kernel_shared::{
    H_KNN_BARRIER_BYTES, H_KNN_CAP, H_PIPE_BYTES, H_STAGES, H_TILE_K, METRIC_COSINE, METRIC_DOT,
    METRIC_L2, TC_TILE_Q, TC_TILE_R, TcGemmParams, TcKnnParams, h_knn_shared_bytes,
};

/// Bytes of one operand row in a stage (32 16-bit columns: one row of the 64-byte swizzle).
const ROW_BYTES: u32 = H_TILE_K * 2;
const A_BYTES: u32 = TC_TILE_Q * ROW_BYTES;
const STAGE_BYTES: u32 = (TC_TILE_Q + TC_TILE_R) * ROW_BYTES;
const CAP: usize = H_KNN_CAP as usize;
/// 16-byte pieces per operand row, and rows one pass of 256 threads copies.
const PIECES: u32 = ROW_BYTES / 16;
const PASS_ROWS: u32 = 256 / PIECES;
/// Steps the copies run ahead of the MMAs: a stage is refilled two steps after its MMAs were issued.
const LEAD: u32 = H_STAGES - 2;
const _: () = assert!(
    ROW_BYTES == 64 && H_STAGES >= 3,
    "the descriptor and the issue are for 64-byte rows"
);

/// A thread's accumulators (f32 as bits), in the `wgmma` D fragment order (module documentation).
pub(crate) type Acc90 = [u32; 128];

/// The shared-memory matrix descriptor of a K-major operand tile at shared address `addr` (1,024-byte
/// aligned, or advanced by 32 bytes inside the first 64-byte row for the second 16-column slice) in the
/// 64-byte swizzle: start address >> 4 (bits 0-13), leading offset 1 (unused for this layout, bits
/// 16-29), stride 512 bytes between 8-row groups >> 4 (bits 32-45), swizzle mode 2 = 64 bytes (bits
/// 62-63).
#[inline(always)]
fn descriptor(addr: u32) -> u64 {
    (u64::from(addr & 0x3_ffff) >> 4) | (1 << 16) | (32 << 32) | (2 << 62)
}

macro_rules! d128 {
    () => {
        "{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}, {8}, {9}, {10}, {11}, {12}, {13}, {14}, {15}, {16}, {17}, {18}, {19}, {20}, {21}, {22}, {23}, {24}, {25}, {26}, {27}, {28}, {29}, {30}, {31}, {32}, {33}, {34}, {35}, {36}, {37}, {38}, {39}, {40}, {41}, {42}, {43}, {44}, {45}, {46}, {47}, {48}, {49}, {50}, {51}, {52}, {53}, {54}, {55}, {56}, {57}, {58}, {59}, {60}, {61}, {62}, {63}, {64}, {65}, {66}, {67}, {68}, {69}, {70}, {71}, {72}, {73}, {74}, {75}, {76}, {77}, {78}, {79}, {80}, {81}, {82}, {83}, {84}, {85}, {86}, {87}, {88}, {89}, {90}, {91}, {92}, {93}, {94}, {95}, {96}, {97}, {98}, {99}, {100}, {101}, {102}, {103}, {104}, {105}, {106}, {107}, {108}, {109}, {110}, {111}, {112}, {113}, {114}, {115}, {116}, {117}, {118}, {119}, {120}, {121}, {122}, {123}, {124}, {125}, {126}, {127}"
    };
}

/// `asm!` with the 128 accumulators of `$acc` as its operands `{0}` .. `{127}` (read and written), then the
/// template lines and the further operands given.
macro_rules! asm_acc {
    ($acc:ident; [$($line:expr),* $(,)?]; $($rest:tt)*) => {
        asm!(
            $($line,)*
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
            $($rest)*
        )
    };
}

/// Start one step of a warpgroup: `acc += A (64 x 32) * B^T (256 x 32)` by two `wgmma.m64n256k16` (`$ty`
/// f16 or bf16; `$a` and `$b` the descriptors of the two 16-column slices; `$add` 0 makes it
/// `acc = A * B^T`, the first step of a tile), committed as one group. The
/// accumulators are the MMAs' until a wait ([`wait_mma`]) covers the group: nothing may read or write them
/// in between (`ptxas` would wait for the group first).
macro_rules! wgmma_issue {
    ($ty:literal, $acc:ident, $a:ident, $b:ident, $add:ident) => {
        asm_acc!($acc; [
            "{{",
            ".reg .pred p, q;",
            "setp.ne.b32 p, {first}, 0;",
            "setp.ne.b32 q, {one}, 0;",
            "wgmma.fence.sync.aligned;",
            concat!("wgmma.mma_async.sync.aligned.m64n256k16.f32.", $ty, ".", $ty, " {{", d128!(), "}}, {a0}, {b0}, p, 1, 1, 0, 0;"),
            concat!("wgmma.mma_async.sync.aligned.m64n256k16.f32.", $ty, ".", $ty, " {{", d128!(), "}}, {a1}, {b1}, q, 1, 1, 0, 0;"),
            "wgmma.commit_group.sync.aligned;",
            "}}",
        ];
            a0 = in(reg64) $a[0], a1 = in(reg64) $a[1],
            b0 = in(reg64) $b[0], b1 = in(reg64) $b[1],
            first = in(reg32) $add,
            one = in(reg32) 1u32,
            options(nostack)
        )
    };
}

/// Start `acc += A * B^T` (`acc = A * B^T` when `first`) over one stage (see [`wgmma_issue`]) for the
/// warpgroup's A tile and the B tile whose [`descriptor`]s are `da` and `db`. [`wait_mma`] ends it.
///
/// # Safety
/// The tiles hold 64 (A) and 256 (B) rows of this stage, written in the swizzled layout and made visible to
/// the async proxy before a block barrier, and stay unchanged until [`wait_mma`]; all 128 threads of the
/// warpgroup call it together; sm_90a.
#[inline(always)]
unsafe fn start_mma<const BF16: bool>(acc: &mut Acc90, da: u64, db: u64, first: bool) {
    // The second 16-column slice starts 32 bytes on: 2 in the descriptor's address field.
    let a = [da, da + 2];
    let b = [db, db + 2];
    // SAFETY: caller; the instructions read only the two tiles the descriptors name and write only `acc`.
    unsafe {
        let add = u32::from(!first);
        if BF16 {
            wgmma_issue!("bf16", acc, a, b, add);
        } else {
            wgmma_issue!("f16", acc, a, b, add);
        }
    }
}

/// Wait until at most `N` of this warpgroup's MMA groups are running (`N = 0`: `acc` holds every result).
#[inline(always)]
fn wait_mma<const N: u32>(acc: &mut Acc90) {
    // SAFETY: waits for this warpgroup's own MMA groups; the accumulators are named so that no access to
    // them moves above the wait. The comment names them for the template.
    unsafe {
        asm_acc!(acc; [concat!("wgmma.wait_group.sync.aligned {n}; // ", d128!())]; n = const N, options(nostack));
    }
}

/// Make this thread's completed shared-memory writes (its `cp.async` copies) visible to the async proxy
/// that `wgmma` reads through; a block barrier after it publishes them to the other threads' `wgmma`s.
#[inline(always)]
fn fence_proxy_async() {
    // SAFETY: a fence; no operands.
    unsafe { asm!("fence.proxy.async.shared::cta;", options(nostack)) }
}

/// How the main loop's operand tiles reach the ring, one step (a query tile and a row tile of 32 columns) at a
/// time, in the order the steps run: `cp.async` by every thread ([`Loader`], `sm90a_gemm_*`) or the tensor
/// memory accelerator driven by one thread ([`TmaLoader`], `sm90a_knn_*`).
trait Copies {
    /// Queue the copies of the next step (if any).
    ///
    /// # Safety
    /// As [`stream90`]; no `wgmma` in flight reads the stage the next step goes to.
    unsafe fn issue(&mut self);
    /// Wait until the oldest step queued and not yet taken is in shared memory, visible to the async proxy
    /// once the step's block barrier has passed.
    fn ready(&mut self);
    /// After the last step: leave no copy pending.
    fn finish(&mut self);
}

/// Where the copies are: the next step to queue (its column step `ks` of `steps`, its row tile's first row
/// `r0`, its stage), the steps left, and the rows from one of the block's row tiles to its next.
struct Cursor {
    steps: u32,
    ks: u32,
    r0: u32,
    stage: u32,
    left: u32,
    r0_step: u32,
}

impl Cursor {
    /// The steps of the row tiles `tile0, tile0 + tile_step, ..` (`n_tiles` of them), `ld` columns each.
    #[inline(always)]
    fn new(ld: u32, tile0: u32, tile_step: u32, n_tiles: u32) -> Cursor {
        let steps = ld.div_ceil(H_TILE_K);
        Cursor {
            steps,
            ks: 0,
            r0: tile0 * TC_TILE_R,
            stage: 0,
            left: n_tiles * steps,
            r0_step: tile_step * TC_TILE_R,
        }
    }

    /// Whether a step is left to queue.
    #[inline(always)]
    fn live(&self) -> bool {
        self.left > 0
    }

    /// On to the next step (past the last, only the stage moves on meaningfully); `true` when it starts
    /// the next row tile.
    #[inline(always)]
    fn advance(&mut self) -> bool {
        let live = self.live();
        self.ks += 1;
        let next_tile = self.ks == self.steps;
        if next_tile {
            self.ks = 0;
            self.r0 += self.r0_step;
        }
        self.stage = if self.stage + 1 == H_STAGES {
            0
        } else {
            self.stage + 1
        };
        self.left -= u32::from(live);
        next_tile
    }
}

/// `cp.async` copies: thread `t` copies 16-byte piece `t % 4` of rows `t / 4 + 64 i` of both tiles, so its
/// shared offsets (`(t / 4 + 64 i) * 64 + ((t % 4) ^ (t / 8 % 4)) * 16`: the swizzle) and its source
/// addresses, but for the step's column and row tile, are fixed: a step costs an add and a compare per copy.
struct Loader {
    /// The query operand (the source of the empty copies past the end).
    queries: u64,
    /// Queries: `2 * ((q0 + t / 4) * ld + 8 * (t % 4))` bytes past the operand.
    a_src: u64,
    /// Bit `i`: query row `q0 + t / 4 + 64 i` exists.
    a_rows: u32,
    /// The corpus operand and this thread's `2 * (t / 4 * ld + 8 * (t % 4))` bytes into a row tile.
    corpus: u64,
    /// This thread's first piece in the next step's row tile (`corpus + 2 * ((r0 + t / 4) * ld + 8 * (t % 4))`
    /// bytes), and the bytes from one of the block's row tiles to its next.
    b_tile: u64,
    b_step: u64,
    /// Bytes between rows [`PASS_ROWS`] apart.
    stride: u64,
    /// Shared offset of the thread's first piece in a stage, from the ring.
    dst: u32,
    ring: u32,
    col: u32,
    row: u32,
    ld: u32,
    n_rows: u32,
    at: Cursor,
}

impl Loader {
    /// The copies of the row tiles `tile0, tile0 + tile_step, ..` (`n_tiles` of them) against the block's
    /// queries, into the ring at shared address `ring`.
    #[inline(always)]
    fn new(o: &Operands, ring: u32, tile0: u32, tile_step: u32, n_tiles: u32) -> Loader {
        let t = thread_x();
        let (row, col) = (t / PIECES, 8 * (t % PIECES));
        let ld = u64::from(o.ld);
        let mut a_rows = 0;
        unroll!(2, I: u32 => {
            if o.q0 + row + PASS_ROWS * I < o.n_queries {
                a_rows |= 1 << I;
            }
        });
        Loader {
            queries: o.queries,
            a_src: o.queries + 2 * (u64::from(o.q0 + row) * ld + u64::from(col)),
            a_rows,
            corpus: o.corpus,
            b_tile: o.corpus + 2 * ((u64::from(tile0 * TC_TILE_R + row)) * ld + u64::from(col)),
            b_step: 2 * u64::from(tile_step * TC_TILE_R) * ld,
            stride: 2 * u64::from(PASS_ROWS) * ld,
            // The 64-byte swizzle: piece bits 4-5 XOR address bits 7-8 (row / 2 % 4).
            dst: row * ROW_BYTES + ((t % PIECES) ^ (row / 2 % PIECES)) * 16,
            ring,
            col,
            row,
            ld: o.ld,
            n_rows: o.n_rows,
            at: Cursor::new(o.ld, tile0, tile_step, n_tiles),
        }
    }
}

impl Copies for Loader {
    /// Every thread commits one group per call, empty or not, so the waits count uniformly.
    #[inline(always)]
    unsafe fn issue(&mut self) {
        // Without a branch (after the last step, every copy is empty): `ptxas` serialises MMAs whose
        // surroundings branch.
        {
            let k0 = self.at.ks * H_TILE_K;
            let col_ok = self.at.live() && k0 + self.col < self.ld;
            let dst = self.ring + self.at.stage * STAGE_BYTES + self.dst;
            let a = self.a_src + 2 * u64::from(k0);
            unroll!(2, I: u32 => {
                let ok = col_ok && self.a_rows & (1 << I) != 0;
                let src = if ok { a + u64::from(I) * self.stride } else { self.queries };
                // SAFETY: inside the stage; the source row and columns exist when `ok`.
                unsafe { cp_async16(dst + I * PASS_ROWS * ROW_BYTES, src, if ok { 16 } else { 0 }) };
            });
            // Rows of this row tile left from this thread's first: copy i exists when 64 i < rem.
            let rem = self.n_rows.saturating_sub(self.at.r0 + self.row);
            let b = self.b_tile + 2 * u64::from(k0);
            unroll!(4, I: u32 => {
                let ok = col_ok && PASS_ROWS * I < rem;
                let src = if ok { b + u64::from(I) * self.stride } else { self.corpus };
                // SAFETY: as above.
                unsafe { cp_async16_l2_256(dst + A_BYTES + I * PASS_ROWS * ROW_BYTES, src, if ok { 16 } else { 0 }) };
            });
            if self.at.advance() {
                self.b_tile += self.b_step;
            }
        }
        cp_async_commit();
    }

    #[inline(always)]
    fn ready(&mut self) {
        // LEAD groups were queued before the first step and one per step since; the fence hands this
        // thread's completed copies to the async proxy (the step's barrier, to every warpgroup).
        cp_async_wait::<{ LEAD - 1 }>();
        fence_proxy_async();
    }

    #[inline(always)]
    fn finish(&mut self) {
        // Only empty groups can be pending.
        cp_async_wait::<0>();
    }
}

/// TMA copies (`cp.async.bulk.tensor`): thread 0 queues a step as two tile copies through the launch's tensor
/// maps (`TcKnnParams::maps`: the queries' in boxes of 128 rows, the corpus's in boxes of 256, 32 columns, in
/// the 64-byte swizzle; rows past the end read as zeros), completing on the stage's `mbarrier`; every thread
/// waits on that barrier's phase. No per-thread addresses: a step costs the MMA warps a few instructions.
struct TmaLoader {
    /// Generic addresses of the two tensor maps in device memory.
    qmap: u64,
    cmap: u64,
    /// Shared addresses of the stages' barriers and of the ring.
    bars: u32,
    ring: u32,
    q0: u32,
    at: Cursor,
    /// The stage the MMAs take next, and the phase parity its barrier completes with this time.
    next: u32,
    parity: u32,
}

impl TmaLoader {
    /// Set up the barriers (thread 0, then a block barrier) for the row tiles `tile0, tile0 + tile_step, ..`
    /// (`n_tiles` of them) against queries `o.q0 ..`.
    ///
    /// # Safety
    /// `maps` is the device address of two 64-byte aligned tensor maps as [`TmaLoader`] describes, written
    /// before the launch; `bars` the shared address of `8 * H_STAGES` 8-byte aligned bytes that nothing else
    /// uses; block-uniform (256 threads); sm_90a.
    #[inline(always)]
    unsafe fn new(
        maps: u64,
        bars: u32,
        ring: u32,
        o: &Operands,
        tile0: u32,
        tile_step: u32,
        n_tiles: u32,
    ) -> TmaLoader {
        let (qmap, cmap) = (maps, maps + 128);
        if thread_x() == 0 {
            let mut s = 0;
            while s < H_STAGES {
                // SAFETY: inside the barriers; no thread uses them before the block barrier below.
                unsafe { mbarrier_init::<1>(bars + 8 * s) };
                s += 1;
            }
            // The barriers' initialisation before their use by the async proxy.
            fence_mbarrier_init();
            // SAFETY: fences: the maps, written by a host copy before the launch, before the TMA unit reads them.
            unsafe {
                asm!(
                    "fence.proxy.tensormap::generic.acquire.sys [{q}], 128;",
                    "fence.proxy.tensormap::generic.acquire.sys [{c}], 128;",
                    q = in(reg64) qmap,
                    c = in(reg64) cmap,
                    options(nostack)
                );
            }
        }
        sync_threads();
        TmaLoader {
            qmap,
            cmap,
            bars,
            ring,
            q0: o.q0,
            at: Cursor::new(o.ld, tile0, tile_step, n_tiles),
            next: 0,
            parity: 0,
        }
    }
}

impl Copies for TmaLoader {
    #[inline(always)]
    unsafe fn issue(&mut self) {
        // Predicated, not branched around (`ptxas` serialises MMAs whose surroundings branch).
        // Thread 0 queues the copies: read from its register each time rather than kept (a kept flag was
        // spilled in `sm90a_knnm_*`, and reloaded every step).
        let go = u32::from(self.at.live() && thread_x() == 0);
        let k0 = self.at.ks * H_TILE_K;
        let bar = self.bars + 8 * self.at.stage;
        let dst = self.ring + self.at.stage * STAGE_BYTES;
        // SAFETY: the stage is free (caller); the boxes land inside it (A_BYTES of queries, then the rows);
        // the barrier expects exactly the two boxes' bytes (rows past the end count, filled with zeros).
        unsafe {
            asm!(
                "{{",
                ".reg .pred p;",
                ".reg .b64 st;",
                "setp.ne.u32 p, {go}, 0;",
                "@p mbarrier.arrive.expect_tx.shared::cta.b64 st, [{bar}], {bytes};",
                "@p cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [{da}], [{qmap}, {{{k0}, {q0}}}], [{bar}];",
                "@p cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [{db}], [{cmap}, {{{k0}, {r0}}}], [{bar}];",
                "}}",
                go = in(reg32) go,
                bar = in(reg32) bar,
                bytes = const STAGE_BYTES,
                da = in(reg32) dst,
                db = in(reg32) dst + A_BYTES,
                qmap = in(reg64) self.qmap,
                cmap = in(reg64) self.cmap,
                k0 = in(reg32) k0,
                q0 = in(reg32) self.q0,
                r0 = in(reg32) self.at.r0,
                options(nostack)
            );
        }
        self.at.advance();
    }

    #[inline(always)]
    fn ready(&mut self) {
        // SAFETY: an initialised barrier of this block (`TmaLoader::new`).
        unsafe { mbarrier_wait(self.bars + 8 * self.next, self.parity) };
        if self.next + 1 == H_STAGES {
            self.next = 0;
            self.parity ^= 1;
        } else {
            self.next += 1;
        }
    }

    #[inline(always)]
    fn finish(&mut self) {
        // Every queued step was waited for by `ready`.
    }
}

/// The main loop of `tensor.rs`'s `stream` on `wgmma`: the row tiles at `r0, r0 + 256 tile_step, ..`
/// (`n_tiles` of them, the ones `copies` was made for) against the block's queries, each tile's accumulators
/// handed to `e.end`. Block-uniform.
///
/// # Safety
/// The ring at shared address `ring` holds `H_STAGES` stages, 1,024-byte aligned; the operands hold
/// `n_queries * ld` and `n_rows * ld` 16-bit values, `ld` a positive multiple of 32; `copies` fills the
/// ring; 256 threads; sm_90a.
#[inline(always)]
unsafe fn stream90<const BF16: bool, C: Copies, E: Epilogue<Acc90>>(
    o: &Operands,
    ring: u32,
    r0: u32,
    tile_step: u32,
    n_tiles: u32,
    copies: &mut C,
    e: &mut E,
) {
    let t = thread_x();
    // Uniform per warp (and known so): the descriptors built from it stay in uniform registers.
    let wg = warp_uniform(t / 128);
    // The first stage's descriptors: this warpgroup's 64 query rows, and the row tile.
    let (da, db) = (
        descriptor(ring + wg * 64 * ROW_BYTES),
        descriptor(ring + A_BYTES),
    );
    let steps = o.ld.div_ceil(H_TILE_K);
    let mut g = 0;
    while g < LEAD {
        // SAFETY: the ring is empty.
        unsafe { copies.issue() };
        g += 1;
    }
    // Every step's first MMA of a tile overwrites the accumulators, so they need no reset.
    let mut acc: Acc90 = [0u32; 128];
    let (mut r0, mut stage) = (r0, 0);
    // Block-uniform loops without a branch around the MMAs (`ptxas` serialises MMAs in divergent paths):
    // the barriers are reached by every thread.
    let mut tile = 0;
    while tile < n_tiles {
        e.begin(r0);
        let mut ks = 0;
        while ks < steps {
            // Step ks's tiles are in shared memory; the barrier hands them to every warpgroup. Past it, both
            // warpgroups' MMAs of two steps back are done (each waited for them in the step before).
            copies.ready();
            sync_threads();
            // The stage's descriptors: the first stage's, its address field advanced (no carry out of it: the
            // ring lies below 256 KiB of shared addresses).
            let off = u64::from(stage * (STAGE_BYTES >> 4));
            // SAFETY: the stage's tiles are complete and published (above) and no copy writes them before
            // this step's MMAs are done (the copies queued next go to the stage of two steps back); both
            // warpgroups reach this together.
            unsafe { start_mma::<BF16>(&mut acc, da + off, db + off, ks == 0) };
            // This warpgroup's previous step is done; this one runs on under the copies and the next barrier.
            wait_mma::<1>(&mut acc);
            // SAFETY: the copies go to the stage of two steps back (LEAD = H_STAGES - 2), done (above).
            unsafe { copies.issue() };
            stage = if stage + 1 == H_STAGES { 0 } else { stage + 1 };
            ks += 1;
        }
        wait_mma::<0>(&mut acc);
        e.end(r0, &acc);
        r0 += tile_step * TC_TILE_R;
        tile += 1;
    }
    copies.finish();
}

/// The ring's shared address in this block's dynamic shared memory: its start rounded up to 1,024 bytes (the
/// swizzle's pattern repeats every 512; `H_PIPE_BYTES` has the room).
#[inline(always)]
fn ring_addr() -> u32 {
    (shared_addr(dynamic_shared_f32()) + 1023) & !1023
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
    let ring = ring_addr();
    let mut copies = Loader::new(&o, ring, block_x(), 1, 1);
    // SAFETY: forwarded launcher contract; one row tile per block; the ring is inside the H_PIPE_BYTES.
    unsafe { stream90::<BF16, _, _>(&o, ring, block_x() * TC_TILE_R, 1, 1, &mut copies, &mut e) };
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

impl<const METRIC: u32, const MULTI: bool> Epilogue<Acc90> for Lists<METRIC, CAP, MULTI> {
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
        self.publish_tile();
        let mut lim = [self.limit(ql[0]), self.limit(ql[1])];
        // Seed the quick limits of queries whose lists are not full (see `Lists::seed_limit`).
        let mut seed = [f32::NEG_INFINITY; 2];
        if self.seed_needed(&ql, &lim) {
            let mut top = [[f32::NEG_INFINITY; SEED_SLOTS]; 2];
            unroll!(4, JH: usize => {
              unroll!(8, JL: usize => {
                const J: usize = JH * 8 + JL;
                unroll!(2, E: usize => {
                    let rl = 8 * J + c + E;
                    let rq = self.row_quick(rl);
                    let inside = r0 + (rl as u32) < self.n_rows;
                    unroll!(2, H: usize => {
                        let v = Self::quick_value(acc[4 * J + 2 * H + E], rq);
                        seed_insert(&mut top[H], if inside { v } else { f32::NEG_INFINITY });
                    });
                });
              });
            });
            seed = self.seed_limits(&ql, &top);
        }
        // Block-uniform loop (`merge_lazy` ends with a block-wide vote).
        let mut want = self.pending_high;
        loop {
            let mut overflow = false;
            lim = [lim[0].max(seed[0]), lim[1].max(seed[1])];
            // Sixteen chunks of 8 pairs (rows 8 j + c + e of j = 2 ch, 2 ch + 1, both queries): the quick tests
            // of a chunk without a branch, then the per-pair path only where one of them passed (about one
            // pair in four thousand once the lists are full).
            unroll!(16, CH: usize => {
                let mut any = false;
                let mut rq = [[0.0f32; 2]; 2];
                unroll!(2, JJ: usize => {
                    let j = 2 * CH + JJ;
                    rq[JJ] = self.row_quick_pair(8 * j + c);
                    unroll!(2, E: usize => {
                        unroll!(2, H: usize => {
                            any |= Self::might_pass(acc[4 * j + 2 * H + E], rq[JJ][E], lim[H]);
                        });
                    });
                });
                if any {
                    unroll!(2, JJ: usize => {
                        let j = 2 * CH + JJ;
                        unroll!(2, E: usize => {
                            let rl = 8 * j + c + E;
                            unroll!(2, H: usize => {
                                let bit = 2 * (2 * j + E) + H;
                                overflow |= self.consider(
                                    ql[H],
                                    rl,
                                    r0,
                                    acc[4 * j + 2 * H + E],
                                    rq[JJ][E],
                                    lim[H],
                                    &mut done[bit / 32],
                                    1 << (bit % 32),
                                );
                            });
                        });
                    });
                }
            });
            if !self.merge_lazy(overflow, want) {
                break;
            }
            want = false;
            lim = [self.limit(ql[0]), self.limit(ql[1])];
        }
    }
}

/// `tc_knn_*` on `wgmma` (see `tc_knn.rs`; the lists hold [`H_KNN_CAP`] candidates per query). `MULTI`
/// (`sm90a_knnm_*`, for launches with fewer splits than `k`): each split publishes its `h =
/// tc_knn_heads_per_split(k, n_splits)` best keys per query, so the launch-wide bound of the heads holds there
/// too; the single-head kernels stay as they were (the extra code cost them 4 % at top-10).
///
/// # Safety
/// Grid `(ceil(n_queries / 128), n_splits)` with `n_splits <=` the row tiles, 256 threads,
/// `h_knn_shared_bytes(k)` bytes of dynamic shared memory; buffers as [`TcKnnParams`] documents; `1 <= k
/// <= TC_KNN_K_MAX`; sm_90a.
#[inline(always)]
unsafe fn sm90a_knn<const METRIC: u32, const BF16: bool, const MULTI: bool>(p: &TcKnnParams) {
    // SAFETY: forwarded launcher contract: the lists follow the ring of H_PIPE_BYTES.
    let (mut lists, o, split, n_tiles) =
        unsafe { knn_block::<METRIC, CAP, MULTI>(p, H_PIPE_BYTES) };
    let ring = ring_addr();
    let bars = shared_addr(dynamic_shared_f32()) + h_knn_shared_bytes(p.k) - H_KNN_BARRIER_BYTES;
    // SAFETY: forwarded launcher contract: the ring is inside the first H_PIPE_BYTES bytes of the dynamic
    // shared memory and the barriers its last H_KNN_BARRIER_BYTES (8-byte aligned: h_knn_shared_bytes is a
    // multiple of 8); `p.maps` holds the launch's two tensor maps; the operands and outputs as documented.
    unsafe {
        let mut copies = TmaLoader::new(p.maps, bars, ring, &o, split, p.n_splits, n_tiles);
        stream90::<BF16, _, _>(
            &o,
            ring,
            split * TC_TILE_R,
            p.n_splits,
            n_tiles,
            &mut copies,
            &mut lists,
        );
        lists.flush();
        lists.write_out(p, split);
    }
}

kernels! {
    TcKnnParams;
    sm90a_knn_f16_dot => sm90a_knn::<METRIC_DOT, false, false>;
    sm90a_knn_f16_cosine => sm90a_knn::<METRIC_COSINE, false, false>;
    sm90a_knn_f16_l2 => sm90a_knn::<METRIC_L2, false, false>;
    sm90a_knn_bf16_dot => sm90a_knn::<METRIC_DOT, true, false>;
    sm90a_knn_bf16_cosine => sm90a_knn::<METRIC_COSINE, true, false>;
    sm90a_knn_bf16_l2 => sm90a_knn::<METRIC_L2, true, false>;
}

kernels! {
    TcKnnParams;
    sm90a_knnm_f16_dot => sm90a_knn::<METRIC_DOT, false, true>;
    sm90a_knnm_f16_cosine => sm90a_knn::<METRIC_COSINE, false, true>;
    sm90a_knnm_f16_l2 => sm90a_knn::<METRIC_L2, false, true>;
    sm90a_knnm_bf16_dot => sm90a_knn::<METRIC_DOT, true, true>;
    sm90a_knnm_bf16_cosine => sm90a_knn::<METRIC_COSINE, true, true>;
    sm90a_knnm_bf16_l2 => sm90a_knn::<METRIC_L2, true, true>;
}
