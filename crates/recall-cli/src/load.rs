//! `recall load`: sustained, mixed, multi-tenant load against one engine, the acceptance test of issue 10.
//!
//! N tenants (each with its own queue in the executor) run on their own threads for a duration, each
//! thread issuing a random mix of single-query knn and batch knn against a resident corpus handle
//! (`Engine::corpus`, searched with `knn_shared`), candidate scoring, and activation spreading over a
//! power-law graph. It reports calls per second (over the run and its slowest whole second), latency
//! quantiles per op kind, errors, fallbacks, the devices that answered, and host and device memory
//! before and after; then it re-runs a sample of the calls on the CPU and compares the answers bit for
//! bit (in fast mode, knn answers within fast mode's bound: [`check_fast`]). Any error, mismatch, or memory
//! that does not come back makes it exit non-zero.
//!
//! Every call's inputs derive from (tenant, thread, call number), so a sampled call is re-created for
//! verification from those three numbers; only a digest of its answer is kept during the run (and, for
//! fast-mode knn, its lists). Spreading starts from a seed list of up to 8 nodes (`spread_shared_from`).

use crate::ops::MetricArg;
use crate::util::{COMMIT, cpu_model, grouped, threads, utc_date};
use recall::diagnostics::{SplitMix, power_law_graph};
use recall::executor::{
    BatchPhase, CallOptions, Device, FallbackReason, OpKind, TenantConfig, TenantId,
};
use recall::{Corpus, DevicePolicy, Engine, GpuStatus, Metric, SpreadGraph, SpreadParams};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum DeviceArg {
    Auto,
    Cpu,
    Gpu,
}

#[derive(clap::Args, Debug)]
pub struct LoadArgs {
    /// Corpus rows (a GPU acceptance run uses 1000000).
    #[arg(long, default_value_t = 20_000)]
    rows: usize,
    /// Values per row (a GPU acceptance run uses 768).
    #[arg(long, default_value_t = 128)]
    dim: usize,
    /// Tenants, each with its own queue.
    #[arg(long, default_value_t = 8)]
    tenants: usize,
    /// Threads issuing calls per tenant.
    #[arg(long, default_value_t = 2)]
    threads_per_tenant: usize,
    /// Seconds of load, after a warm-up call of each kind.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Neighbours per query (knn and candidate scoring).
    #[arg(short, long, default_value_t = 10)]
    k: usize,
    /// Queries per batch knn call.
    #[arg(long, default_value_t = 32)]
    batch: usize,
    /// Queries per candidate-scoring call.
    #[arg(long, default_value_t = 8)]
    cand_queries: usize,
    /// Candidate ids per query (at most the corpus rows).
    #[arg(long, default_value_t = 1000)]
    candidates: usize,
    /// Nodes of the spreading graph (default: as many as corpus rows).
    #[arg(long)]
    graph_nodes: Option<usize>,
    /// Average out-degree of the spreading graph.
    #[arg(long, default_value_t = 8)]
    graph_degree: usize,
    /// Spreading hops.
    #[arg(long, default_value_t = 3)]
    hops: usize,
    /// Relative weights of the call kinds: single-query knn, batch knn, candidate scoring, spreading.
    #[arg(long, default_value = "70,10,15,5")]
    mix: String,
    #[arg(long, value_enum, default_value = "cosine")]
    metric: MetricArg,
    /// Arithmetic of knn calls: `exact` (default; answers are checked bit for bit) or a fast mode on
    /// tensor cores (knn answers are then checked against the exact ones within fast mode's bound; the
    /// other ops stay exact and are checked bit for bit).
    #[arg(long, value_enum, default_value = "exact")]
    mode: ModeArg,
    /// Most queries per dynamic batch of single-query knn calls (default: the engine's).
    #[arg(long)]
    max_batch: Option<usize>,
    /// Batches of one op running at once (`BatchConfig::in_flight`; default: the engine's).
    #[arg(long)]
    batch_in_flight: Option<usize>,
    /// Tenant calls running at once (`EngineBuilder::max_in_flight`; default: the engine's).
    #[arg(long)]
    max_in_flight: Option<usize>,
    /// Send batch knn calls through the knn batcher too (`Executor::knn_shared_coalesced`): they share a
    /// pass over the corpus (one GEMM tile of up to 128 queries on a GPU) with concurrent single-query calls
    /// instead of each running its own. Use with `--max-batch 128`.
    #[arg(long)]
    coalesce: bool,
    /// Let calls of different tenants share a knn batch (`Executor::set_batch_across_tenants`): a batch runs
    /// under the tenant that opened it. Fuller batches; per-tenant accounting of the riders is lost.
    #[arg(long)]
    batch_across_tenants: bool,
    /// Calls to re-run on the CPU after the load and compare bit for bit (spread over the run and the kinds).
    #[arg(long, default_value_t = 64)]
    verify: usize,
    /// Device policy; default: `RECALL_DEVICE`, else auto.
    #[arg(long, value_enum)]
    device: Option<DeviceArg>,
    /// Per-tenant VRAM quota in MiB (default: none).
    #[arg(long)]
    vram_quota_mib: Option<u64>,
    /// Per-tenant cap on calls running at once (`TenantConfig::max_running`; default: none).
    #[arg(long)]
    tenant_max_running: Option<usize>,
    /// How far host RSS and device memory may end above where they started, in MiB.
    #[arg(long, default_value_t = 64)]
    mem_tolerance_mib: u64,
    /// Seed of the generated corpus, graph and calls.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Write the summary here: `.md` as markdown, anything else as JSON.
    #[arg(long)]
    out: Option<PathBuf>,
}

/// The kinds of call in the mix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Single,
    Batch,
    Candidates,
    Spread,
}

impl Kind {
    const ALL: [Kind; 4] = [Kind::Single, Kind::Batch, Kind::Candidates, Kind::Spread];

    fn name(self) -> &'static str {
        match self {
            Kind::Single => "knn_single",
            Kind::Batch => "knn_batch",
            Kind::Candidates => "score_candidates",
            Kind::Spread => "spread",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

// ---------------------------------------------------------------------------------------------------
// Latency histogram

const SUB_BITS: u32 = 5;
const SUB: usize = 1 << SUB_BITS;
const BUCKETS: usize = 64 * SUB;

/// Nanoseconds in log-linear buckets (32 per doubling: quantiles within about 3 %), one per thread and
/// kind, merged at the end: recording allocates nothing.
#[derive(Clone)]
struct Histogram {
    counts: Vec<u64>,
    n: u64,
    max: u64,
}

impl Histogram {
    fn new() -> Histogram {
        Histogram {
            counts: vec![0; BUCKETS],
            n: 0,
            max: 0,
        }
    }

    fn index(v: u64) -> usize {
        let v = v.max(1);
        let e = 63 - v.leading_zeros();
        if e < SUB_BITS {
            v as usize
        } else {
            (e - SUB_BITS + 1) as usize * SUB + ((v >> (e - SUB_BITS)) as usize & (SUB - 1))
        }
    }

    /// The largest value of bucket `i`.
    fn upper(i: usize) -> u64 {
        if i < SUB {
            return i as u64;
        }
        let e = (i / SUB) as u32 - 1 + SUB_BITS;
        let sub = (i % SUB) as u64;
        let next = u128::from(SUB as u64 + sub + 1) << (e - SUB_BITS);
        u64::try_from(next - 1).unwrap_or(u64::MAX)
    }

    fn record(&mut self, ns: u64) {
        self.counts[Self::index(ns)] += 1;
        self.n += 1;
        self.max = self.max.max(ns);
    }

    fn merge(&mut self, o: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&o.counts) {
            *a += b;
        }
        self.n += o.n;
        self.max = self.max.max(o.max);
    }

    fn quantile(&self, q: f64) -> Option<u64> {
        if self.n == 0 {
            return None;
        }
        let rank = ((q * self.n as f64).ceil() as u64).clamp(1, self.n);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(Self::upper(i).min(self.max));
            }
        }
        Some(self.max)
    }
}

// ---------------------------------------------------------------------------------------------------
// Inputs, derived from (tenant, thread, call)

struct Setup {
    rows: usize,
    dim: usize,
    k: usize,
    batch: usize,
    cand_queries: usize,
    candidates: usize,
    graph_nodes: usize,
    spread: SpreadParams,
    metric: Metric,
    seed: u64,
    mode: recall::Mode,
}

/// `--mode`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModeArg {
    Exact,
    FastF16,
    FastBf16,
}

fn call_seed(setup: &Setup, tenant: usize, thread: usize, call: u64) -> u64 {
    let mut r = SplitMix::new(setup.seed ^ ((tenant as u64) << 48) ^ ((thread as u64) << 40));
    r.next_u64() ^ call.wrapping_mul(0xD1B5_4A32_D192_ED03)
}

