//! Fault injection: every step, OOM splitting, a device lost mid-batch, the breaker.

use super::*;
use recall_hybrid_executor::{
    BreakerState, FallbackReason, FaultKind, FaultStep, OpKind, Reason, Transition, Trigger,
};

const DIM: usize = 16;

fn inputs(n_queries: usize) -> (Vec<f32>, Vec<f32>) {
    (matrix(1, n_queries, DIM), matrix(2, 37, DIM))
}

#[test]
fn no_fault_runs_on_the_gpu_with_the_cpu_answer() {
    let (exec, gpu, _) = faulty(FaultPlan::new(), |_| {});
    let (q, c) = inputs(8);
    let out = exec.cosine_scores(&q, &c, DIM).unwrap();
    assert_eq!(out.device, GPU);
    assert_eq!(out.fallback, None);
    assert_eq!(bits(&out.value), bits(&cpu(&q, &c, DIM)));
    assert_eq!(gpu.stats().calls, 1);
    assert_eq!(exec.counters(), (0, 1, 0));
}

#[test]
fn a_fault_at_every_step_gives_the_cpu_answer() {
    let (q, c) = inputs(8);
    let want = bits(&cpu(&q, &c, DIM));
    for step in FaultStep::ALL {
        for kind in [
            FaultKind::Gpu,
            FaultKind::OutOfMemory,
            FaultKind::DeviceLost,
        ] {
            let (exec, gpu, _) = faulty(
                FaultPlan::new().fail_as(step, Trigger::Always, kind),
                |_| {},
            );
            let out = exec.cosine_scores(&q, &c, DIM).unwrap();
            assert_eq!(bits(&out.value), want, "{step} {kind:?}");
            assert_eq!(out.device, Device::Cpu, "{step} {kind:?}");
            let msg = out.fallback.unwrap_or_default();
            assert!(msg.contains(&step.to_string()), "{step} {kind:?}: {msg}");
            let m = exec.metrics();
            assert_eq!(m.calls(OpKind::CosineScores, Device::Cpu), 1);
            assert_eq!(m.calls(OpKind::CosineScores, GPU), 0);
            assert_eq!(m.fallbacks_total(), 1);
            match kind {
                FaultKind::Gpu => {
                    assert_eq!(m.fallbacks(FallbackReason::GpuError), 1);
                    assert_eq!(gpu.stats().calls, 1);
                    assert_eq!(exec.breaker_state(), BreakerState::Closed);
                }
                FaultKind::OutOfMemory => {
                    // 8 -> 4 -> 2 -> 1 queries, then the CPU.
                    assert_eq!(m.fallbacks(FallbackReason::OutOfMemory), 1);
                    assert_eq!(m.oom_events(), 4);
                    assert_eq!(m.oom_splits(), 3);
                    assert_eq!(gpu.stats().calls, 4);
                    assert_eq!(exec.breaker_state(), BreakerState::Closed);
                }
                FaultKind::DeviceLost => {
                    assert_eq!(m.fallbacks(FallbackReason::DeviceLost), 1);
                    assert!(matches!(exec.breaker_state(), BreakerState::Open { .. }));
                    assert_eq!(m.breaker_transitions(Transition::Opened), 1);
                }
            }
            assert_eq!(exec.vram_in_use(), 0);
        }
    }
}

#[test]
fn a_fault_on_one_call_only_affects_that_call() {
    let (q, c) = inputs(4);
    let want = bits(&cpu(&q, &c, DIM));
    for step in [
        FaultStep::CopyIn,
        FaultStep::Launch,
        FaultStep::Sync,
        FaultStep::CopyOut,
    ] {
        let (exec, _, _) = faulty(FaultPlan::new().fail_at(step, 2), |_| {});
        let devices: Vec<Device> = (0..3)
            .map(|_| {
                let out = exec.cosine_scores(&q, &c, DIM).unwrap();
                assert_eq!(bits(&out.value), want);
                out.device
            })
            .collect();
        assert_eq!(devices, vec![GPU, Device::Cpu, GPU], "{step}");
        assert_eq!(exec.counters(), (1, 2, 1));
    }
}

