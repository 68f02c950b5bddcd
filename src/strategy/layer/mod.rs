//! Whole transformer layers and training steps under tensor + sequence parallelism
//! (TPSP), forward and backward, as simulator-only Plans (no data flow).
//!
//! One layer, per rank (N ranks, M = batch·seq tokens, shard = M/N rows, h = hidden):
//!
//! forward
//! : norm → **QKV** (AG + column-parallel GEMM, width (heads + 2·kv)·d/N) → fused
//!   attention (heads/N heads, causal) → **proj** (row-parallel GEMM + RS) → residual add
//!   → norm → **FC1** (AG + GEMM) → activation → **FC2** (GEMM + RS) → residual add.
//!
//! backward (TransformerEngine's placement, METHOD.md §2)
//! : **FC2** dgrad (row-parallel: AG of dY + GEMM), FC2 wgrad; activation backward;
//!   **FC1** dgrad (column-parallel: GEMM + RS), with the bulk AG of FC1's input that its
//!   wgrad needs running on the comm stream during the dgrad GEMMs, FC1 wgrad; norm and
//!   residual backward; the same for **proj** and **QKV** around the attention backward.
//!
//! Every AG+GEMM / GEMM+RS site runs the step's strategy (`sequential`, `chunked:K`,
//! `flash`) with the existing site builders; the bulk AGs are ring all-gathers. Within a
//! rank, compute runs on one in-order stream and communication on another, so a wgrad
//! GEMM queued after a dgrad GEMM overlaps the dgrad's reduce-scatter.
//!
//! A *step* is, per micro-batch, the layers forward, the LM head (vocab-parallel:
//! AG + GEMM forward, GEMM + RS dgrad, wgrad), the layers backward in reverse; micro-batches
//! follow each other. Model FLOPs (for MFU) are 6·P·T for the linear layers (P their
//! parameters, T tokens: forward 2·P·T, backward 4·P·T) plus, per layer, three times the
//! causal attention forward, 3 · 4·d·heads·b·s(s+1)/2 = 6·h·T·(s+1) — PaLM's 12·L·h·s·T
//! term with the causal mask counted.
//!
//! Around that tensor-parallel group: **Ulysses** (`ulysses` U > 1) gives each group
//! seq/U of every sequence and all-to-alls over the U groups around the attention
//! (forward and backward; `sequential` or `flash-a2a`); **data parallelism** (`dp`)
//! replicates the U groups and syncs weights ZeRO-3-style over the dp × U ranks holding
//! them (see [`build`]). Ranks: tp fastest, then Ulysses, then dp (`tp-inner`), or the
//! reverse (`dp-inner`).

use super::collective::{CollectiveError, CollectiveOp, Comm};
use super::sites::{self, Blocks, RankStreams, WeightChunks};
use super::{MlpShape, StrategyError, blocks, check_div};
use crate::plan::{
    EltKind, OpId, OpKind, OpTag, Pass, Plan, PlanBuilder, Scope, StreamId, StreamKind,
};
use crate::scenario::{
    Activation, DType, Parallel, PpSchedule, RankOrder, Recompute, Scenario, Strategy,
};
use std::collections::BTreeMap;

mod data_parallel;
mod experts;
pub mod pipeline;
mod shape;
mod ulysses;

pub use data_parallel::dp_strategy;
use data_parallel::grad_piece;
pub use experts::{block_shape, check_moe_sites, moe_strategy};
pub use shape::{LayerMoe, LayerShape, check_dp, check_layer, check_size, estimated_ops};

/// Keys of per-site strategies: a linear's sites in both phases (`qkv`, `proj`, `fc1`,
/// `fc2`, `head`: its forward AG+GEMM or GEMM+RS and its backward dgrad), or one phase
/// (`fwd.fc2`, `bwd.fc1`, …). A phase key wins over a unit key, which wins over the run's
/// strategy.
pub const SITE_KEYS: [&str; 18] = [
    "qkv", "proj", "fc1", "fc2", "head", "fwd.qkv", "fwd.proj", "fwd.fc1", "fwd.fc2", "fwd.head",
    "bwd.qkv", "bwd.proj", "bwd.fc1", "bwd.fc2", "bwd.head", "dp", "a2a", "moe",
];

struct Ctx<'a> {
    b: PlanBuilder,
    /// Every built rank (replica-major: index g·tp + t): compute and tensor-parallel
    /// comm streams.
    st: RankStreams,
    /// Tensor-parallel group of each built replica (members in tensor-rank order).
    groups: Vec<RankStreams>,
    /// Data-parallel group of each tensor rank t: compute and dp comm streams, members
    /// d = 0..dp, the first `built` of them held.
    dp_groups: Vec<RankStreams>,
    strategy: Strategy,
    sites: &'a BTreeMap<String, Strategy>,
    s: &'a LayerShape,
    /// Gradients are reduced in this backward (the last micro-batch's).
    sync: bool,
    /// Per built rank: the layer's gradient-producing ops so far (for a bucket).
    grads: PerRank,
    /// Forward sites whose weights are being gathered by a fused parameter Flash-AG:
    /// site → per built rank, per weight column chunk (in use order) its arrival.
    fwd_weights: BTreeMap<&'static str, Vec<Vec<Option<OpId>>>>,
    /// The NCCL communicator of each tensor rank's data-parallel group (empty: the
    /// groups' bulk collectives are plain rings on the `dp-comm` streams).
    dp_comms: Vec<Comm>,
    /// Per built rank: ops its next compute op also waits for (a collective's channels
    /// end in several ops).
    gate: Vec<Vec<OpId>>,
    /// Per built rank: the streams of its P2P with the neighbouring pipeline stages
    /// (empty without pipeline parallelism).
    pp_send: Vec<StreamId>,
    pp_recv: Vec<StreamId>,
    /// The stage's MoE blocks (a mixture-of-experts model's), and whether the layer
    /// being built is a MoE layer.
    moe: Option<MoeParts>,
    moe_layer: bool,
    /// A training step's layers (else one layer: a MoE model's is a MoE layer).
    step: bool,
}

/// What a stage's MoE layers are built with: the block as each rank sees it, its
/// strategy, the held expert-parallel groups (group q: built ranks q·ep .. q·ep + ep)
/// and the expert data-parallel groups (position e: built ranks e, ep + e, …; empty
/// when each expert has one holder), and the expert gradient buckets left for after a
/// `sequential` backward.
struct MoeParts {
    shape: super::moe::MoeShape,
    strategy: Strategy,
    groups: Vec<super::moe::Members>,
    edp: Vec<RankStreams>,
    late: Vec<u64>,
}

/// The machine the data-parallel collectives of a layer or step run over as NCCL runs
/// them (channels, rail-aligned rings, the protocol its model picks).
#[derive(Debug, Clone, Copy)]
pub struct Net<'a> {
    pub topo: &'a crate::topology::Topology,
    pub nccl: &'a crate::cost::nccl::NcclConfig,
}

impl Net<'_> {
    /// The node of each of the GPUs `members`.
    fn nodes(&self, members: &[u32]) -> Vec<u64> {
        members
            .iter()
            .map(|&r| self.topo.node_of(r as usize) as u64)
            .collect()
    }
}

/// Within-shard row range [lo, hi) (in units of 1/(K·N) of a shard, K·N = `den`) and the
/// shards a token block covers: all of them for sequential/chunked blocks (a strided
/// piece of every shard), one for the per-rank blocks of flash, direct, permute-loop.
fn block_extent(st: Strategy, ranks: u64, j: u64, den: u64) -> (u64, u64, Option<u64>) {
    match st {
        // flash-ep (a MoE strategy) is refused at tensor-parallel sites by validation.
        Strategy::Sequential | Strategy::Bulk | Strategy::FlashEp(_) => (0, den, None),
        Strategy::Chunked(k) => {
            let w = den / k as u64;
            (j * w, (j + 1) * w, None)
        }
        Strategy::Flash
        | Strategy::Direct
        | Strategy::PermuteLoop
        | Strategy::PermuteLoopBidir
        | Strategy::QuerySplit
        | Strategy::FlashA2a => (0, den, Some(j % ranks)),
    }
}

