#![forbid(unsafe_code)]
fn main() -> std::process::ExitCode {
    flashoverlap::cli::main()
}
