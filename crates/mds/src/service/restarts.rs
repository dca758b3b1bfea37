//! OSDs that come back: which store each runs on, and CHAIN RESTARTED.
//!
//! Every OSD report and every CHAIN RESTARTED carries the mark of the store
//! the OSD runs on (`proto::mds::StoreMark`: the store's identity and its
//! newest durable journal batch). The MDS keeps the last mark per OSD in its
//! log. A store it has not seen under that OSD (a new, empty one) or an
//! older copy of the one it saw (a smaller sequence) holds none of what the
//! OSD's copies held. With replica chains the OSD then leaves every chain at
//! once, in the transaction that records the new mark — a chain's last
//! member too: a group whose full copies are all gone waits, unavailable and
//! said so, rather than adopt an empty store and fill its joiners from it.
//!
//! An OSD that did not shut down cleanly may also hold changes it never
//! passed down. Where another full member of a chain is heard from, the
//! chain drops it (it is filled again later); where none is (every member
//! went down together), it stays as the chain's only member and the others
//! are caught up from it when they return. So a simultaneous crash of every
//! member never leaves the choice of the survivor to the order in which
//! leases lapse.
//!
//! Without chains (copies recorded in layouts), an OSD on a new or older
//! store is refused until every copy it was recorded fresh for is set
//! aside (stale): recovery copies them again, and none is read as zeros
//! or old bytes meanwhile.

use std::collections::HashSet;
use std::sync::Arc;

use super::*;
use proto::chain::ChainTable;
use proto::mds::StoreMark;

/// What an OSD's store mark says about the copies it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreVerdict {
    /// No mark (the OSD could not say): nothing is checked.
    Unknown,
    /// The first mark seen for this OSD: trusted, as before marks were kept.
    First,
    /// The store it ran on before.
    Same,
    /// Another store: new and empty, or not the one its copies are on.
    Replaced,
    /// The store it ran on, but an older copy of it.
    Rewound {
        /// The sequence the MDS had seen.
        was: u64,
    },
}

impl StoreVerdict {
    /// Whether the OSD's copies are gone (new or older store).
    pub fn lost(self) -> bool {
        matches!(self, StoreVerdict::Replaced | StoreVerdict::Rewound { .. })
    }
}

/// Judges the mark `now` an OSD reports against the one `known` for it.
pub fn judge(known: Option<&StoreMark>, now: &StoreMark) -> StoreVerdict {
    match known {
        _ if !now.known() => StoreVerdict::Unknown,
        None => StoreVerdict::First,
        Some(k) if k.uuid != now.uuid => StoreVerdict::Replaced,
        Some(k) if now.seq < k.seq => StoreVerdict::Rewound { was: k.seq },
        Some(_) => StoreVerdict::Same,
    }
}

/// Takes `osd` out of every chain of `t` and forgets when it left them (it
/// is filled whole, not caught up); returns the groups it left.
pub fn leave_every_chain(t: &mut ChainTable, osd: u32) -> Vec<u32> {
    let groups: Vec<u32> = t
        .chains
        .iter()
        .filter(|(_, c)| c.holds(osd))
        .map(|(g, _)| *g)
        .collect();
    for g in &groups {
        let Some(c) = t.chain(*g) else { continue };
        let keep = |v: &[u32]| v.iter().copied().filter(|m| *m != osd).collect();
        let (members, joining) = (keep(&c.members), keep(&c.joining));
        t.set(*g, members, joining);
    }
    for (_, c) in &mut t.chains {
        c.left.retain(|(o, _)| *o != osd);
    }
    groups
}

/// What CHAIN RESTARTED does to `t` for `osd` (its store checked): a
/// joining member leaves; a full member leaves where another full member
/// is `heard` from, and elsewhere stays as the only member, the others
/// leaving (recorded at `now_ms`, to be caught up). Returns the groups
/// changed.
pub fn restart_in_chains(
    t: &mut ChainTable,
    osd: u32,
    heard: &HashSet<u32>,
    now_ms: u64,
) -> Vec<u32> {
    let groups: Vec<u32> = t
        .chains
        .iter()
        .filter(|(_, c)| c.holds(osd))
        .map(|(g, _)| *g)
        .collect();
    for g in &groups {
        let Some(c) = t.chain(*g).cloned() else {
            continue;
        };
        // Only full members leave a departure (a joiner never held all).
        let others: Vec<u32> = c.members.iter().copied().filter(|m| *m != osd).collect();
        let keep = |v: &[u32]| v.iter().copied().filter(|m| *m != osd).collect::<Vec<_>>();
        let alone =
            c.members.contains(&osd) && !c.members.iter().any(|m| *m != osd && heard.contains(m));
        if alone {
            t.set(*g, vec![osd], Vec::new());
            if let Some(c) = t.chain_mut(*g) {
                for o in others {
                    c.record_left(o, now_ms);
                }
            }
        } else {
            t.set(*g, keep(&c.members), keep(&c.joining));
            if let Some(c) = t.chain_mut(*g)
                && c.left_at(osd).is_none()
            {
                c.record_left(osd, now_ms);
            }
        }
    }
    groups
}

