//! Files client sessions hold open, and the orphans they keep alive.
//!
//! A file that loses its last name while open stays readable and writable
//! through every open descriptor (POSIX). The MDS cannot see every open —
//! a read-only open answered from a client's prefetched cache never
//! reaches it — so each client session tells it which files it holds
//! ([`Op::Holding`], every [`HOLD_INTERVAL_MS`]), and an open through the
//! MDS counts at once. An inode whose last name goes becomes an orphan
//! (kept, durably listed); it is reaped — inode removed, objects queued
//! for deletion — once `hold_expiry_ms` has passed since it lost its name
//! (or since this MDS started: the sessions re-announce themselves after a
//! restart) and no live session holds it.
//!
//! The same table lets a session renew capabilities and truncate through a
//! descriptor it opened for writing without the permission bits being
//! checked again (POSIX checks them at open only).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use posix::perm::{self, R, W};
use proto::mds::{Creds, Errno, HELD_MAX, MdsError, MdsReply};

use super::auth::Owns;
use super::{DELETE_BATCH, Mds, REAP_CHUNK, auth, err};
use crate::kv::{T, View};
use crate::ns;
use crate::records::Records;

/// Most sessions tracked at once. When full, the principal with the most
/// sessions loses its least recently seen one: a principal that floods
/// the table only ever evicts itself.
pub const SESSIONS_MAX: usize = 16_384;
/// Most sessions one principal may have tracked (a mount is one session);
/// a new one beyond it replaces that principal's least recently seen.
pub const SESSIONS_PER_PRINCIPAL: usize = 1024;
/// Most open files all of one principal's sessions may hold together.
pub const HELD_PER_PRINCIPAL: usize = 262_144;

/// How a session holds one file.
#[derive(Debug, Clone, Copy, Default)]
struct Hold {
    /// Opened through the MDS with the permission bits checked: the
    /// session may renew capabilities without a check again.
    opened: bool,
    /// Opened for writing (implies `opened`).
    write: bool,
}

/// One client session's open files.
struct Session {
    seen: Instant,
    /// Its place in its principal's order of use (see [`Holds::order`]).
    tick: u64,
    held: HashMap<u64, Hold>,
}

/// What one principal's sessions take of the table.
#[derive(Default, Clone, Copy)]
struct Usage {
    sessions: usize,
    held: usize,
}

/// The sessions, keyed by (principal, session id): a principal cannot
/// change what another principal's session holds.
#[derive(Default)]
pub struct Holds {
    sessions: HashMap<(u64, u64), Session>,
    usage: HashMap<u64, Usage>,
    /// Per principal, its sessions by last use: the least recently used
    /// is found without a scan.
    order: HashMap<u64, std::collections::BTreeSet<(u64, u64)>>,
    tick: u64,
    last_prune: Option<Instant>,
}

impl Holds {
    fn usage(&mut self, principal: u64) -> &mut Usage {
        self.usage.entry(principal).or_default()
    }

    fn remove(&mut self, key: (u64, u64)) {
        if let Some(s) = self.sessions.remove(&key) {
            let u = self.usage(key.0);
            u.sessions -= 1;
            u.held -= s.held.len();
            if u.sessions == 0 {
                self.usage.remove(&key.0);
            }
            if let Some(o) = self.order.get_mut(&key.0) {
                o.remove(&(s.tick, key.1));
                if o.is_empty() {
                    self.order.remove(&key.0);
                }
            }
        }
    }

