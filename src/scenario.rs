//! Validated domain types: what a scenario *is*, independent of the files it was read from.
//! `config` turns files into these; everything downstream reads only these.

use crate::topology::Topology;
use std::fmt;

/// Element type of the tensors a scenario moves and multiplies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DType {
    Fp8,
    Bf16,
    Fp16,
    Fp32,
}

impl DType {
    pub const ALL: [DType; 4] = [DType::Fp8, DType::Bf16, DType::Fp16, DType::Fp32];

    pub fn bytes(self) -> u64 {
        match self {
            DType::Fp8 => 1,
            DType::Bf16 | DType::Fp16 => 2,
            DType::Fp32 => 4,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            DType::Fp8 => "fp8",
            DType::Bf16 => "bf16",
            DType::Fp16 => "fp16",
            DType::Fp32 => "fp32",
        }
    }

    pub fn parse(s: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == s)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Activation of the MLP. Gated activations (SwiGLU, GeGLU) double FC1's output width.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    Gelu,
    Relu,
    Silu,
    SwiGlu,
    GeGlu,
}

impl Activation {
    pub const ALL: [Activation; 5] = [
        Activation::Gelu,
        Activation::Relu,
        Activation::Silu,
        Activation::SwiGlu,
        Activation::GeGlu,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Activation::Gelu => "gelu",
            Activation::Relu => "relu",
            Activation::Silu => "silu",
            Activation::SwiGlu => "swiglu",
            Activation::GeGlu => "geglu",
        }
    }

    pub fn parse(s: &str) -> Option<Activation> {
        Activation::ALL.into_iter().find(|a| a.name() == s)
    }

    pub fn gated(self) -> bool {
        matches!(self, Activation::SwiGlu | Activation::GeGlu)
    }
}

/// A transformer's shape.
#[derive(Debug, Clone, PartialEq)]
pub struct Model {
    pub name: String,
    pub hidden: u64,
    pub ffn: u64,
    pub heads: u64,
    pub kv_heads: u64,
    pub layers: u64,
    pub vocab: u64,
    pub activation: Activation,
    /// The LM head shares the embedding matrix.
    pub tied_embeddings: bool,
    /// A mixture of experts in place of the dense MLP (from layer `dense_layers` on).
    pub moe: Option<MoeSpec>,
}

/// A mixture-of-experts FFN: `experts` routed experts of width `expert_ffn` each, every
/// token sent to `top_k` of them; `shared_ffn` the total width of the shared experts
/// every token also passes through (0: none); the first `dense_layers` layers keep a
/// dense MLP `ffn` wide (DeepSeek's `first_k_dense_replace`). Experts use the model's
/// activation (gated: FC1 twice as wide).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoeSpec {
    pub experts: u64,
    pub top_k: u64,
    pub expert_ffn: u64,
    pub shared_ffn: u64,
    pub dense_layers: u64,
}

/// How a MoE layer's router spreads tokens over the experts (in expectation: every
/// rank's tokens the same way).
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Routing {
    /// Every expert gets the same share.
    #[default]
    Uniform,
    /// Expert e (0-based, experts placed in order on the expert-parallel ranks) gets a
    /// share proportional to 1 / (e + 1)^s.
    Zipf(f64),
    /// A relative load per expert-parallel rank, spread evenly over its experts.
    Loads(Vec<f64>),
}

impl Routing {
    /// The share of routed token-slots that lands on each of `ep` ranks holding
    /// `experts / ep` consecutive experts each (sums to 1).
    pub fn rank_shares(&self, experts: u64, ep: u64) -> Vec<f64> {
        let ep = ep.max(1) as usize;
        let per = (experts as usize / ep).max(1);
        let raw: Vec<f64> = match self {
            Routing::Uniform => vec![1.0; ep],
            Routing::Zipf(z) => (0..ep)
                .map(|d| {
                    (d * per..(d + 1) * per)
                        .map(|e| 1.0 / ((e + 1) as f64).powf(*z))
                        .sum()
                })
                .collect(),
            Routing::Loads(v) => (0..ep).map(|d| v.get(d).copied().unwrap_or(0.0)).collect(),
        };
        let total: f64 = raw.iter().sum();
        raw.iter().map(|x| x / total).collect()
    }

    pub fn describe(&self) -> String {
        match self {
            Routing::Uniform => "uniform".into(),
            Routing::Zipf(z) => format!("zipf:{z}"),
            Routing::Loads(v) => v
                .iter()
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
                .join(","),
        }
    }

