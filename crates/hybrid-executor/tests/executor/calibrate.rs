//! Calibration on first use with backends that report synthetic timings through the executor's clock;
//! cache, overrides, live throughput, explain.

use super::*;
use recall_cpu_simd::Metric;
use recall_hybrid_executor::calibration::{self, model_crossover};
use recall_hybrid_executor::{CalibrationConfig, LinearModel, OpKind, Reason, ThresholdSource};
use std::sync::atomic::{AtomicU64, Ordering};

/// Answers like the CPU, and advances the shared clock by `model(work) * slowdown`.
#[derive(Debug)]
struct Synthetic {
    clock: Arc<ManualClock>,
    model: LinearModel,
    device: Device,
    slowdown: AtomicU64,
    calls: AtomicU64,
}

impl Synthetic {
    fn new(
        clock: &Arc<ManualClock>,
        device: Device,
        fixed_s: f64,
        per_work_s: f64,
    ) -> Arc<Synthetic> {
        Arc::new(Synthetic {
            clock: clock.clone(),
            model: LinearModel {
                fixed_s,
                per_work_s,
            },
            device,
            slowdown: AtomicU64::new(1),
            calls: AtomicU64::new(0),
        })
    }
}

impl Backend for Synthetic {
    fn device(&self) -> Device {
        self.device
    }

    fn cosine_scores(&self, q: &[f32], c: &[f32], dim: usize) -> Result<Vec<f32>, BackendError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let work = (q.len() / dim * c.len()) as u64;
        let secs = self.model.predict(work) * self.slowdown.load(Ordering::SeqCst) as f64;
        self.clock.advance(Duration::from_secs_f64(secs));
        Ok(vec![0.0; q.len() / dim * (c.len() / dim)])
    }
}

// CPU 2 us + 1 ns per multiply-add; GPU 100 us + 0.02 ns: they cross at 100,000.
const CROSSOVER: f64 = 98e-6 / 0.98e-9;

fn setup(
    cache: Option<&std::path::Path>,
) -> (Executor, Arc<Synthetic>, Arc<Synthetic>, Arc<ManualClock>) {
    let clock = ManualClock::new();
    let cpu_b = Synthetic::new(&clock, Device::Cpu, 2e-6, 1e-9);
    let gpu_b = Synthetic::new(&clock, GPU, 100e-6, 0.02e-9);
    let cfg = ExecutorConfig {
        calibrate: true,
        gpu_min_work: 1 << 24,
        use_cache: cache.is_some(),
        cache_dir: cache.map(|p| p.to_path_buf()),
        calibration: CalibrationConfig {
            max_work: 1 << 20,
            ..CalibrationConfig::default()
        },
        ..config(&clock)
    };
    let exec = Executor::with_backends(cfg, cpu_b.clone(), Some(gpu_b.clone())).unwrap();
    (exec, cpu_b, gpu_b, clock)
}

/// What "the bench" measures: the smallest size, on a fine sweep (x1.02 apart), from which the GPU is
/// faster, timing the same backends through the same clock.
fn swept_crossover(cpu_b: &Synthetic, gpu_b: &Synthetic, clock: &ManualClock) -> f64 {
    let time = |b: &Synthetic, work: u64| {
        let rows = (work / 256).max(1) as usize;
        let (q, c) = (vec![0.5f32; 256], vec![0.5f32; rows * 256]);
        let t0 = recall_hybrid_executor::Clock::now(clock);
        b.cosine_scores(&q, &c, 256).unwrap();
        recall_hybrid_executor::Clock::now(clock) - t0
    };
    let mut w = 1024.0f64;
    while w < 1e9 {
        if time(gpu_b, w as u64) < time(cpu_b, w as u64) {
            return w;
        }
        w *= 1.02;
    }
    f64::INFINITY
}

