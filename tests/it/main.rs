//! Integration tests: one binary, data-driven where it fits.

mod bad_input;
mod capped;
mod cli;
mod gpu_cli;
mod layers;
mod limits;
mod notebooks;
mod plot;
mod properties;
mod search;
mod sweep;
