//! The `simulate` use case: a scenario (a preset or a file) with a front end's
//! overrides, run under each of its strategies, and the files that report it
//! (`results.json`, the table, `timeline-<strategy>.json`, the Chrome trace). The
//! command line and the Python package call [`scenario`] and [`run`] and present the
//! [`Simulation`].

use crate::config::{ConfigError, Overrides, ScenarioFile};
use crate::exec::sim::SimOptions;
use crate::report;
use crate::scenario::{Scenario, Straggler, VariabilityParams};
use crate::simulate::{self, RunError, ScenarioRun};

/// How a scenario runs besides what it is.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// The most events one run may take.
    pub max_events: u64,
    /// Slower ranks or links, in every run.
    pub stragglers: Vec<Straggler>,
    /// Jittered samples: the jitter, how many, the seed.
    pub samples: Option<(VariabilityParams, u64, u64)>,
    /// Simulate a layout that does not fit in its GPUs' memory instead of refusing it
    /// (the outputs mark it).
    pub allow_oom: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            max_events: SimOptions::default().max_events,
            stragglers: Vec::new(),
            samples: None,
            allow_oom: false,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A layer or step layout that does not fit in its GPUs' memory.
    #[error(transparent)]
    OutOfMemory(#[from] crate::memory::OutOfMemory),
    #[error(transparent)]
    Run(#[from] RunError),
    /// Work over the budget, known before it starts: what it would take and the limit.
    #[error("{0}")]
    OverBudget(String),
}

/// The scenario `scenario` names with `overrides` applied (`label(key)`: where a key was
/// set, for errors; the clocks among them); and the file form it was built from.
pub fn scenario(
    scenario: &str,
    overrides: &Overrides,
    label: &dyn Fn(&str) -> String,
) -> Result<(Scenario, ScenarioFile), Error> {
    Ok(overrides.scenario(scenario, label)?)
}

/// A scenario's runs and what reports them.
pub struct Simulation {
    pub scenario: Scenario,
    pub run: ScenarioRun,
}

/// Run `sc` under each of its strategies (and its jittered samples, when asked).
pub fn run(sc: Scenario, opts: &Options) -> Result<Simulation, Error> {
    if !opts.allow_oom {
        crate::memory::check(&sc)?;
    }
    let sim = SimOptions {
        record_links: true,
        max_events: opts.max_events,
        stragglers: opts.stragglers.clone(),
        ..SimOptions::default()
    };
    let mut run = simulate::run_scenario(&sc, &sim)?;
    if let Some((p, n, seed)) = &opts.samples {
        // The samples' work is known before they start: each takes as many events as its
        // strategy's run did (jitter moves times, not the plan).
        let per: u64 = run.runs.iter().map(|r| r.events).sum();
        let total = per.saturating_mul(*n);
        if total > opts.max_events {
            return Err(Error::OverBudget(format!(
                "--samples {n}: about {total} events ({n} samples × {per} events for {} strategies), over the budget of {} (raise --max-events or take fewer samples)",
                run.runs.len(),
                opts.max_events
            )));
        }
        run.sampling = Some(simulate::sample_scenario(&sc, &sim, p, *n, *seed)?);
    }
    Ok(Simulation { scenario: sc, run })
}

impl Simulation {
    /// The comparison table the command prints.
    pub fn table(&self) -> String {
        report::table(&self.scenario, &self.run)
    }

    /// `results.json`.
    pub fn json(&self) -> String {
        report::json(&self.scenario, &self.run)
    }

    /// The Chrome trace (Perfetto) of every strategy.
    pub fn trace(&self) -> String {
        self.trace_of(&crate::trace::TraceFilter::default())
    }

    /// Each strategy's timeline with its plan, for the trace.
    fn trace_inputs(&self) -> Vec<crate::trace::TraceInput<'_>> {
        let sc = &self.scenario;
        // Posted send/recv kernels hold SMs under the NCCL transport, as the
        // interference model counts them.
        let comm_sms = match (&sc.hardware.interference, sc.transport) {
            (Some(i), crate::scenario::Transport::Nccl) => Some(crate::trace::CommSms {
                per_op: i.comm_ctas_per_op,
                cap: i.max_comm_ctas,
            }),
            _ => None,
        };
        let inputs: Vec<_> = self
            .run
            .runs
            .iter()
            .map(|r| crate::trace::TraceInput {
                timeline: &r.timeline,
                plan: Some(&r.plan),
                comm_sms,
            })
            .collect();
        inputs
    }

    /// The part of the Chrome trace that `filter` keeps.
    pub fn trace_of(&self, filter: &crate::trace::TraceFilter) -> String {
        crate::trace::chrome_trace_filtered(&self.trace_inputs(), filter)
    }

    /// [`ScenarioSimulation::trace_of`] written to `w` as it is made.
    pub fn write_trace(
        &self,
        w: &mut dyn std::io::Write,
        filter: &crate::trace::TraceFilter,
    ) -> std::io::Result<()> {
        crate::trace::write_chrome_trace(w, &self.trace_inputs(), filter)
    }

    /// Each strategy's timeline file: (`timeline-<strategy>.json`, its JSON).
    pub fn timeline_files(&self) -> Vec<(String, String)> {
        self.run
            .runs
            .iter()
            .map(|r| {
                (
                    format!(
                        "timeline-{}.json",
                        super::run::stem(&r.strategy.to_string())
                    ),
                    crate::timeline::file::to_json(&r.timeline),
                )
            })
            .collect()
    }

    /// The files of `simulate --out`: results.json, table.txt, trace.json and the
    /// timelines, each made as it is written (a thousand-GPU step's trace and timelines
    /// are gigabytes: never in memory whole, one file at a time).
    pub fn out_renders(&self) -> Vec<(String, crate::io::Render<'_>)> {
        let mut files: Vec<(String, crate::io::Render<'_>)> = vec![
            ("results.json".to_string(), crate::io::text(self.json())),
            ("table.txt".to_string(), crate::io::text(self.table())),
            (
                "trace.json".to_string(),
                Box::new(|w| self.write_trace(w, &crate::trace::TraceFilter::default())),
            ),
        ];
        for r in &self.run.runs {
            files.push((
                format!(
                    "timeline-{}.json",
                    super::run::stem(&r.strategy.to_string())
                ),
                Box::new(|w| crate::timeline::file::write_json(w, &r.timeline)),
            ));
        }
        files
    }
}

