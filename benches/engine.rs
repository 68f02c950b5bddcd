//! Criterion benchmarks of the simulator's phases on fixed cases: building a plan,
//! simulating it, and building its timeline and metrics. Baselines are checked in under
//! `benches/baselines/` (`scripts/bench` compares against them, `scripts/bench --save`
//! replaces them), so a regression shows as a change against the recorded figures.
//!
//! Cases (one thread each):
//! - `mlp`: the default scenario (default-block MLP, tp 4, h100-sxm-8), flash;
//! - `layer-tp8`: a llama-3-8b layer, tp 8, seq 4k, flash, on h100-sxm-8;
//! - `flash-rs-256`: a Flash-RS GEMM of 256 ranks on the NVLink-class ring (full plan);
//! - `step-pp2`: a llama-3-8b step, tp 2 × pp 2, 4 micro-batches of 2k tokens, flash.

use criterion::{Criterion, criterion_group, criterion_main};
use flashoverlap::config;
use flashoverlap::exec::sim::{self, SimOptions};
use flashoverlap::scenario::{Scenario, Strategy, Workload};
use flashoverlap::strategy;
use flashoverlap::timeline::Timeline;
use flashoverlap::timeline::metrics::metrics;
use std::hint::black_box;
use std::time::Duration;

fn cases() -> Vec<(&'static str, Scenario)> {
    let default = config::load_scenario("default").expect("embedded scenario");
    let mut mlp = default.clone();
    mlp.strategies = vec![Strategy::Flash];
    let mut layer = mlp.clone();
    layer.workload = Workload::Layer;
    layer.model = config::load_model("llama-3-8b", None).expect("preset");
    layer.parallel.tp = 8;
    layer.batch = 1;
    layer.seq = 4096;
    let mut ring = mlp.clone();
    ring.hardware = config::load_hardware("nvlink-ring-1024", None).expect("preset");
    ring.parallel.tp = 256;
    ring.workload = Workload::GemmRs;
    let mut step = layer.clone();
    step.workload = Workload::Step;
    step.parallel.tp = 2;
    step.parallel.pp = 2;
    step.micro_batches = 4;
    step.seq = 2048;
    vec![
        ("mlp", mlp),
        ("layer-tp8", layer),
        ("flash-rs-256", ring),
        ("step-pp2", step),
    ]
}

fn phases(c: &mut Criterion) {
    for (name, sc) in cases() {
        let mut g = c.benchmark_group(name);
        g.sample_size(10)
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(2))
            // Changes within 5% are noise on a shared machine.
            .noise_threshold(0.05);
        let opts = SimOptions::default().for_scenario(&sc);
        let peak = sc.hardware.gpu.peak(sc.dtype).unwrap_or(0.0);
        g.bench_function("build", |b| {
            b.iter(|| strategy::build(black_box(&sc), sc.workload, Strategy::Flash).unwrap())
        });
        let plan = strategy::build(&sc, sc.workload, Strategy::Flash).unwrap();
        g.bench_function("simulate", |b| {
            b.iter(|| sim::simulate(black_box(&plan), &sc.hardware, &opts).unwrap())
        });
        let res = sim::simulate(&plan, &sc.hardware, &opts).unwrap();
        g.bench_function("timeline", |b| {
            b.iter(|| {
                let t = Timeline::predicted(
                    &sc.name,
                    "flash",
                    black_box(&plan),
                    &sc.hardware.topology,
                    &res,
                    peak,
                );
                metrics(&t)
            })
        });
        g.finish();
    }
}

criterion_group!(benches, phases);
criterion_main!(benches);
