//! Reports: the human table and the versioned JSON results document.

use crate::scenario::{Scenario, Workload};
use crate::simulate::ScenarioRun;
use serde::Serialize;

pub const FORMAT: &str = "flashoverlap-results";
/// 2: the figures under [`FIGURES`]' names (`mfu_ratio`, `overlap_efficiency_ratio`,
/// `speedup_vs_sequential_x`; version 1 had `mfu`, `overlap_efficiency`,
/// `speedup_vs_sequential`).
pub const VERSION: u32 = 2;

#[derive(Debug, Clone, Serialize)]
pub struct ResultsFile {
    pub format: &'static str,
    pub version: u32,
    pub scenario: ScenarioSummary,
    pub results: Vec<ResultRow>,
    /// Present when the run was sampled with jitter (`--samples`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub variability: Option<VariabilityReport>,
}

#[derive(Debug, Clone, Serialize)]
pub struct VariabilityReport {
    pub samples: u64,
    pub seed: u64,
    pub distribution: String,
    pub compute_cv: f64,
    pub comm_cv: f64,
    pub results: Vec<SampledRow>,
}

/// Microseconds.
#[derive(Debug, Clone, Serialize)]
pub struct SampledRow {
    pub strategy: String,
    pub makespan_us: crate::simulate::Spread,
    pub exposed_comm_us: crate::simulate::Spread,
}

fn spread_us(s: &crate::simulate::Spread) -> crate::simulate::Spread {
    crate::simulate::Spread {
        p50: us(s.p50),
        p90: us(s.p90),
        p99: us(s.p99),
        min: us(s.min),
        max: us(s.max),
        mean: us(s.mean),
    }
}

fn variability(run: &ScenarioRun) -> Option<VariabilityReport> {
    let s = run.sampling.as_ref()?;
    Some(VariabilityReport {
        samples: s.samples,
        seed: s.seed,
        distribution: s.params.distribution.name().into(),
        compute_cv: s.params.compute_cv,
        comm_cv: s.params.comm_cv,
        results: s
            .strategies
            .iter()
            .map(|r| SampledRow {
                strategy: r.strategy.to_string(),
                makespan_us: spread_us(&r.makespan),
                exposed_comm_us: spread_us(&r.exposed_comm),
            })
            .collect(),
    })
}

#[derive(Debug, Clone, Serialize)]
pub struct ScenarioSummary {
    pub name: String,
    pub workload: String,
    pub model: String,
    pub hardware: String,
    pub tp: u64,
    pub batch: u64,
    pub seq: u64,
    pub tokens: u64,
    pub dtype: String,
    pub transport: String,
    /// The GPU clocks predicted at: `burst` or `sustained`.
    pub clocks: String,
    /// Per-site strategy overrides of a layer or step.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub sites: std::collections::BTreeMap<String, String>,
    /// Whether compute was slowed by communication beside it (the scenario asked for it
    /// and the profile has parameters).
    pub interference: bool,
    /// Rank placement when there is data parallelism.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ranks: Option<RankMap>,
    /// The GPUs the run places ranks on, of all the hardware profile has.
    pub gpus: GpuUse,
    /// Memory per GPU at the peak (layers and steps).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryReport>,
    /// The mixture of experts of a `moe` workload.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub moe: Option<MoeReport>,
}

/// A `moe` workload's expert parallelism and routing.
#[derive(Debug, Clone, Serialize)]
pub struct MoeReport {
    pub ep: u64,
    pub experts: u64,
    pub experts_per_rank: u64,
    pub top_k: u64,
    /// `uniform`, `zipf:S` or the loads per rank as given.
    pub routing: String,
    /// Share of the routed token-slots each rank's experts get (sums to 1).
    pub rank_shares: Vec<f64>,
    /// The busiest rank's routed rows over the mean (1 when balanced).
    pub imbalance_x: f64,
    /// In layers and steps: the ranks of a stage that share each expert's weights (the
    /// expert data-parallel group, tp · ulysses · dp / ep), and the MoE site's strategy
    /// when one is set (`sites.moe`; else each run's strategy maps onto sequential,
    /// chunked:K or flash-ep).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expert_dp: Option<u64>,
    /// Layers of a step that are MoE ones (a family keeps its first few dense).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub moe_layers: Option<u64>,
}

