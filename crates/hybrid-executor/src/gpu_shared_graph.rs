//! Spreading on the GPU over a graph that stays on the device while its [`SharedGraph`] lives: the GPU
//! backend's graph cache (the graph counterpart of its resident corpora).
//!
//! The cache holds, per live shared graph, the `DeviceGraph` that `Kernels::upload_graph_with` made (the pull
//! arrays, nodes binned by in-degree; arrays of `STAGED_UPLOAD_MIN_BYTES` or more staged through the backend's
//! pinned ring, as other caller data). An entry whose graph has been dropped is freed the next time the
//! cache is touched. Spreading does not take the backend's serialising lock: a graph is uploaded on a stream
//! of its own and is complete before any call reads it, and each call runs on one of the graph's slots (its
//! own stream and buffers: `recall_gpu_kernels`' `spread_graph`), so spreading calls run beside each other
//! and beside the device's other work. The cache's lock is held only to find or upload an entry.

use crate::backend::BackendError;
use crate::gpu_backend::{drop_dead, map_gpu_error, map_kernel_error};
use crate::shared_graph::{GraphInner, SharedGraph};
use parking_lot::Mutex;
use recall_cpu_simd::{CpuError, Spread, SpreadGraph, SpreadParams, TopK};
use recall_gpu_kernels::{DeviceGraph, Frontier, GraphUpload, Kernels, Seeds, offsets_u64};
use recall_gpu_sys::Gpu;
use std::sync::{Arc, Weak};

/// Device copies of shared graphs, kept while the graph lives.
#[derive(Debug, Default)]
pub(crate) struct GraphCache {
    entries: Mutex<Vec<ResidentGraph>>,
}

#[derive(Debug)]
struct ResidentGraph {
    id: u64,
    alive: Weak<GraphInner>,
    /// Shared with the calls spreading over it: a dropped entry is freed after the last of them.
    graph: Arc<DeviceGraph>,
}

impl GraphCache {
    /// How many shared graphs are on the device now (after freeing those that no longer exist and giving
    /// their memory back to the driver, best effort).
    pub(crate) fn len(&self, gpu: &Gpu) -> usize {
        let mut entries = self.entries.lock();
        drop_dead(gpu, &mut entries, |r| r.alive.strong_count() > 0).unwrap_or(entries.len())
    }

    /// Free the copies of graphs that no longer exist (their memory stays in the driver's pool).
    pub(crate) fn drop_dead_entries(&self) {
        self.entries.lock().retain(|r| r.alive.strong_count() > 0);
    }
}

/// Upload a validated graph's pull arrays and its out-edge targets, each array by `up` (the GPU backend's
/// `GraphStaging`: large arrays through pinned staging), into buffers on a stream of its own. The upload is
/// complete when this returns (`Kernels::upload_graph_with` waits for that stream, which waits for the staged
/// copies).
pub(crate) fn upload<U: GraphUpload>(
    gpu: &Gpu,
    kern: &Kernels,
    graph: &SpreadGraph,
    up: &mut U,
) -> Result<DeviceGraph, BackendError>
where
    BackendError: From<U::Error>,
{
    let gpu = &gpu.with_new_stream().map_err(map_gpu_error)?;
    let (in_ptr, in_src, in_w) = graph.pull_arrays();
    let (out_ptr, out_dst) = graph.push_targets();
    kern.upload_graph_with(
        gpu,
        &offsets_u64(in_ptr),
        in_src,
        in_w,
        &offsets_u64(out_ptr),
        out_dst,
        up,
    )
    .map_err(BackendError::from)
}

/// `params.hops` hops from `seeds` over a graph already on the device, the top `params.k`, and every
/// node's activation downloaded (sparse hops where the frontier is small: `Frontier::Auto`).
pub(crate) fn spread_on(
    gpu: &Gpu,
    kern: &Kernels,
    dev: &DeviceGraph,
    seeds: Seeds<'_>,
    params: &SpreadParams,
) -> Result<Spread, BackendError> {
    spread_on_with(gpu, kern, dev, seeds, params, Frontier::Auto)
}

/// [`spread_on`] with the hops' form chosen (every form gives the same bits; the diff-test runs each).
pub(crate) fn spread_on_with(
    gpu: &Gpu,
    kern: &Kernels,
    dev: &DeviceGraph,
    seeds: Seeds<'_>,
    params: &SpreadParams,
    frontier: Frontier,
) -> Result<Spread, BackendError> {
    let out = kern
        .spread_graph(
            gpu,
            dev,
            seeds,
            params.decay,
            params.threshold,
            params.hops,
            Some(params.k),
            true,
            frontier,
        )
        .map_err(map_kernel_error)?;
    if let Some(hop) = out.overflow {
        return Err(BackendError::Input(CpuError::ActivationOverflow {
            hop: hop as usize,
        }));
    }
    let Some(top) = out.top else {
        return Err(BackendError::Gpu("spreading returned no top-k".into()));
    };
    Ok(Spread {
        activation: out.activation,
        top: TopK {
            k: top.k,
            ids: top.ids,
            scores: top.scores,
        },
    })
}

/// Spreading over `graph`, uploading it on its first use and reusing the device copy afterwards (a seed
/// list goes to the launcher as it is: ascending distinct ids, validated by the executor).
pub(crate) fn spread_resident<U: GraphUpload>(
    gpu: &Gpu,
    kern: &Kernels,
    cache: &GraphCache,
    up: &mut U,
    graph: &SharedGraph,
    seeds: Seeds<'_>,
    params: &SpreadParams,
) -> Result<Spread, BackendError>
where
    BackendError: From<U::Error>,
{
    let dev = {
        let mut entries = cache.entries.lock();
        // Free the device copies of graphs that no longer exist.
        drop_dead(gpu, &mut entries, |r| r.alive.strong_count() > 0)?;
        if !entries.iter().any(|r| r.id == graph.id()) {
            let dev = match upload(gpu, kern, graph.graph(), up) {
                Ok(dev) => dev,
                Err(BackendError::OutOfMemory(_)) => {
                    // Make room: drop the other graphs' copies (they are uploaded again when used).
                    entries.clear();
                    upload(gpu, kern, graph.graph(), up)?
                }
                Err(e) => return Err(e),
            };
            entries.push(ResidentGraph {
                id: graph.id(),
                alive: graph.weak(),
                graph: Arc::new(dev),
            });
        }
        let Some(entry) = entries.iter().find(|r| r.id == graph.id()) else {
            return Err(BackendError::Gpu(
                "resident graph missing after upload".into(),
            ));
        };
        Arc::clone(&entry.graph)
    };
    spread_on(gpu, kern, &dev, seeds, params)
}
