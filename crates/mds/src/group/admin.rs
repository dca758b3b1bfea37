//! Who is in the group, changed on the leader. `tessera mds join` asks it
//! to add a member: the leader takes a snapshot and drops the log before
//! it (a new member starts with an empty KV, so it must begin from a
//! snapshot, never from the log's first entries), then adds the member as
//! a learner, which counts in no majority. [`promote`] makes a learner a
//! voter once it is within [`CAUGHT_UP`] entries of the leader, so adding
//! a member never makes the group wait for one that is far behind.
//! `tessera mds remove` takes a member out (voter or learner); the group
//! keeps at least one voter. Each change is a raft membership change
//! (openraft's joint consensus), so it is replicated like any batch and
//! survives a failover in the middle.

use std::collections::BTreeSet;
use std::time::Duration;

use openraft::{ChangeMembers, Raft, ServerState};
use proto::mds::{Errno, MdsError, err};

use crate::raft::{Member, Tc};
use crate::service::{GroupAdminFn, GroupChange};

/// A learner this close to the leader's last entry is made a voter.
pub const CAUGHT_UP: u64 = 64;
/// How long the leader waits for its snapshot, then for its purge,
/// before a join (together within the client's 30 s reply timeout).
const SNAPSHOT_WAIT: Duration = Duration::from_secs(12);
/// A member that answered the leader this recently counts as up for a
/// change of voters (heartbeats go every 100 ms).
const HEARD_RECENTLY: Duration = Duration::from_millis(500);
/// A change of voters left half done this long (its leader gone) is
/// finished by the next.
const UNFINISHED_AFTER: Duration = Duration::from_secs(2);
/// Longest address accepted for a member.
const ADDR_MAX: usize = 255;

/// The leader's [`GroupAdminFn`] over `raft`; `heard` says when each
/// other member last answered it.
pub fn admin(raft: Raft<Tc>, heard: super::peer::Heard) -> GroupAdminFn {
    Box::new(move |c| {
        let (raft, heard) = (raft.clone(), heard.clone());
        Box::pin(async move { change(&raft, &heard, c).await })
    })
}

/// Refuses a change of voters from `old` to `new` that a majority of
/// either cannot take now (raft's joint consensus needs both): the group
/// would stop answering until the members that are down came back.
fn check_majorities(
    old: &BTreeSet<u64>,
    new: &BTreeSet<u64>,
    up: &BTreeSet<u64>,
) -> Result<(), MdsError> {
    for (which, set) in [("now", old), ("after the change", new)] {
        let live = set.intersection(up).count();
        if live < set.len() / 2 + 1 {
            let down: Vec<u64> = set.difference(up).copied().collect();
            return Err(err(
                Errno::Again,
                format!(
                    "the voters {which} ({set:?}) would have {live} of {} up (members {down:?} \
                     are down) and a change needs a majority of both the old and the new \
                     voters: bring them back, or remove the ones that are down first",
                    set.len()
                ),
            ));
        }
    }
    Ok(())
}

/// Whether `a` reads as `host:port` (no spaces, commas or control
/// characters: the address ends up in lists and files).
fn check_addr(what: &str, a: &str) -> Result<(), MdsError> {
    let well_formed = !a.is_empty()
        && a.len() <= ADDR_MAX
        && !a
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == ',' || c == '"')
        && a.rsplit_once(':').is_some_and(|(host, port)| {
            !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p != 0)
        });
    if well_formed {
        Ok(())
    } else {
        let shown: String = a.chars().take(64).collect();
        Err(err(
            Errno::Inval,
            format!("{what} {shown:?} is not host:port"),
        ))
    }
}

fn raft_err(what: &str, e: impl std::fmt::Display) -> MdsError {
    err(Errno::Again, format!("{what}: {e}"))
}

