//! The grid of a sweep: a base scenario and axes, each a scenario field with a list of
//! values. Points are the Cartesian product of the axes (first axis outermost); the
//! `strategy` axis is innermost and is run inside one point's scenario, so a scenario
//! point's strategies share one plan build of `sequential` for the speed-up baseline.
//!
//! A field is any key of the scenario file (`batch`, `parallel.tp`, `transport`, …): a
//! point's scenario is the base scenario's file form with the point's values written into
//! it, read back through the same serde types and validation as `simulate`, so a field
//! that does not exist or a value of the wrong type fails the same way a scenario file
//! would, and a field added to the scenario format later is sweepable with no change here.

use super::SweepError;
use crate::config::{self, ScenarioFile};
use crate::scenario::{Scenario, Strategy};
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// Short names accepted for nested scenario keys.
const ALIASES: &[(&str, &str)] = &[
    ("tp", "parallel.tp"),
    ("dp", "parallel.dp"),
    ("ulysses", "parallel.ulysses"),
    ("pp", "parallel.pp"),
    ("pp_schedule", "parallel.pp_schedule"),
    ("sp", "parallel.sp"),
    ("strategies", "strategy"),
];

/// Fields that describe a *choice* (how to run) rather than the *problem*; the summary
/// groups rows by the swept problem fields and ranks the choices inside each group.
const CHOICES: &[&str] = &[
    "strategy",
    "parallel.tp",
    "parallel.dp",
    "parallel.ulysses",
    "parallel.sp",
    "parallel.pp",
    "parallel.pp_schedule",
    "parallel.order",
    "recompute",
    "zero",
    "transport",
];

pub fn canonical_key(key: &str) -> String {
    let k = key.trim();
    ALIASES
        .iter()
        .find(|(a, _)| *a == k)
        .map_or(k, |(_, c)| c)
        .to_string()
}

/// The short name of a canonical key (`parallel.tp` → `tp`), for display.
pub fn short_key(key: &str) -> &str {
    ALIASES
        .iter()
        .find(|(a, c)| *c == key && *a != "strategies")
        .map_or(key, |(a, _)| a)
}

pub fn is_choice(key: &str) -> bool {
    CHOICES.contains(&key)
}

/// A grid as the user wrote it: raw value strings, before expansion and typing.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GridSpec {
    /// Base scenario: preset name or path.
    pub scenario: String,
    /// Directory relative model/hardware paths in axis values resolve against (the sweep
    /// file's); `None`: the working directory.
    pub dir: Option<PathBuf>,
    /// (field, raw values) in the order given.
    pub axes: Vec<(String, Vec<String>)>,
}

/// The file form of a grid (`--grid sweep.toml`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GridFile {
    #[serde(default = "one")]
    pub version: u32,
    /// Base scenario (preset or path relative to the file); default `default`.
    pub scenario: Option<String>,
    /// field = [values] (or one value).
    pub grid: toml::Table,
}

fn one() -> u32 {
    1
}

impl GridSpec {
    /// Read a sweep file: `scenario = "..."` and a `[grid]` table of field = [values].
    pub fn from_file(path: &Path) -> Result<GridSpec, SweepError> {
        let shown = path.display().to_string();
        let text = crate::io::read_text(path, crate::io::MAX_CONFIG_BYTES).map_err(|e| {
            SweepError::Input {
                what: shown.clone(),
                reason: format!("cannot read: {e}"),
            }
        })?;
        let f: GridFile = toml::from_str(&text).map_err(|e| SweepError::Input {
            what: shown.clone(),
            reason: e.to_string().trim_end().to_string(),
        })?;
        if f.version != 1 {
            return Err(SweepError::Input {
                what: format!("{shown}: version"),
                reason: format!(
                    "version {} is not supported (this build reads 1)",
                    f.version
                ),
            });
        }
        let dir = path.parent().map(Path::to_path_buf);
        let scenario = match f.scenario {
            Some(s) => config::anchor(config::PresetKind::Scenario, &s, dir.as_deref()),
            None => "default".into(),
        };
        let mut axes = Vec::new();
        for (key, v) in f.grid {
            let vals = match v {
                toml::Value::Array(a) => a,
                other => vec![other],
            };
            let mut raw = Vec::with_capacity(vals.len());
            for (i, v) in vals.into_iter().enumerate() {
                raw.push(match v {
                    toml::Value::String(s) => s,
                    toml::Value::Integer(n) => n.to_string(),
                    toml::Value::Float(x) => x.to_string(),
                    toml::Value::Boolean(b) => b.to_string(),
                    other => {
                        return Err(SweepError::Input {
                            what: format!("{shown}: grid.{key}[{i}]"),
                            reason: format!(
                                "`{other}` is not a value (give a string, number or boolean)"
                            ),
                        });
                    }
                });
            }
            axes.push((key, raw));
        }
        Ok(GridSpec {
            scenario,
            dir,
            axes,
        })
    }

