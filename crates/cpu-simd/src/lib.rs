//! Every recall op on the CPU: SIMD chosen at run time, rayon across cores.
//!
//! This crate is two things at once: the fallback that keeps recall answering when there is no GPU, and
//! the reference the GPU kernels are tested against. Every op follows the order in `docs/numerics.md`
//! exactly, so its results are bit-identical to the GPU's in exact mode, and bit-identical across the
//! SIMD levels of [`SimdLevel`].
//!
//! | op | function |
//! |---|---|
//! | similarity | [`similarity`], [`cosine_scores`], [`row_norms`] |
//! | top-k | [`topk()`] (any score matrix), [`knn`] (fused with similarity, streams the corpus) |
//! | candidate scoring | [`score_candidates`] |
//! | activation spreading | [`SpreadGraph`], [`spread()`]; [`nonzero_positions`] (the active nodes; seeds) |
//! | k-means | [`kmeans()`] |
//! | clip-and-noise | [`clip_and_noise`] |
//!
//! Each free function runs at the process-wide level ([`simd_level`]); the same ops are methods of
//! [`Cpu`], whose [`Cpu::with_level`] picks a lower level (the tests run every level against the scalar
//! reference that way).
//!
//! Architecture invariant: `recall-cpu-simd` never depends on any `recall-gpu-*` crate or on the driver.
//! Architecture invariant: inputs are validated here before any work; bad input is a [`CpuError`], never
//! a panic.

mod dense;
mod error;
mod kernels;
mod kmeans;
mod noise;
mod nonzero;
pub mod reference;
mod simd;
mod spread;
mod topk;

pub use dense::{
    Corpus, Metric, Vectors, check_candidate_rows, check_matrix, check_matrix_shape, cosine_scores,
    knn, row_norms, score_candidates, similarity,
};
pub use error::CpuError;
pub use kmeans::{
    INERTIA_BLOCK, KMeans, check_kmeans_inputs, check_kmeans_result, kmeans, kmeans_seed_indices,
};
pub use noise::{
    check_clip_noise_inputs, check_clip_noise_output, check_clip_noise_shape, clip_and_noise,
    clip_and_noise_into, noise_radii,
};
pub use nonzero::nonzero_positions;
pub use simd::{Cpu, SimdLevel, available_levels, detected_level, kernel_runs, simd_level};
pub use spread::{
    SPREAD_LANES, Spread, SpreadGraph, SpreadMode, SpreadParams, check_spread_inputs,
    check_spread_list_inputs, spread, spread_with_mode,
};
pub use topk::{Order, TopK, pair_key, score_key, topk};

/// Below this many multiply-adds (or values) an op runs on the calling thread: no rayon overhead.
pub(crate) const PAR_MIN_WORK: usize = 1 << 21;

/// recall's own rayon pool (`recall-cpu-*` threads, as many as rayon would give its global pool: `RAYON_NUM_THREADS`
/// or the CPUs), made on first use; `None` if it cannot start (then [`in_pool`] runs work in place).
fn own_pool() -> Option<&'static rayon::ThreadPool> {
    static POOL: std::sync::OnceLock<Option<rayon::ThreadPool>> = std::sync::OnceLock::new();
    POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .thread_name(|i| format!("recall-cpu-{i}"))
            .build()
            .ok()
    })
    .as_ref()
}

/// Run `f`, whose parallel iterators then run where recall's callers cannot starve them. Called on a rayon
/// worker (of any pool): in place, on that pool, as rayon nests. Called from any other thread: on recall's own
/// pool, which no caller's thread ever waits in, so the work finishes even while every worker of rayon's global
/// pool is blocked in a call of recall's (waiting for a tenant permit, a batch, the device) behind this one. With
/// the global pool the calling thread's work waited for those workers, and every call hung
/// (`tests/tenant_rayon.rs` in the executor). It costs nothing extra: a parallel iterator started from such a
/// thread hands its work to a pool's workers in the same way. Every parallel section of this crate runs
/// through it, and so do the executor's value checks; the GPU backend's host work has a pool of its own
/// (`recall_gpu_kernels::on_host_pool`).
///
/// ```
/// use rayon::prelude::*;
/// let sum: u64 = recall_cpu_simd::in_pool(|| (0..1000u64).into_par_iter().sum());
/// assert_eq!(sum, 499_500);
/// ```
pub fn in_pool<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    if rayon::current_thread_index().is_some() {
        return f();
    }
    match own_pool() {
        Some(pool) => pool.install(f),
        None => f(),
    }
}

