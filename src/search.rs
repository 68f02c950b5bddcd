//! Layout search: for a model, a cluster and a global batch, every training layout
//! (tp × pp × dp × ulysses, with a MoE model's expert parallelism ep, micro-batch size
//! and count, pipeline schedule, recomputation, ZeRO stage) that divides evenly and fits
//! in memory, simulated under each overlap strategy and ranked by a figure (tokens/s by
//! default: the time of one global batch).
//!
//! Pruning, in order (each counted in [`Counts`]):
//!
//! 1. **Divisibility**: tp · ulysses · pp must divide the GPUs, dp · micro-batch the
//!    global batch, ep a stage's tp · ulysses · dp ranks and the experts, pp · V the
//!    layers (V: the interleaved schedule's chunks), the
//!    interleaved schedule's micro-batches pp; and the scenario must accept the layout
//!    (heads, kv heads, ffn and tokens divisible by tp, …: the same checks `simulate`
//!    makes, through the same overrides path).
//! 2. **Memory**: the layout must fit its GPUs ([`crate::memory::check`]).
//! 3. **Dominance**: recomputation and ZeRO-3 only cost time (a forward again, parameter
//!    gathers before every micro-batch); they are tried only where the layout does not fit
//!    without them: first the lowest ZeRO stage asked for without recomputation; if that
//!    does not fit, ZeRO-3 and full recomputation each alone; if neither fits, both.
//!
//! 4. **Bound** (ranking by tokens/s, MFU or step time, unless `--no-prune`): every
//!    layout gets a floor on its step time without simulation ([`floor`]: the busiest
//!    stream's compute or the compute critical path, communication free). The
//!    `max(top, verify)` layouts with the lowest floors are simulated first; the step
//!    time of the best row of that rank they give, plus [`PRUNE_MARGIN`], is the bar.
//!    A layout whose floor passes the bar is left out unsimulated, and one whose
//!    simulation passes the bar under every strategy is stopped there (more
//!    micro-batches never end a step sooner). Neither can reach the table. Every
//!    shard computes the same floors and bar.
//!
//! Screening: a step's time is linear in its micro-batches once the pipeline is full
//! (each further micro-batch adds one forward and backward per stage; the fill, drain and
//! gradient sync are the same), so a layout with more than m₂ micro-batches is
//! simulated at m₁ and m₂ (pp and pp + 1 for 1F1B and GPipe, 2·pp and 3·pp interleaved;
//! 2 and 3 without stages) and its figures extrapolated to m
//! ([`extrapolate`]). The best rows are then simulated whole (`verify`), and those exact
//! figures rank them.

pub use crate::report::RankBy;
use crate::report::{self, Figures};
use crate::scenario::{PpSchedule, RankOrder, Recompute, Scenario, Strategy};
use crate::simulate;
use crate::sweep::{Grid, Shard};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const FORMAT: &str = "flashoverlap-search";
pub const VERSION: u32 = 1;

/// The search's default event budget per simulation: a 1024-GPU 70B step at tp 8, pp 8
/// and 64 micro-batches under flash (17.7 M events) is simulated whole within it, while
/// a layout whose rings run step by step over a thousand data-parallel ranks, which
/// would take minutes and gigabytes each, is counted as over the budget instead.
pub const DEFAULT_MAX_EVENTS: u64 = 25_000_000;

#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    #[error("{what}: {reason}")]
    Input { what: String, reason: String },
    #[error("layout {layout}: {reason}")]
    Layout { layout: String, reason: String },
    /// The layout's plan or simulation needs more than the search's event budget: it
    /// is counted and named, not ranked.
    #[error("layout {layout}: over the simulation budget of {budget} events")]
    OverBudget { layout: String, budget: u64 },
}

fn input(what: &str, reason: impl Into<String>) -> SearchError {
    SearchError::Input {
        what: what.to_string(),
        reason: reason.into(),
    }
}

/// The layouts to consider. `None` lists take their defaults from the model and the
/// machine.
#[derive(Debug, Clone, PartialEq)]
pub struct Space {
    /// Tensor-parallel degrees (default: the powers of two up to a node's GPUs).
    pub tp: Option<Vec<u64>>,
    /// Pipeline stages (default: the divisors of the layers up to `max_pp`).
    pub pp: Option<Vec<u64>>,
    pub max_pp: u64,
    pub ulysses: Vec<u64>,
    /// Expert-parallel degrees of a MoE model (default: the powers of two that divide
    /// its routed experts; a dense model runs ep 1 only).
    pub ep: Option<Vec<u64>>,
    /// Sequences per micro-batch.
    pub micro_batch: Vec<u64>,
    /// Schedules of layouts with stages (one stage runs 1F1B).
    pub schedules: Vec<PpSchedule>,
    /// Strategies of the data-parallel site to try (`sequential`, `bulk`, `flash`;
    /// empty: the scenario's default only).
    pub dp_strategies: Vec<Strategy>,
    /// Recomputation modes allowed (`none` first is cheapest).
    pub recompute: Vec<Recompute>,
    /// ZeRO stages allowed.
    pub zero: Vec<u8>,
    pub order: RankOrder,
}

impl Default for Space {
    fn default() -> Space {
        Space {
            tp: None,
            pp: None,
            max_pp: 16,
            ulysses: vec![1],
            ep: None,
            micro_batch: vec![1, 2, 4],
            schedules: vec![PpSchedule::OneFOneB, PpSchedule::Interleaved(2)],
            dp_strategies: Vec::new(),
            recompute: vec![Recompute::None, Recompute::Full],
            zero: vec![1, 3],
            order: RankOrder::TpPpDp,
        }
    }
}

fn one() -> u64 {
    1
}

/// One layout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layout {
    pub tp: u64,
    pub pp: u64,
    pub dp: u64,
    pub ulysses: u64,
    /// Expert-parallel degree (1 for a dense model; files of earlier versions lack it).
    #[serde(default = "one")]
    pub ep: u64,
    /// Sequences per micro-batch, and micro-batches per step.
    pub micro_batch: u64,
    pub micro_batches: u64,
    pub schedule: String,
    pub recompute: String,
    pub zero: u8,
    /// The data-parallel site's strategy (`--dp-strategy`; `None`: the scenario's
    /// default, `bulk` beside any overlapping strategy).
    pub dp_strategy: Option<String>,
}

impl Layout {
    /// The scenario fields that make this layout.
    fn fields(&self, order: RankOrder) -> Vec<(&'static str, toml::Value)> {
        let i = |x: u64| toml::Value::Integer(x as i64);
        let s = |x: &str| toml::Value::String(x.to_string());
        let mut f = vec![
            ("workload", s("step")),
            ("parallel.tp", i(self.tp)),
            ("parallel.pp", i(self.pp)),
            ("parallel.dp", i(self.dp)),
            ("parallel.ulysses", i(self.ulysses)),
            ("parallel.ep", i(self.ep)),
            ("parallel.pp_schedule", s(&self.schedule)),
            ("parallel.order", s(order.name())),
            ("batch", i(self.micro_batch)),
            ("micro_batches", i(self.micro_batches)),
            ("recompute", s(&self.recompute)),
            ("zero", i(self.zero as u64)),
        ];
        if let Some(d) = &self.dp_strategy {
            f.push(("sites.dp", s(d)));
        }
        f
    }

