//! AVX-512F, 16 lanes. Query lanes: 16 queries transposed once to `k`-major, a broadcast corpus value
//! FMA'd against them. Row lanes (fewer than 8 queries, norms) use the AVX2 kernel.

use super::{DOT, L2, Queries, RoundKeys, SQ, scatter};
use core::arch::x86_64::*;

const LANES: usize = 16;
/// Queries per query-lane group.
pub(super) const QUERY_LANES: usize = LANES;
/// The fewest queries that run query lanes here (fewer run the AVX2 kernel's, `avx2::QUERY_LANES_MIN`).
pub(super) const QUERY_LANES_MIN: usize = 8;

/// # Safety
/// The CPU must support AVX-512F, AVX2 and FMA. `queries` and `rows` hold whole rows of `dim` values; `out` holds
/// `(n_queries - 1) * out_stride + n_rows` values with `out_stride >= n_rows` (checked by the caller).
#[target_feature(enable = "avx512f,avx2,fma")]
pub(super) unsafe fn chains(
    mode: u8,
    queries: &Queries<'_>,
    rows: &[f32],
    dim: usize,
    out: &mut [f32],
    out_stride: usize,
) {
    let nq = queries.values.len() / dim;
    if mode == SQ || mode == super::DOTSQ || nq < QUERY_LANES_MIN {
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
    queries: &Queries<'_>,
    rows: &[f32],
    dim: usize,
    out: &mut [f32],
    out_stride: usize,
) {
    let nq = queries.values.len() / dim;
    // Unused lanes hold zero queries; their results are discarded.
    let groups = queries.lanes(LANES, dim);
    let mut pairs = groups.chunks_exact(2 * dim * LANES);
    let mut qb = 0;
    for pair in pairs.by_ref() {
        let (q0, q1) = pair.split_at(dim * LANES);
        if mode == L2 {
            group_rows::<L2, 2>([q0, q1], rows, dim, out, out_stride, qb, nq);
        } else {
            group_rows::<DOT, 2>([q0, q1], rows, dim, out, out_stride, qb, nq);
        }
        qb += 2 * LANES;
    }
    let last = pairs.remainder();
    if !last.is_empty() {
        if mode == L2 {
            group_rows::<L2, 1>([last], rows, dim, out, out_stride, qb, nq);
        } else {
            group_rows::<DOT, 1>([last], rows, dim, out, out_stride, qb, nq);
        }
    }
}

/// The chains of the `G` query groups `qts` (queries `qb ..`) against every row, 8 rows at a time.
#[target_feature(enable = "avx512f,avx2,fma")]
fn group_rows<const MODE: u8, const G: usize>(
    qts: [&[f32]; G],
    rows: &[f32],
    dim: usize,
    out: &mut [f32],
    out_stride: usize,
    qb: usize,
    nq: usize,
) {
    let nr = rows.len() / dim;
    let mut r = 0;
    while r + 8 <= nr {
        let res = query_block::<MODE, G, 8>(qts, &rows[r * dim..(r + 8) * dim], dim);
        scatter(&res, out, out_stride, qb, nq, r);
        r += 8;
    }
    while r < nr {
        let res = query_block::<MODE, G, 1>(qts, &rows[r * dim..(r + 1) * dim], dim);
        scatter(&res, out, out_stride, qb, nq, r);
        r += 1;
    }
}

/// Chains of the `G` groups of 16 queries in `qts` (each `k`-major, 16 per `k`) against `R` rows: `G * R`
/// accumulators, each corpus value broadcast once for the `G` groups. With two groups and eight rows the
/// sixteen FMAs of a step need ten loads, so the FMA ports, not the loads, set the pace (one group: nine loads
/// for eight FMAs).
#[target_feature(enable = "avx512f,avx2,fma")]
fn query_block<const MODE: u8, const G: usize, const R: usize>(
    qts: [&[f32]; G],
    rows: &[f32],
    dim: usize,
) -> [[[f32; LANES]; R]; G] {
    assert!(qts.iter().all(|q| q.len() == dim * LANES) && rows.len() == R * dim);
    let rp = rows.as_ptr();
    let mut acc = [[_mm512_setzero_ps(); G]; R];
    for k in 0..dim {
        // SAFETY: `k < dim`, so `qt[k * 16 .. k * 16 + 16]` is inside each `qt` (length `16 * dim`).
        let qv: [__m512; G] =
            core::array::from_fn(|g| unsafe { _mm512_loadu_ps(qts[g].as_ptr().add(k * LANES)) });
        for (i, ar) in acc.iter_mut().enumerate() {
            // SAFETY: `i < R` and `k < dim`, inside `rows` (length `R * dim`).
            let c = _mm512_set1_ps(unsafe { *rp.add(i * dim + k) });
            for (a, q) in ar.iter_mut().zip(&qv) {
                *a = step::<MODE>(*q, c, *a);
            }
        }
    }
    let mut res = [[[0.0f32; LANES]; R]; G];
    for (ri, ar) in acc.iter().enumerate() {
        for (rg, a) in res.iter_mut().zip(ar) {
            // SAFETY: `rg[ri]` holds 16 f32.
            unsafe { _mm512_storeu_ps(rg[ri].as_mut_ptr(), *a) };
        }
    }
    res
}

/// What [`gaussian16`] reads besides the counters: the clip-and-noise tables (`recall-kernel-shared::math`'s
/// `LN_TABLE` and `TURN_TABLE`) split into their columns, for lookups inside registers, and the seed's round
/// keys.
pub(crate) struct NoiseColumns {
    invc: [f32; 64],
    logc: [f32; 64],
    sin: [f32; 64],
    cos: [f32; 64],
    keys: RoundKeys,
}

impl NoiseColumns {
    /// The tables and the round keys of `key` (`philox_key(seed)`).
    pub(crate) fn new(key: [u32; 2]) -> NoiseColumns {
        use recall_kernel_shared::math::{LN_TABLE, TURN_TABLE};
        let col = |t: &[[f32; 2]; 64], c: usize| core::array::from_fn(|j| t[j][c]);
        NoiseColumns {
            invc: col(&LN_TABLE.0, 0),
            logc: col(&LN_TABLE.0, 1),
            sin: col(&TURN_TABLE.0, 0),
            cos: col(&TURN_TABLE.0, 1),
            keys: RoundKeys::new(key),
        }
    }
}

/// `t[idx & 63]` for 16 indices: two two-table permutes (32 entries each) and a blend on bit 5, instead of a
/// gather (16 loads).
#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
fn lookup64(t: &[f32; 64], idx: __m512i) -> __m512 {
    // SAFETY: t[16 i .. 16 i + 16] is in bounds for i < 4.
    let part = |i: usize| unsafe { _mm512_loadu_ps(t[16 * i..16 * i + 16].as_ptr()) };
    let lo = _mm512_permutex2var_ps(part(0), idx, part(1));
    let hi = _mm512_permutex2var_ps(part(2), idx, part(3));
    _mm512_mask_blend_ps(_mm512_test_epi32_mask(idx, _mm512_set1_epi32(32)), lo, hi)
}

/// `(hi, lo)` of `m * x` for 16 lanes of `x` (Philox's `mulhilo`): the even lanes' and the odd lanes' 64-bit
/// products, their halves put back in place by two masked shuffles. Shuffles, not shifts and blends: Intel's
/// cores run 512-bit multiplies and shifts on one port only (port 0), shuffles on another (port 5); with the
/// shifts the round was bound by port 0.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
fn mulhilo16(m: __m512i, x: __m512i) -> (__m512i, __m512i) {
    const EVEN: __mmask16 = 0x5555;
    const ODD: __mmask16 = 0xAAAA;
    // Dword pairs (a, b) -> (b, b) and (a, b) -> (a, a).
    const HIGHS: _MM_PERM_ENUM = 0b11_11_01_01;
    const LOWS: _MM_PERM_ENUM = 0b10_10_00_00;
    let even = _mm512_mul_epu32(x, m);
    let odd = _mm512_mul_epu32(_mm512_srli_epi64::<32>(x), m);
    let hi = _mm512_mask_shuffle_epi32::<HIGHS>(odd, EVEN, even);
    let lo = _mm512_mask_shuffle_epi32::<LOWS>(even, ODD, odd);
    (hi, lo)
}

/// `(hi, lo)` of `m * x` for one word (the rounds whose word is the same in every lane).
#[inline(always)]
fn mulhilo1(m: u32, x: u32) -> (u32, u32) {
    let p = u64::from(m) * u64::from(x);
    ((p >> 32) as u32, p as u32)
}

/// `box_muller(w0, w1)` for 16 lanes: `recall-kernel-shared::math`'s `box_muller_radius` and `sincos_turns`
/// step for step (the same operations, each rounded once where the scalar form rounds it), the tables read
/// by [`lookup64`].
#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
fn box_muller16(t: &NoiseColumns, w0: __m512i, w1: __m512i) -> (__m512, __m512) {
    use recall_kernel_shared::math::{LN_OFF, LN2_HI, LN2_LO, TURN_RAD};
    let f = _mm512_set1_ps;
    let i = _mm512_set1_epi32;
    // The radius: ln of the odd integer n = 2 (w0 >> 9) + 1 scaled by 2^-24 (its exponent lowered by 24).
    let n = _mm512_or_si512(_mm512_slli_epi32::<1>(_mm512_srli_epi32::<9>(w0)), i(1));
    let ix = _mm512_sub_epi32(_mm512_castps_si512(_mm512_cvtepi32_ps(n)), i(24 << 23));
    let tmp = _mm512_sub_epi32(ix, i(LN_OFF as i32));
    let j = _mm512_and_si512(_mm512_srli_epi32::<17>(tmp), i(63));
    let (invc, logc) = (lookup64(&t.invc, j), lookup64(&t.logc, j));
    let z = _mm512_castsi512_ps(_mm512_sub_epi32(
        ix,
        _mm512_and_si512(tmp, i(0xff80_0000u32 as i32)),
    ));
    let kf = _mm512_cvtepi32_ps(_mm512_srai_epi32::<23>(tmp));
    let r = _mm512_fmadd_ps(z, invc, f(-1.0));
    let p = _mm512_fmadd_ps(r, f(-0.25), f(1.0 / 3.0));
    let p = _mm512_fmadd_ps(r, p, f(-0.5));
    let l1 = _mm512_fmadd_ps(_mm512_mul_ps(r, r), p, r);
    let ln = _mm512_add_ps(
        _mm512_fmadd_ps(kf, f(LN2_HI), logc),
        _mm512_fmadd_ps(kf, f(LN2_LO), l1),
    );
    let rad = _mm512_sqrt_ps(_mm512_mul_ps(f(-2.0), ln));
    // The angle: the table's nearest 64th of a turn and the rest b, |b| <= pi / 64.
    let a = _mm512_add_epi32(_mm512_srli_epi32::<8>(w1), i(1 << 17));
    let j = _mm512_and_si512(_mm512_srli_epi32::<18>(a), i(63));
    let (sa, ca) = (lookup64(&t.sin, j), lookup64(&t.cos, j));
    let d = _mm512_sub_ps(
        _mm512_castsi512_ps(_mm512_or_si512(
            i(0x4b00_0000),
            _mm512_and_si512(a, i(0x0003_ffff)),
        )),
        f(8_519_680.0),
    );
    let b = _mm512_mul_ps(d, f(TURN_RAD));
    let b2 = _mm512_mul_ps(b, b);
    let sb = _mm512_fmadd_ps(
        _mm512_mul_ps(b, b2),
        _mm512_fmadd_ps(b2, f(1.0 / 120.0), f(-1.0 / 6.0)),
        b,
    );
    let cb = _mm512_fmadd_ps(b2, _mm512_fmadd_ps(b2, f(1.0 / 24.0), f(-0.5)), f(1.0));
    // -(sa * sb): the product rounded, then its sign flipped (exact).
    let neg = _mm512_castsi512_ps(_mm512_xor_si512(
        _mm512_castps_si512(_mm512_mul_ps(sa, sb)),
        i(i32::MIN),
    ));
    let s = _mm512_fmadd_ps(sa, cb, _mm512_mul_ps(ca, sb));
    let c = _mm512_fmadd_ps(ca, cb, neg);
    (_mm512_mul_ps(rad, c), _mm512_mul_ps(rad, s))
}

/// `gaussian4(key, row, b0 + j)` for `j < 16 * CH` into `out[j / 16][j % 16]` (`key` is `t`'s): `CH` chains
/// of 16 blocks' Philox4x32-10 in the lanes, interleaved (independent chains for the out-of-order core: each
/// round waits on the last one's multiplies), then both Box-Muller pairs, then the lanes' values put back in
/// block order. The same bits as the scalar form (`recall-kernel-shared::math`), which the proptest checks at
/// every level. Callers need the CPU to support AVX-512F, AVX2 and FMA (the target features make the call
/// `unsafe` elsewhere).
#[target_feature(enable = "avx512f,avx2,fma")]
pub(crate) fn gaussian16<const CH: usize>(
    t: &NoiseColumns,
    row: u64,
    b0: u32,
    out: &mut [[[f32; 4]; 16]; CH],
) {
    use recall_kernel_shared::math::{DOMAIN_NOISE, PHILOX_M0, PHILOX_M1};
    let i = |v: u32| _mm512_set1_epi32(v as i32);
    let xor3 = |a, b, c| _mm512_ternarylogic_epi32::<0x96>(a, b, c);
    let lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    let k = &t.keys.0;
    let (m0, m1) = (i(PHILOX_M0), i(PHILOX_M1));
    // The counter is (b0 + lane, low row, high row, domain): only word 0 differs by lane. Round 0's second
    // product and round 1's first are the same in every lane, so they are one scalar product each.
    let (hi1, lo1) = mulhilo1(PHILOX_M1, (row >> 32) as u32);
    let (w0, w1) = (hi1 ^ row as u32 ^ k[0][0], lo1);
    let (hi0, lo0) = mulhilo1(PHILOX_M0, w0);
    let mut c: [[__m512i; 4]; CH] = core::array::from_fn(|h| {
        // Round 0.
        let first = _mm512_add_epi32(i(b0.wrapping_add(16 * h as u32)), lanes);
        let (hi0v, lo0v) = mulhilo16(m0, first);
        let (w2, w3) = (_mm512_xor_si512(hi0v, i(DOMAIN_NOISE ^ k[0][1])), lo0v);
        // Round 1.
        let (hi1v, lo1v) = mulhilo16(m1, w2);
        [
            _mm512_xor_si512(hi1v, i(w1 ^ k[1][0])),
            lo1v,
            _mm512_xor_si512(w3, i(hi0 ^ k[1][1])),
            i(lo0),
        ]
    });
    for kr in &k[2..] {
        for ch in c.iter_mut() {
            let (hi0, lo0) = mulhilo16(m0, ch[0]);
            let (hi1, lo1) = mulhilo16(m1, ch[2]);
            *ch = [
                xor3(hi1, ch[1], i(kr[0])),
                lo1,
                xor3(hi0, ch[3], i(kr[1])),
                lo0,
            ];
        }
    }
    for (ch, out) in c.iter().zip(out.iter_mut()) {
        let (g0, g1) = box_muller16(t, ch[0], ch[1]);
        let (g2, g3) = box_muller16(t, ch[2], ch[3]);
        // Lanes to blocks: per 128-bit chunk, the four values of one block (blocks j, j + 4, j + 8, j + 12 in
        // u_j), then the chunks transposed so that each store holds four blocks in order.
        let t0 = _mm512_castps_pd(_mm512_unpacklo_ps(g0, g1));
        let t1 = _mm512_castps_pd(_mm512_unpackhi_ps(g0, g1));
        let t2 = _mm512_castps_pd(_mm512_unpacklo_ps(g2, g3));
        let t3 = _mm512_castps_pd(_mm512_unpackhi_ps(g2, g3));
        let u0 = _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2));
        let u1 = _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2));
        let u2 = _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3));
        let u3 = _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3));
        let a01 = _mm512_shuffle_f32x4::<0b01_00_01_00>(u0, u1);
        let a23 = _mm512_shuffle_f32x4::<0b01_00_01_00>(u2, u3);
        let b01 = _mm512_shuffle_f32x4::<0b11_10_11_10>(u0, u1);
        let b23 = _mm512_shuffle_f32x4::<0b11_10_11_10>(u2, u3);
        let o = out.as_flattened_mut();
        // SAFETY: o holds 64 f32; each store writes 16 of them.
        unsafe {
            _mm512_storeu_ps(
                o.as_mut_ptr(),
                _mm512_shuffle_f32x4::<0b10_00_10_00>(a01, a23),
            );
            _mm512_storeu_ps(
                o.as_mut_ptr().add(16),
                _mm512_shuffle_f32x4::<0b11_01_11_01>(a01, a23),
            );
            _mm512_storeu_ps(
                o.as_mut_ptr().add(32),
                _mm512_shuffle_f32x4::<0b10_00_10_00>(b01, b23),
            );
            _mm512_storeu_ps(
                o.as_mut_ptr().add(48),
                _mm512_shuffle_f32x4::<0b11_01_11_01>(b01, b23),
            );
        }
    }
}

