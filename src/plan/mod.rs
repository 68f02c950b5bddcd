//! The Plan: the contract between strategies (which build it) and executors (which run it).
//!
//! A Plan holds, per rank, named in-order streams (like CUDA streams). A stream runs a
//! sequence of *launches*; a launch is one kernel — a GEMM, an elementwise op, or a group
//! of P2P sends and receives that start together (like an NCCL group). A launch starts
//! when the previous launch on its stream has finished and every op it depends on has
//! finished; it finishes when all its ops have. A send and the receive it matches (same
//! source, destination and tag) form one transfer, which starts once both are posted
//! (rendezvous) and completes both.
//!
//! Storage is flat (one `Vec` per field, CSR for lists) so a plan of millions of ops stays
//! compact and cheap to walk.

mod dataflow;
mod emulate;
mod validate;

pub use dataflow::{BufId, BufInit, BufferInfo, DataflowError, OpIo, Region};
pub use emulate::{StandIn, emulate_rank};
pub use validate::PlanError;

use crate::scenario::DType;
use std::fmt;

pub type OpId = u32;
pub type StreamId = u32;
pub type LaunchId = u32;

/// What a stream is for; metrics classify time by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StreamKind {
    Compute,
    Comm,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamInfo {
    pub rank: u32,
    pub name: String,
    pub kind: StreamKind,
    /// Index into [`Plan::wires`]: the messages of this stream move as one NCCL channel
    /// of a collective with those parameters; `None`: the hardware's own message costs.
    pub wire: Option<u32>,
    /// The NCCL thread block (one CTA on one SM) this stream's sends and receives run in:
    /// the streams of one block hold its SM once while any of their ops is posted, as
    /// the slots of one NCCL channel do. `None`: each posted op holds the profile's
    /// `comm_ctas_per_op` SMs (a P2P kernel of its own).
    pub block: Option<u32>,
}

/// How the messages of one NCCL channel move (a collective's protocol and channel, as
/// `strategy::nccl` derives them): what the simulator charges instead of the hardware
/// profile's per-message costs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Wire {
    /// Bytes on the wire per payload byte (LL sends a flag with every 4 bytes: 2;
    /// LL128 one 8-byte flag per 128-byte line: 128/120; Simple: 1).
    pub factor: f64,
    /// The most one message of this channel moves per second (wire bytes), whatever the
    /// links leave it; `+inf`: none.
    pub cap: f64,
    /// How many identical NCCL channels (same ring, same routes) this stream's messages
    /// stand for: their flow shares links as that many flows would (weighted max-min)
    /// and `cap` is theirs together. 1 for one channel.
    pub weight: u32,
    /// Seconds a collective's first step pays once (the kernel's launch and set-up).
    pub launch_latency: f64,
    /// Seconds each step pays between GPUs of one node, and between nodes (these
    /// replace the route's link latencies: NCCL's figures include them).
    pub intra_step_latency: f64,
    pub inter_step_latency: f64,
}

/// Elementwise kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EltKind {
    /// `out = a + b` on the reduce-scatter chain.
    Add,
    /// The MLP activation (gated or not).
    Activation,
    /// The end of a collective that runs on several NCCL channels (each ending in its own
    /// receive): it waits for all of them, moves nothing (`bytes` 0) and costs nothing.
    /// Only in simulator-only plans.
    Join,
}

impl EltKind {
    pub fn name(self) -> &'static str {
        match self {
            EltKind::Add => "add",
            EltKind::Activation => "activation",
            EltKind::Join => "join",
        }
    }
}

