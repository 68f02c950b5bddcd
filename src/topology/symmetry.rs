//! Rotational symmetry of a topology, for the symmetric (quotient) simulation.
//!
//! A builder that lays devices out regularly records a **rotation**: a permutation of the
//! devices that moves GPU `i` to GPU `i + shift` (mod the GPU count) and maps every link
//! onto a link of equal bandwidth and latency — a ring turned by one GPU, an NVSwitch
//! node with its GPUs renumbered, a rail-optimised fabric moved by one leaf group of
//! nodes. [`Topology::link_orbits`] checks that the permutation really is an automorphism
//! (so a wrong builder cannot yield a wrong answer, only no symmetry) and returns, for
//! every link, the representative of its orbit under the group the rotation generates,
//! with the factor by which a representative's capacity is scaled in the quotient.
//!
//! Why the scale: the group has `order = gpus / shift` elements and acts freely on
//! flows, so a flow orbit puts `order` flows on the links of each link orbit it crosses.
//! A link orbit of size `o` thus carries `order / o` times the flows of one of its links
//! per crossing: in the quotient, where every link of the orbit is its representative,
//! the representative's capacity is `capacity · o / order`.

use super::{Topology, TopologyError};
use crate::fasthash::IntMap;
use petgraph::graph::EdgeIndex;

/// A device permutation moving GPU `i` to GPU `i + gpu_shift` (mod the GPU count).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rotation {
    pub gpu_shift: u32,
    /// Device (node) index → device index.
    pub perm: Vec<u32>,
}

/// Links grouped into orbits under a topology's rotation.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkOrbits {
    /// GPUs the generator moves ranks by: ranks `0..shift` represent every rank.
    pub shift: u32,
    /// Elements of the group: `gpus / shift`.
    pub order: u32,
    /// Per link: the representative link of its orbit.
    pub rep: Vec<u32>,
    /// Per link: `orbit size / order` (the capacity scale of a representative).
    pub scale: Vec<f64>,
}

impl Topology {
    /// The rotation a builder recorded, if any.
    pub fn rotation(&self) -> Option<&Rotation> {
        self.rotation.as_ref()
    }

    pub(crate) fn with_rotation(mut self, r: Rotation) -> Topology {
        self.rotation = Some(r);
        self
    }

    /// The link orbits under the recorded rotation; `None` when there is none, when the
    /// shift does not divide the GPU count, or when the permutation is not an automorphism
    /// (a link mapped onto a missing link or onto one of other bandwidth or latency).
    pub fn link_orbits(&self) -> Result<Option<LinkOrbits>, TopologyError> {
        match &self.rotation {
            Some(r) => self.orbits_of(r.gpu_shift, &r.perm),
            None => Ok(None),
        }
    }

    /// The link orbits under the rotation by `shift` GPUs: a multiple of the recorded
    /// rotation's shift (that rotation applied `shift / gpu_shift` times), else `None`.
    pub fn link_orbits_for(&self, shift: u32) -> Result<Option<LinkOrbits>, TopologyError> {
        let Some(r) = &self.rotation else {
            return Ok(None);
        };
        if r.gpu_shift == 0 || shift == 0 || shift % r.gpu_shift != 0 {
            return Ok(None);
        }
        // perm^k by squaring.
        let (mut k, mut base, mut acc): (u32, Vec<u32>, Vec<u32>) = (
            shift / r.gpu_shift,
            r.perm.clone(),
            (0..r.perm.len() as u32).collect(),
        );
        while k > 0 {
            if k & 1 == 1 {
                acc = acc.iter().map(|&i| base[i as usize]).collect();
            }
            base = base.iter().map(|&i| base[i as usize]).collect();
            k >>= 1;
        }
        self.orbits_of(shift, &acc)
    }

