//! The embedded kernel bundle and the choice of image for a device.

use recall_gpu_sys::driver::CudaModule;
use recall_gpu_sys::{Gpu, GpuError, ModuleImage};
use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

/// SMs with a cubin (and PTX) in the bundle, ascending.
pub const ARCHES: [u32; 10] = [50, 52, 60, 61, 70, 75, 80, 86, 89, 90];

/// The bundle's manifest: tool versions and per-kernel resource usage per arch.
pub const MANIFEST: &str = include_str!("../bundle/MANIFEST.txt");

/// Machine code for one SM, or PTX for the driver to JIT.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ImageKind {
    Cubin,
    Ptx,
}

impl fmt::Display for ImageKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ImageKind::Cubin => "cubin",
            ImageKind::Ptx => "ptx",
        })
    }
}

/// One image of the bundle.
#[derive(Debug, Clone, Copy)]
pub struct BundleImage {
    pub sm: u32,
    pub kind: ImageKind,
    /// The image's file: a cubin, or a PTX text whose `.version` / `.target` lines are those of sm_`text_of`.
    pub bytes: &'static [u8],
    /// For PTX, the arch whose file `bytes` is (see `PTX_TEXTS`); `sm` for a cubin.
    pub text_of: u32,
}

impl BundleImage {
    /// The PTX for the driver to JIT: the file as it is when it is this arch's own, else its text with this
    /// arch's `.version` and `.target` lines. An error for a cubin or a file that is not UTF-8.
    pub fn ptx_text(&self) -> Result<Cow<'static, str>, String> {
        if self.kind != ImageKind::Ptx {
            return Err(format!("sm_{} {} is not PTX", self.sm, self.kind));
        }
        let text = std::str::from_utf8(self.bytes).map_err(|e| e.to_string())?;
        if self.text_of == self.sm {
            return Ok(Cow::Borrowed(text));
        }
        let isa = PTX_TEXTS
            .iter()
            .find(|(sm, ..)| *sm == self.sm)
            .map(|(_, isa, _)| *isa)
            .ok_or_else(|| format!("sm_{} has no PTX in the bundle", self.sm))?;
        let mut out = String::with_capacity(text.len());
        for line in text.split_inclusive('\n') {
            if line.starts_with(".version ") {
                out.push_str(&format!(".version {}.{}\n", isa / 10, isa % 10));
            } else if line.starts_with(".target ") {
                out.push_str(&format!(".target sm_{}\n", self.sm));
            } else {
                out.push_str(line);
            }
        }
        Ok(Cow::Owned(out))
    }

    /// Load the image into `gpu`'s context: a cubin as it is, PTX ([`BundleImage::ptx_text`]) through the
    /// driver's JIT.
    pub fn load(&self, gpu: &Gpu) -> Result<Arc<CudaModule>, GpuError> {
        match self.kind {
            ImageKind::Cubin => gpu.load_module(ModuleImage::Cubin(self.bytes)),
            ImageKind::Ptx => {
                let (major, minor) = gpu.info().compute_capability;
                let text = self.ptx_text().map_err(|reason| GpuError::NoImage {
                    major,
                    minor,
                    reason,
                })?;
                gpu.load_module(ModuleImage::Ptx(&text))
            }
        }
    }
}

/// Per arch: (SM, PTX ISA version x 10, the arch whose PTX file holds its text). `cargo xtask build-kernels`
/// writes a PTX file only for an arch whose text differs from every older one's beyond the `.version` /
/// `.target` lines (the manifest says which file each arch's text is in; a test holds this table to it), so the
/// bundle carries 3 PTX files instead of 10 (about 11 MiB less).
pub const PTX_TEXTS: [(u32, u32, u32); 10] = [
    (50, 60, 50),
    (52, 60, 50),
    (60, 60, 50),
    (61, 60, 50),
    (70, 60, 50),
    (75, 63, 50),
    (80, 70, 80),
    (86, 71, 86),
    (89, 78, 86),
    (90, 78, 86),
];

macro_rules! cubins {
    ($($sm:literal),*) => {
        [$(
            BundleImage { sm: $sm, kind: ImageKind::Cubin, bytes: include_bytes!(concat!("../bundle/sm_", $sm, ".cubin")), text_of: $sm },
        )*]
    };
}

static CUBINS: [BundleImage; 10] = cubins!(50, 52, 60, 61, 70, 75, 80, 86, 89, 90);

/// The PTX files: (the arch they are of, the file).
static PTX_FILES: [(u32, &[u8]); 3] = [
    (50, include_bytes!("../bundle/compute_50.ptx")),
    (80, include_bytes!("../bundle/compute_80.ptx")),
    (86, include_bytes!("../bundle/compute_86.ptx")),
];