/// The number of threads work passed to [`in_pool`] from this thread runs on.
pub fn pool_threads() -> usize {
    if rayon::current_thread_index().is_none()
        && let Some(pool) = own_pool()
    {
        return pool.current_num_threads();
    }
    rayon::current_num_threads()
}

/// Outputs of at least this many bytes get transparent huge pages (see [`output_buffer`]).
const HUGE_MIN_BYTES: usize = 1 << 25;

/// `vec![0.0; len]`, for an op's fresh output (the ops' allocating forms, here and in the executor). On Linux,
/// when it is at least 32 MiB (`HUGE_MIN_BYTES`), the kernel is asked (`madvise(MADV_HUGEPAGE)`) to back it with
/// 2 MiB pages: a fresh output is first touched inside the op, and with 4 KiB pages its page faults cost more than
/// the op (clip-and-noise 100,000 x 768: 70 of 96 ms on the development VM). The allocation is the global
/// allocator's, untouched yet (a large `calloc` maps fresh pages); only its whole 2 MiB stretches are advised.
/// Where the kernel allows no huge pages the advice is refused or ignored, and nothing else changes. NumPy does
/// the same for its large arrays (ADR 0019). `RECALL_HUGE_PAGES=off` (or `0`) turns the advice off, as
/// `NUMPY_MADVISE_HUGEPAGE=0` does NumPy's: for a host where a fault that compacts memory must not stall a call.
pub fn output_buffer(len: usize) -> Vec<f32> {
    let v = vec![0.0f32; len];
    #[cfg(target_os = "linux")]
    if size_of_val(v.as_slice()) >= HUGE_MIN_BYTES && huge_pages_on() {
        const HUGE: usize = 1 << 21;
        let start = (v.as_ptr() as usize).next_multiple_of(HUGE);
        let end = (v.as_ptr() as usize + size_of_val(v.as_slice())) & !(HUGE - 1);
        if end > start {
            // SAFETY: [start, end) lies inside `v`'s allocation, which this function owns; `madvise` with
            // MADV_HUGEPAGE changes no contents and no mapping's permissions, only how later faults are served.
            // Its result is ignored on purpose: the advice is optional.
            let _ = unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE)
            };
        }
    }
    v
}

/// Whether [`output_buffer`] advises huge pages: `RECALL_HUGE_PAGES`, read on first use.
#[cfg(target_os = "linux")]
fn huge_pages_on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| huge_pages_setting(std::env::var("RECALL_HUGE_PAGES").ok().as_deref()))
}

/// `RECALL_HUGE_PAGES`'s value: `off` or `0` turns the advice off; unset or anything else leaves it on (an
/// unknown value is ignored, as `RECALL_CPU_SIMD`'s is).
#[cfg(target_os = "linux")]
fn huge_pages_setting(value: Option<&str>) -> bool {
    !matches!(value.map(str::trim), Some("off" | "0"))
}

/// Check that every value is finite (no NaN, no infinity): the contract's first step for every op.
pub fn check_finite(what: &'static str, values: &[f32]) -> Result<(), CpuError> {
    match first_non_finite(values) {
        None => Ok(()),
        Some(index) => Err(CpuError::NonFinite { what, index }),
    }
}

/// Check that a corpus of `n` rows can be named by `u32` row ids (`TooLarge` past `u32::MAX`): the CPU's corpus
/// checks, and the executor's before any device runs a call (a GPU that streams or shards a corpus merges
/// per-part ids offset by the part's first row, which would wrap instead).
///
/// ```
/// assert!(recall_cpu_simd::check_corpus_rows(u32::MAX as usize).is_ok());
/// assert!(recall_cpu_simd::check_corpus_rows(u32::MAX as usize + 1).is_err());
/// ```
pub fn check_corpus_rows(n: usize) -> Result<(), CpuError> {
    if n > u32::MAX as usize {
        return Err(CpuError::TooLarge {
            what: "corpus rows",
            len: n,
            max: u32::MAX as usize,
        });
    }
    Ok(())
}

/// The index of the first NaN or infinity (see [`first_bits_where`]).
pub(crate) fn first_non_finite(values: &[f32]) -> Option<usize> {
    first_bits_where(values, |b| (b & 0x7f80_0000) == 0x7f80_0000)
}

