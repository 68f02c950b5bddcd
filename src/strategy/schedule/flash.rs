//! Flash-Overlap: the all-gather and the reduce-scatter decomposed into P2P ring
//! messages, each step's GEMM on the slice that just arrived (Flash-AG) or the partial
//! the running sum needs next, own slice last (Flash-RS), so no communication is left
//! after the last GEMM but one message and one add. `query-split` and `flash-a2a` use
//! them at their tensor-parallel sites.

use super::{Ag, BeforePartial, Blocks, Rs};
use crate::plan::{BufId, OpId, OpIo, PlanBuilder, Region};
use crate::scenario::Strategy;
use crate::strategy::StrategyError;
use crate::strategy::steps::*;

/// Flash-AG and its GEMMs.
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
    Ok(())
}

/// Flash-RS (and, with `barrier`, the permute loop's reduce-scatter), with
/// `before(b, r, j)` called before each partial GEMM.
pub fn reduce_scatter(
    b: &mut PlanBuilder,
    c: &Rs<'_>,
    before: &mut BeforePartial<'_>,
) -> Result<Vec<Option<OpId>>, StrategyError> {
    let Rs {
        st,
        strategy,
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
    Ok(done)
}