/// The sm_90a image (`sm90a_*` kernels only: fast mode on `wgmma`), loaded beside the sm_90 image on devices
/// of compute capability 9.0 exactly: its cubin, and its PTX for the driver to JIT if the cubin is refused.
pub static SM90A_IMAGES: [BundleImage; 2] = [
    BundleImage {
        sm: 90,
        kind: ImageKind::Cubin,
        bytes: include_bytes!("../bundle/sm_90a.cubin"),
        text_of: 90,
    },
    BundleImage {
        sm: 90,
        kind: ImageKind::Ptx,
        bytes: include_bytes!("../bundle/compute_90a.ptx"),
        text_of: 90,
    },
];

/// The bundle image of `kind` for `sm`, if there is one.
pub fn image(sm: u32, kind: ImageKind) -> Option<BundleImage> {
    match kind {
        ImageKind::Cubin => CUBINS.iter().copied().find(|i| i.sm == sm),
        ImageKind::Ptx => {
            let (_, _, text_of) = PTX_TEXTS.iter().copied().find(|(s, ..)| *s == sm)?;
            let (_, bytes) = PTX_FILES.iter().copied().find(|(s, _)| *s == text_of)?;
            Some(BundleImage {
                sm,
                kind,
                bytes,
                text_of,
            })
        }
    }
}

/// The images to try for a device, in order, and why none fits when that is so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    /// Images to try in order (the first that loads wins).
    pub candidates: Vec<(u32, ImageKind)>,
}

/// Choose the images for a device of compute capability `(major, minor)`.
///
/// Without `force`: the exact cubin if the bundle has the device's SM, then the newest PTX whose SM is not
/// newer than the device. With `force = Some(sm)`: that arch's code only: its cubin when `sm` is the
/// device's own SM, its PTX (JIT-compiled for the device) otherwise; an `sm` newer than the device, or not
/// in the bundle, is an error.
pub fn select_image(major: u32, minor: u32, force: Option<u32>) -> Result<Selection, String> {
    let device_sm = major * 10 + minor;
    if let Some(sm) = force {
        if !ARCHES.contains(&sm) {
            return Err(format!(
                "sm_{sm} is not in the bundle (it has {})",
                arch_list()
            ));
        }
        if sm > device_sm {
            return Err(format!(
                "sm_{sm} code cannot run on this sm_{device_sm} device"
            ));
        }
        let kind = if sm == device_sm {
            ImageKind::Cubin
        } else {
            ImageKind::Ptx
        };
        return Ok(Selection {
            candidates: vec![(sm, kind)],
        });
    }
    let mut candidates = Vec::new();
    if ARCHES.contains(&device_sm) {
        candidates.push((device_sm, ImageKind::Cubin));
    }
    if let Some(&sm) = ARCHES.iter().rev().find(|&&sm| sm <= device_sm) {
        candidates.push((sm, ImageKind::Ptx));
    }
    if candidates.is_empty() {
        return Err(format!(
            "sm_{device_sm} is older than every arch in the bundle ({})",
            arch_list()
        ));
    }
    Ok(Selection { candidates })
}