fn moe_report(sc: &Scenario) -> Option<MoeReport> {
    let (m, expert_dp, moe_layers) = match sc.workload {
        Workload::Moe => (crate::strategy::moe::MoeShape::of(sc).ok()?, None, None),
        Workload::Layer | Workload::Step => {
            use crate::strategy::layer::{LayerShape, block_shape};
            let s = LayerShape::of(sc);
            let lm = s.moe?;
            let shares = sc.routing.rank_shares(lm.experts, sc.parallel.ep);
            let layers = if sc.workload == Workload::Step {
                s.layers.saturating_sub(lm.dense_layers)
            } else {
                1
            };
            (
                block_shape(&s, &lm, &shares),
                Some(s.expert_sync() as u64),
                Some(layers),
            )
        }
        _ => return None,
    };
    Some(MoeReport {
        ep: sc.parallel.ep,
        experts: m.experts,
        experts_per_rank: m.local_experts(),
        top_k: m.top_k,
        routing: sc.routing.describe(),
        rank_shares: m.shares.iter().map(|&x| ratio(x)).collect(),
        imbalance_x: ratio(m.imbalance()),
        expert_dp,
        moe_layers,
    })
}

/// Memory per GPU at the peak, GiB (see `memory`).
#[derive(Debug, Clone, Serialize)]
pub struct MemoryReport {
    pub peak_gib: f64,
    /// The GPU's memory, when the profile gives it.
    pub capacity_gib: Option<f64>,
    pub fits: bool,
    pub recompute: String,
    pub zero: u8,
    /// The pipeline stage at the peak.
    pub stage: u64,
    /// Layers' worth of one micro-batch's activations held there.
    pub layers_in_flight: f64,
    pub breakdown_gib: std::collections::BTreeMap<String, f64>,
}

/// Round GiB to 1 KiB so printed figures do not carry float noise.
fn gib(bytes: f64) -> f64 {
    (crate::memory::gib(bytes) * (1u64 << 20) as f64).round() / (1u64 << 20) as f64
}

/// The memory report of a layer or step scenario.
pub fn memory_report(sc: &Scenario) -> Option<MemoryReport> {
    training(sc).then(|| report_of(sc, &crate::memory::per_gpu(sc)))
}

fn training(sc: &Scenario) -> bool {
    matches!(
        sc.workload,
        Workload::Layer | Workload::Step | Workload::Attention
    )
}

fn report_of(sc: &Scenario, m: &crate::memory::Memory) -> MemoryReport {
    MemoryReport {
        peak_gib: gib(m.total()),
        capacity_gib: m.capacity.map(gib),
        fits: m.fits(),
        recompute: sc.recompute.name().into(),
        zero: if sc.parallel.dp * sc.parallel.ulysses > 1 {
            sc.zero
        } else {
            0
        },
        stage: m.stage,
        layers_in_flight: m.layers_in_flight,
        breakdown_gib: m
            .parts()
            .iter()
            .map(|(k, v)| (k.to_string(), gib(*v)))
            .collect(),
    }
}

/// The table's memory line.
fn memory_line(sc: &Scenario) -> Option<String> {
    if !training(sc) {
        return None;
    }
    let m = crate::memory::per_gpu(sc);
    let r = report_of(sc, &m);
    let of = match r.capacity_gib {
        Some(c) => format!(
            "{:.1} of {c:.1} GiB{}",
            r.peak_gib,
            if r.fits { "" } else { " — DOES NOT FIT" }
        ),
        None => format!("{:.1} GiB (the profile gives no capacity)", r.peak_gib),
    };
    let stage = if sc.parallel.pp > 1 {
        format!("stage {}, ", r.stage)
    } else {
        String::new()
    };
    Some(format!(
        "memory per GPU: {of} ({}; {stage}{:.1} layers of activations in flight, recompute {}, ZeRO-{})\n",
        m.describe(),
        r.layers_in_flight,
        r.recompute,
        r.zero
    ))
}

