//! `flashoverlap calibrate`: the flags of [`crate::app::calibrate`]'s request; writes the
//! profile and its measurements.

use super::CliError;
use crate::app::calibrate as app;
use crate::exec::gpu;
use crate::io::write_atomic;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Profile to start from (topology, links, peaks); its GPU numbers are replaced by
    /// the measured ones.
    #[arg(long, default_value = "h200-sxm-8")]
    pub base: String,
    /// Name of the written profile.
    #[arg(long, default_value = "h200-measured")]
    pub name: String,
    /// Where to write the profile (default: hardware-profiles/measured/<name>.toml); the
    /// measurements go beside it as <name>.calibration.json.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Refit saved measurements instead of measuring.
    #[arg(long)]
    pub from: Option<PathBuf>,
    /// Also measure the GEMM shapes of these `run --out` directories' plans (every
    /// strategy of each, as it ran): a profile for predicting those runs with their own
    /// GEMM times, which separates the schedule's error from the GEMM model's.
    #[arg(long, num_args = 1.., value_name = "DIR")]
    pub shapes_from: Vec<PathBuf>,
    /// Timed repetitions per measurement (medians are kept).
    #[arg(long, default_value_t = 7)]
    pub repeats: u32,
    /// Milliseconds of large GEMMs (untimed) before each timed GEMM; 0 (the default): let
    /// the GPU rest between GEMMs instead (the clocks of a short burst, as `run` measures
    /// by default). With a heater the grid runs back to back at the power cap.
    #[arg(long, default_value_t = gpu::HEAT_MS)]
    pub heat_ms: f64,
    /// With `--heat-ms`: seconds of those GEMMs before the first measurement.
    #[arg(long, default_value_t = 20.0)]
    pub warm_s: f64,
    /// Overwrite existing files.
    #[arg(long)]
    pub force: bool,
}

pub fn run(a: Args) -> Result<(), CliError> {
    let req = app::Request {
        base: a.base,
        name: a.name,
        out: a.out,
        from: a.from,
        shapes_from: a.shapes_from,
        repeats: a.repeats,
        heat_ms: a.heat_ms,
        warm_s: a.warm_s,
    };
    let c = app::run(&req).map_err(super::from_app)?;
    if let Some(dir) = c.path.parent().filter(|d| !d.as_os_str().is_empty()) {
        crate::app::create_dir(dir).map_err(super::from_app)?;
    }
    write_atomic(&c.path, c.profile.as_bytes(), a.force).map_err(CliError::output)?;
    if let Some((path, text)) = &c.measurements {
        write_atomic(path, text.as_bytes(), a.force).map_err(CliError::output)?;
    }
    super::stdout(&format!("{}wrote {}\n", c.header, c.path.display()))
}
