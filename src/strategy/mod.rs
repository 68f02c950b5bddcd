//! Strategies build Plans. They know shapes, collectives and schedules; they never know
//! which executor will run the Plan.
//!
//! A *site* is one collective next to one GEMM: `fc1` (all-gather, then the
//! column-parallel FC1) and `fc2` (the row-parallel FC2, then reduce-scatter). Every site
//! cuts the token dimension into *blocks* — one block for `sequential`, K for `chunked:K`,
//! N (one per rank, block j = rank j's rows) for `flash` — and a following site consumes
//! the blocks the previous one produced, so the MLP block is a composition of the two.

pub mod collective;
pub mod layer;
pub mod moe;
mod schedule;
mod sites;
mod steps;

pub use sites::{Blocks, RankStreams, block_region, piece_row, shard_region};

use crate::plan::{BufInit, Plan, PlanBuilder, PlanError, Region};
use crate::scenario::{Scenario, Strategy, Workload};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StrategyError {
    #[error("strategy `{strategy}`: {what} ({value}) is not divisible by {by}")]
    Indivisible {
        strategy: String,
        what: &'static str,
        value: u64,
        by: u64,
    },
    #[error(
        "site `{site}` under `{strategy}` cannot be built for a group only part of which a symmetric plan holds"
    )]
    PartlyHeld { site: String, strategy: String },
    #[error("{0}")]
    Unsupported(&'static str),
    #[error("site `{site}` has no strategy `{strategy}` (it has: {known})")]
    SiteStrategy {
        site: &'static str,
        strategy: String,
        known: &'static str,
    },
    #[error(transparent)]
    Plan(#[from] PlanError),
}

/// Shapes of one tensor-parallel MLP block, as one rank sees them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MlpShape {
    /// Ranks in the tensor-parallel group (N).
    pub ranks: u32,
    /// Tokens (rows) of the gathered activation, M = batch × sequence.
    pub tokens: u64,
    pub hidden: u64,
    /// FC1 output width over all ranks (2·ffn when gated).
    pub fc1_width: u64,
    /// FC2 input width over all ranks (ffn).
    pub ffn: u64,
    pub gated: bool,
    pub activation: crate::scenario::Activation,
    pub dtype: crate::scenario::DType,
}

impl MlpShape {
    pub fn of(sc: &Scenario) -> MlpShape {
        MlpShape {
            ranks: sc.parallel.tp as u32,
            tokens: sc.tokens(),
            hidden: sc.model.hidden,
            fc1_width: sc.model.fc1_width(),
            ffn: sc.model.ffn,
            gated: sc.model.activation.gated(),
            activation: sc.model.activation,
            dtype: sc.dtype,
        }
    }
}

/// Number of token blocks a strategy cuts a site into.
pub fn blocks(strategy: Strategy, ranks: u32) -> u64 {
    match strategy {
        Strategy::Sequential | Strategy::Bulk | Strategy::FlashEp(_) => 1,
        Strategy::Chunked(k) => k as u64,
        Strategy::Flash
        | Strategy::Direct
        | Strategy::PermuteLoop
        | Strategy::PermuteLoopBidir
        | Strategy::QuerySplit
        | Strategy::FlashA2a => ranks as u64,
    }
}

pub(crate) fn check_div(
    strategy: Strategy,
    what: &'static str,
    value: u64,
    by: u64,
) -> Result<(), StrategyError> {
    if by == 0 || value % by != 0 {
        return Err(StrategyError::Indivisible {
            strategy: strategy.to_string(),
            what,
            value,
            by,
        });
    }
    Ok(())
}

