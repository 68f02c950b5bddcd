//! Builders for the common shapes, so a hardware profile names a shape and a few numbers.

use super::{Device, DeviceKind, Link, Rotation, Topology, TopologyError};

/// Bandwidth (bytes/s, per direction) and latency (s) of one kind of link.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkSpec {
    pub bandwidth: f64,
    pub latency: f64,
}

impl LinkSpec {
    fn link(self) -> Link {
        Link {
            bandwidth: self.bandwidth,
            latency: self.latency,
        }
    }
}

fn gpu_devices(n: u64) -> Vec<Device> {
    (0..n)
        .map(|i| Device {
            kind: DeviceKind::Gpu,
            name: format!("gpu{i}"),
        })
        .collect()
}

/// GPU `i` to GPU `i + 1` of `n` GPUs that are the only devices.
fn turn(n: u64) -> Rotation {
    Rotation {
        gpu_shift: 1,
        perm: (0..n as u32).map(|i| (i + 1) % n as u32).collect(),
    }
}

fn both(a: &str, b: &str, l: LinkSpec, out: &mut Vec<(String, String, Link)>) {
    out.push((a.to_string(), b.to_string(), l.link()));
    out.push((b.to_string(), a.to_string(), l.link()));
}

fn at_least(what: &'static str, min: u64, value: u64) -> Result<(), TopologyError> {
    if value < min {
        return Err(TopologyError::BadCount { what, min, value });
    }
    Ok(())
}

/// The largest topology a builder makes: 2^21 devices, 2^22 directed links (a few hundred
/// MB at most). Larger asks are an error, not an allocation failure.
pub const MAX_DEVICES: u64 = 1 << 21;
pub const MAX_LINKS: u64 = 1 << 22;

/// Refuse a shape of `devices` devices and `links` directed links (either `None` when the
/// count overflows u64) beyond the limits.
fn within(devices: Option<u64>, links: Option<u64>) -> Result<(), TopologyError> {
    for (what, n, max) in [
        ("devices", devices, MAX_DEVICES),
        ("directed links", links, MAX_LINKS),
    ] {
        match n {
            Some(v) if v <= max => {}
            _ => {
                return Err(TopologyError::TooLarge {
                    what,
                    max,
                    value: n.map_or_else(|| "more than 2^64".into(), |v| v.to_string()),
                });
            }
        }
    }
    Ok(())
}

impl Topology {
    /// `gpus` GPUs, each with one port of `link` bandwidth per direction into one logical
    /// NVSwitch fabric (the 4 NVSwitch chips of an HGX board act as one non-blocking
    /// switch). A GPU-to-GPU message crosses two links.
    pub fn nvswitch(name: &str, gpus: u64, link: LinkSpec) -> Result<Topology, TopologyError> {
        at_least("gpus", 1, gpus)?;
        within(gpus.checked_add(1), gpus.checked_mul(2))?;
        let mut devices = gpu_devices(gpus);
        devices.push(Device {
            kind: DeviceKind::NvSwitch,
            name: "nvswitch".into(),
        });
        let mut links = Vec::with_capacity(2 * gpus as usize);
        for i in 0..gpus {
            both(&format!("gpu{i}"), "nvswitch", link, &mut links);
        }
        // GPUs renumbered by one; the switch stays.
        let perm = (0..gpus as u32)
            .map(|i| (i + 1) % gpus as u32)
            .chain([gpus as u32])
            .collect();
        Ok(Topology::from_parts(name, devices, links)?
            .with_rotation(Rotation { gpu_shift: 1, perm }))
    }

    /// `n` GPUs in a ring, GPU i joined to GPU i+1 (both directions) by its own link.
    pub fn ring(name: &str, n: u64, link: LinkSpec) -> Result<Topology, TopologyError> {
        at_least("gpus", 1, n)?;
        within(Some(n), n.checked_mul(2))?;
        let devices = gpu_devices(n);
        let mut links = Vec::with_capacity(2 * n as usize);
        if n == 2 {
            both("gpu0", "gpu1", link, &mut links);
        } else if n > 2 {
            for i in 0..n {
                both(
                    &format!("gpu{i}"),
                    &format!("gpu{}", (i + 1) % n),
                    link,
                    &mut links,
                );
            }
        }
        Ok(Topology::from_parts(name, devices, links)?.with_rotation(turn(n)))
    }

    /// `n` GPUs, every pair joined by its own link (HCCS-style full mesh).
    pub fn full_mesh(name: &str, n: u64, link: LinkSpec) -> Result<Topology, TopologyError> {
        at_least("gpus", 1, n)?;
        within(Some(n), n.checked_mul(n - 1))?;
        let devices = gpu_devices(n);
        let mut links = Vec::new();
        for i in 0..n {
            for j in i + 1..n {
                both(&format!("gpu{i}"), &format!("gpu{j}"), link, &mut links);
            }
        }
        Ok(Topology::from_parts(name, devices, links)?.with_rotation(turn(n)))
    }

