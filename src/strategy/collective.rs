//! Stand-alone collectives as Plans, for `flashoverlap collective` (nccl-tests style).
//!
//! Sizes follow nccl-tests: `bytes` is the per-rank buffer of an all-reduce, the gathered
//! output of an all-gather, the scattered input of a reduce-scatter, the per-rank send
//! buffer of an all-to-all (`bytes / N` to each peer) and what each rank sends in a
//! sendrecv (rank r to r + 1). Uneven splits give the first parts one byte more, so every
//! byte is moved exactly once per step that moves it.
//!
//! Reductions are fused into the transfers (as NCCL does in its kernels): no separate add
//! op. `chunks` cuts the data into that many independent parts, each on its own stream
//! per rank (NCCL channels); they share links max-min fairly. For `tree` the chunks are
//! instead pipelined down and up the trees.

use super::StrategyError;
pub use super::steps::split;
use super::steps::{self, tag};
use crate::plan::{OpId, OpTag, Plan, PlanBuilder, PlanError, StreamId, StreamKind, Wire};
use std::fmt;

/// Which collective.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CollectiveOp {
    AllGather,
    ReduceScatter,
    AllReduce,
    AllToAll,
    SendRecv,
}

impl CollectiveOp {
    pub const ALL: [CollectiveOp; 5] = [
        CollectiveOp::AllGather,
        CollectiveOp::ReduceScatter,
        CollectiveOp::AllReduce,
        CollectiveOp::AllToAll,
        CollectiveOp::SendRecv,
    ];

    pub fn name(self) -> &'static str {
        match self {
            CollectiveOp::AllGather => "all-gather",
            CollectiveOp::ReduceScatter => "reduce-scatter",
            CollectiveOp::AllReduce => "all-reduce",
            CollectiveOp::AllToAll => "all-to-all",
            CollectiveOp::SendRecv => "sendrecv",
        }
    }

    pub fn parse(s: &str) -> Option<CollectiveOp> {
        CollectiveOp::ALL.into_iter().find(|o| o.name() == s)
    }

    /// nccl-tests' bus-bandwidth factor: busbw = algbw × factor.
    pub fn busbw_factor(self, ranks: u32) -> f64 {
        let n = ranks as f64;
        match self {
            CollectiveOp::AllReduce => 2.0 * (n - 1.0) / n,
            CollectiveOp::AllGather | CollectiveOp::ReduceScatter | CollectiveOp::AllToAll => {
                (n - 1.0) / n
            }
            CollectiveOp::SendRecv => 1.0,
        }
    }

    /// The algorithms this collective has, the first being the default.
    pub fn algorithms(self) -> &'static [Algorithm] {
        match self {
            CollectiveOp::AllGather | CollectiveOp::ReduceScatter => {
                &[Algorithm::Ring, Algorithm::Direct, Algorithm::Pairwise]
            }
            CollectiveOp::AllReduce => &[
                Algorithm::Ring,
                Algorithm::Tree,
                Algorithm::Direct,
                Algorithm::Pairwise,
            ],
            CollectiveOp::AllToAll => &[Algorithm::Pairwise, Algorithm::Direct],
            CollectiveOp::SendRecv => &[Algorithm::Direct],
        }
    }
}

impl fmt::Display for CollectiveOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How a collective is decomposed into point-to-point messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Algorithm {
    /// N − 1 steps around the ring, each rank sending to r + 1 (all-reduce: a
    /// reduce-scatter then an all-gather, 2(N − 1) steps).
    Ring,
    /// Every message at once: one group per rank of N − 1 sends and N − 1 receives
    /// (all-reduce: direct reduce-scatter, then direct all-gather).
    Direct,
    /// Decomposed P2P: N − 1 steps, step i exchanging with r + i and r − i (the
    /// Flash-Overlap decomposition; all-reduce: pairwise reduce-scatter then all-gather).
    Pairwise,
    /// All-reduce over NCCL's double binary tree (a heap-ordered binary tree and its
    /// mirror, half the data each), reduce up and broadcast down, chunks pipelined.
    Tree,
}

