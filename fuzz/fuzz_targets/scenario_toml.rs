#![no_main]
// Fuzz target: see flashoverlap::fuzz::scenario_toml.
libfuzzer_sys::fuzz_target!(|data: &[u8]| flashoverlap::fuzz::scenario_toml(data));
