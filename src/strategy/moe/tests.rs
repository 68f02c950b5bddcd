//! Closed-form checks of the MoE block on the engine (the module's documentation derives
//! them).

use super::*;
use crate::config;
use crate::cost::{elementwise_time, gemm_time, grouped_gemm_time};
use crate::exec::sim::SimOptions;
use crate::scenario::{GpuSpec, Scenario, Workload};
use crate::simulate::run_strategy;
use crate::topology::{LinkSpec, Topology};

const TOL: f64 = 1e-6;

fn close(got: f64, want: f64, what: &str) {
    let rel = (got - want).abs() / want.abs().max(1e-30);
    assert!(
        rel <= TOL,
        "{what}: got {got:e}, want {want:e} (rel {rel:e})"
    );
}

/// `model` at ep `ep` on an NVSwitch node of `gbps` links (0.5 µs each), `tokens` per
/// rank, interference off.
fn scenario(model: &str, ep: u64, gbps: f64, tokens: u64, routing: Routing) -> Scenario {
    let mut sc = config::load_scenario("default").unwrap();
    sc.model = config::load_model(model, None).unwrap();
    sc.workload = Workload::Moe;
    sc.parallel.tp = 1;
    sc.parallel.ep = ep;
    sc.batch = 1;
    sc.seq = tokens;
    sc.interference = false;
    sc.routing = routing;
    // The closed forms are the forward's.
    sc.forward_only = true;
    sc.hardware.topology = Topology::nvswitch(
        "t",
        ep,
        LinkSpec {
            bandwidth: gbps * 1e9,
            latency: 0.5e-6,
        },
    )
    .unwrap();
    sc
}

/// Links so fast and latencies so small that communication costs nothing.
fn free(sc: &mut Scenario) {
    sc.hardware.comm.message_latency = 0.0;
    sc.hardware.comm.step_latency = 0.0;
    sc.hardware.topology = Topology::nvswitch(
        "free",
        sc.parallel.ep,
        LinkSpec {
            bandwidth: 1e30,
            latency: 0.0,
        },
    )
    .unwrap();
}

fn makespan(sc: &Scenario, s: Strategy) -> (f64, f64) {
    let r = run_strategy(sc, s, &SimOptions::default()).unwrap();
    (r.metrics.makespan, r.metrics.exposed_comm)
}

/// FC1, activation, FC2 of `rows` routed rows on one rank (grouped over its experts), or
/// of the shared experts over `rows` tokens.
fn ffn(g: &GpuSpec, s: &MoeShape, rows: u64, shared: bool) -> f64 {
    let d = s.dtype;
    let elt = d.bytes();
    if shared {
        if s.shared_ffn == 0 {
            return 0.0;
        }
        return gemm_time(g, rows, s.shared_fc1, s.hidden, d).unwrap()
            + elementwise_time(g, rows * (s.shared_fc1 + s.shared_ffn) * elt)
            + gemm_time(g, rows, s.hidden, s.shared_ffn, d).unwrap();
    }
    let e = s.local_experts();
    let m = rows.div_ceil(e);
    grouped_gemm_time(g, e, m, s.expert_fc1, s.hidden, d).unwrap()
        + elementwise_time(g, e * m * (s.expert_fc1 + s.expert_ffn) * elt)
        + grouped_gemm_time(g, e, m, s.hidden, s.expert_ffn, d).unwrap()
}

fn router(g: &GpuSpec, s: &MoeShape) -> f64 {
    gemm_time(g, s.tokens, s.experts, s.hidden, s.dtype).unwrap()
}

/// With communication free, sequential is router + every row's experts + shared experts,
/// and flash-ep:G is router + shared + one grouped FFN per group of G sources + own.
#[test]
fn with_free_links_each_strategy_is_its_compute_chain() {
    for (model, ep) in [("deepseek-v3", 8), ("mixtral-8x7b", 4), ("mixtral-8x7b", 8)] {
        let mut sc = scenario(model, ep, 100.0, 2048, Routing::Uniform);
        free(&mut sc);
        let s = MoeShape::of(&sc).unwrap();
        let g = &sc.hardware.gpu;
        let per = s.rows_to(0, s.tokens);
        let (seq, _) = makespan(&sc, Strategy::Sequential);
        let want = router(g, &s) + ffn(g, &s, ep * per, false) + ffn(g, &s, s.tokens, true);
        close(seq, want, &format!("{model} ep {ep} sequential"));
        for group in [1u64, 2, 3, ep - 1] {
            let (t, exposed) = makespan(&sc, Strategy::FlashEp(group as u32));
            let remote = ep - 1;
            let full = remote / group;
            let rest = remote % group;
            let want = router(g, &s)
                + ffn(g, &s, s.tokens, true)
                + full as f64 * ffn(g, &s, group * per, false)
                + if rest > 0 {
                    ffn(g, &s, rest * per, false)
                } else {
                    0.0
                }
                + ffn(g, &s, per, false);
            close(t, want, &format!("{model} ep {ep} flash-ep:{group}"));
            assert!(
                exposed < 1e-12,
                "{model} flash-ep:{group} exposes {exposed}"
            );
        }
    }
}

