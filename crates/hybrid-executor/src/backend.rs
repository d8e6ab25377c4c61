use crate::device::Device;
use crate::shared_corpus::SharedCorpus;
use crate::shared_graph::SharedGraph;
use recall_cpu_simd::{
    Corpus, Cpu, CpuError, KMeans, Metric, Spread, SpreadGraph, SpreadParams, TopK,
};
use thiserror::Error;

/// The 16-bit operand format of fast mode (`docs/numerics.md`, "Fast mode").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FastFormat {
    /// IEEE binary16.
    F16,
    /// bfloat16.
    Bf16,
}

/// A backend's failure. Only the GPU backend fails for reasons other than the input.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BackendError {
    #[error(transparent)]
    Input(#[from] CpuError),
    /// The device could not hold the call's data.
    #[error("gpu out of memory: {0}")]
    OutOfMemory(String),
    /// The device is gone or its context is poisoned: stop using it.
    #[error("gpu device lost: {0}")]
    DeviceLost(String),
    /// Any other GPU failure (load, launch, copy, an answer that fails its check).
    #[error("gpu failure: {0}")]
    Gpu(String),
    /// This backend does not implement the op (test doubles); the executor answers on the CPU, and the breaker
    /// does not count it.
    #[error("{op} is not implemented by this backend")]
    Unsupported { op: &'static str },
    /// The device's kernels do not take this call's shape (a size past what one launch carries, a count the
    /// kernels' limits refuse); not a fault of the device: the executor answers on the CPU, and the breaker
    /// does not count it, so a caller's unusual shapes cannot keep everyone else off the GPU.
    #[error("the gpu's kernels do not take this call: {0}")]
    Unfit(String),
}

/// One device's implementation of every op. Input arrives validated (see the crate's invariants).
///
/// The CPU, GPU and fault-injecting backends implement every method; the defaults (`Unsupported`) exist so
/// that test doubles need only the ops they exercise.
pub trait Backend: Send + Sync {
    fn device(&self) -> Device;

    /// Give the device memory the backend keeps cached back to the driver. The executor calls it when a
    /// call ran out of device memory, before it retries with a smaller batch, so that memory cached by one
    /// allocator (the memory pool) can serve another (the driver's pool) and the other way round.
    /// Backends that cache nothing do nothing.
    fn release_cached_memory(&self) {}

    /// Cosine similarity of `queries` (`n_queries x dim`) against `corpus` (`n_rows x dim`), query-major.
    fn cosine_scores(
        &self,
        queries: &[f32],
        corpus: &[f32],
        dim: usize,
    ) -> Result<Vec<f32>, BackendError> {
        self.similarity(queries, corpus, dim, Metric::Cosine)
    }

    /// Scores of every query against every corpus row for `metric`, query-major (`n_queries x n_rows`).
    fn similarity(
        &self,
        queries: &[f32],
        corpus: &[f32],
        dim: usize,
        metric: Metric,
    ) -> Result<Vec<f32>, BackendError> {
        let _ = (queries, corpus, dim, metric);
        Err(BackendError::Unsupported { op: "similarity" })
    }

    /// The `k` best corpus rows of each query for `metric` (similarity fused with top-k).
    fn knn(
        &self,
        queries: &[f32],
        corpus: &[f32],
        dim: usize,
        metric: Metric,
        k: usize,
    ) -> Result<TopK, BackendError> {
        let _ = (queries, corpus, dim, metric, k);
        Err(BackendError::Unsupported { op: "knn" })
    }

    /// [`Backend::knn`] against a [`SharedCorpus`]. A backend may keep the corpus resident between calls
    /// (the GPU backend does); the default runs the slice path.
    fn knn_shared(
        &self,
        queries: &[f32],
        corpus: &SharedCorpus,
        metric: Metric,
        k: usize,
    ) -> Result<TopK, BackendError> {
        self.knn(queries, corpus.data(), corpus.dim(), metric, k)
    }

    /// [`Backend::score_candidates`] against a [`SharedCorpus`]. A backend may keep the corpus resident
    /// between calls (the GPU backend does); the default runs the slice path.
    fn score_candidates_shared(
        &self,
        queries: &[f32],
        corpus: &SharedCorpus,
        metric: Metric,
        offsets: &[usize],
        ids: &[u32],
        k: usize,
    ) -> Result<TopK, BackendError> {
        self.score_candidates(
            queries,
            corpus.data(),
            corpus.dim(),
            metric,
            offsets,
            ids,
            k,
        )
    }

    /// [`Backend::knn`] in fast mode (`docs/numerics.md`, "Fast mode"): a backend without a fast path
    /// returns the exact answer, which is within fast mode's bound.
    fn knn_fast(
        &self,
        queries: &[f32],
        corpus: &[f32],
        dim: usize,
        metric: Metric,
        k: usize,
        format: FastFormat,
    ) -> Result<TopK, BackendError> {
        let _ = format;
        self.knn(queries, corpus, dim, metric, k)
    }

    /// [`Backend::knn_shared`] in fast mode (see [`Backend::knn_fast`]).
    fn knn_shared_fast(
        &self,
        queries: &[f32],
        corpus: &SharedCorpus,
        metric: Metric,
        k: usize,
        format: FastFormat,
    ) -> Result<TopK, BackendError> {
        let _ = format;
        self.knn_shared(queries, corpus, metric, k)
    }

    /// The `k` best of each query's candidate rows `ids[offsets[q] .. offsets[q + 1]]`.
    #[allow(clippy::too_many_arguments)]
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
        let _ = (queries, corpus, dim, metric, offsets, ids, k);
        Err(BackendError::Unsupported {
            op: "score_candidates",
        })
    }

    /// Activation spreading from `seeds` over `graph` (validated inputs).
    fn spread(
        &self,
        graph: &SpreadGraph,
        seeds: &[f32],
        params: &SpreadParams,
    ) -> Result<Spread, BackendError> {
        let _ = (graph, seeds, params);
        Err(BackendError::Unsupported { op: "spread" })
    }

    /// [`Backend::spread`] over a [`SharedGraph`]. A backend may keep the graph resident between calls (the
    /// GPU backend does); the default runs the plain path.
    fn spread_shared(
        &self,
        graph: &SharedGraph,
        seeds: &[f32],
        params: &SpreadParams,
    ) -> Result<Spread, BackendError> {
        self.spread(graph.graph(), seeds, params)
    }

    /// [`Backend::spread_shared`] from a seed list: `(node, value)` pairs, validated, node ids ascending and
    /// distinct (the executor sorts a copy), standing for the dense vector with `seed[node] = value` and `0.0`
    /// elsewhere. The answer is that of the dense vector, bit for bit. The default makes the dense vector and
    /// runs [`Backend::spread_shared`]; the GPU backend hands the pairs to its launcher instead.
    fn spread_shared_from(
        &self,
        graph: &SharedGraph,
        seeds: &[(u32, f32)],
        params: &SpreadParams,
    ) -> Result<Spread, BackendError> {
        self.spread_shared(graph, &densify_seeds(graph.n_nodes(), seeds), params)
    }

    /// Clip every row of `x` to L2 norm `clip`, then add `sigma` times Gaussian noise from `seed`'s stream:
    /// [`Backend::clip_and_noise_into`] a fresh output.
    fn clip_and_noise(
        &self,
        x: &[f32],
        dim: usize,
        clip: f32,
        sigma: f32,
        seed: u64,
    ) -> Result<Vec<f32>, BackendError> {
        let mut out = recall_cpu_simd::output_buffer(x.len());
        self.clip_and_noise_into(x, dim, clip, sigma, seed, &mut out)?;
        Ok(out)
    }

    /// [`Backend::clip_and_noise`] into `out` (`x.len()` values, every one written): what a backend implements.
    /// The one op whose values arrive unchecked (their shape and the parameters are checked): the backend that
    /// runs it checks them, a NaN or infinity being [`BackendError::Input`] as the executor's own check would
    /// have been, so that the CPU checks them in the pass that reads them instead of the input being read twice
    /// (a GPU scans them before its upload).
    fn clip_and_noise_into(
        &self,
        x: &[f32],
        dim: usize,
        clip: f32,
        sigma: f32,
        seed: u64,
        out: &mut [f32],
    ) -> Result<(), BackendError> {
        let _ = (x, dim, clip, sigma, seed, out);
        Err(BackendError::Unsupported {
            op: "clip_and_noise",
        })
    }

    /// k-means of `points` (`n x dim`) into `k` clusters for `iters` Lloyd iterations from `seed`.
    fn kmeans(
        &self,
        points: &[f32],
        dim: usize,
        k: usize,
        iters: usize,
        seed: u64,
    ) -> Result<KMeans, BackendError> {
        let _ = (points, dim, k, iters, seed);
        Err(BackendError::Unsupported { op: "kmeans" })
    }
}

