fn main() -> std::process::ExitCode {
    flashoverlap::cli::main()
}
