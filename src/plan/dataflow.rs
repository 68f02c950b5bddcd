//! Data flow of a Plan: which buffer rows each op reads and writes.
//!
//! The simulator needs only shapes and bytes; an executor that computes for real needs to
//! know where the data lives. A strategy may declare per-rank buffers (row-major, `rows ×
//! cols` elements of one dtype) and attach to each op the regions it touches. A plan
//! either has data flow for every op or for none.
//!
//! A region is a set of rows of one buffer: `blocks` runs of `rows / blocks` rows, the
//! runs `stride_rows` apart. One run (`blocks = 1`) is a contiguous row range; a GEMM
//! over several runs executes as one strided-batched call.
//!
//! A buffer's rows need not be in token order: a `Global` input says where each global
//! row sits ([`BufInit::Global`], [`Plan::global_rows`](super::Plan::global_rows)), and
//! every row computed from it keeps its place. Chunked strategies keep their token-sized
//! buffers chunk-major, so that each chunk is one contiguous block (see
//! `strategy::sites::piece_row`).

use super::{OpId, OpKind, PlanError};
use crate::scenario::DType;

pub type BufId = u32;

/// How an executor initialises a buffer before a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BufInit {
    /// Rows `row0 .. row0 + rows` of the global tensor named like the buffer (the same on
    /// every rank, e.g. the sequence-parallel input `x`), laid out as `blocks` runs of
    /// `rows / blocks` consecutive global rows, the first at buffer row `at`, the runs
    /// `stride_rows` apart. The other rows are poisoned.
    Global {
        row0: u64,
        rows: u64,
        at: u64,
        blocks: u32,
        stride_rows: u64,
    },
    /// The whole buffer is this rank's own data (a weight shard, a rank-local input).
    Local,
    /// Poisoned (NaN) before the run, so an element no op writes shows up.
    Poison,
}

impl BufInit {
    /// Global rows `row0 .. row0 + rows` at the same buffer rows.
    pub fn global(row0: u64, rows: u64) -> BufInit {
        BufInit::Global {
            row0,
            rows,
            at: row0,
            blocks: 1,
            stride_rows: rows,
        }
    }

    /// Global rows `row0 .. row0 + place.rows`, in order, at the rows of `place` (its
    /// buffer is ignored).
    pub fn global_at(row0: u64, place: Region) -> BufInit {
        BufInit::Global {
            row0,
            rows: place.rows,
            at: place.row0,
            blocks: place.blocks.max(1),
            stride_rows: place.stride_rows,
        }
    }