/// One row of clip-and-noise from its noise `g` (at least `x.len()` values): `out[j] = sigma * g[j] + x[j] * s`
/// (`+ x[j]` where `scale` is `None`), each rounded once as `f32::mul_add` rounds it, written with
/// non-temporal stores (`vmovntps`) for every whole 64-byte line of `out` and plain stores at its two ends.
/// A plain store first reads the line it writes (a read for ownership); these do not, so the op moves two
/// streams through memory instead of three. The caller ends its task with [`store_fence`].
#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
pub(crate) fn stream_row(out: &mut [f32], x: &[f32], g: &[f32], sigma: f32, scale: Option<f32>) {
    let n = out.len().min(x.len()).min(g.len());
    let one = |j: usize| match scale {
        Some(s) => sigma.mul_add(g[j], x[j] * s),
        None => sigma.mul_add(g[j], x[j]),
    };
    // f32 slices are 4-byte aligned: the head is the values before `out`'s first 64-byte boundary.
    let head = (((64 - out.as_ptr() as usize % 64) % 64) / 4).min(n);
    for (j, o) in out[..head].iter_mut().enumerate() {
        *o = one(j);
    }
    let (sv, mv) = (_mm512_set1_ps(sigma), _mm512_set1_ps(scale.unwrap_or(1.0)));
    let mut j = head;
    while j + 16 <= n {
        // SAFETY: `j + 16 <= n`, within all three slices; `out + j` is 64-byte aligned (the head ended on a line
        // boundary and `j` moves by whole lines), as `vmovntps` needs.
        unsafe {
            let xv = _mm512_loadu_ps(x.as_ptr().add(j));
            let xv = if scale.is_some() {
                _mm512_mul_ps(xv, mv)
            } else {
                xv
            };
            let v = _mm512_fmadd_ps(sv, _mm512_loadu_ps(g.as_ptr().add(j)), xv);
            _mm512_stream_ps(out.as_mut_ptr().add(j), v);
        }
        j += 16;
    }
    for (j, o) in out[..n].iter_mut().enumerate().skip(j) {
        *o = one(j);
    }
}

