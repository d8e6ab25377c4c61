//! `recall bench break-even` (calibration's break-even sizes against a fine sweep of the same calls, per
//! op; issue 7) and `recall bench cpu-spread` (CPU spreading against the host's memory bandwidth; issue 3).

use crate::util::{COMMIT, cpu_model, grouped, utc_date};
use recall::diagnostics::bench::cpu_spread_figures;
use recall::executor::OpKind;
use recall::executor::calibration::{CalibrationConfig, check_break_even};
use recall::{Engine, GpuStatus, SpreadGraph, SpreadParams};
use std::fmt::Write as _;
use std::process::ExitCode;

/// `recall bench break-even`: for every op (or `ops`), the break-even size the executor's calibration
/// finds on this machine (the production procedure and probe) and the crossover of a fine sweep of the
/// same probe (`step` apart, best of `reps` calls per size and device), with their ratio.
pub fn break_even(
    ops: Option<&[String]>,
    step: f64,
    reps: usize,
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
    let ops: Vec<OpKind> = match ops {
        None => OpKind::ALL.to_vec(),
        Some(names) => names
            .iter()
            .map(|n| OpKind::from_name(n).ok_or_else(|| format!("unknown op {n:?}")))
            .collect::<Result<_, _>>()?,
    };
    let cfg = CalibrationConfig::default();
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
        "- calibrated: the executor's calibration (x4 ladder {}..{} work units, median of {} per size, {} bisection steps, the probe prepared outside each timed call); swept: the same probe every x{step} over the same range, best of {reps} calls per size and device, the smallest size from which the GPU stays faster\n",
        grouped(cfg.min_work),
        grouped(cfg.max_work),
        cfg.reps,
        cfg.refine_steps
    );
    let _ = writeln!(
        r,
        "| op | calibrated break-even | swept crossover | calibrated / swept | within 20 % |"
    );
    let _ = writeln!(r, "|---|---|---|---|---|");
    let mut all_within = true;
    for op in ops {
        eprintln!("break-even: {op} ...");
        let t = std::time::Instant::now();
        let c = check_break_even(op, &recall::executor::CpuBackend, gpu, &cfg, step, reps)
            .map_err(|e| format!("{op}: {e}"))?;
        let show = |w: u64| {
            if w == u64::MAX {
                format!("never (up to {})", grouped(c.range.1))
            } else {
                grouped(w)
            }
        };
        let swept = c
            .swept
            .map(show)
            .unwrap_or_else(|| format!("never (up to {})", grouped(c.range.1)));
        let (ratio, ok) = match (c.ratio(), c.swept) {
            (Some(x), _) => (format!("{x:.2}"), (0.8..=1.2).contains(&x)),
            // Both say the GPU never pays in the range: they agree.
            (None, None) if c.calibrated == u64::MAX => ("-".into(), true),
            _ => ("-".into(), false),
        };
        all_within &= ok;
        let _ = writeln!(
            r,
            "| {op} | {} | {swept} | {ratio} | {} |",
            show(c.calibrated),
            if ok { "yes" } else { "**no**" }
        );
        eprintln!(
            "break-even: {op} done in {:.1} s",
            t.elapsed().as_secs_f64()
        );
    }
    let code = if all_within {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    };
    Ok((r, code))
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
