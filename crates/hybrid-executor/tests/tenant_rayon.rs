//! Tenant calls made from rayon's worker threads while a call off the pool holds a permit: the permit holder's
//! CPU work needs the pool. Its own test binary: a deadlock here would hold the process's global rayon pool.

#![allow(clippy::unwrap_used)] // a test crate

use recall_hybrid_executor::{
    CallOptions, CpuBackend, DevicePolicy, Executor, ExecutorConfig, TenantConfig,
};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

#[path = "common/gate.rs"]
mod gate;

use gate::Gate;

/// The permit holder (off the pool) runs a CPU op that splits over rayon's threads; every worker waits in the
/// tenant's queue (a parked thread, not one that runs the pool's jobs), so the holder's parts never run and no
/// permit is ever freed: every call hangs for good (with `Wait::Reject`). The same calls from plain threads
/// finish. Fixed by running recall's parallel CPU work from threads off rayon's pools on recall's own pool
/// (`recall_cpu_simd::in_pool`): the holder's parts no longer wait for the global pool's workers.
#[test]
fn tenant_calls_queued_on_every_rayon_worker_let_the_permit_holder_finish() {
    let (gate, handles) = Gate::new(Duration::ZERO);
    let gate = Arc::new(gate);
    let cfg = ExecutorConfig {
        policy: DevicePolicy::Auto,
        gpu_min_work: 0,
        calibrate: false,
        use_cache: false,
        max_in_flight: 1,
        ..ExecutorConfig::default()
    };
    let exec = Arc::new(Executor::with_backends(cfg, Arc::new(CpuBackend), Some(gate)).unwrap());
    let tenant = exec.add_tenant(TenantConfig::new("t"));
    let opts = CallOptions::tenant(tenant);
    // 8 queries x 2^16 rows x 8: past the CPU's threshold for splitting over rayon's threads.
    let (big_q, big_c) = (vec![0.5f32; 8 * 8], vec![0.25f32; (1 << 16) * 8]);
    let (q, c) = (vec![0.5f32; 8], vec![0.25f32; 8 * 4]);
    let (done_tx, done_rx) = mpsc::channel();
    {
        let (exec, done_tx) = (exec.clone(), done_tx.clone());
        std::thread::spawn(move || {
            let r = exec
                .cosine_scores_with(&opts, &big_q, &big_c, 8)
                .map(|o| o.value.len());
            done_tx.send(("permit holder", r)).unwrap();
        });
    }
    handles
        .entered
        .recv_timeout(Duration::from_secs(60))
        .unwrap();
    let workers = rayon::current_num_threads();
    {
        let (exec, done_tx) = (exec.clone(), done_tx.clone());
        std::thread::spawn(move || {
            let outs = rayon::broadcast(|_| {
                exec.cosine_scores_with(&opts, &q, &c, 8)
                    .map(|o| o.value.len())
            });
            for r in outs {
                done_tx.send(("rayon worker", r)).unwrap();
            }
        });
    }
    // Let every worker queue its call, then let the permit holder's work go on.
    std::thread::sleep(Duration::from_millis(300));
    handles.release.send(()).unwrap();
    for _ in 0..1 + workers {
        let (who, r) = done_rx.recv_timeout(Duration::from_secs(60)).expect(
            "every call finished (no deadlock between the tenant queue and rayon's workers)",
        );
        assert!(r.is_ok(), "{who}: {r:?}");
    }
}
