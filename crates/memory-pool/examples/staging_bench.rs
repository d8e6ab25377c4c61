//! The staging ring's setup and throughput against its chunk size, printed as markdown for `docs/results/`:
//! what the GPU backend's staged uploads and downloads (`StagingRing::upload_with` / `download_with`, the host
//! copy on the backend's host pool) cost on their first use in a process, and how fast they move data once made.
//!
//! 1. Setup, first in the process for each chunk size: `StagingRing::new` (two slots from the pinned pool, which
//!    page-locks fresh memory, and the slots' zeroing), then the first upload of 24 MiB through it; beside one
//!    pageable `cuMemcpyHtoD` of the same 24 MiB. Chunk sizes are taken in increasing order, each a size class
//!    the pinned pool has not cached yet.
//! 2. Steady state: uploads and downloads of 24 MiB, 256 MiB and 1 GiB through each ring (median of `--reps`),
//!    into a reused buffer, against the pageable copies.
//!
//! Run: `staging_bench [--reps N] [--chunks-mib 4,8,16,32]`; set `RECALL_COMMIT` to have the commit printed.
//! Without a GPU it says why and exits 0.

use recall_gpu_sys::{Gpu, probe};
use recall_memory_pool::{Budget, DeviceBuffer, GpuMemory, MemoryConfig, StagingRing};
use std::error::Error;
use std::time::{Duration, Instant};

type R<T> = Result<T, Box<dyn Error>>;

fn par_copy(to: &mut [u8], from: &[u8]) {
    recall_gpu_kernels::on_host_pool(|| {
        use rayon::prelude::*;
        to.par_chunks_mut(1 << 20)
            .zip(from.par_chunks(1 << 20))
            .for_each(|(d, s)| d.copy_from_slice(s));
    });
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn gbps(bytes: usize, d: Duration) -> String {
    format!("{:.1}", bytes as f64 / d.as_secs_f64() / 1e9)
}

fn main() {
    let all: Vec<String> = std::env::args().collect();
    let arg = |name: &str| {
        let i = all.iter().position(|a| a == name)?;
        all.get(i + 1).cloned()
    };
    let reps: usize = arg("--reps")
        .and_then(|s| s.parse().ok())
        .unwrap_or(5)
        .max(1);
    let chunks: Vec<usize> = arg("--chunks-mib")
        .unwrap_or_else(|| "4,8,16,32".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    println!("# staging ring: setup and throughput by chunk size\n");
    println!(
        "- commit: {}",
        std::env::var("RECALL_COMMIT").unwrap_or_else(|_| "unknown (set RECALL_COMMIT)".into())
    );
    println!("- command: `{}`", all.join(" "));
    let p = probe();
    let devices = match p.result {
        Ok(d) => d,
        Err(reason) => {
            println!("\nstaging_bench: skipped, no GPU: {reason}");
            return;
        }
    };
    if let Err(e) = run(devices[0].ordinal, reps, &chunks) {
        eprintln!("staging_bench failed: {e}");
        std::process::exit(1);
    }
}

fn run(ordinal: usize, reps: usize, chunks: &[usize]) -> R<()> {
    let gpu = Gpu::open(ordinal)?;
    println!("- device: {}", gpu.info().name);
    let mem = GpuMemory::new(
        &gpu,
        MemoryConfig {
            budget: Budget::default(),
            pinned_budget_bytes: 1 << 30,
            ..MemoryConfig::default()
        },
    )?;
    let small = 24 << 20;
    let sizes = [small, 256 << 20, 1 << 30];
    let host: Vec<u8> = (0..sizes[2]).map(|i| (i * 31 % 251) as u8).collect();
    let mut dev = DeviceBuffer::<u8>::try_alloc(&mem, small)?;
    // The pageable copies, warmed once.
    dev.copy_from_host(&host[..small])?;
    dev.synchronize()?;
    let t = Instant::now();
    dev.copy_from_host(&host[..small])?;
    dev.synchronize()?;
    let pageable_small = t.elapsed();

    println!("\n## First use in the process (24 MiB)\n");
    println!(
        "| chunk | `StagingRing::new` | first staged upload of 24 MiB | setup + first upload | one pageable copy |"
    );
    println!("|---:|---:|---:|---:|---:|");
    let mut rings = Vec::new();
    for &c in chunks {
        let t = Instant::now();
        let mut ring = StagingRing::new(&mem, c << 20, mem.stream())?;
        let made = t.elapsed();
        let t = Instant::now();
        ring.upload_with(&host[..small], &mut dev, 0, par_copy)?;
        dev.synchronize()?;
        let first = t.elapsed();
        println!(
            "| {c} MiB | {} | {} | {} | {} |",
            ms(made),
            ms(first),
            ms(made + first),
            ms(pageable_small)
        );
        rings.push((c, ring));
    }

    println!("\n## Steady state (median of {reps}, into a reused buffer)\n");
    println!("| size | path | up | up GB/s | down | down GB/s |");
    println!("|---:|---|---:|---:|---:|---:|");
    let mut back = vec![0u8; sizes[2]];
    for &n in &sizes {
        let mut dev = DeviceBuffer::<u8>::try_alloc(&mem, n)?;
        let (mut up, mut down) = (Vec::new(), Vec::new());
        for _ in 0..reps {
            let t = Instant::now();
            dev.copy_from_host(&host[..n])?;
            dev.synchronize()?;
            up.push(t.elapsed());
            let t = Instant::now();
            dev.copy_to_host(&mut back[..n])?;
            down.push(t.elapsed());
        }
        let (u, d) = (median(up), median(down));
        println!(
            "| {} MiB | pageable | {} | {} | {} | {} |",
            n >> 20,
            ms(u),
            gbps(n, u),
            ms(d),
            gbps(n, d)
        );
        for (c, ring) in rings.iter_mut() {
            let (mut up, mut down) = (Vec::new(), Vec::new());
            for _ in 0..reps {
                let t = Instant::now();
                ring.upload_with(&host[..n], &mut dev, 0, par_copy)?;
                dev.synchronize()?;
                up.push(t.elapsed());
                let t = Instant::now();
                ring.download_with(&dev, 0, &mut back[..n], par_copy)?;
                down.push(t.elapsed());
            }
            if back[..n] != host[..n] {
                return Err(format!("{c} MiB chunks: the round trip of {n} bytes differs").into());
            }
            let (u, d) = (median(up), median(down));
            println!(
                "| {} MiB | staged, {c} MiB chunks | {} | {} | {} | {} |",
                n >> 20,
                ms(u),
                gbps(n, u),
                ms(d),
                gbps(n, d)
            );
        }
    }
    Ok(())
}
