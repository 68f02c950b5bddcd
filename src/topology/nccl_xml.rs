//! Import of the topology XML that NCCL writes with `NCCL_TOPO_DUMP_FILE`.
//!
//! The XML nests `<cpu>` (NUMA nodes) → `<pci>` (bridges, switches, devices) → `<gpu>`
//! with `<nvlink>` children, and `<nic>` → `<net>`. It becomes a [`Topology`]: GPUs named
//! `gpu{dev}` (rank r runs on the GPU with the r-th smallest `dev`), one `nvswitch` when
//! any NVLink targets an NVSwitch, PCIe switches `pci{busid}`, CPUs `cpu{numaid}`, NICs
//! `nic-{name}`, each link in both directions. Bandwidths follow NCCL's own rules
//! (`src/graph/topo.cc`, `topo.h`): an NVLink carries 18/20/20/12/20.6/40.1 GB/s per link
//! for SM 6x/7x/80/86/90/100 times its `count`; a PCIe link `width × speed × r / 80` GB/s
//! (r = 6 for 2.5 and 5 GT/s, 7.5 from 8 GT/s); a NIC `speed` Mb/s / 8000; CPU sockets are
//! joined pairwise at NCCL's inter-socket figures (Intel 10 GB/s, Sapphire Rapids or later
//! 22, AMD 16). Link latencies are not in the XML; they are assumptions: 0.5 µs per NVLink
//! or PCIe hop, 1 µs across sockets, 2 µs for a NIC.

use super::{Device, DeviceKind, Link, Topology, TopologyError};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum NcclXmlError {
    #[error("{file}: malformed XML: {message}")]
    Syntax { file: String, message: String },
    #[error("{file}: the root element is <{found}>, expected <system>")]
    Root { file: String, found: String },
    #[error(
        "{file}: line {line}: elements nested deeper than {MAX_DEPTH} levels (NCCL's dumps nest a handful: system, cpu, pci switches, gpu, nvlink)"
    )]
    TooDeep { file: String, line: u32 },
    #[error("{file}: line {line}: <{element}> lacks the attribute `{attr}`")]
    Missing {
        file: String,
        line: u32,
        element: String,
        attr: &'static str,
    },
    #[error("{file}: line {line}: <{element} {attr}=\"{value}\">: {why}")]
    BadValue {
        file: String,
        line: u32,
        element: String,
        attr: &'static str,
        value: String,
        why: &'static str,
    },
    #[error("{file}: line {line}: <{element}> must sit in the {within}")]
    Misplaced {
        file: String,
        line: u32,
        element: String,
        within: &'static str,
    },
    #[error("{file}: {source}")]
    Topology {
        file: String,
        #[source]
        source: TopologyError,
    },
}

const NVLINK_LAT: f64 = 0.5e-6;
const PCI_LAT: f64 = 0.5e-6;
const SOCKET_LAT: f64 = 1e-6;
const NIC_LAT: f64 = 2e-6;
const NVSWITCH_CLASS: &str = "0x068000";

struct Builder<'a> {
    file: &'a str,
    text: &'a str,
    devices: Vec<Device>,
    links: Vec<(String, String, Link)>,
    /// (gpu dev, name) for ordering.
    gpus: Vec<(u64, String)>,
    /// busid (lower case) of each GPU's PCI device → GPU name.
    gpu_bus: Vec<(String, String)>,
    /// (from gpu, target busid, tclass, GB/s), resolved once every GPU is known.
    nvlinks: Vec<(String, String, String, f64, u32)>,
    cpus: Vec<(String, f64)>,
    nics: usize,
}

type R<T> = Result<T, NcclXmlError>;

impl<'a> Builder<'a> {
    fn line(&self, n: roxmltree::Node) -> u32 {
        self.text[..n.range().start]
            .bytes()
            .filter(|&b| b == b'\n')
            .count() as u32
            + 1
    }

