//! The discrete-event engine.
//!
//! Events sit in a priority queue keyed on (time, sequence number): simultaneous events
//! run in the order they were scheduled, so a run is a pure function of its inputs.
//! Scheduling into the past is an internal error; stale flow-completion events (a flow
//! whose rate changed after the event was scheduled) carry an old version and are skipped
//! when popped.
//!
//! Semantics (those of [`crate::plan`]): in-order streams of launches; a launch starts
//! when its stream is free and its dependencies are done; a send/recv pair becomes a
//! transfer once both are posted; a transfer waits the message latency (per message plus
//! per hop), then drains its bytes as a flow at its max-min fair share of every link on
//! its route; compute ops take the cost model's time.

mod book;
mod interference;
mod network;
mod program;
mod queue;
pub mod variability;

use crate::cost::{self, CostError};
use crate::fasthash::IntMap;
use crate::plan::{EltKind, LaunchId, NO_PARTNER, OpId, OpKind, Plan};
use crate::scenario::{
    Hardware, InterferenceParams, Scenario, Straggler, StragglerTarget, Transport,
};
use crate::topology::{Router, TopologyError};
use book::{Book, Dense, Streamed};
use interference::InterferenceState;
use interference::Resched;
use network::Network;
use ordered_float::NotNan;
use program::Program;
pub use program::{UnrollError, Unrolled};
use queue::RadixQueue;
use variability::Draw;
pub use variability::Jitter;

/// The latest simulated time (about 31,700 years): every reported figure, converted to
/// µs or ps, stays finite well below it.
pub const MAX_SIM_SECONDS: f64 = 1e12;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SimError {
    #[error(transparent)]
    Cost(#[from] CostError),
    #[error(transparent)]
    Topology(#[from] TopologyError),
    #[error(
        "the run exceeded its budget of {budget} events; raise --max-events or shrink the scenario"
    )]
    EventBudget { budget: u64 },
    #[error(
        "simulated time passed {MAX_SIM_SECONDS:e} s at op {label} (a bandwidth near zero or a size near infinity?)"
    )]
    TimeOverflow { label: String },
    #[error("straggler `{straggler}`: rank {rank} is not one of the plan's {ranks} ranks")]
    StragglerRank {
        straggler: String,
        rank: u32,
        ranks: u32,
    },
    #[error(
        "straggler `{straggler}`: the topology has no link `{link}` (links are named like {example})"
    )]
    StragglerLink {
        straggler: String,
        link: String,
        example: String,
    },
    #[error("a symmetric plan cannot run here: {why}")]
    Asymmetric { why: String },
    /// The run's clock passed [`SimOptions::deadline`]: its makespan is later.
    #[error("the run passed its deadline of {deadline} s of simulated time")]
    PastDeadline { deadline: f64 },
    #[error(
        "deadlock: {done} of {total} ops finished; launch of {label} on rank {rank} never started"
    )]
    Deadlock {
        done: usize,
        total: usize,
        label: String,
        rank: u32,
    },
}

/// What a run records beyond op times, which effects it models, and how far it may go.
#[derive(Debug, Clone, PartialEq)]
pub struct SimOptions {
    /// Record one span per link per transfer (for per-link timelines).
    pub record_links: bool,
    /// Refuse to process more events than this.
    pub max_events: u64,
    /// Slow compute beside communication; `None`: compute runs at its cost-model time.
    pub interference: Option<Interference>,
    /// Seeded jitter of compute and message times; `None`: none.
    pub jitter: Option<Jitter>,
    /// Ranks and links slower than their peers.
    pub stragglers: Vec<Straggler>,
    /// Stop (with [`SimError::PastDeadline`]) once simulated time passes this many
    /// seconds: for a caller that only needs runs ending sooner (the layout search).
    pub deadline: Option<f64>,
}

impl Default for SimOptions {
    fn default() -> SimOptions {
        SimOptions {
            record_links: true,
            max_events: 2_000_000_000,
            interference: None,
            jitter: None,
            stragglers: Vec::new(),
            deadline: None,
        }
    }
}

impl SimOptions {
    /// These options with the effects the scenario asks for: interference when the
    /// scenario turns it on and its hardware profile has parameters for it.
    pub fn for_scenario(mut self, sc: &Scenario) -> SimOptions {
        self.interference = match (&sc.hardware.interference, sc.interference) {
            (Some(p), true) => Some(Interference {
                params: p.clone(),
                transport: sc.transport,
            }),
            _ => None,
        };
        self
    }
}

/// The interference model of a run: the profile's parameters and the transport.
#[derive(Debug, Clone, PartialEq)]
pub struct Interference {
    pub params: InterferenceParams,
    pub transport: Transport,
}

/// A transfer's occupancy of one link.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkSpan {
    pub link: u32,
    /// The send op of the transfer.
    pub op: OpId,
    pub start: f64,
    pub end: f64,
    pub bytes: u64,
}