/// `bl`, cut into `to`'s blocks instead of `from`'s: a block is ready when every block of
/// `from` it overlaps is (on each rank those are compute-stream ops, so the latest issued
/// ends last).
fn remap(bl: &Blocks, from: Strategy, to: Strategy, ranks: u32, tokens: u64) -> Blocks {
    if from == to {
        return bl.clone();
    }
    let n = ranks as u64;
    let (nf, nt) = (blocks(from, ranks), blocks(to, ranks));
    let den = nf * nt;
    let mut out = Blocks::inputs_ready(to, ranks, tokens, bl.bufs.clone());
    out.ready = vec![vec![None; nt as usize]; bl.ready.len()];
    for (r, ready) in out.ready.iter_mut().enumerate() {
        for (jt, slot) in ready.iter_mut().enumerate() {
            let (tlo, thi, tsh) = block_extent(to, n, jt as u64, den);
            *slot = (0..nf)
                .filter(|&jf| {
                    let (flo, fhi, fsh) = block_extent(from, n, jf, den);
                    let shards = match (fsh, tsh) {
                        (Some(a), Some(b)) => a == b,
                        _ => true,
                    };
                    shards && flo < thi && tlo < fhi
                })
                .filter_map(|jf| bl.ready[r][jf as usize])
                .max();
        }
    }
    out
}

type PerRank = Vec<Option<OpId>>;

/// One step of a Ulysses exchange (see `Ctx::ulysses_exchange`).
#[derive(Debug, Clone, Copy)]
struct Exchange {
    site: u16,
    step: usize,
    piece: u64,
    fused: bool,
}

fn tag(site: u16, slice: u64) -> OpTag {
    OpTag {
        site,
        step: 0,
        slice: slice as u32,
    }
}

