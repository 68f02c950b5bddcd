//! The machine as a graph: devices (GPUs, switches, CPUs, NICs) joined by directed links
//! with a bandwidth per direction and a latency, on petgraph. Builders make the common
//! shapes; [`Router`] finds the route of a GPU-to-GPU message.

mod builders;
mod nccl_xml;
mod route;
mod symmetry;

pub use builders::{LinkSpec, MAX_DEVICES, PcieTreeSpec, RailFatTreeSpec};
pub use nccl_xml::{NcclXmlError, from_nccl_xml};
pub use route::{Route, Router};
pub use symmetry::{LinkOrbits, Rotation};

use petgraph::graph::{DiGraph, EdgeIndex, NodeIndex};
use petgraph::visit::EdgeRef;
use std::collections::VecDeque;
use std::fmt;

/// What a node of the topology is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DeviceKind {
    Gpu,
    NvSwitch,
    PcieSwitch,
    Cpu,
    Nic,
    NetSwitch,
}

impl DeviceKind {
    pub const ALL: [DeviceKind; 6] = [
        DeviceKind::Gpu,
        DeviceKind::NvSwitch,
        DeviceKind::PcieSwitch,
        DeviceKind::Cpu,
        DeviceKind::Nic,
        DeviceKind::NetSwitch,
    ];

