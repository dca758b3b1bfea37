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

impl super::Chains {
    /// Undoes a change the chain could not take for want of room: this
    /// head, and every full member between it and the tail, get the
    /// tail's copy of `oid` (the tail took none of it: a change goes down
    /// in order and stopped before the tail; had it stopped at a joining
    /// member after the tail, this changes nothing), or lose theirs when the
    /// tail has none (the change made the object). The caller holds the
    /// object's lock. On failure the change stays, to be passed down once
    /// there is room.
    pub(super) async fn roll_back(&self, ctx: &Ctx, group: u32, oid: u64) -> Result<(), WireError> {
        let view = self.view().await?;
        let view = view.as_ref();
        let members = view
            .table
            .chain(group)
            .map(|c| c.members.clone())
            .unwrap_or_default();
        let Some(&tail) = members.last().filter(|t| **t != self.me) else {
            return Err(WireError::new(
                ErrorCode::Io,
                "no other member to roll back to",
            ));
        };
        let pid = proto::chain::group_partition(group);
        let made = match self.repair_from(ctx, view, group, tail, oid).await {
            Ok(()) => true,
            Err(e) if e.code == ErrorCode::NoObject => match ctx.store.get()?.remove(pid, oid) {
                Ok(()) | Err(store::StoreError::NoObject { .. }) => false,
                Err(e) => return Err(crate::exec::map_err(e)),
            },
            Err(e) => return Err(e),
        };
        for &m in &members[1..members.len() - 1] {
            if made {
                self.copy_object(ctx, view, group, m, oid).await?;
            } else {
                self.remote_remove(view, group, m, oid).await?;
            }
        }
        tracing::warn!(
            group,
            oid,
            tail,
            "a change no room could take was rolled back to the tail's copy"
        );
        Ok(())
    }
}
