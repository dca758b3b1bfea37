//! The MDS's persistent state: a redb database (copy-on-write B-trees,
//! checksummed commits) fronted by the write-ahead log in [`crate::wal`].
//!
//! Every mutation runs as a job in one committer (on its thread, or on
//! the writer's own tokio worker when the committer is idle). The committer
//! takes all jobs waiting, runs them in order inside one redb write
//! transaction (each sees the ones before it; a failed job's writes are
//! undone), appends the batch's write set to the log and flushes it, then
//! commits the transaction without a sync (making it visible to readers)
//! and answers the jobs. So nothing is visible or acknowledged before it
//! is durable, and one device flush serves a whole batch (group commit).
//! When the log is half full the batch is instead committed to redb with a
//! sync and the log is emptied (a checkpoint). Recovery replays the log's
//! batches after the last checkpoint. All tables map bytes to bytes; keys
//! holding numbers are big-endian so their order is numeric.

use std::cell::OnceCell;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;

use proto::mds::{Errno, MdsError};
use redb::{
    Database, Durability, ReadOnlyTable, ReadTransaction, ReadableDatabase, ReadableTable, Table,
    TableDefinition,
};
use serde::{Deserialize, Serialize};

use crate::wal::Wal;

mod commit;
pub mod group;
pub mod image;
mod open;

pub use open::{KvOptions, create};

pub use commit::{Ack, SESSION_IDLE};
use commit::{Completion, Job, Marks, Shared, Submitted};

/// The tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[repr(u8)]
pub enum T {
    /// ino (BE) → inode record.
    Inodes = 0,
    /// parent ino (BE) ++ name → child ino (LE) ++ kind byte.
    Dentries = 1,
    /// ino (BE) ++ name → value.
    Xattrs = 2,
    /// name → record (superblock, counters, checkpoint position).
    Meta = 3,
    /// epoch (BE) → OSD map.
    Maps = 4,
    /// sequence (BE) → objects to remove from OSDs.
    DeleteQueue = 5,
    /// extra object-set id (BE) → owning ino (LE).
    Objsets = 6,
    /// ino (BE) → capability version (LE) a committed revocation must
    /// still reach the OSDs with.
    Revocations = 7,
    /// principal name → principal record (with its key).
    Principals = 8,
    /// ino (BE) → ms since the epoch (LE) it lost its last name: inodes
    /// kept while a client may still hold them open.
    Orphans = 9,
    /// client session (BE) → ms since the epoch (LE) it was recorded:
    /// sessions that may hold early answers not yet durable.
    Sessions = 10,
    /// inode number (BE) → session (LE) ++ directory (LE) ++ ms since the
    /// epoch (LE): inode numbers delegated to a directory lease's holder,
    /// not yet made.
    Delegated = 11,
}

const NAMES: [&str; 12] = [
    "inodes",
    "dentries",
    "xattrs",
    "meta",
    "maps",
    "delq",
    "objsets",
    "revoke",
    "principals",
    "orphans",
    "sessions",
    "delegated",
];
const N: usize = NAMES.len();

fn def(t: usize) -> TableDefinition<'static, &'static [u8], &'static [u8]> {
    TableDefinition::new(NAMES[t])
}

/// Most write jobs async callers may have queued for the committer at
/// once (each holds its closure's captures; the server's in-flight limits
/// bound callers, this bounds the queue whatever calls it).
pub const MAX_QUEUED_WRITES: usize = 4096;

/// How long writes must have come one at a time before a writer runs its
/// own batch (see `Kv::may_lead`).
pub const QUIET_BEFORE_LEADING: std::time::Duration = std::time::Duration::from_millis(20);

/// One change in a write set (what the log records).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Write {
    /// Insert or replace.
    Put(u8, Vec<u8>, Vec<u8>),
    /// Remove.
    Del(u8, Vec<u8>),
}

/// An I/O-class error from the KV.
pub fn io_err(what: &str, e: impl std::fmt::Display) -> MdsError {
    MdsError::new(Errno::Io, format!("metadata store: {what}: {e}"))
}

