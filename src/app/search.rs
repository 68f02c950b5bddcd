//! The `search` use case: the layouts of a model on a machine for a global batch,
//! pruned, screened in parallel (rayon), the best simulated whole, ranked; with its
//! files (`search.json`, `search.csv`, `summary.txt`) and shards that merge into the
//! file one run would have written. The command line adds flags and a progress bar; the
//! Python package calls [`run`] too.

use crate::scenario::Strategy;
use crate::search::{self, RankBy, RequestInfo, SearchFile, Space};
use crate::sweep::{Grid, GridSpec, Shard};
use rayon::prelude::*;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

pub use super::Error;
pub use super::sweep::Progress;

/// What to search and where its files go.
#[derive(Debug, Clone)]
pub struct Request {
    /// The base scenario and the fixed fields (model, hardware, nodes, seq, …).
    pub spec: GridSpec,
    /// Sequences per step over every replica.
    pub global_batch: u64,
    pub space: Space,
    /// Strategies each layout runs (default: the base scenario's).
    pub strategies: Option<Vec<Strategy>>,
    pub rank_by: RankBy,
    /// Simulate every layout whole (no screening by extrapolation).
    pub exact: bool,
    /// Rows simulated whole after screening.
    pub verify: u64,
    /// Leave out layouts whose compute alone takes longer than the best rows' steps
    /// (see [`search::PRUNE_MARGIN`]); `false`: simulate every layout.
    pub prune: bool,
    /// Rows the summary shows.
    pub top: usize,
    /// Worker threads (0: one per core).
    pub threads: usize,
    pub shard: Option<Shard>,
    pub max_events: u64,
    /// Where search.json, search.csv and summary.txt go.
    pub out: Option<PathBuf>,
    pub force: bool,
    /// Enumerate and prune only: the summary lists the layouts a search would simulate.
    pub dry_run: bool,
}

impl Request {
    /// A search of `spec`'s machine for `global_batch` sequences with the defaults.
    pub fn new(spec: GridSpec, global_batch: u64) -> Request {
        Request {
            spec,
            global_batch,
            space: Space::default(),
            strategies: None,
            rank_by: RankBy::default(),
            exact: false,
            verify: 5,
            prune: true,
            top: 10,
            threads: 0,
            shard: None,
            max_events: search::DEFAULT_MAX_EVENTS,
            out: None,
            force: false,
            dry_run: false,
        }
    }
}

/// The base of a search: `scenario` with one value per field in `fields`, each `(as
/// the user named it, key, value)` (`("--nodes", "nodes", "128")`; a key is `model`,
/// `hardware`, `nodes`, `seq` or any scenario key). A search runs on one machine and
/// one model: a list is refused.
pub fn base_spec(scenario: &str, fields: &[(String, String, String)]) -> Result<GridSpec, Error> {
    let mut spec = GridSpec {
        scenario: scenario.to_string(),
        dir: None,
        axes: Vec::new(),
    };
    // The layouts are steps: the base is one too (a MoE model's MoE layers run only in
    // layers and steps, and a base scenario of another workload would refuse it).
    spec.set_axis("workload", vec!["step".to_string()]);
    for (named, key, v) in fields {
        if v.contains(',') {
            return Err(Error::input(search::SearchError::Input {
                what: format!("{named} `{v}`"),
                reason: format!("a search runs on one {key} (sweep compares several)"),
            }));
        }
        spec.set_axis(key, vec![v.clone()]);
    }
    Ok(spec)
}

/// Counts of at least 1 (`--tp 4,8`), as `flag` names them.
pub fn counts(flag: &str, v: &[i64]) -> Result<Vec<u64>, Error> {
    v.iter()
        .map(|&x| {
            u64::try_from(x).ok().filter(|&x| x >= 1).ok_or_else(|| {
                Error::input(search::SearchError::Input {
                    what: flag.to_string(),
                    reason: format!("{x} must be at least 1"),
                })
            })
        })
        .collect()
}

