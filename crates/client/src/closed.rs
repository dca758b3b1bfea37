//! Files closed with their data still buffered: a close of a file made
//! under a directory lease this client holds leaves the writing to later
//! ([`crate::leases::DirLeases::defer_close`]). They stay among the open
//! inodes, without handles, until [`write_out`] — from the write-back
//! timer, before the lease goes back, or before this client renames,
//! links or removes a name — writes their data and commits their length.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Errno, FsError};
use crate::file;
use crate::open_file::OpenInode;
use crate::state::{Inner, lock};

/// Open inodes (with or without handles) past which a close writes its
/// data out at once: bounds the files kept this way and the work a
/// lease's return waits for.
pub const DEFERRED_MAX: usize = 4096;

/// Files written out together.
const AT_ONCE: usize = 16;

/// How long a closed file whose write-out keeps failing in a way that may
/// pass (an MDS or OSDs away) is kept and tried again before its data is
/// given up.
pub const KEEP_TRYING: Duration = Duration::from_secs(3600);

/// The inodes closed with data still to write: all of them, or those of
/// `only`.
fn closed(inner: &Inner, only: Option<&[u64]>) -> Vec<Arc<OpenInode>> {
    let with_handles: HashSet<u64> = lock(&inner.handles).values().map(|h| h.inode.ino).collect();
    let inodes = lock(&inner.inodes);
    let pick = |f: &Arc<OpenInode>| (!with_handles.contains(&f.ino)).then(|| f.clone());
    match only {
        // Named by a lease going back: written out even if a descriptor
        // is still open (a close whose release has not come yet).
        Some(inos) => inos.iter().filter_map(|i| inodes.get(i).cloned()).collect(),
        None => inodes.values().filter_map(pick).collect(),
    }
}

/// Writes out and commits every closed file of `only` (every one, for
/// `None`), [`AT_ONCE`] at a time, and forgets those left clean. A
/// failure is logged and kept for the next `syncfs` or `fsync` of a
/// directory — the close that left the data had already succeeded.
pub async fn write_out(inner: &Arc<Inner>, only: Option<&[u64]>) {
    write_out_older(inner, only, None).await
}

/// [`write_out`] of the closed files whose buffered data is older than
/// `delay` (the write-back timer's pass; `None`: all).
pub async fn write_out_older(inner: &Arc<Inner>, only: Option<&[u64]>, delay: Option<Duration>) {
    if lock(&inner.inodes).is_empty() {
        return;
    }
    let files = closed(inner, only);
    let mut running = tokio::task::JoinSet::new();
    for f in files {
        if running.len() >= AT_ONCE {
            running.join_next().await;
        }
        let inner = inner.clone();
        let forced = only.is_some();
        running.spawn(async move { write_one(&inner, &f, delay, forced).await });
    }
    while running.join_next().await.is_some() {}
}

/// [`write_out_older`] of one file, if it has no handle.
async fn write_one(inner: &Arc<Inner>, f: &Arc<OpenInode>, delay: Option<Duration>, forced: bool) {
    let mut st = f.st.lock().await;
    if st.handles > 0 && !forced {
        return;
    }
    // Data younger than the delay waits (a length alone is committed).
    if let Some(delay) = delay
        && st.dirty_since.is_some_and(|t| t.elapsed() < delay)
    {
        return;
    }
    // Written first, then the length: a failure of either that may pass
    // keeps the file to try again, if every byte is still here. Bytes a
    // write-behind lost count while their error is unreported (once a
    // close or fsync reported it, the file is as a local one is after a
    // failed write-back), and so do any this write-out loses.
    let lost_before = std::mem::take(&mut st.lost) && st.error.is_some();
    // A copy of what is buffered: a write that fails in a way that may
    // pass (an OSD's ticket wanted from an MDS that is away) puts it back
    // for the next try — writing the same bytes again is harmless. Not
    // with a write-behind still in flight: its bytes are not in the copy,
    // and a failure of it must stay a loss (no length over them).
    let saved = (!lost_before && st.inflight.is_empty() && !st.dirty.is_empty())
        .then(|| (st.dirty.clone(), st.dirty_bytes));
    let flushed = file::flush_all(inner, f.ino, &mut st).await;
    let mut lost = lost_before || std::mem::take(&mut st.lost);
    if let (Err(e), Some((dirty, bytes))) = (&flushed, saved)
        && may_pass(e)
        && st.dirty.is_empty()
        && st.inflight.is_empty()
    {
        st.dirty = dirty;
        st.dirty_bytes = bytes;
        st.error = None;
        inner
            .dirty_total
            .fetch_add(bytes, std::sync::atomic::Ordering::Relaxed);
        lost = lost_before;
    }
    let done = match flushed {
        Ok(()) => file::commit(inner, f.ino, &mut st)
            .await
            .map_err(|e| (e, !lost)),
        Err(e) => Err((e, !st.dirty.is_empty() && !lost)),
    };
    if let Err((e, all_here)) = done {
        let first = st.failing_since.is_none();
        let since = *st.failing_since.get_or_insert_with(Instant::now);
        if all_here && may_pass(&e) && since.elapsed() < KEEP_TRYING {
            // Tried again a write-back delay later (`syncfs` reports it
            // meanwhile: it writes every kept file itself).
            st.dirty_since = Some(Instant::now());
            if first {
                tracing::warn!(ino = f.ino, error = %e, "writing out a closed file failed; kept to try again");
            }
            return;
        }
        inner.leases.note_failure(FsError {
            errno: e.errno,
            message: format!("writing out closed file {:#x}: {e}", f.ino),
        });
        // The data left the buffer and was not written, or the failure
        // will not pass: no length is committed over data that was never
        // written (a reader finds the file short, not zero-filled).
        inner
            .dirty_total
            .fetch_sub(st.dirty_bytes, std::sync::atomic::Ordering::Relaxed);
        st.modified = false;
        st.dirty.clear();
        st.dirty_bytes = 0;
        st.dirty_since = None;
        st.error = None;
        tracing::error!(ino = f.ino, error = %e, "writing out a closed file's data failed");
        return;
    }
    st.failing_since = None;
    if st.handles == 0 && !st.busy() && !st.modified {
        inner.forget_open(f);
    }
}

/// Whether a write-out's failure may pass: EIO (an MDS or OSD away or
/// restarting: no capability, no layout, no answer), EBUSY or EAGAIN. A
/// refusal of permission or space is final.
fn may_pass(e: &FsError) -> bool {
    [Errno::Io, Errno::Busy, Errno::Again]
        .iter()
        .any(|&x| e.is(x))
}
