//! The GPU executor's adapter: lowers a Plan (with data flow) to a device program for
//! `flashoverlap-cuda`, runs it, and returns per-op measured times in the simulator's
//! schema. Without the `cuda` feature the same API exists and every entry point answers
//! [`GpuError::NotCompiled`].
//!
//! Transports ([`Transport`]): copy-engine transfers (the receiver pulls the sender's
//! region with a device or peer copy once the sender has posted it; the sender's launch
//! completes when the copy has), so a multi-rank plan runs on any number of GPUs of one
//! process — all ranks on one GPU included, which checks every strategy's data flow for
//! real; or NCCL send/recv, one GPU per rank, each transfer one NCCL group issued where
//! the copy would be (the send on a per-rank send stream that waits for the sender's
//! post event).

#[cfg(feature = "cuda")]
mod calibrate;
#[cfg(feature = "cuda")]
mod lower;
#[cfg(feature = "cuda")]
mod reference;

use crate::plan::{Plan, PlanError};
use crate::scenario::Workload;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GpuError {
    #[error(
        "this flashoverlap was built without the `cuda` feature; rebuild with \
         `cargo build --release --features cuda` to run on GPUs"
    )]
    NotCompiled,
    #[error("the plan has no data flow (buffers and regions), so it cannot run for real")]
    NoDataflow,
    #[error("the plan's dtype is {0}; the GPU executor runs bf16 only")]
    Dtype(crate::scenario::DType),
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error("GPU: {0}")]
    Cuda(String),
    #[error("repeats must be at least 1")]
    Repeats,
    #[error(
        "the NCCL transport needs one GPU per rank: the plan has {ranks} ranks, {devices} GPUs \
         are used (use --transport copy to run several ranks on one GPU)"
    )]
    NcclGpuPerRank { ranks: u32, devices: u32 },
    #[error("the run had not finished after {secs:.1} s (watchdog): {what}")]
    Hung { secs: f64, what: String },
}

/// This process's place in a multi-process run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessRank {
    pub rank: u32,
    pub world: u32,
    /// Local GPU ordinal.
    pub device: u32,
    /// NCCL unique id, the same in every process (see [`nccl_unique_id`]).
    pub id: [u8; 128],
}

/// A fresh NCCL unique id for a multi-process run (with `NCCL_COMM_ID=host:port` set,
/// NCCL derives it from that address, so every process can make its own).
pub fn nccl_unique_id() -> Result<[u8; 128], GpuError> {
    #[cfg(feature = "cuda")]
    {
        flashoverlap_cuda::nccl_unique_id().map_err(|e| GpuError::Cuda(e.to_string()))
    }
    #[cfg(not(feature = "cuda"))]
    {
        Err(GpuError::NotCompiled)
    }
}

pub use crate::scenario::Transport;

/// The hardware as the executor uses it, for predicting its runs: every transfer is a
/// launch of its own (no collective's steps fused into one kernel), so every message
/// pays the per-message latency.
pub fn as_executed(hw: &crate::scenario::Hardware) -> crate::scenario::Hardware {
    let mut hw = hw.clone();
    hw.comm.step_latency = hw.comm.message_latency;
    hw
}

/// How to run.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuOptions {
    /// GPUs to spread the ranks over (rank r on GPU r mod devices); `None`: all visible,
    /// at most one per rank.
    pub devices: Option<u32>,
    pub warmup: u32,
    pub repeats: u32,
    /// Compare every rank's result with the reference (needs `workload`).
    pub check: Option<Workload>,
    pub transport: Transport,
    /// Run one rank of the plan in this process (multi-process mode, NCCL transport):
    /// the other ranks run in other processes (or nodes) with the same plan.
    pub process: Option<ProcessRank>,
    /// Abort a run that has not finished after this many seconds, naming the op that
    /// waited; `None`: wait forever.
    pub watchdog: Option<f64>,
    /// Before every run (warm-up and timed), about this many milliseconds of large GEMMs
    /// on each GPU, untimed ([`HEATER`]); 0 (the default): none. See [`HEAT_MS`].
    pub heat_ms: f64,
}

