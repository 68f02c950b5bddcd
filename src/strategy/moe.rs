//! A mixture-of-experts FFN block over `ep` expert-parallel ranks (workload `moe`),
//! forward and (unless forward-only) backward. The forward: each rank routes its own tokens (the router GEMM), sends each token to
//! the ranks holding its `top_k` experts (the dispatch all-to-all), runs its experts as
//! grouped GEMMs (FC1, activation, FC2) on what it received, and sends the outputs back
//! to the tokens' ranks (the combine all-to-all, reduced as it lands); the shared experts
//! run on the rank's own tokens. The backward mirrors it: the combine's backward sends
//! the output gradients to the experts, the dgrad chain runs on them, the dispatch's
//! backward brings the input gradients back, each all-to-all under the same strategy as
//! in the forward; then every weight gradient (experts, shared experts, router), which
//! feeds no message and so fills the time the last gradients travel (under
//! `sequential`, before the last all-to-all: nothing overlaps).
//!
//! Strategies:
//! - `sequential`: dispatch, then the experts, then the combine, then the shared experts
//!   (nothing overlaps). Each all-to-all is one group of P2P calls, as NCCL runs one:
//!   every message of a rank in flight at once, sharing its links.
//! - `chunked:K`: the tokens in K chunks, pipelined — chunk c's dispatch on the dispatch
//!   stream, its experts on the compute stream, its combine on the combine stream, so the
//!   experts of chunk c run beside the dispatch of c + 1 and the combine of c − 1; the
//!   shared experts first, beside the first dispatch.
//! - `flash-ep`: the dispatch decomposed into one P2P message per destination, in
//!   rank-adaptive order (step i: rank d sends to d + i and receives from d − i, one
//!   message after the other, so rank d's i-th arrival is the i-th step), the experts run
//!   on each source's tokens as they arrive, and each source's outputs are sent back (the
//!   combine of step i: to d − i, while receiving from d + i) as soon as they are done;
//!   the shared experts first (they need no message), the rank's own tokens last (their
//!   outputs need none), so no combine is left after the last GEMM. `flash-ep:G` runs
//!   the experts once per G arrivals: a grouped GEMM reads every local expert's weights
//!   once, so per-source GEMMs of few rows per expert are bound by HBM, not FLOPs.
//!   `flash` is `flash-ep` here, as it is the Flash schedule at every other site.
//!
//! Closed forms (balanced routing, free links between every pair, the message time of
//! one destination's tokens τ, one source's expert work c): `flash-ep` ends at
//! `router + max(s, τ) + ep · c` where `s` is the shared experts' time, when every
//! message fits under the compute before it is needed (4τ ≤ c); `sequential` at
//! `router + 2 · A + E + s` with E the experts on every row and A the all-to-all, on one
//! NVSwitch `α + (ep − 1) · p / B` (a rank's ep − 1 messages of p bytes share its link).
//! `tests` checks both on the engine.
//!
//! Routing: rank d's share of routed token-slots is `Routing::rank_shares` (uniform,
//! Zipf over the experts in order, or given per rank); every source routes the same way,
//! so source s sends rank d `round(T · k · share_d)` rows. Within a rank the rows are
//! spread evenly over its experts (one grouped GEMM of `experts / ep` problems).

use super::StrategyError;
use crate::plan::{LaunchId, OpId, OpKind, OpTag, Plan, PlanBuilder, StreamId, StreamKind};
use crate::scenario::{DType, Model, Routing, Scenario, Strategy};

/// A MoE block as the builder needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct MoeShape {
    /// Expert-parallel ranks.
    pub ep: u32,
    /// Tokens each rank holds (and routes).
    pub tokens: u64,
    pub hidden: u64,
    /// Routed experts over all ranks.
    pub experts: u64,
    pub top_k: u64,
    /// One expert's FC1 output width (2 · its FFN width when gated) and FFN width.
    pub expert_fc1: u64,
    pub expert_ffn: u64,
    /// The shared experts' FC1 output and FFN widths (0: none).
    pub shared_fc1: u64,
    pub shared_ffn: u64,
    pub dtype: DType,
    /// Share of routed token-slots per destination rank (sums to 1).
    pub shares: Vec<f64>,
    /// The backward pass after the forward (a training step's block).
    pub backward: bool,
}

