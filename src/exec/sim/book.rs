//! The engine's per-op bookkeeping: which launches wait on what, which ops started, and
//! when ops ran. [`Dense`] keeps a record per op and per launch (a stored plan; the op
//! times become the run's result); [`Streamed`] keeps a record per stream and per launch
//! with dependencies met early, so its memory follows what is in flight (an unrolled
//! program; the result is each rank's end).

use super::program::{Program, Unrolled};
use super::variability::{Draw, Draws, Jitter};
use super::{COMM, Durations, LaunchState, OpTimes, SimError};
use crate::fasthash::IntMap;
use crate::plan::{LaunchId, OpId, Plan, StreamId};
use crate::scenario::GpuSpec;

/// What the engine asks of its bookkeeping (see the module docs).
pub(crate) trait Book<P: Program> {
    /// The launches ready at time zero, in the order they start.
    fn ready_at_start(&self, p: &P) -> Vec<LaunchId>;
    /// `op` (of `stream`) starts now: its duration (with jitter and straggler factors),
    /// or [`COMM`].
    fn start(&mut self, p: &P, op: OpId, stream: StreamId, now: f64) -> f64;
    /// Whether `op` has started.
    fn started(&self, p: &P, op: OpId) -> bool;
    /// `op` ended now: whether it was a send or receive.
    fn end(&mut self, p: &P, op: OpId, now: f64) -> bool;
    /// A dependency of launch `l` is done: whether `l` is now ready.
    fn dep_met(&mut self, p: &P, l: LaunchId) -> bool;
    /// An op of launch `l` is done: the next launch of its stream if it is now ready.
    fn op_of_launch_done(&mut self, p: &P, l: LaunchId) -> Option<LaunchId>;
    /// The first op (by stream) that never started, after a run that did not finish.
    fn first_unstarted(&self, p: &P) -> Option<OpId>;
}

/// A duration with its rank's straggler factor and the op's jitter draw.
#[inline]
fn scaled(d: f64, op: OpId, slow: f64, jitter: Option<&Draws>) -> f64 {
    if d == COMM {
        COMM
    } else {
        let j = jitter.map_or(1.0, |j| j.factor(op, Draw::Compute));
        d * slow * j
    }
}

/// Per op its times (until it ends, `end` holds its duration), per launch its counts.
pub(crate) struct Dense {
    pub times: Vec<OpTimes>,
    launch: Vec<LaunchState>,
}

impl Dense {
    /// Per-op and per-launch state in one pass over the plan.
    pub fn new(
        plan: &Plan,
        gpu: &GpuSpec,
        slow: &[f64],
        jitter: Option<&Jitter>,
    ) -> Result<Dense, SimError> {
        let mut launch = vec![
            LaunchState {
                pending: 0,
                remaining: 0,
            };
            plan.launch_count()
        ];
        let mut times = Vec::with_capacity(plan.op_count());
        let mut durations = Durations::new(gpu);
        let jitter = jitter.map(Draws::new);
        let jitter = jitter.as_ref();
        for (id, o) in plan.ops.iter().enumerate() {
            let ls = &mut launch[o.launch as usize];
            ls.remaining += 1;
            ls.pending += plan.deps(id as OpId).len() as u32;
            let d = scaled(
                durations.of(&o.kind)?,
                id as OpId,
                slow[o.rank as usize],
                jitter,
            );
            times.push(OpTimes {
                start: f64::NAN,
                end: d,
            });
        }
        for l in 0..plan.launch_count() as LaunchId {
            if let Some(n) = plan.next_launch(l) {
                launch[n as usize].pending += 1;
            }
        }
        Ok(Dense { times, launch })
    }
}

