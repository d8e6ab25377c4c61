//! The host side of the one-query server (`sm90a_knn1s_*` on Hopper, `sm80_knn1s_*` elsewhere from sm_80; see
//! `kernels-rs/src/serve.rs`): one query against a small resident corpus with no launch per query.
//!
//! A one-query call through a launch cannot take less than the launch itself: on an H200 about 7 us from
//! `cuLaunchKernel` to the host seeing a tiny kernel's answer, against 1-3 us for the scan of 1,000 rows. With
//! the server on (`RECALL_KNN1_SERVE=on`, or [`Kernels::set_knn1_serve`]), the first
//! [`Kernels::knn1_resident`] call against a corpus launches the one-query grid once, on a stream of its own,
//! and its blocks stay resident: each later query is written into a mailbox in mapped memory and the answer
//! comes back into mapped memory as from a launch, through the same chains, keys and merges (the same answer bit
//! for bit). Like the launched `sm90a_knn1_*`, the server hands every block's list to the host where the lists
//! are few (`RECALL_KNN1_MERGE`).
//!
//! The server ends by itself when no query comes for `RECALL_KNN1_SERVE_IDLE_US` (default
//! [`SERVE_IDLE_DEFAULT_US`]) or at its first wait past [`SERVE_LIFE`] from its start; the host starts another at
//! the next query. The host does not ring a server that may be about to end (past three quarters of either
//! limit): it stops it and starts another, so an ending server and a new query never meet. It moves the server to
//! another corpus (or shape, or metric) on that corpus's second call in a row (a first call launches, so calls
//! alternating between corpora keep one served), and stops it when its scratch is released and when the kernels
//! are dropped.
//! While it runs, its blocks hold their SMs' share of registers and shared memory and block 0 polls the mailbox
//! over the bus; other work runs beside it on what is left.
//!
//! Only resident corpora are served: the caller promises the buffers complete and unchanged
//! ([`Kernels::knn1_resident`]), since the server's stream does not wait for the caller's. Where the server
//! cannot run (no entry points, a grid whose blocks cannot all be resident, more than [`KNN1_SERVE_MAX_ROWS`]
//! rows) or fails, the call launches as [`Kernels::knn1`] does; a failed server is dropped and, after
//! [`SERVE_MAX_FAILURES`] failures, not started again by these kernels.