/// In `tx`: judges OSD `osd`'s store mark and records it (every report
/// whose sequence moved: so a copy of a store older than the OSD's last
/// report is recognised); an OSD whose copies are gone leaves every chain
/// in the same transaction. Returns the verdict and the groups it left.
pub(super) fn check_store(
    tx: &mut crate::kv::Tx,
    osd: u32,
    mark: StoreMark,
) -> Result<(StoreVerdict, Vec<u32>), MdsError> {
    let known = tx.store_mark(osd)?;
    let verdict = judge(known.as_ref(), &mark);
    let chains = tx.chains()?;
    if verdict.lost() && chains.is_none() {
        // Copies in layouts: the mark is recorded once they are set aside.
        return Ok((verdict, Vec::new()));
    }
    let write = match (verdict, known) {
        (StoreVerdict::Unknown, _) => false,
        (StoreVerdict::Same, Some(k)) => mark.seq > k.seq,
        _ => true,
    };
    if write {
        tx.put_store_mark(osd, &mark)?;
    }
    let mut left = Vec::new();
    if verdict.lost()
        && let Some(mut t) = chains
    {
        left = leave_every_chain(&mut t, osd);
        if !left.is_empty() {
            tx.put_chains(&t)?;
        }
    }
    Ok((verdict, left))
}

impl Mds {
    /// OSDs heard from within the last heartbeat and a half: alive now,
    /// not merely within a lease that has yet to run out.
    pub(super) fn heard_recently(&self) -> HashSet<u32> {
        let window =
            Duration::from_millis((self.cfg.heartbeat_ms * 3 / 2).min(self.cfg.down_after_ms / 2));
        self.live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .osds
            .iter()
            .filter(|(_, l)| l.seen.elapsed() < window)
            .map(|(&id, _)| id)
            .collect()
    }

    /// Logs what a store mark said, when it matters.
    pub(super) fn log_store_verdict(&self, osd: u32, v: StoreVerdict, left: &[u32]) {
        match v {
            StoreVerdict::Replaced => tracing::warn!(
                osd,
                groups = ?left,
                "OSD runs on a store it did not run on before (new or replaced): \
                 nothing it held is trusted; it left its chains"
            ),
            StoreVerdict::Rewound { was } => tracing::warn!(
                osd,
                was,
                groups = ?left,
                "OSD runs on an older copy of its store: nothing it held is \
                 trusted; it left its chains"
            ),
            _ => {}
        }
        if v.lost() {
            self.recovery_wake.notify_one();
        }
    }

