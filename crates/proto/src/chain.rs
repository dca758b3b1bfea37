//! Replica chains: how objects of the namespace-on-OSDs mode keep `R`
//! copies while compare-and-swap stays linearizable.
//!
//! Every OSD id names a **replica group**: the objects placement puts on
//! that id. A group's objects live, on every OSD that holds a copy of
//! them, in the group's own partition ([`group_partition`]), so one OSD can
//! hold copies of several groups without their object ids meeting. The
//! authority (the MDS) keeps each group's **chain**: an ordered list of
//! OSDs, the head first. Clients send every command for a group to its
//! head; the head runs it, then passes its effect down the chain, each
//! member applying it durably before passing it on, and answers only when
//! the tail has applied it (chain replication, van Renesse and Schneider,
//! *Chain Replication for Supporting High Throughput and Availability*,
//! 2004). Every member holds an object's lock from applying an effect until
//! the rest of the chain has it, so each member's copy is always the next
//! member's plus at most the effects still on their way down: whoever
//! becomes head after a failure already holds everything any later member
//! holds.

use serde::{Deserialize, Serialize};

use crate::msg::{Command, Reply};

/// First partition id of the replica groups' partitions.
pub const GROUP_PARTITION_BASE: u64 = 0x2_0000;
/// Most replica groups (one per OSD id).
pub const MAX_GROUPS: u32 = 1 << 16;
/// Most copies a chain keeps.
pub const MAX_CHAIN: usize = 5;

/// How long a chain member waits for its successor to accept a
/// connection (ms). A live OSD's kernel answers a connect at once, so
/// past this the member asks the authority about its successor; the
/// authority counts on a member asking again about that often while a
/// link between two members that both reach it stays cut.
pub const PEER_CONNECT_TIMEOUT_MS: u64 = 5_000;

/// The attribute every member of a chain keeps on each object of its
/// group: the stamp of the last change it took whole (8 bytes, u64 LE).
/// The head draws a new stamp for every change and passes it down with
/// the effect; a member marks the object with a stamp of its own before it
/// applies an effect and with the change's once it has. Two copies with
/// the same stamp took the same changes, so a returning member is sent
/// only the objects whose stamps differ: catch-up by versions, never by
/// clocks. Clients may not set it.
pub const STAMP: crate::msg::AttrKey = crate::msg::AttrKey {
    page: 0x7c00,
    number: 1,
};

/// The principal id an OSD's tickets name when it passes effects to
/// another member (the high bit keeps it apart from people's principals).
pub fn member_principal(osd: u32) -> u64 {
    (1 << 63) | u64::from(osd)
}

/// The principal name an OSD's tickets carry: `osd.N`.
pub fn member_name(osd: u32) -> String {
    format!("osd.{osd}")
}

/// The partition holding group `group`'s objects on every member.
pub fn group_partition(group: u32) -> u64 {
    GROUP_PARTITION_BASE + u64::from(group)
}

/// First partition id of the groups' staging partitions.
pub const STAGING_PARTITION_BASE: u64 = 1 << 32;

/// Where OSD `sender` builds, on another member, a copy of one of group
/// `group`'s objects before it installs it (INSTALL): a partition of its
/// own per group and sender — never listed, read or filled, so a copy cut
/// short never stands in for the object, and two senders copying the same
/// object to one member (a fill and a resync) never build into each other.
pub fn staging_partition(group: u32, sender: u32) -> u64 {
    STAGING_PARTITION_BASE + (u64::from(group) << 16) + u64::from(sender & 0xFFFF)
}

/// The (group, sender) whose staging partition `pid` is, if it is one.
pub fn staging_of(pid: u64) -> Option<(u32, u32)> {
    let off = pid.checked_sub(STAGING_PARTITION_BASE)?;
    let group = off >> 16;
    (group < u64::from(MAX_GROUPS)).then_some((group as u32, (off & 0xFFFF) as u32))
}

/// The group whose staging partition `pid` is, if it is one.
pub fn staging_group(pid: u64) -> Option<u32> {
    staging_of(pid).map(|(g, _)| g)
}

/// The partition a capability must name to reach `pid`: a group's staging
/// partition is reached with a capability over the group's partition.
pub fn cap_partition(pid: u64) -> u64 {
    staging_group(pid).map_or(pid, group_partition)
}

/// The group a partition belongs to, if it is a group's.
pub fn partition_group(pid: u64) -> Option<u32> {
    pid.checked_sub(GROUP_PARTITION_BASE)
        .filter(|g| *g < u64::from(MAX_GROUPS))
        .map(|g| g as u32)
}

/// The map placement uses with replica chains: every OSD of `map` with a
/// weight, out or not. A group outlives its OSD being marked out (its
/// chain moves to other OSDs), so where placement puts an object must not
/// change when an OSD goes out.
pub fn placement_map(map: &crate::placement::OsdMap) -> crate::placement::OsdMap {
    let mut m = map.clone();
    for e in &mut m.osds {
        e.out = false;
    }
    m
}

