//! NCCL's collective model: how many channels a collective runs on, what each channel
//! carries, and which algorithm and protocol NCCL picks for a size.
//!
//! Figures follow NCCL's own source (NVIDIA/nccl, `src/graph/tuning.cc` as of 2.28 —
//! `ncclTunerConstantsDefaults`, `ncclTopoTuneModel`, `ncclTopoGetAlgoTime` — and
//! `src/graph/search.cc` for the per-channel speeds its graph search tries):
//!
//! - a collective runs on C channels, each a ring (or a tree) with 1/C of the data;
//! - the tuning model predicts `time = latency + bytes / bandwidth` per (algorithm,
//!   protocol), with `busBw = C × per-channel bw` refined per protocol (LL: half the
//!   bandwidth, capped at `llMaxBw`; LL128: 92%, capped per channel; tree: 92%, capped
//!   per channel, algbw half of it), latencies `base + steps × hwLat` by link type;
//! - NCCL runs the (algorithm, protocol) of least predicted time.
//!
//! The simulator uses that choice and those latencies, then simulates the chosen
//! algorithm's messages over the topology: bandwidth comes from the links (shared max-min
//! fairly), not from the tuning table. NVLS, CollNet/SHARP and PAT are not modelled (off,
//! as on the machines this project measures).

use crate::topology::{DeviceKind, Topology};
use std::fmt;

/// NCCL's protocols.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Protocol {
    /// 8-byte lines of 4 data bytes and a 4-byte flag: lowest latency, half the bandwidth.
    Ll,
    /// 128-byte lines with one 8-byte flag.
    Ll128,
    /// Bulk copies behind a fence per chunk: full bandwidth, highest latency.
    Simple,
}

impl Protocol {
    pub const ALL: [Protocol; 3] = [Protocol::Ll, Protocol::Ll128, Protocol::Simple];

    pub fn name(self) -> &'static str {
        match self {
            Protocol::Ll => "LL",
            Protocol::Ll128 => "LL128",
            Protocol::Simple => "Simple",
        }
    }

    pub fn parse(s: &str) -> Option<Protocol> {
        Protocol::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(s))
    }

    /// Wire bytes per payload byte.
    pub fn wire_factor(self) -> f64 {
        match self {
            Protocol::Ll => 2.0,
            Protocol::Ll128 => 128.0 / 120.0,
            Protocol::Simple => 1.0,
        }
    }

    fn idx(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The algorithms of NCCL's tuning model that this project simulates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NcclAlgo {
    /// Double binary tree across nodes, a chain inside each node (all-reduce only).
    Tree,
    Ring,
}

impl NcclAlgo {
    fn idx(self) -> usize {
        self as usize
    }
    pub fn name(self) -> &'static str {
        match self {
            NcclAlgo::Tree => "tree",
            NcclAlgo::Ring => "ring",
        }
    }
}

/// The collectives NCCL's tuning model covers here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NcclColl {
    AllGather,
    ReduceScatter,
    AllReduce,
}

/// Which CPU the nodes have (NCCL keys its LL ceiling and network overhead on it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CpuVendor {
    #[default]
    Intel,
    Amd,
}

/// NCCL parameters of a hardware profile (`[comm.nccl]`), validated.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NcclConfig {
    /// Compute capability × 10 of the GPUs (90 for Hopper): selects NCCL's tables.
    pub sm: u32,
    /// Channels of ring and tree collectives; `None`: what NCCL picks (see
    /// [`Fabric::default_channels`]).
    pub channels: Option<u32>,
    /// The most one channel moves, bytes/s; `None`: the fastest per-channel speed NCCL's
    /// graph search tries on this generation.
    pub channel_bandwidth: Option<f64>,
    pub cpu: CpuVendor,
}

impl Default for NcclConfig {
    fn default() -> Self {
        NcclConfig {
            sm: 90,
            channels: None,
            channel_bandwidth: None,
            cpu: CpuVendor::Intel,
        }
    }
}

