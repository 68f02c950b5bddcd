//! Pipeline parallelism: the order in which each stage runs its micro-batches'
//! forwards and backwards under a schedule, and the closed forms of the schedules'
//! bubbles.
//!
//! The model's layers are cut into P·V *virtual stages* of L/(P·V) layers each; stage p
//! holds virtual stages p, p + P, …, p + (V−1)·P (its V *chunks*; V = 1 but for the
//! interleaved schedule). The activation of a micro-batch leaves virtual stage k for
//! k + 1 as a P2P message, its gradient comes back from k + 1 to k. With equal stages and
//! free communication, a forward taking t_f and a backward t_b per stage, every schedule
//! here runs m micro-batches in m·(t_f + t_b) of work plus a bubble of
//! (P − 1)·(t_f + t_b)/V, a share (P − 1)/(V·m + P − 1) of the step.

use crate::scenario::PpSchedule;

/// One step of a stage's program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Action {
    pub forward: bool,
    /// Chunk of the stage (0..V): virtual stage chunk·P + stage.
    pub chunk: u64,
    pub micro_batch: u64,
}

impl Action {
    fn fwd(chunk: u64, micro_batch: u64) -> Action {
        Action {
            forward: true,
            chunk,
            micro_batch,
        }
    }

    fn bwd(chunk: u64, micro_batch: u64) -> Action {
        Action {
            forward: false,
            chunk,
            micro_batch,
        }
    }
}

/// Stage `stage`'s actions, in the order it runs them, for `m` micro-batches over `p`
/// stages.
///
/// - `gpipe`: every forward, then every backward (micro-batches in order).
/// - `1f1b` (PipeDream-Flush, Megatron's default): min(P − p − 1, m) warm-up forwards,
///   then one forward and one backward in turn, then the remaining backwards.
/// - `interleaved:V` (Megatron's interleaved 1F1B): the V·m chunk-forwards in groups of
///   P micro-batches per chunk (virtual micro-batch k: chunk ⌊k/P⌋ mod V, micro-batch
///   ⌊k/(P·V)⌋·P + k mod P; backwards the same with the chunks reversed), with
///   2·(P − p − 1) + (V − 1)·P warm-up forwards (all of them when m = P), then one
///   forward and one backward in turn. Needs m a multiple of P.
pub fn order(schedule: PpSchedule, p: u64, stage: u64, m: u64) -> Vec<Action> {
    match schedule {
        PpSchedule::GPipe => (0..m)
            .map(|i| Action::fwd(0, i))
            .chain((0..m).map(|i| Action::bwd(0, i)))
            .collect(),
        PpSchedule::OneFOneB => {
            let warm = (p - stage - 1).min(m);
            one_f_one_b(m, warm, |k| Action::fwd(0, k), |k| Action::bwd(0, k))
        }
        PpSchedule::Interleaved(v) => {
            let total = m * v;
            let warm = if m == p {
                total
            } else {
                ((p - stage - 1) * 2 + (v - 1) * p).min(total)
            };
            let mb = |k: u64| k / (p * v) * p + k % p;
            let chunk = |k: u64| k / p % v;
            one_f_one_b(
                total,
                warm,
                |k| Action::fwd(chunk(k), mb(k)),
                |k| Action::bwd(v - 1 - chunk(k), mb(k)),
            )
        }
    }
}

/// `warm` forwards, then forward `warm + i` and backward `i` in turn, then the rest of
/// the `n` backwards.
fn one_f_one_b(
    n: u64,
    warm: u64,
    fwd: impl Fn(u64) -> Action,
    bwd: impl Fn(u64) -> Action,
) -> Vec<Action> {
    let mut out = Vec::with_capacity(2 * n as usize);
    out.extend((0..warm).map(&fwd));
    for i in 0..n - warm {
        out.push(fwd(warm + i));
        out.push(bwd(i));
    }
    out.extend((n - warm..n).map(&bwd));
    out
}

