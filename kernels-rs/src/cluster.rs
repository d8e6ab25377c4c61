//! k-means pieces (`docs/numerics.md`, "k-means"): the assignment is `gemm_l2_argmin` in `dense.rs`; here
//! are the f64 inertia blocks, the centroid update, and a fill used to reset the argmin keys. Also
//! clip-and-noise, whose random stream comes from the same shared Philox code as the CPU's.

use crate::util::{block_dim_x, block_x, fma, thread_x};
use recall_kernel_shared::math::gaussian4;
use recall_kernel_shared::{CentroidParams, FillParams, InertiaParams, NoiseParams};

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
