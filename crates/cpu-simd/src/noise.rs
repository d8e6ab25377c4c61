//! Clip-and-noise (`docs/numerics.md`, "Clip-and-noise"): per-row L2 clip, then Philox4x32-10 Gaussian
//! noise from the functions in `recall-kernel-shared::math`, which the GPU kernel calls too.

use crate::dense::{check_matrix, check_matrix_shape};
use crate::kernels;
use crate::simd::Cpu;
#[cfg(target_arch = "x86_64")]
use crate::simd::SimdLevel;
use crate::{CpuError, PAR_MIN_WORK, first_non_finite, in_pool};
use rayon::prelude::*;
use recall_kernel_shared::NOISE_RADII;
use recall_kernel_shared::math::{box_muller_radius, gaussian4, philox_key};

/// Clip every row of `x` (`n * dim`, row-major) to L2 norm `clip`, then add `sigma` times standard normal
/// noise drawn from the counter-based stream of `seed`.
pub fn clip_and_noise(
    x: &[f32],
    dim: usize,
    clip: f32,
    sigma: f32,
    seed: u64,
) -> Result<Vec<f32>, CpuError> {
    Cpu::new().clip_and_noise(x, dim, clip, sigma, seed)
}

/// [`clip_and_noise`] into `out` (`x.len()` values), for a caller that reuses its output: a fresh output of
/// hundreds of MB costs its first touch of every page, which can take as long as the op itself. Errors as
/// [`Cpu::clip_and_noise_into`].
pub fn clip_and_noise_into(
    x: &[f32],
    dim: usize,
    clip: f32,
    sigma: f32,
    seed: u64,
    out: &mut [f32],
) -> Result<(), CpuError> {
    Cpu::new().clip_and_noise_into(x, dim, clip, sigma, seed, out)
}

/// The check of a clip-and-noise output buffer: it must hold `x_len` values (every layer that takes one calls
/// this before writing).
pub fn check_clip_noise_output(x_len: usize, out_len: usize) -> Result<(), CpuError> {
    if out_len != x_len {
        return Err(CpuError::LengthMismatch {
            what: "clip-and-noise output",
            expected: x_len,
            got: out_len,
        });
    }
    Ok(())
}

/// Every Box-Muller radius clip-and-noise can produce: `box_muller_radius(i << 9)` for `i < 2^23` (the
/// reference the diff-test holds the device's radii to; `uniform_open` reads 23 bits of its word).
pub fn noise_radii() -> Vec<f32> {
    in_pool(|| {
        (0..NOISE_RADII)
            .into_par_iter()
            .map(|i| box_muller_radius(i << 9))
            .collect()
    })
}

/// The input checks of [`clip_and_noise`] (returns the number of rows), for callers that validate before
/// choosing a device.
pub fn check_clip_noise_inputs(
    x: &[f32],
    dim: usize,
    clip: f32,
    sigma: f32,
) -> Result<usize, CpuError> {
    check_matrix("vectors", x, dim)?;
    check_clip_noise_shape(x, dim, clip, sigma)
}

/// [`check_clip_noise_inputs`] without the scan over values, for callers that leave that scan to the op (the
/// CPU's clip-and-noise checks its values in the pass that reads them).
pub fn check_clip_noise_shape(
    x: &[f32],
    dim: usize,
    clip: f32,
    sigma: f32,
) -> Result<usize, CpuError> {
    let n = check_matrix_shape("vectors", x, dim)?;
    if !(clip.is_finite() && clip > 0.0) {
        return Err(CpuError::ParamOutOfRange {
            what: "clip",
            value: clip.to_string(),
            expected: "finite and > 0",
        });
    }
    if !(sigma.is_finite() && sigma >= 0.0) {
        return Err(CpuError::ParamOutOfRange {
            what: "sigma",
            value: sigma.to_string(),
            expected: "finite and >= 0",
        });
    }
    Ok(n)
}

/// Rows per task.
const ROWS_PER_TASK: usize = 256;

/// Blocks of 4 noise values made together (one SIMD lane each): `CHAINS` groups of 16.
const NOISE_BATCH: usize = 16 * CHAINS;

/// Independent groups of 16 blocks in a batch (the AVX-512 kernel interleaves their Philox rounds).
const CHAINS: usize = 2;

/// One batch's noise: `g[j / 16][j % 16]` is block `j`'s four values.
type Batch = [[[f32; 4]; 16]; CHAINS];

