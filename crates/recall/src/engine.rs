use crate::Error;
use recall_cpu_simd::{KMeans, Metric, SpreadGraph, SpreadParams, TopK};
use recall_hybrid_executor::{
    CallOptions, Device, DevicePolicy, Executor, ExecutorConfig, GpuStatus, Outcome,
    SharedCorpus as Corpus, SharedGraph as Graph,
};

/// The entry point: owns the backends and answers every op.
///
/// Create one per process (it opens the GPU and loads the kernels once) and share it; it is `Send + Sync`.
#[derive(Debug)]
pub struct Engine {
    exec: Executor,
}

/// Options for an [`Engine`]; [`Engine::new`] uses the defaults and the environment.
#[derive(Debug, Clone, Default)]
pub struct EngineBuilder {
    device: Option<DevicePolicy>,
    force_sm: Option<u32>,
    gpu_min_work: Option<u64>,
}

impl EngineBuilder {
    /// Which devices calls may use. Overrides `RECALL_DEVICE`.
    pub fn device(mut self, policy: DevicePolicy) -> Self {
        self.device = Some(policy);
        self
    }

    /// Run one arch's kernel code only (e.g. `86` for sm_86 PTX, JIT-compiled for the device at hand).
    /// For differential testing; normal use lets the loader pick.
    pub fn force_arch(mut self, sm: u32) -> Self {
        self.force_sm = Some(sm);
        self
    }

    /// Under the `auto` policy, calls with fewer multiply-adds than this run on the CPU. Setting it turns
    /// off the measured break-even sizes (calibration) in favour of this one.
    pub fn gpu_min_work(mut self, multiply_adds: u64) -> Self {
        self.gpu_min_work = Some(multiply_adds);
        self
    }

    pub fn build(self) -> Result<Engine, Error> {
        let policy = match self.device {
            Some(p) => p,
            None => DevicePolicy::from_env().map_err(Error::Config)?,
        };
        let mut config = ExecutorConfig {
            policy,
            force_sm: self.force_sm,
            ..ExecutorConfig::default()
        };
        if let Some(w) = self.gpu_min_work {
            config.gpu_min_work = w;
            config.calibrate = false;
        }
        Ok(Engine {
            exec: Executor::new(config)?,
        })
    }
}

/// A score matrix and where it was computed.
#[derive(Debug, Clone, PartialEq)]
pub struct Scores {
    /// Row-major `n_queries x n_rows`: `values[q * n_rows + r]`.
    pub values: Vec<f32>,
    pub n_queries: usize,
    pub n_rows: usize,
    pub device: Device,
    /// Set when the GPU was chosen, failed, and the CPU answered instead.
    pub fallback: Option<String>,
}

/// The `k` best (id, score) pairs of each query, best first (ties to the lower id), and where they were
/// computed.
#[derive(Debug, Clone, PartialEq)]
pub struct Neighbors {
    pub k: usize,
    /// `ids[q * k .. (q + 1) * k]` are query `q`'s neighbours, best first.
    pub ids: Vec<u32>,
    /// The scores of those neighbours (for `l2`, squared distances).
    pub scores: Vec<f32>,
    pub device: Device,
    /// Set when the GPU was chosen, failed, and the CPU answered instead.
    pub fallback: Option<String>,
}

/// The result of [`Engine::spread`].
#[derive(Debug, Clone, PartialEq)]
pub struct Activation {
    /// Per node: its seed plus the activation it received over all hops.
    pub activation: Vec<f32>,
    /// The most activated nodes, best first (ties to the lower node id).
    pub top: TopK,
    pub device: Device,
    pub fallback: Option<String>,
}

/// The result of [`Engine::clip_and_noise`].
#[derive(Debug, Clone, PartialEq)]
pub struct Noised {
    /// The clipped, noised rows, row-major like the input.
    pub values: Vec<f32>,
    pub dim: usize,
    pub device: Device,
    pub fallback: Option<String>,
}

/// The result of [`Engine::kmeans`].
#[derive(Debug, Clone, PartialEq)]
pub struct Clusters {
    /// `k * dim` values, row-major.
    pub centroids: Vec<f32>,
    /// Per point, its cluster.
    pub assignments: Vec<u32>,
    /// Per iteration, the sum of squared distances of the points to their centroids.
    pub inertia: Vec<f64>,
    pub device: Device,
    pub fallback: Option<String>,
}

impl Neighbors {
    fn from_outcome(o: Outcome<TopK>) -> Neighbors {
        Neighbors {
            k: o.value.k,
            ids: o.value.ids,
            scores: o.value.scores,
            device: o.device,
            fallback: o.fallback,
        }
    }

    /// How many queries the result holds.
    pub fn n_queries(&self) -> usize {
        self.ids.len().checked_div(self.k).unwrap_or(0)
    }

