//! The ascending positions of the nonzero values of an `f32` slice: the active nodes of a pushed spreading hop
//! (`spread.rs`) and the seeds of a GPU spread's dense seed vector (`recall-gpu-kernels`' launcher). One scan for
//! both: a block of [`BLOCK`] values with no nonzero value is passed by one wide test, the others compacted without
//! a branch per value, at the handle's SIMD level (`kernels::avx512`, `kernels::avx2`, the portable loop below).
//!
//! A value is nonzero when a bit other than the sign is set: `-0.0` is zero; NaN, infinities and subnormals are
//! nonzero (`x != 0.0`, read from the bits).
//!
//! Session 37, 1 M values at random with 1 % / 10 % nonzero, one core of the development VM (from the best to the
//! median of 300 calls, three runs): AVX-512 144-163 / 153-189 us, AVX2 162-212 / 157-178 us, the portable loop (SSE2)
//! 274-332 / 753-805 us; the two scans it replaced took 326-365 / 997-1,057 us (the CPU spread's, SSE2 only) and
//! 493-567 / 1,482-1,550 us (the GPU launcher's, AVX-512: a branch per value in a block with a nonzero). With no
//! nonzero value every form reads the 4 MB in about 135 us.

use crate::CpuError;
use crate::simd::{Cpu, SimdLevel};

/// Values per block: a block with no nonzero value costs one test (an OR of four AVX-512 or eight AVX2 registers).
pub(crate) const BLOCK: usize = 64;

/// Values per step of the portable loop inside a block with a nonzero value: a step with none is passed by one
/// test, the others compacted without a branch per value.
const STEP: usize = 16;

/// Append to `out` the positions `base + i` of the nonzero values `values[i]` (`-0.0` counts as zero; NaN, the
/// infinities and subnormals do not), ascending, at the process-wide SIMD level ([`crate::simd_level`]).
///
/// ```
/// let mut ids = vec![7];
/// recall_cpu_simd::nonzero_positions(&[0.0, 2.0, -0.0, 0.5], 10, &mut ids)?;
/// assert_eq!(ids, [7, 11, 13]);
/// # Ok::<(), recall_cpu_simd::CpuError>(())
/// ```
///
/// # Errors
/// [`CpuError::TooLarge`] (and `out` untouched) when the last position, `base + values.len() - 1`, is past
/// `u32::MAX`: from `base = 0`, more than 2^32 values.
pub fn nonzero_positions(values: &[f32], base: u32, out: &mut Vec<u32>) -> Result<(), CpuError> {
    Cpu::new().nonzero_positions(values, base, out)
}

impl Cpu {
    /// [`nonzero_positions`] at this handle's SIMD level (every level gives the same positions).
    ///
    /// # Errors
    /// As [`nonzero_positions`].
    pub fn nonzero_positions(
        &self,
        values: &[f32],
        base: u32,
        out: &mut Vec<u32>,
    ) -> Result<(), CpuError> {
        let room = u64::from(u32::MAX - base) + 1;
        if values.len() as u64 > room {
            return Err(CpuError::TooLarge {
                what: "a scan for nonzero positions (u32) from its base",
                len: values.len(),
                max: usize::try_from(room).unwrap_or(usize::MAX),
            });
        }
        push_nonzero(self.level(), values, base, out);
        Ok(())
    }
}

/// [`nonzero_positions`] without its check, at `level`: the caller knows the positions fit `u32`
/// (`base + values.len() - 1 <= u32::MAX`; past it they wrap).
pub(crate) fn push_nonzero(level: SimdLevel, values: &[f32], base: u32, out: &mut Vec<u32>) {
    match level {
        #[cfg(target_arch = "x86_64")]
        SimdLevel::Avx512 => {
            // SAFETY: `Avx512` is only handed out when the CPU reports AVX-512F, AVX-512VL, AVX2 and FMA.
            unsafe { crate::kernels::avx512::push_nonzero(values, base, out) }
        }
        #[cfg(target_arch = "x86_64")]
        SimdLevel::Avx2 => {
            // SAFETY: `Avx2` is only handed out when the CPU reports AVX2 and FMA.
            unsafe { crate::kernels::avx2::push_nonzero(values, base, out) }
        }
        // NEON is the baseline of aarch64: the portable loop's tests are NEON there.
        _ => push_portable(values, base, out),
    }
}

/// Whether a value of `values` is nonzero: an OR of the bits, the sign masked off once at the end (the compiler
/// vectorises it; over a fixed-size array, fully unrolled).
#[inline(always)]
fn any_nonzero(values: &[f32]) -> bool {
    values.iter().fold(0u32, |a, x| a | x.to_bits()) & 0x7fff_ffff != 0
}

