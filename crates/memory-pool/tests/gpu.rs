//! GPU suite of memory-pool: runs on a machine with an NVIDIA GPU, and skips each test with a printed
//! reason where `recall_gpu_sys::probe()` finds none. Covers the allocate/free path, stream-ordered reuse,
//! the managed and forced-pinned unified paths (checked by a kernel reading the data), pinned staging,
//! the budget OOM, the driver OOM after trim-and-retry, managed memory capped by free memory, trim, and the
//! staged upload and download with a caller's (serial or parallel) host copy (`StagingRing::upload_with`,
//! `StagingRing::download_with`), and the staged upload into a driver buffer on a stream of its own
//! (`StagingRing::upload_cuda_with`).

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

        // A copy closure that panics on the third chunk: the call unwinds without a hang or a stuck slot, the
        // destination can be dropped and its memory allocated again and filled, and the ring's next upload into
        // it reads back whole. This does not show the wait while unwinding (the first two chunks' copies are
        // done long before the refill); the next case does.
        let big = 64 * chunk;
        let mut dst = DeviceBuffer::<u8>::try_zeroed(&mem, big).unwrap();
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let n = std::sync::atomic::AtomicUsize::new(0);
            ring.upload_with(
                &bytes(big, 9),
                &mut dst,
                0,
                |staged: &mut [u8], part: &[u8]| {
                    if n.fetch_add(1, std::sync::atomic::Ordering::Relaxed) == 2 {
                        panic!("a host copy that fails");
                    }
                    staged.copy_from_slice(part);
                },
            )
        }));
        assert!(panicked.is_err());
        drop(dst);
        let again = bytes(big, 21);
        let mut dst = DeviceBuffer::<u8>::try_alloc(&mem, big).unwrap();
        dst.copy_from_host(&again).unwrap();
        ring.upload_with(&again[..3 * chunk], &mut dst, 0, par_copy)
            .unwrap();
        assert!(
            dst.to_vec().unwrap() == again,
            "after a panicking upload the reused memory differs"
        );

        // The wait itself: the ring's stream held busy by queued work (64 memsets of 256 MiB, milliseconds),
        // then an upload whose second host copy panics. Its first chunk's DMA is queued behind that work, writing
        // `dst`, when the panic unwinds; the guard must wait for it before the panic reaches the caller, who may
        // then free `dst`: the ring's stream is idle once the panic is caught. Without the wait the stream is still
        // running the memsets then (unwinding takes microseconds).
        let scratch_len = 256 * MIB;
        let scratch = DeviceBuffer::<u8>::try_alloc(&mem, scratch_len).unwrap();
        let mut dst = DeviceBuffer::<u8>::try_zeroed(&mem, 4 * chunk).unwrap();
        for _ in 0..64 {
            // SAFETY: `scratch` is live device memory of the ring's context, kept until the stream is idle
            // (checked below, and `ring.finish()` / the drop order after).
            unsafe {
                recall_gpu_sys::memory::memset_d8_async(
                    scratch.device_ptr(),
                    5,
                    scratch_len,
                    ring.stream(),
                )
            }
            .unwrap();
        }
        assert!(
            !recall_gpu_sys::memory::stream_is_idle(ring.stream()).unwrap(),
            "the memsets finished before the upload: the check below would show nothing"
        );
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let n = std::sync::atomic::AtomicUsize::new(0);
            ring.upload_with(
                &bytes(4 * chunk, 3),
                &mut dst,
                0,
                |staged: &mut [u8], part: &[u8]| {
                    if n.fetch_add(1, std::sync::atomic::Ordering::Relaxed) == 1 {
                        panic!("a host copy that fails");
                    }
                    staged.copy_from_slice(part);
                },
            )
        }));
        assert!(panicked.is_err());
        assert!(
            recall_gpu_sys::memory::stream_is_idle(ring.stream()).unwrap(),
            "a panicking upload returned while its queued copies could still write the destination"
        );
        drop(dst);
        drop(scratch);
        ring.finish().unwrap();
    }
    assert!(mem.pinned_pool().take_errors().is_empty());
    assert!(mem.device_pool().take_errors().is_empty());
}

