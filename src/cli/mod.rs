//! The command line: a thin `main`, one module per subcommand, named exit codes, and the
//! whole cause chain of an error printed once.

mod bench;
mod calibrate;
mod collective;
pub mod fuzz;
mod list;
mod plot;
mod run;
mod search;
mod simulate;
mod sweep;
mod validate;

pub use crate::units::parse_count;
use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Exit codes.
pub mod exit {
    /// A run failed (simulation error, deadlock, budget).
    pub const RUN: u8 = 1;
    /// Bad input: arguments, config files, presets.
    pub const INPUT: u8 = 2;
    /// An output could not be written.
    pub const OUTPUT: u8 = 3;
    /// This machine cannot run GPU work: built without `cuda`, no driver, library or GPU.
    pub const UNAVAILABLE: u8 = 4;
}

#[derive(Debug, Parser)]
#[command(
    name = "flashoverlap",
    version,
    about = "Simulate communication–computation overlap (Flash-Overlap and its baselines) in distributed LLM training"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Memory a plan may take, in GiB, estimated before it is built at 128 B per op of a
    /// collective and 384 B per op of a layer, step or MoE block; a scenario over it is
    /// refused (exit 2) with its estimate
    #[arg(long, global = true, value_name = "GIB", default_value_t = crate::plan::DEFAULT_MEMORY_GIB)]
    pub max_memory: f64,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Simulate a scenario under each strategy and print the comparison (defaults: the
    /// embedded `default` scenario).
    Simulate(Box<simulate::Args>),
    /// List the embedded model, hardware and scenario presets.
    List,
    /// Run a scenario's strategies on the GPUs present (`--features cuda`), check every
    /// result against the reference, and write measured and predicted timelines.
    Run(Box<run::Args>),
    /// Measure this machine's GPU (`--features cuda`) and write a hardware profile under
    /// hardware-profiles/measured/ (or refit saved measurements with --from).
    Calibrate(calibrate::Args),
    /// Compare predicted and measured timelines of `run --out` directories (per op class
    /// and makespan); `--hardware` predicts them again with another profile.
    Validate(validate::Args),
    /// Simulate one collective over a range of sizes on a hardware profile and print it
    /// the way nccl-tests prints measurements (time, algbw, busbw).
    Collective(collective::Args),
    /// Simulate a grid of scenario points (any scenario field × strategies) in parallel:
    /// CSV/JSON rows, the best configuration per group, resumable, shardable.
    Sweep(Box<sweep::Args>),
    /// Find the best training layouts (tp × pp × dp × ulysses, micro-batches, pipeline
    /// schedule, recomputation, ZeRO) of a model on a machine for a global batch: the
    /// ones that divide and fit, simulated in parallel and ranked by tokens/s.
    Search(Box<search::Args>),
    /// Draw pictures (SVG or PNG): timeline Gantt charts of simulated or measured runs,
    /// and charts of a sweep.
    Plot(plot::Args),
    /// Measure the simulator's own speed (events/s, wall time) on fixed cases.
    Bench(bench::Args),
    /// Print a shell completion script (e.g. `flashoverlap completions bash >
    /// ~/.local/share/bash-completion/completions/flashoverlap`).
    Completions {
        /// The shell: bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
}

/// The completion script of `shell`, generated from the command definition (so every
/// subcommand and option is in it), on stdout.
fn completions(shell: clap_complete::Shell) -> Result<(), CliError> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command(), "flashoverlap", &mut script);
    stdout(&String::from_utf8_lossy(&script))
}

static DISCARD_STDOUT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Drop what [`stdout`] is given (for a driver that runs [`dispatch`] many times in one
/// process, as the `cli_args` fuzz target does); returns the previous setting.
pub fn discard_stdout(on: bool) -> bool {
    DISCARD_STDOUT.swap(on, std::sync::atomic::Ordering::Relaxed)
}

/// Write `text` to standard output: every subcommand's output goes through here. A
/// reader that went away (`| head`) ends the output quietly, as it does for any Unix
/// tool; any other failure (a full disk) is an output error (exit 3), not a panic.
pub fn stdout(text: &str) -> Result<(), CliError> {
    use std::io::Write;
    if DISCARD_STDOUT.load(std::sync::atomic::Ordering::Relaxed) {
        return Ok(());
    }
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(source) => Err(CliError::output(crate::io::OutputError::Write {
            path: "standard output".into(),
            source,
        })),
    }
}

/// The most worker threads `--threads` may ask for: more than any machine's cores, few
/// enough that starting them costs nothing noticeable (each takes a stack).
pub const MAX_THREADS: i64 = 1024;