    pub fn name(self) -> &'static str {
        match self {
            DeviceKind::Gpu => "gpu",
            DeviceKind::NvSwitch => "nvswitch",
            DeviceKind::PcieSwitch => "pcie-switch",
            DeviceKind::Cpu => "cpu",
            DeviceKind::Nic => "nic",
            DeviceKind::NetSwitch => "net-switch",
        }
    }

    pub fn parse(s: &str) -> Option<DeviceKind> {
        DeviceKind::ALL.into_iter().find(|k| k.name() == s)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Device {
    pub kind: DeviceKind,
    pub name: String,
}

/// One direction of a physical link.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Link {
    /// Bytes per second in this direction; may be `+inf` (a free link), never ≤ 0 or NaN.
    pub bandwidth: f64,
    /// Seconds a message's first byte spends on the link.
    pub latency: f64,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TopologyError {
    #[error("link {index} names device `{name}`, which the topology does not define")]
    UnknownDevice { index: usize, name: String },
    #[error("link {index} joins device `{name}` to itself")]
    SelfLink { index: usize, name: String },
    #[error("device `{name}` is defined twice")]
    DuplicateDevice { name: String },
    #[error("link {link} has bandwidth {value} GB/s; a bandwidth must be positive")]
    BadBandwidth { link: String, value: f64 },
    #[error("link {link} has latency {value} µs; a latency must be finite and ≥ 0")]
    BadLatency { link: String, value: f64 },
    #[error("the topology has {have} GPUs, but {need} ranks were asked for")]
    TooFewGpus { have: usize, need: usize },
    #[error("the topology is disconnected: no route from `{from}` to `{to}`")]
    Disconnected { from: String, to: String },
    #[error("the topology has no GPU")]
    NoGpu,
    #[error("oversubscription must be a finite ratio ≥ 1, got {value}")]
    BadOversubscription { value: f64 },
    #[error("the topology would have {value} {what}; at most {max} are supported")]
    TooLarge {
        what: &'static str,
        max: u64,
        value: String,
    },
    #[error("{what} must be at least {min}, got {value}")]
    BadCount {
        what: &'static str,
        min: u64,
        value: u64,
    },
}

/// A validated, connected topology. GPUs are numbered in the order they were added; GPU
/// `i` hosts rank `i` unless a mapping says otherwise.
#[derive(Debug, Clone)]
pub struct Topology {
    pub name: String,
    graph: DiGraph<Device, Link>,
    gpus: Vec<NodeIndex>,
    /// A symmetry the builder laid out (see [`symmetry`](self::symmetry)).
    rotation: Option<Rotation>,
    /// GPUs per node: GPU `i` is on node `i / gpus_per_node` (one node unless a
    /// multi-node builder says otherwise).
    gpus_per_node: usize,
}

impl Topology {
    /// Assemble and validate a topology from devices and bidirectional or directed links.
    /// Every GPU must reach every other GPU.
    pub fn from_parts(
        name: impl Into<String>,
        devices: Vec<Device>,
        links: Vec<(String, String, Link)>,
    ) -> Result<Topology, TopologyError> {
        let mut graph = DiGraph::with_capacity(devices.len(), links.len());
        let mut by_name = std::collections::HashMap::with_capacity(devices.len());
        let mut gpus = Vec::new();
        for d in devices {
            if by_name.contains_key(&d.name) {
                return Err(TopologyError::DuplicateDevice { name: d.name });
            }
            let kind = d.kind;
            let name = d.name.clone();
            let idx = graph.add_node(d);
            if kind == DeviceKind::Gpu {
                gpus.push(idx);
            }
            by_name.insert(name, idx);
        }
        for (index, (a, b, link)) in links.into_iter().enumerate() {
            let lookup = |n: &String| {
                by_name
                    .get(n)
                    .copied()
                    .ok_or_else(|| TopologyError::UnknownDevice {
                        index,
                        name: n.clone(),
                    })
            };
            let (ia, ib) = (lookup(&a)?, lookup(&b)?);
            if ia == ib {
                return Err(TopologyError::SelfLink { index, name: a });
            }
            let label = format!("{a}->{b}");
            check_link(&label, &link)?;
            graph.add_edge(ia, ib, link);
        }
        let topo = Topology {
            name: name.into(),
            graph,
            gpus,
            rotation: None,
            gpus_per_node: 0,
        };
        topo.check_connected()?;
        Ok(topo)
    }

    fn check_connected(&self) -> Result<(), TopologyError> {
        let Some(&g0) = self.gpus.first() else {
            return Err(TopologyError::NoGpu);
        };
        for reverse in [false, true] {
            let seen = self.reachable(g0, reverse);
            if let Some(&g) = self.gpus.iter().find(|g| !seen[g.index()]) {
                let (from, to) = if reverse { (g, g0) } else { (g0, g) };
                return Err(TopologyError::Disconnected {
                    from: self.graph[from].name.clone(),
                    to: self.graph[to].name.clone(),
                });
            }
        }
        Ok(())
    }

    fn reachable(&self, start: NodeIndex, reverse: bool) -> Vec<bool> {
        let dir = if reverse {
            petgraph::Direction::Incoming
        } else {
            petgraph::Direction::Outgoing
        };
        let mut seen = vec![false; self.graph.node_count()];
        let mut queue = VecDeque::from([start]);
        seen[start.index()] = true;
        while let Some(n) = queue.pop_front() {
            for e in self.graph.edges_directed(n, dir) {
                let m = if reverse { e.source() } else { e.target() };
                if !seen[m.index()] {
                    seen[m.index()] = true;
                    queue.push_back(m);
                }
            }
        }
        seen
    }

    pub fn gpu_count(&self) -> usize {
        self.gpus.len()
    }

    /// GPUs per node (node `k` holds GPUs `k·G .. (k+1)·G`); the whole topology for a
    /// one-node machine.
    pub fn gpus_per_node(&self) -> usize {
        if self.gpus_per_node == 0 {
            self.gpus.len()
        } else {
            self.gpus_per_node
        }
    }

    /// Nodes of [`Topology::gpus_per_node`] GPUs each.
    pub fn node_count(&self) -> usize {
        self.gpus.len().div_ceil(self.gpus_per_node().max(1))
    }

    /// The node of GPU `gpu`.
    pub fn node_of(&self, gpu: usize) -> usize {
        gpu / self.gpus_per_node().max(1)
    }

    /// Record that GPUs come in nodes of `g` (a multi-node builder).
    pub(crate) fn with_nodes(mut self, g: usize) -> Topology {
        self.gpus_per_node = g;
        self
    }

    /// NICs of the whole topology divided by its nodes (0 for a machine without NICs).
    pub fn nics_per_node(&self) -> usize {
        let nics = self
            .graph
            .node_weights()
            .filter(|d| d.kind == DeviceKind::Nic)
            .count();
        nics / self.node_count().max(1)
    }

    pub fn gpu_node(&self, gpu: usize) -> NodeIndex {
        self.gpus[gpu]
    }

    pub fn link_count(&self) -> usize {
        self.graph.edge_count()
    }

    pub fn link(&self, id: usize) -> Link {
        self.graph[EdgeIndex::new(id)]
    }

    /// `"a->b"` for link `id`.
    pub fn link_name(&self, id: usize) -> String {
        let (a, b) = self
            .graph
            .edge_endpoints(EdgeIndex::new(id))
            .expect("link id from this topology");
        format!("{}->{}", self.graph[a].name, self.graph[b].name)
    }

    pub fn device(&self, n: NodeIndex) -> &Device {
        &self.graph[n]
    }

    pub fn graph(&self) -> &DiGraph<Device, Link> {
        &self.graph
    }

    /// Fail unless the topology can host `ranks` ranks.
    pub fn require_gpus(&self, ranks: usize) -> Result<(), TopologyError> {
        if ranks > self.gpus.len() {
            return Err(TopologyError::TooFewGpus {
                have: self.gpus.len(),
                need: ranks,
            });
        }
        Ok(())
    }

    /// Counts of each device kind, in `DeviceKind::ALL` order (for `list` and reports).
    pub fn device_counts(&self) -> Vec<(DeviceKind, usize)> {
        DeviceKind::ALL
            .into_iter()
            .map(|k| (k, self.graph.node_weights().filter(|d| d.kind == k).count()))
            .filter(|(_, c)| *c > 0)
            .collect()
    }
}

fn check_link(label: &str, link: &Link) -> Result<(), TopologyError> {
    if link.bandwidth.is_nan() || link.bandwidth <= 0.0 {
        return Err(TopologyError::BadBandwidth {
            link: label.to_string(),
            value: link.bandwidth / 1e9,
        });
    }
    if !link.latency.is_finite() || link.latency < 0.0 {
        return Err(TopologyError::BadLatency {
            link: label.to_string(),
            value: link.latency * 1e6,
        });
    }
    Ok(())
}

impl fmt::Display for Topology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .device_counts()
            .into_iter()
            .map(|(k, c)| format!("{c} {}", k.name()))
            .collect();
        write!(
            f,
            "{} ({}, {} directed links)",
            self.name,
            parts.join(", "),
            self.link_count()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(kind: DeviceKind, name: &str) -> Device {
        Device {
            kind,
            name: name.into(),
        }
    }
    const L: Link = Link {
        bandwidth: 1e9,
        latency: 1e-6,
    };

    #[test]
    fn disconnected_is_an_error_naming_both_ends() {
        let err = Topology::from_parts(
            "t",
            vec![dev(DeviceKind::Gpu, "a"), dev(DeviceKind::Gpu, "b")],
            vec![("a".into(), "b".into(), L)],
        )
        .unwrap_err();
        assert_eq!(
            err,
            TopologyError::Disconnected {
                from: "b".into(),
                to: "a".into()
            }
        );
    }

    #[test]
    fn bad_links_are_rejected() {
        let devs = || vec![dev(DeviceKind::Gpu, "a"), dev(DeviceKind::Gpu, "b")];
        let e = Topology::from_parts("t", devs(), vec![("a".into(), "c".into(), L)]).unwrap_err();
        assert!(matches!(e, TopologyError::UnknownDevice { ref name, .. } if name == "c"));
        let e = Topology::from_parts("t", devs(), vec![("a".into(), "a".into(), L)]).unwrap_err();
        assert!(matches!(e, TopologyError::SelfLink { .. }));
        let zero = Link {
            bandwidth: 0.0,
            latency: 0.0,
        };
        let e =
            Topology::from_parts("t", devs(), vec![("a".into(), "b".into(), zero)]).unwrap_err();
        assert!(matches!(e, TopologyError::BadBandwidth { .. }));
    }
}
