//! The launcher of spreading (`spread_hop` and the sparse-frontier kernels of `kernels-rs/src/graph.rs`).
//!
//! A call allocates nothing on the device: its buffers live with the graph's device copy ([`DeviceGraph`]) and
//! are reused. Seeds go up from pinned memory, as a short list of (node, value) pairs scattered on the device
//! when few are nonzero; the activations come back into pinned memory. Per hop, when the active sources'
//! out-edges are at most 1/16 of the edges ([`Frontier::Auto`]), only the targets they reach are pulled
//! (`spread_mark`, `spread_collect`, then `spread_hop` over those lists); the other targets get `+0.0`, which is
//! what the contract's chain gives them (`docs/numerics.md`, "Activation spreading"). The first dense hop makes
//! the remaining hops dense (frontiers rarely shrink that much again), so the host waits for the device only
//! after sparse hops, to read how large the next frontier is.
//!
//! The host's share of a call overlaps the device's: the device buffers are zeroed before the host scans
//! the seeds (in parallel for long seed vectors); after the last hop the activations' download is queued
//! on a second stream (`SpreadScratch::copy`, after an event at the end of the hops) while the top-k
//! selection runs on the handle's stream, and the host makes the output `Vec` (touching its pages) while
//! the device works, then copies each downloaded chunk into it (in parallel pieces) as it arrives. The call
//! waits once at the end for the overflow flag and the top-k; on overflow the answers are dropped.

use crate::launch::{DeviceGraph, KernelError, Kernels, Segments, shape, to_u32};
use recall_gpu_sys::Gpu;
use recall_gpu_sys::driver::{CudaEvent, CudaSlice, CudaStream, LaunchConfig, PinnedHostSlice};
use recall_gpu_sys::memory::{
    event_synchronize, new_fence, record_event, stream_synchronize, stream_wait_event,
};
use recall_kernel_shared::{
    GRAPH_BLOCK, SPREAD_COUNTERS, SPREAD_CTR_ACTIVE, SPREAD_CTR_EDGES, SPREAD_HUB_CHUNK,
    SPREAD_SCAN_BLOCK, SpreadFrontierParams, SpreadHopParams, spread_hop_blocks,
};
use std::sync::Arc;

/// How the hops of a spreading call are computed. Every choice gives the same bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Frontier {
    /// Sparse hops while the active sources' out-edges are at most 1/16 of all edges; from the first hop above
    /// that on, dense hops.
    #[default]
    Auto,
    /// Every hop over every node (the pull form only).
    Dense,
    /// Every hop over the targets of the active sources only (for tests: any frontier size).
    Sparse,
}

