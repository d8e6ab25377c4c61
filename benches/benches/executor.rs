//! The executor's own costs: dispatch overhead per call (against calling a backend directly), the same
//! overhead as a share of a call at the break-even size, single-query throughput and tail latency with
//! dynamic batching, and (with a GPU) the calibrated break-even against a swept crossover.
//!
//! `RECALL_BENCH_ROWS` sets the batching corpus size (default 2,000 rows x 768; use 1,000,000 on a GPU
//! machine), `RECALL_BENCH_THREADS` the client threads (default 16).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use recall_hybrid_executor::calibration::{self, Probe};
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

    // At the default break-even size (2^24 multiply-adds: 16 x 4096 x 256) on the CPU: the executor's
    // share of the call is the difference of these two.
    let mut g = c.benchmark_group("cpu/cosine_at_break_even");
    g.sample_size(20);
    let (q, corpus) = (matrix(3, 16, 256), matrix(4, 4096, 256));
    let exec = Executor::with_backends(quiet_config(), Arc::new(CpuBackend), None).unwrap();
    g.bench_function("direct", |b| {
        b.iter(|| CpuBackend.cosine_scores(black_box(&q), black_box(&corpus), 256))
    });
    g.bench_function("executor", |b| {
        b.iter(|| exec.cosine_scores(black_box(&q), black_box(&corpus), 256))
    });
    g.finish();
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

/// With a GPU: calibration's break-even against a fine sweep (x1.19 apart) of the same probe.
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
    let op = OpKind::CosineScores;
    let cfg = calibration::CalibrationConfig::default();
    let probe = Probe::new(op, cfg.max_work);
    let time = |b: &dyn Backend, w: u64| -> Result<Duration, BackendError> {
        let mut best = Duration::MAX;
        for _ in 0..5 {
            let t0 = Instant::now();
            probe.run(op, b, w)?;
            best = best.min(t0.elapsed());
        }
        Ok(best)
    };
    let gpu_device = gpu.device();
    let mut measure = |d: Device, w: u64| {
        let b: &dyn Backend = if d == Device::Cpu { &CpuBackend } else { gpu };
        time(b, w)
    };
    let cal = calibration::calibrate(op, gpu_device, &cfg, &mut measure).unwrap();
    let mut w = cfg.min_work as f64;
    let mut swept = None;
    while w <= cfg.max_work as f64 {
        let (tc, tg) = (
            time(&CpuBackend, w as u64).unwrap(),
            time(gpu, w as u64).unwrap(),
        );
        if tg < tc && swept.is_none() {
            swept = Some(w as u64);
        } else if tg >= tc {
            swept = None;
        }
        w *= 1.19;
    }
    match swept {
        Some(s) => eprintln!(
            "crossover check: calibrated break-even {} vs swept {} ({:+.1} %)",
            cal.break_even,
            s,
            (cal.break_even as f64 / s as f64 - 1.0) * 100.0
        ),
        None => eprintln!(
            "crossover check: the GPU never stays faster up to {} (calibrated {})",
            cfg.max_work, cal.break_even
        ),
    }
}

criterion_group!(
    benches,
    dispatch_overhead,
    batching_throughput,
    crossover_check
);
criterion_main!(benches);
