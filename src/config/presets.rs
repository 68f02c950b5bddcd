//! Presets compiled into the binary, so the tool runs with no files at hand.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PresetKind {
    Model,
    Hardware,
    Scenario,
}

impl PresetKind {
    pub fn name(self) -> &'static str {
        match self {
            PresetKind::Model => "model",
            PresetKind::Hardware => "hardware",
            PresetKind::Scenario => "scenario",
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Preset {
    pub kind: PresetKind,
    pub name: &'static str,
    pub text: &'static str,
}

macro_rules! preset {
    ($kind:ident, $dir:literal, $name:literal) => {
        Preset {
            kind: PresetKind::$kind,
            name: $name,
            text: include_str!(concat!("../../", $dir, "/", $name, ".toml")),
        }
    };
}

static PRESETS: &[Preset] = &[
    preset!(Model, "models", "default-block"),
    preset!(Model, "models", "llama-3-8b"),
    preset!(Model, "models", "llama-3-70b"),
    preset!(Model, "models", "gpt-3-175b"),
    preset!(Model, "models", "mixtral-8x7b"),
    preset!(Model, "models", "deepseek-v3"),
    preset!(Hardware, "hardware-profiles", "h100-sxm-8"),
    preset!(Hardware, "hardware-profiles", "h200-sxm-8"),
    preset!(Hardware, "hardware-profiles", "a100-sxm-8"),
    preset!(Hardware, "hardware-profiles", "a100-pcie-8"),
    preset!(Hardware, "hardware-profiles", "l40s-pcie-8"),
    preset!(Hardware, "hardware-profiles", "ascend-910b-8"),
    preset!(Hardware, "hardware-profiles", "nvlink-ring-1024"),
    preset!(Hardware, "hardware-profiles", "ring-50gib"),
    preset!(Hardware, "hardware-profiles", "dgx-h100-rail"),
    preset!(Hardware, "hardware-profiles", "dgx-h100"),
    preset!(Hardware, "hardware-profiles", "dgx-h200"),
    preset!(Scenario, "scenarios", "default"),
];

/// Every embedded preset, in a fixed order.
pub fn presets() -> &'static [Preset] {
    PRESETS
}
