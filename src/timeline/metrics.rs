//! Metrics of a Timeline.
//!
//! Time is classified per rank: *compute* while any GEMM, elementwise or copy op of that
//! rank runs (on any stream), *communication* while any send or recv of that rank is in
//! flight (posted and not complete — waiting for a peer counts). *Exposed communication*
//! is the time during which the rank communicates and computes nothing. Per-rank figures
//! are reported for the *critical rank*: the one whose last op ends last (lowest id on a
//! tie), since that rank sets the makespan.

use super::{Lane, Timeline};
use crate::exec::sim::OpTimes;
use crate::plan::{OpClass, Plan, StreamId, StreamInfo};

/// Sorted, disjoint intervals.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Intervals(Vec<(f64, f64)>);

impl Intervals {
    pub fn from_unsorted(mut v: Vec<(f64, f64)>) -> Intervals {
        v.retain(|(a, b)| b > a);
        v.sort_by(|x, y| x.0.total_cmp(&y.0).then(x.1.total_cmp(&y.1)));
        let mut out: Vec<(f64, f64)> = Vec::with_capacity(v.len());
        for (a, b) in v {
            match out.last_mut() {
                Some(last) if a <= last.1 => last.1 = last.1.max(b),
                _ => out.push((a, b)),
            }
        }
        Intervals(out)
    }

    pub fn measure(&self) -> f64 {
        self.0.iter().fold(0.0, |acc, (a, b)| acc + (b - a))
    }

    /// Measure of the intersection with `other`.
    pub fn overlap(&self, other: &Intervals) -> f64 {
        let (mut i, mut j, mut total) = (0, 0, 0.0);
        while i < self.0.len() && j < other.0.len() {
            let (a0, a1) = self.0[i];
            let (b0, b1) = other.0[j];
            let lo = a0.max(b0);
            let hi = a1.min(b1);
            if hi > lo {
                total += hi - lo;
            }
            if a1 < b1 {
                i += 1;
            } else {
                j += 1;
            }
        }
        total
    }

    pub fn as_slice(&self) -> &[(f64, f64)] {
        &self.0
    }
}

/// Per-rank breakdown.
#[derive(Debug, Clone, PartialEq)]
pub struct RankMetrics {
    pub rank: u32,
    pub end: f64,
    pub compute: f64,
    pub comm: f64,
    pub exposed_comm: f64,
    pub exposed: Intervals,
    /// Time computing or communicating (pipeline P2P aside).
    pub busy: f64,
}

/// The headline figures of one run. Times in seconds.
#[derive(Debug, Clone, PartialEq)]
pub struct Metrics {
    pub makespan: f64,
    pub critical_rank: u32,
    /// Busy compute time of the critical rank.
    pub compute: f64,
    /// Busy communication time of the critical rank.
    pub comm: f64,
    /// Communication time of the critical rank not covered by compute.
    pub exposed_comm: f64,
    /// Largest exposed communication of any rank.
    pub max_exposed_comm: f64,
    /// Share of the critical rank's communication hidden under compute; `None` without
    /// communication.
    pub overlap_efficiency: Option<f64>,
    /// Model FLOPs / (makespan × ranks × peak); `None` when undefined.
    pub mfu: Option<f64>,
    /// With pipeline stages: the share of the makespan a GPU spends neither computing nor
    /// in tensor- or data-parallel communication (the pipeline's fill and drain, and its
    /// waits on stage-to-stage messages), the mean over GPUs; `None` without stages.
    pub bubble: Option<f64>,
    pub ranks: Vec<RankMetrics>,
}

/// Whether a stream carries a pipeline's stage-to-stage P2P (its time is the bubble's,
/// not exposed communication).
pub fn is_pipeline_stream(name: &str) -> bool {
    name == crate::strategy::layer::PP_SEND || name == crate::strategy::layer::PP_RECV
}

