//! The MDS as the authority of the replica chains (a namespace on the OSDs
//! with copies, `proto::chain`): it keeps every group's chain in its log,
//! makes a chain for each OSD id once that OSD is up, drops members that
//! are down (so the next member becomes head only once the old head's
//! lease has run out), adds a joining member to a chain that is short,
//! counts it once the member before it has filled it, and hands each OSD
//! the capabilities and tickets it needs to pass effects to its
//! successors.

use std::collections::HashSet;
use std::time::Duration;

use bytes::Bytes;
use proto::chain::{Chain, ChainTable, group_partition, member_name, member_principal};
use proto::mds::{ChainGrant, Errno, Grant, MdsError, MdsReply, ScrubReport};
use proto::msg::Reply;
use proto::{Command, rights};

use super::chain_plan::{Seen, plan_chains, record_departures};
use super::{Mds, err};
use crate::records::Records;

/// How often a chain drop re-checks whether the member is down.
const DROP_POLL: Duration = Duration::from_millis(100);

/// The structured log line of a chain that changed.
pub(super) fn log_chain_change(group: u32, c: &Chain) {
    tracing::info!(
        group,
        epoch = c.epoch,
        members = ?c.members,
        joining = ?c.joining,
        "replica chain changed"
    );
}

impl Mds {
    /// The replica chains, when this file system keeps copies on the OSDs.
    pub(super) fn chain_table(&self) -> Result<Option<ChainTable>, MdsError> {
        self.kv.read()?.chains()
    }

    /// The chains' epoch (0 when there are none), for OSD reports.
    pub(super) fn chains_epoch(&self) -> u64 {
        self.chain_table().ok().flatten().map_or(0, |t| t.epoch)
    }

    /// Why OSD `osd`'s report is refused while it drains: it is out, heads
    /// a chain, and every chain that names it (as head, member or joiner)
    /// has `R` other full members on OSDs that are in and were heard from
    /// just now, none joining. Its lease then runs out unrenewed and
    /// [`plan_chains`] replaces it as it replaces a crashed head — only
    /// once it has certainly stopped answering as head — and drops it from
    /// every chain, none of which then needs its copy. Once it heads
    /// nothing its reports are taken again: up, out, in no chain.
    pub(super) fn drain_refusal(&self, osd: u32) -> Result<Option<String>, MdsError> {
        let map = self.current_map()?;
        if !map.osd(osd).is_some_and(|e| e.out) {
            return Ok(None);
        }
        let Some(t) = self.chain_table()? else {
            return Ok(None);
        };
        let heard = self.heard_recently();
        let whole_without = |c: &Chain| {
            let others = c.members.iter().filter(|m| **m != osd);
            c.joining.is_empty()
                && others
                    .filter(|m| heard.contains(m) && map.osd(**m).is_some_and(|e| !e.out))
                    .count()
                    >= usize::from(t.replicas.max(1))
        };
        let heads: Vec<u32> = t
            .chains
            .iter()
            .filter(|(_, c)| c.head() == Some(osd))
            .map(|(g, _)| *g)
            .collect();
        let named = t.chains.iter().filter(|(_, c)| c.holds(osd));
        if heads.is_empty() || !named.clone().all(|(_, c)| whole_without(c)) {
            return Ok(None);
        }
        Ok(Some(format!(
            "OSD {osd} is out and heads groups {heads:?}, which other members hold in full: \
             its lease is not renewed, so the next members take over (a drain)"
        )))
    }

