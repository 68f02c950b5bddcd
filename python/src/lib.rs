//! `flashoverlap._flashoverlap`: the library's use cases for Python. Each function takes
//! plain Python values, runs the same code as the command line (the same validation,
//! the same error messages) and returns JSON text that `flashoverlap/__init__.py` turns
//! into plain Python objects.
#![forbid(unsafe_code)]

use flashoverlap::config::{self, Overrides};
use pyo3::exceptions::{PyOSError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};

/// The keyword arguments `simulate` takes besides `scenario`, and the scenario key each
/// sets: the fields of `config::Overrides`, named as its one list names them.
const ARGUMENTS: [(&str, &str, &str); 25] = config::overrides::FIELDS;

fn known_arguments() -> String {
    ARGUMENTS.map(|a| a.0).join(", ")
}

fn type_error(arg: &str, want: &str, got: &Bound<'_, PyAny>) -> PyErr {
    let shown = got
        .repr()
        .map(|r| r.to_string())
        .unwrap_or_else(|_| "?".into());
    PyTypeError::new_err(format!("argument ({arg}): expected {want}, got {shown}"))
}

fn int(arg: &str, v: &Bound<'_, PyAny>) -> PyResult<i64> {
    // A bool is an int in Python; a count given as True is a mistake.
    if v.is_instance_of::<pyo3::types::PyBool>() {
        return Err(type_error(arg, "an integer", v));
    }
    v.extract::<i64>()
        .map_err(|_| type_error(arg, "an integer", v))
}

fn text(arg: &str, v: &Bound<'_, PyAny>) -> PyResult<String> {
    v.extract::<String>()
        .map_err(|_| type_error(arg, "a string", v))
}

/// Strategies as a list of names or one comma-separated string (`"bulk,flash"`).
fn names(arg: &str, v: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    if v.is_instance_of::<PyString>() {
        return Ok(text(arg, v)?
            .split(',')
            .map(|x| x.trim().to_string())
            .filter(|x| !x.is_empty())
            .collect());
    }
    let list = v
        .cast::<PyList>()
        .map_err(|_| type_error(arg, "a list of strings or a string", v))?;
    list.iter().map(|x| text(arg, &x)).collect()
}

