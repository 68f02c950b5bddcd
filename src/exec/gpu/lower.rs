//! Plan → device program, and the run loop.

use super::{GpuError, GpuOptions, GpuRun, Transport};
use crate::exec::data::data_key;
use crate::plan::{BufInit, LaunchId, NO_PARTNER, OpId, OpIo, OpKind, Plan, Region};
use crate::scenario::Activation;
use flashoverlap_cuda as fc;

const NONE: u32 = u32::MAX;

fn cuda(e: fc::CudaError) -> GpuError {
    super::from_cuda(e)
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
            ctas: 0,
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
pub(super) fn lower(plan: &Plan, devices: u32, transport: Transport) -> Result<Lowered, GpuError> {
    let dev = |rank: u32| rank % devices.max(1);
    let nccl = transport == Transport::Nccl;
    if nccl && plan.ranks > devices {
        return Err(GpuError::NcclGpuPerRank {
            ranks: plan.ranks,
            devices,
        });
    }
    // Consecutive ops of a stream share their boundary event (one record, not two).
    let mut p = fc::Program {
        shared_boundaries: true,
        ..Default::default()
    };
    for (i, b) in plan.buffers.iter().enumerate() {
        let elems = b.rows * b.cols;
        let init = match b.init {
            BufInit::Poison => fc::Init::Poison,
            BufInit::Local => fc::Init::random(data_key(&b.name, Some(b.rank)), elems),
            BufInit::Global {
                row0,
                rows,
                at,
                blocks,
                stride_rows,
            } => {
                let runs = blocks.max(1) as u64;
                fc::Init::Random {
                    key: data_key(&b.name, None),
                    offset: at * b.cols,
                    len: rows / runs * b.cols,
                    index0: row0 * b.cols,
                    runs,
                    stride: stride_rows * b.cols,
                }
            }
        };
        debug_assert_eq!(p.buffers.len(), i);
        p.buffers.push(fc::Buffer {
            device: dev(b.rank),
            elems,
            init,
        });
    }
    p.streams = plan.streams.iter().map(|s| dev(s.rank)).collect();
    // NCCL: one rank per GPU, and a send stream per rank (a send is issued with its recv,
    // after the sender's stream has moved on, so it waits for the post event there).
    let mut send_stream = Vec::new();
    if nccl {
        p.nccl = (0..plan.ranks).map(dev).collect();
        for r in 0..plan.ranks {
            send_stream.push(p.streams.len() as u32);
            p.streams.push(dev(r));
        }
    }
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
    // A launch's done event is recorded only when another stream waits for it: an event
    // record costs the stream time (~1 µs between kernels), which N small GEMMs feel.
    let mut waited_on = vec![false; nl];
    for (id, o) in plan.ops.iter().enumerate() {
        for &d in plan.deps(id as OpId) {
            let dl = plan.ops[d as usize].launch;
            if plan.launch_stream(dl) != o.stream {
                waited_on[dl as usize] = true;
            }
        }
    }

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
                        match k {
                            // Stand-in copies (emulated ranks) go through the transport.
                            fc::Kernel::Copy { dst, src, bytes } if nccl => {
                                let r = plan.streams[stream as usize].rank;
                                p.steps.push(fc::Step::Nccl {
                                    from: r,
                                    send_stream: stream,
                                    src,
                                    to: r,
                                    recv_stream: stream,
                                    dst,
                                    elems: bytes / 2,
                                });
                            }
                            k => p.steps.push(fc::Step::Launch { stream, kernel: k }),
                        }
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
                    let from = plan.ops[send as usize].rank;
                    let sstream = if nccl {
                        send_stream[from as usize]
                    } else {
                        stream
                    };
                    p.steps.push(fc::Step::Wait {
                        stream: sstream,
                        event: op_ev(send),
                    });
                    op_span[op as usize] = next_span;
                    p.steps.push(fc::Step::Mark {
                        stream,
                        span: next_span,
                        end: false,
                    });
                    let to = plan.ops[op as usize].rank;
                    let st = fc::Ptr {
                        buf: staging[stream as usize],
                        offset: 0,
                    };
                    // The transfer lands in the destination, or, for an accumulating
                    // recv, in the staging buffer that is then added to it.
                    let land = if accumulate { st } else { ptr(plan, dst) };
                    if nccl {
                        p.steps.push(fc::Step::Nccl {
                            from,
                            send_stream: sstream,
                            src: ptr(plan, src),
                            to,
                            recv_stream: stream,
                            dst: land,
                            elems: bytes / 2,
                        });
                        // The send's event now marks its completion on the sender's side
                        // (no event crosses ranks, so ranks may live in other processes).
                        p.steps.push(fc::Step::Record {
                            stream: sstream,
                            event: op_ev(send),
                        });
                    } else {
                        p.steps.push(fc::Step::Launch {
                            stream,
                            kernel: fc::Kernel::Copy {
                                dst: land,
                                src: ptr(plan, src),
                                bytes,
                            },
                        });
                    }
                    if accumulate {
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
                                ctas: 0,
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
                            event: op_ev(if nccl { op } else { plan.partner(op) }),
                        });
                    }
                }
                if waited_on[l as usize] {
                    p.steps.push(fc::Step::Record {
                        stream,
                        event: done(l),
                    });
                }
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