/// A search space given as text, as the command line and Python take it: each list's
/// values as written (`"1f1b"`, `"interleaved:2"`, `"full"`, `"flash"`). `flag` names
/// each argument in errors (`--pp-schedule` on the command line, `pp_schedule` in
/// Python).
#[derive(Debug, Clone, Default)]
pub struct SpaceText {
    pub schedules: Vec<String>,
    pub recompute: Vec<String>,
    pub rank_order: String,
    pub strategies: Option<Vec<String>>,
    pub rank_by: String,
    /// Data-parallel site strategies to try (empty: the scenario's default).
    pub dp_strategies: Vec<String>,
}

impl SpaceText {
    /// Parse into `r`'s space, strategies and ranking; `flag(name)` spells an
    /// argument's name (`pp_schedule` → `--pp-schedule`).
    pub fn apply(&self, r: &mut Request, flag: &dyn Fn(&str) -> String) -> Result<(), Error> {
        use crate::scenario::{PpSchedule, RankOrder, Recompute};
        let bad = |name: &str, v: &str, want: &str| {
            Error::input(search::SearchError::Input {
                what: format!("{} `{v}`", flag(name)),
                reason: format!("expected {want}"),
            })
        };
        r.space.schedules = self
            .schedules
            .iter()
            .map(|x| {
                PpSchedule::parse(x)
                    .ok_or_else(|| bad("pp_schedule", x, "1f1b, interleaved:V or gpipe"))
            })
            .collect::<Result<_, _>>()?;
        r.space.recompute = self
            .recompute
            .iter()
            .map(|x| {
                Recompute::parse(x).ok_or_else(|| bad("recompute", x, &Recompute::NAMES.join(", ")))
            })
            .collect::<Result<_, _>>()?;
        r.space.order = RankOrder::parse(&self.rank_order).ok_or_else(|| {
            bad(
                "rank_order",
                &self.rank_order,
                "tp-pp-dp, tp-inner or dp-inner",
            )
        })?;
        r.strategies = self
            .strategies
            .as_ref()
            .map(|v| {
                v.iter()
                    .map(|x| {
                        Strategy::parse(x).map_err(|e| {
                            Error::input(search::SearchError::Input {
                                what: flag("strategy"),
                                reason: e,
                            })
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()
            })
            .transpose()?;
        r.space.dp_strategies = self
            .dp_strategies
            .iter()
            .map(|x| match Strategy::parse(x) {
                Ok(s @ (Strategy::Sequential | Strategy::Bulk | Strategy::Flash)) => Ok(s),
                _ => Err(bad("dp_strategy", x, "sequential, bulk or flash")),
            })
            .collect::<Result<_, _>>()?;
        r.rank_by = RankBy::parse(&self.rank_by).map_err(|e| {
            Error::input(search::SearchError::Input {
                what: flag("rank_by"),
                reason: e,
            })
        })?;
        Ok(())
    }
}

/// A finished search: the file form and its summary.
#[derive(Debug, Clone)]
pub struct Searched {
    pub file: SearchFile,
    pub summary: String,
}

fn write_outputs(dir: &Path, f: &SearchFile, summary: &str, force: bool) -> Result<(), Error> {
    super::create_dir(dir)?;
    let files = [
        ("search.json".to_string(), search::json(f)),
        ("search.csv".to_string(), search::csv(f)),
        ("summary.txt".to_string(), summary.to_string()),
    ];
    crate::io::write_set(dir, &files, force).map_err(Error::output)
}

fn request_info(
    grid: &Grid,
    base: &crate::scenario::Scenario,
    a: &Request,
    strategies: &[Strategy],
) -> RequestInfo {
    RequestInfo {
        scenario: grid.scenario.clone(),
        model: base.model.name.clone(),
        hardware: base.hardware.name.clone(),
        gpus: base.hardware.topology.gpu_count() as u64,
        seq: base.seq,
        global_batch: a.global_batch,
        strategies: strategies.iter().map(|s| s.to_string()).collect(),
        rank_by: a.rank_by.0.clone(),
        exact: a.exact,
        verify: a.verify,
        max_events: a.max_events,
    }
}

/// Run the search `a` asks for.
pub fn run(a: &Request, pb: &dyn Progress) -> Result<Searched, Error> {
    let grid = Grid::new(&a.spec).map_err(Error::input)?;
    let base = grid.scenario(0).map_err(|e| {
        Error::input(search::SearchError::Input {
            what: "base scenario".into(),
            reason: e,
        })
    })?;
    if let Some(dir) = &a.out
        && !a.force
    {
        for name in ["search.json", "search.csv", "summary.txt"] {
            let p = dir.join(name);
            if p.exists() {
                return Err(Error::output(format!(
                    "{} exists; pass --force to overwrite it",
                    p.display()
                )));
            }
        }
    }
    let strategies = a
        .strategies
        .clone()
        .unwrap_or_else(|| grid.strategies.clone());
    let (candidates, mut counts) =
        search::enumerate(&grid, a.global_batch, &a.space).map_err(Error::input)?;
    if candidates.is_empty() {
        let mut hints = Vec::new();
        if counts.indivisible > 0 {
            hints.push("degrees that divide the GPUs, the global batch and the layers");
        }
        if counts.out_of_memory > 0 {
            hints.push("more GPUs, a smaller global batch, --zero 3 or --recompute full");
        }
        if !counts.invalid.is_empty() {
            hints.push("degrees the model's heads and widths divide (see the refusals)");
        }
        let refusals: String = counts
            .invalid
            .iter()
            .map(|(reason, n)| format!("\n  refused ({n}): {reason}"))
            .collect();
        return Err(Error::input(search::SearchError::Input {
            what: "search".into(),
            reason: format!(
                "no layout to simulate ({}); try {}{refusals}",
                search::counts_line(&counts, strategies.len()),
                hints.join("; ")
            ),
        }));
    }
    let mine: Vec<&search::Candidate> = candidates
        .iter()
        .filter(|c| search::holds(a.shard, c.index))
        .collect();
    counts.layouts = mine.len() as u64;
    if a.dry_run {
        let mut summary = format!(
            "search (dry run): {} on {} ({} GPUs), global batch {} × {} tokens\n{}\n",
            base.model.name,
            base.hardware.name,
            base.hardware.topology.gpu_count(),
            a.global_batch,
            base.seq,
            search::counts_line(&counts, strategies.len())
        );
        for c in &mine {
            summary += &format!(
                "  {:>5}  {}  ({:.1} GiB)\n",
                c.index,
                c.layout.name(),
                c.memory_gib
            );
        }
        return Ok(Searched {
            file: SearchFile {
                format: search::FORMAT.into(),
                version: search::VERSION,
                request: request_info(&grid, &base, a, &strategies),
                shard: a.shard,
                counts,
                rows: Vec::new(),
            },
            summary,
        });
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(a.threads)
        .build()
        .map_err(|e| Error::run(format!("cannot start worker threads: {e}")))?;
    // Floors first (every shard the same ones, so that they prune alike): the layouts
    // with the lowest screen first, and set the bar the others' floors must pass.
    let prune = a.prune && search::floor_bounds(&a.rank_by);
    let floors: Vec<f64> = if prune {
        pool.install(|| {
            candidates
                .par_iter()
                .with_max_len(1)
                .map(|c| {
                    c.scenario(&grid, a.space.order)
                        .and_then(|sc| search::floor(c, &sc, &strategies))
                        // A layout whose plan cannot be built is screened and reported.
                        .unwrap_or(0.0)
                })
                .collect()
        })
    } else {
        Vec::new()
    };
    let lead: Vec<&search::Candidate> = if prune {
        let mut order: Vec<&search::Candidate> = candidates.iter().collect();
        order.sort_by(|x, y| {
            floors[x.index as usize]
                .total_cmp(&floors[y.index as usize])
                .then(x.index.cmp(&y.index))
        });
        order.truncate(a.top.max(a.verify as usize).max(1));
        order
    } else {
        mine.clone()
    };
    let extra = lead
        .iter()
        .filter(|c| !search::holds(a.shard, c.index))
        .count();
    pb.start((mine.len() + extra) as u64, 0);
    let stop = AtomicBool::new(false);
    let screen_all = |set: &[&search::Candidate], deadline: Option<f64>| {
        pool.install(|| {
            // One layout per piece of work: layouts take from milliseconds to tens of
            // seconds, and a piece of several runs them one after another on one thread
            // while the others idle (the last pipelines of the 1024-GPU search ran so,
            // for 20 s, on one of two cores).
            set.par_iter()
                .with_max_len(1)
                .map(|c| {
                    if stop.load(Ordering::Relaxed) {
                        return None;
                    }
                    let r = c.scenario(&grid, a.space.order).and_then(|sc| {
                        search::screen(c, &sc, &strategies, a.exact, a.max_events, deadline)
                    });
                    if matches!(r, Err(ref e) if !matches!(e, search::SearchError::OverBudget { .. }))
                    {
                        stop.store(true, Ordering::Relaxed);
                    }
                    pb.inc();
                    Some((c.index, r))
                })
                .collect::<Vec<_>>()
        })
    };
    let mut results = screen_all(&lead, None);
    if prune {
        let bar = search::prune_bar(
            results
                .iter()
                .flatten()
                .filter_map(|(_, r)| r.as_ref().ok())
                .flatten()
                .flatten(),
            &a.rank_by,
            a.top.max(a.verify as usize).max(1),
        );
        let led: std::collections::BTreeSet<u64> = lead.iter().map(|c| c.index).collect();
        let (rest, pruned): (Vec<&search::Candidate>, Vec<&search::Candidate>) = mine
            .iter()
            .filter(|c| !led.contains(&c.index))
            .partition(|c| bar.is_none_or(|b| floors[c.index as usize] <= b));
        counts.prune_bar_us = bar.map(|b| (b * 1e3).round() / 1e3);
        counts.pruned = pruned.len() as u64;
        counts.layouts -= counts.pruned;
        for _ in &pruned {
            pb.inc();
        }
        // A layout simulated past the bar (under every strategy, at a point with no
        // more micro-batches than its own) is pruned as well.
        results.extend(screen_all(&rest, bar.map(|b| b * 1e-6)));
    }
    pb.finish();
    let mut rows = Vec::new();
    for (index, r) in results.into_iter().flatten() {
        // A leading layout another shard holds only set the bar here; its failure
        // (which stopped the rest) is this shard's failure too.
        if !search::holds(a.shard, index) {
            match r {
                Err(e) if !matches!(e, search::SearchError::OverBudget { .. }) => {
                    return Err(Error::run(e));
                }
                _ => continue,
            }
        }
        match r {
            Ok(Some(r)) => rows.extend(r),
            Ok(None) => {
                counts.pruned += 1;
                counts.layouts -= 1;
            }
            Err(search::SearchError::OverBudget { layout, .. }) => counts.over_budget.push(layout),
            Err(e) => return Err(Error::run(e)),
        }
    }
    counts.over_budget.sort();
    // The best rows whole, in parallel.
    search::rank(&mut rows, &a.rank_by, false);
    let todo: Vec<usize> = (0..rows.len().min(a.verify as usize))
        .filter(|&i| rows[i].exact.is_none())
        .collect();
    let exact: Vec<Result<crate::report::Figures, search::SearchError>> = pool.install(|| {
        todo.par_iter()
            .with_max_len(1)
            .map(|&i| {
                let c = &candidates[rows[i].index as usize];
                c.scenario(&grid, a.space.order)
                    .and_then(|sc| search::verify(c, &sc, &rows[i], a.max_events))
            })
            .collect()
    });
    let mut got = todo.iter().zip(exact);
    let mut fill = |_: &search::Row| -> Result<crate::report::Figures, search::SearchError> {
        let (_, f) = got.next().expect("one per row verified");
        f
    };
    counts.unverified =
        search::finish_ranking(&mut rows, &a.rank_by, a.verify, &mut fill).map_err(Error::run)?;
    counts.unverified.sort();
    let file = SearchFile {
        format: search::FORMAT.into(),
        version: search::VERSION,
        request: request_info(&grid, &base, a, &strategies),
        shard: a.shard,
        counts,
        rows,
    };
    let summary = search::table(&file, a.top);
    if let Some(dir) = &a.out {
        write_outputs(dir, &file, &summary, true)?;
    }
    Ok(Searched { file, summary })
}

/// Join the outputs of `search --shard I/N` runs (their --out folders or search.json
/// files) into what one search would have written, in `out`.
pub fn merge(inputs: &[PathBuf], out: &Path, force: bool, top: usize) -> Result<Searched, Error> {
    let files = super::read_shards(inputs, "search.json", SearchFile::parse)?;
    let file = search::merge(files).map_err(Error::input)?;
    let summary = search::table(&file, top);
    write_outputs(out, &file, &summary, force)?;
    Ok(Searched { file, summary })
}
