//! What the engine runs: a [`Program`] — ops, launches, streams and their links — read
//! one op at a time. Two programs exist:
//!
//! - a stored [`Plan`], every op a record in memory (about 100 bytes an op);
//! - an [`Unrolled`] symmetric plan: the quotient plan of ranks `0..shift` stands for
//!   every rank of its world, and rank `r + k·shift`'s ops are computed from rank `r`'s
//!   when the engine asks for them. Nothing is stored per world op, so a full run of a
//!   ring collective over thousands of ranks takes the memory of what is in flight.
//!   Unlike a symmetric *run* (which simulates only the held ranks over link orbits),
//!   every rank of an unrolled program has its own state, links and clock: jitter and
//!   stragglers apply to it as to a stored full plan.
//!
//! World numbering of an unrolled program with `T` template ops, `L` launches, `S`
//! streams and `B` thread blocks: op `k·T + i` is template op `i` moved by `k` shifts
//! (launches, streams and blocks likewise). A send's peer (and a receive's) moves by the
//! same `k` shifts, modulo the world's ranks; the partner of a world send is the
//! template partner in the block of the world peer.

use crate::plan::{LaunchId, NO_PARTNER, OpId, OpKind, Plan, StreamId, StreamKind, Wire};

/// A stream's facts the engine reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StreamView {
    pub rank: u32,
    pub kind: StreamKind,
    pub wire: Option<u32>,
    pub block: Option<u32>,
}

/// The engine's read-only view of what it runs (see the module docs).
pub(crate) trait Program {
    fn ranks(&self) -> u32;
    fn op_count(&self) -> usize;
    fn stream_count(&self) -> usize;
    fn block_count(&self) -> usize;
    /// SMs of thread block `b`.
    fn block_sms(&self, b: u32) -> u32;
    fn wire(&self, w: u32) -> Wire;
    /// The op's kind, with a send's or receive's peer a world rank.
    fn kind(&self, op: OpId) -> OpKind;
    fn rank(&self, op: OpId) -> u32;
    fn op_launch(&self, op: OpId) -> LaunchId;
    /// The matching receive of a send (or send of a receive), `NO_PARTNER` otherwise.
    fn partner(&self, op: OpId) -> OpId;
    fn launch_ops(&self, l: LaunchId) -> impl Iterator<Item = OpId> + '_;
    fn launch_stream(&self, l: LaunchId) -> StreamId;
    fn fused(&self, l: LaunchId) -> bool;
    /// The launches that list `op` among their dependencies (once per edge).
    fn dependents(&self, op: OpId) -> impl Iterator<Item = LaunchId> + '_;
    fn stream(&self, s: StreamId) -> StreamView;
    fn label(&self, op: OpId) -> String;
}

impl Program for Plan {
    fn ranks(&self) -> u32 {
        self.ranks
    }
    fn op_count(&self) -> usize {
        Plan::op_count(self)
    }
    fn stream_count(&self) -> usize {
        self.streams.len()
    }
    fn block_count(&self) -> usize {
        self.blocks.len()
    }
    fn block_sms(&self, b: u32) -> u32 {
        self.blocks[b as usize]
    }
    fn wire(&self, w: u32) -> Wire {
        self.wires[w as usize]
    }
    #[inline]
    fn kind(&self, op: OpId) -> OpKind {
        self.ops[op as usize].kind
    }
    #[inline]
    fn rank(&self, op: OpId) -> u32 {
        self.ops[op as usize].rank
    }
    #[inline]
    fn op_launch(&self, op: OpId) -> LaunchId {
        Plan::op_launch(self, op)
    }
    #[inline]
    fn partner(&self, op: OpId) -> OpId {
        Plan::partner(self, op)
    }
    #[inline]
    fn launch_ops(&self, l: LaunchId) -> impl Iterator<Item = OpId> + '_ {
        Plan::launch_ops(self, l).iter().copied()
    }
    #[inline]
    fn launch_stream(&self, l: LaunchId) -> StreamId {
        Plan::launch_stream(self, l)
    }
    #[inline]
    fn fused(&self, l: LaunchId) -> bool {
        Plan::fused(self, l)
    }
    #[inline]
    fn dependents(&self, op: OpId) -> impl Iterator<Item = LaunchId> + '_ {
        Plan::dependents(self, op).iter().copied()
    }
    #[inline]
    fn stream(&self, s: StreamId) -> StreamView {
        let i = &self.streams[s as usize];
        StreamView {
            rank: i.rank,
            kind: i.kind,
            wire: i.wire,
            block: i.block,
        }
    }
    fn label(&self, op: OpId) -> String {
        Plan::label(self, op)
    }
}

