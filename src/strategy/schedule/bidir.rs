//! The bidirectional permute loop: the permute loop's slices moved both ways around the
//! ring, half the hops each.

use super::{Ag, Blocks, Rs, per_rank};
use crate::plan::{BufId, BufInit, OpId, OpIo, PlanBuilder, Region};
use crate::strategy::StrategyError;
use crate::strategy::steps::*;

/// Bidirectional permute-loop all-gather and GEMMs.
pub fn all_gather(b: &mut PlanBuilder, c: &Ag<'_>, out: &mut Blocks) -> Result<(), StrategyError> {
    let Ag {
        st,
        strategy,
        site_name,
        site,
        s,
        n,
        rows,
        shard,
        x,
        after,
        gemm: gemm_op,
        ..
    } = *c;
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
    Ok(())
}

/// Bidirectional permute-loop GEMMs and reduce-scatter.
pub fn reduce_scatter(b: &mut PlanBuilder, c: &Rs<'_>) -> Result<Vec<Option<OpId>>, StrategyError> {
    let Rs {
        st,
        strategy,
        site_name,
        site,
        s,
        n,
        shard,
        p,
        piece,
        add,
        gemm: gemm_op,
        ..
    } = *c;
    let staging = |b: &mut PlanBuilder| c.staging(b);
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
    Ok(own)
}
