//! The outputs of a sweep: the versioned JSON document, the CSV (one row per point, every
//! input and metric, units in the column names), the summary, and the merge of shards.
//! All are pure functions of (grid, rows, shard), with rows sorted by point.

use super::grid::{self, Grid};
use super::{FORMAT, Row, Shard, VERSION};
use crate::report::{self, RankBy};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The grid as the output records it (enough to recognise the same grid again).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GridInfo {
    pub scenario: String,
    pub axes: Vec<AxisInfo>,
    pub strategies: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AxisInfo {
    pub field: String,
    pub values: Vec<String>,
}

impl From<&Grid> for GridInfo {
    fn from(g: &Grid) -> GridInfo {
        GridInfo {
            scenario: g.scenario.clone(),
            axes: g
                .axes
                .iter()
                .map(|a| AxisInfo {
                    field: a.field.clone(),
                    values: a.values.clone(),
                })
                .collect(),
            strategies: g.strategies.iter().map(|s| s.to_string()).collect(),
        }
    }
}

/// `sweep.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepFile {
    pub format: String,
    pub version: u32,
    pub grid: GridInfo,
    /// Rows of the whole grid (all shards).
    pub rows_total: u64,
    /// The shard these rows are, `None` for a whole sweep (or a merge of all shards).
    pub shard: Option<Shard>,
    pub rows: Vec<Row>,
}

impl SweepFile {
    pub fn new(grid: &GridInfo, rows_total: u64, shard: Option<Shard>, mut rows: Vec<Row>) -> Self {
        rows.sort_by_key(|r| r.point);
        SweepFile {
            format: FORMAT.into(),
            version: VERSION,
            grid: grid.clone(),
            rows_total,
            shard,
            rows,
        }
    }

    /// Read back a `sweep.json`, checking format and version.
    pub fn parse(name: &str, text: &str) -> Result<SweepFile, String> {
        let v: serde_json::Value =
            serde_json::from_str(text).map_err(|e| format!("{name}: not JSON: {e}"))?;
        let format = v.get("format").and_then(|f| f.as_str()).unwrap_or("");
        if format != FORMAT {
            return Err(format!(
                "{name}: not a flashoverlap sweep (format `{format}`)"
            ));
        }
        let version = v.get("version").and_then(|f| f.as_u64()).unwrap_or(0);
        if version != VERSION as u64 {
            return Err(format!(
                "{name}: sweep version {version} is not supported (this build reads {VERSION})"
            ));
        }
        serde_json::from_value(v).map_err(|e| format!("{name}: {e}"))
    }
}

pub fn json(f: &SweepFile) -> String {
    let mut s = serde_json::to_string_pretty(f).expect("sweep serializes");
    s.push('\n');
    s
}

/// Input columns every row has (from the resolved scenario).
pub(crate) const INPUTS: [&str; 19] = [
    "workload",
    "model",
    "hardware",
    "gpus",
    "ranks",
    "tp",
    "dp",
    "ulysses",
    "batch",
    "seq",
    "tokens",
    "dtype",
    "transport",
    "interference",
    "pp",
    "micro_batches",
    "global_batch",
    "memory_gib",
    "fits",
];

/// Swept fields the input columns already show.
const SHOWN: [&str; 13] = [
    "workload",
    "model",
    "hardware",
    "parallel.tp",
    "parallel.dp",
    "parallel.ulysses",
    "batch",
    "seq",
    "dtype",
    "transport",
    "interference",
    "parallel.pp",
    "micro_batches",
];

