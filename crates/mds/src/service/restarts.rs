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
//! (Without chains, see `set_aside.rs`.)
//!
//! An OSD that did not shut down cleanly may also hold changes it never
//! passed down. CHAIN RESTARTED first waits until every other full member
//! of its chains has either been heard from since the request came or let
//! its lease run out (at most a lease). Where another member was heard, the
//! chain drops the OSD (it is filled again later). Where every other
//! member's lease ran out (every member went down together) and the OSD's
//! store is the one it had, it stays as the chain's only member and the
//! others are caught up from it when they return. So a simultaneous crash
//! of every member never leaves the choice of the survivor to the order in
//! which leases lapse, and a member whose lease still runs is never cut out.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use proto::chain::ChainTable;
use proto::mds::{Errno, MdsError, MdsReply, StoreMark};

use super::{Mds, err};
use crate::records::Records;

/// What an OSD's store mark says about the copies it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreVerdict {
    /// No mark, and none recorded: nothing is checked.
    Unknown,
    /// No mark although one is recorded (no store open): refused.
    Missing,
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
    /// The store it ran on, with a mark older than the one recorded, where
    /// only the identity is judged (CHAIN RESTARTED: the mark may have
    /// been taken before a report the MDS has already seen). Not lost —
    /// the report judges that — but never trusted to keep a chain alone.
    Behind,
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
        None if !now.known() => StoreVerdict::Unknown,
        Some(_) if !now.known() => StoreVerdict::Missing,
        None => StoreVerdict::First,
        Some(k) if k.uuid != now.uuid => StoreVerdict::Replaced,
        Some(k) if now.seq < k.seq => StoreVerdict::Rewound { was: k.seq },
        Some(_) => StoreVerdict::Same,
    }
}

/// Takes `osd` out of every chain of `t` and forgets when it left them (it
/// is filled whole, not caught up). Returns the groups it left and whether
/// `t` changed at all.
pub fn leave_every_chain(t: &mut ChainTable, osd: u32) -> (Vec<u32>, bool) {
    let groups = t.groups_holding(osd);
    for g in &groups {
        let Some((members, joining)) = t.chain(*g).map(|c| c.without(osd)) else {
            continue;
        };
        t.set(*g, members, joining);
    }
    let mut forgot = false;
    for (_, c) in &mut t.chains {
        let before = c.left.len();
        c.left.retain(|(o, _)| *o != osd);
        forgot |= c.left.len() != before;
    }
    let changed = !groups.is_empty() || forgot;
    (groups, changed)
}

/// Who else is in `osd`'s chains and what the MDS knows of them, for
/// [`restart_in_chains`].
#[derive(Debug, Default)]
pub struct Others {
    /// Heard from since the restart was reported.
    pub heard: HashSet<u32>,
    /// Whose lease may still run.
    pub alive: HashSet<u32>,
    /// When each was last heard from (ms since the epoch), if known.
    pub last_heard_ms: HashMap<u32, u64>,
}

/// What CHAIN RESTARTED does to `t` for `osd` (its store checked: `same`
/// when it is the store it had). A joining member leaves. A full member
/// leaves where another full member was heard from; it stays as the only
/// member where every other one's lease ran out and its store is the one
/// it had — the others leave, each recorded as gone when it was last
/// heard from (not recorded when that is unknown: filled whole). Elsewhere
/// it leaves if any other member is left. Returns the groups changed.
pub fn restart_in_chains(
    t: &mut ChainTable,
    osd: u32,
    others: &Others,
    same: bool,
    now_ms: u64,
) -> Vec<u32> {
    let mut changed = Vec::new();
    for g in t.groups_holding(osd) {
        let Some(c) = t.chain(g).cloned() else {
            continue;
        };
        let (rest, joining) = c.without(osd);
        let full = c.members.contains(&osd);
        let alone = full
            && same
            && rest
                .iter()
                .all(|m| !others.alive.contains(m) && !others.heard.contains(m));
        if alone {
            if c.members == [osd] && c.joining.is_empty() {
                continue;
            }
            t.set(g, vec![osd], Vec::new());
            if let Some(c) = t.chain_mut(g) {
                for o in rest {
                    if let Some(at) = others.last_heard_ms.get(&o) {
                        c.record_left(o, *at);
                    }
                }
            }
        } else if !full || !rest.is_empty() {
            t.set(g, rest, joining);
            if full && let Some(c) = t.chain_mut(g) {
                c.record_left(osd, now_ms);
            }
        } else {
            continue;
        }
        changed.push(g);
    }
    changed
}