    /// One pass over the chains: makes, shrinks and grows them as
    /// [`plan_chains`] says, and logs every change. Returns whether a
    /// group is still short of copies.
    pub(super) async fn chain_pass(&self) -> Result<bool, MdsError> {
        let _gate = self.chain_gate.lock().await;
        let Some(t) = self.chain_table()? else {
            return Ok(false);
        };
        let map = self.current_map()?;
        let up = self.up_osds();
        let alive: HashSet<u32> = map
            .osds
            .iter()
            .map(|e| e.id)
            .filter(|o| up.contains(o) || !self.lease_lapsed(*o))
            .collect();
        let seen = Seen {
            heard: self.heard_recently(),
            full: self.full_osds(),
            up,
            alive,
        };
        if let Some(next) = plan_chains(&t, &map, &seen) {
            self.store_chains(&t, next).await?;
        }
        let mut counts = proto::mds::Redundancy::default();
        self.chain_counts(&mut counts);
        self.metrics.set_groups(&counts);
        let t = self.chain_table()?.unwrap_or_default();
        Ok(t.chains
            .iter()
            .any(|(_, c)| c.members.len() < usize::from(t.replicas)))
    }

    /// Writes `next` if the chains are still `before` (a concurrent
    /// change wins; the next pass looks again), logging each chain that
    /// changed.
    async fn store_chains(
        &self,
        before: &ChainTable,
        mut next: ChainTable,
    ) -> Result<bool, MdsError> {
        record_departures(before, &mut next, &self.last_heard_ms());
        let expect = before.epoch;
        let to_write = next.clone();
        let written = self
            .kv
            .write(move |tx| {
                let cur = tx.chains()?.unwrap_or_default();
                if cur.epoch != expect {
                    return Ok(false);
                }
                tx.put_chains(&to_write)?;
                Ok(true)
            })
            .await?;
        if written {
            for (g, c) in &next.chains {
                if before.chain(*g) != Some(c) {
                    log_chain_change(*g, c);
                }
            }
        }
        Ok(written)
    }

    /// Changes one chain under the caller's view of it: `f` gets the chain
    /// (already checked to be at `epoch`) and returns the new members and
    /// joining ones, or `None` to change nothing.
    async fn change_chain(
        &self,
        group: u32,
        epoch: u64,
        f: impl Fn(&Chain) -> Option<(Vec<u32>, Vec<u32>)>,
    ) -> Result<(), MdsError> {
        for _ in 0..8 {
            let Some(t) = self.chain_table()? else {
                return Err(err(
                    Errno::Inval,
                    "this file system keeps no replica chains",
                ));
            };
            let Some(c) = t.chain(group) else {
                return Err(err(Errno::NoEnt, format!("no replica group {group}")));
            };
            if c.epoch != epoch {
                return Ok(());
            }
            let Some((members, joining)) = f(c) else {
                return Ok(());
            };
            let mut next = t.clone();
            next.set(group, members, joining);
            if self.store_chains(&t, next).await? {
                return Ok(());
            }
        }
        Err(err(Errno::Busy, "the chains kept changing; try again"))
    }

