#![no_main]
// Fuzz target: see flashoverlap::fuzz::sweep_json.
libfuzzer_sys::fuzz_target!(|data: &[u8]| flashoverlap::fuzz::sweep_json(data));