impl Algorithm {
    pub const ALL: [Algorithm; 4] = [
        Algorithm::Ring,
        Algorithm::Direct,
        Algorithm::Pairwise,
        Algorithm::Tree,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Ring => "ring",
            Algorithm::Direct => "direct",
            Algorithm::Pairwise => "pairwise",
            Algorithm::Tree => "tree",
        }
    }

    pub fn parse(s: &str) -> Option<Algorithm> {
        match s {
            "p2p" | "decomposed" => Some(Algorithm::Pairwise),
            _ => Algorithm::ALL.into_iter().find(|a| a.name() == s),
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One collective to build.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CollectiveSpec {
    pub op: CollectiveOp,
    pub algorithm: Algorithm,
    pub ranks: u32,
    /// nccl-tests' size, bytes (see the module docs).
    pub bytes: u64,
    /// Independent parts (streams) or, for `tree`, pipelined chunks; ≥ 1.
    pub chunks: u32,
    /// Ring and tree as NCCL runs them (channels with rail-aligned orders and the
    /// protocol's wire costs); `None`: one ring (or heap-ordered tree) per chunk in rank
    /// order, at the hardware's own message costs.
    pub nccl: Option<NcclChannels>,
}

/// Buffer slots of an NCCL channel connection (NCCL's `NCCL_STEPS`): a receiver can
/// hold this many steps in flight.
pub const NCCL_STEPS: u64 = 8;

/// NCCL's channels for a ring or tree collective.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NcclChannels {
    /// Channels, each with 1/C of the data on streams of its own.
    pub channels: u32,
    /// GPUs per node: rank r is on node r / node_size (ranks fill nodes in order).
    pub node_size: u32,
    /// What each channel's messages cost (protocol, NCCL latencies, ceiling).
    pub wire: Wire,
    /// Payload bytes/s one channel moves between nodes ([`crate::cost::nccl::Fabric::channel_bw`]):
    /// sizes how many tree chunks a connection keeps in flight.
    pub channel_bw: f64,
}

/// Channel `c`'s ring over `n` ranks in nodes of `g`, position → rank. Inside each node
/// the ring starts at local GPU `c mod g` (the rail whose NIC it enters and leaves
/// through: the next node is entered at the same local GPU) and walks the node's GPUs up
/// from there, or down on every other round of `g` channels, as NCCL's rail-aligned
/// rings do (its logs show per-channel in-node orders such as `0 5 4 7 6 3 2 1`); nodes
/// follow in order. With one node (or ranks that do not fill whole nodes) every channel
/// is the same cycle, alternately reversed.
pub fn ring_order(n: u64, g: u64, c: u64) -> Vec<u64> {
    let g = if g == 0 || g > n || n % g != 0 { n } else { g };
    let nodes: Vec<u64> = (0..n).map(|r| r / g).collect();
    member_ring_order(&nodes, c)
}

/// Channel `c`'s ring over the members of a communicator, position → member, given each
/// member's node (`nodes[m]`): nodes in the order of their first member, and inside each
/// node its members from the `c mod g`-th up (down on every other round of g channels),
/// g the node's member count — [`ring_order`] for members that need not fill nodes or
/// be numbered node by node.
pub fn member_ring_order(nodes: &[u64], c: u64) -> Vec<u64> {
    let mut groups: Vec<(u64, Vec<u64>)> = Vec::new();
    let mut index: std::collections::HashMap<u64, usize> = Default::default();
    for (m, &node) in nodes.iter().enumerate() {
        let i = *index.entry(node).or_insert_with(|| {
            groups.push((node, Vec::new()));
            groups.len() - 1
        });
        groups[i].1.push(m as u64);
    }
    let mut out = Vec::with_capacity(nodes.len());
    for (_, local) in &groups {
        let g = local.len() as u64;
        let (x, rev) = (c % g, (c / g) % 2 == 1);
        for i in 0..g {
            let l = if rev { (x + g - i) % g } else { (x + i) % g };
            out.push(local[l as usize]);
        }
    }
    out
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CollectiveError {
    #[error("{op} has no `{algorithm}` algorithm (it has: {known})")]
    NoSuchAlgorithm {
        op: CollectiveOp,
        algorithm: Algorithm,
        known: String,
    },
    #[error("a collective needs at least 2 ranks, got {0}")]
    TooFewRanks(u32),
    #[error("chunks must be at least 1")]
    NoChunks,
    #[error("a collective needs at least 1 channel")]
    NoChannels,
    #[error(
        "this collective is not the same on every rank up to a rotation by {shift} of {ranks} ranks (a tree, or messages of unequal sizes)"
    )]
    NotSymmetric { shift: u32, ranks: u32 },
    #[error(transparent)]
    Strategy(#[from] StrategyError),
}

impl CollectiveError {
    /// The error as a strategy's: a collective a strategy builds inside its plan fails
    /// only on the plan (or on a group its builder should not have given).
    pub fn into_strategy(self) -> StrategyError {
        match self {
            CollectiveError::Strategy(e) => e,
            _ => StrategyError::Unsupported("a collective this plan cannot build"),
        }
    }
}

impl From<PlanError> for CollectiveError {
    fn from(e: PlanError) -> Self {
        CollectiveError::Strategy(StrategyError::Plan(e))
    }
}

/// The message tags of one step, indexed by sending rank.
#[derive(Debug, Clone)]
enum StepTags {
    /// A symmetric plan's: the same for every rank.
    One(u64),
    Each(Vec<u64>),
}

impl std::ops::Index<usize> for StepTags {
    type Output = u64;
    fn index(&self, i: usize) -> &u64 {
        match self {
            StepTags::One(t) => t,
            StepTags::Each(v) => &v[i],
        }
    }
}

struct Builder<'a> {
    b: &'a mut PlanBuilder,
    /// Members of the communicator.
    n: u32,
    /// Members built: all `n`, or the representatives `0..shift` of a symmetric plan.
    held: u32,
    /// The plan rank of each member (`None`: member m is rank m).
    ranks: Option<&'a [u32]>,
    /// The site the ops are tagged with.
    site: u16,
}

