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
    /// No GPU this process can use: the driver or a CUDA library missing, no device,
    /// fewer devices than the plan's ranks (the machine, not the run, is at fault).
    #[error("{0}")]
    Unavailable(String),
    #[error("the plan has no data flow (buffers and regions), so it cannot run for real")]
    NoDataflow,
    #[error("the plan's dtype is {0}; the GPU executor runs bf16 only")]
    Dtype(crate::scenario::DType),
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error(transparent)]
    Sim(#[from] crate::exec::sim::SimError),
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
        flashoverlap_cuda::nccl_unique_id().map_err(from_cuda)
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
    /// One rank on one GPU: time the back-to-back baseline too ([`GpuRun::back_to_back`]).
    pub back_to_back: bool,
    /// The sustained-load protocol: before the timed runs, run the schedule back to back
    /// until the GPUs' clocks settle under its own load; `None`: no settling (the burst
    /// protocol: the warm-up runs only).
    pub settle: Option<Settle>,
}

/// How long to hold a schedule in a steady loop before timing it (the sustained regime):
/// at least `min_s` seconds, then until the median makespan of the last `window_s`
/// seconds of runs is within `tolerance` of the window's before, at most `max_s`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settle {
    pub min_s: f64,
    pub max_s: f64,
    pub window_s: f64,
    pub tolerance: f64,
}

impl Default for Settle {
    fn default() -> Settle {
        Settle {
            min_s: 5.0,
            max_s: 60.0,
            window_s: 1.0,
            tolerance: 0.005,
        }
    }
}

/// What settling did: how long it ran, how many runs, whether the makespan settled
/// within the tolerance (or the time ran out), and the median makespan of its first and
/// last window (seconds), the drift from a rested GPU to a settled one.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Settled {
    pub seconds: f64,
    pub runs: u32,
    pub converged: bool,
    pub first_window_makespan_s: f64,
    pub last_window_makespan_s: f64,
}

/// Decide from the (time since start, makespan) of the runs so far whether the loop has
/// settled: `Some(converged)` to stop, `None` to go on.
pub fn settle_done(runs: &[(f64, f64)], s: &Settle) -> Option<bool> {
    let &(now, _) = runs.last()?;
    if now >= s.max_s {
        return Some(false);
    }
    if now < s.min_s.max(2.0 * s.window_s) {
        return None;
    }
    let last = window_median(runs, now - s.window_s, now)?;
    let before = window_median(runs, now - 2.0 * s.window_s, now - s.window_s)?;
    ((last / before - 1.0).abs() <= s.tolerance).then_some(true)
}

/// The record of a settling loop from its runs (time since start, makespan).
pub fn settled(runs: &[(f64, f64)], s: &Settle, converged: bool) -> Settled {
    let end = runs.last().map_or(0.0, |r| r.0);
    let median = |lo: f64, hi: f64| window_median(runs, lo, hi).unwrap_or(f64::NAN);
    Settled {
        seconds: end,
        runs: runs.len() as u32,
        converged,
        first_window_makespan_s: median(f64::NEG_INFINITY, s.window_s),
        last_window_makespan_s: median(end - s.window_s, end),
    }
}

/// The median makespan of the runs that ended in (`lo`, `hi`] seconds.
fn window_median(runs: &[(f64, f64)], lo: f64, hi: f64) -> Option<f64> {
    let mut v: Vec<f64> = runs
        .iter()
        .filter(|r| r.0 > lo && r.0 <= hi)
        .map(|r| r.1)
        .collect();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied()
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
            back_to_back: false,
            settle: None,
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
    /// One rank on one GPU: the median time of the same kernels issued back to back on
    /// one stream with no per-op events or waits (the baseline of the executor's
    /// overhead), seconds.
    pub back_to_back: Option<f64>,
    /// The settling loop before the timed runs, when the protocol asked for one.
    pub settled: Option<Settled>,
}

impl GpuError {
    /// Whether the machine cannot run GPU work at all (exit 4), as opposed to a run that
    /// failed on it.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, GpuError::NotCompiled | GpuError::Unavailable(_))
    }
}

