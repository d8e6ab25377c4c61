//! Activation spreading over a weighted CSR graph (`docs/numerics.md`, "Activation spreading").

use crate::nonzero::push_nonzero;
use crate::simd::{Cpu, SimdLevel};
use crate::topk::{Order, Selector, TopK, write_entries};
use crate::{CpuError, check_finite, in_pool, pool_threads};
use rayon::prelude::*;

/// Lanes of the pull order: position `j` of a target's in-edge list goes to lane `j % 32`.
pub const SPREAD_LANES: usize = 32;

/// A graph ready for spreading: the transpose of a validated CSR graph, in-edges of each target sorted by
/// (source id, original edge position). Build it once, spread from it many times.
#[derive(Clone, Debug)]
pub struct SpreadGraph {
    n: usize,
    in_ptr: Vec<usize>,
    in_src: Vec<u32>,
    in_w: Vec<f32>,
    /// The original out-edges (CSR order) with, per edge, its target and its position in the target's
    /// in-edge list: the push form used when few sources are active.
    out_ptr: Vec<usize>,
    out_dst: Vec<u32>,
    out_pos: Vec<u32>,
    /// The weight of each out-edge (the same value as its in-edge's), so the push form reads weights in
    /// edge order instead of one random `in_ptr` and `in_w` read per edge.
    out_w: Vec<f32>,
}

/// How a hop is computed. Both give the same bits (see `docs/numerics.md`); `Auto` picks per hop.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpreadMode {
    Auto,
    Pull,
    Push,
}

/// Spreading parameters (ranges in `docs/numerics.md`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SpreadParams {
    /// Factor applied to the pulled sum of every hop: `0 < decay <= 1`.
    pub decay: f32,
    /// A hop's activation below this is dropped to zero: finite, `>= 0`.
    pub threshold: f32,
    /// Number of hops, at least 1.
    pub hops: usize,
    /// How many of the most activated nodes to return, `1 <= k <= n_nodes`.
    pub k: usize,
}

/// The result of [`spread`]: the activation of every node (seeds plus all hops), and its top-k.
#[derive(Clone, Debug, PartialEq)]
pub struct Spread {
    pub activation: Vec<f32>,
    pub top: TopK,
}

impl SpreadGraph {
    /// Validate a CSR graph (`indptr` has `n_nodes + 1` entries; edge `e` in `indptr[u] .. indptr[u + 1]`
    /// goes from `u` to `indices[e]` with weight `weights[e]`) and transpose it for the pull order.
    pub fn from_csr(
        indptr: &[usize],
        indices: &[u32],
        weights: &[f32],
    ) -> Result<SpreadGraph, CpuError> {
        if indptr.len() < 2 {
            return Err(CpuError::Empty { what: "graph" });
        }
        let n = indptr.len() - 1;
        if n > u32::MAX as usize {
            return Err(CpuError::TooLarge {
                what: "graph nodes",
                len: n,
                max: u32::MAX as usize,
            });
        }
        if indptr[0] != 0 {
            return Err(CpuError::BadIndptr {
                index: 0,
                reason: "indptr[0] must be 0",
            });
        }
        if let Some(i) = indptr.windows(2).position(|w| w[1] < w[0]) {
            return Err(CpuError::BadIndptr {
                index: i + 1,
                reason: "indptr decreases",
            });
        }
        if indptr[n] != indices.len() {
            return Err(CpuError::BadIndptr {
                index: n,
                reason: "the last entry must equal the number of edges",
            });
        }
        if weights.len() != indices.len() {
            return Err(CpuError::LengthMismatch {
                what: "edge weights",
                expected: indices.len(),
                got: weights.len(),
            });
        }
        if let Some((index, id)) = indices.iter().enumerate().find(|(_, c)| **c as usize >= n) {
            return Err(CpuError::IdOutOfRange {
                what: "column ids",
                index,
                id: *id as u64,
                n,
            });
        }
        check_finite("edge weights", weights)?;
        if let Some(index) = weights.iter().position(|w| *w < 0.0) {
            return Err(CpuError::Negative {
                what: "edge weights",
                index,
            });
        }
        // Counting sort by target; sources are visited ascending and each source's edges in position
        // order, so every in-list comes out sorted by (source, original position).
        let mut in_ptr = vec![0usize; n + 1];
        for c in indices {
            in_ptr[*c as usize + 1] += 1;
        }
        for i in 0..n {
            in_ptr[i + 1] += in_ptr[i];
        }
        let mut cursor = in_ptr[..n].to_vec();
        let mut in_src = vec![0u32; indices.len()];
        let mut in_w = vec![0f32; indices.len()];
        let mut out_pos = vec![0u32; indices.len()];
        for u in 0..n {
            for e in indptr[u]..indptr[u + 1] {
                let v = indices[e] as usize;
                in_src[cursor[v]] = u as u32;
                in_w[cursor[v]] = weights[e];
                out_pos[e] = (cursor[v] - in_ptr[v]) as u32;
                cursor[v] += 1;
            }
        }
        Ok(SpreadGraph {
            n,
            in_ptr,
            in_src,
            in_w,
            out_ptr: indptr.to_vec(),
            out_dst: indices.to_vec(),
            out_pos,
            out_w: weights.to_vec(),
        })
    }

    /// Number of nodes.
    pub fn n_nodes(&self) -> usize {
        self.n
    }

    /// Number of edges.
    pub fn n_edges(&self) -> usize {
        self.in_src.len()
    }

    /// The whole pull-order (transposed) graph: `(in_ptr, in_src, in_w)`, target `v`'s in-edges being
    /// `in_ptr[v] .. in_ptr[v + 1]` (what a GPU backend uploads).
    pub fn pull_arrays(&self) -> (&[usize], &[u32], &[f32]) {
        (&self.in_ptr, &self.in_src, &self.in_w)
    }

    /// The original (push-order) out-edges: `(out_ptr, out_dst)`, source `u`'s targets being
    /// `out_dst[out_ptr[u] .. out_ptr[u + 1]]` (what a GPU backend uploads for sparse frontiers).
    pub fn push_targets(&self) -> (&[usize], &[u32]) {
        (&self.out_ptr, &self.out_dst)
    }

    /// The in-edges of `v` in pull order: (source ids, weights).
    ///
    /// # Panics
    /// If `v >= self.n_nodes()`, like slice indexing.
    pub fn in_edges(&self, v: usize) -> (&[u32], &[f32]) {
        let (a, b) = (self.in_ptr[v], self.in_ptr[v + 1]);
        (&self.in_src[a..b], &self.in_w[a..b])
    }

    /// The pulled sum `s` of target `v` in the documented lane order.
    #[inline(always)]
    fn pull(&self, v: usize, prev: &[f32]) -> f32 {
        let (src, w) = self.in_edges(v);
        let mut lane = [0.0f32; SPREAD_LANES];
        if src.len() <= SPREAD_LANES {
            // One term per lane: lane[j] = fma(w, a, +0.0). Lanes past the degree hold +0.0, and adding
            // +0.0 to a non-negative value is exact, so the tree skips them.
            for ((l, s), w) in lane.iter_mut().zip(src).zip(w) {
                *l = w.mul_add(prev[*s as usize], 0.0);
            }
            return tree_prefix(&mut lane, src.len());
        }
        for (cs, cw) in src.chunks(SPREAD_LANES).zip(w.chunks(SPREAD_LANES)) {
            for ((l, s), w) in lane.iter_mut().zip(cs).zip(cw) {
                *l = w.mul_add(prev[*s as usize], *l);
            }
        }
        tree(&mut lane)
    }
}

/// [`tree`] when only lanes `0 .. m` can be non-zero (the rest are `+0.0` and every value is `>= +0.0`):
/// the same result with the identity adds left out.
#[inline(always)]
fn tree_prefix(lane: &mut [f32; SPREAD_LANES], mut m: usize) -> f32 {
    let mut off = SPREAD_LANES / 2;
    while off > 0 {
        if m > off {
            for l in 0..m - off {
                lane[l] += lane[l + off];
            }
            m = off;
        }
        off /= 2;
    }
    lane[0]
}

/// The fixed tree: for off in 16, 8, 4, 2, 1: `lane[l] = lane[l] + lane[l + off]` for l < off.
#[inline(always)]
pub(crate) fn tree(lane: &mut [f32; SPREAD_LANES]) -> f32 {
    let mut off = SPREAD_LANES / 2;
    while off > 0 {
        for l in 0..off {
            lane[l] += lane[l + off];
        }
        off /= 2;
    }
    lane[0]
}

/// Spread `seeds` (one finite, non-negative value per node) over `graph` for `params.hops` hops.
pub fn spread(
    graph: &SpreadGraph,
    seeds: &[f32],
    params: &SpreadParams,
) -> Result<Spread, CpuError> {
    Cpu::new().spread(graph, seeds, params)
}

