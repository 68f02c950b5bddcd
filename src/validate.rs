//! Predicted against measured: the two timelines of the same plan, joined on op id.

use crate::plan::OpClass;
use crate::timeline::metrics::metrics;
use crate::timeline::{Lane, Timeline};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ValidateError {
    #[error(
        "the timelines are of different plans: predicted has {predicted} op spans, measured {measured}"
    )]
    OpCount { predicted: usize, measured: usize },
    #[error("op {op} is a {predicted} in the prediction but a {measured} in the measurement")]
    OpKind {
        op: u32,
        predicted: &'static str,
        measured: &'static str,
    },
}

/// One op class: summed busy time and the per-op error distribution.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ClassRow {
    pub class: &'static str,
    pub ops: usize,
    pub predicted_us: f64,
    pub measured_us: f64,
    pub error_pct: f64,
    /// Median over ops of |predicted − measured| / measured.
    pub median_abs_op_error_pct: f64,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Comparison {
    pub scenario: String,
    pub strategy: String,
    pub predicted_makespan_us: f64,
    pub measured_makespan_us: f64,
    pub makespan_error_pct: f64,
    pub classes: Vec<ClassRow>,
    /// Measured makespan over the sum of the measured compute-stream op durations, minus
    /// one: idle gaps on the busiest compute stream (executor overhead when it runs alone).
    pub compute_gap_pct: f64,
    /// Spread of the measured makespan over the run's repetitions: (p90 − p10) / median,
    /// when the run recorded them.
    pub measured_spread_pct: Option<f64>,
    /// Measured makespan over the same kernels run back to back (no per-op events or
    /// waits), minus one, when the run timed that baseline (one rank on one GPU).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub executor_overhead_pct: Option<f64>,
}

/// (p90 − p10) / median of `v` in percent (nearest rank); `None` for fewer than 2.
pub fn spread_pct(v: &[f64]) -> Option<f64> {
    if v.len() < 2 {
        return None;
    }
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((q * (v.len() - 1) as f64).round() as usize).min(v.len() - 1)];
    let med = at(0.5);
    (med > 0.0).then(|| (at(0.9) - at(0.1)) / med * 100.0)
}

fn stream_spans(t: &Timeline) -> Vec<&crate::timeline::Span> {
    let mut v: Vec<_> = t
        .spans
        .iter()
        .filter(|s| matches!(s.lane, Lane::Stream(_)))
        .collect();
    v.sort_by_key(|s| s.op);
    v
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

pub fn compare(predicted: &Timeline, measured: &Timeline) -> Result<Comparison, ValidateError> {
    let (p, m) = (stream_spans(predicted), stream_spans(measured));
    if p.len() != m.len() {
        return Err(ValidateError::OpCount {
            predicted: p.len(),
            measured: m.len(),
        });
    }
    for (a, b) in p.iter().zip(&m) {
        if a.op != b.op || a.class != b.class {
            return Err(ValidateError::OpKind {
                op: a.op,
                predicted: a.class.name(),
                measured: b.class.name(),
            });
        }
    }
    let mut classes = Vec::new();
    for c in OpClass::ALL {
        let pairs: Vec<(f64, f64)> = p
            .iter()
            .zip(&m)
            .filter(|(a, _)| a.class == c)
            .map(|(a, b)| (a.end - a.start, b.end - b.start))
            .collect();
        if pairs.is_empty() {
            continue;
        }
        let (ps, ms): (f64, f64) = pairs
            .iter()
            .fold((0.0, 0.0), |(x, y), (a, b)| (x + a, y + b));
        let errs = pairs
            .iter()
            .filter(|(_, b)| *b > 0.0)
            .map(|(a, b)| ((a - b) / b).abs() * 100.0)
            .collect();
        classes.push(ClassRow {
            class: c.name(),
            ops: pairs.len(),
            predicted_us: ps * 1e6,
            measured_us: ms * 1e6,
            error_pct: if ms > 0.0 {
                (ps - ms) / ms * 100.0
            } else {
                0.0
            },
            median_abs_op_error_pct: median(errs),
        });
    }
    let (pm, mm) = (metrics(predicted), metrics(measured));
    let mut busy = std::collections::BTreeMap::<u32, f64>::new();
    for s in &m {
        if let Lane::Stream(st) = s.lane
            && measured.streams[st as usize].kind == crate::plan::StreamKind::Compute
        {
            *busy.entry(st).or_default() += s.end - s.start;
        }
    }
    let max_busy = busy.values().cloned().fold(0.0, f64::max);
    Ok(Comparison {
        scenario: measured.scenario.clone(),
        strategy: measured.strategy.clone(),
        predicted_makespan_us: pm.makespan * 1e6,
        measured_makespan_us: mm.makespan * 1e6,
        makespan_error_pct: if mm.makespan > 0.0 {
            (pm.makespan - mm.makespan) / mm.makespan * 100.0
        } else {
            0.0
        },
        classes,
        compute_gap_pct: if max_busy > 0.0 {
            (mm.makespan / max_busy - 1.0) * 100.0
        } else {
            0.0
        },
        measured_spread_pct: None,
        executor_overhead_pct: None,
    })
}

/// Median and worst absolute makespan error, and the median of the per-op medians, over
/// several comparisons.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Summary {
    pub cases: usize,
    pub median_abs_makespan_error_pct: f64,
    pub worst_abs_makespan_error_pct: f64,
    pub median_per_op_error_pct: f64,
    /// Median over the cases that recorded repetitions of their measured spread.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub median_measured_spread_pct: Option<f64>,
    /// Median and worst executor overhead over the cases that timed the back-to-back
    /// baseline.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub median_executor_overhead_pct: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worst_executor_overhead_pct: Option<f64>,
}

