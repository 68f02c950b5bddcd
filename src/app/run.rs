//! The `run` use case: a scenario's strategies executed on the GPUs present (the `cuda`
//! feature), each checked against the reference, with the measured timelines and the
//! predicted ones of the same plans in one schema; and `run.json`, what a run executed,
//! from which `validate` and `calibrate` rebuild its plans.

use super::{Error, FileError};
use crate::config::{self, ScenarioFile};
use crate::exec::gpu::{self, GpuOptions, ProcessRank};
use crate::exec::sim::{self, SimOptions};
use crate::io::write_atomic;
use crate::plan::{Plan, StandIn, emulate_rank};
use crate::scenario::{Scenario, Strategy};
use crate::timeline::Timeline;
use crate::timeline::file::to_json as timeline_json;
use crate::timeline::metrics::metrics;
use crate::{strategy, trace};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// What to run.
#[derive(Debug, Clone)]
pub struct Request {
    pub scenario: Scenario,
    /// The file form the scenario was built from (recorded in `run.json`).
    pub file: ScenarioFile,
    /// Run only this rank's program, each transfer replaced by the stand-in.
    pub emulate: Option<(u32, StandIn)>,
    pub gpu: GpuOptions,
    /// In a multi-process run: one NCCL unique id per strategy ([`process_ids`]).
    pub ids: Vec<[u8; 128]>,
    /// A plan of the user's (`run --plan FILE`) to run instead of the strategies.
    pub plan: Option<PlanRecord>,
}

/// A user's plan file as a run records it (in `run.json`, so `validate` rebuilds it).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PlanRecord {
    /// The file's name as given (its extension says TOML or JSON).
    pub file: String,
    pub text: String,
}

/// What a run of a user's plan is called in its outputs (`measured-plan.json`).
pub const PLAN_LABEL: &str = "plan";

impl PlanRecord {
    /// Read the plan file at `path`.
    pub fn read(path: &Path) -> Result<PlanRecord, Error> {
        let src = config::plan_file::read(path).map_err(Error::input)?;
        Ok(PlanRecord {
            file: src.name,
            text: src.text,
        })
    }

    /// The plan, with buffers for the GPU executor.
    pub fn build(&self) -> Result<Plan, Error> {
        let src = config::Source {
            name: self.file.clone(),
            text: self.text.clone(),
            dir: None,
        };
        Ok(config::plan_file::load(&src, true)
            .map_err(Error::input)?
            .plan)
    }
}

/// One strategy measured, with its prediction.
pub struct Measured {
    pub strategy: String,
    pub measured: Timeline,
    pub predicted: Timeline,
    /// The plan that ran (the trace's flow arrows, shapes and layers).
    pub plan: crate::plan::Plan,
    pub rel_error: Option<f64>,
    pub makespans: Vec<f64>,
    /// Repetitions whose start gate opened by its timeout (see `GpuRun::gate_timeouts`).
    pub gate_timeouts: u32,
    /// See `GpuRun::back_to_back`.
    pub back_to_back: Option<f64>,
    /// See `GpuRun::settled`.
    pub settled: Option<gpu::Settled>,
    /// One GPU per rank, so the measured timeline is comparable with the prediction
    /// (ranks sharing a GPU serialize what the prediction runs in parallel).
    pub comparable: bool,
}

impl Measured {
    /// The prediction's error on the makespan, % (`None` where not comparable).
    pub fn error_pct(&self) -> Option<f64> {
        let (mm, pm) = (metrics(&self.measured), metrics(&self.predicted));
        self.comparable
            .then(|| (pm.makespan - mm.makespan) / mm.makespan * 100.0)
    }
}

/// What a run did: every strategy measured, and the request it answers.
pub struct Report {
    pub request: Request,
    pub results: Vec<Measured>,
}

/// What a run executed, so `validate` can predict it again (with another profile).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct RunFile {
    pub scenario: ScenarioFile,
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
    /// The user's plan that ran instead of the scenario's strategies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<PlanRecord>,
}

fn yes() -> bool {
    true
}

fn copy_transport() -> String {
    "copy".into()
}

/// A run directory's `run.json`, read back.
pub struct RecordedRun {
    /// `DIR/run.json`.
    pub path: PathBuf,
    pub file: RunFile,
}

