//! `flashoverlap._flashoverlap`: the library's use cases for Python. Each function takes
//! plain Python values, runs the same code as the command line (the same validation,
//! the same error messages) and returns JSON text that `flashoverlap/__init__.py` turns
//! into plain Python objects.
#![forbid(unsafe_code)]

use flashoverlap::config::{self, Overrides};
use flashoverlap::exec::sim::SimOptions;
use flashoverlap::timeline::Timeline;
use flashoverlap::timeline::file::TimelineFile;
use pyo3::exceptions::{PyOSError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};

/// The keyword arguments `simulate` takes besides `scenario`, and the scenario key each
/// sets.
const ARGUMENTS: [(&str, &str); 16] = [
    ("model", "model"),
    ("hardware", "hardware"),
    ("workload", "workload"),
    ("tp", "parallel.tp"),
    ("dp", "parallel.dp"),
    ("ulysses", "parallel.ulysses"),
    ("rank_order", "parallel.order"),
    ("batch", "batch"),
    ("seq", "seq"),
    ("micro_batches", "micro_batches"),
    ("dtype", "dtype"),
    ("transport", "transport"),
    ("nodes", "nodes"),
    ("interference", "interference"),
    ("sites", "sites"),
    ("strategies", "strategies"),
];

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
#[pyo3(signature = (scenario = "default", timelines = false, kwargs = None))]
fn simulate(
    py: Python<'_>,
    scenario: &str,
    timelines: bool,
    kwargs: Option<&Bound<'_, PyDict>>,
) -> PyResult<String> {
    let o = overrides(kwargs)?;
    let label = |key: &str| {
        let arg = ARGUMENTS.iter().find(|a| a.1 == key).map_or(key, |a| a.0);
        format!("argument ({arg})")
    };
    let (sc, _) = o
        .scenario(scenario, &label)
        .map_err(|e| PyValueError::new_err(chain(&e)))?;
    let opts = SimOptions {
        record_links: true,
        ..SimOptions::default()
    };
    let run = py
        .detach(|| flashoverlap::simulate::run_scenario(&sc, &opts))
        .map_err(|e| PyRuntimeError::new_err(chain(&e)))?;
    let results: serde_json::Value = serde_json::from_str(&flashoverlap::report::json(&sc, &run))
        .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
    let mut doc = serde_json::Map::new();
    doc.insert("results".into(), results);
    if timelines {
        let mut t = serde_json::Map::new();
        for r in &run.runs {
            let tf = TimelineFile::from(&r.timeline);
            t.insert(
                r.strategy.to_string(),
                serde_json::to_value(&tf).map_err(|e| PyRuntimeError::new_err(e.to_string()))?,
            );
        }
        doc.insert("timelines".into(), serde_json::Value::Object(t));
    }
    Ok(serde_json::Value::Object(doc).to_string())
}

/// A timeline file (predicted or measured), validated as `plot` and `validate` read it;
/// its JSON.
#[pyfunction]
fn load_timeline(path: &str) -> PyResult<String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| PyOSError::new_err(format!("{path}: {e}")))?;
    let f: TimelineFile =
        serde_json::from_str(&text).map_err(|e| PyValueError::new_err(format!("{path}: {e}")))?;
    Timeline::try_from(f.clone()).map_err(|e| PyValueError::new_err(format!("{path}: {e}")))?;
    serde_json::to_string(&f).map_err(|e| PyRuntimeError::new_err(e.to_string()))
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
    m.add_function(wrap_pyfunction!(presets, m)?)?;
    m.add_function(wrap_pyfunction!(figures, m)?)?;
    m.add_function(wrap_pyfunction!(arguments, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