/// NCCL's generation index of its tables: Volta, Ampere, Hopper, Blackwell.
fn gen_index(sm: u32) -> usize {
    match sm {
        100.. => 3,
        90..=99 => 2,
        80..=89 => 1,
        _ => 0,
    }
}

/// The fastest per-channel speed (GB/s) NCCL's graph search tries inside a node
/// (`search.cc`: `sm100SpeedArrayIntra[0]`, `sm90SpeedArrayIntra[0]`, `speedArrayIntra[0]`).
pub fn max_channel_gbps(sm: u32) -> f64 {
    match gen_index(sm) {
        3 => 90.0,
        2 => 60.0,
        _ => 40.0,
    }
}

// tuning.cc, ncclTunerConstantsDefaults. Index [algo: Tree, Ring][proto: LL, LL128, Simple].
const BASE_LAT: [[f64; 3]; 2] = [[6.8, 14.0, 8.4], [6.6, 14.0, 8.4]];
// [hw: NVLink, PCI, NET][algo][proto], µs.
const HW_LAT: [[[f64; 3]; 2]; 3] = [
    [[0.6, 1.25, 4.0], [0.6, 1.9, 3.4]],
    [[1.0, 1.9, 4.0], [1.0, 2.5, 5.7]],
    [[5.0, 8.5, 14.0], [2.7, 4.0, 14.0]],
];
// [index1][nodes: 1, 2, >2], GB/s. index1: the generation on one node, the CPU across nodes.
const LL_MAX_BWS: [[f64; 3]; 4] = [
    [39.0, 39.0, 20.4],
    [87.7, 22.5, 19.0],
    [141.0, 45.0, 35.0],
    [282.0, 90.0, 70.0],
];
const PER_CH_MAX_RING_LL128: [[f64; 3]; 4] = [
    [20.0, 20.0, 20.0],
    [20.0, 20.0, 20.0],
    [36.7, 36.7, 36.7],
    [40.0, 40.0, 40.0],
];
const PER_CH_MAX_TREE_LL128: [[f64; 3]; 4] = [
    [20.0, 20.0, 20.0],
    [20.0, 20.0, 20.0],
    [36.7, 36.7, 29.0],
    [55.6, 31.67, 20.0],
];
const PER_CH_MAX_TREE: [[f64; 3]; 4] = [
    [26.5, 18.5, 10.0],
    [24.0, 23.6, 17.8],
    [38.7, 41.4, 36.0],
    [70.0, 42.8, 24.0],
];
// Powers of two from 64 B: the tree's correction of its bandwidth at medium sizes.
const TREE_CORRECTION: [[f64; 24]; 3] = [
    [
        1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.7, 0.7, 0.7, 0.7, 0.6, 0.5, 0.4, 0.4, 0.5, 0.6, 0.7, 0.8,
        0.9, 1.0, 1.0, 1.0, 1.0, 1.0,
    ],
    [
        1.0, 1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.8, 0.8, 0.7, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.8, 0.9,
        0.9, 0.9, 0.9, 1.0, 1.0, 1.0,
    ],
    [
        0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.8, 0.7, 0.6, 0.6, 0.5, 0.5, 0.5, 0.5, 0.6, 0.7, 0.8,
        0.7, 0.7, 0.8, 0.9, 0.9, 0.9,
    ],
];
/// NCCL's tree all-reduce reaches 92% of its channels' bandwidth (tuning.cc).
pub const TREE_EFFICIENCY: f64 = 0.92;

/// What NCCL sees of the machine for one communicator: ranks on nodes, the bandwidth a
/// GPU has inside its node and a node has to the network.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fabric {
    pub ranks: u32,
    pub nodes: u32,
    /// Inside a node, GPU to GPU: NVLink (else PCIe).
    pub nvlink: bool,
    /// One GPU's bandwidth to the others of its node, bytes/s (the route's bottleneck).
    pub intra_bw: f64,
    /// One node's bandwidth to the network over all its NICs, bytes/s (0: one node).
    pub inter_bw: f64,
    /// NICs per node.
    pub nics: u32,
}

