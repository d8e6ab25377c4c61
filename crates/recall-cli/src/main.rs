//! `recall`: the command-line tool. `recall info`, `recall demo`, `recall diff-test`, `recall bench`,
//! the ops on files: `recall knn`, `recall spread`, `recall kmeans`; `recall load`; and the fault drills
//! `recall faults` (with `recall hog`, the process that takes the GPU's memory).

mod bench;
mod calib;
mod demo;
mod faults;
mod info;
mod load;
mod ops;
mod svg;
mod sweep;
mod util;

use clap::{CommandFactory, Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "recall",
    version,
    about = "GPU acceleration for AI memory and retrieval engines, with identical answers on CPU and GPU"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// GPUs found (or why none), the kernel image that loads, the CPU SIMD level, and where each op runs.
    Info,
    /// The main job on built-in data: generate a memory store and run the ops on it, timed, per device.
    Demo(demo::DemoArgs),
    /// Compare every GPU kernel with the CPU engine, bit for bit, on this machine's GPU.
    DiffTest(DiffTestArgs),
    /// Measure the ops on the GPU and the CPU, next to PyTorch when it is installed (`bench sweep`: every
    /// op over a ladder of sizes, break-even sizes, a report directory with plots).
    Bench(bench::BenchArgs),
    /// The k nearest corpus rows of each query (.npy or .fvecs in, ids.npy and scores.npy out).
    Knn(ops::KnnArgs),
    /// Every score of each query against each corpus row (.npy or .fvecs in, scores.npy out).
    Scores(ops::ScoresArgs),
    /// Activation spreading over a SciPy CSR .npz graph (activation.npy, top_ids.npy, top_scores.npy out).
    Spread(ops::SpreadArgs),
    /// k-means of the rows of a .npy or .fvecs file (centroids.npy, assignments.npy, inertia.npy out).
    Kmeans(ops::KmeansArgs),
    /// Sustained multi-tenant load (knn, candidate scoring, spreading), answers checked against the CPU.
    Load(load::LoadArgs),
    /// Real-fault drills on a GPU (vram-pressure, kernel-failure, device-lost): calls keep being answered
    /// and every answer equals the CPU's; `--simulate` runs them against the fault-injecting backend.
    Faults(faults::FaultArgs),
    /// Hold all but `--leave-mib` of the GPU's free memory for `--seconds` (the other process of
    /// `recall faults vram-pressure`).
    Hog(faults::HogArgs),
}

#[derive(clap::Args, Debug)]
struct DiffTestArgs {
    /// Arch whose code to run: `sm_86`, `86`, or `all` (every arch the GPU can run). Default: the image
    /// the loader picks for this GPU.
    #[arg(long)]
    arch: Option<String>,
    /// Fewer and smaller cases (seconds instead of a minute).
    #[arg(long)]
    quick: bool,
    /// Run only this group of cases (repeat for several; default: all), so that a slow tool such as
    /// `compute-sanitizer --tool racecheck` can take the suite a part at a time.
    #[arg(long = "group", value_name = "GROUP",
          value_parser = clap::builder::PossibleValuesParser::new(recall::diagnostics::DIFF_TEST_GROUPS.iter().copied()))]
    groups: Vec<String>,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind;
            // Help and version go to stdout with exit 0. `recall` alone (or `recall bench` without what it
            // needs to know) prints the help; every other argument error is one line on stderr, exit 2.
            if !e.use_stderr() || e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                let _ = e.print();
            } else {
                eprintln!("recall: {}", one_line(&e.to_string()));
            }
            return if e.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let result = match cli.command {
        Command::Info => info::run(),
        Command::Demo(a) => demo::run(a),
        Command::DiffTest(a) => diff_test(a),
        Command::Bench(a) => bench::run(a),
        Command::Knn(a) => ops::knn(a),
        Command::Scores(a) => ops::scores(a),
        Command::Spread(a) => ops::spread(a),
        Command::Kmeans(a) => ops::kmeans(a),
        Command::Load(a) => load::run(a),
        Command::Faults(a) => faults::run(a),
        Command::Hog(a) => faults::hog(a),
    };
    match result {
        Ok(code) => code,
        Err(msg) => {
            eprintln!("recall: {msg}");
            ExitCode::FAILURE
        }
    }
}

/// clap's multi-line error as one line: the message and its list (missing arguments, say), without the
/// usage block, and where to look for more.
fn one_line(clap_message: &str) -> String {
    let mut parts = Vec::new();
    for line in clap_message.lines() {
        let line = line.trim();
        if line.is_empty() {
            break;
        }
        parts.push(line.trim_start_matches("error: ").to_string());
    }
    let usage = clap_message
        .lines()
        .find_map(|l| l.trim().strip_prefix("Usage: "))
        .and_then(|u| {
            // `recall knn --corpus ...` -> `recall knn --help`
            let words: Vec<&str> = u
                .split_whitespace()
                .take_while(|w| !w.starts_with(['-', '<', '[']))
                .collect();
            (!words.is_empty()).then(|| words.join(" "))
        })
        .or_else(|| {
            // No usage block (an invalid value): the subcommand named on the command line, if any.
            let sub = std::env::args().nth(1).filter(|a| !a.starts_with('-'))?;
            Cli::command()
                .find_subcommand(&sub)
                .map(|_| format!("recall {sub}"))
        })
        .unwrap_or_else(|| "recall".into());
    format!("{} (see `{usage} --help`)", parts.join(" "))
}

fn parse_arch(s: &str) -> Result<u32, String> {
    let digits = s
        .trim()
        .trim_start_matches("sm_")
        .trim_start_matches("compute_");
    digits
        .parse::<u32>()
        .map_err(|_| format!("--arch {s:?}: expected sm_XX (for example sm_86) or all"))
}

fn diff_test(a: DiffTestArgs) -> Result<ExitCode, String> {
    let engine = match recall::Engine::builder()
        .device(recall::DevicePolicy::Gpu)
        .build()
    {
        Ok(e) => e,
        Err(recall::Error::GpuRequired(why)) => {
            eprintln!("recall diff-test: no GPU to test on: {why}");
            return Ok(ExitCode::from(2));
        }
        Err(e) => return Err(e.to_string()),
    };
    let arches: Option<Vec<u32>> = match a.arch.as_deref() {
        None => None,
        Some("all") => Some(Vec::new()),
        Some(s) => Some(vec![parse_arch(s)?]),
    };
    let groups: Vec<&str> = a.groups.iter().map(String::as_str).collect();
    let list: Option<Vec<u32>> = match arches {
        // The image the loader picked by itself.
        None => Some(match engine.gpu_status() {
            recall::GpuStatus::Ready(d) => d
                .image
                .split_whitespace()
                .next()
                .map(parse_arch)
                .transpose()?
                .into_iter()
                .collect(),
            recall::GpuStatus::Unavailable(_) => Vec::new(),
        }),
        // `all`: every arch the device can run.
        Some(list) if list.is_empty() => None,
        Some(list) => Some(list),
    };
    let report = recall::diagnostics::diff_test_groups(&engine, list.as_deref(), a.quick, &groups)
        .map_err(|e| e.to_string())?;
    print!("{}", report.render());
    Ok(if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
