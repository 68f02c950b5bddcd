//! The two kinds of site and the collectives inside them.

use super::{MlpShape, StrategyError, blocks};
use crate::plan::{
    BufId, BufInit, EltKind, OpId, OpIo, OpKind, OpTag, PlanBuilder, Region, StreamId, StreamKind,
};
use crate::scenario::Strategy;

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
    fn step_tags(&self, b: &mut PlanBuilder) -> Vec<u64> {
        if self.held < self.len() {
            return vec![b.msg_tag(); self.len()];
        }
        (0..self.len()).map(|_| b.msg_tag()).collect()
    }

    fn whole(&self, site: &str, strategy: Strategy) -> Result<(), StrategyError> {
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

/// Per rank, per token block: the op after which that block's data is ready on that rank
/// (`None`: ready from the start), where the block's rows are (`rows[j]`, the same on
/// every rank) and in which buffer of each rank (`bufs[r]`).
#[derive(Debug, Clone, PartialEq)]
pub struct Blocks {
    pub ready: Vec<Vec<Option<OpId>>>,
    pub rows: Vec<Region>,
    pub bufs: Vec<BufId>,
}

impl Blocks {
    /// Blocks of `bufs` that are ready from the start.
    pub fn inputs_ready(strategy: Strategy, ranks: u32, tokens: u64, bufs: Vec<BufId>) -> Blocks {
        let nb = blocks(strategy, ranks);
        Blocks {
            ready: vec![vec![None; nb as usize]; ranks as usize],
            rows: (0..nb)
                .map(|j| block_region(strategy, ranks, tokens, j))
                .collect(),
            bufs,
        }
    }

    /// Block `j`'s rows in rank `r`'s buffer.
    pub fn region(&self, r: usize, j: usize) -> Region {
        self.rows[j].on(self.bufs[r])
    }
}

/// Where a site's token-sized buffers keep piece `i` of rank `b`'s shard (its rows
/// `i·p .. (i+1)·p`, p = shard/K, K the strategy's chunks; K = 1 but for `chunked:K`):
/// the first buffer row of the piece. Token order (`b·shard + i·p`) for every strategy
/// but `chunked:K`, whose buffers are chunk-major (`i·N·p + b·p`): chunk i is then one
/// contiguous block of N·p rows that one GEMM multiplies, as a chunked implementation
/// gathers each chunk into a buffer of its own. (In token order chunk i would be N runs
/// of p rows, a batched GEMM of N p-row products, which pays the tile quantization of
/// p rows instead of N·p: on an H200 the four chunks of a tp-8 chunked:4 all-gather
/// with p = 288 took 459 µs batched against 370 µs predicted for contiguous GEMMs,
/// results/h200-2026-12-04.)
pub fn piece_row(strategy: Strategy, ranks: u32, tokens: u64, b: u64, i: u64) -> u64 {
    let n = ranks as u64;
    let shard = tokens / n;
    match strategy {
        Strategy::Chunked(k) if k > 1 => {
            let p = shard / k as u64;
            i * n * p + b * p
        }
        _ => b * shard + i * (shard / chunks(strategy)),
    }
}

/// Pieces a shard is cut into: K for `chunked:K`, 1 otherwise.
fn chunks(strategy: Strategy) -> u64 {
    match strategy {
        Strategy::Chunked(k) => (k as u64).max(1),
        _ => 1,
    }
}

/// Rank `b`'s shard rows in a site's token-sized buffer `buf` (see [`piece_row`]).
pub fn shard_region(strategy: Strategy, ranks: u32, tokens: u64, buf: BufId, b: u64) -> Region {
    let k = chunks(strategy);
    let n = ranks as u64;
    let shard = tokens / n;
    let first = piece_row(strategy, ranks, tokens, b, 0);
    let stride = if k > 1 {
        piece_row(strategy, ranks, tokens, b, 1) - first
    } else {
        shard
    };
    Region::strided(buf, first, shard, k as u32, stride)
}

/// The rows of token block `j` (rank b's shard = token rows `b·M/N ..`): for `flash`
/// and the other per-rank schedules, block j is rank j's shard; for `sequential` /
/// `chunked:K`, chunk j is piece j of every rank's shard, contiguous in the chunk-major
/// layout of [`piece_row`].
pub fn block_region(strategy: Strategy, ranks: u32, tokens: u64, j: u64) -> Region {
    let n = ranks as u64;
    let shard = tokens / n;
    match strategy {
        Strategy::Flash
        | Strategy::Direct
        | Strategy::PermuteLoop
        | Strategy::PermuteLoopBidir
        | Strategy::QuerySplit
        | Strategy::FlashA2a => Region::rows(0, j * shard, shard),
        Strategy::Sequential | Strategy::Bulk | Strategy::Chunked(_) => {
            let p = shard / blocks(strategy, ranks);
            Region::rows(0, piece_row(strategy, ranks, tokens, 0, j), p * n)
        }
    }
}

/// One buffer per rank.
pub fn per_rank(
    b: &mut PlanBuilder,
    st: &RankStreams,
    name: &str,
    rows: u64,
    cols: u64,
    dtype: crate::scenario::DType,
    init: impl Fn(u64) -> BufInit,
) -> Vec<BufId> {
    (0..st.len())
        .map(|i| b.buffer(st.ranks[i], name, rows, cols, dtype, init(i as u64)))
        .collect()
}

fn tag(site: u16, step: u64, slice: u64) -> OpTag {
    OpTag {
        site,
        step: step as u32,
        slice: slice as u32,
    }
}

fn deps(d: Option<OpId>) -> Vec<OpId> {
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
    l: crate::plan::LaunchId,
    r: u64,
    p: Pair,
) -> Result<(OpId, OpId), StrategyError> {
    let send = OpKind::Send {
        peer: st.ranks[p.to as usize],
        bytes: p.piece,
        tag: p.tags[r as usize],
    };
    let s = b.add(l, send, p.send_deps, p.send_tag)?;
    b.set_io(s, OpIo::Send { src: p.io.0 });
    let recv = OpKind::Recv {
        peer: st.ranks[p.from as usize],
        bytes: p.piece,
        tag: p.tags[p.from as usize],
        accumulate: p.accumulate,
    };
    let id = b.add(l, recv, &[], p.recv_tag)?;
    b.set_io(id, OpIo::Recv { dst: p.io.1 });
    Ok((s, id))
}

/// One ring step of rank `r`: a group launch on its comm stream of a send of `piece` bytes
/// to r+1 (after `send_deps`) and a recv of as many from r−1. `tags[x]` is rank x's send
/// tag for this step; `fused`: a later step of the same collective kernel. Returns the
/// recv op.
#[allow(clippy::too_many_arguments)]
fn ring_step(
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
fn exchange_step(
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
fn bidir_step(
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
fn ring(
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

/// All-gather of the sequence-sharded input (M/N × hidden per rank), then the
/// column-parallel GEMM of the gathered rows with this rank's weight shard
/// (hidden × width/N). Declares, per rank, `x` (the gathered input, own shard filled),
/// `w_<site>` and `y_<site>`; returns, per rank, the GEMM op of each token block of `y`.
/// `after[r]`: the op that produces rank r's shard of the input (`None`: an input).
pub fn ag_gemm(
    b: &mut PlanBuilder,
    st: &RankStreams,
    strategy: Strategy,
    site_name: &str,
    s: &MlpShape,
    width: u64,
    after: &[Option<OpId>],
) -> Result<Blocks, StrategyError> {
    st.whole(site_name, strategy)?;
    let site = b.site(site_name);
    let n = s.ranks as u64;
    let nb = blocks(strategy, s.ranks);
    let rows = s.tokens / nb;
    let shard = s.tokens / n;
    let x = per_rank(b, st, "x", s.tokens, s.hidden, s.dtype, |r| {
        BufInit::global_at(r * shard, shard_region(strategy, s.ranks, s.tokens, 0, r))
    });
    let w = per_rank(
        b,
        st,
        &format!("w_{site_name}"),
        s.hidden,
        width / n,
        s.dtype,
        |_| BufInit::Local,
    );
    let y = per_rank(
        b,
        st,
        &format!("y_{site_name}"),
        s.tokens,
        width / n,
        s.dtype,
        |_| BufInit::Poison,
    );
    let xin = Blocks::inputs_ready(strategy, s.ranks, s.tokens, x.clone());
    let gemm_op = |b: &mut PlanBuilder,
                   r: usize,
                   j: usize,
                   d: &[OpId],
                   t: OpTag|
     -> Result<OpId, StrategyError> {
        let id = site_gemm(b, st, r, (rows, width / n, s.hidden), s, d, t)?;
        b.set_io(
            id,
            OpIo::Gemm {
                a: xin.region(r, j),
                b: w[r],
                c: xin.rows[j].on(y[r]),
            },
        );
        Ok(id)
    };
    let mut out = Blocks::inputs_ready(strategy, s.ranks, s.tokens, y.clone());
    match strategy {
        Strategy::Sequential | Strategy::Bulk | Strategy::Chunked(_) => {
            // Comm-first: gather chunk i, then multiply it while chunk i+1 is gathered.
            let p = rows / n;
            let piece = p * s.hidden * s.dtype.bytes();
            for i in 0..nb {
                let at = |r: u64, blk: u64| {
                    let row = piece_row(strategy, s.ranks, s.tokens, blk, i);
                    Region::rows(x[r as usize], row, p)
                };
                let gathered = ring(b, st, site, piece, false, after, &at)?;
                for (r, &g) in gathered.iter().enumerate().take(n as usize) {
                    out.ready[r][i as usize] = Some(gemm_op(
                        b,
                        r,
                        i as usize,
                        &deps(g.or(after[r])),
                        tag(site, i, i),
                    )?);
                }
            }
        }
        Strategy::PermuteLoop => {
            // Permute loop AG, iteration k: compute slice (r − k) mod N while permuting it
            // to r+1 (receiving the next from r−1); iteration k+1 starts when both are
            // done (the loop's barrier). Closed form: (N−1)·max(c, p) + c.
            let piece = rows * s.hidden * s.dtype.bytes();
            let mut prev_gemm: Vec<Option<OpId>> = after.to_vec();
            let mut prev_recv: Vec<Option<OpId>> = vec![None; n as usize];
            for k in 0..n {
                let tags: Vec<u64> = (0..n).map(|_| b.msg_tag()).collect();
                let mut gemms = vec![None; n as usize];
                for r in 0..n {
                    let ru = r as usize;
                    let j = (r + n - k % n) % n;
                    let d = deps(prev_recv[ru].or(after[ru]));
                    let g = gemm_op(b, ru, j as usize, &d, tag(site, k, j))?;
                    out.ready[ru][j as usize] = Some(g);
                    gemms[ru] = Some(g);
                }
                if k + 1 < n {
                    for r in 0..n {
                        let ru = r as usize;
                        let sj = (r + n - k % n) % n;
                        let rj = (r + 2 * n - k - 1) % n;
                        let xr = x[ru];
                        // The barrier: this permute waits for the previous iteration's
                        // compute (the data it forwards arrived in that iteration).
                        let first = deps(prev_gemm[ru].or(after[ru]));
                        prev_recv[ru] = Some(ring_step(
                            b,
                            st,
                            r,
                            piece,
                            &tags,
                            &first,
                            tag(site, k, sj),
                            tag(site, k, rj),
                            false,
                            (
                                Region::rows(xr, sj * shard, shard),
                                Region::rows(xr, rj * shard, shard),
                            ),
                            false,
                        )?);
                    }
                }
                prev_gemm = gemms;
            }
        }
        Strategy::PermuteLoopBidir => {
            st.whole(site_name, strategy)?;
            // Bidirectional permute loop AG: iteration k computes slice r − k (arrived
            // clockwise) and, for k ≥ 1, slice r + k (counter-clockwise) while forwarding
            // both one hop further; K_cw = ⌈(N−1)/2⌉ clockwise hops, K_ccw = ⌊(N−1)/2⌋.
            // Each permute waits for the previous iteration's compute (the barrier).
            // Closed form without contention (each direction its own links): N odd,
            // K = (N−1)/2: max(c, p) + (K−1)·max(2c, p) + 2c; N even: max(c, p) +
            // (N/2 − 1)·max(2c, p) + c.
            let piece = rows * s.hidden * s.dtype.bytes();
            let (kcw, kccw) = ((n - 1).div_ceil(2), (n - 1) / 2);
            let mut recv_cw: Vec<Option<OpId>> = vec![None; n as usize];
            let mut recv_ccw: Vec<Option<OpId>> = vec![None; n as usize];
            let mut prev: Vec<Vec<OpId>> = vec![Vec::new(); n as usize];
            for k in 0..=kcw {
                let mut gemms: Vec<Vec<OpId>> = vec![Vec::new(); n as usize];
                for r in 0..n {
                    let ru = r as usize;
                    let mut slices = vec![((r + n - k % n) % n, recv_cw[ru])];
                    if k >= 1 && k <= kccw {
                        slices.push(((r + k) % n, recv_ccw[ru]));
                    }
                    for (j, got) in slices {
                        let d = deps(got.or(after[ru]));
                        let g = gemm_op(b, ru, j as usize, &d, tag(site, k, j))?;
                        out.ready[ru][j as usize] = Some(g);
                        gemms[ru].push(g);
                    }
                }
                let (cw, ccw) = (k < kcw, k < kccw);
                if cw || ccw {
                    let tags_cw = st.step_tags(b);
                    let tags_ccw = st.step_tags(b);
                    for r in 0..n {
                        let ru = r as usize;
                        let xr = x[ru];
                        let at = |j: u64| Region::rows(xr, j * shard, shard);
                        let first = if k == 0 {
                            deps(after[ru])
                        } else {
                            prev[ru].clone()
                        };
                        let (sc, rc) = ((r + n - k % n) % n, (r + 2 * n - k - 1) % n);
                        let (sa, ra) = ((r + k) % n, (r + k + 1) % n);
                        let (a, c) = bidir_step(
                            b,
                            st,
                            r,
                            piece,
                            &first,
                            tag(site, k, sc),
                            cw.then(|| (at(sc), at(rc), tags_cw.as_slice())),
                            ccw.then(|| (at(sa), at(ra), tags_ccw.as_slice())),
                        )?;
                        recv_cw[ru] = a.or(recv_cw[ru]);
                        recv_ccw[ru] = c.or(recv_ccw[ru]);
                    }
                }
                prev = gemms;
            }
        }
        Strategy::Direct => {
            // Direct AG: step k computes slice (r − k) mod N (the own shard first) while
            // every rank sends its own shard straight to r+1+k and receives the shard of
            // r−1−k, which step k+1 computes.
            let piece = rows * s.hidden * s.dtype.bytes();
            let mut got: Vec<Vec<Option<OpId>>> = vec![vec![None; n as usize]; n as usize];
            for k in 0..n.saturating_sub(1) {
                let tags: Vec<u64> = (0..n).map(|_| b.msg_tag()).collect();
                for r in 0..n {
                    let from = (r + 2 * n - 1 - k) % n;
                    let xr = x[r as usize];
                    let (_, id) = exchange_step(
                        b,
                        st,
                        r,
                        k,
                        piece,
                        &tags,
                        &deps(after[r as usize]),
                        tag(site, k, r),
                        tag(site, k, from),
                        (
                            Region::rows(xr, r * shard, shard),
                            Region::rows(xr, from * shard, shard),
                        ),
                    )?;
                    got[r as usize][from as usize] = Some(id);
                }
            }
            for r in 0..n {
                for k in 0..n {
                    let j = (r + n - k) % n;
                    let d = deps(got[r as usize][j as usize].or(after[r as usize]));
                    out.ready[r as usize][j as usize] =
                        Some(gemm_op(b, r as usize, j as usize, &d, tag(site, k, j))?);
                }
            }
        }
        Strategy::Flash | Strategy::QuerySplit | Strategy::FlashA2a => {
            // Flash-AG: step k computes slice (r − k) mod N; meanwhile it forwards that
            // slice to r+1 and receives slice (r − k − 1) from r−1. Step 0 is local.
            let piece = rows * s.hidden * s.dtype.bytes();
            let mut recv: Vec<Option<OpId>> = vec![None; n as usize];
            let mut got: Vec<Vec<Option<OpId>>> = vec![vec![None; n as usize]; n as usize];
            for k in 0..n.saturating_sub(1) {
                let tags: Vec<u64> = (0..n).map(|_| b.msg_tag()).collect();
                for r in 0..n {
                    let j = (r + 2 * n - k - 1) % n;
                    let sj = (r + n - k % n) % n;
                    let send_tag = tag(site, k, sj);
                    let xr = x[r as usize];
                    // Step 0 sends the own shard, ready after its producer; later steps
                    // forward what the previous step received (stream order).
                    let first = if k == 0 {
                        deps(after[r as usize])
                    } else {
                        vec![]
                    };
                    let id = ring_step(
                        b,
                        st,
                        r,
                        piece,
                        &tags,
                        &first,
                        send_tag,
                        tag(site, k, j),
                        false,
                        (
                            Region::rows(xr, sj * shard, shard),
                            Region::rows(xr, j * shard, shard),
                        ),
                        // Each Flash step is a P2P call of its own.
                        false,
                    )?;
                    recv[r as usize] = Some(id);
                    got[r as usize][j as usize] = Some(id);
                }
            }
            for r in 0..n {
                for k in 0..n {
                    let j = (r + n - k) % n;
                    let d = deps(got[r as usize][j as usize].or(after[r as usize]));
                    out.ready[r as usize][j as usize] =
                        Some(gemm_op(b, r as usize, j as usize, &d, tag(site, k, j))?);
                }
            }
        }
    }
    Ok(out)
}

/// The MLP activation on each block FC1 produced, on the compute stream, in the order the
/// blocks were computed.
pub fn activation(
    b: &mut PlanBuilder,
    st: &RankStreams,
    strategy: Strategy,
    site_name: &str,
    s: &MlpShape,
    input: &Blocks,
) -> Result<Blocks, StrategyError> {
    st.whole(site_name, strategy)?;
    let site = b.site(site_name);
    let n = s.ranks as u64;
    let nb = blocks(strategy, s.ranks);
    let rows = s.tokens / nb;
    let out_width = s.ffn / n;
    let in_width = s.fc1_width / n;
    let bytes = rows * (in_width + out_width) * s.dtype.bytes();
    let kind = OpKind::Elementwise {
        kind: EltKind::Activation,
        bytes,
    };
    let a = per_rank(b, st, "a", s.tokens, out_width, s.dtype, |_| {
        BufInit::Poison
    });
    let mut out = Blocks::inputs_ready(strategy, s.ranks, s.tokens, a);
    for r in 0..n as usize {
        // Follow the producer's order so the compute stream does not stall.
        let mut order: Vec<(OpId, usize)> = input.ready[r]
            .iter()
            .enumerate()
            .map(|(j, d)| (d.unwrap_or(0), j))
            .collect();
        order.sort_unstable();
        for (step, (_, j)) in order.into_iter().enumerate() {
            let id = b.single(
                st.compute[r],
                kind,
                &deps(input.ready[r][j]),
                tag(site, step as u64, j as u64),
            )?;
            b.set_io(
                id,
                OpIo::Activation {
                    out: out.region(r, j),
                    input: input.region(r, j),
                    func: s.activation,
                },
            );
            out.ready[r][j] = Some(id);
        }
    }
    Ok(out)
}

fn gemm_kind(m: u64, n: u64, k: u64, s: &MlpShape) -> OpKind {
    OpKind::Gemm {
        m,
        n,
        k,
        dtype: s.dtype,
    }
}

/// Member `r`'s GEMM (m × n, K = k) on its compute stream after `d`: one GEMM, or, while
/// its weights are being gathered (`st.weights`), one per weight column chunk (n/chunks
/// wide), each also after its chunk's arrival. Returns the last (the stream is in order).
fn site_gemm(
    b: &mut PlanBuilder,
    st: &RankStreams,
    r: usize,
    (m, n, k): (u64, u64, u64),
    s: &MlpShape,
    d: &[OpId],
    t: OpTag,
) -> Result<OpId, StrategyError> {
    let Some(w) = &st.weights else {
        return Ok(b.single(st.compute[r], gemm_kind(m, n, k, s), d, t)?);
    };
    let chunks = &w.ready[r];
    let width = n / chunks.len().max(1) as u64;
    let mut last = None;
    for c in chunks {
        let mut deps = d.to_vec();
        deps.extend(*c);
        last = Some(b.single(st.compute[r], gemm_kind(m, width, k, s), &deps, t)?);
    }
    last.ok_or(StrategyError::Unsupported("a weight gathered in no chunk"))
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

/// The row-parallel GEMM (rows × ffn/N times ffn/N × hidden) of each token block of
/// `input`, then the reduce-scatter of the partial sums over tokens, so each rank ends
/// with its own M/N rows, fully reduced. Declares, per rank, `w_<site>`, `p_<site>` (the
/// partial sums; the rank's shard rows of it are its result) and, for `flash`, `r_<site>`
/// (where the running sums arrive).
pub fn gemm_rs(
    b: &mut PlanBuilder,
    st: &RankStreams,
    strategy: Strategy,
    site_name: &str,
    s: &MlpShape,
    input: &Blocks,
) -> Result<(Vec<BufId>, Vec<Option<OpId>>), StrategyError> {
    gemm_rs_with(b, st, strategy, site_name, s, input, &mut |_, _, _| {
        Ok(None)
    })
}

/// What a Flash-RS partial GEMM of (rank, slice) also waits for, issued right before it
/// on the rank's compute stream (query-split attention puts each query slice's attention
/// there).
pub type BeforePartial<'a> =
    dyn FnMut(&mut PlanBuilder, usize, u64) -> Result<Option<OpId>, StrategyError> + 'a;

/// [`gemm_rs`], with `before(b, r, j)` called before each Flash-RS partial GEMM.
pub fn gemm_rs_with(
    b: &mut PlanBuilder,
    st: &RankStreams,
    strategy: Strategy,
    site_name: &str,
    s: &MlpShape,
    input: &Blocks,
    before: &mut BeforePartial<'_>,
) -> Result<(Vec<BufId>, Vec<Option<OpId>>), StrategyError> {
    let site = b.site(site_name);
    let n = s.ranks as u64;
    let nb = blocks(strategy, s.ranks);
    let rows = s.tokens / nb;
    let shard = s.tokens / n;
    let w = per_rank(
        b,
        st,
        &format!("w_{site_name}"),
        s.ffn / n,
        s.hidden,
        s.dtype,
        |_| BufInit::Local,
    );
    let p = per_rank(
        b,
        st,
        &format!("p_{site_name}"),
        s.tokens,
        s.hidden,
        s.dtype,
        |_| BufInit::Poison,
    );
    // The partial GEMM of block j on rank r, after its input and `extra`.
    let gemm_op = |b: &mut PlanBuilder,
                   r: usize,
                   j: usize,
                   t: OpTag,
                   extra: Option<OpId>|
     -> Result<OpId, StrategyError> {
        let mut d = deps(input.ready[r][j]);
        d.extend(extra);
        let id = site_gemm(b, st, r, (rows, s.hidden, s.ffn / n), s, &d, t)?;
        b.set_io(
            id,
            OpIo::Gemm {
                a: input.region(r, j),
                b: w[r],
                c: input.rows[j].on(p[r]),
            },
        );
        Ok(id)
    };
    // The P2P schedules (flash, direct, permute loop) move whole per-rank slices, add
    // them with slice-sized adds, and land them in a staging buffer `r_<site>`.
    let piece = rows * s.hidden * s.dtype.bytes();
    let add = OpKind::Elementwise {
        kind: EltKind::Add,
        bytes: crate::cost::add_traffic(piece),
    };
    let staging = |b: &mut PlanBuilder| {
        per_rank(
            b,
            st,
            &format!("r_{site_name}"),
            s.tokens,
            s.hidden,
            s.dtype,
            |_| BufInit::Poison,
        )
    };
    match strategy {
        Strategy::Sequential | Strategy::Bulk | Strategy::Chunked(_) => {
            // Compute-first: multiply chunk i, then reduce-scatter it while chunk i+1 is
            // multiplied.
            let pr = rows / n;
            let piece = pr * s.hidden * s.dtype.bytes();
            let mut last = vec![None; n as usize];
            for i in 0..nb as usize {
                let mut done = vec![None; n as usize];
                for (r, d) in done.iter_mut().enumerate().take(st.held) {
                    *d = Some(gemm_op(b, r, i, tag(site, i as u64, i as u64), None)?);
                }
                let at = |r: u64, blk: u64| {
                    let row = piece_row(strategy, s.ranks, s.tokens, blk, i as u64);
                    Region::rows(p[r as usize], row, pr)
                };
                let reduced = ring(b, st, site, piece, true, &done, &at)?;
                // The comm stream is in order: the last chunk's ring ends the site.
                for r in 0..n as usize {
                    last[r] = reduced[r].or(done[r]);
                }
            }
            Ok((p, last))
        }
        Strategy::Direct => {
            st.whole(site_name, strategy)?;
            // Direct-to-owner RS: step i computes the partial for owner (r + 1 + i) mod N
            // (own slice last) and sends it straight there; the partial from r−1−i
            // lands in slot r−1−i of `r_<site>`. After the exchanges the owner adds the
            // received partials into the first one's slot, then into its own partial.
            // Closed form (no contention, interference off; c a partial GEMM, p one
            // message, a one slice add): exchange i starts when partial i is done and
            // exchange i−1 has ended, so the last ends at E = max((N−1)·c + p,
            // c + (N−1)·p); the N−2 accumulating adds follow it on the comm stream and
            // the final add waits for the own partial: max(N·c, E + (N−2)·a) + a.
            let recv_buf = staging(b);
            let at = |buf: BufId, j: u64| Region::rows(buf, j * shard, shard);
            let owner = |r: u64, i: u64| (r + 1 + i) % n;
            let mut partial = vec![vec![0 as OpId; n as usize]; n as usize];
            for r in 0..n {
                for i in 0..n {
                    let j = owner(r, i);
                    partial[r as usize][i as usize] =
                        gemm_op(b, r as usize, j as usize, tag(site, i, j), None)?;
                }
            }
            let mut recvs = vec![Vec::new(); n as usize];
            for i in 0..n.saturating_sub(1) {
                let tags: Vec<u64> = (0..n).map(|_| b.msg_tag()).collect();
                for r in 0..n {
                    let ru = r as usize;
                    let from = (r + 2 * n - 1 - i) % n;
                    let (_, id) = exchange_step(
                        b,
                        st,
                        r,
                        i,
                        piece,
                        &tags,
                        &[partial[ru][i as usize]],
                        tag(site, i, owner(r, i)),
                        tag(site, i, from),
                        (at(p[ru], owner(r, i)), at(recv_buf[ru], from)),
                    )?;
                    recvs[ru].push((id, from));
                }
            }
            let mut done = Vec::with_capacity(n as usize);
            for r in 0..n as usize {
                let own = partial[r][n as usize - 1];
                let mut acc: Option<(OpId, u64)> = None;
                for &(id, from) in &recvs[r] {
                    acc = Some(match acc {
                        None => (id, from),
                        Some((prev, slot)) => {
                            let a = b.single(st.comm[r], add, &[prev, id], tag(site, n, slot))?;
                            b.set_io(
                                a,
                                OpIo::Add {
                                    out: at(recv_buf[r], slot),
                                    x: at(recv_buf[r], slot),
                                    y: at(recv_buf[r], from),
                                },
                            );
                            (a, slot)
                        }
                    });
                }
                let last = match acc {
                    None => own,
                    Some((prev, slot)) => {
                        let a = b.single(st.comm[r], add, &[prev, own], tag(site, n, r as u64))?;
                        b.set_io(
                            a,
                            OpIo::Add {
                                out: at(p[r], r as u64),
                                x: at(p[r], r as u64),
                                y: at(recv_buf[r], slot),
                            },
                        );
                        a
                    }
                };
                done.push(Some(last));
            }
            Ok((p, done))
        }
        Strategy::PermuteLoopBidir => {
            st.whole(site_name, strategy)?;
            // Bidirectional permute-loop RS: every owner's sum arrives in two halves of
            // the ring, one chain clockwise (from the K_cw = ⌈(N−1)/2⌉ ranks before it),
            // one counter-clockwise (from the K_ccw = ⌊(N−1)/2⌋ after it). Iteration k
            // moves both running sums one hop while, after the previous adds (the
            // barrier), the partials of each chain's next slice are computed; the owner
            // computes its own partial once, when the first chain arrives, and adds both.
            let (kcw, kccw) = ((n - 1).div_ceil(2), (n - 1) / 2);
            let stage_cw = staging(b);
            let stage_ccw = per_rank(
                b,
                st,
                &format!("r2_{site_name}"),
                s.tokens,
                s.hidden,
                s.dtype,
                |_| BufInit::Poison,
            );
            let at = |buf: BufId, j: u64| Region::rows(buf, j * shard, shard);
            let cw_slice = |r: u64, k: u64| (r + n + kcw - k) % n;
            let ccw_slice = |r: u64, k: u64| (r + n + k - kccw) % n;
            let nu = n as usize;
            let mut carry_cw: Vec<OpId> = Vec::with_capacity(nu);
            let mut carry_ccw: Vec<Option<OpId>> = vec![None; nu];
            let mut own: Vec<Option<OpId>> = vec![None; nu];
            for r in 0..n {
                let ru = r as usize;
                let j = cw_slice(r, 0);
                let g = gemm_op(b, ru, j as usize, tag(site, 0, j), None)?;
                carry_cw.push(g);
                if j == r {
                    own[ru] = Some(g);
                }
                if kccw >= 1 {
                    let j = ccw_slice(r, 0);
                    carry_ccw[ru] = Some(gemm_op(b, ru, j as usize, tag(site, 0, j), None)?);
                }
            }
            for k in 0..kcw {
                let ccw = k < kccw;
                let tags_cw = st.step_tags(b);
                let tags_ccw = st.step_tags(b);
                let mut recvs = Vec::with_capacity(nu);
                for r in 0..n {
                    let ru = r as usize;
                    let mut first = vec![carry_cw[ru]];
                    first.extend(carry_ccw[ru].filter(|_| ccw));
                    recvs.push(bidir_step(
                        b,
                        st,
                        r,
                        piece,
                        &first,
                        tag(site, k, cw_slice(r, k)),
                        Some((
                            at(p[ru], cw_slice(r, k)),
                            at(stage_cw[ru], cw_slice(r, k + 1)),
                            tags_cw.as_slice(),
                        )),
                        ccw.then(|| {
                            (
                                at(p[ru], ccw_slice(r, k)),
                                at(stage_ccw[ru], ccw_slice(r, k + 1)),
                                tags_ccw.as_slice(),
                            )
                        }),
                    )?);
                }
                for r in 0..n {
                    let ru = r as usize;
                    let barrier = carry_ccw[ru].max(Some(carry_cw[ru]));
                    let chains = [
                        (cw_slice(r, k + 1), recvs[ru].0, &stage_cw),
                        (ccw_slice(r, k + 1), recvs[ru].1, &stage_ccw),
                    ];
                    for (dir, (j, got, stage)) in chains.into_iter().enumerate() {
                        let Some(got) = got else { continue };
                        // The slice's partial (the own one only once), then the add of
                        // the arrived sum into it.
                        let base = match own[ru].filter(|_| j == r) {
                            Some(o) => o,
                            None => gemm_op(b, ru, j as usize, tag(site, k + 1, j), barrier)?,
                        };
                        let a = b.single(st.comm[ru], add, &[base, got], tag(site, k + 1, j))?;
                        b.set_io(
                            a,
                            OpIo::Add {
                                out: at(p[ru], j),
                                x: at(p[ru], j),
                                y: at(stage[ru], j),
                            },
                        );
                        if j == r {
                            own[ru] = Some(a);
                        }
                        if dir == 0 {
                            carry_cw[ru] = a;
                        } else {
                            carry_ccw[ru] = Some(a);
                        }
                    }
                }
            }
            Ok((p, own))
        }
        Strategy::Flash | Strategy::QuerySplit | Strategy::FlashA2a | Strategy::PermuteLoop => {
            // Flash-RS: step k computes the partial of slice (r − 1 − k) mod N, so the own
            // slice comes last; the running sum arrives from r−1, gets this rank's partial
            // added, and goes on to r+1. The last sum is this rank's output, never sent.
            //
            // The permute loop (Wang et al.) is the same ring with a barrier per
            // iteration: partial k+1 is issued only after the add of step k (Flash issues
            // every partial up front, so the GEMMs run ahead of the chain). Its closed
            // form: c + (N−1)·(max(c, p) + a).
            let barrier = strategy == Strategy::PermuteLoop;
            let recv_buf = staging(b);
            let slice = |r: u64, k: u64| (r + 2 * n - 1 - k % n) % n;
            let at = |buf: BufId, j: u64| Region::rows(buf, j * shard, shard);
            let mut partial = vec![vec![0 as OpId; n as usize]; n as usize];
            let upfront = if barrier { 1 } else { n };
            let held = st.held as u64;
            for r in 0..held {
                for k in 0..upfront {
                    let j = slice(r, k);
                    let extra = before(b, r as usize, j)?;
                    partial[r as usize][k as usize] =
                        gemm_op(b, r as usize, j as usize, tag(site, k, j), extra)?;
                }
            }
            // What rank r's send at step k carries: the partial (k = 0) or the sum, both
            // in `p` (the sum is added in place).
            let mut carry: Vec<OpId> = (0..held as usize).map(|r| partial[r][0]).collect();
            for k in 0..n.saturating_sub(1) {
                let tags = st.step_tags(b);
                let mut recvs = Vec::with_capacity(held as usize);
                for r in 0..held {
                    let ru = r as usize;
                    recvs.push(ring_step(
                        b,
                        st,
                        r,
                        piece,
                        &tags,
                        &[carry[ru]],
                        tag(site, k, slice(r, k)),
                        tag(site, k + 1, slice(r, k + 1)),
                        false,
                        (at(p[ru], slice(r, k)), at(recv_buf[ru], slice(r, k + 1))),
                        false,
                    )?);
                }
                for r in 0..held as usize {
                    let j = slice(r as u64, k + 1);
                    if barrier {
                        let t = tag(site, k + 1, j);
                        partial[r][k as usize + 1] = gemm_op(b, r, j as usize, t, Some(carry[r]))?;
                    }
                    carry[r] = b.single(
                        st.comm[r],
                        add,
                        &[partial[r][k as usize + 1], recvs[r]],
                        tag(site, k + 1, j),
                    )?;
                    b.set_io(
                        carry[r],
                        OpIo::Add {
                            out: at(p[r], j),
                            x: at(p[r], j),
                            y: at(recv_buf[r], j),
                        },
                    );
                }
            }
            let mut done: Vec<Option<OpId>> = carry.into_iter().map(Some).collect();
            done.resize(n as usize, None);
            Ok((p, done))
        }
    }
}
