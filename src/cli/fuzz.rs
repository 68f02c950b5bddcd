//! The body of the `cli_args` fuzz target: whole command lines, and the scenario, model
//! and hardware files they name, generated from the fuzzer's bytes (`arbitrary`) and run
//! through [`super::dispatch`] in this process, as the binary runs them.
//!
//! The generator knows the command line's shape (it reads every subcommand's options
//! from the clap definition, so a new option is fuzzed without a change here) and the
//! vocabulary of its values (preset, strategy, workload and scenario-field names, sizes,
//! edge-case numbers), so most inputs get past parsing into validation, building and
//! simulation. Each run is held small by options the body appends (`--max-memory 0.25`,
//! `--max-events 50000`, one thread, outputs in a scratch folder), which the generated
//! options may not repeat; what it checks: no panic, an exit code the README names,
//! and an error message of bounded length.

use arbitrary::{Arbitrary, Unstructured};
use std::path::{Path, PathBuf};

/// The subcommands fuzzed (run and calibrate need a GPU, plot and validate read outputs
/// that the other targets fuzz as files).
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Sub {
    Simulate,
    Collective,
    Sweep,
    Search,
}

impl Sub {
    fn name(self) -> &'static str {
        match self {
            Sub::Simulate => "simulate",
            Sub::Collective => "collective",
            Sub::Sweep => "sweep",
            Sub::Search => "search",
        }
    }
}

/// An integer as the fuzzer picks it: small, an edge of some type, or any.
#[derive(Arbitrary, Debug)]
enum Int {
    Small(u8),
    Edge(u8),
    Any(i64),
}

const EDGE_INTS: [&str; 16] = [
    "0",
    "-1",
    "1",
    "3",
    "7",
    "1000",
    "4096",
    "65536",
    "1048576",
    "2147483647",
    "2147483648",
    "4294967296",
    "9007199254740993",
    "9223372036854775807",
    "18446744073709551615",
    "1000000000000000000",
];

const EDGE_FLOATS: [&str; 12] = [
    "0.0", "-0.0", "1e-300", "1e300", "nan", "inf", "-inf", "-1.0", "0.5", "1.5", "1e9", "2.0",
];

/// Values that mean something to some option or field.
const WORDS: [&str; 48] = [
    "all-reduce",
    "all-gather",
    "reduce-scatter",
    "all-to-all",
    "sendrecv",
    "ring",
    "tree",
    "direct",
    "pairwise",
    "simple",
    "ll",
    "ll128",
    "1f1b",
    "interleaved:2",
    "gpipe",
    "selective",
    "tp-inner",
    "dp-inner",
    "bf16",
    "fp8",
    "fp32",
    "nccl",
    "copy-engine",
    "auto",
    "sustained",
    "off",
    "json",
    "csv",
    "table",
    "zipf:1.2",
    "1KiB",
    "8GiB",
    "1KiB:8GiB",
    "rank:0=2",
    "rank:1=0.5",
    "link:gpu0->nvswitch=3",
    "layer=0-1",
    "0:100",
    "1/4",
    "0/0",
    "tokens_per_s",
    "makespan_us",
    "fc1=flash",
    "normal",
    "uniform",
    "chunked:2..16",
    "chunked:1000000",
    "flash-ep:2",
];

/// One option's value.
#[derive(Arbitrary, Debug)]
enum Value {
    /// A name from the vocabulary (presets, strategies, workloads, fields, [`WORDS`]).
    Word(u16),
    Int(Int),
    Float(u8),
    /// Comma-separated names or numbers.
    List(Vec<Item>),
    /// `NAME=VALUE`, as `--set`, `--site` and `--straggler` take.
    Pair(u16, Item),
    /// Any short text (without `/`: the fuzzer names no file outside its scratch folder).
    Raw(String),
    /// The path of one of the generated files (or of a missing one).
    File(u8),
    Empty,
}

#[derive(Arbitrary, Debug)]
enum Item {
    Word(u16),
    Int(Int),
    Float(u8),
}

/// A generated file.
#[derive(Arbitrary, Debug)]
enum Doc {
    /// A scenario file: `field = value` lines over the scenario's fields (dotted keys).
    Scenario(Vec<(u16, Value)>),
    /// An embedded preset (model, hardware or scenario) with one line's value replaced.
    Preset { which: u16, line: u16, value: Value },
}

