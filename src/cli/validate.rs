//! `flashoverlap validate DIR...`: the flags of [`crate::app::validate`]'s request;
//! prints the comparison as a table or JSON and writes what was asked.

use super::simulate::Format;
use super::{CliError, from_app};
use crate::app::validate as app;
use crate::io::write_atomic;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Output directories of `flashoverlap run --out`.
    #[arg(required = true)]
    pub dirs: Vec<PathBuf>,
    /// Predict again with this hardware profile instead of using the saved predictions.
    #[arg(long)]
    pub hardware: Option<String>,
    /// With `--hardware`: predict without the interference model (to see what it adds).
    #[arg(long, requires = "hardware")]
    pub no_interference: bool,
    /// Output format on stdout.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Also write the JSON to this file.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// With `--hardware`: write the new predictions as DIR/<case>/predicted-<strategy>.json
    /// (the run's schema, to plot beside its measured-*.json).
    #[arg(long, requires = "hardware", value_name = "DIR")]
    pub timelines: Option<PathBuf>,
    /// Overwrite existing output files.
    #[arg(long)]
    pub force: bool,
}

pub fn run(a: Args) -> Result<(), CliError> {
    let req = app::Request {
        dirs: a.dirs,
        hardware: a.hardware,
        no_interference: a.no_interference,
    };
    let v = app::run(&req).map_err(from_app)?;
    for c in &v.cases {
        if let Some(why) = &c.skipped {
            eprintln!("{}: skipped ({why})", c.dir.display());
        }
    }
    if let Some(root) = &a.timelines {
        for (rel, body) in v.prediction_files() {
            let p = root.join(rel);
            if let Some(d) = p.parent() {
                crate::app::create_dir(d).map_err(from_app)?;
            }
            write_atomic(&p, body.as_bytes(), a.force).map_err(CliError::output)?;
        }
    }
    let json = v.json();
    if let Some(p) = &a.out {
        write_atomic(p, json.as_bytes(), a.force).map_err(CliError::output)?;
    }
    match a.format {
        Format::Table => super::stdout(&v.table()),
        Format::Json => super::stdout(&json),
    }
}
