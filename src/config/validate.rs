//! File types → domain types. Every check names the file, the key and the value.

use super::files::*;
use super::{ConfigError, PresetKind};
use crate::scenario::*;
use crate::topology::{
    Device, DeviceKind, Link, LinkSpec, PcieTreeSpec, RailFatTreeSpec, Topology,
};
use std::collections::BTreeSet;
use std::path::Path;

type R<T> = Result<T, ConfigError>;

fn version(file: &str, v: u32) -> R<()> {
    if v != VERSION {
        return Err(ConfigError::Version {
            file: file.into(),
            found: v,
            supported: VERSION,
        });
    }
    Ok(())
}

/// The most ranks a scenario may have (tp × ulysses × dp).
pub const MAX_WORLD: u64 = 1 << 32;

fn positive(file: &str, key: &str, v: i64) -> R<u64> {
    if v <= 0 {
        return Err(ConfigError::invalid(
            file,
            key,
            v,
            "must be a positive integer",
        ));
    }
    Ok(v as u64)
}

fn positive_f(file: &str, key: &str, v: f64) -> R<f64> {
    if v.is_nan() || v <= 0.0 {
        return Err(ConfigError::invalid(file, key, v, "must be positive"));
    }
    Ok(v)
}

fn non_negative_f(file: &str, key: &str, v: f64) -> R<f64> {
    if !v.is_finite() || v < 0.0 {
        return Err(ConfigError::invalid(file, key, v, "must be finite and ≥ 0"));
    }
    Ok(v)
}

fn fraction(file: &str, key: &str, v: f64) -> R<f64> {
    if !(v > 0.0 && v <= 1.0) {
        return Err(ConfigError::invalid(file, key, v, "must be in (0, 1]"));
    }
    Ok(v)
}

/// The most channels NCCL runs a collective on (`MAXCHANNELS`).
pub const MAX_CHANNELS: u64 = 64;

fn nccl_from_file(file: &str, n: &NcclFile) -> R<crate::cost::nccl::NcclConfig> {
    use crate::cost::nccl::{CpuVendor, NcclConfig};
    let d = NcclConfig::default();
    let sm = match n.sm {
        None => d.sm,
        Some(v) if (30..=150).contains(&v) => v as u32,
        Some(v) => {
            return Err(ConfigError::invalid(
                file,
                "comm.nccl.sm",
                v,
                "must be a compute capability × 10, 30..150 (90 for Hopper)",
            ));
        }
    };
    let channels = match n.channels {
        None => None,
        Some(v) if (1..=MAX_CHANNELS as i64).contains(&v) => Some(v as u32),
        Some(v) => {
            return Err(ConfigError::invalid(
                file,
                "comm.nccl.channels",
                v,
                "must be 1..64 (NCCL's MAXCHANNELS)",
            ));
        }
    };
    let channel_bandwidth = match n.channel_gbps {
        None => None,
        Some(v) if v.is_finite() && v > 0.0 => Some(v * 1e9),
        Some(v) => {
            return Err(ConfigError::invalid(
                file,
                "comm.nccl.channel_gbps",
                v,
                "must be a finite, positive GB/s",
            ));
        }
    };
    let cpu = match n.cpu.as_deref() {
        None | Some("intel") => CpuVendor::Intel,
        Some("amd") => CpuVendor::Amd,
        Some(v) => {
            return Err(ConfigError::invalid(
                file,
                "comm.nccl.cpu",
                v,
                "must be `intel` or `amd`",
            ));
        }
    };
    Ok(NcclConfig {
        sm,
        channels,
        channel_bandwidth,
        cpu,
    })
}

pub fn model_from_file(file: &str, m: ModelFile) -> R<Model> {
    version(file, m.version)?;
    let hidden = positive(file, "hidden", m.hidden)?;
    let ffn = positive(file, "ffn", m.ffn)?;
    let heads = positive(file, "heads", m.heads)?;
    let kv_heads = positive(file, "kv_heads", m.kv_heads.unwrap_or(m.heads))?;
    let layers = positive(file, "layers", m.layers)?;
    let vocab = positive(file, "vocab", m.vocab)?;
    if hidden % heads != 0 {
        return Err(ConfigError::invalid(
            file,
            "heads",
            heads,
            format!("must divide hidden ({hidden})"),
        ));
    }
    if heads % kv_heads != 0 {
        return Err(ConfigError::invalid(
            file,
            "kv_heads",
            kv_heads,
            format!("must divide heads ({heads})"),
        ));
    }
    let activation = Activation::parse(&m.activation).ok_or_else(|| {
        let known: Vec<&str> = Activation::ALL.iter().map(|a| a.name()).collect();
        ConfigError::invalid(
            file,
            "activation",
            &m.activation,
            format!("unknown activation (known: {})", known.join(", ")),
        )
    })?;
    let moe = match &m.moe {
        None => None,
        Some(e) => {
            let experts = positive(file, "moe.experts", e.experts)?;
            let top_k = positive(file, "moe.top_k", e.top_k)?;
            if top_k > experts {
                return Err(ConfigError::invalid(
                    file,
                    "moe.top_k",
                    top_k,
                    format!("must not exceed moe.experts ({experts})"),
                ));
            }
            let expert_ffn = positive(file, "moe.expert_ffn", e.expert_ffn)?;
            if e.shared_ffn < 0 {
                return Err(ConfigError::invalid(
                    file,
                    "moe.shared_ffn",
                    e.shared_ffn,
                    "must be 0 (no shared experts) or positive",
                ));
            }
            if e.dense_layers < 0 || e.dense_layers as u64 > layers {
                return Err(ConfigError::invalid(
                    file,
                    "moe.dense_layers",
                    e.dense_layers,
                    format!("must be from 0 to layers ({layers})"),
                ));
            }
            Some(crate::scenario::MoeSpec {
                experts,
                top_k,
                expert_ffn,
                shared_ffn: e.shared_ffn as u64,
                dense_layers: e.dense_layers as u64,
            })
        }
    };
    Ok(Model {
        moe,
        name: m.name,
        hidden,
        ffn,
        heads,
        kv_heads,
        layers,
        vocab,
        activation,
        tied_embeddings: m.tie_embeddings,
    })
}