/// One operation. Byte counts are payload bytes; `Elementwise::bytes` is HBM traffic.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum OpKind {
    Gemm {
        m: u64,
        n: u64,
        k: u64,
        dtype: DType,
        /// Reads the B operand (the weight) the GEMM before it on its stream read: a
        /// decomposed site's later partial GEMMs over their rank's weight. B is then
        /// in L2 where it fits, and the cost model takes the profile's warm time
        /// ([`crate::cost::gemm_time_warm`]).
        reuses_b: bool,
    },
    /// `groups` GEMMs of one shape in one kernel (a MoE layer's experts, each with its
    /// own weights: see [`crate::cost::grouped_gemm_time`]).
    GroupedGemm {
        groups: u32,
        m: u64,
        n: u64,
        k: u64,
        dtype: DType,
    },
    Elementwise {
        kind: EltKind,
        bytes: u64,
    },
    /// A fused (flash) attention kernel (see [`crate::cost::Attention`]).
    Attention(crate::cost::Attention),
    /// A device-local copy of `bytes` (read + write).
    Copy {
        bytes: u64,
    },
    Send {
        peer: u32,
        bytes: u64,
        tag: u64,
    },
    /// `accumulate`: the received data is reduced into the destination as it arrives (the
    /// fused reduction of a ring reduce-scatter kernel) rather than stored.
    Recv {
        peer: u32,
        bytes: u64,
        tag: u64,
        accumulate: bool,
    },
}

/// Coarse class of an op, for timelines, colours and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpClass {
    Gemm,
    Add,
    Activation,
    Copy,
    Send,
    Recv,
}

impl OpClass {
    pub const ALL: [OpClass; 6] = [
        OpClass::Gemm,
        OpClass::Add,
        OpClass::Activation,
        OpClass::Copy,
        OpClass::Send,
        OpClass::Recv,
    ];

    pub fn name(self) -> &'static str {
        match self {
            OpClass::Gemm => "gemm",
            OpClass::Add => "add",
            OpClass::Activation => "activation",
            OpClass::Copy => "copy",
            OpClass::Send => "send",
            OpClass::Recv => "recv",
        }
    }

    pub fn parse(s: &str) -> Option<OpClass> {
        OpClass::ALL.into_iter().find(|c| c.name() == s)
    }

    /// Communication ops (transfers and the waits for them).
    pub fn is_comm(self) -> bool {
        matches!(self, OpClass::Send | OpClass::Recv)
    }
}

impl OpKind {
    /// A GEMM that reads its operands cold (not the B of the GEMM before it).
    pub fn gemm(m: u64, n: u64, k: u64, dtype: DType) -> OpKind {
        OpKind::Gemm {
            m,
            n,
            k,
            dtype,
            reuses_b: false,
        }
    }

    pub fn class(&self) -> OpClass {
        match self {
            OpKind::Gemm { .. } | OpKind::GroupedGemm { .. } | OpKind::Attention(_) => {
                OpClass::Gemm
            }
            OpKind::Elementwise {
                kind: EltKind::Add, ..
            } => OpClass::Add,
            OpKind::Elementwise {
                kind: EltKind::Activation,
                ..
            } => OpClass::Activation,
            // A marker with no duration; drawn, if at all, as a copy.
            OpKind::Elementwise {
                kind: EltKind::Join,
                ..
            } => OpClass::Copy,
            OpKind::Copy { .. } => OpClass::Copy,
            OpKind::Send { .. } => OpClass::Send,
            OpKind::Recv { .. } => OpClass::Recv,
        }
    }

    /// Payload bytes the op moves (0 for GEMMs).
    pub fn bytes(&self) -> u64 {
        match *self {
            OpKind::Gemm { .. } | OpKind::GroupedGemm { .. } | OpKind::Attention(_) => 0,
            OpKind::Elementwise { bytes, .. }
            | OpKind::Copy { bytes }
            | OpKind::Send { bytes, .. }
            | OpKind::Recv { bytes, .. } => bytes,
        }
    }

    pub fn flops(&self) -> f64 {
        match *self {
            OpKind::Gemm { m, n, k, .. } => crate::cost::gemm_flops(m, n, k),
            OpKind::GroupedGemm {
                groups, m, n, k, ..
            } => groups as f64 * crate::cost::gemm_flops(m, n, k),
            OpKind::Attention(a) => a.flops(),
            _ => 0.0,
        }
    }

    /// A GEMM kernel (plain or grouped): what fills the SMs in the interference model.
    pub fn is_gemm(&self) -> bool {
        matches!(self, OpKind::Gemm { .. } | OpKind::GroupedGemm { .. })
    }
}

