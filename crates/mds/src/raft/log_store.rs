//! The raft log: records on a write-ahead-log ring (`mds.raftlog`, the
//! format of [`crate::wal`], lsn = raft index, payload = postcard
//! `Entry`), with the vote and the log's bounds in [`HardStateFile`]
//! (`mds.raft`). An append writes its entries and hands openraft's
//! callback to a flusher thread, which flushes the device once for every
//! append waiting and only then tells openraft they are stable (group
//! commit across appends, in order); a truncation zeroes what it
//! removes and flushes before it returns (a stale entry after a shorter
//! replacement would otherwise pass the replay's consecutive-lsn check);
//! a purge makes the new bounds durable before the freed space is reused.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::{Arc, Mutex};

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{Entry, ErrorSubject, ErrorVerb, LogId, OptionalSend, RaftLogReader, Vote};
use store::device::{AlignedBuf, Device, FileDevice};

use super::hard_state::{HardState, HardStateFile};
use super::{StoreError, Tc, store_err};
use crate::wal::Wal;

/// Most bytes of recent entries kept decoded in memory for replication.
const CACHE_BYTES: usize = 32 << 20;

/// The files of a member's raft log under `dir`.
pub fn paths(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    (dir.join("mds.raftlog"), dir.join("mds.raft"))
}

struct Inner {
    wal: Wal,
    hard: HardStateFile,
    /// Index of the first live entry (or of the next one, when empty).
    first: u64,
    /// Ring offset and log id of every live entry, in index order.
    index: VecDeque<(u64, LogId<u64>)>,
    cache: BTreeMap<u64, (Entry<Tc>, usize)>,
    cache_bytes: usize,
}

/// A member's raft log (cheap to clone: clones share it; one serves as
/// openraft's log reader).
#[derive(Clone)]
pub struct LogStore {
    inner: Arc<Mutex<Inner>>,
    /// Appends waiting for the flusher.
    flushes: std::sync::mpsc::Sender<LogFlushed<Tc>>,
}

/// The flusher: one device flush for every append waiting, then their
/// callbacks in order. Ends when every [`LogStore`] clone is gone.
fn flush_loop(dev: Arc<FileDevice>, rx: std::sync::mpsc::Receiver<LogFlushed<Tc>>) {
    while let Ok(first) = rx.recv() {
        let mut waiting = vec![first];
        while let Ok(more) = rx.try_recv() {
            waiting.push(more);
        }
        match dev.flush() {
            Ok(()) => {
                for cb in waiting {
                    cb.log_io_completed(Ok(()));
                }
            }
            Err(e) => {
                for cb in waiting {
                    cb.log_io_completed(Err(io::Error::new(e.kind(), e.to_string())));
                }
            }
        }
    }
}

fn io_store(verb: ErrorVerb, e: impl std::fmt::Display) -> StoreError {
    store_err(ErrorSubject::Logs, verb, e)
}

/// Creates an empty raft log of `bytes` for `member` (zero-filled, so
/// later overwrites need no allocation by the host file system) under
/// `dir`.
pub fn create(dir: &Path, bytes: u64, member: u64) -> io::Result<()> {
    let (log, state) = paths(dir);
    if log.exists() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{} exists: refusing to format over it", log.display()),
        ));
    }
    let bytes = bytes.max(1 << 20) & !4095;
    let dev = FileDevice::create(&log, bytes)?;
    let zero = AlignedBuf::zeroed(1 << 20);
    let mut at = 0;
    while at < bytes {
        let n = (bytes - at).min(1 << 20);
        dev.write_at(&zero[..n as usize], at)?;
        at += n;
    }
    dev.flush()?;
    HardStateFile::create(&state, member)?;
    Ok(())
}

