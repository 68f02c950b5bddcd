//! Flows on links, with bandwidth shared max-min fairly among the flows on each link.
//!
//! A rate change is re-solved only for the *component* the change touches: the flows
//! transitively sharing a link with it, and once per instant (the engine settles after
//! the last event of a time), however many flows started and ended in it. Progressive
//! filling inside the component: the link with the smallest fair share fixes the rate of
//! its flows, their bandwidth is subtracted everywhere else on their routes, and so on.

use crate::topology::Topology;

#[derive(Debug, Clone)]
pub(super) struct Flow {
    pub route_start: u32,
    pub route_len: u32,
    pub remaining: f64,
    pub rate: f64,
    pub last: f64,
    pub version: u32,
    pub active: bool,
    /// The most this flow may move per second, whatever its links leave it (an NCCL
    /// channel's own ceiling); `+inf` for none.
    pub cap: f64,
    /// How many flows this one stands for on its links: it gets `weight` fair shares
    /// (identical NCCL channels merged into one flow).
    pub weight: u32,
    /// Creation order: ties in a solve break by it, not by the flow's slot, which is
    /// reused once a flow is released.
    pub serial: u64,
}

impl Flow {
    /// Bring the bytes left up to `now` at the current rate (an infinite rate has
    /// moved them all).
    fn advance(&mut self, now: f64) {
        if self.rate.is_finite() {
            self.remaining = (self.remaining - self.rate * (now - self.last)).max(0.0);
        } else {
            self.remaining = 0.0;
        }
        self.last = now;
    }
}

pub(super) struct Network {
    capacity: Vec<f64>,
    on_link: Vec<Vec<u32>>,
    /// Per link, the weights of its active flows summed.
    weight_on: Vec<u32>,
    pub route_links: Vec<u32>,
    pub flows: Vec<Flow>,
    // Scratch, reused by every solve.
    link_stamp: Vec<u32>,
    flow_stamp: Vec<u32>,
    epoch: u32,
    comp_links: Vec<u32>,
    pub touched: Vec<u32>,
    cap_left: Vec<f64>,
    unfrozen: Vec<u32>,
    frozen: Vec<bool>,
    /// Per flow, its rate before the current solve.
    prev_rate: Vec<f64>,
    /// Scratch: the component's capped flows, by falling cap.
    capped: Vec<(f64, u32)>,
    /// Slots of released flows, reused by the next flows (memory follows the flows in
    /// flight, not every flow ever).
    free: Vec<u32>,
    next_serial: u64,
    /// Links of the flows started or finished since the last settle (repeats allowed).
    dirty: Vec<u32>,
    /// Scratch: the flows a settle changed, over all its components.
    changed: Vec<u32>,
    /// Whether a lone flow's component is solved by [`Network::solve_alone`] (the tests
    /// turn it off to compare with the progressive filling).
    lone_shortcut: bool,
}

impl Network {
    pub fn new(topo: &Topology) -> Network {
        let n = topo.link_count();
        Network {
            capacity: (0..n).map(|l| topo.link(l).bandwidth).collect(),
            on_link: vec![Vec::new(); n],
            weight_on: vec![0; n],
            route_links: Vec::new(),
            flows: Vec::new(),
            link_stamp: vec![0; n],
            flow_stamp: Vec::new(),
            epoch: 0,
            comp_links: Vec::new(),
            touched: Vec::new(),
            cap_left: vec![0.0; n],
            unfrozen: vec![0; n],
            frozen: Vec::new(),
            prev_rate: Vec::new(),
            capped: Vec::new(),
            free: Vec::new(),
            next_serial: 0,
            dirty: Vec::new(),
            changed: Vec::new(),
            lone_shortcut: true,
        }
    }

    /// Multiply every link's bandwidth by its `scale` (a symmetric plan's orbit
    /// representatives; before any flow starts).
    pub fn scale_capacities(&mut self, scale: &[f64]) {
        for (c, s) in self.capacity.iter_mut().zip(scale) {
            *c *= s;
        }
    }

