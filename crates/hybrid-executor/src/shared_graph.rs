//! A spreading graph validated and transposed once and shared between calls, so that a GPU backend can keep
//! it on the device (the graph counterpart of [`crate::SharedCorpus`]).

use crate::backend::{Backend, BackendError};
use crate::executor::{CallOptions, ExecError, Executor, Outcome};
use crate::op::{Op, OpKind};
use recall_cpu_simd::{
    Spread, SpreadGraph, SpreadParams, check_spread_inputs, check_spread_list_inputs,
};
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A [`SpreadGraph`] (validated CSR, transposed for the pull order) that is owned and cheap to clone. A GPU
/// backend keeps a device copy under the graph's id while any clone of it lives, and frees it after the
/// last clone is dropped.
#[derive(Debug, Clone)]
pub struct SharedGraph {
    inner: Arc<GraphInner>,
}

#[derive(Debug)]
pub(crate) struct GraphInner {
    id: u64,
    graph: SpreadGraph,
}

impl SharedGraph {
    /// Validate a CSR graph (see [`SpreadGraph::from_csr`]) and transpose it once.
    pub fn from_csr(
        indptr: &[usize],
        indices: &[u32],
        weights: &[f32],
    ) -> Result<SharedGraph, ExecError> {
        Ok(SharedGraph::new(SpreadGraph::from_csr(
            indptr, indices, weights,
        )?))
    }

    /// Share a graph that is already validated and transposed.
    pub fn new(graph: SpreadGraph) -> SharedGraph {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        SharedGraph {
            inner: Arc::new(GraphInner { id, graph }),
        }
    }

    /// The validated, transposed graph.
    pub fn graph(&self) -> &SpreadGraph {
        &self.inner.graph
    }

    /// Number of nodes.
    pub fn n_nodes(&self) -> usize {
        self.inner.graph.n_nodes()
    }

    /// Number of edges.
    pub fn n_edges(&self) -> usize {
        self.inner.graph.n_edges()
    }

    /// Unique per graph created in this process.
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// A handle that does not keep the graph alive (for device caches).
    #[cfg_attr(not(feature = "gpu"), allow(dead_code))]
    pub(crate) fn weak(&self) -> Weak<GraphInner> {
        Arc::downgrade(&self.inner)
    }
}

/// The seeds of a call over a shared graph, validated: the dense vector, or the list sorted by node id.
#[derive(Debug, Clone, Copy)]
enum SeedsRef<'a> {
    Dense(&'a [f32]),
    List(&'a [(u32, f32)]),
}

/// Activation spreading over a shared graph (one unit: hops depend on each other), from either form of
/// seeds: one op, so both forms share dispatch (kind, work, device bytes), fallback, metrics and tenancy.
struct SpreadSharedOp<'a> {
    graph: &'a SharedGraph,
    seeds: SeedsRef<'a>,
    params: &'a SpreadParams,
}

impl Op for SpreadSharedOp<'_> {
    type Output = Spread;
    fn kind(&self) -> OpKind {
        OpKind::SpreadResident
    }
    fn work(&self) -> u64 {
        (self.graph.n_edges() as u64).saturating_mul(self.params.hops as u64)
    }
    fn device_bytes(&self, _: Range<usize>) -> u64 {
        (self.graph.n_nodes() as u64) * 24 + (self.graph.n_edges() as u64) * 8
    }
    fn run(&self, backend: &dyn Backend, _: Range<usize>) -> Result<Spread, BackendError> {
        match self.seeds {
            SeedsRef::Dense(seeds) => backend.spread_shared(self.graph, seeds, self.params),
            SeedsRef::List(seeds) => backend.spread_shared_from(self.graph, seeds, self.params),
        }
    }
    fn append(&self, _: &mut Spread, _: Spread) {}
}

impl Executor {
    /// [`Executor::spread`] over a [`SharedGraph`] (validated and transposed when it was made): on the GPU
    /// the graph is uploaded once and stays on the device while the graph lives.
    pub fn spread_shared(
        &self,
        opts: &CallOptions,
        graph: &SharedGraph,
        seeds: &[f32],
        params: &SpreadParams,
    ) -> Result<Outcome<Spread>, ExecError> {
        check_spread_inputs(graph.graph(), seeds, params)?;
        self.run_spread_shared(opts, graph, SeedsRef::Dense(seeds), params)
    }

