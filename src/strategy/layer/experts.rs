//! The MoE layers of a mixture-of-experts model inside layers and steps: the MLP block
//! replaced by [`super::super::moe`]'s block over each expert-parallel group of the
//! stage (see [`LayerMoe`]), the expert weights gathered and their gradients
//! reduce-scattered over the expert data-parallel groups.

use super::super::moe::{self, Members, MoeShape};
use super::*;

/// The strategy of the MoE sites (dispatch, experts, combine): the `moe` site key, else
/// the run's strategy where it is one of the block's (`sequential`, `chunked:K`; `flash`
/// is `flash-ep` there, as in workload moe), else `sequential` (every other
/// tensor-parallel strategy leaves the all-to-alls whole).
pub fn moe_strategy(run: Strategy, sites: &BTreeMap<String, Strategy>) -> Strategy {
    sites.get("moe").copied().unwrap_or(match run {
        Strategy::Chunked(k) => Strategy::Chunked(k),
        Strategy::Flash | Strategy::FlashEp(_) => Strategy::FlashEp(1),
        _ => Strategy::Sequential,
    })
}

/// The MoE block as one rank of a layer sees it: its own tokens (the sequence-parallel
/// shard of its tensor-parallel group), the group's routing shares (`shares`, uniform
/// when empty).
pub fn block_shape(s: &LayerShape, m: &LayerMoe, shares: &[f64]) -> MoeShape {
    let ep = m.ep.max(1);
    let shares = if shares.len() == ep as usize {
        shares.to_vec()
    } else {
        vec![1.0 / ep as f64; ep as usize]
    };
    MoeShape {
        ep,
        tokens: s.tokens() / s.ranks.max(1) as u64,
        hidden: s.hidden,
        experts: m.experts,
        top_k: m.top_k,
        expert_fc1: m.expert_fc1,
        expert_ffn: m.expert_ffn,
        shared_fc1: m.shared_fc1,
        shared_ffn: m.shared_ffn,
        dtype: s.dtype,
        shares,
        backward: !s.forward_only,
    }
}

/// Can the MoE sites run `st` on this shape (`sequential`, `chunked:K` with K dividing
/// each rank's tokens, `flash-ep`)? And can the layout hold the experts: `ep` dividing
/// the experts and the stage's ranks.
pub fn check_moe_sites(s: &LayerShape, st: Strategy) -> Result<(), StrategyError> {
    let Some(m) = s.moe else {
        return Ok(());
    };
    let stage = s.ranks as u64 * s.sync() as u64;
    check_div(
        st,
        "stage ranks (tp · ulysses · dp) over ep",
        stage,
        m.ep as u64,
    )?;
    check_div(st, "routed experts over ep", m.experts, m.ep as u64)?;
    moe::check(st, &block_shape(s, &m, &[]))
}

