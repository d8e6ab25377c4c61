//! Break-even sizes: where the GPU starts to pay for an op, measured by a short calibration on first use,
//! cached per device on disk, overridable, and adjusted by live throughput.
//!
//! One definition and one statistic, shared by calibration and the check's sweep (`recall bench
//! break-even`), so that the two are measurements of one quantity:
//! - sizes lie on one geometric [`grid`] (`min_work * 1.19^i`);
//! - a size is timed by [`measure_point`]: a warm-up call per device, then interleaved CPU and GPU calls,
//!   the best of `reps` per device kept, and `TIE_REPS_FACTOR` times as many where the two are within
//!   noise of each other (the run-to-run spread of the repetitions);
//! - the crossover ([`crossover`]) is the smallest measured size from which the GPU is at least as fast
//!   at every measured size above it (`u64::MAX` / `None`: it does not win clearly, outside noise, at the
//!   largest).
//!
//! Calibration measures every [`LADDER_EVERY`]-th grid size (a x4 ladder), then every grid size of the
//! ladder gap after the last size where the GPU lost, and of any gap above it with an end within noise;
//! gaps whose ends are both clear GPU wins are assumed won throughout (the one place it can differ from
//! the sweep, which measures every grid size). Its result is therefore a grid size, as the sweep's is, and
//! the two agree exactly when every decision near the crossover is outside noise. It also fits
//! `time = fixed + work * per_work` per device (least squares on relative error) through the points:
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
    /// Calls of at least this much work go to the GPU (`u64::MAX`: the GPU never paid in the range, or did not
    /// win clearly at its largest size).
    /// A size of the [`grid`]: the smallest from which the GPU stayed at least as fast ([`crossover`]).
    pub break_even: u64,
    pub cpu: LinearModel,
    pub gpu: LinearModel,
}

/// How long and how wide calibration measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CalibrationConfig {
    /// Smallest work measured (the [`grid`] starts here).
    pub min_work: u64,
    /// Largest work measured (the [`grid`] ends at or below it).
    pub max_work: u64,
    /// Timings per size per device (the best is kept, [`measure_point`]); a size where the devices are
    /// within noise of each other gets [`TIE_REPS_FACTOR`] times as many.
    pub reps: usize,
}

impl Default for CalibrationConfig {
    fn default() -> Self {
        CalibrationConfig {
            min_work: 1 << 12,
            max_work: 1 << 28,
            reps: 5,
        }
    }
}

/// The factor between neighbouring sizes of the [`grid`] on which break-even sizes are measured.
pub const GRID_STEP: f64 = 1.19;

/// Calibration's ladder: every this many [`grid`] sizes (`1.19^8` is about 4.02).
pub const LADDER_EVERY: usize = 8;

/// A size at which the two devices are within noise of each other ([`Point::within_noise`]) is timed this
/// many times `reps` per device in all.
pub const TIE_REPS_FACTOR: usize = 8;

/// The extra calls at a size within noise stop once they have taken this many seconds (measured), so
/// that a tie between slow calls keeps calibration short.
pub const TIE_BUDGET_S: f64 = 0.25;

/// The smallest relative run-to-run spread a [`Point`] assumes (timings of identical calls are never
/// closer than this in practice).
pub const NOISE_FLOOR: f64 = 0.02;

/// The sizes break-even measurements use: `min_work * GRID_STEP^i`, rounded, up to `max_work` (at least
/// `min_work`, repeated sizes dropped). Calibration and the check's sweep both measure on it, so that
/// both report one of its sizes.
pub fn grid(min_work: u64, max_work: u64) -> Vec<u64> {
    let min = min_work.max(1);
    let max = max_work.max(min);
    let mut sizes = vec![min];
    for i in 1..i32::MAX {
        let x = (min as f64 * GRID_STEP.powi(i)).round();
        if x > max as f64 {
            break;
        }
        let w = x as u64;
        if w > max {
            break;
        }
        if sizes.last() != Some(&w) {
            sizes.push(w);
        }
    }
    sizes
}

/// Both devices timed at one size: the best of the repetitions per device, and how noisy they were.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    /// The work size.
    pub work: u64,
    /// Best CPU time, seconds.
    pub cpu_s: f64,
    /// Best GPU time, seconds.
    pub gpu_s: f64,
    /// Relative run-to-run spread: the larger of the two devices' `(median - best) / best`, at least
    /// [`NOISE_FLOOR`].
    pub noise: f64,
    /// Timings taken per device (after one warm-up call each).
    pub reps: usize,
}