/// When one op ran, in seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OpTimes {
    pub start: f64,
    pub end: f64,
}

/// Start and end (seconds) of every op, in op-id order, plus link occupancy.
#[derive(Debug, Clone, PartialEq)]
pub struct SimResult {
    pub times: Vec<OpTimes>,
    pub link_spans: Vec<LinkSpan>,
    pub events: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ev {
    OpDone(OpId),
    /// A compute op's completion under interference, with the version it was scheduled
    /// at (stale once the op's rate changed) and its rank.
    ComputeDone(OpId, u32, u32),
    /// A GEMM reached its last, partial wave (SM admission), with the version it was
    /// scheduled at and its rank.
    GemmTail(OpId, u32, u32),
    FlowStart(u32),
    FlowDone(u32, u32),
}

#[derive(Debug, Clone, Copy)]
struct LaunchState {
    /// Unmet conditions: dependency edges not yet done, plus 1 until the launch is the head
    /// of its stream.
    pending: u32,
    /// Ops of the launch not yet done.
    remaining: u32,
}

/// Marks a send or recv in the duration table: its time comes from the network.
const COMM: f64 = -1.0;

/// Whether a completion that moves later than its queued event waits for that event to
/// pop (the engine's way) rather than being queued again at once; tests turn it off to
/// check that it changes no time.
#[inline]
fn defer_later() -> bool {
    #[cfg(test)]
    {
        !EAGER.with(|e| e.get())
    }
    #[cfg(not(test))]
    {
        true
    }
}

#[cfg(test)]
thread_local! {
    static EAGER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// A completion's place in the queue, for a flow or a compute op under interference: when
/// its end moves later than its live queued event, the new end and a sequence number
/// taken then are noted instead of a new event; the queued event, when it pops,
/// re-queues itself under exactly that key. Every live key is the one an eager
/// reschedule would have queued, so events pop in the same order.
#[derive(Debug, Clone, Copy)]
struct Deferral {
    /// The time of the live queued completion; `+inf` for none.
    queued: f64,
    /// The later end noted and its sequence number; `due_seq` 0: none noted.
    due: f64,
    due_seq: u64,
}

impl Deferral {
    const NONE: Deferral = Deferral {
        queued: f64::INFINITY,
        due: f64::INFINITY,
        due_seq: 0,
    };

    /// Whether an end at `at` can wait for the queued completion (it is no earlier).
    fn defers(&self, at: f64) -> bool {
        at >= self.queued && at <= MAX_SIM_SECONDS && defer_later()
    }

    /// Note the later end `at`, with the sequence number `seq` taken for it.
    fn note(&mut self, at: f64, seq: u64) {
        self.due = at;
        self.due_seq = seq;
    }

    /// A completion at `at` was queued: it is the live one, nothing noted.
    fn queue(&mut self, at: f64) {
        self.queued = at;
        self.due_seq = 0;
    }

    /// The live completion popped: `None` if it is the op's end, else the key to queue
    /// it again under (which makes that the live one).
    fn popped(&mut self) -> Option<u128> {
        if self.due_seq == 0 {
            return None;
        }
        let key = queue::key(
            NotNan::new(self.due).expect("a noted end is finite"),
            self.due_seq,
        );
        self.queue(self.due);
        Some(key)
    }
}

struct Transfer {
    send: OpId,
    recv: OpId,
    bytes: u64,
    started: f64,
    /// Its completion's place in the queue.
    done: Deferral,
}

/// The queue length below which stale completions are left to be skipped as popped.
/// The engine's unit tests compact from 64 entries on, so every closed form they check
/// holds with compaction running throughout.
const COMPACT_MIN: usize = if cfg!(test) { 64 } else { 1 << 16 };

struct Engine<'p, P: Program, B: Book<P>> {
    plan: &'p P,
    hw: &'p Hardware,
    opts: &'p SimOptions,
    now: f64,
    seq: u64,
    queue: RadixQueue<Ev>,
    /// Events popped, plus the stale ones compaction dropped unpopped (so a finished run
    /// counts every event it scheduled, compacted or not).
    events: u64,
    /// The queue length at which stale completions are dropped next (see `compact`).
    compact_at: usize,
    /// Which ops started, which launches wait on what, when ops ran.
    book: B,
    done_ops: usize,
    net: Network,
    transfers: Vec<Transfer>,
    routes: IntMap<(u32, u32), (u32, u32, f64)>,
    router: Router<'p>,
    /// A symmetric plan's link orbits: routes cross orbit representatives.
    orbits: Option<crate::topology::LinkOrbits>,
    link_spans: Vec<LinkSpan>,
    interference: Option<InterferenceState>,
    resched: Vec<interference::Reschedule>,
    jitter: Option<variability::Draws>,
}

/// Compute-time factor per rank (1 unless a straggler slows it).
fn rank_factors(ranks: u32, stragglers: &[Straggler]) -> Result<Vec<f64>, SimError> {
    let mut f = vec![1.0; ranks as usize];
    for s in stragglers {
        if let StragglerTarget::Rank(r) = s.target {
            let slot = f
                .get_mut(r as usize)
                .ok_or_else(|| SimError::StragglerRank {
                    straggler: s.to_string(),
                    rank: r,
                    ranks,
                })?;
            *slot *= s.factor;
        }
    }
    Ok(f)
}

/// Run `plan` on `hw`; rank r runs on GPU r of the topology.
pub fn simulate(plan: &Plan, hw: &Hardware, opts: &SimOptions) -> Result<SimResult, SimError> {
    hw.topology.require_gpus(plan.ranks as usize)?;
    let slow = rank_factors(plan.ranks, &opts.stragglers)?;
    let book = Dense::new(plan, &hw.gpu, &slow, opts.jitter.as_ref())?;
    let orbits = symmetric_orbits(plan, hw, opts)?;
    let mut e = Engine::new(plan, book, orbits, hw, opts)?;
    e.run()?;
    Ok(SimResult {
        times: e.book.times,
        link_spans: e.link_spans,
        events: e.events,
    })
}

/// What a run of an [`Unrolled`] program gives: no op times (they are not kept), each
/// rank's end and, where asked for, its exposed communication.
#[derive(Debug, Clone, PartialEq)]
pub struct UnrolledResult {
    /// Per world rank, the end of its last op (seconds; 0 for a rank without ops).
    pub rank_end: Vec<f64>,
    /// Per world rank, the time it had a send or receive running and no compute op,
    /// over the streams [`simulate_unrolled`] was asked to count (empty: none asked).
    pub rank_exposed: Vec<f64>,
    pub events: u64,
}

impl UnrolledResult {
    /// The latest end of any op.
    pub fn makespan(&self) -> f64 {
        self.rank_end.iter().copied().fold(0.0, f64::max)
    }

