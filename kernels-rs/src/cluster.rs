//! k-means pieces (`docs/numerics.md`, "k-means"): the assignment is `gemm_l2_argmin` in `dense.rs`; here
//! are the f64 inertia blocks, the centroid update, and a fill used to reset the argmin keys. Also
//! clip-and-noise, whose random stream comes from the same shared Philox code as the CPU's.

use crate::util::{
    F4, block_dim_x, block_x, cp_async_commit, cp_async_wait, cp_async16, dynamic_shared_f32,
    fence_mbarrier_init, fma, mbarrier_init, mbarrier_wait, shared_addr, sqrt, sync_threads,
    thread_x,
};
use core::arch::asm;
use recall_kernel_shared::math::{box_muller_radius, gaussian4};
use recall_kernel_shared::{
    CentroidParams, FillParams, InertiaParams, NOISE_ROWS_MAX, NOISE_THREADS, NoiseParams,
    RadiiParams,
};

/// `ptr[i] = value` for every `i < len`, one element per thread.
///
/// # Safety
/// `ptr` holds `len` u64; grid covers `len` threads.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn fill_u64(p: FillParams) {
    let i = u64::from(block_x()) * u64::from(block_dim_x()) + u64::from(thread_x());
    if i < p.len {
        // SAFETY: i < len.
        unsafe { *(p.ptr as *mut u64).add(i as usize) = p.value };
    }
}

/// Thread `b` sums, in f64 and point order, the distances of points `b * block .. (b + 1) * block`, read from
/// their argmin keys (`dist` is non-negative, so its key is `bits | 0x8000_0000`).
///
/// # Safety
/// `keys` holds `n_points` u64, `block_sums` `ceil(n_points / block)` f64; grid covers that many threads.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn kmeans_inertia_blocks(p: InertiaParams) {
    let b = block_x() * block_dim_x() + thread_x();
    let start = b as usize * p.block as usize;
    if start >= p.n_points as usize {
        return;
    }
    let end = (start + p.block as usize).min(p.n_points as usize);
    let keys = p.keys as *const u64;
    let mut sum = 0.0f64;
    let mut i = start;
    while i < end {
        // SAFETY: i < n_points.
        let key = unsafe { *keys.add(i) };
        let dist = f32::from_bits(((key >> 32) as u32) & 0x7fff_ffff);
        sum = sum + f64::from(dist);
        i += 1;
    }
    // SAFETY: b < number of blocks.
    unsafe { *(p.block_sums as *mut f64).add(b as usize) = sum };
}

/// One thread per (cluster `c`, dimension `j`), consecutive threads consecutive `j`: the mean of the
/// members' `j`-th values, summed with plain IEEE adds in member order, divided by the member count.
///
/// # Safety
/// Buffers as `CentroidParams` documents; member ids below the number of points; grid covers
/// `n_clusters * dim` threads.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn kmeans_update(p: CentroidParams) {
    let idx = block_x() as usize * block_dim_x() as usize + thread_x() as usize;
    let dim = p.dim as usize;
    if idx >= p.n_clusters as usize * dim {
        return;
    }
    let (c, j) = (idx / dim, idx % dim);
    let offsets = p.offsets as *const u32;
    // SAFETY: c < n_clusters and offsets holds n_clusters + 1 values.
    let (start, end) = unsafe { (*offsets.add(c) as usize, *offsets.add(c + 1) as usize) };
    if end == start {
        return; // An empty cluster keeps its centroid.
    }
    let (members, points) = (p.members as *const u32, p.points as *const f32);
    let mut sum = 0.0f32;
    let mut m = start;
    while m < end {
        // SAFETY: m < number of members; member ids are points.
        sum = sum + unsafe { *points.add(*members.add(m) as usize * dim + j) };
        m += 1;
    }
    // SAFETY: idx < n_clusters * dim.
    unsafe { *(p.centroids as *mut f32).add(idx) = sum / ((end - start) as u32) as f32 };
}

/// `out[i] = box_muller_radius(i << 9)`, one thread per radius: every radius clip-and-noise can produce, for
/// the diff-test to compare with the host's (the device's square root there is `sqrt_in_range`).
///
/// # Safety
/// `out` holds `len` f32; the grid covers `len` threads.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn noise_radii(p: RadiiParams) {
    let i = block_x() * block_dim_x() + thread_x();
    if i < p.len {
        // SAFETY: i < len.
        unsafe { *(p.out as *mut f32).add(i as usize) = box_muller_radius(i << 9) };
    }
}

