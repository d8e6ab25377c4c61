//! GPU suite of memory-pool: runs on a machine with an NVIDIA GPU, and skips each test with a printed
//! reason where `recall_gpu_sys::probe()` finds none. Covers the allocate/free path, stream-ordered reuse,
//! the managed and forced-pinned unified paths (checked by a kernel reading the data), pinned staging,
//! the budget OOM, the driver OOM after trim-and-retry, managed memory capped by free memory, trim, and the
//! staged upload with a caller's (serial or parallel) host copy (`StagingRing::upload_with`).

#![allow(clippy::unwrap_used)] // test helpers: a failure is a test failure

use parking_lot::Mutex;
use recall_gpu_kernels::Kernels;
use recall_gpu_sys::{Gpu, probe};
use recall_memory_pool::{
    Budget, DeviceBuffer, DeviceSlice, GpuMemory, ManagedBuffer, MemoryConfig, OomScope,
    PinnedBuffer, PoolError, StagingRing, UnifiedBuffer, UnifiedMode,
};

const MIB: usize = 1 << 20;

/// GPU tests share one device: run them one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn open(test: &str) -> Option<Gpu> {
    match probe().result {
        Ok(devices) => match Gpu::open(devices[0].ordinal) {
            Ok(gpu) => Some(gpu),
            Err(e) => {
                println!("skipped {test}: the GPU did not open: {e}");
                None
            }
        },
        Err(reason) => {
            println!("skipped {test}: no GPU: {reason}");
            None
        }
    }
}

fn config(force_pinned: bool) -> MemoryConfig {
    MemoryConfig {
        force_pinned,
        ..MemoryConfig::default()
    }
}

fn data(n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 7919) % 1000) as f32 * 0.001 - 0.5)
        .collect()
}

/// Row norms on the CPU in f64, for a loose check of what the kernel read.
fn cpu_norms(x: &[f32], dim: usize) -> Vec<f32> {
    x.chunks(dim)
        .map(|r| {
            r.iter()
                .map(|&v| (v as f64) * (v as f64))
                .sum::<f64>()
                .sqrt() as f32
        })
        .collect()
}

fn check_norms(gpu: &Gpu, mem: &GpuMemory, buf: &UnifiedBuffer<f32>, host: &[f32], dim: usize) {
    let kernels = Kernels::load(gpu, None).unwrap();
    let n_rows = host.len() / dim;
    let mut out = DeviceBuffer::<f32>::try_zeroed(mem, n_rows).unwrap();
    {
        let x = buf.as_cuda_slice().unwrap();
        let mut o = out.as_cuda_slice_mut().unwrap();
        kernels.row_norms_f32(gpu, &x, n_rows, dim, &mut o).unwrap();
    }
    let got = out.to_vec().unwrap();
    let want = cpu_norms(host, dim);
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() <= 1e-4 * w.max(1.0), "norm {g} vs {w}");
    }
}

#[test]
fn gpu_allocate_free_and_reuse() {
    let _s = SERIAL.lock();
    let Some(gpu) = open("gpu_allocate_free_and_reuse") else {
        return;
    };
    let mem = GpuMemory::new(&gpu, config(false)).unwrap();
    let host = data(MIB);
    let a = DeviceBuffer::try_from_host(&mem, &host).unwrap();
    assert_eq!(a.to_vec().unwrap(), host);
    let addr = a.device_ptr();
    drop(a);
    let b = DeviceBuffer::<f32>::try_alloc(&mem, MIB).unwrap();
    assert_eq!(
        b.device_ptr(),
        addr,
        "same stream: the cached block comes back at once"
    );
    // Another stream gets it only after the first stream's work on it finished.
    let other = gpu.new_stream().unwrap();
    drop(b);
    mem.stream().synchronize().unwrap();
    let c = DeviceBuffer::<f32>::try_alloc_on(&mem, MIB, &other, Default::default()).unwrap();
    assert_eq!(
        c.device_ptr(),
        addr,
        "fence complete after sync: reused on the other stream"
    );
    let s = mem.device_pool().stats();
    println!("stats after allocate/free/reuse: {s:?}");
    assert_eq!((s.hits, s.misses), (2, 1));
    drop(c);
    assert_eq!(mem.device_pool().trim_all(), 4 * MIB);
    assert!(mem.device_pool().take_errors().is_empty());
}