/// Sequential on an NVSwitch: two all-to-alls around the experts, each a group of a
/// rank's ep − 1 messages of p bytes sharing its link: α + (ep − 1) · p / B.
#[test]
fn sequential_is_two_all_to_alls_around_the_experts() {
    for ep in [2, 4, 8] {
        let sc = scenario("deepseek-v3", ep, 200.0, 4096, Routing::Uniform);
        let s = MoeShape::of(&sc).unwrap();
        let g = &sc.hardware.gpu;
        let per = s.rows_to(0, s.tokens);
        let p = (per * s.hidden * s.dtype.bytes()) as f64 / (200.0 * 1e9);
        let a2a = sc.hardware.comm.message_latency + 1e-6 + (ep - 1) as f64 * p;
        let (t, exposed) = makespan(&sc, Strategy::Sequential);
        let compute = router(g, &s) + ffn(g, &s, ep * per, false) + ffn(g, &s, s.tokens, true);
        close(t, compute + 2.0 * a2a, &format!("sequential ep {ep}"));
        close(exposed, 2.0 * a2a, &format!("sequential ep {ep} exposed"));
    }
}

/// flash-ep in the compute-bound regime (message τ with 4τ ≤ one source's experts c and
/// the shared experts s ≥ τ): every message hides under compute, the block ends with
/// the own tokens' experts at router + s + ep · c, nothing exposed.
#[test]
fn flash_ep_hides_every_message_when_compute_bound() {
    for ep in [4, 8] {
        let sc = scenario("deepseek-v3", ep, 370.0, 4096, Routing::Uniform);
        let s = MoeShape::of(&sc).unwrap();
        let g = &sc.hardware.gpu;
        let per = s.rows_to(0, s.tokens);
        let tau = sc.hardware.comm.message_latency
            + 1e-6
            + (per * s.hidden * s.dtype.bytes()) as f64 / 370e9;
        let c = ffn(g, &s, per, false);
        let sh = ffn(g, &s, s.tokens, true);
        assert!(
            4.0 * tau <= c && sh >= tau,
            "the regime: τ {tau} c {c} s {sh}"
        );
        let (t, exposed) = makespan(&sc, Strategy::FlashEp(1));
        close(
            t,
            router(g, &s) + sh + ep as f64 * c,
            &format!("flash-ep ep {ep}"),
        );
        assert!(exposed < 1e-12, "flash-ep ep {ep} exposes {exposed}");
    }
}

/// Skew: with loads 3:1:1:1 rank 0 holds half the routed rows (imbalance 2×) and, with
/// free links, flash-ep ends when rank 0 has run its four sources' rows.
#[test]
fn a_skewed_router_makes_the_busiest_rank_the_tail() {
    let mut sc = scenario(
        "mixtral-8x7b",
        4,
        100.0,
        2048,
        Routing::Loads(vec![3.0, 1.0, 1.0, 1.0]),
    );
    free(&mut sc);
    let s = MoeShape::of(&sc).unwrap();
    close(s.imbalance(), 2.0, "imbalance");
    let g = &sc.hardware.gpu;
    let hot = s.rows_to(0, s.tokens);
    assert_eq!(hot, 2048 * 2 / 2);
    let (t, _) = makespan(&sc, Strategy::FlashEp(1));
    close(
        t,
        router(g, &s) + 4.0 * ffn(g, &s, hot, false),
        "skewed flash-ep",
    );
    // Zipf over experts in order: rank 0 holds the most popular experts.
    let z = Routing::Zipf(1.0).rank_shares(8, 4);
    assert!(z.windows(2).all(|w| w[0] > w[1]), "{z:?}");
    close(z.iter().sum::<f64>(), 1.0, "zipf shares");
}