impl Fabric {
    /// The fabric of ranks `0..ranks` on `topo` (rank r on GPU r).
    pub fn of(topo: &Topology, ranks: u32) -> Fabric {
        let members: Vec<u32> = (0..ranks).collect();
        Fabric::of_members(topo, &members)
    }

    /// The fabric of a communicator of the GPUs `members` (each on GPU of its number):
    /// its nodes, its GPUs per node (the most on any node), the bandwidth between two of
    /// them on one node, and the network bandwidth of the rails it reaches: a node's NICs
    /// in the share of its GPUs the communicator holds (NCCL runs a communicator's
    /// channels through the NICs nearest its GPUs, one rail per GPU on rail-optimized
    /// nodes, so a group of one GPU per node gets one NIC).
    pub fn of_members(topo: &Topology, members: &[u32]) -> Fabric {
        let g = topo.gpus_per_node().max(1);
        let ranks = members.len() as u32;
        let mut per_node: std::collections::BTreeMap<usize, Vec<u32>> = Default::default();
        for &m in members {
            per_node
                .entry(topo.node_of(m as usize))
                .or_default()
                .push(m);
        }
        let nodes = per_node.len().max(1) as u32;
        let ppn = per_node.values().map(Vec::len).max().unwrap_or(1).max(1);
        let pair = per_node
            .values()
            .find(|v| v.len() >= 2)
            .map(|v| (v[0], v[1]));
        let graph = topo.graph();
        let mut nvlink = false;
        let mut intra_bw = f64::INFINITY;
        if let Some((a, b)) = pair {
            let mut router = crate::topology::Router::new(topo);
            if let Ok(r) = router.route(a as usize, b as usize) {
                intra_bw = r.bottleneck;
                nvlink = r.links.iter().all(|&l| {
                    let (a, b) = graph
                        .edge_endpoints(petgraph::graph::EdgeIndex::new(l as usize))
                        .expect("link of this topology");
                    [a, b]
                        .iter()
                        .all(|&n| matches!(graph[n].kind, DeviceKind::Gpu | DeviceKind::NvSwitch))
                });
            }
        }
        // The network side of node 0's NICs: links from a NIC to a network switch.
        let mut inter_bw = 0.0;
        let mut nics = 0u32;
        for e in graph.edge_indices() {
            let (a, b) = graph.edge_endpoints(e).expect("edge of this graph");
            if graph[a].kind == DeviceKind::Nic && graph[b].kind == DeviceKind::NetSwitch {
                inter_bw += graph[e].bandwidth;
                nics += 1;
            }
        }
        let all_nodes = topo.node_count().max(1) as f64;
        let node_nics = (nics as f64 / all_nodes).round() as u32;
        // The share of a node's rails this communicator's GPUs sit on.
        let share = (ppn as f64 / g as f64).min(1.0);
        let group_nics =
            ((node_nics as f64 * share).round() as u32).clamp(1.min(node_nics), node_nics);
        Fabric {
            ranks,
            nodes,
            nvlink,
            intra_bw,
            inter_bw: if nodes > 1 {
                inter_bw / all_nodes * group_nics as f64 / node_nics.max(1) as f64
            } else {
                0.0
            },
            nics: group_nics,
        }
    }

    /// Ranks per node.
    pub fn ppn(&self) -> u32 {
        (self.ranks / self.nodes.max(1)).max(1)
    }

    /// The channels NCCL runs ring and tree collectives on: across nodes two per NIC
    /// (its rail-aligned rings, duplicated), at least 2 and at most 32; inside an NVLink
    /// node 16 (NCCL's 8 searched rings on NVSwitch, duplicated: "16 coll channels" in
    /// its logs on H800/H100 nodes, NVIDIA/nccl#892); over PCIe 2.
    pub fn default_channels(&self) -> u32 {
        if self.nodes > 1 && self.nics > 0 {
            (2 * self.nics).clamp(2, 32)
        } else if self.nvlink {
            16
        } else {
            2
        }
    }

