//! Entry points of the fuzz targets (`fuzz/`, cargo-fuzz + libFuzzer): one per input
//! parser, each taking arbitrary bytes through parsing and validation the way the CLI
//! would. None may panic, hang or allocate without bound on any input; every outcome is
//! a value or a typed error. The test suite runs each over its checked-in corpus and
//! deterministic mutations of it (`smoke` below), so the targets keep compiling and
//! running without libFuzzer.

use crate::config::{self, HardwareFile, ModelFile, ScenarioFile};
use crate::sweep::{Grid, GridSpec, SweepFile};
use crate::timeline::Timeline;
use crate::timeline::file::TimelineFile;

/// A fuzz target's body.
pub type Target = fn(&[u8]);

/// The parsers, by target name (the names of `fuzz/fuzz_targets/*.rs` and corpus folders).
pub const TARGETS: [(&str, Target); 8] = [
    ("scenario_toml", scenario_toml),
    ("model_toml", model_toml),
    ("hf_config_json", hf_config_json),
    ("hardware_toml", hardware_toml),
    ("nccl_xml", nccl_xml),
    ("sweep_toml", sweep_toml),
    ("timeline_json", timeline_json),
    ("sweep_json", sweep_json),
];

fn text(data: &[u8]) -> Option<&str> {
    std::str::from_utf8(data).ok()
}

fn is_path(s: &str) -> bool {
    s.contains('/') || s.ends_with(".toml") || s.ends_with(".json")
}

/// A scenario TOML, validated against the embedded presets (a scenario naming files is
/// parsed but not loaded: the fuzzer must not read the machine's files).
pub fn scenario_toml(data: &[u8]) {
    let Some(t) = text(data) else { return };
    let Ok(f) = toml::from_str::<ScenarioFile>(t) else {
        return;
    };
    if is_path(&f.model) || is_path(&f.hardware) {
        return;
    }
    if let Ok(sc) = config::scenario_from_file("fuzz.toml", None, f, &Default::default()) {
        // A valid scenario also builds its plans. Validation bounds a plan at the op
        // limit (2·10^8 ops, gigabytes); the fuzzer builds only small ones so that every
        // input runs in milliseconds (the limit itself is tested in tests/it/limits.rs).
        let big = sc.workload == crate::scenario::Workload::Step
            && sc.model.layers.saturating_mul(sc.micro_batches) > 4;
        if big {
            return;
        }
        for &s in &sc.strategies {
            let _ = crate::strategy::build(&sc, sc.workload, s);
        }
    }
}

pub fn model_toml(data: &[u8]) {
    let Some(t) = text(data) else { return };
    if let Ok(f) = toml::from_str::<ModelFile>(t) {
        let _ = config::model_from_file("fuzz.toml", f);
    }
}

/// A Hugging Face `config.json`, imported and validated as a model.
pub fn hf_config_json(data: &[u8]) {
    let Some(t) = text(data) else { return };
    if let Ok(f) = config::hf::model_file_from_hf("config.json", "fuzz", t) {
        let _ = config::model_from_file("config.json", f);
    }
}

/// A hardware profile; an `nccl-xml` topology's file is not read (see `nccl_xml`).
pub fn hardware_toml(data: &[u8]) {
    let Some(t) = text(data) else { return };
    if let Ok(f) = toml::from_str::<HardwareFile>(t) {
        if f.topology.kind == "nccl-xml" {
            return;
        }
        let _ = config::hardware_from_file("fuzz.toml", f);
    }
}

pub fn nccl_xml(data: &[u8]) {
    let Some(t) = text(data) else { return };
    let _ = crate::topology::from_nccl_xml("fuzz.xml", "fuzz", t);
}

/// A sweep file's grid over the `default` scenario (files it names are not read).
pub fn sweep_toml(data: &[u8]) {
    let Some(t) = text(data) else { return };
    let Ok(f) = toml::from_str::<crate::sweep::grid::GridFile>(t) else {
        return;
    };
    let mut axes = Vec::new();
    for (k, v) in f.grid {
        let vals = match v {
            toml::Value::Array(a) => a,
            other => vec![other],
        };
        let raw: Vec<String> = vals
            .into_iter()
            .map(|v| match v {
                toml::Value::String(s) => s,
                other => other.to_string(),
            })
            .collect();
        if raw.iter().any(|r| is_path(r)) {
            return;
        }
        axes.push((k, raw));
    }
    let spec = GridSpec {
        scenario: "default".into(),
        dir: None,
        axes,
    };
    if let Ok(g) = Grid::new(&spec) {
        // The first and last points' scenarios (no simulation: that is not parsing).
        let _ = g.scenario(0);
        let _ = g.scenario(g.points().saturating_sub(1));
    }
}