fn arch_list() -> String {
    ARCHES
        .iter()
        .map(|s| format!("sm_{s}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_arch_has_a_cubin_and_ptx() {
        for sm in ARCHES {
            let cubin = image(sm, ImageKind::Cubin).expect("cubin");
            assert!(
                cubin.bytes.starts_with(b"\x7fELF"),
                "sm_{sm} cubin is not ELF"
            );
            let ptx = image(sm, ImageKind::Ptx)
                .expect("ptx")
                .ptx_text()
                .expect("utf8");
            assert!(
                ptx.contains(&format!("\n.target sm_{sm}\n")),
                "sm_{sm} PTX targets another arch"
            );
            assert!(!ptx.contains('\0'));
            // The text declares the ISA the manifest says this arch's was built for, and comes from the file
            // the manifest names.
            let (_, isa, text_of) = PTX_TEXTS.iter().find(|(s, ..)| *s == sm).expect("listed");
            let line = format!(
                "[sm_{sm}] ptx-isa {}.{} (text: compute_{text_of}.ptx)",
                isa / 10,
                isa % 10
            );
            assert!(MANIFEST.contains(&line), "manifest lacks `{line}`");
            assert!(
                ptx.contains(&format!("\n.version {}.{}\n", isa / 10, isa % 10)),
                "sm_{sm}"
            );
        }
        // Every PTX file is some arch's own text.
        for (sm, bytes) in PTX_FILES {
            let text = std::str::from_utf8(bytes).expect("utf8");
            assert!(
                text.contains(&format!("\n.target sm_{sm}\n")),
                "compute_{sm}.ptx"
            );
        }
    }

    #[test]
    fn the_sm90a_image_holds_the_wgmma_kernels_and_no_other_image_does() {
        let [cubin, ptx] = &SM90A_IMAGES;
        assert!(cubin.bytes.starts_with(b"\x7fELF"));
        let ptx = std::str::from_utf8(ptx.bytes).expect("utf8");
        assert!(
            ptx.contains(".target sm_90a"),
            "sm_90a PTX targets another arch"
        );
        let wgmma: Vec<&str> = MANIFEST
            .lines()
            .find_map(|l| l.strip_prefix("kernels: "))
            .expect("manifest lists the kernels")
            .split_whitespace()
            .filter(|k| k.starts_with("sm90a_"))
            .collect();
        // f16 and bf16, three metrics, the GEMM, the fused knn and its many-heads form; the one-query knn1, query
        // in memory or in the parameters, its server, and the one-query scan with 256-byte L2 requests (three
        // metrics each); and the one-pass clip-and-noise with bulk copies.
        assert_eq!(wgmma.len(), 31, "{wgmma:?}");
        for k in &wgmma {
            assert!(
                ptx.contains(&format!(".entry {k}(")),
                "{k} missing from the sm_90a PTX"
            );
            for sm in ARCHES {
                let other = std::str::from_utf8(image(sm, ImageKind::Ptx).expect("ptx").bytes)
                    .expect("utf8");
                assert!(
                    !other.contains(&format!(".entry {k}(")),
                    "{k} in the sm_{sm} PTX"
                );
            }
        }
        assert!(ptx.contains("wgmma.mma_async"));
    }

    #[test]
    fn the_hopper_scan_is_built_for_the_blocks_its_launcher_makes() {
        // `scan1_plan` runs `sm90a_scan1_*` for blocks of up to SCAN1_HOPPER_MAX_WARPS warps; a launch bound
        // below that would make such a launch fail.
        let ptx = std::str::from_utf8(SM90A_IMAGES[1].bytes).expect("utf8");
        for metric in ["dot", "cosine", "l2"] {
            let entry = format!(".entry sm90a_scan1_{metric}(");
            let at = ptx.find(&entry).expect("sm90a_scan1 entry");
            let body = &ptx[at..];
            let maxntid: u32 = body
                .split_once(".maxntid ")
                .and_then(|(_, rest)| rest.split(',').next())
                .and_then(|n| n.trim().parse().ok())
                .expect("sm90a_scan1 carries a launch bound");
            assert!(
                body.find(".maxntid") < body.find('{'),
                "the launch bound belongs to this entry"
            );
            assert!(
                maxntid >= 32 * crate::scan1::SCAN1_HOPPER_MAX_WARPS,
                "sm90a_scan1_{metric}: .maxntid {maxntid}"
            );
        }
    }

    #[test]
    fn the_one_query_hopper_kernels_take_a_64_byte_aligned_parameter() {
        // `sm90a_knn1*` hand their parameter's first field, a tensor map, to the tensor memory accelerator, which
        // needs it 64-byte aligned: the build declares it so (rustc stops at 16).
        let ptx = std::str::from_utf8(SM90A_IMAGES[1].bytes).expect("utf8");
        for metric in ["dot", "cosine", "l2"] {
            for name in [
                format!("sm90a_knn1_{metric}"),
                format!("sm90a_knn1q_{metric}"),
            ] {
                assert!(
                    ptx.contains(&format!(".param .align 64 .b8 {name}_param_0[")),
                    "{name}'s parameter is not declared 64-byte aligned"
                );
            }
        }
    }

    #[test]
    fn exact_cubin_first_then_newest_older_ptx() {
        assert_eq!(
            select_image(9, 0, None).unwrap().candidates,
            vec![(90, ImageKind::Cubin), (90, ImageKind::Ptx)]
        );
        // sm_87 (Orin): no cubin; newest PTX not newer is sm_86.
        assert_eq!(
            select_image(8, 7, None).unwrap().candidates,
            vec![(86, ImageKind::Ptx)]
        );
        // A future arch JITs the newest PTX.
        assert_eq!(
            select_image(12, 0, None).unwrap().candidates,
            vec![(90, ImageKind::Ptx)]
        );
        assert!(select_image(3, 5, None).is_err());
    }

    #[test]
    fn forcing_an_arch() {
        assert_eq!(
            select_image(9, 0, Some(86)).unwrap().candidates,
            vec![(86, ImageKind::Ptx)]
        );
        assert_eq!(
            select_image(9, 0, Some(90)).unwrap().candidates,
            vec![(90, ImageKind::Cubin)]
        );
        assert!(
            select_image(8, 6, Some(90))
                .unwrap_err()
                .contains("cannot run")
        );
        assert!(
            select_image(9, 0, Some(87))
                .unwrap_err()
                .contains("not in the bundle")
        );
    }

    #[test]
    fn manifest_lists_every_arch_and_kernel() {
        for sm in ARCHES {
            assert!(MANIFEST.contains(&format!("[sm_{sm}]")));
        }
        for kernel in [
            "row_norms_f32",
            "scan_cosine",
            "gather_l2",
            "gemm_dot",
            "select_histogram",
        ] {
            assert!(MANIFEST.contains(kernel), "{kernel} missing");
        }
    }
}