/// Milliseconds of heater before every run and every calibration measurement unless asked
/// otherwise: none. A GPU under sustained load (as in training) runs at the clocks its
/// power limit allows: on the lent H200 at 700 W, ~1500 MHz against 1980 rested, an
/// 8192³ bf16 GEMM 1.15× as long. But the power controller averages over far more than a
/// run: on 2026-12-04 a calibration with 5 ms of heater before each GEMM sat at the cap
/// (~690 W, 1470–1545 MHz, throughout), while runs with the same 5 ms heater ran mostly at
/// 1900–1980 MHz between the host's pauses, 15–20% faster than that calibration said.
/// Rested (no heater) calibration and runs agree (`results/h200-2026-12-04b/`), so that
/// is the default; `--heat-ms` stays for runs that want a longer heater.
pub const HEAT_MS: f64 = 0.0;

/// The heater GEMM, (m, n, k) bf16, and its time on an H200 under load (ms): how many of
/// them make `heat_ms`.
pub const HEATER: ((u64, u64, u64), f64) = ((8192, 8192, 4096), 0.7);

/// Heater GEMMs for `ms` milliseconds (none for `ms` ≤ 0).
pub fn heater_gemms(ms: f64) -> u32 {
    if ms > 0.0 && ms.is_finite() {
        (ms / HEATER.1).ceil().min(100_000.0) as u32
    } else {
        0
    }
}

impl Default for GpuOptions {
    fn default() -> Self {
        GpuOptions {
            devices: None,
            warmup: 2,
            repeats: 5,
            check: None,
            transport: Transport::CopyEngine,
            process: None,
            watchdog: Some(60.0),
            heat_ms: HEAT_MS,
        }
    }
}

/// One measured run.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuRun {
    /// Per op, (start, end) in seconds from the run's start: the repetition with the
    /// median makespan.
    pub times: Vec<(f64, f64)>,
    /// Makespan of every timed repetition, seconds, in order.
    pub makespans: Vec<f64>,
    /// Worst relative Frobenius error of a rank's result against the reference, when
    /// checked (in a multi-process run, this process's rank only).
    pub rel_error: Option<f64>,
    pub devices: Vec<String>,
    /// Timed repetitions whose start gate opened by its timeout (the host took longer
    /// than the backend's `GATE_TIMEOUT` to issue the program): their first ops may have
    /// started while later ones were still being issued.
    pub gate_timeouts: u32,
}

/// Names of the visible GPUs (or why there are none).
pub fn devices() -> Result<Vec<String>, GpuError> {
    #[cfg(feature = "cuda")]
    {
        let d = flashoverlap_cuda::probe().map_err(|e| GpuError::Cuda(e.to_string()))?;
        Ok(d.into_iter()
            .map(|d| format!("{} ({} SMs)", d.name, d.sm_count))
            .collect())
    }
    #[cfg(not(feature = "cuda"))]
    {
        Err(GpuError::NotCompiled)
    }
}

/// Run `plan` on the GPUs.
pub fn run(plan: &Plan, opts: &GpuOptions) -> Result<GpuRun, GpuError> {
    if !plan.has_dataflow() {
        return Err(GpuError::NoDataflow);
    }
    if let Some(b) = plan
        .buffers
        .iter()
        .find(|b| b.dtype != crate::scenario::DType::Bf16)
    {
        return Err(GpuError::Dtype(b.dtype));
    }
    if opts.repeats == 0 {
        return Err(GpuError::Repeats);
    }
    plan.check_deadlock_free()?;
    #[cfg(feature = "cuda")]
    {
        lower::run(plan, opts)
    }
    #[cfg(not(feature = "cuda"))]
    {
        Err(GpuError::NotCompiled)
    }
}

/// One GEMM timed by `calibrate`.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GemmSample {
    pub m: u64,
    pub n: u64,
    pub k: u64,
    pub secs: f64,
}

