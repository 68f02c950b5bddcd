//! Executors run Plans. `sim` predicts; the GPU executor (behind the `cuda` feature)
//! measures. Both return a per-op start/end record that `timeline` turns into one schema.

pub mod data;
pub mod gpu;
pub mod host;
pub mod sim;
