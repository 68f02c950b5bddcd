//! The host executor: a Plan's data flow computed on the CPU in f64, op by op, in an
//! order its dependencies, streams and transfers allow; and the workload computed the
//! plain way (one full GEMM per rank, the activation, the second GEMM, the sum of the
//! partials) to check it against. It tells, on any machine and for small shapes, whether a
//! strategy computes the right thing into the right rows: buffers, regions, row layouts,
//! the reduce-scatter chains. The GPU executor checks the same on the device in bf16
//! ([`super::gpu`]); both map result rows to tokens with [`RowMap`] (from
//! [`super::data`], which both import; neither imports the other).
//!
//! Inputs are small integers (−2 … 2), so GEMMs and sums are exact in f64 whatever the
//! order of the additions: without a gated or smooth activation, a correct plan matches
//! the reference exactly.
//!
//! A launch's transfers move data when every launch they connect (through send/recv
//! pairs) may start; those launches then run together, reading every sent region before
//! any is written, as one NCCL group does.

pub use super::data::RowMap;
use crate::plan::{BufInit, LaunchId, OpIo, OpKind, Plan, Region};
use crate::scenario::{Activation, Workload};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum HostError {
    #[error("the plan has no data flow (buffers and regions), so it cannot be computed")]
    NoDataflow,
    #[error(
        "the plan's buffers hold {elems} elements; the host executor computes at most {limit} \
         (use a smaller batch, sequence or model)"
    )]
    TooLarge { elems: u64, limit: u64 },
    #[error("{waiting} launches can never start (the plan deadlocks)")]
    Stuck { waiting: usize },
    #[error("reference: {0}")]
    Reference(String),
}

/// The most buffer elements [`execute`] takes (1 GiB of f64).
pub const MAX_ELEMS: u64 = 1 << 27;

/// The value of element `index` of the tensor with key `key`: an integer in −2 … 2
/// (splitmix64 of the two). Keys are [`super::data::data_key`]s, as on the GPU.
pub fn value(key: u64, index: u64) -> f64 {
    let mut z = key ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z % 5) as f64 - 2.0
}

/// Each row of a region, in order.
fn rows_of(r: &Region) -> impl Iterator<Item = u64> + '_ {
    let b = r.blocks.max(1) as u64;
    let per = r.block_rows();
    (0..b).flat_map(move |j| (0..per).map(move |i| r.row0 + j * r.stride_rows + i))
}

/// The activation as the GPU kernel computes it (GELU in its tanh form), in f64.
pub fn activate(func: Activation, g: f64) -> f64 {
    match func {
        Activation::Relu => g.max(0.0),
        Activation::Gelu | Activation::GeGlu => {
            0.5 * g * (1.0 + (0.797_884_560_802_865_4 * (g + 0.044715 * g * g * g)).tanh())
        }
        Activation::Silu | Activation::SwiGlu => g / (1.0 + (-g).exp()),
    }
}

struct Bufs<'a> {
    plan: &'a Plan,
    data: Vec<Vec<f64>>,
}

impl Bufs<'_> {
    fn cols(&self, buf: u32) -> usize {
        self.plan.buffers[buf as usize].cols as usize
    }
    fn row(&self, buf: u32, row: u64) -> &[f64] {
        let c = self.cols(buf);
        &self.data[buf as usize][row as usize * c..(row as usize + 1) * c]
    }
    fn read(&self, r: &Region) -> Vec<Vec<f64>> {
        rows_of(r)
            .map(|row| self.row(r.buf, row).to_vec())
            .collect()
    }
    fn write(&mut self, r: &Region, rows: Vec<Vec<f64>>, accumulate: bool) {
        let c = self.cols(r.buf);
        let d = &mut self.data[r.buf as usize];
        for (row, v) in rows_of(r).zip(rows) {
            let dst = &mut d[row as usize * c..(row as usize + 1) * c];
            for (o, x) in dst.iter_mut().zip(v) {
                *o = if accumulate { *o + x } else { x };
            }
        }
    }
}

