//! The one path by which a scenario's fields are set on top of a scenario file: command
//! line flags and Python keyword arguments fill an [`Overrides`]; the sweep sets its
//! axes on the file's table and labels them the same way ([`Origins`]). The file's own
//! `model` and `hardware` paths are anchored to its folder first ([`super::anchor`]), so
//! each path resolves against whatever names it: the file's against the file's folder,
//! an override's against the working directory.

use super::{ConfigError, Origins, PresetKind, ScenarioFile, anchor, read_scenario};
use crate::scenario::Scenario;

/// Scenario fields to set over a scenario file; `None` (or empty) keeps the file's.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Overrides {
    pub model: Option<String>,
    pub hardware: Option<String>,
    pub workload: Option<String>,
    pub tp: Option<i64>,
    pub dp: Option<i64>,
    pub ulysses: Option<i64>,
    pub pp: Option<i64>,
    pub pp_schedule: Option<String>,
    pub order: Option<String>,
    pub ep: Option<i64>,
    pub batch: Option<i64>,
    pub seq: Option<i64>,
    pub micro_batches: Option<i64>,
    pub dtype: Option<String>,
    pub transport: Option<String>,
    pub nodes: Option<i64>,
    pub interference: Option<bool>,
    pub recompute: Option<String>,
    pub zero: Option<i64>,
    /// `auto`, `burst` or `sustained`.
    pub clocks: Option<String>,
    pub causal: Option<bool>,
    /// `fwd-bwd` or `fwd`.
    pub passes: Option<String>,
    /// `uniform`, `zipf:S` or loads per expert-parallel rank.
    pub routing: Option<String>,
    /// Per-site strategies, added to the file's `[sites]`.
    pub sites: Vec<(String, String)>,
    pub strategies: Option<Vec<String>>,
}

/// Each field of [`Overrides`]: (its argument name as the Python package takes it, the
/// scenario file's key it sets, the command-line flag that sets it), in the order
/// [`Overrides::apply`] sets them. The one list the front ends name fields from.
pub const FIELDS: [(&str, &str, &str); 25] = [
    ("model", "model", "--model"),
    ("hardware", "hardware", "--hardware"),
    ("workload", "workload", "--workload"),
    ("tp", "parallel.tp", "--tp"),
    ("dp", "parallel.dp", "--dp"),
    ("ulysses", "parallel.ulysses", "--ulysses"),
    ("pp", "parallel.pp", "--pp"),
    ("pp_schedule", "parallel.pp_schedule", "--pp-schedule"),
    ("rank_order", "parallel.order", "--rank-order"),
    ("ep", "parallel.ep", "--ep"),
    ("batch", "batch", "--batch"),
    ("seq", "seq", "--seq"),
    ("micro_batches", "micro_batches", "--micro-batches"),
    ("dtype", "dtype", "--dtype"),
    ("transport", "transport", "--transport"),
    ("nodes", "nodes", "--nodes"),
    ("interference", "interference", "--no-interference"),
    ("recompute", "recompute", "--recompute"),
    ("zero", "zero", "--zero"),
    ("clocks", "clocks", "--clocks"),
    ("causal", "causal", "--non-causal"),
    ("passes", "passes", "--forward-only"),
    ("routing", "routing", "--routing-skew"),
    ("sites", "sites", "--site"),
    ("strategies", "strategies", "--strategy"),
];

/// The command-line flag that sets scenario key `key` ("a flag" for another key).
pub fn flag_of(key: &str) -> &'static str {
    FIELDS.iter().find(|f| f.1 == key).map_or("a flag", |f| f.2)
}

/// The Python argument that sets scenario key `key` (the key itself for another).
pub fn argument_of(key: &str) -> &str {
    FIELDS.iter().find(|f| f.1 == key).map_or(key, |f| f.0)
}

