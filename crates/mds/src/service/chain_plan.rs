//! What the replica chains should become (pure, so tested on its own):
//! chains made, shrunk and grown from what the MDS knows of the OSDs, and
//! who left which chain when. The MDS applies it in `chains.rs`.

use std::collections::HashSet;

use proto::chain::ChainTable;
use proto::placement::OsdMap;

/// What the MDS knows of the OSDs, for [`plan_chains`].
#[derive(Debug, Default, Clone)]
pub struct Seen {
    /// Reporting now: new members come from them.
    pub up: HashSet<u32>,
    /// Whose lease may still run (`up`, and after an MDS restart the OSDs
    /// not heard from yet for a lease): members leave only when not alive.
    pub alive: HashSet<u32>,
    /// Heard from within the last heartbeat or so.
    pub heard: HashSet<u32>,
    /// Full (`proto::space::FULL`): never picked as a joining member.
    pub full: HashSet<u32>,
}

#[cfg(test)]
impl Seen {
    /// Every OSD of `osds` up, alive and heard, none full (tests).
    pub fn all(osds: &HashSet<u32>) -> Seen {
        Seen {
            up: osds.clone(),
            alive: osds.clone(),
            heard: osds.clone(),
            full: HashSet::new(),
        }
    }
}

/// What the chains should become, given the map and the OSDs up: `None`
/// when nothing changes. Pure, so it is tested on its own.
///
/// - An OSD id without a chain gets one once that OSD is up: itself first,
///   then the others in its placement order (distinct racks, then hosts, first), all
///   full members (a new group holds no object yet).
/// - Members that are down leave (the next one becomes head), but only
///   while a member that stays is `heard` from now: otherwise the group
///   waits for one to come back, its chain unchanged.
/// - A chain with fewer members than copies asked for gets one joining
///   member: the first OSD in its placement order that is up, in, not
///   full and not in the chain, in a rack, else on a host, the chain does
///   not use if there is one.
/// - A whole, healthy chain that placement would now put elsewhere (an
///   OSD was added or came back in) gets the OSD placement prefers as a
///   joiner; once it is filled, a member placement no longer names leaves.
///
pub fn plan_chains(t: &ChainTable, map: &OsdMap, seen: &Seen) -> Option<ChainTable> {
    let (up, alive, heard) = (&seen.up, &seen.alive, &seen.heard);
    let r = usize::from(t.replicas.max(1));
    let mut next = t.clone();
    let mut changed = false;
    let is_in = |o: u32| map.osd(o).is_some_and(|e| !e.out);
    let host = |o: u32| map.osd(o).map(|e| e.host.clone()).unwrap_or_default();
    let candidates = |g: u32, taken: &[u32]| -> Option<u32> {
        let ranked: Vec<u32> = map
            .ranking(u64::from(g))
            .into_iter()
            .map(|e| e.id)
            .filter(|o| up.contains(o) && is_in(*o) && !taken.contains(o) && !seen.full.contains(o))
            .collect();
        let hosts: Vec<String> = taken.iter().map(|o| host(*o)).collect();
        let used: Vec<&str> = hosts.iter().map(String::as_str).collect();
        let ranked_hosts: Vec<String> = ranked.iter().map(|o| host(*o)).collect();
        let free = ranked_hosts
            .iter()
            .enumerate()
            .map(|(i, h)| (i, h.as_str()));
        proto::placement::pick_spread(free, &used).map(|i| ranked[i])
    };
    // Where placement puts group `g` now: its own OSD first when up and
    // in, then the others in its placement order (distinct hosts first).
    let desired = |g: u32| -> Vec<u32> {
        let mut want: Vec<u32> = Vec::new();
        if up.contains(&g) && is_in(g) {
            want.push(g);
        }
        while want.len() < r {
            let Some(o) = candidates(g, &want) else {
                break;
            };
            want.push(o);
        }
        want
    };
    for e in &map.osds {
        let g = e.id;
        if next.chain(g).is_some() {
            continue;
        }
        // Made once its own OSD is up, which heads it.
        if !(up.contains(&g) && is_in(g)) {
            continue;
        }
        let members = desired(g);
        if !members.is_empty() {
            next.set(g, members, Vec::new());
            changed = true;
        }
    }
    let groups: Vec<u32> = next.chains.iter().map(|(g, _)| *g).collect();
    for g in groups {
        let Some(c) = next.chain(g).cloned() else {
            continue;
        };
        let living: Vec<u32> = c
            .members
            .iter()
            .copied()
            .filter(|m| alive.contains(m))
            .collect();
        // Only while a member that stays is heard from now: when every
        // member went down together, their leases lapse one by one, and
        // the last to lapse is no better a survivor than the others.
        let mut members = if living.iter().any(|m| heard.contains(m)) {
            living
        } else {
            c.members.clone()
        };
        let mut joining: Vec<u32> = c
            .joining
            .iter()
            .copied()
            .filter(|m| alive.contains(m) && is_in(*m))
            .collect();
        // Members on OSDs marked out leave once enough others hold every
        // object; a head stays here: moving a live head needs it fenced
        // first, which the MDS does by not renewing its lease
        // (`Mds::drain_refusal`), and it then leaves as a down head.
        let kept_in = members.iter().filter(|m| is_in(**m)).count();
        if kept_in >= r {
            let head = members[0];
            members.retain(|m| *m == head || is_in(*m));
        }
        let taken: Vec<u32> = members.iter().chain(joining.iter()).copied().collect();
        let counted = taken.iter().filter(|m| is_in(**m)).count();
        if members.iter().any(|m| up.contains(m))
            && counted < r
            && joining.is_empty()
            && let Some(o) = candidates(g, &taken)
        {
            joining.push(o);
        }
        // Backfill: a whole, healthy chain moves towards where placement
        // now puts the group (an OSD was added or came back in). The OSD
        // placement prefers joins first; once it is filled, a member
        // placement no longer names (never the head) leaves.
        if joining.is_empty()
            && members.len() >= r
            && members.iter().all(|m| up.contains(m) && is_in(*m))
        {
            let want = desired(g);
            if members.len() > r {
                let head = members[0];
                if let Some(i) = members
                    .iter()
                    .rposition(|m| *m != head && !want.contains(m))
                {
                    members.remove(i);
                }
            } else if let Some(o) = want.iter().copied().find(|o| !members.contains(o)) {
                joining.push(o);
            }
        }
        if members != c.members || joining != c.joining {
            next.set(g, members, joining);
            changed = true;
        }
    }
    changed.then_some(next)
}