fn queries(rng: &mut SplitMix, n: usize, dim: usize) -> Vec<f32> {
    (0..n * dim).map(|_| rng.next_f32()).collect()
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// `n_queries` lists of `per` distinct row ids: an arithmetic progression modulo `rows` with a step
/// coprime to it.
pub(crate) fn candidate_lists(
    rng: &mut SplitMix,
    n_queries: usize,
    per: usize,
    rows: usize,
) -> Vec<u32> {
    let n = rows as u64;
    let mut ids = Vec::with_capacity(n_queries * per);
    for _ in 0..n_queries {
        let start = rng.below(n);
        let mut step = 1 + rng.below(n.saturating_sub(1).max(1));
        while gcd(step, n) != 1 {
            step = 1 + rng.below(n.saturating_sub(1).max(1));
        }
        ids.extend((0..per as u64).map(|i| ((start + i * step) % n) as u32));
    }
    ids
}

/// A call's inputs.
enum Inputs {
    Knn(Vec<f32>),
    Candidates {
        queries: Vec<f32>,
        offsets: Vec<usize>,
        ids: Vec<u32>,
    },
    /// Seed list: `(node, 1.0)` for a few distinct nodes, as a memory engine spreads from the memories a
    /// query recalled (`Engine::spread_from`: no dense seed vector built, scanned or uploaded).
    Spread(Vec<(u32, f32)>),
}

fn inputs(setup: &Setup, kind: Kind, seed: u64) -> Inputs {
    let mut rng = SplitMix::new(seed);
    match kind {
        Kind::Single => Inputs::Knn(queries(&mut rng, 1, setup.dim)),
        Kind::Batch => Inputs::Knn(queries(&mut rng, setup.batch, setup.dim)),
        Kind::Candidates => {
            let q = queries(&mut rng, setup.cand_queries, setup.dim);
            let ids = candidate_lists(&mut rng, setup.cand_queries, setup.candidates, setup.rows);
            let offsets = (0..=setup.cand_queries)
                .map(|i| i * setup.candidates)
                .collect();
            Inputs::Candidates {
                queries: q,
                offsets,
                ids,
            }
        }
        Kind::Spread => {
            let mut seeds: Vec<(u32, f32)> = Vec::with_capacity(8);
            for _ in 0..8 {
                let node = rng.below(setup.graph_nodes as u64) as u32;
                if seeds.iter().all(|&(v, _)| v != node) {
                    seeds.push((node, 1.0));
                }
            }
            Inputs::Spread(seeds)
        }
    }
}

/// A digest of the answer's ids and value bits: what is kept of a sampled answer. FNV-1a's step over whole
/// 32-bit words, in four independent lanes (a spreading answer holds a million activations: a byte-wise hash
/// cost ~4 ms a call, more than the call itself), then the lanes folded together.
pub(crate) fn digest(ids: &[u32], values: &[f32]) -> u64 {
    const PRIME: u64 = 0x0100_0000_01b3;
    let mut lanes = [
        0xcbf2_9ce4_8422_2325u64,
        0x8422_2325_cbf2_9ce4,
        0x9e37_79b9_7f4a_7c15,
        0x6a09_e667_f3bc_c908,
    ];
    fn fold<T: Copy>(lanes: &mut [u64; 4], words: &[T], bits: impl Fn(T) -> u32) -> usize {
        let mut chunks = words.chunks_exact(4);
        for c in &mut chunks {
            for (l, &w) in lanes.iter_mut().zip(c) {
                *l = (*l ^ u64::from(bits(w))).wrapping_mul(PRIME);
            }
        }
        for (l, &w) in lanes.iter_mut().zip(chunks.remainder()) {
            *l = (*l ^ u64::from(bits(w))).wrapping_mul(PRIME);
        }
        words.len()
    }
    let n_ids = fold(&mut lanes, ids, |w| w);
    let n_values = fold(&mut lanes, values, f32::to_bits);
    let mut h = (n_ids as u64) ^ ((n_values as u64) << 32);
    for l in lanes {
        h = (h ^ l).wrapping_mul(PRIME).rotate_left(29);
    }
    h
}

/// What one call returned: a digest of the answer, where it ran, whether it fell back.
struct Answer {
    digest: u64,
    /// Fast-mode knn only: the lists themselves (ids, scores), checked against the exact answer within fast
    /// mode's bound after the load (a digest cannot say "within a bound").
    lists: Option<Box<(Vec<u32>, Vec<f32>)>>,
    gpu: bool,
    fallback: bool,
}

/// The data every call reads.
struct World<'a> {
    engine: &'a Engine,
    /// Batch knn through the batcher (`--coalesce`).
    coalesce: bool,
    corpus: &'a Corpus,
    graph: &'a recall::Graph,
    setup: &'a Setup,
}

fn run_call(
    w: &World<'_>,
    opts: &CallOptions,
    kind: Kind,
    inputs: &Inputs,
) -> Result<Answer, String> {
    let exec = w.engine.executor();
    let s = w.setup;
    let on_gpu = |d: Device| matches!(d, Device::Gpu { .. });
    let fast = s.mode != recall::Mode::Exact;
    let keep = |ids: Vec<u32>, scores: Vec<f32>| fast.then(|| Box::new((ids, scores)));
    match inputs {
        // One query goes through the batcher (concurrent single-query calls are coalesced), as
        // `Engine::knn_in` does.
        Inputs::Knn(q) if q.len() == s.dim => exec
            .knn_shared_single(opts, q, w.corpus, s.metric, s.k)
            .map(|o| Answer {
                digest: digest(&o.value.ids, &o.value.scores),
                lists: keep(o.value.ids, o.value.scores),
                gpu: on_gpu(o.device),
                fallback: o.fallback.is_some(),
            }),
        Inputs::Knn(q) if w.coalesce => exec
            .knn_shared_coalesced(opts, q, w.corpus, s.metric, s.k)
            .map(|o| Answer {
                digest: digest(&o.value.ids, &o.value.scores),
                lists: keep(o.value.ids, o.value.scores),
                gpu: on_gpu(o.device),
                fallback: o.fallback.is_some(),
            }),
        Inputs::Knn(q) => exec
            .knn_shared(opts, q, w.corpus, s.metric, s.k)
            .map(|o| Answer {
                digest: digest(&o.value.ids, &o.value.scores),
                lists: keep(o.value.ids, o.value.scores),
                gpu: on_gpu(o.device),
                fallback: o.fallback.is_some(),
            }),
        Inputs::Candidates {
            queries,
            offsets,
            ids,
        } => exec
            .score_candidates_shared(opts, queries, w.corpus, s.metric, offsets, ids, s.k)
            .map(|o| Answer {
                digest: digest(&o.value.ids, &o.value.scores),
                lists: None,
                gpu: on_gpu(o.device),
                fallback: o.fallback.is_some(),
            }),
        Inputs::Spread(seeds) => exec
            .spread_shared_from(opts, w.graph, seeds, &s.spread)
            .map(|o| Answer {
                digest: digest(&o.value.top.ids, &o.value.activation)
                    ^ digest(&[], &o.value.top.scores).rotate_left(1),
                lists: None,
                gpu: on_gpu(o.device),
                fallback: o.fallback.is_some(),
            }),
    }
    .map_err(|e| format!("{} ({}): {e}", kind.name(), kind_op(kind)))
}

/// What the fast-mode check of sampled knn answers found (`check_fast`).
#[derive(Default, Clone, Copy)]
struct FastCheck {
    /// Returned (id, score) pairs checked.
    pairs: usize,
    /// Scores farther from the exact score of their id than fast mode's bound.
    scores_out: usize,
    /// Ids whose exact score is worse than the exact k-th score by more than the two bounds.
    ids_out: usize,
    /// Returned ids that are in the exact top-k (recall = hits / pairs).
    hits: usize,
    /// Largest |fast - exact| seen, and the bound at that pair.
    max_err: f64,
    bound_at_max: f64,
}

impl FastCheck {
    fn ok(&self) -> bool {
        self.scores_out == 0 && self.ids_out == 0
    }
    fn add(&mut self, o: &FastCheck) {
        self.pairs += o.pairs;
        self.scores_out += o.scores_out;
        self.ids_out += o.ids_out;
        self.hits += o.hits;
        if o.max_err >= self.max_err {
            self.max_err = o.max_err;
            self.bound_at_max = o.bound_at_max;
        }
    }
}

