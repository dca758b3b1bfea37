//! What the MDS does on the OSDs itself: version bumps that revoke
//! capabilities, cutting objects at truncation, and the durable delete
//! queue with its worker.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use net::{ConnConfig, ConnError, OsdClient};
use proto::layout::{DATA_PARTITION, Layout};
use proto::mds::{Errno, MdsError};
use proto::placement::OsdMap;
use proto::{Capability, Command, ErrorCode, rights};

use super::{DELETE_BATCH, DELETE_CHUNK, Mds, ObjectAt, err, osd_err, queue_seq};
use crate::kv::{T, View};
use crate::records::{DeleteJob, Records, num_key};

/// What [`Mds::on_every_copy`] does to each copy.
#[derive(Debug, Clone, Copy)]
enum CopyOp {
    /// Raise the version to this (revocation).
    Revoke(u64),
    /// Cut or extend to this file size.
    Truncate(u64),
}

impl Mds {
    /// Takes the next capability version (durably); objects revoked at the
    /// returned value refuse every capability issued before.
    pub(super) async fn bump_version(&self) -> Result<u64, MdsError> {
        self.kv.write(|tx| tx.take_cap_version()).await
    }

    /// A client for OSD `id` at its address in `current` (the newest map:
    /// maps only ever add OSDs or change their addresses, so it has every
    /// OSD a file was ever placed on).
    pub(super) fn osd_client(&self, current: &OsdMap, id: u32) -> Result<Arc<OsdClient>, MdsError> {
        let addr = current.addr(id).ok_or_else(|| {
            err(
                Errno::Io,
                format!("OSD {id} is not in map epoch {}", current.epoch),
            )
        })?;
        let mut pool = self.osds.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((a, c)) = pool.get(&id)
            && a == addr
        {
            return Ok(c.clone());
        }
        let ring = self.osd_ring(id, None).ok_or_else(|| {
            err(
                Errno::Io,
                format!("no key for OSD {id} in {}", self.keys_dir.display()),
            )
        })?;
        // The MDS connects as itself, with tickets it mints with the OSD's key.
        let mut cfg = ConnConfig::new(
            &self.sb.cluster_id,
            id,
            net::auth::MintWithOsdKeys::one(ring),
        );
        cfg.name = "tessera-mds".into();
        cfg.encrypt = self.cfg.require_encryption;
        cfg.timeout = Duration::from_secs(10);
        cfg.connections = 1;
        let c = Arc::new(OsdClient::new(addr, cfg));
        pool.insert(id, (addr.to_string(), c.clone()));
        Ok(c)
    }

    /// The MDS's own capability for OSD `id` (all rights on file data).
    pub(super) fn admin_cap(&self, id: u32) -> Result<Capability, MdsError> {
        self.admin_cap_in(id, DATA_PARTITION)
    }

    /// The MDS's own capability for OSD `id` over partition `pid`.
    pub(super) fn admin_cap_in(&self, id: u32, pid: u64) -> Result<Capability, MdsError> {
        let keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        let ring = keys.get(&id).ok_or_else(|| {
            err(
                Errno::Io,
                format!("no key for OSD {id} in {}", self.keys_dir.display()),
            )
        })?;
        let (kv, key) = ring
            .newest()
            .ok_or_else(|| err(Errno::Io, format!("empty key ring for OSD {id}")))?;
        Ok(proto::CapSpec {
            partition: pid,
            oid_lo: 0,
            oid_hi: u64::MAX,
            rights: rights::ALL,
            expiry_ms: proto::clock::now_ms() + 60_000,
            version: u64::MAX,
            holder: proto::auth::MDS_PRINCIPAL,
        }
        .sign(key, kv, id))
    }

