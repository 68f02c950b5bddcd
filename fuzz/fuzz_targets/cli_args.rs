#![no_main]
// Whole command lines and the files they name, structure-aware (arbitrary), run in-process.
libfuzzer_sys::fuzz_target!(|data: &[u8]| flashoverlap::cli::fuzz::cli_args(data));