    /// ADOPT GROUP (operator): `group`, which lost every full copy, is
    /// served again from OSD `osd`'s copy as it is — older, or empty —
    /// and the loss of anything newer is accepted. `osd` becomes the only
    /// member; its departures are forgotten, so every joiner is filled
    /// whole from it (a catch-up by time could keep a newer object on a
    /// joiner, and the copies would differ).
    pub(super) async fn adopt_group(
        &self,
        c: &proto::mds::Creds,
        group: u32,
        osd: u32,
    ) -> Result<MdsReply, MdsError> {
        if c.uid != 0 {
            return Err(err(Errno::Perm, "only root may adopt a replica group"));
        }
        let _gate = self.chain_gate.lock().await;
        let Some(t) = self.chain_table()? else {
            return Err(err(
                Errno::Inval,
                "this file system keeps no replica chains (the namespace is in the MDS)",
            ));
        };
        let Some(chain) = t.chain(group) else {
            let known: Vec<String> = t.chains.iter().map(|(g, _)| g.to_string()).collect();
            return Err(err(
                Errno::NoEnt,
                format!("no replica group {group} (groups: {})", known.join(", ")),
            ));
        };
        if chain.members == [osd] {
            // Asked again (a lost answer): already so, nothing to change.
            return Ok(MdsReply::Done);
        }
        if self.kv.read()?.namespace()?.root_osd == Some(group) {
            return Err(err(
                Errno::Inval,
                format!(
                    "replica group {group} holds the root directory and the inode counter: an \
                     older copy would hand out inode numbers files in other groups still use, \
                     so it cannot be adopted"
                ),
            ));
        }
        if !chain.members.is_empty() {
            return Err(err(
                Errno::Inval,
                format!(
                    "replica group {group} is not lost: members {:?} hold it in full",
                    chain.members
                ),
            ));
        }
        let map = self.current_map()?;
        if !self.up_osds().contains(&osd) || map.osd(osd).is_none_or(|e| e.out) {
            return Err(err(
                Errno::Inval,
                format!("OSD {osd} is not up and in: the group can only adopt a copy it can serve"),
            ));
        }
        let mut next = t.clone();
        next.set(group, vec![osd], Vec::new());
        if let Some((_, ch)) = next.chains.iter_mut().find(|(g, _)| *g == group) {
            ch.left.clear();
        }
        if !self.store_chains(&t, next).await? {
            return Err(err(Errno::Busy, "the chains changed meanwhile; try again"));
        }
        tracing::warn!(
            group,
            osd,
            "replica group adopted by the operator: anything newer than OSD {osd}'s copy is lost"
        );
        self.recovery_wake.notify_one();
        Ok(MdsReply::Done)
    }

    /// CHAIN DROP from OSD `me`: `osd`, its successor in `group`'s chain,
    /// could not take an effect. Dropped once the MDS sees it down (its
    /// lease has run out), waiting up to a lease for that; at once when it
    /// `refused` the effect (answered an error it gives every time).
    pub(super) async fn chain_drop(
        &self,
        me: u32,
        group: u32,
        epoch: u64,
        osd: u32,
        refused: bool,
    ) -> Result<MdsReply, MdsError> {
        let asked = std::time::Instant::now();
        let up_when_asked = self.up_osds().contains(&osd);
        let deadline = self.leases_out_by(asked);
        while !refused && !self.lease_lapsed(osd) && std::time::Instant::now() < deadline {
            tokio::time::sleep(DROP_POLL).await;
        }
        if !refused
            && !self.lease_lapsed(osd)
            && up_when_asked
            && self.up_osds().contains(&osd)
            && !self.cuts.restarted_since(
                osd,
                asked
                    .checked_sub(Duration::from_millis(self.cfg.down_after_ms))
                    .unwrap_or(asked),
            )
        {
            // Up all along (not restarting, not just back after an MDS
            // restart), yet `me` cannot reach it: a cut link (`cuts`).
            tracing::warn!(
                group,
                from = me,
                to = osd,
                "a chain member cannot reach its successor, which is up: writes to the group fail until the link heals"
            );
            self.cuts.note(group, me, osd);
        }
        // A successor that refuses every try is dropped alive: it is not
        // the head, so no client reads it, and it is filled again later.
        if refused || self.lease_lapsed(osd) {
            self.change_chain(group, epoch, |c| {
                (c.successor(me) == Some(osd)).then(|| c.without(osd))
            })
            .await?;
            self.recovery_wake.notify_one();
        }
        self.chain_grant(me)
    }

    /// CHAIN FILLED from OSD `me`: it filled `osd`, the first joining
    /// member after it, so `osd` now counts.
    pub(super) async fn chain_filled(
        &self,
        me: u32,
        group: u32,
        epoch: u64,
        osd: u32,
    ) -> Result<MdsReply, MdsError> {
        self.change_chain(group, epoch, |c| {
            (c.members.last() == Some(&me) && c.joining.first() == Some(&osd)).then(|| {
                let mut members = c.members.clone();
                members.push(osd);
                (members, c.joining[1..].to_vec())
            })
        })
        .await?;
        tracing::info!(group, osd, "replica chain member filled");
        self.recovery_wake.notify_one();
        self.chain_grant(me)
    }

