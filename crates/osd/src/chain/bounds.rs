//! What a replica chain's head takes, and what it can pass down: a change
//! sent to a head must fit, as a FORWARD, the next member's frame limit,
//! or applying it at the head would cost that member its place when it
//! refuses the forward.

use proto::chain::partition_group;
use proto::msg::{AttrKey, Command, Request};
use proto::{ErrorCode, WireError};

/// Most header bytes a change sent to a head may have: half the frame
/// limit, so its FORWARD (the change, the set list, the answer and the
/// attributes kept for retries) always fits a member's limit.
pub const FORWARDABLE_HEADER: usize = (1 << 20) / 2;
/// Most bytes of answered attributes a FORWARD carries for retries.
pub const FORWARDED_ATTRS: usize = (1 << 20) / 4;

/// Refuses, before it is applied anywhere, a change too large to pass
/// down the chain: applied at the head and refused by the next member, it
/// would cost that member its place (see `Chains::pass_down`).
pub(super) fn check_forwardable(req: &Request) -> Result<(), WireError> {
    // A FORWARD carries the head's answer too: a listing's can pass the
    // member's frame limit, so a listing sets nothing on the way.
    if !req.set.is_empty()
        && matches!(
            req.cmd,
            Command::GetPage { .. }
                | Command::GetAttributes { .. }
                | Command::List { .. }
                | Command::DataRanges { .. }
        )
    {
        return Err(WireError::bad(
            "set",
            format!(
                "{} with a set list cannot be passed down a replica chain (its answer may not \
                 fit a FORWARD): set the attributes in a request of their own",
                req.cmd.name()
            ),
        ));
    }
    let len = proto::msg::encode(req).len();
    if len > FORWARDABLE_HEADER {
        return Err(WireError::bad(
            "header",
            format!(
                "a change of {len} header bytes cannot be passed down a replica chain \
                 (at most {FORWARDABLE_HEADER}); set fewer or smaller attributes at once"
            ),
        ));
    }
    Ok(())
}

/// The answered attributes a FORWARD keeps for retries: all of them when
/// they fit [`FORWARDED_ATTRS`], else none (a retry after a failover then
/// answers without them).
pub(super) fn forwarded_attrs(attrs: &[(AttrKey, Vec<u8>)]) -> Vec<(AttrKey, Vec<u8>)> {
    let len: usize = attrs.iter().map(|(_, v)| v.len() + 16).sum();
    if len <= FORWARDED_ATTRS {
        attrs.to_vec()
    } else {
        Vec::new()
    }
}

/// The group a partition is the partition or the staging partition of.
pub(super) fn group_of(pid: u64) -> Option<u32> {
    partition_group(pid).or_else(|| proto::chain::staging_group(pid))
}

pub(super) fn changes(req: &Request) -> bool {
    !req.set.is_empty()
        || !matches!(
            req.cmd,
            Command::Read { .. }
                | Command::GetAttributes { .. }
                | Command::GetPage { .. }
                | Command::Digest { .. }
                | Command::DataRanges { .. }
                | Command::List { .. }
                | Command::Flush { .. }
                | Command::Statfs
        )
}

/// Refuses a change to a group whose chain holds fewer full copies than
/// a change needs: EIO when no member is being filled, Busy (retry) while
/// one is.
pub(super) fn check_floor(
    req: &Request,
    (group, chain): (u32, &proto::chain::Chain),
    table: &proto::chain::ChainTable,
) -> Result<(), WireError> {
    let min = super::min_copies(table);
    if !changes(req) || chain.members.len() >= min {
        return Ok(());
    }
    let why = format!(
        "group {group} has {} full copies, fewer than the {min} a change needs \
         (replicas {} less one)",
        chain.members.len(),
        table.replicas
    );
    Err(if chain.joining.is_empty() {
        WireError::new(
            ErrorCode::Io,
            format!("{why}: refused rather than kept on too few"),
        )
    } else {
        WireError::new(
            ErrorCode::Busy,
            format!("{why}; a new member is being filled: retry"),
        )
    })
}

/// What a head refuses before it looks at its chain, and the group of a
/// request it takes: a partition that is not a group's (a staging one
/// takes only the member before), INSTALL, an unnamed create, a change
/// too large to pass down, and anything while it is `ready` to head no
/// group yet.
pub(super) fn admissible_at_head(req: &Request, ready: bool, me: u32) -> Result<u32, WireError> {
    let Some(group) = req.cmd.partition().and_then(partition_group) else {
        return Err(WireError::bad(
            "partition",
            "not a replica group's (a staging partition takes only the member before)",
        ));
    };
    if let Command::Install { .. } = req.cmd {
        return Err(WireError::bad(
            "command",
            "INSTALL comes only from the member before, or the head",
        ));
    }
    if let Command::Create { oid: None, .. } = req.cmd {
        return Err(WireError::bad(
            "oid",
            "a replica group's partition takes only creates that name their objects",
        ));
    }
    if !ready {
        return Err(WireError::new(
            ErrorCode::NotReady,
            format!("OSD {me} is starting: not serving as a head yet"),
        ));
    }
    if changes(req) {
        check_forwardable(req)?;
        super::stamp::refuse_client_stamp(req)?;
    }
    Ok(group)
}
