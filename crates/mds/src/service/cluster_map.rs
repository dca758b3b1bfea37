//! The cluster side of the MDS: OSD reports (MAC-checked, replay-proof),
//! the map, status and statfs, and the grants of a namespace kept on the
//! OSDs.
use std::sync::Arc;
use std::time::Duration;

use proto::layout::DATA_OID_TAG;
use proto::mds::{
    ClusterStatus, Errno, FsStat, Grant, MdsError, MdsReply, NAME_MAX, NamespaceGrant,
    NamespaceMode, OsdReport, OsdStatus, ROOT_INO,
};
use proto::placement::OsdMap;
use proto::report::STALE_REPORT_AFTER;
use proto::{KeyRing, rights};

use super::{Mds, err, load_keys};
use crate::cluster::{Live, map_after, verify_report};
use crate::records::{FsState, Records};

/// Least time between two readings of the key directory for keys it did
/// not hold (a new OSD retries its report every 2 s, so it waits at most
/// one more).
pub const KEY_RELOAD_MS: u64 = 2_000;

impl Mds {
    /// OSD `id`'s key ring (with key `version` in it, when given), reading
    /// the key directory again when it is missing (a key file may have
    /// been added or rotated since start) — at most once per
    /// [`KEY_RELOAD_MS`], so hellos naming unknown OSDs cost no file reads.
    pub(super) fn osd_ring(&self, id: u32, version: Option<u32>) -> Option<KeyRing> {
        use std::sync::atomic::Ordering;
        let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        let missing = keys
            .get(&id)
            .is_none_or(|r| version.is_some_and(|v| r.key(v).is_none()));
        let now = proto::clock::now_ms();
        let last = self.keys_reloaded.load(Ordering::SeqCst);
        if missing && now.saturating_sub(last) >= KEY_RELOAD_MS {
            self.keys_reloaded.store(now, Ordering::SeqCst);
            if let Ok(k) = load_keys(&self.keys_dir, &self.sb.cluster_id) {
                *keys = k;
            }
        }
        keys.get(&id).cloned()
    }

