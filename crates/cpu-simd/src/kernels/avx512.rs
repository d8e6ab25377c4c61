//! AVX-512F, 16 lanes. Row lanes: 16 rows transposed 16x16 in registers, a broadcast query value FMA'd
//! against the vector of 16 rows' values at the same `k`. Query lanes: 16 queries transposed once to
//! `k`-major, a broadcast corpus value FMA'd against them.

use super::{DOT, L2, SQ};
use core::arch::x86_64::*;

const LANES: usize = 16;

/// # Safety
/// The CPU must support AVX-512F, AVX2 and FMA. `queries` and `rows` hold whole rows of `dim` values; `out` holds
/// `(n_queries - 1) * out_stride + n_rows` values with `out_stride >= n_rows` (checked by the caller).
#[target_feature(enable = "avx512f,avx2,fma")]
pub(super) unsafe fn chains(
    mode: u8,
    queries: &[f32],
    rows: &[f32],
    dim: usize,
    out: &mut [f32],
    out_stride: usize,
) {
    let nq = queries.len() / dim;
    if mode == SQ || nq < 8 {
        row_lanes(mode, queries, rows, dim, out, out_stride);
    } else {
        query_lanes(mode, queries, rows, dim, out, out_stride);
    }
}

#[target_feature(enable = "avx512f,avx2,fma")]
fn transpose16(r: [__m512; 16]) -> [__m512; 16] {
    let mut t = [_mm512_setzero_ps(); 16];
    for i in 0..8 {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    let mut u = [_mm512_setzero_ps(); 16];
    for i in 0..4 {
        let (a0, a1) = (_mm512_castps_pd(t[4 * i]), _mm512_castps_pd(t[4 * i + 1]));
        let (b0, b1) = (
            _mm512_castps_pd(t[4 * i + 2]),
            _mm512_castps_pd(t[4 * i + 3]),
        );
        u[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a0, b0));
        u[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a0, b0));
        u[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(a1, b1));
        u[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(a1, b1));
    }
    // u[4 * i + c] holds, in each 128-bit block b, rows 4i..4i+4 at column 4b + c.
    let mut v = [_mm512_setzero_ps(); 16];
    for c in 0..4 {
        for h in 0..2 {
            let (x, y) = (u[8 * h + c], u[8 * h + 4 + c]);
            v[8 * h + c] = _mm512_shuffle_f32x4::<0x88>(x, y);
            v[8 * h + 4 + c] = _mm512_shuffle_f32x4::<0xDD>(x, y);
        }
    }
    let mut o = [_mm512_setzero_ps(); 16];
    for c in 0..8 {
        o[c] = _mm512_shuffle_f32x4::<0x88>(v[c], v[8 + c]);
        o[8 + c] = _mm512_shuffle_f32x4::<0xDD>(v[c], v[8 + c]);
    }
    o
}

/// One step of a chain, for lanes of `c` (row values) and `q` (query values) at the same `k`.
#[target_feature(enable = "avx512f,avx2,fma")]
fn step<const MODE: u8>(q: __m512, c: __m512, acc: __m512) -> __m512 {
    match MODE {
        DOT => _mm512_fmadd_ps(q, c, acc),
        L2 => {
            let t = _mm512_sub_ps(q, c);
            _mm512_fmadd_ps(t, t, acc)
        }
        _ => _mm512_fmadd_ps(c, c, acc),
    }
}