/// Check that `strategy` can cut this shape evenly.
pub fn check_shape(strategy: Strategy, s: &MlpShape) -> Result<(), StrategyError> {
    let n = s.ranks as u64;
    check_div(strategy, "tokens", s.tokens, n)?;
    check_div(strategy, "fc1 width", s.fc1_width, n)?;
    check_div(strategy, "ffn", s.ffn, n)?;
    if let Strategy::Chunked(k) = strategy {
        check_div(strategy, "tokens per rank", s.tokens / n, k as u64)?;
    }
    Ok(())
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// Build the Plan of `workload` under `strategy`.
pub fn build(sc: &Scenario, workload: Workload, strategy: Strategy) -> Result<Plan, StrategyError> {
    build_with(sc, workload, strategy, false)
}

/// [`build`]; with `symmetric`, layers and steps whose ranks fill a topology with a
/// rotation that moves whole tensor-parallel groups are built as symmetric plans (the
/// first groups only, exact; for the simulator without jitter or stragglers).
pub fn build_with(
    sc: &Scenario,
    workload: Workload,
    strategy: Strategy,
    symmetric: bool,
) -> Result<Plan, StrategyError> {
    build_limited(sc, workload, strategy, symmetric, crate::plan::op_limit())
}

/// [`build_with`], refusing (with [`crate::plan::PlanError::TooLarge`]) a layer or step
/// plan once it passes `max_ops` ops, before it is all built: a simulation whose event
/// budget is smaller than its plan's ops cannot finish, and the layout search uses this
/// to leave such layouts out at the cost of their first `max_ops` ops.
pub fn build_limited(
    sc: &Scenario,
    workload: Workload,
    strategy: Strategy,
    symmetric: bool,
    max_ops: usize,
) -> Result<Plan, StrategyError> {
    match workload {
        Workload::Layer | Workload::Step | Workload::Attention => {
            layer_plan(sc, workload, strategy, symmetric, max_ops)
        }
        Workload::AgGemm | Workload::GemmRs | Workload::Mlp => {
            mlp_plan(sc, workload, strategy, symmetric)
        }
        Workload::Moe => moe::build(&moe::MoeShape::of(sc)?, strategy),
    }
}

/// A layer or training step (`workload` is one of them).
fn layer_plan(
    sc: &Scenario,
    workload: Workload,
    strategy: Strategy,
    symmetric: bool,
    max_ops: usize,
) -> Result<Plan, StrategyError> {
    let shape = layer::LayerShape::of(sc);
    let step = workload == Workload::Step;
    let topo = &sc.hardware.topology;
    // The smallest multiple of the topology's rotation that moves whole replicas
    // (tp · ulysses · pp GPUs), if it leaves more than one orbit.
    let replica = sc.parallel.tp * sc.parallel.ulysses * sc.parallel.pp;
    let shift = topo
        .rotation()
        .filter(|_| symmetric && sc.parallel.world() as usize == topo.gpu_count())
        .map(|r| {
            let g = r.gpu_shift as u64;
            g / gcd(g, replica) * replica
        })
        .filter(|&sh| sh > 0 && (topo.gpu_count() as u64) % sh == 0)
        .filter(|&sh| sh < topo.gpu_count() as u64)
        .filter(|&sh| topo.link_orbits_for(sh as u32).ok().flatten().is_some())
        .map(|sh| sh as u32);
    let net = layer::Net {
        topo,
        nccl: &sc.hardware.comm.nccl,
    };
    layer::build(
        &shape,
        strategy,
        &sc.site_strategies,
        step,
        shift,
        Some(net),
        max_ops,
        &sc.routing
            .rank_shares(sc.model.moe.map_or(1, |m| m.experts), sc.parallel.ep),
    )
}

/// One tensor-parallel MLP site (`ag-gemm`, `gemm-rs`) or block (`mlp`).
fn mlp_plan(
    sc: &Scenario,
    workload: Workload,
    strategy: Strategy,
    symmetric: bool,
) -> Result<Plan, StrategyError> {
    let shape = MlpShape::of(sc);
    check_shape(strategy, &shape)?;
    let mut b = PlanBuilder::new(shape.ranks);
    let streams = RankStreams::declare(&mut b);
    let (m, h) = (shape.tokens, shape.hidden);
    let n = shape.ranks as u64;
    // Each rank's result: all of `y` for AG+GEMM, its own shard of the reduced sums
    // otherwise (where the strategy's layout keeps it).
    let shard_of = |bufs: Vec<crate::plan::BufId>| -> Vec<Region> {
        bufs.iter()
            .enumerate()
            .map(|(r, &p)| sites::shard_region(strategy, shape.ranks, m, p, r as u64))
            .collect()
    };
    let inputs = vec![None; n as usize];
    let outputs = match workload {
        Workload::AgGemm => {
            b.add_model_flops(crate::cost::gemm_flops(m, shape.fc1_width, h));
            let y = sites::ag_gemm(
                &mut b,
                &streams,
                strategy,
                "fc1",
                &shape,
                shape.fc1_width,
                &inputs,
            )?;
            y.bufs.iter().map(|&y| Region::rows(y, 0, m)).collect()
        }
        Workload::GemmRs => {
            b.add_model_flops(crate::cost::gemm_flops(m, h, shape.ffn));
            let a = sites::per_rank(&mut b, &streams, "a", m, shape.ffn / n, shape.dtype, |_| {
                BufInit::Local
            });
            let ready = Blocks::inputs_ready(strategy, shape.ranks, m, a);
            shard_of(sites::gemm_rs(&mut b, &streams, strategy, "fc2", &shape, &ready)?.0)
        }
        Workload::Moe => return moe::build(&moe::MoeShape::of(sc)?, strategy),
        Workload::Layer | Workload::Step | Workload::Attention => {
            return layer_plan(sc, workload, strategy, symmetric, crate::plan::op_limit());
        }
        Workload::Mlp => {
            b.add_model_flops(crate::cost::gemm_flops(m, shape.fc1_width, h));
            b.add_model_flops(crate::cost::gemm_flops(m, h, shape.ffn));
            let fc1 = sites::ag_gemm(
                &mut b,
                &streams,
                strategy,
                "fc1",
                &shape,
                shape.fc1_width,
                &inputs,
            )?;
            let act = sites::activation(&mut b, &streams, strategy, "act", &shape, &fc1)?;
            shard_of(sites::gemm_rs(&mut b, &streams, strategy, "fc2", &shape, &act)?.0)
        }
    };
    for o in outputs {
        b.output(o);
    }
    Ok(b.finish()?)
}

#[cfg(test)]
mod tests;