/// The seeds of a spreading call ([`Kernels::spread_graph`]): either form gives the same bits for the same
/// seeds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Seeds<'a> {
    /// One activation per node (`n_nodes` values); the host scans it for the nonzero ones
    /// (`recall_cpu_simd::nonzero_positions`).
    Dense(&'a [f32]),
    /// `(node, value)` pairs with node ids ascending and distinct, below `n_nodes`: the dense vector with
    /// `seed[node] = value` for each pair and `0.0` elsewhere (no scan). Pairs whose value is `0.0` or `-0.0`
    /// are no seeds.
    List(&'a [(u32, f32)]),
}

/// What [`Kernels::spread_graph`] gives back.
#[derive(Debug, Clone, PartialEq)]
pub struct SpreadOutcome {
    /// The accumulated activation of every node (empty unless asked for, or on overflow).
    pub activation: Vec<f32>,
    /// The top `k` of the accumulated activation, when asked for (and no overflow).
    pub top: Option<crate::launch::TopKResult>,
    /// The first hop at which a value became infinite, if any.
    pub overflow: Option<u32>,
    /// How many hops ran in the sparse form.
    pub sparse_hops: u32,
}

/// Seeds with at most `n_nodes / SEED_PAIRS_DIV` nonzero values go up as (node, value) pairs.
const SEED_PAIRS_DIV: usize = 4;
/// A hop is sparse under [`Frontier::Auto`] when its active out-edges are at most `n_edges / SPARSE_DIV` (the
/// CPU's push/pull switch too).
const SPARSE_DIV: u64 = 16;

/// The activations come back in this many chunks (the host copies one while the next crosses the bus).
const OUT_CHUNKS: usize = 4;
/// f32 values per 4 KiB page: the output's pages are touched once each before the copies.
const PAGE_F32: usize = 1024;

/// Most spreading calls over one graph at once (a further call waits for one to finish). Each slot holds a
/// stream and about 7 x 4 bytes per node of device memory.
const MAX_SLOTS: usize = 4;

/// The spreading slots of one graph ([`DeviceGraph`]): one per call in flight, each with its own stream, so
/// that calls over the graph run beside each other and beside the device's other work; made on demand (at
/// most [`MAX_SLOTS`]) and kept for reuse.
#[derive(Debug, Default)]
pub(crate) struct SpreadSlots {
    state: parking_lot::Mutex<SlotState>,
    freed: parking_lot::Condvar,
}

#[derive(Debug, Default)]
struct SlotState {
    idle: Vec<SpreadSlot>,
    /// Slots in existence: idle plus in use.
    made: usize,
}

/// One call's stream and buffers.
#[derive(Debug)]
pub(crate) struct SpreadSlot {
    /// Declared first: dropped (waiting for its download stream) before the stream goes.
    bufs: SpreadScratch,
    /// A handle on the graph's device with the slot's own stream.
    gpu: Gpu,
}

impl SpreadSlots {
    /// An idle slot, a new one while fewer than [`MAX_SLOTS`] exist, else the next one given back.
    fn take(&self, gpu: &Gpu, n: usize, n_hubs: usize) -> Result<SpreadSlot, KernelError> {
        {
            let mut st = self.state.lock();
            loop {
                if let Some(slot) = st.idle.pop() {
                    return Ok(slot);
                }
                if st.made < MAX_SLOTS {
                    st.made += 1;
                    break;
                }
                self.freed.wait(&mut st);
            }
        }
        let made = gpu
            .with_new_stream()
            .map_err(KernelError::from)
            .and_then(|gpu| {
                Ok(SpreadSlot {
                    bufs: SpreadScratch::new(&gpu, n, n_hubs)?,
                    gpu,
                })
            });
        if made.is_err() {
            self.forget_one();
        }
        made
    }

    /// A slot that was counted as made is gone (never made, or dropped): its place is free for another.
    fn forget_one(&self) {
        self.state.lock().made -= 1;
        self.freed.notify_one();
    }

    /// Return a slot after a call. After a failed call its streams may still hold work: the slot is kept only
    /// once all three are idle, else dropped (the buffers are freed on its stream, after that work).
    fn give_back(&self, slot: SpreadSlot, ok: bool) {
        let idle = ok
            || (slot.gpu.synchronize().is_ok()
                && stream_synchronize(&slot.bufs.copy).is_ok()
                && slot.bufs.hubs.synchronize().is_ok());
        if idle {
            self.state.lock().idle.push(slot);
            self.freed.notify_one();
        } else {
            drop(slot);
            self.forget_one();
        }
    }
}

/// The place of a slot taken for one call, given back if the call unwinds (a panic below the launch: the executor
/// answers it on the CPU and goes on using the GPU). The slot itself is dropped then, its buffers freed on its
/// stream; without this its place would be gone from the graph's [`MAX_SLOTS`], and after as many panics every
/// spread over the graph would wait for good. A call that returns gives its slot back itself.
struct SlotLease<'a> {
    slots: &'a SpreadSlots,
    armed: bool,
}

impl Drop for SlotLease<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.slots.forget_one();
        }
    }
}

impl Drop for SpreadSlots {
    /// The slots' buffers are freed on their streams: wait for that, so that a trim of the driver's pool
    /// right after the graph is dropped gives their memory back.
    fn drop(&mut self) {
        for SpreadSlot { bufs, gpu } in self.state.get_mut().idle.drain(..) {
            drop(bufs);
            if let Err(e) = gpu.synchronize() {
                tracing::warn!(error = %e, "recall: could not wait for a spreading stream");
            }
        }
    }
}

