//! The `calibrate` use case: measure this machine's GPU and make a hardware profile the
//! simulator reads like any other (GEMM efficiency curve and launch cost fitted to a grid
//! of shapes; elementwise efficiency and launch cost from an add kernel; interference and
//! the sustained-clock slowdown), plus the raw measurements as JSON. A refit of saved
//! measurements needs no GPU.

use super::Error;
use super::run::RecordedRun;
use crate::config::files::{GemmPointFile, HardwareFile, InterferenceFile};
use crate::config::{self, PresetKind};
use crate::cost;
use crate::exec::gpu::{self, Calibration};
use crate::scenario::{DType, GpuSpec};
use std::path::PathBuf;

/// What to measure (or refit) and the profile to make.
#[derive(Debug, Clone)]
pub struct Request {
    /// Profile to start from (topology, links, peaks); its GPU numbers are replaced.
    pub base: String,
    /// Name of the profile.
    pub name: String,
    /// Where the profile goes (default: hardware-profiles/measured/<name>.toml).
    pub out: Option<PathBuf>,
    /// Refit these saved measurements instead of measuring.
    pub from: Option<PathBuf>,
    /// Also measure the GEMM shapes of these run directories' plans.
    pub shapes_from: Vec<PathBuf>,
    /// Timed repetitions per measurement.
    pub repeats: u32,
    /// Milliseconds of large GEMMs before each timed GEMM (0: a rested GPU).
    pub heat_ms: f64,
    /// With `heat_ms`: seconds of those GEMMs before the first measurement.
    pub warm_s: f64,
}

/// A profile made: its text, where it goes, and the measurements behind it.
pub struct Calibrated {
    /// The profile's comment header (how it was measured, what was found).
    pub header: String,
    /// The whole profile file: header and TOML.
    pub profile: String,
    pub path: PathBuf,
    /// `<name>.calibration.json` beside the profile and its text; `None` when the
    /// profile was refit from that very file.
    pub measurements: Option<(PathBuf, String)>,
    pub calibration: Calibration,
}

/// The bf16 GEMM shapes (m, n, k) of the plans of `run --out` directories, each
/// strategy of each as it ran (one rank's schedule when it was emulated), sorted.
/// Plans are rebuilt on `hardware` (the run's own profile may live on another machine;
/// shapes do not depend on it).
pub fn run_shapes(dirs: &[PathBuf], hardware: &str) -> Result<Vec<(u64, u64, u64)>, Error> {
    let mut out = std::collections::BTreeSet::new();
    for dir in dirs {
        let rec = RecordedRun::read(dir)?;
        let sc = rec.scenario(hardware, rec.file.scenario.interference)?;
        for label in rec.labels()? {
            let plan = rec.plan(&sc, &label)?;
            for o in &plan.ops {
                if let crate::plan::OpKind::Gemm {
                    m,
                    n,
                    k,
                    dtype: DType::Bf16,
                    ..
                } = o.kind
                {
                    out.insert((m, n, k));
                }
            }
        }
    }
    Ok(out.into_iter().collect())
}

/// The calibration grid: sizes chosen off the powers of two the default scenarios use, so
/// validation shapes are not calibration shapes.
pub fn grid() -> Vec<(u64, u64, u64)> {
    // m: token counts from a chunk of a small shard (96) to a 128k gathered sequence, every
    // power of two and three quarters of one (wave quantization changes fast in m); n, k:
    // the hidden/ffn widths of 1B–70B models, powers of two, their midpoints 1.5·2^k and
    // 1.25·2^k, where cuBLAS's tile choices change between powers of two: neighbours at
    // most 1.33× apart. Left out on purpose: the widths of the validation models
    // (1792, 3584, 4736, 7168, 9472, 14336, 18944 and their multiples by 2/tp).
    let ms = (7..=17).flat_map(|e| [1u64 << e, 3u64 << (e - 2)]);
    let nk = [
        1024u64, 1280, 1536, 2048, 2560, 3072, 3840, 4096, 5120, 6144, 8192, 10240, 12288, 16384,
    ];
    let mut v = Vec::new();
    for m in ms {
        for &n in &nk {
            for &k in &nk {
                // At most ~15 ms a GEMM (11 TFLOP), so a burst does not itself run into
                // the power limit; larger shapes take the ratio of their neighbours.
                if 2 * m * n * k <= 11_000_000_000_000 {
                    v.push((m, n, k));
                }
            }
        }
    }
    v
}

