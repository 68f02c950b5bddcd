//! The use cases the front ends share: typed requests, results and errors, with no
//! command-line types in them. The command line (`cli`) and the Python package
//! (`python/`) are adapters: they turn flags or arguments into a request and present the
//! result. Presentation that is a file format of the use case (the collective's
//! nccl-tests table) lives here too, so every front end writes the same bytes.

pub mod collective;
pub mod simulate;
pub mod sweep;
