//! Byte-range locks between clients: every lock and unlock goes to the MDS,
//! which arbitrates between all mounts (see the MDS's `service::locks`);
//! this client keeps a copy of what it holds, to report it every
//! [`HOLD_INTERVAL_MS`] (which keeps the locks alive, and gives them back
//! to a restarted MDS) and to know, at a close, whether there is anything
//! to release. A blocking wait asks again with a growing pause; it gives
//! up once the handle it was made through is closed.
//!
//! [`HOLD_INTERVAL_MS`]: proto::mds::HOLD_INTERVAL_MS

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use posix::locks::FileLocks;
use proto::locks::{LOCKS_REPORT_MAX, LockKind, LockSpec};
use proto::mds::{Creds, Errno, MdsReply, Op};

use crate::client::Client;
use crate::error::{FsError, Result};
use crate::state::lock;

/// An unlock of everything `owner` holds on a file.
fn unlock_all(owner: u64) -> LockSpec {
    LockSpec {
        owner,
        start: 0,
        end: u64::MAX,
        kind: LockKind::Unlock,
        pid: 0,
    }
}

/// The longest pause between two tries of a blocking lock.
const WAIT_MAX: Duration = Duration::from_millis(250);

/// The locks this client holds, per inode, by lock owner.
#[derive(Default)]
pub struct HeldLocks {
    files: Mutex<HashMap<u64, FileLocks<u64>>>,
    /// Releases the MDS has not confirmed yet: (inode, the unlock), sent
    /// again with the next report, or before the same owner's next lock
    /// on the inode.
    unsent: Mutex<Vec<(u64, LockSpec)>>,
    /// The lock owners each handle was used with: an open file's own
    /// (OFD) locks go when the handle is released.
    by_handle: Mutex<HashMap<u64, std::collections::HashSet<u64>>>,
}

impl HeldLocks {
    fn set(&self, ino: u64, l: &LockSpec) {
        let kind = posix::locks::kind_of(l.kind);
        let mut m = lock(&self.files);
        let f = m.entry(ino).or_default();
        f.set(l.owner, l.start, l.end, kind, l.pid);
        if f.is_empty() {
            m.remove(&ino);
        }
    }

    /// Whether `owner` holds any lock on `ino`.
    fn owns(&self, ino: u64, owner: u64) -> bool {
        lock(&self.files)
            .get(&ino)
            .is_some_and(|f| f.held().iter().any(|r| r.owner == owner))
    }

    /// Every lock held, as a LOCKS HELD report lists them (at most
    /// [`LOCKS_REPORT_MAX`]).
    pub fn report(&self) -> Vec<(u64, LockSpec)> {
        let m = lock(&self.files);
        m.iter()
            .flat_map(|(&ino, f)| f.held().iter().map(move |r| (ino, r.spec(r.owner))))
            .take(LOCKS_REPORT_MAX)
            .collect()
    }
}

impl Client {
    async fn lock_call(&self, c: &Creds, op: Op) -> Result<MdsReply> {
        // The MDS must know a file made under a directory lease first.
        self.inner().leases.drain().await?;
        self.inner()
            .mds
            .call_as(c.clone(), op)
            .await
            .map_err(crate::error::from_call)
    }

    /// Sends now the releases still owed for `owner` on `ino` (before a
    /// new lock of that owner, which they must not undo later).
    async fn settle_owed(&self, ino: u64, owner: u64) -> Result<()> {
        let owed: Vec<LockSpec> = {
            let mut u = lock(&self.inner().locks.unsent);
            let (mine, rest): (Vec<_>, Vec<_>) = u
                .drain(..)
                .partition(|(i, l)| *i == ino && l.owner == owner);
            *u = rest;
            mine.into_iter().map(|(_, l)| l).collect()
        };
        for (k, l) in owed.iter().enumerate() {
            if let Err(e) = self
                .lock_call(&self.creds(), Op::Lock { ino, lock: *l })
                .await
            {
                lock(&self.inner().locks.unsent).extend(owed[k..].iter().map(|l| (ino, *l)));
                return Err(e);
            }
        }
        Ok(())
    }

