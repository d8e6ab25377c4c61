//! CPU benchmarks, each next to a peer measured in the same run: simsimd for the distance loops (its own
//! top-k kept the simplest way, rayon across cores like ours), and the machine's memory bandwidth measured
//! here by a large parallel copy. Run: `cargo bench -p recall-benches --bench cpu`.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use rayon::prelude::*;
use recall_cpu_simd::{
    Corpus, Cpu, Metric, SimdLevel, SpreadGraph, SpreadParams, Vectors, available_levels,
    clip_and_noise, clip_and_noise_into, kmeans, knn, simd_level, spread,
};
use simsimd::SpatialSimilarity;
use std::hint::black_box;
use std::time::Duration;

const N: usize = 100_000;
const D: usize = 768;

fn lcg(len: usize, seed: u64) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..len)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// The peer's top-k: simsimd distance per (query, row), a small sorted list per query; rayon over row
/// chunks, rows outer and queries inner so a row stays in L1 across the queries.
fn simsimd_topk(
    queries: &[f32],
    corpus: &[f32],
    dim: usize,
    k: usize,
    metric: Metric,
) -> Vec<Vec<(f64, u32)>> {
    let nq = queries.len() / dim;
    let dist = |a: &[f32], b: &[f32]| -> f64 {
        match metric {
            Metric::Cosine => f32::cosine(a, b),
            Metric::Dot => f32::dot(a, b).map(|d| -d),
            _ => f32::sqeuclidean(a, b),
        }
        .unwrap_or(f64::INFINITY)
    };
    let chunk_rows = 1024;
    let parts: Vec<Vec<Vec<(f64, u32)>>> = corpus
        .par_chunks(chunk_rows * dim)
        .enumerate()
        .map(|(ci, rows)| {
            let mut best: Vec<Vec<(f64, u32)>> = vec![Vec::with_capacity(k + 1); nq];
            for (ri, row) in rows.chunks_exact(dim).enumerate() {
                let id = (ci * chunk_rows + ri) as u32;
                for (q, b) in queries.chunks_exact(dim).zip(best.iter_mut()) {
                    let d = dist(q, row);
                    if b.len() < k || d < b[k - 1].0 {
                        let pos = b.partition_point(|e| e.0 <= d);
                        b.insert(pos, (d, id));
                        b.truncate(k);
                    }
                }
            }
            best
        })
        .collect();
    let mut out = vec![Vec::new(); nq];
    for part in parts {
        for (o, p) in out.iter_mut().zip(part) {
            o.extend(p);
        }
    }
    for o in out.iter_mut() {
        o.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        o.truncate(k);
    }
    out
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
}

fn bandwidth(c: &mut Criterion) {
    eprintln!(
        "recall cpu bench: simd level {:?}, {} rayon threads",
        simd_level(),
        rayon::current_num_threads()
    );
    let len = 1usize << 27; // 512 MiB of f32
    let src = lcg(len, 9);
    let mut dst = vec![0.0f32; len];
    let mut g = c.benchmark_group("cpu/memory");
    // Throughput counts bytes read plus bytes written.
    g.throughput(Throughput::Bytes((2 * len * 4) as u64));
    g.bench_function("copy_512MiB_all_cores", |b| {
        b.iter(|| {
            dst.par_chunks_mut(1 << 20)
                .zip(src.par_chunks(1 << 20))
                .for_each(|(d, s)| d.copy_from_slice(s));
            black_box(&dst);
        })
    });
    // Read-only stream (a sum), the pattern of the one-query scan.
    g.throughput(Throughput::Bytes((len * 4) as u64));
    g.bench_function("read_512MiB_all_cores", |b| {
        // An integer sum of the bits: vectorised, so the loop runs at memory speed.
        b.iter(|| {
            black_box(
                src.par_chunks(1 << 20)
                    .map(|s| s.iter().fold(0u32, |a, v| a.wrapping_add(v.to_bits())))
                    .reduce(|| 0, u32::wrapping_add),
            )
        })
    });
    g.finish();
}

