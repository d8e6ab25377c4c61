//! TEST ONLY: a switch that makes the real GPU backend fail on purpose, so that recovery from real driver
//! errors can be exercised on a GPU machine (`recall faults kernel-failure`, `recall faults device-lost`).
//!
//! Nothing here is simulated: when the switch fires, the GPU backend makes a real, deliberately bad kernel
//! launch and returns the driver's error:
//!
//! - [`TestFaultAction::LaunchError`]: a launch with an impossible block size (`cuLaunchKernel` returns
//!   `CUDA_ERROR_INVALID_VALUE`; the kernel never runs, the context stays usable);
//! - [`TestFaultAction::PoisonContext`]: a launch that reads an address no allocation covers, so the GPU
//!   faults and the driver marks the context unusable (`CUDA_ERROR_ILLEGAL_ADDRESS`, sticky: every later
//!   call on this context fails). Only the GPU's own memory management sees the bad address.
//!
//! Set it with [`GpuBackend::set_test_fault`](crate::GpuBackend::set_test_fault) or, for a whole process,
//! `RECALL_TEST_FAULT=<action>:<op>:<n>` read when the GPU is opened:
//!
//! - `launch:<op>:<n>`: the `n`-th GPU call of `op` (counted from 1 after the switch is set) fails to launch;
//! - `launch:<op>:every:<n>`: every `n`-th such call does;
//! - `poison:<op>:<n>`: the `n`-th such call poisons the context.
//!
//! `op` is `any`, `knn`, `candidates`, `spread`, `similarity`, `kmeans` or `noise`. Unset (the default),
//! the switch costs one relaxed atomic load per GPU call.

use parking_lot::Mutex;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The environment variable read when the GPU is opened (test only).
pub const TEST_FAULT_ENV: &str = "RECALL_TEST_FAULT";

/// The GPU op families the switch can single out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TestFaultOp {
    /// Every GPU call.
    Any,
    /// knn in every form (slice, resident, streamed, fast).
    Knn,
    /// Candidate scoring.
    Candidates,
    /// Activation spreading.
    Spread,
    /// Dense similarity scores.
    Similarity,
    /// k-means.
    Kmeans,
    /// Clip-and-noise.
    Noise,
}

impl TestFaultOp {
    fn parse(s: &str) -> Option<TestFaultOp> {
        Some(match s {
            "any" => TestFaultOp::Any,
            "knn" => TestFaultOp::Knn,
            "candidates" => TestFaultOp::Candidates,
            "spread" => TestFaultOp::Spread,
            "similarity" => TestFaultOp::Similarity,
            "kmeans" => TestFaultOp::Kmeans,
            "noise" => TestFaultOp::Noise,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            TestFaultOp::Any => "any",
            TestFaultOp::Knn => "knn",
            TestFaultOp::Candidates => "candidates",
            TestFaultOp::Spread => "spread",
            TestFaultOp::Similarity => "similarity",
            TestFaultOp::Kmeans => "kmeans",
            TestFaultOp::Noise => "noise",
        }
    }

    /// Whether a call of `op` counts for a switch set on `self`.
    fn covers(self, op: TestFaultOp) -> bool {
        self == TestFaultOp::Any || self == op
    }
}

/// What the backend does when the switch fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TestFaultAction {
    /// A real launch that the driver refuses (`CUDA_ERROR_INVALID_VALUE`); the context stays usable.
    LaunchError,
    /// A real launch that faults on the device (`CUDA_ERROR_ILLEGAL_ADDRESS`): the context is unusable
    /// from then on.
    PoisonContext,
}

/// When and how the GPU backend fails on purpose (test only; see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TestFault {
    pub action: TestFaultAction,
    pub op: TestFaultOp,
    /// Fire on the `nth` matching call (from 1), or on every `nth` when `every` is set.
    pub nth: u64,
    pub every: bool,
}

impl TestFault {
    /// Parse `launch:<op>:<n>`, `launch:<op>:every:<n>` or `poison:<op>:<n>`.
    pub fn parse(s: &str) -> Result<TestFault, String> {
        let bad = || {
            format!(
                "{s:?}: expected launch:<op>:<n>, launch:<op>:every:<n> or poison:<op>:<n> \
                 (op: any, knn, candidates, spread, similarity, kmeans, noise; n >= 1)"
            )
        };
        let parts: Vec<&str> = s.trim().split(':').collect();
        let (action, op, every, n) = match parts[..] {
            [a, op, n] => (a, op, false, n),
            [a, op, "every", n] => (a, op, true, n),
            _ => return Err(bad()),
        };
        let action = match action {
            "launch" => TestFaultAction::LaunchError,
            "poison" if !every => TestFaultAction::PoisonContext,
            _ => return Err(bad()),
        };
        let op = TestFaultOp::parse(op).ok_or_else(bad)?;
        let nth = n.parse::<u64>().ok().filter(|&n| n >= 1).ok_or_else(bad)?;
        Ok(TestFault {
            action,
            op,
            nth,
            every,
        })
    }
}

