//! The `validate` use case: predicted against measured for the runs `run --out DIR`
//! recorded, per op class and overall makespan. With another hardware profile the plans
//! are rebuilt from `run.json` and predicted again (say, with a freshly calibrated
//! profile); otherwise the predictions saved beside the measurements are compared.
//! Needs no GPU.

use super::run::{RecordedRun, predict_as_executed, stem};
use super::{Error, read_timeline};
use crate::timeline::Timeline;
use crate::validate::{Comparison, compare, spread_pct, summarize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What to compare.
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// Run directories (`run --out`).
    pub dirs: Vec<PathBuf>,
    /// Predict again with this hardware profile instead of the saved predictions.
    pub hardware: Option<String>,
    /// With `hardware`: predict without the interference model.
    pub no_interference: bool,
}

/// One run directory compared.
pub struct Case {
    pub dir: PathBuf,
    /// Why the directory was skipped (its ranks shared GPUs), if it was.
    pub skipped: Option<String>,
    pub comparisons: Vec<Comparison>,
    /// With `hardware`: the new predictions, per strategy (`stem`, timeline).
    pub predictions: Vec<(String, Timeline)>,
}

impl Case {
    /// The case's name: its directory's.
    pub fn name(&self) -> String {
        case_name(&self.dir)
    }
}

fn case_name(dir: &Path) -> String {
    dir.file_name().map_or_else(
        || dir.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// Every case compared.
pub struct Validation {
    pub hardware: Option<String>,
    pub cases: Vec<Case>,
}

/// Each strategy's repeated makespans and back-to-back baseline, µs, where the run
/// recorded them (its `results.json`; runs older than those fields have none).
fn recorded_repeats(dir: &Path) -> (BTreeMap<String, Vec<f64>>, BTreeMap<String, f64>) {
    let results: Vec<serde_json::Value> =
        crate::io::read_text(&dir.join("results.json"), crate::io::MAX_DATA_BYTES)
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .and_then(|v| v.get("results").and_then(|r| r.as_array()).cloned())
            .unwrap_or_default();
    let repeats = results
        .iter()
        .filter_map(|r| {
            let s = r.get("strategy")?.as_str()?.to_string();
            let v = r.get("repeat_makespans_us")?.as_array()?;
            Some((s, v.iter().filter_map(|x| x.as_f64()).collect()))
        })
        .collect();
    let back_to_back = results
        .iter()
        .filter_map(|r| {
            let s = r.get("strategy")?.as_str()?.to_string();
            Some((s, r.get("back_to_back_us")?.as_f64()?))
        })
        .collect();
    (repeats, back_to_back)
}

/// Compare one run directory.
pub fn compare_dir(dir: &Path, hardware: Option<&str>, interference: bool) -> Result<Case, Error> {
    let rec = RecordedRun::read(dir)?;
    let case = case_name(dir);
    let mut out = Case {
        dir: dir.to_path_buf(),
        skipped: None,
        comparisons: Vec::new(),
        predictions: Vec::new(),
    };
    if !rec.file.comparable {
        out.skipped =
            Some("its ranks shared GPUs, so its times are not comparable with a prediction".into());
        return Ok(out);
    }
    let sc = hardware
        .map(|h| rec.scenario(h, interference))
        .transpose()?;
    let (repeats, back_to_back) = recorded_repeats(dir);
    for label in rec.labels()? {
        let mut measured = read_timeline(&dir.join(format!("measured-{}.json", stem(&label))))?;
        measured.scenario = case.clone();
        let mut predicted = match &sc {
            Some(sc) => {
                let plan = rec.plan(sc, &label)?;
                let t = predict_as_executed(sc, &case, &label, &plan, None)?;
                out.predictions.push((stem(&label), t.clone()));
                t
            }
            None => read_timeline(&dir.join(format!("predicted-{}.json", stem(&label))))?,
        };
        predicted.scenario = case.clone();
        let mut c = compare(&predicted, &measured).map_err(Error::input)?;
        c.measured_spread_pct = repeats.get(&label).and_then(|v| spread_pct(v));
        c.executor_overhead_pct = back_to_back
            .get(&label)
            .filter(|b| **b > 0.0)
            .map(|b| (c.measured_makespan_us / b - 1.0) * 100.0);
        out.comparisons.push(c);
    }
    Ok(out)
}

/// Compare every directory of the request.
pub fn run(req: &Request) -> Result<Validation, Error> {
    let cases = req
        .dirs
        .iter()
        .map(|d| compare_dir(d, req.hardware.as_deref(), !req.no_interference))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Validation {
        hardware: req.hardware.clone(),
        cases,
    })
}

impl Validation {
    /// Every comparison, case by case.
    pub fn comparisons(&self) -> Vec<Comparison> {
        self.cases
            .iter()
            .flat_map(|c| c.comparisons.iter().cloned())
            .collect()
    }

    /// The table `validate` prints.
    pub fn table(&self) -> String {
        crate::validate::table(&self.comparisons())
    }

    /// The JSON of `validate --format json` and `--out`.
    pub fn json(&self) -> String {
        let all = self.comparisons();
        let mut json = serde_json::to_string_pretty(&serde_json::json!({
            "version": 1,
            "hardware": self.hardware,
            "summary": summarize(&all),
            "cases": all,
        }))
        .expect("comparison serializes");
        json.push('\n');
        json
    }

    /// The new predictions as files under a folder: `<case>/predicted-<strategy>.json`.
    pub fn prediction_files(&self) -> Vec<(PathBuf, String)> {
        self.cases
            .iter()
            .flat_map(|c| {
                let case = c.name();
                c.predictions.iter().map(move |(stem, t)| {
                    (
                        Path::new(&case).join(format!("predicted-{stem}.json")),
                        crate::timeline::file::to_json(t),
                    )
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A checked-in run compared with its saved predictions, and predicted again: the
    /// same strategies, one comparison each, and the new predictions returned.
    #[test]
    fn checked_in_runs_validate_both_ways() {
        let dir = PathBuf::from("results/h200-2026-12-04/emu-none-llama-ag-gemm-tp8-b3");
        let saved = run(&Request {
            dirs: vec![dir.clone()],
            ..Request::default()
        })
        .unwrap();
        let again = run(&Request {
            dirs: vec![dir],
            hardware: Some("h200-sxm-8".into()),
            no_interference: false,
        })
        .unwrap();
        let n = saved.comparisons().len();
        assert!(n > 0);
        assert_eq!(again.comparisons().len(), n);
        assert_eq!(again.prediction_files().len(), n);
        assert!(saved.prediction_files().is_empty());
        assert!(saved.json().contains("\"summary\""));
    }
}
