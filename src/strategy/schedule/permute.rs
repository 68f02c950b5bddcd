//! The permute loop (Wang et al.): per iteration, compute one slice while the slice is
//! permuted one hop around the ring, with a barrier between iterations. Its
//! reduce-scatter is Flash-RS's ring with that barrier (`flash::reduce_scatter_with`).

use super::{Ag, BeforePartial, Blocks, Rs};
use crate::plan::{OpId, PlanBuilder, Region};
use crate::strategy::StrategyError;
use crate::strategy::steps::*;

/// Permute-loop all-gather and GEMMs.
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
    Ok(())
}

/// The permute loop's reduce-scatter: Flash-RS's ring with a barrier per iteration
/// (partial k+1 issued only after the add of step k).
pub fn reduce_scatter(
    b: &mut PlanBuilder,
    c: &Rs<'_>,
    before: &mut BeforePartial<'_>,
) -> Result<Vec<Option<OpId>>, StrategyError> {
    super::flash::reduce_scatter(b, c, before)
}
