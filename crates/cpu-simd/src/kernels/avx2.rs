//! AVX2 + FMA, 8 lanes. Row lanes: 8 rows, four `k` at a time transposed in registers, a broadcast query value FMA'd
//! against the vector of 8 rows' values at the same `k`. Query lanes: 8 queries transposed once to
//! `k`-major, a broadcast corpus value FMA'd against them.

/// The kernels, generated twice: `v3` for AVX2 + FMA (16 vector registers), `v4` for the same code with
/// AVX-512VL enabled (32 registers). Same instructions on the values, same order, same bits. `$nt` is
/// the number of 8-row tiles the one-query passes keep in flight: two in both. Four (32 rows, which
/// `v4`'s registers allow) was faster from cache but slower from DRAM: 32 interleaved row streams
/// defeat the prefetchers (paired runs of the 100,000 x 768 cosine scan on Zen 5: recall/simsimd time
/// ratio 1.27 to 1.67 with four tiles, 1.08 to 1.27 with two).
macro_rules! lanes8 {
    ($feat:literal, $nt:literal) => {
        use super::super::{DOT, DOTSQ, L2, SQ};
        use core::arch::x86_64::*;

        const LANES: usize = 8;

        /// # Safety
        /// The CPU must support AVX2 and FMA. `queries` and `rows` hold whole rows of `dim` values; `out` holds
        /// `(n_queries - 1) * out_stride + n_rows` values with `out_stride >= n_rows` (checked by the caller).
        #[target_feature(enable = $feat)]
        pub(in crate::kernels) unsafe fn chains(
            mode: u8,
            queries: &[f32],
            rows: &[f32],
            dim: usize,
            out: &mut [f32],
            out_stride: usize,
        ) {
            let nq = queries.len() / dim;
            if mode == SQ || nq < 4 {
                row_lanes(mode, queries, rows, dim, out, out_stride);
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

        /// Chains of the 8 queries in `qt` (`k`-major, 8 per `k`) against `R` rows.
        #[target_feature(enable = $feat)]
        fn query_block<const MODE: u8, const R: usize>(
            qt: &[f32],
            rows: &[f32],
            dim: usize,
        ) -> [[f32; LANES]; R] {
            assert!(qt.len() == dim * LANES && rows.len() == R * dim);
            let qp = qt.as_ptr();
            let rp = rows.as_ptr();
            let mut acc = [_mm256_setzero_ps(); R];
            for k in 0..dim {
                // SAFETY: `k < dim`, so `qt[k * 8 .. k * 8 + 8]` is inside `qt` (length `8 * dim`).
                let qv = unsafe { _mm256_loadu_ps(qp.add(k * LANES)) };
                for (i, a) in acc.iter_mut().enumerate() {
                    // SAFETY: `i < R` and `k < dim`, inside `rows` (length `R * dim`).
                    let c = _mm256_set1_ps(unsafe { *rp.add(i * dim + k) });
                    *a = step::<MODE>(qv, c, *a);
                }
            }
            let mut res = [[0.0f32; LANES]; R];
            for (r, a) in res.iter_mut().zip(acc) {
                // SAFETY: `r` holds 8 f32.
                unsafe { _mm256_storeu_ps(r.as_mut_ptr(), a) };
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
