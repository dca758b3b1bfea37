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

/// The longest pause between two tries of a blocking lock.
const WAIT_MAX: Duration = Duration::from_millis(250);

/// The locks this client holds, per inode, by lock owner.
#[derive(Default)]
pub struct HeldLocks {
    files: Mutex<HashMap<u64, FileLocks<u64>>>,
    /// Releases the MDS has not confirmed yet: (inode, owner), sent again
    /// with the next report.
    unsent: Mutex<Vec<(u64, u64)>>,
}

impl HeldLocks {
    fn set(&self, ino: u64, l: &LockSpec) {
        let kind = match l.kind {
            LockKind::Read => Some(false),
            LockKind::Write => Some(true),
            LockKind::Unlock => None,
        };
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
            .flat_map(|(&ino, f)| {
                f.held().iter().map(move |r| {
                    (
                        ino,
                        LockSpec {
                            owner: r.owner,
                            start: r.start,
                            end: r.end,
                            kind: if r.write {
                                LockKind::Write
                            } else {
                                LockKind::Read
                            },
                            pid: r.pid,
                        },
                    )
                })
            })
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
            .map_err(FsError::from)
    }

    /// Sets or removes lock `l` on the file open as handle `fh` (F_SETLK;
    /// with `wait`, F_SETLKW: until it is granted or the handle closes).
    ///
    /// As NFS does for programs that share a file under locks (sqlite), an
    /// unlock first writes out and commits this client's changes to the
    /// file, and a granted lock drops what this client had cached of it
    /// and asks its length anew ([`Client::revalidate`]); the caller drops
    /// the kernel's cache of it too.
    pub async fn setlk(&self, c: &Creds, fh: u64, l: LockSpec, wait: bool) -> Result<()> {
        let h = self.handle(fh)?;
        let ino = h.inode.ino;
        if l.kind == LockKind::Unlock {
            let mut st = h.inode.st.lock().await;
            crate::file::commit(self.inner(), ino, &mut st).await?;
        }
        let mut pause = Duration::from_millis(5);
        loop {
            match self.lock_call(c, Op::Lock { ino, lock: l }).await {
                Ok(_) => {
                    self.inner().locks.set(ino, &l);
                    if self.handle(fh).is_err() {
                        // Closed while it waited: nothing will release it.
                        self.unlock_owner(ino, l.owner).await?;
                    } else if l.kind != LockKind::Unlock {
                        self.revalidate(c, &h.inode).await?;
                    }
                    return Ok(());
                }
                // A restarted MDS taking locks back: always wait.
                Err(e) if e.errno == Errno::Busy.raw() => {}
                Err(e) if e.errno == Errno::Again.raw() && wait => {}
                Err(e) => return Err(e),
            }
            if self.handle(fh).is_err() {
                return Err(FsError::new(
                    Errno::BadF,
                    format!("handle {fh} closed while waiting for a lock"),
                ));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(WAIT_MAX);
        }
    }

    /// Forgets what this client cached of open file `f` (read-ahead, its
    /// length and attributes) after writing out its own changes: another
    /// client may have changed it.
    pub async fn revalidate(&self, c: &Creds, f: &crate::open_file::OpenInode) -> Result<()> {
        let mut st = f.st.lock().await;
        crate::file::commit(self.inner(), f.ino, &mut st).await?;
        let a = self.inner().ns.getattr(c, f.ino).await?;
        self.inner().meta.cache_attr(a.clone());
        crate::file::truncated(f, &mut st, a.size);
        Ok(())
    }

    /// The lock of another owner (in any mount) in the way of `l` on the
    /// file open as `fh`, if any (F_GETLK).
    pub async fn getlk(&self, c: &Creds, fh: u64, l: LockSpec) -> Result<Option<LockSpec>> {
        let ino = self.handle(fh)?.inode.ino;
        match self.lock_call(c, Op::TestLock { ino, lock: l }).await? {
            MdsReply::LockedBy(x) => Ok(x),
            other => Err(FsError::new(
                Errno::Io,
                format!("TEST LOCK answered {other:?}"),
            )),
        }
    }

    /// Releases every lock `owner` holds on `ino` (a close: POSIX locks go
    /// at any close by their process, `flock` locks at the last close of
    /// their open file). Costs nothing when it holds none.
    pub async fn unlock_owner(&self, ino: u64, owner: u64) -> Result<()> {
        if !self.inner().locks.owns(ino, owner) {
            return Ok(());
        }
        let l = LockSpec {
            owner,
            start: 0,
            end: u64::MAX,
            kind: LockKind::Unlock,
            pid: 0,
        };
        self.inner().locks.set(ino, &l);
        let r = self
            .lock_call(&self.creds(), Op::Lock { ino, lock: l })
            .await;
        if r.is_err() {
            lock(&self.inner().locks.unsent).push((ino, owner));
        }
        r.map(|_| ())
    }
}

/// What the client's reporter sends every interval: the releases still
/// owed, then the locks held (nothing when it holds none).
pub(crate) async fn report(inner: &crate::state::Inner) {
    let owed = std::mem::take(&mut *lock(&inner.locks.unsent));
    for (ino, owner) in owed {
        let l = LockSpec {
            owner,
            start: 0,
            end: u64::MAX,
            kind: LockKind::Unlock,
            pid: 0,
        };
        if let Err(e) = inner.mds.call(Op::Lock { ino, lock: l }).await {
            tracing::debug!(ino, error = %e, "releasing a lock failed; trying again later");
            lock(&inner.locks.unsent).push((ino, owner));
        }
    }
    let locks = inner.locks.report();
    if !locks.is_empty()
        && let Err(e) = inner.mds.call(Op::LocksHeld { locks }).await
    {
        tracing::debug!(error = %e, "reporting the locks held failed");
    }
}
