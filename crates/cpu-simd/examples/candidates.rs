//! Diagnostics of `score_candidates` (per query, its own list of corpus row ids scored, the best k kept).
//! `cargo run --release -p recall-cpu-simd --example candidates -- ARGS`, ARGS one of:
//! - `[REPS [NQ PER DIM N]]`: best and median time per call over REPS calls (cosine, k 10, the executor's
//!   prevalidated handle), of every shape or of NQ queries x PER candidates at DIM over a corpus of N rows
//!   (`RAYON_NUM_THREADS=1`: a pool of one thread; `CAND_POOL=1`: every call from inside a pool of one, the serial
//!   path on a worker, no hand-over per call);
//! - `sweep [REPS]`: 8 queries at dim 128 (the executor's probe) and 1 query at dim 768, lists from 16 to 8,192
//!   candidates: where the serial and the parallel path cross;
//! - `check`: one digest of ids and score bits per case (shapes, metrics, element types, `k`), to diff two builds
//!   bit for bit.

use half::{bf16, f16};
use recall_cpu_simd::{Corpus, Cpu, Metric, Vectors};
use std::hint::black_box;

mod common;
use common::{digest, lcg, time};

/// `nq` lists of `per` distinct ids each over `n` rows (a multiplicative walk with a step co-prime to `n`).
fn lists(nq: usize, per: usize, n: usize) -> (Vec<usize>, Vec<u32>) {
    let step = (1..)
        .map(|s| 104_729 + 2 * s)
        .find(|s| gcd(*s, n) == 1)
        .unwrap_or(1);
    let ids = (0..nq)
        .flat_map(|q| (0..per).map(move |i| ((q * 7919 + i * step) % n) as u32))
        .collect();
    (((0..=nq).map(|q| q * per)).collect(), ids)
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

fn check() {
    let cpu = Cpu::new();
    for (nq, per, n, dim) in [
        (1usize, 5000usize, 9000usize, 128usize),
        (1, 1000, 20_000, 768),
        (3, 2000, 4000, 64),
        (8, 1760, 7040, 128),
        (40, 300, 3000, 17),
        (64, 200, 10_000, 384),
        (5, 40, 100, 8),
    ] {
        let q = lcg(nq * dim, 7 + nq as u64);
        let mut c = lcg(n * dim, 3 + n as u64);
        // Ties: some duplicated rows, and rows of values rounded so that many scores repeat.
        for r in (0..n).step_by(7) {
            let (a, b) = c.split_at_mut(r * dim + dim);
            if b.len() >= dim {
                b[..dim].copy_from_slice(&a[r * dim..]);
            }
        }
        for v in c[..n / 3 * dim].iter_mut() {
            *v = (*v * 2.0).round() / 2.0;
        }
        let (offsets, ids) = lists(nq, per, n);
        let norms = cpu.row_norms(&c, dim).expect("valid rows");
        let h: Vec<f16> = c.iter().map(|v| f16::from_f32(*v)).collect();
        let b: Vec<bf16> = c.iter().map(|v| bf16::from_f32(*v)).collect();
        let corpora = [
            ("f32", Corpus::f32(&c, dim)),
            ("f32+norms", Corpus::f32(&c, dim).with_norms(&norms)),
            ("f16", Corpus::new(Vectors::F16(&h), dim)),
            ("bf16", Corpus::new(Vectors::Bf16(&b), dim)),
        ];
        for (what, corpus) in &corpora {
            for metric in [Metric::Cosine, Metric::Dot, Metric::L2] {
                for k in [1usize, 10, 33, 64, per] {
                    if k > per {
                        continue;
                    }
                    let t = cpu
                        .score_candidates(&q, corpus, metric, &offsets, &ids, k)
                        .expect("valid input");
                    println!(
                        "{nq} {per} {n} {dim} {what} {metric:?} {k} {:016x}",
                        digest(&t)
                    );
                }
            }
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("check") {
        check();
        return;
    }
    let sweep = args.first().map(String::as_str) == Some("sweep");
    let nums: Vec<usize> = args.iter().filter_map(|s| s.parse().ok()).collect();
    let reps = nums.first().copied().unwrap_or(500);
    let shapes: Vec<(usize, usize, usize, usize)> = match nums[..] {
        _ if sweep => [16usize, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192]
            .iter()
            .flat_map(|per| [(8, *per, 128, 10_000), (1, *per, 768, 100_000)])
            .collect(),
        [_, nq, per, dim, n] => vec![(nq, per, dim, n)],
        _ => vec![
            (1, 1000, 768, 100_000),
            (8, 1000, 128, 10_000),
            (8, 1760, 128, 7040),
            (64, 200, 384, 10_000),
        ],
    };
    let pool = std::env::var("CAND_POOL").is_ok().then(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .expect("a pool")
    });
    let cpu = Cpu::new().prevalidated();
    let mut corpus_of = (0, 0, Vec::new());
    for (nq, per, dim, n) in shapes {
        if (corpus_of.0, corpus_of.1) != (n, dim) {
            corpus_of = (n, dim, lcg(n * dim, 1));
        }
        let q = lcg(nq * dim, 2);
        let corpus = Corpus::f32(&corpus_of.2, dim);
        let (offsets, ids) = lists(nq, per, n);
        let call = || {
            black_box(
                cpu.score_candidates(&q, &corpus, Metric::Cosine, &offsets, &ids, 10)
                    .expect("valid input"),
            );
        };
        let (best, median) = match &pool {
            Some(p) => p.install(|| time(reps, call)),
            None => time(reps, call),
        };
        let work = nq * per * dim;
        println!(
            "q{nq} c{per} d{dim} n{n} ({:.2} M MACs): best {best:8.1} us  median {median:8.1} us  ({:.2} GMAC/s)",
            work as f64 / 1e6,
            work as f64 / median / 1e3
        );
    }
}