    /// CHAINS for OSD `me`: the table, the addresses, and for each group
    /// where `me` has a successor a capability over the group's partition
    /// there and a ticket naming `me` (its session key wrapped with `me`'s
    /// own key).
    pub(super) fn chain_grant(&self, me: u32) -> Result<MdsReply, MdsError> {
        let Some(mut table) = self.chain_table()? else {
            return Err(err(
                Errno::Inval,
                "this file system keeps no replica chains",
            ));
        };
        table.catch_up_margin_ms = self.cfg.chain_catch_up_margin_ms;
        table.fill_mib_per_sec = u32::try_from(self.cfg.recovery_mib_per_sec).unwrap_or(u32::MAX);
        let map = self.current_map()?;
        let own = self
            .osd_ring(me, None)
            .and_then(|r| r.newest().map(|(_, k)| *k))
            .ok_or_else(|| err(Errno::Access, format!("no key for OSD {me}")))?;
        let expiry_ms = proto::clock::now_ms() + self.cfg.cap_ttl_secs * 1000;
        let mut caps = Vec::new();
        let mut tickets = Vec::new();
        for (g, c) in &table.chains {
            // Its successor (effects, fills), and as head every member
            // (scrub and repair).
            let mut to: Vec<u32> = c.successor(me).into_iter().collect();
            if c.head() == Some(me) {
                to.extend(c.order().filter(|m| *m != me));
            }
            to.sort_unstable();
            to.dedup();
            for next in to {
                let Some(ring) = self.osd_ring(next, None) else {
                    continue;
                };
                let Some((kv, key)) = ring.newest() else {
                    continue;
                };
                let cap = proto::CapSpec {
                    partition: group_partition(*g),
                    oid_lo: 0,
                    oid_hi: u64::MAX,
                    rights: rights::ALL,
                    expiry_ms,
                    version: u64::MAX,
                    holder: member_principal(me),
                }
                .sign(key, kv, next);
                caps.push((*g, next, cap));
                if tickets.iter().any(|(o, _, _): &(u32, _, _)| *o == next) {
                    continue;
                }
                let Some((identity, _)) =
                    net::auth::mint_ticket(&ring, next, member_principal(me), &member_name(me))
                else {
                    continue;
                };
                if let (proto::auth::Credential::Ticket(t), Some(session)) =
                    (identity.credential, identity.key)
                {
                    tickets.push((
                        next,
                        t,
                        proto::auth::wrap_session_key(&own, &session, net::auth::random_bytes()),
                    ));
                }
            }
        }
        let addrs = map.osds.iter().map(|o| (o.id, o.addr.clone())).collect();
        Ok(MdsReply::Chains(Box::new(ChainGrant {
            table,
            addrs,
            caps,
            tickets,
        })))
    }