/// Compute `plan`'s data flow; returns every buffer's contents after the run.
pub fn execute(plan: &Plan) -> Result<Vec<Vec<f64>>, HostError> {
    if !plan.has_dataflow() {
        return Err(HostError::NoDataflow);
    }
    let elems: u64 = plan
        .buffers
        .iter()
        .map(|b| b.rows.saturating_mul(b.cols))
        .fold(0u64, u64::saturating_add);
    if elems > MAX_ELEMS {
        return Err(HostError::TooLarge {
            elems,
            limit: MAX_ELEMS,
        });
    }
    let mut bufs = Bufs {
        plan,
        data: plan
            .buffers
            .iter()
            .map(|b| {
                let n = (b.rows * b.cols) as usize;
                match b.init {
                    BufInit::Poison => vec![f64::NAN; n],
                    BufInit::Local => {
                        let key = super::data::data_key(&b.name, Some(b.rank));
                        (0..n as u64).map(|i| value(key, i)).collect()
                    }
                    BufInit::Global { .. } => {
                        let key = super::data::data_key(&b.name, None);
                        let mut v = vec![f64::NAN; n];
                        for (at, g, rows) in b.init.global_runs() {
                            for i in 0..rows * b.cols {
                                v[(at * b.cols + i) as usize] = value(key, g * b.cols + i);
                            }
                        }
                        v
                    }
                }
            })
            .collect(),
    };

    // Launches joined by send/recv pairs run together (union-find over launches).
    let nl = plan.launch_count();
    let mut parent: Vec<usize> = (0..nl).collect();
    fn root(p: &mut [usize], mut x: usize) -> usize {
        while p[x] != x {
            p[x] = p[p[x]];
            x = p[x];
        }
        x
    }
    for (op, o) in plan.ops.iter().enumerate() {
        let q = plan.partner(op as u32);
        if q != crate::plan::NO_PARTNER {
            let (a, b) = (
                root(&mut parent, o.launch as usize),
                root(&mut parent, plan.ops[q as usize].launch as usize),
            );
            parent[a] = b;
        }
    }
    let mut groups: Vec<Vec<LaunchId>> = vec![Vec::new(); nl];
    for l in 0..nl {
        let r = root(&mut parent, l);
        groups[r].push(l as LaunchId);
    }
    let groups: Vec<Vec<LaunchId>> = groups.into_iter().filter(|g| !g.is_empty()).collect();
    let mut prev = vec![None; nl];
    for s in 0..plan.streams.len() {
        let ls = plan.stream_launches(s as u32);
        for w in ls.windows(2) {
            prev[w[1] as usize] = Some(w[0]);
        }
    }
    let mut done = vec![false; nl];
    let mut left = groups.len();
    let mut ran = vec![false; groups.len()];
    while left > 0 {
        let mut progress = false;
        for (gi, g) in groups.iter().enumerate() {
            if ran[gi] {
                continue;
            }
            let may_start = |l: LaunchId| {
                prev[l as usize].is_none_or(|p| done[p as usize])
                    && plan
                        .launch_ops(l)
                        .iter()
                        .flat_map(|&op| plan.deps(op))
                        .all(|&d| done[plan.ops[d as usize].launch as usize])
            };
            if !g.iter().all(|&l| may_start(l)) {
                continue;
            }
            run_group(plan, &mut bufs, g);
            for &l in g {
                done[l as usize] = true;
            }
            ran[gi] = true;
            left -= 1;
            progress = true;
        }
        if !progress {
            return Err(HostError::Stuck { waiting: left });
        }
    }
    Ok(bufs.data)
}

