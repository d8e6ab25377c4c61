//! Break-even sizes: where the GPU starts to pay for an op, measured by a short calibration on first use,
//! cached per device on disk, overridable, and adjusted by live throughput.
//!
//! Calibration times the op on both devices over a ladder of sizes (x4 apart), takes the bracket where
//! the GPU becomes and stays faster, narrows it by geometric bisection, and interpolates the crossover in
//! log-size. It also fits `time = fixed + work * per_work` per device (least squares on relative error):
//! the executor compares live timings with these models (moving averages of observed / predicted) and
//! moves the break-even size when one device gets slower or faster than it was at calibration.
//!
//! Durations come from the executor's [`crate::Clock`], so fake backends can report synthetic timings.

use crate::backend::{Backend, BackendError};
use crate::device::{Device, GpuDescription};
use crate::op::OpKind;
use recall_cpu_simd::{Metric, SpreadGraph, SpreadParams};
use std::fmt;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Where a break-even size came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThresholdSource {
    /// Set per op by configuration or `RECALL_BREAK_EVEN`.
    Override,
    /// `gpu_min_work` with calibration turned off.
    Configured,
    /// The built-in default: no calibration yet, or it could not run.
    Default,
    /// Read from the per-device cache file.
    Cached,
    /// Measured in this process.
    Calibrated,
}

impl fmt::Display for ThresholdSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ThresholdSource::Override => "override",
            ThresholdSource::Configured => "configured",
            ThresholdSource::Default => "default, not calibrated",
            ThresholdSource::Cached => "calibrated, cached",
            ThresholdSource::Calibrated => "calibrated",
        })
    }
}

/// `time = fixed_s + work * per_work_s`, seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinearModel {
    pub fixed_s: f64,
    pub per_work_s: f64,
}

impl LinearModel {
    /// Predicted seconds for `work`.
    pub fn predict(&self, work: u64) -> f64 {
        self.fixed_s + work as f64 * self.per_work_s
    }

    /// Least squares on relative error through `(work, seconds)` points; both coefficients kept >= 0.
    pub fn fit(points: &[(u64, f64)]) -> LinearModel {
        // minimise sum(((a + b w) - t)^2 / t^2)
        let (mut s00, mut s01, mut s11, mut r0, mut r1) = (0.0, 0.0, 0.0, 0.0, 0.0);
        for &(w, t) in points {
            if t <= 0.0 {
                continue;
            }
            let (w, iw) = (w as f64, 1.0 / (t * t));
            s00 += iw;
            s01 += w * iw;
            s11 += w * w * iw;
            r0 += t * iw;
            r1 += w * t * iw;
        }
        let det = s00 * s11 - s01 * s01;
        if det.abs() < f64::MIN_POSITIVE || !det.is_finite() {
            let b = if s11 > 0.0 { r1 / s11 } else { 0.0 };
            return LinearModel {
                fixed_s: 0.0,
                per_work_s: b.max(0.0),
            };
        }
        let a = (r0 * s11 - r1 * s01) / det;
        let b = (s00 * r1 - s01 * r0) / det;
        LinearModel {
            fixed_s: a.max(0.0),
            per_work_s: b.max(0.0),
        }
    }
}

/// The crossover of two models: the work where `gpu` becomes faster than `cpu` (`None`: never).
pub fn model_crossover(cpu: &LinearModel, gpu: &LinearModel) -> Option<f64> {
    let num = gpu.fixed_s - cpu.fixed_s;
    let den = cpu.per_work_s - gpu.per_work_s;
    if num <= 0.0 {
        return Some(0.0);
    }
    if den <= 0.0 {
        return None;
    }
    Some(num / den)
}

/// One op's calibration result.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Calibration {
    pub op: OpKind,
    /// Calls of at least this much work go to the GPU (`u64::MAX`: the GPU never paid in the range).
    pub break_even: u64,
    pub cpu: LinearModel,
    pub gpu: LinearModel,
}

/// How long and how wide calibration measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CalibrationConfig {
    /// Smallest work measured.
    pub min_work: u64,
    /// Largest work measured.
    pub max_work: u64,
    /// Timings per size per device (the median is kept).
    pub reps: usize,
    /// Bisection steps inside the bracket (each halves its log-width).
    pub refine_steps: usize,
}

impl Default for CalibrationConfig {
    fn default() -> Self {
        CalibrationConfig {
            min_work: 1 << 12,
            max_work: 1 << 28,
            reps: 3,
            refine_steps: 4,
        }
    }
}

/// Time one op on a device at a given size.
pub type Measure<'a> = dyn FnMut(Device, u64) -> Result<Duration, BackendError> + 'a;

