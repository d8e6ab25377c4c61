//! `recall info`.

use crate::util::{cpu_model, gib, grouped, threads};
use recall::{Engine, GpuStatus};
use std::process::ExitCode;

pub fn run() -> Result<ExitCode, String> {
    let engine = Engine::new().map_err(|e| e.to_string())?;
    println!("recall {}", env!("CARGO_PKG_VERSION"));
    println!(
        "device policy: {} (set RECALL_DEVICE=cpu|gpu|auto to change)",
        engine.device_policy()
    );
    match engine.gpu_status() {
        GpuStatus::Ready(d) => {
            println!(
                "GPU {}: {} ({}, {} SMs)",
                d.ordinal, d.name, d.sm, d.sm_count
            );
            println!(
                "  memory {} total, {} free; L2 {} MiB; managed memory {}",
                gib(d.total_memory),
                gib(d.free_memory),
                d.l2_cache_bytes >> 20,
                if d.managed_memory_usable {
                    "usable"
                } else {
                    "not usable (pinned host memory instead)"
                }
            );
            println!("  driver supports CUDA {}", d.driver);
            println!("  kernel image loaded: {}", d.image);
        }
        GpuStatus::Unavailable(why) => println!("GPU: none usable: {why}"),
    }
    let gpus = engine.gpus();
    if gpus.len() > 1 {
        println!(
            "GPUs used: {} (corpus handles sharded over them, other calls to the least-loaded; RECALL_GPUS=0,1 chooses)",
            gpus.iter()
                .map(|g| format!("{} ({}, {})", g.ordinal, g.name, gib(g.total_memory)))
                .collect::<Vec<_>>()
                .join(", ")
        );
    } else if let Some(g) = gpus.first() {
        println!("GPUs used: {} only (RECALL_GPUS=0,1 chooses)", g.ordinal);
    }
    if recall::GPU_COMPILED_IN {
        println!(
            "kernel bundle: cubin and PTX for {}",
            recall::diagnostics::bundle_arches()
        );
    } else {
        println!("kernel bundle: none (this build has no GPU support)");
    }
    println!(
        "CPU: {} ({} threads), SIMD path: {}",
        cpu_model(),
        threads(),
        recall::cpu_simd_level()
    );
    println!("where ops run (cosine similarity, queries x rows x dim):");
    for (q, n, d) in [
        (1u64, 1_000u64, 768u64),
        (1, 100_000, 768),
        (1, 1_000_000, 768),
        (1024, 1_000_000, 768),
    ] {
        let (device, why) = engine.explain(q * n * d);
        println!(
            "  {:>5} x {:>9} x {:<4} -> {:<6} ({why})",
            q,
            grouped(n),
            d,
            device.to_string()
        );
    }
    Ok(ExitCode::SUCCESS)
}
