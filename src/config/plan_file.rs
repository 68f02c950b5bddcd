//! Plans users write: `simulate --plan FILE` and `run --plan FILE` take a schedule of
//! ops on ranks and streams (GEMMs, copies, adds, attention, sends and receives, with
//! dependencies) from a TOML or JSON file and build it through [`PlanBuilder`], so it
//! passes the same validation (matched sends and receives, no deadlock) as the schedules
//! the strategies build.
//!
//! ```toml
//! version = 1
//! name = "gemms beside copies"
//!
//! [[op]]                      # ten 8192³ GEMMs, one after another on stream `compute`
//! name = "g"
//! kind = "gemm"
//! m = 8192
//! n = 8192
//! k = 8192
//! repeat = 10
//!
//! [[op]]                      # beside them, ten 1 GiB copies on stream `copy`
//! stream = "copy"
//! kind = "copy"
//! bytes = "1GiB"
//! repeat = 10
//! ```
//!
//! Ops run on their rank's stream in file order; `after` names ops (earlier in the file)
//! this one waits for besides its stream predecessor. A send on rank `r` to `to` matches
//! the receive on `to` from `r` of the same tag, or without tags the first unmatched one
//! in file order. With `repeat = N` an entry stands for N ops in a row on its stream; a
//! name given to it stands for the last of them in a later `after`.

use super::{ConfigError, Source};
use crate::cost::Attention;
use crate::plan::{BufId, BufInit, OpIo, Region};
use crate::plan::{EltKind, OpKind, OpTag, Plan, PlanBuilder, StreamId, StreamKind};
use crate::scenario::DType;
use serde::Deserialize;
use std::collections::BTreeMap;

/// The plan file format this build reads.
pub const VERSION: u32 = 1;

/// The most ops a plan file may expand to (repeats included).
pub const MAX_FILE_OPS: u64 = 1_000_000;