/// How much of the machine a run covers.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct GpuUse {
    pub used: u64,
    pub available: u64,
}

/// The GPUs `sc` places ranks on (a block is one tensor-parallel group; a layer or a
/// step every tp × ulysses × dp rank) and the profile's count.
pub fn gpu_use(sc: &Scenario) -> GpuUse {
    let used = match sc.workload {
        Workload::Layer | Workload::Step | Workload::Attention | Workload::Moe => {
            sc.parallel.world()
        }
        _ => sc.parallel.tp,
    };
    GpuUse {
        used,
        available: sc.hardware.topology.gpu_count() as u64,
    }
}

/// A line saying what part of the machine a run leaves idle and how to fill it; `None`
/// when it uses every GPU.
fn idle_gpus_line(sc: &Scenario) -> Option<String> {
    let g = gpu_use(sc);
    if g.used >= g.available {
        return None;
    }
    let nodes = sc.hardware.topology.node_count();
    let of = format!(
        "{} of the {} GPUs of {}{} in use",
        g.used,
        g.available,
        sc.hardware.name,
        if nodes > 1 {
            format!(" ({nodes} nodes)")
        } else {
            String::new()
        }
    );
    let group = sc.parallel.tp.saturating_mul(sc.parallel.ulysses).max(1);
    let fill = (g.available % group == 0).then(|| g.available / group);
    Some(match (sc.workload, fill) {
        (Workload::Layer | Workload::Step | Workload::Attention, Some(dp)) => {
            format!("gpus: {of}; `--dp {dp}` spreads data parallelism over all of them\n")
        }
        (Workload::Layer | Workload::Step | Workload::Attention, None) => format!("gpus: {of}\n"),
        (Workload::Moe, _) => {
            format!("gpus: {of} (the moe workload runs one block over --ep ranks)\n")
        }
        (w, _) => format!(
            "gpus: {of} (the {} workload is one tensor-parallel group; `--workload step --dp {}` runs data parallelism over the rest)\n",
            w.name(),
            g.available / sc.parallel.tp.max(1)
        ),
    })
}

/// The figures of one strategy's run, under the one set of names every output uses
/// (`results.json`, the sweep's CSV and JSON, the charts' fields): each name carries its
/// unit (`_us`, `_ratio` for a fraction, `_x` for a factor). [`FIGURES`] lists them in
/// this order.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct Figures {
    pub makespan_us: f64,
    pub compute_us: f64,
    pub comm_us: f64,
    pub exposed_comm_us: f64,
    pub max_exposed_comm_us: f64,
    pub overlap_efficiency_ratio: Option<f64>,
    pub mfu_ratio: Option<f64>,
    pub speedup_vs_sequential_x: f64,
    pub critical_rank: u32,
    pub ops: u64,
    pub events: u64,
    /// Tokens the scenario processes (all micro-batches) per second of makespan.
    pub tokens_per_s: f64,
    /// With pipeline stages: the mean share of the makespan a GPU neither computes nor
    /// communicates for tensor or data parallelism (fill, drain, stage-to-stage waits).
    pub bubble_ratio: Option<f64>,
}

/// The names of [`Figures`], in order.
pub const FIGURES: [&str; 13] = [
    "makespan_us",
    "compute_us",
    "comm_us",
    "exposed_comm_us",
    "max_exposed_comm_us",
    "overlap_efficiency_ratio",
    "mfu_ratio",
    "speedup_vs_sequential_x",
    "critical_rank",
    "ops",
    "events",
    "tokens_per_s",
    "bubble_ratio",
];

/// What to rank by: a figure of [`FIGURES`] and its direction (`search --rank-by`,
/// `sweep --rank-by`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankBy(pub String);