    /// Add (or replace) an axis; command-line axes override a sweep file's.
    pub fn set_axis(&mut self, key: &str, values: Vec<String>) {
        let k = canonical_key(key);
        self.axes.retain(|(a, _)| canonical_key(a) != k);
        self.axes.push((key.to_string(), values));
    }
}

/// One typed axis.
#[derive(Debug, Clone, PartialEq)]
pub struct Axis {
    /// Canonical dotted key (`parallel.tp`).
    pub field: String,
    /// Values as the sweep shows them (after range expansion).
    pub values: Vec<String>,
    typed: Vec<toml::Value>,
}

/// An expanded, typed grid.
#[derive(Debug, Clone)]
pub struct Grid {
    pub scenario: String,
    /// Scenario axes, outermost first (the strategy axis is not among them).
    pub axes: Vec<Axis>,
    pub strategies: Vec<Strategy>,
    base: toml::Table,
    base_name: String,
}

/// Expand `a..b` (inclusive, integers) inside a value: `2..16`, `chunked:2..16`.
fn expand_range(v: &str) -> Result<Vec<String>, String> {
    let Some((head, tail)) = v.split_once("..") else {
        return Ok(vec![v.to_string()]);
    };
    // The number before `..` is the digits (and count suffix) at the end of `head`.
    let start_at = head
        .char_indices()
        .rev()
        .take_while(|(_, c)| c.is_ascii_alphanumeric())
        .last()
        .map_or(head.len(), |(i, _)| i);
    let start_at = head[start_at..]
        .find(|c: char| c.is_ascii_digit())
        .map_or(head.len(), |o| start_at + o);
    let (prefix, lo) = head.split_at(start_at);
    let lo = crate::units::parse_count(lo).map_err(|_| format!("range `{v}`: bad start"))?;
    // `a..b` every integer, `a..b+s` every s-th, `a..b*f` a geometric series.
    let (end, step) = match tail.find(['+', '*']) {
        Some(i) => (&tail[..i], Some((&tail[i..i + 1], &tail[i + 1..]))),
        None => (tail, None),
    };
    let hi = crate::units::parse_count(end).map_err(|_| format!("range `{v}`: bad end"))?;
    if hi < lo {
        return Err(format!("range `{v}` is empty (end before start)"));
    }
    let step_n = |s: &str| -> Result<i64, String> {
        s.parse::<i64>()
            .ok()
            .filter(|n| *n >= 1)
            .ok_or_else(|| format!("range `{v}`: step `{s}` must be a positive integer"))
    };
    let mut out = Vec::new();
    let mut n = lo;
    while n <= hi {
        if out.len() >= 100_000 {
            return Err(format!("range `{v}` has more than 100000 values"));
        }
        out.push(format!("{prefix}{n}"));
        n = match step {
            None => n + 1,
            Some(("+", s)) => n.saturating_add(step_n(s)?),
            Some((_, f)) => match step_n(f)? {
                1 => return Err(format!("range `{v}`: factor must be at least 2")),
                f if n <= 0 => {
                    return Err(format!(
                        "range `{v}`: a geometric range (×{f}) must start above 0"
                    ));
                }
                f => n.saturating_mul(f),
            },
        };
    }
    Ok(out)
}

fn parse_bool(s: &str) -> Option<bool> {
    match s.trim().to_ascii_lowercase().as_str() {
        "true" | "on" | "yes" | "1" => Some(true),
        "false" | "off" | "no" | "0" => Some(false),
        _ => None,
    }
}

