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

use std::time::Instant;

use posix::locks::FileLocks;
use proto::locks::{LOCKS_PER_FILE, LOCKS_PER_PRINCIPAL, LOCKS_REPORT_MAX, LockKind, LockSpec};

use super::*;

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
        if !now
            && self
                .last_prune
                .is_some_and(|t| t.elapsed() < Duration::from_secs(1))
        {
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
    /// the way, ENOLCK past the principal's bound.
    fn set(&mut self, ino: u64, owner: Owner, l: &LockSpec) -> Result<(), MdsError> {
        let kind = match l.kind {
            LockKind::Read => Some(false),
            LockKind::Write => Some(true),
            LockKind::Unlock => None,
        };
        let f = self.files.entry(ino).or_default();
        if let Some(write) = kind
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
        let before = self.count_of(ino, owner.0);
        let mut trial = self.files.get(&ino).cloned().unwrap_or_default();
        trial.set(owner, l.start, l.end, kind, l.pid);
        let after = trial.held().iter().filter(|r| r.owner.0 == owner.0).count();
        let cur = self.per_principal.get(&owner.0).copied().unwrap_or(0);
        let total = (cur + after).saturating_sub(before);
        if after > before && total > LOCKS_PER_PRINCIPAL {
            return Err(err(
                Errno::NoLck,
                format!("this principal holds {LOCKS_PER_PRINCIPAL} locks already"),
            ));
        }
        if after > before && trial.held().len() > LOCKS_PER_FILE {
            return Err(err(
                Errno::NoLck,
                format!("inode {ino:#x} carries {LOCKS_PER_FILE} locks already"),
            ));
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

/// The range a request names, checked (start ≤ end).
fn checked(l: &LockSpec) -> Result<(), MdsError> {
    if l.start > l.end {
        return Err(err(
            Errno::Inval,
            format!("lock range {}..={} ends before it starts", l.start, l.end),
        ));
    }
    Ok(())
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
    /// expiry to take back their locks first.
    fn in_lock_grace(&self) -> bool {
        self.prev_instance != 0 && self.started.elapsed() < self.lock_expiry()
    }

    /// Whether the caller may lock `ino`: in the MDS namespace, a file it
    /// holds open, or could open for reading now. In the OSD namespace the
    /// MDS does not know the files; the principal's bound is all.
    fn may_lock(&self, c: &Creds, session: u64, ino: u64) -> Result<(), MdsError> {
        if self.namespace == NamespaceMode::Osd || self.session_holds(session, ino, false) {
            return Ok(());
        }
        let v = self.kv.read()?;
        let i = v.live_inode(ino)?;
        if i.attr.kind == FileKind::Dir {
            return Err(err(Errno::BadF, format!("inode {ino:#x} is a directory")));
        }
        if !super::search::searchable(&v, c, ino, &mut HashMap::new())?
            || !perm::allowed(&i.attr, c, R)
        {
            return Err(err(
                Errno::BadF,
                format!("inode {ino:#x}: not open here and not readable by the caller"),
            ));
        }
        Ok(())
    }

    /// LOCK: sets or removes one of the session's locks.
    pub(super) fn lock_range(
        &self,
        c: &Creds,
        session: u64,
        ino: u64,
        l: LockSpec,
    ) -> Result<MdsReply, MdsError> {
        checked(&l)?;
        if session == 0 {
            return Err(err(Errno::Inval, "lock: session 0 is not a session"));
        }
        let owner = (auth::holder(), session, l.owner);
        if l.kind != LockKind::Unlock {
            if self.in_lock_grace() {
                return Err(err(
                    Errno::Busy,
                    "the MDS restarted: locks are being taken back; try again",
                ));
            }
            self.may_lock(c, session, ino)?;
        }
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
        checked(&l)?;
        self.may_lock(c, session, ino)?;
        let owner = (auth::holder(), session, l.owner);
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
        Ok(MdsReply::LockedBy(found.map(|r| LockSpec {
            owner: 0,
            start: r.start,
            end: r.end,
            kind: if r.write {
                LockKind::Write
            } else {
                LockKind::Read
            },
            pid: r.pid,
        })))
    }

    /// LOCKS HELD: keeps the session's locks alive and takes back, where
    /// nothing conflicts, those this MDS does not know (after a restart).
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
        let mut fresh = Vec::new();
        {
            let mut t = self.locks();
            if let Some(seen) = t.sessions.get_mut(&(principal, session)) {
                *seen = Instant::now();
            }
            for (ino, l) in locks {
                let owner = (principal, session, l.owner);
                if l.kind != LockKind::Unlock && checked(&l).is_ok() && !t.has(ino, owner, &l) {
                    fresh.push((ino, l));
                }
            }
        }
        for (ino, l) in fresh {
            if self.may_lock(c, session, ino).is_err() {
                continue;
            }
            let owner = (principal, session, l.owner);
            if let Err(e) = self.locks().set(ino, owner, &l) {
                tracing::warn!(ino, session, error = %e, "a reported lock cannot be taken back");
            }
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
        // One file's bound: every other byte locked by one owner.
        let mut n = 0;
        let e = loop {
            match t.set(6, (q, 1, 1), &l(1, 2 * n, 2 * n, LockKind::Read)) {
                Ok(()) => n += 1,
                Err(e) => break e,
            }
        };
        assert_eq!((e.errno, n as usize), (Errno::NoLck, LOCKS_PER_FILE));
        assert_eq!(t.per_principal[&q], LOCKS_PER_FILE);
        // Unlocking the whole file gives the count back.
        t.set(6, (q, 1, 1), &l(1, 0, u64::MAX, LockKind::Unlock))
            .unwrap();
        assert!(!t.per_principal.contains_key(&q));
        assert!(!t.files.contains_key(&6));
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
