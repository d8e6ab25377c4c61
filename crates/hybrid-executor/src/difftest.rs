//! The differential suite: every GPU kernel against the CPU engine, bit for bit, on the GPU present,
//! for any arch's code in the bundle. `recall diff-test` and `cargo xtask diff-test` run it.

use std::fmt::Write as _;

/// The comparison of one kernel over all cases.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelDiff {
    pub kernel: &'static str,
    pub cases: usize,
    pub values: u64,
    /// Values whose bits differ from the CPU's.
    pub mismatches: u64,
    pub max_abs_diff: f64,
    pub max_ulp_diff: u64,
}

/// One arch's run.
#[derive(Debug, Clone, PartialEq)]
pub struct ArchReport {
    pub sm: u32,
    /// The image run, e.g. "compute_86 PTX (driver JIT)".
    pub image: String,
    pub kernels: Vec<KernelDiff>,
    /// Set when the arch's code could not be loaded or a launch failed.
    pub error: Option<String>,
}

/// The whole run.
#[derive(Debug, Clone, PartialEq)]
pub struct DiffReport {
    pub device: String,
    pub archs: Vec<ArchReport>,
}

impl DiffReport {
    /// True when every arch ran and every value matched bit for bit.
    pub fn passed(&self) -> bool {
        !self.archs.is_empty()
            && self
                .archs
                .iter()
                .all(|a| a.error.is_none() && a.kernels.iter().all(|k| k.mismatches == 0))
    }

    /// A plain-text table, one line per arch and kernel.
    pub fn render(&self) -> String {
        let mut s = format!("differential test on {}\n", self.device);
        let _ = writeln!(
            s,
            "{:<7} {:<30} {:<16} {:>6} {:>12} {:>10} {:>13} {:>8}",
            "arch", "image", "kernel", "cases", "values", "mismatch", "max |diff|", "max ulp"
        );
        for a in &self.archs {
            if let Some(e) = &a.error {
                let _ = writeln!(s, "sm_{:<4} {:<30} ERROR: {e}", a.sm, a.image);
                continue;
            }
            for k in &a.kernels {
                let _ = writeln!(
                    s,
                    "sm_{:<4} {:<30} {:<16} {:>6} {:>12} {:>10} {:>13.3e} {:>8}",
                    a.sm,
                    a.image,
                    k.kernel,
                    k.cases,
                    k.values,
                    k.mismatches,
                    k.max_abs_diff,
                    k.max_ulp_diff
                );
            }
        }
        let _ = writeln!(
            s,
            "{}",
            if self.passed() {
                "PASS: bit-identical to the CPU"
            } else {
                "FAIL"
            }
        );
        s
    }
}

/// Distance in units in the last place between two finite f32 (0 when the bits are equal).
pub fn ulp_diff(a: f32, b: f32) -> u64 {
    // Monotonic integer key: ..., -tiny -> -2, -0.0 -> -1, +0.0 -> 0, +tiny -> 1, ...
    fn key(x: f32) -> i64 {
        let bits = x.to_bits();
        if bits >> 31 == 1 {
            -1 - i64::from(bits & 0x7fff_ffff)
        } else {
            i64::from(bits)
        }
    }
    (key(a) - key(b)).unsigned_abs()
}

/// Fold the comparison of `gpu` against `cpu` into `diff`.
pub fn compare(diff: &mut KernelDiff, cpu: &[f32], gpu: &[f32]) {
    diff.cases += 1;
    diff.values += cpu.len() as u64;
    if cpu.len() != gpu.len() {
        diff.mismatches += cpu.len().max(gpu.len()) as u64;
        return;
    }
    for (&c, &g) in cpu.iter().zip(gpu) {
        if c.to_bits() != g.to_bits() {
            diff.mismatches += 1;
            diff.max_abs_diff = diff.max_abs_diff.max((f64::from(c) - f64::from(g)).abs());
            diff.max_ulp_diff = diff.max_ulp_diff.max(ulp_diff(c, g));
        }
    }
}

