//! Chrome trace event JSON (opens in Perfetto and chrome://tracing). Times in µs. Each
//! strategy's ranks are processes (`<strategy> · rank r`), streams are threads; link
//! occupancy goes in one more process per strategy.
//!
//! Written for Perfetto's import rules:
//! - every boundary sits on one integer-nanosecond grid (`ts` and `dur` in µs with at
//!   most three decimals, the end rounded once), so an op that ends where the next one
//!   on its lane starts meets it exactly and Perfetto keeps both slices;
//! - slices of one lane that really overlap (a comm stream's sends beside its receives,
//!   concurrent flows on a link) go to sub-tracks of their own (`comm`, `comm (2)`, …),
//!   so no slice of a track overlaps another but by nesting;
//! - thread ids are unique across the whole trace (Perfetto merges equal tids), with
//!   sort indices so that ranks and streams appear in order.
//!
//! What a user looks for:
//! - each message is a flow arrow from its send's slice to its receive's (never ending
//!   before it starts: a receive posted early gets the arrow where the send starts);
//! - each slice's args: op, site, layer, micro-batch, pass, shape, bytes, FLOPs and the
//!   strategy;
//! - an instant marker on a rank's compute stream where each layer's forward and
//!   backward (and recomputed forward) of each micro-batch starts;
//! - counter tracks per rank (`comm exposed`: 1 while the rank communicates and computes
//!   nothing; `comm ops in flight`; `comm SMs held` where the transport's kernels hold
//!   SMs) and per link (`utilization %`, each transfer at its mean rate over its span).

use crate::plan::{OpKind, Plan, Scope, StreamKind};
use crate::timeline::metrics::rank_metrics;
use crate::timeline::{Lane, Timeline};
use serde::Serialize;
use std::borrow::Cow;
use std::collections::HashMap;
use std::io::Write;

#[derive(Serialize)]
#[serde(untagged)]
enum Event<'a> {
    Meta {
        name: &'static str,
        ph: &'static str,
        pid: u32,
        #[serde(skip_serializing_if = "Option::is_none")]
        tid: Option<u32>,
        args: MetaArgs,
    },
    /// A flow arrow's end: `s` at its send, `f` (bound to the enclosing slice) at its
    /// receive.
    Flow {
        name: &'static str,
        cat: &'static str,
        ph: &'static str,
        id: u64,
        ts: Micros,
        pid: u32,
        tid: u32,
        #[serde(skip_serializing_if = "Option::is_none")]
        bp: Option<&'static str>,
    },
    Span {
        name: Cow<'a, str>,
        cat: &'static str,
        ph: &'static str,
        ts: Micros,
        dur: Micros,
        pid: u32,
        tid: u32,
        args: SpanArgs<'a>,
    },
    /// A thread-scoped instant (`ph: i`, `s: t`).
    Instant {
        name: String,
        cat: &'static str,
        ph: &'static str,
        s: &'static str,
        ts: Micros,
        pid: u32,
        tid: u32,
    },
    /// A counter sample (`ph: C`): the track is named `<name> <arg key>`.
    Counter {
        name: &'static str,
        ph: &'static str,
        ts: Micros,
        pid: u32,
        args: CounterArgs<'a>,
    },
}

#[derive(Serialize)]
struct MetaArgs {
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sort_index: Option<u32>,
}

#[derive(Serialize)]
struct SpanArgs<'a> {
    op: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    site: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    layer: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    micro_batch: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pass: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    shape: Option<String>,
    bytes: u64,
    flops: f64,
    strategy: &'a str,
}

/// One counter value, keyed by the track's second word.
struct CounterArgs<'a> {
    key: &'a str,
    value: f64,
}

impl Serialize for CounterArgs<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(1))?;
        m.serialize_entry(self.key, &self.value)?;
        m.end()
    }
}

/// A time in whole nanoseconds, written as µs with at most three decimals.
#[derive(Clone, Copy)]
struct Micros(u64);