use crate::env::{env_choice, env_number};
use crate::knn1::{
    KNN1_BULK_MAX_ROWS, KNN1_HOST_MERGE_MAX_WORDS, OneQuery, UNSET, bulk_plan, knn1_bulk_enabled,
    knn1_bulk_warps_setting, knn1_layout, knn1_lists, knn1_lists_mode, merge_lists,
};
use crate::launch::{KernelError, Kernels, SimMetric, TopKResult};
use recall_gpu_sys::driver::{CudaFunction, CudaSlice, LaunchConfig};
use recall_gpu_sys::{Element, Gpu, GpuError, MappedReadback, TensorMap, tensor_map_2d};
use recall_kernel_shared::{
    KNN1_BULK_SERVE_KEYS_BYTES, KNN1_SERVE_EXIT, KNN1_SERVE_SYNC_WORDS, Knn1BulkParams,
    Knn1BulkServeParams, Knn1Params, Knn1ServeParams, SERVE_LISTS_SHIFT, SMALL_K_MAX, ServeFields,
    knn1_bulk_serve_shared_bytes, knn1_serve_next, knn1_serve_shared_bytes,
};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The most rows the server takes: 16,384 (`sm90a_knn1s`: 512 blocks of 32 rows, four to an SM on 132 SMs;
/// `sm80_knn1s`: 256 blocks of 64). Above it a launch's fixed cost is a smaller share of the scan, and `knn1`
/// launches; below it too where the driver's occupancy says the grid cannot be resident at once.
pub const KNN1_SERVE_MAX_ROWS: usize = 16_384;

/// Microseconds without a query after which a server ends by default: 2,000.
pub const SERVE_IDLE_DEFAULT_US: u32 = 2_000;

/// How long after its start a server ends at its next wait for a query, however busy: 200 ms. A stream
/// synchronise that waits for the whole device (none of recall's) could wait this long for it.
pub const SERVE_LIFE: Duration = Duration::from_millis(200);

/// Failures after which [`Kernels`] stop starting servers: 3.
pub const SERVE_MAX_FAILURES: u32 = 3;

/// How long the host spins on a server's answer before it waits for the server's stream instead.
const SERVE_SPIN: Duration = Duration::from_millis(2);

/// The server's entry points and its state.
#[derive(Debug)]
pub(crate) struct ServeKernels {
    funcs: [CudaFunction; 3],
    /// Whether `knn1` serves (`RECALL_KNN1_SERVE`, [`Kernels::set_knn1_serve`]).
    on: AtomicBool,
    failures: AtomicU32,
    /// Calls the servers answered.
    answered: AtomicU64,
    server: parking_lot::Mutex<Option<Server>>,
    /// The last shape and buffers a server could not take (its grid not resident at once): their calls launch
    /// without asking again.
    declined: parking_lot::Mutex<Option<ServeKey>>,
    /// A corpus (or shape, or metric) other than the running server's, called once: the server moves to it on
    /// its second call in a row, so that calls alternating between corpora launch for one of them instead of
    /// stopping and starting a server each time.
    switch_to: parking_lot::Mutex<Option<ServeKey>>,
}

impl ServeKernels {
    /// `sm80_knn1s_{dot,cosine,l2}`, opted into the shared memory of their largest block; `None` when missing
    /// (images before sm_80) or refused (logged). Device loss is an error.
    pub(crate) fn load(
        gpu: &Gpu,
        f: impl Fn(&str) -> Result<CudaFunction, GpuError>,
        max_warps: u32,
    ) -> Result<Option<ServeKernels>, GpuError> {
        let bytes = knn1_serve_shared_bytes(crate::KNN1_MAX_DIM as u32, max_warps);
        let Some(funcs) = crate::knn1::metric_triple(gpu, &f, "sm80_knn1s", bytes)? else {
            return Ok(None);
        };
        Ok(Some(ServeKernels {
            funcs,
            on: AtomicBool::new(env_choice("RECALL_KNN1_SERVE", &["off", "on"]) == 1),
            failures: AtomicU32::new(0),
            answered: AtomicU64::new(0),
            server: parking_lot::Mutex::new(None),
            declined: parking_lot::Mutex::new(None),
            switch_to: parking_lot::Mutex::new(None),
        }))
    }

    /// Stop the running server, if any, and free its buffers.
    pub(crate) fn stop(&self) {
        *self.server.lock() = None;
    }
}

impl Drop for ServeKernels {
    fn drop(&mut self) {
        // Before the entry points (and possibly their module) go.
        self.stop();
    }
}

/// What a server answers for: the corpus's and norms' addresses, the shape, the metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ServeKey {
    corpus: u64,
    norms: u64,
    n_rows: usize,
    dim: usize,
    metric: usize,
}

/// A server: its stream, its mapped and device buffers, and where its numbers stand.
#[derive(Debug)]
struct Server {
    /// The handle of the server's own stream (same context).
    gpu: Gpu,
    key: ServeKey,
    /// The entry point, its body's shape, and the launch's grid, block and shared memory.
    func: CudaFunction,
    body: Body,
    cfg: (u32, u32, u32),
    /// Mapped: the mailbox (`Knn1ServeParams`), `dim + 2` words.
    mailbox: MappedReadback<u64>,
    /// Mapped: the answer words: `2k`, or `2k` per list for the host (`knn1_lists_mode`).
    answer: MappedReadback<u64>,
    /// Device: the query as block 0 relays it, the published / k / answered words and the statistics, and the
    /// body's scratch.
    relayed: CudaSlice<f32>,
    sync: CudaSlice<u32>,
    scores: CudaSlice<f32>,
    partial: CudaSlice<u64>,
    tickets: CudaSlice<u32>,
    /// The number of the last query (or exit) rung.
    bell: u32,
    /// Whether a launch may be running, since when, and when its last answer came.
    running: bool,
    started: Instant,
    last_answer: Instant,
    idle: Duration,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.halt();
    }
}

impl Server {
    /// Ring the exit and wait for the launch to end (at once: block 0 waits for a query, or finishes the one
    /// it runs first). Errors are logged: the stream's next use reports them.
    fn halt(&mut self) {
        if !self.running {
            return;
        }
        self.running = false;
        let bell = knn1_serve_next(self.bell);
        self.bell = bell;
        let exit = (u64::from(bell) << 32) | u64::from(KNN1_SERVE_EXIT);
        if let Err(e) = self.mailbox.store_words(self.key.dim, [exit].into_iter()) {
            tracing::warn!(error = %e, "knn1 server: exit not rung");
        }
        if let Err(e) = self.gpu.synchronize() {
            tracing::warn!(error = %e, "knn1 server: its stream failed");
        }
    }
}

