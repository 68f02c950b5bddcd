//! Interference of communication with compute on one GPU (METHOD.md §3.2).
//!
//! Per rank the engine keeps three counts — send/recv kernels posted (they hold SMs under
//! an SM-holding transport), transfers moving bytes to or from the GPU, GEMMs running —
//! and the compute ops running. A compute op runs at `1 / factor` of its cost-model rate,
//! `factor` a function of the counts:
//!
//! - a GEMM loses `min(posted × comm_ctas_per_op + blocks, max_comm_ctas)` SMs (wave
//!   quantization through [`cost::gemm_sm_slowdown`]; `posted` counts P2P sends and
//!   receives, `blocks` the NCCL thread blocks of collective channels with any op
//!   posted, one SM each however many of their slots are posted) and runs
//!   `gemm_slowdown_beside_transfer` slower while a transfer of its GPU moves bytes;
//! - a memory-bound op (elementwise, copy) runs `memory_op_slowdown_beside_gemm` slower
//!   while a GEMM runs on its GPU;
//! - an elementwise op on a communication stream (a reduction: the adds of Flash-RS,
//!   direct and permute-loop chains) runs `reduction_slowdown_beside_gemm` slower beside a
//!   GEMM, and a GEMM runs `gemm_slowdown_beside_reduction` slower while one runs. A
//!   reduction never waits for a GEMM's SMs. Measured on an H100
//!   (`results/h100-2026-12-07`, llama-2-7b's gemm-rs sites at tp 8 under `direct` and
//!   `flash`), the adds start 2 µs into the first partial GEMM and run beside every GEMM
//!   after it, 2.0–3.2× as long as the last add, which runs alone.
//!
//! With `memory_ops_wait_for_gemm_sms` (SM admission), copies on communication streams
//! are *side ops*, and a side copy that starts while a GEMM still fills every SM (before
//! that GEMM's last, partial wave: [`cost::gemm_partial_tail`]; a GEMM that starts at the
//! same instant counts, it takes the SMs first) is *blocked*: it makes no progress until
//! no running GEMM fills the GPU. Once admitted it keeps its SMs and runs at the
//! memory-op slowdown beside a GEMM that fills the GPU (a copy kernel, resident, goes on
//! beside the next GEMM: ten 8192³ GEMMs beside ten 1 GiB copies measured the copies
//! ending ~0.4 ms after the last GEMM), at full rate beside a GEMM's partial last wave.
//! Each GEMM then also gets a *tail* event at its last wave's start, where blocked copies
//! are admitted.
//!
//! Whenever a count changes, every running op of that rank whose factor changed keeps the
//! work it has done (a fraction of its cost-model time), takes the new factor, and gets a
//! new completion event; the old one is recognised as stale by its version.
//!
//! The state of a running op lives in its rank's list of running ops (a few entries),
//! not in arrays over all ops: a plan of millions of ops would otherwise allocate and
//! touch tens of bytes per op that only the few running at a time use.

use super::program::StreamView;
use super::{Deferral, Interference};
use crate::cost::{self, CostError};
use crate::plan::{EltKind, OpId, OpKind, StreamKind};
use crate::scenario::{DType, GpuSpec, Transport};
use std::collections::BTreeMap;

/// A running compute op: what it is and its progress.
#[derive(Debug, Clone, Copy)]
struct Running {
    op: OpId,
    /// Its cost-model duration (with jitter and straggler factors).
    d: f64,
    /// Fraction of the op's work still to do.
    left: f64,
    factor: f64,
    /// When `left` and `factor` were last brought up to date.
    since: f64,
    /// When the op started.
    started: f64,
    version: u32,
    /// Its completion's place in the queue ([`Resched::Deferred`]).
    done: Deferral,
    /// A GEMM's (groups, m, n, k, dtype).
    gemm: Option<(u64, u64, u64, u64, DType)>,
    /// A side op (a reduction; with SM admission also a copy on a communication stream),
    /// and whether it is a copy (only copies wait for SMs).
    side: bool,
    copy: bool,
    /// A running side op holds SMs (always, without SM admission).
    admitted: bool,
    /// A GEMM's fraction of its time in a last wave that leaves SMs idle (NaN until
    /// computed; 1 for any other op).
    tail: f64,
    /// A GEMM's SM slowdown at the SMs it was last given (`sms`; `u64::MAX` until
    /// first asked): refreshes re-rate a GEMM far more often than its SMs change.
    sms: u64,
    sm_factor: f64,
}

