//! What one tensor-parallel group computes (`LayerShape`), its model FLOPs, and the
//! checks that a layer, a step or a data-parallel site can run a strategy on it.

use super::*;

/// What one tensor-parallel group computes, as its ranks see it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LayerShape {
    pub ranks: u32,
    pub batch: u64,
    pub seq: u64,
    pub hidden: u64,
    pub heads: u64,
    pub kv_heads: u64,
    pub ffn: u64,
    pub fc1_width: u64,
    pub activation: Activation,
    pub vocab: u64,
    pub layers: u64,
    pub micro_batches: u64,
    pub dtype: DType,
    /// Data-parallel replicas of the tensor-parallel group, and how ranks map to GPUs.
    pub dp: u32,
    pub order: RankOrder,
    /// Ulysses degree: each tensor-parallel group holds seq/ulysses of every sequence
    /// and all-to-alls around the attention give each rank heads/(tp·ulysses) heads of
    /// the whole sequence.
    pub ulysses: u32,
    /// Pipeline stages (1: none) and the schedule the micro-batches flow by.
    pub pp: u32,
    pub pp_schedule: PpSchedule,
    /// `full`: each layer's forward runs again before its backward.
    pub recompute: Recompute,
    /// ZeRO stage: 3 gathers the parameters before every micro-batch's forward, lower
    /// stages once per step (the first micro-batch's; the distributed optimizer's
    /// gather of the updated parameters, overlapped with the forward).
    pub zero: u8,
    /// Causal attention (the mask halves its work).
    pub causal: bool,
    /// The attention block alone (no MLP).
    pub attention_only: bool,
    /// The forward pass alone (no backward, no gradient sync).
    pub forward_only: bool,
    /// A mixture-of-experts model's MoE layers (`None`: every layer dense).
    pub moe: Option<LayerMoe>,
}

/// The MoE layers of a mixture-of-experts model as a layer or step lays them out: the
/// MLP block replaced by the MoE block over expert-parallel groups drawn from a stage's
/// ranks (Megatron-Core's MoE parallel folding, expert tensor parallelism 1): `ep`
/// consecutive ranks of the stage (tp fastest, then Ulysses, then dp) form a group,
/// each routing its own tokens (its sequence-parallel shard) over the group's experts,
/// which it holds whole. Expert weights are shared by the stage's ranks that hold the
/// same experts — the expert data-parallel group of tp · ulysses · dp / ep ranks.
/// Shared experts run whole on each rank's own tokens, as the routed ones do.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LayerMoe {
    pub ep: u32,
    pub experts: u64,
    pub top_k: u64,
    /// One expert's FC1 output width (2 · its FFN width when gated) and FFN width.
    pub expert_fc1: u64,
    pub expert_ffn: u64,
    /// The shared experts' FC1 output and FFN widths (0: none).
    pub shared_fc1: u64,
    pub shared_ffn: u64,
    /// The first layers of a step that stay dense.
    pub dense_layers: u64,
}

impl LayerMoe {
    pub fn of(sc: &Scenario) -> Option<LayerMoe> {
        LayerMoe::from_model(&sc.model, sc.parallel.ep)
    }

    /// `model`'s MoE layers at expert parallelism `ep` (`None` for a dense model).
    pub fn from_model(model: &crate::scenario::Model, ep: u64) -> Option<LayerMoe> {
        let moe = model.moe?;
        let gate = if model.activation.gated() { 2 } else { 1 };
        Some(LayerMoe {
            ep: ep.min(u32::MAX as u64) as u32,
            experts: moe.experts,
            top_k: moe.top_k,
            expert_fc1: gate * moe.expert_ffn,
            expert_ffn: moe.expert_ffn,
            shared_fc1: gate * moe.shared_ffn,
            shared_ffn: moe.shared_ffn,
            dense_layers: moe.dense_layers,
        })
    }

    /// Parameters of one MoE layer's router and shared experts (held by every rank,
    /// synchronized over the data-parallel group as the attention's are).
    pub fn dense_params(&self, hidden: u64) -> u64 {
        hidden * self.experts + hidden * (self.shared_fc1 + self.shared_ffn)
    }

    /// Parameters of one MoE layer's routed experts held by one rank.
    pub fn local_expert_params(&self, hidden: u64) -> u64 {
        self.experts / self.ep.max(1) as u64 * hidden * (self.expert_fc1 + self.expert_ffn)
    }

    /// Parameters one token passes through in a MoE layer's MLP: the router, its top-k
    /// experts and the shared experts.
    pub fn active_params(&self, hidden: u64) -> u64 {
        self.dense_params(hidden) + self.top_k * hidden * (self.expert_fc1 + self.expert_ffn)
    }
}

