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

/// Which clocks a prediction assumes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Clocks {
    /// A rested GPU's (the profile's figures).
    #[default]
    Burst,
    /// A GPU held at its power limit's clocks (the profile's sustained GEMM slowdown).
    Sustained,
}

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
    /// `Clocks::Sustained` on a profile without the sustained figures.
    #[error(
        "hardware profile `{hardware}` has no gpu.sustained_gemm_slowdown (`flashoverlap calibrate` measures it)"
    )]
    NoSustainedClocks { hardware: String },
    /// A layer or step layout that does not fit in its GPUs' memory.
    #[error(transparent)]
    OutOfMemory(#[from] crate::memory::OutOfMemory),
    #[error(transparent)]
    Run(#[from] RunError),
}

/// The scenario `scenario` names with `overrides` applied (`label(key)`: where a key was
/// set, for errors), at `clocks`; and the file form it was built from.
pub fn scenario(
    scenario: &str,
    overrides: &Overrides,
    clocks: Clocks,
    label: &dyn Fn(&str) -> String,
) -> Result<(Scenario, ScenarioFile), Error> {
    let (mut sc, f) = overrides.scenario(scenario, label)?;
    if clocks == Clocks::Sustained {
        let hw = &mut sc.hardware;
        hw.gpu = hw
            .gpu
            .at_sustained_clocks()
            .ok_or_else(|| Error::NoSustainedClocks {
                hardware: hw.name.clone(),
            })?;
        hw.name = format!("{} at sustained clocks", hw.name);
    }
    Ok((sc, f))
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

    /// The part of the Chrome trace that `filter` keeps.
    pub fn trace_of(&self, filter: &crate::trace::TraceFilter) -> String {
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
        crate::trace::chrome_trace_filtered(&inputs, filter)
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
    /// timelines.
    pub fn out_files(&self) -> Vec<(String, String)> {
        let mut files = vec![
            ("results.json".to_string(), self.json()),
            ("table.txt".to_string(), self.table()),
            ("trace.json".to_string(), self.trace()),
        ];
        files.extend(self.timeline_files());
        files
    }
}
