//! Discovery must answer, never panic, with or without a driver.

use recall_gpu_sys::{NoGpu, probe};

#[test]
fn probe_answers_without_panicking() {
    let p = probe();
    match &p.result {
        Ok(devices) => {
            assert!(!devices.is_empty());
            for d in devices {
                assert!(d.compute_capability.0 >= 5, "{d:?}");
                assert!(d.total_memory > 0 && d.sm_count > 0, "{d:?}");
            }
            eprintln!(
                "found {} GPU(s): {:?}",
                devices.len(),
                devices.iter().map(|d| &d.name).collect::<Vec<_>>()
            );
        }
        Err(why) => {
            eprintln!("no GPU: {why}");
            // Every reason renders as one readable line.
            let line = why.to_string();
            assert!(!line.is_empty() && !line.contains('\n'));
            if matches!(why, NoGpu::NoDriver) {
                assert_eq!(p.driver_version, None);
            }
        }
    }
    // A second probe gives the same kind of answer.
    assert_eq!(probe().result.is_ok(), p.result.is_ok());
}