fn median_secs(
    measure: &mut Measure<'_>,
    device: Device,
    work: u64,
    reps: usize,
) -> Result<f64, BackendError> {
    let mut xs = Vec::with_capacity(reps.max(1));
    for _ in 0..reps.max(1) {
        xs.push(measure(device, work)?.as_secs_f64());
    }
    xs.sort_by(f64::total_cmp);
    Ok(xs[xs.len() / 2])
}

/// Calibrate `op`: see the module doc. `measure` runs the op once at a work size on `Device::Cpu` or
/// `gpu` and returns how long it took.
pub fn calibrate(
    op: OpKind,
    gpu: Device,
    config: &CalibrationConfig,
    measure: &mut Measure<'_>,
) -> Result<Calibration, BackendError> {
    let min = config.min_work.max(1);
    let max = config.max_work.max(min);
    let mut sizes = Vec::new();
    let mut w = min;
    while w <= max {
        sizes.push(w);
        w = match w.checked_mul(4) {
            Some(n) => n,
            None => break,
        };
    }
    // Warm up both devices (module load, first touch, thread pools).
    measure(Device::Cpu, min)?;
    measure(gpu, min)?;
    let reps = config.reps;
    let mut cpu_pts = Vec::new();
    let mut gpu_pts = Vec::new();
    // ln(t_gpu / t_cpu) per size: negative where the GPU wins.
    let mut diffs = Vec::new();
    for &w in &sizes {
        let tc = median_secs(measure, Device::Cpu, w, reps)?;
        let tg = median_secs(measure, gpu, w, reps)?;
        cpu_pts.push((w, tc));
        gpu_pts.push((w, tg));
        diffs.push(log_ratio(tg, tc));
    }
    let cpu_model = LinearModel::fit(&cpu_pts);
    let gpu_model = LinearModel::fit(&gpu_pts);
    // The GPU must win from the bracket on: the last size where it lost.
    let break_even = match diffs.iter().rposition(|d| *d > 0.0) {
        None => sizes[0],
        Some(i) if i + 1 == sizes.len() => u64::MAX,
        Some(i) => {
            let (mut lo, mut hi) = (sizes[i], sizes[i + 1]);
            let (mut dlo, mut dhi) = (diffs[i], diffs[i + 1]);
            for _ in 0..config.refine_steps {
                let mid = ((lo as f64) * (hi as f64)).sqrt().round() as u64;
                if mid <= lo || mid >= hi {
                    break;
                }
                let d = log_ratio(
                    median_secs(measure, gpu, mid, reps)?,
                    median_secs(measure, Device::Cpu, mid, reps)?,
                );
                if d > 0.0 {
                    (lo, dlo) = (mid, d);
                } else {
                    (hi, dhi) = (mid, d);
                }
            }
            // Interpolate the sign change of the log-ratio in log-size.
            let frac = if dlo - dhi > 0.0 {
                dlo / (dlo - dhi)
            } else {
                0.5
            };
            let (llo, lhi) = ((lo as f64).ln(), (hi as f64).ln());
            (llo + (lhi - llo) * frac).exp().round() as u64
        }
    };
    Ok(Calibration {
        op,
        break_even,
        cpu: cpu_model,
        gpu: gpu_model,
    })
}

fn log_ratio(a: f64, b: f64) -> f64 {
    (a.max(1e-12) / b.max(1e-12)).ln()
}

/// Runs an op on a backend at a requested work size, with inputs made once and reused (production
/// calibration).
///
/// Each op is probed in the shape `recall bench sweep` measures ([`probe_shape`]), so that the break-even
/// size calibration finds is the crossover that bench shows, in the same work units, and every probe call
/// has the work it is asked for (in the op's own units, [`crate::OpKind`]). What a caller prepares once
/// (a transposed graph, a candidate list) is made by [`Probe::prepare`], outside the timed call.
#[derive(Debug, Default)]
pub struct Probe {
    data: Vec<f32>,
    /// `KnnResident`: the corpus handle of the last size probed (resident on the GPU after its first call,
    /// so the median of the repetitions measures calls without the corpus upload).
    shared: parking_lot::Mutex<Option<(usize, crate::shared_corpus::SharedCorpus)>>,
    /// `Spread`, `SpreadResident`: the graph handle (and seeds) of the last size probed.
    graph: parking_lot::Mutex<Option<(usize, ProbeGraph)>>,
    /// `ScoreCandidates`: the candidate lists of the last size probed.
    candidates: parking_lot::Mutex<Option<(usize, ProbeCandidates)>>,
}

