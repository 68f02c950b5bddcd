//! Memory per GPU: what each GPU of a scenario holds at its peak — weights, gradients,
//! optimizer states, the activations of the micro-batches in flight, the buffers of the
//! data-parallel sharding and of the communicators — against its device memory.
//!
//! Counted as the papers count them, per GPU of the pipeline stage at its peak:
//!
//! - **Parameters** (mixed-precision Adam, Rajbhandari et al., "ZeRO", §3.1): per
//!   parameter 2 bytes of weights and 2 of gradients (16-bit; 4 and 4 in fp32) and K = 12
//!   bytes of optimizer state (fp32 master weights, momentum, variance; 8 in fp32). ZeRO
//!   stage 1 shards the optimizer states over the data-parallel ranks, stage 2 the
//!   gradients too, stage 3 the weights too; the ranks that share weights are dp ×
//!   ulysses. A stage holds its layers' linear weights sharded over tp (kv heads
//!   replicated where tp exceeds them, as Megatron does), their norms whole, the
//!   vocabulary-parallel embedding on the first stage and the LM head on the last (both
//!   on one when pp = 1; a tied head is held once there).
//! - **Activations** (Korthikanti et al., "Reducing Activation Recomputation in Large
//!   Transformer Models", §4): per layer and micro-batch, every tensor the backward
//!   reads, each sharded over tp × ulysses by sequence parallelism. With GPT's layer (4h
//!   MLP, GELU, dropout, scores materialized) the count is their 34·s·b·h + 5·a·s²·b
//!   bytes, divided by t; selective recomputation drops the s² terms; full keeps each
//!   layer's input (2·s·b·h/t) and one layer's activations while it is recomputed. The
//!   simulator's attention is fused (FlashAttention): scores are never stored, only
//!   the softmax statistics (fp32 per head and token). Layers without dropout (Llama)
//!   store no masks. The LM head adds its input and fp32 logits for the loss.
//! - **In flight**: pp = 1 runs micro-batches one after another (gradient
//!   accumulation), one in flight. 1F1B holds min(P − i, m) micro-batches on stage i;
//!   interleaved 1F1B over V chunks holds 2(P − 1 − i) + (V − 1)·P + 1 chunk-forwards of
//!   L/(P·V) layers (Megatron's warm-up count plus one; on stage 0 Korthikanti's
//!   L·(1 + (P − 1)/(P·V)) layers); GPipe holds all m.
//! - **Buffers**: under ZeRO-3 the gathered weights of two layers (the one running and
//!   the one prefetched) and one layer's unsharded gradient before its reduce-scatter
//!   (stage 2 and 3); NCCL's buffers, 2 × 16 channels × 4 MiB (NCCL_BUFFSIZE, the
//!   Simple protocol) per communicator a GPU is in (tp, dp, pp).
//!
//! Not counted: the CUDA context, cuBLAS workspaces, allocator fragmentation, and
//! temporaries inside a kernel; a layout within a few GiB of the capacity may not fit.

use crate::scenario::{DType, PpSchedule, Recompute, Scenario, Workload};
use crate::strategy::layer::LayerMoe;

/// Bytes per GPU at the peak, by what holds them.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Memory {
    pub weights: f64,
    pub gradients: f64,
    pub optimizer: f64,
    pub activations: f64,
    /// ZeRO's gathered weights and unsharded gradients in flight.
    pub sharding_buffers: f64,
    pub comm_buffers: f64,
    /// The pipeline stage at the peak (0 without pipeline parallelism).
    pub stage: u64,
    /// Layers' worth of one micro-batch's activations the peak stage holds.
    pub layers_in_flight: f64,
    /// The GPU's memory, bytes, when the profile gives it.
    pub capacity: Option<f64>,
}

impl Memory {
    pub fn total(&self) -> f64 {
        self.weights
            + self.gradients
            + self.optimizer
            + self.activations
            + self.sharding_buffers
            + self.comm_buffers
    }

    /// Whether the peak fits the capacity (`true` when the capacity is unknown).
    pub fn fits(&self) -> bool {
        self.capacity.is_none_or(|c| self.total() <= c)
    }

