//! Diagnostics of `knn` for many queries over a small corpus (dim 128, k 10, cosine), where fixed costs show.
//! `cargo run --release -p recall-cpu-simd --example knn_small -- ARGS`, ARGS one of:
//! - `[REPS [NQ N]]`: best and median time per call over REPS calls, of every shape or of NQ x N
//!   (`RAYON_NUM_THREADS=1`: the serial path on the calling thread; `KNN_POOL=1`: each call handed to a pool of one);
//! - `check`: one digest of ids and score bits per case (shapes, metrics, `k`), to diff two builds bit for bit;
//! - `pool`: the cost of a round trip into recall's pool after its threads went to sleep.

use recall_cpu_simd::{Corpus, Metric, knn};
use std::hint::black_box;
use std::time::Instant;

mod common;
use common::{digest, lcg};

fn main() {
    const D: usize = 128;
    if std::env::args().nth(1).as_deref() == Some("pool") {
        // The fixed cost of a parallel section: a round trip into recall's pool, alone and with 16 empty tasks.
        use rayon::prelude::*;
        for tasks in [0usize, 2, 16, 64] {
            let mut best = f64::MAX;
            let mut times = Vec::new();
            for _ in 0..20_000 {
                let t = Instant::now();
                recall_cpu_simd::in_pool(|| {
                    (0..tasks).into_par_iter().for_each(|i| {
                        black_box(i);
                    })
                });
                let e = t.elapsed().as_secs_f64() * 1e6;
                best = best.min(e);
                times.push(e);
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
            times.sort_by(f64::total_cmp);
            println!(
                "in_pool, {tasks} empty tasks: best {best:.1} us median {:.1} us",
                times[times.len() / 2]
            );
        }
        return;
    }
    if std::env::args().nth(1).as_deref() == Some("check") {
        // One digest line per case, to compare builds bit for bit.
        for (nq, n, dim) in [
            (256usize, 256usize, 128usize),
            (256, 373, 128),
            (64, 256, 128),
            (1, 5000, 128),
            (3, 2000, 64),
            (40, 3000, 17),
            (256, 4096, 128),
            (17, 9000, 768),
            (600, 700, 32),
        ] {
            let q = lcg(nq * dim, 7 + nq as u64);
            let mut c = lcg(n * dim, 3 + n as u64);
            // Ties: some duplicated rows.
            for r in (0..n).step_by(7) {
                let (a, b) = c.split_at_mut(r * dim + dim);
                if b.len() >= dim {
                    b[..dim].copy_from_slice(&a[r * dim..]);
                }
            }
            for metric in [Metric::Cosine, Metric::Dot, Metric::L2] {
                for k in [1usize, 10, 64, 300] {
                    if k > n {
                        continue;
                    }
                    let t = knn(&q, &Corpus::f32(&c, dim), metric, k).expect("valid input");
                    println!("{nq} {n} {dim} {metric:?} {k} {:016x}", digest(&t));
                }
            }
        }
        return;
    }
    let reps: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000);
    // `knn_small REPS NQ N` times that one shape.
    let only: Vec<usize> = std::env::args()
        .skip(2)
        .filter_map(|s| s.parse().ok())
        .collect();
    let shapes = match only[..] {
        [nq, n] => vec![(nq, n)],
        _ => vec![
            (256usize, 256usize),
            (256, 373),
            (256, 1024),
            (256, 4096),
            (64, 256),
        ],
    };
    for (nq, n) in shapes {
        let q = lcg(nq * D, 2);
        let c = lcg(n * D, 1);
        let corpus = Corpus::f32(&c, D);
        // `KNN_POOL=1`: every call from inside a one-thread rayon pool (the crate's serial path, on a worker).
        let pool = std::env::var("KNN_POOL").is_ok().then(|| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(1)
                .build()
                .expect("a pool")
        });
        let knn = |q: &[f32], corpus: &Corpus<'_>, metric, k| match &pool {
            Some(p) => p.install(|| knn(q, corpus, metric, k)),
            None => knn(q, corpus, metric, k),
        };
        for _ in 0..reps / 10 {
            black_box(knn(&q, &corpus, Metric::Cosine, 10).expect("valid input"));
        }
        let mut best = f64::MAX;
        let mut times = Vec::with_capacity(reps);
        for _ in 0..reps {
            let t = Instant::now();
            black_box(knn(&q, &corpus, Metric::Cosine, 10).expect("valid input"));
            let e = t.elapsed().as_secs_f64() * 1e6;
            best = best.min(e);
            times.push(e);
        }
        times.sort_by(f64::total_cmp);
        println!(
            "q{nq} n{n} d{D} k10: best {best:8.1} us  median {:8.1} us",
            times[times.len() / 2]
        );
    }
}
