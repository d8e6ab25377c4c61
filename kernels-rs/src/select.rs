//! Exact top-k selection by radix select over 64-bit pair keys (`docs/numerics.md`, "Top-k").
//!
//! Each (score, id) pair becomes `key = score_key(score) << 32 | id`, the same key as `recall_cpu_simd`'s
//! `pair_key`: smaller is better, and keys are unique because ids are. The top k of a segment are then
//! exactly its k smallest keys, whatever the ties between scores, so no tie rule is needed beyond the key.
//!
//! The selection fixes the key 11 bits at a time from the top (passes of 11, 11, 11, 11, 11 and 9 bits):
//! `select_histogram` counts the keys of the still-undecided group per digit, `select_choose` finds the digit
//! that holds the k-th key and narrows the group; once the group is wholly inside the top k the segment is
//! `done`, and `select_collect` writes out every key at or below the prefix (exactly k of them). The host
//! sorts the k keys. All passes are queued without a host round trip; passes after `done` exit at once.
//!
//! Thread mapping: `select_histogram` and `select_collect` run blocks of 256 threads over
//! `(ceil(longest segment / 4096), n_segments)`; thread `t` of block `x` reads positions
//! `4096 * x + 256 * i + t` (i < 16) of its segment, coalesced. `select_choose` runs one block per segment.

use crate::util::{
    block_x, block_y, dynamic_shared_f32, score_key, shfl_xor_u64, sync_threads, thread_x,
};
use core::sync::atomic::{AtomicU32, Ordering};
use recall_kernel_shared::{
    SELECT_BINS, SELECT_BLOCK, SELECT_ITEMS, SelectParams, SelectState, TopkFilterParams,
    TopkSmallParams,
};

const BINS: usize = SELECT_BINS as usize;
const SHIFTS: [u32; 6] = [53, 42, 31, 20, 9, 0];

/// Segment `s`'s positions `[start, end)` in `scores`.
///
/// # Safety
/// `p.offsets` is 0 or holds `n_segments + 1` values; `s < n_segments`.
#[inline(always)]
unsafe fn segment(p: &SelectParams, s: u32) -> (u64, u64) {
    if p.offsets == 0 {
        let start = u64::from(s) * u64::from(p.seg_len);
        (start, start + u64::from(p.seg_len))
    } else {
        let o = p.offsets as *const u64;
        // SAFETY: s + 1 <= n_segments.
        unsafe { (*o.add(s as usize), *o.add(s as usize + 1)) }
    }
}

/// The pair key of position `j` of a segment starting at `start`.
///
/// # Safety
/// `j` is a valid position of `scores` (and of `ids` when set).
#[inline(always)]
unsafe fn key_at(p: &SelectParams, start: u64, j: u64) -> (u64, f32) {
    // SAFETY: caller.
    let score = unsafe { *(p.scores as *const f32).add(j as usize) };
    let id = if p.ids == 0 {
        (j - start) as u32
    } else {
        // SAFETY: caller.
        unsafe { *(p.ids as *const u32).add(j as usize) }
    };
    (
        (u64::from(score_key(score, p.higher_first != 0)) << 32) | u64::from(id),
        score,
    )
}

#[inline(always)]
fn state_ptr(p: &SelectParams, s: u32) -> *mut SelectState {
    (p.state as *mut SelectState).wrapping_add(s as usize)
}

#[inline(always)]
pub(crate) fn atomic_add(ptr: *mut u32, v: u32) -> u32 {
    // SAFETY: callers pass pointers into device or shared memory that live for the kernel and are only
    // accessed atomically while the kernel runs.
    unsafe { AtomicU32::from_ptr(ptr) }.fetch_add(v, Ordering::Relaxed)
}

/// Reset every segment's state and histogram.
///
/// # Safety
/// Grid covering `n_segments * SELECT_BINS` threads of 256; pointers as `SelectParams` documents.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn select_init(p: SelectParams) {
    let i = (block_x() * SELECT_BLOCK + thread_x()) as usize;
    if i < p.n_segments as usize * BINS {
        // SAFETY: inside the n_segments * BINS histogram.
        unsafe { *(p.hist as *mut u32).add(i) = 0 };
    }
    if i < p.n_segments as usize {
        let st = SelectState {
            prefix: 0,
            rank: p.k,
            done: 0,
            shift: 64,
            count: 0,
        };
        // SAFETY: i < n_segments.
        unsafe { *state_ptr(&p, i as u32) = st };
    }
}