/// From the first start to the last end over the spans that were measured.
fn wall(spans: &[(f64, f64)]) -> f64 {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for &(s, e) in spans.iter().filter(|s| !s.0.is_nan()) {
        lo = lo.min(s);
        hi = hi.max(e);
    }
    if hi >= lo { hi - lo } else { 0.0 }
}

/// A watchdog report in the plan's terms: which op (label, rank, stream) waited.
fn hung(plan: &Plan, low: &Lowered, e: fc::CudaError) -> GpuError {
    let fc::CudaError::Hung {
        secs,
        span,
        started,
        ..
    } = e
    else {
        return cuda(e);
    };
    let what = match span.and_then(|s| low.op_span.iter().position(|&x| x == s)) {
        Some(op) => {
            let o = &plan.ops[op];
            format!(
                "op {op} `{}` on rank {} stream `{}` {}",
                plan.label(op as OpId),
                o.rank,
                plan.streams[o.stream as usize].name,
                if started {
                    "started and did not finish"
                } else {
                    "never started (what it waits for did not finish)"
                }
            )
        }
        None => "every timed op finished; a trailing wait did not".to_string(),
    };
    GpuError::Hung { secs, what }
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

/// Add [`super::HEATER`] GEMMs (`gemms` of them) to the preamble of the first stream of
/// every device of `p`, over operands of their own (random, so they draw the power real
/// data does).
pub(super) fn add_heater(p: &mut fc::Program, gemms: u32) {
    if gemms == 0 {
        return;
    }
    let ((m, n, k), _) = super::HEATER;
    let mut seen = Vec::new();
    for (s, &d) in p.streams.clone().iter().enumerate() {
        if seen.contains(&d) {
            continue;
        }
        seen.push(d);
        let mut buf = |elems, key: Option<u64>| {
            p.buffers.push(fc::Buffer {
                device: d,
                elems,
                init: key.map_or(fc::Init::Poison, |k| fc::Init::random(k, elems)),
            });
            p.buffers.len() as u32 - 1
        };
        let (a, b, c) = (
            buf(m * k, Some(0x4ea7_0001)),
            buf(k * n, Some(0x4ea7_0002)),
            buf(m * n, None),
        );
        for _ in 0..gemms {
            p.preamble.push(fc::Step::Launch {
                stream: s as u32,
                kernel: fc::Kernel::gemm(a, b, c, m, n, k),
            });
        }
    }
}

/// The kernels of `p` back to back: every kernel launch of its steps, in issue order, on
/// its first stream, one span around them all (no per-op events, no waits). Transfers
/// (NCCL steps) are left out. `None` when `p` has no kernel.
pub(super) fn back_to_back(p: &fc::Program) -> Option<fc::Program> {
    let first = *p.streams.first()?;
    let mut q = fc::Program {
        streams: vec![first],
        buffers: p.buffers.clone(),
        events: 0,
        spans: 1,
        nccl: Vec::new(),
        preamble: p
            .preamble
            .iter()
            .filter_map(|s| match *s {
                fc::Step::Launch { stream: 0, kernel } => {
                    Some(fc::Step::Launch { stream: 0, kernel })
                }
                _ => None,
            })
            .collect(),
        ..p.clone()
    };
    let mark = |end| fc::Step::Mark {
        stream: 0,
        span: 0,
        end,
    };
    q.steps = vec![mark(false)];
    q.steps.extend(p.steps.iter().filter_map(|s| match *s {
        fc::Step::Launch { kernel, .. } => Some(fc::Step::Launch { stream: 0, kernel }),
        _ => None,
    }));
    if q.steps.len() == 1 {
        return None;
    }
    q.steps.push(mark(true));
    Some(q)
}

/// A back-to-back baseline loaded and initialised beside the run it is the baseline of.
fn load_back_to_back(p: fc::Program) -> Result<fc::Loaded, GpuError> {
    let l = fc::Loaded::new(p).map_err(cuda)?;
    l.initialise().map_err(cuda)?;
    Ok(l)
}

/// One run of a back-to-back baseline: its one span, seconds.
fn time_once(l: &fc::Loaded) -> Result<f64, GpuError> {
    let m = l.run().map_err(cuda)?;
    Ok(m.spans[0].1 - m.spans[0].0)
}

pub(super) fn run(plan: &Plan, opts: &GpuOptions) -> Result<GpuRun, GpuError> {
    let infos = fc::probe().map_err(cuda)?;
    let visible = infos.len() as u32;
    let ndev = match opts.process {
        Some(pr) => {
            if pr.world != plan.ranks || opts.transport != Transport::Nccl {
                return Err(GpuError::Cuda(format!(
                    "a multi-process run needs --transport nccl and a world of the plan's \
                     {} ranks (got {})",
                    plan.ranks, pr.world
                )));
            }
            plan.ranks
        }
        None => opts.devices.unwrap_or(visible).min(plan.ranks).max(1),
    };
    if opts.process.is_none() && ndev > visible {
        return Err(GpuError::Cuda(format!(
            "{ndev} GPUs asked for, {visible} visible"
        )));
    }
    let mut low = lower(plan, ndev, opts.transport)?;
    add_heater(&mut low.program, super::heater_gemms(opts.heat_ms));
    let mut loaded = match opts.process {
        Some(pr) => fc::Loaded::new_local(
            low.program.clone(),
            fc::Local {
                rank: pr.rank,
                world: pr.world,
                device: pr.device,
                id: pr.id,
            },
        ),
        None => fc::Loaded::new(low.program.clone()),
    }
    .map_err(cuda)?;
    loaded.set_watchdog(
        opts.watchdog
            .filter(|s| s.is_finite() && *s > 0.0)
            .map(std::time::Duration::from_secs_f64),
    );
    let hung = |e: fc::CudaError| hung(plan, &low, e);
    loaded.initialise().map_err(cuda)?;
    loaded.run().map_err(hung)?;
    let rel_error = match opts.check {
        Some(w) => Some(super::reference::check(
            plan,
            w,
            &loaded,
            opts.process.map_or(0, |p| p.device),
            opts.process.map(|p| p.rank),
        )?),
        None => None,
    };
    // One GPU, one rank: the same kernels back to back, the executor's overhead
    // baseline, run alternately with the schedule (so both see the same clocks).
    let base = match (plan.ranks, opts.process, opts.back_to_back) {
        (1, None, true) => back_to_back(&low.program)
            .map(load_back_to_back)
            .transpose()?,
        _ => None,
    };
    for _ in 0..opts.warmup {
        loaded.run().map_err(hung)?;
        if let Some(b) = &base {
            time_once(b)?;
        }
    }
    // The sustained protocol: the schedule back to back until its makespan settles.
    let settled = match opts.settle {
        Some(s) => {
            let t0 = std::time::Instant::now();
            let mut loop_runs = Vec::new();
            let converged = loop {
                let m = loaded.run().map_err(hung)?;
                loop_runs.push((t0.elapsed().as_secs_f64(), m.wall));
                if let Some(c) = super::settle_done(&loop_runs, &s) {
                    break c;
                }
            };
            Some(super::settled(&loop_runs, &s, converged))
        }
        None => None,
    };
    let mut runs = Vec::with_capacity(opts.repeats as usize);
    let mut base_times = Vec::new();
    for _ in 0..opts.repeats {
        let mut m = loaded.run().map_err(hung)?;
        if opts.process.is_some() {
            m.spans = loaded.gather(&m).map_err(cuda)?;
            m.wall = wall(&m.spans);
        }
        runs.push(m);
        if let Some(b) = &base {
            base_times.push(time_once(b)?);
        }
    }
    base_times.sort_by(f64::total_cmp);
    let back_to_back = base_times.get(base_times.len() / 2).copied();
    let makespans: Vec<f64> = runs.iter().map(|m| m.wall).collect();
    let gate_timeouts = runs.iter().filter(|m| m.gate_timed_out).count() as u32;
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
    let devices = match opts.process {
        // One GPU per rank, across processes.
        Some(pr) => vec![infos[pr.device as usize].name.clone(); plan.ranks as usize],
        None => infos
            .iter()
            .take(ndev as usize)
            .map(|d| d.name.clone())
            .collect(),
    };
    Ok(GpuRun {
        times,
        makespans,
        rel_error,
        devices,
        gate_timeouts,
        back_to_back,
        settled,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config;
    use crate::scenario::{Strategy, Workload};

    /// The back-to-back baseline of an emulated rank: its kernels in issue order on one
    /// stream, one span around them, no waits or events, the heater kept; valid for the
    /// executor.
    #[test]
    fn the_back_to_back_baseline_is_the_same_kernels_on_one_stream() {
        let mut sc = config::load_scenario("default").unwrap();
        sc.batch = 1;
        sc.seq = 1024;
        let plan = crate::strategy::build(&sc, Workload::GemmRs, Strategy::Flash).unwrap();
        let one = crate::plan::emulate_rank(&plan, 0, crate::plan::StandIn::Nothing).unwrap();
        let mut low = lower(&one, 1, Transport::CopyEngine).unwrap();
        add_heater(&mut low.program, 2);
        let b = back_to_back(&low.program).unwrap();
        fc::check(&b).unwrap();
        let kernels = |p: &fc::Program| -> Vec<fc::Kernel> {
            p.steps
                .iter()
                .filter_map(|s| match *s {
                    fc::Step::Launch { kernel, .. } => Some(kernel),
                    _ => None,
                })
                .collect()
        };
        assert_eq!(kernels(&b), kernels(&low.program));
        assert!(kernels(&b).len() > one.op_count() / 2, "GEMMs and adds");
        assert_eq!((b.streams.len(), b.spans, b.events), (1, 1, 0));
        assert_eq!(b.steps.len(), kernels(&b).len() + 2);
        assert_eq!(b.preamble.len(), 2);
        assert!(b.nccl.is_empty());
    }

    /// Every strategy and workload lowers to a program that passes the executor's checks,
    /// waits only on events recorded earlier in issue order, and times every op.
    #[test]
    fn lowered_programs_are_well_formed() {
        let mut sc = config::load_scenario("default").unwrap();
        sc.batch = 1;
        sc.seq = 1024;
        for w in [Workload::AgGemm, Workload::GemmRs, Workload::Mlp] {
            for s in [
                Strategy::Sequential,
                Strategy::Chunked(2),
                Strategy::Flash,
                Strategy::Direct,
                Strategy::PermuteLoop,
                Strategy::PermuteLoopBidir,
            ] {
                let plan = crate::strategy::build(&sc, w, s).unwrap();
                for (devices, transport) in [
                    (1, Transport::CopyEngine),
                    (4, Transport::CopyEngine),
                    (plan.ranks, Transport::Nccl),
                ] {
                    let low = lower(&plan, devices, transport).unwrap();
                    fc::check(&low.program).unwrap();
                    // The heater: 3 GEMMs ahead of every device's first stream.
                    let mut heated = low.program.clone();
                    add_heater(&mut heated, 3);
                    fc::check(&heated).unwrap();
                    assert_eq!(heated.preamble.len(), 3 * devices.min(plan.ranks) as usize);
                    let mut recorded = vec![false; low.program.events as usize];
                    let mut marks = vec![0u8; low.program.spans as usize];
                    for st in &low.program.steps {
                        match *st {
                            fc::Step::Record { event, .. } => recorded[event as usize] = true,
                            fc::Step::Wait { event, .. } => {
                                assert!(recorded[event as usize], "{w:?} {s}: wait before record")
                            }
                            fc::Step::Mark { span, .. } => marks[span as usize] += 1,
                            fc::Step::Launch { .. } | fc::Step::Nccl { .. } => {}
                        }
                    }
                    assert!(marks.iter().all(|&m| m == 2));
                    let nccl_steps = low
                        .program
                        .steps
                        .iter()
                        .filter(|s| matches!(s, fc::Step::Nccl { .. }))
                        .count();
                    let recvs = plan
                        .ops
                        .iter()
                        .filter(|o| matches!(o.kind, OpKind::Recv { .. }))
                        .count();
                    let want = if transport == Transport::Nccl {
                        recvs
                    } else {
                        0
                    };
                    assert_eq!(nccl_steps, want, "{w:?} {s}: one NCCL group per transfer");
                    for op in 0..plan.op_count() {
                        let has = low.op_span[op] != NONE
                            || low.op_span[plan.partner(op as OpId) as usize] != NONE;
                        assert!(has, "op {op} untimed");
                    }
                }
            }
        }
        // NCCL cannot put two ranks on one GPU.
        let plan = crate::strategy::build(&sc, Workload::Mlp, Strategy::Flash).unwrap();
        assert!(matches!(
            lower(&plan, 1, Transport::Nccl),
            Err(GpuError::NcclGpuPerRank { .. })
        ));
        // An emulated rank's stand-in copies go through NCCL as sends to self.
        let one = crate::plan::emulate_rank(&plan, 0, crate::plan::StandIn::LocalCopy).unwrap();
        let low = lower(&one, 1, Transport::Nccl).unwrap();
        fc::check(&low.program).unwrap();
        let copies = one
            .ops
            .iter()
            .filter(|o| matches!(o.kind, OpKind::Copy { .. }))
            .count();
        let selfs = low
            .program
            .steps
            .iter()
            .filter(|s| matches!(s, fc::Step::Nccl { from: 0, to: 0, .. }))
            .count();
        assert!(copies > 0);
        assert_eq!(selfs, copies);
    }
}
