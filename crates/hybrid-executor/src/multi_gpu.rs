//! Several GPUs behind one [`Backend`]: corpus handles sharded by rows over all of them, other calls sent to
//! the least-loaded one, and a failing GPU's work moved to another GPU or to the CPU with the same answer.
//!
//! Layout (`docs/adr/0014-multi-gpu-sharding.md` says why):
//! - knn against a corpus handle ([`Backend::knn_shared`], also single queries, which the executor batches):
//!   the rows are cut into one contiguous range per GPU, each GPU keeps its range resident (a shard is a
//!   [`SharedCorpus`] of its own, sharing the parent's memory, so each GPU's resident cache keys it by the
//!   shard's id), all shards run at once (one thread per GPU), and the per-shard top k are merged exactly by
//!   pair key (score in the metric's order, then lower global id): the answer of one device.
//! - Candidate scoring against a handle gathers the candidates' rows (ids ascending, so ties keep their
//!   order) and runs on the least-loaded GPU.
//! - Every other call (slices, graphs, k-means, clip-and-noise) runs whole on the least-loaded GPU (fewest
//!   calls in flight; ties rotate).
//! - A GPU whose call fails (any error but bad input) has that call's work moved to the least-loaded other
//!   GPU; a GPU that reports itself lost is not used again. Input errors are returned as they are (every
//!   device would say the same). Work no GPU could answer fails the whole call with the last GPU's error, and
//!   the executor answers it on the CPU as it does any failed GPU call: reported as the CPU's with its
//!   fallback reason, its time kept out of the GPU's calibration, and counted by the circuit breaker.
//!
//! Architecture invariant: nothing here knows about the driver; the GPUs are `Arc<dyn Backend>`, so CI
//! tests this file with CPU and fault-injecting backends standing in for GPUs.

use crate::backend::{Backend, BackendError, FastFormat, merge_topk, panic_is_lost};
use crate::device::Device;
use crate::shared_corpus::{Inner, SharedCorpus};
use crate::shared_graph::SharedGraph;
use crate::tenant::ContextGuard;
use parking_lot::Mutex;
use recall_cpu_simd::{KMeans, Metric, Spread, SpreadGraph, SpreadParams, TopK};
use std::fmt;
use std::sync::Arc;
use std::sync::Weak;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// Per-GPU counters of a [`MultiGpu`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GpuLoad {
    /// The device this entry is about.
    pub device: Option<Device>,
    /// Calls (whole calls or shards) this GPU answered.
    pub calls: u64,
    /// Calls (or shards) that failed here and were moved elsewhere.
    pub moved_away: u64,
    /// Calls running on it now.
    pub in_flight: usize,
    /// Whether it reported itself lost (then it is not used again).
    pub lost: bool,
    /// Nanoseconds it spent running calls or shards (from handing the work to its backend to the answer).
    pub busy_ns: u64,
}

/// knn of one shard on one backend with a given k.
type ShardRun<'a> =
    dyn Fn(&dyn Backend, &SharedCorpus, usize) -> Result<TopK, BackendError> + Sync + 'a;

/// One GPU slot.
struct Slot {
    backend: Arc<dyn Backend>,
    in_flight: AtomicUsize,
    lost: AtomicBool,
    calls: AtomicU64,
    moved_away: AtomicU64,
    busy_ns: AtomicU64,
}

/// Several GPUs as one backend (see the module docs).
pub struct MultiGpu {
    slots: Vec<Slot>,
    /// Rotates ties between equally loaded GPUs.
    next: AtomicUsize,
    /// The handles this layer sharded (the shards themselves are kept by each handle: `SharedCorpus::shards`),
    /// for [`MultiGpu::sharded_corpora`].
    sharded_handles: Mutex<Vec<Weak<Inner>>>,
    /// Calls no GPU could answer (failed back to the executor, which answers them on the CPU).
    to_cpu: AtomicU64,
    /// Sharded calls, and their nanoseconds from the call to the merged answer (with the per-GPU
    /// `busy_ns`, what the fan-out and merge cost beside the shards themselves).
    sharded_calls: AtomicU64,
    sharded_ns: AtomicU64,
    /// Threads that run the shards of GPUs 1.. of a sharded call (GPU 0's runs on the caller's thread),
    /// kept alive between calls; `None` (or `RECALL_MULTI_GPU_SPAWN=thread`) spawns one per shard and call.
    shard_pool: Option<rayon::ThreadPool>,
}