impl Serialize for Micros {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // The double nearest ns / 1000, which the shortest round-trip form prints as
        // that decimal (at most three decimals; exact below 2^53 ns).
        (self.0 as f64 / 1000.0).serialize(s)
    }
}

/// Seconds to whole nanoseconds (times are finite and non-negative).
fn ns(t: f64) -> u64 {
    (t * 1e9).round().max(0.0) as u64
}

fn meta(name: &'static str, pid: u32, tid: Option<u32>, label: String) -> Event<'static> {
    Event::Meta {
        name,
        ph: "M",
        pid,
        tid,
        args: MetaArgs {
            name: Some(label),
            sort_index: None,
        },
    }
}

fn sort_index(name: &'static str, pid: u32, tid: Option<u32>, index: u32) -> Event<'static> {
    Event::Meta {
        name,
        ph: "M",
        pid,
        tid,
        args: MetaArgs {
            name: None,
            sort_index: Some(index),
        },
    }
}

/// Which layers and micro-batches a trace keeps (inclusive ranges; `None`: all).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScopeRange {
    pub layers: Option<(u32, u32)>,
    pub micro_batches: Option<(u32, u32)>,
    /// Only this pass.
    pub pass: Option<crate::plan::Pass>,
}

impl ScopeRange {
    /// Whether an op of scope `s` is kept.
    pub fn keeps(&self, s: Option<Scope>) -> bool {
        let within = |r: Option<(u32, u32)>, v: Option<u32>| {
            r.is_none_or(|(a, b)| v.is_some_and(|v| a <= v && v <= b))
        };
        within(self.layers, s.and_then(|s| s.layer))
            && within(self.micro_batches, s.map(|s| s.micro_batch))
            && self.pass.is_none_or(|p| s.is_some_and(|s| s.pass == p))
    }
}

/// What part of the timelines a trace holds (a step's trace can be 100 MB whole).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TraceFilter {
    /// Only spans that overlap this window, in seconds (whole spans, not clipped).
    pub window: Option<(f64, f64)>,
    /// Only the ops of these layers and micro-batches.
    pub scope: Option<ScopeRange>,
    /// Only these ranks' processes (links stay: they carry every rank's traffic).
    pub ranks: Option<Vec<u32>>,
}

/// `--trace-window`: `START:END` in µs, or a layer and micro-batch range such as
/// `layer=3-5`, `mb=0`, `layer=0-1,mb=2`, optionally one pass (`pass=fwd`, `bwd` or
/// `recompute`).
pub fn parse_window(w: &str) -> Result<TraceFilter, String> {
    let bad = || {
        format!(
            "`{w}`: expected START:END in µs with 0 ≤ START < END (e.g. 0:5000), or \
             layer=A[-B], mb=A[-B] and/or pass=fwd|bwd|recompute (e.g. layer=3-5,mb=0)"
        )
    };
    if let Some((x, y)) = w.split_once(':') {
        let (x, y): (f64, f64) = (
            x.trim().parse().map_err(|_| bad())?,
            y.trim().parse().map_err(|_| bad())?,
        );
        if !(x.is_finite() && y.is_finite() && 0.0 <= x && x < y) {
            return Err(bad());
        }
        return Ok(TraceFilter {
            window: Some((x * 1e-6, y * 1e-6)),
            ..TraceFilter::default()
        });
    }
    let mut r = ScopeRange::default();
    for part in w.split(',') {
        let (k, v) = part.split_once('=').ok_or_else(bad)?;
        if k.trim() == "pass" {
            let p = crate::plan::Pass::parse(v.trim()).ok_or_else(bad)?;
            if r.pass.replace(p).is_some() {
                return Err(format!("`{w}`: `pass` is given twice"));
            }
            continue;
        }
        let (a, b) = v.split_once('-').unwrap_or((v, v));
        let (a, b): (u32, u32) = (
            a.trim().parse().map_err(|_| bad())?,
            b.trim().parse().map_err(|_| bad())?,
        );
        if a > b {
            return Err(bad());
        }
        let slot = match k.trim() {
            "layer" | "layers" => &mut r.layers,
            "mb" | "micro-batch" | "micro_batch" => &mut r.micro_batches,
            _ => return Err(bad()),
        };
        if slot.replace((a, b)).is_some() {
            return Err(format!("`{w}`: `{}` is given twice", k.trim()));
        }
    }
    Ok(TraceFilter {
        scope: Some(r),
        ..TraceFilter::default()
    })
}

