//! The `collective` use case: one collective over a range of sizes on a hardware
//! profile, run as NCCL would run it where its model applies, and reported the way
//! nccl-tests reports measurements (rows of time, algbw and busbw; table, CSV, JSON).
//! The command line and the Python package build a [`Request`] and present the
//! [`Output`].

use crate::config::validate::MAX_CHANNELS;
use crate::config::{self, ConfigError};
use crate::cost::nccl::{self, Fabric, NcclAlgo, NcclColl, Protocol, Tuned};
use crate::exec::sim::{self, SimOptions};
use crate::scenario::{DType, Straggler, VariabilityParams};
use crate::strategy::collective::{
    self, Algorithm, CollectiveError, CollectiveOp, CollectiveSpec, NcclChannels,
};
use serde::Serialize;

/// What to simulate.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub op: CollectiveOp,
    /// `None`: NCCL's choice per size (ring or tree for all-reduce, ring for all-gather
    /// and reduce-scatter, pairwise for all-to-all, direct for sendrecv).
    pub algorithm: Option<Algorithm>,
    /// NCCL protocol of ring and tree; `None`: NCCL's choice per size.
    pub protocol: Option<Protocol>,
    /// NCCL channels; `None`: the profile's, or NCCL's pick.
    pub channels: Option<u32>,
    /// Ranks on GPUs 0..N; `None`: every GPU.
    pub ranks: Option<u32>,
    /// A hardware preset name or a profile path.
    pub hardware: String,
    pub nodes: Option<u64>,
    pub gpus: Option<u64>,
    /// Sizes in bytes, nccl-tests' sizes.
    pub sizes: Vec<u64>,
    /// Parts (direct, pairwise) or pipelined chunks per channel (tree); `None`: default.
    pub chunks: Option<u32>,
    /// Element type (for the count column).
    pub dtype: DType,
    /// The most events one size may take.
    pub max_events: u64,
    /// Simulate the representative ranks only where the topology's rotation allows.
    pub symmetry: bool,
    /// Slower ranks or links (every rank is then simulated).
    pub stragglers: Vec<Straggler>,
    /// Jittered samples of every size (none by default).
    pub samples: Samples,
}

/// Jittered samples of each size, every rank simulated with its own seeded draws: how
/// many, the seed, and the jitter (`None` fields: the profile's `[variability]`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Samples {
    pub count: u64,
    pub seed: u64,
    pub compute_cv: Option<f64>,
    pub comm_cv: Option<f64>,
    pub distribution: Option<String>,
}

/// One size's time over the jittered samples, µs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TimeSpread {
    pub samples: u64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub min: f64,
    pub max: f64,
    pub mean: f64,
}

/// The jitter `s` asks for on `hw`; `None` without samples.
fn jitter_of(
    s: &Samples,
    hw: &crate::scenario::Hardware,
) -> Result<Option<VariabilityParams>, Error> {
    if s.count == 0 {
        if s.compute_cv.is_some() || s.comm_cv.is_some() || s.distribution.is_some() {
            return Err(Error::input(
                &["compute-jitter", "comm-jitter", "jitter-distribution"],
                "they shape jittered samples; ask for at least one sample".into(),
            ));
        }
        return Ok(None);
    }
    let base = hw.variability.as_ref();
    if base.is_none() && s.compute_cv.is_none() && s.comm_cv.is_none() {
        return Err(Error::input(
            &["samples"],
            format!(
                "hardware profile `{}` has no [variability] section; give a compute and/or communication jitter",
                hw.name
            ),
        ));
    }
    let f = crate::config::files::VariabilityFile {
        distribution: s.distribution.clone().unwrap_or_else(|| {
            base.map_or("lognormal", |b| b.distribution.name())
                .to_string()
        }),
        compute_cv: s
            .compute_cv
            .unwrap_or_else(|| base.map_or(0.0, |b| b.compute_cv)),
        comm_cv: s.comm_cv.unwrap_or_else(|| base.map_or(0.0, |b| b.comm_cv)),
    };
    crate::config::validate::variability("command line", "jitter", &f)
        .map(Some)
        .map_err(Error::Config)
}