impl RecordedRun {
    /// Read `dir/run.json`.
    pub fn read(dir: &Path) -> Result<RecordedRun, Error> {
        let path = dir.join("run.json");
        let text = super::read_text(&path, crate::io::MAX_CONFIG_BYTES)?;
        let file: RunFile =
            serde_json::from_str(&text).map_err(|e| Error::input(FileError::new(&path, e)))?;
        Ok(RecordedRun { path, file })
    }

    /// The scenario the run executed, rebuilt on `hardware` (another profile) and with
    /// the interference model on or off; its transport the run's.
    pub fn scenario(&self, hardware: &str, interference: bool) -> Result<Scenario, Error> {
        let mut file = self.file.scenario.clone();
        file.transport = self.file.transport.clone();
        file.interference = interference;
        file.hardware = hardware.to_string();
        config::scenario_from_file(
            &self.path.display().to_string(),
            None,
            file,
            &Default::default(),
        )
        .map_err(Error::input)
    }

    /// The rank the run emulated and its stand-in, if it emulated one.
    pub fn emulate(&self) -> Result<Option<(u32, StandIn)>, Error> {
        match (self.file.emulate_rank, self.file.stand_in.as_deref()) {
            (Some(r), Some(s)) => {
                let si = StandIn::parse(s).ok_or_else(|| {
                    Error::input(FileError::new(
                        &self.path,
                        format!("stand_in `{s}` is not one of none, copy"),
                    ))
                })?;
                Ok(Some((r, si)))
            }
            _ => Ok(None),
        }
    }

    /// What the run executed, in its order, as its outputs name them: the strategies, or
    /// [`PLAN_LABEL`] for a user's plan.
    pub fn labels(&self) -> Result<Vec<String>, Error> {
        if self.file.plan.is_some() {
            return Ok(vec![PLAN_LABEL.to_string()]);
        }
        Ok(self.strategies()?.iter().map(Strategy::to_string).collect())
    }

    /// The plan the run executed under `label` (one of [`RecordedRun::labels`]), rebuilt
    /// on `sc`.
    pub fn plan(&self, sc: &Scenario, label: &str) -> Result<Plan, Error> {
        let emulate = self.emulate()?;
        match &self.file.plan {
            Some(p) => with_emulation(p.build()?, emulate),
            None => {
                let s = Strategy::parse(label)
                    .map_err(|e| Error::input(FileError::new(&self.path, e)))?;
                plan_for(sc, s, emulate)
            }
        }
    }

    /// The strategies the run executed, in its order.
    pub fn strategies(&self) -> Result<Vec<Strategy>, Error> {
        self.file
            .scenario
            .strategies
            .iter()
            .map(|s| Strategy::parse(s).map_err(|e| Error::input(FileError::new(&self.path, e))))
            .collect()
    }
}

/// The plan a run executes: the strategy's, or one rank of it.
pub fn plan_for(
    sc: &Scenario,
    s: Strategy,
    emulate: Option<(u32, StandIn)>,
) -> Result<Plan, Error> {
    let plan = strategy::build(sc, sc.workload, s).map_err(Error::run)?;
    with_emulation(plan, emulate)
}

/// `plan`, or one rank of it with its transfers replaced by the stand-in.
fn with_emulation(plan: Plan, emulate: Option<(u32, StandIn)>) -> Result<Plan, Error> {
    match emulate {
        Some((r, si)) => emulate_rank(&plan, r, si).map_err(Error::input),
        None => Ok(plan),
    }
}

/// The prediction of `plan` as the GPU executor runs it: the transport it uses, and
/// every transfer its own launch (the executor does not fuse a collective's steps into
/// one kernel).
pub fn predict_as_executed(
    sc: &Scenario,
    name: &str,
    strategy: &str,
    plan: &Plan,
    transport: Option<gpu::Transport>,
) -> Result<Timeline, Error> {
    let hw = gpu::as_executed(&sc.hardware);
    let mut opts = SimOptions::default().for_scenario(sc);
    if let (Some(i), Some(t)) = (opts.interference.as_mut(), transport) {
        i.transport = t;
    }
    let res = sim::simulate(plan, &hw, &opts).map_err(Error::run)?;
    let peak = sc.hardware.gpu.peak(sc.dtype).unwrap_or(0.0);
    Ok(Timeline::predicted(
        name,
        strategy,
        plan,
        &sc.hardware.topology,
        &res,
        peak,
    ))
}