/// `Overrides` from `simulate`'s keyword arguments.
fn overrides(kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<Overrides> {
    let mut o = Overrides::default();
    let Some(kw) = kwargs else {
        return Ok(o);
    };
    for (k, v) in kw.iter() {
        let key = text("a keyword", &k)?;
        if v.is_none() {
            continue;
        }
        let arg = key.as_str();
        match arg {
            "model" => o.model = Some(text(arg, &v)?),
            "hardware" => o.hardware = Some(text(arg, &v)?),
            "workload" => o.workload = Some(text(arg, &v)?),
            "tp" => o.tp = Some(int(arg, &v)?),
            "dp" => o.dp = Some(int(arg, &v)?),
            "ulysses" => o.ulysses = Some(int(arg, &v)?),
            "pp" => o.pp = Some(int(arg, &v)?),
            "pp_schedule" => o.pp_schedule = Some(text(arg, &v)?),
            "ep" => o.ep = Some(int(arg, &v)?),
            "routing" => o.routing = Some(text(arg, &v)?),
            "recompute" => o.recompute = Some(text(arg, &v)?),
            "zero" => o.zero = Some(int(arg, &v)?),
            "clocks" => o.clocks = Some(text(arg, &v)?),
            "passes" => o.passes = Some(text(arg, &v)?),
            "causal" => {
                o.causal = Some(
                    v.extract::<bool>()
                        .map_err(|_| type_error(arg, "True or False", &v))?,
                )
            }
            "rank_order" => o.order = Some(text(arg, &v)?),
            "batch" => o.batch = Some(int(arg, &v)?),
            "seq" => o.seq = Some(int(arg, &v)?),
            "micro_batches" => o.micro_batches = Some(int(arg, &v)?),
            "dtype" => o.dtype = Some(text(arg, &v)?),
            "transport" => o.transport = Some(text(arg, &v)?),
            "nodes" => o.nodes = Some(int(arg, &v)?),
            "interference" => {
                o.interference = Some(
                    v.extract::<bool>()
                        .map_err(|_| type_error(arg, "True or False", &v))?,
                )
            }
            "sites" => {
                let d = v
                    .cast::<PyDict>()
                    .map_err(|_| type_error(arg, "a dict of site -> strategy", &v))?;
                for (s, st) in d.iter() {
                    o.sites.push((text(arg, &s)?, text(arg, &st)?));
                }
            }
            "strategies" => o.strategies = Some(names(arg, &v)?),
            other => {
                return Err(PyTypeError::new_err(format!(
                    "simulate() got an unexpected keyword argument `{other}` (known: scenario, timelines, {})",
                    known_arguments()
                )));
            }
        }
    }
    Ok(o)
}

/// The error's whole cause chain on one line, as the command line prints it.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}

/// Simulate a scenario (a preset name or a path) with `kwargs` overriding its fields;
/// JSON of `{"results": <results.json>, "timelines": {strategy: <timeline file>}}`
/// (timelines only when asked for).
#[pyfunction]
#[pyo3(signature = (scenario = "default", timelines = false, allow_oom = false, kwargs = None))]
fn simulate(
    py: Python<'_>,
    scenario: &str,
    timelines: bool,
    allow_oom: bool,
    kwargs: Option<&Bound<'_, PyDict>>,
) -> PyResult<String> {
    use flashoverlap::app::simulate as app;
    let sc = scenario_of(scenario, kwargs)?;
    let opts = app::Options {
        allow_oom,
        ..app::Options::default()
    };
    let sim = py.detach(|| app::run(sc, &opts)).map_err(|e| match e {
        app::Error::OutOfMemory(_) => PyValueError::new_err(chain(&e)),
        e => PyRuntimeError::new_err(chain(&e)),
    })?;
    // results.json as the command writes it (its key order kept), then the timelines.
    let mut doc = format!("{{\"results\": {}", sim.json());
    if timelines {
        doc.push_str(", \"timelines\": {");
        for (i, (r, (_, file))) in sim.run.runs.iter().zip(sim.timeline_files()).enumerate() {
            if i > 0 {
                doc.push_str(", ");
            }
            let name = serde_json::to_string(&r.strategy.to_string())
                .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
            doc.push_str(&name);
            doc.push_str(": ");
            doc.push_str(file.trim_end());
        }
        doc.push('}');
    }
    doc.push('}');
    Ok(doc)
}

/// One collective over a range of sizes (`flashoverlap collective`): JSON of
/// `{"output": <the command's JSON>, "table": <its nccl-tests table>}`.
#[pyfunction]
#[pyo3(signature = (
    hardware = "h100-sxm-8",
    op = "all-reduce",
    sizes = "1KiB:8GiB",
    factor = 2,
    algorithm = "auto",
    protocol = "auto",
    channels = None,
    ranks = None,
    nodes = None,
    gpus = None,
    chunks = None,
    dtype = "fp32",
    symmetry = true,
    stragglers = Vec::new(),
    samples = 0,
    seed = 0,
    compute_jitter = None,
    comm_jitter = None,
    jitter_distribution = None
))]
#[allow(clippy::too_many_arguments)]
fn collective(
    py: Python<'_>,
    hardware: &str,
    op: &str,
    sizes: &str,
    factor: u64,
    algorithm: &str,
    protocol: &str,
    channels: Option<u32>,
    ranks: Option<u32>,
    nodes: Option<u64>,
    gpus: Option<u64>,
    chunks: Option<u32>,
    dtype: &str,
    symmetry: bool,
    stragglers: Vec<String>,
    samples: u64,
    seed: u64,
    compute_jitter: Option<f64>,
    comm_jitter: Option<f64>,
    jitter_distribution: Option<String>,
) -> PyResult<String> {
    use flashoverlap::app::collective::{self as app, Error, Request, Text};
    let shown = |e: Error| match e {
        Error::Input { fields, message } => {
            PyValueError::new_err(format!("argument ({}): {message}", fields.join("/")))
        }
        Error::Config(e) => PyValueError::new_err(chain(&e)),
        Error::Build(e) => PyValueError::new_err(chain(&e)),
        Error::Run(e) => PyRuntimeError::new_err(e),
    };
    let text = Text {
        op,
        algorithm,
        protocol,
        dtype,
        sizes,
        factor,
    };
    let req = Request {
        channels,
        ranks,
        nodes,
        gpus,
        chunks,
        symmetry,
        stragglers: flashoverlap::scenario::Straggler::parse_all(&stragglers)
            .map_err(|e| PyValueError::new_err(format!("argument (stragglers): {e}")))?,
        samples: app::Samples {
            count: samples,
            seed,
            compute_cv: compute_jitter,
            comm_cv: comm_jitter,
            distribution: jitter_distribution,
        },
        ..Request::parse(hardware, &text).map_err(shown)?
    };
    let out = py.detach(|| app::run(&req)).map_err(shown)?;
    // The command's JSON as it is (its key order is the columns'), and the table.
    let table =
        serde_json::to_string(&out.table()).map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
    Ok(format!(
        "{{\"output\": {}, \"table\": {table}}}",
        out.json()
    ))
}

