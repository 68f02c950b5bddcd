//! The event queue: a radix heap over event times, each key a 128-bit (time bits,
//! sequence number).
//!
//! The engine never schedules into the past, so the times it pops are non-decreasing —
//! the one condition a radix heap needs. An entry's bucket is the position of the
//! highest bit in which its time differs from the last time popped; popping when no
//! entry of that time is left takes the lowest non-empty bucket, whose smallest time
//! becomes the current one, and redistributes it: its entries of that time form the
//! *current run*, the rest fall into lower buckets. Every push is O(1) and every entry
//! moves down at most 64 times, against the O(log n) sift of a binary heap with its
//! scattered accesses.
//!
//! Simultaneous events are common (ranks that run the same program finish the same ops
//! at the same instant), and they pop as a run: the current run is kept in key order
//! (sorted once when it forms; pushes at the current time come with ever larger
//! sequence numbers, so they append), and popping from it is a step along a vector.
//!
//! Keys are unique (the sequence number is), so the pop order is exactly that of a
//! binary heap on the same keys: (time, then scheduling order).

use ordered_float::NotNan;

/// Buckets 1..=64 (a time differing from the current one in its highest bit 0..=63);
/// slot 0 is unused.
const BUCKETS: usize = 65;

/// The key of an event at `time` (non-negative) scheduled `seq`-th: a non-negative `f64`'s
/// bit pattern orders like the number.
pub(super) fn key(time: NotNan<f64>, seq: u64) -> u128 {
    debug_assert!(*time >= 0.0, "event times are non-negative");
    let bits = (time.into_inner() + 0.0).to_bits(); // + 0.0 turns -0.0 into +0.0
    (u128::from(bits) << 64) | u128::from(seq)
}

/// The time a key was made from.
pub(super) fn time_of(key: u128) -> f64 {
    f64::from_bits((key >> 64) as u64)
}

fn time_bits(key: u128) -> u64 {
    (key >> 64) as u64
}

#[derive(Debug)]
pub(super) struct RadixQueue<T> {
    buckets: Vec<Vec<(u128, T)>>,
    /// Bit `i − 1` set iff bucket `i` (1..=64) is non-empty, so finding the lowest
    /// non-empty bucket is one `trailing_zeros`.
    occupied: u64,
    /// The entries at the current time, in key order; those before `head` are popped.
    run: Vec<(u128, T)>,
    head: usize,
    /// The current time's bits, and the last key popped.
    now: u64,
    last: u128,
    len: usize,
}

fn bucket(t: u64, now: u64) -> usize {
    (64 - (t ^ now).leading_zeros()) as usize
}

