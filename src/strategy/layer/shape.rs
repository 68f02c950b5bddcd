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
        }
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

    /// Parameters of the linear layers of one layer (norms and biases left out):
    /// h·(heads + 2·kv)·d + h·h + h·fc1_width + ffn·h.
    pub fn layer_params(&self) -> u64 {
        let h = self.hidden;
        self.attention_params() + h * self.fc1_width + self.ffn * h
    }

    /// Model FLOPs of one layer forward + backward for one micro-batch (see the module
    /// doc): 6·P·T + 6·h·T·(s+1) with the causal mask, 6·P·T + 12·h·T·s without; the
    /// attention block alone counts its own parameters (QKV and out-projection); the
    /// forward alone a third (2·P·T + the attention forward).
    pub fn layer_model_flops(&self) -> f64 {
        let t = self.replica_tokens() as f64;
        let (h, s) = (self.hidden as f64, self.seq as f64);
        let params = if self.attention_only {
            self.attention_params()
        } else {
            self.layer_params()
        };
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

    /// Model FLOPs of a step: layers, the LM head (6·V·h·T), every micro-batch.
    pub fn step_model_flops(&self) -> f64 {
        let t = self.replica_tokens() as f64;
        let head = 6.0 * self.vocab as f64 * self.hidden as f64 * t;
        self.micro_batches as f64 * (self.layers as f64 * self.layer_model_flops() + head)
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

/// Refuse, before building, a plan that would pass the op limit. An upper bound of its
/// ops: per rank and layer, ten collective sites of at most (blocks + 1)·3N ops each
/// (GEMMs, sends, receives, adds) and twenty single ops; the head adds three sites.
pub fn check_size(strategy: Strategy, s: &LayerShape, step: bool) -> Result<(), StrategyError> {
    let n = s.ranks as u64;
    let nb = blocks(strategy, s.ranks);
    let site = (nb + 1).saturating_mul(3 * n);
    let per_layer = site.saturating_mul(10).saturating_add(20);
    let layers = if step { s.layers } else { 1 };
    let per_mb = layers.saturating_mul(per_layer).saturating_add(if step {
        site.saturating_mul(3) + 4
    } else {
        0
    });
    let mbs = if step { s.micro_batches } else { 1 };
    let ops = per_mb.saturating_mul(mbs).saturating_mul(n);
    if ops > crate::plan::op_limit() as u64 {
        return Err(crate::plan::PlanError::TooLarge {
            limit: crate::plan::op_limit(),
            need: Some(ops),
        }
        .into());
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