    /// `tp 8 · pp 8 1f1b · dp 16 · mb 1×64 · zero 1` (ulysses and recomputation when
    /// used).
    pub fn name(&self) -> String {
        let mut s = format!("tp {}", self.tp);
        if self.ulysses > 1 {
            s += &format!(" · ulysses {}", self.ulysses);
        }
        if self.pp > 1 {
            s += &format!(" · pp {} {}", self.pp, self.schedule);
        }
        s += &format!(" · dp {}", self.dp);
        if self.ep > 1 {
            s += &format!(" · ep {}", self.ep);
        }
        s += &format!(
            " · mb {}×{} · zero {}",
            self.micro_batch, self.micro_batches, self.zero
        );
        if self.recompute != "none" {
            s += &format!(" · recompute {}", self.recompute);
        }
        if let Some(d) = &self.dp_strategy {
            s += &format!(" · dp-site {d}");
        }
        s
    }
}

/// What the search considered and why layouts were left out.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Counts {
    /// (tp, ulysses, pp, ep, micro-batch, schedule) combinations tried.
    pub considered: u64,
    /// Left out because a degree does not divide the GPUs, the batch or the layers.
    pub indivisible: u64,
    /// Refused by the scenario's checks, by reason (the first line of the error).
    pub invalid: BTreeMap<String, u64>,
    /// Layouts whose every allowed recomputation and ZeRO stage runs out of memory.
    pub out_of_memory: u64,
    /// Variants with recomputation or ZeRO-3 left out because a cheaper one fits.
    pub dominated: u64,
    /// Layouts simulated (each under every strategy).
    pub layouts: u64,
    /// Layouts left out as slower than the best rows' steps ([`prune_bar`]): their
    /// compute alone ([`floor`]), or their step simulated up to the bar, takes longer.
    #[serde(default)]
    pub pruned: u64,
    /// The step time (µs) a layout had to beat not to be pruned ([`prune_bar`]); `None`
    /// when nothing was pruned by it (`--no-prune`, another figure ranked by, too few
    /// rows).
    #[serde(default)]
    pub prune_bar_us: Option<f64>,
    /// Layouts left out because screening them needs more than the event budget
    /// (`--max-events`), by name.
    pub over_budget: Vec<String>,
    /// Rows among the best that could not be simulated whole within the event budget:
    /// they keep their screened (extrapolated) figures. `layout strategy`.
    pub unverified: Vec<String>,
}

/// A layout that passed the pruning (its scenario is rebuilt where it runs: a
/// thousand-GPU machine's topology is too big to hold once per layout).
#[derive(Debug, Clone)]
pub struct Candidate {
    /// Position in the enumeration (shards take every N-th).
    pub index: u64,
    pub layout: Layout,
    pub memory_gib: f64,
}

impl Candidate {
    /// The layout's scenario on `grid`'s base.
    pub fn scenario(&self, grid: &Grid, order: RankOrder) -> Result<Scenario, SearchError> {
        grid.scenario_with(0, &self.layout.fields(order), "search")
            .map_err(|reason| SearchError::Layout {
                layout: self.layout.name(),
                reason,
            })
    }
}

/// The default tensor-parallel degrees: powers of two up to a node's GPUs.
fn default_tp(sc: &Scenario) -> Vec<u64> {
    let node = sc.hardware.topology.gpus_per_node().max(1) as u64;
    std::iter::successors(Some(1u64), |&x| Some(x * 2))
        .take_while(|&x| x <= node)
        .collect()
}

/// The default expert-parallel degrees: a MoE model's powers of two dividing its routed
/// experts; 1 for a dense model.
fn default_ep(sc: &Scenario) -> Vec<u64> {
    match sc.model.moe {
        Some(m) => std::iter::successors(Some(1u64), |&x| x.checked_mul(2))
            .take_while(|&x| x <= m.experts)
            .filter(|&x| m.experts % x == 0)
            .collect(),
        None => vec![1],
    }
}

fn default_pp(sc: &Scenario, max_pp: u64) -> Vec<u64> {
    (1..=max_pp.min(sc.model.layers))
        .filter(|p| sc.model.layers % p == 0)
        .collect()
}

