//! Whole layers and steps against their critical paths: with communication free the
//! simulated time is the compute critical path, with compute free it is the
//! communication critical path (every transfer alone on its link), for every strategy.
//! Data-parallel collectives run on NCCL channels: their messages also pay the channel's
//! latencies, wire bytes and rate ceiling, which the critical path adds.

use flashoverlap::config;
use flashoverlap::cost;
use flashoverlap::exec::sim::{SimOptions, compute_critical_path, stream_compute};
use flashoverlap::plan::{NO_PARTNER, OpKind, Plan};
use flashoverlap::scenario::{GpuSpec, Scenario, Strategy, Workload};
use flashoverlap::simulate::run_strategy;
use flashoverlap::topology::{LinkSpec, Topology};

/// The longest path through the plan under the engine's rules: a launch starts when the
/// previous launch of its stream has ended and every dependency of its ops has ended; a
/// compute op lasts `compute(op)`; a transfer starts when both its send and its recv are
/// posted and lasts `bytes / link` (`link` the bandwidth of every link, B/s), or on an NCCL
/// channel its latency (launch unless fused, then the step's) plus its wire bytes at
/// the lesser of the link and the channel's ceiling; a launch ends with its last op.
/// Relaxed to a fixed point (the plan is acyclic, so it converges).
fn critical_path(plan: &Plan, gpu: &GpuSpec, topo: &Topology, link: f64) -> f64 {
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
            OpKind::Gemm {
                m,
                n,
                k,
                dtype,
                reuses_b,
            } => if reuses_b {
                cost::gemm_time_warm(gpu, m, n, k, dtype)
            } else {
                cost::gemm_time(gpu, m, n, k, dtype)
            }
            .unwrap(),
            OpKind::GroupedGemm {
                groups,
                m,
                n,
                k,
                dtype,
            } => cost::grouped_gemm_time(gpu, groups as u64, m, n, k, dtype).unwrap(),
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
                        // The send's side carries the channel parameters.
                        let send = if matches!(plan.ops[o].kind, OpKind::Send { .. }) {
                            o
                        } else {
                            p as usize
                        };
                        let so = &plan.ops[send];
                        let time = match plan.streams[so.stream as usize].wire {
                            None => bytes as f64 / link,
                            Some(w) => {
                                let w = plan.wires[w as usize];
                                let OpKind::Send { peer, .. } = so.kind else {
                                    unreachable!()
                                };
                                let step = if topo.node_of(so.rank as usize)
                                    == topo.node_of(peer as usize)
                                {
                                    w.intra_step_latency
                                } else {
                                    w.inter_step_latency
                                };
                                let alpha = if plan.fused(so.launch) {
                                    step
                                } else {
                                    w.launch_latency + step
                                };
                                alpha + bytes as f64 * w.factor / link.min(w.cap)
                            }
                        };
                        t.max(start[pl]) + time
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

/// Compute that takes no time: unbounded FLOP/s and HBM, no launch or split-K cost, no
/// per-SM load bound, no measured GEMMs.
fn make_compute_free(g: &mut GpuSpec) {
    g.peak_flops = [Some(1e30); 4];
    g.hbm_bandwidth = 1e30;
    g.gemm.launch = 0.0;
    g.gemm.split_launch = 0.0;
    g.gemm.sm_load_bandwidth = None;
    g.gemm.measured.clear();
    g.elementwise.launch = 0.0;
}

fn scenario_u(workload: Workload, gbps: f64, free_compute: bool, dp: u64, u: u64) -> Scenario {
    let mut sc = config::load_scenario("default").unwrap();
    sc.model = config::load_model("llama-3-8b", None).unwrap();
    sc.model.layers = 2;
    sc.workload = workload;
    sc.parallel.tp = 4 / u;
    sc.parallel.dp = dp;
    sc.parallel.ulysses = u;
    sc.batch = 1;
    sc.seq = 2048;
    sc.interference = false;
    sc.hardware.comm.message_latency = 0.0;
    sc.hardware.comm.step_latency = 0.0;
    // One channel per data-parallel collective: C channels of one ring share its links,
    // which the contention-free critical path does not model.
    sc.hardware.comm.nccl.channels = Some(1);
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
        make_compute_free(&mut sc.hardware.gpu);
    }
    sc
}

const STRATEGIES: [Strategy; 10] = [
    Strategy::PermuteLoopBidir,
    Strategy::Sequential,
    Strategy::Bulk,
    Strategy::FlashA2a,
    Strategy::Chunked(2),
    Strategy::Chunked(4),
    Strategy::Flash,
    Strategy::Direct,
    Strategy::PermuteLoop,
    Strategy::QuerySplit,
];

/// (workload, dp, ulysses): tp is 4 / ulysses, on 8 GPUs.
const CASES: [(Workload, u64, u64); 6] = [
    (Workload::Layer, 1, 1),
    (Workload::Step, 1, 1),
    (Workload::Layer, 2, 1),
    (Workload::Step, 2, 1),
    (Workload::Layer, 1, 2),
    (Workload::Step, 2, 2),
];

fn opts() -> SimOptions {
    SimOptions {
        record_links: false,
        ..SimOptions::default()
    }
}

#[test]
fn with_communication_free_the_time_is_the_compute_critical_path() {
    let mut exact = 0;
    for (w, dp, u) in CASES {
        let sc = scenario_u(w, 1e290, false, dp, u);
        for s in STRATEGIES
            .into_iter()
            .filter(|&s| u == 1 || s != Strategy::QuerySplit)
        {
            let r = run_strategy(&sc, s, &opts()).unwrap();
            let want = critical_path(&r.plan, &sc.hardware.gpu, &sc.hardware.topology, 1e290);
            let got = r.metrics.makespan;
            assert!(
                (got - want).abs() <= 1e-9 * want,
                "{w:?} dp {dp} u {u} {s}: simulated {got} vs compute critical path {want}"
            );
            // The library's one pass (the search's floor) finds the same path where no
            // NCCL channel adds its latencies (which it leaves out), else a shorter one.
            let lib = compute_critical_path(&r.plan, &sc.hardware).unwrap();
            if r.plan.streams.iter().all(|st| st.wire.is_none()) {
                exact += 1;
                assert!(
                    (lib - want).abs() <= 1e-9 * want,
                    "{w:?} dp {dp} u {u} {s}: compute_critical_path {lib} vs {want}"
                );
            } else {
                assert!(lib <= want * (1.0 + 1e-12), "{w:?} dp {dp} u {u} {s}");
            }
        }
    }
    assert!(exact >= 20, "only {exact} plans without NCCL channels");
}