/// Outputs of at least this many bytes are written with non-temporal stores at the AVX-512 level
/// ([`NoiseRows::run_avx512`]): more than most servers' last-level cache holds beside the input, so the output
/// would leave the caches before anyone read it.
#[cfg(target_arch = "x86_64")]
const STREAM_MIN_BYTES: usize = 1 << 26;

impl Cpu {
    /// Clip every row of `x` (`n * dim`, row-major) to L2 norm `clip` (finite, `> 0`), then add `sigma`
    /// (finite, `>= 0`) times standard normal noise drawn from the counter-based stream of `seed`.
    pub fn clip_and_noise(
        &self,
        x: &[f32],
        dim: usize,
        clip: f32,
        sigma: f32,
        seed: u64,
    ) -> Result<Vec<f32>, CpuError> {
        let mut out = crate::output_buffer(x.len());
        self.clip_and_noise_into(x, dim, clip, sigma, seed, &mut out)?;
        Ok(out)
    }

    /// [`Cpu::clip_and_noise`] into `out`, which must hold `x.len()` values (every one is written). On an
    /// error `out` is untouched, but for a value that is not finite: the values are checked row by row as the
    /// op reads them, so `out` may then hold some rows' results.
    ///
    /// The values are checked in the same pass (unless the caller validated them): a row's squared norm is
    /// finite unless one of its values is not or the sum overflowed, so only a task with a norm that is not
    /// finite searches its rows, and the smallest index any task found is the error (the first non-finite
    /// value, as `check_finite` reports). Reading the input once instead of twice: it is the op's largest
    /// stream with the output.
    pub fn clip_and_noise_into(
        &self,
        x: &[f32],
        dim: usize,
        clip: f32,
        sigma: f32,
        seed: u64,
        out: &mut [f32],
    ) -> Result<(), CpuError> {
        #[cfg(target_arch = "x86_64")]
        let stream = size_of_val(out) >= STREAM_MIN_BYTES;
        #[cfg(not(target_arch = "x86_64"))]
        let stream = false;
        self.noise_into(x, dim, clip, sigma, seed, out, stream)
    }

    /// [`Cpu::clip_and_noise_into`], its output written by non-temporal stores where `stream` (x86-64 at the
    /// AVX-512 level; the same bits).
    #[allow(clippy::too_many_arguments)]
    fn noise_into(
        &self,
        x: &[f32],
        dim: usize,
        clip: f32,
        sigma: f32,
        seed: u64,
        out: &mut [f32],
        stream: bool,
    ) -> Result<(), CpuError> {
        #[cfg(not(target_arch = "x86_64"))]
        let _ = stream;
        check_clip_noise_shape(x, dim, clip, sigma)?;
        check_clip_noise_output(x.len(), out.len())?;
        let key = philox_key(seed);
        let level = self.level();
        let scan = !self.is_prevalidated();
        // The index of the task's first value that is not finite, if any (its rows are then left unwritten).
        let work = |(t, o): (usize, &mut [f32])| -> Option<usize> {
            let r0 = t * ROWS_PER_TASK;
            let rows = &x[r0 * dim..r0 * dim + o.len()];
            let mut sq = vec![0.0f32; o.len() / dim];
            kernels::sqnorms(level, rows, dim, &mut sq);
            if scan && let Some(r) = sq.iter().position(|s| !s.is_finite()) {
                // Rows before r are finite (their norms are); an overflowed norm's row may be too.
                if let Some(i) = first_non_finite(&rows[r * dim..]) {
                    return Some(r0 * dim + r * dim + i);
                }
            }
            let job = NoiseRows {
                rows,
                sq: &sq,
                dim,
                r0,
                clip,
                sigma,
                key,
            };
            #[cfg(target_arch = "x86_64")]
            if level >= SimdLevel::Avx512 {
                // SAFETY: the Avx512 level is chosen only where the CPU reports AVX-512F/VL, AVX2 and FMA.
                unsafe { job.run_avx512(o, stream) };
                return None;
            }
            #[cfg(target_arch = "x86_64")]
            if level >= SimdLevel::Avx2 {
                // SAFETY: the Avx2 level and above are chosen only where the CPU reports AVX2 and FMA.
                unsafe { job.run_fma(o) };
                return None;
            }
            job.run(o);
            None
        };
        let first_bad = if x.len() >= PAR_MIN_WORK / 8 {
            in_pool(|| {
                out.par_chunks_mut(ROWS_PER_TASK * dim)
                    .enumerate()
                    .filter_map(work)
                    .min()
            })
        } else {
            out.chunks_mut(ROWS_PER_TASK * dim)
                .enumerate()
                .filter_map(work)
                .min()
        };
        match first_bad {
            None => Ok(()),
            Some(index) => Err(CpuError::NonFinite {
                what: "vectors",
                index,
            }),
        }
    }
}

