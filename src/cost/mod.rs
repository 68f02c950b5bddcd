//! The cost model: pure functions from shapes and hardware parameters to seconds.
//! No state, no I/O; the engine calls these once per op.

pub mod nccl;

use crate::scenario::{DType, GemmPoint, GpuSpec};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CostError {
    #[error("GPU `{gpu}` has no peak FLOP/s for dtype {dtype} in its profile")]
    NoPeak { gpu: String, dtype: DType },
}

/// FLOPs of an (m × k) · (k × n) GEMM.
pub fn gemm_flops(m: u64, n: u64, k: u64) -> f64 {
    2.0 * m as f64 * n as f64 * k as f64
}

/// Breakdown of a GEMM's predicted time, for reports and tests.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GemmCost {
    pub tiles: u64,
    /// Work units (tiles × split-K parts), one CTA each.
    pub units: u64,
    pub waves: u64,
    pub compute: f64,
    pub memory: f64,
    /// Measured/model ratio applied to the model's time (1 without measured points).
    pub correction: f64,
    pub total: f64,
}

/// Time of an (m × k) · (k × n) GEMM on one GPU.
///
/// The output is cut into `tile_m × tile_n` tiles, one CTA per SM at a time, so the kernel
/// runs `waves = ⌈tiles / SMs⌉` waves (a GEMM with fewer tiles than SMs may split K
/// instead, see `model_cost_on`) and each wave costs one full tile's FLOPs at the
/// per-SM peak (a partial last wave costs as much as a full one: wave quantization; padded
/// edge tiles cost a full tile). The achieved fraction of peak is `efficiency ·
/// k / (k + k_half)` (short K-loops pay prologue/epilogue). The memory side moves A, B and
/// C once at `memory_efficiency` of HBM bandwidth; the kernel takes the larger of the two
/// (a roofline) plus a fixed launch cost. Any zero dimension is a no-op (0 s).
///
/// When the profile carries measured GEMMs of this dtype (`gpu.gemm.measured`), they
/// decide the time: the measured time per FLOP is interpolated as a geometric mean of the
/// points' weighted by `1 / d⁴`, with `d` the distance in (ln m, ln n, ln k), times this
/// GEMM's FLOPs. A measured shape predicts its measured time exactly and shapes between
/// measured ones get a smooth blend. `correction` reports the result as a ratio to the
/// model's own time.
/// Peak FLOP/s of `gpu` in `dtype`, or the error that it has none.
fn peak(gpu: &GpuSpec, dtype: DType) -> Result<f64, CostError> {
    gpu.peak(dtype).ok_or_else(|| CostError::NoPeak {
        gpu: gpu.name.clone(),
        dtype,
    })
}

pub fn gemm_cost(
    gpu: &GpuSpec,
    m: u64,
    n: u64,
    k: u64,
    dtype: DType,
) -> Result<GemmCost, CostError> {
    grouped_gemm_cost(gpu, 1, m, n, k, dtype)
}

/// [`gemm_cost`] of `groups` problems of one shape in one kernel (see
/// [`grouped_gemm_time`]); the measured/model ratio is one problem's.
fn grouped_gemm_cost(
    gpu: &GpuSpec,
    groups: u64,
    m: u64,
    n: u64,
    k: u64,
    dtype: DType,
) -> Result<GemmCost, CostError> {
    let peak = peak(gpu, dtype)?;
    let mut c = model_cost_on(gpu, gpu.sm_count, peak, groups, m, n, k, dtype);
    if c.total > 0.0 && !gpu.gemm.measured.is_empty() {
        let (correction, exact) = measured_correction(gpu, peak, m, n, k, dtype);
        c.correction = correction;
        // Interpolated time per FLOP carried far below the measured shapes would give a
        // tiny GEMM less than a launch: no GEMM but a measured one beats its launch plus
        // the roofline.
        let g = groups as f64;
        let bytes = g
            * (m as f64 * k as f64 + k as f64 * n as f64 + m as f64 * n as f64)
            * dtype.bytes() as f64;
        let floor = if exact {
            0.0
        } else {
            gpu.gemm.launch
                + (g * gemm_flops(m, n, k) / peak)
                    .max(bytes / (gpu.hbm_bandwidth * gpu.gemm.memory_efficiency))
        };
        let total = (c.total * c.correction).max(floor);
        c.correction = total / c.total;
        c.total = total;
    }
    Ok(c)
}

fn model_cost(gpu: &GpuSpec, peak: f64, m: u64, n: u64, k: u64, dtype: DType) -> GemmCost {
    model_cost_on(gpu, gpu.sm_count, peak, 1, m, n, k, dtype)
}