/// The per-call buffers of spreading over one graph.
#[derive(Debug)]
pub(crate) struct SpreadScratch {
    prev: CudaSlice<f32>,
    next: CudaSlice<f32>,
    total: CudaSlice<f32>,
    /// u32: `u32::MAX - hop` of the first overflow, 0 if none.
    flag: CudaSlice<u32>,
    counters: CudaSlice<u32>,
    mark: CudaSlice<u32>,
    active: CudaSlice<u32>,
    touched: CudaSlice<u32>,
    /// Seed pairs: `count` node ids, then `count` values' bits.
    pairs: CudaSlice<u32>,
    /// 32 lane-chain sums per hub, and each hub's ticket (zero between hops): `SpreadHopParams`.
    hub_lanes: CudaSlice<f32>,
    hub_tickets: CudaSlice<u32>,
    pairs_host: Option<PinnedHostSlice<u32>>,
    dense_host: Option<PinnedHostSlice<f32>>,
    /// The counters and then the flag, read back.
    small_host: PinnedHostSlice<u32>,
    out_host: Option<PinnedHostSlice<f32>>,
    /// One event per chunk of the activations' download, so the host copies a chunk while the next one crosses.
    out_fences: Vec<CudaEvent>,
    /// The stream of the activations' download (it overlaps the top-k selection on the handle's stream).
    copy: Arc<CudaStream>,
    /// Recorded on the handle's stream after the last hop; the download waits for it.
    hops_done: CudaEvent,
    /// A handle on the device whose stream runs each hop's hubs (`spread_hub`) beside the rest of the hop: of
    /// the highest priority, so that the hubs' blocks start before the hop's many blocks take every SM.
    hubs: Gpu,
    /// Recorded on the handle's stream before a hop; the hubs' stream waits for it.
    hop_ready: CudaEvent,
    /// Recorded on the hubs' stream after a hop's hubs; the handle's stream waits for it before what follows.
    hubs_done: CudaEvent,
    /// The nonzero seeds' node ids (host, reused).
    seed_ids: Vec<u32>,
    /// Their values, for a seed list (host, reused; empty for a dense seed vector).
    seed_vals: Vec<f32>,
}

impl Drop for SpreadScratch {
    fn drop(&mut self) {
        // The download stream may still read `total` and the hubs' stream run a hop (a call that failed
        // half-way): wait for them before the buffers are freed on the handle's stream, which does not.
        if let Err(e) = stream_synchronize(&self.copy) {
            tracing::warn!(error = %e, "recall: could not wait for the spreading download stream");
        }
        if let Err(e) = self.hubs.synchronize() {
            tracing::warn!(error = %e, "recall: could not wait for the spreading hubs' stream");
        }
    }
}

impl SpreadScratch {
    fn new(gpu: &Gpu, n: usize, n_hubs: usize) -> Result<SpreadScratch, KernelError> {
        Ok(SpreadScratch {
            prev: gpu.alloc_zeros(n)?,
            next: gpu.alloc_zeros(n)?,
            total: gpu.alloc_zeros(n)?,
            flag: gpu.alloc_zeros(1)?,
            counters: gpu.alloc_zeros(SPREAD_COUNTERS)?,
            mark: gpu.alloc_zeros(n.div_ceil(32))?,
            active: gpu.alloc_zeros(n)?,
            touched: gpu.alloc_zeros(n)?,
            pairs: gpu.alloc_zeros(2 * (n / SEED_PAIRS_DIV).max(1))?,
            hub_lanes: gpu.alloc_zeros(32 * n_hubs.max(1))?,
            hub_tickets: gpu.alloc_zeros(n_hubs.max(1))?,
            pairs_host: None,
            dense_host: None,
            small_host: gpu.alloc_pinned_readback(SPREAD_COUNTERS + 1)?,
            out_host: None,
            out_fences: (0..OUT_CHUNKS)
                .map(|_| new_fence(gpu.context()))
                .collect::<Result<_, _>>()?,
            copy: gpu.new_stream()?,
            hops_done: new_fence(gpu.context())?,
            hubs: gpu.with_new_priority_stream()?,
            hop_ready: new_fence(gpu.context())?,
            hubs_done: new_fence(gpu.context())?,
            seed_ids: Vec::new(),
            seed_vals: Vec::new(),
        })
    }
}

/// The positions of the nonzero seeds of a dense seed vector (`-0.0` is no seed), ascending, into `ids` (cleared
/// first): `recall_cpu_simd::nonzero_positions`, the one scan the CPU's spreading runs too.
///
/// # Errors
/// [`KernelError::Shape`] when `seeds` has more than 2^32 values (positions are u32).
fn dense_nonzero(seeds: &[f32], ids: &mut Vec<u32>) -> Result<(), KernelError> {
    ids.clear();
    recall_cpu_simd::nonzero_positions(seeds, 0, ids).map_err(|_| {
        shape(
            "spread_hop",
            format!("{} values have positions past u32", seeds.len()),
        )
    })
}

/// The nonzero pairs of a seed list (ids ascending and distinct, below `n`: checked) into `ids` and `vals`
/// (cleared first): what [`dense_nonzero`] finds in the dense vector of the same seeds, with the values.
fn list_nonzero(
    list: &[(u32, f32)],
    n: usize,
    ids: &mut Vec<u32>,
    vals: &mut Vec<f32>,
) -> Result<(), KernelError> {
    ids.clear();
    vals.clear();
    let mut next = 0usize; // the smallest id the next pair may have
    for (i, &(id, v)) in list.iter().enumerate() {
        if (id as usize) < next || id as usize >= n {
            return Err(shape(
                "spread_hop",
                format!(
                    "seed pair {i} names node {id}: ids must be ascending, distinct and below {n}"
                ),
            ));
        }
        next = id as usize + 1;
        if v != 0.0 {
            ids.push(id);
            vals.push(v);
        }
    }
    Ok(())
}