/// Scans of at least this many values ([`check_finite`], [`max_abs`]) run in parallel pieces of
/// [`PAR_SCAN_PIECE`] values: thresholds the executor measured for its query batches (session 19: one H200
/// host core took ~200 us to check 1,024 x 768 queries, 5 % of a fast-mode knn call).
const PAR_SCAN_MIN: usize = 1 << 18;
const PAR_SCAN_PIECE: usize = 1 << 15;

/// The largest magnitude in `x` (0 for an empty slice; NaN is never the answer, so call it on checked input):
/// what the executor compares with the largest finite `f16` before it sends values to the tensor cores'
/// half-precision path. Sixteen running maxima by compare and select, which vectorise to `maxps` on any
/// x86-64 (an unsigned integer maximum of the bits has no SSE2 instruction and ran 5x slower: 191 against
/// 36 us over 1,024 x 768 floats); large inputs in parallel pieces, as [`check_finite`]'s scan.
///
/// ```
/// assert_eq!(recall_cpu_simd::max_abs(&[1.5, -70_000.0, 3.0]), 70_000.0);
/// assert_eq!(recall_cpu_simd::max_abs(&[]), 0.0);
/// ```
pub fn max_abs(x: &[f32]) -> f32 {
    use rayon::prelude::*;
    if x.len() >= PAR_SCAN_MIN {
        return in_pool(|| {
            x.par_chunks(PAR_SCAN_PIECE)
                .map(max_abs_serial)
                .reduce(|| 0.0, f32::max)
        });
    }
    max_abs_serial(x)
}

fn max_abs_serial(x: &[f32]) -> f32 {
    const LANES: usize = 16;
    let mut m = [0.0f32; LANES];
    let mut blocks = x.chunks_exact(LANES);
    for block in &mut blocks {
        for (m, v) in m.iter_mut().zip(block) {
            let a = v.abs();
            *m = if a > *m { a } else { *m };
        }
    }
    let mut r = m.iter().copied().fold(0.0f32, f32::max);
    for v in blocks.remainder() {
        let a = v.abs();
        r = if a > r { a } else { r };
    }
    r
}

/// The index of the first value whose bits satisfy `bad`. Chunks are tested with a branch-free OR of
/// `bad` (which the compiler vectorises), so the check runs at memory speed; only a chunk that holds a bad
/// value is searched element by element. Large inputs are split over the cores ([`PAR_SCAN_MIN`]), the first
/// bad piece's index kept.
#[inline(always)]
pub(crate) fn first_bits_where(values: &[f32], bad: impl Fn(u32) -> bool + Sync) -> Option<usize> {
    use rayon::prelude::*;
    if values.len() >= PAR_SCAN_MIN {
        return in_pool(|| {
            values
                .par_chunks(PAR_SCAN_PIECE)
                .enumerate()
                .find_map_first(|(p, piece)| {
                    first_bits_where_serial(piece, &bad).map(|i| p * PAR_SCAN_PIECE + i)
                })
        });
    }
    first_bits_where_serial(values, bad)
}