impl Builder<'_> {
    /// Member `m`'s plan rank.
    fn rank(&self, m: u64) -> u32 {
        match self.ranks {
            Some(r) => r[m as usize],
            None => m as u32,
        }
    }

    /// One group launch on `stream`: sends `(to, bytes, tag)` and receives `(from, bytes,
    /// tag of the matching send)`, after `deps`; `fused`: a later step of the same
    /// collective kernel (pays the step latency). Returns the recv ops.
    #[allow(clippy::too_many_arguments)]
    fn group(
        &mut self,
        stream: StreamId,
        sends: &[(u32, u64, u64)],
        recvs: &[(u32, u64, u64)],
        deps: &[OpId],
        t: OpTag,
        fused: bool,
    ) -> Result<Vec<OpId>, PlanError> {
        let l = self.b.launch_fused(stream, fused);
        for &(peer, bytes, tag) in sends {
            let peer = self.rank(peer as u64);
            steps::send(self.b, l, (peer, bytes, tag), deps, t)?;
        }
        let mut out = Vec::with_capacity(recvs.len());
        for &(peer, bytes, tag) in recvs {
            let peer = self.rank(peer as u64);
            out.push(steps::recv(self.b, l, (peer, bytes, tag), false, deps, t)?);
        }
        Ok(out)
    }

    fn streams(&mut self, name: &str) -> Vec<StreamId> {
        (0..self.held)
            .map(|m| {
                let r = self.rank(m as u64);
                self.b.stream(r, name, StreamKind::Comm)
            })
            .collect()
    }

    /// Channel streams: with a wire, NCCL channel streams of it.
    fn channel_streams(&mut self, name: &str, wire: Option<u32>) -> Vec<StreamId> {
        match wire {
            None => self.streams(name),
            Some(w) => (0..self.held)
                .map(|m| {
                    let r = self.rank(m as u64);
                    self.b.channel_stream(r, name, w)
                })
                .collect(),
        }
    }

    /// Tags of one step: one per sending rank (and per destination for direct); in a
    /// symmetric plan one for all (a representative's tag stands for its translates),
    /// held once rather than once per rank, so a step costs the held ranks' time, not
    /// the communicator's.
    fn tags(&mut self, count: usize) -> StepTags {
        if self.held < self.n {
            return StepTags::One(self.b.msg_tag());
        }
        StepTags::Each((0..count).map(|_| self.b.msg_tag()).collect())
    }

    /// Ring steps `first..first + steps` of one chunk around the ring `order` (position
    /// → rank; `pos` its inverse): at step k the rank at position p sends block
    /// `block(p, k)` to the next position's rank (`sizes[block]` bytes) and receives the
    /// previous one's. With `split` (NCCL channels), sends and receives run on streams
    /// of their own — `split.0` the send and receive streams of each buffer slot
    /// ([`NCCL_STEPS`] per rank, step k on slot k mod NCCL_STEPS: per slot, the ranks'
    /// send streams, then their receive streams), `split.1` each rank's last receive —
    /// and a step's send waits only for the receive of the step before (the block it
    /// forwards): a channel has buffer slots, so a receiver is ready for the next steps
    /// before the last one lands and latencies add up along a block's path, as in
    /// NCCL's model.
    /// Without it, one group per step (send and receive together, NCCL-group style).
    #[allow(clippy::too_many_arguments)]
    fn ring(
        &mut self,
        streams: &[StreamId],
        (order, pos): (&[u64], &[u64]),
        sizes: &[u64],
        steps: u64,
        first: u64,
        c: u64,
        block: impl Fn(u64, u64) -> u64,
        mut split: Option<(&[StreamId], &mut [Vec<OpId>])>,
    ) -> Result<(), PlanError> {
        let n = self.n as u64;
        // What the collective starts after: its receives are posted then, not before
        // (a later step's receive follows the one NCCL_STEPS earlier on its slot).
        let start: Vec<Vec<OpId>> = match split.as_ref() {
            Some((_, last)) if last.iter().any(|l| !l.is_empty()) => last.to_vec(),
            _ => Vec::new(),
        };
        for k in 0..steps {
            let tags = self.tags(n as usize);
            for r in 0..self.held as u64 {
                let p = pos[r as usize];
                let (next, prev) = (
                    order[((p + 1) % n) as usize],
                    order[((p + n - 1) % n) as usize],
                );
                let send = sizes[block(p, k) as usize];
                let recv = sizes[block((p + n - 1) % n, k) as usize];
                let t = tag(self.site, first + k, c);
                let fused = first + k > 0;
                match split.as_mut() {
                    None => {
                        self.group(
                            streams[r as usize],
                            &[(next as u32, send, tags[r as usize])],
                            &[(prev as u32, recv, tags[prev as usize])],
                            &[],
                            t,
                            fused,
                        )?;
                    }
                    Some((slots, last)) => {
                        let deps = std::mem::take(&mut last[r as usize]);
                        let slot = ((first + k) % NCCL_STEPS) as usize;
                        let held = self.held as usize;
                        self.group(
                            slots[2 * slot * held + r as usize],
                            &[(next as u32, send, tags[r as usize])],
                            &[],
                            &deps,
                            t,
                            fused,
                        )?;
                        let posted: &[OpId] = match start.get(r as usize) {
                            Some(s) if k < NCCL_STEPS => s,
                            _ => &[],
                        };
                        let got = self.group(
                            slots[(2 * slot + 1) * held + r as usize],
                            &[],
                            &[(prev as u32, recv, tags[prev as usize])],
                            posted,
                            t,
                            fused,
                        )?;
                        last[r as usize] = got;
                    }
                }
            }
        }
        Ok(())
    }

    /// One direct exchange: rank r sends `size(r, j)` bytes to every j ≠ r at once.
    fn direct(
        &mut self,
        streams: &[StreamId],
        step: u64,
        c: u64,
        size: impl Fn(u64, u64) -> u64,
    ) -> Result<(), PlanError> {
        let n = self.n as u64;
        // tags[src][dst]
        let tags: Vec<StepTags> = if self.held < self.n {
            vec![self.tags(n as usize); n as usize]
        } else {
            (0..n).map(|_| self.tags(n as usize)).collect()
        };
        for r in 0..self.held as u64 {
            let others = (1..n).map(|i| (r + i) % n);
            let sends: Vec<_> = others
                .clone()
                .map(|j| (j as u32, size(r, j), tags[r as usize][j as usize]))
                .collect();
            let recvs: Vec<_> = others
                .map(|j| (j as u32, size(j, r), tags[j as usize][r as usize]))
                .collect();
            self.group(
                streams[r as usize],
                &sends,
                &recvs,
                &[],
                tag(self.site, step, c),
                step > 0,
            )?;
        }
        Ok(())
    }

    /// Pairwise steps: at step i (1..N) rank r sends `size(r, r + i)` to r + i and
    /// receives from r − i.
    fn pairwise(
        &mut self,
        streams: &[StreamId],
        first: u64,
        c: u64,
        size: impl Fn(u64, u64) -> u64,
    ) -> Result<(), PlanError> {
        let n = self.n as u64;
        for i in 1..n {
            let tags = self.tags(n as usize);
            for r in 0..self.held as u64 {
                let (to, from) = ((r + i) % n, (r + n - i) % n);
                self.group(
                    streams[r as usize],
                    &[(to as u32, size(r, to), tags[r as usize])],
                    &[(from as u32, size(from, r), tags[from as usize])],
                    &[],
                    tag(self.site, first + i - 1, c),
                    first + i > 1,
                )?;
            }
        }
        Ok(())
    }

    /// A tree all-reduce of `bytes` in `sizes.len()` pipelined chunks over the tree
    /// given by `parent` (rank → its parent, `None` at the root) and `children`: reduce
    /// up (each rank receives from its children, then sends to its parent), broadcast
    /// down (the root once it has reduced a chunk, the others as they receive it). Four
    /// streams per rank named `{name}-up-recv` etc., so chunks pipeline; on NCCL
    /// channels (`channel`: the wire and the chunks a connection keeps in flight) that
    /// many of each (`{name}-up-recv1`, chunk k on k mod their count), so
    /// chunks' per-step latencies run while earlier chunks move, as NCCL's buffer slots
    /// let them.
    fn tree_allreduce(
        &mut self,
        name: &str,
        channel: Option<(u32, u64)>,
        parent: &[Option<u64>],
        children: &[Vec<u64>],
        sizes: &[u64],
        c: u64,
    ) -> Result<(), PlanError> {
        let n = self.n as usize;
        let wire = channel.map(|x| x.0);
        let slots = channel.map_or(1, |x| x.1.clamp(1, NCCL_STEPS));
        let roles = ["up-recv", "up-send", "down-recv", "down-send"];
        // streams[role][slot][member]
        let streams: Vec<Vec<Vec<StreamId>>> = roles
            .iter()
            .map(|role| {
                (0..slots)
                    .map(|s| {
                        let nm = if wire.is_some() {
                            format!("{name}-{role}{s}")
                        } else {
                            format!("{name}-{role}")
                        };
                        self.channel_streams(&nm, wire)
                    })
                    .collect()
            })
            .collect();
        for (k, &sz) in sizes.iter().enumerate() {
            let k = k as u64;
            let slot = (k % slots) as usize;
            let [ur, us, dr, ds] = [0, 1, 2, 3].map(|i| &streams[i][slot]);
            // Tags per rank: of its send up to its parent, of its parent's send down to it.
            let up = self.tags(n);
            let down = self.tags(n);
            let mut reduced = vec![Vec::new(); n];
            for r in 0..n {
                let recvs: Vec<_> = children[r]
                    .iter()
                    .map(|&ch| (ch as u32, sz, up[ch as usize]))
                    .collect();
                let got = if recvs.is_empty() {
                    Vec::new()
                } else {
                    self.group(ur[r], &[], &recvs, &[], tag(self.site, k, c), k > 0)?
                };
                if let Some(p) = parent[r] {
                    // As one NCCL kernel the tree pays its launch once, where it starts:
                    // at the leaves' first sends; later hops pay the per-step latency.
                    let fused = k > 0 || (wire.is_some() && !children[r].is_empty());
                    self.group(
                        us[r],
                        &[(p as u32, sz, up[r])],
                        &[],
                        &got,
                        tag(self.site, k, c),
                        fused,
                    )?;
                }
                reduced[r] = got;
            }
            for r in 0..n {
                let ready = match parent[r] {
                    None => std::mem::take(&mut reduced[r]),
                    Some(p) => self.group(
                        dr[r],
                        &[],
                        &[(p as u32, sz, down[r])],
                        &[],
                        tag(self.site, k, c + 1),
                        k > 0,
                    )?,
                };
                if !children[r].is_empty() {
                    let sends: Vec<_> = children[r]
                        .iter()
                        .map(|&ch| (ch as u32, sz, down[ch as usize]))
                        .collect();
                    let fused = k > 0 || wire.is_some();
                    self.group(ds[r], &sends, &[], &ready, tag(self.site, k, c + 1), fused)?;
                }
            }
        }
        Ok(())
    }

    /// The double binary tree all-reduce of `bytes` over all ranks (no nodes), half on
    /// each tree, each half in `chunks` pipelined chunks: tree 0 puts rank p at heap
    /// position p, tree 1 at position N − 1 − p.
    fn tree(&mut self, bytes: u64, chunks: u64) -> Result<(), PlanError> {
        let n = self.n as u64;
        for (t, half) in split(bytes, 2).into_iter().enumerate() {
            let at = |p: u64| if t == 0 { p } else { n - 1 - p };
            let (parent, children) = heap_tree(n, &at);
            let sizes = split(half, chunks);
            self.tree_allreduce(&format!("t{t}"), None, &parent, &children, &sizes, 0)?;
        }
        Ok(())
    }

    /// NCCL's tree all-reduce on channels: channel c's tree is a chain inside each node
    /// from its head (local GPU `c mod g`, whose NIC it uses), the node heads joined by a
    /// binary tree over nodes (heap order; the second tree of the double binary tree
    /// mirrors it), channels alternating between the two trees.
    fn nccl_tree(&mut self, bytes: u64, chunks: u64, nc: NcclChannels) -> Result<(), PlanError> {
        let n = self.n as u64;
        let g = nc.node_size as u64;
        let g = if g == 0 || g > n || n % g != 0 { n } else { g };
        let nodes = n / g;
        let ch = nc.channels as u64;
        let w = self.b.wire(nc.wire);
        // Chunks in flight per connection: enough that the per-step latency between
        // nodes runs while earlier chunks move (its latency over one chunk's time, plus
        // one), at least 2 and at most NCCL's slots. Not always NCCL_STEPS: NCCL sends a
        // connection's slices one after another, while concurrent flows here share the
        // link fairly, so more chunks in flight than the latency needs stretch every
        // hop of the pipeline (8 nodes of dgx-h100, 1 GiB all-reduce, Simple: 294 GB/s
        // busbw with 8 in flight, 319 with 2; NCCL's model 327).
        let parts = split(bytes, ch);
        let chunk = parts[0].div_ceil(chunks.max(1)) as f64 * nc.wire.factor;
        let t_chunk = chunk / nc.channel_bw;
        let slots = if t_chunk > 0.0 && t_chunk.is_finite() {
            ((nc.wire.inter_step_latency / t_chunk).ceil() + 1.0).clamp(2.0, NCCL_STEPS as f64)
                as u64
        } else {
            2
        };
        for (c, part) in parts.into_iter().enumerate() {
            let c = c as u64;
            let t = if ch >= 2 * g { (c / g) % 2 } else { c % 2 };
            let x = c % g;
            let at = |p: u64| if t == 0 { p } else { nodes - 1 - p };
            let (node_parent, node_children) = heap_tree(nodes, &at);
            let mut parent = vec![None; n as usize];
            let mut children = vec![Vec::new(); n as usize];
            for node in 0..nodes {
                let chain: Vec<u64> = (0..g).map(|i| node * g + (x + i) % g).collect();
                for i in 1..g as usize {
                    parent[chain[i] as usize] = Some(chain[i - 1]);
                    children[chain[i - 1] as usize].push(chain[i]);
                }
                let head = chain[0] as usize;
                parent[head] = node_parent[node as usize].map(|p| p * g + x);
                children[head].extend(node_children[node as usize].iter().map(|&k| k * g + x));
            }
            let sizes = split(part, chunks);
            self.tree_allreduce(
                &format!("ch{c}"),
                Some((w, slots)),
                &parent,
                &children,
                &sizes,
                2 * c,
            )?;
        }
        Ok(())
    }
}

