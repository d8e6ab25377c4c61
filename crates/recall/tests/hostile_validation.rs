//! Hostile input to the validators that sit in front of every op: CSR graphs (`SpreadGraph::from_csr`)
//! and candidate id lists (`Engine::score_candidates`, the executor's check and cpu-simd's). Each case is a
//! valid input with a few random edits; the validator must agree with a plain statement of the rules (so
//! a malformed input is always a typed error and a well-formed one always runs), and never panic.
//! The fuzz targets in `fuzz/` (`csr`, `candidates`) run the same checks for longer.
#![allow(clippy::unwrap_used)] // a test crate: helpers panic on failure like the tests do

use proptest::prelude::*;
use recall::{DevicePolicy, Engine, Error, Metric, SpreadGraph, SpreadParams};
use recall_cpu_simd::{Corpus, CpuError};
use std::sync::OnceLock;

fn engine() -> &'static Engine {
    static E: OnceLock<Engine> = OnceLock::new();
    E.get_or_init(|| Engine::builder().device(DevicePolicy::Cpu).build().unwrap())
}

// ---------------------------------------------------------------------------------------------------
// CSR

/// The rules of `SpreadGraph::from_csr`, stated plainly.
fn csr_is_valid(indptr: &[usize], indices: &[u32], weights: &[f32]) -> bool {
    let Some(&last) = indptr.last() else {
        return false;
    };
    let n = indptr.len() - 1;
    n >= 1
        && indptr[0] == 0
        && indptr.windows(2).all(|w| w[0] <= w[1])
        && last == indices.len()
        && weights.len() == indices.len()
        && indices.iter().all(|&c| (c as usize) < n)
        && weights.iter().all(|w| w.is_finite() && *w >= 0.0)
}

/// A valid graph of `n` nodes from `edges` (source, target, weight) picks.
fn csr(n: usize, edges: &[(u32, u32, u8)]) -> (Vec<usize>, Vec<u32>, Vec<f32>) {
    let mut e: Vec<(u32, u32, f32)> = edges
        .iter()
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

const WEIRD_F32: [f32; 7] = [
    f32::NAN,
    f32::INFINITY,
    f32::NEG_INFINITY,
    -1.0,
    -0.0,
    f32::MAX,
    f32::MIN_POSITIVE / 2.0,
];

/// Edit one of the three arrays: set, push, pop or truncate.
#[allow(clippy::type_complexity)]
fn edit_csr(
    (indptr, indices, weights): &mut (Vec<usize>, Vec<u32>, Vec<f32>),
    (array, op, at, value): (u8, u8, usize, u64),
) {
    let n = indptr.len().max(1);
    match (array % 3, op % 4) {
        (0, 0) if !indptr.is_empty() => {
            let i = at % indptr.len();
            indptr[i] = match value % 4 {
                0 => indptr[i].wrapping_add(1),
                1 => indptr[i].wrapping_sub(1),
                2 => usize::MAX - (value as usize % 3),
                _ => value as usize % (indices.len() + 2),
            };
        }
        (0, 1) => indptr.push(value as usize % (indices.len() + 2)),
        (0, 2) => {
            indptr.pop();
        }
        (0, _) => indptr.truncate(at % 3),
        (1, 0) if !indices.is_empty() => {
            let i = at % indices.len();
            indices[i] = match value % 3 {
                0 => n as u32 - 1 + (value % 3) as u32,
                1 => u32::MAX,
                _ => (value % (n as u64 + 1)) as u32,
            };
        }
        (1, 1) => indices.push((value % (n as u64 + 1)) as u32),
        (1, _) => {
            indices.pop();
        }
        (2, 0) if !weights.is_empty() => {
            let i = at % weights.len();
            weights[i] = WEIRD_F32[value as usize % WEIRD_F32.len()];
        }
        (2, 1) => weights.push(WEIRD_F32[value as usize % WEIRD_F32.len()]),
        (2, _) => {
            weights.pop();
        }
        _ => {}
    }
}

fn check_csr(indptr: &[usize], indices: &[u32], weights: &[f32]) {
    let valid = csr_is_valid(indptr, indices, weights);
    match SpreadGraph::from_csr(indptr, indices, weights) {
        Ok(g) => {
            assert!(
                valid,
                "accepted an invalid graph: {indptr:?} {indices:?} {weights:?}"
            );
            let n = indptr.len() - 1;
            assert_eq!((g.n_nodes(), g.n_edges()), (n, indices.len()));
            // A graph that validates must spread without trouble.
            let mut seeds = vec![0.0f32; n];
            seeds[0] = 1.0;
            let p = SpreadParams {
                decay: 0.5,
                threshold: 0.0,
                hops: 2,
                k: n.min(3),
            };
            match engine().spread(&g, &seeds, &p) {
                Ok(a) => assert_eq!(a.activation.len(), n),
                // f32::MAX weights may overflow the activation: a typed error too.
                Err(Error::InvalidInput(CpuError::ActivationOverflow { .. })) => {}
                Err(e) => panic!("spread on a valid graph failed: {e}"),
            }
        }
        Err(e) => assert!(
            !valid,
            "refused a valid graph ({e}): {indptr:?} {indices:?} {weights:?}"
        ),
    }
}

// ---------------------------------------------------------------------------------------------------
// Candidate lists

struct Cand {
    queries: Vec<f32>,
    corpus: Vec<f32>,
    dim: usize,
    offsets: Vec<usize>,
    ids: Vec<u32>,
    k: usize,
}

/// The rules of `score_candidates`, stated plainly. The executor (and so `Engine`) checks that the whole
/// corpus is finite; cpu-simd's own `score_candidates` checks only the rows the lists name (it reads no
/// others): `whole_corpus` picks which.
fn candidates_are_valid(c: &Cand, whole_corpus: bool) -> bool {
    let d = c.dim;
    if d == 0
        || c.queries.is_empty()
        || c.corpus.is_empty()
        || !c.queries.len().is_multiple_of(d)
        || !c.corpus.len().is_multiple_of(d)
        || !c.queries.iter().all(|x| x.is_finite())
        || (whole_corpus && !c.corpus.iter().all(|x| x.is_finite()))
    {
        return false;
    }
    let (nq, n) = (c.queries.len() / d, c.corpus.len() / d);
    let o = &c.offsets;
    if o.len() != nq + 1 || o[0] != 0 || o[nq] != c.ids.len() || o.windows(2).any(|w| w[1] < w[0]) {
        return false;
    }
    if c.ids.iter().any(|&i| i as usize >= n) {
        return false;
    }
    let shortest = o.windows(2).map(|w| w[1] - w[0]).min().unwrap_or(0);
    if c.k == 0 || c.k > shortest {
        return false;
    }
    let distinct = o.windows(2).all(|w| {
        let mut l = c.ids[w[0]..w[1]].to_vec();
        l.sort_unstable();
        l.windows(2).all(|p| p[0] != p[1])
    });
    distinct
        && c.ids.iter().all(|&i| {
            let row = &c.corpus[i as usize * d..(i as usize + 1) * d];
            row.iter().all(|x| x.is_finite())
        })
}

/// A valid case: `nq` queries, `n` rows, each list a rotation of the row ids.
fn candidates(nq: usize, n: usize, dim: usize, lens: &[usize], k: usize, seed: u64) -> Cand {
    let mut s = seed | 1;
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
        let len = 1 + lens[q % lens.len()] % n;
        ids.extend((0..len).map(|i| ((q * 7 + i) % n) as u32));
        offsets.push(ids.len());
    }
    let shortest = offsets.windows(2).map(|w| w[1] - w[0]).min().unwrap_or(1);
    Cand {
        queries,
        corpus,
        dim,
        offsets,
        ids,
        k: 1 + k % shortest,
    }
}