/// Carries out `c` on the leader's `raft`.
pub async fn change(
    raft: &Raft<Tc>,
    heard: &super::peer::Heard,
    c: GroupChange,
) -> Result<(), MdsError> {
    let (me, group, caught_up) = {
        let m = raft.metrics();
        let m = m.borrow();
        let last = m.last_log_index.unwrap_or(0);
        // A voter far behind (installing a snapshot, say) would hold a
        // change of voters up as surely as one that is down.
        let group = m.membership_config.membership().clone();
        let caught_up: BTreeSet<u64> = group
            .nodes()
            .map(|(id, _)| *id)
            .filter(|id| crate::raft::matched(&m, *id).is_some_and(|i| i + CAUGHT_UP >= last))
            .collect();
        (m.id, group, caught_up)
    };
    if group.get_joint_config().len() > 1 {
        return Err(err(
            Errno::Again,
            "a change of members is still in progress: try again in a moment",
        ));
    }
    let up: BTreeSet<u64> = {
        let heard = heard.lock().unwrap_or_else(|e| e.into_inner());
        heard
            .iter()
            .filter(|(id, t)| t.elapsed() < HEARD_RECENTLY && caught_up.contains(id))
            .map(|(id, _)| *id)
            .chain([me])
            .collect()
    };
    match c {
        GroupChange::Add { id, addr, peer } => {
            if id == 0 || id == u64::MAX {
                return Err(err(Errno::Inval, format!("member id {id} is reserved")));
            }
            check_addr("client address", &addr)?;
            check_addr("peer address", &peer)?;
            if group.get_node(&id).is_some() {
                return Err(err(
                    Errno::Exist,
                    format!("member {id} is already in the group"),
                ));
            }
            if addr == peer {
                return Err(err(
                    Errno::Inval,
                    "the client and peer addresses must differ",
                ));
            }
            let taken = [&addr, &peer];
            if let Some((n, _)) = group
                .nodes()
                .find(|(_, m)| taken.contains(&&m.addr) || taken.contains(&&m.client))
            {
                return Err(err(
                    Errno::Exist,
                    format!("member {n} already uses {addr} or {peer}"),
                ));
            }
            start_from_a_snapshot(raft).await?;
            raft.add_learner(
                id,
                Member {
                    addr: peer,
                    client: addr,
                },
                false,
            )
            .await
            .map_err(|e| raft_err("adding the learner", e))?;
            tracing::info!(member = id, "added as a learner: it votes once caught up");
            Ok(())
        }
        GroupChange::Remove { id } => {
            if group.get_node(&id).is_none() {
                return Err(err(
                    Errno::NoEnt,
                    format!("member {id} is not in the group"),
                ));
            }
            let voters: BTreeSet<u64> = group.voter_ids().collect();
            let change = if voters.contains(&id) {
                if voters.len() == 1 {
                    return Err(err(
                        Errno::Inval,
                        format!("member {id} is the group's only voter"),
                    ));
                }
                let mut after = voters.clone();
                after.remove(&id);
                check_majorities(&voters, &after, &up)?;
                ChangeMembers::RemoveVoters(BTreeSet::from([id]))
            } else {
                ChangeMembers::RemoveNodes(BTreeSet::from([id]))
            };
            raft.change_membership(change, false)
                .await
                .map_err(|e| raft_err("removing the member", e))?;
            tracing::info!(member = id, "removed from the group");
            Ok(())
        }
    }
}

/// Takes a snapshot and drops the log up to it, so a member added next
/// is sent the snapshot first.
async fn start_from_a_snapshot(raft: &Raft<Tc>) -> Result<(), MdsError> {
    let Some(applied) = raft.metrics().borrow().last_applied.map(|l| l.index) else {
        return Ok(());
    };
    raft.trigger()
        .snapshot()
        .await
        .map_err(|e| raft_err("snapshot", e))?;
    let m = raft
        .wait(Some(SNAPSHOT_WAIT))
        .metrics(
            |m| m.snapshot.is_some_and(|s| s.index >= applied),
            "snapshot",
        )
        .await
        .map_err(|e| raft_err("waiting for the snapshot", e))?;
    let upto = m.snapshot.map_or(applied, |s| s.index);
    raft.trigger()
        .purge_log(upto)
        .await
        .map_err(|e| raft_err("purge", e))?;
    raft.wait(Some(SNAPSHOT_WAIT))
        .metrics(|m| m.purged.is_some_and(|p| p.index >= upto), "purge")
        .await
        .map_err(|e| raft_err("waiting for the log to be purged", e))?;
    Ok(())
}