/// Run every strategy of the request; `log` receives one line per strategy (its
/// measured makespan and devices, the executor overhead, warnings).
pub fn run(req: Request, log: &dyn Fn(&str)) -> Result<Report, Error> {
    let sc = &req.scenario;
    if req.gpu.process.is_some() && req.gpu.settle.is_some() {
        return Err(Error::input(
            "--clocks sustained settles each process's loop on its own; run it in one process (without --world)",
        ));
    }
    if req.gpu.process.is_some() && req.emulate.is_some() {
        return Err(Error::input(
            "--emulate-rank runs one rank in one process; it does not combine with --world",
        ));
    }
    if req.gpu.back_to_back
        && (req.emulate.is_none() && sc.parallel.world() > 1 || req.gpu.process.is_some())
    {
        return Err(Error::input(format!(
            "--back-to-back times the kernels of one rank on one GPU, and this run has {} \
             ranks: add --emulate-rank R",
            sc.parallel.world()
        )));
    }
    let peak = sc.hardware.gpu.peak(sc.dtype).unwrap_or(0.0);
    let mut out = Vec::new();
    // The strategies' plans, or the user's (which has no reference to check against).
    let items: Vec<(String, Option<Strategy>)> = match &req.plan {
        Some(_) => vec![(PLAN_LABEL.to_string(), None)],
        None => sc
            .strategies
            .iter()
            .map(|&s| (s.to_string(), Some(s)))
            .collect(),
    };
    for (i, (name, s)) in items.into_iter().enumerate() {
        let plan = match (s, &req.plan) {
            (Some(s), _) => plan_for(sc, s, req.emulate)?,
            (None, Some(p)) => with_emulation(p.build()?, req.emulate)?,
            (None, None) => unreachable!("an item is a strategy or the plan"),
        };
        let mut o = req.gpu.clone();
        if let (Some(p), Some(id)) = (o.process.as_mut(), req.ids.get(i)) {
            p.id = *id;
        }
        if req.emulate.is_some() || req.plan.is_some() {
            o.check = None;
        }
        let r = gpu::run(&plan, &o).map_err(Error::run)?;
        let predicted = predict_as_executed(sc, &sc.name, &name, &plan, Some(o.transport))?;
        let measured = Timeline::measured(&sc.name, &name, &plan, &r.times, peak);
        let makespan = metrics(&measured).makespan;
        log(&format!(
            "{name}: measured {:.1} µs (runs {:.1}..{:.1} µs) on {}",
            makespan * 1e6,
            r.makespans.iter().cloned().fold(f64::INFINITY, f64::min) * 1e6,
            r.makespans.iter().cloned().fold(0.0, f64::max) * 1e6,
            r.devices.join(", ")
        ));
        if let Some(st) = r.settled {
            log(&format!(
                "{name}: {} in {:.1} s ({} runs): makespan {:.1} µs rested, {:.1} µs settled",
                if st.converged {
                    "settled"
                } else {
                    "did not settle"
                },
                st.seconds,
                st.runs,
                st.first_window_makespan_s * 1e6,
                st.last_window_makespan_s * 1e6,
            ));
        }
        if let Some(b) = r.back_to_back {
            // As `validate` reports it: the median repetition's makespan over the baseline.
            log(&format!(
                "{name}: the same kernels back to back {:.1} µs (executor overhead {:+.2}%)",
                b * 1e6,
                (makespan / b - 1.0) * 100.0
            ));
        }
        if r.gate_timeouts > 0 {
            log(&format!(
                "warning: {name}: in {} of {} repetitions the start gate opened by its \
                 timeout before every op was issued; those runs may be launch-bound",
                r.gate_timeouts,
                r.makespans.len()
            ));
        }
        out.push(Measured {
            plan: plan.clone(),
            strategy: name,
            measured,
            predicted,
            rel_error: r.rel_error,
            makespans: r.makespans,
            gate_timeouts: r.gate_timeouts,
            back_to_back: r.back_to_back,
            settled: r.settled,
            comparable: r.devices.len() as u64 >= u64::from(plan.ranks),
        });
    }
    Ok(Report {
        request: req,
        results: out,
    })
}