/// A value of a sweep axis as the command line writes it: a list joined by commas, a
/// bool as true/false, anything else as its str().
fn axis_values(arg: &str, v: &Bound<'_, PyAny>) -> PyResult<String> {
    let one = |x: &Bound<'_, PyAny>| -> PyResult<String> {
        if let Ok(b) = x.cast::<pyo3::types::PyBool>() {
            return Ok(if b.is_true() { "true" } else { "false" }.to_string());
        }
        if x.is_instance_of::<PyList>() || x.is_instance_of::<pyo3::types::PyTuple>() {
            return Err(type_error(arg, "a value or a flat list of values", x));
        }
        Ok(x.str()?.to_string())
    };
    if let Ok(list) = v.cast::<PyList>() {
        let parts: PyResult<Vec<String>> = list.iter().map(|x| one(&x)).collect();
        return Ok(parts?.join(","));
    }
    if let Ok(t) = v.cast::<pyo3::types::PyTuple>() {
        let parts: PyResult<Vec<String>> = t.iter().map(|x| one(&x)).collect();
        return Ok(parts?.join(","));
    }
    one(v)
}

/// A grid of scenario points (`flashoverlap sweep`): `axes` maps a field (`tp`,
/// `parallel.tp`, `strategy`, any scenario key) to its values. JSON of `{"sweep": <the
/// command's sweep.json>, "csv": <its sweep.csv>, "summary": <its summary>}`.
#[pyfunction]
#[pyo3(signature = (
    scenario = "default",
    grid = None,
    out = None,
    threads = 0,
    resume = false,
    force = false,
    skip_invalid = false,
    allow_oom = false,
    shard = None,
    group_by = None,
    axes = None,
    rank_by = None
))]
#[allow(clippy::too_many_arguments)]
fn sweep(
    py: Python<'_>,
    scenario: &str,
    grid: Option<&str>,
    out: Option<&str>,
    threads: usize,
    resume: bool,
    force: bool,
    skip_invalid: bool,
    allow_oom: bool,
    shard: Option<&str>,
    group_by: Option<Vec<String>>,
    axes: Option<&Bound<'_, PyDict>>,
    rank_by: Option<&str>,
) -> PyResult<String> {
    use flashoverlap::app::sweep as app;
    use flashoverlap::sweep::{GridSpec, RunOptions, Shard};
    let bad = |arg: &str, msg: String| PyValueError::new_err(format!("argument ({arg}): {msg}"));
    let mut spec = match grid {
        Some(p) => GridSpec::from_file(std::path::Path::new(p))
            .map_err(|e| PyValueError::new_err(chain(&e)))?,
        None => GridSpec {
            scenario: scenario.to_string(),
            dir: None,
            axes: Vec::new(),
        },
    };
    if grid.is_some() && scenario != "default" {
        spec.scenario = scenario.to_string();
    }
    if let Some(a) = axes {
        for (k, v) in a.iter() {
            let key = text("an axis", &k)?;
            if v.is_none() {
                continue;
            }
            let values = axis_values(&key, &v)?;
            spec.set_axis(&key, vec![values]);
        }
    }
    let shard = shard
        .map(Shard::parse)
        .transpose()
        .map_err(|e| bad("shard", e.to_string()))?;
    let req = app::Request {
        spec,
        shard,
        threads,
        out: out.map(std::path::PathBuf::from),
        resume,
        force,
        options: RunOptions {
            max_events: flashoverlap::exec::sim::SimOptions::default().max_events,
            skip_invalid,
            allow_oom,
        },
        halt_after: None,
        group_by,
        rank_by: rank_by
            .map(flashoverlap::report::RankBy::parse)
            .transpose()
            .map_err(|e| bad("rank_by", e))?,
    };
    let s = py.detach(|| app::run(&req, &())).map_err(app_error)?;
    let err = |e: serde_json::Error| PyRuntimeError::new_err(e.to_string());
    Ok(format!(
        "{{\"sweep\": {}, \"csv\": {}, \"summary\": {}}}",
        flashoverlap::sweep::json(&s.file),
        serde_json::to_string(&flashoverlap::sweep::csv(&s.file)).map_err(err)?,
        serde_json::to_string(&s.summary).map_err(err)?
    ))
}

