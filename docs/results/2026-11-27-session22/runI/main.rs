use recall_cpu_simd::{SpreadGraph, SpreadParams};
use std::time::Instant;
fn main() {
    let nodes: usize = std::env::var("NODES").ok().and_then(|v| v.parse().ok()).unwrap_or(1_000_000); let edges = nodes * 16;
    let mut rng = recall::diagnostics::SplitMix::new(11);
    let (indptr, indices, weights) = recall::diagnostics::power_law_graph(&mut rng, nodes, edges, 0, 0);
    let graph = SpreadGraph::from_csr(&indptr, &indices, &weights).unwrap();
    let mut seeds = vec![0.0f32; nodes];
    for _ in 0..(nodes / 1000) { seeds[rng.below(nodes as u64) as usize] = 1.0; }
    let mode = match std::env::args().nth(1).as_deref() { Some("pull") => recall_cpu_simd::SpreadMode::Pull, Some("auto") => recall_cpu_simd::SpreadMode::Auto, _ => recall_cpu_simd::SpreadMode::Push };
    let hops: usize = std::env::args().nth(2).and_then(|v| v.parse().ok()).unwrap_or(2);
    let reps: usize = std::env::args().nth(3).and_then(|v| v.parse().ok()).unwrap_or(20);
    let params = SpreadParams { decay: 0.5, threshold: 0.01, hops, k: 10 };
    let t = Instant::now();
    for _ in 0..reps { let _ = recall_cpu_simd::spread_with_mode(&graph, &seeds, &params, mode).unwrap(); }
    println!("{mode:?} hops {hops}: {:?}", t.elapsed() / reps as u32);
}
