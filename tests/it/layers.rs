//! Whole layers and steps against their critical paths: with communication free the
//! simulated time is the compute critical path, with compute free it is the
//! communication critical path (every transfer alone on its link), for every strategy.

use flashoverlap::config;
use flashoverlap::cost;
use flashoverlap::exec::sim::SimOptions;
use flashoverlap::plan::{NO_PARTNER, OpKind, Plan};
use flashoverlap::scenario::{GpuSpec, Scenario, Strategy, Workload};
use flashoverlap::simulate::run_strategy;
use flashoverlap::topology::{LinkSpec, Topology};

/// The longest path through the plan under the engine's rules: a launch starts when the
/// previous launch of its stream has ended and every dependency of its ops has ended; a
/// compute op lasts `compute(op)`; a transfer starts when both its send and its recv are
/// posted and lasts `transfer(bytes)`; a launch ends with its last op. Relaxed to a fixed
/// point (the plan is acyclic, so it converges).
fn critical_path(plan: &Plan, gpu: &GpuSpec, transfer: impl Fn(u64) -> f64) -> f64 {
    let nl = plan.launch_count();
    let mut prev = vec![None; nl];
    let mut last_on_stream = vec![None; plan.streams.len()];
    for (l, p) in prev.iter_mut().enumerate() {
        let ops = plan.launch_ops(l as u32);
        let s = plan.ops[ops[0] as usize].stream as usize;
        *p = last_on_stream[s];
        last_on_stream[s] = Some(l);
    }
    let dur = |op: usize| -> f64 {
        match plan.ops[op].kind {
            OpKind::Gemm { m, n, k, dtype } => cost::gemm_time(gpu, m, n, k, dtype).unwrap(),
            OpKind::Attention(a) => cost::attention_time(gpu, &a).unwrap(),
            OpKind::Elementwise { bytes, .. } => cost::elementwise_time(gpu, bytes),
            OpKind::Copy { bytes } => cost::elementwise_time(gpu, bytes * 2),
            OpKind::Send { .. } | OpKind::Recv { .. } => 0.0,
        }
    };
    let mut start = vec![0.0f64; nl];
    let mut end_op = vec![0.0f64; plan.ops.len()];
    let mut end_l = vec![0.0f64; nl];
    loop {
        let mut changed = false;
        for l in 0..nl {
            let ops = plan.launch_ops(l as u32);
            let mut t = prev[l].map_or(0.0, |p: usize| end_l[p]);
            for &o in ops {
                for &d in plan.deps(o) {
                    t = t.max(end_op[d as usize]);
                }
            }
            start[l] = t;
            let mut e = t;
            for &o in ops {
                let o = o as usize;
                let end = match plan.ops[o].kind {
                    OpKind::Send { bytes, .. } | OpKind::Recv { bytes, .. } => {
                        let p = plan.partner(o as u32);
                        assert_ne!(p, NO_PARTNER);
                        let pl = plan.ops[p as usize].launch as usize;
                        t.max(start[pl]) + transfer(bytes)
                    }
                    _ => t + dur(o),
                };
                if end != end_op[o] {
                    changed = true;
                    end_op[o] = end;
                }
                e = e.max(end);
            }
            end_l[l] = e;
        }
        if !changed {
            return end_l.iter().copied().fold(0.0, f64::max);
        }
    }
}

fn scenario(workload: Workload, gbps: f64, free_compute: bool) -> Scenario {
    let mut sc = config::load_scenario("default").unwrap();
    sc.model = config::load_model("llama-3-8b", None).unwrap();
    sc.model.layers = 2;
    sc.workload = workload;
    sc.parallel.tp = 4;
    sc.batch = 1;
    sc.seq = 2048;
    sc.interference = false;
    sc.hardware.comm.message_latency = 0.0;
    sc.hardware.comm.step_latency = 0.0;
    sc.hardware.topology = Topology::full_mesh(
        "mesh",
        8,
        LinkSpec {
            bandwidth: gbps * 1e9,
            latency: 0.0,
        },
    )
    .unwrap();
    if free_compute {
        let g = &mut sc.hardware.gpu;
        g.peak_flops = [Some(1e30); 4];
        g.hbm_bandwidth = 1e30;
        g.gemm.launch = 0.0;
        g.gemm.measured.clear();
        g.elementwise.launch = 0.0;
    }
    sc
}

