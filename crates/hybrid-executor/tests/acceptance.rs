//! Issue 10's scenarios without a GPU: the mixed multi-tenant load of `recall load` (single and batch knn
//! against a shared corpus, batched single-query scores, candidate scoring, spreading) against the CPU
//! backend and against the fault-injecting backend in the GPU slot, faults at random steps under
//! concurrency; a device lost mid-run and brought back; and tenant isolation (a full queue, a quota that
//! cannot hold a call) while another tenant's calls keep succeeding.
//!
//! Every answer is compared bit for bit with the CPU backend's answer to the same call; every call is
//! answered exactly once; the metrics count what happened. Nothing here measures or asserts time.
#![allow(clippy::unwrap_used)] // a test crate: helpers panic on failure like the tests do

use parking_lot::{Condvar, Mutex};
use recall_cpu_simd::{Metric, SpreadGraph, SpreadParams, TopK};
use recall_hybrid_executor::{
    Backend, BackendError, BatchConfig, BreakerConfig, BreakerState, CallOptions, CorpusRef,
    CpuBackend, Device, DevicePolicy, ExecError, Executor, ExecutorConfig, FallbackReason,
    FaultInjecting, FaultKind, FaultPlan, FaultStep, ManualClock, OpKind, SharedCorpus,
    TenantConfig, TenantId, Trigger, current_tenant, power_law_graph,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

const DIM: usize = 16;
const ROWS: usize = 300;
const K: usize = 5;
const GPU: Device = Device::Gpu { ordinal: 0 };

/// Deterministic values in [-1, 1).
fn matrix(seed: u64, rows: usize, dim: usize) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..rows * dim)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn topk_bits(t: &TopK) -> (Vec<u32>, Vec<u32>) {
    (t.ids.clone(), bits(&t.scores))
}

/// Every call GPU-sized, no calibration or cache, a manual clock.
fn config(clock: &Arc<ManualClock>) -> ExecutorConfig {
    ExecutorConfig {
        policy: DevicePolicy::Auto,
        gpu_min_work: 0,
        calibrate: false,
        use_cache: false,
        breaker: BreakerConfig {
            failure_threshold: u32::MAX,
            backoff: Duration::from_secs(10),
            max_backoff: Duration::from_secs(40),
        },
        batching: BatchConfig {
            max_batch: 8,
            max_wait: Duration::from_micros(300),
            ..BatchConfig::default()
        },
        max_in_flight: 3,
        clock: clock.clone(),
        ..ExecutorConfig::default()
    }
}

/// The data every call reads.
struct World {
    corpus: SharedCorpus,
    graph: SpreadGraph,
    n_nodes: usize,
}

fn world() -> World {
    let mut rng = recall_hybrid_executor::difftest::SplitMix::new(3);
    let n_nodes = 200;
    let (indptr, indices, weights) = power_law_graph(&mut rng, n_nodes, 1200, 20, 20);
    World {
        corpus: SharedCorpus::new(matrix(1, ROWS, DIM), DIM).unwrap(),
        graph: SpreadGraph::from_csr(&indptr, &indices, &weights).unwrap(),
        n_nodes,
    }
}

/// One call of the mix, by number: its kind and inputs follow from `seed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Single,
    Batch,
    BatchedScores,
    Candidates,
    Spread,
}

const KINDS: [Kind; 5] = [
    Kind::Single,
    Kind::Batch,
    Kind::BatchedScores,
    Kind::Candidates,
    Kind::Spread,
];

const SPREAD: SpreadParams = SpreadParams {
    decay: 0.5,
    threshold: 0.01,
    hops: 3,
    k: K,
};

/// Candidate lists: `per` distinct ids per query (a progression with a step coprime to ROWS = 300).
fn candidates(seed: u64, nq: usize, per: usize) -> (Vec<usize>, Vec<u32>) {
    let mut ids = Vec::new();
    for q in 0..nq {
        let start = (seed as usize * 31 + q * 17) % ROWS;
        ids.extend((0..per).map(|i| ((start + i * 7) % ROWS) as u32));
    }
    ((0..=nq).map(|q| q * per).collect(), ids)
}

