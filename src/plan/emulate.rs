//! One rank of a plan, alone: what a single GPU can run of a multi-rank schedule.
//!
//! Every op of the chosen rank keeps its kind, stream, order and data flow; ops on other
//! ranks disappear, and so does the cross-rank half of every transfer. What stands in for
//! a transfer is a choice: nothing (the compute side alone, which shows what slicing a
//! GEMM costs), or a local copy of the same size on the same stream — a recv becomes a
//! copy from a stand-in buffer (`remote_<buf>`, holding the peer's data) into its
//! destination, a send a copy of its source into `sent_<buf>` — which shows what a
//! concurrent copy costs the GEMMs beside it. A dependency on a removed op becomes a
//! dependency on what that op waited for. Each remaining op gets a launch of its own.
//! Buffers that dropped transfers would have written start with random data.

use super::{BufId, BufInit, OpId, OpIo, OpKind, Plan, PlanBuilder, PlanError, Region, StreamId};

/// What replaces a transfer when one rank runs alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StandIn {
    Nothing,
    LocalCopy,
}

impl StandIn {
    pub fn name(self) -> &'static str {
        match self {
            StandIn::Nothing => "none",
            StandIn::LocalCopy => "copy",
        }
    }
    pub fn parse(s: &str) -> Option<StandIn> {
        match s {
            "none" => Some(StandIn::Nothing),
            "copy" => Some(StandIn::LocalCopy),
            _ => None,
        }
    }
}

enum Mapped {
    Op(OpId),
    Gone(Vec<OpId>),
}

