//! Which SIMD path ran, and the environment override.

use recall_cpu_simd::*;

#[test]
fn shows_and_asserts_which_simd_path_ran() {
    let detected = detected_level();
    let active = simd_level();
    println!(
        "detected simd level: {detected:?}; active: {active:?}; available: {:?}",
        available_levels()
    );
    #[cfg(target_arch = "x86_64")]
    {
        let expect = if is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("fma") {
            SimdLevel::Avx512
        } else if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            SimdLevel::Avx2
        } else {
            SimdLevel::Scalar
        };
        assert_eq!(detected, expect);
    }
    match std::env::var("RECALL_CPU_SIMD") {
        Ok(name) => {
            assert!(active <= detected && active <= SimdLevel::parse(&name).unwrap_or(detected))
        }
        Err(_) => assert_eq!(active, detected),
    }
    let corpus = vec![0.5f32; 64 * 33];
    let queries = vec![0.25f32; 2 * 33];
    for level in available_levels() {
        let before = kernel_runs(level);
        let cpu = Cpu::with_level(level);
        assert_eq!(cpu.level(), level);
        cpu.knn(&queries, &Corpus::f32(&corpus, 33), Metric::Cosine, 3)
            .expect("valid");
        let after = kernel_runs(level);
        println!(
            "{level:?}: {} dense kernel calls ran at this level",
            after - before
        );
        assert!(after > before, "{level:?} did not run");
    }
}

#[test]
fn levels_can_only_be_lowered() {
    let top = detected_level();
    assert_eq!(
        Cpu::with_level(SimdLevel::Avx512).level(),
        top.min(SimdLevel::Avx512).max(Cpu::with_level(top).level())
    );
    assert_eq!(
        Cpu::with_level(SimdLevel::Scalar).level(),
        SimdLevel::Scalar
    );
    #[cfg(target_arch = "x86_64")]
    assert_eq!(Cpu::with_level(SimdLevel::Neon).level(), SimdLevel::Scalar);
    assert_eq!(SimdLevel::parse(" AVX2 ").expect("known"), SimdLevel::Avx2);
}

/// Runs this test binary again with `RECALL_CPU_SIMD=scalar` and checks that the child saw the scalar level.
#[test]
fn env_override_lowers_the_level() {
    if std::env::var("RECALL_CPU_SIMD_CHILD").is_ok() {
        println!("child level: {:?}", simd_level());
        assert_eq!(simd_level(), SimdLevel::Scalar);
        return;
    }
    let exe = std::env::current_exe().expect("test binary path");
    let out = std::process::Command::new(exe)
        .args([
            "--exact",
            "simd::env_override_lowers_the_level",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("RECALL_CPU_SIMD", "scalar")
        .env("RECALL_CPU_SIMD_CHILD", "1")
        .output()
        .expect("run the child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "child failed: {stdout}");
    assert!(
        stdout.contains("child level: Scalar"),
        "child output: {stdout}"
    );
}