    /// The parts, named as the outputs name them (bytes).
    pub fn parts(&self) -> [(&'static str, f64); 6] {
        [
            ("weights", self.weights),
            ("gradients", self.gradients),
            ("optimizer", self.optimizer),
            ("activations", self.activations),
            ("sharding_buffers", self.sharding_buffers),
            ("comm_buffers", self.comm_buffers),
        ]
    }
}

/// NCCL's buffers per communicator: 2 peers × 16 channels × NCCL_BUFFSIZE (4 MiB).
pub const COMM_BUFFERS: f64 = (2 * 16 * (4 << 20)) as f64;

/// How the activations of a layer are laid out, beyond the scenario: the published
/// formula's GPT layer has dropout and materialized attention scores; the simulator's
/// layers have neither.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayerKind {
    /// Dropout after the attention probabilities, the projection and FC2 (1-byte masks).
    pub dropout: bool,
    /// Attention scores, softmax and dropout stored (unfused attention) instead of
    /// FlashAttention's softmax statistics.
    pub materialized_scores: bool,
}

/// The simulator's layer: fused attention, no dropout (Llama-style pretraining).
pub const FUSED: LayerKind = LayerKind {
    dropout: false,
    materialized_scores: false,
};

/// Bytes a 16-bit (or fp32) training keeps per weight, gradient and optimizer entry.
fn bytes_per_param(dtype: DType) -> (f64, f64, f64) {
    match dtype {
        DType::Fp32 => (4.0, 4.0, 8.0),
        // fp8 training keeps 16-bit weights and gradients; the fp8 casts are transient.
        _ => (2.0, 2.0, 12.0),
    }
}

/// Bytes of a stored activation element.
fn activation_bytes(dtype: DType) -> f64 {
    if dtype == DType::Fp32 { 4.0 } else { 2.0 }
}

/// Activation bytes of one layer and one micro-batch on one GPU, as stored for the
/// backward under `recompute` (for `full`: the layer's input only); a MoE model's lone
/// layer is a MoE one.
pub fn layer_activations(sc: &Scenario, recompute: Recompute, kind: LayerKind) -> f64 {
    layer_activations_of(sc, recompute, kind, moe_layers(sc))
}

/// Whether `sc`'s layers have experts (a MoE model's layer or step).
fn moe_layers(sc: &Scenario) -> bool {
    sc.model.moe.is_some() && matches!(sc.workload, Workload::Layer | Workload::Step)
}

/// [`layer_activations`] of a dense layer or (`moe_layer`) a MoE one: its MLP block's
/// tensors are then the router's fp32 scores (experts per token), the routed rows on
/// the busiest rank (tokens · top-k · its imbalance: each the dispatched input, the
/// expert's FC1 output and activation output, and the expert output the combine brings
/// back, which the router's gradient reads) and the shared experts' FC1 and activation
/// outputs over the rank's own tokens.
pub fn layer_activations_of(
    sc: &Scenario,
    recompute: Recompute,
    kind: LayerKind,
    moe_layer: bool,
) -> f64 {
    let m = &sc.model;
    let p = &sc.parallel;
    let e = activation_bytes(sc.dtype);
    let shards = (p.tp * p.ulysses) as f64;
    // Tokens of one micro-batch of one replica, and the per-GPU share of a tensor of
    // `width` columns over them.
    let tokens = sc.tokens() as f64;
    let t = |width: u64| tokens * width as f64 / shards;
    let h = m.hidden;
    let hidden = t(h) * e;
    if recompute == Recompute::Full {
        return hidden;
    }
    let d = m.hidden / m.heads;
    let kv = m.kv_heads.max(p.tp);
    let qkv = t((m.heads + 2 * kv) * d) * e;
    let masks = if kind.dropout { 2.0 * t(h) } else { 0.0 };
    // Norm inputs (2), QKV's and FC1's inputs (2), the attention output (proj's input),
    // Q/K/V, FC1's output (the activation's input), the activation's output (FC2's
    // input), dropout masks after proj and FC2.
    let mlp = match LayerMoe::from_model(m, p.ep) {
        Some(moe) if moe_layer => {
            let shares = sc.routing.rank_shares(moe.experts, p.ep);
            let busiest = shares.iter().copied().fold(0.0, f64::max) * p.ep as f64;
            let rows = tokens / shards * moe.top_k as f64 * busiest;
            let per_row = 2 * h + moe.expert_fc1 + moe.expert_ffn;
            t(moe.experts) * 4.0
                + rows * per_row as f64 * e
                + t(moe.shared_fc1 + moe.shared_ffn) * e
        }
        _ => t(m.fc1_width()) * e + t(m.ffn) * e,
    };
    let linear = 5.0 * hidden + qkv + mlp + masks;
    let core = if recompute == Recompute::Selective {
        0.0
    } else if kind.materialized_scores {
        // Softmax output (2 bytes), its dropout mask (1) and output (2), per head and
        // query-key pair: 5·a·s²·b, over the GPUs sharing the heads.
        let s = sc.seq as f64;
        let b = sc.batch as f64;
        let per = if kind.dropout { 5.0 } else { 2.0 };
        per * m.heads as f64 * s * s * b / shards
    } else {
        // FlashAttention's softmax statistics: fp32 per head and token.
        t(m.heads) * 4.0
    };
    linear + core
}