/// Count the undecided keys of each segment per digit of pass `p.pass`.
///
/// # Safety
/// Grid `(ceil(longest / 4096), n_segments)`, 256 threads, `SELECT_BINS * 4` bytes of dynamic shared memory.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn select_histogram(p: SelectParams) {
    let s = block_y();
    // SAFETY: s < n_segments (grid).
    let st = unsafe { *state_ptr(&p, s) };
    // SAFETY: as above.
    let (start, end) = unsafe { segment(&p, s) };
    let base = start + u64::from(block_x() * SELECT_BLOCK * SELECT_ITEMS);
    if st.done != 0 || base >= end {
        return; // Block-uniform.
    }
    let shift = SHIFTS[p.pass as usize % SHIFTS.len()];
    let hi = if p.pass == 0 {
        64
    } else {
        SHIFTS[(p.pass - 1) as usize]
    };
    let mask = (1u64 << (hi - shift)) - 1;
    let hist = dynamic_shared_f32() as *mut u32;
    let t = thread_x() as usize;
    let mut b = t;
    while b < BINS {
        // SAFETY: b < BINS: inside the shared histogram.
        unsafe { *hist.add(b) = 0 };
        b += SELECT_BLOCK as usize;
    }
    sync_threads();
    let mut i = 0;
    while i < SELECT_ITEMS as u64 {
        let j = base + i * u64::from(SELECT_BLOCK) + t as u64;
        if j < end {
            // SAFETY: start <= j < end.
            let (key, _) = unsafe { key_at(&p, start, j) };
            if hi == 64 || (key >> hi) == (st.prefix >> hi) {
                atomic_add(hist.wrapping_add(((key >> shift) & mask) as usize), 1);
            }
        }
        i += 1;
    }
    sync_threads();
    let global = (p.hist as *mut u32).wrapping_add(s as usize * BINS);
    let mut b = t;
    while b < BINS {
        // SAFETY: b < BINS.
        let n = unsafe { *hist.add(b) };
        if n != 0 {
            atomic_add(global.wrapping_add(b), n);
        }
        b += SELECT_BLOCK as usize;
    }
}

/// Find the digit of pass `p.pass` that holds each segment's k-th key; narrow the group; clear the histogram.
///
/// # Safety
/// Grid `(n_segments)`, 256 threads, `(256 + 2) * 4` bytes of dynamic shared memory.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn select_choose(p: SelectParams) {
    let s = block_x();
    let stp = state_ptr(&p, s);
    // SAFETY: s < n_segments (grid).
    let st = unsafe { *stp };
    if st.done != 0 {
        return; // Block-uniform.
    }
    let shift = SHIFTS[p.pass as usize % SHIFTS.len()];
    let t = thread_x() as usize;
    let per = BINS / SELECT_BLOCK as usize; // 8 bins per thread
    let hist = (p.hist as *mut u32).wrapping_add(s as usize * BINS);
    let part = dynamic_shared_f32() as *mut u32;
    let mut own = [0u32; 8];
    let mut sum = 0u32;
    let mut b = 0;
    while b < per {
        // SAFETY: t * 8 + b < BINS.
        own[b] = unsafe { *hist.add(t * per + b) };
        sum += own[b];
        b += 1;
    }
    // SAFETY: t < 256: inside `part`.
    unsafe { *part.add(t) = sum };
    sync_threads();
    if t == 0 {
        // Which thread's bins hold the rank-th key, and how many keys lie before them.
        let mut cum = 0u32;
        let mut owner = u32::MAX;
        let mut i = 0;
        while i < SELECT_BLOCK as usize {
            // SAFETY: i < 256.
            let n = unsafe { *part.add(i) };
            if cum + n >= st.rank {
                owner = i as u32;
                break;
            }
            cum += n;
            i += 1;
        }
        // SAFETY: slots 256 and 257 follow the 256 partial sums.
        unsafe {
            *part.add(256) = owner;
            *part.add(257) = cum;
        }
    }
    sync_threads();
    // SAFETY: written by thread 0 before the barrier.
    let (owner, cum) = unsafe { (*part.add(256), *part.add(257)) };
    if owner == u32::MAX && t == 0 {
        // Fewer keys than k (the launcher rules this out): take the whole group fixed so far.
        let hi = if p.pass == 0 {
            64
        } else {
            SHIFTS[(p.pass - 1) as usize]
        };
        let next = SelectState {
            shift: hi,
            done: 1,
            ..st
        };
        // SAFETY: stp is this segment's state.
        unsafe { *stp = next };
    }
    if t as u32 == owner {
        let mut before = cum;
        let mut b = 0;
        while b < per {
            if before + own[b] >= st.rank {
                let digit = (t * per + b) as u64;
                let rank = st.rank - before;
                let next = SelectState {
                    prefix: st.prefix | (digit << shift),
                    rank,
                    done: u32::from(own[b] == rank),
                    shift,
                    count: 0,
                };
                // SAFETY: stp is this segment's state; only this thread writes it.
                unsafe { *stp = next };
                break;
            }
            before += own[b];
            b += 1;
        }
    }
    let mut b = 0;
    while b < per {
        // SAFETY: t * 8 + b < BINS; every thread read its own bins before the first barrier.
        unsafe { *hist.add(t * per + b) = 0 };
        b += 1;
    }
}

