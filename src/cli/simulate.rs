use super::{CliError, parse_count};
use crate::app::simulate as app;
use crate::config;
use crate::exec::sim::SimOptions;
use crate::scenario::Scenario;
use std::path::PathBuf;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Json,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Scenario preset name or TOML file.
    #[arg(long, default_value = "default")]
    pub scenario: String,
    /// A plan of your own (TOML, or JSON by its .json name): ranks, streams, ops with
    /// shapes and bytes, dependencies, sends and receives; run on the scenario's hardware
    /// instead of its workload and strategies (the format: README, "Plans of your own").
    #[arg(long, value_name = "FILE", conflicts_with_all = [
        "model", "workload", "tp", "dp", "ulysses", "pp", "pp_schedule", "rank_order", "ep",
        "routing_skew",
        "recompute", "zero", "allow_oom", "batch", "seq", "micro_batches", "dtype", "sites",
        "strategies", "samples", "seed", "compute_jitter", "comm_jitter",
        "jitter_distribution", "non_causal", "forward_only",
    ])]
    pub plan: Option<PathBuf>,
    /// Model preset name or TOML file (overrides the scenario's).
    #[arg(long)]
    pub model: Option<String>,
    /// Hardware profile name or TOML file (overrides the scenario's).
    #[arg(long)]
    pub hardware: Option<String>,
    /// Workload (the list: `cli::command`, from `Workload::ALL`).
    #[arg(long)]
    pub workload: Option<String>,
    /// Tensor-parallel degree.
    #[arg(long, value_parser = parse_count)]
    pub tp: Option<i64>,
    /// Data-parallel degree (workloads `layer` and `step`).
    #[arg(long, value_parser = parse_count)]
    pub dp: Option<i64>,
    /// Ulysses (sequence-parallel attention) degree (workloads `layer` and `step`).
    #[arg(long, value_parser = parse_count)]
    pub ulysses: Option<i64>,
    /// Pipeline stages (workload `step`): the layers split evenly over them.
    #[arg(long, value_parser = parse_count)]
    pub pp: Option<i64>,
    /// Pipeline schedule: `1f1b` (default), `interleaved:V` (V model chunks per stage)
    /// or `gpipe`.
    #[arg(long)]
    pub pp_schedule: Option<String>,
    /// Expert-parallel degree of a MoE model (workload `moe`, or its layers and steps,
    /// where ep divides a stage's tp × ulysses × dp ranks): each rank holds experts / ep
    /// of a MoE layer's routed experts.
    #[arg(long, value_parser = parse_count)]
    pub ep: Option<i64>,
    /// How the router spreads tokens over experts (MoE models): `uniform` (default),
    /// `zipf:S` (expert e gets a share ∝ 1/(e+1)^S, experts in order on the ranks) or a
    /// relative load per expert-parallel rank (`4,1,1,1,1,1,1,1`).
    #[arg(long, value_name = "SKEW")]
    pub routing_skew: Option<String>,
    /// How ranks map onto GPUs: `tp-inner` (tp fastest, then ulysses, dp, pp: a
    /// tensor-parallel group on consecutive GPUs, inside a node; Megatron's order),
    /// `dp-inner` (dp fastest) or `tp-pp-dp` (a pipeline's stages on neighbouring GPUs).
    #[arg(long)]
    pub rank_order: Option<String>,
    /// Activation recomputation: `none`, `selective` (the core attention) or `full`
    /// (each layer's forward again in the backward).
    #[arg(long)]
    pub recompute: Option<String>,
    /// Attention without a causal mask (every query sees every key), as in an encoder
    /// (workloads `layer`, `step`, `attention`).
    #[arg(long)]
    pub non_causal: bool,
    /// Only the forward pass of a `layer` or `attention` workload.
    #[arg(long)]
    pub forward_only: bool,
    /// ZeRO stage (0–3) of the data-parallel sharding, for the memory per GPU (default 3).
    #[arg(long)]
    pub zero: Option<i64>,
    /// Simulate a layout that does not fit in its GPUs' memory (marked in the output)
    /// instead of refusing it.
    #[arg(long)]
    pub allow_oom: bool,
    /// Batch size (sequences).
    #[arg(long, value_parser = parse_count)]
    pub batch: Option<i64>,
    /// Sequence length (tokens), e.g. 4096 or 4k.
    #[arg(long, value_parser = parse_count)]
    pub seq: Option<i64>,
    /// Micro-batches per training step (workload `step`).
    #[arg(long, value_parser = parse_count)]
    pub micro_batches: Option<i64>,
    /// Element type: fp8, bf16, fp16, fp32.
    #[arg(long)]
    pub dtype: Option<String>,
    /// Per-site strategy of a layer or step, `SITE=STRATEGY` (repeatable; sites qkv, proj,
    /// fc1, fc2, head, or fwd./bwd. one of them), overriding each compared strategy there.
    #[arg(long = "site", value_name = "SITE=STRATEGY")]
    pub sites: Vec<String>,
    /// Strategies to compare (the list: `cli::command`, from `Strategy::NAMES`).
    #[arg(long = "strategy", value_delimiter = ',')]
    pub strategies: Vec<String>,
    /// How transfers move: `nccl` (send/recv kernels that hold SMs) or `copy` (copy
    /// engines); overrides the scenario's (default nccl). Under `run`: the executor's
    /// transport (default there: copy).
    #[arg(long)]
    pub transport: Option<String>,
    /// Do not model compute slowed by communication beside it (see the profile's
    /// `[interference]`).
    #[arg(long)]
    pub no_interference: bool,
    /// GPU clocks to predict at: `burst` (the profile as given: a GPU between short
    /// bursts, as `calibrate` measures), `sustained` (at its power limit under sustained
    /// load, as in training: the compute side of GEMMs and attention slowed by the
    /// profile's `gpu.sustained_gemm_slowdown`) or `auto` (sustained for workloads
    /// `layer` and `step` where the profile gives the figure, else burst). Default: the
    /// scenario's `clocks` (auto). Under `run`, sustained also holds the GPUs under the
    /// schedule's own load until their clocks settle before timing.
    #[arg(long, value_enum)]
    pub clocks: Option<Clocks>,
    /// Node count of a multi-node hardware profile (e.g. dgx-h100).
    #[arg(long, value_parser = parse_count)]
    pub nodes: Option<i64>,
    /// Output format on stdout.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Write a Chrome trace (Perfetto) of every strategy to this file (gzip-compressed
    /// when it ends in .gz).
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Only the spans of the trace that overlap START:END (µs), e.g. 0:5000, or the ops
    /// of a layer, micro-batch and pass range, e.g. layer=3-5 or layer=0-1,mb=2,pass=bwd.
    #[arg(long, value_name = "START:END|layer=A-B,mb=A-B")]
    pub trace_window: Option<String>,
    /// Only these ranks' processes in the trace, e.g. 0-7,64.
    #[arg(long, value_name = "RANKS")]
    pub trace_ranks: Option<String>,
    /// Write results.json, table.txt, trace.json and one timeline-<strategy>.json per
    /// strategy into this directory (created if missing).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Draw the timeline of every strategy (one panel each) to this picture (.svg or
    /// .png).
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Overwrite existing output files.
    #[arg(long)]
    pub force: bool,
    /// Refuse runs longer than this many events.
    #[arg(long, default_value_t = SimOptions::default().max_events)]
    pub max_events: u64,
    /// Also run each strategy this many times with seeded jitter (the profile's
    /// `[variability]`, or --compute-jitter/--comm-jitter) and report p50/p90/p99.
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
    /// A slower rank or link, `rank:R=FACTOR` or `link:A->B=FACTOR` (repeatable); applies
    /// to every run, sampled or not.
    #[arg(long = "straggler")]
    pub stragglers: Vec<String>,
}