impl Point {
    /// The GPU was at least as fast as the CPU (best against best).
    pub fn gpu_wins(&self) -> bool {
        self.gpu_s <= self.cpu_s
    }

    /// The two best times differ by no more than twice the spread of the repetitions ([`Point::noise`]):
    /// at this size, which device wins is within noise (two measurements may disagree).
    pub fn within_noise(&self) -> bool {
        log_ratio(self.gpu_s, self.cpu_s).abs() <= (2.0 * self.noise).ln_1p()
    }

    /// `gpu / cpu` time.
    pub fn ratio(&self) -> f64 {
        self.gpu_s.max(1e-12) / self.cpu_s.max(1e-12)
    }
}

/// Time one op on a device at a given size.
pub type Measure<'a> = dyn FnMut(Device, u64) -> Result<Duration, BackendError> + 'a;

/// Time `work` on both devices, the one statistic every break-even measurement uses: one warm-up call per
/// device (module load, a resident upload, caches), then `reps` rounds of one CPU and one GPU call
/// (interleaved, so that a drift of the host touches both), the best of each device kept. When the two
/// bests are within noise of each other ([`Point::within_noise`]), it takes `TIE_REPS_FACTOR - 1` times as
/// many rounds again (fewer once they have taken [`TIE_BUDGET_S`]) and keeps the best of all.
pub fn measure_point(
    measure: &mut Measure<'_>,
    gpu: Device,
    work: u64,
    reps: usize,
) -> Result<Point, BackendError> {
    let reps = reps.max(1);
    measure(Device::Cpu, work)?;
    measure(gpu, work)?;
    let mut cpu = Vec::with_capacity(reps * TIE_REPS_FACTOR);
    let mut gpu_t = Vec::with_capacity(reps * TIE_REPS_FACTOR);
    rounds(measure, gpu, work, reps, &mut cpu, &mut gpu_t)?;
    let mut p = summarize(work, &mut cpu, &mut gpu_t);
    if p.within_noise() && TIE_REPS_FACTOR > 1 {
        let mut spent = 0.0;
        for _ in 0..reps * (TIE_REPS_FACTOR - 1) {
            if spent >= TIE_BUDGET_S {
                break;
            }
            rounds(measure, gpu, work, 1, &mut cpu, &mut gpu_t)?;
            spent += cpu[cpu.len() - 1] + gpu_t[gpu_t.len() - 1];
        }
        p = summarize(work, &mut cpu, &mut gpu_t);
    }
    Ok(p)
}

/// `n` rounds of one CPU call and one GPU call at `work`, seconds appended to `cpu` and `gpu_t`.
fn rounds(
    measure: &mut Measure<'_>,
    gpu: Device,
    work: u64,
    n: usize,
    cpu: &mut Vec<f64>,
    gpu_t: &mut Vec<f64>,
) -> Result<(), BackendError> {
    for _ in 0..n {
        cpu.push(measure(Device::Cpu, work)?.as_secs_f64());
        gpu_t.push(measure(gpu, work)?.as_secs_f64());
    }
    Ok(())
}

fn summarize(work: u64, cpu: &mut [f64], gpu: &mut [f64]) -> Point {
    let spread = |xs: &mut [f64]| -> (f64, f64) {
        xs.sort_by(f64::total_cmp);
        let (best, median) = (xs[0], xs[xs.len() / 2]);
        (best, (median - best) / best.max(1e-12))
    };
    let (cpu_s, cn) = spread(cpu);
    let (gpu_s, gn) = spread(gpu);
    Point {
        work,
        cpu_s,
        gpu_s,
        noise: cn.max(gn).max(NOISE_FLOOR),
        reps: cpu.len(),
    }
}

/// The one definition of the crossover that calibration and the check's sweep share: among `points`
/// (sorted by work, on the [`grid`]), the smallest work from which the GPU is at least as fast at every
/// measured size ([`Point::gpu_wins`]); `None` when it does not win clearly (outside noise,
/// [`Point::within_noise`]) at the largest (or there are no points).
///
/// Why the largest size must be a clear win: a break-even sends every larger call to the GPU, far past the
/// probe (a 64-query `similarity` call over 200,000 x 768 has 50x the probe's largest work). A tie there
/// says nothing about those calls, and one side of a coin flip sent them to a device 20-57 % slower:
/// `similarity`'s probe ties with the CPU of an H200 host at its largest sizes, and its calibration landed on a
/// finite break-even in one process and not in another (`docs/results/2026-11-28-session35`, runs D and E).
pub fn crossover(points: &[Point]) -> Option<u64> {
    let largest = points.last()?;
    if !largest.gpu_wins() || largest.within_noise() {
        return None;
    }
    match points.iter().rposition(|p| !p.gpu_wins()) {
        None => points.first().map(|p| p.work),
        Some(i) => points.get(i + 1).map(|p| p.work),
    }
}