    /// Drops silent sessions (at most once a second: a scan of them all).
    fn prune(&mut self, expiry: Duration) {
        if self
            .last_prune
            .is_some_and(|t| t.elapsed() < Duration::from_secs(1))
        {
            return;
        }
        self.last_prune = Some(Instant::now());
        let old: Vec<_> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.seen.elapsed() >= expiry)
            .map(|(k, _)| *k)
            .collect();
        for k in old {
            self.remove(k);
        }
    }

    /// The least recently used session of `principal`.
    fn oldest_of(&self, principal: u64) -> Option<(u64, u64)> {
        let (_, s) = self.order.get(&principal)?.first()?;
        Some((principal, *s))
    }

    /// Makes room for a new session of `principal`: its own oldest goes
    /// when it is at its bound; when the table is full, the oldest of the
    /// principal with the most sessions (another one, on a tie).
    fn make_room(&mut self, principal: u64, expiry: Duration) {
        if self.usage.get(&principal).map_or(0, |u| u.sessions) >= SESSIONS_PER_PRINCIPAL
            && let Some(k) = self.oldest_of(principal)
        {
            self.remove(k);
        }
        if self.sessions.len() >= SESSIONS_MAX {
            self.prune(expiry);
        }
        if self.sessions.len() >= SESSIONS_MAX {
            let largest = self
                .usage
                .iter()
                .max_by_key(|(p, u)| (u.sessions, **p != principal))
                .map(|(&p, _)| p);
            if let Some(k) = largest.and_then(|p| self.oldest_of(p)) {
                self.remove(k);
            }
        }
    }

    /// The session `key`, made if new (never refused: see
    /// [`Holds::make_room`]), marked as just used.
    fn session(&mut self, key: (u64, u64), expiry: Duration) -> &mut Session {
        if !self.sessions.contains_key(&key) {
            self.make_room(key.0, expiry);
            self.usage(key.0).sessions += 1;
        }
        self.tick += 1;
        let tick = self.tick;
        let order = self.order.entry(key.0).or_default();
        let s = self.sessions.entry(key).or_insert_with(|| Session {
            seen: Instant::now(),
            tick,
            held: HashMap::new(),
        });
        order.remove(&(s.tick, key.1));
        order.insert((tick, key.1));
        s.tick = tick;
        s.seen = Instant::now();
        s
    }

    /// Adds `ino` to session `key`'s holds (within its principal's bound).
    fn hold(
        &mut self,
        key: (u64, u64),
        ino: u64,
        hold: Hold,
        expiry: Duration,
    ) -> Result<(), MdsError> {
        let s = self.session(key, expiry);
        if let Some(h) = s.held.get_mut(&ino) {
            h.opened |= hold.opened;
            h.write |= hold.write;
            return Ok(());
        }
        let u = self.usage(key.0);
        if u.held >= HELD_PER_PRINCIPAL {
            return Err(err(
                Errno::Busy,
                format!("this principal holds {HELD_PER_PRINCIPAL} files open already"),
            ));
        }
        u.held += 1;
        if let Some(s) = self.sessions.get_mut(&key) {
            s.held.insert(ino, hold);
        }
        Ok(())
    }

    /// Whether the session opened `ino` through the MDS (for writing, if
    /// `write`). A file it only reported holding does not count: a report
    /// keeps an orphan alive and grants nothing.
    fn holds(&self, key: (u64, u64), ino: u64, write: bool, expiry: Duration) -> bool {
        self.sessions.get(&key).is_some_and(|s| {
            s.seen.elapsed() < expiry
                && s.held
                    .get(&ino)
                    .is_some_and(|h| h.opened && (h.write || !write))
        })
    }

    /// Every inode some live session holds.
    fn all_held(&mut self, expiry: Duration) -> HashSet<u64> {
        self.last_prune = None;
        self.prune(expiry);
        self.sessions
            .values()
            .flat_map(|s| s.held.keys().copied())
            .collect()
    }
}

impl Mds {
    fn holds(&self) -> std::sync::MutexGuard<'_, Holds> {
        self.holds.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn hold_expiry(&self) -> Duration {
        Duration::from_millis(self.cfg.hold_expiry_ms)
    }

    /// Whether the caller's `session` holds `ino` open (for writing, if
    /// `write`): it opened it through the MDS or reported it since.
    pub(super) fn session_holds(&self, session: u64, ino: u64, write: bool) -> bool {
        session != 0
            && self
                .holds()
                .holds((auth::holder(), session), ino, write, self.hold_expiry())
    }

    /// Whether the caller's `session` holds `ino` in any way (opened, or
    /// reported holding it): an unlinked file stays reachable to it.
    pub(super) fn session_knows(&self, session: u64, ino: u64) -> bool {
        let expiry = self.hold_expiry();
        session != 0
            && self
                .holds()
                .sessions
                .get(&(auth::holder(), session))
                .is_some_and(|s| s.seen.elapsed() < expiry && s.held.contains_key(&ino))
    }

    /// Counts an open through the MDS at once (a caller whose principal
    /// holds its bound of open files is refused with EBUSY; no other is).
    pub(super) fn note_open(&self, session: u64, ino: u64, write: bool) -> Result<(), MdsError> {
        if session == 0 || self.cfg.hold_expiry_ms == 0 {
            return Ok(());
        }
        let expiry = self.hold_expiry();
        let hold = Hold {
            opened: true,
            write,
        };
        self.holds()
            .hold((auth::holder(), session), ino, hold, expiry)
    }