/// Where an op came from: the collective/GEMM site, the schedule step, the data slice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpTag {
    pub site: u16,
    pub step: u32,
    pub slice: u32,
}

/// `OpLabel::peer` of an op that is not a send or recv.
pub const NO_PEER: u32 = u32::MAX;

/// Which pass of a training step an op belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Pass {
    Forward,
    Backward,
    /// A layer's forward run again in its backward (full recomputation).
    Recompute,
}

impl Pass {
    pub fn name(self) -> &'static str {
        match self {
            Pass::Forward => "fwd",
            Pass::Backward => "bwd",
            Pass::Recompute => "recompute",
        }
    }

    pub fn parse(s: &str) -> Option<Pass> {
        [Pass::Forward, Pass::Backward, Pass::Recompute]
            .into_iter()
            .find(|p| p.name() == s)
    }
}

/// Where in a step an op runs: its layer (`None`: the embedding, the LM head, the
/// gradient buckets after the last layer), micro-batch and pass. A plan records it per
/// run of ops ([`Plan::scopes`]), not per op.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Scope {
    pub layer: Option<u32>,
    pub micro_batch: u32,
    pub pass: Pass,
}

/// Scope marks: each op from `first` up to the next mark's `first` has `scope`.
pub type ScopeMark = (OpId, Scope);

/// The scope of `op` under `marks` (sorted by first op).
pub fn scope_of(marks: &[ScopeMark], op: OpId) -> Option<Scope> {
    let i = marks.partition_point(|&(first, _)| first <= op);
    i.checked_sub(1).map(|i| marks[i].1)
}

/// An op's label in parts (16 bytes, no allocation): site index, class, slice and the
/// peer of a send or recv. Rendered as `site.class[sN]`, with `→peer` / `←peer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpLabel {
    pub site: u16,
    pub class: OpClass,
    pub slice: u32,
    pub peer: u32,
}

impl OpLabel {
    pub fn render(&self, sites: &[String]) -> String {
        let site = sites.get(self.site as usize).map_or("?", String::as_str);
        let cls = self.class.name();
        match (self.class, self.peer) {
            (OpClass::Send, p) if p != NO_PEER => format!("{site}.{cls}[s{}]→{p}", self.slice),
            (OpClass::Recv, p) if p != NO_PEER => format!("{site}.{cls}[s{}]←{p}", self.slice),
            _ => format!("{site}.{cls}[s{}]", self.slice),
        }
    }
}

/// One op as stored.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Op {
    pub rank: u32,
    pub stream: StreamId,
    pub launch: LaunchId,
    pub kind: OpKind,
    pub tag: OpTag,
}

/// A validated Plan. Build with [`PlanBuilder`].
#[derive(Debug, Clone)]
pub struct Plan {
    pub ranks: u32,
    pub streams: Vec<StreamInfo>,
    /// Channel parameters that streams point to (see [`StreamInfo::wire`]).
    pub wires: Vec<Wire>,
    /// Thread blocks that streams point to (see [`StreamInfo::block`]): the SMs each
    /// holds (one per NCCL channel it stands for).
    pub blocks: Vec<u32>,
    pub ops: Vec<Op>,
    pub sites: Vec<String>,
    /// Useful model FLOPs of the whole plan (for MFU), as the strategy counts them.
    pub model_flops: f64,
    /// Per op, then one closing record: what the simulator follows on every start and
    /// completion (see [`OpLinks`]).
    links: Vec<OpLinks>,
    deps: Vec<OpId>,
    /// Per launch, then one closing record (see [`LaunchInfo`]).
    launches: Vec<LaunchInfo>,
    launch_ops: Vec<OpId>,
    stream_start: Vec<u32>,
    stream_launches: Vec<LaunchId>,
    /// Launches that depend on each op (CSR, started by [`OpLinks::dependents`]).
    dependent_launches: Vec<LaunchId>,
    /// Data flow (see [`dataflow`](self::dataflow)): per-rank buffers, each op's regions
    /// (empty when the strategy gave none) and each rank's result region.
    pub buffers: Vec<BufferInfo>,
    pub io: Vec<OpIo>,
    pub outputs: Vec<Region>,
    /// `Some(shift)`: a symmetric plan holding ranks `0..shift` of `ranks` (see
    /// [`PlanBuilder::symmetric`]).
    pub symmetry: Option<u32>,
    /// Layer, micro-batch and pass of runs of ops (sorted by first op; empty for plans
    /// that are not a layer or a step).
    pub scopes: Vec<ScopeMark>,
}

