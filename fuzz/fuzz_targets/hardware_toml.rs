#![no_main]
// Fuzz target: see flashoverlap::fuzz::hardware_toml.
libfuzzer_sys::fuzz_target!(|data: &[u8]| flashoverlap::fuzz::hardware_toml(data));