    /// Divide link `id`'s bandwidth by `factor` (before any flow starts).
    pub fn slow_link(&mut self, id: usize, factor: f64) {
        self.capacity[id] /= factor;
    }

    pub fn links_of(&self, f: u32) -> &[u32] {
        let fl = &self.flows[f as usize];
        &self.route_links[fl.route_start as usize..(fl.route_start + fl.route_len) as usize]
    }

    /// A new, not yet active flow that never moves faster than `cap` bytes/s (`+inf`:
    /// only its links limit it), standing for `weight` (at least 1) flows on its links.
    pub fn add_flow(
        &mut self,
        route_start: u32,
        route_len: u32,
        bytes: f64,
        cap: f64,
        weight: u32,
    ) -> u32 {
        let serial = self.next_serial;
        self.next_serial += 1;
        let mut flow = Flow {
            cap,
            weight: weight.max(1),
            route_start,
            route_len,
            remaining: bytes,
            rate: 0.0,
            last: 0.0,
            version: 0,
            active: false,
            serial,
        };
        if let Some(f) = self.free.pop() {
            // A later version than any the released flow had: its stale completion
            // events stay stale.
            flow.version = self.flows[f as usize].version.wrapping_add(1);
            self.flows[f as usize] = flow;
            self.flow_stamp[f as usize] = 0;
            self.frozen[f as usize] = false;
            self.prev_rate[f as usize] = f64::NAN;
            return f;
        }
        self.flows.push(flow);
        self.flow_stamp.push(0);
        self.frozen.push(false);
        self.prev_rate.push(f64::NAN);
        (self.flows.len() - 1) as u32
    }

    /// Give back flow `f`'s slot: it has finished (or never moved) and nothing refers to
    /// it any more.
    pub fn release(&mut self, f: u32) {
        debug_assert!(!self.flows[f as usize].active);
        self.free.push(f);
    }

    /// Put flow `f` on its links. Rates are not re-solved until [`Network::settle`].
    pub fn activate(&mut self, f: u32, now: f64) {
        {
            let fl = &mut self.flows[f as usize];
            fl.active = true;
            fl.last = now;
        }
        let (s, l) = {
            let fl = &self.flows[f as usize];
            (fl.route_start as usize, fl.route_len as usize)
        };
        let w = self.flows[f as usize].weight;
        for i in s..s + l {
            let link = self.route_links[i];
            self.on_link[link as usize].push(f);
            self.weight_on[link as usize] += w;
        }
        self.dirty.extend_from_slice(&self.route_links[s..s + l]);
    }

    /// Take finished flow `f` off its links. Rates are not re-solved until
    /// [`Network::settle`].
    pub fn finish(&mut self, f: u32) {
        let (s, l, w) = {
            let fl = &mut self.flows[f as usize];
            fl.active = false;
            fl.remaining = 0.0;
            (fl.route_start as usize, fl.route_len as usize, fl.weight)
        };
        for i in s..s + l {
            let link = self.route_links[i] as usize;
            self.weight_on[link] -= w;
            let v = &mut self.on_link[link];
            if let Some(p) = v.iter().position(|&x| x == f) {
                v.remove(p);
            }
        }
        self.dirty.extend_from_slice(&self.route_links[s..s + l]);
    }

    /// Whether flows started or finished since the last [`Network::settle`].
    pub fn unsettled(&self) -> bool {
        !self.dirty.is_empty()
    }

    /// Re-solve, at time `now`, every component a flow started or finished on since
    /// the last settle; `touched` ends as the flows whose rate changed (the others keep
    /// their completion times).
    ///
    /// The engine settles once per instant, after every event of that instant: flows
    /// that start or end together (a ring step's on every rank) cost one solve, not one
    /// each. The rates are those of the instant's last membership either way (a solve's
    /// result depends only on its component's flows), and no time passes between
    /// solves of one instant, so no bytes move at the intermediate rates.
    pub fn settle(&mut self, now: f64) {
        let mut seeds = std::mem::take(&mut self.dirty);
        let epoch = self.next_epoch();
        let mut changed = std::mem::take(&mut self.changed);
        changed.clear();
        // Each component on its own (solved together, disjoint components would make
        // every round of the filling scan all of their links).
        for &seed in &seeds {
            if self.link_stamp[seed as usize] == epoch {
                continue;
            }
            self.link_stamp[seed as usize] = epoch;
            self.comp_links.clear();
            self.comp_links.push(seed);
            self.solve_component(epoch, now);
            changed.extend_from_slice(&self.touched);
        }
        self.changed = std::mem::replace(&mut self.touched, changed);
        seeds.clear();
        self.dirty = seeds;
    }