    /// Sets or removes lock `l` on the file open as handle `fh` (F_SETLK;
    /// with `wait`, F_SETLKW: until it is granted, the handle closes, or
    /// `interrupted` says the caller gave up — EINTR).
    ///
    /// As NFS does for programs that share a file under locks (sqlite),
    /// every lock request first writes out and commits this client's
    /// changes to the file (an unlock or a downgrade hands them on), and a
    /// granted lock drops what this client had cached of it and asks its
    /// length anew ([`Client::revalidate`]), and forgets the names cached
    /// beside it ([`Client::forget_names_beside`]); the caller drops the
    /// kernel's cache of both too ([`Client::parent_of`] says where). A write lock needs a handle open for writing.
    pub async fn setlk(
        &self,
        c: &Creds,
        fh: u64,
        l: LockSpec,
        wait: bool,
        interrupted: &(dyn Fn() -> bool + Send + Sync),
    ) -> Result<()> {
        let h = self.handle(fh)?;
        let ino = h.inode.ino;
        if l.kind == LockKind::Write && !h.write {
            return Err(FsError::new(
                Errno::BadF,
                "a write lock needs a descriptor open for writing",
            ));
        }
        let mut flushed = {
            let mut st = h.inode.st.lock().await;
            crate::file::commit(self.inner(), ino, &mut st).await
        };
        if l.kind != LockKind::Unlock {
            std::mem::replace(&mut flushed, Ok(()))?;
            self.settle_owed(ino, l.owner).await?;
        }
        let mut pause = Duration::from_millis(5);
        loop {
            match self.lock_call(c, Op::Lock { ino, lock: l }).await {
                Ok(_) => {
                    self.inner().locks.set(ino, &l);
                    lock(&self.inner().locks.by_handle)
                        .entry(fh)
                        .or_default()
                        .insert(l.owner);
                    if self.handle(fh).is_err() {
                        // Closed while it waited: nothing will release it.
                        self.unlock_owner(ino, l.owner).await?;
                    } else if l.kind != LockKind::Unlock {
                        self.forget_names_beside(ino);
                        if let Err(e) = self.revalidate(c, &h.inode).await {
                            // The lock is held: say so; the next read asks.
                            tracing::debug!(ino, error = %e, "revalidating a locked file failed");
                        }
                    }
                    // An unlock is done even if the changes before it
                    // could not be written out; that failure is reported.
                    return flushed;
                }
                // A restarted MDS taking locks back: always wait.
                Err(e) if e.is(Errno::Busy) => {}
                Err(e) if e.is(Errno::Again) && wait => {}
                Err(e) => {
                    if e.is(Errno::Io) && l.kind != LockKind::Unlock {
                        // The MDS may have granted it before the answer
                        // was lost: owe its release.
                        let undo = LockSpec {
                            kind: LockKind::Unlock,
                            ..l
                        };
                        lock(&self.inner().locks.unsent).push((ino, undo));
                    }
                    if l.kind == LockKind::Unlock {
                        self.inner().locks.set(ino, &l);
                        lock(&self.inner().locks.unsent).push((ino, l));
                    }
                    return Err(e);
                }
            }
            if self.handle(fh).is_err() {
                return Err(FsError::new(
                    Errno::BadF,
                    format!("handle {fh} closed while waiting for a lock"),
                ));
            }
            if interrupted() {
                return Err(FsError::new(
                    Errno::Intr,
                    "the waiting process was interrupted",
                ));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(WAIT_MAX);
        }
    }

    /// After a lock on `ino` was granted: forgets the names cached in its
    /// directory (not its own), so what a program checks under the lock
    /// is asked anew — sqlite looks for a hot `-journal` beside the
    /// database once it holds a lock, and one another mount just removed
    /// must not be found. Says the directory.
    pub fn forget_names_beside(&self, ino: u64) -> Option<u64> {
        let parent = self.inner().meta.parent_of(ino)?;
        self.forget_names_in(parent, ino);
        Some(parent)
    }

    /// Forgets the names cached in directory `dir` but `keep`'s (see
    /// [`Client::forget_names_beside`]; for a caller that knows the
    /// directory when this client's cache no longer does).
    pub fn forget_names_in(&self, dir: u64, keep: u64) {
        let meta = &self.inner().meta;
        meta.cache().remove_children(dir, keep);
        meta.changed(dir);
        self.inner().absent.forget(dir);
    }

    /// The directory this client last saw `ino` in, if it has seen it.
    pub fn parent_of(&self, ino: u64) -> Option<u64> {
        self.inner().meta.parent_of(ino)
    }

    /// Forgets what this client cached of open file `f` (read-ahead, its
    /// length and attributes) after writing out its own changes: another
    /// client may have changed it.
    pub async fn revalidate(&self, c: &Creds, f: &crate::open_file::OpenInode) -> Result<()> {
        let mut st = f.st.lock().await;
        crate::file::commit(self.inner(), f.ino, &mut st).await?;
        let asked = self.inner().meta.commits.ask();
        let mut a = self.inner().ns.getattr(c, f.ino).await?;
        self.inner().meta.cache_attr(&mut a, asked.since());
        crate::file::truncated(f, &mut st, a.size);
        Ok(())
    }

    /// The lock of another owner (in any mount) in the way of `l` on the
    /// file open as `fh`, if any (F_GETLK). Waits out an MDS's grace.
    pub async fn getlk(&self, c: &Creds, fh: u64, l: LockSpec) -> Result<Option<LockSpec>> {
        let ino = self.handle(fh)?.inode.ino;
        loop {
            match self.lock_call(c, Op::TestLock { ino, lock: l }).await {
                Ok(MdsReply::LockedBy(x)) => return Ok(x),
                Ok(other) => {
                    return Err(FsError::new(
                        Errno::Io,
                        format!("TEST LOCK answered {other:?}"),
                    ));
                }
                Err(e) if e.is(Errno::Busy) => {
                    tokio::time::sleep(WAIT_MAX).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Releases every lock `owner` holds on `ino` (a close: POSIX locks go
    /// at any close by their process, `flock` locks at the last close of
    /// their open file). Costs nothing when it holds none.
    pub async fn unlock_owner(&self, ino: u64, owner: u64) -> Result<()> {
        if !self.inner().locks.owns(ino, owner) {
            return Ok(());
        }
        let l = unlock_all(owner);
        self.inner().locks.set(ino, &l);
        let r = self
            .lock_call(&self.creds(), Op::Lock { ino, lock: l })
            .await;
        if r.is_err() {
            lock(&self.inner().locks.unsent).push((ino, l));
        }
        r.map(|_| ())
    }

    /// At the release of handle `fh` of inode `ino`: every owner that
    /// locked through it is done with it (a process's POSIX locks went at
    /// its close already), so what is left is the open file's own
    /// (`flock`, OFD) and goes now.
    pub async fn release_locks(&self, fh: u64, ino: u64) -> Result<()> {
        let owners = lock(&self.inner().locks.by_handle).remove(&fh);
        let mut r = Ok(());
        for o in owners.into_iter().flatten() {
            r = r.and(self.unlock_owner(ino, o).await);
        }
        r
    }
}

/// What the client's reporter sends every interval: the releases still
/// owed, then the locks held (nothing when it holds none).
pub(crate) async fn report(inner: &crate::state::Inner) {
    let owed = std::mem::take(&mut *lock(&inner.locks.unsent));
    for (ino, l) in owed {
        if let Err(e) = inner.mds.call(Op::Lock { ino, lock: l }).await {
            tracing::debug!(ino, error = %e, "releasing a lock failed; trying again later");
            lock(&inner.locks.unsent).push((ino, l));
        }
    }
    let locks = inner.locks.report();
    if !locks.is_empty()
        && let Err(e) = inner.mds.call(Op::LocksHeld { locks }).await
    {
        tracing::debug!(error = %e, "reporting the locks held failed");
    }
}
