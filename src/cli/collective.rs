//! `flashoverlap collective`: one collective over a range of sizes, simulated on a
//! hardware profile, printed the way nccl-tests prints its measurements.

use super::CliError;
use crate::config;
use crate::exec::sim::{self, SimOptions};
use crate::io::write_atomic;
use crate::scenario::DType;
use crate::strategy::collective::{self, Algorithm, CollectiveOp, CollectiveSpec};
use serde::Serialize;
use std::path::PathBuf;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Json,
    Csv,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// all-gather, reduce-scatter, all-reduce, all-to-all or sendrecv.
    #[arg(long, default_value = "all-reduce")]
    pub op: String,
    /// ring, direct, pairwise (decomposed P2P; also `p2p`) or tree (all-reduce only);
    /// default: ring, or pairwise for all-to-all, direct for sendrecv.
    #[arg(long)]
    pub algorithm: Option<String>,
    /// Ranks, on GPUs 0..N of the topology (default: every GPU of it).
    #[arg(long)]
    pub ranks: Option<u32>,
    /// Hardware profile name or TOML file.
    #[arg(long, default_value = "h100-sxm-8")]
    pub hardware: String,
    /// Node count of a multi-node profile (e.g. dgx-h100).
    #[arg(long)]
    pub nodes: Option<u64>,
    /// GPU count of a one-level profile (ring, full mesh, NVSwitch node, PCIe tree).
    #[arg(long)]
    pub gpus: Option<u64>,
    /// Sizes in bytes as nccl-tests counts them: `MIN:MAX` (MIN, MIN·factor, … up to
    /// MAX) or a comma-separated list; units B, K/KiB, M/MiB, G/GiB (binary), KB/MB/GB
    /// (decimal).
    #[arg(long, default_value = "1KiB:8GiB")]
    pub sizes: String,
    /// Step between sizes of a `MIN:MAX` range (nccl-tests' -f).
    #[arg(long, default_value_t = 2)]
    pub factor: u64,
    /// Independent parts on their own streams (NCCL channels); for tree, pipelined
    /// chunks.
    #[arg(long, default_value_t = 1)]
    pub chunks: u32,
    /// Element type (for the count column): fp32, bf16, fp16, fp8.
    #[arg(long, default_value = "fp32")]
    pub dtype: String,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Also write the output to this file.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Overwrite an existing --out file.
    #[arg(long)]
    pub force: bool,
    /// Refuse runs longer than this many events (per size).
    #[arg(long, default_value_t = SimOptions::default().max_events)]
    pub max_events: u64,
    /// `auto`: where the topology has a rotational symmetry covering the ranks (ring,
    /// NVSwitch node, full mesh, whole leaf groups of a rail fabric) and every rank does
    /// the same up to that rotation (not the tree; equal message sizes), simulate the
    /// representative ranks only — exact, and what makes 16k-rank rings fast. `off`:
    /// always the full plan.
    #[arg(long, value_enum, default_value_t = Symmetry::Auto)]
    pub symmetry: Symmetry,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Symmetry {
    Auto,
    Off,
}

/// Parse one size: `4096`, `4K`, `4KiB`, `1.5MB`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let mul: f64 = match unit.trim() {
        "" | "B" | "b" => 1.0,
        "K" | "k" | "KiB" | "kiB" => 1024.0,
        "M" | "m" | "MiB" => 1024.0 * 1024.0,
        "G" | "g" | "GiB" => 1024.0 * 1024.0 * 1024.0,
        "T" | "TiB" => 1024f64.powi(4),
        "KB" | "kB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "TB" => 1e12,
        other => {
            return Err(format!(
                "`{s}`: unknown unit `{other}` (B, KiB, MiB, GiB, KB, MB, GB)"
            ));
        }
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a size (e.g. 4096, 64KiB, 1GiB)"))?;
    let bytes = v * mul;
    if !bytes.is_finite() || bytes > (1u64 << 60) as f64 {
        return Err(format!("`{s}` is larger than 2^60 bytes"));
    }
    if bytes.fract() != 0.0 {
        return Err(format!("`{s}` is not a whole number of bytes"));
    }
    Ok(bytes as u64)
}

