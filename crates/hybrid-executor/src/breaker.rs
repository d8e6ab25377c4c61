//! The circuit breaker that keeps calls off a failing GPU.
//!
//! Closed: calls go to the GPU; consecutive failures are counted. After `failure_threshold` of them (or
//! one lost device) it opens: calls go to the CPU for a back-off period. Then one call is let through as
//! a probe (half-open); success closes the breaker, failure opens it again with the back-off doubled (up
//! to `max_backoff`). Time comes from a [`Clock`], so tests move it by hand.

use crate::clock::Clock;
use parking_lot::Mutex;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// How the breaker trips and recovers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerConfig {
    /// Consecutive GPU failures that open the breaker.
    pub failure_threshold: u32,
    /// The first back-off period.
    pub backoff: Duration,
    /// The longest back-off period (it doubles after each failed probe).
    pub max_backoff: Duration,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            failure_threshold: 3,
            backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(60),
        }
    }
}

/// The breaker's state as seen from outside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    /// Calls go to the GPU.
    Closed,
    /// Calls go to the CPU until `retry_in` has passed.
    Open { retry_in: Duration },
    /// A probe call is on the GPU (or may go there now); other calls go to the CPU.
    HalfOpen,
}

impl BreakerState {
    /// 0 closed, 1 half-open, 2 open (the metric's value).
    pub fn code(self) -> u8 {
        match self {
            BreakerState::Closed => 0,
            BreakerState::HalfOpen => 1,
            BreakerState::Open { .. } => 2,
        }
    }
}

impl fmt::Display for BreakerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BreakerState::Closed => f.write_str("closed"),
            BreakerState::HalfOpen => f.write_str("half-open"),
            BreakerState::Open { retry_in } => write!(f, "open, probing again in {retry_in:?}"),
        }
    }
}

/// What the breaker says about one call that would go to the GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Go ahead.
    Allowed,
    /// Go ahead as the probe: report the result, it decides whether the breaker closes.
    Probe,
    /// Stay off the GPU.
    Rejected { retry_in: Duration },
}

/// A state change, for logs and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    Opened,
    HalfOpened,
    Closed,
}

#[derive(Debug)]
enum Inner {
    Closed { failures: u32 },
    Open { until: Duration },
    HalfOpen { probing: bool },
}

#[derive(Debug)]
struct State {
    inner: Inner,
    backoff: Duration,
}

/// A circuit breaker (see the module doc). Cheap when closed: one uncontended lock.
#[derive(Debug)]
pub struct CircuitBreaker {
    config: BreakerConfig,
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
}

impl CircuitBreaker {
    /// A closed breaker.
    pub fn new(config: BreakerConfig, clock: Arc<dyn Clock>) -> CircuitBreaker {
        CircuitBreaker {
            state: Mutex::new(State {
                inner: Inner::Closed { failures: 0 },
                backoff: config.backoff,
            }),
            config,
            clock,
        }
    }

    /// The state now, without changing it.
    pub fn state(&self) -> BreakerState {
        let s = self.state.lock();
        match s.inner {
            Inner::Closed { .. } => BreakerState::Closed,
            Inner::HalfOpen { .. } => BreakerState::HalfOpen,
            Inner::Open { until } => {
                let now = self.clock.now();
                if now >= until {
                    BreakerState::HalfOpen
                } else {
                    BreakerState::Open {
                        retry_in: until - now,
                    }
                }
            }
        }
    }

    /// Ask to run one call on the GPU. `Probe` must be followed by [`record_success`] or
    /// [`record_failure`] (or [`record_neutral`]), or the breaker stays half-open with its probe taken. Each
    /// is given the call's admission: while the breaker is half-open only the probe's result counts (a call let
    /// through before the breaker opened says nothing about the device now, and must neither close the breaker
    /// nor hand the probe back while the probe runs).
    ///
    /// [`record_success`]: CircuitBreaker::record_success
    /// [`record_failure`]: CircuitBreaker::record_failure
    /// [`record_neutral`]: CircuitBreaker::record_neutral
    pub fn admit(&self) -> (Admission, Option<Transition>) {
        let mut s = self.state.lock();
        match s.inner {
            Inner::Closed { .. } => (Admission::Allowed, None),
            Inner::Open { until } => {
                let now = self.clock.now();
                if now >= until {
                    s.inner = Inner::HalfOpen { probing: true };
                    (Admission::Probe, Some(Transition::HalfOpened))
                } else {
                    (
                        Admission::Rejected {
                            retry_in: until - now,
                        },
                        None,
                    )
                }
            }
            Inner::HalfOpen { probing: true } => (
                Admission::Rejected {
                    retry_in: Duration::ZERO,
                },
                None,
            ),
            Inner::HalfOpen { probing: false } => {
                s.inner = Inner::HalfOpen { probing: true };
                (Admission::Probe, None)
            }
        }
    }

