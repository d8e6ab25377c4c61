//! `recall faults <scenario>`: real-fault drills (issue 10). Worker threads keep issuing single-query knn,
//! batch knn, large batch knn, candidate scoring and spreading against a resident corpus and graph while a
//! fault is brought on in the middle of the run; every answer is then re-computed on the CPU and compared
//! bit for bit, and the executor's metrics show how the calls were answered. One PASS/FAIL line, a markdown
//! report (`--out`), exit 0 on PASS.
//!
//! - `vram-pressure`: a second process (`recall hog`, this same executable) takes all but `--leave-mib` of
//!   the GPU's free memory for the middle phase, while recall trims its caches every second (so what it frees
//!   goes to the hog); large batches must split (OOM events) or go to the CPU.
//! - `kernel-failure`: the GPU backend's TEST ONLY switch makes every 7th GPU call launch a kernel the
//!   driver refuses (a real `cuLaunchKernel` error); those calls fall back; the GPU keeps serving the others.
//! - `device-lost`: the switch makes the next GPU call fault on an unmapped address, so the context is
//!   really unusable (sticky `CUDA_ERROR_ILLEGAL_ADDRESS`); the breaker must open and every later call be
//!   answered on the CPU.
//!
//! `--simulate` runs the same drill where there is no GPU: the fault-injecting backend over the CPU stands
//! in the GPU slot and the fault is injected (OOM above 4 queries, launch errors with probability 0.08, the
//! device lost), so CI exercises the harness, the executor's recovery and the checks.

use crate::load::{candidate_lists, digest, generate_rows};
use crate::util::{COMMIT, cpu_model, grouped, threads, utc_date};
use recall::diagnostics::{SplitMix, power_law_graph};
use recall::executor::{
    Backend, BreakerState, CallOptions, CpuBackend, Device, Executor, ExecutorConfig,
    FallbackReason, FaultInjecting, FaultPlan, FaultStep, OpKind, Outcome, SharedCorpus,
    SharedGraph, TestFault, Trigger,
};
use recall::{DevicePolicy, GpuStatus, Metric, SpreadGraph, SpreadParams, TopK};
use std::fmt::Write as _;
use std::io::BufRead;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The drills.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    VramPressure,
    KernelFailure,
    DeviceLost,
}