/// The bubble's share of a step under `schedule` with equal stages and free
/// communication: (P − 1)/(V·m + P − 1).
pub fn bubble_fraction(schedule: PpSchedule, p: u64, m: u64) -> f64 {
    let v = schedule.chunks() as f64;
    let idle = (p as f64 - 1.0) / v;
    idle / (m as f64 + idle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_complete(s: PpSchedule, p: u64, m: u64) {
        let v = s.chunks();
        for stage in 0..p {
            let o = order(s, p, stage, m);
            assert_eq!(o.len() as u64, 2 * m * v, "{s:?} stage {stage}");
            for c in 0..v {
                for i in 0..m {
                    let f = o.iter().position(|a| *a == Action::fwd(c, i)).unwrap();
                    let b = o.iter().position(|a| *a == Action::bwd(c, i)).unwrap();
                    assert!(f < b, "{s:?} stage {stage}: backward before forward");
                }
                // Each chunk's forwards and backwards run in micro-batch order (the
                // P2P streams between stages rely on it).
                for fwd in [true, false] {
                    let mbs: Vec<u64> = o
                        .iter()
                        .filter(|a| a.forward == fwd && a.chunk == c)
                        .map(|a| a.micro_batch)
                        .collect();
                    assert!(mbs.windows(2).all(|w| w[0] < w[1]), "{s:?} {mbs:?}");
                }
            }
        }
    }

    #[test]
    fn every_schedule_runs_each_micro_batch_once_forward_then_backward() {
        for (p, m) in [(1, 1), (1, 4), (2, 2), (4, 8), (4, 2), (8, 16)] {
            check_complete(PpSchedule::GPipe, p, m);
            check_complete(PpSchedule::OneFOneB, p, m);
        }
        for (p, m, v) in [(2, 4, 2), (4, 8, 2), (4, 4, 3), (8, 16, 4)] {
            check_complete(PpSchedule::Interleaved(v), p, m);
        }
    }

    #[test]
    fn one_f_one_b_matches_pipedream_flush() {
        use Action as A;
        // Stage 0 of 4 with 6 micro-batches: 3 warm-up forwards, then 1F1B.
        let o = order(PpSchedule::OneFOneB, 4, 0, 6);
        let want = [
            A::fwd(0, 0),
            A::fwd(0, 1),
            A::fwd(0, 2),
            A::fwd(0, 3),
            A::bwd(0, 0),
            A::fwd(0, 4),
            A::bwd(0, 1),
            A::fwd(0, 5),
            A::bwd(0, 2),
            A::bwd(0, 3),
            A::bwd(0, 4),
            A::bwd(0, 5),
        ];
        assert_eq!(o, want);
        // The last stage alternates from the start.
        let o = order(PpSchedule::OneFOneB, 4, 3, 2);
        assert_eq!(o, [A::fwd(0, 0), A::bwd(0, 0), A::fwd(0, 1), A::bwd(0, 1)]);
    }

    #[test]
    fn interleaved_walks_chunks_in_groups_of_p_micro_batches() {
        // P = 2, V = 2, m = 4: forwards (chunk, mb) go (0,0) (0,1) (1,0) (1,1) (0,2) …
        let o = order(PpSchedule::Interleaved(2), 2, 1, 4);
        let fwd: Vec<(u64, u64)> = o
            .iter()
            .filter(|a| a.forward)
            .map(|a| (a.chunk, a.micro_batch))
            .collect();
        assert_eq!(
            fwd,
            [
                (0, 0),
                (0, 1),
                (1, 0),
                (1, 1),
                (0, 2),
                (0, 3),
                (1, 2),
                (1, 3)
            ]
        );
        // The last stage warms up with (V − 1)·P = 2 forwards.
        assert!(o[..2].iter().all(|a| a.forward) && !o[3].forward);
        // Backwards start from the last chunk.
        let b = o.iter().find(|a| !a.forward).unwrap();
        assert_eq!((b.chunk, b.micro_batch), (1, 0));
    }

    #[test]
    fn bubble_closed_forms() {
        assert_eq!(bubble_fraction(PpSchedule::OneFOneB, 1, 8), 0.0);
        assert!((bubble_fraction(PpSchedule::OneFOneB, 4, 8) - 3.0 / 11.0).abs() < 1e-15);
        assert!((bubble_fraction(PpSchedule::GPipe, 8, 8) - 7.0 / 15.0).abs() < 1e-15);
        // Interleaving by V divides the bubble time by V: (P−1)/V / (m + (P−1)/V).
        let b = bubble_fraction(PpSchedule::Interleaved(2), 4, 8);
        assert!((b - 1.5 / 9.5).abs() < 1e-15);
    }
}
