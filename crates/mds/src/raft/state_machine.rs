//! The replicated state: the MDS's KV. Applying entries runs their
//! batches' writes in one redb transaction together with the applied log
//! id and membership (under the member-local key `raft_state`), committed
//! without a sync; a crash loses only what the log still holds and the
//! leader sends again. A snapshot is a KV image (`crate::kv::image`) taken
//! at a point made durable first, so a purge up to it never loses what a
//! restart needs; installing one replaces every replicated entry in one
//! durable commit.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use openraft::storage::{RaftStateMachine, Snapshot, SnapshotMeta};
use openraft::{
    Entry, EntryPayload, ErrorSubject, ErrorVerb, LogId, OptionalSend, RaftSnapshotBuilder,
    StoredMembership,
};
use redb::Database;
use serde::{Deserialize, Serialize};

use super::{Applied, Member, SnapshotFile, StoreError, Tc, store_err};
use crate::kv::image;

/// Runs a snapshot's critical section at a point where the KV holds
/// nothing unreplicated (a leader's: `Kv::quiesced`); false if it could
/// not.
pub type Quiesce = Arc<dyn Fn(&mut dyn FnMut()) -> bool + Send + Sync>;

/// Where a leader puts its [`Quiesce`] (followers have none: their KV
/// holds only what was committed).
pub type QuiesceSlot = Arc<std::sync::Mutex<Option<Quiesce>>>;

/// What the KV has applied, kept with it (under `raft_state`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct AppliedState {
    /// The last entry applied.
    pub applied: Option<LogId<u64>>,
    /// The last membership applied.
    pub membership: StoredMembership<u64, Member>,
}

impl AppliedState {
    /// Its encoding in the KV.
    pub fn encode(&self) -> Vec<u8> {
        postcard::to_allocvec(self).unwrap_or_default()
    }
}

fn sm_err(verb: ErrorVerb, e: impl std::fmt::Display) -> StoreError {
    store_err(ErrorSubject::StateMachine, verb, e)
}

fn snap_err(verb: ErrorVerb, e: impl std::fmt::Display) -> StoreError {
    store_err(ErrorSubject::Snapshot(None), verb, e)
}

/// The KV as openraft's state machine.
pub struct KvMachine {
    db: Arc<Database>,
    /// Where the current snapshot's image lives (`<dir>/snapshot.img`).
    dir: PathBuf,
    state: AppliedState,
    current: Option<SnapshotMeta<u64, Member>>,
    /// Batches of this MDS instance are already in the KV (its leader ran
    /// them): applying skips them. 0 = none.
    live_origin: Arc<AtomicU64>,
    /// Snapshots built by this process (part of their ids).
    built: Arc<AtomicU64>,
    quiesce: QuiesceSlot,
    /// Held while the current image is written or replaced (a build and
    /// an install never interleave).
    image_lock: Arc<std::sync::Mutex<()>>,
    /// A member made by `tessera mds join` holds an empty KV until it
    /// installs the leader's snapshot: applying entries to it before then
    /// would build a state the group never had, so they are refused.
    awaiting_snapshot: bool,
}

/// The marker `tessera mds join` leaves in a new member's directory until
/// its first snapshot is installed.
pub fn awaiting_snapshot_path(dir: &Path) -> PathBuf {
    dir.join("awaiting-snapshot")
}

/// The meta of the current image under `dir`, if it reads.
fn current_meta(dir: &Path) -> Option<SnapshotMeta<u64, Member>> {
    let raw = image::image_meta(&snapshot_path(dir)).ok()?;
    postcard::from_bytes(&raw).ok()
}

/// The image of the current snapshot under `dir`.
pub fn snapshot_path(dir: &Path) -> PathBuf {
    dir.join("snapshot.img")
}

impl KvMachine {
    /// The state machine over `db`, its snapshots under `dir`.
    pub fn open(db: Arc<Database>, dir: &Path) -> Result<KvMachine, StoreError> {
        let state = match image::raft_state(&db).map_err(|e| sm_err(ErrorVerb::Read, e))? {
            Some(raw) => postcard::from_bytes(&raw).map_err(|e| sm_err(ErrorVerb::Read, e))?,
            None => AppliedState::default(),
        };
        let path = snapshot_path(dir);
        let current = if path.exists() {
            let raw = image::image_meta(&path).map_err(|e| snap_err(ErrorVerb::Read, e))?;
            Some(postcard::from_bytes(&raw).map_err(|e| snap_err(ErrorVerb::Read, e))?)
        } else {
            None
        };
        // An install that ended before its marker was removed left an
        // applied state: the snapshot is in.
        let awaiting_snapshot = awaiting_snapshot_path(dir).exists() && state.applied.is_none();
        Ok(KvMachine {
            db,
            dir: dir.to_path_buf(),
            state,
            current,
            live_origin: Arc::new(AtomicU64::new(0)),
            built: Arc::new(AtomicU64::new(0)),
            quiesce: QuiesceSlot::default(),
            image_lock: Arc::default(),
            awaiting_snapshot,
        })
    }

