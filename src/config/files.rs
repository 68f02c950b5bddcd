//! File formats (TOML). These are what users write; `validate` turns them into the domain
//! types of [`crate::scenario`]. Unknown keys are errors, so a typo never passes silently.

use serde::{Deserialize, Serialize};

pub const VERSION: u32 = 1;

fn one() -> u32 {
    VERSION
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelFile {
    #[serde(default = "one")]
    pub version: u32,
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub hidden: i64,
    pub ffn: i64,
    pub heads: i64,
    pub kv_heads: Option<i64>,
    pub layers: i64,
    pub vocab: i64,
    #[serde(default = "default_activation")]
    pub activation: String,
    /// The LM head shares the embedding matrix (one vocab × hidden matrix, not two).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tie_embeddings: bool,
    /// A mixture of experts in place of the dense MLP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moe: Option<MoeFile>,
}

/// `[moe]` of a model file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MoeFile {
    /// Routed experts per MoE layer.
    pub experts: i64,
    /// Experts each token is routed to.
    pub top_k: i64,
    /// FFN width of one routed expert.
    pub expert_ffn: i64,
    /// Total FFN width of the shared experts (0: none).
    #[serde(default)]
    pub shared_ffn: i64,
    /// Leading layers with a dense MLP (`ffn` wide).
    #[serde(default)]
    pub dense_layers: i64,
}

