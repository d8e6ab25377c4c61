//! The executor's metrics: lock-free counters and histograms, rendered in the Prometheus text format by
//! one function, [`Metrics::prometheus_text`].

use crate::breaker::{BreakerState, Transition};
use crate::device::Device;
use crate::op::OpKind;
use parking_lot::Mutex;
use std::fmt::{self, Write as _};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::Duration;

/// Why a call chosen for the GPU was answered on the CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FallbackReason {
    /// Out of memory even at the smallest batch.
    OutOfMemory,
    /// The tenant's VRAM quota cannot hold even the smallest batch.
    Quota,
    /// The device was lost.
    DeviceLost,
    /// Any other GPU failure (launch, copy, synchronise, load).
    GpuError,
    /// The GPU's kernels do not take the call's shape (not a fault of the device; the breaker does not count it).
    Unsupported,
}

impl FallbackReason {
    /// Every reason, in index order.
    pub const ALL: [FallbackReason; 5] = [
        FallbackReason::OutOfMemory,
        FallbackReason::Quota,
        FallbackReason::DeviceLost,
        FallbackReason::GpuError,
        FallbackReason::Unsupported,
    ];

    /// The metric label.
    pub fn name(self) -> &'static str {
        match self {
            FallbackReason::OutOfMemory => "out_of_memory",
            FallbackReason::Quota => "quota",
            FallbackReason::DeviceLost => "device_lost",
            FallbackReason::GpuError => "gpu_error",
            FallbackReason::Unsupported => "unsupported",
        }
    }
}

impl fmt::Display for FallbackReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

const SUB_BITS: u32 = 3;
const SUB: usize = 1 << SUB_BITS;
const LOG_BUCKETS: usize = 64 * SUB;

/// A histogram of positive integers in log-spaced buckets (8 per doubling, so quantiles are within
/// 12.5 %), lock-free.
#[derive(Debug)]
pub struct LogHistogram {
    buckets: Box<[AtomicU64]>,
    count: AtomicU64,
    sum: AtomicU64,
}

impl Default for LogHistogram {
    fn default() -> Self {
        LogHistogram {
            buckets: (0..LOG_BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            sum: AtomicU64::new(0),
        }
    }
}

fn log_index(v: u64) -> usize {
    let v = v.max(1);
    let e = 63 - v.leading_zeros();
    let sub = if e >= SUB_BITS {
        (v >> (e - SUB_BITS)) as usize & (SUB - 1)
    } else {
        (v << (SUB_BITS - e)) as usize & (SUB - 1)
    };
    e as usize * SUB + sub
}

/// The largest value that lands in bucket `i`.
fn log_upper(i: usize) -> u64 {
    let (e, sub) = ((i / SUB) as u32, (i % SUB) as u64);
    // One past the bucket is (SUB + sub + 1) * 2^e / SUB; the largest integer below it:
    let next = ((SUB as u64 + sub + 1) as u128) << e;
    let upper = next.div_ceil(SUB as u128) - 1;
    u64::try_from(upper).unwrap_or(u64::MAX).max(1)
}

impl LogHistogram {
    /// Count one value.
    pub fn record(&self, v: u64) {
        self.buckets[log_index(v)].fetch_add(1, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum.fetch_add(v, Ordering::Relaxed);
    }

    /// Values counted.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// Sum of the values counted.
    pub fn sum(&self) -> u64 {
        self.sum.load(Ordering::Relaxed)
    }

    /// The `q` quantile (0..=1), as the upper end of its bucket; `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        let counts: Vec<u64> = self
            .buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, c) in counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(log_upper(i));
            }
        }
        None
    }
}

/// A histogram with buckets at powers of two (`le` 1, 2, 4, …): batch sizes.
#[derive(Debug)]
pub struct Pow2Histogram {
    buckets: [AtomicU64; 17],
    count: AtomicU64,
    sum: AtomicU64,
}

impl Default for Pow2Histogram {
    fn default() -> Self {
        Pow2Histogram {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            count: AtomicU64::new(0),
            sum: AtomicU64::new(0),
        }
    }
}

