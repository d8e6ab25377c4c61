//! The dense inner loops, one module per instruction set (`docs/numerics.md`, "Dot product, norms and the
//! dense metrics"). Every path computes one sequential chain per (query, row) pair over `k` ascending;
//! SIMD lanes run across rows (a register transpose of a row block, "row lanes") or across queries (a
//! transposed query block against a broadcast corpus value, "query lanes"), never across `k`. Tails are
//! handled by running exactly the remaining `k`; padding happens only in unused *lanes*, whose results
//! are discarded, never inside a chain.

use crate::reference;
use crate::simd::{SimdLevel, record};

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2;
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512;
#[cfg(target_arch = "aarch64")]
mod neon;

/// The key of each of Philox's ten rounds for one seed, precomputed for the SIMD noise kernels
/// (`avx512::gaussian16`, `avx2::gaussian8`): read from memory, each round's xor takes its key as a broadcast
/// operand instead of a shuffle on the port the shuffles already load.
#[cfg(target_arch = "x86_64")]
pub(crate) struct RoundKeys([[u32; 2]; 10]);

#[cfg(target_arch = "x86_64")]
impl RoundKeys {
    /// The round keys of `key` (`philox_key(seed)`).
    pub(crate) fn new(key: [u32; 2]) -> RoundKeys {
        use recall_kernel_shared::math::{PHILOX_W0, PHILOX_W1};
        RoundKeys(core::array::from_fn(|r| {
            let r = r as u32;
            [
                key[0].wrapping_add(PHILOX_W0.wrapping_mul(r)),
                key[1].wrapping_add(PHILOX_W1.wrapping_mul(r)),
            ]
        }))
    }
}

/// Box-Muller's word pairs for the SIMD noise kernels' tests: every pair of words at the ends of both ranges (the
/// smallest and largest radius, the tables' first and last entries, the angle's wrap), then 2,048 pairs across
/// the ranges.
#[cfg(all(test, target_arch = "x86_64"))]
pub(crate) fn noise_edge_words() -> (Vec<u32>, Vec<u32>) {
    let edges = [
        0u32,
        1,
        0x1ff,
        0x200,
        0x3ff,
        0xff,
        0x100,
        0x7fff_ffff,
        0x8000_0000,
        0xffff_fe00,
        0xffff_ffff,
        0x0001_ffff,
        0x0002_0000,
        0x00fd_ffff,
        0x00fe_0000,
        0xfffd_ff00,
        0xfffe_0000,
    ];
    let mut w0 = Vec::new();
    let mut w1 = Vec::new();
    for &a in &edges {
        for &b in &edges {
            w0.push(a);
            w1.push(b);
        }
    }
    // 2,048 radius words and angle words evenly across the ranges.
    for v in (0..1u64 << 32).step_by(1 << 21) {
        w0.push(v as u32);
        w1.push((v as u32).rotate_left(13));
    }
    (w0, w1)
}

/// Which chain a kernel computes.
pub(crate) const DOT: u8 = 0;
pub(crate) const L2: u8 = 1;
/// `sqnorm` of each row (the queries are ignored).
pub(crate) const SQ: u8 = 2;
/// One query: `dot` with every row into `out[..n_rows]` and every row's `sqnorm` into
/// `out[out_stride..out_stride + n_rows]`, in one pass.
pub(crate) const DOTSQ: u8 = 3;

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
    let nq = if mode == DOTSQ { 2 } else { nq };
    assert!(
        out_stride >= nr && out.len() >= (nq - 1) * out_stride + nr,
        "chains: output too small"
    );
    // Each arm counts the level whose code it runs, so `kernel_runs` shows which path really ran.
    match level {
        #[cfg(target_arch = "x86_64")]
        SimdLevel::Avx512 => {
            record(SimdLevel::Avx512);
            // SAFETY: `Cpu::with_level` and `simd_level` only hand out `Avx512` when the CPU reports
            // AVX-512F, AVX2 and FMA.
            unsafe { avx512::chains(mode, queries, rows, dim, out, out_stride) }
        }
        #[cfg(target_arch = "x86_64")]
        SimdLevel::Avx2 => {
            record(SimdLevel::Avx2);
            // SAFETY: `Avx2` is only handed out when the CPU reports AVX2 and FMA.
            unsafe { avx2::v3::chains(mode, queries, rows, dim, out, out_stride) }
        }
        #[cfg(target_arch = "aarch64")]
        SimdLevel::Neon => {
            record(SimdLevel::Neon);
            // SAFETY: `Neon` is only handed out when `is_aarch64_feature_detected!("neon")` holds
            // (always, on the aarch64 targets that have `std`: NEON is part of their baseline).
            unsafe { neon::chains(mode, queries, rows, dim, out, out_stride) }
        }
        _ => {
            record(SimdLevel::Scalar);
            chains_scalar(mode, queries, rows, dim, out, out_stride)
        }
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
    if mode == DOTSQ {
        let q = &queries[..dim];
        for (r, c) in rows.chunks_exact(dim).enumerate() {
            out[r] = reference::dot(q, c);
            out[out_stride + r] = reference::sqnorm(c);
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

/// Widen f16 values to f32 (exact): F16C where the CPU has it, `half` otherwise.
pub(crate) fn widen_f16(src: &[half::f16], dst: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("f16c") && std::is_x86_feature_detected!("avx") {
            // SAFETY: the CPU reports F16C and AVX, the features `widen_f16_f16c` is compiled for.
            unsafe { widen_f16_f16c(src, dst) };
            return;
        }
    }
    use half::slice::HalfFloatSliceExt;
    src.convert_to_f32_slice(dst);
}

/// # Safety
/// The CPU must support F16C and AVX.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx,f16c")]
unsafe fn widen_f16_f16c(src: &[half::f16], dst: &mut [f32]) {
    use core::arch::x86_64::*;
    let n = src.len().min(dst.len());
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: `i + 8 <= n`, so 8 halves (16 bytes) are read from `src` and 8 f32 written to `dst`;
        // `f16` is a transparent `u16`, and both intrinsics take unaligned pointers.
        unsafe {
            let h = _mm_loadu_si128(src.as_ptr().add(i).cast::<__m128i>());
            _mm256_storeu_ps(dst.as_mut_ptr().add(i), _mm256_cvtph_ps(h));
        }
        i += 8;
    }
    for (d, s) in dst[i..n].iter_mut().zip(&src[i..n]) {
        *d = s.to_f32();
    }
}