/// Time of a grouped GEMM: `groups` problems of (m × k) · (k × n) in one kernel (a MoE
/// layer's experts, each with its own weights). Their tiles are scheduled together over
/// the SMs in waves (a grouped kernel's persistent tile scheduler: a small expert's
/// partial wave is filled by the next expert's tiles, the last wave of all is partial),
/// each problem's A, B and C through HBM once, one launch; no split-K or stream-K. With
/// measured GEMMs, the measured/model ratio at one problem's shape scales it, above the
/// launch + roofline floor (as [`gemm_cost`]). `groups` ≤ 1 is [`gemm_time`].
pub fn grouped_gemm_time(
    gpu: &GpuSpec,
    groups: u64,
    m: u64,
    n: u64,
    k: u64,
    dtype: DType,
) -> Result<f64, CostError> {
    grouped_gemm_cost(gpu, groups.max(1), m, n, k, dtype).map(|c| c.total)
}

/// How many times longer a GEMM takes when only `sms` of the GPU's SMs are free for it
/// (the others held by communication kernels): the model's time on `sms` SMs over its
/// time on all of them. Each SM keeps its own rate; what changes is the number of waves,
/// so a GEMM of exactly one wave that loses a single SM needs two. 1 when nothing is
/// lost; `sms` is clamped to 1 ..= the SM count.
pub fn gemm_sm_slowdown(
    gpu: &GpuSpec,
    m: u64,
    n: u64,
    k: u64,
    dtype: DType,
    sms: u64,
) -> Result<f64, CostError> {
    grouped_gemm_sm_slowdown(gpu, 1, m, n, k, dtype, sms)
}

/// [`gemm_sm_slowdown`] of a grouped GEMM (see [`grouped_gemm_time`]).
pub fn grouped_gemm_sm_slowdown(
    gpu: &GpuSpec,
    groups: u64,
    m: u64,
    n: u64,
    k: u64,
    dtype: DType,
    sms: u64,
) -> Result<f64, CostError> {
    let peak = peak(gpu, dtype)?;
    let all = gpu.sm_count.max(1);
    let sms = sms.clamp(1, all);
    if sms == all {
        return Ok(1.0);
    }
    let full = model_cost_on(gpu, all, peak, groups, m, n, k, dtype).total;
    if full <= 0.0 {
        return Ok(1.0);
    }
    Ok(model_cost_on(gpu, sms, peak, groups, m, n, k, dtype).total / full)
}

/// The fraction of a GEMM's time spent in its last wave when that wave leaves SMs idle
/// (fewer work units than SMs left for it): from then on another kernel can get SMs. 0
/// when every wave fills the GPU (SMs free up only as the GEMM ends); 1 when even the
/// first wave leaves SMs idle.
pub fn gemm_partial_tail(
    gpu: &GpuSpec,
    m: u64,
    n: u64,
    k: u64,
    dtype: DType,
) -> Result<f64, CostError> {
    grouped_gemm_partial_tail(gpu, 1, m, n, k, dtype)
}

/// [`gemm_partial_tail`] of a grouped GEMM (see [`grouped_gemm_time`]).
pub fn grouped_gemm_partial_tail(
    gpu: &GpuSpec,
    groups: u64,
    m: u64,
    n: u64,
    k: u64,
    dtype: DType,
) -> Result<f64, CostError> {
    let c = model_cost_on(gpu, gpu.sm_count, peak(gpu, dtype)?, groups, m, n, k, dtype);
    let sms = gpu.sm_count.max(1);
    Ok(if c.waves == 0 || c.units % sms == 0 {
        0.0
    } else {
        1.0 / c.waves as f64
    })
}

#[allow(clippy::too_many_arguments)]
fn model_cost_on(
    gpu: &GpuSpec,
    sms: u64,
    peak: f64,
    groups: u64,
    m: u64,
    n: u64,
    k: u64,
    dtype: DType,
) -> GemmCost {
    if m == 0 || n == 0 || k == 0 || groups == 0 {
        return GemmCost {
            tiles: 0,
            units: 0,
            waves: 0,
            compute: 0.0,
            memory: 0.0,
            correction: 1.0,
            total: 0.0,
        };
    }
    let p = &gpu.gemm;
    let mut best: Option<GemmCost> = None;
    for (tm, tn) in std::iter::once((p.tile_m, p.tile_n)).chain(p.alt_tiles.iter().copied()) {
        let c = tile_cost(gpu, sms, peak, groups, m, n, k, dtype, tm, tn);
        if best.is_none_or(|b| c.total < b.total) {
            best = Some(c);
        }
    }
    best.expect("at least the profile's tile")
}

