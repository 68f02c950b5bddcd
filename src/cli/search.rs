//! `flashoverlap search`: the flags of [`crate::app::search`]'s request (the machine,
//! the global batch, the layout space, ranking, shards), a progress bar, and the result
//! printed as a table, CSV or JSON.

use super::{CliError, parse_count};
use crate::app::search as app;
use crate::search;
use crate::sweep::{GridSpec, Shard};
use std::path::PathBuf;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// The best layouts and what the search left out.
    Table,
    /// search.csv: one line per row, best first.
    Csv,
    /// search.json: the rows, the request and the counts (versioned).
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
    /// Join the outputs of `search --shard I/N` runs (their --out directories or
    /// search.json files) into the files one search would have written.
    Merge(MergeArgs),
}

#[derive(Debug, clap::Args)]
pub struct MergeArgs {
    /// Shard outputs: directories (their search.json) or search.json files.
    #[arg(required = true)]
    pub inputs: Vec<PathBuf>,
    /// Directory for the merged search.json, search.csv and summary.txt.
    #[arg(long)]
    pub out: PathBuf,
    /// Overwrite existing output files.
    #[arg(long)]
    pub force: bool,
    /// Output format on stdout.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Rows the table shows.
    #[arg(long, default_value_t = 10)]
    pub top: usize,
}

/// Lists take commas: `--tp 4,8`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Sequences per training step over every replica (the global batch).
    #[arg(long, value_parser = parse_count)]
    pub global_batch: Option<i64>,
    /// Base scenario (preset or TOML file): the model, machine and sequence unless the
    /// flags below set them.
    #[arg(long, default_value = "default")]
    pub scenario: String,
    /// Model preset or TOML file.
    #[arg(long)]
    pub model: Option<String>,
    /// Hardware profile (preset or TOML file).
    #[arg(long)]
    pub hardware: Option<String>,
    /// Nodes of a multi-node profile.
    #[arg(long)]
    pub nodes: Option<String>,
    /// Sequence length (1k = 1024).
    #[arg(long)]
    pub seq: Option<String>,
    /// Data type (bf16, fp16, fp32, fp8).
    #[arg(long)]
    pub dtype: Option<String>,
    /// Transport: nccl, copy.
    #[arg(long)]
    pub transport: Option<String>,
    /// Interference on/off.
    #[arg(long)]
    pub interference: Option<String>,
    /// Any other scenario field: `--set FIELD=VALUE` (repeatable).
    #[arg(long = "set", value_name = "FIELD=VALUE")]
    pub set: Vec<String>,
    /// Tensor-parallel degrees (default: powers of two up to a node's GPUs).
    #[arg(long, value_delimiter = ',', value_parser = parse_count)]
    pub tp: Option<Vec<i64>>,
    /// Pipeline stages (default: the divisors of the layers up to --max-pp).
    #[arg(long, value_delimiter = ',', value_parser = parse_count)]
    pub pp: Option<Vec<i64>>,
    /// The most pipeline stages tried when --pp is not given.
    #[arg(long, default_value_t = 16)]
    pub max_pp: u64,
    /// Ulysses degrees.
    #[arg(long, value_delimiter = ',', value_parser = parse_count, default_value = "1")]
    pub ulysses: Vec<i64>,
    /// Expert-parallel degrees of a MoE model, each dividing its experts and a stage's
    /// tp × ulysses × dp ranks (default: the powers of two dividing its experts; a dense
    /// model runs ep 1).
    #[arg(long, value_delimiter = ',', value_parser = parse_count)]
    pub ep: Option<Vec<i64>>,
    /// Sequences per micro-batch.
    #[arg(long, value_delimiter = ',', value_parser = parse_count, default_value = "1,2,4")]
    pub micro_batch: Vec<i64>,
    /// Pipeline schedules for layouts with stages: 1f1b, interleaved:V, gpipe.
    #[arg(long, value_delimiter = ',', default_value = "1f1b,interleaved:2")]
    pub pp_schedule: Vec<String>,
    /// Recomputation allowed (full only where a layout does not fit without it).
    #[arg(long, value_delimiter = ',', default_value = "none,full")]
    pub recompute: Vec<String>,
    /// ZeRO stages allowed (the highest only where a layout does not fit the lowest).
    #[arg(long, value_delimiter = ',', default_value = "1,3")]
    pub zero: Vec<u8>,
    /// Rank order of every layout: tp-pp-dp (default; symmetric plans), tp-inner or
    /// dp-inner.
    #[arg(long, default_value = "tp-pp-dp")]
    pub rank_order: String,
    /// Data-parallel site strategies to try for layouts with dp > 1: sequential, bulk,
    /// flash (default: the scenario's, `bulk` beside overlapping strategies).
    #[arg(long, value_delimiter = ',')]
    pub dp_strategy: Vec<String>,
    /// Overlap strategies each layout runs (default: the base scenario's).
    #[arg(long, value_delimiter = ',')]
    pub strategy: Option<Vec<String>>,
    /// The figure to rank by (any figure of results.json; default tokens_per_s).
    #[arg(long, default_value = "tokens_per_s")]
    pub rank_by: String,
    /// Simulate every layout's whole step (no screening by extrapolation).
    #[arg(long)]
    pub exact: bool,
    /// Rows simulated whole after screening.
    #[arg(long, default_value_t = 5)]
    pub verify: u64,
    /// Simulate every layout. By default (ranking by tokens_per_s, mfu_ratio or
    /// makespan_us) the layouts with the lowest compute floor are simulated first, and a
    /// layout whose compute alone (the busiest stream's kernels, communication free)
    /// takes over 3% longer than the step of the row at --top (or --verify) is counted
    /// as pruned instead: it cannot reach the table.
    #[arg(long)]
    pub no_prune: bool,
    /// Rows the table shows.
    #[arg(long, default_value_t = 10)]
    pub top: usize,
    /// Only every N-th layout starting at I (`I/N`); `search merge` joins the shards.
    #[arg(long)]
    pub shard: Option<String>,
    /// Worker threads (default: every core).
    #[arg(long, value_parser = parse_count)]
    pub threads: Option<i64>,
    /// Directory for search.json, search.csv and summary.txt.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Overwrite existing output files.
    #[arg(long)]
    pub force: bool,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// List the layouts that pass the pruning, without simulating them.
    #[arg(long)]
    pub dry_run: bool,
    /// Output format on stdout.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Event budget of each simulation: a layout over it is counted and named in the
    /// summary, not ranked.
    #[arg(long, default_value_t = crate::search::DEFAULT_MAX_EVENTS)]
    pub max_events: u64,
}

