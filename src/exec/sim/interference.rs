//! Interference of communication with compute on one GPU (METHOD.md §3.2).
//!
//! Per rank the engine keeps three counts — send/recv kernels posted (they hold SMs under
//! an SM-holding transport), transfers moving bytes to or from the GPU, GEMMs running —
//! and the compute ops running. A compute op runs at `1 / factor` of its cost-model rate,
//! `factor` a function of the counts:
//!
//! - a GEMM loses `min(posted × comm_ctas_per_op, max_comm_ctas)` SMs (wave quantization
//!   through [`cost::gemm_sm_slowdown`]) and runs `gemm_slowdown_beside_transfer` slower
//!   while a transfer of its GPU moves bytes;
//! - a memory-bound op (elementwise, copy) runs `memory_op_slowdown_beside_gemm` slower
//!   while a GEMM runs on its GPU;
//! - an elementwise op on a communication stream (a reduction: the adds of Flash-RS,
//!   direct and permute-loop chains) runs `reduction_slowdown_beside_gemm` slower beside a
//!   GEMM, and a GEMM runs `gemm_slowdown_beside_reduction` slower while one runs.
//!
//! Whenever a count changes, every running op of that rank whose factor changed keeps the
//! work it has done (a fraction of its cost-model time), takes the new factor, and gets a
//! new completion event; the old one is recognised as stale by its version.

use super::Interference;
use crate::cost::{self, CostError};
use crate::plan::{OpId, OpKind, Plan, StreamKind};
use crate::scenario::{GpuSpec, Transport};
use std::collections::BTreeMap;

/// A running compute op's progress.
#[derive(Debug, Clone, Copy)]
struct Progress {
    /// Fraction of the op's work still to do.
    left: f64,
    factor: f64,
    /// When `left` and `factor` were last brought up to date.
    since: f64,
    version: u32,
}

pub(super) struct InterferenceState {
    model: Interference,
    posted: Vec<u32>,
    moving: Vec<u32>,
    gemms: Vec<u32>,
    /// Per rank, reductions (elementwise ops on communication streams) running.
    reductions: Vec<u32>,
    /// Per op: it is a reduction.
    is_reduction: Vec<bool>,
    running: Vec<Vec<OpId>>,
    progress: Vec<Progress>,
    /// GEMM SM slowdowns by (shape, SMs left).
    sm_cache: BTreeMap<(u64, u64, u64, usize, u64), f64>,
}

/// A completion to (re)schedule: op, time, version.
pub(super) type Reschedule = (OpId, f64, u32);

impl InterferenceState {
    pub fn new(model: Interference, plan: &Plan) -> InterferenceState {
        let (ranks, ops) = (plan.ranks as usize, plan.op_count());
        InterferenceState {
            model,
            posted: vec![0; ranks],
            moving: vec![0; ranks],
            gemms: vec![0; ranks],
            reductions: vec![0; ranks],
            is_reduction: plan
                .ops
                .iter()
                .map(|o| {
                    matches!(o.kind, OpKind::Elementwise { .. })
                        && plan.streams[o.stream as usize].kind == StreamKind::Comm
                })
                .collect(),
            running: vec![Vec::new(); ranks],
            progress: vec![
                Progress {
                    left: 1.0,
                    factor: 1.0,
                    since: 0.0,
                    version: 0,
                };
                ops
            ],
            sm_cache: BTreeMap::new(),
        }
    }

    pub fn holds_sms(&self) -> bool {
        self.model.transport == Transport::Nccl
    }

    /// Whether `version` is the op's current completion event.
    pub fn current(&self, op: OpId, version: u32) -> bool {
        self.progress[op as usize].version == version
    }

    pub fn compute_started(&mut self, plan: &Plan, op: OpId, now: f64) {
        let o = &plan.ops[op as usize];
        let r = o.rank as usize;
        if matches!(o.kind, OpKind::Gemm { .. }) {
            self.gemms[r] += 1;
        }
        if self.is_reduction[op as usize] {
            self.reductions[r] += 1;
        }
        self.running[r].push(op);
        let p = &mut self.progress[op as usize];
        p.left = 1.0;
        p.since = now;
        // NaN: not yet scheduled, so the next refresh schedules it whatever its factor.
        p.factor = f64::NAN;
    }

    pub fn compute_done(&mut self, plan: &Plan, op: OpId) {
        let o = &plan.ops[op as usize];
        let r = o.rank as usize;
        if matches!(o.kind, OpKind::Gemm { .. }) {
            self.gemms[r] -= 1;
        }
        if self.is_reduction[op as usize] {
            self.reductions[r] -= 1;
        }
        if let Some(i) = self.running[r].iter().position(|&x| x == op) {
            self.running[r].remove(i);
        }
    }

    /// A send or recv of `rank` posted (`+1`) or done (`-1`).
    pub fn posted(&mut self, rank: u32, delta: i32) {
        let c = &mut self.posted[rank as usize];
        *c = c.saturating_add_signed(delta);
    }

    /// A transfer of `rank` started (`+1`) or stopped (`-1`) moving bytes.
    pub fn moving(&mut self, rank: u32, delta: i32) {
        let c = &mut self.moving[rank as usize];
        *c = c.saturating_add_signed(delta);
    }

    fn factor(&mut self, gpu: &GpuSpec, plan: &Plan, op: OpId) -> Result<f64, CostError> {
        let o = &plan.ops[op as usize];
        let r = o.rank as usize;
        let p = &self.model.params;
        Ok(match o.kind {
            OpKind::Gemm { m, n, k, dtype } => {
                let held = if self.holds_sms() {
                    (self.posted[r] as u64)
                        .saturating_mul(p.comm_ctas_per_op)
                        .min(p.max_comm_ctas)
                } else {
                    0
                };
                let sms = gpu.sm_count.saturating_sub(held);
                let key = (m, n, k, dtype as usize, sms);
                let sm = match self.sm_cache.get(&key) {
                    Some(&f) => f,
                    None => {
                        let f = cost::gemm_sm_slowdown(gpu, m, n, k, dtype, sms)?;
                        self.sm_cache.insert(key, f);
                        f
                    }
                };
                let hbm = if self.moving[r] > 0 {
                    p.gemm_slowdown_beside_transfer
                } else {
                    1.0
                };
                let red = if self.reductions[r] > 0 {
                    p.gemm_slowdown_beside_reduction
                } else {
                    1.0
                };
                sm * hbm * red
            }
            _ if self.gemms[r] == 0 => 1.0,
            _ if self.is_reduction[op as usize] => p.reduction_slowdown_beside_gemm,
            _ => p.memory_op_slowdown_beside_gemm,
        })
    }

    /// Re-rate the running compute ops of `rank` at `now`; `base[op]` is an op's
    /// cost-model duration. Completions to schedule go to `out`.
    pub fn refresh(
        &mut self,
        gpu: &GpuSpec,
        plan: &Plan,
        rank: u32,
        now: f64,
        base: impl Fn(OpId) -> f64,
        out: &mut Vec<Reschedule>,
    ) -> Result<(), CostError> {
        let r = rank as usize;
        for i in 0..self.running[r].len() {
            let op = self.running[r][i];
            let f = self.factor(gpu, plan, op)?;
            let d = base(op);
            let p = &mut self.progress[op as usize];
            if p.factor == f {
                continue;
            }
            if p.factor.is_finite() && d > 0.0 {
                p.left = (p.left - (now - p.since) / (d * p.factor)).max(0.0);
            }
            p.since = now;
            p.factor = f;
            p.version = p.version.wrapping_add(1);
            out.push((op, now + p.left * d * f, p.version));
        }
        Ok(())
    }
}