/// Why a symmetric plan cannot be unrolled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnrollError {
    #[error("the plan is not symmetric: there is nothing to unroll (run it as it is)")]
    NotSymmetric,
    #[error(
        "its world of {ranks} ranks holds {ops} ops, more than the engine numbers ({max}); use fewer ranks or chunks"
    )]
    TooLarge { ranks: u32, ops: u64, max: u64 },
}

/// Division by a divisor fixed at construction, by multiplication (Lemire, Kaser and
/// Kurz, "Faster Remainder by Direct Computation", 2019: exact for every 32-bit
/// dividend). The engine splits world ids into (copy, template id) several times an op;
/// a hardware division takes tens of cycles.
#[derive(Debug, Clone, Copy)]
struct FastDiv {
    d: u32,
    /// `⌊(2^64 − 1) / d⌋ + 1`; unused for `d = 1`.
    m: u64,
}

impl FastDiv {
    fn new(d: u32) -> FastDiv {
        assert!(d > 0, "a divisor of zero");
        FastDiv {
            d,
            m: if d == 1 { 0 } else { u64::MAX / d as u64 + 1 },
        }
    }

    /// `(n / d, n % d)`.
    #[inline]
    fn div_rem(self, n: u32) -> (u32, u32) {
        if self.d == 1 {
            return (n, 0);
        }
        let q = ((self.m as u128 * n as u128) >> 64) as u32;
        let low = self.m.wrapping_mul(n as u64);
        let r = ((low as u128 * self.d as u128) >> 64) as u32;
        (q, r)
    }
}

/// A symmetric plan read as the full plan of its world (see the module docs). The
/// per-template tables it keeps are the size of the template.
#[derive(Debug, Clone)]
pub struct Unrolled<'p> {
    template: &'p Plan,
    shift: u32,
    /// Shifts in the world (`ranks / shift`).
    copies: u32,
    ops: u32,
    launches: u32,
    streams: u32,
    blocks: u32,
    /// Per template launch: its position on its stream.
    launch_pos: Vec<u32>,
    /// Per template launch: its dependency edges.
    dep_count: Vec<u32>,
    /// Per template op: its place in its launch's op list.
    op_index: Vec<u32>,
    /// Division by the template's ops, launches, streams and shift.
    by_ops: FastDiv,
    by_launches: FastDiv,
    by_streams: FastDiv,
    by_shift: FastDiv,
}

/// The largest world op, launch or stream id an unrolled program may number (the ids
/// are `u32`, `u32::MAX` a sentinel).
const MAX_WORLD_IDS: u64 = u32::MAX as u64 - 1;