impl MoeShape {
    pub fn of(sc: &Scenario) -> Result<MoeShape, StrategyError> {
        MoeShape::from_parts(
            &sc.model,
            sc.tokens(),
            sc.parallel.ep,
            sc.dtype,
            sc.routing.clone(),
        )
        .map(|m| MoeShape {
            backward: !sc.forward_only,
            ..m
        })
    }

    pub fn from_parts(
        model: &Model,
        tokens: u64,
        ep: u64,
        dtype: DType,
        routing: Routing,
    ) -> Result<MoeShape, StrategyError> {
        let moe = model.moe.ok_or(StrategyError::Unsupported(
            "workload moe needs a mixture-of-experts model",
        ))?;
        let gate = if model.activation.gated() { 2 } else { 1 };
        Ok(MoeShape {
            ep: ep as u32,
            tokens,
            hidden: model.hidden,
            experts: moe.experts,
            top_k: moe.top_k,
            expert_fc1: gate * moe.expert_ffn,
            expert_ffn: moe.expert_ffn,
            shared_fc1: gate * moe.shared_ffn,
            shared_ffn: moe.shared_ffn,
            dtype,
            shares: routing.rank_shares(moe.experts, ep),
            backward: true,
        })
    }

    /// Experts each rank holds.
    pub fn local_experts(&self) -> u64 {
        self.experts / self.ep.max(1) as u64
    }

    /// Rows a source rank sends destination `d` (out of `tokens` tokens of its own).
    pub fn rows_to(&self, d: usize, tokens: u64) -> u64 {
        (tokens as f64 * self.top_k as f64 * self.shares[d]).round() as u64
    }

    /// The most loaded rank's routed rows over the mean: 1 when balanced.
    pub fn imbalance(&self) -> f64 {
        let max = self.shares.iter().copied().fold(0.0, f64::max);
        max * self.shares.len() as f64
    }

    fn row_bytes(&self) -> u64 {
        self.hidden * self.dtype.bytes()
    }
}

/// Whether `strategy` can build this block.
pub fn check(strategy: Strategy, s: &MoeShape) -> Result<(), StrategyError> {
    match strategy {
        Strategy::Sequential | Strategy::FlashEp(_) | Strategy::Flash => Ok(()),
        Strategy::Chunked(k) => super::check_div(strategy, "tokens per rank", s.tokens, k as u64),
        _ => Err(StrategyError::Unsupported(
            "workload moe runs sequential, chunked:K or flash-ep (flash there is flash-ep)",
        )),
    }
}

/// The ranks of one expert-parallel group, member `j` (0..ep) at plan rank `ranks[j]`:
/// its compute stream and the streams its dispatch and combine run on (one stream for
/// both under `sequential`).
#[derive(Debug, Clone, Default)]
pub struct Members {
    pub ranks: Vec<u32>,
    pub compute: Vec<StreamId>,
    pub dispatch: Vec<StreamId>,
    pub combine: Vec<StreamId>,
}

struct Ctx<'a> {
    b: &'a mut PlanBuilder,
    s: &'a MoeShape,
    st: &'a Members,
    /// `fwd` or `bwd`: the pass being built (site names start with it).
    phase: &'static str,
    /// Per stream, its last op so far.
    last: Vec<Option<OpId>>,
}

fn tag(site: u16, step: u32, slice: u32) -> OpTag {
    OpTag { site, step, slice }
}