pub(super) struct InterferenceState {
    model: Interference,
    /// Per rank, sends and receives posted outside any thread block.
    posted: Vec<u32>,
    /// Per thread block, its ops posted; per rank, the SMs of its blocks with one posted.
    block_posted: Vec<u32>,
    blocks_busy: Vec<u32>,
    moving: Vec<u32>,
    gemms: Vec<u32>,
    /// Per rank, side ops running and admitted.
    side_ops: Vec<u32>,
    /// Per rank, its compute ops running, in the order they started.
    running: Vec<Vec<Running>>,
    /// GEMM SM slowdowns by (shape, SMs left).
    sm_cache: BTreeMap<(u64, u64, u64, u64, usize, u64), f64>,
}

/// An event to (re)schedule: op, time, version, and which.
pub(super) type Reschedule = (OpId, f64, u32, Resched);

/// What a [`Reschedule`] asks of the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Resched {
    /// Queue the op's completion.
    Done,
    /// The op at this index of its rank's list ends later than its queued completion:
    /// queue nothing, take a sequence number and note both ([`Deferral`]).
    Deferred(usize),
    /// Queue a GEMM's tail (the start of its last, partial wave).
    Tail,
}

impl InterferenceState {
    pub fn new(model: Interference, ranks: usize, blocks: usize) -> InterferenceState {
        InterferenceState {
            model,
            posted: vec![0; ranks],
            block_posted: vec![0; blocks],
            blocks_busy: vec![0; ranks],
            moving: vec![0; ranks],
            gemms: vec![0; ranks],
            side_ops: vec![0; ranks],
            running: vec![Vec::new(); ranks],
            sm_cache: BTreeMap::new(),
        }
    }

    pub fn holds_sms(&self) -> bool {
        self.model.transport == Transport::Nccl
    }

    /// Whether `rank` runs no compute op (a refresh has nothing to re-rate).
    pub fn idle(&self, rank: u32) -> bool {
        self.running[rank as usize].is_empty()
    }

    /// Whether `version` is the current completion event of `op`, running on `rank`.
    pub fn current(&self, rank: u32, op: OpId, version: u32) -> bool {
        self.running[rank as usize]
            .iter()
            .any(|e| e.op == op && e.version == version)
    }

    /// Compute op `op` (of `kind`) of stream `info` started at `now`; `d`: its
    /// cost-model duration.
    pub fn compute_started(&mut self, info: StreamView, op: OpId, kind: OpKind, now: f64, d: f64) {
        let r = info.rank as usize;
        let gemm = match kind {
            OpKind::Gemm { m, n, k, dtype, .. } => Some((1, m, n, k, dtype)),
            OpKind::GroupedGemm {
                groups,
                m,
                n,
                k,
                dtype,
            } => Some((groups as u64, m, n, k, dtype)),
            _ => None,
        };
        if gemm.is_some() {
            self.gemms[r] += 1;
        }
        let admission = self.model.params.memory_ops_wait_for_gemm_sms;
        let side = info.kind == StreamKind::Comm
            && match kind {
                OpKind::Elementwise {
                    kind: EltKind::Join,
                    ..
                } => false,
                OpKind::Elementwise { .. } => true,
                OpKind::Copy { .. } => admission,
                _ => false,
            };
        let copy = matches!(kind, OpKind::Copy { .. });
        // A reduction holds SMs from its start (measured: it runs beside a GEMM from the
        // GEMM's start); with SM admission a side copy waits for the next refresh to decide.
        let admitted = side && !copy;
        if admitted {
            self.side_ops[r] += 1;
        }
        self.running[r].push(Running {
            op,
            d,
            left: 1.0,
            // NaN: not yet scheduled, so the next refresh schedules it whatever its factor.
            factor: f64::NAN,
            since: now,
            started: now,
            version: 0,
            done: Deferral::NONE,
            gemm,
            side,
            copy,
            admitted,
            tail: if gemm.is_some() { f64::NAN } else { 1.0 },
            sms: u64::MAX,
            sm_factor: 1.0,
        });
    }