    /// A GPU call admitted as `admission` succeeded.
    pub fn record_success(&self, admission: Admission) -> Option<Transition> {
        let mut s = self.state.lock();
        match s.inner {
            Inner::Closed { .. } => {
                s.inner = Inner::Closed { failures: 0 };
                None
            }
            Inner::HalfOpen { .. } if admission == Admission::Probe => {
                s.inner = Inner::Closed { failures: 0 };
                s.backoff = self.config.backoff;
                Some(Transition::Closed)
            }
            // A call admitted before the breaker opened: it says nothing about the probe (to come, or running).
            Inner::HalfOpen { .. } | Inner::Open { .. } => None,
        }
    }

    /// A GPU call admitted as `admission` failed for a reason that says nothing about the GPU's health (out of
    /// memory): the probe, if it was one, is handed back so that another call can probe.
    pub fn record_neutral(&self, admission: Admission) {
        let mut s = self.state.lock();
        if let Inner::HalfOpen { probing: true } = s.inner
            && admission == Admission::Probe
        {
            s.inner = Inner::HalfOpen { probing: false };
        }
    }

    /// A GPU call admitted as `admission` failed. `fatal` (a lost device) opens the breaker at once.
    pub fn record_failure(&self, fatal: bool, admission: Admission) -> Option<Transition> {
        let mut s = self.state.lock();
        let now = self.clock.now();
        match s.inner {
            Inner::Closed { failures } => {
                let failures = failures + 1;
                if fatal || failures >= self.config.failure_threshold.max(1) {
                    // Saturating: a back-off of `Duration::MAX` keeps the GPU out for good.
                    s.inner = Inner::Open {
                        until: now.saturating_add(s.backoff),
                    };
                    Some(Transition::Opened)
                } else {
                    s.inner = Inner::Closed { failures };
                    None
                }
            }
            Inner::HalfOpen { .. } if admission == Admission::Probe => {
                s.backoff = s.backoff.saturating_mul(2).min(self.config.max_backoff);
                s.inner = Inner::Open {
                    until: now.saturating_add(s.backoff),
                };
                Some(Transition::Opened)
            }
            // A call admitted before the breaker opened: the probe decides.
            Inner::HalfOpen { .. } | Inner::Open { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    /// While the breaker is half-open only the probe's result counts: a call let through before the breaker
    /// opened, ending while the probe runs, neither hands the probe back (two probes would run), nor closes the
    /// breaker, nor opens it again.
    #[test]
    fn only_the_probe_decides_a_half_open_breaker() {
        let clock = ManualClock::new();
        let config = BreakerConfig {
            failure_threshold: 1,
            backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(8),
        };
        let b = CircuitBreaker::new(config, clock.clone());
        let (early, _) = b.admit();
        assert_eq!(early, Admission::Allowed);
        let (failing, _) = b.admit();
        assert_eq!(b.record_failure(false, failing), Some(Transition::Opened));
        clock.advance(Duration::from_secs(1));
        let (probe, t) = b.admit();
        assert_eq!((probe, t), (Admission::Probe, Some(Transition::HalfOpened)));
        let taken = Admission::Rejected {
            retry_in: Duration::ZERO,
        };
        b.record_neutral(early);
        assert_eq!(b.admit().0, taken, "the probe was handed back");
        assert_eq!(b.record_success(early), None);
        assert_eq!(b.record_failure(true, early), None);
        assert_eq!(b.state(), BreakerState::HalfOpen);
        assert_eq!(b.admit().0, taken);
        // The probe's own results: out of memory hands it back, then the next probe closes the breaker.
        b.record_neutral(probe);
        let (probe, _) = b.admit();
        assert_eq!(probe, Admission::Probe);
        assert_eq!(b.record_success(probe), Some(Transition::Closed));
        assert_eq!(b.state(), BreakerState::Closed);
    }
}