    /// The makespan and the exposed communication of the critical rank (the first that
    /// ends last), as a jittered sample reports them; 0 exposed where none was counted.
    pub fn makespan_and_critical_exposed(&self) -> (f64, f64) {
        let mut crit = 0;
        for (r, &e) in self.rank_end.iter().enumerate() {
            if e > self.rank_end[crit] {
                crit = r;
            }
        }
        (
            self.makespan(),
            self.rank_exposed.get(crit).copied().unwrap_or(0.0),
        )
    }
}

/// Run every rank of the world a symmetric plan stands for, each with its own state,
/// links and clock (jitter and stragglers apply), generating each rank's ops from the
/// template as they run: memory grows with what is in flight, not with the world's ops.
/// Rank r runs on GPU r of the topology. Link spans are not recorded. `exposure`: per
/// template stream, whether its ops count toward each rank's exposed communication
/// (accumulated as the run goes); `None`: not accumulated.
pub fn simulate_unrolled(
    u: &Unrolled<'_>,
    hw: &Hardware,
    opts: &SimOptions,
    exposure: Option<&[bool]>,
) -> Result<UnrolledResult, SimError> {
    hw.topology.require_gpus(u.ranks() as usize)?;
    let slow = rank_factors(u.ranks(), &opts.stragglers)?;
    let book = Streamed::new(u, &hw.gpu, slow, opts.jitter.as_ref(), exposure)?;
    let opts = SimOptions {
        record_links: false,
        ..opts.clone()
    };
    let mut e = Engine::new(u, book, None, hw, &opts)?;
    e.run()?;
    Ok(UnrolledResult {
        rank_end: e.book.rank_end,
        rank_exposed: e.book.exposure.map_or_else(Vec::new, |x| x.exposed),
        events: e.events,
    })
}

/// For a symmetric plan, the topology's link orbits, after checking that the plan's
/// symmetry is the topology's and that nothing in the run breaks it (jitter, stragglers).
fn symmetric_orbits(
    plan: &Plan,
    hw: &Hardware,
    opts: &SimOptions,
) -> Result<Option<crate::topology::LinkOrbits>, SimError> {
    let Some(shift) = plan.symmetry else {
        return Ok(None);
    };
    let why = |w: String| Err(SimError::Asymmetric { why: w });
    if opts.jitter.is_some() || !opts.stragglers.is_empty() {
        return why("jitter and stragglers make ranks differ; use the full plan".into());
    }
    let gpus = hw.topology.gpu_count();
    if plan.ranks as usize != gpus {
        return why(format!(
            "it spans {} ranks, the topology has {gpus} GPUs (the rotation maps all of them)",
            plan.ranks
        ));
    }
    match (hw.topology.rotation(), hw.topology.link_orbits_for(shift)?) {
        (_, Some(o)) => Ok(Some(o)),
        (Some(r), None) => why(format!(
            "its ranks repeat every {shift}, which is not a multiple of the topology's {}",
            r.gpu_shift
        )),
        (None, None) => why(format!("topology `{}` has no rotation", hw.topology.name)),
    }
}

/// The network of `topo` with straggler links' bandwidth divided by their factor.
fn network_with_stragglers(
    topo: &crate::topology::Topology,
    stragglers: &[Straggler],
) -> Result<Network, SimError> {
    let mut net = Network::new(topo);
    for s in stragglers {
        if let StragglerTarget::Link(name) = &s.target {
            let id = (0..topo.link_count())
                .find(|&l| topo.link_name(l) == *name)
                .ok_or_else(|| SimError::StragglerLink {
                    straggler: s.to_string(),
                    link: name.clone(),
                    example: if topo.link_count() > 0 {
                        format!("`{}`", topo.link_name(0))
                    } else {
                        "`a->b`".into()
                    },
                })?;
            net.slow_link(id, s.factor);
        }
    }
    Ok(net)
}

/// A GEMM's shape, dtype and whether it reuses the B before it: what its time depends on.
type GemmKey = (u64, u64, u64, usize, bool);

/// The cost model's time of each op ([`COMM`] for sends and receives, whose time the
/// network decides), before jitter, stragglers and interference. Consecutive ops often
/// share a shape and plans repeat a few shapes many times, while a profile with measured
/// points makes each GEMM evaluation a pass over them: GEMM times are kept by shape.
struct Durations<'g> {
    gpu: &'g crate::scenario::GpuSpec,
    last: Option<(GemmKey, f64)>,
    seen: std::collections::BTreeMap<GemmKey, f64>,
}