/// A new vector with room for `n` values whose pages have all been written once (faulted in), so that the
/// copies into it run at memory speed; made while the device is still busy.
fn touched_vec(n: usize) -> Vec<f32> {
    let mut v = Vec::with_capacity(n);
    for page in v.spare_capacity_mut()[..n].chunks_mut(PAGE_F32) {
        page[0].write(0.0);
    }
    v
}

/// The exclusive prefix of the class sizes: where each class's list starts.
fn class_offsets(n_class: [u32; 4]) -> [u32; 4] {
    [
        0,
        n_class[0],
        n_class[0] + n_class[1],
        n_class[0] + n_class[1] + n_class[2],
    ]
}

/// Blocks of a dense hop over lists of these sizes: `spread_hub`'s, then `spread_hop`'s.
fn hop_blocks(n_class: [u32; 4]) -> (usize, usize) {
    let b = spread_hop_blocks(n_class).map(|b| b as usize);
    (b[0], b[1] + b[2] + b[3])
}

impl Kernels {
    /// Spread `seeds` over `graph` for `hops` hops, all on the device (no host round trip between dense hops),
    /// then, when `k` is given, the top `k` of the accumulated activation, and when `download` is set, every
    /// node's accumulated activation. Seeds are read as `seed + 0.0`; they must be finite and non-negative
    /// (the executor validates them), as must the graph's weights. Waits for the device before returning.
    ///
    /// A dense seed vector is scanned on the host for its nonzero values; a seed list ([`Seeds::List`]) is not.
    /// Either way, at most `n_nodes / 4` nonzero seeds go up as (node, value) pairs and more as a whole vector
    /// (a list is spread into the pinned staging first), so both forms give the same bits.
    #[allow(clippy::too_many_arguments)]
    pub fn spread_graph(
        &self,
        gpu: &Gpu,
        graph: &DeviceGraph,
        seeds: Seeds<'_>,
        decay: f32,
        threshold: f32,
        hops: usize,
        k: Option<usize>,
        download: bool,
        frontier: Frontier,
    ) -> Result<SpreadOutcome, KernelError> {
        const K: &str = "spread_hop";
        let n = graph.n_nodes;
        if let Seeds::Dense(seeds) = seeds
            && seeds.len() != n
        {
            return Err(shape(K, format!("{} seeds for {n} nodes", seeds.len())));
        }
        if let Some(k) = k
            && (k == 0 || k > n)
        {
            return Err(shape(K, format!("k = {k} for {n} nodes")));
        }
        let hops32 = to_u32(K, "hops", hops)?;
        to_u32(K, "n_nodes", n)?;
        let mut slot = graph.slots.take(gpu, n, graph.n_class[0] as usize)?;
        let mut lease = SlotLease {
            slots: &graph.slots,
            armed: true,
        };
        let SpreadSlot { bufs, gpu } = &mut slot;
        let out = self.spread_in_slot(
            gpu, bufs, graph, seeds, decay, threshold, hops32, k, download, frontier,
        );
        lease.armed = false;
        graph.slots.give_back(slot, out.is_ok());
        out
    }