/// Type a raw value like the base scenario's value of that field; for a field the base
/// does not set, the most specific type that parses (integer count, float, boolean,
/// string), left for the scenario format to accept or refuse.
fn typed(
    field: &str,
    raw: &str,
    like: Option<&toml::Value>,
    dir: Option<&Path>,
) -> Result<toml::Value, String> {
    use toml::Value as V;
    let want = |t: &str| format!("`{raw}` is not {t}");
    Ok(match like {
        Some(V::Integer(_)) => V::Integer(
            crate::units::parse_count(raw).map_err(|_| want("an integer (e.g. 8 or 4k)"))?,
        ),
        Some(V::Float(_)) => V::Float(raw.trim().parse().map_err(|_| want("a number"))?),
        Some(V::Boolean(_)) => V::Boolean(parse_bool(raw).ok_or_else(|| want("on/off"))?),
        Some(V::String(_)) => {
            if field == "model" {
                V::String(config::anchor(config::PresetKind::Model, raw, dir))
            } else if field == "hardware" {
                V::String(config::anchor(config::PresetKind::Hardware, raw, dir))
            } else {
                V::String(raw.to_string())
            }
        }
        Some(other) => {
            return Err(format!(
                "field `{field}` holds {} and cannot be swept",
                other.type_str()
            ));
        }
        None => {
            if let Ok(n) = crate::units::parse_count(raw) {
                V::Integer(n)
            } else if let Ok(x) = raw.trim().parse::<f64>() {
                V::Float(x)
            } else if let Some(b) = parse_bool(raw) {
                V::Boolean(b)
            } else {
                V::String(raw.to_string())
            }
        }
    })
}

fn get<'a>(t: &'a toml::Table, field: &str) -> Option<&'a toml::Value> {
    let mut parts = field.split('.');
    let mut cur = t.get(parts.next()?)?;
    for p in parts {
        cur = cur.as_table()?.get(p)?;
    }
    Some(cur)
}

fn set(t: &mut toml::Table, field: &str, v: toml::Value) -> Result<(), String> {
    let parts: Vec<&str> = field.split('.').collect();
    let (last, path) = parts.split_last().expect("split gives one part");
    let mut cur = t;
    for p in path {
        let e = cur
            .entry(p.to_string())
            .or_insert_with(|| toml::Value::Table(Default::default()));
        cur = e
            .as_table_mut()
            .ok_or_else(|| format!("`{p}` in field `{field}` is not a table"))?;
    }
    cur.insert(last.to_string(), v);
    Ok(())
}

fn file_of(t: toml::Table) -> Result<ScenarioFile, String> {
    toml::Value::Table(t)
        .try_into::<ScenarioFile>()
        .map_err(|e| e.to_string().trim_end().to_string())
}

