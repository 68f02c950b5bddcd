//! Scenario → (per strategy) Plan → simulation → Timeline → Metrics.

use crate::exec::sim::variability::{percentile, sample_seed};
use crate::exec::sim::{self, Jitter, SimError, SimOptions};
use crate::plan::Plan;
use crate::scenario::{Scenario, Strategy, VariabilityParams};
use crate::strategy::{self, StrategyError};
use crate::timeline::Timeline;
use crate::timeline::metrics::{Metrics, metrics};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RunError {
    #[error("strategy `{strategy}`: {source}")]
    Strategy {
        strategy: String,
        #[source]
        source: StrategyError,
    },
    #[error("strategy `{strategy}`: {source}")]
    Sim {
        strategy: String,
        #[source]
        source: SimError,
    },
}

impl RunError {
    /// The scenario asks for more than the memory limit lets a plan hold (known while its
    /// plan is built, before it all takes memory): a request to shrink, not a failed run.
    pub fn is_over_limit(&self) -> bool {
        matches!(
            self,
            RunError::Strategy {
                source: StrategyError::Plan(crate::plan::PlanError::TooLarge { .. }),
                ..
            }
        )
    }
}

/// One strategy's run.
#[derive(Debug, Clone)]
pub struct StrategyRun {
    pub strategy: Strategy,
    pub plan: Plan,
    pub timeline: Timeline,
    pub metrics: Metrics,
    pub events: u64,
}

/// The plan of one strategy of a scenario and its simulation: [`run_strategy`] without
/// the timeline and metrics (what a caller needing only times or the makespan saves).
pub fn simulate_plan(
    sc: &Scenario,
    strategy: Strategy,
    opts: &SimOptions,
) -> Result<(Plan, sim::SimResult), RunError> {
    let name = strategy.to_string();
    // A symmetric plan where nothing breaks the symmetry (no jitter, no straggler).
    let symmetric = opts.jitter.is_none() && opts.stragglers.is_empty();
    // Every op of a plan costs at least one event: a plan with more ops than the event
    // budget is refused as over it while being built, before it all takes memory.
    let max_ops = usize::try_from(opts.max_events).unwrap_or(usize::MAX);
    let plan = strategy::build_limited(sc, sc.workload, strategy, symmetric, max_ops).map_err(
        |source| match source {
            StrategyError::Plan(crate::plan::PlanError::TooLarge { limit, .. })
                if limit == max_ops =>
            {
                RunError::Sim {
                    strategy: name.clone(),
                    source: SimError::EventBudget {
                        budget: opts.max_events,
                    },
                }
            }
            source => RunError::Strategy {
                strategy: name.clone(),
                source,
            },
        },
    )?;
    let opts = opts.clone().for_scenario(sc);
    let res = sim::simulate(&plan, &sc.hardware, &opts).map_err(|source| RunError::Sim {
        strategy: name.clone(),
        source,
    })?;
    Ok((plan, res))
}

/// Simulate one strategy of a scenario.
pub fn run_strategy(
    sc: &Scenario,
    strategy: Strategy,
    opts: &SimOptions,
) -> Result<StrategyRun, RunError> {
    let name = strategy.to_string();
    let (plan, res) = simulate_plan(sc, strategy, opts)?;
    let peak = sc.hardware.gpu.peak(sc.dtype).unwrap_or(0.0);
    let timeline = Timeline::predicted(&sc.name, &name, &plan, &sc.hardware.topology, &res, peak);
    let metrics = metrics(&timeline);
    Ok(StrategyRun {
        strategy,
        plan,
        timeline,
        metrics,
        events: res.events,
    })
}

/// The scenario's strategies, in order, plus the makespan of `sequential` (simulated even
/// when not listed) as the speed-up baseline.
pub struct ScenarioRun {
    pub runs: Vec<StrategyRun>,
    pub sequential_makespan: f64,
    /// Percentiles over jittered samples, when asked for ([`sample_scenario`]).
    pub sampling: Option<Sampling>,
}

/// p50 / p90 / p99 (nearest rank), min, max and mean of one metric over the samples.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Spread {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub min: f64,
    pub max: f64,
    pub mean: f64,
}

impl Spread {
    /// The spread of `xs` (seconds), in seconds.
    pub fn of(mut xs: Vec<f64>) -> Spread {
        xs.sort_by(f64::total_cmp);
        let n = xs.len().max(1) as f64;
        Spread {
            p50: percentile(&xs, 50.0),
            p90: percentile(&xs, 90.0),
            p99: percentile(&xs, 99.0),
            min: xs.first().copied().unwrap_or(f64::NAN),
            max: xs.last().copied().unwrap_or(f64::NAN),
            mean: xs.iter().sum::<f64>() / n,
        }
    }
}

/// One strategy's makespan and exposed communication over the samples (seconds).
#[derive(Debug, Clone, PartialEq)]
pub struct StrategySamples {
    pub strategy: Strategy,
    pub makespan: Spread,
    pub exposed_comm: Spread,
}

/// A sampled scenario: `samples` runs, sample i seeded from (`seed`, i).
#[derive(Debug, Clone, PartialEq)]
pub struct Sampling {
    pub samples: u64,
    pub seed: u64,
    pub params: VariabilityParams,
    pub strategies: Vec<StrategySamples>,
}

