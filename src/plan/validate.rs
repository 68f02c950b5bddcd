//! Plan validation: every receive has exactly one send (same endpoints, tag and size), and
//! the dependency graph — explicit dependencies, stream order and send/recv rendezvous —
//! has no cycle, so an executor that follows it cannot deadlock.

use super::*;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    #[error(
        "the plan would {need} (about {gib} GiB at {per} B per op), over the limit of {limit} ops ({lim_gib:.1} GiB, --max-memory); shrink the scenario (fewer ranks, chunks or layers) or raise --max-memory",
        need = match need { Some(n) => format!("hold at least {n} ops"), None => format!("exceed {limit} ops") },
        gib = match need { Some(n) => format!("{:.1}", (*n as f64) * (*per as f64) / (1u64 << 30) as f64), None => format!("over {:.1}", (*limit as f64) * (*per as f64) / (1u64 << 30) as f64) },
        lim_gib = (*limit as f64) * (*per as f64) / (1u64 << 30) as f64,
    )]
    TooLarge {
        limit: usize,
        /// The ops it would hold, where known before building.
        need: Option<u64>,
        /// The memory estimate per op (bytes) of the plan's kind.
        per: u64,
    },
    #[error("launch {launch} was never opened")]
    UnknownLaunch { launch: LaunchId },
    #[error("op {op} depends on op {dep}, which does not exist yet")]
    ForwardDependency { op: OpId, dep: OpId },
    #[error("stream `{name}` is on rank {rank}, but the plan has {ranks} ranks")]
    StreamRank { name: String, rank: u32, ranks: u32 },
    #[error("launch {launch} has no ops")]
    EmptyLaunch { launch: LaunchId },
    #[error("a symmetric plan's shift must divide its {ranks} ranks, got {shift}")]
    BadSymmetry { shift: u32, ranks: u32 },
    #[error("op {op} ({label}) names peer {peer}, which is {why}")]
    BadPeer {
        op: OpId,
        label: String,
        peer: u32,
        why: &'static str,
    },
    #[error("two sends from rank {src} to rank {dst} share tag {tag}")]
    DuplicateSend { src: u32, dst: u32, tag: u64 },
    #[error("recv {op} ({label}) has no matching send from rank {src} with tag {tag}")]
    UnmatchedRecv {
        op: OpId,
        label: String,
        src: u32,
        tag: u64,
    },
    #[error("send {op} ({label}) has no matching recv on rank {dst} with tag {tag}")]
    UnmatchedSend {
        op: OpId,
        label: String,
        dst: u32,
        tag: u64,
    },
    #[error("send {send} carries {send_bytes} B but its recv {recv} expects {recv_bytes} B")]
    SizeMismatch {
        send: OpId,
        recv: OpId,
        send_bytes: u64,
        recv_bytes: u64,
    },
    #[error(
        "the plan can deadlock: launch {launch} (first op {label}, rank {rank}) waits in a cycle"
    )]
    Cycle {
        launch: LaunchId,
        label: String,
        rank: u32,
    },
    #[error("data flow: {0}")]
    Dataflow(super::DataflowError),
}

fn csr(keys: impl Iterator<Item = u32> + Clone, buckets: usize) -> (Vec<u32>, Vec<u32>) {
    let mut start = vec![0u32; buckets + 1];
    for k in keys.clone() {
        start[k as usize + 1] += 1;
    }
    for i in 0..buckets {
        start[i + 1] += start[i];
    }
    let mut fill = start.clone();
    let mut items = vec![0u32; start[buckets] as usize];
    for (i, k) in keys.enumerate() {
        items[fill[k as usize] as usize] = i as u32;
        fill[k as usize] += 1;
    }
    (start, items)
}

