use crate::Error;
use recall_cpu_simd::{KMeans, Metric, SpreadGraph, SpreadParams, TopK};
use recall_hybrid_executor::{
    BatchConfig, CallOptions, Device, DevicePolicy, Executor, ExecutorConfig, GpuStatus, Mode,
    Outcome, SharedCorpus as Corpus, SharedGraph as Graph, TenantConfig, TenantId, Wait,
};

/// The entry point: owns the backends and answers every op.
///
/// Create one per process (it opens the GPU and loads the kernels once) and share it; it is `Send + Sync`.
///
/// ```
/// let engine = recall::Engine::new()?; // never fails for lack of a GPU
/// let s = engine.cosine_similarity(&[1.0, 0.0], &[1.0, 0.0, 0.0, 1.0], 2)?;
/// assert_eq!(s.values, [1.0, 0.0]);
/// # Ok::<(), recall::Error>(())
/// ```
#[derive(Debug)]
pub struct Engine {
    exec: std::sync::Arc<Executor>,
    mode: Mode,
    /// Set on a tenant's view ([`Engine::for_tenant`]): its calls run in that tenant's queue.
    tenant: Option<(TenantId, Wait)>,
}

/// Options for an [`Engine`]; [`Engine::new`] uses the defaults and the environment.
///
/// ```
/// use recall::{DevicePolicy, Engine};
/// let engine = Engine::builder().device(DevicePolicy::Cpu).build()?;
/// assert_eq!(engine.device_policy(), DevicePolicy::Cpu);
/// # Ok::<(), recall::Error>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct EngineBuilder {
    device: Option<DevicePolicy>,
    force_sm: Option<u32>,
    gpu_min_work: Option<u64>,
    mode: Mode,
    batching: Option<BatchConfig>,
    max_in_flight: Option<usize>,
    gpu_corpus_budget: Option<usize>,
    gpus: Option<Vec<usize>>,
}

impl EngineBuilder {
    /// Use these GPUs (by ordinal) instead of every GPU that opens; overrides `RECALL_GPUS=0,1`. With more
    /// than one, corpus handles are sharded over them and other calls go to the least-loaded one.
    ///
    /// ```
    /// let engine = recall::Engine::builder().gpus(&[0]).build()?; // GPU 0 only (or the CPU without one)
    /// assert!(engine.gpus().len() <= 1);
    /// # Ok::<(), recall::Error>(())
    /// ```
    pub fn gpus(mut self, ordinals: &[usize]) -> Self {
        self.gpus = Some(ordinals.to_vec());
        self
    }

    /// Dynamic batching of concurrent single-query calls (`Engine::knn_in` with one query): at most
    /// `max_batch` queries per batch, and how long a batch's first caller waits for others when the device
    /// is idle (while a batch runs, the next one keeps filling). `max_batch: 1` turns batching off.
    ///
    /// ```
    /// use std::time::Duration;
    /// let engine = recall::Engine::builder()
    ///     .batching(recall::BatchConfig {
    ///         max_batch: 256,
    ///         max_wait: Duration::from_micros(100),
    ///         ..recall::BatchConfig::default()
    ///     })
    ///     .build()?;
    /// # let _ = engine;
    /// # Ok::<(), recall::Error>(())
    /// ```
    pub fn batching(mut self, config: BatchConfig) -> Self {
        self.batching = Some(config);
        self
    }

    /// Tenant calls that may run at once (the others wait in their tenants' queues); default 4.
    ///
    /// ```
    /// let engine = recall::Engine::builder().max_in_flight(8).build()?;
    /// # let _ = engine;
    /// # Ok::<(), recall::Error>(())
    /// ```
    pub fn max_in_flight(mut self, calls: usize) -> Self {
        self.max_in_flight = Some(calls);
        self
    }

    /// Corpora larger than this many bytes are never made resident on the GPU: knn streams them through
    /// the device in chunks (out-of-core, the same answer). Overrides `RECALL_GPU_CORPUS_BUDGET_MIB`;
    /// the default is 80 % of the device memory free when the engine starts, at most three quarters of the
    /// GPU memory pool's budget (`RECALL_GPU_VRAM_BUDGET_MIB`, default 80 % of the device memory).
    ///
    /// ```
    /// let engine = recall::Engine::builder().gpu_corpus_budget(8 << 30).build()?;
    /// # let _ = engine;
    /// # Ok::<(), recall::Error>(())
    /// ```
    pub fn gpu_corpus_budget(mut self, bytes: usize) -> Self {
        self.gpu_corpus_budget = Some(bytes);
        self
    }

    /// Which devices calls may use. Overrides `RECALL_DEVICE`.
    ///
    /// ```
    /// use recall::{Device, DevicePolicy, Engine};
    /// let engine = Engine::builder().device(DevicePolicy::Cpu).build()?;
    /// let s = engine.cosine_similarity(&[1.0], &[2.0], 1)?;
    /// assert_eq!(s.device, Device::Cpu);
    /// # Ok::<(), recall::Error>(())
    /// ```
    pub fn device(mut self, policy: DevicePolicy) -> Self {
        self.device = Some(policy);
        self
    }

