//! Corpus and graph handles on the CPU: the same answers as the slice calls, built from slices and from
//! files, with typed errors for bad data. Runs everywhere.

use recall::io::{self, IoError};
use recall::{DevicePolicy, Engine, Error, Metric, SpreadGraph, SpreadParams};

fn cpu_engine() -> Engine {
    Engine::builder()
        .device(DevicePolicy::Cpu)
        .build()
        .expect("a CPU engine always builds")
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("recall-handles-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// A graph with a hub, a chain and an isolated node.
fn csr(n: usize) -> (Vec<usize>, Vec<u32>, Vec<f32>) {
    let mut indptr = vec![0];
    let mut indices = Vec::new();
    let mut weights = Vec::new();
    for u in 0..n {
        if u + 1 < n - 1 {
            indices.push((u + 1) as u32);
            weights.push(0.5 + (u % 3) as f32 * 0.25);
        }
        if u % 4 == 0 && u != 0 && u != n - 1 {
            indices.push(0);
            weights.push(0.9);
        }
        indptr.push(indices.len());
    }
    (indptr, indices, weights)
}

#[test]
fn graph_handle_gives_the_slice_answer_every_time() {
    let e = cpu_engine();
    let n = 40;
    let (p, i, w) = csr(n);
    let graph = SpreadGraph::from_csr(&p, &i, &w).unwrap();
    let handle = e.graph(&p, &i, &w).unwrap();
    assert_eq!((handle.n_nodes(), handle.n_edges()), (n, i.len()));
    for (seed_node, decay, threshold, hops) in
        [(0, 0.5, 0.01, 3), (7, 1.0, 0.0, 5), (39, 0.9, 1e-3, 1)]
    {
        let mut seeds = vec![0.0f32; n];
        seeds[seed_node] = 1.0;
        seeds[(seed_node + 13) % n] = 0.25;
        let params = SpreadParams {
            decay,
            threshold,
            hops,
            k: 5,
        };
        let a = e.spread(&graph, &seeds, &params).unwrap();
        let b = e.spread_in(&handle, &seeds, &params).unwrap();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&a.activation), bits(&b.activation));
        assert_eq!(a.top, b.top);
        assert_eq!(b.device, recall::Device::Cpu);
        assert!(
            b.activation[seed_node] >= 1.0,
            "a seed keeps its own activation"
        );
    }
}

#[test]
fn graph_handle_rejects_bad_graphs_and_bad_calls() {
    let e = cpu_engine();
    assert!(matches!(
        e.graph(&[0, 1], &[3], &[1.0]),
        Err(Error::InvalidInput(_))
    ));
    assert!(matches!(
        e.graph(&[0, 1], &[0], &[-1.0]),
        Err(Error::InvalidInput(_))
    ));
    let (p, i, w) = csr(10);
    let g = e.graph(&p, &i, &w).unwrap();
    let params = SpreadParams {
        decay: 0.5,
        threshold: 0.0,
        hops: 2,
        k: 3,
    };
    assert!(matches!(
        e.spread_in(&g, &[1.0; 9], &params),
        Err(Error::InvalidInput(_))
    ));
    assert!(matches!(
        e.spread_in(&g, &[f32::NAN; 10], &params),
        Err(Error::InvalidInput(_))
    ));
    let zero_decay = SpreadParams {
        decay: 0.0,
        ..params
    };
    assert!(matches!(
        e.spread_in(&g, &[1.0; 10], &zero_decay),
        Err(Error::InvalidInput(_))
    ));
}

