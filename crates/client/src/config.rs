//! Client settings, with the defaults Hendricks et al. used where it gives one.

use std::time::Duration;

/// How a client behaves. Every field has a default that suits a mount.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// MDS address (`host:port`).
    pub mds_addr: String,
    /// Cluster id (checked in every handshake).
    pub cluster_id: String,
    /// Neighbours the MDS is asked to prefetch per lookup or open (Hendricks et al.: 32; 0 disables).
    pub prefetch: u32,
    /// Demand segment of the metadata cache, in entries (Hendricks et al.: 2,000).
    pub cache_demand: usize,
    /// Prefetch segment of the metadata cache, in entries (Hendricks et al.: 1,000).
    pub cache_prefetch: usize,
    /// How long a cached entry answers lookups, getattrs and read opens
    /// without asking the MDS (the consistency window; 0 = always ask).
    pub attr_timeout: Duration,
    /// Dirty bytes buffered per file before they are written out.
    pub flush_chunk: u64,
    /// Dirty bytes buffered in the whole client (memory pressure flushes above this).
    pub writeback_limit: u64,
    /// Age after which buffered writes are written out by the timer.
    pub writeback_delay: Duration,
    /// Largest read-ahead window on sequential reads.
    pub readahead_max: u64,
    /// Renew capabilities this long before they expire.
    pub cap_margin: Duration,
    /// Connections to the MDS.
    pub mds_connections: usize,
    /// Connections per OSD.
    pub osd_connections: usize,
    /// Who this client authenticates as (a principal's key).
    pub identity: net::auth::Identity,
    /// Encrypt every connection's frames (the MDS may require it anyway).
    pub encrypt: bool,
    /// Take namespace changes answered before they are durable, keep them
    /// until they are, and replay them to a restarted MDS (a mount's
    /// default; fsync, fsyncdir and unmount wait for durability). Off: each
    /// change is durable when it returns. Only a long-lived client should
    /// turn it on.
    pub early_answers: bool,
    /// With early answers and the namespace in the MDS: take directory
    /// leases, under which creates, removals and lookups in a directory
    /// this client alone is changing are answered here and sent after
    /// (`docs/CLIENT.md`, "Directory leases").
    pub dir_leases: bool,
}

impl ClientConfig {
    /// Defaults for a cluster at `mds_addr` named `cluster_id`, as the
    /// principal `identity` proves.
    pub fn new(mds_addr: &str, cluster_id: &str, identity: net::auth::Identity) -> ClientConfig {
        ClientConfig {
            mds_addr: mds_addr.into(),
            cluster_id: cluster_id.into(),
            prefetch: 32,
            cache_demand: 2000,
            cache_prefetch: 1000,
            attr_timeout: Duration::from_secs(1),
            flush_chunk: 4 << 20,
            writeback_limit: 64 << 20,
            writeback_delay: Duration::from_secs(1),
            readahead_max: 4 << 20,
            cap_margin: Duration::from_secs(30),
            mds_connections: 2,
            osd_connections: 2,
            identity,
            encrypt: false,
            early_answers: false,
            dir_leases: true,
        }
    }
}
