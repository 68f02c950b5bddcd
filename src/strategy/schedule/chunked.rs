//! `sequential`, `bulk` and `chunked:K`: the site's collective as ring all-gathers or
//! reduce-scatters of K chunks (K = 1 but for `chunked:K`), each chunk's GEMM after its
//! gather (comm-first) or its reduce-scatter after its GEMM (compute-first), so chunk
//! i's communication overlaps chunk i±1's GEMM.

use super::{Ag, Blocks, Rs, piece_row};
use crate::plan::{OpId, PlanBuilder, Region};
use crate::strategy::StrategyError;
use crate::strategy::steps::*;

/// Comm-first: gather chunk i, then multiply it while chunk i+1 is gathered.
pub fn all_gather(b: &mut PlanBuilder, c: &Ag<'_>, out: &mut Blocks) -> Result<(), StrategyError> {
    let Ag {
        st,
        strategy,
        site,
        s,
        n,
        nb,
        rows,
        x,
        after,
        gemm: gemm_op,
        ..
    } = *c;
    // Comm-first: gather chunk i, then multiply it while chunk i+1 is gathered.
    let p = rows / n;
    let piece = p * s.hidden * s.dtype.bytes();
    for i in 0..nb {
        let at = |r: u64, blk: u64| {
            let row = piece_row(strategy, s.ranks, s.tokens, blk, i);
            Region::rows(x[r as usize], row, p)
        };
        let gathered = ring(b, st, site, piece, false, after, &at)?;
        for (r, &g) in gathered.iter().enumerate().take(n as usize) {
            out.ready[r][i as usize] = Some(gemm_op(
                b,
                r,
                i as usize,
                &deps(g.or(after[r])),
                tag(site, i, i),
            )?);
        }
    }
    Ok(())
}

/// Compute-first: multiply chunk i, then reduce-scatter it while chunk i+1 is multiplied.
pub fn reduce_scatter(b: &mut PlanBuilder, c: &Rs<'_>) -> Result<Vec<Option<OpId>>, StrategyError> {
    let Rs {
        st,
        strategy,
        site,
        s,
        n,
        nb,
        rows,
        p,
        gemm: gemm_op,
        ..
    } = *c;
    // Compute-first: multiply chunk i, then reduce-scatter it while chunk i+1 is
    // multiplied.
    let pr = rows / n;
    let piece = pr * s.hidden * s.dtype.bytes();
    let mut last = vec![None; n as usize];
    for i in 0..nb as usize {
        let mut done = vec![None; n as usize];
        for (r, d) in done.iter_mut().enumerate().take(st.held) {
            *d = Some(gemm_op(b, r, i, tag(site, i as u64, i as u64), None)?);
        }
        let at = |r: u64, blk: u64| {
            let row = piece_row(strategy, s.ranks, s.tokens, blk, i as u64);
            Region::rows(p[r as usize], row, pr)
        };
        let reduced = ring(b, st, site, piece, true, &done, &at)?;
        // The comm stream is in order: the last chunk's ring ends the site.
        for r in 0..n as usize {
            last[r] = reduced[r].or(done[r]);
        }
    }
    Ok(last)
}