    /// Run one arch's kernel code only (e.g. `86` for sm_86 PTX, JIT-compiled for the device at hand).
    /// For differential testing; normal use lets the loader pick. Without a GPU it changes nothing.
    ///
    /// ```
    /// let engine = recall::Engine::builder().force_arch(86).build()?;
    /// # let _ = engine;
    /// # Ok::<(), recall::Error>(())
    /// ```
    pub fn force_arch(mut self, sm: u32) -> Self {
        self.force_sm = Some(sm);
        self
    }

    /// Under the `auto` policy, calls with fewer multiply-adds than this run on the CPU. Setting it turns
    /// off the measured break-even sizes (calibration) in favour of this one.
    ///
    /// ```
    /// let engine = recall::Engine::builder().gpu_min_work(1 << 30).build()?;
    /// let (device, _why) = engine.explain(1000);
    /// assert_eq!(device, recall::Device::Cpu); // far below the threshold
    /// # Ok::<(), recall::Error>(())
    /// ```
    pub fn gpu_min_work(mut self, multiply_adds: u64) -> Self {
        self.gpu_min_work = Some(multiply_adds);
        self
    }

    /// Exact (the default: the same bits on every device) or fast arithmetic for batch knn
    /// (`Engine::knn`, `Engine::knn_in` with more than 8 queries, on GPUs of sm_80 and newer): tensor
    /// cores from f16 or bf16 operands, within the bound of `docs/numerics.md`, "Fast mode".
    ///
    /// ```
    /// let engine = recall::Engine::builder().mode(recall::Mode::FastF16).build()?;
    /// let hits = engine.knn(&[1.0, 0.0], &[0.0, 1.0, 1.0, 0.0], 2, recall::Metric::Dot, 1)?;
    /// assert_eq!(hits.ids, [1]);
    /// # Ok::<(), recall::Error>(())
    /// ```
    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    /// Open the engine: find a GPU if the policy allows one (a missing GPU is an error only under
    /// [`DevicePolicy::Gpu`]).
    ///
    /// ```
    /// let engine = recall::Engine::builder().build()?;
    /// println!("GPU: {:?}", engine.gpu_status());
    /// # Ok::<(), recall::Error>(())
    /// ```
    pub fn build(self) -> Result<Engine, Error> {
        let policy = match self.device {
            Some(p) => p,
            None => DevicePolicy::from_env().map_err(Error::Config)?,
        };
        let mut config = ExecutorConfig {
            policy,
            force_sm: self.force_sm,
            gpus: self.gpus.clone(),
            ..ExecutorConfig::default()
        };
        if let Some(w) = self.gpu_min_work {
            config.gpu_min_work = w;
            config.calibrate = false;
        }
        if let Some(b) = self.batching {
            config.batching = b;
        }
        if let Some(n) = self.max_in_flight {
            config.max_in_flight = n.max(1);
        }
        let exec = Executor::new(config)?;
        if let Some(bytes) = self.gpu_corpus_budget {
            for g in exec.gpu_backends() {
                g.set_corpus_budget(bytes);
            }
        }
        Ok(Engine {
            exec: std::sync::Arc::new(exec),
            mode: self.mode,
            tenant: None,
        })
    }
}

/// A score matrix and where it was computed.
///
/// ```
/// let engine = recall::Engine::new()?;
/// let s = engine.similarity(&[1.0, 2.0], &[3.0, 4.0, 5.0, 6.0], 2, recall::Metric::Dot)?;
/// assert_eq!((s.n_queries, s.n_rows), (1, 2));
/// assert_eq!(s.values, [11.0, 17.0]);
/// # Ok::<(), recall::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Scores {
    /// Row-major `n_queries x n_rows`: `values[q * n_rows + r]`.
    pub values: Vec<f32>,
    /// Number of queries.
    pub n_queries: usize,
    /// Number of corpus rows.
    pub n_rows: usize,
    /// The device that computed the scores.
    pub device: Device,
    /// Set when the GPU was chosen, failed, and the CPU answered instead.
    pub fallback: Option<String>,
}

/// The `k` best (id, score) pairs of each query, best first (ties to the lower id), and where they were
/// computed.
///
/// ```
/// let engine = recall::Engine::new()?;
/// let corpus = [0.0, 1.0, 2.0, 3.0]; // four 1-d rows
/// let hits = engine.knn(&[2.1, 0.4], &corpus, 1, recall::Metric::L2, 2)?;
/// assert_eq!(hits.k, 2);
/// assert_eq!(hits.query(0).0, [2, 3]);
/// assert_eq!(hits.query(1).0, [0, 1]);
/// # Ok::<(), recall::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Neighbors {
    /// Neighbours per query.
    pub k: usize,
    /// `ids[q * k .. (q + 1) * k]` are query `q`'s neighbours, best first.
    pub ids: Vec<u32>,
    /// The scores of those neighbours (for `l2`, squared distances).
    pub scores: Vec<f32>,
    /// The device that computed them.
    pub device: Device,
    /// Set when the GPU was chosen, failed, and the CPU answered instead.
    pub fallback: Option<String>,
}