    /// A PCIe tree: `spec.sockets` CPUs joined pairwise by socket links (UPI/xGMI), each
    /// with `spec.switches_per_socket` PCIe switches, GPUs spread evenly over the switches.
    /// GPU↔switch, switch↔CPU (uplink) and CPU↔CPU are separate, shareable links.
    pub fn pcie_tree(name: &str, spec: &PcieTreeSpec) -> Result<Topology, TopologyError> {
        at_least("gpus", 1, spec.gpus)?;
        at_least("sockets", 1, spec.sockets)?;
        at_least("switches_per_socket", 1, spec.switches_per_socket)?;
        let switches = spec.sockets.checked_mul(spec.switches_per_socket);
        let devices = switches
            .and_then(|w| w.checked_add(spec.gpus))
            .and_then(|d| d.checked_add(spec.sockets));
        let links = switches
            .and_then(|w| w.checked_add(spec.gpus))
            .zip(spec.sockets.checked_mul(spec.sockets - 1))
            .and_then(|(a, b)| a.checked_mul(2)?.checked_add(b));
        within(devices, links)?;
        let switches = spec.sockets * spec.switches_per_socket;
        let mut devices = gpu_devices(spec.gpus);
        let mut links = Vec::new();
        for s in 0..spec.sockets {
            devices.push(Device {
                kind: DeviceKind::Cpu,
                name: format!("cpu{s}"),
            });
        }
        for w in 0..switches {
            let sw = format!("pcie{w}");
            devices.push(Device {
                kind: DeviceKind::PcieSwitch,
                name: sw.clone(),
            });
            both(
                &sw,
                &format!("cpu{}", w / spec.switches_per_socket),
                spec.uplink,
                &mut links,
            );
        }
        for g in 0..spec.gpus {
            // Contiguous blocks: GPUs 0..k on switch 0, and so on.
            let w = g * switches / spec.gpus;
            both(
                &format!("gpu{g}"),
                &format!("pcie{w}"),
                spec.gpu_link,
                &mut links,
            );
        }
        for a in 0..spec.sockets {
            for b in a + 1..spec.sockets {
                both(
                    &format!("cpu{a}"),
                    &format!("cpu{b}"),
                    spec.socket_link,
                    &mut links,
                );
            }
        }
        Topology::from_parts(name, devices, links)
    }