/// The layouts of a model on a machine for a global batch, ranked (`flashoverlap
/// search`). `fields` sets the base scenario's fields (`model`, `hardware`, `nodes`,
/// `seq`, any scenario key), one value each. JSON of `{"search": <the command's
/// search.json>, "csv": <its search.csv>, "summary": <its table>}`.
#[pyfunction]
#[pyo3(signature = (
    global_batch,
    scenario = "default",
    fields = None,
    tp = None,
    pp = None,
    max_pp = 16,
    ulysses = vec![1],
    ep = None,
    micro_batch = vec![1, 2, 4],
    pp_schedule = None,
    recompute = None,
    zero = vec![1, 3],
    rank_order = "tp-pp-dp",
    strategies = None,
    rank_by = "tokens_per_s",
    dp_strategy = None,
    exact = false,
    verify = 5,
    prune = true,
    top = 10,
    threads = 0,
    shard = None,
    max_events = flashoverlap::search::DEFAULT_MAX_EVENTS,
    out = None,
    force = false,
    dry_run = false
))]
#[allow(clippy::too_many_arguments)]
fn search(
    py: Python<'_>,
    global_batch: i64,
    scenario: &str,
    fields: Option<&Bound<'_, PyDict>>,
    tp: Option<Vec<i64>>,
    pp: Option<Vec<i64>>,
    max_pp: u64,
    ulysses: Vec<i64>,
    ep: Option<Vec<i64>>,
    micro_batch: Vec<i64>,
    pp_schedule: Option<Vec<String>>,
    recompute: Option<Vec<String>>,
    zero: Vec<u8>,
    rank_order: &str,
    strategies: Option<&Bound<'_, PyAny>>,
    rank_by: &str,
    dp_strategy: Option<Vec<String>>,
    exact: bool,
    verify: u64,
    prune: bool,
    top: usize,
    threads: usize,
    shard: Option<&str>,
    max_events: u64,
    out: Option<&str>,
    force: bool,
    dry_run: bool,
) -> PyResult<String> {
    use flashoverlap::app::search as app;
    use flashoverlap::sweep::Shard;
    let bad = |arg: &str, msg: String| PyValueError::new_err(format!("argument ({arg}): {msg}"));
    let mut base = Vec::new();
    if let Some(f) = fields {
        for (k, v) in f.iter() {
            let key = text("a field", &k)?;
            if v.is_none() {
                continue;
            }
            if v.is_instance_of::<PyList>() || v.is_instance_of::<pyo3::types::PyTuple>() {
                return Err(type_error(
                    &key,
                    "one value (a search runs on one machine and model)",
                    &v,
                ));
            }
            let value = axis_values(&key, &v)?;
            base.push((key.clone(), key.replace("__", "."), value));
        }
    }
    let spec = app::base_spec(scenario, &base).map_err(app_error)?;
    let gb = app::counts("global_batch", &[global_batch]).map_err(app_error)?[0];
    let mut r = app::Request::new(spec, gb);
    r.space.tp = tp
        .map(|v| app::counts("tp", &v))
        .transpose()
        .map_err(app_error)?;
    r.space.pp = pp
        .map(|v| app::counts("pp", &v))
        .transpose()
        .map_err(app_error)?;
    r.space.max_pp = max_pp;
    r.space.ulysses = app::counts("ulysses", &ulysses).map_err(app_error)?;
    r.space.ep = ep
        .map(|v| app::counts("ep", &v))
        .transpose()
        .map_err(app_error)?;
    r.space.micro_batch = app::counts("micro_batch", &micro_batch).map_err(app_error)?;
    r.space.zero = zero;
    let defaults = flashoverlap::search::Space::default();
    app::SpaceText {
        schedules: pp_schedule
            .unwrap_or_else(|| defaults.schedules.iter().map(|s| s.to_string()).collect()),
        recompute: recompute.unwrap_or_else(|| {
            defaults
                .recompute
                .iter()
                .map(|s| s.name().to_string())
                .collect()
        }),
        rank_order: rank_order.to_string(),
        strategies: strategies.map(|v| names("strategies", v)).transpose()?,
        rank_by: rank_by.to_string(),
        dp_strategies: dp_strategy.unwrap_or_default(),
    }
    .apply(&mut r, &|name| name.to_string())
    .map_err(app_error)?;
    r.exact = exact;
    r.verify = verify;
    r.prune = prune;
    r.top = top;
    r.threads = threads;
    r.shard = shard
        .map(Shard::parse)
        .transpose()
        .map_err(|e| bad("shard", e.to_string()))?;
    r.max_events = max_events;
    r.out = out.map(std::path::PathBuf::from);
    r.force = force;
    r.dry_run = dry_run;
    let s = py.detach(|| app::run(&r, &())).map_err(app_error)?;
    let err = |e: serde_json::Error| PyRuntimeError::new_err(e.to_string());
    Ok(format!(
        "{{\"search\": {}, \"csv\": {}, \"summary\": {}}}",
        flashoverlap::search::json(&s.file),
        serde_json::to_string(&flashoverlap::search::csv(&s.file)).map_err(err)?,
        serde_json::to_string(&s.summary).map_err(err)?
    ))
}