/// Every layout of `space` for `global_batch` sequences on the base scenario's machine
/// (`grid`'s point 0) that passes the pruning, and the counts.
pub fn enumerate(
    grid: &Grid,
    global_batch: u64,
    space: &Space,
) -> Result<(Vec<Candidate>, Counts), SearchError> {
    let base = grid
        .scenario(0)
        .map_err(|e| input("base scenario", e.to_string()))?;
    let gpus = base.hardware.topology.gpu_count() as u64;
    if global_batch == 0 {
        return Err(input("--global-batch", "must be at least 1 sequence"));
    }
    let none_if_empty = |what: &str, v: &[u64]| {
        if v.is_empty() || v.contains(&0) {
            Err(input(what, "values must be at least 1"))
        } else {
            Ok(())
        }
    };
    let tps = space.tp.clone().unwrap_or_else(|| default_tp(&base));
    let pps = space
        .pp
        .clone()
        .unwrap_or_else(|| default_pp(&base, space.max_pp));
    // A value given twice is one value (`--tp 4,8 --tp 8`).
    let sorted = |mut v: Vec<u64>| {
        v.sort_unstable();
        v.dedup();
        v
    };
    let eps = space.ep.clone().unwrap_or_else(|| default_ep(&base));
    let (tps, pps, eps) = (sorted(tps), sorted(pps), sorted(eps));
    let mut space = space.clone();
    space.ulysses = sorted(space.ulysses);
    space.micro_batch = sorted(space.micro_batch);
    let mut seen = std::collections::BTreeSet::new();
    space.schedules.retain(|x| seen.insert(x.to_string()));
    let mut seen = std::collections::BTreeSet::new();
    space.dp_strategies.retain(|x| seen.insert(x.to_string()));
    let space = &space;
    none_if_empty("--tp", &tps)?;
    none_if_empty("--pp", &pps)?;
    none_if_empty("--ulysses", &space.ulysses)?;
    none_if_empty("--ep", &eps)?;
    if base.model.moe.is_none() && eps != [1] {
        return Err(input(
            "--ep",
            format!(
                "model `{}` has no experts to spread (expert parallelism is for a mixture of experts)",
                base.model.name
            ),
        ));
    }
    none_if_empty("--micro-batch", &space.micro_batch)?;
    if space.recompute.is_empty() || space.zero.is_empty() || space.schedules.is_empty() {
        return Err(input(
            "search space",
            "--recompute, --zero and --pp-schedule need at least one value",
        ));
    }
    let mut zeros = space.zero.clone();
    zeros.sort_unstable();
    zeros.dedup();
    if let Some(z) = zeros.iter().find(|&&z| z > 3) {
        return Err(input(
            "--zero",
            format!("ZeRO stage {z} does not exist (0–3)"),
        ));
    }
    // Memory variants in cost order: each level is tried only if no variant of the
    // levels before it fits.
    let low = zeros[0];
    let high = *zeros.last().expect("not empty");
    let full = space.recompute.contains(&Recompute::Full);
    let none = space.recompute.contains(&Recompute::None) || !full;
    let cheapest = if none {
        Recompute::None
    } else {
        Recompute::Full
    };
    let mut levels: Vec<Vec<(u8, Recompute)>> = vec![vec![(low, cheapest)]];
    let mut second = Vec::new();
    if high > low {
        second.push((high, cheapest));
    }
    if full && cheapest != Recompute::Full {
        second.push((low, Recompute::Full));
    }
    if !second.is_empty() {
        levels.push(second);
    }
    if high > low && full && cheapest != Recompute::Full {
        levels.push(vec![(high, Recompute::Full)]);
    }
    let mut counts = Counts::default();
    let mut out = Vec::new();
    for &tp in &tps {
        for &u in &space.ulysses {
            for &pp in &pps {
                for &ep in &eps {
                    for &mb in &space.micro_batch {
                        let schedules: Vec<PpSchedule> = if pp == 1 {
                            vec![PpSchedule::OneFOneB]
                        } else {
                            space.schedules.clone()
                        };
                        for sched in schedules {
                            counts.considered += 1;
                            let group = tp.saturating_mul(u).saturating_mul(pp);
                            if group == 0 || gpus % group != 0 {
                                counts.indivisible += 1;
                                continue;
                            }
                            let dp = gpus / group;
                            let stage = tp.saturating_mul(u).saturating_mul(dp);
                            let experts = base.model.moe.map_or(1, |m| m.experts);
                            if stage % ep != 0 || experts % ep != 0 {
                                counts.indivisible += 1;
                                continue;
                            }
                            let per_step = dp.saturating_mul(mb);
                            if global_batch % per_step != 0 {
                                counts.indivisible += 1;
                                continue;
                            }
                            let m = global_batch / per_step;
                            let v = sched.chunks();
                            if pp > 1
                                && (base.model.layers % (pp * v) != 0 || (v > 1 && m % pp != 0))
                            {
                                counts.indivisible += 1;
                                continue;
                            }
                            let mut found = false;
                            let mut first_error = None;
                            for level in &levels {
                                if found {
                                    counts.dominated += level.len() as u64;
                                    continue;
                                }
                                for &(zero, rc) in level {
                                    let layout = Layout {
                                        tp,
                                        pp,
                                        dp,
                                        ulysses: u,
                                        ep,
                                        micro_batch: mb,
                                        micro_batches: m,
                                        schedule: sched.to_string(),
                                        recompute: rc.name().to_string(),
                                        zero,
                                        dp_strategy: None,
                                    };
                                    let sc = match grid.scenario_with(
                                        0,
                                        &layout.fields(space.order),
                                        "search",
                                    ) {
                                        Ok(sc) => sc,
                                        Err(e) => {
                                            first_error.get_or_insert(e);
                                            break;
                                        }
                                    };
                                    match crate::memory::check(&sc) {
                                        Ok(mem) => {
                                            found = true;
                                            let memory_gib = crate::memory::gib(mem.total());
                                            // One candidate per data-parallel strategy asked
                                            // for, where gradients are synced at all.
                                            let dps: Vec<Option<String>> =
                                                if space.dp_strategies.is_empty() || dp * u <= 1 {
                                                    vec![None]
                                                } else {
                                                    space
                                                        .dp_strategies
                                                        .iter()
                                                        .map(|d| Some(d.to_string()))
                                                        .collect()
                                                };
                                            for d in dps {
                                                let mut layout = layout.clone();
                                                layout.dp_strategy = d;
                                                out.push(Candidate {
                                                    index: 0,
                                                    layout,
                                                    memory_gib,
                                                });
                                            }
                                        }
                                        Err(_) => continue,
                                    }
                                }
                                if first_error.is_some() {
                                    break;
                                }
                            }
                            if let Some(e) = first_error {
                                let reason = e.lines().next().unwrap_or_default();
                                // The reason without the `file: key = value:` prefix, so that
                                // layouts refused for one cause count together.
                                let reason = reason.rsplit(": ").next().unwrap_or(reason);
                                *counts.invalid.entry(reason.to_string()).or_default() += 1;
                            } else if !found {
                                counts.out_of_memory += 1;
                            }
                        }
                    }
                }
            }
        }
    }
    for (i, c) in out.iter_mut().enumerate() {
        c.index = i as u64;
    }
    counts.layouts = out.len() as u64;
    Ok((out, counts))
}

/// One strategy of one layout, as screened and (for the best) as simulated whole.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// 1 for the best.
    pub rank: u64,
    /// The candidate's index in the enumeration.
    pub index: u64,
    #[serde(flatten)]
    pub layout: Layout,
    pub strategy: String,
    pub memory_gib: f64,
    /// The screened figures were extrapolated from two shorter steps.
    pub extrapolated: bool,
    pub screened: Figures,
    /// The whole step's figures, for the rows verified (or screened without
    /// extrapolation).
    pub exact: Option<Figures>,
}

impl Row {
    /// The figures the row ranks by: exact where known.
    pub fn figures(&self) -> &Figures {
        self.exact.as_ref().unwrap_or(&self.screened)
    }
}

/// The micro-batch counts a layout with `m` micro-batches is screened at (`None`: whole).
///
/// Past its warm-up a step grows by one micro-batch's work per micro-batch: with pp,
/// from m = P on (every stage then runs its steady 1F1B phase; GPipe and the fill of
/// 1F1B are linear in m from the start: screening at P and P + 1 is exact for them to
/// the microsecond on the tests' layouts); the interleaved schedule needs m a multiple
/// of P and runs all its forwards as warm-up at m = P, so its points are 2P and 3P
/// (within 0.7% of the whole step on the tests' layouts). Without pp, 2 and 3 (the first
/// micro-batch alone carries the step's fixed costs that overlap nothing).
pub fn screen_points(pp: u64, schedule: &str, m: u64) -> Option<(u64, u64)> {
    let (m1, m2) = if pp <= 1 {
        (2, 3)
    } else if schedule.starts_with("interleaved") {
        (2 * pp, 3 * pp)
    } else {
        (pp, pp + 1)
    };
    (m > m2).then_some((m1, m2))
}

