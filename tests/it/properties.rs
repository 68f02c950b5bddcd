//! Property tests of the engine and the strategies.

use flashoverlap::config;
use flashoverlap::cost::gemm_time;
use flashoverlap::exec::sim::SimOptions;
use flashoverlap::plan::OpKind;
use flashoverlap::scenario::{Scenario, Strategy, Workload};
use flashoverlap::simulate::run_strategy;
use flashoverlap::topology::{LinkSpec, Topology};
use proptest::prelude::{Just, ProptestConfig, prop_assert, prop_assert_eq, prop_oneof, proptest};
use proptest::strategy::Strategy as Gen;

fn scenario(tp: u64, batch: u64, seq: u64, gbps: f64, lat_us: f64, w: Workload) -> Scenario {
    let mut sc = config::load_scenario("default").unwrap();
    sc.parallel.tp = tp;
    sc.batch = batch;
    sc.seq = seq;
    sc.workload = w;
    sc.hardware.topology = Topology::nvswitch(
        "p",
        8,
        LinkSpec {
            bandwidth: gbps * 1e9,
            latency: lat_us * 1e-6,
        },
    )
    .unwrap();
    sc
}

fn strategies() -> impl Gen<Value = Strategy> {
    prop_oneof![
        Just(Strategy::Sequential),
        (1u32..=4).prop_map(|k| Strategy::Chunked(1 << (k - 1))),
        Just(Strategy::Flash),
        Just(Strategy::Direct),
        Just(Strategy::PermuteLoop),
    ]
}

fn workloads() -> impl Gen<Value = Workload> {
    prop_oneof![
        Just(Workload::AgGemm),
        Just(Workload::GemmRs),
        Just(Workload::Mlp)
    ]
}

fn opts() -> SimOptions {
    SimOptions {
        record_links: false,
        ..SimOptions::default()
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Makespan ≥ the compute on any rank (its GEMMs run in sequence on one stream) and
    /// ≥ the bytes a rank sends over its link's bandwidth.
    #[test]
    fn makespan_respects_lower_bounds(
        tp in prop_oneof![Just(2u64), Just(4), Just(8)],
        batch in 1u64..=8, seq_k in 1u64..=4, gbps in 10.0f64..1000.0,
        s in strategies(), w in workloads(),
    ) {
        let sc = scenario(tp, batch, seq_k * 1024, gbps, 0.5, w);
        let r = run_strategy(&sc, s, &opts()).unwrap();
        let g = &sc.hardware.gpu;
        for rank in 0..tp as u32 {
            let mut compute = 0.0;
            let mut sent = 0u64;
            for o in r.plan.ops.iter().filter(|o| o.rank == rank) {
                match o.kind {
                    OpKind::Gemm {
                        m,
                        n,
                        k,
                        dtype,
                        reuses_b,
                    } => {
                        compute += if reuses_b {
                            flashoverlap::cost::gemm_time_warm(g, m, n, k, dtype)
                        } else {
                            gemm_time(g, m, n, k, dtype)
                        }
                        .unwrap()
                    }
                    OpKind::Send { bytes, .. } => sent += bytes,
                    _ => {}
                }
            }
            prop_assert!(r.metrics.makespan >= compute * (1.0 - 1e-12));
            prop_assert!(r.metrics.makespan >= sent as f64 / (gbps * 1e9) * (1.0 - 1e-12));
        }
        // Every byte sent is received, and every recv has its send.
        let recv: u64 = r.plan.ops.iter().filter(|o| matches!(o.kind, OpKind::Recv { .. })).map(|o| o.kind.bytes()).sum();
        prop_assert_eq!(recv, r.plan.bytes_sent());
        for (i, o) in r.plan.ops.iter().enumerate() {
            if matches!(o.kind, OpKind::Send { .. } | OpKind::Recv { .. }) {
                prop_assert!(r.plan.partner(i as u32) != flashoverlap::plan::NO_PARTNER);
            }
        }
        // The dependency graph (with rendezvous) is acyclic.
        prop_assert!(r.plan.check_deadlock_free().is_ok());
    }

    /// More bandwidth or less latency never makes a strategy slower (no interference,
    /// no jitter in the model).
    #[test]
    fn faster_links_never_hurt(
        tp in prop_oneof![Just(2u64), Just(4), Just(8)],
        batch in 1u64..=8, gbps in 10.0f64..500.0, factor in 1.0f64..10.0,
        lat in 0.0f64..5.0, s in strategies(), w in workloads(),
    ) {
        let mut slow = scenario(tp, batch, 2048, gbps, lat, w);
        let mut fast = scenario(tp, batch, 2048, gbps * factor, lat / factor, w);
        // The property holds for the model without interference (with it, a faster
        // transfer can overlap a GEMM it used to miss) and without jitter (none here).
        slow.interference = false;
        fast.interference = false;
        let a = run_strategy(&slow, s, &opts()).unwrap().metrics.makespan;
        let b = run_strategy(&fast, s, &opts()).unwrap().metrics.makespan;
        prop_assert!(b <= a * (1.0 + 1e-12), "slow {a} fast {b}");
    }

    /// Flash never exposes more communication than sequential.
    #[test]
    fn flash_exposes_no_more_than_sequential(
        tp in prop_oneof![Just(2u64), Just(4), Just(8)],
        batch in 1u64..=8, seq_k in 1u64..=4, gbps in 10.0f64..1000.0, w in workloads(),
    ) {
        let sc = scenario(tp, batch, seq_k * 1024, gbps, 0.5, w);
        let f = run_strategy(&sc, Strategy::Flash, &opts()).unwrap().metrics;
        let q = run_strategy(&sc, Strategy::Sequential, &opts()).unwrap().metrics;
        prop_assert!(f.exposed_comm <= q.exposed_comm * (1.0 + 1e-9) + 1e-12,
            "flash {} sequential {}", f.exposed_comm, q.exposed_comm);
    }
}