    /// Query `q`'s neighbours: (ids, scores), best first.
    pub fn query(&self, q: usize) -> (&[u32], &[f32]) {
        (
            &self.ids[q * self.k..(q + 1) * self.k],
            &self.scores[q * self.k..(q + 1) * self.k],
        )
    }
}

impl Engine {
    /// An engine with the default options and `RECALL_DEVICE` from the environment.
    pub fn new() -> Result<Engine, Error> {
        Engine::builder().build()
    }

    pub fn builder() -> EngineBuilder {
        EngineBuilder::default()
    }

    /// The GPU in use, or why there is none.
    pub fn gpu_status(&self) -> &GpuStatus {
        self.exec.gpu_status()
    }

    pub fn device_policy(&self) -> DevicePolicy {
        self.exec.config().policy
    }

    /// Where a call of `multiply_adds` work would run, and why.
    pub fn explain(&self, multiply_adds: u64) -> (Device, String) {
        self.exec.explain(multiply_adds)
    }

    /// (calls run on the CPU, on the GPU, GPU calls that fell back to the CPU) since the engine started.
    pub fn counters(&self) -> (u64, u64, u64) {
        self.exec.counters()
    }

    /// Every executor metric (calls by op and device, fallbacks by reason, OOM events, batch sizes,
    /// latency quantiles, GPU memory in use) in the Prometheus text format.
    pub fn metrics_text(&self) -> String {
        self.exec.prometheus_text()
    }

    /// Cosine similarity of each query (`n_queries x dim`, row-major) against each corpus row
    /// (`n_rows x dim`). Exact mode: the same bits on every device (`docs/numerics.md`).
    pub fn cosine_similarity(
        &self,
        queries: &[f32],
        corpus: &[f32],
        dim: usize,
    ) -> Result<Scores, Error> {
        let out = self.exec.cosine_scores(queries, corpus, dim)?;
        Ok(Scores {
            n_queries: queries.len() / dim,
            n_rows: corpus.len() / dim,
            values: out.value,
            device: out.device,
            fallback: out.fallback,
        })
    }

    /// The GPU backend in use, for the benchmark harness and self-tests.
    #[doc(hidden)]
    pub fn gpu_backend(&self) -> Option<&recall_hybrid_executor::GpuBackend> {
        self.exec.gpu_backend()
    }

    /// Scores of each query against each corpus row for `metric` (row-major `n_queries x n_rows`).
    pub fn similarity(
        &self,
        queries: &[f32],
        corpus: &[f32],
        dim: usize,
        metric: Metric,
    ) -> Result<Scores, Error> {
        let out = self
            .exec
            .similarity(&CallOptions::default(), queries, corpus, dim, metric)?;
        Ok(Scores {
            n_queries: queries.len() / dim,
            n_rows: corpus.len() / dim,
            values: out.value,
            device: out.device,
            fallback: out.fallback,
        })
    }

    /// The `k` nearest corpus rows of each query (`1 <= k <= n_rows`): similarity fused with top-k; the
    /// full score matrix is never returned. Exact mode: the same ids and score bits on every device.
    pub fn knn(
        &self,
        queries: &[f32],
        corpus: &[f32],
        dim: usize,
        metric: Metric,
        k: usize,
    ) -> Result<Neighbors, Error> {
        Ok(Neighbors::from_outcome(self.exec.knn(
            &CallOptions::default(),
            queries,
            corpus,
            dim,
            metric,
            k,
        )?))
    }

    /// Validate `data` (`n_rows x dim`, row-major) once and keep it for repeated searches with
    /// [`Engine::knn_in`]: on the GPU the rows are uploaded on first use and stay on the device until the
    /// last clone of the returned [`Corpus`] is dropped.
    pub fn corpus(&self, data: Vec<f32>, dim: usize) -> Result<Corpus, Error> {
        Ok(Corpus::new(data, dim)?)
    }

    /// [`Engine::knn`] against a [`Corpus`] made by [`Engine::corpus`]: the same answer, without moving or
    /// re-checking the corpus on every call.
    pub fn knn_in(
        &self,
        queries: &[f32],
        corpus: &Corpus,
        metric: Metric,
        k: usize,
    ) -> Result<Neighbors, Error> {
        Ok(Neighbors::from_outcome(self.exec.knn_shared(
            &CallOptions::default(),
            queries,
            corpus,
            metric,
            k,
        )?))
    }