fn spread_seeds(seed: u64, n: usize) -> Vec<f32> {
    let mut s = vec![0.0f32; n];
    for i in 0..4 {
        s[(seed as usize * 13 + i * 29) % n] = 1.0;
    }
    s
}

/// What a call returned, reduced to comparable bits, and where it ran.
#[derive(Debug, PartialEq)]
struct Got {
    answer: (Vec<u32>, Vec<u32>),
    device: Device,
    fallback: bool,
}

fn call(
    exec: &Executor,
    w: &World,
    opts: &CallOptions,
    kind: Kind,
    seed: u64,
) -> Result<Got, ExecError> {
    let c = &w.corpus;
    let got = |answer, device, fallback: &Option<String>| Got {
        answer,
        device,
        fallback: fallback.is_some(),
    };
    match kind {
        Kind::Single | Kind::Batch => {
            let nq = if kind == Kind::Single { 1 } else { 6 };
            let q = matrix(seed, nq, DIM);
            let o = exec.knn_shared(opts, &q, c, Metric::Cosine, K)?;
            Ok(got(topk_bits(&o.value), o.device, &o.fallback))
        }
        Kind::BatchedScores => {
            let q = matrix(seed, 1, DIM);
            let corpus = CorpusRef::new(c.data(), DIM)?;
            let o = exec.cosine_scores_single(opts, &q, &corpus)?;
            Ok(got((Vec::new(), bits(&o.value)), o.device, &o.fallback))
        }
        Kind::Candidates => {
            let q = matrix(seed, 3, DIM);
            let (offsets, ids) = candidates(seed, 3, 20);
            let o =
                exec.score_candidates(opts, &q, c.data(), DIM, Metric::Dot, &offsets, &ids, K)?;
            Ok(got(topk_bits(&o.value), o.device, &o.fallback))
        }
        Kind::Spread => {
            let seeds = spread_seeds(seed, w.n_nodes);
            let o = exec.spread(opts, &w.graph, &seeds, &SPREAD)?;
            let mut ids = o.value.top.ids.clone();
            ids.extend(bits(&o.value.top.scores));
            Ok(got((ids, bits(&o.value.activation)), o.device, &o.fallback))
        }
    }
}

/// The CPU backend's answer to the same call.
fn reference(w: &World, kind: Kind, seed: u64) -> (Vec<u32>, Vec<u32>) {
    let cpu = CpuBackend;
    let c = w.corpus.data();
    match kind {
        Kind::Single | Kind::Batch => {
            let nq = if kind == Kind::Single { 1 } else { 6 };
            topk_bits(
                &cpu.knn(&matrix(seed, nq, DIM), c, DIM, Metric::Cosine, K)
                    .unwrap(),
            )
        }
        Kind::BatchedScores => (
            Vec::new(),
            bits(&cpu.cosine_scores(&matrix(seed, 1, DIM), c, DIM).unwrap()),
        ),
        Kind::Candidates => {
            let (offsets, ids) = candidates(seed, 3, 20);
            topk_bits(
                &cpu.score_candidates(
                    &matrix(seed, 3, DIM),
                    c,
                    DIM,
                    Metric::Dot,
                    &offsets,
                    &ids,
                    K,
                )
                .unwrap(),
            )
        }
        Kind::Spread => {
            let s = cpu
                .spread(&w.graph, &spread_seeds(seed, w.n_nodes), &SPREAD)
                .unwrap();
            let mut ids = s.top.ids.clone();
            ids.extend(bits(&s.top.scores));
            (ids, bits(&s.activation))
        }
    }
}

/// What a concurrent run saw.
#[derive(Debug, Default)]
struct Tally {
    answered: AtomicUsize,
    fallbacks: AtomicUsize,
    on_gpu: AtomicUsize,
    batched_scores: AtomicUsize,
}

