//! memory-pool benchmarks for a GPU machine, printed as markdown for `docs/results/`:
//!
//! 1. Pool allocate + free on a cache hit against raw `cuMemAlloc` + `cuMemFree` (target: 100x faster).
//! 2. Moving a 1 GiB f32 corpus to the device and scanning it once (the `row_norms_f32` kernel reads every
//!    element): managed memory with prefetch, pinned memory with an async copy, pageable memory with a
//!    copy (target: managed with prefetch within 5 % of pinned plus async copy).
//!
//! Run: `pool_bench [--corpus-mib N] [--reps N]`; set `RECALL_COMMIT` to have the commit printed.
//! Without a GPU it prints why it skipped and exits 0.

use recall_gpu_kernels::Kernels;
use recall_gpu_sys::memory as raw;
use recall_gpu_sys::{Gpu, driver_version_string, probe};
use recall_memory_pool::{
    Budget, DeviceBuffer, GpuMemory, ManagedBuffer, MemoryConfig, PinnedBuffer, UnifiedMode,
};
use std::error::Error;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

type R<T> = Result<T, Box<dyn Error>>;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let p = probe();
    let devices = match p.result {
        Ok(d) => d,
        Err(reason) => {
            println!("pool_bench: skipped: no GPU: {reason}");
            return;
        }
    };
    let corpus_mib = arg(&args, "--corpus-mib").unwrap_or(1024);
    let reps = arg(&args, "--reps").unwrap_or(7).max(1);
    if let Err(e) = run(
        devices[0].ordinal,
        p.driver_version,
        &args,
        corpus_mib,
        reps,
    ) {
        eprintln!("pool_bench failed: {e}");
        std::process::exit(1);
    }
}

fn arg(args: &[String], name: &str) -> Option<usize> {
    let i = args.iter().position(|a| a == name)?;
    args.get(i + 1)?.parse().ok()
}

