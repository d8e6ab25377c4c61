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

/// The queries of a [`chains`] call. Query lanes read them transposed, `width` queries at a time, each
/// group `k`-major; [`Queries::prepared`] makes that layout once for a call's many corpus blocks (a 64-row
/// block against 64 queries at dim 768 spent as long transposing the queries as multiplying: session 34).
/// Without it each [`chains`] call transposes them itself. Either way the same chains, the same bits.
pub(crate) struct Queries<'a> {
    values: &'a [f32],
    /// `(width, dim, groups)`: `values` transposed as a query-lane kernel of `width` lanes reads them at `dim`.
    packed: Option<(usize, usize, Groups)>,
}

impl<'a> Queries<'a> {
    /// Row-major queries, transposed by each call that needs them so.
    pub(crate) fn plain(values: &'a [f32]) -> Queries<'a> {
        Queries {
            values,
            packed: None,
        }
    }

    /// Row-major queries, with the transposed layout `level`'s kernel reads for `mode` made once here where
    /// that kernel runs query lanes for this many queries.
    pub(crate) fn prepared(
        level: SimdLevel,
        mode: u8,
        values: &'a [f32],
        dim: usize,
    ) -> Queries<'a> {
        let nq = values.len().checked_div(dim).unwrap_or(0);
        let width = match level {
            _ if mode != DOT && mode != L2 => None,
            #[cfg(target_arch = "x86_64")]
            SimdLevel::Avx512 if nq >= avx512::QUERY_LANES_MIN => Some(avx512::QUERY_LANES),
            #[cfg(target_arch = "x86_64")]
            SimdLevel::Avx512 | SimdLevel::Avx2 if nq >= avx2::QUERY_LANES_MIN => {
                Some(avx2::QUERY_LANES)
            }
            #[cfg(target_arch = "aarch64")]
            SimdLevel::Neon if nq >= neon::QUERY_LANES_MIN => Some(neon::QUERY_LANES),
            _ => None,
        };
        Queries {
            values,
            packed: width.map(|w| (w, dim, transpose_groups(values, dim, w))),
        }
    }

    /// The queries, row-major.
    pub(crate) fn values(&self) -> &'a [f32] {
        self.values
    }

    /// The queries as `width`-lane groups, each `dim * width` values `k`-major (lane `l` of `k` at
    /// `k * width + l`), the last group's unused lanes zero: the prepared layout if it is this one (the same
    /// width and dim), else made now.
    #[cfg_attr(
        not(any(target_arch = "x86_64", target_arch = "aarch64")),
        allow(dead_code)
    )]
    fn lanes(&self, width: usize, dim: usize) -> std::borrow::Cow<'_, Groups> {
        match &self.packed {
            Some((w, d, t)) if *w == width && *d == dim => std::borrow::Cow::Borrowed(t),
            _ => {
                #[cfg(test)]
                TRANSPOSED_IN_CALL.set(TRANSPOSED_IN_CALL.get() + 1);
                std::borrow::Cow::Owned(transpose_groups(self.values, dim, width))
            }
        }
    }
}

#[cfg(test)]
thread_local! {
    /// How many times a [`chains`] call on this thread transposed its queries itself.
    static TRANSPOSED_IN_CALL: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Transposed query groups (see [`Queries::lanes`]), starting on a 64-byte boundary: the kernels load a
/// whole cache line per `k` (16 lanes of f32 on AVX-512), and a load across two lines costs two.
#[derive(Clone)]
struct Groups {
    buf: Vec<f32>,
    /// Where the groups start in `buf`.
    start: usize,
    len: usize,
}

impl std::ops::Deref for Groups {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        &self.buf[self.start..self.start + self.len]
    }
}

/// A query-lane tile's chains into `out` (query-major, rows `out_stride` apart): `res[g][ri][l]` is query
/// `qb + W g + l`'s chain with row `r + ri`; lanes past `nq` (zero queries) are dropped. One bounds check per
/// query, then its `R` consecutive scores (a check per score was 18 % of a k-means iteration at dim 128).
#[cfg_attr(
    not(any(target_arch = "x86_64", target_arch = "aarch64")),
    allow(dead_code)
)]
fn scatter<const W: usize, const G: usize, const R: usize>(
    res: &[[[f32; W]; R]; G],
    out: &mut [f32],
    out_stride: usize,
    qb: usize,
    nq: usize,
    r: usize,
) {
    for (g, rg) in res.iter().enumerate() {
        let q0 = qb + g * W;
        for l in 0..nq.saturating_sub(q0).min(W) {
            let dst = &mut out[(q0 + l) * out_stride + r..][..R];
            for (d, lanes) in dst.iter_mut().zip(rg) {
                *d = lanes[l];
            }
        }
    }
}

