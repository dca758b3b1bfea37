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
use std::time::Instant;

use proto::layout::{Copies, Homes, Layout};
use proto::mds::{Redundancy, ScrubReport};

use super::*;

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

    /// Raises the version of every not-yet-fenced stale copy on `osd`
    /// (called before its report is answered, so before it gets a lease).
    pub(super) async fn fence_osd(&self, osd: u32) -> Result<(), MdsError> {
        let todo: Vec<u64> = self
            .rec()
            .stale_on
            .get(&osd)
            .map(|m| m.iter().filter(|(_, f)| !**f).map(|(&o, _)| o).collect())
            .unwrap_or_default();
        if todo.is_empty() {
            return Ok(());
        }
        let v = self.bump_version().await?;
        let map = self.current_map()?;
        for oid in todo {
            self.set_version_creating(&map, osd, oid, v).await?;
            if let Some(f) = self
                .rec()
                .stale_on
                .get_mut(&osd)
                .and_then(|m| m.get_mut(&oid))
            {
                *f = true;
            }
        }
        tracing::info!(osd, "fenced the OSD's stale copies before its lease");
        Ok(())
    }

    /// SET VERSION on one copy, creating the object when it is missing (so
    /// an old capability cannot create it either).
    pub(super) async fn set_version_creating(
        &self,
        map: &OsdMap,
        osd: u32,
        oid: u64,
        v: u64,
    ) -> Result<(), MdsError> {
        let set = Command::SetVersion {
            pid: DATA_PARTITION,
            oid,
            version: v,
        };
        match self.osd_call(map, osd, set.clone()).await? {
            Ok(()) => {}
            Err(ConnError::Remote(e)) if e.code == ErrorCode::NoObject => {
                let create = Command::Create {
                    pid: DATA_PARTITION,
                    oid: Some(oid),
                    count: 1,
                };
                match self.osd_call(map, osd, create).await? {
                    Ok(()) => {}
                    Err(ConnError::Remote(e)) if e.code == ErrorCode::Exists => {}
                    Err(e) => return Err(osd_err(osd, e)),
                }
                self.osd_call(map, osd, set)
                    .await?
                    .map_err(|e| osd_err(osd, e))?;
            }
            Err(e) => return Err(osd_err(osd, e)),
        }
        self.metrics.revocations.inc();
        Ok(())
    }

    /// MARK STALE (see the module comment). Setting a copy aside cuts the
    /// file's redundancy and revokes every capability for it, so the
    /// caller must be able to change the file (its session holds it open
    /// for writing, or the permission bits let it write) — or, a reader
    /// reporting a copy that failed its checksums, the MDS must find that
    /// copy bad itself.
    pub(super) async fn mark_stale(
        &self,
        c: &Creds,
        session: u64,
        ino: u64,
        (objset, stripe, osd): (u64, u32, u32),
    ) -> Result<MdsReply, MdsError> {
        if !self.session_holds(session, ino, true) {
            let i = self.kv.read()?.live_inode(ino)?;
            if !perm::allowed(&i.attr, c, W) {
                perm::check(&i.attr, c, R, "mark a copy stale")?;
                self.confirm_bad_copy(&i, objset, osd).await?;
            }
        }
        let stale = vec![(objset, stripe, osd)];
        self.record_stale(ino, stale).await?;
        self.outside_recovery(ino, || self.file_answer(c, ino, None, false))
            .await
    }

    /// Refuses to set aside OSD `osd`'s copy of object set `objset` of `i`
    /// unless the MDS reads that copy and finds it bad (EIO when it reads
    /// whole, EBUSY when it cannot be checked now): what a reader's report
    /// must be confirmed by.
    async fn confirm_bad_copy(&self, i: &Inode, objset: u64, osd: u32) -> Result<(), MdsError> {
        let oid = i
            .layout
            .as_ref()
            .and_then(|l| l.objsets.get(objset as usize).copied())
            .ok_or_else(|| err(Errno::Inval, format!("no object set {objset}")))?;
        // One confirmation at a time in the whole MDS (each reads a whole
        // copy): readers' reports cannot make it read without end.
        static CONFIRMING: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(1);
        let Ok(_one) = CONFIRMING.try_acquire() else {
            return Err(err(
                Errno::Busy,
                "another reader's report is being checked; try again",
            ));
        };
        let map = self.current_map().unwrap_or_default();
        match self.digest(&map, osd, oid, true).await {
            Ok(None) => Ok(()),
            Ok(Some(_)) => Err(err(
                Errno::Io,
                format!(
                    "OSD {osd}'s copy of object {oid:#x} reads whole: a reader cannot set it aside"
                ),
            )),
            Err(e) => Err(err(
                Errno::Busy,
                format!(
                    "OSD {osd}'s copy of object {oid:#x} could not be checked ({e}); try again"
                ),
            )),
        }
    }

    /// Records copies (object set, stripe, OSD) of `ino` as stale and fences
    /// each: durably first, then its version raised, or its OSD's lease
    /// waited out. The last fresh copy of a stripe is never made stale (EIO).
    pub(super) async fn record_stale(
        &self,
        ino: u64,
        copies: Vec<(u64, u32, u32)>,
    ) -> Result<(), MdsError> {
        let todo = copies.clone();
        let (changed, v) = self
            .kv
            .write(move |tx| {
                let mut i = tx.live_inode(ino)?;
                let Some(l) = i.layout.as_mut() else {
                    return Err(err(Errno::Inval, "only files have copies"));
                };
                let mut changed = Vec::new();
                for &(set, stripe, osd) in &todo {
                    let oid = *l.objsets.get(set as usize).ok_or_else(|| {
                        err(Errno::Inval, format!("no object set {set}"))
                    })?;
                    let c = l
                        .homes
                        .get_mut(set as usize)
                        .and_then(|h| h.stripes.get_mut(stripe as usize))
                        .ok_or_else(|| {
                            err(
                                Errno::Inval,
                                format!("object set {set} stripe {stripe} has no recorded copies"),
                            )
                        })?;
                    let Some(at) = c.fresh.iter().position(|&o| o == osd) else {
                        continue; // already stale, or not a copy any more
                    };
                    if c.fresh.len() == 1 {
                        return Err(err(
                            Errno::Io,
                            format!(
                                "OSD {osd} holds the last fresh copy of object {oid:#x} stripe {stripe}: \
                                 it cannot be set aside"
                            ),
                        ));
                    }
                    c.fresh.remove(at);
                    c.stale.push(osd);
                    changed.push((osd, oid));
                }
                if changed.is_empty() {
                    return Ok((changed, tx.state()?.cap_version));
                }
                let v = tx.take_cap_version()?;
                tx.put_inode(&i)?;
                Ok((changed, v))
            })
            .await?;
        for &(osd, oid) in &changed {
            self.rec()
                .stale_on
                .entry(osd)
                .or_default()
                .insert(oid, false);
            tracing::warn!(
                ino,
                osd,
                oid = format_args!("{oid:#x}"),
                "copy marked stale"
            );
            self.metrics.copies_marked_stale.inc();
        }
        for (osd, oid) in changed {
            self.fence_copy(osd, oid, v).await;
        }
        self.recovery_wake.notify_one();
        Ok(())
    }

    /// Fences one stale copy: raises its version, or waits until its OSD's
    /// lease has certainly run out (or a report fenced it meanwhile).
    async fn fence_copy(&self, osd: u32, oid: u64, v: u64) {
        let map = self.current_map().unwrap_or_default();
        let tried =
            tokio::time::timeout(FENCE_TIMEOUT, self.set_version_creating(&map, osd, oid, v)).await;
        if matches!(tried, Ok(Ok(()))) {
            if let Some(f) = self
                .rec()
                .stale_on
                .get_mut(&osd)
                .and_then(|m| m.get_mut(&oid))
            {
                *f = true;
            }
            return;
        }
        loop {
            let fenced = self
                .rec()
                .stale_on
                .get(&osd)
                .and_then(|m| m.get(&oid))
                .is_none_or(|&f| f);
            if fenced || self.lease_lapsed(osd) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
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

    /// Visits every stripe object with recorded copies: (inode, stripe).
    fn for_each_stripe(&self, mut f: impl FnMut(&Inode, Stripe)) -> Result<(), MdsError> {
        self.kv.read()?.try_scan_all(T::Inodes, &mut |_, v| {
            let i = postcard::from_bytes::<Inode>(v).map_err(|e| crate::kv::io_err("inode", e))?;
            if let Some(l) = &i.layout {
                for (set, h) in l.homes.iter().enumerate() {
                    for (j, c) in h.stripes.iter().enumerate() {
                        let s = Stripe {
                            oid: l.objsets.get(set).copied().unwrap_or(0),
                            set,
                            stripe: j,
                            copies: c.clone(),
                        };
                        f(&i, s);
                    }
                }
            }
            Ok(true)
        })
    }

    /// Marks out every OSD down longer than `out_after`.
    async fn mark_out_overdue(&self) {
        if self.cfg.out_after_ms == 0 {
            return;
        }
        let Ok(map) = self.current_map() else { return };
        let up = self.up_osds();
        let mut overdue = Vec::new();
        {
            let mut rec = self.rec();
            for o in &map.osds {
                if up.contains(&o.id) {
                    rec.down_since.remove(&o.id);
                    continue;
                }
                let since = *rec.down_since.entry(o.id).or_insert_with(Instant::now);
                if !o.out && since.elapsed() >= Duration::from_millis(self.cfg.out_after_ms) {
                    overdue.push(o.id);
                }
            }
        }
        for osd in overdue {
            if let Err(e) = self.set_out(osd, true, "down longer than out_after").await {
                tracing::warn!(osd, error = %e, "cannot mark the OSD out");
            }
        }
    }

    /// Removes the dropped copies whose time has come (from OSDs that are
    /// up; one that is not is tried once a minute for an hour, then left).
    async fn remove_dropped(&self) {
        let due: Vec<(Instant, u32, u64, u64, u8)> = {
            let mut rec = self.rec();
            let now = Instant::now();
            let (due, keep) = rec.removals.drain(..).partition(|r| r.0 <= now);
            rec.removals = keep;
            due
        };
        if due.is_empty() {
            return;
        }
        let Ok(map) = self.current_map() else { return };
        let up = self.up_osds();
        for (_, osd, oid, ino, tries) in due {
            // A copy placed there again since (out, then back in) stays.
            let listed = self
                .kv
                .read()
                .ok()
                .and_then(|s| s.inode(ino).ok().flatten())
                .is_some_and(|i| {
                    i.layout.is_some_and(|l| {
                        l.objsets
                            .iter()
                            .zip(&l.homes)
                            .any(|(&o, h)| o == oid && h.osds().any(|x| x == osd))
                    })
                });
            if listed {
                continue;
            }
            let rm = Command::Remove {
                pid: DATA_PARTITION,
                oid,
            };
            if up.contains(&osd) && self.osd_run(&map, osd, rm).await.is_ok() {
                // Gone: nothing left there to fence.
                if let Some(m) = self.rec().stale_on.get_mut(&osd) {
                    m.remove(&oid);
                }
                continue;
            }
            if tries > 0 {
                let next = Instant::now() + Duration::from_secs(60);
                self.rec().removals.push((next, osd, oid, ino, tries - 1));
            } else {
                tracing::info!(
                    osd,
                    oid = format_args!("{oid:#x}"),
                    "dropped copy left on its OSD"
                );
            }
        }
    }

    /// The recovery worker: runs until the process ends.
    pub async fn recovery_worker(self: Arc<Self>) {
        let (mut last_light, mut last_deep) = (Instant::now(), Instant::now());
        loop {
            self.mark_out_overdue().await;
            self.remove_dropped().await;
            if let Err(e) = self.retry_revocations(None).await {
                tracing::debug!(error = %e, "pending revocations not finished");
            }
            let more = match self.recovery_pass().await {
                Ok(more) => more,
                Err(e) => {
                    tracing::warn!(error = %e, "recovery pass failed");
                    true
                }
            };
            let more = more
                | match self.chain_pass().await {
                    Ok(short) => short,
                    Err(e) => {
                        tracing::warn!(error = %e, "replica chain pass failed");
                        true
                    }
                };
            let due = |last: Instant, secs: u64| secs > 0 && last.elapsed().as_secs() >= secs;
            if due(last_deep, self.cfg.deep_scrub_interval_secs) {
                last_deep = Instant::now();
                last_light = last_deep;
                self.scheduled_scrub(true).await;
            } else if due(last_light, self.cfg.scrub_interval_secs) {
                last_light = Instant::now();
                self.scheduled_scrub(false).await;
            }
            let wait = if more {
                Duration::from_millis(500)
            } else {
                Duration::from_millis(self.cfg.recovery_interval_ms.max(100))
            };
            let _ = tokio::time::timeout(wait, self.recovery_wake.notified()).await;
        }
    }

    async fn scheduled_scrub(&self, deep: bool) {
        match self.scrub(ROOT_INO, deep).await {
            Ok(r) => tracing::info!(
                deep,
                objects = r.objects,
                inconsistent = r.inconsistent,
                repaired = r.repaired,
                "scheduled scrub done"
            ),
            Err(e) => tracing::warn!(deep, error = %e, "scheduled scrub failed"),
        }
    }

    /// One pass: counts every stripe object's copies and repairs what it
    /// can. Returns whether work is left that could not be done yet.
    pub async fn recovery_pass(self: &Arc<Self>) -> Result<bool, MdsError> {
        let map = self.current_map()?;
        let up = self.up_osds();
        let is_in = |o: u32| map.osd(o).is_some_and(|e| !e.out);
        let mut counts = Redundancy {
            osds: map.osds.len() as u32,
            ..Redundancy::default()
        };
        let root_default = self
            .kv
            .read()?
            .live_inode(ROOT_INO)?
            .dir
            .map_or(1, |d| u32::from(d.default_layout.replicas));
        counts.max_replicas = root_default;
        let mut todo: Vec<u64> = Vec::new();
        let inconsistent = self.rec().inconsistent.clone();
        let mut placed = Placed::default();
        self.for_each_stripe(|i, s| {
            let Some(l) = &i.layout else { return };
            let r = usize::from(l.spec.replicas.max(1));
            counts.max_replicas = counts.max_replicas.max(r as u32);
            counts.objects += 1;
            let fresh_up: Vec<u32> = s
                .copies
                .fresh
                .iter()
                .copied()
                .filter(|o| up.contains(o))
                .collect();
            let fresh_ok = fresh_up.iter().filter(|&&o| is_in(o)).count();
            let on_out = s
                .copies
                .fresh
                .iter()
                .chain(&s.copies.stale)
                .any(|&o| !is_in(o));
            if fresh_up.is_empty() {
                counts.unfound += 1;
            } else if fresh_ok < r {
                counts.degraded += 1;
            }
            if on_out {
                counts.misplaced += 1;
            }
            if inconsistent.contains(&(i.attr.ino, s.set as u64, s.stripe as u32)) {
                counts.inconsistent += 1;
            }
            let in_copies = s
                .copies
                .fresh
                .iter()
                .chain(&s.copies.stale)
                .filter(|&&o| is_in(o))
                .count();
            let stale_up = s.copies.stale.iter().any(|o| up.contains(o) && is_in(*o));
            let moved = !on_out && !backfill(&map, &up, l, s.set, s.stripe, &mut placed).is_empty();
            if moved {
                counts.misplaced += 1;
            }
            let needs = stale_up || in_copies < r.min(map.placeable()) || on_out || moved;
            if needs && !fresh_up.is_empty() {
                counts.objects_left += 1;
                counts.bytes_left += l
                    .spec
                    .object_len(i.attr.size, s.set as u64, s.stripe as u32);
                if todo.last() != Some(&i.attr.ino) {
                    todo.push(i.attr.ino);
                }
            }
        })?;
        {
            let mut rec = self.rec();
            counts.bytes_recovered = rec.counts.bytes_recovered;
            counts.rate_bps = rate(&mut rec.samples);
            counts.checked = true;
            rec.counts = counts.clone();
        }
        self.metrics.set_redundancy(&counts);
        let (map, up) = (Arc::new(map), Arc::new(up));
        let mut more = false;
        let mut failed = 0u64;
        let mut last_error = None;
        let mut set = tokio::task::JoinSet::new();
        let mut todo = todo.into_iter();
        loop {
            while set.len() < RECOVERY_PARALLEL {
                let Some(ino) = todo.next() else { break };
                let (me, map, up) = (self.clone(), map.clone(), up.clone());
                set.spawn(async move { (ino, me.recover_inode(ino, &map, &up).await) });
            }
            let Some(done) = set.join_next().await else {
                break;
            };
            match done {
                Ok((_, Ok(left))) => more |= left,
                Ok((ino, Err(e))) => {
                    more = true;
                    failed += 1;
                    tracing::debug!(ino, error = %e, "recovery of the file failed; will retry");
                    last_error = Some(e.to_string());
                }
                Err(e) => {
                    more = true;
                    last_error = Some(e.to_string());
                }
            }
        }
        if let Some(e) = last_error {
            tracing::warn!(files = failed, last_error = %e, "recovery pass left files to retry");
        }
        Ok(more)
    }

    /// Brings every stripe object of `ino` to its replica count on OSDs
    /// that are in (see the module comment for why writes pause).
    async fn recover_inode(
        &self,
        ino: u64,
        map: &OsdMap,
        up: &HashSet<u32>,
    ) -> Result<bool, MdsError> {
        let _busy = Busy::acquire(self, ino).await;
        let Some(i) = self.kv.read()?.inode(ino)? else {
            return Ok(false);
        };
        let Some(l) = i.layout.clone() else {
            return Ok(false);
        };
        let r = usize::from(l.spec.replicas.max(1)).min(map.placeable());
        let is_in = |o: u32| map.osd(o).is_some_and(|e| !e.out);
        let mut v = None;
        let mut left = false;
        let mut placed = Placed::default();
        for (set, h) in l.homes.iter().enumerate() {
            let oid = l.objsets[set];
            for (j, c) in h.stripes.iter().enumerate() {
                let sources: Vec<u32> =
                    c.fresh.iter().copied().filter(|o| up.contains(o)).collect();
                let Some(&src) = sources.first() else {
                    left = true;
                    continue;
                };
                let mut targets: Vec<u32> = c
                    .stale
                    .iter()
                    .copied()
                    .filter(|&o| up.contains(&o) && is_in(o))
                    .collect();
                let in_copies = c
                    .fresh
                    .iter()
                    .chain(&c.stale)
                    .filter(|&&o| is_in(o))
                    .count();
                if in_copies < r {
                    targets.extend(new_homes(map, up, h, c, oid, r - in_copies));
                }
                let fresh_in = c.fresh.iter().filter(|&&o| is_in(o)).count();
                let drop_out = c.fresh.iter().chain(&c.stale).any(|&o| !is_in(o));
                // Healthy but not where placement now puts it (an OSD was
                // added or came back in): copy to the new home first, drop
                // the surplus after.
                let mut desired = None;
                if targets.is_empty() && !drop_out && c.stale.is_empty() {
                    let moves = backfill(map, up, &l, set, j, &mut placed);
                    if !moves.is_empty() {
                        targets = moves;
                        desired = placed
                            .row(
                                map,
                                oid,
                                l.spec.stripe_count,
                                u32::from(l.spec.replicas.max(1)),
                                j,
                            )
                            .map(<[u32]>::to_vec);
                    }
                }
                if targets.is_empty() && !(drop_out && fresh_in >= r) {
                    if drop_out || in_copies < r {
                        left = true;
                    }
                    continue;
                }
                let version = match v {
                    Some(v) => v,
                    None => {
                        let n = self.bump_version().await?;
                        v = Some(n);
                        n
                    }
                };
                // Writers out: raise the sources' versions first (a source
                // that cannot be reached: try this stripe again next pass).
                let mut fenced = true;
                for &s in &sources {
                    if let Err(e) = self.set_version_creating(map, s, oid, version).await {
                        tracing::debug!(ino, osd = s, error = %e, "source not reachable");
                        fenced = false;
                        break;
                    }
                }
                if !fenced {
                    left = true;
                    continue;
                }
                let mut made = Vec::new();
                for t in targets {
                    match self.copy_object(map, src, t, oid, version).await {
                        Ok(bytes) => {
                            made.push(t);
                            self.recovered(bytes);
                        }
                        Err(e) => {
                            left = true;
                            tracing::warn!(ino, osd = t, error = %e, "copy failed; will retry");
                        }
                    }
                }
                let s = Stripe {
                    oid,
                    set,
                    stripe: j,
                    copies: c.clone(),
                };
                let dropped = self
                    .commit_copies(ino, &s, src, made, map, r, desired, up)
                    .await?;
                // A client may still hold the old layout with capabilities
                // for the dropped copy: it is removed once they expired.
                let when = Instant::now() + Duration::from_secs(self.cfg.cap_ttl_secs + 5);
                self.rec()
                    .removals
                    .extend(dropped.into_iter().map(|osd| (when, osd, oid, ino, 60)));
            }
        }
        Ok(left)
    }

    /// Records the copies made as fresh (if the source is still fresh and
    /// the stripe's copies are as they were read), then drops the copies on
    /// OSDs that are out once enough fresh ones are in. Returns the dropped OSDs.
    #[expect(
        clippy::too_many_arguments,
        reason = "one recovery step's whole context"
    )]
    async fn commit_copies(
        &self,
        ino: u64,
        s: &Stripe,
        src: u32,
        made: Vec<u32>,
        map: &OsdMap,
        r: usize,
        desired: Option<Vec<u32>>,
        up: &HashSet<u32>,
    ) -> Result<Vec<u32>, MdsError> {
        let up = up.clone();
        let (set, j, seen) = (s.set, s.stripe, s.copies.clone());
        let outs: HashSet<u32> = map.osds.iter().filter(|o| o.out).map(|o| o.id).collect();
        let made2 = made.clone();
        let dropped = self
            .kv
            .write(move |tx| {
                let Some(mut i) = tx.inode(ino)? else {
                    return Ok(Vec::new());
                };
                let Some(c) = i
                    .layout
                    .as_mut()
                    .and_then(|l| l.homes.get_mut(set))
                    .and_then(|h| h.stripes.get_mut(j))
                else {
                    return Ok(Vec::new());
                };
                if *c != seen || !c.fresh.contains(&src) {
                    return Ok(Vec::new()); // changed meanwhile: the next pass looks again
                }
                for t in &made2 {
                    c.stale.retain(|o| o != t);
                    if !c.fresh.contains(t) {
                        c.fresh.push(*t);
                    }
                }
                // Only copies that are in and up count towards dropping others.
                let fresh_in = c
                    .fresh
                    .iter()
                    .filter(|o| !outs.contains(o) && up.contains(o))
                    .count();
                let mut dropped = Vec::new();
                if fresh_in >= r {
                    for o in c.fresh.iter().chain(&c.stale) {
                        if outs.contains(o) {
                            dropped.push(*o);
                        }
                    }
                    c.fresh.retain(|o| !outs.contains(o));
                    c.stale.retain(|o| !outs.contains(o));
                }
                // Backfill: beyond `r` fresh copies, drop those placement
                // no longer names.
                if let Some(want) = &desired {
                    while c.fresh.len() > r {
                        let Some(at) = c.fresh.iter().position(|o| !want.contains(o)) else {
                            break;
                        };
                        dropped.push(c.fresh.remove(at));
                    }
                }
                tx.put_inode(&i)?;
                Ok(dropped)
            })
            .await?;
        let mut rec = self.rec();
        for t in &made {
            if let Some(m) = rec.stale_on.get_mut(t) {
                m.remove(&s.oid);
            }
            // A removal queued for an earlier copy there must not take this one.
            rec.removals.retain(|r| !(r.1 == *t && r.2 == s.oid));
        }
        // A dropped copy stays to be fenced (its OSD may come back within
        // the capability lifetime) until its object is removed.
        for d in &dropped {
            rec.stale_on.entry(*d).or_default().insert(s.oid, false);
        }
        if !made.is_empty() {
            tracing::info!(ino, oid = format_args!("{:#x}", s.oid), stripe = j, copies = ?made, "copies made fresh");
        }
        Ok(dropped)
    }

    fn recovered(&self, bytes: u64) {
        let mut rec = self.rec();
        rec.counts.bytes_recovered += bytes;
        let total = rec.counts.bytes_recovered;
        rec.samples.push((Instant::now(), total));
        rec.counts.objects_left = rec.counts.objects_left.saturating_sub(1);
        rec.counts.bytes_left = rec.counts.bytes_left.saturating_sub(bytes);
        rec.counts.rate_bps = rate(&mut rec.samples);
        self.metrics.recovered_bytes.inc_by(bytes);
        self.metrics.recovered_objects.inc();
    }

    /// Copies object `oid` from OSD `src` to OSD `dst` (replacing what
    /// `dst` held), keeps holes as holes; the copy is at version `v` from
    /// before its first byte.
    /// Throttled to `recovery_mib_per_sec`. Returns the bytes copied.
    pub(super) async fn copy_object(
        &self,
        map: &OsdMap,
        src: u32,
        dst: u32,
        oid: u64,
        v: u64,
    ) -> Result<u64, MdsError> {
        let from = self.osd_client(map, src)?;
        let to = self.osd_client(map, dst)?;
        let (scap, dcap) = (self.admin_cap(src)?, self.admin_cap(dst)?);
        let pid = DATA_PARTITION;
        // Keep the target's object and with it its fence (a stale copy's
        // raised version): cut it to nothing rather than remove it; a new
        // one is made and fenced at `v` before any byte lands in it, so no
        // capability older than this copy can read a half-made copy.
        let cut = Command::Truncate { pid, oid, len: 0 };
        match to.run(Some(&dcap), cut, Bytes::new()).await {
            Ok(_) => {}
            Err(ConnError::Remote(e)) if e.code == ErrorCode::NoObject => {}
            Err(e) => return Err(osd_err(dst, e)),
        }
        // Versions only grow, so the copy stays at `v` to the end.
        self.set_version_creating(map, dst, oid, v).await?;
        let limit = self.cfg.recovery_mib_per_sec << 20;
        let read_at = |offset: u64| {
            let (from, scap) = (from.clone(), scap.clone());
            async move {
                let read = Command::Read {
                    pid,
                    oid,
                    offset,
                    len: COPY_CHUNK as u32,
                };
                from.run(Some(&scap), read, Bytes::new()).await
            }
        };
        // The next chunk is read while the current one is written.
        let (mut at, mut size, mut copied) = (0u64, u64::MAX, 0u64);
        let mut pending = read_at(0).await;
        loop {
            let a = match pending {
                Ok(a) => a,
                Err(ConnError::Remote(e)) if e.code == ErrorCode::NoObject => break,
                Err(e) => return Err(osd_err(src, e)),
            };
            if let proto::msg::Reply::Read { size: s } = a.reply {
                size = s;
            }
            if a.data.is_empty() {
                break;
            }
            let n = a.data.len() as u64;
            let data = a.data;
            let write = async {
                if data.iter().any(|&b| b != 0) {
                    let w = Command::Write {
                        pid,
                        oid,
                        offset: at,
                    };
                    to.run(Some(&dcap), w, data).await.map(|_| n)
                } else {
                    Ok(0)
                }
            };
            let next = at + n;
            if next < size {
                let (w, r) = tokio::join!(write, read_at(next));
                copied += w.map_err(|e| osd_err(dst, e))?;
                pending = r;
            } else {
                copied += write.await.map_err(|e| osd_err(dst, e))?;
                at = next;
                break;
            }
            at = next;
            if limit > 0 {
                self.throttle(n, limit).await;
            }
        }
        if size != u64::MAX {
            let t = Command::Truncate {
                pid,
                oid,
                len: size,
            };
            to.run(Some(&dcap), t, Bytes::new())
                .await
                .map_err(|e| osd_err(dst, e))?;
        }
        Ok(copied.max(size.min(at)))
    }

    /// Waits so that all copying together stays under `limit` bytes per
    /// second (a window that restarts after a second of quiet).
    async fn throttle(&self, n: u64, limit: u64) {
        let wait = {
            let mut rec = self.rec();
            let (start, bytes) = match rec.throttle {
                Some((t, b))
                    if t.elapsed() < Duration::from_secs_f64(b as f64 / limit as f64 + 1.0) =>
                {
                    (t, b + n)
                }
                _ => (Instant::now(), n),
            };
            rec.throttle = Some((start, bytes));
            Duration::from_secs_f64(bytes as f64 / limit as f64).checked_sub(start.elapsed())
        };
        if let Some(w) = wait {
            tokio::time::sleep(w).await;
        }
    }

    /// The redundancy counts of the last pass.
    pub fn redundancy(&self) -> Redundancy {
        let rec = self.rec();
        Redundancy {
            scrub_unchecked: rec.scrub_unchecked,
            ..rec.counts.clone()
        }
    }

    /// Compares the copies of every stripe object under `ino` (a file or a
    /// whole subtree) and repairs the ones that differ from the majority
    /// (by size, and with `deep` by content digest): they are marked stale
    /// and re-copied at once.
    pub async fn scrub(&self, ino: u64, deep: bool) -> Result<ScrubReport, MdsError> {
        if self.namespace == NamespaceMode::Osd {
            // Copies kept by replica chains: every group, whatever `ino`.
            let rep = self.chain_scrub(deep).await?;
            self.rec().scrub_unchecked = rep.unchecked;
            return Ok(rep);
        }
        let files = self.files_under(ino)?;
        let map = self.current_map()?;
        let up = self.up_osds();
        let mut rep = ScrubReport::default();
        for f in files {
            let Some(i) = self.kv.read()?.inode(f)? else {
                continue;
            };
            let Some(l) = i.layout.clone() else { continue };
            let mut bad_copies = Vec::new();
            for (set, h) in l.homes.iter().enumerate() {
                let oid = l.objsets[set];
                for (j, c) in h.stripes.iter().enumerate() {
                    rep.objects += 1;
                    let mut seen: Vec<(u32, Option<(u64, u64)>)> = Vec::new();
                    // A fresh copy on an OSD that is down is not checked.
                    let down: Vec<u32> = c
                        .fresh
                        .iter()
                        .copied()
                        .filter(|o| !up.contains(o))
                        .collect();
                    let mut missed = !down.is_empty();
                    if missed {
                        rep.problems.push(format!(
                            "inode {f:#x} object {oid:#x} stripe {j}: copies on OSDs {down:?} are down; not checked"
                        ));
                    }
                    for &osd in c.fresh.iter().filter(|o| up.contains(o)) {
                        let d = match self.digest(&map, osd, oid, deep).await {
                            Ok(d) => d,
                            Err(e) => {
                                rep.problems.push(format!(
                                    "inode {f:#x} object {oid:#x} stripe {j}: copy on OSD {osd} not compared: {e}"
                                ));
                                missed = true;
                                continue;
                            }
                        };
                        rep.copies += 1;
                        if let Some((size, _)) = d
                            && deep
                        {
                            rep.bytes += size;
                        }
                        seen.push((osd, d));
                    }
                    if missed {
                        rep.unchecked += 1;
                    }
                    // The majority answer among the copies that could be read.
                    let mut votes: HashMap<(u64, u64), usize> = HashMap::new();
                    for (_, d) in &seen {
                        if let Some(d) = d {
                            *votes.entry(*d).or_default() += 1;
                        }
                    }
                    // A tie (two copies that disagree) is broken by the length
                    // the file's size gives the object; failing that it has no
                    // winner and is reported, not repaired.
                    let top = votes.values().copied().max().unwrap_or(0);
                    let tied: Vec<(u64, u64)> = votes
                        .iter()
                        .filter(|(_, n)| **n == top)
                        .map(|(d, _)| *d)
                        .collect();
                    let expected = l.spec.object_len(i.attr.size, set as u64, j as u32);
                    let good = match &tied[..] {
                        [d] => Some(*d),
                        many => {
                            let fit: Vec<&(u64, u64)> =
                                many.iter().filter(|d| d.0 == expected).collect();
                            match &fit[..] {
                                [d] => Some(**d),
                                _ => None,
                            }
                        }
                    };
                    // Every compared copy agrees: whatever an earlier scrub
                    // found here is over.
                    if good.is_some() && seen.iter().all(|(_, d)| *d == good) {
                        self.rec().inconsistent.remove(&(f, set as u64, j as u32));
                    }
                    for (osd, d) in &seen {
                        if *d != good || good.is_none() {
                            rep.inconsistent += 1;
                            let what = match d {
                                None => "unreadable (I/O or checksum error)".to_string(),
                                Some((size, hash)) => format!("size {size} digest {hash:#018x}"),
                            };
                            rep.problems.push(format!(
                                "inode {f:#x} object {oid:#x} stripe {j}: copy on OSD {osd} is {what}, others agree on {}",
                                good.map_or("nothing".into(), |(s, h)| format!("size {s} digest {h:#018x}"))
                            ));
                            if good.is_some() {
                                bad_copies.push((set as u64, j as u32, *osd));
                            } else {
                                self.rec().inconsistent.insert((f, set as u64, j as u32));
                            }
                        }
                    }
                }
            }
            if bad_copies.is_empty() {
                continue;
            }
            for &(set, j, _) in &bad_copies {
                self.rec().inconsistent.insert((f, set, j));
            }
            let n = bad_copies.len() as u64;
            let keys: Vec<(u64, u32)> = bad_copies.iter().map(|&(s, j, _)| (s, j)).collect();
            self.record_stale(f, bad_copies).await?;
            let left = self.recover_inode(f, &map, &up).await?;
            if !left {
                rep.repaired += n;
                let mut rec = self.rec();
                for (s, j) in keys {
                    rec.inconsistent.remove(&(f, s, j));
                }
            }
        }
        self.metrics.scrub_inconsistent.inc_by(rep.inconsistent);
        // Only a scrub of everything says whether everything was checked
        // (a subtree's must not clear an earlier warning).
        if ino == ROOT_INO {
            self.rec().scrub_unchecked = rep.unchecked;
        }
        Ok(rep)
    }

    /// SCRUB (root only).
    pub(super) async fn scrub_op(
        &self,
        c: &Creds,
        ino: u64,
        deep: bool,
    ) -> Result<MdsReply, MdsError> {
        if c.uid != 0 {
            return Err(err(Errno::Perm, "only root may scrub"));
        }
        Ok(MdsReply::Scrubbed(self.scrub(ino, deep).await?))
    }

    /// Size and (deep) digest of one copy; `None` when it cannot be read.
    /// `Ok(Some(size, digest))`, `Ok(None)` when the copy's bytes are bad
    /// (a checksum or device error), or `Err` when it could not be asked
    /// (unreachable, timed out, no lease): then it is not compared at all.
    async fn digest(
        &self,
        map: &OsdMap,
        osd: u32,
        oid: u64,
        deep: bool,
    ) -> Result<Option<(u64, u64)>, String> {
        let client = self.osd_client(map, osd).map_err(|e| e.to_string())?;
        let cap = self.admin_cap(osd).map_err(|e| e.to_string())?;
        let cmd = Command::Digest {
            pid: DATA_PARTITION,
            oid,
            deep,
        };
        match client.run(Some(&cap), cmd, Bytes::new()).await {
            Ok(a) => match a.reply {
                proto::msg::Reply::Digest { size, hash, .. } => Ok(Some((size, hash))),
                other => Err(format!("DIGEST answered {other:?}")),
            },
            Err(ConnError::Remote(e)) if e.code == ErrorCode::NoObject => {
                Ok(Some((0, empty_hash(deep))))
            }
            Err(ConnError::Remote(e))
                if matches!(
                    e.code,
                    ErrorCode::Checksum | ErrorCode::Io | ErrorCode::Failed
                ) =>
            {
                Ok(None)
            }
            Err(e) => Err(e.to_string()),
        }
    }

    /// Files at or under `ino`.
    fn files_under(&self, ino: u64) -> Result<Vec<u64>, MdsError> {
        let snap = self.kv.read()?;
        let mut out = Vec::new();
        let mut stack = vec![ino];
        while let Some(d) = stack.pop() {
            let Some(i) = snap.inode(d)? else { continue };
            match i.attr.kind {
                FileKind::Dir => {
                    let mut after: Option<String> = None;
                    loop {
                        let (entries, more) = snap.list_dir(d, after.as_deref(), 1024)?;
                        for (name, child, kind) in &entries {
                            match kind {
                                FileKind::Dir => stack.push(*child),
                                FileKind::File => out.push(*child),
                                _ => {}
                            }
                            after = Some(name.clone());
                        }
                        if !more {
                            break;
                        }
                    }
                }
                FileKind::File => out.push(d),
                _ => {}
            }
        }
        out.sort_unstable();
        out.dedup();
        Ok(out)
    }
}