fn cosine_top10(c: &mut Criterion) {
    let corpus = lcg(N * D, 1);
    let queries = lcg(64 * D, 2);
    let mut g = c.benchmark_group("cosine_top10_n100000_d768");
    for nq in [1usize, 64] {
        let q = &queries[..nq * D];
        // Both sides agree on the answer before anything is timed.
        let ours = knn(q, &Corpus::f32(&corpus, D), Metric::Cosine, 10).expect("valid input");
        let peer = simsimd_topk(q, &corpus, D, 10, Metric::Cosine);
        let agree = peer
            .iter()
            .enumerate()
            .filter(|(i, p)| p.iter().map(|e| e.1).eq(ours.query(*i).0.iter().copied()))
            .count();
        eprintln!("q{nq}: top-10 lists identical to simsimd's for {agree} of {nq} queries");
        let t0 = std::time::Instant::now();
        for _ in 0..20 {
            black_box(knn(q, &Corpus::f32(&corpus, D), Metric::Cosine, 10).expect("valid input"));
        }
        eprintln!(
            "q{nq}: manual timing {:.2} ms per call",
            t0.elapsed().as_secs_f64() * 50.0
        );
        g.throughput(Throughput::Bytes((N * D * 4) as u64));
        g.bench_with_input(
            BenchmarkId::new("cpu/knn", format!("q{nq}")),
            &nq,
            |b, _| {
                b.iter(|| {
                    black_box(
                        knn(q, &Corpus::f32(&corpus, D), Metric::Cosine, 10).expect("valid input"),
                    )
                })
            },
        );
        g.bench_with_input(
            BenchmarkId::new("peer-simsimd/cos+top10", format!("q{nq}")),
            &nq,
            |b, _| b.iter(|| black_box(simsimd_topk(q, &corpus, D, 10, Metric::Cosine))),
        );
    }
    // With the corpus norms computed once and kept (as the facade's corpus handle does): the scan then
    // runs only the dot chains.
    let norms = recall_cpu_simd::row_norms(&corpus, D).expect("valid input");
    g.throughput(Throughput::Bytes((N * D * 4) as u64));
    g.bench_function("cpu/knn_with_norms/q1", |b| {
        b.iter(|| {
            black_box(
                knn(
                    &queries[..D],
                    &Corpus::f32(&corpus, D).with_norms(&norms),
                    Metric::Cosine,
                    10,
                )
                .expect("valid input"),
            )
        })
    });
    // The same corpus stored as f16 (half the bytes; widened to f32 exactly in cache), one query.
    let corpus16: Vec<half::f16> = corpus.iter().map(|v| half::f16::from_f32(*v)).collect();
    g.throughput(Throughput::Bytes((N * D * 2) as u64));
    g.bench_function("cpu/knn_f16/q1", |b| {
        b.iter(|| {
            black_box(
                knn(
                    &queries[..D],
                    &Corpus::new(Vectors::F16(&corpus16), D),
                    Metric::Cosine,
                    10,
                )
                .expect("valid input"),
            )
        })
    });
    g.finish();
}