impl Scenario {
    fn name(self) -> &'static str {
        match self {
            Scenario::VramPressure => "vram-pressure",
            Scenario::KernelFailure => "kernel-failure",
            Scenario::DeviceLost => "device-lost",
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct FaultArgs {
    /// Which fault: vram-pressure, kernel-failure or device-lost.
    #[arg(value_enum)]
    scenario: Scenario,
    /// Corpus rows.
    #[arg(long, default_value_t = 500_000)]
    rows: usize,
    /// Values per row.
    #[arg(long, default_value_t = 64)]
    dim: usize,
    /// Threads issuing calls.
    #[arg(long, default_value_t = 8)]
    threads: usize,
    /// Seconds in all: a sixth before the fault, two thirds with it, a sixth after (longer when the breaker
    /// needs its back-off to close again).
    #[arg(long, default_value_t = 30.0)]
    seconds: f64,
    /// Queries of the large batch knn call (one every half second from one thread); default: as many as
    /// make a 1 GiB score buffer (at most 1024).
    #[arg(long)]
    big: Option<usize>,
    /// vram-pressure: MiB of device memory the hog leaves free.
    #[arg(long, default_value_t = 512)]
    leave_mib: u64,
    /// Run without a GPU: the fault-injecting backend over the CPU stands in the GPU slot.
    #[arg(long)]
    simulate: bool,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Write the markdown report here.
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
pub struct HogArgs {
    /// MiB of the device's memory to leave free.
    #[arg(long, default_value_t = 512)]
    leave_mib: u64,
    /// Seconds to hold it.
    #[arg(long, default_value_t = 20.0)]
    seconds: f64,
}

// ---------------------------------------------------------------------------------------------------
// Calls

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Single,
    Batch,
    Big,
    Candidates,
    Spread,
}

impl Kind {
    const ALL: [Kind; 5] = [
        Kind::Single,
        Kind::Batch,
        Kind::Big,
        Kind::Candidates,
        Kind::Spread,
    ];
    fn name(self) -> &'static str {
        match self {
            Kind::Single => "knn_single",
            Kind::Batch => "knn_batch",
            Kind::Big => "knn_big",
            Kind::Candidates => "score_candidates",
            Kind::Spread => "spread",
        }
    }
}

const K: usize = 10;
const BATCH: usize = 8;
const CAND_QUERIES: usize = 8;
const PHASES: [&str; 3] = ["before", "fault", "after"];

struct World {
    corpus: SharedCorpus,
    graph: SharedGraph,
    dim: usize,
    rows: usize,
    big: usize,
    candidates: usize,
    spread: SpreadParams,
}

fn call_seed(seed: u64, thread: usize, call: u64) -> u64 {
    let mut r = SplitMix::new(seed ^ ((thread as u64) << 44) ^ 0x5EED_FA17);
    r.next_u64() ^ call.wrapping_mul(0xD1B5_4A32_D192_ED03)
}

fn queries(rng: &mut SplitMix, n: usize, dim: usize) -> Vec<f32> {
    (0..n * dim).map(|_| rng.next_f32()).collect()
}

fn topk_digest(t: &TopK) -> u64 {
    digest(&t.ids, &t.scores)
}

/// Runs call `call` of `thread` on `exec`: (digest of the answer, where it ran, whether it fell back).
fn run_call(
    exec: &Executor,
    w: &World,
    kind: Kind,
    seed: u64,
) -> Result<(u64, Device, bool), String> {
    let mut rng = SplitMix::new(seed);
    let opts = CallOptions::default();
    let m = Metric::Cosine;
    let topk = |o: Outcome<TopK>| (topk_digest(&o.value), o.device, o.fallback.is_some());
    match kind {
        Kind::Single => {
            let q = queries(&mut rng, 1, w.dim);
            exec.knn_shared_single(&opts, &q, &w.corpus, m, K).map(topk)
        }
        Kind::Batch | Kind::Big => {
            let n = if kind == Kind::Batch { BATCH } else { w.big };
            let q = queries(&mut rng, n, w.dim);
            exec.knn_shared(&opts, &q, &w.corpus, m, K).map(topk)
        }
        Kind::Candidates => {
            let q = queries(&mut rng, CAND_QUERIES, w.dim);
            let ids = candidate_lists(&mut rng, CAND_QUERIES, w.candidates, w.rows);
            let offsets: Vec<usize> = (0..=CAND_QUERIES).map(|i| i * w.candidates).collect();
            exec.score_candidates_shared(&opts, &q, &w.corpus, m, &offsets, &ids, K)
                .map(topk)
        }
        Kind::Spread => {
            let n = w.graph.n_nodes();
            let mut seeds = vec![0.0f32; n];
            for _ in 0..8 {
                seeds[rng.below(n as u64) as usize] = 1.0;
            }
            exec.spread_shared(&opts, &w.graph, &seeds, &w.spread)
                .map(|o| {
                    (
                        digest(&o.value.top.ids, &o.value.activation)
                            ^ digest(&[], &o.value.top.scores).rotate_left(1),
                        o.device,
                        o.fallback.is_some(),
                    )
                })
        }
    }
    .map_err(|e| format!("{}: {e}", kind.name()))
}

/// One answered (or failed) call, enough to re-create and check it.
#[derive(Clone, Copy)]
struct Record {
    kind: Kind,
    thread: usize,
    call: u64,
    phase: u8,
    digest: u64,
    gpu: bool,
    fallback: bool,
    error: bool,
}

fn pick(rng: &mut SplitMix) -> Kind {
    match rng.below(100) {
        0..60 => Kind::Single,
        60..80 => Kind::Batch,
        80..92 => Kind::Candidates,
        _ => Kind::Spread,
    }
}

/// What the workers share with the thread that runs the drill.
#[derive(Clone, Copy)]
struct Shared<'a> {
    phase: &'a AtomicU8,
    /// Calls ended in each phase so far.
    ended: &'a [AtomicU64; 3],
    stop: &'a AtomicBool,
    errors: &'a ErrorLog,
    beat: &'a Beat,
}

