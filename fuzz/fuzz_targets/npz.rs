#![no_main]
//! Any bytes as a `.npz` file: see `recall_fuzz::check_npz`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| recall_fuzz::check_npz(data));
