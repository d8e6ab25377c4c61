//! Measurements behind `recall bench`: the GPU kernels with data resident on the device, the CPU engine,
//! and the device's copy bandwidth as the ceiling of memory-bound kernels.

use crate::difftest::SplitMix;
use std::time::Instant;

/// Median of a set of milliseconds.
pub fn median(mut xs: Vec<f64>) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// A random `n_rows x dim` matrix, uniform in [-1, 1).
pub fn random_matrix(seed: u64, n_rows: usize, dim: usize) -> Vec<f32> {
    let mut rng = SplitMix::new(seed);
    (0..n_rows * dim).map(|_| rng.next_f32()).collect()
}

/// One cosine measurement.
#[derive(Debug, Clone, PartialEq)]
pub struct CosineFigures {
    pub n_queries: usize,
    pub n_rows: usize,
    pub dim: usize,
    /// Kernel only, corpus and norms resident: median ms.
    pub gpu_kernel_ms: Option<f64>,
    /// Query upload, query norm, kernel and score download, corpus resident: median ms.
    pub gpu_resident_call_ms: Option<f64>,
    /// Device-to-device copy bandwidth in GB/s (bytes read + bytes written per second).
    pub gpu_copy_gbps: Option<f64>,
    /// The CPU engine, one call: median ms.
    pub cpu_ms: Option<f64>,
    /// Whether GPU and CPU scores were bit-identical.
    pub bit_identical: Option<bool>,
}

impl CosineFigures {
    /// Bytes the kernel must move at least: the corpus, its norms, the scores.
    pub fn min_bytes(&self) -> f64 {
        (self.n_rows * self.dim * 4 + self.n_rows * 4 + self.n_queries * self.n_rows * 4) as f64
    }
    /// Achieved bandwidth of the kernel in GB/s.
    pub fn kernel_gbps(&self) -> Option<f64> {
        self.gpu_kernel_ms
            .map(|ms| self.min_bytes() / (ms * 1e-3) / 1e9)
    }
}

