//! The ops beyond cosine similarity: validation once, then dispatch (`Executor::dispatch`).

use crate::executor::{ExecError, Executor, Outcome, check_matrix};
use recall_cpu_simd::{CpuError, Metric, TopK};

fn check_k(k: usize, n: usize) -> Result<(), CpuError> {
    if k == 0 || k > n {
        Err(CpuError::KOutOfRange { k, n })
    } else {
        Ok(())
    }
}

fn work(n_queries: usize, n_rows: usize, dim: usize) -> u64 {
    (n_queries as u64)
        .saturating_mul(n_rows as u64)
        .saturating_mul(dim as u64)
}

impl Executor {
    /// All `n_queries x n_rows` scores for `metric`, query-major.
    pub fn similarity(
        &self,
        queries: &[f32],
        corpus: &[f32],
        dim: usize,
        metric: Metric,
    ) -> Result<Outcome<Vec<f32>>, ExecError> {
        let nq = check_matrix("queries", queries, dim)?;
        let n = check_matrix("corpus", corpus, dim)?;
        self.dispatch("similarity", work(nq, n, dim), |b| {
            b.similarity(queries, corpus, dim, metric)
        })
    }

    /// The `k` best corpus rows per query (1 <= k <= n_rows), best first, ties to the lower id.
    pub fn knn(
        &self,
        queries: &[f32],
        corpus: &[f32],
        dim: usize,
        metric: Metric,
        k: usize,
    ) -> Result<Outcome<TopK>, ExecError> {
        let nq = check_matrix("queries", queries, dim)?;
        let n = check_matrix("corpus", corpus, dim)?;
        check_k(k, n)?;
        self.dispatch("knn", work(nq, n, dim), |b| {
            b.knn(queries, corpus, dim, metric, k)
        })
    }

    /// The `k` best of each query's candidates `ids[offsets[q] .. offsets[q + 1]]` (corpus row ids, no
    /// duplicates within a list, `k` at most the shortest list).
    #[allow(clippy::too_many_arguments)]
    pub fn score_candidates(
        &self,
        queries: &[f32],
        corpus: &[f32],
        dim: usize,
        metric: Metric,
        offsets: &[usize],
        ids: &[u32],
        k: usize,
    ) -> Result<Outcome<TopK>, ExecError> {
        let nq = check_matrix("queries", queries, dim)?;
        let n = check_matrix("corpus", corpus, dim)?;
        if offsets.len() != nq + 1 {
            return Err(CpuError::LengthMismatch {
                what: "candidate offsets",
                expected: nq + 1,
                got: offsets.len(),
            }
            .into());
        }
        if offsets[0] != 0 || offsets[nq] != ids.len() || offsets.windows(2).any(|w| w[1] < w[0]) {
            return Err(CpuError::LengthMismatch {
                what: "candidate offsets (0 ..= ids.len(), non-decreasing)",
                expected: ids.len(),
                got: offsets[nq],
            }
            .into());
        }
        if let Some((index, &id)) = ids.iter().enumerate().find(|(_, id)| **id as usize >= n) {
            return Err(CpuError::IdOutOfRange {
                what: "candidate ids",
                index,
                id: u64::from(id),
                n,
            }
            .into());
        }
        let shortest = offsets.windows(2).map(|w| w[1] - w[0]).min().unwrap_or(0);
        check_k(k, shortest)?;
        for q in 0..nq {
            let mut list = ids[offsets[q]..offsets[q + 1]].to_vec();
            list.sort_unstable();
            if let Some(w) = list.windows(2).find(|w| w[0] == w[1]) {
                return Err(CpuError::DuplicateId { query: q, id: w[0] }.into());
            }
        }
        self.dispatch("score_candidates", work(1, ids.len(), dim), |b| {
            b.score_candidates(queries, corpus, dim, metric, offsets, ids, k)
        })
    }
}