impl TraceFilter {
    fn keeps_rank(&self, r: u32) -> bool {
        self.ranks
            .as_ref()
            .is_none_or(|v| v.binary_search(&r).is_ok())
    }

    fn keeps_time(&self, start: f64, end: f64) -> bool {
        self.window.is_none_or(|(a, b)| end >= a && start <= b)
    }
}

/// Each send of `plan` with the receive that takes its message (same endpoints and
/// tag), by send op; sends whose receive the plan does not hold (a symmetric plan's
/// edge) are left out.
pub fn message_pairs(plan: &Plan) -> Vec<(u32, u32)> {
    let mut recvs: HashMap<(u32, u32, u64), Vec<u32>> = HashMap::new();
    for (i, op) in plan.ops.iter().enumerate().rev() {
        if let OpKind::Recv { peer, tag, .. } = op.kind {
            recvs
                .entry((peer, op.rank, tag))
                .or_default()
                .push(i as u32);
        }
    }
    let mut out = Vec::new();
    for (i, op) in plan.ops.iter().enumerate() {
        if let OpKind::Send { peer, tag, .. } = op.kind
            && let Some(r) = recvs.get_mut(&(op.rank, peer, tag)).and_then(Vec::pop)
        {
            out.push((i as u32, r));
        }
    }
    out
}

/// SMs that posted communication kernels hold (an SM-holding transport: NCCL-style
/// send/recv kernels), for the `comm SMs held` counter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CommSms {
    /// SMs a posted send or receive outside a thread block holds.
    pub per_op: u64,
    /// At most this many on one GPU.
    pub cap: u64,
}

/// One timeline of a trace with what it ran.
#[derive(Clone, Copy)]
pub struct TraceInput<'a> {
    pub timeline: &'a Timeline,
    /// The plan the timeline ran: its messages become flow arrows, its GEMM shapes go
    /// in the slices' args, its thread blocks into the SM counter.
    pub plan: Option<&'a Plan>,
    pub comm_sms: Option<CommSms>,
}

impl<'a> TraceInput<'a> {
    pub fn bare(timeline: &'a Timeline) -> TraceInput<'a> {
        TraceInput {
            timeline,
            plan: None,
            comm_sms: None,
        }
    }
}

/// One trace holding every timeline given, one block of processes each.
pub fn chrome_trace(timelines: &[&Timeline]) -> String {
    let inputs: Vec<TraceInput> = timelines.iter().map(|t| TraceInput::bare(t)).collect();
    chrome_trace_filtered(&inputs, &TraceFilter::default())
}

fn shape(kind: &OpKind) -> Option<String> {
    match kind {
        OpKind::Gemm { m, n, k, dtype, .. } => Some(format!("{m}x{n}x{k} {dtype}")),
        OpKind::GroupedGemm {
            groups,
            m,
            n,
            k,
            dtype,
        } => Some(format!("{groups} x {m}x{n}x{k} {dtype} (grouped)")),
        OpKind::Attention(a) => Some(format!(
            "attention q={} kv={} bh={} d={}{} {}",
            a.seq_q,
            a.seq_kv,
            a.bh,
            a.head_dim,
            if a.causal { " causal" } else { "" },
            a.dtype
        )),
        _ => None,
    }
}

/// A step function's samples `(t ns, value)` as counter events, within `window` (ns):
/// the value at the window's start, then every change inside it.
fn counter_events<'a>(
    ev: &mut Vec<Event<'a>>,
    (name, key): (&'static str, &'a str),
    pid: u32,
    samples: &[(u64, f64)],
    window: Option<(u64, u64)>,
) {
    let (a, b) = window.unwrap_or((0, u64::MAX));
    let mut last: Option<f64> = None;
    let mut before: Option<f64> = None;
    for &(t, v) in samples {
        if t < a {
            before = Some(v);
            continue;
        }
        if t > b {
            break;
        }
        if last.is_none()
            && let Some(v0) = before
            && t > a
        {
            ev.push(counter(name, key, pid, a, v0));
            last = Some(v0);
        }
        if last != Some(v) {
            ev.push(counter(name, key, pid, t, v));
            last = Some(v);
        }
    }
}