    /// `uniform`, `zipf:S` (S ≥ 0) or a comma-separated load per rank (non-negative,
    /// not all zero).
    pub fn parse(s: &str) -> Result<Routing, String> {
        let s = s.trim();
        if s == "uniform" {
            return Ok(Routing::Uniform);
        }
        if let Some(z) = s.strip_prefix("zipf:") {
            return match z.trim().parse::<f64>() {
                Ok(z) if z.is_finite() && (0.0..=16.0).contains(&z) => Ok(Routing::Zipf(z)),
                _ => Err(format!(
                    "the Zipf exponent in `{s}` must be a number from 0 to 16"
                )),
            };
        }
        let v: Result<Vec<f64>, _> = s.split(',').map(|x| x.trim().parse::<f64>()).collect();
        match v {
            Ok(v) if v.iter().all(|x| x.is_finite() && *x >= 0.0) && v.iter().any(|x| *x > 0.0) => {
                Ok(Routing::Loads(v))
            }
            _ => Err(format!(
                "routing `{s}`: `uniform`, `zipf:S` or a load per expert-parallel rank (non-negative numbers, not all 0, comma-separated)"
            )),
        }
    }
}

impl Model {
    /// Width of FC1's output: `ffn`, or `2·ffn` for a gated MLP (gate and up projections).
    pub fn fc1_width(&self) -> u64 {
        if self.activation.gated() {
            2 * self.ffn
        } else {
            self.ffn
        }
    }
}

/// GEMM efficiency parameters of a GPU (see `cost::gemm_time`).
#[derive(Debug, Clone, PartialEq)]
pub struct GemmParams {
    /// Output tile one CTA computes, rows × columns.
    pub tile_m: u64,
    pub tile_n: u64,
    /// Fraction of peak FLOP/s a full wave of large tiles reaches.
    pub efficiency: f64,
    /// K at which the K-loop reaches half of `efficiency` (prologue/epilogue cost); 0 = none.
    pub k_half: f64,
    /// Fraction of HBM bandwidth a memory-bound GEMM reaches.
    pub memory_efficiency: f64,
    /// Fixed cost per GEMM launch, seconds.
    pub launch: f64,
    /// Other output tiles (rows × columns) the GEMM library can pick for a shape; the
    /// model takes the fastest of `tile_m × tile_n` and these. Empty: that one tile.
    pub alt_tiles: Vec<(u64, u64)>,
    /// Bytes per second one SM can load (its share of L2/HBM when few SMs work): a tile's
    /// K-loop streams its A and B slabs at most this fast. `None`: unbounded.
    pub sm_load_bandwidth: Option<f64>,
    /// Extra cost of a split-K GEMM (the reduction of its partial sums), seconds.
    pub split_launch: f64,
    /// Stream-K for a grid of more than one wave: the tiles' K-iterations spread evenly
    /// over the SMs (fractional waves), paying this fraction more for the fix-up of
    /// shared tiles. `None`: whole waves only.
    pub stream_k_overhead: Option<f64>,
    /// GEMM times measured on the machine (by `flashoverlap calibrate`). When points of a
    /// GEMM's dtype exist, the model's time is scaled by the measured/model ratio
    /// interpolated from them (see [`crate::cost::gemm_cost`]); an exact shape gets its
    /// measured time.
    pub measured: Vec<GemmPoint>,
}

/// One measured GEMM: (m × k) · (k × n) in `dtype` took `secs` with its operands out
/// of L2, and `warm_secs` (where measured) right after a GEMM that read the same B.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GemmPoint {
    pub dtype: DType,
    pub m: u64,
    pub n: u64,
    pub k: u64,
    pub secs: f64,
    /// The same shape issued at once after a GEMM over the same B (the weight) and
    /// other rows of A: the later partial GEMMs of a decomposed site, whose weight is
    /// still in L2 where it fits.
    pub warm_secs: Option<f64>,
}

/// Elementwise-kernel parameters (adds, activations).
#[derive(Debug, Clone, PartialEq)]
pub struct ElementwiseParams {
    /// Fraction of HBM bandwidth reached.
    pub efficiency: f64,
    /// Fixed cost per launch, seconds.
    pub launch: f64,
}

