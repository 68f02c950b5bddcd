//! Configuration: TOML files and embedded presets → validated domain types.
//!
//! A preset is selected by name (`h100-sxm-8`); anything that looks like a path (has a
//! `/`, or ends in `.toml`) is read from disk. Only this module and `cli` touch the
//! filesystem for inputs.

pub mod files;
pub mod hf;
pub mod overrides;
pub mod plan_file;
mod presets;
pub(crate) mod validate;

pub use files::*;
pub use overrides::Overrides;
pub use presets::{Preset, PresetKind, presets};
pub use validate::{Origins, hardware_from_file, model_from_file, scenario_from_file};

use crate::scenario::{Hardware, Model, Scenario};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{file}: {message}")]
    Parse { file: String, message: String },
    #[error("{file}: key `{key}` = {value}: {reason}")]
    Invalid {
        file: String,
        key: String,
        value: String,
        reason: String,
    },
    #[error("unknown {kind} preset `{name}` (known: {known}; or give a path to a .toml file)")]
    UnknownPreset {
        kind: &'static str,
        name: String,
        known: String,
    },
    #[error("{file}: version {found} is not supported (this build reads version {supported})")]
    Version {
        file: String,
        found: u32,
        supported: u32,
    },
    #[error(transparent)]
    NcclXml(#[from] crate::topology::NcclXmlError),
    #[error("{file}: topology: {source}")]
    Topology {
        file: String,
        #[source]
        source: crate::topology::TopologyError,
    },
}

impl ConfigError {
    pub fn invalid(file: &str, key: &str, value: impl ToString, reason: impl ToString) -> Self {
        ConfigError::Invalid {
            file: file.to_string(),
            key: key.to_string(),
            value: value.to_string(),
            reason: reason.to_string(),
        }
    }
}

/// Text of a config, and the name to blame in errors.
#[derive(Debug, Clone)]
pub struct Source {
    pub name: String,
    pub text: String,
    /// Directory relative paths inside it resolve against (`None` for presets).
    pub dir: Option<PathBuf>,
}

fn looks_like_path(s: &str) -> bool {
    s.contains('/') || s.ends_with(".toml") || s.ends_with(".json")
}

/// `spec` (a preset name or a path, as a file in `dir` names it) made independent of
/// where it is read: a relative path is joined to `dir`, the folder of the file that
/// names it; a preset name, an absolute path, or any spec without a `dir` (a flag: the
/// working directory) stays as it is, and so does a bare name that is neither a preset
/// nor a file in `dir` (it stays an unknown preset, for the error to list the known
/// ones). Every way a scenario's `model` or `hardware` is set goes through this before
/// its overrides, so each path resolves against the file that names it.
pub fn anchor(kind: PresetKind, spec: &str, dir: Option<&Path>) -> String {
    let Some(d) = dir.filter(|d| !d.as_os_str().is_empty()) else {
        return spec.to_string();
    };
    if !Path::new(spec).is_relative() {
        return spec.to_string();
    }
    let path = looks_like_path(spec);
    let preset = !path && presets().iter().any(|p| p.kind == kind && p.name == spec);
    if preset || (!path && !d.join(spec).exists()) {
        return spec.to_string();
    }
    d.join(spec).display().to_string()
}

/// Find a preset by name or read a file. `base` resolves relative paths.
pub fn resolve(kind: PresetKind, spec: &str, base: Option<&Path>) -> Result<Source, ConfigError> {
    if !looks_like_path(spec)
        && let Some(p) = presets().iter().find(|p| p.kind == kind && p.name == spec)
    {
        return Ok(Source {
            name: format!("{} preset `{}`", kind.name(), p.name),
            text: p.text.to_string(),
            dir: None,
        });
    }
    let path = match base {
        Some(b) if Path::new(spec).is_relative() => b.join(spec),
        _ => PathBuf::from(spec),
    };
    if !looks_like_path(spec) && !path.exists() {
        let known: Vec<&str> = presets()
            .iter()
            .filter(|p| p.kind == kind)
            .map(|p| p.name)
            .collect();
        return Err(ConfigError::UnknownPreset {
            kind: kind.name(),
            name: spec.to_string(),
            known: known.join(", "),
        });
    }
    read_source(&path, crate::io::MAX_CONFIG_BYTES)
}

/// The file at `path` (a regular file of at most `limit` bytes) as a [`Source`] named by
/// its path, relative paths inside it resolving against its folder.
pub fn read_source(path: &Path, limit: u64) -> Result<Source, ConfigError> {
    let text = crate::io::read_text(path, limit).map_err(|source| ConfigError::Io {
        path: path.display().to_string(),
        source,
    })?;
    Ok(Source {
        name: path.display().to_string(),
        text,
        dir: path.parent().map(Path::to_path_buf),
    })
}