    /// Nodes of `gpus_per_node` GPUs on an NVSwitch each; GPU i of every node has its own
    /// NIC on rail i; each rail's NICs go to leaf switches of `nodes_per_leaf` nodes, and
    /// every leaf has one aggregate up-link (its down-link capacity over the
    /// oversubscription) to one logical, non-blocking spine. GPU `n·G + i` is GPU i of
    /// node n. Same-rail traffic between nodes under one leaf stays below the spine.
    pub fn rail_fat_tree(name: &str, s: &RailFatTreeSpec) -> Result<Topology, TopologyError> {
        at_least("nodes", 1, s.nodes)?;
        at_least("gpus_per_node", 1, s.gpus_per_node)?;
        at_least("nodes_per_leaf", 1, s.nodes_per_leaf)?;
        if !(s.oversubscription.is_finite() && s.oversubscription >= 1.0) {
            return Err(TopologyError::BadOversubscription {
                value: s.oversubscription,
            });
        }
        let (n, g) = (s.nodes, s.gpus_per_node);
        let leaves = n.div_ceil(s.nodes_per_leaf);
        // Per node: g GPUs, g NICs, a switch, 6 directed links per GPU; per rail and leaf:
        // a leaf and 2 links to the spine.
        let gpus = n.checked_mul(g);
        let rail_leaves = g.checked_mul(leaves);
        within(
            gpus.zip(rail_leaves).and_then(|(x, l)| {
                x.checked_mul(2)?
                    .checked_add(n)?
                    .checked_add(l)?
                    .checked_add(1)
            }),
            gpus.zip(rail_leaves)
                .and_then(|(x, l)| x.checked_mul(6)?.checked_add(l.checked_mul(2)?)),
        )?;
        let mut devices = Vec::new();
        let mut links = Vec::new();
        for node in 0..n {
            for i in 0..g {
                devices.push(Device {
                    kind: DeviceKind::Gpu,
                    name: format!("n{node}.gpu{i}"),
                });
            }
        }
        for node in 0..n {
            let sw = format!("n{node}.nvswitch");
            devices.push(Device {
                kind: DeviceKind::NvSwitch,
                name: sw.clone(),
            });
            for i in 0..g {
                let gpu = format!("n{node}.gpu{i}");
                let nic = format!("n{node}.nic{i}");
                devices.push(Device {
                    kind: DeviceKind::Nic,
                    name: nic.clone(),
                });
                both(&gpu, &sw, s.nvlink, &mut links);
                both(&gpu, &nic, s.nic, &mut links);
                let leaf = format!("rail{i}.leaf{}", node / s.nodes_per_leaf);
                both(&nic, &leaf, s.nic, &mut links);
            }
        }
        devices.push(Device {
            kind: DeviceKind::NetSwitch,
            name: "spine".into(),
        });
        for i in 0..g {
            for l in 0..leaves {
                let leaf = format!("rail{i}.leaf{l}");
                devices.push(Device {
                    kind: DeviceKind::NetSwitch,
                    name: leaf.clone(),
                });
                let under = s.nodes_per_leaf.min(n - l * s.nodes_per_leaf);
                let up = LinkSpec {
                    bandwidth: under as f64 * s.nic.bandwidth / s.oversubscription,
                    latency: s.spine_latency,
                };
                both(&leaf, "spine", up, &mut links);
            }
        }
        let topo = Topology::from_parts(name, devices, links)?.with_nodes(g as usize);
        if leaves == 1 {
            // Every node under one leaf per rail: moving every node by one (leaves and
            // spine fixed) is a symmetry.
            let mut perm = Vec::with_capacity((n * (2 * g + 1) + 1 + g) as usize);
            for node in 0..n {
                for i in 0..g {
                    perm.push((((node + 1) % n) * g + i) as u32);
                }
            }
            let base = n * g;
            for node in 0..n {
                for j in 0..=g {
                    perm.push((base + ((node + 1) % n) * (g + 1) + j) as u32);
                }
            }
            let rest = base + n * (g + 1);
            perm.extend((rest..rest + 1 + g).map(|d| d as u32));
            return Ok(topo.with_rotation(Rotation {
                gpu_shift: g as u32,
                perm,
            }));
        }
        if n % s.nodes_per_leaf != 0 {
            return Ok(topo);
        }
        // Whole leaf groups: moving every node by one group (and each rail's leaf l to
        // l + 1) is a symmetry; the spine stays. Device indices follow the order above.
        let npl = s.nodes_per_leaf;
        let node_of = |k: u64| (k + npl) % n;
        let mut perm = Vec::with_capacity((n * (2 * g + 1) + 1 + g * leaves) as usize);
        for node in 0..n {
            for i in 0..g {
                perm.push((node_of(node) * g + i) as u32);
            }
        }
        let base = n * g;
        for node in 0..n {
            for j in 0..=g {
                perm.push((base + node_of(node) * (g + 1) + j) as u32);
            }
        }
        let spine = base + n * (g + 1);
        perm.push(spine as u32);
        for i in 0..g {
            for l in 0..leaves {
                perm.push((spine + 1 + i * leaves + (l + 1) % leaves) as u32);
            }
        }
        Ok(topo.with_rotation(Rotation {
            gpu_shift: (npl * g) as u32,
            perm,
        }))
    }
}

/// Shape and link figures of a rail-optimized fat-tree of NVSwitch nodes.
#[derive(Debug, Clone, PartialEq)]
pub struct RailFatTreeSpec {
    pub nodes: u64,
    pub gpus_per_node: u64,
    /// GPU ↔ the node's NVSwitch fabric.
    pub nvlink: LinkSpec,
    /// GPU ↔ its NIC, and NIC ↔ its rail's leaf switch (one NIC per GPU).
    pub nic: LinkSpec,
    /// Nodes under one leaf switch of each rail.
    pub nodes_per_leaf: u64,
    /// Leaf down-link over up-link capacity (1 = non-blocking).
    pub oversubscription: f64,
    /// Leaf ↔ spine hop latency, seconds.
    pub spine_latency: f64,
}

/// Shape and link figures of a PCIe tree.
#[derive(Debug, Clone, PartialEq)]
pub struct PcieTreeSpec {
    pub gpus: u64,
    pub sockets: u64,
    pub switches_per_socket: u64,
    pub gpu_link: LinkSpec,
    pub uplink: LinkSpec,
    pub socket_link: LinkSpec,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::Router;

    const NV: LinkSpec = LinkSpec {
        bandwidth: 370e9,
        latency: 0.5e-6,
    };