#[test]
fn oom_halves_the_batch_and_stays_on_the_gpu() {
    // A device that holds at most 3 queries: 10 -> 5 -> 2, then five sub-batches of 2.
    let (exec, gpu, _) = faulty(FaultPlan::new().oom_above_units(3), |_| {});
    let (q, c) = inputs(10);
    let out = exec.cosine_scores(&q, &c, DIM).unwrap();
    assert_eq!(out.device, GPU);
    assert_eq!(out.fallback, None);
    assert_eq!(bits(&out.value), bits(&cpu(&q, &c, DIM)));
    let m = exec.metrics();
    assert_eq!(
        (m.oom_events(), m.oom_splits(), m.fallbacks_total()),
        (2, 2, 0)
    );
    assert_eq!(gpu.stats().calls, 7);
    assert_eq!(gpu.stats().successes, 5);
}

#[test]
fn oom_at_the_floor_falls_back() {
    let (exec, gpu, _) = faulty(FaultPlan::new().oom_above_units(2), |c| {
        c.oom_split_floor = 4
    });
    let (q, c) = inputs(16);
    let out = exec.cosine_scores(&q, &c, DIM).unwrap();
    assert_eq!(out.device, Device::Cpu);
    assert_eq!(bits(&out.value), bits(&cpu(&q, &c, DIM)));
    let m = exec.metrics();
    assert_eq!((m.oom_events(), m.oom_splits()), (3, 2));
    assert_eq!(m.fallbacks(FallbackReason::OutOfMemory), 1);
    assert_eq!(gpu.stats().calls, 3);
    // Out of memory says nothing about the GPU's health.
    assert_eq!(exec.breaker_state(), BreakerState::Closed);
}

#[test]
fn a_device_lost_mid_batch_is_survived() {
    // The device holds 2 queries; it is lost after two sub-batches of the split call.
    let plan = FaultPlan::new().oom_above_units(2).lose_device_after(2);
    let (exec, gpu, clock) = faulty(plan, |_| {});
    let (q, c) = inputs(8);
    let want = bits(&cpu(&q, &c, DIM));
    let out = exec.cosine_scores(&q, &c, DIM).unwrap();
    assert_eq!(out.device, Device::Cpu);
    assert_eq!(bits(&out.value), want);
    assert!(out.fallback.unwrap().contains("lost"));
    let m = exec.metrics();
    assert_eq!(m.fallbacks(FallbackReason::DeviceLost), 1);
    assert_eq!(gpu.stats().successes, 2);
    // The breaker keeps the next calls off the lost device.
    let calls_before = gpu.stats().calls;
    let d = exec.explain_op(OpKind::CosineScores, 1 << 30);
    assert_eq!(d.device, Device::Cpu);
    assert!(matches!(d.reason, Reason::BreakerOpen { .. }), "{d}");
    for _ in 0..3 {
        let out = exec.cosine_scores(&q, &c, DIM).unwrap();
        assert_eq!((out.device, bits(&out.value)), (Device::Cpu, want.clone()));
        assert_eq!(out.fallback, None);
    }
    assert_eq!(gpu.stats().calls, calls_before);
    assert_eq!(m.breaker_rejections(), 3);
    assert!(exec.prometheus_text().contains("recall_breaker_state 2\n"));
    // The probe after the back-off finds the device still lost: open again, longer. Before it, the breaker is
    // half-open, and its gauge says so (no call has recorded the change yet).
    clock.advance(Duration::from_secs(10));
    assert_eq!(exec.breaker_state(), BreakerState::HalfOpen);
    let text = exec.prometheus_text();
    assert!(text.contains("recall_breaker_state 1\n"), "{text}");
    let out = exec.cosine_scores(&q, &c, DIM).unwrap();
    assert_eq!((out.device, bits(&out.value)), (Device::Cpu, want.clone()));
    assert_eq!(
        exec.breaker_state(),
        BreakerState::Open {
            retry_in: Duration::from_secs(20)
        }
    );
    // The device comes back: the next probe succeeds and closes the breaker.
    gpu.revive();
    clock.advance(Duration::from_secs(20));
    let out = exec.cosine_scores(&q, &c, DIM).unwrap();
    assert_eq!((out.device, bits(&out.value)), (GPU, want));
    assert_eq!(exec.breaker_state(), BreakerState::Closed);
}