impl<'g> Durations<'g> {
    fn new(gpu: &'g crate::scenario::GpuSpec) -> Durations<'g> {
        Durations {
            gpu,
            last: None,
            seen: std::collections::BTreeMap::new(),
        }
    }

    fn of(&mut self, kind: &OpKind) -> Result<f64, CostError> {
        let gpu = self.gpu;
        Ok(match *kind {
            OpKind::Gemm {
                m,
                n,
                k,
                dtype,
                reuses_b,
            } => {
                let shape = (m, n, k, dtype as usize, reuses_b);
                match self.last {
                    Some((s, t)) if s == shape => t,
                    _ => {
                        let t = match self.seen.get(&shape) {
                            Some(&t) => t,
                            None => {
                                let t = if reuses_b {
                                    cost::gemm_time_warm(gpu, m, n, k, dtype)?
                                } else {
                                    cost::gemm_time(gpu, m, n, k, dtype)?
                                };
                                self.seen.insert(shape, t);
                                t
                            }
                        };
                        self.last = Some((shape, t));
                        t
                    }
                }
            }
            OpKind::GroupedGemm {
                groups,
                m,
                n,
                k,
                dtype,
            } => cost::grouped_gemm_time(gpu, groups as u64, m, n, k, dtype)?,
            OpKind::Attention(a) => cost::attention_time(gpu, &a)?,
            OpKind::Elementwise {
                kind: EltKind::Join,
                ..
            } => 0.0,
            OpKind::Elementwise { bytes, .. } => cost::elementwise_time(gpu, bytes),
            OpKind::Copy { bytes } => cost::elementwise_time(gpu, bytes.saturating_mul(2)),
            OpKind::Send { .. } | OpKind::Recv { .. } => COMM,
        })
    }
}

/// Each stream's compute (in stream-id order, seconds): its launches' cost-model times,
/// each launch taking its longest op, sends and receives none. The busiest stream's is a
/// lower bound on the makespan, found without simulating: a stream runs its launches one
/// after another, and without jitter or stragglers (whose factors may fall below 1)
/// nothing the engine adds makes an op shorter than that time (communication only
/// delays; interference slowdowns are validated ≥ 1).
pub fn stream_compute(plan: &Plan, hw: &Hardware) -> Result<Vec<f64>, SimError> {
    let mut durations = Durations::new(&hw.gpu);
    let mut busy = vec![0.0f64; plan.streams.len()];
    for l in 0..plan.launch_count() as LaunchId {
        let mut longest = 0.0f64;
        for &op in plan.launch_ops(l) {
            let t = durations.of(&plan.ops[op as usize].kind)?;
            if t != COMM {
                longest = longest.max(t);
            }
        }
        busy[plan.launch_stream(l) as usize] += longest;
    }
    Ok(busy)
}

/// The plan's compute critical path (seconds) with communication free: the longest
/// path under the engine's rules — a launch starts when the previous launch of its
/// stream and every dependency of its ops have ended; a compute op lasts its cost-model
/// time; a send or recv ends as soon as both it and its partner are posted (the later
/// of their launches' starts); a launch ends with its last op. A lower bound on the
/// makespan for the reason [`stream_compute`]'s is (communication only delays, nothing
/// shortens an op), and at least as high as that one: it adds the waits that
/// dependencies impose, such as a pipeline's fill and drain. One pass in topological
/// order over launch starts and ends (linear in ops and dependencies).
pub fn compute_critical_path(plan: &Plan, hw: &Hardware) -> Result<f64, SimError> {
    let nl = plan.launch_count();
    let mut durations = Durations::new(&hw.gpu);
    // Nodes: 2·l a launch's start, 2·l + 1 its ops' ends. In-degrees: a start waits for
    // the previous launch's end and each dependency edge; an end for its start and each
    // send or recv's partner launch's start.
    let mut waits = vec![0u32; 2 * nl];
    for l in 0..nl as LaunchId {
        if let Some(n) = plan.next_launch(l) {
            waits[2 * n as usize] += 1;
        }
        waits[2 * l as usize + 1] += 1;
        for &op in plan.launch_ops(l) {
            waits[2 * l as usize] += plan.deps(op).len() as u32;
            if plan.partner(op) != NO_PARTNER {
                waits[2 * l as usize + 1] += 1;
            }
        }
    }
    let mut start = vec![0.0f64; nl];
    let mut end = 0.0f64;
    let mut ops_done = 0usize;
    let mut ready: Vec<usize> = (0..2 * nl).filter(|&v| waits[v] == 0).collect();
    let mut done = 0usize;
    let release = |v: usize, waits: &mut Vec<u32>, ready: &mut Vec<usize>| {
        waits[v] -= 1;
        if waits[v] == 0 {
            ready.push(v);
        }
    };
    while let Some(v) = ready.pop() {
        done += 1;
        let l = (v / 2) as LaunchId;
        if v % 2 == 0 {
            // Its start is final: the previous launch's end and the dependencies' ends
            // were folded in as they came.
            for &op in plan.launch_ops(l) {
                let p = plan.partner(op);
                if p != NO_PARTNER {
                    release(2 * plan.op_launch(p) as usize + 1, &mut waits, &mut ready);
                }
            }
            release(v + 1, &mut waits, &mut ready);
        } else {
            let t0 = start[l as usize];
            let mut last = t0;
            for &op in plan.launch_ops(l) {
                let d = durations.of(&plan.ops[op as usize].kind)?;
                let e = if d == COMM {
                    let p = plan.partner(op);
                    if p == NO_PARTNER {
                        t0
                    } else {
                        t0.max(start[plan.op_launch(p) as usize])
                    }
                } else {
                    t0 + d
                };
                last = last.max(e);
                for &m in plan.dependents(op) {
                    start[m as usize] = start[m as usize].max(e);
                    release(2 * m as usize, &mut waits, &mut ready);
                }
            }
            end = end.max(last);
            ops_done += plan.launch_ops(l).len();
            if let Some(n) = plan.next_launch(l) {
                start[n as usize] = start[n as usize].max(last);
                release(2 * n as usize, &mut waits, &mut ready);
            }
        }
    }
    if done < 2 * nl {
        // A cycle: a launch that never became ready (a validated plan has none).
        let stuck = (0..nl as LaunchId)
            .filter(|&l| waits[2 * l as usize] > 0 || waits[2 * l as usize + 1] > 0)
            .find_map(|l| plan.launch_ops(l).first().copied());
        return Err(SimError::Deadlock {
            done: ops_done,
            total: plan.op_count(),
            label: stuck.map_or_else(|| "?".into(), |op| plan.label(op)),
            rank: stuck.map_or(0, |op| plan.ops[op as usize].rank),
        });
    }
    Ok(end)
}

impl<'p, P: Program, B: Book<P>> Engine<'p, P, B> {
    fn new(
        plan: &'p P,
        book: B,
        orbits: Option<crate::topology::LinkOrbits>,
        hw: &'p Hardware,
        opts: &'p SimOptions,
    ) -> Result<Engine<'p, P, B>, SimError> {
        let mut net = network_with_stragglers(&hw.topology, &opts.stragglers)?;
        if let Some(o) = &orbits {
            net.scale_capacities(&o.scale);
        }
        Ok(Engine {
            plan,
            hw,
            opts,
            now: 0.0,
            seq: 0,
            queue: RadixQueue::new(),
            events: 0,
            compact_at: COMPACT_MIN,
            book,
            done_ops: 0,
            net,
            transfers: Vec::new(),
            routes: IntMap::default(),
            router: Router::new(&hw.topology),
            orbits,
            link_spans: Vec::new(),
            interference: opts
                .interference
                .clone()
                .map(|m| InterferenceState::new(m, plan.ranks() as usize, plan.block_count())),
            resched: Vec::new(),
            jitter: opts.jitter.as_ref().map(variability::Draws::new),
        })
    }