pub fn rank_metrics(tl: &Timeline) -> Vec<RankMetrics> {
    // Gathered in parallel over slices of the spans, joined rank by rank in the slices'
    // order: each rank's intervals in the timeline's order, as one pass would list them.
    use rayon::prelude::*;
    const SLICE: usize = 1 << 18;
    let n = tl.ranks as usize;
    let piped = pipeline_streams(&tl.streams);
    let slice = |ch: &[super::Span]| {
        gather(
            n,
            &tl.streams,
            &piped,
            ch.iter().filter_map(|s| match s.lane {
                Lane::Stream(st) => Some((st, s.class, s.start, s.end)),
                Lane::Link(_) => None,
            }),
        )
    };
    let parts: Vec<Gathered> = if tl.spans.len() < super::PARALLEL_MIN {
        vec![slice(&tl.spans)]
    } else {
        tl.spans.par_chunks(SLICE).map(slice).collect()
    };
    let mut parts = parts.into_iter();
    let mut all = parts.next().unwrap_or_else(|| Gathered::new(n));
    for mut g in parts {
        for r in 0..n {
            all.end[r] = all.end[r].max(g.end[r]);
            all.compute[r].append(&mut g.compute[r]);
            all.comm[r].append(&mut g.comm[r]);
        }
    }
    measure_ranks(all)
}

/// Per stream, whether it is a pipeline stream (left out of compute and communication).
fn pipeline_streams(streams: &[StreamInfo]) -> Vec<bool> {
    streams
        .iter()
        .map(|s| is_pipeline_stream(&s.name))
        .collect()
}

/// Per rank: its compute and communication intervals (pipeline streams left out) and the
/// latest end of any of its spans.
struct Gathered {
    compute: Vec<Vec<(f64, f64)>>,
    comm: Vec<Vec<(f64, f64)>>,
    end: Vec<f64>,
}

impl Gathered {
    fn new(n: usize) -> Gathered {
        Gathered {
            compute: vec![Vec::new(); n],
            comm: vec![Vec::new(); n],
            end: vec![0.0f64; n],
        }
    }
}

fn gather(
    n: usize,
    streams: &[StreamInfo],
    piped: &[bool],
    spans: impl Iterator<Item = (StreamId, OpClass, f64, f64)>,
) -> Gathered {
    let mut g = Gathered::new(n);
    for (st, class, start, stop) in spans {
        let r = streams[st as usize].rank as usize;
        g.end[r] = g.end[r].max(stop);
        if piped[st as usize] {
            continue;
        }
        if class.is_comm() {
            g.comm[r].push((start, stop));
        } else {
            g.compute[r].push((start, stop));
        }
    }
    g
}

/// [`rank_metrics`] of `n` ranks over the spans of streams `streams`, given as (stream,
/// class, start, end) in the timeline's order.
fn rank_metrics_of(
    n: usize,
    streams: &[StreamInfo],
    spans: impl Iterator<Item = (StreamId, OpClass, f64, f64)>,
) -> Vec<RankMetrics> {
    measure_ranks(gather(n, streams, &pipeline_streams(streams), spans))
}

/// Each rank's figures from its gathered intervals.
fn measure_ranks(g: Gathered) -> Vec<RankMetrics> {
    let Gathered { compute, comm, end } = g;
    // Rank by rank in parallel (an indexed collect keeps the ranks' order), unless there
    // are few intervals to measure.
    use rayon::prelude::*;
    let intervals: usize = compute.iter().chain(&comm).map(Vec::len).sum();
    let small = intervals < super::PARALLEL_MIN;
    type Rank = (usize, ((Vec<(f64, f64)>, Vec<(f64, f64)>), f64));
    let rank = |(r, ((compute, comm), end)): Rank| {
        let c = Intervals::from_unsorted(compute);
        let m = Intervals::from_unsorted(comm);
        let cm = m.measure();
        let exposed = subtract(&m, &c);
        let exposed_comm = exposed.measure();
        let compute = c.measure();
        RankMetrics {
            rank: r as u32,
            end,
            compute,
            comm: cm,
            exposed_comm,
            exposed,
            busy: compute + exposed_comm,
        }
    };
    if small {
        compute
            .into_iter()
            .zip(comm)
            .zip(end)
            .enumerate()
            .map(rank)
            .collect()
    } else {
        compute
            .into_par_iter()
            .zip(comm)
            .zip(end)
            .enumerate()
            .map(rank)
            .collect()
    }
}

