//! Similarity: every score of a few queries against a small corpus, for each metric.
//!
//! `cargo run -p recall --example similarity` (runs on the CPU when there is no GPU).

use recall::{Engine, Metric};

fn main() -> Result<(), recall::Error> {
    let engine = Engine::new()?;
    let dim = 8;
    // 1,000 corpus rows and 3 queries with deterministic values in [-1, 1).
    let corpus: Vec<f32> = (0..1000 * dim)
        .map(|i| ((i * 37 % 101) as f32) / 50.5 - 1.0)
        .collect();
    let queries: Vec<f32> = corpus[..3 * dim].iter().map(|v| v * 0.5).collect();
    for metric in [Metric::Cosine, Metric::Dot, Metric::L2] {
        let s = engine.similarity(&queries, &corpus, dim, metric)?;
        println!(
            "{metric:?}: {} x {} scores on {}; query 0 against row 0: {:.4}",
            s.n_queries, s.n_rows, s.device, s.values[0]
        );
        if let Some(why) = &s.fallback {
            println!("  (the GPU was chosen but failed; answered on the CPU: {why})");
        }
    }
    Ok(())
}