impl fmt::Display for TestFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let action = match self.action {
            TestFaultAction::LaunchError => "launch",
            TestFaultAction::PoisonContext => "poison",
        };
        if self.every {
            write!(f, "{action}:{}:every:{}", self.op.name(), self.nth)
        } else {
            write!(f, "{action}:{}:{}", self.op.name(), self.nth)
        }
    }
}

/// The switch a GPU backend holds: unset (free), or a [`TestFault`] and how many matching calls it has seen.
#[derive(Debug, Default)]
#[cfg_attr(not(feature = "gpu"), allow(dead_code))]
pub(crate) struct TestFaultSwitch {
    set: AtomicBool,
    fault: Mutex<Option<TestFault>>,
    seen: AtomicU64,
    fired: AtomicU64,
}

#[cfg_attr(not(feature = "gpu"), allow(dead_code))]
impl TestFaultSwitch {
    /// The switch as `RECALL_TEST_FAULT` sets it (unset when the variable is absent or empty).
    pub(crate) fn from_env() -> Result<TestFaultSwitch, String> {
        let s = TestFaultSwitch::default();
        match std::env::var(TEST_FAULT_ENV) {
            Ok(v) if !v.trim().is_empty() => {
                let f = TestFault::parse(&v).map_err(|e| format!("{TEST_FAULT_ENV}={e}"))?;
                tracing::warn!(fault = %f, "recall: TEST ONLY fault switch set on the GPU backend");
                s.set(Some(f));
            }
            _ => {}
        }
        Ok(s)
    }

    /// Set (or clear, with `None`) the fault; the count of matching calls starts again from 0.
    pub(crate) fn set(&self, fault: Option<TestFault>) {
        let mut f = self.fault.lock();
        *f = fault;
        self.seen.store(0, Ordering::SeqCst);
        self.set.store(fault.is_some(), Ordering::SeqCst);
    }

    /// How many times the switch has fired since the backend was opened.
    pub(crate) fn fired(&self) -> u64 {
        self.fired.load(Ordering::SeqCst)
    }

    /// The action to take for this call of `op`, if the switch fires on it.
    pub(crate) fn fires(&self, op: TestFaultOp) -> Option<TestFaultAction> {
        if !self.set.load(Ordering::Relaxed) {
            return None;
        }
        let f = (*self.fault.lock())?;
        if !f.op.covers(op) {
            return None;
        }
        let n = self.seen.fetch_add(1, Ordering::SeqCst) + 1;
        let fire = if f.every {
            n.is_multiple_of(f.nth)
        } else {
            n == f.nth
        };
        if fire {
            self.fired.fetch_add(1, Ordering::SeqCst);
            Some(f.action)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_display_round_trip() {
        for s in [
            "launch:any:3",
            "launch:knn:every:5",
            "poison:spread:1",
            "launch:candidates:1",
        ] {
            assert_eq!(TestFault::parse(s).unwrap().to_string(), s);
        }
        for bad in [
            "",
            "launch",
            "launch:knn",
            "launch:knn:0",
            "launch:knn:x",
            "poison:knn:every:2",
            "crash:knn:1",
            "launch:gemm:1",
            "launch:knn:every:0",
        ] {
            assert!(TestFault::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_unset_switch_never_fires() {
        let s = TestFaultSwitch::default();
        assert!((0..100).all(|_| s.fires(TestFaultOp::Knn).is_none()));
        assert_eq!(s.fired(), 0);
    }

    #[test]
    fn nth_fires_once_on_matching_calls_only() {
        let s = TestFaultSwitch::default();
        s.set(Some(TestFault::parse("poison:knn:3").unwrap()));
        let got: Vec<_> = [
            TestFaultOp::Knn,
            TestFaultOp::Spread,
            TestFaultOp::Knn,
            TestFaultOp::Candidates,
            TestFaultOp::Knn,
            TestFaultOp::Knn,
        ]
        .into_iter()
        .map(|op| s.fires(op))
        .collect();
        assert_eq!(
            got,
            [
                None,
                None,
                None,
                None,
                Some(TestFaultAction::PoisonContext),
                None
            ]
        );
        assert_eq!(s.fired(), 1);
        // Setting it again starts the count again; clearing it stops it.
        s.set(Some(TestFault::parse("launch:any:every:2").unwrap()));
        let fired: Vec<bool> = (0..6)
            .map(|_| s.fires(TestFaultOp::Spread).is_some())
            .collect();
        assert_eq!(fired, [false, true, false, true, false, true]);
        s.set(None);
        assert!(s.fires(TestFaultOp::Spread).is_none());
        assert_eq!(s.fired(), 4);
    }
}
