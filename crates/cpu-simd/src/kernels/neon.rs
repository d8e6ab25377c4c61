//! aarch64 Advanced SIMD (NEON), 4 lanes, 32 vector registers. The same two layouts as the AVX2 kernel
//! (`avx2.rs`), 4 lanes wide:
//!
//! - Row lanes (norms, one to three queries): four `k` of four rows are loaded as four vectors (one per
//!   row) and transposed in registers (`trn1`/`trn2` on 32-bit then 64-bit elements), so vector `j`
//!   holds every row's value at `k + j` (lane = row); the query value at `k + j` is broadcast from a
//!   vector of four query values and FMA'd against it.
//! - Query lanes (four or more queries): eight queries transposed once to `k`-major (two vectors per `k`),
//!   four consecutive values of a corpus row loaded as one vector and broadcast lane by lane.
//!
//! Either way every lane runs its own (query, row) chain over `k` ascending, with `fmla` (a fused
//! multiply-add, one rounding) exactly where `docs/numerics.md` says `fma` and `fsub` where it says
//! `q[k] - c[k]`: the scalar reference's bits. AArch64's Advanced SIMD follows `FPCR` (round to nearest,
//! no flush to zero unless a program sets `FPCR.FZ`, which Linux does not), unlike 32-bit ARM NEON,
//! which always flushes subnormals; that is why this path is aarch64 only.

use super::{DOT, DOTSQ, L2, Queries, SQ, scatter};
use core::arch::aarch64::*;

const LANES: usize = 4;
/// Row tiles in flight in the one-query pass (four independent chains per lane hide the FMA latency).
const ROW_TILES: usize = 4;
/// Query vectors per query-lane block (`QV * LANES` queries).
const QV: usize = 2;
/// Queries per query-lane group.
pub(super) const QUERY_LANES: usize = QV * LANES;
/// The fewest queries that run query lanes (fewer run row lanes).
pub(super) const QUERY_LANES_MIN: usize = LANES;
/// Corpus rows per query-lane block (`R * QV` accumulators, `R` row vectors: 24 of the 32 registers).
const R: usize = 8;

/// # Safety
/// The CPU must support NEON (every aarch64 CPU that runs a `std` target does). `queries` and `rows`
/// hold whole rows of `dim` values; `out` holds `(n_queries - 1) * out_stride + n_rows` values with
/// `out_stride >= n_rows` (checked by the caller).
#[target_feature(enable = "neon")]
pub(super) unsafe fn chains(
    mode: u8,
    queries: &Queries<'_>,
    rows: &[f32],
    dim: usize,
    out: &mut [f32],
    out_stride: usize,
) {
    let nq = queries.values.len() / dim;
    if mode == SQ || mode == DOTSQ || nq < QUERY_LANES_MIN {
        row_lanes(mode, queries.values, rows, dim, out, out_stride);
    } else {
        query_lanes(mode, queries, rows, dim, out, out_stride);
    }
}

/// One step of a chain, for lanes of `c` (row values) and `q` (query values) at the same `k`:
/// `fma(q, c, acc)`, `fma(q - c, q - c, acc)` or `fma(c, c, acc)`.
#[target_feature(enable = "neon")]
fn step<const MODE: u8>(q: float32x4_t, c: float32x4_t, acc: float32x4_t) -> float32x4_t {
    match MODE {
        DOT | DOTSQ => vfmaq_f32(acc, q, c),
        L2 => {
            let t = vsubq_f32(q, c);
            vfmaq_f32(acc, t, t)
        }
        _ => vfmaq_f32(acc, c, c),
    }
}

/// Lane `j` of `v` in every lane (`j < 4`; the loops that call it are unrolled, so `j` is a constant
/// and this is one `dup` or folds into `fmla ..., v.s[j]`).
#[target_feature(enable = "neon")]
fn bcast(v: float32x4_t, j: usize) -> float32x4_t {
    match j {
        0 => vdupq_laneq_f32::<0>(v),
        1 => vdupq_laneq_f32::<1>(v),
        2 => vdupq_laneq_f32::<2>(v),
        _ => vdupq_laneq_f32::<3>(v),
    }
}

/// Four lanes into an array.
#[target_feature(enable = "neon")]
fn lanes(v: float32x4_t) -> [f32; LANES] {
    let mut o = [0.0f32; LANES];
    // SAFETY: `o` holds LANES f32; `vst1q_f32` takes an unaligned pointer.
    unsafe { vst1q_f32(o.as_mut_ptr(), v) };
    o
}