#[derive(Debug, Clone)]
struct ProbeGraph {
    graph: crate::shared_graph::SharedGraph,
    seeds: std::sync::Arc<Vec<f32>>,
}

#[derive(Debug, Clone)]
struct ProbeCandidates {
    rows: usize,
    offsets: std::sync::Arc<Vec<usize>>,
    ids: std::sync::Arc<Vec<u32>>,
}

/// The shapes calibration probes, the same as `recall bench sweep`'s.
pub mod probe_shape {
    /// Queries per call of the dense ops and candidate scoring.
    pub const QUERIES: usize = 8;
    /// Dimension of the dense ops, candidate scoring and clip-and-noise.
    pub const DIM: usize = 128;
    /// Neighbours per query (knn, candidates).
    pub const K: usize = 10;
    /// k-means: dimension (one Lloyd iteration per call).
    pub const KM_DIM: usize = 32;
    /// k-means: clusters.
    pub const KM_CLUSTERS: usize = 16;
    /// Spreading: out-edges per node of the power-law graph.
    pub const EDGES_PER_NODE: usize = 8;
    /// Spreading: hops per call.
    pub const HOPS: usize = 3;
    /// Spreading: decay per hop.
    pub const DECAY: f32 = 0.5;
    /// Spreading: threshold.
    pub const THRESHOLD: f32 = 0.01;
    /// Spreading: one seed (of 1.0) per this many nodes.
    pub const SEED_EVERY: usize = 100;
    /// Candidate scoring: each query's list is a quarter of the corpus rows (at least `K`).
    pub fn candidates(rows: usize) -> usize {
        (rows / 4).max(K).min(rows)
    }
}

use probe_shape as ps;

/// Largest spreading probe, in edge visits: a larger graph takes longer to build than calibration should.
const SPREAD_MAX_WORK: u64 = 1 << 26;