#[test]
fn gpu_unified_managed_path() {
    let _s = SERIAL.lock();
    let Some(gpu) = open("gpu_unified_managed_path") else {
        return;
    };
    let mem = GpuMemory::new(&gpu, config(false)).unwrap();
    println!("unified mode: {:?}", mem.unified_mode());
    if mem.unified_mode() != UnifiedMode::Managed {
        println!("skipped gpu_unified_managed_path: managed memory not usable on this device");
        return;
    }
    let dim = 256;
    let mut host = data(4096 * dim);
    let mut buf = UnifiedBuffer::try_from_slice(&mem, &host).unwrap();
    assert!(buf.is_managed());
    buf.advise_device_read_mostly().unwrap();
    buf.prefetch_to_device().unwrap();
    check_norms(&gpu, &mem, &buf, &host, dim);
    // Change on the host, prefetch again, read again.
    for v in buf.host_mut().unwrap().iter_mut() {
        *v *= 2.0;
    }
    host.iter_mut().for_each(|v| *v *= 2.0);
    buf.prefetch_to_device().unwrap();
    check_norms(&gpu, &mem, &buf, &host, dim);
    assert_eq!(buf.host().unwrap(), &host[..]);
    let s = mem.device_pool().stats();
    assert_eq!(s.reserved_external_bytes, host.len() * 4);
    drop(buf);
    assert_eq!(mem.device_pool().stats().reserved_external_bytes, 0);
    assert!(mem.device_pool().take_errors().is_empty());
}

#[test]
fn gpu_unified_forced_pinned_path() {
    let _s = SERIAL.lock();
    let Some(gpu) = open("gpu_unified_forced_pinned_path") else {
        return;
    };
    let mem = GpuMemory::new(&gpu, config(true)).unwrap();
    assert!(matches!(mem.unified_mode(), UnifiedMode::PinnedFallback(_)));
    let dim = 256;
    let mut host = data(4096 * dim);
    let mut buf = UnifiedBuffer::try_from_slice(&mem, &host).unwrap();
    assert!(!buf.is_managed());
    buf.advise_device_read_mostly().unwrap();
    buf.prefetch_to_device().unwrap();
    check_norms(&gpu, &mem, &buf, &host, dim);
    for v in buf.host_mut().unwrap().iter_mut() {
        *v *= 2.0;
    }
    host.iter_mut().for_each(|v| *v *= 2.0);
    buf.prefetch_to_device().unwrap();
    check_norms(&gpu, &mem, &buf, &host, dim);
    assert_eq!(buf.host().unwrap(), &host[..]);
    // A managed buffer cannot be made in this mode.
    assert!(matches!(
        ManagedBuffer::<f32>::try_zeroed(&mem, 16),
        Err(PoolError::InvalidConfig(_))
    ));
}

#[test]
fn gpu_pinned_roundtrip_and_staging_ring() {
    let _s = SERIAL.lock();
    let Some(gpu) = open("gpu_pinned_roundtrip_and_staging_ring") else {
        return;
    };
    let mem = GpuMemory::new(&gpu, config(false)).unwrap();
    let host = data(16 * MIB);
    let mut pinned = PinnedBuffer::try_from_slice(&mem, &host).unwrap();
    let mut dev = DeviceBuffer::<f32>::try_alloc(&mem, host.len()).unwrap();
    dev.copy_from_pinned_async(&mut pinned).unwrap();
    let mut back = PinnedBuffer::<f32>::try_zeroed(&mem, host.len()).unwrap();
    dev.copy_to_pinned_async(&mut back).unwrap();
    assert_eq!(back.as_slice().unwrap(), &host[..]);

    let copy_stream = gpu.new_stream().unwrap();
    let mut ring = StagingRing::new(&mem, 4 * MIB, &copy_stream).unwrap();
    let mut dst = DeviceBuffer::<f32>::try_zeroed(&mem, host.len()).unwrap();
    ring.upload(&host, &mut dst, 0).unwrap();
    assert_eq!(dst.to_vec().unwrap(), host);
    ring.upload(&host[..1000], &mut dst, 5).unwrap();
    let v = dst.to_vec().unwrap();
    assert_eq!(&v[5..1005], &host[..1000]);
    ring.finish().unwrap();
    assert!(mem.pinned_pool().take_errors().is_empty());
}

