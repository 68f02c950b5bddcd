//! Ulysses sequence parallelism around the attention: the all-to-alls over the U
//! tensor-parallel groups (heads to sequence and back), sequential or decomposed into
//! P2P messages (`flash-a2a`), and the attention between them.

use super::*;

impl Ctx<'_> {
    /// The Ulysses all-to-all's strategy: the `a2a` site key, else `flash-a2a` for
    /// flash-a2a runs and `sequential` otherwise.
    pub(super) fn a2a_strategy(&self) -> Strategy {
        self.sites
            .get("a2a")
            .copied()
            .unwrap_or(match self.strategy {
                Strategy::FlashA2a => Strategy::FlashA2a,
                _ => Strategy::Sequential,
            })
    }

    /// Bytes one rank sends each Ulysses peer of its QKV (its tokens, the peer's heads).
    pub(super) fn qkv_piece(&self) -> u64 {
        let s = self.s;
        let u = s.ulysses as u64;
        s.tokens() * (s.qkv_width() / s.ranks as u64) / u * s.dtype.bytes()
    }

    /// Bytes one rank sends each Ulysses peer of the attention output (or its gradient).
    pub(super) fn out_piece(&self) -> u64 {
        let s = self.s;
        let u = s.ulysses as u64;
        s.tokens() * (s.hidden / s.ranks as u64) / u * s.dtype.bytes()
    }

    /// Built-rank index of member `j` of the Ulysses group of replica `d`, tensor rank `t`.
    pub(super) fn uidx(&self, d: usize, j: usize, t: usize) -> usize {
        let (u, tp) = (self.s.ulysses as usize, self.tp());
        (d * u + j) * tp + t
    }

    /// Step `x.step` = i of a pairwise exchange in the Ulysses group of (replica d,
    /// tensor rank t) for member j: one launch on its comm stream sending `x.piece` bytes
    /// to member j+i (after `deps`) and receiving as many from j−i. `tags[m]`: member m's
    /// send tag of this step. Returns the recv.
    pub(super) fn ulysses_exchange(
        &mut self,
        x: Exchange,
        (d, j, t): (usize, usize, usize),
        tags: &[u64],
        deps: &[OpId],
    ) -> Result<OpId, StrategyError> {
        let u = self.s.ulysses as usize;
        let i = x.step;
        let (to, from) = ((j + i) % u, (j + u - i) % u);
        let r = self.uidx(d, j, t);
        let (rt, rf) = (
            self.st.ranks[self.uidx(d, to, t)],
            self.st.ranks[self.uidx(d, from, t)],
        );
        let l = self.b.launch_fused(self.st.comm[r], x.fused);
        let tg = OpTag {
            site: x.site,
            step: i as u32,
            slice: to as u32,
        };
        let send = OpKind::Send {
            peer: rt,
            bytes: x.piece,
            tag: tags[j],
        };
        self.b.add(l, send, deps, tg)?;
        let recv = OpKind::Recv {
            peer: rf,
            bytes: x.piece,
            tag: tags[from],
            accumulate: false,
        };
        let slice = OpTag {
            slice: from as u32,
            ..tg
        };
        Ok(self.b.add(l, recv, &[], slice)?)
    }

    /// An all-to-all over every Ulysses group in u−1 pairwise steps (step i: send `piece`
    /// bytes to member j+i, receive as many from j−i) on the comm streams, each rank's
    /// first send after `first[r]`; `fused`: one kernel (NCCL's all-to-all: later steps
    /// pay the step latency), else one P2P call per step. Returns each rank's last recv.
    pub(super) fn a2a(
        &mut self,
        site: &str,
        piece: u64,
        first: &PerRank,
        fused: bool,
    ) -> Result<PerRank, StrategyError> {
        let site = self.b.site(site);
        let (u, tp) = (self.s.ulysses as usize, self.tp());
        let replicas = self.groups.len() / u;
        let mut out = first.clone();
        for d in 0..replicas {
            for t in 0..tp {
                for i in 1..u {
                    let tags: Vec<u64> = (0..u).map(|_| self.b.msg_tag()).collect();
                    for j in 0..u {
                        let r = self.uidx(d, j, t);
                        let deps: Vec<OpId> = if i == 1 {
                            first[r].into_iter().collect()
                        } else {
                            Vec::new()
                        };
                        let x = Exchange {
                            site,
                            step: i,
                            piece,
                            fused: fused && i > 1,
                        };
                        out[r] = Some(self.ulysses_exchange(x, (d, j, t), &tags, &deps)?);
                    }
                }
            }
        }
        Ok(out)
    }

    /// The all-to-all of a site's output (`bl`, cut in token blocks): `sequential`, one
    /// all-to-all after the last block; `flash-a2a`, one per block in the order the
    /// blocks are produced, each sent as soon as its block is (every block's share of
    /// `piece`, one P2P call per step). Returns each rank's last recv.
    pub(super) fn a2a_blocks(
        &mut self,
        site: &str,
        piece: u64,
        bl: &Blocks,
    ) -> Result<PerRank, StrategyError> {
        if self.a2a_strategy() != Strategy::FlashA2a {
            return self.a2a(site, piece, &last(bl), true);
        }
        let nb = bl.ready.first().map_or(1, Vec::len);
        // Production order of rank 0's blocks; every member of a Ulysses group has the
        // same tensor rank, so the same order.
        let mut out: PerRank = vec![None; self.n()];
        let mut order: Vec<Vec<(Option<OpId>, usize)>> = bl
            .ready
            .iter()
            .map(|r| r.iter().copied().enumerate().map(|(j, d)| (d, j)).collect())
            .collect();
        for o in &mut order {
            o.sort_unstable();
        }
        for k in 0..nb {
            let first: PerRank = order.iter().map(|o| o[k].0).collect();
            let done = self.a2a(site, piece / nb as u64, &first, false)?;
            for (o, d) in out.iter_mut().zip(done) {
                *o = later(*o, d);
            }
        }
        Ok(out)
    }

    /// Ulysses attention over the whole sequence with heads/(tp·u) heads, then the
    /// all-to-all back to sequence shards. `sequential`: the whole attention, then one
    /// all-to-all. `flash-a2a`: the attention per destination's query chunk (own chunk
    /// first, then j+1, j+2, …; causal: chunk c sees keys up to its end), each chunk sent
    /// to its owner as soon as it is computed. Returns each rank's last recv.
    pub(super) fn ulysses_attention(&mut self, q: &PerRank) -> Result<PerRank, StrategyError> {
        let s = *self.s;
        let piece = self.out_piece();
        if self.a2a_strategy() != Strategy::FlashA2a {
            let a = self.attention("fwd.attn", false, q)?;
            return self.a2a("fwd.a2a-out", piece, &a, true);
        }
        let (u, tp) = (s.ulysses as usize, self.tp());
        let chunk = s.seq / u as u64;
        let attn_site = self.b.site("fwd.attn");
        let a2a_site = self.b.site("fwd.a2a-out");
        let replicas = self.groups.len() / u;
        let mut out = q.clone();
        for d in 0..replicas {
            for t in 0..tp {
                // Attention of chunk c on member j (after its QKV arrived).
                let mut attn = vec![vec![0 as OpId; u]; u];
                for (j, row) in attn.iter_mut().enumerate() {
                    let r = self.uidx(d, j, t);
                    for i in 0..u {
                        let c = (j + i) % u;
                        // Without the mask every chunk sees the whole sequence.
                        let kv = if s.causal {
                            (c as u64 + 1) * chunk
                        } else {
                            s.seq
                        };
                        let kind = OpKind::Attention(crate::cost::Attention {
                            bh: s.batch * s.heads / (s.ranks as u64 * u as u64),
                            seq_q: chunk.min(u32::MAX as u64) as u32,
                            seq_kv: kv.min(u32::MAX as u64) as u32,
                            head_dim: s.head_dim().min(u32::MAX as u64) as u32,
                            causal: s.causal,
                            backward: false,
                            dtype: s.dtype,
                        });
                        let deps: Vec<OpId> = q[r].into_iter().collect();
                        row[c] = self.b.single(
                            self.st.compute[r],
                            kind,
                            &deps,
                            OpTag {
                                site: attn_site,
                                step: i as u32,
                                slice: c as u32,
                            },
                        )?;
                    }
                }
                // Step i: chunk j+i goes to its owner; chunk j arrives from j−i.
                for i in 1..u {
                    let tags: Vec<u64> = (0..u).map(|_| self.b.msg_tag()).collect();
                    for j in 0..u {
                        let r = self.uidx(d, j, t);
                        let x = Exchange {
                            site: a2a_site,
                            step: i,
                            piece,
                            fused: false,
                        };
                        let deps = [attn[j][(j + i) % u]];
                        out[r] = Some(self.ulysses_exchange(x, (d, j, t), &tags, &deps)?);
                    }
                }
            }
        }
        Ok(out)
    }
}
