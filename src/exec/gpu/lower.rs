//! Plan → device program, and the run loop.

use super::{GpuError, GpuOptions, GpuRun, data_key};
use crate::plan::{BufInit, LaunchId, NO_PARTNER, OpId, OpIo, OpKind, Plan, Region};
use crate::scenario::Activation;
use flashoverlap_cuda as fc;

const NONE: u32 = u32::MAX;

fn cuda(e: fc::CudaError) -> GpuError {
    GpuError::Cuda(e.to_string())
}

/// A lowered plan.
pub(super) struct Lowered {
    pub program: fc::Program,
    /// Timed span of each op (`NONE` for sends, which take their recv's times).
    pub op_span: Vec<u32>,
}

fn ptr(plan: &Plan, r: Region) -> fc::Ptr {
    fc::Ptr {
        buf: r.buf,
        offset: r.row0 * plan.buffers[r.buf as usize].cols,
    }
}

fn span2(plan: &Plan, r: Region) -> fc::Span2 {
    fc::Span2 {
        ptr: ptr(plan, r),
        stride: r.stride_rows * plan.buffers[r.buf as usize].cols,
    }
}

fn kernel(plan: &Plan, op: OpId) -> Option<fc::Kernel> {
    let io = plan.io[op as usize];
    let cols = |r: Region| plan.buffers[r.buf as usize].cols;
    Some(match io {
        OpIo::Gemm { a, b, c } => {
            let OpKind::Gemm { n, k, .. } = plan.ops[op as usize].kind else {
                return None;
            };
            fc::Kernel::Gemm {
                a: ptr(plan, a),
                b: fc::Ptr { buf: b, offset: 0 },
                c: ptr(plan, c),
                m: a.block_rows(),
                n,
                k,
                batch: a.blocks.max(1),
                stride_a: a.stride_rows * k,
                stride_c: c.stride_rows * n,
            }
        }
        OpIo::Add { out, x, y } => fc::Kernel::Add {
            out: span2(plan, out),
            x: span2(plan, x),
            y: span2(plan, y),
            block_elems: out.block_rows() * cols(out),
            blocks: out.blocks.max(1),
        },
        OpIo::Activation { out, input, func } => fc::Kernel::Act {
            out: ptr(plan, out),
            input: ptr(plan, input),
            block_rows: out.block_rows(),
            blocks: out.blocks.max(1),
            cols: cols(out),
            out_stride_rows: out.stride_rows,
            in_stride_rows: input.stride_rows,
            func: match func {
                Activation::Relu => fc::ActFn::Relu,
                Activation::Gelu | Activation::GeGlu => fc::ActFn::Gelu,
                Activation::Silu | Activation::SwiGlu => fc::ActFn::Silu,
            },
            gated: func.gated(),
        },
        OpIo::Copy { dst, src } => fc::Kernel::Copy {
            dst: ptr(plan, dst),
            src: ptr(plan, src),
            bytes: plan.ops[op as usize].kind.bytes(),
        },
        OpIo::Send { .. } | OpIo::Recv { .. } => return None,
    })
}

