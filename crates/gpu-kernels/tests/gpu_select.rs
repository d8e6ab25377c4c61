//! GPU tests of the top-k selection's scratch, shared by every stream of one `Kernels` (spreading's slots each
//! run on their own). Each test skips, saying why, where there is no usable GPU.

use recall_gpu_kernels::{Kernels, Segments};
use recall_gpu_sys::Gpu;
use recall_gpu_sys::memory::stream_is_idle;

fn gpu() -> Option<Gpu> {
    let devices = match recall_gpu_sys::probe().result {
        Ok(d) => d,
        Err(why) => {
            eprintln!("skipped: no GPU ({why})");
            return None;
        }
    };
    let Some(first) = devices.first() else {
        eprintln!("skipped: the driver lists no device");
        return None;
    };
    match Gpu::open(first.ordinal) {
        Ok(gpu) => Some(gpu),
        Err(e) => panic!(
            "the driver lists GPU {} but it does not open: {e}",
            first.ordinal
        ),
    }
}

/// Scores with many ties (a few thousand distinct values), so that the ids decide much of the order.
fn scores(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 52) as f32) / 64.0 - 32.0
        })
        .collect()
}

/// Per segment, the `k` best (higher score first, then lower position).
fn top(scores: &[f32], seg_len: usize, k: usize) -> (Vec<u32>, Vec<f32>) {
    let (mut ids, mut vals) = (Vec::new(), Vec::new());
    for seg in scores.chunks(seg_len) {
        let mut order: Vec<usize> = (0..seg.len()).collect();
        order.sort_by(|&a, &b| seg[b].total_cmp(&seg[a]).then(a.cmp(&b)));
        for &i in &order[..k] {
            ids.push(i as u32);
            vals.push(seg[i]);
        }
    }
    (ids, vals)
}

/// A selection dropped before `finish` (a spread whose tail failed) waits for its stream before the scratch
/// unlocks, and the next selection, on another stream, gets the right answer.
#[test]
fn a_selection_dropped_unfinished_waits_for_its_stream() {
    let Some(gpu) = gpu() else { return };
    let kernels = match Kernels::load(&gpu, None) {
        Ok(k) => k,
        Err(e) => panic!("a usable GPU whose kernel image does not load: {e}"),
    };
    let (a, b) = match (gpu.with_new_stream(), gpu.with_new_stream()) {
        (Ok(a), Ok(b)) => (a, b),
        _ => panic!("no second stream on a usable GPU"),
    };
    let (n_segments, seg_len, k) = (16, 1 << 20, 100);
    let first = scores(n_segments * seg_len, 1);
    let second = scores(n_segments * seg_len, 2);
    let (dev_a, dev_b) = match (a.upload(&first), b.upload(&second)) {
        (Ok(x), Ok(y)) => (x, y),
        _ => panic!("upload failed"),
    };
    assert!(a.synchronize().is_ok() && b.synchronize().is_ok());
    for round in 0..3 {
        let segments = Segments::Dense {
            n_segments,
            seg_len,
        };
        let pending = match kernels.begin_topk(&a, &dev_a, None, segments, k, true) {
            Ok(p) => p,
            Err(e) => panic!("selection on stream a: {e}"),
        };
        drop(pending);
        assert_eq!(
            stream_is_idle(a.stream()).ok(),
            Some(true),
            "round {round}: the scratch unlocked with the selection still queued on its stream"
        );
        let got = match kernels.select_topk(&b, &dev_b, None, segments, k, true) {
            Ok(t) => t,
            Err(e) => panic!("selection on stream b: {e}"),
        };
        let (ids, vals) = top(&second, seg_len, k);
        assert_eq!(got.ids, ids, "round {round}");
        assert_eq!(got.scores, vals, "round {round}");
    }
}
