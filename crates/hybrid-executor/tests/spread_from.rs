//! Spreading from a seed list (`Executor::spread_shared_from`) against spreading from the dense vector it
//! stands for (`Executor::spread_shared`): the same bits, in any list order, through the CPU backend, the
//! GPU slot (a fault-injecting stand-in: faults on the list path fall back to the CPU with the same answer),
//! and the typed errors of a bad list.

#![allow(clippy::unwrap_used)] // a test crate: helpers panic on failure like the tests do

use parking_lot::Mutex;
use proptest::prelude::*;
use recall_cpu_simd::{CpuError, Spread, SpreadGraph, SpreadParams};
use recall_hybrid_executor::difftest::SplitMix;
use recall_hybrid_executor::{
    Backend, BackendError, CallOptions, CpuBackend, Device, DevicePolicy, ExecError, Executor,
    ExecutorConfig, FaultInjecting, FaultKind, FaultPlan, FaultStep, SharedGraph, Trigger,
    power_law_graph,
};
use std::sync::Arc;

fn cpu_exec() -> Executor {
    Executor::new(ExecutorConfig {
        policy: DevicePolicy::Cpu,
        ..ExecutorConfig::default()
    })
    .unwrap()
}

/// An executor whose GPU slot is `gpu` and that sends every call there (no calibration, no cache).
fn gpu_exec(gpu: Arc<dyn Backend>) -> Executor {
    Executor::with_backends(
        ExecutorConfig {
            policy: DevicePolicy::Auto,
            gpu_min_work: 0,
            calibrate: false,
            use_cache: false,
            ..ExecutorConfig::default()
        },
        Arc::new(CpuBackend),
        Some(gpu),
    )
    .unwrap()
}

