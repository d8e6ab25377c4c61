//! A backend that fails on purpose: any backend wrapped so that a scripted step of a scripted call fails,
//! deterministically or with a seeded probability. CI has no GPU; this is how the executor's recovery
//! (fallback, OOM splitting, the breaker, a device lost mid-batch) is tested there.
//!
//! Every op method of [`FaultInjecting`] calls one hook, `inject`, for each [`FaultStep`] in the order a
//! GPU call goes through them, before it delegates to the wrapped backend. Adding an op is one method:
//! `self.call(units, || self.inner.the_op(...))`.

use crate::backend::{Backend, BackendError};
use crate::device::Device;
use parking_lot::Mutex;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The steps of a GPU call, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultStep {
    /// Device allocation: fails as out of memory.
    Alloc,
    /// Host-to-device copy.
    CopyIn,
    /// Kernel launch.
    Launch,
    /// Synchronisation (where asynchronous kernel errors surface).
    Sync,
    /// Device-to-host copy.
    CopyOut,
    /// The device is lost in the middle of a batch: after a number of successful sub-batches, every
    /// later call fails as device lost until [`FaultInjecting::revive`].
    DeviceLostMidBatch,
}

impl FaultStep {
    /// The steps a call passes through, in order (`DeviceLostMidBatch` is checked first).
    pub const ALL: [FaultStep; 6] = [
        FaultStep::DeviceLostMidBatch,
        FaultStep::Alloc,
        FaultStep::CopyIn,
        FaultStep::Launch,
        FaultStep::Sync,
        FaultStep::CopyOut,
    ];

    /// The error a fault at this step produces unless the rule names another.
    pub fn default_error(self) -> FaultKind {
        match self {
            FaultStep::Alloc => FaultKind::OutOfMemory,
            FaultStep::DeviceLostMidBatch => FaultKind::DeviceLost,
            _ => FaultKind::Gpu,
        }
    }

    fn name(self) -> &'static str {
        match self {
            FaultStep::Alloc => "alloc",
            FaultStep::CopyIn => "copy-in",
            FaultStep::Launch => "launch",
            FaultStep::Sync => "sync",
            FaultStep::CopyOut => "copy-out",
            FaultStep::DeviceLostMidBatch => "device lost mid-batch",
        }
    }
}

impl fmt::Display for FaultStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Which [`BackendError`] an injected fault becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    OutOfMemory,
    DeviceLost,
    Gpu,
}

/// When a rule fires. Calls are numbered from 1 in the order they reach the wrapper (sub-batches of a
/// split call count as calls).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Trigger {
    /// On call number `n` only.
    OnCall(u64),
    /// On every call from number `n` on.
    FromCall(u64),
    /// On every call.
    Always,
    /// With probability `p` per call, from the plan's seeded generator.
    Probability(f64),
    /// On calls of more than `n` units (an op's queries): a device that holds at most `n`.
    UnitsAbove(usize),
    /// Once, after `n` successful calls (for [`FaultStep::DeviceLostMidBatch`]; with
    /// [`FaultKind::DeviceLost`] the device then stays lost until [`FaultInjecting::revive`]).
    AfterSuccesses(u64),
}

/// One scripted fault.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FaultRule {
    pub step: FaultStep,
    pub trigger: Trigger,
    pub kind: FaultKind,
}

/// A deterministic script of faults.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FaultPlan {
    rules: Vec<FaultRule>,
    seed: u64,
}

impl FaultPlan {
    /// No faults.
    pub fn new() -> FaultPlan {
        FaultPlan::default()
    }

    /// Add a rule with the step's default error.
    pub fn fail(self, step: FaultStep, trigger: Trigger) -> FaultPlan {
        self.fail_as(step, trigger, step.default_error())
    }

    /// Add a rule that fails with `kind`.
    pub fn fail_as(mut self, step: FaultStep, trigger: Trigger, kind: FaultKind) -> FaultPlan {
        self.rules.push(FaultRule {
            step,
            trigger,
            kind,
        });
        self
    }

    /// Fail `step` on call `n` (1-based).
    pub fn fail_at(self, step: FaultStep, n: u64) -> FaultPlan {
        self.fail(step, Trigger::OnCall(n))
    }

    /// Lose the device after `n` successful calls (sub-batches).
    pub fn lose_device_after(self, n: u64) -> FaultPlan {
        self.fail(FaultStep::DeviceLostMidBatch, Trigger::AfterSuccesses(n))
    }