/// Every op on the CPU (`recall-cpu-simd`).
///
/// Its input arrives validated (the trait's contract: the executor checks shapes and values once, before
/// it picks a device; clip-and-noise's values excepted, [`Backend::clip_and_noise_into`]), so it runs `recall-cpu-simd` through a [`Cpu::prevalidated`] handle: shapes,
/// lengths and ids are still checked (indexing stays in bounds), the scans over values (NaN, infinity,
/// signs, duplicate ids) are not done a second time. Called with values the executor would have
/// refused, the answer is unspecified; call `recall-cpu-simd` itself to have them checked.
#[derive(Debug, Default, Clone, Copy)]
pub struct CpuBackend;

/// The CPU engine for input the executor has validated.
fn cpu() -> Cpu {
    Cpu::new().prevalidated()
}

impl Backend for CpuBackend {
    fn device(&self) -> Device {
        Device::Cpu
    }

    fn similarity(
        &self,
        queries: &[f32],
        corpus: &[f32],
        dim: usize,
        metric: Metric,
    ) -> Result<Vec<f32>, BackendError> {
        Ok(cpu().similarity(queries, &Corpus::f32(corpus, dim), metric)?)
    }

    fn knn(
        &self,
        queries: &[f32],
        corpus: &[f32],
        dim: usize,
        metric: Metric,
        k: usize,
    ) -> Result<TopK, BackendError> {
        Ok(cpu().knn(queries, &Corpus::f32(corpus, dim), metric, k)?)
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
        Ok(cpu().score_candidates(queries, &Corpus::f32(corpus, dim), metric, offsets, ids, k)?)
    }

