//! Time as the executor sees it: a monotonic clock that tests can replace, so the breaker's back-off,
//! the batcher's bookkeeping and calibration can be tested without sleeping.

use parking_lot::Mutex;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A monotonic clock: time since an arbitrary, fixed origin.
pub trait Clock: Send + Sync + fmt::Debug {
    /// Time elapsed since this clock's origin. Never goes backwards.
    fn now(&self) -> Duration;
}

/// The real clock (`std::time::Instant`).
#[derive(Debug, Clone, Copy)]
pub struct SystemClock {
    origin: Instant,
}

impl SystemClock {
    /// A clock whose origin is now.
    pub fn new() -> SystemClock {
        SystemClock {
            origin: Instant::now(),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        SystemClock::new()
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Duration {
        self.origin.elapsed()
    }
}

/// A clock that moves only when told to (tests, fake backends that report synthetic timings).
#[derive(Debug, Default)]
pub struct ManualClock {
    now: Mutex<Duration>,
}

impl ManualClock {
    /// A manual clock at time zero, shareable between the executor and fake backends.
    pub fn new() -> Arc<ManualClock> {
        Arc::new(ManualClock::default())
    }

    /// Move the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        *self.now.lock() += by;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Duration {
        *self.now.lock()
    }
}

/// The clock every executor uses unless its configuration names another.
pub fn system_clock() -> Arc<dyn Clock> {
    Arc::new(SystemClock::new())
}