/// Run launches that start together: every transfer reads its source first, then the
/// launches' ops write in op order.
fn run_group(plan: &Plan, bufs: &mut Bufs<'_>, launches: &[LaunchId]) {
    let mut ops: Vec<u32> = launches
        .iter()
        .flat_map(|&l| plan.launch_ops(l).iter().copied())
        .collect();
    ops.sort_unstable();
    let received: Vec<Option<Vec<Vec<f64>>>> = ops
        .iter()
        .map(|&op| match (plan.io[op as usize], plan.partner(op)) {
            (OpIo::Recv { .. }, send) if send != crate::plan::NO_PARTNER => {
                match plan.io[send as usize] {
                    OpIo::Send { src } => Some(bufs.read(&src)),
                    _ => None,
                }
            }
            _ => None,
        })
        .collect();
    for (&op, got) in ops.iter().zip(received) {
        let kind = plan.ops[op as usize].kind;
        match plan.io[op as usize] {
            OpIo::Gemm { a, b, c } => {
                let (k, n) = (bufs.cols(a.buf), bufs.cols(b));
                let w = &bufs.data[b as usize];
                let out: Vec<Vec<f64>> = bufs
                    .read(&a)
                    .into_iter()
                    .map(|x| {
                        let mut y = vec![0.0; n];
                        for (kk, &xv) in x.iter().enumerate().take(k) {
                            let wr = &w[kk * n..(kk + 1) * n];
                            for (o, &wv) in y.iter_mut().zip(wr) {
                                *o += xv * wv;
                            }
                        }
                        y
                    })
                    .collect();
                bufs.write(&c, out, false);
            }
            OpIo::Add { out, x, y } => {
                let sum = bufs
                    .read(&x)
                    .into_iter()
                    .zip(bufs.read(&y))
                    .map(|(a, b)| a.iter().zip(&b).map(|(p, q)| p + q).collect())
                    .collect();
                bufs.write(&out, sum, false);
            }
            OpIo::Activation { out, input, func } => {
                let w = bufs.cols(out.buf);
                let act = bufs
                    .read(&input)
                    .into_iter()
                    .map(|v| {
                        (0..w)
                            .map(|c| {
                                let a = activate(func, v[c]);
                                if func.gated() { a * v[w + c] } else { a }
                            })
                            .collect()
                    })
                    .collect();
                bufs.write(&out, act, false);
            }
            OpIo::Copy { dst, src } => {
                let v = bufs.read(&src);
                bufs.write(&dst, v, false);
            }
            OpIo::Send { .. } => {}
            OpIo::Recv { dst } => {
                let accumulate = matches!(
                    kind,
                    OpKind::Recv {
                        accumulate: true,
                        ..
                    }
                );
                if let Some(v) = got {
                    bufs.write(&dst, v, accumulate);
                }
            }
        }
    }
}

fn find(plan: &Plan, name: &str, rank: u32) -> Result<(u64, u64), HostError> {
    plan.buffer_named(name, rank)
        .map(|b| (b.rows, b.cols))
        .ok_or_else(|| {
            HostError::Reference(format!("the plan has no buffer `{name}` on rank {rank}"))
        })
}

fn matmul(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for kk in 0..k {
            let x = a[i * k + kk];
            for j in 0..n {
                c[i * n + j] += x * b[kk * n + j];
            }
        }
    }
    c
}