/// `tenants x threads` callers, `calls` each, every kind in turn: each answer equals the CPU's.
fn run_mix(
    exec: &Executor,
    w: &World,
    tenants: &[TenantId],
    threads_per_tenant: usize,
    calls: usize,
    gpu_first: bool,
) -> Tally {
    let tally = Tally::default();
    std::thread::scope(|s| {
        for th in 0..tenants.len() * threads_per_tenant {
            let (tally, tenant) = (&tally, tenants[th % tenants.len()]);
            s.spawn(move || {
                let opts = CallOptions::tenant(tenant).wait(Duration::from_secs(600));
                for i in 0..calls {
                    let kind = KINDS[(th + i) % KINDS.len()];
                    let seed = (th * 1000 + i) as u64 + 7;
                    let got = call(exec, w, &opts, kind, seed)
                        .unwrap_or_else(|e| panic!("thread {th} call {i} ({kind:?}): {e}"));
                    assert_eq!(
                        got.answer,
                        reference(w, kind, seed),
                        "thread {th} call {i} ({kind:?}) on {}",
                        got.device
                    );
                    // A fallback is an answer from the CPU; with every call sent to the GPU first
                    // (`gpu_first`), every CPU answer is a fallback.
                    if got.fallback || gpu_first {
                        assert_eq!(got.fallback, got.device == Device::Cpu, "{got:?}");
                    }
                    tally.answered.fetch_add(1, Ordering::SeqCst);
                    tally
                        .fallbacks
                        .fetch_add(usize::from(got.fallback), Ordering::SeqCst);
                    tally
                        .on_gpu
                        .fetch_add(usize::from(got.device == GPU), Ordering::SeqCst);
                    if kind == Kind::BatchedScores {
                        tally.batched_scores.fetch_add(1, Ordering::SeqCst);
                    }
                }
            });
        }
    });
    tally
}

fn add_tenants(exec: &Executor, n: usize) -> Vec<TenantId> {
    (0..n)
        .map(|i| exec.add_tenant(TenantConfig::new(format!("t{i}")).queue_capacity(4)))
        .collect()
}

/// Calls the executor ran (`run_op`s), every op and device.
fn op_runs(exec: &Executor) -> u64 {
    let m = exec.metrics();
    OpKind::ALL
        .iter()
        .map(|op| m.calls(*op, Device::Cpu) + m.calls(*op, GPU))
        .sum()
}

