//! The plain scalar statement of each order in `docs/numerics.md`. Every SIMD path and every GPU kernel
//! must agree with these bit for bit; they are also the tests' oracle.

pub use recall_kernel_shared::math::cosine_from_parts;

/// `dot(q, c)`: one FMA chain over `k` ascending.
#[inline]
pub fn dot(q: &[f32], c: &[f32]) -> f32 {
    debug_assert_eq!(q.len(), c.len());
    let mut acc = 0.0f32;
    for (a, b) in q.iter().zip(c) {
        acc = a.mul_add(*b, acc);
    }
    acc
}

/// `sqnorm(x)`: one FMA chain of `x[k] * x[k]` over `k` ascending.
#[inline]
pub fn sqnorm(x: &[f32]) -> f32 {
    let mut acc = 0.0f32;
    for a in x {
        acc = a.mul_add(*a, acc);
    }
    acc
}

/// `norm(x) = sqrt(sqnorm(x))`, IEEE square root.
#[inline]
pub fn norm(x: &[f32]) -> f32 {
    sqnorm(x).sqrt()
}

/// Cosine similarity as the contract states it.
#[inline]
pub fn cosine(q: &[f32], c: &[f32]) -> f32 {
    cosine_from_parts(dot(q, c), norm(q), norm(c))
}

/// `l2sq(q, c)`: `t = q[k] - c[k]; acc = fma(t, t, acc)` over `k` ascending.
#[inline]
pub fn l2sq(q: &[f32], c: &[f32]) -> f32 {
    debug_assert_eq!(q.len(), c.len());
    let mut acc = 0.0f32;
    for (a, b) in q.iter().zip(c) {
        let t = a - b;
        acc = t.mul_add(t, acc);
    }
    acc
}
