//! k-means: compress 600 points in three clusters into 3 anchors.
//!
//! `cargo run -p recall --example kmeans` (runs on the CPU when there is no GPU).

use recall::Engine;

fn main() -> Result<(), recall::Error> {
    let engine = Engine::new()?;
    let dim = 2;
    let centres = [(0.0f32, 0.0f32), (10.0, 0.0), (0.0, 10.0)];
    let mut points = Vec::new();
    for i in 0..600 {
        let (cx, cy) = centres[i % 3];
        let jitter = ((i * 37 % 100) as f32) / 100.0 - 0.5;
        points.extend([cx + jitter, cy - jitter]);
    }
    let c = engine.kmeans(&points, dim, 3, 10, 42)?;
    println!("kmeans ran on {}", c.device);
    for (j, centroid) in c.centroids.chunks(dim).enumerate() {
        let members = c.assignments.iter().filter(|&&a| a as usize == j).count();
        println!(
            "  anchor {j}: ({:.2}, {:.2}), {members} points",
            centroid[0], centroid[1]
        );
    }
    println!("  inertia per iteration: {:?}", c.inertia);
    Ok(())
}