fn edit_candidates(c: &mut Cand, (field, op, at, value): (u8, u8, usize, u64)) {
    let n = (c.corpus.len() / c.dim.max(1)).max(1);
    match (field % 5, op % 3) {
        (0, 0) if !c.offsets.is_empty() => {
            let i = at % c.offsets.len();
            c.offsets[i] = match value % 3 {
                0 => c.offsets[i].wrapping_add(1),
                1 => c.offsets[i].wrapping_sub(1),
                _ => usize::MAX,
            };
        }
        (0, 1) => c.offsets.push(c.ids.len()),
        (0, _) => {
            c.offsets.pop();
        }
        (1, 0) if !c.ids.is_empty() => {
            let i = at % c.ids.len();
            c.ids[i] = match value % 4 {
                0 => n as u32,
                1 => u32::MAX,
                // A duplicate of its neighbour, most likely.
                2 => c.ids[(i + 1) % c.ids.len()],
                _ => (value % n as u64) as u32,
            };
        }
        (1, 1) => c.ids.push((value % (n as u64 + 1)) as u32),
        (1, _) => {
            c.ids.pop();
        }
        (2, _) => c.k = (value % 6) as usize,
        (3, 0) if !c.queries.is_empty() => {
            let i = at % c.queries.len();
            c.queries[i] = WEIRD_F32[value as usize % 3];
        }
        (3, 1) => {
            c.queries.pop();
        }
        (3, _) => c.corpus.truncate(at % (c.corpus.len() + 1)),
        (4, 0) => c.dim = (value % 5) as usize,
        (4, _) if !c.corpus.is_empty() => {
            let i = at % c.corpus.len();
            c.corpus[i] = WEIRD_F32[value as usize % 3];
        }
        _ => {}
    }
}

