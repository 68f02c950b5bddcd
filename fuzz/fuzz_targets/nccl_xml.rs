#![no_main]
// Fuzz target: see flashoverlap::fuzz::nccl_xml.
libfuzzer_sys::fuzz_target!(|data: &[u8]| flashoverlap::fuzz::nccl_xml(data));
