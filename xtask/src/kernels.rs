//! `cargo xtask build-kernels`: Rust kernels to a bundle of cubins and PTX, with no CUDA toolkit installed.
//!
//! The path (see `docs/adr/0002-upstream-nvptx-target.md` and `../shared/TOOLCHAIN.md`):
//! 1. rustc (pinned nightly, `-Zbuild-std=core`) compiles `kernels-rs` for `nvptx64-nvidia-cuda` and calls
//!    its linker with LLVM bitcode. That linker is this program ([`link_main`]): it extracts the rlibs,
//!    links all bitcode with `llvm-link`, then internalizes everything but the kernels and optimises with
//!    `opt`. The result is one optimised bitcode module.
//! 2. For each arch, the `target-cpu`/`target-features` attributes are stripped and `llc` lowers the
//!    module to PTX for that SM (this also reaches sm_50..sm_61, which rustc itself refuses as targets).
//! 3. Each PTX passes the numerics guard (no unrounded float add/sub/mul that `ptxas` could fuse, no
//!    `.ftz`, no `.approx`), then CUDA 12.9's `ptxas` assembles a cubin for that SM.
//! 4. The bundle holds every cubin and every arch's PTX (for driver JIT on devices without an exact cubin,
//!    and so that `diff-test --arch` can run any arch's code on the GPU at hand), plus `MANIFEST.txt`
//!    (arches, tool versions, per-kernel registers and shared memory).
//!
//! Everything it needs is installed on first use into project-local places: the nightly and its
//! components through rustup, `ptxas` from PyPI (`nvidia-cuda-nvcc-cu12`) into `target/tools`.

use crate::project_root;
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// Set (to any value) when rustc runs this program as the nvptx linker.
pub const LINKER_ROLE_ENV: &str = "RECALL_XTASK_NVPTX_LINKER";
const LLVM_BIN_ENV: &str = "RECALL_XTASK_LLVM_BIN";

/// (SM, PTX ISA version) for every arch in the bundle. The ISA is the oldest that supports the SM, so the
/// oldest drivers that know the SM can JIT or load it.
pub const ARCHES: [(u32, u32); 10] = [
    (50, 60),
    (52, 60),
    (60, 60),
    (61, 60),
    (70, 60),
    (75, 63),
    (80, 70),
    (86, 71),
    (89, 78),
    (90, 78),
];

const NVCC_WHEEL: &str = "nvidia-cuda-nvcc-cu12==12.9.86";
const NVCC_DIR: &str = "cuda-nvcc-12.9.86";
const NVPTX_TARGET: &str = "nvptx64-nvidia-cuda";

fn bundle_dir() -> PathBuf {
    project_root().join("crates/gpu-kernels/bundle")
}

fn run(cmd: &mut Command) -> Result<String, String> {
    let shown = format!("{cmd:?}");
    let out = cmd
        .output()
        .map_err(|e| format!("could not start {shown}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{shown} failed ({})\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    Ok(text)
}

/// The pinned nightly, read from `kernels-rs/rust-toolchain.toml` (the one place it is written).
fn nightly() -> Result<String, String> {
    let path = project_root().join("kernels-rs/rust-toolchain.toml");
    let text = fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    text.lines()
        .find_map(|l| {
            let l = l.trim();
            l.strip_prefix("channel").map(|rest| {
                rest.trim_start_matches([' ', '='])
                    .trim_matches('"')
                    .to_string()
            })
        })
        .ok_or_else(|| format!("{}: no `channel`", path.display()))
}

fn ensure_nightly(nightly: &str) -> Result<PathBuf, String> {
    let sysroot = Command::new("rustup")
        .args(["run", nightly, "rustc", "--print", "sysroot"])
        .output();
    let have = matches!(&sysroot, Ok(o) if o.status.success());
    if !have {
        eprintln!("xtask: installing {nightly} (rust-src, llvm-tools) with rustup");
    }
    // Idempotent: also adds the components to a nightly installed without them.
    run(Command::new("rustup").args([
        "toolchain",
        "install",
        nightly,
        "--profile",
        "minimal",
        "--component",
        "rust-src,llvm-tools",
    ]))?;
    let out = run(Command::new("rustup").args(["run", nightly, "rustc", "--print", "sysroot"]))?;
    let host = run(Command::new("rustup").args(["run", nightly, "rustc", "-vV"]))?
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_string))
        .ok_or("rustc -vV printed no host")?;
    let bin = PathBuf::from(out.trim())
        .join("lib/rustlib")
        .join(host)
        .join("bin");
    for tool in ["llvm-link", "llvm-ar", "llvm-dis", "opt", "llc"] {
        if !bin.join(tool).exists() {
            return Err(format!(
                "{} missing after installing llvm-tools",
                bin.join(tool).display()
            ));
        }
    }
    Ok(bin)
}