#[target_feature(enable = "neon")]
fn row_lanes(
    mode: u8,
    queries: &[f32],
    rows: &[f32],
    dim: usize,
    out: &mut [f32],
    out_stride: usize,
) {
    let nq = if mode == SQ { 1 } else { queries.len() / dim };
    let nr = rows.len() / dim;
    let mut pad = Vec::new();
    let mut r = 0;
    if mode == DOTSQ {
        // One query: its dot chain with every row into `out[..nr]`, every row's sqnorm chain into
        // `out[out_stride..]`, from the same transposed values (one pass instead of two).
        while r < nr {
            if nr - r >= ROW_TILES * LANES {
                let block = &rows[r * dim..(r + ROW_TILES * LANES) * dim];
                let res = row_block::<DOTSQ, 2, ROW_TILES>(queries, block, dim);
                for (t, tile) in res.iter().enumerate() {
                    out[r + t * LANES..r + (t + 1) * LANES].copy_from_slice(&tile[0]);
                    out[out_stride + r + t * LANES..out_stride + r + (t + 1) * LANES]
                        .copy_from_slice(&tile[1]);
                }
                r += ROW_TILES * LANES;
                continue;
            }
            let valid = (nr - r).min(LANES);
            pad.clear();
            pad.extend_from_slice(&rows[r * dim..(r + valid) * dim]);
            pad.resize(LANES * dim, 0.0);
            let res = row_block::<DOTSQ, 2, 1>(queries, &pad, dim);
            out[r..r + valid].copy_from_slice(&res[0][0][..valid]);
            out[out_stride + r..out_stride + r + valid].copy_from_slice(&res[0][1][..valid]);
            r += valid;
        }
        return;
    }
    while r < nr {
        // ROW_TILES tiles at once when one query (as many independent chains per lane hide the FMA latency).
        if nq == 1 && nr - r >= ROW_TILES * LANES {
            let block = &rows[r * dim..(r + ROW_TILES * LANES) * dim];
            let res = match mode {
                SQ => row_block::<SQ, 1, ROW_TILES>(queries, block, dim),
                L2 => row_block::<L2, 1, ROW_TILES>(queries, block, dim),
                _ => row_block::<DOT, 1, ROW_TILES>(queries, block, dim),
            };
            for (t, tile) in res.iter().enumerate() {
                out[r + t * LANES..r + (t + 1) * LANES].copy_from_slice(&tile[0]);
            }
            r += ROW_TILES * LANES;
            continue;
        }
        let valid = (nr - r).min(LANES);
        let block: &[f32] = if valid == LANES {
            &rows[r * dim..(r + LANES) * dim]
        } else {
            // Unused lanes get zero rows; their results are discarded.
            pad.clear();
            pad.extend_from_slice(&rows[r * dim..nr * dim]);
            pad.resize(LANES * dim, 0.0);
            &pad
        };
        let mut qi = 0;
        while qi < nq {
            let g = (nq - qi).min(3);
            let q = &queries[qi * dim..];
            let res: [[f32; LANES]; 3] = match (mode, g) {
                (SQ, _) => widen(row_block::<SQ, 1, 1>(q, block, dim)[0]),
                (L2, 1) => widen(row_block::<L2, 1, 1>(q, block, dim)[0]),
                (L2, 2) => widen(row_block::<L2, 2, 1>(q, block, dim)[0]),
                (L2, _) => widen(row_block::<L2, 3, 1>(q, block, dim)[0]),
                (_, 1) => widen(row_block::<DOT, 1, 1>(q, block, dim)[0]),
                (_, 2) => widen(row_block::<DOT, 2, 1>(q, block, dim)[0]),
                _ => widen(row_block::<DOT, 3, 1>(q, block, dim)[0]),
            };
            for (gi, lanes) in res.iter().enumerate().take(g) {
                let o = &mut out[(qi + gi) * out_stride + r..][..valid];
                o.copy_from_slice(&lanes[..valid]);
            }
            qi += g;
        }
        r += valid;
    }
}

fn widen<const G: usize>(x: [[f32; LANES]; G]) -> [[f32; LANES]; 3] {
    let mut o = [[0.0; LANES]; 3];
    o[..G].copy_from_slice(&x);
    o
}