    /// The bytes/s one channel's ring moves inside a node and across nodes, as NCCL's
    /// graph search would settle: the links' share, at most `ceiling`.
    pub fn channel_bw(&self, channels: u32, ceiling: f64) -> (f64, f64) {
        let c = channels.max(1) as f64;
        let intra = (self.intra_bw / c).min(ceiling);
        let inter = if self.nodes > 1 {
            (self.inter_bw / c).min(ceiling).min(intra)
        } else {
            intra
        };
        (intra, inter)
    }
}

/// Indices into NCCL's tables: the generation, the LL ceiling's row (the generation on
/// one node, the CPU across nodes) and the node class (1, 2, more).
fn table_index(cfg: &NcclConfig, nodes: u32) -> (usize, usize, usize) {
    let gi = gen_index(cfg.sm);
    let index2 = if nodes <= 2 {
        nodes.max(1) as usize - 1
    } else {
        2
    };
    let index1 = if nodes <= 1 {
        gi
    } else if cfg.cpu == CpuVendor::Amd {
        1
    } else {
        0
    };
    (gi, index1, index2)
}

/// NCCL's per-step latencies, µs, of `algo` under `p` on `fabric`: inside a node (a ring
/// across nodes at least the network's post overhead, three times for Simple) and
/// between nodes (the tree's figure when each node holds one rank).
fn step_latencies(cfg: &NcclConfig, fabric: &Fabric, algo: NcclAlgo, p: Protocol) -> (f64, f64) {
    let intra_hw = if fabric.nvlink { 0 } else { 1 };
    let mut intra = HW_LAT[intra_hw][algo.idx()][p.idx()];
    if fabric.nodes > 1 && algo == NcclAlgo::Ring {
        let overhead = match cfg.cpu {
            CpuVendor::Intel => 1.0,
            CpuVendor::Amd => 2.0,
        } * if p == Protocol::Simple { 3.0 } else { 1.0 };
        intra = intra.max(overhead);
    }
    let inter = if fabric.ppn() == 1 {
        HW_LAT[2][NcclAlgo::Tree.idx()][p.idx()]
    } else {
        HW_LAT[2][algo.idx()][p.idx()]
    };
    (intra, inter)
}

/// One (algorithm, protocol) as NCCL's tuning model prices it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tuned {
    pub algo: NcclAlgo,
    pub protocol: Protocol,
    /// Model latency, µs, and algorithm bandwidth, GB/s.
    pub latency_us: f64,
    pub algbw_gbps: f64,
    /// The model's time for the size asked, µs.
    pub time_us: f64,
}

/// The resolved channel set-up of one collective.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Channels {
    pub count: u32,
    /// Per-channel ceiling, bytes/s.
    pub ceiling: f64,
}

/// The channels a collective on `fabric` runs on under `cfg` (`override_` from the
/// command line first).
pub fn channels(cfg: &NcclConfig, fabric: &Fabric, override_: Option<u32>) -> Channels {
    Channels {
        count: override_
            .or(cfg.channels)
            .unwrap_or_else(|| fabric.default_channels()),
        ceiling: cfg
            .channel_bandwidth
            .unwrap_or(max_channel_gbps(cfg.sm) * 1e9),
    }
}

fn log2i(x: u64) -> i64 {
    if x == 0 {
        -1
    } else {
        63 - x.leading_zeros() as i64
    }
}