const STRATEGIES: [Strategy; 7] = [
    Strategy::Sequential,
    Strategy::Chunked(2),
    Strategy::Chunked(4),
    Strategy::Flash,
    Strategy::Direct,
    Strategy::PermuteLoop,
    Strategy::QuerySplit,
];

fn opts() -> SimOptions {
    SimOptions {
        record_links: false,
        ..SimOptions::default()
    }
}

#[test]
fn with_communication_free_the_time_is_the_compute_critical_path() {
    for w in [Workload::Layer, Workload::Step] {
        let sc = scenario(w, 1e290, false);
        for s in STRATEGIES {
            let r = run_strategy(&sc, s, &opts()).unwrap();
            let want = critical_path(&r.plan, &sc.hardware.gpu, |_| 0.0);
            let got = r.metrics.makespan;
            assert!(
                (got - want).abs() <= 1e-9 * want,
                "{w:?} {s}: simulated {got} vs compute critical path {want}"
            );
        }
    }
}

#[test]
fn with_compute_free_the_time_is_the_communication_critical_path() {
    let gbps = 100.0;
    for w in [Workload::Layer, Workload::Step] {
        let sc = scenario(w, gbps, true);
        for s in STRATEGIES {
            let r = run_strategy(&sc, s, &opts()).unwrap();
            let want = critical_path(&r.plan, &sc.hardware.gpu, |b| b as f64 / (gbps * 1e9));
            let got = r.metrics.makespan;
            assert!(
                (got - want).abs() <= 1e-9 * want,
                "{w:?} {s}: simulated {got} vs communication critical path {want}"
            );
            // And it is all communication: compute is a vanishing share.
            assert!(r.metrics.compute < 1e-6 * got, "{w:?} {s}");
        }
    }
}

#[test]
fn overlap_strategies_beat_sequential_on_a_step_and_steps_add_up() {
    let mut sc = config::load_scenario("default").unwrap();
    sc.model = config::load_model("llama-3-8b", None).unwrap();
    sc.model.layers = 4;
    sc.workload = Workload::Step;
    sc.parallel.tp = 8;
    sc.batch = 2;
    sc.seq = 4096;
    sc.interference = false;
    sc.transport = flashoverlap::scenario::Transport::CopyEngine;
    let seq = run_strategy(&sc, Strategy::Sequential, &opts())
        .unwrap()
        .metrics;
    let ch = run_strategy(&sc, Strategy::Chunked(4), &opts())
        .unwrap()
        .metrics;
    assert!(
        ch.makespan < seq.makespan,
        "{} vs {}",
        ch.makespan,
        seq.makespan
    );
    assert!(ch.exposed_comm < seq.exposed_comm);
    // Two micro-batches take about twice as long as one (they run back to back).
    sc.micro_batches = 2;
    let two = run_strategy(&sc, Strategy::Sequential, &opts())
        .unwrap()
        .metrics;
    let ratio = two.makespan / seq.makespan;
    assert!((1.95..=2.0 + 1e-9).contains(&ratio), "{ratio}");
}

/// Query-split hides the out-projection's reduce-scatter behind the attention: the
/// `fwd.proj` site exposes less than with flash, and the layer is no slower.
#[test]
fn query_split_hides_the_projection_rs_behind_attention() {
    let mut sc = config::load_scenario("default").unwrap();
    sc.model = config::load_model("llama-3-8b", None).unwrap();
    sc.workload = Workload::Layer;
    sc.parallel.tp = 8;
    sc.batch = 2;
    sc.seq = 16384;
    sc.interference = false;
    sc.transport = flashoverlap::scenario::Transport::CopyEngine;
    let site = |s: Strategy| {
        let r = run_strategy(&sc, s, &opts()).unwrap();
        let m = flashoverlap::timeline::metrics::site_metrics(&r.timeline, r.metrics.critical_rank);
        let proj = m
            .iter()
            .find(|x| x.site == "fwd.proj")
            .unwrap()
            .exposed_comm;
        (r.metrics.makespan, proj)
    };
    let (tf, ef) = site(Strategy::Flash);
    let (tq, eq) = site(Strategy::QuerySplit);
    assert!(
        eq < 0.5 * ef,
        "query-split exposes {eq} at fwd.proj, flash {ef}"
    );
    assert!(tq <= tf, "{tq} vs {tf}");
}
