//! `flashoverlap sweep`: a grid of scenario points run in parallel (rayon), with a
//! progress bar (indicatif), CSV/JSON/summary outputs, a journal to resume from, shards,
//! and `sweep merge`.

use super::{CliError, parse_count};
use crate::io::{OutputError, write_atomic};
use crate::sweep::{
    self, Grid, GridSpec, Row, RunOptions, Shard, SweepError, SweepFile, output::GridInfo,
};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rayon::prelude::*;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

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
    /// Summary groups: these fields (default: the swept fields that are not choices —
    /// everything but strategy, parallel degrees and transport).
    #[arg(long, value_delimiter = ',')]
    pub group_by: Option<Vec<String>>,
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
    for (key, v) in named {
        if let Some(v) = v {
            spec.set_axis(key, vec![v.clone()]);
        }
    }
    for s in &a.set {
        let (k, v) = s.split_once('=').ok_or_else(|| {
            CliError::input(format!(
                "--set `{s}`: expected FIELD=V1,V2,... (e.g. parallel.sp=true)"
            ))
        })?;
        spec.set_axis(k.trim(), vec![v.to_string()]);
    }
    if let Some(s) = &a.strategy {
        spec.set_axis("strategy", vec![s.clone()]);
    }
    Ok(spec)
}

struct Paths {
    csv: PathBuf,
    json: PathBuf,
    summary: PathBuf,
    journal: PathBuf,
}

impl Paths {
    fn of(dir: &Path) -> Paths {
        Paths {
            csv: dir.join("sweep.csv"),
            json: dir.join("sweep.json"),
            summary: dir.join("summary.txt"),
            journal: dir.join("sweep.partial.jsonl"),
        }
    }
}

fn write_err(path: &Path, source: std::io::Error) -> CliError {
    CliError::output(OutputError::Write {
        path: path.display().to_string(),
        source,
    })
}

/// The journal's first line: which grid and shard its rows belong to.
#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct JournalHeader {
    format: String,
    grid: GridInfo,
    shard: Option<Shard>,
}

const JOURNAL: &str = "flashoverlap-sweep-journal";

/// Rows of the points a journal holds; a last line cut short by an interruption (no
/// newline at its end) is dropped, and its point runs again.
fn read_journal(path: &Path, want: &JournalHeader) -> Result<Vec<Row>, CliError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::input(format!("--resume: cannot read {shown}: {e}")))?;
    let complete = text.ends_with('\n');
    let lines: Vec<&str> = text.lines().collect();
    let Some(first) = lines.first() else {
        return Ok(Vec::new());
    };
    let header: JournalHeader = serde_json::from_str(first).map_err(|e| {
        CliError::input(format!(
            "--resume: {shown}: line 1 is not a sweep journal header: {e}"
        ))
    })?;
    if &header != want {
        return Err(CliError::input(format!(
            "--resume: {shown} belongs to another grid or shard; rerun with the same fields, or --force to start over"
        )));
    }
    let mut rows = Vec::new();
    for (n, l) in lines.iter().enumerate().skip(1) {
        match serde_json::from_str::<Vec<Row>>(l) {
            Ok(r) => rows.extend(r),
            Err(_) if n + 1 == lines.len() && !complete => break,
            Err(e) => {
                return Err(CliError::input(format!(
                    "--resume: {shown}: line {} is corrupt: {e}",
                    n + 1
                )));
            }
        }
    }
    Ok(rows)
}

fn progress(total: u64, quiet: bool) -> ProgressBar {
    if quiet || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    pb.set_style(
        ProgressStyle::with_template(
            "{elapsed_precise} [{wide_bar}] {pos}/{len} points  {rate}  ETA {eta}",
        )
        .expect("valid template")
        .with_key(
            "rate",
            |s: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                let _ = write!(w, "{:.0} points/s", s.per_sec());
            },
        )
        .progress_chars("=> "),
    );
    pb
}

