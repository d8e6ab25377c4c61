//! What a person reads when there is no GPU or the bundle does not fit: reviewed as snapshots.

use recall_gpu_kernels::{ARCHES, KernelError, select_image};
use recall_gpu_sys::{GpuError, MIN_DRIVER_VERSION, NoGpu};

#[test]
fn no_gpu_reasons() {
    let lines: Vec<String> = [
        NoGpu::NoDriver,
        NoGpu::DriverTooOld {
            found: 11080,
            required: MIN_DRIVER_VERSION,
        },
        NoGpu::NoDevice,
        NoGpu::InitFailed(GpuError::BindingPanicked {
            call: "device discovery",
        }),
    ]
    .iter()
    .map(ToString::to_string)
    .collect();
    insta::assert_snapshot!(lines.join("\n"));
}

#[test]
fn image_selection_errors() {
    let lines = [
        select_image(3, 5, None).unwrap_err(),
        select_image(8, 6, Some(90)).unwrap_err(),
        select_image(9, 0, Some(87)).unwrap_err(),
        KernelError::Shape {
            kernel: "cosine_f32_rows",
            reason: "corpus holds 10 elements, needs 12".into(),
        }
        .to_string(),
    ];
    insta::assert_snapshot!(lines.join("\n"));
}

#[test]
fn bundle_inventory() {
    // The arches and kernels the bundle ships; a change here is a change users see.
    let kernels = recall_gpu_kernels::MANIFEST
        .lines()
        .find_map(|l| l.strip_prefix("kernels: "))
        .unwrap_or("")
        .to_string();
    let arches: Vec<String> = ARCHES.iter().map(|s| format!("sm_{s}")).collect();
    insta::assert_snapshot!(format!("arches: {}\nkernels: {kernels}", arches.join(" ")));
}
