//! Small device helpers shared by the kernels: thread indices, shared memory, IEEE arithmetic.

use core::arch::{asm, nvptx};

#[inline(always)]
pub fn thread_x() -> u32 {
    // SAFETY: reads a special register; always defined inside a kernel.
    unsafe { nvptx::_thread_idx_x() as u32 }
}

#[inline(always)]
pub fn block_x() -> u32 {
    // SAFETY: reads a special register; always defined inside a kernel.
    unsafe { nvptx::_block_idx_x() as u32 }
}

#[inline(always)]
pub fn block_y() -> u32 {
    // SAFETY: reads a special register; always defined inside a kernel.
    unsafe { nvptx::_block_idx_y() as u32 }
}

/// Barrier for all threads of the block. Every thread of the block must reach it.
#[inline(always)]
pub fn sync_threads() {
    // SAFETY: callers call it from block-uniform control flow (documented at each call site).
    unsafe { nvptx::_syncthreads() }
}

/// Barrier `id` (1 to 15) for `threads` threads of the block (a multiple of 32; `bar.sync id, threads`): only the
/// warps that reach it wait for each other, ordering their shared-memory accesses.
#[inline(always)]
pub fn named_barrier(id: u32, threads: u32) {
    // SAFETY: callers pass an id no other barrier of the kernel uses with another count, and `threads` warps'
    // worth of threads reach it.
    unsafe {
        asm!("bar.sync {id}, {n};", id = in(reg32) id, n = in(reg32) threads, options(nostack))
    }
}

/// Arrive at barrier `id` without waiting (`bar.arrive id, threads`): the threads that wait there
/// ([`named_barrier`]) see this thread's earlier shared-memory writes once it completes.
#[inline(always)]
pub fn named_barrier_arrive(id: u32, threads: u32) {
    // SAFETY: as for `named_barrier`: one count per id, and `threads` threads arrive or wait in all.
    unsafe {
        asm!("bar.arrive {id}, {n};", id = in(reg32) id, n = in(reg32) threads, options(nostack))
    }
}

/// Base of the block's dynamic shared memory, as `f32`s.
#[inline(always)]
pub fn dynamic_shared_f32() -> *mut f32 {
    core::intrinsics::gpu::gpu_launch_sized_workgroup_mem::<f32>()
}

pub use recall_kernel_shared::math::{fma, sqrt};

unsafe extern "C" {
    #[link_name = "llvm.nvvm.shfl.sync.bfly.f32"]
    fn shfl_sync_bfly_f32(mask: u32, value: f32, lane_mask: u32, clamp: u32) -> f32;
    #[link_name = "llvm.nvvm.shfl.sync.bfly.i32"]
    fn shfl_sync_bfly_i32(mask: u32, value: i32, lane_mask: u32, clamp: u32) -> i32;
    #[link_name = "llvm.nvvm.shfl.sync.idx.i32"]
    fn shfl_sync_idx_i32(mask: u32, value: i32, lane: u32, clamp: u32) -> i32;
    #[link_name = "llvm.nvvm.shfl.sync.up.i32"]
    fn shfl_sync_up_i32(mask: u32, value: i32, delta: u32, clamp: u32) -> i32;
}

/// The value of lane `lane ^ lane_mask` (`shfl.sync.bfly`, all 32 lanes). Every lane of the warp must call it.
#[inline(always)]
pub fn shfl_xor_f32(value: f32, lane_mask: u32) -> f32 {
    // SAFETY: a full-warp shuffle; callers reach it from warp-uniform control flow.
    unsafe { shfl_sync_bfly_f32(0xffff_ffff, value, lane_mask, 0x1f) }
}

/// [`shfl_xor_f32`] for a `u64`, as two 32-bit shuffles.
#[inline(always)]
pub fn shfl_xor_u64(value: u64, lane_mask: u32) -> u64 {
    // SAFETY: as above.
    let (lo, hi) = unsafe {
        (
            shfl_sync_bfly_i32(0xffff_ffff, value as u32 as i32, lane_mask, 0x1f),
            shfl_sync_bfly_i32(0xffff_ffff, (value >> 32) as u32 as i32, lane_mask, 0x1f),
        )
    };
    (u64::from(hi as u32) << 32) | u64::from(lo as u32)
}