impl fmt::Debug for MultiGpu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiGpu")
            .field("gpus", &self.devices())
            .finish_non_exhaustive()
    }
}

/// The kept threads for the shards of GPUs 1.. of `n_gpus` (none for one GPU, or with
/// `RECALL_MULTI_GPU_SPAWN=thread`, or if they cannot start: then a thread is spawned per shard and call).
fn shard_pool(n_gpus: usize) -> Option<rayon::ThreadPool> {
    if n_gpus <= 1 || std::env::var("RECALL_MULTI_GPU_SPAWN").as_deref() == Ok("thread") {
        return None;
    }
    rayon::ThreadPoolBuilder::new()
        .num_threads(n_gpus - 1)
        .thread_name(|i| format!("recall-shard-{}", i + 1))
        .build()
        .map_err(|e| {
            tracing::warn!(error = %e,
                "recall: could not start the shard threads; spawning one per shard and call");
        })
        .ok()
}

/// Holds one in-flight count of a slot.
struct Busy<'a>(&'a AtomicUsize);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl MultiGpu {
    /// `gpus` (at least one) in shard order. Work none of them can answer fails with the last GPU's error (the
    /// executor then answers it on the CPU).
    pub fn new(gpus: Vec<Arc<dyn Backend>>) -> MultiGpu {
        let shard_pool = shard_pool(gpus.len());
        MultiGpu {
            slots: gpus
                .into_iter()
                .map(|backend| Slot {
                    backend,
                    in_flight: AtomicUsize::new(0),
                    lost: AtomicBool::new(false),
                    calls: AtomicU64::new(0),
                    moved_away: AtomicU64::new(0),
                    busy_ns: AtomicU64::new(0),
                })
                .collect(),
            next: AtomicUsize::new(0),
            sharded_handles: Mutex::new(Vec::new()),
            to_cpu: AtomicU64::new(0),
            sharded_calls: AtomicU64::new(0),
            sharded_ns: AtomicU64::new(0),
            shard_pool,
        }
    }

    /// The GPUs, in shard order.
    pub fn devices(&self) -> Vec<Device> {
        self.slots.iter().map(|s| s.backend.device()).collect()
    }

    /// How many GPUs this spreads over.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether there is no GPU (never: `new` is given at least one in practice).
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Per-GPU counters, in shard order.
    pub fn loads(&self) -> Vec<GpuLoad> {
        self.slots
            .iter()
            .map(|s| GpuLoad {
                device: Some(s.backend.device()),
                calls: s.calls.load(Ordering::Relaxed),
                moved_away: s.moved_away.load(Ordering::Relaxed),
                in_flight: s.in_flight.load(Ordering::Relaxed),
                lost: s.lost.load(Ordering::Relaxed),
                busy_ns: s.busy_ns.load(Ordering::Relaxed),
            })
            .collect()
    }

    /// Sharded calls so far, and their total nanoseconds from the call to the merged answer.
    pub fn sharded(&self) -> (u64, u64) {
        (
            self.sharded_calls.load(Ordering::Relaxed),
            self.sharded_ns.load(Ordering::Relaxed),
        )
    }

    /// Calls that no GPU could answer (one of their shards, or the whole call): each failed back to the
    /// executor, which answered it on the CPU.
    pub fn moved_to_cpu(&self) -> u64 {
        self.to_cpu.load(Ordering::Relaxed)
    }

    /// How many live corpus handles this layer has sharded.
    pub fn sharded_corpora(&self) -> usize {
        let mut handles = self.sharded_handles.lock();
        handles.retain(|h| h.strong_count() > 0);
        handles.len()
    }