/// One group's chain at one epoch.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Chain {
    /// Raised on every change of this chain.
    pub epoch: u64,
    /// Members holding every object of the group, the head first.
    pub members: Vec<u32>,
    /// Members being filled (after `members`): they take every new effect
    /// but are not counted, read or made head until the fill is done.
    pub joining: Vec<u32>,
    /// OSDs that left this chain recently, with when (ms since the epoch,
    /// the authority's clock; the newest few). A record for operators:
    /// catch-up compares change stamps ([`STAMP`]), not these times.
    pub left: Vec<(u32, u64)>,
}

/// Most departures a chain remembers.
pub const MAX_LEFT: usize = 8;

impl Chain {
    /// The head: the member clients send to.
    pub fn head(&self) -> Option<u32> {
        self.members.first().copied()
    }

    /// The members and the joining ones without `osd` (what the chain is
    /// once `osd` leaves it).
    pub fn without(&self, osd: u32) -> (Vec<u32>, Vec<u32>) {
        let keep = |v: &[u32]| v.iter().copied().filter(|m| *m != osd).collect();
        (keep(&self.members), keep(&self.joining))
    }

    /// Every member in chain order (full members, then joining ones).
    pub fn order(&self) -> impl Iterator<Item = u32> + '_ {
        self.members.iter().chain(self.joining.iter()).copied()
    }

    /// Whether `osd` is in the chain (full or joining).
    pub fn holds(&self, osd: u32) -> bool {
        self.order().any(|m| m == osd)
    }

    /// The member after `osd`, to which it passes effects.
    pub fn successor(&self, osd: u32) -> Option<u32> {
        let mut it = self.order().skip_while(|m| *m != osd);
        it.next()?;
        it.next()
    }

    /// The member before `osd`, the only one it takes effects from.
    pub fn predecessor(&self, osd: u32) -> Option<u32> {
        let v: Vec<u32> = self.order().collect();
        let i = v.iter().position(|m| *m == osd)?;
        i.checked_sub(1).map(|j| v[j])
    }

    /// Records that `osd` left at `at_ms` (the newest [`MAX_LEFT`] kept).
    pub fn record_left(&mut self, osd: u32, at_ms: u64) {
        self.left.retain(|(o, _)| *o != osd);
        self.left.push((osd, at_ms));
        if self.left.len() > MAX_LEFT {
            self.left.remove(0);
        }
    }

    /// When `osd` last left this chain, if it is remembered.
    pub fn left_at(&self, osd: u32) -> Option<u64> {
        self.left.iter().find(|(o, _)| *o == osd).map(|(_, t)| *t)
    }

    /// Checks the chain's shape: at most [`MAX_CHAIN`] members in all, none twice.
    pub fn validate(&self) -> Result<(), String> {
        let v: Vec<u32> = self.order().collect();
        if v.len() > MAX_CHAIN {
            return Err(format!("{} members, most {MAX_CHAIN}", v.len()));
        }
        for (i, m) in v.iter().enumerate() {
            if v[..i].contains(m) {
                return Err(format!("OSD {m} is in the chain twice"));
            }
        }
        Ok(())
    }
}

/// Every group's chain.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ChainTable {
    /// Raised on every change of any chain.
    pub epoch: u64,
    /// Copies each group keeps when the cluster has enough OSDs.
    pub replicas: u8,
    /// A member that joins again is sent every object changed since this
    /// long before it left (ms): changes in flight when it left, and the
    /// clocks of the MDS and the OSDs apart.
    pub catch_up_margin_ms: u64,
    /// Fills copy at most this many MiB per second (0 = unthrottled).
    pub fill_mib_per_sec: u32,
    /// (group, chain), sorted by group.
    pub chains: Vec<(u32, Chain)>,
}

impl ChainTable {
    /// The groups whose chains hold `osd` (full or joining).
    pub fn groups_holding(&self, osd: u32) -> Vec<u32> {
        self.chains
            .iter()
            .filter(|(_, c)| c.holds(osd))
            .map(|(g, _)| *g)
            .collect()
    }

    /// Group `group`'s chain.
    pub fn chain(&self, group: u32) -> Option<&Chain> {
        self.chains
            .binary_search_by_key(&group, |(g, _)| *g)
            .ok()
            .map(|i| &self.chains[i].1)
    }

    /// Group `group`'s chain, to change it (the caller raises the epochs).
    pub fn chain_mut(&mut self, group: u32) -> Option<&mut Chain> {
        self.chains
            .binary_search_by_key(&group, |(g, _)| *g)
            .ok()
            .map(|i| &mut self.chains[i].1)
    }

