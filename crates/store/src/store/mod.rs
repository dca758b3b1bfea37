//! The object store: T10-style partitions and objects on one [`Device`].
//!
//! How a change becomes durable: data goes to freshly allocated blocks
//! (copy-on-write, so a crash never mixes old and new bytes of one write);
//! then the metadata change is applied in memory and appended as a journal
//! record; the caller returns once the committer thread has written the batch
//! holding that record and flushed the device. Concurrent callers share one
//! batch and one flush (group commit). Blocks a change releases become
//! allocatable only after its batch is durable.

mod commit;
mod data;
mod objects;
pub(crate) mod open;
mod ordered;
mod punch;

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use crate::alloc::{Allocator, Extent};
use crate::device::{BLOCK, Device};
use crate::error::{Result, StoreError};
use crate::format::codec::Writer;
use crate::format::label::Label;
use crate::meta::Meta;

pub use objects::{Attribute, CasOutcome, ListPage, ObjectInfo, SpaceInfo};
pub use open::{
    DEFAULT_MAX_ATTR_BYTES, DEFAULT_MAX_ATTRS_PER_OBJECT, FormatOptions, OpenOptions, format,
};

/// Partition created by mkfs and used when none is named.
pub const DEFAULT_PARTITION: u64 = 0x10000;
/// Largest logical object size (2^48 bytes).
pub const MAX_OBJECT_SIZE: u64 = 1 << 48;
const STRIPES: usize = 64;

/// Counters of the commit machinery, for benchmarks and metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommitStats {
    /// Journal batches written.
    pub batches: u64,
    /// Records committed.
    pub records: u64,
    /// Checkpoints written.
    pub checkpoints: u64,
    /// Device flushes issued by the committer.
    pub flushes: u64,
}

pub(crate) struct Ring {
    /// Next write position, relative to the journal region.
    pub head: u64,
    /// Bytes written (or skipped at wrap) since the last checkpoint.
    pub live: u64,
}

pub(crate) struct State {
    pub meta: Meta,
    pub alloc: Box<dyn Allocator>,
    pub pending: Writer,
    pub pending_records: u32,
    pub pending_frees: Vec<Extent>,
    pub pending_seq: u64,
    pub durable_seq: u64,
    pub ring: Ring,
    pub slot_gen: u64,
    pub ckpt_extents: Vec<Extent>,
    /// Blocks freed by the last durable batch: they stay unallocated until
    /// the next batch (or a checkpoint) is durable too, because replay checks
    /// the data of the last batch's records, including records a later record
    /// of the same batch replaced.
    pub deferred_frees: Vec<Extent>,
    pub failed: Option<String>,
    pub stop: bool,
    pub ckpt_wanted: bool,
    pub stats: CommitStats,
}

pub(crate) struct Inner {
    pub dev: Arc<dyn Device>,
    pub label: Label,
    pub state: Mutex<State>,
    pub durable_cv: Condvar,
    pub work_cv: Condvar,
    pub stripes: Vec<Mutex<()>>,
    pub read_only: bool,
    pub checkpoint_fraction: f64,
    pub max_attr_bytes: u64,
    pub max_attrs_per_object: usize,
}

/// An open store. Thread-safe: share it with `Arc` and call from many threads.
pub struct Store {
    inner: Arc<Inner>,
    committer: Mutex<Option<JoinHandle<()>>>,
}

/// Which stripe lock object `oid` of partition `pid` takes.
fn stripe_index(pid: u64, oid: u64) -> usize {
    let h = (pid.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ oid).wrapping_mul(0xff51_afd7_ed55_8ccd);
    (h >> 58) as usize % STRIPES
}