/// [`first_bits_where`] on the calling thread.
#[inline(always)]
fn first_bits_where_serial(values: &[f32], bad: impl Fn(u32) -> bool) -> Option<usize> {
    const CHUNK: usize = 4096;
    for (c, chunk) in values.chunks(CHUNK).enumerate() {
        let any = chunk
            .iter()
            .fold(0u32, |acc, v| acc | u32::from(bad(v.to_bits())));
        if any != 0 {
            return chunk
                .iter()
                .position(|v| bad(v.to_bits()))
                .map(|i| c * CHUNK + i);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_abs_is_the_largest_magnitude() {
        assert_eq!(max_abs(&[]), 0.0);
        assert_eq!(max_abs(&[-0.0]), 0.0);
        assert_eq!(max_abs(&[1.5, -70_000.0, 65_504.0, 3.0]), 70_000.0);
        assert_eq!(max_abs(&[f32::MIN_POSITIVE, -1e-30]), 1e-30);
        assert_eq!(max_abs(&[-f32::MIN_POSITIVE, 0.0]), f32::MIN_POSITIVE);
        assert_eq!(max_abs(&[3.0, f32::NEG_INFINITY]), f32::INFINITY);
    }

    #[test]
    fn max_abs_finds_the_largest_in_every_lane_and_the_tail() {
        // The plain answer: the largest of the sign-cleared bits.
        let plain = |x: &[f32]| {
            f32::from_bits(
                x.iter()
                    .map(|v| v.to_bits() & 0x7fff_ffff)
                    .max()
                    .unwrap_or(0),
            )
        };
        for n in (0usize..=40).chain([1_000, 786_432]) {
            let base: Vec<f32> = (0..n)
                .map(|i| ((i * 7919) % 1000) as f32 * 1e-3 - 0.5)
                .collect();
            assert_eq!(max_abs(&base).to_bits(), plain(&base).to_bits(), "n = {n}");
            for at in [0, n / 3, n.saturating_sub(1)]
                .into_iter()
                .filter(|&at| at < n)
            {
                for big in [-70_000.0f32, 65_504.0, f32::MAX, f32::NEG_INFINITY] {
                    let mut x = base.clone();
                    x[at] = big;
                    assert_eq!(max_abs(&x), big.abs(), "n = {n}, at = {at}");
                }
            }
        }
    }

    /// Large inputs are scanned in parallel pieces; the first bad value is named whichever piece finds one
    /// first (a second bad value after it, in another piece).
    #[test]
    fn check_finite_in_parallel_pieces_names_the_first_bad_value() {
        let n = 3 * PAR_SCAN_MIN + 5;
        let mut x = vec![-2.5f32; n];
        assert_eq!(check_finite("x", &x), Ok(()));
        x[n - 1] = f32::NAN;
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            for i in [0, PAR_SCAN_PIECE - 1, PAR_SCAN_PIECE, n / 2, n - 2] {
                x[i] = bad;
                assert_eq!(
                    check_finite("x", &x),
                    Err(CpuError::NonFinite {
                        what: "x",
                        index: i
                    }),
                    "{bad} at {i}"
                );
                x[i] = f32::MAX;
            }
        }
    }

    /// An output buffer is `len` zeros, small or large.
    #[test]
    fn output_buffers_are_zeroed() {
        for len in [0, 1, 1000, HUGE_MIN_BYTES / 4 + 12_345] {
            let v = output_buffer(len);
            assert_eq!(v.len(), len);
            assert!(v.iter().all(|&x| x.to_bits() == 0));
        }
    }

    /// On a Linux kernel with transparent huge pages, a large output's mapping carries the advice (`hg` in its
    /// `VmFlags`, which the kernel sets on `MADV_HUGEPAGE` whatever the system's THP mode), unless
    /// `RECALL_HUGE_PAGES` turns it off.
    #[cfg(target_os = "linux")]
    #[test]
    fn large_outputs_are_advised_to_huge_pages() {
        if !std::path::Path::new("/sys/kernel/mm/transparent_hugepage").exists() {
            eprintln!("skipped: this kernel has no transparent huge pages");
            return;
        }
        let v = output_buffer(2 * HUGE_MIN_BYTES / 4);
        let mid = v.as_ptr() as usize + v.len() * 2;
        let smaps = std::fs::read_to_string("/proc/self/smaps").expect("/proc/self/smaps");
        let mut inside = false;
        let mut flags = None;
        for line in smaps.lines() {
            if let Some((range, _)) = line.split_once(' ')
                && let Some((a, b)) = range.split_once('-')
                && let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
            {
                inside = (a..b).contains(&mid);
            } else if inside && let Some(f) = line.strip_prefix("VmFlags:") {
                flags = Some(f.split_whitespace().map(str::to_owned).collect::<Vec<_>>());
            }
        }
        let flags = flags.expect("the buffer's mapping in /proc/self/smaps");
        // With `RECALL_HUGE_PAGES=off` the mapping must not carry it.
        assert_eq!(
            flags.iter().any(|f| f == "hg"),
            huge_pages_on(),
            "VmFlags {flags:?}"
        );
    }

    /// `RECALL_HUGE_PAGES`: off only when asked.
    #[cfg(target_os = "linux")]
    #[test]
    fn the_huge_page_setting_is_off_only_when_asked() {
        assert!(huge_pages_setting(None));
        assert!(huge_pages_setting(Some("on")));
        assert!(huge_pages_setting(Some("1")));
        assert!(huge_pages_setting(Some("sometimes")));
        assert!(!huge_pages_setting(Some("off")));
        assert!(!huge_pages_setting(Some(" 0 ")));
    }
}