/// One GPU's compute and memory capabilities.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuSpec {
    pub name: String,
    pub sm_count: u64,
    /// HBM bandwidth, bytes/s.
    pub hbm_bandwidth: f64,
    /// Dense peak FLOP/s by dtype; `None` where the GPU has no such tensor-core path.
    pub peak_flops: [Option<f64>; 4],
    pub gemm: GemmParams,
    pub elementwise: ElementwiseParams,
    /// A compute-bound GEMM's time under sustained load over its time in a short burst
    /// (the power limit lowers the clocks), when measured.
    pub sustained_gemm_slowdown: Option<f64>,
    /// The rested FLOP/s of the GEMM that `sustained_gemm_slowdown` was measured on.
    /// Given, a measured GEMM of rested rate `r` slows by `r / r0` at sustained clocks,
    /// `r0 = this / slowdown` (at least 1, at most the slowdown): the power a GEMM draws
    /// grows with its rate, and the clocks fall until it is within the limit, so a
    /// GEMM below `r0` does not slow. `None`: every GEMM slows by the full factor.
    pub sustained_reference_flops: Option<f64>,
    /// Fraction of peak a fused attention kernel reaches; `None`: the GEMMs' efficiency.
    pub attention_efficiency: Option<f64>,
    /// Device memory, bytes (what `nvidia-smi` reports as total), when the profile
    /// gives it.
    pub memory: Option<f64>,
}

impl GpuSpec {
    pub fn peak(&self, dtype: DType) -> Option<f64> {
        self.peak_flops[dtype as usize]
    }

    /// This GPU at the clocks sustained load gives it: the compute side of GEMMs and
    /// attention (the profile's efficiency, and every measured GEMM time) slowed by
    /// `sustained_gemm_slowdown`; HBM-bound work is unchanged (the memory clock stays).
    /// `None` when the profile does not give the factor.
    pub fn at_sustained_clocks(&self) -> Option<GpuSpec> {
        let f = self.sustained_gemm_slowdown?;
        let mut g = self.clone();
        g.gemm.efficiency /= f;
        if let Some(a) = &mut g.attention_efficiency {
            *a /= f;
        }
        let r0 = self.sustained_reference_flops.map(|r| r / f);
        for p in &mut g.gemm.measured {
            // The point's own slowdown, from its rested rate (the cold time's).
            let fp = match r0 {
                Some(r0) if r0 > 0.0 && p.secs > 0.0 => {
                    let rate = crate::cost::gemm_flops(p.m, p.n, p.k) / p.secs;
                    (rate / r0).clamp(1.0, f)
                }
                _ => f,
            };
            p.secs *= fp;
            if let Some(w) = &mut p.warm_secs {
                *w *= fp;
            }
        }
        g.sustained_gemm_slowdown = Some(1.0);
        Some(g)
    }
}

/// Communication-software parameters (on top of the links' own latencies).
#[derive(Debug, Clone, PartialEq)]
pub struct CommParams {
    /// Fixed cost of one point-to-point message (launch + handshake), seconds.
    pub message_latency: f64,
    /// Fixed cost of a later step of a collective that runs as one kernel (the
    /// protocol's synchronisation between steps, no launch), seconds.
    pub step_latency: f64,
    /// How NCCL runs collectives here (channels, algorithm and protocol choice).
    pub nccl: crate::cost::nccl::NcclConfig,
}

/// How transfers move between GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash, PartialOrd, Ord)]
pub enum Transport {
    /// Copy engines (the receiver pulls the region with a device or peer copy): no SMs
    /// taken, HBM shared.
    CopyEngine,
    /// NCCL-style send/recv kernels: each posted send or recv holds CTAs (SMs) from the
    /// moment it is posted until it completes, and shares HBM.
    #[default]
    Nccl,
}

impl Transport {
    pub const ALL: [Transport; 2] = [Transport::Nccl, Transport::CopyEngine];

    pub fn name(self) -> &'static str {
        match self {
            Transport::CopyEngine => "copy",
            Transport::Nccl => "nccl",
        }
    }

    pub fn parse(s: &str) -> Option<Transport> {
        match s {
            "copy" | "ce" | "copy-engine" => Some(Transport::CopyEngine),
            "nccl" => Some(Transport::Nccl),
            _ => None,
        }
    }
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How communication slows the computation beside it on the same GPU (METHOD.md §3.2).
/// All effects are multiplicative slowdowns of an op's rate while the condition holds; an
/// op's progress is kept when conditions change mid-run.
#[derive(Debug, Clone, PartialEq)]
pub struct InterferenceParams {
    /// CTAs (one SM each) a posted NCCL-style send or recv kernel holds.
    pub comm_ctas_per_op: u64,
    /// At most this many SMs are held by communication on one GPU at once.
    pub max_comm_ctas: u64,
    /// A GEMM's slowdown while a transfer to or from its GPU is moving bytes (HBM and L2
    /// shared with the transfer); 1 = none.
    pub gemm_slowdown_beside_transfer: f64,
    /// A memory-bound kernel's (add, activation, copy) slowdown while a GEMM runs on the
    /// same GPU on another stream; 1 = none.
    pub memory_op_slowdown_beside_gemm: f64,
    /// A GEMM's slowdown while an elementwise kernel on a communication stream of its GPU
    /// runs (a reduction beside the partial GEMMs: it takes SMs as the GEMM's waves
    /// drain, and the next GEMM waits for them); 1 = none.
    pub gemm_slowdown_beside_reduction: f64,
    /// An elementwise kernel on a communication stream beside a GEMM (it never waits for
    /// the GEMM's SMs).
    pub reduction_slowdown_beside_gemm: f64,
    /// SM admission: a copy on a communication stream (the GPU runs it on SMs) that
    /// becomes ready while a GEMM that started earlier still fills every SM makes no
    /// progress until that GEMM's last, partial wave leaves SMs idle (or it ends). Once
    /// running it keeps its SMs: beside a GEMM that fills the GPU it runs
    /// `memory_op_slowdown_beside_gemm` slower and slows the GEMM by
    /// `gemm_slowdown_beside_reduction`. Off: such copies count as other memory ops.
    /// Reductions never wait (measured: they run beside the GEMM from its start).
    pub memory_ops_wait_for_gemm_sms: bool,
}