/// How the GEMM grid was timed, for the profile's header.
fn protocol_note(cal: &Calibration) -> String {
    format!("{}{}", clocks_note(cal), warm_note(cal))
}

/// The warm GEMM times in a line: how many shapes, and their warm/cold ratios.
fn warm_note(cal: &Calibration) -> String {
    let mut r: Vec<f64> = cal
        .gemms
        .iter()
        .filter_map(|g| g.warm_secs.map(|w| w / g.secs))
        .filter(|r| r.is_finite())
        .collect();
    if r.is_empty() {
        return "# No warm GEMM times (each shape again over the same B): partial GEMMs that \
                reuse their weight\n#   take their cold time.\n"
            .to_string();
    }
    r.sort_by(f64::total_cmp);
    let q = |p: f64| r[((r.len() - 1) as f64 * p).round() as usize];
    format!(
        "# Warm GEMM times (warm_us: each shape again at once over the same B, other rows of A) \
         for {n} shapes:\n#   warm/cold min {lo:.3}, p10 {p10:.3}, median {med:.3}, max {hi:.3}.\n",
        n = r.len(),
        lo = r[0],
        p10 = q(0.1),
        med = q(0.5),
        hi = r[r.len() - 1],
    )
}

fn clocks_note(cal: &Calibration) -> String {
    let sus = cal.gemm_sustained_s / cal.gemm_alone_s;
    if cal.heat_ms > 0.0 {
        format!(
            "# GEMMs were timed at sustained-load clocks: {heat} ms of 8192x8192x4096 GEMMs \
             before each\n#   (after {warm} s of them). 200 8192^3 GEMMs back to back take \
             {sus:.3}x a short burst's time each.\n",
            heat = cal.heat_ms,
            warm = cal.warm_s,
        )
    } else {
        let reference = reference_note(cal);
        format!(
            "# GEMMs were timed in short bursts on a rested GPU; under sustained load (200 \
             8192^3\n#   GEMMs back to back) one takes {sus:.3}x as long (the power limit \
             lowers clocks).\n{reference}"
        )
    }
}

/// The header's line on `gpu.sustained_reference_tflops`, where the profile writes it.
fn reference_note(cal: &Calibration) -> String {
    let Some(rate) = sustained_reference_tflops(cal) else {
        return String::new();
    };
    let sus = (cal.gemm_sustained_s / cal.gemm_alone_s).max(1.0);
    format!(
        "#   It ran at {rate:.0} TFLOP/s rested (gpu.sustained_reference_tflops): a GEMM that \
         runs at r\n#   slows by r / {r0:.0} TFLOP/s, from 1 up to {sus:.3} (its power grows \
         with its rate).\n",
        r0 = rate / sus,
    )
}

/// The rested TFLOP/s of the GEMM the sustained factor was measured on (8192³, alone),
/// when the profile gets a factor and its table was timed rested (a heated table is at
/// those clocks already).
fn sustained_reference_tflops(c: &Calibration) -> Option<f64> {
    let sus = c.gemm_sustained_s / c.gemm_alone_s;
    let rate = cost::gemm_flops(8192, 8192, 8192) / c.gemm_alone_s / 1e12;
    (sus.is_finite() && sus > 0.0 && c.heat_ms == 0.0 && rate.is_finite()).then_some(rate)
}

/// The fitted GEMM parameters and the fit's quality.
#[derive(Debug, Clone, PartialEq)]
pub struct Fit {
    pub efficiency: f64,
    pub k_half: f64,
    pub launch: f64,
    /// Tiles besides the base profile's that the model picks among.
    pub alt_tiles: Vec<(u64, u64)>,
    /// Per-SM load bandwidth, bytes/s.
    pub sm_load_bandwidth: f64,
    /// A split-K GEMM's extra cost, seconds.
    pub split_launch: f64,
    pub stream_k_overhead: f64,
    pub median_err: f64,
    pub worst_err: f64,
    /// The shape of the worst error (m, n, k) and its signed error (model − measured) /
    /// measured.
    pub worst_shape: (u64, u64, u64, f64),
    /// How many parameter sets the search evaluated.
    pub evaluations: usize,
}