impl Ctx<'_> {
    fn n(&self) -> usize {
        self.s.ep as usize
    }

    fn site(&mut self, name: &str) -> u16 {
        self.b.site(&format!("{}.{name}", self.phase))
    }

    fn note(&mut self, stream: StreamId, op: OpId) -> OpId {
        let i = stream as usize;
        if self.last.len() <= i {
            self.last.resize(i + 1, None);
        }
        self.last[i] = Some(op);
        op
    }

    /// The last ops so far of rank `r`'s streams.
    fn ends(&self, r: usize) -> Vec<OpId> {
        [self.st.compute[r], self.st.dispatch[r], self.st.combine[r]]
            .iter()
            .filter_map(|&s| self.last.get(s as usize).copied().flatten())
            .collect()
    }

    /// A GEMM (plain when `groups` is 1) on `r`'s compute stream; `None` for no rows.
    #[allow(clippy::too_many_arguments)]
    fn gemm(
        &mut self,
        r: usize,
        site: u16,
        slice: u32,
        groups: u64,
        (m, n, k): (u64, u64, u64),
        deps: &[OpId],
    ) -> Result<Option<OpId>, StrategyError> {
        if m == 0 || n == 0 || k == 0 {
            return Ok(None);
        }
        let dtype = self.s.dtype;
        let kind = if groups > 1 {
            OpKind::GroupedGemm {
                groups: groups.min(u32::MAX as u64) as u32,
                m,
                n,
                k,
                dtype,
            }
        } else {
            OpKind::gemm(m, n, k, dtype)
        };
        let deps: Vec<OpId> = deps.to_vec();
        let op = self
            .b
            .single(self.st.compute[r], kind, &deps, tag(site, 0, slice))?;
        Ok(Some(self.note(self.st.compute[r], op)))
    }

    fn act(
        &mut self,
        r: usize,
        site: u16,
        slice: u32,
        bytes: u64,
        dep: OpId,
    ) -> Result<OpId, StrategyError> {
        let op = self.b.single(
            self.st.compute[r],
            OpKind::Elementwise {
                kind: crate::plan::EltKind::Activation,
                bytes,
            },
            &[dep],
            tag(site, 0, slice),
        )?;
        Ok(self.note(self.st.compute[r], op))
    }

    /// FC1, activation, FC2 over `rows` rows on `r` (in the backward: FC2's dgrad, the
    /// activation's backward, FC1's dgrad): the routed experts (grouped, the rows spread
    /// over the rank's experts) or the shared ones (`shared`). Returns the last GEMM, or
    /// `None` when there are no rows (or no shared experts).
    fn ffn(
        &mut self,
        r: usize,
        shared: bool,
        rows: u64,
        slice: u32,
        deps: &[OpId],
    ) -> Result<Option<OpId>, StrategyError> {
        let s = self.s;
        let (groups, m, fc1, ffn, prefix) = if shared {
            (1, rows, s.shared_fc1, s.shared_ffn, "shared")
        } else {
            let e = s.local_experts().max(1);
            (e, rows.div_ceil(e), s.expert_fc1, s.expert_ffn, "experts")
        };
        if rows == 0 || ffn == 0 {
            return Ok(None);
        }
        let elt = s.dtype.bytes();
        if self.phase == "bwd" {
            let (s2, sa, s1) = (
                self.site(&format!("{prefix}.fc2.dgrad")),
                self.site(&format!("{prefix}.act")),
                self.site(&format!("{prefix}.fc1.dgrad")),
            );
            let Some(d2) = self.gemm(r, s2, slice, groups, (m, ffn, s.hidden), deps)? else {
                return Ok(None);
            };
            // Reads FC1's output and the incoming gradient, writes FC1's gradient.
            let a = self.act(r, sa, slice, groups * m * (2 * fc1 + ffn) * elt, d2)?;
            return self.gemm(r, s1, slice, groups, (m, s.hidden, fc1), &[a]);
        }
        let (s1, sa, s2) = (
            self.site(&format!("{prefix}.fc1")),
            self.site(&format!("{prefix}.act")),
            self.site(&format!("{prefix}.fc2")),
        );
        let Some(f1) = self.gemm(r, s1, slice, groups, (m, fc1, s.hidden), deps)? else {
            return Ok(None);
        };
        let a = self.act(r, sa, slice, groups * m * (fc1 + ffn) * elt, f1)?;
        self.gemm(r, s2, slice, groups, (m, s.hidden, ffn), &[a])
    }

    /// The weight gradients of rank `r`'s experts over `rows` routed rows (grouped, K the
    /// rows per expert), of its shared experts and of its router over its own tokens.
    fn wgrads(&mut self, r: usize, rows: u64) -> Result<(), StrategyError> {
        let s = self.s;
        let e = s.local_experts().max(1);
        let m = rows.div_ceil(e);
        let (a, b) = (
            self.site("experts.fc2.wgrad"),
            self.site("experts.fc1.wgrad"),
        );
        self.gemm(r, a, 0, e, (s.expert_ffn, s.hidden, m), &[])?;
        self.gemm(r, b, 0, e, (s.hidden, s.expert_fc1, m), &[])?;
        let t = s.tokens;
        let (a, b) = (self.site("shared.fc2.wgrad"), self.site("shared.fc1.wgrad"));
        if s.shared_ffn > 0 {
            self.gemm(r, a, 0, 1, (s.shared_ffn, s.hidden, t), &[])?;
            self.gemm(r, b, 0, 1, (s.hidden, s.shared_fc1, t), &[])?;
        }
        let (d, w) = (self.site("router.dgrad"), self.site("router.wgrad"));
        self.gemm(r, d, 0, 1, (t, s.hidden, s.experts), &[])?;
        self.gemm(r, w, 0, 1, (s.experts, s.hidden, t), &[])?;
        Ok(())
    }

    /// A send (`recv` None) or a recv (`Some(accumulate)`) of `rows` rows with `peer` in
    /// launch `l` on `stream`, noted as the stream's last op.
    #[allow(clippy::too_many_arguments)]
    fn transfer(
        &mut self,
        (l, stream): (LaunchId, StreamId),
        peer: usize,
        rows: u64,
        msg: u64,
        recv: Option<bool>,
        deps: &[OpId],
        tg: OpTag,
    ) -> Result<OpId, StrategyError> {
        let (peer, bytes) = (self.st.ranks[peer], rows * self.s.row_bytes());
        let kind = match recv {
            None => OpKind::Send {
                peer,
                bytes,
                tag: msg,
            },
            Some(accumulate) => OpKind::Recv {
                peer,
                bytes,
                tag: msg,
                accumulate,
            },
        };
        let op = self.b.add(l, kind, deps, tg)?;
        Ok(self.note(stream, op))
    }

    /// One step of an exchange over every rank: rank j sends `rows(j, j + i)` rows to
    /// j + i and receives `rows(j − i, j)` from j − i (`reverse`: to j − i, from j + i),
    /// on `stream[j]`, its send after `deps[j]`; `combine`: the received rows are reduced
    /// into the output as they land. Returns each rank's recv (`None` where nothing
    /// arrives).
    #[allow(clippy::too_many_arguments)]
    fn exchange_step(
        &mut self,
        site: u16,
        i: usize,
        streams: &[StreamId],
        rows: &dyn Fn(usize, usize) -> u64,
        deps: &[Vec<OpId>],
        (combine, reverse): (bool, bool),
    ) -> Result<Vec<Option<OpId>>, StrategyError> {
        let n = self.n();
        let tags: Vec<u64> = (0..n).map(|_| self.b.msg_tag()).collect();
        let mut out = vec![None; n];
        for j in 0..n {
            let (to, from) = if reverse {
                ((j + n - i) % n, (j + i) % n)
            } else {
                ((j + i) % n, (j + n - i) % n)
            };
            let (out_rows, in_rows) = (rows(j, to), rows(from, j));
            if out_rows == 0 && in_rows == 0 {
                continue;
            }
            let l = self.b.launch(streams[j]);
            if out_rows > 0 {
                let tg = tag(site, i as u32, to as u32);
                self.transfer((l, streams[j]), to, out_rows, tags[j], None, &deps[j], tg)?;
            }
            if in_rows > 0 {
                let tg = tag(site, i as u32, from as u32);
                let recv = Some(combine);
                out[j] = Some(self.transfer(
                    (l, streams[j]),
                    from,
                    in_rows,
                    tags[from],
                    recv,
                    &[],
                    tg,
                )?);
            }
        }
        Ok(out)
    }

    /// An all-to-all of `rows(src, dst)` rows as one group of P2P calls (NCCL's
    /// all-to-all: every send and receive of a rank posted at once, so they share its
    /// links as flows do, NVLink and NIC traffic side by side), each rank's sends after
    /// `first[r]`; `combine`: received rows reduced as they land. Returns each rank's
    /// last recv.
    fn all_to_all(
        &mut self,
        site: u16,
        streams: &[StreamId],
        rows: &dyn Fn(usize, usize) -> u64,
        first: &[Vec<OpId>],
        combine: bool,
    ) -> Result<Vec<Option<OpId>>, StrategyError> {
        let n = self.n();
        // tags[src][dst]
        let tags: Vec<Vec<u64>> = (0..n)
            .map(|_| (0..n).map(|_| self.b.msg_tag()).collect())
            .collect();
        let mut last: Vec<Option<OpId>> = vec![None; n];
        for j in 0..n {
            let active = (1..n).any(|i| rows(j, (j + i) % n) > 0 || rows((j + n - i) % n, j) > 0);
            if !active {
                continue;
            }
            let l = self.b.launch(streams[j]);
            for i in 1..n {
                let to = (j + i) % n;
                let out_rows = rows(j, to);
                if out_rows > 0 {
                    let tg = tag(site, i as u32, to as u32);
                    self.transfer(
                        (l, streams[j]),
                        to,
                        out_rows,
                        tags[j][to],
                        None,
                        &first[j],
                        tg,
                    )?;
                }
            }
            for i in 1..n {
                let from = (j + n - i) % n;
                let in_rows = rows(from, j);
                if in_rows > 0 {
                    let tg = tag(site, i as u32, from as u32);
                    let recv = Some(combine);
                    let msg = tags[from][j];
                    last[j] =
                        Some(self.transfer((l, streams[j]), from, in_rows, msg, recv, &[], tg)?);
                }
            }
        }
        Ok(last)
    }

    /// The router on every rank after `start[r]`: a (T × hidden) · (hidden × experts)
    /// GEMM.
    fn routers(&mut self, start: &[Vec<OpId>]) -> Result<Vec<Vec<OpId>>, StrategyError> {
        let site = self.site("router");
        let (t, h, e) = (self.s.tokens, self.s.hidden, self.s.experts);
        (0..self.n())
            .map(|r| {
                Ok(self
                    .gemm(r, site, 0, 1, (t, e, h), &start[r])?
                    .into_iter()
                    .collect())
            })
            .collect()
    }
}