/// `a \ b` for sorted disjoint interval sets.
fn subtract(a: &Intervals, b: &Intervals) -> Intervals {
    let mut out = Vec::new();
    let mut j = 0;
    for &(mut lo, hi) in a.as_slice() {
        while j < b.0.len() && b.0[j].1 <= lo {
            j += 1;
        }
        let mut k = j;
        while k < b.0.len() && b.0[k].0 < hi {
            let (b0, b1) = b.0[k];
            if b0 > lo {
                out.push((lo, b0));
            }
            lo = lo.max(b1);
            if lo >= hi {
                break;
            }
            k += 1;
        }
        if lo < hi {
            out.push((lo, hi));
        }
    }
    Intervals(out)
}

pub fn metrics(tl: &Timeline) -> Metrics {
    let ranks = rank_metrics(tl);
    let mut crit = 0usize;
    for (i, r) in ranks.iter().enumerate() {
        if r.end > ranks[crit].end {
            crit = i;
        }
    }
    let makespan = tl.spans.iter().map(|s| s.end).fold(0.0, f64::max);
    let (compute, comm, exposed) = ranks
        .get(crit)
        .map(|r| (r.compute, r.comm, r.exposed_comm))
        .unwrap_or((0.0, 0.0, 0.0));
    let max_exposed = ranks.iter().map(|r| r.exposed_comm).fold(0.0, f64::max);
    let overlap_efficiency = (comm > 0.0).then(|| ((comm - exposed) / comm).clamp(0.0, 1.0));
    let denom = makespan * tl.ranks as f64 * tl.peak_flops;
    let mfu = (denom > 0.0 && denom.is_finite() && tl.model_flops.is_finite())
        .then(|| tl.model_flops / denom);
    let staged = tl.streams.iter().any(|s| is_pipeline_stream(&s.name));
    let bubble = (staged && makespan > 0.0 && !ranks.is_empty()).then(|| {
        let idle: f64 = ranks.iter().map(|r| (makespan - r.busy).max(0.0)).sum();
        idle / (makespan * ranks.len() as f64)
    });
    Metrics {
        makespan,
        critical_rank: crit as u32,
        compute,
        comm,
        exposed_comm: exposed,
        max_exposed_comm: max_exposed,
        overlap_efficiency,
        mfu,
        bubble,
        ranks,
    }
}