/// One task's rows of clip-and-noise after their squared norms: the clip and the noise, row by row.
struct NoiseRows<'a> {
    rows: &'a [f32],
    sq: &'a [f32],
    dim: usize,
    r0: usize,
    clip: f32,
    sigma: f32,
    key: [u32; 2],
}

impl NoiseRows<'_> {
    /// `out` (the task's rows) from the rows, their norms and the noise.
    #[inline(always)]
    fn run(&self, out: &mut [f32]) {
        self.run_with(out, &ScalarBatch(self.key))
    }

    /// The clip's factor for a row of squared norm `sq`: `Some(clip / norm)` where the norm is above `clip`.
    #[inline(always)]
    fn scale(&self, sq: f32) -> Option<f32> {
        let nr = sq.sqrt();
        if nr > self.clip {
            Some(self.clip / nr)
        } else {
            None
        }
    }

    /// [`NoiseRows::run`] with the noise of each batch from `batch`.
    #[inline(always)]
    fn run_with(&self, out: &mut [f32], batch: &impl NoiseBatch) {
        for (i, ((orow, xrow), s)) in out
            .chunks_exact_mut(self.dim)
            .zip(self.rows.chunks_exact(self.dim))
            .zip(self.sq)
            .enumerate()
        {
            let scale = self.scale(*s);
            let row = (self.r0 + i) as u64;
            for (c, (ochunk, xchunk)) in orow
                .chunks_mut(4 * NOISE_BATCH)
                .zip(xrow.chunks(4 * NOISE_BATCH))
                .enumerate()
            {
                let mut g = [[[0.0f32; 4]; 16]; CHAINS];
                batch.fill(row, (c * NOISE_BATCH) as u32, &mut g);
                // One flat loop per case (the compiler's SIMD loop; the clip's test outside it).
                let g = g.as_flattened().as_flattened();
                match scale {
                    Some(s) => {
                        for ((o, v), g) in ochunk.iter_mut().zip(xchunk).zip(g) {
                            *o = self.sigma.mul_add(*g, v * s);
                        }
                    }
                    None => {
                        for ((o, v), g) in ochunk.iter_mut().zip(xchunk).zip(g) {
                            *o = self.sigma.mul_add(*g, *v);
                        }
                    }
                }
            }
        }
    }

    /// [`NoiseRows::run`] compiled for AVX2 and FMA, each batch's noise by `kernels::avx2::gaussian8` (four
    /// interleaved chains of 8 blocks, its tables read by gathers), the output loop with FMA instructions
    /// (`f32::mul_add`: the same bits as the C library's `fmaf`, which the baseline build calls).
    ///
    /// # Safety
    /// The CPU must support AVX2 and FMA.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn run_fma(&self, out: &mut [f32]) {
        self.run_with(out, &Avx2Batch(kernels::RoundKeys::new(self.key)))
    }

    /// [`NoiseRows::run`] compiled for AVX-512, each batch's noise by `kernels::avx512::gaussian16` (16 blocks
    /// in the lanes, [`CHAINS`] such chains interleaved, its tables read by permutes: the compiler's form of the
    /// scalar loop gathered them, 16 loads each, and spent more on them than on Philox). Outputs of
    /// [`STREAM_MIN_BYTES`] or more (`stream`): each row's noise first, then the row by `stream_row`.
    ///
    /// # Safety
    /// The CPU must support AVX-512F, AVX-512VL, AVX2 and FMA.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
    unsafe fn run_avx512(&self, out: &mut [f32], stream: bool) {
        let batch = Avx512Batch(kernels::avx512::NoiseColumns::new(self.key));
        if !stream {
            self.run_with(out, &batch);
            return;
        }
        // Each row's noise first, then the row written in one pass by `stream_row`.
        let mut g: Vec<Batch> =
            vec![[[[0.0f32; 4]; 16]; CHAINS]; self.dim.div_ceil(4 * NOISE_BATCH)];
        for (i, ((orow, xrow), s)) in out
            .chunks_exact_mut(self.dim)
            .zip(self.rows.chunks_exact(self.dim))
            .zip(self.sq)
            .enumerate()
        {
            let row = (self.r0 + i) as u64;
            for (c, gc) in g.iter_mut().enumerate() {
                batch.fill(row, (c * NOISE_BATCH) as u32, gc);
            }
            let g = g.as_flattened().as_flattened().as_flattened();
            let scale = self.scale(*s);
            kernels::avx512::stream_row(orow, xrow, g, self.sigma, scale);
        }
        // Before the task is reported done: its non-temporal stores are weakly ordered.
        kernels::avx512::store_fence();
    }
}