impl LogStore {
    /// Opens the log under `dir` and reads its live entries back.
    pub fn open(dir: &Path) -> io::Result<LogStore> {
        let (log, state) = paths(dir);
        let hard = HardStateFile::open(&state)?;
        let dev = Arc::new(FileDevice::open(&log)?);
        let mut wal = Wal::new(Box::new(dev.clone()), hard.state.tail);
        let mut index = VecDeque::new();
        wal.replay_at(hard.state.first, &mut |lsn, at, payload| {
            let e: Entry<Tc> = postcard::from_bytes(payload)
                .map_err(|e| io::Error::other(format!("raft log entry {lsn}: {e}")))?;
            if e.log_id.index != lsn {
                return Err(io::Error::other(format!(
                    "raft log record {lsn} holds entry {}",
                    e.log_id.index
                )));
            }
            index.push_back((at, e.log_id));
            Ok(())
        })?;
        let first = hard.state.first;
        let (flushes, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("raft-log-flush".into())
            .spawn(move || flush_loop(dev, rx))?;
        Ok(LogStore {
            flushes,
            inner: Arc::new(Mutex::new(Inner {
                wal,
                hard,
                first,
                index,
                cache: BTreeMap::new(),
                cache_bytes: 0,
            })),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Ring bytes between the first live entry and the next one written.
    pub fn live_bytes(&self) -> u64 {
        self.lock().wal.live()
    }

    /// The ring's size.
    pub fn capacity(&self) -> u64 {
        self.lock().wal.capacity()
    }

    /// The member this log belongs to (0: not said).
    pub fn member(&self) -> u64 {
        self.lock().hard.state.member
    }
}

impl Inner {
    fn remember(&mut self, e: Entry<Tc>, bytes: usize) {
        self.cache.insert(e.log_id.index, (e, bytes));
        self.cache_bytes += bytes;
        while self.cache_bytes > CACHE_BYTES {
            let Some((_, (_, b))) = self.cache.pop_first() else {
                break;
            };
            self.cache_bytes -= b;
        }
    }

    fn forget(&mut self, keep: impl Fn(u64) -> bool) {
        let gone: Vec<u64> = self.cache.keys().copied().filter(|i| !keep(*i)).collect();
        for i in gone {
            if let Some((_, b)) = self.cache.remove(&i) {
                self.cache_bytes -= b;
            }
        }
    }

    fn entry(&self, i: u64) -> Result<Entry<Tc>, StoreError> {
        if let Some((e, _)) = self.cache.get(&i) {
            return Ok(e.clone());
        }
        let (at, _) = self.index[(i - self.first) as usize];
        let rec = self
            .wal
            .read_record(at)
            .map_err(|e| io_store(ErrorVerb::Read, e))?
            .filter(|r| r.lsn == i && !r.wrap)
            .ok_or_else(|| io_store(ErrorVerb::Read, format!("entry {i} unreadable at {at}")))?;
        postcard::from_bytes(&rec.payload)
            .map_err(|e| io_store(ErrorVerb::Read, format!("entry {i}: {e}")))
    }

    fn append_one(&mut self, e: Entry<Tc>) -> Result<(), StoreError> {
        let i = e.log_id.index;
        let next = self.first + self.index.len() as u64;
        if self.index.is_empty() && i != self.first {
            // The first entry after an empty log starts elsewhere: the
            // bounds say so before it is written.
            let state = HardState {
                first: i,
                tail: self.wal.head,
                ..self.hard.state.clone()
            };
            self.hard
                .save(state)
                .map_err(|e| io_store(ErrorVerb::Write, e))?;
            self.wal.tail = self.wal.head;
            self.first = i;
        } else if i != next {
            return Err(io_store(
                ErrorVerb::Write,
                format!("append of entry {i} where {next} is next"),
            ));
        }
        let payload = postcard::to_allocvec(&e).map_err(|e| io_store(ErrorVerb::Write, e))?;
        let at = self
            .wal
            .write_record_at(i, &payload)
            .map_err(|e| io_store(ErrorVerb::Write, e))?;
        self.index.push_back((at, e.log_id));
        self.remember(e, payload.len());
        Ok(())
    }
}

fn bounds(range: &impl RangeBounds<u64>) -> (u64, u64) {
    let lo = match range.start_bound() {
        Bound::Included(&s) => s,
        Bound::Excluded(&s) => s.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let hi = match range.end_bound() {
        Bound::Included(&e) => e.saturating_add(1),
        Bound::Excluded(&e) => e,
        Bound::Unbounded => u64::MAX,
    };
    (lo, hi)
}

impl RaftLogReader<Tc> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<Tc>>, StoreError> {
        let inner = self.lock();
        let (lo, hi) = bounds(&range);
        let end = inner.first + inner.index.len() as u64;
        // Below the first live entry is purged: openraft's own storage
        // suite expects what is left (it never asks for purged entries
        // when replicating).
        let (lo, hi) = (lo.max(inner.first), hi.min(end));
        (lo..hi.max(lo)).map(|i| inner.entry(i)).collect()
    }
}

impl RaftLogStorage<Tc> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<Tc>, StoreError> {
        let inner = self.lock();
        let purged = inner.hard.state.purged;
        Ok(LogState {
            last_purged_log_id: purged,
            last_log_id: inner.index.back().map(|(_, id)| *id).or(purged),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<u64>) -> Result<(), StoreError> {
        let mut inner = self.lock();
        let state = HardState {
            vote: Some(*vote),
            ..inner.hard.state.clone()
        };
        inner
            .hard
            .save(state)
            .map_err(|e| store_err(ErrorSubject::Vote, ErrorVerb::Write, e))
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<u64>>, StoreError> {
        Ok(self.lock().hard.state.vote)
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<Tc>) -> Result<(), StoreError>
    where
        I: IntoIterator<Item = Entry<Tc>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut inner = self.lock();
        for e in entries {
            inner.append_one(e)?;
        }
        drop(inner);
        // Stable once the flusher has flushed (with every append waiting).
        self.flushes
            .send(callback)
            .map_err(|_| io_store(ErrorVerb::Write, "the log's flusher stopped"))
    }

    async fn truncate(&mut self, log_id: LogId<u64>) -> Result<(), StoreError> {
        let mut inner = self.lock();
        let i = log_id.index.max(inner.first);
        let pos = (i - inner.first) as usize;
        if pos >= inner.index.len() {
            return Ok(());
        }
        let at = inner.index[pos].0;
        inner
            .wal
            .cut(at)
            .map_err(|e| io_store(ErrorVerb::Delete, e))?;
        inner.index.truncate(pos);
        inner.forget(|k| k < i);
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<u64>) -> Result<(), StoreError> {
        let mut inner = self.lock();
        let upto = log_id.index;
        if upto < inner.first {
            // Nothing live is at or below it: only the purged id moves.
            if inner.hard.state.purged.is_some_and(|p| p.index >= upto) {
                return Ok(());
            }
            let state = HardState {
                purged: Some(log_id),
                ..inner.hard.state.clone()
            };
            return inner
                .hard
                .save(state)
                .map_err(|e| io_store(ErrorVerb::Delete, e));
        }
        let len = inner.index.len();
        let n = ((upto + 1).saturating_sub(inner.first) as usize).min(len);
        let tail = if n < len {
            inner.index[n].0
        } else {
            inner.wal.head
        };
        let state = HardState {
            purged: Some(log_id),
            tail,
            first: upto + 1,
            ..inner.hard.state.clone()
        };
        inner
            .hard
            .save(state)
            .map_err(|e| io_store(ErrorVerb::Delete, e))?;
        inner.wal.tail = tail;
        inner.index.drain(..n);
        inner.first = upto + 1;
        inner.forget(|k| k > upto);
        Ok(())
    }
}