/// One op's links in a [`Plan`]: its launch, its matching send or recv and where its
/// dependencies and its dependents start in their CSR lists (the next record's fields end
/// them). The simulator reads these on every op it starts and ends, so they sit in one
/// record rather than four arrays (on this project's benchmarks the speed-up was within
/// noise; it is the simpler layout).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OpLinks {
    pub launch: LaunchId,
    pub partner: OpId,
    pub deps: u32,
    pub dependents: u32,
}

/// One launch of a [`Plan`]: where its ops start in the launch-ops list (the next
/// record's `ops` ends them), its stream, the launch after it on that stream
/// (`NO_LAUNCH` for the last) and whether it continues the previous launch of its stream
/// inside one kernel (a later step of a collective: its messages pay the step latency,
/// not the per-message one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LaunchInfo {
    pub ops: u32,
    pub stream: StreamId,
    pub next: LaunchId,
    pub fused: bool,
}

pub const NO_PARTNER: OpId = OpId::MAX;
pub const NO_LAUNCH: LaunchId = LaunchId::MAX;

impl Plan {
    pub fn op_count(&self) -> usize {
        self.ops.len()
    }
    pub fn launch_count(&self) -> usize {
        self.launches.len() - 1
    }
    pub fn deps(&self, op: OpId) -> &[OpId] {
        let i = op as usize;
        &self.deps[self.links[i].deps as usize..self.links[i + 1].deps as usize]
    }
    pub fn launch_ops(&self, l: LaunchId) -> &[OpId] {
        let i = l as usize;
        &self.launch_ops[self.launches[i].ops as usize..self.launches[i + 1].ops as usize]
    }
    pub fn launch_stream(&self, l: LaunchId) -> StreamId {
        self.launches[l as usize].stream
    }
    /// Whether launch `l` continues the previous launch of its stream in one kernel.
    pub fn fused(&self, l: LaunchId) -> bool {
        self.launches[l as usize].fused
    }
    /// The launch of `op` (as `ops[op].launch`, from the compact record the simulator
    /// reads anyway).
    pub fn op_launch(&self, op: OpId) -> LaunchId {
        self.links[op as usize].launch
    }
    pub fn stream_launches(&self, s: StreamId) -> &[LaunchId] {
        let i = s as usize;
        &self.stream_launches[self.stream_start[i] as usize..self.stream_start[i + 1] as usize]
    }
    /// The matching recv of a send, or the matching send of a recv; `NO_PARTNER` otherwise.
    pub fn partner(&self, op: OpId) -> OpId {
        self.links[op as usize].partner
    }
    /// The launches that list `op` among their dependencies (once per dependency edge).
    pub fn dependents(&self, op: OpId) -> &[LaunchId] {
        let i = op as usize;
        &self.dependent_launches
            [self.links[i].dependents as usize..self.links[i + 1].dependents as usize]
    }
    /// The launch after `l` on its stream.
    pub fn next_launch(&self, l: LaunchId) -> Option<LaunchId> {
        let n = self.launches[l as usize].next;
        (n != NO_LAUNCH).then_some(n)
    }
    /// Whether the strategy attached data flow (buffers and regions) to every op.
    pub fn has_dataflow(&self) -> bool {
        !self.io.is_empty()
    }
    /// Rank `rank`'s buffer named `name`.
    pub fn buffer_named(&self, name: &str, rank: u32) -> Option<&BufferInfo> {
        self.buffers
            .iter()
            .find(|b| b.name == name && b.rank == rank)
    }
    /// Where the global tensor `name` sits in the buffers of that name: (buffer row,
    /// global row, rows) per run of every rank's `Global` init, sorted and without
    /// repeats. Rows computed from that tensor keep its rows' places, so this maps a
    /// result row back to its token.
    pub fn global_rows(&self, name: &str) -> Vec<(u64, u64, u64)> {
        let mut runs: Vec<(u64, u64, u64)> = self
            .buffers
            .iter()
            .filter(|b| b.name == name)
            .flat_map(|b| b.init.global_runs())
            .collect();
        runs.sort_unstable();
        runs.dedup();
        runs
    }
    /// An order in which launch starts (`2·l`) and ends (`2·l + 1`) can be issued by one
    /// host thread so that everything each waits for was issued before it: what an
    /// executor that enqueues work on asynchronous streams needs. Fails on a deadlock.
    pub fn issue_order(&self) -> Result<Vec<u32>, PlanError> {
        validate::topological_order(self)
    }
    /// The layer, micro-batch and pass `op` belongs to, where the strategy recorded it.
    pub fn scope(&self, op: OpId) -> Option<Scope> {
        scope_of(&self.scopes, op)
    }
    pub fn site_name(&self, op: OpId) -> &str {
        &self.sites[self.ops[op as usize].tag.site as usize]
    }
    /// Whether the plan can run to completion under its own semantics (in-order streams,
    /// dependencies, rendezvous send/recv): a topological sort over launch start and end
    /// events. Executors that cannot recover from a hang call this before running; the
    /// simulator reports the same condition as `SimError::Deadlock` on its own.
    pub fn check_deadlock_free(&self) -> Result<(), PlanError> {
        validate::check_acyclic(self)
    }
    /// A human label, e.g. `fc1.gemm[s2]` or `fc2.send[s1]→3`.
    pub fn label(&self, op: OpId) -> String {
        self.op_label(op).render(&self.sites)
    }
    /// The parts of an op's label, to render later against [`Plan::sites`].
    pub fn op_label(&self, op: OpId) -> OpLabel {
        let o = &self.ops[op as usize];
        let peer = match o.kind {
            OpKind::Send { peer, .. } | OpKind::Recv { peer, .. } => peer,
            _ => NO_PEER,
        };
        OpLabel {
            site: o.tag.site,
            class: o.kind.class(),
            slice: o.tag.slice,
            peer,
        }
    }
    /// Total payload bytes sent.
    pub fn bytes_sent(&self) -> u64 {
        self.ops
            .iter()
            .filter(|o| matches!(o.kind, OpKind::Send { .. }))
            .map(|o| o.kind.bytes())
            .fold(0u64, u64::saturating_add)
    }
}

