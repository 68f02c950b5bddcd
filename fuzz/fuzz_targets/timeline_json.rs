#![no_main]
// Fuzz target: see flashoverlap::fuzz::timeline_json.
libfuzzer_sys::fuzz_target!(|data: &[u8]| flashoverlap::fuzz::timeline_json(data));