impl Probe {
    /// Inputs for sizes up to `max_work`.
    pub fn new(op: OpKind, max_work: u64) -> Probe {
        let floats = match op {
            // Rows of `DIM` values: `work / DIM` of them for clip-and-noise, `work / (QUERIES * DIM)`
            // for the dense ops, `work / (DIM * 2)` for candidate scoring; points of `KM_DIM` for k-means.
            OpKind::ClipAndNoise | OpKind::ScoreCandidates => max_work.min(1 << 25) as usize,
            OpKind::KMeans => (max_work / ps::KM_CLUSTERS as u64).min(1 << 25) as usize,
            OpKind::Spread | OpKind::SpreadResident => 0,
            _ => (dense_rows(max_work) * ps::DIM as u64).min(1 << 25) as usize,
        } + ps::QUERIES * ps::DIM;
        let mut s = 0x243F_6A88_85A3_08D3u64;
        let data = (0..floats)
            .map(|_| {
                s = s
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect();
        Probe {
            data,
            ..Probe::default()
        }
    }

    /// The largest work this probe can run for `op` at its requested size (calibrate up to here).
    pub fn max_work(&self, op: OpKind) -> u64 {
        let values = (self.data.len() - ps::QUERIES * ps::DIM) as u64;
        match op {
            OpKind::Spread | OpKind::SpreadResident => SPREAD_MAX_WORK,
            OpKind::ClipAndNoise => values,
            // Each of the queries scores a quarter of the rows: work = QUERIES * rows / 4 * DIM.
            OpKind::ScoreCandidates => values / ps::DIM as u64 * (ps::QUERIES * ps::DIM / 4) as u64,
            OpKind::KMeans => values / ps::KM_DIM as u64 * (ps::KM_DIM * ps::KM_CLUSTERS) as u64,
            _ => values / ps::DIM as u64 * (ps::QUERIES * ps::DIM) as u64,
        }
    }

    /// Make what a caller of `op` at `work` prepares once (outside the timed call): the graph and seeds
    /// of a spreading call, the candidate lists, the corpus handle. Idempotent for a size.
    pub fn prepare(&self, op: OpKind, work: u64) -> Result<(), BackendError> {
        match op {
            OpKind::Spread | OpKind::SpreadResident => self.probe_graph(work).map(drop),
            OpKind::ScoreCandidates => self.probe_candidates(work).map(drop),
            OpKind::KnnResident => self.probe_corpus(work).map(drop),
            _ => Ok(()),
        }
    }

    fn queries(&self) -> &[f32] {
        &self.data[..ps::QUERIES * ps::DIM]
    }

    fn values(&self) -> &[f32] {
        &self.data[ps::QUERIES * ps::DIM..]
    }

    fn probe_corpus(&self, work: u64) -> Result<crate::shared_corpus::SharedCorpus, BackendError> {
        let rows = dense_rows(work).min((self.values().len() / ps::DIM) as u64) as usize;
        cached(&self.shared, rows, || {
            crate::shared_corpus::SharedCorpus::new(
                self.values()[..rows * ps::DIM].to_vec(),
                ps::DIM,
            )
            .map_err(|e| BackendError::Gpu(e.to_string()))
        })
    }

    fn probe_graph(&self, work: u64) -> Result<ProbeGraph, BackendError> {
        // `work` edge visits: EDGES_PER_NODE * HOPS per node.
        let n = (work / (ps::EDGES_PER_NODE * ps::HOPS) as u64).clamp(16, 1 << 24) as usize;
        cached(&self.graph, n, || {
            let mut rng = crate::difftest::SplitMix::new(11);
            let (indptr, indices, weights) =
                crate::difftest::power_law_graph(&mut rng, n, ps::EDGES_PER_NODE * n, 0, 0);
            let g =
                SpreadGraph::from_csr(&indptr, &indices, &weights).map_err(BackendError::Input)?;
            let mut seeds = vec![0.0f32; n];
            for _ in 0..(n / ps::SEED_EVERY).max(1) {
                seeds[rng.below(n as u64) as usize] = 1.0;
            }
            Ok(ProbeGraph {
                graph: crate::shared_graph::SharedGraph::new(g),
                seeds: std::sync::Arc::new(seeds),
            })
        })
    }

    fn probe_candidates(&self, work: u64) -> Result<ProbeCandidates, BackendError> {
        // work = QUERIES * candidates(rows) * DIM, candidates(rows) = rows / 4.
        let max_rows = self.values().len() / ps::DIM;
        let rows = ((work / (ps::QUERIES * ps::DIM / 4) as u64) as usize)
            .clamp(ps::K, max_rows.max(ps::K));
        cached(&self.candidates, rows, || {
            let c = ps::candidates(rows);
            let stride = rows / c;
            let mut offsets = vec![0];
            let mut ids = Vec::with_capacity(ps::QUERIES * c);
            for q in 0..ps::QUERIES {
                ids.extend((0..c).map(|j| (j * stride + q % stride) as u32));
                offsets.push(ids.len());
            }
            Ok(ProbeCandidates {
                rows,
                offsets: std::sync::Arc::new(offsets),
                ids: std::sync::Arc::new(ids),
            })
        })
    }

    /// Run `op` of about `work` work units on `backend` ([`Probe::prepare`] first keeps the preparation
    /// out of the measurement; without it the first call at a size prepares).
    pub fn run(&self, op: OpKind, backend: &dyn Backend, work: u64) -> Result<(), BackendError> {
        let (q, dim) = (self.queries(), ps::DIM);
        let dense = || {
            let rows = dense_rows(work).min((self.values().len() / dim) as u64) as usize;
            &self.values()[..rows * dim]
        };
        match op {
            OpKind::CosineScores => backend.cosine_scores(q, dense(), dim).map(drop),
            OpKind::Similarity => backend
                .similarity(q, dense(), dim, Metric::Cosine)
                .map(drop),
            OpKind::Knn => {
                let c = dense();
                backend
                    .knn(q, c, dim, Metric::Cosine, (c.len() / dim).min(ps::K))
                    .map(drop)
            }
            OpKind::KnnResident => {
                let corpus = self.probe_corpus(work)?;
                let k = corpus.n_rows().min(ps::K);
                backend.knn_shared(q, &corpus, Metric::Cosine, k).map(drop)
            }
            OpKind::ScoreCandidates => {
                let c = self.probe_candidates(work)?;
                backend
                    .score_candidates(
                        q,
                        &self.values()[..c.rows * dim],
                        dim,
                        Metric::Dot,
                        &c.offsets,
                        &c.ids,
                        ps::K.min(ps::candidates(c.rows)),
                    )
                    .map(drop)
            }
            OpKind::Spread | OpKind::SpreadResident => {
                let g = self.probe_graph(work)?;
                let params = SpreadParams {
                    decay: ps::DECAY,
                    threshold: ps::THRESHOLD,
                    hops: ps::HOPS,
                    k: ps::K.min(g.seeds.len()),
                };
                if op == OpKind::SpreadResident {
                    backend.spread_shared(&g.graph, &g.seeds, &params).map(drop)
                } else {
                    backend.spread(g.graph.graph(), &g.seeds, &params).map(drop)
                }
            }
            OpKind::KMeans => {
                let per_point = (ps::KM_DIM * ps::KM_CLUSTERS) as u64;
                let max_points = self.values().len() / ps::KM_DIM;
                let n = ((work / per_point) as usize).clamp(ps::KM_CLUSTERS, max_points);
                let pts = &self.values()[..n * ps::KM_DIM];
                backend
                    .kmeans(pts, ps::KM_DIM, ps::KM_CLUSTERS.min(n), 1, 42)
                    .map(drop)
            }
            OpKind::ClipAndNoise => {
                let rows = ((work / dim as u64) as usize).clamp(1, self.values().len() / dim);
                backend
                    .clip_and_noise(&self.values()[..rows * dim], dim, 1.0, 0.1, 1)
                    .map(drop)
            }
        }
    }
}

/// The value `slot` holds for `key`, or a new one from `make` (which then replaces it): the probes keep
/// one prepared input, so that repeated measurements at a size do not prepare (or upload) it again.
fn cached<T: Clone>(
    slot: &parking_lot::Mutex<Option<(usize, T)>>,
    key: usize,
    make: impl FnOnce() -> Result<T, BackendError>,
) -> Result<T, BackendError> {
    let mut slot = slot.lock();
    if let Some((k, v)) = &*slot
        && *k == key
    {
        return Ok(v.clone());
    }
    let v = make()?;
    *slot = Some((key, v.clone()));
    Ok(v)
}

/// Corpus rows of a dense probe call of `work` multiply-adds (`QUERIES x rows x DIM`), at least 1.
fn dense_rows(work: u64) -> u64 {
    (work / (ps::QUERIES * ps::DIM) as u64).max(1)
}

/// A calibration of `op` as the executor runs it on first use (the probe prepared outside each timed
/// call, the ladder capped at what the probe can run), with `cpu` and `gpu` as the two devices. The
/// clock is the host's.
pub fn calibrate_with_probe(
    op: OpKind,
    probe: &Probe,
    cpu: &dyn Backend,
    gpu: &dyn Backend,
    config: &CalibrationConfig,
    clock: &dyn crate::Clock,
) -> Result<Calibration, BackendError> {
    let config = CalibrationConfig {
        max_work: config.max_work.min(probe.max_work(op)),
        ..*config
    };
    let gpu_device = gpu.device();
    let mut measure = |d: Device, work: u64| -> Result<Duration, BackendError> {
        let b = if d == Device::Cpu { cpu } else { gpu };
        probe.prepare(op, work)?;
        let t0 = clock.now();
        probe.run(op, b, work)?;
        Ok(clock.now().saturating_sub(t0))
    };
    calibrate(op, gpu_device, &config, &mut measure)
}

/// Calibration's break-even against the crossover of a fine sweep of the same probe (`step` apart,
/// best of `reps` calls per size and device): what `recall bench break-even` prints per op.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BreakEvenCheck {
    pub op: OpKind,
    /// What calibration found (`u64::MAX`: the GPU never paid in its range).
    pub calibrated: u64,
    /// The smallest swept size from which the GPU stayed faster (`None`: it never did).
    pub swept: Option<u64>,
    /// The sizes swept.
    pub range: (u64, u64),
}

impl BreakEvenCheck {
    /// `calibrated / swept`, when both exist.
    pub fn ratio(&self) -> Option<f64> {
        match self.swept {
            Some(s) if s > 0 && self.calibrated != u64::MAX => {
                Some(self.calibrated as f64 / s as f64)
            }
            _ => None,
        }
    }
}

/// Calibrate `op` (as the executor does) and sweep the same probe finely: see [`BreakEvenCheck`].
pub fn check_break_even(
    op: OpKind,
    cpu: &dyn Backend,
    gpu: &dyn Backend,
    config: &CalibrationConfig,
    step: f64,
    reps: usize,
) -> Result<BreakEvenCheck, BackendError> {
    let clock = crate::clock::system_clock();
    let probe = Probe::new(op, config.max_work);
    let cal = calibrate_with_probe(op, &probe, cpu, gpu, config, clock.as_ref())?;
    let max = config.max_work.min(probe.max_work(op));
    let min = config.min_work.max(1);
    let time = |b: &dyn Backend, w: u64| -> Result<Duration, BackendError> {
        probe.prepare(op, w)?;
        probe.run(op, b, w)?; // warm (a resident upload, caches)
        let mut best = Duration::MAX;
        for _ in 0..reps.max(1) {
            let t0 = std::time::Instant::now();
            probe.run(op, b, w)?;
            best = best.min(t0.elapsed());
        }
        Ok(best)
    };
    let mut w = min as f64;
    let mut swept = None;
    while w <= max as f64 {
        let size = w.round() as u64;
        let (tc, tg) = (time(cpu, size)?, time(gpu, size)?);
        if tg < tc {
            swept.get_or_insert(size);
        } else {
            swept = None;
        }
        w *= step.max(1.01);
    }
    Ok(BreakEvenCheck {
        op,
        calibrated: cal.break_even,
        swept,
        range: (min, max),
    })
}

/// The cache directory: `RECALL_CACHE_DIR`, else `$XDG_CACHE_HOME/recall`, else `~/.cache/recall`.
pub fn default_cache_dir() -> Option<PathBuf> {
    let var = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    var("RECALL_CACHE_DIR")
        .or_else(|| var("XDG_CACHE_HOME").map(|d| d.join("recall")))
        .or_else(|| var("HOME").map(|d| d.join(".cache").join("recall")))
}

/// What a cache entry is valid for: the GPU, its driver, the kernel image and this recall version.
pub fn device_key(gpu: &GpuDescription) -> String {
    format!(
        "{} | {} | driver {} | {} | recall {}",
        gpu.name,
        gpu.sm,
        gpu.driver,
        gpu.image,
        env!("CARGO_PKG_VERSION")
    )
}

/// The per-device cache file under `dir`.
pub fn cache_path(dir: &Path, key: &str) -> PathBuf {
    let mut name: String = key
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    // Keep names short; the key inside the file is checked anyway.
    name.truncate(120);
    dir.join(format!("dispatch-{name}.txt"))
}

const HEADER: &str = "# recall dispatch calibration, format 1";

/// The text of a cache file.
pub fn render_cache(key: &str, entries: &[Calibration]) -> String {
    let mut o = format!("{HEADER}\ndevice {key}\n");
    for c in entries {
        let _ = writeln!(
            o,
            "{} break_even={} cpu_fixed_s={:e} cpu_per_work_s={:e} gpu_fixed_s={:e} gpu_per_work_s={:e}",
            c.op, c.break_even, c.cpu.fixed_s, c.cpu.per_work_s, c.gpu.fixed_s, c.gpu.per_work_s
        );
    }
    o
}

/// The entries of a cache file's text that are valid for `key` (none when the key differs). Lines that
/// do not parse are skipped.
pub fn parse_cache(text: &str, key: &str) -> Vec<Calibration> {
    let mut lines = text.lines();
    if lines.next() != Some(HEADER) || lines.next() != Some(&format!("device {key}")) {
        return Vec::new();
    }
    lines.filter_map(parse_entry).collect()
}

fn parse_entry(line: &str) -> Option<Calibration> {
    let mut parts = line.split_whitespace();
    let op = OpKind::from_name(parts.next()?)?;
    let (mut be, mut cf, mut cp, mut gf, mut gp) = (None, None, None, None, None);
    for p in parts {
        let (k, v) = p.split_once('=')?;
        match k {
            "break_even" => be = v.parse::<u64>().ok(),
            "cpu_fixed_s" => cf = v.parse::<f64>().ok(),
            "cpu_per_work_s" => cp = v.parse::<f64>().ok(),
            "gpu_fixed_s" => gf = v.parse::<f64>().ok(),
            "gpu_per_work_s" => gp = v.parse::<f64>().ok(),
            _ => {}
        }
    }
    let finite = |x: Option<f64>| x.filter(|v| v.is_finite() && *v >= 0.0);
    Some(Calibration {
        op,
        break_even: be?,
        cpu: LinearModel {
            fixed_s: finite(cf)?,
            per_work_s: finite(cp)?,
        },
        gpu: LinearModel {
            fixed_s: finite(gf)?,
            per_work_s: finite(gp)?,
        },
    })
}

/// Read the cache entries for `key` under `dir` (none when absent or unreadable).
pub fn load_cache(dir: &Path, key: &str) -> Vec<Calibration> {
    std::fs::read_to_string(cache_path(dir, key))
        .map(|t| parse_cache(&t, key))
        .unwrap_or_default()
}

/// Write `entry` into the cache for `key` under `dir`, keeping the other ops' entries.
pub fn store_cache(dir: &Path, key: &str, entry: &Calibration) -> std::io::Result<()> {
    let mut entries = load_cache(dir, key);
    entries.retain(|e| e.op != entry.op);
    entries.push(*entry);
    entries.sort_by_key(|e| e.op);
    std::fs::create_dir_all(dir)?;
    let path = cache_path(dir, key);
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, render_cache(key, &entries))?;
    std::fs::rename(&tmp, &path)
}