    /// Out of memory for calls of more than `n` units.
    pub fn oom_above_units(self, n: usize) -> FaultPlan {
        self.fail(FaultStep::Alloc, Trigger::UnitsAbove(n))
    }

    /// Seed for `Trigger::Probability`.
    pub fn seed(mut self, seed: u64) -> FaultPlan {
        self.seed = seed;
        self
    }
}

/// Counts of what the wrapper saw and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FaultStats {
    /// Calls that reached the wrapper.
    pub calls: u64,
    /// Calls that were passed on to the wrapped backend and succeeded.
    pub successes: u64,
    /// Faults injected.
    pub injected: u64,
}

/// `inner` with faults injected by a [`FaultPlan`]. Reports itself as `device` (a GPU by default), so it
/// can stand in the executor's GPU slot.
#[derive(Debug)]
pub struct FaultInjecting<B> {
    inner: B,
    device: Device,
    plan: FaultPlan,
    rng: Mutex<u64>,
    calls: AtomicU64,
    successes: AtomicU64,
    injected: AtomicU64,
    lost: AtomicBool,
    lost_fired: AtomicBool,
    /// Whether the plan's rules apply now ([`FaultInjecting::arm`]); on from the start.
    armed: AtomicBool,
}

impl<B: Backend> FaultInjecting<B> {
    /// Wrap `inner`; it reports itself as GPU 0.
    pub fn new(inner: B, plan: FaultPlan) -> FaultInjecting<B> {
        let seed = plan.seed;
        FaultInjecting {
            inner,
            device: Device::Gpu { ordinal: 0 },
            plan,
            rng: Mutex::new(seed),
            calls: AtomicU64::new(0),
            successes: AtomicU64::new(0),
            injected: AtomicU64::new(0),
            lost: AtomicBool::new(false),
            lost_fired: AtomicBool::new(false),
            armed: AtomicBool::new(true),
        }
    }

    /// Switch the plan's rules on or off (on from the start), so that a fault can begin and end in the
    /// middle of a run (`recall faults --simulate`). A device already lost stays lost until
    /// [`FaultInjecting::revive`]; an `AfterSuccesses` rule counts successes from the start either way.
    pub fn arm(&self, on: bool) {
        self.armed.store(on, Ordering::SeqCst);
    }

    /// Report `device` instead of GPU 0.
    pub fn as_device(mut self, device: Device) -> FaultInjecting<B> {
        self.device = device;
        self
    }

    /// What the wrapper has seen so far.
    pub fn stats(&self) -> FaultStats {
        FaultStats {
            calls: self.calls.load(Ordering::SeqCst),
            successes: self.successes.load(Ordering::SeqCst),
            injected: self.injected.load(Ordering::SeqCst),
        }
    }

    /// The device comes back after [`FaultStep::DeviceLostMidBatch`] fired: calls succeed again (until
    /// another rule fires). An `AfterSuccesses` rule fires once only.
    pub fn revive(&self) {
        self.lost.store(false, Ordering::SeqCst);
    }

    /// The wrapped backend.
    pub fn inner(&self) -> &B {
        &self.inner
    }

