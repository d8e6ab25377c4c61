#![no_main]
//! CSR graphs, valid and edited, through `SpreadGraph::from_csr` and spreading: see `recall_fuzz::check_csr`.

libfuzzer_sys::fuzz_target!(|input: recall_fuzz::CsrInput| recall_fuzz::check_csr(input));