pub fn csv(f: &SweepFile) -> String {
    let extra: Vec<&str> = f
        .grid
        .axes
        .iter()
        .map(|a| a.field.as_str())
        .filter(|k| !SHOWN.contains(k))
        .collect();
    let mut w = ::csv::WriterBuilder::new().from_writer(Vec::new());
    let mut header: Vec<&str> = vec!["point"];
    header.extend(&extra);
    header.extend(INPUTS);
    header.push("strategy");
    header.extend(crate::report::FIGURES);
    header.push("error");
    w.write_record(&header).expect("in memory");
    for r in &f.rows {
        let mut rec: Vec<String> = vec![r.point.to_string()];
        rec.extend(
            extra
                .iter()
                .map(|k| r.axes.get(*k).cloned().unwrap_or_default()),
        );
        match &r.inputs {
            Some(i) => rec.extend([
                i.workload.clone(),
                i.model.clone(),
                i.hardware.clone(),
                i.gpus.to_string(),
                i.ranks.to_string(),
                i.tp.to_string(),
                i.dp.to_string(),
                i.ulysses.to_string(),
                i.batch.to_string(),
                i.seq.to_string(),
                i.tokens.to_string(),
                i.dtype.clone(),
                i.transport.clone(),
                i.interference.to_string(),
                i.pp.to_string(),
                i.micro_batches.to_string(),
                i.global_batch.to_string(),
                i.memory_gib
                    .map(|m| serde_json::to_string(&m).expect("finite"))
                    .unwrap_or_default(),
                i.fits.to_string(),
            ]),
            None => rec.extend(INPUTS.iter().map(|k| {
                // An invalid point still shows the values the grid gave it.
                let field = grid::canonical_key(k);
                r.axes.get(&field).cloned().unwrap_or_default()
            })),
        }
        rec.push(r.strategy.clone());
        match &r.metrics {
            Some(m) => rec.extend(m.texts()),
            None => rec.extend(std::iter::repeat_n(
                String::new(),
                crate::report::FIGURES.len(),
            )),
        }
        rec.push(r.error.clone().unwrap_or_default());
        w.write_record(&rec).expect("in memory");
    }
    String::from_utf8(w.into_inner().expect("in memory")).expect("utf-8 fields")
}

/// Each `--group-by` field must be one the grid sweeps (rows carry only those): an
/// error naming the field and the swept ones otherwise.
pub fn check_group_by(grid: &GridInfo, group_by: &[String]) -> Result<(), String> {
    let swept: Vec<&str> = grid.axes.iter().map(|a| a.field.as_str()).collect();
    for g in group_by {
        let key = grid::canonical_key(g);
        if !swept.contains(&key.as_str()) {
            return Err(format!(
                "--group-by `{g}`: not a field this sweep varies (it varies: {})",
                if swept.is_empty() {
                    "nothing".to_string()
                } else {
                    swept.join(", ")
                }
            ));
        }
    }
    Ok(())
}

/// Figures that measure one step (and so grow with its global batch), unlike rates and
/// ratios.
fn per_step(figure: &str) -> bool {
    matches!(
        figure,
        "makespan_us"
            | "compute_us"
            | "comm_us"
            | "exposed_comm_us"
            | "max_exposed_comm_us"
            | "ops"
            | "events"
    )
}