/// An NCCL communicator inside a larger plan (a data-parallel group of a layer or a
/// step): its members' channels, each a rail-aligned ring ([`member_ring_order`]) on
/// [`NCCL_STEPS`] send and receive slot streams per member, built once and reused by
/// every collective of the group, which run one after another as NCCL runs the
/// collectives of one communicator on one CUDA stream.
#[derive(Debug, Clone)]
pub struct Comm {
    /// The plan rank of each member.
    members: Vec<u32>,
    /// Members `0..held` are built (the rest are their translates in a symmetric plan).
    held: usize,
    /// Per distinct channel ring: (position → member, member → position); channels
    /// with the same ring (a group of one GPU per node has one) run merged as one flow
    /// per message weighted by their count.
    orders: Vec<(Vec<u64>, Vec<u64>)>,
    /// Per distinct ring, the channels it stands for, of `channels`.
    merged: Vec<Vec<u64>>,
    channels: u64,
    /// Per channel: the slot streams, laid out as [`Builder::ring`] reads them.
    slots: Vec<Vec<StreamId>>,
    /// Per held member: what the last collective ended with (each channel's last
    /// receive); the next one's first sends wait for them.
    done: Vec<Vec<OpId>>,
}

impl Comm {
    /// The communicator of `members` (plan ranks, in group order; `nodes[m]`: member m's
    /// node), the first `held` built, on `channels` channels moving as `wire` says.
    pub fn new(
        b: &mut PlanBuilder,
        name: &str,
        members: Vec<u32>,
        held: usize,
        nodes: &[u64],
        channels: u32,
        wire: Wire,
    ) -> Comm {
        let mut rings: Vec<Vec<u64>> = Vec::new();
        let mut merged: Vec<Vec<u64>> = Vec::new();
        for c in 0..channels.max(1) as u64 {
            let order = member_ring_order(nodes, c);
            match rings.iter().position(|o| *o == order) {
                Some(i) => merged[i].push(c),
                None => {
                    rings.push(order);
                    merged.push(vec![c]);
                }
            }
        }
        let mut orders = Vec::with_capacity(rings.len());
        let mut slots = Vec::with_capacity(rings.len());
        for (order, chans) in rings.into_iter().zip(&merged) {
            let k = chans.len() as u32;
            let w = b.wire(Wire {
                cap: wire.cap * k as f64,
                weight: wire.weight * k,
                ..wire
            });
            let c = chans[0];
            let mut pos = vec![0u64; order.len()];
            for (p, &m) in order.iter().enumerate() {
                pos[m as usize] = p as u64;
            }
            orders.push((order, pos));
            // One thread block per member runs all of its channel's slots (k blocks
            // for k merged channels).
            let blocks: Vec<u32> = (0..held).map(|_| b.block(k)).collect();
            let mut v = Vec::with_capacity(2 * NCCL_STEPS as usize * held);
            for slot in 0..NCCL_STEPS {
                for dir in ["send", "recv"] {
                    let stream = format!("{name}-ch{c}-{dir}{slot}");
                    for (&r, &blk) in members[..held].iter().zip(&blocks) {
                        let s = b.channel_stream(r, &stream, w);
                        b.in_block(s, blk);
                        v.push(s);
                    }
                }
            }
            slots.push(v);
        }
        Comm {
            members,
            held,
            orders,
            merged,
            channels: channels.max(1) as u64,
            slots,
            done: vec![Vec::new(); held],
        }
    }