impl Book<Plan> for Dense {
    fn ready_at_start(&self, _: &Plan) -> Vec<LaunchId> {
        (0..self.launch.len() as LaunchId)
            .filter(|&l| self.launch[l as usize].pending == 0)
            .collect()
    }
    #[inline]
    fn start(&mut self, _: &Plan, op: OpId, _: StreamId, now: f64) -> f64 {
        let t = &mut self.times[op as usize];
        t.start = now;
        t.end
    }
    #[inline]
    fn started(&self, _: &Plan, op: OpId) -> bool {
        !self.times[op as usize].start.is_nan()
    }
    #[inline]
    fn end(&mut self, _: &Plan, op: OpId, now: f64) -> bool {
        let t = &mut self.times[op as usize];
        let comm = t.end == COMM;
        t.end = now;
        comm
    }
    #[inline]
    fn dep_met(&mut self, _: &Plan, l: LaunchId) -> bool {
        let ls = &mut self.launch[l as usize];
        ls.pending -= 1;
        ls.pending == 0
    }
    #[inline]
    fn op_of_launch_done(&mut self, p: &Plan, l: LaunchId) -> Option<LaunchId> {
        let ls = &mut self.launch[l as usize];
        ls.remaining -= 1;
        if ls.remaining != 0 {
            return None;
        }
        let nl = p.next_launch(l)?;
        let ns = &mut self.launch[nl as usize];
        ns.pending -= 1;
        (ns.pending == 0).then_some(nl)
    }
    fn first_unstarted(&self, p: &Plan) -> Option<OpId> {
        (0..p.streams.len() as u32)
            .flat_map(|s| p.stream_launches(s).iter())
            .map(|&l| p.launch_ops(l)[0])
            .find(|&op| self.times[op as usize].start.is_nan())
    }
}

/// Per world stream, its head launch (the first not done) and that launch's counts;
/// dependencies met before their launch reached its stream's head wait in a map.
pub(crate) struct Streamed {
    /// Per template op, its cost-model duration or [`COMM`].
    durations: Vec<f64>,
    slow: Vec<f64>,
    jitter: Option<Draws>,
    /// Per world stream: the head's position, its unmet dependencies, its ops not done
    /// and its ops started (they start in launch order).
    head: Vec<u32>,
    pending: Vec<u32>,
    remaining: Vec<u32>,
    issued: Vec<u32>,
    /// Dependencies met of launches behind their stream's head.
    early: IntMap<LaunchId, u32>,
    /// Per rank, the latest end of its ops.
    pub rank_end: Vec<f64>,
    /// Per rank, its exposed communication as the run goes, where asked for.
    pub exposure: Option<Exposure>,
}

/// Exposed communication per rank, accumulated as ops start and end: the time in which
/// a rank has a send or receive running and no compute op (the measure of its
/// communication intervals less its compute intervals, as the timeline's metrics
/// define it), counting only ops on the streams the caller names.
pub(crate) struct Exposure {
    /// Per template op: 0 not counted, 1 compute, 2 communication.
    class: Vec<u8>,
    comm: Vec<u32>,
    compute: Vec<u32>,
    last: Vec<f64>,
    pub exposed: Vec<f64>,
}

impl Exposure {
    /// `counted`: per template stream, whether its ops count.
    fn new(u: &Unrolled<'_>, counted: &[bool]) -> Exposure {
        let t = u.template();
        let class = t
            .ops
            .iter()
            .map(|o| match counted.get(o.stream as usize) {
                Some(true) if o.kind.class().is_comm() => 2,
                Some(true) => 1,
                _ => 0,
            })
            .collect();
        let n = u.ranks() as usize;
        Exposure {
            class,
            comm: vec![0; n],
            compute: vec![0; n],
            last: vec![0.0; n],
            exposed: vec![0.0; n],
        }
    }

    /// Template op `t` of `rank` started (`up`) or ended at `now`.
    #[inline]
    fn change(&mut self, rank: u32, t: OpId, now: f64, up: bool) {
        let c = self.class[t as usize];
        if c == 0 {
            return;
        }
        let r = rank as usize;
        if self.comm[r] > 0 && self.compute[r] == 0 {
            self.exposed[r] += now - self.last[r];
        }
        self.last[r] = now;
        let n = if c == 2 {
            &mut self.comm[r]
        } else {
            &mut self.compute[r]
        };
        if up {
            *n += 1;
        } else {
            *n -= 1;
        }
    }
}