/// Every routed row goes out once and its output comes back once: the bytes sent are
/// twice the remote rows' bytes, under every strategy and routing.
#[test]
fn dispatch_and_combine_move_every_remote_row_once() {
    for routing in [Routing::Uniform, Routing::Zipf(0.8)] {
        let sc = scenario("mixtral-8x7b", 8, 100.0, 4096, routing.clone());
        let s = MoeShape::of(&sc).unwrap();
        for st in [
            Strategy::Sequential,
            Strategy::Chunked(4),
            Strategy::FlashEp(1),
            Strategy::FlashEp(3),
        ] {
            let plan = build(&s, st).unwrap();
            let t = if let Strategy::Chunked(k) = st {
                s.tokens / k as u64
            } else {
                s.tokens
            };
            let chunks = s.tokens / t;
            let remote: u64 = (0..8).map(|d| 7 * s.rows_to(d, t) * chunks).sum::<u64>();
            assert_eq!(
                plan.bytes_sent(),
                2 * remote * s.hidden * s.dtype.bytes(),
                "{st} {routing:?}"
            );
        }
    }
}

#[test]
fn strategies_outside_the_moe_set_are_refused() {
    let sc = scenario("mixtral-8x7b", 4, 100.0, 4096, Routing::Uniform);
    let s = MoeShape::of(&sc).unwrap();
    for st in [Strategy::Direct, Strategy::FlashA2a, Strategy::Bulk] {
        assert!(build(&s, st).is_err(), "{st}");
    }
    assert!(
        check(Strategy::Chunked(3), &s).is_err(),
        "4096 tokens in 3 chunks"
    );
    // flash is flash-ep in a MoE block.
    let a = build(&s, Strategy::Flash).unwrap();
    let b = build(&s, Strategy::FlashEp(1)).unwrap();
    assert_eq!(
        (a.op_count(), a.bytes_sent()),
        (b.op_count(), b.bytes_sent())
    );
}

/// The backward with free links: after the forward, flash-ep runs the shared experts'
/// dgrads, each source's dgrad chain (FC2 dgrad, activation, FC1 dgrad) and the own
/// rows', then every weight gradient; sequential the routed dgrads over every row, the
/// weight gradients, then the shared experts' dgrads.
#[test]
fn the_backward_is_dgrads_then_wgrads() {
    let mut sc = scenario("deepseek-v3", 8, 100.0, 2048, Routing::Uniform);
    sc.forward_only = false;
    free(&mut sc);
    let s = MoeShape::of(&sc).unwrap();
    assert!(s.backward);
    let g = &sc.hardware.gpu;
    let d = s.dtype;
    let elt = d.bytes();
    let per = s.rows_to(0, s.tokens);
    let e = s.local_experts();
    let dgrad = |rows: u64, shared: bool| {
        let (groups, m, fc1, ffn) = if shared {
            (1, rows, s.shared_fc1, s.shared_ffn)
        } else {
            (e, rows.div_ceil(e), s.expert_fc1, s.expert_ffn)
        };
        grouped_gemm_time(g, groups, m, ffn, s.hidden, d).unwrap()
            + elementwise_time(g, groups * m * (2 * fc1 + ffn) * elt)
            + grouped_gemm_time(g, groups, m, s.hidden, fc1, d).unwrap()
    };
    let t = s.tokens;
    let m = (8 * per).div_ceil(e);
    let wgrads = grouped_gemm_time(g, e, s.expert_ffn, s.hidden, m, d).unwrap()
        + grouped_gemm_time(g, e, s.hidden, s.expert_fc1, m, d).unwrap()
        + gemm_time(g, s.shared_ffn, s.hidden, t, d).unwrap()
        + gemm_time(g, s.hidden, s.shared_fc1, t, d).unwrap()
        + gemm_time(g, t, s.hidden, s.experts, d).unwrap()
        + gemm_time(g, s.experts, s.hidden, t, d).unwrap();
    let fwd_flash = router(g, &s) + ffn(g, &s, t, true) + 8.0 * ffn(g, &s, per, false);
    let (flash, _) = makespan(&sc, Strategy::FlashEp(1));
    let bwd_flash = dgrad(t, true) + 8.0 * dgrad(per, false) + wgrads;
    close(
        flash,
        fwd_flash + bwd_flash,
        "flash-ep forward and backward",
    );
    let fwd_seq = router(g, &s) + ffn(g, &s, 8 * per, false) + ffn(g, &s, t, true);
    let (seq, _) = makespan(&sc, Strategy::Sequential);
    let bwd_seq = dgrad(8 * per, false) + wgrads + dgrad(t, true);
    close(seq, fwd_seq + bwd_seq, "sequential forward and backward");
}
