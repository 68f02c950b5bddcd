#![no_main]
// Fuzz target: see flashoverlap::fuzz::hf_config_json.
libfuzzer_sys::fuzz_target!(|data: &[u8]| flashoverlap::fuzz::hf_config_json(data));