/// `b` (at `m2` micro-batches) and `a` (at `m1`) carried to `m` along the line through
/// them: times, busy and idle time grow by one micro-batch's share each; ratios follow
/// from those; the speed-up is set by the caller (it needs the baseline's figures).
pub fn extrapolate(a: &Figures, b: &Figures, m1: u64, m2: u64, m: u64) -> Figures {
    let k = (m as f64 - m2 as f64) / (m2 as f64 - m1 as f64);
    let lin = |x: f64, y: f64| y + (y - x) * k;
    let makespan = lin(a.makespan_us, b.makespan_us);
    let comm = lin(a.comm_us, b.comm_us);
    let exposed = lin(a.exposed_comm_us, b.exposed_comm_us);
    let scale = m as f64 / m2 as f64;
    let round = |x: f64| (x * 1e6).round() / 1e6;
    let idle = |f: &Figures| f.bubble_ratio.map(|r| r * f.makespan_us);
    Figures {
        makespan_us: round(makespan),
        compute_us: round(lin(a.compute_us, b.compute_us)),
        comm_us: round(comm),
        exposed_comm_us: round(exposed),
        max_exposed_comm_us: round(lin(a.max_exposed_comm_us, b.max_exposed_comm_us)),
        overlap_efficiency_ratio: (comm > 0.0)
            .then(|| round(((comm - exposed) / comm).clamp(0.0, 1.0))),
        mfu_ratio: b
            .mfu_ratio
            .map(|x| round(x * scale * b.makespan_us / makespan)),
        speedup_vs_sequential_x: b.speedup_vs_sequential_x,
        critical_rank: b.critical_rank,
        ops: lin(a.ops as f64, b.ops as f64).round() as u64,
        events: lin(a.events as f64, b.events as f64).round() as u64,
        tokens_per_s: round(b.tokens_per_s * scale * b.makespan_us / makespan),
        bubble_ratio: match (idle(a), idle(b)) {
            (Some(x), Some(y)) => Some(round((lin(x, y) / makespan).clamp(0.0, 1.0))),
            _ => None,
        },
    }
}

/// The figures a floor on the step time bounds: the same global batch makes tokens/s and
/// MFU inversely proportional to the step time, and the step time is the makespan.
pub fn floor_bounds(by: &RankBy) -> bool {
    matches!(by.0.as_str(), "tokens_per_s" | "mfu_ratio" | "makespan_us")
}

/// A floor on candidate `c`'s step time (µs) under its best strategy, found without
/// simulating: the larger of the busiest stream's compute alone
/// ([`crate::exec::sim::stream_compute`]) and the compute critical path with
/// communication free ([`crate::exec::sim::compute_critical_path`]: a pipeline's fill
/// and drain), the least over `strategies`. Every rank of a layout computes the same
/// share, whatever dp is: the floor is taken on a plan of the fewest data-parallel
/// replicas the layout's groups allow (one for a dense model; enough for the
/// expert-parallel groups of a MoE model), with no communication timed (the replicas
/// left out only add communication and its waits). A stream's compute grows by the same
/// amount with each micro-batch, so a layout with many micro-batches is built with one
/// and two (pp and 2·pp interleaved) and the floor carried along the line through them,
/// stream by stream; the critical path is taken at the second point (a step of fewer
/// micro-batches never ends later) or, with few micro-batches, on the whole step.
pub fn floor(c: &Candidate, sc: &Scenario, strategies: &[Strategy]) -> Result<f64, SearchError> {
    let l = &c.layout;
    let fail = |reason: String| SearchError::Layout {
        layout: l.name(),
        reason,
    };
    let mut small = sc.clone();
    let group = sc.parallel.tp * sc.parallel.ulysses;
    small.parallel.dp = (1..=sc.parallel.dp)
        .find(|d| sc.parallel.dp % d == 0 && (group * d) % sc.parallel.ep.max(1) == 0)
        .unwrap_or(sc.parallel.dp);
    // Each stream's compute, by (rank, stream name), and (if `path`) the plan's compute
    // critical path.
    type Busy = Vec<((u32, String), f64)>;
    let busy = |m: u64, s: Strategy, path: bool| -> Result<(Busy, f64), SearchError> {
        let mut sc = small.clone();
        sc.micro_batches = m;
        let plan =
            crate::strategy::build_limited(&sc, sc.workload, s, false, crate::plan::op_limit())
                .map_err(|e| fail(e.to_string()))?;
        let b = crate::exec::sim::stream_compute(&plan, &sc.hardware)
            .map_err(|e| fail(e.to_string()))?;
        let path = if path {
            crate::exec::sim::compute_critical_path(&plan, &sc.hardware)
                .map_err(|e| fail(e.to_string()))?
        } else {
            0.0
        };
        Ok((
            plan.streams
                .iter()
                .map(|st| (st.rank, st.name.clone()))
                .zip(b)
                .collect(),
            path,
        ))
    };
    // Two small points: compute is the same for every micro-batch, so its line is
    // exact from one micro-batch on (the interleaved schedule takes multiples of pp).
    let m = l.micro_batches;
    let (m1, m2) = if l.pp > 1 && l.schedule.starts_with("interleaved") {
        (l.pp, 2 * l.pp)
    } else {
        (1, 2)
    };
    // The critical path of a step of fewer micro-batches bounds this one's too (more
    // micro-batches never end a step sooner); at m itself it holds the whole step's
    // pipeline fill and drain.
    let whole = |s| -> Result<f64, SearchError> {
        let (b, path) = busy(m, s, true)?;
        Ok(b.into_iter().map(|(_, t)| t).fold(path, f64::max))
    };
    let mut best = f64::INFINITY;
    for &s in strategies {
        let f = if m <= m2 {
            whole(s)?
        } else {
            let (a, _) = busy(m1, s, false)?;
            let (b, path) = busy(m2, s, true)?;
            if a.len() != b.len() || a.iter().zip(&b).any(|(x, y)| x.0 != y.0) {
                // Streams that differ between the points: the whole step.
                whole(s)?
            } else {
                let k = (m - m2) as f64 / (m2 - m1) as f64;
                a.iter()
                    .zip(&b)
                    .map(|((_, x), (_, y))| y + (y - x) * k)
                    .fold(path, f64::max)
            }
        };
        best = best.min(f);
    }
    Ok(best * 1e6)
}

/// How far above the best rows' step time a layout's floor may be and still be
/// simulated: the bar is set on screened (extrapolated) figures, which are within 1% of
/// the whole step on the tests' layouts, so a floor this much above it cannot belong to
/// a row the table shows.
pub const PRUNE_MARGIN: f64 = 0.03;

/// The step time (µs) a layout's [`floor`] must not pass to be simulated: the `keep`-th
/// best of `rows` by `by` (the rows the table shows and verifies), plus
/// [`PRUNE_MARGIN`]. `None` (prune nothing) with fewer rows.
pub fn prune_bar<'r>(rows: impl Iterator<Item = &'r Row>, by: &RankBy, keep: usize) -> Option<f64> {
    let mut ms: Vec<f64> = rows
        .filter(|r| by.key(&r.screened).is_finite())
        .map(|r| r.screened.makespan_us)
        .collect();
    ms.sort_by(f64::total_cmp);
    ms.get(keep - 1).map(|m| m * (1.0 + PRUNE_MARGIN))
}