/// Rank `rank` of `plan` as a one-rank plan (see the module docs).
pub fn emulate_rank(plan: &Plan, rank: u32, stand_in: StandIn) -> Result<Plan, PlanError> {
    if rank >= plan.ranks {
        return Err(PlanError::StreamRank {
            name: "(emulated rank)".into(),
            rank,
            ranks: plan.ranks,
        });
    }
    let mut b = PlanBuilder::new(1);
    b.add_model_flops(plan.model_flops / plan.ranks.max(1) as f64);
    for s in &plan.sites {
        b.site(s);
    }
    let mut stream_map: Vec<Option<StreamId>> = vec![None; plan.streams.len()];
    for (i, s) in plan.streams.iter().enumerate() {
        if s.rank == rank {
            stream_map[i] = Some(b.stream(0, &s.name, s.kind));
        }
    }
    // With nothing standing in, the rows the transfers would have brought hold random
    // data instead of poison: the kernels that read them then draw the power real data
    // does (a GEMM over poisoned rows, one repeated bit pattern like zeros, ran ~12%
    // faster than over random data on an H200).
    let mut filled = vec![false; plan.buffers.len()];
    if stand_in == StandIn::Nothing && plan.has_dataflow() {
        for (id, o) in plan.ops.iter().enumerate() {
            if let (true, OpIo::Recv { dst }) = (o.rank == rank, plan.io[id]) {
                filled[dst.buf as usize] = true;
            }
        }
    }
    let mut buf_map: Vec<Option<BufId>> = vec![None; plan.buffers.len()];
    for (i, x) in plan.buffers.iter().enumerate() {
        if x.rank == rank {
            let init = if filled[i] { BufInit::Local } else { x.init };
            buf_map[i] = Some(b.buffer(0, &x.name, x.rows, x.cols, x.dtype, init));
        }
    }
    // Stand-in buffers, made on first use, one per original buffer.
    let mut remote: Vec<Option<BufId>> = vec![None; plan.buffers.len()];
    let mut sent: Vec<Option<BufId>> = vec![None; plan.buffers.len()];
    let dataflow = plan.has_dataflow();
    let mut mapped: Vec<Mapped> = Vec::with_capacity(plan.ops.len());
    for (id, o) in plan.ops.iter().enumerate() {
        let mut deps = Vec::new();
        for &d in plan.deps(id as OpId) {
            match &mapped[d as usize] {
                Mapped::Op(n) => deps.push(*n),
                Mapped::Gone(v) => deps.extend_from_slice(v),
            }
        }
        deps.sort_unstable();
        deps.dedup();
        let Some(stream) = stream_map[o.stream as usize] else {
            mapped.push(Mapped::Gone(Vec::new()));
            continue;
        };
        let remap = |r: Region| r.on(buf_map[r.buf as usize].expect("a region on this rank"));
        let kind_io: Option<(OpKind, Option<OpIo>)> = match (o.kind, stand_in) {
            (OpKind::Send { .. } | OpKind::Recv { .. }, StandIn::Nothing) => None,
            (OpKind::Send { bytes, .. }, StandIn::LocalCopy) => {
                let io = if dataflow {
                    let OpIo::Send { src } = plan.io[id] else {
                        unreachable!("validated data flow")
                    };
                    let x = &plan.buffers[src.buf as usize];
                    let s = *sent[src.buf as usize].get_or_insert_with(|| {
                        let n = format!("sent_{}", x.name);
                        b.buffer(0, &n, x.rows, x.cols, x.dtype, BufInit::Poison)
                    });
                    Some(OpIo::Copy {
                        dst: src.on(s),
                        src: remap(src),
                    })
                } else {
                    None
                };
                Some((OpKind::Copy { bytes }, io))
            }
            (OpKind::Recv { bytes, .. }, StandIn::LocalCopy) => {
                let io = if dataflow {
                    let OpIo::Recv { dst } = plan.io[id] else {
                        unreachable!("validated data flow")
                    };
                    let x = &plan.buffers[dst.buf as usize];
                    let s = *remote[dst.buf as usize].get_or_insert_with(|| {
                        let n = format!("remote_{}", x.name);
                        b.buffer(0, &n, x.rows, x.cols, x.dtype, BufInit::Local)
                    });
                    Some(OpIo::Copy {
                        dst: remap(dst),
                        src: dst.on(s),
                    })
                } else {
                    None
                };
                Some((OpKind::Copy { bytes }, io))
            }
            (k, _) => {
                let io = dataflow.then(|| match plan.io[id] {
                    OpIo::Gemm { a, b: w, c } => OpIo::Gemm {
                        a: remap(a),
                        b: buf_map[w as usize].expect("a weight on this rank"),
                        c: remap(c),
                    },
                    OpIo::Add { out, x, y } => OpIo::Add {
                        out: remap(out),
                        x: remap(x),
                        y: remap(y),
                    },
                    OpIo::Activation { out, input, func } => OpIo::Activation {
                        out: remap(out),
                        input: remap(input),
                        func,
                    },
                    OpIo::Copy { dst, src } => OpIo::Copy {
                        dst: remap(dst),
                        src: remap(src),
                    },
                    OpIo::Send { .. } | OpIo::Recv { .. } => unreachable!("kind checked"),
                });
                Some((k, io))
            }
        };
        match kind_io {
            None => mapped.push(Mapped::Gone(deps)),
            Some((kind, io)) => {
                let n = b.single(stream, kind, &deps, o.tag)?;
                if let Some(io) = io {
                    b.set_io(n, io);
                }
                mapped.push(Mapped::Op(n));
            }
        }
    }
    if let Some(&out) = plan.outputs.get(rank as usize) {
        b.output(out.on(buf_map[out.buf as usize].expect("an output on this rank")));
    }
    b.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::{Strategy, Workload};

    /// With nothing standing in, every kernel of the emulated rank reads data (no
    /// poisoned row reaches its result), so it runs at the power real data draws; with
    /// copies standing in, the inputs keep their own init.
    #[test]
    fn emulated_ranks_compute_over_data_not_poison() {
        let mut sc = crate::config::load_scenario("default").unwrap();
        sc.model.hidden = 16;
        sc.model.ffn = 24;
        sc.parallel.tp = 4;
        sc.batch = 1;
        sc.seq = 48;
        for w in [Workload::AgGemm, Workload::GemmRs, Workload::Mlp] {
            for s in [Strategy::Sequential, Strategy::Chunked(2), Strategy::Flash] {
                let plan = crate::strategy::build(&sc, w, s).unwrap();
                for si in [StandIn::Nothing, StandIn::LocalCopy] {
                    let one = emulate_rank(&plan, 1, si).unwrap();
                    let bufs = crate::exec::host::execute(&one).unwrap();
                    let out = one.outputs[0];
                    let cols = one.buffers[out.buf as usize].cols as usize;
                    let b = out.blocks.max(1) as u64;
                    for j in 0..b {
                        let r0 = (out.row0 + j * out.stride_rows) as usize;
                        let rows = out.block_rows() as usize;
                        let v = &bufs[out.buf as usize][r0 * cols..(r0 + rows) * cols];
                        assert!(
                            v.iter().all(|x| x.is_finite()),
                            "{w:?} {s} {si:?}: poison in the result"
                        );
                    }
                    let x = one.buffers.iter().find(|b| b.name == "x");
                    if let Some(x) = x {
                        let local = x.init == BufInit::Local;
                        assert_eq!(local, si == StandIn::Nothing, "{w:?} {s} {si:?}");
                    }
                }
            }
        }
    }
}
