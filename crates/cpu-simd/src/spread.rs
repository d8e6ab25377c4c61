//! Activation spreading over a weighted CSR graph (`docs/numerics.md`, "Activation spreading").

use crate::topk::{Order, Selector, TopK, pair_key, write_entries};
use crate::{CpuError, PAR_MIN_WORK, check_finite};
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

/// The fixed tree: for off in 16, 8, 4, 2, 1: lane[l] = lane[l] + lane[l + off] for l < off.
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
    spread_with_mode(graph, seeds, params, SpreadMode::Auto)
}

/// The pull form of one hop for targets `v0 .. v0 + out.len()`.
#[inline(always)]
fn pull_targets(
    graph: &SpreadGraph,
    prev: &[f32],
    decay: f32,
    threshold: f32,
    v0: usize,
    out: &mut [f32],
) {
    for (i, o) in out.iter_mut().enumerate() {
        let x = graph.pull(v0 + i, prev) * decay;
        *o = if x < threshold { 0.0 } else { x };
    }
}

/// The hop loops compiled twice: as they are (a baseline x86-64 build turns `mul_add` into a call to
/// libm's `fmaf`), and, on x86-64, with FMA enabled so that every `mul_add` is one `vfmadd` instruction.
/// Both round once per `fma`, as the order says: the same bits, the second several times faster.
#[derive(Clone, Copy)]
struct Hop {
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    fma: bool,
}

impl Hop {
    fn new() -> Hop {
        Hop {
            fma: crate::simd::simd_level() >= crate::SimdLevel::Avx2,
        }
    }

    fn pull(self, graph: &SpreadGraph, prev: &[f32], p: (f32, f32), v0: usize, out: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        if self.fma {
            // SAFETY: `fma` is set only at the `Avx2` level or above, which is handed out only when
            // the CPU reports AVX2 and FMA.
            unsafe { pull_targets_fma(graph, prev, p.0, p.1, v0, out) };
            return;
        }
        pull_targets(graph, prev, p.0, p.1, v0, out);
    }

    /// `active_edges`: the number of out-edges of the active sources (sizes the scratch once).
    fn push(
        self,
        graph: &SpreadGraph,
        prev: &[f32],
        active_edges: usize,
        p: (f32, f32),
        next: &mut [f32],
    ) {
        #[cfg(target_arch = "x86_64")]
        if self.fma {
            // SAFETY: as in `Hop::pull`.
            unsafe { push_hop_fma(graph, prev, active_edges, p.0, p.1, next) };
            return;
        }
        push_hop(graph, prev, active_edges, p.0, p.1, next);
    }
}

/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn pull_targets_fma(
    graph: &SpreadGraph,
    prev: &[f32],
    decay: f32,
    threshold: f32,
    v0: usize,
    out: &mut [f32],
) {
    pull_targets(graph, prev, decay, threshold, v0, out)
}

/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn push_hop_fma(
    graph: &SpreadGraph,
    prev: &[f32],
    active_edges: usize,
    decay: f32,
    threshold: f32,
    next: &mut [f32],
) {
    push_hop(graph, prev, active_edges, decay, threshold, next)
}

/// The push form of one hop: only active sources, ascending, each out-edge adding into lane `pos % 32`
/// of its target. In-lists are sorted by (source, position), so every lane receives its terms in the
/// same ascending order as the pull form, and skipped (inactive) terms are exact identities.
#[inline(always)]
fn push_hop(
    graph: &SpreadGraph,
    prev: &[f32],
    active_edges: usize,
    decay: f32,
    threshold: f32,
    next: &mut [f32],
) {
    let mut slot = vec![u32::MAX; graph.n];
    // At most one slot per active edge (and per node): reserved once, no regrowth copies.
    let cap = active_edges.min(graph.n);
    let mut touched: Vec<u32> = Vec::with_capacity(cap);
    let mut lanes: Vec<[f32; SPREAD_LANES]> = Vec::with_capacity(cap);
    for (u, a) in prev.iter().enumerate() {
        if *a == 0.0 {
            continue;
        }
        for e in graph.out_ptr[u]..graph.out_ptr[u + 1] {
            let v = graph.out_dst[e] as usize;
            let j = graph.out_pos[e] as usize;
            if slot[v] == u32::MAX {
                slot[v] = lanes.len() as u32;
                lanes.push([0.0; SPREAD_LANES]);
                touched.push(v as u32);
            }
            let w = graph.out_w[e];
            let l = &mut lanes[slot[v] as usize][j % SPREAD_LANES];
            *l = w.mul_add(*a, *l);
        }
    }
    next.fill(0.0);
    for (v, lane) in touched.iter().zip(lanes.iter_mut()) {
        let x = tree(lane) * decay;
        next[*v as usize] = if x < threshold { 0.0 } else { x };
    }
}

/// The input checks of [`spread`], for callers that validate before choosing a device (every backend
/// must reject exactly what the CPU rejects).
pub fn check_spread_inputs(
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
    check_finite("seeds", seeds)?;
    if let Some(index) = seeds.iter().position(|s| *s < 0.0) {
        return Err(CpuError::Negative {
            what: "seeds",
            index,
        });
    }
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
    let n = graph.n;
    check_spread_inputs(graph, seeds, params)?;
    let SpreadParams {
        decay,
        threshold,
        hops,
        k,
    } = *params;
    // A seed of -0.0 is read as +0.0 (`s + 0.0`), so no -0.0 is ever in play.
    let mut total: Vec<f32> = seeds.iter().map(|s| s + 0.0).collect();
    let mut prev = total.clone();
    let mut next = vec![0.0f32; n];
    const CHUNK: usize = 4096;
    let hop_code = Hop::new();
    for hop in 1..=hops {
        let active_edges: usize = match mode {
            SpreadMode::Pull => usize::MAX,
            _ => prev
                .iter()
                .enumerate()
                .filter(|(_, a)| **a != 0.0)
                .map(|(u, _)| graph.out_ptr[u + 1] - graph.out_ptr[u])
                .sum(),
        };
        if active_edges == 0 || prev.iter().all(|a| *a == 0.0) {
            // Every contribution is an exact identity: the hop adds nothing (and nor will later ones).
            break;
        }
        let use_push = mode == SpreadMode::Push
            || (mode == SpreadMode::Auto && active_edges <= graph.n_edges() / 16);
        if use_push {
            hop_code.push(graph, &prev, active_edges, (decay, threshold), &mut next);
        } else {
            let work = |(c, out): (usize, &mut [f32])| {
                hop_code.pull(graph, &prev, (decay, threshold), c * CHUNK, out);
            };
            if graph.n_edges() + n >= PAR_MIN_WORK {
                next.par_chunks_mut(CHUNK).enumerate().for_each(work);
            } else {
                next.chunks_mut(CHUNK).enumerate().for_each(work);
            }
        }
        let mut overflow = false;
        for (t, a) in total.iter_mut().zip(&next) {
            *t += *a;
            overflow |= t.is_infinite() || a.is_infinite();
        }
        if overflow {
            return Err(CpuError::ActivationOverflow { hop });
        }
        std::mem::swap(&mut prev, &mut next);
    }
    let mut sel = Selector::new(k);
    for (id, a) in total.iter().enumerate() {
        sel.push(pair_key(*a, id as u32, Order::HigherFirst), *a);
    }
    let mut ids = vec![0u32; k];
    let mut scores = vec![0f32; k];
    write_entries(&sel.finish(), &mut ids, &mut scores);
    Ok(Spread {
        activation: total,
        top: TopK { k, ids, scores },
    })
}