impl Request {
    /// All-reduce over every GPU of `hardware`, NCCL's choices, nccl-tests' default
    /// sizes (1 KiB..8 GiB).
    pub fn new(hardware: &str) -> Request {
        Request {
            op: CollectiveOp::AllReduce,
            algorithm: None,
            protocol: None,
            channels: None,
            ranks: None,
            hardware: hardware.to_string(),
            nodes: None,
            gpus: None,
            sizes: crate::units::parse_sizes("1KiB:8GiB", 2).expect("default sizes"),
            chunks: None,
            dtype: DType::Fp32,
            max_events: SimOptions::default().max_events,
            symmetry: true,
            stragglers: Vec::new(),
            samples: Samples::default(),
        }
    }
}

/// Why a collective could not be simulated.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request field (or fields, together) is not acceptable: the command line shows
    /// it as `--field: message`.
    #[error("{message}")]
    Input {
        fields: &'static [&'static str],
        message: String,
    },
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Build(CollectiveError),
    #[error("{0}")]
    Run(String),
}

impl Error {
    fn input(fields: &'static [&'static str], message: String) -> Error {
        Error::Input { fields, message }
    }
}

/// The request fields as the front ends take them, as text: `op`, `algorithm` and
/// `protocol` (`auto` or a name), `dtype`, and `sizes` with their `factor`; errors name
/// the field at fault.
pub struct Text<'a> {
    pub op: &'a str,
    pub algorithm: &'a str,
    pub protocol: &'a str,
    pub dtype: &'a str,
    pub sizes: &'a str,
    pub factor: u64,
}

impl Request {
    /// A request on `hardware` with the text fields `t` parsed; the other fields keep
    /// [`Request::new`]'s defaults.
    pub fn parse(hardware: &str, t: &Text) -> Result<Request, Error> {
        let op = CollectiveOp::parse(t.op).ok_or_else(|| {
            let known: Vec<_> = CollectiveOp::ALL.iter().map(|o| o.name()).collect();
            Error::input(
                &["op"],
                format!("`{}` is not one of {}", t.op, known.join(", ")),
            )
        })?;
        let algorithm = match t.algorithm {
            "auto" => None,
            s => Some(Algorithm::parse(s).ok_or_else(|| {
                Error::input(
                    &["algorithm"],
                    format!("`{s}` is not one of auto, ring, tree, direct, pairwise (p2p)"),
                )
            })?),
        };
        let protocol = match t.protocol {
            "auto" => None,
            s => Some(Protocol::parse(s).ok_or_else(|| {
                Error::input(
                    &["protocol"],
                    format!("`{s}` is not one of auto, simple, ll, ll128"),
                )
            })?),
        };
        let dtype = DType::parse(t.dtype).ok_or_else(|| {
            Error::input(
                &["dtype"],
                format!("`{}` is not one of fp32, bf16, fp16, fp8", t.dtype),
            )
        })?;
        let sizes = crate::units::parse_sizes(t.sizes, t.factor)
            .map_err(|e| Error::input(&["sizes"], e))?;
        Ok(Request {
            op,
            algorithm,
            protocol,
            dtype,
            sizes,
            ..Request::new(hardware)
        })
    }
}

