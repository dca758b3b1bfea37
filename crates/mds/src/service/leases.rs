//! Directory leases: one session at a time may make and remove files in a
//! directory on its own and tell the MDS after, in order and in batches
//! (CephFS's asynchronous directory operations are the model). While a
//! lease lasts, every other session's request that names the directory
//! (a lookup, listing or change in it, a change to it) waits: the MDS
//! marks the lease contended, the holder learns it from its next answer
//! or gives the lease back when idle, and the request runs once the lease
//! is back or its holder has gone unheard for two lease terms. A directory
//! two sessions used within two seconds gets no lease at all: they would
//! only pass it back and forth.
//!
//! The inode numbers a holder uses are delegated to it in the KV
//! ([`crate::delegation`]), so they survive a restart of the MDS with the
//! replays that name them.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use posix::perm::{self, W};
use proto::mds::{
    Creds, DirLease, DirOp, Errno, FileKind, LEASE_IDS, LEASE_IDS_MAX, LEASE_NAMES_MAX,
    LEASE_TERM_MS, MdsError, MdsReply, Op,
};

use super::{Mds, err};
use crate::delegation;
use crate::kv::{T, View};
use crate::records::Records;

/// How often a request waiting for a lease looks again.
const WAIT_STEP: Duration = Duration::from_millis(2);

/// A directory two sessions used within this long gets no lease (they
/// would pass it back and forth, each waiting for the other's to go).
const SHARED_FOR: Duration = Duration::from_secs(2);

/// Directories whose recent users are remembered before old ones are
/// forgotten.
const RECENT_MAX: usize = 65_536;

/// Directory leases held at once. A lease refused is harmless (its client
/// changes the directory through the MDS, one request at a time); a live
/// lease is never taken to make room, since its holder answers for the
/// directory alone until it hears otherwise. Lapsed ones are swept.
pub const LEASES_MAX: usize = 65_536;

/// How often a full table (or a principal at its bound) is swept of
/// lapsed leases at most.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// Directory leases one principal's sessions may hold together.
pub const LEASES_PER_PRINCIPAL: usize = 16_384;

/// Who used a directory last, and when another session last did.
#[derive(Clone, Copy)]
struct Recent {
    session: u64,
    at: Instant,
    other_at: Option<Instant>,
}

impl Recent {
    /// Whether a session other than `s` used it within [`SHARED_FOR`].
    fn shared_with(&self, s: u64) -> bool {
        let recent = |t: Instant| t.elapsed() < SHARED_FOR;
        if self.session != s {
            recent(self.at)
        } else {
            self.other_at.is_some_and(recent)
        }
    }
}

/// One lease.
struct Lease {
    /// The holding session (its KV session key).
    holder: u64,
    /// The principal the holding session speaks for.
    principal: u64,
    /// When the MDS last heard of it from its holder.
    heard: Instant,
    /// Another session waits for the directory.
    contended: bool,
    /// Inode numbers delegated with it and not used yet.
    ids: Vec<u64>,
    /// How many it is topped up to: [`LEASE_IDS`] at first, up to
    /// [`LEASE_IDS_MAX`] for a holder that makes files fast.
    target: usize,
}

/// The numbers to keep delegated to a holder whose batch made `made`
/// files, given the current target: eight batches' worth (a batch is
/// under way while the next fills, and top-ups come once half are used),
/// never less than before, within [`LEASE_IDS`]..=[`LEASE_IDS_MAX`].
fn ids_target(target: usize, made: usize) -> usize {
    target
        .max((8 * made).next_power_of_two())
        .clamp(LEASE_IDS, LEASE_IDS_MAX)
}

impl Leases {
    /// Whether a session other than `session` holds `dir`'s lease, unlapsed.
    pub(super) fn other_holds(&self, dir: u64, session: u64) -> bool {
        self.held
            .get(&dir)
            .is_some_and(|l| l.holder != session && !l.lapsed())
    }

