//! flashoverlap: a discrete-event simulator and cost model of communication–computation
//! overlap in distributed LLM training.
//!
//! The pipeline is `config` → [`scenario::Scenario`] → [`strategy`] → [`plan::Plan`] →
//! [`exec::sim`] → [`timeline::Timeline`] → [`timeline::metrics`] / [`trace`] / [`report`].
//! See `ARCHITECTURE.md` for the code map and the invariants.

#![forbid(unsafe_code)]

pub mod app;
pub mod cli;
pub mod config;
pub mod cost;
pub mod exec;
pub mod fasthash;
#[doc(hidden)]
pub mod fuzz;
pub mod io;
pub mod memory;
pub mod plan;
pub mod plot;
pub mod report;
pub mod scenario;
pub mod search;
pub mod simulate;
pub mod strategy;
pub mod sweep;
pub mod timeline;
pub mod topology;
pub mod trace;
pub mod units;
pub mod validate;
