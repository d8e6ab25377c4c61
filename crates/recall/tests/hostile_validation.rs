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

// The rules and edits, shared with the fuzz targets.
#[path = "../../../fuzz/src/rules.rs"]
mod rules;
use rules::{Cand, candidates_are_valid, csr_is_valid, edit_candidates, edit_csr};

fn engine() -> &'static Engine {
    static E: OnceLock<Engine> = OnceLock::new();
    E.get_or_init(|| Engine::builder().device(DevicePolicy::Cpu).build().unwrap())
}

// ---------------------------------------------------------------------------------------------------
// CSR

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

fn check_candidates(c: &Cand) {
    let valid = candidates_are_valid(c);
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
    assert_eq!(direct.is_ok(), valid, "cpu-simd: {direct:?}");
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
            edit_candidates(&mut c, e, (6, 5));
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
    assert!(candidates_are_valid(&c));
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
    assert!(!candidates_are_valid(&c));
    check_candidates(&c);
    let mut c = candidates(2, 6, 3, &[4], 2, 1);
    c.offsets[1] = usize::MAX;
    assert!(!candidates_are_valid(&c));
    check_candidates(&c);
    // A NaN in a row no list names: the engine and cpu-simd read only the named rows, and run; in a named row,
    // both refuse it.
    let mut c = candidates(1, 6, 3, &[2], 1, 1);
    assert!(!c.ids.contains(&5));
    c.corpus[5 * 3] = f32::NAN;
    assert!(candidates_are_valid(&c));
    check_candidates(&c);
    c.corpus[c.ids[0] as usize * 3 + 2] = f32::INFINITY;
    assert!(!candidates_are_valid(&c));
    check_candidates(&c);
}