/// The sizes of `--sizes` / `--factor`.
pub fn parse_sizes(s: &str, factor: u64) -> Result<Vec<u64>, String> {
    if let Some((a, b)) = s.split_once(':') {
        let (lo, hi) = (parse_size(a)?, parse_size(b)?);
        if factor < 2 {
            return Err(format!("--factor must be at least 2, got {factor}"));
        }
        if lo == 0 || lo > hi {
            return Err(format!(
                "`{s}`: a range needs 0 < MIN ≤ MAX (got {lo} and {hi} bytes)"
            ));
        }
        let mut out = vec![lo];
        while let Some(next) = out.last().and_then(|x| x.checked_mul(factor)) {
            if next > hi {
                break;
            }
            out.push(next);
        }
        Ok(out)
    } else {
        s.split(',').map(parse_size).collect()
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub size_bytes: u64,
    pub count: u64,
    #[serde(rename = "type")]
    pub dtype: &'static str,
    pub time_us: f64,
    #[serde(rename = "algbw_GB/s")]
    pub algbw: f64,
    #[serde(rename = "busbw_GB/s")]
    pub busbw: f64,
    pub events: u64,
    /// Ranks whose programs were simulated: all of them, or the representatives of a
    /// symmetric plan.
    pub simulated_ranks: u32,
}

#[derive(Debug, Clone, Serialize)]
pub struct Output {
    pub format: &'static str,
    pub version: u32,
    pub op: String,
    pub algorithm: String,
    pub ranks: u32,
    pub hardware: String,
    pub chunks: u32,
    pub rows: Vec<Row>,
}

/// nccl-tests' names of the element types.
fn nccl_type(d: DType) -> &'static str {
    match d {
        DType::Fp32 => "float",
        DType::Bf16 => "bfloat16",
        DType::Fp16 => "half",
        DType::Fp8 => "f8e4m3",
    }
}

/// Round to 1 ps / 1e-6 GB/s so outputs carry no float noise.
fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

pub fn run(a: Args) -> Result<(), CliError> {
    let op = CollectiveOp::parse(&a.op).ok_or_else(|| {
        let known: Vec<_> = CollectiveOp::ALL.iter().map(|o| o.name()).collect();
        CliError::input(format!(
            "--op: `{}` is not one of {}",
            a.op,
            known.join(", ")
        ))
    })?;
    let algorithm = match &a.algorithm {
        None => op.algorithms()[0],
        Some(s) => Algorithm::parse(s).ok_or_else(|| {
            CliError::input(format!(
                "--algorithm: `{s}` is not one of ring, direct, pairwise (p2p), tree"
            ))
        })?,
    };
    let dtype = DType::parse(&a.dtype).ok_or_else(|| {
        CliError::input(format!(
            "--dtype: `{}` is not one of fp32, bf16, fp16, fp8",
            a.dtype
        ))
    })?;
    let sizes =
        parse_sizes(&a.sizes, a.factor).map_err(|e| CliError::input(format!("--sizes: {e}")))?;
    let hw =
        config::load_hardware_sized(&a.hardware, None, a.nodes, a.gpus).map_err(CliError::input)?;
    let ranks = a.ranks.unwrap_or(hw.topology.gpu_count() as u32);
    hw.topology
        .require_gpus(ranks as usize)
        .map_err(|e| CliError::input(format!("--ranks: {e}")))?;
    let opts = SimOptions {
        record_links: false,
        max_events: a.max_events,
        ..SimOptions::default()
    };
    let orbits = match a.symmetry {
        Symmetry::Auto if ranks as usize == hw.topology.gpu_count() => hw
            .topology
            .link_orbits()
            .map_err(|e| CliError::run(e.to_string()))?
            .filter(|o| o.order > 1),
        _ => None,
    };
    let mut rows = Vec::with_capacity(sizes.len());
    for &bytes in &sizes {
        let spec = CollectiveSpec {
            op,
            algorithm,
            ranks,
            bytes,
            chunks: a.chunks,
        };
        let shift = orbits
            .as_ref()
            .filter(|_| collective::is_rotation_invariant(&spec))
            .map(|o| o.shift);
        let plan = collective::build_with(&spec, shift).map_err(CliError::input)?;
        let r = sim::simulate(&plan, &hw, &opts).map_err(CliError::run)?;
        let t = r.times.iter().map(|t| t.end).fold(0.0, f64::max);
        let algbw = if t > 0.0 { bytes as f64 / t / 1e9 } else { 0.0 };
        rows.push(Row {
            size_bytes: bytes,
            count: bytes / dtype.bytes(),
            dtype: nccl_type(dtype),
            time_us: round6(t * 1e6),
            algbw: round6(algbw),
            busbw: round6(algbw * op.busbw_factor(ranks)),
            events: r.events,
            simulated_ranks: shift.unwrap_or(ranks),
        });
    }
    let out = Output {
        format: "flashoverlap-collective",
        version: 1,
        op: op.name().into(),
        algorithm: algorithm.name().into(),
        ranks,
        hardware: hw.name.clone(),
        chunks: a.chunks,
        rows,
    };
    let text = match a.format {
        Format::Json => {
            let mut s = serde_json::to_string_pretty(&out).expect("output serializes");
            s.push('\n');
            s
        }
        Format::Csv => csv(&out),
        Format::Table => table(&out, &hw.topology.to_string()),
    };
    if let Some(p) = &a.out {
        write_atomic(p, text.as_bytes(), a.force).map_err(CliError::output)?;
    }
    print!("{text}");
    Ok(())
}

