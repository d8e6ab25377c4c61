//! AVX2 + FMA, 8 lanes. Row lanes: 8 rows, four `k` at a time transposed in registers, a broadcast query value FMA'd
//! against the vector of 8 rows' values at the same `k`. Query lanes: 8 queries transposed once to
//! `k`-major, a broadcast corpus value FMA'd against them.

/// Queries per query-lane group.
pub(super) const QUERY_LANES: usize = 8;
/// The fewest queries that run query lanes (fewer run row lanes).
pub(super) const QUERY_LANES_MIN: usize = 4;

/// The kernels, generated twice: `v3` for AVX2 + FMA (16 vector registers), `v4` for the same code with
/// AVX-512VL enabled (32 registers). Same instructions on the values, same order, same bits. `$nt` is
/// the number of 8-row tiles the one-query passes keep in flight: two in both. Four (32 rows, which
/// `v4`'s registers allow) was faster from cache but slower from DRAM: 32 interleaved row streams
/// defeat the prefetchers (paired runs of the 100,000 x 768 cosine scan on Zen 5: recall/simsimd time
/// ratio 1.27 to 1.67 with four tiles, 1.08 to 1.27 with two).
macro_rules! lanes8 {
    ($feat:literal, $nt:literal) => {
        use super::super::{DOT, DOTSQ, L2, Queries, SQ, scatter};
        use core::arch::x86_64::*;

        const LANES: usize = super::QUERY_LANES;

        /// # Safety
        /// The CPU must support AVX2 and FMA. `queries` and `rows` hold whole rows of `dim` values; `out` holds
        /// `(n_queries - 1) * out_stride + n_rows` values with `out_stride >= n_rows` (checked by the caller).
        #[target_feature(enable = $feat)]
        pub(in crate::kernels) unsafe fn chains(
            mode: u8,
            queries: &Queries<'_>,
            rows: &[f32],
            dim: usize,
            out: &mut [f32],
            out_stride: usize,
        ) {
            let nq = queries.values.len() / dim;
            if mode == SQ || nq < super::QUERY_LANES_MIN {
                row_lanes(mode, queries.values, rows, dim, out, out_stride);
            } else {
                query_lanes(mode, queries, rows, dim, out, out_stride);
            }
        }

        /// One step of a chain, for lanes of `c` (row values) and `q` (query values) at the same `k`.
        #[target_feature(enable = $feat)]
        fn step<const MODE: u8>(q: __m256, c: __m256, acc: __m256) -> __m256 {
            match MODE {
                DOT | DOTSQ => _mm256_fmadd_ps(q, c, acc),
                L2 => {
                    let t = _mm256_sub_ps(q, c);
                    _mm256_fmadd_ps(t, t, acc)
                }
                _ => _mm256_fmadd_ps(c, c, acc),
            }
        }

        #[target_feature(enable = $feat)]
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
                    if nr - r >= $nt * LANES {
                        let block = &rows[r * dim..(r + $nt * LANES) * dim];
                        let res = row_block::<DOTSQ, 2, $nt>(queries, block, dim);
                        for (t, tile) in res.iter().enumerate() {
                            out[r + t * LANES..r + (t + 1) * LANES].copy_from_slice(&tile[0]);
                            out[out_stride + r + t * LANES..out_stride + r + (t + 1) * LANES]
                                .copy_from_slice(&tile[1]);
                        }
                        r += $nt * LANES;
                        continue;
                    }
                    let valid = (nr - r).min(LANES);
                    pad.clear();
                    pad.extend_from_slice(&rows[r * dim..(r + valid) * dim]);
                    pad.resize(LANES * dim, 0.0);
                    let res = row_block::<DOTSQ, 2, 1>(queries, &pad, dim);
                    out[r..r + valid].copy_from_slice(&res[0][0][..valid]);
                    out[out_stride + r..out_stride + r + valid]
                        .copy_from_slice(&res[0][1][..valid]);
                    r += valid;
                }
                return;
            }
            while r < nr {
                // Four tiles at once when one query (four independent chains hide the FMA latency).
                if nq == 1 && nr - r >= 4 * LANES {
                    let block = &rows[r * dim..(r + 4 * LANES) * dim];
                    let res = match mode {
                        SQ => row_block::<SQ, 1, 4>(queries, block, dim),
                        L2 => row_block::<L2, 1, 4>(queries, block, dim),
                        _ => row_block::<DOT, 1, 4>(queries, block, dim),
                    };
                    for (t, tile) in res.iter().enumerate() {
                        out[r + t * LANES..r + (t + 1) * LANES].copy_from_slice(&tile[0]);
                    }
                    r += 4 * LANES;
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

        /// Chains of `G` queries (`q` holds them back to back) against the `NT * LANES` rows of `block`, in `NT`
        /// tiles of `LANES` rows. Four `k` at a time: 128-bit loads of four consecutive values of each row are
        /// placed so that 128-bit lane `j` of vector `a` holds row `4j + a`, then a 4x4 transpose inside each
        /// 128-bit lane gives, per `k`, the vector of every row's value (lane = row).
        #[target_feature(enable = $feat)]
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
            let mut acc = [[_mm256_setzero_ps(); G]; NT];
            let full = dim - dim % 4;
            // Streaming (several tiles, one query): the `NT * LANES` rows read here are as many
            // interleaved 16-byte streams, more than the hardware prefetcher follows well, so each step also
            // prefetches (into L2) its share of the rows that come next in memory, in address order: the
            // next tile group, or the caller's next block. A prefetch is only a hint: it never faults
            // and changes no value; the address is formed with `wrapping_add` and never dereferenced.
            let ahead = bp.wrapping_add(NT * LANES * dim).cast::<i8>();
            let lines_per_step = NT * LANES / 4;
            let mut k = 0;
            while k < full {
                if NT > 1 {
                    let first = k / 4 * lines_per_step;
                    for i in 0..lines_per_step {
                        _mm_prefetch::<_MM_HINT_T1>(ahead.wrapping_add((first + i) * 64));
                    }
                }
                for (t, acc_t) in acc.iter_mut().enumerate() {
                    let base = t * LANES * dim;
                    let mut v = [_mm256_setzero_ps(); 4];
                    for (a, va) in v.iter_mut().enumerate() {
                        // SAFETY: `k + 4 <= dim` and the row index `4j + a < LANES` of tile `t < NT`, so every
                        // 4-value load lies inside `block` (length `NT * LANES * dim`, asserted above).
                        unsafe {
                            let r = |j: usize| bp.add(base + (4 * j + a) * dim + k);
                            let x = _mm256_castps128_ps256(_mm_loadu_ps(r(0)));
                            *va = _mm256_insertf128_ps::<1>(x, _mm_loadu_ps(r(1)));
                        }
                    }
                    let t0 = _mm256_unpacklo_ps(v[0], v[1]);
                    let t1 = _mm256_unpackhi_ps(v[0], v[1]);
                    let t2 = _mm256_unpacklo_ps(v[2], v[3]);
                    let t3 = _mm256_unpackhi_ps(v[2], v[3]);
                    let tt = [
                        _mm256_castpd_ps(_mm256_unpacklo_pd(
                            _mm256_castps_pd(t0),
                            _mm256_castps_pd(t2),
                        )),
                        _mm256_castpd_ps(_mm256_unpackhi_pd(
                            _mm256_castps_pd(t0),
                            _mm256_castps_pd(t2),
                        )),
                        _mm256_castpd_ps(_mm256_unpacklo_pd(
                            _mm256_castps_pd(t1),
                            _mm256_castps_pd(t3),
                        )),
                        _mm256_castpd_ps(_mm256_unpackhi_pd(
                            _mm256_castps_pd(t1),
                            _mm256_castps_pd(t3),
                        )),
                    ];
                    for (j, tj) in tt.iter().enumerate() {
                        for (g, a) in acc_t.iter_mut().enumerate() {
                            let qv = if MODE == SQ || (MODE == DOTSQ && g == 1) {
                                *tj
                            } else {
                                // SAFETY: `q` holds `G * dim` values (or `dim` for DOTSQ, where only `g == 0`
                                // reads it), asserted above; `g < G`, `k + j < dim`.
                                _mm256_set1_ps(unsafe { *qp.add(g * dim + k + j) })
                            };
                            *a = step::<MODE>(qv, *tj, *a);
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
                    let c = unsafe { _mm256_loadu_ps(v.as_ptr()) };
                    for (g, a) in acc_t.iter_mut().enumerate() {
                        let qv = if MODE == SQ || (MODE == DOTSQ && g == 1) {
                            c
                        } else {
                            _mm256_set1_ps(q[g * dim + k])
                        };
                        *a = step::<MODE>(qv, c, *a);
                    }
                }
                k += 1;
            }
            let mut res = [[[0.0f32; LANES]; G]; NT];
            for (rt, at) in res.iter_mut().zip(acc) {
                for (r, a) in rt.iter_mut().zip(at) {
                    // SAFETY: `r` holds LANES f32.
                    unsafe { _mm256_storeu_ps(r.as_mut_ptr(), a) };
                }
            }
            res
        }

        #[target_feature(enable = $feat)]
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
                    group_rows::<L2, 2, 4>([q0, q1], rows, dim, out, out_stride, qb, nq);
                } else {
                    group_rows::<DOT, 2, 4>([q0, q1], rows, dim, out, out_stride, qb, nq);
                }
                qb += 2 * LANES;
            }
            let last = pairs.remainder();
            if !last.is_empty() {
                if mode == L2 {
                    group_rows::<L2, 1, 8>([last], rows, dim, out, out_stride, qb, nq);
                } else {
                    group_rows::<DOT, 1, 8>([last], rows, dim, out, out_stride, qb, nq);
                }
            }
        }

        /// The chains of the `G` query groups `qts` (queries `qb ..`) against every row, `R` rows at a
        /// time.
        #[target_feature(enable = $feat)]
        fn group_rows<const MODE: u8, const G: usize, const R: usize>(
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
            while r + R <= nr {
                let res = query_block::<MODE, G, R>(qts, &rows[r * dim..(r + R) * dim], dim);
                scatter(&res, out, out_stride, qb, nq, r);
                r += R;
            }
            while r < nr {
                let res = query_block::<MODE, G, 1>(qts, &rows[r * dim..(r + 1) * dim], dim);
                scatter(&res, out, out_stride, qb, nq, r);
                r += 1;
            }
        }

        /// Chains of the `G` groups of 8 queries in `qts` (each `k`-major, 8 per `k`) against `R` rows:
        /// `G * R` accumulators, each corpus value broadcast once for the `G` groups (two groups of four
        /// rows: six loads for eight FMAs a step, where one group of eight rows needs nine).
        #[target_feature(enable = $feat)]
        fn query_block<const MODE: u8, const G: usize, const R: usize>(
            qts: [&[f32]; G],
            rows: &[f32],
            dim: usize,
        ) -> [[[f32; LANES]; R]; G] {
            assert!(qts.iter().all(|q| q.len() == dim * LANES) && rows.len() == R * dim);
            let rp = rows.as_ptr();
            let mut acc = [[_mm256_setzero_ps(); G]; R];
            for k in 0..dim {
                // SAFETY: `k < dim`, so `qt[k * 8 .. k * 8 + 8]` is inside each `qt` (length `8 * dim`).
                let qv: [__m256; G] = core::array::from_fn(|g| unsafe {
                    _mm256_loadu_ps(qts[g].as_ptr().add(k * LANES))
                });
                for (i, ar) in acc.iter_mut().enumerate() {
                    // SAFETY: `i < R` and `k < dim`, inside `rows` (length `R * dim`).
                    let c = _mm256_set1_ps(unsafe { *rp.add(i * dim + k) });
                    for (a, q) in ar.iter_mut().zip(&qv) {
                        *a = step::<MODE>(*q, c, *a);
                    }
                }
            }
            let mut res = [[[0.0f32; LANES]; R]; G];
            for (ri, ar) in acc.iter().enumerate() {
                for (rg, a) in res.iter_mut().zip(ar) {
                    // SAFETY: `rg[ri]` holds 8 f32.
                    unsafe { _mm256_storeu_ps(rg[ri].as_mut_ptr(), *a) };
                }
            }
            res
        }
    };
}