/// Which code computes a target's pulled sum. Every kind follows the same order (lane `j % 32`, one
/// `fma` per term, the fixed tree) and gives the same bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PullKind {
    /// Plain Rust: on a baseline x86-64 build every `mul_add` is a call to libm's `fmaf`.
    Plain,
    /// The plain loop compiled with AVX2 and FMA: every `mul_add` is one `vfmadd`.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    Fma,
    /// AVX-512 for targets with more than 32 in-edges (the plain loop with FMA for the others): the 32
    /// lanes are two 16-wide registers, sources gathered 16 at a time (`vgatherdps`), tails masked; the
    /// tree's first step adds the two registers, the rest halves the vector.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    Avx512,
}

/// The hop loops of one call: which pull code runs, and how many rayon tasks a hop is cut into.
#[derive(Clone, Copy)]
struct Hop {
    kind: PullKind,
    /// The SIMD level of a pushed hop's scan for its active sources ([`push_nonzero`]).
    level: SimdLevel,
    threads: usize,
    /// Work (as [`Hop::blocks`] and [`push_hop`] count it) from which a hop is cut into tasks: [`HOP_PAR_MIN`],
    /// or 0 in tests that make small graphs take the parallel paths.
    par_min: usize,
    /// The least work of one task: [`MIN_TASK_COST`], or less in tests, so that a small graph is cut into as many
    /// tasks as the thread count allows.
    min_task: usize,
}

/// Work (in-edges plus `NODE_COST` per target, for a pushed hop `PUSH_EDGE_COST` per active out-edge plus one per
/// node) from which a hop is cut into rayon tasks. A pulled hop costs about 1.7 ns per unit on one core (the
/// calibration probe's graphs, 8 out-edges per node, on the 16-vCPU Xeon; 1.2 ns on the 2-core development VM),
/// so this is about 0.3 to 0.45 ms of one core's work, at least 4 tasks of `MIN_TASK_COST`; a round trip into the
/// pool whose threads sleep takes 7 us (median, development VM). It was `PAR_MIN_WORK` (2^21, 8 times this) until
/// session 36: graphs of up to 170 K nodes ran every hop on one core, 6.2 ms a call at 151 K nodes on the Xeon.
const HOP_PAR_MIN: usize = 1 << 18;
/// Nodes from which the passes over every node outside the hops (the activations' first copies, the first hop's
/// statistics, a pushed hop's list of active sources) run in parallel: about 1.3 ns a node on one core
/// (development VM), so 85 us at this size. It was 2^17 until session 36.
const SETUP_PAR_MIN: usize = 1 << 16;
/// The smallest share of a hop one rayon task gets (edges plus `NODE_COST` per node): about 80 to 110 us.
const MIN_TASK_COST: usize = 1 << 16;
/// A target costs about this many edges of work besides its edges (offsets, tree, write, total).
const NODE_COST: usize = 4;
/// A pushed hop's cost of one active out-edge in a pull's units: 21 ns an active edge (its term written to a
/// bucket, then added into its target's lane) against 1.75 ns an edge pulled, on one core of the development VM
/// (150 K nodes, 72 K active edges).
const PUSH_EDGE_COST: usize = 12;

/// What one pull or total-update pass learned about the new activations: for the next hop's choice of
/// form, and for the overflow rule.
#[derive(Clone, Copy, Default)]
struct HopStats {
    /// Some activation or total became infinite.
    overflow: bool,
    /// Out-edges of the nodes whose new activation is not zero.
    active_edges: usize,
    /// Some new activation is not zero.
    any_active: bool,
}

impl HopStats {
    fn join(self, o: HopStats) -> HopStats {
        HopStats {
            overflow: self.overflow | o.overflow,
            active_edges: self.active_edges + o.active_edges,
            any_active: self.any_active | o.any_active,
        }
    }
}

impl Hop {
    fn new(level: SimdLevel, graph: &SpreadGraph) -> Hop {
        #[cfg(target_arch = "x86_64")]
        let kind = if level >= SimdLevel::Avx512 && graph.n <= i32::MAX as usize {
            // The gather takes signed 32-bit indices: every source id must fit.
            PullKind::Avx512
        } else if level >= SimdLevel::Avx2 {
            PullKind::Fma
        } else {
            PullKind::Plain
        };
        #[cfg(not(target_arch = "x86_64"))]
        let kind = {
            let _ = (level, graph);
            PullKind::Plain
        };
        Hop {
            kind,
            level,
            threads: pool_threads().max(1),
            par_min: HOP_PAR_MIN,
            min_task: MIN_TASK_COST,
        }
    }

    /// Block boundaries over the targets `0 .. n` with about equal work (in-edges plus `NODE_COST` per
    /// target) per block: a power-law graph puts most in-edges on a few low ids, so equal node counts
    /// would leave one task most of the hop.
    fn blocks(self, graph: &SpreadGraph) -> Vec<usize> {
        let n = graph.n;
        let cost = |v: usize| graph.in_ptr[v] + NODE_COST * v;
        let total = cost(n);
        let parts = if total < self.par_min || self.threads == 1 {
            1
        } else {
            (total / self.min_task.max(1)).clamp(2, self.threads * 16)
        };
        balanced_bounds(n, parts, cost)
    }

    /// One pull hop over every target: `next[v]` from `prev`, `total[v] += next[v]`, in parallel blocks
    /// of targets (each task owns its slices of `next` and `total`: no atomics, no shared writes).
    fn pull(
        self,
        graph: &SpreadGraph,
        prev: &[f32],
        p: (f32, f32),
        next: &mut [f32],
        total: &mut [f32],
    ) -> HopStats {
        self.pull_with(graph, prev, None, p, next, total)
    }