impl Streamed {
    /// `counted`: per template stream, whether its ops count toward the ranks' exposed
    /// communication; `None`: none is accumulated.
    pub fn new(
        u: &Unrolled<'_>,
        gpu: &GpuSpec,
        slow: Vec<f64>,
        jitter: Option<&Jitter>,
        counted: Option<&[bool]>,
    ) -> Result<Streamed, SimError> {
        let t = u.template();
        let mut d = Durations::new(gpu);
        let durations = t
            .ops
            .iter()
            .map(|o| d.of(&o.kind))
            .collect::<Result<Vec<f64>, _>>()?;
        let n = u.stream_count();
        let mut b = Streamed {
            durations,
            slow,
            jitter: jitter.map(Draws::new),
            head: vec![0; n],
            pending: vec![0; n],
            remaining: vec![0; n],
            issued: vec![0; n],
            early: IntMap::default(),
            rank_end: vec![0.0; u.ranks() as usize],
            exposure: counted.map(|c| Exposure::new(u, c)),
        };
        for s in 0..n as u32 {
            b.arm(u, s);
        }
        Ok(b)
    }

    /// Make the launch at stream `s`'s head position its head: whether it is ready.
    fn arm(&mut self, u: &Unrolled<'_>, s: u32) -> Option<LaunchId> {
        let i = s as usize;
        self.issued[i] = 0;
        if self.head[i] >= u.stream_len(s) {
            return None;
        }
        let l = u.stream_launch(s, self.head[i]);
        let met = self.early.remove(&l).unwrap_or(0);
        self.pending[i] = u.dep_count(l) - met;
        self.remaining[i] = u.launch_len(l);
        (self.pending[i] == 0).then_some(l)
    }
}

impl<'p> Book<Unrolled<'p>> for Streamed {
    fn ready_at_start(&self, u: &Unrolled<'p>) -> Vec<LaunchId> {
        (0..self.head.len() as u32)
            .filter(|&s| self.head[s as usize] < u.stream_len(s) && self.pending[s as usize] == 0)
            .map(|s| u.stream_launch(s, 0))
            .collect()
    }
    #[inline]
    fn start(&mut self, u: &Unrolled<'p>, op: OpId, s: StreamId, now: f64) -> f64 {
        self.issued[s as usize] += 1;
        let rank = u.rank(op);
        let t = u.template_op(op);
        if let Some(x) = self.exposure.as_mut() {
            x.change(rank, t, now, true);
        }
        scaled(
            self.durations[t as usize],
            op,
            self.slow[rank as usize],
            self.jitter.as_ref(),
        )
    }
    #[inline]
    fn started(&self, u: &Unrolled<'p>, op: OpId) -> bool {
        let l = u.op_launch(op);
        let s = u.launch_stream(l) as usize;
        let pos = u.launch_pos(l);
        pos < self.head[s] || (pos == self.head[s] && u.op_index(op) < self.issued[s])
    }
    #[inline]
    fn end(&mut self, u: &Unrolled<'p>, op: OpId, now: f64) -> bool {
        let rank = u.rank(op);
        let e = &mut self.rank_end[rank as usize];
        *e = e.max(now);
        let t = u.template_op(op);
        if let Some(x) = self.exposure.as_mut() {
            x.change(rank, t, now, false);
        }
        self.durations[t as usize] == COMM
    }
    #[inline]
    fn dep_met(&mut self, u: &Unrolled<'p>, l: LaunchId) -> bool {
        let s = u.launch_stream(l) as usize;
        if u.launch_pos(l) == self.head[s] {
            self.pending[s] -= 1;
            self.pending[s] == 0
        } else {
            *self.early.entry(l).or_insert(0) += 1;
            false
        }
    }
    #[inline]
    fn op_of_launch_done(&mut self, u: &Unrolled<'p>, l: LaunchId) -> Option<LaunchId> {
        let s = u.launch_stream(l);
        let i = s as usize;
        self.remaining[i] -= 1;
        if self.remaining[i] != 0 {
            return None;
        }
        self.head[i] += 1;
        self.arm(u, s)
    }
    fn first_unstarted(&self, u: &Unrolled<'p>) -> Option<OpId> {
        // On each stream, the head's first op not started, else the next launch's first.
        (0..self.head.len() as u32).find_map(|s| {
            let (head, issued) = (self.head[s as usize], self.issued[s as usize]);
            if head >= u.stream_len(s) {
                return None;
            }
            let l = u.stream_launch(s, head);
            if issued < u.launch_len(l) {
                return u.launch_ops(l).nth(issued as usize);
            }
            (head + 1 < u.stream_len(s))
                .then(|| u.launch_ops(u.stream_launch(s, head + 1)).next())
                .flatten()
        })
    }
}
