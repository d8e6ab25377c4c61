//! The tests' oracles: the literal scalar statement of each order (bit-exact targets) and plain f64
//! computations (accuracy targets), written independently of the crate's code paths.

use half::{bf16, f16};
use recall_cpu_simd::{Corpus, Metric, Vectors, reference};
use std::cmp::Ordering;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dtype {
    F32,
    F16,
    Bf16,
}

pub const DTYPES: [Dtype; 3] = [Dtype::F32, Dtype::F16, Dtype::Bf16];
pub const METRICS: [Metric; 3] = [Metric::Cosine, Metric::Dot, Metric::L2];

/// A corpus stored in one dtype, with its exactly widened f32 values.
pub struct Stored {
    pub dtype: Dtype,
    pub f32s: Vec<f32>,
    pub f16s: Vec<f16>,
    pub bf16s: Vec<bf16>,
}

impl Stored {
    pub fn new(dtype: Dtype, values: &[f32]) -> Stored {
        let f16s: Vec<f16> = values.iter().map(|v| f16::from_f32(*v)).collect();
        let bf16s: Vec<bf16> = values.iter().map(|v| bf16::from_f32(*v)).collect();
        let f32s = match dtype {
            Dtype::F32 => values.to_vec(),
            Dtype::F16 => f16s.iter().map(|v| v.to_f32()).collect(),
            Dtype::Bf16 => bf16s.iter().map(|v| v.to_f32()).collect(),
        };
        Stored {
            dtype,
            f32s,
            f16s,
            bf16s,
        }
    }

    pub fn vectors(&self) -> Vectors<'_> {
        match self.dtype {
            Dtype::F32 => Vectors::F32(&self.f32s),
            Dtype::F16 => Vectors::F16(&self.f16s),
            Dtype::Bf16 => Vectors::Bf16(&self.bf16s),
        }
    }

    pub fn corpus(&self, dim: usize) -> Corpus<'_> {
        Corpus::new(self.vectors(), dim)
    }
}

/// The literal per-pair scores in f32 (the exact-mode target).
pub fn ref_scores(metric: Metric, queries: &[f32], corpus: &[f32], dim: usize) -> Vec<f32> {
    let mut out = Vec::new();
    for q in queries.chunks_exact(dim) {
        for c in corpus.chunks_exact(dim) {
            out.push(match metric {
                Metric::Cosine => reference::cosine(q, c),
                Metric::Dot => reference::dot(q, c),
                Metric::L2 => reference::l2sq(q, c),
            });
        }
    }
    out
}

/// Bits equal, or both NaN.
pub fn same(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

pub fn assert_same(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            same(*g, *w),
            "{what}[{i}]: got {g:e} ({:#x}), want {w:e} ({:#x})",
            g.to_bits(),
            w.to_bits()
        );
    }
}

/// The total order, written independently: NaN last, then the score (higher or lower first, `-0 == +0`),
/// then the lower id.
pub fn rank(a: (f32, u32), b: (f32, u32), higher_first: bool) -> Ordering {
    match (a.0.is_nan(), b.0.is_nan()) {
        (true, true) => return a.1.cmp(&b.1),
        (true, false) => return Ordering::Greater,
        (false, true) => return Ordering::Less,
        _ => {}
    }
    let by_score = if higher_first {
        (b.0 as f64).partial_cmp(&(a.0 as f64))
    } else {
        (a.0 as f64).partial_cmp(&(b.0 as f64))
    };
    by_score.unwrap_or(Ordering::Equal).then(a.1.cmp(&b.1))
}

/// Per row of `scores` (`n` columns), the best `k` (id, score) pairs by sorting everything.
pub fn ref_topk(scores: &[f32], n: usize, k: usize, higher_first: bool) -> (Vec<u32>, Vec<f32>) {
    let (mut ids, mut out) = (Vec::new(), Vec::new());
    for row in scores.chunks_exact(n) {
        let mut pairs: Vec<(f32, u32)> = row
            .iter()
            .enumerate()
            .map(|(i, s)| (*s, i as u32))
            .collect();
        pairs.sort_by(|a, b| rank(*a, *b, higher_first));
        for p in &pairs[..k] {
            ids.push(p.1);
            out.push(p.0);
        }
    }
    (ids, out)
}

/// f64 scores and, per pair, an error bound for the f32 result.
pub fn f64_scores(metric: Metric, queries: &[f32], corpus: &[f32], dim: usize) -> Vec<(f64, f64)> {
    let u = f64::powi(2.0, -24);
    let gamma = (dim as f64 + 4.0) * 2.0 * u;
    let mut out = Vec::new();
    for q in queries.chunks_exact(dim) {
        for c in corpus.chunks_exact(dim) {
            let (mut dot, mut abs, mut l2, mut nq, mut nc) = (0f64, 0f64, 0f64, 0f64, 0f64);
            for (a, b) in q.iter().zip(c) {
                let (a, b) = (*a as f64, *b as f64);
                dot += a * b;
                abs += (a * b).abs();
                l2 += (a - b) * (a - b);
                nq += a * a;
                nc += b * b;
            }
            let tiny = 1e-30;
            out.push(match metric {
                Metric::Dot => (dot, gamma * abs + tiny),
                Metric::L2 => (l2, gamma * l2 + tiny),
                Metric::Cosine => {
                    let (nq, nc) = (nq.sqrt(), nc.sqrt());
                    if nq == 0.0 || nc == 0.0 {
                        (0.0, tiny)
                    } else {
                        let cos = dot / (nq * nc);
                        (
                            cos,
                            gamma * abs / (nq * nc) + 2.0 * gamma * cos.abs() + tiny,
                        )
                    }
                }
            });
        }
    }
    out
}