/// The dense vector a seed list stands for (the test's own reference, written plainly).
fn densify(n: usize, list: &[(u32, f32)]) -> Vec<f32> {
    let mut dense = vec![0.0f32; n];
    for &(id, value) in list {
        dense[id as usize] = value;
    }
    dense
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn assert_same(a: &Spread, b: &Spread, what: &str) {
    assert_eq!(
        bits(&a.activation),
        bits(&b.activation),
        "{what}: activation"
    );
    assert_eq!(a.top.ids, b.top.ids, "{what}: top ids");
    assert_eq!(
        bits(&a.top.scores),
        bits(&b.top.scores),
        "{what}: top scores"
    );
}

/// A power-law graph of `n` nodes (with hubs) as a shared handle.
fn graph(seed: u64, n: usize, edges: usize) -> SharedGraph {
    let mut rng = SplitMix::new(seed);
    let (p, i, w) = power_law_graph(&mut rng, n, edges, n / 4, n / 8);
    SharedGraph::from_csr(&p, &i, &w).unwrap()
}

/// A list over distinct nodes, in a shuffled order: values in [0.5, 1), with `-0.0`, `0.0` and a subnormal
/// among them.
fn seed_list(rng: &mut SplitMix, n: usize, count: usize) -> Vec<(u32, f32)> {
    let mut ids: Vec<u32> = (0..n as u32).collect();
    for i in 0..count.min(n) {
        let j = i + rng.below((n - i) as u64) as usize;
        ids.swap(i, j);
    }
    ids.truncate(count.min(n));
    ids.iter()
        .map(|&id| {
            let value = match rng.below(10) {
                0 => -0.0,
                1 => 0.0,
                2 => f32::from_bits(1),
                _ => (rng.next_f32() + 1.0) * 0.5,
            };
            (id, value)
        })
        .collect()
}

fn params(n: usize, decay: f32, threshold: f32, hops: usize) -> SpreadParams {
    SpreadParams {
        decay,
        threshold,
        hops,
        k: n.min(10),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn a_shuffled_list_gives_the_dense_answer(
        seed in any::<u64>(),
        n in 1usize..400,
        edges_per_node in 0usize..12,
        fill in 0.0f64..1.0,
        decay in prop_oneof![Just(1.0f32), Just(0.5), 0.01f32..1.0],
        threshold in prop_oneof![Just(0.0f32), Just(0.01), 0.0f32..0.5],
        hops in 1usize..5,
    ) {
        let g = graph(seed, n, n * edges_per_node);
        let mut rng = SplitMix::new(seed ^ 0xD1CE);
        let list = seed_list(&mut rng, n, (fill * n as f64) as usize);
        let p = params(n, decay, threshold, hops);
        let exec = cpu_exec();
        let dense = exec.spread_shared(&CallOptions::default(), &g, &densify(n, &list), &p).unwrap();
        let from = exec.spread_shared_from(&CallOptions::default(), &g, &list, &p).unwrap();
        assert_same(&dense.value, &from.value, "shuffled list");
        prop_assert_eq!(from.device, Device::Cpu);
        // The order of the list does not matter.
        let mut reversed = list.clone();
        reversed.reverse();
        let rev = exec.spread_shared_from(&CallOptions::default(), &g, &reversed, &p).unwrap();
        assert_same(&dense.value, &rev.value, "reversed list");
    }
}

#[test]
fn empty_zero_and_all_node_lists() {
    let exec = cpu_exec();
    let opts = CallOptions::default();
    for (seed, n) in [(1u64, 1usize), (2, 7), (3, 500), (4, 3000)] {
        let g = graph(seed, n, n * 6);
        let p = params(n, 0.5, 0.01, 3);
        // An empty list is no seeds: every activation +0.0, top ids 0 ..
        let none = exec.spread_shared_from(&opts, &g, &[], &p).unwrap();
        let dense = exec.spread_shared(&opts, &g, &vec![0.0; n], &p).unwrap();
        assert_same(&dense.value, &none.value, "empty list");
        assert!(none.value.activation.iter().all(|x| x.to_bits() == 0));
        // Only -0.0 and 0.0: no seeds either (the answer holds +0.0, never -0.0).
        let zeros: Vec<(u32, f32)> = (0..n as u32)
            .map(|v| (v, if v % 2 == 0 { -0.0 } else { 0.0 }))
            .collect();
        let z = exec.spread_shared_from(&opts, &g, &zeros, &p).unwrap();
        assert_same(&dense.value, &z.value, "zero list");
        // Every node seeded, listed from the last node down.
        let mut rng = SplitMix::new(seed);
        let all: Vec<(u32, f32)> = (0..n as u32)
            .rev()
            .map(|v| (v, (rng.next_f32() + 1.0) * 0.5))
            .collect();
        let a = exec.spread_shared_from(&opts, &g, &all, &p).unwrap();
        let d = exec
            .spread_shared(&opts, &g, &densify(n, &all), &p)
            .unwrap();
        assert_same(&d.value, &a.value, "all nodes");
    }
}

#[test]
fn a_bad_list_is_a_typed_error() {
    let exec = cpu_exec();
    let opts = CallOptions::default();
    let g = graph(9, 10, 40);
    let p = params(10, 0.5, 0.0, 2);
    let err = |list: &[(u32, f32)]| match exec.spread_shared_from(&opts, &g, list, &p) {
        Err(ExecError::InvalidInput(e)) => e,
        other => panic!("{list:?}: {other:?}"),
    };
    assert_eq!(
        err(&[(1, 1.0), (10, 1.0)]),
        CpuError::IdOutOfRange {
            what: "seed list",
            index: 1,
            id: 10,
            n: 10
        }
    );
    assert_eq!(
        err(&[(u32::MAX, 1.0)]),
        CpuError::IdOutOfRange {
            what: "seed list",
            index: 0,
            id: u64::from(u32::MAX),
            n: 10
        }
    );
    for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        assert_eq!(
            err(&[(0, 1.0), (1, 1.0), (2, bad)]),
            CpuError::NonFinite {
                what: "seed list",
                index: 2
            }
        );
    }
    for bad in [-1.0f32, -f32::from_bits(1)] {
        assert_eq!(
            err(&[(3, bad)]),
            CpuError::Negative {
                what: "seed list",
                index: 0
            }
        );
    }
    // The same node twice, even with a zero value, names the node and both positions.
    assert_eq!(
        err(&[(4, 1.0), (2, 0.5), (7, 0.0), (2, 0.0)]),
        CpuError::DuplicateSeed {
            id: 2,
            first: 1,
            second: 3
        }
    );
    let e = err(&[(5, 1.0), (5, 1.0)]);
    assert_eq!(
        e.to_string(),
        "seed list names node 5 twice (at positions 0 and 1)"
    );
    // The parameters are checked as for dense seeds.
    let bad_k = SpreadParams { k: 11, ..p };
    assert!(matches!(
        exec.spread_shared_from(&opts, &g, &[(0, 1.0)], &bad_k),
        Err(ExecError::InvalidInput(CpuError::KOutOfRange { .. }))
    ));
    let bad_decay = SpreadParams { decay: 0.0, ..p };
    assert!(matches!(
        exec.spread_shared_from(&opts, &g, &[], &bad_decay),
        Err(ExecError::InvalidInput(CpuError::ParamOutOfRange { .. }))
    ));
}

/// A GPU stand-in that records the seed lists it is handed and answers on the CPU.
#[derive(Debug, Default)]
struct Recording {
    lists: Mutex<Vec<Vec<(u32, f32)>>>,
    dense_calls: Mutex<usize>,
}

impl Backend for Recording {
    fn device(&self) -> Device {
        Device::Gpu { ordinal: 0 }
    }
    fn spread(
        &self,
        graph: &SpreadGraph,
        seeds: &[f32],
        params: &SpreadParams,
    ) -> Result<Spread, BackendError> {
        *self.dense_calls.lock() += 1;
        CpuBackend.spread(graph, seeds, params)
    }
    fn spread_shared_from(
        &self,
        graph: &SharedGraph,
        seeds: &[(u32, f32)],
        params: &SpreadParams,
    ) -> Result<Spread, BackendError> {
        self.lists.lock().push(seeds.to_vec());
        CpuBackend.spread_shared_from(graph, seeds, params)
    }
}

#[test]
fn the_gpu_slot_gets_the_sorted_list_without_zeros() {
    let rec = Arc::new(Recording::default());
    let exec = gpu_exec(rec.clone());
    let n = 50;
    let g = graph(5, n, 300);
    let p = params(n, 0.5, 0.0, 3);
    let list = [(40, 1.0), (3, -0.0), (7, 0.25), (0, 0.0), (12, 0.5)];
    let out = exec
        .spread_shared_from(&CallOptions::default(), &g, &list, &p)
        .unwrap();
    assert_eq!(out.device, Device::Gpu { ordinal: 0 });
    assert_eq!(*rec.lists.lock(), [vec![(7, 0.25), (12, 0.5), (40, 1.0)]]);
    assert_eq!(
        *rec.dense_calls.lock(),
        0,
        "the list path made a dense call"
    );
    let want = cpu_exec()
        .spread_shared(&CallOptions::default(), &g, &densify(n, &list), &p)
        .unwrap();
    assert_same(&want.value, &out.value, "gpu slot");
}

#[test]
fn faults_on_the_list_path_fall_back_to_the_same_answer() {
    let n = 300;
    let g = graph(6, n, 2000);
    let p = params(n, 0.5, 0.01, 3);
    let mut rng = SplitMix::new(6);
    let list = seed_list(&mut rng, n, 20);
    let want = cpu_exec()
        .spread_shared(&CallOptions::default(), &g, &densify(n, &list), &p)
        .unwrap();
    // No fault: the stand-in answers (the list path through the wrapper).
    let clean = Arc::new(FaultInjecting::new(CpuBackend, FaultPlan::new()));
    let out = gpu_exec(clean.clone())
        .spread_shared_from(&CallOptions::default(), &g, &list, &p)
        .unwrap();
    assert_eq!(out.device, Device::Gpu { ordinal: 0 });
    assert_eq!(out.fallback, None);
    assert_eq!(clean.stats().calls, 1);
    assert_same(&want.value, &out.value, "no fault");
    for step in FaultStep::ALL {
        for kind in [
            FaultKind::Gpu,
            FaultKind::OutOfMemory,
            FaultKind::DeviceLost,
        ] {
            let gpu = Arc::new(FaultInjecting::new(
                CpuBackend,
                FaultPlan::new().fail_as(step, Trigger::Always, kind),
            ));
            let exec = gpu_exec(gpu.clone());
            let out = exec
                .spread_shared_from(&CallOptions::default(), &g, &list, &p)
                .unwrap();
            assert_eq!(out.device, Device::Cpu, "{step} {kind:?}");
            assert!(out.fallback.is_some(), "{step} {kind:?}");
            assert!(
                gpu.stats().injected >= 1,
                "{step} {kind:?}: no fault injected"
            );
            assert_same(&want.value, &out.value, &format!("{step} {kind:?}"));
        }
    }
}