/// In `tx`: judges OSD `osd`'s store mark and records it (every report
/// whose sequence moved, so a copy of a store older than the OSD's last
/// report is recognised; `check_seq` false judges the identity only, for a
/// mark that may have been taken before a report already judged). With
/// chains, an OSD whose copies are gone leaves every chain in the same
/// transaction; without, its mark is recorded once its copies are set
/// aside. Returns the verdict and the groups it left.
pub(super) fn check_store(
    tx: &mut crate::kv::Tx,
    osd: u32,
    mark: StoreMark,
    check_seq: bool,
) -> Result<(StoreVerdict, Vec<u32>), MdsError> {
    let known = tx.store_mark(osd)?;
    let mut verdict = judge(known.as_ref(), &mark);
    if !check_seq && matches!(verdict, StoreVerdict::Rewound { .. }) {
        verdict = StoreVerdict::Behind;
    }
    match verdict {
        StoreVerdict::Unknown | StoreVerdict::Missing | StoreVerdict::Behind => {
            return Ok((verdict, Vec::new()));
        }
        StoreVerdict::Same => {
            if check_seq && known.is_some_and(|k| mark.seq > k.seq) {
                tx.put_store_mark(osd, &mark)?;
            }
            return Ok((verdict, Vec::new()));
        }
        // A store never seen, for an OSD that already holds places in
        // chains (a log from before marks were kept): nothing says its
        // copies are there, so it is treated as replaced. An OSD of a new
        // cluster reports before any chain names it.
        StoreVerdict::First
            if tx
                .chains()?
                .is_none_or(|t| t.groups_holding(osd).is_empty()) =>
        {
            tx.put_store_mark(osd, &mark)?;
            return Ok((verdict, Vec::new()));
        }
        StoreVerdict::First => {}
        StoreVerdict::Replaced | StoreVerdict::Rewound { .. } => {}
    }
    let Some(mut t) = tx.chains()? else {
        return Ok((verdict, Vec::new()));
    };
    let (left, changed) = leave_every_chain(&mut t, osd);
    if changed {
        tx.put_chains(&t)?;
    }
    tx.put_store_mark(osd, &mark)?;
    Ok((verdict, left))
}

impl Mds {
    /// OSDs heard from within the last heartbeat and a half: alive now,
    /// not merely within a lease that has yet to run out.
    pub(super) fn heard_recently(&self) -> HashSet<u32> {
        let window =
            Duration::from_millis((self.cfg.heartbeat_ms * 3 / 2).min(self.cfg.down_after_ms / 2));
        self.heard_since(Instant::now() - window)
    }

    /// OSDs whose last report said they are full (`proto::space::FULL`).
    pub(super) fn full_osds(&self) -> HashSet<u32> {
        self.live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .osds
            .iter()
            .filter(|(_, l)| {
                l.capacity > 0 && l.used as f64 >= proto::space::FULL * l.capacity as f64
            })
            .map(|(&id, _)| id)
            .collect()
    }

    /// OSDs whose last report arrived after `since`.
    fn heard_since(&self, since: Instant) -> HashSet<u32> {
        self.live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .osds
            .iter()
            .filter(|(_, l)| l.seen > since)
            .map(|(&id, _)| id)
            .collect()
    }

    /// When each OSD heard from since this MDS started was last heard
    /// from (ms since the epoch).
    pub(super) fn last_heard_ms(&self) -> HashMap<u32, u64> {
        let now = proto::clock::now_ms();
        self.live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .osds
            .iter()
            .map(|(&id, l)| (id, now.saturating_sub(l.seen.elapsed().as_millis() as u64)))
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
        if !left.is_empty() {
            self.recovery_wake.notify_one();
        }
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
        // A member that could not reach it meanwhile saw a restart, not a
        // cut link.
        self.cuts.restarted(me);
        // The identity only: a report may have judged a newer sequence
        // since this mark was taken.
        let (verdict, left) = self
            .kv
            .write(move |tx| check_store(tx, me, store, false))
            .await?;
        self.log_store_verdict(me, verdict, &left);
        if verdict == StoreVerdict::Missing {
            return Err(err(
                Errno::Busy,
                format!("OSD {me} names no store, but one is recorded for it"),
            ));
        }
        if verdict.lost() {
            return self.chain_grant(me);
        }
        let others = self.wait_for_the_others(me).await?;
        let same = verdict == StoreVerdict::Same;
        let now = proto::clock::now_ms();
        // The chains as written: logged from the transaction's own copy.
        let changed: Vec<(u32, proto::chain::Chain)> = self
            .kv
            .write(move |tx| {
                let Some(mut t) = tx.chains()? else {
                    return Ok(Vec::new());
                };
                let changed = restart_in_chains(&mut t, me, &others, same, now);
                if !changed.is_empty() {
                    tx.put_chains(&t)?;
                }
                Ok(changed
                    .into_iter()
                    .filter_map(|g| t.chain(g).map(|c| (g, c.clone())))
                    .collect())
            })
            .await?;
        if !changed.is_empty() {
            for (g, c) in &changed {
                super::chains::log_chain_change(*g, c);
            }
            tracing::warn!(
                osd = me,
                "OSD restarted after a crash: left its chains where another member is \
                 heard from, to be filled again; kept alone where every other's lease ran out"
            );
            self.recovery_wake.notify_one();
        }
        self.chain_grant(me)
    }