/// Time the CPU engine on the cosine op.
pub fn cpu_cosine_ms(
    queries: &[f32],
    corpus: &[f32],
    dim: usize,
    iters: usize,
) -> Result<(f64, Vec<f32>), String> {
    let qn = recall_cpu_simd::row_norms(queries, dim).map_err(|e| e.to_string())?;
    let cn = recall_cpu_simd::row_norms(corpus, dim).map_err(|e| e.to_string())?;
    let mut out = vec![0.0f32; qn.len() * cn.len()];
    let mut times = Vec::new();
    for _ in 0..iters.max(1) {
        let t = Instant::now();
        recall_cpu_simd::cosine_scores(queries, &qn, corpus, &cn, dim, &mut out)
            .map_err(|e| e.to_string())?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    Ok((median(times), out))
}

/// Named parts of a measured call, each timed alone: (what, median ms).
pub type Parts = Vec<(&'static str, f64)>;

/// Fast-mode knn at kernel level (cosine, corpus and queries already 16-bit and resident, norms resident; k
/// pairs downloaded): the fused path against the GEMM alone and the GEMM followed by the separate selection.
#[derive(Debug, Clone)]
pub struct FastKnnFigures {
    /// `tc_knn_*` (or `sm90a_knn*_`) + `tc_knn_merge` + the download: median ms (`None` where the fused
    /// kernels do not run).
    pub fused_ms: Option<f64>,
    /// The fused kernel family that ran (`sm90a_knn`, `sm90a_knnm`, `tc_knn`).
    pub fused_family: Option<&'static str>,
    /// `tc_gemm_*` alone, writing every score (query chunks of at most 1 GiB of scores): median ms.
    pub gemm_ms: f64,
    /// The GEMM followed by `select_topk` per chunk (the path without fusion): median ms.
    pub gemm_select_ms: f64,
    /// Whether the fused lists equal the GEMM + selection lists (ids and score bits).
    pub same: Option<bool>,
    /// The steps before the kernel on `Engine::knn_in`'s fast path, each alone, median ms: the host's
    /// checks of the queries (finite, and for f16 their range), their upload from pageable memory, their
    /// norms and 16-bit rows on the device.
    pub query_parts: Parts,
}

#[cfg(feature = "gpu")]
mod gpu {
    use super::*;
    use crate::gpu_backend::GpuBackend;

    fn err(e: impl std::fmt::Display) -> String {
        e.to_string()
    }

    /// The scan a single query runs against many rows on this backend (`RECALL_SCAN1`'s name of the mode in
    /// force: `old`, `new`, `new-s8`).
    pub fn scan1_mode(backend: &GpuBackend) -> &'static str {
        backend.parts().1.scan1_mode().name()
    }

    /// How one-query answers come back (`RECALL_ONE_QUERY_READBACK`): `mapped` (the kernel writes mapped
    /// pinned memory) or `copy`.
    pub fn one_query_readback() -> &'static str {
        if recall_gpu_kernels::one_query_readback_mapped() {
            "mapped"
        } else {
            "copy"
        }
    }

    /// Device-to-device copy of `bytes`, median GB/s counting the bytes read and written.
    pub fn copy_gbps(backend: &GpuBackend, bytes: usize, iters: usize) -> Result<f64, String> {
        let (g, _) = backend.parts();
        let n = bytes / 4;
        let src = g.alloc_zeros::<f32>(n).map_err(err)?;
        let mut dst = g.alloc_zeros::<f32>(n).map_err(err)?;
        g.copy_dtod(&src, &mut dst).map_err(err)?;
        g.synchronize().map_err(err)?;
        let mut times = Vec::new();
        for _ in 0..iters.max(1) {
            let t = Instant::now();
            g.copy_dtod(&src, &mut dst).map_err(err)?;
            g.synchronize().map_err(err)?;
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
        let ms = median(times);
        Ok(2.0 * (n * 4) as f64 / (ms * 1e-3) / 1e9)
    }

    /// GPU cosine with the corpus resident: (kernel-only ms, resident-call ms, scores of the last call).
    pub fn cosine_ms(
        backend: &GpuBackend,
        queries: &[f32],
        corpus: &[f32],
        dim: usize,
        iters: usize,
    ) -> Result<(f64, f64, Vec<f32>), String> {
        use recall_gpu_kernels::SimMetric::Cosine;
        let (g, k) = backend.parts();
        let (nq, n) = (queries.len() / dim, corpus.len() / dim);
        let c = g.upload(corpus).map_err(err)?;
        let mut cn = g.alloc_zeros::<f32>(n).map_err(err)?;
        k.row_norms_f32(g, &c, n, dim, &mut cn).map_err(err)?;
        let q = g.upload(queries).map_err(err)?;
        let mut qn = g.alloc_zeros::<f32>(nq).map_err(err)?;
        k.row_norms_f32(g, &q, nq, dim, &mut qn).map_err(err)?;
        let mut out = g.alloc_zeros::<f32>(nq * n).map_err(err)?;
        // Warm-up.
        k.similarity(
            g,
            Cosine,
            &q,
            Some(&qn),
            &c,
            Some(&cn),
            nq,
            n,
            dim,
            &mut out,
        )
        .map_err(err)?;
        g.synchronize().map_err(err)?;
        let mut kernel = Vec::new();
        for _ in 0..iters.max(1) {
            let t = Instant::now();
            k.similarity(
                g,
                Cosine,
                &q,
                Some(&qn),
                &c,
                Some(&cn),
                nq,
                n,
                dim,
                &mut out,
            )
            .map_err(err)?;
            g.synchronize().map_err(err)?;
            kernel.push(t.elapsed().as_secs_f64() * 1e3);
        }
        let mut host = vec![0.0f32; nq * n];
        let mut call = Vec::new();
        for _ in 0..iters.max(1) {
            let t = Instant::now();
            let q = g.upload(queries).map_err(err)?;
            let mut qn = g.alloc_zeros::<f32>(nq).map_err(err)?;
            k.row_norms_f32(g, &q, nq, dim, &mut qn).map_err(err)?;
            k.similarity(
                g,
                Cosine,
                &q,
                Some(&qn),
                &c,
                Some(&cn),
                nq,
                n,
                dim,
                &mut out,
            )
            .map_err(err)?;
            g.download_into(&out, &mut host).map_err(err)?;
            call.push(t.elapsed().as_secs_f64() * 1e3);
        }
        Ok((median(kernel), median(call), host))
    }
}

#[cfg(feature = "gpu")]
mod gpu_knn {
    use super::*;
    use crate::gpu_backend::GpuBackend;
    use recall_cpu_simd::{Metric, TopK};
    use recall_gpu_kernels::{GemmKernel, OneQuery, Segments, SimMetric};

    /// Out-of-core knn: host-to-device bandwidth from pinned memory (median GB/s of 1 GiB copies), and the
    /// median milliseconds of streamed knn over `corpus` in chunks of `chunk_rows` rows, both through the
    /// handle (page-locked once, chunks DMA'd straight from it: `registered`, or staged if page-locking
    /// failed) and through the plain slice (copied through pinned staging buffers: `staged_ms`).
    pub fn stream_figures(
        backend: &GpuBackend,
        queries: &[f32],
        corpus: &crate::SharedCorpus,
        k: usize,
        chunk_rows: usize,
        iters: usize,
    ) -> Result<super::StreamFigures, String> {
        let err = |e: &dyn std::fmt::Display| e.to_string();
        let (g, _) = backend.parts();
        let dim = corpus.dim();
        let len = (1usize << 30) / 4;
        let pinned = g.alloc_pinned::<f32>(len).map_err(|x| err(&x))?;
        let mut dev = g.alloc_zeros::<f32>(len).map_err(|x| err(&x))?;
        let mut t = Vec::new();
        for _ in 0..iters.max(3) {
            g.synchronize().map_err(|x| err(&x))?;
            let s = Instant::now();
            g.upload_pinned(&pinned, &mut dev).map_err(|x| err(&x))?;
            g.synchronize().map_err(|x| err(&x))?;
            t.push(s.elapsed().as_secs_f64());
        }
        let h2d_gbps = (len * 4) as f64 / median(t) / 1e9;
        drop(dev);
        drop(pinned);
        let time = |run: &dyn Fn() -> Result<TopK, String>| -> Result<(f64, TopK), String> {
            let mut answer = run()?; // warm-up (the handle's first call page-locks it)
            let mut t = Vec::new();
            for _ in 0..iters.max(1) {
                let s = Instant::now();
                answer = run()?;
                t.push(s.elapsed().as_secs_f64() * 1e3);
            }
            Ok((median(t), answer))
        };
        let (handle_ms, answer) = time(&|| {
            backend
                .knn_streamed_shared(queries, corpus, Metric::Cosine, k, chunk_rows)
                .map_err(|x| err(&x))
        })?;
        let registered = corpus.host_registered() == Some(true);
        let (staged_ms, staged) = time(&|| {
            backend
                .knn_streamed(queries, corpus.data(), dim, Metric::Cosine, k, chunk_rows)
                .map_err(|x| err(&x))
        })?;
        let same = staged.ids == answer.ids
            && staged
                .scores
                .iter()
                .zip(&answer.scores)
                .all(|(x, y)| x.to_bits() == y.to_bits());
        if !same {
            return Err("the staged and the registered streamed paths disagree".into());
        }
        Ok(super::StreamFigures {
            h2d_gbps,
            handle_ms,
            registered,
            staged_ms,
            answer,
        })
    }

    /// Where the time of one small knn call goes: each step of the kernel-level path, timed alone with a
    /// stream synchronise after it (median over `iters`, in microseconds), with the corpus resident.
    pub fn knn_latency_parts(
        backend: &GpuBackend,
        query: &[f32],
        corpus: &[f32],
        dim: usize,
        k: usize,
        iters: usize,
    ) -> Result<Vec<(&'static str, f64)>, String> {
        let err = |e: &dyn std::fmt::Display| e.to_string();
        let (g, kern) = backend.parts();
        let n = corpus.len() / dim;
        let c = g.upload(corpus).map_err(|x| err(&x))?;
        let mut cn = g.alloc_zeros::<f32>(n).map_err(|x| err(&x))?;
        kern.row_norms_f32(g, &c, n, dim, &mut cn)
            .map_err(|x| err(&x))?;
        let mut q = g.alloc_zeros::<f32>(dim).map_err(|x| err(&x))?;
        let mut qn = g.alloc_zeros::<f32>(1).map_err(|x| err(&x))?;
        let mut scores = g.alloc_zeros::<f32>(n).map_err(|x| err(&x))?;
        let mut back = vec![0f32; 32.min(n)];
        g.synchronize().map_err(|x| err(&x))?;
        let mut parts = Vec::new();
        // Each step, then a synchronise inside the timing unless the step waits by itself (`sync == false`:
        // the synchronise comes after the clock stops).
        let mut time_as = |sync: bool,
                           name: &'static str,
                           f: &mut dyn FnMut() -> Result<(), String>|
         -> Result<(), String> {
            f()?;
            g.synchronize().map_err(|x| err(&x))?;
            let mut t = Vec::with_capacity(iters);
            for _ in 0..iters.max(1) {
                let s = Instant::now();
                f()?;
                if sync {
                    g.synchronize().map_err(|x| err(&x))?;
                }
                t.push(s.elapsed().as_secs_f64() * 1e6);
                if !sync {
                    g.synchronize().map_err(|x| err(&x))?;
                }
            }
            parts.push((name, median(t)));
            Ok(())
        };
        time_as(true, "stream synchronise (idle)", &mut || Ok(()))?;
        time_as(false, "stream query (idle)", &mut || {
            recall_gpu_sys::memory::stream_is_idle(g.stream())
                .map(|_| ())
                .map_err(|x| err(&x))
        })?;
        let mut words = g.alloc_mapped_readback::<u64>(64).map_err(|x| err(&x))?;
        let mut probe = |spin: bool| -> Result<(), String> {
            match kern.launch_floor_probe(g, &mut words, 20, spin) {
                Ok(true) => Ok(()),
                Ok(false) => Err("the probe kernel's values did not arrive".into()),
                Err(e) => Err(err(&e)),
            }
        };
        time_as(
            true,
            "tiny kernel writing 20 words of mapped memory, stream synchronise",
            &mut || probe(false),
        )?;
        time_as(
            false,
            "tiny kernel writing 20 words of mapped memory, host spins on the words",
            &mut || probe(true),
        )?;
        time_as(
            true,
            "query upload (pageable, into a reused buffer)",
            &mut || g.upload_into(query, &mut q).map_err(|x| err(&x)),
        )?;
        time_as(true, "query norm kernel", &mut || {
            kern.row_norms_f32(g, &q, 1, dim, &mut qn)
                .map_err(|x| err(&x))
        })?;
        time_as(true, "scan kernel (cosine, 1 query)", &mut || {
            kern.similarity(
                g,
                SimMetric::Cosine,
                &q,
                Some(&qn),
                &c,
                Some(&cn),
                1,
                n,
                dim,
                &mut scores,
            )
            .map_err(|x| err(&x))
        })?;
        time_as(true, "top-k select incl. its download", &mut || {
            kern.select_topk(
                g,
                &scores,
                None,
                Segments::Dense {
                    n_segments: 1,
                    seg_len: n,
                },
                k,
                true,
            )
            .map(|_| ())
            .map_err(|x| err(&x))
        })?;
        time_as(true, "download of 32 floats (pageable)", &mut || {
            g.download_prefix(&scores, &mut back).map_err(|x| err(&x))
        })?;
        let one = OneQuery {
            metric: SimMetric::Cosine,
            query,
            corpus: &c,
            corpus_norms: Some(&cn),
            n_rows: n,
            dim,
            k,
        };
        if kern.scan1_supported(n, dim, k) && k >= 1 {
            time_as(
                false,
                "scan1: query in, scan + top-k in one launch, result out (all of it)",
                &mut || kern.scan1_knn(g, &one).map(|_| ()).map_err(|x| err(&x)),
            )?;
        }
        let mut served = None;
        if kern.knn1_supported(n, dim, k) {
            time_as(
                false,
                "knn1: query in, scan + top-k in one launch, result out (all of it)",
                &mut || kern.knn1(g, &one).map(|_| ()).map_err(|x| err(&x)),
            )?;
            // The one-query server (`RECALL_KNN1_SERVE`), where the image has it and takes the shape (the
            // corpus is complete: synchronised above).
            let was = kern.set_knn1_serve(true);
            if kern.knn1_serves(n, dim, k) {
                time_as(
                    false,
                    "knn1 served: query into the resident server's mailbox, scan + top-k, result out (all of it)",
                    &mut || kern.knn1_resident(g, &one).map(|_| ()).map_err(|x| err(&x)),
                )?;
                served = kern
                    .knn1_serve_stats()
                    .map_err(|x| err(&x))?
                    .map(|st| (st, kern.knn1_serve_counts()));
            }
            kern.set_knn1_serve(was);
        }
        if let Some((st, (answered, failures))) = served {
            parts.push(("knn1 served: calls the servers answered", answered as f64));
            parts.push((
                "knn1 served: server failures (those calls launched)",
                f64::from(failures),
            ));
            parts.push((
                "knn1 served, device clock: query published -> block 0's part done (mean)",
                st.block0_us,
            ));
            parts.push((
                "knn1 served, device clock: mailbox complete -> query published (mean)",
                st.relay_us,
            ));
            if st.merged > 0 {
                parts.push((
                    "knn1 served, device clock: mailbox complete -> answer written (mean, merged on the device)",
                    st.answer_us,
                ));
            }
        }
        Ok(parts)
    }

    /// GPU knn with the corpus resident (what a corpus handle gives): queries in chunks whose score buffer
    /// stays under 1 GiB, as the backend does. Returns (similarity-only ms, knn ms, result of the last run).
    pub fn knn_ms(
        backend: &GpuBackend,
        queries: &[f32],
        corpus: &[f32],
        dim: usize,
        k: usize,
        iters: usize,
    ) -> Result<(f64, f64, TopK), String> {
        let err = |e: &dyn std::fmt::Display| e.to_string();
        let (g, kern) = backend.parts();
        let (nq, n) = (queries.len() / dim, corpus.len() / dim);
        let c = g.upload(corpus).map_err(|x| err(&x))?;
        let mut cn = g.alloc_zeros::<f32>(n).map_err(|x| err(&x))?;
        kern.row_norms_f32(g, &c, n, dim, &mut cn)
            .map_err(|x| err(&x))?;
        let chunk = recall_gpu_kernels::query_chunk(n, nq, 1 << 30);
        let mut scores = g.alloc_zeros::<f32>(chunk * n).map_err(|x| err(&x))?;
        let run = |with_topk: bool,
                   scores: &mut recall_gpu_sys::driver::CudaSlice<f32>|
         -> Result<TopK, String> {
            let mut result = TopK {
                k,
                ids: Vec::new(),
                scores: Vec::new(),
            };
            for q0 in (0..nq).step_by(chunk) {
                let m = chunk.min(nq - q0);
                let q = g
                    .upload(&queries[q0 * dim..(q0 + m) * dim])
                    .map_err(|x| err(&x))?;
                let mut qn = g.alloc_zeros::<f32>(m).map_err(|x| err(&x))?;
                kern.row_norms_f32(g, &q, m, dim, &mut qn)
                    .map_err(|x| err(&x))?;
                kern.similarity(
                    g,
                    SimMetric::Cosine,
                    &q,
                    Some(&qn),
                    &c,
                    Some(&cn),
                    m,
                    n,
                    dim,
                    scores,
                )
                .map_err(|x| err(&x))?;
                if with_topk {
                    let r = kern
                        .select_topk(
                            g,
                            scores,
                            None,
                            Segments::Dense {
                                n_segments: m,
                                seg_len: n,
                            },
                            k,
                            true,
                        )
                        .map_err(|x| err(&x))?;
                    result.ids.extend(r.ids);
                    result.scores.extend(r.scores);
                }
            }
            g.synchronize().map_err(|x| err(&x))?;
            Ok(result)
        };
        run(true, &mut scores)?; // warm-up
        let mut sim = Vec::new();
        let mut full = Vec::new();
        let mut last = None;
        for _ in 0..iters.max(1) {
            let t = Instant::now();
            run(false, &mut scores)?;
            sim.push(t.elapsed().as_secs_f64() * 1e3);
            let t = Instant::now();
            last = Some(run(true, &mut scores)?);
            full.push(t.elapsed().as_secs_f64() * 1e3);
        }
        let _ = Metric::Cosine;
        Ok((
            median(sim),
            median(full),
            last.unwrap_or(TopK {
                k,
                ids: vec![],
                scores: vec![],
            }),
        ))
    }

    /// The exact GEMM alone (cosine similarity, no top-k) with every GEMM kernel this device runs
    /// (`sm80_gemm_*` first where the image has it, then `gemm_*`), corpus, queries and norms resident, the
    /// queries in the chunks knn uses. The backend's default kernel is restored afterwards.
    pub fn gemm_ms(
        backend: &GpuBackend,
        queries: &[f32],
        corpus: &[f32],
        dim: usize,
        iters: usize,
    ) -> Result<Vec<super::GemmTiming>, String> {
        let err = |e: &dyn std::fmt::Display| e.to_string();
        let (g, kern) = backend.parts();
        let (nq, n) = (queries.len() / dim, corpus.len() / dim);
        let c = g.upload(corpus).map_err(|x| err(&x))?;
        let mut cn = g.alloc_zeros::<f32>(n).map_err(|x| err(&x))?;
        kern.row_norms_f32(g, &c, n, dim, &mut cn)
            .map_err(|x| err(&x))?;
        let chunk = recall_gpu_kernels::query_chunk(n, nq, 1 << 30);
        let mut chunks = Vec::new();
        for q0 in (0..nq).step_by(chunk) {
            let m = chunk.min(nq - q0);
            let q = g
                .upload(&queries[q0 * dim..(q0 + m) * dim])
                .map_err(|x| err(&x))?;
            let mut qn = g.alloc_zeros::<f32>(m).map_err(|x| err(&x))?;
            kern.row_norms_f32(g, &q, m, dim, &mut qn)
                .map_err(|x| err(&x))?;
            chunks.push((q, qn, m));
        }
        let mut scores = g.alloc_zeros::<f32>(chunk * n).map_err(|x| err(&x))?;
        let run = |scores: &mut recall_gpu_sys::driver::CudaSlice<f32>| -> Result<(), String> {
            for (q, qn, m) in &chunks {
                kern.similarity(
                    g,
                    SimMetric::Cosine,
                    q,
                    Some(qn),
                    &c,
                    Some(&cn),
                    *m,
                    n,
                    dim,
                    scores,
                )
                .map_err(|x| err(&x))?;
            }
            g.synchronize().map_err(|x| err(&x))
        };
        let default = kern.gemm_kernel(dim);
        let mut kernels = vec![default];
        if default != GemmKernel::Legacy {
            kernels.push(GemmKernel::Legacy);
        }
        let mut first_bits: Option<Vec<f32>> = None;
        let mut time_one = |kernel: GemmKernel| -> Result<super::GemmTiming, String> {
            kern.set_gemm_kernel(kernel);
            run(&mut scores)?; // warm-up
            let mut times = Vec::new();
            for _ in 0..iters.max(1) {
                let t = Instant::now();
                run(&mut scores)?;
                times.push(t.elapsed().as_secs_f64() * 1e3);
            }
            let ms = median(times);
            let bits = g.download(&scores).map_err(|x| err(&x))?;
            let same_bits = match &first_bits {
                None => true,
                Some(f) => f.iter().zip(&bits).all(|(a, b)| a.to_bits() == b.to_bits()),
            };
            if first_bits.is_none() {
                first_bits = Some(bits);
            }
            Ok(super::GemmTiming {
                kernel: kernel.prefix(),
                ms,
                tflops: 2.0 * (nq * n * dim) as f64 / (ms * 1e-3) / 1e12,
                same_bits,
            })
        };
        let result: Result<Vec<_>, String> = kernels.into_iter().map(&mut time_one).collect();
        kern.set_gemm_kernel(default);
        result
    }
}

/// One exact GEMM kernel's figures from `gemm_ms` (cosine similarity only, no top-k).
#[derive(Debug, Clone)]
pub struct GemmTiming {
    /// The kernel family (`sm80_gemm`, `gemm`).
    pub kernel: &'static str,
    /// Median milliseconds for all the queries (in the chunks knn uses), synchronised.
    pub ms: f64,
    /// `2 * queries * rows * dim` floating-point operations over `ms`, in TFLOP/s.
    pub tflops: f64,
    /// Whether its scores (the last chunk's, every bit) equal the first kernel's.
    pub same_bits: bool,
}

/// What `candidates_ms` measured (candidate scoring, cosine, corpus and its norms resident).
#[derive(Debug, Clone)]
pub struct CandidateFigures {
    /// The fused kernel (`sm80_cand_*`) with queries, ids and offsets already on the device: one launch and
    /// the `k` pairs per query back. `None` where the fused kernel does not run (image below sm_80, `dim`
    /// not a multiple of 4, `k` above its limit).
    pub fused_kernel_ms: Option<f64>,
    /// The fused path from host lists: ids checked and staged through page-locked memory, queries, ids and
    /// offsets uploaded, one launch, `k` pairs back (what the backend runs).
    pub fused_call_ms: Option<f64>,
    /// The separate path (every arch): ids uploaded and `gather_*` scores every pair into a buffer, then
    /// radix select over the ragged segments (queries and their norms resident).
    pub gather_select_ms: f64,
    /// The fused path's answer (or, where it does not run, the separate path's).
    pub answer: recall_cpu_simd::TopK,
    /// Whether the two paths gave the same lists (ids and score bits); `None` without the fused path.
    pub paths_agree: Option<bool>,
}

/// What `stream_figures` measured.
#[derive(Debug, Clone)]
pub struct StreamFigures {
    /// Host-to-device bandwidth from pinned memory, GB/s (1 GiB copies, median).
    pub h2d_gbps: f64,
    /// Median milliseconds of streamed knn through the corpus handle.
    pub handle_ms: f64,
    /// Whether the handle's path DMA'd from the page-locked corpus (else it fell back to staging).
    pub registered: bool,
    /// Median milliseconds of streamed knn through the plain slice (pinned staging buffers).
    pub staged_ms: f64,
    /// The handle path's answer (the staged path's is checked equal to it).
    pub answer: recall_cpu_simd::TopK,
}

#[cfg(feature = "gpu")]
mod gpu_cand {
    use super::*;
    use crate::gpu_backend::GpuBackend;
    use recall_cpu_simd::TopK;
    use recall_gpu_kernels::{Segments, SimMetric, TopKResult};

    fn err(e: impl std::fmt::Display) -> String {
        e.to_string()
    }

    fn topk(r: TopKResult) -> TopK {
        TopK {
            k: r.k,
            ids: r.ids,
            scores: r.scores,
        }
    }

    /// Candidate scoring (cosine) with the corpus and its norms resident, both GPU paths, median of `iters`
    /// runs after one warm-up each; every run ends with its answer on the host.
    #[allow(clippy::too_many_arguments)]
    pub fn candidates_ms(
        backend: &GpuBackend,
        queries: &[f32],
        corpus: &[f32],
        dim: usize,
        offsets: &[usize],
        ids: &[u32],
        k: usize,
        iters: usize,
    ) -> Result<CandidateFigures, String> {
        let (g, kern) = backend.parts();
        let (nq, n) = (queries.len() / dim, corpus.len() / dim);
        let offsets64: Vec<u64> = offsets.iter().map(|&o| o as u64).collect();
        let c = g.upload(corpus).map_err(err)?;
        let mut cn = g.alloc_zeros::<f32>(n).map_err(err)?;
        kern.row_norms_f32(g, &c, n, dim, &mut cn).map_err(err)?;
        let timed = |f: &mut dyn FnMut() -> Result<TopK, String>| -> Result<(f64, TopK), String> {
            let mut last = f()?; // warm-up
            let mut times = Vec::new();
            for _ in 0..iters.max(1) {
                let t = Instant::now();
                last = f()?;
                times.push(t.elapsed().as_secs_f64() * 1e3);
            }
            Ok((median(times), last))
        };
        // The separate path: queries and their norms uploaded once.
        let q = g.upload(queries).map_err(err)?;
        let mut qn = g.alloc_zeros::<f32>(nq).map_err(err)?;
        kern.row_norms_f32(g, &q, nq, dim, &mut qn).map_err(err)?;
        let mut scores = g.alloc_zeros::<f32>(ids.len().max(1)).map_err(err)?;
        let (gather_select_ms, separate) = timed(&mut || {
            let (ids_dev, offsets_dev) = kern
                .similarity_gather(
                    g,
                    SimMetric::Cosine,
                    &q,
                    Some(&qn),
                    &c,
                    Some(&cn),
                    nq,
                    n,
                    dim,
                    ids,
                    &offsets64,
                    &mut scores,
                )
                .map_err(err)?;
            let r = kern
                .select_topk(
                    g,
                    &scores,
                    Some(&ids_dev),
                    Segments::Ragged {
                        offsets: &offsets64,
                        offsets_dev: &offsets_dev,
                    },
                    k,
                    true,
                )
                .map_err(err)?;
            Ok(topk(r))
        })?;
        drop(scores);
        if !kern.cand_supported(dim, k) {
            return Ok(CandidateFigures {
                fused_kernel_ms: None,
                fused_call_ms: None,
                gather_select_ms,
                answer: separate,
                paths_agree: None,
            });
        }
        let (fused_call_ms, fused) = timed(&mut || {
            kern.score_candidates(
                g,
                SimMetric::Cosine,
                queries,
                &c,
                Some(&cn),
                n,
                dim,
                ids,
                &offsets64,
                k,
            )
            .map(topk)
            .map_err(err)
        })?;
        let batch = kern
            .candidate_batch(g, queries, dim, ids, &offsets64, n)
            .map_err(err)?;
        let (fused_kernel_ms, resident) = timed(&mut || {
            kern.score_candidate_batch(g, SimMetric::Cosine, &batch, &c, Some(&cn), n, k)
                .map(topk)
                .map_err(err)
        })?;
        let same = |a: &TopK, b: &TopK| {
            a.ids == b.ids
                && a.scores
                    .iter()
                    .zip(&b.scores)
                    .all(|(x, y)| x.to_bits() == y.to_bits())
        };
        Ok(CandidateFigures {
            fused_kernel_ms: Some(fused_kernel_ms),
            fused_call_ms: Some(fused_call_ms),
            gather_select_ms,
            paths_agree: Some(same(&fused, &separate) && same(&fused, &resident)),
            answer: fused,
        })
    }
}

#[cfg(feature = "gpu")]
mod gpu_fast {
    use super::*;
    use crate::gpu_backend::GpuBackend;
    use recall_gpu_kernels::{HalfKind, HalfSource, Segments, SimMetric, TopKResult, half_ld};

    /// See [`FastKnnFigures`]; `bf16` picks the format.
    pub fn fast_knn_ms(
        backend: &GpuBackend,
        queries: &[f32],
        corpus: &[f32],
        dim: usize,
        k: usize,
        iters: usize,
        bf16: bool,
    ) -> Result<FastKnnFigures, String> {
        let err = |e: &dyn std::fmt::Display| e.to_string();
        let (g, kern) = backend.parts();
        if !kern.fast_mode_available() {
            return Err("fast mode needs an sm_80+ image".into());
        }
        let kind = if bf16 { HalfKind::Bf16 } else { HalfKind::F16 };
        let (nq, n) = (queries.len() / dim, corpus.len() / dim);
        let ld = half_ld(dim);
        let half = |x: &[f32], rows: usize| -> Result<_, String> {
            let d = g.upload(x).map_err(|e| err(&e))?;
            let mut norms = g.alloc_zeros::<f32>(rows).map_err(|e| err(&e))?;
            kern.row_norms_f32(g, &d, rows, dim, &mut norms)
                .map_err(|e| err(&e))?;
            let mut h = g.alloc_zeros::<u16>(rows * ld).map_err(|e| err(&e))?;
            kern.to_half_rows(g, HalfSource::F32(&d), kind, rows, dim, &mut h)
                .map_err(|e| err(&e))?;
            Ok((h, norms))
        };
        let (ch, cn) = half(corpus, n)?;
        let (mut qh, mut qn) = half(queries, nq)?;
        // Query chunks (multiples of 128) whose scores stay under 1 GiB, as the unfused path.
        let chunk = (((1usize << 30) / (n * 4)) / 128 * 128).clamp(1, nq);
        let mut scores = g.alloc_zeros::<f32>(chunk * n).map_err(|e| err(&e))?;
        let mut chunks = Vec::new();
        for q0 in (0..nq).step_by(chunk) {
            let m = chunk.min(nq - q0);
            let (cq, cqn) = half(&queries[q0 * dim..(q0 + m) * dim], m)?;
            chunks.push((cq, cqn, m));
        }
        let gemm = |select: bool,
                    scores: &mut recall_gpu_sys::driver::CudaSlice<f32>|
         -> Result<TopKResult, String> {
            let mut all = TopKResult {
                k,
                ids: Vec::new(),
                scores: Vec::new(),
            };
            for (cq, cqn, m) in &chunks {
                let m = *m;
                kern.similarity_fast(
                    g,
                    kind,
                    SimMetric::Cosine,
                    cq,
                    Some(cqn),
                    &ch,
                    Some(&cn),
                    m,
                    n,
                    ld,
                    scores,
                )
                .map_err(|e| err(&e))?;
                if select {
                    let r = kern
                        .select_topk(
                            g,
                            scores,
                            None,
                            Segments::Dense {
                                n_segments: m,
                                seg_len: n,
                            },
                            k,
                            true,
                        )
                        .map_err(|e| err(&e))?;
                    all.ids.extend(r.ids);
                    all.scores.extend(r.scores);
                }
            }
            g.synchronize().map_err(|e| err(&e))?;
            Ok(all)
        };
        let fused = || -> Result<TopKResult, String> {
            kern.knn_fast(
                g,
                kind,
                SimMetric::Cosine,
                &qh,
                Some(&qn),
                &ch,
                Some(&cn),
                nq,
                n,
                ld,
                k,
            )
            .map_err(|e| err(&e))
        };
        let runs_fused = kern.knn_fast_supported(n, k);
        let separate = gemm(true, &mut scores)?; // warm-up
        let same = if runs_fused {
            let f = fused()?;
            Some(
                f.ids == separate.ids
                    && f.scores
                        .iter()
                        .zip(&separate.scores)
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
            )
        } else {
            None
        };
        let (mut t_fused, mut t_gemm, mut t_sel) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..iters.max(1) {
            if runs_fused {
                let t = Instant::now();
                fused()?;
                t_fused.push(t.elapsed().as_secs_f64() * 1e3);
            }
            let t = Instant::now();
            gemm(false, &mut scores)?;
            t_gemm.push(t.elapsed().as_secs_f64() * 1e3);
            let t = Instant::now();
            gemm(true, &mut scores)?;
            t_sel.push(t.elapsed().as_secs_f64() * 1e3);
        }
        // The fast path's steps before the kernel, each timed alone (as `knn_fused_fast` runs them).
        let mut q = g.alloc_zeros::<f32>(queries.len()).map_err(|e| err(&e))?;
        let mut staging = g.alloc_pinned::<f32>(queries.len()).map_err(|e| err(&e))?;
        let (mut t_check, mut t_up, mut t_half) = (Vec::new(), Vec::new(), Vec::new());
        let mut t_staged = Vec::new();
        for _ in 0..iters.max(1) {
            let t = Instant::now();
            let ok = recall_cpu_simd::check_finite("queries", queries).is_ok()
                && (bf16 || recall_cpu_simd::max_abs(queries) <= 65_504.0);
            t_check.push(t.elapsed().as_secs_f64() * 1e3);
            if !ok {
                return Err("the bench's queries are not finite or outside f16's range".into());
            }
            let t = Instant::now();
            g.upload_into(queries, &mut q).map_err(|e| err(&e))?;
            g.synchronize().map_err(|e| err(&e))?;
            t_up.push(t.elapsed().as_secs_f64() * 1e3);
            // The alternative: a host copy into page-locked memory in parallel pieces, then one DMA copy.
            let t = Instant::now();
            {
                use rayon::prelude::*;
                let dst = g.pinned_write(&mut staging).map_err(|e| err(&e))?;
                dst.par_chunks_mut(1 << 16)
                    .zip(queries.par_chunks(1 << 16))
                    .for_each(|(d, s)| d.copy_from_slice(s));
            }
            g.upload_pinned(&staging, &mut q).map_err(|e| err(&e))?;
            g.synchronize().map_err(|e| err(&e))?;
            t_staged.push(t.elapsed().as_secs_f64() * 1e3);
            let t = Instant::now();
            kern.row_norms_f32(g, &q, nq, dim, &mut qn)
                .map_err(|e| err(&e))?;
            kern.to_half_rows(g, HalfSource::F32(&q), kind, nq, dim, &mut qh)
                .map_err(|e| err(&e))?;
            g.synchronize().map_err(|e| err(&e))?;
            t_half.push(t.elapsed().as_secs_f64() * 1e3);
        }
        Ok(FastKnnFigures {
            fused_ms: runs_fused.then(|| median(t_fused)),
            fused_family: kern.knn_fast_family(nq, n, k),
            gemm_ms: median(t_gemm),
            gemm_select_ms: median(t_sel),
            same,
            query_parts: vec![
                (
                    "host checks of the queries (finite; f16: range)",
                    median(t_check),
                ),
                (
                    "query upload from pageable memory (cuMemcpyHtoD)",
                    median(t_up),
                ),
                (
                    "(alternative) query upload: parallel host copy into pinned memory + cuMemcpyHtoDAsync",
                    median(t_staged),
                ),
                ("query norms + 16-bit rows on the device", median(t_half)),
            ],
        })
    }
}

#[cfg(feature = "gpu")]
pub use gpu_fast::fast_knn_ms;

#[cfg(feature = "gpu")]
pub use gpu_cand::candidates_ms;

#[cfg(feature = "gpu")]
pub use gpu::{copy_gbps, cosine_ms, one_query_readback, scan1_mode};
#[cfg(feature = "gpu")]
pub use gpu_knn::{gemm_ms, knn_latency_parts, knn_ms, stream_figures};

#[cfg(not(feature = "gpu"))]
mod no_gpu {
    use crate::gpu_backend::GpuBackend;

    /// Without GPU support there is nothing to measure.
    pub fn fast_knn_ms(
        _: &GpuBackend,
        _: &[f32],
        _: &[f32],
        _: usize,
        _: usize,
        _: usize,
        _: bool,
    ) -> Result<super::FastKnnFigures, String> {
        Err("this build has no GPU support".into())
    }

    /// Without GPU support no scan runs.
    pub fn scan1_mode(_: &GpuBackend) -> &'static str {
        "none"
    }

    /// Without GPU support nothing comes back.
    pub fn one_query_readback() -> &'static str {
        "none"
    }

    /// Without GPU support there is nothing to measure.
    pub fn copy_gbps(_: &GpuBackend, _: usize, _: usize) -> Result<f64, String> {
        Err("this build has no GPU support".into())
    }

    /// Without GPU support there is nothing to measure.
    pub fn knn_latency_parts(
        _: &GpuBackend,
        _: &[f32],
        _: &[f32],
        _: usize,
        _: usize,
        _: usize,
    ) -> Result<Vec<(&'static str, f64)>, String> {
        Err("this build has no GPU support".into())
    }

    /// Without GPU support there is nothing to measure.
    pub fn stream_figures(
        _: &GpuBackend,
        _: &[f32],
        _: &crate::SharedCorpus,
        _: usize,
        _: usize,
        _: usize,
    ) -> Result<super::StreamFigures, String> {
        Err("this build has no GPU support".into())
    }

    /// Without GPU support there is nothing to measure.
    #[allow(clippy::too_many_arguments)]
    pub fn candidates_ms(
        _: &GpuBackend,
        _: &[f32],
        _: &[f32],
        _: usize,
        _: &[usize],
        _: &[u32],
        _: usize,
        _: usize,
    ) -> Result<super::CandidateFigures, String> {
        Err("this build has no GPU support".into())
    }

    /// Without GPU support there is nothing to measure.
    pub fn gemm_ms(
        _: &GpuBackend,
        _: &[f32],
        _: &[f32],
        _: usize,
        _: usize,
    ) -> Result<Vec<super::GemmTiming>, String> {
        Err("this build has no GPU support".into())
    }

    /// Without GPU support there is nothing to measure.
    pub fn knn_ms(
        _: &GpuBackend,
        _: &[f32],
        _: &[f32],
        _: usize,
        _: usize,
        _: usize,
    ) -> Result<(f64, f64, recall_cpu_simd::TopK), String> {
        Err("this build has no GPU support".into())
    }

    /// Without GPU support there is nothing to measure.
    pub fn cosine_ms(
        _: &GpuBackend,
        _: &[f32],
        _: &[f32],
        _: usize,
        _: usize,
    ) -> Result<(f64, f64, Vec<f32>), String> {
        Err("this build has no GPU support".into())
    }
}