/// Which body a server runs, with what its launch needs.
#[derive(Debug, Clone, Copy)]
enum Body {
    /// `sm80_knn1s_*`: `sm80_knn1_*`'s warps per block and merge groups.
    Sm80 { warps: u32, group_blocks: u32 },
    /// `sm90a_knn1s_*`: `sm90a_knn1_*`'s ring of `slots` tiles and the corpus's tensor map.
    Bulk { slots: u32, map: TensorMap },
}

/// `RECALL_KNN1_SERVE_IDLE_US` (read once), else [`SERVE_IDLE_DEFAULT_US`].
fn serve_idle() -> Duration {
    static IDLE: OnceLock<Duration> = OnceLock::new();
    *IDLE.get_or_init(|| {
        Duration::from_micros(u64::from(
            env_number("RECALL_KNN1_SERVE_IDLE_US", 100..=10_000_000)
                .unwrap_or(SERVE_IDLE_DEFAULT_US),
        ))
    })
}

impl Kernels {
    /// Whether `knn1` answers through the one-query server (`serve.rs`) where it can; `false` (the default
    /// unless `RECALL_KNN1_SERVE=on`) launches for every query. Both give the same answers. Returns the
    /// previous setting; turning it off stops a running server. A no-op (returning `false`) where the image
    /// has no server.
    pub fn set_knn1_serve(&self, on: bool) -> bool {
        let Some(s) = &self.knn1_serve else {
            return false;
        };
        let was = s.on.swap(on, Ordering::Relaxed);
        if !on {
            s.stop();
        }
        was
    }

    /// `(calls answered by a server, server failures)` since these kernels loaded (`(0, 0)` where the image has
    /// no server). A failed server's call is launched instead, with the same answer.
    pub fn knn1_serve_counts(&self) -> (u64, u32) {
        self.knn1_serve.as_ref().map_or((0, 0), |s| {
            (
                s.answered.load(Ordering::Relaxed),
                s.failures.load(Ordering::Relaxed),
            )
        })
    }

    /// Whether the server would answer `knn1` for this shape here: turned on, not given up after failures,
    /// and the shape within [`KNN1_SERVE_MAX_ROWS`] and `knn1`'s own limits.
    pub fn knn1_serves(&self, n_rows: usize, dim: usize, k: usize) -> bool {
        self.knn1_serve.as_ref().is_some_and(|s| {
            s.on.load(Ordering::Relaxed) && s.failures.load(Ordering::Relaxed) < SERVE_MAX_FAILURES
        }) && n_rows <= KNN1_SERVE_MAX_ROWS
            && self.knn1.is_some()
            && self.knn1_supported(n_rows, dim, k)
    }

    /// `knn1` through the server: `Ok(None)` where it does not serve this call (then `knn1` launches). A
    /// failure drops the server (and counts towards [`SERVE_MAX_FAILURES`]); device loss is returned, any other
    /// error logged and answered `Ok(None)`.
    /// `norms`: the corpus norms' device address (0 where the metric needs none).
    pub(crate) fn knn1_served(
        &self,
        gpu: &Gpu,
        q: &OneQuery,
        norms: u64,
    ) -> Result<Option<TopKResult>, KernelError> {
        let OneQuery {
            metric,
            query,
            corpus,
            n_rows,
            dim,
            k,
            ..
        } = *q;
        let (Some(serve), Some(kn)) = (&self.knn1_serve, &self.knn1) else {
            return Ok(None);
        };
        if !self.knn1_serves(n_rows, dim, k) {
            return Ok(None);
        }
        let key = ServeKey {
            corpus: gpu.device_ptr(corpus),
            norms,
            n_rows,
            dim,
            metric: metric.index(),
        };
        if *serve.declined.lock() == Some(key) {
            return Ok(None);
        }
        let mut slot = serve.server.lock();
        let result = (|| {
            if slot.as_ref().is_some_and(|s| s.key != key) {
                let mut next = serve.switch_to.lock();
                if *next != Some(key) {
                    // Another corpus's first call: launched; the server stays where it is.
                    *next = Some(key);
                    return Ok(None);
                }
                *next = None;
                *slot = None; // halts it
            } else if slot.is_some() {
                // A call of the server's own corpus: another corpus's next call is a first one again.
                *serve.switch_to.lock() = None;
            }
            if slot.is_none() {
                // The caller promises the corpus and norms complete (`knn1_resident`); for buffers just made,
                // work still queued on the caller's stream, which the server's does not wait for, is waited
                // for once here.
                gpu.synchronize()?;
                let bulk = self
                    .hopper
                    .as_ref()
                    .and_then(|h| h.knn1_serve.as_ref())
                    .filter(|_| knn1_bulk_enabled() && n_rows <= KNN1_BULK_MAX_ROWS);
                match new_server(gpu, serve, bulk, kn.max_warps(), key)? {
                    Some(s) => *slot = Some(s),
                    None => {
                        *serve.declined.lock() = Some(key);
                        return Ok(None);
                    }
                }
            }
            let Some(s) = slot.as_mut() else {
                return Ok(None);
            };
            ask(s, metric, query, k).map(Some)
        })();
        match result {
            Ok(r) => {
                if r.is_some() {
                    serve.answered.fetch_add(1, Ordering::Relaxed);
                }
                Ok(r)
            }
            Err(e) => {
                *slot = None;
                let failures = serve.failures.fetch_add(1, Ordering::Relaxed) + 1;
                if matches!(&e, KernelError::Gpu(g) if g.is_device_lost()) {
                    return Err(e);
                }
                tracing::warn!(error = %e, failures, "knn1 server failed; this query is launched");
                Ok(None)
            }
        }
    }
}

