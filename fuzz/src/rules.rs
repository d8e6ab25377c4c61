//! The rules of the input validators, stated plainly, and the edits that break valid inputs: one copy,
//! shared by the fuzz targets (`fuzz/src/lib.rs`) and the property tests
//! (`crates/recall/tests/hostile_validation.rs`, which includes this file by path).

/// Values that no validator may take where finite, non-negative ones are required.
pub const WEIRD_F32: [f32; 7] = [
    f32::NAN,
    f32::INFINITY,
    f32::NEG_INFINITY,
    -1.0,
    -0.0,
    f32::MAX,
    f32::MIN_POSITIVE / 2.0,
];

/// A CSR graph: `(indptr, indices, weights)`.
pub type Csr = (Vec<usize>, Vec<u32>, Vec<f32>);

/// The rules of `SpreadGraph::from_csr`, stated plainly.
pub fn csr_is_valid(indptr: &[usize], indices: &[u32], weights: &[f32]) -> bool {
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

/// Edit one of the three arrays: set, push, pop or truncate.
pub fn edit_csr(
    (indptr, indices, weights): &mut Csr,
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
                0 => (n as u32).saturating_sub(1) + (value % 3) as u32,
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

/// A candidate-scoring call's inputs.
pub struct Cand {
    pub queries: Vec<f32>,
    pub corpus: Vec<f32>,
    pub dim: usize,
    pub offsets: Vec<usize>,
    pub ids: Vec<u32>,
    pub k: usize,
}

/// The rules of `score_candidates`, stated plainly. The executor (and so `Engine`) and cpu-simd's own
/// `score_candidates` check only the rows the lists name (they read no others).
pub fn candidates_are_valid(c: &Cand) -> bool {
    let d = c.dim;
    if d == 0
        || c.queries.is_empty()
        || c.corpus.is_empty()
        || !c.queries.len().is_multiple_of(d)
        || !c.corpus.len().is_multiple_of(d)
        || !c.queries.iter().all(|x| x.is_finite())
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

/// Edit one field: offsets, ids, k (set to one of `k_values` values), queries, corpus or dim (one of
/// `dim_values`).
pub fn edit_candidates(
    c: &mut Cand,
    (field, op, at, value): (u8, u8, usize, u64),
    (k_values, dim_values): (u64, u64),
) {
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
        (2, _) => c.k = (value % k_values) as usize,
        (3, 0) if !c.queries.is_empty() => {
            let i = at % c.queries.len();
            c.queries[i] = WEIRD_F32[value as usize % 3];
        }
        (3, 1) => {
            c.queries.pop();
        }
        (3, _) => c.corpus.truncate(at % (c.corpus.len() + 1)),
        (4, 0) => c.dim = (value % dim_values) as usize,
        (4, _) if !c.corpus.is_empty() => {
            let i = at % c.corpus.len();
            c.corpus[i] = WEIRD_F32[value as usize % 3];
        }
        _ => {}
    }
}