    /// [`Hop::pull`] where `active_edges` of the in-edges have a source whose activation is not zero: at the
    /// AVX-512 level, when that is at most half of them, the pull reads only those sources' activations (a bit
    /// per node says which are not zero; [`avx512::live_bits`]), so that the misses of the others' reads are
    /// not paid. A skipped read stands for `+0.0`, the value it would have read (every activation is `>= +0.0`),
    /// so the bits are the same.
    fn pull_sparse(
        self,
        graph: &SpreadGraph,
        prev: &[f32],
        active_edges: usize,
        p: (f32, f32),
        next: &mut [f32],
        total: &mut [f32],
    ) -> HopStats {
        #[cfg(target_arch = "x86_64")]
        if self.kind == PullKind::Avx512 && active_edges <= graph.n_edges() / 2 {
            let par = self.threads > 1 && prev.len() >= SETUP_PAR_MIN;
            // SAFETY: `Avx512` is chosen only at the `Avx512` level (AVX-512F reported).
            let live = unsafe { avx512::live_bits(prev, par) };
            return self.pull_with(graph, prev, Some(&live), p, next, total);
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = active_edges;
        self.pull(graph, prev, p, next, total)
    }

    /// [`Hop::pull`], reading at the AVX-512 level only the activations `live` marks (see [`Hop::pull_sparse`];
    /// `live` has a bit per node, set for each activation that is not zero).
    fn pull_with(
        self,
        graph: &SpreadGraph,
        prev: &[f32],
        live: Option<&[u32]>,
        p: (f32, f32),
        next: &mut [f32],
        total: &mut [f32],
    ) -> HopStats {
        over_ranges(&self.blocks(graph), next, total, |v0, n, t| {
            self.pull_block(graph, prev, live, p, v0, n, t)
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn pull_block(
        self,
        graph: &SpreadGraph,
        prev: &[f32],
        live: Option<&[u32]>,
        p: (f32, f32),
        v0: usize,
        next: &mut [f32],
        total: &mut [f32],
    ) -> HopStats {
        #[cfg(not(target_arch = "x86_64"))]
        let _ = live;
        match self.kind {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `Avx512` is chosen only at the `Avx512` level (the CPU reports AVX-512F/VL, AVX2
            // and FMA) and only when every node id fits in an i32; `prev` has one value per node and the
            // graph's column ids were checked `< n` when it was built; `live`, where given, is
            // `live_bits(prev)`: a word per 32 nodes.
            PullKind::Avx512 => unsafe { pull_block_avx512(graph, prev, live, p, v0, next, total) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `Fma` is chosen only at the `Avx2` level or above (AVX2 and FMA reported).
            PullKind::Fma => unsafe { pull_block_fma(graph, prev, p, v0, next, total) },
            _ => pull_block_with(graph, prev, p, v0, next, total, SpreadGraph::pull),
        }
    }
}

/// The pull of targets `v0 .. v0 + next.len()` with `sum` computing one target's pulled sum, fused with
/// the hop's tail: decay, threshold, `total += next`, the overflow test and the next hop's statistics.
#[inline(always)]
fn pull_block_with(
    graph: &SpreadGraph,
    prev: &[f32],
    (decay, threshold): (f32, f32),
    v0: usize,
    next: &mut [f32],
    total: &mut [f32],
    sum: impl Fn(&SpreadGraph, usize, &[f32]) -> f32,
) -> HopStats {
    let mut st = HopStats::default();
    for (i, (o, t)) in next.iter_mut().zip(total.iter_mut()).enumerate() {
        let v = v0 + i;
        finish_target(
            graph,
            v,
            sum(graph, v, prev),
            (decay, threshold),
            o,
            t,
            &mut st,
        );
    }
    st
}

/// The end of target `v`'s hop from its pulled sum `s` (either form): decay, threshold, `next` (`o`) and
/// `total` (`t`), the overflow test and the next hop's statistics.
#[inline(always)]
fn finish_target(
    graph: &SpreadGraph,
    v: usize,
    s: f32,
    (decay, threshold): (f32, f32),
    o: &mut f32,
    t: &mut f32,
    st: &mut HopStats,
) {
    let x = s * decay;
    let a = if x < threshold { 0.0 } else { x };
    *o = a;
    *t += a;
    st.overflow |= a.is_infinite() | t.is_infinite();
    // Without a branch on the activation (active and inactive targets alternate at random).
    let on = a != 0.0;
    st.any_active |= on;
    st.active_edges += (graph.out_ptr[v + 1] - graph.out_ptr[v]) * usize::from(on);
}

/// Targets of at most this many in-edges (one step of the 32 lanes: most targets of a power-law graph) are
/// pulled in runs ([`pull_runs`]).
#[cfg(target_arch = "x86_64")]
const SHORT_MAX_DEGREE: usize = SPREAD_LANES;

/// The most in-edges of a run (its gathered activations: 16 KiB, within the L1).
#[cfg(target_arch = "x86_64")]
const RUN_EDGES: usize = 4096;

/// The pull of targets `v0 .. v0 + next.len()` with short targets in runs, in two passes: first every
/// in-edge's source activation is read into a buffer (`gather(src, w, out)`: one flat stream over the run's
/// edges, no branch between targets, so many cache misses are in flight at once; it may prefetch `w`, which the
/// second pass reads), then each target's sum from its weights and the buffer (`short(w, a)`). Until session 29
/// each short target ran its own loop, whose exit was mispredicted at every target, and only a few misses were
/// in flight. Larger targets are summed by `long(v)`. Each form follows the documented order, so every level
/// gives the same bits.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn pull_runs(
    graph: &SpreadGraph,
    p: (f32, f32),
    v0: usize,
    next: &mut [f32],
    total: &mut [f32],
    gather: impl Fn(&[u32], &[f32], &mut [f32]),
    short: impl Fn(&[f32], &[f32]) -> f32,
    long: impl Fn(usize) -> f32,
) -> HopStats {
    let mut st = HopStats::default();
    let ptr = &graph.in_ptr[v0..=v0 + next.len()];
    let mut buf = vec![0.0f32; RUN_EDGES];
    let mut i = 0;
    while i < next.len() {
        let a = ptr[i];
        if ptr[i + 1] - a > SHORT_MAX_DEGREE {
            let s = long(v0 + i);
            finish_target(graph, v0 + i, s, p, &mut next[i], &mut total[i], &mut st);
            i += 1;
            continue;
        }
        // The run: targets i .. j, each short, their in-edges a .. ptr[j] fitting the buffer.
        let mut j = i + 1;
        while j < next.len()
            && ptr[j + 1] - ptr[j] <= SHORT_MAX_DEGREE
            && ptr[j + 1] - a <= RUN_EDGES
        {
            j += 1;
        }
        let e = ptr[j] - a;
        gather(
            &graph.in_src[a..a + e],
            &graph.in_w[a..a + e],
            &mut buf[..e],
        );
        for t in i..j {
            let (ta, tb) = (ptr[t] - a, ptr[t + 1] - a);
            let s = short(&graph.in_w[a + ta..a + tb], &buf[ta..tb]);
            finish_target(graph, v0 + t, s, p, &mut next[t], &mut total[t], &mut st);
        }
        i = j;
    }
    st
}

/// The pull of a block at the AVX2 level: [`pull_runs`] with scalar loads of the run's activations (the weights
/// prefetched a line per 16 edges), each short target's lanes `fma(w, a, +0.0)` and the tree over the lanes
/// that can be non-zero; larger targets by the plain loop (one `vfmadd` a term).
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn pull_block_fma(
    graph: &SpreadGraph,
    prev: &[f32],
    p: (f32, f32),
    v0: usize,
    next: &mut [f32],
    total: &mut [f32],
) -> HopStats {
    use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
    let gather = |src: &[u32], w: &[f32], out: &mut [f32]| {
        for (k, (o, s)) in out.iter_mut().zip(src).enumerate() {
            if k % 16 == 0 {
                // A hint: it never faults, and the address is never dereferenced.
                _mm_prefetch::<_MM_HINT_T0>(w.as_ptr().wrapping_add(k).cast::<i8>());
            }
            *o = prev[*s as usize];
        }
    };
    let short = |w: &[f32], a: &[f32]| {
        let mut lane = [0.0f32; SPREAD_LANES];
        for ((l, w), a) in lane.iter_mut().zip(w).zip(a) {
            *l = w.mul_add(*a, 0.0);
        }
        tree_prefix(&mut lane, w.len())
    };
    pull_runs(graph, p, v0, next, total, gather, short, |v| {
        graph.pull(v, prev)
    })
}

/// The pull of a block at the AVX-512 level: [`pull_runs`] with 16-wide gathers ([`avx512::gather`]) and the
/// lanes in two registers ([`avx512::short_sum`]); larger targets gather their own in-edges
/// ([`avx512::pull_sum`]).
///
/// # Safety
/// The CPU must support AVX-512F, AVX-512VL, AVX2 and FMA; every node id must be at most `i32::MAX`;
/// `prev.len() == graph.n_nodes()`; `live`, where given, has at least `prev.len().div_ceil(32)` words.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
unsafe fn pull_block_avx512(
    graph: &SpreadGraph,
    prev: &[f32],
    live: Option<&[u32]>,
    p: (f32, f32),
    v0: usize,
    next: &mut [f32],
    total: &mut [f32],
) -> HopStats {
    // Null: every activation is read.
    let live = live.map_or(std::ptr::null(), |l| l.as_ptr().cast::<i32>());
    let gather = |src: &[u32], w: &[f32], out: &mut [f32]| {
        // SAFETY: the caller's contract (features, ids < n == prev.len(), ids <= i32::MAX, `live` null or a
        // word per 32 nodes); `pull_runs` passes `out.len() == src.len() == w.len()`.
        unsafe { avx512::gather(src, w, prev, live, out) }
    };
    let short = |w: &[f32], a: &[f32]| {
        // SAFETY: AVX-512F (the caller's contract); `pull_runs` passes a short target: at most 32 values.
        unsafe { avx512::short_sum(w, a) }
    };
    let long = |v: usize| {
        let (a, b) = (graph.in_ptr[v], graph.in_ptr[v + 1]);
        // SAFETY: the caller's contract; `a .. b` lies inside the edge arrays.
        unsafe { avx512::pull_sum(&graph.in_src[a..b], &graph.in_w[a..b], prev, live) }
    };
    pull_runs(graph, p, v0, next, total, gather, short, long)
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    /// A bit per node, set where the activation is not zero: word `i` holds nodes `32 i .. 32 i + 32`, node
    /// `32 i + b` at bit `b` (the words of a whole graph: an eighth of a byte a node, in the L2). In parallel
    /// pieces on recall's pool when `par`.
    ///
    /// # Safety
    /// The CPU must support AVX-512F.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn live_bits(prev: &[f32], par: bool) -> Vec<u32> {
        #[target_feature(enable = "avx512f")]
        fn words(a: &[f32], out: &mut [u32]) {
            let zero = _mm512_setzero_ps();
            let (full, rest) = a.split_at(a.len() & !31);
            for (c, o) in full.chunks_exact(32).zip(out.iter_mut()) {
                // SAFETY: `c` holds 32 values: the loads read `c[0 .. 16]` and `c[16 .. 32]`.
                let (lo, hi) = unsafe {
                    (
                        _mm512_cmpneq_ps_mask(_mm512_loadu_ps(c.as_ptr()), zero),
                        _mm512_cmpneq_ps_mask(_mm512_loadu_ps(c.as_ptr().add(16)), zero),
                    )
                };
                *o = u32::from(lo) | (u32::from(hi) << 16);
            }
            if let Some(o) = out.get_mut(full.len() / 32) {
                *o = rest
                    .iter()
                    .enumerate()
                    .fold(0, |w, (b, x)| w | (u32::from(*x != 0.0) << b));
            }
        }
        let mut live = vec![0u32; prev.len().div_ceil(32)];
        if par {
            use rayon::prelude::*;
            const PIECE: usize = 1 << 14;
            crate::in_pool(|| {
                prev.par_chunks(PIECE)
                    .zip(live.par_chunks_mut(PIECE / 32))
                    .for_each(|(a, o)| words(a, o))
            });
        } else {
            words(prev, &mut live);
        }
        live
    }

    /// Of the lanes `m` of `idx` (node ids), those whose bit in `live` is set.
    ///
    /// # Safety
    /// AVX-512F; `live` holds a word per 32 nodes, for every id in a lane of `m`.
    #[inline(always)]
    unsafe fn live_lanes(idx: __m512i, m: __mmask16, live: *const i32) -> __mmask16 {
        // SAFETY: each gathered word is `live[id / 32]` for an id of a lane of `m`: in bounds by the contract.
        unsafe {
            let word = _mm512_mask_i32gather_epi32::<4>(
                _mm512_setzero_si512(),
                m,
                _mm512_srli_epi32::<5>(idx),
                live,
            );
            let bit = _mm512_srlv_epi32(word, _mm512_and_si512(idx, _mm512_set1_epi32(31)));
            _mm512_mask_test_epi32_mask(m, bit, _mm512_set1_epi32(1))
        }
    }

    /// The activations `prev[idx]` of the lanes `m` (`+0.0` in the others); with `live` not null, only those
    /// whose bit is set are read (the others are `+0.0`, as `live` says they are).
    ///
    /// # Safety
    /// AVX-512F; every id in a lane of `m` is below `prev`'s length (`base` its start); `live` null or a word
    /// per 32 nodes.
    #[inline(always)]
    unsafe fn acts(idx: __m512i, m: __mmask16, base: *const f32, live: *const i32) -> __m512 {
        // SAFETY: the gathers read `prev[id]` (and `live[id / 32]`) for ids of lanes of `m`: in bounds by the
        // contract.
        unsafe {
            if live.is_null() {
                if m == 0xffff {
                    _mm512_i32gather_ps::<4>(idx, base)
                } else {
                    _mm512_mask_i32gather_ps::<4>(_mm512_setzero_ps(), m, idx, base)
                }
            } else {
                let m = live_lanes(idx, m, live);
                _mm512_mask_i32gather_ps::<4>(_mm512_setzero_ps(), m, idx, base)
            }
        }
    }

    /// `out[e] = prev[src[e]]`, 16 at a time (`vgatherdps`), the tail masked; with `live` not null, only the
    /// activations it marks are read, the others written as `+0.0`.
    ///
    /// # Safety
    /// `out.len() == src.len()`; every `src[e] < prev.len()` and `<= i32::MAX`; `live` null or at least
    /// `prev.len().div_ceil(32)` words.
    #[inline]
    #[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
    pub(super) unsafe fn gather(
        src: &[u32],
        w: &[f32],
        prev: &[f32],
        live: *const i32,
        out: &mut [f32],
    ) {
        let n = src.len().min(out.len());
        let (sp, op, base) = (src.as_ptr().cast::<i32>(), out.as_mut_ptr(), prev.as_ptr());
        let wp = w.as_ptr().cast::<i8>();
        let mut e = 0;
        while e + 16 <= n {
            // The weights the second pass reads, a line per step, and the ids a kilobyte ahead (hints: they
            // never fault, and the addresses are never dereferenced).
            _mm_prefetch::<_MM_HINT_T0>(wp.wrapping_add(4 * e));
            _mm_prefetch::<_MM_HINT_T0>(sp.cast::<i8>().wrapping_add(4 * e + 1024));
            // SAFETY: `e + 16 <= n`: `src[e .. e + 16]` and `out[e .. e + 16]`; the gathers read
            // `prev[src[..]]` (and `live`), in bounds by the contract.
            unsafe {
                let idx = _mm512_loadu_epi32(sp.add(e));
                _mm512_storeu_ps(op.add(e), acts(idx, 0xffff, base, live));
            }
            e += 16;
        }
        if e < n {
            let m = ((1u32 << (n - e)) - 1) as u16;
            // SAFETY: masked: only `e .. n` of `src` and `out` are touched (masked-off elements are neither
            // read nor written); gathers as above.
            unsafe {
                let idx = _mm512_maskz_loadu_epi32(m, sp.add(e));
                _mm512_mask_storeu_ps(op.add(e), m, acts(idx, m, base, live));
            }
        }
    }

    /// The pulled sum of a target of at most 32 in-edges from its weights and gathered activations: lane
    /// `l` is `fma(w[l], a[l], +0.0)` (`+0.0` past the degree), then the whole fixed tree.
    ///
    /// # Safety
    /// The CPU must support AVX-512F; `w.len() == a.len() <= 32`.
    #[inline]
    #[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
    pub(super) unsafe fn short_sum(w: &[f32], a: &[f32]) -> f32 {
        let d = w.len().min(a.len()).min(32);
        let m = (((1u64 << d) - 1) & 0xffff_ffff) as u32;
        let (m0, m1) = (m as u16, (m >> 16) as u16);
        let zero = _mm512_setzero_ps();
        // SAFETY: masked loads touch only `w[.. d]` and `a[.. d]` (masked-off elements are not read).
        let (l0, l1) = unsafe {
            (
                _mm512_fmadd_ps(
                    _mm512_maskz_loadu_ps(m0, w.as_ptr()),
                    _mm512_maskz_loadu_ps(m0, a.as_ptr()),
                    zero,
                ),
                _mm512_fmadd_ps(
                    _mm512_maskz_loadu_ps(m1, w.as_ptr().wrapping_add(16)),
                    _mm512_maskz_loadu_ps(m1, a.as_ptr().wrapping_add(16)),
                    zero,
                ),
            )
        };
        tree2(l0, l1)
    }

    /// The fixed tree over 32 lanes held as two registers: off 16 (the two registers), 8, 4, 2, 1.
    #[inline]
    #[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
    fn tree2(acc0: __m512, acc1: __m512) -> f32 {
        let s16 = _mm512_add_ps(acc0, acc1);
        let lo8 = _mm512_castps512_ps256(s16);
        let hi8 = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(s16)));
        let s8 = _mm256_add_ps(lo8, hi8);
        let s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps::<1>(s8));
        let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
        let s1 = _mm_add_ss(s2, _mm_shuffle_ps::<0b01>(s2, s2));
        _mm_cvtss_f32(s1)
    }

    /// The pulled sum of one target (`docs/numerics.md`, "Activation spreading"): lane `l` of the order
    /// is lane `l` of `acc0` (`l < 16`) or lane `l - 16` of `acc1`; positions `32c .. 32c + 32` are one
    /// step of both; a tail is masked (its idle lanes keep their value: `mask3_fmadd`).
    ///
    /// With `live` not null, only the activations it marks are read (the others are `+0.0`).
    ///
    /// # Safety
    /// `src.len() == w.len()`; every `src[j] < prev.len()` and `<= i32::MAX`; `live` null or at least
    /// `prev.len().div_ceil(32)` words.
    #[inline]
    #[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
    pub(super) unsafe fn pull_sum(src: &[u32], w: &[f32], prev: &[f32], live: *const i32) -> f32 {
        let deg = src.len();
        let (sp, wp, base) = (src.as_ptr().cast::<i32>(), w.as_ptr(), prev.as_ptr());
        let zero = _mm512_setzero_ps();
        let (mut acc0, mut acc1) = (zero, zero);
        let full = deg & !31;
        let mut j = 0;
        while j < full {
            // The ids and weights a kilobyte ahead (hints, as in `gather`).
            for k in [0, 64] {
                _mm_prefetch::<_MM_HINT_T0>(sp.cast::<i8>().wrapping_add(4 * j + 1024 + k));
                _mm_prefetch::<_MM_HINT_T0>(wp.cast::<i8>().wrapping_add(4 * j + 1024 + k));
            }
            // SAFETY: `j + 32 <= full <= deg`: the loads read `src[j .. j + 32]` and `w[j .. j + 32]`;
            // the gathers read `prev[src[j]]`, in bounds by the contract.
            unsafe {
                let i0 = _mm512_loadu_epi32(sp.add(j));
                let i1 = _mm512_loadu_epi32(sp.add(j + 16));
                let a0 = acts(i0, 0xffff, base, live);
                let a1 = acts(i1, 0xffff, base, live);
                acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(wp.add(j)), a0, acc0);
                acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(wp.add(j + 16)), a1, acc1);
            }
            j += 32;
        }
        let rem = deg - full;
        if rem > 0 {
            let m0: __mmask16 = if rem >= 16 {
                0xffff
            } else {
                ((1u32 << rem) - 1) as u16
            };
            // SAFETY: `full < deg`; the masked loads touch only `full .. full + min(rem, 16)`, inside
            // `src` and `w` (masked-off elements are not read); gathers as above.
            unsafe {
                let i0 = _mm512_maskz_loadu_epi32(m0, sp.add(full));
                let a0 = acts(i0, m0, base, live);
                let w0 = _mm512_maskz_loadu_ps(m0, wp.add(full));
                acc0 = _mm512_mask3_fmadd_ps(w0, a0, acc0, m0);
            }
            if rem > 16 {
                let m1 = ((1u32 << (rem - 16)) - 1) as u16;
                // SAFETY: `full + 16 < deg`; the masked loads touch only `full + 16 .. deg`.
                unsafe {
                    let i1 = _mm512_maskz_loadu_epi32(m1, sp.add(full + 16));
                    let a1 = acts(i1, m1, base, live);
                    let w1 = _mm512_maskz_loadu_ps(m1, wp.add(full + 16));
                    acc1 = _mm512_mask3_fmadd_ps(w1, a1, acc1, m1);
                }
            }
        }
        // The tree: off 16 (the two registers), 8, 4, 2, 1; each step `lane[l] + lane[l + off]`.
        tree2(acc0, acc1)
    }
}

