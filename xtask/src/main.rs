//! recall's developer tasks. Run through the cargo alias: `cargo xtask <task>`.
//!
//! - `build-kernels [--check]`: build `kernels-rs` for every supported arch and write the kernel bundle
//!   that `recall-gpu-kernels` embeds; `--check` rebuilds into a scratch folder and fails if the committed
//!   bundle differs.
//! - `diff-test [--arch sm_XX] [--quick]`: the CPU-against-GPU differential suite on the GPU present.
//! - `bench [args]`: the benchmark report (`recall bench`), CPU and GPU, peers included where present.
//!
//! The xtask also serves as the nvptx linker during `build-kernels` (see `kernels::link_main`).

mod kernels;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

const USAGE: &str = "usage: cargo xtask <task>

tasks:
  build-kernels [--check]         build the GPU kernel bundle (or check the committed one is current)
  diff-test [--arch sm_XX] [--quick]
                                  compare every GPU kernel with the CPU, bit for bit, on this machine's GPU
  bench [ARGS]                    run `recall bench` (CPU and GPU sweeps, peers, report)";

fn main() -> ExitCode {
    if std::env::var_os(kernels::LINKER_ROLE_ENV).is_some() {
        return kernels::link_main();
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("build-kernels") => kernels::build(&args[1..]),
        Some("diff-test") => run_recall_cli("diff-test", &args[1..]),
        Some("bench") => run_recall_cli("bench", &args[1..]),
        Some("-h" | "--help" | "help") => {
            println!("{USAGE}");
            Ok(())
        }
        _ => Err(format!("unknown or missing task\n\n{USAGE}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("xtask: {msg}");
            ExitCode::FAILURE
        }
    }
}

/// The workspace root, from this crate's manifest directory.
pub fn project_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// `diff-test` and `bench` live in the `recall` CLI so that a release binary, copied to a GPU machine
/// without a Rust toolchain, runs them too. Here they are built and run from source.
fn run_recall_cli(task: &str, args: &[String]) -> Result<(), String> {
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .current_dir(project_root())
        .args([
            "run",
            "--quiet",
            "--release",
            "--package",
            "recall-cli",
            "--bin",
            "recall",
            "--",
            task,
        ])
        .args(args)
        .status()
        .map_err(|e| format!("could not run cargo: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`recall {task}` failed ({status})"))
    }
}