/// A plan a user wrote (`simulate --plan FILE`), simulated on a scenario's hardware.
pub struct PlanSimulation {
    pub name: String,
    /// The hardware profile's name (with its clocks).
    pub hardware: String,
    pub plan: crate::plan::Plan,
    pub timeline: crate::timeline::Timeline,
    pub metrics: crate::timeline::metrics::Metrics,
    pub events: u64,
    /// Whether the interference model ran.
    pub interference: bool,
}

/// Errors of [`run_plan`].
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("plan `{name}` has {ranks} ranks; hardware `{hardware}` has {gpus} GPUs")]
    TooManyRanks {
        name: String,
        ranks: u32,
        hardware: String,
        gpus: usize,
    },
    #[error("plan `{name}`: {source}")]
    Sim {
        name: String,
        #[source]
        source: crate::exec::sim::SimError,
    },
}

/// Read the plan file `path` and simulate it on `sc`'s hardware (its clocks, transport
/// and interference) with `opts`' event budget and stragglers.
pub fn run_plan(
    sc: &Scenario,
    path: &std::path::Path,
    opts: &Options,
) -> Result<PlanSimulation, PlanError> {
    let src = crate::config::plan_file::read(path)?;
    let user = crate::config::plan_file::load(&src, false)?;
    let gpus = sc.hardware.topology.gpu_count();
    if user.plan.ranks as usize > gpus {
        return Err(PlanError::TooManyRanks {
            name: user.name,
            ranks: user.plan.ranks,
            hardware: sc.hardware.name.clone(),
            gpus,
        });
    }
    let sim = SimOptions {
        record_links: true,
        max_events: opts.max_events,
        stragglers: opts.stragglers.clone(),
        ..SimOptions::default()
    }
    .for_scenario(sc);
    let interference = sim.interference.is_some();
    let res = crate::exec::sim::simulate(&user.plan, &sc.hardware, &sim).map_err(|source| {
        PlanError::Sim {
            name: user.name.clone(),
            source,
        }
    })?;
    let peak = sc.hardware.gpu.peak(user.dtype).unwrap_or(0.0);
    let timeline = crate::timeline::Timeline::predicted(
        &user.name,
        "plan",
        &user.plan,
        &sc.hardware.topology,
        &res,
        peak,
    );
    let metrics = crate::timeline::metrics::metrics(&timeline);
    Ok(PlanSimulation {
        name: user.name,
        hardware: sc.hardware.name.clone(),
        plan: user.plan,
        timeline,
        metrics,
        events: res.events,
        interference,
    })
}