fn counter<'a>(name: &'static str, key: &'a str, pid: u32, t: u64, value: f64) -> Event<'a> {
    Event::Counter {
        name,
        ph: "C",
        ts: Micros(t),
        pid,
        args: CounterArgs { key, value },
    }
}

/// A sum of `(start ns, end ns, amount)` over time: samples at every change.
fn step_sum(mut deltas: Vec<(u64, f64)>, round: impl Fn(f64) -> f64) -> Vec<(u64, f64)> {
    deltas.sort_by(|x, y| x.0.cmp(&y.0).then(x.1.total_cmp(&y.1)));
    let mut out: Vec<(u64, f64)> = Vec::new();
    let mut level = 0.0;
    for (t, d) in deltas {
        level += d;
        let v = round(level);
        match out.last_mut() {
            Some(last) if last.0 == t => last.1 = v,
            _ => out.push((t, v)),
        }
    }
    out
}

/// [`chrome_trace`] of the part `filter` keeps, with flow arrows, slice args, layer
/// markers and counter tracks (module docs).
pub fn chrome_trace_filtered(inputs: &[TraceInput], filter: &TraceFilter) -> String {
    let mut out = Vec::new();
    write_chrome_trace(&mut out, inputs, filter).expect("writing to memory");
    String::from_utf8(out).expect("JSON is UTF-8")
}

/// Writes a trace's events one at a time as they are made (a JSON array element each),
/// so a trace of millions of slices never sits in memory whole.
struct Emitter<'w> {
    w: &'w mut dyn Write,
    first: bool,
}

impl Emitter<'_> {
    fn emit(&mut self, e: &Event) -> std::io::Result<()> {
        if !self.first {
            self.w.write_all(b",")?;
        }
        self.first = false;
        serde_json::to_writer(&mut *self.w, e).map_err(std::io::Error::from)
    }
}