    /// Members of the communicator.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// A ring all-gather or reduce-scatter over the channels in which every member
    /// contributes (all-gather) or ends with (reduce-scatter) `piece` bytes — nccl-tests'
    /// size is `piece` × members — cut evenly over the channels. Member m's first sends
    /// wait for `after[m]` and for the group's previous collective. Returns, per held
    /// member, the ops that end it there (each channel's last receive).
    pub fn ring(
        &mut self,
        b: &mut PlanBuilder,
        site: u16,
        op: CollectiveOp,
        piece: u64,
        after: &[Option<OpId>],
    ) -> Result<Vec<Vec<OpId>>, CollectiveError> {
        let n = self.members.len() as u64;
        let reduce = match op {
            CollectiveOp::AllGather => false,
            CollectiveOp::ReduceScatter => true,
            other => {
                return Err(CollectiveError::NoSuchAlgorithm {
                    op: other,
                    algorithm: Algorithm::Ring,
                    known: "all-gather, reduce-scatter".to_string(),
                });
            }
        };
        if n < 2 {
            return Err(CollectiveError::TooFewRanks(n as u32));
        }
        let mut bld = Builder {
            b,
            n: n as u32,
            held: self.held as u32,
            ranks: Some(&self.members),
            site,
        };
        let split_shares = split(piece, self.channels);
        let shares: Vec<u64> = self
            .merged
            .iter()
            .map(|cs| cs.iter().map(|&c| split_shares[c as usize]).sum())
            .collect();
        let mut ends = vec![Vec::new(); self.held];
        for (c, ((order, pos), slots)) in self.orders.iter().zip(&self.slots).enumerate() {
            let mut last: Vec<Vec<OpId>> = (0..self.held)
                .map(|m| {
                    let mut d = self.done[m].clone();
                    d.extend(after.get(m).copied().flatten());
                    d
                })
                .collect();
            let sizes = vec![shares[c]; n as usize];
            let block = |p: u64, k: u64| {
                if reduce {
                    (p + 2 * n - k - 1) % n
                } else {
                    (p + n - k) % n
                }
            };
            bld.ring(
                &[],
                (order, pos),
                &sizes,
                n - 1,
                0,
                c as u64,
                block,
                Some((slots, last.as_mut_slice())),
            )?;
            for (e, l) in ends.iter_mut().zip(last) {
                e.extend(l);
            }
        }
        self.done = ends.clone();
        Ok(ends)
    }
}

