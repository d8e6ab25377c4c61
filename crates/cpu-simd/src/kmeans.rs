//! k-means (`docs/numerics.md`, "k-means"): Philox-seeded, Lloyd iterations, exact order throughout.

use crate::dense::{check_matrix, check_matrix_shape};
use crate::kernels::{self, L2};
use crate::simd::Cpu;
use crate::topk::{Order, pair_key};
use crate::{CpuError, PAR_MIN_WORK, in_pool};
use rayon::prelude::*;
use recall_kernel_shared::math::{DOMAIN_KMEANS, philox_key, philox_word, uniform_below};
use std::collections::HashMap;

/// Points per block of the inertia sum.
pub const INERTIA_BLOCK: usize = 256;
/// Points per assignment task (a block of points meets every centroid while the centroids stay cached).
const ASSIGN_BLOCK: usize = 64;

/// The index of `row`'s smallest value, ties to the lower index: the `c` of the smallest
/// `pair_key(row[c], c, LowerFirst)` (so `-0.0` ties `+0.0`, and a NaN comes after every number), found 16
/// lanes at a time. Each lane keeps the first of its smallest values (a later value replaces it only when
/// smaller, or when the lane holds a NaN and the value is a number), then the lanes and the tail meet by the
/// key itself. The assignment's argmin over 1,024 centroids per point took a fifth of a k-means iteration as
/// one key per value.
fn argmin(row: &[f32]) -> u32 {
    const W: usize = 16;
    let key = |c: usize| pair_key(row[c], c as u32, Order::LowerFirst);
    let mut chunks = row.chunks_exact(W);
    let mut best = u64::MAX;
    if let Some(first) = chunks.next() {
        let mut bv: [f32; W] = core::array::from_fn(|l| first[l]);
        let mut bi: [u32; W] = core::array::from_fn(|l| l as u32);
        for (j, ch) in chunks.by_ref().enumerate() {
            let base = ((j + 1) * W) as u32;
            for l in 0..W {
                let v = ch[l];
                // `|` and `&`, not `||` and `&&`: no branch, so the lanes become one vector compare and blend.
                #[allow(clippy::eq_op)]
                let take = (v < bv[l]) | ((bv[l] != bv[l]) & (v == v));
                bv[l] = if take { v } else { bv[l] };
                bi[l] = if take { base + l as u32 } else { bi[l] };
            }
        }
        for l in 0..W {
            best = best.min(pair_key(bv[l], bi[l], Order::LowerFirst));
        }
    }
    for c in row.len() - chunks.remainder().len()..row.len() {
        best = best.min(key(c));
    }
    best as u32
}

/// The result of [`kmeans`].
#[derive(Clone, Debug, PartialEq)]
pub struct KMeans {
    /// `k * dim` values, row-major: the centroids after the last update.
    pub centroids: Vec<f32>,
    /// Per point, its centroid in the last assignment step.
    pub assignments: Vec<u32>,
    /// Per iteration, the inertia (sum of squared distances to the assigned centroid) of its assignment step.
    pub inertia: Vec<f64>,
}

/// The overflow rule of `docs/numerics.md` ("k-means"), on a finished result, so that every device applies it to
/// the same bits: [`CpuError::KMeansOverflow`] at the first iteration whose inertia is not finite, else at the last
/// iteration where a final centroid value is not.
pub fn check_kmeans_result(r: &KMeans) -> Result<(), CpuError> {
    if let Some(i) = r.inertia.iter().position(|x| !x.is_finite()) {
        return Err(CpuError::KMeansOverflow { iteration: i + 1 });
    }
    if r.centroids.iter().any(|x| !x.is_finite()) {
        return Err(CpuError::KMeansOverflow {
            iteration: r.inertia.len(),
        });
    }
    Ok(())
}

/// k-means of `points` (`n * dim`, row-major) into `k` clusters for `iters` Lloyd iterations.
pub fn kmeans(
    points: &[f32],
    dim: usize,
    k: usize,
    iters: usize,
    seed: u64,
) -> Result<KMeans, CpuError> {
    Cpu::new().kmeans(points, dim, k, iters, seed)
}

