//! Tenants: queues, back-pressure, timeouts, quotas, fairness under load.

use super::*;
use parking_lot::{Condvar, Mutex};
use recall_hybrid_executor::{
    CallOptions, ExecError, FallbackReason, FaultKind, FaultStep, TenantConfig, Trigger,
};
use std::sync::atomic::{AtomicUsize, Ordering};

const DIM: usize = 8;

/// A CPU backend that holds every call until the gate opens.
#[derive(Debug, Default)]
struct Gate {
    open: Mutex<bool>,
    cv: Condvar,
    entered: AtomicUsize,
}

impl Gate {
    fn open(&self) {
        *self.open.lock() = true;
        self.cv.notify_all();
    }
}

impl Backend for Gate {
    fn device(&self) -> Device {
        Device::Cpu
    }

    fn cosine_scores(&self, q: &[f32], c: &[f32], dim: usize) -> Result<Vec<f32>, BackendError> {
        self.entered.fetch_add(1, Ordering::SeqCst);
        let mut open = self.open.lock();
        while !*open {
            self.cv.wait(&mut open);
        }
        drop(open);
        CpuBackend.cosine_scores(q, c, dim)
    }
}

fn spin_until(what: &str, cond: impl Fn() -> bool) {
    let start = std::time::Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "never happened: {what}"
        );
        std::thread::yield_now();
    }
}