/// The push form of one hop: only active sources, ascending, each out-edge adding into lane `pos % 32`
/// of its target. In-lists are sorted by (source, position), so every lane receives its terms in the
/// same ascending order as the pull form, and skipped (inactive) terms are exact identities.
///
/// Two passes, so that no task reads another's edges and every target's lanes are found in a table that
/// stays in the L1:
/// 1. The active sources are cut into chunks (contiguous, ascending, about equal out-edges; one rayon task
///    each). A chunk writes its out-edges' terms `(target, lane, weight, activation)` grouped by the target's
///    bucket ([`PUSH_BUCKET_SHIFT`]: 4,096 consecutive targets), in edge order within a bucket.
/// 2. Groups of consecutive buckets (about equal terms; one task each) take, bucket by bucket, the terms of
///    every chunk in chunk order, so each target meets its terms in ascending source order, and add each into
///    its lane; then every touched target ends its hop as the pull form ends it.
fn push_hop(
    hop: Hop,
    graph: &SpreadGraph,
    prev: &[f32],
    active_edges: usize,
    p: (f32, f32),
    next: &mut [f32],
    total: &mut [f32],
) -> HopStats {
    let n = graph.n;
    // The active sources in ascending order (rayon's collect keeps it).
    let active: Vec<u32> = if hop.threads > 1 && n >= SETUP_PAR_MIN {
        in_pool(|| {
            prev.par_chunks(SCAN_CHUNK)
                .enumerate()
                .flat_map_iter(|(i, a)| {
                    let mut ids = Vec::new();
                    // Positions below `n <= u32::MAX` (`SpreadGraph`'s ids are u32).
                    push_nonzero(hop.level, a, (i * SCAN_CHUNK) as u32, &mut ids);
                    ids
                })
                .collect()
        })
    } else {
        let mut ids = Vec::new();
        push_nonzero(hop.level, prev, 0, &mut ids);
        ids
    };
    let n_buckets = n.div_ceil(1 << PUSH_BUCKET_SHIFT);
    // Both passes cost by the active edges, and the second also by the nodes (it clears `next` and walks every
    // bucket).
    let cost = PUSH_EDGE_COST * active_edges + n;
    let parts = if hop.threads > 1 && cost >= hop.par_min {
        (cost / hop.min_task.max(1)).clamp(2, hop.threads * 4)
    } else {
        1
    };
    // Pass 1: chunks of the active sources, about equal out-edges each.
    let cum: Vec<usize> = std::iter::once(0)
        .chain(active.iter().scan(0, |sum, &u| {
            *sum += graph.out_ptr[u as usize + 1] - graph.out_ptr[u as usize];
            Some(*sum)
        }))
        .collect();
    let chunk_bounds = balanced_bounds(active.len(), parts, |i| cum[i]);
    let chunks: Vec<PushChunk> = if chunk_bounds.len() > 2 {
        in_pool(|| {
            chunk_bounds
                .par_windows(2)
                .map(|w| push_chunk(graph, prev, &active[w[0]..w[1]], n_buckets))
                .collect()
        })
    } else {
        vec![push_chunk(graph, prev, &active, n_buckets)]
    };
    // Pass 2: groups of buckets, about equal terms each, as target ranges.
    // Terms before bucket b, over every chunk.
    let bucket_cum: Vec<usize> = (0..=n_buckets)
        .map(|b| chunks.iter().map(|c| c.starts[b]).sum())
        .collect();
    // A term costs pass 2 about as much as 8 of its nodes (a lane's add against a cleared `next`).
    let groups = balanced_bounds(n_buckets, parts, |b| {
        8 * bucket_cum[b] + (b << PUSH_BUCKET_SHIFT).min(n)
    });
    let bounds: Vec<usize> = groups
        .iter()
        .map(|&b| (b << PUSH_BUCKET_SHIFT).min(n))
        .collect();
    over_ranges(&bounds, next, total, |v0, next, total| {
        push_buckets(hop, graph, &chunks, p, v0, next, total)
    })
}

