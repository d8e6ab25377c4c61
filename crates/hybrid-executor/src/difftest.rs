//! The differential suite: every GPU kernel against the CPU engine, bit for bit, on the GPU present,
//! for any arch's code in the bundle. `recall diff-test` and `cargo xtask diff-test` run it.

use std::borrow::Cow;
use std::fmt::Write as _;

/// The comparison of one kernel over all cases.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelDiff {
    /// The kernel's label: its name, or the names of the kernels that shared a call (`sm80_gemm_cosine + q32`).
    pub kernel: Cow<'static, str>,
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
        // The exact GEMM's narrow tiles (32 and 64 queries) alone and after full 128-query tiles, row counts off
        // their 512- and 256-row tiles; tails of 2 and 8 (the scan), 9 (the 32-query tile), 65 to 72 (the 64-query
        // tile and the scan: 65 and 72 after a full tile, 68 alone) and 73 (a 128-query tile row).
        (17, 3000, 100),
        (68, 900, 40),
        (193, 300, 24),
        (201, 333, 19),
        (33, 2049, 129),
        (64, 1000, 768),
        (100, 777, 65),
        (130, 600, 16),
        (136, 500, 24),
        (137, 400, 40),
        (150, 700, 20),
        (180, 515, 40),
        (200, 300, 32),
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

/// Candidate lists for `n_queries` queries over `n` rows: lengths between `k` and `max_len`, distinct ids.
pub fn candidate_lists(
    rng: &mut SplitMix,
    n_queries: usize,
    n: usize,
    k: usize,
    max_len: usize,
) -> (Vec<usize>, Vec<u32>) {
    let mut offsets = vec![0usize];
    let mut ids = Vec::new();
    for _ in 0..n_queries {
        let len = (k + rng.below((max_len.saturating_sub(k) + 1) as u64) as usize).min(n);
        // Distinct ids: an arithmetic walk with a step coprime to n.
        let mut step = 1 + rng.below(n as u64) as usize;
        while gcd(step, n) != 1 {
            step += 1;
        }
        let start = rng.below(n as u64) as usize;
        ids.extend((0..len).map(|i| ((start + i * step) % n) as u32));
        offsets.push(ids.len());
    }
    (offsets, ids)
}

/// A CSR graph for the spreading cases: `n` nodes, `edges` edges whose targets skew to low ids (power law:
/// node 0 is a hub), self loops and parallel edges included, plus `hub_in` extra in-edges of node 1 and
/// `hub_out` extra out-edges of node 2. Nodes that no edge touches stay isolated. Weights in [0, 1),
/// some exactly 0. Returns (indptr, indices, weights).
pub fn power_law_graph(
    rng: &mut SplitMix,
    n: usize,
    edges: usize,
    hub_in: usize,
    hub_out: usize,
) -> (Vec<usize>, Vec<u32>, Vec<f32>) {
    let mut list: Vec<(u32, u32, f32)> = Vec::with_capacity(edges + hub_in + hub_out);
    let weight = |rng: &mut SplitMix| {
        if rng.below(16) == 0 {
            0.0
        } else {
            (rng.next_f32() + 1.0) * 0.5
        }
    };
    for _ in 0..edges {
        let src = rng.below(n as u64) as u32;
        let u = (rng.next_f32() + 1.0) * 0.5; // [0, 1)
        let dst = ((u * u * u) * n as f32) as u32 % n as u32;
        list.push((src, dst, weight(rng)));
    }
    for _ in 0..hub_in {
        list.push((rng.below(n as u64) as u32, 1 % n as u32, weight(rng)));
    }
    for _ in 0..hub_out {
        list.push((2 % n as u32, rng.below(n as u64) as u32, weight(rng)));
    }
    csr_by_source(n, &list)
}