/// [`model_cost_on`] with one output tile `tm × tn`.
///
/// Each work unit (a tile, or a K-part of one) runs on one SM at the per-SM peak times
/// the efficiency of its K-loop, `efficiency · kf / (kf + k_half)`, or — with
/// `sm_load_bandwidth` — no faster than the SM can load its A and B slabs
/// (`(tm + tn) · kf` elements). Three schedules, the fastest taken (the library's
/// heuristic picks near the best):
/// - whole waves of tiles, `⌈tiles / SMs⌉` of them (wave quantization);
/// - split-K on an under-filled GPU: K cut into `split` parts so `tiles · split` units
///   fill the SMs; the fp32 partial sums are written and read back (8 B per element per
///   part) and the reduction costs `split_launch`;
/// - stream-K on a grid of more than one wave (`stream_k_overhead`): the K-iterations of
///   all tiles spread evenly, `tiles / SMs` tiles' work per SM, that much more for the
///   fix-up of shared tiles.
///
/// A, B and C move through HBM at least once at `memory_efficiency` (a roofline); a launch
/// is added.
#[allow(clippy::too_many_arguments)]
fn tile_cost(
    gpu: &GpuSpec,
    sms: u64,
    peak: f64,
    groups: u64,
    m: u64,
    n: u64,
    k: u64,
    dtype: DType,
    tm: u64,
    tn: u64,
) -> GemmCost {
    let p = &gpu.gemm;
    let sms = sms.max(1);
    let tiles = m
        .div_ceil(tm)
        .saturating_mul(n.div_ceil(tn))
        .saturating_mul(groups);
    let per_sm = peak / gpu.sm_count.max(1) as f64;
    let elt = dtype.bytes() as f64;
    let base_bytes =
        groups as f64 * (m as f64 * k as f64 + k as f64 * n as f64 + m as f64 * n as f64) * elt;
    let bw = gpu.hbm_bandwidth * p.memory_efficiency;
    // One unit's time over a K-loop of `kf`.
    let unit = |kf: f64| {
        let eff = p.efficiency * kf / (kf + p.k_half);
        let compute = 2.0 * tm as f64 * tn as f64 * kf / (per_sm * eff);
        match p.sm_load_bandwidth {
            Some(l) => compute.max((tm + tn) as f64 * kf * elt / l),
            None => compute,
        }
    };
    let max_split = if groups > 1 {
        1
    } else {
        (sms / tiles.max(1)).min(k / MIN_SPLIT_K).max(1)
    };
    let mut best: Option<GemmCost> = None;
    for split in 1..=max_split {
        let units = tiles.saturating_mul(split);
        let waves = units.div_ceil(sms);
        let kf = k.div_ceil(split) as f64;
        let compute = waves as f64 * unit(kf);
        let partials = if split > 1 {
            8.0 * split as f64 * m as f64 * n as f64
        } else {
            0.0
        };
        let memory = (base_bytes + partials) / bw;
        let extra = if split > 1 { p.split_launch } else { 0.0 };
        let c = GemmCost {
            tiles,
            units,
            waves,
            compute,
            memory,
            correction: 1.0,
            total: p.launch + extra + compute.max(memory),
        };
        if best.is_none_or(|b| c.total < b.total) {
            best = Some(c);
        }
    }
    let mut best = best.expect("at least split 1");
    if let Some(over) = p.stream_k_overhead
        && groups == 1
        && tiles > sms
        && tiles % sms != 0
    {
        let compute = tiles as f64 / sms as f64 * unit(k as f64) * (1.0 + over);
        let memory = base_bytes / bw;
        let total = p.launch + compute.max(memory);
        if total < best.total {
            best = GemmCost {
                tiles,
                units: sms,
                waves: tiles.div_ceil(sms),
                compute,
                memory,
                correction: 1.0,
                total,
            };
        }
    }
    best
}

/// The shortest K a split-K part gets (a part shorter than this runs mostly prologue).
const MIN_SPLIT_K: u64 = 256;

/// Where a shape falls among the profile's measured GEMMs of its dtype.
enum Near<'a> {
    /// It is one of them.
    At(&'a GemmPoint),
    /// Between them: the interpolated value.
    Between(f64),
}

/// A positive quantity of the measured GEMMs (`value`; `None` skips a point)
/// interpolated at (m, n, k): the geometric mean of the points' values weighted by
/// `1 / d⁴`, `d` the distance in (ln m, ln n, ln k); a measured shape is itself.
/// `None` when no point has a value.
fn near<'a>(
    gpu: &'a GpuSpec,
    dtype: DType,
    (m, n, k): (u64, u64, u64),
    value: impl Fn(&GemmPoint) -> Option<f64>,
) -> Option<Near<'a>> {
    let at = [m as f64, n as f64, k as f64].map(f64::ln);
    let (mut num, mut den) = (0.0, 0.0);
    for p in gpu.gemm.measured.iter().filter(|p| p.dtype == dtype) {
        let Some(v) = value(p) else { continue };
        let d2: f64 = [p.m as f64, p.n as f64, p.k as f64]
            .map(f64::ln)
            .iter()
            .zip(at)
            .map(|(a, b)| (a - b) * (a - b))
            .sum();
        if d2 < 1e-18 {
            return Some(Near::At(p));
        }
        let w = 1.0 / (d2 * d2);
        num += w * v.ln();
        den += w;
    }
    (den > 0.0).then(|| Near::Between((num / den).exp()))
}

