//! `tessera sim alloc`: allocation aging. See `docs/SIMULATORS.md` for the
//! workload model, its defaults, and what the results show.

mod aging;
mod checkpoint;
pub mod files;
mod metrics;
mod model;
mod workload;

pub use aging::{AgingSim, Counters, Outcome, RunResult, SimError};
pub use checkpoint::Checkpoint;
pub use metrics::{HISTOGRAM_BUCKETS, Sample};
pub use workload::{AllocParams, ParamError, SimPolicy};
