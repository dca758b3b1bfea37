//! Full disks in a chain. A head refuses the changes that take space —
//! new objects and data — before anything is made when its own store is
//! full, and also while a member after it has answered "no space" lately:
//! such a change would be made at the head and then wait, unpassable,
//! for room on the member (the thrasher's fill saw a write wait past its
//! client's 30 s). A change that meets a full member anyway answers
//! ENOSPC after [`FULL_WAIT`] and stays at the head until it can be
//! passed down (or its object is removed).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use proto::msg::Command;
use proto::{ErrorCode, WireError};

use crate::exec::Ctx;

/// How long a change keeps offering an effect to a member that answers
/// "no space" before it answers ENOSPC.
pub(super) const FULL_WAIT: Duration = Duration::from_secs(2);
/// How long a member's "no space" keeps the head refusing new data.
const FULL_MEMORY: Duration = Duration::from_secs(10);

/// The members that answered "no space" lately, and when.
#[derive(Default)]
pub(super) struct FullMembers(Mutex<HashMap<u32, Instant>>);

impl FullMembers {
    /// Member `osd` answered "no space".
    pub(super) fn noted(&self, osd: u32) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(osd, Instant::now());
    }

    /// Member `osd` took an effect.
    pub(super) fn cleared(&self, osd: u32) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&osd);
    }

    /// ENOSPC, before anything is made, for a change taking space in a
    /// group whose chain `members` holds one that answered "no space" in
    /// the last [`FULL_MEMORY`].
    pub(super) fn refuse(
        &self,
        group: u32,
        members: impl Iterator<Item = u32>,
    ) -> Result<(), WireError> {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        m.retain(|_, at| at.elapsed() < FULL_MEMORY);
        for osd in members {
            if m.contains_key(&osd) {
                return Err(WireError::new(
                    ErrorCode::NoSpace,
                    format!(
                        "group {group}: member OSD {osd} has no room; no new objects or data \
                         until room is made (deletes are served)"
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// Commands that make objects or write data. Attribute changes (the
/// directories' compare-and-swaps, counters) are small and stay served,
/// so names can still be removed on a full group.
pub(super) fn takes_space(cmd: &Command) -> bool {
    matches!(
        cmd,
        Command::Create { .. }
            | Command::CreateAndWrite { .. }
            | Command::CreatePartition { .. }
            | Command::Write { .. }
            | Command::Append { .. }
            | Command::Reserve { .. }
    )
}

/// ENOSPC when this OSD's store is as full as health calls "full"
/// ([`proto::space::FULL`]): a head refuses the changes that take space —
/// new objects and data — before anything is made, so the members, which
/// hold the same objects, keep room for what frees it (a delete is a
/// directory's compare-and-swap and a removal, and a store with no room
/// left cannot even journal those).
pub(super) fn refuse_when_full(ctx: &Ctx, group: u32) -> Result<(), WireError> {
    let (total, free) = ctx.store.get()?.space();
    let used = total.saturating_sub(free) as f64;
    if total > 0 && used >= proto::space::FULL * total as f64 {
        return Err(WireError::new(
            ErrorCode::NoSpace,
            format!(
                "group {group}: this head's store is {:.0} % full; no new objects or \
                 data until room is made (deletes are served)",
                used * 100.0 / total as f64
            ),
        ));
    }
    Ok(())
}

/// What a member says when a change found no room at OSD `full` (it or
/// one after it): the change is on neither it nor any member after it.
pub(super) fn no_room(group: u32, full: u32, why: &dyn std::fmt::Display) -> WireError {
    WireError::new(
        ErrorCode::NoSpace,
        format!("group {group}: {NO_ROOM_AT}{full} has no room (rolled back): {why}"),
    )
}

/// How [`no_room`] names the full member.
const NO_ROOM_AT: &str = "member OSD ";

/// The full member a [`no_room`] answer names (None: the answering OSD's
/// own store was full).
pub(super) fn full_osd(message: &str) -> Option<u32> {
    let rest = &message[message.find(NO_ROOM_AT)? + NO_ROOM_AT.len()..];
    rest.split(' ').next()?.parse().ok()
}

impl super::Chains {
    /// Puts back on this OSD the copy of `oid` that member `from` (its
    /// successor, which answered "no room" and so holds none of the
    /// change) has — or none, when `from` has none (the change made the
    /// object) — undoing a change the chain could not take. Built aside
    /// and installed; the caller holds the object's lock. On failure this
    /// OSD's copy is as it was.
    pub(super) async fn roll_back_to(
        &self,
        ctx: &Ctx,
        group: u32,
        oid: u64,
        from: u32,
    ) -> Result<(), WireError> {
        let view = self.view().await?;
        match self.repair_from(ctx, &view, group, from, oid).await {
            Ok(()) => {}
            Err(e) if e.code == ErrorCode::NoObject => {
                let pid = proto::chain::group_partition(group);
                match ctx.store.get()?.remove(pid, oid) {
                    Ok(()) | Err(store::StoreError::NoObject { .. }) => {}
                    Err(e) => return Err(crate::exec::map_err(e)),
                }
            }
            Err(e) => return Err(e),
        }
        tracing::warn!(
            group,
            oid,
            from,
            "a change no room could take was rolled back to the next member's copy"
        );
        Ok(())
    }
}
