//! Mapped pinned memory (`Gpu::alloc_mapped_readback`): what the device writes through the mapped address is
//! what `Gpu::read_mapped` returns after the wait. Skips, saying why, where there is no GPU.

use recall_gpu_sys::{Gpu, memory, probe};

#[test]
fn device_writes_to_mapped_memory_are_read_back() {
    if let Err(why) = probe().result {
        eprintln!("skipped: no GPU ({why})");
        return;
    }
    let gpu = match Gpu::open(0) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("skipped: GPU 0 did not open ({e})");
            return;
        }
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
