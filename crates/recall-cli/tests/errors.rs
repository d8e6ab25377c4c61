//! Bad arguments and bad files, for every subcommand of the built binary: a non-zero exit and exactly one
//! line on stderr, never a panic or a backtrace (RUST_BACKTRACE=1 is set so that a panic would show one).
#![allow(clippy::unwrap_used)] // a test crate: helpers panic on failure like the tests do

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("recall-cli-err-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn recall(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_recall"))
        .args(args)
        .env("RECALL_DEVICE", "cpu")
        .env("RUST_BACKTRACE", "1")
        .output()
        .unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Non-zero exit, one line on stderr that starts with `recall` and contains `contains`, no panic, and the
/// exit code `code` when given.
#[track_caller]
fn assert_one_line(args: &[&str], contains: &str, code: Option<i32>) {
    let o = recall(args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{args:?} succeeded; stderr: {err}");
    if let Some(c) = code {
        assert_eq!(o.status.code(), Some(c), "{args:?}: {err}");
    }
    assert_eq!(
        err.lines().count(),
        1,
        "{args:?} printed more than one line:\n{err}"
    );
    assert!(err.starts_with("recall"), "{args:?}: {err}");
    assert!(
        err.contains(contains),
        "{args:?}: expected {contains:?} in {err}"
    );
    for bad in ["panicked", "backtrace", "RUST_BACKTRACE"] {
        assert!(!err.contains(bad), "{args:?}: {err}");
    }
}

#[test]
fn argument_errors_are_one_line_with_exit_code_2() {
    assert_one_line(
        &["frobnicate"],
        "unrecognized subcommand 'frobnicate'",
        Some(2),
    );
    assert_one_line(&["info", "extra"], "unexpected argument 'extra'", Some(2));
    assert_one_line(&["knn"], "--corpus <CORPUS>", Some(2));
    assert_one_line(&["knn"], "recall knn --help", Some(2));
    assert_one_line(
        &[
            "knn",
            "--corpus",
            "a",
            "--queries",
            "b",
            "-k",
            "x",
            "--out",
            "o",
        ],
        "invalid value 'x'",
        Some(2),
    );
    assert_one_line(
        &[
            "knn",
            "--corpus",
            "a",
            "--queries",
            "b",
            "-k",
            "1",
            "--metric",
            "cos",
            "--out",
            "o",
        ],
        "possible values: cosine, dot, l2",
        Some(2),
    );
    assert_one_line(&["spread", "--graph", "g.npz"], "--seeds <SEEDS>", Some(2));
    assert_one_line(&["kmeans", "--data", "x.npy", "-k", "-3"], "-3", Some(2));
    assert_one_line(&["demo", "--rows", "many"], "invalid value 'many'", Some(2));
    assert_one_line(&["bench", "--iters", "-1"], "-1", Some(2));
    assert_one_line(
        &["bench", "sweep", "--sizes", "1k"],
        "invalid value '1k'",
        Some(2),
    );
    assert_one_line(&["diff-test", "--quick=yes"], "--quick", Some(2));
}

#[test]
fn help_and_version_are_not_errors() {
    for args in [
        &["--help"][..],
        &["--version"],
        &["knn", "--help"],
        &["bench", "--help"],
    ] {
        let o = recall(args);
        assert!(o.status.success(), "{args:?}");
        assert!(!o.stdout.is_empty() && o.stderr.is_empty(), "{args:?}");
    }
}

#[test]
fn bad_values_are_one_line() {
    let d = tmp("values");
    for args in [
        &["demo", "--rows", "0"][..],
        &["demo", "--dim", "0"],
        &["demo", "--iters", "0"],
        &["demo", "--rows", "10", "-k", "11"],
        &["demo", "--rows", "10", "--anchors", "11"],
    ] {
        assert_one_line(args, "must be at least 1", Some(1));
    }
    assert_one_line(&["bench", "frob"], "unknown op \"frob\"", Some(1));
    assert_one_line(&["bench", "cosine", "--rows", "0"], "at least 1", Some(1));
    assert_one_line(&["bench", "knn", "--k", "0"], "--k", Some(1));
    assert_one_line(&["bench", "sweep", "--sizes", "0"], "--sizes", Some(1));
    assert_one_line(
        &["bench", "sweep", "--ops", "knn,frob"],
        "unknown op \"frob\"",
        Some(1),
    );
    // A report directory that cannot be made: a path below a regular file.
    let file = d.join("file");
    std::fs::write(&file, b"x").unwrap();
    assert_one_line(
        &[
            "bench",
            "sweep",
            "--quick",
            "--out",
            s(&file.join("report")),
        ],
        "report",
        Some(1),
    );
    // On a machine without a GPU (and under RECALL_DEVICE=cpu everywhere) the GPU-only benches say why.
    for op in ["knn", "spread", "kmeans", "noise"] {
        assert_one_line(
            &[
                "bench",
                op,
                "--rows",
                "100",
                "--nodes",
                "100",
                "--clusters",
                "4",
            ],
            "needs a GPU",
            Some(1),
        );
    }
    // diff-test: no GPU here is exit 2; with a GPU, a bad --arch is exit 1. One line either way.
    assert_one_line(&["diff-test", "--arch", "sm_frob"], "", None);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn bad_files_are_one_line() {
    let d = tmp("files");
    let q = d.join("q.npy");
    recall::io::write_npy(&q, &[1f32, 0.0, 0.0, 1.0], &[2, 2]).unwrap();
    let seeds = d.join("seeds.npy");
    recall::io::write_npy(&seeds, &[1f32, 0.0, 0.0], &[3]).unwrap();
    let graph = d.join("g.npz");
    recall::io::write_npz_csr(&graph, &[0, 1, 2, 2], &[1, 2], &[0.5, 0.5], 3).unwrap();
    let empty = d.join("empty.npy");
    std::fs::write(&empty, b"").unwrap();
    let text = d.join("text.npy");
    std::fs::write(&text, b"this is not numpy").unwrap();
    let vec1d = d.join("v.npy");
    recall::io::write_npy(&vec1d, &[1f32, 2.0], &[2]).unwrap();
    let nan = d.join("nan.npy");
    recall::io::write_npy(&nan, &[f32::NAN, 1.0], &[1, 2]).unwrap();
    let out_file = d.join("out-is-a-file");
    std::fs::write(&out_file, b"x").unwrap();
    let out = d.join("out");
    let knn = |corpus: &Path, queries: &Path, k: &str, out: &Path| {
        vec![
            "knn".to_string(),
            "--corpus".into(),
            s(corpus).into(),
            "--queries".into(),
            s(queries).into(),
            "-k".into(),
            k.into(),
            "--out".into(),
            s(out).into(),
        ]
    };
    let run = |args: Vec<String>, contains: &str| {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_one_line(&a, contains, Some(1));
    };
    run(knn(&empty, &q, "1", &out), "empty.npy");
    run(knn(&text, &q, "1", &out), "not a .npy file");
    run(knn(&vec1d, &q, "1", &out), "v.npy");
    run(knn(&nan, &q, "1", &out), "invalid input");
    run(knn(&q, &q, "0", &out), "invalid input");
    run(
        knn(&d.join("missing.fvecs"), &q, "1", &out),
        "missing.fvecs",
    );
    run(knn(&q, &q, "1", &out_file.join("sub")), "out-is-a-file");
    let spread = |g: &Path, seeds: &Path, decay: &str, hops: &str| {
        vec![
            "spread".to_string(),
            "--graph".into(),
            s(g).into(),
            "--seeds".into(),
            s(seeds).into(),
            "--decay".into(),
            decay.into(),
            "--threshold".into(),
            "0".into(),
            "--hops".into(),
            hops.into(),
            "--out".into(),
            s(&out).into(),
        ]
    };
    run(spread(&q, &seeds, "0.5", "1"), "q.npy");
    run(spread(&graph, &q, "0.5", "1"), "q.npy");
    run(
        spread(&graph, &vec1d, "0.5", "1"),
        "2 seeds for a graph of 3 nodes",
    );
    run(spread(&graph, &seeds, "1.5", "1"), "decay");
    run(spread(&graph, &seeds, "0.5", "0"), "hops");
    run(spread(&d.join("nope.npz"), &seeds, "0.5", "1"), "nope.npz");
    let kmeans = |data: &Path, k: &str, iters: &str| {
        vec![
            "kmeans".to_string(),
            "--data".into(),
            s(data).into(),
            "-k".into(),
            k.into(),
            "--iters".into(),
            iters.into(),
            "--out".into(),
            s(&out).into(),
        ]
    };
    run(kmeans(&q, "3", "1"), "invalid input");
    run(kmeans(&q, "0", "1"), "invalid input");
    run(kmeans(&q, "1", "0"), "invalid input");
    run(kmeans(&text, "1", "1"), "text.npy");
    assert!(!out.exists(), "no output folder for failed calls");
    let _ = std::fs::remove_dir_all(&d);
}

/// `recall args` that must end within a minute (killed after it): (exit code, stderr).
fn recall_within_a_minute(args: &[&str], stderr_file: &Path) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_recall"))
        .args(args)
        .env("RECALL_DEVICE", "cpu")
        .env("RUST_BACKTRACE", "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(stderr_file).unwrap())
        .spawn()
        .unwrap();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if std::time::Instant::now() > until {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let err = std::fs::read_to_string(stderr_file).unwrap_or_default();
    assert!(
        status.is_some(),
        "{args:?} still ran after a minute; stderr:\n{err}"
    );
    (status.and_then(|s| s.code()), err)
}

#[test]
fn run_lengths_past_the_clocks_range_are_refused() {
    // `--duration 1e20` panicked in `Duration::from_secs_f64`/`Instant + Duration` inside the scope of the
    // caller threads, which then never stopped: the run hung after the panic.
    let d = tmp("seconds");
    let runs: [&[&str]; 2] = [
        &[
            "load",
            "--rows",
            "200",
            "--dim",
            "4",
            "--tenants",
            "1",
            "--threads-per-tenant",
            "1",
            "--candidates",
            "20",
            "--verify",
            "0",
            "--duration",
            "1e20",
        ],
        &[
            "faults",
            "kernel-failure",
            "--simulate",
            "--rows",
            "100",
            "--dim",
            "4",
            "--threads",
            "1",
            "--big",
            "4",
            "--seconds",
            "1e300",
        ],
    ];
    for args in runs {
        let (code, err) = recall_within_a_minute(args, &d.join("stderr"));
        assert_eq!(code, Some(1), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains("at most"), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn sizes_past_what_memory_can_address_are_refused() {
    // Each panicked ("capacity overflow", an overflowing multiply or sum) or, for the tenants, spent minutes
    // adding four billion of them before the thread count overflowed.
    let d = tmp("sizes");
    let load = |extra: &[&'static str]| -> Vec<&'static str> {
        let mut v = vec![
            "load",
            "--rows",
            "10",
            "--dim",
            "2",
            "--candidates",
            "5",
            "-k",
            "1",
            "--duration",
            "0.1",
        ];
        v.extend_from_slice(extra);
        v
    };
    let runs: Vec<Vec<&str>> = vec![
        vec![
            "demo",
            "--rows",
            "2",
            "--dim",
            "9223372036854775807",
            "--anchors",
            "1",
            "-k",
            "1",
        ],
        load(&["--batch", "18446744073709551615"]),
        load(&["--graph-degree", "18446744073709551615"]),
        load(&["--mix", "18446744073709551615,1,1,1"]),
        load(&[
            "--tenants",
            "4294967297",
            "--threads-per-tenant",
            "4294967297",
        ]),
        vec!["bench", "cosine", "--rows", "9223372036854775807"],
        vec![
            "bench",
            "knn",
            "--rows",
            "4",
            "--dim",
            "9223372036854775807",
        ],
    ];
    for args in &runs {
        let (code, err) = recall_within_a_minute(args, &d.join("stderr"));
        assert_eq!(code, Some(1), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    let _ = std::fs::remove_dir_all(&d);
}
