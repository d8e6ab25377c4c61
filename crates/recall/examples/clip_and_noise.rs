//! Clip-and-noise: clip each row to L2 norm 1 and add Gaussian noise from a seeded counter-based stream
//! (the same noise on every device).
//!
//! `cargo run -p recall --example clip_and_noise` (runs on the CPU when there is no GPU).

use recall::Engine;

fn main() -> Result<(), recall::Error> {
    let engine = Engine::new()?;
    let dim = 4;
    let x = [3.0f32, 4.0, 0.0, 0.0, /* row 1 */ 0.1, 0.2, 0.2, 0.0];
    let clipped = engine.clip_and_noise(&x, dim, 1.0, 0.0, 7)?;
    println!("clip_and_noise ran on {}", clipped.device);
    println!("  clipped, no noise: {:?}", clipped.values);
    let noised = engine.clip_and_noise(&x, dim, 1.0, 0.1, 7)?;
    let again = engine.clip_and_noise(&x, dim, 1.0, 0.1, 7)?;
    assert_eq!(
        noised.values, again.values,
        "the same seed gives the same noise"
    );
    println!("  clipped, sigma 0.1, seed 7: {:?}", noised.values);
    Ok(())
}