/// The jitter the flags and the profile ask for; `None` when no samples are asked for.
fn jitter_params(
    a: &Args,
    sc: &Scenario,
) -> Result<Option<crate::scenario::VariabilityParams>, CliError> {
    if a.samples == 0 {
        if a.compute_jitter.is_some() || a.comm_jitter.is_some() || a.jitter_distribution.is_some()
        {
            return Err(CliError::input(
                "--compute-jitter, --comm-jitter and --jitter-distribution need --samples N (N ≥ 1)",
            ));
        }
        return Ok(None);
    }
    let base = sc.hardware.variability.clone();
    if base.is_none() && a.compute_jitter.is_none() && a.comm_jitter.is_none() {
        return Err(CliError::input(format!(
            "--samples: hardware profile `{}` has no [variability] section; give --compute-jitter and/or --comm-jitter",
            sc.hardware.name
        )));
    }
    let f = crate::config::files::VariabilityFile {
        distribution: a.jitter_distribution.clone().unwrap_or_else(|| {
            base.as_ref()
                .map_or("lognormal", |b| b.distribution.name())
                .to_string()
        }),
        compute_cv: a
            .compute_jitter
            .unwrap_or_else(|| base.as_ref().map_or(0.0, |b| b.compute_cv)),
        comm_cv: a
            .comm_jitter
            .unwrap_or_else(|| base.as_ref().map_or(0.0, |b| b.comm_cv)),
    };
    crate::config::validate::variability("command line", "jitter", &f)
        .map(Some)
        .map_err(CliError::input)
}

