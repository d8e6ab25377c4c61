//! recall: the compute hot paths of AI memory and retrieval engines, on an NVIDIA GPU when one is present
//! and worth it, on CPU SIMD otherwise, with the same answers either way (bit for bit in exact mode).
//!
//! ```
//! let engine = recall::Engine::new()?;
//! let dim = 4;
//! let corpus = [1.0, 0.0, 0.0, 0.0, /* row 1 */ 0.0, 1.0, 0.0, 0.0];
//! let query = [1.0, 1.0, 0.0, 0.0];
//! let scores = engine.cosine_similarity(&query, &corpus, dim)?;
//! assert_eq!(scores.n_rows, 2);
//! assert!((scores.values[0] - std::f32::consts::FRAC_1_SQRT_2).abs() < 1e-6);
//! println!("ran on {}", scores.device);
//! # Ok::<(), recall::Error>(())
//! ```
//!
//! Which device runs a call is decided per call ([`Engine::explain`] says why) and can be forced with
//! `RECALL_DEVICE=cpu|gpu|auto` or [`EngineBuilder::device`]. A GPU failure never reaches the caller:
//! the call is answered on the CPU and [`Scores::fallback`] says what happened.
//!
//! Architecture invariant: this crate re-exports and composes; it does not reimplement. Ops live in
//! `recall-cpu-simd` (CPU), `kernels-rs` (GPU) and `recall-gpu-kernels` (launchers); dispatch lives in
//! `recall-hybrid-executor`.

#![deny(missing_docs)]

mod engine;
mod error;
pub mod io;

pub use engine::{
    Activation, Clusters, Engine, EngineBuilder, Neighbors, Noised, NoisedInto, Scores,
};
pub use error::Error;

/// A similarity metric: `Cosine`, `Dot` (higher first) or `L2` (squared distance, lower first).
///
/// ```
/// use recall::Metric;
/// let engine = recall::Engine::new()?;
/// let near = engine.knn(&[0.0], &[5.0, 1.0, -2.0], 1, Metric::L2, 1)?;
/// assert_eq!(near.ids, [1]);
/// # Ok::<(), recall::Error>(())
/// ```
#[doc(inline)]
pub use recall_cpu_simd::Metric;

/// A graph validated and transposed for spreading, held by the caller (see [`Graph`] for a handle that
/// the GPU keeps resident).
///
/// ```
/// // 0 -> 1 (weight 0.5), 1 -> 0 (weight 2.0)
/// let g = recall::SpreadGraph::from_csr(&[0, 1, 2], &[1, 0], &[0.5, 2.0])?;
/// assert_eq!((g.n_nodes(), g.n_edges()), (2, 2));
/// assert!(recall::SpreadGraph::from_csr(&[0, 1], &[0], &[f32::NAN]).is_err());
/// # Ok::<(), recall::Error>(())
/// ```
#[doc(inline)]
pub use recall_cpu_simd::SpreadGraph;

/// Spreading parameters: decay per hop, threshold, hops, and how many top nodes to return.
///
/// ```
/// let params = recall::SpreadParams { decay: 0.5, threshold: 0.01, hops: 3, k: 10 };
/// assert_eq!(params.hops, 3);
/// ```
#[doc(inline)]
pub use recall_cpu_simd::SpreadParams;

/// The best `k` (id, score) pairs per query (or of a whole activation vector), best first.
///
/// ```
/// let engine = recall::Engine::new()?;
/// let g = engine.graph(&[0, 1, 1], &[1], &[1.0])?;
/// let p = recall::SpreadParams { decay: 0.5, threshold: 0.0, hops: 1, k: 2 };
/// let top: recall::TopK = engine.spread_in(&g, &[1.0, 0.0], &p)?.top;
/// assert_eq!((top.k, top.ids, top.scores), (2, vec![0, 1], vec![1.0, 0.5]));
/// # Ok::<(), recall::Error>(())
/// ```
#[doc(inline)]
pub use recall_cpu_simd::TopK;

/// Where a call ran: `Device::Cpu` or `Device::Gpu { ordinal }` (printed as `cpu`, `gpu:0`, ...).
///
/// ```
/// let engine = recall::Engine::builder().device(recall::DevicePolicy::Cpu).build()?;
/// let s = engine.cosine_similarity(&[1.0], &[1.0], 1)?;
/// assert_eq!(s.device, recall::Device::Cpu);
/// assert_eq!(s.device.to_string(), "cpu");
/// assert_eq!(recall::Device::Gpu { ordinal: 0 }.to_string(), "gpu:0");
/// # Ok::<(), recall::Error>(())
/// ```
#[doc(inline)]
pub use recall_hybrid_executor::Device;