/// Builds a Plan op by op; `finish` validates it.
#[derive(Debug, Clone)]
pub struct PlanBuilder {
    ranks: u32,
    streams: Vec<StreamInfo>,
    wires: Vec<Wire>,
    blocks: Vec<u32>,
    ops: Vec<Op>,
    sites: Vec<String>,
    dep_start: Vec<u32>,
    deps: Vec<OpId>,
    launch_stream: Vec<StreamId>,
    launch_fused: Vec<bool>,
    next_tag: u64,
    model_flops: f64,
    limit: usize,
    /// The memory estimate per op its limit was set at (for the refusal's message).
    bytes_per_op: u64,
    buffers: Vec<BufferInfo>,
    io: Vec<Option<OpIo>>,
    outputs: Vec<Region>,
    /// Record buffers, op regions and outputs (`false`: a plan for the simulator only).
    dataflow: bool,
    symmetry: Option<u32>,
    scopes: Vec<ScopeMark>,
}

/// What one op of a plan costs in memory once built and simulated, as measured (a
/// 1024-rank ring all-reduce without symmetry, 16.8 M ops, peaks at 1.74 GB: 104 B per
/// op), rounded up: the plan's arrays, its dependencies and the engine's state per op.
/// The figure for collectives; see [`LAYER_BYTES_PER_OP`].
pub const BYTES_PER_OP: u64 = 128;

