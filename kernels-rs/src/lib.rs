//! recall's GPU kernels, in Rust, for `nvptx64-nvidia-cuda`.
//!
//! Architecture invariant: kernels trust their parameters. Every launch goes through a typed launcher in
//! `recall-gpu-kernels` that has checked shapes, sizes and pointers; nothing here validates.
//!
//! Architecture invariant: every floating-point reduction follows the order written in `docs/numerics.md`
//! and implemented identically in `recall-cpu-simd`: FMA only where the order says FMA (`fma`), IEEE `sqrt`
//! and division, and no contraction of a separate multiply and add (the link step checks the PTX for it).
#![no_std]
#![feature(
    abi_ptx,
    stdarch_nvptx,
    core_intrinsics,
    gpu_intrinsics,
    gpu_launch_sized_workgroup_mem,
    link_llvm_intrinsics,
    asm_experimental_arch
)]
#![allow(internal_features)]
#![deny(unsafe_op_in_unsafe_fn)]
// `cargo xtask build-kernels` shows no compiler output when it succeeds (and CI lints only the host crates), so
// the unused-code lints fail the build here rather than pass unseen (the nightly is pinned).
#![deny(unused)]

/// Repeat a block `$n` times (2, 4, 8 or 16) with `$i` bound to the constants `0..$n` of type `$t`, so that arrays
/// indexed by `$i` stay in registers.
macro_rules! unroll {
    (@one $v:literal, $i:ident: $t:ty => $body:block) => {{
        const $i: $t = $v;
        $body
    }};
    (2, $i:ident: $t:ty => $body:block) => {{
        unroll!(@one 0, $i: $t => $body);
        unroll!(@one 1, $i: $t => $body);
    }};
    (4, $i:ident: $t:ty => $body:block) => {{
        unroll!(2, $i: $t => $body);
        unroll!(@one 2, $i: $t => $body);
        unroll!(@one 3, $i: $t => $body);
    }};
    (8, $i:ident: $t:ty => $body:block) => {{
        unroll!(4, $i: $t => $body);
        unroll!(@one 4, $i: $t => $body);
        unroll!(@one 5, $i: $t => $body);
        unroll!(@one 6, $i: $t => $body);
        unroll!(@one 7, $i: $t => $body);
    }};
    (16, $i:ident: $t:ty => $body:block) => {{
        unroll!(8, $i: $t => $body);
        unroll!(@one 8, $i: $t => $body);
        unroll!(@one 9, $i: $t => $body);
        unroll!(@one 10, $i: $t => $body);
        unroll!(@one 11, $i: $t => $body);
        unroll!(@one 12, $i: $t => $body);
        unroll!(@one 13, $i: $t => $body);
        unroll!(@one 14, $i: $t => $body);
        unroll!(@one 15, $i: $t => $body);
    }};
}

/// Entry points that fix a generic kernel body's const parameters (metric, variant), one per line:
/// `kernels!(Params; name => body::<A, B>; ...)`. Each takes the parameter struct by value, its only
/// parameter.
/// The generic address of entry point `$name`'s (single) parameter (`cvta.param`, PTX ISA 7.7: the sm_90a image
/// only): what the tensor memory accelerator reads a tensor map from, and a plain load reads the parameter through.
macro_rules! param_address {
    ($name:ident) => {{
        let a: u64;
        // SAFETY: moves the parameter's address into a register and converts it; no memory is accessed.
        unsafe {
            core::arch::asm!(
                "{{",
                ".reg .b64 a;",
                concat!("mov.b64 a, ", stringify!($name), "_param_0;"),
                "cvta.param.u64 {m}, a;",
                "}}",
                m = out(reg64) a,
                options(pure, nomem, nostack)
            );
        }
        a
    }};
}

macro_rules! kernels {
    ($params:ty; $($name:ident => $body:ident::<$($generic:tt),*>;)*) => {$(
        /// See the generic body named in the macro call; its const parameters are fixed per entry point.
        ///
        /// # Safety
        /// Launched only through its typed launcher in `recall-gpu-kernels`.
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $name(p: $params) {
            // SAFETY: forwarded launcher contract.
            unsafe { $body::<$($generic),*>(&p) }
        }
    )*};
}

mod cand;
mod cluster;
mod dense;
mod graph;
mod knn1;
mod scan1;
mod select;
mod serve;
mod sgemm;
mod tc_knn;
mod tensor;
mod util;
mod wgmma;

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    // SAFETY: `trap` aborts the kernel; kernels are written so that no panic path is reachable.
    unsafe { core::arch::nvptx::trap() }
}
