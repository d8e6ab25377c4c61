//! Lifecycle and concurrency: stand-in GPUs that panic, the breaker's probe.

use super::*;
use recall_hybrid_executor::CalibrationConfig;

/// A stand-in GPU whose every op panics (a bug or a driver binding below the GPU backend).
#[derive(Debug)]
struct Panicking;

impl Backend for Panicking {
    fn device(&self) -> Device {
        GPU
    }

    fn similarity(
        &self,
        _: &[f32],
        _: &[f32],
        _: usize,
        _: recall_cpu_simd::Metric,
    ) -> Result<Vec<f32>, BackendError> {
        panic!("planted: the GPU backend panicked")
    }
}

/// A GPU whose backend panics while the executor calibrates on a call's first use: the call is answered
/// on the CPU, as a panic in the call's own GPU run is (it must never reach the caller).
#[test]
fn a_gpu_that_panics_while_calibrating_still_answers_on_the_cpu() {
    let clock = ManualClock::new();
    let cfg = ExecutorConfig {
        calibrate: true,
        use_cache: false,
        gpu_min_work: 1 << 24,
        calibration: CalibrationConfig {
            max_work: 1 << 16,
            reps: 1,
            ..CalibrationConfig::default()
        },
        ..config(&clock)
    };
    let exec =
        Executor::with_backends(cfg, Arc::new(CpuBackend), Some(Arc::new(Panicking))).unwrap();
    let (q, c) = (matrix(1, 1, 8), matrix(2, 5, 8));
    for _ in 0..2 {
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            exec.cosine_scores(&q, &c, 8)
        }));
        let out = out.expect("the call did not panic").expect("answered");
        assert_eq!(out.device, Device::Cpu);
        assert_eq!(bits(&out.value), bits(&cpu(&q, &c, 8)));
    }
}

/// A stand-in GPU: lost (0), out of memory with a `release_cached_memory` that panics (1), or healthy (2).
#[derive(Debug, Default)]
struct Phased {
    phase: std::sync::atomic::AtomicU8,
    calls: std::sync::atomic::AtomicU64,
}

impl Backend for Phased {
    fn device(&self) -> Device {
        GPU
    }

    fn release_cached_memory(&self) {
        if self.phase.load(std::sync::atomic::Ordering::SeqCst) == 1 {
            panic!("planted: giving cached memory back panicked");
        }
    }

    fn similarity(
        &self,
        q: &[f32],
        c: &[f32],
        dim: usize,
        metric: recall_cpu_simd::Metric,
    ) -> Result<Vec<f32>, BackendError> {
        self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        match self.phase.load(std::sync::atomic::Ordering::SeqCst) {
            0 => Err(BackendError::DeviceLost("planted".into())),
            1 => Err(BackendError::OutOfMemory("planted".into())),
            _ => CpuBackend.similarity(q, c, dim, metric),
        }
    }
}

/// The breaker's probe call runs out of memory and the backend panics while giving its cached memory back:
/// the call is still answered (on the CPU), and the breaker is not left half-open with its probe taken for
/// good (every later call kept off a GPU that works again).
#[test]
fn a_panic_while_the_probe_gives_memory_back_neither_reaches_the_caller_nor_sticks_the_breaker() {
    use std::sync::atomic::Ordering;
    let gpu = Arc::new(Phased::default());
    let clock = ManualClock::new();
    let exec =
        Executor::with_backends(config(&clock), Arc::new(CpuBackend), Some(gpu.clone())).unwrap();
    let (q, c) = (matrix(1, 1, 8), matrix(2, 5, 8));
    let want = bits(&cpu(&q, &c, 8));
    let call = || {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            exec.cosine_scores(&q, &c, 8)
        }))
        .expect("the call did not panic")
        .expect("answered")
    };
    // Lost: the breaker opens.
    let out = call();
    assert_eq!((out.device, bits(&out.value)), (Device::Cpu, want.clone()));
    // After the back-off the next call probes; it runs out of memory and giving memory back panics.
    clock.advance(Duration::from_secs(11));
    gpu.phase.store(1, Ordering::SeqCst);
    let out = call();
    assert_eq!((out.device, bits(&out.value)), (Device::Cpu, want.clone()));
    // The GPU works again: after at most the longest back-off a probe reaches it and the breaker closes.
    gpu.phase.store(2, Ordering::SeqCst);
    clock.advance(Duration::from_secs(100));
    let before = gpu.calls.load(Ordering::SeqCst);
    let out = call();
    assert_eq!((out.device, bits(&out.value)), (GPU, want));
    assert_eq!(gpu.calls.load(Ordering::SeqCst), before + 1);
}