/// Clip-and-noise, one thread per block of 4 values of a row (consecutive threads, consecutive blocks):
/// the row's norm decides the clip, `gaussian4` (shared with the CPU) gives the 4 noise values.
///
/// # Safety
/// `x` and `out` hold `n_rows * dim` f32 and `norms` `n_rows`; the grid covers `n_rows * ceil(dim / 4)`
/// threads.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn clip_noise(p: NoiseParams) {
    let idx = block_x() as u64 * block_dim_x() as u64 + thread_x() as u64;
    let blocks = (p.dim as u64).div_ceil(4);
    if idx >= p.n_rows as u64 * blocks {
        return;
    }
    let (r, b) = (idx / blocks, (idx % blocks) as u32);
    // SAFETY: r < n_rows.
    let nr = unsafe { *(p.norms as *const f32).add(r as usize) };
    let g = gaussian4(p.key, r, b);
    let (x, out) = (p.x as *const f32, p.out as *mut f32);
    let mut j = 0;
    while j < 4 {
        let col = 4 * b + j;
        if col < p.dim {
            let at = r as usize * p.dim as usize + col as usize;
            // SAFETY: r < n_rows and col < dim.
            let v = unsafe { *x.add(at) };
            let y = if nr > p.clip { v * (p.clip / nr) } else { v };
            // SAFETY: as above.
            unsafe { *out.add(at) = fma(p.sigma, g[j as usize], y) };
        }
        j += 1;
    }
}

/// Clip-and-noise in one pass over the data: block `b` stages rows `R b .. R b + R` (`R = rows_per_block`) in
/// shared memory with 16-byte asynchronous copies (all of a thread's in flight at once), makes its first 4 noise
/// values while they land, then thread `i < R` runs row `i`'s norm chain from shared memory (the same steps as
/// `row_norms_f32`: `fma(x, x, acc)` in column order, then `sqrt`) and its clip scale, and every thread takes
/// blocks of 4 values of the staged rows: `gaussian4`, the clip, `fma(sigma, g, y)`, one 16-byte store. The rows
/// are read from device memory once (`row_norms_f32` + `clip_noise` read them twice). `cp.async`: sm_80 and newer
/// (older images run the two kernels).
///
/// # Safety
/// `dim` a multiple of 4; `x` and `out` 16-byte aligned and holding `n_rows * dim` f32; grid
/// `ceil(n_rows / R)` blocks of `NOISE_THREADS` threads, `1 <= R <= NOISE_ROWS_MAX`, with
/// `noise_rows_shared_bytes(R, dim)` bytes of dynamic shared memory.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn sm80_clip_noise_rows(p: NoiseParams) {
    // SAFETY: forwarded contract.
    unsafe { clip_noise_rows::<false>(p) }
}

/// [`sm80_clip_noise_rows`] whose rows land by bulk copies (`cp.async.bulk`, one a row, issued by thread 0 and
/// counted by an `mbarrier`) instead of every thread's 16-byte `cp.async` loop: sm_90 (the sm_90a image).
///
/// # Safety
/// As [`sm80_clip_noise_rows`].
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn sm90a_clip_noise_rows(p: NoiseParams) {
    // SAFETY: forwarded contract.
    unsafe { clip_noise_rows::<true>(p) }
}

