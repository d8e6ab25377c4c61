//! `recall bench break-even` (calibration's break-even sizes against a fine sweep of the same calls, per
//! op; issue 7) and `recall bench cpu-spread` (CPU spreading against the host's memory bandwidth; issue 3).

use crate::util::{COMMIT, cpu_model, grouped, utc_date};
use recall::diagnostics::bench::cpu_spread_figures;
use recall::executor::OpKind;
use recall::executor::calibration::{
    BreakEvenCheck, CalibrationConfig, GRID_STEP, LADDER_EVERY, NOISE_FLOOR, Point, TIE_BUDGET_S,
    TIE_REPS_FACTOR, check_break_even,
};
use recall::{Engine, GpuStatus, SpreadGraph, SpreadParams};
use std::fmt::Write as _;
use std::process::ExitCode;

/// `recall bench break-even`: for every op (or `ops`), the break-even size the executor's calibration
/// finds on this machine (the production procedure and probe) and the crossover of a sweep of every grid
/// size of the same probe, both timed the same way (best of `reps` per size and device, more where the two
/// are within noise) and read the same way (the smallest size from which the GPU stays at least as fast),
/// with their ratio and the sizes at which the two devices are within noise of each other. `staging_payback`, when
/// given, is set on every GPU backend first (`GpuBackend::set_staging_payback`).
pub fn break_even(
    ops: Option<&[String]>,
    reps: Option<usize>,
    staging_payback: Option<u64>,
    command: &str,
) -> Result<(String, ExitCode), String> {
    let engine = Engine::new().map_err(|e| e.to_string())?;
    let (Some(gpu), GpuStatus::Ready(d)) = (engine.gpu_backend(), engine.gpu_status()) else {
        let why = match engine.gpu_status() {
            GpuStatus::Unavailable(why) => why.clone(),
            GpuStatus::Ready(_) => "the GPU was taken out of use".into(),
        };
        return Err(format!("bench break-even needs a GPU: {why}"));
    };
    if let Some(times) = staging_payback {
        for b in engine.executor().gpu_backends() {
            b.set_staging_payback(times);
        }
    }
    let ops: Vec<OpKind> = match ops {
        None => OpKind::ALL.to_vec(),
        Some(names) => names
            .iter()
            .map(|n| OpKind::from_name(n).ok_or_else(|| format!("unknown op {n:?}")))
            .collect::<Result<_, _>>()?,
    };
    let production = CalibrationConfig::default();
    let cfg = CalibrationConfig {
        reps: reps.unwrap_or(production.reps).max(1),
        ..production
    };
    let mut r = String::new();
    let _ = writeln!(r, "# recall bench break-even\n");
    let _ = writeln!(r, "- date: {} (UTC)", utc_date());
    let _ = writeln!(r, "- host CPU: {}", cpu_model());
    let _ = writeln!(
        r,
        "- GPU: {} ({}), driver {}, kernels {}",
        d.name, d.sm, d.driver, d.image
    );
    let _ = writeln!(r, "- recall commit: {COMMIT}");
    let _ = writeln!(r, "- command: `{command}`");
    let _ = writeln!(
        r,
        "- staged copies: from {} MiB, through a pinned ring made once the large copies add up to {} times its size{}",
        recall::executor::STAGED_UPLOAD_MIN_BYTES >> 20,
        staging_payback.unwrap_or(recall::executor::STAGING_PAYBACK),
        if staging_payback == Some(0) {
            " (at the first large copy)"
        } else {
            ""
        }
    );
    let _ = writeln!(
        r,
        "- grid: work sizes {}..{} every x{GRID_STEP} (capped per op at what its probe can run); every size timed the same way: one warm-up call per device, then {} interleaved CPU and GPU calls, the best of each kept, {}x as many (at most {} s more) where the two bests are within noise (within twice the larger device's (median - best) / best, at least {:.0} %); the production calibration uses {}",
        grouped(cfg.min_work),
        grouped(cfg.max_work),
        cfg.reps,
        TIE_REPS_FACTOR,
        TIE_BUDGET_S,
        NOISE_FLOOR * 100.0,
        production.reps
    );
    let _ = writeln!(
        r,
        "- crossover (both columns): the smallest measured size from which the GPU is at least as fast at every measured size, none unless it wins outside noise at the largest; calibrated: the executor's calibration (every {LADDER_EVERY}th grid size, then every grid size of the gap after the last GPU loss and of any gap with an end within noise); swept: every grid size\n"
    );
    let _ = writeln!(
        r,
        "| op | calibrated break-even | swept crossover | calibrated / swept | within 20 % | devices within noise (swept) | calibration |"
    );
    let _ = writeln!(r, "|---|---|---|---|---|---|---|");
    let mut all_within = true;
    let mut details = String::new();
    for op in ops {
        eprintln!("break-even: {op} ...");
        let t = std::time::Instant::now();
        let c = check_break_even(op, &recall::executor::CpuBackend, gpu, &cfg)
            .map_err(|e| format!("{op}: {e}"))?;
        let never = format!("never (up to {})", grouped(c.range.1));
        let show = |w: u64| {
            if w == u64::MAX {
                never.clone()
            } else {
                grouped(w)
            }
        };
        let swept = c.swept.map(show).unwrap_or_else(|| never.clone());
        let ok = c.within_20_percent();
        let ratio = c.ratio().map_or_else(|| "-".into(), |x| format!("{x:.2}"));
        all_within &= ok;
        let band = match c.tie_band() {
            Some((lo, hi, n)) => format!(
                "{} .. {} ({n} of {} sizes)",
                grouped(lo),
                grouped(hi),
                c.sweep_points.len()
            ),
            None => "none".into(),
        };
        let _ = writeln!(
            r,
            "| {op} | {} | {swept} | {ratio} | {} | {band} | {:.2} s, {} sizes |",
            show(c.calibrated),
            if ok { "yes" } else { "**no**" },
            c.calibration_s,
            c.calibration_points.len()
        );
        let _ = write!(details, "{}", point_table(&c));
        eprintln!(
            "break-even: {op} done in {:.1} s",
            t.elapsed().as_secs_f64()
        );
    }
    let _ = writeln!(r, "\n{details}");
    let code = if all_within {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    };
    Ok((r, code))
}