pub(super) fn finish(b: PlanBuilder) -> Result<Plan, PlanError> {
    let PlanBuilder {
        ranks,
        streams,
        wires,
        blocks,
        ops,
        sites,
        dep_start,
        deps,
        launch_stream,
        launch_fused,
        model_flops,
        buffers,
        io,
        outputs,
        symmetry,
        scopes,
        ..
    } = b;
    if let Some(shift) = symmetry
        && (shift == 0 || ranks % shift != 0)
    {
        return Err(PlanError::BadSymmetry { shift, ranks });
    }
    let held = symmetry.unwrap_or(ranks);
    for s in &streams {
        if s.rank >= held {
            return Err(PlanError::StreamRank {
                name: s.name.clone(),
                rank: s.rank,
                ranks: held,
            });
        }
    }
    let nl = launch_stream.len();
    let (launch_start, launch_ops) = csr(ops.iter().map(|o| o.launch), nl);
    if let Some(l) = (0..nl).find(|&l| launch_start[l] == launch_start[l + 1]) {
        return Err(PlanError::EmptyLaunch {
            launch: l as LaunchId,
        });
    }
    let (stream_start, stream_launches) = csr(launch_stream.iter().copied(), streams.len());
    let mut next_launch = vec![NO_LAUNCH; nl];
    for s in 0..streams.len() {
        let ls = &stream_launches[stream_start[s] as usize..stream_start[s + 1] as usize];
        for w in ls.windows(2) {
            next_launch[w[0] as usize] = w[1];
        }
    }
    // Dependency edges are stored per dependent op; `csr` over the dependency ids groups
    // edge indices by the op depended on, and each edge maps to its dependent's launch.
    let edge_launch: Vec<LaunchId> = (0..ops.len())
        .flat_map(|i| {
            let n = (dep_start[i + 1] - dep_start[i]) as usize;
            std::iter::repeat_n(ops[i].launch, n)
        })
        .collect();
    let (dependent_start, edges) = csr(deps.iter().copied(), ops.len());
    let dependent_launches = edges.iter().map(|&e| edge_launch[e as usize]).collect();
    let links = (0..=ops.len())
        .map(|i| OpLinks {
            launch: ops.get(i).map_or(NO_LAUNCH, |o| o.launch),
            partner: NO_PARTNER,
            deps: dep_start[i],
            dependents: dependent_start[i],
        })
        .collect();
    drop((dep_start, dependent_start));
    let launches = (0..=nl)
        .map(|l| LaunchInfo {
            ops: launch_start[l],
            stream: launch_stream.get(l).copied().unwrap_or(0),
            next: next_launch.get(l).copied().unwrap_or(NO_LAUNCH),
            fused: launch_fused.get(l).copied().unwrap_or(false),
        })
        .collect();
    drop((launch_start, launch_stream, launch_fused, next_launch));

    let mut plan = Plan {
        ranks,
        streams,
        wires,
        blocks,
        ops,
        sites,
        model_flops,
        links,
        deps,
        launches,
        launch_ops,
        stream_start,
        stream_launches,
        dependent_launches,
        buffers,
        io: Vec::new(),
        outputs,
        symmetry,
        scopes,
    };
    let partner = match_p2p(&plan)?;
    for (l, p) in plan.links.iter_mut().zip(partner) {
        l.partner = p;
    }
    if io.iter().any(Option::is_some) || !plan.outputs.is_empty() {
        let mut all = Vec::with_capacity(plan.ops.len());
        for (id, o) in plan.ops.iter().enumerate() {
            let op = id as OpId;
            let x = io
                .get(id)
                .copied()
                .flatten()
                .ok_or(super::DataflowError::Missing { op })?;
            super::dataflow::check_op(op, o.rank, &o.kind, &x, &plan.buffers)?;
            all.push(x);
        }
        plan.io = all;
        super::dataflow::check_inits(&plan.buffers)?;
        for (r, o) in plan.outputs.iter().enumerate() {
            let ok = plan
                .buffers
                .get(o.buf as usize)
                .is_some_and(|b| b.rank == r as u32 && o.end_row() <= b.rows);
            if !ok {
                return Err(super::DataflowError::Shape {
                    op: 0,
                    what: format!("output region of rank {r} is not within one of its buffers"),
                }
                .into());
            }
        }
    }
    Ok(plan)
}

/// A P2P entry: (src, dst, tag, op, bytes).
type P2pEntry = (u32, u32, u64, OpId, u64);