/// The same for layer, step and MoE plans, whose ops carry scopes and site labels, whose
/// runs keep a sequential baseline beside the strategy's plan, and whose compute ops
/// carry the interference model's state. Measured (peak RSS less the process's 7 MB
/// floor, over the plan's ops): 285 B per op for a 3.3 M-op pipeline step alone, 333 B
/// with its baseline, 328 B for a 1.2 M-op Mixtral step; a 0.29 M-op DeepSeek-V3 MoE
/// layer about 400 B, so there the estimate runs some 5% short.
pub const LAYER_BYTES_PER_OP: u64 = 384;

/// The memory a run may take by default, in GiB (`--max-memory` changes it).
pub const DEFAULT_MEMORY_GIB: f64 = 24.0;

/// The most ops one collective plan may hold by default: [`DEFAULT_MEMORY_GIB`] at
/// [`BYTES_PER_OP`]; bigger plans are refused before they exhaust memory.
pub const DEFAULT_OP_LIMIT: usize = 201_326_592;

static MEMORY_LIMIT: std::sync::atomic::AtomicU64 =
    std::sync::atomic::AtomicU64::new(DEFAULT_OP_LIMIT as u64 * BYTES_PER_OP);

/// The most ops one collective plan may hold in this process: [`DEFAULT_OP_LIMIT`]
/// unless [`set_memory_limit`] changed it.
pub fn op_limit() -> usize {
    op_limit_at(BYTES_PER_OP)
}

/// The most ops of `bytes_per_op` each that fit this process's memory limit.
pub fn op_limit_at(bytes_per_op: u64) -> usize {
    let bytes = MEMORY_LIMIT.load(std::sync::atomic::Ordering::Relaxed);
    usize::try_from(bytes / bytes_per_op.max(1))
        .unwrap_or(usize::MAX)
        .max(1)
}

/// Let plans take up to `bytes` of memory: the process-wide limit every plan builder
/// checks its op count against (at its kind's bytes per op), as `ulimit` is for a shell.
pub fn set_memory_limit(bytes: u64) {
    MEMORY_LIMIT.store(bytes, std::sync::atomic::Ordering::Relaxed);
}

impl PlanBuilder {
    pub fn new(ranks: u32) -> PlanBuilder {
        PlanBuilder {
            ranks,
            streams: Vec::new(),
            wires: Vec::new(),
            blocks: Vec::new(),
            ops: Vec::new(),
            sites: Vec::new(),
            dep_start: vec![0],
            deps: Vec::new(),
            launch_stream: Vec::new(),
            launch_fused: Vec::new(),
            next_tag: 0,
            model_flops: 0.0,
            limit: op_limit(),
            bytes_per_op: BYTES_PER_OP,
            buffers: Vec::new(),
            io: Vec::new(),
            outputs: Vec::new(),
            dataflow: true,
            symmetry: None,
            scopes: Vec::new(),
        }
    }

    /// The ops added from now on run in `scope` (until the next call).
    pub fn set_scope(&mut self, scope: Scope) {
        let first = self.ops.len() as OpId;
        // A mark no op took yet gives way to the new one.
        if self.scopes.last().is_some_and(|&(f, _)| f == first) {
            self.scopes.pop();
        }
        if self.scopes.last().is_none_or(|&(_, last)| last != scope) {
            self.scopes.push((first, scope));
        }
    }

    /// A builder of a *symmetric* (quotient) plan of `ranks` ranks: the program of rank
    /// `r + shift` is rank `r`'s moved by `shift` (its peers too), so only ranks
    /// `0..shift` are built. Their ops may name any peer; a send from `a` to `b` is
    /// received by the representative `b mod shift`, from `a` moved back by as many
    /// shifts as `b` is away from it. Message tags must therefore be the same on every
    /// rank for a given step (the representative's tag stands for all its translates).
    /// Only the simulator runs such a plan, on a topology with the same symmetry
    /// (`Topology::link_orbits`); it has no data flow.
    pub fn symmetric(ranks: u32, shift: u32) -> PlanBuilder {
        let mut b = PlanBuilder::new(ranks).without_dataflow();
        b.symmetry = Some(shift);
        b
    }

    /// A builder that drops data flow: buffer declarations, op regions and outputs are
    /// ignored, and the plan has none (the simulator needs only shapes and bytes; an
    /// executor refuses such a plan).
    pub fn without_dataflow(mut self) -> PlanBuilder {
        self.dataflow = false;
        self
    }