/// Check a fast-mode knn answer (`lists`: ids and scores, `k` per query) against the exact one on the CPU, as
/// `recall diff-test` does (`docs/numerics.md`, "Fast mode"): every returned score within the bound of its
/// id's exact score, and every returned id's exact score within twice the bound of the exact k-th score.
/// The bound per pair uses `S <= ||q|| ||c||`.
fn check_fast(
    cpu: &Engine,
    corpus: &Corpus,
    setup: &Setup,
    queries: &[f32],
    lists: &(Vec<u32>, Vec<f32>),
) -> Result<FastCheck, String> {
    let (ids, scores) = lists;
    let (dim, k) = (setup.dim, setup.k.min(corpus.n_rows()));
    let nq = queries.len() / dim;
    if ids.len() != nq * k || scores.len() != nq * k {
        return Err(format!(
            "fast answer holds {} ids and {} scores for {nq} queries of k = {k}",
            ids.len(),
            scores.len()
        ));
    }
    let exec = cpu.executor();
    let opts = CallOptions::default();
    let exact = exec
        .knn_shared(&opts, queries, corpus, setup.metric, k)
        .map_err(|e| e.to_string())?
        .value;
    // The exact scores of the returned ids: each query's own list, scored and ranked on the CPU.
    let offsets: Vec<usize> = (0..=nq).map(|i| i * k).collect();
    let mine = exec
        .score_candidates_shared(&opts, queries, corpus, setup.metric, &offsets, ids, k)
        .map_err(|e| e.to_string())?
        .value;
    let Some((coef, t)) = setup.mode.fast_dot_bound(dim) else {
        return Err("an exact-mode answer has no fast-mode bound".into());
    };
    // ||q||_1 ||c||_inf + ||c||_1 ||q||_inf <= 2 sqrt(d) ||q|| ||c||.
    let c0 = coef + 2.0 * (dim as f64).sqrt() * t;
    let eps = 2f64.powi(-24);
    let norm = |v: &[f32]| {
        v.iter()
            .map(|&x| f64::from(x) * f64::from(x))
            .sum::<f64>()
            .sqrt()
    };
    let data = corpus.data();
    let row = |id: u32| &data[id as usize * dim..(id as usize + 1) * dim];
    let higher_better = !matches!(setup.metric, Metric::L2);
    let mut c = FastCheck::default();
    for qi in 0..nq {
        let q = &queries[qi * dim..(qi + 1) * dim];
        let nq_ = norm(q);
        let bound = |id: u32, exact: f64| {
            let nc = norm(row(id));
            match setup.metric {
                Metric::Cosine => c0 + 16.0 * eps,
                Metric::Dot => c0 * nq_ * nc + 8.0 * eps * exact.abs(),
                Metric::L2 => 2.0 * c0 * nq_ * nc + 8.0 * eps * (nq_ * nq_ + nc * nc),
            }
        };
        let part = qi * k..(qi + 1) * k;
        let kth_id = exact.ids[part.end - 1];
        let kth = f64::from(exact.scores[part.end - 1]);
        let b_kth = bound(kth_id, kth);
        let exact_of = |id: u32| {
            mine.ids[part.clone()]
                .iter()
                .position(|&x| x == id)
                .map(|p| f64::from(mine.scores[qi * k + p]))
        };
        for j in part.clone() {
            let id = ids[j];
            c.pairs += 1;
            let Some(e) = exact_of(id) else {
                c.ids_out += 1;
                continue;
            };
            let b = bound(id, e);
            let err = (f64::from(scores[j]) - e).abs();
            if err >= c.max_err {
                c.max_err = err;
                c.bound_at_max = b;
            }
            if err > b || scores[j].is_nan() {
                c.scores_out += 1;
            }
            let worse = if higher_better { kth - e } else { e - kth };
            if worse > b + b_kth {
                c.ids_out += 1;
            }
            if exact.ids[part.clone()].contains(&id) {
                c.hits += 1;
            }
        }
    }
    Ok(c)
}

fn kind_op(kind: Kind) -> OpKind {
    match kind {
        Kind::Single | Kind::Batch => OpKind::KnnResident,
        Kind::Candidates => OpKind::ScoreCandidates,
        Kind::Spread => OpKind::SpreadResident,
    }
}

// ---------------------------------------------------------------------------------------------------
// Per-thread accounts

/// A sampled call: enough to re-create it, and the digest of its answer.
#[derive(Clone)]
struct Sample {
    kind: Kind,
    tenant: usize,
    thread: usize,
    call: u64,
    digest: u64,
    /// Fast-mode knn: the lists (see [`Answer::lists`]).
    lists: Option<Box<(Vec<u32>, Vec<f32>)>>,
}

struct ThreadStats {
    counts: KindCounts,
    first_errors: Vec<String>,
    /// Reservoir of samples per kind.
    samples: Vec<Vec<Sample>>,
    seen: [u64; 4],
}

impl ThreadStats {
    fn new() -> ThreadStats {
        ThreadStats {
            counts: KindCounts::new(),
            first_errors: Vec::new(),
            samples: vec![Vec::new(); 4],
            seen: [0; 4],
        }
    }
}

/// Per kind of call (the four of `--mix`): latencies and counts, of a thread or of all.
struct KindCounts {
    latency: Vec<Histogram>,
    calls: [u64; 4],
    errors: [u64; 4],
    fallbacks: [u64; 4],
    gpu: [u64; 4],
}

impl KindCounts {
    fn new() -> KindCounts {
        KindCounts {
            latency: vec![Histogram::new(); 4],
            calls: [0; 4],
            errors: [0; 4],
            fallbacks: [0; 4],
            gpu: [0; 4],
        }
    }

    /// Adds `other`'s latencies and counts.
    fn merge(&mut self, other: &KindCounts) {
        for i in 0..4 {
            self.latency[i].merge(&other.latency[i]);
            self.calls[i] += other.calls[i];
            self.errors[i] += other.errors[i];
            self.fallbacks[i] += other.fallbacks[i];
            self.gpu[i] += other.gpu[i];
        }
    }
}

/// The load's figures, merged from the threads' accounts.
///
/// A thread's account is 64 KiB whatever it did (four latency histograms of [`BUCKETS`] counters), so the
/// accounts of 1,024 threads are 64 MiB. Kept until the end of the run, they sat in the heap in use of the
/// after-load and end measurements and failed the released check by 64 KiB per thread: the harness's own
/// records, not a leak of recall's. Merged into one `Totals` as each thread is joined, they are gone before
/// any measurement, so what the checks see grows with the thread count only where recall's does. The
/// samples stay (the verification needs them) and are dropped before the end measurement.
struct Totals {
    counts: KindCounts,
    /// The first 5 errors, in thread order.
    first_errors: Vec<String>,
    samples: Vec<Sample>,
    /// Threads that panicked (no account).
    panicked: usize,
}

impl Totals {
    fn new() -> Totals {
        Totals {
            counts: KindCounts::new(),
            first_errors: Vec::new(),
            samples: Vec::new(),
            panicked: 0,
        }
    }

    /// Adds a thread's account and drops it.
    fn add(&mut self, st: ThreadStats) {
        self.counts.merge(&st.counts);
        for s in st.samples {
            self.samples.extend(s);
        }
        let room = 5usize.saturating_sub(self.first_errors.len());
        self.first_errors
            .extend(st.first_errors.into_iter().take(room));
    }
}

fn parse_mix(s: &str) -> Result<[u64; 4], String> {
    let parts: Vec<&str> = s.split(',').map(str::trim).collect();
    let bad = || {
        format!(
            "--mix {s:?}: expected four weights, e.g. 70,10,15,5 (single,batch,candidates,spread)"
        )
    };
    let [a, b, c, d] = parts[..] else {
        return Err(bad());
    };
    let mut w = [0u64; 4];
    for (slot, p) in w.iter_mut().zip([a, b, c, d]) {
        *slot = p.parse().map_err(|_| bad())?;
    }
    match w.iter().try_fold(0u64, |a, &x| a.checked_add(x)) {
        Some(0) => return Err(format!("--mix {s:?}: at least one weight must be above 0")),
        // (`pick` draws below the sum: one that wrapped skewed the mix)
        None => {
            return Err(format!(
                "--mix {s:?}: the weights' sum does not fit 64 bits"
            ));
        }
        Some(_) => {}
    }
    Ok(w)
}

fn pick(rng: &mut SplitMix, mix: &[u64; 4]) -> Kind {
    let total: u64 = mix.iter().sum();
    let mut r = rng.below(total);
    for (i, w) in mix.iter().enumerate() {
        if r < *w {
            return Kind::ALL[i];
        }
        r -= w;
    }
    Kind::Spread
}