impl Grid {
    /// Expand ranges, type every value against the base scenario, and check each value
    /// of each axis is accepted by the scenario format.
    pub fn new(spec: &GridSpec) -> Result<Grid, SweepError> {
        let input = |what: String, reason: String| SweepError::Input { what, reason };
        let (src, file) = config::read_scenario(&spec.scenario)
            .map_err(|e| input(format!("base scenario `{}`", spec.scenario), e.to_string()))?;
        let mut base = match toml::Value::try_from(&file) {
            Ok(toml::Value::Table(t)) => t,
            _ => {
                return Err(input(
                    src.name.clone(),
                    "scenario does not serialize as a table".into(),
                ));
            }
        };
        // The base's model and hardware paths are relative to the base scenario's file.
        for (key, kind) in [
            ("model", config::PresetKind::Model),
            ("hardware", config::PresetKind::Hardware),
        ] {
            if let Some(toml::Value::String(v)) = base.get_mut(key) {
                *v = config::anchor(kind, v, src.dir.as_deref());
            }
        }
        let mut axes: Vec<Axis> = Vec::new();
        let mut strategies = None;
        for (key, raw) in &spec.axes {
            let field = canonical_key(key);
            let what = || format!("sweep field `{key}`");
            if raw.is_empty() {
                return Err(input(what(), "no values (the grid would be empty)".into()));
            }
            let mut values = Vec::new();
            for r in raw {
                for part in r.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                    values.extend(expand_range(part).map_err(|e| input(what(), e))?);
                }
            }
            if values.is_empty() {
                return Err(input(what(), "no values (the grid would be empty)".into()));
            }
            if field == "strategy" {
                let s = values
                    .iter()
                    .map(|v| Strategy::parse(v))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| input(what(), e))?;
                strategies = Some(s);
                continue;
            }
            if axes.iter().any(|a| a.field == field) {
                return Err(input(what(), format!("`{field}` is given twice")));
            }
            let like = get(&base, &field);
            let mut typed_values = Vec::with_capacity(values.len());
            for v in &values {
                let t =
                    typed(&field, v, like, spec.dir.as_deref()).map_err(|e| input(what(), e))?;
                // The scenario format must accept the field and the value's type.
                let mut probe = base.clone();
                set(&mut probe, &field, t.clone()).map_err(|e| input(what(), e))?;
                file_of(probe).map_err(|e| {
                    input(
                        what(),
                        format!("value `{v}` is not accepted by the scenario format: {e}"),
                    )
                })?;
                typed_values.push(t);
            }
            axes.push(Axis {
                field,
                values,
                typed: typed_values,
            });
        }
        let strategies = match strategies {
            Some(s) => s,
            None => file
                .strategies
                .iter()
                .map(|v| Strategy::parse(v))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| input(src.name.clone(), e))?,
        };
        if strategies.is_empty() {
            return Err(input(
                "sweep".into(),
                "no strategies (the grid would be empty)".into(),
            ));
        }
        let g = Grid {
            scenario: spec.scenario.clone(),
            axes,
            strategies,
            base,
            base_name: src.name,
        };
        if g.points()
            .checked_mul(g.strategies.len() as u64)
            .is_none_or(|n| n > 100_000_000)
        {
            return Err(input(
                "sweep".into(),
                "more than 10^8 rows; split the grid".into(),
            ));
        }
        Ok(g)
    }

    /// Number of scenario points (rows = points × strategies).
    pub fn points(&self) -> u64 {
        self.axes
            .iter()
            .try_fold(1u64, |acc, a| acc.checked_mul(a.values.len() as u64))
            .unwrap_or(u64::MAX)
    }

    pub fn rows(&self) -> u64 {
        self.points().saturating_mul(self.strategies.len() as u64)
    }

    /// The axis value indices of scenario point `i` (first axis outermost).
    pub fn coords(&self, mut i: u64) -> Vec<usize> {
        let mut c = vec![0; self.axes.len()];
        for (k, a) in self.axes.iter().enumerate().rev() {
            let n = a.values.len() as u64;
            c[k] = (i % n) as usize;
            i /= n;
        }
        c
    }

    /// `field=value` of each axis at point `i`.
    pub fn describe(&self, i: u64) -> Vec<(String, String)> {
        self.coords(i)
            .into_iter()
            .zip(&self.axes)
            .map(|(c, a)| (a.field.clone(), a.values[c].clone()))
            .collect()
    }

    /// The validated scenario of point `i`, with the grid's strategies.
    pub fn scenario(&self, i: u64) -> Result<Scenario, String> {
        self.scenario_with(i, &[], "sweep")
    }

    /// Point `i`'s scenario with the fields `extra` set on top of its axes (`by` names
    /// who set them, for errors: `search`).
    pub fn scenario_with(
        &self,
        i: u64,
        extra: &[(&str, toml::Value)],
        by: &str,
    ) -> Result<Scenario, String> {
        let mut t = self.base.clone();
        let mut origins = config::Origins::default();
        for (c, a) in self.coords(i).into_iter().zip(&self.axes) {
            set(&mut t, &a.field, a.typed[c].clone())?;
            origins.flags.insert(
                a.field.clone(),
                format!("command line (sweep {}={})", a.field, a.values[c]),
            );
        }
        for (field, v) in extra {
            set(&mut t, field, v.clone())?;
            origins
                .flags
                .insert(field.to_string(), format!("{by} ({field}={v})"));
        }
        let mut f = file_of(t)?;
        // Validated with `sequential` alone: a strategy that does not fit the point (a
        // chunk count that does not divide the tokens) fails its own row, not the point.
        f.strategies = vec![Strategy::Sequential.to_string()];
        // Every path in `base` and the axes was resolved against its own file's directory
        // in `new`, so the scenario resolves nothing further.
        let mut sc = config::scenario_from_file(&self.base_name, None, f, &origins)
            .map_err(|e| e.to_string())?;
        sc.strategies = self.strategies.clone();
        Ok(sc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(axes: &[(&str, &[&str])]) -> GridSpec {
        GridSpec {
            scenario: "default".into(),
            dir: None,
            axes: axes
                .iter()
                .map(|(k, v)| (k.to_string(), v.iter().map(|s| s.to_string()).collect()))
                .collect(),
        }
    }

    #[test]
    fn ranges_expand_inclusive_with_prefixes_and_suffixes() {
        assert_eq!(expand_range("2..4").unwrap(), ["2", "3", "4"]);
        assert_eq!(
            expand_range("chunked:2..4").unwrap(),
            ["chunked:2", "chunked:3", "chunked:4"]
        );
        assert_eq!(expand_range("1k..1025").unwrap(), ["1024", "1025"]);
        assert_eq!(expand_range("flash").unwrap(), ["flash"]);
        assert_eq!(
            expand_range("chunked:2..16*2").unwrap(),
            ["chunked:2", "chunked:4", "chunked:8", "chunked:16"]
        );
        assert_eq!(expand_range("1..7+3").unwrap(), ["1", "4", "7"]);
        assert!(expand_range("1..7*1").is_err());
        assert!(expand_range("0..7*2").is_err());
        assert!(expand_range("5..2").is_err());
        assert!(expand_range("a..b").is_err());
    }

    #[test]
    fn points_are_the_product_first_axis_outermost() {
        let g = Grid::new(&spec(&[
            ("tp", &["2,4"]),
            ("seq", &["1k", "2k", "4k"]),
            ("strategy", &["sequential,chunked:2..3,flash"]),
        ]))
        .unwrap();
        assert_eq!(g.points(), 6);
        assert_eq!(g.rows(), 24);
        assert_eq!(g.strategies.len(), 4);
        assert_eq!(
            g.describe(4),
            [
                ("parallel.tp".to_string(), "4".to_string()),
                ("seq".to_string(), "2k".to_string())
            ]
        );
        let sc = g.scenario(4).unwrap();
        assert_eq!((sc.parallel.tp, sc.seq), (4, 2048));
        assert_eq!(sc.strategies, g.strategies);
    }

    #[test]
    fn values_are_typed_like_the_base_field() {
        let g = Grid::new(&spec(&[
            ("interference", &["on,off"]),
            ("transport", &["copy"]),
        ]))
        .unwrap();
        assert!(g.scenario(0).unwrap().interference);
        assert!(!g.scenario(1).unwrap().interference);
        // A field the base scenario leaves unset (nodes) is typed by what parses.
        let g = Grid::new(&GridSpec {
            scenario: "default".into(),
            dir: None,
            axes: vec![
                ("hardware".into(), vec!["dgx-h100".into()]),
                ("nodes".into(), vec!["2,4".into()]),
            ],
        })
        .unwrap();
        assert_eq!(g.scenario(1).unwrap().hardware.topology.gpu_count(), 32);
        let e = Grid::new(&spec(&[("batch", &["lots"])]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("batch") && e.contains("lots") && e.contains("integer"),
            "{e}"
        );
        let e = Grid::new(&spec(&[("interference", &["maybe"])]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("maybe"), "{e}");
    }

    #[test]
    fn unknown_fields_and_empty_axes_are_refused() {
        let e = Grid::new(&spec(&[("colour", &["red"])]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("colour") && e.contains("unknown field"), "{e}");
        let e = Grid::new(&spec(&[("parallel.cp", &["2"])]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("parallel.cp") && e.contains("unknown field"),
            "{e}"
        );
        let e = Grid::new(&spec(&[("tp", &[])])).unwrap_err().to_string();
        assert!(e.contains("empty"), "{e}");
        let e = Grid::new(&spec(&[("tp", &[","])])).unwrap_err().to_string();
        assert!(e.contains("empty"), "{e}");
        let e = Grid::new(&spec(&[("strategy", &["fastest"])]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("fastest"), "{e}");
    }

    #[test]
    fn an_invalid_point_says_which_sweep_value_caused_it() {
        let g = Grid::new(&spec(&[("tp", &["3"])])).unwrap();
        let e = g.scenario(0).unwrap_err();
        assert!(e.contains("sweep parallel.tp=3"), "{e}");
    }
}