/// [`chrome_trace_filtered`] written to `w` as it is made: the same bytes, without the
/// whole trace (or its events) in memory. A timeline's slices are walked twice: once
/// to deal them onto sub-tracks (whose names come first in the file), once to write
/// them.
pub fn write_chrome_trace(
    w: &mut dyn Write,
    inputs: &[TraceInput],
    filter: &TraceFilter,
) -> std::io::Result<()> {
    w.write_all(b"{\"traceEvents\":[")?;
    let mut out = Emitter { w, first: true };
    let mut flow_id = 0u64;
    let mut base = 0u32;
    let mut next_tid = 0u32;
    for input in inputs {
        let tl = input.timeline;
        let links_pid = base + tl.ranks;
        for r in (0..tl.ranks).filter(|&r| filter.keeps_rank(r)) {
            out.emit(&meta(
                "process_name",
                base + r,
                None,
                format!("{} · rank {r}", tl.strategy),
            ))?;
            out.emit(&sort_index("process_sort_index", base + r, None, base + r))?;
        }
        if !tl.links.is_empty() {
            out.emit(&meta(
                "process_name",
                links_pid,
                None,
                format!("{} · links", tl.strategy),
            ))?;
            out.emit(&sort_index(
                "process_sort_index",
                links_pid,
                None,
                links_pid,
            ))?;
        }
        // Each lane's spans in time order, dealt onto the first of its sub-tracks whose
        // last slice has ended (interval partitioning: as few sub-tracks as overlap).
        let lanes = tl.streams.len() + tl.links.len();
        let lane_of = |l: Lane| match l {
            Lane::Stream(i) => i as usize,
            Lane::Link(i) => tl.streams.len() + i as usize,
        };
        let rank_of_lane = |l: Lane| match l {
            Lane::Stream(i) => Some(tl.streams[i as usize].rank),
            Lane::Link(_) => None,
        };
        let mut order: Vec<usize> = (0..tl.spans.len())
            .filter(|&k| {
                let s = &tl.spans[k];
                rank_of_lane(s.lane).is_none_or(|r| filter.keeps_rank(r))
                    && filter.keeps_time(s.start, s.end)
                    && filter.scope.is_none_or(|sc| sc.keeps(tl.scope(s)))
            })
            .collect();
        order.sort_by_key(|&k| {
            let s = &tl.spans[k];
            (
                lane_of(s.lane),
                ns(s.start),
                std::cmp::Reverse(ns(s.end)),
                k,
            )
        });
        // The window the counters cover: the one asked for, or the kept spans'.
        let window = match (filter.window, filter.scope) {
            (Some((a, b)), _) => Some((ns(a), ns(b))),
            (None, Some(_)) => {
                let a = order.iter().map(|&k| ns(tl.spans[k].start)).min();
                let b = order.iter().map(|&k| ns(tl.spans[k].end)).max();
                Some((a.unwrap_or(0), b.unwrap_or(0)))
            }
            (None, None) => None,
        };
        // Per lane: each sub-track's end so far and its tid.
        let mut tracks: Vec<Vec<(u64, u32)>> = vec![Vec::new(); lanes];
        // Each kept slice's sub-track (tid), in `order`'s order.
        let mut tids: Vec<u32> = Vec::with_capacity(order.len());
        // Each op's first slice on a stream: (pid, tid, start, end in ns), for the arrows.
        let mut placed: HashMap<u32, (u32, u32, u64, u64)> = HashMap::new();
        // Where each (rank, layer, micro-batch, pass) starts on a compute stream.
        let mut marks: HashMap<(u32, Scope), (u64, u32)> = HashMap::new();
        for &k in &order {
            let s = &tl.spans[k];
            let lane = lane_of(s.lane);
            let (start, end) = (ns(s.start), ns(s.end).max(ns(s.start)));
            let sub = match tracks[lane].iter().position(|&(e, _)| e <= start) {
                Some(i) => i,
                None => {
                    let tid = next_tid;
                    next_tid += 1;
                    tracks[lane].push((0, tid));
                    tracks[lane].len() - 1
                }
            };
            tracks[lane][sub].0 = end;
            let tid = tracks[lane][sub].1;
            let pid = match s.lane {
                Lane::Stream(i) => base + tl.streams[i as usize].rank,
                Lane::Link(_) => links_pid,
            };
            let scope = tl.scope(s);
            if let Lane::Stream(i) = s.lane {
                placed.entry(s.op).or_insert((pid, tid, start, end));
                let st = &tl.streams[i as usize];
                if let Some(sc) = scope
                    && sc.layer.is_some()
                    && st.kind == StreamKind::Compute
                {
                    let m = marks.entry((st.rank, sc)).or_insert((start, tid));
                    if start < m.0 {
                        *m = (start, tid);
                    }
                }
            }
            tids.push(tid);
        }
        // Names and order of every sub-track (a lane with no span still gets one).
        for (lane, subs) in tracks.iter_mut().enumerate() {
            if lane < tl.streams.len() && !filter.keeps_rank(tl.streams[lane].rank) {
                continue;
            }
            if subs.is_empty() {
                subs.push((0, next_tid));
                next_tid += 1;
            }
            let (pid, name) = if lane < tl.streams.len() {
                let st = &tl.streams[lane];
                (base + st.rank, st.name.clone())
            } else {
                (links_pid, tl.links[lane - tl.streams.len()].clone())
            };
            for (j, &(_, tid)) in subs.iter().enumerate() {
                let label = if j == 0 {
                    name.clone()
                } else {
                    format!("{name} ({})", j + 1)
                };
                out.emit(&meta("thread_name", pid, Some(tid), label))?;
                out.emit(&sort_index("thread_sort_index", pid, Some(tid), tid))?;
            }
        }
        for (&k, &tid) in order.iter().zip(&tids) {
            let s = &tl.spans[k];
            let (start, end) = (ns(s.start), ns(s.end).max(ns(s.start)));
            let pid = match s.lane {
                Lane::Stream(i) => base + tl.streams[i as usize].rank,
                Lane::Link(_) => links_pid,
            };
            let scope = tl.scope(s);
            let op = input.plan.and_then(|p| p.ops.get(s.op as usize));
            let site = input
                .plan
                .filter(|p| (s.op as usize) < p.ops.len())
                .map(|p| p.site_name(s.op));
            out.emit(&Event::Span {
                name: tl.label(s),
                cat: s.class.name(),
                ph: "X",
                ts: Micros(start),
                dur: Micros(end - start),
                pid,
                tid,
                args: SpanArgs {
                    op: s.op,
                    site,
                    layer: scope.and_then(|sc| sc.layer),
                    micro_batch: scope.map(|sc| sc.micro_batch),
                    pass: scope.map(|sc| sc.pass.name()),
                    shape: op.and_then(|o| shape(&o.kind)),
                    bytes: s.bytes,
                    flops: s.flops,
                    strategy: &tl.strategy,
                },
            })?;
        }
        // Layer markers in time order per rank.
        let mut marks: Vec<((u32, Scope), (u64, u32))> = marks.into_iter().collect();
        marks.sort_by_key(|&((r, sc), (t, _))| (r, t, sc.micro_batch, sc.layer));
        for ((r, sc), (t, tid)) in marks {
            out.emit(&Event::Instant {
                name: format!(
                    "layer {} {} · mb {}",
                    sc.layer.unwrap_or(0),
                    sc.pass.name(),
                    sc.micro_batch
                ),
                cat: "layer",
                ph: "i",
                s: "t",
                ts: Micros(t),
                pid: base + r,
                tid,
            })?;
        }
        if let Some(plan) = input.plan {
            for (send, recv) in message_pairs(plan) {
                let (Some(&(sp, st, s0, _)), Some(&(rp, rt, r0, r1))) =
                    (placed.get(&send), placed.get(&recv))
                else {
                    continue;
                };
                // A receive posted before its send starts: the arrow ends where the send
                // starts (inside the receive's slice), never before its start, which
                // Perfetto, reading events in time order, would find without a start.
                let r0 = r0.max(s0).min(r1);
                flow_id += 1;
                for (ph, pid, tid, ts, bp) in
                    [("s", sp, st, s0, None), ("f", rp, rt, r0, Some("e"))]
                {
                    out.emit(&Event::Flow {
                        name: "message",
                        cat: "message",
                        ph,
                        id: flow_id,
                        ts: Micros(ts),
                        pid,
                        tid,
                        bp,
                    })?;
                }
            }
        }
        let mut ev = Vec::new();
        counters(&mut ev, input, base, window, filter);
        for e in &ev {
            out.emit(e)?;
        }
        base = links_pid + 1;
    }
    out.w.write_all(b"],\"displayTimeUnit\":\"ns\"}")
}