    /// Completion event `version` of `op` popped: `None` if stale; else, as
    /// [`Deferral::popped`], `None` if the op ends now or the key to queue it again under.
    pub fn popped(&mut self, rank: u32, op: OpId, version: u32) -> Option<Option<u128>> {
        self.running[rank as usize]
            .iter_mut()
            .find(|e| e.op == op && e.version == version)
            .map(|e| e.done.popped())
    }

    /// The later end `at` of the running op at index `i` of `rank`'s list
    /// ([`Resched::Deferred`]), with the sequence number `seq` taken for it.
    pub fn note(&mut self, rank: u32, i: usize, at: f64, seq: u64) {
        self.running[rank as usize][i].done.note(at, seq);
    }

    /// Compute op `op` of `rank` finished.
    pub fn compute_done(&mut self, rank: u32, op: OpId) {
        let r = rank as usize;
        let Some(i) = self.running[r].iter().position(|e| e.op == op) else {
            return;
        };
        let e = self.running[r].remove(i);
        if e.gemm.is_some() {
            self.gemms[r] -= 1;
        }
        if e.admitted {
            self.side_ops[r] -= 1;
        }
    }

    /// A send or recv of stream `info` posted (`+1`) or done (`-1`); `block_sms`: the
    /// SMs of a thread block. Returns whether the SMs communication holds on its rank
    /// changed, the only change its ops' factors see.
    pub fn posted(&mut self, info: StreamView, block_sms: impl Fn(u32) -> u32, delta: i32) -> bool {
        let r = info.rank as usize;
        let before = self.held(r);
        match info.block {
            Some(b) => {
                let c = &mut self.block_posted[b as usize];
                let was = *c > 0;
                *c = c.saturating_add_signed(delta);
                let sms = block_sms(b);
                match (was, *c > 0) {
                    (false, true) => self.blocks_busy[r] = self.blocks_busy[r].saturating_add(sms),
                    (true, false) => self.blocks_busy[r] = self.blocks_busy[r].saturating_sub(sms),
                    _ => {}
                }
            }
            None => {
                let c = &mut self.posted[r];
                *c = c.saturating_add_signed(delta);
            }
        }
        self.held(r) != before
    }

    /// The SMs communication holds on rank `r` (0 unless the transport holds SMs).
    fn held(&self, r: usize) -> u64 {
        let p = &self.model.params;
        if self.holds_sms() {
            (self.posted[r] as u64)
                .saturating_mul(p.comm_ctas_per_op)
                .saturating_add(self.blocks_busy[r] as u64)
                .min(p.max_comm_ctas)
        } else {
            0
        }
    }

    /// A transfer of `rank` started (`+1`) or stopped (`-1`) moving bytes. Returns
    /// whether the rank went from moving none to some or back, the only change its ops'
    /// factors see.
    pub fn moving(&mut self, rank: u32, delta: i32) -> bool {
        let c = &mut self.moving[rank as usize];
        let was = *c > 0;
        *c = c.saturating_add_signed(delta);
        was != (*c > 0)
    }

    /// Whether a running GEMM of `rank` fills every SM at `now`: it has not reached its
    /// last, partial wave (every running GEMM started no later than now, so one that
    /// starts at this very instant counts: it takes the SMs before a side op that
    /// becomes ready with it). Tails must be known ([`Self::tails`]).
    fn gemm_fills_sms(running: &[Running], now: f64) -> bool {
        running.iter().any(|g| {
            g.gemm.is_some() && {
                let left = if g.factor.is_finite() && g.d > 0.0 {
                    g.left - (now - g.since) / (g.d * g.factor)
                } else {
                    g.left
                };
                left > g.tail + 1e-9
            }
        })
    }

    /// Compute the tails ([`cost::gemm_partial_tail`]) of `rank`'s running GEMMs that
    /// have none yet.
    fn tails(&mut self, gpu: &GpuSpec, rank: usize) -> Result<(), CostError> {
        for e in self.running[rank].iter_mut() {
            if e.tail.is_nan()
                && let Some((g, m, n, k, dtype)) = e.gemm
            {
                e.tail = if g == 1 {
                    cost::gemm_partial_tail(gpu, m, n, k, dtype)?
                } else {
                    cost::grouped_gemm_partial_tail(gpu, g, m, n, k, dtype)?
                };
            }
        }
        Ok(())
    }

