//! `recall bench sweep`: every op over a ladder of sizes on the CPU and the GPU (skipped, with the reason,
//! when there is none), and through PyTorch/CuPy (benches/peers/peers.py) when they are installed, in the
//! same run. Finds each op's break-even size (the smallest size where the GPU beats the CPU, interpolated)
//! and writes a report directory: `report.md` and SVG plots (time against size, speedup, achieved bandwidth
//! against the bandwidth this run measured).

use crate::bench::serde_free::Json;
use crate::svg::{Plot, Series};
use crate::util::{COMMIT, cpu_model, grouped, threads, utc_date};
use recall::diagnostics::bench::{median, random_matrix};
use recall::diagnostics::{SplitMix, power_law_graph};
use recall::{DevicePolicy, Engine, GpuStatus, Metric, SpreadParams};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

// The shapes of the calls swept: the ones the executor's calibration probes (so the break-even sizes this
// report shows and the calibrated ones are for the same calls; `recall bench break-even` compares them).
use recall::executor::calibration::probe_shape::{
    DECAY, DIM, EDGES_PER_NODE, HOPS, K, KM_CLUSTERS, KM_DIM, QUERIES, SEED_EVERY, THRESHOLD,
};

/// The smallest size swept: above `K`, so that every op has more rows (nodes, points) than it selects, as
/// the peers' `argpartition` needs.
const MIN_SIZE: usize = 16;

/// The sizes swept by default and with `--quick`.
pub const DEFAULT_SIZES: [usize; 5] = [1_000, 4_000, 16_000, 64_000, 256_000];
pub const QUICK_SIZES: [usize; 3] = [256, 1_024, 4_096];

/// What `recall bench sweep` was asked to do.
#[derive(Debug, Clone)]
pub struct SweepArgs {
    pub quick: bool,
    /// Overrides the size ladder.
    pub sizes: Option<Vec<usize>>,
    /// Ops to sweep (all when `None`).
    pub ops: Option<Vec<SweepOp>>,
    /// The report directory.
    pub out: PathBuf,
    /// Timed repetitions per case (the median is reported).
    pub iters: usize,
    pub peer_script: String,
    pub no_peer: bool,
    /// The command line, for the report.
    pub command: String,
}

/// The ops a sweep covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SweepOp {
    Similarity,
    Knn,
    ScoreCandidates,
    Spread,
    Kmeans,
    ClipAndNoise,
}

impl SweepOp {
    pub const ALL: [SweepOp; 6] = [
        SweepOp::Similarity,
        SweepOp::Knn,
        SweepOp::ScoreCandidates,
        SweepOp::Spread,
        SweepOp::Kmeans,
        SweepOp::ClipAndNoise,
    ];

    pub fn name(self) -> &'static str {
        match self {
            SweepOp::Similarity => "similarity",
            SweepOp::Knn => "knn",
            SweepOp::ScoreCandidates => "score_candidates",
            SweepOp::Spread => "spread",
            SweepOp::Kmeans => "kmeans",
            SweepOp::ClipAndNoise => "clip_and_noise",
        }
    }

    pub fn from_name(s: &str) -> Option<SweepOp> {
        SweepOp::ALL.into_iter().find(|o| o.name() == s.trim())
    }

    /// What the size counts.
    fn size_label(self) -> &'static str {
        match self {
            SweepOp::Spread => "nodes",
            SweepOp::Kmeans => "points",
            SweepOp::ClipAndNoise => "rows",
            _ => "corpus rows",
        }
    }

    /// The shape of one call, in words.
    fn shape(self) -> String {
        match self {
            SweepOp::Similarity => {
                format!("{QUERIES} queries x N rows x {DIM} dims, cosine, all scores")
            }
            SweepOp::Knn => format!("{QUERIES} queries x N rows x {DIM} dims, cosine, top-{K}"),
            SweepOp::ScoreCandidates => format!(
                "{QUERIES} queries x {DIM} dims, N/4 candidates each (at least {K}) from N rows, dot, top-{K}"
            ),
            SweepOp::Spread => format!(
                "N nodes, {EDGES_PER_NODE}N edges (power law), {HOPS} hops, decay {DECAY}, threshold {THRESHOLD}, top-{K}"
            ),
            SweepOp::Kmeans => {
                format!("N points x {KM_DIM} dims, {KM_CLUSTERS} clusters, one Lloyd iteration")
            }
            SweepOp::ClipAndNoise => format!("N rows x {DIM} dims, clip 1.0, sigma 0.1"),
        }
    }

    fn candidates(size: usize) -> usize {
        (size / 4).max(K).min(size)
    }

    /// The call's work in the op's unit (what break-even sizes are compared in), and the unit's name.
    fn work(self, size: usize) -> (f64, &'static str) {
        let n = size as f64;
        match self {
            SweepOp::Similarity | SweepOp::Knn => ((QUERIES * DIM) as f64 * n, "multiply-adds"),
            SweepOp::ScoreCandidates => (
                (QUERIES * DIM * SweepOp::candidates(size)) as f64,
                "multiply-adds",
            ),
            SweepOp::Spread => ((EDGES_PER_NODE * HOPS) as f64 * n, "edge visits"),
            SweepOp::Kmeans => ((KM_DIM * KM_CLUSTERS.min(size)) as f64 * n, "multiply-adds"),
            SweepOp::ClipAndNoise => (DIM as f64 * n, "values"),
        }
    }

    /// The fewest bytes a call must read and write (inputs once, outputs once).
    fn min_bytes(self, size: usize) -> f64 {
        let n = size as f64;
        let (q, d) = (QUERIES as f64, DIM as f64);
        match self {
            SweepOp::Similarity => 4.0 * (q * d + n * d + q * n),
            SweepOp::Knn => 4.0 * (q * d + n * d) + 8.0 * q * K as f64,
            SweepOp::ScoreCandidates => {
                let c = SweepOp::candidates(size) as f64;
                4.0 * (q * d + q * c * d + q * c) + 8.0 * q * K as f64
            }
            SweepOp::Spread => {
                let e = EDGES_PER_NODE as f64 * n;
                HOPS as f64 * (8.0 * e + 8.0 * n) + 8.0 * n
            }
            SweepOp::Kmeans => 4.0 * (n * KM_DIM as f64 + (KM_CLUSTERS * KM_DIM) as f64 + n),
            SweepOp::ClipAndNoise => 8.0 * n * d,
        }
    }
}