/// The portable form of [`push_nonzero`] (any level; the SIMD kernels' tails): blocks of [`BLOCK`] values with
/// none skipped by one test, the others in steps of [`STEP`]; a step with a nonzero value writes every position
/// into a buffer and moves its end by one where the value is nonzero (no branch per value: nonzero and zero values
/// alternate at random).
#[inline(always)]
pub(crate) fn push_portable(values: &[f32], base: u32, out: &mut Vec<u32>) {
    let (blocks, tail) = values.as_chunks::<BLOCK>();
    for (c, block) in blocks.iter().enumerate() {
        if any_nonzero(block) {
            let first = base.wrapping_add((c * BLOCK) as u32);
            let (steps, _) = block.as_chunks::<STEP>();
            for (s, step) in steps.iter().enumerate() {
                push_step(step, first.wrapping_add((s * STEP) as u32), out);
            }
        }
    }
    let first = base.wrapping_add((values.len() - tail.len()) as u32);
    for (s, step) in tail.chunks(STEP).enumerate() {
        push_step(step, first.wrapping_add((s * STEP) as u32), out);
    }
}

/// The nonzero positions of `step` (at most [`STEP`] values) plus `first`.
#[inline(always)]
fn push_step(step: &[f32], first: u32, out: &mut Vec<u32>) {
    if any_nonzero(step) {
        let mut buf = [0u32; STEP];
        let mut m = 0;
        for (j, x) in step.iter().enumerate() {
            buf[m] = first.wrapping_add(j as u32);
            m += usize::from(x.to_bits() & 0x7fff_ffff != 0);
        }
        out.extend_from_slice(&buf[..m]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::available_levels;

    /// The plain filter the scans must match.
    fn plain(values: &[f32], base: u32) -> Vec<u32> {
        (0..values.len())
            .filter(|&i| values[i] != 0.0)
            .map(|i| base + i as u32)
            .collect()
    }

    /// Every level, and the portable loop on its own, against the plain filter: lengths around the steps and
    /// blocks, densities from none to all, nonzero values of every kind (subnormals, NaN, the infinities) among
    /// `+0.0` and `-0.0`, nonzeros at the ends of the blocks, bases from 0 to the last that fits; the positions are
    /// appended after what `out` held.
    #[test]
    fn nonzero_positions_match_the_plain_filter_at_every_level() {
        let special = [
            f32::from_bits(1),
            -f32::from_bits(1),
            f32::MIN_POSITIVE,
            f32::NAN,
            -f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            -2.5,
            1.0,
        ];
        let lens = [
            0, 1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 1000, 100_003,
        ];
        let mut x = 0x9E37_79B9_u32;
        for n in lens {
            // 1 in 256, 1 in 64, 1 in 16, 1 in 2 and every value nonzero; the rest +0.0 or -0.0.
            for per_256 in [0u32, 1, 4, 16, 128, 256] {
                let mut v = vec![0.0f32; n];
                for vi in v.iter_mut() {
                    x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                    *vi = if (x >> 24) < per_256 {
                        special[(x as usize >> 8) % special.len()]
                    } else if x & 0x80 != 0 {
                        -0.0
                    } else {
                        0.0
                    };
                }
                if per_256 == 4 {
                    for i in [0, STEP - 1, STEP, BLOCK - 1, BLOCK, n.saturating_sub(1)] {
                        if i < n {
                            v[i] = f32::from_bits(1);
                        }
                    }
                }
                let room = u32::MAX - (n.saturating_sub(1) as u32);
                for base in [0, 1, 12_345, room] {
                    let want: Vec<u32> = [7].into_iter().chain(plain(&v, base)).collect();
                    let case = format!("n = {n}, {per_256} in 256, base {base}");
                    for level in available_levels() {
                        let mut got = vec![7];
                        Cpu::with_level(level)
                            .nonzero_positions(&v, base, &mut got)
                            .expect("the positions fit u32");
                        assert_eq!(got, want, "{case}, {level:?}");
                    }
                    let mut got = vec![7];
                    push_portable(&v, base, &mut got);
                    assert_eq!(got, want, "{case}, portable");
                }
            }
        }
        let mut got = Vec::new();
        nonzero_positions(&vec![-0.0f32; 1000], 0, &mut got).expect("fits");
        assert!(got.is_empty());
    }

    /// Positions past `u32::MAX` are refused before any work, whatever the values; the last one that fits is not.
    #[test]
    fn positions_past_u32_are_refused() {
        let mut out = vec![7];
        assert_eq!(
            nonzero_positions(&[1.0, 1.0], u32::MAX, &mut out),
            Err(CpuError::TooLarge {
                what: "a scan for nonzero positions (u32) from its base",
                len: 2,
                max: 1,
            })
        );
        assert_eq!(
            nonzero_positions(&[0.0; 65], u32::MAX - 63, &mut out).map_err(|_| ()),
            Err(())
        );
        assert_eq!(out, [7]);
        nonzero_positions(&[0.0, 1.0], u32::MAX - 1, &mut out).expect("fits");
        nonzero_positions(&[], u32::MAX, &mut out).expect("nothing to place");
        assert_eq!(out, [7, u32::MAX]);
    }
}