impl LayerShape {
    pub fn of(sc: &Scenario) -> LayerShape {
        LayerShape {
            ranks: sc.parallel.tp as u32,
            batch: sc.batch,
            seq: sc.seq,
            hidden: sc.model.hidden,
            heads: sc.model.heads,
            kv_heads: sc.model.kv_heads,
            ffn: sc.model.ffn,
            fc1_width: sc.model.fc1_width(),
            activation: sc.model.activation,
            vocab: sc.model.vocab,
            layers: sc.model.layers,
            micro_batches: sc.micro_batches,
            dtype: sc.dtype,
            dp: sc.parallel.dp as u32,
            order: sc.parallel.order,
            ulysses: sc.parallel.ulysses as u32,
            pp: sc.parallel.pp as u32,
            pp_schedule: sc.parallel.pp_schedule,
            recompute: sc.recompute,
            zero: sc.zero,
            causal: sc.causal,
            attention_only: sc.workload == crate::scenario::Workload::Attention,
            forward_only: sc.forward_only,
            moe: LayerMoe::of(sc).filter(|_| sc.workload != crate::scenario::Workload::Attention),
        }
    }

    /// Whether layer `layer` of the model is a MoE layer (a lone layer of a MoE model
    /// is one: the dense ones are a step's first few).
    pub fn is_moe_layer(&self, layer: u64, step: bool) -> bool {
        self.moe.is_some_and(|m| !step || layer >= m.dense_layers)
    }

    /// Expert data-parallel ranks: those of a stage holding the same experts.
    pub fn expert_sync(&self) -> u32 {
        let ep = self.moe.map_or(1, |m| m.ep.max(1));
        (self.ranks * self.sync() / ep).max(1)
    }

    /// Tokens one tensor-parallel group works on: batch · seq / ulysses.
    pub fn tokens(&self) -> u64 {
        self.batch * self.seq / self.ulysses.max(1) as u64
    }

    /// Tokens of one data-parallel replica (every Ulysses rank's): batch · seq.
    pub fn replica_tokens(&self) -> u64 {
        self.batch * self.seq
    }

    /// Ranks whose gradients are averaged: the data-parallel replicas times the Ulysses
    /// ranks (each holds the same weights and a different part of the sequence).
    pub fn sync(&self) -> u32 {
        self.dp * self.ulysses.max(1)
    }

    pub fn head_dim(&self) -> u64 {
        self.hidden / self.heads
    }

    /// QKV output width over all ranks: (heads + 2·kv_heads)·d. With fewer kv heads than
    /// ranks, each rank holds a replica of its group's kv head (Megatron's GQA layout).
    pub fn qkv_width(&self) -> u64 {
        let n = self.ranks as u64;
        let kv = self.kv_heads.max(n);
        (self.heads + 2 * kv) * self.head_dim()
    }

    /// Parameters of the linear layers of one dense layer (norms and biases left out):
    /// h·(heads + 2·kv)·d + h·h + h·fc1_width + ffn·h.
    pub fn layer_params(&self) -> u64 {
        let h = self.hidden;
        self.attention_params() + h * self.fc1_width + self.ffn * h
    }

    /// Parameters of one layer that every rank of a tensor-parallel group shards and the
    /// data-parallel group synchronizes: a dense layer's linears, or a MoE layer's
    /// attention, router and shared experts (the tensor-parallel ranks hold the latter
    /// two whole, so they count tp times).
    pub fn synced_params(&self, moe_layer: bool) -> u64 {
        match self.moe {
            Some(m) if moe_layer => {
                self.attention_params() + m.dense_params(self.hidden) * self.ranks as u64
            }
            _ => self.layer_params(),
        }
    }

    /// Parameters one token passes through in one layer (for model FLOPs).
    fn active_params(&self, moe_layer: bool) -> u64 {
        match self.moe {
            _ if self.attention_only => self.attention_params(),
            Some(m) if moe_layer => self.attention_params() + m.active_params(self.hidden),
            _ => self.layer_params(),
        }
    }

    /// Model FLOPs of one layer forward + backward for one micro-batch (see the module
    /// doc): 6·P·T + 6·h·T·(s+1) with the causal mask, 6·P·T + 12·h·T·s without; the
    /// attention block alone counts its own parameters (QKV and out-projection); the
    /// forward alone a third (2·P·T + the attention forward).
    pub fn layer_model_flops(&self) -> f64 {
        self.layer_model_flops_of(self.moe.is_some())
    }

