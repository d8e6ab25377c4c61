//! Mapped pinned memory (`Gpu::alloc_mapped_readback`): what the device writes through the mapped address is
//! what `Gpu::read_mapped` returns after the wait. Skips, saying why, where there is no GPU.

use recall_gpu_sys::{Gpu, memory, probe};

/// GPU 0, or `None` after printing why there is none.
fn gpu_or_skip() -> Option<Gpu> {
    if let Err(why) = probe().result {
        eprintln!("skipped: no GPU ({why})");
        return None;
    }
    Gpu::open(0)
        .inspect_err(|e| eprintln!("skipped: GPU 0 did not open ({e})"))
        .ok()
}

#[test]
fn device_writes_to_mapped_memory_are_read_back() {
    let Some(gpu) = gpu_or_skip() else {
        return;
    };
    let mut buf = gpu
        .alloc_mapped_readback::<u32>(64)
        .expect("mapped pinned memory on a device that opened");
    assert_eq!(buf.len(), 64);
    assert_ne!(buf.device_ptr(), 0);
    // Starts zeroed.
    assert!(
        gpu.read_mapped(&mut buf)
            .expect("wait")
            .iter()
            .all(|&v| v == 0)
    );
    // The device sets the first 40 values' bytes to 0xAB through the mapped address.
    // SAFETY: the address is the mapped allocation's device address and 160 bytes are inside its 256; the
    // set is queued on `gpu`'s stream, which `read_mapped` waits for before the host reads.
    unsafe { memory::memset_d8_async(buf.device_ptr(), 0xAB, 40 * 4, gpu.stream()) }
        .expect("cuMemsetD8Async on mapped memory");
    let got = gpu.read_mapped(&mut buf).expect("wait");
    assert!(got[..40].iter().all(|&v| v == 0xABAB_ABAB), "{got:?}");
    assert!(got[40..].iter().all(|&v| v == 0), "{got:?}");
}

/// `write_host` puts an input where the device reads it, and `wait_mapped_filled` returns once the device
/// has replaced every awaited value; a stream that ends with one still unset is an error, not a hang.
#[test]
fn host_inputs_and_spin_waits_on_mapped_memory() {
    let Some(gpu) = gpu_or_skip() else {
        return;
    };
    let spin = std::time::Duration::from_millis(50);
    // The host's input, copied by the device from the mapped address into device memory.
    let mut input = gpu.alloc_mapped_readback::<u32>(16).expect("mapped input");
    let values: Vec<u32> = (0..16).map(|i| 1000 + i).collect();
    // SAFETY: no device work has been queued on this memory.
    unsafe { input.write_host(&values) }.expect("host write");
    // SAFETY: as above; 17 values do not fit 16 and are refused before any write.
    assert!(unsafe { input.write_host(&[0; 17]) }.is_err());
    let dev = gpu.alloc_zeros::<u32>(16).expect("device buffer");
    let dst = gpu.device_ptr(&dev);
    // SAFETY: both ranges hold 64 bytes; the copy is queued on `gpu`'s stream, which `download` waits for.
    unsafe { memory::copy_dtod_async(dst, input.device_ptr(), 64, gpu.stream()) }
        .expect("copy from mapped memory");
    assert_eq!(gpu.download(&dev).expect("download"), values);
    // Spin until the device has replaced 40 values set to u32::MAX by the host.
    let mut out = gpu.alloc_mapped_readback::<u32>(64).expect("mapped answer");
    // SAFETY: no device work touches `out` yet.
    unsafe { out.fill_host(64, u32::MAX) }.expect("fill");
    // SAFETY: 160 of the 256 bytes of the mapped allocation, queued on `gpu`'s stream.
    unsafe { memory::memset_d8_async(out.device_ptr(), 0xAB, 40 * 4, gpu.stream()) }
        .expect("cuMemsetD8Async on mapped memory");
    let got = gpu
        .wait_mapped_filled(&mut out, 40, u32::MAX, spin)
        .expect("every awaited value written");
    assert_eq!(got.len(), 40);
    assert!(got.iter().all(|&v| v == 0xABAB_ABAB), "{got:?}");
    // Waiting for 41 when the device writes 40: the stream finishes and the wait says so.
    // SAFETY: the memset above has finished (its values were all seen).
    unsafe { out.fill_host(64, u32::MAX) }.expect("fill");
    // SAFETY: as above.
    unsafe { memory::memset_d8_async(out.device_ptr(), 0xCD, 40 * 4, gpu.stream()) }
        .expect("cuMemsetD8Async on mapped memory");
    let err = gpu
        .wait_mapped_filled(&mut out, 41, u32::MAX, spin)
        .expect_err("value 40 is never written");
    assert!(err.to_string().contains("without writing"), "{err}");
    // And a spin bound of zero falls back to the stream wait, with the same answer.
    // SAFETY: the stream is idle (the failed wait saw it finish).
    unsafe { out.fill_host(64, u32::MAX) }.expect("fill");
    // SAFETY: as above.
    unsafe { memory::memset_d8_async(out.device_ptr(), 0x11, 8 * 4, gpu.stream()) }
        .expect("cuMemsetD8Async on mapped memory");
    let got = gpu
        .wait_mapped_filled(&mut out, 8, u32::MAX, std::time::Duration::ZERO)
        .expect("stream wait");
    assert!(got.iter().all(|&v| v == 0x1111_1111), "{got:?}");
}