/// Which devices calls may use: `Auto` (default), `Cpu`, or `Gpu` (a missing GPU is an error).
///
/// ```
/// use recall::DevicePolicy;
/// assert_eq!(DevicePolicy::default(), DevicePolicy::Auto);
/// let engine = recall::Engine::builder().device(DevicePolicy::Cpu).build()?;
/// assert_eq!(engine.device_policy(), DevicePolicy::Cpu);
/// # Ok::<(), recall::Error>(())
/// ```
#[doc(inline)]
pub use recall_hybrid_executor::DevicePolicy;

/// True when this build contains the GPU backend (cargo feature `gpu`, on by default).
///
/// ```
/// println!("GPU support compiled in: {}", recall::GPU_COMPILED_IN);
/// ```
#[doc(inline)]
pub use recall_hybrid_executor::GPU_COMPILED_IN;

/// The GPU an engine opened: name, compute capability, memory, driver, the kernel image loaded.
///
/// ```
/// let engine = recall::Engine::new()?;
/// if let recall::GpuStatus::Ready(gpu) = engine.gpu_status() {
///     let d: &recall::GpuDescription = gpu;
///     println!("{} ({}), {} bytes", d.name, d.sm, d.total_memory);
/// }
/// # Ok::<(), recall::Error>(())
/// ```
#[doc(inline)]
pub use recall_hybrid_executor::GpuDescription;

/// The GPU in use ([`GpuStatus::Ready`]) or why there is none ([`GpuStatus::Unavailable`]).
///
/// ```
/// let engine = recall::Engine::builder().device(recall::DevicePolicy::Cpu).build()?;
/// assert!(matches!(engine.gpu_status(), recall::GpuStatus::Unavailable(_)));
/// # Ok::<(), recall::Error>(())
/// ```
#[doc(inline)]
pub use recall_hybrid_executor::GpuStatus;

/// A corpus handle: rows checked once ([`Engine::corpus`], [`io::read_corpus`]) and searched many times
/// ([`Engine::knn_in`]). Clones share the rows; on a GPU the rows stay on the device until the last
/// clone is dropped.
///
/// ```
/// let engine = recall::Engine::new()?;
/// let store: recall::Corpus = engine.corpus(vec![0.0, 1.0, 2.0], 1)?;
/// let alias = store.clone(); // cheap: the same rows, the same id
/// assert_eq!((alias.id(), alias.n_rows(), alias.dim()), (store.id(), 3, 1));
/// assert_eq!(store.data(), [0.0, 1.0, 2.0]);
/// let hits = engine.knn_in(&[1.9], &alias, recall::Metric::L2, 1)?;
/// assert_eq!(hits.ids, [2]);
/// # Ok::<(), recall::Error>(())
/// ```
#[doc(inline)]
pub use recall_hybrid_executor::SharedCorpus as Corpus;

/// A graph handle: a CSR graph validated and transposed once ([`Engine::graph`], [`io::read_graph`]) and
/// spread from many times ([`Engine::spread_in`]). Clones share the graph; on a GPU it stays on the device
/// until the last clone is dropped.
///
/// ```
/// let engine = recall::Engine::new()?;
/// let g: recall::Graph = engine.graph(&[0, 1, 2, 2], &[1, 2], &[1.0, 1.0])?; // 0 -> 1 -> 2
/// assert_eq!((g.n_nodes(), g.n_edges()), (3, 2));
/// assert_eq!(g.graph().n_nodes(), 3); // the validated, transposed graph
/// let same = recall::Graph::new(g.graph().clone()); // a new handle (and id) for an existing graph
/// assert_ne!(same.id(), g.id());
/// # Ok::<(), recall::Error>(())
/// ```
#[doc(inline)]
pub use recall_hybrid_executor::SharedGraph as Graph;

/// Exact (default) or fast arithmetic for batch knn: `Mode::FastF16` / `Mode::FastBf16` run batches of more
/// than 8 queries on tensor cores (sm_80 and newer) within the bound of `docs/numerics.md`, "Fast mode";
/// elsewhere the exact answer is returned.
///
/// ```
/// let engine = recall::Engine::builder().mode(recall::Mode::FastBf16).build()?;
/// let store = engine.corpus(vec![0.0, 1.0, 1.0, 0.0], 2)?;
/// let hits = engine.knn_in(&[1.0, 0.1], &store, recall::Metric::Cosine, 1)?;
/// assert_eq!(hits.ids, [1]);
/// # Ok::<(), recall::Error>(())
/// ```
#[doc(inline)]
pub use recall_hybrid_executor::Mode;

/// Limits of dynamic batching (see [`EngineBuilder::batching`]).
///
/// ```
/// let b = recall::BatchConfig::default();
/// assert!(b.max_batch >= 1);
/// ```
#[doc(inline)]
pub use recall_hybrid_executor::BatchConfig;