/// An option of the subcommand (by its index among those the generator may set) and its
/// value (ignored for a flag).
///
/// With `fit`, the value is one of the option's kind (its possible values, a count, a
/// factor, a preset of the kind it names, `SITE=STRATEGY`…), picked by `pick` and with
/// `value`'s numbers: what gets past parsing into validation and simulation. Without,
/// `value` as it is: what tests the parsing.
#[derive(Arbitrary, Debug)]
struct Opt {
    which: u8,
    fit: bool,
    pick: u16,
    value: Value,
}

/// Options that take counts (a list for some: search's degrees).
const COUNTS: [&str; 20] = [
    "tp",
    "dp",
    "pp",
    "ulysses",
    "ep",
    "batch",
    "seq",
    "micro-batches",
    "chunks",
    "gpus",
    "ranks",
    "channels",
    "samples",
    "seed",
    "top",
    "max-pp",
    "global-batch",
    "micro-batch",
    "nodes",
    "zero",
];

/// Options that take a factor or fraction.
const FACTORS: [&str; 4] = ["routing-skew", "compute-jitter", "comm-jitter", "factor"];

/// Sites of a layer, for `--site`.
const SITES: [&str; 7] = ["qkv", "proj", "fc1", "fc2", "head", "fwd.fc1", "bwd.fc2"];

#[derive(Arbitrary, Debug)]
struct Invocation {
    sub: Sub,
    opts: Vec<Opt>,
    files: Vec<Doc>,
    out: bool,
}

/// Options the body sets (to keep each run small and its writes in the scratch folder)
/// or that would only print help or write outside it.
const HELD: [&str; 12] = [
    "help",
    "version",
    "max-memory",
    "max-events",
    "threads",
    "quiet",
    "out",
    "force",
    "trace",
    "plot",
    "resume",
    "verify",
];

fn vocabulary() -> Vec<String> {
    let mut v: Vec<String> = WORDS.iter().map(|s| s.to_string()).collect();
    v.extend(crate::config::presets().iter().map(|p| p.name.to_string()));
    v.extend(
        crate::scenario::Strategy::NAMES
            .iter()
            .map(|s| s.to_string()),
    );
    v.extend(
        crate::scenario::Workload::ALL
            .iter()
            .map(|w| w.name().to_string()),
    );
    v.extend(
        crate::config::overrides::FIELDS
            .iter()
            .map(|(_, key, _)| key.to_string()),
    );
    v
}

struct Render<'a> {
    vocab: &'a [String],
    files: &'a [PathBuf],
    dir: &'a Path,
}

