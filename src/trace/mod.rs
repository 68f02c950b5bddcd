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
//!   sort indices so that ranks and streams appear in order;
//! - each message is a flow arrow from its send's slice to its receive's.

use crate::plan::{OpKind, Plan};
use crate::timeline::{Lane, Timeline};
use serde::Serialize;

#[derive(Serialize)]
struct Trace<'a> {
    #[serde(rename = "traceEvents")]
    trace_events: Vec<Event<'a>>,
    #[serde(rename = "displayTimeUnit")]
    display_time_unit: &'static str,
}

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
        name: std::borrow::Cow<'a, str>,
        cat: &'static str,
        ph: &'static str,
        ts: Micros,
        dur: Micros,
        pid: u32,
        tid: u32,
        args: SpanArgs,
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
struct SpanArgs {
    op: u32,
    bytes: u64,
    flops: f64,
}

/// A time in whole nanoseconds, written as µs with at most three decimals.
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

/// What part of the timelines a trace holds (a step's trace can be 100 MB whole).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TraceFilter {
    /// Only spans that overlap this window, in seconds (whole spans, not clipped).
    pub window: Option<(f64, f64)>,
    /// Only these ranks' processes (links stay: they carry every rank's traffic).
    pub ranks: Option<Vec<u32>>,
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
    let mut recvs: std::collections::HashMap<(u32, u32, u64), Vec<u32>> =
        std::collections::HashMap::new();
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

/// One trace holding every timeline given, one block of processes each.
pub fn chrome_trace(timelines: &[&Timeline]) -> String {
    let none: Vec<(&Timeline, &[(u32, u32)])> = timelines.iter().map(|t| (*t, &[][..])).collect();
    chrome_trace_filtered(&none, &TraceFilter::default())
}

/// [`chrome_trace`] of the part `filter` keeps, each timeline with its messages'
/// (send op, receive op) pairs ([`message_pairs`] of its plan), drawn as flow arrows
/// from the start of the send's slice to its receive's slice.
pub fn chrome_trace_filtered(
    timelines: &[(&Timeline, &[(u32, u32)])],
    filter: &TraceFilter,
) -> String {
    let mut flow_id = 0u64;
    let mut ev = Vec::new();
    let mut base = 0u32;
    let mut next_tid = 0u32;
    for &(tl, pairs) in timelines {
        let links_pid = base + tl.ranks;
        for r in (0..tl.ranks).filter(|&r| filter.keeps_rank(r)) {
            ev.push(meta(
                "process_name",
                base + r,
                None,
                format!("{} · rank {r}", tl.strategy),
            ));
            ev.push(sort_index("process_sort_index", base + r, None, base + r));
        }
        if !tl.links.is_empty() {
            ev.push(meta(
                "process_name",
                links_pid,
                None,
                format!("{} · links", tl.strategy),
            ));
            ev.push(sort_index("process_sort_index", links_pid, None, links_pid));
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
        // Per lane: each sub-track's end so far and its tid.
        let mut tracks: Vec<Vec<(u64, u32)>> = vec![Vec::new(); lanes];
        let mut spans = Vec::with_capacity(tl.spans.len());
        // Each op's first slice on a stream: (pid, tid, start in ns), for the arrows.
        let mut placed: std::collections::HashMap<u32, (u32, u32, u64)> =
            std::collections::HashMap::new();
        for k in order {
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
            let pid = match s.lane {
                Lane::Stream(i) => base + tl.streams[i as usize].rank,
                Lane::Link(_) => links_pid,
            };
            if matches!(s.lane, Lane::Stream(_)) {
                placed
                    .entry(s.op)
                    .or_insert((pid, tracks[lane][sub].1, start));
            }
            spans.push(Event::Span {
                name: tl.label(s),
                cat: s.class.name(),
                ph: "X",
                ts: Micros(start),
                dur: Micros(end - start),
                pid,
                tid: tracks[lane][sub].1,
                args: SpanArgs {
                    op: s.op,
                    bytes: s.bytes,
                    flops: s.flops,
                },
            });
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
                ev.push(meta("thread_name", pid, Some(tid), label));
                ev.push(sort_index("thread_sort_index", pid, Some(tid), tid));
            }
        }
        ev.extend(spans);
        for &(send, recv) in pairs {
            let (Some(&(sp, st, s0)), Some(&(rp, rt, r0))) = (placed.get(&send), placed.get(&recv))
            else {
                continue;
            };
            flow_id += 1;
            for (ph, pid, tid, ts, bp) in [("s", sp, st, s0, None), ("f", rp, rt, r0, Some("e"))] {
                ev.push(Event::Flow {
                    name: "message",
                    cat: "message",
                    ph,
                    id: flow_id,
                    ts: Micros(ts),
                    pid,
                    tid,
                    bp,
                });
            }
        }
        base = links_pid + 1;
    }
    let t = Trace {
        trace_events: ev,
        display_time_unit: "ns",
    };
    serde_json::to_string(&t).expect("trace serializes")
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
