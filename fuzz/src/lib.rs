//! The checks behind recall's fuzz targets (`fuzz_targets/*.rs` call one function each).
//!
//! Every check holds for any input: a malformed input is a typed error, never a panic, an abort, a hang or
//! an allocation the input does not back (the runs set `-malloc_limit_mb` and `-timeout`, and ASan watches
//! every read); a well-formed one round-trips where the format allows it, and a validator's verdict equals
//! a plain statement of its rules. A panic here is a finding. `crates/recall/tests/io.rs` and
//! `crates/recall/tests/hostile_validation.rs` run the same kinds of cases (10,000 each) in `cargo test`.

use arbitrary::Arbitrary;
use recall::io::{self, CsrGraph, Matrix, NpyArray, NpyData};
use recall::{DevicePolicy, Engine, Error, Metric, SpreadGraph, SpreadParams};
use recall_cpu_simd::{Corpus, CpuError};
use std::io::{Cursor, Write};
use std::sync::OnceLock;
use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, ZipWriter};

mod rules;
pub use rules::csr_is_valid;
use rules::{Cand, Csr, candidates_are_valid, edit_candidates, edit_csr};

fn engine() -> &'static Engine {
    static E: OnceLock<Engine> = OnceLock::new();
    E.get_or_init(|| {
        Engine::builder()
            .device(DevicePolicy::Cpu)
            .build()
            .expect("a CPU engine always builds")
    })
}

// ---------------------------------------------------------------------------------------------------
// .npy

/// Element bits, so that NaN payloads compare equal to themselves.
fn data_bits(d: &NpyData) -> (u8, Vec<u64>) {
    match d {
        NpyData::F32(v) => (0, v.iter().map(|x| u64::from(x.to_bits())).collect()),
        NpyData::F64(v) => (1, v.iter().map(|x| x.to_bits()).collect()),
        NpyData::I32(v) => (2, v.iter().map(|x| *x as u32 as u64).collect()),
        NpyData::I64(v) => (3, v.iter().map(|x| *x as u64).collect()),
        NpyData::U32(v) => (4, v.iter().map(|x| u64::from(*x)).collect()),
        NpyData::U64(v) => (5, v.clone()),
        NpyData::Text(v) => (6, v.iter().map(|x| u64::from(*x)).collect()),
    }
}

fn same_array(a: &NpyArray, b: &NpyArray) -> bool {
    a.dtype == b.dtype && a.shape == b.shape && data_bits(&a.data) == data_bits(&b.data)
}

/// Any bytes as a `.npy`: from memory and from a stream the verdict is the same; what reads writes back
/// to an array that reads the same.
pub fn check_npy(data: &[u8]) {
    let from_bytes = io::npy_from_bytes(data);
    let from_reader = io::npy_from_reader(data);
    match (&from_bytes, &from_reader) {
        (Ok(a), Ok(b)) => assert!(same_array(a, b), "bytes and reader read different arrays"),
        (Err(_), Err(_)) => {}
        (a, b) => panic!(
            "from bytes and from a reader disagree: {:?} / {:?}",
            a.as_ref().map(|x| &x.shape),
            b.as_ref().map(|x| &x.shape)
        ),
    }
    let Ok(a) = from_bytes else { return };
    let count = a
        .shape
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .expect("a read array's shape does not overflow");
    if !matches!(a.data, NpyData::Text(_)) {
        assert_eq!(data_bits(&a.data).1.len() as u64, count, "element count");
    }
    round_trip_npy(&a);
    // Every conversion is a typed result.
    let _ = a.to_text();
    let _ = a.clone().into_indices();
    let _ = a.clone().into_u32_indices();
    let _ = a.clone().into_f32_lossy();
    let _ = a.clone().into_f32_vector();
    if let Ok(m) = a.into_f32_matrix() {
        assert_eq!(Some(m.data.len()), m.n_rows.checked_mul(m.dim));
    }
}