/// Streams of the members `ranks` (compute, dispatch, and a combine of its own unless
/// `sequential` runs both all-to-alls on one), declared on `b`.
pub fn declare(b: &mut PlanBuilder, ranks: &[u32], strategy: Strategy) -> Members {
    let apart = strategy != Strategy::Sequential;
    let mut st = Members {
        ranks: ranks.to_vec(),
        ..Members::default()
    };
    for &r in ranks {
        st.compute.push(b.stream(r, "compute", StreamKind::Compute));
        let d = b.stream(r, "dispatch", StreamKind::Comm);
        st.dispatch.push(d);
        st.combine.push(if apart {
            b.stream(r, "combine", StreamKind::Comm)
        } else {
            d
        });
    }
    st
}

/// The MoE block under `strategy` (see the module's documentation).
pub fn build(s: &MoeShape, strategy: Strategy) -> Result<Plan, StrategyError> {
    check(strategy, s)?;
    let n = s.ep as usize;
    let mut b = PlanBuilder::new(s.ep).without_dataflow().with_op_limit_at(
        crate::plan::op_limit_at(crate::plan::LAYER_BYTES_PER_OP),
        crate::plan::LAYER_BYTES_PER_OP,
    );
    let ranks: Vec<u32> = (0..s.ep).collect();
    let st = declare(&mut b, &ranks, strategy);
    // Model FLOPs over every rank; the backward runs every GEMM again for the input
    // gradients and once more for the weights'.
    let passes = if s.backward { 3.0 } else { 1.0 };
    b.add_model_flops(passes * forward_flops(s, s.tokens as f64 * n as f64));
    let none = vec![Vec::new(); n];
    let ends = forward(&mut b, s, &st, strategy, &none)?;
    if s.backward {
        backward(&mut b, s, &st, strategy, &ends)?;
    }
    Ok(b.finish()?)
}

