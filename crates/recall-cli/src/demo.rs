//! `recall demo`: the main job on built-in data. It builds a memory store the way an agent's memory looks
//! (embeddings in topical clusters plus an association graph between memories) and then does what a memory
//! engine does on a recall: nearest neighbours of a batch of queries, spreading activation from the hits,
//! re-scoring the candidates that spreading surfaced, and a k-means compression of the store into anchors.

use crate::util::grouped;
use recall::diagnostics::{SplitMix, power_law_graph};
use recall::{DevicePolicy, Engine, GpuStatus, Metric, SpreadGraph, SpreadParams};
use std::io::Write as _;
use std::process::ExitCode;
use std::time::Instant;

#[derive(clap::Args, Debug)]
pub struct DemoArgs {
    /// Stored memories (embeddings) in the generated store.
    #[arg(long, default_value_t = 200_000)]
    rows: usize,
    /// Embedding dimension.
    #[arg(long, default_value_t = 384)]
    dim: usize,
    /// Queries in the recall batch.
    #[arg(long, default_value_t = 256)]
    queries: usize,
    /// Neighbours per query.
    #[arg(short, long, default_value_t = 10)]
    k: usize,
    /// Anchors of the k-means compression.
    #[arg(long, default_value_t = 256)]
    anchors: usize,
    /// Lloyd iterations of the compression.
    #[arg(long, default_value_t = 3)]
    iters: usize,
}

/// One row of the result table.
struct Row {
    op: String,
    device: String,
    ms: f64,
    throughput: String,
    agreement: String,
}

/// A one-line progress counter on a terminal; nothing when stderr is a file or a pipe (CI logs).
fn progress(what: &str, done: usize, total: usize) {
    use std::io::IsTerminal as _;
    let mut err = std::io::stderr();
    if !err.is_terminal() {
        return;
    }
    let _ = write!(err, "\r{what}: {:>3} %", 100 * done / total.max(1));
    if done >= total {
        let _ = writeln!(err);
    }
}

/// A store of `rows` unit vectors in `topics` Gaussian clusters, and queries that are noisy copies of stored
/// rows (so each query's own source row is its expected best match).
fn memory_store(
    rng: &mut SplitMix,
    rows: usize,
    dim: usize,
    queries: usize,
) -> (Vec<f32>, Vec<f32>, Vec<usize>) {
    let topics = 64.min(rows);
    let centers: Vec<f32> = (0..topics * dim).map(|_| rng.next_f32()).collect();
    let mut store = Vec::with_capacity(rows * dim);
    let step = (rows / 100).max(1);
    for r in 0..rows {
        let t = rng.below(topics as u64) as usize;
        let row: Vec<f32> = (0..dim)
            .map(|j| centers[t * dim + j] + 0.35 * rng.next_f32())
            .collect();
        let norm = row
            .iter()
            .map(|v| v * v)
            .sum::<f32>()
            .sqrt()
            .max(f32::MIN_POSITIVE);
        store.extend(row.iter().map(|v| v / norm));
        if r % step == 0 || r + 1 == rows {
            progress("generating the memory store", r + 1, rows);
        }
    }
    let sources: Vec<usize> = (0..queries)
        .map(|_| rng.below(rows as u64) as usize)
        .collect();
    let mut qs = Vec::with_capacity(queries * dim);
    for &s in &sources {
        qs.extend((0..dim).map(|j| store[s * dim + j] + 0.02 * rng.next_f32()));
    }
    (store, qs, sources)
}

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

fn agreement(cpu: Option<bool>) -> String {
    match cpu {
        None => "CPU only".into(),
        Some(true) => "bit-identical".into(),
        Some(false) => "DIFFERENT".into(),
    }
}

