//! MARK STALE: a client's write to a copy failed; the copy is recorded
//! stale (durably) and fenced before the write may be acknowledged (its
//! object's version raised, or its OSD's lease waited out).

use std::time::Duration;

use net::ConnError;
use posix::perm;
use posix::perm::{R, W};
use proto::layout::DATA_PARTITION;
use proto::mds::{Creds, Errno, MdsError, MdsReply};
use proto::placement::OsdMap;
use proto::{Command, ErrorCode};

use super::FENCE_TIMEOUT;
use crate::records::{Inode, Records};
use crate::service::{Mds, err, osd_err};

impl Mds {
    /// Raises the version of every not-yet-fenced stale copy on `osd`
    /// (called before its report is answered, so before it gets a lease).
    pub(in crate::service) async fn fence_osd(&self, osd: u32) -> Result<(), MdsError> {
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
    pub(in crate::service) async fn set_version_creating(
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
    pub(in crate::service) async fn mark_stale(
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
    pub(super) async fn confirm_bad_copy(
        &self,
        i: &Inode,
        objset: u64,
        osd: u32,
    ) -> Result<(), MdsError> {
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
    pub(in crate::service) async fn record_stale(
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
    pub(super) async fn fence_copy(&self, osd: u32, oid: u64, v: u64) {
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
}