/// A visitor of (key, value) entries that may fail; `Ok(false)` stops.
pub type EntryVisitor<'a> = dyn FnMut(&[u8], &[u8]) -> Result<bool, MdsError> + 'a;

/// Read access, shared by transactions and snapshots.
pub trait View {
    /// The value under `key`.
    fn get(&self, t: T, key: &[u8]) -> Result<Option<Vec<u8>>, MdsError>;
    /// Visits entries between the bounds in key order (or reverse) until `f` says stop.
    fn scan(
        &self,
        t: T,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        rev: bool,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), MdsError>;

    /// Visits every entry of `t` in key order until `f` says stop or
    /// fails; returns `f`'s error, if any.
    fn try_scan_all(&self, t: T, f: &mut EntryVisitor<'_>) -> Result<(), MdsError> {
        let mut bad = None;
        self.scan(t, Bound::Unbounded, Bound::Unbounded, false, &mut |k, v| {
            f(k, v).unwrap_or_else(|e| {
                bad = Some(e);
                false
            })
        })?;
        bad.map_or(Ok(()), Err)
    }
}

fn get_table<R: ReadableTable<&'static [u8], &'static [u8]>>(
    table: &R,
    key: &[u8],
) -> Result<Option<Vec<u8>>, MdsError> {
    Ok(table
        .get(key)
        .map_err(|e| io_err("get", e))?
        .map(|g| g.value().to_vec()))
}

type Guard<'a> = redb::AccessGuard<'a, &'static [u8]>;

fn scan_table<R: ReadableTable<&'static [u8], &'static [u8]>>(
    table: &R,
    lo: Bound<&[u8]>,
    hi: Bound<&[u8]>,
    rev: bool,
    f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
) -> Result<(), MdsError> {
    let range = table
        .range::<&[u8]>((lo, hi))
        .map_err(|e| io_err("range", e))?;
    let mut visit = |item: Result<(Guard<'_>, Guard<'_>), redb::StorageError>| match item {
        Ok((k, v)) => Ok(f(k.value(), v.value())),
        Err(e) => Err(io_err("range", e)),
    };
    if rev {
        for item in range.rev() {
            if !visit(item)? {
                break;
            }
        }
    } else {
        for item in range {
            if !visit(item)? {
                break;
            }
        }
    }
    Ok(())
}

/// A write transaction as jobs see it: reads see earlier writes of the
/// batch; every write is recorded for the log and can be undone.
pub struct Tx<'t> {
    tables: Vec<Table<'t, &'static [u8], &'static [u8]>>,
    redo: Vec<Write>,
    undo: Vec<(u8, Vec<u8>, Option<Vec<u8>>)>,
}

impl<'t> Tx<'t> {
    /// Stores `value` under `key`.
    pub fn put(&mut self, t: T, key: &[u8], value: &[u8]) -> Result<(), MdsError> {
        let old = self.tables[t as usize]
            .insert(key, value)
            .map_err(|e| io_err("insert", e))?
            .map(|g| g.value().to_vec());
        self.undo.push((t as u8, key.to_vec(), old));
        self.redo
            .push(Write::Put(t as u8, key.to_vec(), value.to_vec()));
        Ok(())
    }

    /// Removes `key` (absent is fine).
    pub fn del(&mut self, t: T, key: &[u8]) -> Result<(), MdsError> {
        let old = self.tables[t as usize]
            .remove(key)
            .map_err(|e| io_err("remove", e))?
            .map(|g| g.value().to_vec());
        if old.is_some() {
            self.undo.push((t as u8, key.to_vec(), old));
            self.redo.push(Write::Del(t as u8, key.to_vec()));
        }
        Ok(())
    }

    fn mark(&self) -> (usize, usize) {
        (self.redo.len(), self.undo.len())
    }

    fn rollback(&mut self, mark: (usize, usize)) -> Result<(), MdsError> {
        while self.undo.len() > mark.1 {
            let Some((t, k, old)) = self.undo.pop() else {
                break;
            };
            let table = &mut self.tables[t as usize];
            match old {
                Some(v) => {
                    table
                        .insert(&k[..], &v[..])
                        .map_err(|e| io_err("undo", e))?;
                }
                None => {
                    table.remove(&k[..]).map_err(|e| io_err("undo", e))?;
                }
            }
        }
        self.redo.truncate(mark.0);
        Ok(())
    }

