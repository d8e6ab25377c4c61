//! Calls made from rayon's worker threads while another call calibrates: a worker must not wait for a
//! calibration whose CPU probes need the pool it stops. Its own test binary: a deadlock here would hold the
//! process's global rayon pool.

#![allow(clippy::unwrap_used)] // a test crate

use recall_hybrid_executor::{
    Backend, BackendError, CalibrationConfig, CpuBackend, Device, DevicePolicy, Executor,
    ExecutorConfig,
};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A stand-in GPU that answers like the CPU; its first call is held until released.
struct Gate {
    entered: Mutex<Option<mpsc::Sender<()>>>,
    release: Mutex<Option<mpsc::Receiver<()>>>,
}

impl Backend for Gate {
    fn device(&self) -> Device {
        Device::Gpu { ordinal: 0 }
    }
    fn cosine_scores(
        &self,
        queries: &[f32],
        corpus: &[f32],
        dim: usize,
    ) -> Result<Vec<f32>, BackendError> {
        let first = self.entered.lock().unwrap().take();
        if let Some(tx) = first {
            tx.send(()).unwrap();
            let rx = self.release.lock().unwrap().take().unwrap();
            rx.recv().unwrap();
        }
        // Slower than the CPU, so that calibration climbs its whole ladder (to sizes the CPU splits over
        // rayon's threads).
        std::thread::sleep(Duration::from_millis(1));
        CpuBackend.cosine_scores(queries, corpus, dim)
    }
}

/// A call off the pool calibrates (its GPU probe held); meanwhile every rayon worker makes a call of the same op.
/// Once released, the calibration's CPU probes need the pool: the workers must not be waiting for it.
#[test]
fn calls_on_every_rayon_worker_during_a_calibration_still_finish() {
    let (entered_tx, entered_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel();
    let gate = Arc::new(Gate {
        entered: Mutex::new(Some(entered_tx)),
        release: Mutex::new(Some(release_rx)),
    });
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
    entered_rx
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
    release_tx.send(()).unwrap();
    let want = CpuBackend.cosine_scores(&q, &c, 8).unwrap();
    for _ in 0..1 + workers {
        let (who, r) = done_rx
            .recv_timeout(Duration::from_secs(60))
            .expect("every call finished (no deadlock between calibration and rayon's workers)");
        assert_eq!(r.unwrap(), want, "{who}");
    }
}