/// A use case's error as the Python exception of its kind: bad input a `ValueError` (an
/// input that could not be read at all an `OSError`), an output that could not be
/// written an `OSError`, a failed run a `RuntimeError`; the message the command line
/// prints.
fn app_error(e: flashoverlap::app::Error) -> PyErr {
    use flashoverlap::app::Error;
    let unreadable = e
        .inner()
        .downcast_ref::<flashoverlap::app::ReadError>()
        .is_some();
    match e {
        Error::Input(_) if unreadable => PyOSError::new_err(chain(&e)),
        Error::Input(_) => PyValueError::new_err(chain(&e)),
        Error::Output(_) => PyOSError::new_err(chain(&e)),
        Error::Run(_) => PyRuntimeError::new_err(chain(&e)),
    }
}

/// The scenario `scenario` names with `kwargs` overriding its fields, errors labelled
/// with the Python argument that set the key.
fn scenario_of(
    scenario: &str,
    kwargs: Option<&Bound<'_, PyDict>>,
) -> PyResult<flashoverlap::scenario::Scenario> {
    let o = overrides(kwargs)?;
    let label = |key: &str| {
        let arg = config::overrides::argument_of(key);
        format!("argument ({arg})")
    };
    let (sc, _) = flashoverlap::app::simulate::scenario(scenario, &o, &label)
        .map_err(|e| PyValueError::new_err(chain(&e)))?;
    Ok(sc)
}

/// A plan file (`simulate --plan`) simulated on the hardware of `scenario` with `kwargs`
/// overriding its fields (hardware, nodes, transport, interference, clocks); JSON of
/// `{"results": <the command's JSON>, "timeline": <timeline file>}`.
#[pyfunction]
#[pyo3(signature = (path, scenario = "default", kwargs = None))]
fn simulate_plan(
    py: Python<'_>,
    path: &str,
    scenario: &str,
    kwargs: Option<&Bound<'_, PyDict>>,
) -> PyResult<String> {
    use flashoverlap::app::simulate as app;
    let sc = scenario_of(scenario, kwargs)?;
    let path = std::path::PathBuf::from(path);
    let sim = py
        .detach(|| app::run_plan(&sc, &path, &app::Options::default()))
        .map_err(|e| match e {
            app::PlanError::Config(flashoverlap::config::ConfigError::Io { .. }) => {
                PyOSError::new_err(chain(&e))
            }
            app::PlanError::Sim { .. } => PyRuntimeError::new_err(chain(&e)),
            e => PyValueError::new_err(chain(&e)),
        })?;
    Ok(format!(
        "{{\"results\": {}, \"timeline\": {}}}",
        sim.json(),
        flashoverlap::timeline::file::to_json(&sim.timeline)
    ))
}

