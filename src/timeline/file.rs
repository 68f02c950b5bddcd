//! The on-disk form of a Timeline (JSON), versioned and separate from the domain type.
//! Times are microseconds. `plot` and `validate` read it back.

use super::{Lane, Source, Span, SpanLabel, Timeline};
use crate::plan::{OpClass, Pass, Scope, StreamInfo, StreamKind};
use serde::{Deserialize, Serialize};

pub const FORMAT: &str = "flashoverlap-timeline";
pub const VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimelineFile {
    pub format: String,
    pub version: u32,
    pub source: String,
    pub scenario: String,
    pub strategy: String,
    pub ranks: u32,
    pub peak_flops: f64,
    pub model_flops: f64,
    pub streams: Vec<StreamFile>,
    pub links: Vec<String>,
    pub spans: Vec<SpanFile>,
    /// Layer, micro-batch and pass of runs of ops (layer and step workloads).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<ScopeFile>,
}

/// The ops from `first_op` up to the next entry's run in this scope.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScopeFile {
    pub first_op: u32,
    /// `null`: no layer (the embedding, the LM head, gradient buckets after the last
    /// layer).
    pub layer: Option<u32>,
    pub micro_batch: u32,
    /// `fwd`, `bwd` or `recompute`.
    pub pass: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamFile {
    pub rank: u32,
    pub name: String,
    pub kind: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpanFile {
    /// `stream` or `link`.
    pub lane: String,
    /// Index into `streams` or `links`.
    pub index: u32,
    pub op: u32,
    pub kind: String,
    pub label: String,
    pub start_us: f64,
    pub end_us: f64,
    pub bytes: u64,
    pub flops: f64,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TimelineFileError {
    #[error("not a flashoverlap timeline (format `{0}`)")]
    Format(String),
    #[error("timeline version {found} is not supported (this build reads version {VERSION})")]
    Version { found: u32 },
    #[error("key `{key}`: invalid value `{value}`")]
    Invalid { key: String, value: String },
    #[error(
        "key `ranks`: {ranks} ranks is more than a timeline may hold ({max}, the most devices a topology may have)"
    )]
    TooManyRanks { ranks: u32, max: u64 },
}

fn kind_name(k: StreamKind) -> &'static str {
    match k {
        StreamKind::Compute => "compute",
        StreamKind::Comm => "comm",
    }
}

impl From<&Timeline> for TimelineFile {
    fn from(t: &Timeline) -> TimelineFile {
        TimelineFile {
            format: FORMAT.into(),
            version: VERSION,
            source: t.source.name().into(),
            scenario: t.scenario.clone(),
            strategy: t.strategy.clone(),
            ranks: t.ranks,
            peak_flops: t.peak_flops,
            model_flops: t.model_flops,
            streams: t
                .streams
                .iter()
                .map(|s| StreamFile {
                    rank: s.rank,
                    name: s.name.clone(),
                    kind: kind_name(s.kind).into(),
                })
                .collect(),
            links: t.links.clone(),
            spans: t
                .spans
                .iter()
                .map(|s| {
                    let (lane, index) = match s.lane {
                        Lane::Stream(i) => ("stream", i),
                        Lane::Link(i) => ("link", i),
                    };
                    SpanFile {
                        lane: lane.into(),
                        index,
                        op: s.op,
                        kind: s.class.name().into(),
                        label: t.label(s).into_owned(),
                        start_us: s.start * 1e6,
                        end_us: s.end * 1e6,
                        bytes: s.bytes,
                        flops: s.flops,
                    }
                })
                .collect(),
            scopes: t
                .scopes
                .iter()
                .map(|(first, sc)| ScopeFile {
                    first_op: *first,
                    layer: sc.layer,
                    micro_batch: sc.micro_batch,
                    pass: sc.pass.name().into(),
                })
                .collect(),
        }
    }
}

impl TryFrom<TimelineFile> for Timeline {
    type Error = TimelineFileError;