/// Run every strategy of `sc` `samples` times with jitter `params`, sample i seeded with
/// `sample_seed(seed, i)`; the plan of each strategy is built once. The same seed gives
/// the same numbers.
pub fn sample_scenario(
    sc: &Scenario,
    opts: &SimOptions,
    params: &VariabilityParams,
    samples: u64,
    seed: u64,
) -> Result<Sampling, RunError> {
    let mut out = Vec::with_capacity(sc.strategies.len());
    let base = SimOptions {
        record_links: false,
        ..opts.clone()
    }
    .for_scenario(sc);
    for &strategy in &sc.strategies {
        let name = strategy.to_string();
        let built = |symmetric: bool| {
            strategy::build_with(sc, sc.workload, strategy, symmetric).map_err(|source| {
                RunError::Strategy {
                    strategy: name.clone(),
                    source,
                }
            })
        };
        // Where the plan has a symmetric form, the samples run its unrolled program:
        // every rank simulated with its own draws, from a template a fraction of the full
        // plan's size (which stays in cache), the two figures accumulated as it runs.
        let plan = built(true)?;
        let unrolled = match plan.symmetry {
            Some(_) => Some(sim::Unrolled::new(&plan).map_err(|e| RunError::Sim {
                strategy: name.clone(),
                source: sim::SimError::Asymmetric { why: e.to_string() },
            })?),
            None => None,
        };
        let counted: Vec<bool> = plan
            .streams
            .iter()
            .map(|s| !crate::timeline::metrics::is_pipeline_stream(&s.name))
            .collect();
        // Samples run in parallel over one plan; each has its own seed (a function of
        // the run's seed and its index) and the results are collected in index order,
        // so the figures are the same at any thread count.
        use rayon::prelude::*;
        let one = |i: u64| -> Result<(f64, f64), RunError> {
            let o = SimOptions {
                jitter: Some(Jitter {
                    params: params.clone(),
                    seed: sample_seed(seed, i),
                }),
                ..base.clone()
            };
            let failed = |source| RunError::Sim {
                strategy: name.clone(),
                source,
            };
            if let Some(u) = &unrolled {
                let res =
                    sim::simulate_unrolled(u, &sc.hardware, &o, Some(&counted)).map_err(failed)?;
                return Ok(res.makespan_and_critical_exposed());
            }
            let res = sim::simulate(&plan, &sc.hardware, &o).map_err(failed)?;
            // The figures the run's timeline gives, without building it.
            Ok(crate::timeline::metrics::makespan_and_exposed_of_run(
                &plan, &res.times,
            ))
        };
        let got: Vec<(f64, f64)> = (0..samples)
            .into_par_iter()
            .map(one)
            .collect::<Result<_, _>>()?;
        let (ms, ex): (Vec<f64>, Vec<f64>) = got.into_iter().unzip();
        out.push(StrategySamples {
            strategy,
            makespan: Spread::of(ms),
            exposed_comm: Spread::of(ex),
        });
    }
    Ok(Sampling {
        samples,
        seed,
        params: params.clone(),
        strategies: out,
    })
}

/// The speed-up baseline: the makespan of plain `sequential` (every site sequential, no
/// per-site overrides), taken from `runs` when one of them is that, else simulated.
pub fn baseline(sc: &Scenario, runs: &[StrategyRun], opts: &SimOptions) -> Result<f64, RunError> {
    if baseline_is_a_run(sc)
        && let Some(r) = runs.iter().find(|r| r.strategy == Strategy::Sequential)
    {
        return Ok(r.metrics.makespan);
    }
    let mut plain = sc.clone();
    plain.site_strategies.clear();
    let quiet = SimOptions {
        record_links: false,
        ..opts.clone()
    };
    // Its makespan is the latest op end (the timeline's latest span end without link
    // spans), so the timeline is not built.
    let (_, res) = simulate_plan(&plain, Strategy::Sequential, &quiet)?;
    Ok(res.times.iter().map(|t| t.end).fold(0.0, f64::max))
}

/// Whether the baseline is one of `sc`'s own runs (plain `sequential` among its
/// strategies, no per-site overrides), so [`baseline`] takes it from them.
fn baseline_is_a_run(sc: &Scenario) -> bool {
    sc.site_strategies.is_empty() && sc.strategies.contains(&Strategy::Sequential)
}

pub fn run_scenario(sc: &Scenario, opts: &SimOptions) -> Result<ScenarioRun, RunError> {
    // A baseline simulated apart runs beside the strategies (on another core where the
    // pool has one: the peak memory is then the sum of its plan's and the strategies').
    // Its error waits for theirs: the strategies asked for fail first.
    let (early, runs) = rayon::join(
        || (!baseline_is_a_run(sc)).then(|| baseline(sc, &[], opts)),
        || -> Result<Vec<StrategyRun>, RunError> {
            let mut runs = Vec::with_capacity(sc.strategies.len());
            for &s in &sc.strategies {
                runs.push(run_strategy(sc, s, opts)?);
            }
            Ok(runs)
        },
    );
    let runs = runs?;
    let sequential_makespan = match early {
        Some(b) => b?,
        None => baseline(sc, &runs, opts)?,
    };
    Ok(ScenarioRun {
        runs,
        sequential_makespan,
        sampling: None,
    })
}
