//! `recall demo`: the main job on built-in data.

use crate::util::grouped;
use recall::diagnostics::bench::random_matrix;
use recall::{DevicePolicy, Engine, GpuStatus};
use std::process::ExitCode;
use std::time::Instant;

#[derive(clap::Args, Debug)]
pub struct DemoArgs {
    /// Stored embeddings in the generated memory store.
    #[arg(long, default_value_t = 200_000)]
    rows: usize,
    /// Embedding dimension.
    #[arg(long, default_value_t = 384)]
    dim: usize,
    /// Queries in the batch.
    #[arg(long, default_value_t = 16)]
    queries: usize,
}

pub fn run(a: DemoArgs) -> Result<ExitCode, String> {
    if a.rows == 0 || a.dim == 0 || a.queries == 0 {
        return Err("--rows, --dim and --queries must be at least 1".into());
    }
    let engine = Engine::new().map_err(|e| e.to_string())?;
    match engine.gpu_status() {
        GpuStatus::Ready(d) => println!("GPU: {} ({}), kernels: {}", d.name, d.sm, d.image),
        GpuStatus::Unavailable(why) => println!("GPU: none ({why}); everything runs on the CPU"),
    }
    println!(
        "generating a memory store: {} embeddings x {} dims, {} queries",
        grouped(a.rows as u64),
        a.dim,
        a.queries
    );
    let corpus = random_matrix(1, a.rows, a.dim);
    let queries = random_matrix(2, a.queries, a.dim);

    let t = Instant::now();
    let scores = engine
        .cosine_similarity(&queries, &corpus, a.dim)
        .map_err(|e| e.to_string())?;
    let secs = t.elapsed().as_secs_f64();
    let pairs = (a.queries * a.rows) as f64;

    // The same call forced onto the CPU, to show the answers agree bit for bit.
    let agreement = if scores.device != recall::Device::Cpu {
        let cpu = Engine::builder()
            .device(DevicePolicy::Cpu)
            .build()
            .map_err(|e| e.to_string())?;
        let t = Instant::now();
        let reference = cpu
            .cosine_similarity(&queries, &corpus, a.dim)
            .map_err(|e| e.to_string())?;
        let cpu_secs = t.elapsed().as_secs_f64();
        let same = reference
            .values
            .iter()
            .zip(&scores.values)
            .filter(|(x, y)| x.to_bits() == y.to_bits())
            .count();
        Some((cpu_secs, same, reference.values.len()))
    } else {
        None
    };

    println!();
    println!("| op | device | time | throughput | CPU/GPU agreement |");
    println!("|---|---|---|---|---|");
    let agree = match agreement {
        Some((_, same, total)) if same == total => {
            format!("bit-identical ({} scores)", grouped(total as u64))
        }
        Some((_, same, total)) => format!(
            "{} of {} scores differ",
            grouped((total - same) as u64),
            grouped(total as u64)
        ),
        None => "CPU only".into(),
    };
    println!(
        "| cosine similarity {}x{} | {} | {:.1} ms | {:.1} M pairs/s | {agree} |",
        a.queries,
        grouped(a.rows as u64),
        scores.device,
        secs * 1e3,
        pairs / secs / 1e6
    );
    if let Some((cpu_secs, _, _)) = agreement {
        println!(
            "| cosine similarity {}x{} | cpu | {:.1} ms | {:.1} M pairs/s | reference |",
            a.queries,
            grouped(a.rows as u64),
            cpu_secs * 1e3,
            pairs / cpu_secs / 1e6
        );
    }
    if let Some(why) = &scores.fallback {
        println!("\nnote: the GPU call failed and the CPU answered: {why}");
    }
    // The best match of the first query, as a sanity line a person can read.
    let first = &scores.values[..a.rows];
    if let Some((best, s)) = first
        .iter()
        .enumerate()
        .max_by(|x, y| x.1.total_cmp(y.1).then(y.0.cmp(&x.0)))
    {
        println!("\nquery 0: best row {best} with cosine {s:.6}");
    }
    Ok(match agreement {
        Some((_, same, total)) if same != total => ExitCode::FAILURE,
        _ => ExitCode::SUCCESS,
    })
}
