//! The collective steps every schedule is built of, shared by the sites' schedules
//! (`schedule/`) and the stand-alone collectives (`collective.rs`): the send and
//! receive ops of a group launch, message and op tags, the per-member streams of a
//! group (`RankStreams`), and the ring, exchange and bidirectional steps of a group with
//! the data each moves; a ring all-gather or reduce-scatter of a site runs on the
//! group's NCCL communicator where it has one (`collective::Comm`).

use super::StrategyError;
use crate::plan::{
    EltKind, LaunchId, OpId, OpIo, OpKind, OpTag, PlanBuilder, PlanError, Region, StreamId,
    StreamKind,
};
use crate::scenario::Strategy;

/// A message of a step: (the peer's plan rank, bytes, message tag).
pub type Msg = (u32, u64, u64);

/// A send of `msg` in launch `l`, after `deps`.
pub fn send(
    b: &mut PlanBuilder,
    l: LaunchId,
    (peer, bytes, tag): Msg,
    deps: &[OpId],
    t: OpTag,
) -> Result<OpId, PlanError> {
    b.add(l, OpKind::Send { peer, bytes, tag }, deps, t)
}

/// A receive of `msg` (its tag the matching send's) in launch `l`, after `deps`;
/// `accumulate`: added into the destination (a reduction) instead of written.
pub fn recv(
    b: &mut PlanBuilder,
    l: LaunchId,
    (peer, bytes, tag): Msg,
    accumulate: bool,
    deps: &[OpId],
    t: OpTag,
) -> Result<OpId, PlanError> {
    let kind = OpKind::Recv {
        peer,
        bytes,
        tag,
        accumulate,
    };
    b.add(l, kind, deps, t)
}

/// `total` split into `parts` near-equal parts (the first `total mod parts` one larger).
pub fn split(total: u64, parts: u64) -> Vec<u64> {
    let (q, r) = (total / parts, total % parts);
    (0..parts).map(|i| q + u64::from(i < r)).collect()
}

/// The streams of every rank: one compute stream and one communication stream.
#[derive(Debug, Clone)]
pub struct RankStreams {
    pub compute: Vec<StreamId>,
    pub comm: Vec<StreamId>,
    /// The plan rank of each member of the group (member `i` talks to member `i + 1`
    /// as plan rank `ranks[i + 1]`).
    pub ranks: Vec<u32>,
    /// Members `0..held` are built; the rest are their translates in a symmetric plan
    /// (see `PlanBuilder::symmetric`). Only ring collectives and the Flash-RS / permute
    /// loop of `gemm_rs` build for a partly held group; the other sites refuse it.
    pub held: usize,
    /// Weights gathered while the site runs (a parameter Flash-AG fused with its GEMMs):
    /// every GEMM is cut into column chunks, chunk c after `ready[member][c]`.
    pub weights: Option<WeightChunks>,
    /// The group's NCCL communicator, where its ring collectives run as NCCL runs them
    /// (a tensor-parallel group spanning nodes, in a simulator-only plan): each ring
    /// all-gather or reduce-scatter runs on its channels and ends, on each member, in a
    /// join on the member's comm stream. Shared by the group's clones, so the
    /// communicator's collectives stay in order.
    pub nccl: Option<std::rc::Rc<std::cell::RefCell<super::collective::Comm>>>,
}

/// Per member, per weight column chunk in the order the GEMMs use them: the op after
/// which the chunk is present (`None`: the member's own chunk, present from the start).
#[derive(Debug, Clone, PartialEq)]
pub struct WeightChunks {
    pub ready: Vec<Vec<Option<OpId>>>,
}

impl RankStreams {
    /// A compute and a comm stream on every rank of the plan, one group of all of them.
    pub fn declare(b: &mut PlanBuilder) -> RankStreams {
        let n = b.ranks();
        let mut compute = Vec::with_capacity(n as usize);
        let mut comm = Vec::with_capacity(n as usize);
        for r in 0..n {
            compute.push(b.stream(r, "compute", StreamKind::Compute));
            comm.push(b.stream(r, "comm", StreamKind::Comm));
        }
        RankStreams {
            compute,
            comm,
            held: n as usize,
            ranks: (0..n).collect(),
            weights: None,
            nccl: None,
        }
    }

    /// Message tags of one step, per member: unique, or in a partly held group one for
    /// all (a held member's tag stands for its translates').
    pub(super) fn step_tags(&self, b: &mut PlanBuilder) -> Vec<u64> {
        if self.held < self.len() {
            return vec![b.msg_tag(); self.len()];
        }
        (0..self.len()).map(|_| b.msg_tag()).collect()
    }

    pub(super) fn whole(&self, site: &str, strategy: Strategy) -> Result<(), StrategyError> {
        if self.held < self.len() {
            return Err(StrategyError::PartlyHeld {
                site: site.to_string(),
                strategy: strategy.to_string(),
            });
        }
        Ok(())
    }