    fn try_from(f: TimelineFile) -> Result<Timeline, TimelineFileError> {
        let bad = |key: String, value: String| TimelineFileError::Invalid { key, value };
        if f.format != FORMAT {
            return Err(TimelineFileError::Format(f.format));
        }
        if f.version != VERSION {
            return Err(TimelineFileError::Version { found: f.version });
        }
        let source = match f.source.as_str() {
            "predicted" => Source::Predicted,
            "measured" => Source::Measured,
            other => return Err(bad("source".into(), other.into())),
        };
        // Metrics hold a row per rank: a header's rank count is bounded before it sizes them.
        let max = crate::topology::MAX_DEVICES;
        if u64::from(f.ranks) > max {
            return Err(TimelineFileError::TooManyRanks {
                ranks: f.ranks,
                max,
            });
        }
        let mut streams = Vec::with_capacity(f.streams.len());
        for (i, s) in f.streams.into_iter().enumerate() {
            let kind = match s.kind.as_str() {
                "compute" => StreamKind::Compute,
                "comm" => StreamKind::Comm,
                other => return Err(bad(format!("streams[{i}].kind"), other.into())),
            };
            if s.rank >= f.ranks {
                return Err(bad(format!("streams[{i}].rank"), s.rank.to_string()));
            }
            streams.push(StreamInfo {
                rank: s.rank,
                name: s.name,
                kind,
                wire: None,
                block: None,
            });
        }
        let mut spans = Vec::with_capacity(f.spans.len());
        for (i, s) in f.spans.into_iter().enumerate() {
            let lane = match (s.lane.as_str(), s.index) {
                ("stream", x) if (x as usize) < streams.len() => Lane::Stream(x),
                ("link", x) if (x as usize) < f.links.len() => Lane::Link(x),
                (l, x) => return Err(bad(format!("spans[{i}].lane/index"), format!("{l}/{x}"))),
            };
            let class = OpClass::parse(&s.kind)
                .ok_or_else(|| bad(format!("spans[{i}].kind"), s.kind.clone()))?;
            let ok = s.start_us.is_finite() && s.end_us.is_finite() && s.end_us >= s.start_us;
            if !ok {
                return Err(bad(
                    format!("spans[{i}].start_us/end_us"),
                    format!("{}/{}", s.start_us, s.end_us),
                ));
            }
            if !s.flops.is_finite() || s.flops < 0.0 {
                return Err(bad(format!("spans[{i}].flops"), s.flops.to_string()));
            }
            spans.push(Span {
                lane,
                op: s.op,
                class,
                label: SpanLabel::Text(s.label.into()),
                start: s.start_us * 1e-6,
                end: s.end_us * 1e-6,
                bytes: s.bytes,
                flops: s.flops,
            });
        }
        for (key, v) in [("peak_flops", f.peak_flops), ("model_flops", f.model_flops)] {
            if !v.is_finite() || v < 0.0 {
                return Err(bad(key.into(), v.to_string()));
            }
        }
        let mut scopes = Vec::with_capacity(f.scopes.len());
        for (i, sc) in f.scopes.into_iter().enumerate() {
            let pass = Pass::parse(&sc.pass)
                .ok_or_else(|| bad(format!("scopes[{i}].pass"), sc.pass.clone()))?;
            if scopes
                .last()
                .is_some_and(|&(first, _)| first >= sc.first_op)
            {
                return Err(bad(
                    format!("scopes[{i}].first_op"),
                    format!("{} (not after the previous entry's)", sc.first_op),
                ));
            }
            let scope = Scope {
                layer: sc.layer,
                micro_batch: sc.micro_batch,
                pass,
            };
            scopes.push((sc.first_op, scope));
        }
        Ok(Timeline {
            source,
            scenario: f.scenario,
            strategy: f.strategy,
            ranks: f.ranks,
            streams,
            links: f.links,
            sites: Vec::new(),
            spans,
            scopes,
            link_bandwidth: Vec::new(),
            model_flops: f.model_flops,
            peak_flops: f.peak_flops,
        })
    }
}

/// A timeline's file form as one line of JSON and a newline (`timeline-*.json`,
/// `measured-*.json`, `predicted-*.json`).
pub fn to_json(t: &Timeline) -> String {
    let mut s = serde_json::to_string(&TimelineFile::from(t)).expect("timeline serializes");
    s.push('\n');
    s
}

/// [`to_json`] written to `w` (the same bytes, without the text in memory).
pub fn write_json(w: &mut dyn std::io::Write, t: &Timeline) -> std::io::Result<()> {
    serde_json::to_writer(&mut *w, &TimelineFile::from(t)).map_err(std::io::Error::from)?;
    w.write_all(b"\n")
}