    /// Every (OSD, object id, object set, stripe) of a layout — each copy
    /// the layout records (fresh or stale), or for a layout without
    /// records, placed with its map epoch — and the current map (for
    /// addresses).
    pub(super) fn objects(&self, l: &Layout) -> Result<(OsdMap, Vec<ObjectAt>), MdsError> {
        let snap = self.kv.read()?;
        let current = snap.map(snap.state()?.map_epoch)?.unwrap_or_default();
        let mut out = Vec::new();
        if l.homes.len() == l.objsets.len() {
            for (set, (h, &oid)) in l.homes.iter().zip(&l.objsets).enumerate() {
                for (j, c) in h.stripes.iter().enumerate() {
                    for &osd in c.fresh.iter().chain(&c.stale) {
                        out.push((osd, oid, set as u64, j as u32));
                    }
                }
            }
            return Ok((current, out));
        }
        let placed = snap.map(l.map_epoch)?.ok_or_else(|| {
            err(
                Errno::Io,
                format!("OSD map epoch {} is missing", l.map_epoch),
            )
        })?;
        for (set, &oid) in l.objsets.iter().enumerate() {
            for (j, osd) in placed
                .place(oid, l.spec.stripe_count)
                .into_iter()
                .enumerate()
            {
                out.push((osd, oid, set as u64, j as u32));
            }
        }
        Ok((current, out))
    }

    /// Whether copy `(set, stripe)` on `osd` may be passed over when it
    /// cannot be reached: it is stale already (never read, fenced), or
    /// another fresh copy of the stripe exists (it is then recorded stale).
    fn may_pass_over(l: &Layout, set: u64, stripe: u32, osd: u32) -> bool {
        l.homes
            .get(set as usize)
            .and_then(|h| h.stripes.get(stripe as usize))
            .is_some_and(|c| {
                c.stale.contains(&osd)
                    || (c.fresh.contains(&osd) && c.fresh.iter().any(|&o| o != osd))
            })
    }

    /// Runs `cmd` on OSD `osd` with the MDS's own capability: `Ok(Err(_))`
    /// is the OSD's (or the network's) answer, `Err(_)` a local problem
    /// (unknown OSD, no key).
    pub(super) async fn osd_call(
        &self,
        current: &OsdMap,
        osd: u32,
        cmd: Command,
    ) -> Result<Result<(), ConnError>, MdsError> {
        let client = self.osd_client(current, osd)?;
        let cap = self.admin_cap(osd)?;
        Ok(client.run(Some(&cap), cmd, Bytes::new()).await.map(|_| ()))
    }

    /// [`Mds::osd_call`] where a missing object counts as done.
    pub(super) async fn osd_run(
        &self,
        current: &OsdMap,
        osd: u32,
        cmd: Command,
    ) -> Result<(), MdsError> {
        match self.osd_call(current, osd, cmd).await? {
            Ok(()) => Ok(()),
            Err(ConnError::Remote(e)) if e.code == ErrorCode::NoObject => Ok(()),
            Err(e) => Err(osd_err(osd, e)),
        }
    }

    /// Runs `op` on every copy of a file's objects; a copy it fails on is
    /// recorded stale when that is allowed (it is stale already, or its
    /// stripe has another fresh copy), else the error is returned. Copies
    /// on OSDs that are out are included while they are listed (an out OSD
    /// may still be up and serving).
    async fn on_every_copy(&self, ino: u64, l: &Layout, op: CopyOp) -> Result<(), MdsError> {
        let (map, objs) = self.objects(l)?;
        let mut missed = Vec::new();
        for (osd, oid, set, j) in objs {
            let done = match op {
                CopyOp::Revoke(v) => self.set_version_creating(&map, osd, oid, v).await,
                CopyOp::Truncate(size) => {
                    let cmd = Command::Truncate {
                        pid: DATA_PARTITION,
                        oid,
                        len: l.spec.object_len(size, set, j),
                    };
                    self.osd_run(&map, osd, cmd).await
                }
            };
            match done {
                Ok(()) => {}
                Err(e) if Self::may_pass_over(l, set, j, osd) => {
                    tracing::warn!(ino, osd, error = %e, ?op, "a copy was missed; recording it stale");
                    missed.push((set, j, osd));
                }
                Err(e) => return Err(e),
            }
        }
        if !missed.is_empty() {
            self.record_stale(ino, missed).await?;
        }
        Ok(())
    }

