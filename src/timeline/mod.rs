//! The Timeline: one schema for predicted and measured runs. A span is one op on one
//! stream of one rank (or one transfer on one link), with start and end in seconds.
//! Comparing a prediction with a measurement is a join on op id.

pub mod file;
pub mod metrics;

/// Spans (or intervals) below this many are worked through on the calling thread:
/// handing a small timeline to the thread pool costs more than it saves.
pub(crate) const PARALLEL_MIN: usize = 1 << 15;

use crate::exec::sim::SimResult;
use crate::plan::{OpClass, OpId, OpLabel, Plan, Scope, ScopeMark, StreamInfo};
use crate::topology::Topology;
use std::borrow::Cow;

/// Where a span runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Lane {
    /// Index into [`Timeline::streams`].
    Stream(u32),
    /// Index into [`Timeline::links`].
    Link(u32),
}

/// A span's label: the parts of a plan op's label (rendered on demand against
/// [`Timeline::sites`], so building a timeline of millions of spans allocates no strings),
/// or text as read back from a file.
#[derive(Debug, Clone, PartialEq)]
pub enum SpanLabel {
    Op(OpLabel),
    Text(Box<str>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    pub lane: Lane,
    pub op: OpId,
    pub class: OpClass,
    pub label: SpanLabel,
    pub start: f64,
    pub end: f64,
    pub bytes: u64,
    pub flops: f64,
}

/// Whether a timeline was predicted by the simulator or measured on hardware.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Predicted,
    Measured,
}

impl Source {
    pub fn name(self) -> &'static str {
        match self {
            Source::Predicted => "predicted",
            Source::Measured => "measured",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Timeline {
    pub source: Source,
    pub scenario: String,
    pub strategy: String,
    pub ranks: u32,
    pub streams: Vec<StreamInfo>,
    pub links: Vec<String>,
    /// Site names that [`SpanLabel::Op`] labels index.
    pub sites: Vec<String>,
    /// Stream spans in op-id order, then link spans in completion order.
    pub spans: Vec<Span>,
    /// Layer, micro-batch and pass of runs of ops (the plan's [`Plan::scopes`]).
    pub scopes: Vec<ScopeMark>,
    /// Capacity of each link of [`Timeline::links`] in bytes/s (empty where unknown:
    /// measured timelines, files).
    pub link_bandwidth: Vec<f64>,
    pub model_flops: f64,
    /// Peak FLOP/s of one GPU for the run's dtype (for MFU).
    pub peak_flops: f64,
}

impl Timeline {
    /// Build the predicted timeline of `plan` from a simulation result.
    pub fn predicted(
        scenario: &str,
        strategy: &str,
        plan: &Plan,
        topo: &Topology,
        sim: &SimResult,
        peak_flops: f64,
    ) -> Timeline {
        // In parallel (an indexed collect: the order is the ops'), so that a plan of
        // millions of ops has its spans written, and their pages touched, on every core.
        // A small plan stays on this thread (handing it to the pool costs more).
        use rayon::prelude::*;
        let mut spans: Vec<Span> = Vec::with_capacity(plan.op_count() + sim.link_spans.len());
        let span = |(id, (o, t)): (usize, (&crate::plan::Op, &crate::exec::sim::OpTimes))| Span {
            lane: Lane::Stream(o.stream),
            op: id as OpId,
            class: o.kind.class(),
            label: SpanLabel::Op(plan.op_label(id as OpId)),
            start: t.start,
            end: t.end,
            bytes: o.kind.bytes(),
            flops: o.kind.flops(),
        };
        let times = &sim.times[..plan.ops.len()];
        if plan.ops.len() < PARALLEL_MIN {
            spans.extend(plan.ops.iter().zip(times).enumerate().map(span));
        } else {
            plan.ops
                .par_iter()
                .zip(times)
                .enumerate()
                .map(span)
                .collect_into_vec(&mut spans);
        }
        // Only links that carried something get a lane, numbered in first-use order.
        let mut link_index = std::collections::HashMap::new();
        let mut links = Vec::new();
        let mut link_bandwidth = Vec::new();
        for ls in &sim.link_spans {
            let idx = *link_index.entry(ls.link).or_insert_with(|| {
                links.push(topo.link_name(ls.link as usize));
                link_bandwidth.push(topo.link(ls.link as usize).bandwidth);
                links.len() as u32 - 1
            });
            spans.push(Span {
                lane: Lane::Link(idx),
                op: ls.op,
                class: OpClass::Send,
                label: SpanLabel::Op(plan.op_label(ls.op)),
                start: ls.start,
                end: ls.end,
                bytes: ls.bytes,
                flops: 0.0,
            });
        }
        Timeline {
            source: Source::Predicted,
            scenario: scenario.to_string(),
            strategy: strategy.to_string(),
            // A symmetric plan's timeline holds its representative ranks (whose model
            // FLOPs the plan counts), which stand for all.
            ranks: plan.symmetry.unwrap_or(plan.ranks),
            streams: plan.streams.clone(),
            links,
            sites: plan.sites.clone(),
            spans,
            scopes: plan.scopes.clone(),
            link_bandwidth,
            model_flops: plan.model_flops,
            peak_flops,
        }
    }

    /// The measured timeline of `plan`: `times[op] = (start, end)` in seconds, as an
    /// executor recorded them (no link lanes: hardware does not report per-link spans).
    pub fn measured(
        scenario: &str,
        strategy: &str,
        plan: &Plan,
        times: &[(f64, f64)],
        peak_flops: f64,
    ) -> Timeline {
        let spans = plan
            .ops
            .iter()
            .enumerate()
            .map(|(id, o)| Span {
                lane: Lane::Stream(o.stream),
                op: id as OpId,
                class: o.kind.class(),
                label: SpanLabel::Op(plan.op_label(id as OpId)),
                start: times[id].0,
                end: times[id].1,
                bytes: o.kind.bytes(),
                flops: o.kind.flops(),
            })
            .collect();
        Timeline {
            source: Source::Measured,
            scenario: scenario.to_string(),
            strategy: strategy.to_string(),
            ranks: plan.ranks,
            streams: plan.streams.clone(),
            links: Vec::new(),
            sites: plan.sites.clone(),
            spans,
            scopes: plan.scopes.clone(),
            link_bandwidth: Vec::new(),
            model_flops: plan.model_flops,
            peak_flops,
        }
    }

    /// A span's label as text, e.g. `fc1.gemm[s2]`.
    pub fn label<'a>(&self, span: &'a Span) -> Cow<'a, str> {
        match &span.label {
            SpanLabel::Op(l) => Cow::Owned(l.render(&self.sites)),
            SpanLabel::Text(t) => Cow::Borrowed(t),
        }
    }

    /// The layer, micro-batch and pass of a span's op, where recorded.
    pub fn scope(&self, span: &Span) -> Option<Scope> {
        crate::plan::scope_of(&self.scopes, span.op)
    }

    /// Rank of a stream span, `None` for link spans.
    pub fn rank_of(&self, span: &Span) -> Option<u32> {
        match span.lane {
            Lane::Stream(s) => Some(self.streams[s as usize].rank),
            Lane::Link(_) => None,
        }
    }

    pub fn lane_name(&self, lane: Lane) -> String {
        match lane {
            Lane::Stream(s) => {
                let st = &self.streams[s as usize];
                format!("rank {} {}", st.rank, st.name)
            }
            Lane::Link(l) => format!("link {}", self.links[l as usize]),
        }
    }
}