/// The executor's own accounts agree with what the callers saw: every single-query score call is in
/// exactly one batch, every run is one tenant admission, nothing is queued or reserved afterwards.
fn check_accounts(exec: &Executor, tenants: &[TenantId], tally: &Tally) {
    let answered = tally.answered.load(Ordering::SeqCst) as u64;
    let batched = tally.batched_scores.load(Ordering::SeqCst) as u64;
    let m = exec.metrics();
    assert_eq!(m.batch_sizes().sum(), batched, "batch members");
    let batches = m.batch_sizes().count();
    assert!(batches <= batched);
    assert_eq!(op_runs(exec), answered - batched + batches, "runs");
    let text = exec.prometheus_text();
    let admitted: u64 = text
        .lines()
        .filter(|l| l.starts_with("recall_tenant_admitted_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    assert_eq!(admitted, op_runs(exec), "tenant admissions");
    assert_eq!(exec.vram_in_use(), 0);
    for t in tenants {
        assert_eq!(exec.queued(*t), 0);
    }
}

#[test]
fn mixed_load_on_the_cpu_backend() {
    let w = world();
    let clock = ManualClock::new();
    let exec = Executor::with_backends(
        ExecutorConfig {
            policy: DevicePolicy::Cpu,
            ..config(&clock)
        },
        Arc::new(CpuBackend),
        None,
    )
    .unwrap();
    let tenants = add_tenants(&exec, 8);
    let tally = run_mix(&exec, &w, &tenants, 2, 15, false);
    assert_eq!(tally.answered.load(Ordering::SeqCst), 8 * 2 * 15);
    assert_eq!(tally.on_gpu.load(Ordering::SeqCst), 0);
    assert_eq!(exec.metrics().fallbacks_total(), 0);
    check_accounts(&exec, &tenants, &tally);
}

#[test]
fn mixed_load_with_faults_at_random_steps() {
    let w = world();
    let clock = ManualClock::new();
    let mut plan = FaultPlan::new().seed(2026);
    for (step, kind) in [
        (FaultStep::Alloc, FaultKind::OutOfMemory),
        (FaultStep::CopyIn, FaultKind::Gpu),
        (FaultStep::Launch, FaultKind::Gpu),
        (FaultStep::Sync, FaultKind::Gpu),
        (FaultStep::CopyOut, FaultKind::Gpu),
    ] {
        plan = plan.fail_as(step, Trigger::Probability(0.06), kind);
    }
    let gpu = Arc::new(FaultInjecting::new(CpuBackend, plan));
    let exec =
        Executor::with_backends(config(&clock), Arc::new(CpuBackend), Some(gpu.clone())).unwrap();
    let tenants = add_tenants(&exec, 8);
    let tally = run_mix(&exec, &w, &tenants, 2, 15, true);
    assert_eq!(tally.answered.load(Ordering::SeqCst), 8 * 2 * 15);
    let stats = gpu.stats();
    assert!(stats.injected > 0, "{stats:?}");
    assert!(tally.on_gpu.load(Ordering::SeqCst) > 0);
    assert!(tally.fallbacks.load(Ordering::SeqCst) > 0);
    // Every CPU answer is a counted fallback (the breaker never opens here), by a reason that was injected.
    let m = exec.metrics();
    let cpu_runs: u64 = OpKind::ALL.iter().map(|op| m.calls(*op, Device::Cpu)).sum();
    assert_eq!(cpu_runs, m.fallbacks_total());
    assert!(m.fallbacks_total() > 0);
    assert_eq!(
        m.fallbacks_total(),
        m.fallbacks(FallbackReason::OutOfMemory) + m.fallbacks(FallbackReason::GpuError)
    );
    assert!(m.oom_events() >= m.fallbacks(FallbackReason::OutOfMemory));
    assert_eq!(exec.breaker_state(), BreakerState::Closed);
    check_accounts(&exec, &tenants, &tally);
}

#[test]
fn device_lost_mid_run_and_back() {
    let w = world();
    let clock = ManualClock::new();
    let gpu = Arc::new(FaultInjecting::new(
        CpuBackend,
        FaultPlan::new().lose_device_after(20),
    ));
    let exec = Executor::with_backends(
        ExecutorConfig {
            breaker: BreakerConfig {
                failure_threshold: 3,
                backoff: Duration::from_secs(10),
                max_backoff: Duration::from_secs(40),
            },
            ..config(&clock)
        },
        Arc::new(CpuBackend),
        Some(gpu.clone()),
    )
    .unwrap();
    let tenants = add_tenants(&exec, 4);
    // The device is lost after 20 sub-batches, while 8 threads are calling: every answer still right.
    let tally = run_mix(&exec, &w, &tenants, 2, 10, false);
    assert_eq!(tally.answered.load(Ordering::SeqCst), 80);
    assert!(matches!(exec.breaker_state(), BreakerState::Open { .. }));
    let m = exec.metrics();
    assert!(m.fallbacks(FallbackReason::DeviceLost) >= 1);
    assert!(
        m.breaker_rejections() > 0,
        "calls were kept off the lost GPU"
    );
    let on_gpu_before = tally.on_gpu.load(Ordering::SeqCst);
    assert!(on_gpu_before > 0);

    // The device comes back; after the back-off a probe closes the breaker and the GPU answers again.
    gpu.revive();
    clock.advance(Duration::from_secs(11));
    let tally = run_mix(&exec, &w, &tenants, 2, 10, false);
    assert_eq!(tally.answered.load(Ordering::SeqCst), 80);
    assert_eq!(exec.breaker_state(), BreakerState::Closed);
    assert!(tally.on_gpu.load(Ordering::SeqCst) > 0);
    assert_eq!(exec.vram_in_use(), 0);
}

// ---------------------------------------------------------------------------------------------------
// Tenant isolation

/// A GPU stand-in that can hold every tenant call until the test lets it through (per tenant, one by
/// one), and records the most device memory the executor had reserved while a call was inside it.
#[derive(Debug, Default)]
struct Gate {
    hold: std::sync::atomic::AtomicBool,
    /// Per tenant index: (calls held now, passes granted and not yet used).
    state: Mutex<std::collections::HashMap<TenantId, (usize, usize)>>,
    cv: Condvar,
    peak_ledger: AtomicU64,
    exec: std::sync::OnceLock<std::sync::Weak<Executor>>,
}

impl Gate {
    fn let_through(&self, t: TenantId, n: usize) {
        self.state.lock().entry(t).or_default().1 += n;
        self.cv.notify_all();
    }

    fn held(&self, t: TenantId) -> usize {
        self.state.lock().get(&t).map_or(0, |e| e.0)
    }

    fn enter(&self) {
        if let Some(exec) = self.exec.get().and_then(std::sync::Weak::upgrade) {
            self.peak_ledger
                .fetch_max(exec.vram_in_use(), Ordering::SeqCst);
        }
        let Some(t) = current_tenant().map(|t| t.id) else {
            return;
        };
        if !self.hold.load(Ordering::SeqCst) {
            return;
        }
        let mut s = self.state.lock();
        s.entry(t).or_default().0 += 1;
        while s.get(&t).map_or(0, |e| e.1) == 0 {
            self.cv.wait(&mut s);
        }
        let e = s.entry(t).or_default();
        e.0 -= 1;
        e.1 -= 1;
    }
}

impl Backend for Gate {
    fn device(&self) -> Device {
        GPU
    }

    fn knn(
        &self,
        q: &[f32],
        c: &[f32],
        dim: usize,
        metric: Metric,
        k: usize,
    ) -> Result<TopK, BackendError> {
        self.enter();
        CpuBackend.knn(q, c, dim, metric, k)
    }
}

fn spin_until(what: &str, cond: impl Fn() -> bool) {
    let start = std::time::Instant::now();
    while !cond() {
        // A bound so that a broken executor fails the test instead of hanging it; not a timing assertion.
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "never happened: {what}"
        );
        std::thread::yield_now();
    }
}

fn gated_exec(clock: &Arc<ManualClock>, max_in_flight: usize) -> (Arc<Executor>, Arc<Gate>) {
    let gate = Arc::new(Gate::default());
    let exec = Arc::new(
        Executor::with_backends(
            ExecutorConfig {
                max_in_flight,
                ..config(clock)
            },
            Arc::new(CpuBackend),
            Some(gate.clone()),
        )
        .unwrap(),
    );
    let _ = gate.exec.set(Arc::downgrade(&exec));
    (exec, gate)
}

#[test]
fn a_full_queue_is_back_pressure_for_its_tenant_only() {
    let w = world();
    let clock = ManualClock::new();
    let (exec, gate) = gated_exec(&clock, 2);
    gate.hold.store(true, Ordering::SeqCst);
    let hog = exec.add_tenant(TenantConfig::new("hog").queue_capacity(2));
    let other = exec.add_tenant(TenantConfig::new("other").queue_capacity(2));
    let knn = |t: TenantId, seed: u64, wait: bool| {
        let q = matrix(seed, 2, DIM);
        let mut opts = CallOptions::tenant(t);
        if wait {
            opts = opts.wait(Duration::from_secs(600));
        }
        let out = exec.knn_shared(&opts, &q, &w.corpus, Metric::Cosine, K)?;
        let want = CpuBackend
            .knn(&q, w.corpus.data(), DIM, Metric::Cosine, K)
            .unwrap();
        assert_eq!(topk_bits(&out.value), topk_bits(&want));
        Ok::<Device, ExecError>(out.device)
    };
    let knn = &knn;
    std::thread::scope(|s| {
        // The hog takes both permits (its calls are held in the backend) and fills its queue.
        let mut hogs: Vec<_> = (0..2).map(|i| s.spawn(move || knn(hog, i, true))).collect();
        spin_until("two hog calls held", || gate.held(hog) == 2);
        hogs.extend((2..4).map(|i| s.spawn(move || knn(hog, i, true))));
        spin_until("hog queue full", || exec.queued(hog) == 2);
        // More hog calls: typed back-pressure, however many.
        for i in 0..5 {
            assert_eq!(
                knn(hog, 10 + i, false),
                Err(ExecError::BackPressure {
                    tenant: "hog".into(),
                    capacity: 2
                })
            );
        }
        // The other tenant's calls queue behind the hog's running calls...
        let others: Vec<_> = (0..2)
            .map(|i| s.spawn(move || knn(other, 100 + i, true)))
            .collect();
        spin_until("other's calls queued", || exec.queued(other) == 2);
        // ...and take turns with the hog's queued calls: the first free permit goes to the other tenant.
        gate.let_through(hog, 1);
        spin_until("other's first call running", || gate.held(other) == 1);
        assert_eq!((exec.queued(hog), exec.queued(other)), (2, 1));
        assert!(matches!(
            knn(hog, 20, false),
            Err(ExecError::BackPressure { .. })
        ));
        // Its call done, the next permit goes to the hog, the one after to the other tenant again.
        gate.let_through(other, 1);
        spin_until("a queued hog call running", || exec.queued(hog) == 1);
        assert_eq!(exec.queued(other), 1);
        gate.let_through(hog, 1);
        spin_until("other's second call running", || exec.queued(other) == 0);
        gate.let_through(other, 1);
        gate.let_through(hog, 2);
        for h in others {
            assert_eq!(h.join().unwrap(), Ok(GPU));
        }
        for h in hogs {
            assert_eq!(h.join().unwrap(), Ok(GPU));
        }
    });
    let text = exec.prometheus_text();
    for line in [
        "recall_tenant_admitted_total{tenant=\"hog\"} 4",
        "recall_tenant_rejected_total{tenant=\"hog\"} 6",
        "recall_tenant_admitted_total{tenant=\"other\"} 2",
        "recall_tenant_rejected_total{tenant=\"other\"} 0",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
    assert_eq!(exec.vram_in_use(), 0);
}

#[test]
fn quotas_hold_under_concurrent_load() {
    let w = world();
    let clock = ManualClock::new();
    let (exec, gate) = gated_exec(&clock, 4);
    // knn device bytes for r queries over 300 x 16: 4 * (16 r + 4800 + r + 300) + 4 * 300 r.
    let bytes = |r: u64| 4 * (17 * r + 5100) + 1200 * r;
    // "small" holds 2 queries at a time, "starved" not even one: its calls are answered on the CPU.
    let small = exec.add_tenant(TenantConfig::new("small").vram_quota(bytes(2)));
    let starved = exec.add_tenant(TenantConfig::new("starved").vram_quota(bytes(1) - 1));
    let free = exec.add_tenant(TenantConfig::new("free"));
    let devices = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for th in 0..9usize {
            let (exec, w, devices) = (&exec, &w, &devices);
            let tenant = [small, starved, free][th % 3];
            s.spawn(move || {
                let opts = CallOptions::tenant(tenant).wait(Duration::from_secs(600));
                for i in 0..8 {
                    let q = matrix((th * 100 + i) as u64, 1 + i % 5, DIM);
                    let out = exec
                        .knn_shared(&opts, &q, &w.corpus, Metric::Cosine, K)
                        .unwrap();
                    let want = CpuBackend
                        .knn(&q, w.corpus.data(), DIM, Metric::Cosine, K)
                        .unwrap();
                    assert_eq!(topk_bits(&out.value), topk_bits(&want));
                    devices
                        .lock()
                        .push((tenant, out.device, out.fallback.is_some()));
                }
            });
        }
    });
    let devices = devices.into_inner();
    assert_eq!(devices.len(), 72);
    let mut small_fallbacks = 0;
    for (t, device, fallback) in &devices {
        if *t == starved {
            assert_eq!((*device, *fallback), (Device::Cpu, true));
        } else if *t == small {
            // Its quota is shared by its own concurrent calls: one that finds it in use by the others
            // (even at one query) is answered on the CPU.
            assert_eq!(*fallback, *device == Device::Cpu);
            small_fallbacks += u64::from(*fallback);
        } else {
            // A tenant without a quota is never affected by the others' quotas.
            assert_eq!((*device, *fallback), (GPU, false), "{t}");
        }
    }
    assert!(small_fallbacks < 24, "some of small's calls ran on the GPU");
    let m = exec.metrics();
    assert_eq!(m.fallbacks(FallbackReason::Quota), 24 + small_fallbacks);
    assert_eq!(m.fallbacks_total(), 24 + small_fallbacks);
    // At most two queries of "small" (its quota) plus up to four calls of "free" (the permits) were ever
    // reserved at once; "starved" never reserved anything.
    let free_max = 3 * bytes(5);
    let peak = gate.peak_ledger.load(Ordering::SeqCst);
    assert!(peak > 0);
    assert!(peak <= bytes(2) + free_max, "peak {peak}");
    assert_eq!(exec.vram_in_use(), 0);
}
