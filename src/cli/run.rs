//! `flashoverlap run --backend cuda`: run a scenario's strategies on the GPUs present and
//! write measured timelines (and the predicted ones of the same plans) in one schema.

use super::{CliError, simulate};
use crate::exec::gpu::{self, GpuOptions, Transport};
use crate::exec::sim::{self, SimOptions};
use crate::io::write_atomic;
use crate::plan::{Plan, StandIn, emulate_rank};
use crate::scenario::Scenario;
use crate::timeline::Timeline;
use crate::timeline::file::TimelineFile;
use crate::timeline::metrics::metrics;
use crate::{strategy, trace};
use std::fmt::Write as _;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    Cuda,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub sim: simulate::Args,
    /// Executor.
    #[arg(long, value_enum, default_value_t = Backend::Cuda)]
    pub backend: Backend,
    /// Run only this rank's program (what one GPU can run of a multi-rank schedule),
    /// with each transfer replaced as `--stand-in` says.
    #[arg(long)]
    pub emulate_rank: Option<u32>,
    /// What replaces a transfer under `--emulate-rank`: `none` or `copy` (a local copy
    /// of the same size on the same stream).
    #[arg(long, default_value = "none")]
    pub stand_in: String,
    /// GPUs to spread the ranks over (default: all visible, at most one per rank).
    #[arg(long)]
    pub devices: Option<u32>,
    /// Untimed runs before the timed ones.
    #[arg(long, default_value_t = 3)]
    pub warmup: u32,
    /// Timed runs; the one with the median makespan is reported.
    #[arg(long, default_value_t = 10)]
    pub repeats: u32,
    /// Skip the comparison of every rank's result with the reference.
    #[arg(long)]
    pub no_check: bool,
    /// How transfers move: `copy` (copy engines: the receiver pulls the region; any
    /// number of ranks per GPU) or `nccl` (NCCL send/recv, one GPU per rank; under
    /// `--emulate-rank` with `--stand-in copy`, the stand-in copies are NCCL sends to self).
    #[arg(long, default_value = "copy")]
    pub transport: String,
    /// Abort a run that has not finished after this many seconds and name the op that
    /// waited (0: no watchdog).
    #[arg(long, default_value_t = 60.0)]
    pub watchdog_s: f64,
}

/// What a run executed, so `validate` can predict it again (with another profile).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct RunFile {
    pub scenario: crate::config::files::ScenarioFile,
    pub emulate_rank: Option<u32>,
    pub stand_in: Option<String>,
    #[serde(default = "copy_transport")]
    pub transport: String,
}

fn copy_transport() -> String {
    "copy".into()
}

/// One strategy measured, with its prediction.
pub struct Measured {
    pub strategy: String,
    pub measured: Timeline,
    pub predicted: Timeline,
    pub rel_error: Option<f64>,
    pub makespans: Vec<f64>,
    /// One GPU per rank, so the measured timeline is comparable with the prediction
    /// (ranks sharing a GPU serialize what the prediction runs in parallel).
    pub comparable: bool,
}

/// The plan a run executes: the strategy's, or one rank of it.
pub fn plan_for(
    sc: &Scenario,
    s: crate::scenario::Strategy,
    emulate: Option<(u32, StandIn)>,
) -> Result<Plan, CliError> {
    let plan = strategy::build(sc, sc.workload, s).map_err(CliError::run)?;
    match emulate {
        Some((r, si)) => emulate_rank(&plan, r, si).map_err(CliError::input),
        None => Ok(plan),
    }
}

pub fn measure(
    sc: &Scenario,
    emulate: Option<(u32, StandIn)>,
    opts: &GpuOptions,
) -> Result<Vec<Measured>, CliError> {
    let peak = sc.hardware.gpu.peak(sc.dtype).unwrap_or(0.0);
    let mut out = Vec::new();
    for &s in &sc.strategies {
        let name = s.to_string();
        let plan = plan_for(sc, s, emulate)?;
        let mut o = opts.clone();
        if emulate.is_some() {
            o.check = None;
        }
        let r = gpu::run(&plan, &o).map_err(CliError::run)?;
        let res =
            sim::simulate(&plan, &sc.hardware, &SimOptions::default()).map_err(CliError::run)?;
        let predicted =
            Timeline::predicted(&sc.name, &name, &plan, &sc.hardware.topology, &res, peak);
        let measured = Timeline::measured(&sc.name, &name, &plan, &r.times, peak);
        eprintln!(
            "{name}: measured {:.1} µs (runs {:.1}..{:.1} µs) on {}",
            metrics(&measured).makespan * 1e6,
            r.makespans.iter().cloned().fold(f64::INFINITY, f64::min) * 1e6,
            r.makespans.iter().cloned().fold(0.0, f64::max) * 1e6,
            r.devices.join(", ")
        );
        out.push(Measured {
            strategy: name,
            measured,
            predicted,
            rel_error: r.rel_error,
            makespans: r.makespans,
            comparable: r.devices.len() as u64 >= u64::from(plan.ranks),
        });
    }
    Ok(out)
}

fn stem(s: &str) -> String {
    s.replace(':', "-")
}

pub fn timeline_json(t: &Timeline) -> String {
    let mut s = serde_json::to_string(&TimelineFile::from(t)).expect("timeline serializes");
    s.push('\n');
    s
}