/// Append to `out` the positions `base + i` of the nonzero values of `values` (a bit besides the sign set),
/// ascending (`crate::nonzero`): a block of 64 values is tested by one `vptestmd` of the OR of its four registers;
/// in a block with a nonzero value each register's mask compresses its 16 positions (`vpcompressd`), which are
/// stored whole after the positions so far, the end moved by the mask's count. The tail goes to the portable loop.
/// Without the block's test (every register compressed) 1 M values with 1 % nonzero took 147 us against 176, but
/// with none 151 against 123 (best of 300, development VM): the test stays, for sparse seeds and frontiers.
///
/// # Safety
/// The CPU must support AVX-512F, AVX2 and FMA. The positions must fit `u32` (past it they wrap).
#[target_feature(enable = "avx512f,avx2,fma")]
pub(crate) unsafe fn push_nonzero(values: &[f32], base: u32, out: &mut Vec<u32>) {
    use crate::nonzero::{BLOCK, push_portable};
    let magnitude = _mm512_set1_epi32(0x7fff_ffff);
    // The positions of the block's first register's values; the other registers' are 16, 32 and 48 on.
    let mut first = _mm512_add_epi32(
        _mm512_set1_epi32(base as i32),
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
    );
    let mut blocks = values.chunks_exact(BLOCK);
    for block in blocks.by_ref() {
        let p = block.as_ptr();
        // SAFETY: `block` holds 64 values: the four loads read 16 each at 0, 16, 32 and 48.
        let v = unsafe {
            [
                _mm512_loadu_si512(p.cast()),
                _mm512_loadu_si512(p.add(16).cast()),
                _mm512_loadu_si512(p.add(32).cast()),
                _mm512_loadu_si512(p.add(48).cast()),
            ]
        };
        let any = _mm512_or_si512(_mm512_or_si512(v[0], v[1]), _mm512_or_si512(v[2], v[3]));
        if _mm512_test_epi32_mask(any, magnitude) != 0 {
            out.reserve(BLOCK);
            let mut len = out.len();
            let dst = out.as_mut_ptr();
            for (r, &v) in v.iter().enumerate() {
                let m = _mm512_test_epi32_mask(v, magnitude);
                let ids = _mm512_add_epi32(first, _mm512_set1_epi32(16 * r as i32));
                // SAFETY: the capacity is at least the block's first `len` plus 64, and each register moves `len` by
                // at most 16, so the 16 lanes stored at `len` are inside the allocation.
                unsafe {
                    _mm512_storeu_si512(dst.add(len).cast(), _mm512_maskz_compress_epi32(m, ids))
                };
                len += m.count_ones() as usize;
            }
            // SAFETY: `len` is within the capacity (above); the values up to the old length were there, and each
            // register's store wrote its first `count_ones(m)` lanes, which the new length counts, before the next
            // register's store began at their end.
            unsafe { out.set_len(len) };
        }
        first = _mm512_add_epi32(first, _mm512_set1_epi32(BLOCK as i32));
    }
    let tail = blocks.remainder();
    push_portable(
        tail,
        base.wrapping_add((values.len() - tail.len()) as u32),
        out,
    );
}