fn round_trip_npy(a: &NpyArray) {
    let Ok(shape) = a
        .shape
        .iter()
        .map(|&d| usize::try_from(d))
        .collect::<Result<Vec<usize>, _>>()
    else {
        return;
    };
    let bytes = match &a.data {
        NpyData::F32(v) => io::npy_to_bytes(v, &shape),
        NpyData::F64(v) => io::npy_to_bytes(v, &shape),
        NpyData::I32(v) => io::npy_to_bytes(v, &shape),
        NpyData::I64(v) => io::npy_to_bytes(v, &shape),
        NpyData::U32(v) => io::npy_to_bytes(v, &shape),
        NpyData::U64(v) => io::npy_to_bytes(v, &shape),
        NpyData::Text(_) => return,
    };
    let bytes = bytes.expect("an array that was read can be written");
    let b = io::npy_from_bytes(&bytes).expect("what recall writes, recall reads");
    assert!(same_array(a, &b), "npy round trip changed the array");
}

// ---------------------------------------------------------------------------------------------------
// .fvecs

fn encode_fvecs(m: &Matrix) -> Vec<u8> {
    let mut out = Vec::with_capacity(m.n_rows * (4 + 4 * m.dim));
    for row in m.data.chunks(m.dim.max(1)) {
        out.extend_from_slice(&(m.dim as i32).to_le_bytes());
        for x in row {
            out.extend_from_slice(&x.to_le_bytes());
        }
    }
    out
}

/// Any bytes as an `.fvecs`: the same verdict from memory and a stream; a file that reads is exactly
/// the encoding of what was read (the format has no freedom).
pub fn check_fvecs(data: &[u8]) {
    let from_bytes = io::fvecs_from_bytes(data);
    let from_reader = io::fvecs_from_reader(data);
    match (&from_bytes, &from_reader) {
        (Ok(a), Ok(b)) => assert_eq!(encode_fvecs(a), encode_fvecs(b)),
        (Err(_), Err(_)) => {}
        (a, b) => panic!(
            "from bytes and from a reader disagree: {:?} / {:?}",
            a.as_ref().map(|m| (m.n_rows, m.dim)),
            b.as_ref().map(|m| (m.n_rows, m.dim))
        ),
    }
    if let Ok(m) = from_bytes {
        assert!(m.dim >= 1 && m.n_rows >= 1);
        assert_eq!(m.data.len(), m.n_rows * m.dim);
        assert_eq!(encode_fvecs(&m), data, "fvecs round trip");
    }
}

// ---------------------------------------------------------------------------------------------------
// SciPy CSR .npz

/// A SciPy-layout `.npz` of `csr` (uint64 indptr and shape, uint32 indices, float32 data).
pub fn csr_npz(csr: &CsrGraph, method: CompressionMethod) -> Vec<u8> {
    let n = csr.n_nodes as u64;
    let indptr: Vec<u64> = csr.indptr.iter().map(|&x| x as u64).collect();
    let members = [
        ("indptr.npy", io::npy_to_bytes(&indptr, &[indptr.len()])),
        (
            "indices.npy",
            io::npy_to_bytes(&csr.indices, &[csr.indices.len()]),
        ),
        (
            "data.npy",
            io::npy_to_bytes(&csr.weights, &[csr.weights.len()]),
        ),
        ("shape.npy", io::npy_to_bytes(&[n, n], &[2])),
    ];
    let mut w = ZipWriter::new(Cursor::new(Vec::new()));
    for (name, bytes) in members {
        let bytes = bytes.expect("1-d arrays always write");
        w.start_file(
            name,
            SimpleFileOptions::default().compression_method(method),
        )
        .expect("zip member");
        w.write_all(&bytes).expect("zip write");
    }
    w.finish().expect("zip finish").into_inner()
}