/// The result of [`Engine::spread`], [`Engine::spread_in`] and [`Engine::spread_from`].
///
/// ```
/// use recall::SpreadParams;
/// let engine = recall::Engine::new()?;
/// let graph = engine.graph(&[0, 1, 1], &[1], &[0.5])?; // one edge, 0 -> 1, weight 0.5
/// let params = SpreadParams { decay: 1.0, threshold: 0.0, hops: 1, k: 2 };
/// let a = engine.spread_in(&graph, &[1.0, 0.0], &params)?;
/// assert_eq!(a.activation, [1.0, 0.5]);
/// assert_eq!(a.top.ids, [0, 1]);
/// # Ok::<(), recall::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Activation {
    /// Per node: its seed plus the activation it received over all hops.
    pub activation: Vec<f32>,
    /// The most activated nodes, best first (ties to the lower node id).
    pub top: TopK,
    /// The device that spread.
    pub device: Device,
    /// Set when the GPU was chosen, failed, and the CPU answered instead.
    pub fallback: Option<String>,
}

/// The result of [`Engine::clip_and_noise`].
///
/// ```
/// let engine = recall::Engine::new()?;
/// let n = engine.clip_and_noise(&[3.0, 4.0], 2, 1.0, 0.0, 1)?; // clip to norm 1, no noise
/// assert_eq!(n.dim, 2);
/// assert!((n.values[0] - 0.6).abs() < 1e-6 && (n.values[1] - 0.8).abs() < 1e-6);
/// # Ok::<(), recall::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Noised {
    /// The clipped, noised rows, row-major like the input.
    pub values: Vec<f32>,
    /// Values per row.
    pub dim: usize,
    /// The device that ran it.
    pub device: Device,
    /// Set when the GPU was chosen, failed, and the CPU answered instead.
    pub fallback: Option<String>,
}

/// Where [`Engine::clip_and_noise_into`] ran (the values are in the caller's buffer).
///
/// ```
/// let engine = recall::Engine::new()?;
/// let x = [3.0, 4.0, 0.3, 0.4];
/// let mut out = vec![0.0; x.len()];
/// let ran = engine.clip_and_noise_into(&x, 2, 1.0, 0.1, 42, &mut out)?;
/// assert_eq!(out, engine.clip_and_noise(&x, 2, 1.0, 0.1, 42)?.values); // the same values
/// assert!(ran.fallback.is_none());
/// # Ok::<(), recall::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct NoisedInto {
    /// The device that ran it.
    pub device: Device,
    /// Set when the GPU was chosen, failed, and the CPU answered instead.
    pub fallback: Option<String>,
}

/// The result of [`Engine::kmeans`].
///
/// ```
/// let engine = recall::Engine::new()?;
/// let points = [0.0, 0.1, 10.0, 10.1]; // four 1-d points in two groups
/// let c = engine.kmeans(&points, 1, 2, 5, 42)?;
/// assert_eq!(c.centroids.len(), 2);
/// assert_eq!(c.assignments[0], c.assignments[1]);
/// assert_ne!(c.assignments[0], c.assignments[2]);
/// assert_eq!(c.inertia.len(), 5);
/// # Ok::<(), recall::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Clusters {
    /// `k * dim` values, row-major.
    pub centroids: Vec<f32>,
    /// Per point, its cluster.
    pub assignments: Vec<u32>,
    /// Per iteration, the sum of squared distances of the points to their centroids.
    pub inertia: Vec<f64>,
    /// The device that ran it.
    pub device: Device,
    /// Set when the GPU was chosen, failed, and the CPU answered instead.
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
    ///
    /// ```
    /// let engine = recall::Engine::new()?;
    /// let hits = engine.knn(&[1.0, 2.0, 3.0], &[1.0, 2.0], 1, recall::Metric::Dot, 1)?;
    /// assert_eq!(hits.n_queries(), 3);
    /// # Ok::<(), recall::Error>(())
    /// ```
    pub fn n_queries(&self) -> usize {
        self.ids.len().checked_div(self.k).unwrap_or(0)
    }

    /// Query `q`'s neighbours: (ids, scores), best first. Panics if `q >= n_queries()`.
    ///
    /// ```
    /// let engine = recall::Engine::new()?;
    /// let hits = engine.knn(&[1.0], &[1.0, 5.0, 3.0], 1, recall::Metric::Dot, 2)?;
    /// let (ids, scores) = hits.query(0);
    /// assert_eq!((ids, scores), (&[1, 2][..], &[5.0, 3.0][..]));
    /// # Ok::<(), recall::Error>(())
    /// ```
    pub fn query(&self, q: usize) -> (&[u32], &[f32]) {
        (
            &self.ids[q * self.k..(q + 1) * self.k],
            &self.scores[q * self.k..(q + 1) * self.k],
        )
    }
}