/// A CUDA backend error as a [`GpuError`]: a missing library or GPU is
/// [`GpuError::Unavailable`].
#[cfg(feature = "cuda")]
pub(crate) fn from_cuda(e: flashoverlap_cuda::CudaError) -> GpuError {
    use flashoverlap_cuda::CudaError as C;
    match e {
        C::MissingLibrary { .. } | C::NoGpu(_) | C::TooFewGpus { .. } => {
            GpuError::Unavailable(e.to_string())
        }
        e => GpuError::Cuda(e.to_string()),
    }
}

/// Names of the visible GPUs (or why there are none).
pub fn devices() -> Result<Vec<String>, GpuError> {
    #[cfg(feature = "cuda")]
    {
        let d = flashoverlap_cuda::probe().map_err(from_cuda)?;
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
    /// Timed cold: operands evicted from L2 before it.
    pub secs: f64,
    /// The same shape at once after it, over the same B (the weight) and other rows of
    /// A: what a decomposed site's later partial GEMMs take (absent in calibrations
    /// before 2026-12-07).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warm_secs: Option<f64>,
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

    /// The (`gemm_slowdown_beside_reduction`, `reduction_slowdown_beside_gemm`) with which
    /// the simulator, on `hw` (its interference parameters otherwise as they are),
    /// reproduces the chain's measured slowdowns: the same chain planned and simulated,
    /// per GEMM and per add measured as `calibrate` measures them, each against its own
    /// simulated time alone. Found by a grid search over each slowdown's range (1 to
    /// `MAX_GEMM_SLOWDOWN`, 1 to `MAX_REDUCTION_SLOWDOWN`), refined twice around the
    /// best point. Without SM admission it lands near [`Self::slowdowns`], which assumes
    /// every add runs beside a GEMM throughout.
    pub fn fit_slowdowns(&self, hw: &crate::scenario::Hardware) -> Result<(f64, f64), GpuError> {
        use crate::exec::sim::SimError;
        let Some(base) = hw.interference.clone() else {
            return Ok(self.slowdowns());
        };
        let with = chain_plan(self.chain_gemm, CHAIN_STEPS, true)?;
        let alone = chain_plan(self.chain_gemm, CHAIN_STEPS, false)?;
        let measure = |g: f64, a: f64, adds: bool| {
            chain_times(hw, &base, g, a, if adds { &with } else { &alone })
        };
        let gemm_alone = measure(1.0, 1.0, false)?.0;
        let (m, n, _) = self.chain_gemm;
        let add_alone = crate::cost::elementwise_time(
            &hw.gpu,
            crate::cost::add_traffic(m.saturating_mul(n).saturating_mul(2)),
        );
        let target_g = gemm_alone * self.gemm_in_chain_s / self.gemm_alone_s;
        let target_a = add_alone * self.add_in_chain_s / self.add_alone_s;
        if !(target_g.is_finite() && target_a.is_finite()) {
            return Ok(self.slowdowns());
        }
        // A grid search (the chain's times need not be monotone in either parameter: an
        // add that ends later can start its successor past a GEMM's full waves), then a
        // finer one around the best point; ties go to the smaller slowdowns.
        let err = |g: f64, a: f64| -> Result<f64, SimError> {
            let (pg, pa) = measure(g, a, true)?;
            Ok(((pg - target_g) / target_g).powi(2) + ((pa - target_a) / target_a).powi(2))
        };
        let mut best = (f64::INFINITY, 1.0, 1.0);
        let (mut g_lo, mut g_hi, mut a_lo, mut a_hi) =
            (1.0, MAX_GEMM_SLOWDOWN, 1.0, MAX_REDUCTION_SLOWDOWN);
        for _ in 0..3 {
            for i in 0..=24 {
                let g = g_lo + (g_hi - g_lo) * i as f64 / 24.0;
                for j in 0..=24 {
                    let a = a_lo + (a_hi - a_lo) * j as f64 / 24.0;
                    let e = err(g, a)?;
                    if e < best.0 - 1e-12 {
                        best = (e, g, a);
                    }
                }
            }
            let (dg, da) = ((g_hi - g_lo) / 12.0, (a_hi - a_lo) / 12.0);
            g_lo = (best.1 - dg).max(1.0);
            g_hi = (best.1 + dg).min(MAX_GEMM_SLOWDOWN);
            a_lo = (best.2 - da).max(1.0);
            a_hi = (best.2 + da).min(MAX_REDUCTION_SLOWDOWN);
        }
        let (_, g, a) = best;
        Ok((g, a))
    }
}

/// The chain `plan` simulated on `hw` with `params` but the two reduction slowdowns `g`,
/// `a`: per GEMM (second start to last end over the steps between) and per add (mean of
/// all but the last; 0 without adds), as `calibrate` measures them.
fn chain_times(
    hw: &crate::scenario::Hardware,
    params: &crate::scenario::InterferenceParams,
    g: f64,
    a: f64,
    (plan, gs, ads): &ChainPlan,
) -> Result<(f64, f64), crate::exec::sim::SimError> {
    let mut params = params.clone();
    params.gemm_slowdown_beside_reduction = g;
    params.reduction_slowdown_beside_gemm = a;
    let opts = crate::exec::sim::SimOptions {
        interference: Some(crate::exec::sim::Interference {
            params,
            transport: crate::scenario::Transport::CopyEngine,
        }),
        ..Default::default()
    };
    let r = crate::exec::sim::simulate(plan, hw, &opts)?;
    let t = |op: crate::plan::OpId| r.times[op as usize];
    let n = gs.len();
    let per_gemm = (t(gs[n - 1]).end - t(gs[1]).start) / (n - 1) as f64;
    let per_add = if ads.len() == n {
        ads[..n - 1]
            .iter()
            .map(|&x| t(x).end - t(x).start)
            .sum::<f64>()
            / (n - 1) as f64
    } else {
        0.0
    };
    Ok((per_gemm, per_add))
}

/// Steps of the reduction chain `calibrate` times.
pub const CHAIN_STEPS: usize = 8;
const MAX_REDUCTION_SLOWDOWN: f64 = 20.0;
const MAX_GEMM_SLOWDOWN: f64 = 3.0;

/// A chain plan with its GEMM ops and its add ops.
type ChainPlan = (Plan, Vec<crate::plan::OpId>, Vec<crate::plan::OpId>);

/// The chain `calibrate` times, as a one-rank plan: `steps` GEMMs of `shape` on a compute
/// stream and, with `adds`, after each the add of its output on a communication stream.
fn chain_plan(
    (m, n, k): (u64, u64, u64),
    steps: usize,
    adds: bool,
) -> Result<ChainPlan, PlanError> {
    use crate::plan::{EltKind, OpKind, OpTag, PlanBuilder, StreamKind};
    let mut b = PlanBuilder::new(1).without_dataflow();
    b.site("chain");
    let c = b.stream(0, "compute", StreamKind::Compute);
    let s = b.stream(0, "reduce", StreamKind::Comm);
    let (mut gs, mut ads) = (Vec::new(), Vec::new());
    for step in 0..steps {
        let t = OpTag {
            site: 0,
            step: step as u32,
            slice: 0,
        };
        let gemm = OpKind::gemm(m, n, k, crate::scenario::DType::Bf16);
        let g = b.single(c, gemm, &[], t)?;
        gs.push(g);
        if adds {
            let add = OpKind::Elementwise {
                kind: EltKind::Add,
                bytes: crate::cost::add_traffic(m.saturating_mul(n).saturating_mul(2)),
            };
            ads.push(b.single(s, add, &[g], t)?);
        }
    }
    Ok((b.finish()?, gs, ads))
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

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn without_the_feature_running_says_so() {
        assert_eq!(devices(), Err(GpuError::NotCompiled));
    }
}

#[cfg(test)]
mod chain_tests {
    use super::*;

    /// A chain simulated with known slowdowns, taken as a measurement: the fitted
    /// slowdowns reproduce its per-GEMM and per-add times (the parameters themselves need
    /// not come back: with SM admission an add's time in the chain is nearly the GEMM
    /// period whatever its slowdown).
    #[test]
    fn fitted_reduction_slowdowns_reproduce_the_chain() {
        let mut hw = crate::config::load_hardware("h200-sxm-8", None).unwrap();
        for admission in [false, true] {
            let base = hw.interference.as_mut().unwrap();
            base.memory_ops_wait_for_gemm_sms = admission;
            let base = base.clone();
            let shape = (4096, 4096, 2048);
            let with = chain_plan(shape, CHAIN_STEPS, true).unwrap();
            let alone = chain_plan(shape, CHAIN_STEPS, false).unwrap();
            let (g_alone, _) = chain_times(&hw, &base, 1.0, 1.0, &alone).unwrap();
            let (g_in, a_in) = chain_times(&hw, &base, 1.3, 4.0, &with).unwrap();
            let add_alone =
                crate::cost::elementwise_time(&hw.gpu, crate::cost::add_traffic(4096 * 4096 * 2));
            assert!(
                g_in > 1.02 * g_alone && a_in > 1.5 * add_alone,
                "{g_in} {a_in}"
            );
            let rc = ReductionCalibration {
                sweep: Vec::new(),
                chain_gemm: shape,
                gemm_alone_s: g_alone,
                gemm_in_chain_s: g_in,
                add_alone_s: add_alone,
                add_in_chain_s: a_in,
            };
            let (g, a) = rc.fit_slowdowns(&hw).unwrap();
            let (fg, fa) = chain_times(&hw, &base, g, a, &with).unwrap();
            assert!(
                (fg / g_in - 1.0).abs() < 0.005,
                "{admission}: GEMM {fg} vs {g_in} ({g}, {a})"
            );
            assert!(
                (fa / a_in - 1.0).abs() < 0.01,
                "{admission}: add {fa} vs {a_in} ({g}, {a})"
            );
            if !admission {
                // Without admission the times are monotone in each slowdown: they come back.
                assert!(
                    (g - 1.3).abs() < 0.02 && (a - 4.0).abs() < 0.1,
                    "({g}, {a})"
                );
            }
        }
    }
}

#[cfg(test)]
mod settle_tests {
    use super::*;

    /// Runs every 10 ms whose makespan drifts from 1.00 ms (rested) to 1.15 ms over the
    /// first 8 s (the power limit's clocks setting in), then holds.
    fn drifting(until: f64) -> Vec<(f64, f64)> {
        (1..)
            .map(|i| i as f64 * 0.01)
            .take_while(|t| *t <= until)
            .map(|t| (t, 1e-3 * (1.0 + 0.15 * (t / 8.0).min(1.0))))
            .collect()
    }

    #[test]
    fn the_loop_runs_until_the_makespan_stops_drifting() {
        let s = Settle::default();
        // While drifting (1.9% per second), never settled; once flat for two windows, done.
        let first = (1..=1500)
            .map(|n| drifting(n as f64 * 0.01))
            .position(|r| settle_done(&r, &s).is_some())
            .map(|i| (i + 1) as f64 * 0.01)
            .unwrap();
        assert!(first > 8.0 && first < 10.5, "{first}");
        let runs = drifting(first);
        let rec = settled(&runs, &s, true);
        assert!(
            (rec.first_window_makespan_s / 1.01e-3 - 1.0).abs() < 0.01,
            "{rec:?}"
        );
        assert!(
            (rec.last_window_makespan_s / 1.15e-3 - 1.0).abs() < 1e-9,
            "{rec:?}"
        );
        // A flat loop still runs the minimum; a loop that never settles stops at the
        // maximum, unconverged.
        let flat: Vec<(f64, f64)> = (1..=600).map(|i| (i as f64 * 0.01, 1e-3)).collect();
        assert_eq!(settle_done(&flat[..400], &s), None);
        assert_eq!(settle_done(&flat, &s), Some(true));
        let noisy: Vec<(f64, f64)> = (1..=6100)
            .map(|i| {
                (
                    i as f64 * 0.01,
                    1e-3 * (1.0 + 0.05 * ((i / 100) % 2) as f64),
                )
            })
            .collect();
        assert_eq!(settle_done(&noisy, &s), Some(false));
        assert_eq!(settle_done(&[], &s), None);
    }
}
