//! The `sweep` use case: a grid of scenario points run in parallel (rayon), rows in
//! point order, with its files (CSV, JSON, summary) written to a folder, a journal there
//! to resume an interrupted sweep from, shards, and the merge of shards. The command
//! line adds flags and a progress bar; the Python package calls [`run`] too.

use crate::io::{OutputError, write_atomic};
use crate::sweep::{self, Grid, GridSpec, Row, RunOptions, Shard, SweepFile, output::GridInfo};
use rayon::prelude::*;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

pub use super::Error;

/// What to sweep and where its files go.
#[derive(Debug, Clone)]
pub struct Request {
    pub spec: GridSpec,
    /// Only the points of this shard.
    pub shard: Option<Shard>,
    /// Worker threads (0: one per core).
    pub threads: usize,
    /// Where sweep.csv, sweep.json, summary.txt and the journal go.
    pub out: Option<PathBuf>,
    /// Continue the journal in `out`.
    pub resume: bool,
    /// Overwrite existing outputs.
    pub force: bool,
    pub options: RunOptions,
    /// Stop after this many points (to test resuming).
    pub halt_after: Option<u64>,
    /// The summary's groups.
    pub group_by: Option<Vec<String>>,
    /// The figure the summary ranks by (default: makespan, or tokens/s where a group
    /// mixes global batches).
    pub rank_by: Option<crate::report::RankBy>,
}

/// Progress of the points, for a front end to show.
pub trait Progress: Sync {
    /// `total` points in all, `done` of them already (resumed).
    fn start(&self, total: u64, done: u64);
    fn inc(&self);
    fn finish(&self);
}

/// No progress shown.
impl Progress for () {
    fn start(&self, _: u64, _: u64) {}
    fn inc(&self) {}
    fn finish(&self) {}
}

/// A finished sweep: its rows (the file form) and the summary.
#[derive(Debug, Clone)]
pub struct Sweep {
    pub file: SweepFile,
    pub summary: String,
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

fn write_err(path: &Path, source: std::io::Error) -> Error {
    Error::output(OutputError::Write {
        path: path.display().to_string(),
        source,
    })
}

/// The journal's first line: which grid and shard its rows belong to.
#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct JournalHeader {
    format: String,
    /// The build that wrote it: rows of another build may differ, so they are not
    /// mixed with this one's.
    #[serde(default)]
    version: String,
    grid: GridInfo,
    shard: Option<Shard>,
}

const JOURNAL: &str = "flashoverlap-sweep-journal";

/// Rows of the points a journal holds; a last line cut short by an interruption (no
/// newline at its end) is dropped, and its point runs again.
fn read_journal(path: &Path, want: &JournalHeader, grid: &Grid) -> Result<Vec<Row>, Error> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::input(format!("--resume: cannot read {shown}: {e}")))?;
    let complete = text.ends_with('\n');
    let lines: Vec<&str> = text.lines().collect();
    let Some(first) = lines.first() else {
        return Ok(Vec::new());
    };
    let header: JournalHeader = serde_json::from_str(first).map_err(|e| {
        Error::input(format!(
            "--resume: {shown}: line 1 is not a sweep journal header: {e}"
        ))
    })?;
    if header.version != want.version {
        return Err(Error::input(format!(
            "--resume: {shown} was written by flashoverlap {} and this is {}; its rows may \
             differ from this build's, so they are not mixed: --force to start over",
            if header.version.is_empty() {
                "(unknown)"
            } else {
                &header.version
            },
            want.version
        )));
    }
    if &header != want {
        return Err(Error::input(format!(
            "--resume: {shown} belongs to another grid or shard; rerun with the same fields, or --force to start over"
        )));
    }
    let s = grid.strategies.len() as u64;
    let mut seen = std::collections::BTreeSet::new();
    let mut rows = Vec::new();
    for (n, l) in lines.iter().enumerate().skip(1) {
        let r = match serde_json::from_str::<Vec<Row>>(l) {
            Ok(r) => r,
            Err(_) if n + 1 == lines.len() && !complete => break,
            Err(e) => {
                return Err(Error::input(format!(
                    "--resume: {shown}: line {} is corrupt: {e}",
                    n + 1
                )));
            }
        };
        // A line is one point's rows, one per strategy in the grid's order, with the
        // point's own axes, inside the grid and the shard, not seen before.
        let bad = |why: String| {
            Error::input(format!(
                "--resume: {shown}: line {} {why}; the journal does not match this sweep \
                 (--force to start over)",
                n + 1
            ))
        };
        let Some(first) = r.first() else {
            return Err(bad("holds no row".into()));
        };
        let p = first.point / s.max(1);
        if p >= grid.points() {
            return Err(bad(format!(
                "names point {p}, past the grid's {}",
                grid.points()
            )));
        }
        if header.shard.is_some_and(|sh| !sh.holds(p)) {
            return Err(bad(format!("names point {p}, which is not this shard's")));
        }
        if !seen.insert(p) {
            return Err(bad(format!("repeats point {p}")));
        }
        if r.len() as u64 != s {
            return Err(bad(format!(
                "holds {} rows where the grid has {s} strategies",
                r.len()
            )));
        }
        let axes: std::collections::BTreeMap<String, String> =
            grid.describe(p).into_iter().collect();
        for (k, row) in r.iter().enumerate() {
            let want_strategy = grid.strategies[k].to_string();
            if row.point != p * s + k as u64 || row.strategy != want_strategy {
                return Err(bad(format!(
                    "has row {} `{}` where point {p} has row {} `{want_strategy}`",
                    row.point,
                    row.strategy,
                    p * s + k as u64
                )));
            }
            if row.axes != axes {
                return Err(bad(format!("gives point {p} fields other than the grid's")));
            }
        }
        rows.extend(r);
    }
    Ok(rows)
}

