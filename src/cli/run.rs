//! `flashoverlap run --backend cuda`: run a scenario's strategies on the GPUs present and
//! write measured timelines (and the predicted ones of the same plans) in one schema.

use super::{CliError, simulate};
use crate::exec::gpu::{self, GpuOptions, ProcessRank, Transport};
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
#[group(skip)]
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
    /// Milliseconds of large GEMMs (untimed) on every GPU before each run (0: none, the
    /// protocol `calibrate` measures by default). Sustained-load clocks take far longer
    /// than one run to set in (the power controller averages), so a few ms do not reach
    /// them.
    #[arg(long, default_value_t = gpu::HEAT_MS)]
    pub heat_ms: f64,
    /// Abort a run that has not finished after this many seconds and name the op that
    /// waited (0: no watchdog).
    #[arg(long, default_value_t = 60.0)]
    pub watchdog_s: f64,
    /// One rank on one GPU: also time the same kernels back to back on one stream (no
    /// per-op events or waits), each repetition beside one of the schedule's, and report
    /// the executor's overhead against them.
    #[arg(long)]
    pub back_to_back: bool,
    /// Multi-process mode (with `--transport nccl`): this process runs rank `--rank` of
    /// `--world` (the plan's rank count) on local GPU `--local-device`; every process is
    /// started with the same arguments but its rank. Rank 0 writes the outputs.
    #[arg(long, requires = "rank")]
    pub world: Option<u32>,
    #[arg(long, requires = "world")]
    pub rank: Option<u32>,
    #[arg(long, default_value_t = 0)]
    pub local_device: u32,
    /// Where rank 0 writes the NCCL unique id and the others read it (a path every
    /// process sees, fresh for each job). Not needed when NCCL_COMM_ID=host:port is set.
    #[arg(long)]
    pub nccl_id_file: Option<std::path::PathBuf>,
}

/// The NCCL unique id as text: 256 hex digits and a newline.
pub fn id_to_text(id: &[u8; 128]) -> String {
    let mut s: String = id.iter().map(|b| format!("{b:02x}")).collect();
    s.push('\n');
    s
}