/// Parse TOML into `T`, blaming `src.name`.
pub fn parse_toml<T: serde::de::DeserializeOwned>(src: &Source) -> Result<T, ConfigError> {
    toml::from_str(&src.text).map_err(|e| ConfigError::Parse {
        file: src.name.clone(),
        message: e.to_string().trim_end().to_string(),
    })
}

/// A model preset, a model TOML, or a Hugging Face `config.json` (a path ending in
/// `.json`; see [`hf`]).
pub fn load_model(spec: &str, base: Option<&Path>) -> Result<Model, ConfigError> {
    let src = resolve(PresetKind::Model, spec, base)?;
    if src.name.ends_with(".json") {
        let stem = Path::new(&src.name)
            .file_stem()
            .map_or_else(|| "model".into(), |s| s.to_string_lossy().into_owned());
        return model_from_file(
            &src.name,
            hf::model_file_from_hf(&src.name, &stem, &src.text)?,
        );
    }
    model_from_file(&src.name, parse_toml(&src)?)
}

pub fn load_hardware(spec: &str, base: Option<&Path>) -> Result<Hardware, ConfigError> {
    load_hardware_nodes(spec, base, None)
}

/// [`load_hardware`] with the node count of a multi-node profile set to `nodes`.
pub fn load_hardware_nodes(
    spec: &str,
    base: Option<&Path>,
    nodes: Option<u64>,
) -> Result<Hardware, ConfigError> {
    load_hardware_sized(spec, base, nodes, None)
}

/// [`load_hardware_nodes`] that can also set the GPU count of a one-level profile (a
/// ring, full mesh, NVSwitch node or PCIe tree: `topology.gpus`).
pub fn load_hardware_sized(
    spec: &str,
    base: Option<&Path>,
    nodes: Option<u64>,
    gpus: Option<u64>,
) -> Result<Hardware, ConfigError> {
    let src = resolve(PresetKind::Hardware, spec, base)?;
    let mut file: HardwareFile = parse_toml(&src)?;
    if let Some(g) = gpus {
        if file.topology.gpus.is_none() {
            return Err(ConfigError::invalid(
                &src.name,
                "topology.gpus",
                "(missing)",
                format!(
                    "hardware `{}` (topology kind `{}`) has no GPU count of its own; a GPU \
                     count applies to ring, full-mesh, nvswitch and pcie-tree profiles (use \
                     a node count for multi-node ones)",
                    file.name, file.topology.kind
                ),
            ));
        }
        file.topology.gpus = Some(g.min(i64::MAX as u64) as i64);
    }
    if let Some(n) = nodes {
        if file.topology.nodes.is_none() {
            return Err(ConfigError::invalid(
                &src.name,
                "topology.nodes",
                "(missing)",
                format!(
                    "hardware `{}` is one node (topology kind `{}`); a node count needs a \
                     multi-node profile (kind `rail-fat-tree`)",
                    file.name, file.topology.kind
                ),
            ));
        }
        file.topology.nodes = Some(n.min(i64::MAX as u64) as i64);
    }
    file.topology.base_dir = src.dir.clone();
    hardware_from_file(&src.name, file)
}

/// Read a scenario file or preset (without validating it), for callers that override
/// fields before validation.
pub fn read_scenario(spec: &str) -> Result<(Source, ScenarioFile), ConfigError> {
    let src = resolve(PresetKind::Scenario, spec, None)?;
    let file = parse_toml(&src)?;
    Ok((src, file))
}

/// Load and validate a scenario by name or path.
pub fn load_scenario(spec: &str) -> Result<Scenario, ConfigError> {
    let (src, file) = read_scenario(spec)?;
    scenario_from_file(&src.name, src.dir.as_deref(), file, &Default::default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_parses_and_validates() {
        for p in presets() {
            let r = match p.kind {
                PresetKind::Model => load_model(p.name, None).map(|_| ()),
                PresetKind::Hardware => load_hardware(p.name, None).map(|_| ()),
                PresetKind::Scenario => load_scenario(p.name).map(|_| ()),
            };
            r.unwrap_or_else(|e| panic!("preset {}: {e}", p.name));
        }
    }

    #[test]
    fn unknown_preset_lists_the_known_ones() {
        let e = load_model("llama-9", None).unwrap_err().to_string();
        assert!(e.contains("llama-9") && e.contains("llama-3-8b"), "{e}");
    }

    #[test]
    fn missing_file_names_the_path() {
        let e = load_model("no/such/model.toml", None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no/such/model.toml"), "{e}");
    }
}