impl Ctx<'_> {
    /// The expert-parallel groups and expert data-parallel groups of a stage whose
    /// held ranks are `rank(i)` for built index i (and beyond: the members a symmetric
    /// plan does not hold), `held` of the stage's `total`.
    pub(super) fn add_moe(
        &mut self,
        shares: &[f64],
        held: usize,
        total: usize,
        rank: &dyn Fn(usize) -> u32,
    ) {
        let Some(m) = self.s.moe else {
            return;
        };
        let strategy = moe_strategy(self.strategy, self.sites);
        let ep = m.ep.max(1) as usize;
        let mut groups = Vec::with_capacity(held / ep);
        for q in 0..held / ep {
            let members: Vec<usize> = (q * ep..(q + 1) * ep).collect();
            let mut g = Members {
                ranks: members.iter().map(|&i| rank(i)).collect(),
                ..Members::default()
            };
            for &i in &members {
                let r = rank(i);
                g.compute.push(self.st.compute[i]);
                let d = self.b.stream(r, "ep-dispatch", StreamKind::Comm);
                g.dispatch.push(d);
                g.combine.push(if strategy == Strategy::Sequential {
                    d
                } else {
                    self.b.stream(r, "ep-combine", StreamKind::Comm)
                });
            }
            groups.push(g);
        }
        let edp_n = total / ep;
        let edp = if edp_n > 1 && !(self.s.forward_only) {
            let comm: Vec<StreamId> = (0..held)
                .map(|i| self.b.stream(rank(i), "edp-comm", StreamKind::Comm))
                .collect();
            (0..ep)
                .map(|e| {
                    let members: Vec<usize> = (0..edp_n).map(|q| q * ep + e).collect();
                    let held_members = members.iter().filter(|&&i| i < held).count();
                    let mut compute: Vec<StreamId> = members
                        .iter()
                        .take(held_members)
                        .map(|&i| self.st.compute[i])
                        .collect();
                    let mut streams: Vec<StreamId> = members
                        .iter()
                        .take(held_members)
                        .map(|&i| comm[i])
                        .collect();
                    compute.resize(edp_n, StreamId::MAX);
                    streams.resize(edp_n, StreamId::MAX);
                    RankStreams {
                        compute,
                        comm: streams,
                        ranks: members.iter().map(|&i| rank(i)).collect(),
                        held: held_members,
                        weights: None,
                        nccl: None,
                    }
                })
                .collect()
        } else {
            Vec::new()
        };
        self.moe = Some(MoeParts {
            shape: block_shape(self.s, &m, shares),
            strategy,
            groups,
            edp,
            late: Vec::new(),
        });
    }

    /// The MoE block's forward from `after` (the norm before it) on every held group;
    /// each rank's next compute op waits for the whole block there.
    pub(super) fn moe_fwd(&mut self, after: &PerRank) -> Result<PerRank, StrategyError> {
        self.moe_pass(after, true)
    }

    /// The MoE block's backward from the output gradient `dy` (its weight gradients
    /// included), then, when this backward syncs, the expert gradients' reduce-scatter
    /// over the expert data-parallel groups (after the backward under `sequential`).
    pub(super) fn moe_bwd(&mut self, dy: &PerRank) -> Result<PerRank, StrategyError> {
        let out = self.moe_pass(dy, false)?;
        // The router's and shared experts' gradients join the layer's bucket.
        for (g, d) in self.grads.iter_mut().zip(&out) {
            *g = later(*g, *d);
        }
        if self.sync && !self.expert_sync_groups().is_empty() {
            let piece = self.expert_piece();
            if self.dp_strategy() == Strategy::Sequential {
                if let Some(p) = self.moe.as_mut() {
                    p.late.push(piece);
                }
            } else {
                self.edp_ring("bwd.edp-rs", piece, &out)?;
            }
        }
        Ok(out)
    }

    fn moe_pass(&mut self, after: &PerRank, forward: bool) -> Result<PerRank, StrategyError> {
        let parts = self.moe.as_ref().ok_or(StrategyError::Unsupported(
            "a MoE layer needs a mixture-of-experts model",
        ))?;
        let ep = parts.shape.ep as usize;
        let mut out = vec![None; self.n()];
        for (q, members) in parts.groups.iter().enumerate() {
            let start: Vec<Vec<OpId>> = (q * ep..(q + 1) * ep)
                .map(|i| {
                    let mut d: Vec<OpId> = after[i].iter().copied().collect();
                    d.append(&mut self.gate[i]);
                    d
                })
                .collect();
            let ends = if forward {
                moe::forward(&mut self.b, &parts.shape, members, parts.strategy, &start)?
            } else {
                moe::backward(&mut self.b, &parts.shape, members, parts.strategy, &start)?
            };
            for (j, e) in ends.into_iter().enumerate() {
                let i = q * ep + j;
                out[i] = e.iter().max().copied().or(after[i]);
                self.gate[i].extend(e);
            }
        }
        Ok(out)
    }

    fn expert_sync_groups(&self) -> &[RankStreams] {
        self.moe.as_ref().map_or(&[], |p| p.edp.as_slice())
    }

    /// Bytes of one rank's share of one MoE layer's expert parameters (or gradients)
    /// in its expert data-parallel group.
    pub(super) fn expert_piece(&self) -> u64 {
        let s = self.s;
        s.moe.map_or(0, |m| {
            m.local_expert_params(s.hidden) / s.expert_sync() as u64 * s.dtype.bytes()
        })
    }

    /// A ring collective of `piece` bytes per step over every expert data-parallel
    /// group on the `edp-comm` streams (the experts' parameter all-gather or gradient
    /// reduce-scatter), each member's first send after `after[i]`. Returns, per built
    /// rank, the ops that end it there.
    pub(super) fn edp_ring(
        &mut self,
        site: &str,
        piece: u64,
        after: &PerRank,
    ) -> Result<Vec<Vec<OpId>>, StrategyError> {
        let mut out: Vec<Vec<OpId>> = after.iter().map(|a| a.iter().copied().collect()).collect();
        let Some(parts) = self.moe.as_ref() else {
            return Ok(out);
        };
        if parts.edp.is_empty() {
            return Ok(out);
        }
        let ep = parts.shape.ep as usize;
        let site = self.b.site(site);
        for (e, g) in parts.edp.iter().enumerate() {
            let first: Vec<Option<OpId>> = (0..g.len())
                .map(|q| (q < g.held).then(|| after[q * ep + e]).flatten())
                .collect();
            let done = sites::bulk_all_gather(&mut self.b, g, site, piece, &first)?;
            for (q, d) in done.into_iter().enumerate().take(g.held) {
                out[q * ep + e] = d.into_iter().collect();
            }
        }
        Ok(out)
    }

    /// The expert gradient buckets a `sequential` backward left, one after another
    /// after `x`.
    pub(super) fn late_expert_buckets(&mut self, x: &PerRank) -> Result<PerRank, StrategyError> {
        let late = self.moe.as_mut().map(|p| std::mem::take(&mut p.late));
        let mut x = x.clone();
        for p in late.into_iter().flatten() {
            let done = self.edp_ring("bwd.edp-rs", p, &x)?;
            x = x
                .iter()
                .zip(&done)
                .map(|(a, d)| d.iter().copied().max().or(*a))
                .collect();
        }
        Ok(x)
    }
}