    fn spread(
        &self,
        graph: &SpreadGraph,
        seeds: &[f32],
        params: &SpreadParams,
    ) -> Result<Spread, BackendError> {
        Ok(cpu().spread(graph, seeds, params)?)
    }

    fn kmeans(
        &self,
        points: &[f32],
        dim: usize,
        k: usize,
        iters: usize,
        seed: u64,
    ) -> Result<KMeans, BackendError> {
        Ok(cpu().kmeans(points, dim, k, iters, seed)?)
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
        // A handle that checks values: clip-and-noise's arrive unchecked, and it checks them in its one pass.
        Ok(Cpu::new().clip_and_noise_into(x, dim, clip, sigma, seed, out)?)
    }
}

/// `f`, a call into a GPU backend, with a panic below it (a driver binding, a bug) turned into
/// [`BackendError::DeviceLost`] with `message`: a panic there must never reach the caller, who is answered on the
/// CPU instead, and the device is taken out of use.
pub(crate) fn panic_is_lost<T>(
    message: &str,
    f: impl FnOnce() -> Result<T, BackendError>,
) -> Result<T, BackendError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .unwrap_or_else(|_| Err(BackendError::DeviceLost(message.into())))
}

/// The dense seed vector of `n` nodes that a validated seed list stands for (`seed[node] = value`, `0.0`
/// elsewhere; ids below `n`, as the executor checked).
pub(crate) fn densify_seeds(n: usize, seeds: &[(u32, f32)]) -> Vec<f32> {
    let mut dense = vec![0.0f32; n];
    for &(id, value) in seeds {
        if let Some(d) = dense.get_mut(id as usize) {
            *d = value;
        }
    }
    dense
}

/// Merge per-part top lists (ids relative to each part's first row `base`) into the top `k` per query by
/// pair key: the total order of the numerics contract, so the result is the whole corpus's top `k`.
pub(crate) fn merge_topk(parts: &[(usize, TopK)], nq: usize, k: usize, metric: Metric) -> TopK {
    let order = metric.order();
    let mut result = TopK {
        k,
        ids: Vec::with_capacity(nq * k),
        scores: Vec::with_capacity(nq * k),
    };
    let mut list: Vec<(u64, f32)> = Vec::new();
    for q in 0..nq {
        list.clear();
        for (base, part) in parts {
            let kp = part.k;
            for j in q * kp..(q + 1) * kp {
                let id = (*base + part.ids[j] as usize) as u32;
                list.push((
                    recall_cpu_simd::pair_key(part.scores[j], id, order),
                    part.scores[j],
                ));
            }
        }
        list.sort_unstable_by_key(|e| e.0);
        for &(key, score) in list.iter().take(k) {
            result.ids.push(key as u32);
            result.scores.push(score);
        }
    }
    result
}