impl Fit {
    /// `base` with this fit's analytic model on `c`'s GPU (no measured table).
    pub fn model(&self, base: &GpuSpec, c: &Calibration) -> GpuSpec {
        let mut g = base.clone();
        g.sm_count = c.sm_count.max(1) as u64;
        g.gemm.measured.clear();
        g.gemm.memory_efficiency = memory_efficiency(c, base);
        g.gemm.efficiency = self.efficiency;
        g.gemm.k_half = self.k_half;
        g.gemm.launch = self.launch;
        g.gemm.alt_tiles = self.alt_tiles.clone();
        g.gemm.sm_load_bandwidth = Some(self.sm_load_bandwidth);
        g.gemm.split_launch = self.split_launch;
        g.gemm.stream_k_overhead = Some(self.stream_k_overhead);
        g
    }
}

/// The fraction of HBM bandwidth a memory-bound GEMM reaches: the measured device copy's.
/// The fit takes it as the written profile does, so the errors it reports are the
/// profile's own.
fn memory_efficiency(c: &Calibration, gpu: &GpuSpec) -> f64 {
    (c.copy_bytes_per_s / gpu.hbm_bandwidth).clamp(0.05, 1.0)
}

/// Signed relative errors (model − measured) / measured over the measured GEMMs.
fn signed_errors(gpu: &GpuSpec, c: &Calibration) -> Vec<f64> {
    c.gemms
        .iter()
        .map(|g| {
            let p = cost::gemm_time(gpu, g.m, g.n, g.k, DType::Bf16).unwrap_or(f64::INFINITY);
            (p - g.secs) / g.secs
        })
        .collect()
}

fn median_worst(mut e: Vec<f64>) -> (f64, f64) {
    e.sort_by(f64::total_cmp);
    (e[e.len() / 2], e.last().copied().unwrap_or(0.0))
}

/// The fit's objective: the mean squared log error (relative errors weighed alike above
/// and below). Weighing the worst shape more was tried on the H200 grid and only moved the
/// search to worse minima of both the median and the worst error.
fn objective(gpu: &GpuSpec, c: &Calibration) -> f64 {
    let mut sum = 0.0;
    for g in &c.gemms {
        let p = cost::gemm_time(gpu, g.m, g.n, g.k, DType::Bf16).unwrap_or(f64::INFINITY);
        let l = (p / g.secs).ln();
        sum += if l.is_finite() { l * l } else { f64::INFINITY };
    }
    sum / c.gemms.len().max(1) as f64
}