/// Simulate `r`: one row per size.
pub fn run(r: &Request) -> Result<Output, Error> {
    let (op, asked, protocol, dtype) = (r.op, r.algorithm, r.protocol, r.dtype);
    if let Some(alg) = asked
        && !op.algorithms().contains(&alg)
    {
        let known: Vec<_> = op.algorithms().iter().map(|a| a.name()).collect();
        return Err(Error::input(
            &["algorithm"],
            format!(
                "{op} has no `{alg}` algorithm (it has: auto, {})",
                known.join(", ")
            ),
        ));
    }
    if let Some(c) = r.channels
        && !(1..=MAX_CHANNELS).contains(&(c as u64))
    {
        return Err(Error::input(
            &["channels"],
            format!("{c} is not in 1..{MAX_CHANNELS} (NCCL's MAXCHANNELS)"),
        ));
    }
    if let Some(k) = r.chunks
        && !(1..=MAX_CHUNKS).contains(&k)
    {
        return Err(Error::input(
            &["chunks"],
            format!("{k} is not in 1..{MAX_CHUNKS}"),
        ));
    }
    let hw = config::load_hardware_sized(&r.hardware, None, r.nodes, r.gpus)?;
    let jitter = jitter_of(&r.samples, &hw)?;
    let ranks = r.ranks.unwrap_or(hw.topology.gpu_count() as u32);
    hw.topology
        .require_gpus(ranks as usize)
        .map_err(|e| Error::input(&["ranks"], e.to_string()))?;
    let opts = SimOptions {
        record_links: false,
        max_events: r.max_events,
        stragglers: r.stragglers.clone(),
        ..SimOptions::default()
    };
    // A straggler makes ranks differ: every rank is simulated.
    let orbits = match r.symmetry && r.stragglers.is_empty() {
        true if ranks as usize == hw.topology.gpu_count() => hw
            .topology
            .link_orbits()
            .map_err(|e| Error::Run(e.to_string()))?
            .filter(|o| o.order > 1),
        _ => None,
    };
    let cfg = hw.comm.nccl;
    let fabric = Fabric::of(&hw.topology, ranks);
    let ch = nccl::channels(&cfg, &fabric, r.channels);
    let node_size = hw.topology.gpus_per_node() as u32;
    // NCCL's model is of machines NCCL runs on: nodes of at most an NVL72 rack's GPUs.
    // A larger one-level fabric (a ring of thousands of GPUs) runs the plain algorithms
    // at the profile's own message costs.
    let nccl_machine = node_size <= MAX_NCCL_NODE;
    if !nccl_machine && (protocol.is_some() || r.channels.is_some()) {
        return Err(Error::input(
            &["protocol", "channels"],
            format!(
                "NCCL's channel model covers nodes of at most {MAX_NCCL_NODE} GPUs; {} has {node_size} in one node (use --protocol auto and no --channels)",
                hw.name
            ),
        ));
    }
    let mut rows = Vec::with_capacity(r.sizes.len());
    for &bytes in &r.sizes {
        // NCCL's choice (or the one asked), priced by its tuning model.
        let tuned = nccl_coll(op)
            .filter(|_| nccl_machine)
            .map(|coll| nccl::tune(&cfg, &fabric, ch, coll, bytes));
        let allowed = |t: &&Tuned| {
            protocol.is_none_or(|p| p == t.protocol)
                && match asked {
                    None => true,
                    Some(alg) => to_nccl(alg) == Some(t.algo),
                }
        };
        let pick = tuned
            .as_ref()
            .and_then(|t| nccl::pick(&t.iter().filter(allowed).copied().collect::<Vec<_>>()));
        let algorithm = match (asked, pick) {
            (Some(alg), _) => alg,
            (None, Some(t)) if t.algo == NcclAlgo::Tree => Algorithm::Tree,
            (None, _) => op.algorithms()[0],
        };
        if protocol.is_some() && to_nccl(algorithm).is_none() {
            return Err(Error::input(
                &["protocol"],
                format!(
                    "{} runs as point-to-point messages, not as an NCCL ring or tree (use --algorithm ring or tree, or --protocol auto)",
                    if asked.is_none() {
                        op.name().to_string()
                    } else {
                        format!("{op} with `{algorithm}`")
                    }
                ),
            ));
        }
        let nccl_run = match (to_nccl(algorithm), pick) {
            (Some(alg), Some(t)) if t.algo == alg => Some(t),
            _ => None,
        };
        let per_channel = bytes / ch.count.max(1) as u64;
        let chunks = match (r.chunks, algorithm) {
            (Some(k), _) => k,
            (None, Algorithm::Tree) => {
                let levels = node_size.max(1) as u64 + (fabric.nodes as u64).max(2).ilog2() as u64;
                per_channel
                    .div_ceil(TREE_CHUNK_BYTES)
                    .clamp(1, TREE_CHUNKS_PER_LEVEL * levels) as u32
            }
            (None, _) => 1,
        };
        let spec = CollectiveSpec {
            op,
            algorithm,
            ranks,
            bytes,
            chunks,
            nccl: nccl_run.map(|t| NcclChannels {
                channels: ch.count,
                node_size,
                wire: nccl::wire(&cfg, &fabric, ch, t.algo, t.protocol),
                channel_bw: fabric.channel_bw(ch.count, ch.ceiling).1,
            }),
        };
        let shift = orbits
            .as_ref()
            .filter(|o| {
                collective::is_rotation_invariant(&spec)
                    && (node_size >= ranks || o.shift % node_size.max(1) == 0)
            })
            .map(|o| o.shift);
        let ran = run_spec(&spec, shift, node_size, &hw, &opts)?;
        let t = ran.makespan;
        // Samples: every rank simulated (generated where it can be) with its own draws,
        // in parallel, collected in sample order (the same at any thread count).
        let spread = match &jitter {
            None => None,
            Some(params) => {
                use rayon::prelude::*;
                let times = (0..r.samples.count)
                    .into_par_iter()
                    .map(|i| {
                        let o = SimOptions {
                            jitter: Some(sim::Jitter {
                                params: params.clone(),
                                seed: sim::variability::sample_seed(r.samples.seed, i),
                            }),
                            ..opts.clone()
                        };
                        run_spec(&spec, None, node_size, &hw, &o).map(|x| x.makespan)
                    })
                    .collect::<Result<Vec<f64>, Error>>()?;
                let s = crate::simulate::Spread::of(times);
                Some(TimeSpread {
                    samples: r.samples.count,
                    p50: round6(s.p50 * 1e6),
                    p90: round6(s.p90 * 1e6),
                    p99: round6(s.p99 * 1e6),
                    min: round6(s.min * 1e6),
                    max: round6(s.max * 1e6),
                    mean: round6(s.mean * 1e6),
                })
            }
        };
        let algbw = if t > 0.0 { bytes as f64 / t / 1e9 } else { 0.0 };
        rows.push(Row {
            size_bytes: bytes,
            count: nccl_count(op, bytes, ranks, dtype),
            dtype: nccl_type(dtype),
            redop: match op {
                CollectiveOp::AllReduce | CollectiveOp::ReduceScatter => "sum",
                _ => "none",
            },
            time_us: round6(t * 1e6),
            algbw: round6(algbw),
            busbw: round6(algbw * op.busbw_factor(ranks)),
            algorithm: algorithm.name(),
            protocol: nccl_run.map_or("-", |t| t.protocol.name()),
            channels: if nccl_run.is_some() { ch.count } else { chunks },
            nccl_model_us: nccl_run.map(|t| round6(t.time_us)),
            events: ran.events,
            simulated_ranks: shift.unwrap_or(ranks),
            plan: ran.plan,
            time_us_jittered: spread,
        });
    }
    let avg_busbw = if rows.is_empty() {
        0.0
    } else {
        round6(rows.iter().map(|r| r.busbw).sum::<f64>() / rows.len() as f64)
    };
    let out = Output {
        format: "flashoverlap-collective",
        version: 2,
        op: op.name().into(),
        algorithm: asked.map_or("auto", |a| a.name()).to_string(),
        protocol: protocol.map_or("auto", |p| p.name()).to_string(),
        topology: hw.topology.to_string(),
        ranks,
        nodes: fabric.nodes,
        hardware: hw.name.clone(),
        rows,
        stragglers: r.stragglers.iter().map(|s| s.to_string()).collect(),
        jitter: jitter.map(|p| {
            format!(
                "{} samples, seed {}, {} jitter, cv compute {} comm {}",
                r.samples.count,
                r.samples.seed,
                p.distribution.name(),
                p.compute_cv,
                p.comm_cv
            )
        }),
        avg_busbw,
    };
    Ok(out)
}

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub size_bytes: u64,
    /// nccl-tests' count: elements per rank's send (all-gather, all-to-all) or receive
    /// (reduce-scatter) buffer, of the buffer (all-reduce, sendrecv).
    pub count: u64,
    #[serde(rename = "type")]
    pub dtype: &'static str,
    pub redop: &'static str,
    pub time_us: f64,
    #[serde(rename = "algbw_GB/s")]
    pub algbw: f64,
    #[serde(rename = "busbw_GB/s")]
    pub busbw: f64,
    /// What ran: ring, tree, direct or pairwise.
    pub algorithm: &'static str,
    /// NCCL's protocol of a ring or tree (`-` for the decomposed algorithms).
    pub protocol: &'static str,
    /// Channels (ring, tree) or parts (direct, pairwise).
    pub channels: u32,
    /// NCCL's own tuning-model time for what ran, µs (absent outside its model).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nccl_model_us: Option<f64>,
    pub events: u64,
    /// Ranks whose programs were simulated: all of them, or the representatives of a
    /// symmetric plan.
    pub simulated_ranks: u32,
    /// How the plan ran: `symmetric` (the representative ranks over the topology's link
    /// orbits), `generated` (every rank, its ops made from a symmetric plan's as they
    /// run: memory follows what is in flight) or `stored` (every op built first).
    pub plan: &'static str,
    /// The time over the jittered samples, when asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_us_jittered: Option<TimeSpread>,
}