fn emit(format: Format, f: &SweepFile, summary: &str) {
    match format {
        Format::Summary => print!("{summary}"),
        Format::Csv => print!("{}", sweep::csv(f)),
        Format::Json => print!("{}", sweep::json(f)),
    }
}

fn write_outputs(dir: &Path, f: &SweepFile, summary: &str, force: bool) -> Result<(), CliError> {
    let p = Paths::of(dir);
    for (path, body) in [
        (&p.csv, sweep::csv(f)),
        (&p.json, sweep::json(f)),
        (&p.summary, summary.to_string()),
    ] {
        write_atomic(path, body.as_bytes(), force).map_err(CliError::output)?;
    }
    Ok(())
}

pub fn run(a: Args) -> Result<(), CliError> {
    match a.command {
        Some(SubCommand::Merge(m)) => merge(m),
        None => run_sweep(a.run),
    }
}

fn run_sweep(a: RunArgs) -> Result<(), CliError> {
    let grid = Grid::new(&grid_spec(&a)?).map_err(input)?;
    let shard = a
        .shard
        .as_deref()
        .map(Shard::parse)
        .transpose()
        .map_err(|e| CliError::input(format!("--shard: {e}")))?;
    let threads = match a.threads {
        Some(n) if n < 1 => return Err(CliError::input("--threads must be at least 1")),
        Some(n) => n as usize,
        None => 0,
    };
    let info = GridInfo::from(&grid);
    let header = JournalHeader {
        format: JOURNAL.into(),
        grid: info.clone(),
        shard,
    };
    let mut done: Vec<Row> = Vec::new();
    let mut journal: Option<std::fs::File> = None;
    if let Some(dir) = &a.out {
        std::fs::create_dir_all(dir).map_err(|e| write_err(dir, e))?;
        let p = Paths::of(dir);
        let resuming = a.resume && p.journal.exists();
        if a.resume && !p.journal.exists() && p.json.exists() {
            // Finished before: nothing to resume; the outputs stand.
            let text = std::fs::read_to_string(&p.json).map_err(|e| write_err(&p.json, e))?;
            let f =
                SweepFile::parse(&p.json.display().to_string(), &text).map_err(CliError::input)?;
            if f.grid != info || f.shard != shard {
                return Err(CliError::input(format!(
                    "--resume: {} is a finished sweep of another grid or shard",
                    p.json.display()
                )));
            }
            let summary = sweep::summary(&f, a.group_by.as_deref());
            emit(a.format, &f, &summary);
            return Ok(());
        }
        if !a.force && !resuming {
            for path in [&p.csv, &p.json, &p.summary, &p.journal] {
                if path.exists() {
                    let hint = if path == &p.journal {
                        "a partial sweep is there; pass --resume to continue it or --force to start over"
                    } else {
                        "pass --force to overwrite it"
                    };
                    return Err(CliError::output(format!(
                        "{} exists; {hint}",
                        path.display()
                    )));
                }
            }
        }
        if resuming {
            done = read_journal(&p.journal, &header)?;
            // Rewrite the journal without a cut-short last line before appending.
            let mut body = serde_json::to_string(&header).expect("header serializes") + "\n";
            let s = grid.strategies.len();
            for chunk in done.chunks(s) {
                body += &serde_json::to_string(chunk).expect("rows serialize");
                body.push('\n');
            }
            write_atomic(&p.journal, body.as_bytes(), true).map_err(CliError::output)?;
        } else {
            let body = serde_json::to_string(&header).expect("header serializes") + "\n";
            write_atomic(&p.journal, body.as_bytes(), true).map_err(CliError::output)?;
        }
        journal = Some(
            std::fs::OpenOptions::new()
                .append(true)
                .open(&p.journal)
                .map_err(|e| write_err(&p.journal, e))?,
        );
    }
    let s = grid.strategies.len() as u64;
    let have: std::collections::BTreeSet<u64> = done.iter().map(|r| r.point / s).collect();
    let todo: Vec<u64> = (0..grid.points())
        .filter(|p| shard.is_none_or(|sh| sh.holds(*p)) && !have.contains(p))
        .collect();
    let total = (0..grid.points())
        .filter(|p| shard.is_none_or(|sh| sh.holds(*p)))
        .count() as u64;
    let pb = progress(total, a.quiet);
    pb.set_position(have.len() as u64);
    let opts = RunOptions {
        max_events: a.max_events,
        skip_invalid: a.skip_invalid,
    };
    let journal = Mutex::new(journal);
    let stop = AtomicBool::new(false);
    let finished = AtomicU64::new(0);
    let journal_path = a.out.as_deref().map(|d| Paths::of(d).journal);
    let work = |p: u64| -> Option<Result<Vec<Row>, CliError>> {
        if stop.load(Ordering::Relaxed) {
            return None;
        }
        let rows = match sweep::run_point(&grid, p, &opts) {
            Ok(r) => r,
            Err(e) => {
                stop.store(true, Ordering::Relaxed);
                return Some(Err(CliError::run(e)));
            }
        };
        let mut j = journal.lock().unwrap_or_else(|e| e.into_inner());
        if let (Some(f), Some(path)) = (j.as_mut(), &journal_path) {
            let mut line = serde_json::to_string(&rows).expect("rows serialize");
            line.push('\n');
            if let Err(e) = f.write_all(line.as_bytes()).and_then(|()| f.flush()) {
                stop.store(true, Ordering::Relaxed);
                return Some(Err(write_err(path, e)));
            }
        }
        drop(j);
        pb.inc(1);
        let n = finished.fetch_add(1, Ordering::Relaxed) + 1;
        if a.halt_after.is_some_and(|h| n >= h) {
            stop.store(true, Ordering::Relaxed);
        }
        Some(Ok(rows))
    };
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|e| CliError::run(format!("cannot start worker threads: {e}")))?;
    let results: Vec<Option<Result<Vec<Row>, CliError>>> =
        pool.install(|| todo.par_iter().map(|&p| work(p)).collect());
    pb.finish_and_clear();
    let mut rows = done;
    let mut halted = false;
    for r in results {
        match r {
            // Results are in point order: the first error is the lowest failing point
            // among those that ran.
            Some(Err(e)) => return Err(e),
            Some(Ok(r)) => rows.extend(r),
            None => halted = true,
        }
    }
    if halted {
        return Err(CliError::run(format!(
            "sweep halted after {} points (--halt-after); continue with --resume",
            finished.load(Ordering::Relaxed)
        )));
    }
    let f = SweepFile::new(&info, grid.rows(), shard, rows);
    let summary = sweep::summary(&f, a.group_by.as_deref());
    if let Some(dir) = &a.out {
        let p = Paths::of(dir);
        write_outputs(dir, &f, &summary, true)?;
        std::fs::remove_file(&p.journal).map_err(|e| write_err(&p.journal, e))?;
    }
    emit(a.format, &f, &summary);
    Ok(())
}

fn merge(m: MergeArgs) -> Result<(), CliError> {
    let mut files = Vec::with_capacity(m.inputs.len());
    for p in &m.inputs {
        let path = if p.is_dir() {
            p.join("sweep.json")
        } else {
            p.clone()
        };
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(&path)
            .map_err(|e| CliError::input(format!("cannot read {shown}: {e}")))?;
        files.push((
            shown.clone(),
            SweepFile::parse(&shown, &text).map_err(CliError::input)?,
        ));
    }
    let f = sweep::merge(files).map_err(CliError::input)?;
    std::fs::create_dir_all(&m.out).map_err(|e| write_err(&m.out, e))?;
    let summary = sweep::summary(&f, m.group_by.as_deref());
    write_outputs(&m.out, &f, &summary, m.force)?;
    emit(m.format, &f, &summary);
    Ok(())
}