pub fn run(a: DemoArgs) -> Result<ExitCode, String> {
    if a.rows == 0
        || a.dim == 0
        || a.queries == 0
        || a.k == 0
        || a.k > a.rows
        || a.anchors == 0
        || a.anchors > a.rows
        || a.iters == 0
    {
        return Err(
            "--rows, --dim, --queries, -k, --anchors and --iters must be at least 1, and -k and --anchors at most --rows"
                .into(),
        );
    }
    crate::util::check_size("--rows x --dim", &[a.rows, a.dim])?;
    crate::util::check_size("--queries x --dim", &[a.queries, a.dim])?;
    crate::util::check_size("--rows x 10 links", &[a.rows, 10, 4])?;
    let engine = Engine::new().map_err(|e| e.to_string())?;
    let gpu = matches!(engine.gpu_status(), GpuStatus::Ready(_));
    match engine.gpu_status() {
        GpuStatus::Ready(d) => println!("GPU: {} ({}), kernels: {}", d.name, d.sm, d.image),
        GpuStatus::Unavailable(why) => println!("GPU: none ({why}); everything runs on the CPU"),
    }
    // With a GPU, the same calls also run on a CPU-only engine to show that the answers agree bit for bit.
    let cpu = if gpu {
        Some(
            Engine::builder()
                .device(DevicePolicy::Cpu)
                .build()
                .map_err(|e| e.to_string())?,
        )
    } else {
        None
    };

    let mut rng = SplitMix::new(2026);
    let (store, queries, sources) = memory_store(&mut rng, a.rows, a.dim, a.queries);
    let edges = a.rows * 10;
    eprintln!(
        "building the association graph: {} memories, {} links",
        grouped(a.rows as u64),
        grouped(edges as u64)
    );
    let (indptr, indices, weights) = power_law_graph(&mut rng, a.rows, edges, 0, 0);
    let graph = SpreadGraph::from_csr(&indptr, &indices, &weights).map_err(|e| e.to_string())?;
    println!(
        "memory store: {} embeddings x {} dims in 64 topics, {} association links; {} queries",
        grouped(a.rows as u64),
        a.dim,
        grouped(graph.n_edges() as u64),
        a.queries
    );

    // Time `f` on `engine`; with a GPU the first call also warms up (kernel load, calibration), so the
    // reported time is the second call's.
    fn timed<T>(
        gpu: bool,
        mut f: impl FnMut() -> Result<T, recall::Error>,
    ) -> Result<(T, f64), String> {
        if gpu {
            f().map_err(|e| e.to_string())?;
        }
        let t = Instant::now();
        let v = f().map_err(|e| e.to_string())?;
        Ok((v, t.elapsed().as_secs_f64() * 1e3))
    }
    let mut rows = Vec::new();
    let dim = a.dim;
    // A memory engine keeps its store and graph as handles: checked once, and on a GPU resident across
    // calls (the CPU comparison below runs the plain slice calls).
    let store_h = engine
        .corpus(store.clone(), dim)
        .map_err(|e| e.to_string())?;
    let graph_h = engine
        .graph(&indptr, &indices, &weights)
        .map_err(|e| e.to_string())?;

    // 1. Recall: the k nearest memories of every query.
    let (hits, ms) = timed(gpu, || {
        engine.knn_in(&queries, &store_h, Metric::Cosine, a.k)
    })?;
    let same = match &cpu {
        Some(c) => {
            let r = c
                .knn(&queries, &store, dim, Metric::Cosine, a.k)
                .map_err(|e| e.to_string())?;
            Some(r.ids == hits.ids && same_bits(&r.scores, &hits.scores))
        }
        None => None,
    };
    let found = (0..a.queries)
        .filter(|&q| hits.query(q).0[0] as usize == sources[q])
        .count();
    rows.push(Row {
        op: format!(
            "knn top-{} ({} queries x {})",
            a.k,
            a.queries,
            grouped(a.rows as u64)
        ),
        device: hits.device.to_string(),
        ms,
        throughput: format!("{:.0} queries/s", a.queries as f64 / (ms / 1e3)),
        agreement: agreement(same),
    });

    // 2. Association: spread activation from every query's hits (activation = cosine score, clamped >= 0).
    let mut seeds = vec![0.0f32; a.rows];
    for (id, s) in hits.ids.iter().zip(&hits.scores) {
        let v = &mut seeds[*id as usize];
        *v = v.max(s.max(0.0));
    }
    let params = SpreadParams {
        decay: 0.5,
        threshold: 1e-3,
        hops: 3,
        k: 100.min(a.rows),
    };
    let (act, ms) = timed(gpu, || engine.spread_in(&graph_h, &seeds, &params))?;
    let same = match &cpu {
        Some(c) => {
            let r = c
                .spread(&graph, &seeds, &params)
                .map_err(|e| e.to_string())?;
            Some(same_bits(&r.activation, &act.activation) && r.top == act.top)
        }
        None => None,
    };
    rows.push(Row {
        op: format!("spread 3 hops, top-{}", params.k),
        device: act.device.to_string(),
        ms,
        throughput: format!(
            "{:.0} M links/s",
            3.0 * graph.n_edges() as f64 / (ms / 1e3) / 1e6
        ),
        agreement: agreement(same),
    });

    // 3. Re-score: every query ranks its own hits plus the memories spreading surfaced.
    let mut offsets = vec![0usize];
    let mut ids = Vec::new();
    for q in 0..a.queries {
        let mut list: Vec<u32> = hits.query(q).0.to_vec();
        list.extend(act.top.ids.iter().copied());
        list.sort_unstable();
        list.dedup();
        ids.extend(list);
        offsets.push(ids.len());
    }
    let (rescored, ms) = timed(gpu, || {
        engine.score_candidates_in(&queries, &store_h, Metric::Dot, &offsets, &ids, a.k)
    })?;
    let same = match &cpu {
        Some(c) => {
            let r = c
                .score_candidates(&queries, &store, dim, Metric::Dot, &offsets, &ids, a.k)
                .map_err(|e| e.to_string())?;
            Some(r.ids == rescored.ids && same_bits(&r.scores, &rescored.scores))
        }
        None => None,
    };
    rows.push(Row {
        op: format!(
            "re-score {} candidates, top-{}",
            grouped(ids.len() as u64),
            a.k
        ),
        device: rescored.device.to_string(),
        ms,
        throughput: format!("{:.1} M candidates/s", ids.len() as f64 / (ms / 1e3) / 1e6),
        agreement: agreement(same),
    });

    // 4. Compression: summarise the store by anchors.
    let (anchors, ms) = timed(gpu, || engine.kmeans(&store, dim, a.anchors, a.iters, 7))?;
    let same = match &cpu {
        Some(c) => {
            let r = c
                .kmeans(&store, dim, a.anchors, a.iters, 7)
                .map_err(|e| e.to_string())?;
            Some(
                same_bits(&r.centroids, &anchors.centroids)
                    && r.assignments == anchors.assignments
                    && r.inertia == anchors.inertia,
            )
        }
        None => None,
    };
    rows.push(Row {
        op: format!("k-means {} anchors, {} iterations", a.anchors, a.iters),
        device: anchors.device.to_string(),
        ms,
        throughput: format!(
            "{} point-iterations/s",
            grouped(((a.rows * a.iters) as f64 / (ms / 1e3)) as u64)
        ),
        agreement: agreement(same),
    });

    println!();
    println!("| op | device | time | throughput | CPU/GPU agreement |");
    println!("|---|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {} | {:.1} ms | {} | {} |",
            r.op, r.device, r.ms, r.throughput, r.agreement
        );
    }
    println!();
    println!(
        "queries whose own source memory is their best match: {found} of {}",
        a.queries
    );
    if let Some(last) = anchors.inertia.last() {
        println!(
            "compression: inertia {:.1} -> {:.1} over {} iterations",
            anchors.inertia[0], last, a.iters
        );
    }
    for (what, f) in [("knn", &hits.fallback), ("re-score", &rescored.fallback)] {
        if let Some(why) = f {
            println!("note: the GPU call for {what} failed and the CPU answered: {why}");
        }
    }
    let all_agree = rows.iter().all(|r| r.agreement != "DIFFERENT");
    Ok(if all_agree {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