#[cfg(not(feature = "gpu"))]
pub use no_gpu::{
    candidates_ms, copy_gbps, cosine_ms, fast_knn_ms, gemm_ms, knn_latency_parts, knn_ms,
    one_query_readback, scan1_mode, stream_figures,
};

#[cfg(feature = "gpu")]
mod gpu_graph {
    use super::*;
    use crate::gpu_backend::GpuBackend;
    use recall_cpu_simd::{SpreadGraph, kmeans_seed_indices};
    use recall_gpu_kernels::{Frontier, PageableUpload, Seeds};

    fn err(e: impl std::fmt::Display) -> String {
        e.to_string()
    }

    /// Spreading with the graph resident, as `spread_in` runs it: median ms of (one hop: seed upload, the hop,
    /// wait; `hops` hops + top-k + activation download; the same with every hop dense; the same from the seed
    /// list of `seeds`' nonzero values, as `spread_from` runs it).
    #[allow(clippy::too_many_arguments)]
    pub fn spread_ms(
        backend: &GpuBackend,
        graph: &SpreadGraph,
        seeds: &[f32],
        decay: f32,
        threshold: f32,
        hops: usize,
        k: usize,
        iters: usize,
    ) -> Result<SpreadTimes, String> {
        let (g, kern) = backend.parts();
        let (upload_pageable_ms, upload_staged_ms, upload_ring) =
            graph_upload_ms(backend, graph, iters)?;
        let dev = crate::gpu_shared_graph::upload(g, kern, graph, &mut backend.graph_staging())
            .map_err(err)?;
        let list: Vec<(u32, f32)> = seeds
            .iter()
            .enumerate()
            .filter(|p| *p.1 != 0.0)
            .map(|(v, &x)| (v as u32, x))
            .collect();
        let run_seeds = |seeds: Seeds<'_>,
                         h: usize,
                         top: bool,
                         download: bool,
                         frontier: Frontier|
         -> Result<(), String> {
            kern.spread_graph(
                g,
                &dev,
                seeds,
                decay,
                threshold,
                h,
                top.then_some(k),
                download,
                frontier,
            )
            .map_err(err)?;
            Ok(())
        };
        let run_list = || run_seeds(Seeds::List(&list), hops, true, true, Frontier::Auto);
        let run_parts = |h: usize, top: bool, download: bool, frontier: Frontier| {
            run_seeds(Seeds::Dense(seeds), h, top, download, frontier)
        };
        let run = |h: usize, with_top: bool, frontier: Frontier| {
            run_parts(h, with_top, with_top, frontier)
        };
        run(hops, true, Frontier::Auto)?;
        run(hops, true, Frontier::Dense)?;
        run_list()?;
        let mut one = Vec::new();
        let mut from_list = Vec::new();
        let mut full = Vec::new();
        let mut dense = Vec::new();
        let mut dense1 = Vec::new();
        let mut dense5 = Vec::new();
        let (mut top_only, mut download_only, mut both) = (Vec::new(), Vec::new(), Vec::new());
        let mut scan = Vec::new();
        let mut ids = Vec::new();
        for _ in 0..iters.max(1) {
            let t = Instant::now();
            run(1, false, Frontier::Auto)?;
            one.push(t.elapsed().as_secs_f64() * 1e3);
            let t = Instant::now();
            run(hops, true, Frontier::Auto)?;
            full.push(t.elapsed().as_secs_f64() * 1e3);
            let t = Instant::now();
            run(hops, true, Frontier::Dense)?;
            dense.push(t.elapsed().as_secs_f64() * 1e3);
            let t = Instant::now();
            run_list()?;
            from_list.push(t.elapsed().as_secs_f64() * 1e3);
            let t = Instant::now();
            run(1, false, Frontier::Dense)?;
            dense1.push(t.elapsed().as_secs_f64() * 1e3);
            let t = Instant::now();
            run(5, false, Frontier::Dense)?;
            dense5.push(t.elapsed().as_secs_f64() * 1e3);
            let t = Instant::now();
            run_parts(1, true, false, Frontier::Dense)?;
            top_only.push(t.elapsed().as_secs_f64() * 1e3);
            let t = Instant::now();
            run_parts(1, false, true, Frontier::Dense)?;
            download_only.push(t.elapsed().as_secs_f64() * 1e3);
            let t = Instant::now();
            run_parts(1, true, true, Frontier::Dense)?;
            both.push(t.elapsed().as_secs_f64() * 1e3);
            let t = Instant::now();
            ids.clear();
            recall_cpu_simd::nonzero_positions(seeds, 0, &mut ids).map_err(err)?;
            scan.push(t.elapsed().as_secs_f64() * 1e3);
        }
        let dense1 = median(dense1);
        Ok(SpreadTimes {
            one_hop_ms: median(one),
            full_ms: median(full),
            full_dense_ms: median(dense),
            full_list_ms: median(from_list),
            dense_hop_ms: (median(dense5) - dense1) / 4.0,
            dense1_ms: dense1,
            top_ms: median(top_only) - dense1,
            download_ms: median(download_only) - dense1,
            top_download_ms: median(both) - dense1,
            seed_scan_ms: median(scan),
            upload_pageable_ms,
            upload_staged_ms,
            upload_ring,
        })
    }