    fn apply(&mut self, w: &Write) -> Result<(), MdsError> {
        match w {
            Write::Put(t, k, v) => self.table(*t)?.insert(&k[..], &v[..]).map(|_| ()),
            Write::Del(t, k) => self.table(*t)?.remove(&k[..]).map(|_| ()),
        }
        .map_err(|e| io_err("replay", e))
    }

    fn table<'s>(
        &'s mut self,
        t: u8,
    ) -> Result<&'s mut Table<'t, &'static [u8], &'static [u8]>, MdsError> {
        let n = self.tables.len();
        self.tables
            .get_mut(t as usize)
            .ok_or_else(|| io_err("replay", format!("table {t} of {n}")))
    }
}

impl View for Tx<'_> {
    fn get(&self, t: T, key: &[u8]) -> Result<Option<Vec<u8>>, MdsError> {
        get_table(&self.tables[t as usize], key)
    }
    fn scan(
        &self,
        t: T,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        rev: bool,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), MdsError> {
        scan_table(&self.tables[t as usize], lo, hi, rev, f)
    }
}

/// A consistent read-only view (a redb read transaction), tables opened on use.
pub struct Snapshot {
    txn: ReadTransaction,
    tables: [OnceCell<ReadOnlyTable<&'static [u8], &'static [u8]>>; N],
}

impl Snapshot {
    fn table(&self, t: T) -> Result<&ReadOnlyTable<&'static [u8], &'static [u8]>, MdsError> {
        let cell = &self.tables[t as usize];
        if let Some(t) = cell.get() {
            return Ok(t);
        }
        let opened = self
            .txn
            .open_table(def(t as usize))
            .map_err(|e| io_err("open table", e))?;
        Ok(cell.get_or_init(|| opened))
    }
}

impl View for Snapshot {
    fn get(&self, t: T, key: &[u8]) -> Result<Option<Vec<u8>>, MdsError> {
        get_table(self.table(t)?, key)
    }
    fn scan(
        &self,
        t: T,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        rev: bool,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), MdsError> {
        scan_table(self.table(t)?, lo, hi, rev, f)
    }
}

/// Where the log's live part starts, kept in the KV at each checkpoint.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
struct Checkpoint {
    lsn: u64,
    wal_pos: u64,
}

const CHECKPOINT_KEY: &[u8] = b"checkpoint";

/// Records in `txn` where the log's live part starts.
fn put_checkpoint(txn: &redb::WriteTransaction, cp: &Checkpoint) -> Result<(), MdsError> {
    let mut meta = txn
        .open_table(def(T::Meta as usize))
        .map_err(|e| io_err("meta", e))?;
    let b = postcard::to_allocvec(cp).map_err(|e| io_err("encode", e))?;
    meta.insert(CHECKPOINT_KEY, &b[..])
        .map_err(|e| io_err("meta", e))?;
    Ok(())
}

/// Counters for `/metrics`.
#[derive(Debug, Default)]
pub struct KvStats {
    /// Write batches committed.
    pub batches: AtomicU64,
    /// Batches run by a writer that found the committer idle (not by the
    /// committer thread; counted whether or not they changed anything).
    pub led: AtomicU64,
    /// Jobs run.
    pub jobs: AtomicU64,
    /// Checkpoints (durable KV commits).
    pub checkpoints: AtomicU64,
    /// Log bytes written.
    pub wal_bytes: AtomicU64,
}

/// Files of an MDS data directory.
pub struct KvPaths {
    /// The redb database.
    pub db: PathBuf,
    /// The log.
    pub wal: PathBuf,
}

impl KvPaths {
    /// The files under `dir`.
    pub fn new(dir: &Path) -> KvPaths {
        KvPaths {
            db: dir.join("mds.redb"),
            wal: dir.join("mds.wal"),
        }
    }
}

