//! The recovery worker: OSDs marked out when overdue, passes over every
//! layout that re-copy stale copies and make missing ones (throttled),
//! backfill towards where placement now puts objects, and dropped copies
//! removed once no capability can reach them.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use net::ConnError;
use proto::layout::{Copies, DATA_PARTITION, Homes, Layout};
use proto::mds::{MdsError, ROOT_INO, Redundancy};
use proto::placement::OsdMap;
use proto::{Command, ErrorCode};

use super::{Busy, COPY_CHUNK, RECOVERY_PARALLEL, Stripe};
use crate::kv::{T, View};
use crate::records::{Inode, Records};
use crate::service::{Mds, osd_err};

impl Mds {
    /// Visits every stripe object with recorded copies: (inode, stripe).
    pub(super) fn for_each_stripe(
        &self,
        mut f: impl FnMut(&Inode, Stripe),
    ) -> Result<(), MdsError> {
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
    pub(super) async fn mark_out_overdue(&self) {
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
    pub(super) async fn remove_dropped(&self) {
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

    pub(super) async fn scheduled_scrub(&self, deep: bool) {
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
    pub(super) async fn recover_inode(
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
    pub(super) async fn commit_copies(
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

    pub(super) fn recovered(&self, bytes: u64) {
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
    pub(in crate::service) async fn copy_object(
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
    pub(super) async fn throttle(&self, n: u64, limit: u64) {
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
}

/// Bytes per second over the last 30 s of samples (old ones dropped).
pub(super) fn rate(samples: &mut Vec<(Instant, u64)>) -> u64 {
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
pub(super) fn backfill(
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
pub(super) struct Placed {
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
pub(super) fn new_homes(
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
        let free = candidates
            .iter()
            .enumerate()
            .filter(|(_, e)| !out.contains(&e.id))
            .map(|(i, e)| (i, e.host.as_str()));
        let used: Vec<&str> = hosts.iter().map(String::as_str).collect();
        let Some(e) = proto::placement::pick_spread(free, &used).map(|i| candidates[i]) else {
            break;
        };
        hosts.push(e.host.clone());
        out.push(e.id);
    }
    out
}