/// Write out every key at or below the chosen prefix: exactly k per segment.
///
/// # Safety
/// Grid `(ceil(longest / 4096), n_segments)`, 256 threads; pointers as `SelectParams` documents.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn select_collect(p: SelectParams) {
    let s = block_y();
    let stp = state_ptr(&p, s);
    // SAFETY: s < n_segments (grid).
    let st = unsafe { *stp };
    // SAFETY: as above.
    let (start, end) = unsafe { segment(&p, s) };
    let base = start + u64::from(block_x() * SELECT_BLOCK * SELECT_ITEMS);
    if base >= end {
        return;
    }
    let shift = st.shift.min(63);
    let bound = if st.shift >= 64 {
        u64::MAX
    } else {
        st.prefix >> shift
    };
    let count = (stp as *mut u32).wrapping_add(5); // SelectState::count: after u64 + 3 u32
    let t = thread_x() as u64;
    let mut i = 0;
    while i < SELECT_ITEMS as u64 {
        let j = base + i * u64::from(SELECT_BLOCK) + t;
        if j < end {
            // SAFETY: start <= j < end.
            let (key, score) = unsafe { key_at(&p, start, j) };
            if (key >> shift) <= bound {
                let pos = atomic_add(count, 1);
                if pos < p.k {
                    let o = s as usize * p.k as usize + pos as usize;
                    // SAFETY: o < n_segments * k.
                    unsafe {
                        *(p.out_keys as *mut u64).add(o) = key;
                        *(p.out_scores as *mut f32).add(o) = score;
                    }
                }
            }
        }
        i += 1;
    }
}

// ---------------------------------------------------------------------------------------------------------
// One-pass selection for small k (k <= SMALL_K_MAX) over dense segments.
//
// Radix select reads every score seven times (six histogram passes and the collect); for the k of a search
// (10, 100 at most 32 here) one read is enough. Block (x, y) reads slice x of segment y, 256 * items inputs,
// coalesced (thread t reads positions slice_start + 256 * i + t). Each thread keeps its SLOTS smallest keys in
// a sorted register array (insertion by a fixed min/max ladder, only when the key beats the thread's worst),
// then the block extracts its k smallest keys in k rounds: every thread offers its head, a warp and then a
// block minimum finds the winner, and the thread holding it pops its head (keys are unique, so exactly one
// thread does). The k keys go out ascending. Levels repeat over the slices' keys until one slice is left; the
// last level also writes each key's score, read from the scores at the key's position (so -0.0 is kept).
// The result is the k smallest keys: the same set and order as radix select and as the CPU.
// ---------------------------------------------------------------------------------------------------------

/// Insert `key` into the ascending array `a` (dropping its largest entry).
#[inline(always)]
pub(crate) fn insert_sorted<const SLOTS: usize>(a: &mut [u64; SLOTS], key: u64) {
    let mut x = key;
    let mut i = 0;
    while i < SLOTS {
        let lo = if a[i] < x { a[i] } else { x };
        x = if a[i] < x { x } else { a[i] };
        a[i] = lo;
        i += 1;
    }
}