impl Engine {
    /// An engine with the default options and `RECALL_DEVICE` from the environment. It never fails for
    /// lack of a GPU (unless `RECALL_DEVICE=gpu`).
    ///
    /// ```
    /// let engine = recall::Engine::new()?;
    /// println!("calls may run on: {}", engine.device_policy());
    /// # Ok::<(), recall::Error>(())
    /// ```
    pub fn new() -> Result<Engine, Error> {
        Engine::builder().build()
    }

    /// Options beyond the defaults: see [`EngineBuilder`].
    ///
    /// ```
    /// let engine = recall::Engine::builder().device(recall::DevicePolicy::Cpu).build()?;
    /// # let _ = engine;
    /// # Ok::<(), recall::Error>(())
    /// ```
    pub fn builder() -> EngineBuilder {
        EngineBuilder::default()
    }

    /// The GPU in use, or why there is none.
    ///
    /// ```
    /// let engine = recall::Engine::new()?;
    /// match engine.gpu_status() {
    ///     recall::GpuStatus::Ready(gpu) => println!("GPU: {}", gpu.name),
    ///     recall::GpuStatus::Unavailable(why) => println!("CPU only: {why}"),
    /// }
    /// # Ok::<(), recall::Error>(())
    /// ```
    pub fn gpu_status(&self) -> &GpuStatus {
        self.exec.gpu_status()
    }

    /// Every GPU in use, in shard order: empty without a GPU, one entry usually, several when more than one
    /// GPU opened (`RECALL_GPUS=0,1` chooses them). With several, corpus handles are sharded over them and
    /// other calls go to the least-loaded one, with the same answers as on one device.
    ///
    /// ```
    /// let engine = recall::Engine::new()?;
    /// for gpu in engine.gpus() {
    ///     println!("GPU {}: {}", gpu.ordinal, gpu.name);
    /// }
    /// # Ok::<(), recall::Error>(())
    /// ```
    pub fn gpus(&self) -> Vec<crate::GpuDescription> {
        self.exec.gpu_descriptions()
    }

    /// The policy in force (from the builder or `RECALL_DEVICE`).
    ///
    /// ```
    /// let engine = recall::Engine::builder().device(recall::DevicePolicy::Cpu).build()?;
    /// assert_eq!(engine.device_policy().to_string(), "cpu");
    /// # Ok::<(), recall::Error>(())
    /// ```
    pub fn device_policy(&self) -> DevicePolicy {
        self.exec.config().policy
    }

    /// Where a call of `multiply_adds` work would run, and why.
    ///
    /// ```
    /// let engine = recall::Engine::builder().device(recall::DevicePolicy::Cpu).build()?;
    /// let (device, why) = engine.explain(1_000_000);
    /// assert_eq!(device, recall::Device::Cpu);
    /// assert!(!why.is_empty());
    /// # Ok::<(), recall::Error>(())
    /// ```
    pub fn explain(&self, multiply_adds: u64) -> (Device, String) {
        self.exec.explain(multiply_adds)
    }

    /// (calls run on the CPU, on the GPU, GPU calls that fell back to the CPU) since the engine started.
    ///
    /// ```
    /// let engine = recall::Engine::builder().device(recall::DevicePolicy::Cpu).build()?;
    /// engine.cosine_similarity(&[1.0], &[1.0], 1)?;
    /// assert_eq!(engine.counters(), (1, 0, 0));
    /// # Ok::<(), recall::Error>(())
    /// ```
    pub fn counters(&self) -> (u64, u64, u64) {
        self.exec.counters()
    }

    /// Every executor metric (calls by op and device, fallbacks by reason, OOM events, batch sizes,
    /// latency quantiles, GPU memory in use) in the Prometheus text format.
    ///
    /// ```
    /// let engine = recall::Engine::new()?;
    /// engine.cosine_similarity(&[1.0], &[1.0], 1)?;
    /// assert!(engine.metrics_text().contains("recall_calls_total"));
    /// # Ok::<(), recall::Error>(())
    /// ```
    pub fn metrics_text(&self) -> String {
        self.exec.prometheus_text()
    }

    /// Cosine similarity of each query (`n_queries x dim`, row-major) against each corpus row
    /// (`n_rows x dim`). Exact mode: the same bits on every device (`docs/numerics.md`).
    ///
    /// ```
    /// let engine = recall::Engine::new()?;
    /// let s = engine.cosine_similarity(&[1.0, 0.0], &[2.0, 0.0, 0.0, 3.0], 2)?;
    /// assert_eq!(s.values, [1.0, 0.0]);
    /// # Ok::<(), recall::Error>(())
    /// ```
    pub fn cosine_similarity(
        &self,
        queries: &[f32],
        corpus: &[f32],
        dim: usize,
    ) -> Result<Scores, Error> {
        let out = self
            .exec
            .cosine_scores_with(&self.call_options(), queries, corpus, dim)?;
        Ok(Scores {
            n_queries: queries.len() / dim,
            n_rows: corpus.len() / dim,
            values: out.value,
            device: out.device,
            fallback: out.fallback,
        })
    }

