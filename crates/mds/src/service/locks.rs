//! Byte-range locks between clients (`fcntl` locks, and `flock` as NFS
//! emulates it), arbitrated here for every mount in both namespace modes.
//!
//! A lock belongs to (principal, session, owner): the owner is the
//! kernel's lock owner within one mount's session, so a principal can
//! neither take nor drop another's locks. The table lives in memory, as
//! NFS's lock state does, and is soft state kept alive by its sessions: a
//! session that holds locks reports them every [`HOLD_INTERVAL_MS`]
//! ([`Op::LocksHeld`]); a session silent for the hold expiry (its client
//! died or was cut off) loses them. After a restart, the MDS refuses new
//! locks with EBUSY for one hold expiry — the grace in which the sessions'
//! reports take back what they held — and clients wait it out.
//!
//! [`HOLD_INTERVAL_MS`]: proto::mds::HOLD_INTERVAL_MS

use std::collections::HashMap;
use std::time::{Duration, Instant};

use posix::locks::FileLocks;
use posix::perm::{self, R, W};
use proto::locks::{
    LOCKS_PER_FILE, LOCKS_PER_PRINCIPAL, LOCKS_PER_PRINCIPAL_FILE, LOCKS_REPORT_MAX, LockKind,
    LockSpec,
};
use proto::mds::{Creds, Errno, FileKind, MdsError, MdsReply, NamespaceMode};

use super::{Mds, auth, err};
use crate::records::Records;

/// Who holds a lock: (principal, session, the session's lock owner).
type Owner = (u64, u64, u64);

/// Every file's locks, and when each session holding some was last heard.
#[derive(Default)]
pub struct Locks {
    files: HashMap<u64, FileLocks<Owner>>,
    sessions: HashMap<(u64, u64), Instant>,
    per_principal: HashMap<u64, usize>,
    last_prune: Option<Instant>,
}

impl Locks {
    /// Drops the locks of sessions silent for `expiry` (at most once a
    /// second unless `now`).
    fn prune(&mut self, expiry: Duration, now: bool) {
        let every = if now {
            Duration::from_millis(100)
        } else {
            Duration::from_secs(1)
        };
        if self.last_prune.is_some_and(|t| t.elapsed() < every) {
            return;
        }
        self.last_prune = Some(Instant::now());
        let gone: std::collections::HashSet<(u64, u64)> = self
            .sessions
            .iter()
            .filter(|(_, seen)| seen.elapsed() >= expiry)
            .map(|(k, _)| *k)
            .collect();
        if gone.is_empty() {
            return;
        }
        for k in &gone {
            self.sessions.remove(k);
        }
        for f in self.files.values_mut() {
            f.drop_owners(|o| gone.contains(&(o.0, o.1)));
        }
        self.files.retain(|_, f| !f.is_empty());
        self.recount();
    }

    fn recount(&mut self) {
        self.per_principal.clear();
        for r in self.files.values().flat_map(|f| f.held()) {
            *self.per_principal.entry(r.owner.0).or_default() += 1;
        }
    }

    fn count_of(&self, ino: u64, principal: u64) -> usize {
        self.files.get(&ino).map_or(0, |f| {
            f.held().iter().filter(|r| r.owner.0 == principal).count()
        })
    }

    /// Whether `owner` already holds `l` (same kind over the whole range).
    fn has(&self, ino: u64, owner: Owner, l: &LockSpec) -> bool {
        let write = l.kind == LockKind::Write;
        self.files.get(&ino).is_some_and(|f| {
            f.held().iter().any(|r| {
                r.owner == owner && r.write == write && r.start <= l.start && l.end <= r.end
            })
        })
    }