    /// The body of [`Kernels::spread_graph`] on one slot's stream and buffers (arguments checked).
    #[allow(clippy::too_many_arguments)]
    fn spread_in_slot(
        &self,
        gpu: &Gpu,
        s: &mut SpreadScratch,
        graph: &DeviceGraph,
        seeds: Seeds<'_>,
        decay: f32,
        threshold: f32,
        hops32: u32,
        k: Option<usize>,
        download: bool,
        frontier: Frontier,
    ) -> Result<SpreadOutcome, KernelError> {
        const K: &str = "spread_hop";
        let n = graph.n_nodes;
        let n32 = n as u32; // checked by spread_graph
        let sparse_ok = |edges: u64| match frontier {
            Frontier::Dense => false,
            Frontier::Sparse => true,
            Frontier::Auto => edges <= graph.n_edges as u64 / SPARSE_DIV,
        };
        let sm = gpu.info().sm_count.max(1);
        let class_off = class_offsets(graph.n_class);
        let (hub_blocks, dense_blocks) = hop_blocks(graph.n_class);
        let frontier_params = |s: &SpreadScratch, count: u32| SpreadFrontierParams {
            prev: gpu.device_ptr(&s.prev),
            total: gpu.device_ptr(&s.total),
            seeds: gpu.device_ptr(&s.pairs),
            out_ptr: gpu.device_ptr(&graph.out_ptr),
            out_dst: gpu.device_ptr(&graph.out_dst),
            in_ptr: gpu.device_ptr(&graph.in_ptr),
            active: gpu.device_ptr(&s.active),
            mark: gpu.device_ptr(&s.mark),
            touched: gpu.device_ptr(&s.touched),
            counters: gpu.device_ptr(&s.counters),
            n_nodes: n32,
            count,
            class_off,
        };
        let scan_cfg = LaunchConfig {
            grid_dim: (n32.div_ceil(SPREAD_SCAN_BLOCK), 1, 1),
            block_dim: (SPREAD_SCAN_BLOCK, 1, 1),
            shared_mem_bytes: 512,
        };

        // Hop 0: the seeds, and what the host knows of the first frontier. The device zeroes its buffers
        // while the host scans (a dense seed vector overwrites prev and total below). `-0.0` is no seed
        // (`+0.0` after `seed + 0.0`).
        gpu.zero(&mut s.flag)?;
        gpu.zero(&mut s.counters)?;
        gpu.zero(&mut s.prev)?;
        gpu.zero(&mut s.total)?;
        match seeds {
            Seeds::Dense(seeds) => dense_nonzero(seeds, &mut s.seed_ids)?,
            Seeds::List(list) => list_nonzero(list, n, &mut s.seed_ids, &mut s.seed_vals)?,
        }
        let n_seeds = s.seed_ids.len();
        let mut edges: u64 = s
            .seed_ids
            .iter()
            .map(|&v| graph.out_ptr_host[v as usize + 1] - graph.out_ptr_host[v as usize])
            .sum();
        let pairs = n_seeds <= n / SEED_PAIRS_DIV;
        if pairs {
            if n_seeds > 0 {
                if s.pairs_host.is_none() {
                    s.pairs_host = Some(gpu.alloc_pinned(s.pairs.len())?);
                }
                let Some(host) = s.pairs_host.as_mut() else {
                    return Err(shape(K, "seed staging missing"));
                };
                // The stream is idle: every call ends by waiting for it.
                let host = gpu.pinned_write(host)?;
                let (ids, vals) = host.split_at_mut(n_seeds);
                ids.copy_from_slice(&s.seed_ids);
                match seeds {
                    Seeds::Dense(seeds) => {
                        for (val, &v) in vals.iter_mut().zip(&s.seed_ids) {
                            *val = (seeds[v as usize] + 0.0).to_bits();
                        }
                    }
                    Seeds::List(_) => {
                        for (val, &x) in vals.iter_mut().zip(&s.seed_vals) {
                            *val = (x + 0.0).to_bits();
                        }
                    }
                }
                gpu.upload_into(&host[..2 * n_seeds], &mut s.pairs)?;
                let count = n_seeds as u32;
                let cfg = LaunchConfig {
                    grid_dim: (count.div_ceil(GRAPH_BLOCK), 1, 1),
                    block_dim: (GRAPH_BLOCK, 1, 1),
                    shared_mem_bytes: 0,
                };
                // SAFETY: `count` distinct nodes below n, then their values, are in `pairs`; prev and total
                // hold n values, active n, counters SPREAD_COUNTERS; one thread per pair.
                unsafe { gpu.launch(&self.spread_seed, cfg, frontier_params(s, count)) }?;
            }
        } else {
            if s.dense_host.is_none() {
                s.dense_host = Some(gpu.alloc_pinned(n)?);
            }
            let Some(host) = s.dense_host.as_mut() else {
                return Err(shape(K, "seed staging missing"));
            };
            let host = gpu.pinned_write(host)?;
            match seeds {
                Seeds::Dense(seeds) => {
                    for (h, &x) in host[..n].iter_mut().zip(seeds) {
                        *h = x + 0.0;
                    }
                }
                Seeds::List(_) => {
                    host[..n].fill(0.0);
                    for (&v, &x) in s.seed_ids.iter().zip(&s.seed_vals) {
                        host[v as usize] = x + 0.0;
                    }
                }
            }
            gpu.upload_into(&host[..n], &mut s.prev)?;
            gpu.copy_dtod(&s.prev, &mut s.total)?;
        }

        let mut dense_from_now = false;
        let mut sparse_hops = 0;
        for hop in 1..=hops32 {
            let mut active = n_seeds as u64;
            let sparse = if dense_from_now || frontier == Frontier::Dense {
                false
            } else if hop == 1 {
                let sparse = sparse_ok(edges);
                if sparse && !pairs {
                    // SAFETY: one thread per node over prev (n values); counters zero; 512 bytes of shared.
                    unsafe { gpu.launch(&self.spread_frontier, scan_cfg, frontier_params(s, 0)) }?;
                }
                sparse
            } else {
                gpu.zero(&mut s.counters)?;
                // SAFETY: as above.
                unsafe { gpu.launch(&self.spread_frontier, scan_cfg, frontier_params(s, 0)) }?;
                let small = s.small_host.len();
                let host = gpu.pinned_write(&mut s.small_host)?;
                gpu.download_prefix(&s.counters, &mut host[..SPREAD_COUNTERS.min(small)])?;
                gpu.synchronize()?;
                let host = gpu.pinned_write(&mut s.small_host)?;
                active = u64::from(host[SPREAD_CTR_ACTIVE]);
                edges = u64::from(host[SPREAD_CTR_EDGES])
                    | (u64::from(host[SPREAD_CTR_EDGES + 1]) << 32);
                sparse_ok(edges)
            };
            let mut params = SpreadHopParams {
                in_ptr: gpu.device_ptr(&graph.in_ptr),
                in_src: gpu.device_ptr(&graph.in_src),
                in_w: gpu.device_ptr(&graph.in_w),
                prev: gpu.device_ptr(&s.prev),
                next: gpu.device_ptr(&s.next),
                total: gpu.device_ptr(&s.total),
                overflow_hop: gpu.device_ptr(&s.flag),
                nodes: gpu.device_ptr(&graph.nodes),
                spans: graph.spans.as_ref().map_or(0, |sp| gpu.device_ptr(sp)),
                hub_lanes: gpu.device_ptr(&s.hub_lanes),
                hub_tickets: gpu.device_ptr(&s.hub_tickets),
                n_nodes: n32,
                hop,
                decay,
                threshold,
                n_class: graph.n_class,
                class_off,
                counts: 0,
            };
            let hop_cfg = |blocks: usize| -> Result<LaunchConfig, KernelError> {
                Ok(LaunchConfig {
                    grid_dim: (to_u32(K, "blocks", blocks.max(1))?, 1, 1),
                    block_dim: (GRAPH_BLOCK, 1, 1),
                    shared_mem_bytes: 0,
                })
            };
            if sparse {
                sparse_hops += 1;
                // Targets no active source reaches keep next = +0.0.
                gpu.zero(&mut s.next)?;
                if active > 0 && edges > 0 {
                    gpu.zero(&mut s.mark)?;
                    let mark_blocks = active
                        .div_ceil(u64::from(GRAPH_BLOCK / 32))
                        .min(u64::from(sm) * 16);
                    let cfg = LaunchConfig {
                        grid_dim: (mark_blocks as u32, 1, 1),
                        block_dim: (GRAPH_BLOCK, 1, 1),
                        shared_mem_bytes: 0,
                    };
                    // SAFETY: the active sources are listed (seed or frontier kernel) with their count in the
                    // counters; out_ptr/out_dst validated at upload; mark zeroed, ceil(n / 32) words.
                    unsafe { gpu.launch(&self.spread_mark, cfg, frontier_params(s, 0)) }?;
                    // SAFETY: one thread per node over the bitmap; `touched` holds n ids in the graph's class
                    // regions; touched counters zero (zeroed with the counters before this hop's listing).
                    unsafe { gpu.launch(&self.spread_collect, scan_cfg, frontier_params(s, 0)) }?;
                    params.nodes = gpu.device_ptr(&s.touched);
                    params.spans = 0; // the touched lists are not the graph's lists
                    params.counts = gpu.device_ptr(&s.counters)
                        + (recall_kernel_shared::SPREAD_CTR_TOUCHED * 4) as u64;
                    // Touched targets are at most the active out-edges: a bound on the list blocks.
                    let bound = dense_blocks.min(
                        usize::try_from(edges)
                            .unwrap_or(usize::MAX)
                            .saturating_add(4),
                    );
                    let cfg = hop_cfg(bound.min(sm as usize * 8))?;
                    // SAFETY: the lists hold each touched target once, in its class's region; their
                    // lengths are in the counters; the kernel strides over any grid. The hubs: as in
                    // `hop_with_hubs`, for the touched hubs (at most all hubs: one block each, and the
                    // tickets and lane sums have room).
                    unsafe { self.hop_with_hubs(gpu, s, hub_blocks, cfg, params) }?;
                }
            } else {
                if frontier == Frontier::Auto {
                    dense_from_now = true;
                }
                // SAFETY: the graph was validated by `upload_graph`, which also binned every node into exactly
                // one in-degree class; prev, next and total hold n values, the flag one; the grid is exactly
                // the dense hop's three warp classes, as the kernel documents; the hubs as
                // `hop_with_hubs` documents.
                unsafe { self.hop_with_hubs(gpu, s, hub_blocks, hop_cfg(dense_blocks)?, params) }?;
            }
            std::mem::swap(&mut s.prev, &mut s.next);
        }

        self.spread_tail(gpu, s, k, download, sparse_hops)
    }