fn ensure_ptxas() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("RECALL_PTXAS") {
        return Ok(PathBuf::from(p));
    }
    let dir = project_root().join("target/tools").join(NVCC_DIR);
    let ptxas = dir.join("nvidia/cuda_nvcc/bin/ptxas");
    if !ptxas.exists() {
        eprintln!(
            "xtask: installing ptxas ({NVCC_WHEEL}) into {}",
            dir.display()
        );
        let python = if Command::new("python3").arg("--version").output().is_ok() {
            "python3"
        } else {
            "python"
        };
        run(Command::new(python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--no-deps",
                "--target",
            ])
            .arg(&dir)
            .arg(NVCC_WHEEL))?;
    }
    if !ptxas.exists() {
        return Err(format!("{} missing after pip install", ptxas.display()));
    }
    Ok(ptxas)
}

/// `build-kernels [--check]`.
pub fn build(args: &[String]) -> Result<(), String> {
    let check = args.iter().any(|a| a == "--check");
    if let Some(bad) = args.iter().find(|a| *a != "--check") {
        return Err(format!("build-kernels: unknown argument {bad}"));
    }
    let root = project_root();
    let nightly = nightly()?;
    let llvm_bin = ensure_nightly(&nightly)?;
    let ptxas = ensure_ptxas()?;
    let work = root.join("target/kernels");
    fs::create_dir_all(&work).map_err(|e| e.to_string())?;

    // 1. Compile and link to optimised bitcode (this program is the linker).
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let remap = format!("--remap-path-prefix={}=/recall", root.display());
    let mut cargo = Command::new("rustup");
    cargo
        .args([
            "run",
            &nightly,
            "cargo",
            "build",
            "--release",
            "--locked",
            "-Zbuild-std=core",
        ])
        .args(["--target", NVPTX_TARGET, "--manifest-path"])
        .arg(root.join("kernels-rs/Cargo.toml"))
        .env("CARGO_TARGET_DIR", work.join("cargo"))
        .env("CARGO_TARGET_NVPTX64_NVIDIA_CUDA_LINKER", &exe)
        .env("CARGO_ENCODED_RUSTFLAGS", remap)
        .env(LINKER_ROLE_ENV, "1")
        .env(LLVM_BIN_ENV, &llvm_bin)
        .env_remove("RUSTFLAGS")
        .env_remove("RUSTC")
        .env_remove("RUSTC_WRAPPER")
        .env_remove("CARGO");
    // A caller's profile overrides (CI sets CARGO_PROFILE_RELEASE_DEBUG for the workspace's own builds) must not
    // reach the kernels: kernels-rs's profile decides how they compile. Debug info in the PTX would make ptxas
    // -O3 fail ("Optimized debugging not supported") and change the bundle's bytes.
    for (key, _) in std::env::vars_os() {
        if key
            .to_str()
            .is_some_and(|k| k.starts_with("CARGO_PROFILE_"))
        {
            cargo.env_remove(key);
        }
    }
    eprintln!("xtask: compiling kernels-rs with {nightly}");
    run(&mut cargo)?;
    let bitcode = work
        .join("cargo")
        .join(NVPTX_TARGET)
        .join("release/recall_kernels.ptx");

    // 2. Strip the arch attributes so one module lowers to every SM.
    let ll = stable_crate_hashes(&run(Command::new(llvm_bin.join("llvm-dis"))
        .arg(&bitcode)
        .arg("-o")
        .arg("-"))?);
    // The `sm90a_*` kernels (`wgmma`) assemble for sm_90a only: every other image leaves them out.
    let stripped_ll = strip_arch_attributes(&ll);
    let stripped = work.join("recall_kernels.stripped.ll");
    let main_bc = work.join("recall_kernels.main.bc");
    fs::write(
        &stripped,
        drop_functions(&stripped_ll, |f| f.starts_with(SM90A_PREFIX)),
    )
    .map_err(|e| e.to_string())?;
    run(Command::new(llvm_bin.join("opt"))
        .args(["-passes=globaldce"])
        .arg(&stripped)
        .arg("-o")
        .arg(&main_bc))?;
    let kernels = exported_kernels(&ll);
    if kernels.is_empty() {
        return Err("the linked module exports no kernels".into());
    }

    // 3. Lower, guard and assemble per arch.
    let out_dir = if check {
        work.join("bundle-check")
    } else {
        bundle_dir()
    };
    if out_dir.exists() {
        fs::remove_dir_all(&out_dir).map_err(|e| e.to_string())?;
    }
    fs::create_dir_all(&out_dir).map_err(|e| e.to_string())?;
    let ptxas_version = run(Command::new(&ptxas).arg("--version"))?
        .lines()
        .filter(|l| l.contains("release"))
        .collect::<Vec<_>>()
        .join(" ");
    let mut manifest = String::new();
    manifest.push_str(
        "# recall kernel bundle (generated by `cargo xtask build-kernels`; do not edit)\n",
    );
    manifest.push_str(&format!(
        "rust-toolchain: {nightly}\nptxas: {}\n",
        ptxas_version.trim()
    ));
    manifest.push_str(&format!("kernels: {}\n", kernels.join(" ")));
    // Below sm_80 the tensor-core kernels (`tc_*`) and the other kernels that need sm_80 (`sm80_*`, e.g.
    // `cp.async`) are left out. Deleting their definitions and then every function only they used gives the
    // module those SMs lower.
    let pre_ampere = work.join("recall_kernels.pre_sm80.ll");
    let without_tc = work.join("recall_kernels.pre_sm80.bc");
    fs::write(
        &pre_ampere,
        drop_functions(&stripped_ll, |f| {
            SM80_PREFIXES
                .iter()
                .chain([&SM90A_PREFIX])
                .any(|p| f.starts_with(p))
        }),
    )
    .map_err(|e| e.to_string())?;
    run(Command::new(llvm_bin.join("opt"))
        .args(["-passes=globaldce"])
        .arg(&pre_ampere)
        .arg("-o")
        .arg(&without_tc))?;
    // PTX texts that differ from an older arch's only in the `.version` / `.target` lines are not written again:
    // the loader rebuilds them from that arch's file (`recall-gpu-kernels`'s `bundle.rs`, whose table the
    // manifest's `text:` entries must match: a bundle test checks).
    let mut texts: Vec<(u32, String)> = Vec::new();
    for (sm, isa) in ARCHES {
        let ptx_path = work.join(format!("sm_{sm}.ptx"));
        let module = if sm >= TC_MIN_SM {
            &main_bc
        } else {
            &without_tc
        };
        run(Command::new(llvm_bin.join("llc"))
            .args([
                "-O3",
                &format!("-mcpu=sm_{sm}"),
                &format!("-mattr=+ptx{isa}"),
            ])
            .arg(module)
            .arg("-o")
            .arg(&ptx_path))?;
        let ptx = add_launch_bounds(&fs::read_to_string(&ptx_path).map_err(|e| e.to_string())?);
        fs::write(&ptx_path, &ptx).map_err(|e| e.to_string())?;
        numerics_guard(&ptx).map_err(|e| format!("sm_{sm}: {e}"))?;
        let cubin = out_dir.join(format!("sm_{sm}.cubin"));
        let log = run(Command::new(&ptxas)
            .args(["-O3", "-v", &format!("-arch=sm_{sm}")])
            .arg(&ptx_path)
            .arg("-o")
            .arg(&cubin))?;
        let body = ptx_body(&ptx);
        let text_sm = match texts.iter().find(|(_, b)| *b == body) {
            Some((older, _)) => *older,
            None => {
                fs::write(out_dir.join(format!("compute_{sm}.ptx")), &ptx)
                    .map_err(|e| e.to_string())?;
                texts.push((sm, body));
                sm
            }
        };
        manifest.push_str(&format!(
            "\n[sm_{sm}] ptx-isa {}.{} (text: compute_{text_sm}.ptx)\n",
            isa / 10,
            isa % 10
        ));
        for (kernel, usage) in parse_ptxas_usage(&log) {
            manifest.push_str(&format!("  {kernel}: {usage}\n"));
        }
    }
    // The sm_90a image: the `sm90a_*` kernels alone (every other kernel's definition dropped), PTX ISA 8.3
    // (for the tensor-map fence).
    let only_90a = work.join("recall_kernels.sm90a.ll");
    let only_90a_bc = work.join("recall_kernels.sm90a.bc");
    fs::write(
        &only_90a,
        drop_functions(&stripped_ll, |f| {
            !f.starts_with(SM90A_PREFIX) && kernels.iter().any(|k| k == f)
        }),
    )
    .map_err(|e| e.to_string())?;
    run(Command::new(llvm_bin.join("opt"))
        .args(["-passes=globaldce"])
        .arg(&only_90a)
        .arg("-o")
        .arg(&only_90a_bc))?;
    let ptx_path = work.join("sm_90a.ptx");
    run(Command::new(llvm_bin.join("llc"))
        .args(["-O3", "-mcpu=sm_90a", "-mattr=+ptx83"])
        .arg(&only_90a_bc)
        .arg("-o")
        .arg(&ptx_path))?;
    let ptx = add_launch_bounds(&fs::read_to_string(&ptx_path).map_err(|e| e.to_string())?);
    let ptx = align_tensor_map_params(&ptx).map_err(|e| format!("sm_90a: {e}"))?;
    numerics_guard(&ptx).map_err(|e| format!("sm_90a: {e}"))?;
    fs::write(&ptx_path, &ptx).map_err(|e| e.to_string())?;
    let log = run(Command::new(&ptxas)
        .args(["-O3", "-v", "-arch=sm_90a"])
        .arg(&ptx_path)
        .arg("-o")
        .arg(out_dir.join("sm_90a.cubin")))?;
    manifest.push_str("\n[sm_90a] ptx-isa 8.3 (sm90a_* only)\n");
    for (kernel, usage) in parse_ptxas_usage(&log) {
        manifest.push_str(&format!("  {kernel}: {usage}\n"));
    }
    if log.contains("wgmma") {
        // ptxas reports `wgmma` it had to serialise (a performance loss, not an error): keep it visible.
        for line in log.lines().filter(|l| l.contains("wgmma")) {
            manifest.push_str(&format!("  ptxas: {}\n", line.trim()));
        }
    }
    fs::write(out_dir.join("compute_90a.ptx"), &ptx).map_err(|e| e.to_string())?;
    fs::write(out_dir.join("MANIFEST.txt"), manifest).map_err(|e| e.to_string())?;

    if check {
        compare_bundles(&bundle_dir(), &out_dir)
    } else {
        eprintln!("xtask: wrote {}", out_dir.display());
        Ok(())
    }
}