/// The counter tracks of one timeline (module docs).
fn counters<'a>(
    ev: &mut Vec<Event<'a>>,
    input: &TraceInput<'a>,
    base: u32,
    window: Option<(u64, u64)>,
    filter: &TraceFilter,
) {
    let tl = input.timeline;
    let n = tl.ranks as usize;
    // Exposed communication per rank, from the metrics' own intervals.
    for (r, m) in rank_metrics(tl).iter().enumerate() {
        if !filter.keeps_rank(r as u32) {
            continue;
        }
        let mut samples = vec![(0u64, 0.0)];
        for &(a, b) in m.exposed.as_slice() {
            samples.push((ns(a), 1.0));
            samples.push((ns(b), 0.0));
        }
        samples.dedup_by(|later, earlier| {
            // An interval ending where the next starts: one sample at the later value.
            if later.0 == earlier.0 {
                earlier.1 = later.1;
                true
            } else {
                false
            }
        });
        counter_events(ev, ("comm", "exposed"), base + r as u32, &samples, window);
    }
    // Communication ops in flight and the SMs they hold, per rank.
    let mut flight: Vec<Vec<(u64, f64)>> = vec![Vec::new(); n];
    // Per rank: (time, +1/−1, block or none).
    let mut posts: Vec<Vec<(u64, i32, Option<u32>)>> = vec![Vec::new(); n];
    for s in &tl.spans {
        let Lane::Stream(i) = s.lane else { continue };
        if !s.class.is_comm() {
            continue;
        }
        let st = &tl.streams[i as usize];
        let r = st.rank as usize;
        let (a, b) = (ns(s.start), ns(s.end).max(ns(s.start)));
        flight[r].push((a, 1.0));
        flight[r].push((b, -1.0));
        posts[r].push((a, 1, st.block));
        posts[r].push((b, -1, st.block));
    }
    for (r, d) in flight.into_iter().enumerate() {
        if filter.keeps_rank(r as u32) && !d.is_empty() {
            let samples = step_sum(d, |x| x.round());
            counter_events(
                ev,
                ("comm", "ops in flight"),
                base + r as u32,
                &samples,
                window,
            );
        }
    }
    if let Some(sms) = input.comm_sms {
        let blocks: &[u32] = input.plan.map_or(&[], |p| &p.blocks);
        for (r, mut p) in posts.into_iter().enumerate() {
            if !filter.keeps_rank(r as u32) || p.is_empty() {
                continue;
            }
            p.sort_by_key(|&(t, d, _)| (t, d));
            let mut loose = 0i64;
            let mut per_block: HashMap<u32, i64> = HashMap::new();
            let mut samples: Vec<(u64, f64)> = Vec::new();
            for (t, d, blk) in p {
                match blk {
                    Some(b) => *per_block.entry(b).or_default() += i64::from(d),
                    None => loose += i64::from(d),
                }
                let held: u64 = loose.max(0) as u64 * sms.per_op
                    + per_block
                        .iter()
                        .filter(|(_, c)| **c > 0)
                        .map(|(b, _)| u64::from(blocks.get(*b as usize).copied().unwrap_or(1)))
                        .sum::<u64>();
                let v = held.min(sms.cap) as f64;
                match samples.last_mut() {
                    Some(last) if last.0 == t => last.1 = v,
                    _ => samples.push((t, v)),
                }
            }
            counter_events(ev, ("comm", "SMs held"), base + r as u32, &samples, window);
        }
    }
    // Link utilization: each transfer at its mean rate over its span.
    if tl.link_bandwidth.len() == tl.links.len() && !tl.links.is_empty() {
        let mut per_link: Vec<Vec<(u64, f64)>> = vec![Vec::new(); tl.links.len()];
        for s in &tl.spans {
            let Lane::Link(l) = s.lane else { continue };
            let bw = tl.link_bandwidth[l as usize];
            let (a, b) = (ns(s.start), ns(s.end));
            if b <= a || !(bw.is_finite() && bw > 0.0) {
                continue;
            }
            let share = s.bytes as f64 / (s.end - s.start) / bw * 100.0;
            per_link[l as usize].push((a, share));
            per_link[l as usize].push((b, -share));
        }
        let pid = base + tl.ranks;
        for (l, d) in per_link.into_iter().enumerate() {
            if d.is_empty() {
                continue;
            }
            let samples = step_sum(d, |x| ((x * 10.0).round() / 10.0).max(0.0));
            counter_events(ev, ("utilization %", &tl.links[l]), pid, &samples, window);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_parse_as_times_or_layer_ranges() {
        let w = parse_window("1000:2500").unwrap();
        assert_eq!(w.window, Some((1e-3, 2.5e-3)));
        let w = parse_window("layer=3-5,mb=0").unwrap();
        assert_eq!(
            w.scope,
            Some(ScopeRange {
                layers: Some((3, 5)),
                micro_batches: Some((0, 0)),
                pass: None,
            })
        );
        assert_eq!(
            parse_window("mb=2").unwrap().scope.unwrap().micro_batches,
            Some((2, 2))
        );
        for bad in [
            "5:1",
            "x:2",
            "layer=5-3",
            "layer=1,layer=2",
            "stage=1",
            "layer",
            "",
        ] {
            assert!(parse_window(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn scope_ranges_keep_what_they_name() {
        let s = |layer, micro_batch| {
            Some(Scope {
                layer,
                micro_batch,
                pass: crate::plan::Pass::Forward,
            })
        };
        let r = ScopeRange {
            layers: Some((3, 5)),
            ..ScopeRange::default()
        };
        assert!(r.keeps(s(Some(3), 7)) && r.keeps(s(Some(5), 0)));
        assert!(!r.keeps(s(Some(6), 0)) && !r.keeps(s(None, 0)) && !r.keeps(None));
        let m = ScopeRange {
            micro_batches: Some((1, 1)),
            ..ScopeRange::default()
        };
        assert!(m.keeps(s(None, 1)) && !m.keeps(s(Some(0), 0)));
        let b = ScopeRange {
            pass: Some(crate::plan::Pass::Backward),
            ..ScopeRange::default()
        };
        assert!(!b.keeps(s(Some(0), 0)) && !b.keeps(None));
        assert_eq!(
            parse_window("pass=bwd,layer=2")
                .unwrap()
                .scope
                .unwrap()
                .pass,
            Some(crate::plan::Pass::Backward)
        );
        assert!(parse_window("pass=sideways").is_err());
    }

    #[test]
    fn counters_sum_steps_and_clip_to_the_window() {
        // Two overlapping unit intervals: 0 → 1 → 2 → 1 → 0.
        let s = step_sum(vec![(10, 1.0), (30, -1.0), (20, 1.0), (40, -1.0)], |x| x);
        assert_eq!(s, [(10, 1.0), (20, 2.0), (30, 1.0), (40, 0.0)]);
        // Ends and starts at one instant: one sample.
        let s = step_sum(vec![(0, 1.0), (5, -1.0), (5, 1.0), (9, -1.0)], |x| x);
        assert_eq!(s, [(0, 1.0), (5, 1.0), (9, 0.0)]);
        let mut ev = Vec::new();
        counter_events(
            &mut ev,
            ("c", "k"),
            0,
            &[(10, 1.0), (20, 2.0), (30, 1.0), (40, 0.0)],
            Some((25, 35)),
        );
        let got: Vec<(u64, f64)> = ev
            .iter()
            .map(|e| match e {
                Event::Counter { ts, args, .. } => (ts.0, args.value),
                _ => unreachable!(),
            })
            .collect();
        // The value at the window's start, then the change inside it.
        assert_eq!(got, [(25, 2.0), (30, 1.0)]);
    }
}