    /// One hop: `spread_hop` with `cfg` on the handle's stream and, when the graph has hubs, `spread_hub` over
    /// `hub_blocks` blocks (32 per hub of the list) on the slot's hubs' stream beside it. The hubs start after
    /// everything queued so far on the handle's stream, and what is queued there after this waits for them.
    ///
    /// # Safety
    /// `params` and `cfg` as `spread_hop` documents for this hop; the hub tickets are zero (the last block of
    /// each hub resets its own).
    unsafe fn hop_with_hubs(
        &self,
        gpu: &Gpu,
        s: &SpreadScratch,
        hub_blocks: usize,
        cfg: LaunchConfig,
        params: SpreadHopParams,
    ) -> Result<(), KernelError> {
        if hub_blocks > 0 {
            let hub_cfg = LaunchConfig {
                grid_dim: (to_u32("spread_hub", "blocks", hub_blocks)?, 1, 1),
                block_dim: (GRAPH_BLOCK, 1, 1),
                shared_mem_bytes: 4 * SPREAD_HUB_CHUNK * 4,
            };
            record_event(&s.hop_ready, gpu.stream())?;
            stream_wait_event(s.hubs.stream(), &s.hop_ready)?;
            // SAFETY: the caller's contract; one block per hub group with the hub path's shared memory; the
            // buffers are the handle's, complete on its stream before `hop_ready`, and the handle's stream
            // waits for `hubs_done` below before it uses them again.
            unsafe { s.hubs.launch(&self.spread_hub, hub_cfg, params) }?;
            record_event(&s.hubs_done, s.hubs.stream())?;
        }
        // SAFETY: the caller's contract.
        unsafe { gpu.launch(&self.spread_hop, cfg, params) }?;
        if hub_blocks > 0 {
            stream_wait_event(gpu.stream(), &s.hubs_done)?;
        }
        Ok(())
    }

