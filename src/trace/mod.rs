//! Chrome trace event JSON (opens in Perfetto and chrome://tracing). Times in µs. Each
//! strategy's ranks are processes (`<strategy> · rank r`), streams are threads; link
//! occupancy goes in one more process per strategy.

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
    Span {
        name: std::borrow::Cow<'a, str>,
        cat: &'static str,
        ph: &'static str,
        ts: f64,
        dur: f64,
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

/// One trace holding every timeline given, one block of processes each.
pub fn chrome_trace(timelines: &[&Timeline]) -> String {
    let mut ev = Vec::new();
    let mut base = 0u32;
    for tl in timelines {
        let links_pid = base + tl.ranks;
        for r in 0..tl.ranks {
            ev.push(meta(
                "process_name",
                base + r,
                None,
                format!("{} · rank {r}", tl.strategy),
            ));
            ev.push(Event::Meta {
                name: "process_sort_index",
                ph: "M",
                pid: base + r,
                tid: None,
                args: MetaArgs {
                    name: None,
                    sort_index: Some(base + r),
                },
            });
        }
        for (i, s) in tl.streams.iter().enumerate() {
            ev.push(meta(
                "thread_name",
                base + s.rank,
                Some(i as u32),
                s.name.clone(),
            ));
        }
        if !tl.links.is_empty() {
            ev.push(meta(
                "process_name",
                links_pid,
                None,
                format!("{} · links", tl.strategy),
            ));
            for (i, l) in tl.links.iter().enumerate() {
                ev.push(meta("thread_name", links_pid, Some(i as u32), l.clone()));
            }
        }
        for s in &tl.spans {
            let (pid, tid) = match s.lane {
                Lane::Stream(i) => (base + tl.streams[i as usize].rank, i),
                Lane::Link(i) => (links_pid, i),
            };
            ev.push(Event::Span {
                name: tl.label(s),
                cat: s.class.name(),
                ph: "X",
                ts: s.start * 1e6,
                dur: (s.end - s.start) * 1e6,
                pid,
                tid,
                args: SpanArgs {
                    op: s.op,
                    bytes: s.bytes,
                    flops: s.flops,
                },
            });
        }
        base = links_pid + 1;
    }
    let t = Trace {
        trace_events: ev,
        display_time_unit: "ns",
    };
    serde_json::to_string(&t).expect("trace serializes")
}