#[test]
fn the_breaker_opens_half_opens_and_closes() {
    // Launches fail on calls 1 to 4, then work.
    let mut plan = FaultPlan::new();
    for n in 1..=4 {
        plan = plan.fail_at(FaultStep::Launch, n);
    }
    let (exec, gpu, clock) = faulty(plan, |_| {});
    let (q, c) = inputs(3);
    let want = bits(&cpu(&q, &c, DIM));
    let run = || {
        let out = exec.cosine_scores(&q, &c, DIM).unwrap();
        assert_eq!(bits(&out.value), want);
        out.device
    };
    // Three failures open it.
    for i in 1..=3 {
        assert_eq!(run(), Device::Cpu);
        let open = matches!(exec.breaker_state(), BreakerState::Open { .. });
        assert_eq!(open, i == 3, "after failure {i}");
    }
    assert_eq!(gpu.stats().calls, 3);
    // Open: the GPU is not asked.
    assert_eq!(run(), Device::Cpu);
    assert_eq!(gpu.stats().calls, 3);
    clock.advance(Duration::from_secs(9));
    assert_eq!(run(), Device::Cpu);
    assert_eq!(gpu.stats().calls, 3);
    // Back-off over: half-open, the probe (call 4) fails: open for twice as long.
    clock.advance(Duration::from_secs(1));
    assert_eq!(exec.breaker_state(), BreakerState::HalfOpen);
    assert_eq!(
        exec.explain_op(OpKind::CosineScores, 1 << 30).reason,
        Reason::BreakerProbe
    );
    assert_eq!(run(), Device::Cpu);
    assert_eq!(gpu.stats().calls, 4);
    assert_eq!(
        exec.breaker_state(),
        BreakerState::Open {
            retry_in: Duration::from_secs(20)
        }
    );
    clock.advance(Duration::from_secs(20));
    // The second probe (call 5) succeeds: closed, and the GPU takes calls again.
    assert_eq!(run(), GPU);
    assert_eq!(exec.breaker_state(), BreakerState::Closed);
    assert_eq!(run(), GPU);
    let m = exec.metrics();
    assert_eq!(m.breaker_transitions(Transition::Opened), 2);
    assert_eq!(m.breaker_transitions(Transition::HalfOpened), 2);
    assert_eq!(m.breaker_transitions(Transition::Closed), 1);
    assert_eq!(m.breaker_rejections(), 2);
    assert_eq!(m.fallbacks(FallbackReason::GpuError), 4);
    // After closing, the back-off starts again from its first length.
    let text = exec.prometheus_text();
    assert!(text.contains("recall_breaker_state 0"), "{text}");
}

#[test]
fn seeded_random_faults_never_change_an_answer() {
    let mut plan = FaultPlan::new().seed(7);
    for step in FaultStep::ALL {
        let kind = if step == FaultStep::DeviceLostMidBatch {
            FaultKind::Gpu
        } else {
            step.default_error()
        };
        plan = plan.fail_as(step, Trigger::Probability(0.08), kind);
    }
    let (exec, gpu, clock) = faulty(plan, |c| c.breaker.failure_threshold = 1000);
    let c = matrix(3, 29, DIM);
    let mut fell_back = 0;
    for i in 0..60u64 {
        clock.advance(Duration::from_secs(1));
        let q = matrix(100 + i, 1 + (i as usize % 7), DIM);
        let out = exec.cosine_scores(&q, &c, DIM).unwrap();
        assert_eq!(bits(&out.value), bits(&cpu(&q, &c, DIM)), "call {i}");
        fell_back += usize::from(out.fallback.is_some());
    }
    let m = exec.metrics();
    assert!(gpu.stats().injected > 0);
    assert!(fell_back > 0);
    assert_eq!(m.fallbacks_total() as usize, fell_back);
    let (c_calls, g_calls, f) = exec.counters();
    assert_eq!(c_calls + g_calls, 60);
    assert_eq!(c_calls, f);
}