    #[test]
    fn absurd_sizes_are_refused_before_allocating() {
        for t in [
            Topology::nvswitch("n", 1 << 40, NV),
            Topology::ring("r", u64::MAX, NV),
            Topology::full_mesh("m", 100_000, NV),
        ] {
            let e = t.unwrap_err().to_string();
            assert!(e.contains("at most"), "{e}");
        }
        let e = Topology::rail_fat_tree(
            "f",
            &RailFatTreeSpec {
                nodes: u64::MAX / 2,
                gpus_per_node: 8,
                nvlink: NV,
                nic: NV,
                nodes_per_leaf: 1,
                oversubscription: 1.0,
                spine_latency: 0.0,
            },
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("more than 2^64"), "{e}");
        // 100,000 GPUs on a ring is fine.
        assert_eq!(
            Topology::ring("r", 100_000, NV).unwrap().gpu_count(),
            100_000
        );
    }

    #[test]
    fn nvswitch_routes_cross_two_links() {
        let t = Topology::nvswitch("n", 8, NV).unwrap();
        assert_eq!(t.gpu_count(), 8);
        let mut r = Router::new(&t);
        let route = r.route(0, 5).unwrap();
        assert_eq!(route.links.len(), 2);
        assert!((route.latency - 1e-6).abs() < 1e-15);
        assert_eq!(route.bottleneck, 370e9);
    }

    #[test]
    fn ring_takes_the_short_way() {
        let t = Topology::ring("r", 8, NV).unwrap();
        let mut r = Router::new(&t);
        assert_eq!(r.route(0, 1).unwrap().links.len(), 1);
        assert_eq!(r.route(0, 7).unwrap().links.len(), 1);
        assert_eq!(r.route(0, 3).unwrap().links.len(), 3);
        assert_eq!(r.route(0, 5).unwrap().links.len(), 3);
    }

    #[test]
    fn pcie_cross_socket_goes_through_the_socket_link() {
        let g4 = LinkSpec {
            bandwidth: 25e9,
            latency: 1e-6,
        };
        let spec = PcieTreeSpec {
            gpus: 8,
            sockets: 2,
            switches_per_socket: 1,
            gpu_link: g4,
            uplink: g4,
            socket_link: LinkSpec {
                bandwidth: 20e9,
                latency: 1e-6,
            },
        };
        let t = Topology::pcie_tree("p", &spec).unwrap();
        let mut r = Router::new(&t);
        let same = r.route(0, 1).unwrap().clone();
        assert_eq!(same.links.len(), 2);
        let cross = r.route(0, 7).unwrap();
        assert_eq!(cross.links.len(), 5);
        assert_eq!(cross.bottleneck, 20e9);
        let names: Vec<String> = cross
            .links
            .iter()
            .map(|&l| t.link_name(l as usize))
            .collect();
        assert!(names.contains(&"cpu0->cpu1".to_string()), "{names:?}");
    }

    #[test]
    fn full_mesh_is_one_hop() {
        let t = Topology::full_mesh("m", 8, NV).unwrap();
        assert_eq!(t.link_count(), 56);
        let mut r = Router::new(&t);
        assert_eq!(r.route(2, 6).unwrap().links.len(), 1);
    }

    #[test]
    fn rail_fat_tree_routes_same_rail_under_the_leaf_and_tapers_at_the_spine() {
        let nic = LinkSpec {
            bandwidth: 48e9,
            latency: 1e-6,
        };
        let spec = |per_leaf, over| RailFatTreeSpec {
            nodes: 4,
            gpus_per_node: 8,
            nvlink: NV,
            nic,
            nodes_per_leaf: per_leaf,
            oversubscription: over,
            spine_latency: 1e-6,
        };
        let t = Topology::rail_fat_tree("r", &spec(4, 1.0)).unwrap();
        assert_eq!(t.gpu_count(), 32);
        let mut r = Router::new(&t);
        // GPU 0 of node 0 to GPU 0 of node 1: NIC, leaf, NIC.
        assert_eq!(r.route(0, 8).unwrap().links.len(), 4);
        // Inside a node: the NVSwitch.
        assert_eq!(r.route(0, 1).unwrap().links.len(), 2);
        // One node per leaf, 2:1 tapered: same rail crosses the spine at 24 GB/s.
        let t = Topology::rail_fat_tree("r", &spec(1, 2.0)).unwrap();
        let mut r = Router::new(&t);
        let route = r.route(0, 8).unwrap();
        assert_eq!(route.links.len(), 6);
        assert_eq!(route.bottleneck, 24e9);
        assert!(matches!(
            Topology::rail_fat_tree("r", &spec(1, 0.5)),
            Err(TopologyError::BadOversubscription { .. })
        ));
    }

    #[test]
    fn zero_gpus_is_an_error() {
        assert!(matches!(
            Topology::ring("r", 0, NV),
            Err(TopologyError::BadCount { .. })
        ));
    }
}
