use super::CliError;
use crate::config::{self, PresetKind, presets};

pub fn run() -> Result<(), CliError> {
    let mut out = String::new();
    for (kind, title) in [
        (PresetKind::Model, "models"),
        (PresetKind::Hardware, "hardware profiles"),
        (PresetKind::Scenario, "scenarios"),
    ] {
        out.push_str(&format!("{title}:\n"));
        for p in presets().iter().filter(|p| p.kind == kind) {
            let detail = match kind {
                PresetKind::Model => config::load_model(p.name, None).map(|m| {
                    format!(
                        "hidden {}, ffn {}, heads {}/{} kv, {} layers, {}",
                        m.hidden,
                        m.ffn,
                        m.heads,
                        m.kv_heads,
                        m.layers,
                        m.activation.name()
                    ) + &m
                        .moe
                        .map(|e| {
                            format!(
                                "; {} experts {} wide, top-{}{}",
                                e.experts,
                                e.expert_ffn,
                                e.top_k,
                                if e.shared_ffn > 0 {
                                    format!(", shared {} wide", e.shared_ffn)
                                } else {
                                    String::new()
                                }
                            )
                        })
                        .unwrap_or_default()
                }),
                PresetKind::Hardware => config::load_hardware(p.name, None)
                    .map(|h| format!("{}: {}", h.gpu.name, h.topology)),
                PresetKind::Scenario => config::load_scenario(p.name).map(|s| {
                    format!(
                        "{} of {} on {}, tp={}",
                        s.workload.name(),
                        s.model.name,
                        s.hardware.name,
                        s.parallel.tp
                    )
                }),
            }
            .map_err(CliError::input)?;
            out.push_str(&format!("  {:<18} {detail}\n", p.name));
        }
    }
    super::stdout(&out)?;
    Ok(())
}