/// The common case of [`match_p2p`] in linear time: sends grouped by tag (a counting
/// sort: plans draw their tags from a dense counter), each recv finds the one send of its
/// (src, dst) in its tag's group. `None` at the first sign of anything else (a tag range
/// much wider than the sends, a crowded tag, a recv with no send or two, a size that
/// differs, a send left over): [`match_p2p`] then sorts, and reports the error it finds.
fn match_by_tag(sends: &[P2pEntry], recvs: &[P2pEntry], ops: usize) -> Option<Vec<OpId>> {
    const CROWDED: usize = 64;
    let tags = sends.iter().map(|e| e.2).max().map_or(0, |t| t + 1);
    if tags > 8 * (sends.len() as u64 + 1024) {
        return None;
    }
    let tags = tags as usize;
    let mut start = vec![0u32; tags + 1];
    for e in sends {
        start[e.2 as usize + 1] += 1;
    }
    for t in 0..tags {
        start[t + 1] += start[t];
    }
    let mut fill = start.clone();
    let mut by_tag = vec![0u32; sends.len()];
    for (i, e) in sends.iter().enumerate() {
        by_tag[fill[e.2 as usize] as usize] = i as u32;
        fill[e.2 as usize] += 1;
    }
    drop(fill);
    let mut partner = vec![NO_PARTNER; ops];
    for r in recvs {
        if r.2 >= tags as u64 {
            return None;
        }
        let t = r.2 as usize;
        let group = &by_tag[start[t] as usize..start[t + 1] as usize];
        if group.len() > CROWDED {
            return None;
        }
        let mut found = None;
        for &i in group {
            let s = &sends[i as usize];
            if (s.0, s.1) == (r.0, r.1) {
                if found.is_some() {
                    return None;
                }
                found = Some(s);
            }
        }
        let s = found?;
        if s.4 != r.4 || partner[s.3 as usize] != NO_PARTNER {
            return None;
        }
        partner[s.3 as usize] = r.3;
        partner[r.3 as usize] = s.3;
    }
    (recvs.len() == sends.len()).then_some(partner)
}

/// Match every recv with the send of the same (src, dst, tag), by sorting both sides on
/// that key and walking them together (no hashing; the plan's op order decides which
/// error is reported, never memory layout). Errors, in this order: a bad peer (first in
/// op order, sends before recvs), a duplicate send (the earliest op that repeats an
/// earlier send's key), the earliest recv without a send or with a different size, the
/// earliest send without a recv.
fn match_p2p(plan: &Plan) -> Result<Vec<OpId>, PlanError> {
    let check_peer = |id: usize, o: &Op, peer: u32| -> Result<(), PlanError> {
        let why = if peer >= plan.ranks {
            "outside the plan"
        } else if peer == o.rank {
            "its own rank"
        } else {
            return Ok(());
        };
        Err(PlanError::BadPeer {
            op: id as OpId,
            label: plan.label(id as OpId),
            peer,
            why,
        })
    };
    // (src, dst, tag, op, bytes): a recv's src is its peer. The bytes ride along so
    // that the size check reads no op out of order (a cache miss each, in a large plan).
    let mut sends: Vec<P2pEntry> = Vec::new();
    let mut recvs: Vec<P2pEntry> = Vec::new();
    // In a symmetric plan a send is keyed as its translate whose receiver is held.
    let canon = |src: u32, dst: u32| match plan.symmetry {
        Some(shift) => {
            let back = dst - dst % shift;
            ((src + plan.ranks - back) % plan.ranks, dst % shift)
        }
        None => (src, dst),
    };
    // One pass over the ops; a bad send peer is reported before any bad recv peer.
    let mut bad_recv_peer = None;
    for (id, o) in plan.ops.iter().enumerate() {
        match o.kind {
            OpKind::Send { peer, tag, bytes } => {
                check_peer(id, o, peer)?;
                let (src, dst) = canon(o.rank, peer);
                sends.push((src, dst, tag, id as OpId, bytes));
            }
            OpKind::Recv {
                peer, tag, bytes, ..
            } => {
                if bad_recv_peer.is_none() {
                    bad_recv_peer = check_peer(id, o, peer).err();
                }
                recvs.push((peer, o.rank, tag, id as OpId, bytes));
            }
            _ => {}
        }
    }
    if let Some(e) = bad_recv_peer {
        return Err(e);
    }
    if let Some(partner) = match_by_tag(&sends, &recvs, plan.ops.len()) {
        return Ok(partner);
    }
    match_sorted(sends, recvs, plan.ops.len(), &|op| plan.label(op))
}

