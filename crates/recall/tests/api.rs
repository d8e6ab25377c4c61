//! The facade on the CPU: answers, typed errors, device policy. Runs everywhere.

use recall::{Device, DevicePolicy, Engine, Error};

fn cpu_engine() -> Engine {
    Engine::builder()
        .device(DevicePolicy::Cpu)
        .build()
        .expect("a CPU engine always builds")
}

#[test]
fn cosine_matches_the_contract_expression() {
    let e = cpu_engine();
    let dim = 3;
    let corpus = [
        1.0, 2.0, 2.0, /* */ 0.0, 0.0, 0.0, /* */ -3.0, 0.5, 4.0,
    ];
    let query = [2.0, -1.0, 0.25];
    let s = e.cosine_similarity(&query, &corpus, dim).unwrap();
    assert_eq!((s.n_queries, s.n_rows, s.device), (1, 3, Device::Cpu));
    for (r, row) in corpus.chunks(dim).enumerate() {
        let dot = query
            .iter()
            .zip(row)
            .fold(0.0f32, |acc, (a, b)| a.mul_add(*b, acc));
        let nq = query
            .iter()
            .fold(0.0f32, |acc, a| a.mul_add(*a, acc))
            .sqrt();
        let nc = row.iter().fold(0.0f32, |acc, a| a.mul_add(*a, acc)).sqrt();
        let expected = if nq == 0.0 || nc == 0.0 {
            0.0
        } else {
            dot / (nq * nc)
        };
        assert_eq!(s.values[r].to_bits(), expected.to_bits(), "row {r}");
    }
    assert_eq!(s.values[1], 0.0, "a zero row scores 0");
}

#[test]
fn bad_input_is_a_typed_error() {
    let e = cpu_engine();
    let ok = [1.0f32; 8];
    assert!(matches!(
        e.cosine_similarity(&ok, &ok, 0),
        Err(Error::InvalidInput(_))
    ));
    assert!(matches!(
        e.cosine_similarity(&ok, &ok[..7], 4),
        Err(Error::InvalidInput(_))
    ));
    assert!(matches!(
        e.cosine_similarity(&[], &ok, 4),
        Err(Error::InvalidInput(_))
    ));
    let mut nan = ok;
    nan[5] = f32::NAN;
    let err = e.cosine_similarity(&ok, &nan, 4).unwrap_err();
    assert!(err.to_string().contains("NaN or infinite"), "{err}");
    let mut inf = ok;
    inf[0] = f32::INFINITY;
    assert!(matches!(
        e.cosine_similarity(&inf, &ok, 4),
        Err(Error::InvalidInput(_))
    ));
}

#[test]
fn the_cpu_policy_never_uses_a_gpu_and_says_why() {
    let e = cpu_engine();
    assert_eq!(e.device_policy(), DevicePolicy::Cpu);
    let (device, why) = e.explain(u64::MAX);
    assert_eq!(device, Device::Cpu);
    assert!(why.contains("policy is cpu"), "{why}");
    assert!(matches!(e.gpu_status(), recall::GpuStatus::Unavailable(_)));
}

#[test]
fn policies_parse() {
    assert_eq!(DevicePolicy::parse("GPU"), Some(DevicePolicy::Gpu));
    assert_eq!(DevicePolicy::parse(" cpu "), Some(DevicePolicy::Cpu));
    assert_eq!(DevicePolicy::parse("auto"), Some(DevicePolicy::Auto));
    assert_eq!(DevicePolicy::parse("tpu"), None);
}

#[test]
fn counters_count_calls() {
    let e = cpu_engine();
    let x = [1.0f32, 2.0];
    e.cosine_similarity(&x, &x, 2).unwrap();
    e.cosine_similarity(&x, &x, 1).unwrap();
    assert_eq!(e.counters(), (2, 0, 0));
}

#[test]
fn knn_and_candidates_rank_best_first_with_ties_to_lower_ids() {
    use recall::Metric;
    let e = cpu_engine();
    // Rows 0 and 2 are identical: a tie, broken by the lower id.
    let corpus = [
        1.0, 0.0, /* */ 0.0, 1.0, /* */ 1.0, 0.0, /* */ 0.6, 0.8,
    ];
    let q = [1.0, 0.1];
    let n = e.knn(&q, &corpus, 2, Metric::Cosine, 3).unwrap();
    assert_eq!(n.query(0).0, &[0, 2, 3]);
    let n = e.knn(&q, &corpus, 2, Metric::L2, 4).unwrap();
    assert_eq!(n.query(0).0, &[0, 2, 3, 1]);
    assert!(
        n.scores.windows(2).all(|w| w[0] <= w[1]),
        "l2 ranks lower distances first"
    );
    let c = e
        .score_candidates(&q, &corpus, 2, Metric::Dot, &[0, 3], &[3, 1, 2], 2)
        .unwrap();
    assert_eq!(c.query(0).0, &[2, 3]);
    assert!(matches!(
        e.knn(&q, &corpus, 2, Metric::Dot, 0),
        Err(Error::InvalidInput(_))
    ));
    assert!(matches!(
        e.knn(&q, &corpus, 2, Metric::Dot, 5),
        Err(Error::InvalidInput(_))
    ));
    assert!(matches!(
        e.score_candidates(&q, &corpus, 2, Metric::Dot, &[0, 2], &[1, 1], 1),
        Err(Error::InvalidInput(_))
    ));
    assert!(matches!(
        e.score_candidates(&q, &corpus, 2, Metric::Dot, &[0, 1], &[9], 1),
        Err(Error::InvalidInput(_))
    ));
    assert!(matches!(
        e.score_candidates(&q, &corpus, 2, Metric::Dot, &[0, 2], &[1], 1),
        Err(Error::InvalidInput(_))
    ));
}