    /// Healthy GPUs other than `except`, least loaded first (ties rotate from call to call).
    fn by_load(&self, except: Option<usize>) -> Vec<usize> {
        let n = self.slots.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed) % n.max(1);
        let mut order: Vec<usize> = (0..n)
            .map(|i| (start + i) % n)
            .filter(|&i| Some(i) != except && !self.slots[i].lost.load(Ordering::Relaxed))
            .collect();
        // Stable: among equal loads the rotated order stands.
        order.sort_by_key(|&i| self.slots[i].in_flight.load(Ordering::Relaxed));
        order
    }

    /// Run `f` on GPU `i`, counting it in flight. A failure other than bad input is returned as `Err(Some)`
    /// after bookkeeping (a lost device is marked); bad input is `Ok(Err)`.
    fn try_on<T>(
        &self,
        i: usize,
        f: &(dyn Fn(&dyn Backend) -> Result<T, BackendError> + Sync),
    ) -> Result<Result<T, BackendError>, BackendError> {
        let slot = &self.slots[i];
        slot.in_flight.fetch_add(1, Ordering::Relaxed);
        let _busy = Busy(&slot.in_flight);
        let start = std::time::Instant::now();
        let r = panic_is_lost("the GPU backend panicked", || f(slot.backend.as_ref()));
        let ns = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        slot.busy_ns.fetch_add(ns, Ordering::Relaxed);
        match r {
            Ok(v) => {
                slot.calls.fetch_add(1, Ordering::Relaxed);
                Ok(Ok(v))
            }
            // Bad input, or a shape the kernels refuse (every GPU's the same): not this GPU's fault, and no other
            // GPU would take it either.
            Err(e @ (BackendError::Input(_) | BackendError::Unfit(_))) => Ok(Err(e)),
            Err(e) => {
                slot.moved_away.fetch_add(1, Ordering::Relaxed);
                if matches!(e, BackendError::DeviceLost(_)) {
                    slot.lost.store(true, Ordering::Relaxed);
                }
                tracing::warn!(device = %slot.backend.device(), error = %e,
                    "recall: a GPU failed its part of a call; moving it to another device");
                Err(e)
            }
        }
    }

    /// Run `f` on GPU `first` if given and healthy, else (or when it fails) on the other GPUs least loaded
    /// first; when every GPU failed, the last one's error (`DeviceLost` when none is left to try).
    fn run_anywhere<T>(
        &self,
        first: Option<usize>,
        f: &(dyn Fn(&dyn Backend) -> Result<T, BackendError> + Sync),
    ) -> Result<T, BackendError> {
        let mut tried = None;
        let mut failure = None;
        if let Some(i) = first
            && !self.slots[i].lost.load(Ordering::Relaxed)
        {
            match self.try_on(i, f) {
                Ok(r) => return r,
                Err(e) => {
                    tried = Some(i);
                    failure = Some(e);
                }
            }
        }
        for i in self.by_load(tried) {
            match self.try_on(i, f) {
                Ok(r) => return r,
                Err(e) => failure = Some(e),
            }
        }
        self.to_cpu.fetch_add(1, Ordering::Relaxed);
        Err(failure.unwrap_or_else(|| {
            BackendError::DeviceLost("every GPU of the multi-GPU layer is lost".into())
        }))
    }

    /// An independent call: the least-loaded GPU, moved on failure.
    fn independent<T>(
        &self,
        f: &(dyn Fn(&dyn Backend) -> Result<T, BackendError> + Sync),
    ) -> Result<T, BackendError> {
        self.run_anywhere(None, f)
    }

    /// The shards of `corpus`, one per GPU (fewer for fewer rows): shard `i` belongs to GPU `i`. Made on first
    /// use and kept by the handle, so they go when it does.
    fn shards_of(&self, corpus: &SharedCorpus) -> Vec<(usize, SharedCorpus)> {
        let (parts, made) = corpus.shards(self.slots.len());
        if made {
            let mut handles = self.sharded_handles.lock();
            handles.retain(|h| h.strong_count() > 0);
            handles.push(corpus.weak());
        }
        parts
    }

    /// knn against a handle, sharded: every shard on its GPU at once (one thread each), each shard's top
    /// `min(k, rows)` merged exactly into the top `k`.
    fn sharded_knn(
        &self,
        queries: &[f32],
        corpus: &SharedCorpus,
        metric: Metric,
        k: usize,
        run: &ShardRun<'_>,
    ) -> Result<TopK, BackendError> {
        let parts = self.shards_of(corpus);
        if parts.len() <= 1 {
            return self.independent(&|b| run(b, corpus, k));
        }
        let start = std::time::Instant::now();
        // The caller's tenant, for the shards that run on other threads: a GPU backend charges a call's
        // buffers to the tenant of the thread that runs it (its VRAM quota in the memory pool).
        let tenant = crate::tenant::current_tenant();
        let work = |i: usize| {
            let _tenant = ContextGuard::enter(tenant);
            let (_, part) = &parts[i];
            let kk = k.min(part.n_rows());
            self.run_anywhere(Some(i), &|b| run(b, part, kk))
        };
        let results: Vec<Result<TopK, BackendError>> = match &self.shard_pool {
            Some(pool) => {
                let mut rest: Vec<Option<Result<TopK, BackendError>>> =
                    (1..parts.len()).map(|_| None).collect();
                let mut first = None;
                pool.in_place_scope(|s| {
                    for (i, slot) in rest.iter_mut().enumerate() {
                        let work = &work;
                        s.spawn(move |_| *slot = Some(work(i + 1)));
                    }
                    first = Some(work(0));
                });
                std::iter::once(first)
                    .chain(rest)
                    .map(|r| {
                        r.unwrap_or_else(|| Err(BackendError::Gpu("a shard did not run".into())))
                    })
                    .collect()
            }
            None => std::thread::scope(|s| {
                let handles: Vec<_> = (1..parts.len())
                    .map(|i| {
                        let work = &work;
                        s.spawn(move || work(i))
                    })
                    .collect();
                let mut out = vec![work(0)];
                for h in handles {
                    out.push(h.join().unwrap_or_else(|_| {
                        Err(BackendError::Gpu("a shard's thread panicked".into()))
                    }));
                }
                out
            }),
        };
        let mut answers = Vec::with_capacity(parts.len());
        for ((base, _), r) in parts.iter().zip(results) {
            answers.push((*base, r?));
        }
        let nq = queries.len() / corpus.dim().max(1);
        let merged = merge_topk(&answers, nq, k, metric);
        let ns = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.sharded_calls.fetch_add(1, Ordering::Relaxed);
        self.sharded_ns.fetch_add(ns, Ordering::Relaxed);
        Ok(merged)
    }
}