/// The measured/model ratio at this shape, and whether it is a measured shape itself.
fn measured_correction(
    gpu: &GpuSpec,
    peak: f64,
    m: u64,
    n: u64,
    k: u64,
    dtype: DType,
) -> (f64, bool) {
    // What is interpolated is the measured time per FLOP: smooth in shape, where the
    // ratio to the model jumps wherever the model's waves do and cuBLAS's tile choices
    // do not (off-grid GEMM errors up to 45% that way, 18% this way).
    let per_flop = |p: &GemmPoint| {
        (!p.secs.is_nan() && p.secs > 0.0).then(|| p.secs / gemm_flops(p.m, p.n, p.k))
    };
    let model = || model_cost(gpu, peak, m, n, k, dtype).total;
    match near(gpu, dtype, (m, n, k), per_flop) {
        Some(Near::At(p)) => (p.secs / model(), true),
        Some(Near::Between(t)) => (t * gemm_flops(m, n, k) / model(), false),
        None => (1.0, false),
    }
}

/// Time of a GEMM, seconds. See [`gemm_cost`].
pub fn gemm_time(gpu: &GpuSpec, m: u64, n: u64, k: u64, dtype: DType) -> Result<f64, CostError> {
    gemm_cost(gpu, m, n, k, dtype).map(|c| c.total)
}

/// Time of a GEMM issued right after one that read the same B (a decomposed site's
/// later partial GEMMs over their rank's weight), seconds: [`gemm_time`] times the
/// warm/cold ratio the profile measured (`warm_secs` over `secs` of its measured GEMMs),
/// interpolated like their time per FLOP (its log, weighted by `1 / d⁴` in log-shape
/// space; a measured shape gets its own ratio). The ratio is at most 1 (a warm L2
/// never slows a GEMM; measured ratios above it are noise) and the result never below
/// a launch plus the FLOPs at peak. Without warm measurements it is [`gemm_time`]: a
/// profile that did not measure the effect does not guess it.
pub fn gemm_time_warm(
    gpu: &GpuSpec,
    m: u64,
    n: u64,
    k: u64,
    dtype: DType,
) -> Result<f64, CostError> {
    let cold = gemm_time(gpu, m, n, k, dtype)?;
    let Some(r) = warm_ratio(gpu, m, n, k, dtype) else {
        return Ok(cold);
    };
    let floor = gpu.gemm.launch + gemm_flops(m, n, k) / peak(gpu, dtype)?;
    Ok((cold * r.min(1.0)).max(floor.min(cold)))
}

/// The measured warm/cold time ratio at this shape (see [`gemm_time_warm`]); `None`
/// when no measured GEMM of `dtype` has a warm time.
fn warm_ratio(gpu: &GpuSpec, m: u64, n: u64, k: u64, dtype: DType) -> Option<f64> {
    let ratio = |p: &GemmPoint| {
        let w = p.warm_secs?;
        (p.secs > 0.0 && w > 0.0).then(|| w / p.secs)
    };
    match near(gpu, dtype, (m, n, k), ratio)? {
        Near::At(p) => ratio(p),
        Near::Between(r) => Some(r),
    }
}

/// Query–key pairs one head of an attention kernel computes: `seq_q × seq_kv`, or with a
/// causal mask (queries are the last `seq_q` of `seq_kv` positions) the pairs with key ≤
/// query: `seq_q·(seq_kv − seq_q) + seq_q·(seq_q + 1)/2` (a full square: s(s+1)/2).
pub fn attention_pairs(seq_q: u32, seq_kv: u32, causal: bool) -> f64 {
    let (q, kv) = (seq_q as f64, seq_kv.max(seq_q) as f64);
    if causal {
        q * (kv - q) + q * (q + 1.0) / 2.0
    } else {
        q * kv
    }
}

/// One fused (flash) attention kernel over `bh` (batch × local heads) independent heads:
/// `seq_q` queries against `seq_kv` keys of `head_dim`; with `causal`, the queries are
/// the last `seq_q` positions and see only keys up to their own. `backward`: the
/// gradient kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attention {
    pub bh: u64,
    pub seq_q: u32,
    pub seq_kv: u32,
    pub head_dim: u32,
    pub causal: bool,
    pub backward: bool,
    pub dtype: DType,
}

impl Attention {
    /// FLOPs: forward 4·d per pair and head (S = QKᵀ and O = PV); backward 2.5× that
    /// (dV, dP, dQ, dK plus recomputing S), the FlashAttention-2 count.
    pub fn flops(&self) -> f64 {
        let f = 4.0
            * self.head_dim as f64
            * attention_pairs(self.seq_q, self.seq_kv, self.causal)
            * self.bh as f64;
        if self.backward { 2.5 * f } else { f }
    }

    /// HBM traffic: Q, K, V read and O written once (backward: also dO, dQ, dK, dV); the
    /// score matrix never leaves the SMs.
    pub fn bytes(&self) -> f64 {
        let elems =
            self.bh as f64 * self.head_dim as f64 * 2.0 * (self.seq_q as f64 + self.seq_kv as f64);
        elems * self.dtype.bytes() as f64 * if self.backward { 2.0 } else { 1.0 }
    }
}