/// The query operand of `step` for query `g` at `k + j`: the row values themselves for a norm chain,
/// else query `g`'s value at `k + j` in every lane.
#[target_feature(enable = "neon")]
fn query_operand<const MODE: u8>(
    qv: &[float32x4_t],
    g: usize,
    j: usize,
    c: float32x4_t,
) -> float32x4_t {
    if MODE == SQ || (MODE == DOTSQ && g == 1) {
        c
    } else {
        bcast(qv[g], j)
    }
}

/// Chains of `G` queries (`q` holds them back to back) against the `NT * LANES` rows of `block`, in
/// `NT` tiles of `LANES` rows. Four `k` at a time: one 128-bit load of four consecutive values per row,
/// then a 4x4 transpose gives, per `k`, the vector of every row's value (lane = row).
#[target_feature(enable = "neon")]
fn row_block<const MODE: u8, const G: usize, const NT: usize>(
    q: &[f32],
    block: &[f32],
    dim: usize,
) -> [[[f32; LANES]; G]; NT] {
    assert!(
        block.len() == NT * LANES * dim
            && match MODE {
                SQ => true,
                DOTSQ => G == 2 && q.len() >= dim,
                _ => q.len() >= G * dim,
            }
    );
    let bp = block.as_ptr();
    let qp = q.as_ptr();
    let mut acc = [[vdupq_n_f32(0.0); G]; NT];
    let full = dim - dim % 4;
    let mut k = 0;
    while k < full {
        let mut qv = [vdupq_n_f32(0.0); G];
        for (g, v) in qv.iter_mut().enumerate() {
            if MODE != SQ && !(MODE == DOTSQ && g == 1) {
                // SAFETY: `q` holds `G * dim` values (or `dim` for DOTSQ, where only `g == 0` reads
                // it), asserted above; `g < G` and `k + 4 <= dim`.
                *v = unsafe { vld1q_f32(qp.add(g * dim + k)) };
            }
        }
        for (t, acc_t) in acc.iter_mut().enumerate() {
            let base = t * LANES * dim;
            // SAFETY: `k + 4 <= dim` and row `a < LANES` of tile `t < NT`, so every 4-value load lies
            // inside `block` (length `NT * LANES * dim`, asserted above).
            let v = unsafe {
                let r = |a: usize| bp.add(base + a * dim + k);
                [
                    vld1q_f32(r(0)),
                    vld1q_f32(r(1)),
                    vld1q_f32(r(2)),
                    vld1q_f32(r(3)),
                ]
            };
            // v[a] = row a at k .. k + 4. t0 = [r0 k0, r1 k0, r0 k2, r1 k2], t1 = the same at k1, k3;
            // t2, t3 likewise for rows 2 and 3. Then 64-bit pairs: tt[j] = [r0, r1, r2, r3] at k + j.
            let t0 = vreinterpretq_f64_f32(vtrn1q_f32(v[0], v[1]));
            let t1 = vreinterpretq_f64_f32(vtrn2q_f32(v[0], v[1]));
            let t2 = vreinterpretq_f64_f32(vtrn1q_f32(v[2], v[3]));
            let t3 = vreinterpretq_f64_f32(vtrn2q_f32(v[2], v[3]));
            let tt = [
                vreinterpretq_f32_f64(vtrn1q_f64(t0, t2)),
                vreinterpretq_f32_f64(vtrn1q_f64(t1, t3)),
                vreinterpretq_f32_f64(vtrn2q_f64(t0, t2)),
                vreinterpretq_f32_f64(vtrn2q_f64(t1, t3)),
            ];
            for (j, tj) in tt.iter().enumerate() {
                for (g, a) in acc_t.iter_mut().enumerate() {
                    let qb = query_operand::<MODE>(&qv, g, j, *tj);
                    *a = step::<MODE>(qb, *tj, *a);
                }
            }
        }
        k += 4;
    }
    while k < dim {
        // Remaining k one at a time: exactly the chain's remaining steps, no padding.
        for (t, acc_t) in acc.iter_mut().enumerate() {
            let mut v = [0.0f32; LANES];
            for (i, vi) in v.iter_mut().enumerate() {
                *vi = block[(t * LANES + i) * dim + k];
            }
            // SAFETY: `v` holds LANES f32.
            let c = unsafe { vld1q_f32(v.as_ptr()) };
            for (g, a) in acc_t.iter_mut().enumerate() {
                let qb = if MODE == SQ || (MODE == DOTSQ && g == 1) {
                    c
                } else {
                    vdupq_n_f32(q[g * dim + k])
                };
                *a = step::<MODE>(qb, c, *a);
            }
        }
        k += 1;
    }
    let mut res = [[[0.0f32; LANES]; G]; NT];
    for (rt, at) in res.iter_mut().zip(acc) {
        for (r, a) in rt.iter_mut().zip(at) {
            *r = lanes(a);
        }
    }
    res
}

