//! The two kinds of site — an all-gather before column-parallel GEMMs, a reduce-scatter
//! after row-parallel ones — with their buffers, GEMMs and token-row layout; the
//! schedule that runs each (sequential, chunked, Flash, ...) is a file of `schedule/`,
//! built of the steps of `steps.rs`.

use super::schedule::{self, Ag, Rs};
pub use super::steps::{RankStreams, WeightChunks, all_gather_steps, bulk_all_gather};
use super::steps::{deps, tag};
use super::{MlpShape, StrategyError, blocks};
use crate::plan::{BufId, BufInit, EltKind, OpId, OpIo, OpKind, OpTag, PlanBuilder, Region};
use crate::scenario::Strategy;

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
        Strategy::Sequential | Strategy::Bulk | Strategy::Chunked(_) | Strategy::FlashEp(_) => {
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
    let issued = Issued::new(st.compute.len());
    let gemm_op = |b: &mut PlanBuilder,
                   r: usize,
                   j: usize,
                   d: &[OpId],
                   t: OpTag|
     -> Result<OpId, StrategyError> {
        let again = issued.again(r);
        let id = site_gemm(b, st, r, (rows, width / n, s.hidden), s, d, t, again)?;
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
    let c = Ag {
        st,
        strategy,
        site_name,
        site,
        s,
        n,
        nb,
        rows,
        shard,
        x: &x,
        after,
        gemm: &gemm_op,
    };
    match strategy {
        Strategy::Sequential | Strategy::Bulk | Strategy::Chunked(_) | Strategy::FlashEp(_) => {
            schedule::chunked::all_gather(b, &c, &mut out)?
        }
        Strategy::PermuteLoop => schedule::permute::all_gather(b, &c, &mut out)?,
        Strategy::PermuteLoopBidir => schedule::bidir::all_gather(b, &c, &mut out)?,
        Strategy::Direct => schedule::direct::all_gather(b, &c, &mut out)?,
        Strategy::Flash | Strategy::QuerySplit | Strategy::FlashA2a => {
            schedule::flash::all_gather(b, &c, &mut out)?
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

fn gemm_kind(m: u64, n: u64, k: u64, s: &MlpShape, reuses_b: bool) -> OpKind {
    OpKind::Gemm {
        m,
        n,
        k,
        dtype: s.dtype,
        reuses_b,
    }
}

/// Per member, whether a partial GEMM of the site was issued on its compute stream: the
/// partials of a site over row blocks all read the member's weight, one after another
/// on its stream, so each after the first finds it in L2 where it fits.
struct Issued(Vec<std::cell::Cell<bool>>);

impl Issued {
    fn new(n: usize) -> Issued {
        Issued((0..n).map(|_| std::cell::Cell::new(false)).collect())
    }

    /// Whether member `r` issued a partial before (and from now on, it has).
    fn again(&self, r: usize) -> bool {
        self.0.get(r).is_some_and(|c| c.replace(true))
    }
}

/// Member `r`'s GEMM (m × n, K = k) on its compute stream after `d`: one GEMM (reading
/// the weight the GEMM before it on the stream read, if `reuses_b`), or, while its
/// weights are being gathered (`st.weights`), one per weight column chunk (n/chunks
/// wide, each over other weight columns), each also after its chunk's arrival. Returns
/// the last (the stream is in order).
#[allow(clippy::too_many_arguments)]
fn site_gemm(
    b: &mut PlanBuilder,
    st: &RankStreams,
    r: usize,
    (m, n, k): (u64, u64, u64),
    s: &MlpShape,
    d: &[OpId],
    t: OpTag,
    reuses_b: bool,
) -> Result<OpId, StrategyError> {
    let Some(w) = &st.weights else {
        return Ok(b.single(st.compute[r], gemm_kind(m, n, k, s, reuses_b), d, t)?);
    };
    let chunks = &w.ready[r];
    let width = n / chunks.len().max(1) as u64;
    let mut last = None;
    for c in chunks {
        let mut deps = d.to_vec();
        deps.extend(*c);
        last = Some(b.single(st.compute[r], gemm_kind(m, width, k, s, false), &deps, t)?);
    }
    last.ok_or(StrategyError::Unsupported("a weight gathered in no chunk"))
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
    let issued = Issued::new(st.compute.len());
    let gemm_op = |b: &mut PlanBuilder,
                   r: usize,
                   j: usize,
                   t: OpTag,
                   extra: Option<OpId>|
     -> Result<OpId, StrategyError> {
        let mut d = deps(input.ready[r][j]);
        d.extend(extra);
        let again = issued.again(r);
        let id = site_gemm(b, st, r, (rows, s.hidden, s.ffn / n), s, &d, t, again)?;
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
    let c = Rs {
        st,
        strategy,
        site_name,
        site,
        s,
        n,
        nb,
        rows,
        shard,
        p: &p,
        piece,
        add,
        gemm: &gemm_op,
    };
    let done = match strategy {
        Strategy::Sequential | Strategy::Bulk | Strategy::Chunked(_) | Strategy::FlashEp(_) => {
            schedule::chunked::reduce_scatter(b, &c)?
        }
        Strategy::Direct => schedule::direct::reduce_scatter(b, &c)?,
        Strategy::PermuteLoopBidir => schedule::bidir::reduce_scatter(b, &c)?,
        Strategy::PermuteLoop => schedule::permute::reduce_scatter(b, &c, before)?,
        Strategy::Flash | Strategy::QuerySplit | Strategy::FlashA2a => {
            schedule::flash::reduce_scatter(b, &c, before)?
        }
    };
    Ok((p, done))
}
