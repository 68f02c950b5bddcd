//! Direct exchanges: every rank sends its shard (all-gather) or each owner's partial
//! (reduce-scatter) straight to the rank that needs it, one destination per step.

use super::{Ag, Blocks, Rs};
use crate::plan::{BufId, OpId, OpIo, PlanBuilder, Region};
use crate::strategy::StrategyError;
use crate::strategy::steps::*;

/// Direct all-gather and GEMMs.
pub fn all_gather(b: &mut PlanBuilder, c: &Ag<'_>, out: &mut Blocks) -> Result<(), StrategyError> {
    let Ag {
        st,
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
    Ok(())
}

/// Direct-to-owner GEMMs and reduce-scatter.
pub fn reduce_scatter(b: &mut PlanBuilder, c: &Rs<'_>) -> Result<Vec<Option<OpId>>, StrategyError> {
    let Rs {
        st,
        strategy,
        site_name,
        site,
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
    Ok(done)
}
