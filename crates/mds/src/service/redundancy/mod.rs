//! Redundancy: the MDS is the authority on where every copy of a stripe
//! object is and whether it is fresh (the layout's `homes`). Here:
//!
//! - MARK STALE: a client's write to a copy failed; the copy is recorded
//!   stale (durably) and *fenced* before the write may be acknowledged —
//!   its object's version is raised so every capability issued before is
//!   refused there, or, when its OSD cannot be reached, the MDS waits until
//!   that OSD's lease has run out (an OSD without a lease serves only the
//!   MDS, and the MDS fences an OSD's stale copies before it renews one);
//! - the recovery worker: marks OSDs out after `out_after`, and in passes
//!   over every layout re-copies stale copies and makes new copies where an
//!   object has fewer than its replica count on OSDs that are in, then
//!   drops the copies left on OSDs that are out;
//! - OSD OUT / IN for operators, and the counts behind `tessera status`.
//!
//! While recovery copies a file's object, write capabilities for the file
//! are not handed out and the ones out there are revoked (the sources'
//! versions raised), so no write can land on the source after it was read
//! and be missing from the new copy.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use proto::layout::Copies;
use proto::mds::{Creds, Errno, MdsError, MdsReply, Redundancy};

use super::{Mds, err};
use crate::records::Records;

mod recovery;
mod scrub;
mod stale;

/// Bytes recovery copies per request.
const COPY_CHUNK: u64 = 4 << 20;
/// Files recovery copies at once.
const RECOVERY_PARALLEL: usize = 4;
/// How long MARK STALE tries to reach a copy's OSD before it waits out its lease.
const FENCE_TIMEOUT: Duration = Duration::from_secs(2);

/// What recovery knows between passes (in memory; rebuilt from the
/// layouts at start, so nothing here needs to be durable).
#[derive(Debug, Default)]
pub struct RecoveryState {
    /// Counts of the last pass and progress.
    pub counts: Redundancy,
    /// Inodes whose objects are being copied: no write grants meanwhile.
    busy: HashSet<u64>,
    /// Stale copies per OSD: object id → fenced since this MDS started.
    pub(super) stale_on: HashMap<u32, HashMap<u64, bool>>,
    /// When each OSD was first seen down (or this MDS started).
    down_since: HashMap<u32, Instant>,
    /// Recent (time, bytes recovered) samples for the rate.
    samples: Vec<(Instant, u64)>,
    /// Inconsistent copies found by scrubs and not yet repaired.
    inconsistent: HashSet<(u64, u64, u32)>,
    /// What the last scrub could not check.
    scrub_unchecked: u64,
    /// The rate limit's window: when it started and bytes copied since.
    throttle: Option<(Instant, u64)>,
    /// Copies dropped from layouts, removed once every capability that
    /// could reach them has expired: (when, OSD, object id, inode, tries left).
    removals: Vec<(Instant, u32, u64, u64, u8)>,
}

/// One stripe object's copies, as a recovery step sees them.
struct Stripe {
    oid: u64,
    set: usize,
    stripe: usize,
    copies: Copies,
}

impl Mds {
    pub(super) fn rec(&self) -> std::sync::MutexGuard<'_, RecoveryState> {
        self.recovery.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// OSDs heartbeating now.
    pub(super) fn up_osds(&self) -> HashSet<u32> {
        let down_after = Duration::from_millis(self.cfg.down_after_ms);
        self.live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .osds
            .iter()
            .filter(|(_, l)| l.seen.elapsed() < down_after)
            .map(|(&id, _)| id)
            .collect()
    }

    /// Rebuilds the index of stale copies from every layout (at start: none
    /// of them is known to be fenced, so each OSD's first report fences its own).
    pub(super) fn index_stale_copies(&self) -> Result<(), MdsError> {
        let mut index: HashMap<u32, HashMap<u64, bool>> = HashMap::new();
        self.for_each_stripe(|_, s| {
            for &osd in &s.copies.stale {
                index.entry(osd).or_default().insert(s.oid, false);
            }
        })?;
        self.rec().stale_on = index;
        Ok(())
    }