/// The analytic GEMM model's parameters fitted to the measured GEMMs: efficiency,
/// k_half, launch, the per-SM load bandwidth, the split-K reduction's cost and the
/// stream-K overhead, with the base tile and its transpose and the half-width tile as
/// the library's choices. A pattern search (each parameter moved up and down by its
/// step while that helps, steps halved each round) from 12 starting points minimises
/// [`objective`]. Deterministic.
pub fn fit_gemm(base: &GpuSpec, c: &Calibration) -> Fit {
    let mut g = base.clone();
    g.sm_count = c.sm_count.max(1) as u64;
    g.gemm.memory_efficiency = memory_efficiency(c, base);
    // The fit is of the model alone; a base profile's own measured points would mask it.
    g.gemm.measured.clear();
    let (tm, tn) = (g.gemm.tile_m, g.gemm.tile_n);
    let mut alt = vec![(tn, tm), (tm.min(tn), tm.min(tn))];
    alt.retain(|&t| t != (tm, tn));
    alt.dedup();
    g.gemm.alt_tiles = alt.clone();
    // Parameters: efficiency, k_half, launch (s), SM load (B/s), split launch (s),
    // stream-K overhead; their lower and upper bounds and first steps.
    const LO: [f64; 6] = [0.3, 0.0, 0.0, 20e9, 0.0, 0.0];
    const HI: [f64; 6] = [1.0, 2000.0, 20e-6, 1000e9, 20e-6, 1.0];
    const STEP: [f64; 6] = [0.04, 64.0, 1e-6, 20e9, 1e-6, 0.08];
    let set = |g: &mut GpuSpec, v: &[f64; 6]| {
        g.gemm.efficiency = v[0];
        g.gemm.k_half = v[1];
        g.gemm.launch = v[2];
        g.gemm.sm_load_bandwidth = Some(v[3]);
        g.gemm.split_launch = v[4];
        g.gemm.stream_k_overhead = Some(v[5]);
    };
    let mut evaluations = 0;
    let mut eval = |v: &[f64; 6]| {
        evaluations += 1;
        let mut h = g.clone();
        set(&mut h, v);
        objective(&h, c)
    };
    let mut best = (f64::INFINITY, [0.0; 6]);
    let mut starts = Vec::new();
    for e in [0.75, 0.9] {
        for l in [60e9, 100e9, 200e9] {
            for sk in [0.05, 0.2] {
                starts.push([e, 250.0, 3e-6, l, 3e-6, sk]);
            }
        }
    }
    for start in starts {
        let mut v = start;
        let mut cur = eval(&v);
        let mut step = STEP;
        for _round in 0..10 {
            for i in 0..6 {
                for dir in [-1.0, 1.0] {
                    loop {
                        let mut w = v;
                        w[i] = (w[i] + dir * step[i]).clamp(LO[i], HI[i]);
                        if w[i] == v[i] {
                            break;
                        }
                        let l = eval(&w);
                        if l < cur {
                            (cur, v) = (l, w);
                        } else {
                            break;
                        }
                    }
                }
            }
            step.iter_mut().for_each(|s| *s /= 2.0);
        }
        if cur < best.0 {
            best = (cur, v);
        }
    }
    let v = best.1;
    set(&mut g, &v);
    let signed = signed_errors(&g, c);
    let (median_err, worst_err) = median_worst(signed.iter().map(|e| e.abs()).collect());
    let worst_shape = c
        .gemms
        .iter()
        .zip(&signed)
        .max_by(|a, b| a.1.abs().total_cmp(&b.1.abs()))
        .map_or((0, 0, 0, 0.0), |(p, e)| (p.m, p.n, p.k, *e));
    Fit {
        efficiency: v[0],
        k_half: v[1],
        launch: v[2],
        alt_tiles: alt,
        sm_load_bandwidth: v[3],
        split_launch: v[4],
        stream_k_overhead: v[5],
        median_err,
        worst_err,
        worst_shape,
        evaluations,
    }
}

/// The analytic model fitted on every other measured GEMM (in the calibration's order)
/// and its (median, worst) relative error on the others: how well it predicts shapes it
/// was not fitted to.
pub fn holdout_errors(base: &GpuSpec, c: &Calibration) -> (f64, f64) {
    let half = |keep: usize| {
        let mut h = c.clone();
        h.gemms = c.gemms.iter().skip(keep).step_by(2).cloned().collect();
        h
    };
    let (train, test) = (half(0), half(1));
    if train.gemms.is_empty() || test.gemms.is_empty() {
        return (0.0, 0.0);
    }
    let g = fit_gemm(base, &train).model(base, c);
    median_worst(signed_errors(&g, &test).iter().map(|e| e.abs()).collect())
}

