//! Candidate scoring: re-rank each query's candidate list (as an HNSW search would hand over) and keep the
//! best 3 of each.
//!
//! `cargo run -p recall --example score_candidates` (runs on the CPU when there is no GPU).

use recall::{Engine, Metric};

fn main() -> Result<(), recall::Error> {
    let engine = Engine::new()?;
    let dim = 4;
    let corpus: Vec<f32> = (0..100 * dim)
        .map(|i| ((i * 13 % 29) as f32) - 14.0)
        .collect();
    let queries = [1.0, 0.5, -0.5, 2.0, /* query 1 */ -1.0, 0.0, 1.0, 0.25];
    // Query 0 ranks rows 3, 17, 42, 55, 90; query 1 ranks rows 1, 2, 8, 64.
    let ids = [3, 17, 42, 55, 90, 1, 2, 8, 64];
    let offsets = [0, 5, 9];
    let top = engine.score_candidates(&queries, &corpus, dim, Metric::Dot, &offsets, &ids, 3)?;
    println!("score_candidates ran on {}", top.device);
    for q in 0..top.n_queries() {
        let (ids, scores) = top.query(q);
        println!("  query {q}: best candidates {ids:?}, dot products {scores:?}");
    }
    Ok(())
}