/// Any bytes as a SciPy CSR `.npz`: a typed error, or arrays of consistent lengths whose graph validates
/// exactly when the rules say so, and that read back the same after writing them as SciPy would.
pub fn check_npz(data: &[u8]) {
    let Ok(csr) = io::npz_csr_from_bytes(data) else {
        return;
    };
    assert_eq!(csr.indptr.len(), csr.n_nodes + 1);
    assert_eq!(csr.indices.len(), csr.weights.len());
    let graph = csr.to_spread_graph();
    assert_eq!(
        graph.is_ok(),
        csr_is_valid(&csr.indptr, &csr.indices, &csr.weights),
        "{:?}",
        graph.err()
    );
    for method in [CompressionMethod::Stored, CompressionMethod::Deflated] {
        let back = io::npz_csr_from_bytes(&csr_npz(&csr, method)).expect("a written npz reads");
        assert_eq!(
            (&back.indptr, &back.indices, back.n_nodes),
            (&csr.indptr, &csr.indices, csr.n_nodes)
        );
        assert_eq!(bits(&back.weights), bits(&csr.weights));
    }
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

// ---------------------------------------------------------------------------------------------------
// CSR validation

/// A CSR graph: a valid one built from `edges`, then edited (or taken raw), and spreading parameters.
#[derive(Debug, Arbitrary)]
pub struct CsrInput {
    n: u8,
    edges: Vec<(u32, u32, u8)>,
    edits: Vec<(u8, u8, usize, u64)>,
    raw: Option<(Vec<usize>, Vec<u32>, Vec<f32>)>,
    params: (u8, u8, u8, u8),
}

fn build_csr(n: usize, edges: &[(u32, u32, u8)]) -> Csr {
    let mut e: Vec<(u32, u32, f32)> = edges
        .iter()
        .take(256)
        .map(|&(s, t, w)| (s % n as u32, t % n as u32, f32::from(w) / 64.0))
        .collect();
    e.sort_by_key(|x| x.0);
    let mut indptr = vec![0usize; n + 1];
    for &(s, ..) in &e {
        indptr[s as usize + 1] += 1;
    }
    for i in 0..n {
        indptr[i + 1] += indptr[i];
    }
    (
        indptr,
        e.iter().map(|x| x.1).collect(),
        e.iter().map(|x| x.2).collect(),
    )
}

/// `from_csr`'s verdict equals the rules; a graph that validates spreads (through the engine and through
/// cpu-simd, with the same bits) exactly when the parameters are in range.
pub fn check_csr(input: CsrInput) {
    let (indptr, indices, weights) = match input.raw {
        Some(raw) => raw,
        None => {
            let n = 1 + usize::from(input.n % 32);
            let mut g = build_csr(n, &input.edges);
            for e in input.edits.into_iter().take(8) {
                edit_csr(&mut g, e);
            }
            g
        }
    };
    let valid = csr_is_valid(&indptr, &indices, &weights);
    let graph = match SpreadGraph::from_csr(&indptr, &indices, &weights) {
        Ok(g) => {
            assert!(valid, "accepted an invalid graph");
            g
        }
        Err(_) => {
            assert!(!valid, "refused a valid graph");
            return;
        }
    };
    let n = indptr.len() - 1;
    assert_eq!((graph.n_nodes(), graph.n_edges()), (n, indices.len()));
    let (d, t, h, k) = input.params;
    let params = SpreadParams {
        decay: f32::from(d) / 128.0,
        threshold: f32::from(t) / 64.0 - 0.5,
        hops: usize::from(h % 5),
        k: usize::from(k) % (n + 2),
    };
    let params_ok = params.decay > 0.0
        && params.decay <= 1.0
        && params.threshold >= 0.0
        && params.hops >= 1
        && (1..=n).contains(&params.k);
    let mut seeds = vec![0.0f32; n];
    seeds[usize::from(d) % n] = 1.0;
    let via_engine = engine().spread(&graph, &seeds, &params);
    let direct = recall_cpu_simd::spread(&graph, &seeds, &params);
    match (via_engine, direct) {
        (Ok(a), Ok(b)) => {
            assert!(params_ok, "spread accepted {params:?}");
            assert_eq!(a.activation.len(), n);
            assert_eq!(bits(&a.activation), bits(&b.activation));
            assert_eq!((a.top.k, &a.top.ids), (params.k, &b.top.ids));
            assert!(a.top.ids.iter().all(|&i| (i as usize) < n));
        }
        (Err(Error::InvalidInput(CpuError::ActivationOverflow { .. })), Err(_)) => {}
        (Err(Error::InvalidInput(_)), Err(_)) => assert!(!params_ok, "spread refused {params:?}"),
        (a, b) => panic!("the engine and cpu-simd disagree: {a:?} / {b:?}"),
    }
}

// ---------------------------------------------------------------------------------------------------
// Candidate id lists (score_candidates)

/// A valid candidate-scoring call built from the numbers, then edited.
#[derive(Debug, Arbitrary)]
pub struct CandidatesInput {
    nq: u8,
    n: u8,
    dim: u8,
    lens: Vec<u8>,
    k: u8,
    seed: u64,
    metric: u8,
    edits: Vec<(u8, u8, usize, u64)>,
}

fn build_candidates(x: &CandidatesInput) -> Cand {
    let (nq, n, dim) = (
        1 + usize::from(x.nq % 6),
        1 + usize::from(x.n % 40),
        1 + usize::from(x.dim % 9),
    );
    let mut s = x.seed | 1;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    };
    let queries = (0..nq * dim).map(|_| next()).collect();
    let corpus = (0..n * dim).map(|_| next()).collect();
    let mut offsets = vec![0];
    let mut ids = Vec::new();
    for q in 0..nq {
        let len = 1 + usize::from(x.lens.get(q).copied().unwrap_or(3)) % n;
        let step = 1 + q * 2;
        // Distinct when gcd(step, n) = 1; otherwise a duplicate the validator must catch.
        ids.extend((0..len).map(|i| ((q * 7 + i * step) % n) as u32));
        offsets.push(ids.len());
    }
    let shortest = offsets.windows(2).map(|w| w[1] - w[0]).min().unwrap_or(1);
    Cand {
        queries,
        corpus,
        dim,
        offsets,
        ids,
        k: 1 + usize::from(x.k) % shortest,
    }
}