/// A server for `key` (not launched yet): `sm90a_knn1s_*` where `bulk` (its entry points, where the image has
/// them and `sm90a_knn1_*` would run this shape) and the driver makes the corpus's tensor map, else
/// `sm80_knn1s_*`; `None` where the grid's blocks cannot all be resident.
fn new_server(
    gpu: &Gpu,
    serve: &ServeKernels,
    bulk: Option<&[CudaFunction; 3]>,
    max_warps: u32,
    key: ServeKey,
) -> Result<Option<Server>, KernelError> {
    let info = gpu.info();
    let map = match bulk {
        Some(_) => match tensor_map_2d(
            Element::F32,
            key.corpus,
            key.n_rows as u64,
            key.dim as u64,
            key.dim as u64,
            32,
        ) {
            Ok(map) => Some(map),
            Err(e) if e.is_device_lost() => return Err(e.into()),
            Err(e) => {
                tracing::debug!(error = %e, "knn1 server: no tensor map; sm80_knn1s serves");
                None
            }
        },
        None => None,
    };
    let (func, body, n_blocks, n_groups, threads, smem) = match (bulk, map) {
        (Some(funcs), Some(map)) => {
            let n_blocks = key.n_rows.div_ceil(32);
            // Each block's merge lists and words take more than the body's plan (and its alignment): taken
            // from the shared memory that `bulk_plan` shares among an SM's blocks.
            let per_sm = n_blocks.div_ceil(info.sm_count.max(1) as usize) as u32;
            let budget = (info.max_shared_memory_per_block_optin as u32)
                .saturating_sub(per_sm.saturating_mul(KNN1_BULK_SERVE_KEYS_BYTES + 32));
            // At most 4 warps: the entry points' launch bounds (`cargo xtask build-kernels`).
            let setting = knn1_bulk_warps_setting().map(|w| w.min(4));
            let (slots, warps, _) = bulk_plan(n_blocks, key.dim, info.sm_count, budget, setting);
            let warps = warps.min(4);
            (
                &funcs[key.metric],
                Body::Bulk { slots, map },
                n_blocks,
                n_blocks.div_ceil(32),
                32 * warps as usize,
                knn1_bulk_serve_shared_bytes(key.dim as u32, slots),
            )
        }
        _ => {
            let (warps, (n_blocks, n_groups, threads)) = knn1_layout(key.n_rows, max_warps);
            (
                &serve.funcs[key.metric],
                Body::Sm80 {
                    warps,
                    group_blocks: threads as u32,
                },
                n_blocks,
                n_groups,
                threads,
                knn1_serve_shared_bytes(key.dim as u32, warps),
            )
        }
    };
    let per_sm = gpu.max_resident_blocks_per_sm(func, threads as u32, smem)?;
    let resident = per_sm as usize * info.sm_count as usize;
    if n_blocks > resident {
        tracing::debug!(
            n_blocks,
            resident,
            "knn1 server: the grid cannot be resident; launching"
        );
        return Ok(None);
    }
    let own = gpu.with_new_priority_stream()?;
    let now = Instant::now();
    Ok(Some(Server {
        key,
        func: func.clone(),
        body,
        cfg: (n_blocks as u32, threads as u32, smem),
        mailbox: own.alloc_mapped_readback::<u64>(key.dim + 2)?,
        answer: own.alloc_mapped_readback::<u64>(match body {
            Body::Bulk { .. } => KNN1_HOST_MERGE_MAX_WORDS.max(2 * SMALL_K_MAX as usize),
            Body::Sm80 { .. } => 2 * SMALL_K_MAX as usize,
        })?,
        relayed: own.alloc_zeros::<f32>(key.dim)?,
        sync: own.alloc_zeros::<u32>(KNN1_SERVE_SYNC_WORDS)?,
        scores: own.alloc_zeros::<f32>(key.n_rows)?,
        partial: own.alloc_zeros::<u64>((n_blocks + n_groups) * SMALL_K_MAX as usize)?,
        tickets: own.alloc_zeros::<u32>(1 + n_groups)?,
        bell: 0,
        running: false,
        started: now,
        last_answer: now,
        idle: serve_idle(),
        gpu: own,
    }))
}