    /// Sets `l` for `owner` on `ino`: EAGAIN if another owner's lock is in
    /// the way, ENOLCK past a bound (only ever for a request that adds to
    /// the caller's own ranges).
    fn set(&mut self, ino: u64, owner: Owner, l: &LockSpec) -> Result<(), MdsError> {
        let kind = posix::locks::kind_of(l.kind);
        let current = self.files.get(&ino);
        if let (Some(write), Some(f)) = (kind, current)
            && let Some(c) = f.conflict(owner, l.start, l.end, write)
        {
            return Err(err(
                Errno::Again,
                format!(
                    "inode {ino:#x}: bytes {}..={} are {} locked by process {} of another client",
                    c.start,
                    c.end,
                    if c.write { "write" } else { "read" },
                    c.pid
                ),
            ));
        }
        if current.is_none() && kind.is_none() {
            return Ok(());
        }
        let before = self.count_of(ino, owner.0);
        let mut trial = current.cloned().unwrap_or_default();
        trial.set(owner, l.start, l.end, kind, l.pid);
        let after = trial.held().iter().filter(|r| r.owner.0 == owner.0).count();
        if after > before {
            let cur = self.per_principal.get(&owner.0).copied().unwrap_or(0);
            let bound = if cur + after - before > LOCKS_PER_PRINCIPAL {
                Some(format!(
                    "this principal holds {LOCKS_PER_PRINCIPAL} locks already"
                ))
            } else if after > LOCKS_PER_PRINCIPAL_FILE {
                Some(format!(
                    "this principal holds {LOCKS_PER_PRINCIPAL_FILE} locks on inode {ino:#x} already"
                ))
            } else if trial.held().len() > LOCKS_PER_FILE {
                Some(format!(
                    "inode {ino:#x} carries {LOCKS_PER_FILE} locks already"
                ))
            } else {
                None
            };
            if let Some(m) = bound {
                return Err(err(Errno::NoLck, m));
            }
        }
        let n = self.per_principal.entry(owner.0).or_default();
        *n = (*n + after).saturating_sub(before);
        if *n == 0 {
            self.per_principal.remove(&owner.0);
        }
        if trial.is_empty() {
            self.files.remove(&ino);
        } else {
            self.files.insert(ino, trial);
        }
        if kind.is_some() {
            self.sessions.insert((owner.0, owner.1), Instant::now());
        }
        Ok(())
    }
}

/// The range a request names, checked: it starts at most at `i64::MAX`
/// (where the kernel's ranges end) and not after its end; an end past
/// `i64::MAX` means to the end of the file.
fn checked(mut l: LockSpec) -> Result<LockSpec, MdsError> {
    if l.start > i64::MAX as u64 || l.start > l.end {
        return Err(err(
            Errno::Inval,
            format!(
                "lock range {}..={}: not a range a file can have",
                l.start, l.end
            ),
        ));
    }
    if l.end >= i64::MAX as u64 {
        l.end = u64::MAX;
    }
    Ok(l)
}

impl Mds {
    fn locks(&self) -> std::sync::MutexGuard<'_, Locks> {
        self.locks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How long a session's locks outlive its last word.
    fn lock_expiry(&self) -> Duration {
        Duration::from_millis(
            self.cfg
                .hold_expiry_ms
                .max(2 * proto::mds::HOLD_INTERVAL_MS),
        )
    }

    /// Whether new locks wait: a restarted MDS gives the sessions one
    /// expiry, from when it serves again after the replays, to take back
    /// their locks first.
    fn in_lock_grace(&self) -> bool {
        if self.prev_instance == 0 {
            return false;
        }
        let expiry = self.lock_expiry().as_millis() as u64;
        let served = self
            .serving_since_ms
            .load(std::sync::atomic::Ordering::SeqCst);
        if served > 0 {
            return proto::clock::now_ms() < served + expiry;
        }
        self.started.elapsed() < self.lock_expiry() || *self.replaying.borrow()
    }

    fn in_grace_error() -> MdsError {
        err(
            Errno::Busy,
            "the MDS restarted: locks are being taken back; try again",
        )
    }