/// Point-to-point transfers between GPU 0 and GPU 1, measured where two GPUs exist.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct P2pCalibration {
    /// Copy-engine peer copy of 256 MiB, bytes/s; and of 16 bytes, seconds.
    pub copy_bytes_per_s: f64,
    pub copy_latency_s: f64,
    /// NCCL send/recv (one group) of 256 MiB, bytes/s; and of 16 bytes, seconds.
    pub nccl_bytes_per_s: f64,
    pub nccl_latency_s: f64,
    /// The 8192³ GEMM on GPU 0 beside an NCCL send loop to GPU 1 (SM-driven transport).
    pub gemm_with_nccl_s: f64,
}

/// Reductions beside GEMMs, measured by `calibrate`: the compute side of a
/// reduce-scatter chain (partial GEMMs on one stream, the add of each on another after
/// it), and the bandwidth of an add on a few CTAs of its own.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ReductionCalibration {
    /// CTA counts (1024 threads each) with a 1 GiB-per-operand add's bandwidth on each
    /// (bytes read plus written per second).
    pub sweep: Vec<(u32, f64)>,
    /// The chain's GEMM (m, n, k); its adds are over its m×n output.
    pub chain_gemm: (u64, u64, u64),
    /// Per GEMM, alone and in the chain (beside the adds, counting the gaps where a GEMM
    /// waits for SMs); per add, alone and in the chain (beside the next GEMM).
    pub gemm_alone_s: f64,
    pub gemm_in_chain_s: f64,
    pub add_alone_s: f64,
    pub add_in_chain_s: f64,
}

impl ReductionCalibration {
    /// The interference parameters that reproduce the chain in the simulator's model: a
    /// GEMM is slowed only while an add runs beside it (a fraction φ of its time, the
    /// add's share of the step), so `gemm_slowdown_beside_reduction` = 1 + (chain/alone
    /// − 1)/φ; an add runs beside a GEMM throughout: `reduction_slowdown_beside_gemm` =
    /// chain/alone. Both at least 1.
    pub fn slowdowns(&self) -> (f64, f64) {
        let ok = |x: f64| if x.is_finite() { x.max(1.0) } else { 1.0 };
        let phi = (self.add_in_chain_s / self.gemm_in_chain_s).clamp(1e-3, 1.0);
        let g = 1.0 + (self.gemm_in_chain_s / self.gemm_alone_s - 1.0) / phi;
        (ok(g), ok(self.add_in_chain_s / self.add_alone_s))
    }
}

/// What `calibrate` measured on one GPU (bf16).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Calibration {
    pub device: String,
    pub sm_count: u32,
    pub gemms: Vec<GemmSample>,
    /// Device-to-device copy, bytes read plus written per second.
    pub copy_bytes_per_s: f64,
    /// `out = x + y`, bytes read plus written per second.
    pub add_bytes_per_s: f64,
    /// Per-kernel cost of back-to-back tiny kernels on one stream.
    pub launch_s: f64,
    /// An 8192³ GEMM alone and with a copy loop on a second stream.
    pub gemm_alone_s: f64,
    pub gemm_with_copy_s: f64,
    /// The same 8192³ GEMM, median of the last 16 of 200 back to back (a GPU under
    /// sustained load, lower clocks), against `gemm_alone_s` (short bursts).
    #[serde(default)]
    pub gemm_sustained_s: f64,
    /// Between GPUs 0 and 1, when the machine has two or more.
    #[serde(default)]
    pub p2p: Option<P2pCalibration>,
    /// The GEMM grid's protocol: milliseconds of heater before each timed GEMM (0: the
    /// GPU rested between GEMMs instead) and seconds of heater before the first.
    #[serde(default)]
    pub heat_ms: f64,
    /// Reductions beside GEMMs (absent in older calibrations).
    #[serde(default)]
    pub reductions: Option<ReductionCalibration>,
    #[serde(default)]
    pub warm_s: f64,
    /// A 1 GiB copy alone and beside that GEMM.
    pub copy_alone_s: f64,
    pub copy_with_gemm_s: f64,
}

