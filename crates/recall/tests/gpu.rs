//! The same calls on the GPU and the CPU must agree bit for bit. Skips, saying why, where there is no GPU.

use recall::{Device, DevicePolicy, Engine, Error, Metric};
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

/// A value that is not finite is refused on the GPU as on the CPU, with the same error (the first bad index):
/// the GPU path checks clip-and-noise's rows and the corpus of knn and similarity on the host before it uploads
/// them, where the CPU checks them in its own pass.
#[test]
fn gpu_refuses_bad_values_as_the_cpu_does() {
    let Some(gpu) = gpu_engine() else { return };
    let cpu = Engine::builder().device(DevicePolicy::Cpu).build().unwrap();
    let mut rng = recall::diagnostics::SplitMix::new(11);
    let dim = 64;
    let mut x = recall::diagnostics::awkward_matrix(&mut rng, 5000, dim);
    x[4000 * dim + 5] = f32::INFINITY;
    x[2100 * dim + 9] = f32::NAN;
    let want = Error::InvalidInput(recall_cpu_simd::CpuError::NonFinite {
        what: "vectors",
        index: 2100 * dim + 9,
    });
    let mut out = vec![0.0f32; x.len()];
    let g = gpu.clip_and_noise_into(&x, dim, 1.0, 0.2, 3, &mut out);
    let c = cpu.clip_and_noise_into(&x, dim, 1.0, 0.2, 3, &mut out);
    assert_eq!(c.as_ref().err(), Some(&want), "the CPU's error");
    assert_eq!(
        g.err(),
        Some(want.clone()),
        "clip_and_noise_into on the GPU"
    );
    let q = recall::diagnostics::awkward_matrix(&mut rng, 2, dim);
    for metric in [Metric::Cosine, Metric::Dot, Metric::L2] {
        let g = gpu.knn(&q, &x, dim, metric, 10);
        let c = cpu.knn(&q, &x, dim, metric, 10);
        let want = Error::InvalidInput(recall_cpu_simd::CpuError::NonFinite {
            what: "corpus",
            index: 2100 * dim + 9,
        });
        assert_eq!(c.err(), Some(want.clone()), "the CPU's knn error");
        assert_eq!(g.err(), Some(want.clone()), "knn {metric:?} on the GPU");
        let g = gpu.similarity(&q, &x, dim, metric);
        let c = cpu.similarity(&q, &x, dim, metric);
        assert_eq!(c.err(), Some(want.clone()), "the CPU's similarity error");
        assert_eq!(g.err(), Some(want), "similarity {metric:?} on the GPU");
    }
    let want = Error::InvalidInput(recall_cpu_simd::CpuError::NonFinite {
        what: "corpus",
        index: 2100 * dim + 9,
    });
    assert_eq!(cpu.cosine_similarity(&q, &x, dim).err(), Some(want.clone()));
    assert_eq!(gpu.cosine_similarity(&q, &x, dim).err(), Some(want));
    // k-means over finite points whose squared distances, or a cluster's sum, pass f32::MAX: the same typed
    // error, at the same iteration, from both devices (the rule runs on the same bits).
    let far: Vec<f32> = (0..600 * dim)
        .map(|i| if (i / dim) % 2 == 0 { 0.0 } else { 2e19 })
        .collect();
    let huge = vec![3e38f32; 600 * dim];
    for (what, points, k, iters, iteration) in [
        ("distances", &far, 1, 3, 1),
        ("a centroid", &huge, 1, 1, 1),
        ("a centroid, then distances", &huge, 1, 2, 2),
        // A huge iteration count: nothing reserved by it, and the run stops at the first overflow.
        ("distances, usize::MAX iterations", &far, 1, usize::MAX, 1),
        (
            "a centroid, then distances, 2^40 iterations",
            &huge,
            1,
            1 << 40,
            2,
        ),
    ] {
        let want = Error::InvalidInput(recall_cpu_simd::CpuError::KMeansOverflow { iteration });
        let c = cpu.kmeans(points, dim, k, iters, 5);
        let g = gpu.kmeans(points, dim, k, iters, 5);
        assert_eq!(
            c.err(),
            Some(want.clone()),
            "the CPU's k-means error: {what}"
        );
        assert_eq!(g.err(), Some(want), "k-means on the GPU: {what}");
    }
}