/// The profile file for `c`, starting from `base`.
pub fn profile(
    base: &HardwareFile,
    base_gpu: &GpuSpec,
    c: &Calibration,
    name: &str,
) -> Result<(HardwareFile, Fit), Error> {
    let fit = fit_gemm(base_gpu, c);
    let mut f = base.clone();
    f.name = name.to_string();
    f.description = format!(
        "{} with GPU numbers measured by `flashoverlap calibrate` on {}",
        base.name, c.device
    );
    f.gpu.name = c.device.clone();
    f.gpu.sm_count = c.sm_count as i64;
    f.gpu.gemm.efficiency = fit.efficiency;
    f.gpu.gemm.k_half = fit.k_half;
    f.gpu.gemm.launch_us = fit.launch * 1e6;
    f.gpu.gemm.alt_tiles = fit
        .alt_tiles
        .iter()
        .map(|&(r, c)| [r as i64, c as i64])
        .collect();
    f.gpu.gemm.sm_load_gbps = Some(fit.sm_load_bandwidth / 1e9);
    f.gpu.gemm.split_launch_us = Some(fit.split_launch * 1e6);
    f.gpu.gemm.stream_k_overhead = Some(fit.stream_k_overhead);
    f.gpu.gemm.measured = c
        .gemms
        .iter()
        .map(|g| GemmPointFile {
            dtype: "bf16".into(),
            m: g.m as i64,
            n: g.n as i64,
            k: g.k as i64,
            us: g.secs * 1e6,
            warm_us: g.warm_secs.map(|w| w * 1e6),
        })
        .collect();
    let hbm = f.gpu.hbm_gbps * 1e9;
    f.gpu.gemm.memory_efficiency = memory_efficiency(c, base_gpu);
    f.gpu.elementwise.efficiency = (c.add_bytes_per_s / hbm).clamp(0.05, 1.0);
    f.gpu.elementwise.launch_us = c.launch_s * 1e6;
    let sus = c.gemm_sustained_s / c.gemm_alone_s;
    f.gpu.sustained_gemm_slowdown = (sus.is_finite() && sus > 0.0).then(|| sus.max(1.0));
    // A rested table's GEMMs that run slower than the factor's probe draw less power and
    // slow less (held-out H100 runs, results/h100-2026-12-08/README.md).
    f.gpu.sustained_reference_tflops = sustained_reference_tflops(c);
    // No attention kernel is measured: attention is taken to run at the rate of the
    // large GEMM (8192³, timed alone), unless the base profile says otherwise.
    if f.gpu.attention_efficiency.is_none() {
        f.gpu.attention_efficiency = large_gemm_efficiency(c, base_gpu);
    }
    // Interference as the engine models it: the GEMM beside a copy loop, the copy beside
    // the GEMM; the CTA counts of communication kernels stay the base profile's.
    let slow = |with: f64, alone: f64| {
        let r = with / alone;
        if r.is_finite() { r.max(1.0) } else { 1.0 }
    };
    let mut i = f.interference.clone().unwrap_or(InterferenceFile {
        comm_ctas_per_op: 8,
        max_comm_ctas: 32,
        gemm_slowdown_beside_transfer: 1.0,
        memory_op_slowdown_beside_gemm: 1.0,
        gemm_slowdown_beside_reduction: None,
        reduction_slowdown_beside_gemm: None,
        memory_ops_wait_for_gemm_sms: None,
    });
    i.gemm_slowdown_beside_transfer = slow(c.gemm_with_copy_s, c.gemm_alone_s);
    i.memory_op_slowdown_beside_gemm = slow(c.copy_with_gemm_s, c.copy_alone_s);
    // SM admission: the copy, issued beside the GEMM (which took the SMs first), ended
    // after the GEMM did although it alone is far shorter: it waited for the GEMM's SMs.
    // A copy engine, or a kernel that shares SMs, ends well inside the GEMM.
    i.memory_ops_wait_for_gemm_sms = Some(memory_ops_wait(c));
    // Reductions beside GEMMs: the parameters with which the simulator reproduces the
    // measured chain.
    if let Some(rc) = &c.reductions {
        let (g, a) = rc.slowdowns();
        i.gemm_slowdown_beside_reduction = Some(g);
        i.reduction_slowdown_beside_gemm = Some(a);
        f.interference = Some(i.clone());
        let hw = config::validate::hardware_from_file(name, f.clone()).map_err(Error::input)?;
        let (g, a) = rc.fit_slowdowns(&hw).map_err(Error::run)?;
        i.gemm_slowdown_beside_reduction = Some(g);
        i.reduction_slowdown_beside_gemm = Some(a);
    }
    f.interference = Some(i);
    if let Some(p) = c.p2p {
        // The executor's default transport is the copy engine: its bandwidth is the link's,
        // its small-message time the per-message latency beyond the link's own.
        f.topology.link_gbps = Some(p.copy_bytes_per_s / 1e9);
        let link_lat = f.topology.link_latency_us.unwrap_or(0.0);
        f.comm.message_latency_us = (p.copy_latency_s * 1e6 - link_lat).max(0.0);
    }
    Ok((f, fit))
}

/// The fraction of bf16 peak the calibration's large GEMM (8192³, alone) reached.
fn large_gemm_efficiency(c: &Calibration, gpu: &GpuSpec) -> Option<f64> {
    let peak = gpu.peak(DType::Bf16)?;
    let e = cost::gemm_flops(8192, 8192, 8192) / (c.gemm_alone_s * peak);
    (e.is_finite() && e > 0.0).then(|| e.min(1.0))
}

/// Whether the calibration's copy waited for the GEMM beside it to free SMs: it ended
/// after the GEMM although alone it takes less than the GEMM.
pub fn memory_ops_wait(c: &Calibration) -> bool {
    c.copy_alone_s < c.gemm_with_copy_s && c.copy_with_gemm_s > c.gemm_with_copy_s
}

