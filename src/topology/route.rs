//! Routing: the fewest-hop path between two GPUs, ties broken by the graph's fixed edge
//! order so a route never depends on hashing. Routes are computed on first use and kept.

use super::{Topology, TopologyError};
use crate::fasthash::IntMap;
use petgraph::graph::NodeIndex;
use petgraph::visit::EdgeRef;
use std::collections::VecDeque;

/// A GPU-to-GPU path: the links crossed in order, their summed latency, and the smallest
/// bandwidth on the way.
#[derive(Debug, Clone, PartialEq)]
pub struct Route {
    pub links: Vec<u32>,
    pub latency: f64,
    pub bottleneck: f64,
}

/// Finds and caches routes. Memory grows with the pairs actually used, not with GPUs².
pub struct Router<'t> {
    topo: &'t Topology,
    cache: IntMap<(u32, u32), Route>,
    // Scratch for BFS, reused across queries: parent edge per node, and a visit stamp.
    parent: Vec<u32>,
    stamp: Vec<u32>,
    epoch: u32,
}

impl<'t> Router<'t> {
    pub fn new(topo: &'t Topology) -> Router<'t> {
        let n = topo.graph().node_count();
        Router {
            topo,
            cache: IntMap::default(),
            parent: vec![u32::MAX; n],
            stamp: vec![0; n],
            epoch: 0,
        }
    }

    pub fn topology(&self) -> &'t Topology {
        self.topo
    }

    /// The route from GPU `src` to GPU `dst` (GPU indices, not node indices).
    pub fn route(&mut self, src: usize, dst: usize) -> Result<&Route, TopologyError> {
        let key = (src as u32, dst as u32);
        if !self.cache.contains_key(&key) {
            let r = self.search(src, dst)?;
            self.cache.insert(key, r);
        }
        Ok(&self.cache[&key])
    }

    fn search(&mut self, src: usize, dst: usize) -> Result<Route, TopologyError> {
        let topo = self.topo;
        let n = topo.gpu_count();
        if src >= n || dst >= n {
            return Err(TopologyError::TooFewGpus {
                have: n,
                need: src.max(dst) + 1,
            });
        }
        let g = topo.graph();
        let (s, d) = (topo.gpu_node(src), topo.gpu_node(dst));
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.stamp.iter_mut().for_each(|x| *x = 0);
            self.epoch = 1;
        }
        let epoch = self.epoch;
        self.stamp[s.index()] = epoch;
        let mut queue = VecDeque::from([s]);
        let mut found = s == d;
        while let Some(u) = queue.pop_front() {
            if found {
                break;
            }
            // petgraph yields a node's edges newest first; sort by edge id for a stable,
            // construction-order tie-break.
            let mut out: Vec<(u32, NodeIndex)> = g
                .edges(u)
                .map(|e| (e.id().index() as u32, e.target()))
                .collect();
            out.sort_unstable();
            for (e, v) in out {
                if self.stamp[v.index()] != epoch {
                    self.stamp[v.index()] = epoch;
                    self.parent[v.index()] = e;
                    if v == d {
                        found = true;
                        break;
                    }
                    queue.push_back(v);
                }
            }
        }
        if !found {
            return Err(TopologyError::Disconnected {
                from: topo.device(s).name.clone(),
                to: topo.device(d).name.clone(),
            });
        }
        let mut links = Vec::new();
        let mut v = d;
        while v != s {
            let e = self.parent[v.index()];
            links.push(e);
            v = g
                .edge_endpoints(petgraph::graph::EdgeIndex::new(e as usize))
                .expect("edge of this graph")
                .0;
        }
        links.reverse();
        let mut latency = 0.0;
        let mut bottleneck = f64::INFINITY;
        for &l in &links {
            let link = topo.link(l as usize);
            latency += link.latency;
            bottleneck = bottleneck.min(link.bandwidth);
        }
        Ok(Route {
            links,
            latency,
            bottleneck,
        })
    }
}