/// The shape of run-to-run jitter factors (each has mean 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JitterDistribution {
    /// exp(N(−σ²/2, σ²)) with σ² = ln(1 + cv²): positive, right-skewed (the usual shape of
    /// kernel and message time tails).
    Lognormal,
    /// 1 + cv·N(0, 1), truncated below at 0.05.
    Normal,
    /// Uniform on 1 ± cv·√3 (cv ≤ 1/√3).
    Uniform,
}

impl JitterDistribution {
    pub fn parse(s: &str) -> Option<JitterDistribution> {
        match s {
            "lognormal" => Some(JitterDistribution::Lognormal),
            "normal" => Some(JitterDistribution::Normal),
            "uniform" => Some(JitterDistribution::Uniform),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            JitterDistribution::Lognormal => "lognormal",
            JitterDistribution::Normal => "normal",
            JitterDistribution::Uniform => "uniform",
        }
    }
}

/// Run-to-run variability of a machine: each compute op's time, and each message's
/// latency and bandwidth, is multiplied by its own factor of mean 1 and this coefficient
/// of variation (standard deviation / mean).
#[derive(Debug, Clone, PartialEq)]
pub struct VariabilityParams {
    pub distribution: JitterDistribution,
    pub compute_cv: f64,
    pub comm_cv: f64,
}

/// What a straggler slows.
#[derive(Debug, Clone, PartialEq)]
pub enum StragglerTarget {
    /// Every compute op of this rank.
    Rank(u32),
    /// One link, by its name `a->b` (bandwidth divided by the factor).
    Link(String),
}

/// A rank or link slower than its peers by `factor` (> 0; > 1 is slower).
#[derive(Debug, Clone, PartialEq)]
pub struct Straggler {
    pub target: StragglerTarget,
    pub factor: f64,
}

impl Straggler {
    /// `rank:R=F` or `link:A->B=F`.
    pub fn parse(s: &str) -> Result<Straggler, String> {
        let bad = || format!("straggler `{s}`: expected rank:R=FACTOR or link:A->B=FACTOR");
        let (what, factor) = s.rsplit_once('=').ok_or_else(bad)?;
        let factor: f64 = factor.trim().parse().map_err(|_| bad())?;
        if !(factor.is_finite() && factor > 0.0) {
            return Err(format!("straggler `{s}`: factor must be finite and > 0"));
        }
        let target = if let Some(r) = what.strip_prefix("rank:") {
            StragglerTarget::Rank(r.trim().parse().map_err(|_| bad())?)
        } else if let Some(l) = what.strip_prefix("link:") {
            StragglerTarget::Link(l.trim().to_string())
        } else {
            return Err(bad());
        };
        Ok(Straggler { target, factor })
    }

    /// Several stragglers (`--straggler` given repeatedly), each target once: the same
    /// rank or link twice would multiply its factors silently.
    pub fn parse_all(texts: &[String]) -> Result<Vec<Straggler>, String> {
        let all = texts
            .iter()
            .map(|s| Straggler::parse(s))
            .collect::<Result<Vec<_>, _>>()?;
        for (i, s) in all.iter().enumerate() {
            if let Some(j) = all[..i].iter().position(|t| t.target == s.target) {
                return Err(format!(
                    "the same target twice (`{}` and `{}`); give each rank or link once, with its whole factor",
                    texts[j], texts[i]
                ));
            }
        }
        Ok(all)
    }
}