/// Lane `lane`'s `value` (`shfl.sync.idx`, all 32 lanes, as two 32-bit shuffles). Every lane of the warp must
/// call it.
#[inline(always)]
pub fn shfl_idx_u64(value: u64, lane: u32) -> u64 {
    // SAFETY: a full-warp shuffle; callers reach it from warp-uniform control flow.
    let (lo, hi) = unsafe {
        (
            shfl_sync_idx_i32(0xffff_ffff, value as u32 as i32, lane, 0x1f),
            shfl_sync_idx_i32(0xffff_ffff, (value >> 32) as u32 as i32, lane, 0x1f),
        )
    };
    (u64::from(hi as u32) << 32) | u64::from(lo as u32)
}

/// Lane 0's `value`, which the compiler then knows to be the same in every lane (`shfl.sync.idx`): a value
/// that is warp-uniform but computed from the thread index (a warpgroup's index) can live in the uniform
/// registers that `wgmma` descriptors need. Every lane of the warp must call it.
#[inline(always)]
pub fn warp_uniform(value: u32) -> u32 {
    // SAFETY: a full-warp shuffle; callers reach it from warp-uniform control flow.
    unsafe { shfl_sync_idx_i32(0xffff_ffff, value as i32, 0, 0x1f) as u32 }
}

/// The `value` of lane `lane - 1` (lane 0 gets its own; `shfl.sync.up` by one, all 32 lanes). Every lane of
/// the warp must call it.
#[inline(always)]
pub fn shfl_up1_u64(value: u64) -> u64 {
    // SAFETY: a full-warp shuffle; callers reach it from warp-uniform control flow.
    let (lo, hi) = unsafe {
        (
            shfl_sync_up_i32(0xffff_ffff, value as u32 as i32, 1, 0),
            shfl_sync_up_i32(0xffff_ffff, (value >> 32) as u32 as i32, 1, 0),
        )
    };
    (u64::from(hi as u32) << 32) | u64::from(lo as u32)
}

/// The score's order-preserving key, smaller is better; `-0.0` and `+0.0` share a key: the same function as
/// `recall_cpu_simd::score_key` (the differential tests compare the two through every top-k).
#[inline(always)]
pub fn score_key(score: f32, higher_first: bool) -> u32 {
    if score.is_nan() {
        return u32::MAX;
    }
    let bits = (score + 0.0).to_bits();
    let ascending = if bits & 0x8000_0000 != 0 {
        !bits
    } else {
        bits | 0x8000_0000
    };
    if higher_first { !ascending } else { ascending }
}

#[inline(always)]
pub fn block_dim_x() -> u32 {
    // SAFETY: reads a special register; always defined inside a kernel.
    unsafe { core::arch::nvptx::_block_dim_x() as u32 }
}

#[inline(always)]
pub fn grid_dim_x() -> u32 {
    // SAFETY: reads a special register; always defined inside a kernel.
    unsafe { core::arch::nvptx::_grid_dim_x() as u32 }
}

/// `gridDim.y`.
#[inline(always)]
pub fn grid_dim_y() -> u32 {
    // SAFETY: reads a special register; always defined inside a kernel.
    unsafe { core::arch::nvptx::_grid_dim_y() as u32 }
}

// `cp.async` (sm_80 and newer): only kernels left out of older images (`tc_*`, `sm80_*`) may use these.

/// The shared-window address of a generic pointer into shared memory.
#[inline(always)]
pub fn shared_addr(p: *mut f32) -> u32 {
    let out: u64;
    // SAFETY: `cvta.to.shared` only converts an address; `p` points into this block's shared memory.
    unsafe {
        asm!("cvta.to.shared.u64 {o}, {p};", o = out(reg64) out, p = in(reg64) p as u64, options(pure, nomem, nostack));
    }
    out as u32
}