pub fn hardware_from_file(file: &str, h: HardwareFile) -> R<Hardware> {
    version(file, h.version)?;
    let g = &h.gpu;
    let mut peak = [None; 4];
    for (d, v) in [
        (DType::Fp8, g.peak_tflops.fp8),
        (DType::Bf16, g.peak_tflops.bf16),
        (DType::Fp16, g.peak_tflops.fp16),
        (DType::Fp32, g.peak_tflops.fp32),
    ] {
        if let Some(v) = v {
            let key = format!("gpu.peak_tflops.{}", d.name());
            let v = positive_f(file, &key, v)?;
            if !v.is_finite() {
                return Err(ConfigError::invalid(file, &key, v, "must be finite"));
            }
            peak[d as usize] = Some(v * 1e12);
        }
    }
    let hbm = positive_f(file, "gpu.hbm_gbps", g.hbm_gbps)?;
    let gpu = GpuSpec {
        name: g.name.clone(),
        sm_count: positive(file, "gpu.sm_count", g.sm_count)?,
        hbm_bandwidth: hbm * 1e9,
        peak_flops: peak,
        gemm: GemmParams {
            tile_m: positive(file, "gpu.gemm.tile_m", g.gemm.tile_m)?,
            tile_n: positive(file, "gpu.gemm.tile_n", g.gemm.tile_n)?,
            efficiency: fraction(file, "gpu.gemm.efficiency", g.gemm.efficiency)?,
            k_half: non_negative_f(file, "gpu.gemm.k_half", g.gemm.k_half)?,
            memory_efficiency: fraction(
                file,
                "gpu.gemm.memory_efficiency",
                g.gemm.memory_efficiency,
            )?,
            launch: non_negative_f(file, "gpu.gemm.launch_us", g.gemm.launch_us)? * 1e-6,
            alt_tiles: g
                .gemm
                .alt_tiles
                .iter()
                .enumerate()
                .map(|(i, [r, c])| {
                    let key = |x: usize| format!("gpu.gemm.alt_tiles[{i}][{x}]");
                    Ok((positive(file, &key(0), *r)?, positive(file, &key(1), *c)?))
                })
                .collect::<R<Vec<_>>>()?,
            sm_load_bandwidth: match g.gemm.sm_load_gbps {
                None => None,
                Some(v) => Some(positive_f(file, "gpu.gemm.sm_load_gbps", v)? * 1e9),
            },
            split_launch: match g.gemm.split_launch_us {
                None => 0.0,
                Some(v) => non_negative_f(file, "gpu.gemm.split_launch_us", v)? * 1e-6,
            },
            stream_k_overhead: match g.gemm.stream_k_overhead {
                None => None,
                Some(v) => Some(non_negative_f(file, "gpu.gemm.stream_k_overhead", v)?),
            },
            measured: g
                .gemm
                .measured
                .iter()
                .enumerate()
                .map(|(i, pt)| gemm_point(file, i, pt))
                .collect::<R<Vec<_>>>()?,
        },
        sustained_gemm_slowdown: match g.sustained_gemm_slowdown {
            None => None,
            Some(v) if v.is_finite() && v >= 1.0 => Some(v),
            Some(v) => {
                return Err(ConfigError::invalid(
                    file,
                    "gpu.sustained_gemm_slowdown",
                    v,
                    "must be a finite slowdown ≥ 1",
                ));
            }
        },
        sustained_reference_flops: match g.sustained_reference_tflops {
            None => None,
            Some(v) => Some(positive_f(file, "gpu.sustained_reference_tflops", v)? * 1e12),
        },
        attention_efficiency: match g.attention_efficiency {
            None => None,
            Some(v) => Some(fraction(file, "gpu.attention_efficiency", v)?),
        },
        memory: match g.memory_gib {
            None => None,
            Some(v) => Some(positive_f(file, "gpu.memory_gib", v)? * (1u64 << 30) as f64),
        },
        elementwise: ElementwiseParams {
            efficiency: fraction(file, "gpu.elementwise.efficiency", g.elementwise.efficiency)?,
            launch: non_negative_f(file, "gpu.elementwise.launch_us", g.elementwise.launch_us)?
                * 1e-6,
        },
    };
    let message_latency =
        non_negative_f(file, "comm.message_latency_us", h.comm.message_latency_us)? * 1e-6;
    let comm = CommParams {
        message_latency,
        step_latency: match h.comm.step_latency_us {
            Some(v) => non_negative_f(file, "comm.step_latency_us", v)? * 1e-6,
            None => message_latency,
        },
        nccl: match &h.comm.nccl {
            None => crate::cost::nccl::NcclConfig::default(),
            Some(n) => nccl_from_file(file, n)?,
        },
    };
    let interference = match &h.interference {
        None => None,
        Some(i) => {
            let ctas = positive(file, "interference.comm_ctas_per_op", i.comm_ctas_per_op)?;
            let max = positive(file, "interference.max_comm_ctas", i.max_comm_ctas)?;
            let slow = |key: &str, v: f64| -> R<f64> {
                if !(v.is_finite() && v >= 1.0) {
                    return Err(ConfigError::invalid(
                        file,
                        key,
                        v,
                        "must be a finite slowdown ≥ 1",
                    ));
                }
                Ok(v)
            };
            Some(InterferenceParams {
                comm_ctas_per_op: ctas,
                max_comm_ctas: max,
                gemm_slowdown_beside_transfer: slow(
                    "interference.gemm_slowdown_beside_transfer",
                    i.gemm_slowdown_beside_transfer,
                )?,
                memory_op_slowdown_beside_gemm: slow(
                    "interference.memory_op_slowdown_beside_gemm",
                    i.memory_op_slowdown_beside_gemm,
                )?,
                gemm_slowdown_beside_reduction: slow(
                    "interference.gemm_slowdown_beside_reduction",
                    i.gemm_slowdown_beside_reduction.unwrap_or(1.0),
                )?,
                reduction_slowdown_beside_gemm: slow(
                    "interference.reduction_slowdown_beside_gemm",
                    i.reduction_slowdown_beside_gemm
                        .unwrap_or(i.memory_op_slowdown_beside_gemm),
                )?,
                memory_ops_wait_for_gemm_sms: i.memory_ops_wait_for_gemm_sms.unwrap_or(false),
            })
        }
    };
    let variability = match &h.variability {
        None => None,
        Some(v) => Some(variability(file, "variability", v)?),
    };
    let topology = topology_from_file(file, &h.name, &h.topology)?;
    Ok(Hardware {
        name: h.name,
        gpu,
        comm,
        interference,
        variability,
        topology,
    })
}