#[test]
fn spreading_and_kmeans_through_the_facade() {
    use recall::{SpreadGraph, SpreadParams};
    let e = cpu_engine();
    // 0 -> 1 (w 1), 1 -> 2 (w 0.5), 3 isolated.
    let graph = SpreadGraph::from_csr(&[0, 1, 2, 2, 2], &[1, 2], &[1.0, 0.5]).unwrap();
    let params = SpreadParams {
        decay: 0.5,
        threshold: 0.0,
        hops: 2,
        k: 3,
    };
    let a = e.spread(&graph, &[1.0, 0.0, 0.0, 0.0], &params).unwrap();
    assert_eq!(a.activation, vec![1.0, 0.5, 0.125, 0.0]);
    assert_eq!(a.top.ids, vec![0, 1, 2]);
    let bad = SpreadParams {
        decay: 1.5,
        ..params
    };
    assert!(matches!(
        e.spread(&graph, &[1.0, 0.0, 0.0, 0.0], &bad),
        Err(Error::InvalidInput(_))
    ));
    assert!(matches!(
        e.spread(&graph, &[-1.0, 0.0, 0.0, 0.0], &params),
        Err(Error::InvalidInput(_))
    ));

    // Two well separated groups: k-means finds them, and Lloyd never increases the inertia.
    let points = [
        0.0, 0.0, 0.1, 0.0, 0.0, 0.1, 10.0, 10.0, 10.1, 10.0, 10.0, 10.1,
    ];
    let c = e.kmeans(&points, 2, 2, 4, 7).unwrap();
    assert_eq!(c.assignments[0], c.assignments[1]);
    assert_eq!(c.assignments[3], c.assignments[5]);
    assert_ne!(c.assignments[0], c.assignments[3]);
    assert!(
        c.inertia.windows(2).all(|w| w[1] <= w[0]),
        "{:?}",
        c.inertia
    );
    assert!(matches!(
        e.kmeans(&points, 2, 7, 1, 0),
        Err(Error::InvalidInput(_))
    ));
}

#[test]
fn clip_and_noise_is_deterministic_and_clips() {
    let e = cpu_engine();
    let x = [3.0, 4.0, /* */ 0.3, 0.4];
    let clipped = e.clip_and_noise(&x, 2, 1.0, 0.0, 9).unwrap();
    // Row 0 (norm 5) is scaled to norm 1; row 1 (norm 0.5) is left alone; sigma 0 adds nothing.
    assert_eq!(
        clipped.values,
        vec![3.0 * (1.0f32 / 5.0), 4.0 * (1.0f32 / 5.0), 0.3, 0.4]
    );
    let a = e.clip_and_noise(&x, 2, 1.0, 0.5, 9).unwrap();
    let b = e.clip_and_noise(&x, 2, 1.0, 0.5, 9).unwrap();
    let c = e.clip_and_noise(&x, 2, 1.0, 0.5, 10).unwrap();
    assert_eq!(a, b, "same seed, same noise");
    assert_ne!(a.values, c.values, "another seed, other noise");
    assert!(matches!(
        e.clip_and_noise(&x, 2, 0.0, 0.5, 9),
        Err(Error::InvalidInput(_))
    ));
    assert!(matches!(
        e.clip_and_noise(&x, 2, 1.0, -1.0, 9),
        Err(Error::InvalidInput(_))
    ));
}