    /// HOLDING: the session's open files now (replacing what it said
    /// before). A file new to the session counts only if it exists and
    /// the caller may read it (then as opened for reading) or it is an
    /// orphan (then only kept alive); writing stays allowed only where the
    /// session was granted it by an open through the MDS.
    pub(super) fn holding(
        &self,
        c: &Creds,
        session: u64,
        held: Vec<(u64, bool)>,
    ) -> Result<MdsReply, MdsError> {
        if session == 0 {
            return Err(err(Errno::Inval, "holding: session 0 is not a session"));
        }
        if held.len() > HELD_MAX {
            return Err(err(
                Errno::Inval,
                format!("holding: {} open files, at most {HELD_MAX}", held.len()),
            ));
        }
        let key = (auth::holder(), session);
        let expiry = self.hold_expiry();
        let mut seen = HashSet::with_capacity(held.len());
        let held: Vec<(u64, bool)> = held.into_iter().filter(|h| seen.insert(h.0)).collect();
        // Files new to the session are judged outside the table's lock;
        // what it held when the report was read is remembered, so an open
        // noted meanwhile is kept.
        let (fresh, known): (Vec<(u64, bool)>, HashSet<u64>) = {
            let mut h = self.holds();
            let s = h.session(key, expiry);
            let fresh = held
                .iter()
                .filter(|(ino, _)| !s.held.contains_key(ino))
                .copied()
                .collect();
            (fresh, s.held.keys().copied().collect())
        };
        let snap = self.kv.read()?;
        // A file the caller could open now — reachable by a path walk
        // inside its subtree, and readable (writable, if reported so), or
        // its own — counts as opened that way: what a client that opened
        // it before an MDS restart re-announces, and never more than an
        // open (after a chmod, for an owner) would grant. An orphan inside
        // the subtree counts only as kept alive.
        let owns = Owns::current();
        let mut memo = HashMap::new();
        let mut judged: HashMap<u64, Hold> = HashMap::with_capacity(fresh.len());
        for (ino, write) in fresh {
            let Ok(i) = snap.live_inode(ino) else {
                continue;
            };
            if !super::search::searchable(&snap, c, ino, &mut memo)? {
                continue;
            }
            // A principal that may act as its owner may always (a chmod
            // of its own would let it, so this grants nothing it could
            // not take): a file made 0444, or made so while open, stays
            // writable through the writer's descriptor across an MDS
            // restart. A read-only principal is granted no writing.
            let owner = owns.owns(i.attr.uid);
            let readable = owner || perm::allowed(&i.attr, c, R);
            let writable = owner || readable && perm::allowed(&i.attr, c, W);
            if readable || i.attr.nlink == 0 {
                judged.insert(
                    ino,
                    Hold {
                        opened: readable,
                        write: write && writable && owns != Owns::Nothing,
                    },
                );
            }
        }
        drop(snap);
        let mut h = self.holds();
        let mut now: Vec<(u64, Hold)> = {
            let cur = h.sessions.get(&key).map(|s| &s.held);
            held.iter()
                .filter_map(|&(ino, write)| match cur.and_then(|m| m.get(&ino)) {
                    Some(g) => Some((
                        ino,
                        Hold {
                            opened: g.opened,
                            write: write && g.write,
                        },
                    )),
                    None => judged.get(&ino).map(|&j| (ino, j)),
                })
                .collect()
        };
        if let Some(cur) = h.sessions.get(&key) {
            now.extend(
                cur.held
                    .iter()
                    .filter(|(ino, _)| !known.contains(ino) && !seen.contains(ino))
                    .map(|(&ino, &g)| (ino, g)),
            );
        }
        h.remove(key);
        if now.is_empty() {
            return Ok(MdsReply::Done);
        }
        for (ino, hold) in now {
            // Past the principal's bound the rest are not kept: only its
            // own orphans can then go early.
            if h.hold(key, ino, hold, expiry).is_err() {
                break;
            }
        }
        Ok(MdsReply::Done)
    }

    /// An inode lost its last name: with holds turned off it goes now,
    /// else the delete worker looks at it when it is due.
    pub(super) async fn orphaned(&self, orphan: Option<u64>) -> Result<(), MdsError> {
        let Some(ino) = orphan else { return Ok(()) };
        if self.cfg.hold_expiry_ms == 0 {
            self.kv.write(move |tx| ns::reap_orphan(tx, ino)).await?;
            self.metrics.orphans_reaped.inc();
            self.delete_wake.notify_one();
            return Ok(());
        }
        // It is due after the hold expiry: wake the worker only if it
        // would sleep past that (a storm of unlinks must not make it scan
        // every orphan once per unlink).
        let due = proto::clock::now_ms() + self.cfg.hold_expiry_ms;
        if self.delete_due_ms.load(std::sync::atomic::Ordering::SeqCst) > due {
            self.delete_wake.notify_one();
        }
        Ok(())
    }

    /// Unlinked inodes still kept.
    pub fn orphan_count(&self) -> Result<u64, MdsError> {
        let mut n = 0u64;
        self.kv.read()?.try_scan_all(T::Orphans, &mut |_, _| {
            n += 1;
            Ok(true)
        })?;
        Ok(n)
    }