    /// Whether this member still waits for its first snapshot (made by
    /// `tessera mds join`, none installed yet).
    pub fn awaiting_snapshot(&self) -> bool {
        self.awaiting_snapshot
    }

    /// The switch naming the live instance whose batches are skipped.
    pub fn live_origin(&self) -> Arc<AtomicU64> {
        self.live_origin.clone()
    }

    /// The KV.
    pub fn db(&self) -> &Arc<Database> {
        &self.db
    }

    /// Where a leader sets how its snapshots find a quiet point.
    pub fn quiesce_slot(&self) -> QuiesceSlot {
        self.quiesce.clone()
    }
}

/// Builds snapshots (in a task of its own, beside applies).
pub struct KvSnapshotBuilder {
    db: Arc<Database>,
    dir: PathBuf,
    built: Arc<AtomicU64>,
    quiesce: QuiesceSlot,
    image_lock: Arc<std::sync::Mutex<()>>,
}

impl RaftSnapshotBuilder<Tc> for KvSnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<Tc>, StoreError> {
        let (db, dir, built) = (self.db.clone(), self.dir.clone(), self.built.clone());
        let slot = self.quiesce.clone();
        let image_lock = self.image_lock.clone();
        let path = snapshot_path(&dir);
        let made = tokio::task::spawn_blocking(move || {
            let _image = image_lock.lock().unwrap_or_else(|e| e.into_inner());
            // The slot is looked at here, at the point itself (a member
            // elected since the build was asked for has a quiet point to
            // find). A follower takes its point under the slot's lock: a
            // takeover, which sets the slot before its KV runs a batch,
            // waits for it. A leader takes it with its KV quiet, and only
            // that step waits for the quiet: the image is written after.
            let held = slot.lock().unwrap_or_else(|e| e.into_inner());
            let mut point = None;
            let mut take = || point = Some(image::durable_point(&db));
            let ran = match held.clone() {
                Some(q) => {
                    drop(held);
                    q(&mut take)
                }
                None => {
                    take();
                    drop(held);
                    true
                }
            };
            match point {
                Some(Ok(r)) if ran => write_snapshot(&r, &dir, &built),
                Some(Err(e)) => Err(e),
                // No quiet point in time: the current image stands (an
                // error here would stop raft).
                _ => current_meta(&dir)
                    .ok_or_else(|| crate::kv::io_err("snapshot", "the KV found no quiet point")),
            }
        })
        .await
        .map_err(|e| snap_err(ErrorVerb::Write, e))?
        .map_err(|e| snap_err(ErrorVerb::Write, e))?;
        Ok(Snapshot {
            meta: made,
            snapshot: Box::new(SnapshotFile { path }),
        })
    }
}

/// Writes the image of the read `r` as the current snapshot under `dir`.
fn write_snapshot(
    r: &redb::ReadTransaction,
    dir: &Path,
    built: &AtomicU64,
) -> Result<SnapshotMeta<u64, Member>, proto::mds::MdsError> {
    // An image installed meanwhile may be newer than this point: it stays.
    let at: Option<LogId<u64>> = image::raft_state_at(r)?
        .and_then(|raw| postcard::from_bytes::<AppliedState>(&raw).ok())
        .and_then(|s| s.applied);
    if let Some(current) = current_meta(dir)
        && current.last_log_id > at
    {
        return Ok(current);
    }
    let n = built.fetch_add(1, Ordering::SeqCst) + 1;
    let (_, raw) = image::write_image_at(r, &snapshot_path(dir), |state| {
        let state: AppliedState = match state {
            Some(raw) => {
                postcard::from_bytes(&raw).map_err(|e| crate::kv::io_err("raft state", e))?
            }
            None => AppliedState::default(),
        };
        let id = state.applied.map_or_else(
            || format!("0-0-{n}"),
            |l| format!("{}-{}-{n}", l.leader_id.term, l.index),
        );
        let meta = SnapshotMeta {
            last_log_id: state.applied,
            last_membership: state.membership,
            snapshot_id: id,
        };
        postcard::to_allocvec(&meta).map_err(|e| crate::kv::io_err("encode", e))
    })?;
    postcard::from_bytes(&raw).map_err(|e| crate::kv::io_err("snapshot meta", e))
}