/// A missing object's digest: an empty content.
fn empty_hash(deep: bool) -> u64 {
    if deep {
        xxhash_rust::xxh3::xxh3_64(&[])
    } else {
        0
    }
}

/// Bytes per second over the last 30 s of samples (old ones dropped).
fn rate(samples: &mut Vec<(Instant, u64)>) -> u64 {
    samples.retain(|(t, _)| t.elapsed() < Duration::from_secs(30));
    match (samples.first(), samples.last()) {
        (Some(a), Some(b)) if b.0 > a.0 => ((b.1 - a.1) as f64 / (b.0 - a.0).as_secs_f64()) as u64,
        _ => 0,
    }
}

/// Backfill moves for stripe `j` of object set `set`: the OSDs placement
/// now names for it that are up and hold no copy of the set yet — when the
/// stripe is healthy (its copies fresh, on OSDs that are in) and placement
/// names a full set of copies for it.
fn backfill(
    map: &OsdMap,
    up: &HashSet<u32>,
    l: &Layout,
    set: usize,
    j: usize,
    placed: &mut Placed,
) -> Vec<u32> {
    let (Some(h), Some(&oid)) = (l.homes.get(set), l.objsets.get(set)) else {
        return Vec::new();
    };
    let Some(c) = h.stripes.get(j) else {
        return Vec::new();
    };
    let r = usize::from(l.spec.replicas.max(1));
    if !c.stale.is_empty()
        || c.fresh.len() < r
        || c.fresh
            .iter()
            .any(|&o| map.osd(o).is_none_or(|e| e.out) || !up.contains(&o))
    {
        return Vec::new();
    }
    let Some(want) = placed
        .row(map, oid, l.spec.stripe_count, r as u32, j)
        .filter(|w| w.len() == r)
    else {
        return Vec::new();
    };
    let taken: HashSet<u32> = h.osds().collect();
    want.iter()
        .copied()
        .filter(|o| !c.fresh.contains(o) && up.contains(o) && !taken.contains(o))
        .collect()
}