/// The sizes at which the two devices are within noise of each other: `(smallest, largest, how many)`
/// of `points` with [`Point::within_noise`] (`None`: at none). A wide band is a flat crossover, where
/// which device runs matters little and the crossover point itself moves with noise.
pub fn tie_band(points: &[Point]) -> Option<(u64, u64, usize)> {
    let ties: Vec<u64> = points
        .iter()
        .filter(|p| p.within_noise())
        .map(|p| p.work)
        .collect();
    Some((*ties.iter().min()?, *ties.iter().max()?, ties.len()))
}

/// Calibrate `op`: see the module doc. `measure` runs the op once at a work size on `Device::Cpu` or
/// `gpu` and returns how long it took.
pub fn calibrate(
    op: OpKind,
    gpu: Device,
    config: &CalibrationConfig,
    measure: &mut Measure<'_>,
) -> Result<Calibration, BackendError> {
    calibrate_points(op, gpu, config, measure, &|w| w).map(|(c, _)| c)
}

/// The work a call asked for a size does (`|w| w` when exact; [`Probe::work_of`] for a probe): what a
/// [`Point`] records and a break-even size reports. Non-decreasing.
pub type WorkOf<'a> = dyn Fn(u64) -> u64 + 'a;

/// The [`grid`] sizes from `min_work` to `max_work` whose calls do distinct work: of several sizes that
/// `work_of` maps to the same call (a probe clamps small sizes up to its smallest call: k-means' 256 points
/// took 36 of 64 sizes), only the first. Calibration and the sweep measure each call once.
pub fn distinct_grid(min_work: u64, max_work: u64, work_of: &WorkOf<'_>) -> Vec<u64> {
    let mut sizes = grid(min_work, max_work);
    sizes.dedup_by_key(|w| work_of(*w));
    sizes
}

/// [`calibrate`], also returning every point it measured (sorted by work), each point's work given by
/// `work_of`.
pub fn calibrate_points(
    op: OpKind,
    gpu: Device,
    config: &CalibrationConfig,
    measure: &mut Measure<'_>,
    work_of: &WorkOf<'_>,
) -> Result<(Calibration, Vec<Point>), BackendError> {
    let sizes = distinct_grid(config.min_work, config.max_work, work_of);
    let top = sizes.len() - 1;
    let mut ladder: Vec<usize> = (0..=top).step_by(LADDER_EVERY.max(1)).collect();
    if ladder.last() != Some(&top) {
        ladder.push(top);
    }
    let mut at = |i: usize| -> Result<Point, BackendError> {
        let p = measure_point(measure, gpu, sizes[i], config.reps)?;
        Ok(Point {
            work: work_of(p.work),
            ..p
        })
    };
    let mut pts = std::collections::BTreeMap::new();
    for &i in &ladder {
        pts.insert(i, at(i)?);
    }
    let clear_win = |p: &Point| p.gpu_wins() && !p.within_noise();
    // Only sizes above the last ladder size where the GPU lost can hold the crossover. Scan every grid
    // size of a ladder gap there unless both its ends are clear GPU wins (the first gap after the loss
    // always: the crossover is in it unless the GPU loses again further up).
    let first_gap = ladder.iter().rposition(|i| !pts[i].gpu_wins()).unwrap_or(0);
    for g in first_gap..ladder.len().saturating_sub(1) {
        let (a, b) = (ladder[g], ladder[g + 1]);
        if clear_win(&pts[&a]) && clear_win(&pts[&b]) {
            continue;
        }
        for i in a + 1..b {
            pts.insert(i, at(i)?);
        }
    }
    let points: Vec<Point> = pts.into_values().collect();
    let cpu_pts: Vec<(u64, f64)> = points.iter().map(|p| (p.work, p.cpu_s)).collect();
    let gpu_pts: Vec<(u64, f64)> = points.iter().map(|p| (p.work, p.gpu_s)).collect();
    let cal = Calibration {
        op,
        break_even: crossover(&points).unwrap_or(u64::MAX),
        cpu: LinearModel::fit(&cpu_pts),
        gpu: LinearModel::fit(&gpu_pts),
    };
    Ok((cal, points))
}