    pub(super) async fn report(self: &Arc<Self>, r: OsdReport) -> Result<MdsReply, MdsError> {
        let ring = self
            .osd_ring(r.osd_id, Some(r.key_version))
            .ok_or_else(|| {
                err(
                    Errno::Access,
                    format!(
                        "OSD {} is unknown: put its key file in {}",
                        r.osd_id,
                        self.keys_dir.display()
                    ),
                )
            })?;
        verify_report(&r, &self.sb.cluster_id, &ring)?;
        if r.host.is_empty() || r.host.len() > 255 || r.addr.len() > 255 {
            return Err(err(
                Errno::Inval,
                format!(
                    "OSD {} report: host and address must be 1 to 255 bytes",
                    r.osd_id
                ),
            ));
        }
        let now = proto::clock::now_ms();
        if r.at_ms + 300_000 < now || r.at_ms > now + 300_000 {
            return Err(err(
                Errno::Access,
                format!("OSD {} clock is more than 5 minutes off", r.osd_id),
            ));
        }
        {
            // Check and claim the report's time in one critical section, so
            // of two copies racing here exactly one passes.
            // Only the time is claimed here; the OSD counts as live once
            // its map change is durable (below).
            let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
            let last = live
                .claimed
                .get(&r.osd_id)
                .copied()
                .max(live.osds.get(&r.osd_id).map(|l| l.at_ms));
            if let Some(last) = last.filter(|&t| t >= r.at_ms) {
                // The time it must pass: an OSD restarted on a clock set
                // back (within the five minutes) reports after it, as one
                // whose clock stepped back while it ran does.
                return Err(err(
                    Errno::Access,
                    format!("stale or replayed report: {STALE_REPORT_AFTER}{last} ms"),
                ));
            }
            live.claimed.insert(r.osd_id, r.at_ms);
        }
        let was_up = self.up_osds().contains(&r.osd_id);
        let r2 = r.clone();
        let lower = self.lease_record_to_lower();
        // The store is checked, and an OSD on a new or older store taken
        // out of its chains, in the transaction that lets it count as up.
        let (epoch, verdict, left) = self
            .kv
            .write(move |tx| {
                if let Some(ms) = lower {
                    Mds::lower_lease_record(tx, ms)?;
                }
                let (verdict, left) = super::restarts::check_store(tx, r2.osd_id, r2.store, true)?;
                let mut st = tx.state()?;
                let cur = tx.map(st.map_epoch)?.unwrap_or_default();
                if let Some(m) = map_after(&cur, &r2) {
                    st.map_epoch = m.epoch;
                    tx.put_map(&m)?;
                    tx.put_state(&st)?;
                }
                Ok((st.map_epoch, verdict, left))
            })
            .await?;
        if let Some(ms) = lower {
            self.lease_record_lowered(ms);
        }
        self.log_store_verdict(r.osd_id, verdict, &left);
        if verdict == super::restarts::StoreVerdict::Missing {
            return Err(err(
                Errno::Busy,
                format!(
                    "OSD {} names no store (none open?), but one is recorded for it",
                    r.osd_id
                ),
            ));
        }
        if verdict.lost() && self.chain_table()?.is_none() {
            return Err(self.refuse_until_set_aside(r.osd_id, r.store));
        }
        if let Some(why) = self.drain_refusal(r.osd_id)? {
            // Logged while it still counts as up: the drain's first
            // reports, not every one until its lease is gone.
            if self.up_osds().contains(&r.osd_id) {
                tracing::info!(osd = r.osd_id, "{why}");
            }
            return Err(err(Errno::Busy, why));
        }
        // Stale copies on it are fenced, and revocations it missed applied,
        // before it gets a lease.
        self.fence_osd(r.osd_id).await?;
        self.retry_revocations(Some(r.osd_id)).await?;
        {
            // Under the chain gate: a chain pass either saw this OSD live
            // or stored its change before it became so (then the answer
            // below names the new epoch).
            let _gate = self.chain_gate.lock().await;
            // A newer report that finished first keeps its place.
            let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
            let prev = live.osds.get(&r.osd_id);
            if prev.is_none_or(|l| l.at_ms < r.at_ms) {
                let seen = std::time::Instant::now();
                let rates = prev.map_or_else(Default::default, |p| {
                    crate::cluster::rates(&p.load, &r.load, r.at_ms - p.at_ms)
                });
                live.osds.insert(
                    r.osd_id,
                    Live {
                        seen,
                        at_ms: r.at_ms,
                        capacity: r.capacity,
                        used: r.used,
                        objects: r.objects,
                        load: r.load,
                        rates,
                    },
                );
            }
        }
        // A copy marked stale while this report was in flight (after the
        // fence above, before the OSD counted as live) is fenced too before
        // the answer grants the lease.
        self.fence_osd(r.osd_id).await?;
        // An OSD coming back may unblock deletions and recovery.
        self.delete_wake.notify_one();
        if !was_up {
            tracing::info!(osd = r.osd_id, addr = %r.addr, host = %r.host, epoch, "OSD up");
            self.recovery_wake.notify_one();
        }
        Ok(MdsReply::Reported {
            epoch,
            interval_ms: self.cfg.heartbeat_ms,
            lease_ms: self.cfg.down_after_ms,
            chains_epoch: self.chains_epoch(),
        })
    }

    /// The counters and one status row per OSD of the current map.
    pub(super) fn osd_rows(&self) -> Result<(FsState, Vec<OsdStatus>), MdsError> {
        let snap = self.kv.read()?;
        let st = snap.state()?;
        let map = snap.map(st.map_epoch)?.unwrap_or_default();
        let rows = self.live.lock().unwrap_or_else(|e| e.into_inner()).status(
            &map,
            Duration::from_millis(self.cfg.down_after_ms),
            self.started,
        );
        Ok((st, rows))
    }

    /// Cluster status.
    pub fn status(&self) -> Result<ClusterStatus, MdsError> {
        let (st, osds) = self.osd_rows()?;
        Ok(ClusterStatus {
            cluster_id: self.sb.cluster_id.clone(),
            epoch: st.map_epoch,
            osds,
            inodes: st.inodes,
            id_policy: self.sb.policy.kind.name().into(),
            mandatory: self.metrics.mandatory(),
            non_mandatory: self.metrics.non_mandatory(),
            delete_queue: self.delete_queue_len()?,
            orphans: self.orphan_count()?,
            redundancy: {
                let mut r = self.redundancy();
                self.chain_counts(&mut r);
                r
            },
            replay_wait: self.replay_wait(),
            mds_group: self.group_status.get().map(|f| f()),
        })
    }