    /// After the last hop: the overflow flag, then (on the download stream) the activations, and the top-k
    /// selection on the handle's stream, all queued before the host waits for anything; then the output
    /// vector is made and filled chunk by chunk, and the call waits once for the flag and the selection. On
    /// overflow the answers are dropped (the selection's keys order any bits, infinities and NaN included).
    fn spread_tail(
        &self,
        gpu: &Gpu,
        s: &mut SpreadScratch,
        k: Option<usize>,
        download: bool,
        sparse_hops: u32,
    ) -> Result<SpreadOutcome, KernelError> {
        const K: &str = "spread_hop";
        let n = s.total.len();
        let flag_at = SPREAD_COUNTERS;
        {
            let host = gpu.pinned_write(&mut s.small_host)?;
            gpu.download_prefix(&s.flag, &mut host[flag_at..flag_at + 1])?;
        }
        let chunk = n.div_ceil(OUT_CHUNKS).max(1);
        if download {
            if s.out_host.is_none() {
                s.out_host = Some(gpu.alloc_pinned_readback(n)?);
            }
            let Some(out) = s.out_host.as_mut() else {
                return Err(shape(K, "readback buffer missing"));
            };
            record_event(&s.hops_done, gpu.stream())?;
            stream_wait_event(&s.copy, &s.hops_done)?;
            // The host reads `out` only after a chunk's fence; a copy still queued from an earlier, failed
            // call runs before these on the same stream.
            let host = gpu.pinned_write(out)?;
            for (i, (part, fence)) in host[..n].chunks_mut(chunk).zip(&s.out_fences).enumerate() {
                gpu.download_range_async_on(&s.copy, &s.total, i * chunk, part)?;
                record_event(fence, &s.copy)?;
            }
        }
        let pending = match k {
            Some(k) => Some(self.begin_topk(
                gpu,
                &s.total,
                None,
                Segments::Dense {
                    n_segments: 1,
                    seg_len: n,
                },
                k,
                true,
            )?),
            None => None,
        };
        let activation = if download {
            receive_chunks(gpu, s.out_host.as_mut(), &s.out_fences, n, chunk)?
        } else {
            Vec::new()
        };
        // The one wait on the handle's stream: the flag and the selection.
        gpu.synchronize()?;
        let word = gpu.pinned_write(&mut s.small_host)?[flag_at];
        let overflow = (word != 0).then_some(u32::MAX - word);
        if overflow.is_some() {
            return Ok(SpreadOutcome {
                activation: Vec::new(),
                top: None,
                overflow,
                sparse_hops,
            });
        }
        let top = pending.map(|p| p.finish()).transpose()?;
        Ok(SpreadOutcome {
            activation,
            top,
            overflow: None,
            sparse_hops,
        })
    }
}