impl Backend for MultiGpu {
    fn device(&self) -> Device {
        self.slots
            .first()
            .map_or(Device::Gpu { ordinal: 0 }, |s| s.backend.device())
    }

    fn release_cached_memory(&self) {
        for s in &self.slots {
            s.backend.release_cached_memory();
        }
    }

    fn cosine_scores(
        &self,
        queries: &[f32],
        corpus: &[f32],
        dim: usize,
    ) -> Result<Vec<f32>, BackendError> {
        self.independent(&|b| b.cosine_scores(queries, corpus, dim))
    }

    fn similarity(
        &self,
        queries: &[f32],
        corpus: &[f32],
        dim: usize,
        metric: Metric,
    ) -> Result<Vec<f32>, BackendError> {
        self.independent(&|b| b.similarity(queries, corpus, dim, metric))
    }

    fn knn(
        &self,
        queries: &[f32],
        corpus: &[f32],
        dim: usize,
        metric: Metric,
        k: usize,
    ) -> Result<TopK, BackendError> {
        self.independent(&|b| b.knn(queries, corpus, dim, metric, k))
    }

    fn knn_shared(
        &self,
        queries: &[f32],
        corpus: &SharedCorpus,
        metric: Metric,
        k: usize,
    ) -> Result<TopK, BackendError> {
        self.sharded_knn(queries, corpus, metric, k, &|b, part, kk| {
            b.knn_shared(queries, part, metric, kk)
        })
    }

    fn knn_fast(
        &self,
        queries: &[f32],
        corpus: &[f32],
        dim: usize,
        metric: Metric,
        k: usize,
        format: FastFormat,
    ) -> Result<TopK, BackendError> {
        self.independent(&|b| b.knn_fast(queries, corpus, dim, metric, k, format))
    }

    fn knn_shared_fast(
        &self,
        queries: &[f32],
        corpus: &SharedCorpus,
        metric: Metric,
        k: usize,
        format: FastFormat,
    ) -> Result<TopK, BackendError> {
        self.sharded_knn(queries, corpus, metric, k, &|b, part, kk| {
            b.knn_shared_fast(queries, part, metric, kk, format)
        })
    }

    fn score_candidates(
        &self,
        queries: &[f32],
        corpus: &[f32],
        dim: usize,
        metric: Metric,
        offsets: &[usize],
        ids: &[u32],
        k: usize,
    ) -> Result<TopK, BackendError> {
        self.independent(&|b| b.score_candidates(queries, corpus, dim, metric, offsets, ids, k))
    }

