//! `flashoverlap run --backend cuda`: the flags of [`crate::app::run`]'s request; prints
//! its table and writes its files.

use super::{CliError, from_app, simulate};
use crate::app::run::{self as app, Process};
use crate::exec::gpu::{self, GpuOptions, Transport};
use crate::io::write_atomic;
use crate::plan::StandIn;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    Cuda,
}

#[derive(Debug, clap::Args)]
#[group(skip)]
pub struct Args {
    #[command(flatten)]
    pub sim: simulate::Args,
    /// Executor.
    #[arg(long, value_enum, default_value_t = Backend::Cuda)]
    pub backend: Backend,
    /// Run only this rank's program (what one GPU can run of a multi-rank schedule),
    /// with each transfer replaced as `--stand-in` says.
    #[arg(long)]
    pub emulate_rank: Option<u32>,
    /// What replaces a transfer under `--emulate-rank`: `none` or `copy` (a local copy
    /// of the same size on the same stream).
    #[arg(long, default_value = "none")]
    pub stand_in: String,
    /// GPUs to spread the ranks over (default: all visible, at most one per rank).
    #[arg(long)]
    pub devices: Option<u32>,
    /// Untimed runs before the timed ones.
    #[arg(long, default_value_t = 3)]
    pub warmup: u32,
    /// Timed runs; the one with the median makespan is reported.
    #[arg(long, default_value_t = 10)]
    pub repeats: u32,
    /// Skip the comparison of every rank's result with the reference.
    #[arg(long)]
    pub no_check: bool,
    /// Milliseconds of large GEMMs (untimed) on every GPU before each run (0: none, the
    /// protocol `calibrate` measures by default). Sustained-load clocks take far longer
    /// than one run to set in (the power controller averages), so a few ms do not reach
    /// them.
    #[arg(long, default_value_t = gpu::HEAT_MS)]
    pub heat_ms: f64,
    /// With `--clocks sustained`: hold the schedule in a steady loop at least this many
    /// seconds before timing, then until its makespan settles (the median of the last
    /// second within 0.5% of the second before).
    #[arg(long, default_value_t = gpu::Settle::default().min_s)]
    pub settle_min_s: f64,
    /// With `--clocks sustained`: time the schedule after this many seconds of the loop
    /// even if it has not settled (the run records that it did not).
    #[arg(long, default_value_t = gpu::Settle::default().max_s)]
    pub settle_max_s: f64,
    /// Abort a run that has not finished after this many seconds and name the op that
    /// waited (0: no watchdog).
    #[arg(long, default_value_t = 60.0)]
    pub watchdog_s: f64,
    /// One rank on one GPU: also time the same kernels back to back on one stream (no
    /// per-op events or waits), each repetition beside one of the schedule's, and report
    /// the executor's overhead against them.
    #[arg(long)]
    pub back_to_back: bool,
    /// Multi-process mode (with `--transport nccl`): this process runs rank `--rank` of
    /// `--world` (the plan's rank count) on local GPU `--local-device`; every process is
    /// started with the same arguments but its rank. Rank 0 writes the outputs.
    #[arg(long, requires = "rank")]
    pub world: Option<u32>,
    /// This process's rank in multi-process mode (see `--world`).
    #[arg(long, requires = "world")]
    pub rank: Option<u32>,
    /// The local GPU this process runs its rank on in multi-process mode.
    #[arg(long, default_value_t = 0)]
    pub local_device: u32,
    /// Where rank 0 writes the NCCL unique id and the others read it (a path every
    /// process sees, fresh for each job). Not needed when NCCL_COMM_ID=host:port is set.
    #[arg(long)]
    pub nccl_id_file: Option<std::path::PathBuf>,
}

pub fn run(a: Args) -> Result<(), CliError> {
    let Backend::Cuda = a.backend;
    let (scenario, file) = simulate::scenario_and_file(&a.sim)?;
    let emulate = match a.emulate_rank {
        Some(r) => {
            let si = StandIn::parse(&a.stand_in).ok_or_else(|| {
                CliError::input(format!(
                    "--stand-in: `{}` is not one of none, copy",
                    a.stand_in
                ))
            })?;
            Some((r, si))
        }
        None => None,
    };
    let mut gpu = GpuOptions {
        devices: a.devices,
        warmup: a.warmup,
        repeats: a.repeats,
        check: (!a.no_check).then_some(scenario.workload),
        // `--transport` (checked with the scenario) or copy engines, which run any
        // number of ranks per GPU.
        transport: if a.sim.transport.is_some() {
            scenario.transport
        } else {
            Transport::CopyEngine
        },
        watchdog: (a.watchdog_s > 0.0).then_some(a.watchdog_s),
        process: None,
        heat_ms: a.heat_ms,
        back_to_back: a.back_to_back,
        settle: match scenario.clocks {
            crate::scenario::Clocks::Sustained => {
                if !(a.settle_min_s.is_finite()
                    && a.settle_min_s >= 0.0
                    && a.settle_max_s.is_finite()
                    && a.settle_max_s >= a.settle_min_s)
                {
                    return Err(CliError::input(format!(
                        "--settle-min-s {} and --settle-max-s {}: need 0 ≤ min ≤ max, finite",
                        a.settle_min_s, a.settle_max_s
                    )));
                }
                Some(gpu::Settle {
                    min_s: a.settle_min_s,
                    max_s: a.settle_max_s,
                    ..gpu::Settle::default()
                })
            }
            crate::scenario::Clocks::Burst => None,
        },
    };
    let mut ids = Vec::new();
    if let (Some(world), Some(rank)) = (a.world, a.rank) {
        let p = Process {
            rank,
            world,
            local_device: a.local_device,
            id_file: a.nccl_id_file.clone(),
            wait_s: if a.watchdog_s > 0.0 {
                a.watchdog_s
            } else {
                600.0
            },
        };
        let (pr, v) = app::process_ids(&p, scenario.strategies.len()).map_err(from_app)?;
        gpu.process = Some(pr);
        ids = v;
    }
    let process = gpu.process;
    let plan = match &a.sim.plan {
        Some(p) => Some(app::PlanRecord::read(p).map_err(from_app)?),
        None => None,
    };
    if plan.is_some() && a.world.is_some() {
        return Err(CliError::input(
            "--plan runs in one process (all ranks on the GPUs present); it does not combine with --world",
        ));
    }
    let req = app::Request {
        scenario,
        file,
        emulate,
        gpu,
        ids,
        plan,
    };
    let report = app::run(req, &|line| eprintln!("{line}")).map_err(from_app)?;
    if let Some(pr) = process.filter(|p| p.rank != 0) {
        eprintln!(
            "rank {} of {}: done (rank 0 writes the results)",
            pr.rank, pr.world
        );
        return Ok(());
    }
    if let Some(dir) = &a.sim.out {
        crate::app::create_dir(dir).map_err(from_app)?;
        crate::io::write_set(dir, &report.out_files(), a.sim.force).map_err(CliError::output)?;
    }
    if let Some(path) = &a.sim.trace {
        write_atomic(path, report.trace().as_bytes(), a.sim.force).map_err(CliError::output)?;
    }
    super::stdout(&report.table())?;
    if report.results.iter().any(|m| !m.comparable) {
        eprintln!(
            "note: ranks share GPUs, so the measured times serialize what the prediction \
             runs in parallel; error_% is n/a (use --emulate-rank R to time one rank)"
        );
    }
    report.check().map_err(from_app)
}