pub fn run(a: Args) -> Result<(), CliError> {
    let Backend::Cuda = a.backend;
    let (sc, file) = simulate::scenario_and_file(&a.sim)?;
    let emulate = match a.emulate_rank {
        Some(r) => {
            let si = StandIn::parse(&a.stand_in).ok_or_else(|| {
                CliError::input(format!(
                    "--stand-in: `{}` is not one of none, copy",
                    a.stand_in
                ))
            })?;
            Some((r, si))
        }
        None => None,
    };
    let opts = GpuOptions {
        devices: a.devices,
        warmup: a.warmup,
        repeats: a.repeats,
        check: (!a.no_check).then_some(sc.workload),
        transport: Transport::parse(&a.transport).ok_or_else(|| {
            CliError::input(format!(
                "--transport: `{}` is not one of copy, nccl",
                a.transport
            ))
        })?,
        watchdog: (a.watchdog_s > 0.0).then_some(a.watchdog_s),
    };
    let results = measure(&sc, emulate, &opts)?;
    let mut table = String::new();
    let _ = writeln!(
        table,
        "{:<14} {:>14} {:>15} {:>9} {:>16} {:>12}",
        "strategy", "measured_us", "predicted_us", "error_%", "exposed_comm_us", "rel_error"
    );
    for m in &results {
        let (mm, pm) = (metrics(&m.measured), metrics(&m.predicted));
        let err = if m.comparable {
            format!("{:.2}", (pm.makespan - mm.makespan) / mm.makespan * 100.0)
        } else {
            "n/a".to_string()
        };
        let _ = writeln!(
            table,
            "{:<14} {:>14.1} {:>15.1} {:>9} {:>16.1} {:>12}",
            m.strategy,
            mm.makespan * 1e6,
            pm.makespan * 1e6,
            err,
            mm.exposed_comm * 1e6,
            m.rel_error.map_or("-".to_string(), |e| format!("{e:.2e}")),
        );
    }
    if let Some(dir) = &a.sim.out {
        std::fs::create_dir_all(dir).map_err(|source| {
            CliError::output(crate::io::OutputError::Write {
                path: dir.display().to_string(),
                source,
            })
        })?;
        let rows: Vec<serde_json::Value> = results
            .iter()
            .map(|m| {
                let (mm, pm) = (metrics(&m.measured), metrics(&m.predicted));
                serde_json::json!({
                    "strategy": m.strategy,
                    "measured_makespan_us": mm.makespan * 1e6,
                    "predicted_makespan_us": pm.makespan * 1e6,
                    "error_pct": m.comparable.then(|| (pm.makespan - mm.makespan) / mm.makespan * 100.0),
                    "comparable": m.comparable,
                    "measured_exposed_comm_us": mm.exposed_comm * 1e6,
                    "rel_error": m.rel_error,
                    "repeat_makespans_us": m.makespans.iter().map(|x| x * 1e6).collect::<Vec<_>>(),
                })
            })
            .collect();
        let mut results_json = serde_json::to_string_pretty(&serde_json::json!({
            "version": 1,
            "scenario": sc.name,
            "emulated_rank": a.emulate_rank,
            "stand_in": emulate.map(|e| e.1.name()),
            "transport": opts.transport.name(),
            "results": rows,
        }))
        .expect("results serialize");
        results_json.push('\n');
        let mut run_json = serde_json::to_string_pretty(&RunFile {
            scenario: file.clone(),
            emulate_rank: a.emulate_rank,
            stand_in: emulate.map(|e| e.1.name().to_string()),
            transport: opts.transport.name().to_string(),
        })
        .expect("run file serializes");
        run_json.push('\n');
        let mut files = vec![
            ("run.json".to_string(), run_json),
            ("table.txt".to_string(), table.clone()),
            ("results.json".to_string(), results_json),
        ];
        let measured: Vec<&Timeline> = results.iter().map(|m| &m.measured).collect();
        files.push(("trace-measured.json".into(), trace::chrome_trace(&measured)));
        for m in &results {
            files.push((
                format!("measured-{}.json", stem(&m.strategy)),
                timeline_json(&m.measured),
            ));
            files.push((
                format!("predicted-{}.json", stem(&m.strategy)),
                timeline_json(&m.predicted),
            ));
        }
        for (name, body) in files {
            write_atomic(&dir.join(name), body.as_bytes(), a.sim.force)
                .map_err(CliError::output)?;
        }
    }
    if let Some(path) = &a.sim.trace {
        let measured: Vec<&Timeline> = results.iter().map(|m| &m.measured).collect();
        write_atomic(path, trace::chrome_trace(&measured).as_bytes(), a.sim.force)
            .map_err(CliError::output)?;
    }
    print!("{table}");
    if results.iter().any(|m| !m.comparable) {
        eprintln!(
            "note: ranks share GPUs, so the measured times serialize what the prediction \
             runs in parallel; error_% is n/a (use --emulate-rank R to time one rank)"
        );
    }
    if let Some(bad) = results
        .iter()
        .find(|m| m.rel_error.is_some_and(|e| e.is_nan() || e > 1e-2))
    {
        return Err(CliError::run(format!(
            "strategy `{}`: result differs from the reference (relative Frobenius error {:.3e} > 1e-2)",
            bad.strategy,
            bad.rel_error.unwrap_or(f64::INFINITY)
        )));
    }
    Ok(())
}
