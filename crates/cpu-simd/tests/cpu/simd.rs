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
    #[cfg(target_arch = "aarch64")]
    assert_eq!(
        detected,
        SimdLevel::Neon,
        "every aarch64 std target has NEON"
    );
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
    #[cfg(target_arch = "aarch64")]
    {
        // The x86 levels do not exist here: asking for them gives the best level below, NEON.
        assert_eq!(Cpu::with_level(SimdLevel::Avx512).level(), SimdLevel::Neon);
        assert_eq!(Cpu::with_level(SimdLevel::Avx2).level(), SimdLevel::Neon);
        assert_eq!(available_levels(), [SimdLevel::Scalar, SimdLevel::Neon]);
    }
    assert_eq!(SimdLevel::parse(" AVX2 ").expect("known"), SimdLevel::Avx2);
}

/// Runs this test binary again with `RECALL_CPU_SIMD=scalar` and checks that the child saw the scalar level.
///
/// A test binary cross-built for aarch64 and run by `qemu-aarch64` (the CI's and the developers' way to
/// test the NEON path on an x86-64 machine) cannot start a copy of itself unless the host registered
/// qemu with binfmt_misc: there, and only off x86-64, a child that never started skips the test with a
/// reason. On x86-64 the child must start.
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
        .output();
    let out = match out {
        Ok(out) => out,
        Err(e) if !cfg!(target_arch = "x86_64") => {
            println!("skipped: cannot re-execute the test binary here ({e}; an emulator?)");
            return;
        }
        Err(e) => panic!("run the child: {e}"),
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !cfg!(target_arch = "x86_64") && !stdout.contains("running 1 test") {
        println!(
            "skipped: the child never started (status {:?}; an emulator without binfmt_misc?)",
            out.status
        );
        return;
    }
    assert!(out.status.success(), "child failed: {stdout}");
    assert!(
        stdout.contains("child level: Scalar"),
        "child output: {stdout}"
    );
}