    /// Re-rate `rank`'s running compute ops after its interference state changed.
    fn refresh(&mut self, rank: u32) -> Result<(), SimError> {
        let Some(st) = self.interference.as_mut() else {
            return Ok(());
        };
        if st.idle(rank) {
            return Ok(());
        }
        let mut out = std::mem::take(&mut self.resched);
        st.refresh(&self.hw.gpu, rank, self.now, &mut out)?;
        for &(op, at, v, what) in &out {
            match what {
                Resched::Done => self.schedule(at, Ev::ComputeDone(op, v, rank), op)?,
                Resched::Deferred(i) => {
                    self.seq += 1;
                    let st = self.interference.as_mut().expect("interference on");
                    st.note(rank, i, at, self.seq);
                }
                Resched::Tail => self.schedule(at, Ev::GemmTail(op, v, rank), op)?,
            }
        }
        out.clear();
        self.resched = out;
        Ok(())
    }

    fn schedule(&mut self, at: f64, ev: Ev, op: OpId) -> Result<(), SimError> {
        if !at.is_finite() || at > MAX_SIM_SECONDS {
            return Err(SimError::TimeOverflow {
                label: self.plan.label(op),
            });
        }
        debug_assert!(at >= self.now, "scheduling into the past");
        let at = NotNan::new(at.max(self.now)).expect("finite time");
        self.seq += 1;
        let queued = self.queue.push(queue::key(at, self.seq), ev);
        debug_assert!(queued, "keys are non-decreasing");
        if self.queue.len() > self.compact_at {
            self.compact();
        }
        Ok(())
    }