    /// Revokes every capability for a file's objects issued before version
    /// `v` (sets each object's version to `v`; creates missing objects so a
    /// stale capability cannot create them either); see [`Mds::on_every_copy`]
    /// for copies that cannot be reached.
    pub async fn revoke(&self, ino: u64, l: &Layout, v: u64) -> Result<(), MdsError> {
        self.on_every_copy(ino, l, CopyOp::Revoke(v)).await
    }

    /// Carries a committed revocation to the OSDs and clears its pending
    /// record. A copy that cannot be reached while its stripe has another
    /// fresh copy is recorded stale (and so fenced); for any other, the
    /// record stays (retried by the recovery worker, and applied to that
    /// OSD before its next lease) and the caller waits until that OSD's
    /// current lease has run out — so once this returns, no capability
    /// older than `v` is honoured anywhere.
    pub(super) async fn finish_revocation(&self, ino: u64, l: &Layout, v: u64) {
        let Ok((map, objs)) = self.objects(l) else {
            return;
        };
        let mut missed = Vec::new();
        let mut unreached = std::collections::HashSet::new();
        for (osd, oid, set, j) in objs {
            if let Err(e) = self.set_version_creating(&map, osd, oid, v).await {
                tracing::warn!(ino, osd, version = v, error = %e, "revocation did not reach a copy");
                if Self::may_pass_over(l, set, j, osd) {
                    missed.push((set, j, osd));
                } else {
                    unreached.insert(osd);
                }
            }
        }
        if !missed.is_empty()
            && let Err(e) = self.record_stale(ino, missed.clone()).await
        {
            // Not set aside (say, the last fresh copies): they stay pending.
            tracing::warn!(ino, error = %e, "cannot record unreachable copies stale");
            unreached.extend(missed.iter().map(|m| m.2));
        }
        if unreached.is_empty() {
            let r = self
                .kv
                .write(move |tx| match tx.get(T::Revocations, &num_key(ino))? {
                    // Only this revocation's record: a newer one stays.
                    Some(b) if b == v.to_le_bytes() => tx.del(T::Revocations, &num_key(ino)),
                    _ => Ok(()),
                })
                .await;
            if let Err(e) = r {
                tracing::warn!(ino, error = %e, "cannot clear a finished revocation");
            }
            return;
        }
        self.recovery_wake.notify_one();
        loop {
            let lapsed = unreached.iter().all(|&o| self.lease_lapsed(o));
            if lapsed || self.pending_revocation(ino) != Some(v) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The pending revocation of `ino`, if any.
    pub(super) fn pending_revocation(&self, ino: u64) -> Option<u64> {
        let snap = self.kv.read().ok()?;
        let b = snap.get(T::Revocations, &num_key(ino)).ok()??;
        Some(u64::from_le_bytes(b.as_slice().try_into().ok()?))
    }

    /// Every pending revocation: (ino, version).
    pub(super) fn pending_revocations(&self) -> Result<Vec<(u64, u64)>, MdsError> {
        let snap = self.kv.read()?;
        let mut out = Vec::new();
        snap.scan(
            T::Revocations,
            std::ops::Bound::Unbounded,
            std::ops::Bound::Unbounded,
            false,
            &mut |k, v| {
                if let (Ok(k), Ok(v)) = (<[u8; 8]>::try_from(k), <[u8; 8]>::try_from(v)) {
                    out.push((u64::from_be_bytes(k), u64::from_le_bytes(v)));
                }
                true
            },
        )?;
        Ok(out)
    }

    /// Retries every pending revocation (recovery worker); with `osd`, only
    /// its copies and before it gets a lease (report).
    pub(super) async fn retry_revocations(&self, osd: Option<u32>) -> Result<(), MdsError> {
        for (ino, v) in self.pending_revocations()? {
            let Some(i) = self.kv.read()?.inode(ino)? else {
                let _ = self
                    .kv
                    .write(move |tx| tx.del(T::Revocations, &num_key(ino)))
                    .await;
                continue;
            };
            let Some(l) = i.layout else { continue };
            match osd {
                None => {
                    if self.revoke(ino, &l, v).await.is_ok() {
                        let _ = self
                            .kv
                            .write(move |tx| match tx.get(T::Revocations, &num_key(ino))? {
                                Some(b) if b == v.to_le_bytes() => {
                                    tx.del(T::Revocations, &num_key(ino))
                                }
                                _ => Ok(()),
                            })
                            .await;
                    }
                }
                Some(o) => {
                    let (map, objs) = self.objects(&l)?;
                    for (osd, oid, _, _) in objs.into_iter().filter(|x| x.0 == o) {
                        self.set_version_creating(&map, osd, oid, v).await?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Cuts (or extends) every copy of a file's objects to `size` (see
    /// [`Mds::on_every_copy`] for copies that cannot be reached).
    pub(super) async fn truncate_objects(
        &self,
        ino: u64,
        l: &Layout,
        size: u64,
    ) -> Result<(), MdsError> {
        self.on_every_copy(ino, l, CopyOp::Truncate(size)).await
    }

    /// Entries waiting in the delete queue, oldest first, at most
    /// [`DELETE_BATCH`] of them (what the worker takes per pass).
    pub fn delete_queue(&self) -> Result<Vec<(u64, DeleteJob)>, MdsError> {
        let mut out = Vec::new();
        self.scan_delete_queue(|seq, v| {
            let job = postcard::from_bytes::<DeleteJob>(v)
                .map_err(|e| crate::kv::io_err("delete job", e))?;
            out.push((seq, job));
            Ok(out.len() < DELETE_BATCH)
        })?;
        Ok(out)
    }

    /// How many entries the delete queue holds, all of them counted (a
    /// malformed key is an error, never a sequence number).
    pub fn delete_queue_len(&self) -> Result<u64, MdsError> {
        let mut n = 0u64;
        self.scan_delete_queue(|_, _| {
            n += 1;
            Ok(true)
        })?;
        Ok(n)
    }

    /// Visits the delete queue in order with each entry's sequence number
    /// (its key checked) and value, while `f` answers `Ok(true)`; the first
    /// error stops the scan and is returned.
    pub(super) fn scan_delete_queue(
        &self,
        mut f: impl FnMut(u64, &[u8]) -> Result<bool, MdsError>,
    ) -> Result<(), MdsError> {
        self.kv
            .read()?
            .try_scan_all(T::DeleteQueue, &mut |k, v| f(queue_seq(k)?, v))
    }

    /// Removes the objects of `jobs`, [`DELETE_CHUNK`] files at a time:
    /// for each chunk, one REMOVE OBJECTS per OSD (all OSDs at once)
    /// instead of one REMOVE per copy of every object, then one log record
    /// taking the chunk's finished files off the queue. A file is finished
    /// when every OSD holding one of its objects answered; the rest stay
    /// queued for the next pass. True when every job finished.
    async fn delete_jobs(self: Arc<Self>, jobs: Vec<(u64, DeleteJob)>) -> bool {
        let mut all = true;
        for chunk in jobs.chunks(DELETE_CHUNK) {
            let mut by_osd: BTreeMap<u32, BTreeSet<u64>> = BTreeMap::new();
            let mut needs: Vec<(u64, Vec<u32>)> = Vec::with_capacity(chunk.len());
            let mut map = None;
            for (seq, job) in chunk {
                let (m, objs) = match self.objects(&job.layout) {
                    Ok(o) => o,
                    Err(e) => {
                        all = false;
                        tracing::debug!(ino = job.ino, error = %e, "delete deferred");
                        continue;
                    }
                };
                let mut osds = Vec::new();
                for (osd, oid, _, _) in objs {
                    // A copy on an OSD that is out is gone with it (or
                    // removed by recovery when it comes back in).
                    if m.osd(osd).is_some_and(|o| o.out) {
                        continue;
                    }
                    by_osd.entry(osd).or_default().insert(oid);
                    osds.push(osd);
                }
                needs.push((*seq, osds));
                map = Some(m);
            }
            let mut failed: BTreeSet<u32> = BTreeSet::new();
            if let Some(map) = map {
                let map = Arc::new(map);
                let mut calls = tokio::task::JoinSet::new();
                for (osd, oids) in by_osd {
                    let oids: Vec<u64> = oids.into_iter().collect();
                    for part in oids.chunks(proto::msg::MAX_REMOVE_OBJECTS) {
                        let (me, map) = (self.clone(), map.clone());
                        let cmd = Command::RemoveObjects {
                            pid: DATA_PARTITION,
                            oids: part.to_vec(),
                        };
                        calls.spawn(async move { (osd, me.osd_run(&map, osd, cmd).await) });
                    }
                }
                while let Some(r) = calls.join_next().await {
                    match r {
                        Ok((_, Ok(()))) => {}
                        Ok((osd, Err(e))) => {
                            tracing::debug!(osd, error = %e, "deletes on this OSD deferred");
                            failed.insert(osd);
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "a delete task failed");
                            failed.extend(needs.iter().flat_map(|(_, o)| o.iter().copied()));
                        }
                    }
                }
            }
            let finished: Vec<u64> = needs
                .iter()
                .filter(|(_, osds)| osds.iter().all(|o| !failed.contains(o)))
                .map(|(seq, _)| *seq)
                .collect();
            all &= finished.len() == chunk.len();
            all &= self.dequeue(finished).await;
        }
        all
    }

    /// Takes finished jobs off the delete queue (one durable write).
    async fn dequeue(&self, seqs: Vec<u64>) -> bool {
        if seqs.is_empty() {
            return true;
        }
        let n = seqs.len() as u64;
        let r = self
            .kv
            .write(move |tx| {
                for s in &seqs {
                    tx.del(T::DeleteQueue, &num_key(*s))?;
                }
                Ok(())
            })
            .await;
        match r {
            Ok(()) => {
                self.metrics.objects_deleted.inc_by(n);
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot take finished deletes off the queue");
                false
            }
        }
    }

    /// The delete-queue worker: reaps orphans that are due, removes queued
    /// objects from the OSDs, retrying while an OSD is unreachable; the
    /// queue and the orphans are in the KV, so they survive restarts.
    pub async fn delete_worker(self: Arc<Self>) {
        loop {
            // An orphan made from now on is due no sooner than one hold
            // expiry after this pass starts, and the worker looks again
            // by then: such orphans need not wake it (a storm of unlinks
            // must not make it rescan every waiting orphan pass after
            // pass).
            let look_again = (self.cfg.hold_expiry_ms > 0)
                .then(|| proto::clock::now_ms().saturating_add(self.cfg.hold_expiry_ms));
            self.delete_due_ms.store(
                look_again.unwrap_or(u64::MAX),
                std::sync::atomic::Ordering::SeqCst,
            );
            let mut pending = false;
            // Orphans first: reaping one queues its objects.
            let orphans_due = match self.reap_orphans().await {
                Ok(next) => next,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot reap orphans");
                    Some(Duration::from_millis(self.cfg.delete_retry_ms))
                }
            };
            // What queued a job may be visible and not yet durable (an
            // early-answered unlink): make everything read durable before
            // deleting, or a crash could bring back a name without data.
            let queue = match self.delete_queue() {
                Ok(jobs) => self.kv.sync().await.map(|_| jobs),
                Err(e) => Err(e),
            };
            match queue {
                Ok(jobs) => pending |= !self.clone().delete_jobs(jobs).await,
                Err(e) => {
                    pending = true;
                    tracing::warn!(error = %e, "cannot read the delete queue or make it durable");
                }
            }
            if let Err(e) = self.expire_delegations().await {
                tracing::warn!(error = %e, "cannot forget old delegated inode numbers");
            }
            let mut wait = if pending {
                Duration::from_millis(self.cfg.delete_retry_ms)
            } else {
                // Delegated numbers of gone lease holders expire too.
                Duration::from_secs(60)
            };
            if let Some(d) = orphans_due {
                wait = wait.min(d);
            }
            if let Some(at) = look_again {
                let left = at.saturating_sub(proto::clock::now_ms()).max(1);
                wait = wait.min(Duration::from_millis(left));
            }
            self.delete_due_ms.store(
                proto::clock::now_ms().saturating_add(wait.as_millis() as u64),
                std::sync::atomic::Ordering::SeqCst,
            );
            let _ = tokio::time::timeout(wait, self.delete_wake.notified()).await;
        }
    }
}