/// The best configuration per group and how far each strategy family's best is from it.
/// Groups are the values of `group_by` (default: the swept fields with more than one
/// value that describe the problem rather than a choice: everything but strategy,
/// parallel degrees and transport). Ranked by `rank_by`, or by default by makespan
/// (tokens/s where a group mixes global batches); a group that mixes global batches
/// says so, and what that means for the figure ranked by.
pub fn summary(f: &SweepFile, group_by: Option<&[String]>, rank_by: Option<&RankBy>) -> String {
    let group_fields: Vec<String> = match group_by {
        Some(g) => g.iter().map(|k| grid::canonical_key(k)).collect(),
        None => f
            .grid
            .axes
            .iter()
            .filter(|a| a.values.len() > 1 && !grid::is_choice(&a.field))
            .map(|a| a.field.clone())
            .collect(),
    };
    let config_fields: Vec<&str> = f
        .grid
        .axes
        .iter()
        .filter(|a| a.values.len() > 1)
        .map(|a| a.field.as_str())
        .filter(|k| !group_fields.iter().any(|g| g == k))
        .collect();
    let mut groups: BTreeMap<Vec<String>, Vec<&Row>> = BTreeMap::new();
    let mut failed = 0;
    for r in &f.rows {
        if r.metrics.is_none() {
            failed += 1;
            continue;
        }
        let key = group_fields
            .iter()
            .map(|g| r.axes.get(g).cloned().unwrap_or_default())
            .collect();
        groups.entry(key).or_default().push(r);
    }
    // Groups in grid order (first row's point), not string order.
    let mut ordered: Vec<(Vec<String>, Vec<&Row>)> = groups.into_iter().collect();
    ordered.sort_by_key(|(_, rows)| rows[0].point);
    let family = |s: &str| s.split(':').next().unwrap_or(s).to_string();
    let ms = |r: &Row| r.metrics.as_ref().map_or(f64::INFINITY, |m| m.makespan_us);
    let mut lines: Vec<[String; 5]> = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    for (key, rows) in &ordered {
        let group = if group_fields.is_empty() {
            "(all)".to_string()
        } else {
            group_fields
                .iter()
                .zip(key)
                .map(|(g, v)| format!("{}={v}", grid::short_key(g)))
                .collect::<Vec<_>>()
                .join(" ")
        };
        // Points of different global batches do different work: rank them by time per
        // token (tokens/s), not by makespan, and say so.
        let batches: std::collections::BTreeSet<u64> = rows
            .iter()
            .filter_map(|r| r.inputs.as_ref().map(|i| i.global_batch))
            .collect();
        let mixed = batches.len() > 1;
        let sizes = batches
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        match rank_by {
            _ if !mixed => {}
            None => notes.push(format!(
                "note: group {group} mixes global batches ({sizes} sequences per step): ranked by tokens/s, not makespan"
            )),
            Some(by) if per_step(&by.0) => notes.push(format!(
                "note: group {group} mixes global batches ({sizes} sequences per step): ranked by {} as asked, a per-step figure that compares steps of different work (tokens_per_s compares them by work done)",
                by.0
            )),
            Some(by) => notes.push(format!(
                "note: group {group} mixes global batches ({sizes} sequences per step): ranked by {}",
                by.0
            )),
        }
        // The ranking key (smaller is better): the figure asked for, else makespan, or
        // time per token where batches differ.
        let key = |r: &Row| match (rank_by, r.metrics.as_ref()) {
            (_, None) => f64::INFINITY,
            (Some(by), Some(m)) => by.key(m),
            (None, Some(m)) if mixed => 1.0 / m.tokens_per_s,
            (None, Some(m)) => m.makespan_us,
        };
        let best = rows
            .iter()
            .min_by(|a, b| key(a).total_cmp(&key(b)).then(a.point.cmp(&b.point)))
            .expect("groups are not empty");
        let mut fams: Vec<(String, &Row)> = Vec::new();
        for r in rows {
            let fam = family(&r.strategy);
            match fams.iter_mut().find(|(f, _)| *f == fam) {
                Some((_, b)) if key(r) < key(b) => *b = r,
                Some(_) => {}
                None => fams.push((fam, r)),
            }
        }
        fams.sort_by(|a, b| {
            key(a.1)
                .total_cmp(&key(b.1))
                .then(a.1.point.cmp(&b.1.point))
        });
        for (i, (fam, r)) in fams.iter().enumerate() {
            let mut cfg: Vec<String> = config_fields
                .iter()
                .filter(|k| **k != "strategy")
                .map(|k| {
                    format!(
                        "{}={}",
                        grid::short_key(k),
                        r.axes.get(*k).map_or("", |v| v)
                    )
                })
                .collect();
            cfg.push(r.strategy.clone());
            // How much worse than the best, in percent of the best.
            let gap = match rank_by.zip(r.metrics.as_ref()).zip(best.metrics.as_ref()) {
                Some(((by, m), b)) => {
                    let (x, y) = (
                        m.get(&by.0).unwrap_or(f64::NAN),
                        b.get(&by.0).unwrap_or(f64::NAN),
                    );
                    if report::higher_is_better(&by.0) {
                        (y / x - 1.0) * 100.0
                    } else {
                        (x / y - 1.0) * 100.0
                    }
                }
                None => (key(r) / key(best) - 1.0) * 100.0,
            };
            lines.push([
                if i == 0 { group.clone() } else { String::new() },
                fam.clone(),
                cfg.join(" "),
                match rank_by {
                    Some(by) => r
                        .metrics
                        .as_ref()
                        .and_then(|m| m.get(&by.0))
                        .map_or("-".into(), |x| format!("{x:.1}")),
                    None => format!("{:.1}", ms(r)),
                },
                if i == 0 {
                    "best".into()
                } else if gap.is_finite() {
                    format!("+{gap:.1}%")
                } else {
                    "-".into()
                },
            ]);
        }
    }
    let header = [
        "group",
        "strategy",
        "best configuration",
        rank_by.map_or("makespan_us", |by| by.0.as_str()),
        "gap",
    ];
    let mut width = header.map(str::len);
    for l in &lines {
        for (w, c) in width.iter_mut().zip(l) {
            *w = (*w).max(c.chars().count());
        }
    }
    let fmt = |cells: [&str; 5]| {
        let mut s = String::new();
        for (k, (c, w)) in cells.iter().zip(width).enumerate() {
            let pad = w - c.chars().count();
            if k == 3 || k == 4 {
                s.push_str(&" ".repeat(pad));
                s.push_str(c);
            } else {
                s.push_str(c);
                if k < 4 {
                    s.push_str(&" ".repeat(pad));
                }
            }
            if k < 4 {
                s.push_str("  ");
            }
        }
        s.trim_end().to_string() + "\n"
    };
    let rows_done = f.rows.len();
    let mut out = format!(
        "sweep of {}: {} rows{} ({} points x {} strategies in the grid){}\n",
        f.grid.scenario,
        rows_done,
        f.shard.map_or(String::new(), |s| format!(" of shard {s}")),
        f.rows_total / f.grid.strategies.len().max(1) as u64,
        f.grid.strategies.len(),
        if failed > 0 {
            format!("; {failed} rows failed (see the error column)")
        } else {
            String::new()
        }
    );
    out.push_str(&fmt(header));
    for l in &lines {
        out.push_str(&fmt([&l[0], &l[1], &l[2], &l[3], &l[4]]));
    }
    for n in &notes {
        out.push_str(n);
        out.push('\n');
    }
    out
}