/// Time of a fused attention kernel: its FLOPs at the profile's attention efficiency
/// (`gpu.attention_efficiency`; without one, the GEMMs' efficiency: an assumption that
/// FlashAttention-2/3 kernels reach about the large-GEMM rate on Hopper) or its HBM
/// traffic at the memory-bound GEMM rate, whichever is longer, plus a launch.
pub fn attention_time(gpu: &GpuSpec, a: &Attention) -> Result<f64, CostError> {
    let peak = peak(gpu, a.dtype)?;
    let flops = a.flops();
    if flops == 0.0 {
        return Ok(0.0);
    }
    let eff = gpu.attention_efficiency.unwrap_or(gpu.gemm.efficiency);
    let compute = flops / (peak * eff);
    let memory = a.bytes() / (gpu.hbm_bandwidth * gpu.gemm.memory_efficiency);
    Ok(gpu.gemm.launch + compute.max(memory))
}

/// Time of a memory-bound elementwise kernel that moves `bytes` through HBM (reads plus
/// writes). Zero bytes is a no-op.
pub fn elementwise_time(gpu: &GpuSpec, bytes: u64) -> f64 {
    if bytes == 0 {
        return 0.0;
    }
    gpu.elementwise.launch + bytes as f64 / (gpu.hbm_bandwidth * gpu.elementwise.efficiency)
}

/// HBM traffic of `out = a + b` on tensors of `bytes` each: two reads, one write.
pub fn add_traffic(bytes: u64) -> u64 {
    bytes.saturating_mul(3)
}

/// Time of one α–β message: fixed latency `alpha` plus `bytes` at `bandwidth`.
pub fn message_time(alpha: f64, bandwidth: f64, bytes: u64) -> f64 {
    alpha + bytes as f64 / bandwidth
}