    /// The factor of running op `running[i]` of `rank` at `now`.
    fn factor(&mut self, gpu: &GpuSpec, rank: usize, i: usize, now: f64) -> Result<f64, CostError> {
        let r = rank;
        let e = self.running[r][i];
        let p = &self.model.params;
        if p.memory_ops_wait_for_gemm_sms && e.side && e.copy {
            if !e.admitted {
                return Ok(f64::INFINITY);
            }
            // Slowed only beside a GEMM that fills the GPU.
            return Ok(if Self::gemm_fills_sms(&self.running[r], now) {
                p.memory_op_slowdown_beside_gemm
            } else {
                1.0
            });
        }
        Ok(match e.gemm {
            Some((g, m, n, k, dtype)) => {
                let sms = gpu.sm_count.saturating_sub(self.held(r));
                let sm = if e.sms == sms {
                    e.sm_factor
                } else {
                    let key = (g, m, n, k, dtype as usize, sms);
                    let f = match self.sm_cache.get(&key) {
                        Some(&f) => f,
                        None => {
                            let f = cost::grouped_gemm_sm_slowdown(gpu, g, m, n, k, dtype, sms)?;
                            self.sm_cache.insert(key, f);
                            f
                        }
                    };
                    let slot = &mut self.running[r][i];
                    slot.sms = sms;
                    slot.sm_factor = f;
                    f
                };
                let p = &self.model.params;
                let hbm = if self.moving[r] > 0 {
                    p.gemm_slowdown_beside_transfer
                } else {
                    1.0
                };
                let red = if self.side_ops[r] > 0 {
                    p.gemm_slowdown_beside_reduction
                } else {
                    1.0
                };
                sm * hbm * red
            }
            _ if self.gemms[r] == 0 => 1.0,
            _ if e.side => p.reduction_slowdown_beside_gemm,
            _ => p.memory_op_slowdown_beside_gemm,
        })
    }

    /// Re-rate the running compute ops of `rank` at `now`. Completions to schedule go to
    /// `out`.
    pub fn refresh(
        &mut self,
        gpu: &GpuSpec,
        rank: u32,
        now: f64,
        out: &mut Vec<Reschedule>,
    ) -> Result<(), CostError> {
        let r = rank as usize;
        let admission = self.model.params.memory_ops_wait_for_gemm_sms;
        if admission {
            self.tails(gpu, r)?;
            // Blocked side ops get SMs once no running GEMM fills the GPU. One admitted at
            // this very instant is decided again: a GEMM that starts at the same time
            // (processed after it) takes the SMs first.
            for i in 0..self.running[r].len() {
                let e = self.running[r][i];
                if !e.copy || !e.side || (e.admitted && e.started < now) {
                    continue;
                }
                let admit = !Self::gemm_fills_sms(&self.running[r], now);
                if admit != e.admitted {
                    self.running[r][i].admitted = admit;
                    if admit {
                        self.side_ops[r] += 1;
                    } else {
                        self.side_ops[r] -= 1;
                    }
                }
            }
        }
        // Re-rating an op keeps its progress at `now`, which is what a later op's factor
        // reads of it (`gemm_fills_sms`), so one pass does.
        for i in 0..self.running[r].len() {
            let f = self.factor(gpu, r, i, now)?;
            let p = &mut self.running[r][i];
            let d = p.d;
            let tail = if admission && p.gemm.is_some() {
                p.tail
            } else {
                0.0
            };
            if p.factor == f {
                continue;
            }
            if p.factor.is_finite() && d > 0.0 {
                p.left = (p.left - (now - p.since) / (d * p.factor)).max(0.0);
            }
            p.since = now;
            p.factor = f;
            if !f.is_finite() {
                // Blocked: no completion until admitted; the queued ones are stale.
                p.version = p.version.wrapping_add(1);
                p.done = Deferral::NONE;
                continue;
            }
            let at = now + p.left * d * f;
            // Without SM admission an op has no tail event, whose time a deferral would
            // leave live at its old value.
            if !admission && p.done.defers(at) {
                out.push((p.op, at, p.version, Resched::Deferred(i)));
                continue;
            }
            p.version = p.version.wrapping_add(1);
            p.done.queue(at);
            out.push((p.op, at, p.version, Resched::Done));
            if tail > 0.0 && p.left > tail + 1e-9 {
                out.push((
                    p.op,
                    now + (p.left - tail) * d * f,
                    p.version,
                    Resched::Tail,
                ));
            }
        }
        Ok(())
    }
}