    pub fn with_op_limit(mut self, limit: usize) -> PlanBuilder {
        self.limit = limit;
        self
    }

    /// Refuse more ops than `limit`, stating the estimate at `bytes_per_op` each.
    pub fn with_op_limit_at(mut self, limit: usize, bytes_per_op: u64) -> PlanBuilder {
        self.limit = limit;
        self.bytes_per_op = bytes_per_op;
        self
    }

    pub fn ranks(&self) -> u32 {
        self.ranks
    }

    pub fn add_model_flops(&mut self, f: f64) {
        self.model_flops += f;
    }

    /// Declare a stream on `rank`.
    pub fn stream(&mut self, rank: u32, name: &str, kind: StreamKind) -> StreamId {
        self.streams.push(StreamInfo {
            rank,
            name: name.to_string(),
            kind,
            wire: None,
            block: None,
        });
        (self.streams.len() - 1) as StreamId
    }

    /// Register channel parameters for [`PlanBuilder::channel_stream`].
    pub fn wire(&mut self, w: Wire) -> u32 {
        if let Some(i) = self.wires.iter().position(|x| *x == w) {
            return i as u32;
        }
        self.wires.push(w);
        (self.wires.len() - 1) as u32
    }

    /// Declare a communication stream on `rank` whose messages move as an NCCL channel
    /// with the parameters `wire` (from [`PlanBuilder::wire`]).
    pub fn channel_stream(&mut self, rank: u32, name: &str, wire: u32) -> StreamId {
        let s = self.stream(rank, name, StreamKind::Comm);
        self.streams[s as usize].wire = Some(wire);
        s
    }

    /// A new NCCL thread block for [`PlanBuilder::in_block`], holding `sms` SMs while
    /// any op of its streams is posted (one per channel it stands for).
    pub fn block(&mut self, sms: u32) -> u32 {
        self.blocks.push(sms);
        (self.blocks.len() - 1) as u32
    }

    /// Put stream `s` in thread block `block` (see [`StreamInfo::block`]).
    pub fn in_block(&mut self, s: StreamId, block: u32) {
        self.streams[s as usize].block = Some(block);
    }

    /// Declare a buffer on `rank`: `rows × cols` elements of `dtype`, row-major.
    pub fn buffer(
        &mut self,
        rank: u32,
        name: &str,
        rows: u64,
        cols: u64,
        dtype: DType,
        init: BufInit,
    ) -> BufId {
        if !self.dataflow {
            return 0;
        }
        self.buffers.push(BufferInfo {
            rank,
            name: name.to_string(),
            rows,
            cols,
            dtype,
            init,
        });
        (self.buffers.len() - 1) as BufId
    }

    /// Attach data flow to an op already added.
    pub fn set_io(&mut self, op: OpId, io: OpIo) {
        if !self.dataflow {
            return;
        }
        let i = op as usize;
        if self.io.len() <= i {
            self.io.resize(i + 1, None);
        }
        self.io[i] = Some(io);
    }

    /// Name the region that holds a rank's result (one per rank, in rank order).
    pub fn output(&mut self, region: Region) {
        if self.dataflow {
            self.outputs.push(region);
        }
    }

    /// Intern a site name (e.g. `fc1`).
    pub fn site(&mut self, name: &str) -> u16 {
        if let Some(i) = self.sites.iter().position(|s| s == name) {
            return i as u16;
        }
        self.sites.push(name.to_string());
        (self.sites.len() - 1) as u16
    }

    /// A fresh message tag, unique in this plan.
    pub fn msg_tag(&mut self) -> u64 {
        self.next_tag += 1;
        self.next_tag
    }

    /// `n` fresh message tags, consecutive and unique in this plan; returns the first.
    pub fn msg_tags(&mut self, n: u64) -> u64 {
        let first = self.next_tag + 1;
        self.next_tag = self.next_tag.saturating_add(n);
        first
    }