/// Targets per bucket of the push form, as a shift: 4,096, so a bucket's slot table (4 bytes a target)
/// takes 16 KiB.
const PUSH_BUCKET_SHIFT: u32 = 12;

/// One term of the push form: `key` is the target's place in its bucket (`v % 4096`) times 32 plus its lane.
#[derive(Clone, Copy)]
struct PushTerm {
    key: u32,
    w: f32,
    a: f32,
}

/// A chunk's terms grouped by bucket: bucket `b`'s are `terms[starts[b] .. starts[b + 1]]`, in edge order.
struct PushChunk {
    terms: Vec<PushTerm>,
    starts: Vec<usize>,
}

/// Pass 1 of [`push_hop`] for the active sources `active` (ascending).
fn push_chunk(graph: &SpreadGraph, prev: &[f32], active: &[u32], n_buckets: usize) -> PushChunk {
    let mut starts = vec![0usize; n_buckets + 1];
    for &u in active {
        let u = u as usize;
        for &v in &graph.out_dst[graph.out_ptr[u]..graph.out_ptr[u + 1]] {
            starts[(v >> PUSH_BUCKET_SHIFT) as usize + 1] += 1;
        }
    }
    for b in 0..n_buckets {
        starts[b + 1] += starts[b];
    }
    let mut at = starts.clone();
    let mut terms = vec![
        PushTerm {
            key: 0,
            w: 0.0,
            a: 0.0
        };
        starts[n_buckets]
    ];
    let mask = (1u32 << PUSH_BUCKET_SHIFT) - 1;
    for &u in active {
        let u = u as usize;
        let a = prev[u];
        let (e0, e1) = (graph.out_ptr[u], graph.out_ptr[u + 1]);
        for ((&v, &j), &w) in graph.out_dst[e0..e1]
            .iter()
            .zip(&graph.out_pos[e0..e1])
            .zip(&graph.out_w[e0..e1])
        {
            let slot = &mut at[(v >> PUSH_BUCKET_SHIFT) as usize];
            terms[*slot] = PushTerm {
                key: ((v & mask) << 5) | (j % SPREAD_LANES as u32),
                w,
                a,
            };
            *slot += 1;
        }
    }
    PushChunk { terms, starts }
}

/// Pass 2 of [`push_hop`] for the targets `v0 .. v0 + next.len()` (whole buckets, the last one maybe cut by
/// the node count).
fn push_buckets(
    hop: Hop,
    graph: &SpreadGraph,
    chunks: &[PushChunk],
    p: (f32, f32),
    v0: usize,
    next: &mut [f32],
    total: &mut [f32],
) -> HopStats {
    #[cfg(target_arch = "x86_64")]
    if hop.kind != PullKind::Plain {
        // SAFETY: `Fma` and `Avx512` are chosen only at the `Avx2` level or above (AVX2 and FMA).
        return unsafe { push_buckets_fma(graph, chunks, p, v0, next, total) };
    }
    let _ = hop;
    push_buckets_plain(graph, chunks, p, v0, next, total)
}

/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn push_buckets_fma(
    graph: &SpreadGraph,
    chunks: &[PushChunk],
    p: (f32, f32),
    v0: usize,
    next: &mut [f32],
    total: &mut [f32],
) -> HopStats {
    push_buckets_plain(graph, chunks, p, v0, next, total)
}