    /// [`LayerShape::layer_model_flops`] of a dense layer or a MoE one (a MoE layer
    /// counts the parameters a token passes: the router, top-k experts, shared ones).
    pub fn layer_model_flops_of(&self, moe_layer: bool) -> f64 {
        let t = self.replica_tokens() as f64;
        let (h, s) = (self.hidden as f64, self.seq as f64);
        let params = self.active_params(moe_layer);
        let attention = if self.causal {
            6.0 * h * t * (s + 1.0)
        } else {
            12.0 * h * t * s
        };
        let both = 6.0 * params as f64 * t + attention;
        if self.forward_only { both / 3.0 } else { both }
    }

    /// Parameters of the attention block: QKV and the out-projection.
    pub fn attention_params(&self) -> u64 {
        let h = self.hidden;
        h * (self.heads + 2 * self.kv_heads) * self.head_dim() + h * h
    }

    /// Model FLOPs of a step: layers (a MoE model's first `dense_layers` dense, the
    /// rest MoE), the LM head (6·V·h·T), every micro-batch.
    pub fn step_model_flops(&self) -> f64 {
        let t = self.replica_tokens() as f64;
        let head = 6.0 * self.vocab as f64 * self.hidden as f64 * t;
        let dense = self
            .moe
            .map_or(self.layers, |m| m.dense_layers.min(self.layers));
        let layers = dense as f64 * self.layer_model_flops_of(false)
            + (self.layers - dense) as f64 * self.layer_model_flops_of(true);
        self.micro_batches as f64 * (layers + head)
    }

    /// A site's view for the shared site builders: K = `k`, the row-parallel input width
    /// over all ranks `ffn`.
    pub(super) fn mlp(&self, k: u64, ffn: u64) -> MlpShape {
        MlpShape {
            ranks: self.ranks,
            tokens: self.tokens(),
            hidden: k,
            fc1_width: self.fc1_width,
            ffn,
            gated: self.activation.gated(),
            activation: self.activation,
            dtype: self.dtype,
        }
    }
}

/// Can `strategy` cut a layer (or, with `head`, a step's LM head too) evenly?
pub fn check_layer(strategy: Strategy, s: &LayerShape, head: bool) -> Result<(), StrategyError> {
    let n = s.ranks as u64;
    for (what, v) in [
        ("tokens", s.tokens()),
        ("heads", s.heads),
        ("ffn", s.ffn),
        ("fc1 width", s.fc1_width),
    ] {
        check_div(strategy, what, v, n)?;
    }
    if s.kv_heads % n != 0 && n % s.kv_heads != 0 {
        return Err(StrategyError::Indivisible {
            strategy: strategy.to_string(),
            what: "kv heads (or tp by kv heads)",
            value: s.kv_heads,
            by: n,
        });
    }
    if head {
        check_div(strategy, "vocab", s.vocab, n)?;
    }
    if let Strategy::Chunked(k) = strategy {
        check_div(strategy, "tokens per rank", s.tokens() / n, k as u64)?;
    }
    if strategy == Strategy::QuerySplit {
        if s.ulysses > 1 {
            return Err(StrategyError::Unsupported(
                "query-split needs the whole attention on one tensor-parallel group; with Ulysses (ulysses > 1) use flash-a2a, which splits the attention by query chunk itself",
            ));
        }
        check_div(strategy, "sequence (query slices)", s.seq, n)?;
    }
    Ok(())
}