/// Join shards' outputs into the file one run of the whole grid would have written.
pub fn merge(files: Vec<(String, SweepFile)>) -> Result<SweepFile, String> {
    let Some((first_name, first)) = files.first() else {
        return Err("nothing to merge".into());
    };
    let mut seen: BTreeMap<u64, &str> = BTreeMap::new();
    let mut rows = Vec::new();
    for (name, f) in &files {
        if f.grid != first.grid || f.rows_total != first.rows_total {
            return Err(format!(
                "{name} is a sweep of another grid than {first_name}; only shards of one sweep merge"
            ));
        }
        for r in &f.rows {
            if let Some(other) = seen.insert(r.point, name) {
                return Err(format!("row {} is in both {other} and {name}", r.point));
            }
            rows.push(r.clone());
        }
    }
    if rows.len() as u64 != first.rows_total {
        let missing: Vec<String> = (0..first.rows_total)
            .filter(|p| !seen.contains_key(p))
            .take(5)
            .map(|p| p.to_string())
            .collect();
        return Err(format!(
            "the shards hold {} of {} rows; missing rows include {} (a shard is absent or unfinished)",
            rows.len(),
            first.rows_total,
            missing.join(", ")
        ));
    }
    Ok(SweepFile::new(&first.grid, first.rows_total, None, rows))
}
