//! The Tessera metadata server: the namespace with POSIX semantics, file
//! layouts, placement maps, object-id policies (Hendricks et al.'s namespace
//! flattening), capability issuing with Hendricks et al.'s monotonic versions,
//! server-driven prefetch, and a durable delete queue — all persistent in
//! an embedded KV (redb behind a group-committed write-ahead log).
//!
//! Map: [`ids`] (object-id policies, pure), [`wal`] + [`kv`] (persistence),
//! [`records`] (what is stored), [`raft`] (replicating the KV across a group), [`principals`] (who may connect), [`ns`] (namespace operations, on the
//! shared rules of the `posix` crate),
//! [`cluster`] (OSD map and heartbeats), [`service`] (requests, capabilities,
//! prefetch, OSD actions), [`server`] (the MDS on the shared server loop),
//! [`metrics`], [`config`]. Its Rust client is the connection layer's
//! (`net::MdsClient`).

pub mod cluster;
pub mod config;
pub mod delegation;
pub mod fsck;
pub mod group;
pub mod ids;
pub mod kv;
pub mod layouts;
pub mod metrics;
pub mod ns;
pub mod principals;
pub mod raft;
pub mod records;
pub mod server;
pub mod service;
pub mod wal;

pub use config::{FormatOptions, GroupConfig, GroupMember, MdsConfig};
pub use service::Mds;