    /// Register a tenant: its own queue (bounded), an optional VRAM quota and a share of turns. Run its
    /// calls through [`Engine::for_tenant`].
    ///
    /// ```
    /// use recall::{TenantConfig, Wait};
    /// let engine = recall::Engine::new()?;
    /// let alpha = engine.add_tenant(TenantConfig::new("alpha"));
    /// let as_alpha = engine.for_tenant(alpha, Wait::Reject);
    /// let hits = as_alpha.knn(&[1.0, 0.0], &[0.0, 1.0, 1.0, 0.0], 2, recall::Metric::Dot, 1)?;
    /// assert_eq!(hits.ids, [1]);
    /// assert!(engine.metrics_text().contains("tenant=\"alpha\""));
    /// # Ok::<(), recall::Error>(())
    /// ```
    pub fn add_tenant(&self, config: TenantConfig) -> TenantId {
        self.exec.add_tenant(config)
    }

    /// A view of this engine whose calls run as `tenant`: in its queue, under its quota and fair share,
    /// counted in its metrics. When the queue is full the call is refused with [`Error::Overloaded`]
    /// (`Wait::Reject`) or waits up to a timeout (`Wait::Timeout`). The view shares everything else
    /// (GPU, resident handles, caches) with the engine; it is cheap to make and to keep.
    ///
    /// ```
    /// use std::time::Duration;
    /// let engine = recall::Engine::new()?;
    /// let t = engine.add_tenant(recall::TenantConfig::new("search"));
    /// let search = engine.for_tenant(t, recall::Wait::Timeout(Duration::from_millis(50)));
    /// let store = search.corpus(vec![0.0, 1.0, 2.0], 1)?;
    /// assert_eq!(search.knn_in(&[1.9], &store, recall::Metric::L2, 1)?.ids, [2]);
    /// # Ok::<(), recall::Error>(())
    /// ```
    pub fn for_tenant(&self, tenant: TenantId, wait: Wait) -> Engine {
        Engine {
            exec: self.exec.clone(),
            mode: self.mode,
            tenant: Some((tenant, wait)),
        }
    }

    /// The options every call of this engine (or tenant view) runs with.
    fn call_options(&self) -> CallOptions {
        let mut o = CallOptions::default().mode(self.mode);
        if let Some((tenant, wait)) = self.tenant {
            o.tenant = Some(tenant);
            o.wait = wait;
        }
        o
    }

    /// The executor behind this engine: tenants, per-call options, metrics. For the load generator
    /// (`recall load`) and the acceptance tests, until the builder grows tenants.
    #[doc(hidden)]
    pub fn executor(&self) -> &recall_hybrid_executor::Executor {
        &self.exec
    }

    /// Give back the GPU memory recall caches between calls (scratch buffers, copies of dropped corpora, the
    /// pinned host buffers that stream a corpus slice larger than the GPU's budget, and those that stage large
    /// uploads):
    /// afterwards the device holds only what live [`Corpus`] and [`Graph`] handles need. A no-op without a
    /// GPU. The caches are rebuilt on demand, so the next call pays for a few allocations.
    ///
    /// ```
    /// let engine = recall::Engine::new()?;
    /// engine.trim_gpu_memory()?;
    /// # Ok::<(), recall::Error>(())
    /// ```
    pub fn trim_gpu_memory(&self) -> Result<(), Error> {
        for g in self.exec.gpu_backends() {
            g.trim()
                .map_err(|e| Error::Config(format!("trimming GPU memory: {e}")))?;
        }
        Ok(())
    }

    /// The GPU backend in use, for the benchmark harness and self-tests.
    #[doc(hidden)]
    pub fn gpu_backend(&self) -> Option<&recall_hybrid_executor::GpuBackend> {
        self.exec.gpu_backend()
    }