/// Lower `plan` onto `devices` GPUs (rank r on GPU r mod devices).
pub(super) fn lower(plan: &Plan, devices: u32) -> Result<Lowered, GpuError> {
    let dev = |rank: u32| rank % devices.max(1);
    let mut p = fc::Program::default();
    for (i, b) in plan.buffers.iter().enumerate() {
        let elems = b.rows * b.cols;
        let init = match b.init {
            BufInit::Poison => fc::Init::Poison,
            BufInit::Local => fc::Init::Random {
                key: data_key(&b.name, Some(b.rank)),
                offset: 0,
                len: elems,
                index0: 0,
            },
            BufInit::Global { row0, rows } => fc::Init::Random {
                key: data_key(&b.name, None),
                offset: row0 * b.cols,
                len: rows * b.cols,
                index0: row0 * b.cols,
            },
        };
        debug_assert_eq!(p.buffers.len(), i);
        p.buffers.push(fc::Buffer {
            device: dev(b.rank),
            elems,
            init,
        });
    }
    p.streams = plan.streams.iter().map(|s| dev(s.rank)).collect();
    // Staging buffer per stream for accumulating recvs (copy in, then add).
    let mut staging = vec![NONE; plan.streams.len()];
    let mut staging_elems = vec![0u64; plan.streams.len()];
    for o in &plan.ops {
        if let OpKind::Recv {
            bytes,
            accumulate: true,
            ..
        } = o.kind
        {
            let s = o.stream as usize;
            staging_elems[s] = staging_elems[s].max(bytes / 2);
        }
    }
    for (s, &e) in staging_elems.iter().enumerate() {
        if e > 0 {
            staging[s] = p.buffers.len() as u32;
            p.buffers.push(fc::Buffer {
                device: p.streams[s],
                elems: e,
                init: fc::Init::Poison,
            });
        }
    }

    let nl = plan.launch_count();
    let n_ops = plan.op_count() as u32;
    // Events: launch l done = l; send op posted / recv op transferred = nl + op.
    p.events = nl as u32 + n_ops;
    let done = |l: LaunchId| l;
    let op_ev = |o: OpId| nl as u32 + o;
    let mut op_span = vec![NONE; plan.op_count()];
    let mut next_span = 0u32;

    // Three issue nodes per launch: S (start: waits, posts, compute), A (recv copies),
    // B (send completion, done). Kahn's algorithm over them.
    let node = |l: usize, phase: usize| 3 * l + phase;
    let mut indeg = vec![0u32; 3 * nl];
    let mut succ: Vec<Vec<u32>> = vec![Vec::new(); 3 * nl];
    let mut edge = |from: usize, to: usize, indeg: &mut Vec<u32>| {
        succ[from].push(to as u32);
        indeg[to] += 1;
    };
    for l in 0..nl {
        edge(node(l, 0), node(l, 1), &mut indeg);
        edge(node(l, 1), node(l, 2), &mut indeg);
        if let Some(n) = plan.next_launch(l as LaunchId) {
            edge(node(l, 2), node(n as usize, 0), &mut indeg);
        }
        for &op in plan.launch_ops(l as LaunchId) {
            for &d in plan.deps(op) {
                let dl = plan.ops[d as usize].launch as usize;
                if dl != l {
                    edge(node(dl, 2), node(l, 0), &mut indeg);
                }
            }
            let partner = plan.partner(op);
            if partner != NO_PARTNER {
                let pl = plan.ops[partner as usize].launch as usize;
                match plan.ops[op as usize].kind {
                    OpKind::Recv { .. } => edge(node(pl, 0), node(l, 1), &mut indeg),
                    OpKind::Send { .. } => edge(node(pl, 1), node(l, 2), &mut indeg),
                    _ => {}
                }
            }
        }
    }
    let mut stack: Vec<u32> = (0..3 * nl as u32)
        .rev()
        .filter(|&v| indeg[v as usize] == 0)
        .collect();
    let mut issued = 0usize;
    while let Some(v) = stack.pop() {
        issued += 1;
        let (l, phase) = ((v / 3) as LaunchId, v % 3);
        let stream = plan.launch_stream(l);
        let ops = plan.launch_ops(l);
        match phase {
            0 => {
                let mut waited: Vec<LaunchId> = Vec::new();
                for &op in ops {
                    for &d in plan.deps(op) {
                        let dl = plan.ops[d as usize].launch;
                        let ds = plan.launch_stream(dl);
                        if ds != stream && !waited.contains(&dl) {
                            waited.push(dl);
                            p.steps.push(fc::Step::Wait {
                                stream,
                                event: done(dl),
                            });
                        }
                    }
                }
                for &op in ops {
                    if let OpKind::Send { .. } = plan.ops[op as usize].kind {
                        p.steps.push(fc::Step::Record {
                            stream,
                            event: op_ev(op),
                        });
                    } else if let Some(k) = kernel(plan, op) {
                        op_span[op as usize] = next_span;
                        p.steps.push(fc::Step::Mark {
                            stream,
                            span: next_span,
                            end: false,
                        });
                        p.steps.push(fc::Step::Launch { stream, kernel: k });
                        p.steps.push(fc::Step::Mark {
                            stream,
                            span: next_span,
                            end: true,
                        });
                        next_span += 1;
                    }
                }
            }
            1 => {
                for &op in ops {
                    let OpKind::Recv {
                        bytes, accumulate, ..
                    } = plan.ops[op as usize].kind
                    else {
                        continue;
                    };
                    let send = plan.partner(op);
                    let (OpIo::Recv { dst }, OpIo::Send { src }) =
                        (plan.io[op as usize], plan.io[send as usize])
                    else {
                        return Err(GpuError::NoDataflow);
                    };
                    p.steps.push(fc::Step::Wait {
                        stream,
                        event: op_ev(send),
                    });
                    op_span[op as usize] = next_span;
                    p.steps.push(fc::Step::Mark {
                        stream,
                        span: next_span,
                        end: false,
                    });
                    if accumulate {
                        let st = fc::Ptr {
                            buf: staging[stream as usize],
                            offset: 0,
                        };
                        p.steps.push(fc::Step::Launch {
                            stream,
                            kernel: fc::Kernel::Copy {
                                dst: st,
                                src: ptr(plan, src),
                                bytes,
                            },
                        });
                        let d = span2(plan, dst);
                        p.steps.push(fc::Step::Launch {
                            stream,
                            kernel: fc::Kernel::Add {
                                out: d,
                                x: d,
                                y: fc::Span2 {
                                    ptr: st,
                                    stride: bytes / 2,
                                },
                                block_elems: bytes / 2,
                                blocks: 1,
                            },
                        });
                    } else {
                        p.steps.push(fc::Step::Launch {
                            stream,
                            kernel: fc::Kernel::Copy {
                                dst: ptr(plan, dst),
                                src: ptr(plan, src),
                                bytes,
                            },
                        });
                    }
                    p.steps.push(fc::Step::Mark {
                        stream,
                        span: next_span,
                        end: true,
                    });
                    next_span += 1;
                    p.steps.push(fc::Step::Record {
                        stream,
                        event: op_ev(op),
                    });
                }
            }
            _ => {
                for &op in ops {
                    if let OpKind::Send { .. } = plan.ops[op as usize].kind {
                        p.steps.push(fc::Step::Wait {
                            stream,
                            event: op_ev(plan.partner(op)),
                        });
                    }
                }
                p.steps.push(fc::Step::Record {
                    stream,
                    event: done(l),
                });
            }
        }
        for &s in &succ[v as usize] {
            indeg[s as usize] -= 1;
            if indeg[s as usize] == 0 {
                stack.push(s);
            }
        }
    }
    if issued != 3 * nl {
        plan.check_deadlock_free()?;
        return Err(GpuError::Cuda("no issue order exists for this plan".into()));
    }
    p.spans = next_span;
    Ok(Lowered {
        program: p,
        op_span,
    })
}