/// See the comment block above.
///
/// # Safety
/// Grid `(n_slices, n_segments)`, 256 threads, 64 bytes of dynamic shared memory; `input` holds
/// `n_segments * seg_len` values of its kind, `out_keys` `n_segments * n_slices * k` u64, and when
/// `out_scores != 0`: `n_slices == 1`, `out_scores` holds `n_segments * k` f32 and `scores`
/// `n_segments * score_seg_len` f32, every key's low half is a position below `score_seg_len`;
/// `1 <= k <= SLOTS`.
#[inline(always)]
unsafe fn topk_small<const SLOTS: usize>(p: &TopkSmallParams) {
    let s = block_y() as u64;
    let slice = block_x() as u64;
    let t = thread_x() as u64;
    let stride = u64::from(p.seg_len);
    let (seg_len, overflow) = if p.counts == 0 {
        (stride, false)
    } else {
        // SAFETY: counts holds n_segments u32 when set.
        let c = u64::from(unsafe { *(p.counts as *const u32).add(s as usize) });
        (c.min(stride), c > stride)
    };
    let start = slice * 256 * u64::from(p.items);
    let mut a = [u64::MAX; SLOTS];
    // Eight loads in flight per thread, then their insertions.
    let mut i = 0;
    while i < u64::from(p.items) {
        let mut keys = [u64::MAX; 8];
        let mut u = 0;
        while u < 8 {
            let j = start + 256 * (i + u) + t;
            if i + u < u64::from(p.items) && j < seg_len {
                let at = (s * stride + j) as usize;
                keys[u as usize] = if p.keys_in != 0 {
                    // SAFETY: j < seg_len: inside segment s of the input keys.
                    unsafe { *(p.input as *const u64).add(at) }
                } else {
                    // SAFETY: as above, for f32 scores.
                    let score = unsafe { *(p.input as *const f32).add(at) };
                    (u64::from(score_key(score, p.higher_first != 0)) << 32) | j
                };
            }
            u += 1;
        }
        let mut u = 0;
        while u < 8 {
            if keys[u] < a[SLOTS - 1] {
                insert_sorted(&mut a, keys[u]);
            }
            u += 1;
        }
        i += 8;
    }
    let warp_min = dynamic_shared_f32() as *mut u64;
    let (lane, warp) = (t % 32, t / 32);
    let out = (p.out_keys as *mut u64)
        .wrapping_add(((s * u64::from(p.n_slices) + slice) * u64::from(p.k)) as usize);
    let mut r = 0;
    // Block-uniform loop: every thread runs k rounds and reaches both barriers of each.
    while r < p.k {
        let head = a[0];
        let mut m = head;
        m = m.min(shfl_xor_u64(m, 16));
        m = m.min(shfl_xor_u64(m, 8));
        m = m.min(shfl_xor_u64(m, 4));
        m = m.min(shfl_xor_u64(m, 2));
        m = m.min(shfl_xor_u64(m, 1));
        if lane == 0 {
            // SAFETY: warp < 8: inside the 8 u64 of shared memory.
            unsafe { *warp_min.add(warp as usize) = m };
        }
        sync_threads();
        // SAFETY: the 8 slots were written before the barrier.
        let mut best = unsafe { *warp_min };
        let mut w = 1;
        while w < 8 {
            // SAFETY: w < 8.
            best = best.min(unsafe { *warp_min.add(w) });
            w += 1;
        }
        if head == best && best != u64::MAX {
            let mut i = 0;
            while i + 1 < SLOTS {
                a[i] = a[i + 1];
                i += 1;
            }
            a[SLOTS - 1] = u64::MAX;
        }
        if t == 0 {
            // SAFETY: r < k: inside this block's k output keys.
            unsafe { *out.add(r as usize) = if overflow { 0 } else { best } };
            if p.out_scores != 0 {
                let pos = u64::from(best as u32).min(u64::from(p.score_seg_len).saturating_sub(1));
                // SAFETY: the launcher guarantees positions below score_seg_len; clamped all the same.
                let score = unsafe {
                    *(p.scores as *const f32).add((s * u64::from(p.score_seg_len) + pos) as usize)
                };
                // SAFETY: n_slices == 1 on the last level, so s * k + r < n_segments * k.
                unsafe {
                    *(p.out_scores as *mut f32).add((s * u64::from(p.k) + u64::from(r)) as usize) =
                        score
                };
            }
        }
        // No thread rewrites the minima before every thread has read them.
        sync_threads();
        r += 1;
    }
}

/// `topk_small` with 16 slots per thread (k <= 16).
///
/// # Safety
/// Launched only through `Kernels::select_topk` in `recall-gpu-kernels`.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn topk_small_16(p: TopkSmallParams) {
    // SAFETY: forwarded launcher contract.
    unsafe { topk_small::<16>(&p) }
}