/// A call whose shape the GPU's kernels refuse before a launch (spreading's hops are a u32 on the device) is
/// answered on the CPU, and it is not a GPU failure: after more of them than the breaker's threshold, the next
/// call still runs on the GPU.
#[test]
fn gpu_refusing_a_shape_is_not_a_gpu_failure() {
    let Some(gpu) = gpu_engine() else { return };
    // A ring of 64 nodes: the activation halves every hop and is dropped below the threshold after a few.
    let n = 64u32;
    let indptr: Vec<usize> = (0..=n as usize).collect();
    let indices: Vec<u32> = (0..n).map(|u| (u + 1) % n).collect();
    let weights = vec![1.0f32; n as usize];
    let graph = recall::SpreadGraph::from_csr(&indptr, &indices, &weights).unwrap();
    let mut seeds = vec![0.0f32; n as usize];
    seeds[0] = 1.0;
    let params = |hops: usize| recall::SpreadParams {
        decay: 0.5,
        threshold: 0.01,
        hops,
        k: 4,
    };
    let cpu = Engine::builder().device(DevicePolicy::Cpu).build().unwrap();
    let many = u32::MAX as usize + 1;
    let want = cpu.spread(&graph, &seeds, &params(many)).unwrap();
    for _ in 0..5 {
        let got = gpu.spread(&graph, &seeds, &params(many)).unwrap();
        assert_eq!(got.device, Device::Cpu);
        assert!(
            got.fallback.as_deref().is_some_and(|m| m.contains("hops")),
            "{:?}",
            got.fallback
        );
        assert_eq!(got.activation, want.activation);
    }
    let got = gpu.spread(&graph, &seeds, &params(8)).unwrap();
    assert_eq!(got.fallback, None, "the breaker opened");
    assert!(matches!(got.device, Device::Gpu { .. }), "{:?}", got.device);
    assert_eq!(
        got.activation,
        cpu.spread(&graph, &seeds, &params(8)).unwrap().activation
    );
}

/// With several GPUs a corpus handle is sharded over them; its shards must go with the handle, so that each GPU
/// frees its copy once the handle is dropped (until session 33 the multi-GPU layer kept them until its next
/// sharded call). Skips with one GPU.
#[test]
fn gpu_shards_of_a_dropped_handle_leave_every_gpu() {
    let Some(gpu) = gpu_engine() else { return };
    let gpus = gpu.executor().gpu_backends();
    if gpus.len() < 2 {
        let _ = writeln!(
            std::io::stderr(),
            "skipped: {} GPU here, the layer that shards needs two",
            gpus.len()
        );
        return;
    }
    let cpu = Engine::builder().device(DevicePolicy::Cpu).build().unwrap();
    let mut rng = recall::diagnostics::SplitMix::new(33);
    let (n, dim) = (5000, 96);
    let rows = recall::diagnostics::awkward_matrix(&mut rng, n, dim);
    let queries = recall::diagnostics::awkward_matrix(&mut rng, 40, dim);
    let corpus = gpu.corpus(rows.clone(), dim).unwrap();
    let got = gpu.knn_in(&queries, &corpus, Metric::Cosine, 10).unwrap();
    assert!(got.fallback.is_none(), "fell back: {:?}", got.fallback);
    let want = cpu.knn(&queries, &rows, dim, Metric::Cosine, 10).unwrap();
    assert_eq!(got.ids, want.ids);
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&got.scores), bits(&want.scores));
    let held: Vec<usize> = gpus.iter().map(|g| g.resident_corpora()).collect();
    assert!(
        held.iter().all(|&r| r == 1),
        "each GPU holds its shard: {held:?}"
    );
    drop(corpus);
    let held: Vec<usize> = gpus.iter().map(|g| g.resident_corpora()).collect();
    assert!(
        held.iter().all(|&r| r == 0),
        "shards outlived their handle: {held:?}"
    );
}