/// A power-law graph: out-degrees Pareto-like around `mean`, targets skewed towards low ids (hubs).
fn power_law_graph(n: usize, mean: usize) -> (Vec<usize>, Vec<u32>, Vec<f32>) {
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let mut indptr = Vec::with_capacity(n + 1);
    indptr.push(0usize);
    let mut indices = Vec::with_capacity(n * mean);
    for _ in 0..n {
        let u = ((next() >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
        // Pareto with alpha 2 and minimum mean/2 has mean `mean`; capped.
        let deg = ((mean as f64 / 2.0) / u.sqrt()).min(20_000.0) as usize;
        for _ in 0..deg {
            let v = ((next() >> 11) as f64) / (1u64 << 53) as f64;
            indices.push(((n as f64) * v * v * v) as u32 % n as u32);
        }
        indptr.push(indices.len());
    }
    let weights = (0..indices.len())
        .map(|i| 0.25 + (i % 7) as f32 * 0.1)
        .collect();
    (indptr, indices, weights)
}

fn spreading(c: &mut Criterion) {
    let n = 1_000_000;
    let (indptr, indices, weights) = power_law_graph(n, 16);
    let t = std::time::Instant::now();
    let graph = SpreadGraph::from_csr(&indptr, &indices, &weights).expect("valid graph");
    eprintln!(
        "graph: {} nodes, {} edges; transpose built in {:?}",
        n,
        graph.n_edges(),
        t.elapsed()
    );
    // The same edges, every one from node 0 (see the last row).
    let mut from_zero = vec![indices.len(); n + 1];
    from_zero[0] = 0;
    let one_source = SpreadGraph::from_csr(&from_zero, &indices, &weights).expect("valid graph");
    drop((indices, weights, from_zero));
    let mut seeds = vec![0.0f32; n];
    for i in 0..1000 {
        seeds[(i * 7919) % n] = 1.0;
    }
    let params = SpreadParams {
        decay: 0.5,
        threshold: 1e-7,
        hops: 3,
        k: 10,
    };
    // Every hop a full pull: bytes counted from the code (`spread_pull_bytes`: offsets, source ids,
    // weights, gathered activations, activation and total), against the bandwidth measured above.
    let mut g = c.benchmark_group("spread_1M_nodes_3_hops");
    g.throughput(Throughput::Bytes(
        recall_hybrid_executor::bench::spread_pull_bytes(n, graph.n_edges(), params.hops),
    ));
    g.bench_function("cpu/spread_all_pull", |b| {
        b.iter(|| {
            black_box(
                recall_cpu_simd::spread_with_mode(
                    &graph,
                    &seeds,
                    &params,
                    recall_cpu_simd::SpreadMode::Pull,
                )
                .expect("valid"),
            )
        })
    });
    // The op as it runs (sparse hops pushed): edge visits per second (hops x edges).
    g.throughput(Throughput::Elements((params.hops * graph.n_edges()) as u64));
    g.bench_function("cpu/spread", |b| {
        b.iter(|| black_box(spread(&graph, &seeds, &params).expect("valid")))
    });
    // The pull with its reads of the sources' activations taken out of the memory: the same targets, in-degrees,
    // weights and bytes streamed, every edge's source node 0, so that every read hits the L1. The same code runs
    // on the same shapes; what `cpu/spread_all_pull` takes beyond this is what its reads of activations at the
    // graph's own places cost.
    g.throughput(Throughput::Bytes(
        recall_hybrid_executor::bench::spread_pull_bytes(n, graph.n_edges(), params.hops),
    ));
    g.bench_function("floor/spread_all_pull_reads_in_l1", |b| {
        b.iter(|| {
            black_box(
                recall_cpu_simd::spread_with_mode(
                    &one_source,
                    &seeds,
                    &params,
                    recall_cpu_simd::SpreadMode::Pull,
                )
                .expect("valid"),
            )
        })
    });
    g.finish();
}

/// Spreading on the calibration probe's shape (`probe_shape` in the executor: its power-law graph of 8 out-edges per
/// node, 3 hops, decay 0.5, threshold 0.01, one seed of 1.0 per 100 nodes, k 10) at mid sizes, where until session 36
/// every hop ran on one core: on the pool (`cpu/spread`) and on the one thread of a pool of one (`cpu/spread_1thread`,
/// the serial path, no hand-over per call). Throughput: edge visits (hops x edges). Filter:
/// `cargo bench -p recall-benches --bench cpu -- spread_probe`.
fn spreading_probe_shape(c: &mut Criterion) {
    let one = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("a pool of one thread");
    let params = SpreadParams {
        decay: 0.5,
        threshold: 0.01,
        hops: 3,
        k: 10,
    };
    let mut g = c.benchmark_group("spread_probe_8_edges_3_hops");
    for n in [20_000usize, 150_000] {
        let mut rng = recall_hybrid_executor::difftest::SplitMix::new(11);
        let (indptr, indices, weights) =
            recall_hybrid_executor::difftest::power_law_graph(&mut rng, n, 8 * n, 0, 0);
        let graph = SpreadGraph::from_csr(&indptr, &indices, &weights).expect("valid graph");
        let mut seeds = vec![0.0f32; n];
        for _ in 0..n / 100 {
            seeds[rng.below(n as u64) as usize] = 1.0;
        }
        g.throughput(Throughput::Elements((params.hops * graph.n_edges()) as u64));
        let call = || spread(&graph, &seeds, &params).expect("valid");
        g.bench_function(BenchmarkId::new("cpu/spread", format!("n{n}")), |b| {
            b.iter(|| black_box(call()))
        });
        g.bench_function(
            BenchmarkId::new("cpu/spread_1thread", format!("n{n}")),
            // The whole timing loop runs on the pool's one thread, so no call pays a hand-over to it.
            |b| one.install(|| b.iter(|| black_box(call()))),
        );
    }
    g.finish();
}

fn kmeans_iteration(c: &mut Criterion) {
    let (n, d, k) = (100_000, 128, 1024);
    let points = lcg(n * d, 3);
    let centroids = lcg(k * d, 4);
    let mut g = c.benchmark_group("kmeans_n100000_d128_k1024");
    g.bench_function("cpu/kmeans_1_iteration", |b| {
        b.iter(|| black_box(kmeans(&points, d, k, 1, 11).expect("valid")))
    });
    // Peer: the assignment step's distance loop with simsimd (l2sq per (point, centroid), argmin).
    g.bench_function("peer-simsimd/l2sq_assign", |b| {
        b.iter(|| {
            let a: Vec<u32> = points
                .par_chunks(d)
                .map(|p| {
                    let mut best = (f64::INFINITY, 0u32);
                    for (ci, cen) in centroids.chunks_exact(d).enumerate() {
                        let v = f32::sqeuclidean(p, cen).unwrap_or(f64::INFINITY);
                        if v < best.0 {
                            best = (v, ci as u32);
                        }
                    }
                    best.1
                })
                .collect();
            black_box(a)
        })
    });
    g.finish();
}

/// Clip-and-noise over 100,000 x 768 (a streaming op: compare its bytes a second with `cpu/memory`'s copy). The
/// noise is the contract's Philox4x32-10 and Box-Muller, the same functions the GPU kernels call.
fn clip_noise(c: &mut Criterion) {
    let x = lcg(N * D, 11);
    let mut g = c.benchmark_group("clip_noise_n100000_d768");
    // Bytes read plus bytes written, as for the copy.
    g.throughput(Throughput::Bytes((2 * N * D * 4) as u64));
    g.bench_function("cpu/clip_and_noise", |b| {
        b.iter(|| black_box(clip_and_noise(&x, D, 1.0, 0.1, 7).expect("valid input")))
    });
    // The same into one reused output: the op without the first touch of a fresh 300 MB.
    let mut out = vec![0.0f32; N * D];
    g.bench_function("cpu/clip_and_noise_into", |b| {
        b.iter(|| {
            clip_and_noise_into(&x, D, 1.0, 0.1, 7, &mut out).expect("valid input");
            black_box(&out);
        })
    });
    // The floor under it: the same work with the memory traffic taken away. Blocks of 32 rows (96 KiB in and
    // 96 KiB out: in a core's L2) are clipped and noised again and again, each into its own core's buffer, until
    // as many rows as above are done; what is left is the op's own arithmetic (the norms, the clip and the
    // contract's Philox4x32-10 and Box-Muller). Counted with the same bytes as the rows above, so the two read
    // as fractions of the copy side by side: the op at 80 % of the copy needs this floor well above 80 %.
    let block_rows = 32;
    let block = x[..block_rows * D].to_vec();
    g.bench_function("floor/clip_and_noise_in_l2", |b| {
        b.iter(|| {
            (0..N / block_rows).into_par_iter().for_each_init(
                || vec![0.0f32; block_rows * D],
                |o, i| {
                    clip_and_noise_into(&block, D, 1.0, 0.1, 7 + i as u64, o).expect("valid input");
                    black_box(&o);
                },
            )
        })
    });
    // The AVX2+FMA level too, where the machine runs a higher one: the many servers without AVX-512 take this
    // path, and a regression in it does not show in the row above (session 27 found one: 16x).
    if simd_level() > SimdLevel::Avx2 && available_levels().contains(&SimdLevel::Avx2) {
        let cpu = Cpu::with_level(SimdLevel::Avx2);
        g.bench_function("cpu/clip_and_noise_into/avx2", |b| {
            b.iter(|| {
                cpu.clip_and_noise_into(&x, D, 1.0, 0.1, 7, &mut out)
                    .expect("valid input");
                black_box(&out);
            })
        });
    }
    g.finish();
}

/// Many queries over a small corpus (dim 128, k 10, cosine): a batch re-ranked against a few thousand rows. The
/// arithmetic is small (256 x 256 x 128 is 8.4 M multiply-adds), so the selection and each call's fixed costs
/// show; `1thread` times the same calls on the one thread of a pool of one (the crate's serial path, no hand-over
/// to a pool per call), so they show without rayon's. Filter: `cargo bench -p recall-benches --bench cpu -- small_corpus`.
fn knn_small_corpus(c: &mut Criterion) {
    const DIM: usize = 128;
    let one = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("a pool of one thread");
    let mut g = c.benchmark_group("cosine_top10_d128_small_corpus");
    for (nq, n) in [(256usize, 256usize), (256, 1024), (256, 4096), (64, 256)] {
        let queries = lcg(nq * DIM, 2);
        let corpus = lcg(n * DIM, 1);
        let corpus = Corpus::f32(&corpus, DIM);
        let call = || knn(&queries, &corpus, Metric::Cosine, 10).expect("valid input");
        g.bench_function(BenchmarkId::new("cpu/knn", format!("q{nq}_n{n}")), |b| {
            b.iter(|| black_box(call()))
        });
        g.bench_function(
            BenchmarkId::new("cpu/knn_1thread", format!("q{nq}_n{n}")),
            // The whole timing loop runs on the pool's one thread, so no call pays a hand-over to it.
            |b| one.install(|| b.iter(|| black_box(call()))),
        );
    }
    g.finish();
}

/// Candidate scoring (cosine, k 10, the executor's prevalidated handle): per query, its own list of corpus row ids
/// scored and the best 10 kept. `q1_c1000_d768` is an HNSW re-rank (one query, 1,000 candidates, over a corpus of
/// 100,000 x 768 that does not fit in cache); `q8_c1000_d128` and `q64_c200_d384` are batches over corpora of
/// 10,000 rows. `1thread` times the same calls on the one thread of a pool of one (the serial path). Filter:
/// `cargo bench -p recall-benches --bench cpu -- score_candidates`.
fn score_candidates(c: &mut Criterion) {
    let one = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("a pool of one thread");
    let cpu = Cpu::new().prevalidated();
    let mut g = c.benchmark_group("score_candidates_top10");
    for (nq, per, dim, n) in [
        (1usize, 1000usize, D, N),
        (8, 1000, 128, 10_000),
        (64, 200, 384, 10_000),
    ] {
        let queries = lcg(nq * dim, 2);
        let corpus = lcg(n * dim, 1);
        let corpus = Corpus::f32(&corpus, dim);
        // Distinct ids per list, spread over the whole corpus (a multiplicative walk, co-prime step).
        let ids: Vec<u32> = (0..nq)
            .flat_map(|q| (0..per).map(move |i| ((q * 7919 + i * 104_729) % n) as u32))
            .collect();
        let offsets: Vec<usize> = (0..=nq).map(|q| q * per).collect();
        let call = || {
            cpu.score_candidates(&queries, &corpus, Metric::Cosine, &offsets, &ids, 10)
                .expect("valid input")
        };
        let name = format!("q{nq}_c{per}_d{dim}");
        g.bench_function(BenchmarkId::new("cpu/score_candidates", &name), |b| {
            b.iter(|| black_box(call()))
        });
        g.bench_function(
            BenchmarkId::new("cpu/score_candidates_1thread", &name),
            |b| one.install(|| b.iter(|| black_box(call()))),
        );
    }
    g.finish();
}

criterion_group! { name = benches; config = config(); targets = bandwidth, cosine_top10, knn_small_corpus, score_candidates, spreading, spreading_probe_shape, kmeans_iteration, clip_noise }
criterion_main!(benches);