    /// Re-score candidate lists (e.g. an HNSW search's candidates): query `q` ranks the corpus rows
    /// `ids[offsets[q] .. offsets[q + 1]]` and keeps the best `k`. Ids must be below the corpus size and
    /// distinct within a list; `k` at most the shortest list.
    #[allow(clippy::too_many_arguments)]
    pub fn score_candidates(
        &self,
        queries: &[f32],
        corpus: &[f32],
        dim: usize,
        metric: Metric,
        offsets: &[usize],
        ids: &[u32],
        k: usize,
    ) -> Result<Neighbors, Error> {
        Ok(Neighbors::from_outcome(self.exec.score_candidates(
            &CallOptions::default(),
            queries,
            corpus,
            dim,
            metric,
            offsets,
            ids,
            k,
        )?))
    }

    /// Activation spreading: seed activations flow over the weighted edges of `graph` for `params.hops`
    /// hops (decayed, thresholded, accumulated); returns every node's activation and the top `params.k`
    /// nodes. Build the graph once with [`SpreadGraph::from_csr`] (it validates and transposes the CSR).
    pub fn spread(
        &self,
        graph: &SpreadGraph,
        seeds: &[f32],
        params: &SpreadParams,
    ) -> Result<Activation, Error> {
        let o = self
            .exec
            .spread(&CallOptions::default(), graph, seeds, params)?;
        Ok(Activation {
            activation: o.value.activation,
            top: o.value.top,
            device: o.device,
            fallback: o.fallback,
        })
    }

    /// Validate a CSR graph once (`indptr` has `n_nodes + 1` entries; edge `e` in `indptr[u] .. indptr[u + 1]`
    /// goes from `u` to `indices[e]` with weight `weights[e]`), transpose it for the pull order, and keep it
    /// for repeated [`Engine::spread_in`] calls: on the GPU it is uploaded on first use and stays on the device
    /// until the last clone of the returned [`Graph`] is dropped. [`crate::io::read_graph`] makes one from a
    /// SciPy `.npz` file.
    pub fn graph(
        &self,
        indptr: &[usize],
        indices: &[u32],
        weights: &[f32],
    ) -> Result<Graph, Error> {
        Ok(Graph::from_csr(indptr, indices, weights)?)
    }

    /// [`Engine::spread`] over a [`Graph`] made by [`Engine::graph`]: the same answer, without validating,
    /// transposing or uploading the graph on every call.
    pub fn spread_in(
        &self,
        graph: &Graph,
        seeds: &[f32],
        params: &SpreadParams,
    ) -> Result<Activation, Error> {
        let o = self
            .exec
            .spread_shared(&CallOptions::default(), graph, seeds, params)?;
        Ok(Activation {
            activation: o.value.activation,
            top: o.value.top,
            device: o.device,
            fallback: o.fallback,
        })
    }

    /// k-means of `points` (`n x dim`) into `k` clusters, `iters` Lloyd iterations, seeded from `seed`:
    /// the anchors (centroids), each point's anchor, and the inertia of every iteration.
    pub fn kmeans(
        &self,
        points: &[f32],
        dim: usize,
        k: usize,
        iters: usize,
        seed: u64,
    ) -> Result<Clusters, Error> {
        let o = self
            .exec
            .kmeans(&CallOptions::default(), points, dim, k, iters, seed)?;
        let KMeans {
            centroids,
            assignments,
            inertia,
        } = o.value;
        Ok(Clusters {
            centroids,
            assignments,
            inertia,
            device: o.device,
            fallback: o.fallback,
        })
    }

    /// Clip each row of `x` (`n x dim`) to L2 norm `clip`, then add `sigma` times Gaussian noise from the
    /// counter-based stream of `seed` (the same noise on every device, `docs/numerics.md`).
    pub fn clip_and_noise(
        &self,
        x: &[f32],
        dim: usize,
        clip: f32,
        sigma: f32,
        seed: u64,
    ) -> Result<Noised, Error> {
        let o = self
            .exec
            .clip_and_noise(&CallOptions::default(), x, dim, clip, sigma, seed)?;
        Ok(Noised {
            values: o.value,
            dim,
            device: o.device,
            fallback: o.fallback,
        })
    }

    pub(crate) fn diff_test(
        &self,
        arches: Option<&[u32]>,
        quick: bool,
    ) -> Result<crate::diagnostics::DiffReport, Error> {
        #[cfg(feature = "gpu")]
        {
            match self.exec.gpu_backend() {
                Some(gpu) => Ok(recall_hybrid_executor::difftest::run(gpu, arches, quick)),
                None => Err(Error::GpuRequired(match self.exec.gpu_status() {
                    GpuStatus::Unavailable(why) => why.clone(),
                    GpuStatus::Ready(_) => "the GPU was taken out of use after a failure".into(),
                })),
            }
        }
        #[cfg(not(feature = "gpu"))]
        {
            let _ = (arches, quick);
            Err(Error::GpuRequired(
                "this build has no GPU support (cargo feature `gpu` is off)".into(),
            ))
        }
    }
}
