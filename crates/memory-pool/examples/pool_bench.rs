//! memory-pool benchmarks, printed as markdown for `docs/results/`:
//!
//! 0. (any machine) The pool's hit path with the fake allocator: allocate + free of a cached block, from
//!    the thread cache (the lock-free path) and through the lock (a tenant with a quota), so the hit path
//!    can be measured without a GPU.
//! 1. (GPU) Pool allocate + free on a cache hit against raw `cuMemAlloc` + `cuMemFree` (target: 100x).
//! 2. (GPU) Moving a 1 GiB f32 corpus to the device and scanning it once (the `row_norms_f32` kernel reads
//!    every element): managed memory with prefetch (whole, with read-mostly advice, and chunked: prefetch
//!    of chunk i + 1 on other streams, from one or several threads, while chunk i is scanned), pinned
//!    memory with an asynchronous copy (whole, and chunked the same way), pageable memory with a copy
//!    (target: managed with prefetch within 5 % of pinned plus async copy). Also managed memory freshly
//!    allocated and written by the host, and with preferred-location-device advice; and, as a diagnostic,
//!    the move alone (prefetch, copy) without the scan, to show which part of the path sets the ratio.
//!    `--streams S --chunk-mib C` with `S * C` = the corpus gives one prefetch call per issuer thread.
//!    Beside the pageable copy, the staged upload of pageable data that the GPU backend uses for large caller
//!    slices (`StagingRing::upload_with`: chunks of `--staged-chunk-mib`, default 16 as the backend's
//!    `STAGING_RING_CHUNK_BYTES`, copied into two pinned slots while the previous chunk is DMA'd), with the host copy
//!    on one thread and in parallel on the GPU backend's host pool (`recall_gpu_kernels::on_host_pool`); with
//!    the scan, and the move alone.
//! 3. (GPU) Moving the same corpus back from the device into pageable host memory, as the GPU backend returns a
//!    large result: one pageable `cuMemcpyDtoH` into a fresh `Vec` (its pages first touched by the copy) and into
//!    a reused one; the staged download (`StagingRing::download_with`, the same slots: the DMA of chunk i + 1
//!    beside the host's copy of chunk i out) with the one-thread and the host-pool copy, into a reused `Vec` and
//!    (host-pool copy) into a fresh one; and the pinned ceiling, one `cuMemcpyDtoHAsync` into a pinned buffer.
//!
//! Run: `pool_bench [--corpus-mib N] [--reps N] [--chunk-mib N] [--streams N] [--staged-chunk-mib N]
//! [--cpu-only]`; set
//! `RECALL_COMMIT` to have the commit printed. Without a GPU it prints section 0, says why it skipped
//! the rest, and exits 0.

use recall_gpu_kernels::Kernels;
use recall_gpu_sys::memory::{self as raw, BorrowedSlice};
use recall_gpu_sys::{Gpu, driver_version_string, probe};
use recall_memory_pool::fake::{FakeAllocator, FakeStream};
use recall_memory_pool::{
    Advice, Budget, CachingPool, DeviceBuffer, GpuMemory, ManagedBuffer, MemoryConfig,
    PinnedBuffer, PoolConfig, StagingRing, Stream, TenantId, UnifiedMode,
};
use std::error::Error;
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

type R<T> = Result<T, Box<dyn Error>>;

/// A staged upload's host copy of one chunk into its pinned slot (`StagingRing::upload_with`).
type HostCopy = dyn Fn(&mut [u8], &[u8]) + Sync;

struct Args {
    all: Vec<String>,
    corpus_mib: usize,
    reps: usize,
    chunk_mib: usize,
    streams: usize,
    staged_chunk_mib: usize,
    cpu_only: bool,
}