#[test]
fn full_queue_is_back_pressure_or_a_timeout() {
    let gate = Arc::new(Gate::default());
    let clock = ManualClock::new();
    let cfg = ExecutorConfig {
        max_in_flight: 1,
        ..config(&clock)
    };
    let exec = Executor::with_backends(cfg, gate.clone(), None).unwrap();
    let a = exec.add_tenant(TenantConfig::new("a").queue_capacity(2));
    let b = exec.add_tenant(TenantConfig::new("b").queue_capacity(1));
    let c = matrix(9, 11, DIM);
    std::thread::scope(|s| {
        let call = |t, seed| {
            let exec = &exec;
            let c = &c;
            move || {
                let q = matrix(seed, 2, DIM);
                let opts = CallOptions::tenant(t).wait(Duration::from_secs(600));
                let out = exec.cosine_scores_with(&opts, &q, c, DIM).unwrap();
                assert_eq!(bits(&out.value), bits(&cpu(&q, c, DIM)));
            }
        };
        // One call runs (held at the gate), two wait in a's queue, one in b's.
        let running = s.spawn(call(a, 1));
        spin_until("first call running", || {
            gate.entered.load(Ordering::SeqCst) == 1
        });
        let queued: Vec<_> = (2..4).map(|seed| s.spawn(call(a, seed))).collect();
        spin_until("a's queue full", || exec.queued(a) == 2);
        let queued_b = s.spawn(call(b, 4));
        spin_until("b's queue full", || exec.queued(b) == 1);

        let q = matrix(5, 1, DIM);
        let err = exec
            .cosine_scores_with(&CallOptions::tenant(a), &q, &c, DIM)
            .unwrap_err();
        assert_eq!(
            err,
            ExecError::BackPressure {
                tenant: "a".into(),
                capacity: 2
            }
        );
        let err = exec
            .cosine_scores_with(
                &CallOptions::tenant(b).wait(Duration::from_millis(20)),
                &q,
                &c,
                DIM,
            )
            .unwrap_err();
        assert!(
            matches!(err, ExecError::QueueTimeout { ref tenant, .. } if tenant == "b"),
            "{err}"
        );
        assert_eq!(exec.queued(a), 2);

        gate.open();
        running.join().unwrap();
        for h in queued {
            h.join().unwrap();
        }
        queued_b.join().unwrap();
    });
    assert_eq!((exec.queued(a), exec.queued(b)), (0, 0));
    let text = exec.prometheus_text();
    for line in [
        "recall_tenant_admitted_total{tenant=\"a\"} 3",
        "recall_tenant_admitted_total{tenant=\"b\"} 1",
        "recall_tenant_rejected_total{tenant=\"a\"} 1",
        "recall_tenant_timeouts_total{tenant=\"b\"} 1",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
}

#[test]
fn unknown_tenant_is_an_error() {
    let clock = ManualClock::new();
    let exec = Executor::with_backends(config(&clock), Arc::new(CpuBackend), None).unwrap();
    let other = Executor::with_backends(config(&clock), Arc::new(CpuBackend), None).unwrap();
    other.add_tenant(TenantConfig::new("x"));
    let t = other.add_tenant(TenantConfig::new("y"));
    let q = matrix(1, 1, DIM);
    let err = exec
        .cosine_scores_with(&CallOptions::tenant(t), &q, &q, DIM)
        .unwrap_err();
    assert!(matches!(err, ExecError::UnknownTenant(_)));
}

#[test]
fn quota_splits_or_falls_back_and_spares_other_tenants() {
    let clock = ManualClock::new();
    let gpu = Arc::new(Recording::default());
    let exec =
        Executor::with_backends(config(&clock), Arc::new(CpuBackend), Some(gpu.clone())).unwrap();
    let (q, c) = (matrix(1, 8, DIM), matrix(2, 10, DIM));
    let want = bits(&cpu(&q, &c, DIM));
    // bytes for r queries: 4 * (r*8 + 10*8 + r + 10 + r*10) = 4 * (90 + 19 r)
    let bytes = |r: u64| 4 * (90 + 19 * r);
    let small = exec.add_tenant(TenantConfig::new("small").vram_quota(bytes(3)));
    let tiny = exec.add_tenant(TenantConfig::new("tiny").vram_quota(bytes(1) - 1));
    let big = exec.add_tenant(TenantConfig::new("big"));

    let out = exec
        .cosine_scores_with(&CallOptions::tenant(small), &q, &c, DIM)
        .unwrap();
    assert_eq!((out.device, bits(&out.value)), (GPU, want.clone()));
    assert_eq!(*gpu.units.lock(), vec![2, 2, 2, 2]);
    let ctx = gpu.tenants.lock()[0].unwrap();
    assert_eq!((ctx.id, ctx.vram_quota), (small, Some(bytes(3))));

    let out = exec
        .cosine_scores_with(&CallOptions::tenant(tiny), &q, &c, DIM)
        .unwrap();
    assert_eq!((out.device, bits(&out.value)), (Device::Cpu, want.clone()));
    assert_eq!(exec.metrics().fallbacks(FallbackReason::Quota), 1);

    gpu.units.lock().clear();
    let out = exec
        .cosine_scores_with(&CallOptions::tenant(big), &q, &c, DIM)
        .unwrap();
    assert_eq!((out.device, bits(&out.value)), (GPU, want));
    assert_eq!(*gpu.units.lock(), vec![8]);
    assert_eq!(gpu.tenants.lock()[4].unwrap().id, big);
    assert_eq!(exec.vram_in_use(), 0);
    // Outside calls, no tenant is current.
    assert_eq!(recall_hybrid_executor::current_tenant(), None);
}

/// Many threads, many tenants, small queues, faults: every call answered exactly once, correctly, or
/// refused with a typed error that the metrics count.
#[test]
fn many_threads_and_tenants_under_faults() {
    let mut plan = FaultPlan::new().seed(11);
    for step in [FaultStep::Alloc, FaultStep::Launch, FaultStep::CopyOut] {
        let kind = if step == FaultStep::Alloc {
            FaultKind::OutOfMemory
        } else {
            FaultKind::Gpu
        };
        plan = plan.fail_as(step, Trigger::Probability(0.05), kind);
    }
    let (exec, gpu, _) = faulty(plan, |c| {
        c.max_in_flight = 3;
        c.breaker.failure_threshold = u32::MAX;
    });
    let tenants: Vec<_> = (0..4)
        .map(|i| {
            exec.add_tenant(
                TenantConfig::new(format!("t{i}"))
                    .queue_capacity(2)
                    .weight(1 + i as u32 % 2),
            )
        })
        .collect();
    let c = matrix(77, 23, DIM);
    let threads = 12;
    let calls_per_thread = 30;
    let (answered, refused) = (AtomicUsize::new(0), AtomicUsize::new(0));
    std::thread::scope(|s| {
        for th in 0..threads {
            let (exec, c, tenants, answered, refused) = (&exec, &c, &tenants, &answered, &refused);
            s.spawn(move || {
                for i in 0..calls_per_thread {
                    let seed = (th * 1000 + i) as u64;
                    let q = matrix(seed, 1 + i % 4, DIM);
                    let t = tenants[(th + i) % tenants.len()];
                    // Half the threads wait (generously), half take back-pressure.
                    let opts = if th % 2 == 0 {
                        CallOptions::tenant(t).wait(Duration::from_secs(600))
                    } else {
                        CallOptions::tenant(t)
                    };
                    match exec.cosine_scores_with(&opts, &q, c, DIM) {
                        Ok(out) => {
                            assert_eq!(
                                bits(&out.value),
                                bits(&cpu(&q, c, DIM)),
                                "thread {th} call {i}"
                            );
                            answered.fetch_add(1, Ordering::SeqCst);
                        }
                        Err(ExecError::BackPressure { capacity: 2, .. }) => {
                            assert_eq!(th % 2, 1);
                            refused.fetch_add(1, Ordering::SeqCst);
                        }
                        Err(e) => panic!("unexpected {e}"),
                    }
                }
            });
        }
    });
    let (answered, refused) = (answered.into_inner(), refused.into_inner());
    assert_eq!(answered + refused, threads * calls_per_thread);
    let (c_calls, g_calls, fallbacks) = exec.counters();
    assert_eq!((c_calls + g_calls) as usize, answered);
    assert_eq!(c_calls, fallbacks);
    assert!(gpu.stats().injected > 0);
    let text = exec.prometheus_text();
    let sum = |metric: &str| -> usize {
        text.lines()
            .filter(|l| l.starts_with(metric))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<usize>().ok())
            .sum()
    };
    assert_eq!(sum("recall_tenant_admitted_total"), answered);
    assert_eq!(sum("recall_tenant_rejected_total"), refused);
    assert_eq!(sum("recall_tenant_timeouts_total"), 0);
    assert_eq!(exec.vram_in_use(), 0);
    for t in tenants {
        assert_eq!(exec.queued(t), 0);
    }
}

