#![allow(clippy::unwrap_used)]
// The oracles are the literal loops of docs/numerics.md, index for index.
#![allow(clippy::needless_range_loop, clippy::assign_op_pattern)]
//! Tests of recall-cpu-simd: property tests against the literal order and against f64, every SIMD level
//! this machine has, snapshots of small fixed cases, typed errors, and which SIMD path ran.

mod dense;
mod errors;
mod ops;
mod oracle;
mod simd;
mod snapshots;
mod strategies;
