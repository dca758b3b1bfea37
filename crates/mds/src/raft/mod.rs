//! Replication of the MDS's KV across a group of members through the
//! openraft engine (Raft as Ongaro and Ousterhout describe it in "In Search
//! of an Understandable Consensus Algorithm", 2014; consensus is not
//! written by hand here). A raft entry carries one committer batch — the
//! same `postcard(Vec<Write>)` the single-member write-ahead log records —
//! so what a member applies is exactly what the leader's KV committed.
//!
//! Map: [`hard_state`] (vote and log bounds, two checksummed slots),
//! [`log_store`] (the raft log on a write-ahead-log ring), [`state_machine`]
//! (the KV as the replicated state, snapshots as KV images). How these
//! become a serving group is planned in `docs/HA-PLAN.md`.

// openraft's storage error is what its traits return, large as it is.
#![allow(clippy::result_large_err)]

pub mod hard_state;
pub mod log_store;
pub mod state_machine;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use openraft::{AnyError, ErrorSubject, ErrorVerb, StorageError, StorageIOError};
use serde::{Deserialize, Serialize};

/// A raft entry's payload: one batch the leader's committer ran.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Batch {
    /// The leader's MDS instance that ran it (a leader skips re-applying
    /// its own live instance's batches: its KV already holds them).
    pub origin: u64,
    /// Its sequence number in that instance.
    pub seq: u64,
    /// The batch's writes, `postcard(Vec<kv::Write>)`.
    pub writes: Vec<u8>,
}

/// What applying an entry answers: nothing (the leader answers its
/// callers from its own committer).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Applied;

/// A member as the group records it (in membership entries and
/// snapshots: the group's own list, changed by `tessera mds join` and
/// `remove`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    /// Where its peers reach it (`host:port`).
    pub addr: String,
    /// Where clients and OSDs reach it while it leads (`host:port`).
    pub client: String,
}

/// A snapshot's data: a KV image file (see [`crate::kv::image`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SnapshotFile {
    /// The image.
    pub path: PathBuf,
}

openraft::declare_raft_types!(
    /// The group's raft types.
    pub Tc:
        D = Batch,
        R = Applied,
        NodeId = u64,
        Node = Member,
        Entry = openraft::Entry<Tc>,
        SnapshotData = SnapshotFile,
        AsyncRuntime = openraft::TokioRuntime,
);

/// The highest log index member `id` is known to hold, as the leader
/// reporting `m` replicates to it (None: not leading, or no progress yet).
pub fn matched(m: &openraft::RaftMetrics<u64, Member>, id: u64) -> Option<u64> {
    m.replication
        .as_ref()?
        .get(&id)
        .cloned()
        .flatten()
        .map(|l| l.index)
}

/// openraft's storage error, for this group's types.
pub type StoreError = StorageError<u64>;

/// A storage error about `subject` while doing `verb`.
pub(crate) fn store_err(
    subject: ErrorSubject<u64>,
    verb: ErrorVerb,
    e: impl std::fmt::Display,
) -> StoreError {
    StorageIOError::new(subject, verb, AnyError::error(e)).into()
}

/// The raft timing the group runs with: heartbeats every 100 ms, an
/// election after 400–800 ms of silence (a follower also waits out its
/// leader's lease first), at most 16 entries per append (a catching-up
/// follower gets a few MiB per message, well within a heartbeat), and snapshots
/// triggered by the member itself (by log bytes, not entry count).
pub fn config(cluster_name: &str) -> Result<openraft::Config, String> {
    openraft::Config {
        cluster_name: cluster_name.to_string(),
        heartbeat_interval: 100,
        election_timeout_min: 400,
        election_timeout_max: 800,
        max_payload_entries: 16,
        snapshot_policy: openraft::SnapshotPolicy::Never,
        max_in_snapshot_log_to_keep: 0,
        ..Default::default()
    }
    .validate()
    .map_err(|e| e.to_string())
}

/// Opens a member's raft log and KV under `dir`, creating them when
/// absent (a log ring of `log_bytes`).
pub fn open_member(
    dir: &Path,
    log_bytes: u64,
) -> Result<(log_store::LogStore, state_machine::KvMachine), String> {
    let what = |e: &dyn std::fmt::Display| format!("{}: {e}", dir.display());
    if !log_store::paths(dir).0.exists() {
        log_store::create(dir, log_bytes, 0).map_err(|e| what(&e))?;
    }
    let paths = crate::kv::KvPaths::new(dir);
    if !paths.db.exists() {
        crate::kv::create(&paths, 1 << 20).map_err(|e| what(&e))?;
    }
    let log = log_store::LogStore::open(dir).map_err(|e| what(&e))?;
    let db = redb::Database::open(&paths.db).map_err(|e| what(&e))?;
    let sm = state_machine::KvMachine::open(Arc::new(db), dir).map_err(|e| what(&e))?;
    Ok((log, sm))
}

/// Fingerprints a member's KV (see [`crate::kv::image::digest`]) while
/// openraft owns its state machine.
#[derive(Clone)]
pub struct Digester(Arc<redb::Database>);

impl Digester {
    /// The one for `sm`'s KV.
    pub fn of(sm: &state_machine::KvMachine) -> Digester {
        Digester(sm.db().clone())
    }

    /// A fingerprint of the replicated contents.
    pub fn digest(&self) -> Result<u64, String> {
        crate::kv::image::digest(&self.0).map_err(|e| e.to_string())
    }
}
