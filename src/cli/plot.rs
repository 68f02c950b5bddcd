//! `flashoverlap plot`: timeline Gantt charts and sweep charts, SVG or PNG by extension.

use super::CliError;
use crate::io::write_atomic;
use crate::plot::{self, Figure, Gantt, ImageFormat, Panel};
use crate::sweep::SweepFile;
use crate::timeline::Timeline;
use crate::timeline::file::TimelineFile;
use std::path::{Path, PathBuf};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: Kind,
}

#[derive(Debug, clap::Subcommand)]
pub enum Kind {
    /// A Gantt chart of timelines: timeline JSON files, `simulate --out` directories
    /// (every timeline-*.json) or `run --out` directories (measured with the predicted
    /// timeline of the same strategy drawn over it as outlines).
    Timeline(TimelineArgs),
    /// A metric of a sweep against a swept field, one line per strategy.
    Sweep(SweepArgs),
    /// The best strategy in each cell of two swept fields.
    Heatmap(HeatmapArgs),
}

#[derive(Debug, clap::Args)]
pub struct TimelineArgs {
    /// Timeline files or directories.
    #[arg(required = true)]
    pub inputs: Vec<PathBuf>,
    /// Output picture: .svg or .png.
    #[arg(short, long)]
    pub out: PathBuf,
    /// Ranks to show, e.g. `0-3,7` (default: all).
    #[arg(long)]
    pub ranks: Option<String>,
    /// Figure title.
    #[arg(long)]
    pub title: Option<String>,
    /// Overwrite an existing picture.
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, clap::Args)]
pub struct SweepArgs {
    /// A sweep.json, or the `sweep --out` directory holding it.
    pub sweep: PathBuf,
    /// The x field: a swept field (seq, tp, …), an input column, or `chunks` (the K of
    /// chunked:K; other strategies become horizontal reference lines).
    #[arg(long)]
    pub x: String,
    /// The metric: makespan_us, exposed_comm_us, speedup_vs_sequential_x, mfu_ratio, …
    #[arg(long, default_value = "makespan_us")]
    pub y: String,
    /// One line per value of: strategy, family (sequential/chunked/flash) or a field;
    /// `auto`: family when x is `chunks`, else strategy.
    #[arg(long, default_value = "auto")]
    pub series: String,
    /// Keep only rows with FIELD=VALUE (repeatable); other swept fields take their best.
    #[arg(long = "where", value_name = "FIELD=VALUE")]
    pub filters: Vec<String>,
    /// Output picture: .svg or .png.
    #[arg(short, long)]
    pub out: PathBuf,
    /// Overwrite an existing picture.
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, clap::Args)]
pub struct HeatmapArgs {
    /// A sweep.json, or the `sweep --out` directory holding it.
    pub sweep: PathBuf,
    /// Field across.
    #[arg(long)]
    pub x: String,
    /// Field up.
    #[arg(long)]
    pub y: String,
    /// The metric that decides the best.
    #[arg(long, default_value = "makespan_us")]
    pub metric: String,
    /// Rank `strategy` (chunked:4 vs chunked:8) or `family` (chunked vs flash).
    #[arg(long, default_value = "strategy")]
    pub by: String,
    /// Keep only rows with FIELD=VALUE (repeatable).
    #[arg(long = "where", value_name = "FIELD=VALUE")]
    pub filters: Vec<String>,
    /// Output picture: .svg or .png.
    #[arg(short, long)]
    pub out: PathBuf,
    /// Overwrite an existing picture.
    #[arg(long)]
    pub force: bool,
}

/// `0-3,7` → [0, 1, 2, 3, 7].
pub fn parse_ranks(s: &str) -> Result<Vec<u32>, CliError> {
    let bad = || CliError::input(format!("--ranks `{s}`: expected a list like 0-3,7"));
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let a: u32 = a.trim().parse().map_err(|_| bad())?;
        let b: u32 = b.trim().parse().map_err(|_| bad())?;
        if b < a || b - a > 100_000 {
            return Err(bad());
        }
        out.extend(a..=b);
    }
    if out.is_empty() {
        return Err(bad());
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

fn filters(v: &[String]) -> Result<Vec<(String, String)>, CliError> {
    v.iter()
        .map(|f| {
            f.split_once('=')
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                .ok_or_else(|| CliError::input(format!("--where `{f}`: expected FIELD=VALUE")))
        })
        .collect()
}

pub fn read_timeline(path: &Path) -> Result<Timeline, CliError> {
    let shown = path.display().to_string();
    let text = crate::io::read_text(path, crate::io::MAX_DATA_BYTES)
        .map_err(|e| CliError::input(format!("cannot read {shown}: {e}")))?;
    let f: TimelineFile = serde_json::from_str(&text)
        .map_err(|e| CliError::input(format!("{shown}: not a flashoverlap timeline: {e}")))?;
    Timeline::try_from(f).map_err(|e| CliError::input(format!("{shown}: {e}")))
}

/// The timeline files of an input: itself, or a directory's timeline-*, measured-* and
/// predicted-* JSON files in name order.
fn timeline_files(p: &Path) -> Result<Vec<PathBuf>, CliError> {
    if !p.is_dir() {
        return Ok(vec![p.to_path_buf()]);
    }
    let mut v: Vec<PathBuf> = std::fs::read_dir(p)
        .map_err(|e| CliError::input(format!("cannot read {}: {e}", p.display())))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|f| {
            let n = f.file_name().and_then(|n| n.to_str()).unwrap_or("");
            n.ends_with(".json")
                && ["timeline-", "measured-", "predicted-"]
                    .iter()
                    .any(|p| n.starts_with(p))
        })
        .collect();
    v.sort();
    if v.is_empty() {
        return Err(CliError::input(format!(
            "{}: no timeline-*.json, measured-*.json or predicted-*.json inside",
            p.display()
        )));
    }
    Ok(v)
}