/// A PTX text without its `.version` and `.target` lines: what two arches' texts must share for one file to
/// serve both.
fn ptx_body(ptx: &str) -> String {
    ptx.lines()
        .filter(|l| !l.starts_with(".version ") && !l.starts_with(".target "))
        .collect::<Vec<_>>()
        .join("\n")
}

fn compare_bundles(committed: &Path, fresh: &Path) -> Result<(), String> {
    let list = |d: &Path| -> BTreeMap<String, Vec<u8>> {
        fs::read_dir(d)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| Some((e.file_name().into_string().ok()?, fs::read(e.path()).ok()?)))
            .collect()
    };
    let (a, b) = (list(committed), list(fresh));
    let mut problems = Vec::new();
    for (name, bytes) in &b {
        match a.get(name) {
            None => problems.push(format!("missing from the committed bundle: {name}")),
            Some(old) if old != bytes => problems.push(format!("differs from the sources: {name}")),
            Some(_) => {}
        }
    }
    for name in a.keys().filter(|n| !b.contains_key(*n)) {
        problems.push(format!("stale file in the committed bundle: {name}"));
    }
    if problems.is_empty() {
        eprintln!(
            "xtask: the committed kernel bundle matches the sources ({} files)",
            b.len()
        );
        Ok(())
    } else {
        Err(format!(
            "the committed kernel bundle is out of date:\n  {}\nrun `cargo xtask build-kernels` and commit crates/gpu-kernels/bundle",
            problems.join("\n  ")
        ))
    }
}