/// What the check's fine sweep measured: every [`grid`] size, and their [`crossover`].
#[derive(Debug, Clone, PartialEq)]
pub struct Sweep {
    /// Every grid size, in order.
    pub points: Vec<Point>,
    /// [`crossover`] of `points`.
    pub crossover: Option<u64>,
}

/// Time every [`distinct_grid`] size of `config` with [`measure_point`] (the same statistic as calibration) and
/// take the [`crossover`] (the same definition); each point's work given by `work_of`.
pub fn sweep(
    gpu: Device,
    config: &CalibrationConfig,
    measure: &mut Measure<'_>,
    work_of: &WorkOf<'_>,
) -> Result<Sweep, BackendError> {
    let points = distinct_grid(config.min_work, config.max_work, work_of)
        .into_iter()
        .map(|w| {
            let p = measure_point(measure, gpu, w, config.reps)?;
            Ok(Point {
                work: work_of(w),
                ..p
            })
        })
        .collect::<Result<Vec<_>, BackendError>>()?;
    Ok(Sweep {
        crossover: crossover(&points),
        points,
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
    /// `KnnResident`, `ScoreCandidatesResident`: the corpus handle of the last row count probed (resident on
    /// the GPU after its first call, so the repetitions measure calls without the corpus upload).
    shared: parking_lot::Mutex<Option<(usize, crate::shared_corpus::SharedCorpus)>>,
    /// `Spread`, `SpreadResident`: the graph handle (and seeds) of the last size probed.
    graph: parking_lot::Mutex<Option<(usize, ProbeGraph)>>,
    /// `ScoreCandidates`, `ScoreCandidatesResident`: the candidate lists of the last size probed.
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
    /// Queries per call of `knn_batch`'s probe (a knn over a plain slice; the probe's first rows are its
    /// queries), and the fewest queries, and rows, a knn over a slice needs to be dispatched as `knn_batch`.
    ///
    /// Why a probe of its own: a slice call uploads its whole corpus, and at `QUERIES` a call that upload
    /// outweighs the work wherever the CPU has many cores (on an H200 host with 16, `knn`'s break-even is
    /// "never"), so before `knn_batch` a batch of any size over a slice ran on the CPU, 512 queries over
    /// 500,000 x 768 at 1.7-1.9x the GPU's time (`docs/results/2026-11-28-session34`, runs F-H). The CPU's
    /// time per multiply-add also falls several times from 8 queries to many, so neither device can be
    /// predicted from `knn`'s probe (a prediction that tried was reverted: same results, run H).
    ///
    /// Why its break-even holds for larger batches. A batch's work is counted in multiply-adds of at most
    /// [`DIM`] values a row, `Q N min(d, DIM)` ([`batch_work`]), the probe's own unit. A call of `Q` queries
    /// over `N` rows of `d` values uploads `(Q + N) d` values for `Q N d` multiply-adds, `4 (1/Q + 1/N)` bytes
    /// per multiply-add. With `Q` and `N` at least `BATCH_QUERIES` and that work at least the probe's crossover
    /// (`BATCH_QUERIES` queries over `N*` rows of `DIM`), `Q N` is at least `BATCH_QUERIES N*`, so `1/Q + 1/N`
    /// is at most `1/BATCH_QUERIES + 1/N*`, the probe's own: the call uploads no more per multiply-add than
    /// the probe did where the GPU started to win, and the multiply-adds it has beyond the counted ones (rows
    /// longer than `DIM`) favour the faster device. Counted in plain multiply-adds, a call with rows of 768
    /// would reach the break-even with a sixth of the probe's `Q N`, and upload more per multiply-add than it
    /// (found in review). A call with fewer queries or rows stays `knn`.
    ///
    /// `similarity_batch` (dense scores) is probed and bounded the same way, and also needs rows of at least
    /// [`DIM`] values: its `Q x N` scores come back to the host, one value per `min(d, DIM)` counted
    /// multiply-adds, which at fewer values a row than the probe's would be a larger share of the call than
    /// the probe measured.
    pub const BATCH_QUERIES: usize = 256;

    /// A knn over a plain slice of `queries` queries against `rows` rows is a batch (`knn_batch`): both at least
    /// [`BATCH_QUERIES`].
    pub fn is_batch(queries: usize, rows: usize) -> bool {
        queries >= BATCH_QUERIES && rows >= BATCH_QUERIES
    }

    /// Dense scores over a plain slice are a batch (`similarity_batch`): [`is_batch`], with at least [`DIM`]
    /// values a row.
    pub fn is_scores_batch(queries: usize, rows: usize, dim: usize) -> bool {
        is_batch(queries, rows) && dim >= DIM
    }

    /// The work of a batch (`knn_batch`, `similarity_batch`), what its break-even is compared with:
    /// multiply-adds counted at most [`DIM`] values a row, `queries * rows * min(dim, DIM)` (see
    /// [`BATCH_QUERIES`]).
    pub fn batch_work(queries: usize, rows: usize, dim: usize) -> u64 {
        (queries as u64)
            .saturating_mul(rows as u64)
            .saturating_mul(dim.min(DIM) as u64)
    }
    /// Dimension of the dense ops, candidate scoring and clip-and-noise.
    pub const DIM: usize = 128;
    /// Neighbours per query (knn, candidates).
    pub const K: usize = 10;
    /// k-means: dimension (one Lloyd iteration per call).
    pub const KM_DIM: usize = 32;
    /// k-means: clusters. A memory engine's anchors: k-means uploads its points once and scores each one
    /// against every cluster in every iteration, so how much the GPU gains grows with the clusters. With 16
    /// (before session 34) the upload outweighed the work at every probed size, calibration found the GPU
    /// never paid, and every k-means ran on the CPU, a 256-cluster call at 2-3x the GPU's time
    /// (`docs/results/2026-11-28-session34`).
    pub const KM_CLUSTERS: usize = 256;
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
            OpKind::ClipAndNoise | OpKind::ScoreCandidates | OpKind::ScoreCandidatesResident => {
                max_work.min(1 << 25) as usize
            }
            OpKind::KMeans => (max_work / ps::KM_CLUSTERS as u64).min(1 << 25) as usize,
            OpKind::Spread | OpKind::SpreadResident => 0,
            OpKind::KnnBatch | OpKind::SimilarityBatch => {
                (batch_rows(max_work) * ps::DIM as u64).min(1 << 25) as usize
            }
            _ => (dense_rows(max_work) * ps::DIM as u64).min(1 << 25) as usize,
        }
        // At least the op's smallest probe, whatever `max_work` says: the probes clamp their sizes up to it
        // (k-means' clusters, candidate scoring's `K` rows, a row of clip-and-noise) and index the data so.
        .max(match op {
            OpKind::KMeans => ps::KM_CLUSTERS * ps::KM_DIM,
            OpKind::ScoreCandidates | OpKind::ScoreCandidatesResident => ps::K * ps::DIM,
            OpKind::Spread | OpKind::SpreadResident => 0,
            // Their queries are their first rows.
            OpKind::KnnBatch | OpKind::SimilarityBatch => ps::BATCH_QUERIES * ps::DIM,
            _ => ps::DIM,
        }) + ps::QUERIES * ps::DIM;
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
            OpKind::ScoreCandidates | OpKind::ScoreCandidatesResident => {
                values / ps::DIM as u64 * (ps::QUERIES * ps::DIM / 4) as u64
            }
            OpKind::KMeans => values / ps::KM_DIM as u64 * (ps::KM_DIM * ps::KM_CLUSTERS) as u64,
            OpKind::KnnBatch | OpKind::SimilarityBatch => {
                values / ps::DIM as u64 * (ps::BATCH_QUERIES * ps::DIM) as u64
            }
            _ => values / ps::DIM as u64 * (ps::QUERIES * ps::DIM) as u64,
        }
    }

    /// The work a probe call of `op` asked for `work` does: whole rows, nodes and points, within what the
    /// probe holds (calibration records this, not the size asked for, so a break-even size is a real
    /// call's work).
    pub fn work_of(&self, op: OpKind, work: u64) -> u64 {
        let (q, d) = (ps::QUERIES as u64, ps::DIM as u64);
        let max_rows = (self.values().len() / ps::DIM) as u64;
        match op {
            OpKind::Spread | OpKind::SpreadResident => {
                let per_node = (ps::EDGES_PER_NODE * ps::HOPS) as u64;
                (work / per_node).clamp(16, 1 << 24) * per_node
            }
            OpKind::ScoreCandidates | OpKind::ScoreCandidatesResident => {
                let rows = (work / (q * d / 4)).clamp(ps::K as u64, max_rows.max(ps::K as u64));
                q * ps::candidates(rows as usize) as u64 * d
            }
            OpKind::KMeans => {
                let per_point = (ps::KM_DIM * ps::KM_CLUSTERS) as u64;
                let max_points = (self.values().len() / ps::KM_DIM) as u64;
                (work / per_point).clamp(ps::KM_CLUSTERS as u64, max_points) * per_point
            }
            OpKind::ClipAndNoise => (work / d).clamp(1, max_rows) * d,
            OpKind::KnnBatch | OpKind::SimilarityBatch => {
                let b = ps::BATCH_QUERIES as u64;
                b * batch_rows(work).clamp(b, max_rows.max(b)) * d
            }
            _ => q * dense_rows(work).min(max_rows) * d,
        }
    }

    /// Make what a caller of `op` at `work` prepares once (outside the timed call): the graph and seeds
    /// of a spreading call, the candidate lists, the corpus handle. Idempotent for a size.
    pub fn prepare(&self, op: OpKind, work: u64) -> Result<(), BackendError> {
        match op {
            OpKind::Spread | OpKind::SpreadResident => self.probe_graph(work).map(drop),
            OpKind::ScoreCandidates => self.probe_candidates(work).map(drop),
            OpKind::ScoreCandidatesResident => {
                let c = self.probe_candidates(work)?;
                self.corpus_of_rows(c.rows).map(drop)
            }
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
        self.corpus_of_rows(rows)
    }

    /// A corpus handle over the probe's first `rows` rows (at most what it holds).
    fn corpus_of_rows(
        &self,
        rows: usize,
    ) -> Result<crate::shared_corpus::SharedCorpus, BackendError> {
        let rows = rows.min(self.values().len() / ps::DIM);
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
            OpKind::KnnBatch | OpKind::SimilarityBatch => {
                let rows = (self.work_of(op, work) / (ps::BATCH_QUERIES * dim) as u64) as usize;
                let c = &self.values()[..rows * dim];
                let q = &self.values()[..ps::BATCH_QUERIES * dim];
                if op == OpKind::KnnBatch {
                    backend
                        .knn(q, c, dim, Metric::Cosine, rows.min(ps::K))
                        .map(drop)
                } else {
                    backend.similarity(q, c, dim, Metric::Cosine).map(drop)
                }
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
            OpKind::ScoreCandidatesResident => {
                let c = self.probe_candidates(work)?;
                let corpus = self.corpus_of_rows(c.rows)?;
                backend
                    .score_candidates_shared(
                        q,
                        &corpus,
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

/// Rows of `knn_batch`'s probe at `work`.
fn batch_rows(work: u64) -> u64 {
    (work / (ps::BATCH_QUERIES * ps::DIM) as u64).max(1)
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
    let config = probe_config(op, probe, config);
    let mut measure = probe_measure(op, probe, cpu, gpu, clock);
    let work_of = |w| probe.work_of(op, w);
    calibrate_points(op, gpu.device(), &config, &mut measure, &work_of).map(|(c, _)| c)
}

/// `config` with its largest size capped at what `probe` can run for `op`.
fn probe_config(op: OpKind, probe: &Probe, config: &CalibrationConfig) -> CalibrationConfig {
    CalibrationConfig {
        max_work: config.max_work.min(probe.max_work(op)),
        ..*config
    }
}

/// One timed probe call of `op` on `cpu` or `gpu`, its inputs prepared outside the measurement.
fn probe_measure<'a>(
    op: OpKind,
    probe: &'a Probe,
    cpu: &'a dyn Backend,
    gpu: &'a dyn Backend,
    clock: &'a dyn crate::Clock,
) -> impl FnMut(Device, u64) -> Result<Duration, BackendError> + 'a {
    move |d: Device, work: u64| -> Result<Duration, BackendError> {
        let b = if d == Device::Cpu { cpu } else { gpu };
        probe.prepare(op, work)?;
        let t0 = clock.now();
        probe.run(op, b, work)?;
        Ok(clock.now().saturating_sub(t0))
    }
}

/// Calibration's break-even against the crossover of a sweep of every [`grid`] size of the same probe,
/// both with [`measure_point`] and [`crossover`]: what `recall bench break-even` prints per op.
#[derive(Debug, Clone, PartialEq)]
pub struct BreakEvenCheck {
    pub op: OpKind,
    /// What calibration found (`u64::MAX`: the GPU never paid in its range).
    pub calibrated: u64,
    /// The points calibration measured (sorted by work).
    pub calibration_points: Vec<Point>,
    /// How long calibration took, seconds.
    pub calibration_s: f64,
    /// The smallest swept size from which the GPU stayed at least as fast (`None`: it never did).
    pub swept: Option<u64>,
    /// Every swept point.
    pub sweep_points: Vec<Point>,
    /// The smallest and largest size swept.
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

    /// Issue 7's test: the calibrated break-even within 20 % of the swept crossover, or both saying the
    /// GPU never pays in the range.
    pub fn within_20_percent(&self) -> bool {
        match (self.ratio(), self.swept) {
            (Some(x), _) => (0.8..=1.2).contains(&x),
            (None, None) => self.calibrated == u64::MAX,
            _ => false,
        }
    }

    /// [`tie_band`] of the sweep: where the two devices are within noise of each other.
    pub fn tie_band(&self) -> Option<(u64, u64, usize)> {
        tie_band(&self.sweep_points)
    }
}

/// Calibrate with `calibration` timings and sweep with `swept` timings (two measurements of the same
/// calls): see [`BreakEvenCheck`]. [`check_break_even`] runs it on a probe; tests on synthetic timings.
pub fn check_with(
    op: OpKind,
    gpu: Device,
    config: &CalibrationConfig,
    calibration: &mut Measure<'_>,
    swept: &mut Measure<'_>,
    work_of: &WorkOf<'_>,
) -> Result<BreakEvenCheck, BackendError> {
    let t0 = std::time::Instant::now();
    let (cal, calibration_points) = calibrate_points(op, gpu, config, calibration, work_of)?;
    let calibration_s = t0.elapsed().as_secs_f64();
    let sweep = sweep(gpu, config, swept, work_of)?;
    let sizes: Vec<u64> = grid(config.min_work, config.max_work)
        .into_iter()
        .map(work_of)
        .collect();
    Ok(BreakEvenCheck {
        op,
        calibrated: cal.break_even,
        calibration_points,
        calibration_s,
        swept: sweep.crossover,
        sweep_points: sweep.points,
        range: (sizes[0], sizes[sizes.len() - 1]),
    })
}

/// Calibrate `op` as the executor does (the production procedure and probe, `config`), then sweep every
/// grid size of the same probe with the same statistic: see [`BreakEvenCheck`].
pub fn check_break_even(
    op: OpKind,
    cpu: &dyn Backend,
    gpu: &dyn Backend,
    config: &CalibrationConfig,
) -> Result<BreakEvenCheck, BackendError> {
    let clock = crate::clock::system_clock();
    let probe = Probe::new(op, config.max_work);
    let config = probe_config(op, &probe, config);
    let mut calibration = probe_measure(op, &probe, cpu, gpu, clock.as_ref());
    let mut swept = probe_measure(op, &probe, cpu, gpu, clock.as_ref());
    let work_of = |w| probe.work_of(op, w);
    check_with(
        op,
        gpu.device(),
        &config,
        &mut calibration,
        &mut swept,
        &work_of,
    )
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

/// Format 4: break-even sizes on the [`grid`], best-of-N on both devices ([`measure_point`]), k-means probed
/// with [`probe_shape::KM_CLUSTERS`] = 256 clusters, no break-even unless the GPU wins clearly at the largest
/// size ([`crossover`]). Files of earlier formats (1: median of 3, bisection and interpolation; 2: k-means
/// probed with 16 clusters; 3: a tie at the largest size could be a break-even) are ignored and measured again.
const HEADER: &str = "# recall dispatch calibration, format 4";

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
    fn finds_a_linear_crossover_at_the_first_grid_size_past_it() {
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
            // The first grid size at or past the crossover: at most one step of 1.19 above it.
            let x = cal.break_even as f64 / truth;
            assert!(
                (1.0..GRID_STEP).contains(&x),
                "found {} truth {truth}",
                cal.break_even
            );
            let sizes = grid(1 << 12, 1 << 28);
            let expect = sizes.iter().find(|&&w| w as f64 >= truth).copied();
            assert_eq!(Some(cal.break_even), expect);
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

    /// Calibration of a GPU 1 % faster at every size (models parallel, within noise everywhere) finds no
    /// break-even: a tie at the largest size is none ([`crossover`]; the cases are in the executor's tests).
    #[test]
    fn a_tie_at_the_largest_size_is_no_break_even() {
        let g = Device::Gpu { ordinal: 0 };
        let cfg = CalibrationConfig::default();
        let cpu = LinearModel {
            fixed_s: 1e-6,
            per_work_s: 1e-10,
        };
        let parallel = LinearModel {
            fixed_s: 0.99e-6,
            per_work_s: 0.99e-10,
        };
        let tied = calibrate(OpKind::CosineScores, g, &cfg, &mut synthetic(cpu, parallel)).unwrap();
        assert_eq!(tied.break_even, u64::MAX);
    }

    /// A probe that clamps small sizes up to its smallest call is measured once there, not once per grid size;
    /// exact work (`|w| w`) keeps the whole grid.
    #[test]
    fn sizes_of_the_same_call_are_measured_once() {
        let exact = distinct_grid(1 << 12, 1 << 28, &|w| w);
        assert_eq!(exact, grid(1 << 12, 1 << 28));
        let smallest = 2_097_152u64;
        let clamped = distinct_grid(1 << 12, 1 << 28, &|w: u64| w.max(smallest));
        let grid_all = grid(1 << 12, 1 << 28);
        let below = grid_all.iter().filter(|w| **w <= smallest).count();
        assert_eq!(clamped.len(), grid_all.len() - below + 1, "{clamped:?}");
        assert_eq!(clamped[0], grid_all[0]);
        assert!(clamped[1..].iter().all(|w| *w > smallest));
        let works: Vec<u64> = clamped.iter().map(|w| (*w).max(smallest)).collect();
        assert!(works.windows(2).all(|p| p[0] < p[1]), "{works:?}");
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
        // Files of formats 1 to 3 (another procedure; k-means probed with 16 clusters; a tie at the largest size
        // taken as a break-even) are measured again, not read.
        for format in ["format 1", "format 2", "format 3"] {
            let old = text.replace("format 4", format);
            assert_ne!(old, text);
            assert!(parse_cache(&old, "H200 | sm_90").is_empty());
        }
        let dir = std::env::temp_dir().join(format!("recall-cal-test-{}", std::process::id()));
        store_cache(&dir, "k/ey", &c).unwrap();
        assert_eq!(load_cache(&dir, "k/ey"), vec![c]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn batches_need_enough_queries_rows_and_values_and_count_at_most_128_a_row() {
        use probe_shape::{BATCH_QUERIES as B, DIM, batch_work, is_batch, is_scores_batch};
        assert!(is_batch(B, B));
        assert!(!is_batch(B - 1, B) && !is_batch(B, B - 1));
        assert!(is_scores_batch(B, B, DIM) && is_scores_batch(B, B, 768));
        assert!(!is_scores_batch(B, B, DIM - 1) && !is_scores_batch(B - 1, B, 768));
        assert_eq!(batch_work(B, 1000, 16), (B * 1000 * 16) as u64);
        assert_eq!(batch_work(B, 1000, DIM), (B * 1000 * DIM) as u64);
        assert_eq!(batch_work(B, 1000, 768), (B * 1000 * DIM) as u64);
        assert_eq!(batch_work(usize::MAX, usize::MAX, 768), u64::MAX);
        for name in ["knn_batch", "similarity_batch"] {
            let op = OpKind::from_name(name).expect("a kind");
            assert_eq!(op.name(), name);
            assert_eq!(
                parse_overrides(&format!("{name}=1234")),
                Ok(vec![(op, 1234)])
            );
        }
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

    #[test]
    fn the_probe_check_runs_every_op_on_the_cpu() {
        // Both "devices" are the CPU backend: no crossover to assert, but every op's probe, its
        // preparation and its work sizes go through the same path as on a GPU machine.
        let cfg = CalibrationConfig {
            min_work: 1 << 12,
            max_work: 1 << 16,
            reps: 1,
        };
        let cpu = crate::CpuBackend;
        for op in OpKind::ALL {
            let c = check_break_even(op, &cpu, &cpu, &cfg).unwrap();
            let probe = Probe::new(op, cfg.max_work);
            let sizes = grid(cfg.min_work, cfg.max_work);
            let works: Vec<u64> = c.sweep_points.iter().map(|p| p.work).collect();
            // Every distinct call of the grid, once.
            let mut want: Vec<u64> = sizes.iter().map(|&w| probe.work_of(op, w)).collect();
            want.dedup();
            assert_eq!(works, want, "{op}");
            assert!(works.windows(2).all(|w| w[0] < w[1]), "{op}: {works:?}");
            assert_eq!(c.range, (want[0], want[want.len() - 1]), "{op}");
            assert!(c.calibration_points.len() <= c.sweep_points.len(), "{op}");
            for p in c.sweep_points.iter().chain(&c.calibration_points) {
                assert!(p.cpu_s > 0.0 && p.gpu_s > 0.0 && p.reps >= 1, "{op}: {p:?}");
            }
            if let Some(s) = c.swept {
                assert!(works.contains(&s), "{op}: {s}");
            }
        }
        // Whole rows, nodes and points: the dense ops do 8 x 128 multiply-adds per corpus row.
        let p = Probe::new(OpKind::CosineScores, 1 << 20);
        assert_eq!(p.work_of(OpKind::CosineScores, 5000), 4096);
        assert_eq!(p.work_of(OpKind::Spread, 5000), 4992);
        assert_eq!(p.work_of(OpKind::ClipAndNoise, 1000), 896);
    }
}