    /// NAMESPACE GRANT: the map and the capability a client of a namespace
    /// kept on the OSDs works with.
    /// NAMESPACE GRANT: capabilities over every namespace object, all
    /// rights when `full` (a read-write principal whose uids are trusted:
    /// in this mode clients check POSIX permissions themselves), else
    /// read rights only.
    pub(super) fn namespace_grant_for(&self, full: bool) -> Result<MdsReply, MdsError> {
        if self.namespace != NamespaceMode::Osd {
            return Err(err(
                Errno::Inval,
                "this file system keeps its namespace in the MDS (formatted with --namespace mds)",
            ));
        }
        let snap = self.kv.read()?;
        let st = snap.state()?;
        let map = snap.map(st.map_epoch)?.unwrap_or_default();
        let rights = if full {
            rights::ALL & !(rights::FORMAT | rights::PARTITION | rights::REVOKE)
        } else {
            rights::READ | rights::GET_ATTR | rights::LIST
        };
        let chains = snap.chains()?;
        let grant = match &chains {
            Some(t) => self.chain_caps(t, DATA_OID_TAG, rights, st.cap_version),
            None => self.grant(&map, DATA_OID_TAG, u64::MAX, rights, st.cap_version),
        };
        let n = snap.namespace()?;
        Ok(MdsReply::Namespace(Box::new(NamespaceGrant {
            map,
            grant,
            root_osd: n.root_osd,
            dir_protocol: n.dir_protocol,
            layout: n.layout,
            chains,
        })))
    }

    /// NAMESPACE ROOT: records which OSD holds the root directory (the
    /// first caller's choice wins) and answers the record.
    pub(super) async fn namespace_root(&self, osd: u32) -> Result<MdsReply, MdsError> {
        if self.namespace != NamespaceMode::Osd {
            return Err(err(Errno::Inval, "not a namespace-on-OSDs file system"));
        }
        let rec = self
            .kv
            .write(move |tx| {
                let mut n = tx.namespace()?;
                if n.root_osd.is_none() {
                    n.root_osd = Some(osd);
                    tx.put_namespace(&n)?;
                }
                Ok(n)
            })
            .await?;
        Ok(MdsReply::Namespace(Box::new(NamespaceGrant {
            map: OsdMap::default(),
            grant: Grant {
                lo: 0,
                hi: 0,
                rights: 0,
                expiry_ms: 0,
                caps: Vec::new(),
            },
            root_osd: rec.root_osd,
            dir_protocol: rec.dir_protocol,
            layout: rec.layout,
            chains: None,
        })))
    }

    /// STATFS: what a user can write at the root's replica count (the
    /// replica groups' in OSD-namespace mode), not the raw space — three
    /// OSDs of 8 GiB at three copies hold 8 GiB ([`proto::space`]).
    pub(super) fn statfs(&self) -> Result<MdsReply, MdsError> {
        let (st, rows) = self.osd_rows()?;
        let space = proto::space::usable(&rows, self.root_replicas()?);
        Ok(MdsReply::Statfs(FsStat {
            capacity: space.capacity,
            used: space.capacity.saturating_sub(space.avail),
            inodes: st.inodes,
            name_max: NAME_MAX as u32,
        }))
    }

    /// Copies new files get at the root: the replica groups' count in
    /// OSD-namespace mode, else the root directory's default layout's.
    pub(super) fn root_replicas(&self) -> Result<u32, MdsError> {
        if let Some(t) = self.chain_table()? {
            return Ok(u32::from(t.replicas.max(1)));
        }
        Ok(self
            .kv
            .read()?
            .live_inode(ROOT_INO)?
            .dir
            .map_or(1, |d| u32::from(d.default_layout.replicas.max(1))))
    }

    /// GET MAP: the map of `epoch`, or the current one.
    pub(super) fn get_map(&self, epoch: Option<u64>) -> Result<MdsReply, MdsError> {
        let snap = self.kv.read()?;
        let e = match epoch {
            Some(e) => e,
            None => snap.state()?.map_epoch,
        };
        snap.map(e)?
            .map(MdsReply::Map)
            .ok_or_else(|| err(Errno::NoEnt, format!("no OSD map epoch {e}")))
    }
}