/// One size's run: its makespan (seconds), events and how its plan ran.
struct Ran {
    makespan: f64,
    events: u64,
    plan: &'static str,
}

/// The shift a symmetric plan of `spec` may be unrolled from (every rank simulated, its
/// ops generated): the node's GPUs (NCCL's rail-aligned rings repeat node by node), one
/// where a node holds every rank; `None` where the collective differs between ranks (the
/// tree, unequal parts) or the nodes do not divide the ranks.
fn unroll_shift(spec: &CollectiveSpec, node_size: u32) -> Option<u32> {
    let s = if node_size >= spec.ranks {
        1
    } else {
        node_size.max(1)
    };
    (collective::is_rotation_invariant(spec) && spec.ranks % s == 0).then_some(s)
}

/// Run `spec`: as a symmetric plan of `shift` ranks where given, else every rank, from
/// ops generated as they run where [`unroll_shift`] allows, else from a stored plan.
fn run_spec(
    spec: &CollectiveSpec,
    shift: Option<u32>,
    node_size: u32,
    hw: &crate::scenario::Hardware,
    opts: &SimOptions,
) -> Result<Ran, Error> {
    let sim_error = |e: sim::SimError| match e {
        e @ (sim::SimError::StragglerRank { .. } | sim::SimError::StragglerLink { .. }) => {
            Error::input(&["straggler"], e.to_string())
        }
        e => Error::Run(e.to_string()),
    };
    if shift.is_none()
        && let Some(s) = unroll_shift(spec, node_size)
    {
        let template = collective::build_with(spec, Some(s)).map_err(Error::Build)?;
        let u = sim::Unrolled::new(&template).map_err(|e| Error::Run(e.to_string()))?;
        let res = sim::simulate_unrolled(&u, hw, opts, None).map_err(sim_error)?;
        return Ok(Ran {
            makespan: res.makespan(),
            events: res.events,
            plan: "generated",
        });
    }
    let plan = collective::build_with(spec, shift).map_err(Error::Build)?;
    let res = sim::simulate(&plan, hw, opts).map_err(sim_error)?;
    Ok(Ran {
        makespan: res.times.iter().map(|t| t.end).fold(0.0, f64::max),
        events: res.events,
        plan: if shift.is_some() {
            "symmetric"
        } else {
            "stored"
        },
    })
}

