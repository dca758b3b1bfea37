//! One inode open in this client: its [`OpenInode`] (shared by every
//! handle on it) and the [`FileState`] behind its lock — layout and
//! capabilities, the dirty extents of the write-back buffer, write-behind
//! requests in flight, and the read-ahead window. The I/O that moves this
//! state is in [`crate::file`].

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Instant;

use bytes::Bytes;
use proto::layout::Layout;
use proto::mds::{Creds, Grant};
use tokio::sync::OnceCell;
use tokio::task::JoinHandle;

use crate::error::{FsError, Result};

/// A write-behind request in flight: its byte range and its task.
pub(crate) type Flight = (u64, u64, JoinHandle<Result<crate::file::WriteDone>>);

/// A read-ahead window being fetched: range, the write generation it was
/// started at, and where its bytes will be (None if the fetch failed).
pub(crate) type Pending = (u64, u64, u64, Arc<OnceCell<Option<Bytes>>>);

/// The state of one open inode. Invariants: `dirty` extents never overlap
/// or touch; `dirty_bytes` is their total; `size` ≥ every dirty extent's
/// end; `committed` ≤ `size` unless another client truncated.
pub struct FileState {
    /// Layout (None until the MDS places the file).
    pub layout: Option<Layout>,
    /// Capabilities held.
    pub grants: Vec<Grant>,
    /// Whether `grants` carry write rights.
    pub write_caps: bool,
    /// Credentials the capabilities were asked with.
    pub creds: Creds,
    /// Length as this client knows it.
    pub size: u64,
    /// Whether data changed since the last size commit.
    pub modified: bool,
    /// The modification time was set explicitly (utimens) after the last
    /// data change: the next length commit keeps it instead of stamping
    /// the time of the commit over it.
    pub times_set: bool,
    /// When data was last written here since the last commit (ns; 0:
    /// not by a write): the mtime the commit gives, as a local file
    /// system's write would.
    pub written_at: i64,
    pub(crate) dirty: BTreeMap<u64, Vec<u8>>,
    pub(crate) dirty_bytes: u64,
    pub(crate) dirty_since: Option<Instant>,
    pub(crate) inflight: VecDeque<Flight>,
    pub(crate) error: Option<FsError>,
    /// Some write-behind of this file failed since the last write-out of
    /// a closed file looked ([`crate::closed`]): bytes left the buffer
    /// and reached no copy.
    pub(crate) lost: bool,
    /// Since when a closed file's write-out has failed in a way that may
    /// pass ([`crate::closed`]): it is kept and tried again until then
    /// plus [`crate::closed::KEEP_TRYING`].
    pub(crate) failing_since: Option<Instant>,
    pub(crate) existing: HashSet<(u64, u32)>,
    pub(crate) ra: Option<(u64, Bytes)>,
    pub(crate) pending: Option<Pending>,
    pub(crate) seq_next: u64,
    pub(crate) window: u64,
    /// Which version of the bytes and length the caches hold: changed
    /// by every write and change of length ([`FileState::new_generation`]);
    /// unique in the process, so an inode opened again never meets a
    /// generation it had before (lengths learnt are keyed by it).
    pub(crate) gen_: u64,
    /// Handles open on the inode.
    pub handles: usize,
}

/// One inode open in this client.
pub struct OpenInode {
    /// Namespace inode number.
    pub ino: u64,
    /// Its state.
    pub st: tokio::sync::Mutex<FileState>,
    /// `FileState::size`, readable without waiting for the state lock
    /// (which a flush holds across network round trips); updated with it.
    pub size: AtomicU64,
    /// When this client last wrote data here not yet committed (ns; 0:
    /// none since the times were last set), so a stat shows the mtime the
    /// write gave before the commit carries it.
    pub written_ns: std::sync::atomic::AtomicI64,
}

impl OpenInode {
    /// A freshly opened inode.
    pub fn new(
        ino: u64,
        layout: Option<Layout>,
        grants: Vec<Grant>,
        write: bool,
        creds: Creds,
        size: u64,
    ) -> OpenInode {
        OpenInode {
            ino,
            size: AtomicU64::new(size),
            written_ns: std::sync::atomic::AtomicI64::new(0),
            st: tokio::sync::Mutex::new(FileState {
                layout,
                grants,
                write_caps: write,
                creds,
                size,
                modified: false,
                times_set: false,
                written_at: 0,
                dirty: BTreeMap::new(),
                dirty_bytes: 0,
                dirty_since: None,
                inflight: VecDeque::new(),
                error: None,
                lost: false,
                failing_since: None,
                existing: HashSet::new(),
                ra: None,
                pending: None,
                seq_next: 0,
                window: 0,
                gen_: next_generation(),
                handles: 0,
            }),
        }
    }
}