impl Render<'_> {
    fn word(&self, i: u16) -> String {
        self.vocab[i as usize % self.vocab.len()].clone()
    }

    fn int(&self, i: &Int) -> String {
        match i {
            Int::Small(n) => n.to_string(),
            Int::Edge(n) => EDGE_INTS[*n as usize % EDGE_INTS.len()].to_string(),
            Int::Any(n) => n.to_string(),
        }
    }

    fn item(&self, i: &Item) -> String {
        match i {
            Item::Word(w) => self.word(*w),
            Item::Int(n) => self.int(n),
            Item::Float(f) => EDGE_FLOATS[*f as usize % EDGE_FLOATS.len()].to_string(),
        }
    }

    /// A value as a command-line argument.
    fn arg(&self, v: &Value) -> String {
        match v {
            Value::Word(w) => self.word(*w),
            Value::Int(n) => self.int(n),
            Value::Float(f) => EDGE_FLOATS[*f as usize % EDGE_FLOATS.len()].to_string(),
            Value::List(items) => items
                .iter()
                .take(8)
                .map(|i| self.item(i))
                .collect::<Vec<_>>()
                .join(","),
            Value::Pair(k, i) => format!("{}={}", self.word(*k), self.item(i)),
            Value::Raw(s) => s.chars().filter(|&c| c != '/').take(64).collect(),
            Value::File(k) => match self.files.len() {
                0 => self.dir.join("missing.toml").display().to_string(),
                n => self.files[*k as usize % n].display().to_string(),
            },
            Value::Empty => String::new(),
        }
    }

    /// A value of `option`'s kind (see [`Opt`]).
    fn fitted(&self, option: &clap::Arg, pick: u16, v: &Value) -> String {
        let name = option.get_long().unwrap_or("");
        let p = pick as usize;
        let one_of = |list: &[&str]| list[p % list.len()].to_string();
        let presets = |kind: crate::config::PresetKind| {
            let names: Vec<&str> = crate::config::presets()
                .iter()
                .filter(|x| x.kind == kind)
                .map(|x| x.name)
                .collect();
            match v {
                Value::File(_) => self.arg(v),
                _ if names.is_empty() => self.arg(v),
                _ => names[p % names.len()].to_string(),
            }
        };
        let count = |v: &Value| match v {
            Value::Int(n) => self.int(n),
            _ => [1, 2, 4, 8, 16, 3, 64, 0][p % 8].to_string(),
        };
        let possible = option.get_possible_values();
        if !possible.is_empty() {
            return possible[p % possible.len()].get_name().to_string();
        }
        match name {
            n if COUNTS.contains(&n) => match v {
                Value::List(items) => items
                    .iter()
                    .take(4)
                    .map(|i| match i {
                        Item::Int(n) => self.int(n),
                        _ => "2".into(),
                    })
                    .collect::<Vec<_>>()
                    .join(","),
                other => count(other),
            },
            n if FACTORS.contains(&n) => match v {
                Value::Float(f) => EDGE_FLOATS[*f as usize % EDGE_FLOATS.len()].to_string(),
                _ => one_of(&["0.1", "0.5", "2", "zipf:1.2", "4,1,1,1", "uniform"]),
            },
            "model" => presets(crate::config::PresetKind::Model),
            "hardware" => presets(crate::config::PresetKind::Hardware),
            "scenario" => presets(crate::config::PresetKind::Scenario),
            "workload" => crate::scenario::Workload::ALL[p % crate::scenario::Workload::ALL.len()]
                .name()
                .to_string(),
            "strategy" | "dp-strategy" => {
                let s = one_of(&crate::scenario::Strategy::NAMES);
                s.replace(":K", &format!(":{}", count(v)))
                    .replace("[:G]", "")
            }
            "site" => format!(
                "{}={}",
                one_of(&SITES),
                crate::scenario::Strategy::NAMES[(p / 7) % crate::scenario::Strategy::NAMES.len()]
                    .replace(":K", ":2")
                    .replace("[:G]", "")
            ),
            "set" => {
                let fields = &crate::config::overrides::FIELDS;
                format!("{}={}", fields[p % fields.len()].1, count(v))
            }
            "straggler" => match p % 2 {
                0 => format!("rank:{}={}", count(v), one_of(&["2", "0.5", "1e9", "nan"])),
                _ => format!("link:gpu0->nvswitch={}", one_of(&["3", "0", "inf"])),
            },
            "sizes" => one_of(&["1KiB:8GiB", "1", "0", "64MiB", "1GiB,2GiB", "1B:1B", "4G"]),
            "shard" => format!("{}/{}", p % 3, 1 + p % 4),
            "trace-window" => one_of(&["0:100", "layer=0-1", "layer=0-1,mb=2,pass=bwd", "5:1"]),
            "trace-ranks" => one_of(&["0-7,64", "0", "3-1"]),
            _ => self.arg(v),
        }
    }

    /// A value as TOML (numbers bare, names quoted, lists as arrays).
    fn toml(&self, v: &Value) -> String {
        let quote = |s: &str| serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into());
        let item = |i: &Item| match i {
            Item::Word(w) => quote(&self.word(*w)),
            other => self.item(other),
        };
        match v {
            Value::Word(_) | Value::Pair(..) | Value::Raw(_) | Value::File(_) | Value::Empty => {
                quote(&self.arg(v))
            }
            Value::Int(_) | Value::Float(_) => self.arg(v),
            Value::List(items) => format!(
                "[{}]",
                items
                    .iter()
                    .take(8)
                    .map(item)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }

    fn doc(&self, d: &Doc) -> String {
        match d {
            Doc::Scenario(lines) => lines
                .iter()
                .take(16)
                .map(|(k, v)| format!("{} = {}\n", self.word(*k), self.toml(v)))
                .collect(),
            Doc::Preset { which, line, value } => {
                let presets = crate::config::presets();
                let text = presets[*which as usize % presets.len()].text;
                let lines: Vec<&str> = text.lines().collect();
                let at = *line as usize % lines.len().max(1);
                let mut out = String::new();
                for (i, l) in lines.iter().enumerate() {
                    match l.split_once('=') {
                        Some((k, _)) if i == at => {
                            out.push_str(&format!("{k}= {}\n", self.toml(value)))
                        }
                        _ => {
                            out.push_str(l);
                            out.push('\n');
                        }
                    }
                }
                out
            }
        }
    }
}

/// The long options of `sub` the generator may set.
fn options(sub: Sub) -> Vec<clap::Arg> {
    let cmd = super::command();
    let Some(c) = cmd.find_subcommand(sub.name()) else {
        return Vec::new();
    };
    c.get_arguments()
        .filter(|a| a.get_long().is_some_and(|l| !HELD.contains(&l)))
        .cloned()
        .collect()
}