impl Pow2Histogram {
    /// Count one value (values above 65,536 land in the last bucket).
    pub fn record(&self, v: u64) {
        let i = (64 - v.max(1).saturating_sub(1).leading_zeros()) as usize;
        self.buckets[i.min(16)].fetch_add(1, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum.fetch_add(v, Ordering::Relaxed);
    }

    /// Values counted.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// Sum of the values counted.
    pub fn sum(&self) -> u64 {
        self.sum.load(Ordering::Relaxed)
    }

    /// Values counted that were at most `2^i`... cumulatively, per bucket (`le`, count).
    pub fn cumulative(&self) -> Vec<(u64, u64)> {
        let mut seen = 0;
        self.buckets
            .iter()
            .enumerate()
            .map(|(i, b)| {
                seen += b.load(Ordering::Relaxed);
                (1u64 << i, seen)
            })
            .collect()
    }
}

/// Where a dynamically formed batch spends its time ([`Metrics::batch_phase_ns`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchPhase {
    /// From the batch's opening (its first call) to its closing: the time its first member waited for
    /// others to join and for a free run slot.
    Wait,
    /// The batched call itself (on a GPU: uploads, kernels, results back).
    Run,
    /// From the end of the op's previous batch to this one's start: time the batcher left its run slot
    /// empty. Under load it is the hand-over cost between batches; when idle, the time between calls.
    Gap,
}

impl BatchPhase {
    /// Every phase, in the order of the metric's labels.
    pub const ALL: [BatchPhase; 3] = [BatchPhase::Wait, BatchPhase::Run, BatchPhase::Gap];

    fn index(self) -> usize {
        self as usize
    }

    /// The phase's label value.
    pub fn name(self) -> &'static str {
        match self {
            BatchPhase::Wait => "wait",
            BatchPhase::Run => "run",
            BatchPhase::Gap => "gap",
        }
    }
}

/// Per-tenant counters (registered by the executor when a tenant is added).
#[derive(Debug, Default)]
pub struct TenantCounters {
    /// Calls admitted and run.
    pub admitted: AtomicU64,
    /// Calls refused because the queue was full (back-pressure).
    pub rejected: AtomicU64,
    /// Calls that waited past their timeout.
    pub timed_out: AtomicU64,
}

/// Everything the executor counts.
#[derive(Debug)]
pub struct Metrics {
    calls: [[AtomicU64; 2]; OpKind::COUNT],
    latency_ns: [LogHistogram; OpKind::COUNT],
    fallbacks: [AtomicU64; FallbackReason::ALL.len()],
    oom_events: AtomicU64,
    oom_splits: AtomicU64,
    breaker_rejections: AtomicU64,
    breaker_transitions: [AtomicU64; 3],
    breaker_state: AtomicU8,
    batch_sizes: Pow2Histogram,
    /// Per formed batch: [`BatchPhase::ALL`] in nanoseconds.
    batch_phase_ns: [LogHistogram; 3],
    gpu_memory_in_use: AtomicU64,
    tenants: Mutex<Vec<(String, Arc<TenantCounters>)>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            calls: std::array::from_fn(|_| [AtomicU64::new(0), AtomicU64::new(0)]),
            latency_ns: std::array::from_fn(|_| LogHistogram::default()),
            fallbacks: std::array::from_fn(|_| AtomicU64::new(0)),
            oom_events: AtomicU64::new(0),
            oom_splits: AtomicU64::new(0),
            breaker_rejections: AtomicU64::new(0),
            breaker_transitions: std::array::from_fn(|_| AtomicU64::new(0)),
            breaker_state: AtomicU8::new(0),
            batch_sizes: Pow2Histogram::default(),
            batch_phase_ns: std::array::from_fn(|_| LogHistogram::default()),
            gpu_memory_in_use: AtomicU64::new(0),
            tenants: Mutex::new(Vec::new()),
        }
    }
}

/// One labelled series of a Prometheus summary in seconds from a histogram of nanoseconds: its p50, p95 and
/// p99 (NaN while empty), sum and count.
fn write_summary_ns(o: &mut String, metric: &str, label: &str, h: &LogHistogram) -> fmt::Result {
    for q in [0.5, 0.95, 0.99] {
        match h.quantile(q) {
            Some(ns) => writeln!(
                o,
                "{metric}{{{label},quantile=\"{q}\"}} {}",
                ns as f64 * 1e-9
            )?,
            None => writeln!(o, "{metric}{{{label},quantile=\"{q}\"}} NaN")?,
        }
    }
    writeln!(o, "{metric}_sum{{{label}}} {}", h.sum() as f64 * 1e-9)?;
    writeln!(o, "{metric}_count{{{label}}} {}", h.count())
}