    fn attr(&self, n: roxmltree::Node<'a, 'a>, a: &'static str) -> R<&'a str> {
        n.attribute(a).ok_or_else(|| NcclXmlError::Missing {
            file: self.file.into(),
            line: self.line(n),
            element: n.tag_name().name().into(),
            attr: a,
        })
    }

    fn bad(&self, n: roxmltree::Node, a: &'static str, v: &str, why: &'static str) -> NcclXmlError {
        NcclXmlError::BadValue {
            file: self.file.into(),
            line: self.line(n),
            element: n.tag_name().name().into(),
            attr: a,
            value: v.into(),
            why,
        }
    }

    fn number(&self, n: roxmltree::Node<'a, 'a>, a: &'static str) -> R<f64> {
        let v = self.attr(n, a)?;
        let x: f64 = v
            .trim()
            .parse()
            .map_err(|_| self.bad(n, a, v, "not a number"))?;
        if !(x.is_finite() && x >= 0.0) {
            return Err(self.bad(n, a, v, "must be finite and ≥ 0"));
        }
        Ok(x)
    }

    fn both(&mut self, a: &str, b: &str, gbps: f64, latency: f64) {
        let l = Link {
            bandwidth: gbps * 1e9,
            latency,
        };
        self.links.push((a.into(), b.into(), l));
        self.links.push((b.into(), a.into(), l));
    }

    fn device(&mut self, kind: DeviceKind, name: String) {
        self.devices.push(Device { kind, name });
    }

    /// A `<pci>` element's bandwidth in GB/s; `parent` when it states no speed.
    fn pci_bw(&self, n: roxmltree::Node<'a, 'a>, parent: f64) -> R<f64> {
        let (Some(speed), Some(width)) = (n.attribute("link_speed"), n.attribute("link_width"))
        else {
            return Ok(parent);
        };
        let gts: f64 = speed
            .split_whitespace()
            .next()
            .and_then(|s| s.parse().ok())
            .filter(|x: &f64| x.is_finite() && *x > 0.0)
            .ok_or_else(|| self.bad(n, "link_speed", speed, "expected like `16.0 GT/s PCIe`"))?;
        let w: f64 = width
            .trim()
            .parse()
            .ok()
            .filter(|x: &f64| x.is_finite() && *x > 0.0 && *x <= 64.0)
            .ok_or_else(|| self.bad(n, "link_width", width, "expected a lane count 1..64"))?;
        let r = if gts < 8.0 { 6.0 } else { 7.5 };
        Ok(w * gts * r / 80.0)
    }

    fn pci(&mut self, n: roxmltree::Node<'a, 'a>, parent: &str, parent_bw: f64) -> R<()> {
        let busid = self.attr(n, "busid")?.to_ascii_lowercase();
        let bw = self.pci_bw(n, parent_bw)?;
        if let Some(g) = n.children().find(|c| c.has_tag_name("gpu")) {
            let dev = self.number(g, "dev")?;
            let name = format!("gpu{dev}");
            if self.gpus.iter().any(|(_, n)| *n == name) {
                return Err(self.bad(g, "dev", &dev.to_string(), "a second GPU with this dev"));
            }
            let sm = self.number(g, "sm")?;
            let per_link = match sm as u32 {
                60..=69 => 18.0,
                70..=79 => 20.0,
                86..=89 => 12.0,
                80..=85 => 20.0,
                90..=99 => 20.6,
                100.. => 40.1,
                _ => 18.0,
            };
            self.device(DeviceKind::Gpu, name.clone());
            self.gpus.push((dev as u64, name.clone()));
            self.gpu_bus.push((busid.clone(), name.clone()));
            self.both(parent, &name, bw, PCI_LAT);
            for l in g.children().filter(|c| c.has_tag_name("nvlink")) {
                let target = self.attr(l, "target")?.to_ascii_lowercase();
                let count = self.number(l, "count")?;
                if count == 0.0 || count > 64.0 {
                    return Err(self.bad(l, "count", &count.to_string(), "expected 1..64 links"));
                }
                let tclass = l.attribute("tclass").unwrap_or("").to_ascii_lowercase();
                let line = self.line(l);
                self.nvlinks
                    .push((name.clone(), target, tclass, per_link * count, line));
            }
            return Ok(());
        }
        if let Some(nic) = n.children().find(|c| c.has_tag_name("nic")) {
            return self.nic(nic, parent, bw);
        }
        if n.attribute("class").map(str::to_ascii_lowercase).as_deref() == Some(NVSWITCH_CLASS) {
            // NVSwitch PCI functions carry management traffic only.
            return Ok(());
        }
        let children: Vec<_> = n.children().filter(|c| c.has_tag_name("pci")).collect();
        if children.is_empty() {
            return Ok(()); // a leaf device NCCL does not use (storage, another NIC port)
        }
        let name = format!("pci{busid}");
        self.device(DeviceKind::PcieSwitch, name.clone());
        self.both(parent, &name, bw, PCI_LAT);
        for c in children {
            self.pci(c, &name, bw)?;
        }
        Ok(())
    }

    fn nic(&mut self, n: roxmltree::Node<'a, 'a>, parent: &str, bw: f64) -> R<()> {
        for net in n.children().filter(|c| c.has_tag_name("net")) {
            let name = format!("nic-{}", self.attr(net, "name")?);
            if self.devices.iter().any(|d| d.name == name) {
                continue; // a second port of one NIC
            }
            let speed = self.number(net, "speed")? / 8000.0;
            if speed == 0.0 {
                return Err(self.bad(net, "speed", "0", "a NIC of zero speed"));
            }
            self.device(DeviceKind::Nic, name.clone());
            self.both(parent, &name, speed.min(bw), NIC_LAT);
            self.nics += 1;
        }
        Ok(())
    }
}

/// The deepest element nesting a dump may have (real ones: under 10).
pub const MAX_DEPTH: usize = 64;

/// The topology of the NCCL topology dump `text` (`file` names it in errors).
pub fn from_nccl_xml(file: &str, name: &str, text: &str) -> Result<Topology, NcclXmlError> {
    let doc = roxmltree::Document::parse(text).map_err(|e| NcclXmlError::Syntax {
        file: file.into(),
        message: e.to_string(),
    })?;
    // The importer walks PCI trees recursively: bound the nesting first (iteratively),
    // so a hostile dump is an error, not a stack overflow.
    // Depth per node, in document order (a parent before its children): no recursion.
    let mut depth = vec![0usize; doc.descendants().count() + 1];
    for n in doc.descendants() {
        let up = n
            .parent()
            .and_then(|p| depth.get(p.id().get_usize()).copied())
            .unwrap_or(0);
        let d = up + usize::from(n.is_element());
        if d > MAX_DEPTH {
            return Err(NcclXmlError::TooDeep {
                file: file.into(),
                line: doc.text_pos_at(n.range().start).row,
            });
        }
        if let Some(x) = depth.get_mut(n.id().get_usize()) {
            *x = d;
        }
    }
    let root = doc.root_element();
    if !root.has_tag_name("system") {
        return Err(NcclXmlError::Root {
            file: file.into(),
            found: root.tag_name().name().into(),
        });
    }
    let mut b = Builder {
        file,
        text,
        devices: Vec::new(),
        links: Vec::new(),
        gpus: Vec::new(),
        gpu_bus: Vec::new(),
        nvlinks: Vec::new(),
        cpus: Vec::new(),
        nics: 0,
    };
    for cpu in root.children().filter(|c| c.has_tag_name("cpu")) {
        let id = b.attr(cpu, "numaid")?;
        let cname = format!("cpu{id}");
        if b.cpus.iter().any(|(n, _)| *n == cname) {
            return Err(b.bad(cpu, "numaid", id, "a second CPU with this numaid"));
        }
        let vendor = cpu.attribute("vendor").unwrap_or("");
        let model: u32 = cpu
            .attribute("modelid")
            .and_then(|m| m.trim().parse().ok())
            .unwrap_or(0);
        let qpi = if vendor.contains("AMD") {
            16.0
        } else if model >= 0x8f {
            22.0
        } else {
            10.0
        };
        b.device(DeviceKind::Cpu, cname.clone());
        b.cpus.push((cname.clone(), qpi));
        for c in cpu.children() {
            if c.has_tag_name("pci") {
                b.pci(c, &cname, 24.0)?;
            } else if c.has_tag_name("nic") {
                b.nic(c, &cname, f64::INFINITY)?;
            } else if c.has_tag_name("gpu") {
                return Err(NcclXmlError::Misplaced {
                    file: file.into(),
                    line: b.line(c),
                    element: "gpu".into(),
                    within: "<pci> element of its PCI device",
                });
            }
        }
    }
    // Sockets pairwise, at the slower side's figure.
    let cpus = b.cpus.clone();
    for i in 0..cpus.len() {
        for j in i + 1..cpus.len() {
            b.both(&cpus[i].0, &cpus[j].0, cpus[i].1.min(cpus[j].1), SOCKET_LAT);
        }
    }
    // NVLinks: real dumps list one <nvlink> per remote device (an HGX H100 GPU has four,
    // one per NVSwitch chip, with counts 4/5/5/4), so a GPU's links to NVSwitches are
    // summed into one link to the (one, non-blocking) switch, and repeated entries to one
    // peer GPU into one link. A target NCCL could not see (`fffffff:ffff:ff`, in VMs) or
    // one of no stated class is an NVSwitch, as NCCL assumes (`xml.cc`).
    let nvl = std::mem::take(&mut b.nvlinks);
    let mut to_switch: Vec<(String, f64)> = Vec::new();
    let mut to_gpu: Vec<(String, String, f64)> = Vec::new();
    for (gpu, target, tclass, gbps, line) in nvl {
        let peer = b
            .gpu_bus
            .iter()
            .find(|(bus, _)| *bus == target)
            .map(|(_, p)| p.clone());
        let hidden = target.starts_with("fffffff");
        if tclass == NVSWITCH_CLASS || hidden || (tclass.is_empty() && peer.is_none()) {
            match to_switch.iter_mut().find(|(g, _)| *g == gpu) {
                Some(e) => e.1 += gbps,
                None => to_switch.push((gpu, gbps)),
            }
        } else if let Some(peer) = peer {
            match to_gpu.iter_mut().find(|(g, p, _)| *g == gpu && *p == peer) {
                Some(e) => e.2 += gbps,
                None => to_gpu.push((gpu, peer, gbps)),
            }
        } else if tclass.starts_with("0x03") {
            return Err(NcclXmlError::BadValue {
                file: file.into(),
                line,
                element: "nvlink".into(),
                attr: "target",
                value: target,
                why: "no GPU has this PCI bus id",
            });
        }
        // An NVLink to a CPU (POWER9/Grace) is left out: GPU traffic does not route there.
    }
    if !to_switch.is_empty() {
        b.device(DeviceKind::NvSwitch, "nvswitch".into());
    }
    // NVLinks go first in the graph, so that where a PCIe path is as short (two GPUs
    // under one PCIe switch) the router's tie-break takes NVLink, as NCCL does.
    let pcie = std::mem::take(&mut b.links);
    for (gpu, gbps) in to_switch {
        b.both(&gpu, "nvswitch", gbps, NVLINK_LAT);
    }
    for (gpu, peer, gbps) in to_gpu {
        b.links.push((
            gpu,
            peer,
            Link {
                bandwidth: gbps * 1e9,
                latency: NVLINK_LAT,
            },
        ));
    }
    b.links.extend(pcie);
    // GPUs first, in `dev` order, so that rank r is the r-th GPU.
    let mut order: Vec<(u64, String)> = b.gpus.clone();
    order.sort();
    let mut devices: Vec<Device> = order
        .iter()
        .map(|(_, n)| Device {
            kind: DeviceKind::Gpu,
            name: n.clone(),
        })
        .collect();
    devices.extend(b.devices.into_iter().filter(|d| d.kind != DeviceKind::Gpu));
    Topology::from_parts(name, devices, b.links).map_err(|source| NcclXmlError::Topology {
        file: file.into(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::Router;

    const NVSWITCH: &str = include_str!("../../hardware-profiles/nccl-topo/nvswitch-8.xml");
    const PCIE: &str = include_str!("../../hardware-profiles/nccl-topo/pcie-8.xml");
    const HGX: &str = include_str!("../../hardware-profiles/nccl-topo/hgx-h200-dump.xml");
    const VM: &str = include_str!("../../hardware-profiles/nccl-topo/hgx-h200-vm-dump.xml");

    #[test]
    fn real_dumps_sum_a_gpus_nvlinks_and_see_hidden_switches() {
        // Four <nvlink> entries per GPU (4 + 5 + 5 + 4 links to the four NVSwitch chips)
        // and, in a VM, 18 links to a switch NCCL could not see (`fffffff:ffff:ff`): both
        // are 18 links × 20.6 GB/s to one switch, never a path through the CPUs.
        for (name, xml) in [("hgx", HGX), ("vm", VM)] {
            let t = from_nccl_xml(name, name, xml).unwrap();
            assert_eq!(t.gpu_count(), 8);
            for (a, b) in [(0, 1), (0, 7), (3, 4)] {
                let r = Router::new(&t).route(a, b).unwrap().clone();
                assert_eq!(r.links.len(), 2, "{name}: {a}->{b} via the switch");
                assert!((bottleneck(&t, a, b) - 18.0 * 20.6e9).abs() < 1.0, "{name}");
            }
        }
        // Without a class, an unknown target is a switch too (NCCL's assumption).
        let xml = "<system><cpu numaid=\"0\"><pci busid=\"0:1\"><gpu dev=\"0\" sm=\"90\"><nvlink target=\"0:9\" count=\"9\"/></gpu></pci><pci busid=\"0:2\"><gpu dev=\"1\" sm=\"90\"><nvlink target=\"0:9\" count=\"9\"/></gpu></pci></cpu></system>";
        let t = from_nccl_xml("x", "x", xml).unwrap();
        assert!((bottleneck(&t, 0, 1) - 9.0 * 20.6e9).abs() < 1.0);
    }

    fn bottleneck(t: &Topology, a: usize, b: usize) -> f64 {
        let r = Router::new(t).route(a, b).unwrap().clone();
        r.links
            .iter()
            .map(|&l| t.link(l as usize).bandwidth)
            .fold(f64::INFINITY, f64::min)
    }

    #[test]
    fn nvswitch_node_sample() {
        let t = from_nccl_xml("nvswitch-8.xml", "n", NVSWITCH).unwrap();
        assert_eq!(t.gpu_count(), 8);
        let counts = t.device_counts();
        let count = |k| counts.iter().find(|(d, _)| *d == k).map_or(0, |c| c.1);
        assert_eq!(count(DeviceKind::NvSwitch), 1);
        assert_eq!(count(DeviceKind::Cpu), 2);
        assert_eq!(count(DeviceKind::Nic), 8);
        assert_eq!(count(DeviceKind::PcieSwitch), 8);
        // GPU to GPU goes through NVSwitch at 18 links × 20.6 GB/s (NCCL's SM90 figure),
        // also across sockets.
        for (a, b) in [(0, 1), (0, 7), (3, 4)] {
            let r = Router::new(&t).route(a, b).unwrap().clone();
            assert_eq!(r.links.len(), 2, "{a}->{b} via the switch");
            assert!((bottleneck(&t, a, b) - 18.0 * 20.6e9).abs() < 1.0);
        }
        assert_eq!(t.device(t.gpu_node(5)).name, "gpu5");
    }

    #[test]
    fn pcie_node_sample_is_bottlenecked_by_the_socket_link() {
        let t = from_nccl_xml("pcie-8.xml", "p", PCIE).unwrap();
        assert_eq!(t.gpu_count(), 8);
        // Same switch: Gen4 x16 = 16 × 16 × 7.5 / 80 = 24 GB/s.
        assert!((bottleneck(&t, 0, 1) - 24e9).abs() < 1.0);
        // Across the AMD sockets: NCCL's 16 GB/s.
        assert!((bottleneck(&t, 0, 4) - 16e9).abs() < 1.0);
    }

    /// A dump nested past any real one is an error naming the line, not a stack
    /// overflow of the recursive PCI walk (20 000 nested switches overflowed it).
    #[test]
    fn deeply_nested_dumps_are_refused() {
        let open = r#"<pci busid="0000:01:00.0" class="0x060400" link_speed="16.0 GT/s PCIe" link_width="16">"#;
        for n in [MAX_DEPTH, 20_000] {
            let xml = format!(
                r#"<system version="1"><cpu numaid="0" affinity="f" arch="x86_64" vendor="GenuineIntel">{}{}</cpu></system>"#,
                open.repeat(n),
                "</pci>".repeat(n)
            );
            let e = from_nccl_xml("deep.xml", "deep", &xml).unwrap_err();
            assert!(
                matches!(e, NcclXmlError::TooDeep { line: 1, .. }),
                "{n}: {e}"
            );
        }
    }

    #[test]
    fn malformed_and_inconsistent_xml_are_clear_errors() {
        let cases: [(&str, &[&str]); 6] = [
            ("<system><cpu numaid=\"0\">", &["x.xml", "malformed XML"]),
            ("<topology/>", &["<topology>", "expected <system>"]),
            (
                "<system><cpu numaid=\"0\"><pci busid=\"0:1\" link_speed=\"fast\" link_width=\"16\"><gpu dev=\"0\" sm=\"90\"/></pci></cpu></system>",
                &["line 1", "link_speed=\"fast\""],
            ),
            (
                "<system><cpu numaid=\"0\"><pci busid=\"0:1\"><gpu sm=\"90\"/></pci></cpu></system>",
                &["<gpu>", "`dev`"],
            ),
            (
                "<system><cpu numaid=\"0\"><pci busid=\"0:1\"><gpu dev=\"0\" sm=\"90\">\n<nvlink target=\"0:9\" count=\"4\" tclass=\"0x030200\"/></gpu></pci></cpu></system>",
                &["line 2", "no GPU has this PCI bus id"],
            ),
            ("<system><cpu numaid=\"0\"/></system>", &["x.xml", "GPU"]),
        ];
        for (xml, says) in cases {
            let e = from_nccl_xml("x.xml", "x", xml).unwrap_err().to_string();
            for s in says {
                assert!(e.contains(s), "`{s}` not in `{e}`");
            }
        }
    }
}
