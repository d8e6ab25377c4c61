//! The same calls on the GPU and the CPU must agree bit for bit (small inputs, inputs large enough to be
//! uploaded through pinned staging, spreading graphs whose arrays are, and results large enough to come back
//! through it). Skips, saying why, where there is no GPU.
#![allow(clippy::unwrap_used)] // a test crate: helpers panic on failure like the tests do

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

/// [`gpu_engine`] whose backends make the staging ring at the first large copy (`set_staging_payback(0)`), for
/// the tests of the staged path itself.
fn staged_gpu_engine() -> Option<Engine> {
    let e = gpu_engine()?;
    for b in e.executor().gpu_backends() {
        b.set_staging_payback(0);
    }
    Some(e)
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

/// Candidate scoring over a corpus slice reads only the rows its lists name, on the GPU as on the CPU: a bad value
/// in a named row is the same error (the smallest bad index among them; the GPU path checks the named rows on
/// the host first, the CPU in its scoring pass), and a bad value in a row no list names is no error: the GPU
/// answers with the CPU's bits.
#[test]
fn gpu_score_candidates_checks_the_rows_it_names() {
    let Some(gpu) = gpu_engine() else { return };
    let cpu = Engine::builder().device(DevicePolicy::Cpu).build().unwrap();
    let mut rng = recall::diagnostics::SplitMix::new(13);
    let dim = 96;
    let mut x = recall::diagnostics::awkward_matrix(&mut rng, 6000, dim);
    x[4000 * dim + 5] = f32::INFINITY;
    x[2100 * dim + 9] = f32::NAN;
    let q = recall::diagnostics::awkward_matrix(&mut rng, 3, dim);
    // Three lists of 400 rows away from the bad ones, the second with `named` appended.
    let lists = |named: &[u32]| -> (Vec<usize>, Vec<u32>) {
        let (mut ids, mut offsets) = (Vec::new(), vec![0]);
        for qi in 0..3u32 {
            ids.extend((0..400).map(|i| (qi * 7 + i * 5) % 2000));
            if qi == 1 {
                ids.extend_from_slice(named);
            }
            offsets.push(ids.len());
        }
        (offsets, ids)
    };
    for metric in [Metric::Cosine, Metric::Dot, Metric::L2] {
        for (named, index) in [
            (vec![4000, 2100], Some(2100 * dim + 9)),
            (vec![4000], Some(4000 * dim + 5)),
            (vec![], None),
        ] {
            let (offsets, ids) = lists(&named);
            let g = gpu.score_candidates(&q, &x, dim, metric, &offsets, &ids, 10);
            let c = cpu.score_candidates(&q, &x, dim, metric, &offsets, &ids, 10);
            match index {
                Some(index) => {
                    let want = Error::InvalidInput(recall_cpu_simd::CpuError::NonFinite {
                        what: "corpus",
                        index,
                    });
                    assert_eq!(c.err(), Some(want.clone()), "the CPU's error, {named:?}");
                    assert_eq!(g.err(), Some(want), "on the GPU, {metric:?} {named:?}");
                }
                None => {
                    let (g, c) = (g.unwrap(), c.unwrap());
                    ran_on_gpu("score_candidates", &g.device, &g.fallback);
                    assert_eq!(g.ids, c.ids, "{metric:?}");
                    assert_eq!(bits(&g.scores), bits(&c.scores), "{metric:?}");
                }
            }
        }
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

/// The bits of `v`, to compare results exactly.
fn bits<T: Copy + Into<f64>>(v: &[T]) -> Vec<u64> {
    v.iter().map(|&x| x.into().to_bits()).collect()
}

/// The call ran on a GPU and did not fall back.
fn ran_on_gpu(what: &str, device: &Device, fallback: &Option<String>) {
    assert!(
        matches!(device, Device::Gpu { .. }),
        "{what} ran on {device}"
    );
    assert!(fallback.is_none(), "{what} fell back: {fallback:?}");
}

/// Clip-and-noise of `x` (clip 1.5, sigma 0.25, `seed`), both forms, on the GPU with the CPU's bits; `into` over a
/// buffer of other values.
fn clip_and_noise_on_gpu(gpu: &Engine, cpu: &Engine, x: &[f32], xdim: usize, seed: u64) {
    let want = cpu.clip_and_noise(x, xdim, 1.5, 0.25, seed).unwrap().values;
    let g = gpu.clip_and_noise(x, xdim, 1.5, 0.25, seed).unwrap();
    ran_on_gpu("clip-and-noise", &g.device, &g.fallback);
    assert_eq!(bits(&g.values), bits(&want), "clip-and-noise");
    let mut out = vec![f32::NAN; x.len()];
    let ran = gpu
        .clip_and_noise_into(x, xdim, 1.5, 0.25, seed, &mut out)
        .unwrap();
    ran_on_gpu("clip-and-noise into", &ran.device, &ran.fallback);
    assert_eq!(bits(&out), bits(&want), "clip-and-noise into");
}

/// Neither memory pool of any GPU backend recorded an error.
fn assert_pools_clean(gpu: &Engine) {
    for b in gpu.executor().gpu_backends() {
        assert!(b.memory().pinned_pool().take_errors().is_empty());
        assert!(b.memory().device_pool().take_errors().is_empty());
    }
}

/// Give back every backend's cached memory (its staging ring included) and set its pinned pool's budget to zero,
/// so that no staging can be had; the budgets as they were, for [`restore_pinned_memory`].
fn without_pinned_memory(gpu: &Engine) -> Vec<usize> {
    gpu.executor()
        .gpu_backends()
        .iter()
        .map(|b| {
            b.trim().unwrap();
            let budget = b.memory().pinned_pool().stats().budget_bytes;
            b.memory().pinned_pool().set_budget(0);
            budget
        })
        .collect()
}

/// The pinned pools' budgets as [`without_pinned_memory`] found them.
fn restore_pinned_memory(gpu: &Engine, budgets: &[usize]) {
    for (b, &budget) in gpu.executor().gpu_backends().iter().zip(budgets) {
        b.memory().pinned_pool().set_budget(budget);
    }
}

/// Bytes of pinned memory the GPU backends' staged uploads hold now (their rings' two chunks once one ran).
fn staged_pinned_bytes(engine: &Engine) -> usize {
    engine
        .executor()
        .gpu_backends()
        .iter()
        .map(|b| b.memory().pinned_pool().stats().in_use_bytes)
        .sum()
}

/// knn, similarity, k-means and clip-and-noise over caller data at or above `STAGED_UPLOAD_MIN_BYTES` (uploaded
/// through pinned staging in chunks of `STAGING_RING_CHUNK_BYTES`, the host copy on the host pool) give the CPU's bits.
/// The corpus and the clip-and-noise input span 2.5 chunks and a bit (a short last chunk, both staging buffers
/// reused); the many-query call stages its queries into the knn scratch; a corpus handle's first upload stages
/// too. The rings' pinned chunks being held afterwards shows that the staged path ran.
#[test]
fn gpu_large_uploads_are_staged_and_bit_identical_to_cpu() {
    let Some(gpu) = staged_gpu_engine() else {
        return;
    };
    let cpu = Engine::builder().device(DevicePolicy::Cpu).build().unwrap();
    let min = recall::executor::STAGED_UPLOAD_MIN_BYTES;
    let chunk = recall::executor::STAGING_RING_CHUNK_BYTES;
    let mut rng = recall::diagnostics::SplitMix::new(35);
    let dim = 768;
    let n = 5 * chunk / 2 / (4 * dim) + 3;
    let corpus = recall::diagnostics::awkward_matrix(&mut rng, n, dim);
    assert!(corpus.len() * 4 > 2 * chunk && corpus.len() * 4 >= min);
    let few = recall::diagnostics::awkward_matrix(&mut rng, 3, dim);
    for metric in [Metric::Cosine, Metric::L2, Metric::Dot] {
        for q in [&few[..dim], &few[..]] {
            let what = format!("knn {metric:?}, {} queries over {n} x {dim}", q.len() / dim);
            let g = gpu.knn(q, &corpus, dim, metric, 10).unwrap();
            let c = cpu.knn(q, &corpus, dim, metric, 10).unwrap();
            ran_on_gpu(&what, &g.device, &g.fallback);
            assert_eq!(g.ids, c.ids, "{what}: ids");
            assert_eq!(bits(&g.scores), bits(&c.scores), "{what}: scores");
        }
    }
    assert!(
        staged_pinned_bytes(&gpu) >= 2 * chunk,
        "no staging ring after large uploads: {} bytes pinned",
        staged_pinned_bytes(&gpu)
    );
    let g = gpu.similarity(&few, &corpus, dim, Metric::Cosine).unwrap();
    ran_on_gpu("similarity", &g.device, &g.fallback);
    let c = cpu.similarity(&few, &corpus, dim, Metric::Cosine).unwrap();
    assert_eq!(bits(&g.values), bits(&c.values), "similarity");

    // Queries alone above the threshold: staged into the knn scratch, against a small corpus.
    let nq = min / (4 * dim) + 1;
    let many = recall::diagnostics::awkward_matrix(&mut rng, nq, dim);
    let small = recall::diagnostics::awkward_matrix(&mut rng, 600, dim);
    for metric in [Metric::Cosine, Metric::L2] {
        let what = format!("knn {metric:?}, {nq} queries over 600 x {dim}");
        let g = gpu.knn(&many, &small, dim, metric, 5).unwrap();
        let c = cpu.knn(&many, &small, dim, metric, 5).unwrap();
        ran_on_gpu(&what, &g.device, &g.fallback);
        assert_eq!(g.ids, c.ids, "{what}: ids");
        assert_eq!(bits(&g.scores), bits(&c.scores), "{what}: scores");
    }

    // A corpus handle: its first (resident) upload is staged.
    let handle = gpu.corpus(corpus.clone(), dim).unwrap();
    let g = gpu.knn_in(&few, &handle, Metric::Cosine, 10).unwrap();
    ran_on_gpu("knn_in", &g.device, &g.fallback);
    let c = cpu.knn(&few, &corpus, dim, Metric::Cosine, 10).unwrap();
    assert_eq!(g.ids, c.ids, "knn_in: ids");
    assert_eq!(bits(&g.scores), bits(&c.scores), "knn_in: scores");
    drop(handle);

    // k-means' points above the threshold.
    let pdim = 64;
    let points = recall::diagnostics::awkward_matrix(&mut rng, min / (4 * pdim) + 77, pdim);
    let g = gpu.kmeans(&points, pdim, 24, 4, 9).unwrap();
    let c = cpu.kmeans(&points, pdim, 24, 4, 9).unwrap();
    ran_on_gpu("k-means", &g.device, &g.fallback);
    assert_eq!(g.assignments, c.assignments, "k-means: assignments");
    assert_eq!(bits(&g.centroids), bits(&c.centroids), "k-means: centroids");
    assert_eq!(bits(&g.inertia), bits(&c.inertia), "k-means: inertia");

    // Clip-and-noise's vectors: 2.5 chunks and a bit, both forms.
    let xdim = 1000;
    let x = recall::diagnostics::awkward_matrix(&mut rng, 5 * chunk / 2 / (4 * xdim) + 5, xdim);
    clip_and_noise_on_gpu(&gpu, &cpu, &x, xdim, 77);
    assert_pools_clean(&gpu);
}

/// Never down: with no pinned staging to be had (the pinned pool's budget at zero), large uploads copy from
/// pageable memory and the calls still run on the GPU with the CPU's bits; once pinned memory is allowed again
/// the next large upload makes its staging.
#[test]
fn gpu_large_uploads_without_pinned_staging_stay_on_the_gpu() {
    let Some(gpu) = staged_gpu_engine() else {
        return;
    };
    let cpu = Engine::builder().device(DevicePolicy::Cpu).build().unwrap();
    let min = recall::executor::STAGED_UPLOAD_MIN_BYTES;
    let chunk = recall::executor::STAGING_RING_CHUNK_BYTES;
    let budgets = without_pinned_memory(&gpu);
    let mut rng = recall::diagnostics::SplitMix::new(36);
    let dim = 256;
    let corpus = recall::diagnostics::awkward_matrix(&mut rng, 3 * min / (4 * dim) / 2, dim);
    let q = recall::diagnostics::awkward_matrix(&mut rng, 4, dim);
    let want = cpu.knn(&q, &corpus, dim, Metric::L2, 7).unwrap();
    for round in 0..2 {
        let g = gpu.knn(&q, &corpus, dim, Metric::L2, 7).unwrap();
        assert!(
            matches!(g.device, Device::Gpu { .. }),
            "round {round}: ran on {}",
            g.device
        );
        assert!(
            g.fallback.is_none(),
            "round {round}: fell back: {:?}",
            g.fallback
        );
        assert_eq!(g.ids, want.ids, "round {round}: ids");
        assert_eq!(bits(&g.scores), bits(&want.scores), "round {round}: scores");
        assert_eq!(
            staged_pinned_bytes(&gpu),
            0,
            "round {round}: pinned memory over a zero budget"
        );
    }
    let points = recall::diagnostics::awkward_matrix(&mut rng, min / (4 * 32) + 5, 32);
    let g = gpu.kmeans(&points, 32, 8, 2, 1).unwrap();
    assert!(g.fallback.is_none(), "k-means fell back: {:?}", g.fallback);
    let c = cpu.kmeans(&points, 32, 8, 2, 1).unwrap();
    assert_eq!(
        bits(&g.centroids),
        bits(&c.centroids),
        "k-means without staging"
    );
    restore_pinned_memory(&gpu, &budgets);
    let g = gpu.knn(&q, &corpus, dim, Metric::L2, 7).unwrap();
    assert!(g.fallback.is_none(), "fell back: {:?}", g.fallback);
    assert_eq!(g.ids, want.ids);
    assert_eq!(bits(&g.scores), bits(&want.scores));
    assert!(
        staged_pinned_bytes(&gpu) >= 2 * chunk,
        "no staging once pinned memory was allowed again"
    );
}

/// Queries and a corpus of `dim` values each, both below `STAGED_UPLOAD_MIN_BYTES` (so their uploads are pageable
/// and make no staging), whose query x row score matrix is 2.5 staging chunks and a bit: at or above
/// `STAGED_DOWNLOAD_MIN_BYTES`, a short last chunk, both staging buffers reused.
fn large_result_inputs(
    rng: &mut recall::diagnostics::SplitMix,
    dim: usize,
) -> (Vec<f32>, Vec<f32>) {
    let chunk = recall::executor::STAGING_RING_CHUNK_BYTES;
    let nq = 1000;
    let n = 5 * chunk / 2 / (4 * nq) + 3;
    let q = recall::diagnostics::awkward_matrix(rng, nq, dim);
    let c = recall::diagnostics::awkward_matrix(rng, n, dim);
    let out_bytes = 4 * nq * n;
    assert!(out_bytes > 5 * chunk / 2 && out_bytes >= recall::executor::STAGED_DOWNLOAD_MIN_BYTES);
    assert!(4 * q.len().max(c.len()) < recall::executor::STAGED_UPLOAD_MIN_BYTES);
    (q, c)
}

/// Results at or above `STAGED_DOWNLOAD_MIN_BYTES` (similarity's and cosine's score matrix, clip-and-noise's
/// vectors) come back through the pinned staging ring, the host pool copying each chunk out while the next is
/// DMA'd, and give the CPU's bits. The similarity inputs are small (pageable uploads, no staging), so the ring
/// held afterwards was made by a download.
#[test]
fn gpu_large_results_are_staged_and_bit_identical_to_cpu() {
    let Some(gpu) = staged_gpu_engine() else {
        return;
    };
    let cpu = Engine::builder().device(DevicePolicy::Cpu).build().unwrap();
    let chunk = recall::executor::STAGING_RING_CHUNK_BYTES;
    // No ring yet: the first large copy below is a download.
    for b in gpu.executor().gpu_backends() {
        b.trim().unwrap();
    }
    assert_eq!(
        staged_pinned_bytes(&gpu),
        0,
        "pinned memory held before any call"
    );
    let mut rng = recall::diagnostics::SplitMix::new(37);
    let dim = 48;
    let (q, c) = large_result_inputs(&mut rng, dim);
    let g = gpu.cosine_similarity(&q, &c, dim).unwrap();
    ran_on_gpu("cosine_similarity", &g.device, &g.fallback);
    let want = cpu.cosine_similarity(&q, &c, dim).unwrap();
    assert_eq!(g.values.len(), want.values.len());
    assert_eq!(bits(&g.values), bits(&want.values), "cosine_similarity");
    assert!(
        staged_pinned_bytes(&gpu) >= 2 * chunk,
        "no staging ring after a large download: {} bytes pinned",
        staged_pinned_bytes(&gpu)
    );
    for metric in [Metric::Cosine, Metric::L2, Metric::Dot] {
        let what = format!(
            "similarity {metric:?}, {} x {} x {dim}",
            q.len() / dim,
            c.len() / dim
        );
        let g = gpu.similarity(&q, &c, dim, metric).unwrap();
        ran_on_gpu(&what, &g.device, &g.fallback);
        let want = cpu.similarity(&q, &c, dim, metric).unwrap();
        assert_eq!(bits(&g.values), bits(&want.values), "{what}");
    }
    // Just below the threshold: one pageable copy, the same bits.
    let below = recall::executor::STAGED_DOWNLOAD_MIN_BYTES / 4 - 1;
    let cb = recall::diagnostics::awkward_matrix(&mut rng, below / (q.len() / dim), dim);
    let g = gpu.similarity(&q, &cb, dim, Metric::Dot).unwrap();
    assert!(g.values.len() * 4 < recall::executor::STAGED_DOWNLOAD_MIN_BYTES);
    ran_on_gpu("similarity below the threshold", &g.device, &g.fallback);
    let want = cpu.similarity(&q, &cb, dim, Metric::Dot).unwrap();
    assert_eq!(
        bits(&g.values),
        bits(&want.values),
        "similarity below the threshold"
    );

    // Clip-and-noise: 2.5 chunks and a bit out (and in), both forms; `into` over a buffer of other values.
    let xdim = 1000;
    let x = recall::diagnostics::awkward_matrix(&mut rng, 5 * chunk / 2 / (4 * xdim) + 5, xdim);
    assert!(x.len() * 4 >= recall::executor::STAGED_DOWNLOAD_MIN_BYTES);
    clip_and_noise_on_gpu(&gpu, &cpu, &x, xdim, 78);
    assert_pools_clean(&gpu);
}

/// Never down: with no pinned staging to be had (the pinned pool's budget at zero), large results come back in one
/// pageable copy and the calls still run on the GPU with the CPU's bits, holding no pinned memory.
#[test]
fn gpu_large_results_without_pinned_staging_stay_on_the_gpu() {
    let Some(gpu) = staged_gpu_engine() else {
        return;
    };
    let cpu = Engine::builder().device(DevicePolicy::Cpu).build().unwrap();
    let chunk = recall::executor::STAGING_RING_CHUNK_BYTES;
    let budgets = without_pinned_memory(&gpu);
    let mut rng = recall::diagnostics::SplitMix::new(38);
    let dim = 40;
    let (q, c) = large_result_inputs(&mut rng, dim);
    let want_cos = cpu.cosine_similarity(&q, &c, dim).unwrap().values;
    for round in 0..2 {
        let g = gpu.cosine_similarity(&q, &c, dim).unwrap();
        assert!(
            matches!(g.device, Device::Gpu { .. }),
            "round {round}: ran on {}",
            g.device
        );
        assert!(
            g.fallback.is_none(),
            "round {round}: fell back: {:?}",
            g.fallback
        );
        assert_eq!(
            bits(&g.values),
            bits(&want_cos),
            "round {round}: cosine_similarity"
        );
        assert_eq!(
            staged_pinned_bytes(&gpu),
            0,
            "round {round}: pinned memory over a zero budget"
        );
    }
    let xdim = 512;
    let x = recall::diagnostics::awkward_matrix(&mut rng, 5 * chunk / 2 / (4 * xdim) + 1, xdim);
    let want = cpu.clip_and_noise(&x, xdim, 0.75, 0.5, 5).unwrap().values;
    let mut out = vec![f32::NAN; x.len()];
    let ran = gpu
        .clip_and_noise_into(&x, xdim, 0.75, 0.5, 5, &mut out)
        .unwrap();
    assert!(
        matches!(ran.device, Device::Gpu { .. }),
        "clip-and-noise ran on {}",
        ran.device
    );
    assert!(
        ran.fallback.is_none(),
        "clip-and-noise fell back: {:?}",
        ran.fallback
    );
    assert_eq!(bits(&out), bits(&want), "clip-and-noise without staging");
    assert_eq!(
        staged_pinned_bytes(&gpu),
        0,
        "pinned memory over a zero budget"
    );
    // Pinned memory allowed again: the next large result makes its staging.
    restore_pinned_memory(&gpu, &budgets);
    let g = gpu.cosine_similarity(&q, &c, dim).unwrap();
    assert!(g.fallback.is_none(), "fell back: {:?}", g.fallback);
    assert_eq!(bits(&g.values), bits(&want_cos), "with staging again");
    assert!(
        staged_pinned_bytes(&gpu) >= 2 * chunk,
        "no staging once pinned memory was allowed again"
    );
}

/// With the default payback (`STAGING_PAYBACK`), large copies stay pageable until they add up to 12 times the
/// ring's page-locked bytes: knn calls over a 24 MiB corpus hold no pinned memory until the sixteenth makes the
/// ring (384 MiB moved), and every answer is the CPU's.
#[test]
fn gpu_the_staging_ring_is_made_once_large_copies_repay_it() {
    let Some(gpu) = gpu_engine() else { return };
    let cpu = Engine::builder().device(DevicePolicy::Cpu).build().unwrap();
    let (ring, payback) = (
        2 * recall::executor::STAGING_RING_CHUNK_BYTES,
        recall::executor::STAGING_PAYBACK as usize,
    );
    let dim = 768;
    let n = (24 << 20) / (4 * dim);
    let mut rng = recall::diagnostics::SplitMix::new(36);
    let corpus = recall::diagnostics::awkward_matrix(&mut rng, n, dim);
    let q = recall::diagnostics::awkward_matrix(&mut rng, 1, dim);
    let want = cpu.knn(&q, &corpus, dim, Metric::Cosine, 10).unwrap();
    let bytes = corpus.len() * 4;
    let makes = (payback * ring).div_ceil(bytes);
    for call in 1..=makes {
        let g = gpu.knn(&q, &corpus, dim, Metric::Cosine, 10).unwrap();
        assert!(matches!(g.device, Device::Gpu { .. }) && g.fallback.is_none());
        assert_eq!(
            (g.ids, bits(&g.scores)),
            (want.ids.clone(), bits(&want.scores)),
            "call {call}"
        );
        let pinned = staged_pinned_bytes(&gpu);
        if call < makes {
            assert_eq!(
                pinned, 0,
                "call {call} of {makes}: a ring before the copies repay it"
            );
        } else {
            assert!(
                pinned >= ring,
                "call {call}: no ring once {} bytes moved",
                call * bytes
            );
        }
    }
}

/// A spreading graph whose arrays reach `STAGED_UPLOAD_MIN_BYTES`: 2,200,000 nodes (the pull and push offsets and
/// the spans, 8 bytes a node, each 17.6 MB; the binned nodes, 4 bytes a node, stay below) and 2.5 staging chunks and
/// a bit of edges (sources, weights and targets, 4 bytes an edge: a short last chunk, both staging buffers reused),
/// power law, so its lowest ids are hubs whose in-edges the upload reorders on the host; plus an in-hub and an
/// out-hub. Seeds: one node in 1,000. Returns the graph, the seeds and its CSR for a handle.
#[allow(clippy::type_complexity)]
fn large_graph() -> (
    recall::SpreadGraph,
    Vec<f32>,
    (Vec<usize>, Vec<u32>, Vec<f32>),
) {
    let min = recall::executor::STAGED_UPLOAD_MIN_BYTES;
    let chunk = recall::executor::STAGING_RING_CHUNK_BYTES;
    let n = 2_200_000;
    let edges = 5 * chunk / 2 / 4 + 3;
    assert!(8 * (n + 1) >= min && 4 * n < min && 4 * edges >= min && 4 * edges > 2 * chunk);
    let mut rng = recall::diagnostics::SplitMix::new(37);
    let csr = recall::diagnostics::power_law_graph(&mut rng, n, edges - 30_000, 20_000, 10_000);
    let graph = recall::SpreadGraph::from_csr(&csr.0, &csr.1, &csr.2).unwrap();
    assert_eq!(graph.n_edges(), edges);
    let mut seeds = vec![0.0f32; n];
    for _ in 0..n / 1000 {
        seeds[rng.below(n as u64) as usize] = (rng.next_f32() + 1.0) * 0.5;
    }
    (graph, seeds, csr)
}

const LARGE_SPREAD: recall::SpreadParams = recall::SpreadParams {
    decay: 0.5,
    threshold: 0.001,
    hops: 3,
    k: 20,
};

/// `got` is the CPU's spreading answer `want`, bit for bit, and ran on the GPU.
fn same_spread(what: &str, got: &recall::Activation, want: &recall::Activation) {
    ran_on_gpu(what, &got.device, &got.fallback);
    assert_eq!(got.top.ids, want.top.ids, "{what}: top ids");
    assert_eq!(
        bits(&got.top.scores),
        bits(&want.top.scores),
        "{what}: top scores"
    );
    assert!(
        bits(&got.activation) == bits(&want.activation),
        "{what}: activations differ"
    );
}

/// A large graph's arrays (`large_graph`: u64 offsets and spans, u32 sources and targets, f32 weights, each at or
/// above `STAGED_UPLOAD_MIN_BYTES`) go up through the pinned staging ring, into buffers on the graph's own stream
/// (the ring copies on the device's: events order the two), and the spreading over them gives the CPU's bits: a
/// plain `spread` (uploads on every call), then a handle (`spread_in`, `spread_from`: uploaded on first use). The
/// ring's pinned chunks being held after the first plain call, with none held before, shows that the graph's
/// upload made and used it.
#[test]
fn gpu_large_graphs_are_staged_and_spread_bit_identical_to_cpu() {
    let Some(gpu) = staged_gpu_engine() else {
        return;
    };
    let cpu = Engine::builder().device(DevicePolicy::Cpu).build().unwrap();
    let chunk = recall::executor::STAGING_RING_CHUNK_BYTES;
    let (graph, seeds, csr) = large_graph();
    let want = cpu.spread(&graph, &seeds, &LARGE_SPREAD).unwrap();
    for b in gpu.executor().gpu_backends() {
        b.trim().unwrap();
    }
    assert_eq!(
        staged_pinned_bytes(&gpu),
        0,
        "a ring before the graph's upload"
    );
    for call in 0..2 {
        let got = gpu.spread(&graph, &seeds, &LARGE_SPREAD).unwrap();
        same_spread(&format!("plain spread, call {call}"), &got, &want);
        assert!(
            staged_pinned_bytes(&gpu) >= 2 * chunk,
            "no staging ring after a large graph's upload: {} bytes pinned",
            staged_pinned_bytes(&gpu)
        );
    }
    let handle = gpu.graph(&csr.0, &csr.1, &csr.2).unwrap();
    let got = gpu.spread_in(&handle, &seeds, &LARGE_SPREAD).unwrap();
    same_spread("spread_in, first call (the upload)", &got, &want);
    let got = gpu.spread_in(&handle, &seeds, &LARGE_SPREAD).unwrap();
    same_spread("spread_in, resident", &got, &want);
    let mut list: Vec<(u32, f32)> = seeds
        .iter()
        .enumerate()
        .filter(|p| *p.1 != 0.0)
        .map(|(v, &x)| (v as u32, x))
        .collect();
    list.reverse();
    let got = gpu.spread_from(&handle, &list, &LARGE_SPREAD).unwrap();
    same_spread("spread_from, resident", &got, &want);
    drop(handle);
    assert_pools_clean(&gpu);
}

/// Never down: with no pinned staging to be had (the pinned pool's budget at zero), a large graph's arrays go up
/// in one pageable copy each and spreading still runs on the GPU with the CPU's bits, plain and through a handle;
/// once pinned memory is allowed again the next large graph upload makes the ring.
#[test]
fn gpu_large_graphs_without_pinned_staging_stay_on_the_gpu() {
    let Some(gpu) = staged_gpu_engine() else {
        return;
    };
    let cpu = Engine::builder().device(DevicePolicy::Cpu).build().unwrap();
    let chunk = recall::executor::STAGING_RING_CHUNK_BYTES;
    let (graph, seeds, csr) = large_graph();
    let want = cpu.spread(&graph, &seeds, &LARGE_SPREAD).unwrap();
    let budgets = without_pinned_memory(&gpu);
    let got = gpu.spread(&graph, &seeds, &LARGE_SPREAD).unwrap();
    same_spread("plain spread without staging", &got, &want);
    let handle = gpu.graph(&csr.0, &csr.1, &csr.2).unwrap();
    let got = gpu.spread_in(&handle, &seeds, &LARGE_SPREAD).unwrap();
    same_spread("spread_in without staging (the upload)", &got, &want);
    assert_eq!(
        staged_pinned_bytes(&gpu),
        0,
        "pinned memory over a zero budget"
    );
    drop(handle);
    restore_pinned_memory(&gpu, &budgets);
    let got = gpu.spread(&graph, &seeds, &LARGE_SPREAD).unwrap();
    same_spread("plain spread with staging again", &got, &want);
    assert!(
        staged_pinned_bytes(&gpu) >= 2 * chunk,
        "no staging once pinned memory was allowed again"
    );
}
