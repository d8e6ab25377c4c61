//! `recall faults --simulate`: the GPU fault drills against the fault-injecting backend (what CI can run),
//! their report, and the refusal to pretend without a GPU.
#![allow(clippy::unwrap_used)] // a test crate: helpers panic on failure like the tests do

use std::process::{Command, Output};

fn recall(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_recall"))
        .args(args)
        .env_remove("RUST_BACKTRACE")
        .env_remove("RECALL_TEST_FAULT")
        .output()
        .unwrap()
}

fn drill(scenario: &str) -> (String, String) {
    let dir = std::env::temp_dir().join(format!("recall-faults-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join(format!("{scenario}.md"));
    let o = recall(&[
        "faults",
        scenario,
        "--simulate",
        "--rows",
        "3000",
        "--dim",
        "16",
        "--threads",
        "4",
        "--seconds",
        "1.2",
        "--big",
        "16",
        "--out",
        out.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    let report = std::fs::read_to_string(&out).unwrap_or_default();
    assert!(
        o.status.success(),
        "{scenario}: {stdout}\n{}\n{report}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(stdout.trim(), format!("recall faults {scenario}: PASS"));
    (stdout, report)
}

/// The report's line for `phase`, split into its cells.
fn phase_row(report: &str, phase: &str) -> Vec<String> {
    let line = report
        .lines()
        .find(|l| l.starts_with(&format!("| {phase} |")))
        .unwrap_or_else(|| panic!("no {phase} row in {report}"));
    line.split('|').map(|c| c.trim().replace(',', "")).collect()
}

#[test]
fn vram_pressure_splits_batches_and_every_answer_is_the_cpus() {
    let (_, report) = drill("vram-pressure");
    assert!(
        report.starts_with("## recall faults vram-pressure: PASS"),
        "{report}"
    );
    assert!(report.contains("0 differ"), "{report}");
    // cells: "", phase, seconds, calls, on GPU, on CPU, fell back, errors, OOM events, OOM splits, ...
    let fault = phase_row(&report, "fault");
    assert!(
        fault[8].parse::<u64>().unwrap() > 0,
        "no OOM events: {report}"
    );
    assert!(fault[9].parse::<u64>().unwrap() > 0, "no splits: {report}");
    assert_eq!(fault[7], "0");
    let before = phase_row(&report, "before");
    assert_eq!(before[8], "0", "OOM before the fault: {report}");
    assert!(!report.contains("FAILED"), "{report}");
}

#[test]
fn kernel_failures_fall_back_and_the_gpu_keeps_answering() {
    let (_, report) = drill("kernel-failure");
    let fault = phase_row(&report, "fault");
    let gpu_errors: u64 = fault[10]
        .rsplit('/')
        .next()
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(gpu_errors > 0, "{report}");
    let after = phase_row(&report, "after");
    assert!(
        after[4].parse::<u64>().unwrap() > 0,
        "the GPU did not come back: {report}"
    );
    assert!(report.contains("0 differ"), "{report}");
}

#[test]
fn a_lost_device_opens_the_breaker_and_the_cpu_answers_everything() {
    let (_, report) = drill("device-lost");
    let fault = phase_row(&report, "fault");
    let device_lost: u64 = fault[10].split('/').nth(2).unwrap().trim().parse().unwrap();
    assert!(device_lost > 0, "{report}");
    assert!(
        fault[11].parse::<u64>().unwrap() > 0,
        "no breaker rejections: {report}"
    );
    let after = phase_row(&report, "after");
    assert_eq!(after[4], "0", "answers from a lost device: {report}");
    assert!(after[3].parse::<u64>().unwrap() > 0, "{report}");
    assert!(report.contains("0 differ"), "{report}");
}

#[test]
fn without_a_gpu_the_real_drill_says_skip() {
    let o = recall(&["faults", "device-lost", "--rows", "100", "--seconds", "0.3"]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    if stdout.contains("SKIP") {
        assert_eq!(o.status.code(), Some(2), "{stdout}");
        assert!(stdout.contains("--simulate"), "{stdout}");
    } else {
        // A GPU machine: the real drill ran.
        assert!(stdout.contains("recall faults device-lost:"), "{stdout}");
    }
}

#[test]
fn bad_arguments_are_refused() {
    for args in [
        &["faults", "meteor-strike", "--simulate"][..],
        &["faults", "device-lost", "--simulate", "--threads", "0"],
        &["faults", "device-lost", "--simulate", "--seconds", "-1"],
    ] {
        let o = recall(args);
        assert!(!o.status.success(), "{args:?}");
    }
}