    fn orbits_of(&self, shift: u32, perm: &[u32]) -> Result<Option<LinkOrbits>, TopologyError> {
        let gpus = self.gpus.len() as u32;
        let g = &self.graph;
        if shift == 0 || gpus % shift != 0 || perm.len() != g.node_count() {
            return Ok(None);
        }
        if perm.iter().any(|&p| p as usize >= perm.len()) {
            return Ok(None);
        }
        for (i, &node) in self.gpus.iter().enumerate() {
            let to = self.gpus[(i + shift as usize) % gpus as usize];
            if perm[node.index()] as usize != to.index() {
                return Ok(None);
            }
        }
        let mut by_ends: IntMap<(u32, u32), u32> = IntMap::default();
        by_ends.reserve(g.edge_count());
        for e in g.edge_indices() {
            let (a, b) = g.edge_endpoints(e).expect("edge of this graph");
            by_ends.insert((a.index() as u32, b.index() as u32), e.index() as u32);
        }
        let mut image = Vec::with_capacity(g.edge_count());
        for e in g.edge_indices() {
            let (a, b) = g.edge_endpoints(e).expect("edge of this graph");
            let (pa, pb) = (perm[a.index()], perm[b.index()]);
            let Some(&f) = by_ends.get(&(pa, pb)) else {
                return Ok(None);
            };
            let (l, m) = (g[e], g[EdgeIndex::new(f as usize)]);
            if l.bandwidth != m.bandwidth || l.latency != m.latency {
                return Ok(None);
            }
            image.push(f);
        }
        let order = gpus / shift;
        let n = image.len();
        let mut rep = vec![u32::MAX; n];
        let mut scale = vec![0.0; n];
        let mut cycle = Vec::new();
        for start in 0..n {
            if rep[start] != u32::MAX {
                continue;
            }
            cycle.clear();
            let mut l = start;
            while rep[l] == u32::MAX {
                rep[l] = start as u32;
                cycle.push(l);
                l = image[l] as usize;
                if cycle.len() > order as usize {
                    return Ok(None); // not a permutation of order dividing `order`
                }
            }
            if l != start || order as usize % cycle.len() != 0 {
                return Ok(None);
            }
            let s = cycle.len() as f64 / order as f64;
            for &c in &cycle {
                scale[c] = s;
            }
        }
        Ok(Some(LinkOrbits {
            shift,
            order,
            rep,
            scale,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::{LinkSpec, RailFatTreeSpec};

    fn spec() -> LinkSpec {
        LinkSpec {
            bandwidth: 1e9,
            latency: 1e-6,
        }
    }

    #[test]
    fn powers_of_the_rotation_give_smaller_groups() {
        let t = Topology::ring("r", 12, spec()).unwrap();
        let o = t.link_orbits_for(4).unwrap().unwrap();
        assert_eq!((o.shift, o.order), (4, 3));
        let mut reps = o.rep.clone();
        reps.sort_unstable();
        reps.dedup();
        assert_eq!(reps.len(), 8, "4 positions × 2 directions");
        assert!(
            t.link_orbits_for(5).unwrap().is_none(),
            "5 does not divide 12"
        );
        let t = Topology::nvswitch("n", 8, spec()).unwrap();
        assert_eq!(t.link_orbits_for(8).unwrap().unwrap().order, 1);
    }

    #[test]
    fn a_ring_has_two_link_orbits() {
        let t = Topology::ring("r", 8, spec()).unwrap();
        let o = t.link_orbits().unwrap().unwrap();
        assert_eq!((o.shift, o.order), (1, 8));
        let mut reps: Vec<u32> = o.rep.clone();
        reps.sort_unstable();
        reps.dedup();
        assert_eq!(reps.len(), 2, "clockwise and counter-clockwise");
        assert!(o.scale.iter().all(|&s| s == 1.0));
    }

    #[test]
    fn nvswitch_links_form_up_and_down_orbits() {
        let t = Topology::nvswitch("n", 8, spec()).unwrap();
        let o = t.link_orbits().unwrap().unwrap();
        assert_eq!((o.shift, o.order), (1, 8));
        let mut reps = o.rep.clone();
        reps.sort_unstable();
        reps.dedup();
        assert_eq!(reps.len(), 2);
    }

    #[test]
    fn rail_fabric_rotates_by_leaf_groups_and_the_spine_stays() {
        let s = RailFatTreeSpec {
            nodes: 6,
            gpus_per_node: 4,
            nodes_per_leaf: 2,
            nvlink: spec(),
            nic: spec(),
            spine_latency: 1e-6,
            oversubscription: 1.0,
        };
        let t = Topology::rail_fat_tree("f", &s).unwrap();
        let o = t.link_orbits().unwrap().unwrap();
        assert_eq!((o.shift, o.order), (8, 3));
        // A partial last leaf group breaks the symmetry: no rotation is recorded.
        let t = Topology::rail_fat_tree("f", &RailFatTreeSpec { nodes: 5, ..s }).unwrap();
        assert!(t.link_orbits().unwrap().is_none());
        // One leaf per rail for all nodes: a node is the unit of rotation.
        let one = RailFatTreeSpec {
            nodes_per_leaf: 8,
            ..s
        };
        for nodes in [3, 5, 8] {
            let t = Topology::rail_fat_tree("f", &RailFatTreeSpec { nodes, ..one }).unwrap();
            let o = t.link_orbits().unwrap().unwrap();
            assert_eq!((o.shift, o.order), (4, nodes as u32));
        }
    }

    #[test]
    fn a_permutation_that_is_not_an_automorphism_gives_no_symmetry() {
        let t = Topology::ring("r", 6, spec()).unwrap();
        // Shift GPUs by one but claim the map is the identity on the links' ends.
        let mut perm: Vec<u32> = (0..6).collect();
        perm.swap(0, 1);
        let t = t.with_rotation(Rotation { gpu_shift: 1, perm });
        assert!(t.link_orbits().unwrap().is_none());
        // A ring with one slower link has no rotation either.
        let mut links = Vec::new();
        for i in 0..4u32 {
            let mut l = crate::topology::Link {
                bandwidth: 1e9,
                latency: 1e-6,
            };
            if i == 0 {
                l.bandwidth = 5e8;
            }
            links.push((format!("gpu{i}"), format!("gpu{}", (i + 1) % 4), l));
            links.push((format!("gpu{}", (i + 1) % 4), format!("gpu{i}"), l));
        }
        let devices = (0..4)
            .map(|i| crate::topology::Device {
                kind: crate::topology::DeviceKind::Gpu,
                name: format!("gpu{i}"),
            })
            .collect();
        let t = Topology::from_parts("uneven", devices, links)
            .unwrap()
            .with_rotation(Rotation {
                gpu_shift: 1,
                perm: vec![1, 2, 3, 0],
            });
        assert!(t.link_orbits().unwrap().is_none());
    }
}