impl std::fmt::Display for Straggler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.target {
            StragglerTarget::Rank(r) => write!(f, "rank:{r}={}", self.factor),
            StragglerTarget::Link(l) => write!(f, "link:{l}={}", self.factor),
        }
    }
}

/// A machine: GPUs, the software costs of talking between them, and how they are wired.
#[derive(Debug, Clone)]
pub struct Hardware {
    pub name: String,
    pub gpu: GpuSpec,
    pub comm: CommParams,
    /// `None`: the profile models no interference.
    pub interference: Option<InterferenceParams>,
    /// `None`: the profile states no run-to-run variability.
    pub variability: Option<VariabilityParams>,
    pub topology: Topology,
}

/// Parallelism degrees. The core simulates one tensor-parallel group with sequence
/// parallelism (TPSP); `dp` and `ulysses` are carried for the layouts that use them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parallel {
    pub tp: u64,
    pub sp: bool,
    pub dp: u64,
    pub ulysses: u64,
    /// Pipeline stages (workload `step`): the layers split over `pp` stages.
    pub pp: u64,
    /// How micro-batches flow through the stages.
    pub pp_schedule: PpSchedule,
    pub order: RankOrder,
    /// Expert-parallel ranks: each holds experts / ep experts (workload `moe`: the
    /// block's ranks; layers and steps: groups of ep consecutive ranks of a stage).
    pub ep: u64,
}

/// A pipeline schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PpSchedule {
    /// One forward, one backward (PipeDream-Flush, Megatron's default): stage i runs
    /// P − i warm-up forwards, then alternates, then drains the backwards.
    #[default]
    OneFOneB,
    /// 1F1B over `v` model chunks per stage (Megatron's interleaved schedule): stage i
    /// holds layers chunks i, i + P, …; the bubble shrinks by `v`.
    Interleaved(u64),
    /// Every forward, then every backward.
    GPipe,
}

impl PpSchedule {
    pub fn parse(s: &str) -> Option<PpSchedule> {
        match s {
            "1f1b" => Some(PpSchedule::OneFOneB),
            "gpipe" => Some(PpSchedule::GPipe),
            _ => {
                let v: u64 = s.strip_prefix("interleaved:")?.parse().ok()?;
                (v >= 1).then_some(PpSchedule::Interleaved(v))
            }
        }
    }

    /// Model chunks per stage (1 but for interleaved).
    pub fn chunks(self) -> u64 {
        match self {
            PpSchedule::Interleaved(v) => v,
            _ => 1,
        }
    }
}

impl fmt::Display for PpSchedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PpSchedule::OneFOneB => write!(f, "1f1b"),
            PpSchedule::Interleaved(v) => write!(f, "interleaved:{v}"),
            PpSchedule::GPipe => write!(f, "gpipe"),
        }
    }
}

/// Which activations the backward recomputes instead of keeping (Korthikanti et al.).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Recompute {
    /// Keep every activation the backward needs.
    #[default]
    None,
    /// Recompute the core attention (scores, softmax, dropout: the s² terms).
    Selective,
    /// Keep each layer's input only and recompute the layer in the backward.
    Full,
}

impl Recompute {
    pub const NAMES: [&str; 3] = ["none", "selective", "full"];

    pub fn parse(s: &str) -> Option<Recompute> {
        match s {
            "none" => Some(Recompute::None),
            "selective" => Some(Recompute::Selective),
            "full" => Some(Recompute::Full),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        Recompute::NAMES[self as usize]
    }
}

/// Which parallel degree varies fastest over the ranks (and so over consecutive GPUs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RankOrder {
    /// Rank = d·tp + t: a tensor-parallel group on consecutive GPUs (inside a node),
    /// data-parallel replicas across nodes.
    #[default]
    TpInner,
    /// Rank = t·dp + d: the replicas of one tensor shard on consecutive GPUs.
    DpInner,
    /// tp fastest, then the pipeline stages, then Ulysses and dp: a pipeline on
    /// neighbouring GPUs (see [`Parallel::rank_of4`]).
    TpPpDp,
}

impl RankOrder {
    pub fn parse(s: &str) -> Option<RankOrder> {
        match s {
            "tp-inner" => Some(RankOrder::TpInner),
            "dp-inner" => Some(RankOrder::DpInner),
            "tp-pp-dp" => Some(RankOrder::TpPpDp),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            RankOrder::TpInner => "tp-inner",
            RankOrder::DpInner => "dp-inner",
            RankOrder::TpPpDp => "tp-pp-dp",
        }
    }
}