/// The makespan and the critical rank's exposed communication of a run (what a
/// jittered sample reports), without building its timeline: the figures [`metrics`]
/// gives of the timeline [`Timeline::predicted`] builds from `plan` and `times` when the
/// run recorded no link spans, bit for bit. Only the critical rank's (the first rank to
/// end last) intervals are built.
///
/// [`Timeline::predicted`]: super::Timeline::predicted
pub fn makespan_and_exposed_of_run(plan: &Plan, times: &[OpTimes]) -> (f64, f64) {
    let n = plan.symmetry.unwrap_or(plan.ranks) as usize;
    let makespan = times.iter().map(|t| t.end).fold(0.0, f64::max);
    let rank_of = |o: &crate::plan::Op| plan.streams[o.stream as usize].rank as usize;
    let mut end = vec![0.0f64; n];
    for (o, t) in plan.ops.iter().zip(times) {
        let r = rank_of(o);
        end[r] = end[r].max(t.end);
    }
    if n == 0 {
        return (makespan, 0.0);
    }
    let mut crit = 0usize;
    for r in 0..n {
        if end[r] > end[crit] {
            crit = r;
        }
    }
    let spans = plan
        .ops
        .iter()
        .zip(times)
        .filter(|(o, _)| rank_of(o) == crit)
        .map(|(o, t)| (o.stream, o.kind.class(), t.start, t.end));
    (
        makespan,
        rank_metrics_of(n, &plan.streams, spans)[crit].exposed_comm,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn union_and_overlap() {
        let a = Intervals::from_unsorted(vec![(3.0, 5.0), (0.0, 2.0), (1.0, 2.5)]);
        assert_eq!(a.as_slice(), &[(0.0, 2.5), (3.0, 5.0)]);
        assert_eq!(a.measure(), 4.5);
        let b = Intervals::from_unsorted(vec![(2.0, 4.0)]);
        assert_eq!(a.overlap(&b), 1.5);
        assert_eq!(subtract(&a, &b).as_slice(), &[(0.0, 2.0), (4.0, 5.0)]);
        assert_eq!(subtract(&b, &a).as_slice(), &[(2.5, 3.0)]);
    }

    #[test]
    fn subtract_handles_containment() {
        let a = Intervals::from_unsorted(vec![(0.0, 10.0)]);
        let b = Intervals::from_unsorted(vec![(1.0, 2.0), (3.0, 4.0), (9.0, 12.0)]);
        let d = subtract(&a, &b);
        assert_eq!(d.as_slice(), &[(0.0, 1.0), (2.0, 3.0), (4.0, 9.0)]);
        assert!((d.measure() + a.overlap(&b) - a.measure()).abs() < 1e-12);
    }
}

/// One site's share of a rank's time: busy compute, communication in flight, and the
/// part of that communication no compute of the rank covers (seconds).
#[derive(Debug, Clone, PartialEq)]
pub struct SiteMetrics {
    pub site: String,
    pub compute: f64,
    pub comm: f64,
    pub exposed_comm: f64,
}

/// The site of a span: its plan label's site, or (read back from a file) the label's
/// text before `.class[...]`.
fn site_of(tl: &Timeline, s: &super::Span) -> String {
    match &s.label {
        super::SpanLabel::Op(l) => tl.sites.get(l.site as usize).cloned().unwrap_or_default(),
        super::SpanLabel::Text(t) => {
            let head = t.split('[').next().unwrap_or(t);
            head.rsplit_once('.').map_or(head, |(a, _)| a).to_string()
        }
    }
}

/// Per site, in first-appearance order, the rank's compute, communication and exposed
/// communication. Sites' exposed times can add up to more than the rank's when two
/// sites communicate at once.
pub fn site_metrics(tl: &Timeline, rank: u32) -> Vec<SiteMetrics> {
    group_metrics(tl, rank, &|site| Some(site.to_string()))
}

/// Per phase of a layer or step (`fwd`, `bwd`: the sites named `fwd.…` and `bwd.…`), in
/// first-appearance order, the rank's compute, communication and exposed communication,
/// each the measure of the union of its sites' intervals: a phase's exposed time counts
/// once however many of its sites communicate at once (the sum of its sites' would count
/// it once per site).
pub fn phase_metrics(tl: &Timeline, rank: u32) -> Vec<SiteMetrics> {
    group_metrics(tl, rank, &|site| {
        let phase = site.split('.').next()?;
        (site.contains('.') && matches!(phase, "fwd" | "bwd")).then(|| phase.to_string())
    })
}

/// [`site_metrics`] over groups of sites: `group(site)` names a span's group (`None`:
/// in none; its compute still counts as busy).
fn group_metrics(
    tl: &Timeline,
    rank: u32,
    group: &dyn Fn(&str) -> Option<String>,
) -> Vec<SiteMetrics> {
    let mut order: Vec<String> = Vec::new();
    let mut compute: Vec<Vec<(f64, f64)>> = Vec::new();
    let mut comm: Vec<Vec<(f64, f64)>> = Vec::new();
    let mut all_compute = Vec::new();
    // The rank's streams, pipeline streams left out, and per site id of an op label its
    // group (memoized: a step's timeline holds millions of spans over a few hundred
    // sites).
    let counted: Vec<bool> = tl
        .streams
        .iter()
        .map(|st| st.rank == rank && !is_pipeline_stream(&st.name))
        .collect();
    let mut by_site: Vec<Option<Option<usize>>> = vec![None; tl.sites.len()];
    let mut slot = |name: Option<String>| -> Option<usize> {
        let name = name?;
        Some(match order.iter().position(|x| *x == name) {
            Some(i) => i,
            None => {
                order.push(name);
                compute.push(Vec::new());
                comm.push(Vec::new());
                order.len() - 1
            }
        })
    };
    // The rank's spans, picked out in parallel (in the timeline's order): a step's
    // timeline holds millions of spans, a rank's a small share of them.
    use rayon::prelude::*;
    let keep = |s: &&super::Span| matches!(s.lane, Lane::Stream(st) if counted[st as usize]);
    let mine: Vec<&super::Span> = if tl.spans.len() < super::PARALLEL_MIN {
        tl.spans.iter().filter(keep).collect()
    } else {
        tl.spans.par_iter().filter(keep).collect()
    };
    let mut spans: Vec<(usize, bool, f64, f64)> = Vec::new();
    for s in mine {
        let is_comm = s.class.is_comm();
        if !is_comm {
            all_compute.push((s.start, s.end));
        }
        let i = match &s.label {
            super::SpanLabel::Op(l) if (l.site as usize) < by_site.len() => {
                match by_site[l.site as usize] {
                    Some(g) => g,
                    None => {
                        let g = slot(group(&tl.sites[l.site as usize]));
                        by_site[l.site as usize] = Some(g);
                        g
                    }
                }
            }
            _ => slot(group(&site_of(tl, s))),
        };
        if let Some(i) = i {
            spans.push((i, is_comm, s.start, s.end));
        }
    }
    for (i, is_comm, start, end) in spans {
        if is_comm {
            comm[i].push((start, end));
        } else {
            compute[i].push((start, end));
        }
    }
    let busy = Intervals::from_unsorted(all_compute);
    order
        .into_iter()
        .zip(compute.into_iter().zip(comm))
        .map(|(site, (c, m))| {
            let m = Intervals::from_unsorted(m);
            SiteMetrics {
                site,
                compute: Intervals::from_unsorted(c).measure(),
                comm: m.measure(),
                exposed_comm: subtract(&m, &busy).measure(),
            }
        })
        .collect()
}

#[cfg(test)]
mod site_tests {
    use super::*;
    use crate::exec::sim::SimOptions;

    #[test]
    fn sites_partition_compute_and_their_exposure_covers_the_ranks() {
        let sc = crate::config::load_scenario("default").unwrap();
        for s in [
            crate::scenario::Strategy::Sequential,
            crate::scenario::Strategy::Flash,
        ] {
            let r = crate::simulate::run_strategy(&sc, s, &SimOptions::default()).unwrap();
            let m = &r.metrics;
            let sites = site_metrics(&r.timeline, m.critical_rank);
            let names: Vec<&str> = sites.iter().map(|x| x.site.as_str()).collect();
            assert_eq!(names, ["fc1", "act", "fc2"], "{s}");
            // Compute of sites never overlaps within a stream, but the Flash-RS adds run
            // beside the GEMMs: the sum is at least the union.
            let c: f64 = sites.iter().map(|x| x.compute).sum();
            assert!(c >= m.compute * (1.0 - 1e-12));
            let e: f64 = sites.iter().map(|x| x.exposed_comm).sum();
            assert!(
                e >= m.exposed_comm * (1.0 - 1e-12) - 1e-15,
                "{s}: {e} < {}",
                m.exposed_comm
            );
            // Read back from the file form (text labels), the same sites.
            let back = crate::timeline::Timeline::try_from(
                crate::timeline::file::TimelineFile::from(&r.timeline),
            )
            .unwrap();
            assert_eq!(site_metrics(&back, m.critical_rank).len(), 3);
        }
    }
}
