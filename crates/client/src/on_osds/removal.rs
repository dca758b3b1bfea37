//! When a file with no name left loses its objects, with the namespace on
//! the OSDs (no server keeps unlinked files for their holders here).
//!
//! Not at once, but two cache windows (`attr_timeout`) and
//! [`STALL_MARGIN`] after the name went or, if it was open in this client
//! then, after its last release here: a read-only open in another client
//! may be answered from its cached entry for one window, and its reads
//! follow the open — on a loaded machine, after a stall of the reader
//! (with one window, a reader on another mount opened the old file just
//! before the window ended and its read found no objects: ESTALE, 2 of 3
//! runs of the editor's-save test; with two windows and no margin, 1 of 7
//! runs beside the rest of the suite); an open in this one may have
//! resolved the name just before the unlink or rename. Removed at once,
//! such a file read its old length of zeros (an editor's save read
//! while it replaced the file); kept for the window, it reads its last
//! version whole, and an open after that asks the namespace and finds
//! the new file. A file opened here meanwhile waits for its last release.
//! The write-back timer removes what is due
//! ([`crate::namespace::Namespace::remove_due`]); `sync_all` removes all.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use osdns::Inode;

use super::OsdNamespace;
use crate::error::Result;
use crate::namespace::OpenHere;

/// Added to the two cache windows a file's objects wait: a reader
/// that opened the file from its cache may be descheduled between its
/// open and its read.
pub const STALL_MARGIN: Duration = Duration::from_secs(5);

/// Files waiting to lose their objects.
pub(super) struct Removals {
    grace: Duration,
    /// Unlinked while open here: removed at the last release.
    doomed: Mutex<HashMap<u64, (u32, Inode)>>,
    /// Not open here when unlinked: removed once due, in order.
    waiting: Mutex<Vec<(Instant, u64, u32, Inode)>>,
}

impl Removals {
    /// Files wait two cache windows of `window` and [`STALL_MARGIN`].
    pub(super) fn new(window: Duration) -> Removals {
        Removals {
            grace: 2 * window + STALL_MARGIN,
            doomed: Mutex::new(HashMap::new()),
            waiting: Mutex::new(Vec::new()),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl OsdNamespace {
    /// An inode with no names left: remembered for the last local
    /// release, or for the cache window.
    pub(super) async fn gone(&self, ino: u64, osd: u32, i: Inode, open_here: bool) -> Result<()> {
        let r = &self.removals;
        if open_here {
            lock(&r.doomed).insert(ino, (osd, i));
        } else {
            lock(&r.waiting).push((Instant::now() + r.grace, ino, osd, i));
        }
        Ok(())
    }

    /// After the last local handle of `ino` closed: if it was unlinked
    /// meanwhile, its objects wait the cache window too (an open that
    /// resolved its name before it went may still come).
    pub async fn released(&self, ino: u64) -> Result<()> {
        let r = &self.removals;
        let d = lock(&r.doomed).remove(&ino);
        if let Some((osd, i)) = d {
            lock(&r.waiting).push((Instant::now() + r.grace, ino, osd, i));
        }
        Ok(())
    }

    /// Removes the objects of the files whose wait is over (`all`: of
    /// every waiting file); one open here now waits for its last release.
    pub async fn remove_due(&self, open_here: OpenHere<'_>, all: bool) -> Result<()> {
        let now = Instant::now();
        let due: Vec<(Instant, u64, u32, Inode)> = {
            let mut w = lock(&self.removals.waiting);
            let n = w.iter().take_while(|x| all || x.0 <= now).count();
            w.drain(..n).collect()
        };
        let mut first = Ok(());
        for (_, ino, osd, i) in due {
            if open_here(ino) {
                lock(&self.removals.doomed).insert(ino, (osd, i));
            } else if let Err(e) = self.fs.destroy(ino, osd, &i).await {
                tracing::warn!(ino, error = %e, "removing an unlinked file's objects failed");
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
        first
    }
}