    /// Drop the stale completions from the queue. Every re-solve of the network (and
    /// every rate change under interference) schedules a new completion for each flow
    /// (op) it touched, leaving the old one to be skipped when popped: with thousands of
    /// flows in flight (a MoE all-to-all over 64 ranks) they are most of the queue and
    /// most of the run's memory. Dropping them changes nothing that runs (keys are
    /// unique, so the live events pop in the same order), and they still count as
    /// events. The next compaction waits until the queue doubles: O(1) a push.
    fn compact(&mut self) {
        let flows = &self.net.flows;
        let inter = self.interference.as_ref();
        let before = self.queue.len();
        self.queue.retain(|ev| match *ev {
            Ev::FlowDone(f, v) => {
                let fl = &flows[f as usize];
                fl.version == v && fl.active
            }
            Ev::ComputeDone(op, v, rank) | Ev::GemmTail(op, v, rank) => {
                inter.is_none_or(|st| st.current(rank, op, v))
            }
            Ev::OpDone(_) | Ev::FlowStart(_) => true,
        });
        self.events += (before - self.queue.len()) as u64;
        self.compact_at = (2 * self.queue.len()).max(COMPACT_MIN);
    }

    fn run(&mut self) -> Result<(), SimError> {
        for l in self.book.ready_at_start(self.plan) {
            self.start_launch(l)?;
        }
        loop {
            // Every event of an instant handled: re-solve the flows' rates once for
            // all the flows it started and finished.
            if self.net.unsettled() && !self.queue.has_current() {
                self.settle()?;
            }
            let Some((key, ev)) = self.queue.pop() else {
                break;
            };
            self.events += 1;
            if self.events > self.opts.max_events {
                return Err(SimError::EventBudget {
                    budget: self.opts.max_events,
                });
            }
            self.now = queue::time_of(key);
            if let Some(deadline) = self.opts.deadline
                && self.now > deadline
            {
                return Err(SimError::PastDeadline { deadline });
            }
            match ev {
                Ev::OpDone(op) => self.op_done(op)?,
                Ev::ComputeDone(op, v, rank) => {
                    let st = self.interference.as_mut().expect("interference on");
                    match st.popped(rank, op, v) {
                        Some(None) => {
                            st.compute_done(rank, op);
                            self.op_done(op)?;
                            self.refresh(rank)?;
                        }
                        Some(Some(key)) => self.requeue(key, ev),
                        None => {}
                    }
                }
                Ev::GemmTail(op, v, rank) => {
                    let st = self.interference.as_mut().expect("interference on");
                    if st.current(rank, op, v) {
                        self.refresh(rank)?;
                    }
                }
                Ev::FlowStart(f) => self.flow_start(f)?,
                Ev::FlowDone(f, v) => {
                    let fl = &self.net.flows[f as usize];
                    if fl.version == v && fl.active {
                        self.flow_due(f, v)?;
                    }
                }
            }
        }
        if self.done_ops < self.plan.op_count() {
            let (label, rank) = self.first_stuck();
            return Err(SimError::Deadlock {
                done: self.done_ops,
                total: self.plan.op_count(),
                label,
                rank,
            });
        }
        Ok(())
    }