pub fn run(a: &Request) -> Result<Calibrated, Error> {
    let base_src = config::resolve(PresetKind::Hardware, &a.base, None).map_err(Error::input)?;
    let base: HardwareFile = config::parse_toml(&base_src).map_err(Error::input)?;
    let base_hw = config::load_hardware(&a.base, None).map_err(Error::input)?;
    let (cal, how) = match &a.from {
        Some(p) => {
            let text = super::read_text(p, crate::io::MAX_DATA_BYTES)?;
            let c: Calibration = serde_json::from_str(&text)
                .map_err(|e| Error::input(super::FileError::new(p, e)))?;
            (c, format!("refit from {}", p.display()))
        }
        None => {
            let mut shapes = grid();
            let extra = run_shapes(&a.shapes_from, &a.base)?;
            let n_extra = extra.len();
            for sh in extra {
                if !shapes.contains(&sh) {
                    shapes.push(sh);
                }
            }
            (
                gpu::calibrate(
                    &shapes,
                    gpu::CalibrationProtocol {
                        repeats: a.repeats,
                        heat_ms: a.heat_ms,
                        warm_s: a.warm_s,
                    },
                )
                .map_err(Error::run)?,
                if a.shapes_from.is_empty() {
                    "measured".to_string()
                } else {
                    format!(
                        "measured, with the {n_extra} GEMM shapes of {} run directories",
                        a.shapes_from.len()
                    )
                },
            )
        }
    };
    if cal.gemms.is_empty() {
        return Err(Error::input("the calibration has no GEMM samples"));
    }
    let (file, fit) = profile(&base, &base_hw.gpu, &cal, &a.name)?;
    let holdout = holdout_errors(&base_hw.gpu, &cal);
    let out = a
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("hardware-profiles/measured/{}.toml", a.name)));
    let date = std::process::Command::new("date")
        .arg("-u")
        .arg("+%Y-%m-%d")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map_or_else(|| "unknown date".into(), |s| s.trim().to_string());
    let gemm_slow = cal.gemm_with_copy_s / cal.gemm_alone_s;
    let copy_slow = cal.copy_with_gemm_s / cal.copy_alone_s;
    let header = format!(
        "# Measured by `flashoverlap calibrate --base {base} --name {name}` ({how}), {date},\n\
         # on {dev} ({sms} SMs). Raw measurements: {name}.calibration.json beside this file.\n\
         # Analytic GEMM model (used where no measured shape is near) fitted over {n} bf16 shapes:\n\
         #   efficiency, k_half, launch_us, sm_load_gbps, split_launch_us and stream_k_overhead\n\
         #   (tiles {tiles}) by a pattern search ({evals} evaluations, 12 starts)\n\
         #   minimising the mean squared log error: median error {med:.1}%, worst {worst:.1}%\n\
         #   ({wm}x{wn}x{wk}: the model {dir} by {wabs:.1}%). Fitted on every other shape, the\n\
         #   other half: median {hmed:.1}%, worst {hworst:.1}%. The measured times are kept as\n\
         #   [[gpu.gemm.measured]]: the simulator interpolates their time per FLOP in\n\
         #   log-shape space, so these shapes predict exactly.\n\
         # memory_efficiency = D2D copy bandwidth {copy:.0} GB/s (read + write) / hbm_gbps.\n\
         # attention_efficiency = the 8192^3 GEMM's rate over peak (no attention kernel is timed).\n\
         # elementwise.efficiency = add kernel {add:.0} GB/s (2 reads + 1 write) / hbm_gbps;\n\
         #   elementwise.launch_us = back-to-back tiny kernels, {launch:.2} us each.\n\
         {protocol}\
         # Interference: an 8192^3 GEMM takes {gs:.3}x as long beside a copy loop\n\
         #   (interference.gemm_slowdown_beside_transfer); a 1 GiB copy takes {cs:.3}x\n\
         #   beside the GEMM (interference.memory_op_slowdown_beside_gemm).\n\
         {admission}",
        base = a.base,
        name = a.name,
        dev = cal.device,
        sms = cal.sm_count,
        n = cal.gemms.len(),
        med = fit.median_err * 100.0,
        worst = fit.worst_err * 100.0,
        tiles = std::iter::once((file.gpu.gemm.tile_m as u64, file.gpu.gemm.tile_n as u64))
            .chain(fit.alt_tiles.iter().copied())
            .map(|(r, c)| format!("{r}x{c}"))
            .collect::<Vec<_>>()
            .join(", "),
        evals = fit.evaluations,
        wm = fit.worst_shape.0,
        wn = fit.worst_shape.1,
        wk = fit.worst_shape.2,
        dir = if fit.worst_shape.3 < 0.0 {
            "under"
        } else {
            "over"
        },
        wabs = fit.worst_shape.3.abs() * 100.0,
        hmed = holdout.0 * 100.0,
        hworst = holdout.1 * 100.0,
        copy = cal.copy_bytes_per_s / 1e9,
        add = cal.add_bytes_per_s / 1e9,
        launch = cal.launch_s * 1e6,
        gs = gemm_slow,
        cs = copy_slow,
        protocol = protocol_note(&cal),
        admission = if memory_ops_wait(&cal) {
            format!(
                "# The copy ({ca:.0} us alone), issued as the GEMM ({ga:.0} us) started, ended \
                 {d:.0} us after it: it waited for\n#   the GEMM's SMs \
                 (interference.memory_ops_wait_for_gemm_sms = true).\n",
                ca = cal.copy_alone_s * 1e6,
                ga = cal.gemm_with_copy_s * 1e6,
                d = (cal.copy_with_gemm_s - cal.gemm_with_copy_s) * 1e6,
            )
        } else {
            "# The copy ran beside the GEMM (interference.memory_ops_wait_for_gemm_sms = \
             false).\n"
                .to_string()
        },
    );
    let header = match &cal.reductions {
        Some(rc) => {
            let i = file.interference.as_ref();
            let g = i
                .and_then(|i| i.gemm_slowdown_beside_reduction)
                .unwrap_or(1.0);
            let a = i
                .and_then(|i| i.reduction_slowdown_beside_gemm)
                .unwrap_or(1.0);
            let (m, n, k) = rc.chain_gemm;
            format!(
                "{header}# Reductions beside GEMMs (a reduce-scatter chain's compute side: 8 \
                 {m}x{n}x{k} GEMMs, the add of\n#   each output on a second stream after it): \
                 per GEMM {ga:.1} us alone, {gc:.1} us in the chain; per add\n#   {aa:.1} us \
                 alone, {ac:.1} us in the chain. The simulator reproduces that chain with a\n#   \
                 GEMM {g:.3}x slower while an add runs \
                 (interference.gemm_slowdown_beside_reduction) and an\n#   add {a:.3}x \
                 slower beside a running GEMM \
                 (interference.reduction_slowdown_beside_gemm).\n\
                 # An add on 8..96 CTAs of its own (GB/s): {sweep}.\n",
                ga = rc.gemm_alone_s * 1e6,
                gc = rc.gemm_in_chain_s * 1e6,
                aa = rc.add_alone_s * 1e6,
                ac = rc.add_in_chain_s * 1e6,
                sweep = rc
                    .sweep
                    .iter()
                    .map(|(c, b)| format!("{c}: {:.0}", b / 1e9))
                    .collect::<Vec<_>>()
                    .join(", "),
            )
        }
        None => header,
    };
    let header = match cal.p2p {
        Some(p) => format!(
            "{header}# GPU 0 -> GPU 1: copy engine {:.0} GB/s, {:.1} us for 16 B (link_gbps and \
             comm.message_latency_us);\n#   NCCL send/recv {:.0} GB/s, {:.1} us for 16 B; the \
             8192^3 GEMM takes {:.3}x beside NCCL sends.\n",
            p.copy_bytes_per_s / 1e9,
            p.copy_latency_s * 1e6,
            p.nccl_bytes_per_s / 1e9,
            p.nccl_latency_s * 1e6,
            p.gemm_with_nccl_s / cal.gemm_alone_s,
        ),
        None => format!(
            "{header}# One GPU: no point-to-point measurements; links as in the base profile.\n"
        ),
    };
    let body = toml::to_string(&file).map_err(|e| Error::run(e.to_string()))?;
    let json_path = out.with_file_name(format!("{}.calibration.json", a.name));
    let mut measurements = serde_json::to_string_pretty(&cal).expect("calibration serializes");
    measurements.push('\n');
    Ok(Calibrated {
        profile: format!("{header}{body}"),
        header,
        // A refit of the measurements beside the profile leaves them as they are.
        measurements: (a.from.as_deref() != Some(json_path.as_path()))
            .then_some((json_path, measurements)),
        path: out,
        calibration: cal,
    })
}

