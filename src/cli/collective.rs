//! `flashoverlap collective`: the flags of [`crate::app::collective`]'s request, and its
//! output printed as a table (nccl-tests' layout), CSV or JSON.

use super::CliError;
use crate::app::collective::{self as app, Error, Request, Text};
use crate::exec::sim::SimOptions;
use crate::io::write_atomic;
use std::path::PathBuf;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Json,
    Csv,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// all-gather, reduce-scatter, all-reduce, all-to-all or sendrecv.
    #[arg(long, default_value = "all-reduce")]
    pub op: String,
    /// `auto` (NCCL's choice per size: ring or tree for all-reduce, ring for all-gather
    /// and reduce-scatter; pairwise for all-to-all, direct for sendrecv), ring, tree
    /// (all-reduce), direct or pairwise (decomposed P2P; also `p2p`).
    #[arg(long, default_value = "auto")]
    pub algorithm: String,
    /// NCCL protocol of ring and tree: `auto` (NCCL's choice per size), simple, ll,
    /// ll128.
    #[arg(long, default_value = "auto")]
    pub protocol: String,
    /// NCCL channels of ring and tree (default: the profile's `comm.nccl.channels`, or
    /// what NCCL picks: two per NIC across nodes, 16 on an NVLink node, 2 over PCIe).
    #[arg(long)]
    pub channels: Option<u32>,
    /// Ranks, on GPUs 0..N of the topology (default: every GPU of it).
    #[arg(long)]
    pub ranks: Option<u32>,
    /// Hardware profile name or TOML file.
    #[arg(long, default_value = "h100-sxm-8")]
    pub hardware: String,
    /// Node count of a multi-node profile (e.g. dgx-h100).
    #[arg(long)]
    pub nodes: Option<u64>,
    /// GPU count of a one-level profile (ring, full mesh, NVSwitch node, PCIe tree).
    #[arg(long)]
    pub gpus: Option<u64>,
    /// Sizes in bytes as nccl-tests counts them: `MIN:MAX` (MIN, MIN·factor, … up to
    /// MAX) or a comma-separated list; units B, K/KiB, M/MiB, G/GiB (binary), KB/MB/GB
    /// (decimal).
    #[arg(long, default_value = "1KiB:8GiB")]
    pub sizes: String,
    /// Step between sizes of a `MIN:MAX` range (nccl-tests' -f).
    #[arg(long, default_value_t = 2)]
    pub factor: u64,
    /// direct and pairwise: independent parts on their own streams; tree: pipelined
    /// chunks per channel (default: one per 64 KiB of a channel's data, at most 16 per
    /// level of the tree); ring: unused (its parts are the channels).
    #[arg(long)]
    pub chunks: Option<u32>,
    /// Element type (for the count column): fp32, bf16, fp16, fp8.
    #[arg(long, default_value = "fp32")]
    pub dtype: String,
    /// Output format on stdout.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Also write the output to this file.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Overwrite an existing --out file.
    #[arg(long)]
    pub force: bool,
    /// Refuse runs longer than this many events (per size).
    #[arg(long, default_value_t = SimOptions::default().max_events)]
    pub max_events: u64,
    /// `auto`: where the topology has a rotational symmetry covering the ranks (ring,
    /// NVSwitch node, full mesh, whole leaf groups of a rail fabric) and every rank does
    /// the same up to that rotation (not the tree; equal message sizes), simulate the
    /// representative ranks only — exact, and what makes 16k-rank rings fast. `off`:
    /// every rank simulated, its ops generated as they run where every rank does the
    /// same, else built first (the tree, unequal parts).
    #[arg(long, value_enum, default_value_t = Symmetry::Auto)]
    pub symmetry: Symmetry,
    /// A slower rank or link, `rank:R=FACTOR` or `link:A->B=FACTOR` (repeatable): every
    /// rank is then simulated, as with --symmetry off.
    #[arg(long = "straggler")]
    pub stragglers: Vec<String>,
    /// Also run each size this many times with seeded jitter (the profile's
    /// `[variability]`, or --compute-jitter/--comm-jitter), every rank simulated, and
    /// report its time's p50/p90/p99.
    #[arg(long, default_value_t = 0)]
    pub samples: u64,
    /// Seed of the jittered samples (same seed, same numbers).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Coefficient of variation of compute-op times (overrides the profile's).
    #[arg(long)]
    pub compute_jitter: Option<f64>,
    /// Coefficient of variation of message latency and bandwidth (overrides the profile's).
    #[arg(long)]
    pub comm_jitter: Option<f64>,
    /// Jitter distribution: lognormal, normal or uniform (overrides the profile's).
    #[arg(long)]
    pub jitter_distribution: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Symmetry {
    Auto,
    Off,
}

pub fn run(a: Args) -> Result<(), CliError> {
    let shown = |e: Error| match e {
        Error::Input { fields, message } => {
            CliError::input(format!("--{}: {message}", fields.join("/--")))
        }
        Error::Config(e) => CliError::input(e),
        Error::Build(e) => CliError::input(e),
        Error::Run(e) => CliError::run(e),
    };
    let text = Text {
        op: &a.op,
        algorithm: &a.algorithm,
        protocol: &a.protocol,
        dtype: &a.dtype,
        sizes: &a.sizes,
        factor: a.factor,
    };
    let req = Request {
        channels: a.channels,
        ranks: a.ranks,
        nodes: a.nodes,
        gpus: a.gpus,
        chunks: a.chunks,
        max_events: a.max_events,
        symmetry: a.symmetry == Symmetry::Auto,
        stragglers: crate::scenario::Straggler::parse_all(&a.stragglers)
            .map_err(|e| CliError::input(format!("--straggler: {e}")))?,
        samples: crate::app::collective::Samples {
            count: a.samples,
            seed: a.seed,
            compute_cv: a.compute_jitter,
            comm_cv: a.comm_jitter,
            distribution: a.jitter_distribution.clone(),
        },
        ..Request::parse(&a.hardware, &text).map_err(shown)?
    };
    let out = app::run(&req).map_err(shown)?;
    let text = match a.format {
        Format::Json => out.json(),
        Format::Csv => out.csv(),
        Format::Table => out.table(),
    };
    if let Some(p) = &a.out {
        write_atomic(p, text.as_bytes(), a.force).map_err(CliError::output)?;
    }
    super::stdout(&text)?;
    Ok(())
}
