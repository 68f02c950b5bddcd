//! Measurements for `flashoverlap calibrate`: GEMM times over a grid of shapes, copy and
//! add bandwidth, per-kernel launch cost, and the slowdown of a GEMM while a copy runs
//! beside it (and of the copy while the GEMM runs).

use super::{Calibration, GemmSample, GpuError, P2pCalibration};
use flashoverlap_cuda as fc;

fn cuda(e: fc::CudaError) -> GpuError {
    super::from_cuda(e)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn random(p: &mut fc::Program, elems: u64, key: u64) -> u32 {
    p.buffers.push(fc::Buffer {
        device: 0,
        elems,
        init: fc::Init::random(key, elems),
    });
    p.buffers.len() as u32 - 1
}

fn timed(p: &mut fc::Program, stream: u32, kernel: fc::Kernel) -> u32 {
    let span = p.spans;
    p.spans += 1;
    p.steps.push(fc::Step::Mark {
        stream,
        span,
        end: false,
    });
    p.steps.push(fc::Step::Launch { stream, kernel });
    p.steps.push(fc::Step::Mark {
        stream,
        span,
        end: true,
    });
    span
}

fn at(buf: u32) -> fc::Ptr {
    fc::Ptr { buf, offset: 0 }
}

fn gemm(a: u32, b: u32, c: u32, m: u64, n: u64, k: u64) -> fc::Kernel {
    fc::Kernel::gemm(a, b, c, m, n, k)
}

/// Run `p` `repeats` times after `warmup`; per span, the median duration.
fn durations(p: fc::Program, warmup: u32, repeats: u32) -> Result<Vec<f64>, GpuError> {
    let l = fc::Loaded::new(p).map_err(cuda)?;
    l.initialise().map_err(cuda)?;
    for _ in 0..warmup {
        l.run().map_err(cuda)?;
    }
    let mut per: Vec<Vec<f64>> = Vec::new();
    for _ in 0..repeats.max(1) {
        let m = l.run().map_err(cuda)?;
        per.resize(m.spans.len(), Vec::new());
        for (i, (s, e)) in m.spans.iter().enumerate() {
            per[i].push(e - s);
        }
    }
    Ok(per.into_iter().map(median).collect())
}

pub(super) fn calibrate(
    shapes: &[(u64, u64, u64)],
    how: super::CalibrationProtocol,
) -> Result<Calibration, GpuError> {
    let repeats = how.repeats;
    let dev = fc::probe().map_err(cuda)?.remove(0);
    // GEMM grid, one stream, over shared operand buffers, L2 evicted before each run.
    // Each shape is timed once per run, and every run starts the same way:
    // - heated (`heat_ms` > 0, the default): the preamble runs `heat_ms` of large GEMMs,
    //   so each GEMM starts at the clocks sustained load gives the GPU (as in training,
    //   and as `run` starts every schedule); the heater also keeps the stream busy while
    //   the host issues the GEMM, so the span holds no issue latency;
    // - rested (`heat_ms` = 0): a 100 µs sleep kernel (one thread, no load) covers the
    //   issue, and the host rests twice the GEMM's time after each run. Back-to-back
    //   GEMMs run into the power limit within milliseconds and lower the clocks; rested,
    //   a GEMM runs at the clocks of a short burst.
    let (mut ma, mut mb, mut mc) = (1, 1, 1);
    for &(m, n, k) in shapes {
        ma = ma.max(m * k);
        mb = mb.max(k * n);
        mc = mc.max(m * n);
    }
    let mut p = fc::Program {
        streams: vec![0],
        ..Default::default()
    };
    let (a, b) = (random(&mut p, ma, 1), random(&mut p, mb, 2));
    let c = random(&mut p, mc, 3);
    // The warm run's A: other rows than the cold run read (as a partial GEMM of a
    // decomposed site reads its own block of the gathered input beside the shared weight).
    let a2 = random(&mut p, ma, 7);
    // A copy of 256 MiB (several times any L2 of this generation: 50 MiB on H100, 60 on
    // H200) before each run evicts the operands the previous run of the shape left in
    // L2. In a schedule a GEMM reads a slice no kernel has just read; timed warm, a
    // mid-sized GEMM (A and B under ~40 MB) measured 10–25% faster than it runs there.
    const FLUSH_ELEMS: u64 = 128 << 20;
    let (fd, fs) = (p.buffers.len() as u32, p.buffers.len() as u32 + 1);
    for _ in 0..2 {
        p.buffers.push(fc::Buffer {
            device: 0,
            elems: FLUSH_ELEMS,
            init: fc::Init::Poison,
        });
    }
    let heat = super::heater_gemms(how.heat_ms);
    super::lower::add_heater(&mut p, heat);
    let mut one = Vec::new();
    for &(m, n, k) in shapes {
        let first = p.steps.len();
        p.steps.push(fc::Step::Launch {
            stream: 0,
            kernel: fc::Kernel::Copy {
                dst: at(fd),
                src: at(fs),
                bytes: FLUSH_ELEMS * 2,
            },
        });
        if heat == 0 {
            p.steps.push(fc::Step::Launch {
                stream: 0,
                kernel: fc::Kernel::Sleep { ns: 100_000 },
            });
        }
        let span = timed(&mut p, 0, gemm(a, b, c, m, n, k));
        // Warm: the same B again at once, as the partial GEMMs of a decomposed site
        // read their rank's weight one after another (B in L2 where it fits).
        let warm = timed(&mut p, 0, gemm(a2, b, c, m, n, k));
        one.push((first..p.steps.len(), span, warm));
    }
    let l = fc::Loaded::new(p).map_err(cuda)?;
    l.initialise().map_err(cuda)?;
    if heat > 0 && how.warm_s > 0.0 {
        // Settle the temperature: the heater alone (an empty range runs the preamble).
        let t = std::time::Instant::now();
        while t.elapsed().as_secs_f64() < how.warm_s {
            l.run_range(0..0).map_err(cuda)?;
        }
    }
    let mut t = Vec::with_capacity(shapes.len());
    for (range, span, warm) in &one {
        let (mut d, mut w) = (Vec::new(), Vec::new());
        for i in 0..=repeats.max(1) {
            let m = l.run_range(range.clone()).map_err(cuda)?;
            let secs = m.spans[*span as usize].1 - m.spans[*span as usize].0;
            let again = m.spans[*warm as usize].1 - m.spans[*warm as usize].0;
            if i > 0 {
                d.push(secs); // the first run warms cuBLAS up for this shape
                w.push(again);
            }
            if heat == 0 {
                let rest = 2.0 * (secs + again);
                std::thread::sleep(std::time::Duration::from_secs_f64(rest.max(1e-3)));
            }
        }
        t.push((median(d), median(w)));
    }
    drop(l);
    let gemms = shapes
        .iter()
        .zip(&t)
        .map(|(&(m, n, k), &(secs, warm))| GemmSample {
            m,
            n,
            k,
            secs,
            warm_secs: Some(warm),
        })
        .collect();

    // Bandwidth: a 1 GiB copy and a 1 GiB-per-operand add; launch cost: 256 tiny adds,
    // each timed as `run` times an op (one shared event between two kernels).
    let elems: u64 = 1 << 29;
    let mut p = fc::Program {
        streams: vec![0],
        shared_boundaries: true,
        ..Default::default()
    };
    let (x, y) = (random(&mut p, elems, 4), random(&mut p, elems, 5));
    let z = random(&mut p, elems, 6);
    // Untimed spacer, as for the GEMMs.
    p.steps.push(fc::Step::Launch {
        stream: 0,
        kernel: fc::Kernel::Copy {
            dst: at(z),
            src: at(y),
            bytes: elems * 2,
        },
    });
    let copy_span = timed(
        &mut p,
        0,
        fc::Kernel::Copy {
            dst: at(z),
            src: at(x),
            bytes: elems * 2,
        },
    );
    let s2 = |buf| fc::Span2 {
        ptr: at(buf),
        stride: elems,
    };
    let add_span = timed(&mut p, 0, add_on(x, y, z, elems, 0));
    let tiny = 256u32;
    let first_tiny = p.spans;
    for _ in 0..tiny {
        timed(
            &mut p,
            0,
            fc::Kernel::Add {
                out: s2(z),
                x: s2(x),
                y: s2(y),
                block_elems: 64,
                blocks: 1,
                ctas: 0,
            },
        );
    }
    let l = fc::Loaded::new(p).map_err(cuda)?;
    l.initialise().map_err(cuda)?;
    l.run().map_err(cuda)?;
    let (mut copy, mut add, mut launch) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..repeats.max(1) {
        let m = l.run().map_err(cuda)?;
        let d = |s: u32| m.spans[s as usize].1 - m.spans[s as usize].0;
        copy.push(d(copy_span));
        add.push(d(add_span));
        let last = (first_tiny + tiny - 1) as usize;
        launch.push((m.spans[last].1 - m.spans[first_tiny as usize].0) / tiny as f64);
    }
    drop(l);
    let copy_s = median(copy);
    let add_s = median(add);

    // Interference: an 8192³ GEMM alone, a 1 GiB copy loop alone, then both at once on
    // two streams.
    let (gm, gn, gk) = (8192u64, 8192u64, 8192u64);
    let build = |with_gemm: bool, with_copy: bool| {
        let mut p = fc::Program {
            streams: vec![0, 0],
            ..Default::default()
        };
        let (a, b) = (random(&mut p, gm * gk, 7), random(&mut p, gk * gn, 8));
        let c = random(&mut p, gm * gn, 9);
        let (x, z) = (random(&mut p, elems, 10), random(&mut p, elems, 11));
        let mut g = None;
        let mut cp = Vec::new();
        if with_gemm {
            g = Some(timed(&mut p, 0, gemm(a, b, c, gm, gn, gk)));
        }
        if with_copy {
            for _ in 0..4 {
                cp.push(timed(
                    &mut p,
                    1,
                    fc::Kernel::Copy {
                        dst: at(z),
                        src: at(x),
                        bytes: elems * 2,
                    },
                ));
            }
        }
        (p, g, cp)
    };
    let (p, g, _) = build(true, false);
    let gemm_alone = durations(p, 2, repeats)?[g.unwrap_or(0) as usize];
    let (p, _, cp) = build(false, true);
    let d = durations(p, 1, repeats)?;
    let copy_alone = cp.iter().map(|&s| d[s as usize]).sum::<f64>() / cp.len() as f64;
    let (p, g, cp) = build(true, true);
    let d = durations(p, 2, repeats)?;
    let gemm_with_copy = d[g.unwrap_or(0) as usize];
    // The first copy overlaps the GEMM (which takes longer than one copy).
    let copy_with_gemm = d[cp[0] as usize];
    // Sustained load: 200 of the GEMM back to back; the last 16 show the clocks the
    // power limit settles at.
    let mut p = fc::Program {
        streams: vec![0],
        ..Default::default()
    };
    let (a, b) = (random(&mut p, gm * gk, 12), random(&mut p, gk * gn, 13));
    let c = random(&mut p, gm * gn, 14);
    let spans: Vec<u32> = (0..200)
        .map(|_| timed(&mut p, 0, gemm(a, b, c, gm, gn, gk)))
        .collect();
    let d = durations(p, 0, 1)?;
    let gemm_sustained = median(spans[184..].iter().map(|&s| d[s as usize]).collect());
    let reductions = Some(reductions(repeats)?);
    let p2p = if fc::probe().map_err(cuda)?.len() >= 2 {
        Some(p2p(repeats)?)
    } else {
        None
    };
    Ok(Calibration {
        device: dev.name,
        sm_count: dev.sm_count,
        gemms,
        copy_bytes_per_s: 2.0 * (elems * 2) as f64 / copy_s,
        add_bytes_per_s: 3.0 * (elems * 2) as f64 / add_s,
        launch_s: median(launch),
        gemm_alone_s: gemm_alone,
        gemm_with_copy_s: gemm_with_copy,
        gemm_sustained_s: gemm_sustained,
        copy_alone_s: copy_alone,
        copy_with_gemm_s: copy_with_gemm,
        p2p,
        reductions,
        heat_ms: if heat > 0 { how.heat_ms } else { 0.0 },
        warm_s: if heat > 0 { how.warm_s } else { 0.0 },
    })
}

/// The add of `elems`-element operands on `ctas` CTAs (0: the whole GPU).
fn add_on(x: u32, y: u32, z: u32, elems: u64, ctas: u32) -> fc::Kernel {
    let s2 = |buf| fc::Span2 {
        ptr: at(buf),
        stride: elems,
    };
    fc::Kernel::Add {
        out: s2(z),
        x: s2(x),
        y: s2(y),
        block_elems: elems,
        blocks: 1,
        ctas,
    }
}

/// Reductions beside GEMMs, the compute side of a reduce-scatter chain: on stream 0,
/// `steps` partial GEMMs (m, n, k) back to back; on stream 1, after each, the add of its
/// output into an accumulator (what a Flash-RS step does with the partial it receives).
/// Timed with both streams, each alone; and, for reference, a 1 GiB add's bandwidth on
/// 8 … 96 CTAs of its own.
fn reductions(repeats: u32) -> Result<super::ReductionCalibration, GpuError> {
    let elems: u64 = 1 << 29;
    let traffic = 3.0 * (elems * 2) as f64;
    let counts = [8u32, 16, 24, 32, 48, 64, 96];
    let mut p = fc::Program {
        streams: vec![0],
        ..Default::default()
    };
    let (x, y) = (random(&mut p, elems, 20), random(&mut p, elems, 21));
    let z = random(&mut p, elems, 22);
    let spans: Vec<u32> = counts
        .iter()
        .map(|&c| timed(&mut p, 0, add_on(x, y, z, elems, c)))
        .collect();
    let d = durations(p, 1, repeats)?;
    let sweep: Vec<(u32, f64)> = counts
        .iter()
        .zip(&spans)
        .map(|(&c, &s)| (c, traffic / d[s as usize]))
        .collect();

    let (m, n, k, steps) = (4096u64, 4096u64, 2048u64, 8usize);
    let build = |with_gemms: bool, with_adds: bool| {
        let mut p = fc::Program {
            streams: vec![0, 0],
            events: steps as u32,
            ..Default::default()
        };
        let (a, b) = (random(&mut p, m * k, 30), random(&mut p, k * n, 31));
        let cs: Vec<u32> = (0..steps)
            .map(|i| random(&mut p, m * n, 32 + i as u64))
            .collect();
        let acc = random(&mut p, m * n, 29);
        let (mut g, mut ad) = (Vec::new(), Vec::new());
        for (i, &c) in cs.iter().enumerate() {
            if with_gemms {
                g.push(timed(&mut p, 0, gemm(a, b, c, m, n, k)));
                p.steps.push(fc::Step::Record {
                    stream: 0,
                    event: i as u32,
                });
            }
            if with_adds {
                if with_gemms {
                    p.steps.push(fc::Step::Wait {
                        stream: 1,
                        event: i as u32,
                    });
                }
                ad.push(timed(&mut p, 1, add_on(acc, c, acc, m * n, 0)));
            }
        }
        (p, g, ad)
    };
    // Per run: GEMMs 2..steps from the second's start to the last's end, per GEMM (they
    // run beside adds 1..steps−1 in the chain; gaps where a GEMM waits for SMs count);
    // adds 1..steps−1, mean duration. Medians over runs.
    let measure = |p: fc::Program, g: &[u32], ad: &[u32]| -> Result<(f64, f64), GpuError> {
        let l = fc::Loaded::new(p).map_err(cuda)?;
        l.initialise().map_err(cuda)?;
        for _ in 0..2 {
            l.run().map_err(cuda)?;
        }
        let (mut gs, mut adds) = (Vec::new(), Vec::new());
        for _ in 0..repeats.max(1) {
            let r = l.run().map_err(cuda)?;
            if g.len() == steps {
                let (s, e) = (r.spans[g[1] as usize].0, r.spans[g[steps - 1] as usize].1);
                gs.push((e - s) / (steps - 1) as f64);
            }
            if ad.len() == steps {
                let t: f64 = ad[..steps - 1]
                    .iter()
                    .map(|&x| r.spans[x as usize].1 - r.spans[x as usize].0)
                    .sum();
                adds.push(t / (steps - 1) as f64);
            }
        }
        Ok((
            if gs.is_empty() { 0.0 } else { median(gs) },
            if adds.is_empty() { 0.0 } else { median(adds) },
        ))
    };
    let (p, g, ad) = build(true, false);
    let (gemm_alone, _) = measure(p, &g, &ad)?;
    let (p, g, ad) = build(false, true);
    let (_, add_alone) = measure(p, &g, &ad)?;
    let (p, g, ad) = build(true, true);
    let (gemm_in_chain, add_in_chain) = measure(p, &g, &ad)?;
    Ok(super::ReductionCalibration {
        sweep,
        chain_gemm: (m, n, k),
        gemm_alone_s: gemm_alone,
        gemm_in_chain_s: gemm_in_chain,
        add_alone_s: add_alone,
        add_in_chain_s: add_in_chain,
    })
}

/// GPU 0 → GPU 1: copy-engine and NCCL bandwidth (256 MiB) and latency (16 B), and the
/// 8192³ GEMM on GPU 0 beside an NCCL send loop.
fn p2p(repeats: u32) -> Result<P2pCalibration, GpuError> {
    let big: u64 = 1 << 27; // elements: 256 MiB
    let small: u64 = 8;
    let on = |p: &mut fc::Program, device: u32, elems: u64| {
        p.buffers.push(fc::Buffer {
            device,
            elems,
            init: fc::Init::Poison,
        });
        p.buffers.len() as u32 - 1
    };
    // Streams: 0 on GPU 0 (sends, GEMM), 1 on GPU 1 (copies and recvs land there), 2 on
    // GPU 0 (the GEMM beside the sends).
    let mut p = fc::Program {
        streams: vec![0, 1, 0],
        nccl: vec![0, 1],
        ..Default::default()
    };
    let (s0, d1) = (on(&mut p, 0, big), on(&mut p, 1, big));
    let copy = |dst, src, bytes| fc::Kernel::Copy {
        dst: at(dst),
        src: at(src),
        bytes,
    };
    let ce_big = timed(&mut p, 1, copy(d1, s0, big * 2));
    let ce_small: Vec<u32> = (0..32)
        .map(|_| timed(&mut p, 1, copy(d1, s0, small * 2)))
        .collect();
    let nccl = |p: &mut fc::Program, elems: u64| {
        let span = p.spans;
        p.spans += 1;
        p.steps.push(fc::Step::Mark {
            stream: 1,
            span,
            end: false,
        });
        p.steps.push(fc::Step::Nccl {
            from: 0,
            send_stream: 0,
            src: at(s0),
            to: 1,
            recv_stream: 1,
            dst: at(d1),
            elems,
        });
        p.steps.push(fc::Step::Mark {
            stream: 1,
            span,
            end: true,
        });
        span
    };
    let nc_big = nccl(&mut p, big);
    let nc_small: Vec<u32> = (0..32).map(|_| nccl(&mut p, small)).collect();
    // The GEMM on stream 2 while NCCL sends run on stream 0 of the same GPU.
    let (gm, gn, gk) = (8192u64, 8192u64, 8192u64);
    let (a, b, c) = (
        random(&mut p, gm * gk, 31),
        random(&mut p, gk * gn, 32),
        random(&mut p, gm * gn, 33),
    );
    // The GEMM starts behind the latency probes, with six large sends queued beside it.
    p.events = 1;
    p.steps.push(fc::Step::Record {
        stream: 0,
        event: 0,
    });
    p.steps.push(fc::Step::Wait {
        stream: 2,
        event: 0,
    });
    let g = timed(&mut p, 2, gemm(a, b, c, gm, gn, gk));
    for _ in 0..2 {
        nccl(&mut p, big);
    }
    for _ in 0..4 {
        nccl(&mut p, big);
    }
    let d = durations(p, 1, repeats)?;
    let lat = |v: &[u32]| median(v.iter().map(|&s| d[s as usize]).collect());
    Ok(P2pCalibration {
        copy_bytes_per_s: (big * 2) as f64 / d[ce_big as usize],
        copy_latency_s: lat(&ce_small),
        nccl_bytes_per_s: (big * 2) as f64 / d[nc_big as usize],
        nccl_latency_s: lat(&nc_small),
        gemm_with_nccl_s: d[g as usize],
    })
}