/// `values` (row-major, `dim` columns) as groups of `width` rows, each group `k`-major, unused lanes zero.
fn transpose_groups(values: &[f32], dim: usize, width: usize) -> Groups {
    let len = values.len().checked_div(dim).unwrap_or(0).div_ceil(width) * dim * width;
    // 15 more values than needed, so that some start within them is 64-byte aligned.
    let mut buf = vec![0.0f32; len + 15];
    let start = buf.as_ptr().align_offset(64).min(15);
    if dim == 0 {
        return Groups { buf, start, len };
    }
    let t = &mut buf[start..start + len];
    for (group, qs) in t
        .chunks_exact_mut(dim * width)
        .zip(values.chunks(dim * width))
    {
        for (k, lanes) in group.chunks_exact_mut(width).enumerate() {
            for (l, q) in qs.chunks_exact(dim).enumerate() {
                lanes[l] = q[k];
            }
        }
    }
    Groups { buf, start, len }
}

/// `out[i * out_stride + r] = chain(queries[i], rows[r])` for every query `i` and row `r`, where `chain`
/// is `dot` (`mode == DOT`) or `l2sq` (`mode == L2`). `queries` and `rows` are row-major with `dim`
/// columns; `out` must hold `(n_queries - 1) * out_stride + n_rows` values.
pub(crate) fn chains(
    level: SimdLevel,
    mode: u8,
    queries: &Queries<'_>,
    rows: &[f32],
    dim: usize,
    out: &mut [f32],
    out_stride: usize,
) {
    let nq = queries.values.len() / dim;
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
            chains_scalar(mode, queries.values, rows, dim, out, out_stride)
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
        &Queries::plain(&rows[..dim.min(rows.len())]),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simd::available_levels;

    /// A prepared layout is the one each level's kernel reads (else every call transposes the queries again,
    /// the cost `Queries::prepared` exists to remove), and it gives the same bits as the unprepared call and the
    /// scalar chains, for counts of queries around every level's group sizes and rows around its tile sizes.
    #[test]
    fn prepared_queries_are_used_and_change_no_bit() {
        let value = |i: usize| ((i * 7919 % 1009) as f32 - 504.0) / 97.0;
        for dim in [1, 19] {
            for nq in [1, 3, 4, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 48, 49, 70] {
                for nr in [1, 3, 4, 7, 8, 9, 17] {
                    // An output stride past the row count: values of `out` the kernels must not touch.
                    let stride = nr + 3;
                    let queries: Vec<f32> = (0..nq * dim).map(value).collect();
                    let rows: Vec<f32> = (0..nr * dim).map(|i| value(i + 1_000_003)).collect();
                    for mode in [DOT, L2] {
                        let mut want = vec![f32::NAN; nq * stride];
                        chains_scalar(mode, &queries, &rows, dim, &mut want, stride);
                        for level in available_levels() {
                            let case = format!("{level:?} mode {mode} dim {dim} nq {nq} nr {nr}");
                            let plain = Queries::plain(&queries);
                            let mut plain_out = vec![f32::NAN; nq * stride];
                            TRANSPOSED_IN_CALL.set(0);
                            chains(level, mode, &plain, &rows, dim, &mut plain_out, stride);
                            let transposes = TRANSPOSED_IN_CALL.get();
                            let prepared = Queries::prepared(level, mode, &queries, dim);
                            // A layout only where the kernel reads one (row lanes read the rows as they are).
                            assert_eq!(prepared.packed.is_some(), transposes > 0, "{case}");
                            let mut got = vec![f32::NAN; nq * stride];
                            TRANSPOSED_IN_CALL.set(0);
                            chains(level, mode, &prepared, &rows, dim, &mut got, stride);
                            assert_eq!(
                                TRANSPOSED_IN_CALL.get(),
                                0,
                                "{case}: not the kernel's layout"
                            );
                            let bits =
                                |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                            assert_eq!(bits(&plain_out), bits(&want), "{case}");
                            assert_eq!(bits(&got), bits(&want), "{case}");
                        }
                    }
                }
            }
        }
    }

    /// The transposed groups start on a cache line, whatever the allocator returned.
    #[test]
    fn transposed_groups_start_on_a_cache_line() {
        for nq in [1, 5, 16, 33] {
            let values = vec![1.0f32; nq * 7];
            let g = transpose_groups(&values, 7, 16);
            assert_eq!(g.as_ptr() as usize % 64, 0);
            assert_eq!(g.len(), nq.div_ceil(16) * 7 * 16);
        }
    }
}