/// [`match_p2p`] by sorting both sides on (src, dst, tag) and walking them together: the
/// partners, or the error that comes first in the order [`match_p2p`] gives.
fn match_sorted(
    mut sends: Vec<P2pEntry>,
    mut recvs: Vec<P2pEntry>,
    ops: usize,
    label: &dyn Fn(OpId) -> String,
) -> Result<Vec<OpId>, PlanError> {
    sends.sort_unstable();
    recvs.sort_unstable();
    let key = |e: &P2pEntry| (e.0, e.1, e.2);
    if let Some(w) = sends
        .windows(2)
        .filter(|w| key(&w[0]) == key(&w[1]))
        .min_by_key(|w| w[1].3)
    {
        return Err(PlanError::DuplicateSend {
            src: w[1].0,
            dst: w[1].1,
            tag: w[1].2,
        });
    }
    let mut partner = vec![NO_PARTNER; ops];
    // The earliest failing recv: (op, error).
    let mut bad_recv: Option<(OpId, PlanError)> = None;
    let mut note = |op: OpId, e: PlanError| {
        if bad_recv.as_ref().is_none_or(|(b, _)| op < *b) {
            bad_recv = Some((op, e));
        }
    };
    let mut si = 0;
    let mut prev_key = None;
    for r in &recvs {
        let k = key(r);
        let repeat = prev_key == Some(k);
        prev_key = Some(k);
        while si < sends.len() && key(&sends[si]) < k {
            si += 1;
        }
        // Equal recv keys are sorted by op id: the first takes the send, the rest have none.
        let matched = !repeat && si < sends.len() && key(&sends[si]) == k;
        if !matched {
            note(
                r.3,
                PlanError::UnmatchedRecv {
                    op: r.3,
                    label: label(r.3),
                    src: r.0,
                    tag: r.2,
                },
            );
            continue;
        }
        let s = sends[si].3;
        let (sb, rb) = (sends[si].4, r.4);
        if sb != rb {
            note(
                r.3,
                PlanError::SizeMismatch {
                    send: s,
                    recv: r.3,
                    send_bytes: sb,
                    recv_bytes: rb,
                },
            );
            continue;
        }
        partner[r.3 as usize] = s;
        partner[s as usize] = r.3;
    }
    if let Some((_, e)) = bad_recv {
        return Err(e);
    }
    if let Some(&(_, dst, tag, s, _)) = sends
        .iter()
        .filter(|e| partner[e.3 as usize] == NO_PARTNER)
        .min_by_key(|e| e.3)
    {
        return Err(PlanError::UnmatchedSend {
            op: s,
            label: label(s),
            dst,
            tag,
        });
    }
    Ok(partner)
}

/// Kahn's algorithm over two nodes per launch, `start(L)` = 2L and `end(L)` = 2L+1, with
/// the successors generated on the fly rather than stored as an edge list:
/// `start(L) → end(L)`, `start(L) → end(partner's launch)` for each send/recv in L,
/// `end(L) → start(next launch on L's stream)`, `end(L) → start(D)` for each launch D
/// that depends on an op of L.
pub(super) fn check_acyclic(plan: &Plan) -> Result<(), PlanError> {
    topological_order(plan).map(|_| ())
}