/// While this member leads: makes every learner within [`CAUGHT_UP`]
/// entries of the leader a voter. Ends when raft stops.
pub async fn promote(raft: Raft<Tc>) {
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    // The half-done change seen, and since when.
    let mut joint_seen: Option<(Option<openraft::LogId<u64>>, std::time::Instant)> = None;
    // Whether this leader has purged its log for a learner yet.
    let mut purged_for_learners = false;
    loop {
        tick.tick().await;
        let m = raft.metrics().borrow().clone();
        if m.running_state.is_err() {
            return;
        }
        if m.state != ServerState::Leader {
            continue;
        }
        let last = m.last_log_index.unwrap_or(0);
        let group = m.membership_config.membership();
        // A change a former leader began and did not finish (the group
        // is left needing a majority of two sets of voters): finish it.
        let joint = group.get_joint_config();
        if joint.len() <= 1 {
            joint_seen = None;
        }
        let at = *m.membership_config.log_id();
        let since = match joint_seen {
            Some((seen, t)) if seen == at => t,
            _ if joint.len() > 1 => {
                joint_seen = Some((at, std::time::Instant::now()));
                continue;
            }
            _ => std::time::Instant::now(),
        };
        if joint.len() > 1 {
            if since.elapsed() < UNFINISHED_AFTER {
                continue;
            }
            let target = joint[joint.len() - 1].clone();
            match raft
                .change_membership(ChangeMembers::ReplaceAllVoters(target.clone()), false)
                .await
            {
                Ok(_) => tracing::info!(voters = ?target, "finished a change of members"),
                Err(e) => tracing::info!(error = %e, "could not finish a change of members yet"),
            }
            continue;
        }
        // A learner this leader has no progress for, when its log still
        // reaches back to the start (a leader that took over after a
        // join, before the member started): snapshot and purge, so the
        // learner is sent the snapshot, never entries it cannot apply.
        let fresh_learner = group
            .learner_ids()
            .any(|id| crate::raft::matched(&m, id).is_none());
        if fresh_learner && m.purged.is_none() && !purged_for_learners {
            purged_for_learners = true;
            if let Err(e) = start_from_a_snapshot(&raft).await {
                tracing::warn!(error = %e, "could not purge the log for a learner");
            }
            continue;
        }
        let ready: BTreeSet<u64> = group
            .learner_ids()
            .filter(|id| crate::raft::matched(&m, *id).is_some_and(|i| i + CAUGHT_UP >= last))
            .collect();
        if ready.is_empty() {
            continue;
        }
        match raft
            .change_membership(ChangeMembers::AddVoterIds(ready.clone()), false)
            .await
        {
            Ok(_) => tracing::info!(members = ?ready, "caught up: now voting"),
            Err(e) => tracing::info!(error = %e, members = ?ready, "not made voters yet"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::check_addr;

    #[test]
    fn addresses_must_be_host_and_port() {
        for good in ["127.0.0.1:7400", "mds-4.example:1", "[::1]:65535"] {
            assert!(check_addr("a", good).is_ok(), "{good}");
        }
        let long = format!("{}:7400", "h".repeat(300));
        for bad in [
            "",
            "127.0.0.1",
            ":7400",
            "h:0",
            "h:65536",
            "h:port",
            "a b:1",
            "a,b:1",
            "a\"b:1",
            "h:1\n",
            &long,
        ] {
            let e = check_addr("peer address", bad).unwrap_err();
            assert!(e.message.contains("is not host:port"), "{bad:?}: {e}");
            assert!(
                e.message.len() < 120,
                "the refusal echoes at most 64 characters"
            );
        }
    }
}