/// A `[variability]` section (`section` names it in errors).
pub fn variability(file: &str, section: &str, v: &VariabilityFile) -> R<VariabilityParams> {
    let distribution = JitterDistribution::parse(&v.distribution).ok_or_else(|| {
        ConfigError::invalid(
            file,
            &format!("{section}.distribution"),
            &v.distribution,
            "unknown distribution (known: lognormal, normal, uniform)",
        )
    })?;
    let cv = |key: &str, x: f64| -> R<f64> {
        let key = format!("{section}.{key}");
        if !(x.is_finite() && x >= 0.0) {
            return Err(ConfigError::invalid(
                file,
                &key,
                x,
                "must be finite and ≥ 0",
            ));
        }
        if distribution == JitterDistribution::Uniform && x > 1.0 / 3f64.sqrt() {
            return Err(ConfigError::invalid(
                file,
                &key,
                x,
                "a uniform jitter's coefficient of variation must be ≤ 1/√3 ≈ 0.577 (else factors go negative)",
            ));
        }
        if x > 10.0 {
            return Err(ConfigError::invalid(file, &key, x, "must be ≤ 10"));
        }
        Ok(x)
    };
    Ok(VariabilityParams {
        distribution,
        compute_cv: cv("compute_cv", v.compute_cv)?,
        comm_cv: cv("comm_cv", v.comm_cv)?,
    })
}

fn gemm_point(file: &str, i: usize, p: &GemmPointFile) -> R<GemmPoint> {
    let key = |k: &str| format!("gpu.gemm.measured[{i}].{k}");
    let dtype = DType::parse(&p.dtype).ok_or_else(|| {
        ConfigError::invalid(
            file,
            &key("dtype"),
            &p.dtype,
            "unknown dtype (known: fp8, bf16, fp16, fp32)",
        )
    })?;
    let us = positive_f(file, &key("us"), p.us)?;
    if !us.is_finite() {
        return Err(ConfigError::invalid(file, &key("us"), us, "must be finite"));
    }
    let warm_secs = match p.warm_us {
        None => None,
        Some(w) => {
            let w = positive_f(file, &key("warm_us"), w)?;
            if !w.is_finite() {
                return Err(ConfigError::invalid(
                    file,
                    &key("warm_us"),
                    w,
                    "must be finite",
                ));
            }
            Some(w * 1e-6)
        }
    };
    Ok(GemmPoint {
        dtype,
        m: positive(file, &key("m"), p.m)?,
        n: positive(file, &key("n"), p.n)?,
        k: positive(file, &key("k"), p.k)?,
        secs: us * 1e-6,
        warm_secs,
    })
}

fn req<T: Copy>(file: &str, kind: &str, key: &str, v: Option<T>) -> R<T> {
    v.ok_or_else(|| {
        ConfigError::invalid(
            file,
            &format!("topology.{key}"),
            "(missing)",
            format!("is required for topology kind `{kind}`"),
        )
    })
}

fn link_spec(file: &str, kind: &str, bw: &str, lat: &str, t: &TopologyFile) -> R<LinkSpec> {
    let get = |k: &str| -> Option<f64> {
        match k {
            "link_gbps" => t.link_gbps,
            "link_latency_us" => t.link_latency_us,
            "gpu_link_gbps" => t.gpu_link_gbps,
            "gpu_link_latency_us" => t.gpu_link_latency_us,
            "uplink_gbps" => t.uplink_gbps,
            "uplink_latency_us" => t.uplink_latency_us,
            "socket_link_gbps" => t.socket_link_gbps,
            "socket_link_latency_us" => t.socket_link_latency_us,
            "nvlink_gbps" => t.nvlink_gbps,
            "nvlink_latency_us" => t.nvlink_latency_us,
            "nic_gbps" => t.nic_gbps,
            "nic_latency_us" => t.nic_latency_us,
            _ => None,
        }
    };
    let b = positive_f(
        file,
        &format!("topology.{bw}"),
        req(file, kind, bw, get(bw))?,
    )?;
    let l = non_negative_f(file, &format!("topology.{lat}"), get(lat).unwrap_or(0.0))?;
    Ok(LinkSpec {
        bandwidth: b * 1e9,
        latency: l * 1e-6,
    })
}