    fn first_stuck(&self) -> (String, u32) {
        match self.book.first_unstarted(self.plan) {
            Some(op) => (self.plan.label(op), self.plan.rank(op)),
            None => (String::from("?"), 0),
        }
    }

    fn start_launch(&mut self, l: LaunchId) -> Result<(), SimError> {
        let plan = self.plan;
        let stream = plan.launch_stream(l);
        let mut changed = false;
        for op in plan.launch_ops(l) {
            let d = self.book.start(plan, op, stream, self.now);
            if d == COMM {
                if let Some(st) = self.interference.as_mut()
                    && st.holds_sms()
                {
                    changed |= st.posted(plan.stream(stream), |b| plan.block_sms(b), 1);
                }
                // A send or recv is posted once it has started.
                let p = plan.partner(op);
                if p != NO_PARTNER && self.book.started(plan, p) {
                    self.begin_transfer(op, p)?;
                }
            } else if let Some(st) = self.interference.as_mut() {
                st.compute_started(plan.stream(stream), op, plan.kind(op), self.now, d);
                changed = true;
            } else {
                self.schedule(self.now + d, Ev::OpDone(op), op)?;
            }
        }
        if changed {
            // A launch's ops are all on its stream's rank.
            self.refresh(plan.stream(stream).rank)?;
        }
        Ok(())
    }

    /// A transfer from `src` to `dst` started (`+1`) or stopped (`-1`) moving bytes.
    fn moving(&mut self, f: u32, delta: i32) -> Result<(), SimError> {
        let Some(st) = self.interference.as_mut() else {
            return Ok(());
        };
        let t = &self.transfers[f as usize];
        let (a, b) = (self.plan.rank(t.send), self.plan.rank(t.recv));
        // Only whether a rank moves any bytes enters its factors: a rank whose count
        // stayed on the same side of zero has nothing to re-rate.
        let flip_a = st.moving(a, delta);
        let flip_b = b != a && st.moving(b, delta);
        if flip_a {
            self.refresh(a)?;
        }
        if flip_b {
            self.refresh(b)?;
        }
        Ok(())
    }

    fn route(&mut self, src: u32, dst: u32) -> Result<(u32, u32, f64), SimError> {
        if let Some(&r) = self.routes.get(&(src, dst)) {
            return Ok(r);
        }
        let route = self.router.route(src as usize, dst as usize)?;
        let start = self.net.route_links.len() as u32;
        match &self.orbits {
            // A link crossed twice (two links of one orbit) counts twice on its
            // representative: the solver's shares count route entries.
            Some(o) => self
                .net
                .route_links
                .extend(route.links.iter().map(|&l| o.rep[l as usize])),
            None => self.net.route_links.extend_from_slice(&route.links),
        }
        let r = (start, route.links.len() as u32, route.latency);
        self.routes.insert((src, dst), r);
        Ok(r)
    }

    fn begin_transfer(&mut self, a: OpId, b: OpId) -> Result<(), SimError> {
        let (send, recv, kind) = match self.plan.kind(a) {
            k @ OpKind::Send { .. } => (a, b, k),
            _ => (b, a, self.plan.kind(b)),
        };
        let src = self.plan.rank(send);
        let OpKind::Send {
            peer: dst, bytes, ..
        } = kind
        else {
            unreachable!("send op")
        };
        let (rs, rl, lat) = self.route(src, dst)?;
        // Jitter: the message's latency and its effective bandwidth each get a factor
        // (a slower message drains as if it carried more bytes).
        let (jl, jb) = self.jitter.as_ref().map_or((1.0, 1.0), |j| {
            (
                j.factor(send, Draw::Latency),
                j.factor(send, Draw::Bandwidth),
            )
        });
        let send_launch = self.plan.op_launch(send);
        let fused = self.plan.fused(send_launch);
        let stream = self.plan.launch_stream(send_launch);
        // (wire bytes per payload byte, rate ceiling, latency before the first byte,
        // channels the flow stands for)
        let (factor, cap, alpha, weight) = match self.plan.stream(stream).wire {
            // An NCCL channel: its protocol's wire bytes, its own rate ceiling and
            // NCCL's per-step latencies (which include the links').
            Some(w) => {
                let w = self.plan.wire(w);
                let topo = self.router.topology();
                let step = if topo.node_of(src as usize) == topo.node_of(dst as usize) {
                    w.intra_step_latency
                } else {
                    w.inter_step_latency
                };
                let alpha = if fused { step } else { w.launch_latency + step };
                (w.factor, w.cap, alpha, w.weight)
            }
            None => {
                let sw = if fused {
                    self.hw.comm.step_latency
                } else {
                    self.hw.comm.message_latency
                };
                (1.0, f64::INFINITY, sw + lat, 1)
            }
        };
        let f = self
            .net
            .add_flow(rs, rl, bytes as f64 * factor * jb, cap, weight);
        let t = Transfer {
            send,
            recv,
            bytes,
            started: self.now,
            done: Deferral::NONE,
        };
        // The network hands out the slot of a released flow where it has one; the
        // transfer takes the same index.
        match self.transfers.get_mut(f as usize) {
            Some(slot) => *slot = t,
            None => {
                debug_assert_eq!(f as usize, self.transfers.len());
                self.transfers.push(t);
            }
        }
        let alpha = alpha * jl;
        self.schedule(self.now + alpha, Ev::FlowStart(f), send)
    }