/// Read the scenario and apply the command-line overrides, remembering which keys came
/// from flags so errors blame them.
pub fn scenario(a: &Args) -> Result<Scenario, CliError> {
    scenario_and_file(a).map(|x| x.0)
}

/// The scenario and the file form it was built from (after the overrides).
pub fn scenario_and_file(
    a: &Args,
) -> Result<(Scenario, crate::config::files::ScenarioFile), CliError> {
    let mut sites = Vec::with_capacity(a.sites.len());
    for site in &a.sites {
        let (k, v) = site.split_once('=').ok_or_else(|| {
            CliError::input(format!(
                "--site `{site}`: expected SITE=STRATEGY, e.g. fc2=chunked:4"
            ))
        })?;
        // The same site twice is a contradiction, not a later-wins override.
        if let Some((_, first)) = sites
            .iter()
            .find(|(x, _): &&(String, String)| x.trim() == k.trim())
        {
            return Err(CliError::input(format!(
                "--site `{}` is given twice ({}={first} and {site}); give each site once",
                k.trim(),
                k.trim()
            )));
        }
        sites.push((k.to_string(), v.to_string()));
    }
    let o = config::Overrides {
        model: a.model.clone(),
        hardware: a.hardware.clone(),
        workload: a.workload.clone(),
        tp: a.tp,
        dp: a.dp,
        ulysses: a.ulysses,
        pp: a.pp,
        pp_schedule: a.pp_schedule.clone(),
        order: a.rank_order.clone(),
        ep: a.ep,
        batch: a.batch,
        seq: a.seq,
        micro_batches: a.micro_batches,
        dtype: a.dtype.clone(),
        transport: a.transport.clone(),
        nodes: a.nodes,
        interference: a.no_interference.then_some(false),
        recompute: a.recompute.clone(),
        zero: a.zero,
        clocks: a.clocks.map(|c| c.name().to_string()),
        causal: a.non_causal.then_some(false),
        passes: a.forward_only.then(|| "fwd".to_string()),
        routing: a.routing_skew.clone(),
        sites,
        strategies: (!a.strategies.is_empty()).then(|| a.strategies.clone()),
    };
    app::scenario(&a.scenario, &o, &|key| {
        format!("command line ({})", config::overrides::flag_of(key))
    })
    .map_err(CliError::input)
}