#[test]
fn with_compute_free_the_time_is_the_communication_critical_path() {
    let gbps = 100.0;
    // Without Ulysses: its all-to-alls and the gradient-sync group's parameter
    // all-gathers join the same pairs of GPUs on two streams at once, so they contend
    // for one link, which this contention-free critical path does not model.
    for (w, dp, u) in CASES.into_iter().filter(|c| c.2 == 1) {
        let sc = scenario_u(w, gbps, true, dp, u);
        for s in STRATEGIES
            .into_iter()
            .filter(|&s| u == 1 || s != Strategy::QuerySplit)
        {
            let r = run_strategy(&sc, s, &opts()).unwrap();
            let want = critical_path(&r.plan, &sc.hardware.gpu, &sc.hardware.topology, gbps * 1e9);
            let got = r.metrics.makespan;
            assert!(
                (got - want).abs() <= 1e-9 * want,
                "{w:?} dp {dp} u {u} {s}: simulated {got} vs communication critical path {want}"
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

/// A step of tp 2 × dp 4 on a rail fabric of 4 nodes × 2 GPUs in leaf groups of 2
/// nodes: the topology turns by one leaf group (4 GPUs = 2 replicas), so a symmetric
/// plan holds 2 of the 4 replicas. It must give the full plan's times.
#[test]
fn a_symmetric_data_parallel_step_equals_the_full_one() {
    use flashoverlap::exec::sim;
    use flashoverlap::strategy::build_with;
    let mut sc = config::load_scenario("default").unwrap();
    sc.model = config::load_model("llama-3-8b", None).unwrap();
    sc.model.layers = 2;
    sc.workload = Workload::Step;
    sc.parallel.tp = 2;
    sc.parallel.dp = 4;
    sc.batch = 1;
    sc.seq = 1024;
    sc.hardware = config::load_hardware_nodes("dgx-h100", None, Some(4)).unwrap();
    sc.hardware.topology = Topology::rail_fat_tree(
        "rail",
        &flashoverlap::topology::RailFatTreeSpec {
            nodes: 4,
            gpus_per_node: 2,
            nodes_per_leaf: 2,
            nvlink: LinkSpec {
                bandwidth: 370e9,
                latency: 0.5e-6,
            },
            nic: LinkSpec {
                bandwidth: 48e9,
                latency: 1e-6,
            },
            spine_latency: 1e-6,
            oversubscription: 2.0,
        },
    )
    .unwrap();
    let o = opts().for_scenario(&sc);
    for s in [Strategy::Sequential, Strategy::Bulk, Strategy::Flash] {
        let full = build_with(&sc, sc.workload, s, false).unwrap();
        let sym = build_with(&sc, sc.workload, s, true).unwrap();
        assert_eq!(sym.symmetry, Some(4), "{s}");
        assert_eq!(full.symmetry, None);
        assert_eq!(
            2 * sym.op_count(),
            full.op_count(),
            "{s}: half the replicas"
        );
        let a = sim::simulate(&full, &sc.hardware, &o).unwrap();
        let b = sim::simulate(&sym, &sc.hardware, &o).unwrap();
        let end = |r: &sim::SimResult| r.times.iter().map(|t| t.end).fold(0.0, f64::max);
        let (x, y) = (end(&a), end(&b));
        assert!((x - y).abs() <= 1e-9 * x, "{s}: full {x} vs symmetric {y}");
        // Through `simulate`'s path (symmetric where possible), the same metrics.
        let r = run_strategy(&sc, s, &opts()).unwrap();
        assert!((r.metrics.makespan - x).abs() <= 1e-9 * x, "{s}");
        // Unrolled (every rank simulated, its ops generated from the symmetric plan's),
        // with interference on and a slow rank and NIC that break the symmetry: each
        // rank ends when it does in the stored full plan's run.
        let u = sim::Unrolled::new(&sym).unwrap();
        let slow = sim::SimOptions {
            stragglers: vec![
                flashoverlap::scenario::Straggler::parse("rank:5=1.3").unwrap(),
                flashoverlap::scenario::Straggler::parse("link:n3.nic0->rail0.leaf1=2").unwrap(),
            ],
            ..o.clone()
        };
        assert!(slow.interference.is_some(), "interference is modelled");
        // Each rank's exposed communication, accumulated as the run goes, is the stored
        // run's timeline's.
        let counted: Vec<bool> = sym
            .streams
            .iter()
            .map(|st| !flashoverlap::timeline::metrics::is_pipeline_stream(&st.name))
            .collect();
        for opts in [&o, &slow] {
            let a = sim::simulate(&full, &sc.hardware, opts).unwrap();
            let g = sim::simulate_unrolled(&u, &sc.hardware, opts, Some(&counted)).unwrap();
            let tl = flashoverlap::timeline::Timeline::predicted(
                "x",
                "",
                &full,
                &sc.hardware.topology,
                &a,
                1.0,
            );
            let stored = flashoverlap::timeline::metrics::rank_metrics(&tl);
            assert!(
                stored.iter().any(|m| m.exposed_comm > 1e-6),
                "{s}: something is exposed"
            );
            for (r, m) in stored.iter().enumerate() {
                let (x, y) = (m.end, g.rank_end[r]);
                assert!(
                    (x - y).abs() <= 1e-9 * x,
                    "{s} {:?}: rank {r} ends at {x} (stored) vs {y} (generated)",
                    opts.stragglers
                );
                let (x, y) = (m.exposed_comm, g.rank_exposed[r]);
                assert!(
                    (x - y).abs() <= 1e-9 * m.end,
                    "{s} {:?}: rank {r} exposes {x} (stored) vs {y} (generated)",
                    opts.stragglers
                );
            }
        }
    }
}

/// Rank mapping on 8 GPUs × 4 nodes, tp 8 × dp 4: with `tp-inner` every tensor-parallel
/// message stays in its node (over the NVSwitch) and every data-parallel one crosses to
/// another node, to the GPU of the same local index (its rail); `dp-inner` turns that
/// around.
#[test]
fn tensor_groups_sit_in_a_node_and_data_parallelism_spans_nodes() {
    use flashoverlap::scenario::RankOrder;
    use flashoverlap::strategy::build_with;
    let mut sc = config::load_scenario("default").unwrap();
    sc.model = config::load_model("llama-3-8b", None).unwrap();
    sc.workload = Workload::Layer;
    sc.parallel.tp = 8;
    sc.parallel.dp = 4;
    sc.batch = 1;
    sc.seq = 2048;
    sc.hardware = config::load_hardware_nodes("dgx-h100", None, Some(4)).unwrap();
    assert_eq!(sc.hardware.topology.gpu_count(), 32);
    for order in [RankOrder::TpInner, RankOrder::DpInner] {
        sc.parallel.order = order;
        let plan = build_with(&sc, sc.workload, Strategy::Flash, false).unwrap();
        assert_eq!(plan.ranks, 32);
        let (mut tp_msgs, mut tp_cross, mut dp_msgs) = (0, 0, 0);
        for o in &plan.ops {
            let OpKind::Send { peer, .. } = o.kind else {
                continue;
            };
            let same_node = o.rank / 8 == peer / 8;
            match plan.streams[o.stream as usize].name.as_str() {
                // A tensor-parallel group spanning nodes (dp-inner) runs its rings on
                // NCCL channels (`tp-ch…`).
                name if name == "comm" || name.starts_with("tp-") => {
                    tp_msgs += 1;
                    tp_cross += usize::from(!same_node);
                }
                name if name.starts_with("dp-") => {
                    dp_msgs += 1;
                    // dp-inner: the 4 replicas of a tensor shard on consecutive GPUs
                    // of one node.
                    assert_eq!(same_node, order == RankOrder::DpInner, "{order:?} dp");
                    if order == RankOrder::TpInner {
                        assert_eq!(o.rank % 8, peer % 8, "same rail");
                    }
                }
                other => panic!("a send on stream {other}"),
            }
        }
        assert!(tp_msgs > 0 && dp_msgs > 0);
        match order {
            RankOrder::TpInner | RankOrder::TpPpDp => {
                assert_eq!(tp_cross, 0, "tp-inner: no tp message leaves a node")
            }
            // dp-inner puts 2 of a tensor group's 8 ranks on each node.
            RankOrder::DpInner => assert!(tp_cross > 0),
        }
        // The tensor-parallel traffic of tp-inner never leaves the NVSwitch: the run is
        // faster than with dp-inner, whose tensor-parallel messages cross the NICs.
    }
    sc.parallel.order = RankOrder::TpInner;
    let inner = run_strategy(&sc, Strategy::Flash, &opts()).unwrap().metrics;
    sc.parallel.order = RankOrder::DpInner;
    let outer = run_strategy(&sc, Strategy::Flash, &opts()).unwrap().metrics;
    assert!(
        inner.makespan < outer.makespan,
        "{} vs {}",
        inner.makespan,
        outer.makespan
    );
}

/// Data-parallel strategies on a step: bucketed (`bulk`) hides most of the gradient
/// reduce-scatter that `sequential` leaves after the backward, and every strategy moves
/// the same data-parallel bytes (ring all-gathers of the parameters for the forward and
/// again for the backward, and a reduce-scatter of the gradients per layer, each
/// (dp − 1)/dp of the layer per rank).
#[test]
fn data_parallel_strategies_move_the_same_bytes_and_bulk_overlaps() {
    let mut sc = config::load_scenario("default").unwrap();
    sc.model = config::load_model("llama-3-8b", None).unwrap();
    sc.model.layers = 4;
    sc.workload = Workload::Step;
    sc.parallel.tp = 8;
    sc.parallel.dp = 4;
    sc.batch = 1;
    sc.seq = 4096;
    sc.hardware = config::load_hardware_nodes("dgx-h100", None, Some(4)).unwrap();
    let mut exposed = Vec::new();
    let mut bytes = Vec::new();
    for s in [Strategy::Sequential, Strategy::Bulk, Strategy::Flash] {
        let mut sites = std::collections::BTreeMap::new();
        sites.insert("dp".to_string(), s);
        sc.site_strategies = sites;
        let r = run_strategy(&sc, Strategy::Sequential, &opts()).unwrap();
        let dp_bytes: u64 = r
            .plan
            .ops
            .iter()
            .filter(|o| r.plan.streams[o.stream as usize].name.starts_with("dp-"))
            .filter_map(|o| match o.kind {
                OpKind::Send { bytes, .. } => Some(bytes),
                _ => None,
            })
            .sum();
        // A symmetric plan holds some replicas; each stands for world / held ranks.
        let held = r.plan.symmetry.unwrap_or(r.plan.ranks) as u64;
        bytes.push(dp_bytes * r.plan.ranks as u64 / held);
        exposed.push(r.metrics.makespan);
    }
    let p = flashoverlap::strategy::layer::LayerShape::of(&sc);
    let per_rank_layer = p.layer_params() / 8 * 2; // bf16, tp 8
    let head = p.vocab * p.hidden / 8 * 2;
    // Per rank (ZeRO-3, the scenario's default): (dp−1)/dp of each layer's shard for
    // the forward's AG, the backward's AG again (ZeRO-3 frees gathered parameters after
    // the forward) and the RS, and of the head's.
    assert_eq!(sc.zero, 3);
    let want = 32 * (4 * 3 * per_rank_layer + head) * 3 / 4;
    assert_eq!(bytes[0], want, "sequential");
    assert_eq!(bytes[1], want, "bulk");
    assert_eq!(bytes[2], want, "flash");
    assert!(
        exposed[1] < exposed[0],
        "bulk {} vs sequential {}",
        exposed[1],
        exposed[0]
    );
}

/// Ulysses (tp 2 × ulysses 2 × dp 2): each all-to-all moves (u − 1)/u of a rank's
/// tensor — QKV (its tokens × its share of the QKV width) before the attention and its
/// output (× h/tp) after it; backward the same in reverse — under both a2a strategies;
/// the model FLOPs are the replicas' (Ulysses splits work, it does not add any); and the
/// symmetric plan of the first replica gives the full plan's time.
#[test]
fn ulysses_all_to_alls_move_their_closed_form_bytes() {
    use flashoverlap::exec::sim;
    use flashoverlap::strategy::build_with;
    let mut sc = config::load_scenario("default").unwrap();
    sc.model = config::load_model("llama-3-8b", None).unwrap();
    sc.workload = Workload::Layer;
    sc.parallel.tp = 2;
    sc.parallel.ulysses = 2;
    sc.parallel.dp = 2;
    sc.batch = 1;
    sc.seq = 4096;
    sc.hardware = config::load_hardware_nodes("dgx-h100", None, Some(1)).unwrap();
    let p = flashoverlap::strategy::layer::LayerShape::of(&sc);
    assert_eq!(
        p.tokens(),
        2048,
        "each tensor-parallel group holds half the sequence"
    );
    let qkv = p.tokens() * p.qkv_width() / 2 / 2 * 2; // tokens × width/tp / u × bf16
    let out = p.tokens() * p.hidden / 2 / 2 * 2;
    for s in [Strategy::Flash, Strategy::FlashA2a] {
        let plan = build_with(&sc, sc.workload, s, false).unwrap();
        let mut by_site = std::collections::BTreeMap::<String, u64>::new();
        for o in &plan.ops {
            if let OpKind::Send { bytes, .. } = o.kind {
                let site = plan.sites[o.tag.site as usize].clone();
                if site.contains("a2a") {
                    *by_site.entry(site).or_default() += bytes;
                }
            }
        }
        // 8 ranks, one peer each (u − 1 = 1).
        assert_eq!(by_site["fwd.a2a-qkv"], 8 * qkv, "{s}");
        assert_eq!(by_site["fwd.a2a-out"], 8 * out, "{s}");
        assert_eq!(by_site["bwd.a2a-out"], 8 * out, "{s}");
        assert_eq!(by_site["bwd.a2a-qkv"], 8 * qkv, "{s}");
        let flops = plan.model_flops;
        assert!(
            (flops - 2.0 * p.layer_model_flops()).abs() <= 1e-9 * flops,
            "{s}"
        );
    }
    // One node of 8 GPUs turns by one GPU (an NVSwitch); tp·u = 4 GPUs a replica, so
    // the symmetric plan holds replica 0.
    sc.hardware = config::load_hardware("h100-sxm-8", None).unwrap();
    let o = opts().for_scenario(&sc);
    for s in [Strategy::Sequential, Strategy::FlashA2a] {
        let full = build_with(&sc, sc.workload, s, false).unwrap();
        let sym = build_with(&sc, sc.workload, s, true).unwrap();
        assert_eq!(sym.symmetry, Some(4));
        let end = |r: &sim::SimResult| r.times.iter().map(|t| t.end).fold(0.0, f64::max);
        let x = end(&sim::simulate(&full, &sc.hardware, &o).unwrap());
        let y = end(&sim::simulate(&sym, &sc.hardware, &o).unwrap());
        assert!((x - y).abs() <= 1e-9 * x, "{s}: full {x} vs symmetric {y}");
    }
}

/// The data-parallel `flash` gathers each forward weight fused with its GEMMs: under a
/// sequential tensor-parallel site (one GEMM per rank), the QKV GEMM becomes dp GEMMs of
/// the weight's column chunks, the own chunk's first with no wait for the data-parallel
/// group, every other after the recv that brought its chunk; `bulk` keeps one GEMM
/// behind a layer-wide gather.
#[test]
fn flash_data_parallelism_fuses_the_parameter_gather_into_the_forward_gemms() {
    use flashoverlap::strategy::build_with;
    let mut sc = config::load_scenario("default").unwrap();
    sc.model = config::load_model("llama-3-8b", None).unwrap();
    sc.workload = Workload::Layer;
    sc.parallel.tp = 4;
    sc.parallel.dp = 2;
    sc.batch = 1;
    sc.seq = 2048;
    let mut qkv_gemms = |dp_site: Strategy| {
        let mut sites = std::collections::BTreeMap::new();
        sites.insert("dp".to_string(), dp_site);
        sc.site_strategies = sites;
        let plan = build_with(&sc, sc.workload, Strategy::Sequential, false).unwrap();
        let qkv = plan.sites.iter().position(|x| x == "fwd.qkv").unwrap() as u16;
        let rank0: Vec<u32> = plan
            .ops
            .iter()
            .enumerate()
            .filter(|(_, o)| o.rank == 0 && o.tag.site == qkv)
            .filter(|(_, o)| matches!(o.kind, OpKind::Gemm { .. }))
            .map(|(i, _)| i as u32)
            .collect();
        let gated: Vec<bool> = rank0
            .iter()
            .map(|&g| {
                plan.deps(g).iter().any(|&d| {
                    let o = &plan.ops[d as usize];
                    matches!(o.kind, OpKind::Recv { .. })
                        && plan.streams[o.stream as usize].name == "dp-comm"
                })
            })
            .collect();
        (rank0.len(), gated)
    };
    assert_eq!(qkv_gemms(Strategy::Flash), (2, vec![false, true]));
    assert_eq!(qkv_gemms(Strategy::Bulk), (1, vec![false]));
}

/// Data parallelism over 16 GPUs of 2 nodes (tp 1): NCCL's channels carry the
/// gradient-sync rings across nodes through every NIC (each local GPU index sends across
/// and receives from across, channel c entering a node at its GPU c mod 8), so the exposed communication of a sequential layer is a fraction of what one
/// channel, through one NIC, leaves.
#[test]
fn data_parallel_rings_cross_nodes_on_every_rail() {
    use flashoverlap::strategy::build_with;
    let mut sc = config::load_scenario("default").unwrap();
    sc.model = config::load_model("llama-3-8b", None).unwrap();
    sc.workload = Workload::Layer;
    sc.parallel.tp = 1;
    sc.parallel.dp = 16;
    sc.batch = 1;
    sc.seq = 4096;
    sc.hardware = config::load_hardware_nodes("dgx-h100", None, Some(2)).unwrap();
    let plan = build_with(&sc, sc.workload, Strategy::Sequential, false).unwrap();
    let mut rails = std::collections::BTreeSet::new();
    for o in &plan.ops {
        if let OpKind::Send { peer, .. } = o.kind
            && o.rank / 8 != peer / 8
        {
            assert!(plan.streams[o.stream as usize].name.starts_with("dp-"));
            rails.insert((o.rank % 8, peer % 8));
        }
    }
    let out: std::collections::BTreeSet<u32> = rails.iter().map(|r| r.0).collect();
    let into: std::collections::BTreeSet<u32> = rails.iter().map(|r| r.1).collect();
    assert_eq!((out.len(), into.len()), (8, 8), "{rails:?}");
    let exposed = |sc: &Scenario| {
        let m = run_strategy(sc, Strategy::Sequential, &opts())
            .unwrap()
            .metrics;
        m.makespan - m.compute
    };
    let many = exposed(&sc);
    sc.hardware.comm.nccl.channels = Some(1);
    let one = exposed(&sc);
    assert!(many < one / 3.0, "{many} vs one channel {one}");
}

/// A tensor-parallel group of 16 over 2 nodes: its sequential all-gathers and
/// reduce-scatters run as NCCL rings on channels over every NIC, each ending in a join,
/// and expose a fraction of what one channel through one NIC leaves; Flash keeps its own
/// P2P messages on the comm streams.
#[test]
fn tensor_parallel_rings_across_nodes_run_on_nccl_channels() {
    use flashoverlap::plan::EltKind;
    use flashoverlap::strategy::build_with;
    let mut sc = config::load_scenario("default").unwrap();
    sc.model = config::load_model("llama-3-8b", None).unwrap();
    sc.workload = Workload::Layer;
    sc.parallel.tp = 16;
    sc.batch = 1;
    sc.seq = 8192;
    sc.hardware = config::load_hardware_nodes("dgx-h100", None, Some(2)).unwrap();
    let plan = build_with(&sc, sc.workload, Strategy::Sequential, false).unwrap();
    let mut out = std::collections::BTreeSet::new();
    for o in &plan.ops {
        let name = plan.streams[o.stream as usize].name.as_str();
        if let OpKind::Send { peer, .. } = o.kind
            && o.rank / 8 != peer / 8
        {
            assert!(name.starts_with("tp-ch"), "{name}");
            out.insert(o.rank % 8);
        }
    }
    assert_eq!(out.len(), 8, "{out:?}");
    let joins = plan
        .ops
        .iter()
        .filter(|o| {
            matches!(
                o.kind,
                OpKind::Elementwise {
                    kind: EltKind::Join,
                    ..
                }
            )
        })
        .count();
    assert!(joins > 0 && joins % 16 == 0, "{joins}");
    let flash = build_with(&sc, sc.workload, Strategy::Flash, false).unwrap();
    assert!(flash.ops.iter().any(|o| {
        matches!(o.kind, OpKind::Send { peer, .. } if o.rank / 8 != peer / 8)
            && flash.streams[o.stream as usize].name == "comm"
    }));
    let exposed = |sc: &Scenario| {
        let m = run_strategy(sc, Strategy::Sequential, &opts())
            .unwrap()
            .metrics;
        m.exposed_comm
    };
    let many = exposed(&sc);
    sc.hardware.comm.nccl.channels = Some(1);
    let one = exposed(&sc);
    assert!(many < one / 3.0, "{many} vs one channel {one}");
}

/// A step's phases partition its time: the forward's and the backward's exposed
/// communication (each the union of its sites' intervals) add up to the rank's exposed
/// communication, even where sites communicate at once (a data-parallel gather beside a
/// tensor-parallel collective), where the sites' own figures add up to more.
#[test]
fn a_steps_phases_add_up_to_its_exposed_communication() {
    use flashoverlap::timeline::metrics::{phase_metrics, site_metrics};
    let mut sc = config::load_scenario("default").unwrap();
    sc.model = config::load_model("llama-3-8b", None).unwrap();
    sc.model.layers = 4;
    sc.workload = Workload::Step;
    sc.parallel.tp = 8;
    sc.parallel.dp = 4;
    sc.batch = 1;
    sc.seq = 4096;
    sc.hardware = config::load_hardware_nodes("dgx-h100", None, Some(4)).unwrap();
    for s in [Strategy::Sequential, Strategy::Bulk, Strategy::Flash] {
        let r = run_strategy(&sc, s, &opts()).unwrap();
        let m = &r.metrics;
        let phases = phase_metrics(&r.timeline, m.critical_rank);
        let names: Vec<&str> = phases.iter().map(|p| p.site.as_str()).collect();
        assert_eq!(names, ["fwd", "bwd"], "{s}");
        let sum: f64 = phases.iter().map(|p| p.exposed_comm).sum();
        assert!(
            (sum - m.exposed_comm).abs() <= 1e-9 * m.exposed_comm.max(1e-12),
            "{s}: phases {sum} vs rank {}",
            m.exposed_comm
        );
        let sites: f64 = site_metrics(&r.timeline, m.critical_rank)
            .iter()
            .map(|x| x.exposed_comm)
            .sum();
        assert!(sites >= sum - 1e-12, "{s}");
    }
}

/// A pipeline step on the 8-GPU mesh: tp 4 / ulysses × dp × pp 2 … with `layers` layers.
fn pipeline(gbps: f64, free_compute: bool, dp: u64, pp: u64, layers: u64) -> Scenario {
    let mut sc = scenario_u(Workload::Step, gbps, free_compute, dp, 1);
    sc.parallel.tp = 8 / (dp * pp);
    sc.parallel.pp = pp;
    sc.model.layers = layers;
    sc.micro_batches = 4;
    sc
}

const SCHEDULES: [&str; 3] = ["1f1b", "gpipe", "interleaved:2"];

/// With pipeline stages the critical-path checks hold as for one stage: communication
/// free, the step takes the compute critical path (the stages' schedules and the P2P
/// waits are in it); compute free, the communication critical path. Every schedule,
/// with tp and dp around the pipeline, and recomputation.
#[test]
fn pipeline_steps_follow_their_critical_paths() {
    use flashoverlap::scenario::{PpSchedule, Recompute};
    for (dp, pp) in [(1, 2), (2, 2), (1, 4)] {
        for sched in SCHEDULES {
            for free_compute in [false, true] {
                let gbps = if free_compute { 100.0 } else { 1e290 };
                let mut sc = pipeline(gbps, free_compute, dp, pp, 8);
                sc.parallel.pp_schedule = PpSchedule::parse(sched).unwrap();
                for s in [Strategy::Sequential, Strategy::Chunked(2), Strategy::Flash] {
                    for rc in [Recompute::None, Recompute::Full] {
                        sc.recompute = rc;
                        let r = run_strategy(&sc, s, &opts()).unwrap();
                        r.plan.check_deadlock_free().unwrap();
                        let link = gbps * 1e9;
                        let want =
                            critical_path(&r.plan, &sc.hardware.gpu, &sc.hardware.topology, link);
                        let got = r.metrics.makespan;
                        assert!(
                            (got - want).abs() <= 1e-9 * want,
                            "dp {dp} pp {pp} {sched} {s} {rc:?} free compute {free_compute}: simulated {got} vs critical path {want}"
                        );
                    }
                }
            }
        }
    }
}

/// Equal stages, free communication: the bubble is the schedule's closed form,
/// (P − 1)/(m + P − 1) for 1F1B and GPipe, the bubble time divided by V interleaved.
/// The embedding and the loss are made free and the vocabulary empty, so the stages are
/// equal; the bubble then matches to rounding.
#[test]
fn the_pipeline_bubble_is_the_schedules_closed_form() {
    use flashoverlap::scenario::PpSchedule;
    use flashoverlap::strategy::layer::pipeline::bubble_fraction;
    for (pp, m) in [(2, 4), (4, 4), (4, 8), (8, 16)] {
        for sched in SCHEDULES {
            let schedule = PpSchedule::parse(sched).unwrap();
            let mut sc = pipeline(1e290, false, 1, pp, 16);
            sc.parallel.tp = 1;
            sc.micro_batches = m;
            sc.parallel.pp_schedule = schedule;
            sc.model.vocab = 0;
            let g = &mut sc.hardware.gpu;
            g.hbm_bandwidth = 1e30;
            g.elementwise.launch = 0.0;
            let r = run_strategy(&sc, Strategy::Sequential, &opts()).unwrap();
            let got = r.metrics.bubble.unwrap();
            let want = bubble_fraction(schedule, pp, m);
            assert!(
                (got - want).abs() <= 1e-9 * want,
                "pp {pp} m {m} {sched}: bubble {got} vs closed form {want}"
            );
            // Without stages there is no bubble to report.
            if pp == 2 && sched == "1f1b" {
                let mut one = sc.clone();
                one.parallel.pp = 1;
                let r = run_strategy(&one, Strategy::Sequential, &opts()).unwrap();
                assert_eq!(r.metrics.bubble, None);
            }
        }
    }
    // Interleaving shrinks the bubble by about V.
    let b1 = bubble_fraction(PpSchedule::OneFOneB, 4, 8);
    let b2 = bubble_fraction(PpSchedule::Interleaved(2), 4, 8);
    assert!(b2 < 0.6 * b1);
}

/// A pipeline of 2 stages × tp 2 × dp 2 on a rail fabric of 4 nodes × 2 GPUs, ranks
/// `tp-pp-dp`: the topology turns by one leaf group (4 GPUs, one whole replica), so a
/// symmetric plan holds 1 of the 2 replicas and must give the full plan's times; under
/// `tp-inner` (stages outermost) no rotation moves whole replicas and the plan is full.
#[test]
fn a_symmetric_pipeline_step_equals_the_full_one() {
    use flashoverlap::exec::sim;
    use flashoverlap::scenario::RankOrder;
    use flashoverlap::strategy::build_with;
    let mut sc = config::load_scenario("default").unwrap();
    sc.model = config::load_model("llama-3-8b", None).unwrap();
    sc.model.layers = 4;
    sc.workload = Workload::Step;
    sc.parallel.tp = 2;
    sc.parallel.dp = 2;
    sc.parallel.pp = 2;
    sc.parallel.order = RankOrder::TpPpDp;
    sc.micro_batches = 4;
    sc.batch = 1;
    sc.seq = 1024;
    sc.hardware = config::load_hardware_nodes("dgx-h100", None, Some(4)).unwrap();
    sc.hardware.topology = Topology::rail_fat_tree(
        "rail",
        &flashoverlap::topology::RailFatTreeSpec {
            nodes: 4,
            gpus_per_node: 2,
            nodes_per_leaf: 2,
            nvlink: LinkSpec {
                bandwidth: 370e9,
                latency: 0.5e-6,
            },
            nic: LinkSpec {
                bandwidth: 48e9,
                latency: 1e-6,
            },
            spine_latency: 1e-6,
            oversubscription: 2.0,
        },
    )
    .unwrap();
    let o = opts().for_scenario(&sc);
    for s in [Strategy::Sequential, Strategy::Bulk, Strategy::Flash] {
        let full = build_with(&sc, sc.workload, s, false).unwrap();
        let sym = build_with(&sc, sc.workload, s, true).unwrap();
        assert_eq!(sym.symmetry, Some(4), "{s}");
        assert_eq!(
            2 * sym.op_count(),
            full.op_count(),
            "{s}: half the replicas"
        );
        let a = sim::simulate(&full, &sc.hardware, &o).unwrap();
        let b = sim::simulate(&sym, &sc.hardware, &o).unwrap();
        let end = |r: &sim::SimResult| r.times.iter().map(|t| t.end).fold(0.0, f64::max);
        let (x, y) = (end(&a), end(&b));
        assert!((x - y).abs() <= 1e-9 * x, "{s}: full {x} vs symmetric {y}");
    }
    sc.parallel.order = RankOrder::TpInner;
    let p = build_with(&sc, sc.workload, Strategy::Flash, true).unwrap();
    assert_eq!(p.symmetry, None);
}

/// Stage-to-stage messages: each tensor rank sends its sequence-parallel shard of every
/// micro-batch's activation to the same tensor rank of the next stage, and its gradient
/// back: 2 · (P − 1) · m · tp · dp messages of tokens/tp · h · 2 bytes, to the ranks the
/// rank order puts there.
#[test]
fn stages_exchange_one_shard_per_micro_batch_each_way() {
    use flashoverlap::scenario::RankOrder;
    let mut sc = pipeline(100.0, false, 2, 2, 4);
    sc.parallel.tp = 2;
    for order in [RankOrder::TpInner, RankOrder::TpPpDp] {
        sc.parallel.order = order;
        let plan =
            &flashoverlap::strategy::build_with(&sc, sc.workload, Strategy::Flash, false).unwrap();
        let stage_of = |rank: u32| match order {
            RankOrder::TpPpDp => (rank / 2) % 2,
            _ => rank / 4,
        };
        let site = |name: &str| plan.sites.iter().position(|x| x == name).unwrap() as u16;
        let (fwd, bwd) = (site("pp.fwd"), site("pp.bwd"));
        let shard = sc.tokens() / 2 * sc.model.hidden * 2;
        let mut n = 0;
        for o in &plan.ops {
            if let OpKind::Send { peer, bytes, .. } = o.kind {
                if o.tag.site != fwd && o.tag.site != bwd {
                    continue;
                }
                n += 1;
                assert_eq!(bytes, shard);
                // Same tensor rank, same replica, the neighbouring stage.
                assert_eq!(peer % 2, o.rank % 2);
                let (a, b) = (stage_of(o.rank), stage_of(peer));
                if o.tag.site == fwd {
                    assert_eq!((a, b), (0, 1));
                } else {
                    assert_eq!((a, b), (1, 0));
                }
            }
        }
        assert_eq!(n, 2 * 4 * 2 * 2, "{order:?}");
    }
}

/// A MoE block (workload `moe`) with compute free on a contention-free full mesh: its
/// time is the critical path of its messages. `sequential` runs its all-to-alls on one
/// stream and flash-ep its dispatch step j beside combine step j − 1, on different
/// links for an even ep; `chunked:K` runs chunk c + 1's dispatch beside chunk c's
/// combine on the same pairs, and `flash-ep:G` a later dispatch beside an earlier
/// group's combines, which this contention-free path does not model.
#[test]
fn a_moe_block_with_compute_free_is_its_communication_critical_path() {
    let gbps = 100.0;
    for (model, ep) in [("mixtral-8x7b", 4), ("mixtral-8x7b", 8), ("deepseek-v3", 8)] {
        let mut sc = config::load_scenario("default").unwrap();
        sc.model = config::load_model(model, None).unwrap();
        sc.workload = Workload::Moe;
        sc.parallel.tp = 1;
        sc.parallel.ep = ep;
        sc.forward_only = true;
        sc.batch = 1;
        sc.seq = 2048;
        sc.interference = false;
        sc.hardware.comm.message_latency = 0.0;
        sc.hardware.comm.step_latency = 0.0;
        sc.hardware.topology = Topology::full_mesh(
            "mesh",
            ep,
            LinkSpec {
                bandwidth: gbps * 1e9,
                latency: 0.0,
            },
        )
        .unwrap();
        make_compute_free(&mut sc.hardware.gpu);
        for s in [Strategy::Sequential, Strategy::FlashEp(1)] {
            let r = run_strategy(&sc, s, &opts()).unwrap();
            let want = critical_path(&r.plan, &sc.hardware.gpu, &sc.hardware.topology, gbps * 1e9);
            let got = r.metrics.makespan;
            assert!(
                (got - want).abs() <= 1e-9 * want,
                "{model} ep {ep} {s}: simulated {got} vs communication critical path {want}"
            );
            assert!(r.metrics.compute < 1e-6 * got, "{model} {s}");
        }
    }
}

/// A mixture-of-experts model's layer or step on 8 GPUs of a contention-free full
/// mesh: `tp` × `ulysses` × `dp` (× `pp` for a step) with expert-parallel groups of
/// `ep` drawn from each stage's ranks, every layer a MoE one (Mixtral, two layers).
/// (tp, ulysses, dp, pp, ep).
type MoeLayout = (u64, u64, u64, u64, u64);

fn moe_layers(workload: Workload, gbps: f64, free_compute: bool, par: MoeLayout) -> Scenario {
    let (tp, u, dp, pp, ep) = par;
    let mut sc = scenario_u(workload, gbps, free_compute, dp, u);
    sc.model = config::load_model("mixtral-8x7b", None).unwrap();
    sc.model.layers = 2;
    sc.parallel.tp = tp;
    sc.parallel.pp = pp;
    sc.parallel.ep = ep;
    sc.micro_batches = pp;
    sc
}

/// (workload, tp, ulysses, dp, pp, ep): expert groups inside a tensor-parallel group's
/// replicas, across them, over the whole stage, across Ulysses ranks, and a pipeline of
/// two stages.
const MOE_CASES: [(Workload, MoeLayout); 6] = [
    (Workload::Layer, (2, 1, 4, 1, 4)),
    (Workload::Layer, (1, 1, 8, 1, 8)),
    (Workload::Layer, (4, 1, 2, 1, 2)),
    (Workload::Layer, (2, 2, 2, 1, 8)),
    (Workload::Step, (2, 1, 2, 2, 4)),
    (Workload::Step, (1, 2, 2, 2, 2)),
];

/// MoE layers composed with tp, dp and pp follow the compute critical path when
/// communication is free, under every strategy the MoE sites run (a tensor-parallel
/// strategy with `sequential` MoE sites included).
#[test]
fn moe_layers_with_communication_free_are_their_compute_critical_path() {
    for (w, par) in MOE_CASES {
        let sc = moe_layers(w, 1e290, false, par);
        for s in [
            Strategy::Sequential,
            Strategy::Chunked(2),
            Strategy::Flash,
            Strategy::Bulk,
        ] {
            let r = run_strategy(&sc, s, &opts()).unwrap();
            let want = critical_path(&r.plan, &sc.hardware.gpu, &sc.hardware.topology, 1e290);
            let got = r.metrics.makespan;
            assert!(
                (got - want).abs() <= 1e-9 * want,
                "{w:?} {par:?} {s}: simulated {got} vs compute critical path {want}"
            );
        }
    }
}

/// With compute free, `sequential` (every all-to-all, ring and pipeline message in a
/// chain of its own) is the critical path of its messages.
#[test]
fn moe_layers_with_compute_free_are_their_communication_critical_path() {
    let gbps = 100.0;
    for (w, par) in MOE_CASES {
        let sc = moe_layers(w, gbps, true, par);
        let r = run_strategy(&sc, Strategy::Sequential, &opts()).unwrap();
        let want = critical_path(&r.plan, &sc.hardware.gpu, &sc.hardware.topology, gbps * 1e9);
        let got = r.metrics.makespan;
        assert!(
            (got - want).abs() <= 1e-9 * want,
            "{w:?} {par:?}: simulated {got} vs communication critical path {want}"
        );
        assert!(r.metrics.compute < 1e-6 * got, "{w:?} {par:?}");
    }
}

/// Every rank of a MoE layer dispatches its own tokens' remote top-k rows once and gets
/// them back once, in each pass: with uniform routing, T/tp · k · (ep − 1)/ep rows of h
/// each way; the messages stay in the rank's expert-parallel group (ep consecutive
/// ranks); the expert gradients go round the expert data-parallel group (ranks e, ep +
/// e, …: (edp − 1) pieces of each rank's experts over edp), and dense layers have none.
#[test]
fn moe_layers_move_their_closed_form_bytes_within_their_groups() {
    for (tp, dp, ep) in [(2u64, 4u64, 4u64), (1, 8, 8), (4, 2, 2), (2, 4, 8)] {
        let sc = moe_layers(Workload::Layer, 100.0, false, (tp, 1, dp, 1, ep));
        let r = run_strategy(&sc, Strategy::Flash, &opts()).unwrap();
        let plan = &r.plan;
        let (h, k) = (4096u64, 2u64);
        let rank_tokens = sc.batch * sc.seq / tp;
        let rows = rank_tokens * k * (ep - 1) / ep;
        let site = |name: &str| plan.sites.iter().position(|s| s == name).map(|i| i as u16);
        let edp = tp * dp / ep;
        // A symmetric plan holds the first `held` ranks; each stands for its replicas.
        let held = plan.symmetry.unwrap_or(plan.ranks) as usize;
        for name in ["fwd.dispatch", "fwd.combine", "bwd.combine", "bwd.dispatch"] {
            let id = site(name).unwrap_or_else(|| panic!("{name} missing"));
            let mut sent = [0u64; 8];
            for o in &plan.ops {
                if let OpKind::Send { peer, bytes, .. } = o.kind
                    && o.tag.site == id
                {
                    assert_eq!(
                        o.rank as u64 / ep,
                        peer as u64 / ep,
                        "{name}: crosses groups"
                    );
                    sent[o.rank as usize] += bytes;
                }
            }
            for (r, b) in sent.iter().enumerate().take(held) {
                assert_eq!(*b, rows * h * 2, "tp {tp} dp {dp} ep {ep} {name} rank {r}");
            }
        }
        let experts = 8 / ep * 4096 * 3 * 14336;
        let edp_sent: u64 = plan
            .ops
            .iter()
            .filter(|o| Some(o.tag.site) == site("bwd.edp-rs"))
            .map(|o| match o.kind {
                OpKind::Send { peer, bytes, .. } => {
                    assert_eq!(o.rank as u64 % ep, peer as u64 % ep, "edp ring");
                    bytes
                }
                _ => 0,
            })
            .sum();
        assert_eq!(
            edp_sent,
            held as u64 * (edp - 1) * (experts / edp * 2),
            "tp {tp} dp {dp} ep {ep}"
        );
    }
}

/// Symmetric MoE steps (replicas held where the rotation moves whole expert groups)
/// equal the full plan.
#[test]
fn a_symmetric_moe_step_equals_the_full_one() {
    use flashoverlap::exec::sim;
    use flashoverlap::strategy::build_with;
    let mut sc = moe_layers(Workload::Step, 100.0, false, (2, 1, 4, 1, 2));
    sc.micro_batches = 2;
    sc.hardware = config::load_hardware_nodes("dgx-h100", None, Some(4)).unwrap();
    sc.hardware.topology = Topology::rail_fat_tree(
        "rail",
        &flashoverlap::topology::RailFatTreeSpec {
            nodes: 4,
            gpus_per_node: 2,
            nodes_per_leaf: 2,
            nvlink: LinkSpec {
                bandwidth: 370e9,
                latency: 0.5e-6,
            },
            nic: LinkSpec {
                bandwidth: 48e9,
                latency: 1e-6,
            },
            spine_latency: 1e-6,
            oversubscription: 2.0,
        },
    )
    .unwrap();
    let o = opts().for_scenario(&sc);
    for s in [Strategy::Sequential, Strategy::Flash] {
        let full = build_with(&sc, sc.workload, s, false).unwrap();
        let sym = build_with(&sc, sc.workload, s, true).unwrap();
        assert!(sym.symmetry.is_some(), "{s}");
        assert!(sym.op_count() < full.op_count(), "{s}");
        let a = sim::simulate(&full, &sc.hardware, &o).unwrap();
        let b = sim::simulate(&sym, &sc.hardware, &o).unwrap();
        let end = |r: &sim::SimResult| r.times.iter().map(|t| t.end).fold(0.0, f64::max);
        let (x, y) = (end(&a), end(&b));
        assert!((x - y).abs() <= 1e-9 * x, "{s}: full {x} vs symmetric {y}");
    }
}

/// With communication, interference and pipeline stages, the compute critical path lies
/// between the busiest stream's compute and the simulated makespan: the two floors the
/// search prunes by never pass the step they stand for.
#[test]
fn the_compute_critical_path_lies_between_the_busiest_stream_and_the_makespan() {
    for (pp, dp, m) in [(1, 2, 2), (2, 2, 4), (4, 1, 6)] {
        let mut sc = config::load_scenario("default").unwrap();
        sc.model = config::load_model("llama-3-8b", None).unwrap();
        sc.model.layers = 4;
        sc.workload = Workload::Step;
        sc.parallel.tp = 8 / (pp * dp);
        sc.parallel.pp = pp;
        sc.parallel.dp = dp;
        sc.batch = 1;
        sc.micro_batches = m;
        sc.seq = 2048;
        for s in [Strategy::Sequential, Strategy::Chunked(4), Strategy::Flash] {
            let r = run_strategy(&sc, s, &opts()).unwrap();
            let cp = compute_critical_path(&r.plan, &sc.hardware).unwrap();
            let busiest = stream_compute(&r.plan, &sc.hardware)
                .unwrap()
                .into_iter()
                .fold(0.0, f64::max);
            let got = r.metrics.makespan;
            assert!(
                busiest <= cp * (1.0 + 1e-12),
                "pp {pp} {s}: {busiest} > {cp}"
            );
            assert!(cp <= got * (1.0 + 1e-12), "pp {pp} {s}: {cp} > {got}");
            if pp > 1 {
                // The fill and drain: the path is well above any one stream's work.
                assert!(cp > 1.05 * busiest, "pp {pp} {s}: {cp} vs {busiest}");
            }
        }
    }
}