/// One thread's loop: calls until `stop`, each timed, a reservoir of `per_kind` samples per kind.
#[allow(clippy::too_many_arguments)]
fn worker(
    w: &World<'_>,
    tenant: TenantId,
    t_idx: usize,
    thread: usize,
    mix: &[u64; 4],
    per_kind: usize,
    stop: &AtomicBool,
    total: &AtomicU64,
) -> ThreadStats {
    let mut st = ThreadStats::new();
    let mut rng = SplitMix::new(call_seed(w.setup, t_idx, thread, u64::MAX));
    let opts = CallOptions::tenant(tenant)
        .wait(Duration::from_secs(60))
        .mode(w.setup.mode);
    let mut call = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let kind = pick(&mut rng, mix);
        let seed = call_seed(w.setup, t_idx, thread, call);
        let inp = inputs(w.setup, kind, seed);
        let t0 = Instant::now();
        let result = run_call(w, &opts, kind, &inp);
        let ns = u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let i = kind.index();
        st.counts.latency[i].record(ns);
        st.counts.calls[i] += 1;
        total.fetch_add(1, Ordering::Relaxed);
        match result {
            Ok(a) => {
                st.counts.gpu[i] += u64::from(a.gpu);
                st.counts.fallbacks[i] += u64::from(a.fallback);
                // Reservoir sampling (algorithm R) per kind.
                st.seen[i] += 1;
                let s = Sample {
                    kind,
                    tenant: t_idx,
                    thread,
                    call,
                    digest: a.digest,
                    lists: a.lists,
                };
                if st.samples[i].len() < per_kind {
                    st.samples[i].push(s);
                } else {
                    let j = rng.below(st.seen[i]) as usize;
                    if j < per_kind {
                        st.samples[i][j] = s;
                    }
                }
            }
            Err(e) => {
                st.counts.errors[i] += 1;
                if st.first_errors.len() < 5 {
                    st.first_errors.push(e);
                }
            }
        }
        call += 1;
    }
    st
}

// ---------------------------------------------------------------------------------------------------
// Memory

#[derive(Clone, Copy, Debug, Default)]
struct Memory {
    /// Resident set of this process (`/proc/self/statm`), bytes, as it is.
    rss_raw: Option<u64>,
    /// The same after `malloc_trim(0)` has handed the allocator's free pages back to the OS.
    rss: Option<u64>,
    /// Heap bytes the program holds (glibc `mallinfo2`: in use in the arenas plus mmapped chunks): what a
    /// leak grows. RSS above it is memory the allocator keeps (per-thread arenas), not the program.
    heap: Option<u64>,
    /// Device memory in use on the GPU (every process's, from the driver), bytes.
    gpu_used: Option<u64>,
    /// Device memory the executor holds against tenant quotas now, bytes.
    ledger: u64,
    /// Corpora resident on the GPU.
    resident: Option<usize>,
}

/// Resident pages times the page size, from `/proc/self/statm` and `/proc/self/smaps_rollup`'s unit.
fn rss_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * page_size())
}

/// The page size: `KernelPageSize` of `/proc/self/smaps` (first mapping), else 4 KiB.
fn page_size() -> u64 {
    std::fs::read_to_string("/proc/self/smaps")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("KernelPageSize:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<u64>().ok())
        })
        .map_or(4096, |kb| kb * 1024)
}

fn memory(engine: &Engine) -> Memory {
    let gpu = engine.gpu_backend();
    // First: counting the resident corpora frees the device copies of dropped ones (and gives their memory
    // back to the driver), so the device figure below sees the release.
    let resident = gpu.map(resident_corpora);
    let rss_raw = rss_bytes();
    trim_heap();
    Memory {
        rss_raw,
        rss: rss_bytes(),
        heap: heap_in_use(),
        gpu_used: gpu
            .and_then(|g| g.memory_info())
            .map(|(free, total)| total.saturating_sub(free)),
        ledger: engine.executor().vram_in_use(),
        resident,
    }
}

#[cfg(feature = "gpu")]
fn resident_corpora(g: &recall::diagnostics::GpuBackend) -> usize {
    g.resident_corpora()
}

#[cfg(not(feature = "gpu"))]
fn resident_corpora(_: &recall::diagnostics::GpuBackend) -> usize {
    0
}

fn mib(b: Option<u64>) -> String {
    b.map_or("n/a".into(), |b| {
        format!("{:.1}", b as f64 / (1u64 << 20) as f64)
    })
}

// ---------------------------------------------------------------------------------------------------
// The run

struct KindFigures {
    calls: u64,
    errors: u64,
    fallbacks: u64,
    gpu: u64,
    p50_us: Option<f64>,
    p95_us: Option<f64>,
    p99_us: Option<f64>,
    max_us: f64,
    verified: usize,
    mismatches: usize,
}

struct MemCheck {
    name: &'static str,
    before: Option<u64>,
    after: Option<u64>,
    ok: bool,
    /// Reported, not part of the verdict (RSS where the heap-in-use check decides; see `host_checks`).
    informational: bool,
}

/// Dynamic batches formed, their queries, and per phase (wait, run, gap) the p50, p99 and mean in microseconds.
struct BatchFigures {
    count: u64,
    queries: u64,
    phases: Vec<PhaseFigures>,
}

struct PhaseFigures {
    name: &'static str,
    p50: Option<f64>,
    p99: Option<f64>,
    mean: Option<f64>,
}