impl Inner {
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Locks the state, refusing if an earlier device failure poisoned it.
    pub(crate) fn lock_ok(&self) -> Result<MutexGuard<'_, State>> {
        let st = self.lock();
        if let Some(f) = &st.failed {
            return Err(StoreError::Failed(f.clone()));
        }
        if self.read_only {
            return Err(StoreError::invalid("store", "opened read-only"));
        }
        Ok(st)
    }

    pub(crate) fn stripe(&self, pid: u64, oid: u64) -> MutexGuard<'_, ()> {
        self.stripes[stripe_index(pid, oid)]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// The stripe locks of two objects, taken in a fixed order (one lock
    /// when they share a stripe), so two movers never wait on each other.
    pub(crate) fn stripes2(
        &self,
        a: (u64, u64),
        b: (u64, u64),
    ) -> (MutexGuard<'_, ()>, Option<MutexGuard<'_, ()>>) {
        let (i, j) = (stripe_index(a.0, a.1), stripe_index(b.0, b.1));
        let take = |k: usize| self.stripes[k].lock().unwrap_or_else(|e| e.into_inner());
        match i.cmp(&j) {
            std::cmp::Ordering::Equal => (take(i), None),
            std::cmp::Ordering::Less => {
                let first = take(i);
                (first, Some(take(j)))
            }
            std::cmp::Ordering::Greater => {
                let first = take(j);
                (first, Some(take(i)))
            }
        }
    }

    pub(crate) fn data_offset(&self, block: u64) -> u64 {
        self.label.data_off + block * BLOCK
    }
}

impl Store {
    /// The options this store was opened with (to open it again alike).
    pub fn open_options(&self) -> OpenOptions {
        OpenOptions {
            read_only: self.inner.read_only,
            checkpoint_fraction: self.inner.checkpoint_fraction,
            max_attr_bytes: self.inner.max_attr_bytes,
            max_attrs_per_object: self.inner.max_attrs_per_object,
        }
    }

    /// The label (identity and geometry) of the store.
    pub fn label(&self) -> &Label {
        &self.inner.label
    }

    /// The device the store runs on.
    pub fn device(&self) -> &Arc<dyn Device> {
        &self.inner.dev
    }

    /// Commit counters so far.
    pub fn commit_stats(&self) -> CommitStats {
        self.inner.lock().stats.clone()
    }

    /// The sequence number of the newest journal batch on the device. It
    /// only grows, and a restart replays at least up to it, so an OSD that
    /// reports a smaller one than before runs on an older copy of its store.
    pub fn durable_seq(&self) -> u64 {
        self.inner.lock().durable_seq
    }

    /// Writes a checkpoint now and waits for it (normally automatic).
    pub fn checkpoint(&self) -> Result<()> {
        let mut st = self.inner.lock_ok()?;
        st.ckpt_wanted = true;
        let seq = st.pending_seq;
        self.inner.work_cv.notify_all();
        commit::wait(&self.inner, st, seq)
    }

    /// Waits until every change made so far is durable, then flushes the device.
    pub fn flush(&self) -> Result<()> {
        let st = self.inner.lock_ok()?;
        // Also covers a batch the committer has taken but not yet written.
        let seq = if st.pending_records > 0 {
            st.pending_seq
        } else {
            st.pending_seq - 1
        };
        commit::wait(&self.inner, st, seq)?;
        self.inner
            .dev
            .flush()
            .map_err(|e| StoreError::io("device flush", e))
    }

    /// Stops the committer after a final checkpoint (marked clean).
    pub fn close(self) -> Result<()> {
        self.shutdown()
    }

    fn shutdown(&self) -> Result<()> {
        let handle = self
            .committer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let Some(handle) = handle else {
            return Ok(());
        };
        {
            let mut st = self.inner.lock();
            st.stop = true;
            self.inner.work_cv.notify_all();
        }
        let _ = handle.join();
        match &self.inner.lock().failed {
            Some(f) => Err(StoreError::Failed(f.clone())),
            None => Ok(()),
        }
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            tracing::warn!(error = %e, "store closed after a failure");
        }
    }
}

/// Blocks data and metadata allocations must leave free when the metadata
/// encodes to at most `meta_bytes`: room for two checkpoints (the old one keeps
/// its blocks while a new one is written, and a checkpoint written at open
/// after a crash must leave room for the next), plus slack for chunk headers.
pub(crate) fn reserve_blocks(meta_bytes: u64) -> u64 {
    (2 * meta_bytes + meta_bytes / 4).div_ceil(BLOCK) + 64
}

/// Nanoseconds since the Unix epoch.
pub(crate) fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}