    /// For a `Global` init, where its rows sit: (buffer row, global row, rows) per run.
    pub fn global_runs(&self) -> Vec<(u64, u64, u64)> {
        match *self {
            BufInit::Global {
                row0,
                rows,
                at,
                blocks,
                stride_rows,
            } => {
                let b = blocks.max(1) as u64;
                let per = rows / b;
                (0..b)
                    .map(|j| (at + j * stride_rows, row0 + j * per, per))
                    .collect()
            }
            BufInit::Local | BufInit::Poison => Vec::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BufferInfo {
    pub rank: u32,
    pub name: String,
    pub rows: u64,
    pub cols: u64,
    pub dtype: DType,
    pub init: BufInit,
}

impl BufferInfo {
    pub fn bytes(&self) -> u64 {
        self.rows
            .saturating_mul(self.cols)
            .saturating_mul(self.dtype.bytes())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region {
    pub buf: BufId,
    pub row0: u64,
    /// Total rows over all blocks.
    pub rows: u64,
    pub blocks: u32,
    pub stride_rows: u64,
}

impl Region {
    /// A contiguous row range.
    pub fn rows(buf: BufId, row0: u64, rows: u64) -> Region {
        Region {
            buf,
            row0,
            rows,
            blocks: 1,
            stride_rows: rows,
        }
    }

    /// `blocks` runs of `rows / blocks` rows, `stride_rows` apart.
    pub fn strided(buf: BufId, row0: u64, rows: u64, blocks: u32, stride_rows: u64) -> Region {
        if blocks <= 1 || stride_rows == rows / blocks as u64 {
            return Region::rows(buf, row0, rows);
        }
        Region {
            buf,
            row0,
            rows,
            blocks,
            stride_rows,
        }
    }

    /// The same rows in another buffer.
    pub fn on(self, buf: BufId) -> Region {
        Region { buf, ..self }
    }

    pub fn block_rows(&self) -> u64 {
        self.rows / self.blocks.max(1) as u64
    }

    /// Last row touched, plus one.
    pub fn end_row(&self) -> u64 {
        let b = self.blocks.max(1) as u64;
        self.row0 + (b - 1) * self.stride_rows + self.block_rows()
    }
}

/// The regions an op touches, by op kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpIo {
    /// `c = a · b` with `b` a whole `k × n` buffer.
    Gemm {
        a: Region,
        b: BufId,
        c: Region,
    },
    /// `out = x + y`.
    Add {
        out: Region,
        x: Region,
        y: Region,
    },
    /// `out = act(input)`; for gated activations `input` has twice `out`'s columns
    /// (`act(gate) · up`, gate first).
    Activation {
        out: Region,
        input: Region,
        func: crate::scenario::Activation,
    },
    Copy {
        dst: Region,
        src: Region,
    },
    Send {
        src: Region,
    },
    /// Received data is stored into `dst`, or added to it when the recv accumulates.
    Recv {
        dst: Region,
    },
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DataflowError {
    #[error("op {op}: data flow given for some ops but not for this one")]
    Missing { op: OpId },
    #[error("op {op}: region of buffer {buf} does not exist")]
    UnknownBuffer { op: OpId, buf: BufId },
    #[error("op {op}: buffer `{name}` is on rank {buf_rank}, the op on rank {op_rank}")]
    WrongRank {
        op: OpId,
        name: String,
        buf_rank: u32,
        op_rank: u32,
    },
    #[error("op {op}: rows {row0}..{end} of buffer `{name}` exceed its {rows} rows")]
    OutOfBounds {
        op: OpId,
        name: String,
        row0: u64,
        end: u64,
        rows: u64,
    },
    #[error("op {op}: {what}")]
    Shape { op: OpId, what: String },
    #[error("op {op}: data flow kind does not match the op kind")]
    KindMismatch { op: OpId },
    #[error("buffer `{name}` of rank {rank}: {what}")]
    BadInit {
        name: String,
        rank: u32,
        what: String,
    },
}

/// Check that every `Global` init's runs lie within its buffer.
pub(super) fn check_inits(bufs: &[BufferInfo]) -> Result<(), DataflowError> {
    for b in bufs {
        if let BufInit::Global {
            rows,
            blocks,
            stride_rows,
            ..
        } = b.init
        {
            let bad = |what: String| DataflowError::BadInit {
                name: b.name.clone(),
                rank: b.rank,
                what,
            };
            let n = blocks.max(1) as u64;
            if rows % n != 0 || (n > 1 && stride_rows < rows / n) {
                return Err(bad(format!(
                    "{rows} global rows in {n} runs {stride_rows} rows apart"
                )));
            }
            if let Some(&(at, _, per)) = b.init.global_runs().last()
                && at + per > b.rows
            {
                return Err(bad(format!(
                    "global rows placed up to row {} of its {} rows",
                    at + per,
                    b.rows
                )));
            }
        }
    }
    Ok(())
}

impl From<DataflowError> for PlanError {
    fn from(e: DataflowError) -> PlanError {
        PlanError::Dataflow(e)
    }
}

/// Check one op's data flow against its kind, shapes and byte counts.
pub(super) fn check_op(
    op: OpId,
    rank: u32,
    kind: &OpKind,
    io: &OpIo,
    bufs: &[BufferInfo],
) -> Result<(), DataflowError> {
    let buf = |r: &Region| -> Result<&BufferInfo, DataflowError> {
        let b = bufs
            .get(r.buf as usize)
            .ok_or(DataflowError::UnknownBuffer { op, buf: r.buf })?;
        if b.rank != rank {
            return Err(DataflowError::WrongRank {
                op,
                name: b.name.clone(),
                buf_rank: b.rank,
                op_rank: rank,
            });
        }
        let blocks = r.blocks.max(1) as u64;
        if r.rows % blocks != 0 || (blocks > 1 && r.stride_rows < r.block_rows()) {
            return Err(DataflowError::Shape {
                op,
                what: format!(
                    "region of `{}`: {} rows in {} blocks {} rows apart",
                    b.name, r.rows, blocks, r.stride_rows
                ),
            });
        }
        if r.end_row() > b.rows {
            return Err(DataflowError::OutOfBounds {
                op,
                name: b.name.clone(),
                row0: r.row0,
                end: r.end_row(),
                rows: b.rows,
            });
        }
        Ok(b)
    };
    let shape = |what: String| DataflowError::Shape { op, what };
    let contiguous = |r: &Region, b: &BufferInfo| {
        if r.blocks > 1 {
            Err(shape(format!("region of `{}` must be contiguous", b.name)))
        } else {
            Ok(())
        }
    };
    let bytes_of = |r: &Region, b: &BufferInfo| r.rows * b.cols * b.dtype.bytes();
    match (*kind, *io) {
        (OpKind::Gemm { m, n, k, .. }, OpIo::Gemm { a, b, c }) => {
            let (ba, bc) = (buf(&a)?, buf(&c)?);
            let bb = bufs
                .get(b as usize)
                .ok_or(DataflowError::UnknownBuffer { op, buf: b })?;
            if bb.rank != rank {
                return Err(DataflowError::WrongRank {
                    op,
                    name: bb.name.clone(),
                    buf_rank: bb.rank,
                    op_rank: rank,
                });
            }
            if a.rows != m || c.rows != m || ba.cols != k || bb.rows != k || bb.cols != n {
                return Err(shape(format!(
                    "GEMM {m}×{n}×{k} against a {}×{} rows of `{}`, b `{}` {}×{}, c {} rows of `{}`",
                    a.rows, ba.cols, ba.name, bb.name, bb.rows, bb.cols, c.rows, bc.name
                )));
            }
            if bc.cols != n || a.blocks != c.blocks {
                return Err(shape(format!(
                    "GEMM output `{}` has {} columns (want {n}) or its blocks differ from the input's",
                    bc.name, bc.cols
                )));
            }
        }
        (OpKind::Elementwise { bytes, .. }, OpIo::Add { out, x, y }) => {
            let (bo, bx, by) = (buf(&out)?, buf(&x)?, buf(&y)?);
            let same = |p: &Region, q: &Region| p.rows == q.rows && p.blocks == q.blocks;
            if !same(&out, &x) || !same(&out, &y) || bo.cols != bx.cols || bo.cols != by.cols {
                return Err(shape("add operands differ in shape".into()));
            }
            if crate::cost::add_traffic(bytes_of(&out, bo)) != bytes {
                return Err(shape(format!(
                    "add of {} B per operand does not move the op's {bytes} B",
                    bytes_of(&out, bo)
                )));
            }
        }
        (OpKind::Elementwise { bytes, .. }, OpIo::Activation { out, input, func }) => {
            let (bo, bi) = (buf(&out)?, buf(&input)?);
            if out.rows != input.rows
                || out.blocks != input.blocks
                || bi.cols != bo.cols * if func.gated() { 2 } else { 1 }
            {
                return Err(shape(format!(
                    "activation `{}` ({} cols) → `{}` ({} cols)",
                    bi.name, bi.cols, bo.name, bo.cols
                )));
            }
            if bytes_of(&out, bo) + bytes_of(&input, bi) != bytes {
                return Err(shape(format!(
                    "activation does not move the op's {bytes} B"
                )));
            }
        }
        (OpKind::Copy { bytes }, OpIo::Copy { dst, src }) => {
            let (bd, bs) = (buf(&dst)?, buf(&src)?);
            contiguous(&dst, bd)?;
            contiguous(&src, bs)?;
            if bytes_of(&dst, bd) != bytes || bytes_of(&src, bs) != bytes {
                return Err(shape(format!("copy regions are not {bytes} B")));
            }
        }
        (OpKind::Send { bytes, .. }, OpIo::Send { src: r })
        | (OpKind::Recv { bytes, .. }, OpIo::Recv { dst: r }) => {
            let b = buf(&r)?;
            contiguous(&r, b)?;
            if bytes_of(&r, b) != bytes {
                return Err(shape(format!(
                    "message of {bytes} B over a region of {} B of `{}`",
                    bytes_of(&r, b),
                    b.name
                )));
            }
        }
        _ => return Err(DataflowError::KindMismatch { op }),
    }
    Ok(())
}