#[test]
fn gpu_budget_oom_before_the_driver() {
    let _s = SERIAL.lock();
    let Some(gpu) = open("gpu_budget_oom_before_the_driver") else {
        return;
    };
    let mem = GpuMemory::new(
        &gpu,
        MemoryConfig {
            budget: Budget::Bytes(256 * MIB),
            ..config(false)
        },
    )
    .unwrap();
    let mut held = Vec::new();
    let err = loop {
        match DeviceBuffer::<u8>::try_alloc(&mem, 48 * MIB) {
            Ok(b) => held.push(b),
            Err(e) => break e,
        }
    };
    println!("budget OOM: {err}");
    assert_eq!(held.len(), 5);
    let misses = mem.device_pool().stats().misses;
    assert!(matches!(
        err,
        PoolError::OutOfMemory {
            scope: OomScope::Pool,
            budget,
            ..
        } if budget == 256 * MIB
    ));
    assert_eq!(
        mem.device_pool().stats().misses,
        misses,
        "the driver was not asked"
    );
    // Freed memory makes room again.
    held.pop();
    assert!(DeviceBuffer::<u8>::try_alloc(&mem, 48 * MIB).is_ok());
}

#[test]
fn gpu_driver_oom_trims_retries_then_types_the_error() {
    let _s = SERIAL.lock();
    let Some(gpu) = open("gpu_driver_oom_trims_retries_then_types_the_error") else {
        return;
    };
    // A budget above the device's memory, so the driver is what runs out.
    let mem = GpuMemory::new(
        &gpu,
        MemoryConfig {
            budget: Budget::Bytes(usize::MAX / 2),
            ..config(false)
        },
    )
    .unwrap();
    let chunk = 1024 * MIB;
    let mut held = Vec::new();
    let err = loop {
        match DeviceBuffer::<u8>::try_alloc(&mem, chunk) {
            Ok(b) => held.push(b),
            Err(e) => break e,
        }
    };
    println!("driver OOM after {} GiB: {err}", held.len());
    assert!(matches!(
        err,
        PoolError::OutOfMemory {
            scope: OomScope::Device,
            ..
        }
    ));
    assert!(mem.device_pool().stats().driver_oom_retries >= 1);
    // Cache two blocks, then ask for a different class: the driver says OOM, the pool trims and retries.
    held.pop();
    held.pop();
    assert_eq!(mem.device_pool().stats().cached_bytes, 2 * chunk);
    let retries = mem.device_pool().stats().driver_oom_retries;
    let big = DeviceBuffer::<u8>::try_alloc(&mem, chunk + chunk / 2).unwrap();
    let s = mem.device_pool().stats();
    println!("after trim and retry: {s:?}");
    assert_eq!(s.driver_oom_retries, retries + 1);
    assert_eq!(s.cached_bytes, 0);
    drop(big);
    drop(held);
    mem.device_pool().trim_all();
    assert!(mem.device_pool().take_errors().is_empty());
}

#[test]
fn gpu_managed_never_beyond_free_memory() {
    let _s = SERIAL.lock();
    let Some(gpu) = open("gpu_managed_never_beyond_free_memory") else {
        return;
    };
    let mem = GpuMemory::new(
        &gpu,
        MemoryConfig {
            budget: Budget::Bytes(usize::MAX / 2),
            ..config(false)
        },
    )
    .unwrap();
    if mem.unified_mode() != UnifiedMode::Managed {
        println!("skipped gpu_managed_never_beyond_free_memory: managed memory not usable");
        return;
    }
    let (free, _) = mem.mem_info().unwrap();
    let err = ManagedBuffer::<u8>::try_zeroed(&mem, free + 1024 * MIB).unwrap_err();
    println!("managed over free memory: {err}");
    assert!(matches!(
        err,
        PoolError::OutOfMemory {
            scope: OomScope::Device,
            ..
        }
    ));
    assert_eq!(mem.device_pool().stats().reserved_external_bytes, 0);
}