/// The most ranks a plan file may name.
pub const MAX_FILE_RANKS: u32 = 65_536;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanFile {
    pub version: u32,
    #[serde(default)]
    pub name: Option<String>,
    /// Ranks of the plan (default: one more than the highest rank an op names).
    #[serde(default)]
    pub ranks: Option<u32>,
    /// Element type of GEMMs and attention that do not give one (default bf16).
    #[serde(default)]
    pub dtype: Option<String>,
    /// Streams whose kind is not what their first op says (a `comm` stream of copies).
    #[serde(default)]
    pub stream: Vec<StreamFile>,
    #[serde(default)]
    pub op: Vec<OpFile>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamFile {
    #[serde(default)]
    pub rank: u32,
    pub name: String,
    /// `compute` or `comm`.
    pub kind: String,
}

/// A size as users write it: `1073741824` or `"1GiB"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Size {
    Int(i64),
    Text(String),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpFile {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub rank: u32,
    /// Default `compute` (`comm` for sends and receives).
    #[serde(default)]
    pub stream: Option<String>,
    /// `gemm`, `copy`, `add`, `attention`, `send` or `recv`.
    pub kind: String,
    #[serde(default)]
    pub m: Option<Size>,
    #[serde(default)]
    pub n: Option<Size>,
    #[serde(default)]
    pub k: Option<Size>,
    #[serde(default)]
    pub dtype: Option<String>,
    /// Copy, add (the size of each tensor), send and receive payload.
    #[serde(default)]
    pub bytes: Option<Size>,
    /// Send: the receiving rank.
    #[serde(default)]
    pub to: Option<u32>,
    /// Receive: the sending rank.
    #[serde(default)]
    pub from: Option<u32>,
    #[serde(default)]
    pub tag: Option<u64>,
    /// Receive: reduce into the destination as data arrives.
    #[serde(default)]
    pub accumulate: Option<bool>,
    /// Attention: batch × heads on this rank, query and key lengths, head width.
    #[serde(default)]
    pub heads: Option<Size>,
    #[serde(default)]
    pub seq_q: Option<Size>,
    #[serde(default)]
    pub seq_kv: Option<Size>,
    #[serde(default)]
    pub head_dim: Option<Size>,
    #[serde(default)]
    pub causal: Option<bool>,
    #[serde(default)]
    pub backward: Option<bool>,
    #[serde(default)]
    pub after: Vec<String>,
    #[serde(default)]
    pub repeat: Option<u64>,
}

/// A plan read from a file: its name and the validated plan.
#[derive(Debug, Clone)]
pub struct UserPlan {
    pub name: String,
    pub plan: Plan,
    /// The element type most of its compute uses (for the timeline's peak FLOP/s).
    pub dtype: DType,
}

type R<T> = Result<T, ConfigError>;

/// The largest plan file read (a million ops of a few dozen bytes each, with room).
pub const MAX_PLAN_BYTES: u64 = 256 << 20;

/// Read the plan file at `path` (a regular file, at most [`MAX_PLAN_BYTES`]).
pub fn read(path: &std::path::Path) -> R<Source> {
    super::read_source(path, MAX_PLAN_BYTES)
}

/// Read a plan file (TOML, or JSON when the name ends in `.json`). `dataflow`: give every
/// op buffers of its own shape (inputs shared between ops of one shape, per rank), so the
/// GPU executor can run it; its results are not checked against anything.
pub fn load(src: &Source, dataflow: bool) -> R<UserPlan> {
    let file: PlanFile = if src.name.ends_with(".json") {
        serde_json::from_str(&src.text).map_err(|e| ConfigError::Parse {
            file: src.name.clone(),
            message: e.to_string(),
        })?
    } else {
        super::parse_toml(src)?
    };
    build(&src.name, &file, dataflow)
}

fn size(file: &str, key: &str, v: &Option<Size>) -> R<Option<u64>> {
    let Some(v) = v else { return Ok(None) };
    let n = match v {
        Size::Int(i) => u64::try_from(*i).ok(),
        Size::Text(t) => crate::units::parse_size(t).ok(),
    };
    match n {
        Some(n) if n > 0 => Ok(Some(n)),
        _ => Err(ConfigError::invalid(
            file,
            key,
            match v {
                Size::Int(i) => i.to_string(),
                Size::Text(t) => format!("\"{t}\""),
            },
            "must be a positive count or size (4096, \"4k\", \"1GiB\")",
        )),
    }
}

fn need(file: &str, key: &str, v: &Option<Size>) -> R<u64> {
    size(file, key, v)?.ok_or_else(|| ConfigError::invalid(file, key, "(missing)", "is required"))
}

fn dtype_of(file: &str, key: &str, v: Option<&str>, default: DType) -> R<DType> {
    match v {
        None => Ok(default),
        Some(s) => DType::parse(s).ok_or_else(|| {
            ConfigError::invalid(
                file,
                key,
                format!("\"{s}\""),
                "must be fp8, bf16, fp16 or fp32",
            )
        }),
    }
}

/// What one entry of the file builds, before repeats.
#[derive(Debug, Clone, Copy)]
enum Entry {
    Kind(OpKind),
    /// A send or receive whose tag is assigned when matched.
    Send {
        to: u32,
        bytes: u64,
        tag: Option<u64>,
    },
    Recv {
        from: u32,
        bytes: u64,
        tag: Option<u64>,
        accumulate: bool,
    },
}

fn entry(file: &str, i: usize, o: &OpFile, dtype: DType, ranks: u32) -> R<Entry> {
    let key = |k: &str| format!("op[{i}].{k}");
    // Keys that mean nothing for this kind are errors, not silently ignored.
    let allowed: &[&str] = match o.kind.as_str() {
        "gemm" => &["m", "n", "k", "dtype"],
        "copy" | "add" => &["bytes"],
        "attention" => &[
            "heads", "seq_q", "seq_kv", "head_dim", "causal", "backward", "dtype",
        ],
        "send" => &["to", "bytes", "tag"],
        "recv" => &["from", "bytes", "tag", "accumulate"],
        other => {
            return Err(ConfigError::invalid(
                file,
                &key("kind"),
                format!("\"{other}\""),
                "must be gemm, copy, add, attention, send or recv",
            ));
        }
    };
    let given = [
        ("m", o.m.is_some()),
        ("n", o.n.is_some()),
        ("k", o.k.is_some()),
        ("dtype", o.dtype.is_some()),
        ("bytes", o.bytes.is_some()),
        ("to", o.to.is_some()),
        ("from", o.from.is_some()),
        ("tag", o.tag.is_some()),
        ("accumulate", o.accumulate.is_some()),
        ("heads", o.heads.is_some()),
        ("seq_q", o.seq_q.is_some()),
        ("seq_kv", o.seq_kv.is_some()),
        ("head_dim", o.head_dim.is_some()),
        ("causal", o.causal.is_some()),
        ("backward", o.backward.is_some()),
    ];
    if let Some((k, _)) = given.iter().find(|(k, g)| *g && !allowed.contains(k)) {
        return Err(ConfigError::invalid(
            file,
            &key(k),
            "(given)",
            format!("means nothing for a {} op", o.kind),
        ));
    }
    let peer = |k: &str, p: Option<u32>| -> R<u32> {
        let p = p.ok_or_else(|| ConfigError::invalid(file, &key(k), "(missing)", "is required"))?;
        if p == o.rank {
            return Err(ConfigError::invalid(
                file,
                &key(k),
                p,
                "is the op's own rank (a copy is kind = \"copy\")",
            ));
        }
        if p >= ranks {
            return Err(ConfigError::invalid(
                file,
                &key(k),
                p,
                format!("is not a rank of this {ranks}-rank plan"),
            ));
        }
        Ok(p)
    };
    Ok(match o.kind.as_str() {
        "gemm" => Entry::Kind(OpKind::gemm(
            need(file, &key("m"), &o.m)?,
            need(file, &key("n"), &o.n)?,
            need(file, &key("k"), &o.k)?,
            dtype_of(file, &key("dtype"), o.dtype.as_deref(), dtype)?,
        )),
        "copy" => Entry::Kind(OpKind::Copy {
            bytes: need(file, &key("bytes"), &o.bytes)?,
        }),
        "add" => {
            let b = need(file, &key("bytes"), &o.bytes)?;
            Entry::Kind(OpKind::Elementwise {
                kind: EltKind::Add,
                bytes: crate::cost::add_traffic(b),
            })
        }
        "attention" => {
            let small = |k: &str, v: &Option<Size>| -> R<u32> {
                let n = need(file, &key(k), v)?;
                u32::try_from(n)
                    .map_err(|_| ConfigError::invalid(file, &key(k), n, "must be below 2^32"))
            };
            let seq_q = small("seq_q", &o.seq_q)?;
            let seq_kv = match o.seq_kv {
                Some(_) => small("seq_kv", &o.seq_kv)?,
                None => seq_q,
            };
            if seq_kv < seq_q {
                return Err(ConfigError::invalid(
                    file,
                    &key("seq_kv"),
                    seq_kv,
                    format!("must be at least seq_q ({seq_q})"),
                ));
            }
            Entry::Kind(OpKind::Attention(Attention {
                bh: need(file, &key("heads"), &o.heads)?,
                seq_q,
                seq_kv,
                head_dim: small("head_dim", &o.head_dim)?,
                causal: o.causal.unwrap_or(true),
                backward: o.backward.unwrap_or(false),
                dtype: dtype_of(file, &key("dtype"), o.dtype.as_deref(), dtype)?,
            }))
        }
        "send" => Entry::Send {
            to: peer("to", o.to)?,
            bytes: need(file, &key("bytes"), &o.bytes)?,
            tag: o.tag,
        },
        _ => Entry::Recv {
            from: peer("from", o.from)?,
            bytes: need(file, &key("bytes"), &o.bytes)?,
            tag: o.tag,
            accumulate: o.accumulate.unwrap_or(false),
        },
    })
}

/// Build the plan of `f` (named `file` in errors).
pub fn build(file: &str, f: &PlanFile, dataflow: bool) -> R<UserPlan> {
    if f.version != VERSION {
        return Err(ConfigError::Version {
            file: file.to_string(),
            found: f.version,
            supported: VERSION,
        });
    }
    if f.op.is_empty() {
        return Err(ConfigError::invalid(
            file,
            "op",
            "[]",
            "a plan needs at least one op",
        ));
    }
    let highest =
        f.op.iter()
            .map(|o| o.rank.max(o.to.unwrap_or(0)).max(o.from.unwrap_or(0)))
            .chain(f.stream.iter().map(|s| s.rank))
            .max()
            .unwrap_or(0);
    let ranks = match f.ranks {
        Some(r) if r == 0 || r > MAX_FILE_RANKS => {
            return Err(ConfigError::invalid(
                file,
                "ranks",
                r,
                format!("must be 1 ..= {MAX_FILE_RANKS}"),
            ));
        }
        Some(r) if r <= highest => {
            return Err(ConfigError::invalid(
                file,
                "ranks",
                r,
                format!("an op or stream names rank {highest}"),
            ));
        }
        Some(r) => r,
        None if highest >= MAX_FILE_RANKS => {
            return Err(ConfigError::invalid(
                file,
                "op.rank",
                highest,
                format!("must be below {MAX_FILE_RANKS}"),
            ));
        }
        None => highest + 1,
    };
    let dtype = dtype_of(file, "dtype", f.dtype.as_deref(), DType::Bf16)?;
    let mut total: u64 = 0;
    for (i, o) in f.op.iter().enumerate() {
        let r = o.repeat.unwrap_or(1);
        if r == 0 {
            return Err(ConfigError::invalid(
                file,
                &format!("op[{i}].repeat"),
                0,
                "must be at least 1",
            ));
        }
        total = total.saturating_add(r);
    }
    if total > MAX_FILE_OPS {
        return Err(ConfigError::invalid(
            file,
            "op",
            format!("{total} ops (repeats included)"),
            format!("a plan file holds at most {MAX_FILE_OPS}"),
        ));
    }
    let entries =
        f.op.iter()
            .enumerate()
            .map(|(i, o)| entry(file, i, o, dtype, ranks))
            .collect::<R<Vec<_>>>()?;

    // Tags: explicit ones kept; the others matched in file order per (sender, receiver).
    let mut used = std::collections::BTreeSet::new();
    for (i, e) in entries.iter().enumerate() {
        if let Entry::Send { tag: Some(t), .. } = e {
            if f.op[i].repeat.unwrap_or(1) > 1 {
                return Err(ConfigError::invalid(
                    file,
                    &format!("op[{i}].tag"),
                    t,
                    "a repeated send cannot carry one tag (leave tags out to match in order)",
                ));
            }
            used.insert(*t);
        }
    }
    let mut next_tag = used.last().copied().unwrap_or(0);
    // Per stream, the kind of the last op put on it (as the file gives it).
    let mut previous: BTreeMap<StreamId, OpKind> = BTreeMap::new();

    let mut b = PlanBuilder::new(ranks);
    if !dataflow {
        b = b.without_dataflow();
    }
    b = b.with_op_limit(MAX_FILE_OPS as usize);
    let mut streams: BTreeMap<(u32, String), StreamId> = BTreeMap::new();
    for (i, s) in f.stream.iter().enumerate() {
        let kind = match s.kind.as_str() {
            "compute" => StreamKind::Compute,
            "comm" => StreamKind::Comm,
            other => {
                return Err(ConfigError::invalid(
                    file,
                    &format!("stream[{i}].kind"),
                    format!("\"{other}\""),
                    "must be compute or comm",
                ));
            }
        };
        if s.rank >= ranks {
            return Err(ConfigError::invalid(
                file,
                &format!("stream[{i}].rank"),
                s.rank,
                format!("is not a rank of this {ranks}-rank plan"),
            ));
        }
        let key = (s.rank, s.name.clone());
        if streams.contains_key(&key) {
            return Err(ConfigError::invalid(
                file,
                &format!("stream[{i}].name"),
                format!("\"{}\"", s.name),
                format!("is declared twice on rank {}", s.rank),
            ));
        }
        let id = b.stream(s.rank, &s.name, kind);
        streams.insert(key, id);
    }
    let mut names: BTreeMap<String, u32> = BTreeMap::new();
    // Unmatched sends and receives without tags, per (from, to), in file order.
    let mut pending_send: BTreeMap<(u32, u32), std::collections::VecDeque<u64>> = BTreeMap::new();
    let mut pending_recv: BTreeMap<(u32, u32), std::collections::VecDeque<u64>> = BTreeMap::new();
    let mut bufs = Buffers::default();
    for (i, (o, e)) in f.op.iter().zip(&entries).enumerate() {
        let comm = matches!(e, Entry::Send { .. } | Entry::Recv { .. });
        let sname = o
            .stream
            .clone()
            .unwrap_or_else(|| if comm { "comm" } else { "compute" }.to_string());
        let stream = *streams.entry((o.rank, sname.clone())).or_insert_with(|| {
            b.stream(
                o.rank,
                &sname,
                if comm {
                    StreamKind::Comm
                } else {
                    StreamKind::Compute
                },
            )
        });
        let mut deps = Vec::with_capacity(o.after.len());
        for a in &o.after {
            match names.get(a) {
                Some(&d) => deps.push(d),
                None => {
                    let later = f.op[i..].iter().any(|x| x.name.as_deref() == Some(a));
                    return Err(ConfigError::invalid(
                        file,
                        &format!("op[{i}].after"),
                        format!("\"{a}\""),
                        if later {
                            "names an op later in the file (list each op after what it waits for)"
                        } else {
                            "names no op"
                        },
                    ));
                }
            }
        }
        let site = b.site(o.name.as_deref().unwrap_or(&o.kind));
        if dataflow
            && let Some(bytes) = match *e {
                Entry::Kind(OpKind::Copy { bytes }) => Some(bytes),
                Entry::Kind(OpKind::Elementwise { bytes, .. }) => Some(bytes / 3),
                Entry::Send { bytes, .. } | Entry::Recv { bytes, .. } => Some(bytes),
                _ => None,
            }
            && bytes % 2 != 0
        {
            return Err(ConfigError::invalid(
                file,
                &format!("op[{i}].bytes"),
                bytes,
                "must be even to run on the GPU (whole bf16 elements)",
            ));
        }
        let mut last = 0;
        for rep in 0..o.repeat.unwrap_or(1) {
            let tag = OpTag {
                site,
                step: u32::try_from(rep).unwrap_or(u32::MAX),
                slice: 0,
            };
            let kind = match *e {
                Entry::Kind(k) => k,
                Entry::Send { to, bytes, tag } => {
                    let t = match tag {
                        Some(t) => t,
                        None => match pending_recv
                            .get_mut(&(o.rank, to))
                            .and_then(|q| q.pop_front())
                        {
                            Some(t) => t,
                            None => {
                                next_tag += 1;
                                pending_send
                                    .entry((o.rank, to))
                                    .or_default()
                                    .push_back(next_tag);
                                next_tag
                            }
                        },
                    };
                    OpKind::Send {
                        peer: to,
                        bytes,
                        tag: t,
                    }
                }
                Entry::Recv {
                    from,
                    bytes,
                    tag,
                    accumulate,
                } => {
                    let t = match tag {
                        Some(t) => t,
                        None => match pending_send
                            .get_mut(&(from, o.rank))
                            .and_then(|q| q.pop_front())
                        {
                            Some(t) => t,
                            None => {
                                next_tag += 1;
                                pending_recv
                                    .entry((from, o.rank))
                                    .or_default()
                                    .push_back(next_tag);
                                next_tag
                            }
                        },
                    };
                    OpKind::Recv {
                        peer: from,
                        bytes,
                        tag: t,
                        accumulate,
                    }
                }
            };
            // A GEMM right after one of its shape on its stream reads the same buffers
            // (`Buffers` keeps one per shape and rank): its B is warm.
            let mut kind = kind;
            let again = previous.insert(stream, kind) == Some(kind);
            if let OpKind::Gemm { reuses_b, .. } = &mut kind {
                *reuses_b = again;
            }
            let d: &[u32] = if rep == 0 { &deps } else { &[] };
            let id = b.single(stream, kind, d, tag).map_err(|e| {
                ConfigError::invalid(file, &format!("op[{i}]"), &o.kind, e.to_string())
            })?;
            if dataflow {
                let io = bufs.io(&mut b, o.rank, &kind).ok_or_else(|| {
                    ConfigError::invalid(
                        file,
                        &format!("op[{i}].kind"),
                        format!("\"{}\"", o.kind),
                        "cannot run on the GPU executor yet (the simulator takes it)",
                    )
                })?;
                b.set_io(id, io);
            }
            last = id;
        }
        if let Some(n) = &o.name {
            if names.insert(n.clone(), last).is_some() {
                return Err(ConfigError::invalid(
                    file,
                    &format!("op[{i}].name"),
                    format!("\"{n}\""),
                    "is given to two ops",
                ));
            }
        }
    }
    let plan = b.finish().map_err(|e| ConfigError::Parse {
        file: file.to_string(),
        message: e.to_string(),
    })?;
    let name = f.name.clone().unwrap_or_else(|| {
        std::path::Path::new(file)
            .file_stem()
            .map_or_else(|| "plan".to_string(), |s| s.to_string_lossy().into_owned())
    });
    Ok(UserPlan { name, plan, dtype })
}

/// Buffers for the GPU executor: per rank, one input buffer per shape (shared by the ops
/// of that shape, which only read it) and one output buffer per shape.
#[derive(Default)]
struct Buffers {
    by_key: BTreeMap<(u32, &'static str, u64, u64), BufId>,
}

impl Buffers {
    fn get(
        &mut self,
        b: &mut PlanBuilder,
        rank: u32,
        what: &'static str,
        rows: u64,
        cols: u64,
        init: BufInit,
    ) -> BufId {
        *self
            .by_key
            .entry((rank, what, rows, cols))
            .or_insert_with(|| {
                b.buffer(
                    rank,
                    &format!("{what}-{rows}x{cols}"),
                    rows,
                    cols,
                    DType::Bf16,
                    init,
                )
            })
    }

    /// `bytes` (even) of bf16 as rows of a power-of-two width up to 4096 elements.
    fn shape(bytes: u64) -> (u64, u64) {
        let elems = bytes / 2;
        let cols = 1u64 << elems.trailing_zeros().min(12);
        (elems / cols, cols)
    }

    fn io(&mut self, b: &mut PlanBuilder, rank: u32, kind: &OpKind) -> Option<OpIo> {
        Some(match *kind {
            OpKind::Gemm { m, n, k, .. } => {
                let a = self.get(b, rank, "a", m, k, BufInit::Local);
                let w = self.get(b, rank, "b", k, n, BufInit::Local);
                let c = self.get(b, rank, "c", m, n, BufInit::Poison);
                OpIo::Gemm {
                    a: Region::rows(a, 0, m),
                    b: w,
                    c: Region::rows(c, 0, m),
                }
            }
            OpKind::Copy { bytes } => {
                let (r, c) = Self::shape(bytes);
                let src = self.get(b, rank, "copy-src", r, c, BufInit::Local);
                let dst = self.get(b, rank, "copy-dst", r, c, BufInit::Poison);
                OpIo::Copy {
                    dst: Region::rows(dst, 0, r),
                    src: Region::rows(src, 0, r),
                }
            }
            OpKind::Elementwise {
                kind: EltKind::Add,
                bytes,
            } => {
                let (r, c) = Self::shape(bytes / 3);
                let x = self.get(b, rank, "add-x", r, c, BufInit::Local);
                let y = self.get(b, rank, "add-y", r, c, BufInit::Local);
                let out = self.get(b, rank, "add-out", r, c, BufInit::Poison);
                OpIo::Add {
                    out: Region::rows(out, 0, r),
                    x: Region::rows(x, 0, r),
                    y: Region::rows(y, 0, r),
                }
            }
            OpKind::Send { bytes, .. } => {
                let (r, c) = Self::shape(bytes);
                let src = self.get(b, rank, "send", r, c, BufInit::Local);
                OpIo::Send {
                    src: Region::rows(src, 0, r),
                }
            }
            OpKind::Recv { bytes, .. } => {
                let (r, c) = Self::shape(bytes);
                let dst = self.get(b, rank, "recv", r, c, BufInit::Poison);
                OpIo::Recv {
                    dst: Region::rows(dst, 0, r),
                }
            }
            OpKind::Elementwise { .. } | OpKind::Attention(_) | OpKind::GroupedGemm { .. } => {
                return None;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::sim::{SimOptions, simulate};

    fn src(text: &str) -> Source {
        Source {
            name: "p.toml".into(),
            text: text.into(),
            dir: None,
        }
    }

    fn plan(text: &str) -> R<UserPlan> {
        load(&src(text), false)
    }

    fn err(text: &str) -> String {
        plan(text).unwrap_err().to_string()
    }

    const EXAMPLE: &str = include_str!("../../plans/gemms-beside-copies.toml");

    #[test]
    fn the_example_builds_twenty_ops_on_two_streams() {
        for dataflow in [false, true] {
            let p = load(&src(EXAMPLE), dataflow).unwrap();
            assert_eq!(p.name, "gemms beside copies");
            assert_eq!(
                (p.plan.ranks, p.plan.streams.len(), p.plan.ops.len()),
                (1, 2, 20)
            );
            assert_eq!(p.plan.has_dataflow(), dataflow);
            let copy = p.plan.streams.iter().find(|s| s.name == "copy").unwrap();
            assert_eq!(copy.kind, StreamKind::Comm);
        }
        // With data flow, ops of one shape share their buffers: a, b, c and the copy's
        // source and destination.
        let p = load(&src(EXAMPLE), true).unwrap();
        assert_eq!(p.plan.buffers.len(), 5);
    }

    /// Closed form: rank 0 computes a GEMM and sends its output; rank 1 receives it, then
    /// computes; with no interference the makespan is GEMM + message + GEMM.
    #[test]
    fn a_two_rank_pipeline_takes_gemm_message_gemm() {
        let text = r#"
            version = 1
            [[op]]
            name = "g0"
            kind = "gemm"
            m = 4096
            n = 4096
            k = 4096
            [[op]]
            kind = "send"
            to = 1
            bytes = "32MiB"
            after = ["g0"]
            [[op]]
            name = "r"
            rank = 1
            kind = "recv"
            from = 0
            bytes = "32MiB"
            [[op]]
            rank = 1
            kind = "gemm"
            m = 4096
            n = 4096
            k = 4096
            after = ["r"]
        "#;
        let p = plan(text).unwrap();
        assert_eq!(p.plan.ranks, 2);
        let hw = crate::config::load_hardware("h100-sxm-8", None).unwrap();
        let r = simulate(&p.plan, &hw, &SimOptions::default()).unwrap();
        let gemm = crate::cost::gemm_time(&hw.gpu, 4096, 4096, 4096, DType::Bf16).unwrap();
        let end = r.times.iter().map(|t| t.end).fold(0.0, f64::max);
        let send = r.times[1];
        // The send starts when the first GEMM ends; the second GEMM starts when the
        // message has arrived and lasts a GEMM.
        assert!((send.start - gemm).abs() < 1e-12, "{send:?} {gemm}");
        let second = r.times[3];
        assert!((second.start - r.times[2].end).abs() < 1e-12);
        assert!((end - second.start - gemm).abs() < 1e-12);
        assert!(r.times[2].end > gemm, "the message takes time");
    }

    /// A GEMM right after one of its shape on its stream reads the same buffers: it is
    /// marked as reusing B; another shape, another stream or an op between them is not.
    #[test]
    fn repeated_gemms_reuse_their_weight() {
        let text = r#"
            version = 1
            [[op]]
            kind = "gemm"
            m = 256
            n = 512
            k = 1024
            repeat = 3
            [[op]]
            stream = "side"
            kind = "gemm"
            m = 256
            n = 512
            k = 1024
            [[op]]
            kind = "gemm"
            m = 512
            n = 512
            k = 1024
            [[op]]
            kind = "copy"
            bytes = 1024
            [[op]]
            kind = "gemm"
            m = 512
            n = 512
            k = 1024
        "#;
        let p = plan(text).unwrap();
        let flags: Vec<Option<bool>> = p
            .plan
            .ops
            .iter()
            .map(|o| match o.kind {
                OpKind::Gemm { reuses_b, .. } => Some(reuses_b),
                _ => None,
            })
            .collect();
        let (f, t) = (Some(false), Some(true));
        assert_eq!(flags, vec![f, t, t, f, f, None, f]);
    }

    #[test]
    fn sends_match_receives_in_file_order_or_by_tag() {
        let text = r#"
            version = 1
            [[op]]
            kind = "send"
            to = 1
            bytes = 1024
            repeat = 3
            [[op]]
            rank = 1
            kind = "recv"
            from = 0
            bytes = 1024
            repeat = 3
            [[op]]
            rank = 1
            kind = "send"
            to = 0
            bytes = 64
            tag = 77
            [[op]]
            kind = "recv"
            from = 1
            bytes = 64
            tag = 77
        "#;
        let p = plan(text).unwrap();
        assert_eq!(p.plan.ops.len(), 8);
        // A receive that no send matches is the plan validation's error, naming the file.
        let lonely = r#"
            version = 1
            [[op]]
            rank = 1
            kind = "recv"
            from = 0
            bytes = 64
        "#;
        let e = err(lonely);
        assert!(e.starts_with("p.toml:"), "{e}");
    }

    #[test]
    fn bad_plans_name_the_key_and_value() {
        let one = |op: &str| format!("version = 1\n[[op]]\n{op}\n");
        for (text, want) in [
            (one("kind = \"conv\""), "op[0].kind` = \"conv\""),
            (one("kind = \"copy\"\nbytes = 64\nm = 3"), "op[0].m"),
            (one("kind = \"gemm\"\nm = 1\nn = 1"), "op[0].k"),
            (one("kind = \"gemm\"\nm = 0\nn = 1\nk = 1"), "op[0].m` = 0"),
            (one("kind = \"copy\"\nbytes = \"lots\""), "\"lots\""),
            (one("kind = \"send\"\nto = 0\nbytes = 8"), "op's own rank"),
            (
                one("kind = \"copy\"\nbytes = 8\nrepeat = 0"),
                "op[0].repeat",
            ),
            (
                one("kind = \"copy\"\nbytes = 8\nafter = [\"x\"]"),
                "names no op",
            ),
            (
                one("kind = \"attention\"\nheads = 8\nseq_q = 512\nseq_kv = 256\nhead_dim = 128"),
                "at least seq_q",
            ),
            (
                "version = 2\n[[op]]\nkind = \"copy\"\nbytes = 8\n".into(),
                "version 2",
            ),
            ("version = 1\n".into(), "at least one op"),
            (
                "version = 1\nranks = 1\n[[op]]\nkind = \"send\"\nto = 3\nbytes = 8\n".into(),
                "rank 3",
            ),
            (
                "version = 1\n[[op]]\nkind = \"copy\"\nbytes = 8\nafter = [\"later\"]\n\
                 [[op]]\nname = \"later\"\nkind = \"copy\"\nbytes = 8\n"
                    .into(),
                "later in the file",
            ),
            (
                "version = 1\n[[op]]\nname = \"a\"\nkind = \"copy\"\nbytes = 8\n\
                 [[op]]\nname = \"a\"\nkind = \"copy\"\nbytes = 8\n"
                    .into(),
                "given to two ops",
            ),
            (
                "version = 1\n[[stream]]\nname = \"s\"\nkind = \"fast\"\n\
                 [[op]]\nkind = \"copy\"\nbytes = 8\n"
                    .into(),
                "stream[0].kind",
            ),
            (
                "version = 1\nbogus = 1\n[[op]]\nkind = \"copy\"\nbytes = 8\n".into(),
                "bogus",
            ),
        ] {
            let e = err(&text);
            assert!(e.contains(want) && e.starts_with("p.toml"), "{want}: {e}");
        }
    }

    #[test]
    fn the_gpu_form_refuses_what_the_executor_cannot_run() {
        let att =
            "version = 1\n[[op]]\nkind = \"attention\"\nheads = 8\nseq_q = 512\nhead_dim = 128\n";
        assert!(load(&src(att), false).is_ok());
        let e = load(&src(att), true).unwrap_err().to_string();
        assert!(e.contains("cannot run on the GPU"), "{e}");
        let odd = "version = 1\n[[op]]\nkind = \"copy\"\nbytes = 7\n";
        assert!(load(&src(odd), false).is_ok());
        let e = load(&src(odd), true).unwrap_err().to_string();
        assert!(e.contains("must be even"), "{e}");
    }

    #[test]
    fn json_plans_read_like_toml() {
        let j = Source {
            name: "p.json".into(),
            text: r#"{"version": 1, "op": [{"kind": "gemm", "m": "4k", "n": 1024, "k": 1024}]}"#
                .into(),
            dir: None,
        };
        let p = load(&j, false).unwrap();
        assert!(matches!(p.plan.ops[0].kind, OpKind::Gemm { m: 4096, .. }));
    }

    #[test]
    fn the_size_of_a_plan_is_bounded_before_it_is_built() {
        let e = err("version = 1\n[[op]]\nkind = \"copy\"\nbytes = 8\nrepeat = 1000000000\n");
        assert!(e.contains("at most"), "{e}");
        let e = err("version = 1\nranks = 100000000\n[[op]]\nkind = \"copy\"\nbytes = 8\n");
        assert!(e.contains("`ranks`"), "{e}");
    }
}