#[cfg(test)]
mod shapes_tests {
    use super::*;

    /// The shapes of a checked-in run: rank 0 of llama-3-8b's AG+GEMM at tp 8 over 9216
    /// tokens, sequential (one 9216-row GEMM) and chunked:4 (2304 rows), FC1 3584 wide
    /// (gated 2·14336/8), K = hidden 4096.
    #[test]
    fn run_directories_give_their_plans_gemm_shapes() {
        let dir = PathBuf::from("results/h200-2026-12-04/emu-none-llama-ag-gemm-tp8-b3");
        let shapes = run_shapes(&[dir], "h200-sxm-8").unwrap();
        assert!(shapes.contains(&(9216, 3584, 4096)), "{shapes:?}");
        assert!(shapes.contains(&(2304, 3584, 4096)), "{shapes:?}");
        assert!(
            shapes.iter().all(|s| grid().iter().all(|g| g != s)),
            "off the grid"
        );
        let e = run_shapes(&[PathBuf::from("no/such/run")], "h200-sxm-8").unwrap_err();
        assert!(format!("{e:?}").contains("run.json"), "{e:?}");
    }
}

#[cfg(test)]
mod fit_tests {
    use super::*;
    use crate::exec::gpu::GemmSample;

    /// The errors the fit reports (and the profile's header prints) are those of the model
    /// as the written profile runs it: the fit takes the measured copy's memory efficiency,
    /// as the profile does, not the base profile's. Memory-bound shapes (few rows, long K)
    /// on a GPU whose copy reaches half the base's assumed bandwidth tell the two apart.
    #[test]
    fn the_reported_errors_are_the_written_profiles() {
        let base_src = config::resolve(PresetKind::Hardware, "h200-sxm-8", None).unwrap();
        let base: HardwareFile = config::parse_toml(&base_src).unwrap();
        let base_gpu = config::load_hardware("h200-sxm-8", None).unwrap().gpu;
        let mut gemms = Vec::new();
        for (i, &(m, n, k)) in [
            (64, 8192, 8192),
            (128, 4096, 16384),
            (4096, 4096, 4096),
            (96, 16384, 4096),
            (8192, 8192, 2048),
            (256, 2048, 8192),
        ]
        .iter()
        .enumerate()
        {
            // Times that no parameter set meets exactly, so the errors are not zero.
            let bytes = 2.0 * (m * k + k * n + m * n) as f64;
            let secs = 6e-6 + bytes / 2.0e12 + 2.0 * (m * n * k) as f64 / 7e14;
            let secs = secs * (1.0 + 0.05 * (i % 3) as f64);
            gemms.push(GemmSample {
                m,
                n,
                k,
                secs,
                warm_secs: None,
            });
        }
        let c = Calibration {
            device: "Test GPU".into(),
            sm_count: 132,
            gemms,
            copy_bytes_per_s: 2.0e12,
            add_bytes_per_s: 2.0e12,
            launch_s: 4e-6,
            gemm_alone_s: 1e-3,
            gemm_with_copy_s: 1.01e-3,
            gemm_sustained_s: 0.0,
            p2p: None,
            heat_ms: 0.0,
            reductions: None,
            warm_s: 0.0,
            copy_alone_s: 5e-4,
            copy_with_gemm_s: 1.5e-3,
        };
        let (file, fit) = profile(&base, &base_gpu, &c, "t").unwrap();
        let mut gpu = config::validate::hardware_from_file("t.toml", file)
            .unwrap()
            .gpu;
        assert!((gpu.gemm.memory_efficiency - 2.0e12 / gpu.hbm_bandwidth).abs() < 1e-12);
        gpu.gemm.measured.clear();
        let (median, worst) =
            median_worst(signed_errors(&gpu, &c).iter().map(|e| e.abs()).collect());
        assert!(worst > 0.0);
        assert!((median - fit.median_err).abs() < 1e-9, "{median} {fit:?}");
        assert!((worst - fit.worst_err).abs() < 1e-9, "{worst} {fit:?}");
    }
}
