//! Tessera's client library: metadata from the MDS through a segmented-LRU
//! cache fed by the MDS's prefetching (Hendricks et al.), file data straight to the
//! OSDs with client-side placement, striping, write-back and read-ahead
//! (OBFS, HustOSD). When the file system keeps its namespace on the OSDs
//! (Ali et al.) the same calls run the directory protocols of `osdns`
//! instead, with permission checks made here. The FUSE mount and the
//! `tessera` CLI sit on top.

pub mod cache;
pub mod client;
pub mod config;
pub mod error;
pub mod file;
pub mod on_osds;
pub mod osds;
pub mod stats;
pub mod striped;

pub use client::Client;
pub use config::ClientConfig;
pub use error::{FsError, Result};
pub use stats::ClientStats;