/// Parse `RECALL_BREAK_EVEN`: `op=work[,op=work…]`, e.g. `cosine_scores=5000000`.
pub fn parse_overrides(s: &str) -> Result<Vec<(OpKind, u64)>, String> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p
                .split_once('=')
                .ok_or_else(|| format!("{p:?} is not op=work"))?;
            let op = OpKind::from_name(k).ok_or_else(|| format!("no op named {k:?}"))?;
            let w = v
                .trim()
                .parse::<u64>()
                .map_err(|e| format!("{v:?} is not a work size: {e}"))?;
            Ok((op, w))
        })
        .collect()
}

/// Moving averages of live timings per (op, device): observed / predicted by the calibration model, and
/// throughput in work units per second.
#[derive(Debug)]
pub struct LiveRates {
    // f64 bits; index [op][0 cpu | 1 gpu]
    factor: [[AtomicU64; 2]; OpKind::COUNT],
    rate: [[AtomicU64; 2]; OpKind::COUNT],
}

/// Weight of the newest sample in the moving averages.
const ALPHA: f64 = 0.2;

impl Default for LiveRates {
    fn default() -> Self {
        let one = 1.0f64.to_bits();
        LiveRates {
            factor: std::array::from_fn(|_| [AtomicU64::new(one), AtomicU64::new(one)]),
            rate: std::array::from_fn(|_| [AtomicU64::new(0), AtomicU64::new(0)]),
        }
    }
}