/// A binary tree over `n` members where member `at(p)` sits at heap position p: each
/// member's parent and children.
fn heap_tree(n: u64, at: &dyn Fn(u64) -> u64) -> (Vec<Option<u64>>, Vec<Vec<u64>>) {
    let mut parent = vec![None; n as usize];
    let mut children = vec![Vec::new(); n as usize];
    for p in 0..n {
        let m = at(p) as usize;
        if p > 0 {
            parent[m] = Some(at((p - 1) / 2));
        }
        children[m] = [2 * p + 1, 2 * p + 2]
            .into_iter()
            .filter(|&k| k < n)
            .map(at)
            .collect();
    }
    (parent, children)
}

/// The Plan of one collective.
pub fn build(spec: &CollectiveSpec) -> Result<Plan, CollectiveError> {
    build_with(spec, None)
}

/// Whether `spec` is the same on every rank up to a rotation of the ranks, so that a
/// symmetric plan of it is exact: every algorithm but the tree, with every message of a
/// step the same size (each chunk divisible by the rank count).
pub fn is_rotation_invariant(spec: &CollectiveSpec) -> bool {
    let n = spec.ranks as u64;
    let parts = match spec.nccl {
        Some(c) if spec.algorithm == Algorithm::Ring => c.channels as u64,
        _ => spec.chunks as u64,
    };
    spec.algorithm != Algorithm::Tree
        && parts > 0
        && n > 0
        && (spec.op == CollectiveOp::SendRecv
            || split(spec.bytes, parts).iter().all(|&p| p % n == 0))
}