#[test]
fn clip_and_noise_into_a_reused_buffer_gives_the_same_values() {
    let e = cpu_engine();
    let x: Vec<f32> = (0..4 * 33)
        .map(|i| ((i * 7 % 13) as f32 - 6.0) / 4.0)
        .collect();
    let want = e.clip_and_noise(&x, 33, 1.0, 0.5, 3).unwrap().values;
    let mut out = vec![f32::NAN; x.len()];
    let ran = e
        .clip_and_noise_into(&x, 33, 1.0, 0.5, 3, &mut out)
        .unwrap();
    assert_eq!(
        ran.device,
        e.clip_and_noise(&x, 33, 1.0, 0.5, 3).unwrap().device
    );
    assert!(
        out.iter()
            .zip(&want)
            .all(|(a, b)| a.to_bits() == b.to_bits()),
        "the same bits as clip_and_noise"
    );
    // A buffer of the wrong length, or bad input: a typed error, the buffer untouched.
    let mut short = vec![7.0f32; x.len() - 1];
    assert!(matches!(
        e.clip_and_noise_into(&x, 33, 1.0, 0.5, 3, &mut short),
        Err(Error::InvalidInput(_))
    ));
    assert!(short.iter().all(|v| *v == 7.0));
    assert!(matches!(
        e.clip_and_noise_into(&x, 33, -1.0, 0.5, 3, &mut out),
        Err(Error::InvalidInput(_))
    ));
}

#[test]
fn a_corpus_handle_gives_the_same_neighbours() {
    use recall::Metric;
    let e = cpu_engine();
    let data: Vec<f32> = (0..60)
        .map(|i| ((i * 37 % 11) as f32 - 5.0) / 3.0)
        .collect();
    let corpus = e.corpus(data.clone(), 4).unwrap();
    assert_eq!((corpus.n_rows(), corpus.dim()), (15, 4));
    let q = [0.5, -1.0, 2.0, 0.25, /* */ 1.0, 1.0, 1.0, 1.0];
    for metric in [Metric::Cosine, Metric::Dot, Metric::L2] {
        let a = e.knn(&q, &data, 4, metric, 5).unwrap();
        let b = e.knn_in(&q, &corpus, metric, 5).unwrap();
        assert_eq!((a.ids, a.scores), (b.ids, b.scores), "{metric:?}");
    }
    assert!(matches!(
        e.corpus(vec![1.0; 7], 4),
        Err(Error::InvalidInput(_))
    ));
    assert!(matches!(
        e.corpus(vec![f32::NAN; 8], 4),
        Err(Error::InvalidInput(_))
    ));
    assert!(matches!(
        e.knn_in(&q, &corpus, Metric::Dot, 16),
        Err(Error::InvalidInput(_))
    ));
    assert!(matches!(
        e.knn_in(&q[..3], &corpus, Metric::Dot, 1),
        Err(Error::InvalidInput(_))
    ));
}

#[test]
fn a_tenant_whose_running_cap_field_is_zero_still_gets_turns() {
    // `TenantConfig::max_running(0)` is taken as 1; the public field set to `Some(0)` made every call of the
    // tenant wait forever (here: time out) for a turn it could never get.
    let engine = cpu_engine();
    let mut config = recall::TenantConfig::new("capped");
    config.max_running = Some(0);
    let tenant = engine.add_tenant(config);
    let view = engine.for_tenant(
        tenant,
        recall::Wait::Timeout(std::time::Duration::from_secs(10)),
    );
    let hits = view
        .knn(&[1.0], &[1.0, 2.0], 1, recall::Metric::Dot, 1)
        .unwrap();
    assert_eq!(hits.ids, [1]);
}

#[test]
fn a_tenant_of_another_engine_is_a_configuration_error() {
    // It was reported as `Error::Internal`, which says "a bug in recall".
    let (a, b) = (cpu_engine(), cpu_engine());
    a.add_tenant(recall::TenantConfig::new("first"));
    let foreign = a.add_tenant(recall::TenantConfig::new("second"));
    let err = b
        .for_tenant(foreign, recall::Wait::Reject)
        .knn(&[1.0], &[1.0, 2.0], 1, recall::Metric::Dot, 1)
        .unwrap_err();
    assert!(matches!(err, Error::Config(_)), "{err:?}");
}

#[test]
fn cosine_similarity_through_a_tenant_view_runs_as_the_tenant() {
    // It ran with the engine's default options: outside the tenant's queue (and its VRAM quota and metrics),
    // while every other call of the view ran as the tenant.
    let engine = cpu_engine();
    let tenant = engine.add_tenant(recall::TenantConfig::new("cos"));
    let view = engine.for_tenant(tenant, recall::Wait::Reject);
    let (q, c) = ([1.0, 0.0], [1.0, 0.0, 0.0, 1.0]);
    let admitted = |engine: &Engine| {
        engine
            .metrics_text()
            .lines()
            .find_map(|l| l.strip_prefix("recall_tenant_admitted_total{tenant=\"cos\"} "))
            .map(str::to_owned)
    };
    assert_eq!(
        view.cosine_similarity(&q, &c, 2).unwrap().values,
        [1.0, 0.0]
    );
    assert_eq!(admitted(&engine).as_deref(), Some("1"));
    view.similarity(&q, &c, 2, recall::Metric::Dot).unwrap();
    assert_eq!(admitted(&engine).as_deref(), Some("2"));
    // The engine itself still runs outside any tenant.
    engine.cosine_similarity(&q, &c, 2).unwrap();
    assert_eq!(admitted(&engine).as_deref(), Some("2"));
}