    /// The graph's upload as a plain `spread` makes it on every call (a stream of its own, the device layout on the
    /// host, the copies, the wait): median ms with every array pageable, and with the backend's own upload (arrays
    /// from `STAGED_UPLOAD_MIN_BYTES` up through the staging ring once it is made); whether the ring was there.
    /// One untimed call of each first (the backend's may make the ring), then at most 5 of each, in turn.
    fn graph_upload_ms(
        backend: &GpuBackend,
        graph: &SpreadGraph,
        iters: usize,
    ) -> Result<(f64, f64, bool), String> {
        let (g, kern) = backend.parts();
        let once = |staged: bool| -> Result<f64, String> {
            let t = Instant::now();
            let dev = if staged {
                crate::gpu_shared_graph::upload(g, kern, graph, &mut backend.graph_staging())
            } else {
                crate::gpu_shared_graph::upload(g, kern, graph, &mut PageableUpload)
            }
            .map_err(err)?;
            let ms = t.elapsed().as_secs_f64() * 1e3;
            drop(dev);
            Ok(ms)
        };
        once(false)?;
        once(true)?;
        let (mut pageable, mut staged) = (Vec::new(), Vec::new());
        for _ in 0..iters.clamp(1, 5) {
            pageable.push(once(false)?);
            staged.push(once(true)?);
        }
        let ring = backend.memory().pinned_pool().stats().in_use_bytes > 0;
        Ok((median(pageable), median(staged), ring))
    }