fn spec(a: &RunArgs) -> Result<GridSpec, CliError> {
    let named = [
        ("model", &a.model),
        ("hardware", &a.hardware),
        ("nodes", &a.nodes),
        ("seq", &a.seq),
        ("dtype", &a.dtype),
        ("transport", &a.transport),
        ("interference", &a.interference),
    ];
    let mut fields: Vec<(String, String, String)> = named
        .into_iter()
        .filter_map(|(k, v)| {
            v.as_ref()
                .map(|v| (format!("--{k}"), k.to_string(), v.clone()))
        })
        .collect();
    for s in &a.set {
        let (k, v) = s
            .split_once('=')
            .ok_or_else(|| CliError::input(format!("--set `{s}`: expected FIELD=VALUE")))?;
        fields.push((
            format!("--set {}", k.trim()),
            k.trim().to_string(),
            v.to_string(),
        ));
    }
    app::base_spec(&a.scenario, &fields).map_err(super::from_app)
}

fn counts(flag: &str, v: &[i64]) -> Result<Vec<u64>, CliError> {
    app::counts(flag, v).map_err(super::from_app)
}

fn request(a: &RunArgs) -> Result<app::Request, CliError> {
    let gb = a.global_batch.ok_or_else(|| {
        CliError::input("--global-batch is required (sequences per step over every replica)")
    })?;
    let gb = counts("--global-batch", &[gb])?[0];
    let mut r = app::Request::new(spec(a)?, gb);
    let s = &mut r.space;
    s.tp = a.tp.as_deref().map(|v| counts("--tp", v)).transpose()?;
    s.pp = a.pp.as_deref().map(|v| counts("--pp", v)).transpose()?;
    s.max_pp = a.max_pp;
    s.ulysses = counts("--ulysses", &a.ulysses)?;
    s.ep = a.ep.as_deref().map(|v| counts("--ep", v)).transpose()?;
    s.micro_batch = counts("--micro-batch", &a.micro_batch)?;
    s.zero = a.zero.clone();
    app::SpaceText {
        schedules: a.pp_schedule.clone(),
        recompute: a.recompute.clone(),
        rank_order: a.rank_order.clone(),
        strategies: a.strategy.clone(),
        rank_by: a.rank_by.clone(),
        dp_strategies: a.dp_strategy.clone(),
    }
    .apply(&mut r, &|name| format!("--{}", name.replace('_', "-")))
    .map_err(super::from_app)?;
    r.exact = a.exact;
    r.verify = a.verify;
    r.prune = !a.no_prune;
    r.top = a.top;
    r.threads = super::threads(a.threads)?;
    r.shard = a
        .shard
        .as_deref()
        .map(Shard::parse)
        .transpose()
        .map_err(|e| CliError::input(format!("--shard: {e}")))?;
    r.max_events = a.max_events;
    r.out = a.out.clone();
    r.force = a.force;
    r.dry_run = a.dry_run;
    Ok(r)
}

fn emit(format: Format, s: &app::Searched) -> Result<(), CliError> {
    match format {
        Format::Table => super::stdout(&s.summary),
        Format::Csv => super::stdout(&search::csv(&s.file)),
        Format::Json => super::stdout(&search::json(&s.file)),
    }
}

pub fn run(a: Args) -> Result<(), CliError> {
    match a.command {
        Some(SubCommand::Merge(m)) => {
            let s = app::merge(&m.inputs, &m.out, m.force, m.top).map_err(super::from_app)?;
            emit(m.format, &s)
        }
        None => {
            let r = request(&a.run)?;
            let bar = super::sweep::Bar(super::sweep::progress(0, a.run.quiet, "layouts"));
            let s = app::run(&r, &bar).map_err(super::from_app)?;
            emit(a.run.format, &s)
        }
    }
}