#[test]
fn gpu_trim_returns_memory_to_the_device() {
    let _s = SERIAL.lock();
    let Some(gpu) = open("gpu_trim_returns_memory_to_the_device") else {
        return;
    };
    let mem = GpuMemory::new(&gpu, config(false)).unwrap();
    let bufs: Vec<_> = (0..8)
        .map(|_| DeviceBuffer::<u8>::try_alloc(&mem, 256 * MIB).unwrap())
        .collect();
    drop(bufs);
    let (free_before, _) = mem.mem_info().unwrap();
    mem.stream().synchronize().unwrap();
    let released = mem.device_pool().trim();
    let (free_after, _) = mem.mem_info().unwrap();
    println!("trim released {released} bytes; free {free_before} -> {free_after}");
    assert_eq!(released, 8 * 256 * MIB);
    assert!(free_after >= free_before + released - 64 * MIB);
}

#[test]
fn gpu_small_blocks_come_back_from_the_thread_cache() {
    let _s = SERIAL.lock();
    let Some(gpu) = open("gpu_small_blocks_come_back_from_the_thread_cache") else {
        return;
    };
    let mem = GpuMemory::new(&gpu, config(false)).unwrap();
    let pool = mem.device_pool();
    let host = data(1024);
    let a = DeviceBuffer::try_from_host(&mem, &host).unwrap();
    let addr = a.device_ptr();
    drop(a);
    assert_eq!(pool.stats().thread_cached_bytes, 4096);
    // Same stream, same thread: back at once, and its queued copy is ordered before new work.
    let mut b = DeviceBuffer::<f32>::try_alloc(&mem, 1024).unwrap();
    assert_eq!(b.device_ptr(), addr);
    b.copy_from_host(&host).unwrap();
    assert_eq!(b.to_vec().unwrap(), host);
    // Another stream: not from the cache until the fence of the first stream completed.
    let other = gpu.new_stream().unwrap();
    drop(b);
    let c = DeviceBuffer::<f32>::try_alloc_on(&mem, 1024, &other, Default::default()).unwrap();
    println!(
        "other stream got {:#x} (cached block {addr:#x})",
        c.device_ptr()
    );
    drop(c);
    let s = pool.stats();
    println!("stats: {s:?}");
    assert_eq!(s.in_use_bytes, 0);
    pool.trim_all();
    assert_eq!(pool.stats().cached_bytes, 0);
    assert!(pool.take_errors().is_empty());
}

#[test]
fn gpu_managed_chunked_prefetch_on_other_streams() {
    let _s = SERIAL.lock();
    let Some(gpu) = open("gpu_managed_chunked_prefetch_on_other_streams") else {
        return;
    };
    let mem = GpuMemory::new(&gpu, config(false)).unwrap();
    if mem.unified_mode() != UnifiedMode::Managed {
        println!(
            "skipped gpu_managed_chunked_prefetch_on_other_streams: managed memory not usable"
        );
        return;
    }
    let (dim, n_rows, chunks) = (256usize, 8192usize, 8usize);
    let host = data(n_rows * dim);
    let buf = ManagedBuffer::try_from_slice(&mem, &host).unwrap();
    let streams = [gpu.new_stream().unwrap(), gpu.new_stream().unwrap()];
    let rows_per = n_rows / chunks;
    std::thread::scope(|scope| {
        for (t, stream) in streams.iter().enumerate() {
            let buf = &buf;
            scope.spawn(move || {
                for c in (t..chunks).step_by(2) {
                    let r = c * rows_per * dim..(c + 1) * rows_per * dim;
                    buf.prefetch_range_to_device_on(r, stream).unwrap();
                }
            });
        }
    });
    assert!(
        buf.prefetch_range_to_device_on(0..host.len() + 1, &streams[0])
            .is_err()
    );
    let kernels = Kernels::load(&gpu, None).unwrap();
    let mut out = DeviceBuffer::<f32>::try_zeroed(&mem, n_rows).unwrap();
    {
        let x = buf.as_cuda_slice().unwrap();
        let mut o = out.as_cuda_slice_mut().unwrap();
        kernels
            .row_norms_f32(&gpu, &x, n_rows, dim, &mut o)
            .unwrap();
    }
    let got = out.to_vec().unwrap();
    for (g, w) in got.iter().zip(&cpu_norms(&host, dim)) {
        assert!((g - w).abs() <= 1e-4 * w.max(1.0), "norm {g} vs {w}");
    }
    drop(buf);
    assert!(mem.device_pool().take_errors().is_empty());
}