    /// Waits while recovery copies `ino`'s objects (write grants wait).
    pub(super) async fn wait_not_recovering(&self, ino: u64) {
        while self.recovering(ino) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Whether recovery holds `ino` now.
    pub(super) fn recovering(&self, ino: u64) -> bool {
        self.rec().busy.contains(&ino)
    }

    /// An answer that may carry write capabilities for `ino`, made outside
    /// any recovery of it: made after waiting, and made again if recovery
    /// took the file meanwhile (recovery marks the file before it takes
    /// the version it fences with, so an answer made while it was not
    /// marked carries capabilities that fence revokes).
    pub(super) async fn outside_recovery(
        &self,
        ino: u64,
        answer: impl Fn() -> Result<MdsReply, MdsError>,
    ) -> Result<MdsReply, MdsError> {
        loop {
            self.wait_not_recovering(ino).await;
            let r = answer()?;
            if !self.recovering(ino) {
                return Ok(r);
            }
        }
    }

    /// Holds `ino` against recovery (for changes to its objects that must
    /// not interleave with a copy: truncation, revocation).
    pub(super) async fn hold(&self, ino: u64) -> Busy<'_> {
        Busy::acquire(self, ino).await
    }

    /// OSD OUT / IN (operator). Out is refused when an object would be left
    /// with no fresh copy on an OSD that is in and up, unless `force`.
    pub(super) async fn set_osd_out(
        &self,
        c: &Creds,
        osd: u32,
        out: bool,
        force: bool,
    ) -> Result<MdsReply, MdsError> {
        if c.uid != 0 {
            return Err(err(Errno::Perm, "only root may mark OSDs out or in"));
        }
        let map = self.current_map()?;
        let Some(entry) = map.osd(osd) else {
            let known: Vec<String> = map.osds.iter().map(|o| o.id.to_string()).collect();
            return Err(err(
                Errno::NoEnt,
                format!(
                    "OSD {osd} is not in the map (OSDs: {})",
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                ),
            ));
        };
        if entry.out == out {
            return Ok(MdsReply::Done);
        }
        if out && !force {
            let up = self.up_osds();
            let usable = |o: u32| o != osd && up.contains(&o) && map.osd(o).is_some_and(|e| !e.out);
            let mut orphans = 0u64;
            self.for_each_stripe(|_, s| {
                if s.copies.fresh.contains(&osd) && !s.copies.fresh.iter().any(|&o| usable(o)) {
                    orphans += 1;
                }
            })?;
            if orphans > 0 {
                return Err(err(
                    Errno::Busy,
                    format!(
                        "OSD {osd} holds the only fresh copy on an up OSD of {orphans} objects; \
                         marking it out would leave them without one until recovery copies \
                         them (pass --force to do it anyway)"
                    ),
                ));
            }
        }
        self.set_out(osd, out, if out { "operator" } else { "operator (in)" })
            .await?;
        Ok(MdsReply::Done)
    }

    /// Marks `osd` out or in: a new map epoch.
    async fn set_out(&self, osd: u32, out: bool, why: &'static str) -> Result<u64, MdsError> {
        let epoch = self
            .kv
            .write(move |tx| {
                let mut st = tx.state()?;
                let mut m = tx.map(st.map_epoch)?.unwrap_or_default();
                if let Some(o) = m.osds.iter_mut().find(|o| o.id == osd) {
                    o.out = out;
                }
                m.epoch += 1;
                st.map_epoch = m.epoch;
                tx.put_map(&m)?;
                tx.put_state(&st)?;
                Ok(m.epoch)
            })
            .await?;
        tracing::warn!(
            osd,
            out,
            epoch,
            why,
            "OSD marked {}",
            if out { "out" } else { "in" }
        );
        self.recovery_wake.notify_one();
        Ok(epoch)
    }
}

/// Marks an inode busy (write grants wait) for as long as it lives.
pub(super) struct Busy<'a> {
    mds: &'a Mds,
    ino: u64,
}

impl<'a> Busy<'a> {
    /// Waits until no other recovery step holds `ino`, then holds it.
    async fn acquire(mds: &'a Mds, ino: u64) -> Busy<'a> {
        while !mds.rec().busy.insert(ino) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Busy { mds, ino }
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.mds.rec().busy.remove(&self.ino);
    }
}