/// Copy 16 bytes from global `src` to shared `dst` asynchronously; with `bytes == 0` the 16 bytes are zeros
/// and `src` is not read.
///
/// # Safety
/// `dst` is a 16-byte aligned shared address of this block; `src` is 16-byte aligned and, when `bytes` is
/// 16, points to 16 readable bytes.
#[inline(always)]
pub unsafe fn cp_async16(dst: u32, src: u64, bytes: u32) {
    // SAFETY: caller.
    unsafe {
        asm!("cp.async.cg.shared.global [{d}], [{s}], 16, {n};", d = in(reg32) dst, s = in(reg64) src, n = in(reg32) bytes, options(nostack));
    }
}

/// [`cp_async16`] with the L2 asked to fetch the 256 aligned bytes around `src` (`.L2::256B`): for a
/// stream whose later steps read the rest of those bytes (a row read 32 or 64 bytes a step), one memory
/// request serves several steps, so more of the stream is in flight per request the SM tracks.
///
/// # Safety
/// As [`cp_async16`].
#[inline(always)]
pub unsafe fn cp_async16_l2_256(dst: u32, src: u64, bytes: u32) {
    // SAFETY: caller.
    unsafe {
        asm!("cp.async.cg.shared.global.L2::256B [{d}], [{s}], 16, {n};", d = in(reg32) dst, s = in(reg64) src, n = in(reg32) bytes, options(nostack));
    }
}

/// A relaxed load of a `u64` that other blocks of the launch change atomically (`ld.relaxed.gpu`: device scope,
/// where a Rust atomic load would be system scope).
///
/// # Safety
/// `ptr` is a valid, 8-byte aligned global address.
#[inline(always)]
pub unsafe fn load_relaxed_gpu_u64(ptr: *const u64) -> u64 {
    let v: u64;
    // SAFETY: caller.
    unsafe {
        asm!("ld.relaxed.gpu.global.u64 {v}, [{p}];", v = out(reg64) v, p = in(reg64) ptr, options(nostack, readonly));
    }
    v
}

/// A relaxed store of a `u64` that other blocks of the launch read (`st.relaxed.gpu`).
///
/// # Safety
/// `ptr` is a valid, 8-byte aligned global address that no other thread writes non-atomically.
#[inline(always)]
pub unsafe fn store_relaxed_gpu_u64(ptr: *mut u64, v: u64) {
    // SAFETY: caller.
    unsafe {
        asm!("st.relaxed.gpu.global.u64 [{p}], {v};", v = in(reg64) v, p = in(reg64) ptr, options(nostack));
    }
}

/// Ask the L2 to fetch the line holding `addr` (`prefetch.global.L2`); no data comes back to the thread.
///
/// # Safety
/// `addr` points into a global allocation.
#[inline(always)]
pub unsafe fn prefetch_l2(addr: u64) {
    // SAFETY: caller.
    unsafe { asm!("prefetch.global.L2 [{a}];", a = in(reg64) addr, options(nostack)) }
}

#[inline(always)]
pub fn cp_async_commit() {
    // SAFETY: closes the thread's group of pending copies; no memory is accessed.
    unsafe { asm!("cp.async.commit_group;", options(nostack)) }
}

/// Wait until at most `N` of this thread's copy groups are pending.
#[inline(always)]
pub fn cp_async_wait<const N: u32>() {
    // SAFETY: waits for this thread's own copies.
    unsafe { asm!("cp.async.wait_group {n};", n = const N, options(nostack)) }
}

/// A memory fence at GPU scope (`membar.gl`, every arch; from sm_70 on it is `fence.sc.gpu`, stronger than the
/// acquire-release this needs): this thread's writes before it are visible device-wide to whoever observes a
/// later write of this thread, and its reads after it see what such writers published before theirs.
#[inline(always)]
pub fn fence_gpu() {
    // SAFETY: a memory fence; no operands.
    unsafe { asm!("membar.gl;", options(nostack)) }
}