/// Where a batch's noise comes from (each kind holds the op's key, or its round keys). [`NoiseRows::run_with`]
/// calls `fill` for each batch, inlined, so that its steps are compiled with the target features of the caller
/// (`run_fma`, `run_avx512`): a closure in its place was left out of line in the AVX2+FMA build, its `mul_add`s
/// calls to the C library's `fmaf`, 16x slower (session 27).
trait NoiseBatch {
    /// `gaussian4(key, row, b0 + j)` into block `j` of `g` for `j < NOISE_BATCH`.
    fn fill(&self, row: u64, b0: u32, g: &mut Batch);
}

/// The scalar contract's blocks one after another, in a loop without branches or calls that the compiler can
/// run across SIMD lanes (each lane its own block: the same steps, so the same bits).
struct ScalarBatch([u32; 2]);

impl NoiseBatch for ScalarBatch {
    #[inline(always)]
    fn fill(&self, row: u64, b0: u32, g: &mut Batch) {
        for (j, gj) in g.as_flattened_mut().iter_mut().enumerate() {
            *gj = gaussian4(self.0, row, b0 + j as u32);
        }
    }
}

/// 4 x 8 blocks in AVX2 lanes (`kernels::avx2::gaussian8`); made only in [`NoiseRows::run_fma`].
#[cfg(target_arch = "x86_64")]
struct Avx2Batch(kernels::RoundKeys);

#[cfg(target_arch = "x86_64")]
impl NoiseBatch for Avx2Batch {
    #[inline(always)]
    fn fill(&self, row: u64, b0: u32, g: &mut Batch) {
        let g = g.as_flattened_mut().as_flattened_mut();
        // SAFETY: an Avx2Batch exists only inside `run_fma`, whose caller guarantees AVX2 and FMA; a batch is
        // 32 blocks, 4 chains of 8.
        unsafe { kernels::avx2::gaussian8::<{ NOISE_BATCH / 8 }>(&self.0, row, b0, g) }
    }
}

/// [`CHAINS`] x 16 blocks in AVX-512 lanes (`kernels::avx512::gaussian16`); made only in
/// [`NoiseRows::run_avx512`].
#[cfg(target_arch = "x86_64")]
struct Avx512Batch(kernels::avx512::NoiseColumns);

#[cfg(target_arch = "x86_64")]
impl NoiseBatch for Avx512Batch {
    #[inline(always)]
    fn fill(&self, row: u64, b0: u32, g: &mut Batch) {
        // SAFETY: an Avx512Batch exists only inside `run_avx512`, whose caller guarantees AVX-512F, AVX2 and FMA.
        unsafe { kernels::avx512::gaussian16(&self.0, row, b0, g) }
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;
    use crate::available_levels;

    /// The streamed output (each row's noise first, then non-temporal stores) is the direct output bit for bit,
    /// for widths around the 16-lane vectors and the batches, rows clipped and not, and an output slice starting
    /// anywhere against a 64-byte line; nothing outside the slice is written. Only the AVX-512 level streams
    /// (the others ignore the switch), so the test runs there.
    #[test]
    fn streamed_rows_are_the_direct_rows_bit_for_bit() {
        if !available_levels().contains(&SimdLevel::Avx512) {
            eprintln!("skipped: this CPU has no AVX-512, the only level that streams its output");
            return;
        }
        let level = SimdLevel::Avx512;
        let cpu = Cpu::with_level(level);
        for (n, dim) in [
            (1, 1),
            (5, 3),
            (9, 33),
            (3, 767),
            (4, 768),
            (3, 1025),
            (700, 16),
        ] {
            let x: Vec<f32> = (0..n * dim)
                .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.03)
                .collect();
            let mut direct = vec![0.0f32; n * dim];
            cpu.noise_into(&x, dim, 1.0, 0.25, 9, &mut direct, false)
                .expect("valid input");
            for shift in 0..16 {
                let mut buf = vec![f32::NAN; n * dim + 32];
                let out = &mut buf[shift..shift + n * dim];
                cpu.noise_into(&x, dim, 1.0, 0.25, 9, out, true)
                    .expect("valid input");
                let same = out
                    .iter()
                    .zip(&direct)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{level:?} n {n} dim {dim} shift {shift}");
                assert!(
                    buf[..shift]
                        .iter()
                        .chain(&buf[shift + n * dim..])
                        .all(|v| v.is_nan())
                );
            }
        }
    }
}