fn dev(d: Device) -> usize {
    usize::from(matches!(d, Device::Gpu { .. }))
}

fn ewma(cell: &AtomicU64, sample: f64, first: bool) {
    // Racy read-modify-write on purpose: a lost update among concurrent samples is harmless.
    let old = f64::from_bits(cell.load(Ordering::Relaxed));
    let new = if first {
        sample
    } else {
        old + ALPHA * (sample - old)
    };
    cell.store(new.to_bits(), Ordering::Relaxed);
}

impl LiveRates {
    /// A call of `work` on `device` took `elapsed`; `model` is the device's calibrated model, if any.
    pub fn observe(
        &self,
        op: OpKind,
        device: Device,
        work: u64,
        elapsed: Duration,
        model: Option<&LinearModel>,
    ) {
        let secs = elapsed.as_secs_f64();
        if secs <= 0.0 {
            return;
        }
        let r = &self.rate[op.index()][dev(device)];
        let first = r.load(Ordering::Relaxed) == 0;
        ewma(r, work as f64 / secs, first);
        if let Some(m) = model {
            let predicted = m.predict(work);
            if predicted > 0.0 {
                ewma(
                    &self.factor[op.index()][dev(device)],
                    (secs / predicted).clamp(0.1, 10.0),
                    false,
                );
            }
        }
    }

