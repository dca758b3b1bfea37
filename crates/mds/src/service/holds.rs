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

use std::collections::HashSet;
use std::time::Instant;

use proto::mds::HELD_MAX;

use super::*;

/// Most sessions tracked at once (silent ones are dropped first).
pub const SESSIONS_MAX: usize = 16_384;

/// One client session's open files.
struct Session {
    seen: Instant,
    /// inode → held for writing.
    held: HashMap<u64, bool>,
}

/// The sessions, keyed by (principal, session id): a principal cannot
/// change what another principal's session holds.
#[derive(Default)]
pub struct Holds {
    sessions: HashMap<(u64, u64), Session>,
}

impl Holds {
    fn prune(&mut self, expiry: Duration) {
        self.sessions.retain(|_, s| s.seen.elapsed() < expiry);
    }

    fn session(&mut self, key: (u64, u64), expiry: Duration) -> Result<&mut Session, MdsError> {
        if !self.sessions.contains_key(&key) && self.sessions.len() >= SESSIONS_MAX {
            self.prune(expiry);
            if self.sessions.len() >= SESSIONS_MAX {
                return Err(err(
                    Errno::Busy,
                    format!("{SESSIONS_MAX} client sessions hold open files already"),
                ));
            }
        }
        let s = self.sessions.entry(key).or_insert_with(|| Session {
            seen: Instant::now(),
            held: HashMap::new(),
        });
        s.seen = Instant::now();
        Ok(s)
    }

    /// Whether the session holds `ino` open (for writing, if `write`).
    fn holds(&self, key: (u64, u64), ino: u64, write: bool, expiry: Duration) -> bool {
        self.sessions.get(&key).is_some_and(|s| {
            s.seen.elapsed() < expiry && s.held.get(&ino).is_some_and(|&w| w || !write)
        })
    }

    /// Every inode some live session holds.
    fn all_held(&mut self, expiry: Duration) -> HashSet<u64> {
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

    /// Counts an open through the MDS at once.
    pub(super) fn note_open(&self, session: u64, ino: u64, write: bool) -> Result<(), MdsError> {
        if session == 0 || self.cfg.hold_expiry_ms == 0 {
            return Ok(());
        }
        let mut h = self.holds();
        let s = h.session((auth::holder(), session), self.hold_expiry())?;
        let w = s.held.entry(ino).or_insert(false);
        *w |= write;
        Ok(())
    }

    /// HOLDING: the session's open files now (replacing what it said before).
    pub(super) fn holding(
        &self,
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
        let expiry = self.hold_expiry();
        let mut h = self.holds();
        let s = h.session((auth::holder(), session), expiry)?;
        let before = std::mem::take(&mut s.held);
        for (ino, write) in held {
            // Writing stays allowed only where the session was granted it.
            let w = write && before.get(&ino).copied().unwrap_or(false);
            let e = s.held.entry(ino).or_insert(false);
            *e |= w;
        }
        if s.held.is_empty() {
            h.sessions.remove(&(auth::holder(), session));
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