/// The staged download (`StagingRing::download_with`): every length around the chunk size at nonzero source
/// offsets, serial and parallel host copies, the ring on the source's stream and on one of its own; the source
/// written by work queued just before on its stream (an asynchronous upload, a kernel, the ring's own upload)
/// and never waited for by the test: the download must see it.
#[test]
fn gpu_staged_closure_download_gives_identical_bytes() {
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
    let _s = SERIAL.lock();
    let Some(gpu) = open("gpu_staged_closure_download_gives_identical_bytes") else {
        return;
    };
    let mem = GpuMemory::new(&gpu, config(false)).unwrap();
    let kernels = Kernels::load(&gpu, None).unwrap();
    let chunk = 64 << 10;
    let other_stream = gpu.new_stream().unwrap();
    // The ring on the source's stream (ordered by the stream), then on a stream of its own (events).
    for (copy_stream, where_) in [
        (mem.stream().clone(), "same stream"),
        (other_stream, "own stream"),
    ] {
        let mut ring = StagingRing::new(&mem, chunk, &copy_stream).unwrap();
        let biggest = AtomicUsize::new(0);
        let calls = AtomicUsize::new(0);
        for len in [0, 1, chunk - 1, chunk, chunk + 1, 2 * chunk + chunk / 2] {
            for offset in [0, 3, chunk + 5] {
                for parallel in [false, true] {
                    let what = format!("{where_}: len {len}, offset {offset}, parallel {parallel}");
                    let total = offset + len + 7;
                    let host = bytes(total, (len + offset) as u8);
                    // Zeroed (queued), then the bytes by an asynchronous DMA from pinned memory (queued): the
                    // download below is queued behind both without a wait in between.
                    let mut src = DeviceBuffer::<u8>::try_zeroed(&mem, total).unwrap();
                    let mut pinned = PinnedBuffer::try_from_slice(&mem, &host).unwrap();
                    src.copy_from_pinned_async(&mut pinned).unwrap();
                    // Into the middle of a larger buffer: the bytes around it must stay as they were.
                    let mut out = vec![0u8; len + 10];
                    calls.store(0, Relaxed);
                    ring.download_with(
                        &src,
                        offset,
                        &mut out[5..5 + len],
                        |to: &mut [u8], from: &[u8]| {
                            assert_eq!(to.len(), from.len());
                            biggest.fetch_max(from.len(), Relaxed);
                            calls.fetch_add(1, Relaxed);
                            if parallel {
                                par_copy(to, from);
                            } else {
                                to.copy_from_slice(from);
                            }
                        },
                    )
                    .unwrap();
                    assert!(out[..5].iter().all(|&b| b == 0), "{what}: before");
                    assert!(
                        out[5..5 + len] == host[offset..offset + len],
                        "{what}: the bytes"
                    );
                    assert!(out[5 + len..].iter().all(|&b| b == 0), "{what}: after");
                    assert_eq!(
                        calls.load(Relaxed),
                        len.div_ceil(chunk),
                        "{what}: one copy call per chunk"
                    );
                }
            }
        }
        assert_eq!(
            biggest.into_inner(),
            chunk,
            "{where_}: no copy call over a slot"
        );

        // A long asynchronous upload (64 MiB from pinned memory) right before the download of its last bytes:
        // without the ordering the download would read the zeros (the copy engines run both ways at once).
        let big = bytes(64 * MIB, 9);
        let mut src = DeviceBuffer::<u8>::try_zeroed(&mem, big.len()).unwrap();
        let mut pinned = PinnedBuffer::try_from_slice(&mem, &big).unwrap();
        src.copy_from_pinned_async(&mut pinned).unwrap();
        let tail = 2 * chunk + chunk / 2;
        let mut out = vec![0u8; tail];
        ring.download_with(&src, big.len() - tail, &mut out, par_copy)
            .unwrap();
        assert!(
            out[..] == big[big.len() - tail..],
            "{where_}: the download ran before the upload"
        );

        // Upload then download in a row through the same ring, the buffer on the device's stream.
        let host = bytes(5 * chunk + 17, 3);
        let mut dev = DeviceBuffer::<u8>::try_zeroed(&mem, host.len()).unwrap();
        ring.upload_with(&host, &mut dev, 0, par_copy).unwrap();
        let mut back = vec![0u8; host.len()];
        ring.download_with(&dev, 0, &mut back, par_copy).unwrap();
        assert!(back == host, "{where_}: upload then download");
        // And again with new bytes through the same slots: the second round trip sees only its own.
        let host2: Vec<u8> = host.iter().map(|v| v.wrapping_mul(3)).collect();
        ring.upload_with(&host2, &mut dev, 0, copy_one_thread)
            .unwrap();
        ring.download_with(&dev, 0, &mut back, copy_one_thread)
            .unwrap();
        assert!(back == host2, "{where_}: second round trip");

        // A kernel's output, queued on the device's stream just before: the download equals the plain copy
        // bit for bit. f32 over 3 chunks and a bit, and from 3 elements in, from a `DeviceSlice`.
        let dim = 96;
        let rows = data(dim * (3 * chunk / 4 + 1));
        let n_rows = rows.len() / dim;
        let x = DeviceSlice::try_from_host(&mem, &rows).unwrap();
        let mut norms = DeviceSlice::<f32>::try_zeroed(&mem, n_rows).unwrap();
        let mut wide = DeviceSlice::<f32>::try_zeroed(&mem, 3 * chunk / 4 + 5).unwrap();
        kernels
            .row_norms_f32(&gpu, &x, n_rows, dim, &mut norms)
            .unwrap();
        // `wide` as a kernel output too: the norms of the same rows read as rows of 4 (more rows, shorter).
        let n_wide = wide.len();
        kernels
            .row_norms_f32(&gpu, &x, n_wide, 4, &mut wide)
            .unwrap();
        let mut got = vec![0f32; n_rows];
        ring.download_slice_with(&norms, 0, &mut got, par_copy)
            .unwrap();
        let want = norms.buffer().to_vec().unwrap();
        assert!(want.iter().any(|&v| v != 0.0), "the kernel wrote nothing");
        let same = |a: &[f32], b: &[f32]| {
            a.len() == b.len() && a.iter().zip(b).all(|(p, q)| p.to_bits() == q.to_bits())
        };
        assert!(same(&got, &want), "{where_}: kernel output differs");
        let mut got = vec![0f32; n_wide - 3];
        ring.download_slice_with(&wide, 3, &mut got, copy_one_thread)
            .unwrap();
        let want = wide.buffer().to_vec().unwrap();
        assert!(
            same(&got, &want[3..]),
            "{where_}: f32 from an offset differs"
        );
        // Raw bytes from 1 byte into the first f32: every chunk of the source splits elements.
        let mut raw = vec![0u8; 4 * (n_wide - 1)];
        // SAFETY: the range lies inside `wide` (1 byte past its start, `4 * (n_wide - 1)` bytes), which is live
        // for the call and written by nothing else; the kernel that wrote it is on the device's stream, which
        // the ring's stream follows here (`wide.buffer().to_vec()` above waited for that stream).
        unsafe { ring.download_bytes_with(wide.buffer().device_ptr() + 1, &mut raw, par_copy) }
            .unwrap();
        let want_bytes: Vec<u8> = want.iter().flat_map(|v| v.to_ne_bytes()).collect();
        assert!(
            raw[..] == want_bytes[1..1 + raw.len()],
            "{where_}: raw bytes at an odd address"
        );

        // Out of range: refused before anything is queued; `dst` untouched.
        let small = DeviceBuffer::<u8>::try_zeroed(&mem, 10).unwrap();
        let mut out = vec![7u8; 8];
        let err = ring
            .download_with(&small, 3, &mut out, par_copy)
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
        assert!(out.iter().all(|&v| v == 7));
        let err = ring
            .download_with(&small, usize::MAX, &mut out, par_copy)
            .unwrap_err();
        assert!(
            matches!(
                err,
                PoolError::SizeOverflow {
                    len: 8,
                    elem_size: 1
                }
            ),
            "{err:?}"
        );

        // A copy closure that panics mid-download: the ring waits for its stream while unwinding and stays
        // usable (the next download gives the right bytes).
        let host = bytes(4 * chunk, 11);
        let src = DeviceBuffer::try_from_host(&mem, &host).unwrap();
        let mut out = vec![0u8; host.len()];
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let n = AtomicUsize::new(0);
            ring.download_with(&src, 0, &mut out, |to: &mut [u8], from: &[u8]| {
                if n.fetch_add(1, Relaxed) == 1 {
                    panic!("a host copy that fails");
                }
                to.copy_from_slice(from);
            })
        }));
        assert!(panicked.is_err());
        let mut out = vec![0u8; host.len()];
        ring.download_with(&src, 0, &mut out, par_copy).unwrap();
        assert!(out == host, "{where_}: after a panicking copy");
        ring.finish().unwrap();
    }
    assert!(mem.pinned_pool().take_errors().is_empty());
    assert!(mem.device_pool().take_errors().is_empty());
}

