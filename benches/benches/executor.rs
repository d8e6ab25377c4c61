//! The executor's own costs: dispatch overhead per call (against calling a backend directly), the same
//! overhead as a share of a call at the break-even size, single-query throughput and tail latency with
//! dynamic batching, and (with a GPU) the calibrated break-even against a swept crossover.
//!
//! `RECALL_BENCH_ROWS` sets the batching corpus size (default 2,000 rows x 768; use 1,000,000 on a GPU
//! machine), `RECALL_BENCH_THREADS` the client threads (default 16).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use recall_hybrid_executor::calibration;
use recall_hybrid_executor::{
    Backend, BackendError, BatchConfig, CallOptions, CorpusRef, CpuBackend, Device, DevicePolicy,
    Executor, ExecutorConfig, OpKind,
};
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Returns zeros at once: what is left of a call is the executor's own work.
#[derive(Debug)]
struct Null;

impl Backend for Null {
    fn device(&self) -> Device {
        Device::Cpu
    }

    fn cosine_scores(&self, q: &[f32], c: &[f32], dim: usize) -> Result<Vec<f32>, BackendError> {
        Ok(vec![0.0; (q.len() / dim) * (c.len() / dim)])
    }
}

/// The CPU backend as it was before it trusted the executor's validation: it runs `recall-cpu-simd`'s
/// validating entry point, so a call through the executor checked every value twice.
#[derive(Debug)]
struct ValidatingCpu;

impl Backend for ValidatingCpu {
    fn device(&self) -> Device {
        Device::Cpu
    }

    fn cosine_scores(&self, q: &[f32], c: &[f32], dim: usize) -> Result<Vec<f32>, BackendError> {
        Ok(recall_cpu_simd::similarity(
            q,
            &recall_cpu_simd::Corpus::f32(c, dim),
            recall_cpu_simd::Metric::Cosine,
        )?)
    }
}