/// NCCL's tuning model for `coll` of `bytes` (nccl-tests' size: the all-reduce buffer,
/// the all-gather output, the reduce-scatter input) on `fabric`: every enabled
/// (algorithm, protocol), in NCCL's order (tree before ring, LL, LL128, Simple).
pub fn tune(
    cfg: &NcclConfig,
    fabric: &Fabric,
    ch: Channels,
    coll: NcclColl,
    bytes: u64,
) -> Vec<Tuned> {
    let (n, nodes) = (fabric.ranks.max(1), fabric.nodes.max(1));
    let ppn = fabric.ppn();
    let (gi, index1, index2) = table_index(cfg, nodes);
    let ll_max = LL_MAX_BWS[index1][index2];
    let c = ch.count.max(1) as f64;
    let (intra, inter) = fabric.channel_bw(ch.count, ch.ceiling);
    let bw = if nodes <= 2 { intra } else { inter } / 1e9;
    let nsteps = match coll {
        NcclColl::AllReduce => 2 * (n - 1),
        _ => n - 1,
    } as f64;
    let inter_steps = if nodes == 1 {
        0.0
    } else if coll == NcclColl::AllReduce {
        2.0 * (nodes - 1) as f64
    } else {
        (nodes - 1) as f64
    };
    let mut out = Vec::new();
    for algo in [NcclAlgo::Tree, NcclAlgo::Ring] {
        if algo == NcclAlgo::Tree && coll != NcclColl::AllReduce {
            continue;
        }
        for p in Protocol::ALL {
            // LL128 by default on NVLink nodes only (NCCL enables it up to PXN on Hopper
            // and later, up to PXB before; never over plain PCIe between GPUs).
            if p == Protocol::Ll128 && !fabric.nvlink {
                continue;
            }
            let mut bus = c * bw;
            match (algo, p) {
                (NcclAlgo::Ring, Protocol::Ll) => bus = ll_max.min(bus * 0.5),
                (NcclAlgo::Ring, Protocol::Ll128) => {
                    bus = (bus * 0.92).min(c * PER_CH_MAX_RING_LL128[gi][index2])
                }
                _ => {}
            }
            if algo == NcclAlgo::Tree {
                bus = (bus * TREE_EFFICIENCY).min(c * PER_CH_MAX_TREE[gi][index2]);
                match p {
                    Protocol::Ll => bus = (bus / 3.8).min(ll_max),
                    Protocol::Ll128 => {
                        let f = if nodes == 1 { 7.0 / 9.0 } else { 120.0 / 128.0 };
                        bus = (bus * f).min(c * PER_CH_MAX_TREE_LL128[gi][index2]);
                    }
                    Protocol::Simple => {}
                }
            }
            let algbw = match algo {
                NcclAlgo::Ring => bus * n as f64 / nsteps,
                NcclAlgo::Tree => bus * 0.5,
            };
            let mut lat = BASE_LAT[algo.idx()][p.idx()];
            let (intra_lat, inter_lat) = step_latencies(cfg, fabric, algo, p);
            match algo {
                NcclAlgo::Ring => {
                    lat += (nsteps - inter_steps) * intra_lat + inter_steps * inter_lat;
                }
                NcclAlgo::Tree => {
                    lat += 2.0
                        * ((ppn - 1) as f64 * intra_lat
                            + log2i(nodes as u64).max(0) as f64 * inter_lat);
                }
            }
            // ncclTopoGetAlgoTime's refinements.
            let mut eff_bw = algbw;
            let log_size = log2i(bytes >> 6);
            if algo == NcclAlgo::Tree && (0..23).contains(&log_size) {
                eff_bw *= TREE_CORRECTION[p.idx()][log_size as usize];
            }
            let mut eff_lat = lat;
            if algo == NcclAlgo::Ring
                && p == Protocol::Simple
                && nodes > 1
                && coll == NcclColl::AllReduce
                && bytes as f64 / (c * n as f64) >= 64.0
            {
                eff_lat *= if cfg.sm < 80 { 1.9 } else { 1.4 };
            }
            let time = if eff_bw > 0.0 {
                eff_lat + bytes as f64 / (1000.0 * eff_bw)
            } else {
                f64::INFINITY
            };
            out.push(Tuned {
                algo,
                protocol: p,
                latency_us: lat,
                algbw_gbps: algbw,
                time_us: time,
            });
        }
    }
    out
}

/// NCCL's pick among `candidates` (least model time; the first on a tie, as NCCL).
pub fn pick(candidates: &[Tuned]) -> Option<Tuned> {
    let mut best: Option<Tuned> = None;
    for t in candidates {
        if t.time_us.is_finite() && best.is_none_or(|b| t.time_us < b.time_us) {
            best = Some(*t);
        }
    }
    best
}