/// Layers' worth of one micro-batch's activations that stage `i` holds at its peak.
fn in_flight(sc: &Scenario, i: u64, layers: u64) -> f64 {
    let p = &sc.parallel;
    let (pp, m) = (p.pp, sc.micro_batches);
    let per_stage = layers as f64 / pp as f64;
    if sc.workload != Workload::Step || pp == 1 {
        return per_stage;
    }
    match p.pp_schedule {
        PpSchedule::OneFOneB => (pp - i).min(m) as f64 * per_stage,
        PpSchedule::GPipe => m as f64 * per_stage,
        PpSchedule::Interleaved(v) => {
            let chunks = (2 * (pp - 1 - i) + (v - 1) * pp + 1).min(m * v);
            chunks as f64 * per_stage / v as f64
        }
    }
}

/// Parameters of one dense layer on one GPU (tp-sharded linears, kv heads replicated
/// where tp exceeds them; norms whole).
fn layer_params(sc: &Scenario) -> f64 {
    let m = &sc.model;
    attention_params(sc) + (m.hidden * (m.fc1_width() + m.ffn)) as f64 / sc.parallel.tp as f64
}

/// One layer's attention block and norms on one GPU.
fn attention_params(sc: &Scenario) -> f64 {
    let m = &sc.model;
    let tp = sc.parallel.tp;
    let h = m.hidden;
    let d = h / m.heads;
    let kv = m.kv_heads.max(tp);
    let linear = h * (m.heads + 2 * kv) * d + h * h;
    linear as f64 / tp as f64 + 2.0 * h as f64
}

/// Parameters of one MoE layer on one GPU: those every rank of the data-parallel group
/// shares (attention over tp, the router and the shared experts whole, as the layer
/// builder runs them), and its experts (experts / ep whole experts), which the expert
/// data-parallel group of tp · ulysses · dp / ep ranks shares.
fn moe_layer_params(sc: &Scenario) -> (f64, f64) {
    let h = sc.model.hidden;
    match LayerMoe::from_model(&sc.model, sc.parallel.ep) {
        Some(m) => (
            attention_params(sc) + m.dense_params(h) as f64,
            m.local_expert_params(h) as f64,
        ),
        None => (layer_params(sc), 0.0),
    }
}

/// Dense and MoE layers of pipeline stage `i` (of `layers` in all): stage i holds the
/// virtual stages c·P + i of L/(P·V) layers each; a MoE model's first `dense_layers`
/// are dense.
fn stage_layers(sc: &Scenario, i: u64, layers: u64) -> (u64, u64) {
    let pp = sc.parallel.pp.max(1);
    let v = if sc.workload == Workload::Step {
        sc.parallel.pp_schedule.chunks().max(1)
    } else {
        1
    };
    let per = layers / (pp * v);
    if !moe_layers(sc) {
        return (per * v, 0);
    }
    // A lone layer of a MoE model is a MoE layer.
    let dense_first = if sc.workload == Workload::Step {
        sc.model.moe.map_or(0, |m| m.dense_layers)
    } else {
        0
    };
    let mut moe = 0;
    for c in 0..v {
        let lo = (c * pp + i) * per;
        let hi = lo + per;
        moe += hi.saturating_sub(lo.max(dense_first)).min(per);
    }
    (per * v - moe, moe)
}

