//! AVX-512F, 16 lanes. Query lanes: 16 queries transposed once to `k`-major, a broadcast corpus value
//! FMA'd against them. Row lanes (fewer than 8 queries, norms) use the AVX2 kernel.

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
    if mode == SQ || mode == super::DOTSQ || nq < 8 {
        // Row lanes run the 8-lane kernel (built with AVX-512VL for 32 registers): on Zen 5 it measured
        // faster than a 16-lane version with lane-crossing inserts. Same order, same bits.
        // SAFETY: `Avx512` is only handed out when the CPU reports AVX-512F, AVX-512VL, AVX2 and FMA.
        unsafe { super::avx2::v4::chains(mode, queries, rows, dim, out, out_stride) }
    } else {
        query_lanes(mode, queries, rows, dim, out, out_stride);
    }
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