    /// [`Executor::spread_shared`] from a seed list: `(node, value)` pairs in any order, standing for the
    /// dense vector with `seed[node] = value` for each pair and `0.0` elsewhere, whose answer it gives bit for
    /// bit. Validated by [`check_spread_list_inputs`] (a node id out of range, a NaN, infinite or negative
    /// value, a node listed twice: [`ExecError::InvalidInput`]); an empty list is no seeds. The GPU takes the
    /// pairs as they are, so a call seeded from a few nodes neither builds nor scans a dense vector.
    pub fn spread_shared_from(
        &self,
        opts: &CallOptions,
        graph: &SharedGraph,
        seeds: &[(u32, f32)],
        params: &SpreadParams,
    ) -> Result<Outcome<Spread>, ExecError> {
        let sorted = check_spread_list_inputs(graph.graph(), seeds, params)?;
        self.run_spread_shared(opts, graph, SeedsRef::List(&sorted), params)
    }

    /// The validated call of either form.
    fn run_spread_shared(
        &self,
        opts: &CallOptions,
        graph: &SharedGraph,
        seeds: SeedsRef<'_>,
        params: &SpreadParams,
    ) -> Result<Outcome<Spread>, ExecError> {
        self.run_op(
            &SpreadSharedOp {
                graph,
                seeds,
                params,
            },
            opts,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::CpuBackend;
    use crate::{DevicePolicy, ExecutorConfig};

    fn graph() -> (Vec<usize>, Vec<u32>, Vec<f32>) {
        // 0 -> 1 (0.5), 0 -> 2 (1.0), 1 -> 2 (0.25), 2 -> 0 (0.75), 3 isolated
        (
            vec![0, 2, 3, 4, 4],
            vec![1, 2, 2, 0],
            vec![0.5, 1.0, 0.25, 0.75],
        )
    }

    #[test]
    fn shared_graph_gives_the_slice_answer() {
        let (p, i, w) = graph();
        let shared = SharedGraph::from_csr(&p, &i, &w).unwrap();
        assert_eq!((shared.n_nodes(), shared.n_edges()), (4, 4));
        let plain = SpreadGraph::from_csr(&p, &i, &w).unwrap();
        let exec = Executor::new(ExecutorConfig {
            policy: DevicePolicy::Cpu,
            ..ExecutorConfig::default()
        })
        .unwrap();
        let seeds = [1.0, 0.0, 0.5, 0.0];
        let params = SpreadParams {
            decay: 0.5,
            threshold: 0.0,
            hops: 3,
            k: 3,
        };
        let a = exec
            .spread(&CallOptions::default(), &plain, &seeds, &params)
            .unwrap();
        for _ in 0..2 {
            let b = exec
                .spread_shared(&CallOptions::default(), &shared, &seeds, &params)
                .unwrap();
            assert_eq!(a.value, b.value);
            assert_eq!(b.device, crate::Device::Cpu);
        }
        // The CPU backend's default path is the plain one.
        let c = CpuBackend.spread_shared(&shared, &seeds, &params).unwrap();
        assert_eq!(a.value, c);
    }

    #[test]
    fn shared_graph_validates_once_and_per_call_inputs_still_checked() {
        assert!(SharedGraph::from_csr(&[0, 1], &[5], &[1.0]).is_err());
        assert!(SharedGraph::from_csr(&[0, 1], &[0], &[f32::NAN]).is_err());
        let (p, i, w) = graph();
        let shared = SharedGraph::from_csr(&p, &i, &w).unwrap();
        let exec = Executor::new(ExecutorConfig {
            policy: DevicePolicy::Cpu,
            ..ExecutorConfig::default()
        })
        .unwrap();
        let params = SpreadParams {
            decay: 0.5,
            threshold: 0.0,
            hops: 1,
            k: 1,
        };
        let short = exec.spread_shared(&CallOptions::default(), &shared, &[1.0], &params);
        assert!(matches!(short, Err(ExecError::InvalidInput(_))));
        let bad_k = SpreadParams { k: 5, ..params };
        let r = exec.spread_shared(&CallOptions::default(), &shared, &[1.0; 4], &bad_k);
        assert!(matches!(r, Err(ExecError::InvalidInput(_))));
    }

    #[test]
    fn clones_share_one_id_and_graphs_get_distinct_ids() {
        let (p, i, w) = graph();
        let a = SharedGraph::from_csr(&p, &i, &w).unwrap();
        let b = a.clone();
        let c = SharedGraph::from_csr(&p, &i, &w).unwrap();
        assert_eq!(a.id(), b.id());
        assert_ne!(a.id(), c.id());
        let weak = a.weak();
        drop(a);
        assert_eq!(weak.strong_count(), 1);
        drop(b);
        assert_eq!(weak.strong_count(), 0);
    }
}
