//! Activation spreading over a small association graph, first from slices, then through a graph handle
//! (`Engine::graph` + `Engine::spread_in`) that is validated and transposed once and, on a GPU, stays on the
//! device while the handle lives.
//!
//! `cargo run -p recall --example spread` (runs on the CPU when there is no GPU).

use recall::{Engine, SpreadGraph, SpreadParams};

fn main() -> Result<(), recall::Error> {
    let engine = Engine::new()?;
    // A ring of 1,000 memories, each also linked to the memory 7 ahead (CSR: out-edges of each node).
    let n = 1000usize;
    let mut indptr = vec![0usize];
    let mut indices = Vec::new();
    let mut weights = Vec::new();
    for u in 0..n {
        indices.extend([((u + 1) % n) as u32, ((u + 7) % n) as u32]);
        weights.extend([0.8f32, 0.3]);
        indptr.push(indices.len());
    }
    let mut seeds = vec![0.0f32; n];
    seeds[0] = 1.0;
    seeds[500] = 0.5;
    let params = SpreadParams {
        decay: 0.5,
        threshold: 0.01,
        hops: 3,
        k: 5,
    };

    let graph = SpreadGraph::from_csr(&indptr, &indices, &weights)?;
    let act = engine.spread(&graph, &seeds, &params)?;
    println!("spread ran on {}", act.device);
    println!("  most activated: {:?}", act.top.ids);
    println!("  their activation: {:?}", act.top.scores);

    // A handle: validated and transposed once, then spread from many seed sets.
    let handle = engine.graph(&indptr, &indices, &weights)?;
    let again = engine.spread_in(&handle, &seeds, &params)?;
    assert_eq!(
        again.activation, act.activation,
        "a handle gives the same answer"
    );
    seeds[0] = 0.0;
    seeds[250] = 1.0;
    let other = engine.spread_in(&handle, &seeds, &params)?;
    println!(
        "spread_in ran on {}; from node 250: {:?}",
        other.device, other.top.ids
    );
    Ok(())
}