fn write_picture(path: &Path, fig: &impl Figure, force: bool) -> Result<(), CliError> {
    let fmt = ImageFormat::from_path(path).map_err(CliError::input)?;
    let bytes = plot::render(fig, fmt).map_err(CliError::run)?;
    write_atomic(path, &bytes, force).map_err(CliError::output)
}

/// Panels for a set of timelines: a measured one and a predicted one of the same strategy
/// share a panel (prediction as outlines); every other timeline is a panel of its own.
pub fn panels<'a>(ts: &[&'a Timeline]) -> Vec<Panel<'a>> {
    use crate::timeline::Source;
    let mut used = vec![false; ts.len()];
    let mut out = Vec::new();
    for (i, t) in ts.iter().enumerate() {
        if used[i] {
            continue;
        }
        used[i] = true;
        let partner = (t.source == Source::Measured)
            .then(|| {
                ts.iter().enumerate().position(|(j, o)| {
                    !used[j]
                        && o.source == Source::Predicted
                        && o.strategy == t.strategy
                        && o.scenario == t.scenario
                        && o.ranks == t.ranks
                })
            })
            .flatten();
        let overlay = partner.map(|j| {
            used[j] = true;
            ts[j]
        });
        let m = crate::timeline::metrics::metrics(t);
        let mut title = format!(
            "{} · {} {} · makespan {:.1} µs, exposed comm {:.1} µs",
            t.scenario,
            t.strategy,
            t.source.name(),
            m.makespan * 1e6,
            m.exposed_comm * 1e6
        );
        if let Some(o) = overlay {
            let mo = crate::timeline::metrics::metrics(o);
            title.push_str(&format!(" · predicted {:.1} µs", mo.makespan * 1e6));
        }
        out.push(Panel {
            title,
            main: t,
            overlay,
        });
    }
    out
}

fn timeline(a: TimelineArgs) -> Result<(), CliError> {
    let mut ts = Vec::new();
    for p in &a.inputs {
        for f in timeline_files(p)? {
            ts.push(read_timeline(&f)?);
        }
    }
    let ranks = a.ranks.as_deref().map(parse_ranks).transpose()?;
    if let Some(r) = &ranks
        && ts.iter().all(|t| r.iter().all(|&x| x >= t.ranks))
    {
        return Err(CliError::input(format!(
            "--ranks: no timeline has any of ranks {:?}",
            r
        )));
    }
    let title = a.title.unwrap_or_else(|| "timeline".into());
    let refs: Vec<&Timeline> = ts.iter().collect();
    let g = Gantt {
        title,
        panels: panels(&refs),
        ranks,
    };
    write_picture(&a.out, &g, a.force)
}

fn read_sweep(p: &Path) -> Result<SweepFile, CliError> {
    let path = if p.is_dir() {
        p.join("sweep.json")
    } else {
        p.to_path_buf()
    };
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(&path)
        .map_err(|e| CliError::input(format!("cannot read {shown}: {e}")))?;
    SweepFile::parse(&shown, &text).map_err(CliError::input)
}

pub fn run(a: Args) -> Result<(), CliError> {
    match a.command {
        Kind::Timeline(t) => timeline(t),
        Kind::Sweep(s) => {
            let f = read_sweep(&s.sweep)?;
            let chart = plot::lines_from_sweep(&f, &s.x, &s.y, &s.series, &filters(&s.filters)?)
                .map_err(CliError::input)?;
            write_picture(&s.out, &chart, s.force)
        }
        Kind::Heatmap(h) => {
            let f = read_sweep(&h.sweep)?;
            let map =
                plot::heatmap_from_sweep(&f, &h.x, &h.y, &h.metric, &h.by, &filters(&h.filters)?)
                    .map_err(CliError::input)?;
            write_picture(&h.out, &map, h.force)
        }
    }
}

/// `simulate --plot`: the run's timelines stacked, one panel per strategy.
pub fn simulate_plot(
    path: &Path,
    title: &str,
    timelines: &[&Timeline],
    force: bool,
) -> Result<(), CliError> {
    let g = Gantt {
        title: title.to_string(),
        panels: panels(timelines),
        ranks: None,
    };
    write_picture(path, &g, force)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_lists() {
        assert_eq!(parse_ranks("0-3,7").unwrap(), [0, 1, 2, 3, 7]);
        assert_eq!(parse_ranks("2,2,1").unwrap(), [1, 2]);
        for bad in ["", "3-1", "a", "1-", "-"] {
            assert!(parse_ranks(bad).is_err(), "{bad}");
        }
    }
}