#[derive(Debug, Clone, Serialize)]
pub struct Output {
    pub format: &'static str,
    pub version: u32,
    pub op: String,
    /// What was asked: `auto` or one algorithm.
    pub algorithm: String,
    pub protocol: String,
    pub ranks: u32,
    pub nodes: u32,
    pub hardware: String,
    /// The topology, described (the table's header).
    #[serde(skip)]
    pub topology: String,
    pub rows: Vec<Row>,
    /// The stragglers of the run, as `--straggler` writes them (absent: none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stragglers: Vec<String>,
    /// The jittered samples, described (absent: none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jitter: Option<String>,
    /// nccl-tests' footer: the mean busbw over the sizes.
    #[serde(rename = "avg_busbw_GB/s")]
    pub avg_busbw: f64,
}

/// nccl-tests' names of the element types.
fn nccl_type(d: DType) -> &'static str {
    match d {
        DType::Fp32 => "float",
        DType::Bf16 => "bfloat16",
        DType::Fp16 => "half",
        DType::Fp8 => "f8e4m3",
    }
}

/// Round to 1 ps / 1e-6 GB/s so outputs carry no float noise.
fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

/// C's `%g`: six significant digits, trailing zeros dropped.
fn fmt_g(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return format!("{x}");
    }
    let exp = x.abs().log10().floor() as i32;
    if !(-4..6).contains(&exp) {
        let s = format!("{:.5e}", x);
        let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
        let m = m.trim_end_matches('0').trim_end_matches('.');
        let e: i32 = e.parse().unwrap_or(0);
        return format!("{m}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs());
    }
    let s = format!("{:.*}", (5 - exp).max(0) as usize, x);
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// nccl-tests' number columns: `%*.2f`, or fewer decimals when that is too wide.
fn fmt_width(x: f64, width: usize) -> String {
    for d in [2usize, 1, 0] {
        let s = format!("{:>width$.d$}", x);
        if s.len() <= width {
            return s;
        }
    }
    format!("{:>width$.0e}", x)
}

fn nccl_coll(op: CollectiveOp) -> Option<NcclColl> {
    match op {
        CollectiveOp::AllGather => Some(NcclColl::AllGather),
        CollectiveOp::ReduceScatter => Some(NcclColl::ReduceScatter),
        CollectiveOp::AllReduce => Some(NcclColl::AllReduce),
        CollectiveOp::AllToAll | CollectiveOp::SendRecv => None,
    }
}

fn to_nccl(a: Algorithm) -> Option<NcclAlgo> {
    match a {
        Algorithm::Ring => Some(NcclAlgo::Ring),
        Algorithm::Tree => Some(NcclAlgo::Tree),
        _ => None,
    }
}

/// The most pipelined chunks per channel a tree gets by default, per level of it.
const TREE_CHUNKS_PER_LEVEL: u64 = 16;
/// A tree's default pipeline chunk per channel (NCCL pipelines a tree channel's data in
/// chunks of tens to hundreds of KiB, smaller for the LL protocols).
const TREE_CHUNK_BYTES: u64 = 64 << 10;

/// The largest node NCCL's channel model is applied to (an NVL72 rack).
pub const MAX_NCCL_NODE: u32 = 72;

/// The most `--chunks` (a plan per chunk per channel would otherwise pass any limit).
pub const MAX_CHUNKS: u32 = 4096;

/// nccl-tests' count column: `paramcount`, the elements of the per-rank argument
/// (all-gather and all-to-all: the send count, size / ranks; reduce-scatter: the receive
/// count, size / ranks; all-reduce and sendrecv: the buffer).
fn nccl_count(op: CollectiveOp, bytes: u64, ranks: u32, d: DType) -> u64 {
    let elems = bytes / d.bytes();
    match op {
        CollectiveOp::AllGather | CollectiveOp::ReduceScatter | CollectiveOp::AllToAll => {
            elems / ranks.max(1) as u64
        }
        CollectiveOp::AllReduce | CollectiveOp::SendRecv => elems,
    }
}

impl Output {
    /// JSON of the output (format `flashoverlap-collective`, version 2).
    pub fn json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("output serializes");
        s.push('\n');
        s
    }

    /// CSV: one row per size.
    pub fn csv(&self) -> String {
        csv(self)
    }

    /// The table in nccl-tests' layout.
    pub fn table(&self) -> String {
        table(self, &self.topology)
    }
}

