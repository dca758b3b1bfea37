//! Tessera's client library: metadata through a segmented-LRU cache fed by
//! the MDS's prefetching (Hendricks et al.), file data straight to the OSDs
//! with client-side placement, striping, write-back and read-ahead (OBFS,
//! HustOSD). Where the namespace lives is one seam, [`namespace::Namespace`]:
//! the MDS ([`on_mds`]), or directories kept on the OSDs ([`on_osds`],
//! after Ali et al., with permission checks made here). The FUSE mount and
//! the `tessera` CLI sit on top.

pub mod absent;
pub mod cache;
pub mod caps;
pub mod client;
pub mod closed;
pub mod commits;
pub mod config;
pub mod copy;
pub mod eof;
pub mod error;
pub mod file;
pub mod gone;
pub mod handles;
pub mod holes;
pub mod leases;
pub mod listings;
pub mod locks;
pub mod lookups;
pub mod meta;
pub mod namespace;
pub mod on_mds;
pub mod on_osds;
pub mod open_file;
pub mod osds;
pub mod privs;
pub mod reads;
pub mod state;
pub mod stats;
pub mod striped;
pub mod targets;
pub mod xattrs;

pub use client::Client;
pub use config::ClientConfig;
pub use error::{FsError, Result};
pub use namespace::Namespace;
pub use stats::ClientStats;