/// Barrier for the 32 lanes of the warp (`bar.warp.sync`), ordering their shared-memory accesses. Every lane
/// of the warp must reach it.
#[inline(always)]
pub fn sync_warp() {
    // SAFETY: callers reach it from warp-uniform control flow with all lanes active.
    unsafe { asm!("bar.warp.sync 0xffffffff;", options(nostack)) }
}

/// Barrier for all threads of the block that also returns, to every thread, whether any thread passed `true`
/// (`bar.red.or`, as `__syncthreads_or`). Every thread of the block must reach it.
#[inline(always)]
pub fn sync_threads_or(flag: bool) -> bool {
    let out: u32;
    // SAFETY: a block-wide barrier with a reduction; callers reach it from block-uniform control flow.
    unsafe {
        asm!(
            "{{ .reg .pred %rp_in, %rp_out; setp.ne.u32 %rp_in, {f}, 0; bar.red.or.pred %rp_out, 0, %rp_in; selp.u32 {o}, 1, 0, %rp_out; }}",
            f = in(reg32) u32::from(flag),
            o = out(reg32) out,
            options(nostack)
        );
    }
    out != 0
}

/// The warp's votes: bit `l` set when lane `l` passed `true` (`vote.sync.ballot`, all 32 lanes). Every lane of
/// the warp must call it.
#[inline(always)]
pub fn ballot(flag: bool) -> u32 {
    let out: u32;
    // SAFETY: a full-warp vote on a predicate made from `flag`; callers reach it from warp-uniform control flow.
    unsafe {
        asm!(
            "{{ .reg .pred %vp; setp.ne.u32 %vp, {f}, 0; vote.sync.ballot.b32 {o}, %vp, 0xffffffff; }}",
            f = in(reg32) u32::from(flag),
            o = out(reg32) out,
            options(nostack)
        );
    }
    out
}

/// Four f32 read as one 16-byte shared load.
#[repr(C, align(16))]
#[derive(Clone, Copy)]
pub struct F4(pub [f32; 4]);

/// The smallest of the 32 lanes' values (every lane gets it), in two warp reductions (`redux.sync`, sm_80):
/// the smallest high half, then the smallest low half among the lanes holding it, instead of five
/// butterfly shuffles of both halves. Every lane of the warp must call it; only kernels that need sm_80
/// (`sm80_*`, `tc_*`, `sm90a_*`) reach it.
#[inline(always)]
pub fn warp_min(m: u64) -> u64 {
    let (hi, lo) = ((m >> 32) as u32, m as u32);
    let hi_min = redux_min_u32(hi);
    let lo_min = redux_min_u32(if hi == hi_min { lo } else { u32::MAX });
    (u64::from(hi_min) << 32) | u64::from(lo_min)
}

/// The smallest of the 32 lanes' `v` (`redux.sync.min.u32`, sm_80), in every lane. Every lane of the warp
/// must call it.
#[inline(always)]
fn redux_min_u32(v: u32) -> u32 {
    let m: u32;
    // SAFETY: a warp-wide reduction over the full mask; every lane calls it (caller).
    unsafe {
        core::arch::asm!(
            "redux.sync.min.u32 {m}, {v}, 0xffffffff;",
            m = out(reg32) m,
            v = in(reg32) v,
            options(nomem, nostack)
        );
    }
    m
}

/// The warp's 32 keys sorted ascending across the lanes (lane `lane` gets the `lane`-th smallest): a bitonic
/// sort, 15 compare-exchange steps through `shfl.sync.bfly`. Every lane of the warp must call it; `lane` is
/// the caller's lane index.
#[inline(always)]
pub fn warp_sort_u64(mut key: u64, lane: u32) -> u64 {
    let mut size = 2;
    while size <= 32 {
        // Runs of `size` lanes alternate ascending / descending, so that each pair of runs is bitonic for
        // the next size; the last size (32) is ascending in every lane.
        let ascending = lane & size == 0 || size == 32;
        let mut stride = size / 2;
        while stride > 0 {
            let other = shfl_xor_u64(key, stride);
            let lower = lane & stride == 0;
            key = if lower == ascending {
                key.min(other)
            } else {
                key.max(other)
            };
            stride /= 2;
        }
        size *= 2;
    }
    key
}

