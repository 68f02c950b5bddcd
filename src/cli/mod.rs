//! The command line: a thin `main`, one module per subcommand, named exit codes, and the
//! whole cause chain of an error printed once.

mod bench;
mod calibrate;
mod collective;
mod list;
mod plot;
mod run;
mod simulate;
mod sweep;
mod validate;

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
    /// Draw pictures (SVG or PNG): timeline Gantt charts of simulated or measured runs,
    /// and charts of a sweep.
    Plot(plot::Args),
    /// Measure the simulator's own speed (events/s, wall time) on fixed cases.
    Bench(bench::Args),
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

/// Parse a count with an optional binary suffix: `4096`, `4k` (= 4096), `1m`.
pub fn parse_count(s: &str) -> Result<i64, String> {
    let t = s.trim();
    let (num, mul) = match t.char_indices().last() {
        Some((i, 'k' | 'K')) => (&t[..i], 1i64 << 10),
        Some((i, 'm' | 'M')) => (&t[..i], 1i64 << 20),
        Some((i, 'g' | 'G')) => (&t[..i], 1i64 << 30),
        _ => (t, 1),
    };
    let n: i64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a count (e.g. 4096 or 4k)"))?;
    n.checked_mul(mul)
        .ok_or_else(|| format!("`{s}` is too large"))
}

pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { exit::INPUT } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let r = match cli.command {
        Command::Simulate(a) => simulate::run(*a),
        Command::List => list::run(),
        Command::Bench(a) => bench::run(a),
        Command::Run(a) => run::run(*a),
        Command::Calibrate(a) => calibrate::run(a),
        Command::Validate(a) => validate::run(a),
        Command::Collective(a) => collective::run(a),
        Command::Sweep(a) => sweep::run(*a),
        Command::Plot(a) => plot::run(a),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", e.error);
            let mut src = e.error.source();
            while let Some(s) = src {
                eprintln!("  caused by: {s}");
                src = s.source();
            }
            ExitCode::from(e.code)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// clap's own consistency checks of every subcommand (unique ids and groups, valid
    /// `requires`), which otherwise fire only when a debug build parses that command.
    #[test]
    fn cli_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn counts() {
        assert_eq!(parse_count("4k"), Ok(4096));
        assert_eq!(parse_count("32"), Ok(32));
        assert_eq!(parse_count("1M"), Ok(1 << 20));
        assert!(parse_count("4q").is_err());
        assert!(parse_count("9999999999999g").is_err());
    }
}