/// Queue 64 memsets of `scratch` on `stream`: milliseconds of work that a copy ordered after it must wait for.
fn hold_busy(scratch: &DeviceBuffer<u8>, stream: &recall_memory_pool::Stream) {
    for _ in 0..64 {
        // SAFETY: `scratch` is live device memory of the stream's context, kept by the caller until the stream is
        // idle (the test synchronises its streams before dropping it).
        unsafe {
            recall_gpu_sys::memory::memset_d8_async(scratch.device_ptr(), 5, scratch.len(), stream)
        }
        .unwrap();
    }
    assert!(
        !recall_gpu_sys::memory::stream_is_idle(stream).unwrap(),
        "the memsets finished at once: the ordering below would show nothing"
    );
}

/// The staged upload into a driver allocation (`StagingRing::upload_cuda_with`: a cudarc buffer on a stream of its
/// own, as a spreading graph's arrays are), with the ring on the device's stream (events both ways) and on the
/// buffer's: every length around the chunk size at element offsets, f32 values whose chunk boundaries fall inside
/// elements, a refused range; then the ordering, never waited for by the test: the copies come after a memset
/// queued on the buffer's stream behind milliseconds of work, and a download queued on the buffer's stream right
/// after the call sees them though the ring's stream is held busy before them.
#[test]
fn gpu_staged_upload_into_a_driver_buffer_on_its_own_stream() {
    let _s = SERIAL.lock();
    let Some(gpu) = open("gpu_staged_upload_into_a_driver_buffer_on_its_own_stream") else {
        return;
    };
    let mem = GpuMemory::new(&gpu, config(false)).unwrap();
    let chunk = 64 << 10;
    // A handle whose buffers are allocated, freed and read on a stream of its own.
    let own = gpu.with_new_stream().unwrap();
    let scratch = DeviceBuffer::<u8>::try_alloc(&mem, 256 * MIB).unwrap();
    for (copy_stream, where_) in [
        (mem.stream().clone(), "device stream"),
        (own.stream().clone(), "buffer's stream"),
    ] {
        let mut ring = StagingRing::new(&mem, chunk, &copy_stream).unwrap();
        for len in [0, 1, chunk - 1, chunk, chunk + 1, 2 * chunk + chunk / 2] {
            for offset in [0, 3, chunk + 5] {
                let what = format!("{where_}: len {len}, offset {offset}");
                let src = bytes(len, (len + offset) as u8);
                let total = offset + len + 7;
                let mut dst = own.alloc_zeros::<u8>(total).unwrap();
                ring.upload_cuda_with(&src, &mut dst, offset, par_copy)
                    .unwrap();
                let got = own.download(&dst).unwrap();
                assert!(got[..offset].iter().all(|&b| b == 0), "{what}: before");
                assert!(got[offset..offset + len] == src[..], "{what}: the bytes");
                assert!(got[offset + len..].iter().all(|&b| b == 0), "{what}: after");
            }
        }
        let host = data(5 * chunk / 4 + 3);
        let mut dst = own.alloc_zeros::<f32>(host.len() + 11).unwrap();
        ring.upload_cuda_with(&host, &mut dst, 11, par_copy)
            .unwrap();
        let got = own.download(&dst).unwrap();
        assert!(got[..11].iter().all(|&v| v == 0.0), "{where_}: f32 before");
        let same = got[11..]
            .iter()
            .zip(&host)
            .all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "{where_}: f32 upload differs");
        let mut small = own.alloc_zeros::<u8>(10).unwrap();
        let err = ring
            .upload_cuda_with(&bytes(8, 0), &mut small, 3, par_copy)
            .unwrap_err();
        assert!(
            matches!(
                err,
                PoolError::LengthMismatch {
                    expected: 10,
                    found: 11
                }
            ),
            "{where_}: {err:?}"
        );

        // Two chunks each below, so that the ring never waits on the host for a slot (which would wait for the busy
        // stream too and hide a missing event).
        // After the buffer's earlier work: its stream busy, then a memset of the buffer to 0x55 queued; the staged
        // bytes must land after it.
        let src = bytes(2 * chunk - 5, 77);
        let mut dst = own.alloc_zeros::<u8>(src.len()).unwrap();
        hold_busy(&scratch, own.stream());
        // SAFETY: `dst` is live device memory of `own`'s stream, used on that stream alone until it is dropped
        // (on that stream, after this memset).
        unsafe {
            recall_gpu_sys::memory::memset_d8_async(
                own.device_ptr(&dst),
                0x55,
                src.len(),
                own.stream(),
            )
        }
        .unwrap();
        ring.upload_cuda_with(&src, &mut dst, 0, par_copy).unwrap();
        assert!(
            own.download(&dst).unwrap() == src,
            "{where_}: the staged copies ran before the buffer's earlier work"
        );

        // Before the buffer's later work: the ring's stream busy first, so its copies run late; a download queued
        // on the buffer's stream right after the call must still see them.
        let src = bytes(2 * chunk - 5, 78);
        let mut dst = own.alloc_zeros::<u8>(src.len()).unwrap();
        hold_busy(&scratch, ring.stream());
        ring.upload_cuda_with(&src, &mut dst, 0, par_copy).unwrap();
        assert!(
            own.download(&dst).unwrap() == src,
            "{where_}: the buffer's later work ran before the staged copies"
        );
        ring.finish().unwrap();
    }
    own.synchronize().unwrap();
    gpu.synchronize().unwrap();
    drop(scratch);
    assert!(mem.pinned_pool().take_errors().is_empty());
    assert!(mem.device_pool().take_errors().is_empty());
}

/// A one-thread host copy with the staged copies' signature.
fn copy_one_thread(to: &mut [u8], from: &[u8]) {
    to.copy_from_slice(from);
}