fn dev_index(d: Device) -> usize {
    match d {
        Device::Cpu => 0,
        Device::Gpu { .. } => 1,
    }
}

fn transition_index(t: Transition) -> usize {
    match t {
        Transition::Opened => 0,
        Transition::HalfOpened => 1,
        Transition::Closed => 2,
    }
}

impl Metrics {
    /// A call of `op` answered by `device` in `latency` (queueing included).
    pub fn record_call(&self, op: OpKind, device: Device, latency: Duration) {
        self.calls[op.index()][dev_index(device)].fetch_add(1, Ordering::Relaxed);
        let ns = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        self.latency_ns[op.index()].record(ns);
    }

    /// A GPU call fell back to the CPU.
    pub fn record_fallback(&self, reason: FallbackReason) {
        let i = FallbackReason::ALL
            .iter()
            .position(|r| *r == reason)
            .unwrap_or(0);
        self.fallbacks[i].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn record_oom(&self) {
        self.oom_events.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn record_oom_split(&self) {
        self.oom_splits.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn record_breaker_rejection(&self) {
        self.breaker_rejections.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn record_transition(&self, t: Transition, now: BreakerState) {
        self.breaker_transitions[transition_index(t)].fetch_add(1, Ordering::Relaxed);
        self.breaker_state.store(now.code(), Ordering::Relaxed);
    }

    /// A formed batch of `size` queries and its phases; `gap` is `None` for the op's first batch.
    pub(crate) fn record_batch(
        &self,
        size: usize,
        wait: Duration,
        run: Duration,
        gap: Option<Duration>,
    ) {
        self.batch_sizes.record(size as u64);
        let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.batch_phase_ns[BatchPhase::Wait.index()].record(ns(wait));
        self.batch_phase_ns[BatchPhase::Run.index()].record(ns(run));
        if let Some(gap) = gap {
            self.batch_phase_ns[BatchPhase::Gap.index()].record(ns(gap));
        }
    }

    /// A call's device memory reserved (`+bytes`) or given back (`-bytes`): one atomic step each, so the gauge is
    /// the sum of the reservations held (a read of the ledger stored after it could be overtaken by another
    /// thread's older read and leave a stale value).
    pub(crate) fn add_gpu_memory_in_use(&self, bytes: u64) {
        self.gpu_memory_in_use.fetch_add(bytes, Ordering::Relaxed);
    }

    pub(crate) fn sub_gpu_memory_in_use(&self, bytes: u64) {
        // Saturating: never below zero whatever the order of two threads' steps.
        let _ = self
            .gpu_memory_in_use
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                Some(v.saturating_sub(bytes))
            });
    }

    pub(crate) fn register_tenant(&self, name: &str) -> Arc<TenantCounters> {
        let c = Arc::new(TenantCounters::default());
        self.tenants.lock().push((name.to_string(), c.clone()));
        c
    }

    /// Calls of `op` answered by `device`.
    pub fn calls(&self, op: OpKind, device: Device) -> u64 {
        self.calls[op.index()][dev_index(device)].load(Ordering::Relaxed)
    }

    /// Calls answered on the CPU after the GPU had been chosen, for `reason`.
    pub fn fallbacks(&self, reason: FallbackReason) -> u64 {
        FallbackReason::ALL
            .iter()
            .position(|r| *r == reason)
            .map_or(0, |i| self.fallbacks[i].load(Ordering::Relaxed))
    }

    /// All fallbacks, every reason.
    pub fn fallbacks_total(&self) -> u64 {
        self.fallbacks
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum()
    }

    /// Out-of-memory errors the GPU returned (each split attempt counts).
    pub fn oom_events(&self) -> u64 {
        self.oom_events.load(Ordering::Relaxed)
    }

    /// Times a batch was halved after an out-of-memory error.
    pub fn oom_splits(&self) -> u64 {
        self.oom_splits.load(Ordering::Relaxed)
    }

    /// Calls kept off the GPU by the open breaker.
    pub fn breaker_rejections(&self) -> u64 {
        self.breaker_rejections.load(Ordering::Relaxed)
    }

    /// Breaker transitions of one kind so far.
    pub fn breaker_transitions(&self, t: Transition) -> u64 {
        self.breaker_transitions[transition_index(t)].load(Ordering::Relaxed)
    }

    /// Sizes of the batches dynamic batching formed.
    pub fn batch_sizes(&self) -> &Pow2Histogram {
        &self.batch_sizes
    }

    /// Per formed batch, the time spent in `phase`, in nanoseconds.
    pub fn batch_phase_ns(&self, phase: BatchPhase) -> &LogHistogram {
        &self.batch_phase_ns[phase.index()]
    }

    /// Latencies of `op` in nanoseconds.
    pub fn latency_ns(&self, op: OpKind) -> &LogHistogram {
        &self.latency_ns[op.index()]
    }

    /// Device memory the executor's calls hold now, in bytes (as accounted against tenant quotas).
    pub fn gpu_memory_in_use(&self) -> u64 {
        self.gpu_memory_in_use.load(Ordering::Relaxed)
    }

    /// Every metric in the Prometheus text exposition format (version 0.0.4). The breaker's gauge is its state
    /// at its last transition; [`Executor::prometheus_text`](crate::Executor::prometheus_text) gives its state
    /// now (an open breaker whose back-off has passed is half-open before any call records it).
    pub fn prometheus_text(&self) -> String {
        self.prometheus_text_with(self.breaker_state.load(Ordering::Relaxed))
    }

    /// [`Metrics::prometheus_text`] with the breaker's gauge given (`BreakerState::code`).
    pub(crate) fn prometheus_text_with(&self, breaker_state: u8) -> String {
        let mut o = String::new();
        // Writing to a String cannot fail.
        let _ = self.write_prometheus(&mut o, breaker_state);
        o
    }

    fn write_prometheus(&self, o: &mut String, breaker_state: u8) -> fmt::Result {
        writeln!(
            o,
            "# HELP recall_calls_total Calls answered, by op and device."
        )?;
        writeln!(o, "# TYPE recall_calls_total counter")?;
        for op in OpKind::ALL {
            for (d, name) in ["cpu", "gpu"].iter().enumerate() {
                let v = self.calls[op.index()][d].load(Ordering::Relaxed);
                writeln!(o, "recall_calls_total{{op=\"{op}\",device=\"{name}\"}} {v}")?;
            }
        }
        writeln!(
            o,
            "# HELP recall_fallbacks_total GPU calls answered on the CPU, by reason."
        )?;
        writeln!(o, "# TYPE recall_fallbacks_total counter")?;
        for (i, r) in FallbackReason::ALL.iter().enumerate() {
            let v = self.fallbacks[i].load(Ordering::Relaxed);
            writeln!(o, "recall_fallbacks_total{{reason=\"{r}\"}} {v}")?;
        }
        writeln!(
            o,
            "# HELP recall_gpu_oom_events_total Out-of-memory errors from the GPU."
        )?;
        writeln!(o, "# TYPE recall_gpu_oom_events_total counter")?;
        writeln!(o, "recall_gpu_oom_events_total {}", self.oom_events())?;
        writeln!(
            o,
            "# HELP recall_gpu_oom_splits_total Batches halved after an out-of-memory error."
        )?;
        writeln!(o, "# TYPE recall_gpu_oom_splits_total counter")?;
        writeln!(o, "recall_gpu_oom_splits_total {}", self.oom_splits())?;
        writeln!(
            o,
            "# HELP recall_breaker_state GPU circuit breaker: 0 closed, 1 half-open, 2 open."
        )?;
        writeln!(o, "# TYPE recall_breaker_state gauge")?;
        writeln!(o, "recall_breaker_state {breaker_state}")?;
        writeln!(
            o,
            "# HELP recall_breaker_transitions_total Circuit breaker state changes."
        )?;
        writeln!(o, "# TYPE recall_breaker_transitions_total counter")?;
        for (t, name) in [
            (Transition::Opened, "open"),
            (Transition::HalfOpened, "half_open"),
            (Transition::Closed, "closed"),
        ] {
            let v = self.breaker_transitions(t);
            writeln!(o, "recall_breaker_transitions_total{{to=\"{name}\"}} {v}")?;
        }
        writeln!(
            o,
            "# HELP recall_breaker_rejections_total Calls kept off the GPU by the open breaker."
        )?;
        writeln!(o, "# TYPE recall_breaker_rejections_total counter")?;
        writeln!(
            o,
            "recall_breaker_rejections_total {}",
            self.breaker_rejections()
        )?;
        writeln!(
            o,
            "# HELP recall_gpu_memory_in_use_bytes Device memory held by calls in flight."
        )?;
        writeln!(o, "# TYPE recall_gpu_memory_in_use_bytes gauge")?;
        writeln!(
            o,
            "recall_gpu_memory_in_use_bytes {}",
            self.gpu_memory_in_use()
        )?;
        writeln!(
            o,
            "# HELP recall_batch_size Queries per dynamically formed batch."
        )?;
        writeln!(o, "# TYPE recall_batch_size histogram")?;
        for (le, c) in self.batch_sizes.cumulative() {
            writeln!(o, "recall_batch_size_bucket{{le=\"{le}\"}} {c}")?;
        }
        let n = self.batch_sizes.count();
        writeln!(o, "recall_batch_size_bucket{{le=\"+Inf\"}} {n}")?;
        writeln!(o, "recall_batch_size_sum {}", self.batch_sizes.sum())?;
        writeln!(o, "recall_batch_size_count {n}")?;
        writeln!(
            o,
            "# HELP recall_batch_phase_seconds Per dynamically formed batch: wait (opening to closing), run (the batched call), gap (run slot empty before it)."
        )?;
        writeln!(o, "# TYPE recall_batch_phase_seconds summary")?;
        for phase in BatchPhase::ALL {
            let label = format!("phase=\"{}\"", phase.name());
            write_summary_ns(
                o,
                "recall_batch_phase_seconds",
                &label,
                &self.batch_phase_ns[phase.index()],
            )?;
        }
        writeln!(
            o,
            "# HELP recall_call_latency_seconds Call latency, queueing included, by op."
        )?;
        writeln!(o, "# TYPE recall_call_latency_seconds summary")?;
        for op in OpKind::ALL {
            let label = format!("op=\"{op}\"");
            write_summary_ns(
                o,
                "recall_call_latency_seconds",
                &label,
                &self.latency_ns[op.index()],
            )?;
        }
        let tenants = self.tenants.lock();
        if !tenants.is_empty() {
            for (metric, help, pick) in [
                (
                    "recall_tenant_admitted_total",
                    "Calls admitted from a tenant's queue.",
                    0,
                ),
                (
                    "recall_tenant_rejected_total",
                    "Calls refused because the tenant's queue was full.",
                    1,
                ),
                (
                    "recall_tenant_timeouts_total",
                    "Calls that waited for the tenant's queue past their timeout.",
                    2,
                ),
            ] {
                writeln!(o, "# HELP {metric} {help}")?;
                writeln!(o, "# TYPE {metric} counter")?;
                for (name, c) in tenants.iter() {
                    let v = match pick {
                        0 => &c.admitted,
                        1 => &c.rejected,
                        _ => &c.timed_out,
                    }
                    .load(Ordering::Relaxed);
                    writeln!(o, "{metric}{{tenant=\"{}\"}} {v}", escape_label(name))?;
                }
            }
        }
        Ok(())
    }
}

fn escape_label(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_buckets_bound_their_values() {
        for v in [
            1u64,
            2,
            3,
            7,
            8,
            9,
            15,
            16,
            17,
            100,
            1000,
            123_456,
            1 << 40,
            u64::MAX / 3,
        ] {
            let i = log_index(v);
            assert!(log_upper(i) >= v, "v={v} upper={}", log_upper(i));
            assert!(
                i == 0 || log_upper(i - 1) < v,
                "v={v} prev={}",
                log_upper(i - 1)
            );
        }
    }

    #[test]
    fn quantiles_within_an_eighth() {
        let h = LogHistogram::default();
        for v in 1..=1000u64 {
            h.record(v * 1000);
        }
        let p50 = h.quantile(0.5).unwrap() as f64;
        let p99 = h.quantile(0.99).unwrap() as f64;
        assert!((p50 / 500_000.0 - 1.0).abs() < 0.13, "{p50}");
        assert!((p99 / 990_000.0 - 1.0).abs() < 0.13, "{p99}");
        assert_eq!(h.count(), 1000);
    }

    #[test]
    fn pow2_buckets() {
        let h = Pow2Histogram::default();
        for v in [1, 2, 3, 4, 5, 64, 65] {
            h.record(v);
        }
        let c = h.cumulative();
        assert_eq!(c[0], (1, 1));
        assert_eq!(c[1], (2, 2));
        assert_eq!(c[2], (4, 4));
        assert_eq!(c[3], (8, 5));
        assert_eq!(c[6], (64, 6));
        assert_eq!(c[7], (128, 7));
    }
}