/// Round `r`'s smallest key over a block of `warps` warps: every thread offers `offer`; returns the block's
/// minimum. Block-uniform: every thread calls it with the same `r`. The minima alternate between two slot
/// sets, so one barrier per round is enough (a warp writes set `r % 2` again only after round `r + 1`'s
/// barrier, which every warp passes only after reading round `r`'s minima). A one-warp block needs neither.
///
/// # Safety
/// `mins` points to `2 * warps` u64 of shared memory.
#[inline(always)]
pub unsafe fn block_min(offer: u64, mins: *mut u64, warps: usize, r: usize) -> u64 {
    let t = thread_x() as usize;
    let m = warp_min(offer);
    if warps == 1 {
        // Every lane holds the minimum already.
        return m;
    }
    let set = mins.wrapping_add((r % 2) * warps);
    if t % 32 == 0 {
        // SAFETY: warp < warps: inside this round's set.
        unsafe { *set.add(t / 32) = m };
    }
    sync_threads();
    let mut best = u64::MAX;
    let mut w = 0;
    while w < warps {
        // SAFETY: w < warps; written before the barrier.
        best = best.min(unsafe { *set.add(w) });
        w += 1;
    }
    best
}

/// Publish this block's writes, take a ticket from `counter`, and say (to every thread) whether it was the
/// last of `total`. Block-uniform.
///
/// # Safety
/// `counter` is a device u32 only used atomically while the kernel runs; `flag` a shared u32.
#[inline(always)]
pub(crate) unsafe fn last_to_arrive(counter: *mut u32, total: usize, flag: *mut u32) -> bool {
    // SAFETY: forwarded; the block's barrier.
    unsafe { last_to_arrive_with(counter, total, flag, sync_threads) }
}

/// [`last_to_arrive`] for the first `threads` threads of the block only (a multiple of 32; named barrier
/// [`MERGE_BARRIER`] instead of the block's): the others may have left or wait at another barrier.
/// Uniform over those threads.
///
/// # Safety
/// As [`last_to_arrive`]; `threads` threads reach it, and no other code of the kernel uses barrier
/// [`MERGE_BARRIER`] with another count.
#[inline(always)]
pub(crate) unsafe fn last_to_arrive_of(
    counter: *mut u32,
    total: usize,
    flag: *mut u32,
    threads: u32,
) -> bool {
    // SAFETY: forwarded; the barrier of those threads.
    unsafe {
        last_to_arrive_with(counter, total, flag, || {
            named_barrier(MERGE_BARRIER, threads)
        })
    }
}

/// [`last_to_arrive`]'s steps with `barrier` among the threads that take part.
///
/// # Safety
/// As [`last_to_arrive`], with every thread of `barrier` calling it.
#[inline(always)]
unsafe fn last_to_arrive_with(
    counter: *mut u32,
    total: usize,
    flag: *mut u32,
    barrier: impl Fn(),
) -> bool {
    fence_gpu();
    barrier();
    if thread_x() == 0 {
        let ticket = crate::select::atomic_add(counter, 1);
        // SAFETY: the flag is this block's shared memory.
        unsafe { *flag = u32::from(ticket as usize + 1 == total) };
    }
    barrier();
    // SAFETY: written before the barrier.
    let last = unsafe { *flag } != 0;
    if last {
        // Acquire: the other blocks' writes before their tickets are visible from here on.
        fence_gpu();
    }
    last
}

/// The named barrier of the one-query kernels' tickets and merges (`knn1.rs`), which only the warps holding
/// rows reach.
pub(crate) const MERGE_BARRIER: u32 = 2;