    fn flow_start(&mut self, f: u32) -> Result<(), SimError> {
        if self.transfers[f as usize].bytes == 0 {
            return self.transfer_done(f);
        }
        self.transfers[f as usize].started = self.now;
        let now = self.now;
        self.net.activate(f, now);
        self.moving(f, 1)
    }

    /// Re-solve the rates the instant's flow starts and ends changed, and schedule the
    /// completion of every flow whose rate moved.
    fn settle(&mut self) -> Result<(), SimError> {
        self.net.settle(self.now);
        let flows = std::mem::take(&mut self.net.touched);
        let r = self.reschedule(&flows);
        self.net.touched = flows;
        r
    }

    /// Schedule the completion of each flow in `flows` at its new rate; one that moves
    /// later than the flow's queued completion is noted instead ([`Deferral`]), which
    /// spares a jittered run a third of its events (stale completions).
    fn reschedule(&mut self, flows: &[u32]) -> Result<(), SimError> {
        for &g in flows {
            let fl = &self.net.flows[g as usize];
            let (rem, rate) = (fl.remaining, fl.rate);
            let dt = if rem <= 0.0 { 0.0 } else { rem / rate };
            let at = self.now + dt;
            let t = &mut self.transfers[g as usize];
            if t.done.defers(at) {
                self.seq += 1;
                t.done.note(at, self.seq);
                continue;
            }
            let send = t.send;
            let fl = &mut self.net.flows[g as usize];
            fl.version = fl.version.wrapping_add(1);
            let v = fl.version;
            self.schedule(at, Ev::FlowDone(g, v), send)?;
            self.transfers[g as usize].done.queue(at);
        }
        Ok(())
    }

    /// Flow `f`'s live completion event popped: the flow ends now unless its rate fell
    /// since the event was queued; then the event is queued again at the end noted,
    /// under the sequence number taken then.
    fn flow_due(&mut self, f: u32, v: u32) -> Result<(), SimError> {
        match self.transfers[f as usize].done.popped() {
            None => self.flow_done(f),
            Some(key) => {
                self.requeue(key, Ev::FlowDone(f, v));
                Ok(())
            }
        }
    }

    /// Queue again, under `key`, a live completion that popped before its due time.
    fn requeue(&mut self, key: u128, ev: Ev) {
        let queued = self.queue.push(key, ev);
        debug_assert!(queued, "a due time is never before the event it replaces");
        if self.queue.len() > self.compact_at {
            self.compact();
        }
    }

    fn flow_done(&mut self, f: u32) -> Result<(), SimError> {
        let now = self.now;
        if self.opts.record_links {
            let t = &self.transfers[f as usize];
            let (send, bytes, started) = (t.send, t.bytes, t.started);
            for &link in self.net.links_of(f) {
                self.link_spans.push(LinkSpan {
                    link,
                    op: send,
                    start: started,
                    end: now,
                    bytes,
                });
            }
        }
        self.net.finish(f);
        self.moving(f, -1)?;
        self.transfer_done(f)
    }

    fn transfer_done(&mut self, f: u32) -> Result<(), SimError> {
        let (send, recv) = (
            self.transfers[f as usize].send,
            self.transfers[f as usize].recv,
        );
        self.op_done(send)?;
        self.op_done(recv)?;
        // Nothing refers to the transfer now (its completion events are stale by their
        // version): its slot serves the next one.
        self.net.release(f);
        Ok(())
    }

    fn op_done(&mut self, op: OpId) -> Result<(), SimError> {
        let plan = self.plan;
        let l = plan.op_launch(op);
        let comm = self.book.end(plan, op, self.now);
        if comm
            && let Some(st) = self.interference.as_mut()
            && st.holds_sms()
        {
            let sv = plan.stream(plan.launch_stream(l));
            if st.posted(sv, |b| plan.block_sms(b), -1) {
                self.refresh(sv.rank)?;
            }
        }
        self.done_ops += 1;
        for d in plan.dependents(op) {
            if self.book.dep_met(plan, d) {
                self.start_launch(d)?;
            }
        }
        if let Some(nl) = self.book.op_of_launch_done(plan, l) {
            self.start_launch(nl)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
