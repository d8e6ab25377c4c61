//! A stand-in GPU for the rayon deadlock tests (each its own test binary, `#[path]`-included): it answers
//! `cosine_scores` like the CPU (on a pool's threads for a large call), holds its first call until released, and
//! can take a fixed time per call.

use recall_hybrid_executor::{Backend, BackendError, CpuBackend, Device};
use std::sync::Mutex;
use std::sync::mpsc;
use std::time::Duration;

pub struct Gate {
    entered: Mutex<Option<mpsc::Sender<()>>>,
    release: Mutex<Option<mpsc::Receiver<()>>>,
    delay: Duration,
}

/// Signals that the first call has entered; sending on it lets that call go on.
pub struct GateHandles {
    pub entered: mpsc::Receiver<()>,
    pub release: mpsc::Sender<()>,
}

impl Gate {
    /// A gate that takes `delay` per call, and the handles that watch and release its first call.
    pub fn new(delay: Duration) -> (Gate, GateHandles) {
        let (entered_tx, entered_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel();
        let gate = Gate {
            entered: Mutex::new(Some(entered_tx)),
            release: Mutex::new(Some(release_rx)),
            delay,
        };
        (
            gate,
            GateHandles {
                entered: entered_rx,
                release: release_tx,
            },
        )
    }
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
        std::thread::sleep(self.delay);
        CpuBackend.cosine_scores(queries, corpus, dim)
    }
}