    /// Whether any lease is held (lapsed ones until swept).
    pub(super) fn any(&self) -> bool {
        !self.held.is_empty()
    }
}

impl Lease {
    fn lapsed(&self) -> bool {
        self.heard.elapsed() >= Duration::from_millis(2 * LEASE_TERM_MS)
    }
}

/// The leases, and the requests under way in each directory.
#[derive(Default)]
pub(super) struct Leases {
    held: HashMap<u64, Lease>,
    /// Leases held per principal (lapsed ones until swept).
    per_principal: HashMap<u64, usize>,
    /// When lapsed leases were last swept.
    swept: Option<Instant>,
    /// Directory → (session key → requests of that session naming it
    /// under way): a grant waits for other sessions' to finish.
    active: HashMap<u64, HashMap<u64, usize>>,
    /// Directory → its recent users.
    recent: HashMap<u64, Recent>,
    /// Directory → requests waiting for its lease to go (no lease on it
    /// is granted meanwhile).
    waiting: HashMap<u64, usize>,
}

impl Leases {
    fn used(&mut self, dir: u64, session: u64) {
        let now = Instant::now();
        if self.recent.len() >= RECENT_MAX {
            self.recent.retain(|_, r| r.at.elapsed() < SHARED_FOR);
        }
        if self.recent.len() > RECENT_MAX * 3 / 4 {
            // Still nearly full within SHARED_FOR: forget the older half
            // (a directory forgotten may only be leased a little sooner),
            // so the next sweep is a quarter of the table away.
            let mut ats: Vec<Instant> = self.recent.values().map(|r| r.at).collect();
            let (_, mid, _) = ats.select_nth_unstable(RECENT_MAX / 2);
            let mid = *mid;
            self.recent.retain(|_, r| r.at > mid);
        }
        let r = self.recent.entry(dir).or_insert(Recent {
            session,
            at: now,
            other_at: None,
        });
        if r.session != session {
            r.other_at = Some(r.at);
            r.session = session;
        }
        r.at = now;
    }

    /// Holds `lease` on `dir` (replacing any), counted for its principal.
    fn put(&mut self, dir: u64, lease: Lease) {
        *self.per_principal.entry(lease.principal).or_default() += 1;
        if let Some(old) = self.held.insert(dir, lease) {
            self.uncount(old.principal);
        }
    }

    /// Removes the lease on `dir`, if any.
    fn take(&mut self, dir: u64) -> Option<Lease> {
        let l = self.held.remove(&dir)?;
        self.uncount(l.principal);
        Some(l)
    }

    fn uncount(&mut self, principal: u64) {
        if let Some(n) = self.per_principal.get_mut(&principal) {
            *n -= 1;
            if *n == 0 {
                self.per_principal.remove(&principal);
            }
        }
    }

    /// Drops every lapsed lease whose holder has no request under way in
    /// its directory (at most once per [`SWEEP_EVERY`]).
    fn sweep(&mut self) {
        if self.swept.is_some_and(|t| t.elapsed() < SWEEP_EVERY) {
            return;
        }
        self.swept = Some(Instant::now());
        let gone: Vec<u64> = self
            .held
            .iter()
            .filter(|(d, l)| {
                l.lapsed()
                    && !self
                        .active
                        .get(d)
                        .is_some_and(|m| m.contains_key(&l.holder))
            })
            .map(|(d, _)| *d)
            .collect();
        for d in gone {
            self.take(d);
        }
    }