pub fn id_from_text(s: &str) -> Option<[u8; 128]> {
    let t = s.trim();
    if t.len() != 256 || !t.is_ascii() {
        return None;
    }
    let mut id = [0u8; 128];
    for (i, b) in id.iter_mut().enumerate() {
        *b = u8::from_str_radix(&t[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(id)
}

/// Wait up to `secs` for `path` to hold `n` ids, one a line (rank 0 writes the file
/// atomically).
pub fn wait_for_ids(
    path: &std::path::Path,
    n: usize,
    secs: f64,
) -> Result<Vec<[u8; 128]>, CliError> {
    let start = std::time::Instant::now();
    loop {
        if let Ok(s) = std::fs::read_to_string(path) {
            let ids: Option<Vec<[u8; 128]>> = s.lines().map(id_from_text).collect();
            return match ids {
                Some(v) if v.len() == n => Ok(v),
                _ => Err(CliError::input(format!(
                    "{}: not {n} NCCL unique ids (256 hex digits a line)",
                    path.display()
                ))),
            };
        }
        if start.elapsed().as_secs_f64() > secs {
            return Err(CliError::run(format!(
                "{}: no NCCL unique id after {secs} s (is rank 0 running?)",
                path.display()
            )));
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

type ProcessIds = (ProcessRank, Vec<[u8; 128]>);

/// This process's rank and one NCCL unique id per strategy (each strategy's run makes
/// its own communicator, and an id serves one communicator).
fn process_rank(a: &Args, n: usize) -> Result<Option<ProcessIds>, CliError> {
    let (Some(world), Some(rank)) = (a.world, a.rank) else {
        return Ok(None);
    };
    if rank >= world {
        return Err(CliError::input(format!(
            "--rank {rank} is not below --world {world}"
        )));
    }
    let ids = if std::env::var_os("NCCL_COMM_ID").is_some() {
        // Derived from the address: every process makes the same ones.
        (0..n)
            .map(|_| gpu::nccl_unique_id().map_err(CliError::run))
            .collect::<Result<Vec<_>, _>>()?
    } else {
        let path = a.nccl_id_file.as_ref().ok_or_else(|| {
            CliError::input(
                "multi-process mode needs --nccl-id-file PATH or NCCL_COMM_ID=host:port",
            )
        })?;
        if rank == 0 {
            let ids = (0..n)
                .map(|_| gpu::nccl_unique_id().map_err(CliError::run))
                .collect::<Result<Vec<_>, _>>()?;
            let text: String = ids.iter().map(id_to_text).collect();
            write_atomic(path, text.as_bytes(), true).map_err(CliError::output)?;
            ids
        } else {
            let wait = if a.watchdog_s > 0.0 {
                a.watchdog_s
            } else {
                600.0
            };
            wait_for_ids(path, n, wait)?
        }
    };
    Ok(Some((
        ProcessRank {
            rank,
            world,
            device: a.local_device,
            id: ids.first().copied().unwrap_or([0; 128]),
        },
        ids,
    )))
}

/// What a run executed, so `validate` can predict it again (with another profile).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct RunFile {
    pub scenario: crate::config::files::ScenarioFile,
    pub emulate_rank: Option<u32>,
    pub stand_in: Option<String>,
    #[serde(default = "copy_transport")]
    pub transport: String,
    /// Whether every rank had a GPU of its own (else the measured times serialize what
    /// the prediction runs in parallel, and `validate` skips the run).
    #[serde(default = "yes")]
    pub comparable: bool,
    /// Heater before each run, ms (absent in runs made before the heater existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heat_ms: Option<f64>,
}

fn yes() -> bool {
    true
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
    /// Repetitions whose start gate opened by its timeout (see `GpuRun::gate_timeouts`).
    pub gate_timeouts: u32,
    /// See `GpuRun::back_to_back`.
    pub back_to_back: Option<f64>,
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

/// Run every strategy of `sc`; in a multi-process run `ids` holds one NCCL unique id per
/// strategy.
pub fn measure(
    sc: &Scenario,
    emulate: Option<(u32, StandIn)>,
    opts: &GpuOptions,
    ids: &[[u8; 128]],
) -> Result<Vec<Measured>, CliError> {
    let peak = sc.hardware.gpu.peak(sc.dtype).unwrap_or(0.0);
    let mut out = Vec::new();
    // Predicted as the executor runs it: the transport it uses, and every transfer its
    // own launch (the executor does not fuse a collective's steps into one kernel).
    let hw = crate::exec::gpu::as_executed(&sc.hardware);
    let mut sim_opts = SimOptions::default().for_scenario(sc);
    if let Some(i) = sim_opts.interference.as_mut() {
        i.transport = opts.transport;
    }
    for (i, &s) in sc.strategies.iter().enumerate() {
        let name = s.to_string();
        let plan = plan_for(sc, s, emulate)?;
        let mut o = opts.clone();
        if let (Some(p), Some(id)) = (o.process.as_mut(), ids.get(i)) {
            p.id = *id;
        }
        if emulate.is_some() {
            o.check = None;
        }
        let r = gpu::run(&plan, &o).map_err(CliError::run)?;
        let res = sim::simulate(&plan, &hw, &sim_opts).map_err(CliError::run)?;
        let predicted =
            Timeline::predicted(&sc.name, &name, &plan, &sc.hardware.topology, &res, peak);
        let measured = Timeline::measured(&sc.name, &name, &plan, &r.times, peak);
        let makespan = metrics(&measured).makespan;
        eprintln!(
            "{name}: measured {:.1} µs (runs {:.1}..{:.1} µs) on {}",
            makespan * 1e6,
            r.makespans.iter().cloned().fold(f64::INFINITY, f64::min) * 1e6,
            r.makespans.iter().cloned().fold(0.0, f64::max) * 1e6,
            r.devices.join(", ")
        );
        if let Some(b) = r.back_to_back {
            // As `validate` reports it: the median repetition's makespan over the baseline.
            eprintln!(
                "{name}: the same kernels back to back {:.1} µs (executor overhead {:+.2}%)",
                b * 1e6,
                (makespan / b - 1.0) * 100.0
            );
        }
        if r.gate_timeouts > 0 {
            eprintln!(
                "warning: {name}: in {} of {} repetitions the start gate opened by its \
                 timeout before every op was issued; those runs may be launch-bound",
                r.gate_timeouts,
                r.makespans.len()
            );
        }
        out.push(Measured {
            strategy: name,
            measured,
            predicted,
            rel_error: r.rel_error,
            makespans: r.makespans,
            gate_timeouts: r.gate_timeouts,
            back_to_back: r.back_to_back,
            comparable: r.devices.len() as u64 >= u64::from(plan.ranks),
        });
    }
    Ok(out)
}

pub(super) fn stem(s: &str) -> String {
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
    if a.back_to_back && (emulate.is_none() && sc.parallel.world() > 1 || a.world.is_some()) {
        return Err(CliError::input(format!(
            "--back-to-back times the kernels of one rank on one GPU, and this run has {} \
             ranks: add --emulate-rank R",
            sc.parallel.world()
        )));
    }
    let opts = GpuOptions {
        devices: a.devices,
        warmup: a.warmup,
        repeats: a.repeats,
        check: (!a.no_check).then_some(sc.workload),
        // `--transport` (checked with the scenario) or copy engines, which run any
        // number of ranks per GPU.
        transport: if a.sim.transport.is_some() {
            sc.transport
        } else {
            Transport::CopyEngine
        },
        watchdog: (a.watchdog_s > 0.0).then_some(a.watchdog_s),
        process: None,
        heat_ms: a.heat_ms,
        back_to_back: a.back_to_back,
    };
    let mut opts = opts;
    let ids = match process_rank(&a, sc.strategies.len())? {
        Some((pr, ids)) => {
            opts.process = Some(pr);
            ids
        }
        None => Vec::new(),
    };
    if opts.process.is_some() && emulate.is_some() {
        return Err(CliError::input(
            "--emulate-rank runs one rank in one process; it does not combine with --world",
        ));
    }
    let results = measure(&sc, emulate, &opts, &ids)?;
    if let Some(pr) = opts.process.filter(|p| p.rank != 0) {
        eprintln!(
            "rank {} of {}: done (rank 0 writes the results)",
            pr.rank, pr.world
        );
        return Ok(());
    }
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
                    "gate_timeouts": m.gate_timeouts,
                    "back_to_back_us": m.back_to_back.map(|b| b * 1e6),
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
            comparable: results.iter().all(|m| m.comparable),
            heat_ms: Some(opts.heat_ms),
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
    super::stdout(&table)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unique_ids_round_trip_and_bad_text_is_refused() {
        let mut id = [0u8; 128];
        for (i, b) in id.iter_mut().enumerate() {
            *b = (i * 37 % 256) as u8;
        }
        assert_eq!(id_from_text(&id_to_text(&id)), Some(id));
        assert_eq!(id_from_text("abc"), None);
        assert_eq!(id_from_text(&"zz".repeat(128)), None);
    }

    #[test]
    fn waiting_for_an_id_reads_it_or_times_out() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("id");
        let e = wait_for_ids(&p, 2, 0.1).unwrap_err().error.to_string();
        assert!(e.contains("no NCCL unique id"), "{e}");
        let two = id_to_text(&[7u8; 128]) + &id_to_text(&[9u8; 128]);
        std::fs::write(&p, &two).unwrap();
        assert_eq!(
            wait_for_ids(&p, 2, 0.1).unwrap(),
            vec![[7u8; 128], [9u8; 128]]
        );
        // One id for two strategies, or garbage: refused.
        std::fs::write(&p, id_to_text(&[7u8; 128])).unwrap();
        assert!(wait_for_ids(&p, 2, 0.1).is_err());
        std::fs::write(&p, "garbage").unwrap();
        assert!(wait_for_ids(&p, 1, 0.1).is_err());
    }
}