fn today() -> String {
    let days = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() / 86_400)
        .unwrap_or(0) as i64;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn run(
    ordinal: usize,
    driver: Option<i32>,
    args: &[String],
    corpus_mib: usize,
    reps: usize,
) -> R<()> {
    let gpu = Gpu::open(ordinal)?;
    let info = gpu.info().clone();
    let mem = GpuMemory::new(
        &gpu,
        MemoryConfig {
            budget: Budget::default(),
            pinned_budget_bytes: (corpus_mib + 64) << 20,
            ..MemoryConfig::default()
        },
    )?;
    println!("# memory-pool benchmarks\n");
    println!("- date: {}", today());
    println!(
        "- device: {} ({}, {} MiB)",
        info.name,
        info.sm(),
        info.total_memory >> 20
    );
    println!(
        "- driver: CUDA {}",
        driver
            .map(driver_version_string)
            .unwrap_or_else(|| "unknown".into())
    );
    println!(
        "- commit: {}",
        std::env::var("RECALL_COMMIT").unwrap_or_else(|_| "unknown (set RECALL_COMMIT)".into())
    );
    println!("- command: `{}`", args.join(" "));
    println!("- unified mode: {:?}\n", mem.unified_mode());

    // 1. Allocate + free.
    println!("## Allocate + free: pool cache hit vs raw cuMemAlloc + cuMemFree\n");
    println!(
        "| size | raw cuMemAlloc+cuMemFree | pool hit allocate+free | speedup | target 100x |"
    );
    println!("|---:|---:|---:|---:|:---|");
    let ctx = mem.context().clone();
    for &(size, n) in &[
        (4usize << 10, 20_000usize),
        (1 << 20, 20_000),
        (64 << 20, 2_000),
        (512 << 20, 200),
    ] {
        // Warm both paths.
        let p = raw::device_alloc(&ctx, size)?;
        // SAFETY: just allocated, no work uses it.
        unsafe { raw::device_free(&ctx, p) }?;
        drop(mem.device_pool().allocate(size, mem.stream())?);

        let t = Instant::now();
        for _ in 0..n {
            let p = raw::device_alloc(&ctx, size)?;
            // SAFETY: just allocated, no work uses it.
            unsafe { raw::device_free(&ctx, p) }?;
        }
        let raw_ns = t.elapsed().as_nanos() as f64 / n as f64;

        let hits0 = mem.device_pool().stats().hits;
        let t = Instant::now();
        for _ in 0..n {
            let b = mem.device_pool().allocate(size, mem.stream())?;
            drop(b);
        }
        let pool_ns = t.elapsed().as_nanos() as f64 / n as f64;
        let hits = mem.device_pool().stats().hits - hits0;
        if hits != n as u64 {
            return Err(format!("expected {n} cache hits, got {hits}").into());
        }
        let speedup = raw_ns / pool_ns;
        println!(
            "| {} KiB | {:.2} us | {:.0} ns | {:.0}x | {} |",
            size >> 10,
            raw_ns / 1e3,
            pool_ns,
            speedup,
            if speedup >= 100.0 { "met" } else { "NOT met" }
        );
    }
    mem.device_pool().trim_all();

    // 2. Move a corpus to the device and scan it once.
    let dim = 256usize;
    let n = (corpus_mib << 20) / 4;
    let n_rows = n / dim;
    let bytes = n_rows * dim * 4;
    println!(
        "\n## Move a {corpus_mib} MiB f32 corpus ({n_rows} x {dim}) to the device and scan it once\n"
    );
    println!(
        "Scan: `row_norms_f32` (reads every element). Median of {reps} runs after one warm-up; each run is"
    );
    println!("timed on the host from the first call to the end of a stream synchronize.\n");
    let kernels = Kernels::load(&gpu, None)?;
    let host: Vec<f32> = (0..n_rows * dim).map(|i| (i % 977) as f32 * 1e-3).collect();
    let mut out = DeviceBuffer::<f32>::try_zeroed(&mem, n_rows)?;
    let scan = |x: &recall_gpu_sys::driver::CudaSlice<f32>, out: &mut DeviceBuffer<f32>| -> R<()> {
        let mut o = out.as_cuda_slice_mut()?;
        kernels.row_norms_f32(&gpu, x, n_rows, dim, &mut o)?;
        Ok(())
    };
    let mut rows: Vec<(String, Duration)> = Vec::new();

    // Device-resident: the scan alone.
    let mut dev = DeviceBuffer::try_from_host(&mem, &host)?;
    {
        let mut times = Vec::new();
        for i in 0..=reps {
            let t = Instant::now();
            scan(&*dev.as_cuda_slice()?, &mut out)?;
            gpu.synchronize()?;
            if i > 0 {
                times.push(t.elapsed());
            }
        }
        rows.push((
            "scan only (data already on the device)".into(),
            median(times),
        ));
    }
    let reference = out.to_vec()?;

    // Pageable copy.
    {
        let mut times = Vec::new();
        for i in 0..=reps {
            let t = Instant::now();
            dev.copy_from_host(&host)?;
            scan(&*dev.as_cuda_slice()?, &mut out)?;
            gpu.synchronize()?;
            if i > 0 {
                times.push(t.elapsed());
            }
        }
        rows.push((
            "pageable memory + cuMemcpyHtoD + scan".into(),
            median(times),
        ));
    }

    // Pinned + async copy.
    let pinned_time;
    {
        let mut pinned = PinnedBuffer::try_from_slice(&mem, &host)?;
        let mut times = Vec::new();
        for i in 0..=reps {
            let t = Instant::now();
            dev.copy_from_pinned_async(&mut pinned)?;
            scan(&*dev.as_cuda_slice()?, &mut out)?;
            gpu.synchronize()?;
            if i > 0 {
                times.push(t.elapsed());
            }
        }
        pinned_time = median(times);
        rows.push((
            "pinned memory + cuMemcpyHtoDAsync + scan".into(),
            pinned_time,
        ));
    }
    if out.to_vec()? != reference {
        return Err("pinned path scanned different data".into());
    }
    drop(dev);

    // Managed + prefetch.
    let mut managed_time = None;
    if mem.unified_mode() == UnifiedMode::Managed {
        let managed = ManagedBuffer::try_from_slice(&mem, &host)?;
        let mut times = Vec::new();
        for i in 0..=reps {
            managed.prefetch_to_host()?;
            managed.synchronize()?;
            let t = Instant::now();
            managed.prefetch_to_device()?;
            scan(&*managed.as_cuda_slice()?, &mut out)?;
            gpu.synchronize()?;
            if i > 0 {
                times.push(t.elapsed());
            }
        }
        let m = median(times);
        managed_time = Some(m);
        rows.push(("managed memory + cuMemPrefetchAsync + scan".into(), m));
        if out.to_vec()? != reference {
            return Err("managed path scanned different data".into());
        }
        // For information: no prefetch, page faults migrate on demand.
        let mut times = Vec::new();
        for _ in 0..reps.min(3) {
            managed.prefetch_to_host()?;
            managed.synchronize()?;
            let t = Instant::now();
            scan(&*managed.as_cuda_slice()?, &mut out)?;
            gpu.synchronize()?;
            times.push(t.elapsed());
        }
        rows.push((
            "managed memory, no prefetch (fault-driven) + scan".into(),
            median(times),
        ));
    }

    println!("| path | time | effective GB/s |");
    println!("|:---|---:|---:|");
    for (name, t) in &rows {
        println!(
            "| {name} | {:.2} ms | {:.1} |",
            t.as_secs_f64() * 1e3,
            bytes as f64 / t.as_secs_f64() / 1e9
        );
    }
    match managed_time {
        Some(m) => {
            let ratio = m.as_secs_f64() / pinned_time.as_secs_f64();
            println!(
                "\nmanaged + prefetch / pinned + async copy = {ratio:.3} (target <= 1.05: {})",
                if ratio <= 1.05 { "met" } else { "NOT met" }
            );
        }
        None => println!(
            "\nmanaged memory not used on this device ({:?}): no managed rows",
            mem.unified_mode()
        ),
    }
    let errors = mem.device_pool().take_errors();
    if !errors.is_empty() {
        println!("\nrecorded pool errors: {errors:?}");
    }
    Ok(())
}