impl<'p> Unrolled<'p> {
    pub fn new(template: &'p Plan) -> Result<Unrolled<'p>, UnrollError> {
        let shift = template.symmetry.ok_or(UnrollError::NotSymmetric)?;
        let copies = template.ranks / shift;
        let ops = template.op_count() as u64 * copies as u64;
        let launches = template.launch_count() as u64 * copies as u64;
        let streams = template.streams.len() as u64 * copies as u64;
        if ops.max(launches).max(streams) > MAX_WORLD_IDS {
            return Err(UnrollError::TooLarge {
                ranks: template.ranks,
                ops,
                max: MAX_WORLD_IDS,
            });
        }
        let mut launch_pos = vec![0; template.launch_count()];
        for s in 0..template.streams.len() as StreamId {
            for (pos, &l) in template.stream_launches(s).iter().enumerate() {
                launch_pos[l as usize] = pos as u32;
            }
        }
        let mut dep_count = vec![0u32; template.launch_count()];
        let mut op_index = vec![0u32; template.op_count()];
        for l in 0..template.launch_count() as LaunchId {
            for (i, &op) in template.launch_ops(l).iter().enumerate() {
                op_index[op as usize] = i as u32;
                dep_count[l as usize] += template.deps(op).len() as u32;
            }
        }
        Ok(Unrolled {
            template,
            shift,
            copies,
            ops: template.op_count() as u32,
            launches: template.launch_count() as u32,
            streams: template.streams.len() as u32,
            blocks: template.blocks.len() as u32,
            launch_pos,
            dep_count,
            op_index,
            by_ops: FastDiv::new(template.op_count().max(1) as u32),
            by_launches: FastDiv::new(template.launch_count().max(1) as u32),
            by_streams: FastDiv::new(template.streams.len().max(1) as u32),
            by_shift: FastDiv::new(shift),
        })
    }

    pub fn template(&self) -> &'p Plan {
        self.template
    }

    /// (copy, template op) of world op `op`.
    #[inline]
    fn split_op(&self, op: OpId) -> (u32, u32) {
        self.by_ops.div_rem(op)
    }

    #[inline]
    fn split_launch(&self, l: LaunchId) -> (u32, u32) {
        self.by_launches.div_rem(l)
    }

    #[inline]
    fn split_stream(&self, s: StreamId) -> (u32, u32) {
        self.by_streams.div_rem(s)
    }

    /// A template rank's world peer `peer` moved by `k` shifts.
    #[inline]
    fn moved(&self, peer: u32, k: u32) -> u32 {
        // peer < n and k·shift < n: one subtraction wraps it.
        let n = self.template.ranks as u64;
        let p = peer as u64 + k as u64 * self.shift as u64;
        (if p >= n { p - n } else { p }) as u32
    }

    /// Position of launch `l` on its stream.
    #[inline]
    pub(crate) fn launch_pos(&self, l: LaunchId) -> u32 {
        self.launch_pos[self.split_launch(l).1 as usize]
    }

    /// Dependency edges of launch `l`.
    #[inline]
    pub(crate) fn dep_count(&self, l: LaunchId) -> u32 {
        self.dep_count[self.split_launch(l).1 as usize]
    }

    /// Ops of launch `l`.
    #[inline]
    pub(crate) fn launch_len(&self, l: LaunchId) -> u32 {
        self.template.launch_ops(self.split_launch(l).1).len() as u32
    }

    /// Place of `op` in its launch's op list.
    #[inline]
    pub(crate) fn op_index(&self, op: OpId) -> u32 {
        self.op_index[self.split_op(op).1 as usize]
    }

    /// Launches of world stream `s`.
    #[inline]
    pub(crate) fn stream_len(&self, s: StreamId) -> u32 {
        self.template.stream_launches(self.split_stream(s).1).len() as u32
    }

    /// The launch at position `pos` of world stream `s`.
    #[inline]
    pub(crate) fn stream_launch(&self, s: StreamId, pos: u32) -> LaunchId {
        let (k, t) = self.split_stream(s);
        self.template.stream_launches(t)[pos as usize] + k * self.launches
    }

    /// The template's cost-model view of world op `op`: its template op.
    #[inline]
    pub(crate) fn template_op(&self, op: OpId) -> OpId {
        self.split_op(op).1
    }
}