fn main() {
    let all: Vec<String> = std::env::args().collect();
    let args = Args {
        corpus_mib: arg(&all, "--corpus-mib").unwrap_or(1024),
        reps: arg(&all, "--reps").unwrap_or(7).max(1),
        chunk_mib: arg(&all, "--chunk-mib").unwrap_or(64).max(1),
        streams: arg(&all, "--streams").unwrap_or(4).max(1),
        staged_chunk_mib: arg(&all, "--staged-chunk-mib").unwrap_or(16).max(1),
        cpu_only: all.iter().any(|a| a == "--cpu-only"),
        all,
    };
    println!("# memory-pool benchmarks\n");
    println!("- date: {}", today());
    println!(
        "- commit: {}",
        std::env::var("RECALL_COMMIT").unwrap_or_else(|_| "unknown (set RECALL_COMMIT)".into())
    );
    println!("- command: `{}`", args.all.join(" "));
    if let Err(e) = fake_hit_path() {
        eprintln!("pool_bench failed: {e}");
        std::process::exit(1);
    }
    if args.cpu_only {
        return;
    }
    let p = probe();
    let devices = match p.result {
        Ok(d) => d,
        Err(reason) => {
            println!("\npool_bench: GPU sections skipped: no GPU: {reason}");
            return;
        }
    };
    if let Err(e) = run(devices[0].ordinal, p.driver_version, &args) {
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

/// Nanoseconds per `f()` call: the median over `batches` batches of `n` calls.
fn per_call_ns(batches: usize, n: usize, f: impl FnMut() -> R<()>) -> R<f64> {
    Ok(per_call_ns_stats(batches, n, f)?.0)
}

/// Nanoseconds per `f()` call over `batches` batches of `n` calls: (median batch, best batch).
fn per_call_ns_stats(batches: usize, n: usize, mut f: impl FnMut() -> R<()>) -> R<(f64, f64)> {
    let mut times = Vec::with_capacity(batches);
    for _ in 0..batches {
        let t = Instant::now();
        for _ in 0..n {
            f()?;
        }
        times.push(t.elapsed());
    }
    let best = times.iter().min().copied().unwrap_or_default();
    let per = |d: Duration| d.as_nanos() as f64 / n as f64;
    Ok((per(median(times)), per(best)))
}

/// Section 0: the hit path with the fake allocator (no GPU needed).
fn fake_hit_path() -> R<()> {
    println!("\n## Pool hit path on this machine's CPU (fake allocator)\n");
    println!(
        "Allocate + free of a cached block on one stream, median of 9 batches of 200,000. \"thread cache\": the"
    );
    println!(
        "default tenant (no quota), served lock-free from the thread's cache; \"locked\": a tenant with a"
    );
    println!(
        "quota, which always takes the pool lock. \"best\": the fastest batch (on a shared machine the median"
    );
    println!("includes other processes' time slices).\n");
    println!(
        "| size | thread cache (median) | thread cache (best) | locked (median) | locked (best) |"
    );
    println!("|---:|---:|---:|---:|---:|");
    let pool = CachingPool::new(
        FakeAllocator::new(1 << 30),
        PoolConfig::with_budget(1 << 30),
    );
    let quota = TenantId(1);
    pool.set_tenant_quota(quota, Some(1 << 30));
    let s = FakeStream(1);
    for size in [4usize << 10, 64 << 10, 1 << 20] {
        drop(pool.allocate(size, &s)?);
        let (fast, fast_best) = per_call_ns_stats(9, 200_000, || {
            let b = pool.allocate(std::hint::black_box(size), &s)?;
            drop(std::hint::black_box(b));
            Ok(())
        })?;
        drop(pool.allocate_for(quota, size, &s)?);
        let (locked, locked_best) = per_call_ns_stats(9, 200_000, || {
            let b = pool.allocate_for(quota, std::hint::black_box(size), &s)?;
            drop(std::hint::black_box(b));
            Ok(())
        })?;
        println!(
            "| {} KiB | {fast:.1} ns | {fast_best:.1} ns | {locked:.1} ns | {locked_best:.1} ns |",
            size >> 10
        );
    }
    let st = pool.stats();
    if st.hits + st.misses != st.requests || st.hits == 0 {
        return Err(format!("unexpected pool counters: {st:?}").into());
    }
    Ok(())
}

fn run(ordinal: usize, driver: Option<i32>, args: &Args) -> R<()> {
    let gpu = Gpu::open(ordinal)?;
    let info = gpu.info().clone();
    let corpus_mib = args.corpus_mib;
    let mem = GpuMemory::new(
        &gpu,
        MemoryConfig {
            budget: Budget::default(),
            pinned_budget_bytes: (corpus_mib + 64) << 20,
            ..MemoryConfig::default()
        },
    )?;
    println!(
        "\n- device: {} ({}, {} MiB)",
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
    println!("- unified mode: {:?}\n", mem.unified_mode());

    alloc_free(&mem)?;
    transfer(&gpu, &mem, args)?;
    device_to_host(&gpu, &mem, args)
}

/// Section 1.
fn alloc_free(mem: &GpuMemory) -> R<()> {
    println!("## Allocate + free: pool cache hit vs raw cuMemAlloc + cuMemFree\n");
    println!(
        "Median of 7 batches per cell, same thread, same stream (blocks up to 1 MiB come back from the thread"
    );
    println!("cache, larger ones through the pool lock).\n");
    println!(
        "| size | raw cuMemAlloc+cuMemFree | pool hit allocate+free | speedup | target 100x |"
    );
    println!("|---:|---:|---:|---:|:---|");
    let ctx = mem.context().clone();
    for &(size, n) in &[
        (4usize << 10, 20_000usize),
        (64 << 10, 20_000),
        (256 << 10, 20_000),
        (1 << 20, 20_000),
        (64 << 20, 1_000),
        (512 << 20, 100),
    ] {
        // Warm both paths.
        let p = raw::device_alloc(&ctx, size)?;
        // SAFETY: just allocated, no work uses it.
        unsafe { raw::device_free(&ctx, p) }?;
        drop(mem.device_pool().allocate(size, mem.stream())?);

        let raw_ns = per_call_ns(7, n, || {
            let p = raw::device_alloc(&ctx, size)?;
            // SAFETY: just allocated, no work uses it.
            unsafe { raw::device_free(&ctx, p) }?;
            Ok(())
        })?;
        let hits0 = mem.device_pool().stats().hits;
        let pool_ns = per_call_ns(7, n * 10, || {
            let b = mem.device_pool().allocate(size, mem.stream())?;
            drop(std::hint::black_box(b));
            Ok(())
        })?;
        let hits = mem.device_pool().stats().hits - hits0;
        if hits != (7 * n * 10) as u64 {
            return Err(format!("expected {} cache hits, got {hits}", 7 * n * 10).into());
        }
        let speedup = raw_ns / pool_ns;
        println!(
            "| {} KiB | {:.2} us | {:.1} ns | {:.0}x | {} |",
            size >> 10,
            raw_ns / 1e3,
            pool_ns,
            speedup,
            if speedup >= 100.0 { "met" } else { "NOT met" }
        );
    }
    mem.device_pool().trim_all();
    Ok(())
}

/// One row of section 2.
struct Row {
    name: String,
    time: Duration,
    same_answer: bool,
    managed: bool,
    pinned: bool,
}

/// Section 2.
fn transfer(gpu: &Gpu, mem: &GpuMemory, args: &Args) -> R<()> {
    let dim = 256usize;
    let n = (args.corpus_mib << 20) / 4;
    let n_rows = n / dim;
    let bytes = n_rows * dim * 4;
    let chunk_rows = ((args.chunk_mib << 20) / (dim * 4)).clamp(1, n_rows);
    let n_chunks = n_rows.div_ceil(chunk_rows);
    let n_streams = args.streams;
    let reps = args.reps;
    println!(
        "\n## Move a {} MiB f32 corpus ({n_rows} x {dim}) to the device and scan it once\n",
        args.corpus_mib
    );
    println!(
        "Scan: `row_norms_f32` (reads every element). Median of {reps} runs after one warm-up; each run is"
    );
    println!(
        "timed on the host from the first call to the end of a synchronize. Before each run (not timed) the"
    );
    println!(
        "host writes the corpus into the source buffer (managed buffers are first moved to the host), as a"
    );
    println!(
        "load would. Chunked rows: {n_chunks} chunks of {chunk_rows} rows ({} MiB); chunk i + 1 moves while",
        (chunk_rows * dim * 4) >> 20
    );
    println!(
        "chunk i is scanned (the scan of a chunk waits for that chunk's event). {n_streams} streams means"
    );
    println!(
        "{n_streams} copy/prefetch streams, each fed by its own host thread for managed memory.\n"
    );

    let kernels = Kernels::load(gpu, None)?;
    let host: Vec<f32> = (0..n_rows * dim).map(|i| (i % 977) as f32 * 1e-3).collect();
    let out = DeviceBuffer::<f32>::try_zeroed(mem, n_rows)?;
    let out_ptr = out.device_ptr();
    // Scan rows `r0..r1` of the corpus at `x` into the same rows of `out`, on the GPU's stream.
    let scan = |x: u64, r0: usize, r1: usize| -> R<()> {
        let rows = r1 - r0;
        // SAFETY: `x` is a live buffer of `n_rows * dim` f32 and `out_ptr` one of `n_rows` f32, both alive
        // until the synchronize that ends each run; rows r0..r1 lie inside them; the GPU's context has
        // event tracking disabled.
        let (xs, mut os) = unsafe {
            (
                BorrowedSlice::<f32>::new(gpu.stream(), x + (r0 * dim * 4) as u64, rows * dim)?,
                BorrowedSlice::<f32>::new(gpu.stream(), out_ptr + (r0 * 4) as u64, rows)?,
            )
        };
        kernels.row_norms_f32(gpu, &xs, rows, dim, &mut os)?;
        Ok(())
    };
    let chunk = |c: usize| (c * chunk_rows, ((c + 1) * chunk_rows).min(n_rows));
    let timed = |reset: &mut dyn FnMut() -> R<()>, body: &mut dyn FnMut() -> R<()>| {
        timed(gpu, reps, reset, body)
    };
    let mut rows: Vec<Row> = Vec::new();
    // Diagnostics: the move alone, no scan (not candidates for the ratio).
    let mut moves: Vec<(&str, Duration)> = Vec::new();
    let mut reference: Vec<f32> = Vec::new();
    let mut record = |rows: &mut Vec<Row>,
                      out: &DeviceBuffer<f32>,
                      name: String,
                      time: Duration,
                      managed: bool,
                      pinned: bool|
     -> R<()> {
        let got = out.to_vec()?;
        if reference.is_empty() {
            reference = got.clone();
        }
        rows.push(Row {
            name,
            time,
            same_answer: got == reference,
            managed,
            pinned,
        });
        Ok(())
    };

    // Device-resident: the scan alone; then the pageable copy.
    {
        let mut dev = DeviceBuffer::try_from_host(mem, &host)?;
        let x = dev.device_ptr();
        let t = timed(&mut || Ok(()), &mut || scan(x, 0, n_rows))?;
        record(
            &mut rows,
            &out,
            "scan only (data already on the device)".into(),
            t,
            false,
            false,
        )?;
        let t = timed(&mut || Ok(()), &mut || {
            dev.copy_from_host(&host)?;
            scan(dev.device_ptr(), 0, n_rows)
        })?;
        record(
            &mut rows,
            &out,
            "pageable memory + cuMemcpyHtoD + scan".into(),
            t,
            false,
            false,
        )?;
        let t = timed(&mut || Ok(()), &mut || Ok(dev.copy_from_host(&host)?))?;
        moves.push(("pageable memory + cuMemcpyHtoD, no scan", t));
    }

    // Staged: the same pageable data through two pinned slots, chunk i + 1 copied by the host while chunk i is
    // DMA'd (the GPU backend's path for large caller slices). The ring copies on the GPU's stream, as the
    // backend's does; its slots are page-locked once, before the runs.
    {
        let staged_chunk = args.staged_chunk_mib << 20;
        let mut ring = StagingRing::new(mem, staged_chunk, gpu.stream())?;
        let mut dev = DeviceBuffer::<f32>::try_alloc(mem, n_rows * dim)?;
        let serial = |staged: &mut [u8], chunk: &[u8]| staged.copy_from_slice(chunk);
        let threads = recall_gpu_kernels::on_host_pool(rayon::current_num_threads);
        let parallel = |staged: &mut [u8], chunk: &[u8]| {
            recall_gpu_kernels::on_host_pool(|| {
                use rayon::prelude::*;
                staged
                    .par_chunks_mut(1 << 20)
                    .zip(chunk.par_chunks(1 << 20))
                    .for_each(|(d, s)| d.copy_from_slice(s));
            })
        };
        let copies: [(String, &HostCopy, &'static str); 2] = [
            (
                "one thread".into(),
                &serial,
                "staged upload (one-thread host copy), no scan",
            ),
            (
                format!("{threads} host-pool threads"),
                &parallel,
                "staged upload (parallel host copy), no scan",
            ),
        ];
        for (label, copy, move_name) in copies {
            let t = timed(&mut || Ok(()), &mut || {
                ring.upload_with(&host, &mut dev, 0, copy)?;
                scan(dev.device_ptr(), 0, n_rows)
            })?;
            record(
                &mut rows,
                &out,
                format!(
                    "pageable memory, staged through 2 pinned {} MiB chunks ({label} copy) + scan",
                    args.staged_chunk_mib
                ),
                t,
                false,
                false,
            )?;
            let t = timed(&mut || Ok(()), &mut || {
                Ok(ring.upload_with(&host, &mut dev, 0, copy)?)
            })?;
            moves.push((move_name, t));
        }
        ring.finish()?;
    }

    // Pinned: whole copy, chunked on one copy stream, chunked on several.
    {
        let pinned = std::cell::RefCell::new(PinnedBuffer::try_from_slice(mem, &host)?);
        let dev = std::cell::RefCell::new(DeviceBuffer::<f32>::try_alloc(mem, n_rows * dim)?);
        let mut reset = || -> R<()> {
            pinned.borrow_mut().as_mut_slice()?.copy_from_slice(&host);
            Ok(())
        };
        let t = timed(&mut reset, &mut || {
            let mut d = dev.borrow_mut();
            d.copy_from_pinned_async(&mut pinned.borrow_mut())?;
            scan(d.device_ptr(), 0, n_rows)
        })?;
        record(
            &mut rows,
            &out,
            "pinned + cuMemcpyHtoDAsync (whole) + scan".into(),
            t,
            false,
            true,
        )?;
        // Diagnostic: the move alone (the scan is the same kernel on every path; `out` keeps its answer).
        let t = timed(&mut reset, &mut || {
            dev.borrow_mut()
                .copy_from_pinned_async(&mut pinned.borrow_mut())?;
            Ok(())
        })?;
        moves.push(("pinned + cuMemcpyHtoDAsync (whole), no scan", t));
        for s in dedup([1, n_streams]) {
            let streams: Vec<Stream> =
                (0..s).map(|_| gpu.new_stream()).collect::<Result<_, _>>()?;
            let (src, dst) = (
                pinned.borrow().host_ptr() as usize,
                dev.borrow().device_ptr(),
            );
            let mut body = || -> R<()> {
                for c in 0..n_chunks {
                    let (r0, r1) = chunk(c);
                    let stream = &streams[c % s];
                    let off = r0 * dim * 4;
                    // SAFETY: both ranges lie inside live buffers of `n_rows * dim` f32 that outlive the
                    // run (it ends with a synchronize of the GPU's stream, which waits for this stream's
                    // event below); the host does not touch the pinned buffer until then.
                    unsafe {
                        raw::copy_htod_async(
                            dst + off as u64,
                            (src + off) as *const u8,
                            (r1 - r0) * dim * 4,
                            stream,
                        )
                    }?;
                    let ev = raw::new_fence(gpu.context())?;
                    raw::record_event(&ev, stream)?;
                    raw::stream_wait_event(gpu.stream(), &ev)?;
                    scan(dst, r0, r1)?;
                }
                Ok(())
            };
            let t = timed(&mut reset, &mut body)?;
            record(
                &mut rows,
                &out,
                format!(
                    "pinned + chunked cuMemcpyHtoDAsync on {s} stream(s), pipelined with the scan"
                ),
                t,
                false,
                true,
            )?;
        }
    }

    // Managed.
    if mem.unified_mode() == UnifiedMode::Managed {
        for read_mostly in [false, true] {
            let m = ManagedBuffer::try_from_slice(mem, &host)?;
            if read_mostly {
                m.advise(Advice::SetReadMostly)?;
            }
            let tag = if read_mostly {
                " + read-mostly advice"
            } else {
                ""
            };
            let mr = &m;
            let x = mr.device_ptr();
            let mut reset = || -> R<()> {
                mr.prefetch_to_host()?;
                mr.synchronize()?;
                // SAFETY: `x` is this live managed allocation of `host.len()` f32, host-accessible on this
                // device; its stream has finished (synchronized above) and no other work or reference
                // reads or writes it until this returns (the issuer threads wait for the next run).
                unsafe {
                    std::ptr::copy_nonoverlapping(host.as_ptr(), x as usize as *mut f32, host.len())
                };
                Ok(())
            };
            let t = timed(&mut reset, &mut || {
                mr.prefetch_to_device()?;
                scan(x, 0, n_rows)
            })?;
            record(
                &mut rows,
                &out,
                format!("managed{tag} + cuMemPrefetchAsync (whole) + scan"),
                t,
                true,
                false,
            )?;
            if !read_mostly {
                let t = timed(&mut reset, &mut || {
                    mr.prefetch_to_device()?;
                    Ok(())
                })?;
                moves.push(("managed + cuMemPrefetchAsync (whole), no scan", t));
            }

            let pstream = gpu.new_stream()?;
            let t = timed(&mut reset, &mut || {
                for c in 0..n_chunks {
                    let (r0, r1) = chunk(c);
                    mr.prefetch_range_to_device_on(r0 * dim..r1 * dim, &pstream)?;
                    scan(x, r0, r1)?;
                }
                Ok(())
            })?;
            record(
                &mut rows,
                &out,
                format!("managed{tag} + chunked prefetch on 1 stream, pipelined with the scan"),
                t,
                true,
                false,
            )?;

            if n_streams > 1 {
                let streams: Vec<Stream> = (0..n_streams)
                    .map(|_| gpu.new_stream())
                    .collect::<Result<_, _>>()?;
                let t = std::thread::scope(|scope| -> R<Duration> {
                    // Persistent issuers: one thread per stream, chunks c = w, w + S, ... in order.
                    let (done_tx, done_rx) = mpsc::channel::<Result<usize, String>>();
                    let mut go = Vec::new();
                    for (w, stream) in streams.iter().enumerate() {
                        let (tx, rx) = mpsc::channel::<()>();
                        go.push(tx);
                        let done_tx = done_tx.clone();
                        scope.spawn(move || {
                            for () in rx {
                                for c in (w..n_chunks).step_by(n_streams) {
                                    let (r0, r1) = chunk(c);
                                    let r = mr
                                        .prefetch_range_to_device_on(r0 * dim..r1 * dim, stream)
                                        .map(|()| c)
                                        .map_err(|e| e.to_string());
                                    if done_tx.send(r).is_err() {
                                        return;
                                    }
                                }
                            }
                        });
                    }
                    drop(done_tx);
                    let mut body = || -> R<()> {
                        for tx in &go {
                            tx.send(()).map_err(|_| "issuer thread gone")?;
                        }
                        let mut issued = vec![false; n_chunks];
                        let mut next = 0;
                        while next < n_chunks {
                            let c = done_rx.recv().map_err(|_| "issuer thread gone")??;
                            issued[c] = true;
                            while next < n_chunks && issued[next] {
                                let (r0, r1) = chunk(next);
                                scan(x, r0, r1)?;
                                next += 1;
                            }
                        }
                        Ok(())
                    };
                    let t = timed(&mut reset, &mut body);
                    drop(go);
                    t
                })?;
                record(
                    &mut rows,
                    &out,
                    format!(
                        "managed{tag} + chunked prefetch on {n_streams} streams from {n_streams} threads, pipelined"
                    ),
                    t,
                    true,
                    false,
                )?;
            }
            if !read_mostly {
                // For information: no prefetch, page faults migrate on demand.
                let mut times = Vec::new();
                for _ in 0..reps.min(3) {
                    reset()?;
                    let t = Instant::now();
                    scan(x, 0, n_rows)?;
                    gpu.synchronize()?;
                    times.push(t.elapsed());
                }
                record(
                    &mut rows,
                    &out,
                    "managed, no prefetch (fault-driven) + scan".into(),
                    median(times),
                    false,
                    false,
                )?;
            }
        }
    }

    // Managed, two other starting points: a fresh allocation written by the host (first touch on the host,
    // as a loader filling new managed memory would; the allocation and the write are not timed), and
    // preferred-location-device advice given before the host writes.
    if mem.unified_mode() == UnifiedMode::Managed {
        let fresh: std::cell::RefCell<Option<ManagedBuffer<f32>>> = std::cell::RefCell::new(None);
        let mut reset = || -> R<()> {
            *fresh.borrow_mut() = None;
            *fresh.borrow_mut() = Some(ManagedBuffer::try_from_slice(mem, &host)?);
            Ok(())
        };
        let t = timed(&mut reset, &mut || {
            let f = fresh.borrow();
            let m = f.as_ref().ok_or("no managed buffer")?;
            m.prefetch_to_device()?;
            scan(m.device_ptr(), 0, n_rows)
        })?;
        record(
            &mut rows,
            &out,
            "managed, fresh allocation written by the host + cuMemPrefetchAsync (whole) + scan"
                .into(),
            t,
            true,
            false,
        )?;
        *fresh.borrow_mut() = None;

        let m = ManagedBuffer::try_from_slice(mem, &host)?;
        m.advise_preferred_device()?;
        let mr = &m;
        let x = mr.device_ptr();
        let mut reset = || -> R<()> {
            mr.prefetch_to_host()?;
            mr.synchronize()?;
            // SAFETY: as in the managed rows above: this live managed allocation of `host.len()` f32,
            // host-accessible, its stream finished, no other reference in use.
            unsafe {
                std::ptr::copy_nonoverlapping(host.as_ptr(), x as usize as *mut f32, host.len())
            };
            Ok(())
        };
        let t = timed(&mut reset, &mut || {
            mr.prefetch_to_device()?;
            scan(x, 0, n_rows)
        })?;
        record(
            &mut rows,
            &out,
            "managed + preferred-location-device advice + cuMemPrefetchAsync (whole) + scan".into(),
            t,
            true,
            false,
        )?;
    }

    let pinned_whole = rows
        .iter()
        .find(|r| r.pinned)
        .map(|r| r.time)
        .ok_or("no pinned row")?;
    let best_pinned = rows
        .iter()
        .filter(|r| r.pinned)
        .min_by_key(|r| r.time)
        .ok_or("no pinned row")?;
    println!("| path | time | effective GB/s | / pinned whole | / best pinned | same answer |");
    println!("|:---|---:|---:|---:|---:|:---|");
    for r in &rows {
        println!(
            "| {} | {:.2} ms | {:.1} | {:.3} | {:.3} | {} |",
            r.name,
            r.time.as_secs_f64() * 1e3,
            bytes as f64 / r.time.as_secs_f64() / 1e9,
            r.time.as_secs_f64() / pinned_whole.as_secs_f64(),
            r.time.as_secs_f64() / best_pinned.time.as_secs_f64(),
            if r.same_answer { "yes" } else { "NO" }
        );
    }
    if !moves.is_empty() {
        println!("\nThe move alone (diagnostic, same reset, no scan):\n");
        println!("| move | time | GB/s |");
        println!("|:---|---:|---:|");
        for (name, t) in &moves {
            println!(
                "| {name} | {:.2} ms | {:.1} |",
                t.as_secs_f64() * 1e3,
                bytes as f64 / t.as_secs_f64() / 1e9
            );
        }
    }
    match rows.iter().filter(|r| r.managed).min_by_key(|r| r.time) {
        Some(m) => {
            let ratio = m.time.as_secs_f64() / best_pinned.time.as_secs_f64();
            let whole = rows.iter().find(|r| r.managed).map(|r| r.time);
            println!(
                "\nbest managed + prefetch ({}): {:.2} ms; best pinned + async copy ({}): {:.2} ms",
                m.name,
                m.time.as_secs_f64() * 1e3,
                best_pinned.name,
                best_pinned.time.as_secs_f64() * 1e3
            );
            if let Some(w) = whole {
                println!(
                    "managed + prefetch (whole) / pinned + async copy (whole) = {:.3}",
                    w.as_secs_f64() / pinned_whole.as_secs_f64()
                );
            }
            println!(
                "best managed + prefetch / best pinned + async copy = {ratio:.3} (target <= 1.05: {})",
                if ratio <= 1.05 { "met" } else { "NOT met" }
            );
        }
        None => println!(
            "\nmanaged memory not used on this device ({:?}): no managed rows",
            mem.unified_mode()
        ),
    }
    if rows.iter().any(|r| !r.same_answer) {
        println!("\nSOME PATHS SCANNED DIFFERENT DATA (see the last column)");
    }
    let errors = mem.device_pool().take_errors();
    if !errors.is_empty() {
        println!("\nrecorded pool errors: {errors:?}");
    }
    drop(out);
    if rows.iter().any(|r| !r.same_answer) {
        return Err("a path scanned different data".into());
    }
    Ok(())
}

/// Section 3: the corpus of section 2 from the device into host memory.
fn device_to_host(gpu: &Gpu, mem: &GpuMemory, args: &Args) -> R<()> {
    let dim = 256usize;
    let n_rows = ((args.corpus_mib << 20) / 4) / dim;
    let bytes = n_rows * dim * 4;
    let reps = args.reps;
    println!(
        "\n## Move the {} MiB f32 corpus ({n_rows} x {dim}) from the device to host memory\n",
        args.corpus_mib
    );
    println!(
        "Median of {reps} runs after one warm-up, each timed on the host from the first call to the end of a"
    );
    println!(
        "synchronize (the staged download returns with every byte in place). A fresh `Vec` is allocated inside"
    );
    println!(
        "the timed run (`vec![0.0; n]`: fresh pages, first touched by the copy); a reused one was written before."
    );
    println!(
        "Staged: chunks of {} MiB through 2 pinned slots on the GPU's stream, as the GPU backend's large results.\n",
        args.staged_chunk_mib
    );
    let host: Vec<f32> = (0..n_rows * dim).map(|i| (i % 977) as f32 * 1e-3).collect();
    let src = DeviceBuffer::try_from_host(mem, &host)?;
    src.synchronize()?;
    // The earlier sections' pinned blocks go back, so that the ring and the pinned buffer below fit the budget.
    mem.pinned_pool().trim_all();
    let timed = |body: &mut dyn FnMut() -> R<()>| timed(gpu, reps, &mut || Ok(()), body);
    let same = |v: &[f32]| {
        v.len() == host.len() && v.iter().zip(&host).all(|(a, b)| a.to_bits() == b.to_bits())
    };
    // (path, time, same bytes)
    let mut rows: Vec<(String, Duration, bool)> = Vec::new();

    let mut fresh: Vec<f32> = Vec::new();
    let t = timed(&mut || {
        fresh = src.to_vec()?;
        Ok(())
    })?;
    rows.push((
        "pageable cuMemcpyDtoH into a fresh Vec".into(),
        t,
        same(&fresh),
    ));
    drop(std::mem::take(&mut fresh));
    let mut reused = vec![0f32; host.len()];
    let t = timed(&mut || Ok(src.copy_to_host(&mut reused)?))?;
    rows.push((
        "pageable cuMemcpyDtoH into a reused Vec".into(),
        t,
        same(&reused),
    ));

    {
        let mut ring = StagingRing::new(mem, args.staged_chunk_mib << 20, gpu.stream())?;
        let serial = |to: &mut [u8], from: &[u8]| to.copy_from_slice(from);
        let threads = recall_gpu_kernels::on_host_pool(rayon::current_num_threads);
        let parallel = |to: &mut [u8], from: &[u8]| {
            recall_gpu_kernels::on_host_pool(|| {
                use rayon::prelude::*;
                to.par_chunks_mut(1 << 20)
                    .zip(from.par_chunks(1 << 20))
                    .for_each(|(d, s)| d.copy_from_slice(s));
            })
        };
        let copies: [(String, &HostCopy); 2] = [
            ("one-thread".into(), &serial),
            (format!("{threads} host-pool threads'"), &parallel),
        ];
        for (label, copy) in copies {
            reused.iter_mut().for_each(|v| *v = -1.0);
            let t = timed(&mut || Ok(ring.download_with(&src, 0, &mut reused, copy)?))?;
            rows.push((
                format!("staged download ({label} copy) into a reused Vec"),
                t,
                same(&reused),
            ));
        }
        let t = timed(&mut || {
            fresh = vec![0f32; host.len()];
            Ok(ring.download_with(&src, 0, &mut fresh, parallel)?)
        })?;
        rows.push((
            format!("staged download ({threads} host-pool threads' copy) into a fresh Vec"),
            t,
            same(&fresh),
        ));
        drop(fresh);
        ring.finish()?;
    }
    mem.pinned_pool().trim_all();

    let pinned_whole = {
        let mut pinned = PinnedBuffer::<f32>::try_zeroed(mem, host.len())?;
        let t = timed(&mut || Ok(src.copy_to_pinned_async(&mut pinned)?))?;
        let ok = same(pinned.as_slice()?);
        rows.push(("pinned + cuMemcpyDtoHAsync (whole)".into(), t, ok));
        t
    };

    println!("| path | time | GB/s | / pinned whole | same bytes |");
    println!("|:---|---:|---:|---:|:---|");
    for (name, t, ok) in &rows {
        println!(
            "| {name} | {:.2} ms | {:.1} | {:.3} | {} |",
            t.as_secs_f64() * 1e3,
            bytes as f64 / t.as_secs_f64() / 1e9,
            t.as_secs_f64() / pinned_whole.as_secs_f64(),
            if *ok { "yes" } else { "NO" }
        );
    }
    let errors = mem.pinned_pool().take_errors();
    if !errors.is_empty() {
        println!("\nrecorded pinned pool errors: {errors:?}");
    }
    if rows.iter().any(|r| !r.2) {
        return Err("a device-to-host path gave different bytes".into());
    }
    Ok(())
}

/// Median time of `reps` runs of `body` after one warm-up, each after `reset` (not timed) and a
/// synchronize, each ended by a synchronize.
fn timed(
    gpu: &Gpu,
    reps: usize,
    reset: &mut dyn FnMut() -> R<()>,
    body: &mut dyn FnMut() -> R<()>,
) -> R<Duration> {
    let mut times = Vec::new();
    for i in 0..=reps {
        reset()?;
        gpu.synchronize()?;
        let t = Instant::now();
        body()?;
        gpu.synchronize()?;
        if i > 0 {
            times.push(t.elapsed());
        }
    }
    Ok(median(times))
}

fn dedup(v: [usize; 2]) -> Vec<usize> {
    if v[0] == v[1] { vec![v[0]] } else { v.to_vec() }
}