    fn next_uniform(&self) -> f64 {
        // SplitMix64: deterministic for a given seed and call order.
        let mut s = self.rng.lock();
        *s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = *s;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    /// The hook: fail `step` of call number `call` (of `units` units) if the plan says so.
    fn inject(&self, step: FaultStep, call: u64, units: usize) -> Result<(), BackendError> {
        if step == FaultStep::DeviceLostMidBatch && self.lost.load(Ordering::SeqCst) {
            return Err(BackendError::DeviceLost(
                "injected fault: device lost (still gone)".into(),
            ));
        }
        if !self.armed.load(Ordering::SeqCst) {
            return Ok(());
        }
        for rule in self.plan.rules.iter().filter(|r| r.step == step) {
            let fires = match rule.trigger {
                Trigger::OnCall(n) => call == n,
                Trigger::FromCall(n) => call >= n,
                Trigger::Always => true,
                Trigger::Probability(p) => self.next_uniform() < p,
                Trigger::UnitsAbove(n) => units > n,
                Trigger::AfterSuccesses(n) => {
                    self.successes.load(Ordering::SeqCst) >= n
                        && !self.lost_fired.swap(true, Ordering::SeqCst)
                }
            };
            if fires {
                self.injected.fetch_add(1, Ordering::SeqCst);
                if rule.kind == FaultKind::DeviceLost {
                    self.lost.store(true, Ordering::SeqCst);
                }
                let msg = format!("injected fault at {step} on call {call}");
                return Err(match rule.kind {
                    FaultKind::OutOfMemory => BackendError::OutOfMemory(msg),
                    FaultKind::DeviceLost => BackendError::DeviceLost(msg),
                    FaultKind::Gpu => BackendError::Gpu(msg),
                });
            }
        }
        Ok(())
    }

    /// One call of `units` units: every step's hook, then the wrapped backend.
    fn call<T>(
        &self,
        units: usize,
        run: impl FnOnce() -> Result<T, BackendError>,
    ) -> Result<T, BackendError> {
        let call = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        for step in FaultStep::ALL {
            self.inject(step, call, units)?;
        }
        let out = run()?;
        self.successes.fetch_add(1, Ordering::SeqCst);
        Ok(out)
    }

    /// [`FaultInjecting::call`] for an op whose values the executor promises a GPU backend are finite (its
    /// kernels trust them): standing in for a GPU, a NaN or infinity among `values` is a failure of its own
    /// (which the executor would count as a fallback), not the wrapped backend's answer. So a test that a bad
    /// value is refused before the device, with no fallback, fails if the executor lets one through.
    fn call_checked<T>(
        &self,
        units: usize,
        values: [&[f32]; 2],
        run: impl FnOnce() -> Result<T, BackendError>,
    ) -> Result<T, BackendError> {
        if self.device != Device::Cpu && values.iter().any(|v| v.iter().any(|x| !x.is_finite())) {
            return Err(BackendError::Gpu(
                "a value the executor should have refused reached the device".into(),
            ));
        }
        self.call(units, run)
    }
}

impl<B: Backend> Backend for FaultInjecting<B> {
    fn device(&self) -> Device {
        self.device
    }

    fn release_cached_memory(&self) {
        self.inner.release_cached_memory();
    }

    fn cosine_scores(
        &self,
        queries: &[f32],
        corpus: &[f32],
        dim: usize,
    ) -> Result<Vec<f32>, BackendError> {
        let units = queries.len().checked_div(dim).unwrap_or(0);
        self.call_checked(units, [queries, corpus], || {
            self.inner.cosine_scores(queries, corpus, dim)
        })
    }

    fn similarity(
        &self,
        queries: &[f32],
        corpus: &[f32],
        dim: usize,
        metric: recall_cpu_simd::Metric,
    ) -> Result<Vec<f32>, BackendError> {
        let units = queries.len().checked_div(dim).unwrap_or(0);
        self.call_checked(units, [queries, corpus], || {
            self.inner.similarity(queries, corpus, dim, metric)
        })
    }

    fn knn(
        &self,
        queries: &[f32],
        corpus: &[f32],
        dim: usize,
        metric: recall_cpu_simd::Metric,
        k: usize,
    ) -> Result<recall_cpu_simd::TopK, BackendError> {
        let units = queries.len().checked_div(dim).unwrap_or(0);
        self.call_checked(units, [queries, corpus], || {
            self.inner.knn(queries, corpus, dim, metric, k)
        })
    }

    fn knn_shared(
        &self,
        queries: &[f32],
        corpus: &crate::SharedCorpus,
        metric: recall_cpu_simd::Metric,
        k: usize,
    ) -> Result<recall_cpu_simd::TopK, BackendError> {
        let units = queries.len().checked_div(corpus.dim()).unwrap_or(0);
        self.call(units, || self.inner.knn_shared(queries, corpus, metric, k))
    }