/// A timeline file read back (plot, validate), with its metrics.
pub fn timeline_json(data: &[u8]) {
    let Ok(f) = serde_json::from_slice::<TimelineFile>(data) else {
        return;
    };
    if let Ok(t) = Timeline::try_from(f) {
        let m = crate::timeline::metrics::metrics(&t);
        assert!(
            !m.makespan.is_nan(),
            "a validated timeline gave a NaN makespan"
        );
    }
}

/// A sweep.json read back (plot, merge), with its summary, CSV and charts.
pub fn sweep_json(data: &[u8]) {
    let Some(t) = text(data) else { return };
    if let Ok(f) = SweepFile::parse("fuzz.json", t) {
        let _ = crate::sweep::summary(&f, None, None);
        let _ = crate::sweep::summary(
            &f,
            None,
            Some(&crate::report::RankBy("exposed_comm_us".into())),
        );
        let _ = crate::sweep::csv(&f);
        let _ = crate::plot::lines_from_sweep(&f, "seq", "makespan_us", "auto", &[]);
        let _ = crate::plot::heatmap_from_sweep(&f, "seq", "tp", "makespan_us", "family", &[]);
    }
}

/// Deterministic mutations of `seed` (bit flips, truncations, byte insertions and
/// duplications of a span), `n` of them, from a fixed xorshift stream.
pub fn mutations(seed: &[u8], n: usize) -> Vec<Vec<u8>> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15 ^ seed.len() as u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let interesting: [&[u8]; 8] = [
        b"0",
        b"-1",
        b"18446744073709551615",
        b"1e308",
        b"nan",
        b"\"\"",
        b"[]",
        b"99999999999",
    ];
    (0..n)
        .map(|_| {
            let mut v = seed.to_vec();
            for _ in 0..1 + next() % 4 {
                let len = v.len().max(1);
                let at = (next() as usize) % len;
                match next() % 5 {
                    0 if !v.is_empty() => {
                        let i = at.min(v.len() - 1);
                        v[i] ^= 1 << (next() % 8);
                    }
                    1 => v.truncate(at),
                    2 => {
                        let ins = interesting[(next() % 8) as usize];
                        let at = at.min(v.len());
                        v.splice(at..at, ins.iter().copied());
                    }
                    3 if !v.is_empty() => {
                        let a = at.min(v.len() - 1);
                        let b = (a + (next() as usize % 64)).min(v.len());
                        let span = v[a..b].to_vec();
                        v.splice(a..a, span);
                    }
                    _ => {
                        // Replace a run of digits with an interesting number.
                        if let Some(p) = v.iter().skip(at).position(u8::is_ascii_digit) {
                            let s = at + p;
                            let e = v[s..]
                                .iter()
                                .position(|c| !c.is_ascii_digit())
                                .map_or(v.len(), |q| s + q);
                            let ins = interesting[(next() % 8) as usize];
                            v.splice(s..e, ins.iter().copied());
                        }
                    }
                }
            }
            v
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// Every target over its whole corpus (the hand-picked seeds and what fuzzing kept,
    /// minimized) and 200 deterministic mutations of each of its first four files: the
    /// smoke run that keeps the targets compiling and running in the test suite.
    #[test]
    fn smoke() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
        for (name, f) in TARGETS {
            let dir = root.join(name);
            let mut files: Vec<_> = std::fs::read_dir(&dir)
                .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
                .map(|e| e.unwrap().path())
                .collect();
            files.sort();
            assert!(!files.is_empty(), "{name}: empty corpus");
            let mut runs = 0;
            for (i, p) in files.iter().enumerate() {
                let seed = std::fs::read(p).unwrap();
                f(&seed);
                if i < 4 {
                    for m in mutations(&seed, 200) {
                        f(&m);
                        runs += 1;
                    }
                }
            }
            assert!(runs >= 200, "{name}: {runs} runs");
        }
    }

    #[test]
    fn mutations_are_deterministic_and_differ() {
        let a = mutations(b"batch = 32\nseq = 4096\n", 50);
        assert_eq!(a, mutations(b"batch = 32\nseq = 4096\n", 50));
        assert!(a.iter().any(|m| m != b"batch = 32\nseq = 4096\n"));
    }
}