/// A key of another topology kind (a `nodes` in a one-node `nvswitch` profile) is an
/// error, not silently ignored: the profile does not mean what its author thinks.
fn stray_topology_keys(file: &str, t: &TopologyFile) -> R<()> {
    let set: [(&str, Option<String>); 23] = [
        ("file", t.file.as_ref().map(|v| v.to_string())),
        ("gpus", t.gpus.as_ref().map(|v| v.to_string())),
        ("link_gbps", t.link_gbps.as_ref().map(|v| v.to_string())),
        (
            "link_latency_us",
            t.link_latency_us.as_ref().map(|v| v.to_string()),
        ),
        ("sockets", t.sockets.as_ref().map(|v| v.to_string())),
        (
            "switches_per_socket",
            t.switches_per_socket.as_ref().map(|v| v.to_string()),
        ),
        (
            "gpu_link_gbps",
            t.gpu_link_gbps.as_ref().map(|v| v.to_string()),
        ),
        (
            "gpu_link_latency_us",
            t.gpu_link_latency_us.as_ref().map(|v| v.to_string()),
        ),
        ("uplink_gbps", t.uplink_gbps.as_ref().map(|v| v.to_string())),
        (
            "uplink_latency_us",
            t.uplink_latency_us.as_ref().map(|v| v.to_string()),
        ),
        (
            "socket_link_gbps",
            t.socket_link_gbps.as_ref().map(|v| v.to_string()),
        ),
        (
            "socket_link_latency_us",
            t.socket_link_latency_us.as_ref().map(|v| v.to_string()),
        ),
        ("nodes", t.nodes.as_ref().map(|v| v.to_string())),
        (
            "gpus_per_node",
            t.gpus_per_node.as_ref().map(|v| v.to_string()),
        ),
        ("nvlink_gbps", t.nvlink_gbps.as_ref().map(|v| v.to_string())),
        (
            "nvlink_latency_us",
            t.nvlink_latency_us.as_ref().map(|v| v.to_string()),
        ),
        ("nic_gbps", t.nic_gbps.as_ref().map(|v| v.to_string())),
        (
            "nic_latency_us",
            t.nic_latency_us.as_ref().map(|v| v.to_string()),
        ),
        (
            "nodes_per_leaf",
            t.nodes_per_leaf.as_ref().map(|v| v.to_string()),
        ),
        (
            "oversubscription",
            t.oversubscription.as_ref().map(|v| v.to_string()),
        ),
        (
            "spine_latency_us",
            t.spine_latency_us.as_ref().map(|v| v.to_string()),
        ),
        (
            "devices",
            (!t.devices.is_empty()).then(|| format!("{} devices", t.devices.len())),
        ),
        (
            "links",
            (!t.links.is_empty()).then(|| format!("{} links", t.links.len())),
        ),
    ];
    let allowed: &[&str] = match t.kind.as_str() {
        "nccl-xml" => &["file"],
        "nvswitch" | "ring" | "full-mesh" => &["gpus", "link_gbps", "link_latency_us"],
        "pcie-tree" => &[
            "gpus",
            "sockets",
            "switches_per_socket",
            "gpu_link_gbps",
            "gpu_link_latency_us",
            "uplink_gbps",
            "uplink_latency_us",
            "socket_link_gbps",
            "socket_link_latency_us",
        ],
        "rail-fat-tree" => &[
            "nodes",
            "gpus_per_node",
            "nvlink_gbps",
            "nvlink_latency_us",
            "nic_gbps",
            "nic_latency_us",
            "nodes_per_leaf",
            "oversubscription",
            "spine_latency_us",
        ],
        "custom" => &["devices", "links"],
        // An unknown kind is reported by the caller, with the known kinds.
        _ => return Ok(()),
    };
    match set
        .iter()
        .find(|(k, v)| v.is_some() && !allowed.contains(k))
    {
        None => Ok(()),
        Some((k, v)) => Err(ConfigError::invalid(
            file,
            &format!("topology.{k}"),
            v.as_deref().unwrap_or_default(),
            format!(
                "not a key of topology kind `{}`, which reads {}; remove it or change the kind",
                t.kind,
                allowed
                    .iter()
                    .map(|a| format!("`{a}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
    }
}

fn topology_from_file(file: &str, name: &str, t: &TopologyFile) -> R<Topology> {
    let kind = t.kind.as_str();
    let wrap = |source| ConfigError::Topology {
        file: file.to_string(),
        source,
    };
    let gpus = || -> R<u64> { positive(file, "topology.gpus", req(file, kind, "gpus", t.gpus)?) };
    stray_topology_keys(file, t)?;
    match kind {
        "nccl-xml" => {
            let spec = t.file.as_deref().ok_or_else(|| {
                ConfigError::invalid(
                    file,
                    "topology.file",
                    "(missing)",
                    "kind `nccl-xml` needs `file`, the path of an NCCL_TOPO_DUMP_FILE dump",
                )
            })?;
            let path = match &t.base_dir {
                Some(d) if Path::new(spec).is_relative() => d.join(spec),
                _ => std::path::PathBuf::from(spec),
            };
            let shown = path.display().to_string();
            let text = crate::io::read_text(&path, crate::io::MAX_CONFIG_BYTES).map_err(|e| {
                ConfigError::invalid(
                    file,
                    "topology.file",
                    spec,
                    format!("cannot read {shown}: {e}"),
                )
            })?;
            Ok(crate::topology::from_nccl_xml(&shown, name, &text)?)
        }
        "nvswitch" | "ring" | "full-mesh" => {
            let n = gpus()?;
            let l = link_spec(file, kind, "link_gbps", "link_latency_us", t)?;
            match kind {
                "nvswitch" => Topology::nvswitch(name, n, l),
                "ring" => Topology::ring(name, n, l),
                _ => Topology::full_mesh(name, n, l),
            }
            .map_err(wrap)
        }
        "pcie-tree" => {
            let spec = PcieTreeSpec {
                gpus: gpus()?,
                sockets: positive(
                    file,
                    "topology.sockets",
                    req(file, kind, "sockets", t.sockets)?,
                )?,
                switches_per_socket: positive(
                    file,
                    "topology.switches_per_socket",
                    req(file, kind, "switches_per_socket", t.switches_per_socket)?,
                )?,
                gpu_link: link_spec(file, kind, "gpu_link_gbps", "gpu_link_latency_us", t)?,
                uplink: link_spec(file, kind, "uplink_gbps", "uplink_latency_us", t)?,
                socket_link: link_spec(
                    file,
                    kind,
                    "socket_link_gbps",
                    "socket_link_latency_us",
                    t,
                )?,
            };
            Topology::pcie_tree(name, &spec).map_err(wrap)
        }
        "rail-fat-tree" => {
            let spec = RailFatTreeSpec {
                nodes: positive(file, "topology.nodes", req(file, kind, "nodes", t.nodes)?)?,
                gpus_per_node: positive(
                    file,
                    "topology.gpus_per_node",
                    req(file, kind, "gpus_per_node", t.gpus_per_node)?,
                )?,
                nvlink: link_spec(file, kind, "nvlink_gbps", "nvlink_latency_us", t)?,
                nic: link_spec(file, kind, "nic_gbps", "nic_latency_us", t)?,
                nodes_per_leaf: positive(
                    file,
                    "topology.nodes_per_leaf",
                    req(file, kind, "nodes_per_leaf", t.nodes_per_leaf)?,
                )?,
                oversubscription: {
                    let v = t.oversubscription.unwrap_or(1.0);
                    if !(v.is_finite() && v >= 1.0) {
                        return Err(ConfigError::invalid(
                            file,
                            "topology.oversubscription",
                            v,
                            "must be a finite ratio ≥ 1 (1 = non-blocking)",
                        ));
                    }
                    v
                },
                spine_latency: non_negative_f(
                    file,
                    "topology.spine_latency_us",
                    t.spine_latency_us.unwrap_or(0.0),
                )? * 1e-6,
            };
            Topology::rail_fat_tree(name, &spec).map_err(wrap)
        }
        "custom" => {
            let mut devices = Vec::with_capacity(t.devices.len());
            for (i, d) in t.devices.iter().enumerate() {
                let k = DeviceKind::parse(&d.kind).ok_or_else(|| {
                    let known: Vec<&str> = DeviceKind::ALL.iter().map(|k| k.name()).collect();
                    ConfigError::invalid(
                        file,
                        &format!("topology.devices[{i}].kind"),
                        &d.kind,
                        format!("unknown device kind (known: {})", known.join(", ")),
                    )
                })?;
                devices.push(Device {
                    kind: k,
                    name: d.name.clone(),
                });
            }
            let mut links = Vec::with_capacity(t.links.len() * 2);
            for (i, l) in t.links.iter().enumerate() {
                let bw = positive_f(file, &format!("topology.links[{i}].gbps"), l.gbps)?;
                let lat = non_negative_f(
                    file,
                    &format!("topology.links[{i}].latency_us"),
                    l.latency_us,
                )?;
                let link = Link {
                    bandwidth: bw * 1e9,
                    latency: lat * 1e-6,
                };
                links.push((l.from.clone(), l.to.clone(), link));
                if l.bidirectional {
                    links.push((l.to.clone(), l.from.clone(), link));
                }
            }
            Topology::from_parts(name, devices, links).map_err(wrap)
        }
        other => Err(ConfigError::invalid(
            file,
            "topology.kind",
            other,
            "unknown topology kind (known: nvswitch, ring, full-mesh, pcie-tree, rail-fat-tree, nccl-xml, custom)",
        )),
    }
}

/// Keys set on the command line rather than in the file, and the flag that set each, so
/// errors blame the right place.
#[derive(Debug, Clone, Default)]
pub struct Origins {
    /// Key → where it was set instead of the file (`command line (--tp)`, `argument
    /// tp`, `command line (sweep parallel.tp=8)`): what errors about it blame.
    pub flags: std::collections::BTreeMap<String, String>,
}

impl Origins {
    fn blame<'a>(&'a self, file: &'a str, key: &str) -> String {
        match self.flags.get(key) {
            Some(origin) => origin.clone(),
            None => file.to_string(),
        }
    }
}

/// The mixture-of-experts rules: workload `moe` needs a MoE model and runs over `ep`
/// ranks alone; layers and steps of a MoE model draw `ep` from a stage's ranks; `ep` is
/// for nothing else; a MoE model's dense MLP block only where the model has dense
/// layers.
fn check_moe(
    at: &dyn Fn(&str) -> String,
    model: &Model,
    workload: Workload,
    p: &Parallel,
) -> R<()> {
    let layered = matches!(workload, Workload::Layer | Workload::Step);
    if workload == Workload::Moe && model.moe.is_none() {
        return Err(ConfigError::invalid(
            &at("model"),
            "model",
            &model.name,
            "workload moe needs a mixture-of-experts model (a [moe] table, a Hugging Face config with experts, or the presets mixtral-8x7b and deepseek-v3)",
        ));
    }
    if let (Some(moe), true) = (model.moe, layered || workload == Workload::Moe) {
        if workload == Workload::Moe {
            for (key, v) in [
                ("parallel.tp", p.tp),
                ("parallel.dp", p.dp),
                ("parallel.ulysses", p.ulysses),
            ] {
                if v != 1 {
                    return Err(ConfigError::invalid(
                        &at(key),
                        key,
                        v,
                        "workload moe runs one MoE block over the expert-parallel ranks (--ep) alone: set it to 1",
                    ));
                }
            }
        } else {
            // MoE parallel folding: the expert-parallel groups are drawn from a stage's
            // ranks.
            let stage = p.tp * p.ulysses * p.dp;
            if stage % p.ep != 0 {
                return Err(ConfigError::invalid(
                    &at("parallel.ep"),
                    "parallel.ep",
                    p.ep,
                    format!(
                        "must divide a pipeline stage's tp × ulysses × dp = {} × {} × {} = {stage} ranks, which the expert-parallel groups are drawn from",
                        p.tp, p.ulysses, p.dp
                    ),
                ));
            }
        }
        if moe.experts % p.ep != 0 {
            return Err(ConfigError::invalid(
                &at("parallel.ep"),
                "parallel.ep",
                p.ep,
                format!("must divide the model's {} routed experts", moe.experts),
            ));
        }
        return Ok(());
    }
    if p.ep != 1 {
        let why = if model.moe.is_none() {
            format!("model `{}` has no experts to spread", model.name)
        } else {
            format!(
                "expert parallelism is for workloads moe, layer and step, not {}",
                workload.name()
            )
        };
        return Err(ConfigError::invalid(
            &at("parallel.ep"),
            "parallel.ep",
            p.ep,
            why,
        ));
    }
    if let Some(moe) = model.moe {
        let dense_block = matches!(
            workload,
            Workload::Mlp | Workload::AgGemm | Workload::GemmRs
        ) && moe.dense_layers > 0;
        if !dense_block && workload != Workload::Attention {
            return Err(ConfigError::invalid(
                &at("workload"),
                "workload",
                workload.name(),
                format!(
                    "model `{}` is a mixture of experts: its MoE layers are simulated by workloads layer, step and moe, not {}",
                    model.name,
                    workload.name()
                ),
            ));
        }
    }
    Ok(())
}

pub fn scenario_from_file(
    file: &str,
    dir: Option<&Path>,
    s: ScenarioFile,
    origins: &Origins,
) -> R<Scenario> {
    version(file, s.version)?;
    let at = |key: &str| origins.blame(file, key);
    let model = super::load_model(&s.model, dir).map_err(|e| match e {
        ConfigError::UnknownPreset { .. } | ConfigError::Io { .. } => {
            ConfigError::invalid(&at("model"), "model", &s.model, e)
        }
        e => e,
    })?;
    let nodes = match s.nodes {
        Some(v) => Some(positive(&at("nodes"), "nodes", v)?),
        None => None,
    };
    let hardware = super::load_hardware_nodes(&s.hardware, dir, nodes).map_err(|e| match e {
        ConfigError::UnknownPreset { .. } | ConfigError::Io { .. } => {
            ConfigError::invalid(&at("hardware"), "hardware", &s.hardware, e)
        }
        e => e,
    })?;
    let batch = positive(&at("batch"), "batch", s.batch)?;
    let seq = positive(&at("seq"), "seq", s.seq)?;
    let dtype = DType::parse(&s.dtype).ok_or_else(|| {
        ConfigError::invalid(
            &at("dtype"),
            "dtype",
            &s.dtype,
            "unknown dtype (known: fp8, bf16, fp16, fp32)",
        )
    })?;
    if hardware.gpu.peak(dtype).is_none() {
        return Err(ConfigError::invalid(
            &at("dtype"),
            "dtype",
            dtype,
            format!("hardware `{}` gives no peak FLOP/s for it", hardware.name),
        ));
    }
    let workload = Workload::parse(&s.workload).ok_or_else(|| {
        ConfigError::invalid(
            &at("workload"),
            "workload",
            &s.workload,
            format!("unknown workload (known: {})", Workload::names()),
        )
    })?;
    let p = &s.parallel;
    let tp = positive(&at("parallel.tp"), "parallel.tp", p.tp)?;
    let dp = positive(&at("parallel.dp"), "parallel.dp", p.dp)?;
    let ulysses = positive(&at("parallel.ulysses"), "parallel.ulysses", p.ulysses)?;
    let pp = positive(&at("parallel.pp"), "parallel.pp", p.pp)?;
    let ep = positive(&at("parallel.ep"), "parallel.ep", p.ep)?;
    if ep > MAX_WORLD {
        return Err(ConfigError::invalid(
            &at("parallel.ep"),
            "parallel.ep",
            ep,
            "is beyond 2^32",
        ));
    }
    // Every product of the degrees below stays far from overflow: no machine has more
    // than 2^32 GPUs. Blame the largest degree (the one most likely mistyped).
    if tp
        .checked_mul(ulysses)
        .and_then(|x| x.checked_mul(dp))
        .and_then(|x| x.checked_mul(pp))
        .is_none_or(|w| w > MAX_WORLD)
    {
        let (key, v) = [
            ("parallel.tp", tp),
            ("parallel.ulysses", ulysses),
            ("parallel.dp", dp),
            ("parallel.pp", pp),
        ]
        .into_iter()
        .max_by_key(|x| x.1)
        .expect("four degrees");
        return Err(ConfigError::invalid(
            &at(key),
            key,
            v,
            format!("tp × ulysses × dp × pp = {tp} × {ulysses} × {dp} × {pp} ranks is beyond 2^32"),
        ));
    }
    let order = crate::scenario::RankOrder::parse(&p.order).ok_or_else(|| {
        ConfigError::invalid(
            &at("parallel.order"),
            "parallel.order",
            &p.order,
            "unknown rank order (known: tp-inner, dp-inner, tp-pp-dp)",
        )
    })?;
    let pp_schedule = crate::scenario::PpSchedule::parse(&p.pp_schedule).ok_or_else(|| {
        ConfigError::invalid(
            &at("parallel.pp_schedule"),
            "parallel.pp_schedule",
            &p.pp_schedule,
            "unknown pipeline schedule (known: 1f1b, interleaved:V with V ≥ 1, gpipe)",
        )
    })?;
    let parallel = Parallel {
        tp,
        sp: p.sp,
        dp,
        ulysses,
        pp,
        pp_schedule,
        order,
        ep,
    };
    check_moe(&at, &model, workload, &parallel)?;
    if !p.sp {
        return Err(ConfigError::invalid(
            &at("parallel.sp"),
            "parallel.sp",
            false,
            format!(
                "workload `{}` is simulated with sequence parallelism (TPSP) only",
                workload.name()
            ),
        ));
    }
    let whole = matches!(
        workload,
        Workload::Layer | Workload::Step | Workload::Attention
    );
    if !whole && workload != Workload::Moe {
        for (key, v) in [("parallel.ulysses", ulysses), ("parallel.dp", dp)] {
            if v != 1 {
                return Err(ConfigError::invalid(
                    &at(key),
                    key,
                    v,
                    format!(
                        "workload `{}` simulates one tensor-parallel group; only 1 is supported (layer and step take dp and ulysses)",
                        workload.name()
                    ),
                ));
            }
        }
    }
    if ulysses > 1 && model.heads % (tp * ulysses) != 0 {
        return Err(ConfigError::invalid(
            &at("parallel.ulysses"),
            "parallel.ulysses",
            ulysses,
            format!(
                "tp × ulysses = {} must divide the model's {} attention heads",
                tp * ulysses,
                model.heads
            ),
        ));
    }
    if ulysses > 1 && seq % ulysses != 0 {
        return Err(ConfigError::invalid(
            &at("parallel.ulysses"),
            "parallel.ulysses",
            ulysses,
            format!("must divide the sequence length ({seq})"),
        ));
    }
    if model.heads % tp != 0 {
        return Err(ConfigError::invalid(
            &at("parallel.tp"),
            "parallel.tp",
            tp,
            format!("must divide the model's {} attention heads", model.heads),
        ));
    }
    let tokens = batch
        .checked_mul(seq)
        .ok_or_else(|| ConfigError::invalid(&at("seq"), "seq", seq, "batch × seq overflows"))?;
    // The largest tensor the workloads move or multiply: tokens × FC1 width elements.
    let biggest = tokens
        .checked_mul(model.fc1_width().max(model.hidden))
        .and_then(|e| e.checked_mul(dtype.bytes()));
    if biggest.is_none_or(|b| b > 1 << 60) {
        return Err(ConfigError::invalid(
            &at("seq"),
            "seq",
            seq,
            format!("batch × seq = {tokens} tokens makes tensors beyond 2^60 bytes"),
        ));
    }
    let micro_batches = positive(&at("micro_batches"), "micro_batches", s.micro_batches)?;
    if pp > 1 && workload != Workload::Step {
        return Err(ConfigError::invalid(
            &at("parallel.pp"),
            "parallel.pp",
            pp,
            format!(
                "pipeline stages split a training step's layers; workload `{}` has none to split (use workload step)",
                workload.name()
            ),
        ));
    }
    if micro_batches > 1 && workload != Workload::Step {
        return Err(ConfigError::invalid(
            &at("micro_batches"),
            "micro_batches",
            micro_batches,
            format!(
                "micro-batches accumulate a training step's gradients; workload `{}` runs one batch (use workload step)",
                workload.name()
            ),
        ));
    }
    let chunks = pp_schedule.chunks();
    if pp > 1 && model.layers % (pp * chunks) != 0 {
        return Err(ConfigError::invalid(
            &at("parallel.pp"),
            "parallel.pp",
            pp,
            format!(
                "pp × model chunks per stage = {pp} × {chunks} must divide the model's {} layers",
                model.layers
            ),
        ));
    }
    if pp > 1 && chunks > 1 && micro_batches % pp != 0 {
        return Err(ConfigError::invalid(
            &at("micro_batches"),
            "micro_batches",
            micro_batches,
            format!("the interleaved schedule needs a multiple of pp = {pp} micro-batches"),
        ));
    }
    let recompute = crate::scenario::Recompute::parse(&s.recompute).ok_or_else(|| {
        ConfigError::invalid(
            &at("recompute"),
            "recompute",
            &s.recompute,
            format!(
                "unknown recomputation (known: {})",
                crate::scenario::Recompute::NAMES.join(", ")
            ),
        )
    })?;
    if !(0..=3).contains(&s.zero) {
        return Err(ConfigError::invalid(
            &at("zero"),
            "zero",
            s.zero,
            "a ZeRO stage is 0, 1, 2 or 3",
        ));
    }
    if whole {
        let heads_split = tp * ulysses;
        if model.kv_heads % heads_split != 0 && heads_split % model.kv_heads != 0 {
            return Err(ConfigError::invalid(
                &at("parallel.tp"),
                "parallel.tp",
                tp,
                format!(
                    "the model's {} kv heads cannot be split over tp × ulysses = {heads_split} (kv heads must be a multiple of it, or it of kv heads)",
                    model.kv_heads
                ),
            ));
        }
        if seq > u32::MAX as u64 {
            return Err(ConfigError::invalid(
                &at("seq"),
                "seq",
                seq,
                "attention is modelled up to 2^32 − 1 positions",
            ));
        }
        let logits = tokens
            .checked_mul(model.vocab)
            .and_then(|e| e.checked_mul(dtype.bytes()));
        if workload == Workload::Step && logits.is_none_or(|b| b > 1 << 60) {
            return Err(ConfigError::invalid(
                &at("seq"),
                "seq",
                seq,
                format!("batch × seq = {tokens} tokens makes logits beyond 2^60 bytes"),
            ));
        }
        if workload == Workload::Step && model.vocab % tp != 0 {
            return Err(ConfigError::invalid(
                &at("parallel.tp"),
                "parallel.tp",
                tp,
                format!("must divide the model's vocabulary ({})", model.vocab),
            ));
        }
    }
    if tokens % tp != 0 {
        return Err(ConfigError::invalid(
            &at("parallel.tp"),
            "parallel.tp",
            tp,
            format!("must divide the tokens (batch × seq = {tokens})"),
        ));
    }
    if parallel.world() as usize > hardware.topology.gpu_count() {
        return Err(ConfigError::invalid(
            &at("parallel.tp"),
            "parallel.tp",
            tp,
            format!(
                "{} ranks, but hardware `{}` has {} GPUs",
                if pp > 1 {
                    format!(
                        "tp × dp × ulysses × pp = {tp} × {dp} × {ulysses} × {pp} = {}",
                        parallel.world()
                    )
                } else {
                    format!(
                        "tp × dp × ulysses = {tp} × {dp} × {ulysses} = {}",
                        parallel.world()
                    )
                },
                hardware.name,
                hardware.topology.gpu_count()
            ),
        ));
    }
    if s.strategies.is_empty() {
        return Err(ConfigError::invalid(
            &at("strategies"),
            "strategies",
            "[]",
            "name at least one strategy",
        ));
    }
    let mut strategies = Vec::new();
    let mut seen = BTreeSet::new();
    let mut site_strategies = std::collections::BTreeMap::new();
    for (key, name) in &s.sites {
        let k = format!("sites.{key}");
        if !whole {
            return Err(ConfigError::invalid(
                &at("sites"),
                &k,
                name,
                format!(
                    "per-site strategies apply to workloads layer and step, not `{}`",
                    workload.name()
                ),
            ));
        }
        if !crate::strategy::layer::SITE_KEYS.contains(&key.as_str()) {
            return Err(ConfigError::invalid(
                &at("sites"),
                &k,
                name,
                format!(
                    "unknown site `{key}` (known: {})",
                    crate::strategy::layer::SITE_KEYS.join(", ")
                ),
            ));
        }
        let st = Strategy::parse(name)
            .map_err(|reason| ConfigError::invalid(&at("sites"), &k, name, reason))?;
        if key == "a2a" && !matches!(st, Strategy::Sequential | Strategy::FlashA2a) {
            return Err(ConfigError::invalid(
                &at("sites"),
                &k,
                name,
                "the Ulysses all-to-all site runs sequential or flash-a2a",
            ));
        }
        if key == "moe" && (model.moe.is_none() || workload == Workload::Attention) {
            return Err(ConfigError::invalid(
                &at("sites"),
                &k,
                name,
                format!(
                    "the MoE site is for a mixture-of-experts model's layers and steps, not {} of `{}`",
                    workload.name(),
                    model.name
                ),
            ));
        }
        if key == "moe"
            && !matches!(
                st,
                Strategy::Sequential
                    | Strategy::Chunked(_)
                    | Strategy::FlashEp(_)
                    | Strategy::Flash
            )
        {
            return Err(ConfigError::invalid(
                &at("sites"),
                &k,
                name,
                "the MoE site (dispatch, experts, combine) runs sequential, chunked:K or flash-ep",
            ));
        }
        if key == "dp"
            && st == Strategy::Flash
            && model.moe.is_some()
            && workload != Workload::Attention
        {
            return Err(ConfigError::invalid(
                &at("sites"),
                &k,
                name,
                format!(
                    "the Flash-fused data parallelism is not built for the MoE layers of `{}`; use dp = bulk or sequential",
                    model.name
                ),
            ));
        }
        if key == "dp" && !matches!(st, Strategy::Sequential | Strategy::Bulk | Strategy::Flash) {
            return Err(ConfigError::invalid(
                &at("sites"),
                &k,
                name,
                "the data-parallel site runs sequential, bulk or flash",
            ));
        }
        site_strategies.insert(key.clone(), st);
    }
    // The per-site strategies must fit the shapes too: check them with the defaults.
    let site_list: Vec<(String, String)> = s
        .sites
        .iter()
        .map(|(k, v)| (format!("sites.{k}"), v.clone()))
        .collect();
    let listed: Vec<(String, String)> = s
        .strategies
        .iter()
        .enumerate()
        .map(|(i, n)| (format!("strategies[{i}]"), n.clone()))
        .chain(site_list)
        .collect();
    let n_default = s.strategies.len();
    for (i, (key, name)) in listed.iter().enumerate() {
        let name = name.as_str();
        let blame = if i < n_default {
            at("strategies")
        } else {
            at("sites")
        };
        let st = Strategy::parse(name)
            .map_err(|reason| ConfigError::invalid(&blame, key, name, reason))?;
        let shape = crate::strategy::MlpShape {
            ranks: tp as u32,
            tokens,
            hidden: model.hidden,
            fc1_width: model.fc1_width(),
            ffn: model.ffn,
            gated: model.activation.gated(),
            activation: model.activation,
            dtype,
        };
        let moe_site = key == "sites.moe";
        if matches!(st, Strategy::FlashEp(_)) && workload != Workload::Moe && !moe_site {
            return Err(ConfigError::invalid(
                &blame,
                key,
                name,
                format!(
                    "flash-ep decomposes a MoE block's all-to-alls: the strategy of workload moe, or the `moe` site of a MoE model's layer or step (--site moe=flash-ep), not a strategy of {}",
                    workload.name()
                ),
            ));
        }
        let checked = if workload == Workload::Moe {
            crate::strategy::moe::MoeShape::from_parts(&model, tokens, ep, dtype, Routing::Uniform)
                .and_then(|m| crate::strategy::moe::check(st, &m))
        } else if whole {
            let mut ls = crate::strategy::layer::LayerShape {
                ranks: tp as u32,
                batch,
                seq,
                hidden: model.hidden,
                heads: model.heads,
                kv_heads: model.kv_heads,
                ffn: model.ffn,
                fc1_width: model.fc1_width(),
                activation: model.activation,
                vocab: model.vocab,
                layers: model.layers,
                micro_batches,
                dtype,
                dp: dp as u32,
                order,
                ulysses: ulysses as u32,
                pp: pp as u32,
                pp_schedule,
                recompute: crate::scenario::Recompute::None,
                zero: 3,
                causal: s.causal,
                attention_only: workload == Workload::Attention,
                forward_only: false,
                moe: crate::strategy::layer::LayerMoe::from_model(&model, ep)
                    .filter(|_| workload != Workload::Attention),
            };
            if workload != Workload::Step {
                ls.layers = 1;
                ls.micro_batches = 1;
            }
            let step = workload == Workload::Step;
            if moe_site {
                crate::strategy::layer::check_moe_sites(&ls, st)
            } else {
                crate::strategy::layer::check_layer(st, &ls, step)
                    .and_then(|()| {
                        // One held group: the least any plan of the layout holds (the
                        // builder checks again with the groups it holds).
                        crate::strategy::layer::check_size(st, &ls, step, 1, usize::MAX)
                    })
                    .and_then(|()| {
                        let dps = crate::strategy::layer::dp_strategy(st, &site_strategies);
                        crate::strategy::layer::check_dp(&ls, dps, step)
                    })
                    .and_then(|()| {
                        let ms = crate::strategy::layer::moe_strategy(st, &site_strategies);
                        crate::strategy::layer::check_moe_sites(&ls, ms)
                    })
            }
        } else {
            crate::strategy::check_shape(st, &shape)
        };
        checked.map_err(|e| ConfigError::invalid(&blame, key, name, e))?;
        if i < n_default && seen.insert(st) {
            strategies.push(st);
        }
    }
    let transport = Transport::parse(&s.transport).ok_or_else(|| {
        ConfigError::invalid(
            &at("transport"),
            "transport",
            &s.transport,
            "unknown transport (known: nccl, copy)",
        )
    })?;
    let name = if s.name.is_empty() {
        PresetKind::Scenario.name().to_string()
    } else {
        s.name
    };
    let clocks = match s.clocks.as_str() {
        "auto" => Clocks::auto(workload, &hardware.gpu),
        "burst" => Clocks::Burst,
        "sustained" => Clocks::Sustained,
        other => {
            return Err(ConfigError::invalid(
                &at("clocks"),
                "clocks",
                other,
                format!("must be one of {}", Clocks::NAMES.join(", ")),
            ));
        }
    };
    let mut hardware = hardware;
    if clocks == Clocks::Sustained {
        hardware.gpu = hardware.gpu.at_sustained_clocks().ok_or_else(|| {
            ConfigError::invalid(
                &at("clocks"),
                "clocks",
                "sustained",
                format!(
                    "hardware profile `{}` has no gpu.sustained_gemm_slowdown (`flashoverlap calibrate` measures it)",
                    hardware.name
                ),
            )
        })?;
        hardware.name = format!("{} at sustained clocks", hardware.name);
    }
    let forward_only = match s.passes.as_str() {
        "fwd-bwd" => false,
        "fwd" => true,
        other => {
            return Err(ConfigError::invalid(
                &at("passes"),
                "passes",
                other,
                "must be fwd-bwd or fwd",
            ));
        }
    };
    if forward_only
        && !matches!(
            workload,
            Workload::Layer | Workload::Attention | Workload::Moe
        )
    {
        return Err(ConfigError::invalid(
            &at("passes"),
            "passes",
            "fwd",
            format!(
                "a forward pass alone is for workloads layer, attention and moe, not {}",
                workload.name()
            ),
        ));
    }
    if !s.causal && !workload.is_layered() {
        return Err(ConfigError::invalid(
            &at("causal"),
            "causal",
            false,
            format!(
                "workload {} has no attention (layer, step and attention do)",
                workload.name()
            ),
        ));
    }
    let routing = Routing::parse(&s.routing)
        .map_err(|reason| ConfigError::invalid(&at("routing"), "routing", &s.routing, reason))?;
    let moe_layers = model.moe.is_some() && matches!(workload, Workload::Layer | Workload::Step);
    if routing != Routing::Uniform && workload != Workload::Moe && !moe_layers {
        return Err(ConfigError::invalid(
            &at("routing"),
            "routing",
            &s.routing,
            format!(
                "routing skew is for a mixture-of-experts model's workloads moe, layer and step, not {} of `{}`",
                workload.name(),
                model.name
            ),
        ));
    }
    if let Routing::Loads(v) = &routing
        && v.len() as u64 != ep
    {
        return Err(ConfigError::invalid(
            &at("routing"),
            "routing",
            &s.routing,
            format!(
                "gives {} loads for ep = {ep} expert-parallel ranks",
                v.len()
            ),
        ));
    }
    Ok(Scenario {
        routing,
        causal: s.causal,
        forward_only,
        clocks,
        name,
        model,
        hardware,
        parallel,
        batch,
        seq,
        micro_batches,
        dtype,
        workload,
        strategies,
        site_strategies,
        transport,
        interference: s.interference,
        recompute,
        zero: s.zero as u8,
    })
}
