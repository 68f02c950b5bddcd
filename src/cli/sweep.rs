//! `flashoverlap sweep`: the flags of [`crate::app::sweep`]'s request (the grid's axes,
//! shards, threads, the output folder), a progress bar (indicatif), and the output
//! printed as a summary, CSV or JSON.

use super::{CliError, parse_count};
use crate::app::sweep as app;
use crate::sweep::{self, GridSpec, RunOptions, Shard, SweepError, SweepFile};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::path::PathBuf;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// The best configuration per group.
    Summary,
    Csv,
    Json,
}

#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    #[command(subcommand)]
    pub command: Option<SubCommand>,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Debug, clap::Subcommand)]
pub enum SubCommand {
    /// Join the outputs of `sweep --shard I/N` runs (their --out directories or sweep.json
    /// files) into the files one run of the whole grid would have written.
    Merge(MergeArgs),
}

#[derive(Debug, clap::Args)]
pub struct MergeArgs {
    /// Shard outputs: directories (their sweep.json) or sweep.json files.
    #[arg(required = true)]
    pub inputs: Vec<PathBuf>,
    /// Directory for the merged sweep.csv, sweep.json and summary.txt.
    #[arg(long)]
    pub out: PathBuf,
    /// Overwrite existing output files.
    #[arg(long)]
    pub force: bool,
    /// What to print on stdout.
    #[arg(long, value_enum, default_value_t = Format::Summary)]
    pub format: Format,
    /// Summary groups (as for `sweep`).
    #[arg(long, value_delimiter = ',')]
    pub group_by: Option<Vec<String>>,
    /// The figure the summary ranks by (as for `sweep`).
    #[arg(long)]
    pub rank_by: Option<String>,
}

/// Value lists take commas and inclusive integer ranges: `--tp 2,4,8`, `--seq 1k,4k`,
/// `--strategy sequential,chunked:2..16,flash`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Base scenario (preset or TOML file); the grid's fields override it.
    #[arg(long, default_value = "default")]
    pub scenario: String,
    /// A sweep file: `scenario = "..."` and a `[grid]` table of field = [values];
    /// command-line fields are added to it (replacing the same field).
    #[arg(long)]
    pub grid: Option<PathBuf>,
    /// Model presets or TOML files.
    #[arg(long)]
    pub model: Option<String>,
    /// Hardware profiles (presets or TOML files).
    #[arg(long)]
    pub hardware: Option<String>,
    /// Workloads (the list: `cli::command`, from `Workload::ALL`).
    #[arg(long)]
    pub workload: Option<String>,
    /// Node counts of a multi-node profile.
    #[arg(long)]
    pub nodes: Option<String>,
    /// Tensor-parallel degrees.
    #[arg(long)]
    pub tp: Option<String>,
    /// Data-parallel degrees.
    #[arg(long)]
    pub dp: Option<String>,
    /// Ulysses degrees.
    #[arg(long)]
    pub ulysses: Option<String>,
    /// Batch sizes.
    #[arg(long)]
    pub batch: Option<String>,
    /// Sequence lengths (1k = 1024).
    #[arg(long)]
    pub seq: Option<String>,
    /// Element types.
    #[arg(long)]
    pub dtype: Option<String>,
    /// Transports: nccl, copy.
    #[arg(long)]
    pub transport: Option<String>,
    /// Interference on/off.
    #[arg(long)]
    pub interference: Option<String>,
    /// Any other scenario field: `--set FIELD=V1,V2` (repeatable), e.g. parallel.sp=true.
    #[arg(long = "set", value_name = "FIELD=VALUES")]
    pub set: Vec<String>,
    /// Strategies (the list: `cli::command`, from `Strategy::NAMES`).
    #[arg(long = "strategy")]
    pub strategy: Option<String>,
    /// Directory for sweep.csv, sweep.json and summary.txt (and, while running, the
    /// journal sweep.partial.jsonl that --resume continues from).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Overwrite existing outputs (and discard a partial run's journal).
    #[arg(long)]
    pub force: bool,
    /// Continue an interrupted sweep from the journal in --out.
    #[arg(long, requires = "out")]
    pub resume: bool,
    /// Run only every N-th scenario point starting at I (`I/N`); `sweep merge` joins
    /// the shards.
    #[arg(long)]
    pub shard: Option<String>,
    /// Worker threads (default: every core).
    #[arg(long, value_parser = parse_count)]
    pub threads: Option<i64>,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// Record points whose scenario is invalid (or whose run fails) as rows with an error
    /// instead of stopping.
    #[arg(long)]
    pub skip_invalid: bool,
    /// Simulate points that do not fit in their GPUs' memory (else their rows say "does
    /// not fit" and carry no figures).
    #[arg(long)]
    pub allow_oom: bool,
    /// Summary groups: these fields (default: the swept fields that are not choices —
    /// everything but strategy, parallel degrees and transport).
    #[arg(long, value_delimiter = ',')]
    pub group_by: Option<Vec<String>>,
    /// The figure the summary ranks by (any figure of results.json, e.g. tokens_per_s;
    /// default makespan_us, or tokens_per_s where a group mixes global batches).
    #[arg(long)]
    pub rank_by: Option<String>,
    /// What to print on stdout.
    #[arg(long, value_enum, default_value_t = Format::Summary)]
    pub format: Format,
    /// Refuse runs longer than this many events (per strategy and point).
    #[arg(long, default_value_t = crate::exec::sim::SimOptions::default().max_events)]
    pub max_events: u64,
    /// Stop after this many points, as if interrupted (for testing --resume).
    #[arg(long, hide = true)]
    pub halt_after: Option<u64>,
}

