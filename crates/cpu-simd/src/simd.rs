//! Run-time choice of the SIMD path (ADR 0003). The level is detected once and cached in an atomic, as
//! memchr does; `RECALL_CPU_SIMD=scalar|neon|avx2|avx512` can lower it (never raise it), so the tests can
//! run every path this machine has against the scalar reference.

use crate::CpuError;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

/// A SIMD instruction-set level, ordered from least to most capable. All levels give bit-identical results.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SimdLevel {
    /// Plain Rust: the reference loops (any CPU).
    Scalar = 1,
    /// aarch64 Advanced SIMD (4 lanes, 32 registers).
    Neon = 2,
    /// x86-64 AVX2 + FMA (8 lanes).
    Avx2 = 3,
    /// x86-64 AVX-512F + AVX-512VL (16 lanes).
    Avx512 = 4,
}

impl SimdLevel {
    /// The level's name as the environment override spells it.
    pub fn name(self) -> &'static str {
        match self {
            SimdLevel::Scalar => "scalar",
            SimdLevel::Neon => "neon",
            SimdLevel::Avx2 => "avx2",
            SimdLevel::Avx512 => "avx512",
        }
    }

    /// Parse a name as [`SimdLevel::name`] writes it.
    pub fn parse(name: &str) -> Result<SimdLevel, CpuError> {
        match name.trim().to_ascii_lowercase().as_str() {
            "scalar" => Ok(SimdLevel::Scalar),
            "neon" => Ok(SimdLevel::Neon),
            "avx2" => Ok(SimdLevel::Avx2),
            "avx512" => Ok(SimdLevel::Avx512),
            _ => Err(CpuError::UnknownSimdLevel {
                name: name.to_string(),
            }),
        }
    }

    fn from_u8(v: u8) -> SimdLevel {
        match v {
            2 => SimdLevel::Neon,
            3 => SimdLevel::Avx2,
            4 => SimdLevel::Avx512,
            _ => SimdLevel::Scalar,
        }
    }
}

/// The best level this CPU supports, ignoring the environment.
pub fn detected_level() -> SimdLevel {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512vl")
            && std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("fma")
        {
            return SimdLevel::Avx512;
        }
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            return SimdLevel::Avx2;
        }
        SimdLevel::Scalar
    }
    #[cfg(target_arch = "aarch64")]
    {
        // NEON is part of the baseline of every aarch64 target that has `std` (the target enables the
        // feature), and the macro then folds to `true` at compile time (it tests
        // `cfg!(target_feature = "neon")` first). Asking at run time costs nothing and stays correct for
        // a target built without it (`-C target-feature=-neon`), where the kernels must not run.
        if std::arch::is_aarch64_feature_detected!("neon") {
            return SimdLevel::Neon;
        }
        SimdLevel::Scalar
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        SimdLevel::Scalar
    }
}

/// Every level this machine can run, lowest first (always includes [`SimdLevel::Scalar`]).
pub fn available_levels() -> Vec<SimdLevel> {
    let top = detected_level();
    [
        SimdLevel::Scalar,
        SimdLevel::Neon,
        SimdLevel::Avx2,
        SimdLevel::Avx512,
    ]
    .into_iter()
    .filter(|l| *l <= top)
    .filter(|l| match l {
        SimdLevel::Neon => cfg!(target_arch = "aarch64"),
        SimdLevel::Avx2 | SimdLevel::Avx512 => cfg!(target_arch = "x86_64"),
        SimdLevel::Scalar => true,
    })
    .collect()
}

static LEVEL: AtomicU8 = AtomicU8::new(0);

/// The level the ops use: the detected level, lowered by `RECALL_CPU_SIMD` if set (an unknown name or a
/// level above the detected one is ignored). Decided on first call and cached.
pub fn simd_level() -> SimdLevel {
    let v = LEVEL.load(Ordering::Relaxed);
    if v != 0 {
        return SimdLevel::from_u8(v);
    }
    let detected = detected_level();
    let level = match std::env::var("RECALL_CPU_SIMD") {
        Ok(name) => match SimdLevel::parse(&name) {
            Ok(asked) => clamp(asked, detected),
            Err(_) => detected,
        },
        Err(_) => detected,
    };
    LEVEL.store(level as u8, Ordering::Relaxed);
    level
}

