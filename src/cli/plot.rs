//! `flashoverlap plot`: the flags of [`crate::app::plot`]'s requests; writes the picture
//! (SVG or PNG by extension).

use super::{CliError, from_app};
use crate::app::plot::{self as app, Request};
use crate::io::write_atomic;
use crate::timeline::Timeline;
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
    /// Ranks to show, e.g. `0-3,7` (default: all, a rank whose timeline repeats an
    /// already drawn rank's drawn once with a note).
    #[arg(long)]
    pub ranks: Option<String>,
    /// Draw every rank, even those that repeat another.
    #[arg(long)]
    pub all_ranks: bool,
    /// Zoom: START:END in µs (e.g. 0:5000), or the span of a layer, micro-batch and
    /// pass range (e.g. layer=3-5, layer=0,mb=1,pass=bwd).
    #[arg(long, value_name = "START:END|layer=A-B,mb=A-B")]
    pub window: Option<String>,
    /// Figure title (default: the scenario, ranks and strategies).
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

pub fn run(a: Args) -> Result<(), CliError> {
    let (req, out, force) = match a.command {
        Kind::Timeline(t) => (
            Request::Timeline {
                inputs: t.inputs,
                ranks: t
                    .ranks
                    .as_deref()
                    .map(app::parse_ranks)
                    .transpose()
                    .map_err(from_app)?,
                all_ranks: t.all_ranks,
                window: t.window,
                title: t.title,
            },
            t.out,
            t.force,
        ),
        Kind::Sweep(s) => (
            Request::Sweep {
                sweep: s.sweep,
                x: s.x,
                y: s.y,
                series: s.series,
                filters: app::parse_filters(&s.filters).map_err(from_app)?,
            },
            s.out,
            s.force,
        ),
        Kind::Heatmap(h) => (
            Request::Heatmap {
                sweep: h.sweep,
                x: h.x,
                y: h.y,
                metric: h.metric,
                by: h.by,
                filters: app::parse_filters(&h.filters).map_err(from_app)?,
            },
            h.out,
            h.force,
        ),
    };
    let format = app::format_of(&out).map_err(from_app)?;
    let bytes = app::run(&req, format).map_err(from_app)?;
    write_atomic(&out, &bytes, force).map_err(CliError::output)
}

/// `simulate --plot`: the run's timelines stacked, one panel per strategy.
pub fn simulate_plot(
    path: &Path,
    title: &str,
    timelines: &[&Timeline],
    force: bool,
) -> Result<(), CliError> {
    let format = app::format_of(path).map_err(from_app)?;
    let bytes =
        app::gantt(title, timelines, &app::GanttView::default(), format).map_err(from_app)?;
    write_atomic(path, &bytes, force).map_err(CliError::output)
}
