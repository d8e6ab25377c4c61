//! Dense similarity on f32 rows (`docs/numerics.md`, "Dot product, norms and the dense metrics").

use crate::{CpuError, check_finite, reference};
use rayon::prelude::*;

/// Rows per rayon task: large enough that the split costs nothing next to the work.
const ROWS_PER_TASK: usize = 2048;

fn check_matrix(what: &'static str, x: &[f32], dim: usize) -> Result<usize, CpuError> {
    if dim == 0 {
        return Err(CpuError::ZeroDim);
    }
    if x.is_empty() {
        return Err(CpuError::Empty { what });
    }
    if x.len() % dim != 0 {
        return Err(CpuError::RaggedMatrix {
            what,
            len: x.len(),
            dim,
        });
    }
    check_finite(what, x)?;
    Ok(x.len() / dim)
}

/// The L2 norm of every row of the row-major matrix `x` (`n_rows * dim` values).
pub fn row_norms(x: &[f32], dim: usize) -> Result<Vec<f32>, CpuError> {
    let n_rows = check_matrix("rows", x, dim)?;
    let mut out = vec![0.0f32; n_rows];
    out.par_chunks_mut(ROWS_PER_TASK)
        .enumerate()
        .for_each(|(chunk_idx, out)| {
            let base = chunk_idx * ROWS_PER_TASK;
            for (i, o) in out.iter_mut().enumerate() {
                let row = &x[(base + i) * dim..(base + i + 1) * dim];
                *o = reference::norm(row);
            }
        });
    Ok(out)
}

/// Cosine similarity of every query against every corpus row, written query-major into `out`
/// (`n_queries * n_rows`). Norms are the values [`row_norms`] returns for the same matrices.
pub fn cosine_scores(
    queries: &[f32],
    query_norms: &[f32],
    corpus: &[f32],
    corpus_norms: &[f32],
    dim: usize,
    out: &mut [f32],
) -> Result<(), CpuError> {
    let n_queries = check_matrix("queries", queries, dim)?;
    let n_rows = check_matrix("corpus", corpus, dim)?;
    for (what, got, expected) in [
        ("query norms", query_norms.len(), n_queries),
        ("corpus norms", corpus_norms.len(), n_rows),
        ("output", out.len(), n_queries * n_rows),
    ] {
        if got != expected {
            return Err(CpuError::LengthMismatch {
                what,
                expected,
                got,
            });
        }
    }
    out.par_chunks_mut(n_rows)
        .enumerate()
        .for_each(|(q_idx, out_row)| {
            let q = &queries[q_idx * dim..(q_idx + 1) * dim];
            let nq = query_norms[q_idx];
            out_row
                .par_chunks_mut(ROWS_PER_TASK)
                .enumerate()
                .for_each(|(chunk_idx, out)| {
                    let base = chunk_idx * ROWS_PER_TASK;
                    for (i, o) in out.iter_mut().enumerate() {
                        let row_idx = base + i;
                        let c = &corpus[row_idx * dim..(row_idx + 1) * dim];
                        *o = reference::cosine_from_parts(
                            reference::dot(q, c),
                            nq,
                            corpus_norms[row_idx],
                        );
                    }
                });
        });
    Ok(())
}