/// The open KV: snapshots for readers, a committer for writers.
pub struct Kv {
    db: Arc<Database>,
    /// The committer, its queue, and the thread that runs it.
    shared: Arc<Shared>,
    /// Places in the committer's queue for async writers.
    queued: Arc<tokio::sync::Semaphore>,
    /// When (µs after `epoch`) a writer last found another write in
    /// progress.
    last_busy_us: AtomicU64,
    epoch: std::time::Instant,
    committer: std::sync::Mutex<Option<std::thread::JoinHandle<()>>>,
    flusher: std::sync::Mutex<Option<std::thread::JoinHandle<()>>>,
    failed: Arc<AtomicBool>,
    marks: Arc<Marks>,
    /// Sessions that may hold early answers the log had not made durable
    /// when the KV was last open (found at open).
    recovered_sessions: Vec<u64>,
    /// The durable transno found at open.
    recovered_transno: u64,
    /// Counters.
    pub stats: Arc<KvStats>,
}

impl Kv {
    /// A consistent snapshot for reading.
    pub fn read(&self) -> Result<Snapshot, MdsError> {
        Ok(Snapshot {
            txn: self.db.begin_read().map_err(|e| io_err("begin read", e))?,
            tables: Default::default(),
        })
    }

    /// Runs `f` in the next batch; returns its result once the batch is
    /// durable. If `f` fails, its writes are undone and the error returned.
    pub async fn write<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Tx) -> Result<R, MdsError> + Send + 'static,
    ) -> Result<R, MdsError> {
        Ok(self.write_as(None, f).await?.0)
    }

    /// Like [`Kv::write`], but `session`'s change may be answered once it
    /// is visible, before it is durable: then the [`Ack`] carries its
    /// transno, and the session must keep the operation to replay it
    /// should the MDS restart before the durable transno reaches it.
    pub async fn write_early<R: Send + 'static>(
        &self,
        session: u64,
        f: impl FnOnce(&mut Tx) -> Result<R, MdsError> + Send + 'static,
    ) -> Result<(R, Ack), MdsError> {
        self.write_as(Some(session), f).await
    }

    async fn write_as<R: Send + 'static>(
        &self,
        early_for: Option<u64>,
        f: impl FnOnce(&mut Tx) -> Result<R, MdsError> + Send + 'static,
    ) -> Result<(R, Ack), MdsError> {
        // The committer's queue is bounded: a writer beyond
        // [`MAX_QUEUED_WRITES`] waits here (asynchronously) for a place.
        let permit = self
            .queued
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| io_err("committer", "stopped"))?;
        let (done, rx) = tokio::sync::oneshot::channel();
        let lead = self.may_lead();
        let leads = self.submit(early_for, f, lead, move |r| {
            drop(permit);
            let _ = done.send(r);
        })?;
        if leads {
            self.shared.lead();
        }
        rx.await
            .unwrap_or_else(|_| Err(io_err("committer", "stopped")))
    }

    /// Whether a writer (its permit taken) may run its batch itself: on a
    /// tokio worker, with no other write in progress now nor within
    /// [`QUIET_BEFORE_LEADING`]. Under load the committer thread serves
    /// better: its batches are larger (one commit and one log record for
    /// many jobs), and it runs beside the workers instead of holding one.
    fn may_lead(&self) -> bool {
        let now = self.epoch.elapsed().as_micros() as u64;
        if self.queued.available_permits() + 1 < MAX_QUEUED_WRITES {
            self.last_busy_us.store(now, Ordering::Relaxed);
            return false;
        }
        now.saturating_sub(self.last_busy_us.load(Ordering::Relaxed))
            >= QUIET_BEFORE_LEADING.as_micros() as u64
            && tokio::runtime::Handle::try_current()
                .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
    }

    /// The blocking form of [`Kv::write`] (tools, formatting, recovery);
    /// usable from inside an async runtime too.
    pub fn write_blocking<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Tx) -> Result<R, MdsError> + Send + 'static,
    ) -> Result<R, MdsError> {
        let (done, rx) = mpsc::channel();
        self.submit(None, f, false, move |r| {
            let _ = done.send(r);
        })?;
        rx.recv()
            .unwrap_or_else(|_| Err(io_err("committer", "stopped")))
            .map(|(r, _)| r)
    }

    /// Returns once everything visible now is durable, with the durable
    /// transno.
    pub async fn sync(&self) -> Result<u64, MdsError> {
        let target = self.marks.applied_lsn.load(Ordering::SeqCst);
        let mut rx = self.marks.durable_lsn.subscribe();
        let failed = self.failed.clone();
        rx.wait_for(|d| *d >= target || failed.load(Ordering::SeqCst))
            .await
            .map_err(|_| io_err("flusher", "stopped"))?;
        if *rx.borrow() < target {
            return Err(io_err(
                "failed",
                "an earlier log write failed; restart the MDS to recover",
            ));
        }
        Ok(self.durable_transno())
    }

    /// Every early answer up to this transno is durable.
    pub fn durable_transno(&self) -> u64 {
        self.marks.durable_transno.load(Ordering::SeqCst)
    }

    /// Sessions that were recorded when the KV was last open: after a
    /// crash, those that may hold early answers the log lacks.
    pub fn recovered_sessions(&self) -> &[u64] {
        &self.recovered_sessions
    }

    /// The replays after a crash are served: the sessions found recorded
    /// at open lose their records once idle, as any other.
    pub fn release_recovered_sessions(&self) {
        self.marks.release_recovered.store(true, Ordering::SeqCst);
    }

    /// The durable transno found at open (early answers above it were lost
    /// with the process and exist only in their clients' replay lists).
    pub fn recovered_transno(&self) -> u64 {
        self.recovered_transno
    }

    /// Queues `f` (answered through `done`). True when the caller is to
    /// try running the batch itself ([`Shared::lead`]): it may (`lead`) and
    /// its job is the only one waiting; else the committer thread is woken.
    fn submit<R: Send + 'static>(
        &self,
        early_for: Option<u64>,
        f: impl FnOnce(&mut Tx) -> Result<R, MdsError> + Send + 'static,
        lead: bool,
        done: impl FnOnce(Result<(R, Ack), MdsError>) + Send + 'static,
    ) -> Result<bool, MdsError> {
        if self.failed.load(Ordering::SeqCst) {
            return Err(io_err(
                "failed",
                "an earlier log write failed; restart the MDS to recover",
            ));
        }
        let job: Job = Box::new(move |tx: &mut Tx| {
            let mark = tx.mark();
            let r = f(tx);
            let r = match r {
                Err(e) => tx.rollback(mark).and(Err(e)),
                ok => ok,
            };
            let ok = r.is_ok();
            let completion: Completion = Box::new(move |ack: Result<Ack, MdsError>| {
                done(ack.and_then(|a| r.map(|v| (v, a))))
            });
            (completion, ok)
        });
        let alone = self.shared.queue.push(Submitted { job, early_for })?;
        if lead && alone {
            return Ok(true);
        }
        self.shared.queue.wake_thread();
        Ok(false)
    }

    /// Stops the committer after the jobs already queued and checkpoints,
    /// so the next open replays nothing.
    pub fn close(&self) {
        self.shared.queue.close();
        if let Some(h) = self
            .committer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            let _ = h.join();
        }
        // The committer's exit dropped the flusher's only sender.
        if let Some(h) = self
            .flusher
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            let _ = h.join();
        }
    }
}

impl Drop for Kv {
    fn drop(&mut self) {
        self.close();
    }
}

/// A consistent snapshot of `db` for reading, without a [`Kv`] (a group
/// member that does not lead).
pub fn read_db(db: &impl ReadableDatabase) -> Result<Snapshot, MdsError> {
    Ok(Snapshot {
        txn: db.begin_read().map_err(|e| io_err("begin read", e))?,
        tables: Default::default(),
    })
}

fn open_tx(txn: &redb::WriteTransaction) -> Result<Tx<'_>, MdsError> {
    let mut tables = Vec::with_capacity(N);
    for t in 0..N {
        tables.push(
            txn.open_table(def(t))
                .map_err(|e| io_err("open table", e))?,
        );
    }
    Ok(Tx {
        tables,
        redo: Vec::new(),
        undo: Vec::new(),
    })
}