/// One query through the server `s`: (re)launched first where it is not running or may be about to end.
fn ask(
    s: &mut Server,
    metric: SimMetric,
    query: &[f32],
    k: usize,
) -> Result<TopKResult, KernelError> {
    let now = Instant::now();
    if s.running
        && (now.duration_since(s.last_answer) >= s.idle * 3 / 4
            || now.duration_since(s.started) >= SERVE_LIFE * 3 / 4)
    {
        s.halt();
    }
    let bell = knn1_serve_next(s.bell);
    let tag = u64::from(bell) << 32;
    // `sm90a_knn1s_*` hands the blocks' or the groups' lists to the host as `sm90a_knn1_*` would
    // (`RECALL_KNN1_MERGE`), where they fit the answer's words.
    let blocks = s.cfg.0 as usize;
    let mode = match s.body {
        Body::Bulk { .. } => knn1_lists_mode(blocks, k),
        Body::Sm80 { .. } => 0,
    };
    let (mode, lists) = match knn1_lists(mode, blocks) {
        lists if lists * 2 * k <= s.answer.len() => (mode, lists),
        _ => (0, 1),
    };
    let k_word = k as u64 | u64::from(mode << SERVE_LISTS_SHIFT);
    // SAFETY: no device work writes the answer words now: the last query's every answer word was seen, or
    // the server has ended.
    unsafe { s.answer.fill_host(lists * 2 * k, UNSET) }?;
    // The mailbox: the query's values, k, the padding, each word with the number. A new server's first query
    // is the one after `s.bell`, so it answers this one at once, whatever the mailbox held before.
    let values = query.iter().map(|v| tag | u64::from(v.to_bits()));
    s.mailbox.store_words(0, values)?;
    s.mailbox
        .store_words(query.len(), [tag | k_word, tag].into_iter())?;
    if !s.running {
        launch(s, metric)?;
    }
    s.bell = bell;
    let (words, ended) =
        s.gpu
            .wait_mapped_filled_or_done(&mut s.answer, lists * 2 * k, UNSET, SERVE_SPIN)?;
    if ended {
        // The wait found the server's stream finished (past the spin it synchronised it): the server has
        // ended (it idled out after answering, as under a sanitizer); the next query starts another. Only the
        // wait can tell: with a clock read after it, an answer that came just before the spin ended, or a
        // host thread preempted after it, looked like an ended server, and the next query then queued a second
        // server behind the running one (which could answer a later query from a stale mailbox).
        s.running = false;
    }
    let answer = merge_lists(words, lists, k).ok_or_else(|| KernelError::Answer {
        kernel: "sm80_knn1s",
        reason: format!("the answer holds fewer than k = {k} rows"),
    })?;
    s.last_answer = Instant::now();
    Ok(answer)
}