/// The memory per GPU of `sc` at its peak (the stage that needs most), under `kind`'s
/// layer (the simulator's: [`FUSED`]).
pub fn per_gpu_with(sc: &Scenario, kind: LayerKind) -> Memory {
    let m = &sc.model;
    let p = &sc.parallel;
    let (ew, eg, eo) = bytes_per_param(sc.dtype);
    let ea = activation_bytes(sc.dtype);
    let sync = (p.dp * p.ulysses) as f64;
    let zero = if sync > 1.0 { sc.zero } else { 0 };
    let step = sc.workload == Workload::Step;
    let training = matches!(
        sc.workload,
        Workload::Layer | Workload::Step | Workload::Attention
    );
    let layers = if step { m.layers } else { 1 };
    let pp = p.pp.max(1);
    let per_layer = layer_params(sc);
    let (moe_dense, moe_experts) = moe_layer_params(sc);
    // The ranks sharing a MoE layer's experts (its expert data-parallel group).
    let expert_sync = ((p.tp * p.ulysses * p.dp) / p.ep.max(1)).max(1) as f64;
    let vocab = (m.vocab * m.hidden) as f64 / p.tp as f64;
    let tokens = sc.tokens() as f64;
    let shards = (p.tp * p.ulysses) as f64;
    let hidden_act = tokens * m.hidden as f64 / shards * ea;
    let act = |r: Recompute, moe: bool| layer_activations_of(sc, r, kind, moe);
    let moe = moe_layers(sc);
    let communicators = [
        p.tp > 1,
        sync > 1.0,
        pp > 1,
        moe && p.ep > 1,
        moe && expert_sync > 1.0,
    ]
    .iter()
    .filter(|&&x| x)
    .count() as f64;
    let mut best: Option<Memory> = None;
    for i in 0..pp {
        let (first, last) = (i == 0, i + 1 == pp);
        let (dense_n, moe_n) = stage_layers(sc, i, layers);
        // The stage's expert parameters (sharded over the expert data-parallel group).
        let experts = if training {
            moe_n as f64 * moe_experts
        } else {
            0.0
        };
        let params = if !training {
            // A forward block: its two MLP GEMMs' weights.
            (m.hidden * (m.fc1_width() + m.ffn)) as f64 / p.tp as f64
        } else {
            let mut n = per_layer * dense_n as f64 + moe_dense * moe_n as f64;
            if step {
                if first {
                    n += vocab;
                }
                if last && (!m.tied_embeddings || pp > 1) {
                    n += vocab;
                }
                if last {
                    n += m.hidden as f64; // final norm
                }
            }
            n
        };
        let shard = |stage: u8| if zero >= stage { sync } else { 1.0 };
        let ezero = if expert_sync > 1.0 { sc.zero } else { 0 };
        let eshard = |stage: u8| if ezero >= stage { expert_sync } else { 1.0 };
        let (weights, gradients, optimizer) = if training {
            (
                params * ew / shard(3) + experts * ew / eshard(3),
                params * eg / shard(2) + experts * eg / eshard(2),
                params * eo / shard(1) + experts * eo / eshard(1),
            )
        } else {
            (params * ew, 0.0, 0.0)
        };
        let flight = if training {
            in_flight(sc, i, layers)
        } else {
            1.0
        };
        // One layer's activations: the stage's layers' mean (dense and MoE ones).
        let held = (dense_n + moe_n).max(1) as f64;
        let mean =
            |r: Recompute| (dense_n as f64 * act(r, false) + moe_n as f64 * act(r, true)) / held;
        let mut activations = if training {
            flight * mean(sc.recompute)
        } else {
            // A forward block keeps nothing for a backward: its largest live tensors,
            // FC1's output and the activation's.
            tokens * (m.fc1_width() + m.ffn) as f64 / shards * ea
        };
        if training && sc.recompute == Recompute::Full {
            // The layer being recomputed holds its whole activations meanwhile.
            activations += mean(Recompute::None).max(if moe_n > 0 {
                act(Recompute::None, true)
            } else {
                0.0
            });
        }
        if step {
            let mbs = if pp == 1 {
                1.0
            } else {
                flight / (layers / pp) as f64
            };
            if first {
                activations += mbs * hidden_act; // embedding output
            }
            if last {
                // Final norm's and head's inputs, fp32 logits of the loss.
                let logits = tokens * m.vocab as f64 / shards * 4.0;
                activations += 2.0 * hidden_act + logits;
            }
        }
        // The largest layer of the stage, gathered whole.
        let layer = if moe_n > 0 {
            (moe_dense + moe_experts).max(if dense_n > 0 { per_layer } else { 0.0 })
        } else {
            per_layer
        };
        let sharding_buffers = if training && (sync > 1.0 || (moe_n > 0 && expert_sync > 1.0)) {
            let z = zero.max(if moe_n > 0 && expert_sync > 1.0 {
                sc.zero
            } else {
                0
            });
            let gathered = if z >= 3 { 2.0 * layer * ew } else { 0.0 };
            let grads = if z >= 2 { layer * eg } else { 0.0 };
            gathered + grads
        } else {
            0.0
        };
        let mem = Memory {
            weights,
            gradients,
            optimizer,
            activations,
            sharding_buffers,
            comm_buffers: communicators * COMM_BUFFERS,
            stage: i,
            layers_in_flight: flight,
            capacity: sc.hardware.gpu.memory,
        };
        if best.as_ref().is_none_or(|b| mem.total() > b.total()) {
            best = Some(mem);
        }
    }
    best.expect("at least one stage")
}