impl Overrides {
    /// Apply to `f` (whose paths are already anchored), recording in `o` where each set
    /// key came from: `label(key)` (e.g. `command line (--tp)` or `argument tp`).
    pub fn apply(&self, f: &mut ScenarioFile, o: &mut Origins, label: &dyn Fn(&str) -> String) {
        let mut set = |key: &str| {
            o.flags.insert(key.to_string(), label(key));
        };
        macro_rules! put {
            ($field:expr, $value:expr, $key:expr) => {
                if let Some(v) = &$value {
                    $field = v.clone();
                    set($key);
                }
            };
        }
        put!(f.model, self.model, "model");
        put!(f.hardware, self.hardware, "hardware");
        put!(f.workload, self.workload, "workload");
        put!(f.parallel.tp, self.tp, "parallel.tp");
        put!(f.parallel.dp, self.dp, "parallel.dp");
        put!(f.parallel.ulysses, self.ulysses, "parallel.ulysses");
        put!(f.parallel.pp, self.pp, "parallel.pp");
        put!(
            f.parallel.pp_schedule,
            self.pp_schedule,
            "parallel.pp_schedule"
        );
        put!(f.parallel.order, self.order, "parallel.order");
        put!(f.parallel.ep, self.ep, "parallel.ep");
        put!(f.batch, self.batch, "batch");
        put!(f.seq, self.seq, "seq");
        put!(f.micro_batches, self.micro_batches, "micro_batches");
        put!(f.dtype, self.dtype, "dtype");
        put!(f.transport, self.transport, "transport");
        if let Some(v) = self.nodes {
            f.nodes = Some(v);
            set("nodes");
        }
        put!(f.interference, self.interference, "interference");
        put!(f.recompute, self.recompute, "recompute");
        put!(f.zero, self.zero, "zero");
        put!(f.clocks, self.clocks, "clocks");
        put!(f.causal, self.causal, "causal");
        put!(f.passes, self.passes, "passes");
        put!(f.routing, self.routing, "routing");
        for (k, v) in &self.sites {
            f.sites.insert(k.trim().to_string(), v.trim().to_string());
            set("sites");
        }
        put!(f.strategies, self.strategies, "strategies");
    }

    /// Read `scenario` (a preset name or a path), anchor its paths to its folder, apply
    /// these overrides and validate: the scenario and the file form it came from.
    pub fn scenario(
        &self,
        scenario: &str,
        label: &dyn Fn(&str) -> String,
    ) -> Result<(Scenario, ScenarioFile), ConfigError> {
        let (src, mut f) = read_scenario(scenario)?;
        let dir = src.dir.as_deref();
        f.model = anchor(PresetKind::Model, &f.model, dir);
        f.hardware = anchor(PresetKind::Hardware, &f.hardware, dir);
        let mut o = Origins::default();
        self.apply(&mut f, &mut o, label);
        let sc = super::scenario_from_file(&src.name, None, f.clone(), &o)?;
        Ok((sc, f))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Degrees whose product wraps around u64 (or passes 2^32 ranks) are one clear
    /// error, not a division by zero or a world of absurd size.
    #[test]
    fn degrees_whose_product_overflows_are_refused() {
        for (tp, ulysses, dp) in [(1 << 32, 1 << 32, 1), (1 << 62, 4, 1), (8, 1, 1 << 40)] {
            let o = Overrides {
                workload: Some("layer".into()),
                tp: Some(tp),
                ulysses: Some(ulysses),
                dp: Some(dp),
                ..Default::default()
            };
            let e = o
                .scenario("default", &|k| format!("argument ({k})"))
                .unwrap_err()
                .to_string();
            assert!(e.contains("is beyond 2^32"), "{e}");
        }
    }

    #[test]
    fn overrides_set_fields_and_blame_their_origin() {
        let o = Overrides {
            tp: Some(8),
            model: Some("llama-3-8b".into()),
            strategies: Some(vec!["flash".into()]),
            ..Default::default()
        };
        let (sc, f) = o
            .scenario("default", &|k| format!("argument `{k}`"))
            .unwrap();
        assert_eq!(sc.parallel.tp, 8);
        assert_eq!(f.model, "llama-3-8b");
        let bad = Overrides {
            tp: Some(0),
            ..Default::default()
        };
        let e = bad
            .scenario("default", &|k| format!("argument `{k}`"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("argument `parallel.tp`"), "{e}");
        // Every key an override sets is one of FIELDS.
        let all = Overrides {
            model: Some("m".into()),
            hardware: Some("h".into()),
            workload: Some("w".into()),
            tp: Some(1),
            dp: Some(1),
            ulysses: Some(1),
            pp: Some(1),
            pp_schedule: Some("1f1b".into()),
            order: Some("o".into()),
            ep: Some(1),
            batch: Some(1),
            seq: Some(1),
            micro_batches: Some(1),
            dtype: Some("d".into()),
            transport: Some("t".into()),
            nodes: Some(1),
            interference: Some(false),
            recompute: Some("full".into()),
            zero: Some(1),
            clocks: Some("burst".into()),
            causal: Some(false),
            passes: Some("fwd".into()),
            routing: Some("uniform".into()),
            sites: vec![("fc2".into(), "flash".into())],
            strategies: Some(vec![]),
        };
        let (_, mut f) = read_scenario("default").unwrap();
        let mut origins = Origins::default();
        all.apply(&mut f, &mut origins, &|k| k.to_string());
        let set: Vec<&str> = origins.flags.keys().map(String::as_str).collect();
        let mut keys: Vec<&str> = FIELDS.iter().map(|f| f.1).collect();
        keys.sort_unstable();
        assert_eq!(set, keys);
    }
}