/// The wire parameters of one channel of `algo` under protocol `p`: NCCL's latencies
/// (base once per collective; per step by link type), the protocol's wire bytes, the
/// per-channel ceiling (LL's whole-collective ceiling shared by the channels).
pub fn wire(
    cfg: &NcclConfig,
    fabric: &Fabric,
    ch: Channels,
    algo: NcclAlgo,
    p: Protocol,
) -> crate::plan::Wire {
    let (gi, index1, index2) = table_index(cfg, fabric.nodes.max(1));
    let c = ch.count.max(1) as f64;
    let mut factor = p.wire_factor();
    if algo == NcclAlgo::Tree {
        factor /= TREE_EFFICIENCY;
    }
    // Payload ceiling per channel, then in wire bytes.
    let mut payload_cap = ch.ceiling / p.wire_factor();
    match (algo, p) {
        (_, Protocol::Ll) => payload_cap = payload_cap.min(LL_MAX_BWS[index1][index2] * 1e9 / c),
        (NcclAlgo::Ring, Protocol::Ll128) => {
            payload_cap = payload_cap.min(PER_CH_MAX_RING_LL128[gi][index2] * 1e9)
        }
        (NcclAlgo::Tree, Protocol::Ll128) => {
            payload_cap = payload_cap.min(PER_CH_MAX_TREE_LL128[gi][index2] * 1e9)
        }
        (NcclAlgo::Tree, Protocol::Simple) => {
            payload_cap = payload_cap.min(PER_CH_MAX_TREE[gi][index2] * 1e9)
        }
        _ => {}
    }
    let (intra, inter) = step_latencies(cfg, fabric, algo, p);
    crate::plan::Wire {
        factor,
        cap: payload_cap * factor,
        weight: 1,
        launch_latency: BASE_LAT[algo.idx()][p.idx()] * 1e-6,
        intra_step_latency: intra * 1e-6,
        inter_step_latency: inter * 1e-6,
    }
}