    fn next_epoch(&mut self) -> u32 {
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.link_stamp.iter_mut().for_each(|x| *x = 0);
            self.flow_stamp.iter_mut().for_each(|x| *x = 0);
            self.epoch = 1;
        }
        self.epoch
    }

    /// Re-solve the component of the links in `comp_links` (stamped with `epoch`): its
    /// flows' rates; `touched` ends as those whose rate changed.
    fn solve_component(&mut self, epoch: u32, now: f64) {
        self.touched.clear();
        if self.lone_shortcut && self.solve_alone(epoch, now) {
            return;
        }
        // Breadth-first over link → flows → links.
        let mut li = 0;
        while li < self.comp_links.len() {
            let link = self.comp_links[li] as usize;
            li += 1;
            for k in 0..self.on_link[link].len() {
                let f = self.on_link[link][k];
                if self.flow_stamp[f as usize] == epoch {
                    continue;
                }
                self.flow_stamp[f as usize] = epoch;
                self.touched.push(f);
                let fl = &self.flows[f as usize];
                for j in fl.route_start..fl.route_start + fl.route_len {
                    let l2 = self.route_links[j as usize];
                    if self.link_stamp[l2 as usize] != epoch {
                        self.link_stamp[l2 as usize] = epoch;
                        self.comp_links.push(l2);
                    }
                }
            }
        }
        // Bring every flow of the component up to `now` at its old rate.
        for &f in &self.touched {
            let fl = &mut self.flows[f as usize];
            fl.advance(now);
            self.frozen[f as usize] = false;
            self.prev_rate[f as usize] = fl.rate;
        }
        // Deterministic order regardless of discovery order (and of slot reuse).
        let flows = &self.flows;
        self.touched
            .sort_unstable_by_key(|&f| flows[f as usize].serial);
        self.comp_links.sort_unstable();
        for &link in &self.comp_links {
            self.cap_left[link as usize] = self.capacity[link as usize];
            self.unfrozen[link as usize] = self.weight_on[link as usize];
        }
        // Caps per unit of weight, comparable with a link's fair share.
        self.capped.clear();
        for &f in &self.touched {
            let fl = &self.flows[f as usize];
            if fl.cap.is_finite() {
                self.capped.push((fl.cap / fl.weight as f64, f));
            }
        }
        // Falling cap, ties by creation order: the earliest is popped first.
        let flows = &self.flows;
        self.capped.sort_unstable_by(|a, b| {
            b.0.total_cmp(&a.0)
                .then(flows[b.1 as usize].serial.cmp(&flows[a.1 as usize].serial))
        });
        let mut left = self.touched.len();
        while left > 0 {
            while self
                .capped
                .last()
                .is_some_and(|&(_, f)| self.frozen[f as usize])
            {
                self.capped.pop();
            }
            // The tightest link: smallest share (per unit of weight) of what is left.
            let mut best: Option<(f64, u32)> = None;
            for &link in &self.comp_links {
                let u = self.unfrozen[link as usize];
                if u == 0 {
                    continue;
                }
                let share = self.cap_left[link as usize] / u as f64;
                if share.is_finite() && best.is_none_or(|(b, _)| share < b) {
                    best = Some((share, link));
                }
            }
            let Some((share, link)) = best else {
                // Only infinite links remain: those flows run at their own ceiling.
                for &f in &self.touched {
                    if !self.frozen[f as usize] {
                        self.frozen[f as usize] = true;
                        self.flows[f as usize].rate = self.flows[f as usize].cap;
                    }
                }
                break;
            };
            let share = share.max(0.0);
            // A flow whose own ceiling (per unit of weight) is below every fair share
            // left is fixed at it.
            if let Some(&(cap, f)) = self.capped.last()
                && cap < share
            {
                self.capped.pop();
                self.freeze(f as usize, cap);
                left -= 1;
                continue;
            }
            for k in 0..self.on_link[link as usize].len() {
                let f = self.on_link[link as usize][k] as usize;
                if self.frozen[f] {
                    continue;
                }
                self.freeze(f, share);
                left -= 1;
            }
        }
        // A flow whose rate came out the same keeps its scheduled completion: moving
        // at that rate from its old start, it ends when it would have.
        let (flows, prev) = (&self.flows, &self.prev_rate);
        self.touched
            .retain(|&f| flows[f as usize].rate.to_bits() != prev[f as usize].to_bits());
    }

    /// [`Network::solve_component`] when the seed link carries one flow and nothing else
    /// shares any link of its route (a jittered run's flows seldom meet): its rate is
    /// the least of its links' bandwidths over its weight, times its weight, or its
    /// cap — the progressive filling's result bit for bit, without the search for the
    /// component or the rounds. `false` (nothing done) when the component is larger.
    fn solve_alone(&mut self, epoch: u32, now: f64) -> bool {
        let seed = self.comp_links[0] as usize;
        let [f] = self.on_link[seed][..] else {
            return false;
        };
        let fl = &self.flows[f as usize];
        let route = fl.route_start as usize..(fl.route_start + fl.route_len) as usize;
        // One entry on each link: no other flow, and no link crossed twice.
        if self.route_links[route.clone()]
            .iter()
            .any(|&l| self.on_link[l as usize].len() != 1)
        {
            return false;
        }
        let w = fl.weight as f64;
        // The tightest finite share; every link's is its bandwidth over this weight.
        let mut share: Option<f64> = None;
        for &l in &self.route_links[route] {
            self.link_stamp[l as usize] = epoch;
            let s = self.capacity[l as usize] / w;
            if s.is_finite() && share.is_none_or(|b| s < b) {
                share = Some(s);
            }
        }
        self.flow_stamp[f as usize] = epoch;
        let fl = &mut self.flows[f as usize];
        fl.advance(now);
        let prev = fl.rate;
        self.prev_rate[f as usize] = prev;
        self.frozen[f as usize] = true;
        fl.rate = match share {
            None => fl.cap,
            Some(share) => {
                let share = share.max(0.0);
                let cap = fl.cap / w;
                if fl.cap.is_finite() && cap < share {
                    cap * w
                } else {
                    share * w
                }
            }
        };
        if fl.rate.to_bits() != prev.to_bits() {
            self.touched.push(f);
        }
        true
    }

    /// Fix flow `f`'s rate at `share` per unit of its weight and take it out of its
    /// links' remaining shares.
    fn freeze(&mut self, f: usize, share: f64) {
        self.frozen[f] = true;
        let w = self.flows[f].weight;
        let rate = share * w as f64;
        self.flows[f].rate = rate;
        let (rs, rl) = (self.flows[f].route_start, self.flows[f].route_len);
        for j in rs..rs + rl {
            let l2 = self.route_links[j as usize] as usize;
            self.cap_left[l2] -= rate;
            self.unfrozen[l2] -= w;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::{LinkSpec, Topology};
    use proptest::prelude::*;

    /// A released flow's slot is reused with a later version (its stale completion
    /// events stay stale), and ties break by creation order, not by slot.
    #[test]
    fn released_slots_are_reused_in_creation_order() {
        let link = LinkSpec {
            bandwidth: 90.0,
            latency: 0.0,
        };
        let topo = Topology::full_mesh("m", 2, link).unwrap();
        let mut net = Network::new(&topo);
        net.route_links.push(0);
        let a = net.add_flow(0, 1, 1e9, f64::INFINITY, 1);
        net.activate(a, 0.0);
        net.settle(0.0);
        net.finish(a);
        net.settle(1.0);
        let old = net.flows[a as usize].version;
        net.release(a);
        let b = net.add_flow(0, 1, 1e9, f64::INFINITY, 1);
        let c = net.add_flow(0, 1, 1e9, f64::INFINITY, 1);
        assert_eq!(b, a, "the freed slot first");
        assert!(net.flows[b as usize].version > old);
        assert!(net.flows[b as usize].serial < net.flows[c as usize].serial);
        // b (slot 0) and c (slot 1) both touched: listed by creation order.
        net.activate(c, 2.0);
        net.activate(b, 2.0);
        net.settle(2.0);
        let t = net.touched.clone();
        assert!(t.len() == 2 && net.flows[t[0] as usize].serial < net.flows[t[1] as usize].serial);
        assert_eq!(net.flows.len(), 2, "memory follows the flows in flight");
    }

    /// A flow of weight 2 beside one of weight 1 on one link gets two thirds of it, as
    /// two flows would; a cap binds per unit of weight (a weight-2 flow capped at 2·c
    /// is two flows capped at c each), and what it leaves goes to the others.
    #[test]
    fn weighted_flows_share_as_that_many_flows() {
        let link = LinkSpec {
            bandwidth: 90.0,
            latency: 0.0,
        };
        let topo = Topology::full_mesh("m", 2, link).unwrap();
        let mut net = Network::new(&topo);
        let l = (0..topo.link_count())
            .find(|&i| topo.link(i).bandwidth == 90.0)
            .unwrap() as u32;
        net.route_links.push(l);
        let a = net.add_flow(0, 1, 1e9, f64::INFINITY, 2);
        let b = net.add_flow(0, 1, 1e9, f64::INFINITY, 1);
        net.activate(a, 0.0);
        net.activate(b, 0.0);
        net.settle(0.0);
        assert!((net.flows[a as usize].rate - 60.0).abs() < 1e-9);
        assert!((net.flows[b as usize].rate - 30.0).abs() < 1e-9);
        // Capped at 40 for its two channels: 20 each, below the fair 30.
        let c = net.add_flow(0, 1, 1e9, 40.0, 2);
        net.finish(a);
        net.activate(c, 0.0);
        net.settle(0.0);
        assert!((net.flows[c as usize].rate - 40.0).abs() < 1e-9);
        assert!((net.flows[b as usize].rate - 50.0).abs() < 1e-9);
    }

    proptest! {
        /// Settling once after an instant's starts and ends gives every flow the rate,
        /// bit for bit, and the bytes left that settling after each of them gives:
        /// unequal links, routes of one to three links, caps and weights, some flows
        /// running from an earlier instant.
        #[test]
        fn one_settle_per_instant_is_a_settle_per_change(
            caps in proptest::collection::vec(1u32..100, 12),
            flows in proptest::collection::vec(
                (proptest::collection::vec(0u32..12, 1..4), proptest::option::of(1u32..200), 1u32..4, 1u32..1000),
                1..14,
            ),
            early in proptest::collection::vec(any::<bool>(), 14),
            order in proptest::collection::vec(0usize..14, 0..20),
        ) {
            let link = LinkSpec { bandwidth: 1.0, latency: 0.0 };
            let topo = Topology::full_mesh("m", 4, link).unwrap();
            prop_assert_eq!(topo.link_count(), 12);
            // Both networks see the same flows; `each` settles after every change.
            let build = || {
                let mut net = Network::new(&topo);
                for (l, &c) in caps.iter().enumerate() {
                    net.capacity[l] = f64::from(c);
                }
                for (route, cap, weight, bytes) in &flows {
                    let start = net.route_links.len() as u32;
                    net.route_links.extend_from_slice(route);
                    net.add_flow(start, route.len() as u32, f64::from(*bytes), cap.map_or(f64::INFINITY, f64::from), *weight);
                }
                // The earlier instant: some flows start, settled.
                for (f, _) in early.iter().enumerate().take(flows.len()).filter(|e| *e.1) {
                    net.activate(f as u32, 0.0);
                }
                net.settle(0.0);
                net
            };
            let (mut once, mut each) = (build(), build());
            // The instant at t = 1: each listed flow starts if idle (and never ran),
            // finishes if running.
            let mut ran = vec![false; flows.len()];
            for &i in &order {
                let f = i % flows.len();
                let running = once.flows[f].active;
                prop_assert_eq!(running, each.flows[f].active);
                if running {
                    once.finish(f as u32);
                    each.finish(f as u32);
                } else if !early[f] && !ran[f] {
                    ran[f] = true;
                    once.activate(f as u32, 1.0);
                    each.activate(f as u32, 1.0);
                } else {
                    continue;
                }
                each.settle(1.0);
            }
            once.settle(1.0);
            prop_assert!(!once.unsettled() && !each.unsettled());
            for f in 0..flows.len() {
                let (a, b) = (&once.flows[f], &each.flows[f]);
                prop_assert_eq!(a.active, b.active);
                if a.active {
                    prop_assert_eq!(a.rate.to_bits(), b.rate.to_bits(), "flow {} rate", f);
                    prop_assert_eq!(a.remaining.to_bits(), b.remaining.to_bits(), "flow {} bytes", f);
                }
            }
        }

        /// A lone flow's component solved by the shortcut gets the progressive
        /// filling's rate, bytes left and changed set bit for bit: flows over routes of
        /// one to three of 12 unequal links (often alone, sometimes sharing or crossing
        /// a link twice), caps, weights, infinite links, starting and finishing over
        /// several instants.
        #[test]
        fn a_lone_flow_shortcut_is_the_progressive_filling(
            caps in proptest::collection::vec(proptest::option::of(1u32..100), 12),
            flows in proptest::collection::vec(
                (proptest::collection::vec(0u32..12, 1..4), proptest::option::of(1u32..200), 1u32..4, 1u32..1000),
                1..10,
            ),
            steps in proptest::collection::vec(proptest::collection::vec(0usize..10, 0..4), 1..8),
        ) {
            let link = LinkSpec { bandwidth: 1.0, latency: 0.0 };
            let topo = Topology::full_mesh("m", 4, link).unwrap();
            let build = |shortcut: bool| {
                let mut net = Network::new(&topo);
                net.lone_shortcut = shortcut;
                for (l, c) in caps.iter().enumerate() {
                    net.capacity[l] = c.map_or(f64::INFINITY, f64::from);
                }
                for (route, cap, weight, bytes) in &flows {
                    let start = net.route_links.len() as u32;
                    net.route_links.extend_from_slice(route);
                    net.add_flow(start, route.len() as u32, f64::from(*bytes), cap.map_or(f64::INFINITY, f64::from), *weight);
                }
                net
            };
            let (mut fast, mut slow) = (build(true), build(false));
            let mut ran = vec![false; flows.len()];
            for (t, step) in steps.iter().enumerate() {
                let now = t as f64 * 0.5;
                for &i in step {
                    let f = i % flows.len();
                    if fast.flows[f].active {
                        fast.finish(f as u32);
                        slow.finish(f as u32);
                    } else if !ran[f] {
                        ran[f] = true;
                        fast.activate(f as u32, now);
                        slow.activate(f as u32, now);
                    }
                }
                fast.settle(now);
                slow.settle(now);
                let (mut a, mut b) = (fast.touched.clone(), slow.touched.clone());
                a.sort_unstable();
                b.sort_unstable();
                prop_assert_eq!(a, b, "changed flows at {}", now);
                for f in 0..flows.len() {
                    let (x, y) = (&fast.flows[f], &slow.flows[f]);
                    prop_assert_eq!(x.active, y.active);
                    prop_assert_eq!(x.rate.to_bits(), y.rate.to_bits(), "flow {} rate at {}", f, now);
                    prop_assert_eq!(x.remaining.to_bits(), y.remaining.to_bits(), "flow {} bytes at {}", f, now);
                }
            }
        }
    }
}