/// The body of [`sm80_clip_noise_rows`] (`BULK` false) and [`sm90a_clip_noise_rows`] (`BULK` true).
///
/// # Safety
/// As [`sm80_clip_noise_rows`]; `BULK` only on sm_90.
#[inline(always)]
unsafe fn clip_noise_rows<const BULK: bool>(p: NoiseParams) {
    let smem = dynamic_shared_f32();
    let t = thread_x();
    let quads = p.dim / 4;
    let stride = (p.dim + 4) as usize;
    let r0 = block_x() * p.rows_per_block;
    let rows = p.rows_per_block.min(p.n_rows - r0);
    let scales = smem.wrapping_add(p.rows_per_block as usize * stride);
    // Thread t takes pieces (16 bytes) t, t + NOISE_THREADS, .. of the block's rows, (row, q) stepped by
    // (step_row, step_q) with a carry rather than divided out at every piece.
    let (step_row, step_q) = (NOISE_THREADS / quads, NOISE_THREADS % quads);
    let next = |row: &mut u32, q: &mut u32| {
        *q += step_q;
        *row += step_row;
        if *q >= quads {
            *q -= quads;
            *row += 1;
        }
    };
    let (first_row, first_q) = (t / quads, t % quads);
    // The block's rows are contiguous in `x` and `out`: its piece `i` (16 bytes) lies `16 i` bytes past its first
    // row's start there, and at shared piece `i + row` (each staged row is one piece longer: `stride`), so a
    // thread steps `i` by NOISE_THREADS and carries `(row, q)` along for the padding, the chain and the counter.
    let first_piece = u64::from(r0) * u64::from(quads);
    let smem0 = shared_addr(smem);
    // The bulk copies' barrier, past the scales (noise_rows_shared_bytes).
    let bar = smem0 + 4 * (p.rows_per_block * (p.dim + 4) + NOISE_ROWS_MAX);
    if BULK {
        // Stage: thread 0 copies each row whole (its bytes are a multiple of 16, at 16-byte aligned places).
        if t == 0 {
            // SAFETY: the barrier's 8 bytes of this block's shared memory, used by nothing else.
            unsafe { mbarrier_init::<1>(bar) };
            fence_mbarrier_init();
            let bytes = 4 * p.dim;
            // SAFETY: the barrier expects the rows' bytes exactly, and this thread arrives once (its count).
            unsafe {
                asm!(
                    "{{",
                    ".reg .b64 st;",
                    "mbarrier.arrive.expect_tx.shared::cta.b64 st, [{b}], {n};",
                    "}}",
                    b = in(reg32) bar,
                    n = in(reg32) rows * bytes,
                    options(nostack)
                );
            }
            let mut row = 0;
            while row < rows {
                // SAFETY: r0 + row < n_rows: the row's dim f32 of x, 16-byte aligned (x is, and dim is a multiple
                // of 4); it lands in staged row `row` (row < R, 16-byte aligned: stride is a multiple of 4 f32).
                unsafe {
                    asm!(
                        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [{d}], [{s}], {n}, [{b}];",
                        d = in(reg32) smem0 + row * 4 * (p.dim + 4),
                        s = in(reg64) p.x + u64::from(r0 + row) * u64::from(bytes),
                        n = in(reg32) bytes,
                        b = in(reg32) bar,
                        options(nostack)
                    );
                }
                row += 1;
            }
        }
    } else {
        // Stage: every piece's copy in flight at once.
        let (mut src, mut dst) = (
            p.x + 16 * (first_piece + u64::from(t)),
            smem0 + 16 * (t + first_row),
        );
        let (mut row, mut q) = (first_row, first_q);
        while row < rows {
            // SAFETY: r0 + row < n_rows and q < dim / 4, so src (piece first_piece + i of x) is 16 readable,
            // 16-byte aligned bytes; dst (shared piece i + row) a 16-byte aligned piece of the staged rows
            // (row < R, 4 q + 3 < dim).
            unsafe { cp_async16(dst, src, 16) };
            let last = row;
            next(&mut row, &mut q);
            src += 16 * u64::from(NOISE_THREADS);
            dst += 16 * (NOISE_THREADS + row - last);
        }
        cp_async_commit();
    }
    // The first piece's noise while the copies land (it needs no data).
    let g_first = gaussian4(p.key, u64::from(r0 + first_row), first_q);
    if BULK {
        // Every thread that reads the rows waits for the barrier's first phase: it sees the copies' bytes then.
        // Before that, thread 0's initialisation must be visible to the others' waits.
        sync_threads();
        // SAFETY: the barrier is initialised (the block barrier above); sm_90.
        unsafe { mbarrier_wait(bar, 0) };
    } else {
        cp_async_wait::<0>();
        sync_threads();
    }
    if t < rows {
        // The row's norm chain, column order (the contract's `norm`), 16-byte reads.
        let row = smem.wrapping_add(t as usize * stride) as *const F4;
        let mut acc = 0.0f32;
        let mut q = 0;
        while q < quads as usize {
            // SAFETY: q < dim / 4: inside the staged row.
            let v = unsafe { *row.add(q) };
            unroll!(4, V: usize => {
                acc = fma(v.0[V], v.0[V], acc);
            });
            q += 1;
        }
        let nr = sqrt(acc);
        // A row that is not clipped takes the scale 1: `x * 1.0` is `x`, bit for bit (finite `x`, `-0.0` and
        // subnormals included), as the contract's `y = x` asks.
        let s = if nr > p.clip { p.clip / nr } else { 1.0 };
        // SAFETY: t < R: inside the scales.
        unsafe { *scales.add(t as usize) = s };
    }
    sync_threads();
    let out = (p.out as *mut F4).wrapping_add(first_piece as usize);
    let staged = smem as *const F4;
    let (mut i, mut row, mut q) = (t, first_row, first_q);
    let mut g = g_first;
    while row < rows {
        // SAFETY: row < R and 4 q + 3 < dim: shared piece i + row is inside the staged rows, row inside the
        // scales.
        let (v, s) = unsafe { (*staged.add((i + row) as usize), *scales.add(row as usize)) };
        let mut o = F4([0.0; 4]);
        unroll!(4, V: usize => {
            o.0[V] = fma(p.sigma, g[V], v.0[V] * s);
        });
        // SAFETY: r0 + row < n_rows and q < dim / 4: piece first_piece + i of out.
        unsafe { *out.add(i as usize) = o };
        i += NOISE_THREADS;
        next(&mut row, &mut q);
        if row < rows {
            g = gaussian4(p.key, u64::from(r0 + row), q);
        }
    }
}