fn matrix(seed: u64, rows: usize, dim: usize) -> Vec<f32> {
    let mut s = seed | 1;
    (0..rows * dim)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn quiet_config() -> ExecutorConfig {
    ExecutorConfig {
        calibrate: false,
        use_cache: false,
        ..ExecutorConfig::default()
    }
}

fn dispatch_overhead(c: &mut Criterion) {
    let mut g = c.benchmark_group("executor/dispatch_overhead");
    let (q, corpus) = (matrix(1, 1, 4), matrix(2, 1, 4));
    let exec = Executor::with_backends(quiet_config(), Arc::new(Null), None).unwrap();
    g.bench_function("direct_null_backend", |b| {
        b.iter(|| Null.cosine_scores(black_box(&q), black_box(&corpus), 4))
    });
    g.bench_function("executor_null_backend", |b| {
        b.iter(|| exec.cosine_scores(black_box(&q), black_box(&corpus), 4))
    });
    // The same through a tenant's queue (uncontended).
    let t = exec.add_tenant(recall_hybrid_executor::TenantConfig::new("bench"));
    let opts = CallOptions::tenant(t);
    g.bench_function("executor_null_backend_tenant", |b| {
        b.iter(|| exec.cosine_scores_with(&opts, black_box(&q), black_box(&corpus), 4))
    });
    g.finish();

    // At the default break-even size (2^24 multiply-adds: 16 x 4096 x 256) on the CPU. `cpu_simd` is the
    // CPU engine called by itself (it validates its input once); `backend_prevalidated` is the executor's
    // CPU backend called directly (it trusts its input: no validation at all); `executor` validates once
    // and dispatches to that backend. The executor's overhead is `executor - cpu_simd`; the cost of
    // validation itself is `cpu_simd - backend_prevalidated`.
    let mut g = c.benchmark_group("cpu/cosine_at_break_even");
    g.sample_size(20);
    let (q, corpus) = (matrix(3, 16, 256), matrix(4, 4096, 256));
    let exec = Executor::with_backends(quiet_config(), Arc::new(CpuBackend), None).unwrap();
    g.bench_function("cpu_simd", |b| {
        b.iter(|| {
            recall_cpu_simd::similarity(
                black_box(&q),
                &recall_cpu_simd::Corpus::f32(black_box(&corpus), 256),
                recall_cpu_simd::Metric::Cosine,
            )
        })
    });
    g.bench_function("backend_prevalidated", |b| {
        b.iter(|| CpuBackend.cosine_scores(black_box(&q), black_box(&corpus), 256))
    });
    g.bench_function("executor", |b| {
        b.iter(|| exec.cosine_scores(black_box(&q), black_box(&corpus), 256))
    });
    // Before: the executor over a CPU backend that validated again (commit 074ab54 and earlier).
    let twice = Executor::with_backends(quiet_config(), Arc::new(ValidatingCpu), None).unwrap();
    g.bench_function("executor_validating_twice", |b| {
        b.iter(|| twice.cosine_scores(black_box(&q), black_box(&corpus), 256))
    });
    g.finish();
}

/// The same four calls at the break-even size, interleaved round by round (so a shared machine's load
/// drifts over all of them alike): per-variant medians and the median per-round difference against
/// `cpu_simd`. Printed, not a criterion measurement.
fn paired_break_even(_: &mut Criterion) {
    let rounds = env_usize("RECALL_BENCH_ROUNDS", 400);
    let (q, corpus) = (matrix(3, 16, 256), matrix(4, 4096, 256));
    let exec = Executor::with_backends(quiet_config(), Arc::new(CpuBackend), None).unwrap();
    let twice = Executor::with_backends(quiet_config(), Arc::new(ValidatingCpu), None).unwrap();
    let c = recall_cpu_simd::Corpus::f32(&corpus, 256);
    let variants: [(&str, &dyn Fn()); 4] = [
        ("cpu_simd (validates once)", &|| {
            black_box(
                recall_cpu_simd::similarity(&q, &c, recall_cpu_simd::Metric::Cosine).unwrap(),
            );
        }),
        ("backend_prevalidated (no validation)", &|| {
            black_box(CpuBackend.cosine_scores(&q, &corpus, 256).unwrap());
        }),
        ("executor (validates once)", &|| {
            black_box(exec.cosine_scores(&q, &corpus, 256).unwrap());
        }),
        ("executor_validating_twice (before)", &|| {
            black_box(twice.cosine_scores(&q, &corpus, 256).unwrap());
        }),
    ];
    let mut t = vec![Vec::with_capacity(rounds); variants.len()];
    for r in 0..rounds + 10 {
        // Rotate the order each round, so no variant always follows the same one.
        for i in 0..variants.len() {
            let t0 = Instant::now();
            variants[(i + r) % variants.len()].1();
            if r >= 10 {
                t[(i + r) % variants.len()].push(t0.elapsed().as_secs_f64() * 1e6);
            }
        }
    }
    let med = |xs: &[f64]| {
        let mut v = xs.to_vec();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    eprintln!("paired, {rounds} rounds, 16 x 4096 x 256 cosine (2^24 multiply-adds):");
    for (i, (name, _)) in variants.iter().enumerate() {
        let d: Vec<f64> = t[i].iter().zip(&t[0]).map(|(a, b)| a - b).collect();
        eprintln!(
            "  {name}: median {:.1} us; median per-round difference against cpu_simd {:+.1} us ({:+.2} %)",
            med(&t[i]),
            med(&d),
            100.0 * med(&d) / med(&t[0])
        );
    }
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn batching_throughput(c: &mut Criterion) {
    let rows = env_usize("RECALL_BENCH_ROWS", 2_000);
    let threads = env_usize("RECALL_BENCH_THREADS", 16);
    let dim = 768;
    let data = matrix(5, rows, dim);
    let corpus = CorpusRef::new(&data, dim).unwrap();
    let exec = Executor::new(ExecutorConfig {
        batching: BatchConfig {
            max_batch: 64,
            max_wait: Duration::from_micros(200),
            ..BatchConfig::default()
        },
        ..ExecutorConfig::default()
    })
    .unwrap();
    let device = if exec.gpu_backend().is_some() {
        "gpu"
    } else {
        "cpu"
    };
    let mut g = c.benchmark_group(format!("{device}/single_query_batched"));
    g.sample_size(10);
    let per_thread = 32;
    g.throughput(Throughput::Elements((threads * per_thread) as u64));
    let mut latencies_ns: Vec<u64> = Vec::new();
    g.bench_function(BenchmarkId::new(format!("{rows}x{dim}"), threads), |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let start = Instant::now();
                let lat: Vec<Vec<u64>> = std::thread::scope(|s| {
                    let handles: Vec<_> = (0..threads)
                        .map(|t| {
                            let (exec, corpus) = (&exec, &corpus);
                            s.spawn(move || {
                                let mut lat = Vec::with_capacity(per_thread);
                                for i in 0..per_thread {
                                    let q = matrix((t * 1000 + i) as u64 + 7, 1, dim);
                                    let t0 = Instant::now();
                                    let out = exec
                                        .cosine_scores_single(&CallOptions::default(), &q, corpus)
                                        .unwrap();
                                    lat.push(t0.elapsed().as_nanos() as u64);
                                    black_box(out);
                                }
                                lat
                            })
                        })
                        .collect();
                    handles.into_iter().map(|h| h.join().unwrap()).collect()
                });
                total += start.elapsed();
                latencies_ns.extend(lat.into_iter().flatten());
            }
            total
        })
    });
    g.finish();
    latencies_ns.sort_unstable();
    let q = |p: f64| latencies_ns[((latencies_ns.len() - 1) as f64 * p) as usize] as f64 / 1e6;
    if !latencies_ns.is_empty() {
        let h = exec.metrics().batch_sizes();
        eprintln!(
            "single-query latency on {device}: p50 {:.3} ms, p95 {:.3} ms, p99 {:.3} ms; mean batch {:.1}",
            q(0.5),
            q(0.95),
            q(0.99),
            h.sum() as f64 / h.count().max(1) as f64
        );
    }
}

/// With a GPU: every op's calibrated break-even against a sweep of every grid size (x1.19 apart) of the same probe
/// (`recall bench break-even` prints the same table from the release CLI).
fn crossover_check(_: &mut Criterion) {
    let exec = match Executor::new(ExecutorConfig {
        policy: DevicePolicy::Auto,
        ..quiet_config()
    }) {
        Ok(e) => e,
        Err(e) => return eprintln!("crossover check skipped: {e}"),
    };
    let Some(gpu) = exec.gpu_backend() else {
        return eprintln!(
            "crossover check skipped: no usable GPU ({:?})",
            exec.gpu_status()
        );
    };
    let cfg = calibration::CalibrationConfig::default();
    for op in OpKind::ALL {
        match calibration::check_break_even(op, &CpuBackend, gpu, &cfg) {
            Ok(c) => eprintln!(
                "crossover check {op}: calibrated break-even {} vs swept {:?} (ratio {:?}; within noise {:?}; calibration {:.2} s)",
                c.calibrated,
                c.swept,
                c.ratio(),
                c.tie_band(),
                c.calibration_s
            ),
            Err(e) => eprintln!("crossover check {op}: {e}"),
        }
    }
}

criterion_group!(
    benches,
    dispatch_overhead,
    paired_break_even,
    batching_throughput,
    crossover_check
);
criterion_main!(benches);