impl Parallel {
    /// Every rank: tp × ulysses × dp × pp. Layers and steps draw the expert-parallel
    /// groups from a stage's ranks (ep divides tp × ulysses × dp); workload `moe` has
    /// no other degree, so its ranks are the ep ones.
    pub fn world(&self) -> u64 {
        self.stage_world().max(self.ep) * self.pp
    }

    /// The ranks of one pipeline stage: tp × ulysses × dp.
    pub fn stage_world(&self) -> u64 {
        self.tp * self.dp * self.ulysses
    }

    /// The plan rank of tensor rank `t`, Ulysses rank `j`, replica `d` of stage `p`:
    /// [`Parallel::rank_of3`]'s rank within the stage, the stages outermost (`tp-inner`,
    /// `dp-inner`: Megatron's tp-cp-dp-pp order), or between tp and the rest (`tp-pp-dp`:
    /// a pipeline's stages on neighbouring GPUs, inside a node when tp × pp fits one).
    pub fn rank_of4(&self, p: u64, d: u64, j: u64, t: u64) -> u64 {
        match self.order {
            RankOrder::TpPpDp => ((d * self.ulysses + j) * self.pp + p) * self.tp + t,
            _ => p * self.stage_world() + self.rank_of3(d, j, t),
        }
    }

    /// The plan rank of tensor rank `t` of data-parallel replica `d` (Ulysses rank 0).
    pub fn rank_of(&self, d: u64, t: u64) -> u64 {
        self.rank_of3(d, 0, t)
    }

    /// The plan rank of tensor rank `t`, Ulysses rank `j`, data-parallel replica `d`:
    /// tp fastest, then Ulysses, then dp (`tp-inner`), or dp fastest, then Ulysses, then
    /// tp (`dp-inner`).
    pub fn rank_of3(&self, d: u64, j: u64, t: u64) -> u64 {
        match self.order {
            RankOrder::TpInner | RankOrder::TpPpDp => (d * self.ulysses + j) * self.tp + t,
            RankOrder::DpInner => (t * self.ulysses + j) * self.dp + d,
        }
    }
}

/// What is simulated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// All-gather of the sequence-sharded input, then column-parallel FC1.
    AgGemm,
    /// Row-parallel FC2, then reduce-scatter of its output over tokens.
    GemmRs,
    /// The TPSP MLP block forward: AG → FC1 → activation → FC2 → RS.
    Mlp,
    /// One transformer layer (attention + MLP), forward and backward, TPSP.
    Layer,
    /// A training step: every layer forward and backward plus the LM head, per
    /// micro-batch.
    Step,
    /// The attention block of a layer alone (norm, QKV, attention, out-projection,
    /// residual), forward and backward, TPSP.
    Attention,
    /// A mixture-of-experts FFN block forward over `ep` expert-parallel ranks: the
    /// dispatch all-to-all, the grouped expert GEMMs (and the shared experts), the
    /// combine all-to-all.
    Moe,
}

impl Workload {
    pub const ALL: [Workload; 7] = [
        Workload::Mlp,
        Workload::AgGemm,
        Workload::GemmRs,
        Workload::Layer,
        Workload::Step,
        Workload::Attention,
        Workload::Moe,
    ];

    /// Built by the layer builder (simulator-only plans over tp × ulysses × dp ranks):
    /// `layer`, `step` and `attention`.
    pub fn is_layered(self) -> bool {
        matches!(self, Workload::Layer | Workload::Step | Workload::Attention)
    }

    pub fn name(self) -> &'static str {
        match self {
            Workload::AgGemm => "ag-gemm",
            Workload::GemmRs => "gemm-rs",
            Workload::Mlp => "mlp",
            Workload::Layer => "layer",
            Workload::Step => "step",
            Workload::Attention => "attention",
            Workload::Moe => "moe",
        }
    }

    pub fn parse(s: &str) -> Option<Workload> {
        Workload::ALL.into_iter().find(|w| w.name() == s)
    }

    /// Every workload's name, comma-separated (errors and help list them from here).
    pub fn names() -> String {
        Workload::ALL.map(Workload::name).join(", ")
    }
}