/// The Plan of one collective, symmetric (ranks `0..shift` standing for all, see
/// [`PlanBuilder::symmetric`]) when `shift` is given; that needs
/// [`is_rotation_invariant`] and a shift dividing the ranks.
pub fn build_with(spec: &CollectiveSpec, shift: Option<u32>) -> Result<Plan, CollectiveError> {
    if let Some(s) = shift
        && (!is_rotation_invariant(spec) || s == 0 || spec.ranks % s != 0)
    {
        return Err(CollectiveError::NotSymmetric {
            shift: s,
            ranks: spec.ranks,
        });
    }
    let known = spec.op.algorithms();
    if !known.contains(&spec.algorithm) {
        return Err(CollectiveError::NoSuchAlgorithm {
            op: spec.op,
            algorithm: spec.algorithm,
            known: known
                .iter()
                .map(|a| a.name())
                .collect::<Vec<_>>()
                .join(", "),
        });
    }
    if spec.ranks < 2 {
        return Err(CollectiveError::TooFewRanks(spec.ranks));
    }
    if spec.chunks == 0 {
        return Err(CollectiveError::NoChunks);
    }
    if spec.nccl.is_some_and(|c| c.channels == 0) {
        return Err(CollectiveError::NoChannels);
    }
    let n = spec.ranks as u64;
    // With NCCL channels a ring runs one part per channel; a tree `chunks` per channel.
    let nccl = spec
        .nccl
        .filter(|_| matches!(spec.algorithm, Algorithm::Ring | Algorithm::Tree));
    let k = match (nccl, spec.algorithm) {
        (Some(c), Algorithm::Ring) => c.channels as u64,
        (Some(c), _) => (c.channels as u64).saturating_mul(spec.chunks as u64),
        (None, _) => spec.chunks as u64,
    };
    if let (Some(s), Some(c)) = (shift, nccl)
        && c.node_size < spec.ranks
        && s % c.node_size.max(1) != 0
    {
        return Err(CollectiveError::NotSymmetric {
            shift: s,
            ranks: spec.ranks,
        });
    }
    // Refuse before building what would pass the plan's op limit: the ring, direct and
    // pairwise algorithms post a send and a recv per rank per step, N − 1 steps per chunk
    // (two phases for all-reduce); the tree moves each chunk up and down a tree.
    let phases = if spec.op == CollectiveOp::AllReduce {
        2
    } else {
        1
    };
    let ops = n
        .saturating_mul(n - 1)
        .saturating_mul(2)
        .saturating_mul(k)
        .saturating_mul(phases);
    let ops = if spec.algorithm == Algorithm::Tree || spec.op == CollectiveOp::SendRecv {
        n.saturating_mul(4).saturating_mul(k)
    } else {
        ops
    };
    let held = shift.unwrap_or(spec.ranks);
    let ops = ops / n * held as u64;
    if ops > crate::plan::op_limit() as u64 {
        return Err(PlanError::TooLarge {
            limit: crate::plan::op_limit(),
            need: Some(ops),
            per: crate::plan::BYTES_PER_OP,
        }
        .into());
    }
    let mut pb = match shift {
        Some(s) => PlanBuilder::symmetric(spec.ranks, s),
        None => PlanBuilder::new(spec.ranks),
    };
    let site = pb.site(spec.op.name());
    let mut b = Builder {
        b: &mut pb,
        n: spec.ranks,
        held,
        ranks: None,
        site,
    };
    if spec.algorithm == Algorithm::Tree {
        match nccl {
            Some(c) => b.nccl_tree(spec.bytes, spec.chunks as u64, c)?,
            None => b.tree(spec.bytes, k)?,
        }
        return Ok(pb.finish()?);
    }
    let wire = nccl.map(|c| b.b.wire(c.wire));
    let identity: Vec<u64> = (0..n).collect();
    // Per chunk (or channel): its bytes, cut into N blocks (block j: the share of the
    // ring's position j, or of rank j).
    for (c, part) in split(spec.bytes, k).into_iter().enumerate() {
        let c = c as u64;
        let slotted = wire.is_some() && spec.algorithm == Algorithm::Ring;
        let streams = if slotted {
            Vec::new()
        } else {
            b.channel_streams(&format!("ch{c}"), wire)
        };
        let blocks = split(part, n);
        let bl = |j: u64| blocks[j as usize];
        let order = match nccl {
            Some(nc) => ring_order(n, nc.node_size as u64, c),
            None => identity.clone(),
        };
        let mut pos = vec![0u64; n as usize];
        for (p, &r) in order.iter().enumerate() {
            pos[r as usize] = p as u64;
        }
        let ring = (order.as_slice(), pos.as_slice());
        let recv_streams = match wire {
            Some(w) if slotted => (0..NCCL_STEPS)
                .flat_map(|slot| {
                    let mut v = b.channel_streams(&format!("ch{c}-send{slot}"), Some(w));
                    v.extend(b.channel_streams(&format!("ch{c}-recv{slot}"), Some(w)));
                    v
                })
                .collect(),
            _ => Vec::new(),
        };
        let mut last = vec![Vec::new(); b.held as usize];
        let split_on = !recv_streams.is_empty();
        macro_rules! split {
            () => {
                split_on.then_some((recv_streams.as_slice(), last.as_mut_slice()))
            };
        }
        use Algorithm::*;
        use CollectiveOp::*;
        match (spec.op, spec.algorithm) {
            (AllGather, Ring) => b.ring(
                &streams,
                ring,
                &blocks,
                n - 1,
                0,
                c,
                |p, s| (p + n - s) % n,
                split!(),
            )?,
            (ReduceScatter, Ring) => b.ring(
                &streams,
                ring,
                &blocks,
                n - 1,
                0,
                c,
                |p, s| (p + 2 * n - s - 1) % n,
                split!(),
            )?,
            (AllReduce, Ring) => {
                b.ring(
                    &streams,
                    ring,
                    &blocks,
                    n - 1,
                    0,
                    c,
                    |p, s| (p + 2 * n - s - 1) % n,
                    split!(),
                )?;
                b.ring(
                    &streams,
                    ring,
                    &blocks,
                    n - 1,
                    n - 1,
                    c,
                    |p, s| (p + n - s) % n,
                    split!(),
                )?;
            }
            // All-gather: r's own block to everyone; reduce-scatter: block j to rank j.
            (AllGather, Direct) => b.direct(&streams, 0, c, |src, _| bl(src))?,
            (ReduceScatter, Direct) => b.direct(&streams, 0, c, |_, dst| bl(dst))?,
            (AllReduce, Direct) => {
                b.direct(&streams, 0, c, |_, dst| bl(dst))?;
                b.direct(&streams, 1, c, |src, _| bl(src))?;
            }
            (AllGather, Pairwise) => b.pairwise(&streams, 0, c, |src, _| bl(src))?,
            (ReduceScatter, Pairwise) => b.pairwise(&streams, 0, c, |_, dst| bl(dst))?,
            (AllReduce, Pairwise) => {
                b.pairwise(&streams, 0, c, |_, dst| bl(dst))?;
                b.pairwise(&streams, n - 1, c, |src, _| bl(src))?;
            }
            // All-to-all: rank r's chunk holds N blocks, block j for rank j.
            (AllToAll, Direct) => b.direct(&streams, 0, c, |_, dst| bl(dst))?,
            (AllToAll, Pairwise) => b.pairwise(&streams, 0, c, |_, dst| bl(dst))?,
            (SendRecv, Direct) => {
                let tags = b.tags(n as usize);
                for r in 0..b.held as u64 {
                    let (to, from) = ((r + 1) % n, (r + n - 1) % n);
                    b.group(
                        streams[r as usize],
                        &[(to as u32, part, tags[r as usize])],
                        &[(from as u32, part, tags[from as usize])],
                        &[],
                        tag(b.site, 0, c),
                        false,
                    )?;
                }
            }
            _ => unreachable!("algorithm checked against the op above"),
        }
    }
    Ok(pb.finish()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Op, OpKind};

    fn spec(op: CollectiveOp, algorithm: Algorithm, ranks: u32, bytes: u64) -> CollectiveSpec {
        CollectiveSpec {
            op,
            algorithm,
            ranks,
            bytes,
            chunks: 1,
            nccl: None,
        }
    }

    #[test]
    fn every_algorithm_moves_the_bytes_it_must() {
        let n = 5u64;
        let s = 1_000_003u64;
        for op in CollectiveOp::ALL {
            for &a in op.algorithms() {
                for chunks in [1, 3] {
                    let p = build(&CollectiveSpec {
                        chunks,
                        ..spec(op, a, n as u32, s)
                    })
                    .unwrap();
                    p.check_deadlock_free().unwrap();
                    // Bytes on the wire, summed over ranks (a tree moves each half up
                    // and down N − 1 edges; an all-to-all keeps each rank's own block).
                    let want = match op {
                        CollectiveOp::AllReduce => 2 * (n - 1) * s,
                        CollectiveOp::AllGather
                        | CollectiveOp::ReduceScatter
                        | CollectiveOp::AllToAll => (n - 1) * s,
                        CollectiveOp::SendRecv => n * s,
                    };
                    assert_eq!(p.bytes_sent(), want, "{op} {a} chunks {chunks}");
                }
            }
        }
    }

    #[test]
    fn unknown_pairs_and_tiny_groups_are_errors() {
        let e = build(&spec(CollectiveOp::AllToAll, Algorithm::Ring, 4, 64)).unwrap_err();
        assert!(e.to_string().contains("pairwise, direct"), "{e}");
        let e = build(&spec(CollectiveOp::AllReduce, Algorithm::Ring, 1, 64)).unwrap_err();
        assert_eq!(e, CollectiveError::TooFewRanks(1));
        let e = build(&CollectiveSpec {
            chunks: 0,
            ..spec(CollectiveOp::AllReduce, Algorithm::Ring, 2, 64)
        })
        .unwrap_err();
        assert_eq!(e, CollectiveError::NoChunks);
    }

    /// On members numbered node by node, filling whole nodes, the member ring is the
    /// rail-aligned ring of `ring_order`'s closed form; on members interleaved over
    /// nodes each channel is still a permutation that visits each node's members
    /// together and enters each node on its `c mod g`-th member.
    #[test]
    fn member_rings_are_rail_aligned() {
        let closed = |n: u64, g: u64, c: u64| -> Vec<u64> {
            let (x, rev) = (c % g, (c / g) % 2 == 1);
            (0..n / g)
                .flat_map(|node| {
                    (0..g).map(move |i| node * g + if rev { (x + g - i) % g } else { (x + i) % g })
                })
                .collect()
        };
        for (n, g) in [(8, 8), (16, 8), (12, 4), (6, 1)] {
            for c in 0..2 * g + 1 {
                assert_eq!(ring_order(n, g, c), closed(n, g, c), "n {n} g {g} c {c}");
            }
        }
        let nodes = [5, 2, 5, 2, 5, 2];
        for c in 0..7u64 {
            let r = member_ring_order(&nodes, c);
            let mut sorted = r.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, (0..6).collect::<Vec<_>>());
            // Node 5's members (0, 2, 4) first, then node 2's (1, 3, 5).
            assert!(r[..3].iter().all(|&m| nodes[m as usize] == 5), "{r:?}");
            assert_eq!(r[0], [0, 2, 4][(c % 3) as usize]);
            assert_eq!(r[3], [1, 3, 5][(c % 3) as usize]);
        }
    }

    /// A communicator inside a larger plan: each collective moves `piece` × (n − 1) per
    /// member over its channels together, the plan stays deadlock-free with collectives
    /// back to back, and each collective's first sends wait for the previous one's end.
    #[test]
    fn a_communicator_runs_its_collectives_in_turn() {
        let wire = Wire {
            factor: 1.0,
            cap: f64::INFINITY,
            weight: 1,
            launch_latency: 1e-6,
            intra_step_latency: 1e-6,
            inter_step_latency: 2e-6,
        };
        // Plan ranks 1, 3, 5, 7 of 8 on nodes 0, 0, 1, 1; 3 channels.
        let members = vec![1u32, 3, 5, 7];
        let mut b = PlanBuilder::new(8);
        let site = b.site("dp");
        let mut comm = Comm::new(&mut b, "dp", members.clone(), 4, &[0, 0, 1, 1], 3, wire);
        assert_eq!(comm.len(), 4);
        let piece = 1_000_003u64;
        let after = vec![None; 4];
        let first = comm
            .ring(&mut b, site, CollectiveOp::AllGather, piece, &after)
            .unwrap();
        assert!(
            first.iter().all(|e| e.len() == 2),
            "one end per distinct channel ring"
        );
        let second = comm
            .ring(&mut b, site, CollectiveOp::ReduceScatter, piece, &after)
            .unwrap();
        let e = comm
            .ring(&mut b, site, CollectiveOp::AllReduce, piece, &after)
            .unwrap_err();
        assert!(matches!(e, CollectiveError::NoSuchAlgorithm { .. }), "{e}");
        let plan = b.finish().unwrap();
        plan.check_deadlock_free().unwrap();
        assert_eq!(plan.bytes_sent(), 2 * 4 * 3 * piece);
        // Every op of the second collective comes after some end of the first.
        let ends: std::collections::BTreeSet<OpId> = first.iter().flatten().copied().collect();
        let firsts: Vec<&Op> = plan
            .ops
            .iter()
            .enumerate()
            .filter(|(i, o)| {
                matches!(o.kind, OpKind::Send { .. })
                    && plan.deps(*i as OpId).iter().any(|d| ends.contains(d))
            })
            .map(|(_, o)| o)
            .collect();
        assert!(!firsts.is_empty());
        assert!(second.iter().flatten().all(|&o| !ends.contains(&o)));
        // Every member ends with messages on its own streams, in thread blocks of their
        // channel.
        for o in &plan.ops {
            let st = &plan.streams[o.stream as usize];
            assert!(members.contains(&st.rank));
            assert!(st.wire.is_some() && st.block.is_some());
        }
        // Channel 2's ring (entering each node of 2 at its first member, reversed) is
        // channel 0's: the two run merged, one thread block of 2 SMs per member.
        assert_eq!(plan.blocks.len(), 4 * 2);
        assert_eq!(plan.blocks.iter().sum::<u32>(), 4 * 3);
        assert_eq!(plan.wires.iter().map(|w| w.weight).max(), Some(2));
    }

    #[test]
    fn split_is_exact() {
        assert_eq!(split(10, 4), vec![3, 3, 2, 2]);
        assert_eq!(split(3, 4), vec![1, 1, 1, 0]);
        assert_eq!(split(0, 2), vec![0, 0]);
    }
}