/// Each strategy's figures for `sc` as `simulate` reports them, and the baseline;
/// `None` when every strategy's run passed `deadline` (seconds of simulated time).
fn simulate_all(
    layout: &Layout,
    sc: &Scenario,
    strategies: &[Strategy],
    max_events: u64,
    deadline: Option<f64>,
) -> Result<Option<(Vec<Figures>, f64)>, SearchError> {
    use crate::exec::sim::SimError;
    let mut sc = sc.clone();
    sc.strategies = strategies.to_vec();
    let opts = crate::exec::sim::SimOptions {
        record_links: false,
        max_events,
        ..Default::default()
    };
    // A plan over the event budget, or too large to build in the memory limit (which
    // is checked first), cannot be simulated here: listed as over budget, not ranked.
    let fail = |e: simulate::RunError| match e {
        simulate::RunError::Sim {
            source: SimError::EventBudget { budget },
            ..
        } => SearchError::OverBudget {
            layout: layout.name(),
            budget,
        },
        e if e.is_over_limit() => SearchError::OverBudget {
            layout: layout.name(),
            budget: max_events,
        },
        e => SearchError::Layout {
            layout: layout.name(),
            reason: e.to_string(),
        },
    };
    let timed = crate::exec::sim::SimOptions {
        deadline,
        ..opts.clone()
    };
    // The strategies run side by side (a search's layouts take from a few milliseconds
    // to tens of seconds each: one layout's strategies on idle cores shorten its tail).
    // Each run is independent of the others, so the figures are those of one after the
    // other; an error is the first strategy's in the order given.
    let mut runs: Vec<Option<simulate::StrategyRun>> = Vec::with_capacity(strategies.len());
    let timed_runs: Vec<_> = strategies
        .par_iter()
        .with_max_len(1)
        .map(|&s| simulate::run_strategy(&sc, s, &timed))
        .collect();
    for r in timed_runs {
        match r {
            Ok(r) => runs.push(Some(r)),
            Err(simulate::RunError::Sim {
                source: SimError::PastDeadline { .. },
                ..
            }) => runs.push(None),
            Err(e) => return Err(fail(e)),
        }
    }
    if runs.iter().all(Option::is_none) {
        return Ok(None);
    }
    // Some strategy ends in time: the others' rows are wanted too.
    let runs = strategies
        .par_iter()
        .zip(runs)
        .with_max_len(1)
        .map(|(&s, r)| match r {
            Some(r) => Ok(r),
            None => simulate::run_strategy(&sc, s, &opts).map_err(fail),
        })
        .collect::<Vec<_>>()
        .into_iter()
        .collect::<Result<Vec<_>, _>>()?;
    let sequential_makespan = simulate::baseline(&sc, &runs, &opts).map_err(fail)?;
    let run = simulate::ScenarioRun {
        runs,
        sequential_makespan,
        sampling: None,
    };
    let figures = report::figures(&sc, &run);
    Ok(Some((figures, run.sequential_makespan)))
}

/// Screen candidate `c` under `strategies`: its rows (ranks unset), or `None` when a
/// step of it, whole or at a screening point, passes `deadline` (seconds) under every
/// strategy. More micro-batches never end a step sooner, so the whole step would pass
/// it too.
pub fn screen(
    c: &Candidate,
    sc: &Scenario,
    strategies: &[Strategy],
    exact: bool,
    max_events: u64,
    deadline: Option<f64>,
) -> Result<Option<Vec<Row>>, SearchError> {
    let m = c.layout.micro_batches;
    let points = if exact {
        None
    } else {
        screen_points(c.layout.pp, &c.layout.schedule, m)
    };
    let (figures, extrapolated) = match points {
        None => match simulate_all(&c.layout, sc, strategies, max_events, deadline)? {
            Some((f, _)) => (f, false),
            None => return Ok(None),
        },
        Some((m1, m2)) => {
            let at = |k: u64| {
                let mut sc = sc.clone();
                sc.micro_batches = k;
                simulate_all(&c.layout, &sc, strategies, max_events, deadline)
            };
            let Some((a, base_a)) = at(m1)? else {
                return Ok(None);
            };
            let Some((b, base_b)) = at(m2)? else {
                return Ok(None);
            };
            let base = base_b + (base_b - base_a) * (m - m2) as f64 / (m2 - m1) as f64;
            let f = a
                .iter()
                .zip(&b)
                .map(|(x, y)| {
                    let mut f = extrapolate(x, y, m1, m2, m);
                    f.speedup_vs_sequential_x =
                        ((base * 1e6).round() / 1e6 / f.makespan_us * 1e6).round() / 1e6;
                    f
                })
                .collect();
            (f, true)
        }
    };
    Ok(Some(
        strategies
            .iter()
            .zip(figures)
            .map(|(s, f)| Row {
                rank: 0,
                index: c.index,
                layout: c.layout.clone(),
                strategy: s.to_string(),
                memory_gib: (c.memory_gib * 1e3).round() / 1e3,
                extrapolated,
                exact: (!extrapolated).then(|| f.clone()),
                screened: f,
            })
            .collect(),
    ))
}

/// The whole step of `row`'s layout under its strategy (the baseline is simulated too).
pub fn verify(
    c: &Candidate,
    sc: &Scenario,
    row: &Row,
    max_events: u64,
) -> Result<Figures, SearchError> {
    let s = Strategy::parse(&row.strategy).map_err(|e| SearchError::Layout {
        layout: c.layout.name(),
        reason: e,
    })?;
    let (f, _) = simulate_all(&c.layout, sc, &[s], max_events, None)?.expect("no deadline");
    Ok(f.into_iter().next().expect("one strategy"))
}

/// Sort `rows` best first by `by` on `fig(row)`, ties by enumeration order and strategy,
/// and number them.
pub fn rank(rows: &mut [Row], by: &RankBy, exact_first: bool) {
    let key = |r: &Row| {
        if exact_first {
            by.key(r.figures())
        } else {
            by.key(&r.screened)
        }
    };
    rows.sort_by(|a, b| {
        key(a)
            .total_cmp(&key(b))
            .then(a.index.cmp(&b.index))
            .then(a.strategy.cmp(&b.strategy))
    });
    for (i, r) in rows.iter_mut().enumerate() {
        r.rank = i as u64 + 1;
    }
}

/// The search as its file records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchFile {
    pub format: String,
    pub version: u32,
    pub request: RequestInfo,
    pub shard: Option<Shard>,
    pub counts: Counts,
    /// Every row simulated, best first.
    pub rows: Vec<Row>,
}