impl Program for Unrolled<'_> {
    fn ranks(&self) -> u32 {
        self.template.ranks
    }
    fn op_count(&self) -> usize {
        self.ops as usize * self.copies as usize
    }
    fn stream_count(&self) -> usize {
        self.streams as usize * self.copies as usize
    }
    fn block_count(&self) -> usize {
        self.blocks as usize * self.copies as usize
    }
    fn block_sms(&self, b: u32) -> u32 {
        self.template.blocks[(b % self.blocks) as usize]
    }
    fn wire(&self, w: u32) -> Wire {
        self.template.wires[w as usize]
    }
    #[inline]
    fn kind(&self, op: OpId) -> OpKind {
        let (k, i) = self.split_op(op);
        let mut kind = self.template.ops[i as usize].kind;
        match &mut kind {
            OpKind::Send { peer, .. } | OpKind::Recv { peer, .. } => *peer = self.moved(*peer, k),
            _ => {}
        }
        kind
    }
    #[inline]
    fn rank(&self, op: OpId) -> u32 {
        let (k, i) = self.split_op(op);
        self.template.ops[i as usize].rank + k * self.shift
    }
    #[inline]
    fn op_launch(&self, op: OpId) -> LaunchId {
        let (k, i) = self.split_op(op);
        self.template.op_launch(i) + k * self.launches
    }
    #[inline]
    fn partner(&self, op: OpId) -> OpId {
        let (k, i) = self.split_op(op);
        let j = self.template.partner(i);
        if j == NO_PARTNER {
            return NO_PARTNER;
        }
        let peer = match self.template.ops[i as usize].kind {
            OpKind::Send { peer, .. } | OpKind::Recv { peer, .. } => peer,
            _ => return NO_PARTNER,
        };
        self.by_shift.div_rem(self.moved(peer, k)).0 * self.ops + j
    }
    #[inline]
    fn launch_ops(&self, l: LaunchId) -> impl Iterator<Item = OpId> + '_ {
        let (k, t) = self.split_launch(l);
        let base = k * self.ops;
        self.template.launch_ops(t).iter().map(move |&o| o + base)
    }
    #[inline]
    fn launch_stream(&self, l: LaunchId) -> StreamId {
        let (k, t) = self.split_launch(l);
        self.template.launch_stream(t) + k * self.streams
    }
    #[inline]
    fn fused(&self, l: LaunchId) -> bool {
        self.template.fused(self.split_launch(l).1)
    }
    #[inline]
    fn dependents(&self, op: OpId) -> impl Iterator<Item = LaunchId> + '_ {
        let (k, i) = self.split_op(op);
        let base = k * self.launches;
        self.template.dependents(i).iter().map(move |&d| d + base)
    }
    #[inline]
    fn stream(&self, s: StreamId) -> StreamView {
        let (k, t) = self.split_stream(s);
        let i = &self.template.streams[t as usize];
        StreamView {
            rank: i.rank + k * self.shift,
            kind: i.kind,
            wire: i.wire,
            block: i.block.map(|b| b + k * self.blocks),
        }
    }
    fn label(&self, op: OpId) -> String {
        let (k, i) = self.split_op(op);
        let mut l = self.template.op_label(i);
        if l.peer != crate::plan::NO_PEER {
            l.peer = self.moved(l.peer, k);
        }
        l.render(&self.template.sites)
    }
}

#[cfg(test)]
mod tests {
    use super::FastDiv;

    /// Exact against hardware division at the edges of the range and across divisors.
    #[test]
    fn fast_division_is_exact() {
        let mut ds: Vec<u32> = (1..=300).collect();
        ds.extend([
            1023,
            1024,
            1025,
            65535,
            65536,
            8_190_000,
            u32::MAX - 1,
            u32::MAX,
        ]);
        let mut x = 0x9e37_79b9u32;
        for &d in &ds {
            let f = FastDiv::new(d);
            let mut ns = vec![0, 1, d - 1, d, d.wrapping_add(1), u32::MAX, u32::MAX - 1];
            for _ in 0..2000 {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                ns.push(x);
            }
            for n in ns {
                assert_eq!(f.div_rem(n), (n / d, n % d), "{n} / {d}");
            }
        }
    }
}