#[target_feature(enable = "neon")]
fn query_lanes(
    mode: u8,
    queries: &Queries<'_>,
    rows: &[f32],
    dim: usize,
    out: &mut [f32],
    out_stride: usize,
) {
    const W: usize = QUERY_LANES;
    let nq = queries.values.len() / dim;
    let nr = rows.len() / dim;
    // Unused lanes hold zero queries; their results are discarded.
    let groups = queries.lanes(W, dim);
    for (g, qt) in groups.chunks_exact(dim * W).enumerate() {
        let qb = g * W;
        let nl = (nq - qb).min(W);
        let mut r = 0;
        while r + R <= nr {
            let res = if mode == L2 {
                query_block::<L2, R>(qt, &rows[r * dim..(r + R) * dim], dim)
            } else {
                query_block::<DOT, R>(qt, &rows[r * dim..(r + R) * dim], dim)
            };
            scatter(&[res], out, out_stride, qb, qb + nl, r);
            r += R;
        }
        while r < nr {
            let res = if mode == L2 {
                query_block::<L2, 1>(qt, &rows[r * dim..(r + 1) * dim], dim)
            } else {
                query_block::<DOT, 1>(qt, &rows[r * dim..(r + 1) * dim], dim)
            };
            scatter(&[res], out, out_stride, qb, qb + nl, r);
            r += 1;
        }
    }
}

/// Chains of the `QV * 4` queries in `qt` (`k`-major, `QV * 4` per `k`) against `RR` rows. Four `k`
/// at a time: one load of four consecutive values per row, each broadcast lane by lane in `k` order.
#[target_feature(enable = "neon")]
fn query_block<const MODE: u8, const RR: usize>(
    qt: &[f32],
    rows: &[f32],
    dim: usize,
) -> [[f32; QV * LANES]; RR] {
    const W: usize = QV * LANES;
    assert!(qt.len() == dim * W && rows.len() == RR * dim);
    let qp = qt.as_ptr();
    let rp = rows.as_ptr();
    let mut acc = [[vdupq_n_f32(0.0); QV]; RR];
    let full = dim - dim % 4;
    let mut k = 0;
    while k < full {
        let mut cv = [vdupq_n_f32(0.0); RR];
        for (i, c) in cv.iter_mut().enumerate() {
            // SAFETY: `i < RR` and `k + 4 <= dim`, inside `rows` (length `RR * dim`).
            *c = unsafe { vld1q_f32(rp.add(i * dim + k)) };
        }
        for j in 0..4 {
            let mut qv = [vdupq_n_f32(0.0); QV];
            for (h, v) in qv.iter_mut().enumerate() {
                // SAFETY: `k + j < dim` and `h < QV`, so `qt[(k + j) * W + 4h ..][..4]` is inside `qt`
                // (length `W * dim`).
                *v = unsafe { vld1q_f32(qp.add((k + j) * W + h * LANES)) };
            }
            for (a, c) in acc.iter_mut().zip(&cv) {
                let cb = bcast(*c, j);
                for (ah, q) in a.iter_mut().zip(&qv) {
                    *ah = step::<MODE>(*q, cb, *ah);
                }
            }
        }
        k += 4;
    }
    while k < dim {
        let mut qv = [vdupq_n_f32(0.0); QV];
        for (h, v) in qv.iter_mut().enumerate() {
            // SAFETY: `k < dim` and `h < QV`, inside `qt` (length `W * dim`).
            *v = unsafe { vld1q_f32(qp.add(k * W + h * LANES)) };
        }
        for (i, a) in acc.iter_mut().enumerate() {
            let cb = vdupq_n_f32(rows[i * dim + k]);
            for (ah, q) in a.iter_mut().zip(&qv) {
                *ah = step::<MODE>(*q, cb, *ah);
            }
        }
        k += 1;
    }
    let mut res = [[0.0f32; W]; RR];
    for (r, a) in res.iter_mut().zip(acc) {
        for (h, ah) in a.iter().enumerate() {
            r[h * LANES..(h + 1) * LANES].copy_from_slice(&lanes(*ah));
        }
    }
    res
}