fn write_outputs(dir: &Path, f: &SweepFile, summary: &str, force: bool) -> Result<(), Error> {
    let files = [
        ("sweep.csv".to_string(), sweep::csv(f)),
        ("sweep.json".to_string(), sweep::json(f)),
        ("summary.txt".to_string(), summary.to_string()),
    ];
    crate::io::write_set(dir, &files, force).map_err(Error::output)
}

/// Run the sweep `a` asks for.
pub fn run(a: &Request, pb: &dyn Progress) -> Result<Sweep, Error> {
    let grid = Grid::new(&a.spec).map_err(Error::input)?;
    let (shard, threads) = (a.shard, a.threads);
    let info = GridInfo::from(&grid);
    if let Some(g) = &a.group_by {
        sweep::check_group_by(&info, g).map_err(Error::input)?;
    }
    let header = JournalHeader {
        format: JOURNAL.into(),
        version: env!("CARGO_PKG_VERSION").into(),
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
            let f = SweepFile::parse(&p.json.display().to_string(), &text).map_err(Error::input)?;
            if f.grid != info || f.shard != shard {
                return Err(Error::input(format!(
                    "--resume: {} is a finished sweep of another grid or shard",
                    p.json.display()
                )));
            }
            let summary = sweep::summary(&f, a.group_by.as_deref(), a.rank_by.as_ref());
            return Ok(Sweep { file: f, summary });
        }
        if !a.force && !resuming {
            for path in [&p.csv, &p.json, &p.summary, &p.journal] {
                if path.exists() {
                    let hint = if path == &p.journal {
                        "a partial sweep is there; pass --resume to continue it or --force to start over"
                    } else {
                        "pass --force to overwrite it"
                    };
                    return Err(Error::output(format!("{} exists; {hint}", path.display())));
                }
            }
        }
        if resuming {
            done = read_journal(&p.journal, &header, &grid)?;
            // Rewrite the journal without a cut-short last line before appending.
            let mut body = serde_json::to_string(&header).expect("header serializes") + "\n";
            let s = grid.strategies.len();
            for chunk in done.chunks(s) {
                body += &serde_json::to_string(chunk).expect("rows serialize");
                body.push('\n');
            }
            write_atomic(&p.journal, body.as_bytes(), true).map_err(Error::output)?;
        } else {
            let body = serde_json::to_string(&header).expect("header serializes") + "\n";
            write_atomic(&p.journal, body.as_bytes(), true).map_err(Error::output)?;
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
    pb.start(total, have.len() as u64);
    let opts = a.options.clone();
    let journal = Mutex::new(journal);
    let stop = AtomicBool::new(false);
    let finished = AtomicU64::new(0);
    let journal_path = a.out.as_deref().map(|d| Paths::of(d).journal);
    let work = |p: u64| -> Option<Result<Vec<Row>, Error>> {
        if stop.load(Ordering::Relaxed) {
            return None;
        }
        let rows = match sweep::run_point(&grid, p, &opts) {
            Ok(r) => r,
            Err(e) => {
                stop.store(true, Ordering::Relaxed);
                return Some(Err(Error::run(e)));
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
        pb.inc();
        let n = finished.fetch_add(1, Ordering::Relaxed) + 1;
        if a.halt_after.is_some_and(|h| n >= h) {
            stop.store(true, Ordering::Relaxed);
        }
        Some(Ok(rows))
    };
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|e| Error::run(format!("cannot start worker threads: {e}")))?;
    let results: Vec<Option<Result<Vec<Row>, Error>>> =
        pool.install(|| todo.par_iter().map(|&p| work(p)).collect());
    pb.finish();
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
        return Err(Error::run(format!(
            "sweep halted after {} points (--halt-after); continue with --resume",
            finished.load(Ordering::Relaxed)
        )));
    }
    let f = SweepFile::new(&info, grid.rows(), shard, rows);
    let summary = sweep::summary(&f, a.group_by.as_deref(), a.rank_by.as_ref());
    if let Some(dir) = &a.out {
        let p = Paths::of(dir);
        write_outputs(dir, &f, &summary, true)?;
        std::fs::remove_file(&p.journal).map_err(|e| write_err(&p.journal, e))?;
    }
    Ok(Sweep { file: f, summary })
}

/// Join the outputs of shards (their `--out` folders or `sweep.json` files) into what
/// one run of the whole grid would have written, in `out`.
pub fn merge(
    inputs: &[PathBuf],
    out: &Path,
    force: bool,
    group_by: Option<&[String]>,
    rank_by: Option<&crate::report::RankBy>,
) -> Result<Sweep, Error> {
    let files = super::read_shards(inputs, "sweep.json", SweepFile::parse)?;
    let f = sweep::merge(files).map_err(Error::input)?;
    std::fs::create_dir_all(out).map_err(|e| write_err(out, e))?;
    if let Some(g) = group_by {
        sweep::check_group_by(&f.grid, g).map_err(Error::input)?;
    }
    let summary = sweep::summary(&f, group_by, rank_by);
    write_outputs(out, &f, &summary, force)?;
    Ok(Sweep { file: f, summary })
}
