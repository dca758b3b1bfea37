//! What the client counts: metadata cache hits, MDS requests (mandatory and
//! non-mandatory, Hendricks et al.'s split), bytes moved. Readable from the API
//! ([`crate::Client::stats`]), the CLI and the mount's `/metrics`.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

/// Live counters (relaxed atomics).
#[derive(Default)]
pub struct Counters {
    /// Lookups, getattrs and opens answered from the cache.
    pub cache_hits: AtomicU64,
    /// Of those, first uses of prefetched entries.
    pub prefetch_hits: AtomicU64,
    /// Lookups, getattrs and opens that had to ask the MDS.
    pub cache_misses: AtomicU64,
    /// Bytes read from OSDs.
    pub bytes_read: AtomicU64,
    /// Bytes written to OSDs.
    pub bytes_written: AtomicU64,
    /// OSD requests failed.
    pub osd_errors: AtomicU64,
    /// Bytes `copy_file_range` copied on the OSDs (never through this client).
    pub bytes_copied_on_osds: AtomicU64,
}

impl Counters {
    /// Adds `n` to a counter.
    pub fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }
}

/// A snapshot of the counters.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct ClientStats {
    /// MDS requests that change the namespace or a length (cannot be avoided).
    pub mds_mandatory: u64,
    /// MDS requests that only fetch metadata (what prefetching saves).
    pub mds_non_mandatory: u64,
    /// MDS requests about names that do not exist (negative lookups and
    /// the name lists that answer them); not counted as non-mandatory.
    pub mds_absent: u64,
    /// Answered from the cache.
    pub cache_hits: u64,
    /// First uses of prefetched entries.
    pub prefetch_hits: u64,
    /// Had to ask the MDS.
    pub cache_misses: u64,
    /// Bytes read from OSDs.
    pub bytes_read: u64,
    /// Bytes written to OSDs.
    pub bytes_written: u64,
    /// Failed OSD requests.
    pub osd_errors: u64,
    /// Bytes copied on the OSDs (`copy_file_range`).
    pub bytes_copied_on_osds: u64,
    /// Namespace changes a restarted MDS redid from this client's replay.
    pub replayed: u64,
    /// Namespace changes a restarted MDS could not redo.
    pub replay_failed: u64,
    /// Directory leases granted to this client.
    pub leases_granted: u64,
    /// Creates and removals this client answered under a directory lease.
    pub lease_answered: u64,
    /// Lookups of names a lease listed, answered by the MDS without
    /// waiting for the lease's queue.
    pub lease_lookups: u64,
    /// Closes under a directory lease that left their data to be written
    /// after (`docs/CLIENT.md`, "Closes under a lease").
    pub deferred_closes: u64,
}

impl ClientStats {
    /// Prometheus text exposition of the snapshot.
    pub fn prometheus(&self) -> String {
        let mut s = String::new();
        let mut put = |name: &str, help: &str, v: u64| {
            s.push_str(&format!(
                "# HELP tessera_client_{name} {help}\n# TYPE tessera_client_{name} counter\ntessera_client_{name}_total {v}\n"
            ));
        };
        put(
            "mds_mandatory_requests",
            "MDS requests that change the namespace or a length.",
            self.mds_mandatory,
        );
        put(
            "mds_non_mandatory_requests",
            "MDS requests that only fetch metadata.",
            self.mds_non_mandatory,
        );
        put(
            "mds_absent_requests",
            "MDS requests about names that do not exist.",
            self.mds_absent,
        );
        put(
            "cache_hits",
            "Metadata answered from the cache.",
            self.cache_hits,
        );
        put(
            "prefetch_hits",
            "First uses of prefetched metadata.",
            self.prefetch_hits,
        );
        put(
            "cache_misses",
            "Metadata fetched from the MDS.",
            self.cache_misses,
        );
        put("read_bytes", "Bytes read from OSDs.", self.bytes_read);
        put(
            "written_bytes",
            "Bytes written to OSDs.",
            self.bytes_written,
        );
        put("osd_errors", "Failed OSD requests.", self.osd_errors);
        put(
            "copied_on_osds_bytes",
            "Bytes copy_file_range copied on the OSDs.",
            self.bytes_copied_on_osds,
        );
        put(
            "replayed",
            "Namespace changes a restarted MDS redid from this client's replay.",
            self.replayed,
        );
        put(
            "replay_failed",
            "Namespace changes a restarted MDS could not redo.",
            self.replay_failed,
        );
        put(
            "leases_granted",
            "Directory leases granted to this client.",
            self.leases_granted,
        );
        put(
            "lease_answered",
            "Creates and removals this client answered under a directory lease.",
            self.lease_answered,
        );
        put(
            "lease_lookups",
            "Lookups of names a lease listed, answered without waiting for its queue.",
            self.lease_lookups,
        );
        put(
            "deferred_closes",
            "Closes under a directory lease that left their data to be written after.",
            self.deferred_closes,
        );
        s.push_str("# EOF\n");
        s
    }
}
