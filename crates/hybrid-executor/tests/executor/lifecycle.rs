//! Lifecycle and concurrency: stand-in GPUs that panic.

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