fn check_candidates(c: &Cand) {
    let valid = candidates_are_valid(c, true);
    let valid_direct = candidates_are_valid(c, false);
    let got = engine().score_candidates(
        &c.queries,
        &c.corpus,
        c.dim,
        Metric::Cosine,
        &c.offsets,
        &c.ids,
        c.k,
    );
    // cpu-simd validates on its own too (it is called directly by other crates): the same verdict.
    let direct = if c.dim == 0 {
        Err(CpuError::ZeroDim)
    } else {
        recall_cpu_simd::score_candidates(
            &c.queries,
            &Corpus::f32(&c.corpus, c.dim),
            Metric::Cosine,
            &c.offsets,
            &c.ids,
            c.k,
        )
    };
    assert_eq!(direct.is_ok(), valid_direct, "cpu-simd: {direct:?}");
    match (got, direct) {
        (Ok(hits), Ok(direct)) => {
            assert!(valid, "accepted invalid candidates");
            assert_eq!(
                (&hits.ids, bits(&hits.scores)),
                (&direct.ids, bits(&direct.scores))
            );
            let nq = c.offsets.len() - 1;
            assert_eq!(hits.n_queries(), nq);
            for q in 0..nq {
                let list = &c.ids[c.offsets[q]..c.offsets[q + 1]];
                let (ids, scores) = hits.query(q);
                assert!(
                    ids.iter().all(|i| list.contains(i)),
                    "query {q}: {ids:?} not in {list:?}"
                );
                assert!(
                    scores.windows(2).all(|w| w[0] >= w[1]),
                    "query {q}: {scores:?}"
                );
            }
        }
        (Err(Error::InvalidInput(_)), _) => assert!(!valid, "refused valid candidates"),
        (got, direct) => panic!(
            "the executor and cpu-simd disagree (valid: {valid}): {:?} / {:?}",
            got.map(|h| h.ids),
            direct.map(|t| t.ids)
        ),
    }
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn edit() -> impl Strategy<Value = (u8, u8, usize, u64)> {
    (any::<u8>(), any::<u8>(), any::<usize>(), any::<u64>())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10_000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn hostile_csr(
        n in 1usize..9,
        edges in prop::collection::vec((any::<u32>(), any::<u32>(), any::<u8>()), 0..24),
        edits in prop::collection::vec(edit(), 0..4),
    ) {
        let mut g = csr(n, &edges);
        for e in edits {
            edit_csr(&mut g, e);
        }
        check_csr(&g.0, &g.1, &g.2);
    }

    #[test]
    fn hostile_candidate_lists(
        nq in 1usize..5,
        n in 1usize..12,
        dim in 1usize..5,
        lens in prop::collection::vec(0usize..16, 1..5),
        k in 0usize..8,
        seed in any::<u64>(),
        edits in prop::collection::vec(edit(), 0..4),
    ) {
        let mut c = candidates(nq, n, dim, &lens, k, seed);
        for e in edits {
            edit_candidates(&mut c, e);
        }
        check_candidates(&c);
    }
}

#[test]
fn unedited_cases_are_valid_and_run() {
    let (indptr, indices, weights) = csr(5, &[(0, 1, 64), (0, 2, 3), (4, 4, 0), (2, 0, 255)]);
    assert!(csr_is_valid(&indptr, &indices, &weights));
    check_csr(&indptr, &indices, &weights);
    let c = candidates(3, 10, 4, &[3, 9], 5, 7);
    assert!(candidates_are_valid(&c, true));
    check_candidates(&c);
}

#[test]
fn known_malformed_cases_are_refused() {
    // The edge cases the rules name, one each.
    for (indptr, indices, weights) in [
        (vec![], vec![], vec![]),
        (vec![0], vec![], vec![]),
        (vec![1, 1], vec![0], vec![1.0]),
        (vec![0, 2, 1], vec![0, 0], vec![1.0, 1.0]),
        (vec![0, 1], vec![1], vec![1.0]),
        (vec![0, 1], vec![0], vec![f32::NAN]),
        (vec![0, 1], vec![0], vec![-1.0]),
        (vec![0, 1], vec![0], vec![]),
        (vec![0, usize::MAX], vec![0], vec![1.0]),
    ] {
        assert!(!csr_is_valid(&indptr, &indices, &weights));
        assert!(SpreadGraph::from_csr(&indptr, &indices, &weights).is_err());
    }
    let mut c = candidates(2, 6, 3, &[4], 2, 1);
    c.ids[1] = c.ids[0];
    assert!(!candidates_are_valid(&c, true));
    check_candidates(&c);
    let mut c = candidates(2, 6, 3, &[4], 2, 1);
    c.offsets[1] = usize::MAX;
    assert!(!candidates_are_valid(&c, true));
    check_candidates(&c);
    // A NaN in a row no list names: the engine refuses it, cpu-simd (which reads only named rows) runs.
    let mut c = candidates(1, 6, 3, &[2], 1, 1);
    assert!(!c.ids.contains(&5));
    c.corpus[5 * 3] = f32::NAN;
    assert!(!candidates_are_valid(&c, true));
    assert!(candidates_are_valid(&c, false));
    check_candidates(&c);
}