#[test]
fn gpu_device_slice_reads_as_a_cuda_slice() {
    let _s = SERIAL.lock();
    let Some(gpu) = open("gpu_device_slice_reads_as_a_cuda_slice") else {
        return;
    };
    let mem = GpuMemory::new(&gpu, config(false)).unwrap();
    let kernels = Kernels::load(&gpu, None).unwrap();
    let dim = 96;
    let host = data(dim * 3000);
    let n_rows = host.len() / dim;
    let x = DeviceSlice::try_from_host(&mem, &host).unwrap();
    let mut out = DeviceSlice::<f32>::try_zeroed(&mem, n_rows).unwrap();
    assert_eq!((x.len(), out.len()), (host.len(), n_rows));
    assert_eq!(gpu.device_ptr(&*x), x.buffer().device_ptr());
    // `&DeviceSlice` coerces to the launcher's `&CudaSlice`, `&mut` to `&mut CudaSlice`.
    kernels
        .row_norms_f32(&gpu, &x, n_rows, dim, &mut out)
        .unwrap();
    let got = out.buffer().to_vec().unwrap();
    let want = cpu_norms(&host, dim);
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() <= 1e-4 * w.max(1.0), "norm {g} vs {w}");
    }
    let s = mem.device_pool().stats();
    assert!(s.in_use_bytes >= (host.len() + n_rows) * 4, "{s:?}");
    // Dropping gives the memory back to the pool's cache, not to the driver.
    drop((x, out));
    let s = mem.device_pool().stats();
    assert_eq!(s.in_use_bytes, 0, "{s:?}");
    assert!(s.cached_bytes >= (host.len() + n_rows) * 4, "{s:?}");
    mem.device_pool().flush_thread_cache();
    assert!(mem.device_pool().trim_all() >= (host.len() + n_rows) * 4);
    assert!(mem.device_pool().take_errors().is_empty());
}

/// A parallel host copy for [`StagingRing::upload_with`], as the GPU backend's (there on its own host pool).
fn par_copy(staged: &mut [u8], chunk: &[u8]) {
    use rayon::prelude::*;
    staged
        .par_chunks_mut(4096)
        .zip(chunk.par_chunks(4096))
        .for_each(|(d, s)| d.copy_from_slice(s));
}

/// Bytes that differ at every position and from the sentinel the destinations are filled with.
fn bytes(n: usize, salt: u8) -> Vec<u8> {
    (0..n)
        .map(|i| ((i * 31 + i / 251) as u8).wrapping_add(salt) | 1)
        .collect()
}