/// How a ring `coll` of `bytes` (nccl-tests' size) over the GPUs `members` runs as NCCL
/// would run it: the communicator's channels, the ring protocol NCCL's model picks for
/// the size, and the wire of one of its channels. `None` when no protocol has a finite
/// time (a fabric without bandwidth).
pub fn ring_for(
    cfg: &NcclConfig,
    topo: &Topology,
    members: &[u32],
    coll: NcclColl,
    bytes: u64,
) -> Option<(Channels, Tuned, crate::plan::Wire)> {
    let fabric = Fabric::of_members(topo, members);
    let ch = channels(cfg, &fabric, None);
    let rings: Vec<Tuned> = tune(cfg, &fabric, ch, coll, bytes)
        .into_iter()
        .filter(|t| t.algo == NcclAlgo::Ring)
        .collect();
    let t = pick(&rings)?;
    Some((ch, t, wire(cfg, &fabric, ch, t.algo, t.protocol)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fabric(ranks: u32, nodes: u32) -> Fabric {
        Fabric {
            ranks,
            nodes,
            nvlink: true,
            intra_bw: 370e9,
            inter_bw: 8.0 * 48e9,
            nics: 8,
        }
    }

    /// A communicator's fabric counts its own nodes and the rails its GPUs sit on: a
    /// data-parallel group of one GPU per node reaches one NIC per node, two GPUs of a
    /// node reach two, a whole node all eight.
    #[test]
    fn a_communicator_reaches_the_rails_of_its_gpus() {
        let hw = crate::config::load_hardware_nodes("dgx-h100", None, Some(4)).unwrap();
        let topo = &hw.topology;
        let whole = Fabric::of(topo, 32);
        assert_eq!((whole.nodes, whole.nics), (4, 8));
        let rail = Fabric::of_members(topo, &[3, 11, 19, 27]);
        assert_eq!((rail.ranks, rail.nodes, rail.nics), (4, 4, 1));
        assert!(!rail.intra_bw.is_finite(), "no two members share a node");
        assert!((rail.inter_bw - whole.inter_bw / 8.0).abs() < 1.0);
        let two = Fabric::of_members(topo, &[0, 1, 8, 9]);
        assert_eq!((two.nodes, two.nics), (2, 2));
        assert!(
            (two.intra_bw - whole.intra_bw).abs() < 1.0,
            "NVLink between 0 and 1"
        );
        let inside = Fabric::of_members(topo, &[8, 9, 10, 11]);
        assert_eq!(inside.nodes, 1);
        assert_eq!(inside.inter_bw, 0.0);
        // NCCL's pick for the one-GPU-per-node group: two channels on its one NIC, the
        // Simple ring for large sizes.
        let cfg = NcclConfig::default();
        let (ch, t, w) = ring_for(
            &cfg,
            topo,
            &[3, 11, 19, 27],
            NcclColl::ReduceScatter,
            1 << 30,
        )
        .unwrap();
        assert_eq!(ch.count, 2);
        assert_eq!(t.protocol, Protocol::Simple);
        assert_eq!(w.factor, 1.0);
    }

    #[test]
    fn one_h100_node_prices_ring_as_nccl_does() {
        // 16 channels at min(370/16, 60) GB/s: busBw 370; Simple ring all-reduce on 8
        // ranks: algbw = 370 · 8/14, latency 8.4 + 14 · 3.4 µs.
        let f = fabric(8, 1);
        let cfg = NcclConfig::default();
        let ch = channels(&cfg, &f, None);
        assert_eq!(ch.count, 16);
        let t = tune(&cfg, &f, ch, NcclColl::AllReduce, 1 << 30);
        let ring = t
            .iter()
            .find(|t| t.algo == NcclAlgo::Ring && t.protocol == Protocol::Simple)
            .unwrap();
        assert!((ring.algbw_gbps - 370.0 * 8.0 / 14.0).abs() < 1e-9);
        assert!((ring.latency_us - (8.4 + 14.0 * 3.4)).abs() < 1e-9);
        // Large sizes: Simple ring; tiny sizes: LL.
        let big = pick(&t).unwrap();
        assert_eq!((big.algo, big.protocol), (NcclAlgo::Ring, Protocol::Simple));
        let small = pick(&tune(&cfg, &f, ch, NcclColl::AllReduce, 1024)).unwrap();
        assert_eq!(small.protocol, Protocol::Ll);
    }

    #[test]
    fn across_nodes_the_nics_bound_the_channels_and_tree_appears() {
        let f = fabric(32, 4);
        let cfg = NcclConfig::default();
        let ch = channels(&cfg, &f, None);
        assert_eq!(ch.count, 16, "two channels per NIC");
        let (intra, inter) = f.channel_bw(ch.count, ch.ceiling);
        // NVLink's share (23.1 GB/s) is below the NICs' (384/16 = 24 GB/s): it binds.
        assert!((intra - 370e9 / 16.0).abs() < 1.0 && (inter - intra).abs() < 1.0);
        // Reduce-scatter and all-gather have no tree.
        let rs = tune(&cfg, &f, ch, NcclColl::ReduceScatter, 1 << 20);
        assert!(rs.iter().all(|t| t.algo == NcclAlgo::Ring));
        let ar = tune(&cfg, &f, ch, NcclColl::AllReduce, 1 << 20);
        assert_eq!(ar.len(), 6);
    }

    #[test]
    fn protocols_name_and_inflate() {
        assert_eq!(Protocol::parse("ll128"), Some(Protocol::Ll128));
        assert_eq!(Protocol::parse("simple"), Some(Protocol::Simple));
        assert_eq!(Protocol::parse("x"), None);
        assert_eq!(Protocol::Ll.wire_factor(), 2.0);
        let cfg = NcclConfig::default();
        let f = fabric(16, 2);
        let ch = channels(&cfg, &f, None);
        let w = wire(&cfg, &f, ch, NcclAlgo::Ring, Protocol::Ll);
        // LL's whole-collective ceiling across two nodes of Intel CPUs (39 GB/s), shared
        // by 16 channels, in wire bytes.
        assert!((w.cap - 39e9 / 16.0 * 2.0).abs() < 1.0);
        assert!((w.inter_step_latency - 2.7e-6).abs() < 1e-15);
        assert!(
            (w.intra_step_latency - 1.0e-6).abs() < 1e-15,
            "net overhead"
        );
    }
}