impl Ctx<'_> {
    /// The strategy of `unit`'s site in `phase` (`fwd`/`bwd`).
    fn strategy_for(&self, phase: &str, unit: &str) -> Strategy {
        self.sites
            .get(&format!("{phase}.{unit}"))
            .or_else(|| self.sites.get(unit))
            .copied()
            .unwrap_or(self.strategy)
    }

    /// The data-parallel site's strategy (see [`dp_strategy`]).
    fn dp_strategy(&self) -> Strategy {
        dp_strategy(self.strategy, self.sites)
    }

    fn n(&self) -> usize {
        self.st.len()
    }

    fn tp(&self) -> usize {
        self.s.ranks as usize
    }

    fn shard_bytes(&self, cols: u64) -> u64 {
        self.s.tokens() / self.s.ranks as u64 * cols * self.s.dtype.bytes()
    }

    /// One op per rank on its compute stream after `after[r]`.
    fn each(
        &mut self,
        site: &str,
        kind: OpKind,
        after: &PerRank,
    ) -> Result<PerRank, StrategyError> {
        let site = self.b.site(site);
        let mut out = Vec::with_capacity(self.n());
        for (r, a) in after.iter().enumerate() {
            let mut d: Vec<OpId> = a.iter().copied().collect();
            if let Some(g) = self.gate.get_mut(r) {
                d.append(g);
            }
            out.push(Some(self.b.single(
                self.st.compute[r],
                kind,
                &d,
                tag(site, 0),
            )?));
        }
        Ok(out)
    }

    /// A memory-bound kernel over this rank's shard: `tensors` shard-sized tensors of
    /// width h read or written.
    fn elt(&mut self, site: &str, tensors: u64, after: &PerRank) -> Result<PerRank, StrategyError> {
        let bytes = self.shard_bytes(self.s.hidden) * tensors;
        let kind = OpKind::Elementwise {
            kind: EltKind::Add,
            bytes,
        };
        self.each(site, kind, after)
    }

    fn gemm(
        &mut self,
        site: &str,
        m: u64,
        n: u64,
        k: u64,
        after: &PerRank,
    ) -> Result<PerRank, StrategyError> {
        let kind = OpKind::gemm(m, n, k, self.s.dtype);
        self.each(site, kind, after)
    }

    /// Group `g`'s streams, with the weights of `site` being gathered, if they are.
    fn group_for(&self, g: usize, site: &str) -> RankStreams {
        let mut group = self.groups[g].clone();
        if let Some(w) = self.fwd_weights.get(site) {
            let tp = self.tp();
            group.weights = Some(WeightChunks {
                ready: w[g * tp..(g + 1) * tp].to_vec(),
            });
        }
        group
    }

    /// Run `f` on each built tensor-parallel group, in order, with the group's streams
    /// (carrying `site`'s weight chunks when they are being gathered) and its index.
    fn per_group<T>(
        &mut self,
        site: &str,
        mut f: impl FnMut(&mut PlanBuilder, &RankStreams, usize) -> Result<T, StrategyError>,
    ) -> Result<Vec<T>, StrategyError> {
        let mut out = Vec::with_capacity(self.groups.len());
        for g in 0..self.groups.len() {
            let group = self.group_for(g, site);
            out.push(f(&mut self.b, &group, g)?);
        }
        Ok(out)
    }

    fn attention(
        &mut self,
        site: &str,
        backward: bool,
        after: &PerRank,
    ) -> Result<PerRank, StrategyError> {
        let s = self.s;
        // With Ulysses, heads/(tp·u) heads over the whole sequence.
        let kind = OpKind::Attention(crate::cost::Attention {
            bh: s.batch * s.heads / (s.ranks as u64 * s.ulysses.max(1) as u64),
            seq_q: s.seq.min(u32::MAX as u64) as u32,
            seq_kv: s.seq.min(u32::MAX as u64) as u32,
            head_dim: s.head_dim().min(u32::MAX as u64) as u32,
            causal: s.causal,
            backward,
            dtype: s.dtype,
        });
        self.each(site, kind, after)
    }

    /// Query-split attention + out-projection: Flash-RS's slice order, each partial
    /// GEMM right after the attention of its query slice j (positions j·s/N .. of every
    /// sequence; causal, so it sees keys up to (j+1)·s/N and slices differ in cost).
    fn query_split(&mut self, after: &PerRank) -> Result<PerRank, StrategyError> {
        let s = *self.s;
        let n = s.ranks as u64;
        let q = s.seq / n;
        let shape = s.mlp(s.hidden, s.hidden);
        let site = self.b.site("fwd.attn");
        let tp = self.tp();
        let done = self.per_group("fwd.proj", |b, group, g| {
            let after = slice_ranks(after, g, tp);
            let input = ready_blocks(Strategy::QuerySplit, &s, &after);
            let compute = group.compute.clone();
            let mut before = |b: &mut PlanBuilder, r: usize, j: u64| {
                // Without the mask every query slice sees the whole sequence.
                let kv = if s.causal { (j + 1) * q } else { s.seq };
                let kind = OpKind::Attention(crate::cost::Attention {
                    bh: s.batch * s.heads / n,
                    seq_q: q.min(u32::MAX as u64) as u32,
                    seq_kv: kv.min(u32::MAX as u64) as u32,
                    head_dim: s.head_dim().min(u32::MAX as u64) as u32,
                    causal: s.causal,
                    backward: false,
                    dtype: s.dtype,
                });
                let d: Vec<OpId> = after[r].iter().copied().collect();
                Ok(Some(b.single(compute[r], kind, &d, tag(site, j))?))
            };
            let shape = &shape;
            let qs = Strategy::QuerySplit;
            Ok(sites::gemm_rs_with(b, group, qs, "fwd.proj", shape, &input, &mut before)?.1)
        })?;
        Ok(done.concat())
    }

    /// All token blocks of `strategy` ready on rank r after `after[r]`.
    fn ready(&self, strategy: Strategy, after: &PerRank) -> Blocks {
        ready_blocks(strategy, self.s, after)
    }

    /// AG + column-parallel GEMM of `width` (over all ranks) with K = `k`, under `st`.
    fn ag_gemm(
        &mut self,
        st: Strategy,
        site: &str,
        k: u64,
        width: u64,
        after: &PerRank,
    ) -> Result<Blocks, StrategyError> {
        let shape = self.s.mlp(k, self.s.ffn);
        let tp = self.tp();
        let parts = self.per_group(site, |b, group, g| {
            sites::ag_gemm(
                b,
                group,
                st,
                site,
                &shape,
                width,
                &slice_ranks(after, g, tp),
            )
        })?;
        Ok(concat_blocks(parts))
    }

    /// The activation over each block of `input` (FC1's, cut by `st`).
    fn activation(
        &mut self,
        st: Strategy,
        site: &str,
        input: &Blocks,
    ) -> Result<Blocks, StrategyError> {
        let shape = self.s.mlp(self.s.hidden, self.s.ffn);
        let tp = self.tp();
        let parts = self.per_group(site, |b, group, g| {
            sites::activation(b, group, st, site, &shape, &slice_blocks(input, g, tp))
        })?;
        Ok(concat_blocks(parts))
    }

    /// Row-parallel GEMM (K = `k_total`/N, width h) + RS under `st` of `input`'s blocks
    /// (cut by `input_st`).
    fn gemm_rs(
        &mut self,
        st: Strategy,
        site: &str,
        k_total: u64,
        input: &Blocks,
        input_st: Strategy,
    ) -> Result<PerRank, StrategyError> {
        let shape = self.s.mlp(self.s.hidden, k_total);
        let input = remap(input, input_st, st, self.s.ranks, self.s.tokens());
        let tp = self.tp();
        let parts = self.per_group(site, |b, group, g| {
            let slice = slice_blocks(&input, g, tp);
            Ok(sites::gemm_rs(b, group, st, site, &shape, &slice)?.1)
        })?;
        Ok(parts.concat())
    }

    /// A ring all-gather of every rank's shard of width h (the bulk AG for a wgrad).
    fn bulk_ag(&mut self, site: &str, after: &PerRank) -> Result<PerRank, StrategyError> {
        let piece = self.shard_bytes(self.s.hidden);
        let id = self.b.site(site);
        let tp = self.tp();
        let parts = self.per_group(site, |b, group, g| {
            sites::bulk_all_gather(b, group, id, piece, &slice_ranks(after, g, tp))
        })?;
        Ok(parts.concat())
    }

    fn layer_fwd(&mut self, x: &PerRank) -> Result<PerRank, StrategyError> {
        let s = *self.s;
        let h = s.hidden;
        let (qkv_st, proj_st) = (
            self.strategy_for("fwd", "qkv"),
            self.strategy_for("fwd", "proj"),
        );
        let (fc1_st, fc2_st) = (
            self.strategy_for("fwd", "fc1"),
            self.strategy_for("fwd", "fc2"),
        );
        let n1 = self.elt("fwd.norm", 2, x)?;
        let qkv = self.ag_gemm(qkv_st, "fwd.qkv", h, s.qkv_width(), &n1)?;
        let proj = if proj_st == Strategy::QuerySplit {
            self.query_split(&last(&qkv))?
        } else if s.ulysses > 1 {
            // Ulysses: heads ↔ sequence all-to-all, attention over the whole sequence,
            // and back.
            let q = self.a2a_blocks("fwd.a2a-qkv", self.qkv_piece(), &qkv)?;
            let a = self.ulysses_attention(&q)?;
            let proj_in = self.ready(proj_st, &a);
            self.gemm_rs(proj_st, "fwd.proj", h, &proj_in, proj_st)?
        } else {
            let a = self.attention("fwd.attn", false, &last(&qkv))?;
            let proj_in = self.ready(proj_st, &a);
            self.gemm_rs(proj_st, "fwd.proj", h, &proj_in, proj_st)?
        };
        let r1 = self.elt("fwd.residual", 3, &proj)?;
        if s.attention_only {
            return Ok(r1);
        }
        let n2 = self.elt("fwd.norm", 2, &r1)?;
        if self.moe_layer {
            let y = self.moe_fwd(&n2)?;
            return self.elt("fwd.residual", 3, &y);
        }
        let fc1 = self.ag_gemm(fc1_st, "fwd.fc1", h, s.fc1_width, &n2)?;
        let act = self.activation(fc1_st, "fwd.act", &fc1)?;
        let fc2 = self.gemm_rs(fc2_st, "fwd.fc2", s.ffn, &act, fc1_st)?;
        self.elt("fwd.residual", 3, &fc2)
    }

    fn layer_bwd(&mut self, dy: &PerRank) -> Result<PerRank, StrategyError> {
        let s = *self.s;
        let (h, m, n) = (s.hidden, s.tokens(), s.ranks as u64);
        let (qkv_st, proj_st) = (
            self.strategy_for("bwd", "qkv"),
            self.strategy_for("bwd", "proj"),
        );
        let (fc1_st, fc2_st) = (
            self.strategy_for("bwd", "fc1"),
            self.strategy_for("bwd", "fc2"),
        );
        let r2 = if s.attention_only {
            dy.clone()
        } else if self.moe_layer {
            let dx = self.moe_bwd(dy)?;
            self.elt("bwd.norm", 3, &dx)?
        } else {
            self.mlp_bwd(dy, fc1_st, fc2_st)?
        };
        // Out-projection, row-parallel.
        let proj = self.ag_gemm(proj_st, "bwd.proj.dgrad", h, h, &r2)?;
        let proj_done = last(&proj);
        self.wgrad("bwd.proj.wgrad", h / n, h, m, &proj_done)?;
        let a = if s.ulysses > 1 {
            // Ulysses: dO to head-sharded, attention backward, dQKV back.
            let d_out = self.a2a_blocks("bwd.a2a-out", self.out_piece(), &proj)?;
            let a = self.attention("bwd.attn", true, &d_out)?;
            let piece = self.qkv_piece();
            self.a2a("bwd.a2a-qkv", piece, &a, true)?
        } else {
            self.attention("bwd.attn", true, &proj_done)?
        };
        // QKV, column-parallel, like FC1.
        let x1 = self.bulk_ag("bwd.qkv.ag", &r2)?;
        let qkv_in = self.ready(qkv_st, &a);
        let qkv = self.gemm_rs(qkv_st, "bwd.qkv.dgrad", s.qkv_width(), &qkv_in, qkv_st)?;
        let w_after: PerRank = (0..self.n()).map(|r| later(a[r], x1[r])).collect();
        self.wgrad("bwd.qkv.wgrad", h, s.qkv_width() / n, m, &w_after)?;
        self.elt("bwd.norm", 3, &qkv)
    }

    /// The MLP block's backward from the layer's output gradient `dy`: FC2's dgrad and
    /// wgrad, the activation's, FC1's; the gradient at the block's input.
    fn mlp_bwd(
        &mut self,
        dy: &PerRank,
        fc1_st: Strategy,
        fc2_st: Strategy,
    ) -> Result<PerRank, StrategyError> {
        let s = *self.s;
        let (h, m, n) = (s.hidden, s.tokens(), s.ranks as u64);
        // FC2, row-parallel: dgrad = AG(dY) + GEMM; wgrad after it.
        let fc2 = self.ag_gemm(fc2_st, "bwd.fc2.dgrad", h, s.ffn, dy)?;
        let fc2_done = last(&fc2);
        self.wgrad("bwd.fc2.wgrad", s.ffn / n, h, m, &fc2_done)?;
        let act = self.activation(fc2_st, "bwd.act", &fc2)?;
        // FC1, column-parallel: the bulk AG of its input for the wgrad goes first on the
        // comm stream, under the dgrad GEMMs; then dgrad = GEMM + RS; then the wgrad.
        let x2 = self.bulk_ag("bwd.fc1.ag", dy)?;
        let fc1 = self.gemm_rs(fc1_st, "bwd.fc1.dgrad", s.fc1_width, &act, fc2_st)?;
        let act_done = last(&act);
        let w_after: PerRank = (0..self.n()).map(|r| later(act_done[r], x2[r])).collect();
        self.wgrad("bwd.fc1.wgrad", h, s.fc1_width / n, m, &w_after)?;
        self.elt("bwd.norm", 3, &fc1)
    }

    fn head_fwd(&mut self, x: &PerRank) -> Result<PerRank, StrategyError> {
        let s = *self.s;
        let st = self.strategy_for("fwd", "head");
        let y = self.ag_gemm(st, "fwd.head", s.hidden, s.vocab, x)?;
        // Softmax cross-entropy over the local vocab shard (a few passes over the logits).
        let logits = s.tokens() * s.vocab / s.ranks as u64 * s.dtype.bytes();
        let kind = OpKind::Elementwise {
            kind: EltKind::Activation,
            bytes: 3 * logits,
        };
        self.each("fwd.loss", kind, &last(&y))
    }

    fn head_bwd(&mut self, after: &PerRank) -> Result<PerRank, StrategyError> {
        let s = *self.s;
        let (h, m, n) = (s.hidden, s.tokens(), s.ranks as u64);
        let st = self.strategy_for("bwd", "head");
        let x = self.bulk_ag("bwd.head.ag", after)?;
        let input = self.ready(st, after);
        let dx = self.gemm_rs(st, "bwd.head.dgrad", s.vocab, &input, st)?;
        let w_after: PerRank = (0..self.n()).map(|r| later(after[r], x[r])).collect();
        self.wgrad("bwd.head.wgrad", h, s.vocab / n, m, &w_after)?;
        Ok(dx)
    }
}