/// One timed case.
#[derive(Debug, Clone)]
pub struct Measurement {
    pub op: SweepOp,
    pub size: usize,
    /// `cpu`, `gpu`, `gpu, resident` or the peer's name.
    pub device: String,
    pub ms: f64,
    pub note: String,
}

/// Where the GPU first beats the CPU.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BreakEven {
    /// Already faster at the smallest size measured.
    Below(f64),
    /// Interpolated between two measured sizes.
    At(f64),
    /// Slower at every size measured, up to this one.
    NotReached(f64),
    /// Too few measurements.
    Unknown,
}

/// The smallest size where `other` beats `cpu`: `points` are (size, cpu ms, other ms). Between the last size
/// where it lost and the first where it won, the crossing is interpolated on log(time ratio) against
/// log(size).
pub fn break_even(points: &[(f64, f64, f64)]) -> BreakEven {
    let mut pts: Vec<(f64, f64)> = points
        .iter()
        .filter(|(s, c, o)| *s > 0.0 && *c > 0.0 && *o > 0.0 && c.is_finite() && o.is_finite())
        .map(|&(s, c, o)| (s, (o / c).ln()))
        .collect();
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    let Some(first) = pts.first() else {
        return BreakEven::Unknown;
    };
    if first.1 < 0.0 {
        return BreakEven::Below(first.0);
    }
    for w in pts.windows(2) {
        let ((s0, r0), (s1, r1)) = (w[0], w[1]);
        if r1 < 0.0 {
            let t = r0 / (r0 - r1);
            return BreakEven::At((s0.ln() + t * (s1.ln() - s0.ln())).exp());
        }
    }
    BreakEven::NotReached(pts[pts.len() - 1].0)
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn topk_bits(ids: &[u32], scores: &[f32]) -> Vec<u32> {
    ids.iter()
        .copied()
        .chain(scores.iter().map(|s| s.to_bits()))
        .collect()
}

/// Median ms of `iters` calls after one warm-up call, and the warm-up's answer (as bits, for comparing
/// devices) and note.
fn time_ms(
    iters: usize,
    mut call: impl FnMut() -> Result<(Vec<u32>, String), String>,
) -> Result<(f64, Vec<u32>, String), String> {
    let (answer, note) = call()?;
    let mut times = Vec::with_capacity(iters);
    for _ in 0..iters.max(1) {
        let t = Instant::now();
        call()?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    Ok((median(times), answer, note))
}

/// The note for an answer: where it ran, if not where it was sent.
fn device_note(device: recall::Device, fallback: &Option<String>) -> String {
    match fallback {
        Some(why) => format!("fell back to {device}: {why}"),
        None => String::new(),
    }
}

/// The data of one op at one size.
enum Case {
    Dense {
        queries: Vec<f32>,
        corpus: Vec<f32>,
    },
    Candidates {
        queries: Vec<f32>,
        corpus: Vec<f32>,
        offsets: Vec<usize>,
        ids: Vec<u32>,
    },
    Graph {
        indptr: Vec<usize>,
        indices: Vec<u32>,
        weights: Vec<f32>,
        seeds: Vec<f32>,
    },
    Points(Vec<f32>),
}

fn make_case(op: SweepOp, size: usize) -> Case {
    match op {
        SweepOp::Similarity | SweepOp::Knn => Case::Dense {
            queries: random_matrix(2, QUERIES, DIM),
            corpus: random_matrix(1, size, DIM),
        },
        SweepOp::ScoreCandidates => {
            let c = SweepOp::candidates(size);
            let stride = size / c;
            let mut offsets = vec![0];
            let mut ids = Vec::with_capacity(QUERIES * c);
            for q in 0..QUERIES {
                // Distinct ids, spread over the corpus: j * stride + an offset below the stride.
                ids.extend((0..c).map(|j| (j * stride + q % stride) as u32));
                offsets.push(ids.len());
            }
            Case::Candidates {
                queries: random_matrix(2, QUERIES, DIM),
                corpus: random_matrix(1, size, DIM),
                offsets,
                ids,
            }
        }
        SweepOp::Spread => {
            let mut rng = SplitMix::new(11);
            let (indptr, indices, weights) =
                power_law_graph(&mut rng, size, EDGES_PER_NODE * size, 0, 0);
            let mut seeds = vec![0.0f32; size];
            for _ in 0..(size / SEED_EVERY).max(1) {
                seeds[rng.below(size as u64) as usize] = 1.0;
            }
            Case::Graph {
                indptr,
                indices,
                weights,
                seeds,
            }
        }
        SweepOp::Kmeans => Case::Points(random_matrix(3, size, KM_DIM)),
        SweepOp::ClipAndNoise => Case::Points(random_matrix(5, size, DIM)),
    }
}

fn spread_params(size: usize) -> SpreadParams {
    SpreadParams {
        decay: DECAY,
        threshold: THRESHOLD,
        hops: HOPS,
        k: K.min(size),
    }
}

/// Run `op` on `engine`: (answer bits, note). `resident` uses a corpus or graph handle made once.
fn run_on(
    engine: &Engine,
    op: SweepOp,
    size: usize,
    case: &Case,
    iters: usize,
    resident: bool,
) -> Result<(f64, Vec<u32>, String), String> {
    let e = |x: recall::Error| x.to_string();
    match (op, case) {
        (SweepOp::Similarity, Case::Dense { queries, corpus }) => time_ms(iters, || {
            let s = engine
                .similarity(queries, corpus, DIM, Metric::Cosine)
                .map_err(e)?;
            Ok((bits(&s.values), device_note(s.device, &s.fallback)))
        }),
        (SweepOp::Knn, Case::Dense { queries, corpus }) if resident => {
            let handle = engine.corpus(corpus.clone(), DIM).map_err(e)?;
            time_ms(iters, || {
                let h = engine
                    .knn_in(queries, &handle, Metric::Cosine, K)
                    .map_err(e)?;
                Ok((
                    topk_bits(&h.ids, &h.scores),
                    device_note(h.device, &h.fallback),
                ))
            })
        }
        (SweepOp::Knn, Case::Dense { queries, corpus }) => time_ms(iters, || {
            let h = engine
                .knn(queries, corpus, DIM, Metric::Cosine, K)
                .map_err(e)?;
            Ok((
                topk_bits(&h.ids, &h.scores),
                device_note(h.device, &h.fallback),
            ))
        }),
        (
            SweepOp::ScoreCandidates,
            Case::Candidates {
                queries,
                corpus,
                offsets,
                ids,
            },
        ) => time_ms(iters, || {
            let h = engine
                .score_candidates(queries, corpus, DIM, Metric::Dot, offsets, ids, K)
                .map_err(e)?;
            Ok((
                topk_bits(&h.ids, &h.scores),
                device_note(h.device, &h.fallback),
            ))
        }),
        (
            SweepOp::Spread,
            Case::Graph {
                indptr,
                indices,
                weights,
                seeds,
            },
        ) => {
            let params = spread_params(size);
            if resident {
                let handle = engine.graph(indptr, indices, weights).map_err(e)?;
                time_ms(iters, || {
                    let a = engine.spread_in(&handle, seeds, &params).map_err(e)?;
                    Ok((bits(&a.activation), device_note(a.device, &a.fallback)))
                })
            } else {
                // The plain path: the graph is validated and transposed once (as `Engine::spread` callers do),
                // and a GPU uploads it in every call.
                let g = recall::SpreadGraph::from_csr(indptr, indices, weights)
                    .map_err(|x| x.to_string())?;
                time_ms(iters, || {
                    let a = engine.spread(&g, seeds, &params).map_err(e)?;
                    Ok((bits(&a.activation), device_note(a.device, &a.fallback)))
                })
            }
        }
        (SweepOp::Kmeans, Case::Points(points)) => time_ms(iters, || {
            let c = engine
                .kmeans(points, KM_DIM, KM_CLUSTERS.min(size), 1, 42)
                .map_err(e)?;
            Ok((bits(&c.centroids), device_note(c.device, &c.fallback)))
        }),
        (SweepOp::ClipAndNoise, Case::Points(x)) => time_ms(iters, || {
            let n = engine.clip_and_noise(x, DIM, 1.0, 0.1, 1).map_err(e)?;
            Ok((bits(&n.values), device_note(n.device, &n.fallback)))
        }),
        _ => Err(format!("internal: no data for {}", op.name())),
    }
}

/// Host memory copy bandwidth (bytes read + written per second), all cores, median of five.
fn cpu_copy_gbps(bytes: usize) -> f64 {
    let n = (bytes / 4).max(1);
    let src = vec![1.0f32; n];
    let mut dst = vec![0.0f32; n];
    let parts = threads().max(1);
    let chunk = n.div_ceil(parts);
    let mut copy = || {
        std::thread::scope(|s| {
            for (d, c) in dst.chunks_mut(chunk).zip(src.chunks(chunk)) {
                s.spawn(move || d.copy_from_slice(c));
            }
        });
    };
    copy();
    let mut times = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        copy();
        times.push(t.elapsed().as_secs_f64());
    }
    std::hint::black_box(&dst);
    2.0 * (n * 4) as f64 / median(times) / 1e9
}

/// The peer: `Ok(name)` when PyTorch (and CUDA) answered a probe, `Err(why not)` otherwise.
fn probe_peer(a: &SweepArgs) -> Result<String, String> {
    if a.no_peer {
        return Err("--no-peer".into());
    }
    let j = call_peer(a, &["copy", "--copy-bytes", "1048576", "--iters", "1"])?;
    if j.str("available").as_deref() == Some("false") {
        return Err(j.str("reason").unwrap_or_else(|| "unavailable".into()));
    }
    Ok(j.str("peer").unwrap_or_else(|| "peer".into()))
}

fn call_peer(a: &SweepArgs, args: &[&str]) -> Result<Json, String> {
    if !Path::new(&a.peer_script).exists() {
        return Err(format!("{} not found", a.peer_script));
    }
    let out = Command::new("python3")
        .arg(&a.peer_script)
        .args(args)
        .output()
        .map_err(|e| format!("python3: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().last().unwrap_or("").to_string();
    if !out.status.success() || line.is_empty() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!(
            "peer script failed: {}",
            err.lines().last().unwrap_or("no output").trim()
        ));
    }
    Ok(Json(line))
}

/// The peer's median ms for `op` at `size`, with the expression it timed.
fn peer_ms(
    a: &SweepArgs,
    op: SweepOp,
    size: usize,
    case: &Case,
    iters: usize,
    cosine_cache: &mut BTreeMap<usize, Result<Json, String>>,
) -> Option<Result<(f64, String), String>> {
    let it = iters.to_string();
    let rows = size.to_string();
    let common = ["--iters", it.as_str(), "--copy-bytes", "16777216"];
    let pick = |j: &Json, ms: &str, expr: &str| -> Result<(f64, String), String> {
        if j.str("available").as_deref() == Some("false") {
            return Err(j.str("reason").unwrap_or_default());
        }
        let t = j.num(ms).ok_or(format!("the peer gave no {ms}"))?;
        Ok((t, j.str(expr).unwrap_or_default()))
    };
    match op {
        SweepOp::Similarity | SweepOp::Knn => {
            let j = cosine_cache.entry(size).or_insert_with(|| {
                let q = QUERIES.to_string();
                let d = DIM.to_string();
                let k = K.to_string();
                let mut args = vec!["cosine", "--rows", &rows, "--dim", &d, "--queries", &q];
                args.extend(["--k", &k]);
                args.extend(common);
                call_peer(a, &args)
            });
            Some(match (j, op) {
                (Ok(j), SweepOp::Similarity) => pick(j, "similarity_ms", "similarity_expr"),
                (Ok(j), _) => pick(j, "topk_ms", "topk_expr"),
                (Err(e), _) => Err(e.clone()),
            })
        }
        SweepOp::Kmeans => {
            let (d, c) = (KM_DIM.to_string(), KM_CLUSTERS.min(size).to_string());
            let mut args = vec!["kmeans", "--rows", &rows, "--dim", &d, "--clusters", &c];
            args.extend(common);
            Some(call_peer(a, &args).and_then(|j| pick(&j, "kmeans_ms", "kmeans_expr")))
        }
        SweepOp::ClipAndNoise => {
            let d = DIM.to_string();
            let mut args = vec!["noise", "--rows", &rows, "--dim", &d];
            args.extend(common);
            Some(call_peer(a, &args).and_then(|j| pick(&j, "noise_ms", "noise_expr")))
        }
        SweepOp::Spread => {
            let Case::Graph {
                indptr,
                indices,
                weights,
                seeds,
            } = case
            else {
                return None;
            };
            Some(peer_spread(
                a, size, indptr, indices, weights, seeds, &common,
            ))
        }
        SweepOp::ScoreCandidates => None,
    }
}

/// The peer's spreading over the same graph, handed over as .npy files in pull order.
fn peer_spread(
    a: &SweepArgs,
    size: usize,
    indptr: &[usize],
    indices: &[u32],
    weights: &[f32],
    seeds: &[f32],
    common: &[&str],
) -> Result<(f64, String), String> {
    let graph =
        recall::SpreadGraph::from_csr(indptr, indices, weights).map_err(|e| e.to_string())?;
    let dir = a.out.join(format!("peer-graph-{size}"));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let (ptr, src, w) = graph.pull_arrays();
    let ptr64: Vec<u64> = ptr.iter().map(|&p| p as u64).collect();
    let io = |e: recall::io::IoError| e.to_string();
    recall::io::write_npy(dir.join("in_ptr.npy"), &ptr64, &[ptr64.len()]).map_err(io)?;
    recall::io::write_npy(dir.join("in_src.npy"), src, &[src.len()]).map_err(io)?;
    recall::io::write_npy(dir.join("in_w.npy"), w, &[w.len()]).map_err(io)?;
    recall::io::write_npy(dir.join("seeds.npy"), seeds, &[seeds.len()]).map_err(io)?;
    let (h, dc, th, k) = (
        HOPS.to_string(),
        DECAY.to_string(),
        THRESHOLD.to_string(),
        K.min(size).to_string(),
    );
    let d = dir.display().to_string();
    let mut args = vec!["spread", "--graph-dir", &d, "--hops", &h, "--decay", &dc];
    args.extend(["--threshold", &th, "--k", &k]);
    args.extend(common);
    let r = call_peer(a, &args);
    let _ = std::fs::remove_dir_all(&dir);
    let j = r?;
    if j.str("available").as_deref() == Some("false") {
        return Err(j.str("reason").unwrap_or_default());
    }
    let t = j.num("spread_ms").ok_or("the peer gave no spread_ms")?;
    Ok((t, j.str("spread_expr").unwrap_or_default()))
}

/// Everything the report needs.
struct Sweep {
    sizes: Vec<usize>,
    ops: Vec<SweepOp>,
    results: Vec<Measurement>,
    cpu_gbps: f64,
    gpu_copy_gbps: Option<f64>,
    gpu_upload_gbps: Option<f64>,
    gpu_line: String,
    peer_line: String,
    iters: usize,
}

pub fn run(a: SweepArgs) -> Result<ExitCode, String> {
    let sizes = match &a.sizes {
        Some(s) => s.clone(),
        None if a.quick => QUICK_SIZES.to_vec(),
        None => DEFAULT_SIZES.to_vec(),
    };
    if sizes.is_empty() || sizes.iter().any(|&n| n < MIN_SIZE) {
        return Err(format!(
            "--sizes: give at least one size, each at least {MIN_SIZE}"
        ));
    }
    let ops = a.ops.clone().unwrap_or_else(|| SweepOp::ALL.to_vec());
    let iters = if a.quick {
        a.iters.clamp(1, 3)
    } else {
        a.iters.max(1)
    };
    std::fs::create_dir_all(&a.out).map_err(|e| format!("{}: {e}", a.out.display()))?;

    let cpu = Engine::builder()
        .device(DevicePolicy::Cpu)
        .build()
        .map_err(|e| e.to_string())?;
    let gpu = match Engine::builder()
        .device(DevicePolicy::Gpu)
        .gpu_min_work(0)
        .build()
    {
        Ok(engine) => Ok(engine),
        Err(recall::Error::GpuRequired(why)) => Err(why),
        Err(e) => return Err(e.to_string()),
    };
    let mut sweep = Sweep {
        sizes: sizes.clone(),
        ops: ops.clone(),
        results: Vec::new(),
        cpu_gbps: cpu_copy_gbps(if a.quick { 32 << 20 } else { 256 << 20 }),
        gpu_copy_gbps: None,
        gpu_upload_gbps: None,
        gpu_line: String::new(),
        peer_line: String::new(),
        iters,
    };
    match &gpu {
        Ok(engine) => {
            if let (Some(backend), GpuStatus::Ready(d)) =
                (engine.gpu_backend(), engine.gpu_status())
            {
                sweep.gpu_line = format!(
                    "{} ({}, {} SMs), driver CUDA {}, kernels {}",
                    d.name, d.sm, d.sm_count, d.driver, d.image
                );
                let bytes = if a.quick { 64 << 20 } else { 512 << 20 };
                sweep.gpu_copy_gbps = Some(recall::diagnostics::bench::copy_gbps(
                    backend,
                    bytes,
                    iters.max(5),
                )?);
                sweep.gpu_upload_gbps = Some(recall::diagnostics::bench::upload_gbps(
                    backend,
                    bytes,
                    iters.max(5),
                )?);
            }
        }
        Err(why) => {
            eprintln!("recall bench sweep: GPU part skipped: {why}");
            sweep.gpu_line = format!("skipped: {why}");
        }
    }
    let peer = if gpu.is_ok() {
        probe_peer(&a)
    } else {
        Err("no GPU here (the peers run on CUDA)".into())
    };
    match &peer {
        Ok(name) => sweep.peer_line = name.clone(),
        Err(why) => {
            eprintln!("recall bench sweep: peers skipped: {why}");
            sweep.peer_line = format!("skipped: {why}");
        }
    }

    let mut cosine_cache = BTreeMap::new();
    let mut mismatches = 0usize;
    for &op in &ops {
        for &size in &sizes {
            eprintln!(
                "{} at {} {}",
                op.name(),
                grouped(size as u64),
                op.size_label()
            );
            let case = make_case(op, size);
            let (ms, cpu_answer, note) = run_on(&cpu, op, size, &case, iters, false)?;
            sweep.results.push(Measurement {
                op,
                size,
                device: "cpu".into(),
                ms,
                note,
            });
            if let Ok(engine) = &gpu {
                let resident = [false, true];
                for r in resident {
                    if r && !matches!(op, SweepOp::Knn | SweepOp::Spread) {
                        continue;
                    }
                    let (ms, answer, mut note) = run_on(engine, op, size, &case, iters, r)?;
                    if answer != cpu_answer {
                        mismatches += 1;
                        note = format!("DIFFERS from the CPU answer {note}")
                            .trim()
                            .to_string();
                    } else if note.is_empty() {
                        note = "bit-identical to the CPU".into();
                    }
                    sweep.results.push(Measurement {
                        op,
                        size,
                        device: if r { "gpu, resident" } else { "gpu" }.into(),
                        ms,
                        note,
                    });
                }
            }
            if let Ok(name) = &peer
                && let Some(r) = peer_ms(&a, op, size, &case, iters, &mut cosine_cache)
            {
                match r {
                    Ok((ms, expr)) => sweep.results.push(Measurement {
                        op,
                        size,
                        device: name.clone(),
                        ms,
                        note: format!("`{expr}`, data on the GPU"),
                    }),
                    Err(why) => eprintln!("peer {} at {size}: {why}", op.name()),
                }
            }
        }
    }
    let report = render_report(&sweep, &a.command);
    std::fs::write(a.out.join("report.md"), &report)
        .map_err(|e| format!("{}: {e}", a.out.join("report.md").display()))?;
    for (name, svg) in plots(&sweep) {
        let path = a.out.join(&name);
        std::fs::write(&path, svg).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    print!("{report}");
    eprintln!("report written to {}", a.out.join("report.md").display());
    Ok(if mismatches > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// The device measurements of `op`, grouped by device in first-seen order.
fn by_device(s: &Sweep, op: SweepOp) -> Vec<(String, Vec<&Measurement>)> {
    let mut out: Vec<(String, Vec<&Measurement>)> = Vec::new();
    for m in s.results.iter().filter(|m| m.op == op) {
        match out.iter_mut().find(|(d, _)| *d == m.device) {
            Some((_, v)) => v.push(m),
            None => out.push((m.device.clone(), vec![m])),
        }
    }
    out
}

/// The bandwidth a device's figures are compared with: host copy for the CPU, host-to-device copy for GPU
/// calls that upload their inputs, device copy for data already on the GPU.
fn limit_for(s: &Sweep, device: &str) -> Option<(&'static str, f64)> {
    match device {
        "cpu" => Some(("host copy", s.cpu_gbps)),
        "gpu" => s.gpu_upload_gbps.map(|g| ("host-to-device copy", g)),
        _ => s.gpu_copy_gbps.map(|g| ("device copy", g)),
    }
}

fn cpu_ms(s: &Sweep, op: SweepOp, size: usize) -> Option<f64> {
    s.results
        .iter()
        .find(|m| m.op == op && m.size == size && m.device == "cpu")
        .map(|m| m.ms)
}

fn fmt_ms(ms: f64) -> String {
    if ms < 1.0 {
        format!("{:.1} us", ms * 1e3)
    } else {
        format!("{ms:.2} ms")
    }
}

fn fmt_rate(per_s: f64) -> String {
    let units = [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")];
    for (scale, u) in units {
        if per_s >= scale {
            return format!("{:.2} {u}", per_s / scale);
        }
    }
    format!("{per_s:.1}")
}

fn render_report(s: &Sweep, command: &str) -> String {
    let mut r = String::new();
    let _ = writeln!(r, "# recall bench sweep\n");
    let _ = writeln!(r, "- date: {} (UTC)", utc_date());
    let _ = writeln!(
        r,
        "- host CPU: {} ({} threads), SIMD path {}",
        cpu_model(),
        threads(),
        recall::cpu_simd_level()
    );
    let _ = writeln!(r, "- GPU: {}", s.gpu_line);
    let _ = writeln!(r, "- peer: {}", s.peer_line);
    let _ = writeln!(r, "- recall commit: {COMMIT}");
    let _ = writeln!(r, "- command: `{command}`");
    let _ = writeln!(
        r,
        "- timing: median of {} calls after one warm-up call, host clock around whole `Engine` calls (`gpu`: \
         inputs uploaded with every call; `gpu, resident`: a corpus or graph handle, uploaded once); the peer \
         times its expression on data already on the GPU with CUDA events",
        s.iters
    );
    let _ = writeln!(
        r,
        "- achieved bandwidth: the fewest bytes a call must read and write, over its time, against the limit \
         this run measured for that device\n"
    );
    let _ = writeln!(r, "## Measured limits\n");
    let _ = writeln!(r, "| limit | GB/s (bytes read + written) |");
    let _ = writeln!(r, "|---|---|");
    let _ = writeln!(r, "| host copy, all cores | {:.1} |", s.cpu_gbps);
    if let Some(g) = s.gpu_copy_gbps {
        let _ = writeln!(r, "| GPU device copy | {g:.0} |");
    }
    if let Some(g) = s.gpu_upload_gbps {
        let _ = writeln!(r, "| host-to-device copy (bytes copied) | {g:.1} |");
    }
    let _ = writeln!(
        r,
        "\n## Break-even sizes (smallest size where the GPU beats the CPU)\n"
    );
    let _ = writeln!(r, "| op | device | break-even | in work units |");
    let _ = writeln!(r, "|---|---|---|---|");
    let mut any = false;
    for &op in &s.ops {
        for (device, ms) in by_device(s, op) {
            if !device.starts_with("gpu") {
                continue;
            }
            any = true;
            let pts: Vec<(f64, f64, f64)> = ms
                .iter()
                .filter_map(|m| cpu_ms(s, op, m.size).map(|c| (m.size as f64, c, m.ms)))
                .collect();
            let (text, work) = match break_even(&pts) {
                BreakEven::At(x) => (
                    format!("{} {}", grouped(x.round() as u64), op.size_label()),
                    Some(x),
                ),
                BreakEven::Below(x) => (
                    format!("below {} {}", grouped(x as u64), op.size_label()),
                    Some(x),
                ),
                BreakEven::NotReached(x) => (
                    format!(
                        "above {} {} (not reached)",
                        grouped(x as u64),
                        op.size_label()
                    ),
                    None,
                ),
                BreakEven::Unknown => ("unknown".into(), None),
            };
            let work = work
                .map(|x| {
                    let (w, unit) = op.work(x.round() as usize);
                    format!("{} {unit}", grouped(w.round() as u64))
                })
                .unwrap_or_default();
            let _ = writeln!(r, "| {} | {device} | {text} | {work} |", op.name());
        }
    }
    if !any {
        let _ = writeln!(r, "| all | gpu | not measured: {} | |", s.gpu_line);
    }
    let _ = writeln!(r, "\n## Results\n");
    let _ = writeln!(
        r,
        "| op | size | device | time | throughput | speedup vs CPU | achieved | of limit | note |"
    );
    let _ = writeln!(r, "|---|---|---|---|---|---|---|---|---|");
    for &op in &s.ops {
        for &size in &s.sizes {
            for m in s.results.iter().filter(|m| m.op == op && m.size == size) {
                let (work, unit) = op.work(size);
                let secs = m.ms * 1e-3;
                let gbps = op.min_bytes(size) / secs / 1e9;
                let speedup = cpu_ms(s, op, size)
                    .map(|c| format!("{:.2}x", c / m.ms))
                    .unwrap_or_default();
                let of_limit = limit_for(s, &m.device)
                    .map(|(name, l)| format!("{:.0} % of {name}", 100.0 * gbps / l))
                    .unwrap_or_default();
                let _ = writeln!(
                    r,
                    "| {} | {} {} | {} | {} | {} {unit}/s | {speedup} | {gbps:.2} GB/s | {of_limit} | {} |",
                    op.name(),
                    grouped(size as u64),
                    op.size_label(),
                    m.device,
                    fmt_ms(m.ms),
                    fmt_rate(work / secs),
                    m.note.replace('|', "\\|")
                );
            }
        }
    }
    let _ = writeln!(r, "\n## Shapes\n");
    for &op in &s.ops {
        let _ = writeln!(r, "- {}: {}", op.name(), op.shape());
    }
    let _ = writeln!(r, "\n## Plots\n");
    for &op in &s.ops {
        let n = op.name();
        let _ = writeln!(
            r,
            "### {n}\n\n![{n}: time against size]({n}-time.svg)\n![{n}: speedup over the CPU]({n}-speedup.svg)\n![{n}: achieved bandwidth against the measured limits]({n}-bandwidth.svg)\n"
        );
    }
    r
}

/// Every plot of the sweep: (file name, SVG).
fn plots(s: &Sweep) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for &op in &s.ops {
        let devices = by_device(s, op);
        let x_label = format!("{} ({})", op.size_label(), op.shape());
        let (lo, hi) = (
            s.sizes.iter().copied().min().unwrap_or(1) as f64,
            s.sizes.iter().copied().max().unwrap_or(1) as f64,
        );
        let time = Plot {
            title: format!("{}: time per call", op.name()),
            x_label: x_label.clone(),
            y_label: "ms".into(),
            series: devices
                .iter()
                .map(|(d, ms)| Series {
                    name: d.clone(),
                    points: ms.iter().map(|m| (m.size as f64, m.ms)).collect(),
                    dashed: false,
                })
                .collect(),
        };
        let mut speedup = Plot {
            title: format!("{}: speedup over the CPU", op.name()),
            x_label: x_label.clone(),
            y_label: "CPU time / device time".into(),
            series: devices
                .iter()
                .filter(|(d, _)| d != "cpu")
                .map(|(d, ms)| Series {
                    name: d.clone(),
                    points: ms
                        .iter()
                        .filter_map(|m| cpu_ms(s, op, m.size).map(|c| (m.size as f64, c / m.ms)))
                        .collect(),
                    dashed: false,
                })
                .collect(),
        };
        speedup.series.push(Series {
            name: "break-even (1x)".into(),
            points: vec![(lo, 1.0), (hi, 1.0)],
            dashed: true,
        });
        let mut bandwidth = Plot {
            title: format!("{}: achieved bandwidth", op.name()),
            x_label,
            y_label: "GB/s".into(),
            series: devices
                .iter()
                .map(|(d, ms)| Series {
                    name: d.clone(),
                    points: ms
                        .iter()
                        .map(|m| (m.size as f64, op.min_bytes(m.size) / (m.ms * 1e-3) / 1e9))
                        .collect(),
                    dashed: false,
                })
                .collect(),
        };
        let mut limits: Vec<(&str, f64)> = Vec::new();
        for (d, _) in &devices {
            if let Some(l) = limit_for(s, d)
                && !limits.contains(&l)
            {
                limits.push(l);
            }
        }
        for (name, gbps) in limits {
            bandwidth.series.push(Series {
                name: format!("{name} (measured)"),
                points: vec![(lo, gbps), (hi, gbps)],
                dashed: true,
            });
        }
        out.push((format!("{}-time.svg", op.name()), time.render()));
        out.push((format!("{}-speedup.svg", op.name()), speedup.render()));
        out.push((format!("{}-bandwidth.svg", op.name()), bandwidth.render()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::svg::tests::well_formed;

    #[test]
    fn break_even_interpolates_the_first_crossing() {
        // GPU 4x slower at 1k, 4x faster at 100k: the log-log crossing is halfway, at 10k.
        let pts = [(1e3, 1.0, 4.0), (1e5, 4.0, 1.0)];
        match break_even(&pts) {
            BreakEven::At(x) => assert!((x - 1e4).abs() < 1e-6 * 1e4, "{x}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            break_even(&[(10.0, 2.0, 1.0), (20.0, 4.0, 1.0)]),
            BreakEven::Below(10.0)
        );
        assert_eq!(
            break_even(&[(10.0, 1.0, 2.0), (20.0, 1.0, 3.0)]),
            BreakEven::NotReached(20.0)
        );
        assert_eq!(break_even(&[]), BreakEven::Unknown);
        // Unsorted input, a later loss after the first win: the first win counts.
        let pts = [
            (300.0, 1.0, 2.0),
            (100.0, 1.0, 2.0),
            (1000.0, 2.0, 1.0),
            (3000.0, 1.0, 2.0),
        ];
        assert!(matches!(break_even(&pts), BreakEven::At(x) if x > 300.0 && x < 1000.0));
    }

    #[test]
    fn every_op_has_a_work_unit_and_bytes() {
        for op in SweepOp::ALL {
            assert_eq!(SweepOp::from_name(op.name()), Some(op));
            let (w1, _) = op.work(1000);
            let (w2, _) = op.work(4000);
            assert!(w2 > w1 && w1 > 0.0, "{}", op.name());
            assert!(op.min_bytes(4000) > op.min_bytes(1000));
        }
    }

    /// A quick sweep on this machine writes a report and well-formed plots (the GPU part is measured or
    /// skipped with its reason; the peer is skipped here because its script is not found).
    #[test]
    fn a_quick_sweep_writes_the_report_and_plots() {
        let out = std::env::temp_dir().join(format!("recall-sweep-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&out);
        let args = SweepArgs {
            quick: true,
            sizes: Some(vec![64, 256]),
            ops: None,
            out: out.clone(),
            iters: 1,
            peer_script: "/nonexistent/peers.py".into(),
            no_peer: false,
            command: "recall bench sweep --quick".into(),
        };
        assert_eq!(run(args).unwrap(), ExitCode::SUCCESS);
        let report = std::fs::read_to_string(out.join("report.md")).unwrap();
        assert!(report.contains("| op | size | device | time | throughput | speedup vs CPU |"));
        assert!(report.contains("## Break-even sizes"));
        assert!(report.contains("| host copy, all cores |"));
        for op in SweepOp::ALL {
            for size in ["64", "256"] {
                let row = format!("| {} | {size} {} | cpu |", op.name(), op.size_label());
                assert!(report.contains(&row), "missing {row}");
            }
            for kind in ["time", "speedup", "bandwidth"] {
                let name = format!("{}-{kind}.svg", op.name());
                let svg = std::fs::read_to_string(out.join(&name)).unwrap();
                well_formed(&svg).unwrap_or_else(|e| panic!("{name}: {e}"));
                assert!(svg.contains("<polyline"), "{name} draws no line");
                assert!(report.contains(&format!("]({name})")), "{name} not linked");
            }
        }
        match recall::Engine::builder().device(DevicePolicy::Gpu).build() {
            Ok(_) => assert!(report.contains("| gpu |")),
            Err(_) => {
                assert!(report.contains("- GPU: skipped: "));
                assert!(report.contains("- peer: skipped: "));
            }
        }
        let _ = std::fs::remove_dir_all(&out);
    }

    #[test]
    fn bad_sizes_are_refused() {
        let args = SweepArgs {
            quick: true,
            sizes: Some(vec![0]),
            ops: None,
            out: std::env::temp_dir().join("recall-sweep-unused"),
            iters: 1,
            peer_script: String::new(),
            no_peer: true,
            command: String::new(),
        };
        assert!(run(args).unwrap_err().contains("--sizes"));
    }
}