#[test]
fn calibrates_on_first_use_within_20_percent_of_the_swept_crossover() {
    let dir = std::env::temp_dir().join(format!("recall-exec-cal-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (exec, cpu_b, gpu_b, clock) = setup(Some(&dir));
    // Before the first call: the default, and explain does not calibrate.
    let d = exec.explain_op(OpKind::CosineScores, 50_000);
    assert!(
        matches!(
            d.reason,
            Reason::BelowBreakEven { source: ThresholdSource::Default, break_even, .. } if break_even == 1 << 24
        ),
        "{d}"
    );
    assert_eq!(gpu_b.calls.load(Ordering::SeqCst), 0);

    // First call: calibration runs, then the small call goes to the CPU.
    let q = matrix(1, 1, 4);
    let out = exec.cosine_scores(&q, &matrix(2, 3, 4), 4).unwrap();
    assert_eq!(out.device, Device::Cpu);
    let cal = exec.calibration(OpKind::CosineScores).expect("calibrated");
    let swept = swept_crossover(&cpu_b, &gpu_b, &clock);
    let err = (cal.break_even as f64 / swept - 1.0).abs();
    assert!(err < 0.20, "calibrated {} swept {swept}", cal.break_even);
    // A grid size: the first at or past the crossover, less than one step of 1.19 above it.
    let x = cal.break_even as f64 / CROSSOVER;
    assert!((1.0..calibration::GRID_STEP).contains(&x), "{x}");
    let d = exec.explain_op(OpKind::CosineScores, 1 << 20);
    assert_eq!(d.device, GPU);
    assert!(d.to_string().contains("(calibrated)"), "{d}");
    assert_eq!(exec.explain(1000).0, Device::Cpu);

    // Cached per device: a second executor reads it and measures nothing.
    let (exec2, _, gpu2, _) = setup(Some(&dir));
    let d = exec2.explain_op(OpKind::CosineScores, 1 << 20);
    assert!(
        matches!(
            d.reason,
            Reason::AboveBreakEven {
                source: ThresholdSource::Cached,
                ..
            }
        ),
        "{d}"
    );
    exec2.cosine_scores(&q, &matrix(2, 3, 4), 4).unwrap();
    assert_eq!(gpu2.calls.load(Ordering::SeqCst), 0);
    assert_eq!(exec2.calibration(OpKind::CosineScores), Some(cal));
    let files: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert_eq!(files.len(), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn live_throughput_moves_the_break_even() {
    let (exec, _, gpu_b, _) = setup(None);
    let q = matrix(1, 4, 64);
    let big = matrix(2, 1024, 64); // 262,144 multiply-adds: GPU-sized
    assert_eq!(exec.cosine_scores(&q, &big, 64).unwrap().device, GPU);
    let before = match exec.explain_op(OpKind::CosineScores, 0).reason {
        Reason::BelowBreakEven { break_even, .. } => break_even,
        other => panic!("{other}"),
    };
    // The GPU gets 4x slower (another process shares it): its moving average follows, the break-even
    // rises past this call's size, and the CPU takes it.
    gpu_b.slowdown.store(4, Ordering::SeqCst);
    let mut devices = Vec::new();
    for _ in 0..30 {
        devices.push(exec.cosine_scores(&q, &big, 64).unwrap().device);
    }
    assert_eq!(devices.last(), Some(&Device::Cpu), "{devices:?}");
    let d = exec.explain_op(OpKind::CosineScores, 0);
    match d.reason {
        Reason::BelowBreakEven {
            break_even,
            calibrated: Some(c),
            ..
        } => {
            assert!(break_even > 262_144 && break_even > before * 2, "{d}");
            // `before` is the calibrated size as live timings (a few ns off the fitted models) left it.
            assert!(
                (c as f64 / before as f64 - 1.0).abs() < 1e-3,
                "{c} {before}"
            );
            assert!(d.to_string().contains("moved from"), "{d}");
        }
        other => panic!("{other}"),
    }
}

#[test]
fn overrides_and_configured_thresholds_skip_calibration() {
    let clock = ManualClock::new();
    let gpu_b = Synthetic::new(&clock, GPU, 1.0, 0.0);
    let cfg = ExecutorConfig {
        calibrate: true,
        break_even: vec![(OpKind::CosineScores, 500)],
        ..config(&clock)
    };
    let exec = Executor::with_backends(cfg, Arc::new(CpuBackend), Some(gpu_b.clone())).unwrap();
    let d = exec.explain_op(OpKind::CosineScores, 499);
    assert_eq!(d.device, Device::Cpu);
    assert_eq!(
        d.to_string(),
        "cosine_scores on cpu: 499 work units < break-even 500 (override)"
    );
    exec.cosine_scores(&matrix(1, 1, 4), &matrix(1, 200, 4), 4)
        .unwrap();
    assert_eq!(gpu_b.calls.load(Ordering::SeqCst), 1);
    assert_eq!(exec.calibration(OpKind::CosineScores), None);

    // Calibration off: gpu_min_work, as configured.
    let (exec, _, _) = faulty(FaultPlan::new(), |c| c.gpu_min_work = 1000);
    assert_eq!(
        exec.explain(999),
        (
            Device::Cpu,
            "999 work units < break-even 1000 (configured)".to_string()
        )
    );
    assert_eq!(exec.explain(1000).0, GPU);
}

#[test]
fn forced_devices() {
    let clock = ManualClock::new();
    let gpu: Arc<dyn Backend> = Arc::new(CpuBackend);
    let cfg = |policy| ExecutorConfig {
        policy,
        ..config(&clock)
    };
    let exec = Executor::with_backends(
        cfg(DevicePolicy::Cpu),
        Arc::new(CpuBackend),
        Some(gpu.clone()),
    )
    .unwrap();
    assert_eq!(
        exec.explain_op(OpKind::CosineScores, u64::MAX).reason,
        Reason::PolicyCpu
    );
    let exec =
        Executor::with_backends(cfg(DevicePolicy::Gpu), Arc::new(CpuBackend), Some(gpu)).unwrap();
    assert_eq!(
        exec.explain_op(OpKind::CosineScores, 0).reason,
        Reason::PolicyGpu
    );
    let err =
        Executor::with_backends(cfg(DevicePolicy::Gpu), Arc::new(CpuBackend), None).unwrap_err();
    assert!(matches!(
        err,
        recall_hybrid_executor::ExecError::GpuRequired(_)
    ));
    let exec =
        Executor::with_backends(cfg(DevicePolicy::Auto), Arc::new(CpuBackend), None).unwrap();
    assert!(matches!(
        exec.explain_op(OpKind::CosineScores, u64::MAX).reason,
        Reason::NoGpu(_)
    ));
    assert!(calibration::parse_overrides("cosine_scores=12").is_ok());
    let _ = model_crossover;
}

/// Calibration limited to sizes below an op's smallest probe call (k-means' 256 clusters, candidate scoring's `K`
/// rows, one clip-and-noise row): the probe runs its smallest call instead, or calibration fails and the default
/// break-even holds; never a panic in the caller's call (candidate scoring's probe read past its rows), and the
/// answers are the CPU's.
#[test]
fn calibration_below_an_ops_smallest_probe_uses_the_default() {
    let clock = ManualClock::new();
    let cfg = ExecutorConfig {
        calibrate: true,
        use_cache: false,
        calibration: CalibrationConfig {
            min_work: 16,
            max_work: 100,
            reps: 1,
        },
        ..config(&clock)
    };
    let gpu = Arc::new(FaultInjecting::new(CpuBackend, FaultPlan::new()));
    let exec = Executor::with_backends(cfg, Arc::new(CpuBackend), Some(gpu)).unwrap();
    let (q, c) = (matrix(5, 2, 4), matrix(6, 20, 4));
    let (offsets, ids) = ([0, 3, 6], [1, 5, 9, 0, 2, 19]);
    let want = CpuBackend
        .score_candidates(&q, &c, 4, Metric::Dot, &offsets, &ids, 2)
        .unwrap();
    let out = exec
        .score_candidates(
            &Default::default(),
            &q,
            &c,
            4,
            Metric::Dot,
            &offsets,
            &ids,
            2,
        )
        .unwrap();
    assert_eq!(out.value, want);
    let points = matrix(3, 40, 4);
    let want = CpuBackend.kmeans(&points, 4, 3, 2, 7).unwrap();
    let out = exec
        .kmeans(&Default::default(), &points, 4, 3, 2, 7)
        .unwrap();
    assert_eq!(out.value, want);
    let x = matrix(4, 5, 8);
    let want = CpuBackend.clip_and_noise(&x, 8, 1.0, 0.5, 9).unwrap();
    let out = exec
        .clip_and_noise(&Default::default(), &x, 8, 1.0, 0.5, 9)
        .unwrap();
    assert_eq!(bits(&out.value), bits(&want));
}

/// A knn over a plain slice whose time follows a device's shape, not its work alone: the CPU is bound by
/// memory at few queries and by multiply-adds at many; the GPU uploads queries and corpus, `(Q + N) d` values,
/// at a bus's speed. Answers like the CPU for the test's own calls (`dim` other than the probes' 128); the
/// calibration probes' answers are dropped, so none is computed for them.
#[derive(Debug)]
struct Shaped {
    clock: Arc<ManualClock>,
    device: Device,
}

impl Backend for Shaped {
    fn device(&self) -> Device {
        self.device
    }

    fn knn(
        &self,
        q: &[f32],
        c: &[f32],
        dim: usize,
        metric: Metric,
        k: usize,
    ) -> Result<recall_cpu_simd::TopK, BackendError> {
        let (nq, n, d) = ((q.len() / dim) as f64, (c.len() / dim) as f64, dim as f64);
        let secs = match self.device {
            // 50 GB/s of memory, 100 G multiply-adds a second.
            Device::Cpu => 2e-6 + (n * d * 4.0 / 50e9).max(nq * n * d / 1e11),
            // 10 GB/s up the bus, 10 T multiply-adds a second.
            _ => 100e-6 + (nq + n) * d * 4.0 / 10e9 + nq * n * d / 1e13,
        };
        self.clock.advance(Duration::from_secs_f64(secs));
        if dim == calibration::probe_shape::DIM {
            return Ok(recall_cpu_simd::TopK {
                k,
                ids: Vec::new(),
                scores: Vec::new(),
            });
        }
        CpuBackend.knn(q, c, dim, metric, k)
    }

    fn similarity(
        &self,
        q: &[f32],
        c: &[f32],
        dim: usize,
        metric: Metric,
    ) -> Result<Vec<f32>, BackendError> {
        let (nq, n, d) = ((q.len() / dim) as f64, (c.len() / dim) as f64, dim as f64);
        let secs = match self.device {
            // As knn, and the scores written at 20 GB/s.
            Device::Cpu => 2e-6 + (n * d * 4.0 / 50e9).max(nq * n * d / 1e11) + nq * n * 4.0 / 20e9,
            // As knn, and the scores downloaded at 10 GB/s.
            _ => 100e-6 + (nq + n) * d * 4.0 / 10e9 + nq * n * d / 1e13 + nq * n * 4.0 / 10e9,
        };
        self.clock.advance(Duration::from_secs_f64(secs));
        if dim == calibration::probe_shape::DIM {
            return Ok(Vec::new());
        }
        CpuBackend.similarity(q, c, dim, metric)
    }
}

/// An executor calibrating on first use with [`Shaped`] devices on `clock`.
fn shaped_executor(clock: &Arc<ManualClock>) -> Executor {
    let cfg = ExecutorConfig {
        calibrate: true,
        gpu_min_work: 1 << 24,
        ..config(clock)
    };
    let shaped = |device| {
        Arc::new(Shaped {
            clock: clock.clone(),
            device,
        })
    };
    Executor::with_backends(cfg, shaped(Device::Cpu), Some(shaped(GPU))).unwrap()
}

/// At 8 queries a call the upload outweighs the work at every size (`knn`'s break-even: never); at
/// `BATCH_QUERIES` the GPU wins from about 400 rows. A slice call of at least `BATCH_QUERIES` queries against at
/// least as many rows is `knn_batch` and goes to the GPU above that break-even; fewer queries, fewer rows, or
/// less work stay on the CPU. Without `knn_batch` the 256-query call below runs on the CPU.
#[test]
fn a_knn_batch_over_a_slice_has_its_own_break_even() {
    use recall_hybrid_executor::CallOptions;
    use recall_hybrid_executor::calibration::probe_shape::BATCH_QUERIES;
    let exec = shaped_executor(&ManualClock::new());
    let run = |nq: usize, rows: usize| {
        let (q, c) = (matrix(nq as u64, nq, 16), matrix(7, rows, 16));
        let out = exec
            .knn(&CallOptions::default(), &q, &c, 16, Metric::Cosine, 3)
            .unwrap();
        let want = CpuBackend.knn(&q, &c, 16, Metric::Cosine, 3).unwrap();
        assert_eq!(out.value, want, "{nq} queries over {rows} rows");
        out.device
    };
    assert_eq!(run(BATCH_QUERIES, 8_000), GPU);
    assert_eq!(run(2 * BATCH_QUERIES, 8_000), GPU);
    assert_eq!(run(BATCH_QUERIES - 1, 8_000), Device::Cpu);
    assert_eq!(run(8, 8_000), Device::Cpu);
    assert_eq!(run(2 * BATCH_QUERIES, BATCH_QUERIES - 1), Device::Cpu);
    assert_eq!(run(BATCH_QUERIES, 300), Device::Cpu);
    let knn = exec.explain_op(OpKind::Knn, 1 << 40);
    assert_eq!(knn.device, Device::Cpu, "{knn}");
    let batch = exec.explain_op(OpKind::KnnBatch, 256 * 8_000 * 16);
    assert_eq!(batch.device, GPU, "{batch}");
    let Reason::AboveBreakEven {
        break_even, source, ..
    } = batch.reason
    else {
        panic!("{batch}");
    };
    assert_eq!(source, ThresholdSource::Calibrated);
    // The probe's crossover: 128 values a row, from about 406 rows (the rows where the two times meet).
    let rows = break_even as f64 / (BATCH_QUERIES * calibration::probe_shape::DIM) as f64;
    assert!((380.0..520.0).contains(&rows), "{batch}: {rows} rows");
}

/// Dense scores over a slice: at 8 queries a call the GPU never wins (`similarity`'s break-even: never); at
/// `BATCH_QUERIES` it does from about 500 rows (the scores come back too). `similarity` and `cosine_similarity`
/// calls of at least `BATCH_QUERIES` queries against at least as many rows of at least 128 values are
/// `similarity_batch` and go to the GPU above its break-even; fewer queries, or shorter rows (whose scores are a
/// larger share of the call than the probe measured), stay on the CPU.
#[test]
fn a_scores_batch_over_a_slice_has_its_own_break_even() {
    use recall_hybrid_executor::CallOptions;
    use recall_hybrid_executor::calibration::probe_shape::BATCH_QUERIES;
    let clock = ManualClock::new();
    let cfg = ExecutorConfig {
        calibrate: true,
        gpu_min_work: 1 << 24,
        ..config(&clock)
    };
    let shaped = |device| {
        Arc::new(Shaped {
            clock: clock.clone(),
            device,
        })
    };
    let fresh =
        || Executor::with_backends(cfg.clone(), shaped(Device::Cpu), Some(shaped(GPU))).unwrap();
    let exec = fresh();
    let run_on = |exec: &Executor, nq: usize, rows: usize, dim: usize, cosine: bool| {
        let (q, c) = (matrix(nq as u64, nq, dim), matrix(7, rows, dim));
        let (out, want) = if cosine {
            let out = exec.cosine_scores(&q, &c, dim).unwrap();
            (out, CpuBackend.cosine_scores(&q, &c, dim).unwrap())
        } else {
            let out = exec
                .similarity(&CallOptions::default(), &q, &c, dim, Metric::L2)
                .unwrap();
            (out, CpuBackend.similarity(&q, &c, dim, Metric::L2).unwrap())
        };
        assert_eq!(bits(&out.value), bits(&want), "{nq} x {rows} x {dim}");
        out.device
    };
    let run = |nq, rows, dim, cosine| run_on(&exec, nq, rows, dim, cosine);
    assert_eq!(run(BATCH_QUERIES, 3_000, 160, false), GPU);
    assert_eq!(run(BATCH_QUERIES, 3_000, 160, true), GPU);
    assert_eq!(run(BATCH_QUERIES - 1, 3_000, 160, false), Device::Cpu);
    assert_eq!(run(BATCH_QUERIES - 1, 3_000, 160, true), Device::Cpu);
    assert_eq!(run(BATCH_QUERIES, 3_000, 96, false), Device::Cpu);
    assert_eq!(
        run(BATCH_QUERIES, BATCH_QUERIES - 1, 160, false),
        Device::Cpu
    );
    assert_eq!(run(8, 3_000, 160, true), Device::Cpu);
    // Rows of 768 count as 128 against the break-even (`batch_work`): 300 rows are 256 x 300 x 128, below the
    // probe's crossover of about 509 rows of 128, though 256 x 300 x 768 multiply-adds are above it. Such a
    // call stays on the CPU, where the upload per multiply-add could be more than the probe's at its
    // crossover (here the model's GPU would have won: the rule is conservative where fixed costs, not the
    // upload, set the crossover). On an executor of their own, whose break-even no earlier call has moved.
    let wide = fresh();
    assert_eq!(run_on(&wide, BATCH_QUERIES, 300, 768, false), Device::Cpu);
    assert_eq!(run_on(&wide, BATCH_QUERIES, 600, 768, false), GPU);
    let batch = exec.explain_op(OpKind::SimilarityBatch, 256 * 3_000 * 128);
    assert_eq!(batch.device, GPU, "{batch}");
    let Reason::AboveBreakEven {
        calibrated: Some(calibrated),
        ..
    } = batch.reason
    else {
        panic!("{batch}");
    };
    // The probe's crossover (before live timings move it): 128 values a row, from about 509 rows.
    let rows = calibrated as f64 / (BATCH_QUERIES * calibration::probe_shape::DIM) as f64;
    assert!((480.0..620.0).contains(&rows), "{batch}: {rows} rows");
}