/// What was searched (enough to tell shards of one search from another's).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestInfo {
    pub scenario: String,
    pub model: String,
    pub hardware: String,
    pub gpus: u64,
    pub seq: u64,
    pub global_batch: u64,
    pub strategies: Vec<String>,
    pub rank_by: String,
    pub exact: bool,
    /// Rows simulated whole after screening.
    pub verify: u64,
    /// Event budget of each simulation.
    pub max_events: u64,
}

/// The best `verify` rows by their screened figures get their exact figures from
/// `exact(row)` (when extrapolated); then every row is ranked on exact-where-known.
/// Rows whose whole step is over the event budget keep their screened figures and are
/// returned (`layout strategy`).
pub fn finish_ranking(
    rows: &mut [Row],
    by: &RankBy,
    verify: u64,
    exact: &mut dyn FnMut(&Row) -> Result<Figures, SearchError>,
) -> Result<Vec<String>, SearchError> {
    rank(rows, by, false);
    let mut unverified = Vec::new();
    for r in rows.iter_mut().take(verify as usize) {
        if r.exact.is_none() {
            match exact(r) {
                Ok(f) => r.exact = Some(f),
                Err(SearchError::OverBudget { .. }) => {
                    unverified.push(format!("{} {}", r.layout.name(), r.strategy));
                }
                Err(e) => return Err(e),
            }
        }
    }
    rank(rows, by, true);
    Ok(unverified)
}

pub fn json(f: &SearchFile) -> String {
    let mut s = serde_json::to_string_pretty(f).expect("search serializes");
    s.push('\n');
    s
}

/// Columns of `search.csv` before the figures.
const CSV_INPUTS: [&str; 16] = [
    "rank",
    "tp",
    "pp",
    "dp",
    "ulysses",
    "ep",
    "micro_batch",
    "micro_batches",
    "schedule",
    "recompute",
    "zero",
    "dp_strategy",
    "strategy",
    "memory_gib",
    "extrapolated",
    "verified",
];

/// One line per row, best first; the figures are the exact ones where known.
pub fn csv(f: &SearchFile) -> String {
    let mut out = CSV_INPUTS.join(",");
    for name in report::FIGURES {
        out.push(',');
        out.push_str(name);
    }
    out.push('\n');
    for r in &f.rows {
        let l = &r.layout;
        let num = |x: f64| serde_json::to_string(&x).expect("finite");
        let cells = [
            r.rank.to_string(),
            l.tp.to_string(),
            l.pp.to_string(),
            l.dp.to_string(),
            l.ulysses.to_string(),
            l.ep.to_string(),
            l.micro_batch.to_string(),
            l.micro_batches.to_string(),
            l.schedule.clone(),
            l.recompute.clone(),
            l.zero.to_string(),
            l.dp_strategy.clone().unwrap_or_default(),
            r.strategy.clone(),
            num(r.memory_gib),
            r.extrapolated.to_string(),
            (r.extrapolated && r.exact.is_some()).to_string(),
        ];
        out.push_str(&cells.join(","));
        for t in r.figures().texts() {
            out.push(',');
            out.push_str(&t);
        }
        out.push('\n');
    }
    out
}

/// What the search considered and left out, in one line.
pub fn counts_line(c: &Counts, strategies: usize) -> String {
    let invalid: u64 = c.invalid.values().sum();
    format!(
        "layouts: {} considered; {} indivisible, {} refused by the scenario's checks, {} out of memory, {} recompute/ZeRO-3 variants dominated, {} pruned as slower than the best steps; {} simulated × {} strategies{}",
        c.considered,
        c.indivisible,
        invalid,
        c.out_of_memory,
        c.dominated,
        c.pruned,
        c.layouts,
        strategies,
        if c.over_budget.is_empty() {
            String::new()
        } else {
            format!(
                ", {} of them over the simulation budget",
                c.over_budget.len()
            )
        }
    )
}

/// The top `top` rows with why they rank there, and what the search left out.
pub fn table(f: &SearchFile, top: usize) -> String {
    let q = &f.request;
    let c = &f.counts;
    let mut out = format!(
        "search: {} on {} ({} GPUs), global batch {} × {} tokens, ranked by {}{}\n",
        q.model,
        q.hardware,
        q.gpus,
        q.global_batch,
        q.seq,
        q.rank_by,
        f.shard.map(|s| format!(", shard {s}")).unwrap_or_default()
    );
    out += &counts_line(c, q.strategies.len());
    let screened = f.rows.iter().filter(|r| r.extrapolated).count();
    let verified = f
        .rows
        .iter()
        .filter(|r| r.extrapolated && r.exact.is_some())
        .count();
    if screened > 0 {
        out += &format!(
            " ({screened} rows screened from two shorter steps, {verified} of them then simulated whole)"
        );
    }
    out.push('\n');
    if let Some(b) = c.prune_bar_us {
        out += &format!(
            "  pruned: layouts whose compute alone, or whose simulated step, takes over {:.1} ms ({:.0}% over the step of the --top-th (or --verify-th) best row of the layouts with the lowest floors, simulated first; --no-prune keeps them)\n",
            b / 1e3,
            PRUNE_MARGIN * 100.0
        );
    }
    for (reason, n) in &c.invalid {
        out += &format!("  refused ({n}): {reason}\n");
    }
    if !c.over_budget.is_empty() {
        out += &format!(
            "  over the simulation budget (raise --max-events to rank them): {}\n",
            c.over_budget.join(", ")
        );
    }
    if !c.unverified.is_empty() {
        out += &format!(
            "  screened only (their whole step is over the simulation budget): {}\n",
            c.unverified.join(", ")
        );
    }
    let header = [
        "rank",
        "layout",
        "strategy",
        "tokens/s",
        "mfu",
        "step_ms",
        "exposed_ms",
        "bubble",
        "memory_gib",
    ];
    let body: Vec<[String; 9]> = f
        .rows
        .iter()
        .take(top)
        .map(|r| {
            let g = r.figures();
            let pct = |x: Option<f64>| x.map_or("-".into(), |x| format!("{:.1}%", x * 100.0));
            [
                format!(
                    "{}{}",
                    r.rank,
                    if r.extrapolated && r.exact.is_none() {
                        "~"
                    } else {
                        ""
                    }
                ),
                r.layout.name(),
                r.strategy.clone(),
                format!("{:.0}", g.tokens_per_s),
                pct(g.mfu_ratio),
                format!("{:.1}", g.makespan_us / 1e3),
                format!("{:.1}", g.exposed_comm_us / 1e3),
                pct(g.bubble_ratio),
                format!("{:.1}", r.memory_gib),
            ]
        })
        .collect();
    let mut w = header.map(str::len);
    for row in &body {
        for (i, c) in row.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            let pad = w[i].saturating_sub(c.chars().count());
            if i == 1 || i == 2 {
                s.push_str(c);
                s.push_str(&" ".repeat(pad));
            } else {
                s.push_str(&" ".repeat(pad));
                s.push_str(c);
            }
            s.push_str("  ");
        }
        s.truncate(s.trim_end().len());
        s.push('\n');
        s
    };
    out.push_str(&line(header.to_vec()));
    for row in &body {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    if f.rows
        .iter()
        .take(top)
        .any(|r| r.extrapolated && r.exact.is_none())
    {
        out.push_str("~: screened (extrapolated), not simulated whole\n");
    }
    if f.rows.is_empty() {
        out.push_str(if c.over_budget.is_empty() {
            "no layout in this shard\n"
        } else {
            "every layout is over the simulation budget: raise --max-events\n"
        });
    }
    out
}