#[inline(always)]
fn push_buckets_plain(
    graph: &SpreadGraph,
    chunks: &[PushChunk],
    p: (f32, f32),
    v0: usize,
    next: &mut [f32],
    total: &mut [f32],
) -> HopStats {
    const NONE: u32 = u32::MAX;
    next.fill(0.0);
    let mut st = HopStats::default();
    let mut slot = vec![NONE; 1 << PUSH_BUCKET_SHIFT];
    let mut touched: Vec<u32> = Vec::new();
    let mut lanes: Vec<[f32; SPREAD_LANES]> = Vec::new();
    let (b0, b1) = (
        v0 >> PUSH_BUCKET_SHIFT,
        (v0 + next.len()).div_ceil(1 << PUSH_BUCKET_SHIFT),
    );
    for b in b0..b1 {
        touched.clear();
        lanes.clear();
        for c in chunks {
            for t in &c.terms[c.starts[b]..c.starts[b + 1]] {
                let (place, l) = ((t.key >> 5) as usize, (t.key % 32) as usize);
                if slot[place] == NONE {
                    slot[place] = lanes.len() as u32;
                    lanes.push([0.0; SPREAD_LANES]);
                    touched.push(place as u32);
                }
                let lane = &mut lanes[slot[place] as usize][l];
                *lane = t.w.mul_add(t.a, *lane);
            }
        }
        for (place, lane) in touched.iter().zip(lanes.iter_mut()) {
            slot[*place as usize] = NONE;
            let v = (b << PUSH_BUCKET_SHIFT) + *place as usize;
            let (o, t) = (&mut next[v - v0], &mut total[v - v0]);
            finish_target(graph, v, tree(lane), p, o, t, &mut st);
        }
    }
    st
}

