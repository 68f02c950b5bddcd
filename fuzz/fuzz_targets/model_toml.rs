#![no_main]
// Fuzz target: see flashoverlap::fuzz::model_toml.
libfuzzer_sys::fuzz_target!(|data: &[u8]| flashoverlap::fuzz::model_toml(data));