/// Where placement puts the copies of one object set, computed once for
/// all its stripes (a pass visits them one after another).
#[derive(Default)]
struct Placed {
    key: Option<(u64, u32, u32)>,
    rows: Vec<Vec<u32>>,
}

impl Placed {
    /// Stripe `j`'s copies of object set `oid` (`stripes` stripes of `r` copies).
    fn row(&mut self, map: &OsdMap, oid: u64, stripes: u32, r: u32, j: usize) -> Option<&[u32]> {
        if self.key != Some((oid, stripes, r)) {
            self.rows = map.place_copies(oid, stripes, r);
            self.key = Some((oid, stripes, r));
        }
        self.rows.get(j).map(Vec::as_slice)
    }
}

/// Up to `n` new OSDs for a stripe of object set `oid`: in placement order,
/// up, holding no copy of any stripe of the set, preferring hosts the
/// stripe's copies are not on.
fn new_homes(
    map: &OsdMap,
    up: &HashSet<u32>,
    h: &Homes,
    c: &Copies,
    oid: u64,
    n: usize,
) -> Vec<u32> {
    let taken: HashSet<u32> = h.osds().collect();
    let mut hosts: Vec<String> = c
        .fresh
        .iter()
        .chain(&c.stale)
        .filter_map(|&o| map.osd(o).filter(|e| !e.out).map(|e| e.host.clone()))
        .collect();
    let candidates: Vec<&proto::placement::OsdEntry> = map
        .ranking(oid)
        .into_iter()
        .filter(|e| up.contains(&e.id) && !taken.contains(&e.id))
        .collect();
    let mut out: Vec<u32> = Vec::new();
    while out.len() < n {
        let pick = candidates
            .iter()
            .find(|e| !out.contains(&e.id) && !hosts.contains(&e.host))
            .or_else(|| candidates.iter().find(|e| !out.contains(&e.id)));
        let Some(e) = pick else { break };
        hosts.push(e.host.clone());
        out.push(e.id);
    }
    out
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