/// `--threads` checked: 1 to [`MAX_THREADS`]; absent, 0 (one per core).
pub fn threads(n: Option<i64>) -> Result<usize, CliError> {
    match n {
        None => Ok(0),
        Some(n) if (1..=MAX_THREADS).contains(&n) => Ok(n as usize),
        Some(n) => Err(CliError::input(format!(
            "--threads: {n} is not in 1..{MAX_THREADS}"
        ))),
    }
}

/// An error on its way to the user, with the exit code it maps to.
#[derive(Debug)]
pub struct CliError {
    pub code: u8,
    pub error: Box<dyn std::error::Error + Send + Sync>,
}

impl CliError {
    pub fn input(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> CliError {
        CliError {
            code: exit::INPUT,
            error: e.into(),
        }
    }
    pub fn run(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> CliError {
        CliError {
            code: exit::RUN,
            error: e.into(),
        }
    }
    pub fn output(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> CliError {
        CliError {
            code: exit::OUTPUT,
            error: e.into(),
        }
    }
}

/// A use case's error with the exit code its kind maps to.
pub fn from_app(e: crate::app::Error) -> CliError {
    use crate::app::Error;
    match e {
        Error::Input(e) => CliError::input(e),
        Error::Output(e) => CliError::output(e),
        Error::Run(e) => {
            // A GPU the machine does not have is not a failed run.
            let gone = e
                .downcast_ref::<crate::exec::gpu::GpuError>()
                .is_some_and(|g| g.is_unavailable());
            CliError {
                code: if gone { exit::UNAVAILABLE } else { exit::RUN },
                error: e,
            }
        }
    }
}

/// The command definition, with the lists of strategies and workloads in the help
/// generated from the one list each (`Strategy::NAMES`, `Workload::ALL`) that parsing
/// and errors use too.
pub fn command() -> clap::Command {
    use crate::scenario::{Strategy, Workload};
    use clap::CommandFactory;
    let strategies = format!(
        "Strategies to compare, comma-separated: {}",
        Strategy::names()
    );
    let workload = format!(
        "Workload: {} (layer: one transformer layer, forward and backward; step: every layer and the LM head, forward and backward)",
        Workload::names()
    );
    let sweep_strategies = format!(
        "Strategies (innermost axis; default: the base scenario's): {}; `chunked:2..16` ranges the chunk count",
        Strategy::names()
    );
    let sweep_workloads = format!("Workloads: {}", Workload::names());
    Cli::command()
        .mut_subcommand("simulate", |c| {
            c.mut_arg("strategies", |a| a.help(strategies.clone()))
                .mut_arg("workload", |a| a.help(workload.clone()))
        })
        .mut_subcommand("run", |c| {
            c.mut_arg("strategies", |a| a.help(strategies.clone()))
                .mut_arg("workload", |a| a.help(workload.clone()))
        })
        .mut_subcommand("sweep", |c| {
            c.mut_arg("strategy", |a| a.help(sweep_strategies.clone()))
                .mut_arg("workload", |a| a.help(sweep_workloads.clone()))
        })
}

pub fn main() -> ExitCode {
    match dispatch(std::env::args_os()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // clap's own errors (and help and version, exit 0) print as clap formats them.
            if let Some(c) = e.error.downcast_ref::<clap::Error>() {
                let _ = c.print();
            } else {
                eprint!("{}", error_text(&*e.error));
            }
            ExitCode::from(e.code)
        }
    }
}

/// Parse `args` (the program name first) and run the subcommand, in this process: what
/// [`main`] does short of printing the error, and what the `cli_args` fuzz target drives.
/// A parse error, help or version comes back as a [`clap::Error`] inside the
/// [`CliError`] (help and version with code 0).
pub fn dispatch<I, T>(args: I) -> Result<(), CliError>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    use clap::FromArgMatches;
    let cli = command()
        .try_get_matches_from(args)
        .and_then(|m| Cli::from_arg_matches(&m))
        .map_err(|e| CliError {
            code: if e.use_stderr() { exit::INPUT } else { 0 },
            error: Box::new(e),
        })?;
    if !(cli.max_memory.is_finite() && cli.max_memory > 0.0 && cli.max_memory <= 1e6) {
        return Err(CliError::input(format!(
            "--max-memory: {} is not a size in GiB in (0, 1e6]",
            cli.max_memory
        )));
    }
    crate::plan::set_memory_limit((cli.max_memory * (1u64 << 30) as f64) as u64);
    match cli.command {
        Command::Simulate(a) => simulate::run(*a),
        Command::List => list::run(),
        Command::Bench(a) => bench::run(a),
        Command::Completions { shell } => completions(shell),
        Command::Run(a) => run::run(*a),
        Command::Calibrate(a) => calibrate::run(a),
        Command::Validate(a) => validate::run(a),
        Command::Collective(a) => collective::run(a),
        Command::Sweep(a) => sweep::run(*a),
        Command::Search(a) => search::run(*a),
        Command::Plot(a) => plot::run(a),
    }
}

/// An error as the command line prints it: the message, then each cause that says
/// something the lines before it have not (a cause whose text is already in them, as
/// an I/O error quoted by the message naming its file, is not repeated).
fn error_text(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = format!("error: {e}\n");
    let mut src = e.source();
    while let Some(s) = src {
        let t = s.to_string();
        if !out.contains(&t) {
            out += &format!("  caused by: {t}\n");
        }
        src = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cause already quoted by the message is not printed again.
    #[test]
    fn error_causes_are_not_repeated() {
        #[derive(Debug, thiserror::Error)]
        #[error("cannot read x.toml: {0}")]
        struct Outer(#[source] std::io::Error);
        #[derive(Debug, thiserror::Error)]
        #[error("key `seq`: bad value")]
        struct Other(#[source] std::io::Error);
        let io = || std::io::Error::new(std::io::ErrorKind::NotFound, "missing (os error 2)");
        assert_eq!(
            error_text(&Outer(io())),
            "error: cannot read x.toml: missing (os error 2)\n"
        );
        assert_eq!(
            error_text(&Other(io())),
            "error: key `seq`: bad value\n  caused by: missing (os error 2)\n"
        );
    }

    /// clap's own consistency checks of every subcommand (unique ids and groups, valid
    /// `requires`), which otherwise fire only when a debug build parses that command.
    #[test]
    fn cli_definition_is_consistent() {
        command().debug_assert();
    }

    /// Every option of every subcommand says what it does (clap lists the values of an
    /// option with named values itself).
    #[test]
    fn every_option_is_described() {
        fn walk(c: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for a in c.get_arguments() {
                let id = a.get_id().as_str();
                if matches!(id, "help" | "version") {
                    continue;
                }
                let described = a.get_help().is_some() || a.get_long_help().is_some();
                if !described {
                    missing.push(format!("{path} --{id}"));
                }
            }
            for sub in c.get_subcommands() {
                walk(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        walk(&command(), "flashoverlap", &mut missing);
        assert!(
            missing.is_empty(),
            "options without a description: {missing:#?}"
        );
    }

    /// The help lists every strategy and workload, from the lists parsing uses.
    #[test]
    fn help_lists_every_strategy_and_workload() {
        let mut c = command();
        for sub in ["simulate", "run", "sweep"] {
            let help = c
                .find_subcommand_mut(sub)
                .unwrap()
                .render_long_help()
                .to_string();
            for s in crate::scenario::Strategy::NAMES {
                assert!(help.contains(s), "{sub}: {s}");
            }
            for w in crate::scenario::Workload::ALL {
                assert!(help.contains(w.name()), "{sub}: {}", w.name());
            }
        }
    }
}

/// The layering ARCHITECTURE.md states, checked on the sources: no library module
/// reaches into the command line, and the two executors of data (the host reference and
/// the GPU executor) share `exec::data` instead of importing each other.
#[cfg(test)]
mod layering {
    use std::path::{Path, PathBuf};

    fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                rust_files(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }

    /// Lines of code (comments dropped) of the library's files under `src/` whose path
    /// starts with one of `under` (not the command line's, not the binary's `main.rs`).
    fn code_lines(under: &[&str]) -> Vec<(String, String)> {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        let mut out = Vec::new();
        for f in files {
            let rel = f
                .strip_prefix(&src)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            // The binary's `main.rs` is the one place that calls the command line.
            if rel.starts_with("cli/")
                || rel == "main.rs"
                || !under.iter().any(|u| rel.starts_with(u))
            {
                continue;
            }
            for line in std::fs::read_to_string(&f).unwrap().lines() {
                let code = line.split("//").next().unwrap_or("");
                out.push((rel.clone(), code.to_string()));
            }
        }
        out
    }

    #[test]
    fn no_library_module_imports_the_command_line() {
        for (file, code) in code_lines(&[""]) {
            assert!(
                !code.contains("crate::cli") && !code.contains("flashoverlap::cli"),
                "{file}: {code}"
            );
        }
    }

    #[test]
    fn the_executors_of_data_do_not_import_each_other() {
        for (file, code) in code_lines(&["exec/host.rs"]) {
            assert!(!code.contains("gpu::"), "{file}: {code}");
        }
        for (file, code) in code_lines(&["exec/gpu/"]) {
            assert!(!code.contains("host::"), "{file}: {code}");
        }
    }
}
