//! Scenario → (per strategy) Plan → simulation → Timeline → Metrics.

use crate::exec::sim::{self, SimError, SimOptions};
use crate::plan::Plan;
use crate::scenario::{Scenario, Strategy};
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

/// One strategy's run.
#[derive(Debug, Clone)]
pub struct StrategyRun {
    pub strategy: Strategy,
    pub plan: Plan,
    pub timeline: Timeline,
    pub metrics: Metrics,
    pub events: u64,
}

/// Simulate one strategy of a scenario.
pub fn run_strategy(
    sc: &Scenario,
    strategy: Strategy,
    opts: &SimOptions,
) -> Result<StrategyRun, RunError> {
    let name = strategy.to_string();
    let plan = strategy::build(sc, sc.workload, strategy).map_err(|source| RunError::Strategy {
        strategy: name.clone(),
        source,
    })?;
    let opts = opts.clone().for_scenario(sc);
    let res = sim::simulate(&plan, &sc.hardware, &opts).map_err(|source| RunError::Sim {
        strategy: name.clone(),
        source,
    })?;
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
}

pub fn run_scenario(sc: &Scenario, opts: &SimOptions) -> Result<ScenarioRun, RunError> {
    let mut runs = Vec::with_capacity(sc.strategies.len());
    for &s in &sc.strategies {
        runs.push(run_strategy(sc, s, opts)?);
    }
    let sequential_makespan = match runs.iter().find(|r| r.strategy == Strategy::Sequential) {
        Some(r) => r.metrics.makespan,
        None => {
            let quiet = SimOptions {
                record_links: false,
                ..opts.clone()
            };
            run_strategy(sc, Strategy::Sequential, &quiet)?
                .metrics
                .makespan
        }
    };
    Ok(ScenarioRun {
        runs,
        sequential_makespan,
    })
}