struct Report {
    command: String,
    date: String,
    device: String,
    cpu: String,
    policy: String,
    args: Vec<(&'static str, String)>,
    elapsed_s: f64,
    calls: u64,
    calls_per_s: f64,
    slowest_second: Option<u64>,
    fastest_second: Option<u64>,
    kinds: Vec<(Kind, KindFigures)>,
    errors: u64,
    first_errors: Vec<String>,
    mismatches: usize,
    verified: usize,
    /// Fast mode: what the check of the sampled knn answers within the bound found.
    fast_check: Option<FastCheck>,
    fallbacks_by_reason: Vec<(&'static str, u64)>,
    /// Dynamic batches formed (warm-up included).
    batches: BatchFigures,
    gpu_calls: u64,
    memory: Vec<(&'static str, Memory)>,
    checks: Vec<MemCheck>,
    max_in_flight: usize,
}

impl Report {
    fn passed(&self) -> bool {
        self.errors == 0
            && self.mismatches == 0
            && self.calls > 0
            && self.checks.iter().all(|c| c.ok || c.informational)
    }
}

pub fn run(a: LoadArgs) -> Result<ExitCode, String> {
    let mix = parse_mix(&a.mix)?;
    if a.rows == 0 || a.dim == 0 {
        return Err("--rows and --dim must be at least 1".into());
    }
    if a.tenants == 0 || a.threads_per_tenant == 0 {
        return Err("--tenants and --threads-per-tenant must be at least 1".into());
    }
    crate::util::check_seconds("--duration", a.duration)?;
    let graph_nodes = a.graph_nodes.unwrap_or(a.rows);
    if a.k == 0 || a.k > a.rows || a.k > a.candidates || a.k > graph_nodes {
        return Err(format!(
            "-k {}: must be between 1 and the smallest of --rows, --candidates and the graph's nodes",
            a.k
        ));
    }
    if a.candidates > a.rows {
        return Err(format!(
            "--candidates {} is more than the corpus's {} rows",
            a.candidates, a.rows
        ));
    }
    if a.batch == 0 || a.cand_queries == 0 || a.hops == 0 {
        return Err("--batch, --cand-queries and --hops must be at least 1".into());
    }
    use crate::util::check_size;
    check_size("--rows x --dim", &[a.rows, a.dim])?;
    check_size("--batch x --dim", &[a.batch, a.dim])?;
    check_size("--cand-queries x --dim", &[a.cand_queries, a.dim])?;
    check_size(
        "--cand-queries x --candidates",
        &[a.cand_queries, a.candidates],
    )?;
    // (edges of 16 bytes as the graph is built)
    check_size(
        "graph nodes x --graph-degree",
        &[graph_nodes, a.graph_degree, 4],
    )?;
    check_size(
        "--tenants x --threads-per-tenant",
        &[a.tenants, a.threads_per_tenant],
    )?;
    let mut builder = Engine::builder();
    if let Some(d) = a.device {
        builder = builder.device(match d {
            DeviceArg::Auto => DevicePolicy::Auto,
            DeviceArg::Cpu => DevicePolicy::Cpu,
            DeviceArg::Gpu => DevicePolicy::Gpu,
        });
    }
    if a.max_batch.is_some() || a.batch_in_flight.is_some() {
        let d = recall::BatchConfig::default();
        builder = builder.batching(recall::BatchConfig {
            max_batch: a.max_batch.unwrap_or(d.max_batch).max(1),
            in_flight: a.batch_in_flight.unwrap_or(d.in_flight).max(1),
            ..d
        });
    }
    if let Some(n) = a.max_in_flight {
        builder = builder.max_in_flight(n);
    }
    let engine = builder.build().map_err(|e| e.to_string())?;
    let device = match engine.gpu_status() {
        GpuStatus::Ready(d) => format!(
            "{} ({}, {} SMs, {}), driver CUDA {}, kernels {}",
            d.name,
            d.sm,
            d.sm_count,
            crate::util::gib(d.total_memory),
            d.driver,
            d.image
        ),
        GpuStatus::Unavailable(why) => format!("no GPU ({why})"),
    };
    let cpu = format!(
        "{}, {} threads, SIMD {}",
        cpu_model(),
        threads(),
        recall::cpu_simd_level()
    );
    eprintln!("recall load: {device}; {cpu}");
    let m_start = memory(&engine);

    // The data: corpus rows in parallel blocks (1,000,000 x 768 is 3 GiB), a power-law graph.
    let setup = Setup {
        rows: a.rows,
        dim: a.dim,
        k: a.k,
        batch: a.batch,
        cand_queries: a.cand_queries,
        candidates: a.candidates,
        graph_nodes,
        spread: SpreadParams {
            decay: 0.5,
            threshold: 0.01,
            hops: a.hops,
            k: a.k,
        },
        metric: a.metric.into(),
        mode: match a.mode {
            ModeArg::Exact => recall::Mode::Exact,
            ModeArg::FastF16 => recall::Mode::FastF16,
            ModeArg::FastBf16 => recall::Mode::FastBf16,
        },
        seed: a.seed,
    };
    let t_gen = Instant::now();
    let data = generate_rows(a.seed, a.rows, a.dim);
    let corpus = engine.corpus(data, a.dim).map_err(|e| e.to_string())?;
    let mut grng = SplitMix::new(a.seed ^ 0x6A09_E667_F3BC_C908);
    let edges = graph_nodes.saturating_mul(a.graph_degree);
    let hubs = (graph_nodes / 100).min(10_000);
    let (indptr, indices, weights) = power_law_graph(&mut grng, graph_nodes, edges, hubs, hubs);
    // A graph handle: validated and transposed once, and on a GPU resident while the load runs.
    let graph = recall::Graph::new(
        SpreadGraph::from_csr(&indptr, &indices, &weights).map_err(|e| e.to_string())?,
    );
    drop((indptr, indices, weights));
    let edges = graph.n_edges();
    eprintln!(
        "recall load: {} x {} corpus, graph of {} nodes and {} edges, generated in {:.1} s",
        grouped(a.rows as u64),
        a.dim,
        grouped(graph_nodes as u64),
        grouped(graph.n_edges() as u64),
        t_gen.elapsed().as_secs_f64()
    );

    let exec = engine.executor();
    let tenants: Vec<TenantId> = (0..a.tenants)
        .map(|i| {
            let mut c =
                TenantConfig::new(format!("t{i}")).queue_capacity(a.threads_per_tenant.max(1) * 2);
            if let Some(q) = a.vram_quota_mib {
                c = c.vram_quota(q << 20);
            }
            if let Some(n) = a.tenant_max_running {
                c = c.max_running(n);
            }
            exec.add_tenant(c)
        })
        .collect();
    exec.set_batch_across_tenants(a.batch_across_tenants);
    let world = World {
        engine: &engine,
        coalesce: a.coalesce,
        corpus: &corpus,
        graph: &graph,
        setup: &setup,
    };
    // Warm-up: one call of each kind (calibration on a GPU's first use, the corpus upload).
    let t_warm = Instant::now();
    let warm_opts = CallOptions::tenant(tenants[0]).wait(Duration::from_secs(600));
    for kind in Kind::ALL {
        let inp = inputs(&setup, kind, call_seed(&setup, usize::MAX, 0, 0));
        run_call(&world, &warm_opts, kind, &inp).map_err(|e| format!("warm-up: {e}"))?;
    }
    eprintln!(
        "recall load: warm-up took {:.1} s; {} tenants x {} threads for {} s",
        t_warm.elapsed().as_secs_f64(),
        a.tenants,
        a.threads_per_tenant,
        a.duration
    );
    trim_heap();
    let m_loaded = memory(&engine);

    // The load.
    let n_threads = a.tenants * a.threads_per_tenant;
    // Fast-mode knn answers are checked within fast mode's bound (`check_fast`); every other answer bit for bit.
    let verify = a.verify;
    let per_kind = verify.div_ceil(n_threads * 4).max(usize::from(verify > 0));
    let stop = AtomicBool::new(false);
    let total = AtomicU64::new(0);
    let per_second = Mutex::new(Vec::new());
    let t0 = Instant::now();
    let stats: Totals = std::thread::scope(|s| {
        let handles: Vec<_> = (0..n_threads)
            .map(|th| {
                let (world, stop, total, mix) = (&world, &stop, &total, &mix);
                let (t_idx, thread) = (th % a.tenants, th / a.tenants);
                let tenant = tenants[t_idx];
                s.spawn(move || worker(world, tenant, t_idx, thread, mix, per_kind, stop, total))
            })
            .collect();
        let end = t0 + Duration::from_secs_f64(a.duration);
        let (mut tick, mut last) = (t0, 0);
        loop {
            let next = tick + Duration::from_secs(1);
            if next > end {
                std::thread::sleep(end.saturating_duration_since(Instant::now()));
                break;
            }
            std::thread::sleep(next.saturating_duration_since(Instant::now()));
            let c = total.load(Ordering::Relaxed);
            if let Ok(mut v) = per_second.lock() {
                v.push(c - last);
            }
            (tick, last) = (next, c);
        }
        stop.store(true, Ordering::Relaxed);
        // Each thread's account is merged as the thread is joined, and dropped: the memory checks below
        // measure the heap with no per-thread record alive (see `Totals`).
        let mut totals = Totals::new();
        for h in handles {
            match h.join() {
                Ok(st) => totals.add(st),
                Err(_) => totals.panicked += 1,
            }
        }
        totals
    });
    let elapsed = t0.elapsed().as_secs_f64();
    trim_heap();
    let m_after_load = memory(&engine);

    let Totals {
        counts:
            KindCounts {
                latency,
                calls,
                errors,
                fallbacks,
                gpu,
            },
        mut first_errors,
        samples,
        panicked,
    } = stats;
    if panicked > 0 {
        first_errors.push(format!("{panicked} load threads panicked"));
    }

    // Verification on the CPU, after the load (so it does not compete with it).
    let t_verify = Instant::now();
    let cpu_engine = Engine::builder()
        .device(DevicePolicy::Cpu)
        .build()
        .map_err(|e| e.to_string())?;
    let cpu_world = World {
        engine: &cpu_engine,
        coalesce: false,
        corpus: &corpus,
        graph: &graph,
        setup: &setup,
    };
    let mut verified = [0usize; 4];
    let mut mismatched = [0usize; 4];
    let mut fast_check = FastCheck::default();
    for s in &samples {
        let inp = inputs(
            &setup,
            s.kind,
            call_seed(&setup, s.tenant, s.thread, s.call),
        );
        let i = s.kind.index();
        verified[i] += 1;
        if let (Some(lists), Inputs::Knn(q)) = (&s.lists, &inp) {
            match check_fast(&cpu_engine, &corpus, &setup, q, lists) {
                Ok(c) => {
                    fast_check.add(&c);
                    if !c.ok() {
                        mismatched[i] += 1;
                        if first_errors.len() < 10 {
                            first_errors.push(format!(
                                "{} call {} of tenant {} thread {}: fast-mode answer outside its bound \
                                 ({} scores, {} ids)",
                                s.kind.name(),
                                s.call,
                                s.tenant,
                                s.thread,
                                c.scores_out,
                                c.ids_out
                            ));
                        }
                    }
                }
                Err(e) => {
                    mismatched[i] += 1;
                    first_errors.push(format!("verification on the CPU failed: {e}"));
                }
            }
            continue;
        }
        match run_call(&cpu_world, &CallOptions::default(), s.kind, &inp) {
            Ok(ans) if ans.digest == s.digest => {}
            Ok(_) => {
                mismatched[i] += 1;
                if first_errors.len() < 10 {
                    first_errors.push(format!(
                        "{} call {} of tenant {} thread {}: the answer differs from the CPU's",
                        s.kind.name(),
                        s.call,
                        s.tenant,
                        s.thread
                    ));
                }
            }
            Err(e) => {
                mismatched[i] += 1;
                first_errors.push(format!("verification on the CPU failed: {e}"));
            }
        }
    }
    eprintln!(
        "recall load: verified {} answers on the CPU in {:.1} s",
        samples.len(),
        t_verify.elapsed().as_secs_f64()
    );
    drop(cpu_engine);

    // Release everything the load made; the GPU frees a corpus's device copy once its handle is gone.
    let metrics = engine.executor().metrics();
    let fallbacks_by_reason: Vec<(&'static str, u64)> = FallbackReason::ALL
        .iter()
        .map(|r| (r.name(), metrics.fallbacks(*r)))
        .collect();
    let gpu_calls: u64 = OpKind::ALL
        .iter()
        .map(|op| metrics.calls(*op, Device::Gpu { ordinal: 0 }))
        .sum();
    let batches = {
        let sizes = metrics.batch_sizes();
        let phases = BatchPhase::ALL
            .iter()
            .map(|p| {
                let h = metrics.batch_phase_ns(*p);
                let us = |ns: u64| ns as f64 / 1e3;
                let mean = (h.count() > 0).then(|| us(h.sum()) / h.count() as f64);
                PhaseFigures {
                    name: p.name(),
                    p50: h.quantile(0.5).map(us),
                    p99: h.quantile(0.99).map(us),
                    mean,
                }
            })
            .collect();
        BatchFigures {
            count: sizes.count(),
            queries: sizes.sum(),
            phases,
        }
    };
    drop(corpus);
    drop(graph);
    drop(samples);
    trim_heap();
    // What a long-running service does when it wants its memory back: drop recall's GPU caches.
    engine.trim_gpu_memory().map_err(|e| e.to_string())?;
    let m_end = memory(&engine);

    let tol = a.mem_tolerance_mib << 20;
    let within = |before: Option<u64>, after: Option<u64>| match (before, after) {
        (Some(b), Some(a)) => a <= b.saturating_add(tol),
        _ => true,
    };
    // Where the heap in use can be read, it decides (a leak grows it); RSS is reported beside it, since
    // glibc's per-thread arenas keep freed memory that `malloc_trim` cannot return (docs/tuning.md).
    let heap_decides = m_start.heap.is_some() && m_end.heap.is_some();
    let mut checks = vec![
        MemCheck {
            name: "host RSS under load (loaded -> after load)",
            before: m_loaded.rss,
            after: m_after_load.rss,
            ok: within(m_loaded.rss, m_after_load.rss),
            informational: heap_decides,
        },
        MemCheck {
            name: "host RSS released (start -> end)",
            before: m_start.rss,
            after: m_end.rss,
            ok: within(m_start.rss, m_end.rss),
            informational: heap_decides,
        },
    ];
    if heap_decides {
        checks.push(MemCheck {
            name: "host heap in use under load (loaded -> after load)",
            before: m_loaded.heap,
            after: m_after_load.heap,
            ok: within(m_loaded.heap, m_after_load.heap),
            informational: false,
        });
        checks.push(MemCheck {
            name: "host heap in use released (start -> end)",
            before: m_start.heap,
            after: m_end.heap,
            ok: within(m_start.heap, m_end.heap),
            informational: false,
        });
    }
    checks.push(MemCheck {
        name: "executor VRAM ledger back to 0",
        before: Some(m_start.ledger),
        after: Some(m_end.ledger),
        ok: m_end.ledger == 0,
        informational: false,
    });
    if m_start.gpu_used.is_some() {
        // Shown, not decisive: the driver's stream-ordered pool keeps freed buffers for reuse, so a batch
        // larger than any of the warm-up's leaves its score buffer cached (up to one score chunk) until
        // `trim_gpu_memory`; the released check below (after the trim) is the one a leak would fail.
        checks.push(MemCheck {
            name: "GPU memory under load (loaded -> after load)",
            before: m_loaded.gpu_used,
            after: m_after_load.gpu_used,
            ok: within(m_loaded.gpu_used, m_after_load.gpu_used),
            informational: true,
        });
        checks.push(MemCheck {
            name: "GPU memory released (start -> end)",
            before: m_start.gpu_used,
            after: m_end.gpu_used,
            ok: within(m_start.gpu_used, m_end.gpu_used),
            informational: false,
        });
        checks.push(MemCheck {
            name: "resident corpora on the GPU back to 0",
            before: m_start.resident.map(|r| r as u64),
            after: m_end.resident.map(|r| r as u64),
            ok: m_end.resident.unwrap_or(0) == 0,
            informational: false,
        });
    }

    let secs = per_second.into_inner().unwrap_or_default();
    let all_calls: u64 = calls.iter().sum();
    let us = |ns: Option<u64>| ns.map(|v| v as f64 / 1e3);
    let kinds = Kind::ALL
        .iter()
        .map(|&k| {
            let i = k.index();
            let h = &latency[i];
            (
                k,
                KindFigures {
                    calls: calls[i],
                    errors: errors[i],
                    fallbacks: fallbacks[i],
                    gpu: gpu[i],
                    p50_us: us(h.quantile(0.50)),
                    p95_us: us(h.quantile(0.95)),
                    p99_us: us(h.quantile(0.99)),
                    max_us: h.max as f64 / 1e3,
                    verified: verified[i],
                    mismatches: mismatched[i],
                },
            )
        })
        .collect();
    let report = Report {
        command: std::env::args().collect::<Vec<_>>().join(" "),
        date: utc_date(),
        device,
        cpu,
        policy: engine.device_policy().to_string(),
        args: vec![
            ("rows", a.rows.to_string()),
            ("dim", a.dim.to_string()),
            ("tenants", a.tenants.to_string()),
            ("threads_per_tenant", a.threads_per_tenant.to_string()),
            ("duration_s", a.duration.to_string()),
            ("k", a.k.to_string()),
            ("batch", a.batch.to_string()),
            ("cand_queries", a.cand_queries.to_string()),
            ("candidates", a.candidates.to_string()),
            ("graph_nodes", graph_nodes.to_string()),
            ("graph_edges", edges.to_string()),
            ("hops", a.hops.to_string()),
            ("mix", a.mix.clone()),
            (
                "max_batch",
                engine.executor().config().batching.max_batch.to_string(),
            ),
            (
                "batch_in_flight",
                engine.executor().config().batching.in_flight.to_string(),
            ),
            ("coalesce", a.coalesce.to_string()),
            ("batch_across_tenants", a.batch_across_tenants.to_string()),
            (
                "tenant_max_running",
                a.tenant_max_running
                    .map_or_else(|| "none".into(), |n| n.max(1).to_string()),
            ),
            ("metric", format!("{:?}", a.metric).to_lowercase()),
            ("seed", a.seed.to_string()),
        ],
        elapsed_s: elapsed,
        calls: all_calls,
        calls_per_s: all_calls as f64 / elapsed.max(1e-9),
        slowest_second: secs.iter().copied().min(),
        fastest_second: secs.iter().copied().max(),
        kinds,
        errors: errors.iter().sum::<u64>() + panicked as u64,
        first_errors,
        mismatches: mismatched.iter().sum(),
        verified: verified.iter().sum(),
        fast_check: (setup.mode != recall::Mode::Exact).then_some(fast_check),
        fallbacks_by_reason,
        batches,
        gpu_calls,
        memory: vec![
            ("start", m_start),
            ("loaded", m_loaded),
            ("after load", m_after_load),
            ("end", m_end),
        ],
        checks,
        max_in_flight: engine.executor().config().max_in_flight,
    };
    let md = render_markdown(&report);
    print!("{md}");
    if let Some(out) = &a.out {
        let is_md = out
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| e.eq_ignore_ascii_case("md"));
        let text = if is_md { md } else { render_json(&report) };
        std::fs::write(out, text).map_err(|e| format!("{}: {e}", out.display()))?;
    }
    if report.passed() {
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!(
            "recall load: FAILED ({} errors, {} mismatches, {} memory checks failed)",
            report.errors,
            report.mismatches,
            report
                .checks
                .iter()
                .filter(|c| !c.ok && !c.informational)
                .count()
        );
        Ok(ExitCode::FAILURE)
    }
}

/// `rows x dim` values in [-1, 1), generated in parallel blocks (each block its own stream, so the result
/// does not depend on the thread count).
pub(crate) fn generate_rows(seed: u64, rows: usize, dim: usize) -> Vec<f32> {
    const BLOCK: usize = 4096;
    let mut data = vec![0.0f32; rows * dim];
    let blocks: Vec<(usize, &mut [f32])> = data.chunks_mut(BLOCK * dim).enumerate().collect();
    let n_threads = threads().max(1);
    let per = blocks.len().div_ceil(n_threads).max(1);
    let mut blocks = blocks;
    std::thread::scope(|s| {
        while !blocks.is_empty() {
            let take = per.min(blocks.len());
            let mine: Vec<(usize, &mut [f32])> = blocks.drain(..take).collect();
            s.spawn(move || {
                for (b, chunk) in mine {
                    let mut rng =
                        SplitMix::new(seed ^ (b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
                    for v in chunk.iter_mut() {
                        *v = rng.next_f32();
                    }
                }
            });
        }
    });
    data
}

/// Return freed heap pages to the operating system (glibc keeps them per thread arena), so that RSS
/// measures live memory rather than the allocator's caches.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim_heap() {
    unsafe extern "C" {
        fn malloc_trim(pad: usize) -> i32;
    }
    // SAFETY: glibc's malloc_trim(3) takes a byte count, touches only the allocator's own free lists, and
    // is safe to call at any time from any thread.
    unsafe {
        malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim_heap() {}

/// Bytes the program holds on the heap: glibc's `mallinfo2()` in-use bytes of every arena (`uordblks`)
/// plus its mmapped chunks (`hblkhd`).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn heap_in_use() -> Option<u64> {
    /// glibc's `struct mallinfo2` (every field a `size_t`).
    #[repr(C)]
    struct MallInfo2 {
        arena: usize,
        ordblks: usize,
        smblks: usize,
        hblks: usize,
        hblkhd: usize,
        usmblks: usize,
        fsmblks: usize,
        uordblks: usize,
        fordblks: usize,
        keepcost: usize,
    }
    unsafe extern "C" {
        fn mallinfo2() -> MallInfo2;
    }
    // SAFETY: mallinfo2(3) (glibc 2.33+) takes nothing and returns the struct above by value; it only reads
    // the allocator's own counters (under its arena locks).
    let m = unsafe { mallinfo2() };
    Some((m.uordblks + m.hblkhd) as u64)
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn heap_in_use() -> Option<u64> {
    None
}

// ---------------------------------------------------------------------------------------------------
// Output

fn fmt_us(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| {
        if v >= 1000.0 {
            format!("{:.2} ms", v / 1000.0)
        } else {
            format!("{v:.0} us")
        }
    })
}

fn render_markdown(r: &Report) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "## recall load: {}\n",
        if r.passed() { "PASSED" } else { "FAILED" }
    );
    let _ = writeln!(o, "- date: {} (UTC), commit {}", r.date, COMMIT);
    let _ = writeln!(o, "- device: {}; policy {}", r.device, r.policy);
    let _ = writeln!(o, "- cpu: {}", r.cpu);
    let _ = writeln!(o, "- command: `{}`", r.command);
    let args: Vec<String> = r.args.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let _ = writeln!(
        o,
        "- settings: {}; executor permits (max in flight): {}",
        args.join(", "),
        r.max_in_flight
    );
    let _ = writeln!(
        o,
        "- {} calls in {:.1} s: **{:.0} calls/s** (whole seconds: slowest {}, fastest {}); {} on the GPU",
        grouped(r.calls),
        r.elapsed_s,
        r.calls_per_s,
        r.slowest_second.map_or("-".into(), grouped),
        r.fastest_second.map_or("-".into(), grouped),
        grouped(r.gpu_calls)
    );
    match &r.fast_check {
        None => {
            let _ = writeln!(
                o,
                "- errors: {}; answers verified on the CPU bit for bit: {} ({} mismatches)",
                r.errors, r.verified, r.mismatches
            );
        }
        Some(f) => {
            let _ = writeln!(
                o,
                "- errors: {}; answers verified on the CPU: {} ({} mismatches): candidates and spreading bit for \
                 bit, fast-mode knn within its bound (docs/numerics.md, \"Fast mode\"): {} (id, score) pairs, {} \
                 scores outside the bound, {} ids worse than the exact k-th by more than twice it; largest \
                 |fast - exact| {:.3e} (bound there {:.3e}); recall of the exact top-k {:.4}",
                r.errors,
                r.verified,
                r.mismatches,
                f.pairs,
                f.scores_out,
                f.ids_out,
                f.max_err,
                f.bound_at_max,
                f.hits as f64 / f.pairs.max(1) as f64
            );
        }
    }
    let fb: Vec<String> = r
        .fallbacks_by_reason
        .iter()
        .map(|(n, v)| format!("{n} {v}"))
        .collect();
    let _ = writeln!(o, "- fallbacks to the CPU by reason: {}", fb.join(", "));
    let b = &r.batches;
    if b.count > 0 {
        let ph: Vec<String> = b
            .phases
            .iter()
            .map(|p| {
                format!(
                    "{} p50 {} / p99 {} / mean {}",
                    p.name,
                    fmt_us(p.p50),
                    fmt_us(p.p99),
                    fmt_us(p.mean)
                )
            })
            .collect();
        let _ = writeln!(
            o,
            "- dynamic batches: {} of {:.1} queries on average; per batch {}",
            grouped(b.count),
            b.queries as f64 / b.count as f64,
            ph.join("; ")
        );
    }
    let _ = writeln!(o);
    let _ = writeln!(
        o,
        "| op | calls | on GPU | fallbacks | errors | p50 | p95 | p99 | max | verified | mismatches |"
    );
    let _ = writeln!(o, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (k, f) in &r.kinds {
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            k.name(),
            grouped(f.calls),
            grouped(f.gpu),
            f.fallbacks,
            f.errors,
            fmt_us(f.p50_us),
            fmt_us(f.p95_us),
            fmt_us(f.p99_us),
            fmt_us(Some(f.max_us)),
            f.verified,
            f.mismatches
        );
    }
    let _ = writeln!(
        o,
        "\n| memory (MiB) | host RSS | host RSS after malloc_trim | host heap in use | GPU used (all processes) | executor ledger | resident corpora |"
    );
    let _ = writeln!(o, "|---|---:|---:|---:|---:|---:|---:|");
    for (name, m) in &r.memory {
        let _ = writeln!(
            o,
            "| {name} | {} | {} | {} | {} | {} | {} |",
            mib(m.rss_raw),
            mib(m.rss),
            mib(m.heap),
            mib(m.gpu_used),
            mib(Some(m.ledger)),
            m.resident.map_or("n/a".into(), |v| v.to_string())
        );
    }
    let _ = writeln!(o);
    for c in &r.checks {
        let _ = writeln!(
            o,
            "- {}: {} -> {} MiB: {}",
            c.name,
            mib(c.before),
            mib(c.after),
            match (c.ok, c.informational) {
                (true, _) => "ok",
                (false, false) => "FAILED",
                (false, true) =>
                    "above (memory the allocator keeps: the heap in use is the leak check; see docs/tuning.md, \"Host memory\")",
            }
        );
    }
    for e in &r.first_errors {
        let _ = writeln!(o, "- error: {e}");
    }
    o
}

fn json_str(s: &str) -> String {
    let mut o = String::from("\"");
    for ch in s.chars() {
        match ch {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

fn json_opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or("null".into(), |v| v.to_string())
}

fn json_f(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.3}")
    } else {
        "null".into()
    }
}

fn render_json(r: &Report) -> String {
    let mut o = String::from("{\n");
    let _ = writeln!(o, "  \"passed\": {},", r.passed());
    let _ = writeln!(o, "  \"date\": {},", json_str(&r.date));
    let _ = writeln!(o, "  \"commit\": {},", json_str(COMMIT));
    let _ = writeln!(o, "  \"command\": {},", json_str(&r.command));
    let _ = writeln!(o, "  \"device\": {},", json_str(&r.device));
    let _ = writeln!(o, "  \"cpu\": {},", json_str(&r.cpu));
    let _ = writeln!(o, "  \"policy\": {},", json_str(&r.policy));
    let _ = writeln!(o, "  \"max_in_flight\": {},", r.max_in_flight);
    let args: Vec<String> = r
        .args
        .iter()
        .map(|(k, v)| format!("{}: {}", json_str(k), json_str(v)))
        .collect();
    let _ = writeln!(o, "  \"settings\": {{{}}},", args.join(", "));
    let _ = writeln!(o, "  \"elapsed_s\": {},", json_f(r.elapsed_s));
    let _ = writeln!(o, "  \"calls\": {},", r.calls);
    let _ = writeln!(o, "  \"calls_per_s\": {},", json_f(r.calls_per_s));
    let _ = writeln!(
        o,
        "  \"slowest_second_calls\": {},",
        json_opt(r.slowest_second)
    );
    let _ = writeln!(
        o,
        "  \"fastest_second_calls\": {},",
        json_opt(r.fastest_second)
    );
    let _ = writeln!(o, "  \"gpu_calls\": {},", r.gpu_calls);
    let _ = writeln!(o, "  \"errors\": {},", r.errors);
    let _ = writeln!(o, "  \"verified\": {},", r.verified);
    let _ = writeln!(o, "  \"mismatches\": {},", r.mismatches);
    if let Some(f) = &r.fast_check {
        let _ = writeln!(
            o,
            "  \"fast_check\": {{\"pairs\": {}, \"scores_out\": {}, \"ids_out\": {}, \"recall\": {:.6}, \"max_err\": {:e}}},",
            f.pairs,
            f.scores_out,
            f.ids_out,
            f.hits as f64 / f.pairs.max(1) as f64,
            f.max_err
        );
    }
    let fb: Vec<String> = r
        .fallbacks_by_reason
        .iter()
        .map(|(n, v)| format!("{}: {v}", json_str(n)))
        .collect();
    let _ = writeln!(o, "  \"fallbacks_by_reason\": {{{}}},", fb.join(", "));
    let kinds: Vec<String> = r
        .kinds
        .iter()
        .map(|(k, f)| {
            format!(
                "    {}: {{\"calls\": {}, \"gpu\": {}, \"fallbacks\": {}, \"errors\": {}, \"p50_us\": {}, \"p95_us\": {}, \"p99_us\": {}, \"max_us\": {}, \"verified\": {}, \"mismatches\": {}}}",
                json_str(k.name()),
                f.calls,
                f.gpu,
                f.fallbacks,
                f.errors,
                json_opt(f.p50_us.map(json_f)),
                json_opt(f.p95_us.map(json_f)),
                json_opt(f.p99_us.map(json_f)),
                json_f(f.max_us),
                f.verified,
                f.mismatches
            )
        })
        .collect();
    let _ = writeln!(o, "  \"ops\": {{\n{}\n  }},", kinds.join(",\n"));
    let mem: Vec<String> = r
        .memory
        .iter()
        .map(|(n, m)| {
            format!(
                "    {}: {{\"host_rss_raw_bytes\": {}, \"host_rss_bytes\": {}, \"host_heap_in_use_bytes\": {}, \"gpu_used_bytes\": {}, \"ledger_bytes\": {}, \"resident_corpora\": {}}}",
                json_str(n),
                json_opt(m.rss_raw),
                json_opt(m.rss),
                json_opt(m.heap),
                json_opt(m.gpu_used),
                m.ledger,
                json_opt(m.resident)
            )
        })
        .collect();
    let _ = writeln!(o, "  \"memory\": {{\n{}\n  }},", mem.join(",\n"));
    let checks: Vec<String> = r
        .checks
        .iter()
        .map(|c| {
            format!(
                "    {{\"check\": {}, \"before_bytes\": {}, \"after_bytes\": {}, \"ok\": {}, \"informational\": {}}}",
                json_str(c.name),
                json_opt(c.before),
                json_opt(c.after),
                c.ok,
                c.informational
            )
        })
        .collect();
    let _ = writeln!(o, "  \"memory_checks\": [\n{}\n  ],", checks.join(",\n"));
    let errs: Vec<String> = r.first_errors.iter().map(|e| json_str(e)).collect();
    let _ = writeln!(o, "  \"first_errors\": [{}]", errs.join(", "));
    o.push_str("}\n");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fast_check_passes_the_exact_answer_and_catches_a_wrong_score_or_id() {
        let engine = Engine::builder().device(DevicePolicy::Cpu).build().unwrap();
        let (rows, dim, nq) = (300, 16, 3);
        let corpus = engine.corpus(generate_rows(7, rows, dim), dim).unwrap();
        let mut rng = SplitMix::new(5);
        let q = queries(&mut rng, nq, dim);
        for (metric, mode) in [
            (Metric::Cosine, recall::Mode::FastBf16),
            (Metric::Dot, recall::Mode::FastF16),
            (Metric::L2, recall::Mode::FastBf16),
        ] {
            let setup = Setup {
                rows,
                dim,
                k: 10,
                batch: nq,
                cand_queries: 1,
                candidates: 10,
                graph_nodes: 10,
                spread: SpreadParams {
                    decay: 0.5,
                    threshold: 0.01,
                    hops: 1,
                    k: 1,
                },
                metric,
                seed: 1,
                mode,
            };
            let exact = engine
                .executor()
                .knn_shared(&CallOptions::default(), &q, &corpus, metric, 10)
                .unwrap()
                .value;
            let lists = (exact.ids.clone(), exact.scores.clone());
            let c = check_fast(&engine, &corpus, &setup, &q, &lists).unwrap();
            assert!(c.ok(), "{metric:?}: the exact answer is within any bound");
            assert_eq!((c.pairs, c.hits), (nq * 10, nq * 10));
            // A score moved by 0.5: far outside the bound (bf16: ~0.008 for cosine).
            let mut bad = lists.clone();
            bad.1[4] += 0.5;
            let c = check_fast(&engine, &corpus, &setup, &q, &bad).unwrap();
            assert_eq!((c.scores_out, c.ids_out), (1, 0), "{metric:?}");
            // The best id replaced by the exact worst row, with its own exact score: a wrong id.
            let worst = engine
                .executor()
                .knn_shared(&CallOptions::default(), &q[..dim], &corpus, metric, rows)
                .unwrap()
                .value;
            let mut bad = lists.clone();
            bad.0[0] = worst.ids[rows - 1];
            bad.1[0] = worst.scores[rows - 1];
            let c = check_fast(&engine, &corpus, &setup, &q, &bad).unwrap();
            assert_eq!((c.scores_out, c.ids_out), (0, 1), "{metric:?}");
            assert_eq!(c.hits, nq * 10 - 1);
        }
    }

    #[test]
    fn histogram_quantiles_are_within_a_bucket() {
        let mut h = Histogram::new();
        for v in 1..=10_000u64 {
            h.record(v * 1000);
        }
        for (q, want) in [
            (0.5, 5_000_000f64),
            (0.95, 9_500_000.0),
            (0.99, 9_900_000.0),
        ] {
            let got = h.quantile(q).unwrap() as f64;
            assert!(got >= want && got <= want * 1.04, "q {q}: {got} vs {want}");
        }
        assert_eq!(h.quantile(1.0), Some(10_000_000));
        for v in [0u64, 1, 31, 32, 33, 1 << 40, u64::MAX] {
            let i = Histogram::index(v);
            assert!(i < BUCKETS, "{v}");
            assert!(Histogram::upper(i) >= v.max(1), "{v}");
            if i > 0 {
                assert!(Histogram::upper(i - 1) < v.max(1), "{v}");
            }
        }
        assert_eq!(Histogram::new().quantile(0.5), None);
    }

    #[test]
    fn candidate_lists_are_distinct_and_in_range() {
        let mut rng = SplitMix::new(3);
        for rows in [1usize, 2, 7, 12, 1000] {
            let per = rows.min(50);
            let ids = candidate_lists(&mut rng, 4, per, rows);
            for list in ids.chunks(per) {
                let mut l = list.to_vec();
                l.sort_unstable();
                l.dedup();
                assert_eq!(l.len(), per, "rows {rows}");
                assert!(l.iter().all(|&i| (i as usize) < rows));
            }
        }
    }

    #[test]
    fn mix_parsing() {
        assert_eq!(parse_mix("70,10,15,5"), Ok([70, 10, 15, 5]));
        assert_eq!(parse_mix(" 1, 0,0 ,0"), Ok([1, 0, 0, 0]));
        assert!(parse_mix("0,0,0,0").is_err());
        assert!(parse_mix("1,2,3").is_err());
        assert!(parse_mix("a,b,c,d").is_err());
        let mut rng = SplitMix::new(1);
        assert!((0..100).all(|_| pick(&mut rng, &[0, 0, 1, 0]) == Kind::Candidates));
    }

    #[test]
    fn a_digest_sees_every_bit() {
        let (ids, scores) = (vec![3u32, 1, 2], vec![0.5f32, 0.25, -1.0]);
        let d = digest(&ids, &scores);
        assert_eq!(d, digest(&ids.clone(), &scores.clone()));
        assert_ne!(d, digest(&[3, 2, 1], &scores));
        let mut s = scores.clone();
        s[2] = f32::from_bits(s[2].to_bits() ^ 1);
        assert_ne!(d, digest(&ids, &s));
        assert_ne!(digest(&[], &[0.0]), digest(&[], &[-0.0]));
    }

    #[test]
    fn json_strings_are_escaped() {
        assert_eq!(json_str("a\"b\\c\nd\u{1}"), "\"a\\\"b\\\\c\\nd\\u0001\"");
    }

    #[test]
    fn generated_rows_do_not_depend_on_threads() {
        let a = generate_rows(5, 9000, 3);
        assert_eq!(a.len(), 27_000);
        let mut rng = SplitMix::new(5);
        assert_eq!(a[0].to_bits(), rng.next_f32().to_bits());
        assert!(a.iter().all(|v| (-1.0..1.0).contains(v)));
    }
}
