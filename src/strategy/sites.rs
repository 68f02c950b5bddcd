//! The two kinds of site and the collectives inside them.

use super::{MlpShape, StrategyError, blocks};
use crate::plan::{EltKind, OpId, OpKind, OpTag, PlanBuilder, StreamId, StreamKind};
use crate::scenario::Strategy;

/// The streams of every rank: one compute stream and one communication stream.
#[derive(Debug, Clone)]
pub struct RankStreams {
    pub compute: Vec<StreamId>,
    pub comm: Vec<StreamId>,
}

impl RankStreams {
    pub fn declare(b: &mut PlanBuilder) -> RankStreams {
        let n = b.ranks();
        let mut compute = Vec::with_capacity(n as usize);
        let mut comm = Vec::with_capacity(n as usize);
        for r in 0..n {
            compute.push(b.stream(r, "compute", StreamKind::Compute));
            comm.push(b.stream(r, "comm", StreamKind::Comm));
        }
        RankStreams { compute, comm }
    }
}

/// Per rank, per token block: the op after which that block's data is ready on that rank
/// (`None`: ready from the start).
#[derive(Debug, Clone, PartialEq)]
pub struct Blocks {
    pub ready: Vec<Vec<Option<OpId>>>,
}

impl Blocks {
    pub fn inputs_ready(ranks: u32, nblocks: u64) -> Blocks {
        Blocks {
            ready: vec![vec![None; nblocks as usize]; ranks as usize],
        }
    }
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

/// One ring step of rank `r`: a group launch on its comm stream of a send of `piece` bytes
/// to r+1 (after `send_deps`) and a recv of as many from r−1. `tags[x]` is rank x's send
/// tag for this step. Returns the recv op.
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
) -> Result<OpId, StrategyError> {
    let n = tags.len() as u64;
    let (next, prev) = ((r + 1) % n, (r + n - 1) % n);
    let l = b.launch(st.comm[r as usize]);
    let send = OpKind::Send {
        peer: next as u32,
        bytes: piece,
        tag: tags[r as usize],
    };
    b.add(l, send, send_deps, send_tag)?;
    let recv = OpKind::Recv {
        peer: prev as u32,
        bytes: piece,
        tag: tags[prev as usize],
        accumulate,
    };
    Ok(b.add(l, recv, &[], recv_tag)?)
}

/// A ring all-gather (`accumulate = false`) or reduce-scatter (`true`) of `piece` bytes
/// per rank per step over all ranks, on the comm streams: N−1 steps, each one NCCL-style
/// group of a send to r+1 and a recv from r−1. Step k of rank r forwards block
/// `(r − k) mod N` (AG) or `(r − k − 1) mod N` (RS). `first[r]` is what rank r's first
/// send waits for. Returns each rank's last recv (the collective is done on that rank
/// when it completes), or `None` for a single rank.
fn ring(
    b: &mut PlanBuilder,
    st: &RankStreams,
    site: u16,
    piece: u64,
    accumulate: bool,
    first: &[Option<OpId>],
) -> Result<Vec<Option<OpId>>, StrategyError> {
    let n = b.ranks() as u64;
    let mut last = vec![None; n as usize];
    if n <= 1 {
        return Ok(last);
    }
    let off = u64::from(accumulate);
    for k in 0..n - 1 {
        let tags: Vec<u64> = (0..n).map(|_| b.msg_tag()).collect();
        for r in 0..n {
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
            )?);
        }
    }
    Ok(last)
}