    /// Sets group `group`'s chain (added in order if new) and raises the
    /// table's epoch and the chain's.
    pub fn set(&mut self, group: u32, members: Vec<u32>, joining: Vec<u32>) {
        self.epoch += 1;
        let epoch = self.epoch;
        match self.chains.binary_search_by_key(&group, |(g, _)| *g) {
            Ok(i) => {
                let c = &mut self.chains[i].1;
                c.epoch = epoch;
                c.members = members;
                c.joining = joining;
            }
            Err(i) => self.chains.insert(
                i,
                (
                    group,
                    Chain {
                        epoch,
                        members,
                        joining,
                        left: Vec::new(),
                    },
                ),
            ),
        }
    }
}

/// An effect passed down a chain (the command FORWARD): a member's
/// predecessor sends it once it has applied it itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Forward {
    /// The group.
    pub group: u32,
    /// The chain's epoch the sender acts under; a member at another epoch
    /// refuses it ([`crate::ErrorCode::StaleChain`]).
    pub epoch: u64,
    /// The effect, in a form whose repetition is harmless: a
    /// compare-and-swap that swapped arrives as the attributes it set, a
    /// fetch-and-add as the counter's new value, an append as a write
    /// where it landed. The request's set list goes with it.
    pub op: Command,
    /// Who asked the head (principal id), for the retry table.
    pub origin: u64,
    /// The request id the head was asked with (0 = none).
    pub id: u64,
    /// What the head answered, kept by every member for a retry of the
    /// same request that reaches it after a failover.
    pub reply: Reply,
    /// The attributes the head answered with.
    pub attrs: Vec<(crate::msg::AttrKey, Vec<u8>)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_order_successors_and_predecessors() {
        let c = Chain {
            epoch: 3,
            members: vec![4, 1],
            joining: vec![7],
            left: Vec::new(),
        };
        assert_eq!(c.head(), Some(4));
        assert_eq!(c.successor(4), Some(1));
        assert_eq!(c.successor(1), Some(7));
        assert_eq!(c.successor(7), None);
        assert_eq!(c.predecessor(4), None);
        assert_eq!(c.predecessor(7), Some(1));
        assert_eq!(c.successor(9), None);
        assert!(c.holds(7) && !c.holds(9));
        assert!(c.validate().is_ok());
        let twice = Chain {
            epoch: 1,
            members: vec![1, 2],
            joining: vec![1],
            left: Vec::new(),
        };
        assert!(twice.validate().is_err());
    }

    #[test]
    fn departures_are_remembered_newest_last_and_bounded() {
        let mut c = Chain::default();
        for o in 0..12 {
            c.record_left(o, 100 + u64::from(o));
        }
        c.record_left(5, 999);
        assert_eq!(c.left.len(), MAX_LEFT);
        assert_eq!(c.left_at(5), Some(999));
        assert_eq!(c.left_at(0), None, "the oldest forgotten");
        assert_eq!(c.left.last(), Some(&(5, 999)));
    }

    #[test]
    fn partitions_map_to_groups_and_back() {
        assert_eq!(partition_group(group_partition(0)), Some(0));
        assert_eq!(partition_group(group_partition(77)), Some(77));
        assert_eq!(partition_group(crate::layout::DATA_PARTITION), None);
        assert_eq!(
            partition_group(GROUP_PARTITION_BASE + u64::from(MAX_GROUPS)),
            None
        );
    }

    #[test]
    fn staging_partitions_are_apart_and_reached_with_the_groups_capability() {
        for g in [0, 1, 77, MAX_GROUPS - 1] {
            for sender in [0, 3, 0xFFFF] {
                let s = staging_partition(g, sender);
                assert_eq!(staging_of(s), Some((g, sender)));
                assert_eq!(partition_group(s), None, "never taken for a group's own");
                assert_eq!(cap_partition(s), group_partition(g));
            }
            assert_ne!(staging_partition(g, 1), staging_partition(g, 2));
            assert_eq!(cap_partition(group_partition(g)), group_partition(g));
            assert_eq!(staging_group(group_partition(g)), None);
        }
        let past = STAGING_PARTITION_BASE + (u64::from(MAX_GROUPS) << 16);
        assert_eq!(staging_group(past), None);
        assert_eq!(
            cap_partition(crate::layout::DATA_PARTITION),
            crate::layout::DATA_PARTITION
        );
    }

    #[test]
    fn table_set_raises_epochs_and_keeps_order() {
        let mut t = ChainTable::default();
        t.set(5, vec![5, 1], vec![]);
        t.set(2, vec![2, 5], vec![]);
        assert_eq!(t.epoch, 2);
        assert_eq!(t.chains.iter().map(|c| c.0).collect::<Vec<_>>(), vec![2, 5]);
        t.set(5, vec![1], vec![]);
        assert_eq!(t.chain(5).unwrap().epoch, 3);
        assert_eq!(t.chain(5).unwrap().members, vec![1]);
        assert!(t.chain(9).is_none());
    }
}