/// Boundaries `0 = b_0 < b_1 < ... = n` splitting the targets `0 .. n` into at most `parts` ranges of about
/// equal `cost` (`cost(v)`: the cost of the targets before `v`, non-decreasing, `cost(n)` the total): `b_i` is
/// the first target whose cost reaches `i / parts` of the total; ranges that would be empty are dropped.
fn balanced_bounds(n: usize, parts: usize, cost: impl Fn(usize) -> usize) -> Vec<usize> {
    let total = cost(n);
    let mut bounds = Vec::with_capacity(parts + 1);
    bounds.push(0);
    for i in 1..parts {
        let want = total / parts * i;
        let (mut lo, mut hi) = (*bounds.last().unwrap_or(&0), n);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if cost(mid) < want {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        if lo > *bounds.last().unwrap_or(&0) && lo < n {
            bounds.push(lo);
        }
    }
    bounds.push(n);
    bounds
}

/// `f(v0, next[v0..v1], total[v0..v1])` for every range `v0 .. v1` of `bounds`, on rayon's threads when there
/// is more than one (each call owns its slices: no shared writes), the stats joined.
fn over_ranges(
    bounds: &[usize],
    next: &mut [f32],
    total: &mut [f32],
    f: impl Fn(usize, &mut [f32], &mut [f32]) -> HopStats + Sync,
) -> HopStats {
    let mut parts = Vec::with_capacity(bounds.len().saturating_sub(1));
    let (mut rest_n, mut rest_t) = (next, total);
    for w in bounds.windows(2) {
        let (a, b) = rest_n.split_at_mut(w[1] - w[0]);
        let (c, d) = rest_t.split_at_mut(w[1] - w[0]);
        parts.push((w[0], a, c));
        (rest_n, rest_t) = (b, d);
    }
    let run = |(v0, n, t): (usize, &mut [f32], &mut [f32])| f(v0, n, t);
    if parts.len() == 1 {
        parts
            .into_iter()
            .map(run)
            .fold(HopStats::default(), HopStats::join)
    } else {
        in_pool(|| {
            parts
                .into_par_iter()
                .map(run)
                .reduce(HopStats::default, HopStats::join)
        })
    }
}

/// The input checks of [`spread`], for callers that validate before choosing a device (every backend
/// must reject exactly what the CPU rejects).
pub fn check_spread_inputs(
    graph: &SpreadGraph,
    seeds: &[f32],
    params: &SpreadParams,
) -> Result<(), CpuError> {
    check_spread_shape(graph, seeds, params)?;
    if seeds_all_valid(seeds) {
        return Ok(());
    }
    // Something is wrong: name it as the two scans always have (a NaN or infinity anywhere first).
    check_finite("seeds", seeds)?;
    if let Some(index) = seeds.iter().position(|s| *s < 0.0) {
        return Err(CpuError::Negative {
            what: "seeds",
            index,
        });
    }
    Ok(())
}

/// Whether every seed is finite and not below zero (`-0.0` is fine), in one pass over the bits instead of a
/// finite scan and then an element-by-element sign scan: NaN or infinity has the exponent all ones; below
/// zero is the sign set on anything but `-0.0`.
fn seeds_all_valid(seeds: &[f32]) -> bool {
    crate::first_bits_where(seeds, |b| {
        (b & 0x7f80_0000) == 0x7f80_0000 || b > 0x8000_0000
    })
    .is_none()
}

/// The input checks of spreading from a seed list (`(node, value)` pairs: the dense seed vector with
/// `seed[node] = value` for each pair and `0.0` elsewhere), for callers that validate before choosing a
/// device. Returns the list sorted by node id (ascending, distinct), with the pairs whose value is `0.0` or
/// `-0.0` left out (they are no seeds); the caller's order does not matter.
///
/// Errors: the parameters as [`check_spread_inputs`] checks them; then, the first pair in the caller's order
/// that fails deciding, a node id `>= n_nodes` ([`CpuError::IdOutOfRange`]), a NaN or infinite value
/// ([`CpuError::NonFinite`]) or a negative value ([`CpuError::Negative`]); then a node listed twice
/// ([`CpuError::DuplicateSeed`]: the smallest such id, and its first two positions). An empty list is valid
/// (no seeds).
///
/// ```
/// use recall_cpu_simd::{CpuError, SpreadGraph, SpreadParams, check_spread_list_inputs};
/// let graph = SpreadGraph::from_csr(&[0, 1, 1, 1], &[1], &[1.0]).unwrap();
/// let params = SpreadParams { decay: 0.5, threshold: 0.0, hops: 1, k: 1 };
/// let list = check_spread_list_inputs(&graph, &[(2, 0.5), (0, 1.0), (1, -0.0)], &params).unwrap();
/// assert_eq!(list, [(0, 1.0), (2, 0.5)]);
/// let twice = check_spread_list_inputs(&graph, &[(2, 0.5), (0, 1.0), (2, 0.5)], &params);
/// assert_eq!(twice, Err(CpuError::DuplicateSeed { id: 2, first: 0, second: 2 }));
/// ```
pub fn check_spread_list_inputs(
    graph: &SpreadGraph,
    seeds: &[(u32, f32)],
    params: &SpreadParams,
) -> Result<Vec<(u32, f32)>, CpuError> {
    check_spread_params(graph.n, params)?;
    let n = graph.n;
    for (index, &(id, value)) in seeds.iter().enumerate() {
        if id as usize >= n {
            return Err(CpuError::IdOutOfRange {
                what: "seed list",
                index,
                id: u64::from(id),
                n,
            });
        }
        if !value.is_finite() {
            return Err(CpuError::NonFinite {
                what: "seed list",
                index,
            });
        }
        if value < 0.0 {
            return Err(CpuError::Negative {
                what: "seed list",
                index,
            });
        }
    }
    let mut sorted = seeds.to_vec();
    if !sorted.windows(2).all(|w| w[0].0 < w[1].0) {
        sorted.sort_unstable_by_key(|p| p.0);
        if let Some(w) = sorted.windows(2).find(|w| w[0].0 == w[1].0) {
            let id = w[0].0;
            let mut at = seeds
                .iter()
                .enumerate()
                .filter(|p| p.1.0 == id)
                .map(|p| p.0);
            let (first, second) = (at.next().unwrap_or(0), at.next().unwrap_or(0));
            return Err(CpuError::DuplicateSeed { id, first, second });
        }
    }
    sorted.retain(|p| p.1 != 0.0);
    Ok(sorted)
}

/// [`check_spread_inputs`] without the scans over the seeds' values.
fn check_spread_shape(
    graph: &SpreadGraph,
    seeds: &[f32],
    params: &SpreadParams,
) -> Result<(), CpuError> {
    let n = graph.n;
    if seeds.len() != n {
        return Err(CpuError::LengthMismatch {
            what: "seeds",
            expected: n,
            got: seeds.len(),
        });
    }
    check_spread_params(n, params)
}

/// The checks of spreading's parameters over `n` nodes.
fn check_spread_params(n: usize, params: &SpreadParams) -> Result<(), CpuError> {
    let SpreadParams {
        decay,
        threshold,
        hops,
        k,
    } = *params;
    if !(decay > 0.0 && decay <= 1.0) {
        return Err(CpuError::ParamOutOfRange {
            what: "decay",
            value: decay.to_string(),
            expected: "0 < decay <= 1",
        });
    }
    if !(threshold.is_finite() && threshold >= 0.0) {
        return Err(CpuError::ParamOutOfRange {
            what: "threshold",
            value: threshold.to_string(),
            expected: "finite and >= 0",
        });
    }
    if hops == 0 {
        return Err(CpuError::ParamOutOfRange {
            what: "hops",
            value: "0".into(),
            expected: "at least 1",
        });
    }
    if k == 0 || k > n {
        return Err(CpuError::KOutOfRange { k, n });
    }
    Ok(())
}

/// [`spread`] with the hop form chosen by the caller (tests use it to check that both forms agree).
#[doc(hidden)]
pub fn spread_with_mode(
    graph: &SpreadGraph,
    seeds: &[f32],
    params: &SpreadParams,
    mode: SpreadMode,
) -> Result<Spread, CpuError> {
    Cpu::new().spread_with_mode(graph, seeds, params, mode)
}

impl Cpu {
    /// Spread `seeds` (one finite, non-negative value per node) over `graph` for `params.hops` hops, at
    /// this handle's SIMD level (every level gives the same bits).
    pub fn spread(
        &self,
        graph: &SpreadGraph,
        seeds: &[f32],
        params: &SpreadParams,
    ) -> Result<Spread, CpuError> {
        self.spread_with_mode(graph, seeds, params, SpreadMode::Auto)
    }

    /// [`Cpu::spread`] with the hop form chosen by the caller.
    #[doc(hidden)]
    pub fn spread_with_mode(
        &self,
        graph: &SpreadGraph,
        seeds: &[f32],
        params: &SpreadParams,
        mode: SpreadMode,
    ) -> Result<Spread, CpuError> {
        if self.is_prevalidated() {
            check_spread_shape(graph, seeds, params)?;
        } else {
            check_spread_inputs(graph, seeds, params)?;
        }
        let n = graph.n;
        let SpreadParams {
            decay,
            threshold,
            hops,
            k,
        } = *params;
        let hop_code = Hop::new(self.level(), graph);
        // The setup's passes over the nodes run on every core for large graphs: on one core they took about
        // as long as a pushed hop (session 29).
        let par = hop_code.threads > 1 && n >= SETUP_PAR_MIN;
        // A seed of -0.0 is read as +0.0 (`s + 0.0`), so no -0.0 is ever in play.
        let (mut total, mut prev): (Vec<f32>, Vec<f32>) = if par {
            in_pool(|| {
                let t: Vec<f32> = seeds.par_iter().map(|s| s + 0.0).collect();
                (t.par_iter().copied().collect(), t)
            })
        } else {
            let t: Vec<f32> = seeds.iter().map(|s| s + 0.0).collect();
            (t.clone(), t)
        };
        let mut next = vec![0.0f32; n];
        let out_edges =
            |(i, a): (usize, &[f32])| active_out_edges(a, &graph.out_ptr[i * SCAN_CHUNK..]);
        let join = |x: (usize, bool), y: (usize, bool)| (x.0 + y.0, x.1 | y.1);
        let (active_edges, any_active) = if par {
            in_pool(|| {
                prev.par_chunks(SCAN_CHUNK)
                    .enumerate()
                    .map(out_edges)
                    .reduce(|| (0, false), join)
            })
        } else {
            out_edges((0, &prev))
        };
        let mut stats = HopStats {
            overflow: false,
            active_edges,
            any_active,
        };
        for hop in 1..=hops {
            if stats.active_edges == 0 || !stats.any_active {
                // Every contribution is an exact identity: the hop adds nothing (and nor will later ones).
                break;
            }
            let use_push = mode == SpreadMode::Push
                || (mode == SpreadMode::Auto && stats.active_edges <= graph.n_edges() / 16);
            let p = (decay, threshold);
            stats = if use_push {
                push_hop(
                    hop_code,
                    graph,
                    &prev,
                    stats.active_edges,
                    p,
                    &mut next,
                    &mut total,
                )
            } else {
                hop_code.pull_sparse(graph, &prev, stats.active_edges, p, &mut next, &mut total)
            };
            if stats.overflow {
                return Err(CpuError::ActivationOverflow { hop });
            }
            std::mem::swap(&mut prev, &mut next);
        }
        let top = top_of(&total, k, hop_code.threads, self.level());
        Ok(Spread {
            activation: total,
            top,
        })
    }
}

/// Nodes per task of the parallel scans of activations for the active nodes.
const SCAN_CHUNK: usize = 1 << 14;

/// The out-edges of the nodes whose activation in `a` is not zero, and whether any is; `out_ptr` starts at the
/// first of those nodes (at least `a.len() + 1` offsets). Without a branch per node: active and inactive nodes
/// alternate at random. It was a loop with one (1.07 ns a node, 160 us at 150 K nodes, development VM).
fn active_out_edges(a: &[f32], out_ptr: &[usize]) -> (usize, bool) {
    let (lo, hi) = (&out_ptr[..a.len()], &out_ptr[1..=a.len()]);
    let (mut edges, mut any) = (0usize, false);
    for ((a, l), h) in a.iter().zip(lo).zip(hi) {
        let on = *a != 0.0;
        edges += (h - l) * usize::from(on);
        any |= on;
    }
    (edges, any)
}

/// The top `k` of `total` (higher first, then lower id): per-chunk selectors merged exactly.
fn top_of(total: &[f32], k: usize, threads: usize, level: SimdLevel) -> TopK {
    const CHUNK: usize = 1 << 16;
    let select = |(c, xs): (usize, &[f32])| {
        let mut sel = Selector::new(k, level);
        sel.push_scores(xs, (c * CHUNK) as u32, Order::HigherFirst);
        sel
    };
    // About 0.2 ns a node on one core (development VM): two chunks or more are shared out.
    let sel = if threads > 1 && total.len() >= 2 * CHUNK {
        in_pool(|| {
            total
                .par_chunks(CHUNK)
                .enumerate()
                .map(select)
                .reduce_with(|mut a, b| {
                    a.merge(b);
                    a
                })
        })
    } else {
        total
            .chunks(CHUNK)
            .enumerate()
            .map(select)
            .reduce(|mut a, b| {
                a.merge(b);
                a
            })
    };
    let mut ids = vec![0u32; k];
    let mut scores = vec![0f32; k];
    if let Some(sel) = sel {
        write_entries(&sel.finish(), &mut ids, &mut scores);
    }
    TopK { k, ids, scores }
}

#[cfg(test)]
mod tests {
    use super::{Hop, HopStats, PullKind, SpreadGraph, push_hop};

    /// Activations of `n` nodes: every `every`-th node active (a value in [0.5, 8)), the others zero.
    fn every_nth_active(n: usize, every: usize) -> Vec<f32> {
        (0..n)
            .map(|u| {
                if u % every == 0 {
                    ((u * 7919) % 97) as f32 / 13.0 + 0.5
                } else {
                    0.0
                }
            })
            .collect()
    }
    use crate::SimdLevel;

    impl PullKind {
        /// The lowest level that hands out this kind: a test's pushed hops scan for their active sources at it.
        fn level(self) -> SimdLevel {
            match self {
                PullKind::Plain => SimdLevel::Scalar,
                PullKind::Fma => SimdLevel::Avx2,
                PullKind::Avx512 => SimdLevel::Avx512,
            }
        }
    }

    /// A graph of `n` nodes and `edges` edges (sources uniform, targets skewed to low ids, parallel edges and
    /// self loops included), weights in [0, 1) with some zeros.
    fn graph(n: usize, edges: usize) -> SpreadGraph {
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        let mut list: Vec<(usize, u32, f32)> = (0..edges)
            .map(|_| {
                let src = (next() % n as u64) as usize;
                let x = (next() >> 11) as f64 / (1u64 << 53) as f64;
                let dst = ((n as f64) * x * x * x) as u32 % n as u32;
                let w = if next() % 16 == 0 {
                    0.0
                } else {
                    (next() % 1000) as f32 / 1000.0
                };
                (src, dst, w)
            })
            .collect();
        list.sort_by_key(|e| e.0);
        let mut indptr = vec![0usize; n + 1];
        for e in &list {
            indptr[e.0 + 1] += 1;
        }
        for u in 0..n {
            indptr[u + 1] += indptr[u];
        }
        let indices: Vec<u32> = list.iter().map(|e| e.1).collect();
        let weights: Vec<f32> = list.iter().map(|e| e.2).collect();
        SpreadGraph::from_csr(&indptr, &indices, &weights).expect("valid graph")
    }

    /// The push's chunks of sources and groups of buckets, however many tasks they are cut into (set here
    /// through the thread count, whatever the machine has), give the pull's bits: every target meets its terms
    /// in ascending source order across chunk and bucket boundaries (the last bucket cut by the node count).
    /// The graph is large enough for the list of active sources to be made in parallel pieces.
    #[test]
    fn push_in_chunks_and_bucket_groups_gives_the_pulls_bits() {
        let n = super::SETUP_PAR_MIN + 4096 * 5 + 123;
        let g = graph(n, 1_200_000);
        // Every third node active: enough active edges for the parallel cut.
        let prev: Vec<f32> = (0..n)
            .map(|u| {
                if u % 3 == 0 {
                    ((u * 7919) % 97) as f32 / 13.0 + 0.5
                } else {
                    0.0
                }
            })
            .collect();
        let active_edges: usize = (0..n)
            .filter(|u| prev[*u] != 0.0)
            .map(|u| g.out_ptr[u + 1] - g.out_ptr[u])
            .sum();
        let p = (0.5, 0.01);
        let run = |threads: usize, push: bool| {
            let hop = Hop {
                kind: PullKind::Plain,
                level: crate::simd_level(),
                threads,
                par_min: 0,
                min_task: 1 << 10,
            };
            let (mut next, mut total) = (vec![0.0f32; n], vec![1.0f32; n]);
            let st: HopStats = if push {
                push_hop(hop, &g, &prev, active_edges, p, &mut next, &mut total)
            } else {
                hop.pull(&g, &prev, p, &mut next, &mut total)
            };
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            (
                bits(&next),
                bits(&total),
                st.active_edges,
                st.any_active,
                st.overflow,
            )
        };
        let want = run(1, false);
        assert!(want.3, "some target active");
        for threads in [1, 2, 3, 8, 64] {
            assert_eq!(run(threads, true), want, "{threads} threads");
        }
    }

    /// A pull cut into blocks of targets, however many (set through the thread count, the parallel threshold
    /// taken away so that a small graph is cut too), gives the bits of the pull on one thread, at every pull code
    /// this CPU runs; so does a push cut into chunks and bucket groups on the same small graph. A block boundary
    /// can fall anywhere, hubs included.
    #[test]
    fn hops_cut_into_tasks_on_a_small_graph_give_the_serial_bits() {
        let n = 3000;
        let g = graph(n, 40_000);
        #[cfg(target_arch = "x86_64")]
        let kinds: Vec<PullKind> = [
            (PullKind::Plain, crate::SimdLevel::Scalar),
            (PullKind::Fma, crate::SimdLevel::Avx2),
            (PullKind::Avx512, crate::SimdLevel::Avx512),
        ]
        .into_iter()
        .filter(|(_, level)| crate::available_levels().contains(level))
        .map(|(kind, _)| kind)
        .collect();
        #[cfg(not(target_arch = "x86_64"))]
        let kinds = [PullKind::Plain];
        let p = (0.5, 0.01);
        for every in [1, 7, 500] {
            let prev = every_nth_active(n, every);
            let active_edges: usize = (0..n)
                .filter(|u| prev[*u] != 0.0)
                .map(|u| g.out_ptr[u + 1] - g.out_ptr[u])
                .sum();
            let run = |kind: PullKind, threads: usize, push: bool| {
                let hop = Hop {
                    kind,
                    level: kind.level(),
                    threads,
                    par_min: 0,
                    min_task: 1 << 10,
                };
                if threads > 1 {
                    // About 52,000 units of work in tasks of at least 1,024, at most 16 a thread: 32 to 50 blocks
                    // (a few fewer where hubs hold more than a share).
                    let cut = hop.blocks(&g).len() - 1;
                    let planned = (52_000 / 1024).min(16 * threads);
                    assert!(
                        cut >= planned * 3 / 4,
                        "the pull is cut by the thread count: {cut} blocks, {planned} planned"
                    );
                }
                let (mut next, mut total) = (vec![0.0f32; n], vec![1.0f32; n]);
                let st = if push {
                    push_hop(hop, &g, &prev, active_edges, p, &mut next, &mut total)
                } else {
                    hop.pull(&g, &prev, p, &mut next, &mut total)
                };
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                (bits(&next), bits(&total), st.active_edges, st.any_active)
            };
            let want = run(PullKind::Plain, 1, false);
            assert!(want.3, "some target active");
            for kind in &kinds {
                for threads in [1, 2, 3, 8, 64] {
                    for push in [false, true] {
                        assert_eq!(
                            run(*kind, threads, push),
                            want,
                            "{kind:?}, {threads} threads, push {push}, 1 in {every} active"
                        );
                    }
                }
            }
        }
    }

    /// The count of active out-edges (densities from none to all, lengths around 16) is the plain filter's; the
    /// active ids themselves are `nonzero_positions`' (its tests).
    #[test]
    fn active_out_edges_match_the_plain_filter() {
        let g = graph(1000, 9000);
        for every in [1, 2, 5, 16, 17, 100, 2000] {
            for len in [0, 1, 15, 16, 17, 999, 1000] {
                let a: Vec<f32> = (0..len)
                    .map(|u| if u % every == 3 % every { 0.5 } else { 0.0 })
                    .collect();
                let want: Vec<u32> = (0..len as u32).filter(|u| a[*u as usize] != 0.0).collect();
                let edges: usize = want
                    .iter()
                    .map(|u| g.out_ptr[*u as usize + 1] - g.out_ptr[*u as usize])
                    .sum();
                assert_eq!(
                    super::active_out_edges(&a, &g.out_ptr),
                    (edges, !want.is_empty()),
                    "1 in {every}, {len} nodes"
                );
            }
        }
    }

    /// The production thresholds keep a small hop on the calling thread and cut a large one.
    #[test]
    fn small_hops_stay_on_one_thread() {
        let g = graph(2000, 16_000);
        let hop = Hop::new(crate::SimdLevel::Scalar, &g);
        assert_eq!(hop.blocks(&g), vec![0, 2000]);
        let many = Hop { threads: 16, ..hop };
        assert_eq!(many.blocks(&g), vec![0, 2000]);
        let big = graph(40_000, 320_000);
        assert!(many.blocks(&big).len() > 2, "a hop of 480 K work is cut");
    }

    /// The AVX2 and AVX-512 pulls (short targets in runs of gathered activations, hubs in their own loops)
    /// give the plain pull's bits over a graph with hubs, runs cut by the buffer's size and inactive sources.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn simd_pulls_give_the_plain_bits() {
        let levels = crate::available_levels();
        let kinds: Vec<(PullKind, crate::SimdLevel)> = [
            (PullKind::Fma, crate::SimdLevel::Avx2),
            (PullKind::Avx512, crate::SimdLevel::Avx512),
        ]
        .into_iter()
        .filter(|(_, level)| levels.contains(level))
        .collect();
        if kinds.is_empty() {
            eprintln!("skipped: this CPU has neither AVX2 nor AVX-512");
            return;
        }
        let n = 50_000;
        let g = graph(n, 900_000);
        assert!(
            (0..n).any(|v| g.in_ptr[v + 1] - g.in_ptr[v] > super::SHORT_MAX_DEGREE),
            "some hubs"
        );
        let p = (0.5, 0.01);
        for every in [1, 3, 1000] {
            let prev = every_nth_active(n, every);
            let run = |kind: PullKind, live: Option<&[u32]>| {
                let hop = Hop {
                    kind,
                    level: kind.level(),
                    threads: 4,
                    par_min: 0,
                    min_task: 1 << 10,
                };
                let (mut next, mut total) = (vec![0.0f32; n], vec![1.0f32; n]);
                let st = hop.pull_with(&g, &prev, live, p, &mut next, &mut total);
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                (bits(&next), bits(&total), st.active_edges, st.any_active)
            };
            let want = run(PullKind::Plain, None);
            assert!(want.3, "some target active");
            for (kind, _) in &kinds {
                assert_eq!(run(*kind, None), want, "{kind:?}, 1 in {every} active");
            }
            // The AVX-512 pull that reads only the activations a bit marks (`Hop::pull_sparse`).
            if kinds.iter().any(|(k, _)| *k == PullKind::Avx512) {
                for par in [false, true] {
                    // SAFETY: the AVX-512 level is available (`kinds`).
                    let live = unsafe { super::avx512::live_bits(&prev, par) };
                    assert_eq!(live.len(), n.div_ceil(32));
                    for (v, a) in prev.iter().enumerate() {
                        assert_eq!(
                            live[v / 32] >> (v % 32) & 1 == 1,
                            *a != 0.0,
                            "node {v}'s bit"
                        );
                    }
                    assert_eq!(
                        run(PullKind::Avx512, Some(&live)),
                        want,
                        "AVX-512 reading the live sources only, 1 in {every} active"
                    );
                }
            }
        }
    }
}