/// The block's forward on `members` under `strategy` inside a larger plan, member j
/// starting after `start[j]` (the router is its first op, on its compute stream).
/// Returns each member's ops that end the block there (its last compute op and the
/// combine's last receive).
pub fn forward(
    b: &mut PlanBuilder,
    s: &MoeShape,
    members: &Members,
    strategy: Strategy,
    start: &[Vec<OpId>],
) -> Result<Vec<Vec<OpId>>, StrategyError> {
    let mut c = Ctx {
        b,
        s,
        st: members,
        phase: "fwd",
        last: Vec::new(),
    };
    let router = c.routers(start)?;
    pass(&mut c, strategy, &router)?;
    Ok((0..c.n()).map(|r| c.ends(r)).collect())
}

/// The block's backward on `members` (the output gradient there on member j after
/// `start[j]`), then its weight gradients. Returns each member's ops that end it (the
/// input gradient's last receive and the last compute op, the weight gradients
/// included: later ops of the compute stream follow them anyway).
pub fn backward(
    b: &mut PlanBuilder,
    s: &MoeShape,
    members: &Members,
    strategy: Strategy,
    start: &[Vec<OpId>],
) -> Result<Vec<Vec<OpId>>, StrategyError> {
    let n = members.ranks.len();
    let mut c = Ctx {
        b,
        s,
        st: members,
        phase: "bwd",
        last: Vec::new(),
    };
    pass(&mut c, strategy, start)?;
    // The weight gradients last: they feed no message, so they fill the time the last
    // gradients travel (sequential runs them before its final all-to-all instead).
    if strategy != Strategy::Sequential {
        for r in 0..n {
            c.wgrads(r, n as u64 * s.rows_to(r, s.tokens))?;
        }
    }
    Ok((0..n).map(|r| c.ends(r)).collect())
}