/// A strategy name as it appears in file names (`chunked:4` → `chunked-4`).
pub fn stem(s: &str) -> String {
    s.replace(':', "-")
}

impl Report {
    /// The table the command prints: measured against predicted per strategy.
    pub fn table(&self) -> String {
        let mut table = String::new();
        let _ = writeln!(
            table,
            "{:<14} {:>14} {:>15} {:>9} {:>16} {:>12}",
            "strategy", "measured_us", "predicted_us", "error_%", "exposed_comm_us", "rel_error"
        );
        for m in &self.results {
            let (mm, pm) = (metrics(&m.measured), metrics(&m.predicted));
            let _ = writeln!(
                table,
                "{:<14} {:>14.1} {:>15.1} {:>9} {:>16.1} {:>12}",
                m.strategy,
                mm.makespan * 1e6,
                pm.makespan * 1e6,
                m.error_pct()
                    .map_or_else(|| "n/a".to_string(), |e| format!("{e:.2}")),
                mm.exposed_comm * 1e6,
                m.rel_error.map_or("-".to_string(), |e| format!("{e:.2e}")),
            );
        }
        table
    }

    fn stand_in(&self) -> Option<&'static str> {
        self.request.emulate.map(|e| e.1.name())
    }

    /// `results.json`: per strategy, measured and predicted makespans, the repetitions.
    pub fn results_json(&self) -> String {
        let rows: Vec<serde_json::Value> = self
            .results
            .iter()
            .map(|m| {
                let (mm, pm) = (metrics(&m.measured), metrics(&m.predicted));
                serde_json::json!({
                    "strategy": m.strategy,
                    "measured_makespan_us": mm.makespan * 1e6,
                    "predicted_makespan_us": pm.makespan * 1e6,
                    "error_pct": m.error_pct(),
                    "comparable": m.comparable,
                    "measured_exposed_comm_us": mm.exposed_comm * 1e6,
                    "rel_error": m.rel_error,
                    "repeat_makespans_us": m.makespans.iter().map(|x| x * 1e6).collect::<Vec<_>>(),
                    "gate_timeouts": m.gate_timeouts,
                    "back_to_back_us": m.back_to_back.map(|b| b * 1e6),
                    "settled": m.settled,
                })
            })
            .collect();
        let mut s = serde_json::to_string_pretty(&serde_json::json!({
            "version": 1,
            "scenario": self.request.scenario.name,
            "emulated_rank": self.request.emulate.map(|e| e.0),
            "stand_in": self.stand_in(),
            "transport": self.request.gpu.transport.name(),
            "results": rows,
        }))
        .expect("results serialize");
        s.push('\n');
        s
    }

    /// `run.json`: what the run executed.
    pub fn run_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(&RunFile {
            scenario: self.request.file.clone(),
            emulate_rank: self.request.emulate.map(|e| e.0),
            stand_in: self.stand_in().map(str::to_string),
            transport: self.request.gpu.transport.name().to_string(),
            comparable: self.results.iter().all(|m| m.comparable),
            heat_ms: Some(self.request.gpu.heat_ms),
            plan: self.request.plan.clone(),
        })
        .expect("run file serializes");
        s.push('\n');
        s
    }

    /// The Chrome trace of the measured timelines.
    pub fn trace(&self) -> String {
        let measured: Vec<trace::TraceInput> = self
            .results
            .iter()
            .map(|m| trace::TraceInput {
                timeline: &m.measured,
                plan: Some(&m.plan),
                comm_sms: None,
            })
            .collect();
        trace::chrome_trace_filtered(&measured, &trace::TraceFilter::default())
    }

    /// The files of `run --out`: run.json, table.txt, results.json, trace-measured.json,
    /// and measured-<strategy>.json and predicted-<strategy>.json per strategy.
    pub fn out_files(&self) -> Vec<(String, String)> {
        let mut files = vec![
            ("run.json".to_string(), self.run_json()),
            ("table.txt".to_string(), self.table()),
            ("results.json".to_string(), self.results_json()),
            ("trace-measured.json".to_string(), self.trace()),
        ];
        for m in &self.results {
            files.push((
                format!("measured-{}.json", stem(&m.strategy)),
                timeline_json(&m.measured),
            ));
            files.push((
                format!("predicted-{}.json", stem(&m.strategy)),
                timeline_json(&m.predicted),
            ));
        }
        files
    }

    /// An error if a strategy's result differs from the reference.
    pub fn check(&self) -> Result<(), Error> {
        match self
            .results
            .iter()
            .find(|m| m.rel_error.is_some_and(|e| e.is_nan() || e > 1e-2))
        {
            Some(bad) => Err(Error::run(format!(
                "strategy `{}`: result differs from the reference (relative Frobenius error {:.3e} > 1e-2)",
                bad.strategy,
                bad.rel_error.unwrap_or(f64::INFINITY)
            ))),
            None => Ok(()),
        }
    }
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
pub fn wait_for_ids(path: &Path, n: usize, secs: f64) -> Result<Vec<[u8; 128]>, Error> {
    let start = std::time::Instant::now();
    loop {
        if let Ok(s) = std::fs::read_to_string(path) {
            let ids: Option<Vec<[u8; 128]>> = s.lines().map(id_from_text).collect();
            return match ids {
                Some(v) if v.len() == n => Ok(v),
                _ => Err(Error::input(FileError::new(
                    path,
                    format!("not {n} NCCL unique ids (256 hex digits a line)"),
                ))),
            };
        }
        if start.elapsed().as_secs_f64() > secs {
            return Err(Error::run(FileError::new(
                path,
                format!("no NCCL unique id after {secs} s (is rank 0 running?)"),
            )));
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// One process of a multi-process run.
#[derive(Debug, Clone)]
pub struct Process {
    pub rank: u32,
    pub world: u32,
    pub local_device: u32,
    /// Where rank 0 writes the ids and the others read them; `None`: NCCL_COMM_ID is set.
    pub id_file: Option<PathBuf>,
    /// How long a rank waits for rank 0's ids, s.
    pub wait_s: f64,
}

/// This process's rank and one NCCL unique id per strategy (each of `n` strategies'
/// runs makes its own communicator, and an id serves one communicator).
pub fn process_ids(p: &Process, n: usize) -> Result<(ProcessRank, Vec<[u8; 128]>), Error> {
    if p.rank >= p.world {
        return Err(Error::input(format!(
            "--rank {} is not below --world {}",
            p.rank, p.world
        )));
    }
    let fresh = || {
        (0..n)
            .map(|_| gpu::nccl_unique_id().map_err(Error::run))
            .collect::<Result<Vec<_>, _>>()
    };
    let ids = if std::env::var_os("NCCL_COMM_ID").is_some() {
        // Derived from the address: every process makes the same ones.
        fresh()?
    } else {
        let path = p.id_file.as_ref().ok_or_else(|| {
            Error::input("multi-process mode needs --nccl-id-file PATH or NCCL_COMM_ID=host:port")
        })?;
        if p.rank == 0 {
            let ids = fresh()?;
            let text: String = ids.iter().map(id_to_text).collect();
            write_atomic(path, text.as_bytes(), true).map_err(Error::output)?;
            ids
        } else {
            wait_for_ids(path, n, p.wait_s)?
        }
    };
    Ok((
        ProcessRank {
            rank: p.rank,
            world: p.world,
            device: p.local_device,
            id: ids.first().copied().unwrap_or([0; 128]),
        },
        ids,
    ))
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
        let e = wait_for_ids(&p, 2, 0.1).unwrap_err().to_string();
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

    /// A checked-in run's `run.json` reads back into its scenario, emulated rank and
    /// strategies; a missing one names the file.
    #[test]
    fn recorded_runs_read_back() {
        let dir = Path::new("results/h200-2026-12-04/emu-none-llama-ag-gemm-tp8-b3");
        let r = RecordedRun::read(dir).unwrap();
        assert!(r.emulate().unwrap().is_some());
        assert!(!r.strategies().unwrap().is_empty());
        let sc = r.scenario("h200-sxm-8", true).unwrap();
        assert_eq!(sc.parallel.tp, 8);
        let e = RecordedRun::read(Path::new("no/such/run")).err().unwrap();
        assert!(e.to_string().contains("run.json"), "{e}");
    }
}