/// Join shards' files into the file one search of every layout would have written:
/// the rows of all, ranked as one search ranks them (the best `verify` by their
/// screened figures keep their exact figures; every shard verified its own best, so
/// they are there).
pub fn merge(files: Vec<(String, SearchFile)>) -> Result<SearchFile, SearchError> {
    let mut it = files.into_iter();
    let Some((first_name, first)) = it.next() else {
        return Err(input("search merge", "no inputs"));
    };
    let n = first.shard.map_or(1, |s| s.count);
    let mut seen = vec![false; n as usize];
    let mut all = Vec::new();
    let mut counts = first.counts.clone();
    counts.layouts = 0;
    counts.pruned = 0;
    counts.over_budget.clear();
    counts.unverified.clear();
    for (name, f) in std::iter::once((first_name, first.clone())).chain(it) {
        if f.request != first.request {
            return Err(input(&name, "a shard of another search"));
        }
        let Some(s) = f.shard else {
            return Err(input(&name, "not a shard (it has no --shard)"));
        };
        if s.count != n || seen[s.index as usize] {
            return Err(input(
                &name,
                format!("shard {s} repeats or does not belong with {n} shards"),
            ));
        }
        seen[s.index as usize] = true;
        counts.layouts += f.counts.layouts;
        counts.pruned += f.counts.pruned;
        counts.over_budget.extend(f.counts.over_budget);
        counts.unverified.extend(f.counts.unverified);
        all.extend(f.rows);
    }
    if let Some(missing) = seen.iter().position(|x| !x) {
        return Err(input(
            "search merge",
            format!("shard {missing}/{n} is missing"),
        ));
    }
    let by = RankBy::parse(&first.request.rank_by).map_err(|e| input("rank_by", e))?;
    rank(&mut all, &by, false);
    for r in all.iter_mut().skip(first.request.verify as usize) {
        if r.extrapolated {
            r.exact = None;
        }
    }
    rank(&mut all, &by, true);
    counts.over_budget.sort();
    let kept: std::collections::BTreeSet<String> = all
        .iter()
        .take(first.request.verify as usize)
        .map(|r| format!("{} {}", r.layout.name(), r.strategy))
        .collect();
    counts.unverified.retain(|u| kept.contains(u));
    counts.unverified.sort();
    Ok(SearchFile {
        format: FORMAT.into(),
        version: VERSION,
        request: first.request,
        shard: None,
        counts,
        rows: all,
    })
}

impl SearchFile {
    pub fn parse(name: &str, text: &str) -> Result<SearchFile, SearchError> {
        let v: serde_json::Value =
            serde_json::from_str(text).map_err(|e| input(name, format!("not JSON: {e}")))?;
        let format = v.get("format").and_then(|f| f.as_str()).unwrap_or("");
        if format != FORMAT {
            return Err(input(
                name,
                format!("not a flashoverlap search (format `{format}`)"),
            ));
        }
        let version = v.get("version").and_then(|f| f.as_u64()).unwrap_or(0);
        if version != VERSION as u64 {
            return Err(input(
                name,
                format!("search version {version} is not supported (this build reads {VERSION})"),
            ));
        }
        serde_json::from_value(v).map_err(|e| input(name, e.to_string()))
    }
}