#[test]
fn graph_handle_from_a_scipy_npz_matches_the_csr_slices() {
    // The .npz is written the way scipy.sparse.save_npz writes it (through recall's own .npy writer).
    let (p, i, w) = csr(25);
    let dir = temp_dir("npz");
    let path = dir.join("g.npz");
    let member = |name: &str, bytes: Vec<u8>| (name.to_string(), bytes);
    let p64: Vec<i64> = p.iter().map(|&x| x as i64).collect();
    let i32s: Vec<i32> = i.iter().map(|&x| x as i32).collect();
    let members = vec![
        member(
            "indices.npy",
            io::npy_to_bytes(&i32s, &[i32s.len()]).unwrap(),
        ),
        member("indptr.npy", io::npy_to_bytes(&p64, &[p64.len()]).unwrap()),
        member("format.npy", npy_bytes_s3(b"csr")),
        member("shape.npy", io::npy_to_bytes(&[25i64, 25], &[2]).unwrap()),
        member("data.npy", io::npy_to_bytes(&w, &[w.len()]).unwrap()),
    ];
    std::fs::write(&path, zip_stored(&members)).unwrap();
    let from_file = io::read_graph(&path).unwrap();
    let from_slices = cpu_engine().graph(&p, &i, &w).unwrap();
    assert_eq!(from_file.n_edges(), from_slices.n_edges());
    let e = cpu_engine();
    let mut seeds = vec![0.0f32; 25];
    seeds[4] = 1.0;
    let params = SpreadParams {
        decay: 0.7,
        threshold: 0.0,
        hops: 4,
        k: 4,
    };
    let a = e.spread_in(&from_file, &seeds, &params).unwrap();
    let b = e.spread_in(&from_slices, &seeds, &params).unwrap();
    assert_eq!(a, b);
    // A file that is not a graph is a typed error naming the path.
    let bad = dir.join("bad.npz");
    std::fs::write(&bad, b"not a zip").unwrap();
    let err = io::read_graph(&bad).unwrap_err();
    assert!(matches!(err, IoError::Zip { .. }), "{err}");
    assert!(err.to_string().contains("bad.npz"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn corpus_handle_from_an_npy_file_matches_the_slice_call() {
    let dir = temp_dir("npy");
    let dim = 6;
    let data: Vec<f32> = (0..30 * dim)
        .map(|i| ((i * 17 % 23) as f32) - 11.0)
        .collect();
    let path = dir.join("corpus.npy");
    io::write_npy(&path, &data, &[30, dim]).unwrap();
    let corpus = io::read_corpus(&path).unwrap();
    assert_eq!((corpus.n_rows(), corpus.dim()), (30, dim));
    let e = cpu_engine();
    let queries = &data[3 * dim..5 * dim];
    for metric in [Metric::Cosine, Metric::Dot, Metric::L2] {
        let a = e.knn(queries, &data, dim, metric, 4).unwrap();
        let b = e.knn_in(queries, &corpus, metric, 4).unwrap();
        assert_eq!(a, b);
    }
    // NaN in the file: a typed error that names the file.
    let mut nan = data.clone();
    nan[7] = f32::NAN;
    let bad = dir.join("nan.npy");
    io::write_npy(&bad, &nan, &[30, dim]).unwrap();
    let err = io::read_corpus(&bad).unwrap_err();
    assert!(matches!(err, IoError::Corpus { .. }), "{err}");
    assert!(err.to_string().contains("nan.npy"), "{err}");
    // A 1-D array is not a corpus.
    io::write_npy(dir.join("v.npy"), &data, &[data.len()]).unwrap();
    assert!(matches!(
        io::read_corpus(dir.join("v.npy")),
        Err(IoError::WrongShape { .. })
    ));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `np.array(b"csr")` saved: dtype `|S3`, shape `()`.
fn npy_bytes_s3(s: &[u8]) -> Vec<u8> {
    let dict = "{'descr': '|S3', 'fortran_order': False, 'shape': (), }";
    let mut header = dict.to_string();
    while !(10 + header.len() + 1).is_multiple_of(64) {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(s);
    out
}

fn zip_stored(members: &[(String, Vec<u8>)]) -> Vec<u8> {
    use std::io::Write as _;
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let opts =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for (name, bytes) in members {
        w.start_file(name.as_str(), opts).expect("zip member");
        w.write_all(bytes).expect("zip write");
    }
    w.finish().expect("zip finish").into_inner()
}

#[test]
fn npz_writer_round_trips_through_the_reader() {
    let (p, i, w) = csr(30);
    let bytes = io::npz_csr_to_bytes(&p, &i, &w, 30).unwrap();
    let back = io::npz_csr_from_bytes(&bytes).unwrap();
    assert_eq!(
        (back.indptr, back.indices, back.weights, back.n_nodes),
        (p.clone(), i.clone(), w.clone(), 30)
    );
    // Shapes that do not fit together are refused before anything is written.
    assert!(matches!(
        io::npz_csr_to_bytes(&p, &i, &w, 31),
        Err(IoError::BadWrite { .. })
    ));
    assert!(matches!(
        io::npz_csr_to_bytes(&p, &i, &w[1..], 30),
        Err(IoError::BadWrite { .. })
    ));
}

/// When python3 with SciPy is installed, `scipy.sparse.load_npz` reads what we wrote.
#[test]
fn scipy_reads_our_npz_when_installed() {
    let has_scipy = std::process::Command::new("python3")
        .args(["-c", "import scipy.sparse"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !has_scipy {
        eprintln!(
            "skipping scipy_reads_our_npz_when_installed: python3 with scipy is not available"
        );
        return;
    }
    let dir = temp_dir("scipy");
    let path = dir.join("g.npz");
    io::write_npz_csr(&path, &[0, 2, 3, 3], &[1, 2, 0], &[0.5, 1.0, 0.25], 3).unwrap();
    let script = "import scipy.sparse as sp, sys\n\
        m = sp.load_npz(sys.argv[1]); assert m.format == 'csr' and m.shape == (3, 3)\n\
        assert list(m.indptr) == [0, 2, 3, 3] and list(m.indices) == [1, 2, 0]\n\
        assert list(m.data) == [0.5, 1.0, 0.25]\n";
    let out = std::process::Command::new("python3")
        .args(["-c", script, path.to_str().unwrap()])
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn spread_from_a_seed_list_is_spread_in_with_the_dense_vector() {
    let e = cpu_engine();
    let n = 40;
    let (p, i, w) = csr(n);
    let g = e.graph(&p, &i, &w).unwrap();
    let params = SpreadParams {
        decay: 0.5,
        threshold: 0.01,
        hops: 3,
        k: 5,
    };
    // Any order, a -0.0 value (no seed), a seed on the isolated last node.
    let list = [(39u32, 0.25f32), (4, 1.0), (0, -0.0), (17, 0.75)];
    let mut dense = vec![0.0f32; n];
    for &(v, x) in &list {
        dense[v as usize] = x;
    }
    let a = e.spread_from(&g, &list, &params).unwrap();
    let b = e.spread_in(&g, &dense, &params).unwrap();
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&a.activation), bits(&b.activation));
    assert_eq!(a.top, b.top);
    assert_eq!(a.device, recall::Device::Cpu);
    // No seeds: nothing is activated.
    let none = e.spread_from(&g, &[], &params).unwrap();
    assert!(none.activation.iter().all(|x| x.to_bits() == 0));
    // Bad lists are typed errors naming what is wrong.
    for (bad, says) in [
        (&[(40u32, 1.0f32)][..], "out of range"),
        (&[(1, f32::NAN)], "NaN"),
        (&[(1, -1.0)], "negative"),
        (&[(3, 1.0), (5, 1.0), (3, 0.5)], "node 3 twice"),
    ] {
        match e.spread_from(&g, bad, &params) {
            Err(err @ Error::InvalidInput(_)) => {
                assert!(err.to_string().contains(says), "{bad:?}: {err}")
            }
            other => panic!("{bad:?}: {other:?}"),
        }
    }
}
