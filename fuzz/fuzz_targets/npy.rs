#![no_main]
//! Any bytes as a `.npy` file: see `recall_fuzz::check_npy`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| recall_fuzz::check_npy(data));