fn csv(o: &Output) -> String {
    let mut s = String::from(
        "size_B,count,type,redop,time_us,algbw_GB/s,busbw_GB/s,algorithm,protocol,channels\n",
    );
    for r in &o.rows {
        s.push_str(&format!(
            "{},{},{},{},{},{},{},{},{},{}\n",
            r.size_bytes,
            r.count,
            r.dtype,
            r.redop,
            r.time_us,
            r.algbw,
            r.busbw,
            r.algorithm,
            r.protocol,
            r.channels
        ));
    }
    s
}

/// The table's footer when some sizes simulated every rank from generated ops.
fn generated_note(o: &Output) -> Option<String> {
    let n = o.rows.iter().filter(|r| r.plan == "generated").count();
    (n > 0).then(|| {
        format!(
            "# {n} of {} sizes simulated rank by rank, each rank's ops generated from a symmetric plan's as they ran (every rank its own state; no op times kept)\n",
            o.rows.len()
        )
    })
}

/// The table's footer when some sizes ran as symmetric plans.
fn symmetric_note(o: &Output) -> Option<String> {
    let sym: Vec<u32> = o
        .rows
        .iter()
        .filter(|r| r.simulated_ranks < o.ranks)
        .map(|r| r.simulated_ranks)
        .collect();
    let &held = sym.first()?;
    Some(format!(
        "# {} of {} sizes simulated as symmetric plans: {} for all {} (the topology's rotation; exact). --symmetry off for full plans\n",
        sym.len(),
        o.rows.len(),
        if held <= 1 {
            "rank 0 stands".to_string()
        } else {
            format!("{} stand", crate::report::held_ranks(held))
        },
        o.ranks
    ))
}