fn csv(o: &Output) -> String {
    let mut s = String::from("size_B,count,type,time_us,algbw_GB/s,busbw_GB/s\n");
    for r in &o.rows {
        s.push_str(&format!(
            "{},{},{},{},{},{}\n",
            r.size_bytes, r.count, r.dtype, r.time_us, r.algbw, r.busbw
        ));
    }
    s
}

/// The table's footer when some sizes ran as symmetric plans.
fn symmetric_note(o: &Output) -> Option<String> {
    let sym: Vec<u32> = o
        .rows
        .iter()
        .filter(|r| r.simulated_ranks < o.ranks)
        .map(|r| r.simulated_ranks)
        .collect();
    let &held = sym.first()?;
    Some(format!(
        "# {} of {} sizes simulated as symmetric plans: {} for all {} (the topology's rotation; exact). --symmetry off for full plans\n",
        sym.len(),
        o.rows.len(),
        if held <= 1 {
            "rank 0 stands".to_string()
        } else {
            format!("{} stand", crate::report::held_ranks(held))
        },
        o.ranks
    ))
}

fn table(o: &Output, topo: &str) -> String {
    let mut s = format!(
        "# flashoverlap collective: {} ({}), {} ranks on {}, chunks {}\n\
         # busbw = algbw x {} (nccl-tests' convention); times are simulated\n#\n",
        o.op,
        o.algorithm,
        o.ranks,
        topo,
        o.chunks,
        match o.op.as_str() {
            "all-reduce" => "2(n-1)/n",
            "sendrecv" => "1",
            _ => "(n-1)/n",
        }
    );
    s.push_str(&format!(
        "#{:>14} {:>14} {:>9} {:>12} {:>9} {:>9}\n#{:>14} {:>14} {:>9} {:>12} {:>9} {:>9}\n",
        "size",
        "count",
        "type",
        "time",
        "algbw",
        "busbw",
        "(B)",
        "(elements)",
        "",
        "(us)",
        "(GB/s)",
        "(GB/s)"
    ));
    for r in &o.rows {
        s.push_str(&format!(
            " {:>14} {:>14} {:>9} {:>12.2} {:>9.2} {:>9.2}\n",
            r.size_bytes, r.count, r.dtype, r.time_us, r.algbw, r.busbw
        ));
    }
    if let Some(note) = symmetric_note(o) {
        s.push_str(&note);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_like_nccl_tests() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64KiB"), Ok(65536));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert_eq!(parse_size("1.5KB"), Ok(1500));
        assert!(parse_size("1XB").is_err());
        assert!(parse_size("0.5").is_err());
        assert!(parse_size("2048GiB").is_ok());
        assert!(parse_size("9999999TiB").is_err());
        assert_eq!(
            parse_sizes("1KiB:8KiB", 2),
            Ok(vec![1024, 2048, 4096, 8192])
        );
        assert_eq!(parse_sizes("1K,3K", 2), Ok(vec![1024, 3072]));
        assert!(parse_sizes("8K:1K", 2).is_err());
        assert!(parse_sizes("1K:8K", 1).is_err());
    }
}