impl<T: Copy> RadixQueue<T> {
    pub fn new() -> RadixQueue<T> {
        RadixQueue {
            buckets: (0..BUCKETS).map(|_| Vec::new()).collect(),
            occupied: 0,
            run: Vec::new(),
            head: 0,
            now: 0,
            last: 0,
            len: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether an entry at the time last popped is still queued (entries at later
    /// times never count: pushes at the current time join the current run).
    pub fn has_current(&self) -> bool {
        self.head < self.run.len()
    }

    /// Keep only the entries `keep` accepts. Each stays in its bucket (a bucket depends
    /// on the key and the current time, neither of which changes) and the current run
    /// keeps its order, so the pop order of the rest is unchanged.
    pub fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) {
        self.run.drain(..self.head);
        self.head = 0;
        self.run.retain(|e| keep(&e.1));
        let mut len = self.run.len();
        for (i, b) in self.buckets.iter_mut().enumerate().skip(1) {
            b.retain(|e| keep(&e.1));
            len += b.len();
            if b.is_empty() {
                self.occupied &= !(1 << (i - 1));
            }
        }
        self.len = len;
    }

    /// Queue `item` under `key`. Returns `false` (and queues nothing) if `key` is below
    /// the last key popped.
    pub fn push(&mut self, key: u128, item: T) -> bool {
        if key < self.last {
            return false;
        }
        let t = time_bits(key);
        if t == self.now {
            // Into the current run, in key order (the engine's keys only ever append).
            match self.run.last() {
                Some(&(k, _)) if k > key => {
                    let at = self.head + self.run[self.head..].partition_point(|e| e.0 < key);
                    self.run.insert(at, (key, item));
                }
                _ => self.run.push((key, item)),
            }
        } else {
            self.put(t, key, item);
        }
        self.len += 1;
        true
    }

    fn put(&mut self, t: u64, key: u128, item: T) {
        let b = bucket(t, self.now);
        self.buckets[b].push((key, item));
        self.occupied |= 1 << (b - 1);
    }

    /// The entry with the smallest key.
    pub fn pop(&mut self) -> Option<(u128, T)> {
        if self.head == self.run.len() {
            self.run.clear();
            self.head = 0;
            if self.occupied == 0 {
                return None;
            }
            let i = self.occupied.trailing_zeros() as usize + 1;
            self.occupied &= !(1 << (i - 1));
            let mut moving = std::mem::take(&mut self.buckets[i]);
            let now = moving
                .iter()
                .map(|e| time_bits(e.0))
                .min()
                .expect("non-empty bucket");
            self.now = now;
            for &(k, item) in &moving {
                let t = time_bits(k);
                if t == now {
                    self.run.push((k, item));
                } else {
                    self.put(t, k, item);
                }
            }
            moving.clear();
            // Keep the allocation for the next time this bucket fills.
            self.buckets[i] = moving;
            self.run.sort_unstable_by_key(|e| e.0);
        }
        let e = self.run[self.head];
        self.head += 1;
        self.len -= 1;
        self.last = e.0;
        Some(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    #[test]
    fn keys_order_like_time_then_sequence() {
        let t = |x: f64| NotNan::new(x).unwrap();
        assert!(key(t(1.0), 9) < key(t(1.5), 0));
        assert!(key(t(1.0), 1) < key(t(1.0), 2));
        assert_eq!(key(t(-0.0), 3), key(t(0.0), 3));
        assert!(key(t(0.0), 0) < key(t(f64::MIN_POSITIVE), 0));
        assert_eq!(time_of(key(t(2.5e-6), 77)), 2.5e-6);
    }

    #[test]
    fn pops_in_key_order_and_refuses_the_past() {
        let mut q = RadixQueue::new();
        for (k, v) in [(5u128, 'a'), (3, 'b'), (u128::MAX, 'c'), (4, 'd')] {
            assert!(q.push(k, v));
        }
        assert_eq!(q.pop(), Some((3, 'b')));
        assert!(!q.push(2, 'x'), "below the last key popped");
        assert!(q.push(3, 'e'), "equal to the last key popped");
        let rest: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(rest, vec![(3, 'e'), (4, 'd'), (5, 'a'), (u128::MAX, 'c')]);
        assert_eq!(q.len(), 0);
    }

    /// A key at the current time below the current run's last goes into the run in key
    /// order (the engine only appends, but the queue does not rely on it).
    #[test]
    fn a_smaller_key_at_the_current_time_is_inserted_in_order() {
        let mut q = RadixQueue::new();
        for k in [1u128, 4, 6] {
            assert!(q.push(k, k));
        }
        assert_eq!(q.pop(), Some((1, 1)));
        assert!(q.push(5, 5));
        assert!(q.push(2, 2));
        let rest: Vec<_> = std::iter::from_fn(|| q.pop()).map(|e| e.0).collect();
        assert_eq!(rest, vec![2, 4, 5, 6]);
    }

    proptest! {
        /// Interleaved pushes (never below the last pop) and pops give exactly the order
        /// of a binary heap, with times far apart and (half the pushes) equal to the
        /// current one or next to it.
        #[test]
        fn same_order_as_a_binary_heap(ops in prop::collection::vec((any::<bool>(), 0u64..1000, 0u64..4), 1..400)) {
            let mut q = RadixQueue::new();
            let mut h = BinaryHeap::new();
            let mut seq = 0u64;
            let mut now = 0u64;
            for (is_pop, dt, near) in ops {
                let dt = if near < 2 { dt % 2 } else { dt };
                if is_pop {
                    let a = q.pop();
                    let b = h.pop().map(|Reverse(e)| e);
                    prop_assert_eq!(a, b);
                    if let Some((k, _)) = a {
                        now = (k >> 64) as u64;
                    }
                } else {
                    seq += 1;
                    let key = (u128::from(now + dt) << 64) | u128::from(seq);
                    prop_assert!(q.push(key, seq));
                    h.push(Reverse((key, seq)));
                }
                prop_assert_eq!(q.len(), h.len());
                // An entry at the time last popped is left exactly when the heap's
                // smallest is at that time.
                let at_now = h.peek().is_some_and(|Reverse((k, _))| (k >> 64) as u64 == now);
                prop_assert_eq!(q.has_current(), at_now);
            }
        }

        /// Dropping entries mid-run (as compaction drops stale ones) leaves the rest in
        /// the binary heap's order.
        #[test]
        fn retain_keeps_the_order_of_the_rest(ops in prop::collection::vec((0u8..3, 0u64..1000), 1..400)) {
            let mut q = RadixQueue::new();
            let mut h = BinaryHeap::new();
            let mut seq = 0u64;
            let mut now = 0u64;
            for (what, dt) in ops {
                match what {
                    0 => {
                        let a = q.pop();
                        let b = h.pop().map(|Reverse(e)| e);
                        prop_assert_eq!(a, b);
                        if let Some((k, _)) = a {
                            now = (k >> 64) as u64;
                        }
                    }
                    1 => {
                        seq += 1;
                        let key = (u128::from(now + dt) << 64) | u128::from(seq);
                        prop_assert!(q.push(key, seq));
                        h.push(Reverse((key, seq)));
                    }
                    _ => {
                        let keep = |v: &u64| v % 3 != dt % 3;
                        q.retain(keep);
                        h.retain(|Reverse((_, v))| keep(v));
                    }
                }
                prop_assert_eq!(q.len(), h.len());
            }
            let rest: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
            let want: Vec<_> = std::iter::from_fn(|| h.pop().map(|Reverse(e)| e)).collect();
            prop_assert_eq!(rest, want);
        }
    }
}