    /// An OSD on a new or older store, with copies recorded in layouts
    /// (no chains): its report is refused (Busy) until every copy it was
    /// recorded fresh for is set aside, by a task started here once per OSD.
    pub(super) fn refuse_until_set_aside(self: &Arc<Self>, osd: u32, mark: StoreMark) -> MdsError {
        if self
            .setting_aside
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(osd)
        {
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
    /// unfound (HEALTH_ERR, reads fail with EIO) rather than read as
    /// zeros or old bytes. The OSD's next report fences them before its
    /// lease. Then records its store's mark. Returns the files changed.
    async fn set_aside_copies(&self, osd: u32, mark: StoreMark) -> Result<u64, MdsError> {
        let mut inos = Vec::new();
        self.kv
            .read()?
            .try_scan_all(crate::kv::T::Inodes, &mut |_, v| {
                let i = postcard::from_bytes::<crate::records::Inode>(v)
                    .map_err(|e| crate::kv::io_err("inode", e))?;
                let on_it = i.layout.as_ref().is_some_and(|l| {
                    l.homes
                        .iter()
                        .any(|h| h.stripes.iter().any(|c| c.fresh.contains(&osd)))
                });
                if on_it {
                    inos.push(i.attr.ino);
                }
                Ok(true)
            })?;
        let mut files = 0;
        for ino in inos {
            let oids = self
                .kv
                .write(move |tx| {
                    let Ok(mut i) = tx.live_inode(ino) else {
                        return Ok(Vec::new()); // removed meanwhile
                    };
                    let Some(l) = i.layout.as_mut() else {
                        return Ok(Vec::new());
                    };
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

    /// CHAIN RESTARTED from OSD `me`, on `store`: see the module comment.
    pub(super) async fn chain_restarted(
        &self,
        me: u32,
        store: StoreMark,
    ) -> Result<MdsReply, MdsError> {
        if self.chain_table()?.is_none() {
            return Err(err(
                Errno::Inval,
                "this file system keeps no replica chains",
            ));
        }
        let heard = self.heard_recently();
        let now = proto::clock::now_ms();
        let (verdict, left, changed) = self
            .kv
            .write(move |tx| {
                let (verdict, left) = check_store(tx, me, store)?;
                let mut changed = Vec::new();
                if !verdict.lost()
                    && let Some(mut t) = tx.chains()?
                {
                    changed = restart_in_chains(&mut t, me, &heard, now);
                    if !changed.is_empty() {
                        tx.put_chains(&t)?;
                    }
                }
                Ok((verdict, left, changed))
            })
            .await?;
        self.log_store_verdict(me, verdict, &left);
        if !changed.is_empty() {
            let t = self.chain_table()?.unwrap_or_default();
            for g in &changed {
                if let Some(c) = t.chain(*g) {
                    tracing::info!(
                        group = g,
                        epoch = c.epoch,
                        members = ?c.members,
                        joining = ?c.joining,
                        "replica chain changed"
                    );
                }
            }
            tracing::warn!(
                osd = me,
                "OSD restarted after a crash: left its chains where another member is \
                 heard from, to be filled again; kept alone where none is"
            );
            self.recovery_wake.notify_one();
        }
        self.chain_grant(me)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mark(u: u8, seq: u64) -> StoreMark {
        StoreMark { uuid: [u; 16], seq }
    }

    fn table() -> ChainTable {
        let mut t = ChainTable {
            replicas: 3,
            ..ChainTable::default()
        };
        t.set(1, vec![1, 2, 3], vec![]);
        t.set(2, vec![2, 3, 1], vec![]);
        t.set(3, vec![3, 1], vec![2]);
        t
    }

    #[test]
    fn a_new_or_older_store_is_lost_and_the_same_or_newer_is_not() {
        assert_eq!(judge(None, &mark(1, 5)), StoreVerdict::First);
        assert_eq!(judge(Some(&mark(1, 5)), &mark(1, 5)), StoreVerdict::Same);
        assert_eq!(judge(Some(&mark(1, 5)), &mark(1, 9)), StoreVerdict::Same);
        assert_eq!(
            judge(Some(&mark(1, 5)), &mark(1, 4)),
            StoreVerdict::Rewound { was: 5 }
        );
        assert_eq!(
            judge(Some(&mark(1, 5)), &mark(2, 50)),
            StoreVerdict::Replaced
        );
        assert_eq!(judge(Some(&mark(1, 5)), &mark(0, 0)), StoreVerdict::Unknown);
        assert!(StoreVerdict::Replaced.lost() && StoreVerdict::Rewound { was: 1 }.lost());
        assert!(!StoreVerdict::Same.lost() && !StoreVerdict::First.lost());
    }

    #[test]
    fn a_lost_store_leaves_every_chain_even_as_the_last_member() {
        let mut t = table();
        t.set(4, vec![2], vec![]);
        t.chain_mut(1).unwrap().record_left(2, 77);
        let e = t.epoch;
        let left = leave_every_chain(&mut t, 2);
        assert_eq!(left, vec![1, 2, 3, 4]);
        assert!(t.chains.iter().all(|(_, c)| !c.holds(2)));
        assert!(t.chain(4).unwrap().members.is_empty(), "no full copy left");
        assert_eq!(t.chain(1).unwrap().left_at(2), None, "filled whole");
        assert!(t.epoch > e);
    }

    #[test]
    fn a_restarted_member_leaves_where_another_is_heard_and_stays_alone_where_none_is() {
        let mut t = table();
        // Nobody else heard: it keeps every chain where it is a full
        // member, alone; the others are caught up later.
        let changed = restart_in_chains(&mut t, 1, &HashSet::new(), 1000);
        assert_eq!(changed, vec![1, 2, 3]);
        assert_eq!(t.chain(1).unwrap().members, vec![1]);
        assert_eq!(t.chain(2).unwrap().members, vec![1]);
        assert_eq!(t.chain(1).unwrap().left_at(2), Some(1000));
        // OSD 2 restarts next: 1 is heard, so it leaves (it was not in
        // them any more anyway) and its own new group is untouched.
        let mut t = table();
        let heard: HashSet<u32> = [3].into();
        restart_in_chains(&mut t, 1, &heard, 5);
        assert_eq!(t.chain(1).unwrap().members, vec![2, 3]);
        assert_eq!(t.chain(2).unwrap().members, vec![2, 3]);
        assert_eq!(t.chain(3).unwrap().members, vec![3]);
        assert_eq!(t.chain(3).unwrap().joining, vec![2]);
        // A joining member always leaves.
        let mut t = table();
        restart_in_chains(&mut t, 2, &HashSet::new(), 5);
        assert_eq!(t.chain(3).unwrap().members, vec![3, 1]);
        assert!(t.chain(3).unwrap().joining.is_empty());
    }
}