    /// Members in group order.
    pub fn len(&self) -> usize {
        self.ranks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ranks.is_empty()
    }
}

pub(super) fn tag(site: u16, step: u64, slice: u64) -> OpTag {
    OpTag {
        site,
        step: step as u32,
        slice: slice as u32,
    }
}

pub(super) fn deps(d: Option<OpId>) -> Vec<OpId> {
    d.into_iter().collect()
}

/// A send of `piece` bytes from member `r` to member `to` (after `send_deps`) and the
/// recv of member `from`'s send to `r`, added to launch `l`. `tags[x]` is member x's send
/// tag for this step.
struct Pair<'a> {
    to: u64,
    from: u64,
    piece: u64,
    tags: &'a [u64],
    send_deps: &'a [OpId],
    send_tag: OpTag,
    recv_tag: OpTag,
    accumulate: bool,
    io: (Region, Region),
}

/// Add `p` to launch `l` of member `r`; returns (send, recv).
fn add_pair(
    b: &mut PlanBuilder,
    st: &RankStreams,
    l: LaunchId,
    r: u64,
    p: Pair,
) -> Result<(OpId, OpId), StrategyError> {
    let to = st.ranks[p.to as usize];
    let s = send(
        b,
        l,
        (to, p.piece, p.tags[r as usize]),
        p.send_deps,
        p.send_tag,
    )?;
    b.set_io(s, OpIo::Send { src: p.io.0 });
    let from = st.ranks[p.from as usize];
    let msg = (from, p.piece, p.tags[p.from as usize]);
    let id = recv(b, l, msg, p.accumulate, &[], p.recv_tag)?;
    b.set_io(id, OpIo::Recv { dst: p.io.1 });
    Ok((s, id))
}

/// One ring step of rank `r`: a group launch on its comm stream of a send of `piece` bytes
/// to r+1 (after `send_deps`) and a recv of as many from r−1. `tags[x]` is rank x's send
/// tag for this step; `fused`: a later step of the same collective kernel. Returns the
/// recv op.
#[allow(clippy::too_many_arguments)]
pub(super) fn ring_step(
    b: &mut PlanBuilder,
    st: &RankStreams,
    r: u64,
    piece: u64,
    tags: &[u64],
    send_deps: &[OpId],
    send_tag: OpTag,
    recv_tag: OpTag,
    accumulate: bool,
    io: (Region, Region),
    fused: bool,
) -> Result<OpId, StrategyError> {
    let n = tags.len() as u64;
    let l = b.launch_fused(st.comm[r as usize], fused);
    let pair = Pair {
        to: (r + 1) % n,
        from: (r + n - 1) % n,
        piece,
        tags,
        send_deps,
        send_tag,
        recv_tag,
        accumulate,
        io,
    };
    Ok(add_pair(b, st, l, r, pair)?.1)
}

/// Step `i` of a direct exchange for rank `r`: one group launch on its comm stream of a
/// send of `piece` bytes to r+1+i (after `send_deps`) and a recv of as many from
/// r−1−i. `tags[x]` is rank x's send tag for this step. Returns (send, recv).
#[allow(clippy::too_many_arguments)]
pub(super) fn exchange_step(
    b: &mut PlanBuilder,
    st: &RankStreams,
    r: u64,
    i: u64,
    piece: u64,
    tags: &[u64],
    send_deps: &[OpId],
    send_tag: OpTag,
    recv_tag: OpTag,
    io: (Region, Region),
) -> Result<(OpId, OpId), StrategyError> {
    let n = tags.len() as u64;
    let l = b.launch(st.comm[r as usize]);
    let pair = Pair {
        to: (r + 1 + i) % n,
        from: (r + 2 * n - 1 - i) % n,
        piece,
        tags,
        send_deps,
        send_tag,
        recv_tag,
        accumulate: false,
        io,
    };
    add_pair(b, st, l, r, pair)
}

/// One launch of a bidirectional permute on rank `r`'s comm stream: for each direction
/// that moves this iteration, a send of `piece` bytes (clockwise to r+1, counter-clockwise
/// to r−1) and the recv of the neighbour's send the other way. `cw` / `ccw`: (sent region,
/// received region, this step's tags per member), or `None`. `first`: what the sends wait
/// for. Returns the (clockwise, counter-clockwise) recvs.
#[allow(clippy::type_complexity, clippy::too_many_arguments)]
pub(super) fn bidir_step(
    b: &mut PlanBuilder,
    st: &RankStreams,
    r: u64,
    piece: u64,
    first: &[OpId],
    t: OpTag,
    cw: Option<(Region, Region, &[u64])>,
    ccw: Option<(Region, Region, &[u64])>,
) -> Result<(Option<OpId>, Option<OpId>), StrategyError> {
    let n = st.len() as u64;
    let (next, prev) = ((r + 1) % n, (r + n - 1) % n);
    let l = b.launch(st.comm[r as usize]);
    let mut got = [None, None];
    for (dir, spec) in [cw, ccw].into_iter().enumerate() {
        let Some((src, dst, tags)) = spec else {
            continue;
        };
        let (to, from) = if dir == 0 { (next, prev) } else { (prev, next) };
        let pair = Pair {
            to,
            from,
            piece,
            tags,
            send_deps: first,
            send_tag: t,
            recv_tag: t,
            accumulate: false,
            io: (src, dst),
        };
        got[dir] = Some(add_pair(b, st, l, r, pair)?.1);
    }
    Ok((got[0], got[1]))
}