/// Launch the server `s` on its stream, its device words and tickets zeroed first; it takes the last number
/// rung (`s.bell`) as answered.
fn launch(s: &mut Server, metric: SimMetric) -> Result<(), KernelError> {
    let g = &s.gpu;
    g.zero(&mut s.sync)?;
    g.zero(&mut s.tickets)?;
    let (warps, group_blocks) = match s.body {
        Body::Sm80 {
            warps,
            group_blocks,
        } => (warps, group_blocks),
        Body::Bulk { .. } => (1, 32),
    };
    let base = Knn1Params {
        query: g.device_ptr(&s.relayed),
        corpus: s.key.corpus,
        corpus_norms: s.key.norms,
        scores: g.device_ptr(&s.scores),
        partial: g.device_ptr(&s.partial),
        ticket: g.device_ptr(&s.tickets),
        out: s.answer.device_ptr(),
        n_rows: s.key.n_rows as u32,
        dim: s.key.dim as u32,
        k: 0,
        warps,
        higher_first: u32::from(metric.higher_first()),
        group_blocks,
    };
    let serve = ServeFields {
        mailbox: s.mailbox.device_ptr(),
        query: g.device_ptr(&s.relayed),
        sync: g.device_ptr(&s.sync),
        idle_ns: s.idle.as_nanos() as u64,
        life_ns: SERVE_LIFE.as_nanos() as u64,
        seen: s.bell,
        _pad: 0,
    };
    let (grid, block, smem) = s.cfg;
    let cfg = LaunchConfig {
        grid_dim: (grid, 1, 1),
        block_dim: (block, 1, 1),
        shared_mem_bytes: smem,
    };
    // SAFETY: `Sm80`: the grid, block and shared memory of `knn1_layout` for this shape (what `sm80_knn1_*`
    // takes, `knn1_supported` held) plus the server's words (`knn1_serve_shared_bytes`); `Bulk`: one block per
    // 32 rows (at most KNN1_BULK_MAX_ROWS: at most 32 groups of 32), `bulk_plan`'s warps and ring plus the
    // server's words (`knn1_bulk_serve_shared_bytes`), the corpus's tensor map, `lists_out` 0; each within what
    // its functions were opted into; every block resident at once (the occupancy checked in `new_server`);
    // corpus and norms buffers of the key's shape, read only while a query rung by a `knn1` call on them
    // runs (a call on other buffers halts this server first); scores n_rows, partial and tickets as `knn1`
    // sizes them (zeroed above, on this stream); the mailbox dim + 2 u64 and the answer 2 * SMALL_K_MAX u64
    // of mapped memory, the relayed query dim f32 and sync KNN1_SERVE_SYNC_WORDS u32 of device memory; each
    // query's k within knn1_supported's limit (checked by `knn1` for every call).
    unsafe {
        match s.body {
            Body::Sm80 { .. } => g.launch(&s.func, cfg, Knn1ServeParams { base, serve }),
            Body::Bulk { slots, map } => g.launch(
                &s.func,
                cfg,
                Knn1BulkServeParams {
                    bulk: Knn1BulkParams {
                        map: map.0,
                        base,
                        slots,
                        lists_out: 0,
                        _pad: [0; 2],
                        query: [],
                    },
                    serve,
                },
            ),
        }
    }?;
    s.running = true;
    s.started = Instant::now();
    s.last_answer = s.started;
    Ok(())
}

/// What a server measured on the device's clock over its current (or last) launch, for the benchmark: the launcher
/// zeroes the words at every launch, and a server that idled out starts again at the next query.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ServeStats {
    /// Queries published.
    pub queries: u64,
    /// Mean microseconds from a complete mailbox to its number published (block 0's release of the number).
    pub relay_us: f64,
    /// Queries whose blocks' lists the device merged (the others' lists went to the host).
    pub merged: u64,
    /// Mean microseconds from a query's mailbox complete to its answer written, over the `merged` queries (block
    /// 0 publishes the number; the other blocks see it, stage the query, scan and merge).
    pub answer_us: f64,
    /// Mean microseconds from a query's number published to block 0's part of it done (its list written, or
    /// its merges), over every query.
    pub block0_us: f64,
}

impl Kernels {
    /// The running (or last) server's [`ServeStats`], after stopping it (the next query starts another);
    /// `None` where no server was made.
    pub fn knn1_serve_stats(&self) -> Result<Option<ServeStats>, KernelError> {
        let Some(serve) = &self.knn1_serve else {
            return Ok(None);
        };
        let mut slot = serve.server.lock();
        let Some(s) = slot.as_mut() else {
            return Ok(None);
        };
        s.halt();
        let words = s.gpu.download(&s.sync)?;
        let word = |i: usize| match (words.get(2 * i), words.get(2 * i + 1)) {
            (Some(&lo), Some(&hi)) => u64::from(lo) | (u64::from(hi) << 32),
            _ => 0,
        };
        let mean_us = |sum: u64, n: u64| sum as f64 / n.max(1) as f64 / 1e3;
        Ok(Some(ServeStats {
            queries: word(6),
            relay_us: mean_us(word(3), word(6)),
            merged: word(5),
            answer_us: mean_us(word(4), word(5)),
            block0_us: mean_us(word(7), word(6)),
        }))
    }
}