/// The seeding of `docs/numerics.md`: the first `k` entries of a Philox-driven Fisher-Yates shuffle of
/// `0 .. n` (`1 <= k <= n <= u32::MAX`).
pub fn kmeans_seed_indices(n: usize, k: usize, seed: u64) -> Result<Vec<u32>, CpuError> {
    if n > u32::MAX as usize {
        return Err(CpuError::TooLarge {
            what: "points",
            len: n,
            max: u32::MAX as usize,
        });
    }
    if k == 0 || k > n {
        return Err(CpuError::KOutOfRange { k, n });
    }
    Ok(seed_indices(n as u32, k as u32, seed))
}

fn seed_indices(n: u32, k: u32, seed: u64) -> Vec<u32> {
    let key = philox_key(seed);
    let mut word = 0u64;
    let mut next = || {
        let w = philox_word(key, DOMAIN_KMEANS, word);
        word += 1;
        w
    };
    let mut swapped: HashMap<u32, u32> = HashMap::new();
    let mut out = Vec::with_capacity(k as usize);
    for i in 0..k {
        let j = i + uniform_below(n - i, &mut next);
        let at_j = *swapped.get(&j).unwrap_or(&j);
        let at_i = *swapped.get(&i).unwrap_or(&i);
        swapped.insert(j, at_i);
        out.push(at_j);
    }
    out
}

/// The input checks of [`kmeans`] (returns the number of points), for callers that validate before
/// choosing a device.
pub fn check_kmeans_inputs(
    points: &[f32],
    dim: usize,
    k: usize,
    iters: usize,
) -> Result<usize, CpuError> {
    check_matrix("points", points, dim)?;
    check_kmeans_shape(points, dim, k, iters)
}

/// [`check_kmeans_inputs`] without the scan over values.
fn check_kmeans_shape(
    points: &[f32],
    dim: usize,
    k: usize,
    iters: usize,
) -> Result<usize, CpuError> {
    let n = check_matrix_shape("points", points, dim)?;
    if n > u32::MAX as usize {
        return Err(CpuError::TooLarge {
            what: "points",
            len: n,
            max: u32::MAX as usize,
        });
    }
    if k == 0 || k > n {
        return Err(CpuError::KOutOfRange { k, n });
    }
    if iters == 0 {
        return Err(CpuError::ParamOutOfRange {
            what: "iterations",
            value: "0".into(),
            expected: "at least 1",
        });
    }
    Ok(n)
}

impl Cpu {
    /// k-means of `points` (`n * dim`, row-major) into `k` clusters (`1 <= k <= n`) for `iters >= 1`
    /// Lloyd iterations, seeded from `seed`.
    pub fn kmeans(
        &self,
        points: &[f32],
        dim: usize,
        k: usize,
        iters: usize,
        seed: u64,
    ) -> Result<KMeans, CpuError> {
        let n = if self.is_prevalidated() {
            check_kmeans_shape(points, dim, k, iters)?
        } else {
            check_kmeans_inputs(points, dim, k, iters)?
        };
        let mut centroids = Vec::with_capacity(k * dim);
        for p in kmeans_seed_indices(n, k, seed)? {
            centroids.extend_from_slice(&points[p as usize * dim..(p as usize + 1) * dim]);
        }
        let mut assignments = vec![0u32; n];
        let mut dists = vec![0f32; n];
        // Grown as the iterations run: `iters` is the caller's, and reserving it up front panicked (capacity
        // overflow) or aborted (a failed allocation) for a huge count.
        let mut inertia = Vec::new();
        for _ in 0..iters {
            self.assign(points, dim, &centroids, &mut assignments, &mut dists);
            let it = inertia_of(&dists);
            inertia.push(it);
            if !it.is_finite() {
                // `check_kmeans_result` below names this iteration whatever the later ones do: stop here.
                break;
            }
            update(points, dim, &assignments, &mut centroids);
        }
        let r = KMeans {
            centroids,
            assignments,
            inertia,
        };
        check_kmeans_result(&r)?;
        Ok(r)
    }