/// A ring all-gather (`accumulate = false`) or reduce-scatter (`true`) of `piece` bytes
/// per rank per step over all ranks, on the comm streams: N−1 steps, each one NCCL-style
/// group of a send to r+1 and a recv from r−1. Step k of rank r forwards block
/// `(r − k) mod N` (AG) or `(r − k − 1) mod N` (RS). `first[r]` is what rank r's first
/// send waits for. Returns each rank's last recv (the collective is done on that rank
/// when it completes), or `None` for a single rank. `region(r, j)` is where block j lives
/// on rank r (sent from there, received or accumulated into there).
pub(super) fn ring(
    b: &mut PlanBuilder,
    st: &RankStreams,
    site: u16,
    piece: u64,
    accumulate: bool,
    first: &[Option<OpId>],
    region: &dyn Fn(u64, u64) -> Region,
) -> Result<Vec<Option<OpId>>, StrategyError> {
    let n = st.len() as u64;
    let mut last = vec![None; n as usize];
    if n <= 1 {
        return Ok(last);
    }
    if let Some(comm) = &st.nccl {
        use super::collective::CollectiveOp;
        let op = if accumulate {
            CollectiveOp::ReduceScatter
        } else {
            CollectiveOp::AllGather
        };
        let ends = comm
            .borrow_mut()
            .ring(b, site, op, piece, &first[..st.held.min(first.len())])
            .map_err(super::collective::CollectiveError::into_strategy)?;
        let join = OpKind::Elementwise {
            bytes: 0,
            kind: EltKind::Join,
        };
        for (m, e) in ends.iter().enumerate() {
            last[m] = Some(b.single(st.comm[m], join, e, tag(site, n, 0))?);
        }
        return Ok(last);
    }
    let off = u64::from(accumulate);
    for k in 0..n - 1 {
        let tags = st.step_tags(b);
        for r in 0..st.held as u64 {
            let d = if k == 0 {
                deps(first[r as usize])
            } else {
                vec![]
            };
            let prev = (r + n - 1) % n;
            let (block, rblock) = ((r + n * 2 - k - off) % n, (prev + n * 2 - k - off) % n);
            last[r as usize] = Some(ring_step(
                b,
                st,
                r,
                piece,
                &tags,
                &d,
                tag(site, k, block),
                tag(site, k, rblock),
                accumulate,
                (region(r, block), region(r, rblock)),
                k > 0,
            )?);
        }
    }
    Ok(last)
}

/// A ring all-gather of `piece` bytes per rank on the comm streams, each rank's first send
/// after `after[r]` (a bulk collective beside other work; simulator-only plans: it
/// declares no data flow). Returns each rank's last op of it.
pub fn bulk_all_gather(
    b: &mut PlanBuilder,
    st: &RankStreams,
    site: u16,
    piece: u64,
    after: &[Option<OpId>],
) -> Result<Vec<Option<OpId>>, StrategyError> {
    let done = ring(b, st, site, piece, false, after, &|_, _| {
        Region::rows(0, 0, 0)
    })?;
    Ok(done.iter().zip(after).map(|(d, a)| d.or(*a)).collect())
}

/// A ring all-gather of `piece` bytes per member over `st` (simulator-only: no data
/// flow), each member's first send after `after[r]`. Returns, per held member, its recv
/// of each step in order: the pieces of members r−1, r−2, … as they arrive.
pub fn all_gather_steps(
    b: &mut PlanBuilder,
    st: &RankStreams,
    site: u16,
    piece: u64,
    after: &[Option<OpId>],
) -> Result<Vec<Vec<OpId>>, StrategyError> {
    let n = st.len() as u64;
    let mut out = vec![Vec::new(); st.held];
    let none = Region::rows(0, 0, 0);
    for k in 0..n.saturating_sub(1) {
        let tags = st.step_tags(b);
        for (r, got) in out.iter_mut().enumerate() {
            let d = if k == 0 { deps(after[r]) } else { vec![] };
            let t = tag(site, k, 0);
            got.push(ring_step(
                b,
                st,
                r as u64,
                piece,
                &tags,
                &d,
                t,
                t,
                false,
                (none, none),
                k > 0,
            )?);
        }
    }
    Ok(out)
}