    /// Open a new launch on `stream`; add its ops with [`PlanBuilder::add`].
    pub fn launch(&mut self, stream: StreamId) -> LaunchId {
        self.launch_stream.push(stream);
        self.launch_fused.push(false);
        (self.launch_stream.len() - 1) as LaunchId
    }

    /// A launch that continues the previous launch of `stream` inside the same kernel (a
    /// later step of one collective): its messages pay the hardware's step latency
    /// instead of the per-message latency of a separate call. `fused = false` is
    /// [`PlanBuilder::launch`].
    pub fn launch_fused(&mut self, stream: StreamId, fused: bool) -> LaunchId {
        let l = self.launch(stream);
        self.launch_fused[l as usize] = fused;
        l
    }

    /// Add an op to `launch`. Dependencies must be ops already added.
    pub fn add(
        &mut self,
        launch: LaunchId,
        kind: OpKind,
        deps: &[OpId],
        tag: OpTag,
    ) -> Result<OpId, PlanError> {
        let id = self.ops.len();
        if id >= self.limit {
            return Err(PlanError::TooLarge {
                limit: self.limit,
                need: None,
                per: self.bytes_per_op,
            });
        }
        let stream = *self
            .launch_stream
            .get(launch as usize)
            .ok_or(PlanError::UnknownLaunch { launch })?;
        let rank = self.streams[stream as usize].rank;
        for &d in deps {
            if d as usize >= id {
                return Err(PlanError::ForwardDependency {
                    op: id as OpId,
                    dep: d,
                });
            }
        }
        self.deps.extend_from_slice(deps);
        self.dep_start.push(self.deps.len() as u32);
        self.ops.push(Op {
            rank,
            stream,
            launch,
            kind,
            tag,
        });
        Ok(id as OpId)
    }

    /// One op in a launch of its own.
    pub fn single(
        &mut self,
        stream: StreamId,
        kind: OpKind,
        deps: &[OpId],
        tag: OpTag,
    ) -> Result<OpId, PlanError> {
        let l = self.launch(stream);
        self.add(l, kind, deps, tag)
    }

    /// Validate and freeze: streams on valid ranks, no empty launch, every send matched by
    /// exactly one recv of the same size. Deadlock freedom is a separate, whole-graph check
    /// ([`Plan::check_deadlock_free`]); the simulator finds a deadlock by itself.
    pub fn finish(self) -> Result<Plan, PlanError> {
        validate::finish(self)
    }
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "plan: {} ranks, {} streams, {} launches, {} ops",
            self.ranks,
            self.streams.len(),
            self.launch_count(),
            self.ops.len()
        )
    }
}

#[cfg(test)]
mod scope_tests {
    use super::*;

    #[test]
    fn scopes_mark_runs_of_ops() {
        let mut b = PlanBuilder::new(1);
        let st = b.stream(0, "compute", StreamKind::Compute);
        let sc = |layer, pass| Scope {
            layer,
            micro_batch: 0,
            pass,
        };
        let op = |b: &mut PlanBuilder| {
            let k = OpKind::Copy { bytes: 1 };
            b.single(
                st,
                k,
                &[],
                OpTag {
                    site: 0,
                    step: 0,
                    slice: 0,
                },
            )
            .unwrap()
        };
        b.set_scope(sc(None, Pass::Forward));
        op(&mut b);
        // A scope no op takes gives way to the next; a repeat adds no mark.
        b.set_scope(sc(Some(0), Pass::Forward));
        b.set_scope(sc(Some(1), Pass::Forward));
        op(&mut b);
        b.set_scope(sc(Some(1), Pass::Forward));
        op(&mut b);
        b.set_scope(sc(Some(1), Pass::Backward));
        op(&mut b);
        let p = b.finish().unwrap();
        assert_eq!(p.scopes.len(), 3);
        assert_eq!(p.scope(0), Some(sc(None, Pass::Forward)));
        assert_eq!(p.scope(1), Some(sc(Some(1), Pass::Forward)));
        assert_eq!(p.scope(2), Some(sc(Some(1), Pass::Forward)));
        assert_eq!(p.scope(3), Some(sc(Some(1), Pass::Backward)));
        assert_eq!(scope_of(&[], 0), None);
    }
}
