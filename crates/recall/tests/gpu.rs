//! The same calls on the GPU and the CPU must agree bit for bit. Skips, saying why, where there is no GPU.

use recall::{Device, DevicePolicy, Engine, Error};
use std::io::Write as _;

fn gpu_engine() -> Option<Engine> {
    match Engine::builder().device(DevicePolicy::Gpu).build() {
        Ok(e) => Some(e),
        Err(Error::GpuRequired(why)) => {
            // Written to the stderr handle, not `eprintln!`, so the reason shows even when the test harness
            // captures output.
            let _ = writeln!(std::io::stderr(), "skipped: no usable GPU here ({why})");
            None
        }
        Err(e) => panic!("unexpected error building a GPU engine: {e}"),
    }
}

#[test]
fn gpu_cosine_is_bit_identical_to_cpu() {
    let Some(gpu) = gpu_engine() else { return };
    let cpu = Engine::builder().device(DevicePolicy::Cpu).build().unwrap();
    let mut rng = recall::diagnostics::SplitMix::new(7);
    for (nq, n, dim) in [(1, 1, 1), (3, 1000, 33), (2, 4099, 768), (5, 77, 1025)] {
        let q = recall::diagnostics::awkward_matrix(&mut rng, nq, dim);
        let c = recall::diagnostics::awkward_matrix(&mut rng, n, dim);
        let g = gpu.cosine_similarity(&q, &c, dim).unwrap();
        let r = cpu.cosine_similarity(&q, &c, dim).unwrap();
        assert!(
            matches!(g.device, Device::Gpu { .. }),
            "ran on {}",
            g.device
        );
        assert!(g.fallback.is_none(), "fell back: {:?}", g.fallback);
        let same = g
            .values
            .iter()
            .zip(&r.values)
            .all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "GPU and CPU differ for {nq} x {n} x {dim}");
    }
}

#[test]
fn gpu_diff_test_quick_passes() {
    let Some(gpu) = gpu_engine() else { return };
    let report = recall::diagnostics::diff_test(&gpu, None, true).unwrap();
    assert!(report.passed(), "{}", report.render());
}

#[test]
fn gpu_clip_and_noise_into_is_bit_identical_to_cpu() {
    let Some(gpu) = gpu_engine() else { return };
    let cpu = Engine::builder().device(DevicePolicy::Cpu).build().unwrap();
    let mut rng = recall::diagnostics::SplitMix::new(9);
    for (n, dim) in [(1, 1), (3, 33), (257, 768), (40, 1025)] {
        let x = recall::diagnostics::awkward_matrix(&mut rng, n, dim);
        let want = cpu.clip_and_noise(&x, dim, 1.5, 0.25, 77).unwrap().values;
        // Into a buffer that holds other values: every one is written.
        let mut out = vec![f32::NAN; x.len()];
        let ran = gpu
            .clip_and_noise_into(&x, dim, 1.5, 0.25, 77, &mut out)
            .unwrap();
        assert!(
            matches!(ran.device, Device::Gpu { .. }),
            "ran on {}",
            ran.device
        );
        assert!(ran.fallback.is_none(), "fell back: {:?}", ran.fallback);
        let same = out
            .iter()
            .zip(&want)
            .all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "GPU into and CPU differ for {n} x {dim}");
    }
}