    /// Makes room for a lease of `principal` on `dir` (for `session`):
    /// refused (EBUSY) when that principal holds its bound or the table
    /// is full, once lapsed leases are swept.
    fn make_room(&mut self, dir: u64, session: u64, principal: u64) -> Result<(), MdsError> {
        if self.held.get(&dir).is_some_and(|l| l.holder == session) {
            return Ok(());
        }
        // Principal 0 is the MDS's own: every client of an `--insecure`
        // cluster. Its sessions share no per-principal bound.
        let mine = |l: &Leases| match principal {
            0 => 0,
            p => l.per_principal.get(&p).copied().unwrap_or(0),
        };
        let full = |l: &Leases| l.held.len() >= LEASES_MAX && !l.held.contains_key(&dir);
        if mine(self) >= LEASES_PER_PRINCIPAL || full(self) {
            self.sweep();
        }
        if mine(self) >= LEASES_PER_PRINCIPAL {
            return Err(err(
                Errno::Busy,
                format!("this principal holds {LEASES_PER_PRINCIPAL} directory leases already"),
            ));
        }
        if full(self) {
            return Err(err(
                Errno::Busy,
                format!("{LEASES_MAX} directory leases are held: no lease"),
            ));
        }
        Ok(())
    }
}

/// A request's mark on the directories it names; removed when dropped.
/// A request counted as waiting for leases on `dirs` until dropped.
struct Waiting<'a> {
    mds: &'a Mds,
    dirs: Vec<u64>,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut l = self.mds.leases();
        for d in &self.dirs {
            if let Some(n) = l.waiting.get_mut(d) {
                *n -= 1;
                if *n == 0 {
                    l.waiting.remove(d);
                }
            }
        }
    }
}

pub(super) struct Active<'a> {
    mds: &'a Mds,
    session: u64,
    dirs: Vec<u64>,
}

impl Drop for Active<'_> {
    fn drop(&mut self) {
        if self.dirs.is_empty() {
            return;
        }
        let mut l = self.mds.leases();
        for d in &self.dirs {
            if let Some(m) = l.active.get_mut(d) {
                if let Some(n) = m.get_mut(&self.session) {
                    *n -= 1;
                    if *n == 0 {
                        m.remove(&self.session);
                    }
                }
                if m.is_empty() {
                    l.active.remove(d);
                }
            }
        }
    }
}

/// The directories a request names, as a lease sees them: those whose
/// names it reads or changes, or whose attributes it changes.
fn dirs_named(op: &Op) -> Vec<u64> {
    match op {
        Op::Lookup { parent, .. }
        | Op::Create { parent, .. }
        | Op::Mkdir { parent, .. }
        | Op::Symlink { parent, .. }
        | Op::Mknod { parent, .. }
        | Op::Link { parent, .. }
        | Op::Unlink { parent, .. }
        | Op::Rmdir { parent, .. } => vec![*parent],
        Op::Rename {
            parent, new_parent, ..
        } => vec![*parent, *new_parent],
        Op::Readdir { ino, .. }
        | Op::ReaddirPrefetch { ino, .. }
        | Op::SetAttr { ino, .. }
        | Op::SetXattr { ino, .. }
        | Op::RemoveXattr { ino, .. } => vec![*ino],
        // A lease asked for while another is held is refused at once.
        Op::DirOps { dir, .. } => vec![*dir],
        _ => Vec::new(),
    }
}

impl Mds {
    pub(super) fn leases(&self) -> std::sync::MutexGuard<'_, Leases> {
        self.leases.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a session other than `session` holds `dir`'s lease: its
    /// names are that holder's to answer for, so no listing of it is
    /// handed out in passing.
    pub(super) fn leased_by_other(&self, dir: u64, session: u64) -> bool {
        self.leases().other_holds(dir, session)
    }