    fn knn_shared_fast(
        &self,
        queries: &[f32],
        corpus: &crate::SharedCorpus,
        metric: recall_cpu_simd::Metric,
        k: usize,
        format: crate::backend::FastFormat,
    ) -> Result<recall_cpu_simd::TopK, BackendError> {
        let units = queries.len().checked_div(corpus.dim()).unwrap_or(0);
        self.call(units, || {
            self.inner
                .knn_shared_fast(queries, corpus, metric, k, format)
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn score_candidates_shared(
        &self,
        queries: &[f32],
        corpus: &crate::SharedCorpus,
        metric: recall_cpu_simd::Metric,
        offsets: &[usize],
        ids: &[u32],
        k: usize,
    ) -> Result<recall_cpu_simd::TopK, BackendError> {
        let units = queries.len().checked_div(corpus.dim()).unwrap_or(0);
        self.call(units, || {
            self.inner
                .score_candidates_shared(queries, corpus, metric, offsets, ids, k)
        })
    }

    fn spread_shared(
        &self,
        graph: &crate::SharedGraph,
        seeds: &[f32],
        params: &recall_cpu_simd::SpreadParams,
    ) -> Result<recall_cpu_simd::Spread, BackendError> {
        self.call(1, || self.inner.spread_shared(graph, seeds, params))
    }

    fn spread_shared_from(
        &self,
        graph: &crate::SharedGraph,
        seeds: &[(u32, f32)],
        params: &recall_cpu_simd::SpreadParams,
    ) -> Result<recall_cpu_simd::Spread, BackendError> {
        self.call(1, || self.inner.spread_shared_from(graph, seeds, params))
    }

    fn knn_fast(
        &self,
        queries: &[f32],
        corpus: &[f32],
        dim: usize,
        metric: recall_cpu_simd::Metric,
        k: usize,
        format: crate::backend::FastFormat,
    ) -> Result<recall_cpu_simd::TopK, BackendError> {
        let units = queries.len().checked_div(dim).unwrap_or(0);
        self.call_checked(units, [queries, corpus], || {
            self.inner.knn_fast(queries, corpus, dim, metric, k, format)
        })
    }

    fn score_candidates(
        &self,
        queries: &[f32],
        corpus: &[f32],
        dim: usize,
        metric: recall_cpu_simd::Metric,
        offsets: &[usize],
        ids: &[u32],
        k: usize,
    ) -> Result<recall_cpu_simd::TopK, BackendError> {
        let units = queries.len().checked_div(dim).unwrap_or(0);
        self.call(units, || {
            self.inner
                .score_candidates(queries, corpus, dim, metric, offsets, ids, k)
        })
    }

    fn spread(
        &self,
        graph: &recall_cpu_simd::SpreadGraph,
        seeds: &[f32],
        params: &recall_cpu_simd::SpreadParams,
    ) -> Result<recall_cpu_simd::Spread, BackendError> {
        self.call(1, || self.inner.spread(graph, seeds, params))
    }

    fn kmeans(
        &self,
        points: &[f32],
        dim: usize,
        k: usize,
        iters: usize,
        seed: u64,
    ) -> Result<recall_cpu_simd::KMeans, BackendError> {
        self.call(1, || self.inner.kmeans(points, dim, k, iters, seed))
    }

    fn clip_and_noise_into(
        &self,
        x: &[f32],
        dim: usize,
        clip: f32,
        sigma: f32,
        seed: u64,
        out: &mut [f32],
    ) -> Result<(), BackendError> {
        let units = x.len().checked_div(dim).unwrap_or(0);
        self.call(units, || {
            self.inner
                .clip_and_noise_into(x, dim, clip, sigma, seed, out)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::CpuBackend;

    #[test]
    fn a_disarmed_plan_injects_nothing_until_armed() {
        let f = FaultInjecting::new(
            CpuBackend,
            FaultPlan::new().fail(FaultStep::Launch, Trigger::Always),
        );
        let (q, c) = ([1.0f32, 0.0], [1.0f32, 0.0, 0.0, 1.0]);
        assert!(f.cosine_scores(&q, &c, 2).is_err());
        f.arm(false);
        assert_eq!(f.cosine_scores(&q, &c, 2), Ok(vec![1.0, 0.0]));
        f.arm(true);
        assert!(matches!(
            f.cosine_scores(&q, &c, 2),
            Err(BackendError::Gpu(_))
        ));
        assert_eq!(f.stats().injected, 2);
        assert_eq!(f.stats().successes, 1);
    }

    #[test]
    fn shared_calls_go_through_the_hook() {
        let f = FaultInjecting::new(CpuBackend, FaultPlan::new().lose_device_after(1));
        let corpus =
            crate::SharedCorpus::new(vec![1.0, 0.0, 0.0, 1.0], 2).unwrap_or_else(|e| panic!("{e}"));
        let q = [0.0f32, 1.0];
        let first = f.knn_shared(&q, &corpus, recall_cpu_simd::Metric::Dot, 1);
        assert_eq!(first.map(|t| t.ids), Ok(vec![1]));
        assert!(matches!(
            f.knn_shared(&q, &corpus, recall_cpu_simd::Metric::Dot, 1),
            Err(BackendError::DeviceLost(_))
        ));
        assert_eq!(f.stats().calls, 2);
    }
}