/// Every swept size of `c` (with calibration's measurement of it, where it took one), folded.
fn point_table(c: &BreakEvenCheck) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "<details><summary>{}: every size (times in us; GPU/CPU below 1: the GPU wins; *: within noise)</summary>\n",
        c.op
    );
    let _ = writeln!(
        o,
        "| work | CPU best | GPU best | GPU / CPU | spread | calls per device | calibration's GPU / CPU |"
    );
    let _ = writeln!(o, "|---:|---:|---:|---:|---:|---:|---:|");
    let cell = |p: &Point| {
        format!(
            "{:.3}{}",
            p.ratio(),
            if p.within_noise() { "*" } else { "" }
        )
    };
    for p in &c.sweep_points {
        let cal = c
            .calibration_points
            .iter()
            .find(|q| q.work == p.work)
            .map_or_else(String::new, cell);
        let _ = writeln!(
            o,
            "| {} | {:.1} | {:.1} | {} | {:.1} % | {} | {cal} |",
            grouped(p.work),
            p.cpu_s * 1e6,
            p.gpu_s * 1e6,
            cell(p),
            p.noise * 100.0,
            p.reps
        );
    }
    let _ = writeln!(o, "\n</details>\n");
    o
}

/// `recall bench cpu-spread`: CPU spreading over a generated power-law graph against the memory bandwidth
/// measured in the same process (a parallel read and a parallel copy), all cores.
pub fn cpu_spread(
    nodes: usize,
    edges: usize,
    hops: usize,
    iters: usize,
    command: &str,
) -> Result<String, String> {
    if nodes < 2 || hops == 0 {
        return Err("--nodes must be at least 2 and --hops at least 1".into());
    }
    eprintln!(
        "generating a power-law graph: {} nodes, {} edges",
        grouped(nodes as u64),
        grouped(edges as u64)
    );
    let mut rng = recall::diagnostics::SplitMix::new(11);
    let (indptr, indices, weights) =
        recall::diagnostics::power_law_graph(&mut rng, nodes, edges, 0, 0);
    let graph = SpreadGraph::from_csr(&indptr, &indices, &weights).map_err(|e| e.to_string())?;
    drop((indptr, indices, weights));
    let mut seeds = vec![0.0f32; nodes];
    for _ in 0..(nodes / 1000).max(1) {
        seeds[rng.below(nodes as u64) as usize] = 1.0;
    }
    let params = SpreadParams {
        decay: 0.5,
        threshold: 0.01,
        hops,
        k: 10.min(nodes),
    };
    let f = cpu_spread_figures(&graph, &seeds, &params, iters)?;
    let bw = f.bandwidth;
    let mut r = String::new();
    let _ = writeln!(r, "# recall bench cpu-spread\n");
    let _ = writeln!(r, "- date: {} (UTC)", utc_date());
    let _ = writeln!(
        r,
        "- host CPU: {}; {} rayon threads; SIMD level {}",
        cpu_model(),
        f.threads,
        f.simd
    );
    let _ = writeln!(r, "- recall commit: {COMMIT}");
    let _ = writeln!(r, "- command: `{command}`");
    let _ = writeln!(
        r,
        "- graph: {} nodes, {} edges (power law, `recall::diagnostics::power_law_graph`, seed 11); {} seeds of 1.0; decay 0.5, threshold 0.01, {} hops, top-10",
        grouped(f.n_nodes as u64),
        grouped(f.n_edges as u64),
        grouped((nodes / 1000).max(1) as u64),
        f.hops
    );
    let _ = writeln!(
        r,
        "- timing: median of {iters} calls after one warm-up; bandwidth: best of 5 passes over {} MiB, all cores",
        bw.bytes >> 20
    );
    let _ = writeln!(
        r,
        "- bytes counted (all-pull): per hop 8 B per target (offsets), 12 B per edge (source id, weight, gathered activation), 12 B per target (activation written, total read and written); once 24 B per node (seeds, buffers, scans)\n"
    );
    let _ = writeln!(r, "| measurement | value |");
    let _ = writeln!(r, "|---|---|");
    let _ = writeln!(r, "| memory: parallel read | {:.1} GB/s |", bw.read_gbps);
    let _ = writeln!(
        r,
        "| memory: parallel copy (read + write) | {:.1} GB/s |",
        bw.copy_gbps
    );
    let pct = |g: f64| 100.0 * g / bw.read_gbps;
    let _ = writeln!(
        r,
        "| spreading, every hop a full pull ({} hops) | {:.2} ms, {:.1} GB/s, **{:.0} % of read bandwidth** |",
        f.hops,
        f.pull_ms,
        f.pull_gbps(),
        pct(f.pull_gbps())
    );
    let _ = writeln!(
        r,
        "| one full pull hop (every node seeded) | {:.2} ms, {:.1} GB/s, {:.0} % of read bandwidth |",
        f.one_hop_ms,
        f.one_hop_gbps(),
        pct(f.one_hop_gbps())
    );
    let _ = writeln!(
        r,
        "| spreading as it runs (sparse hops pushed) | {:.2} ms ({:.2}x the all-pull time; {:.2} G edge visits/s) |",
        f.auto_ms,
        f.auto_ms / f.pull_ms,
        (f.hops * f.n_edges) as f64 / (f.auto_ms * 1e-3) / 1e9
    );
    let _ = writeln!(
        r,
        "| all-pull and as-it-runs answers bit-identical | {} |",
        if f.same_bits { "yes" } else { "**no**" }
    );
    Ok(r)
}
