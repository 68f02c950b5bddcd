//! `flashoverlap validate DIR...`: predicted against measured for the runs that
//! `flashoverlap run --out DIR` recorded — per op class and overall makespan — as a table
//! or JSON. With `--hardware` the plans are predicted again with that profile (say, a
//! freshly calibrated one); otherwise the predictions saved beside the measurements are
//! used. Needs no GPU.

use super::simulate::Format;
use super::{CliError, run::RunFile, run::plan_for, run::stem};
use crate::config;
use crate::exec::sim::{SimOptions, simulate};
use crate::io::write_atomic;
use crate::plan::StandIn;
use crate::timeline::Timeline;
use crate::timeline::file::TimelineFile;
use crate::validate::{Comparison, compare, summarize, table};
use std::path::{Path, PathBuf};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Output directories of `flashoverlap run --out`.
    #[arg(required = true)]
    pub dirs: Vec<PathBuf>,
    /// Predict again with this hardware profile instead of using the saved predictions.
    #[arg(long)]
    pub hardware: Option<String>,
    /// With `--hardware`: predict without the interference model (to see what it adds).
    #[arg(long, requires = "hardware")]
    pub no_interference: bool,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Also write the JSON to this file.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// With `--hardware`: write the new predictions as DIR/<case>/predicted-<strategy>.json
    /// (the run's schema, to plot beside its measured-*.json).
    #[arg(long, requires = "hardware", value_name = "DIR")]
    pub timelines: Option<PathBuf>,
    #[arg(long)]
    pub force: bool,
}

fn read_timeline(path: &Path) -> Result<Timeline, CliError> {
    let text = crate::io::read_text(path, crate::io::MAX_DATA_BYTES)
        .map_err(|e| CliError::input(format!("{}: {e}", path.display())))?;
    let f: TimelineFile = serde_json::from_str(&text)
        .map_err(|e| CliError::input(format!("{}: {e}", path.display())))?;
    Timeline::try_from(f).map_err(|e| CliError::input(format!("{}: {e}", path.display())))
}

/// The comparisons of one run directory.
pub fn compare_dir(
    dir: &Path,
    hardware: Option<&str>,
    interference: bool,
    timelines: Option<(&Path, bool)>,
) -> Result<Vec<Comparison>, CliError> {
    let rf_path = dir.join("run.json");
    let text = std::fs::read_to_string(&rf_path)
        .map_err(|e| CliError::input(format!("{}: {e}", rf_path.display())))?;
    let rf: RunFile = serde_json::from_str(&text)
        .map_err(|e| CliError::input(format!("{}: {e}", rf_path.display())))?;
    let case = dir.file_name().map_or_else(
        || dir.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let mut out = Vec::new();
    if !rf.comparable {
        eprintln!(
            "{}: skipped (its ranks shared GPUs, so its times are not comparable with a \
             prediction)",
            dir.display()
        );
        return Ok(out);
    }
    let mut file = rf.scenario.clone();
    file.transport = rf.transport.clone();
    file.interference = interference;
    if let Some(h) = hardware {
        file.hardware = h.to_string();
    }
    let sc = if hardware.is_some() {
        Some(
            config::scenario_from_file(
                &rf_path.display().to_string(),
                None,
                file,
                &Default::default(),
            )
            .map_err(CliError::input)?,
        )
    } else {
        None
    };
    let emulate = match (rf.emulate_rank, rf.stand_in.as_deref()) {
        (Some(r), Some(s)) => Some((
            r,
            StandIn::parse(s).ok_or_else(|| {
                CliError::input(format!(
                    "{}: stand_in `{s}` is not one of none, copy",
                    rf_path.display()
                ))
            })?,
        )),
        _ => None,
    };
    // Each strategy's repeated makespans and back-to-back baseline, when the run
    // recorded them (results.json).
    let results: Vec<serde_json::Value> = std::fs::read_to_string(dir.join("results.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| v.get("results").and_then(|r| r.as_array()).cloned())
        .unwrap_or_default();
    let repeats: std::collections::BTreeMap<String, Vec<f64>> = results
        .iter()
        .filter_map(|r| {
            let s = r.get("strategy")?.as_str()?.to_string();
            let v = r.get("repeat_makespans_us")?.as_array()?;
            Some((s, v.iter().filter_map(|x| x.as_f64()).collect()))
        })
        .collect();
    let back_to_back: std::collections::BTreeMap<String, f64> = results
        .iter()
        .filter_map(|r| {
            let s = r.get("strategy")?.as_str()?.to_string();
            Some((s, r.get("back_to_back_us")?.as_f64()?))
        })
        .collect();
    for name in &rf.scenario.strategies {
        let strategy = crate::scenario::Strategy::parse(name).map_err(CliError::input)?;
        let label = strategy.to_string();
        let mut measured = read_timeline(&dir.join(format!("measured-{}.json", stem(&label))))?;
        measured.scenario = case.clone();
        let mut predicted = match &sc {
            Some(sc) => {
                let plan = plan_for(sc, strategy, emulate)?;
                let opts = SimOptions::default().for_scenario(sc);
                let hw = crate::exec::gpu::as_executed(&sc.hardware);
                let r = simulate(&plan, &hw, &opts).map_err(CliError::run)?;
                let peak = sc.hardware.gpu.peak(sc.dtype).unwrap_or(0.0);
                let t = Timeline::predicted(&case, &label, &plan, &sc.hardware.topology, &r, peak);
                if let Some((root, force)) = timelines {
                    let d = root.join(&case);
                    std::fs::create_dir_all(&d)
                        .map_err(|e| CliError::output(format!("{}: {e}", d.display())))?;
                    let p = d.join(format!("predicted-{}.json", stem(&label)));
                    write_atomic(&p, super::run::timeline_json(&t).as_bytes(), force)
                        .map_err(CliError::output)?;
                }
                t
            }
            None => read_timeline(&dir.join(format!("predicted-{}.json", stem(&label))))?,
        };
        predicted.scenario = case.clone();
        let mut c = compare(&predicted, &measured).map_err(CliError::input)?;
        c.measured_spread_pct = repeats
            .get(&label)
            .and_then(|v| crate::validate::spread_pct(v));
        c.executor_overhead_pct = back_to_back
            .get(&label)
            .filter(|b| **b > 0.0)
            .map(|b| (c.measured_makespan_us / b - 1.0) * 100.0);
        out.push(c);
    }
    Ok(out)
}

pub fn run(a: Args) -> Result<(), CliError> {
    let mut all = Vec::new();
    for d in &a.dirs {
        let tl = a.timelines.as_deref().map(|p| (p, a.force));
        all.extend(compare_dir(
            d,
            a.hardware.as_deref(),
            !a.no_interference,
            tl,
        )?);
    }
    let mut json = serde_json::to_string_pretty(&serde_json::json!({
        "version": 1,
        "hardware": a.hardware,
        "summary": summarize(&all),
        "cases": all,
    }))
    .expect("comparison serializes");
    json.push('\n');
    if let Some(p) = &a.out {
        write_atomic(p, json.as_bytes(), a.force).map_err(CliError::output)?;
    }
    match a.format {
        Format::Table => super::stdout(&table(&all))?,
        Format::Json => super::stdout(&json)?,
    }
    Ok(())
}