/// The model FLOPs of one forward (router, routed experts, shared experts) over `tokens`.
fn forward_flops(s: &MoeShape, tokens: f64) -> f64 {
    let h = s.hidden as f64;
    2.0 * tokens * h * s.experts as f64
        + 2.0 * tokens * s.top_k as f64 * h * (s.expert_fc1 + s.expert_ffn) as f64
        + 2.0 * tokens * h * (s.shared_fc1 + s.shared_ffn) as f64
}

/// One pass (the context's phase) under `strategy`, each rank starting after `start[r]`.
fn pass(c: &mut Ctx, strategy: Strategy, start: &[Vec<OpId>]) -> Result<(), StrategyError> {
    match strategy {
        Strategy::Sequential => sequential(c, start),
        Strategy::Chunked(k) => chunked(c, start, k as u64),
        Strategy::FlashEp(g) => flash_ep(c, start, g as usize),
        Strategy::Flash => flash_ep(c, start, 1),
        _ => unreachable!("check refused it"),
    }
}

/// The sites of a pass's two all-to-alls: rows to the experts, then back. In the
/// forward the dispatch and the combine; in the backward the combine's backward (the
/// output gradients to the experts) and the dispatch's (the input gradients back).
fn in_out_sites(c: &mut Ctx) -> (u16, u16) {
    if c.phase == "bwd" {
        (c.site("combine"), c.site("dispatch"))
    } else {
        (c.site("dispatch"), c.site("combine"))
    }
}

fn sequential(c: &mut Ctx, router: &[Vec<OpId>]) -> Result<(), StrategyError> {
    let n = c.n();
    let s = c.s;
    let t = s.tokens;
    let rows = |src: usize, dst: usize| if src == dst { 0 } else { s.rows_to(dst, t) };
    let (dsite, csite) = in_out_sites(c);
    let streams = c.st.dispatch.clone();
    let got = c.all_to_all(dsite, &streams, &rows, router, false)?;
    let mut outs = Vec::with_capacity(n);
    for (r, g) in got.iter().enumerate() {
        // Every row routed here, its own included.
        let mine = n as u64 * s.rows_to(r, t);
        let deps: Vec<OpId> = g.iter().copied().chain(router[r].clone()).collect();
        let mut out: Vec<OpId> = c.ffn(r, false, mine, 0, &deps)?.into_iter().collect();
        if c.phase == "bwd" {
            // Nothing overlaps: the weight gradients before the gradients go back.
            c.wgrads(r, mine)?;
            out.extend(c.last[c.st.compute[r] as usize]);
        }
        outs.push(out);
    }
    let back = |src: usize, dst: usize| rows(dst, src);
    let done = c.all_to_all(csite, &streams, &back, &outs, true)?;
    for (r, d) in done.iter().enumerate() {
        let deps: Vec<OpId> = d.iter().copied().chain(outs[r].clone()).collect();
        c.ffn(r, true, t, 0, &deps)?;
    }
    Ok(())
}