    /// Waits (at most a lease and a second) until every other full member
    /// of `me`'s chains has been heard from since now or let its lease run
    /// out; then what is known of them.
    async fn wait_for_the_others(&self, me: u32) -> Result<Others, MdsError> {
        let asked = Instant::now();
        let deadline = self.leases_out_by(asked);
        let rest: HashSet<u32> = self
            .chain_table()?
            .unwrap_or_default()
            .chains
            .iter()
            .filter(|(_, c)| c.members.contains(&me))
            .flat_map(|(_, c)| c.members.clone())
            .filter(|m| *m != me)
            .collect();
        loop {
            let heard = self.heard_since(asked);
            let undecided = rest
                .iter()
                .any(|m| !heard.contains(m) && !self.lease_lapsed(*m));
            if !undecided || Instant::now() >= deadline {
                let alive = rest
                    .iter()
                    .copied()
                    .filter(|m| !self.lease_lapsed(*m))
                    .collect();
                return Ok(Others {
                    heard,
                    alive,
                    last_heard_ms: self.last_heard_ms(),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
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
        assert_eq!(judge(Some(&mark(1, 5)), &mark(0, 0)), StoreVerdict::Missing);
        assert_eq!(judge(None, &mark(0, 0)), StoreVerdict::Unknown);
        assert!(StoreVerdict::Replaced.lost() && StoreVerdict::Rewound { was: 1 }.lost());
        assert!(!StoreVerdict::Same.lost() && !StoreVerdict::First.lost());
        assert!(!StoreVerdict::Missing.lost());
    }

    #[test]
    fn a_lost_store_leaves_every_chain_even_as_the_last_member() {
        let mut t = table();
        t.set(4, vec![2], vec![]);
        t.chain_mut(1).unwrap().record_left(2, 77);
        let e = t.epoch;
        let (left, changed) = leave_every_chain(&mut t, 2);
        assert!(changed);
        assert_eq!(left, vec![1, 2, 3, 4]);
        assert!(t.chains.iter().all(|(_, c)| !c.holds(2)));
        assert!(t.chain(4).unwrap().members.is_empty(), "no full copy left");
        assert_eq!(t.chain(1).unwrap().left_at(2), None, "filled whole");
        assert!(t.epoch > e);
        // In no chain any more, but remembered as having left one: the
        // record goes (a rejoin must not be a catch-up from it).
        let mut t = table();
        t.set(1, vec![1, 3], vec![]);
        t.set(2, vec![3, 1], vec![]);
        t.set(3, vec![3, 1], vec![]);
        t.chain_mut(1).unwrap().record_left(2, 77);
        let (left, changed) = leave_every_chain(&mut t, 2);
        assert!(left.is_empty() && changed);
        assert_eq!(t.chain(1).unwrap().left_at(2), None);
    }

    fn others(heard: &[u32], alive: &[u32]) -> Others {
        Others {
            heard: heard.iter().copied().collect(),
            alive: alive.iter().copied().collect(),
            last_heard_ms: [(2, 400), (3, 500)].into(),
        }
    }

    #[test]
    fn a_restarted_member_stays_alone_only_when_every_other_lease_ran_out() {
        // Every other member's lease ran out: alone in every chain where
        // it is a full member; the others are recorded gone when last
        // heard from.
        let mut t = table();
        let changed = restart_in_chains(&mut t, 1, &others(&[], &[]), true, 1000);
        assert_eq!(changed, vec![1, 2, 3]);
        assert_eq!(t.chain(1).unwrap().members, vec![1]);
        assert_eq!(t.chain(2).unwrap().members, vec![1]);
        assert_eq!(t.chain(1).unwrap().left_at(2), Some(400));
        assert_eq!(t.chain(1).unwrap().left_at(3), Some(500));
        let again = restart_in_chains(&mut t, 1, &others(&[], &[]), true, 2000);
        assert!(again.is_empty(), "already alone: no new epoch");
        // Another member heard from: it leaves.
        let mut t = table();
        restart_in_chains(&mut t, 1, &others(&[3], &[3]), true, 5);
        assert_eq!(t.chain(1).unwrap().members, vec![2, 3]);
        assert_eq!(t.chain(2).unwrap().members, vec![2, 3]);
        assert_eq!(t.chain(3).unwrap().members, vec![3]);
        assert_eq!(t.chain(1).unwrap().left_at(1), Some(5));
        // Another member's lease still runs (not heard): it does not take
        // the chain from it.
        let mut t = table();
        restart_in_chains(&mut t, 1, &others(&[], &[2]), true, 5);
        assert_eq!(t.chain(1).unwrap().members, vec![2, 3]);
        // A store seen for the first time is never kept alone.
        let mut t = table();
        restart_in_chains(&mut t, 1, &others(&[], &[]), false, 5);
        assert_eq!(t.chain(1).unwrap().members, vec![2, 3]);
        // A joining member always leaves, and leaves no departure.
        let mut t = table();
        restart_in_chains(&mut t, 2, &others(&[], &[]), true, 5);
        assert_eq!(t.chain(3).unwrap().members, vec![3, 1]);
        assert!(t.chain(3).unwrap().joining.is_empty());
        assert_eq!(t.chain(3).unwrap().left_at(2), None);
    }
}
