//! What the cpu-simd examples share: their generator, the digest of a result's bits, and a timer.

// Each example uses a part.
#![allow(dead_code)]

use std::time::Instant;

/// `len` values in [-1, 1) from a linear congruential generator seeded by `seed`.
pub fn lcg(len: usize, seed: u64) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..len)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// FNV-1a over a result's ids and score bits.
pub fn digest(t: &recall_cpu_simd::TopK) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for v in t
        .ids
        .iter()
        .copied()
        .chain(t.scores.iter().map(|s| s.to_bits()))
    {
        h = (h ^ v as u64).wrapping_mul(0x100_0000_01b3);
    }
    h
}

/// Best and median microseconds per call of `f` over `reps` calls (after `reps / 10` untimed ones).
pub fn time(reps: usize, mut f: impl FnMut()) -> (f64, f64) {
    for _ in 0..reps / 10 {
        f();
    }
    let mut times: Vec<f64> = (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    times.sort_by(f64::total_cmp);
    (times[0], times[times.len() / 2])
}