/// A small deterministic generator (SplitMix64) for the test data.
#[derive(Debug, Clone)]
pub struct SplitMix(u64);

impl SplitMix {
    pub fn new(seed: u64) -> Self {
        SplitMix(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [-1, 1).
    pub fn next_f32(&mut self) -> f32 {
        ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// A row-major matrix with the awkward rows the suite needs: zero rows, tiny (denormal-product) rows,
/// large-magnitude rows, and ordinary ones.
pub fn awkward_matrix(rng: &mut SplitMix, n_rows: usize, dim: usize) -> Vec<f32> {
    let mut x = Vec::with_capacity(n_rows * dim);
    for r in 0..n_rows {
        let scale = match r % 11 {
            3 => 0.0,
            5 => 1e-21,
            7 => 1e17,
            _ => 1.0,
        };
        x.extend((0..dim).map(|_| rng.next_f32() * scale));
    }
    x
}

/// The shapes (n_queries, n_rows, dim) of the dense cases: tails of every kind, N = 1, and a large N.
pub fn dense_shapes(rng: &mut SplitMix, quick: bool) -> Vec<(usize, usize, usize)> {
    let mut shapes = vec![
        (1, 1, 1),
        (1, 1, 3),
        (3, 1000, 33),
        (1, 5000, 767),
        (2, 4096, 768),
        (5, 300, 1025),
        (1, 257, 128),
        (7, 1, 768),
        (9, 513, 31),
        (1, 70_000, 96),
    ];
    for _ in 0..if quick { 4 } else { 16 } {
        shapes.push((
            1 + rng.below(9) as usize,
            1 + rng.below(20_000) as usize,
            1 + rng.below(1100) as usize,
        ));
    }
    if !quick {
        shapes.push((1, 1_000_000, 768));
        shapes.push((64, 100_000, 768));
    }
    shapes
}

#[cfg(feature = "gpu")]
mod run_gpu {
    use super::*;
    use crate::gpu_backend::GpuBackend;
    use recall_gpu_kernels::{ARCHES, Kernels};
    use recall_gpu_sys::Gpu;

    fn new_diff(kernel: &'static str) -> KernelDiff {
        KernelDiff {
            kernel,
            cases: 0,
            values: 0,
            mismatches: 0,
            max_abs_diff: 0.0,
            max_ulp_diff: 0,
        }
    }

    /// Run the suite on `backend`'s device for each arch in `arches` (all arches the device can run when
    /// empty is passed as `None`).
    pub fn run(backend: &GpuBackend, arches: Option<&[u32]>, quick: bool) -> DiffReport {
        let (gpu, _) = backend.parts();
        let d = backend.description();
        let device_sm = gpu.info().compute_capability.0 * 10 + gpu.info().compute_capability.1;
        let list: Vec<u32> = match arches {
            Some(a) => a.to_vec(),
            None => ARCHES.iter().copied().filter(|&s| s <= device_sm).collect(),
        };
        let mut report = DiffReport {
            device: format!("{} ({}, driver CUDA {})", d.name, d.sm, d.driver),
            archs: Vec::new(),
        };
        for sm in list {
            report.archs.push(run_arch(gpu, sm, quick));
        }
        report
    }

    fn run_arch(gpu: &Gpu, sm: u32, quick: bool) -> ArchReport {
        let kernels = match Kernels::load(gpu, Some(sm)) {
            Ok(k) => k,
            Err(e) => {
                return ArchReport {
                    sm,
                    image: "-".into(),
                    kernels: vec![],
                    error: Some(e.to_string()),
                };
            }
        };
        let image = kernels.image().to_string();
        match dense_cases(gpu, &kernels, quick) {
            Ok(k) => ArchReport {
                sm,
                image,
                kernels: k,
                error: None,
            },
            Err(e) => ArchReport {
                sm,
                image,
                kernels: vec![],
                error: Some(e),
            },
        }
    }

    fn dense_cases(gpu: &Gpu, k: &Kernels, quick: bool) -> Result<Vec<KernelDiff>, String> {
        let mut rng = SplitMix::new(0x5EED_0001);
        let mut norms = new_diff("row_norms_f32");
        let mut cosine = new_diff("cosine_f32_rows");
        let e = |e: &dyn std::fmt::Display| e.to_string();
        for (nq, n, dim) in dense_shapes(&mut rng, quick) {
            let queries = awkward_matrix(&mut rng, nq, dim);
            let corpus = awkward_matrix(&mut rng, n, dim);
            let cpu_qn = recall_cpu_simd::row_norms(&queries, dim).map_err(|x| e(&x))?;
            let cpu_cn = recall_cpu_simd::row_norms(&corpus, dim).map_err(|x| e(&x))?;
            let mut cpu_scores = vec![0.0f32; nq * n];
            recall_cpu_simd::cosine_scores(
                &queries,
                &cpu_qn,
                &corpus,
                &cpu_cn,
                dim,
                &mut cpu_scores,
            )
            .map_err(|x| e(&x))?;

            let q = gpu.upload(&queries).map_err(|x| e(&x))?;
            let c = gpu.upload(&corpus).map_err(|x| e(&x))?;
            let mut qn = gpu.alloc_zeros::<f32>(nq).map_err(|x| e(&x))?;
            let mut cn = gpu.alloc_zeros::<f32>(n).map_err(|x| e(&x))?;
            let mut out = gpu.alloc_zeros::<f32>(nq * n).map_err(|x| e(&x))?;
            k.row_norms_f32(gpu, &q, nq, dim, &mut qn)
                .map_err(|x| e(&x))?;
            k.row_norms_f32(gpu, &c, n, dim, &mut cn)
                .map_err(|x| e(&x))?;
            // The cosine kernel is fed the CPU's norms too, so a norm mismatch cannot hide a dot mismatch.
            let cn_cpu_dev = gpu.upload(&cpu_cn).map_err(|x| e(&x))?;
            let qn_cpu_dev = gpu.upload(&cpu_qn).map_err(|x| e(&x))?;
            k.cosine_f32_rows(gpu, &q, &qn_cpu_dev, &c, &cn_cpu_dev, nq, n, dim, &mut out)
                .map_err(|x| e(&x))?;
            compare(&mut norms, &cpu_qn, &gpu.download(&qn).map_err(|x| e(&x))?);
            compare(&mut norms, &cpu_cn, &gpu.download(&cn).map_err(|x| e(&x))?);
            compare(
                &mut cosine,
                &cpu_scores,
                &gpu.download(&out).map_err(|x| e(&x))?,
            );
        }
        Ok(vec![norms, cosine])
    }
}

#[cfg(feature = "gpu")]
pub use run_gpu::run;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ulp_distance() {
        assert_eq!(ulp_diff(1.0, 1.0), 0);
        assert_eq!(ulp_diff(1.0, f32::from_bits(1.0f32.to_bits() + 1)), 1);
        assert_eq!(ulp_diff(0.0, -0.0), 1);
        assert_eq!(ulp_diff(-f32::from_bits(1), f32::from_bits(1)), 3);
    }

    #[test]
    fn compare_counts_bit_differences_only() {
        let mut d = KernelDiff {
            kernel: "k",
            cases: 0,
            values: 0,
            mismatches: 0,
            max_abs_diff: 0.0,
            max_ulp_diff: 0,
        };
        compare(&mut d, &[1.0, 2.0, 0.0], &[1.0, 2.0, -0.0]);
        assert_eq!(
            (d.cases, d.values, d.mismatches, d.max_ulp_diff),
            (1, 3, 1, 1)
        );
        compare(&mut d, &[1.0], &[1.0, 2.0]);
        assert_eq!(d.mismatches, 3);
    }

    #[test]
    fn a_report_without_archs_does_not_pass() {
        assert!(
            !DiffReport {
                device: "x".into(),
                archs: vec![]
            }
            .passed()
        );
    }
}