/// Whether a shard holds candidate `index`.
pub fn holds(shard: Option<Shard>, index: u64) -> bool {
    shard.is_none_or(|s| s.holds(index))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweep::GridSpec;

    fn figures(makespan: f64, bubble: Option<f64>) -> Figures {
        Figures {
            makespan_us: makespan,
            compute_us: makespan / 2.0,
            comm_us: makespan / 4.0,
            exposed_comm_us: makespan / 8.0,
            max_exposed_comm_us: makespan / 8.0,
            overlap_efficiency_ratio: Some(0.5),
            mfu_ratio: Some(0.4),
            speedup_vs_sequential_x: 1.0,
            critical_rank: 0,
            ops: 100,
            events: 200,
            tokens_per_s: 1e6,
            bubble_ratio: bubble,
        }
    }

    /// On a step whose time is a + b·m the extrapolation is exact: makespan, tokens/s
    /// (tokens grow with m) and MFU (FLOPs too) and the bubble's idle time.
    #[test]
    fn extrapolation_is_exact_on_a_linear_step() {
        let t = |m: f64| 1000.0 + 250.0 * m;
        let tok = |m: f64| 4096.0 * m / t(m) * 1e6;
        let mut a = figures(t(4.0), Some(750.0 / t(4.0)));
        a.tokens_per_s = tok(4.0);
        a.mfu_ratio = Some(0.1 * 4.0 / t(4.0));
        let mut b = figures(t(8.0), Some(750.0 / t(8.0)));
        b.tokens_per_s = tok(8.0);
        b.mfu_ratio = Some(0.1 * 8.0 / t(8.0));
        let f = extrapolate(&a, &b, 4, 8, 64);
        assert!((f.makespan_us - t(64.0)).abs() < 1e-6);
        assert!((f.tokens_per_s - tok(64.0)).abs() < 1e-3);
        assert!((f.mfu_ratio.unwrap() - 0.1 * 64.0 / t(64.0)).abs() < 1e-6);
        // Constant idle (fill and drain) over a longer step.
        assert!((f.bubble_ratio.unwrap() - 750.0 / t(64.0)).abs() < 1e-6);
        assert!((f.compute_us - t(64.0) / 2.0).abs() < 1e-6);
    }

    #[test]
    fn screening_needs_more_micro_batches_than_its_points() {
        assert_eq!(screen_points(1, "1f1b", 3), None);
        assert_eq!(screen_points(1, "1f1b", 4), Some((2, 3)));
        assert_eq!(screen_points(8, "1f1b", 9), None);
        assert_eq!(screen_points(8, "1f1b", 64), Some((8, 9)));
        assert_eq!(screen_points(8, "gpipe", 10), Some((8, 9)));
        assert_eq!(screen_points(8, "interleaved:2", 24), None);
        assert_eq!(screen_points(8, "interleaved:2", 64), Some((16, 24)));
    }

    fn grid(model: &str, hardware: &str, nodes: Option<&str>, seq: &str) -> Grid {
        let mut axes = vec![
            ("workload".to_string(), vec!["step".to_string()]),
            ("model".to_string(), vec![model.to_string()]),
            ("hardware".to_string(), vec![hardware.to_string()]),
            ("seq".to_string(), vec![seq.to_string()]),
        ];
        if let Some(n) = nodes {
            axes.push(("nodes".to_string(), vec![n.to_string()]));
        }
        Grid::new(&GridSpec {
            scenario: "default".into(),
            dir: None,
            axes,
        })
        .unwrap()
    }

    /// Every candidate divides, fits and is the cheapest variant that fits; the counts
    /// add up to what was considered.
    #[test]
    fn enumeration_keeps_layouts_that_divide_and_fit() {
        let g = grid("llama-3-70b", "dgx-h100-rail", Some("8"), "4096");
        let space = Space::default();
        let (cands, c) = enumerate(&g, 64, &space).unwrap();
        assert!(!cands.is_empty());
        // With ZeRO-3 even tp 1 pp 1 fits 70B on 64 GPUs; with ZeRO-1 alone it cannot.
        let zero1 = Space {
            zero: vec![1],
            ..Space::default()
        };
        let (_, c1) = enumerate(&g, 64, &zero1).unwrap();
        assert!(c1.out_of_memory > 0, "tp 1 pp 1 cannot hold 70B: {c1:?}");
        assert!(c1.layouts < c.layouts, "{c1:?} against {c:?}");
        let invalid: u64 = c.invalid.values().sum();
        // Every combination is left out once or yields one or two variants.
        let layouts: std::collections::BTreeSet<(u64, u64, u64, String)> = cands
            .iter()
            .map(|x| {
                let l = &x.layout;
                (l.tp, l.pp, l.micro_batch, l.schedule.clone())
            })
            .collect();
        assert_eq!(
            c.indivisible + invalid + c.out_of_memory + layouts.len() as u64,
            c.considered
        );
        for x in &cands {
            let l = &x.layout;
            assert_eq!(l.tp * l.pp * l.dp * l.ulysses, 64);
            assert_eq!(l.dp * l.micro_batch * l.micro_batches, 64);
            let sc = x.scenario(&g, space.order).unwrap();
            assert!(crate::memory::check(&sc).is_ok(), "{}", l.name());
            assert_eq!(sc.parallel.pp, l.pp);
            assert_eq!(sc.micro_batches, l.micro_batches);
            // ZeRO-3 or recomputation only where ZeRO-1 without it does not fit.
            if l.zero == 3 || l.recompute == "full" {
                let mut cheap = sc.clone();
                cheap.zero = 1;
                cheap.recompute = Recompute::None;
                assert!(crate::memory::check(&cheap).is_err(), "{}", l.name());
            }
        }
        // Bad spaces are refused by name.
        let mut bad = space.clone();
        bad.zero = vec![4];
        assert!(
            enumerate(&g, 64, &bad)
                .unwrap_err()
                .to_string()
                .contains("--zero")
        );
        assert!(enumerate(&g, 0, &space).is_err());
    }

    /// A MoE model's layouts range over ep too: each divides the experts and its
    /// stage's tp · ulysses · dp ranks, and reaches the scenario; a dense model runs ep 1
    /// and refuses any other.
    #[test]
    fn moe_layouts_range_over_expert_parallelism() {
        let g = grid("mixtral-8x7b", "dgx-h100-rail", Some("2"), "4096");
        let space = Space {
            pp: Some(vec![1, 2]),
            tp: Some(vec![1, 2]),
            micro_batch: vec![1],
            schedules: vec![PpSchedule::OneFOneB],
            ..Space::default()
        };
        let (cands, c) = enumerate(&g, 32, &space).unwrap();
        let eps: std::collections::BTreeSet<u64> = cands.iter().map(|x| x.layout.ep).collect();
        assert_eq!(eps.into_iter().collect::<Vec<_>>(), [1, 2, 4, 8], "{c:?}");
        for x in &cands {
            let l = &x.layout;
            assert_eq!(8 % l.ep, 0);
            assert_eq!((l.tp * l.ulysses * l.dp) % l.ep, 0, "{}", l.name());
            assert_eq!(x.scenario(&g, space.order).unwrap().parallel.ep, l.ep);
            assert_eq!(l.name().contains(" · ep "), l.ep > 1);
        }
        // Given degrees: only those; 3 divides neither the experts nor the stages.
        let three = Space {
            ep: Some(vec![3, 8]),
            ..space.clone()
        };
        let (cands, c3) = enumerate(&g, 32, &three).unwrap();
        assert!(cands.iter().all(|x| x.layout.ep == 8));
        assert!(
            c3.indivisible >= c3.considered / 2,
            "every ep 3 combination: {c3:?}"
        );
        let dense = grid("llama-3-8b", "dgx-h100-rail", Some("2"), "4096");
        let (cands, _) = enumerate(&dense, 32, &space).unwrap();
        assert!(cands.iter().all(|x| x.layout.ep == 1));
        let e = enumerate(&dense, 32, &three).unwrap_err().to_string();
        assert!(e.contains("--ep") && e.contains("no experts"), "{e}");
    }

    #[test]
    fn ranking_orders_by_the_figure_and_prefers_exact_figures() {
        let layout = Layout {
            tp: 1,
            pp: 1,
            dp: 1,
            ulysses: 1,
            ep: 1,
            micro_batch: 1,
            micro_batches: 1,
            schedule: "1f1b".into(),
            recompute: "none".into(),
            zero: 1,
            dp_strategy: None,
        };
        let row = |i: u64, tps: f64, exact: Option<f64>| Row {
            rank: 0,
            index: i,
            layout: layout.clone(),
            strategy: "flash".into(),
            memory_gib: 1.0,
            extrapolated: true,
            screened: Figures {
                tokens_per_s: tps,
                ..figures(1.0, None)
            },
            exact: exact.map(|t| Figures {
                tokens_per_s: t,
                ..figures(1.0, None)
            }),
        };
        let mut rows = vec![row(0, 1.0, None), row(1, 3.0, None), row(2, 2.0, None)];
        let by = RankBy::default();
        // Verify the best 2 by screened figures: row 1 turns out slower than row 2.
        let mut exact = |r: &Row| {
            Ok(Figures {
                tokens_per_s: if r.index == 1 { 1.5 } else { 2.5 },
                ..figures(1.0, None)
            })
        };
        finish_ranking(&mut rows, &by, 2, &mut exact).unwrap();
        let order: Vec<u64> = rows.iter().map(|r| r.index).collect();
        assert_eq!(order, [2, 1, 0]);
        assert_eq!(rows.iter().map(|r| r.rank).collect::<Vec<_>>(), [1, 2, 3]);
        assert!(rows[2].exact.is_none());
        // Less is better for times.
        let by = RankBy::parse("makespan_us").unwrap();
        assert_eq!(by.key(&figures(2.0, None)), 2.0);
        assert!(RankBy::parse("critical_rank").is_err());
        assert!(RankBy::parse("nope").is_err());
    }
}