/// `score_candidates` through the engine (the executor's checks) and through cpu-simd (its own): each
/// verdict equals the rules; when both run, the same answer, each query's hits drawn from its list, best
/// first.
pub fn check_candidates(input: CandidatesInput) {
    let mut c = build_candidates(&input);
    for e in input.edits.iter().take(8) {
        edit_candidates(&mut c, *e, (8, 9));
    }
    let metric = [Metric::Cosine, Metric::Dot, Metric::L2][usize::from(input.metric % 3)];
    let valid = candidates_are_valid(&c);
    let got = engine().score_candidates(
        &c.queries, &c.corpus, c.dim, metric, &c.offsets, &c.ids, c.k,
    );
    let direct = if c.dim == 0 {
        Err(CpuError::ZeroDim)
    } else {
        recall_cpu_simd::score_candidates(
            &c.queries,
            &Corpus::f32(&c.corpus, c.dim),
            metric,
            &c.offsets,
            &c.ids,
            c.k,
        )
    };
    assert_eq!(direct.is_ok(), valid, "cpu-simd: {direct:?}");
    match (got, direct) {
        (Ok(hits), Ok(direct)) => {
            assert!(valid, "the engine accepted invalid candidates");
            assert_eq!(hits.ids, direct.ids);
            assert_eq!(bits(&hits.scores), bits(&direct.scores));
            let nq = c.offsets.len() - 1;
            assert_eq!(hits.n_queries(), nq);
            for q in 0..nq {
                let list = &c.ids[c.offsets[q]..c.offsets[q + 1]];
                let (ids, scores) = hits.query(q);
                assert!(ids.iter().all(|i| list.contains(i)));
                let ordered = match metric {
                    Metric::L2 => scores.windows(2).all(|w| w[0] <= w[1]),
                    _ => scores.windows(2).all(|w| w[0] >= w[1]),
                };
                assert!(ordered, "query {q}: {scores:?}");
            }
        }
        (Err(Error::InvalidInput(_)), _) => assert!(!valid, "the engine refused valid candidates"),
        (got, _) => panic!("unexpected engine result (valid: {valid}): {got:?}"),
    }
}