impl FileState {
    /// Adds a dirty extent, merging with the extents it overlaps or
    /// touches. The merged extent reuses the buffer of the extent it
    /// starts with, grown in place: a run of appends costs what it writes
    /// (amortized), not a copy of everything buffered so far per append.
    pub(crate) fn add_dirty(&mut self, off: u64, data: &[u8]) -> i64 {
        let end = off + data.len() as u64;
        let mut olds = Vec::new();
        for (&a, v) in self.dirty.range(..=end).rev() {
            if a + (v.len() as u64) < off {
                break;
            }
            olds.push(a);
        }
        // Lowest first: the first may become the merged buffer.
        olds.reverse();
        let (mut start, mut stop) = (off, end);
        let mut parts = Vec::with_capacity(olds.len());
        let mut freed = 0u64;
        for a in olds {
            if let Some(v) = self.dirty.remove(&a) {
                start = start.min(a);
                stop = stop.max(a + v.len() as u64);
                freed += v.len() as u64;
                parts.push((a, v));
            }
        }
        let len = (stop - start) as usize;
        let mut rest = parts.into_iter().peekable();
        let mut buf = match rest.peek() {
            Some((a, _)) if *a == start => rest.next().map(|(_, v)| v).unwrap_or_default(),
            _ => Vec::new(),
        };
        if buf.capacity() < len {
            // Room for more appends than this one: as much again as the
            // extent holds, 4 MiB at most (so the slack, which
            // `dirty_bytes` does not count, stays under both).
            buf.reserve_exact(len - buf.len() + len.min(4 << 20));
        }
        buf.resize(len, 0);
        for (a, v) in rest {
            let at = (a - start) as usize;
            buf[at..at + v.len()].copy_from_slice(&v);
        }
        let at = (off - start) as usize;
        buf[at..at + data.len()].copy_from_slice(data);
        let grown = buf.len() as u64;
        self.dirty.insert(start, buf);
        self.dirty_bytes = self.dirty_bytes + grown - freed;
        grown as i64 - freed as i64
    }

    pub(crate) fn dirty_overlaps(&self, off: u64, len: u64) -> bool {
        let end = off + len;
        self.dirty
            .range(..end)
            .next_back()
            .is_some_and(|(&a, v)| a + v.len() as u64 > off)
            || self
                .inflight
                .iter()
                .any(|(lo, hi, _)| *lo < end && *hi > off)
    }

    /// Whether anything is buffered or in flight.
    pub fn busy(&self) -> bool {
        !self.dirty.is_empty() || !self.inflight.is_empty()
    }

    /// The bytes or the length changed: caches keyed by the old
    /// generation no longer hold.
    pub(crate) fn new_generation(&mut self) {
        self.gen_ = next_generation();
    }

    /// Data changed: a length commit is due, stamped with its own time.
    pub(crate) fn mark_modified(&mut self) {
        self.modified = true;
        self.times_set = false;
        // A change other than a write: the commit stamps its own time
        // (a write sets its time after this).
        self.written_at = 0;
    }

    /// Reports (and clears) a write-behind failure.
    pub(crate) fn take_error(&mut self) -> Result<()> {
        match self.error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// A generation no file state had before in this process.
fn next_generation() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dirty_extents_merge_and_keep_the_newest_bytes() {
        let f = OpenInode::new(1, None, Vec::new(), true, Creds::root(), 0);
        let mut st = f.st.try_lock().unwrap();
        st.add_dirty(10, &[1; 10]);
        st.add_dirty(30, &[2; 10]);
        assert_eq!(st.dirty.len(), 2);
        assert_eq!(st.dirty_bytes, 20);
        // Touching the first and overlapping the second merges all three.
        st.add_dirty(20, &[3; 15]);
        assert_eq!(st.dirty.len(), 1);
        let v = &st.dirty[&10];
        assert_eq!(v.len(), 30);
        assert_eq!(&v[0..10], &[1; 10]);
        assert_eq!(&v[10..25], &[3; 15]);
        assert_eq!(&v[25..30], &[2; 5]);
        assert_eq!(st.dirty_bytes, 30);
        assert!(st.dirty_overlaps(39, 5));
        assert!(!st.dirty_overlaps(40, 5));
        assert!(!st.dirty_overlaps(0, 10));
    }

    /// 4 KiB appends up to 64 MiB grow one buffer in place: the bytes
    /// copied stay about what was written (before, each append copied the
    /// whole extent again: about 512 GiB here).
    #[test]
    fn appends_grow_one_buffer_in_place() {
        let f = OpenInode::new(1, None, Vec::new(), true, Creds::root(), 0);
        let mut st = f.st.try_lock().unwrap();
        let block = [7u8; 4096];
        let started = std::time::Instant::now();
        let mut moves = 0;
        let mut last = std::ptr::null();
        for i in 0..16_384u64 {
            st.add_dirty(i * 4096, &block);
            let p = st.dirty[&0].as_ptr();
            if p != last {
                moves += 1;
                last = p;
            }
        }
        assert_eq!(st.dirty.len(), 1);
        assert_eq!(st.dirty_bytes, 64 << 20);
        assert!(
            moves < 40,
            "the buffer moved {moves} times in 16,384 appends"
        );
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
    }

    proptest::proptest! {
        /// Whatever the writes, the buffered extents hold the newest byte
        /// at every offset written, nothing else, and never touch.
        #[test]
        fn dirty_extents_match_a_byte_map(
            writes in proptest::collection::vec((0u64..300, 1usize..40, proptest::prelude::any::<u8>()), 1..40)
        ) {
            let f = OpenInode::new(1, None, Vec::new(), true, Creds::root(), 0);
            let mut st = f.st.try_lock().unwrap();
            let mut model = std::collections::BTreeMap::new();
            for (off, len, b) in writes {
                st.add_dirty(off, &vec![b; len]);
                for o in off..off + len as u64 {
                    model.insert(o, b);
                }
            }
            let mut seen = std::collections::BTreeMap::new();
            let mut prev_end = None;
            for (&a, v) in &st.dirty {
                if let Some(e) = prev_end {
                    proptest::prop_assert!(a > e, "extents touch or overlap");
                }
                prev_end = Some(a + v.len() as u64);
                for (i, b) in v.iter().enumerate() {
                    seen.insert(a + i as u64, *b);
                }
            }
            proptest::prop_assert_eq!(&seen, &model);
            proptest::prop_assert_eq!(st.dirty_bytes, model.len() as u64);
        }
    }
}