/// Copy a query of `dim` floats (a multiple of 4) from global memory at `src` into shared memory at `dst`,
/// 16 bytes per `cp.async`, the pieces spread over the block's `threads` threads (`t` this one's index). It
/// joins the thread's current copy group: the caller commits and waits with its first tiles.
///
/// # Safety
/// `dst` points to `dim` floats of this block's shared memory and `src` to `dim` readable floats, both
/// 16-byte aligned.
#[inline(always)]
pub unsafe fn stage_query(dst: *mut f32, src: u64, dim: usize, t: usize, threads: usize) {
    let mut i = t;
    while i < dim / 4 {
        // SAFETY: piece i < dim / 4 of the query, 16-byte aligned on both sides (caller).
        unsafe {
            cp_async16(
                shared_addr(dst.wrapping_add(4 * i)),
                src + (16 * i) as u64,
                16,
            )
        };
        i += threads;
    }
}

/// Copy a query of `dim` floats (a multiple of 4) that the launch carries in its parameters into shared
/// memory at `dst`: `piece(i)` loads its floats `4i .. 4i + 4` from the entry point's parameter (`ld.param`,
/// or a plain load through the parameter's generic address: `knn1.rs`'s `param_piece`), the pieces spread over
/// the block's `threads` threads (`t` this one's index). Plain stores: the caller's barrier makes them visible.
/// (Through `ld.param`, issuing every load before the first store was no faster: one warp's constant-cache
/// misses, one per line of the parameter, are served one after another either way.)
///
/// # Safety
/// `dst` points to `dim` floats of this block's shared memory, 16-byte aligned; `piece(i)` is defined for
/// `i < dim / 4`.
#[inline(always)]
pub unsafe fn stage_query_params(
    dst: *mut f32,
    piece: impl Fn(usize) -> F4,
    dim: usize,
    t: usize,
    threads: usize,
) {
    let mut i = t;
    while i < dim / 4 {
        // SAFETY: piece i < dim / 4 of the query area (caller), 16-byte aligned.
        unsafe { (dst as *mut F4).add(i).write(piece(i)) };
        i += threads;
    }
}

/// Initialise the `mbarrier` at shared address `bar` for `COUNT` arrivals a phase (then, before the async proxy
/// uses it, [`fence_mbarrier_init`]).
///
/// # Safety
/// `bar` is 8 bytes of this block's shared memory, 8-byte aligned, that no thread uses as a barrier yet; sm_90.
#[inline(always)]
pub unsafe fn mbarrier_init<const COUNT: u32>(bar: u32) {
    // SAFETY: as the caller guarantees.
    unsafe {
        core::arch::asm!(
            "mbarrier.init.shared::cta.b64 [{b}], {n};",
            b = in(reg32) bar,
            n = const COUNT,
            options(nostack)
        );
    }
}

/// Order this thread's barrier initialisations before the async proxy's use of them (copies that complete on
/// them): `fence.mbarrier_init.release.cluster`.
#[inline(always)]
pub fn fence_mbarrier_init() {
    // SAFETY: a fence; no operand.
    unsafe { core::arch::asm!("fence.mbarrier_init.release.cluster;", options(nostack)) }
}

/// Wait until the `mbarrier` at shared address `bar` completes the phase of parity `parity` (`try_wait`
/// suspends the thread for a while between tries).
///
/// # Safety
/// `bar` is an initialised barrier of this block's shared memory; sm_90.
#[inline(always)]
pub unsafe fn mbarrier_wait(bar: u32, parity: u32) {
    loop {
        let done: u32;
        // SAFETY: as the caller guarantees.
        unsafe {
            core::arch::asm!(
                "{{",
                ".reg .pred p;",
                "mbarrier.try_wait.parity.shared::cta.b64 p, [{bar}], {par};",
                "selp.u32 {done}, 1, 0, p;",
                "}}",
                bar = in(reg32) bar,
                par = in(reg32) parity,
                done = out(reg32) done,
                options(nostack)
            );
        }
        if done != 0 {
            break;
        }
    }
}