/// The CSR (indptr, indices, weights) of `(source, target, weight)` edges over `n` nodes, each row's edges in
/// their order in `list`: the stable sort by source, as a counting sort (linear time; the calibration probes
/// build graphs of tens of millions of edges).
fn csr_by_source(n: usize, list: &[(u32, u32, f32)]) -> (Vec<usize>, Vec<u32>, Vec<f32>) {
    let mut indptr = vec![0usize; n + 1];
    for e in list {
        indptr[e.0 as usize + 1] += 1;
    }
    for u in 0..n {
        indptr[u + 1] += indptr[u];
    }
    let mut at = indptr.clone();
    let (mut indices, mut weights) = (vec![0u32; list.len()], vec![0.0f32; list.len()]);
    for &(src, dst, w) in list {
        let p = &mut at[src as usize];
        indices[*p] = dst;
        weights[*p] = w;
        *p += 1;
    }
    (indptr, indices, weights)
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

#[cfg(feature = "gpu")]
mod run_gpu {
    use super::*;
    use crate::backend::{Backend, FastFormat};
    use crate::gpu_backend::GpuBackend;
    use recall_cpu_simd::{Corpus, Metric, TopK};
    use recall_gpu_kernels::{
        ARCHES, GemmKernel, GemmTail, HalfKind, HalfSource, Kernels, OneQuery, SCAN_MAX_QUERIES,
        Segments, SimMetric, half_ld,
    };
    use recall_gpu_sys::Gpu;
    use recall_gpu_sys::driver::CudaSlice;

    const METRICS: [(Metric, SimMetric, &str); 3] = [
        (Metric::Dot, SimMetric::Dot, "dot"),
        (Metric::Cosine, SimMetric::Cosine, "cosine"),
        (Metric::L2, SimMetric::L2, "l2"),
    ];

    /// The GEMM kernels `k` can run for rows of `dim` values: the default first, then `gemm_*` if different.
    fn gemm_kernels(k: &Kernels, dim: usize) -> Vec<GemmKernel> {
        let default = k.gemm_kernel(dim);
        if default == GemmKernel::Legacy {
            vec![default]
        } else {
            vec![default, GemmKernel::Legacy]
        }
    }

    /// The label of the GEMM kernels that ran a many-query similarity call: the 128 x 128 tile (`wide`: full
    /// 128-query tiles ran) and where its last queries went ([`GemmTail`]); `metric` is the metric's name.
    fn gemm_run_label(
        kernel: GemmKernel,
        metric: &str,
        tail: Option<GemmTail>,
        wide: bool,
    ) -> Cow<'static, str> {
        let body = gemm_label(kernel, metric);
        match tail {
            None => body.into(),
            Some(GemmTail::Scan) => format!("{body} + scan").into(),
            Some(GemmTail::Narrow(q)) if wide => format!("{body} + q{q}").into(),
            Some(GemmTail::Narrow(q)) => format!("sm80_gemm_q{q}_{metric}").into(),
            Some(GemmTail::NarrowThenScan(q)) if wide => format!("{body} + q{q} + scan").into(),
            Some(GemmTail::NarrowThenScan(q)) => format!("sm80_gemm_q{q}_{metric} + scan").into(),
        }
    }

    /// The diff-test label of a GEMM kernel for a metric.
    fn gemm_label(kernel: GemmKernel, metric: &str) -> &'static str {
        match (kernel, metric) {
            (GemmKernel::Sm80, "dot") => "sm80_gemm_dot",
            (GemmKernel::Sm80, "cosine") => "sm80_gemm_cosine",
            (GemmKernel::Sm80, _) => "sm80_gemm_l2",
            (GemmKernel::Legacy, "dot") => "gemm_dot",
            (GemmKernel::Legacy, "cosine") => "gemm_cosine",
            (GemmKernel::Legacy, _) => "gemm_l2",
        }
    }

    fn new_diff(kernel: Cow<'static, str>) -> KernelDiff {
        KernelDiff {
            kernel,
            cases: 0,
            values: 0,
            mismatches: 0,
            max_abs_diff: 0.0,
            max_ulp_diff: 0,
        }
    }

    fn diff_of(
        diffs: &mut Vec<KernelDiff>,
        kernel: impl Into<Cow<'static, str>>,
    ) -> &mut KernelDiff {
        let kernel = kernel.into();
        match diffs.iter().position(|d| d.kernel == kernel) {
            Some(i) => &mut diffs[i],
            None => {
                diffs.push(new_diff(kernel));
                let last = diffs.len() - 1;
                &mut diffs[last]
            }
        }
    }

    /// Compare two top-k lists: ids must be equal and scores bit-identical.
    /// Which selection `select_topk` runs for dense segments and this `k`.
    fn select_label(k: usize, n: usize) -> &'static str {
        if k <= recall_gpu_kernels::SMALL_K_MAX as usize && n >= recall_gpu_kernels::FILTER_MIN_LEN
        {
            "topk_filter"
        } else if k <= recall_gpu_kernels::SMALL_K_MAX as usize {
            "topk_small"
        } else {
            "select_radix"
        }
    }

    fn compare_topk(diff: &mut KernelDiff, cpu: &TopK, gpu: &TopK) {
        diff.cases += 1;
        diff.values += cpu.ids.len() as u64;
        if cpu.ids.len() != gpu.ids.len() {
            diff.mismatches += cpu.ids.len().max(gpu.ids.len()) as u64;
            return;
        }
        for i in 0..cpu.ids.len() {
            if cpu.ids[i] != gpu.ids[i] || cpu.scores[i].to_bits() != gpu.scores[i].to_bits() {
                diff.mismatches += 1;
                let d = (f64::from(cpu.scores[i]) - f64::from(gpu.scores[i])).abs();
                diff.max_abs_diff = diff.max_abs_diff.max(d);
                diff.max_ulp_diff = diff
                    .max_ulp_diff
                    .max(ulp_diff(cpu.scores[i], gpu.scores[i]));
            }
        }
    }

    /// A group of cases that runs the kernels through their launchers: its rows of the report.
    type KernelGroup = fn(&Gpu, &Kernels, bool) -> Result<Vec<KernelDiff>, String>;
    /// A group of cases that runs the GPU backend's own paths, adding rows to the report.
    type BackendGroup = fn(&GpuBackend, &mut Vec<KernelDiff>, bool) -> Result<(), String>;

    /// The kernel groups, in the order they run (before the backend groups); their names are in
    /// [`GROUPS`].
    pub(super) const KERNEL_GROUPS: [(&str, KernelGroup); 6] = [
        ("kernels", kernel_cases),
        ("fast", fast_cases),
        ("fused-fast", fused_fast_cases),
        ("knn1", knn1_cases),
        ("scan1", scan1_cases),
        ("cand", cand_cases),
    ];

    /// The backend groups, in the order they run.
    pub(super) const BACKEND_GROUPS: [(&str, BackendGroup); 7] = [
        ("backend", backend_cases),
        ("pool", |b, d, _| pool_cases(b, d)),
        ("noise", noise_cases),
        ("graph", graph_cases),
        ("graph-handle", graph_handle_cases),
        ("graph-frontier", graph_frontier_cases),
        ("kmeans", kmeans_cases),
    ];

    /// Run the suite on `backend`'s device for each arch in `arches` (every arch the device can run when
    /// `None`), limited to the groups named in `groups` (names from [`GROUPS`]; all when
    /// empty), so that a slow tool such as compute-sanitizer's racecheck can take the suite a part at a time.
    pub fn run(
        backend: &GpuBackend,
        arches: Option<&[u32]>,
        quick: bool,
        groups: &[&str],
    ) -> DiffReport {
        let on = |g: &str| groups.is_empty() || groups.contains(&g);
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
            let mut arch = run_arch(gpu, sm, quick, &on);
            // The backend's own paths (knn, candidates, spreading, k-means) with this arch's code.
            if arch.error.is_none() {
                let forced = GpuBackend::discover(Some(sm));
                let result = forced.and_then(|b| {
                    BACKEND_GROUPS
                        .iter()
                        .filter(|(g, _)| on(g))
                        .try_for_each(|(_, f)| f(&b, &mut arch.kernels, quick))
                });
                if let Err(e) = result {
                    arch.error = Some(e);
                }
            }
            report.archs.push(arch);
        }
        report
    }

    fn run_arch(gpu: &Gpu, sm: u32, quick: bool, on: &dyn Fn(&str) -> bool) -> ArchReport {
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
        let image = format!("{} [fast: {}]", kernels.image(), kernels.fast_kernels());
        let cases =
            KERNEL_GROUPS
                .iter()
                .filter(|(g, _)| on(g))
                .try_fold(Vec::new(), |mut k, (_, f)| {
                    k.extend(f(gpu, &kernels, quick)?);
                    Ok(k)
                });
        match cases {
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

    /// `RECALL_DIFFTEST_PART=i/n`: the part of a slow group's cases to run ([`super::parse_part`]); all of
    /// them, `(0, 1)`, when unset or malformed (a malformed value is reported on stderr).
    fn part_from_env() -> (usize, usize) {
        let Ok(v) = std::env::var("RECALL_DIFFTEST_PART") else {
            return (0, 1);
        };
        super::parse_part(&v).unwrap_or_else(|| {
            eprintln!(
                "RECALL_DIFFTEST_PART={v:?}: expected i/n with 0 <= i < n; running every case"
            );
            (0, 1)
        })
    }

    fn e(x: impl std::fmt::Display) -> String {
        x.to_string()
    }

    /// `q` (`nq` rows) and `c` (`n` rows) of `dim` f32 as padded 16-bit rows of `kind` (row stride
    /// `half_ld(dim)`), the operands of the fast-mode kernels.
    #[allow(clippy::too_many_arguments)]
    fn half_pair(
        gpu: &Gpu,
        k: &Kernels,
        kind: HalfKind,
        q: &CudaSlice<f32>,
        c: &CudaSlice<f32>,
        nq: usize,
        n: usize,
        dim: usize,
    ) -> Result<(CudaSlice<u16>, CudaSlice<u16>), String> {
        let ld = half_ld(dim);
        let mut qh = gpu.alloc_zeros::<u16>(nq * ld).map_err(e)?;
        let mut ch = gpu.alloc_zeros::<u16>(n * ld).map_err(e)?;
        k.to_half_rows(gpu, HalfSource::F32(q), kind, nq, dim, &mut qh)
            .map_err(e)?;
        k.to_half_rows(gpu, HalfSource::F32(c), kind, n, dim, &mut ch)
            .map_err(e)?;
        Ok((qh, ch))
    }

    /// Fast-mode scores (`tc_gemm_*`) of every query against every row, from `half_pair`'s operands and the
    /// f32 norms.
    #[allow(clippy::too_many_arguments)]
    fn fast_scores(
        gpu: &Gpu,
        k: &Kernels,
        kind: HalfKind,
        sim: SimMetric,
        (qh, ch): (&CudaSlice<u16>, &CudaSlice<u16>),
        (qn, cn): (&CudaSlice<f32>, &CudaSlice<f32>),
        nq: usize,
        n: usize,
        dim: usize,
    ) -> Result<CudaSlice<f32>, String> {
        let mut out = gpu.alloc_zeros::<f32>(nq * n).map_err(e)?;
        k.similarity_fast(
            gpu,
            kind,
            sim,
            qh,
            Some(qn),
            ch,
            Some(cn),
            nq,
            n,
            half_ld(dim),
            &mut out,
        )
        .map_err(e)?;
        Ok(out)
    }

    /// Every kernel through its launcher, against the CPU engine.
    fn kernel_cases(gpu: &Gpu, k: &Kernels, quick: bool) -> Result<Vec<KernelDiff>, String> {
        let mut rng = SplitMix::new(0x5EED_0001);
        let mut diffs = Vec::new();
        let mut shapes = dense_shapes(&mut rng, quick);
        // Many-query shapes take the GEMM kernels: dims of 1, 3 and a tail past every 16-column stage,
        // query and row counts off the 128 tile, one row, exact tiles.
        shapes.extend([
            (9, 700, 33),
            (17, 1000, 768),
            (130, 2000, 100),
            (257, 513, 1025),
            (9, 1, 1),
            (12, 300, 3),
            (129, 1, 768),
            (140, 129, 767),
            (128, 128, 16),
            (33, 257, 17),
            (200, 1000, 4),
        ]);
        if !quick {
            shapes.push((300, 3000, 768));
        }
        if !quick {
            shapes.push((1024, 20_000, 768));
        }
        for (nq, n, dim) in shapes {
            let queries = awkward_matrix(&mut rng, nq, dim);
            let corpus = awkward_matrix(&mut rng, n, dim);
            let cpu_qn = recall_cpu_simd::row_norms(&queries, dim).map_err(e)?;
            let cpu_cn = recall_cpu_simd::row_norms(&corpus, dim).map_err(e)?;
            let q = gpu.upload(&queries).map_err(e)?;
            let c = gpu.upload(&corpus).map_err(e)?;
            let mut qn = gpu.alloc_zeros::<f32>(nq).map_err(e)?;
            let mut cn = gpu.alloc_zeros::<f32>(n).map_err(e)?;
            k.row_norms_f32(gpu, &q, nq, dim, &mut qn).map_err(e)?;
            k.row_norms_f32(gpu, &c, n, dim, &mut cn).map_err(e)?;
            compare(
                diff_of(&mut diffs, "row_norms_f32"),
                &cpu_qn,
                &gpu.download(&qn).map_err(e)?,
            );
            compare(
                diff_of(
                    &mut diffs,
                    if n <= recall_gpu_kernels::WARP_MAX_ROWS && dim <= 1024 {
                        "row_norms_warp"
                    } else if n <= recall_gpu_kernels::PREFETCH_MAX_ROWS {
                        "row_norms_f32_pf"
                    } else {
                        "row_norms_f32"
                    },
                ),
                &cpu_cn,
                &gpu.download(&cn).map_err(e)?,
            );
            let mut out = gpu.alloc_zeros::<f32>(nq * n).map_err(e)?;
            // Skip the slowest CPU references on the biggest shapes: cosine covers them.
            let big = (nq * n * dim) as u64 > 20_000_000_000;
            for (metric, sim, name) in METRICS {
                if big && metric != Metric::Cosine {
                    continue;
                }
                let cpu = recall_cpu_simd::similarity(&queries, &Corpus::f32(&corpus, dim), metric)
                    .map_err(e)?;
                // The CPU's norms go in, so a norm mismatch cannot hide a dot mismatch.
                let (cqn, ccn) = (
                    gpu.upload(&cpu_qn).map_err(e)?,
                    gpu.upload(&cpu_cn).map_err(e)?,
                );
                // Many queries: every GEMM kernel but the default first (its scores stay for the top-k).
                if nq > SCAN_MAX_QUERIES {
                    for kernel in gemm_kernels(k, dim).into_iter().skip(1) {
                        k.set_gemm_kernel(kernel);
                        let r = k.similarity(
                            gpu,
                            sim,
                            &q,
                            Some(&cqn),
                            &c,
                            Some(&ccn),
                            nq,
                            n,
                            dim,
                            &mut out,
                        );
                        // Where the last queries went under this kernel (the scan, or the 128-query tile).
                        let tail = k.gemm_tail(nq, dim);
                        k.set_gemm_kernel(GemmKernel::Sm80);
                        r.map_err(e)?;
                        compare(
                            diff_of(
                                &mut diffs,
                                gemm_run_label(
                                    kernel,
                                    name,
                                    tail,
                                    nq > recall_gpu_kernels::GEMM_TILE as usize,
                                ),
                            ),
                            &cpu,
                            &gpu.download(&out).map_err(e)?,
                        );
                    }
                }
                k.similarity(
                    gpu,
                    sim,
                    &q,
                    Some(&cqn),
                    &c,
                    Some(&ccn),
                    nq,
                    n,
                    dim,
                    &mut out,
                )
                .map_err(e)?;
                let pf = n <= recall_gpu_kernels::PREFETCH_MAX_ROWS;
                let warp = nq == 1 && n <= recall_gpu_kernels::WARP_MAX_ROWS && dim <= 1024;
                let kernel = if nq <= SCAN_MAX_QUERIES {
                    let form = if warp {
                        "scan_warp"
                    } else if pf {
                        "scan_pf"
                    } else {
                        "scan"
                    };
                    format!("{form}_{name}").into()
                } else {
                    gemm_run_label(
                        k.gemm_kernel(dim),
                        name,
                        k.gemm_tail(nq, dim),
                        nq > recall_gpu_kernels::GEMM_TILE as usize,
                    )
                };
                let gpu_scores = gpu.download(&out).map_err(e)?;
                compare(diff_of(&mut diffs, kernel), &cpu, &gpu_scores);
                // Top-k over those scores, for a few k (k = N included when N is small).
                for kk in [1usize, 10, 16, 17, 32, 33, 100, 1000, n] {
                    if kk > n || (kk == n && n > 5000) {
                        continue;
                    }
                    let cpu_top = recall_cpu_simd::topk(&cpu, n, kk, metric.order()).map_err(e)?;
                    let r = k
                        .select_topk(
                            gpu,
                            &out,
                            None,
                            Segments::Dense {
                                n_segments: nq,
                                seg_len: n,
                            },
                            kk,
                            sim.higher_first(),
                        )
                        .map_err(e)?;
                    compare_topk(
                        diff_of(&mut diffs, select_label(kk, n)),
                        &cpu_top,
                        &TopK {
                            k: r.k,
                            ids: r.ids,
                            scores: r.scores,
                        },
                    );
                }
            }
        }
        // Heavy ties: every row identical, so the top k are ids 0..k by the id rule (also through the
        // threshold filter, where ties are its worst case).
        for n in [5000, 70_000] {
            let row = awkward_matrix(&mut rng, 1, 64);
            let corpus: Vec<f32> = (0..n).flat_map(|_| row.iter().copied()).collect();
            for (metric, _, _) in METRICS {
                let cpu = recall_cpu_simd::similarity(&row, &Corpus::f32(&corpus, 64), metric)
                    .map_err(e)?;
                let dev = gpu.upload(&cpu).map_err(e)?;
                for kk in [1, 7, 16, 32, 4999, 5000] {
                    let cpu_top = recall_cpu_simd::topk(&cpu, n, kk, metric.order()).map_err(e)?;
                    let higher = metric != Metric::L2;
                    let r = k
                        .select_topk(
                            gpu,
                            &dev,
                            None,
                            Segments::Dense {
                                n_segments: 1,
                                seg_len: n,
                            },
                            kk,
                            higher,
                        )
                        .map_err(e)?;
                    compare_topk(
                        diff_of(&mut diffs, select_label(kk, n)),
                        &cpu_top,
                        &TopK {
                            k: r.k,
                            ids: r.ids,
                            scores: r.scores,
                        },
                    );
                }
            }
        }
        Ok(diffs)
    }

    /// One query, scan and top-k in one launch (`knn1`; sm_80+ images only) against the CPU's similarity
    /// and top-k: every block-size regime (1, 2 and 4 warps), partial column tiles, k from 1 to 32 and k = N,
    /// heavy ties, and repeated launches on the same scratch (the last block resets the ticket).
    fn knn1_cases(gpu: &Gpu, k: &Kernels, quick: bool) -> Result<Vec<KernelDiff>, String> {
        let mut diffs = Vec::new();
        if !k.knn1_supported(1, 4, 1) {
            return Ok(diffs);
        }
        let mut rng = SplitMix::new(0x5EED_0004);
        let mut shapes: Vec<(usize, usize)> = vec![
            (1, 4),
            (31, 4),
            (32, 36),
            (33, 768),
            (1000, 768),
            (4096, 768),
            (4097, 100),
            (10_000, 768),
            (16_384, 96),
            (16_385, 1024),
            (3000, 4096),
            // sm90a_knn1's largest launch (1,024 blocks, 8 per SM), and rows past a whole 48-tile ring.
            (32_768, 100),
            (200, 1540),
        ];
        for _ in 0..if quick { 3 } else { 12 } {
            shapes.push((
                1 + rng.below(70_000) as usize,
                4 * (1 + rng.below(300) as usize),
            ));
        }
        if !quick {
            // Many merge groups (and more than one wave of blocks).
            shapes.extend([(200_000, 768), (1_000_000, 768)]);
        }
        let run = |diffs: &mut Vec<KernelDiff>,
                   query: &[f32],
                   corpus: &[f32],
                   n: usize,
                   dim: usize|
         -> Result<(), String> {
            let c = gpu.upload(corpus).map_err(e)?;
            let cpu_cn = recall_cpu_simd::row_norms(corpus, dim).map_err(e)?;
            let cn = gpu.upload(&cpu_cn).map_err(e)?;
            // Complete before the served calls (`knn1_resident`'s contract).
            gpu.synchronize().map_err(e)?;
            for (metric, sim, _) in METRICS {
                let cpu = recall_cpu_simd::similarity(query, &Corpus::f32(corpus, dim), metric)
                    .map_err(e)?;
                // Launched, then through the one-query server where it takes the shape (`serve.rs`):
                // one server per metric answers every k in turn.
                for served in [false, true] {
                    k.set_knn1_serve(served);
                    for kk in [1usize, 10, 16, 17, 32, n] {
                        if !k.knn1_supported(n, dim, kk) || (served && !k.knn1_serves(n, dim, kk)) {
                            continue;
                        }
                        let cpu_top =
                            recall_cpu_simd::topk(&cpu, n, kk, metric.order()).map_err(e)?;
                        // Twice: the second launch reuses the scratch and its reset ticket (the second
                        // query to a server rings the running one).
                        let one = OneQuery {
                            metric: sim,
                            query,
                            corpus: &c,
                            corpus_norms: Some(&cn),
                            n_rows: n,
                            dim,
                            k: kk,
                        };
                        for _ in 0..2 {
                            let r = if served {
                                k.knn1_resident(gpu, &one)
                            } else {
                                k.knn1(gpu, &one)
                            }
                            .map_err(e)?;
                            compare_topk(
                                diff_of(diffs, if served { "knn1 served" } else { "knn1" }),
                                &cpu_top,
                                &TopK {
                                    k: r.k,
                                    ids: r.ids,
                                    scores: r.scores,
                                },
                            );
                        }
                    }
                    k.set_knn1_serve(false);
                }
            }
            Ok(())
        };
        for (n, dim) in shapes {
            let query = awkward_matrix(&mut rng, 1, dim);
            let corpus = awkward_matrix(&mut rng, n, dim);
            run(&mut diffs, &query, &corpus, n, dim)?;
        }
        // Heavy ties: every row the same, so the top k are ids 0..k by the id rule.
        for n in [100, 20_000] {
            let row = awkward_matrix(&mut rng, 1, 64);
            let corpus: Vec<f32> = (0..n).flat_map(|_| row.iter().copied()).collect();
            run(&mut diffs, &row, &corpus, n, 64)?;
        }
        // One server, many different queries in a row (each must be relayed anew, never an earlier one's
        // lines), k changing between them, and pauses past the server's idle limit (the host stops it and
        // starts another) and shorter ones.
        let was = k.set_knn1_serve(true);
        for (n, dim) in [(1000, 768), (10_000, 768)] {
            if !k.knn1_serves(n, dim, 10) {
                continue;
            }
            let corpus = awkward_matrix(&mut rng, n, dim);
            let c = gpu.upload(&corpus).map_err(e)?;
            let cn = gpu
                .upload(&recall_cpu_simd::row_norms(&corpus, dim).map_err(e)?)
                .map_err(e)?;
            gpu.synchronize().map_err(e)?;
            for i in 0..if quick { 12 } else { 40 } {
                let query = awkward_matrix(&mut rng, 1, dim);
                let kk = [10usize, 1, 32, 7][i % 4];
                let cpu =
                    recall_cpu_simd::similarity(&query, &Corpus::f32(&corpus, dim), Metric::Cosine)
                        .map_err(e)?;
                let cpu_top =
                    recall_cpu_simd::topk(&cpu, n, kk, Metric::Cosine.order()).map_err(e)?;
                if i % 5 == 4 {
                    let idle = recall_gpu_kernels::SERVE_IDLE_DEFAULT_US as u64;
                    std::thread::sleep(std::time::Duration::from_micros(if i % 10 == 4 {
                        idle + idle / 2
                    } else {
                        idle / 4
                    }));
                }
                let r = k
                    .knn1_resident(
                        gpu,
                        &OneQuery {
                            metric: SimMetric::Cosine,
                            query: &query,
                            corpus: &c,
                            corpus_norms: Some(&cn),
                            n_rows: n,
                            dim,
                            k: kk,
                        },
                    )
                    .map_err(e)?;
                compare_topk(
                    diff_of(&mut diffs, "knn1 served, a query stream"),
                    &cpu_top,
                    &TopK {
                        k: r.k,
                        ids: r.ids,
                        scores: r.scores,
                    },
                );
            }
        }
        let expected = k.knn1_serves(1000, 768, 10);
        k.set_knn1_serve(was);
        // The served cases must have been answered by servers: a failed server's call is launched (the same
        // answer), which would hide a broken server from the comparisons above.
        let (answered, failures) = k.knn1_serve_counts();
        if failures > 0 || (answered == 0 && expected) {
            return Err(format!(
                "knn1 server: {answered} calls answered, {failures} failures (their calls launched)"
            ));
        }
        Ok(diffs)
    }

    /// One query against many rows through the persistent `sm80_scan1_*` (sm_80+ images) against the CPU:
    /// its top-k (`scan1_knn`, twice per case: the second launch reuses the scratch and its reset ticket) and
    /// its scores alone (`scan1_similarity`, bit for bit, with the query norm given and computed in the
    /// kernel), in every variant of `Scan1Mode`: rows in partial groups of 32, warps with no rows, many groups
    /// per warp, partial column tiles, k from 1 to 32 and k = N, heavy ties; and, above `KNN1_MAX_ROWS`, the
    /// routing of `knn1` and `similarity` in a mode other than `Old`. Dims not a multiple of 4 are not taken
    /// (the row scan runs them; `similarity` cases cover it).
    fn scan1_cases(gpu: &Gpu, k: &Kernels, quick: bool) -> Result<Vec<KernelDiff>, String> {
        use recall_gpu_kernels::{KNN1_MAX_ROWS, Scan1Mode};
        let mut diffs = Vec::new();
        if !k.scan1_supported(1, 4, 1) {
            return Ok(diffs);
        }
        let mut rng = SplitMix::new(0x5EED_5CA1);
        let mut shapes: Vec<(usize, usize)> = vec![
            (1, 4),
            (31, 4),
            (33, 36),
            (1000, 768),
            (20_000, 100),
            (70_001, 36),
            (KNN1_MAX_ROWS + 1, 4),
            (KNN1_MAX_ROWS + 37, 68),
        ];
        for _ in 0..if quick { 2 } else { 8 } {
            shapes.push((
                1 + rng.below(if quick { 100_000 } else { 400_000 }) as usize,
                4 * (1 + rng.below(300) as usize),
            ));
        }
        if !quick {
            shapes.extend([(3000, 4096), (300_001, 768), (1_000_000, 768)]);
        }
        let modes = [Scan1Mode::New, Scan1Mode::NewS8];
        let before = k.scan1_mode();
        let run = |diffs: &mut Vec<KernelDiff>,
                   query: &[f32],
                   corpus: &[f32],
                   n: usize,
                   dim: usize|
         -> Result<(), String> {
            let c = gpu.upload(corpus).map_err(e)?;
            let q = gpu.upload(query).map_err(e)?;
            let cpu_cn = recall_cpu_simd::row_norms(corpus, dim).map_err(e)?;
            let cpu_qn = recall_cpu_simd::row_norms(query, dim).map_err(e)?;
            let cn = gpu.upload(&cpu_cn).map_err(e)?;
            let qn = gpu.upload(&cpu_qn).map_err(e)?;
            let mut scores = gpu.alloc_zeros::<f32>(n).map_err(e)?;
            for (metric, sim, _) in METRICS {
                let cpu = recall_cpu_simd::similarity(query, &Corpus::f32(corpus, dim), metric)
                    .map_err(e)?;
                for mode in modes {
                    // Other metrics run New's kernel in every mode: once is enough.
                    if mode != Scan1Mode::New && sim != SimMetric::Cosine {
                        continue;
                    }
                    k.set_scan1_mode(mode);
                    let norms: &[Option<&CudaSlice<f32>>] = if sim == SimMetric::Cosine {
                        &[Some(&qn), None]
                    } else {
                        &[None]
                    };
                    for &qn_given in norms {
                        k.scan1_similarity(
                            gpu,
                            sim,
                            &q,
                            qn_given,
                            &c,
                            Some(&cn),
                            n,
                            dim,
                            &mut scores,
                        )
                        .map_err(e)?;
                        let got = gpu.download(&scores).map_err(e)?;
                        compare(diff_of(diffs, "sm80_scan1 scores"), &cpu, &got);
                    }
                    for kk in [1usize, 10, 16, 17, 32, n] {
                        if kk == 0 || !k.scan1_supported(n, dim, kk) {
                            continue;
                        }
                        let cpu_top =
                            recall_cpu_simd::topk(&cpu, n, kk, metric.order()).map_err(e)?;
                        let one = OneQuery {
                            metric: sim,
                            query,
                            corpus: &c,
                            corpus_norms: Some(&cn),
                            n_rows: n,
                            dim,
                            k: kk,
                        };
                        for _ in 0..2 {
                            let r = k.scan1_knn(gpu, &one).map_err(e)?;
                            compare_topk(
                                diff_of(diffs, "sm80_scan1 knn"),
                                &cpu_top,
                                &TopK {
                                    k: r.k,
                                    ids: r.ids,
                                    scores: r.scores,
                                },
                            );
                        }
                        // Above knn1's limit, knn1 and similarity route here in this mode.
                        if n > KNN1_MAX_ROWS && kk == 10 {
                            let r = k.knn1(gpu, &one).map_err(e)?;
                            compare_topk(
                                diff_of(diffs, "knn1 -> sm80_scan1"),
                                &cpu_top,
                                &TopK {
                                    k: r.k,
                                    ids: r.ids,
                                    scores: r.scores,
                                },
                            );
                            k.similarity(
                                gpu,
                                sim,
                                &q,
                                Some(&qn),
                                &c,
                                Some(&cn),
                                1,
                                n,
                                dim,
                                &mut scores,
                            )
                            .map_err(e)?;
                            let got = gpu.download(&scores).map_err(e)?;
                            compare(diff_of(diffs, "similarity -> sm80_scan1"), &cpu, &got);
                        }
                    }
                }
            }
            Ok(())
        };
        // `RECALL_DIFFTEST_PART=i/n` runs every n-th case from the i-th (the data stay those of the whole
        // group), so that racecheck, too slow for this group in one process, can take it in n processes.
        let (part, parts) = part_from_env();
        let mut result = Ok(());
        let n_shapes = shapes.len();
        for (i, (n, dim)) in shapes.into_iter().enumerate() {
            let query = awkward_matrix(&mut rng, 1, dim);
            let corpus = awkward_matrix(&mut rng, n, dim);
            if i % parts == part {
                result = run(&mut diffs, &query, &corpus, n, dim);
            }
            if result.is_err() {
                break;
            }
        }
        // Heavy ties: every row the same, so the top k are ids 0..k by the id rule.
        if result.is_ok() {
            for (i, n) in [100, 70_000].into_iter().enumerate() {
                let row = awkward_matrix(&mut rng, 1, 64);
                let corpus: Vec<f32> = (0..n).flat_map(|_| row.iter().copied()).collect();
                if (n_shapes + i) % parts == part {
                    result = run(&mut diffs, &row, &corpus, n, 64);
                }
                if result.is_err() {
                    break;
                }
            }
        }
        k.set_scan1_mode(before);
        result.map(|()| diffs)
    }

    /// Candidate scoring through both GPU paths against the CPU: `similarity_gather` + radix select over
    /// ragged segments (every arch; what runs where the fused kernel does not), and the fused
    /// `sm80_cand_*` (sm_80+ images; `dim` a multiple of 4, `k <= 64`), twice per case so the second call
    /// reuses the staging buffers. Ragged lists, lists at slice boundaries (1024, 1025, 2048) and longer than
    /// one slice (merged on the host), lists of exactly `k`, partial column tiles, and heavy ties (every row
    /// the same, ids in random order, so the id rule decides).
    fn cand_cases(gpu: &Gpu, k: &Kernels, quick: bool) -> Result<Vec<KernelDiff>, String> {
        use recall_gpu_kernels::CandidateBatch;
        let mut diffs = Vec::new();
        let mut rng = SplitMix::new(0x5EED_CA4D);
        let cpu = crate::backend::CpuBackend;
        // (queries, rows, dim, shortest list, longest list)
        let mut shapes: Vec<(usize, usize, usize, usize, usize)> = vec![
            (5, 2000, 36, 64, 1100),
            (3, 5000, 768, 64, 3000),
            (2, 300, 4, 64, 300),
            (4, 3000, 33, 64, 1500),
            (3, 4000, 100, 1024, 1024),
            (3, 4000, 96, 1025, 1025),
            (2, 4000, 64, 2048, 2048),
            (7, 1000, 12, 64, 64),
            (1, 50_000, 64, 20_000, 20_000),
            (2, 600, 4096, 64, 600),
        ];
        if !quick {
            shapes.extend([
                (1024, 100_000, 768, 1000, 1000),
                (16, 200_000, 768, 64, 100_000),
                (300, 20_000, 256, 64, 5000),
            ]);
        }
        let run = |diffs: &mut Vec<KernelDiff>,
                   rng: &mut SplitMix,
                   nq: usize,
                   corpus: &[f32],
                   dim: usize,
                   lists: (usize, usize)|
         -> Result<(), String> {
            let n = corpus.len() / dim;
            let queries = awkward_matrix(rng, nq, dim);
            let c = gpu.upload(corpus).map_err(e)?;
            let cpu_cn = recall_cpu_simd::row_norms(corpus, dim).map_err(e)?;
            let cpu_qn = recall_cpu_simd::row_norms(&queries, dim).map_err(e)?;
            let (cn, q, qn) = (
                gpu.upload(&cpu_cn).map_err(e)?,
                gpu.upload(&queries).map_err(e)?,
                gpu.upload(&cpu_qn).map_err(e)?,
            );
            for (metric, sim, _) in METRICS {
                // Lists between the shortest and longest length (k at most the shortest).
                let (offsets, ids) = candidate_lists(rng, nq, n, lists.0, lists.1);
                let offsets64: Vec<u64> = offsets.iter().map(|&o| o as u64).collect();
                let shortest = offsets.windows(2).map(|w| w[1] - w[0]).min().unwrap_or(0);
                for kk in [1usize, 10, 32, 64, 65] {
                    if kk > shortest {
                        continue;
                    }
                    let a = cpu
                        .score_candidates(&queries, corpus, dim, metric, &offsets, &ids, kk)
                        .map_err(e)?;
                    let mut scores = gpu.alloc_zeros::<f32>(ids.len().max(1)).map_err(e)?;
                    let (ids_dev, offsets_dev) = k
                        .similarity_gather(
                            gpu,
                            sim,
                            &q,
                            Some(&qn),
                            &c,
                            Some(&cn),
                            nq,
                            n,
                            dim,
                            &ids,
                            &offsets64,
                            &mut scores,
                        )
                        .map_err(e)?;
                    let r = k
                        .select_topk(
                            gpu,
                            &scores,
                            Some(&ids_dev),
                            Segments::Ragged {
                                offsets: &offsets64,
                                offsets_dev: &offsets_dev,
                            },
                            kk,
                            sim.higher_first(),
                        )
                        .map_err(e)?;
                    let as_topk = |r: recall_gpu_kernels::TopKResult| TopK {
                        k: r.k,
                        ids: r.ids,
                        scores: r.scores,
                    };
                    compare_topk(diff_of(diffs, "gather + select_radix"), &a, &as_topk(r));
                    if !k.cand_supported(dim, kk) {
                        continue;
                    }
                    for _ in 0..2 {
                        let r = k
                            .score_candidates(
                                gpu,
                                sim,
                                &queries,
                                &c,
                                Some(&cn),
                                n,
                                dim,
                                &ids,
                                &offsets64,
                                kk,
                            )
                            .map_err(e)?;
                        compare_topk(diff_of(diffs, "sm80_cand"), &a, &as_topk(r));
                    }
                    // Through a batch made once and scored twice (what the benchmark times).
                    let batch: CandidateBatch = k
                        .candidate_batch(gpu, &queries, dim, &ids, &offsets64, n)
                        .map_err(e)?;
                    for _ in 0..2 {
                        let r = k
                            .score_candidate_batch(gpu, sim, &batch, &c, Some(&cn), n, kk)
                            .map_err(e)?;
                        compare_topk(diff_of(diffs, "sm80_cand"), &a, &as_topk(r));
                    }
                }
            }
            Ok(())
        };
        for (nq, n, dim, shortest, longest) in shapes {
            let corpus = awkward_matrix(&mut rng, n, dim);
            run(&mut diffs, &mut rng, nq, &corpus, dim, (shortest, longest))?;
        }
        // Heavy ties: every row the same, so the top k are the k lowest ids of each list.
        for (n, dim) in [(5000, 64), (3000, 36)] {
            let row = awkward_matrix(&mut rng, 1, dim);
            let corpus: Vec<f32> = (0..n).flat_map(|_| row.iter().copied()).collect();
            run(&mut diffs, &mut rng, 4, &corpus, dim, (64, 2500))?;
        }
        // A candidate id outside the corpus is refused before any launch.
        if k.cand_supported(4, 1) {
            let corpus = awkward_matrix(&mut rng, 10, 4);
            let c = gpu.upload(&corpus).map_err(e)?;
            let bad = k.score_candidates(
                gpu,
                SimMetric::Dot,
                &corpus[..4],
                &c,
                None,
                10,
                4,
                &[3, 10],
                &[0, 2],
                1,
            );
            if bad.is_ok() {
                return Err("sm80_cand accepted a candidate id outside the corpus".into());
            }
        }
        Ok(diffs)
    }

    /// Fast mode (tensor cores; sm_80+ images only) against an f64 reference within the bound of
    /// `docs/numerics.md`, "Fast mode" (a score outside it counts as a mismatch); the exact widening of
    /// 16-bit rows bit for bit; and fast top-k, where every returned id's exact score must be within twice
    /// the bound of the exact k-th score (its recall against exact top-k is printed).
    fn fast_cases(gpu: &Gpu, k: &Kernels, quick: bool) -> Result<Vec<KernelDiff>, String> {
        let mut rng = SplitMix::new(0x5EED_FA57);
        let mut diffs = Vec::new();
        // Widening: every finite 16-bit pattern of both formats, bit for bit.
        for (kind, name) in [(HalfKind::F16, "widen_f16"), (HalfKind::Bf16, "widen_bf16")] {
            let bits: Vec<u16> = (0..=u16::MAX)
                .filter(|&b| match kind {
                    HalfKind::F16 => half::f16::from_bits(b).is_finite(),
                    HalfKind::Bf16 => half::bf16::from_bits(b).is_finite(),
                })
                .collect();
            let want: Vec<f32> = bits
                .iter()
                .map(|&b| match kind {
                    HalfKind::F16 => half::f16::from_bits(b).to_f32(),
                    HalfKind::Bf16 => half::bf16::from_bits(b).to_f32(),
                })
                .collect();
            let src = gpu.upload(&bits).map_err(e)?;
            let mut out = gpu.alloc_zeros::<f32>(bits.len()).map_err(e)?;
            k.widen_half_rows(gpu, &src, kind, bits.len() / 64, 64, &mut out)
                .map_err(e)?;
            let got = gpu.download(&out).map_err(e)?;
            let n = bits.len() / 64 * 64;
            compare(diff_of(&mut diffs, name), &want[..n], &got[..n]);
        }
        if !k.fast_mode_available() {
            return Ok(diffs);
        }
        let mut shapes = vec![
            (9, 517, 33),
            (130, 3000, 768),
            (200, 1000, 1),
            (256, 4096, 100),
        ];
        if !quick {
            shapes.push((512, 8000, 768));
        }
        for (nq, n, dim) in shapes {
            let uniform = |rng: &mut SplitMix, len: usize| -> Vec<f32> {
                (0..len).map(|_| rng.next_f32() * 2.0 - 1.0).collect()
            };
            let queries = uniform(&mut rng, nq * dim);
            let corpus = uniform(&mut rng, n * dim);
            let q = gpu.upload(&queries).map_err(e)?;
            let c = gpu.upload(&corpus).map_err(e)?;
            let mut qn = gpu.alloc_zeros::<f32>(nq).map_err(e)?;
            let mut cn = gpu.alloc_zeros::<f32>(n).map_err(e)?;
            k.row_norms_f32(gpu, &q, nq, dim, &mut qn).map_err(e)?;
            k.row_norms_f32(gpu, &c, n, dim, &mut cn).map_err(e)?;
            let (qn_h, cn_h) = (gpu.download(&qn).map_err(e)?, gpu.download(&cn).map_err(e)?);
            // f64 references: dot, sum |q c|, l1 norms, max magnitudes.
            let mut dot = vec![0f64; nq * n];
            let mut absdot = vec![0f64; nq * n];
            for i in 0..nq {
                for j in 0..n {
                    let (a, b) = (
                        &queries[i * dim..(i + 1) * dim],
                        &corpus[j * dim..(j + 1) * dim],
                    );
                    let (mut d, mut ad) = (0f64, 0f64);
                    for t in 0..dim {
                        let p = f64::from(a[t]) * f64::from(b[t]);
                        d += p;
                        ad += p.abs();
                    }
                    dot[i * n + j] = d;
                    absdot[i * n + j] = ad;
                }
            }
            let l1 = |x: &[f32]| -> Vec<f64> {
                x.chunks(dim)
                    .map(|r| r.iter().map(|v| f64::from(v.abs())).sum())
                    .collect()
            };
            let linf = |x: &[f32]| -> Vec<f64> {
                x.chunks(dim)
                    .map(|r| r.iter().fold(0f64, |m, v| m.max(f64::from(v.abs()))))
                    .collect()
            };
            let (q1, qi, c1, ci) = (l1(&queries), linf(&queries), l1(&corpus), linf(&corpus));
            for (kind, name, mode) in [
                (HalfKind::F16, "tc_gemm_f16", crate::Mode::FastF16),
                (HalfKind::Bf16, "tc_gemm_bf16", crate::Mode::FastBf16),
            ] {
                let (qh, ch) = half_pair(gpu, k, kind, &q, &c, nq, n, dim)?;
                let (coef, tiny) = mode.fast_dot_bound(dim).unwrap_or((0.0, 0.0));
                let eps = 2f64.powi(-24);
                for (metric, sim, _) in METRICS {
                    let out = fast_scores(gpu, k, kind, sim, (&qh, &ch), (&qn, &cn), nq, n, dim)?;
                    let got = gpu.download(&out).map_err(e)?;
                    let d = diff_of(&mut diffs, name);
                    d.cases += 1;
                    d.values += got.len() as u64;
                    for i in 0..nq {
                        for j in 0..n {
                            let at = i * n + j;
                            // The bound on the dot product (docs/numerics.md, "Fast mode").
                            let bd = coef * absdot[at] + tiny * (q1[i] * ci[j] + c1[j] * qi[i]);
                            let (nq64, nc64) = (f64::from(qn_h[i]), f64::from(cn_h[j]));
                            let (want, bound) = match metric {
                                Metric::Dot => (dot[at], bd + 4.0 * eps * absdot[at]),
                                Metric::Cosine => {
                                    let s = if nq64 == 0.0 || nc64 == 0.0 {
                                        0.0
                                    } else {
                                        dot[at] / (nq64 * nc64)
                                    };
                                    (
                                        s,
                                        bd / (nq64 * nc64).max(f64::MIN_POSITIVE)
                                            + 8.0 * eps * s.abs().max(eps),
                                    )
                                }
                                Metric::L2 => {
                                    let s = (nq64 * nq64 + nc64 * nc64 - 2.0 * dot[at]).max(0.0);
                                    (s, 2.0 * bd + 8.0 * eps * (nq64 * nq64 + nc64 * nc64))
                                }
                            };
                            let err = (f64::from(got[at]) - want).abs();
                            d.max_abs_diff = d.max_abs_diff.max(err);
                            if err > bound || got[at].is_nan() {
                                d.mismatches += 1;
                            }
                        }
                    }
                }
            }
            // Fast top-10 (cosine) against exact: every id within twice the bound of the exact 10th score.
            if nq > SCAN_MAX_QUERIES && n >= 10 {
                let kk = 10;
                let (qh, ch) = half_pair(gpu, k, HalfKind::F16, &q, &c, nq, n, dim)?;
                let out = fast_scores(
                    gpu,
                    k,
                    HalfKind::F16,
                    SimMetric::Cosine,
                    (&qh, &ch),
                    (&qn, &cn),
                    nq,
                    n,
                    dim,
                )?;
                let r = k
                    .select_topk(
                        gpu,
                        &out,
                        None,
                        Segments::Dense {
                            n_segments: nq,
                            seg_len: n,
                        },
                        kk,
                        true,
                    )
                    .map_err(e)?;
                let d = diff_of(&mut diffs, "tc_knn_f16");
                d.cases += 1;
                let mut hits = 0usize;
                for i in 0..nq {
                    let cos = |j: usize| dot[i * n + j] / (f64::from(qn_h[i]) * f64::from(cn_h[j]));
                    let mut exact: Vec<usize> = (0..n).collect();
                    exact.sort_by(|&x, &y| cos(y).total_cmp(&cos(x)).then(x.cmp(&y)));
                    let kth = cos(exact[kk - 1]);
                    let worst_bound = (0..n)
                        .map(|j| {
                            (2.0 * 2f64.powi(-11) + dim as f64 * 2f64.powi(-23)) * absdot[i * n + j]
                                / (f64::from(qn_h[i]) * f64::from(cn_h[j]))
                        })
                        .fold(0f64, f64::max);
                    for &id in &r.ids[i * kk..(i + 1) * kk] {
                        d.values += 1;
                        if exact[..kk].contains(&(id as usize)) {
                            hits += 1;
                        }
                        if cos(id as usize) < kth - 2.0 * worst_bound - 1e-6 {
                            d.mismatches += 1;
                        }
                    }
                }
                eprintln!(
                    "fast mode f16 cosine top-{kk} recall against exact: {:.4} ({nq} queries x {n} rows x {dim})",
                    hits as f64 / (nq * kk) as f64
                );
            }
        }
        Ok(diffs)
    }

    /// The fused fast-mode knn (`tc_knn_*` + `tc_knn_merge`; sm_80+ images whose device has the shared
    /// memory) against `select_topk` over `tc_gemm_*`'s scores: the same ids and the same score bits, for k in
    /// {1, 10, 32} and n = k, n not a multiple of the 256-row tile, one and many splits, dims 1, 33 and 768,
    /// every metric, f16 and bf16; heavy ties (every row the same: the id rule decides, and the first tile
    /// overflows the candidate lists) and scores that rise with the row id (every tile beats the lists).
    fn fused_fast_cases(gpu: &Gpu, k: &Kernels, quick: bool) -> Result<Vec<KernelDiff>, String> {
        let mut diffs = Vec::new();
        if !k.knn_fast_supported(1, 1) {
            return Ok(diffs);
        }
        let mut rng = SplitMix::new(0x5EED_F05E);
        let uniform = |rng: &mut SplitMix, len: usize| -> Vec<f32> {
            (0..len).map(|_| rng.next_f32() * 2.0 - 1.0).collect()
        };
        // (queries, rows, dim, data): 0 uniform, 1 awkward (bf16 only), 2 ties, 3 rising.
        let mut cases: Vec<(usize, usize, usize, u8)> = vec![
            (9, 1, 1, 0),
            (20, 10, 33, 0),
            (130, 32, 768, 0),
            (9, 517, 33, 0),
            (200, 1000, 1, 0),
            (130, 3000, 768, 0),
            (257, 4097, 100, 0),
            (40, 300, 64, 2),
            (33, 2000, 40, 3),
            (130, 3000, 96, 1),
            // 1,024 queries take few splits, so each block walks ~10 row tiles: candidates wait in their
            // lists across tiles (the lazy merge), with ties and with every tile beating the last.
            (1024, 40_000, 32, 0),
            (1024, 40_000, 16, 2),
            (1024, 40_000, 24, 3),
        ];
        for _ in 0..if quick { 2 } else { 8 } {
            cases.push((
                1 + rng.below(300) as usize,
                1 + rng.below(6000) as usize,
                1 + rng.below(800) as usize,
                0,
            ));
        }
        if !quick {
            cases.push((1024, 50_000, 768, 0));
        }
        for (nq, n, dim, data) in cases {
            let queries = match data {
                1 => awkward_matrix(&mut rng, nq, dim),
                _ => uniform(&mut rng, nq * dim),
            };
            let corpus = match data {
                1 => awkward_matrix(&mut rng, n, dim),
                2 => {
                    let row = uniform(&mut rng, dim);
                    (0..n).flat_map(|_| row.iter().copied()).collect()
                }
                3 => {
                    // Row r = (r + 1) / n * the first query: dot and cosine's ties aside, scores rise with r.
                    (0..n)
                        .flat_map(|r| {
                            let f = (r + 1) as f32 / n as f32;
                            queries[..dim].iter().map(move |v| v * f)
                        })
                        .collect()
                }
                _ => uniform(&mut rng, n * dim),
            };
            let ld = half_ld(dim);
            let q = gpu.upload(&queries).map_err(e)?;
            let c = gpu.upload(&corpus).map_err(e)?;
            let mut qn = gpu.alloc_zeros::<f32>(nq).map_err(e)?;
            let mut cn = gpu.alloc_zeros::<f32>(n).map_err(e)?;
            k.row_norms_f32(gpu, &q, nq, dim, &mut qn).map_err(e)?;
            k.row_norms_f32(gpu, &c, n, dim, &mut cn).map_err(e)?;
            let kinds: &[(HalfKind, &'static str)] = if data == 1 {
                &[(HalfKind::Bf16, "fused_knn_bf16")]
            } else {
                &[
                    (HalfKind::F16, "fused_knn_f16"),
                    (HalfKind::Bf16, "fused_knn_bf16"),
                ]
            };
            for &(kind, name) in kinds {
                let (qh, ch) = half_pair(gpu, k, kind, &q, &c, nq, n, dim)?;
                for (metric, sim, _) in METRICS {
                    let out = fast_scores(gpu, k, kind, sim, (&qh, &ch), (&qn, &cn), nq, n, dim)?;
                    for kk in [1usize, 10, 20, 32] {
                        // The device may hold fused lists only up to a smaller k (its shared memory).
                        if !k.knn_fast_supported(n, kk) {
                            continue;
                        }
                        let want = k
                            .select_topk(
                                gpu,
                                &out,
                                None,
                                Segments::Dense {
                                    n_segments: nq,
                                    seg_len: n,
                                },
                                kk,
                                metric != Metric::L2,
                            )
                            .map_err(e)?;
                        // Twice: the second launch reuses the scratch.
                        for _ in 0..2 {
                            let got = k
                                .knn_fast(
                                    gpu,
                                    kind,
                                    sim,
                                    &qh,
                                    Some(&qn),
                                    &ch,
                                    Some(&cn),
                                    nq,
                                    n,
                                    ld,
                                    kk,
                                )
                                .map_err(e)?;
                            compare_topk(
                                diff_of(&mut diffs, name),
                                &TopK {
                                    k: want.k,
                                    ids: want.ids.clone(),
                                    scores: want.scores.clone(),
                                },
                                &TopK {
                                    k: got.k,
                                    ids: got.ids,
                                    scores: got.scores,
                                },
                            );
                        }
                    }
                }
            }
        }
        Ok(diffs)
    }

    fn compare_bits_f64(diff: &mut KernelDiff, cpu: &[f64], gpu: &[f64]) {
        diff.cases += 1;
        diff.values += cpu.len() as u64;
        if cpu.len() != gpu.len() {
            diff.mismatches += cpu.len().max(gpu.len()) as u64;
            return;
        }
        for (c, g) in cpu.iter().zip(gpu) {
            if c.to_bits() != g.to_bits() {
                diff.mismatches += 1;
                diff.max_abs_diff = diff.max_abs_diff.max((c - g).abs());
            }
        }
    }

    fn compare_ids(diff: &mut KernelDiff, cpu: &[u32], gpu: &[u32]) {
        diff.cases += 1;
        diff.values += cpu.len() as u64;
        diff.mismatches += if cpu.len() != gpu.len() {
            cpu.len().max(gpu.len()) as u64
        } else {
            cpu.iter().zip(gpu).filter(|(a, b)| a != b).count() as u64
        };
    }

    /// Spreading on the GPU backend against the CPU backend: activations bit for bit, identical top-k.
    fn graph_cases(
        gpu: &GpuBackend,
        diffs: &mut Vec<KernelDiff>,
        quick: bool,
    ) -> Result<(), String> {
        use recall_cpu_simd::{SpreadGraph, SpreadParams};
        let cpu = crate::backend::CpuBackend;
        let mut rng = SplitMix::new(0x5EED_0003);
        // (nodes, random edges, extra in-edges of node 1, extra out-edges of node 2)
        let graphs: &[(usize, usize, usize, usize)] = if quick {
            // The hub of the third takes two staging chunks per lane chain (more than 32 x 2,048 in-edges).
            &[(1, 0, 0, 0), (50, 400, 0, 0), (2000, 20_000, 70_000, 500)]
        } else {
            &[
                (1, 1, 0, 0),
                (64, 0, 0, 0),
                (50, 400, 0, 0),
                (20_000, 200_000, 120_000, 100_000),
                (200_000, 2_000_000, 150_000, 0),
            ]
        };
        for &(n, e, hub_in, hub_out) in graphs {
            let (indptr, indices, weights) = power_law_graph(&mut rng, n, e, hub_in, hub_out);
            let graph = SpreadGraph::from_csr(&indptr, &indices, &weights).map_err(e_)?;
            let mut seeds = vec![0.0f32; n];
            for _ in 0..(n / 100).max(1) {
                seeds[rng.below(n as u64) as usize] = (rng.next_f32() + 1.0) * 0.5;
            }
            let zero = vec![0.0f32; n];
            for (seeds, decay, threshold, hops) in [
                (&seeds, 0.5f32, 0.01f32, 3usize),
                (&seeds, 1.0, 0.0, 2),
                (&seeds, 0.9, 1e-6, 5),
                (&zero, 0.5, 0.0, 2),
            ] {
                let params = SpreadParams {
                    decay,
                    threshold,
                    hops,
                    k: n.min(100),
                };
                let a = cpu.spread(&graph, seeds, &params).map_err(e_)?;
                let b = gpu.spread(&graph, seeds, &params).map_err(e_)?;
                compare(diff_of(diffs, "spread_hop"), &a.activation, &b.activation);
                compare_topk(diff_of(diffs, "spread top-k"), &a.top, &b.top);
            }
        }
        Ok(())
    }

    /// Spreading over a shared graph (uploaded on the first call, resident for the next ones) against the
    /// CPU's plain spreading, and the device copy freed once the last handle is dropped.
    fn graph_handle_cases(
        gpu: &GpuBackend,
        diffs: &mut Vec<KernelDiff>,
        quick: bool,
    ) -> Result<(), String> {
        use crate::shared_graph::SharedGraph;
        use recall_cpu_simd::SpreadParams;
        let cpu = crate::backend::CpuBackend;
        let mut rng = SplitMix::new(0x5EED_0006);
        let graphs: &[(usize, usize, usize, usize)] = if quick {
            &[(1, 0, 0, 0), (2000, 20_000, 5000, 500)]
        } else {
            &[
                (1, 1, 0, 0),
                (50, 400, 0, 0),
                (200_000, 2_000_000, 150_000, 0),
            ]
        };
        for &(n, e, hub_in, hub_out) in graphs {
            let (indptr, indices, weights) = power_law_graph(&mut rng, n, e, hub_in, hub_out);
            let shared = SharedGraph::from_csr(&indptr, &indices, &weights).map_err(e_)?;
            let before = gpu.resident_graphs();
            // Several seed sets and parameters against one upload.
            for (decay, threshold, hops) in
                [(0.5f32, 0.01f32, 3usize), (1.0, 0.0, 2), (0.9, 1e-6, 5)]
            {
                let mut seeds = vec![0.0f32; n];
                for _ in 0..(n / 100).max(1) {
                    seeds[rng.below(n as u64) as usize] = (rng.next_f32() + 1.0) * 0.5;
                }
                let params = SpreadParams {
                    decay,
                    threshold,
                    hops,
                    k: n.min(100),
                };
                let a = cpu.spread(shared.graph(), &seeds, &params).map_err(e_)?;
                let b = gpu.spread_shared(&shared, &seeds, &params).map_err(e_)?;
                compare(
                    diff_of(diffs, "spread resident"),
                    &a.activation,
                    &b.activation,
                );
                compare_topk(diff_of(diffs, "spread resident top-k"), &a.top, &b.top);
                // The same seeds as a list (`Engine::spread_from`'s backend call), on the same resident copy.
                let list: Vec<(u32, f32)> = seeds
                    .iter()
                    .enumerate()
                    .filter(|p| *p.1 != 0.0)
                    .map(|(v, &x)| (v as u32, x))
                    .collect();
                let c = gpu
                    .spread_shared_from(&shared, &list, &params)
                    .map_err(e_)?;
                compare(
                    diff_of(diffs, "spread resident seed list"),
                    &a.activation,
                    &c.activation,
                );
                compare_topk(
                    diff_of(diffs, "spread resident seed list top-k"),
                    &a.top,
                    &c.top,
                );
            }
            // Calls at once over the one resident copy, more of them than the graph has slots (each call
            // runs on a slot's own stream and buffers): every answer is still the CPU's.
            let sets: Vec<(Vec<(u32, f32)>, SpreadParams)> = (0..12)
                .map(|i| {
                    let mut list: Vec<(u32, f32)> = (0..1 + i % 8)
                        .map(|_| (rng.below(n as u64) as u32, rng.next_f32() + 0.5))
                        .collect();
                    list.sort_by_key(|p| p.0);
                    list.dedup_by_key(|p| p.0);
                    let params = SpreadParams {
                        decay: 0.5,
                        threshold: if i % 2 == 0 { 0.01 } else { 0.0 },
                        hops: 1 + i % 4,
                        k: n.min(10 + i),
                    };
                    (list, params)
                })
                .collect();
            let answers: Vec<Result<recall_cpu_simd::Spread, String>> = std::thread::scope(|sc| {
                let handles: Vec<_> = sets
                    .iter()
                    .map(|(list, params)| {
                        let shared = &shared;
                        sc.spawn(move || gpu.spread_shared_from(shared, list, params).map_err(e_))
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| {
                        h.join()
                            .unwrap_or_else(|_| Err("a spreading thread panicked".into()))
                    })
                    .collect()
            });
            for ((list, params), b) in sets.iter().zip(answers) {
                let a = cpu.spread_shared_from(&shared, list, params).map_err(e_)?;
                let b = b?;
                compare(
                    diff_of(diffs, "spread concurrent calls"),
                    &a.activation,
                    &b.activation,
                );
                compare_topk(
                    diff_of(diffs, "spread concurrent calls top-k"),
                    &a.top,
                    &b.top,
                );
            }
            if gpu.resident_graphs() != before + 1 {
                return Err(
                    "a live shared graph is not resident on the GPU (or was uploaded twice)".into(),
                );
            }
            drop(shared);
            if gpu.resident_graphs() != before {
                return Err("a dropped shared graph is still resident on the GPU".into());
            }
        }
        Ok(())
    }

    /// Spreading with each hop form forced (every hop sparse, every hop dense, and the automatic choice) against
    /// the CPU: empty frontiers, one seed, a seed whose out-edges reach the in-hub, the out-hub as a seed, dense
    /// seeds (uploaded whole, then listed on the device), `-0.0` seeds, every node seeded, and a threshold that
    /// empties the frontier after a hop or two. Each seed set also goes in as a seed list (`Seeds::List`: its
    /// nonzero and `-0.0` entries, ascending) against the CPU's answer for the dense vector: the half-dense and
    /// all-node sets are lists above the `n / 4` switch to the dense staging.
    fn graph_frontier_cases(
        gpu: &GpuBackend,
        diffs: &mut Vec<KernelDiff>,
        quick: bool,
    ) -> Result<(), String> {
        use crate::gpu_shared_graph::{spread_on_with, upload};
        use recall_cpu_simd::{SpreadGraph, SpreadParams};
        use recall_gpu_kernels::{Frontier, Seeds};
        let cpu = crate::backend::CpuBackend;
        let (g, kern) = gpu.parts();
        let mut rng = SplitMix::new(0x5EED_0007);
        let graphs: &[(usize, usize, usize, usize)] = if quick {
            &[(1, 0, 0, 0), (64, 0, 0, 0), (3000, 30_000, 6000, 2000)]
        } else {
            &[
                (1, 1, 0, 0),
                (64, 0, 0, 0),
                (3000, 30_000, 6000, 2000),
                (20_000, 200_000, 120_000, 100_000),
                (200_000, 2_000_000, 150_000, 0),
            ]
        };
        for &(n, e, hub_in, hub_out) in graphs {
            let (indptr, indices, weights) = power_law_graph(&mut rng, n, e, hub_in, hub_out);
            let graph = SpreadGraph::from_csr(&indptr, &indices, &weights).map_err(e_)?;
            let dev = upload(g, kern, &graph, &mut gpu.graph_staging()).map_err(e_)?;
            let value = |rng: &mut SplitMix| (rng.next_f32() + 1.0) * 0.5;
            let mut seed_sets: Vec<(Vec<f32>, f32)> = Vec::new();
            // No seed at all: every hop's frontier is empty.
            seed_sets.push((vec![0.0; n], 0.0));
            // One seed.
            let mut one = vec![0.0f32; n];
            one[rng.below(n as u64) as usize] = value(&mut rng);
            seed_sets.push((one, 0.01));
            // A source of an in-edge of the in-hub (node 1; node 0 where there is one node): the hub is touched.
            let hub = 1 % n;
            let mut to_hub = vec![0.0f32; n];
            if let Some(&u) = graph.in_edges(hub).0.first() {
                to_hub[u as usize] = 1.0;
            }
            seed_sets.push((to_hub, 0.0));
            // The out-hub (node 2) as the seed, with -0.0 seeds around it.
            let mut out_hub = vec![0.0f32; n];
            out_hub[2 % n] = 1.0;
            for _ in 0..(n / 50).max(1) {
                let v = rng.below(n as u64) as usize;
                if v != 2 % n {
                    out_hub[v] = -0.0;
                }
            }
            seed_sets.push((out_hub, 0.001));
            // Dense seeds: uploaded whole.
            let dense: Vec<f32> = (0..n)
                .map(|_| {
                    if rng.below(2) == 0 {
                        value(&mut rng)
                    } else {
                        0.0
                    }
                })
                .collect();
            seed_sets.push((dense, 0.01));
            // A few seeds and a threshold that empties the frontier after a hop or two.
            let mut few = vec![0.0f32; n];
            for _ in 0..(n / 100).max(1) {
                few[rng.below(n as u64) as usize] = value(&mut rng);
            }
            seed_sets.push((few, 0.3));
            // Every node seeded (a list of n pairs; its own generator, so the other cases keep their data).
            let mut all_rng = SplitMix::new(0x5EED_0008 ^ n as u64);
            let all: Vec<f32> = (0..n).map(|_| value(&mut all_rng)).collect();
            seed_sets.push((all, 0.01));
            for (seeds, threshold) in &seed_sets {
                // The list form: every entry that is not +0.0 (the -0.0 ones too), ascending.
                let list: Vec<(u32, f32)> = seeds
                    .iter()
                    .enumerate()
                    .filter(|p| p.1.to_bits() != 0)
                    .map(|(v, &x)| (v as u32, x))
                    .collect();
                for (decay, hops) in [(0.5f32, 3usize), (1.0, 4)] {
                    let params = SpreadParams {
                        decay,
                        threshold: *threshold,
                        hops,
                        k: n.min(100),
                    };
                    let a = cpu.spread(&graph, seeds, &params).map_err(e_)?;
                    for (frontier, label) in [
                        (Frontier::Sparse, "spread sparse hops"),
                        (Frontier::Dense, "spread dense hops"),
                        (Frontier::Auto, "spread auto hops"),
                    ] {
                        let b =
                            spread_on_with(g, kern, &dev, Seeds::Dense(seeds), &params, frontier)
                                .map_err(e_)?;
                        compare(diff_of(diffs, label), &a.activation, &b.activation);
                        compare_topk(diff_of(diffs, "spread hops top-k"), &a.top, &b.top);
                        let c =
                            spread_on_with(g, kern, &dev, Seeds::List(&list), &params, frontier)
                                .map_err(e_)?;
                        compare(
                            diff_of(diffs, "spread seed list"),
                            &a.activation,
                            &c.activation,
                        );
                        compare_topk(diff_of(diffs, "spread seed list top-k"), &a.top, &c.top);
                        if b.activation.len() != c.activation.len()
                            || b.activation
                                .iter()
                                .zip(&c.activation)
                                .any(|(x, y)| x.to_bits() != y.to_bits())
                            || b.top != c.top
                        {
                            return Err(format!(
                                "{label}: the seed list and the dense seeds differ on the GPU ({n} nodes, {} pairs)",
                                list.len()
                            ));
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Clip-and-noise: the same Philox stream and Box-Muller code on both sides, so the same bits.
    fn noise_cases(
        gpu: &GpuBackend,
        diffs: &mut Vec<KernelDiff>,
        quick: bool,
    ) -> Result<(), String> {
        let cpu = crate::backend::CpuBackend;
        let mut rng = SplitMix::new(0x5EED_0005);
        // Dims that are multiples of 4 run the one-pass kernel on sm_80+ (`sm90a_clip_noise_rows` on sm_90,
        // `sm80_clip_noise_rows` elsewhere; 12 rows a block up to 2,048
        // values, fewer above: 8,192 takes 3), the others the norm kernel and `clip_noise`; both paths run
        // every case where the first can.
        let mut shapes = vec![
            (1usize, 1usize),
            (7, 5),
            (300, 33),
            (17, 4),
            (40, 768),
            (5, 1536),
            (9, 2048),
            (3, 8192),
        ];
        if !quick {
            shapes.extend([(20_000, 768), (1000, 1025), (4099, 128)]);
        }
        let (dev, kern) = gpu.parts();
        // Every radius the noise can have (2^23 inputs): the device's square root there skips the range check of
        // `sqrt.rn` (`math::sqrt_in_range`), and its logarithm reads the device's copy of `math::LN_TABLE`.
        let radii = kern.noise_radii(dev).map_err(e_)?;
        compare(
            diff_of(diffs, "noise_radii (every Box-Muller radius)"),
            &recall_cpu_simd::noise_radii(),
            &radii,
        );
        for (n, dim) in shapes {
            let x = awkward_matrix(&mut rng, n, dim);
            for (clip, sigma, seed) in [
                (1.0f32, 0.1f32, 1u64),
                (1e30, 0.0, 2),
                (1e-3, 2.0, u64::MAX),
            ] {
                let a = cpu.clip_and_noise(&x, dim, clip, sigma, seed).map_err(e_)?;
                for fused in [true, false] {
                    kern.set_clip_noise_fused(fused);
                    let label = kern.clip_noise_kernels(dim);
                    // Where the one-pass kernel does not run, the first round would be the second's kernels.
                    let b = (!fused || label != recall_gpu_kernels::CLIP_NOISE_TWO_PASS)
                        .then(|| gpu.clip_and_noise(&x, dim, clip, sigma, seed));
                    kern.set_clip_noise_fused(true);
                    if let Some(b) = b {
                        compare(diff_of(diffs, label), &a, &b.map_err(e_)?);
                    }
                }
            }
        }
        Ok(())
    }

    /// k-means on the GPU backend against the CPU backend: centroids and inertia bit for bit, identical
    /// assignments.
    fn kmeans_cases(
        gpu: &GpuBackend,
        diffs: &mut Vec<KernelDiff>,
        quick: bool,
    ) -> Result<(), String> {
        let cpu = crate::backend::CpuBackend;
        let mut rng = SplitMix::new(0x5EED_0004);
        // (points, dim, k, iterations)
        let shapes: &[(usize, usize, usize, usize)] = if quick {
            &[(1, 3, 1, 1), (300, 16, 7, 3), (257, 33, 257, 2)]
        } else {
            &[
                (1, 3, 1, 1),
                (300, 16, 7, 3),
                (257, 33, 257, 2),
                (5000, 128, 64, 4),
                (20_000, 96, 1024, 2),
                (3000, 768, 1, 2),
            ]
        };
        for &(n, dim, k, iters) in shapes {
            let mut points = awkward_matrix(&mut rng, n, dim);
            // Duplicate points: the second quarter repeats the first.
            let q = n / 4;
            for i in 0..q * dim {
                points[q * dim + i] = points[i];
            }
            // awkward_matrix scales some rows to 1e17; squared distances would overflow f32, so rescale.
            for v in points.iter_mut() {
                if v.abs() > 1e6 {
                    *v *= 1e-17;
                }
            }
            let a = cpu.kmeans(&points, dim, k, iters, 42).map_err(e_)?;
            // The assignment runs the GEMM's argmin: every GEMM kernel of the image, the default last.
            let kern = gpu.parts().1;
            for kernel in gemm_kernels(kern, dim).into_iter().rev() {
                kern.set_gemm_kernel(kernel);
                let b = gpu.kmeans(&points, dim, k, iters, 42);
                kern.set_gemm_kernel(GemmKernel::Sm80);
                let b = b.map_err(e_)?;
                let (centroids, assign, inertia) = match kernel {
                    GemmKernel::Sm80 => (
                        "kmeans centroids (sm80_gemm_l2_argmin)",
                        "kmeans assign (sm80_gemm_l2_argmin)",
                        "kmeans inertia (sm80_gemm_l2_argmin)",
                    ),
                    GemmKernel::Legacy => ("kmeans centroids", "kmeans assign", "kmeans inertia"),
                };
                compare(diff_of(diffs, centroids), &a.centroids, &b.centroids);
                compare_ids(diff_of(diffs, assign), &a.assignments, &b.assignments);
                compare_bits_f64(diff_of(diffs, inertia), &a.inertia, &b.inertia);
            }
        }
        Ok(())
    }

    fn e_(x: impl std::fmt::Display) -> String {
        x.to_string()
    }

    /// The GPU backend's ops end to end (what the executor calls), against the CPU backend.
    /// The backend's device memory through the memory pool: a resident corpus is the pool's (its bytes
    /// in use), given back when the handle goes; a corpus over the pool's VRAM budget is a typed
    /// out-of-memory before the driver is asked (a failed request, no new allocation), and the same call
    /// works again once the budget allows it.
    fn pool_cases(gpu: &GpuBackend, diffs: &mut Vec<KernelDiff>) -> Result<(), String> {
        let cpu = crate::backend::CpuBackend;
        let mut rng = SplitMix::new(0x5EED_0006);
        let (nq, n, dim, kk) = (4, 20_000, 64, 10);
        let queries = awkward_matrix(&mut rng, nq, dim);
        let corpus = awkward_matrix(&mut rng, n, dim);
        let bytes = corpus.len() * 4;
        let a = cpu
            .knn(&queries, &corpus, dim, Metric::Cosine, kk)
            .map_err(e)?;
        gpu.trim().map_err(e)?;
        let base = gpu.memory_stats();
        let shared = crate::shared_corpus::SharedCorpus::new(corpus.clone(), dim).map_err(e)?;
        let c = gpu
            .knn_shared(&queries, &shared, Metric::Cosine, kk)
            .map_err(e)?;
        compare_topk(diff_of(diffs, "knn resident (pool)"), &a, &c);
        let held = gpu.memory_stats();
        if held.in_use_bytes < base.in_use_bytes + bytes {
            return Err(format!(
                "a resident corpus of {bytes} bytes is not in the memory pool: {held:?}"
            ));
        }
        drop(shared);
        gpu.trim().map_err(e)?;
        let after = gpu.memory_stats();
        if after.in_use_bytes > base.in_use_bytes || after.cached_bytes != 0 {
            return Err(format!(
                "a dropped resident corpus still holds pool memory: before {base:?}, after {after:?}"
            ));
        }
        // Over the budget: typed, before the driver.
        let budget = after.budget_bytes;
        gpu.set_vram_budget(bytes / 2);
        let shared = crate::shared_corpus::SharedCorpus::new(corpus.clone(), dim).map_err(e)?;
        let r = gpu.knn_shared(&queries, &shared, Metric::Cosine, kk);
        let over = gpu.memory_stats();
        gpu.set_vram_budget(budget);
        match r {
            Err(crate::BackendError::OutOfMemory(msg)) if msg.contains("pool budget") => {}
            other => {
                return Err(format!(
                    "a corpus over the pool's VRAM budget gave {other:?}, not a pool-budget out-of-memory"
                ));
            }
        }
        if over.failed_requests <= after.failed_requests || over.misses != after.misses {
            return Err(format!(
                "the over-budget request reached the driver or was not counted: before {after:?}, after {over:?}"
            ));
        }
        let c = gpu
            .knn_shared(&queries, &shared, Metric::Cosine, kk)
            .map_err(e)?;
        compare_topk(diff_of(diffs, "knn resident (pool)"), &a, &c);
        // A tenant's per-call buffers count against its quota in the pool: a slice call whose corpus
        // upload is over the quota is a tenant out-of-memory; within it the call runs and gives it back.
        let tenant = |quota: u64| {
            crate::tenant::ContextGuard::enter(Some(crate::tenant::TenantContext {
                id: crate::tenant::TenantId(6),
                vram_quota: Some(quota),
            }))
        };
        {
            let _t = tenant((bytes / 2) as u64);
            match gpu.knn(&queries, &corpus, dim, Metric::Cosine, kk) {
                Err(crate::BackendError::OutOfMemory(msg)) if msg.contains("tenant 7 quota") => {}
                other => {
                    return Err(format!(
                        "a call over its tenant's quota gave {other:?}, not a tenant out-of-memory"
                    ));
                }
            }
        }
        {
            let _t = tenant((bytes * 4) as u64);
            let c = gpu
                .knn(&queries, &corpus, dim, Metric::Cosine, kk)
                .map_err(e)?;
            compare_topk(diff_of(diffs, "knn resident (pool)"), &a, &c);
        }
        let t = gpu
            .memory()
            .device_pool()
            .tenant_stats(recall_memory_pool::TenantId(7));
        if t.in_use_bytes != 0 || t.failed_requests == 0 {
            return Err(format!(
                "the tenant's per-call buffers were not counted and given back: {t:?}"
            ));
        }
        Ok(())
    }

    fn backend_cases(
        gpu: &GpuBackend,
        diffs: &mut Vec<KernelDiff>,
        quick: bool,
    ) -> Result<(), String> {
        let cpu = crate::backend::CpuBackend;
        let mut rng = SplitMix::new(0x5EED_0002);
        let shapes: &[(usize, usize, usize, usize)] = if quick {
            &[(1, 3000, 33, 10), (12, 2000, 96, 5)]
        } else {
            &[
                (1, 100_000, 768, 10),
                (3, 50_000, 128, 1000),
                (40, 30_000, 64, 100),
                (1, 1000, 3, 1000),
            ]
        };
        for &(nq, n, dim, kk) in shapes {
            let queries = awkward_matrix(&mut rng, nq, dim);
            let corpus = awkward_matrix(&mut rng, n, dim);
            for (metric, _, _) in METRICS {
                let a = cpu.knn(&queries, &corpus, dim, metric, kk).map_err(e)?;
                let b = gpu.knn(&queries, &corpus, dim, metric, kk).map_err(e)?;
                compare_topk(diff_of(diffs, "backend knn"), &a, &b);
                // The same through a shared corpus: uploaded on the first call, resident for the second.
                let shared =
                    crate::shared_corpus::SharedCorpus::new(corpus.clone(), dim).map_err(e)?;
                for _ in 0..2 {
                    let c = gpu.knn_shared(&queries, &shared, metric, kk).map_err(e)?;
                    compare_topk(diff_of(diffs, "knn resident"), &a, &c);
                }
                if gpu.resident_corpora() == 0 {
                    return Err("a live shared corpus is not resident on the GPU".into());
                }
                drop(shared);
                if gpu.resident_corpora() != 0 {
                    return Err("a dropped shared corpus is still resident on the GPU".into());
                }
                let (offsets, ids) = candidate_lists(&mut rng, nq, n, kk, 3000);
                let a = cpu
                    .score_candidates(&queries, &corpus, dim, metric, &offsets, &ids, kk)
                    .map_err(e)?;
                let b = gpu
                    .score_candidates(&queries, &corpus, dim, metric, &offsets, &ids, kk)
                    .map_err(e)?;
                compare_topk(diff_of(diffs, "backend candidates"), &a, &b);
                // Candidates against the shared corpus (resident on the GPU).
                let shared =
                    crate::shared_corpus::SharedCorpus::new(corpus.clone(), dim).map_err(e)?;
                let c = gpu
                    .score_candidates_shared(&queries, &shared, metric, &offsets, &ids, kk)
                    .map_err(e)?;
                compare_topk(diff_of(diffs, "candidates resident"), &a, &c);
                // Calls at once against the handle, more than the backend has lanes (candidate scoring
                // runs on a lane outside the backend's lock where it can), with knn calls under the lock
                // between them: every answer is still the CPU's.
                let knn_a = cpu.knn(&queries, &corpus, dim, metric, kk).map_err(e)?;
                let answers: Vec<Result<(bool, TopK), String>> = std::thread::scope(|sc| {
                    let handles: Vec<_> = (0..10)
                        .map(|i| {
                            let (shared, queries, offsets, ids) =
                                (&shared, &queries, &offsets, &ids);
                            sc.spawn(move || {
                                if i % 5 == 4 {
                                    gpu.knn_shared(queries, shared, metric, kk)
                                        .map(|t| (false, t))
                                        .map_err(e)
                                } else {
                                    gpu.score_candidates_shared(
                                        queries, shared, metric, offsets, ids, kk,
                                    )
                                    .map(|t| (true, t))
                                    .map_err(e)
                                }
                            })
                        })
                        .collect();
                    handles
                        .into_iter()
                        .map(|h| {
                            h.join()
                                .unwrap_or_else(|_| Err("a calling thread panicked".into()))
                        })
                        .collect()
                });
                for answer in answers {
                    let (cand, got) = answer?;
                    if cand {
                        compare_topk(diff_of(diffs, "candidates concurrent calls"), &a, &got);
                    } else {
                        compare_topk(diff_of(diffs, "knn concurrent calls"), &knn_a, &got);
                    }
                }
                drop(shared);
                // Out of core: the corpus streamed in uneven chunks (the last one short), then the
                // automatic path with the budget shrunk below the corpus.
                let a = cpu.knn(&queries, &corpus, dim, metric, kk).map_err(e)?;
                for chunk in [n / 3 + 1, n.div_ceil(7).max(kk.min(n))] {
                    let s = gpu
                        .knn_streamed(&queries, &corpus, dim, metric, kk, chunk)
                        .map_err(e)?;
                    compare_topk(diff_of(diffs, "knn streamed"), &a, &s);
                }
                let budget = gpu.corpus_budget();
                gpu.set_corpus_budget(corpus.len() * 2);
                let shared =
                    crate::shared_corpus::SharedCorpus::new(corpus.clone(), dim).map_err(e)?;
                let auto = gpu.knn_shared(&queries, &shared, metric, kk);
                // Fast mode over the budget streams the exact answer too, for a slice and for a handle.
                let fast = gpu.knn_fast(&queries, &corpus, dim, metric, kk, FastFormat::Bf16);
                let fast_shared =
                    gpu.knn_shared_fast(&queries, &shared, metric, kk, FastFormat::Bf16);
                gpu.set_corpus_budget(budget);
                compare_topk(diff_of(diffs, "knn streamed"), &a, &auto.map_err(e)?);
                compare_topk(diff_of(diffs, "knn fast streamed"), &a, &fast.map_err(e)?);
                compare_topk(
                    diff_of(diffs, "knn fast streamed"),
                    &a,
                    &fast_shared.map_err(e)?,
                );
                // Through the handle: page-locked once, chunks DMA'd from it on a copy stream (or staged
                // if page-locking failed), in uneven chunks; then a shard of it (rows at an offset of the
                // shared, already registered memory) against the CPU on the same rows.
                for chunk in [n / 3 + 1, n.div_ceil(7).max(kk.min(n))] {
                    let s = gpu
                        .knn_streamed_shared(&queries, &shared, metric, kk, chunk)
                        .map_err(e)?;
                    compare_topk(diff_of(diffs, "knn streamed registered"), &a, &s);
                }
                let (r0, r1) = (n / 5, n - n / 7);
                if r1 - r0 >= kk
                    && let Some(part) = shared.shard(r0..r1)
                {
                    let a = cpu
                        .knn(&queries, &corpus[r0 * dim..r1 * dim], dim, metric, kk)
                        .map_err(e)?;
                    let s = gpu
                        .knn_streamed_shared(&queries, &part, metric, kk, (r1 - r0) / 3 + 1)
                        .map_err(e)?;
                    compare_topk(diff_of(diffs, "knn streamed registered"), &a, &s);
                }
                if gpu.resident_corpora() != 0 {
                    return Err("a corpus over the budget was made resident".into());
                }
            }
        }
        Ok(())
    }
}

#[cfg(feature = "gpu")]
pub use run_gpu::run;

/// `"i/n"` with `0 <= i < n`: run every n-th case from the i-th.
pub fn parse_part(v: &str) -> Option<(usize, usize)> {
    let (i, n) = v.split_once('/')?;
    let (i, n) = (
        i.trim().parse::<usize>().ok()?,
        n.trim().parse::<usize>().ok()?,
    );
    (i < n).then_some((i, n))
}

/// The suite's groups, in the order they run: kernels through their launchers (`kernels` .. `cand`), then
/// the GPU backend's own paths (`backend` .. `kmeans`).
pub const GROUPS: &[&str] = &[
    "kernels",
    "fast",
    "fused-fast",
    "knn1",
    "scan1",
    "cand",
    "backend",
    "pool",
    "noise",
    "graph",
    "graph-handle",
    "graph-frontier",
    "kmeans",
];

#[cfg(test)]
mod tests {
    use super::*;

    /// `--group` names what runs: every group of the tables is in `GROUPS`, in the same order, once.
    #[cfg(feature = "gpu")]
    #[test]
    fn the_group_names_are_the_groups_that_run() {
        let names: Vec<&str> = run_gpu::KERNEL_GROUPS
            .iter()
            .map(|(g, _)| *g)
            .chain(run_gpu::BACKEND_GROUPS.iter().map(|(g, _)| *g))
            .collect();
        assert_eq!(names, GROUPS);
    }

    #[test]
    fn parts_parse_only_when_the_index_is_below_the_count() {
        assert_eq!(parse_part("0/1"), Some((0, 1)));
        assert_eq!(parse_part(" 2 / 4 "), Some((2, 4)));
        assert_eq!(parse_part("4/4"), None);
        assert_eq!(parse_part("0/0"), None);
        assert_eq!(parse_part("1"), None);
        assert_eq!(parse_part("-1/2"), None);
        assert_eq!(parse_part("a/b"), None);
    }

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
            kernel: "k".into(),
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
    fn csr_by_source_is_the_stable_sort_by_source() {
        let mut rng = SplitMix::new(5);
        for (n, m) in [(1, 0), (1, 5), (7, 40), (100, 3_000)] {
            // Few distinct sources, so rows hold parallel edges whose order must be kept.
            let list: Vec<(u32, u32, f32)> = (0..m)
                .map(|i| {
                    (
                        rng.below(n as u64) as u32,
                        rng.below(n as u64) as u32,
                        i as f32,
                    )
                })
                .collect();
            let mut sorted = list.clone();
            sorted.sort_by_key(|e| e.0);
            let (indptr, indices, weights) = csr_by_source(n, &list);
            assert_eq!(indices, sorted.iter().map(|e| e.1).collect::<Vec<_>>());
            assert_eq!(weights, sorted.iter().map(|e| e.2).collect::<Vec<_>>());
            assert_eq!((indptr[0], indptr[n]), (0, m));
            for u in 0..n {
                let row = &sorted[indptr[u]..indptr[u + 1]];
                assert!(row.iter().all(|e| e.0 as usize == u), "n = {n}, row {u}");
            }
        }
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