/// Launch-start (`2·l`) and launch-end (`2·l + 1`) events in an order that respects
/// stream order, dependencies and rendezvous (a launch ends only after every partner
/// launch of its sends and recvs has started). Deterministic: a stack seeded in node order.
pub(super) fn topological_order(plan: &Plan) -> Result<Vec<u32>, PlanError> {
    let nl = plan.launch_count();
    let mut indeg = vec![0u32; 2 * nl];
    for l in 0..nl {
        indeg[2 * l + 1] += 1;
        if let Some(n) = plan.next_launch(l as LaunchId) {
            indeg[2 * n as usize] += 1;
        }
    }
    for (id, o) in plan.ops.iter().enumerate() {
        indeg[2 * o.launch as usize] += plan.deps(id as OpId).len() as u32;
        if plan.partner(id as OpId) != NO_PARTNER {
            indeg[2 * o.launch as usize + 1] += 1;
        }
    }
    let mut stack: Vec<u32> = (0..2 * nl as u32)
        .filter(|&v| indeg[v as usize] == 0)
        .collect();
    let mut order = Vec::with_capacity(2 * nl);
    let release = |t: usize, stack: &mut Vec<u32>, indeg: &mut [u32]| {
        indeg[t] -= 1;
        if indeg[t] == 0 {
            stack.push(t as u32);
        }
    };
    while let Some(v) = stack.pop() {
        order.push(v);
        let l = (v / 2) as LaunchId;
        if v % 2 == 0 {
            release(2 * l as usize + 1, &mut stack, &mut indeg);
            for &op in plan.launch_ops(l) {
                let p = plan.partner(op);
                if p != NO_PARTNER {
                    let pl = plan.ops[p as usize].launch as usize;
                    release(2 * pl + 1, &mut stack, &mut indeg);
                }
            }
        } else {
            if let Some(n) = plan.next_launch(l) {
                release(2 * n as usize, &mut stack, &mut indeg);
            }
            for &op in plan.launch_ops(l) {
                for &d in plan.dependents(op) {
                    release(2 * d as usize, &mut stack, &mut indeg);
                }
            }
        }
    }
    if order.len() == 2 * nl {
        return Ok(order);
    }
    let stuck = (0..2 * nl)
        .find(|&v| indeg[v] > 0)
        .expect("some node is unprocessed") as u32
        / 2;
    let first = plan.launch_ops(stuck)[0];
    Err(PlanError::Cycle {
        launch: stuck,
        label: plan.label(first),
        rank: plan.ops[first as usize].rank,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: OpTag = OpTag {
        site: 0,
        step: 0,
        slice: 0,
    };

    fn two_ranks() -> (PlanBuilder, StreamId, StreamId) {
        let mut b = PlanBuilder::new(2);
        b.site("x");
        let a = b.stream(0, "comm", StreamKind::Comm);
        let c = b.stream(1, "comm", StreamKind::Comm);
        (b, a, c)
    }

    #[test]
    fn matched_pair_validates() {
        let (mut b, a, c) = two_ranks();
        let tag = b.msg_tag();
        let s = b
            .single(
                a,
                OpKind::Send {
                    peer: 1,
                    bytes: 8,
                    tag,
                },
                &[],
                T,
            )
            .unwrap();
        let r = b
            .single(
                c,
                OpKind::Recv {
                    peer: 0,
                    bytes: 8,
                    tag,
                    accumulate: false,
                },
                &[],
                T,
            )
            .unwrap();
        let p = b.finish().unwrap();
        assert_eq!(p.partner(s), r);
        assert_eq!(p.partner(r), s);
    }

    #[test]
    fn unmatched_and_mismatched_are_errors() {
        let (mut b, a, _) = two_ranks();
        b.single(
            a,
            OpKind::Send {
                peer: 1,
                bytes: 8,
                tag: 1,
            },
            &[],
            T,
        )
        .unwrap();
        assert!(matches!(b.finish(), Err(PlanError::UnmatchedSend { .. })));

        let (mut b, a, c) = two_ranks();
        b.single(
            a,
            OpKind::Send {
                peer: 1,
                bytes: 8,
                tag: 1,
            },
            &[],
            T,
        )
        .unwrap();
        let recv = OpKind::Recv {
            peer: 0,
            bytes: 4,
            tag: 1,
            accumulate: false,
        };
        b.single(c, recv, &[], T).unwrap();
        assert!(matches!(b.finish(), Err(PlanError::SizeMismatch { .. })));

        let (mut b, a, _) = two_ranks();
        b.single(
            a,
            OpKind::Send {
                peer: 0,
                bytes: 8,
                tag: 1,
            },
            &[],
            T,
        )
        .unwrap();
        assert!(matches!(b.finish(), Err(PlanError::BadPeer { .. })));
    }

    #[test]
    fn head_to_head_rendezvous_deadlock_is_found() {
        // Both ranks send first, then receive, on one in-order stream each, in separate
        // launches: each send waits for a recv queued behind the other's send.
        let (mut b, a, c) = two_ranks();
        for (me, peer, st) in [(0u32, 1u32, a), (1, 0, c)] {
            b.single(
                st,
                OpKind::Send {
                    peer,
                    bytes: 8,
                    tag: 10 + me as u64,
                },
                &[],
                T,
            )
            .unwrap();
            b.single(
                st,
                OpKind::Recv {
                    peer,
                    bytes: 8,
                    tag: 10 + peer as u64,
                    accumulate: false,
                },
                &[],
                T,
            )
            .unwrap();
        }
        let plan = b.finish().unwrap();
        assert!(matches!(
            plan.check_deadlock_free(),
            Err(PlanError::Cycle { .. })
        ));
    }

    #[test]
    fn grouped_exchange_is_fine() {
        let (mut b, a, c) = two_ranks();
        for (me, peer, st) in [(0u32, 1u32, a), (1, 0, c)] {
            let l = b.launch(st);
            let send = OpKind::Send {
                peer,
                bytes: 8,
                tag: 10 + me as u64,
            };
            b.add(l, send, &[], T).unwrap();
            let recv = OpKind::Recv {
                peer,
                bytes: 8,
                tag: 10 + peer as u64,
                accumulate: false,
            };
            b.add(l, recv, &[], T).unwrap();
        }
        b.finish().unwrap().check_deadlock_free().unwrap();
    }

    #[test]
    fn op_limit_is_enforced() {
        let (b, a, _) = two_ranks();
        let mut b = b.with_op_limit(1);
        let g = OpKind::Copy { bytes: 1 };
        b.single(a, g, &[], T).unwrap();
        assert!(matches!(
            b.single(a, g, &[], T),
            Err(PlanError::TooLarge { .. })
        ));
    }

    proptest::proptest! {
        /// Matching by tag agrees with the sort wherever it answers, and answers for
        /// every well-formed set of messages it is meant for; where the sort finds an
        /// error, matching by tag gives up (and the sort reports it).
        #[test]
        fn matching_by_tag_agrees_with_the_sort(
            msgs in proptest::collection::vec((0u32..6, 1u32..6, 0u64..40, 1u64..4), 0..60),
            drop_recv in proptest::option::of(0usize..60),
            dup_send in proptest::option::of(0usize..60),
            resize in proptest::option::of(0usize..60),
        ) {
            // Each message once, by key (a well-formed plan has one send per key).
            let mut seen = std::collections::BTreeSet::new();
            let msgs: Vec<_> = msgs
                .into_iter()
                .map(|(src, d, tag, b)| (src, (src + d) % 6, tag, b))
                .filter(|&(src, dst, tag, _)| src != dst && seen.insert((src, dst, tag)))
                .collect();
            let (mut sends, mut recvs) = (Vec::new(), Vec::new());
            let mut op = 0;
            for (i, &(src, dst, tag, b)) in msgs.iter().enumerate() {
                sends.push((src, dst, tag, op, b));
                if dup_send == Some(i) {
                    sends.push((src, dst, tag, op + 1, b));
                }
                if drop_recv != Some(i) {
                    let b = if resize == Some(i) { b + 1 } else { b };
                    recvs.push((src, dst, tag, op + 2, b));
                }
                op += 3;
            }
            // Both sides in op order, as match_p2p collects them.
            let label = |op: OpId| format!("op {op}");
            let sorted = match_sorted(sends.clone(), recvs.clone(), op as usize, &label);
            let by_tag = match_by_tag(&sends, &recvs, op as usize);
            let clean = drop_recv.is_none_or(|i| i >= msgs.len())
                && dup_send.is_none_or(|i| i >= msgs.len())
                && resize.is_none_or(|i| i >= msgs.len());
            match (&sorted, &by_tag) {
                (Ok(p), Some(q)) => proptest::prop_assert_eq!(p, q),
                (Ok(_), None) => proptest::prop_assert!(false, "well-formed, not matched by tag"),
                (Err(_), Some(_)) => proptest::prop_assert!(false, "an error matched by tag"),
                (Err(_), None) => proptest::prop_assert!(!clean),
            }
        }
    }
}
