//! One file per overlap schedule, each holding its all-gather (followed by the site's
//! column-parallel GEMMs) and its reduce-scatter (after the row-parallel partial
//! GEMMs). `sites.rs` declares a site's buffers and GEMMs and hands them here as an
//! [`Ag`] or [`Rs`]; the steps the schedules are built of are `steps.rs`'.

pub mod bidir;
pub mod chunked;
pub mod direct;
pub mod flash;
pub mod permute;

pub use super::sites::{BeforePartial, Blocks, per_rank, piece_row};
use super::steps::RankStreams;
use super::{MlpShape, StrategyError};
use crate::plan::{BufId, BufInit, OpId, OpKind, OpTag, PlanBuilder};
use crate::scenario::Strategy;

/// The GEMM of token block `j` on member `r` after `deps`, tagged `t`.
pub type AgGemm<'a> =
    dyn Fn(&mut PlanBuilder, usize, usize, &[OpId], OpTag) -> Result<OpId, StrategyError> + 'a;

/// An all-gather site: the sequence-sharded input `x` gathered, each block multiplied
/// by `gemm` once present; the schedule records when each block's GEMM is done.
#[derive(Clone, Copy)]
pub struct Ag<'a> {
    pub st: &'a RankStreams,
    pub strategy: Strategy,
    pub site_name: &'a str,
    pub site: u16,
    pub s: &'a MlpShape,
    /// Members.
    pub n: u64,
    /// Token blocks.
    pub nb: u64,
    /// Rows of a token block.
    pub rows: u64,
    /// Rows of a member's shard.
    pub shard: u64,
    /// Each member's input buffer (gathered in place).
    pub x: &'a [BufId],
    /// What produces each member's shard (`None`: an input).
    pub after: &'a [Option<OpId>],
    pub gemm: &'a AgGemm<'a>,
}

/// The partial GEMM of token block `j` on member `r`, tagged `t`, after its input and
/// `extra`.
pub type RsGemm<'a> =
    dyn Fn(&mut PlanBuilder, usize, usize, OpTag, Option<OpId>) -> Result<OpId, StrategyError> + 'a;

/// A reduce-scatter site: partial sums `p` of every token block, reduced so that each
/// member ends with its own shard's rows; the schedule returns, per member, the op that
/// ends its site.
#[derive(Clone, Copy)]
pub struct Rs<'a> {
    pub st: &'a RankStreams,
    pub strategy: Strategy,
    pub site_name: &'a str,
    pub site: u16,
    pub s: &'a MlpShape,
    pub n: u64,
    pub nb: u64,
    pub rows: u64,
    pub shard: u64,
    /// Each member's partial sums (its shard's rows of them are its result).
    pub p: &'a [BufId],
    /// Bytes of one member's slice (what the P2P schedules move per message).
    pub piece: u64,
    /// A slice-sized add.
    pub add: OpKind,
    pub gemm: &'a RsGemm<'a>,
}

impl Rs<'_> {
    /// `r_<site>`: where the P2P schedules land the running sums.
    pub fn staging(&self, b: &mut PlanBuilder) -> Vec<BufId> {
        per_rank(
            b,
            self.st,
            &format!("r_{}", self.site_name),
            self.s.tokens,
            self.s.hidden,
            self.s.dtype,
            |_| BufInit::Poison,
        )
    }
}