/// How a collective site is overlapped with its GEMM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Strategy {
    /// The whole collective, then the GEMM (AG), or the GEMM, then the collective (RS).
    Sequential,
    /// K chunks; each chunk's collective is a ring collective overlapped with the next
    /// chunk's GEMM (comm-first for AG, compute-first for RS).
    Chunked(u32),
    /// Flash-AG / Flash-RS: decomposed P2P around the ring, rank-adaptive order.
    Flash,
    /// Direct-to-owner exchanges (TransformerEngine ring-exchange, PyTorch async-TP):
    /// at step i a rank sends straight to rank r+1+i — its own shard (AG) or the partial
    /// it just computed for that owner (RS, own slice last, owners accumulate).
    Direct,
    /// The collective-permute loop of Wang et al. (ASPLOS 2023): the Flash schedules'
    /// ring steps, but each step is a loop iteration with a barrier — a step's permute
    /// and compute both wait for the previous step's.
    PermuteLoop,
    /// Query-split attention: the out-projection's Flash-RS behind the whole attention —
    /// the attention runs per query slice, each slice's partial out-projection right
    /// after it, so the reduce-scatter starts with the first slice. Causal slices differ
    /// in cost. At every other site it is `flash`.
    QuerySplit,
    /// Bulk overlap: each collective runs whole, overlapped only with GEMMs that do not
    /// depend on it — the backward's wgrads beside a dgrad's collective, and at the
    /// data-parallel site the bucketed overlap of each layer's gradient reduce-scatter
    /// with the backward of the layers before it (and its parameter all-gather
    /// prefetched a layer ahead). At a tensor-parallel site it is `sequential`.
    Bulk,
    /// Ulysses with its all-to-alls decomposed and overlapped: the pre-attention
    /// all-to-all sent block by block as the QKV GEMM produces them, the post-attention
    /// one chunk by chunk as the attention of each destination's query chunk finishes.
    /// At every tensor-parallel site it is `flash`.
    FlashA2a,
    /// The permute loop in both directions (Wang et al.'s bidirectional variant): each
    /// iteration moves one slice clockwise and one counter-clockwise, so the loop runs
    /// ⌈(N−1)/2⌉ iterations of two slices each; it pays off where each direction has
    /// links of its own (rings, tori), not through one switch port.
    PermuteLoopBidir,
    /// Flash for expert parallelism (workload `moe`): the dispatch decomposed into one
    /// P2P message per destination in rank-adaptive order, each source's expert GEMMs
    /// started as its tokens arrive and their outputs sent back (the combine) as soon as
    /// they are done; the shared experts first, the rank's own tokens last. `flash-ep:G`
    /// runs the experts once per G arrivals (fewer, larger grouped GEMMs: each reads
    /// every local expert's weights once, so per-source GEMMs of few rows are bound by
    /// HBM).
    FlashEp(u32),
}

impl Strategy {
    /// Every strategy's name (`chunked:K` for the chunked family), in the order help and
    /// errors list them.
    pub const NAMES: [&'static str; 10] = [
        "sequential",
        "chunked:K",
        "flash",
        "direct",
        "permute-loop",
        "permute-loop-bidir",
        "query-split",
        "bulk",
        "flash-a2a",
        "flash-ep[:G]",
    ];

    /// [`Strategy::NAMES`], comma-separated.
    pub fn names() -> String {
        Strategy::NAMES.join(", ")
    }

    pub fn parse(s: &str) -> Result<Strategy, String> {
        match s.trim() {
            "sequential" => Ok(Strategy::Sequential),
            "flash" => Ok(Strategy::Flash),
            "direct" => Ok(Strategy::Direct),
            "permute-loop" => Ok(Strategy::PermuteLoop),
            "permute-loop-bidir" => Ok(Strategy::PermuteLoopBidir),
            "query-split" => Ok(Strategy::QuerySplit),
            "bulk" => Ok(Strategy::Bulk),
            "flash-a2a" => Ok(Strategy::FlashA2a),
            "flash-ep" => Ok(Strategy::FlashEp(1)),
            other => {
                if let Some(g) = other.strip_prefix("flash-ep:") {
                    return match g.parse::<u32>() {
                        Ok(g) if g >= 1 => Ok(Strategy::FlashEp(g)),
                        _ => Err(format!(
                            "the group size in `{other}` must be a positive integer (e.g. flash-ep:2)"
                        )),
                    };
                }
                if let Some(k) = other.strip_prefix("chunked:") {
                    match k.parse::<u32>() {
                        Ok(k) if k >= 1 => Ok(Strategy::Chunked(k)),
                        _ => Err(format!(
                            "chunk count in `{other}` must be a positive integer (e.g. chunked:4)"
                        )),
                    }
                } else if other == "chunked" {
                    Err("`chunked` needs a chunk count, e.g. chunked:4".into())
                } else {
                    Err(format!(
                        "unknown strategy `{other}` (known: {})",
                        Strategy::names()
                    ))
                }
            }
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Strategy::Sequential => f.write_str("sequential"),
            Strategy::Chunked(k) => write!(f, "chunked:{k}"),
            Strategy::Flash => f.write_str("flash"),
            Strategy::Direct => f.write_str("direct"),
            Strategy::PermuteLoop => f.write_str("permute-loop"),
            Strategy::PermuteLoopBidir => f.write_str("permute-loop-bidir"),
            Strategy::QuerySplit => f.write_str("query-split"),
            Strategy::Bulk => f.write_str("bulk"),
            Strategy::FlashA2a => f.write_str("flash-a2a"),
            Strategy::FlashEp(1) => f.write_str("flash-ep"),
            Strategy::FlashEp(g) => write!(f, "flash-ep:{g}"),
        }
    }
}