/// A ring all-gather or reduce-scatter of a `bytes`-sized (full, gathered) tensor over `n`
/// ranks as one collective kernel, with no contention: the first step pays `alpha`, the
/// n − 2 later ones `alpha_step`, and every step moves `bytes / n` at `β`:
/// `α + (n − 2) · α_step + (n − 1) · bytes / (n · β)`. With `α_step = α` this is the
/// textbook `(n − 1) · (α + bytes / (n · β))`.
pub fn ring_collective_time(
    n: u64,
    alpha: f64,
    alpha_step: f64,
    bandwidth: f64,
    bytes: u64,
) -> f64 {
    if n <= 1 {
        return 0.0;
    }
    alpha + (n - 2) as f64 * alpha_step + (n - 1) as f64 * bytes as f64 / (n as f64 * bandwidth)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::{ElementwiseParams, GemmParams, GemmPoint};

    fn gpu() -> GpuSpec {
        GpuSpec {
            name: "t".into(),
            sm_count: 132,
            hbm_bandwidth: 3.35e12,
            peak_flops: [None, Some(989e12), Some(989e12), Some(67e12)],
            gemm: GemmParams {
                tile_m: 128,
                tile_n: 256,
                efficiency: 0.8,
                k_half: 0.0,
                memory_efficiency: 0.9,
                launch: 0.0,
                alt_tiles: Vec::new(),
                sm_load_bandwidth: None,
                split_launch: 0.0,
                stream_k_overhead: None,
                measured: Vec::new(),
            },
            sustained_gemm_slowdown: None,
            sustained_reference_flops: None,
            attention_efficiency: None,
            memory: None,
            elementwise: ElementwiseParams {
                efficiency: 0.9,
                launch: 0.0,
            },
        }
    }

    #[test]
    fn a_partial_last_wave_frees_sms_for_its_share_of_the_time() {
        let g = gpu();
        // 132 tiles of 128×256: one full wave, no SM idle until the end.
        assert_eq!(
            gemm_partial_tail(&g, 128 * 12, 256 * 11, 4096, DType::Bf16).unwrap(),
            0.0
        );
        // 133 tiles: the second of two waves holds one SM.
        let t = gemm_partial_tail(&g, 133 * 128, 256, 4096, DType::Bf16).unwrap();
        assert_eq!(t, 0.5);
        // 7680 × 3584: 60 × 14 = 840 tiles, 6.36 waves → 7, the seventh partial.
        let t = gemm_partial_tail(&g, 7680, 3584, 4096, DType::Bf16).unwrap();
        assert!((t - 1.0 / 7.0).abs() < 1e-12, "{t}");
        assert_eq!(
            gemm_partial_tail(&g, 0, 3584, 4096, DType::Bf16).unwrap(),
            0.0
        );
    }

    #[test]
    fn one_wave_and_a_tile_more_is_two_waves() {
        let g = gpu();
        // 132 tiles of 128×256 = exactly one wave.
        let one = gemm_cost(&g, 128 * 12, 256 * 11, 8192, DType::Bf16).unwrap();
        assert_eq!((one.tiles, one.waves), (132, 1));
        let two = gemm_cost(&g, 128 * 12 + 1, 256 * 11, 8192, DType::Bf16).unwrap();
        assert_eq!(two.waves, 2);
        assert!((two.compute / one.compute - 2.0).abs() < 1e-12);
    }

    #[test]
    fn large_gemm_approaches_efficiency_times_peak() {
        let g = gpu();
        let (m, n, k) = (128 * 132, 256 * 8, 16384);
        let t = gemm_time(&g, m, n, k, DType::Bf16).unwrap();
        let achieved = gemm_flops(m, n, k) / t;
        assert!((achieved / (0.8 * 989e12) - 1.0).abs() < 1e-9);
    }

    /// At sustained clocks a compute-bound GEMM (and attention) takes the factor longer,
    /// a measured one exactly the factor; HBM-bound work does not change.
    #[test]
    fn sustained_clocks_slow_the_compute_side_only() {
        let mut g = gpu();
        assert_eq!(g.at_sustained_clocks(), None);
        g.sustained_gemm_slowdown = Some(1.25);
        let s = g.at_sustained_clocks().unwrap();
        let bf = DType::Bf16;
        let (big, big_s) = (
            gemm_cost(&g, 8192, 8192, 8192, bf).unwrap(),
            gemm_cost(&s, 8192, 8192, 8192, bf).unwrap(),
        );
        assert!(big.compute > big.memory);
        let launch = g.gemm.launch;
        assert!(((big_s.total - launch) / (big.total - launch) - 1.25).abs() < 1e-9);
        // A memory-bound GEMM (m = 1) keeps its time.
        let (thin, thin_s) = (
            gemm_time(&g, 1, 8192, 8192, bf).unwrap(),
            gemm_time(&s, 1, 8192, 8192, bf).unwrap(),
        );
        assert_eq!(thin, thin_s);
        assert_eq!(elementwise_time(&g, 1 << 30), elementwise_time(&s, 1 << 30));
        // Measured GEMMs: exactly the factor, on and between the points.
        g.gemm.measured = vec![
            GemmPoint {
                dtype: bf,
                m: 4096,
                n: 4096,
                k: 4096,
                secs: 200e-6,
                warm_secs: None,
            },
            GemmPoint {
                dtype: bf,
                m: 8192,
                n: 4096,
                k: 4096,
                secs: 390e-6,
                warm_secs: None,
            },
        ];
        let s = g.at_sustained_clocks().unwrap();
        for m in [4096, 6000, 8192] {
            let (a, b) = (
                gemm_time(&g, m, 4096, 4096, bf).unwrap(),
                gemm_time(&s, m, 4096, 4096, bf).unwrap(),
            );
            assert!((b / a - 1.25).abs() < 1e-9, "m {m}: {a} {b}");
        }
        // Applying it twice does nothing more.
        assert_eq!(s.at_sustained_clocks().unwrap().gemm, s.gemm);
    }

    /// With the reference rate given, a measured GEMM slows by its own rested rate over
    /// `reference / factor`: not at all below it, the full factor at the reference rate
    /// and above, linearly between; its warm time by the same factor.
    #[test]
    fn sustained_slowdown_follows_each_measured_gemms_rate() {
        let mut g = gpu();
        g.sustained_gemm_slowdown = Some(1.25);
        g.sustained_reference_flops = Some(800e12);
        let bf = DType::Bf16;
        let pt = |m: u64, tflops: f64| {
            let secs = 2.0 * (m * 4096 * 4096) as f64 / (tflops * 1e12);
            GemmPoint {
                dtype: bf,
                m,
                n: 4096,
                k: 4096,
                secs,
                warm_secs: Some(0.9 * secs),
            }
        };
        // r0 = 800 / 1.25 = 640 TFLOP/s.
        g.gemm.measured = vec![
            pt(512, 500.0),
            pt(1024, 720.0),
            pt(2048, 800.0),
            pt(4096, 900.0),
        ];
        let s = g.at_sustained_clocks().unwrap();
        for (p, q, want) in [
            (0, 0, 1.0),
            (1, 1, 720.0 / 640.0),
            (2, 2, 1.25),
            (3, 3, 1.25),
        ] {
            let (a, b) = (&g.gemm.measured[p], &s.gemm.measured[q]);
            assert!((b.secs / a.secs - want).abs() < 1e-12, "point {p}");
            let (wa, wb) = (a.warm_secs.unwrap(), b.warm_secs.unwrap());
            assert!((wb / wa - want).abs() < 1e-12, "point {p} warm");
        }
        // Without the reference every point takes the full factor.
        g.sustained_reference_flops = None;
        let u = g.at_sustained_clocks().unwrap();
        assert!(
            u.gemm
                .measured
                .iter()
                .zip(&g.gemm.measured)
                .all(|(b, a)| (b.secs / a.secs - 1.25).abs() < 1e-12)
        );
    }

    #[test]
    fn measured_points_are_hit_exactly_and_blended_between() {
        let mut g = gpu();
        let model = |g: &GpuSpec, m, n, k| gemm_time(g, m, n, k, DType::Bf16).unwrap();
        let (a, b) = ((1024, 4096, 4096), (4096, 4096, 4096));
        let (ma, mb) = (model(&g, a.0, a.1, a.2), model(&g, b.0, b.1, b.2));
        g.gemm.measured = vec![
            GemmPoint {
                dtype: DType::Bf16,
                m: a.0,
                n: a.1,
                k: a.2,
                secs: 2.0 * ma,
                warm_secs: None,
            },
            GemmPoint {
                dtype: DType::Bf16,
                m: b.0,
                n: b.1,
                k: b.2,
                secs: 0.5 * mb,
                warm_secs: None,
            },
            // Another dtype's point is ignored for bf16.
            GemmPoint {
                dtype: DType::Fp32,
                m: 2048,
                n: 4096,
                k: 4096,
                secs: 1.0,
                warm_secs: None,
            },
        ];
        assert!((model(&g, a.0, a.1, a.2) / (2.0 * ma) - 1.0).abs() < 1e-12);
        assert!((model(&g, b.0, b.1, b.2) / (0.5 * mb) - 1.0).abs() < 1e-12);
        // Halfway in log space: the geometric mean of the two points' time per FLOP.
        let tpf = |secs: f64, m: u64| secs / gemm_flops(m, 4096, 4096);
        let (ta, tb) = (tpf(2.0 * ma, a.0), tpf(0.5 * mb, b.0));
        let mid = (ta * tb).sqrt();
        let at = |m: u64| model(&g, m, 4096, 4096) / gemm_flops(m, 4096, 4096);
        assert!((at(2048) / mid - 1.0).abs() < 1e-12);
        // Nearer `a` leans towards a's time per FLOP; far outside, the nearer point
        // dominates.
        let (lo, hi) = (ta.min(tb), ta.max(tb));
        let near_a = at(1200);
        assert!((near_a - ta).abs() < (near_a - tb).abs() && near_a > lo && near_a < hi);
        let far = at(65536);
        assert!((far - tb).abs() < (far - ta).abs() && far > lo && far < hi);
        // Zero-sized GEMMs stay free.
        assert_eq!(gemm_time(&g, 0, 4096, 4096, DType::Bf16).unwrap(), 0.0);
    }

    /// Measured points far above a shape cannot carry it below its launch (a 512³ GEMM
    /// was predicted in under 1 µs from the H200 grid's time per FLOP).
    #[test]
    fn measured_interpolation_never_goes_below_a_launch() {
        let mut g = gpu();
        g.gemm.launch = 4e-6;
        g.gemm.measured = vec![GemmPoint {
            dtype: DType::Bf16,
            m: 8192,
            n: 8192,
            k: 8192,
            secs: 1.4e-3,
            warm_secs: None,
        }];
        let t = gemm_time(&g, 512, 512, 512, DType::Bf16).unwrap();
        assert!(t >= 4e-6, "{t}");
        // The measured shape itself keeps its time.
        let t = gemm_time(&g, 8192, 8192, 8192, DType::Bf16).unwrap();
        assert!((t - 1.4e-3).abs() < 1e-12, "{t}");
    }

    /// The warm time of a GEMM over a B the GEMM before it read: the measured warm/cold
    /// ratio at a measured shape, between measured shapes a blend of theirs, never above
    /// the cold time nor below a launch plus the FLOPs at peak, and the cold time where
    /// the profile measured no warm times.
    #[test]
    fn warm_gemms_take_the_measured_ratio() {
        let bf = DType::Bf16;
        let mut g = gpu();
        let point = |m, secs, warm| GemmPoint {
            dtype: bf,
            m,
            n: 3072,
            k: 5120,
            secs,
            warm_secs: warm,
        };
        g.gemm.measured = vec![point(256, 26e-6, None), point(1024, 44e-6, None)];
        for m in [256, 512, 1024] {
            let cold = gemm_time(&g, m, 3072, 5120, bf).unwrap();
            assert_eq!(gemm_time_warm(&g, m, 3072, 5120, bf).unwrap(), cold);
        }
        g.gemm.measured = vec![
            point(256, 26e-6, Some(19.5e-6)),
            point(1024, 44e-6, Some(42e-6)),
        ];
        let warm = |g: &GpuSpec, m| gemm_time_warm(g, m, 3072, 5120, bf).unwrap();
        let cold = |g: &GpuSpec, m| gemm_time(g, m, 3072, 5120, bf).unwrap();
        assert!((warm(&g, 256) - 19.5e-6).abs() < 1e-15);
        assert!((warm(&g, 1024) - 42e-6).abs() < 1e-15);
        let r = warm(&g, 512) / cold(&g, 512);
        assert!(r > 19.5 / 26.0 && r < 42.0 / 44.0, "{r}");
        // A ratio above 1 (noise) leaves the cold time.
        g.gemm.measured = vec![point(256, 26e-6, Some(27e-6))];
        assert_eq!(warm(&g, 256), cold(&g, 256));
        // Far below the measured times, the floor: a launch plus the FLOPs at peak.
        g.gemm.measured = vec![point(256, 26e-6, Some(1e-9))];
        let floor = g.gemm.launch + gemm_flops(300, 3072, 5120) / g.peak(bf).unwrap();
        assert!((warm(&g, 300) - floor).abs() < 1e-15, "{floor}");
    }

    /// A 1536 × 3072 output is 144 tiles of 128 × 256 (two waves on 132 SMs, the second
    /// nearly empty); stream-K spreads the 144 tiles' work evenly, 1.09 tiles per SM; an
    /// alternative tile is taken only where it is faster still.
    #[test]
    fn stream_k_and_alternative_tiles_take_the_fastest() {
        let mut g = gpu();
        let (m, n, k) = (1536, 3072, 4096);
        let whole = gemm_cost(&g, m, n, k, DType::Bf16).unwrap();
        assert_eq!(whole.waves, 2);
        g.gemm.stream_k_overhead = Some(0.1);
        let sk = gemm_cost(&g, m, n, k, DType::Bf16).unwrap();
        // 144/132 · 1.1 = 1.2 units of work instead of 2.
        assert!((sk.compute / whole.compute - 144.0 / 132.0 * 1.1 / 2.0).abs() < 1e-9);
        g.gemm.alt_tiles = vec![(128, 128)];
        let alt = gemm_cost(&g, m, n, k, DType::Bf16).unwrap();
        assert!(alt.total <= sk.total);
    }

    /// A per-SM load bound slows a GEMM whose few tiles cannot pull their slabs fast
    /// enough, and leaves a compute-bound one alone.
    #[test]
    fn sm_load_bandwidth_bounds_thin_gemms_only() {
        let mut g = gpu();
        let thin = gemm_time(&g, 512, 2048, 8192, DType::Bf16).unwrap();
        let fat = gemm_time(&g, 8192, 8192, 8192, DType::Bf16).unwrap();
        // A 128 × 256 tile does 2·128·256 FLOPs per (128 + 256) elements loaded: at
        // 7.5 TFLOP/s per SM and efficiency 0.8 it needs about 47 GB/s; 20 GB/s binds.
        // 32 tiles split 4 ways: 78 µs of loading against 25 µs of HBM traffic.
        g.gemm.sm_load_bandwidth = Some(20e9);
        assert!(gemm_time(&g, 512, 2048, 8192, DType::Bf16).unwrap() > 2.5 * thin);
        g.gemm.sm_load_bandwidth = Some(400e9);
        assert_eq!(gemm_time(&g, 8192, 8192, 8192, DType::Bf16).unwrap(), fat);
    }

    /// Attention runs at the profile's own attention efficiency where it gives one.
    #[test]
    fn attention_takes_its_own_efficiency() {
        let mut g = gpu();
        let a = Attention {
            bh: 32,
            seq_q: 4096,
            seq_kv: 4096,
            head_dim: 128,
            causal: true,
            backward: false,
            dtype: DType::Bf16,
        };
        let at_gemm = attention_time(&g, &a).unwrap();
        g.attention_efficiency = Some(0.4);
        let own = attention_time(&g, &a).unwrap();
        assert!((own / at_gemm - 0.8 / 0.4).abs() < 1e-9, "{own} {at_gemm}");
        // Sustained clocks slow it like the GEMMs.
        g.sustained_gemm_slowdown = Some(1.25);
        let s = g.at_sustained_clocks().unwrap();
        assert!((attention_time(&s, &a).unwrap() / own - 1.25).abs() < 1e-9);
    }

    #[test]
    fn skinny_gemm_is_memory_bound() {
        let g = gpu();
        let c = gemm_cost(&g, 128 * 132, 256, 256, DType::Bf16).unwrap();
        assert!(c.memory > c.compute);
    }

    #[test]
    fn missing_dtype_is_an_error() {
        assert!(gemm_time(&gpu(), 1, 1, 1, DType::Fp8).is_err());
    }

    #[test]
    fn ring_closed_form() {
        let t = ring_collective_time(4, 1e-6, 1e-6, 100e9, 400_000_000);
        assert!((t - 3.0 * (1e-6 + 1e-3)).abs() < 1e-15);
        let t = ring_collective_time(4, 5e-6, 1e-6, 100e9, 400_000_000);
        assert!((t - (5e-6 + 2e-6 + 3e-3)).abs() < 1e-15);
        assert_eq!(ring_collective_time(1, 1e-6, 1e-6, 1e9, 100), 0.0);
    }
}