/// Per-op times of one measured run (sends take their recv's span).
pub(super) fn op_times(plan: &Plan, low: &Lowered, m: &fc::Measured) -> Vec<(f64, f64)> {
    (0..plan.op_count())
        .map(|op| {
            let mut s = low.op_span[op];
            if s == NONE {
                let p = plan.partner(op as OpId);
                if p != NO_PARTNER {
                    s = low.op_span[p as usize];
                }
            }
            if s == NONE {
                (0.0, 0.0)
            } else {
                m.spans[s as usize]
            }
        })
        .collect()
}

pub(super) fn run(plan: &Plan, opts: &GpuOptions) -> Result<GpuRun, GpuError> {
    let infos = fc::probe().map_err(cuda)?;
    let visible = infos.len() as u32;
    let ndev = opts.devices.unwrap_or(visible).min(plan.ranks).max(1);
    if ndev > visible {
        return Err(GpuError::Cuda(format!(
            "{ndev} GPUs asked for, {visible} visible"
        )));
    }
    let low = lower(plan, ndev)?;
    let loaded = fc::Loaded::new(low.program.clone()).map_err(cuda)?;
    loaded.initialise().map_err(cuda)?;
    loaded.run().map_err(cuda)?;
    let rel_error = match opts.check {
        Some(w) => Some(super::reference::check(plan, w, &loaded, ndev)?),
        None => None,
    };
    for _ in 0..opts.warmup {
        loaded.run().map_err(cuda)?;
    }
    let mut runs = Vec::with_capacity(opts.repeats as usize);
    for _ in 0..opts.repeats {
        runs.push(loaded.run().map_err(cuda)?);
    }
    let makespans: Vec<f64> = runs.iter().map(|m| m.wall).collect();
    let mut order: Vec<usize> = (0..runs.len()).collect();
    order.sort_by(|&a, &b| makespans[a].total_cmp(&makespans[b]));
    let median = &runs[order[order.len() / 2]];
    // Shift so the earliest span starts at 0, like a predicted timeline.
    let mut times = op_times(plan, &low, median);
    let t0 = times.iter().map(|t| t.0).fold(f64::INFINITY, f64::min);
    if t0.is_finite() {
        for t in &mut times {
            t.0 -= t0;
            t.1 -= t0;
        }
    }
    Ok(GpuRun {
        times,
        makespans,
        rel_error,
        devices: infos
            .iter()
            .take(ndev as usize)
            .map(|d| d.name.clone())
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config;
    use crate::scenario::{Strategy, Workload};

    /// Every strategy and workload lowers to a program that passes the executor's checks,
    /// waits only on events recorded earlier in issue order, and times every op.
    #[test]
    fn lowered_programs_are_well_formed() {
        let mut sc = config::load_scenario("default").unwrap();
        sc.batch = 1;
        sc.seq = 1024;
        for w in [Workload::AgGemm, Workload::GemmRs, Workload::Mlp] {
            for s in [Strategy::Sequential, Strategy::Chunked(2), Strategy::Flash] {
                let plan = crate::strategy::build(&sc, w, s).unwrap();
                for devices in [1, 4] {
                    let low = lower(&plan, devices).unwrap();
                    fc::check(&low.program).unwrap();
                    let mut recorded = vec![false; low.program.events as usize];
                    let mut marks = vec![0u8; low.program.spans as usize];
                    for st in &low.program.steps {
                        match *st {
                            fc::Step::Record { event, .. } => recorded[event as usize] = true,
                            fc::Step::Wait { event, .. } => {
                                assert!(recorded[event as usize], "{w:?} {s}: wait before record")
                            }
                            fc::Step::Mark { span, .. } => marks[span as usize] += 1,
                            fc::Step::Launch { .. } => {}
                        }
                    }
                    assert!(marks.iter().all(|&m| m == 2));
                    for op in 0..plan.op_count() {
                        let has = low.op_span[op] != NONE
                            || low.op_span[plan.partner(op as OpId) as usize] != NONE;
                        assert!(has, "op {op} untimed");
                    }
                }
            }
        }
    }
}