/// Which clocks a prediction assumes (see `--clocks`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Clocks {
    Auto,
    Burst,
    Sustained,
}

impl Clocks {
    fn name(self) -> &'static str {
        match self {
            Clocks::Auto => "auto",
            Clocks::Burst => "burst",
            Clocks::Sustained => "sustained",
        }
    }
}

/// What to add to a refusal of a plan over the memory limit, where the scenario has a
/// smaller form: a pipeline step under `tp-inner` is built whole (every replica), while
/// `tp-pp-dp` keeps each replica's ranks consecutive, so a topology that turns by whole
/// replicas lets the plan hold one.
fn over_limit_hint(sc: &crate::scenario::Scenario) -> Option<&'static str> {
    (sc.workload == crate::scenario::Workload::Step
        && sc.parallel.pp > 1
        && sc.parallel.dp > 1
        && sc.parallel.order == crate::scenario::RankOrder::TpInner)
        .then_some(
            "a pipeline step under --rank-order tp-inner (the default) is built for every data-parallel replica; --rank-order tp-pp-dp builds one replica where the topology allows",
        )
}

pub fn run(a: Args) -> Result<(), CliError> {
    let sc = scenario(&a)?;
    let stragglers = stragglers(&a)?;
    if let Some(path) = &a.plan {
        return run_plan(&a, &sc, path, stragglers);
    }
    let jitter = jitter_params(&a, &sc)?;
    let samples = jitter.map(|p| (p, a.samples, a.seed));
    let filter = trace_filter(&a)?;
    let opts = app::Options {
        max_events: a.max_events,
        stragglers,
        samples,
        allow_oom: a.allow_oom,
    };
    let hint = over_limit_hint(&sc);
    let sim = app::run(sc, &opts).map_err(|e| match e {
        app::Error::Run(e) if !e.is_over_limit() => CliError::run(e),
        e => match hint {
            Some(h) => CliError::input(format!("{e}; {h}")),
            None => CliError::input(e),
        },
    })?;
    let table = sim.table();
    let json = sim.json();
    if let Some(path) = &a.trace {
        if filter.scope.is_some() && sim.run.runs.iter().all(|r| r.timeline.scopes.is_empty()) {
            return Err(CliError::input(format!(
                "--trace-window `{}`: workload `{}` records no layers or micro-batches (layer and step workloads do); use START:END in µs",
                a.trace_window.as_deref().unwrap_or(""),
                sim.scenario.workload.name()
            )));
        }
        write_trace(path, Box::new(|w| sim.write_trace(w, &filter)), a.force)?;
    }
    write_out(&a, || sim.out_renders())?;
    if let Some(path) = &a.plot {
        let title = table.lines().next().unwrap_or("timeline").to_string();
        let timelines: Vec<_> = sim.run.runs.iter().map(|r| &r.timeline).collect();
        super::plot::simulate_plot(path, &title, &timelines, a.force)?;
    }
    match a.format {
        Format::Table => super::stdout(&table)?,
        Format::Json => super::stdout(&json)?,
    }
    Ok(())
}

/// `simulate --plan FILE`: the user's plan on the scenario's hardware.
fn run_plan(
    a: &Args,
    sc: &Scenario,
    path: &std::path::Path,
    stragglers: Vec<crate::scenario::Straggler>,
) -> Result<(), CliError> {
    let filter = trace_filter(a)?;
    if filter.scope.is_some() {
        return Err(CliError::input(format!(
            "--trace-window `{}`: a plan file records no layers or micro-batches; use START:END in µs",
            a.trace_window.as_deref().unwrap_or("")
        )));
    }
    let opts = app::Options {
        max_events: a.max_events,
        stragglers,
        ..app::Options::default()
    };
    let sim = app::run_plan(sc, path, &opts).map_err(|e| match e {
        app::PlanError::Sim { .. } => CliError::run(e),
        e => CliError::input(e),
    })?;
    let table = sim.table();
    if let Some(p) = &a.trace {
        write_trace(p, Box::new(|w| sim.write_trace(w, &filter)), a.force)?;
    }
    write_out(a, || sim.out_renders())?;
    if let Some(p) = &a.plot {
        let title = table.lines().next().unwrap_or("timeline").to_string();
        super::plot::simulate_plot(p, &title, &[&sim.timeline], a.force)?;
    }
    match a.format {
        Format::Table => super::stdout(&table),
        Format::Json => super::stdout(&sim.json()),
    }
}