    /// One k-means iteration with the points resident (assignment, inertia, member sort on the host,
    /// update): median ms, and its parts each alone (the assignment with each GEMM kernel).
    pub fn kmeans_iter_ms(
        backend: &GpuBackend,
        points: &[f32],
        dim: usize,
        k: usize,
        iters: usize,
    ) -> Result<(f64, Parts), String> {
        let (g, kern) = backend.parts();
        let n = points.len() / dim;
        let mut init = Vec::with_capacity(k * dim);
        for p in kmeans_seed_indices(n, k, 7).map_err(err)? {
            init.extend_from_slice(&points[p as usize * dim..(p as usize + 1) * dim]);
        }
        let pts = g.upload(points).map_err(err)?;
        let mut centroids = g.upload(&init).map_err(err)?;
        let mut keys = g.alloc_zeros::<u64>(n).map_err(err)?;
        let mut assignments = vec![0u32; n];
        let mut scratch = recall_gpu_kernels::KMeansScratch::default();
        let mut one = || -> Result<(), String> {
            kern.kmeans_iteration(
                g,
                &pts,
                n,
                dim,
                &mut centroids,
                k,
                &mut keys,
                &mut assignments,
                &mut scratch,
            )
            .map_err(err)?;
            g.synchronize().map_err(err)
        };
        one()?;
        let mut times = Vec::new();
        for _ in 0..iters.max(1) {
            let t = Instant::now();
            one()?;
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
        let iter_ms = median(times);
        // The parts, each alone.
        let timed = |f: &mut dyn FnMut() -> Result<(), String>| -> Result<f64, String> {
            f()?;
            let mut times = Vec::new();
            for _ in 0..iters.max(1) {
                let t = Instant::now();
                f()?;
                g.synchronize().map_err(err)?;
                times.push(t.elapsed().as_secs_f64() * 1e3);
            }
            Ok(median(times))
        };
        let mut parts = Vec::new();
        let default = kern.gemm_kernel(dim);
        for (kernel, what) in [
            (
                recall_gpu_kernels::GemmKernel::Sm80,
                "assignment alone: `sm80_gemm_l2_argmin`",
            ),
            (
                recall_gpu_kernels::GemmKernel::Legacy,
                "assignment alone: `gemm_l2_argmin`",
            ),
        ] {
            if kernel == recall_gpu_kernels::GemmKernel::Sm80 && default != kernel {
                continue; // not loaded or not for this dim
            }
            kern.set_gemm_kernel(kernel);
            let ms = timed(&mut || {
                kern.kmeans_assign(g, &pts, n, dim, &centroids, k, &mut keys)
                    .map_err(err)
            });
            kern.set_gemm_kernel(default);
            parts.push((what, ms?));
        }
        parts.push((
            "inertia alone (kernel + block sums down)",
            timed(&mut || kern.kmeans_inertia(g, &keys, n).map(|_| ()).map_err(err))?,
        ));
        let mut host_keys = vec![0u64; n];
        parts.push((
            "keys download alone (8 bytes a point, pageable)",
            timed(&mut || g.download_prefix(&keys, &mut host_keys).map_err(err))?,
        ));
        let (mut members, mut offsets) = (Vec::new(), Vec::new());
        recall_gpu_kernels::group_by_cluster(
            &host_keys,
            k,
            &mut assignments,
            &mut offsets,
            &mut members,
        )
        .map_err(|c| format!("the device assigned a point to cluster {c} of {k}"))?;
        parts.push((
            "centroid update alone (members and offsets up, kernel)",
            timed(&mut || {
                kern.kmeans_update(g, &pts, n, dim, &members, &offsets, &mut centroids)
                    .map_err(err)
            })?,
        ));
        Ok((iter_ms, parts))
    }
}

#[cfg(feature = "gpu")]
pub use gpu_graph::{kmeans_iter_ms, spread_ms};

#[cfg(not(feature = "gpu"))]
mod no_gpu_graph {
    use crate::gpu_backend::GpuBackend;