fn input(e: SweepError) -> CliError {
    CliError::input(e)
}

fn grid_spec(a: &RunArgs) -> Result<GridSpec, CliError> {
    let mut spec = match &a.grid {
        Some(p) => GridSpec::from_file(p).map_err(input)?,
        None => GridSpec {
            scenario: a.scenario.clone(),
            dir: None,
            axes: Vec::new(),
        },
    };
    if a.grid.is_some() && a.scenario != "default" {
        spec.scenario = a.scenario.clone();
    }
    let named = [
        ("model", &a.model),
        ("hardware", &a.hardware),
        ("workload", &a.workload),
        ("nodes", &a.nodes),
        ("parallel.tp", &a.tp),
        ("parallel.dp", &a.dp),
        ("parallel.ulysses", &a.ulysses),
        ("batch", &a.batch),
        ("seq", &a.seq),
        ("dtype", &a.dtype),
        ("transport", &a.transport),
        ("interference", &a.interference),
    ];
    // A field given twice on the command line (`--tp 2 --set parallel.tp=4`, or `--set`
    // twice) is a conflict, not a silent last-one-wins; the command line still overrides
    // a grid file's axis.
    let mut given: std::collections::BTreeMap<String, String> = Default::default();
    let mut set = |spec: &mut GridSpec, key: &str, how: String, v: &str| {
        let k = crate::sweep::grid::canonical_key(key);
        if let Some(first) = given.insert(k.clone(), how.clone()) {
            return Err(CliError::input(format!(
                "`{k}` is given twice on the command line ({first} and {how}); give it once, with every value in one list"
            )));
        }
        spec.set_axis(key, vec![v.to_string()]);
        Ok(())
    };
    for (key, v) in named {
        if let Some(v) = v {
            let flag = match key {
                "parallel.tp" => "--tp".to_string(),
                "parallel.dp" => "--dp".to_string(),
                "parallel.ulysses" => "--ulysses".to_string(),
                k => format!("--{k}"),
            };
            set(&mut spec, key, format!("{flag} {v}"), v)?;
        }
    }
    for s in &a.set {
        let (k, v) = s.split_once('=').ok_or_else(|| {
            CliError::input(format!(
                "--set `{s}`: expected FIELD=V1,V2,... (e.g. parallel.sp=true)"
            ))
        })?;
        set(&mut spec, k.trim(), format!("--set {s}"), v)?;
    }
    if let Some(s) = &a.strategy {
        set(&mut spec, "strategy", format!("--strategy {s}"), s)?;
    }
    Ok(spec)
}

/// A progress bar of `total` `unit` (points, layouts) on a terminal; hidden otherwise.
pub(super) fn progress(total: u64, quiet: bool, unit: &'static str) -> ProgressBar {
    if quiet || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    pb.set_style(
        ProgressStyle::with_template(&format!(
            "{{elapsed_precise}} [{{wide_bar}}] {{pos}}/{{len}} {unit}  {{rate}}  ETA {{eta}}"
        ))
        .expect("valid template")
        .with_key(
            "rate",
            move |s: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                let _ = write!(w, "{:.1} {unit}/s", s.per_sec());
            },
        )
        .progress_chars("=> "),
    );
    pb
}

fn emit(format: Format, f: &SweepFile, summary: &str) -> Result<(), CliError> {
    match format {
        Format::Summary => super::stdout(summary),
        Format::Csv => super::stdout(&sweep::csv(f)),
        Format::Json => super::stdout(&sweep::json(f)),
    }
}

pub fn run(a: Args) -> Result<(), CliError> {
    match a.command {
        Some(SubCommand::Merge(m)) => merge(m),
        None => run_sweep(a.run),
    }
}

/// The progress bar (indicatif) on a terminal, nothing otherwise.
pub(super) struct Bar(pub(super) ProgressBar);

impl app::Progress for Bar {
    fn start(&self, total: u64, done: u64) {
        self.0.set_length(total);
        self.0.set_position(done);
    }
    fn inc(&self) {
        self.0.inc(1);
    }
    fn finish(&self) {
        self.0.finish_and_clear();
    }
}

fn run_sweep(a: RunArgs) -> Result<(), CliError> {
    let spec = grid_spec(&a)?;
    let shard = a
        .shard
        .as_deref()
        .map(Shard::parse)
        .transpose()
        .map_err(|e| CliError::input(format!("--shard: {e}")))?;
    let threads = super::threads(a.threads)?;
    let req = app::Request {
        spec,
        shard,
        threads,
        out: a.out.clone(),
        resume: a.resume,
        force: a.force,
        options: RunOptions {
            max_events: a.max_events,
            skip_invalid: a.skip_invalid,
            allow_oom: a.allow_oom,
        },
        halt_after: a.halt_after,
        group_by: a.group_by.clone(),
        rank_by: rank_by(a.rank_by.as_deref())?,
    };
    let bar = Bar(progress(0, a.quiet, "points"));
    let s = app::run(&req, &bar).map_err(super::from_app)?;
    emit(a.format, &s.file, &s.summary)
}

fn rank_by(v: Option<&str>) -> Result<Option<crate::report::RankBy>, CliError> {
    v.map(crate::report::RankBy::parse)
        .transpose()
        .map_err(|e| CliError::input(format!("--rank-by: {e}")))
}

fn merge(m: MergeArgs) -> Result<(), CliError> {
    let by = rank_by(m.rank_by.as_deref())?;
    let s = app::merge(
        &m.inputs,
        &m.out,
        m.force,
        m.group_by.as_deref(),
        by.as_ref(),
    )
    .map_err(super::from_app)?;
    emit(m.format, &s.file, &s.summary)
}