/// How `calibrate` times GEMMs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CalibrationProtocol {
    pub repeats: u32,
    /// Heater before each timed GEMM, ms (0: rest instead, a rested GPU's clocks).
    pub heat_ms: f64,
    /// Heater before the first measurement, seconds (the GPU's temperature settles).
    pub warm_s: f64,
}

/// Measure GEMMs of `shapes` (m, n, k) and the rest of [`Calibration`] on GPU 0.
pub fn calibrate(
    shapes: &[(u64, u64, u64)],
    how: CalibrationProtocol,
) -> Result<Calibration, GpuError> {
    #[cfg(feature = "cuda")]
    {
        calibrate::calibrate(shapes, how)
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = (shapes, how);
        Err(GpuError::NotCompiled)
    }
}

/// Relative Frobenius error ‖out − ref‖ / ‖ref‖ in f64; NaN anywhere gives infinity.
pub fn rel_frobenius(out: &[f32], reference: &[f32]) -> f64 {
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (&o, &r) in out.iter().zip(reference) {
        if !o.is_finite() || !r.is_finite() {
            return f64::INFINITY;
        }
        let d = o as f64 - r as f64;
        num += d * d;
        den += r as f64 * r as f64;
    }
    if out.len() != reference.len() {
        return f64::INFINITY;
    }
    if den == 0.0 {
        return if num == 0.0 { 0.0 } else { f64::INFINITY };
    }
    (num / den).sqrt()
}

/// A stable 64-bit key for a buffer's random contents (FNV-1a of the name, and the rank
/// for rank-local data), shared by the lowering and the reference.
pub fn data_key(name: &str, rank: Option<u32>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |b: u8| {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    };
    for &b in name.as_bytes() {
        eat(b);
    }
    if let Some(r) = rank {
        eat(0xff);
        for b in r.to_le_bytes() {
            eat(b);
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frobenius_error_flags_nan_and_scales() {
        assert_eq!(rel_frobenius(&[1.0, 2.0], &[1.0, 2.0]), 0.0);
        assert!((rel_frobenius(&[1.1, 0.0], &[1.0, 0.0]) - 0.1).abs() < 1e-6);
        assert!(rel_frobenius(&[f32::NAN], &[1.0]).is_infinite());
        assert!(rel_frobenius(&[1.0], &[1.0, 2.0]).is_infinite());
    }

    #[test]
    fn reduction_slowdowns_reproduce_the_chain() {
        let rc = ReductionCalibration {
            sweep: vec![],
            chain_gemm: (4096, 4096, 2048),
            gemm_alone_s: 100e-6,
            gemm_in_chain_s: 110e-6,
            add_alone_s: 20e-6,
            add_in_chain_s: 55e-6,
        };
        let (g, a) = rc.slowdowns();
        // φ = 55/110 = 0.5: a GEMM 1.2x slower for half its time is 1.1x slower.
        assert!((g - 1.2).abs() < 1e-12, "{g}");
        assert!((a - 2.75).abs() < 1e-12, "{a}");
        // Faster in the chain than alone: no slowdown, not a speed-up.
        let fast = ReductionCalibration {
            gemm_in_chain_s: 90e-6,
            add_in_chain_s: 10e-6,
            ..rc
        };
        assert_eq!(fast.slowdowns(), (1.0, 1.0));
    }

    #[test]
    fn keys_differ_by_name_and_rank() {
        assert_ne!(data_key("x", None), data_key("x", Some(0)));
        assert_ne!(data_key("w_fc1", Some(0)), data_key("w_fc1", Some(1)));
        assert_eq!(data_key("x", None), data_key("x", None));
    }

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn without_the_feature_running_says_so() {
        assert_eq!(devices(), Err(GpuError::NotCompiled));
    }
}