    /// SCRUB of a file system whose copies are kept by chains: every
    /// group's head compares its members' copies with its own and repairs
    /// those that differ.
    pub(super) async fn chain_scrub(&self, deep: bool) -> Result<ScrubReport, MdsError> {
        let Some(t) = self.chain_table()? else {
            return Err(err(
                Errno::Inval,
                "this file system keeps no replica chains",
            ));
        };
        let map = self.current_map()?;
        let up = self.up_osds();
        let mut rep = ScrubReport::default();
        for (g, c) in &t.chains {
            let Some(head) = c.head().filter(|h| up.contains(h)) else {
                rep.problems
                    .push(format!("group {g}: its head is down; not scrubbed"));
                rep.unchecked += 1;
                continue;
            };
            let client = self.osd_client(&map, head)?;
            let cap = self.admin_cap_in(head, group_partition(*g))?;
            let cmd = Command::ScrubGroup { group: *g, deep };
            let mut got = client.run(Some(&cap), cmd.clone(), Bytes::new()).await;
            if got
                .as_ref()
                .is_err_and(|e| !matches!(e, net::ConnError::Remote(_)))
            {
                // A connection to an OSD that restarted: once more.
                got = client.run(Some(&cap), cmd, Bytes::new()).await;
            }
            match got {
                Ok(net::Answer {
                    reply:
                        Reply::Scrubbed {
                            objects,
                            copies,
                            inconsistent,
                            repaired,
                            problems,
                        },
                    ..
                }) => {
                    rep.objects += objects;
                    rep.copies += copies;
                    rep.inconsistent += inconsistent;
                    rep.repaired += repaired;
                    rep.problems.extend(problems);
                }
                Ok(other) => {
                    rep.unchecked += 1;
                    rep.problems
                        .push(format!("group {g}: OSD {head} answered {:?}", other.reply));
                }
                Err(e) => {
                    rep.unchecked += 1;
                    rep.problems
                        .push(format!("group {g}: OSD {head} could not scrub: {e}"));
                }
            }
        }
        tracing::info!(
            deep,
            objects = rep.objects,
            inconsistent = rep.inconsistent,
            repaired = rep.repaired,
            "replica groups scrubbed"
        );
        Ok(rep)
    }

    /// Counts for the status: groups, degraded (fewer full members up
    /// than copies asked for), unavailable (none up), filling.
    pub(super) fn chain_counts(&self, r: &mut proto::mds::Redundancy) {
        let Ok(Some(t)) = self.chain_table() else {
            return;
        };
        let up = self.up_osds();
        let want = usize::from(t.replicas.max(1));
        r.max_replicas = r.max_replicas.max(u32::from(t.replicas));
        for (_, c) in &t.chains {
            r.groups += 1;
            let full_up = c.members.iter().filter(|m| up.contains(m)).count();
            if full_up == 0 {
                r.groups_unavailable += 1;
            }
            if c.members.is_empty() {
                r.groups_lost += 1;
            }
            if full_up < want {
                r.groups_degraded += 1;
            }
            if !c.joining.is_empty() {
                r.groups_filling += 1;
            }
        }
        // While the link stays cut a member asks again about every
        // connect timeout, lease and second (the first time within its
        // reply timeout): two of those without a word, and it healed.
        let again = proto::chain::PEER_CONNECT_TIMEOUT_MS + self.cfg.down_after_ms + 1_000;
        let fresh = Duration::from_millis(2 * again + 1_000);
        let cuts = self.cuts.current(fresh, |g, a, b| {
            t.chain(g).is_some_and(|c| c.successor(a) == Some(b))
        });
        r.groups_cut = cuts.len() as u32;
        r.cut_links = cuts.into_iter().take(super::cuts::CUTS_NAMED).collect();
    }

    /// The client's capabilities with chains: per group, one for the
    /// group's head over the group's partition.
    pub(super) fn chain_caps(
        &self,
        table: &ChainTable,
        lo: u64,
        rights: u32,
        version: u64,
    ) -> Grant {
        let expiry_ms = proto::clock::now_ms() + self.cfg.cap_ttl_secs * 1000;
        let caps = table
            .chains
            .iter()
            .filter_map(|(g, c)| {
                let head = c.head()?;
                let ring = self.osd_ring(head, None)?;
                let (kv, key) = ring.newest()?;
                Some((
                    *g,
                    proto::CapSpec {
                        partition: group_partition(*g),
                        oid_lo: lo,
                        oid_hi: u64::MAX,
                        rights,
                        expiry_ms,
                        version,
                        holder: super::auth::holder(),
                    }
                    .sign(key, kv, head),
                ))
            })
            .collect();
        Grant {
            lo,
            hi: u64::MAX,
            rights,
            expiry_ms,
            caps,
        }
    }
}