/// The later of two ops of one rank (ops are numbered in issue order).
fn later(a: Option<OpId>, b: Option<OpId>) -> Option<OpId> {
    a.max(b)
}

/// Each rank's last op of a site's blocks: on the in-order compute stream it ends last.
fn last(bl: &Blocks) -> PerRank {
    bl.ready
        .iter()
        .map(|r| r.iter().flatten().max().copied())
        .collect()
}

/// Token blocks of `strategy` for every rank of `after` (any number of groups), all
/// ready on rank r after `after[r]`.
fn ready_blocks(strategy: Strategy, s: &LayerShape, after: &PerRank) -> Blocks {
    let nb = blocks(strategy, s.ranks) as usize;
    let mut bl = Blocks::inputs_ready(strategy, s.ranks, s.tokens(), vec![0; after.len()]);
    bl.ready = after.iter().map(|a| vec![*a; nb]).collect();
    bl
}

/// Tensor-parallel group `g`'s ranks of `v` (groups of `tp`, in rank order).
fn slice_ranks(v: &PerRank, g: usize, tp: usize) -> PerRank {
    v[g * tp..(g + 1) * tp].to_vec()
}

/// Tensor-parallel group `g`'s ranks of `bl`.
fn slice_blocks(bl: &Blocks, g: usize, tp: usize) -> Blocks {
    Blocks {
        ready: bl.ready[g * tp..(g + 1) * tp].to_vec(),
        rows: bl.rows.clone(),
        bufs: bl.bufs[g * tp..(g + 1) * tp].to_vec(),
    }
}

/// Groups' blocks joined in rank order (every group cuts tokens the same way).
fn concat_blocks(parts: Vec<Blocks>) -> Blocks {
    let mut parts = parts.into_iter();
    let mut out = parts.next().unwrap_or(Blocks {
        ready: Vec::new(),
        rows: Vec::new(),
        bufs: Vec::new(),
    });
    for p in parts {
        out.ready.extend(p.ready);
        out.bufs.extend(p.bufs);
    }
    out
}

