//! The reference a run's results are checked against: the workload computed the plain
//! way on one GPU — one full GEMM per rank on the whole gathered input, the activation,
//! the second GEMM, and the reduction as a sum of every rank's partials — from the same
//! random inputs (same keys) as the run, in token order; a result's rows are compared
//! with the tokens they hold ([`crate::exec::data::RowMap`]). Tensor names are the workload's: `x` (input,
//! sequence-sharded), `w_fc1`, `a` (the rank-local input of `gemm-rs`), `w_fc2`.

use super::{GpuError, rel_frobenius};
use crate::exec::data::data_key;
use crate::plan::{OpIo, Plan};
use crate::scenario::{Activation, Workload};
use flashoverlap_cuda as fc;

fn cuda(e: fc::CudaError) -> GpuError {
    super::from_cuda(e)
}

fn find(plan: &Plan, name: &str, rank: u32) -> Result<(u64, u64), GpuError> {
    plan.buffer_named(name, rank)
        .map(|b| (b.rows, b.cols))
        .ok_or_else(|| {
            GpuError::Cuda(format!(
                "reference: the plan has no buffer `{name}` on rank {rank}"
            ))
        })
}

struct Builder {
    p: fc::Program,
    device: u32,
}

impl Builder {
    fn buf(&mut self, elems: u64, key: Option<u64>) -> u32 {
        self.p.buffers.push(fc::Buffer {
            device: self.device,
            elems,
            init: match key {
                Some(key) => fc::Init::random(key, elems),
                None => fc::Init::Poison,
            },
        });
        self.p.buffers.len() as u32 - 1
    }
    fn gemm(&mut self, a: u32, b: u32, c: u32, m: u64, n: u64, k: u64) {
        self.p.steps.push(fc::Step::Launch {
            stream: 0,
            kernel: fc::Kernel::gemm(a, b, c, m, n, k),
        });
    }
    fn add(&mut self, out: u32, x: u32, y: u32, elems: u64) {
        let s = |buf| fc::Span2 {
            ptr: fc::Ptr { buf, offset: 0 },
            stride: elems,
        };
        self.p.steps.push(fc::Step::Launch {
            stream: 0,
            kernel: fc::Kernel::Add {
                out: s(out),
                x: s(x),
                y: s(y),
                block_elems: elems,
                blocks: 1,
                ctas: 0,
            },
        });
    }
}

/// Worst relative Frobenius error of any rank's result.
pub(super) fn check(
    plan: &Plan,
    workload: Workload,
    run: &fc::Loaded,
    device: u32,
    only: Option<u32>,
) -> Result<f64, GpuError> {
    let n = plan.ranks;
    let func = plan.io.iter().find_map(|io| match io {
        OpIo::Activation { func, .. } => Some(*func),
        _ => None,
    });
    let mut b = Builder {
        p: fc::Program {
            streams: vec![device],
            ..Default::default()
        },
        device,
    };
    // Per rank, the buffer holding that rank's contribution (full rows).
    let mut parts = Vec::new();
    let (mut m, mut width) = (0, 0);
    let x = if workload != Workload::GemmRs {
        let (rows, h) = find(plan, "x", 0)?;
        m = rows;
        Some((b.buf(rows * h, Some(data_key("x", None))), h))
    } else {
        None
    };
    for r in 0..n {
        let fc1_out = match x {
            Some((xb, h)) => {
                let (_, w1c) = find(plan, "w_fc1", r)?;
                let w1 = b.buf(h * w1c, Some(data_key("w_fc1", Some(r))));
                let y = b.buf(m * w1c, None);
                b.gemm(xb, w1, y, m, w1c, h);
                Some((y, w1c))
            }
            None => None,
        };
        match workload {
            Workload::AgGemm => {
                let (y, w1c) = fc1_out.expect("fc1 ran");
                parts.push(y);
                width = w1c;
            }
            // Whole layers, steps and MoE blocks are simulator-only plans (no data flow).
            Workload::Layer | Workload::Step | Workload::Attention | Workload::Moe => {
                return Err(GpuError::NoDataflow);
            }
            Workload::GemmRs | Workload::Mlp => {
                let (k, h) = find(plan, "w_fc2", r)?;
                let a = match fc1_out {
                    None => {
                        let (rows, _) = find(plan, "a", r)?;
                        m = rows;
                        b.buf(rows * k, Some(data_key("a", Some(r))))
                    }
                    Some((y, w1c)) => {
                        let f = func.unwrap_or(Activation::Gelu);
                        let a = b.buf(m * k, None);
                        b.p.steps.push(fc::Step::Launch {
                            stream: 0,
                            kernel: fc::Kernel::Act {
                                out: fc::Ptr { buf: a, offset: 0 },
                                input: fc::Ptr { buf: y, offset: 0 },
                                block_rows: m,
                                blocks: 1,
                                cols: k,
                                out_stride_rows: m,
                                in_stride_rows: m,
                                func: match f {
                                    Activation::Relu => fc::ActFn::Relu,
                                    Activation::Gelu | Activation::GeGlu => fc::ActFn::Gelu,
                                    Activation::Silu | Activation::SwiGlu => fc::ActFn::Silu,
                                },
                                gated: f.gated(),
                            },
                        });
                        debug_assert_eq!(w1c, if f.gated() { 2 * k } else { k });
                        a
                    }
                };
                let w2 = b.buf(k * h, Some(data_key("w_fc2", Some(r))));
                let p = b.buf(m * h, None);
                b.gemm(a, w2, p, m, h, k);
                parts.push(p);
                width = h;
            }
        }
    }
    if workload != Workload::AgGemm {
        // The reduction: sum every rank's partials.
        let elems = m * width;
        let mut acc = parts[0];
        for &p in &parts[1..] {
            let out = b.buf(elems, None);
            b.add(out, acc, p, elems);
            acc = out;
        }
        parts = vec![acc; n as usize];
    }
    let reference = fc::Loaded::new(b.p).map_err(cuda)?;
    reference.initialise().map_err(cuda)?;
    reference.run().map_err(cuda)?;
    // Result rows map to reference rows (tokens) as the plan laid its input out.
    let map = crate::exec::data::RowMap::of(plan);
    let mut worst = 0.0f64;
    for (r, &part) in parts.iter().enumerate().take(n as usize) {
        if only.is_some_and(|o| o as usize != r) {
            continue;
        }
        let out = plan.outputs.get(r).ok_or(GpuError::NoDataflow)?;
        let cols = plan.buffers[out.buf as usize].cols;
        if cols != width {
            return Err(GpuError::Cuda(format!(
                "reference: rank {r}'s result has {cols} columns, the reference {width}"
            )));
        }
        let pieces = map.pieces(out).ok_or_else(|| {
            GpuError::Cuda(format!(
                "reference: rank {r}'s result holds rows of no token"
            ))
        })?;
        let (mut got, mut want) = (Vec::new(), Vec::new());
        for (at, g, rows) in pieces {
            got.extend(run.read(out.buf, at * cols, rows * cols).map_err(cuda)?);
            want.extend(reference.read(part, g * cols, rows * cols).map_err(cuda)?);
        }
        let f = |v: Vec<u16>| v.into_iter().map(fc::bf16_to_f32).collect::<Vec<f32>>();
        worst = worst.max(rel_frobenius(&f(got), &f(want)));
    }
    Ok(worst)
}