/// A timeline file (predicted or measured), read and checked as `plot` and `validate`
/// read it; its JSON.
#[pyfunction]
fn load_timeline(path: &str) -> PyResult<String> {
    let f = flashoverlap::app::read_timeline_file(std::path::Path::new(path)).map_err(app_error)?;
    serde_json::to_string(&f).map_err(|e| PyRuntimeError::new_err(e.to_string()))
}

/// Predicted against measured for `run --out` directories (`flashoverlap validate`);
/// with `hardware`, the plans predicted again on that profile. JSON of `{"validation":
/// <the command's JSON>, "table": <its table>, "skipped": [[dir, why]...],
/// "predictions": {"<case>/predicted-<strategy>.json": <timeline>}}`.
#[pyfunction]
#[pyo3(signature = (dirs, hardware = None, interference = true))]
fn validate(
    py: Python<'_>,
    dirs: Vec<String>,
    hardware: Option<String>,
    interference: bool,
) -> PyResult<String> {
    use flashoverlap::app::validate as app;
    if !interference && hardware.is_none() {
        return Err(PyValueError::new_err(
            "argument (interference): False needs hardware (the saved predictions are compared as they are)",
        ));
    }
    let req = app::Request {
        dirs: dirs.iter().map(std::path::PathBuf::from).collect(),
        hardware,
        no_interference: !interference,
    };
    let v = py.detach(|| app::run(&req)).map_err(app_error)?;
    let skipped: Vec<(String, String)> = v
        .cases
        .iter()
        .filter_map(|c| Some((c.dir.display().to_string(), c.skipped.clone()?)))
        .collect();
    let mut predictions = serde_json::Map::new();
    for (rel, body) in v.prediction_files() {
        let t: serde_json::Value =
            serde_json::from_str(&body).map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
        predictions.insert(rel.display().to_string(), t);
    }
    let err = |e: serde_json::Error| PyRuntimeError::new_err(e.to_string());
    Ok(format!(
        "{{\"validation\": {}, \"table\": {}, \"skipped\": {}, \"predictions\": {}}}",
        v.json(),
        serde_json::to_string(&v.table()).map_err(err)?,
        serde_json::to_string(&skipped).map_err(err)?,
        serde_json::to_string(&predictions).map_err(err)?,
    ))
}

/// The embedded presets: (kind, name) pairs.
#[pyfunction]
fn presets() -> Vec<(&'static str, &'static str)> {
    config::presets()
        .iter()
        .map(|p| (p.kind.name(), p.name))
        .collect()
}

/// The names of a run's figures, as every output names them.
#[pyfunction]
fn figures() -> Vec<&'static str> {
    flashoverlap::report::FIGURES.to_vec()
}

/// The keyword arguments `simulate` takes besides `scenario` and `timelines`.
#[pyfunction]
fn arguments() -> Vec<&'static str> {
    ARGUMENTS.map(|a| a.0).to_vec()
}

#[pymodule]
fn _flashoverlap(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(simulate, m)?)?;
    m.add_function(wrap_pyfunction!(load_timeline, m)?)?;
    m.add_function(wrap_pyfunction!(simulate_plan, m)?)?;
    m.add_function(wrap_pyfunction!(validate, m)?)?;
    m.add_function(wrap_pyfunction!(collective, m)?)?;
    m.add_function(wrap_pyfunction!(sweep, m)?)?;
    m.add_function(wrap_pyfunction!(search, m)?)?;
    m.add_function(wrap_pyfunction!(presets, m)?)?;
    m.add_function(wrap_pyfunction!(figures, m)?)?;
    m.add_function(wrap_pyfunction!(arguments, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