/// Everything one simulation needs.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub name: String,
    pub model: Model,
    pub hardware: Hardware,
    pub parallel: Parallel,
    pub batch: u64,
    pub seq: u64,
    /// Micro-batches of `batch` sequences in a step (workload `step`).
    pub micro_batches: u64,
    pub dtype: DType,
    pub workload: Workload,
    pub strategies: Vec<Strategy>,
    /// Per-site strategies of a layer or step, overriding each run's strategy there:
    /// keys `qkv`, `proj`, `fc1`, `fc2`, `head` (both phases), or with a phase,
    /// `fwd.fc2`, `bwd.fc1` (see [`crate::strategy::layer::SITE_KEYS`]).
    pub site_strategies: std::collections::BTreeMap<String, Strategy>,
    /// How transfers move (decides whether they take SMs).
    pub transport: Transport,
    /// Model the slowdown of compute beside communication (when the profile has
    /// parameters for it).
    pub interference: bool,
    /// Activations the backward recomputes (memory; the recomputed forward is costed
    /// in step plans).
    pub recompute: Recompute,
    /// ZeRO stage of the data-parallel sharding of optimizer states (≥ 1), gradients
    /// (≥ 2) and weights (3), for the memory per GPU.
    pub zero: u8,
    /// The clocks the hardware's GPU figures are at (already applied to `hardware`).
    pub clocks: Clocks,
    /// Attention masks later keys (a decoder's causal mask); `false`: every query sees
    /// every key.
    pub causal: bool,
    /// Only the forward pass of a `layer` or `attention` workload.
    pub forward_only: bool,
    /// How a MoE block's router spreads tokens over the experts.
    pub routing: Routing,
}

/// The clocks a prediction assumes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Clocks {
    /// A rested GPU's, between short bursts (the profile's figures as `calibrate`
    /// measures them).
    #[default]
    Burst,
    /// A GPU held at its power limit's clocks, as in training (the profile's
    /// `gpu.sustained_gemm_slowdown` applied to the compute side).
    Sustained,
}

impl Clocks {
    /// What a scenario file or flag may say: these two, or `auto`.
    pub const NAMES: [&'static str; 3] = ["auto", "burst", "sustained"];

    pub fn name(self) -> &'static str {
        match self {
            Clocks::Burst => "burst",
            Clocks::Sustained => "sustained",
        }
    }

    /// `auto`: training's clocks (sustained) for the workloads a training step is made
    /// of (`layer`, `step`, `attention`, `moe`) where the GPU's profile gives the sustained figure; burst
    /// otherwise (the site workloads are what short validation runs time).
    pub fn auto(workload: Workload, gpu: &GpuSpec) -> Clocks {
        let training = workload.is_layered() || workload == Workload::Moe;
        if training && gpu.sustained_gemm_slowdown.is_some() {
            Clocks::Sustained
        } else {
            Clocks::Burst
        }
    }
}

impl Scenario {
    /// Tokens in the batch: the dimension TPSP shards and the collectives gather/scatter.
    pub fn tokens(&self) -> u64 {
        self.batch * self.seq
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strategy_round_trips() {
        for s in ["sequential", "chunked:4", "chunked:16", "flash"] {
            assert_eq!(Strategy::parse(s).unwrap().to_string(), s);
        }
    }

    #[test]
    fn strategy_errors_name_the_value() {
        assert!(Strategy::parse("flsh").unwrap_err().contains("flsh"));
        assert!(
            Strategy::parse("chunked:0")
                .unwrap_err()
                .contains("chunked:0")
        );
        assert!(
            Strategy::parse("chunked:x")
                .unwrap_err()
                .contains("chunked:x")
        );
        assert!(Strategy::parse("chunked").is_err());
    }

    #[test]
    fn dtype_sizes() {
        assert_eq!(DType::Bf16.bytes(), 2);
        assert_eq!(DType::parse("fp32"), Some(DType::Fp32));
        assert_eq!(DType::parse("int4"), None);
    }
}