#[test]
fn invalid_input_is_an_error_not_a_fallback() {
    let (exec, gpu, _) = faulty(FaultPlan::new(), |_| {});
    let mut q = matrix(1, 2, DIM);
    q[5] = f32::NAN;
    assert!(exec.cosine_scores(&q, &matrix(2, 4, DIM), DIM).is_err());
    assert!(
        exec.cosine_scores(&q[..3], &matrix(2, 4, DIM), DIM)
            .is_err()
    );
    assert_eq!(gpu.stats().calls, 0);
    assert_eq!(exec.counters(), (0, 0, 0));
}

#[test]
fn metrics_render_as_prometheus_text() {
    let (exec, _, _) = faulty(FaultPlan::new().fail_at(FaultStep::Sync, 2), |_| {});
    let (q, c) = inputs(2);
    for _ in 0..3 {
        exec.cosine_scores(&q, &c, DIM).unwrap();
    }
    let text = exec.prometheus_text();
    for line in [
        "recall_calls_total{op=\"cosine_scores\",device=\"gpu\"} 2",
        "recall_calls_total{op=\"cosine_scores\",device=\"cpu\"} 1",
        "recall_fallbacks_total{reason=\"gpu_error\"} 1",
        "recall_fallbacks_total{reason=\"out_of_memory\"} 0",
        "recall_gpu_oom_events_total 0",
        "recall_gpu_memory_in_use_bytes 0",
        "recall_call_latency_seconds_count{op=\"cosine_scores\"} 3",
        "# TYPE recall_call_latency_seconds summary",
        "recall_batch_size_count 0",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
    assert!(text.contains("recall_call_latency_seconds{op=\"cosine_scores\",quantile=\"0.99\"}"));
}

/// A device whose cached memory is what a large call is missing: a call of more than 3 queries runs out of
/// memory until the cache has been given back once.
#[derive(Debug, Default)]
struct CachingDevice {
    released: std::sync::atomic::AtomicUsize,
}

impl Backend for CachingDevice {
    fn device(&self) -> Device {
        GPU
    }

    fn release_cached_memory(&self) {
        self.released
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    fn cosine_scores(&self, q: &[f32], c: &[f32], dim: usize) -> Result<Vec<f32>, BackendError> {
        let released = self.released.load(std::sync::atomic::Ordering::Relaxed);
        if q.len() / dim > 3 && released == 0 {
            return Err(BackendError::OutOfMemory("cached elsewhere".into()));
        }
        CpuBackend.cosine_scores(q, c, dim)
    }
}

#[test]
fn oom_gives_cached_memory_back_before_the_retry() {
    let clock = ManualClock::new();
    let gpu = Arc::new(CachingDevice::default());
    let exec =
        Executor::with_backends(config(&clock), Arc::new(CpuBackend), Some(gpu.clone())).unwrap();
    let (q, c) = inputs(8);
    let out = exec.cosine_scores(&q, &c, DIM).unwrap();
    assert_eq!(out.device, GPU);
    assert_eq!(bits(&out.value), bits(&cpu(&q, &c, DIM)));
    // One out-of-memory, one release, then the halved batches ran on the GPU.
    assert_eq!(gpu.released.load(std::sync::atomic::Ordering::Relaxed), 1);
    assert_eq!(exec.metrics().oom_events(), 1);
}

/// A breaker told to keep a failed GPU out for good (`Duration::MAX` back-off): the call that loses the device
/// is still answered on the CPU (the back-off's end saturates instead of overflowing), and the GPU stays out.
#[test]
fn a_back_off_without_end_still_answers_on_the_cpu() {
    let plan = FaultPlan::new().lose_device_after(0);
    let (exec, gpu, clock) = faulty(plan, |c| {
        c.breaker.backoff = Duration::MAX;
        c.breaker.max_backoff = Duration::MAX;
    });
    clock.advance(Duration::from_secs(1));
    let (q, c) = inputs(4);
    let want = bits(&cpu(&q, &c, DIM));
    let out = exec.cosine_scores(&q, &c, DIM).unwrap();
    assert_eq!((out.device, bits(&out.value)), (Device::Cpu, want.clone()));
    assert!(matches!(exec.breaker_state(), BreakerState::Open { .. }));
    let calls = gpu.stats().calls;
    clock.advance(Duration::from_secs(1 << 40));
    let out = exec.cosine_scores(&q, &c, DIM).unwrap();
    assert_eq!((out.device, bits(&out.value)), (Device::Cpu, want));
    assert_eq!(gpu.stats().calls, calls, "the GPU stays out");
}

/// A failed probe doubles a back-off that cannot double (more than half of `Duration::MAX`): it stays at the
/// most, and the call is answered on the CPU.
#[test]
fn a_back_off_that_cannot_double_still_answers_on_the_cpu() {
    let huge = Duration::MAX / 2 + Duration::from_secs(1);
    let plan = FaultPlan::new().lose_device_after(0);
    let (exec, _gpu, clock) = faulty(plan, |c| {
        c.breaker.backoff = Duration::from_secs(1);
        c.breaker.max_backoff = Duration::MAX;
    });
    let (q, c) = inputs(4);
    let want = bits(&cpu(&q, &c, DIM));
    // Open (1 s), probe and fail: 2 s, 4 s, ... until the doubling would pass Duration::MAX.
    let mut backoff = Duration::from_secs(1);
    for _ in 0..80 {
        let out = exec.cosine_scores(&q, &c, DIM).unwrap();
        assert_eq!((out.device, bits(&out.value)), (Device::Cpu, want.clone()));
        clock.advance(backoff);
        backoff = backoff.saturating_mul(2);
        if backoff > huge {
            break;
        }
    }
    let out = exec.cosine_scores(&q, &c, DIM).unwrap();
    assert_eq!((out.device, bits(&out.value)), (Device::Cpu, want));
}

/// A GPU whose kernels do not take a call's shape (`BackendError::Unfit`: a size past what one launch carries)
/// is not a faulty GPU: each such call is answered on the CPU with the reason `unsupported`, and the breaker,
/// which counts device faults, stays closed however many come; a GPU failure still counts.
#[test]
fn shapes_the_kernels_refuse_never_open_the_breaker() {
    struct Refuses(std::sync::atomic::AtomicBool);
    impl Backend for Refuses {
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
            if self.0.load(std::sync::atomic::Ordering::Relaxed) {
                Err(BackendError::Gpu("launch failed".into()))
            } else {
                Err(BackendError::Unfit("too many rows for one launch".into()))
            }
        }
    }
    let clock = ManualClock::new();
    let gpu = Arc::new(Refuses(std::sync::atomic::AtomicBool::new(false)));
    let exec =
        Executor::with_backends(config(&clock), Arc::new(CpuBackend), Some(gpu.clone())).unwrap();
    let (q, c) = inputs(8);
    let want = bits(&cpu(&q, &c, DIM));
    for _ in 0..10 {
        let out = exec.cosine_scores(&q, &c, DIM).unwrap();
        assert_eq!(out.device, Device::Cpu);
        assert_eq!(bits(&out.value), want);
        assert!(out.fallback.is_some_and(|m| m.contains("too many rows")));
    }
    let m = exec.metrics();
    assert_eq!(m.fallbacks(FallbackReason::Unsupported), 10);
    assert_eq!(m.fallbacks(FallbackReason::GpuError), 0);
    assert_eq!(exec.breaker_state(), BreakerState::Closed);
    // Three GPU failures in a row still open it.
    gpu.0.store(true, std::sync::atomic::Ordering::Relaxed);
    for _ in 0..3 {
        exec.cosine_scores(&q, &c, DIM).unwrap();
    }
    assert_ne!(exec.breaker_state(), BreakerState::Closed);
}