/// All-gather of the sequence-sharded input (M/N × hidden per rank), then the
/// column-parallel GEMM of the gathered rows with this rank's weight shard
/// (hidden × width/N). Returns, per rank, the GEMM op of each token block.
pub fn ag_gemm(
    b: &mut PlanBuilder,
    st: &RankStreams,
    strategy: Strategy,
    site_name: &str,
    s: &MlpShape,
    width: u64,
) -> Result<Blocks, StrategyError> {
    let site = b.site(site_name);
    let n = s.ranks as u64;
    let nb = blocks(strategy, s.ranks);
    let rows = s.tokens / nb;
    let gemm = OpKind::Gemm {
        m: rows,
        n: width / n,
        k: s.hidden,
        dtype: s.dtype,
    };
    let mut out = Blocks::inputs_ready(s.ranks, nb);
    match strategy {
        Strategy::Sequential | Strategy::Chunked(_) => {
            // Comm-first: gather chunk i, then multiply it while chunk i+1 is gathered.
            let piece = rows / n * s.hidden * s.dtype.bytes();
            let none = vec![None; n as usize];
            for i in 0..nb {
                let gathered = ring(b, st, site, piece, false, &none)?;
                #[allow(clippy::needless_range_loop)]
                for r in 0..n as usize {
                    out.ready[r][i as usize] =
                        Some(b.single(st.compute[r], gemm, &deps(gathered[r]), tag(site, i, i))?);
                }
            }
        }
        Strategy::Flash => {
            // Flash-AG: step k computes slice (r − k) mod N; meanwhile it forwards that
            // slice to r+1 and receives slice (r − k − 1) from r−1. Step 0 is local.
            let piece = rows * s.hidden * s.dtype.bytes();
            let mut recv: Vec<Option<OpId>> = vec![None; n as usize];
            let mut got: Vec<Vec<Option<OpId>>> = vec![vec![None; n as usize]; n as usize];
            for k in 0..n.saturating_sub(1) {
                let tags: Vec<u64> = (0..n).map(|_| b.msg_tag()).collect();
                for r in 0..n {
                    let j = (r + 2 * n - k - 1) % n;
                    let send_tag = tag(site, k, (r + n - k % n) % n);
                    let id = ring_step(
                        b,
                        st,
                        r,
                        piece,
                        &tags,
                        &[],
                        send_tag,
                        tag(site, k, j),
                        false,
                    )?;
                    recv[r as usize] = Some(id);
                    got[r as usize][j as usize] = Some(id);
                }
            }
            for r in 0..n {
                for k in 0..n {
                    let j = (r + n - k) % n;
                    let d = deps(got[r as usize][j as usize]);
                    out.ready[r as usize][j as usize] =
                        Some(b.single(st.compute[r as usize], gemm, &d, tag(site, k, j))?);
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
    let mut out = Blocks::inputs_ready(s.ranks, nb);
    for r in 0..n as usize {
        // Follow the producer's order so the compute stream does not stall.
        let mut order: Vec<(OpId, usize)> = input.ready[r]
            .iter()
            .enumerate()
            .map(|(j, d)| (d.unwrap_or(0), j))
            .collect();
        order.sort_unstable();
        for (step, (_, j)) in order.into_iter().enumerate() {
            out.ready[r][j] = Some(b.single(
                st.compute[r],
                kind,
                &deps(input.ready[r][j]),
                tag(site, step as u64, j as u64),
            )?);
        }
    }
    Ok(out)
}

/// The row-parallel GEMM (rows × ffn/N times ffn/N × hidden) of each token block, then the
/// reduce-scatter of the partial sums over tokens, so each rank ends with its own M/N
/// rows, fully reduced.
pub fn gemm_rs(
    b: &mut PlanBuilder,
    st: &RankStreams,
    strategy: Strategy,
    site_name: &str,
    s: &MlpShape,
    input: &Blocks,
) -> Result<(), StrategyError> {
    let site = b.site(site_name);
    let n = s.ranks as u64;
    let nb = blocks(strategy, s.ranks);
    let rows = s.tokens / nb;
    let gemm = OpKind::Gemm {
        m: rows,
        n: s.hidden,
        k: s.ffn / n,
        dtype: s.dtype,
    };
    match strategy {
        Strategy::Sequential | Strategy::Chunked(_) => {
            // Compute-first: multiply chunk i, then reduce-scatter it while chunk i+1 is
            // multiplied.
            let piece = rows / n * s.hidden * s.dtype.bytes();
            for i in 0..nb as usize {
                let mut done = Vec::with_capacity(n as usize);
                for r in 0..n as usize {
                    let d = deps(input.ready[r][i]);
                    done.push(Some(b.single(
                        st.compute[r],
                        gemm,
                        &d,
                        tag(site, i as u64, i as u64),
                    )?));
                }
                ring(b, st, site, piece, true, &done)?;
            }
        }
        Strategy::Flash => {
            // Flash-RS: step k computes the partial of slice (r − 1 − k) mod N, so the own
            // slice comes last; the running sum arrives from r−1, gets this rank's partial
            // added, and goes on to r+1. The last sum is this rank's output, never sent.
            let piece = rows * s.hidden * s.dtype.bytes();
            let add = OpKind::Elementwise {
                kind: EltKind::Add,
                bytes: crate::cost::add_traffic(piece),
            };
            let slice = |r: u64, k: u64| (r + 2 * n - 1 - k % n) % n;
            let mut partial = vec![vec![0 as OpId; n as usize]; n as usize];
            for r in 0..n {
                for k in 0..n {
                    let j = slice(r, k);
                    partial[r as usize][k as usize] = b.single(
                        st.compute[r as usize],
                        gemm,
                        &deps(input.ready[r as usize][j as usize]),
                        tag(site, k, j),
                    )?;
                }
            }
            // What rank r's send at step k carries: the partial (k = 0) or the sum.
            let mut carry: Vec<OpId> = (0..n as usize).map(|r| partial[r][0]).collect();
            for k in 0..n.saturating_sub(1) {
                let tags: Vec<u64> = (0..n).map(|_| b.msg_tag()).collect();
                let mut recvs = Vec::with_capacity(n as usize);
                for r in 0..n {
                    recvs.push(ring_step(
                        b,
                        st,
                        r,
                        piece,
                        &tags,
                        &[carry[r as usize]],
                        tag(site, k, slice(r, k)),
                        tag(site, k + 1, slice(r, k + 1)),
                        false,
                    )?);
                }
                for r in 0..n as usize {
                    carry[r] = b.single(
                        st.comm[r],
                        add,
                        &[partial[r][k as usize + 1], recvs[r]],
                        tag(site, k + 1, slice(r as u64, k + 1)),
                    )?;
                }
            }
        }
    }
    Ok(())
}