/// Records in `next` who left which chain since `before`, and when: a
/// member that joins again is sent only what changed since about then.
/// "When" is when it was last heard from (`last_heard_ms`; a member that
/// went down long ago did not get the changes since), and a member not
/// heard from since this MDS started gets no record (it is filled whole).
/// Only full members: a joining member that leaves never held everything,
/// so it keeps the departure it had (or none, and is filled whole).
pub fn record_departures(
    before: &ChainTable,
    next: &mut ChainTable,
    last_heard_ms: &std::collections::HashMap<u32, u64>,
) {
    for (g, c) in &mut next.chains {
        if let Some(b) = before.chain(*g) {
            let gone: Vec<u32> = b.members.iter().copied().filter(|o| !c.holds(*o)).collect();
            for o in gone {
                if let Some(at) = last_heard_ms.get(&o) {
                    c.record_left(o, *at);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::placement::{OsdEntry, WEIGHT_ONE};

    fn map(n: u32) -> OsdMap {
        OsdMap {
            epoch: 1,
            version: proto::placement::PLACEMENT_VERSION,
            osds: (1..=n)
                .map(|id| OsdEntry {
                    id,
                    addr: format!("127.0.0.1:{}", 7000 + id),
                    weight: WEIGHT_ONE,
                    host: format!("h{id}"),
                    out: false,
                })
                .collect(),
        }
    }

    fn table(r: u8) -> ChainTable {
        ChainTable {
            epoch: 0,
            replicas: r,
            catch_up_margin_ms: 0,
            fill_mib_per_sec: 0,
            chains: Vec::new(),
        }
    }

    #[test]
    fn chains_spread_over_racks_first() {
        // Racks: r1 holds OSDs 1–4, r2 holds 5 and 6, r3 holds 7.
        let mut m = map(7);
        for e in &mut m.osds {
            let rack = match e.id {
                1..=4 => "r1",
                5 | 6 => "r2",
                _ => "r3",
            };
            e.host = format!("{rack}/h{}", e.id);
        }
        let up: HashSet<u32> = (1..=7).collect();
        let t = plan_chains(&table(3), &m, &Seen::all(&up)).unwrap();
        for (g, c) in &t.chains {
            let racks: HashSet<&str> = c
                .members
                .iter()
                .map(|o| proto::placement::rack_of(&m.osd(*o).unwrap().host))
                .collect();
            assert_eq!(racks.len(), 3, "group {g}: {:?}", c.members);
        }
    }

    #[test]
    fn every_osd_gets_a_chain_headed_by_itself_with_distinct_members() {
        let m = map(4);
        let up: HashSet<u32> = (1..=4).collect();
        let t = plan_chains(&table(3), &m, &Seen::all(&up)).unwrap();
        assert_eq!(t.chains.len(), 4);
        for (g, c) in &t.chains {
            assert_eq!(c.head(), Some(*g));
            assert_eq!(c.members.len(), 3);
            assert!(c.validate().is_ok());
            assert!(c.joining.is_empty());
        }
        assert!(
            plan_chains(&t, &m, &Seen::all(&up)).is_none(),
            "stable once made"
        );
    }

    #[test]
    fn a_down_head_is_replaced_by_the_next_member_and_a_joiner_is_added() {
        let m = map(4);
        let mut up: HashSet<u32> = (1..=4).collect();
        let t = plan_chains(&table(2), &m, &Seen::all(&up)).unwrap();
        let before = t.chain(1).unwrap().clone();
        up.remove(&1);
        let t2 = plan_chains(&t, &m, &Seen::all(&up)).unwrap();
        let c = t2.chain(1).unwrap();
        assert_eq!(c.members, before.members[1..].to_vec());
        assert_eq!(c.joining.len(), 1);
        assert!(!c.holds(1));
        assert!(c.epoch > before.epoch);
        // Every member down: the group waits, its chain unchanged.
        let none: HashSet<u32> = HashSet::new();
        let t3 = plan_chains(&t2, &m, &Seen::all(&none));
        let c3 = t3.as_ref().map_or(c, |t| t.chain(1).unwrap());
        assert_eq!(c3.members, c.members, "no member up: nobody promoted");
        // After an MDS restart, members not heard from yet are kept.
        let seen = Seen {
            alive: (1..=4).collect(),
            ..Seen::default()
        };
        let t4 = plan_chains(&t2, &m, &seen);
        assert!(t4.is_none_or(|t| t.chain(1).unwrap().members == c.members));
    }

    #[test]
    fn only_full_members_leave_a_departure_a_joiner_keeps_its_old_one() {
        let mut before = table(3);
        before.set(1, vec![1, 2], vec![3]);
        before.chain_mut(1).unwrap().record_left(3, 100);
        before.set(2, vec![2, 3, 1], vec![]);
        let mut next = before.clone();
        next.set(1, vec![1, 2], vec![]);
        next.set(2, vec![2, 1], vec![]);
        record_departures(&before, &mut next, &[(3, 5000)].into());
        assert_eq!(
            next.chain(1).unwrap().left_at(3),
            Some(100),
            "a joiner dropped mid-fill must not look caught up to now"
        );
        assert_eq!(
            next.chain(2).unwrap().left_at(3),
            Some(5000),
            "when last heard"
        );
        // Not heard from since this MDS started: no record, filled whole.
        let mut next = before.clone();
        next.set(2, vec![2, 1], vec![]);
        record_departures(&before, &mut next, &std::collections::HashMap::new());
        assert_eq!(next.chain(2).unwrap().left_at(3), None);
    }

    #[test]
    fn members_that_went_down_together_all_stay_while_none_is_heard() {
        let m = map(3);
        let all: HashSet<u32> = (1..=3).collect();
        let t = plan_chains(&table(3), &m, &Seen::all(&all)).unwrap();
        let before = t.chain(1).unwrap().members.clone();
        // Every OSD crashed at once; the first lease lapses while the
        // others' still run, but nobody is heard from any more.
        let mut alive = all.clone();
        alive.remove(&before[0]);
        let seen = Seen {
            up: alive.clone(),
            alive: alive.clone(),
            ..Seen::default()
        };
        let t2 = plan_chains(&t, &m, &seen);
        assert!(
            t2.is_none_or(|t| t.chain(1).unwrap().members == before),
            "a member left while nobody was heard from"
        );
        // Once a member that stays is heard from, the lapsed one leaves.
        let heard: HashSet<u32> = [before[2]].into();
        let seen = Seen {
            up: alive.clone(),
            alive: alive.clone(),
            heard,
            full: HashSet::new(),
        };
        let t3 = plan_chains(&t, &m, &seen).unwrap();
        assert_eq!(t3.chain(1).unwrap().members, before[1..].to_vec());
    }

    #[test]
    fn a_full_osd_is_never_picked_to_join() {
        let m = map(4);
        let all: HashSet<u32> = (1..=4).collect();
        let t = plan_chains(&table(2), &m, &Seen::all(&all)).unwrap();
        let before = t.chain(1).unwrap().clone();
        // The second member goes down; the OSD placement would pick next
        // is full, so another one joins.
        let gone = before.members[1];
        let mut seen = Seen::all(&all);
        for s in [&mut seen.up, &mut seen.alive, &mut seen.heard] {
            s.remove(&gone);
        }
        let want = plan_chains(&t, &m, &seen)
            .unwrap()
            .chain(1)
            .unwrap()
            .joining[0];
        seen.full.insert(want);
        let c = plan_chains(&t, &m, &seen).unwrap();
        let joiner = c.chain(1).unwrap().joining[0];
        assert_ne!(joiner, want, "a full OSD picked to join");
        assert_ne!(joiner, gone);
        // Every candidate full: nobody joins, the chain waits.
        seen.full = all.clone();
        let c = plan_chains(&t, &m, &seen).unwrap();
        assert!(c.chain(1).unwrap().joining.is_empty());
    }

    #[test]
    fn a_member_marked_out_leaves_once_another_is_filled() {
        let mut m = map(4);
        let up: HashSet<u32> = (1..=4).collect();
        let t = plan_chains(&table(2), &m, &Seen::all(&up)).unwrap();
        let c = t.chain(1).unwrap().clone();
        let second = c.members[1];
        m.osds.iter_mut().find(|e| e.id == second).unwrap().out = true;
        let t2 = plan_chains(&t, &m, &Seen::all(&up)).unwrap();
        let c2 = t2.chain(1).unwrap();
        assert_eq!(c2.members, c.members, "kept until another is filled");
        assert_eq!(c2.joining.len(), 1);
        assert_ne!(c2.joining[0], second);
        let mut filled = t2.clone();
        let j = c2.joining[0];
        filled.set(1, vec![1, second, j], vec![]);
        let t3 = plan_chains(&filled, &m, &Seen::all(&up)).unwrap();
        assert_eq!(t3.chain(1).unwrap().members, vec![1, j]);
    }

    #[test]
    fn an_added_osd_gets_its_share_and_the_surplus_member_leaves_after_the_fill() {
        let up3: HashSet<u32> = (1..=3).collect();
        let mut t = plan_chains(&table(2), &map(3), &Seen::all(&up3)).unwrap();
        let (m4, up4): (OsdMap, HashSet<u32>) = (map(4), (1..=4).collect());
        let mut moved = 0;
        for _ in 0..10 {
            let Some(n) = plan_chains(&t, &m4, &Seen::all(&up4)) else {
                break;
            };
            // Every joiner is filled at once.
            let mut f = n.clone();
            for (g, c) in &n.chains {
                if !c.joining.is_empty() {
                    let mut m = c.members.clone();
                    m.extend(&c.joining);
                    f.set(*g, m, vec![]);
                    moved += 1;
                }
            }
            t = f;
        }
        assert!(plan_chains(&t, &m4, &Seen::all(&up4)).is_none(), "settles");
        assert!(moved > 0, "no existing group moved to the new OSD");
        assert_eq!(t.chain(4).unwrap().head(), Some(4));
        for (g, c) in &t.chains {
            assert_eq!(c.members.len(), 2, "group {g}: {c:?}");
            if *g <= 3 {
                assert_eq!(c.head(), Some(*g), "a live head stays");
            }
        }
        assert!(
            t.chains
                .iter()
                .filter(|(g, _)| *g <= 3)
                .any(|(_, c)| c.holds(4))
        );
    }

    #[test]
    fn a_short_chain_waits_for_its_filling_member() {
        let m = map(3);
        let mut up: HashSet<u32> = [1].into();
        let t = plan_chains(&table(2), &m, &Seen::all(&up)).unwrap();
        assert_eq!(t.chain(1).unwrap().members, vec![1]);
        assert!(t.chain(2).is_none(), "a group waits for its own OSD");
        up.extend([2, 3]);
        let t2 = plan_chains(&t, &m, &Seen::all(&up)).unwrap();
        let c = t2.chain(1).unwrap();
        assert_eq!(c.members, vec![1]);
        assert_eq!(c.joining.len(), 1, "one joiner at a time");
        // New groups for 2 and 3 start full.
        assert_eq!(t2.chain(2).unwrap().members.len(), 2);
        assert!(
            plan_chains(&t2, &m, &Seen::all(&up)).is_none(),
            "nothing more until it is filled"
        );
    }
}