/// Launch bounds that rustc cannot express (CUDA's `__launch_bounds__`), per kernel-name prefix: threads per
/// block and the blocks per SM that `ptxas` must leave room for (so it keeps registers at or below
/// `65536 / (threads * blocks)`). `sm80_gemm_*` (256 threads, 64 accumulators each) needs two blocks per SM to
/// hide one block's barrier behind the other's arithmetic. `spread_hop` is bound by dependent loads: its warps
/// read each node's total and the 32-lane class its next step's in-edges ahead of use, which at 48 registers (5
/// blocks) spilled; 4 blocks of 64 registers ran the hop in 164 against 176 us on an H200 (session 20, run G).
/// `sm90a_scan1_*` (blocks of up to 16 warps, `SCAN1_HOPPER_MAX_WARPS`; a bundle test ties the two) keep the
/// register budget of one 512-thread block. `sm90a_knn1*` blocks (up to 8 warps, `RECALL_KNN1_BULK_WARPS`;
/// 4 by default, most of which leave early) fit three to an SM (at most 85 registers), so that launches of up
/// to three blocks per SM keep 8 warps. `sm90a_knn1s*` (the one-query server, blocks of at most 4 warps) keeps the
/// polling of its mailbox and its ring's state across queries besides the same chains: at three blocks of 256
/// threads it spilled (session 23), at four of 128 still (128 registers); three of 128 have up to 170 (up to
/// 12,672 rows on 132 SMs). `sm90a_clip_noise_rows` (256 threads) keeps `sm80_clip_noise_rows`' six blocks an SM
/// (its shared memory allows six at 12 rows of 768 values). The first prefix that matches applies.
const LAUNCH_BOUNDS: [(&str, u32, u32); 7] = [
    ("sm80_gemm_", 256, 2),
    ("spread_hop", 256, 4),
    ("sm90a_clip_noise_rows", 256, 6),
    ("sm90a_knn1s", 128, 3),
    ("sm90a_knn1", 256, 3),
    ("sm90a_scan1", 512, 1),
    ("sm90a_", 256, 1),
];