    fn score_candidates_shared(
        &self,
        queries: &[f32],
        corpus: &SharedCorpus,
        metric: Metric,
        offsets: &[usize],
        ids: &[u32],
        k: usize,
    ) -> Result<TopK, BackendError> {
        // The candidates' rows, ids ascending so that local ids order as the global ones (ties in score
        // then break the same way); scores are per row, so the same bits as against the whole corpus.
        let dim = corpus.dim();
        let mut unique: Vec<u32> = ids.to_vec();
        unique.sort_unstable();
        unique.dedup();
        let data = corpus.data();
        let mut rows = Vec::with_capacity(unique.len() * dim);
        for &id in &unique {
            let r = id as usize;
            let Some(row) = data.get(r * dim..(r + 1) * dim) else {
                return Err(BackendError::Input(
                    recall_cpu_simd::CpuError::IdOutOfRange {
                        what: "candidate ids",
                        index: 0,
                        id: id as u64,
                        n: corpus.n_rows(),
                    },
                ));
            };
            rows.extend_from_slice(row);
        }
        let local: Vec<u32> = ids
            .iter()
            .map(|id| unique.partition_point(|u| u < id) as u32)
            .collect();
        let mut r = self.independent(&|b| {
            b.score_candidates(queries, &rows, dim, metric, offsets, &local, k)
        })?;
        for id in &mut r.ids {
            if let Some(g) = unique.get(*id as usize) {
                *id = *g;
            }
        }
        Ok(r)
    }

    fn spread(
        &self,
        graph: &SpreadGraph,
        seeds: &[f32],
        params: &SpreadParams,
    ) -> Result<Spread, BackendError> {
        self.independent(&|b| b.spread(graph, seeds, params))
    }

    fn spread_shared(
        &self,
        graph: &SharedGraph,
        seeds: &[f32],
        params: &SpreadParams,
    ) -> Result<Spread, BackendError> {
        self.independent(&|b| b.spread_shared(graph, seeds, params))
    }

    fn spread_shared_from(
        &self,
        graph: &SharedGraph,
        seeds: &[(u32, f32)],
        params: &SpreadParams,
    ) -> Result<Spread, BackendError> {
        self.independent(&|b| b.spread_shared_from(graph, seeds, params))
    }

    fn clip_and_noise_into(
        &self,
        x: &[f32],
        dim: usize,
        clip: f32,
        sigma: f32,
        seed: u64,
        out: &mut [f32],
    ) -> Result<(), BackendError> {
        // Held for whichever GPU runs it (each attempt writes every value).
        let out = parking_lot::Mutex::new(out);
        self.independent(&|b| b.clip_and_noise_into(x, dim, clip, sigma, seed, &mut out.lock()))
    }

    fn kmeans(
        &self,
        points: &[f32],
        dim: usize,
        k: usize,
        iters: usize,
        seed: u64,
    ) -> Result<KMeans, BackendError> {
        self.independent(&|b| b.kmeans(points, dim, k, iters, seed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::CpuBackend;

    /// A stand-in GPU that answers like the CPU and remembers the shards it was given, without keeping them.
    struct Remembers {
        ordinal: usize,
        seen: Mutex<Vec<Weak<Inner>>>,
    }

    impl Backend for Remembers {
        fn device(&self) -> Device {
            Device::Gpu {
                ordinal: self.ordinal,
            }
        }

        fn knn_shared(
            &self,
            queries: &[f32],
            corpus: &SharedCorpus,
            metric: Metric,
            k: usize,
        ) -> Result<TopK, BackendError> {
            self.seen.lock().push(corpus.weak());
            CpuBackend.knn(queries, corpus.data(), corpus.dim(), metric, k)
        }
    }

    /// A GPU frees its copy of a shard once no handle of the shard lives: the shards must go with their
    /// handle, not wait in this layer for its next sharded call (which a process that dropped its last corpus
    /// never makes).
    #[test]
    fn the_shards_go_when_their_handle_goes() {
        let gpus: Vec<Arc<Remembers>> = (0..2)
            .map(|ordinal| {
                Arc::new(Remembers {
                    ordinal,
                    seen: Mutex::new(Vec::new()),
                })
            })
            .collect();
        let m = MultiGpu::new(gpus.iter().map(|g| g.clone() as Arc<dyn Backend>).collect());
        let corpus = SharedCorpus::new((0..40).map(|x| x as f32).collect(), 4).unwrap();
        for _ in 0..2 {
            m.knn_shared(&[1.0, 0.0, 0.0, 0.0], &corpus, Metric::Dot, 3)
                .unwrap();
        }
        let seen: Vec<Weak<Inner>> = gpus.iter().flat_map(|g| g.seen.lock().clone()).collect();
        assert_eq!(seen.len(), 4, "each GPU ran its shard twice");
        assert!(seen.iter().all(|w| w.strong_count() > 0));
        assert_eq!(m.sharded_corpora(), 1);
        drop(corpus);
        assert!(
            seen.iter().all(|w| w.strong_count() == 0),
            "a shard outlived its handle"
        );
        assert_eq!(m.sharded_corpora(), 0);
    }
}