/// `topk_small` with 32 slots per thread (k <= 32).
///
/// # Safety
/// Launched only through `Kernels::select_topk` in `recall-gpu-kernels`.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn topk_small_32(p: TopkSmallParams) {
    // SAFETY: forwarded launcher contract.
    unsafe { topk_small::<32>(&p) }
}

// ---------------------------------------------------------------------------------------------------------
// Threshold selection for small k over long dense segments: two reads of the scores.
//
// 1. `topk_group_min`: every warp reduces a group of `group_len` consecutive scores to its smallest pair key.
// 2. `topk_small` over the group minima gives, per segment, the k smallest minima; the k-th of them, T, is a
//    bound: k groups hold a key at or below T, so at least k keys are <= T, and the k smallest keys of the
//    segment are all <= T.
// 3. `topk_filter`: every key <= T is appended to the segment's candidates (an atomic counter; at most `cap`
//    are stored, the count goes on).
// 4. `topk_small` over the candidates (their count per segment) gives the k smallest, ascending, with their
//    scores. A count above `cap` makes it write zero keys: the host then selects by radix instead.
// The result is the set and order of the k smallest keys: the same as radix select and the CPU.
// ---------------------------------------------------------------------------------------------------------

/// The pair key of position `j` of segment `s`.
///
/// # Safety
/// `j < seg_len`, `s < n_segments`.
#[inline(always)]
unsafe fn filter_key(p: &TopkFilterParams, s: u64, j: u64) -> u64 {
    // SAFETY: caller.
    let score = unsafe { *(p.scores as *const f32).add((s * u64::from(p.seg_len) + j) as usize) };
    (u64::from(score_key(score, p.higher_first != 0)) << 32) | j
}

/// Step 1; see above.
///
/// # Safety
/// Grid `(ceil(n_groups / 8), n_segments)`, 256 threads; `group_min` holds `n_segments * n_groups` u64.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn topk_group_min(p: TopkFilterParams) {
    let s = u64::from(block_y());
    let t = thread_x();
    let (lane, warp) = (u64::from(t % 32), t / 32);
    let g = block_x() * 8 + warp;
    if g >= p.n_groups {
        return; // Warp-uniform: the shuffles below involve whole warps only.
    }
    let start = u64::from(g) * u64::from(p.group_len);
    let end = (start + u64::from(p.group_len)).min(u64::from(p.seg_len));
    let mut m = u64::MAX;
    let mut j = start + lane;
    while j < end {
        // SAFETY: j < seg_len.
        m = m.min(unsafe { filter_key(&p, s, j) });
        j += 32;
    }
    m = m.min(shfl_xor_u64(m, 16));
    m = m.min(shfl_xor_u64(m, 8));
    m = m.min(shfl_xor_u64(m, 4));
    m = m.min(shfl_xor_u64(m, 2));
    m = m.min(shfl_xor_u64(m, 1));
    if lane == 0 {
        // SAFETY: g < n_groups.
        unsafe {
            *(p.group_min as *mut u64).add((s * u64::from(p.n_groups) + u64::from(g)) as usize) = m
        };
    }
}

/// Step 3; see above.
///
/// # Safety
/// Grid `(ceil(seg_len / 4096), n_segments)`, 256 threads; buffers as [`TopkFilterParams`] documents.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn topk_filter(p: TopkFilterParams) {
    let s = u64::from(block_y());
    // SAFETY: threshold holds n_segments * k keys, k >= 1.
    let bound = unsafe {
        *(p.threshold as *const u64).add((s * u64::from(p.k) + u64::from(p.k) - 1) as usize)
    };
    let base = u64::from(block_x()) * 4096 + u64::from(thread_x());
    let count = (p.counts as *mut u32).wrapping_add(s as usize);
    let mut i = 0;
    while i < 16 {
        let j = base + 256 * i;
        if j < u64::from(p.seg_len) {
            // SAFETY: j < seg_len.
            let key = unsafe { filter_key(&p, s, j) };
            if key <= bound {
                let at = atomic_add(count, 1);
                if at < p.cap {
                    // SAFETY: at < cap: inside segment s's candidates.
                    unsafe {
                        *(p.cand as *mut u64).add((s * u64::from(p.cap) + u64::from(at)) as usize) =
                            key
                    };
                }
            }
        }
        i += 1;
    }
}
