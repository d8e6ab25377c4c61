//! Diagnostics of `spread` on the calibration probe's shape (`recall-hybrid-executor`'s `probe_shape`: a power-law
//! graph of 8 out-edges per node, 3 hops, decay 0.5, threshold 0.01, one seed of 1.0 per 100 nodes, k 10).
//! `cargo run --release -p recall-cpu-simd --example spread_probe -- ARGS`, ARGS one of:
//! - `[REPS [NODES...]]`: best and median time per call over REPS calls at each size (20 K, 150 K, 1 M nodes by
//!   default; `RAYON_NUM_THREADS=1`: one thread);
//! - `check [NODES...]`: one digest of the activations' bits and the top-k per size, to diff two builds bit for bit.

use recall_cpu_simd::{SpreadGraph, SpreadParams, spread};
use std::hint::black_box;
use std::time::Instant;

/// The executor's test generator (`difftest::SplitMix`), copied so the example needs only this crate.
struct SplitMix(u64);

impl SplitMix {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn next_f32(&mut self) -> f32 {
        ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// The probe's graph and seeds at `n` nodes (`difftest::power_law_graph(rng, n, 8 n, 0, 0)` from seed 11, then one
/// seed per 100 nodes from the same stream), as calibration builds them.
fn probe(n: usize) -> (SpreadGraph, Vec<f32>) {
    let mut rng = SplitMix(11);
    let edges = 8 * n;
    let mut list: Vec<(u32, u32, f32)> = Vec::with_capacity(edges);
    for _ in 0..edges {
        let src = rng.below(n as u64) as u32;
        let u = (rng.next_f32() + 1.0) * 0.5;
        let dst = ((u * u * u) * n as f32) as u32 % n as u32;
        let w = if rng.below(16) == 0 {
            0.0
        } else {
            (rng.next_f32() + 1.0) * 0.5
        };
        list.push((src, dst, w));
    }
    list.sort_by_key(|e| e.0);
    let mut indptr = vec![0usize; n + 1];
    for e in &list {
        indptr[e.0 as usize + 1] += 1;
    }
    for u in 0..n {
        indptr[u + 1] += indptr[u];
    }
    let indices: Vec<u32> = list.iter().map(|e| e.1).collect();
    let weights: Vec<f32> = list.iter().map(|e| e.2).collect();
    let graph = SpreadGraph::from_csr(&indptr, &indices, &weights).expect("valid graph");
    let mut seeds = vec![0.0f32; n];
    for _ in 0..(n / 100).max(1) {
        seeds[rng.below(n as u64) as usize] = 1.0;
    }
    (graph, seeds)
}

const PARAMS: SpreadParams = SpreadParams {
    decay: 0.5,
    threshold: 0.01,
    hops: 3,
    k: 10,
};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let check = args.first().is_some_and(|a| a == "check");
    let nums: Vec<usize> = args
        .iter()
        .skip(usize::from(check))
        .map(|a| a.parse().expect("a number"))
        .collect();
    let (reps, sizes) = match (check, nums.split_first()) {
        (true, _) => (0, nums.clone()),
        (false, Some((r, s))) => (*r, s.to_vec()),
        (false, None) => (200, vec![]),
    };
    let sizes = if sizes.is_empty() {
        vec![20_000, 150_000, 1_000_000]
    } else {
        sizes
    };
    for n in sizes {
        let (graph, seeds) = probe(n);
        if check {
            let s = spread(&graph, &seeds, &PARAMS).expect("valid");
            let mut h = 0xcbf2_9ce4_8422_2325u64;
            let words = s.activation.iter().map(|a| a.to_bits());
            let top = s
                .top
                .ids
                .iter()
                .copied()
                .chain(s.top.scores.iter().map(|x| x.to_bits()));
            for v in words.chain(top) {
                h = (h ^ u64::from(v)).wrapping_mul(0x100_0000_01b3);
            }
            println!("{n} nodes: {h:016x} top {:?}", s.top.ids);
            continue;
        }
        for _ in 0..5 {
            black_box(spread(&graph, &seeds, &PARAMS).expect("valid"));
        }
        let mut t: Vec<f64> = (0..reps.max(1))
            .map(|_| {
                let t0 = Instant::now();
                black_box(spread(&graph, &seeds, &PARAMS).expect("valid"));
                t0.elapsed().as_secs_f64() * 1e6
            })
            .collect();
        t.sort_by(f64::total_cmp);
        let work = graph.n_edges() * PARAMS.hops;
        println!(
            "{n} nodes, {} edges, work {:.2} M: best {:.0} us, median {:.0} us ({:.2} us per 1,000 work)",
            graph.n_edges(),
            work as f64 / 1e6,
            t[0],
            t[t.len() / 2],
            t[t.len() / 2] / work as f64 * 1e3
        );
    }
}