    /// Waits until no other session holds a lease on a directory `op`
    /// names, then marks the request under way there (the mark goes when
    /// the returned guard does).
    pub(super) async fn lease_clear(&self, session: u64, op: &Op) -> Active<'_> {
        let mut dirs = dirs_named(op);
        // A directory removed or replaced is named too.
        if let Op::Rmdir { parent, name }
        | Op::Rename {
            new_parent: parent,
            new_name: name,
            ..
        } = op
            && let Ok(snap) = self.kv.read()
            && let Ok(Some((ino, FileKind::Dir))) = snap.dentry(*parent, name)
        {
            dirs.push(ino);
        }
        if dirs.is_empty() {
            return Active {
                mds: self,
                session,
                dirs,
            };
        }
        let mut waiting: Option<Waiting<'_>> = None;
        loop {
            {
                let mut l = self.leases();
                let mut busy = false;
                for d in &dirs {
                    let holder_busy = |h: u64| l.active.get(d).is_some_and(|m| m.contains_key(&h));
                    let lapsed_now = l
                        .held
                        .get(d)
                        .is_some_and(|lease| lease.lapsed() && !holder_busy(lease.holder));
                    let lapsed = match l.held.get_mut(d) {
                        Some(lease) if lease.holder != session => {
                            if lapsed_now {
                                true
                            } else {
                                lease.contended = true;
                                busy = true;
                                false
                            }
                        }
                        // The holder's own, once its lease lapsed while
                        // another waits (else a stream of them keeps it).
                        Some(lease) if lease.contended && lease.lapsed() => {
                            busy = true;
                            false
                        }
                        _ => false,
                    };
                    if lapsed {
                        l.take(*d);
                        tracing::info!(
                            dir = d,
                            "a directory lease lapsed: its holder went unheard"
                        );
                    }
                }
                if !busy {
                    for d in &dirs {
                        *l.active.entry(*d).or_default().entry(session).or_default() += 1;
                        l.used(*d, session);
                    }
                    if waiting.is_some() {
                        self.metrics.lease_waits.inc();
                    }
                    return Active {
                        mds: self,
                        session,
                        dirs,
                    };
                }
                if waiting.is_none() {
                    for d in &dirs {
                        *l.waiting.entry(*d).or_default() += 1;
                    }
                    let dirs = dirs.clone();
                    waiting = Some(Waiting { mds: self, dirs });
                }
            }
            tokio::time::sleep(WAIT_STEP).await;
        }
    }

    /// DIR LEASE: grants `dir`'s lease to `session` with its names and
    /// delegated inode numbers, or refuses it (EBUSY) while another
    /// session holds it or has requests under way in it.
    pub(super) async fn dir_lease(
        &self,
        c: &Creds,
        dir: u64,
        session: u64,
    ) -> Result<MdsReply, MdsError> {
        if session == 0 {
            return Err(err(
                Errno::Inval,
                "a directory lease needs a client session",
            ));
        }
        {
            let snap = self.kv.read()?;
            let d = snap.dir_inode(dir)?;
            perm::check(&d.attr, c, W | posix::perm::X, "lease")?;
        }
        {
            let mut l = self.leases();
            let others = l
                .active
                .get(&dir)
                .is_some_and(|m| m.keys().any(|s| *s != session))
                || l.recent.get(&dir).is_some_and(|r| r.shared_with(session));
            match l.held.get(&dir) {
                Some(lease) if lease.holder != session && !lease.lapsed() => {
                    return Err(err(
                        Errno::Busy,
                        format!("{dir:#x} is leased to another client"),
                    ));
                }
                // Requests wait for this directory: no lease until they
                // are through, not again to its holder nor to one that gave
                // it back and asks at once (it could keep them out for good).
                _ if l.waiting.contains_key(&dir) => {
                    return Err(err(
                        Errno::Busy,
                        format!(
                            "{dir:#x}: other requests wait for it; no lease until they are through"
                        ),
                    ));
                }
                _ if others => {
                    return Err(err(
                        Errno::Busy,
                        format!("{dir:#x} is in use by another client"),
                    ));
                }
                _ => {}
            }
            // A lapsed lease, or this session's own again: start afresh.
            let principal = super::auth::holder();
            l.make_room(dir, session, principal)?;
            l.put(
                dir,
                Lease {
                    holder: session,
                    principal,
                    heard: Instant::now(),
                    contended: false,
                    ids: Vec::new(),
                    target: LEASE_IDS,
                },
            );
        }
        let granted = self.grant_lease(dir, session).await;
        if granted.is_err() {
            self.drop_lease(dir, session);
        }
        granted
    }

    async fn grant_lease(&self, dir: u64, session: u64) -> Result<MdsReply, MdsError> {
        let snap = self.kv.read()?;
        let attr = snap.dir_inode(dir)?.attr;
        let st = snap.state()?;
        if snap.map(st.map_epoch)?.is_none_or(|m| m.placeable() == 0) {
            // Creates would fail (ENOSPC): the MDS must say so itself.
            return Err(err(Errno::Busy, "no OSD can take data: no lease"));
        }
        let (names, more) = snap.list_dir(dir, None, LEASE_NAMES_MAX)?;
        drop(snap);
        if more {
            return Err(err(
                Errno::Busy,
                format!("{dir:#x} has more than {LEASE_NAMES_MAX} names: no lease"),
            ));
        }
        let ids = self.delegate(dir, session, LEASE_IDS).await?;
        self.metrics.leases_granted.inc();
        Ok(MdsReply::Lease(Box::new(DirLease { attr, names, ids })))
    }

    /// Delegates `n` more inode numbers with `dir`'s lease (durably: a
    /// replay after a crash may name them).
    async fn delegate(&self, dir: u64, session: u64, n: usize) -> Result<Vec<u64>, MdsError> {
        if n == 0 {
            return Ok(Vec::new());
        }
        let policy = self.sb.policy;
        let now = proto::clock::now_ms();
        let ids = self
            .kv
            .write(move |tx| delegation::delegate(tx, &policy, dir, n, session, now))
            .await?;
        if let Some(l) = self
            .leases()
            .held
            .get_mut(&dir)
            .filter(|l| l.holder == session)
        {
            l.ids.extend(&ids);
        }
        Ok(ids)
    }

    fn drop_lease(&self, dir: u64, session: u64) -> Option<Vec<u64>> {
        let mut l = self.leases();
        if l.held.get(&dir).is_some_and(|l| l.holder == session) {
            return l.take(dir).map(|l| l.ids);
        }
        None
    }

    /// DIR OPS: applies the holder's changes in one transaction; answers
    /// which were refused, whether another session waits, and more inode
    /// numbers while the lease lasts.
    pub(super) async fn dir_ops(
        &self,
        c: Creds,
        dir: u64,
        ops: Vec<DirOp>,
        (session, client_session): (u64, u64),
        early: Option<u64>,
    ) -> Result<MdsReply, MdsError> {
        if ops.is_empty() || ops.len() > proto::mds::DIR_OPS_MAX {
            return Err(err(
                Errno::Inval,
                format!(
                    "{} changes in one DIR OPS (1 to {})",
                    ops.len(),
                    proto::mds::DIR_OPS_MAX
                ),
            ));
        }
        // Per change: the number a create uses (indexes as in `failed`).
        let made: Vec<Option<u64>> = ops
            .iter()
            .map(|o| match o {
                DirOp::Create { ino, .. } => Some(*ino),
                DirOp::Unlink { .. } | DirOp::SetAttr { .. } => None,
            })
            .collect();
        // Whether this session holds the lease now (attribute changes
        // need it), or the MDS is redoing replays after a restart (no
        // lease survives one).
        let holds = self
            .leases()
            .held
            .get(&dir)
            .is_some_and(|l| l.holder == session && !l.lapsed())
            || *self.replaying.borrow();
        // Heard of at arrival (a long apply must not lapse it), unless
        // someone waits: then the holder gets one more term at most.
        if let Some(l) = self
            .leases()
            .held
            .get_mut(&dir)
            .filter(|l| l.holder == session && !l.contended)
        {
            l.heard = Instant::now();
        }
        let policy = self.sb.policy;
        let creds = c.clone();
        let (applied, ack) = self
            .write_ns(early, move |tx| {
                delegation::apply(tx, &policy, &c, dir, &ops, (session, holds))
            })
            .await?;
        // The changes are made (and answered early below): what follows
        // must not turn that into an error the client would drop them for.
        for &ino in &applied.opened {
            if let Err(e) = self.note_open(client_session, ino, true) {
                tracing::warn!(ino, error = %e, "a file made under a lease is not counted as held");
            }
        }
        for &o in &applied.orphans {
            if let Err(e) = self.orphaned(Some(o)).await {
                tracing::warn!(ino = o, error = %e, "an orphan made under a lease waits for the next pass");
            }
        }
        let (contended, want, target) = {
            let mut l = self.leases();
            match l.held.get_mut(&dir).filter(|l| l.holder == session) {
                Some(lease) => {
                    let failed: Vec<u64> = applied
                        .failed
                        .iter()
                        .filter_map(|(i, _)| made.get(*i as usize).copied().flatten())
                        .collect();
                    let used: HashSet<u64> = made.iter().flatten().copied().collect();
                    lease
                        .ids
                        .retain(|i| !used.contains(i) || failed.contains(i));
                    lease.target = ids_target(lease.target, used.len());
                    let want = if lease.contended {
                        0
                    } else {
                        lease.target.saturating_sub(lease.ids.len())
                    };
                    (lease.contended, want, lease.target)
                }
                // No lease (lapsed, given back, or a replay): apply only.
                None => (true, 0, LEASE_IDS),
            }
        };
        // Numbers are topped up in batches, not one per create.
        let ids = if want >= target / 2 {
            self.delegate(dir, session, want).await.unwrap_or_else(|e| {
                tracing::warn!(dir, error = %e, "no more delegated numbers this time");
                Vec::new()
            })
        } else {
            Vec::new()
        };
        let reply = MdsReply::DirDone {
            failed: applied.failed,
            contended,
            ids,
            dir: self.dir_attr(dir).ok(),
            made: self.made_answers(&creds, &applied.opened),
        };
        Ok(self.answer(reply, ack))
    }

    /// DIR RELEASE: the lease goes, and the numbers it did not use.
    pub(super) async fn dir_release(&self, dir: u64, session: u64) -> Result<MdsReply, MdsError> {
        if let Some(ids) = self.drop_lease(dir, session)
            && !ids.is_empty()
        {
            self.kv
                .write(move |tx| delegation::undelegate(tx, session, &ids))
                .await?;
        }
        Ok(MdsReply::Done)
    }

    /// Forgets delegated numbers older than ten lease terms (their holders
    /// are gone); called by the delete worker.
    pub(super) async fn expire_delegations(&self) -> Result<(), MdsError> {
        // A replay after a crash may still name them.
        if *self.replaying.borrow() {
            return Ok(());
        }
        let before = proto::clock::now_ms().saturating_sub(10 * LEASE_TERM_MS);
        // Numbers a live lease holds stay, however old.
        let held: Arc<HashSet<u64>> = Arc::new(
            self.leases()
                .held
                .values()
                .flat_map(|l| l.ids.iter().copied())
                .collect(),
        );
        let mut any = false;
        self.kv.read()?.scan(
            T::Delegated,
            std::ops::Bound::Unbounded,
            std::ops::Bound::Unbounded,
            false,
            &mut |k, v| {
                any = delegation::expired(k, v, before, &held);
                !any
            },
        )?;
        if !any {
            return Ok(());
        }
        loop {
            let held = held.clone();
            let n = self
                .kv
                .write(move |tx| delegation::expire(tx, before, &held, 4096))
                .await?;
            if n > 0 {
                tracing::debug!(
                    expired = n,
                    "forgot delegated inode numbers of gone lease holders"
                );
            }
            if n < 4096 {
                return Ok(());
            }
        }
    }
}

#[cfg(test)]
#[path = "leases_tests.rs"]
mod tests;