impl RankBy {
    pub fn parse(s: &str) -> Result<RankBy, String> {
        if !FIGURES.contains(&s) || matches!(s, "critical_rank") {
            return Err(format!(
                "`{s}` is not a figure to rank by (one of: {})",
                FIGURES
                    .iter()
                    .filter(|f| **f != "critical_rank")
                    .copied()
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        Ok(RankBy(s.to_string()))
    }

    /// Sort key: smaller is better; a missing figure ranks last.
    pub fn key(&self, f: &Figures) -> f64 {
        match f.get(&self.0) {
            Some(x) if higher_is_better(&self.0) => -x,
            Some(x) => x,
            None => f64::INFINITY,
        }
    }
}

impl Default for RankBy {
    fn default() -> RankBy {
        RankBy("tokens_per_s".into())
    }
}

/// Figures where more is better (the rest: less is better).
pub fn higher_is_better(name: &str) -> bool {
    matches!(
        name,
        "overlap_efficiency_ratio" | "mfu_ratio" | "speedup_vs_sequential_x" | "tokens_per_s"
    )
}

impl Figures {
    /// The values in [`FIGURES`]' order as text, numbers in serde_json's shortest
    /// round-trip form (a missing ratio: empty).
    pub fn texts(&self) -> [String; 13] {
        let num = |x: f64| serde_json::to_string(&x).expect("finite");
        [
            num(self.makespan_us),
            num(self.compute_us),
            num(self.comm_us),
            num(self.exposed_comm_us),
            num(self.max_exposed_comm_us),
            self.overlap_efficiency_ratio.map(num).unwrap_or_default(),
            self.mfu_ratio.map(num).unwrap_or_default(),
            num(self.speedup_vs_sequential_x),
            self.critical_rank.to_string(),
            self.ops.to_string(),
            self.events.to_string(),
            num(self.tokens_per_s),
            self.bubble_ratio.map(num).unwrap_or_default(),
        ]
    }

    /// A numeric figure by name (`None` for an unknown name or a missing ratio).
    pub fn get(&self, name: &str) -> Option<f64> {
        Some(match name {
            "makespan_us" => self.makespan_us,
            "compute_us" => self.compute_us,
            "comm_us" => self.comm_us,
            "exposed_comm_us" => self.exposed_comm_us,
            "max_exposed_comm_us" => self.max_exposed_comm_us,
            "overlap_efficiency_ratio" => return self.overlap_efficiency_ratio,
            "mfu_ratio" => return self.mfu_ratio,
            "speedup_vs_sequential_x" => self.speedup_vs_sequential_x,
            "critical_rank" => self.critical_rank as f64,
            "ops" => self.ops as f64,
            "events" => self.events as f64,
            "tokens_per_s" => self.tokens_per_s,
            "bubble_ratio" => return self.bubble_ratio,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct ResultRow {
    pub strategy: String,
    #[serde(flatten)]
    pub figures: Figures,
    /// The critical rank's time per collective/GEMM site (summed over layers), in the
    /// order the sites first run.
    pub sites: Vec<SiteRow>,
    /// The same, summed per phase (`fwd`, `bwd`) for layers and steps.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub phases: Vec<SiteRow>,
}

/// Microseconds of one site (or phase) on the critical rank.
#[derive(Debug, Clone, Serialize)]
pub struct SiteRow {
    pub name: String,
    pub compute_us: f64,
    pub comm_us: f64,
    pub exposed_comm_us: f64,
}

pub fn summary(sc: &Scenario) -> ScenarioSummary {
    ScenarioSummary {
        name: sc.name.clone(),
        workload: sc.workload.name().into(),
        model: sc.model.name.clone(),
        hardware: sc.hardware.name.clone(),
        tp: sc.parallel.tp,
        batch: sc.batch,
        seq: sc.seq,
        tokens: sc.tokens(),
        dtype: sc.dtype.name().into(),
        transport: sc.transport.name().into(),
        clocks: sc.clocks.name().into(),
        sites: sc
            .site_strategies
            .iter()
            .map(|(k, v)| (k.clone(), v.to_string()))
            .collect(),
        interference: interference_on(sc),
        ranks: rank_map(sc),
        gpus: gpu_use(sc),
        memory: memory_report(sc),
        moe: moe_report(sc),
    }
}

fn interference_on(sc: &Scenario) -> bool {
    sc.interference && sc.hardware.interference.is_some()
}

/// Round to 1 ps so printed figures do not carry float noise.
fn us(seconds: f64) -> f64 {
    (seconds * 1e12).round() / 1e6
}

fn ratio(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

fn site_rows(r: &crate::simulate::StrategyRun) -> (Vec<SiteRow>, Vec<SiteRow>) {
    let sites = || crate::timeline::metrics::site_metrics(&r.timeline, r.metrics.critical_rank);
    let phases = || crate::timeline::metrics::phase_metrics(&r.timeline, r.metrics.critical_rank);
    let (sites, phases) = if r.timeline.spans.len() < crate::timeline::PARALLEL_MIN {
        (sites(), phases())
    } else {
        rayon::join(sites, phases)
    };
    let row = |name: &str, c: f64, m: f64, e: f64| SiteRow {
        name: name.to_string(),
        compute_us: us(c),
        comm_us: us(m),
        exposed_comm_us: us(e),
    };
    // Phases from the timeline as unions of their sites' intervals, not sums of the
    // sites' figures (two sites communicating at once would count twice).
    let phases: Vec<SiteRow> = phases
        .iter()
        .map(|x| row(&x.site, x.compute, x.comm, x.exposed_comm))
        .collect();
    let sites = sites
        .iter()
        .map(|x| row(&x.site, x.compute, x.comm, x.exposed_comm))
        .collect();
    (sites, phases)
}

/// Tokens a run processes: batch × seq, times the micro-batches of a step.
fn tokens_run(sc: &Scenario) -> f64 {
    let mb = if sc.workload == crate::scenario::Workload::Step {
        sc.micro_batches
    } else {
        1
    };
    // A MoE block's ranks each hold their own tokens; in layers and steps the expert
    // groups are drawn from the data-parallel replicas, so ep adds none.
    let ep = if sc.workload == crate::scenario::Workload::Moe {
        sc.parallel.ep
    } else {
        1
    };
    sc.tokens() as f64 * mb as f64 * sc.parallel.dp as f64 * ep as f64
}

/// `rank 0` or `ranks 0..h−1`.
pub fn held_ranks(h: u32) -> String {
    if h <= 1 {
        "rank 0".into()
    } else {
        format!("ranks 0..{}", h - 1)
    }
}

/// How ranks map onto GPUs, for scenarios with more than one parallel dimension.
#[derive(Debug, Clone, Serialize)]
pub struct RankMap {
    pub world: u64,
    pub tp: u64,
    pub dp: u64,
    pub ulysses: u64,
    pub order: String,
    /// The ranks of tensor-parallel group `d` and of data-parallel group `t`, as formulas
    /// and as the first groups spelled out.
    pub tp_group: String,
    pub dp_group: String,
    pub first_tp_group: Vec<u64>,
    pub first_dp_group: Vec<u64>,
    /// Pipeline stages, and the ranks of the first pipeline (tensor rank 0 of replica 0
    /// in every stage, stage order).
    pub pp: u64,
    pub first_pipeline: Vec<u64>,
}

pub fn rank_map(sc: &Scenario) -> Option<RankMap> {
    let p = &sc.parallel;
    if p.dp <= 1 && p.ulysses <= 1 && p.pp <= 1 {
        return None;
    }
    let (tp, u, dp) = (p.tp, p.ulysses, p.dp);
    // Under tp-inner and dp-inner the stages are outermost: stage s adds s·stage_world.
    let stage = if p.pp > 1 {
        format!(" + {}·s in stage s", p.stage_world())
    } else {
        String::new()
    };
    let (tp_group, dp_group) = match p.order {
        crate::scenario::RankOrder::TpInner => (
            format!(
                "(replica d, Ulysses rank j): ranks {tp}·(d·{u} + j) .. {tp}·(d·{u} + j) + {}{stage}",
                tp - 1
            ),
            format!(
                "tensor rank t: ranks t + {tp}·g over the {} groups g = d·{u} + j{stage}",
                dp * u
            ),
        ),
        crate::scenario::RankOrder::TpPpDp => (
            format!(
                "(replica d, Ulysses rank j, stage p): ranks {tp}·((d·{u} + j)·{pp} + p) .. + {}",
                tp - 1,
                pp = p.pp
            ),
            format!(
                "tensor rank t of stage p: ranks t + {tp}·(p + {pp}·g) over the {} groups g = d·{u} + j",
                dp * u,
                pp = p.pp
            ),
        ),
        crate::scenario::RankOrder::DpInner => (
            format!(
                "(replica d, Ulysses rank j): ranks {dp}·(t·{u} + j) + d, t = 0..{}{stage}",
                tp - 1
            ),
            format!("tensor rank t: ranks {dp}·(t·{u} + j) + d over every d and j{stage}"),
        ),
    };
    let cap = 16;
    Some(RankMap {
        world: p.world(),
        tp,
        dp,
        ulysses: u,
        order: p.order.name().into(),
        tp_group,
        dp_group,
        first_tp_group: (0..tp.min(cap)).map(|t| p.rank_of4(0, 0, 0, t)).collect(),
        first_dp_group: (0..(dp * u).min(cap))
            .map(|g| p.rank_of4(0, g / u, g % u, 0))
            .collect(),
        pp: p.pp,
        first_pipeline: (0..p.pp.min(cap)).map(|s| p.rank_of4(s, 0, 0, 0)).collect(),
    })
}

pub fn rows(sc: &Scenario, run: &ScenarioRun) -> Vec<ResultRow> {
    run.runs
        .iter()
        .map(|r| {
            let (sites, phases) = site_rows(r);
            ResultRow {
                strategy: r.strategy.to_string(),
                figures: figures_of(sc, run, r),
                sites,
                phases,
            }
        })
        .collect()
}

/// Each run's figures, as [`rows`] gives them, without the per-site and per-phase rows
/// (what a search ranks by: those take a pass over the timeline each).
pub fn figures(sc: &Scenario, run: &ScenarioRun) -> Vec<Figures> {
    run.runs.iter().map(|r| figures_of(sc, run, r)).collect()
}

fn figures_of(sc: &Scenario, run: &ScenarioRun, r: &crate::simulate::StrategyRun) -> Figures {
    let m = &r.metrics;
    Figures {
        makespan_us: us(m.makespan),
        compute_us: us(m.compute),
        comm_us: us(m.comm),
        exposed_comm_us: us(m.exposed_comm),
        max_exposed_comm_us: us(m.max_exposed_comm),
        overlap_efficiency_ratio: m.overlap_efficiency.map(ratio),
        mfu_ratio: m.mfu.map(ratio),
        speedup_vs_sequential_x: if m.makespan > 0.0 {
            ratio(run.sequential_makespan / m.makespan)
        } else {
            1.0
        },
        critical_rank: m.critical_rank,
        ops: r.plan.op_count() as u64,
        events: r.events,
        tokens_per_s: if m.makespan > 0.0 {
            ratio(tokens_run(sc) / m.makespan)
        } else {
            0.0
        },
        bubble_ratio: m.bubble.map(ratio),
    }
}

pub fn results_file(sc: &Scenario, run: &ScenarioRun) -> ResultsFile {
    ResultsFile {
        format: FORMAT,
        version: VERSION,
        scenario: summary(sc),
        results: rows(sc, run),
        variability: variability(run),
    }
}

pub fn json(sc: &Scenario, run: &ScenarioRun) -> String {
    let mut s = serde_json::to_string_pretty(&results_file(sc, run)).expect("results serialize");
    s.push('\n');
    s
}

pub fn table(sc: &Scenario, run: &ScenarioRun) -> String {
    let mut out = format!(
        "scenario {}: {} of {} on {}, {}{}, {}x{} tokens, {}, {} transport, interference {}\n",
        sc.name,
        sc.workload.name(),
        sc.model.name,
        sc.hardware.name,
        if sc.workload == Workload::Moe {
            format!("ep={}", sc.parallel.ep)
        } else {
            format!("tp={}", sc.parallel.tp)
        },
        if sc.parallel.pp > 1 {
            format!(
                ", pp={} ({}, {} micro-batches)",
                sc.parallel.pp, sc.parallel.pp_schedule, sc.micro_batches
            )
        } else {
            String::new()
        },
        sc.batch,
        sc.seq,
        sc.dtype,
        sc.transport,
        if interference_on(sc) { "on" } else { "off" }
    );
    if let Some(m) = rank_map(sc) {
        let held = run.runs.first().and_then(|r| r.plan.symmetry);
        out.push_str(&format!(
            "ranks: {} = tp {} x ulysses {} x dp {}{} ({}); tp group {}; gradient-sync group of {}{}{}\n",
            m.world,
            m.tp,
            m.ulysses,
            m.dp,
            if m.pp > 1 {
                format!(" x pp {}", m.pp)
            } else {
                String::new()
            },
            m.order,
            m.tp_group,
            m.dp_group,
            if m.pp > 1 {
                format!(
                    "; first pipeline: ranks {}",
                    m.first_pipeline
                        .iter()
                        .map(u64::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            } else {
                String::new()
            },
            match held {
                Some(h) => format!(
                    "; symmetric plan: {} simulated, standing for all (the topology's rotation)",
                    held_ranks(h)
                ),
                None => String::new(),
            }
        ));
    }
    if let Some(line) = idle_gpus_line(sc) {
        out.push_str(&line);
    }
    if let Some(line) = memory_line(sc) {
        out.push_str(&line);
    }
    if let Some(m) = moe_report(sc) {
        let groups = match (m.expert_dp, m.moe_layers) {
            (Some(edp), Some(layers)) => format!(
                "; ep groups of {} consecutive ranks, each expert's weights on {} rank{} (expert dp); {} MoE layer{}",
                m.ep,
                edp,
                if edp == 1 { "" } else { "s" },
                layers,
                if layers == 1 { "" } else { "s" }
            ),
            _ => String::new(),
        };
        out.push_str(&format!(
            "moe: {} experts, {} per rank, top-{}; routing {}: the busiest rank gets {:.2}x the mean of routed tokens{groups}\n",
            m.experts, m.experts_per_rank, m.top_k, m.routing, m.imbalance_x
        ));
    }
    if !sc.site_strategies.is_empty() {
        let o: Vec<String> = sc
            .site_strategies
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        out.push_str(&format!(
            "sites: {} (every strategy below, there)\n",
            o.join(", ")
        ));
    }
    let header = [
        "strategy",
        "makespan_us",
        "compute_us",
        "comm_us",
        "exposed_comm_us",
        "speedup",
        "mfu",
    ];
    let all = rows(sc, run);
    let body: Vec<[String; 7]> = all
        .clone()
        .into_iter()
        .map(|r| {
            [
                r.strategy,
                format!("{:.1}", r.figures.makespan_us),
                format!("{:.1}", r.figures.compute_us),
                format!("{:.1}", r.figures.comm_us),
                format!("{:.1}", r.figures.exposed_comm_us),
                format!("{:.3}x", r.figures.speedup_vs_sequential_x),
                r.figures
                    .mfu_ratio
                    .map(|m| format!("{:.1}%", m * 100.0))
                    .unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    let mut w = header.map(str::len);
    for row in &body {
        for (i, c) in row.iter().enumerate() {
            w[i] = w[i].max(c.len());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i == 0 {
                s.push_str(&format!("{c:<width$}", width = w[0]));
            } else {
                s.push_str(&format!("  {c:>width$}", width = w[i]));
            }
        }
        s.push('\n');
        s
    };
    out.push_str(&line(header.to_vec()));
    for row in &body {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    if sc.workload.is_layered() {
        out.push_str(
            "\ntokens/s and the sites that expose the most communication (critical rank):\n",
        );
        for r in &all {
            let mut top: Vec<&SiteRow> =
                r.sites.iter().filter(|x| x.exposed_comm_us > 0.0).collect();
            top.sort_by(|a, b| b.exposed_comm_us.total_cmp(&a.exposed_comm_us));
            let phase = |p: &str| {
                r.phases
                    .iter()
                    .find(|x| x.name == p)
                    .map_or(0.0, |x| x.exposed_comm_us)
            };
            let bubble = r
                .figures
                .bubble_ratio
                .map(|b| format!("pipeline bubble {:.1}%; ", b * 100.0))
                .unwrap_or_default();
            out.push_str(&format!(
                "{:<w$}  {:.0} tokens/s; {bubble}exposed fwd {:.1} us, bwd {:.1} us; {}\n",
                r.strategy,
                r.figures.tokens_per_s,
                phase("fwd"),
                phase("bwd"),
                top.iter()
                    .take(4)
                    .map(|x| format!("{} {:.1} us", x.name, x.exposed_comm_us))
                    .collect::<Vec<_>>()
                    .join(", "),
                w = w[0]
            ));
        }
    }
    if sc.workload == Workload::Moe {
        out.push_str("\ntokens/s and the all-to-alls' exposed communication (critical rank):\n");
        for r in &all {
            let site = |p: &str| {
                r.sites
                    .iter()
                    .find(|x| x.name == p)
                    .map_or(0.0, |x| x.exposed_comm_us)
            };
            let bwd = if sc.forward_only {
                String::new()
            } else {
                format!(
                    "; backward: combine {:.1} us, dispatch {:.1} us",
                    site("bwd.combine"),
                    site("bwd.dispatch")
                )
            };
            out.push_str(&format!(
                "{:<w$}  {:.0} tokens/s; exposed dispatch {:.1} us, combine {:.1} us{bwd}\n",
                r.strategy,
                r.figures.tokens_per_s,
                site("fwd.dispatch"),
                site("fwd.combine"),
                w = w[0]
            ));
        }
    }
    if let Some(v) = variability(run) {
        out.push_str(&format!(
            "\nvariability: {} samples, seed {}, {} jitter, cv compute {} comm {}\n",
            v.samples, v.seed, v.distribution, v.compute_cv, v.comm_cv
        ));
        let header = [
            "strategy",
            "makespan_us p50/p90/p99",
            "exposed_comm_us p50/p90/p99",
        ];
        let body: Vec<[String; 3]> = v
            .results
            .iter()
            .map(|r| {
                let f =
                    |s: &crate::simulate::Spread| format!("{:.1}/{:.1}/{:.1}", s.p50, s.p90, s.p99);
                [r.strategy.clone(), f(&r.makespan_us), f(&r.exposed_comm_us)]
            })
            .collect();
        let mut w = header.map(str::len);
        for row in &body {
            for (i, c) in row.iter().enumerate() {
                w[i] = w[i].max(c.len());
            }
        }
        let mut push = |cells: [&str; 3]| {
            out.push_str(&format!(
                "{:<a$}  {:>b$}  {:>c$}\n",
                cells[0],
                cells[1],
                cells[2],
                a = w[0],
                b = w[1],
                c = w[2]
            ));
        };
        push(header);
        for r in &body {
            push([&r[0], &r[1], &r[2]]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One list of figure names: `FIGURES` is exactly the keys `Figures` serializes to,
    /// in order, and `get` and `texts` answer for each of them.
    #[test]
    fn figure_names_are_one_list() {
        let f = Figures {
            makespan_us: 1.0,
            compute_us: 2.0,
            comm_us: 3.0,
            exposed_comm_us: 4.0,
            max_exposed_comm_us: 5.0,
            overlap_efficiency_ratio: Some(0.5),
            mfu_ratio: Some(0.25),
            speedup_vs_sequential_x: 1.5,
            critical_rank: 7,
            ops: 8,
            events: 9,
            tokens_per_s: 10.0,
            bubble_ratio: Some(0.125),
        };
        let v = serde_json::to_value(&f).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        let mut sorted = FIGURES.to_vec();
        sorted.sort_unstable();
        let mut got = keys.clone();
        got.sort_unstable();
        assert_eq!(got, sorted);
        let texts = f.texts();
        for (name, text) in FIGURES.iter().zip(&texts) {
            let x = f.get(name).unwrap();
            assert_eq!(text.parse::<f64>().unwrap(), x, "{name}");
            assert_eq!(v[*name].as_f64().unwrap(), x, "{name}");
        }
        assert_eq!(f.get("mfu"), None);
    }
}