/// A tenant's settings: name (in metrics), queue capacity, VRAM quota, weight, and a cap on its calls running
/// at once (see [`Engine::add_tenant`]).
///
/// ```
/// let mut t = recall::TenantConfig::new("ingest").max_running(2);
/// t.queue_capacity = 16;
/// t.vram_quota = Some(2 << 30);
/// assert_eq!(t.weight, 1);
/// assert_eq!(t.max_running, Some(2));
/// ```
#[doc(inline)]
pub use recall_hybrid_executor::TenantConfig;

/// A registered tenant (from [`Engine::add_tenant`]).
///
/// ```
/// let engine = recall::Engine::new()?;
/// let a: recall::TenantId = engine.add_tenant(recall::TenantConfig::new("a"));
/// let b = engine.add_tenant(recall::TenantConfig::new("b"));
/// assert_ne!(a, b);
/// # Ok::<(), recall::Error>(())
/// ```
#[doc(inline)]
pub use recall_hybrid_executor::TenantId;

/// What a tenant's call does when its queue is full: `Reject` at once, or wait up to a `Timeout`.
///
/// ```
/// assert_eq!(recall::Wait::default(), recall::Wait::Reject);
/// ```
#[doc(inline)]
pub use recall_hybrid_executor::Wait;

/// The executor's own types (tenants, call options, metrics), for [`Engine::executor`]: the load generator
/// and the acceptance tests use them; applications use [`Engine`].
#[doc(hidden)]
pub use recall_hybrid_executor as executor;

/// The CPU SIMD path in use: `avx512`, `avx2`, `neon` or `scalar` (`RECALL_CPU_SIMD` can lower it).
///
/// ```
/// let level = recall::cpu_simd_level();
/// assert!(["avx512", "avx2", "neon", "scalar"].contains(&level.as_str()));
/// ```
pub fn cpu_simd_level() -> String {
    recall_cpu_simd::simd_level().name().to_string()
}

/// Self-tests a user can run on their own machine, and the parts the benchmark harness uses.
///
/// ```
/// let arches = recall::diagnostics::bundle_arches(); // "sm_50, ..., sm_90", or "none" in a CPU-only build
/// assert!(!arches.is_empty());
/// assert_eq!(recall::diagnostics::bench::median(vec![3.0, 1.0, 2.0]), 2.0);
/// ```
pub mod diagnostics {
    pub use recall_hybrid_executor::GpuBackend;
    pub use recall_hybrid_executor::STAGED_CHUNK_BYTES;
    pub use recall_hybrid_executor::bench;
    pub use recall_hybrid_executor::bundle_arches;
    pub use recall_hybrid_executor::difftest::{
        ArchReport, DiffReport, KernelDiff, SplitMix, awkward_matrix, power_law_graph,
    };

    /// Compare every GPU kernel with the CPU, bit for bit, for the given arches' code (all the device can
    /// run when `None`). `Err` when there is no usable GPU.
    ///
    /// ```
    /// let engine = recall::Engine::builder().device(recall::DevicePolicy::Cpu).build()?;
    /// assert!(matches!(
    ///     recall::diagnostics::diff_test(&engine, None, true),
    ///     Err(recall::Error::GpuRequired(_))
    /// ));
    /// # Ok::<(), recall::Error>(())
    /// ```
    pub fn diff_test(
        engine: &crate::Engine,
        arches: Option<&[u32]>,
        quick: bool,
    ) -> Result<DiffReport, crate::Error> {
        engine.diff_test(arches, quick, &[])
    }

    /// [`diff_test`] limited to some of the suite's groups ([`DIFF_TEST_GROUPS`]; all when `groups` is
    /// empty). `Err(Config)` for a name that is not a group.
    ///
    /// ```
    /// let engine = recall::Engine::builder().device(recall::DevicePolicy::Cpu).build()?;
    /// use recall::diagnostics::diff_test_groups;
    /// assert!(matches!(
    ///     diff_test_groups(&engine, None, true, &["spreading"]),
    ///     Err(recall::Error::Config(_))
    /// ));
    /// assert!(matches!(
    ///     diff_test_groups(&engine, None, true, &["graph", "kmeans"]),
    ///     Err(recall::Error::GpuRequired(_))
    /// ));
    /// # Ok::<(), recall::Error>(())
    /// ```
    pub fn diff_test_groups(
        engine: &crate::Engine,
        arches: Option<&[u32]>,
        quick: bool,
        groups: &[&str],
    ) -> Result<DiffReport, crate::Error> {
        if let Some(g) = groups.iter().find(|g| !DIFF_TEST_GROUPS.contains(g)) {
            return Err(crate::Error::Config(format!(
                "diff-test group {g:?}: expected one of {}",
                DIFF_TEST_GROUPS.join(", ")
            )));
        }
        engine.diff_test(arches, quick, groups)
    }

    /// The diff-test suite's groups, in the order they run.
    pub use recall_hybrid_executor::difftest::GROUPS as DIFF_TEST_GROUPS;
}
