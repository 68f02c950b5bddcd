//! The `plot` use case: pictures (SVG or PNG bytes) of timelines — Gantt charts of
//! simulated or measured runs, a measured run with its prediction drawn over it — and
//! charts of a sweep (a metric against a field, the best strategy per cell).

use super::{Error, read_timeline};
use crate::plot::{self, Figure, Gantt, ImageFormat, Panel};
use crate::sweep::SweepFile;
use crate::timeline::Timeline;
use std::path::{Path, PathBuf};

/// A picture to draw.
#[derive(Debug, Clone)]
pub enum Request {
    /// A Gantt chart of timeline files or of directories of them.
    Timeline {
        inputs: Vec<PathBuf>,
        /// Ranks to show (default: all, a rank that repeats another drawn once).
        ranks: Option<Vec<u32>>,
        /// Draw every rank even where it repeats another.
        all_ranks: bool,
        /// The part drawn: `START:END` in µs or a layer/micro-batch range
        /// (`layer=3-5,mb=0`), as `--trace-window` takes it.
        window: Option<String>,
        title: Option<String>,
    },
    /// A metric of a sweep (its sweep.json or folder) against a field, one line per
    /// series.
    Sweep {
        sweep: PathBuf,
        x: String,
        y: String,
        series: String,
        filters: Vec<(String, String)>,
    },
    /// The best strategy in each cell of two swept fields.
    Heatmap {
        sweep: PathBuf,
        x: String,
        y: String,
        metric: String,
        by: String,
        filters: Vec<(String, String)>,
    },
}

/// `0-3,7` → [0, 1, 2, 3, 7] (`--ranks`).
pub fn parse_ranks(s: &str) -> Result<Vec<u32>, Error> {
    parse_rank_list("--ranks", s)
}