pub(super) mod v3 {
    lanes8!("avx2,fma", 2);
}

pub(super) mod v4 {
    lanes8!("avx2,fma,avx512f,avx512vl", 2);
}

/// The clip-and-noise noise at the AVX2 level, 8 blocks a chain (`gaussian8`): `avx512::gaussian16`'s steps
/// with 8 lanes, the tables read by gathers of whole entries. The compiler's form of the scalar loop read each
/// table value with a byte extract, a scalar load and an insert, which took most of the op.
mod noise {
    use super::super::RoundKeys;
    use core::arch::x86_64::*;

    /// `(hi, lo)` of `m * x` for 8 lanes of `x` (Philox's `mulhilo`): the even lanes' and the odd lanes' 64-bit
    /// products, their halves put back in place by a shuffle and a blend each.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn mulhilo8(m: __m256i, x: __m256i) -> (__m256i, __m256i) {
        // Dword pairs (a, b) -> (b, b) and (a, b) -> (a, a); blend the odd dwords.
        const HIGHS: i32 = 0b11_11_01_01;
        const LOWS: i32 = 0b10_10_00_00;
        const ODD: i32 = 0b1010_1010;
        let even = _mm256_mul_epu32(x, m);
        let odd = _mm256_mul_epu32(_mm256_srli_epi64::<32>(x), m);
        let hi = _mm256_blend_epi32::<ODD>(_mm256_shuffle_epi32::<HIGHS>(even), odd);
        let lo = _mm256_blend_epi32::<ODD>(even, _mm256_shuffle_epi32::<LOWS>(odd));
        (hi, lo)
    }

    /// `(hi, lo)` of `m * x` for one word (the rounds whose word is the same in every lane).
    #[inline(always)]
    fn mulhilo1(m: u32, x: u32) -> (u32, u32) {
        let p = u64::from(m) * u64::from(x);
        ((p >> 32) as u32, p as u32)
    }

    /// `(t[idx][0], t[idx][1])` for 8 indices in `0 .. 64`: two gathers of four 8-byte entries (both columns
    /// at once; a gather's cost goes by its elements), the lanes taken in the order (0, 1, 4, 5) and (2, 3,
    /// 6, 7) so that one shuffle per column puts them back in order.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn lookup_pairs8(t: &[[f32; 2]; 64], idx: __m256i) -> (__m256, __m256) {
        let idx = _mm256_permutevar8x32_epi32(idx, _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7));
        let base = t.as_ptr().cast::<f64>();
        // SAFETY: every index is masked to 0 .. 63 by the callers: each 8-byte load is one entry of `t`.
        let (a, b) = unsafe {
            (
                _mm256_castpd_ps(_mm256_i32gather_pd::<8>(base, _mm256_castsi256_si128(idx))),
                _mm256_castpd_ps(_mm256_i32gather_pd::<8>(
                    base,
                    _mm256_extracti128_si256::<1>(idx),
                )),
            )
        };
        // a = entries of lanes 0, 1 | 4, 5 and b = lanes 2, 3 | 6, 7, two floats each.
        (
            _mm256_shuffle_ps::<0x88>(a, b),
            _mm256_shuffle_ps::<0xDD>(a, b),
        )
    }

    /// `box_muller(w0, w1)` for 8 lanes: `avx512::box_muller16`'s steps (the scalar form's, each rounded once
    /// where it rounds), with 8 lanes, the tables read as pairs by [`lookup_pairs8`].
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn box_muller8(w0: __m256i, w1: __m256i) -> (__m256, __m256) {
        use recall_kernel_shared::math::{LN_OFF, LN_TABLE, LN2_HI, LN2_LO, TURN_RAD, TURN_TABLE};
        let f = _mm256_set1_ps;
        let i = _mm256_set1_epi32;
        // The radius: ln of the odd integer n = 2 (w0 >> 9) + 1 scaled by 2^-24 (its exponent lowered by 24).
        let n = _mm256_or_si256(_mm256_slli_epi32::<1>(_mm256_srli_epi32::<9>(w0)), i(1));
        let ix = _mm256_sub_epi32(_mm256_castps_si256(_mm256_cvtepi32_ps(n)), i(24 << 23));
        let tmp = _mm256_sub_epi32(ix, i(LN_OFF as i32));
        let j = _mm256_and_si256(_mm256_srli_epi32::<17>(tmp), i(63));
        let (invc, logc) = lookup_pairs8(&LN_TABLE.0, j);
        let z = _mm256_castsi256_ps(_mm256_sub_epi32(
            ix,
            _mm256_and_si256(tmp, i(0xff80_0000u32 as i32)),
        ));
        let kf = _mm256_cvtepi32_ps(_mm256_srai_epi32::<23>(tmp));
        let r = _mm256_fmadd_ps(z, invc, f(-1.0));
        let p = _mm256_fmadd_ps(r, f(-0.25), f(1.0 / 3.0));
        let p = _mm256_fmadd_ps(r, p, f(-0.5));
        let l1 = _mm256_fmadd_ps(_mm256_mul_ps(r, r), p, r);
        let ln = _mm256_add_ps(
            _mm256_fmadd_ps(kf, f(LN2_HI), logc),
            _mm256_fmadd_ps(kf, f(LN2_LO), l1),
        );
        let rad = _mm256_sqrt_ps(_mm256_mul_ps(f(-2.0), ln));
        // The angle: the table's nearest 64th of a turn and the rest b, |b| <= pi / 64.
        let a = _mm256_add_epi32(_mm256_srli_epi32::<8>(w1), i(1 << 17));
        let j = _mm256_and_si256(_mm256_srli_epi32::<18>(a), i(63));
        let (sa, ca) = lookup_pairs8(&TURN_TABLE.0, j);
        let d = _mm256_sub_ps(
            _mm256_castsi256_ps(_mm256_or_si256(
                i(0x4b00_0000),
                _mm256_and_si256(a, i(0x0003_ffff)),
            )),
            f(8_519_680.0),
        );
        let b = _mm256_mul_ps(d, f(TURN_RAD));
        let b2 = _mm256_mul_ps(b, b);
        let sb = _mm256_fmadd_ps(
            _mm256_mul_ps(b, b2),
            _mm256_fmadd_ps(b2, f(1.0 / 120.0), f(-1.0 / 6.0)),
            b,
        );
        let cb = _mm256_fmadd_ps(b2, _mm256_fmadd_ps(b2, f(1.0 / 24.0), f(-0.5)), f(1.0));
        // -(sa * sb): the product rounded, then its sign flipped (exact).
        let neg = _mm256_castsi256_ps(_mm256_xor_si256(
            _mm256_castps_si256(_mm256_mul_ps(sa, sb)),
            i(i32::MIN),
        ));
        let s = _mm256_fmadd_ps(sa, cb, _mm256_mul_ps(ca, sb));
        let c = _mm256_fmadd_ps(ca, cb, neg);
        (_mm256_mul_ps(rad, c), _mm256_mul_ps(rad, s))
    }

    /// `gaussian4(key, row, b0 + j)` for `j < 8 * CH` into `out[4 j .. 4 j + 4]` (`keys` are `key`'s round
    /// keys): `CH` interleaved chains of 8 blocks' Philox4x32-10, then both Box-Muller pairs, then the lanes'
    /// values put back in block order; `avx512::gaussian16`'s scheme with 8 lanes. The same bits as the scalar
    /// form, which the proptest checks at every level. Callers need the CPU to support AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(crate) fn gaussian8<const CH: usize>(keys: &RoundKeys, row: u64, b0: u32, out: &mut [f32]) {
        use recall_kernel_shared::math::{DOMAIN_NOISE, PHILOX_M0, PHILOX_M1};
        let out = &mut out[..32 * CH];
        let i = |v: u32| _mm256_set1_epi32(v as i32);
        let x = _mm256_xor_si256;
        let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        let k = &keys.0;
        let (m0, m1) = (i(PHILOX_M0), i(PHILOX_M1));
        // As in gaussian16: only word 0 of the counter differs by lane, so round 0's second product and round
        // 1's first are one scalar product each.
        let (hi1, lo1) = mulhilo1(PHILOX_M1, (row >> 32) as u32);
        let (w0, w1) = (hi1 ^ row as u32 ^ k[0][0], lo1);
        let (hi0, lo0) = mulhilo1(PHILOX_M0, w0);
        let mut c: [[__m256i; 4]; CH] = core::array::from_fn(|h| {
            let first = _mm256_add_epi32(i(b0.wrapping_add(8 * h as u32)), lanes);
            let (hi0v, lo0v) = mulhilo8(m0, first);
            let (w2, w3) = (x(hi0v, i(DOMAIN_NOISE ^ k[0][1])), lo0v);
            let (hi1v, lo1v) = mulhilo8(m1, w2);
            [
                x(hi1v, i(w1 ^ k[1][0])),
                lo1v,
                x(w3, i(hi0 ^ k[1][1])),
                i(lo0),
            ]
        });
        for kr in &k[2..] {
            for ch in c.iter_mut() {
                let (hi0, lo0) = mulhilo8(m0, ch[0]);
                let (hi1, lo1) = mulhilo8(m1, ch[2]);
                *ch = [
                    x(x(hi1, ch[1]), i(kr[0])),
                    lo1,
                    x(x(hi0, ch[3]), i(kr[1])),
                    lo0,
                ];
            }
        }
        for (ch, o) in c.iter().zip(out.chunks_exact_mut(32)) {
            let (g0, g1) = box_muller8(ch[0], ch[1]);
            let (g2, g3) = box_muller8(ch[2], ch[3]);
            // Lanes to blocks: per 128-bit half, blocks j and j + 4 in u_j; then the halves paired.
            let t0 = _mm256_castps_pd(_mm256_unpacklo_ps(g0, g1));
            let t1 = _mm256_castps_pd(_mm256_unpackhi_ps(g0, g1));
            let t2 = _mm256_castps_pd(_mm256_unpacklo_ps(g2, g3));
            let t3 = _mm256_castps_pd(_mm256_unpackhi_ps(g2, g3));
            let u0 = _mm256_castpd_ps(_mm256_unpacklo_pd(t0, t2));
            let u1 = _mm256_castpd_ps(_mm256_unpackhi_pd(t0, t2));
            let u2 = _mm256_castpd_ps(_mm256_unpacklo_pd(t1, t3));
            let u3 = _mm256_castpd_ps(_mm256_unpackhi_pd(t1, t3));
            // SAFETY: `o` holds 32 f32; each store writes 8 of them.
            unsafe {
                _mm256_storeu_ps(o.as_mut_ptr(), _mm256_permute2f128_ps::<0x20>(u0, u1));
                _mm256_storeu_ps(
                    o.as_mut_ptr().add(8),
                    _mm256_permute2f128_ps::<0x20>(u2, u3),
                );
                _mm256_storeu_ps(
                    o.as_mut_ptr().add(16),
                    _mm256_permute2f128_ps::<0x31>(u0, u1),
                );
                _mm256_storeu_ps(
                    o.as_mut_ptr().add(24),
                    _mm256_permute2f128_ps::<0x31>(u2, u3),
                );
            }
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;
        use recall_kernel_shared::math::{box_muller, gaussian4};

        /// The 8-lane noise against the scalar contract, bit for bit, over many keys, rows (high words included)
        /// and first blocks (wrapping past `u32::MAX`), one chain and four; and Box-Muller alone on the words at
        /// the ends of its ranges.
        #[test]
        fn gaussian8_is_the_scalar_noise_bit_for_bit() {
            if !(is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")) {
                eprintln!("skipped: this CPU has no AVX2 and FMA");
                return;
            }
            let mut s = 0x0123_4567_89AB_CDEFu64;
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
                    u32::MAX - 5
                } else {
                    (next() % 4096) as u32 * 8
                };
                let t = RoundKeys::new(key);
                let mut one = [0.0f32; 32];
                let mut four = [0.0f32; 128];
                // SAFETY: the CPU supports AVX2 and FMA (checked above).
                unsafe {
                    gaussian8::<1>(&t, row, b0, &mut one);
                    gaussian8::<4>(&t, row, b0, &mut four);
                }
                for (j, g) in one.chunks(4).chain(four.chunks(4)).enumerate() {
                    let block = b0.wrapping_add((if j < 8 { j } else { j - 8 }) as u32);
                    let want = gaussian4(key, row, block).map(f32::to_bits);
                    let got: Vec<u32> = g.iter().map(|v| v.to_bits()).collect();
                    assert_eq!(got, want, "case {case}, block {j}");
                }
            }
            // Box-Muller alone on the words at the ends of its ranges.
            let (w0, w1) = super::super::super::noise_edge_words();
            for (a, b) in w0.chunks(8).zip(w1.chunks(8)) {
                let mut la = [0u32; 8];
                let mut lb = [0u32; 8];
                la[..a.len()].copy_from_slice(a);
                lb[..b.len()].copy_from_slice(b);
                let (mut o0, mut o1) = ([0.0f32; 8], [0.0f32; 8]);
                // SAFETY: as above; the arrays hold 8 u32 or f32 each.
                unsafe {
                    let (g0, g1) = box_muller8(
                        _mm256_loadu_si256(la.as_ptr().cast()),
                        _mm256_loadu_si256(lb.as_ptr().cast()),
                    );
                    _mm256_storeu_ps(o0.as_mut_ptr(), g0);
                    _mm256_storeu_ps(o1.as_mut_ptr(), g1);
                }
                for l in 0..8 {
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
}

pub(crate) use noise::gaussian8;

/// The nonzero positions at the AVX2 level (`crate::nonzero`).
mod nonzero {
    use crate::nonzero::{BLOCK, push_portable};
    use core::arch::x86_64::*;

    /// For each 8-bit mask, the lanes of its set bits in order, 3 bits each (lane `k` of the compressed register
    /// in bits `3k .. 3k + 3`), and their count from bit 24: a compress of 8 lanes is one load from here, a shift,
    /// an AND and a permute (AVX2 has no `vpcompressd`).
    const COMPRESS8: [u32; 256] = {
        let mut t = [0u32; 256];
        let mut m = 0;
        while m < 256 {
            let (mut e, mut k, mut l) = (0u32, 0u32, 0u32);
            while l < 8 {
                if (m >> l) & 1 != 0 {
                    e |= l << (3 * k);
                    k += 1;
                }
                l += 1;
            }
            t[m] = e | (k << 24);
            m += 1;
        }
        t
    };

    /// Append to `out` the positions `base + i` of the nonzero values of `values` (a bit besides the sign set),
    /// ascending: a block of 64 values is tested by one `vptest` of the OR of its eight registers; in a block with
    /// a nonzero value each register's mask picks its 8 positions' permutation from [`COMPRESS8`], and the permuted
    /// positions are stored whole after the positions so far, the end moved by the mask's count. The tail goes to
    /// the portable loop.
    ///
    /// # Safety
    /// The CPU must support AVX2 and FMA. The positions must fit `u32` (past it they wrap).
    #[target_feature(enable = "avx2,fma")]
    pub(crate) unsafe fn push_nonzero(values: &[f32], base: u32, out: &mut Vec<u32>) {
        let magnitude = _mm256_set1_epi32(0x7fff_ffff);
        let zero = _mm256_setzero_si256();
        let shifts = _mm256_setr_epi32(0, 3, 6, 9, 12, 15, 18, 21);
        let seven = _mm256_set1_epi32(7);
        // The positions of the block's first register's values; the other registers' are 8, 16, ... 56 on.
        let mut first = _mm256_add_epi32(
            _mm256_set1_epi32(base as i32),
            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
        );
        let mut blocks = values.chunks_exact(BLOCK);
        for block in blocks.by_ref() {
            let p = block.as_ptr().cast::<__m256i>();
            // SAFETY: `block` holds 64 values: the eight loads read 8 each at 0, 8, ... 56.
            let v: [__m256i; 8] = core::array::from_fn(|r| unsafe { _mm256_loadu_si256(p.add(r)) });
            let any = _mm256_or_si256(
                _mm256_or_si256(_mm256_or_si256(v[0], v[1]), _mm256_or_si256(v[2], v[3])),
                _mm256_or_si256(_mm256_or_si256(v[4], v[5]), _mm256_or_si256(v[6], v[7])),
            );
            if _mm256_testz_si256(any, magnitude) == 0 {
                out.reserve(BLOCK);
                let mut len = out.len();
                let dst = out.as_mut_ptr();
                for (r, &v) in v.iter().enumerate() {
                    let zeros = _mm256_cmpeq_epi32(_mm256_and_si256(v, magnitude), zero);
                    let m = !_mm256_movemask_ps(_mm256_castsi256_ps(zeros)) & 0xff;
                    let e = COMPRESS8[m as usize];
                    let lanes = _mm256_and_si256(
                        _mm256_srlv_epi32(_mm256_set1_epi32(e as i32), shifts),
                        seven,
                    );
                    let ids = _mm256_add_epi32(first, _mm256_set1_epi32(8 * r as i32));
                    // SAFETY: the capacity is at least the block's first `len` plus 64, and each register moves
                    // `len` by at most 8, so the 8 lanes stored at `len` are inside the allocation.
                    unsafe {
                        _mm256_storeu_si256(
                            dst.add(len).cast(),
                            _mm256_permutevar8x32_epi32(ids, lanes),
                        )
                    };
                    len += (e >> 24) as usize;
                }
                // SAFETY: `len` is within the capacity (above); the values up to the old length were there, and
                // each register's store wrote its first `count` lanes, which the new length counts, before the
                // next register's store began at their end.
                unsafe { out.set_len(len) };
            }
            first = _mm256_add_epi32(first, _mm256_set1_epi32(BLOCK as i32));
        }
        let tail = blocks.remainder();
        push_portable(
            tail,
            base.wrapping_add((values.len() - tail.len()) as u32),
            out,
        );
    }
}

pub(crate) use nonzero::push_nonzero;