/// A tenant whose calls may not wait at all (`queue_capacity(0)`): a call runs when a permit is free, and is
/// back-pressure only when it would have to wait.
#[test]
fn a_tenant_without_a_queue_runs_when_a_permit_is_free() {
    let gate = Arc::new(Gate::default());
    let clock = ManualClock::new();
    let cfg = ExecutorConfig {
        max_in_flight: 1,
        ..config(&clock)
    };
    let exec = Executor::with_backends(cfg, gate.clone(), None).unwrap();
    let t = exec.add_tenant(TenantConfig::new("now").queue_capacity(0));
    let c = matrix(9, 11, DIM);
    let q = matrix(10, 2, DIM);
    std::thread::scope(|s| {
        let running = s.spawn(|| exec.cosine_scores_with(&CallOptions::tenant(t), &q, &c, DIM));
        spin_until("the call running", || {
            gate.entered.load(Ordering::SeqCst) == 1
        });
        // The only permit is taken: this one would have to wait.
        let err = exec
            .cosine_scores_with(&CallOptions::tenant(t), &q, &c, DIM)
            .unwrap_err();
        assert!(
            matches!(err, ExecError::BackPressure { capacity: 0, .. }),
            "{err}"
        );
        gate.open();
        let out = running.join().unwrap().unwrap();
        assert_eq!(bits(&out.value), bits(&cpu(&q, &c, DIM)));
    });
    // Idle again: a call runs at once.
    let out = exec
        .cosine_scores_with(&CallOptions::tenant(t), &q, &c, DIM)
        .unwrap();
    assert_eq!(bits(&out.value), bits(&cpu(&q, &c, DIM)));
}