/// `ptx` with `.maxntid` and `.minnctapersm` after the parameter list of every entry that [`LAUNCH_BOUNDS`]
/// names (`.entry NAME(` ... `)` then `{`).
fn add_launch_bounds(ptx: &str) -> String {
    let mut out = String::with_capacity(ptx.len() + 256);
    let mut pending: Option<(u32, u32)> = None;
    for line in ptx.lines() {
        if let Some((threads, blocks)) = pending
            && line.trim() == "{"
        {
            out.push_str(&format!(
                ".maxntid {threads}, 1, 1\n.minnctapersm {blocks}\n"
            ));
            pending = None;
        }
        if let Some(rest) = line.strip_prefix(".visible .entry ") {
            pending = LAUNCH_BOUNDS
                .iter()
                .find(|(prefix, _, _)| rest.starts_with(prefix))
                .map(|&(_, t, b)| (t, b));
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Entry points whose parameter struct starts with a tensor map (`CUtensorMap`, which the tensor memory
/// accelerator reads from the parameter's generic address and needs 64-byte aligned): rustc's kernel ABI
/// declares a parameter at most 16-byte aligned (a struct aligned to more makes it panic), so the build
/// raises the declaration of their single parameter to 64.
const TENSOR_MAP_PARAMS: [&str; 1] = ["sm90a_knn1"];

/// `ptx` with the parameter of every entry that [`TENSOR_MAP_PARAMS`] names declared `.align 64`; an error if
/// such an entry's parameter is not declared as rustc does (`.param .align 16 .b8 NAME_param_0[..]`).
fn align_tensor_map_params(ptx: &str) -> Result<String, String> {
    let mut out = String::with_capacity(ptx.len());
    let mut pending: Option<String> = None;
    for line in ptx.lines() {
        if let Some(name) = pending.take() {
            let decl = format!(".param .align 16 .b8 {name}_param_0[");
            match line.trim_start().strip_prefix(decl.as_str()) {
                Some(rest) => {
                    out.push_str(&format!("\t.param .align 64 .b8 {name}_param_0[{rest}\n"));
                    continue;
                }
                None => return Err(format!("{name}: unexpected parameter declaration `{line}`")),
            }
        }
        if let Some(rest) = line.strip_prefix(".visible .entry ")
            && TENSOR_MAP_PARAMS.iter().any(|p| rest.starts_with(p))
        {
            pending = Some(rest.trim_end_matches('(').to_string());
        }
        out.push_str(line);
        out.push('\n');
    }
    Ok(out)
}

/// Kernels whose names start with one of these (tensor cores; other sm_80 instructions such as `cp.async`)
/// exist only in images for [`TC_MIN_SM`] and newer.
const SM80_PREFIXES: [&str; 2] = ["tc_", "sm80_"];
/// Kernels (`wgmma`) that exist only in the sm_90a image.
const SM90A_PREFIX: &str = "sm90a_";
const TC_MIN_SM: u32 = 80;

/// `ll` without the definitions (a `define` line up to its closing `}` line) of the functions whose names
/// `drop` accepts.
fn drop_functions(ll: &str, drop: impl Fn(&str) -> bool) -> String {
    let mut out = String::with_capacity(ll.len());
    let mut skipping = false;
    for line in ll.lines() {
        if skipping {
            if line == "}" {
                skipping = false;
            }
            continue;
        }
        if define_name(line).is_some_and(&drop) {
            skipping = !line.trim_end().ends_with('}');
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The name a `define` line of textual IR defines (without quotes), if `line` is one.
fn define_name(line: &str) -> Option<&str> {
    if !line.starts_with("define") {
        return None;
    }
    let rest = &line[line.find('@')? + 1..];
    Some(rest[..rest.find('(')?].trim_matches('"'))
}
/// `ll` with the crate disambiguators of Rust (v0) symbol names blanked: `Cs<hash>_` -> `Cs_` inside every
/// name that starts with `_R`. Cargo derives a path crate's hash from its path, so a function left out of
/// line (one not inlined into its kernel) would otherwise carry the checkout's location into the bundle, and
/// `build-kernels --check` would fail on any other checkout.
fn stable_crate_hashes(ll: &str) -> String {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '$' || c == '.';
    let mut out = String::with_capacity(ll.len());
    let mut rest = ll;
    while let Some(at) = rest.find("_R") {
        // Only at the start of a name.
        let starts = rest[..at].chars().next_back().is_none_or(|c| !is_ident(c));
        out.push_str(&rest[..at]);
        let len = rest[at..]
            .find(|c: char| !is_ident(c))
            .unwrap_or(rest.len() - at);
        let name = &rest[at..at + len];
        if starts {
            out.push_str(&blank_disambiguators(name));
        } else {
            out.push_str(name);
        }
        rest = &rest[at + len..];
    }
    out.push_str(rest);
    out
}

/// `Cs<base-62>_<digit>` -> `Cs_<digit>` in one symbol name.
fn blank_disambiguators(name: &str) -> String {
    let b = name.as_bytes();
    let mut out = String::with_capacity(name.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'C' && b.get(i + 1) == Some(&b's') {
            let mut j = i + 2;
            while j < b.len() && b[j].is_ascii_alphanumeric() {
                j += 1;
            }
            if j > i + 2 && b.get(j) == Some(&b'_') && b.get(j + 1).is_some_and(u8::is_ascii_digit)
            {
                out.push_str("Cs_");
                i = j + 1;
                continue;
            }
        }
        out.push(b[i] as char);
        i += 1;
    }
    out
}

/// Remove `"target-cpu"="…"` and `"target-features"="…"` from the textual IR.
fn strip_arch_attributes(ll: &str) -> String {
    let mut out = ll.to_string();
    for key in ["\"target-cpu\"=\"", "\"target-features\"=\""] {
        while let Some(start) = out.find(key) {
            let value_start = start + key.len();
            let Some(len) = out[value_start..].find('"') else {
                break;
            };
            let mut end = value_start + len + 1;
            // Drop one separating space as well.
            if out[end..].starts_with(' ') {
                end += 1;
            }
            out.replace_range(start..end, "");
        }
    }
    out
}

/// Names of the kernels (`ptx_kernel` functions) defined in the module, sorted.
fn exported_kernels(ll: &str) -> Vec<String> {
    let mut names: Vec<String> = ll
        .lines()
        .filter(|l| l.contains("ptx_kernel"))
        .filter_map(|l| define_name(l).map(str::to_string))
        .collect();
    names.sort();
    names
}

/// The numerics contract at the instruction level (`docs/numerics.md`, ground rules).
fn numerics_guard(ptx: &str) -> Result<(), String> {
    for (n, line) in ptx.lines().enumerate() {
        let op = line.split_whitespace().next().unwrap_or("");
        let float_op = op.ends_with(".f32") || op.ends_with(".f64");
        if !float_op {
            continue;
        }
        let unrounded_arith = [
            "add.f32", "sub.f32", "mul.f32", "add.f64", "sub.f64", "mul.f64",
        ]
        .contains(&op);
        // The hardware estimate that `math::sqrt_in_range` refines to the correctly rounded root (its asm marks
        // the line): nothing else may use an approximation.
        let refined = op == "rsqrt.approx.ftz.f32" && line.contains("// refined: sqrt_in_range");
        if unrounded_arith || (!refined && (op.contains(".ftz") || op.contains(".approx"))) {
            return Err(format!(
                "PTX line {}: `{}` breaks the numerics contract (unrounded, flush-to-zero or approximate float op)",
                n + 1,
                line.trim()
            ));
        }
    }
    Ok(())
}

/// Per-kernel resource lines from `ptxas -v`.
fn parse_ptxas_usage(log: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut current: Option<String> = None;
    for line in log.lines() {
        if let Some(i) = line.find("Compiling entry function '") {
            let rest = &line[i + "Compiling entry function '".len()..];
            current = rest.find('\'').map(|e| rest[..e].to_string());
        } else if let (Some(i), Some(k)) = (line.find("Used "), current.as_ref()) {
            out.push((k.clone(), line[i..].trim().to_string()));
            current = None;
        }
    }
    out.sort();
    out
}

/// rustc runs this as the nvptx "linker": bitcode objects and rlibs in, one optimised bitcode module out.
pub fn link_main() -> ExitCode {
    match link(std::env::args().skip(1).collect()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("recall nvptx link: {e}");
            ExitCode::FAILURE
        }
    }
}

fn link(args: Vec<String>) -> Result<(), String> {
    let llvm_bin =
        PathBuf::from(std::env::var_os(LLVM_BIN_ENV).ok_or("RECALL_XTASK_LLVM_BIN is not set")?);
    let mut exports = Vec::new();
    let mut inputs = Vec::new();
    let mut output = None;
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--export-symbol" => exports.push(it.next().ok_or("--export-symbol needs a value")?),
            "-o" => output = Some(PathBuf::from(it.next().ok_or("-o needs a value")?)),
            "-L" | "--target" | "--target-cpu" => {
                it.next();
            }
            _ if a.ends_with(".o") || a.ends_with(".rlib") => inputs.push(PathBuf::from(a)),
            _ => {} // -O3, --debug, --target-feature=…: the lowering step sets these per arch.
        }
    }
    let output = output.ok_or("no -o given")?;
    if exports.is_empty() {
        return Err("no --export-symbol given: the crate defines no kernels".into());
    }
    let scratch = output.with_extension("link");
    if scratch.exists() {
        fs::remove_dir_all(&scratch).map_err(|e| e.to_string())?;
    }
    fs::create_dir_all(&scratch).map_err(|e| e.to_string())?;
    let mut objects = Vec::new();
    for (i, input) in inputs.iter().enumerate() {
        if input.extension().is_some_and(|e| e == "rlib") {
            let dir = scratch.join(format!("rlib{i}"));
            fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
            run(Command::new(llvm_bin.join("llvm-ar"))
                .arg("x")
                .arg(input)
                .current_dir(&dir))?;
            let mut members: Vec<PathBuf> = fs::read_dir(&dir)
                .map_err(|e| e.to_string())?
                .flatten()
                .map(|e| e.path())
                .filter(|p| is_bitcode(p))
                .collect();
            members.sort();
            objects.extend(members);
        } else if is_bitcode(input) {
            objects.push(input.clone());
        }
    }
    let linked = scratch.join("linked.bc");
    run(Command::new(llvm_bin.join("llvm-link"))
        .args(&objects)
        .arg("-o")
        .arg(&linked))?;
    run(Command::new(llvm_bin.join("opt"))
        .arg("-passes=internalize,default<O3>,globaldce")
        .arg(format!(
            "--internalize-public-api-list={}",
            exports.join(",")
        ))
        .arg(&linked)
        .arg("-o")
        .arg(&output))?;
    Ok(())
}

fn is_bitcode(path: &Path) -> bool {
    fs::read(path)
        .map(|b| b.starts_with(b"BC\xC0\xDE"))
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::{
        add_launch_bounds, align_tensor_map_params, numerics_guard, ptx_body, stable_crate_hashes,
    };

    #[test]
    fn crate_hashes_are_blanked_in_rust_symbols_only() {
        let ll = "define internal i1 @_RNvMNtCshB1ByvtNNyk_14recall_kernels6tc_knnINtB2_5ListsKm1_Kj10_E6decideB4_(ptr %x) {\n  call void @\"_RNvCs9xY_4core3foo\"()\n  ; comment Cs12_3abc\n  %Cs1_2 = add i32 0, 0\n}";
        let out = stable_crate_hashes(ll);
        assert!(out.contains(
            "@_RNvMNtCs_14recall_kernels6tc_knnINtB2_5ListsKm1_Kj10_E6decideB4_(ptr %x)"
        ));
        assert!(out.contains("@\"_RNvCs_4core3foo\""));
        // Not a Rust symbol: unchanged.
        assert!(out.contains("comment Cs12_3abc"));
        assert!(out.contains("%Cs1_2 = add"));
        // Two checkouts (two hashes) give the same text.
        assert_eq!(
            out,
            stable_crate_hashes(&ll.replace("hB1ByvtNNyk", "hpifNTqhCwh"))
        );
    }

    #[test]
    fn tensor_map_parameters_are_declared_64_byte_aligned() {
        let ptx = ".visible .entry sm90a_knn1_dot(\n\t.param .align 16 .b8 sm90a_knn1_dot_param_0[224]\n)\n{\n}\n\
                   .visible .entry sm90a_gemm_dot(\n\t.param .align 8 .b8 sm90a_gemm_dot_param_0[72]\n)\n{\n}\n";
        let out = align_tensor_map_params(ptx).expect("patched");
        assert!(out.contains("\t.param .align 64 .b8 sm90a_knn1_dot_param_0[224]\n"));
        assert!(out.contains(".param .align 8 .b8 sm90a_gemm_dot_param_0[72]"));
        assert_eq!(out.lines().count(), ptx.lines().count());
        // A declaration rustc no longer writes that way is an error, not a misaligned map.
        let other = ".visible .entry sm90a_knn1_dot(\n\t.param .align 8 .b8 sm90a_knn1_dot_param_0[224]\n)\n";
        assert!(align_tensor_map_params(other).is_err());
    }

    #[test]
    fn ptx_texts_that_differ_only_in_their_header_share_a_body() {
        let a = "//\n.version 7.1\n.target sm_86\n.address_size 64\n\tret;\n";
        let b = "//\n.version 7.8\n.target sm_90\n.address_size 64\n\tret;\n";
        let c = "//\n.version 7.8\n.target sm_90\n.address_size 64\n\texit;\n";
        assert_eq!(ptx_body(a), ptx_body(b));
        assert_ne!(ptx_body(b), ptx_body(c));
        assert!(!ptx_body(a).contains(".target"));
    }

    #[test]
    fn numerics_guard_allows_only_the_marked_refined_estimates() {
        assert!(numerics_guard("\tfma.rn.f32 %f1, %f2, %f3, %f4;\n").is_ok());
        assert!(numerics_guard("\tadd.f32 %f1, %f2, %f3;\n").is_err());
        assert!(numerics_guard("\tadd.rn.ftz.f32 %f1, %f2, %f3;\n").is_err());
        assert!(numerics_guard("\trcp.approx.ftz.f32 r, %f2;\n").is_err());
        assert!(numerics_guard("\trcp.approx.ftz.f32 r, %f2; // refined: div_in_range\n").is_err());
        assert!(
            numerics_guard("\trsqrt.approx.ftz.f32 r, %f2; // refined: sqrt_in_range\n").is_ok()
        );
        assert!(numerics_guard("\tsin.approx.ftz.f32 r, %f2; // refined: x\n").is_err());
        assert!(numerics_guard("\trcp.approx.f32 r, %f2; // refined: x\n").is_err());
    }

    #[test]
    fn launch_bounds_go_to_the_named_entries_only() {
        let ptx = ".visible .entry sm80_gemm_dot(\n\t.param .align 8 .b8 p[72]\n)\n{\n\tret;\n}\n\
                   .visible .entry gemm_dot(\n\t.param .align 8 .b8 p[72]\n)\n{\n\tret;\n}\n";
        let out = add_launch_bounds(ptx);
        assert_eq!(
            out,
            ".visible .entry sm80_gemm_dot(\n\t.param .align 8 .b8 p[72]\n)\n.maxntid 256, 1, 1\n.minnctapersm 2\n{\n\tret;\n}\n\
             .visible .entry gemm_dot(\n\t.param .align 8 .b8 p[72]\n)\n{\n\tret;\n}\n"
        );
    }
}