/// The Plan of one layer forward + backward (`step = false`) or of a training step, over
/// tp × ulysses × dp × pp ranks. With `shift` (a rotation of the topology that moves whole
/// replicas), a symmetric plan of the first `shift` ranks.
///
/// Data parallelism is ZeRO-style: each layer's parameters are all-gathered over the
/// data-parallel group for its forward — before every micro-batch under ZeRO-3, before
/// the first one only under ZeRO 0–2 (the distributed optimizer's gather of the updated
/// parameters; an all-reduce's second half) — prefetched one layer ahead under `bulk`, on
/// demand under `sequential`; under `flash` each weight's column shards are gathered
/// while its site's GEMMs run, cut into those chunks — a Flash-AG fused with the forward
/// GEMMs. Under ZeRO 0–2 the parameters stay for the backward; ZeRO-3 gathers each
/// layer's again before its backward (`bwd.dp-ag`: one layer ahead under `bulk` and
/// `flash`, on demand under `sequential`). Gradients are reduce-scattered in the last
/// micro-batch's backward — per layer as a bucket once the layer's wgrads are done
/// (`bulk`), all after the backward (`sequential`), or fused with the wgrad GEMMs as a
/// Flash-RS (`flash`). The data-parallel collectives run on a stream of their own.
///
/// Pipeline parallelism (`pp` > 1, steps only) cuts the layers into stages (see
/// [`pipeline`]); each stage runs its schedule's actions in order, receiving a
/// micro-batch's activation (or gradient) on its `pp-recv` stream once it reaches the
/// action that needs it and sending its output on its `pp-send` stream: one
/// sequence-parallel shard (tokens/tp rows of h) from each tensor rank to the same tensor
/// rank of the neighbouring stage, over the topology.
#[allow(clippy::too_many_arguments)]
pub fn build(
    s: &LayerShape,
    strategy: Strategy,
    sites: &BTreeMap<String, Strategy>,
    step: bool,
    shift: Option<u32>,
    net: Option<Net>,
    max_ops: usize,
    shares: &[f64],
) -> Result<Plan, StrategyError> {
    for (key, st) in
        std::iter::once(("", &strategy)).chain(sites.iter().map(|(k, v)| (k.as_str(), v)))
    {
        if key == "moe" {
            continue;
        }
        check_layer(*st, s, step)?;
    }
    check_moe_sites(s, moe_strategy(strategy, sites))?;
    check_dp(s, dp_strategy(strategy, sites), step)?;
    let (tp, dp, u, pp) = (s.ranks, s.dp, s.ulysses.max(1), s.pp.max(1));
    if pp > 1 && !step {
        return Err(StrategyError::Unsupported(
            "pipeline stages split a training step; a single layer has none",
        ));
    }
    let world = tp * dp * u * pp;
    let groups_all = dp * u;
    // A symmetric plan's rotation must move whole replicas (every stage of them) and
    // also move the data-parallel communicators' nodes onto nodes (their channel rings
    // are laid out node by node). Under `tp-inner` the stages are outermost, so a
    // pipeline has no such rotation.
    let node = net.map_or(world, |n| n.topo.gpus_per_node().max(1) as u32);
    let replica = tp * u * pp;
    let rotates = match s.order {
        RankOrder::TpPpDp => true,
        RankOrder::TpInner => pp == 1,
        RankOrder::DpInner => false,
    };
    let built = match shift {
        Some(sh)
            if rotates
                && sh % replica == 0
                && world % sh == 0
                && (world <= node || sh % node == 0)
                // Expert-parallel groups are whole within the held ranks.
                && s.moe.is_none_or(|m| (sh / pp) % m.ep.max(1) == 0) =>
        {
            sh / (tp * pp)
        }
        _ => groups_all,
    };
    // The main strategy's estimate (per-site overrides change a few sites only).
    check_size(strategy, s, step, built, max_ops)?;
    let b = if built < groups_all {
        PlanBuilder::symmetric(world, built * tp * pp)
    } else {
        PlanBuilder::new(world).without_dataflow()
    };
    let mut b = b.with_op_limit_at(
        max_ops.min(crate::plan::op_limit_at(crate::plan::LAYER_BYTES_PER_OP)),
        crate::plan::LAYER_BYTES_PER_OP,
    );
    let schedule = match (pp, s.pp_schedule) {
        (1, PpSchedule::GPipe) => PpSchedule::GPipe,
        (1, _) => PpSchedule::OneFOneB,
        (_, sch) => sch,
    };
    let par = Parallel {
        tp: tp as u64,
        sp: true,
        dp: dp as u64,
        ulysses: u as u64,
        pp: pp as u64,
        pp_schedule: schedule,
        order: s.order,
        ep: 1,
    };
    let mbs = if step { s.micro_batches } else { 1 };
    let v = schedule.chunks();
    let virtual_stages = pp as u64 * v;
    let per_chunk = if step { s.layers / virtual_stages } else { 1 };
    // Message tags of the stage-to-stage P2P: per direction, virtual-stage boundary,
    // micro-batch and held rank of a stage, reserved up front (the receiving stage is
    // built after, or before, the sending one).
    let stage_held = (built * tp) as u64;
    let boundaries = virtual_stages - 1;
    let tags = PipeTags {
        base: b.msg_tags(
            2u64.saturating_mul(boundaries)
                .saturating_mul(mbs)
                .saturating_mul(stage_held),
        ),
        boundaries,
        mbs,
        held: stage_held,
    };
    let mut late_buckets: Vec<u64> = Vec::new();
    for p in 0..pp {
        let mut c = stage(b, s, strategy, sites, &par, p, built, net)?;
        c.step = step;
        let n = c.n();
        let rank = |i: usize| {
            let (g, t) = ((i / tp as usize) as u32, (i % tp as usize) as u32);
            par.rank_of4(p as u64, (g / u) as u64, (g % u) as u64, t as u64) as u32
        };
        c.add_moe(shares, n, (groups_all * tp) as usize, &rank);
        let dps = c.dp_strategy();
        let is_moe = |l: u64| s.is_moe_layer(l, step);
        // The stage's last compute op per rank (its compute stream is in order).
        let mut x: PerRank = vec![None; n];
        for a in pipeline::order(schedule, pp as u64, p as u64, mbs) {
            let vs = a.chunk * pp as u64 + p as u64;
            let mb = a.micro_batch;
            let first_layer = vs * per_chunk;
            let scope = |layer: Option<u64>, pass: Pass| Scope {
                layer: layer.map(|l| l as u32),
                micro_batch: mb as u32,
                pass,
            };
            if !a.forward && s.forward_only {
                continue;
            }
            if a.forward {
                c.b.set_scope(scope(None, Pass::Forward));
                c.sync = false;
                let input = if vs > 0 {
                    c.pp_recv(&par, "pp.fwd", vs - 1, tags.of(true, vs - 1, mb), mb, &x)?
                } else {
                    x.clone()
                };
                let mut y = input.clone();
                if step && vs == 0 {
                    y = c.elt("fwd.embed", 2, &y)?;
                }
                let gather = s.zero >= 3 || mb == 0;
                y = c.forward_layers(per_chunk, gather, &x, &y, vs > 0, (first_layer, mb))?;
                c.b.set_scope(scope(None, Pass::Forward));
                if step && vs + 1 == virtual_stages {
                    y = c.head_fwd(&y)?;
                }
                if vs + 1 < virtual_stages {
                    c.pp_send(&par, "pp.fwd", vs + 1, tags.of(true, vs, mb), mb, &y)?;
                }
                x = y;
            } else {
                c.b.set_scope(scope(None, Pass::Backward));
                c.sync = mb + 1 == mbs;
                let mut y = if vs + 1 < virtual_stages {
                    c.pp_recv(&par, "pp.bwd", vs + 1, tags.of(false, vs, mb), mb, &x)?
                } else {
                    x.clone()
                };
                if step && vs + 1 == virtual_stages {
                    c.grads = vec![None; n];
                    y = c.head_bwd(&y)?;
                    y = c.reduce_bucket(dps, &y, &mut late_buckets, c.head_grad_piece())?;
                }
                // ZeRO-3 frees each layer's gathered parameters after its forward (the
                // memory model counts two layers gathered at a time), so the backward
                // gathers them again: one layer ahead (`bulk`, `flash`), or on demand
                // (`sequential`).
                let regather = s.zero >= 3 && c.s.sync() > 1;
                let prefetch = regather && dps != Strategy::Sequential;
                // The first gather starts after the stage's previous action, beside
                // the receive of the gradient (or the head's backward).
                let first = x.clone();
                let top = first_layer + per_chunk - 1;
                let mut gathered = if prefetch {
                    Some(c.params_ring("bwd.dp-ag", is_moe(top), &first)?)
                } else {
                    None
                };
                for i in 0..per_chunk {
                    let l = top - i;
                    let layer = Some(l);
                    c.b.set_scope(scope(layer, Pass::Backward));
                    c.grads = vec![None; n];
                    c.moe_layer = is_moe(l);
                    if regather {
                        let after = if i == 0 { first.clone() } else { y.clone() };
                        let next = (prefetch && i + 1 < per_chunk).then(|| is_moe(l - 1));
                        c.layer_params("bwd.dp-ag", &mut gathered, next, &after)?;
                    }
                    if s.recompute == Recompute::Full {
                        // The layer's forward again from its kept input, before its
                        // backward (which then finds its activations).
                        c.b.set_scope(scope(layer, Pass::Recompute));
                        c.layer_fwd(&y)?;
                        c.b.set_scope(scope(layer, Pass::Backward));
                    }
                    y = c.layer_bwd(&y)?;
                    let piece = c.grad_piece();
                    y = c.reduce_bucket(dps, &y, &mut late_buckets, piece)?;
                }
                c.b.set_scope(scope(None, Pass::Backward));
                if step && vs == 0 {
                    y = c.elt("bwd.embed", 2, &y)?;
                }
                if vs > 0 {
                    c.pp_send(&par, "pp.bwd", vs - 1, tags.of(false, vs - 1, mb), mb, &y)?;
                }
                x = y;
            }
        }
        // `sequential`: every bucket after the whole backward, one after another.
        for p in std::mem::take(&mut late_buckets) {
            let done = c.dp_ring("bwd.dp-rs", p, &x)?;
            x = x
                .iter()
                .zip(&done)
                .map(|(a, d)| d.iter().copied().max().or(*a))
                .collect();
        }
        c.late_expert_buckets(&x)?;
        b = c.b;
    }
    let flops = if step {
        s.step_model_flops()
    } else {
        s.layer_model_flops()
    };
    // Model FLOPs of the replicas held (a replica is u tensor-parallel groups per stage).
    b.add_model_flops(flops * built as f64 / u as f64);
    Ok(b.finish()?)
}

/// Message tags of the pipeline's P2P (see [`build`]).
struct PipeTags {
    base: u64,
    boundaries: u64,
    mbs: u64,
    held: u64,
}

impl PipeTags {
    /// The first tag of the messages crossing virtual-stage boundary `boundary` (between
    /// virtual stages `boundary` and `boundary + 1`) for micro-batch `mb`, forward or
    /// backward; held rank i of the stage adds i.
    fn of(&self, forward: bool, boundary: u64, mb: u64) -> u64 {
        let dir = u64::from(forward);
        self.base + ((dir * self.boundaries + boundary) * self.mbs + mb) * self.held
    }
}