/// Wait until a call has ended in phase `ph` (its checks need one), at most `extra` beyond now: on a slow
/// or loaded machine a phase of a fixed length can pass before the first call of it ends.
fn until_a_call_ends(ended: &[AtomicU64; 3], ph: usize, extra: Duration) {
    let limit = Instant::now() + extra;
    while ended[ph].load(Ordering::SeqCst) == 0 && Instant::now() < limit {
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// How long a phase may run on beyond its length while no call of it has ended.
const PHASE_GRACE: Duration = Duration::from_secs(30);

fn worker(
    exec: &Executor,
    w: &World,
    seed: u64,
    thread: usize,
    Shared {
        phase,
        ended,
        stop,
        errors,
        beat,
    }: Shared,
) -> Vec<Record> {
    let mut out = Vec::new();
    let mut rng = SplitMix::new(call_seed(seed, thread, u64::MAX));
    let mut call = 0u64;
    // Thread 0 issues the large batch, one every half second.
    let big_thread = thread == 0 && w.big > 0;
    while !stop.load(Ordering::Relaxed) {
        let kind = if big_thread {
            Kind::Big
        } else {
            pick(&mut rng)
        };
        let s = call_seed(seed, thread, call);
        beat.enter(thread, kind);
        let r = run_call(exec, w, kind, s);
        beat.leave(thread);
        // The phase the call ended in (its answer shows how that phase's device state was handled).
        let ph = phase.load(Ordering::SeqCst);
        ended[usize::from(ph).min(2)].fetch_add(1, Ordering::SeqCst);
        let rec = match r {
            Ok((d, dev, fb)) => Record {
                kind,
                thread,
                call,
                phase: ph,
                digest: d,
                gpu: matches!(dev, Device::Gpu { .. }),
                fallback: fb,
                error: false,
            },
            Err(e) => {
                errors.push(e);
                Record {
                    kind,
                    thread,
                    call,
                    phase: ph,
                    digest: 0,
                    gpu: false,
                    fallback: false,
                    error: true,
                }
            }
        };
        out.push(rec);
        call += 1;
        if big_thread {
            let until = Instant::now() + Duration::from_millis(500);
            while Instant::now() < until && !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
    out
}

/// What the workers are doing, for the progress line the heartbeat prints every few seconds: calls ended,
/// and per thread when its call in flight began (ms since the start, plus 1; 0 when idle) and its kind.
struct Beat {
    t0: Instant,
    done: AtomicU64,
    since: Vec<AtomicU64>,
    kind: Vec<AtomicU8>,
}

impl Beat {
    fn new(threads: usize) -> Self {
        Self {
            t0: Instant::now(),
            done: AtomicU64::new(0),
            since: (0..threads).map(|_| AtomicU64::new(0)).collect(),
            kind: (0..threads).map(|_| AtomicU8::new(0)).collect(),
        }
    }

    fn now_ms(&self) -> u64 {
        self.t0.elapsed().as_millis() as u64 + 1
    }

    fn enter(&self, thread: usize, kind: Kind) {
        let k = Kind::ALL.iter().position(|&x| x == kind).unwrap_or(0) as u8;
        self.kind[thread].store(k, Ordering::Relaxed);
        self.since[thread].store(self.now_ms(), Ordering::Relaxed);
    }

    fn leave(&self, thread: usize) {
        self.since[thread].store(0, Ordering::Relaxed);
        self.done.fetch_add(1, Ordering::Relaxed);
    }

    /// `t 12.0 s: 81,234 calls ended, 7 in flight, the oldest a spread for 3 ms (thread 4)`.
    fn line(&self) -> String {
        let now = self.now_ms();
        let busy: Vec<(usize, u64)> = self
            .since
            .iter()
            .enumerate()
            .map(|(t, s)| (t, s.load(Ordering::Relaxed)))
            .filter(|&(_, s)| s != 0)
            .collect();
        let oldest = busy
            .iter()
            .min_by_key(|&&(_, s)| s)
            .map_or(String::new(), |&(t, s)| {
                let k =
                    Kind::ALL[usize::from(self.kind[t].load(Ordering::Relaxed)) % Kind::ALL.len()];
                format!(
                    ", the oldest a {} for {} ms (thread {t})",
                    k.name(),
                    now.saturating_sub(s)
                )
            });
        format!(
            "t {:.1} s: {} calls ended, {} in flight{oldest}",
            self.t0.elapsed().as_secs_f64(),
            grouped(self.done.load(Ordering::Relaxed)),
            busy.len()
        )
    }
}

/// The first few error messages of the run, shared by the workers.
#[derive(Default)]
struct ErrorLog(std::sync::Mutex<Vec<String>>);

impl ErrorLog {
    fn push(&self, e: String) {
        if let Ok(mut v) = self.0.lock()
            && v.len() < 10
        {
            v.push(e);
        }
    }

    fn take(self) -> Vec<String> {
        self.0.into_inner().unwrap_or_default()
    }
}

// ---------------------------------------------------------------------------------------------------
// Metrics per phase

#[derive(Clone, Copy, Default)]
struct Snapshot {
    fallbacks: [u64; 4],
    oom_events: u64,
    oom_splits: u64,
    breaker_rejections: u64,
}

fn snapshot(exec: &Executor) -> Snapshot {
    let m = exec.metrics();
    let mut fallbacks = [0u64; 4];
    for (slot, r) in fallbacks.iter_mut().zip(FallbackReason::ALL) {
        *slot = m.fallbacks(r);
    }
    Snapshot {
        fallbacks,
        oom_events: m.oom_events(),
        oom_splits: m.oom_splits(),
        breaker_rejections: m.breaker_rejections(),
    }
}

impl Snapshot {
    fn minus(self, o: Snapshot) -> Snapshot {
        Snapshot {
            fallbacks: std::array::from_fn(|i| self.fallbacks[i].saturating_sub(o.fallbacks[i])),
            oom_events: self.oom_events.saturating_sub(o.oom_events),
            oom_splits: self.oom_splits.saturating_sub(o.oom_splits),
            breaker_rejections: self.breaker_rejections.saturating_sub(o.breaker_rejections),
        }
    }

    fn fallback(&self, r: FallbackReason) -> u64 {
        FallbackReason::ALL
            .iter()
            .position(|x| *x == r)
            .map_or(0, |i| self.fallbacks[i])
    }
}

// ---------------------------------------------------------------------------------------------------
// The fault, per scenario

/// What brings the fault on and off.
enum Injector {
    /// A real GPU backend (the executor's own).
    Real,
    /// The fault-injecting stand-in.
    Simulated(Arc<FaultInjecting<CpuBackend>>),
}

fn simulated_plan(s: Scenario) -> FaultPlan {
    match s {
        Scenario::VramPressure => FaultPlan::new().oom_above_units(4),
        Scenario::KernelFailure => FaultPlan::new()
            .fail(FaultStep::Launch, Trigger::Probability(0.08))
            .seed(7),
        Scenario::DeviceLost => FaultPlan::new().lose_device_after(0),
    }
}

/// The hog process while it holds memory.
struct Hog {
    child: std::process::Child,
    line: String,
}

fn spawn_hog(leave_mib: u64, seconds: f64) -> Result<Hog, String> {
    let exe = std::env::current_exe().map_err(|e| format!("current executable: {e}"))?;
    let mut child = std::process::Command::new(exe)
        .args([
            "hog",
            "--leave-mib",
            &leave_mib.to_string(),
            "--seconds",
            &format!("{seconds}"),
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting `recall hog`: {e}"))?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| "no stdout from `recall hog`".to_string())?;
    // Wait for its first "holding" line (it allocates in a loop; a minute is plenty).
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            eprintln!("{line}");
            if line.contains("holding") {
                let _ = tx.send(line);
            }
        }
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(line) => Ok(Hog { child, line }),
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            Err("`recall hog` did not report holding memory within 60 s".into())
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// The run

struct Check {
    what: String,
    ok: bool,
}

pub fn run(a: FaultArgs) -> Result<ExitCode, String> {
    if a.rows == 0 || a.dim == 0 || a.threads == 0 {
        return Err("--rows, --dim and --threads must be at least 1".into());
    }
    crate::util::check_seconds("--seconds", a.seconds)?;
    if a.rows < K {
        return Err(format!("--rows {}: at least {K}", a.rows));
    }
    let big = a
        .big
        .unwrap_or_else(|| ((1usize << 30) / (a.rows * 4)).clamp(1, 1024));
    // Every call goes to the GPU unless it fails there: that is what is drilled.
    let config = ExecutorConfig {
        policy: DevicePolicy::Auto,
        break_even: OpKind::ALL.iter().map(|&op| (op, 0)).collect(),
        ..ExecutorConfig::default()
    };
    let (exec, injector) = if a.simulate {
        let sim = Arc::new(FaultInjecting::new(CpuBackend, simulated_plan(a.scenario)));
        sim.arm(false);
        let gpu: Arc<dyn Backend> = sim.clone();
        let exec = Executor::with_backends(config, Arc::new(CpuBackend), Some(gpu))
            .map_err(|e| e.to_string())?;
        (exec, Injector::Simulated(sim))
    } else {
        let exec = Executor::new(config).map_err(|e| e.to_string())?;
        if exec.gpu_backend().is_none() {
            let why = match exec.gpu_status() {
                GpuStatus::Unavailable(w) => w.clone(),
                GpuStatus::Ready(_) => "no GPU backend".into(),
            };
            println!(
                "recall faults {}: SKIP: no GPU ({why}); `--simulate` runs the drill against the fault-injecting backend",
                a.scenario.name()
            );
            return Ok(ExitCode::from(2));
        }
        (exec, Injector::Real)
    };
    let device = match exec.gpu_status() {
        GpuStatus::Ready(d) if !a.simulate => format!(
            "{} ({}, {} SMs, {}), driver CUDA {}, kernels {}",
            d.name,
            d.sm,
            d.sm_count,
            crate::util::gib(d.total_memory),
            d.driver,
            d.image
        ),
        _ => "simulated: the fault-injecting backend over the CPU in the GPU slot".into(),
    };
    eprintln!("recall faults {}: {device}", a.scenario.name());

    // Data: corpus, graph.
    let corpus = SharedCorpus::new(generate_rows(a.seed, a.rows, a.dim), a.dim)
        .map_err(|e| e.to_string())?;
    let nodes = a.rows.clamp(K, 200_000);
    let mut grng = SplitMix::new(a.seed ^ 0x6A09_E667_F3BC_C908);
    let hubs = (nodes / 100).min(10_000);
    let (indptr, indices, weights) = power_law_graph(&mut grng, nodes, nodes * 8, hubs, hubs);
    let graph = SharedGraph::new(
        SpreadGraph::from_csr(&indptr, &indices, &weights).map_err(|e| e.to_string())?,
    );
    let world = World {
        corpus,
        graph,
        dim: a.dim,
        rows: a.rows,
        big,
        candidates: a.rows.min(1000),
        spread: SpreadParams {
            decay: 0.5,
            threshold: 0.01,
            hops: 3,
            k: K,
        },
    };
    // Warm-up: one call of each kind (uploads; the corpus and graph become resident).
    for kind in Kind::ALL {
        run_call(&exec, &world, kind, call_seed(a.seed, usize::MAX, 0))
            .map_err(|e| format!("warm-up: {e}"))?;
    }

    let before_s = a.seconds / 6.0;
    let fault_s = a.seconds * 2.0 / 3.0;
    let after_s = a.seconds / 6.0;
    let phase = AtomicU8::new(0);
    let ended: [AtomicU64; 3] = Default::default();
    let stop = AtomicBool::new(false);
    let errors = ErrorLog::default();
    let mut snaps = vec![snapshot(&exec)];
    let mut breaker_at_end = Vec::new();
    let mut fault_note = String::new();
    let mut fault_errors: Vec<String> = Vec::new();
    let mut phase_secs = Vec::new();
    let mut fired = 0u64;
    let t_run = Instant::now();
    let beat = Beat::new(a.threads);
    let beat_done = AtomicBool::new(false);
    let records: Vec<Record> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..a.threads)
            .map(|t| {
                let (exec, world) = (&exec, &world);
                let shared = Shared {
                    phase: &phase,
                    ended: &ended,
                    stop: &stop,
                    errors: &errors,
                    beat: &beat,
                };
                s.spawn(move || worker(exec, world, a.seed, t, shared))
            })
            .collect();
        // A progress line every 2 s until the workers are told to stop (a stuck call shows as an old one).
        let (beat, beat_done) = (&beat, &beat_done);
        let heart = s.spawn(move || {
            while !beat_done.load(Ordering::Relaxed) {
                for _ in 0..200 {
                    if beat_done.load(Ordering::Relaxed) {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                eprintln!("recall faults: {}", beat.line());
            }
        });
        let mut t_phase = Instant::now();
        std::thread::sleep(Duration::from_secs_f64(before_s));
        until_a_call_ends(&ended, 0, PHASE_GRACE);
        snaps.push(snapshot(&exec));
        breaker_at_end.push(exec.breaker_state());
        phase_secs.push(t_phase.elapsed().as_secs_f64());
        t_phase = Instant::now();
        // The fault.
        phase.store(1, Ordering::SeqCst);
        // Progress on stderr, so that a run cut short by a time limit shows how far it got.
        eprintln!("recall faults: the fault phase ({fault_s:.1} s)");
        match (&injector, a.scenario) {
            (Injector::Simulated(sim), _) => {
                sim.arm(true);
                fault_note = format!(
                    "fault-injecting backend armed: {:?}",
                    simulated_plan(a.scenario)
                );
                std::thread::sleep(Duration::from_secs_f64(fault_s));
                until_a_call_ends(&ended, 1, PHASE_GRACE);
                sim.arm(false);
                fired = sim.stats().injected;
            }
            (Injector::Real, Scenario::VramPressure) => {
                // Give back what recall caches, so the hog can take all but `leave_mib` of the device.
                if let Some(g) = exec.gpu_backend()
                    && let Err(e) = g.trim()
                {
                    fault_errors.push(format!("trim before the hog: {e}"));
                }
                match spawn_hog(a.leave_mib, fault_s) {
                    Ok(mut hog) => {
                        fault_note = format!(
                            "`recall hog --leave-mib {} --seconds {fault_s:.1}`: {}",
                            a.leave_mib, hog.line
                        );
                        let limit = Instant::now() + Duration::from_secs_f64(fault_s + 60.0);
                        // recall's pool keeps the blocks its calls use; trimming it every second while the hog
                        // holds the device hands what recall frees to the hog (which tops up), so recall's next
                        // allocations meet a full device: the OOM path, not a working set that never left.
                        let mut next_trim = Instant::now() + Duration::from_millis(200);
                        loop {
                            if Instant::now() >= next_trim {
                                next_trim += Duration::from_secs(1);
                                if let Some(g) = exec.gpu_backend()
                                    && let Err(e) = g.trim()
                                {
                                    fault_errors.push(format!("trim under pressure: {e}"));
                                }
                            }
                            match hog.child.try_wait() {
                                Ok(Some(status)) => {
                                    if !status.success() {
                                        fault_errors
                                            .push(format!("`recall hog` exited with {status}"));
                                    }
                                    break;
                                }
                                Ok(None) if Instant::now() < limit => {
                                    std::thread::sleep(Duration::from_millis(50));
                                }
                                _ => {
                                    let _ = hog.child.kill();
                                    let _ = hog.child.wait();
                                    fault_errors
                                        .push("`recall hog` did not exit in time: killed".into());
                                    break;
                                }
                            }
                        }
                        fired = 1;
                    }
                    Err(e) => fault_errors.push(e),
                }
            }
            (Injector::Real, Scenario::KernelFailure | Scenario::DeviceLost) => {
                let fault = if a.scenario == Scenario::KernelFailure {
                    "launch:any:every:7"
                } else {
                    "poison:any:1"
                };
                match (TestFault::parse(fault), exec.gpu_backend()) {
                    (Ok(f), Some(g)) => {
                        let before = g.test_faults_fired();
                        g.set_test_fault(Some(f));
                        fault_note = format!(
                            "GPU backend TEST ONLY switch set to `{f}` (RECALL_TEST_FAULT syntax)"
                        );
                        std::thread::sleep(Duration::from_secs_f64(fault_s));
                        until_a_call_ends(&ended, 1, PHASE_GRACE);
                        g.set_test_fault(None);
                        fired = g.test_faults_fired() - before;
                    }
                    (Err(e), _) => fault_errors.push(e),
                    (_, None) => fault_errors.push("the GPU backend went away".into()),
                }
            }
        }
        snaps.push(snapshot(&exec));
        breaker_at_end.push(exec.breaker_state());
        phase_secs.push(t_phase.elapsed().as_secs_f64());
        t_phase = Instant::now();
        phase.store(2, Ordering::SeqCst);
        eprintln!("recall faults: the after phase");
        std::thread::sleep(Duration::from_secs_f64(after_s));
        // A fault the device recovers from: the after phase lasts until the breaker has closed again (its
        // back-off may have grown while the fault lasted), up to its longest back-off.
        if a.scenario != Scenario::DeviceLost {
            let limit = Instant::now() + exec.config().breaker.max_backoff + Duration::from_secs(5);
            while exec.breaker_state() != BreakerState::Closed && Instant::now() < limit {
                std::thread::sleep(Duration::from_millis(20));
            }
            // Calls that began while it was open are still finishing on the CPU: give the GPU a moment.
            std::thread::sleep(Duration::from_secs_f64(after_s.min(1.0)));
        }
        until_a_call_ends(&ended, 2, PHASE_GRACE);
        stop.store(true, Ordering::SeqCst);
        eprintln!("recall faults: stopping the workers; {}", beat.line());
        let recs: Vec<Record> = handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect();
        snaps.push(snapshot(&exec));
        breaker_at_end.push(exec.breaker_state());
        phase_secs.push(t_phase.elapsed().as_secs_f64());
        beat_done.store(true, Ordering::Relaxed);
        let _ = heart.join();
        recs
    });
    let elapsed = t_run.elapsed().as_secs_f64();
    let first_errors = errors.take();

    // Every answer against the CPU's, in parallel.
    eprintln!(
        "recall faults: {} calls in {elapsed:.1} s; re-computing every answer on the CPU",
        records.len()
    );
    let t_verify = Instant::now();
    let cpu = Executor::new(ExecutorConfig {
        policy: DevicePolicy::Cpu,
        ..ExecutorConfig::default()
    })
    .map_err(|e| e.to_string())?;
    let answered: Vec<&Record> = records.iter().filter(|r| !r.error).collect();
    let n_threads = threads().clamp(1, 16);
    let per = answered.len().div_ceil(n_threads).max(1);
    let mismatches: Vec<&Record> = std::thread::scope(|s| {
        let hs: Vec<_> = answered
            .chunks(per)
            .map(|chunk| {
                let (cpu, world) = (&cpu, &world);
                s.spawn(move || {
                    chunk
                        .iter()
                        .filter(|r| {
                            run_call(cpu, world, r.kind, call_seed(a.seed, r.thread, r.call))
                                .map_or(true, |(d, ..)| d != r.digest)
                        })
                        .copied()
                        .collect::<Vec<&Record>>()
                })
            })
            .collect();
        hs.into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect()
    });
    let verify_s = t_verify.elapsed().as_secs_f64();

    // Figures per phase.
    let deltas: Vec<Snapshot> = (0..3).map(|i| snaps[i + 1].minus(snaps[i])).collect();
    let count = |ph: u8, f: &dyn Fn(&Record) -> bool| {
        records.iter().filter(|r| r.phase == ph && f(r)).count() as u64
    };
    let calls = |ph| count(ph, &|_| true);
    let on_gpu = |ph| count(ph, &|r| r.gpu);
    let errs: u64 = records.iter().filter(|r| r.error).count() as u64;

    // Checks.
    let mut checks = vec![
        Check {
            what: format!("no call failed ({errs} errors)"),
            ok: errs == 0,
        },
        Check {
            what: format!(
                "every answer equals the CPU's bit for bit ({} compared, {} differ)",
                answered.len(),
                mismatches.len()
            ),
            ok: mismatches.is_empty() && !answered.is_empty(),
        },
        Check {
            what: format!(
                "calls kept being answered during the fault ({} calls)",
                calls(1)
            ),
            ok: calls(1) > 0,
        },
        Check {
            what: format!("calls answered after the fault ({} calls)", calls(2)),
            ok: calls(2) > 0,
        },
        Check {
            what: format!("the GPU answered before the fault ({} calls)", on_gpu(0)),
            ok: on_gpu(0) > 0,
        },
        Check {
            what: format!(
                "the fault was brought on ({fired} times){}",
                if fault_errors.is_empty() {
                    String::new()
                } else {
                    format!(": {}", fault_errors.join("; "))
                }
            ),
            ok: fired > 0 && fault_errors.is_empty(),
        },
    ];
    let d = deltas[1];
    match a.scenario {
        Scenario::VramPressure => {
            checks.push(Check {
                what: format!(
                    "out-of-memory during the pressure was met by smaller batches or the CPU ({} OOM events, {} splits, {} OOM fallbacks)",
                    d.oom_events,
                    d.oom_splits,
                    d.fallback(FallbackReason::OutOfMemory)
                ),
                ok: d.oom_events > 0,
            });
            checks.push(Check {
                what: format!(
                    "the GPU answered again after the pressure ({} calls)",
                    on_gpu(2)
                ),
                ok: on_gpu(2) > 0,
            });
        }
        Scenario::KernelFailure => {
            checks.push(Check {
                what: format!(
                    "failed launches fell back to the CPU ({} gpu_error fallbacks)",
                    d.fallback(FallbackReason::GpuError)
                ),
                ok: d.fallback(FallbackReason::GpuError) > 0,
            });
            checks.push(Check {
                what: format!(
                    "the GPU kept answering the other calls during the fault ({} calls)",
                    on_gpu(1)
                ),
                ok: on_gpu(1) > 0,
            });
            checks.push(Check {
                what: format!(
                    "the GPU answered after the fault ({} calls), breaker {}",
                    on_gpu(2),
                    breaker_at_end[2]
                ),
                ok: on_gpu(2) > 0,
            });
        }
        Scenario::DeviceLost => {
            checks.push(Check {
                what: format!(
                    "the lost device was a counted fallback ({} device_lost fallbacks)",
                    d.fallback(FallbackReason::DeviceLost)
                ),
                ok: d.fallback(FallbackReason::DeviceLost) > 0,
            });
            checks.push(Check {
                what: format!(
                    "the breaker opened and kept calls off the GPU (state after the fault: {}; {} rejections)",
                    breaker_at_end[1], d.breaker_rejections
                ),
                ok: breaker_at_end[1] != BreakerState::Closed && d.breaker_rejections > 0,
            });
            checks.push(Check {
                what: format!(
                    "no answer came from the unusable GPU after the fault ({} calls, {} on the GPU)",
                    calls(2),
                    on_gpu(2)
                ),
                ok: on_gpu(2) == 0,
            });
        }
    }
    let passed = checks.iter().all(|c| c.ok);

    // Report.
    let verdict = if passed { "PASS" } else { "FAIL" };
    let mut o = String::new();
    let _ = writeln!(o, "## recall faults {}: {verdict}\n", a.scenario.name());
    let _ = writeln!(o, "- date: {} (UTC), commit {COMMIT}", utc_date());
    let _ = writeln!(o, "- device: {device}");
    let _ = writeln!(o, "- cpu: {}, {} threads", cpu_model(), threads());
    let _ = writeln!(
        o,
        "- command: `{}`",
        std::env::args().collect::<Vec<_>>().join(" ")
    );
    let _ = writeln!(
        o,
        "- settings: rows={}, dim={}, threads={}, seconds={}, big={big}, batch={BATCH}, candidates={}x{}, graph={} nodes / {} edges, k={K}, cosine; every op's break-even 0 (all calls go to the GPU unless it fails)",
        a.rows,
        a.dim,
        a.threads,
        a.seconds,
        CAND_QUERIES,
        world.candidates,
        world.graph.n_nodes(),
        world.graph.n_edges()
    );
    let _ = writeln!(o, "- fault: {fault_note}");
    let _ = writeln!(
        o,
        "- {} calls in {elapsed:.1} s; every answer re-computed on the CPU in {verify_s:.1} s: {} differ\n",
        grouped(records.len() as u64),
        mismatches.len()
    );
    let _ = writeln!(
        o,
        "| phase | seconds | calls | on GPU | on CPU | fell back | errors | OOM events | OOM splits | fallbacks oom / quota / device_lost / gpu_error | breaker rejections | breaker at end |"
    );
    let _ = writeln!(
        o,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---|"
    );
    for ph in 0..3u8 {
        let d = deltas[ph as usize];
        let _ = writeln!(
            o,
            "| {} | {:.1} | {} | {} | {} | {} | {} | {} | {} | {} / {} / {} / {} | {} | {} |",
            PHASES[ph as usize],
            phase_secs.get(ph as usize).copied().unwrap_or(0.0),
            grouped(calls(ph)),
            grouped(on_gpu(ph)),
            grouped(count(ph, &|r| !r.gpu && !r.error)),
            grouped(count(ph, &|r| r.fallback)),
            count(ph, &|r| r.error),
            d.oom_events,
            d.oom_splits,
            d.fallbacks[0],
            d.fallbacks[1],
            d.fallbacks[2],
            d.fallbacks[3],
            d.breaker_rejections,
            breaker_at_end[ph as usize]
        );
    }
    let _ = writeln!(
        o,
        "\n| call kind | calls | on GPU | fell back | errors | mismatches |"
    );
    let _ = writeln!(o, "|---|---:|---:|---:|---:|---:|");
    for kind in Kind::ALL {
        let of = |f: &dyn Fn(&Record) -> bool| {
            records.iter().filter(|r| r.kind == kind && f(r)).count() as u64
        };
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {} |",
            kind.name(),
            grouped(of(&|_| true)),
            grouped(of(&|r| r.gpu)),
            grouped(of(&|r| r.fallback)),
            of(&|r| r.error),
            mismatches.iter().filter(|r| r.kind == kind).count()
        );
    }
    let _ = writeln!(o);
    for c in &checks {
        let _ = writeln!(o, "- {}: {}", c.what, if c.ok { "ok" } else { "FAILED" });
    }
    for e in &first_errors {
        let _ = writeln!(o, "- error: {e}");
    }
    let _ = writeln!(
        o,
        "\n<details><summary>executor metrics at the end (Prometheus text)</summary>\n\n```\n{}```\n</details>",
        exec.prometheus_text()
    );
    if let Some(out) = &a.out {
        std::fs::write(out, &o).map_err(|e| format!("{}: {e}", out.display()))?;
    }
    eprint!("{o}");
    println!("recall faults {}: {verdict}", a.scenario.name());
    Ok(if passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

// ---------------------------------------------------------------------------------------------------
// recall hog

/// `recall hog`: take all but `--leave-mib` of the GPU's free memory for `--seconds` (topping up as other
/// processes free memory), then exit, which gives it back. Prints `holding` lines on stdout.
#[cfg(feature = "gpu")]
pub fn hog(a: HogArgs) -> Result<ExitCode, String> {
    let backend = recall::diagnostics::GpuBackend::discover(None)
        .map_err(|why| format!("recall hog: no GPU: {why}"))?;
    let (gpu, _) = backend.parts();
    let leave = a.leave_mib << 20;
    let mut held = Vec::new();
    let mut held_bytes = 0u64;
    // (NaN is taken as 0, infinity as the longest run.)
    let seconds = if a.seconds > 0.0 {
        a.seconds.min(crate::util::MAX_SECONDS)
    } else {
        0.0
    };
    let end = Instant::now() + Duration::from_secs_f64(seconds);
    let mut reported = false;
    let mut chunk: u64 = 1 << 30;
    loop {
        let (free, _total) = gpu.memory_info().map_err(|e| e.to_string())?;
        let free = free as u64;
        let mut grew = false;
        if free > leave + (64 << 20) {
            let want = (free - leave).min(chunk);
            match gpu.alloc_zeros::<u8>(want as usize) {
                Ok(b) => {
                    held.push(b);
                    held_bytes += want;
                    grew = true;
                }
                Err(e) if e.is_out_of_memory() && chunk > (2 << 20) => chunk /= 2,
                Err(e) if e.is_out_of_memory() => {}
                Err(e) => return Err(format!("recall hog: {e}")),
            }
        }
        if grew {
            continue;
        }
        if !reported || Instant::now() >= end {
            let (free, total) = gpu.memory_info().map_err(|e| e.to_string())?;
            println!(
                "recall hog: holding {} MiB, {} MiB of {} MiB free",
                held_bytes >> 20,
                free >> 20,
                total >> 20
            );
            reported = true;
        }
        if Instant::now() >= end {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(held);
    Ok(ExitCode::SUCCESS)
}

#[cfg(not(feature = "gpu"))]
pub fn hog(_: HogArgs) -> Result<ExitCode, String> {
    Err("recall hog: this build has no GPU support".into())
}