    /// Whether the caller may lock `ino` (for writing: `write`): in the
    /// MDS namespace, a file it holds open so, or could open so now
    /// (inside its subtree, search on the way, read — and write — on the
    /// file); one answer (EBADF) for every refusal, so it tells nothing of
    /// files it may not see. In the OSD namespace the MDS does not know
    /// the files (confined principals are refused there); the bounds are
    /// all.
    fn may_lock(&self, c: &Creds, session: u64, ino: u64, write: bool) -> Result<(), MdsError> {
        let refused = || {
            err(
                Errno::BadF,
                format!(
                    "inode {ino:#x}: no file the caller holds or may open for {}",
                    if write { "writing" } else { "reading" }
                ),
            )
        };
        // A read-only principal opens nothing for writing: no write lock.
        if write && super::auth::Owns::current() == super::auth::Owns::Nothing {
            return Err(refused());
        }
        if self.namespace == NamespaceMode::Osd {
            return Ok(());
        }
        // Inside the caller's subtree before anything else: a hold alone
        // (a report names any number) reaches nothing outside it.
        if !proto::layout::is_inode_number(ino) || !self.within(ino, super::search::top())? {
            return Err(refused());
        }
        if self.session_holds(session, ino, write) {
            return Ok(());
        }
        let v = self.kv.read()?;
        let Ok(i) = v.live_inode(ino) else {
            return Err(refused());
        };
        let need = if write { R | W } else { R };
        if i.attr.kind == FileKind::Dir
            || !super::search::searchable(&v, c, ino, &mut HashMap::new())?
            || !perm::allowed(&i.attr, c, need)
        {
            return Err(refused());
        }
        Ok(())
    }

    /// What LOCK and TEST LOCK check first: the range, and — for a
    /// request that would take a lock of kind `taking` — the grace and
    /// the caller's right to the file. Answers the range and its owner.
    fn admit_lock(
        &self,
        c: &Creds,
        session: u64,
        ino: u64,
        l: LockSpec,
        taking: LockKind,
    ) -> Result<(LockSpec, Owner), MdsError> {
        let l = checked(l)?;
        if taking != LockKind::Unlock {
            if self.in_lock_grace() {
                return Err(Self::in_grace_error());
            }
            self.may_lock(c, session, ino, taking == LockKind::Write)?;
        }
        Ok((l, (auth::holder(), session, l.owner)))
    }

    /// LOCK: sets or removes one of the session's locks.
    pub(super) fn lock_range(
        &self,
        c: &Creds,
        session: u64,
        ino: u64,
        l: LockSpec,
    ) -> Result<MdsReply, MdsError> {
        if session == 0 {
            return Err(err(Errno::Inval, "lock: session 0 is not a session"));
        }
        let (l, owner) = self.admit_lock(c, session, ino, l, l.kind)?;
        let expiry = self.lock_expiry();
        let mut t = self.locks();
        t.prune(expiry, false);
        let r = t.set(ino, owner, &l);
        if matches!(&r, Err(e) if e.errno == Errno::Again) {
            // The holder may be gone: look again without the silent.
            t.prune(expiry, true);
            return t.set(ino, owner, &l).map(|()| MdsReply::Done);
        }
        r.map(|()| MdsReply::Done)
    }

    /// TEST LOCK: the lock of another owner in the way of `l`, if any.
    pub(super) fn test_lock(
        &self,
        c: &Creds,
        session: u64,
        ino: u64,
        l: LockSpec,
    ) -> Result<MdsReply, MdsError> {
        let (l, owner) = self.admit_lock(c, session, ino, l, LockKind::Read)?;
        let mut t = self.locks();
        t.prune(self.lock_expiry(), false);
        let write = l.kind == LockKind::Write;
        let found = match l.kind {
            LockKind::Unlock => None,
            _ => t
                .files
                .get(&ino)
                .and_then(|f| f.conflict(owner, l.start, l.end, write)),
        };
        Ok(MdsReply::LockedBy(found.map(|r| r.spec(0))))
    }

    /// LOCKS HELD: keeps the session's locks alive; in the grace after a
    /// restart, also takes back those this MDS does not know, where the
    /// caller may still lock the file and nobody conflicts. Outside the
    /// grace it takes nothing (a report can cross an unlock on the wire).
    pub(super) fn locks_held(
        &self,
        c: &Creds,
        session: u64,
        locks: Vec<(u64, LockSpec)>,
    ) -> Result<MdsReply, MdsError> {
        if session == 0 {
            return Err(err(Errno::Inval, "locks held: session 0 is not a session"));
        }
        if locks.len() > LOCKS_REPORT_MAX {
            return Err(err(
                Errno::Inval,
                format!(
                    "locks held: {} locks, at most {LOCKS_REPORT_MAX}",
                    locks.len()
                ),
            ));
        }
        let principal = auth::holder();
        let grace = self.in_lock_grace();
        let mut fresh = Vec::new();
        {
            let mut t = self.locks();
            if let Some(seen) = t.sessions.get_mut(&(principal, session)) {
                *seen = Instant::now();
            }
            if !grace {
                return Ok(MdsReply::Done);
            }
            for (ino, l) in locks {
                let owner = (principal, session, l.owner);
                if let Ok(l) = checked(l)
                    && l.kind != LockKind::Unlock
                    && !t.has(ino, owner, &l)
                {
                    fresh.push((ino, l));
                }
            }
        }
        let mut lost = 0usize;
        for (ino, l) in fresh {
            let owner = (principal, session, l.owner);
            let ok = self
                .may_lock(c, session, ino, l.kind == LockKind::Write)
                .is_ok()
                && self.locks().set(ino, owner, &l).is_ok();
            lost += usize::from(!ok);
        }
        if lost > 0 {
            tracing::warn!(session, lost, "reported locks that cannot be taken back");
        }
        Ok(MdsReply::Done)
    }