fn default_activation() -> String {
    "gelu".into()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HardwareFile {
    #[serde(default = "one")]
    pub version: u32,
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub gpu: GpuFile,
    pub comm: CommFile,
    /// How communication slows compute on the same GPU; absent: not modelled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interference: Option<InterferenceFile>,
    /// Run-to-run jitter; absent: none stated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variability: Option<VariabilityFile>,
    pub topology: TopologyFile,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VariabilityFile {
    #[serde(default = "default_distribution")]
    pub distribution: String,
    #[serde(default)]
    pub compute_cv: f64,
    #[serde(default)]
    pub comm_cv: f64,
}

fn default_distribution() -> String {
    "lognormal".into()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InterferenceFile {
    pub comm_ctas_per_op: i64,
    pub max_comm_ctas: i64,
    #[serde(default = "one_f")]
    pub gemm_slowdown_beside_transfer: f64,
    #[serde(default = "one_f")]
    pub memory_op_slowdown_beside_gemm: f64,
    /// A GEMM's slowdown while an elementwise kernel on a communication stream of its GPU
    /// runs (the adds of a reduce-scatter chain beside its partial GEMMs); absent: 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gemm_slowdown_beside_reduction: Option<f64>,
    /// Such a kernel's slowdown beside a GEMM; absent: `memory_op_slowdown_beside_gemm`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reduction_slowdown_beside_gemm: Option<f64>,
    /// A memory-bound kernel on a communication stream (a reduction, a local copy) that
    /// becomes ready while a GEMM holds every SM waits for the GEMM's last, partial wave;
    /// absent: false (it runs beside the GEMM from the start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_ops_wait_for_gemm_sms: Option<bool>,
}

fn one_f() -> f64 {
    1.0
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuFile {
    pub name: String,
    pub sm_count: i64,
    /// GB/s (10⁹ bytes/s).
    pub hbm_gbps: f64,
    pub peak_tflops: PeakFile,
    pub gemm: GemmFile,
    pub elementwise: ElementwiseFile,
    /// How much longer a compute-bound GEMM takes on a GPU under sustained load (at its
    /// power limit's clocks) than in a short burst; written by `calibrate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sustained_gemm_slowdown: Option<f64>,
    /// TFLOP/s of the GEMM the slowdown was measured on, rested (written by `calibrate`):
    /// measured GEMMs slower than it slow less (see `GpuSpec::sustained_reference_flops`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sustained_reference_tflops: Option<f64>,
    /// Fraction of peak FLOP/s a fused attention kernel reaches (default: the GEMMs'
    /// `gemm.efficiency`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_efficiency: Option<f64>,
    /// Device memory, GiB (2^30 bytes), as `nvidia-smi` reports the total.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_gib: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeakFile {
    pub fp8: Option<f64>,
    pub bf16: Option<f64>,
    pub fp16: Option<f64>,
    pub fp32: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GemmFile {
    pub tile_m: i64,
    pub tile_n: i64,
    pub efficiency: f64,
    #[serde(default)]
    pub k_half: f64,
    pub memory_efficiency: f64,
    pub launch_us: f64,
    /// Other tiles `[[rows, cols], ...]` the GEMM library picks among (with `tile_m ×
    /// tile_n`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub alt_tiles: Vec<[i64; 2]>,
    /// GB/s one SM can load (bounds small tiles and under-filled grids).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_load_gbps: Option<f64>,
    /// Extra µs of a split-K GEMM (the reduction of its partial sums).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split_launch_us: Option<f64>,
    /// Stream-K for grids over one wave: the fix-up cost as a fraction of the work.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_k_overhead: Option<f64>,
    /// Measured GEMM times (`[[gpu.gemm.measured]]`), written by `flashoverlap calibrate`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub measured: Vec<GemmPointFile>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GemmPointFile {
    pub dtype: String,
    pub m: i64,
    pub n: i64,
    pub k: i64,
    pub us: f64,
    /// The same GEMM right after one that read the same B (see
    /// [`crate::scenario::GemmPoint::warm_secs`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warm_us: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ElementwiseFile {
    pub efficiency: f64,
    pub launch_us: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommFile {
    pub message_latency_us: f64,
    /// A later step of a one-kernel collective; default: `message_latency_us`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_latency_us: Option<f64>,
    /// How NCCL runs collectives on this machine (channels, its tables' generation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl: Option<NcclFile>,
}

/// `[comm.nccl]`: every key optional.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NcclFile {
    /// Compute capability × 10 of the GPUs (90: Hopper), selecting NCCL's tables.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm: Option<i64>,
    /// Ring/tree channels; default: what NCCL picks on the topology.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channels: Option<i64>,
    /// The most one channel moves, GB/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel_gbps: Option<f64>,
    /// `intel` or `amd` (NCCL's LL ceiling and network overhead across nodes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<String>,
}

/// One struct for every topology kind; which keys are required depends on `kind`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopologyFile {
    /// `nvswitch`, `ring`, `full-mesh`, `pcie-tree`, `rail-fat-tree`, `nccl-xml` or `custom`.
    pub kind: String,
    /// kind `nccl-xml`: the NCCL topology dump (relative to the profile's directory).
    pub file: Option<String>,
    /// The profile's directory (set by the loader, not read from TOML).
    #[serde(skip)]
    pub base_dir: Option<std::path::PathBuf>,
    pub gpus: Option<i64>,
    // nvswitch, ring, full-mesh
    pub link_gbps: Option<f64>,
    pub link_latency_us: Option<f64>,
    // pcie-tree
    pub sockets: Option<i64>,
    pub switches_per_socket: Option<i64>,
    pub gpu_link_gbps: Option<f64>,
    pub gpu_link_latency_us: Option<f64>,
    pub uplink_gbps: Option<f64>,
    pub uplink_latency_us: Option<f64>,
    pub socket_link_gbps: Option<f64>,
    pub socket_link_latency_us: Option<f64>,
    // rail-fat-tree
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus_per_node: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvlink_gbps: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvlink_latency_us: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nic_gbps: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nic_latency_us: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes_per_leaf: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oversubscription: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spine_latency_us: Option<f64>,
    // custom
    #[serde(default)]
    pub devices: Vec<DeviceFile>,
    #[serde(default)]
    pub links: Vec<LinkFile>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceFile {
    pub name: String,
    pub kind: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkFile {
    pub from: String,
    pub to: String,
    pub gbps: f64,
    #[serde(default)]
    pub latency_us: f64,
    /// Add the reverse direction too (default).
    #[serde(default = "yes")]
    pub bidirectional: bool,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioFile {
    #[serde(default = "one")]
    pub version: u32,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// A model preset name or a path (relative to this file).
    pub model: String,
    /// A hardware preset name or a path (relative to this file).
    pub hardware: String,
    #[serde(default = "default_workload")]
    pub workload: String,
    pub batch: i64,
    pub seq: i64,
    /// Micro-batches per step (workload `step`); default 1.
    #[serde(default = "one_i", skip_serializing_if = "is_one")]
    pub micro_batches: i64,
    #[serde(default = "default_dtype")]
    pub dtype: String,
    pub parallel: ParallelFile,
    pub strategies: Vec<String>,
    /// `[sites]`: per-site strategies of a layer or step (`fc2 = "chunked:4"`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub sites: std::collections::BTreeMap<String, String>,
    /// Node count of a multi-node (`rail-fat-tree`) hardware profile; default: the
    /// profile's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<i64>,
    /// `nccl` (send/recv kernels holding SMs) or `copy` (copy engines).
    #[serde(default = "default_transport")]
    pub transport: String,
    /// Model compute slowdown beside communication (where the profile gives parameters).
    #[serde(default = "yes")]
    pub interference: bool,
    /// Activation recomputation: `none`, `selective` or `full`.
    #[serde(default = "recompute_none", skip_serializing_if = "is_none_text")]
    pub recompute: String,
    /// ZeRO stage (0–3) of the data-parallel sharding, for the memory per GPU.
    #[serde(default = "zero_3", skip_serializing_if = "is_three")]
    pub zero: i64,
    /// GPU clocks to predict at: `auto` (sustained for layer and step workloads where the
    /// profile gives the figure, else burst), `burst` or `sustained`.
    #[serde(default = "clocks_auto", skip_serializing_if = "is_auto")]
    pub clocks: String,
    /// Causal attention (a decoder's mask); `false`: every query sees every key.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub causal: bool,
    /// `fwd-bwd` (default) or `fwd`: only the forward pass of a layer or attention block.
    #[serde(default = "fwd_bwd", skip_serializing_if = "is_fwd_bwd")]
    pub passes: String,
    /// How a MoE block's router spreads tokens: `uniform`, `zipf:S` or a load per
    /// expert-parallel rank (`4,1,1,1`).
    #[serde(default = "uniform", skip_serializing_if = "is_uniform")]
    pub routing: String,
}

fn uniform() -> String {
    "uniform".into()
}

fn is_uniform(v: &str) -> bool {
    v == "uniform"
}

fn is_true(v: &bool) -> bool {
    *v
}

fn fwd_bwd() -> String {
    "fwd-bwd".into()
}

fn is_fwd_bwd(v: &str) -> bool {
    v == "fwd-bwd"
}

fn clocks_auto() -> String {
    "auto".into()
}

fn is_auto(v: &str) -> bool {
    v == "auto"
}

fn recompute_none() -> String {
    "none".into()
}

fn is_none_text(v: &str) -> bool {
    v == "none"
}

fn zero_3() -> i64 {
    3
}

fn is_three(v: &i64) -> bool {
    *v == 3
}

fn is_one(v: &i64) -> bool {
    *v == 1
}

fn default_transport() -> String {
    "nccl".into()
}

fn default_workload() -> String {
    "mlp".into()
}
fn default_dtype() -> String {
    "bf16".into()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParallelFile {
    pub tp: i64,
    #[serde(default = "yes")]
    pub sp: bool,
    #[serde(default = "one_i")]
    pub dp: i64,
    #[serde(default = "one_i")]
    pub ulysses: i64,
    /// Pipeline stages (workload `step`).
    #[serde(default = "one_i", skip_serializing_if = "is_one")]
    pub pp: i64,
    /// `1f1b` (default), `interleaved:V` or `gpipe`.
    #[serde(default = "one_f_one_b", skip_serializing_if = "is_1f1b")]
    pub pp_schedule: String,
    /// `tp-inner` (default), `dp-inner` or `tp-pp-dp`: how ranks map onto GPUs.
    #[serde(default = "tp_inner")]
    pub order: String,
    /// Expert-parallel ranks (workload `moe`).
    #[serde(default = "one_i", skip_serializing_if = "is_one")]
    pub ep: i64,
}

fn one_f_one_b() -> String {
    "1f1b".into()
}

fn is_1f1b(v: &str) -> bool {
    v == "1f1b"
}

fn tp_inner() -> String {
    "tp-inner".into()
}

fn one_i() -> i64 {
    1
}
