//! What the host reference and the GPU executor share about a plan's data: the key of
//! a buffer's random contents and where the rows of a rank's result come from. Neither
//! executor imports the other; both import this.

use crate::plan::{Plan, Region};

/// A stable 64-bit key for a buffer's random contents (FNV-1a of the name, and the rank
/// for rank-local data), shared by the lowering and the reference.
pub fn data_key(name: &str, rank: Option<u32>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |b: u8| {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    };
    for &b in name.as_bytes() {
        eat(b);
    }
    if let Some(r) = rank {
        eat(0xff);
        for b in r.to_le_bytes() {
            eat(b);
        }
    }
    h
}

/// Where the rows of a rank's result come from: result row → reference row. Rows computed
/// from the global input `x` keep its rows' places ([`Plan::global_rows`]); a plan with
/// no global input (`gemm-rs`: rank-local inputs) keeps its own row order, which the
/// reference shares.
#[derive(Debug, Clone, PartialEq)]
pub struct RowMap {
    /// (plan row, reference row, rows), sorted; empty: identity.
    pub(crate) runs: Vec<(u64, u64, u64)>,
}

impl RowMap {
    pub fn of(plan: &Plan) -> RowMap {
        RowMap {
            runs: plan.global_rows("x"),
        }
    }

    /// The rows of `r` as (plan row, reference row, rows) pieces, contiguous on both
    /// sides; `None` when a row of `r` holds no token.
    pub fn pieces(&self, r: &Region) -> Option<Vec<(u64, u64, u64)>> {
        let b = r.blocks.max(1) as u64;
        let per = r.block_rows();
        let mut out = Vec::new();
        for j in 0..b {
            let (mut at, end) = (r.row0 + j * r.stride_rows, r.row0 + j * r.stride_rows + per);
            if self.runs.is_empty() {
                out.push((at, at, per));
                continue;
            }
            while at < end {
                let i = self.runs.partition_point(|&(s, _, _)| s <= at);
                let &(s, g, n) = self.runs.get(i.checked_sub(1)?)?;
                if at >= s + n {
                    return None;
                }
                let len = (s + n).min(end) - at;
                out.push((at, g + (at - s), len));
                at += len;
            }
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_differ_by_name_and_rank() {
        assert_ne!(data_key("x", None), data_key("x", Some(0)));
        assert_ne!(data_key("w_fc1", Some(0)), data_key("w_fc1", Some(1)));
        assert_eq!(data_key("x", None), data_key("x", None));
    }
}
