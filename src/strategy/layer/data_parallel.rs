//! Data parallelism, ZeRO-3 style: the parameter all-gathers before the forward GEMMs
//! (bulk, or Flash-fused with them), the weight-gradient GEMMs and their reduce-scatter
//! over the data-parallel group (after the backward, per layer bucket, or Flash-fused
//! with the wgrads).

use super::*;

impl Ctx<'_> {
    /// A weight-gradient GEMM (`rows × cols` of weights, K = the tokens `k`). When this
    /// backward reduces gradients under data-parallel `flash`, it is cut into dp partial
    /// GEMMs, one per owner of a slice of the weight rows, fused with a Flash-RS over
    /// the data-parallel group (the partial for slice j is sent on as soon as it is
    /// computed, the running sum accumulated at each hop); otherwise one GEMM, and the
    /// bucket of the layer is reduced after the layer (`bulk`) or after the backward
    /// (`sequential`).
    pub(super) fn wgrad(
        &mut self,
        site: &str,
        rows: u64,
        cols: u64,
        k: u64,
        after: &PerRank,
    ) -> Result<PerRank, StrategyError> {
        let dp = self.s.sync();
        let done = if self.sync && dp > 1 && self.dp_strategy() == Strategy::Flash {
            let shape = MlpShape {
                ranks: dp,
                tokens: rows,
                hidden: cols,
                fc1_width: cols,
                ffn: k * dp as u64,
                gated: false,
                activation: self.s.activation,
                dtype: self.s.dtype,
            };
            let (tp, built) = (self.tp(), self.groups.len());
            let mut out = vec![None; self.n()];
            let name = format!("{site}.dp-rs");
            for t in 0..tp {
                let g = &self.dp_groups[t];
                let mut input = Blocks::inputs_ready(Strategy::Flash, dp, rows, vec![0; g.len()]);
                input.ready = vec![vec![None; dp as usize]; g.len()];
                for (d, ready) in input.ready.iter_mut().enumerate().take(built) {
                    *ready = vec![after[d * tp + t]; dp as usize];
                }
                let (_, fin) =
                    sites::gemm_rs(&mut self.b, g, Strategy::Flash, &name, &shape, &input)?;
                for d in 0..built {
                    out[d * tp + t] = fin[d];
                }
            }
            out
        } else {
            self.gemm(site, rows, cols, k, after)?
        };
        for (g, d) in self.grads.iter_mut().zip(&done) {
            *g = later(*g, *d);
        }
        Ok(done)
    }

    /// A ring collective over every data-parallel group: `piece` bytes per rank per
    /// step (the all-gather `fwd.dp-ag` of parameters or the reduce-scatter `bwd.dp-rs`
    /// of gradients), each rank's first send after `after[r]`. On NCCL communicators
    /// (`dp_comms`) it runs on their channels after the group's previous collective;
    /// otherwise as one plain ring on the `dp-comm` streams. Returns, per built rank,
    /// the ops that end it there (`after[r]` when dp = 1).
    pub(super) fn dp_ring(
        &mut self,
        site: &str,
        piece: u64,
        after: &PerRank,
    ) -> Result<Vec<Vec<OpId>>, StrategyError> {
        if self.s.sync() <= 1 {
            return Ok(after.iter().map(|a| a.iter().copied().collect()).collect());
        }
        let op = if site.ends_with("dp-rs") {
            CollectiveOp::ReduceScatter
        } else {
            CollectiveOp::AllGather
        };
        let site = self.b.site(site);
        let (tp, built, dp) = (self.tp(), self.groups.len(), self.s.sync() as usize);
        if !self.dp_comms.is_empty() {
            let mut out = vec![Vec::new(); after.len()];
            for t in 0..tp {
                let first: Vec<Option<OpId>> = (0..built).map(|d| after[d * tp + t]).collect();
                let ends = self.dp_comms[t]
                    .ring(&mut self.b, site, op, piece, &first)
                    .map_err(CollectiveError::into_strategy)?;
                for (d, e) in ends.into_iter().enumerate() {
                    out[d * tp + t] = e;
                }
            }
            return Ok(out);
        }
        let mut out: Vec<Vec<OpId>> = after.iter().map(|a| a.iter().copied().collect()).collect();
        for t in 0..tp {
            let mut first = vec![None; dp];
            for (d, f) in first.iter_mut().enumerate().take(built) {
                *f = after[d * tp + t];
            }
            let done =
                sites::bulk_all_gather(&mut self.b, &self.dp_groups[t], site, piece, &first)?;
            for d in 0..built {
                out[d * tp + t] = done[d].into_iter().collect();
            }
        }
        Ok(out)
    }

    /// The next layer's parameters over the data-parallel group (all-gather `site`):
    /// the one prefetched in `pending`, else gathered now after `after`; with
    /// `prefetch_next` (whether the following layer is a MoE one) the following layer's
    /// gather starts after `after` too (into `pending`). The layer's next compute op
    /// waits for its parameters.
    pub(super) fn layer_params(
        &mut self,
        site: &str,
        pending: &mut Option<Vec<Vec<OpId>>>,
        prefetch_next: Option<bool>,
        after: &PerRank,
    ) -> Result<(), StrategyError> {
        let params = match pending.take() {
            Some(g) => g,
            None => self.params_ring(site, self.moe_layer, after)?,
        };
        if let Some(next_moe) = prefetch_next {
            *pending = Some(self.params_ring(site, next_moe, after)?);
        }
        for (g, p) in self.gate.iter_mut().zip(params) {
            g.extend(p);
        }
        Ok(())
    }

    /// One layer's parameter all-gather `site` (a MoE layer's or a dense one's): over
    /// the data-parallel groups, and a MoE layer's experts over the expert
    /// data-parallel groups beside it. Returns per built rank the ops that end it.
    pub(super) fn params_ring(
        &mut self,
        site: &str,
        moe_layer: bool,
        after: &PerRank,
    ) -> Result<Vec<Vec<OpId>>, StrategyError> {
        let mut got = self.dp_ring(site, grad_piece_of(self.s, moe_layer), after)?;
        if moe_layer {
            let experts = site.replace("dp-ag", "edp-ag");
            let piece = self.expert_piece();
            let e = self.edp_ring(&experts, piece, after)?;
            for (g, x) in got.iter_mut().zip(e) {
                g.extend(x);
            }
        }
        Ok(got)
    }

    /// Gradient bytes of the layer being built per rank and ring step: its synced
    /// parameters over tp·dp.
    pub(super) fn grad_piece(&self) -> u64 {
        grad_piece_of(self.s, self.moe_layer)
    }

    /// The fused parameter Flash-AG of a layer's forward (`flash` at the data-parallel
    /// site): each forward weight's column shards are all-gathered over the sync group
    /// in the order the sites use them, each ring's first send after `x`, and the sites'
    /// GEMMs are cut into the weight's column chunks, chunk c after its arrival (own
    /// chunk first). No layer-wide gather waits before the layer.
    pub(super) fn gather_weights(&mut self, x: &PerRank) -> Result<(), StrategyError> {
        let s = *self.s;
        let (h, tp) = (s.hidden, s.ranks as u64);
        let bytes = s.dtype.bytes();
        let sync = s.sync() as u64;
        let weights: [(&'static str, u64); 4] = [
            ("fwd.qkv", h * (s.qkv_width() / tp)),
            ("fwd.proj", h / tp * h),
            ("fwd.fc1", h * (s.fc1_width / tp)),
            ("fwd.fc2", s.ffn / tp * h),
        ];
        let site = self.b.site("fwd.dp-ag");
        let (tpu, built) = (self.tp(), self.groups.len());
        self.fwd_weights.clear();
        for (name, elems) in weights {
            let mut per_rank: Vec<Vec<Option<OpId>>> = vec![vec![None]; self.n()];
            for t in 0..tpu {
                let first: Vec<Option<OpId>> = (0..built).map(|g| x[g * tpu + t]).collect();
                let got = sites::all_gather_steps(
                    &mut self.b,
                    &self.dp_groups[t],
                    site,
                    elems / sync * bytes,
                    &first,
                )?;
                for (g, recvs) in got.into_iter().enumerate() {
                    per_rank[g * tpu + t].extend(recvs.into_iter().map(Some));
                }
            }
            self.fwd_weights.insert(name, per_rank);
        }
        Ok(())
    }

    /// After a layer's (or the head's) backward in the syncing micro-batch: its gradient
    /// bucket's reduce-scatter (`bulk`: now, after its wgrads, beside the next layer's
    /// backward), or one more bucket for after the backward (`sequential`); `flash`
    /// reduced inside the wgrads. Returns `x` (the backward's chain is not delayed).
    pub(super) fn reduce_bucket(
        &mut self,
        dps: Strategy,
        x: &PerRank,
        late: &mut Vec<u64>,
        piece: u64,
    ) -> Result<PerRank, StrategyError> {
        if !self.sync || self.s.sync() <= 1 {
            return Ok(x.clone());
        }
        match dps {
            Strategy::Sequential => late.push(piece),
            Strategy::Flash => {}
            _ => {
                let after = self.grads.clone();
                // The ring's piece: the bucket's bytes over the data-parallel ranks.
                self.dp_ring("bwd.dp-rs", piece, &after)?;
            }
        }
        Ok(x.clone())
    }

    /// Gradient bytes of the LM head per rank and ring step.
    pub(super) fn head_grad_piece(&self) -> u64 {
        self.s.vocab * self.s.hidden / (self.s.ranks as u64 * self.s.sync() as u64)
            * self.s.dtype.bytes()
    }
}

/// Bytes of one rank's share of one layer's gradients (or parameters) in its
/// data-parallel group.
pub(super) fn grad_piece(s: &LayerShape) -> u64 {
    grad_piece_of(s, false)
}

/// [`grad_piece`] of a dense layer or (`moe_layer`) a MoE one.
pub(super) fn grad_piece_of(s: &LayerShape, moe_layer: bool) -> u64 {
    s.synced_params(moe_layer) / (s.ranks as u64 * s.sync() as u64) * s.dtype.bytes()
}

/// The data-parallel site's strategy: the `dp` site key, else `sequential` for
/// sequential runs and `bulk` (the bucketed overlap) for every other. The Flash-fused
/// data parallelism is asked for by name (`dp = flash`): it cuts every forward and wgrad
/// GEMM dp ways, which pays at small dp and costs more than it hides at large dp.
pub fn dp_strategy(run: Strategy, sites: &BTreeMap<String, Strategy>) -> Strategy {
    sites.get("dp").copied().unwrap_or(match run {
        Strategy::Sequential => Strategy::Sequential,
        _ => Strategy::Bulk,
    })
}