/// The activations, chunk by chunk as each one's download (queued with its fence in `fences`) completes,
/// copied into a new vector made (pages touched) before the first wait.
fn receive_chunks(
    gpu: &Gpu,
    out: Option<&mut PinnedHostSlice<f32>>,
    fences: &[CudaEvent],
    n: usize,
    chunk: usize,
) -> Result<Vec<f32>, KernelError> {
    let Some(out) = out else {
        return Err(shape("spread_hop", "readback buffer missing"));
    };
    let mut activation = touched_vec(n);
    let dst = &mut activation.spare_capacity_mut()[..n];
    let mut written = 0;
    for (d, fence) in dst.chunks_mut(chunk).zip(fences) {
        event_synchronize(fence)?;
        // The chunk's download has completed; later chunks' copies write other parts of the buffer.
        let host = gpu.pinned_write(out)?;
        d.write_copy_of_slice(&host[written..written + d.len()]);
        written += d.len();
    }
    if written != n {
        return Err(shape(
            "spread_hop",
            "activation chunks do not cover the nodes",
        ));
    }
    // SAFETY: the capacity is at least n (`touched_vec`), and the loop above wrote the first `written == n`
    // values, chunk after chunk from position 0.
    unsafe { activation.set_len(n) };
    Ok(activation)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_list_gives_the_dense_scan_its_ids() {
        // Zeros and -0.0 in the list are no seeds; the ids are those the scan finds in the dense vector.
        let list = [
            (0, 0.5f32),
            (3, -0.0),
            (4, 0.0),
            (7, 2.0),
            (63, f32::from_bits(1)),
            (64, 1.0),
            (99, 3.0),
        ];
        let mut dense = vec![0.0f32; 100];
        for &(v, x) in &list {
            dense[v as usize] = x;
        }
        let mut want = vec![9];
        dense_nonzero(&dense, &mut want).unwrap();
        assert_eq!(want, [0, 7, 63, 64, 99]);
        let (mut ids, mut vals) = (vec![9], vec![9.0]);
        list_nonzero(&list, 100, &mut ids, &mut vals).unwrap();
        assert_eq!(ids, want);
        let want_vals: Vec<f32> = want.iter().map(|&v| dense[v as usize]).collect();
        assert_eq!(vals, want_vals);
        list_nonzero(&[], 100, &mut ids, &mut vals).unwrap();
        assert!(ids.is_empty() && vals.is_empty());
        // Out of range, repeated and descending ids are refused (the launcher's contract).
        for bad in [
            &[(100u32, 1.0f32)][..],
            &[(5, 1.0), (5, 2.0)],
            &[(6, 1.0), (5, 2.0)],
        ] {
            let r = list_nonzero(bad, 100, &mut ids, &mut vals);
            assert!(
                matches!(r, Err(KernelError::Shape { .. })),
                "{bad:?}: {r:?}"
            );
        }
    }

    #[test]
    fn touched_vec_reserves_without_length() {
        for n in [0, 1, PAGE_F32, PAGE_F32 + 1, 3 * PAGE_F32 - 1] {
            let v = touched_vec(n);
            assert!(v.is_empty());
            assert!(v.capacity() >= n);
        }
    }

    #[test]
    fn class_offsets_are_the_exclusive_prefix() {
        assert_eq!(class_offsets([2, 3, 5, 7]), [0, 2, 5, 10]);
        assert_eq!(class_offsets([0, 0, 0, 9]), [0, 0, 0, 0]);
    }

    #[test]
    fn dense_blocks_cover_every_class() {
        // 1 hub block, 9 warps -> 2 blocks, 17 pairs of 16 -> 2 blocks, 33 quads -> 2 blocks.
        assert_eq!(hop_blocks([1, 9, 17, 33]), (32, 1 + 1 + 1));
        assert_eq!(hop_blocks([2, 17, 65, 129]), (64, 2 + 2 + 2));
        assert_eq!(hop_blocks([0, 0, 0, 0]), (0, 0));
    }
}
