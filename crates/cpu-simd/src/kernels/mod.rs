//! The dense inner loops, one module per instruction set (`docs/numerics.md`, "Dot product, norms and the
//! dense metrics"). Every path computes one sequential chain per (query, row) pair over `k` ascending;
//! SIMD lanes run across rows (a register transpose of a row block, "row lanes") or across queries (a
//! transposed query block against a broadcast corpus value, "query lanes"), never across `k`. Tails are
//! handled by running exactly the remaining `k`; padding happens only in unused *lanes*, whose results
//! are discarded, never inside a chain.

use crate::reference;
use crate::simd::{SimdLevel, record};

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;

/// Which chain a kernel computes.
pub(crate) const DOT: u8 = 0;
pub(crate) const L2: u8 = 1;
/// `sqnorm` of each row (the queries are ignored).
pub(crate) const SQ: u8 = 2;

/// `out[i * out_stride + r] = chain(queries[i], rows[r])` for every query `i` and row `r`, where `chain`
/// is `dot` (`mode == DOT`) or `l2sq` (`mode == L2`). `queries` and `rows` are row-major with `dim`
/// columns; `out` must hold `(n_queries - 1) * out_stride + n_rows` values.
pub(crate) fn chains(
    level: SimdLevel,
    mode: u8,
    queries: &[f32],
    rows: &[f32],
    dim: usize,
    out: &mut [f32],
    out_stride: usize,
) {
    let nq = queries.len() / dim;
    let nr = rows.len() / dim;
    if nq == 0 || nr == 0 {
        return;
    }
    assert!(
        out_stride >= nr && out.len() >= (nq - 1) * out_stride + nr,
        "chains: output too small"
    );
    record(level);
    match level {
        #[cfg(target_arch = "x86_64")]
        SimdLevel::Avx512 => {
            // SAFETY: `Cpu::with_level` and `simd_level` only hand out `Avx512` when the CPU reports
            // AVX-512F, AVX2 and FMA.
            unsafe { avx512::chains(mode, queries, rows, dim, out, out_stride) }
        }
        #[cfg(target_arch = "x86_64")]
        SimdLevel::Avx2 => {
            // SAFETY: `Avx2` is only handed out when the CPU reports AVX2 and FMA.
            unsafe { avx2::chains(mode, queries, rows, dim, out, out_stride) }
        }
        _ => chains_scalar(mode, queries, rows, dim, out, out_stride),
    }
}

/// `out[r] = sqnorm(rows[r])`.
pub(crate) fn sqnorms(level: SimdLevel, rows: &[f32], dim: usize, out: &mut [f32]) {
    let nr = rows.len() / dim;
    assert!(out.len() >= nr, "sqnorms: output too small");
    chains(
        level,
        SQ,
        &rows[..dim.min(rows.len())],
        rows,
        dim,
        out,
        nr.max(1),
    );
}

fn chains_scalar(
    mode: u8,
    queries: &[f32],
    rows: &[f32],
    dim: usize,
    out: &mut [f32],
    out_stride: usize,
) {
    if mode == SQ {
        for (o, c) in out.iter_mut().zip(rows.chunks_exact(dim)) {
            *o = reference::sqnorm(c);
        }
        return;
    }
    for (i, q) in queries.chunks_exact(dim).enumerate() {
        let out = &mut out[i * out_stride..];
        for (o, c) in out.iter_mut().zip(rows.chunks_exact(dim)) {
            *o = if mode == L2 {
                reference::l2sq(q, c)
            } else {
                reference::dot(q, c)
            };
        }
    }
}
