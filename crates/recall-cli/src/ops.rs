//! `recall knn`, `recall scores`, `recall spread`, `recall kmeans`: the ops on the user's own files (`recall::io`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use recall::io::{self, NpyElement};

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum MetricArg {
    Cosine,
    Dot,
    L2,
}

impl MetricArg {
    fn name(self) -> &'static str {
        match self {
            MetricArg::Cosine => "cosine",
            MetricArg::Dot => "dot",
            MetricArg::L2 => "l2",
        }
    }
}

impl From<MetricArg> for recall::Metric {
    fn from(m: MetricArg) -> Self {
        match m {
            MetricArg::Cosine => recall::Metric::Cosine,
            MetricArg::Dot => recall::Metric::Dot,
            MetricArg::L2 => recall::Metric::L2,
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct KnnArgs {
    /// Corpus rows: a 2-D float32 `.npy` (n_rows, dim) or an `.fvecs` file.
    #[arg(long)]
    corpus: PathBuf,
    /// Queries: a 2-D float32 `.npy` (n_queries, dim) or an `.fvecs` file.
    #[arg(long)]
    queries: PathBuf,
    /// Neighbours per query (1 to the corpus size).
    #[arg(short, long)]
    k: usize,
    /// `cosine` and `dot`: higher first; `l2`: squared distance, lower first.
    #[arg(long, value_enum, default_value = "cosine")]
    metric: MetricArg,
    /// Output folder (created): `ids.npy` (uint32, (n_queries, k)), `scores.npy` (float32, (n_queries, k)).
    #[arg(long)]
    out: PathBuf,
}

#[derive(clap::Args, Debug)]
pub struct ScoresArgs {
    /// Corpus rows: a 2-D float32 `.npy` (n_rows, dim) or an `.fvecs` file.
    #[arg(long)]
    corpus: PathBuf,
    /// Queries: a 2-D float32 `.npy` (n_queries, dim) or an `.fvecs` file.
    #[arg(long)]
    queries: PathBuf,
    /// `cosine` and `dot`: similarity; `l2`: squared distance.
    #[arg(long, value_enum, default_value = "cosine")]
    metric: MetricArg,
    /// Output folder (created): `scores.npy` (float32, (n_queries, n_rows)).
    #[arg(long)]
    out: PathBuf,
}

#[derive(clap::Args, Debug)]
pub struct SpreadArgs {
    /// The graph: a SciPy CSR `.npz` (`scipy.sparse.save_npz`), square, weights finite and >= 0.
    #[arg(long)]
    graph: PathBuf,
    /// Seed activation per node: a 1-D float32 `.npy` of length n_nodes.
    #[arg(long)]
    seeds: PathBuf,
    /// Factor applied to each hop's pulled sum, in (0, 1].
    #[arg(long)]
    decay: f32,
    /// A hop's activation below this is dropped to zero (>= 0).
    #[arg(long)]
    threshold: f32,
    /// Number of hops (>= 1).
    #[arg(long)]
    hops: usize,
    /// How many of the most activated nodes to list (default: 10, or n_nodes if fewer).
    #[arg(short, long)]
    k: Option<usize>,
    /// Output folder (created): `activation.npy` (float32, n_nodes), `top_ids.npy` (uint32, k),
    /// `top_scores.npy` (float32, k).
    #[arg(long)]
    out: PathBuf,
}

#[derive(clap::Args, Debug)]
pub struct KmeansArgs {
    /// Points: a 2-D float32 `.npy` (n, dim) or an `.fvecs` file.
    #[arg(long)]
    data: PathBuf,
    /// Number of clusters.
    #[arg(short, long)]
    k: usize,
    /// Lloyd iterations.
    #[arg(long)]
    iters: usize,
    /// Seed of the initial centroids.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Output folder (created): `centroids.npy` (float32, (k, dim)), `assignments.npy` (uint32, n),
    /// `inertia.npy` (float64, one value per iteration).
    #[arg(long)]
    out: PathBuf,
}

fn engine() -> Result<recall::Engine, String> {
    recall::Engine::new().map_err(|e| e.to_string())
}

fn out_dir(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))
}

fn save<T: NpyElement>(dir: &Path, name: &str, data: &[T], shape: &[usize]) -> Result<(), String> {
    io::write_npy(dir.join(name), data, shape).map_err(|e| e.to_string())
}

fn ms(t: Instant) -> String {
    format!("{:.2} ms", t.elapsed().as_secs_f64() * 1e3)
}

fn fallback_note(f: &Option<String>) -> String {
    f.as_ref()
        .map(|why| format!(" (gpu fell back: {why})"))
        .unwrap_or_default()
}

pub fn knn(a: KnnArgs) -> Result<ExitCode, String> {
    let (corpus, queries) = read_pair(&a.corpus, &a.queries)?;
    let engine = engine()?;
    let t = Instant::now();
    let hits = engine
        .knn(
            &queries.data,
            &corpus.data,
            corpus.dim,
            a.metric.into(),
            a.k,
        )
        .map_err(|e| e.to_string())?;
    let took = ms(t);
    out_dir(&a.out)?;
    let n_q = hits.n_queries();
    save(&a.out, "ids.npy", &hits.ids, &[n_q, hits.k])?;
    save(&a.out, "scores.npy", &hits.scores, &[n_q, hits.k])?;
    println!(
        "knn: {n_q} queries x {} rows, dim {}, k {}, {}: {} in {took}{} -> {}",
        corpus.n_rows,
        corpus.dim,
        hits.k,
        a.metric.name(),
        hits.device,
        fallback_note(&hits.fallback),
        a.out.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// The corpus and the queries of `knn` and `scores`, of one dimension.
fn read_pair(corpus: &Path, queries: &Path) -> Result<(io::Matrix, io::Matrix), String> {
    let corpus = io::read_matrix(corpus).map_err(|e| e.to_string())?;
    let queries = io::read_matrix(queries).map_err(|e| e.to_string())?;
    if corpus.dim != queries.dim {
        return Err(format!(
            "the corpus has dimension {} and the queries {}",
            corpus.dim, queries.dim
        ));
    }
    Ok((corpus, queries))
}

pub fn scores(a: ScoresArgs) -> Result<ExitCode, String> {
    let (corpus, queries) = read_pair(&a.corpus, &a.queries)?;
    let engine = engine()?;
    let t = Instant::now();
    let s = engine
        .similarity(&queries.data, &corpus.data, corpus.dim, a.metric.into())
        .map_err(|e| e.to_string())?;
    let took = ms(t);
    out_dir(&a.out)?;
    save(&a.out, "scores.npy", &s.values, &[s.n_queries, s.n_rows])?;
    println!(
        "scores: {} queries x {} rows, dim {}, {}: {} in {took}{} -> {}",
        s.n_queries,
        s.n_rows,
        corpus.dim,
        a.metric.name(),
        s.device,
        fallback_note(&s.fallback),
        a.out.display()
    );
    Ok(ExitCode::SUCCESS)
}

pub fn spread(a: SpreadArgs) -> Result<ExitCode, String> {
    let (graph, n_nodes) = io::read_spread_graph(&a.graph).map_err(|e| e.to_string())?;
    let seeds = io::read_npy_vector(&a.seeds).map_err(|e| e.to_string())?;
    if seeds.len() != n_nodes {
        return Err(format!(
            "{}: {} seeds for a graph of {n_nodes} nodes",
            a.seeds.display(),
            seeds.len()
        ));
    }
    let params = recall::SpreadParams {
        decay: a.decay,
        threshold: a.threshold,
        hops: a.hops,
        k: a.k.unwrap_or(n_nodes.min(10)),
    };
    let engine = engine()?;
    let t = Instant::now();
    let act = engine
        .spread(&graph, &seeds, &params)
        .map_err(|e| e.to_string())?;
    let took = ms(t);
    out_dir(&a.out)?;
    save(&a.out, "activation.npy", &act.activation, &[n_nodes])?;
    save(&a.out, "top_ids.npy", &act.top.ids, &[act.top.ids.len()])?;
    save(
        &a.out,
        "top_scores.npy",
        &act.top.scores,
        &[act.top.scores.len()],
    )?;
    println!(
        "spread: {n_nodes} nodes, {} hops, k {}: {} in {took}{} -> {}",
        params.hops,
        params.k,
        act.device,
        fallback_note(&act.fallback),
        a.out.display()
    );
    Ok(ExitCode::SUCCESS)
}

pub fn kmeans(a: KmeansArgs) -> Result<ExitCode, String> {
    let points = io::read_matrix(&a.data).map_err(|e| e.to_string())?;
    let engine = engine()?;
    let t = Instant::now();
    let c = engine
        .kmeans(&points.data, points.dim, a.k, a.iters, a.seed)
        .map_err(|e| e.to_string())?;
    let took = ms(t);
    out_dir(&a.out)?;
    save(&a.out, "centroids.npy", &c.centroids, &[a.k, points.dim])?;
    save(
        &a.out,
        "assignments.npy",
        &c.assignments,
        &[c.assignments.len()],
    )?;
    save(&a.out, "inertia.npy", &c.inertia, &[c.inertia.len()])?;
    let last = c.inertia.last().copied().unwrap_or(f64::NAN);
    println!(
        "kmeans: {} points, dim {}, k {}, {} iters, final inertia {last:.6e}: {} in {took}{} -> {}",
        points.n_rows,
        points.dim,
        a.k,
        a.iters,
        c.device,
        fallback_note(&c.fallback),
        a.out.display()
    );
    Ok(ExitCode::SUCCESS)
}