/// `asked` if this machine can run it, else the best level below it that it can run.
pub(crate) fn clamp(asked: SimdLevel, detected: SimdLevel) -> SimdLevel {
    let _ = detected;
    available_levels()
        .into_iter()
        .filter(|l| *l <= asked)
        .max()
        .unwrap_or(SimdLevel::Scalar)
}

static RUNS: [AtomicU64; 5] = [
    AtomicU64::new(0),
    AtomicU64::new(0),
    AtomicU64::new(0),
    AtomicU64::new(0),
    AtomicU64::new(0),
];

pub(crate) fn record(level: SimdLevel) {
    RUNS[level as usize].fetch_add(1, Ordering::Relaxed);
}

/// How many dense kernel calls ran at `level` in this process so far (a monotonic counter, for tests
/// and diagnostics that want to show which path ran).
pub fn kernel_runs(level: SimdLevel) -> u64 {
    RUNS[level as usize].load(Ordering::Relaxed)
}

/// A handle that runs every op at one SIMD level. [`Cpu::new`] uses [`simd_level`];
/// [`Cpu::with_level`] picks a lower one (a level the machine lacks is lowered to one it has).
///
/// [`Cpu::prevalidated`] gives a handle for callers that have already checked the input values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cpu {
    level: SimdLevel,
    /// The caller has run the value checks (see [`Cpu::prevalidated`]): skip the scans over values.
    prevalidated: bool,
}

impl Default for Cpu {
    fn default() -> Self {
        Cpu::new()
    }
}

impl Cpu {
    /// The handle at the process-wide level, [`simd_level`].
    pub fn new() -> Cpu {
        Cpu {
            level: simd_level(),
            prevalidated: false,
        }
    }

    /// A handle at `level`, or the best level below it that this machine can run.
    pub fn with_level(level: SimdLevel) -> Cpu {
        Cpu {
            level: clamp(level, detected_level()),
            prevalidated: false,
        }
    }

    /// The level this handle runs at.
    pub fn level(&self) -> SimdLevel {
        self.level
    }

    /// The same handle for a caller that has already validated the input **values** with this crate's
    /// checks ([`check_finite`](crate::check_finite) on every matrix and seed vector,
    /// [`check_spread_inputs`](crate::check_spread_inputs), [`check_kmeans_inputs`](crate::check_kmeans_inputs),
    /// [`check_clip_noise_inputs`](crate::check_clip_noise_inputs), no duplicate id in a candidate list),
    /// so that each call validates once: the hybrid executor validates before it picks a device, and its CPU
    /// backend runs through this handle.
    ///
    /// The ops of the returned handle still check everything that keeps indexing in bounds (dimensions,
    /// lengths, offsets, ids against the row count, `k`, hop and iteration counts: O(1) or O(ids) work), and
    /// skip only the scans over values (NaN and infinity, negative seeds, duplicate candidate ids). Given
    /// values those checks would have rejected, the result is unspecified but the call stays memory-safe
    /// (safe Rust, checked indexing); a NaN or infinity found by an op's own in-pass check (the streaming
    /// top-k's, candidate scoring's over the rows it reads) is still reported.
    ///
    /// ```
    /// use recall_cpu_simd::{Corpus, Cpu, Metric, check_finite};
    /// let (q, c) = (vec![1.0f32, 0.0], vec![1.0f32, 0.0, 0.0, 1.0]);
    /// check_finite("queries", &q)?;
    /// check_finite("corpus", &c)?;
    /// let s = Cpu::new().prevalidated().similarity(&q, &Corpus::f32(&c, 2), Metric::Cosine)?;
    /// assert_eq!(s, vec![1.0, 0.0]);
    /// # Ok::<(), recall_cpu_simd::CpuError>(())
    /// ```
    pub fn prevalidated(self) -> Cpu {
        Cpu {
            prevalidated: true,
            ..self
        }
    }

    /// Whether this handle skips the value scans ([`Cpu::prevalidated`]).
    pub fn is_prevalidated(&self) -> bool {
        self.prevalidated
    }
}
