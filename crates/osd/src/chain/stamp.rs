//! Change stamps ([`proto::chain::STAMP`]): how a member returning to a
//! chain is caught up by what its copies took, not by clocks.
//!
//! The head draws a stamp for each change and marks the object with it
//! *before* it runs the change (in journal order, so the change is never
//! durable without the mark); the effect carries the stamp down. A member
//! marks the object with a stamp of its own before it applies the effect
//! and with the change's after. So a copy carries a stamp another copy
//! also carries only once it took that change whole and nothing after it:
//! a change cut short by a crash, or made at a head that died before
//! passing it on, leaves a stamp no other copy has. A fill skips exactly
//! the objects whose stamps (and versions) match on both sides.

use std::sync::atomic::{AtomicU64, Ordering};

use proto::chain::STAMP;
use proto::msg::{AttrKey, Command, Request};
use proto::{ErrorCode, WireError};

use crate::exec::{Ctx, map_err};

/// Draws stamps no other change draws: a random seed for the process,
/// hashed with a counter.
pub(super) struct Stamps {
    seed: u64,
    next: AtomicU64,
}

impl Stamps {
    /// A generator seeded from the system's randomness (the clock and the
    /// process id when there is none).
    pub(super) fn new() -> Stamps {
        let mut b = [0u8; 8];
        let seed = match std::fs::File::open("/dev/urandom")
            .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
        {
            Ok(()) => u64::from_le_bytes(b),
            Err(_) => {
                let t = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64);
                t ^ (u64::from(std::process::id()) << 32)
            }
        };
        Stamps {
            seed,
            next: AtomicU64::new(0),
        }
    }

    /// A new stamp.
    pub(super) fn draw(&self) -> u64 {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let mut v = [0u8; 16];
        v[..8].copy_from_slice(&self.seed.to_le_bytes());
        v[8..].copy_from_slice(&n.to_le_bytes());
        xxhash_rust::xxh3::xxh3_64(&v)
    }
}

/// The object a change marks: the one it acts on, unless it removes it.
pub(super) fn marked_object(cmd: &Command) -> Option<(u64, u64)> {
    match cmd {
        Command::Remove { .. } | Command::Install { .. } => None,
        cmd => cmd.object(),
    }
}

/// Marks `obj` with `stamp` in journal order; false when it is not there.
pub(super) fn mark(ctx: &Ctx, (pid, oid): (u64, u64), stamp: u64) -> Result<bool, WireError> {
    ctx.store
        .get()?
        .set_attr_ordered(pid, oid, (STAMP.page, STAMP.number), &stamp.to_le_bytes())
        .map_err(map_err)
}

/// The stamp an effect's set list carries, and the list without it.
pub(super) fn split(set: &[(AttrKey, Vec<u8>)]) -> (Option<u64>, Vec<(AttrKey, Vec<u8>)>) {
    let mut stamp = None;
    let mut rest = Vec::with_capacity(set.len());
    for (k, v) in set {
        if *k == STAMP {
            stamp = v.as_slice().try_into().ok().map(u64::from_le_bytes);
        } else {
            rest.push((*k, v.clone()));
        }
    }
    (stamp, rest)
}

/// `set` with `stamp` added, for an effect on `cmd`'s object.
pub(super) fn onto(
    cmd: &Command,
    mut set: Vec<(AttrKey, Vec<u8>)>,
    stamp: u64,
) -> Vec<(AttrKey, Vec<u8>)> {
    if marked_object(cmd).is_some() {
        set.push((STAMP, stamp.to_le_bytes().to_vec()));
    }
    set
}

/// Refuses a client's request that sets the stamp (in its set list, or
/// as the attribute a compare-and-swap or fetch-and-add changes).
pub(super) fn refuse_client_stamp(req: &Request) -> Result<(), WireError> {
    let swaps_it = matches!(
        req.cmd,
        Command::Cas { key, .. } | Command::FetchAdd { key, .. } if key.page == STAMP.page
    );
    if swaps_it || req.set.iter().any(|(k, _)| k.page == STAMP.page) {
        return Err(WireError::new(
            ErrorCode::BadRequest,
            format!(
                "attribute page {:#x} is the replica chains' own: a client may not set it",
                STAMP.page
            ),
        ));
    }
    Ok(())
}

/// An object's stamp on this OSD (None: unmarked or not there).
pub(super) fn stamp_of(ctx: &Ctx, (pid, oid): (u64, u64)) -> Result<Option<u64>, WireError> {
    Ok(ctx
        .store
        .get()?
        .get_attr(pid, oid, STAMP.page, STAMP.number)
        .ok()
        .flatten()
        .and_then(|v| v.as_slice().try_into().ok().map(u64::from_le_bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_differ_and_travel_in_a_set_list() {
        let (a, b) = (Stamps::new(), Stamps::new());
        let drawn: std::collections::HashSet<u64> =
            (0..1000).flat_map(|_| [a.draw(), b.draw()]).collect();
        assert_eq!(drawn.len(), 2000, "two processes' stamps never meet");
        let user = AttrKey {
            page: 0x100,
            number: 2,
        };
        let w = Command::Write {
            pid: 1 << 17,
            oid: 0x1_0000,
            offset: 0,
        };
        let set = onto(&w, vec![(user, vec![1])], 42);
        assert_eq!(split(&set), (Some(42), vec![(user, vec![1])]));
        let rm = Command::Remove {
            pid: 1 << 17,
            oid: 0x1_0000,
        };
        assert_eq!(onto(&rm, vec![], 42), vec![], "a removal marks nothing");
        let req = Request {
            cap: None,
            id: 1,
            cmd: w,
            get: vec![],
            set: vec![(STAMP, vec![0; 8])],
        };
        assert!(refuse_client_stamp(&req).is_err());
    }
}