/// The command line `inv` stands for, its files written under `dir`.
fn command_line(inv: &Invocation, dir: &Path) -> Vec<String> {
    let vocab = vocabulary();
    let mut files = Vec::new();
    let r0 = Render {
        vocab: &vocab,
        files: &[],
        dir,
    };
    for (i, d) in inv.files.iter().take(3).enumerate() {
        let p = dir.join(format!("f{i}.toml"));
        if std::fs::write(&p, r0.doc(d)).is_ok() {
            files.push(p);
        }
    }
    let r = Render {
        vocab: &vocab,
        files: &files,
        dir,
    };
    let mut argv = vec!["flashoverlap".to_string(), inv.sub.name().to_string()];
    argv.extend(["--max-memory", "0.25", "--max-events", "50000"].map(String::from));
    match inv.sub {
        Sub::Sweep | Sub::Search => {
            argv.extend(["--quiet", "--threads", "1"].map(String::from));
        }
        Sub::Simulate | Sub::Collective => {}
    }
    if inv.out || matches!(inv.sub, Sub::Sweep) {
        argv.push("--out".into());
        argv.push(dir.join("out").display().to_string());
        argv.push("--force".into());
    }
    let opts = options(inv.sub);
    for o in inv.opts.iter().take(12) {
        if opts.is_empty() {
            break;
        }
        let a = &opts[o.which as usize % opts.len()];
        argv.push(format!("--{}", a.get_long().unwrap_or_default()));
        if a.get_action().takes_values() {
            argv.push(if o.fit {
                r.fitted(a, o.pick, &o.value)
            } else {
                r.arg(&o.value)
            });
        }
    }
    // A search needs a global batch; one the generator did not set is a fixed one.
    if matches!(inv.sub, Sub::Search) && !argv.iter().any(|a| a == "--global-batch") {
        argv.extend(["--global-batch", "16"].map(String::from));
    }
    argv
}

/// The command line `data` stands for, its files written under `dir` (for triage: what
/// a saved fuzzer input ran).
pub fn command_line_of(data: &[u8], dir: &Path) -> Option<Vec<String>> {
    let inv = Invocation::arbitrary_take_rest(Unstructured::new(data)).ok()?;
    Some(command_line(&inv, dir))
}

/// The longest error message a run may print: a message quotes values, not whole inputs.
pub const MAX_MESSAGE: usize = 64 << 10;

/// Run the command line `data` stands for. Panics (what the fuzzer reports) on a panic
/// inside, an exit code outside 0..=3, or an error message over [`MAX_MESSAGE`].
pub fn cli_args(data: &[u8]) {
    let _ = run(data);
}

/// [`cli_args`], returning the command line and the exit code it ended with (`None`
/// where the bytes make no invocation).
pub fn run(data: &[u8]) -> Option<(Vec<String>, u8)> {
    let inv = Invocation::arbitrary_take_rest(Unstructured::new(data)).ok()?;
    let dir = std::env::temp_dir().join(format!("flashoverlap-fuzz-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).ok()?;
    let argv = command_line(&inv, &dir);
    let was = super::discard_stdout(true);
    let r = super::dispatch(&argv);
    super::discard_stdout(was);
    let _ = std::fs::remove_dir_all(&dir);
    let code = match r {
        Ok(()) => 0,
        Err(e) => {
            assert!(e.code <= 3, "{argv:?}: exit {}", e.code);
            let text = super::error_text(&*e.error);
            assert!(
                text.len() <= MAX_MESSAGE,
                "{argv:?}: a message of {} bytes",
                text.len()
            );
            e.code
        }
    };
    Some((argv, code))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The generator reaches past parsing: over a fixed stream of inputs, most command
    /// lines parse (a generator that only made parse errors would fuzz clap, not
    /// flashoverlap). Running them is `tests/fuzz_cli.rs`'s work, in its own process,
    /// since a run sets the process's memory limit.
    #[test]
    fn generated_command_lines_mostly_parse() {
        let dir = std::env::temp_dir().join(format!("flashoverlap-gen-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        let (mut parsed, mut total) = (0, 0);
        for _ in 0..300 {
            let bytes: Vec<u8> = (0..64)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            let Ok(inv) = Invocation::arbitrary_take_rest(Unstructured::new(&bytes)) else {
                continue;
            };
            total += 1;
            let argv = command_line(&inv, &dir);
            if super::super::command().try_get_matches_from(&argv).is_ok() {
                parsed += 1;
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
        assert!(total >= 250, "{total} invocations from 300 inputs");
        assert!(parsed * 2 >= total, "{parsed} of {total} parsed");
    }
}