/// The table in nccl-tests' layout (same columns, widths and footer, so its parsers read
/// it), with what ran (`algo/protocol/channels`) after the in-place columns. Simulated
/// runs are not checked, so `#wrong` is `N/A` as in nccl-tests run with `-c 0`; in-place
/// and out-of-place take the same time.
fn table(o: &Output, topo: &str) -> String {
    let mut s = format!(
        "# flashoverlap collective: {} ({} algorithm, {} protocol), {} ranks on {} node(s) of {}\n\
         # busbw = algbw x {} (nccl-tests' convention); times are simulated; NVLS and CollNet/SHARP are not modelled\n",
        o.op,
        o.algorithm,
        o.protocol,
        o.ranks,
        o.nodes,
        topo,
        match o.op.as_str() {
            "all-reduce" => "2(n-1)/n",
            "sendrecv" => "1",
            _ => "(n-1)/n",
        }
    );
    if !o.stragglers.is_empty() {
        s.push_str(&format!("# stragglers: {}\n", o.stragglers.join(", ")));
    }
    s.push_str("#\n");
    s.push_str(&format!(
        "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}           out-of-place                       in-place          \n",
        "", "", "", "", ""
    ));
    s.push_str(&format!(
        "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {}\n",
        "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw",
        "busbw", "#wrong", "algo/proto/ch"
    ));
    s.push_str(&format!(
        "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}\n",
        "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)",
        ""
    ));
    for r in &o.rows {
        let body = format!(
            "  {}  {}  {}    N/A",
            fmt_width(r.time_us, 7),
            fmt_width(r.algbw, 6),
            fmt_width(r.busbw, 6)
        );
        s.push_str(&format!(
            "{:>12}  {:>12}  {:>8}  {:>6}  {:>6}{body}{body}  {}/{}/{}\n",
            r.size_bytes, r.count, r.dtype, r.redop, -1, r.algorithm, r.protocol, r.channels
        ));
    }
    s.push_str("# Out of bounds values : 0 OK\n");
    s.push_str(&format!(
        "# Avg bus bandwidth    : {} \n",
        fmt_g(o.avg_busbw)
    ));
    s.push_str("#\n");
    if let Some(note) = generated_note(o) {
        s.push_str(&note);
    }
    if let Some(j) = &o.jitter {
        s.push_str(&format!(
            "# jittered ({j}; every rank simulated): time p50 / p90 / p99 (us)\n"
        ));
        for r in &o.rows {
            if let Some(t) = &r.time_us_jittered {
                s.push_str(&format!(
                    "# {:>12}  {} / {} / {}\n",
                    r.size_bytes,
                    fmt_width(t.p50, 7),
                    fmt_width(t.p90, 7),
                    fmt_width(t.p99, 7)
                ));
            }
        }
    }
    if let Some(note) = symmetric_note(o) {
        s.push_str(&note);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_print_as_c_does() {
        assert_eq!(fmt_g(95.3009), "95.3009");
        assert_eq!(fmt_g(367.684321), "367.684");
        assert_eq!(fmt_g(0.00123), "0.00123");
        assert_eq!(fmt_g(1234567.0), "1.23457e+06");
        assert_eq!(fmt_width(42127.04, 7), "42127.0");
        assert_eq!(fmt_width(4.5, 7), "   4.50");
        assert_eq!(fmt_width(1234567.0, 6), "   1e6");
    }
}