    /// Scores of each query against each corpus row for `metric` (row-major `n_queries x n_rows`).
    ///
    /// ```
    /// use recall::Metric;
    /// let engine = recall::Engine::new()?;
    /// let (q, c) = ([1.0, 2.0], [1.0, 2.0, 4.0, 6.0]);
    /// assert_eq!(engine.similarity(&q, &c, 2, Metric::Dot)?.values, [5.0, 16.0]);
    /// assert_eq!(engine.similarity(&q, &c, 2, Metric::L2)?.values, [0.0, 25.0]); // squared
    /// # Ok::<(), recall::Error>(())
    /// ```
    pub fn similarity(
        &self,
        queries: &[f32],
        corpus: &[f32],
        dim: usize,
        metric: Metric,
    ) -> Result<Scores, Error> {
        let out = self
            .exec
            .similarity(&self.call_options(), queries, corpus, dim, metric)?;
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
    ///
    /// ```
    /// let engine = recall::Engine::new()?;
    /// let corpus = [1.0, 0.0, /* */ 0.0, 1.0, /* */ 0.7, 0.7];
    /// let hits = engine.knn(&[1.0, 0.1], &corpus, 2, recall::Metric::Cosine, 2)?;
    /// assert_eq!(hits.ids, [0, 2]);
    /// println!("ran on {}", hits.device);
    /// # Ok::<(), recall::Error>(())
    /// ```
    pub fn knn(
        &self,
        queries: &[f32],
        corpus: &[f32],
        dim: usize,
        metric: Metric,
        k: usize,
    ) -> Result<Neighbors, Error> {
        Ok(Neighbors::from_outcome(self.exec.knn(
            &self.call_options(),
            queries,
            corpus,
            dim,
            metric,
            k,
        )?))
    }

    /// Validate `data` (`n_rows x dim`, row-major) once and keep it for repeated searches with
    /// [`Engine::knn_in`]: on the GPU the rows are uploaded on first use and stay on the device until the
    /// last clone of the returned [`Corpus`] is dropped. [`crate::io::read_corpus`] makes one from a file.
    ///
    /// ```
    /// let engine = recall::Engine::new()?;
    /// let store = engine.corpus(vec![1.0, 0.0, 0.0, 1.0], 2)?;
    /// assert_eq!((store.n_rows(), store.dim()), (2, 2));
    /// assert!(engine.corpus(vec![f32::NAN, 0.0], 2).is_err()); // checked once, here
    /// # Ok::<(), recall::Error>(())
    /// ```
    pub fn corpus(&self, data: Vec<f32>, dim: usize) -> Result<Corpus, Error> {
        Ok(Corpus::new(data, dim)?)
    }

    /// [`Engine::knn`] against a [`Corpus`] made by [`Engine::corpus`]: the same answer, without moving or
    /// re-checking the corpus on every call.
    ///
    /// ```
    /// use recall::Metric;
    /// let engine = recall::Engine::new()?;
    /// let corpus = vec![1.0, 0.0, 0.0, 1.0, 0.6, 0.8];
    /// let store = engine.corpus(corpus.clone(), 2)?;
    /// for query in [[1.0, 0.0], [0.0, 1.0]] {
    ///     let a = engine.knn_in(&query, &store, Metric::Cosine, 2)?;
    ///     assert_eq!(a, engine.knn(&query, &corpus, 2, Metric::Cosine, 2)?);
    /// }
    /// # Ok::<(), recall::Error>(())
    /// ```
    pub fn knn_in(
        &self,
        queries: &[f32],
        corpus: &Corpus,
        metric: Metric,
        k: usize,
    ) -> Result<Neighbors, Error> {
        let opts = self.call_options();
        // One query: concurrent single-query calls on this corpus are coalesced into batches.
        let out = if queries.len() == corpus.dim() {
            self.exec
                .knn_shared_single(&opts, queries, corpus, metric, k)?
        } else {
            self.exec.knn_shared(&opts, queries, corpus, metric, k)?
        };
        Ok(Neighbors::from_outcome(out))
    }

    /// Re-score candidate lists (e.g. an HNSW search's candidates): query `q` ranks the corpus rows
    /// `ids[offsets[q] .. offsets[q + 1]]` and keeps the best `k`. Ids must be below the corpus size and
    /// distinct within a list; `k` at most the shortest list. Only the rows the lists name are read, and only they
    /// are checked for NaN and infinity, so a call costs its candidates, not the corpus.
    ///
    /// ```
    /// let engine = recall::Engine::new()?;
    /// let corpus = [1.0, 2.0, 3.0, 4.0]; // four 1-d rows
    /// // Query 0 ranks rows 0 and 3; query 1 ranks rows 1, 2 and 3.
    /// let top = engine.score_candidates(&[1.0, -1.0], &corpus, 1, recall::Metric::Dot,
    ///                                   &[0, 2, 5], &[0, 3, 1, 2, 3], 1)?;
    /// assert_eq!(top.ids, [3, 1]);
    /// # Ok::<(), recall::Error>(())
    /// ```
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
            &self.call_options(),
            queries,
            corpus,
            dim,
            metric,
            offsets,
            ids,
            k,
        )?))
    }

    /// [`Engine::score_candidates`] against a [`Corpus`] handle: the same answer, without re-checking the
    /// corpus or (on the GPU) uploading it on every call.
    ///
    /// ```
    /// let engine = recall::Engine::new()?;
    /// let store = engine.corpus(vec![1.0, 0.0, 0.0, 1.0, 0.7, 0.7], 2)?;
    /// // one query, candidates 2 and 0; keep the best one
    /// let best = engine.score_candidates_in(&[1.0, 0.0], &store, recall::Metric::Dot, &[0, 2], &[2, 0], 1)?;
    /// assert_eq!(best.ids, [0]);
    /// # Ok::<(), recall::Error>(())
    /// ```
    #[allow(clippy::too_many_arguments)]
    pub fn score_candidates_in(
        &self,
        queries: &[f32],
        corpus: &Corpus,
        metric: Metric,
        offsets: &[usize],
        ids: &[u32],
        k: usize,
    ) -> Result<Neighbors, Error> {
        Ok(Neighbors::from_outcome(self.exec.score_candidates_shared(
            &self.call_options(),
            queries,
            corpus,
            metric,
            offsets,
            ids,
            k,
        )?))
    }

    /// Activation spreading: seed activations flow over the weighted edges of `graph` for `params.hops`
    /// hops (decayed, thresholded, accumulated); returns every node's activation and the top `params.k`
    /// nodes. Build the graph once with [`SpreadGraph::from_csr`] (it validates and transposes the CSR), or
    /// use a [`Graph`] handle ([`Engine::graph`], [`Engine::spread_in`]) to also keep it on the GPU.
    ///
    /// ```
    /// use recall::{SpreadGraph, SpreadParams};
    /// let engine = recall::Engine::new()?;
    /// // 0 -> 1 (weight 1.0), 1 -> 2 (weight 0.5)
    /// let graph = SpreadGraph::from_csr(&[0, 1, 2, 2], &[1, 2], &[1.0, 0.5])?;
    /// let params = SpreadParams { decay: 0.5, threshold: 0.0, hops: 2, k: 3 };
    /// let a = engine.spread(&graph, &[1.0, 0.0, 0.0], &params)?;
    /// assert_eq!(a.activation, [1.0, 0.5, 0.125]);
    /// # Ok::<(), recall::Error>(())
    /// ```
    pub fn spread(
        &self,
        graph: &SpreadGraph,
        seeds: &[f32],
        params: &SpreadParams,
    ) -> Result<Activation, Error> {
        let o = self
            .exec
            .spread(&self.call_options(), graph, seeds, params)?;
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
    ///
    /// ```
    /// let engine = recall::Engine::new()?;
    /// let graph = engine.graph(&[0, 2, 2], &[1, 1], &[0.5, 0.25])?; // parallel edges are fine
    /// assert_eq!((graph.n_nodes(), graph.n_edges()), (2, 2));
    /// assert!(engine.graph(&[0, 1], &[7], &[1.0]).is_err()); // node 7 does not exist
    /// # Ok::<(), recall::Error>(())
    /// ```
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
    ///
    /// ```
    /// use recall::SpreadParams;
    /// let engine = recall::Engine::new()?;
    /// let graph = engine.graph(&[0, 1, 2, 2], &[1, 2], &[1.0, 0.5])?;
    /// let params = SpreadParams { decay: 0.5, threshold: 0.0, hops: 2, k: 1 };
    /// for seed in 0..3 {
    ///     let mut seeds = [0.0; 3];
    ///     seeds[seed] = 1.0;
    ///     let a = engine.spread_in(&graph, &seeds, &params)?;
    ///     assert_eq!(a.top.ids, [seed as u32]); // a seed outweighs what it passes on
    /// }
    /// # Ok::<(), recall::Error>(())
    /// ```
    pub fn spread_in(
        &self,
        graph: &Graph,
        seeds: &[f32],
        params: &SpreadParams,
    ) -> Result<Activation, Error> {
        let o = self
            .exec
            .spread_shared(&self.call_options(), graph, seeds, params)?;
        Ok(Activation {
            activation: o.value.activation,
            top: o.value.top,
            device: o.device,
            fallback: o.fallback,
        })
    }

    /// [`Engine::spread_in`] from a seed list: `(node, value)` pairs, in any order, for the few seed memories
    /// of a call (the hits of a search). The answer is, bit for bit, that of [`Engine::spread_in`] with the
    /// dense vector `seed[node] = value` for each pair and `0.0` elsewhere; no such vector is made for the GPU,
    /// which takes the pairs as they are. A value of `0.0` (or `-0.0`) is no seed, and an empty list is no
    /// seeds at all. Refused with [`Error::InvalidInput`], before any work: a node id not below
    /// [`Graph::n_nodes`], a NaN, infinite or negative value, or a node listed twice.
    ///
    /// ```
    /// use recall::SpreadParams;
    /// let engine = recall::Engine::new()?;
    /// let graph = engine.graph(&[0, 1, 2, 2, 2], &[1, 2], &[1.0, 0.5])?; // 0 -> 1 -> 2, node 3 alone
    /// let params = SpreadParams { decay: 0.5, threshold: 0.0, hops: 2, k: 2 };
    /// let a = engine.spread_from(&graph, &[(3, 0.25), (0, 1.0)], &params)?;
    /// assert_eq!(a.activation, [1.0, 0.5, 0.125, 0.25]);
    /// assert_eq!(a.activation, engine.spread_in(&graph, &[1.0, 0.0, 0.0, 0.25], &params)?.activation);
    /// assert_eq!(a.top.ids, [0, 1]);
    /// assert!(engine.spread_from(&graph, &[(0, 1.0), (0, 2.0)], &params).is_err()); // node 0 twice
    /// assert!(engine.spread_from(&graph, &[(4, 1.0)], &params).is_err()); // no node 4
    /// # Ok::<(), recall::Error>(())
    /// ```
    pub fn spread_from(
        &self,
        graph: &Graph,
        seeds: &[(u32, f32)],
        params: &SpreadParams,
    ) -> Result<Activation, Error> {
        let o = self
            .exec
            .spread_shared_from(&self.call_options(), graph, seeds, params)?;
        Ok(Activation {
            activation: o.value.activation,
            top: o.value.top,
            device: o.device,
            fallback: o.fallback,
        })
    }

    /// k-means of `points` (`n x dim`) into `k` clusters, `iters` Lloyd iterations, seeded from `seed`:
    /// the anchors (centroids), each point's anchor, and the inertia of every iteration. Points so large that
    /// their squared distances (or a cluster's sum) pass `f32::MAX` are an error (`KMeansOverflow`), on every
    /// device, not infinite anchors.
    ///
    /// ```
    /// let engine = recall::Engine::new()?;
    /// let points = [0.0, 0.0, /* */ 0.0, 1.0, /* */ 9.0, 9.0, /* */ 9.0, 10.0];
    /// let c = engine.kmeans(&points, 2, 2, 3, 7)?;
    /// assert_eq!(c.assignments[0], c.assignments[1]);
    /// assert_eq!(c.assignments[2], c.assignments[3]);
    /// assert_eq!(c.inertia.last(), Some(&1.0)); // each point 0.5 from its centroid
    /// # Ok::<(), recall::Error>(())
    /// ```
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
            .kmeans(&self.call_options(), points, dim, k, iters, seed)?;
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
    ///
    /// ```
    /// let engine = recall::Engine::new()?;
    /// let x = [3.0, 4.0, 0.3, 0.4];
    /// let a = engine.clip_and_noise(&x, 2, 1.0, 0.1, 42)?;
    /// let b = engine.clip_and_noise(&x, 2, 1.0, 0.1, 42)?;
    /// assert_eq!(a.values, b.values); // same seed, same noise
    /// # Ok::<(), recall::Error>(())
    /// ```
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
            .clip_and_noise(&self.call_options(), x, dim, clip, sigma, seed)?;
        Ok(Noised {
            values: o.value,
            dim,
            device: o.device,
            fallback: o.fallback,
        })
    }

    /// [`Engine::clip_and_noise`] into `out`, which must hold `x.len()` values (every one is written): for a
    /// caller that reuses its output. A fresh output of hundreds of MB costs a first touch of every page,
    /// which on a CPU took as long as the op itself (`docs/results/2026-11-27-session26`). On an error `out`
    /// is untouched, but for a NaN or infinity in `x`, which the CPU finds as it reads the rows: `out` may
    /// then hold some rows' results.
    ///
    /// ```
    /// let engine = recall::Engine::new()?;
    /// let mut out = vec![0.0; 2]; // reused from call to call
    /// engine.clip_and_noise_into(&[3.0, 4.0], 2, 1.0, 0.0, 1, &mut out)?; // clip to norm 1, no noise
    /// assert!((out[0] - 0.6).abs() < 1e-6 && (out[1] - 0.8).abs() < 1e-6);
    /// assert!(engine.clip_and_noise_into(&[3.0, 4.0], 2, 1.0, 0.0, 1, &mut [0.0; 3]).is_err()); // wrong length
    /// # Ok::<(), recall::Error>(())
    /// ```
    #[allow(clippy::too_many_arguments)]
    pub fn clip_and_noise_into(
        &self,
        x: &[f32],
        dim: usize,
        clip: f32,
        sigma: f32,
        seed: u64,
        out: &mut [f32],
    ) -> Result<NoisedInto, Error> {
        let o =
            self.exec
                .clip_and_noise_into(&self.call_options(), x, dim, clip, sigma, seed, out)?;
        Ok(NoisedInto {
            device: o.device,
            fallback: o.fallback,
        })
    }

    pub(crate) fn diff_test(
        &self,
        arches: Option<&[u32]>,
        quick: bool,
        groups: &[&str],
    ) -> Result<crate::diagnostics::DiffReport, Error> {
        #[cfg(feature = "gpu")]
        {
            match self.exec.gpu_backend() {
                Some(gpu) => Ok(recall_hybrid_executor::difftest::run(
                    gpu, arches, quick, groups,
                )),
                None => Err(Error::GpuRequired(match self.exec.gpu_status() {
                    GpuStatus::Unavailable(why) => why.clone(),
                    GpuStatus::Ready(_) => "the GPU was taken out of use after a failure".into(),
                })),
            }
        }
        #[cfg(not(feature = "gpu"))]
        {
            let _ = (arches, quick, groups);
            Err(Error::GpuRequired(
                "this build has no GPU support (cargo feature `gpu` is off)".into(),
            ))
        }
    }
}