/// The context of pipeline stage `p` (the whole model when pp = 1): its held ranks'
/// streams, tensor-parallel groups (with their NCCL communicators where they span
/// nodes) and data-parallel groups; `b` moves into it.
#[allow(clippy::too_many_arguments)]
fn stage<'a>(
    mut b: PlanBuilder,
    s: &'a LayerShape,
    strategy: Strategy,
    sites: &'a BTreeMap<String, Strategy>,
    par: &Parallel,
    p: u32,
    built: u32,
    net: Option<Net>,
) -> Result<Ctx<'a>, StrategyError> {
    let (tp, u) = (s.ranks, s.ulysses.max(1));
    // The rank of tensor rank t in tensor-parallel group g = d·u + j of this stage.
    let rank =
        |g: u32, t: u32| par.rank_of4(p as u64, (g / u) as u64, (g % u) as u64, t as u64) as u32;
    let sync = s.dp * u;
    // The data-parallel groups' NCCL communicators (bulk and sequential dp sites; the
    // flash one runs its own decomposed rings on the `dp-comm` streams): per tensor rank,
    // its channels and wire, members and their nodes. `None`: plain rings on `dp-comm`.
    type DpNet = (u32, crate::plan::Wire, Vec<u32>, Vec<u64>);
    let dp_nets: Option<Vec<DpNet>> = match net {
        Some(net) if sync > 1 && dp_strategy(strategy, sites) != Strategy::Flash => {
            let bucket = grad_piece(s).saturating_mul(sync as u64);
            (0..tp)
                .map(|t| {
                    let members: Vec<u32> = (0..sync).map(|g| rank(g, t)).collect();
                    let (ch, _, wire) = crate::cost::nccl::ring_for(
                        net.nccl,
                        net.topo,
                        &members,
                        crate::cost::nccl::NcclColl::ReduceScatter,
                        bucket,
                    )?;
                    let nodes = net.nodes(&members);
                    Some((ch.count, wire, members, nodes))
                })
                .collect()
        }
        _ => None,
    };
    let empty = || RankStreams {
        compute: Vec::new(),
        comm: Vec::new(),
        ranks: Vec::new(),
        held: 0,
        weights: None,
        nccl: None,
    };
    let mut all = empty();
    let mut dp_comm = Vec::new();
    let (mut pp_send, mut pp_recv) = (Vec::new(), Vec::new());
    let mut groups = Vec::with_capacity(built as usize);
    for d in 0..built {
        let mut g = empty();
        g.held = tp as usize;
        for t in 0..tp {
            let r = rank(d, t);
            g.compute.push(b.stream(r, "compute", StreamKind::Compute));
            g.comm.push(b.stream(r, "comm", StreamKind::Comm));
            g.ranks.push(r);
            if sync > 1 && dp_nets.is_none() {
                dp_comm.push(b.stream(r, "dp-comm", StreamKind::Comm));
            }
            if s.pp > 1 {
                pp_send.push(b.stream(r, PP_SEND, StreamKind::Comm));
                pp_recv.push(b.stream(r, PP_RECV, StreamKind::Comm));
            }
        }
        all.compute.extend(&g.compute);
        all.comm.extend(&g.comm);
        all.ranks.extend(&g.ranks);
        groups.push(g);
    }
    all.held = all.ranks.len();
    // Gradient-sync groups: tensor rank t of every (replica, Ulysses rank), in group
    // order, the first `built` held.
    let dp_groups = if sync > 1 {
        (0..tp as usize)
            .map(|t| {
                let held: Vec<usize> = (0..built as usize).map(|g| g * tp as usize + t).collect();
                let mut compute: Vec<_> = held.iter().map(|&i| all.compute[i]).collect();
                // Without `dp-comm` streams (the communicators carry the collectives)
                // every entry is a placeholder, never used.
                let mut comm: Vec<_> = held
                    .iter()
                    .map(|&i| dp_comm.get(i).copied().unwrap_or(StreamId::MAX))
                    .collect();
                // Placeholders for the members a symmetric plan does not hold (never used).
                compute.resize(sync as usize, StreamId::MAX);
                comm.resize(sync as usize, StreamId::MAX);
                RankStreams {
                    compute,
                    comm,
                    ranks: (0..sync).map(|g| rank(g, t as u32)).collect(),
                    held: built as usize,
                    weights: None,
                    nccl: None,
                }
            })
            .collect()
    } else {
        Vec::new()
    };
    let n = all.len();
    let mut c = Ctx {
        b,
        st: all,
        groups,
        dp_groups,
        strategy,
        sites,
        s,
        sync: false,
        grads: vec![None; n],
        fwd_weights: BTreeMap::new(),
        dp_comms: Vec::new(),
        gate: vec![Vec::new(); n],
        pp_send,
        pp_recv,
        moe: None,
        moe_layer: false,
        step: false,
    };
    // Tensor-parallel groups that span nodes run their ring collectives (sequential,
    // bulk and chunked sites) on an NCCL communicator of their own, with the protocol
    // NCCL picks for one whole activation gathered.
    if let Some(net) = net {
        let activation = s
            .tokens()
            .saturating_mul(s.hidden)
            .saturating_mul(s.dtype.bytes());
        for g in 0..c.groups.len() {
            let members = c.groups[g].ranks.clone();
            let nodes = net.nodes(&members);
            if nodes.iter().all(|&x| x == nodes[0]) {
                continue;
            }
            let Some((ch, _, wire)) = crate::cost::nccl::ring_for(
                net.nccl,
                net.topo,
                &members,
                crate::cost::nccl::NcclColl::AllGather,
                activation,
            ) else {
                continue;
            };
            let held = members.len();
            let comm = Comm::new(&mut c.b, "tp", members, held, &nodes, ch.count, wire);
            c.groups[g].nccl = Some(std::rc::Rc::new(std::cell::RefCell::new(comm)));
        }
    }
    for (ch, wire, members, nodes) in dp_nets.into_iter().flatten() {
        let comm = Comm::new(&mut c.b, "dp", members, built as usize, &nodes, ch, wire);
        c.dp_comms.push(comm);
    }
    Ok(c)
}

/// Names of the streams of a stage's P2P with its neighbours.
pub const PP_SEND: &str = "pp-send";
pub const PP_RECV: &str = "pp-recv";