/// A trace to `path` as it is made (gzip-compressed on the way when it ends in .gz).
fn write_trace(
    path: &std::path::Path,
    render: crate::io::Render<'_>,
    force: bool,
) -> Result<(), CliError> {
    let render = if path.extension().is_some_and(|e| e == "gz") {
        crate::io::gzipped(render)
    } else {
        render
    };
    crate::io::write_atomic_with(path, render, force).map_err(CliError::output)
}

/// The `--out` folder's files, whole or not at all; `files` is called only when there is
/// a folder to write, and each file is made as it is written (the trace and timelines of
/// a thousand-GPU step are seconds and gigabytes).
fn write_out<'a>(
    a: &Args,
    files: impl FnOnce() -> Vec<(String, crate::io::Render<'a>)>,
) -> Result<(), CliError> {
    let Some(dir) = &a.out else { return Ok(()) };
    let files = files();
    std::fs::create_dir_all(dir).map_err(|source| {
        CliError::output(crate::io::OutputError::Write {
            path: dir.display().to_string(),
            source,
        })
    })?;
    crate::io::write_set_with(dir, files, a.force).map_err(CliError::output)
}

/// The `--straggler` flags, each target once.
fn stragglers(a: &Args) -> Result<Vec<crate::scenario::Straggler>, CliError> {
    crate::scenario::Straggler::parse_all(&a.stragglers)
        .map_err(|e| CliError::input(format!("--straggler: {e}")))
}

/// `--trace-window` and `--trace-ranks` (which need `--trace`).
fn trace_filter(a: &Args) -> Result<crate::trace::TraceFilter, CliError> {
    if a.trace.is_none() && (a.trace_window.is_some() || a.trace_ranks.is_some()) {
        return Err(CliError::input(
            "--trace-window and --trace-ranks shape the --trace file; give --trace too",
        ));
    }
    let filter = match a.trace_window.as_deref() {
        Some(w) => crate::trace::parse_window(w)
            .map_err(|e| CliError::input(format!("--trace-window {e}")))?,
        None => crate::trace::TraceFilter::default(),
    };
    let ranks = a
        .trace_ranks
        .as_deref()
        .map(|r| crate::app::plot::parse_rank_list("--trace-ranks", r))
        .transpose()
        .map_err(super::from_app)?;
    Ok(crate::trace::TraceFilter { ranks, ..filter })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::FromArgMatches;

    fn args(extra: &[&str]) -> Args {
        let mut argv = vec!["flashoverlap", "simulate"];
        argv.extend(extra);
        let m = crate::cli::command().try_get_matches_from(argv).unwrap();
        let (_, sub) = m.subcommand().unwrap();
        Args::from_arg_matches(sub).unwrap()
    }

    /// The `--out` files (the trace and every timeline: seconds and gigabytes for a
    /// thousand-GPU step) are rendered only when there is a folder to write them to.
    #[test]
    fn out_files_are_rendered_only_for_a_folder() {
        write_out(&args(&[]), || panic!("rendered without --out")).unwrap();
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("o");
        let mut called = false;
        write_out(&args(&["--out", dir.to_str().unwrap()]), || {
            called = true;
            vec![("a.txt".to_string(), crate::io::bytes(b"x"))]
        })
        .unwrap();
        assert!(called && dir.join("a.txt").exists());
    }
}