#[test]
fn gpu_staged_closure_upload_gives_identical_bytes() {
    let _s = SERIAL.lock();
    let Some(gpu) = open("gpu_staged_closure_upload_gives_identical_bytes") else {
        return;
    };
    let mem = GpuMemory::new(&gpu, config(false)).unwrap();
    let chunk = 64 << 10;
    let other_stream = gpu.new_stream().unwrap();
    // The ring on the destination's stream (no events), then on a stream of its own (events both ways).
    for copy_stream in [mem.stream().clone(), other_stream] {
        let mut ring = StagingRing::new(&mem, chunk, &copy_stream).unwrap();
        assert_eq!(ring.chunk_bytes(), chunk);
        let biggest = std::sync::atomic::AtomicUsize::new(0);
        let calls = std::sync::atomic::AtomicUsize::new(0);
        for len in [0, 1, chunk - 1, chunk, chunk + 1, 2 * chunk + chunk / 2] {
            for offset in [0, 3, chunk + 5] {
                for parallel in [false, true] {
                    let src = bytes(len, (len + offset) as u8);
                    let total = offset + len + 7;
                    // Zeroed: the bytes before `offset` and after the upload must stay zero.
                    let mut dst = DeviceBuffer::<u8>::try_zeroed(&mem, total).unwrap();
                    calls.store(0, std::sync::atomic::Ordering::Relaxed);
                    ring.upload_with(&src, &mut dst, offset, |staged: &mut [u8], part: &[u8]| {
                        assert_eq!(staged.len(), part.len());
                        biggest.fetch_max(part.len(), std::sync::atomic::Ordering::Relaxed);
                        calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if parallel {
                            par_copy(staged, part);
                        } else {
                            staged.copy_from_slice(part);
                        }
                    })
                    .unwrap();
                    let got = dst.to_vec().unwrap();
                    let what = format!("len {len}, offset {offset}, parallel {parallel}");
                    assert!(got[..offset].iter().all(|&b| b == 0), "{what}: before");
                    assert!(got[offset..offset + len] == src[..], "{what}: the bytes");
                    assert!(got[offset + len..].iter().all(|&b| b == 0), "{what}: after");
                    assert_eq!(
                        calls.load(std::sync::atomic::Ordering::Relaxed),
                        len.div_ceil(chunk),
                        "{what}: one copy call per chunk"
                    );
                }
            }
        }
        assert_eq!(biggest.into_inner(), chunk, "no copy call over a slot");

        // Typed: f32 rows whose chunk boundaries fall inside elements (64 KiB is 16 Ki f32; 3 bytes off).
        let host = data(5 * chunk / 4 + 3);
        let mut dst = DeviceBuffer::<f32>::try_zeroed(&mem, host.len() + 11).unwrap();
        ring.upload_with(&host, &mut dst, 11, par_copy).unwrap();
        let got = dst.to_vec().unwrap();
        assert!(got[..11].iter().all(|&v| v == 0.0));
        let same = got[11..]
            .iter()
            .zip(&host)
            .all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "f32 upload differs");

        // The source may change as soon as the call returns: the first destination keeps the first bytes,
        // though both uploads went through the same two slots one after the other without a wait.
        let mut src = bytes(7 * chunk + 99, 5);
        let first = src.clone();
        let mut a = DeviceBuffer::<u8>::try_alloc(&mem, src.len()).unwrap();
        let mut b = DeviceBuffer::<u8>::try_alloc(&mem, src.len()).unwrap();
        ring.upload_with(&src, &mut a, 0, par_copy).unwrap();
        src.iter_mut().for_each(|v| *v = v.wrapping_mul(3));
        ring.upload_with(&src, &mut b, 0, par_copy).unwrap();
        assert!(
            a.to_vec().unwrap() == first,
            "the first upload saw the second's bytes"
        );
        assert!(b.to_vec().unwrap() == src, "the second upload differs");

        // Out of range: refused before anything is queued.
        let mut small = DeviceBuffer::<u8>::try_zeroed(&mem, 10).unwrap();
        let err = ring
            .upload_with(&bytes(8, 0), &mut small, 3, par_copy)
            .unwrap_err();
        assert!(
            matches!(
                err,
                PoolError::LengthMismatch {
                    expected: 10,
                    found: 11
                }
            ),
            "{err:?}"
        );
        assert!(small.to_vec().unwrap().iter().all(|&v| v == 0));
        ring.finish().unwrap();
    }
    assert!(mem.pinned_pool().take_errors().is_empty());
    assert!(mem.device_pool().take_errors().is_empty());
}