    /// Without GPU support there is nothing to measure.
    #[allow(clippy::too_many_arguments)]
    pub fn spread_ms(
        _: &GpuBackend,
        _: &recall_cpu_simd::SpreadGraph,
        _: &[f32],
        _: f32,
        _: f32,
        _: usize,
        _: usize,
        _: usize,
    ) -> Result<super::SpreadTimes, String> {
        Err("this build has no GPU support".into())
    }

    /// Without GPU support there is nothing to measure.
    pub fn kmeans_iter_ms(
        _: &GpuBackend,
        _: &[f32],
        _: usize,
        _: usize,
        _: usize,
    ) -> Result<(f64, super::Parts), String> {
        Err("this build has no GPU support".into())
    }
}

#[cfg(not(feature = "gpu"))]
pub use no_gpu_graph::{kmeans_iter_ms, spread_ms};

/// Median times of `spread_ms`, in ms.
#[derive(Debug, Clone, Copy)]
pub struct SpreadTimes {
    /// One hop from the seeds (auto frontier), no top-k, no download: the call as a user makes it.
    pub one_hop_ms: f64,
    /// All hops (auto frontier), top-k and the activation download.
    pub full_ms: f64,
    /// The same with every hop dense.
    pub full_dense_ms: f64,
    /// `full_ms` from the seed list of the nonzero seeds (ascending: as `spread_from` hands it to the launcher),
    /// so no dense seed vector is scanned.
    pub full_list_ms: f64,
    /// One dense hop on the device: (5 dense hops - 1 dense hop) / 4, no top-k, no download; the device-side
    /// cost to set next to one SpMV.
    pub dense_hop_ms: f64,
    /// One dense hop from the seeds, no top-k, no download: seeds in, the hop, the wait.
    pub dense1_ms: f64,
    /// What the top-k adds to `dense1_ms`.
    pub top_ms: f64,
    /// What the activation download adds to `dense1_ms`.
    pub download_ms: f64,
    /// What the top-k and the download together add to `dense1_ms` (they overlap: the download runs on a
    /// second stream while the selection runs, and the host copies chunks meanwhile).
    pub top_download_ms: f64,
    /// The host's scan of the dense seed vector for its nonzero values (part of `dense1_ms`, before any
    /// hop is queued; the device zeroes its buffers meanwhile).
    pub seed_scan_ms: f64,
    /// The graph's upload (what a plain `spread` does before its hops; a handle's first call too), every array
    /// through one pageable copy.
    pub upload_pageable_ms: f64,
    /// The same upload as the GPU backend makes it: arrays from `STAGED_UPLOAD_MIN_BYTES` up through the pinned
    /// staging ring, when [`SpreadTimes::upload_ring`].
    pub upload_staged_ms: f64,
    /// Whether the backend held its staging ring after the staged uploads (else they were pageable too: the
    /// large copies had not repaid it yet, `STAGING_PAYBACK`, or no pinned memory could be had).
    pub upload_ring: bool,
}

/// GPU clip-and-noise with the data resident: median ms with the one-pass kernel (`fused`, where it runs) or the
/// two kernels (row norms, `clip_noise`), and the kernels that ran.
#[cfg(feature = "gpu")]
pub fn noise_ms(
    backend: &crate::gpu_backend::GpuBackend,
    x: &[f32],
    dim: usize,
    iters: usize,
    fused: bool,
) -> Result<(f64, &'static str), String> {
    let k = backend.parts().1;
    let before = k.set_clip_noise_fused(fused);
    let kernels = k.clip_noise_kernels(dim);
    let r = noise_ms_now(backend, x, dim, iters);
    k.set_clip_noise_fused(before);
    Ok((r?, kernels))
}

#[cfg(feature = "gpu")]
fn noise_ms_now(
    backend: &crate::gpu_backend::GpuBackend,
    x: &[f32],
    dim: usize,
    iters: usize,
) -> Result<f64, String> {
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let (g, k) = backend.parts();
    let xs = g.upload(x).map_err(|e| err(&e))?;
    let mut out = g.alloc_zeros::<f32>(x.len()).map_err(|e| err(&e))?;
    let n = x.len() / dim;
    k.clip_noise(g, &xs, n, dim, 1.0, 0.1, 1, &mut out)
        .map_err(|e| err(&e))?;
    g.synchronize().map_err(|e| err(&e))?;
    let mut times = Vec::new();
    for _ in 0..iters.max(1) {
        let t = Instant::now();
        k.clip_noise(g, &xs, n, dim, 1.0, 0.1, 1, &mut out)
            .map_err(|e| err(&e))?;
        g.synchronize().map_err(|e| err(&e))?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    Ok(median(times))
}

/// Without GPU support there is nothing to measure.
#[cfg(not(feature = "gpu"))]
pub fn noise_ms(
    _: &crate::gpu_backend::GpuBackend,
    _: &[f32],
    _: usize,
    _: usize,
    _: bool,
) -> Result<(f64, &'static str), String> {
    Err("this build has no GPU support".into())
}

/// Host-to-device copy of `bytes` (an ordinary host buffer, as the backend's uploads use): median GB/s.
/// The ceiling of a call whose inputs are uploaded with it.
#[cfg(feature = "gpu")]
pub fn upload_gbps(
    backend: &crate::gpu_backend::GpuBackend,
    bytes: usize,
    iters: usize,
) -> Result<f64, String> {
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let (g, _) = backend.parts();
    let host = vec![0.5f32; (bytes / 4).max(1)];
    let first = g.upload(&host).map_err(|e| err(&e))?;
    drop(first);
    g.synchronize().map_err(|e| err(&e))?;
    let mut times = Vec::new();
    for _ in 0..iters.max(1) {
        let t = Instant::now();
        let dev = g.upload(&host).map_err(|e| err(&e))?;
        g.synchronize().map_err(|e| err(&e))?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
        drop(dev);
    }
    Ok((host.len() * 4) as f64 / (median(times) * 1e-3) / 1e9)
}

/// Without GPU support there is nothing to measure.
#[cfg(not(feature = "gpu"))]
pub fn upload_gbps(_: &crate::gpu_backend::GpuBackend, _: usize, _: usize) -> Result<f64, String> {
    Err("this build has no GPU support".into())
}

/// Host memory bandwidth measured the simple way, all cores (rayon's pool): the ceiling of the CPU's
/// streaming ops.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HostBandwidth {
    /// A parallel read (an integer sum of the bits) of the buffer, GB/s of bytes read.
    pub read_gbps: f64,
    /// A parallel copy, GB/s of bytes read plus bytes written.
    pub copy_gbps: f64,
    /// Buffer size in bytes.
    pub bytes: usize,
}

/// Measure [`HostBandwidth`] over a buffer of `mib` MiB (the best of `iters` passes each).
pub fn host_bandwidth(mib: usize, iters: usize) -> HostBandwidth {
    use rayon::prelude::*;
    let len = (mib.max(1) << 20) / 4;
    let src: Vec<f32> = (0..len).map(|i| (i % 1021) as f32).collect();
    let mut dst = vec![0.0f32; len];
    const CHUNK: usize = 1 << 18;
    let mut read = f64::MAX;
    let mut copy = f64::MAX;
    for _ in 0..iters.max(1) {
        let t = Instant::now();
        let sum = src
            .par_chunks(CHUNK)
            .map(|c| c.iter().fold(0u32, |a, v| a.wrapping_add(v.to_bits())))
            .reduce(|| 0, u32::wrapping_add);
        read = read.min(t.elapsed().as_secs_f64());
        std::hint::black_box(sum);
        let t = Instant::now();
        dst.par_chunks_mut(CHUNK)
            .zip(src.par_chunks(CHUNK))
            .for_each(|(d, s)| d.copy_from_slice(s));
        copy = copy.min(t.elapsed().as_secs_f64());
        std::hint::black_box(&dst);
    }
    let bytes = len * 4;
    HostBandwidth {
        read_gbps: bytes as f64 / read / 1e9,
        copy_gbps: 2.0 * bytes as f64 / copy / 1e9,
        bytes,
    }
}

/// Bytes one CPU spreading call moves when every hop is a pull over all targets
/// (`recall_cpu_simd::SpreadMode::Pull`), counted from the code: per hop the in-edge offsets
/// (8 B a target), sources and weights (4 + 4 B an edge), the gathered source activation (4 B an edge),
/// the new activation written (4 B a target) and the total read and written (8 B a target); once, the
/// seeds read and the total, previous and next buffers written (16 B a node) and the initial and final
/// scans of the activation (8 B a node). Reads of out-edge offsets for active targets are not counted
/// (so the figure is a lower bound).
pub fn spread_pull_bytes(n_nodes: usize, n_edges: usize, hops: usize) -> u64 {
    let (n, e) = (n_nodes as u64, n_edges as u64);
    let per_hop = 8 * (n + 1) + 12 * e + 4 * n + 8 * n;
    hops as u64 * per_hop + 16 * n + 8 * n
}

/// CPU spreading against the host's memory bandwidth.
#[derive(Debug, Clone, PartialEq)]
pub struct CpuSpreadFigures {
    pub n_nodes: usize,
    pub n_edges: usize,
    pub hops: usize,
    pub threads: usize,
    pub simd: String,
    pub bandwidth: HostBandwidth,
    /// Every hop a full pull (streams the whole transposed graph): median ms.
    pub pull_ms: f64,
    /// [`spread_pull_bytes`] for this graph.
    pub pull_bytes: u64,
    /// The op as it runs (`Auto`: sparse hops pushed): median ms.
    pub auto_ms: f64,
    /// One hop, every node seeded (one full pull): median ms.
    pub one_hop_ms: f64,
    /// Whether `Pull` and `Auto` gave the same bits.
    pub same_bits: bool,
}

impl CpuSpreadFigures {
    /// Achieved GB/s of the all-pull run.
    pub fn pull_gbps(&self) -> f64 {
        self.pull_bytes as f64 / (self.pull_ms * 1e-3) / 1e9
    }
    /// Achieved GB/s of the one-hop, all-seeded run.
    pub fn one_hop_gbps(&self) -> f64 {
        spread_pull_bytes(self.n_nodes, self.n_edges, 1) as f64 / (self.one_hop_ms * 1e-3) / 1e9
    }
}

/// Time CPU spreading over `graph` from `seeds` (median of `iters` calls each): all-pull, as it runs,
/// and one all-seeded hop; with the host bandwidth measured in the same process.
pub fn cpu_spread_figures(
    graph: &recall_cpu_simd::SpreadGraph,
    seeds: &[f32],
    params: &recall_cpu_simd::SpreadParams,
    iters: usize,
) -> Result<CpuSpreadFigures, String> {
    use recall_cpu_simd::{Cpu, SpreadMode, SpreadParams};
    let cpu = Cpu::new();
    let bandwidth = host_bandwidth(512, 5);
    let time = |seeds: &[f32], p: &SpreadParams, mode: SpreadMode| {
        let mut xs = Vec::new();
        let mut last = None;
        for _ in 0..iters.max(1) + 1 {
            let t = Instant::now();
            let r = cpu
                .spread_with_mode(graph, seeds, p, mode)
                .map_err(|e| e.to_string())?;
            xs.push(t.elapsed().as_secs_f64() * 1e3);
            last = Some(r);
        }
        xs.remove(0); // the warm-up call
        Ok::<_, String>((median(xs), last))
    };
    let (pull_ms, pull) = time(seeds, params, SpreadMode::Pull)?;
    let (auto_ms, auto) = time(seeds, params, SpreadMode::Auto)?;
    let all = vec![1.0f32; graph.n_nodes()];
    let one = SpreadParams {
        hops: 1,
        threshold: 0.0,
        ..*params
    };
    let (one_hop_ms, _) = time(&all, &one, SpreadMode::Pull)?;
    let same_bits = match (pull, auto) {
        (Some(a), Some(b)) => {
            a.top == b.top
                && a.activation
                    .iter()
                    .zip(&b.activation)
                    .all(|(x, y)| x.to_bits() == y.to_bits())
        }
        _ => false,
    };
    Ok(CpuSpreadFigures {
        n_nodes: graph.n_nodes(),
        n_edges: graph.n_edges(),
        hops: params.hops,
        threads: rayon::current_num_threads(),
        simd: format!("{:?}", cpu.level()),
        bandwidth,
        pull_ms,
        pull_bytes: spread_pull_bytes(graph.n_nodes(), graph.n_edges(), params.hops),
        auto_ms,
        one_hop_ms,
        same_bits,
    })
}
