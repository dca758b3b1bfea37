//! Without chains (copies recorded in file layouts): an OSD that comes back
//! on a new store, or on an older copy of its store, is refused until every
//! copy it was recorded fresh for is set aside (stale). Meanwhile it counts
//! as down, so recovery never reads from it; afterwards recovery copies
//! everything back, and nothing it held is read as zeros or old bytes.

use std::collections::HashMap;
use std::sync::Arc;

use proto::layout::{Copies, Homes, Layout};
use proto::mds::{Errno, MdsError, StoreMark};
use proto::placement::OsdMap;

use super::{Mds, err};
use crate::kv::View;
use crate::records::Records;

impl Mds {
    /// An OSD on a new or older store, with copies recorded in layouts:
    /// it is taken for down at once, and its reports are refused (Busy)
    /// until a task started here (once per OSD) has set aside every copy.
    pub(super) fn refuse_until_set_aside(self: &Arc<Self>, osd: u32, mark: StoreMark) -> MdsError {
        // Down now: no recovery reads from it, no write goes to it.
        self.live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .osds
            .remove(&osd);
        let first = self
            .setting_aside
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(osd);
        if first {
            let me = self.clone();
            tokio::spawn(async move {
                match me.set_aside_copies(osd, mark).await {
                    Ok(files) => tracing::warn!(
                        osd,
                        files,
                        "set aside every copy on the OSD's new or older store; \
                         recovery copies them again"
                    ),
                    Err(e) => tracing::error!(
                        osd,
                        error = %e,
                        "could not set aside the copies on the OSD's new or older store; \
                         its next report tries again"
                    ),
                }
                me.setting_aside
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&osd);
            });
        }
        err(
            Errno::Busy,
            format!(
                "OSD {osd} runs on a new or older store: its copies are being set aside \
                 before it serves again"
            ),
        )
    }

    /// Records every fresh copy on `osd` stale, in each file's layout —
    /// the last fresh copy of a stripe too: it is gone, and the object is
    /// unfound (HEALTH_ERR, reads fail with EIO) rather than read as zeros
    /// or old bytes. A layout without recorded copies (one copy, placed by
    /// its map epoch) gets them recorded. The OSD's next report fences the
    /// stale copies before its lease. Then records its store's mark.
    /// Returns the files changed.
    async fn set_aside_copies(&self, osd: u32, mark: StoreMark) -> Result<u64, MdsError> {
        let kv = self.kv.clone();
        let inos = tokio::task::spawn_blocking(move || files_on(&kv, osd))
            .await
            .map_err(|e| err(Errno::Io, format!("the scan of the layouts failed: {e}")))??;
        let mut files = 0;
        for ino in inos {
            let oids = self
                .kv
                .write(move |tx| {
                    let Ok(mut i) = tx.live_inode(ino) else {
                        return Ok(Vec::new()); // removed meanwhile
                    };
                    let Some(mut l) = i.layout.take() else {
                        return Ok(Vec::new());
                    };
                    record_homes(tx, &mut l)?;
                    let oids = set_aside_in(&mut l, osd);
                    i.layout = Some(l);
                    if !oids.is_empty() {
                        tx.take_cap_version()?;
                        tx.put_inode(&i)?;
                    }
                    Ok(oids)
                })
                .await?;
            if oids.is_empty() {
                continue;
            }
            files += 1;
            let mut rec = self.rec();
            let index = rec.stale_on.entry(osd).or_default();
            for oid in oids {
                index.insert(oid, false);
            }
        }
        self.kv
            .write(move |tx| tx.put_store_mark(osd, &mark))
            .await?;
        self.recovery_wake.notify_one();
        Ok(files)
    }
}

/// Every file with a copy on `osd` (recorded, or placed there by its map
/// epoch when none is recorded). An inode that does not decode is logged
/// and passed over (fsck's to find), not allowed to wedge the OSD.
fn files_on(kv: &crate::kv::Kv, osd: u32) -> Result<Vec<u64>, MdsError> {
    let snap = kv.read()?;
    let mut maps: HashMap<u64, Option<OsdMap>> = HashMap::new();
    let mut inos = Vec::new();
    let mut bad = 0u64;
    snap.try_scan_all(crate::kv::T::Inodes, &mut |_, v| {
        let Ok(i) = postcard::from_bytes::<crate::records::Inode>(v) else {
            bad += 1;
            return Ok(true);
        };
        let Some(l) = &i.layout else {
            return Ok(true);
        };
        let on_it = if l.homes.len() == l.objsets.len() {
            l.homes
                .iter()
                .any(|h| h.stripes.iter().any(|c| c.fresh.contains(&osd)))
        } else {
            let m = maps
                .entry(l.map_epoch)
                .or_insert_with(|| snap.map(l.map_epoch).ok().flatten());
            m.as_ref().is_some_and(|m| {
                l.objsets
                    .iter()
                    .any(|&oid| m.place(oid, l.spec.stripe_count).contains(&osd))
            })
        };
        if on_it {
            inos.push(i.attr.ino);
        }
        Ok(true)
    })?;
    if bad > 0 {
        tracing::error!(bad, "inodes that do not decode were passed over; run fsck");
    }
    Ok(inos)
}

/// Records the copies of a layout that has none recorded (one copy per
/// stripe, placed with its map epoch), so that one can be set aside.
fn record_homes(tx: &crate::kv::Tx, l: &mut Layout) -> Result<(), MdsError> {
    if l.homes.len() == l.objsets.len() {
        return Ok(());
    }
    let placed = tx.map(l.map_epoch)?.ok_or_else(|| {
        err(
            Errno::Io,
            format!("OSD map epoch {} is missing", l.map_epoch),
        )
    })?;
    l.homes = l
        .objsets
        .iter()
        .map(|&oid| Homes {
            stripes: placed
                .place(oid, l.spec.stripe_count)
                .into_iter()
                .map(|o| Copies {
                    fresh: vec![o],
                    stale: Vec::new(),
                })
                .collect(),
        })
        .collect();
    Ok(())
}

/// Moves `osd` from fresh to stale in every stripe of `l`; returns the
/// object ids of the copies set aside.
fn set_aside_in(l: &mut Layout, osd: u32) -> Vec<u64> {
    let mut oids = Vec::new();
    for (set, h) in l.homes.iter_mut().enumerate() {
        for c in &mut h.stripes {
            if let Some(at) = c.fresh.iter().position(|o| *o == osd) {
                c.fresh.remove(at);
                c.stale.push(osd);
                oids.push(l.objsets.get(set).copied().unwrap_or(0));
            }
        }
    }
    oids
}