impl Ctx<'_> {
    /// `layers` layers forward from `input`; their parameter all-gathers (`gather`)
    /// follow `prev` where the input came from another stage (`received`: the gathers do
    /// not wait for it), else the input.
    fn forward_layers(
        &mut self,
        layers: u64,
        gather: bool,
        prev: &PerRank,
        input: &PerRank,
        received: bool,
        (first_layer, mb): (u64, u64),
    ) -> Result<PerRank, StrategyError> {
        let scope = |i: u64| Scope {
            layer: Some((first_layer + i) as u32),
            micro_batch: mb as u32,
            pass: Pass::Forward,
        };
        let dps = self.dp_strategy();
        let fused = gather && dps == Strategy::Flash && self.s.sync() > 1;
        let prefetch = gather && dps == Strategy::Bulk;
        let first = if received { prev } else { input };
        let (shape, step) = (self.s, self.step);
        let is_moe = |l: u64| shape.is_moe_layer(l, step);
        let mut gathered = if prefetch {
            Some(self.params_ring("fwd.dp-ag", is_moe(first_layer), first)?)
        } else {
            None
        };
        let mut x = input.clone();
        for i in 0..layers {
            self.b.set_scope(scope(i));
            self.moe_layer = is_moe(first_layer + i);
            if fused {
                let after = if i == 0 { first.clone() } else { x.clone() };
                self.gather_weights(&after)?;
                x = self.layer_fwd(&x)?;
                self.fwd_weights.clear();
                continue;
            }
            if gather {
                let after = if i == 0 { first.clone() } else { x.clone() };
                let next = (prefetch && i + 1 < layers).then(|| is_moe(first_layer + i + 1));
                self.layer_params("fwd.dp-ag", &mut gathered, next, &after)?;
            }
            x = self.layer_fwd(&x)?;
        }
        Ok(x)
    }

    /// Receive micro-batch `mb`'s shard from virtual stage `from` (tags `tag + i`),
    /// posted on each rank after `after[r]`; returns the receives.
    fn pp_recv(
        &mut self,
        par: &Parallel,
        site: &str,
        from: u64,
        tag: u64,
        mb: u64,
        after: &PerRank,
    ) -> Result<PerRank, StrategyError> {
        self.pp_message(par, site, from, tag, mb, after, false)
    }

    /// Send micro-batch `mb`'s output shard to virtual stage `to` after `after[r]`.
    fn pp_send(
        &mut self,
        par: &Parallel,
        site: &str,
        to: u64,
        tag: u64,
        mb: u64,
        after: &PerRank,
    ) -> Result<PerRank, StrategyError> {
        self.pp_message(par, site, to, tag, mb, after, true)
    }

    #[allow(clippy::too_many_arguments)]
    fn pp_message(
        &mut self,
        par: &Parallel,
        site: &str,
        peer_vs: u64,
        first_tag: u64,
        mb: u64,
        after: &PerRank,
        send: bool,
    ) -> Result<PerRank, StrategyError> {
        let site = self.b.site(site);
        let bytes = self.shard_bytes(self.s.hidden);
        let (tp, u) = (self.tp(), self.s.ulysses.max(1) as usize);
        let peer_stage = peer_vs % par.pp;
        let mut out = Vec::with_capacity(self.n());
        for (i, a) in after.iter().enumerate() {
            let (g, t) = (i / tp, i % tp);
            let peer = par.rank_of4(peer_stage, (g / u) as u64, (g % u) as u64, t as u64) as u32;
            let msg_tag = first_tag + i as u64;
            let kind = if send {
                OpKind::Send {
                    peer,
                    bytes,
                    tag: msg_tag,
                }
            } else {
                OpKind::Recv {
                    peer,
                    bytes,
                    tag: msg_tag,
                    accumulate: false,
                }
            };
            let stream = if send {
                self.pp_send[i]
            } else {
                self.pp_recv[i]
            };
            let d: Vec<OpId> = a.iter().copied().collect();
            out.push(Some(self.b.single(stream, kind, &d, tag(site, mb))?));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(model: &str, tp: u32, batch: u64, seq: u64) -> LayerShape {
        let m = crate::config::load_model(model, None).unwrap();
        LayerShape {
            ranks: tp,
            batch,
            seq,
            hidden: m.hidden,
            heads: m.heads,
            kv_heads: m.kv_heads,
            ffn: m.ffn,
            fc1_width: m.fc1_width(),
            activation: m.activation,
            vocab: m.vocab,
            layers: m.layers,
            micro_batches: 1,
            dtype: DType::Bf16,
            dp: 1,
            order: RankOrder::TpInner,
            ulysses: 1,
            pp: 1,
            pp_schedule: PpSchedule::OneFOneB,
            recompute: Recompute::None,
            zero: 3,
            causal: true,
            attention_only: false,
            forward_only: false,
            moe: None,
        }
    }

    /// A MoE layer's model FLOPs count what a token passes: attention, the router and
    /// its top-k experts (Mixtral-8x7B: 12.9 B active parameters of 46.7 B, its paper's
    /// figure, from the hand count 32 · (41.9 M + 32 k + 2 · 176.2 M) + 262 M). A step
    /// counts a family's first dense layers as dense ones.
    #[test]
    fn moe_model_flops_count_the_active_parameters() {
        let m = crate::config::load_model("mixtral-8x7b", None).unwrap();
        let mut s = shape("mixtral-8x7b", 1, 1, 4096);
        s.moe = LayerMoe::from_model(&m, 8);
        let moe = s.moe.unwrap();
        let (h, t): (f64, f64) = (4096.0, 4096.0);
        let active = (h * 48.0 * 128.0 + h * h) + h * 8.0 + 2.0 * 3.0 * h * 14336.0;
        let active_model = 32.0 * active + 2.0 * 32000.0 * h;
        assert!((active_model / 1e9 - 12.9).abs() < 0.05, "{active_model}");
        let attention = 6.0 * h * t * (t + 1.0);
        assert_eq!(s.layer_model_flops(), 6.0 * active * t + attention);
        // Expert parallelism moves work, not FLOPs.
        let mut one = s;
        one.moe = LayerMoe::from_model(&m, 1);
        assert_eq!(one.layer_model_flops(), s.layer_model_flops());
        // Two dense first layers (DeepSeek keeps three) in a step of four micro-batches.
        s.moe = Some(LayerMoe {
            dense_layers: 2,
            ..moe
        });
        s.micro_batches = 4;
        let dense = s.layer_model_flops_of(false);
        assert_eq!(dense, 6.0 * s.layer_params() as f64 * t + attention);
        let head = 6.0 * 32000.0 * h * t;
        let want = 4.0 * (2.0 * dense + 30.0 * s.layer_model_flops_of(true) + head);
        assert_eq!(s.step_model_flops(), want);
        assert!(s.is_moe_layer(2, true) && !s.is_moe_layer(1, true) && s.is_moe_layer(0, false));
    }

    /// The size estimate errs low: never above the plan built (so it refuses no plan
    /// that fits), and not far below it (so it still refuses a far larger one at once),
    /// over strategies, tp, pipelines, data parallelism, ZeRO stages, Ulysses and the
    /// forward-only and attention-only blocks.
    #[test]
    fn the_size_estimate_errs_low_but_not_far() {
        let strategies = [
            Strategy::Sequential,
            Strategy::Bulk,
            Strategy::Chunked(4),
            Strategy::Flash,
            Strategy::Direct,
        ];
        for st in strategies {
            for (tp, pp, dp, u, zero, mbs) in [
                (2, 1, 1, 1, 3, 1),
                (4, 1, 4, 1, 1, 1),
                (8, 1, 2, 1, 3, 1),
                (4, 2, 2, 1, 1, 4),
                (2, 4, 1, 1, 3, 8),
                (2, 1, 2, 2, 3, 1),
            ] {
                for (step, fwd, attn) in [
                    (false, false, false),
                    (true, false, false),
                    (false, true, false),
                    (false, false, true),
                ] {
                    let mut s = shape("llama-3-8b", tp, 1, 1024);
                    (s.pp, s.dp, s.ulysses, s.zero, s.micro_batches) = (pp, dp, u, zero, mbs);
                    (s.forward_only, s.attention_only) = (fwd, attn);
                    if (pp > 1 && !step) || ((fwd || attn) && step) {
                        continue;
                    }
                    s.layers = if step { 8 } else { 1 };
                    let p =
                        build(&s, st, &BTreeMap::new(), step, None, None, usize::MAX, &[]).unwrap();
                    let est = estimated_ops(st, &s, step, dp * u) as f64;
                    let got = p.op_count() as f64;
                    let what = format!(
                        "{st} tp {tp} pp {pp} dp {dp} u {u} zero {zero} m {mbs} step {step} fwd {fwd} attn {attn}"
                    );
                    assert!(est <= got, "{what}: estimate {est} over {got}");
                    assert!(est >= 0.6 * got, "{what}: estimate {est} of {got}");
                }
            }
        }
    }

    /// The 1024-GPU llama-3-70b step at tp 8 · pp 8 · dp 16 with 64 micro-batches: its
    /// symmetric plan (one replica, 10.7 M ops under flash) passes the size check at the
    /// default memory limit; its full plan (sixteen replicas) is refused before building.
    #[test]
    fn a_symmetric_replica_passes_the_size_check_where_the_full_plan_does_not() {
        let mut s = shape("llama-3-70b", 8, 1, 4096);
        (s.pp, s.dp, s.zero, s.micro_batches) = (8, 16, 1, 64);
        let limit = crate::plan::DEFAULT_MEMORY_GIB * (1u64 << 30) as f64
            / crate::plan::LAYER_BYTES_PER_OP as f64;
        let one = estimated_ops(Strategy::Flash, &s, true, 1) as f64;
        assert!(one < 10.7e6 && one > 0.6 * 10.7e6, "{one}");
        assert!(one < limit, "{one} of {limit}");
        assert!(estimated_ops(Strategy::Flash, &s, true, 16) as f64 > limit);
        assert!(check_size(Strategy::Flash, &s, true, 16, usize::MAX).is_err());
        // An event budget below the estimate refuses it too.
        assert!(check_size(Strategy::Flash, &s, true, 1, 1_000_000).is_err());
    }

    /// Hand-computed model FLOPs per preset (one layer, fwd + bwd, one micro-batch):
    /// 6·P·T + 6·h·T·(s+1).
    #[test]
    fn layer_and_step_model_flops_are_the_closed_forms() {
        // llama-3-8b, b=1, s=4096 (T = 4096): P = 4096·(32+16)·128 + 4096² + 4096·28672
        // + 14336·4096 = 25165824 + 16777216 + 117440512 + 58720256 = 218103808.
        let s = shape("llama-3-8b", 8, 1, 4096);
        assert_eq!(s.layer_params(), 218_103_808);
        let t = 4096.0;
        let want = 6.0 * 218_103_808.0 * t + 6.0 * 4096.0 * t * 4097.0;
        assert_eq!(s.layer_model_flops(), want);
        // Step: 32 layers + head 6·128256·4096·T.
        let head = 6.0 * 128_256.0 * 4096.0 * t;
        assert_eq!(s.step_model_flops(), 32.0 * want + head);
        // default-block (gelu, ffn 16384, 32 heads, kv 32): P = 4096·12288 + 4096²
        // + 2·4096·16384 = 50331648 + 16777216 + 134217728 = 201326592.
        let d = shape("default-block", 4, 2, 1024);
        assert_eq!(d.layer_params(), 201_326_592);
        // llama-3-70b: P = 8192·(64+16)·128 + 8192² + 8192·57344 + 28672·8192
        // = 83886080 + 67108864 + 469762048 + 234881024 = 855638016 (× 80 layers ≈ 68.5B).
        assert_eq!(shape("llama-3-70b", 8, 1, 8192).layer_params(), 855_638_016);
    }

    /// The attention block alone, the forward alone and attention without its mask: their
    /// model FLOPs are the closed forms, their plans hold exactly their sites, and the
    /// unmasked attention ops do the full square's work.
    #[test]
    fn attention_blocks_forward_passes_and_unmasked_attention() {
        let base = shape("llama-3-8b", 4, 1, 2048);
        let t = 2048.0;
        let (h, s) = (4096.0, 2048.0);
        let attn_params = 4096.0 * 48.0 * 128.0 + 4096.0 * 4096.0;
        let mut a = base;
        a.attention_only = true;
        assert_eq!(a.attention_params() as f64, attn_params);
        assert_eq!(
            a.layer_model_flops(),
            6.0 * attn_params * t + 6.0 * h * t * (s + 1.0)
        );
        let mut f = base;
        f.forward_only = true;
        assert_eq!(f.layer_model_flops(), base.layer_model_flops() / 3.0);
        let mut nc = base;
        nc.causal = false;
        let p_all = base.layer_params() as f64;
        assert_eq!(nc.layer_model_flops(), 6.0 * p_all * t + 12.0 * h * t * s);
        let sites = |s: &LayerShape| {
            let p = build(
                s,
                Strategy::Flash,
                &BTreeMap::new(),
                false,
                None,
                None,
                usize::MAX,
                &[],
            )
            .unwrap();
            p.check_deadlock_free().unwrap();
            assert_eq!(p.model_flops, s.layer_model_flops());
            let attn: f64 = p
                .ops
                .iter()
                .filter_map(|o| match o.kind {
                    OpKind::Attention(a) => Some(a.flops()),
                    _ => None,
                })
                .sum();
            (p.sites.clone(), attn)
        };
        let (all, causal_attn) = sites(&base);
        let (att, _) = sites(&a);
        assert!(att.iter().all(|x| !x.contains("fc")), "{att:?}");
        assert!(att.iter().any(|x| x == "bwd.qkv.wgrad"));
        assert!(all.iter().any(|x| x == "fwd.fc1"));
        let (fwd, _) = sites(&f);
        assert!(fwd.iter().all(|x| !x.starts_with("bwd")), "{fwd:?}");
        // Unmasked: every query sees 2048 keys instead of 1024.5 on average.
        let (_, full_attn) = sites(&nc);
        assert!((full_attn / causal_attn - 2.0 * s / (s + 1.0)).abs() < 1e-12);
    }

    #[test]
    fn the_plan_carries_the_model_flops_and_every_site() {
        let s = shape("llama-3-8b", 4, 1, 2048);
        for st in [Strategy::Sequential, Strategy::Chunked(4), Strategy::Flash] {
            let p = build(&s, st, &BTreeMap::new(), false, None, None, usize::MAX, &[]).unwrap();
            assert_eq!(p.model_flops, s.layer_model_flops());
            assert!(!p.has_dataflow());
            for site in [
                "fwd.qkv",
                "fwd.attn",
                "fwd.proj",
                "fwd.fc1",
                "fwd.act",
                "fwd.fc2",
                "bwd.fc2.dgrad",
                "bwd.fc2.wgrad",
                "bwd.fc1.ag",
                "bwd.fc1.dgrad",
                "bwd.fc1.wgrad",
                "bwd.proj.dgrad",
                "bwd.attn",
                "bwd.qkv.ag",
                "bwd.qkv.dgrad",
                "bwd.qkv.wgrad",
            ] {
                assert!(p.sites.iter().any(|x| x == site), "{st}: {site}");
            }
            p.check_deadlock_free().unwrap();
        }
    }

    #[test]
    fn remapped_blocks_wait_for_every_block_they_overlap() {
        use Strategy::*;
        let bl = |st: Strategy| {
            let mut b = Blocks::inputs_ready(st, 4, 64, vec![0; 4]);
            for r in 0..4 {
                for (j, x) in b.ready[r].iter_mut().enumerate() {
                    *x = Some((100 * r + j) as OpId);
                }
            }
            b
        };
        // chunked:2 → chunked:4: chunk j' lies inside chunk j'/2.
        let m = remap(&bl(Chunked(2)), Chunked(2), Chunked(4), 4, 64);
        assert_eq!(m.ready[1], [Some(100), Some(100), Some(101), Some(101)]);
        // chunked:4 → chunked:2: chunk j covers chunks 2j and 2j+1.
        let m = remap(&bl(Chunked(4)), Chunked(4), Chunked(2), 4, 64);
        assert_eq!(m.ready[0], [Some(1), Some(3)]);
        // Per-rank shards against strided chunks: each overlaps all of the other's.
        let m = remap(&bl(Flash), Flash, Chunked(2), 4, 64);
        assert_eq!(m.ready[2], [Some(203), Some(203)]);
        let m = remap(&bl(Sequential), Sequential, Direct, 4, 64);
        assert_eq!(m.ready[3], [Some(300); 4]);
        // Flash and direct cut alike: shard j waits for shard j only.
        let m = remap(&bl(Flash), Flash, Direct, 4, 64);
        assert_eq!(m.ready[1], [Some(100), Some(101), Some(102), Some(103)]);
    }

    #[test]
    fn per_site_strategies_change_only_their_sites() {
        let s = shape("llama-3-8b", 4, 1, 2048);
        let mut sites = BTreeMap::new();
        let plain = build(
            &s,
            Strategy::Flash,
            &sites,
            false,
            None,
            None,
            usize::MAX,
            &[],
        )
        .unwrap();
        sites.insert("fc2".to_string(), Strategy::Chunked(4));
        sites.insert("bwd.qkv".to_string(), Strategy::Sequential);
        let mixed = build(
            &s,
            Strategy::Flash,
            &sites,
            false,
            None,
            None,
            usize::MAX,
            &[],
        )
        .unwrap();
        mixed.check_deadlock_free().unwrap();
        let count = |p: &Plan, site: &str| {
            let i = p.sites.iter().position(|x| x == site).unwrap() as u16;
            p.ops.iter().filter(|o| o.tag.site == i).count()
        };
        // Unchanged sites keep their ops; overridden ones change.
        for site in ["fwd.qkv", "fwd.proj", "fwd.fc1", "bwd.proj.dgrad"] {
            assert_eq!(count(&plain, site), count(&mixed, site), "{site}");
        }
        for site in ["fwd.fc2", "bwd.fc2.dgrad", "bwd.qkv.dgrad"] {
            assert_ne!(count(&plain, site), count(&mixed, site), "{site}");
        }
        assert_eq!(plain.model_flops, mixed.model_flops);
    }

    /// The query slices of a causal attention add up to the whole one, and the later
    /// slices cost more (they see more keys).
    #[test]
    fn query_split_conserves_attention_work_and_slices_grow() {
        let s = shape("llama-3-8b", 4, 1, 4096);
        let flops = |st: Strategy| {
            let p = build(&s, st, &BTreeMap::new(), false, None, None, usize::MAX, &[]).unwrap();
            let mut v: Vec<f64> = p
                .ops
                .iter()
                .filter_map(|o| match o.kind {
                    OpKind::Attention(a) if !a.backward && o.rank == 0 => Some(a.flops()),
                    _ => None,
                })
                .collect();
            v.sort_by(f64::total_cmp);
            v
        };
        let whole = flops(Strategy::Flash);
        let split = flops(Strategy::QuerySplit);
        assert_eq!(whole.len(), 1);
        assert_eq!(split.len(), 4);
        let sum: f64 = split.iter().sum();
        assert!(
            (sum - whole[0]).abs() <= 1e-9 * whole[0],
            "{sum} vs {}",
            whole[0]
        );
        assert!(split.windows(2).all(|w| w[0] < w[1]), "{split:?}");
    }

    #[test]
    fn indivisible_shapes_are_named() {
        let s = shape("llama-3-8b", 3, 1, 3072);
        let e = check_layer(Strategy::Flash, &s, false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("heads") && e.contains("32"), "{e}");
        let mut s = shape("llama-3-8b", 8, 1, 1024);
        s.kv_heads = 3;
        s.heads = 24;
        let e = check_layer(Strategy::Flash, &s, false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("kv heads"), "{e}");
    }
}