    /// Assignment step: per point the centroid of smallest `l2sq`, ties to the lower index.
    fn assign(
        &self,
        points: &[f32],
        dim: usize,
        centroids: &[f32],
        assign: &mut [u32],
        dists: &mut [f32],
    ) {
        let k = centroids.len() / dim;
        let level = self.level();
        let work = |(b, (a, d)): (usize, (&mut [u32], &mut [f32])), buf: &mut Vec<f32>| {
            let p0 = b * ASSIGN_BLOCK;
            let pts = &points[p0 * dim..(p0 + a.len()) * dim];
            buf.clear();
            buf.resize(a.len() * k, 0.0);
            kernels::chains(
                level,
                L2,
                &kernels::Queries::plain(pts),
                centroids,
                dim,
                buf,
                k,
            );
            for ((row, a), d) in buf.chunks_exact(k).zip(a.iter_mut()).zip(d.iter_mut()) {
                *a = argmin(row);
                *d = row[*a as usize];
            }
        };
        if points.len() * k >= PAR_MIN_WORK {
            in_pool(|| {
                assign
                    .par_chunks_mut(ASSIGN_BLOCK)
                    .zip(dists.par_chunks_mut(ASSIGN_BLOCK))
                    .enumerate()
                    .for_each_init(Vec::new, |buf, x| work(x, buf))
            });
        } else {
            let mut buf = Vec::new();
            let blocks = assign
                .chunks_mut(ASSIGN_BLOCK)
                .zip(dists.chunks_mut(ASSIGN_BLOCK))
                .enumerate();
            blocks.for_each(|x| work(x, &mut buf));
        }
    }
}

/// Inertia in f64: blocks of 256 points summed in order, block sums added in order.
pub(crate) fn inertia_of(dists: &[f32]) -> f64 {
    let mut total = 0.0f64;
    for block in dists.chunks(INERTIA_BLOCK) {
        let mut s = 0.0f64;
        for d in block {
            s += *d as f64;
        }
        total += s;
    }
    total
}

/// Update step: per centroid the members' sum in ascending point order (plain adds), divided by the count;
/// a centroid without members keeps its value.
fn update(points: &[f32], dim: usize, assign: &[u32], centroids: &mut [f32]) {
    let k = centroids.len() / dim;
    // Members of each centroid, ascending point index (a stable counting sort).
    let mut start = vec![0usize; k + 1];
    for a in assign {
        start[*a as usize + 1] += 1;
    }
    for c in 0..k {
        start[c + 1] += start[c];
    }
    let mut cursor = start[..k].to_vec();
    let mut members = vec![0u32; assign.len()];
    for (p, a) in assign.iter().enumerate() {
        members[cursor[*a as usize]] = p as u32;
        cursor[*a as usize] += 1;
    }
    let work = |(c, cen): (usize, &mut [f32])| {
        let m = &members[start[c]..start[c + 1]];
        if m.is_empty() {
            return;
        }
        let mut sum = vec![0.0f32; dim];
        for p in m {
            let x = &points[*p as usize * dim..(*p as usize + 1) * dim];
            for (s, v) in sum.iter_mut().zip(x) {
                *s += *v;
            }
        }
        let count = m.len() as f32;
        for (o, s) in cen.iter_mut().zip(&sum) {
            *o = *s / count;
        }
    };
    if points.len() >= PAR_MIN_WORK {
        in_pool(|| centroids.par_chunks_mut(dim).enumerate().for_each(work));
    } else {
        centroids.chunks_mut(dim).enumerate().for_each(work);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `argmin` is the smallest pair key's index for rows of every length around its 16 lanes, full of ties,
    /// zeros of both signs, infinities and NaNs.
    #[test]
    fn argmin_is_the_smallest_pair_key() {
        let pool = [
            0.0f32,
            -0.0,
            1.0,
            2.0,
            0.5,
            f32::INFINITY,
            f32::NAN,
            1e-30,
            f32::MAX,
        ];
        let mut s = 0x9E37_79B9_7F4A_7C15u64;
        for len in 1..=70 {
            for round in 0..200 {
                let row: Vec<f32> = (0..len)
                    .map(|_| {
                        s = s
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        // Some rows draw only from the first few values (many ties), some from all.
                        let span = if round % 3 == 0 { 3 } else { pool.len() };
                        pool[(s >> 33) as usize % span]
                    })
                    .collect();
                let want = (0..len)
                    .map(|c| pair_key(row[c], c as u32, Order::LowerFirst))
                    .min()
                    .map(|k| k as u32);
                assert_eq!(Some(argmin(&row)), want, "{row:?}");
            }
        }
    }
}
