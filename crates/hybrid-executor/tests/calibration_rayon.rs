//! Calls made from rayon's worker threads while another call calibrates: a worker must not wait for a
//! calibration whose CPU probes need the pool it stops. Its own test binary: a deadlock here would hold the
//! process's global rayon pool.

#![allow(clippy::unwrap_used)] // a test crate

use recall_hybrid_executor::{
    Backend, CalibrationConfig, CpuBackend, DevicePolicy, Executor, ExecutorConfig,
};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

#[path = "common/gate.rs"]
mod gate;

use gate::Gate;

/// A call off the pool calibrates (its GPU probe held); meanwhile every rayon worker makes a call of the same op.
/// Once released, the calibration's CPU probes need the pool: the workers must not be waiting for it.
#[test]
fn calls_on_every_rayon_worker_during_a_calibration_still_finish() {
    // Slower than the CPU (1 ms a call), so that calibration climbs its whole ladder (to sizes the CPU splits
    // over threads).
    let (gate, handles) = Gate::new(Duration::from_millis(1));
    let gate = Arc::new(gate);
    let cfg = ExecutorConfig {
        policy: DevicePolicy::Auto,
        calibrate: true,
        use_cache: false,
        calibration: CalibrationConfig {
            max_work: 1 << 23,
            reps: 1,
            ..CalibrationConfig::default()
        },
        ..ExecutorConfig::default()
    };
    let exec = Arc::new(Executor::with_backends(cfg, Arc::new(CpuBackend), Some(gate)).unwrap());
    let (q, c) = (vec![0.5f32; 8], vec![0.25f32; 8 * 4]);
    let (done_tx, done_rx) = mpsc::channel();
    {
        let (exec, q, c, done_tx) = (exec.clone(), q.clone(), c.clone(), done_tx.clone());
        std::thread::spawn(move || {
            let r = exec.cosine_scores(&q, &c, 8).map(|o| o.value);
            done_tx.send(("calibrating caller", r)).unwrap();
        });
    }
    handles
        .entered
        .recv_timeout(Duration::from_secs(60))
        .expect("calibration reached the GPU");
    let workers = rayon::current_num_threads();
    {
        let (exec, q, c, done_tx) = (exec.clone(), q.clone(), c.clone(), done_tx.clone());
        std::thread::spawn(move || {
            let outs = rayon::broadcast(|_| exec.cosine_scores(&q, &c, 8).map(|o| o.value));
            for r in outs {
                done_tx.send(("rayon worker", r)).unwrap();
            }
        });
    }
    // Let every worker reach its call, then let the calibration go on.
    std::thread::sleep(Duration::from_millis(300));
    handles.release.send(()).unwrap();
    let want = CpuBackend.cosine_scores(&q, &c, 8).unwrap();
    for _ in 0..1 + workers {
        let (who, r) = done_rx
            .recv_timeout(Duration::from_secs(60))
            .expect("every call finished (no deadlock between calibration and rayon's workers)");
        assert_eq!(r.unwrap(), want, "{who}");
    }
}
