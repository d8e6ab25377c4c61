//! knn: the 5 nearest corpus rows of a batch of queries, first with slices, then through a corpus handle
//! (`Engine::corpus` + `Engine::knn_in`) that is validated once and, on a GPU, stays on the device.
//!
//! `cargo run -p recall --example knn` (runs on the CPU when there is no GPU).

use recall::{Engine, Metric};

fn main() -> Result<(), recall::Error> {
    let engine = Engine::new()?;
    let dim = 16;
    let n_rows = 2000;
    let corpus: Vec<f32> = (0..n_rows * dim)
        .map(|i| ((i * 7919 % 1013) as f32) / 506.5 - 1.0)
        .collect();
    // Queries: copies of rows 10, 20 and 30, so each query's best match is its own row.
    let queries: Vec<f32> = [10, 20, 30]
        .iter()
        .flat_map(|&r| corpus[r * dim..(r + 1) * dim].to_vec())
        .collect();

    let hits = engine.knn(&queries, &corpus, dim, Metric::Cosine, 5)?;
    println!("knn ran on {}", hits.device);
    for q in 0..hits.n_queries() {
        let (ids, scores) = hits.query(q);
        println!("  query {q}: ids {ids:?}, best score {:.4}", scores[0]);
    }

    // The same search against a corpus handle: checked once, searched many times.
    let store = engine.corpus(corpus, dim)?;
    for round in 0..3 {
        let again = engine.knn_in(&queries, &store, Metric::Cosine, 5)?;
        assert_eq!(
            again.ids, hits.ids,
            "a handle gives the same answer as the slices"
        );
        println!(
            "knn_in round {round} ran on {} ({} rows in the handle)",
            again.device,
            store.n_rows()
        );
    }
    Ok(())
}