/// `0-3,7` → [0, 1, 2, 3, 7], errors naming `flag`.
pub fn parse_rank_list(flag: &str, s: &str) -> Result<Vec<u32>, Error> {
    let bad = || Error::input(format!("{flag} `{s}`: expected a list like 0-3,7"));
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

/// `FIELD=VALUE` filters.
pub fn parse_filters(v: &[String]) -> Result<Vec<(String, String)>, Error> {
    v.iter()
        .map(|f| {
            f.split_once('=')
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                .ok_or_else(|| Error::input(format!("--where `{f}`: expected FIELD=VALUE")))
        })
        .collect()
}

/// The timeline files of an input: itself, or a directory's timeline-*, measured-* and
/// predicted-* JSON files in name order.
fn timeline_files(p: &Path) -> Result<Vec<PathBuf>, Error> {
    if !p.is_dir() {
        return Ok(vec![p.to_path_buf()]);
    }
    let mut v: Vec<PathBuf> = std::fs::read_dir(p)
        .map_err(|e| Error::input(format!("cannot read {}: {e}", p.display())))?
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
    // Panels in the order the run compared its strategies (results.json), where known.
    let order: Vec<String> = std::fs::read_to_string(p.join("results.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|j| {
            j["results"].as_array().map(|rs| {
                rs.iter()
                    .filter_map(|r| r["strategy"].as_str())
                    .map(super::run::stem)
                    .collect()
            })
        })
        .unwrap_or_default();
    let rank = |f: &PathBuf| {
        let n = f.file_stem().and_then(|n| n.to_str()).unwrap_or("");
        let stem = n.split_once('-').map_or(n, |(_, s)| s);
        order.iter().position(|o| o == stem).unwrap_or(order.len())
    };
    v.sort_by_key(|f| rank(f));
    if v.is_empty() {
        return Err(Error::input(format!(
            "{}: no timeline-*.json, measured-*.json or predicted-*.json inside",
            p.display()
        )));
    }
    Ok(v)
}

/// Every timeline of the inputs (files, or directories of them).
pub fn read_timelines(inputs: &[PathBuf]) -> Result<Vec<Timeline>, Error> {
    let mut ts = Vec::new();
    for p in inputs {
        for f in timeline_files(p)? {
            ts.push(read_timeline(&f)?);
        }
    }
    Ok(ts)
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

fn read_sweep(p: &Path) -> Result<SweepFile, Error> {
    let path = if p.is_dir() {
        p.join("sweep.json")
    } else {
        p.to_path_buf()
    };
    let text = super::read_text(&path, crate::io::MAX_DATA_BYTES)?;
    SweepFile::parse(&path.display().to_string(), &text).map_err(Error::input)
}

fn render(fig: &impl Figure, format: ImageFormat) -> Result<Vec<u8>, Error> {
    plot::render(fig, format).map_err(Error::run)
}

/// The picture's format from the name it will have (`.svg` or `.png`).
pub fn format_of(path: &Path) -> Result<ImageFormat, Error> {
    ImageFormat::from_path(path).map_err(Error::input)
}

/// What a Gantt chart shows of its timelines.
#[derive(Debug, Clone, Default)]
pub struct GanttView {
    /// Ranks to show (all when `None`).
    pub ranks: Option<Vec<u32>>,
    /// Draw every rank even where it repeats another (always when `ranks` is given).
    pub all_ranks: bool,
    /// `START:END` (µs) or `layer=A-B,mb=A-B`.
    pub window: Option<String>,
}

/// The time window (s) a `--window` value selects in these timelines.
fn resolve_window(w: &str, timelines: &[&Timeline]) -> Result<(f64, f64), Error> {
    let f = crate::trace::parse_window(w).map_err(|e| Error::input(format!("--window {e}")))?;
    if let Some(t) = f.window {
        return Ok(t);
    }
    let range = f.scope.unwrap_or_default();
    let (mut a, mut b) = (f64::INFINITY, f64::NEG_INFINITY);
    for t in timelines {
        for s in &t.spans {
            if range.keeps(t.scope(s)) {
                a = a.min(s.start);
                b = b.max(s.end);
            }
        }
    }
    if a >= b {
        return Err(Error::input(format!(
            "--window `{w}`: no op of the timelines is in that range (timelines of a layer or \
             a step record their layers and micro-batches; others do not)"
        )));
    }
    Ok((a, b))
}

/// Timelines drawn stacked, one panel each (or a measured one with its prediction).
pub fn gantt(
    title: &str,
    timelines: &[&Timeline],
    view: &GanttView,
    format: ImageFormat,
) -> Result<Vec<u8>, Error> {
    if let Some(r) = &view.ranks
        && timelines.iter().all(|t| r.iter().all(|&x| x >= t.ranks))
    {
        return Err(Error::input(format!(
            "--ranks: no timeline has any of ranks {r:?}"
        )));
    }
    let window = view
        .window
        .as_deref()
        .map(|w| resolve_window(w, timelines))
        .transpose()?;
    let g = Gantt {
        title: title.to_string(),
        panels: panels(timelines),
        ranks: view.ranks.clone(),
        fold: view.ranks.is_none() && !view.all_ranks,
        window,
    };
    render(&g, format)
}

/// The default title of timelines: their scenario, ranks and strategies.
pub fn timeline_title(timelines: &[&Timeline]) -> String {
    let mut scenarios: Vec<&str> = timelines.iter().map(|t| t.scenario.as_str()).collect();
    scenarios.dedup();
    let mut strategies: Vec<&str> = timelines.iter().map(|t| t.strategy.as_str()).collect();
    strategies.dedup();
    let ranks = timelines.iter().map(|t| t.ranks).max().unwrap_or(0);
    format!(
        "scenario {}: {} rank{} · {}",
        scenarios.join(", "),
        ranks,
        if ranks == 1 { "" } else { "s" },
        strategies.join(" vs ")
    )
}

/// Draw the picture the request asks for.
pub fn run(req: &Request, format: ImageFormat) -> Result<Vec<u8>, Error> {
    match req {
        Request::Timeline {
            inputs,
            ranks,
            all_ranks,
            window,
            title,
        } => {
            let ts = read_timelines(inputs)?;
            let refs: Vec<&Timeline> = ts.iter().collect();
            let view = GanttView {
                ranks: ranks.clone(),
                all_ranks: *all_ranks,
                window: window.clone(),
            };
            let title = title.clone().unwrap_or_else(|| timeline_title(&refs));
            gantt(&title, &refs, &view, format)
        }
        Request::Sweep {
            sweep,
            x,
            y,
            series,
            filters,
        } => {
            let f = read_sweep(sweep)?;
            let chart = plot::lines_from_sweep(&f, x, y, series, filters).map_err(Error::input)?;
            render(&chart, format)
        }
        Request::Heatmap {
            sweep,
            x,
            y,
            metric,
            by,
            filters,
        } => {
            let f = read_sweep(sweep)?;
            let map =
                plot::heatmap_from_sweep(&f, x, y, metric, by, filters).map_err(Error::input)?;
            render(&map, format)
        }
    }
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