/// Compute `plan` on the host and compare every rank's result with the workload computed
/// the plain way: the worst relative Frobenius error over ranks (0 when exact).
pub fn check(plan: &Plan, workload: Workload) -> Result<f64, HostError> {
    if matches!(
        workload,
        Workload::Layer | Workload::Step | Workload::Attention
    ) {
        return Err(HostError::NoDataflow);
    }
    let got = execute(plan)?;
    let n = plan.ranks;
    let func = plan.io.iter().find_map(|io| match io {
        OpIo::Activation { func, .. } => Some(*func),
        _ => None,
    });
    let key = super::data::data_key;
    let local = |name: &str, r: u32, len: u64| -> Vec<f64> {
        (0..len).map(|i| value(key(name, Some(r)), i)).collect()
    };
    // Per rank, its contribution with all rows (reference row order).
    let mut parts = Vec::new();
    let mut width = 0;
    let x = if workload != Workload::GemmRs {
        let (m, h) = find(plan, "x", 0)?;
        let kx = key("x", None);
        Some(((0..m * h).map(|i| value(kx, i)).collect::<Vec<_>>(), m, h))
    } else {
        None
    };
    for r in 0..n {
        let fc1 = match &x {
            Some((xv, m, h)) => {
                let (_, w1c) = find(plan, "w_fc1", r)?;
                let w1 = local("w_fc1", r, h * w1c);
                Some((
                    matmul(xv, &w1, *m as usize, *h as usize, w1c as usize),
                    *m,
                    w1c,
                ))
            }
            None => None,
        };
        match (workload, fc1) {
            (Workload::AgGemm, Some((y, _, w1c))) => {
                parts.push(y);
                width = w1c;
            }
            (Workload::GemmRs | Workload::Mlp, fc1) => {
                let (k, h) = find(plan, "w_fc2", r)?;
                let (a, m) = match fc1 {
                    None => {
                        let (m, _) = find(plan, "a", r)?;
                        (local("a", r, m * k), m)
                    }
                    Some((y, m, w1c)) => {
                        let f = func.unwrap_or(Activation::Gelu);
                        let mut a = vec![0.0; (m * k) as usize];
                        for i in 0..m as usize {
                            for c in 0..k as usize {
                                let v = activate(f, y[i * w1c as usize + c]);
                                a[i * k as usize + c] = if f.gated() {
                                    v * y[i * w1c as usize + k as usize + c]
                                } else {
                                    v
                                };
                            }
                        }
                        (a, m)
                    }
                };
                let w2 = local("w_fc2", r, k * h);
                parts.push(matmul(&a, &w2, m as usize, k as usize, h as usize));
                width = h;
            }
            _ => {
                return Err(HostError::Reference(
                    "the workload's input is missing".into(),
                ));
            }
        }
    }
    if workload != Workload::AgGemm {
        let mut acc = parts[0].clone();
        for p in &parts[1..] {
            for (a, b) in acc.iter_mut().zip(p) {
                *a += b;
            }
        }
        parts = vec![acc; n as usize];
    }
    let map = RowMap::of(plan);
    let mut worst = 0.0f64;
    for (r, want) in parts.iter().enumerate() {
        let out = plan
            .outputs
            .get(r)
            .ok_or_else(|| HostError::Reference(format!("rank {r} has no result region")))?;
        let w = plan.buffers[out.buf as usize].cols;
        if w != width {
            return Err(HostError::Reference(format!(
                "rank {r}'s result has {w} columns, the reference {width}"
            )));
        }
        let pieces = map.pieces(out).ok_or_else(|| {
            HostError::Reference(format!("rank {r}'s result holds rows of no token"))
        })?;
        let (mut num, mut den) = (0.0f64, 0.0f64);
        for (at, g, rows) in pieces {
            let w = w as usize;
            let have = &got[out.buf as usize][at as usize * w..(at + rows) as usize * w];
            let should = want
                .get(g as usize * w..(g + rows) as usize * w)
                .ok_or_else(|| HostError::Reference(format!("rank {r}: row {g} out of range")))?;
            for (&o, &e) in have.iter().zip(should) {
                if !o.is_finite() {
                    return Ok(f64::INFINITY);
                }
                num += (o - e) * (o - e);
                den += e * e;
            }
        }
        let err = if den == 0.0 {
            if num == 0.0 { 0.0 } else { f64::INFINITY }
        } else {
            (num / den).sqrt()
        };
        worst = worst.max(err);
    }
    Ok(worst)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config;
    use crate::scenario::Strategy;

    fn tiny(tp: u64, activation: Activation) -> crate::scenario::Scenario {
        let mut sc = config::load_scenario("default").unwrap();
        sc.model.hidden = 16;
        sc.model.ffn = 24;
        sc.model.activation = activation;
        sc.parallel.tp = tp;
        sc.batch = 1;
        sc.seq = 48;
        sc
    }

    const STRATEGIES: [Strategy; 8] = [
        Strategy::Sequential,
        Strategy::Bulk,
        Strategy::Chunked(2),
        Strategy::Chunked(4),
        Strategy::Flash,
        Strategy::Direct,
        Strategy::PermuteLoop,
        Strategy::PermuteLoopBidir,
    ];

    /// Every strategy of every workload that runs for real computes the reference, into
    /// the rows the result map names, at tp 2, 3 and 4.
    #[test]
    fn every_strategy_computes_the_reference() {
        for tp in [2, 3, 4] {
            for w in [Workload::AgGemm, Workload::GemmRs, Workload::Mlp] {
                for s in STRATEGIES {
                    let sc = tiny(tp, Activation::Relu);
                    let plan = crate::strategy::build(&sc, w, s).unwrap();
                    let err = check(&plan, w).unwrap();
                    assert_eq!(err, 0.0, "tp {tp} {w:?} {s}: error {err}");
                }
            }
        }
        // Gated and smooth activations: exact up to rounding.
        for a in [Activation::SwiGlu, Activation::Gelu] {
            for s in STRATEGIES {
                let plan = crate::strategy::build(&tiny(4, a), Workload::Mlp, s).unwrap();
                let err = check(&plan, Workload::Mlp).unwrap();
                assert!(err < 1e-12, "{a:?} {s}: error {err}");
            }
        }
    }

    /// The check fails when a plan computes the wrong thing or leaves a result row
    /// unwritten.
    #[test]
    fn a_wrong_plan_fails_the_check() {
        let sc = tiny(4, Activation::Relu);
        let plan = crate::strategy::build(&sc, Workload::Mlp, Strategy::Chunked(2)).unwrap();
        // Drop an accumulation: a reduce-scatter ring step's recv now overwrites.
        let mut bad = plan.clone();
        let recv = bad
            .ops
            .iter()
            .position(|o| {
                matches!(
                    o.kind,
                    OpKind::Recv {
                        accumulate: true,
                        ..
                    }
                )
            })
            .unwrap();
        if let OpKind::Recv { accumulate, .. } = &mut bad.ops[recv].kind {
            *accumulate = false;
        }
        assert!(check(&bad, Workload::Mlp).unwrap() > 1e-3);
        // Point rank 0's result at rank 1's shard (only partly reduced there).
        let mut bad = plan.clone();
        let out = bad.outputs[0];
        bad.outputs[0] = crate::strategy::shard_region(Strategy::Chunked(2), 4, 48, out.buf, 1);
        assert!(check(&bad, Workload::Mlp).unwrap() > 1e-3);
        // Point it at a buffer nothing writes there.
        let mut bad = plan.clone();
        bad.outputs[0] = Region::rows(out.buf, 0, 12).on(bad.buffers.len() as u32);
        bad.buffers.push(crate::plan::BufferInfo {
            init: BufInit::Poison,
            ..bad.buffers[out.buf as usize].clone()
        });
        assert_eq!(check(&bad, Workload::Mlp), Ok(f64::INFINITY));
        // Flash: skip one of the slice adds (its output keeps the staging's partial).
        let plan = crate::strategy::build(&sc, Workload::Mlp, Strategy::Flash).unwrap();
        let mut bad = plan.clone();
        let add = bad
            .io
            .iter()
            .position(|io| matches!(io, OpIo::Add { .. }))
            .unwrap();
        if let OpIo::Add { x, y, .. } = bad.io[add] {
            bad.io[add] = OpIo::Copy { dst: x, src: y };
        }
        assert!(check(&bad, Workload::Mlp).unwrap() > 1e-3);
        // Chunked with the token-order map would read the wrong rows: the layout matters.
        let plan = crate::strategy::build(&sc, Workload::AgGemm, Strategy::Chunked(2)).unwrap();
        let mut bad = plan.clone();
        for b in &mut bad.buffers {
            if let BufInit::Global { row0, rows, .. } = b.init {
                b.init = BufInit::global(row0, rows);
            }
        }
        assert!(check(&bad, Workload::AgGemm).unwrap() > 1e-3);
    }

    #[test]
    fn chunked_chunks_are_contiguous_gemms() {
        let sc = tiny(4, Activation::Relu);
        for w in [Workload::AgGemm, Workload::GemmRs, Workload::Mlp] {
            let plan = crate::strategy::build(&sc, w, Strategy::Chunked(4)).unwrap();
            for io in &plan.io {
                if let OpIo::Gemm { a, c, .. } = io {
                    assert_eq!((a.blocks, c.blocks), (1, 1), "{w:?}: a batched GEMM");
                }
            }
        }
    }

    #[test]
    fn row_maps_split_regions_at_run_edges() {
        let map = RowMap {
            runs: vec![(0, 10, 4), (4, 0, 4), (8, 20, 4)],
        };
        assert_eq!(
            map.pieces(&Region::rows(0, 2, 8)),
            Some(vec![(2, 12, 2), (4, 0, 4), (8, 20, 2)])
        );
        assert_eq!(map.pieces(&Region::rows(0, 10, 4)), None);
        let id = RowMap { runs: Vec::new() };
        assert_eq!(
            id.pieces(&Region::strided(0, 1, 4, 2, 5)),
            Some(vec![(1, 1, 2), (6, 6, 2)])
        );
    }

    #[test]
    fn oversized_and_simulator_only_plans_are_refused() {
        let mut sc = tiny(2, Activation::Relu);
        sc.model.hidden = 1 << 14;
        sc.seq = 1 << 14;
        let plan = crate::strategy::build(&sc, Workload::AgGemm, Strategy::Flash).unwrap();
        assert!(matches!(execute(&plan), Err(HostError::TooLarge { .. })));
        let plan = crate::strategy::build(
            &tiny(2, Activation::Relu),
            Workload::AgGemm,
            Strategy::Flash,
        )
        .unwrap();
        assert_eq!(check(&plan, Workload::Layer), Err(HostError::NoDataflow));
    }
}