    /// Observed / predicted time, moving average (1.0 until observed).
    pub fn factor(&self, op: OpKind, device: Device) -> f64 {
        f64::from_bits(self.factor[op.index()][dev(device)].load(Ordering::Relaxed))
    }

    /// Work units per second, moving average (0.0 until observed).
    pub fn throughput(&self, op: OpKind, device: Device) -> f64 {
        f64::from_bits(self.rate[op.index()][dev(device)].load(Ordering::Relaxed))
    }

    /// `break_even` moved by how much live timings shift the models' crossover (at most x4 either way).
    pub fn adjust(&self, op: OpKind, cal: &Calibration) -> u64 {
        let (fc, fg) = (
            self.factor(op, Device::Cpu),
            self.factor(op, Device::Gpu { ordinal: 0 }),
        );
        if cal.break_even == u64::MAX || ((fc - 1.0).abs() < 1e-9 && (fg - 1.0).abs() < 1e-9) {
            return cal.break_even;
        }
        let scale = |m: &LinearModel, f: f64| LinearModel {
            fixed_s: m.fixed_s * f,
            per_work_s: m.per_work_s * f,
        };
        let base = model_crossover(&cal.cpu, &cal.gpu);
        let live = model_crossover(&scale(&cal.cpu, fc), &scale(&cal.gpu, fg));
        let ratio = match (base, live) {
            (Some(b), Some(l)) if b > 0.0 => l / b,
            (Some(_), None) => 4.0,
            _ => 1.0,
        };
        let ratio = if ratio.is_finite() {
            ratio.clamp(0.25, 4.0)
        } else {
            1.0
        };
        (cal.break_even as f64 * ratio).round().min(u64::MAX as f64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn synthetic(
        cpu: LinearModel,
        gpu: LinearModel,
    ) -> impl FnMut(Device, u64) -> Result<Duration, BackendError> {
        move |d, w| {
            let m = if d == Device::Cpu { cpu } else { gpu };
            Ok(Duration::from_secs_f64(m.predict(w)))
        }
    }

    #[test]
    fn finds_a_linear_crossover_within_a_few_percent() {
        for (cf, cp, gf, gp) in [
            (5e-6, 1e-9, 200e-6, 5e-11),
            (1e-6, 2e-10, 30e-6, 1e-11),
            (20e-6, 5e-9, 2e-3, 1e-10),
        ] {
            let cpu = LinearModel {
                fixed_s: cf,
                per_work_s: cp,
            };
            let gpu = LinearModel {
                fixed_s: gf,
                per_work_s: gp,
            };
            let truth = model_crossover(&cpu, &gpu).unwrap();
            let cal = calibrate(
                OpKind::CosineScores,
                Device::Gpu { ordinal: 0 },
                &CalibrationConfig::default(),
                &mut synthetic(cpu, gpu),
            )
            .unwrap();
            let err = (cal.break_even as f64 / truth - 1.0).abs();
            assert!(err < 0.05, "found {} truth {truth}", cal.break_even);
            let fitted = model_crossover(&cal.cpu, &cal.gpu).unwrap();
            assert!(
                (fitted / truth - 1.0).abs() < 0.05,
                "fitted {fitted} truth {truth}"
            );
        }
    }

    #[test]
    fn never_and_always() {
        let cpu = LinearModel {
            fixed_s: 1e-6,
            per_work_s: 1e-10,
        };
        let slow = LinearModel {
            fixed_s: 1e-3,
            per_work_s: 1e-10,
        };
        let fast = LinearModel {
            fixed_s: 0.0,
            per_work_s: 1e-12,
        };
        let g = Device::Gpu { ordinal: 0 };
        let cfg = CalibrationConfig::default();
        let never = calibrate(OpKind::CosineScores, g, &cfg, &mut synthetic(cpu, slow)).unwrap();
        assert_eq!(never.break_even, u64::MAX);
        let always = calibrate(OpKind::CosineScores, g, &cfg, &mut synthetic(cpu, fast)).unwrap();
        assert_eq!(always.break_even, cfg.min_work);
    }

    #[test]
    fn cache_round_trip_and_key_check() {
        let c = Calibration {
            op: OpKind::CosineScores,
            break_even: 205_263,
            cpu: LinearModel {
                fixed_s: 5e-6,
                per_work_s: 1e-9,
            },
            gpu: LinearModel {
                fixed_s: 2e-4,
                per_work_s: 5e-11,
            },
        };
        let text = render_cache("H200 | sm_90", &[c]);
        assert_eq!(parse_cache(&text, "H200 | sm_90"), vec![c]);
        assert!(parse_cache(&text, "H100 | sm_90").is_empty());
        assert!(parse_cache("garbage", "x").is_empty());
        let dir = std::env::temp_dir().join(format!("recall-cal-test-{}", std::process::id()));
        store_cache(&dir, "k/ey", &c).unwrap();
        assert_eq!(load_cache(&dir, "k/ey"), vec![c]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn overrides_parse() {
        assert_eq!(
            parse_overrides(" cosine_scores=123 ,").unwrap(),
            vec![(OpKind::CosineScores, 123)]
        );
        assert!(parse_overrides("nope=1").is_err());
        assert!(parse_overrides("cosine_scores=x").is_err());
    }

    #[test]
    fn live_slowdown_moves_the_break_even_up() {
        let cal = Calibration {
            op: OpKind::CosineScores,
            break_even: 200_000,
            cpu: LinearModel {
                fixed_s: 5e-6,
                per_work_s: 1e-9,
            },
            gpu: LinearModel {
                fixed_s: 2e-4,
                per_work_s: 5e-11,
            },
        };
        let live = LiveRates::default();
        assert_eq!(live.adjust(OpKind::CosineScores, &cal), 200_000);
        let g = Device::Gpu { ordinal: 0 };
        for _ in 0..30 {
            let w = 1_000_000;
            let t = Duration::from_secs_f64(2.0 * cal.gpu.predict(w));
            live.observe(OpKind::CosineScores, g, w, t, Some(&cal.gpu));
        }
        assert!((live.factor(OpKind::CosineScores, g) - 2.0).abs() < 0.01);
        let moved = live.adjust(OpKind::CosineScores, &cal);
        assert!(moved > 400_000 && moved < 450_000, "{moved}");
        assert!(live.throughput(OpKind::CosineScores, g) > 0.0);
    }
}