/// Per stream of a plan's timeline: (rank, name, ops, first start, last end, busy time).
fn stream_rows(tl: &crate::timeline::Timeline) -> Vec<(u32, String, usize, f64, f64, f64)> {
    let mut rows: Vec<(u32, String, usize, f64, f64, f64)> = tl
        .streams
        .iter()
        .map(|s| (s.rank, s.name.clone(), 0, f64::INFINITY, 0.0, 0.0))
        .collect();
    let mut spans: Vec<Vec<(f64, f64)>> = vec![Vec::new(); tl.streams.len()];
    for s in &tl.spans {
        if let crate::timeline::Lane::Stream(st) = s.lane {
            let r = &mut rows[st as usize];
            r.2 += 1;
            r.3 = r.3.min(s.start);
            r.4 = r.4.max(s.end);
            spans[st as usize].push((s.start, s.end));
        }
    }
    for (r, sp) in rows.iter_mut().zip(spans) {
        r.5 = crate::timeline::metrics::Intervals::from_unsorted(sp).measure();
        if r.2 == 0 {
            r.3 = 0.0;
        }
    }
    rows
}

impl PlanSimulation {
    /// The table `simulate --plan` prints: the headline figures and each stream's span.
    pub fn table(&self) -> String {
        let m = &self.metrics;
        let us = |s: f64| s * 1e6;
        let mut t = format!(
            "plan `{}` on {} ({} rank{}, {} stream{}, {} ops; interference {})\n\
             makespan {:.1} us; critical rank {}: compute {:.1} us, communication {:.1} us, exposed {:.1} us\n",
            self.name,
            self.hardware,
            self.plan.ranks,
            if self.plan.ranks == 1 { "" } else { "s" },
            self.plan.streams.len(),
            if self.plan.streams.len() == 1 {
                ""
            } else {
                "s"
            },
            self.plan.ops.len(),
            if self.interference { "on" } else { "off" },
            us(m.makespan),
            m.critical_rank,
            us(m.compute),
            us(m.comm),
            us(m.exposed_comm),
        );
        t.push_str(&format!(
            "{:<6} {:<16} {:>6} {:>14} {:>14} {:>14}\n",
            "rank", "stream", "ops", "first (us)", "last end (us)", "busy (us)"
        ));
        for (rank, name, ops, first, last, busy) in stream_rows(&self.timeline) {
            t.push_str(&format!(
                "{rank:<6} {name:<16} {ops:>6} {:>14.1} {:>14.1} {:>14.1}\n",
                us(first),
                us(last),
                us(busy)
            ));
        }
        t
    }

    /// The JSON `simulate --plan --format json` prints.
    pub fn json(&self) -> String {
        let m = &self.metrics;
        let streams: Vec<_> = stream_rows(&self.timeline)
            .into_iter()
            .map(|(rank, name, ops, first, last, busy)| {
                serde_json::json!({
                    "rank": rank, "stream": name, "ops": ops,
                    "first_start_us": first * 1e6, "last_end_us": last * 1e6,
                    "busy_us": busy * 1e6,
                })
            })
            .collect();
        let v = serde_json::json!({
            "format": "flashoverlap-plan-results",
            "version": 1,
            "plan": self.name,
            "hardware": self.hardware,
            "ranks": self.plan.ranks,
            "ops": self.plan.ops.len(),
            "events": self.events,
            "interference": self.interference,
            "makespan_us": m.makespan * 1e6,
            "critical_rank": m.critical_rank,
            "compute_us": m.compute * 1e6,
            "comm_us": m.comm * 1e6,
            "exposed_comm_us": m.exposed_comm * 1e6,
            "streams": streams,
        });
        let mut s = serde_json::to_string_pretty(&v).unwrap_or_default();
        s.push('\n');
        s
    }

    /// The Chrome trace of the plan's timeline (with its messages as arrows).
    pub fn trace_of(&self, filter: &crate::trace::TraceFilter) -> String {
        let input = crate::trace::TraceInput {
            timeline: &self.timeline,
            plan: Some(&self.plan),
            comm_sms: None,
        };
        crate::trace::chrome_trace_filtered(&[input], filter)
    }

    /// [`PlanSimulation::trace_of`] written to `w` as it is made.
    pub fn write_trace(
        &self,
        w: &mut dyn std::io::Write,
        filter: &crate::trace::TraceFilter,
    ) -> std::io::Result<()> {
        let input = crate::trace::TraceInput {
            timeline: &self.timeline,
            plan: Some(&self.plan),
            comm_sms: None,
        };
        crate::trace::write_chrome_trace(w, &[input], filter)
    }

    /// The files of `simulate --plan --out`: results.json, table.txt, trace.json and
    /// timeline-plan.json, each made as it is written.
    pub fn out_renders(&self) -> Vec<(String, crate::io::Render<'_>)> {
        vec![
            ("results.json".to_string(), crate::io::text(self.json())),
            ("table.txt".to_string(), crate::io::text(self.table())),
            (
                "trace.json".to_string(),
                Box::new(|w| self.write_trace(w, &crate::trace::TraceFilter::default())),
            ),
            (
                "timeline-plan.json".to_string(),
                Box::new(|w| crate::timeline::file::write_json(w, &self.timeline)),
            ),
        ]
    }
}
