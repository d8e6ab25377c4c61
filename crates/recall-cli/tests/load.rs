//! `recall load` on the CPU: a short run at tiny sizes, its summary, and its refusals.
#![allow(clippy::unwrap_used)] // a test crate: helpers panic on failure like the tests do

use std::process::{Command, Output};

fn recall(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_recall"))
        .args(args)
        .env("RECALL_DEVICE", "cpu")
        .env_remove("RUST_BACKTRACE")
        .output()
        .unwrap()
}

/// The number after `"key": ` in the JSON summary (the first occurrence).
fn number(json: &str, key: &str) -> f64 {
    let at = json
        .find(&format!("\"{key}\": "))
        .unwrap_or_else(|| panic!("no {key} in {json}"));
    let rest = &json[at + key.len() + 4..];
    let end = rest.find([',', '}', '\n']).unwrap();
    rest[..end]
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{key}: {}", &rest[..end]))
}

#[test]
fn a_short_cpu_run_passes_and_says_so() {
    let dir = std::env::temp_dir().join(format!("recall-load-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("load.json");
    let o = recall(&[
        "load",
        "--rows",
        "3000",
        "--dim",
        "32",
        "--tenants",
        "4",
        "--threads-per-tenant",
        "2",
        "--duration",
        "1",
        "--candidates",
        "200",
        "--verify",
        "32",
        "--out",
        out.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "stdout: {stdout}\nstderr: {stderr}");
    assert!(stdout.contains("## recall load: PASSED"), "{stdout}");
    let json = std::fs::read_to_string(&out).unwrap();
    assert!(json.contains("\"passed\": true"), "{json}");
    assert_eq!(number(&json, "errors"), 0.0);
    assert_eq!(number(&json, "mismatches"), 0.0);
    assert_eq!(number(&json, "gpu_calls"), 0.0);
    assert!(number(&json, "calls") > 0.0);
    // Every kind of call ran and had answers checked against the CPU.
    for op in ["knn_single", "knn_batch", "score_candidates", "spread"] {
        let at = json.find(&format!("\"{op}\": {{")).unwrap();
        let entry = &json[at..];
        assert!(number(entry, "calls") >= 1.0, "{op}: {entry}");
        assert!(number(entry, "verified") >= 1.0, "{op}: {entry}");
        assert_eq!(number(entry, "mismatches"), 0.0, "{op}");
    }
    assert!(json.contains("\"check\": \"host RSS released (start -> end)\""));
    assert!(!json.contains("\"ok\": false"), "{json}");
    // Markdown when asked for.
    let md = dir.join("load.md");
    let o = recall(&[
        "load",
        "--rows",
        "500",
        "--dim",
        "8",
        "--tenants",
        "2",
        "--threads-per-tenant",
        "3",
        "--tenant-max-running",
        "1",
        "--duration",
        "0.3",
        "--candidates",
        "50",
        "--mix",
        "0,0,1,1",
        "--out",
        md.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(&md).unwrap();
    // Three threads per tenant under a cap of one running call: the setting reaches the run, and every call is
    // still answered (none waits forever for a turn).
    assert!(text.contains("tenant_max_running=1"), "{text}");
    assert!(text.contains("## recall load: PASSED"), "{text}");
    assert!(text.contains("| knn_single | 0 |"), "{text}");
    assert!(text.contains("| spread |"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The `"ok"` of the memory check named `name` in the JSON summary, if the summary has that check.
fn check_ok(json: &str, name: &str) -> Option<bool> {
    let at = json.find(&format!("\"check\": \"{name}\""))?;
    let entry = &json[at..];
    let entry = &entry[..entry.find('}').unwrap()];
    Some(entry.contains("\"ok\": true"))
}

/// Many caller threads, a tight tolerance: the heap in use comes back to where it started. Each thread's own
/// account (its latency histograms, 64 KiB) once stayed alive until the end of the run, so 256 threads left
/// 16 MiB in the heap at the end measurement and failed this check.
#[test]
fn many_threads_leave_the_heap_where_it_started() {
    let dir = std::env::temp_dir().join(format!("recall-load-heap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("load.json");
    let o = recall(&[
        "load",
        "--rows",
        "500",
        "--dim",
        "8",
        "--tenants",
        "4",
        "--threads-per-tenant",
        "64",
        "--duration",
        "0.5",
        "--candidates",
        "50",
        "--mix",
        "1,1,1,1",
        "--verify",
        "16",
        "--mem-tolerance-mib",
        "4",
        "--out",
        out.to_str().unwrap(),
    ]);
    let json = std::fs::read_to_string(&out).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let stderr = String::from_utf8_lossy(&o.stderr);
    // Where the heap in use cannot be read (not glibc), RSS decides, and 4 MiB is too tight for it: nothing
    // to check there.
    let Some(released) = check_ok(&json, "host heap in use released (start -> end)") else {
        eprintln!("skipped: the heap in use cannot be read here (not glibc)");
        return;
    };
    assert!(released, "{json}");
    assert_eq!(
        check_ok(&json, "host heap in use under load (loaded -> after load)"),
        Some(true),
        "{json}"
    );
    assert!(o.status.success(), "{json}\nstderr: {stderr}");
}

#[test]
fn bad_arguments_are_one_line_errors() {
    for (args, says) in [
        (vec!["--mix", "0,0,0,0"], "at least one weight"),
        (vec!["--mix", "1,2"], "four weights"),
        (
            vec!["--rows", "10", "--candidates", "20"],
            "more than the corpus",
        ),
        (vec!["--duration", "0"], "--duration"),
        (vec!["-k", "0"], "-k 0"),
    ] {
        let mut all = vec!["load"];
        all.extend(args);
        let o = recall(&all);
        assert!(!o.status.success());
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with("recall: ") && err.contains(says), "{err}");
    }
}
