//! What-if sweeps: a grid of scenario points, each simulated exactly as `simulate` would,
//! in parallel, with the results as rows (CSV and JSON), a summary of the best
//! configuration per group, resumable runs and shards that merge into the file one run
//! would have written.
//!
//! Determinism: a row depends only on its point (the simulator is deterministic and each
//! point is simulated on its own), and rows are written sorted by point index, so the
//! output is byte-identical whatever the thread count, the order points finished in,
//! interruptions and resumes, or the sharding.

pub mod grid;
pub mod output;

pub use grid::{Grid, GridSpec};
pub use output::{SweepFile, check_group_by, csv, json, merge, summary};

use crate::exec::sim::SimOptions;
use crate::report;
use crate::scenario::Scenario;
use serde::{Deserialize, Serialize};

pub const FORMAT: &str = "flashoverlap-sweep";
pub const VERSION: u32 = 1;

#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    #[error("{what}: {reason}")]
    Input { what: String, reason: String },
    #[error("point {point} ({at}): {reason}")]
    Point {
        point: u64,
        at: String,
        reason: String,
    },
}

/// Every N-th scenario point, starting at I (`--shard I/N`, 0 ≤ I < N).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    pub index: u64,
    pub count: u64,
}

impl Shard {
    pub fn parse(s: &str) -> Result<Shard, String> {
        let bad = || format!("shard `{s}`: expected I/N with 0 ≤ I < N, e.g. 0/4");
        let (i, n) = s.split_once('/').ok_or_else(bad)?;
        let index: u64 = i.trim().parse().map_err(|_| bad())?;
        let count: u64 = n.trim().parse().map_err(|_| bad())?;
        if count == 0 || index >= count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }

    pub fn holds(&self, point: u64) -> bool {
        point % self.count == self.index
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// The figures of one row: `simulate --format json`'s, under the same names and
/// rounding ([`report::Figures`]).
pub type RowMetrics = report::Figures;

/// The resolved inputs of a scenario point (what the scenario *is*, after presets).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RowInputs {
    pub workload: String,
    pub model: String,
    pub hardware: String,
    pub gpus: u64,
    pub ranks: u64,
    pub tp: u64,
    pub dp: u64,
    pub ulysses: u64,
    pub batch: u64,
    pub seq: u64,
    pub tokens: u64,
    pub dtype: String,
    pub transport: String,
    /// Interference modelled (asked for and the profile has parameters).
    pub interference: bool,
    /// Pipeline stages.
    #[serde(default = "one")]
    pub pp: u64,
    /// Micro-batches per step (1 but for steps).
    #[serde(default = "one")]
    pub micro_batches: u64,
    /// Sequences per step over every replica: batch × micro-batches × dp.
    #[serde(default)]
    pub global_batch: u64,
    /// Memory per GPU at the peak, GiB (layers and steps).
    #[serde(default)]
    pub memory_gib: Option<f64>,
    /// Whether that fits the GPUs' memory (true when unknown).
    #[serde(default = "yes")]
    pub fits: bool,
}

fn one() -> u64 {
    1
}

fn yes() -> bool {
    true
}

impl RowInputs {
    fn of(sc: &Scenario) -> RowInputs {
        let s = report::summary(sc);
        let mbs = if sc.workload == crate::scenario::Workload::Step {
            sc.micro_batches
        } else {
            1
        };
        RowInputs {
            workload: s.workload,
            model: s.model,
            hardware: s.hardware,
            gpus: sc.hardware.topology.gpu_count() as u64,
            ranks: sc.parallel.world(),
            tp: s.tp,
            dp: sc.parallel.dp,
            ulysses: sc.parallel.ulysses,
            batch: s.batch,
            seq: s.seq,
            tokens: s.tokens,
            dtype: s.dtype,
            transport: s.transport,
            interference: s.interference,
            pp: sc.parallel.pp,
            micro_batches: mbs,
            global_batch: sc.batch * mbs * sc.parallel.dp,
            memory_gib: s.memory.as_ref().map(|m| m.peak_gib),
            fits: s.memory.as_ref().is_none_or(|m| m.fits),
        }
    }
}

/// One row: one strategy at one scenario point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// Row index: scenario point × strategies + strategy index.
    pub point: u64,
    /// `field → value` of every swept axis at this point.
    pub axes: std::collections::BTreeMap<String, String>,
    /// `None` when the point's scenario was invalid (`--skip-invalid`).
    pub inputs: Option<RowInputs>,
    pub strategy: String,
    pub metrics: Option<RowMetrics>,
    /// Why this row has no metrics.
    pub error: Option<String>,
}

/// How points are run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub max_events: u64,
    /// Record invalid points and failed runs as rows with an error instead of stopping.
    pub skip_invalid: bool,
    /// Simulate points that do not fit in their GPUs' memory (else their rows say so and
    /// carry no figures).
    pub allow_oom: bool,
}

