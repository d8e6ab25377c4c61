//! `recall knn`, `recall scores`, `recall spread`, `recall kmeans` on small files, run as the built binary on the CPU.
#![allow(clippy::unwrap_used)] // a test crate: helpers panic on failure like the tests do

use std::io::{Cursor, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use recall::io::{self, NpyData};
use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, ZipWriter};

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("recall-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn recall(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_recall"))
        .args(args)
        .env("RECALL_DEVICE", "cpu")
        .env_remove("RUST_BACKTRACE")
        .output()
        .unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn assert_ok(o: &Output) {
    assert!(
        o.status.success(),
        "stdout: {}\nstderr: {}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Failed, with exactly one line on stderr, `recall: ...`, and no backtrace.
fn assert_one_line_error(o: &Output, contains: &str) {
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("recall: "), "{err}");
    assert!(err.contains(contains), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

fn corpus() -> Vec<f32> {
    vec![
        1.0, 0.0, 0.0, 0.0, //
        0.0, 1.0, 0.0, 0.0, //
        0.0, 0.0, 1.0, 0.0, //
        0.0, 0.0, 0.0, 1.0, //
        1.0, 1.0, 0.0, 0.0,
    ]
}

fn write_fvecs(path: &Path, data: &[f32], dim: usize) {
    let mut b = Vec::new();
    for row in data.chunks(dim) {
        b.extend_from_slice(&(dim as i32).to_le_bytes());
        b.extend(row.iter().flat_map(|x| x.to_le_bytes()));
    }
    std::fs::write(path, b).unwrap();
}

#[test]
fn scores_writes_every_score_of_each_query() {
    let d = tmp("scores");
    io::write_npy(d.join("c.npy"), &corpus(), &[5, 4]).unwrap();
    let queries = [0.5f32, 0.0, 2.0, 0.0, /* q1 */ 1.0, 1.0, 0.0, 1.0];
    io::write_npy(d.join("q.npy"), &queries, &[2, 4]).unwrap();
    for (metric, want) in [
        // q . row for each row: the rows are the axes and (1, 1, 0, 0).
        ("dot", [0.5f32, 0.0, 2.0, 0.0, 0.5, 1.0, 1.0, 0.0, 1.0, 2.0]),
        // |q - row|^2.
        (
            "l2",
            [4.25f32, 5.25, 1.25, 5.25, 5.25, 2.0, 2.0, 4.0, 2.0, 1.0],
        ),
    ] {
        let out = d.join(metric);
        let o = recall(&[
            "scores",
            "--corpus",
            s(&d.join("c.npy")),
            "--queries",
            s(&d.join("q.npy")),
            "--metric",
            metric,
            "--out",
            s(&out),
        ]);
        assert_ok(&o);
        let line = String::from_utf8_lossy(&o.stdout);
        assert_eq!(line.lines().count(), 1, "{line}");
        assert!(
            line.contains("2 queries x 5 rows") && line.contains("cpu"),
            "{line}"
        );
        let scores = io::read_npy_matrix(out.join("scores.npy")).unwrap();
        assert_eq!((scores.n_rows, scores.dim), (2, 5), "{metric}");
        assert_eq!(scores.data, want, "{metric}");
    }
    // Queries of another dimension: one line, no panic.
    io::write_npy(d.join("q3.npy"), &[1.0f32, 2.0, 3.0], &[1, 3]).unwrap();
    let o = recall(&[
        "scores",
        "--corpus",
        s(&d.join("c.npy")),
        "--queries",
        s(&d.join("q3.npy")),
        "--out",
        s(&d.join("bad")),
    ]);
    assert_one_line_error(&o, "dimension");
}

#[test]
fn knn_finds_the_nearest_rows() {
    let d = tmp("knn");
    io::write_npy(d.join("c.npy"), &corpus(), &[5, 4]).unwrap();
    write_fvecs(&d.join("c.fvecs"), &corpus(), 4);
    let queries = [0.1f32, 0.0, 0.9, 0.0, /* q1 */ 0.9, 1.0, 0.0, 0.1];
    io::write_npy(d.join("q.npy"), &queries, &[2, 4]).unwrap();
    for corpus_file in ["c.npy", "c.fvecs"] {
        let out = d.join(format!("out-{corpus_file}"));
        let o = recall(&[
            "knn",
            "--corpus",
            s(&d.join(corpus_file)),
            "--queries",
            s(&d.join("q.npy")),
            "-k",
            "2",
            "--metric",
            "cosine",
            "--out",
            s(&out),
        ]);
        assert_ok(&o);
        let line = String::from_utf8_lossy(&o.stdout);
        assert_eq!(line.lines().count(), 1, "{line}");
        assert!(line.contains("cpu") && line.contains(" ms"), "{line}");
        let ids = io::read_npy(out.join("ids.npy")).unwrap();
        assert_eq!(ids.shape, vec![2, 2]);
        let NpyData::U32(ids) = ids.data else {
            panic!("ids are not uint32")
        };
        assert_eq!(ids[0], 2, "query 0's nearest row");
        assert_eq!(ids[2], 4, "query 1's nearest row");
        let scores = io::read_npy_matrix(out.join("scores.npy")).unwrap();
        assert_eq!((scores.n_rows, scores.dim), (2, 2));
        assert!(scores.data[0] >= scores.data[1]);
    }
    // l2: squared distances, lower first.
    let out = d.join("l2");
    let o = recall(&[
        "knn",
        "--corpus",
        s(&d.join("c.npy")),
        "--queries",
        s(&d.join("q.npy")),
        "-k",
        "1",
        "--metric",
        "l2",
        "--out",
        s(&out),
    ]);
    assert_ok(&o);
    let scores = io::read_npy_matrix(out.join("scores.npy")).unwrap();
    assert!((scores.data[0] - 0.02).abs() < 1e-6, "{:?}", scores.data);
    let _ = std::fs::remove_dir_all(&d);
}

fn zip_of(members: &[(&str, Vec<u8>)]) -> Vec<u8> {
    let mut w = ZipWriter::new(Cursor::new(Vec::new()));
    for (name, bytes) in members {
        w.start_file(
            *name,
            SimpleFileOptions::default().compression_method(CompressionMethod::Deflated),
        )
        .unwrap();
        w.write_all(bytes).unwrap();
    }
    w.finish().unwrap().into_inner()
}

/// A CSR `.npz` laid out like SciPy's `save_npz` (uint32 arrays, which the reader accepts next to
/// SciPy's int32/int64; `crates/recall/tests/io.rs` covers SciPy's exact dtypes).
fn graph_npz(indptr: &[u32], indices: &[u32], weights: &[f32], n: u32) -> Vec<u8> {
    zip_of(&[
        (
            "indptr.npy",
            io::npy_to_bytes(indptr, &[indptr.len()]).unwrap(),
        ),
        (
            "indices.npy",
            io::npy_to_bytes(indices, &[indices.len()]).unwrap(),
        ),
        (
            "data.npy",
            io::npy_to_bytes(weights, &[weights.len()]).unwrap(),
        ),
        ("shape.npy", io::npy_to_bytes(&[n, n], &[2]).unwrap()),
    ])
}

#[test]
fn spread_passes_activation_along_edges() {
    let d = tmp("spread");
    // 0 -> 1 (0.5), 1 -> 2 (1.0)
    std::fs::write(
        d.join("g.npz"),
        graph_npz(&[0, 1, 2, 2], &[1, 2], &[0.5, 1.0], 3),
    )
    .unwrap();
    io::write_npy(d.join("s.npy"), &[1f32, 0.0, 0.0], &[3]).unwrap();
    let out = d.join("out");
    let o = recall(&[
        "spread",
        "--graph",
        s(&d.join("g.npz")),
        "--seeds",
        s(&d.join("s.npy")),
        "--decay",
        "1.0",
        "--threshold",
        "0",
        "--hops",
        "1",
        "-k",
        "2",
        "--out",
        s(&out),
    ]);
    assert_ok(&o);
    let act = io::read_npy_vector(out.join("activation.npy")).unwrap();
    assert_eq!(act, vec![1.0, 0.5, 0.0]);
    let top = io::read_npy(out.join("top_ids.npy")).unwrap();
    assert_eq!(top.data, NpyData::U32(vec![0, 1]));
    assert_eq!(
        io::read_npy_vector(out.join("top_scores.npy")).unwrap(),
        vec![1.0, 0.5]
    );

    // Not a valid graph: indptr decreases.
    std::fs::write(
        d.join("bad.npz"),
        graph_npz(&[0, 2, 1, 2], &[1, 2], &[0.5, 1.0], 3),
    )
    .unwrap();
    let o = recall(&[
        "spread",
        "--graph",
        s(&d.join("bad.npz")),
        "--seeds",
        s(&d.join("s.npy")),
        "--decay",
        "1.0",
        "--threshold",
        "0",
        "--hops",
        "1",
        "--out",
        s(&out),
    ]);
    assert_one_line_error(&o, "invalid graph");
    // Seeds of the wrong length.
    io::write_npy(d.join("s2.npy"), &[1f32, 0.0], &[2]).unwrap();
    let o = recall(&[
        "spread",
        "--graph",
        s(&d.join("g.npz")),
        "--seeds",
        s(&d.join("s2.npy")),
        "--decay",
        "1.0",
        "--threshold",
        "0",
        "--hops",
        "1",
        "--out",
        s(&out),
    ]);
    assert_one_line_error(&o, "2 seeds for a graph of 3 nodes");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn kmeans_writes_centroids_assignments_and_inertia() {
    let d = tmp("kmeans");
    let pts = [
        0.0f32, 0.0, 0.1, 0.0, 0.0, 0.1, 10.0, 10.0, 10.1, 10.0, 10.0, 10.1,
    ];
    io::write_npy(d.join("x.npy"), &pts, &[6, 2]).unwrap();
    let out = d.join("out");
    let o = recall(&[
        "kmeans",
        "--data",
        s(&d.join("x.npy")),
        "-k",
        "2",
        "--iters",
        "5",
        "--seed",
        "7",
        "--out",
        s(&out),
    ]);
    assert_ok(&o);
    let c = io::read_npy_matrix(out.join("centroids.npy")).unwrap();
    assert_eq!((c.n_rows, c.dim), (2, 2));
    let a = io::read_npy(out.join("assignments.npy")).unwrap();
    assert_eq!(a.shape, vec![6]);
    let NpyData::U32(a) = a.data else {
        panic!("assignments are not uint32")
    };
    assert!(
        a[0] == a[1] && a[1] == a[2] && a[3] == a[4] && a[4] == a[5] && a[0] != a[3],
        "{a:?}"
    );
    let inertia = io::read_npy(out.join("inertia.npy")).unwrap();
    assert_eq!(inertia.shape, vec![5]);
    assert!(matches!(inertia.data, NpyData::F64(_)));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn bad_inputs_are_one_line_errors() {
    let d = tmp("bad");
    std::fs::write(d.join("junk.npy"), b"\x93NUMPY\x01\x00\xff\xff{'descr'").unwrap();
    io::write_npy(d.join("q.npy"), &[1f32, 0.0], &[1, 2]).unwrap();
    io::write_npy(d.join("q3.npy"), &[1f32, 0.0, 0.0], &[1, 3]).unwrap();
    let out = d.join("out");
    let knn = |corpus: &str, q: &str, k: &str| {
        recall(&[
            "knn",
            "--corpus",
            corpus,
            "--queries",
            q,
            "-k",
            k,
            "--out",
            s(&out),
        ])
    };
    let q = d.join("q.npy");
    assert_one_line_error(
        &knn(s(&d.join("junk.npy")), s(&q), "1"),
        "junk.npy: truncated",
    );
    assert_one_line_error(&knn(s(&d.join("missing.npy")), s(&q), "1"), "missing.npy");
    assert_one_line_error(&knn(s(&d.join("c.csv")), s(&q), "1"), "unknown file type");
    assert_one_line_error(&knn(s(&q), s(&d.join("q3.npy")), "1"), "dimension");
    assert_one_line_error(&knn(s(&q), s(&q), "5"), "invalid input");
    std::fs::write(d.join("g.npz"), b"PK\x03\x04 not really").unwrap();
    let o = recall(&[
        "spread",
        "--graph",
        s(&d.join("g.npz")),
        "--seeds",
        s(&q),
        "--decay",
        "0.5",
        "--threshold",
        "0",
        "--hops",
        "2",
        "--out",
        s(&out),
    ]);
    assert_one_line_error(&o, "bad .npz archive");
    let o = recall(&[
        "kmeans",
        "--data",
        s(&d.join("junk.npy")),
        "-k",
        "2",
        "--iters",
        "1",
        "--out",
        s(&out),
    ]);
    assert_one_line_error(&o, "junk.npy");
    // Argument errors: clap's message, exit code 2, no output folder made.
    let o = recall(&["knn", "--corpus", s(&q)]);
    assert_eq!(o.status.code(), Some(2));
    assert!(!out.exists());
    let _ = std::fs::remove_dir_all(&d);
}