/// About how many ops a layer or step plan holding `groups` of the stage's tp-wide
/// groups (each with its `pp` stages; all `dp · ulysses` of them for a full plan, fewer
/// for a symmetric one) will have, erring low. Per rank, layer and micro-batch: eight
/// tensor-parallel sites (the forward's two gathers and two reduce-scatters, the
/// backward's four; four in a forward pass or an attention block alone), each of
/// `(7N − 5)/2` ops under the decomposed strategies (N partial GEMMs, N − 1 sends and as
/// many receives, the reduce-scatter's adds: 3N − 2 for a gather, 4N − 3 for a
/// reduce-scatter) or `2N − 1` per chunk under the collective ones (a ring's sends and
/// receives and the chunk's GEMM), and a few other ops; the data-parallel rings
/// (`2(D − 1)` ops per rank, D = dp · ulysses) once per layer and step, and twice per
/// micro-batch more under ZeRO-3; the MoE block's all-to-alls. The head, the pipeline's
/// messages and Ulysses' all-to-alls are left out. Over the tests' grid of strategies and
/// layouts it is 0.66–1.0 of the plan built; on the 1024-GPU llama-3-70b tp 8 · pp 8
/// step under flash, 0.79 (8.5 M of 10.7 M ops per replica).
pub fn estimated_ops(strategy: Strategy, s: &LayerShape, step: bool, groups: u32) -> u64 {
    let n = s.ranks as u64;
    let site = if n <= 1 {
        1
    } else {
        match strategy {
            Strategy::Sequential | Strategy::Bulk | Strategy::Chunked(_) | Strategy::FlashEp(_) => {
                blocks(strategy, s.ranks).saturating_mul(2 * n - 1)
            }
            _ => (7 * n - 5) / 2,
        }
    };
    let (sites, others) = match (s.forward_only, s.attention_only) {
        (true, true) => (2, 1),
        (true, false) => (4, 1),
        (false, true) => (4, 2),
        (false, false) => (8, 8),
    };
    let mut per_mb = site.saturating_mul(sites).saturating_add(others);
    if let Some(m) = s.moe {
        let chunks = match strategy {
            Strategy::Chunked(k) => k as u64,
            _ => 1,
        };
        per_mb = per_mb.saturating_add((m.ep as u64).saturating_mul(16).saturating_mul(chunks));
    }
    let d = s.sync() as u64;
    let ring = 2 * d.saturating_sub(1);
    let (per_step_dp, per_mb_dp) = match (s.forward_only, s.zero) {
        (true, 3) => (0, ring),
        (true, _) => (0, 0),
        (false, 3) => (ring, 2 * ring),
        (false, _) => (ring, 0),
    };
    let per_mb = per_mb.saturating_add(per_mb_dp);
    let (layers, mbs) = if step {
        (s.layers / s.pp.max(1) as u64, s.micro_batches)
    } else {
        (1, 1)
    };
    let per_rank = layers.saturating_mul(per_mb.saturating_mul(mbs).saturating_add(per_step_dp));
    let ranks = n
        .saturating_mul(s.pp.max(1) as u64)
        .saturating_mul(groups as u64);
    per_rank.saturating_mul(ranks)
}

/// Refuse, before building, a plan of `groups` held groups (see [`estimated_ops`]) that
/// would surely pass the op limit (checked first: a plan over it is refused as too large
/// for memory whatever the event budget), or `max_ops` where that is lower (a caller's
/// event budget: every op costs at least one event). One the estimate lets through stops at the
/// limit as it is built (`PlanBuilder`'s check), having taken no more memory than the
/// limit.
pub fn check_size(
    strategy: Strategy,
    s: &LayerShape,
    step: bool,
    groups: u32,
    max_ops: usize,
) -> Result<(), StrategyError> {
    let ops = estimated_ops(strategy, s, step, groups);
    // Memory first: a plan over it is refused as such whatever the event budget (a
    // larger budget would not let it run).
    let memory = crate::plan::op_limit_at(crate::plan::LAYER_BYTES_PER_OP);
    for limit in [memory, memory.min(max_ops)] {
        if ops > limit as u64 {
            return Err(crate::plan::PlanError::TooLarge {
                limit,
                need: Some(ops),
                per: crate::plan::LAYER_BYTES_PER_OP,
            }
            .into());
        }
    }
    Ok(())
}

/// Can the data-parallel site run `st` on this shape?
pub fn check_dp(s: &LayerShape, st: Strategy, step: bool) -> Result<(), StrategyError> {
    if s.sync() <= 1 {
        return Ok(());
    }
    if !matches!(st, Strategy::Sequential | Strategy::Bulk | Strategy::Flash) {
        return Err(StrategyError::SiteStrategy {
            site: "dp",
            strategy: st.to_string(),
            known: "sequential, bulk, flash",
        });
    }
    let dp = s.sync() as u64;
    let n = s.ranks as u64;
    if st == Strategy::Flash && s.moe.is_some() {
        return Err(StrategyError::Unsupported(
            "the Flash-fused data parallelism (dp = flash) is not built for MoE layers; use dp = bulk or sequential",
        ));
    }
    if st == Strategy::Flash {
        let h = s.hidden;
        let mut rows = vec![
            ("ffn / tp (fc2 wgrad rows)", s.ffn / n),
            ("hidden", h),
            ("hidden / tp (proj wgrad rows)", h / n),
        ];
        if step {
            rows.push(("hidden (head wgrad rows)", h));
        }
        // The fused parameter gather cuts each forward GEMM into dp column chunks.
        rows.push(("qkv width / tp (qkv weight columns)", s.qkv_width() / n));
        rows.push(("fc1 width / tp (fc1 weight columns)", s.fc1_width / n));
        for (what, v) in rows {
            check_div(st, what, v, dp)?;
        }
    }
    Ok(())
}