#[target_feature(enable = "avx512f,avx2,fma")]
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
    while r < nr {
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
                (SQ, _) => widen(row_block::<SQ, 1>(q, block, dim)),
                (L2, 1) => widen(row_block::<L2, 1>(q, block, dim)),
                (L2, 2) => widen(row_block::<L2, 2>(q, block, dim)),
                (L2, _) => widen(row_block::<L2, 3>(q, block, dim)),
                (_, 1) => widen(row_block::<DOT, 1>(q, block, dim)),
                (_, 2) => widen(row_block::<DOT, 2>(q, block, dim)),
                _ => widen(row_block::<DOT, 3>(q, block, dim)),
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

/// Chains of `G` queries (`q` holds them back to back) against the 16 rows of `block`.
#[target_feature(enable = "avx512f,avx2,fma")]
fn row_block<const MODE: u8, const G: usize>(
    q: &[f32],
    block: &[f32],
    dim: usize,
) -> [[f32; LANES]; G] {
    assert!(block.len() == LANES * dim && (MODE == SQ || q.len() >= G * dim));
    let bp = block.as_ptr();
    let qp = q.as_ptr();
    let mut acc = [_mm512_setzero_ps(); G];
    let full = dim - dim % LANES;
    let mut k = 0;
    while k < full {
        let mut rr = [_mm512_setzero_ps(); LANES];
        for (i, ri) in rr.iter_mut().enumerate() {
            // SAFETY: `k + 16 <= dim`, so the load reads `block[i * dim + k .. i * dim + k + 16]`, inside
            // `block` (length `16 * dim`, asserted above).
            *ri = unsafe { _mm512_loadu_ps(bp.add(i * dim + k)) };
        }
        let t = transpose16(rr);
        for (j, tj) in t.iter().enumerate() {
            for (g, a) in acc.iter_mut().enumerate() {
                let qv = if MODE == SQ {
                    *tj
                } else {
                    // SAFETY: not SQ, so `q` holds `G * dim` values (asserted); `g < G`, `k + j < dim`.
                    _mm512_set1_ps(unsafe { *qp.add(g * dim + k + j) })
                };
                *a = step::<MODE>(qv, *tj, *a);
            }
        }
        k += LANES;
    }
    while k < dim {
        // Remaining k one at a time: exactly the chain's remaining steps, no padding.
        let mut v = [0.0f32; LANES];
        for (i, vi) in v.iter_mut().enumerate() {
            *vi = block[i * dim + k];
        }
        // SAFETY: `v` holds 16 f32.
        let c = unsafe { _mm512_loadu_ps(v.as_ptr()) };
        for (g, a) in acc.iter_mut().enumerate() {
            let qv = if MODE == SQ {
                c
            } else {
                _mm512_set1_ps(q[g * dim + k])
            };
            *a = step::<MODE>(qv, c, *a);
        }
        k += 1;
    }
    let mut res = [[0.0f32; LANES]; G];
    for (r, a) in res.iter_mut().zip(acc) {
        // SAFETY: `r` holds 16 f32.
        unsafe { _mm512_storeu_ps(r.as_mut_ptr(), a) };
    }
    res
}

#[target_feature(enable = "avx512f,avx2,fma")]
fn query_lanes(
    mode: u8,
    queries: &[f32],
    rows: &[f32],
    dim: usize,
    out: &mut [f32],
    out_stride: usize,
) {
    let nq = queries.len() / dim;
    let nr = rows.len() / dim;
    let mut qt = vec![0.0f32; dim * LANES];
    let mut qb = 0;
    while qb < nq {
        let nl = (nq - qb).min(LANES);
        // Unused lanes hold zero queries; their results are discarded.
        qt.fill(0.0);
        for l in 0..nl {
            let q = &queries[(qb + l) * dim..(qb + l + 1) * dim];
            for (k, v) in q.iter().enumerate() {
                qt[k * LANES + l] = *v;
            }
        }
        let mut r = 0;
        while r + 8 <= nr {
            let res = if mode == L2 {
                query_block::<L2, 8>(&qt, &rows[r * dim..(r + 8) * dim], dim)
            } else {
                query_block::<DOT, 8>(&qt, &rows[r * dim..(r + 8) * dim], dim)
            };
            scatter(&res, out, out_stride, qb, nl, r);
            r += 8;
        }
        while r < nr {
            let res = if mode == L2 {
                query_block::<L2, 1>(&qt, &rows[r * dim..(r + 1) * dim], dim)
            } else {
                query_block::<DOT, 1>(&qt, &rows[r * dim..(r + 1) * dim], dim)
            };
            scatter(&res, out, out_stride, qb, nl, r);
            r += 1;
        }
        qb += nl;
    }
}

fn scatter<const R: usize>(
    res: &[[f32; LANES]; R],
    out: &mut [f32],
    out_stride: usize,
    qb: usize,
    nl: usize,
    r: usize,
) {
    for (ri, lanes) in res.iter().enumerate() {
        for (l, v) in lanes.iter().enumerate().take(nl) {
            out[(qb + l) * out_stride + r + ri] = *v;
        }
    }
}

/// Chains of the 16 queries in `qt` (`k`-major, 16 per `k`) against `R` rows.
#[target_feature(enable = "avx512f,avx2,fma")]
fn query_block<const MODE: u8, const R: usize>(
    qt: &[f32],
    rows: &[f32],
    dim: usize,
) -> [[f32; LANES]; R] {
    assert!(qt.len() == dim * LANES && rows.len() == R * dim);
    let qp = qt.as_ptr();
    let rp = rows.as_ptr();
    let mut acc = [_mm512_setzero_ps(); R];
    for k in 0..dim {
        // SAFETY: `k < dim`, so `qt[k * 16 .. k * 16 + 16]` is inside `qt` (length `16 * dim`).
        let qv = unsafe { _mm512_loadu_ps(qp.add(k * LANES)) };
        for (i, a) in acc.iter_mut().enumerate() {
            // SAFETY: `i < R` and `k < dim`, inside `rows` (length `R * dim`).
            let c = _mm512_set1_ps(unsafe { *rp.add(i * dim + k) });
            *a = step::<MODE>(qv, c, *a);
        }
    }
    let mut res = [[0.0f32; LANES]; R];
    for (r, a) in res.iter_mut().zip(acc) {
        // SAFETY: `r` holds 16 f32.
        unsafe { _mm512_storeu_ps(r.as_mut_ptr(), a) };
    }
    res
}
