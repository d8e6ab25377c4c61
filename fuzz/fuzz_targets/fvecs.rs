#![no_main]
//! Any bytes as a `.fvecs` file: see `recall_fuzz::check_fvecs`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| recall_fuzz::check_fvecs(data));