/// The memory per GPU of `sc` as the simulator lays out its layers.
pub fn per_gpu(sc: &Scenario) -> Memory {
    per_gpu_with(sc, FUSED)
}

/// Bytes as GiB.
pub fn gib(bytes: f64) -> f64 {
    bytes / (1u64 << 30) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Overrides;

    fn scenario(o: Overrides) -> Scenario {
        o.scenario("default", &|k| k.to_string()).unwrap().0
    }

    fn gpt(tp: i64, seq: i64, recompute: &str) -> Scenario {
        let mut sc = scenario(Overrides {
            model: Some("gpt-3-175b".into()),
            hardware: Some("dgx-h100".into()),
            workload: Some("layer".into()),
            tp: Some(tp),
            seq: Some(seq),
            batch: Some(1),
            ..Default::default()
        });
        sc.recompute = Recompute::parse(recompute).unwrap();
        sc
    }

    /// Korthikanti et al. §4.1–4.2 (16-bit activations, TPSP over t ranks), per layer:
    /// none s·b·h·(34/t + 5·a·s/(h·t)), selective 34·s·b·h/t, full 2·s·b·h/t; on GPT's
    /// layer (dropout, scores materialized) the count equals them exactly.
    #[test]
    fn activations_are_korthikantis_formula_on_gpts_layer() {
        let gpt_layer = LayerKind {
            dropout: true,
            materialized_scores: true,
        };
        for (tp, seq) in [(1, 2048), (8, 2048), (8, 4096)] {
            let (s, b, h, a) = (seq as f64, 1.0, 12288.0, 96.0);
            let t = tp as f64;
            let none = s * b * h * (34.0 / t + 5.0 * a * s / (h * t));
            let sc = gpt(tp, seq, "none");
            assert_eq!(layer_activations(&sc, Recompute::None, gpt_layer), none);
            assert_eq!(
                layer_activations(&sc, Recompute::Selective, gpt_layer),
                34.0 * s * b * h / t
            );
            assert_eq!(
                layer_activations(&sc, Recompute::Full, gpt_layer),
                2.0 * s * b * h / t
            );
            // The simulator's fused layer: no masks (2·s·b·h less), softmax statistics
            // (fp32 per head and token) instead of the s² terms.
            let fused = 32.0 * s * b * h / t + 4.0 * a * s * b / t;
            assert_eq!(layer_activations(&sc, Recompute::None, FUSED), fused);
        }
    }

    /// Parameters by hand: llama-3-8b has 8.03 B (32 layers of 4096² · (1 + 2·8/32) +
    /// 4096² + 3·4096·14336, two norms each, untied 128256 × 4096 embedding and head,
    /// a final norm); ZeRO's 2 + 2 + 12 bytes each, sharded by stage.
    #[test]
    fn parameters_are_the_hand_count_and_zero_shards_them() {
        let h: f64 = 4096.0;
        let layer = h * (32.0 + 16.0) * 128.0 + h * h + h * 2.0 * 14336.0 + 14336.0 * h;
        let total = 32.0 * (layer + 2.0 * h) + 2.0 * 128256.0 * h + h;
        assert!((total / 1e9 - 8.03).abs() < 0.01, "{total}");
        let base = Overrides {
            model: Some("llama-3-8b".into()),
            hardware: Some("dgx-h100".into()),
            workload: Some("step".into()),
            tp: Some(1),
            nodes: Some(2),
            seq: Some(4096),
            batch: Some(1),
            ..Default::default()
        };
        let sc = scenario(base.clone());
        let m = per_gpu(&sc);
        assert_eq!(m.weights, 2.0 * total);
        assert_eq!(m.gradients, 2.0 * total);
        assert_eq!(m.optimizer, 12.0 * total);
        assert_eq!(m.sharding_buffers, 0.0);
        for (zero, w, g, o) in [
            (0u8, 1.0, 1.0, 1.0),
            (1, 1.0, 1.0, 16.0),
            (2, 1.0, 16.0, 16.0),
            (3, 16.0, 16.0, 16.0),
        ] {
            let mut sc = scenario(Overrides {
                dp: Some(16),
                ..base.clone()
            });
            sc.zero = zero;
            let m = per_gpu(&sc);
            assert_eq!(m.weights, 2.0 * total / w, "zero {zero}");
            assert_eq!(m.gradients, 2.0 * total / g, "zero {zero}");
            assert_eq!(m.optimizer, 12.0 * total / o, "zero {zero}");
        }
    }

    /// Mixtral-8x7B's weights are its published 46.7 B parameters (the hand count:
    /// 32 layers of attention 4096·(32 + 2·8)·128 + 4096², a router of 4096·8 and eight
    /// SwiGLU experts of 3·4096·14336, two norms of 4096 a layer, plus input and output
    /// embeddings of 32000·4096 and the final norm);
    /// expert parallelism shards only the experts, and ZeRO shards them over their own
    /// expert data-parallel group (dp · tp / ep ranks), the rest over dp.
    #[test]
    fn a_moe_models_parameters_are_the_hand_count_and_ep_shards_its_experts() {
        let base = Overrides {
            model: Some("mixtral-8x7b".into()),
            hardware: Some("h200-sxm-8".into()),
            workload: Some("step".into()),
            tp: Some(1),
            seq: Some(4096),
            batch: Some(1),
            ..Default::default()
        };
        let (h, layers): (f64, f64) = (4096.0, 32.0);
        let attention = h * 48.0 * 128.0 + h * h;
        let router = h * 8.0;
        let expert = 3.0 * h * 14336.0;
        let embeddings = 2.0 * 32000.0 * h + h;
        let total = layers * (attention + router + 2.0 * h + 8.0 * expert) + embeddings;
        assert!((total / 1e9 - 46.7).abs() < 0.05, "{total}");
        let m = per_gpu(&scenario(base.clone()));
        assert_eq!(m.weights, 2.0 * total);
        assert_eq!(m.optimizer, 12.0 * total);
        // ep 8 over dp 8, ZeRO-1: experts whole on their rank (one of them), optimizer
        // state of the dense part over dp 8 and of the experts over edp 8 / 8 = 1.
        let mut sc = scenario(Overrides {
            dp: Some(8),
            ep: Some(8),
            ..base.clone()
        });
        sc.zero = 1;
        let m = per_gpu(&sc);
        let dense = layers * (attention + router + 2.0 * h) + embeddings;
        let local = layers * expert;
        assert_eq!(m.weights, 2.0 * (dense + local));
        assert_eq!(m.gradients, 2.0 * (dense + local));
        assert_eq!(m.optimizer, 12.0 * (dense / 8.0 + local));
        // ep 2 over dp 8: four experts a rank, their state over edp 4.
        let mut sc = scenario(Overrides {
            dp: Some(8),
            ep: Some(2),
            ..base
        });
        sc.zero = 1;
        let m = per_gpu(&sc);
        assert_eq!(m.weights, 2.0 * (dense + 4.0 * local));
        assert_eq!(m.optimizer, 12.0 * (dense / 8.0 + 4.0 * local / 4.0));
    }

    /// The micro-batches in flight: 1F1B holds P on stage 0, interleaved
    /// L·(1 + (P − 1)/(P·V)) layers (Korthikanti §4.2.3), GPipe all m; the peak is stage 0.
    #[test]
    fn pipeline_schedules_hold_their_micro_batches() {
        let mut sc = gpt(8, 2048, "none");
        sc.workload = Workload::Step;
        sc.micro_batches = 16;
        sc.parallel.pp = 8;
        let l = sc.model.layers as f64;
        assert_eq!(in_flight(&sc, 0, 96), l);
        assert_eq!(in_flight(&sc, 7, 96), l / 8.0);
        sc.parallel.pp_schedule = PpSchedule::Interleaved(2);
        assert_eq!(in_flight(&sc, 0, 96), l * (1.0 + 7.0 / 16.0));
        sc.parallel.pp_schedule = PpSchedule::GPipe;
        assert_eq!(in_flight(&sc, 0, 96), 16.0 * l / 8.0);
        // Fewer micro-batches than stages: only those.
        sc.parallel.pp_schedule = PpSchedule::OneFOneB;
        sc.micro_batches = 2;
        assert_eq!(in_flight(&sc, 0, 96), 2.0 * l / 8.0);
    }

    /// 70B on one GPU needs over a terabyte; tp 8 × pp 8 with ZeRO over 16 replicas fits.
    #[test]
    fn a_70b_model_fits_only_when_sharded() {
        let one = scenario(Overrides {
            model: Some("llama-3-70b".into()),
            hardware: Some("h100-sxm-8".into()),
            workload: Some("step".into()),
            tp: Some(1),
            seq: Some(4096),
            batch: Some(1),
            ..Default::default()
        });
        let m = per_gpu(&one);
        assert!(m.total() > 1.1e12, "{}", m.total());
        assert!(!m.fits());
        let mut sharded = scenario(Overrides {
            model: Some("llama-3-70b".into()),
            hardware: Some("dgx-h100".into()),
            nodes: Some(128),
            workload: Some("step".into()),
            tp: Some(8),
            dp: Some(16),
            seq: Some(4096),
            batch: Some(1),
            micro_batches: Some(8),
            ..Default::default()
        });
        sharded.parallel.pp = 8;
        let m = per_gpu(&sharded);
        assert!(m.fits(), "{} GiB", gib(m.total()));
        assert_eq!(m.stage, 0);
    }
}