/// Simulate scenario point `p` of `grid` under every strategy: the rows
/// `p·S … p·S + S − 1`. A point whose scenario is invalid or whose run fails is an error,
/// or (with `skip_invalid`) rows carrying the error.
pub fn run_point(grid: &Grid, p: u64, opts: &RunOptions) -> Result<Vec<Row>, SweepError> {
    let described = grid.describe(p);
    let axes: std::collections::BTreeMap<String, String> = described.iter().cloned().collect();
    let s = grid.strategies.len() as u64;
    // The point's rows, each carrying `reason` and no figures.
    let error_rows = |reason: String, inputs: Option<RowInputs>| -> Vec<Row> {
        grid.strategies
            .iter()
            .enumerate()
            .map(|(k, st)| Row {
                point: p * s + k as u64,
                axes: axes.clone(),
                inputs: inputs.clone(),
                strategy: st.to_string(),
                metrics: None,
                error: Some(reason.clone()),
            })
            .collect()
    };
    let fail = |reason: String, inputs: Option<RowInputs>| -> Result<Vec<Row>, SweepError> {
        if !opts.skip_invalid {
            return Err(SweepError::Point {
                point: p,
                at: at(&described),
                reason,
            });
        }
        Ok(error_rows(reason, inputs))
    };
    let sc = match grid.scenario(p) {
        Ok(sc) => sc,
        Err(e) => return fail(e, None),
    };
    let inputs = RowInputs::of(&sc);
    // A layout that does not fit is a finding, not a failure: its rows say so.
    if !opts.allow_oom
        && let Err(e) = crate::memory::check(&sc)
    {
        return Ok(error_rows(e.to_string(), Some(inputs)));
    }
    let sim = SimOptions {
        record_links: false,
        max_events: opts.max_events,
        ..SimOptions::default()
    };
    // Each strategy on its own (as `simulate::run_scenario` does), so one failing
    // strategy leaves the others' rows.
    let mut runs = Vec::with_capacity(grid.strategies.len());
    let mut errors: Vec<(usize, String)> = Vec::new();
    for (k, &st) in grid.strategies.iter().enumerate() {
        match crate::simulate::run_strategy(&sc, st, &sim) {
            Ok(r) => runs.push((k, r)),
            Err(e) => errors.push((k, e.to_string())),
        }
    }
    if let Some((_, e)) = errors.first()
        && !opts.skip_invalid
    {
        return fail(e.clone(), Some(inputs));
    }
    let (index, runs): (Vec<usize>, Vec<_>) = runs.into_iter().unzip();
    // The same baseline as `simulate` (bit for bit).
    let sequential = match crate::simulate::baseline(&sc, &runs, &sim) {
        Ok(t) => t,
        Err(e) => return fail(format!("the sequential baseline: {e}"), Some(inputs)),
    };
    let run = crate::simulate::ScenarioRun {
        runs,
        sequential_makespan: sequential,
        sampling: None,
    };
    let mut rows: Vec<Row> = grid
        .strategies
        .iter()
        .enumerate()
        .map(|(k, st)| Row {
            point: p * s + k as u64,
            axes: axes.clone(),
            inputs: Some(inputs.clone()),
            strategy: st.to_string(),
            metrics: None,
            error: errors.iter().find(|(j, _)| *j == k).map(|(_, e)| e.clone()),
        })
        .collect();
    for (k, f) in index.into_iter().zip(report::figures(&sc, &run)) {
        rows[k].metrics = Some(f);
    }
    Ok(rows)
}

/// `a=1, b=2` (or `base scenario` for a grid without axes).
pub fn at(axes: &[(String, String)]) -> String {
    if axes.is_empty() {
        return "base scenario".into();
    }
    axes.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_partition_the_points() {
        let s: Vec<Shard> = (0..3)
            .map(|i| Shard::parse(&format!("{i}/3")).unwrap())
            .collect();
        for p in 0..30 {
            assert_eq!(s.iter().filter(|sh| sh.holds(p)).count(), 1);
        }
        for bad in ["3/3", "1/0", "x/2", "1", "-1/2"] {
            assert!(Shard::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_point_row_equals_the_scenario_run_of_simulate() {
        let spec = GridSpec {
            scenario: "default".into(),
            dir: None,
            axes: vec![("tp".into(), vec!["2,8".into()])],
        };
        let g = Grid::new(&spec).unwrap();
        let opts = RunOptions {
            max_events: 1 << 30,
            skip_invalid: false,
            allow_oom: false,
        };
        let rows = run_point(&g, 1, &opts).unwrap();
        let sc = g.scenario(1).unwrap();
        let run = crate::simulate::run_scenario(&sc, &SimOptions::default()).unwrap();
        let want: Vec<RowMetrics> = report::rows(&sc, &run)
            .iter()
            .map(|r| r.figures.clone())
            .collect();
        let got: Vec<RowMetrics> = rows.iter().map(|r| r.metrics.clone().unwrap()).collect();
        assert_eq!(got, want);
        assert_eq!(rows[0].point, 3);
        assert_eq!(rows[0].inputs.as_ref().unwrap().tp, 8);
    }

    #[test]
    fn invalid_points_stop_the_sweep_or_become_error_rows() {
        let spec = GridSpec {
            scenario: "default".into(),
            dir: None,
            axes: vec![("tp".into(), vec!["3".into()])],
        };
        let g = Grid::new(&spec).unwrap();
        let mut opts = RunOptions {
            max_events: 1 << 30,
            skip_invalid: false,
            allow_oom: false,
        };
        let e = run_point(&g, 0, &opts).unwrap_err().to_string();
        assert!(e.contains("point 0 (parallel.tp=3)"), "{e}");
        opts.skip_invalid = true;
        let rows = run_point(&g, 0, &opts).unwrap();
        assert_eq!(rows.len(), g.strategies.len());
        assert!(
            rows.iter()
                .all(|r| r.metrics.is_none() && r.error.is_some())
        );
    }
}