fn chunked(c: &mut Ctx, router: &[Vec<OpId>], k: u64) -> Result<(), StrategyError> {
    let n = c.n();
    let s = c.s;
    let t = s.tokens / k;
    let rows = |src: usize, dst: usize| if src == dst { 0 } else { s.rows_to(dst, t) };
    let back = |src: usize, dst: usize| rows(dst, src);
    let (dsite, csite) = in_out_sites(c);
    let (dstreams, cstreams) = (c.st.dispatch.clone(), c.st.combine.clone());
    // The shared experts first, beside the first chunk's dispatch.
    for (r, deps) in router.iter().enumerate() {
        c.ffn(r, true, s.tokens, 0, deps)?;
    }
    for chunk in 0..k {
        let got = c.all_to_all(dsite, &dstreams, &rows, router, false)?;
        let mut outs = Vec::with_capacity(n);
        for (r, g) in got.iter().enumerate() {
            let mine = n as u64 * s.rows_to(r, t);
            let deps: Vec<OpId> = g.iter().copied().collect();
            outs.push(
                c.ffn(r, false, mine, chunk as u32, &deps)?
                    .into_iter()
                    .collect::<Vec<_>>(),
            );
        }
        c.all_to_all(csite, &cstreams, &back, &outs, true)?;
    }
    Ok(())
}

fn flash_ep(c: &mut Ctx, router: &[Vec<OpId>], group: usize) -> Result<(), StrategyError> {
    let n = c.n();
    let s = c.s;
    let t = s.tokens;
    let rows = |src: usize, dst: usize| if src == dst { 0 } else { s.rows_to(dst, t) };
    let back = |src: usize, dst: usize| rows(dst, src);
    let (dsite, csite) = in_out_sites(c);
    let (dstreams, cstreams) = (c.st.dispatch.clone(), c.st.combine.clone());
    // The dispatch: one P2P call per step, each after the router; `arrived[i][r]`: the
    // recv of step i on rank r.
    let mut arrived: Vec<Vec<Option<OpId>>> = vec![vec![None; n]];
    for i in 1..n {
        arrived.push(c.exchange_step(dsite, i, &dstreams, &rows, router, (false, false))?);
    }
    // Compute: shared experts, then the sources' tokens in arrival order, `group`
    // arrivals per grouped GEMM, own last.
    // `done[i][r]`: the FC2 on rank r that finishes the tokens of its step i.
    let mut done: Vec<Vec<Vec<OpId>>> = vec![vec![Vec::new(); n]; n];
    let group = group.max(1);
    for r in 0..n {
        c.ffn(r, true, t, 0, &router[r])?;
        let mut i = 1;
        while i < n {
            let steps = i..(i + group).min(n);
            let deps: Vec<OpId> = steps.clone().filter_map(|j| arrived[j][r]).collect();
            let rows = steps.len() as u64 * s.rows_to(r, t);
            let src = (r + n - i) % n;
            let out: Vec<OpId> = c
                .ffn(r, false, rows, src as u32, &deps)?
                .into_iter()
                .collect();
            for j in steps {
                done[j][r] = out.clone();
            }
            i += group;
        }
        c.ffn(r, false, s.rows_to(r, t), r as u32, &router[r])?;
    }
    // The combine: step i sends source r − i its outputs as soon as they are done.
    for (i, deps) in done.iter().enumerate().skip(1) {
        c.exchange_step(csite, i, &cstreams, &back, deps, (true, true))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