/// A layout that does not fit in its GPUs' memory.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "does not fit: {need:.1} GiB per GPU ({parts}) but the GPUs of {hardware} have {capacity:.1} GiB; \
     shard it more (tp, pp, dp with ZeRO), recompute activations (recompute), use fewer \
     micro-batches in flight, or allow it (--allow-oom) to simulate it anyway"
)]
pub struct OutOfMemory {
    pub need: f64,
    pub capacity: f64,
    pub hardware: String,
    pub parts: String,
}

impl Memory {
    /// The parts as `weights 1.9, … GiB`, the stage when there are several.
    pub fn describe(&self) -> String {
        let parts: Vec<String> = self
            .parts()
            .iter()
            .filter(|p| p.1 > 0.0)
            .map(|(n, b)| format!("{} {:.1}", n.replace('_', " "), gib(*b)))
            .collect();
        format!("{} GiB", parts.join(", "))
    }
}

/// The memory of `sc`, or why it does not fit. Only layers and steps are refused: a
/// forward block's few tensors always fit beside the rest of a training run.
pub fn check(sc: &Scenario) -> Result<Memory, OutOfMemory> {
    let m = per_gpu(sc);
    let training = matches!(
        sc.workload,
        Workload::Layer | Workload::Step | Workload::Attention
    );
    match m.capacity {
        Some(c) if training && m.total() > c => Err(OutOfMemory {
            need: gib(m.total()),
            capacity: gib(c),
            hardware: sc.hardware.name.clone(),
            parts: m.describe(),
        }),
        _ => Ok(m),
    }
}
