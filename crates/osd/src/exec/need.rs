//! What each command needs and touches: the rights (and object range) its
//! capability must grant, the one existing object it acts on, and the
//! object it may create. The table every check in [`super`] reads.

use proto::cap::{Need, rights};
use proto::msg::{Command, Request};

use super::ROOT;

/// The capability `req` (running `cmd`) must present.
pub(super) fn need(cmd: &Command, req: &Request) -> Need {
    let one = |pid: u64, oid: u64, r: u32| Need {
        partition: pid,
        oid_lo: oid,
        oid_hi: oid,
        rights: r,
    };
    let extra = if req.set.is_empty() {
        0
    } else {
        rights::SET_ATTR
    } | if req.get.is_empty() {
        0
    } else {
        rights::GET_ATTR
    };
    let mut n = match *cmd {
        // An effect passed down a chain needs what the effect needs.
        Command::Forward(ref f) => return need(&f.op, req),
        Command::ScrubGroup { group, .. } => one(
            proto::chain::group_partition(group),
            0,
            rights::READ | rights::WRITE,
        ),
        Command::Format { .. } => one(ROOT, 0, rights::FORMAT),
        Command::Statfs => one(ROOT, 0, rights::LIST),
        Command::CreatePartition { pid } => one(ROOT, pid, rights::CREATE | rights::PARTITION),
        Command::RemovePartition { pid } => one(ROOT, pid, rights::REMOVE | rights::PARTITION),
        // Many objects at once, with no per-object revocation check: a
        // partition-wide right (the MDS's), never a file's capability.
        Command::RemoveObjects { pid, ref oids } => Need {
            partition: pid,
            oid_lo: oids.iter().copied().min().unwrap_or(0),
            oid_hi: oids.iter().copied().max().unwrap_or(0),
            rights: rights::REMOVE | rights::PARTITION,
        },
        Command::Create {
            pid,
            oid: Some(o),
            count,
        } => Need {
            partition: pid,
            oid_lo: o,
            oid_hi: o.saturating_add(u64::from(count).saturating_sub(1)),
            rights: rights::CREATE,
        },
        Command::Create { pid, oid: None, .. } => Need {
            partition: pid,
            oid_lo: 0,
            oid_hi: u64::MAX,
            rights: rights::CREATE,
        },
        Command::Remove { pid, oid } => one(pid, oid, rights::REMOVE),
        Command::Read { pid, oid, .. } => one(pid, oid, rights::READ),
        Command::Write { pid, oid, .. } => one(pid, oid, rights::WRITE),
        Command::Append { pid, oid } => one(pid, oid, rights::APPEND),
        Command::CreateAndWrite { pid, oid } => one(pid, oid, rights::CREATE | rights::WRITE),
        Command::Flush { pid } => Need {
            partition: pid,
            oid_lo: req.cap.as_ref().map_or(0, |c| c.oid_lo),
            oid_hi: req.cap.as_ref().map_or(0, |c| c.oid_lo),
            rights: rights::WRITE,
        },
        Command::List {
            pid,
            lo,
            hi,
            ref attrs,
            ..
        } => Need {
            partition: pid,
            oid_lo: lo,
            oid_hi: hi,
            // Attributes per entry are reads of those objects' attributes.
            rights: rights::LIST
                | if attrs.is_empty() {
                    0
                } else {
                    rights::GET_ATTR
                },
        },
        // A deep digest reads a whole object for 24 bytes: a scrub's tool
        // (REVOKE: the MDS's and members' capabilities), not a reader's.
        Command::Digest { pid, oid, deep } => one(
            pid,
            oid,
            rights::READ | if deep { rights::REVOKE } else { 0 },
        ),
        Command::GetAttributes { pid, oid } | Command::GetPage { pid, oid, .. } => {
            one(pid, oid, rights::GET_ATTR)
        }
        Command::SetAttributes { pid, oid } => one(pid, oid, rights::SET_ATTR),
        Command::Cas { pid, oid, .. } | Command::FetchAdd { pid, oid, .. } => {
            one(pid, oid, rights::SET_ATTR | rights::GET_ATTR)
        }
        Command::SetVersion { pid, oid, .. } => one(pid, oid, rights::REVOKE),
        Command::Truncate { pid, oid, .. } | Command::Punch { pid, oid, .. } => {
            one(pid, oid, rights::WRITE)
        }
        Command::DataRanges { pid, oid } => one(pid, oid, rights::READ),
        Command::Reserve { pid, oid, .. } | Command::Copy { pid, oid, .. } => {
            one(pid, oid, rights::WRITE | rights::CREATE)
        }
        Command::Install { pid, oid } => {
            one(pid, oid, rights::WRITE | rights::CREATE | rights::REMOVE)
        }
    };
    n.rights |= extra;
    // A group's staging partition is reached with the group's capability.
    n.partition = proto::chain::cap_partition(n.partition);
    n
}

/// The single existing object a command acts on (for the revocation check
/// and the attribute lists).
pub(super) fn target(cmd: &Command) -> Option<(u64, u64)> {
    match *cmd {
        Command::Remove { pid, oid }
        | Command::Read { pid, oid, .. }
        | Command::Write { pid, oid, .. }
        | Command::Append { pid, oid }
        | Command::GetAttributes { pid, oid }
        | Command::GetPage { pid, oid, .. }
        | Command::Digest { pid, oid, .. }
        | Command::SetAttributes { pid, oid }
        | Command::Cas { pid, oid, .. }
        | Command::FetchAdd { pid, oid, .. }
        | Command::Truncate { pid, oid, .. }
        | Command::Punch { pid, oid, .. }
        | Command::DataRanges { pid, oid } => Some((pid, oid)),
        _ => None,
    }
}

/// The object a command may create, locked like a target but checked for
/// revocation only when it exists.
pub(super) fn created(cmd: &Command) -> Option<(u64, u64)> {
    match *cmd {
        Command::Reserve { pid, oid, .. } | Command::Copy { pid, oid, .. } => Some((pid, oid)),
        _ => None,
    }
}