impl RaftStateMachine<Tc> for KvMachine {
    type SnapshotBuilder = KvSnapshotBuilder;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<u64>>, StoredMembership<u64, Member>), StoreError> {
        Ok((self.state.applied, self.state.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Applied>, StoreError>
    where
        I: IntoIterator<Item = Entry<Tc>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut entries = entries.into_iter().peekable();
        if self.awaiting_snapshot
            && let Some(e) = entries.peek()
        {
            return Err(sm_err(
                ErrorVerb::Write,
                format!(
                    "this member joined the group with an empty KV and must start from the \
                     leader's snapshot, but was sent entry {} instead",
                    e.log_id.index
                ),
            ));
        }
        let live = self.live_origin.load(Ordering::SeqCst);
        let mut state = self.state.clone();
        let mut batches: Vec<Vec<u8>> = Vec::new();
        let mut answers = Vec::new();
        for e in entries {
            state.applied = Some(e.log_id);
            match e.payload {
                EntryPayload::Blank => {}
                EntryPayload::Normal(b) => {
                    if live == 0 || b.origin != live {
                        batches.push(b.writes);
                    }
                }
                EntryPayload::Membership(m) => {
                    state.membership = StoredMembership::new(Some(e.log_id), m);
                }
            }
            answers.push(Applied);
        }
        if answers.is_empty() {
            return Ok(answers);
        }
        let local = postcard::to_allocvec(&state).map_err(|e| sm_err(ErrorVerb::Write, e))?;
        image::apply_logged(&self.db, batches.iter().map(|b| &b[..]), &local, false)
            .map_err(|e| sm_err(ErrorVerb::Write, e))?;
        self.state = state;
        Ok(answers)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        KvSnapshotBuilder {
            db: self.db.clone(),
            dir: self.dir.clone(),
            built: self.built.clone(),
            quiesce: self.quiesce.clone(),
            image_lock: self.image_lock.clone(),
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<SnapshotFile>, StoreError> {
        Ok(Box::new(SnapshotFile {
            path: self.dir.join("snapshot.incoming"),
        }))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<u64, Member>,
        snapshot: Box<SnapshotFile>,
    ) -> Result<(), StoreError> {
        let sig = Some(meta.signature());
        let err = |e: String| store_err(ErrorSubject::Snapshot(sig.clone()), ErrorVerb::Write, e);
        let inside: SnapshotMeta<u64, Member> = postcard::from_bytes(
            &image::image_meta(&snapshot.path).map_err(|e| err(e.to_string()))?,
        )
        .map_err(|e| err(e.to_string()))?;
        if inside.last_log_id != meta.last_log_id {
            return Err(err(format!(
                "image holds {:?}, the snapshot says {:?}",
                inside.last_log_id, meta.last_log_id
            )));
        }
        let image_lock = self.image_lock.clone();
        let _image = image_lock.lock().unwrap_or_else(|e| e.into_inner());
        // The KV is replaced: no batch in it is a live leader's any more.
        self.live_origin.store(0, Ordering::SeqCst);
        let state = AppliedState {
            applied: meta.last_log_id,
            membership: meta.last_membership.clone(),
        };
        let local = postcard::to_allocvec(&state).map_err(|e| err(e.to_string()))?;
        image::load_image(&self.db, &snapshot.path, &local).map_err(|e| err(e.to_string()))?;
        // Keep the image as this member's current snapshot.
        let ours = snapshot_path(&self.dir);
        if snapshot.path != ours {
            let tmp = ours.with_extension("copy");
            std::fs::copy(&snapshot.path, &tmp)
                .and_then(|_| std::fs::File::open(&tmp)?.sync_all())
                .and_then(|()| std::fs::rename(&tmp, &ours))
                .map_err(|e| err(e.to_string()))?;
            if snapshot.path == self.dir.join("snapshot.incoming") {
                let _ = std::fs::remove_file(&snapshot.path);
            }
            if let Ok(d) = std::fs::File::open(&self.dir) {
                let _ = d.sync_all();
            }
        }
        if self.awaiting_snapshot {
            let marker = awaiting_snapshot_path(&self.dir);
            std::fs::remove_file(&marker)
                .or_else(|e| match e.kind() {
                    std::io::ErrorKind::NotFound => Ok(()),
                    _ => Err(e),
                })
                .map_err(|e| err(format!("{}: {e}", marker.display())))?;
            if let Ok(d) = std::fs::File::open(&self.dir) {
                let _ = d.sync_all();
            }
            self.awaiting_snapshot = false;
        }
        self.state = state;
        self.current = Some(meta.clone());
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<Tc>>, StoreError> {
        // A builder may have made a newer image than the one installed.
        let path = snapshot_path(&self.dir);
        if path.exists() {
            let raw = image::image_meta(&path).map_err(|e| snap_err(ErrorVerb::Read, e))?;
            self.current =
                Some(postcard::from_bytes(&raw).map_err(|e| snap_err(ErrorVerb::Read, e))?);
        }
        Ok(self.current.clone().map(|meta| Snapshot {
            meta,
            snapshot: Box::new(SnapshotFile { path }),
        }))
    }
}