    /// How many locks are held (for status and tests).
    pub fn locks_count(&self) -> usize {
        self.locks().files.values().map(|f| f.held().len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(owner: u64, start: u64, end: u64, kind: LockKind) -> LockSpec {
        LockSpec {
            owner,
            start,
            end,
            kind,
            pid: 1,
        }
    }

    #[test]
    fn principals_and_sessions_are_apart_and_bounded() {
        let mut t = Locks::default();
        let (p, q) = (10, 11);
        t.set(5, (p, 1, 7), &l(7, 0, 9, LockKind::Write)).unwrap();
        // The same owner number in another session or principal is
        // another owner: refused, and its unlock drops nothing.
        let e = t
            .set(5, (q, 1, 7), &l(7, 0, 0, LockKind::Read))
            .unwrap_err();
        assert_eq!(e.errno, Errno::Again);
        t.set(5, (p, 2, 7), &l(7, 0, 9, LockKind::Unlock)).unwrap();
        t.set(5, (q, 1, 7), &l(7, 0, 9, LockKind::Unlock)).unwrap();
        assert_eq!(
            t.set(5, (p, 2, 7), &l(7, 3, 3, LockKind::Read))
                .unwrap_err()
                .errno,
            Errno::Again
        );
        // One principal's bound on one file, then the file's, every other
        // byte locked by one owner of each principal.
        let fill = |t: &mut Locks, p: u64, from: u64| {
            let mut n = 0;
            loop {
                match t.set(
                    6,
                    (p, 1, 1),
                    &l(1, 2 * (from + n), 2 * (from + n), LockKind::Read),
                ) {
                    Ok(()) => n += 1,
                    Err(e) => break (e.errno, n as usize),
                }
            }
        };
        assert_eq!(fill(&mut t, q, 0), (Errno::NoLck, LOCKS_PER_PRINCIPAL_FILE));
        assert_eq!(t.per_principal[&q], LOCKS_PER_PRINCIPAL_FILE);
        for (i, p) in [20, 21, 22].into_iter().enumerate() {
            let got = fill(&mut t, p, 10_000 * (i as u64 + 1));
            assert_eq!(got, (Errno::NoLck, LOCKS_PER_PRINCIPAL_FILE));
        }
        assert_eq!(
            fill(&mut t, 23, 90_000),
            (Errno::NoLck, 0),
            "the file is full"
        );
        // A request that adds nothing to the caller's ranges still goes.
        t.set(6, (q, 1, 1), &l(1, 0, 0, LockKind::Write)).unwrap();
        // Unlocking the whole file gives the count back.
        t.set(6, (q, 1, 1), &l(1, 0, u64::MAX, LockKind::Unlock))
            .unwrap();
        assert!(!t.per_principal.contains_key(&q));
        assert_eq!(t.count_of(6, 20), LOCKS_PER_PRINCIPAL_FILE, "others' stay");
    }

    #[test]
    fn a_silent_session_loses_its_locks() {
        let mut t = Locks::default();
        t.set(5, (1, 1, 1), &l(1, 0, u64::MAX, LockKind::Write))
            .unwrap();
        t.sessions
            .insert((1, 1), Instant::now() - Duration::from_secs(60));
        t.prune(Duration::from_secs(8), true);
        t.set(5, (2, 1, 1), &l(1, 0, u64::MAX, LockKind::Write))
            .unwrap();
        assert!(!t.per_principal.contains_key(&1));
    }
}
