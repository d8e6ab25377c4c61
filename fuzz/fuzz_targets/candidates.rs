#![no_main]
//! Candidate id lists, valid and edited, through `score_candidates`: see `recall_fuzz::check_candidates`.

libfuzzer_sys::fuzz_target!(
    |input: recall_fuzz::CandidatesInput| recall_fuzz::check_candidates(input)
);
