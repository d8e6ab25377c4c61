//! Calibration's search and the check's sweep on the same synthetic timing curves (issue 7): one grid,
//! one statistic (best of N per device, more where the devices are within noise), one definition of the
//! crossover (the smallest size from which the GPU stays at least as fast). Noise-free curves must give the
//! same grid size; noisy ones (two independent measurements, as on a GPU machine) within 20 %.

use recall_hybrid_executor::calibration::{
    self, BreakEvenCheck, CalibrationConfig, GRID_STEP, LADDER_EVERY, Point, TIE_REPS_FACTOR,
    check_with, crossover, grid, measure_point,
};
use recall_hybrid_executor::difftest::SplitMix;
use recall_hybrid_executor::{BackendError, Device, OpKind};
use std::time::Duration;

const GPU: Device = Device::Gpu { ordinal: 0 };

/// Seconds per call of one device at a work size.
type Curve = fn(Device, u64) -> f64;

/// Timings from `curve`, each multiplied by `1 + sigma * E` (E exponential with mean 1: the long right
/// tail of real call times) and, one call in 20, by 1.5 to 3 (a preemption, a page fault).
fn noisy(
    curve: Curve,
    sigma: f64,
    seed: u64,
) -> impl FnMut(Device, u64) -> Result<Duration, BackendError> {
    let mut rng = SplitMix::new(seed);
    move |d, w| {
        let mut u = || (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        let e = -(1.0 - u()).ln();
        let mut t = curve(d, w) * (1.0 + sigma * e);
        if sigma > 0.0 && u() < 0.05 {
            t *= 1.5 + 1.5 * u();
        }
        Ok(Duration::from_secs_f64(t))
    }
}

fn cpu_or(d: Device, cpu: f64, gpu: f64) -> f64 {
    if d == Device::Cpu { cpu } else { gpu }
}

/// An op that uploads its input: GPU 200 us fixed, 20x the CPU's rate (crosses near 205,000).
fn linear(d: Device, w: u64) -> f64 {
    let w = w as f64;
    cpu_or(d, 5e-6 + 1e-9 * w, 200e-6 + 5e-11 * w)
}

/// `knn_resident`-like: the GPU call costs ~40 us whatever the size; the CPU's grows slowly (thread
/// start-up dominates): the log-ratio moves ~3.5 % per grid step; crosses near 1.7 M.
fn flat(d: Device, w: u64) -> f64 {
    cpu_or(
        d,
        12e-6 * (w as f64 / 4096.0).powf(0.2),
        40e-6 + 1e-14 * w as f64,
    )
}

/// Flatter still: ~1.7 % per grid step (crosses near 450,000).
fn very_flat(d: Device, w: u64) -> f64 {
    cpu_or(d, 25e-6 * (w as f64 / 4096.0).powf(0.1), 40e-6)
}

/// The GPU never pays: 1 ms fixed, the CPU's rate.
fn never(d: Device, w: u64) -> f64 {
    let w = w as f64;
    cpu_or(d, 1e-6 + 1e-10 * w, 1e-3 + 1e-10 * w)
}

/// The GPU wins from the first size.
fn always(d: Device, w: u64) -> f64 {
    let w = w as f64;
    cpu_or(d, 50e-6 + 1e-9 * w, 10e-6 + 1e-12 * w)
}

/// The GPU wins early, then loses again over a band around the 5th ladder size (a cache falls off),
/// then wins for good: the crossover is after the band.
fn comeback(d: Device, w: u64) -> f64 {
    let x = w as f64;
    let ladder4 = grid(1 << 12, 1 << 28)[4 * LADDER_EVERY] as f64;
    let bump = if x >= 0.9 * ladder4 && x <= 1.5 * ladder4 {
        10.0
    } else {
        1.0
    };
    cpu_or(d, 20e-6 + 1e-9 * x, (10e-6 + 2e-10 * x) * bump)
}

/// The GPU catches up at the top of the range but never passes the CPU (3 % slower at the top, where a
/// call takes ~24 ms: ties there get only what `TIE_BUDGET_S` allows).
fn almost(d: Device, w: u64) -> f64 {
    let x = w as f64;
    let top = *grid(1 << 12, 1 << 28).last().unwrap() as f64;
    let cpu = 1e-6 + 1e-10 * x;
    cpu_or(d, cpu, cpu * (1.03 + 2.0 * (1.0 - x / top)))
}

fn check(curve: Curve, sigma: f64, seed: u64) -> BreakEvenCheck {
    let cfg = CalibrationConfig::default();
    check_with(
        OpKind::KnnResident,
        GPU,
        &cfg,
        &mut noisy(curve, sigma, seed),
        &mut noisy(curve, sigma, seed ^ 0xDEAD_BEEF),
        &|w| w,
    )
    .unwrap()
}

/// The grid size the definition gives on the noise-free curve.
fn truth(curve: Curve) -> Option<u64> {
    let sizes = grid(1 << 12, 1 << 28);
    let pts: Vec<Point> = sizes
        .iter()
        .map(|&w| Point {
            work: w,
            cpu_s: curve(Device::Cpu, w),
            gpu_s: curve(GPU, w),
            noise: 0.02,
            reps: 1,
        })
        .collect();
    crossover(&pts)
}

#[test]
fn the_grid_is_x1_19_and_its_ladder_x4() {
    let g = grid(1 << 12, 1 << 28);
    assert_eq!(g[0], 1 << 12);
    assert!(*g.last().unwrap() <= 1 << 28);
    assert!(*g.last().unwrap() as f64 * GRID_STEP > (1u64 << 28) as f64);
    for w in g.windows(2) {
        let r = w[1] as f64 / w[0] as f64;
        // Neighbours are less than 20 % apart: a result one grid size off still passes issue 7's test.
        assert!(r > 1.18 && r < 1.2, "{w:?}");
    }
    for w in g
        .iter()
        .step_by(LADDER_EVERY)
        .collect::<Vec<_>>()
        .windows(2)
    {
        let r = *w[1] as f64 / *w[0] as f64;
        assert!(r > 3.9 && r < 4.1, "{w:?}");
    }
    // Degenerate ranges end and keep one size.
    assert_eq!(grid(0, 0), vec![1]);
    assert_eq!(grid(10, 5), vec![10]);
    assert_eq!(grid(1, 3), vec![1, 2, 3]);
    assert!(grid(1 << 60, u64::MAX).len() > 10);
}

#[test]
fn crossover_is_the_smallest_size_from_which_the_gpu_stays_as_fast() {
    let p = |work, cpu_s, gpu_s| Point {
        work,
        cpu_s,
        gpu_s,
        noise: 0.02,
        reps: 1,
    };
    assert_eq!(crossover(&[]), None);
    assert_eq!(crossover(&[p(1, 2.0, 1.0), p(2, 2.0, 1.0)]), Some(1));
    assert_eq!(crossover(&[p(1, 1.0, 2.0), p(2, 2.0, 1.0)]), Some(2));
    assert_eq!(crossover(&[p(1, 2.0, 1.0), p(2, 1.0, 2.0)]), None);
    // A win, a loss, then wins: after the last loss.
    let pts = [
        p(1, 2.0, 1.0),
        p(2, 1.0, 2.0),
        p(3, 2.0, 1.0),
        p(4, 2.0, 1.0),
    ];
    assert_eq!(crossover(&pts), Some(3));
    // A tie counts for the GPU below the largest size.
    assert_eq!(
        crossover(&[p(1, 1.0, 2.0), p(2, 1.0, 1.0), p(3, 2.0, 1.0)]),
        Some(2)
    );
    // At the largest, only a clear win makes a break-even (a tie says nothing about larger calls), whatever the
    // smaller sizes did.
    assert_eq!(crossover(&[p(1, 1.0, 2.0), p(2, 1.0, 1.0)]), None);
    assert_eq!(crossover(&[p(1, 1.0, 2.0), p(2, 1.0, 0.99)]), None);
    assert_eq!(crossover(&[p(1, 2.0, 1.0), p(2, 1.0, 0.99)]), None);
    assert_eq!(crossover(&[p(1, 1.0, 2.0), p(2, 1.0, 0.95)]), Some(2));
    assert!(p(1, 1.0, 1.01).within_noise());
    assert!(!p(1, 1.0, 1.05).within_noise());
}

#[test]
fn ties_get_more_repetitions_and_the_best_is_kept() {
    let mut calls = 0;
    let mut equal = |_: Device, _: u64| {
        calls += 1;
        Ok(Duration::from_micros(50))
    };
    let pt = measure_point(&mut equal, GPU, 4096, 5).unwrap();
    assert_eq!(pt.reps, 5 * TIE_REPS_FACTOR);
    assert_eq!(calls, 2 + 2 * 5 * TIE_REPS_FACTOR);
    let mut n = 0u64;
    let mut apart = |d: Device, _: u64| {
        n += 1;
        // Slow first calls, best at the end: the best (not the first, not the median) is kept.
        let us = if d == Device::Cpu { 100 } else { 50 } + 40 / n;
        Ok(Duration::from_micros(us))
    };
    let pt = measure_point(&mut apart, GPU, 4096, 3).unwrap();
    assert_eq!(pt.reps, 3);
    assert_eq!((pt.cpu_s, pt.gpu_s), (100e-6 + 5e-6, 50e-6 + 5e-6));
    assert!(pt.gpu_wins() && !pt.within_noise());
    // Slow ties stop adding calls after TIE_BUDGET_S.
    let mut slow = |_: Device, _: u64| Ok(Duration::from_millis(100));
    let pt = measure_point(&mut slow, GPU, 4096, 5).unwrap();
    assert_eq!(pt.reps, 5 + 2, "{pt:?}");
}

#[test]
fn noise_free_curves_give_the_same_grid_size_as_the_sweep() {
    let cases: [(&str, Curve, Option<u64>); 7] = [
        ("linear", linear, Some(205_000)),
        ("flat", flat, Some(1_700_000)),
        ("very flat", very_flat, Some(450_000)),
        ("never", never, None),
        ("always", always, Some(4096)),
        ("comeback", comeback, Some(1_600_000)),
        ("almost", almost, None),
    ];
    for (name, curve, near) in cases {
        let c = check(curve, 0.0, 1);
        let want = truth(curve);
        assert_eq!(c.swept, want, "{name}: sweep");
        assert_eq!(
            c.calibrated,
            want.unwrap_or(u64::MAX),
            "{name}: calibration"
        );
        assert!(c.within_20_percent(), "{name}");
        if let (Some(w), Some(near)) = (want, near) {
            let r = w as f64 / near as f64;
            assert!(
                r > 0.75 && r < 1.33,
                "{name}: crossover {w}, expected near {near}"
            );
        }
        // Calibration stays short: its ladder plus a gap or two, far fewer sizes than the sweep.
        assert!(
            c.calibration_points.len() <= 10 + 2 * (LADDER_EVERY - 1),
            "{name}: {} points",
            c.calibration_points.len()
        );
        assert_eq!(c.sweep_points.len(), grid(1 << 12, 1 << 28).len());
    }
}

#[test]
fn noisy_curves_agree_within_20_percent() {
    // Two independent measurements of each curve (5 % exponential jitter and 1-in-20 outliers of up to
    // 3x on every call), as calibration and the sweep are on a GPU machine.
    let cases: [(&str, Curve); 7] = [
        ("linear", linear),
        ("flat", flat),
        ("very flat", very_flat),
        ("never", never),
        ("always", always),
        ("comeback", comeback),
        ("almost", almost),
    ];
    let mut off = Vec::new();
    // 10 % jitter too, except on the flattest curve (1.7 % per grid step: there two sweeps of each other
    // already differ by two steps now and then; calibration adds no disagreement of its own).
    let runs = cases.iter().map(|&(n, c)| (n, c, 0.05)).chain(
        cases
            .iter()
            .filter(|c| c.0 != "very flat")
            .map(|&(n, c)| (n, c, 0.1)),
    );
    for (name, curve, sigma) in runs {
        for seed in 0..12 {
            let c = check(curve, sigma, seed);
            if !c.within_20_percent() {
                off.push(format!(
                    "{name} sigma {sigma} seed {seed}: calibrated {} swept {:?} (truth {:?})",
                    c.calibrated,
                    c.swept,
                    truth(curve)
                ));
            }
        }
    }
    assert!(off.is_empty(), "{off:#?}");
}

#[test]
fn a_flat_crossover_shows_as_a_band_within_noise() {
    let c = check(very_flat, 0.05, 3);
    let (lo, hi, n) = c.tie_band().expect("a band");
    let x = truth(very_flat).unwrap();
    assert!(lo <= x && x <= hi, "{lo}..{hi} around {x}");
    assert!(n >= 2, "{n}");
    // Steep: at most the sizes right at the crossover are within noise.
    if let Some((lo, hi, _)) = check(linear, 0.0, 3).tie_band() {
        assert!(hi as f64 / lo as f64 <= GRID_STEP * GRID_STEP, "{lo}..{hi}");
    }
    assert_eq!(check(never, 0.0, 3).tie_band(), None);
    let _ = calibration::NOISE_FLOOR;
}
