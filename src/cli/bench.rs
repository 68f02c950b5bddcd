//! `flashoverlap bench`: the simulator's own speed on fixed cases, one thread.

use super::CliError;
use crate::exec::sim::SimOptions;
use crate::scenario::{Strategy, Workload};
use crate::{config, simulate};
use std::time::Instant;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Repetitions of each case (the fastest is reported, with the median).
    #[arg(long, default_value_t = 5)]
    pub repeat: u32,
    /// Skip the 1024-rank case.
    #[arg(long)]
    pub quick: bool,
}

struct Case {
    name: &'static str,
    scenario: crate::scenario::Scenario,
}

fn cases(quick: bool) -> Result<Vec<Case>, CliError> {
    let default = config::load_scenario("default").map_err(CliError::input)?;
    let mut out = vec![Case {
        name: "default scenario (mlp, tp=4, 3 strategies)",
        scenario: default.clone(),
    }];
    if !quick {
        let mut big = default;
        big.name = "flash-rs-1024".into();
        big.hardware = config::load_hardware("nvlink-ring-1024", None).map_err(CliError::input)?;
        big.parallel.tp = 1024;
        big.workload = Workload::GemmRs;
        big.strategies = vec![Strategy::Flash];
        out.push(Case {
            name: "Flash-RS, 1024 ranks, NVLink-class ring",
            scenario: big,
        });
    }
    Ok(out)
}

pub fn run(a: Args) -> Result<(), CliError> {
    let opts = SimOptions {
        record_links: false,
        ..SimOptions::default()
    };
    println!(
        "{:<44} {:>10} {:>12} {:>12} {:>12} {:>14}",
        "case", "ops", "events", "best_ms", "median_ms", "events_per_s"
    );
    for case in cases(a.quick)? {
        let mut walls = Vec::new();
        let mut events = 0;
        let mut ops = 0;
        for _ in 0..a.repeat.max(1) {
            let t = Instant::now();
            let mut ev = 0;
            let mut n = 0;
            for &s in &case.scenario.strategies {
                let r = simulate::run_strategy(&case.scenario, s, &opts).map_err(CliError::run)?;
                ev += r.events;
                n += r.plan.op_count();
            }
            walls.push(t.elapsed().as_secs_f64());
            events = ev;
            ops = n;
        }
        walls.sort_by(f64::total_cmp);
        let best = walls[0];
        let median = walls[walls.len() / 2];
        println!(
            "{:<44} {:>10} {:>12} {:>12.2} {:>12.2} {:>14.0}",
            case.name,
            ops,
            events,
            best * 1e3,
            median * 1e3,
            events as f64 / best
        );
    }
    println!("(wall time covers plan build, simulation, timeline and metrics; one thread)");
    Ok(())
}
