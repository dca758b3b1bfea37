//! Tessera's simulators. They link the real code, never copies of it:
//! - [`alloc`]: allocation aging (EBOFS §6.3) — the store's allocators and
//!   its write-placement rules ([`store::alloc::plan`]) driven in memory by a
//!   long-running synthetic workload;
//! - [`trace`]: trace-driven metadata prefetch (Hendricks et al. §4.2) — NFS traces
//!   replayed per client through the client's segmented-LRU cache
//!   ([`client::cache`]) over object ids assigned by the MDS's policies
//!   ([`mds::ids`]).
//!
//! [`plot`] draws their figures as SVG.

pub mod alloc;
pub mod plot;
pub mod trace;