/// `sfence`: orders the calling thread's non-temporal stores before its later stores, so that a task that
/// streamed its output is seen whole by whoever learns it is done.
#[inline]
pub(crate) fn store_fence() {
    // SAFETY: `sfence` is SSE, part of x86-64's baseline; it has no operands.
    unsafe { _mm_sfence() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use recall_kernel_shared::math::{box_muller, gaussian4};

    fn avx512() -> bool {
        let ok = is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma");
        if !ok {
            eprintln!("skipped: this CPU has no AVX-512F");
        }
        ok
    }

    /// The 16-lane noise against the scalar contract, bit for bit: whole batches (one chain and two) for many
    /// keys, rows (high words included) and first blocks (wrapping past `u32::MAX`), and Box-Muller alone on
    /// words at the ends of both ranges (the smallest and largest radius, the table's first and last entries,
    /// the angle's wrap).
    #[test]
    fn gaussian16_is_the_scalar_noise_bit_for_bit() {
        if !avx512() {
            return;
        }
        let mut s = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            s
        };
        for case in 0..4000 {
            let key = [next() as u32, (next() >> 32) as u32];
            let row = if case % 7 == 0 {
                next()
            } else {
                next() % 1_000_000
            };
            let b0 = if case % 5 == 0 {
                u32::MAX - 7
            } else {
                (next() % 4096) as u32 * 16
            };
            let t = NoiseColumns::new(key);
            let mut one = [[[0.0f32; 4]; 16]; 1];
            let mut two = [[[0.0f32; 4]; 16]; 2];
            // SAFETY: the CPU supports AVX-512F, AVX2 and FMA (checked above).
            unsafe {
                gaussian16(&t, row, b0, &mut one);
                gaussian16(&t, row, b0, &mut two);
            }
            let blocks = one.as_flattened().iter().chain(two.as_flattened());
            for (j, g) in blocks.enumerate() {
                let want = gaussian4(key, row, b0.wrapping_add((j % 16 + j / 32 * 16) as u32));
                assert_eq!(
                    g.map(f32::to_bits),
                    want.map(f32::to_bits),
                    "case {case}, block {j}"
                );
            }
        }
        let t = NoiseColumns::new([0, 0]);
        let (w0, w1) = super::super::noise_edge_words();
        for (a, b) in w0.chunks(16).zip(w1.chunks(16)) {
            let mut la = [0u32; 16];
            let mut lb = [0u32; 16];
            la[..a.len()].copy_from_slice(a);
            lb[..b.len()].copy_from_slice(b);
            // SAFETY: as above; the arrays hold 16 u32 each.
            let (g0, g1) = unsafe {
                box_muller16(
                    &t,
                    _mm512_loadu_si512(la.as_ptr().cast()),
                    _mm512_loadu_si512(lb.as_ptr().cast()),
                )
            };
            let (mut o0, mut o1) = ([0.0f32; 16], [0.0f32; 16]);
            // SAFETY: as above; the arrays hold 16 f32 each.
            unsafe {
                _mm512_storeu_ps(o0.as_mut_ptr(), g0);
                _mm512_storeu_ps(o1.as_mut_ptr(), g1);
            }
            for l in 0..16 {
                let (e0, e1) = box_muller(la[l], lb[l]);
                assert_eq!(
                    (o0[l].to_bits(), o1[l].to_bits()),
                    (e0.to_bits(), e1.to_bits()),
                    "w0 {:#x}, w1 {:#x}",
                    la[l],
                    lb[l]
                );
            }
        }
    }
}