pub fn summarize(cs: &[Comparison]) -> Summary {
    let overhead: Vec<f64> = cs.iter().filter_map(|c| c.executor_overhead_pct).collect();
    let errs: Vec<f64> = cs.iter().map(|c| c.makespan_error_pct.abs()).collect();
    let ops: Vec<f64> = cs
        .iter()
        .flat_map(|c| c.classes.iter().map(|r| r.median_abs_op_error_pct))
        .collect();
    Summary {
        cases: cs.len(),
        median_abs_makespan_error_pct: median(errs.clone()),
        worst_abs_makespan_error_pct: errs.iter().cloned().fold(0.0, f64::max),
        median_per_op_error_pct: median(ops),
        median_measured_spread_pct: {
            let v: Vec<f64> = cs.iter().filter_map(|c| c.measured_spread_pct).collect();
            (!v.is_empty()).then(|| median(v))
        },
        median_executor_overhead_pct: (!overhead.is_empty()).then(|| median(overhead.clone())),
        worst_executor_overhead_pct: overhead.iter().cloned().reduce(f64::max),
    }
}

/// The comparisons as a table.
pub fn table(cs: &[Comparison]) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<40} {:<12} {:>14} {:>13} {:>9} {:>9}  per-op median |err| by class",
        "case", "strategy", "predicted_us", "measured_us", "error_%", "spread_%"
    );
    for c in cs {
        let per: Vec<String> = c
            .classes
            .iter()
            .map(|r| format!("{} {:.1}%", r.class, r.median_abs_op_error_pct))
            .collect();
        let spread = c
            .measured_spread_pct
            .map_or_else(|| "-".to_string(), |x| format!("{x:.2}"));
        let _ = writeln!(
            s,
            "{:<40} {:<12} {:>14.1} {:>13.1} {:>9.2} {:>9}  {}",
            c.scenario,
            c.strategy,
            c.predicted_makespan_us,
            c.measured_makespan_us,
            c.makespan_error_pct,
            spread,
            per.join(", ")
        );
    }
    let sm = summarize(cs);
    let _ = writeln!(
        s,
        "{} cases: median |makespan error| {:.2}%, worst {:.2}%, median per-op |error| {:.2}%",
        sm.cases,
        sm.median_abs_makespan_error_pct,
        sm.worst_abs_makespan_error_pct,
        sm.median_per_op_error_pct
    );
    if let Some(x) = sm.median_measured_spread_pct {
        let _ = writeln!(
            s,
            "measured makespans over each run's repetitions: median spread (p90 - p10) {x:.2}%"
        );
    }
    if let (Some(m), Some(w)) = (
        sm.median_executor_overhead_pct,
        sm.worst_executor_overhead_pct,
    ) {
        let _ = writeln!(
            s,
            "executor overhead against the same kernels back to back: median {m:.2}%, worst {w:.2}%"
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::sim::{SimOptions, simulate};

    fn timeline(scale: f64) -> Timeline {
        let sc = crate::config::load_scenario("default").unwrap();
        let plan =
            crate::strategy::build(&sc, sc.workload, crate::scenario::Strategy::Flash).unwrap();
        let r = simulate(&plan, &sc.hardware, &SimOptions::default()).unwrap();
        let times: Vec<(f64, f64)> = r
            .times
            .iter()
            .map(|t| (t.start * scale, t.end * scale))
            .collect();
        Timeline::measured(&sc.name, "flash", &plan, &times, 1.0)
    }

    #[test]
    fn identical_timelines_have_no_error_and_scaled_ones_the_scale() {
        let c = compare(&timeline(1.0), &timeline(1.0)).unwrap();
        assert_eq!(c.makespan_error_pct, 0.0);
        assert!(c.classes.iter().all(|r| r.median_abs_op_error_pct == 0.0));
        let c = compare(&timeline(1.0), &timeline(1.25)).unwrap();
        // Predicted is 1/1.25 of measured: −20%.
        assert!(
            (c.makespan_error_pct + 20.0).abs() < 1e-9,
            "{}",
            c.makespan_error_pct
        );
        assert!(
            c.classes
                .iter()
                .all(|r| (r.median_abs_op_error_pct - 20.0).abs() < 1e-9)
        );
    }

    #[test]
    fn spreads_are_the_p10_to_p90_width_over_the_median() {
        assert_eq!(spread_pct(&[1.0]), None);
        let v: Vec<f64> = (1..=11).map(f64::from).collect();
        // p10 = 2, p90 = 10, median 6.
        assert!((spread_pct(&v).unwrap() - 8.0 / 6.0 * 100.0).abs() < 1e-9);
        assert_eq!(spread_pct(&[5.0, 5.0, 5.0]), Some(0.0));
    }

    #[test]
    fn timelines_of_different_plans_are_refused() {
        let a = timeline(1.0);
        let mut b = a.clone();
        b.spans.pop();
        assert!(compare(&a, &b).is_err());
    }
}