    /// Reaps the orphans that are due and held by no session; returns how
    /// long until the next one is due (`None`: no orphans left).
    pub(super) async fn reap_orphans(&self) -> Result<Option<Duration>, MdsError> {
        let now = proto::clock::now_ms();
        // Clients re-announce what they hold once they can reach the MDS:
        // after its start, and after the replays it waited for.
        if self.replay_pending() {
            return Ok(Some(Duration::from_millis(500)));
        }
        let started = now
            .saturating_sub(self.started.elapsed().as_millis() as u64)
            .max(
                self.serving_since_ms
                    .load(std::sync::atomic::Ordering::SeqCst),
            );
        let grace = self.cfg.hold_expiry_ms;
        let mut due = Vec::new();
        let mut next: Option<u64> = None;
        let mut scanned = 0usize;
        self.kv.read()?.try_scan_all(T::Orphans, &mut |k, v| {
            let ino = <[u8; 8]>::try_from(k)
                .map(u64::from_be_bytes)
                .map_err(|_| {
                    crate::kv::io_err("orphans", format!("key of {} bytes, expected 8", k.len()))
                })?;
            let since = <[u8; 8]>::try_from(v).map(u64::from_le_bytes).unwrap_or(0);
            let at = since.max(started).saturating_add(grace);
            if at <= now {
                due.push(ino);
            } else {
                next = Some(next.map_or(at, |n| n.min(at)));
            }
            scanned += 1;
            Ok(scanned < DELETE_BATCH)
        })?;
        if !due.is_empty() {
            let held = self.holds().all_held(self.hold_expiry());
            let mut queued = false;
            let (open, free): (Vec<u64>, Vec<u64>) =
                due.into_iter().partition(|ino| held.contains(ino));
            if !open.is_empty() {
                // Still open somewhere: look again after one interval.
                let at = now + proto::mds::HOLD_INTERVAL_MS;
                next = Some(next.map_or(at, |n| n.min(at)));
            }
            // A log record per chunk of orphans, not one per orphan.
            for chunk in free.chunks(REAP_CHUNK) {
                let chunk = chunk.to_vec();
                let n = chunk.len() as u64;
                let jobs = self
                    .kv
                    .write(move |tx| {
                        let mut jobs = 0usize;
                        for ino in chunk {
                            jobs += usize::from(ns::reap_orphan(tx, ino)?.is_some());
                        }
                        Ok(jobs)
                    })
                    .await?;
                queued |= jobs > 0;
                self.metrics.orphans_reaped.inc_by(n);
            }
            if queued {
                self.delete_wake.notify_one();
            }
        }
        Ok(next.map(|at| Duration::from_millis(at.saturating_sub(now).max(1))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flooding_principal_only_ever_evicts_itself() {
        let mut h = Holds::default();
        let expiry = Duration::from_secs(60);
        let opened = Hold {
            opened: true,
            write: true,
        };
        // The victim holds a file open.
        h.hold((1, 1), 42, opened, expiry).unwrap();
        // A flooder makes far more sessions than the table holds.
        for s in 0..(SESSIONS_MAX as u64 + 5_000) {
            h.hold((2, s), 7, Hold::default(), expiry).unwrap();
        }
        assert!(
            h.holds((1, 1), 42, true, expiry),
            "the victim's hold survives"
        );
        let flooder = h.usage[&2];
        assert_eq!(flooder.sessions, SESSIONS_PER_PRINCIPAL);
        assert_eq!(flooder.held, SESSIONS_PER_PRINCIPAL);
        // Many principals each at their bound fill the table: the largest
        // gives way, a newcomer still gets in.
        for p in 100..(100 + (SESSIONS_MAX / SESSIONS_PER_PRINCIPAL) as u64 + 2) {
            for s in 0..SESSIONS_PER_PRINCIPAL as u64 {
                h.hold((p, s), 7, Hold::default(), expiry).unwrap();
            }
        }
        assert!(h.sessions.len() <= SESSIONS_MAX);
        h.hold((3, 1), 9, opened, expiry).unwrap();
        assert!(h.holds((3, 1), 9, false, expiry));
        // A reported hold grants nothing; an opened one does.
        assert!(!h.holds((2, SESSIONS_MAX as u64 + 4_999), 7, false, expiry));
        // The per-principal bound on held files refuses only that principal.
        let mut h = Holds::default();
        for ino in 0..HELD_PER_PRINCIPAL as u64 {
            let s = ino % SESSIONS_PER_PRINCIPAL as u64;
            if h.hold((4, s), 1_000 + ino, Hold::default(), expiry)
                .is_err()
            {
                panic!("refused below the bound at {ino}");
            }
        }
        let u = h.usage[&4];
        assert_eq!(
            (u.sessions, u.held),
            (SESSIONS_PER_PRINCIPAL, HELD_PER_PRINCIPAL)
        );
        assert!(h.hold((4, 0), 1, Hold::default(), expiry).is_err());
        assert!(h.hold((5, 0), 1, Hold::default(), expiry).is_ok());
    }
}
