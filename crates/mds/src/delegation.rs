//! Directory leases in the KV: the inode numbers delegated to a lease's
//! holder (drawn from the id policy as creates would be, recorded so no
//! other create takes them and so a client cannot name an id it was not
//! given), and the changes a holder made on its own ([`DirOp`]), applied in
//! one transaction — each checked as the synchronous request would be, and
//! each refused one leaving nothing behind (every `ns` operation checks
//! before it writes).

use std::collections::HashSet;

use proto::mds::{Creds, DirOp, Errno, FileKind, MdsError};

use crate::ids::IdPolicy;
use crate::kv::{T, Tx, View};
use crate::ns;
use crate::records::{Records, num_key};

use proto::mds::err;

/// A delegation record: session, directory, ms since the epoch given,
/// and whether the number was made (kept until it expires, so a batch
/// sent again finds its creates done).
fn record(session: u64, dir: u64, ms: u64, made: bool) -> [u8; 25] {
    let mut v = [0u8; 25];
    v[..8].copy_from_slice(&session.to_le_bytes());
    v[8..16].copy_from_slice(&dir.to_le_bytes());
    v[16..24].copy_from_slice(&ms.to_le_bytes());
    v[24] = made as u8;
    v
}

/// The (session, directory, ms, made) of a delegation record.
pub fn decode_record(v: &[u8]) -> Option<(u64, u64, u64, bool)> {
    let n = |r: std::ops::Range<usize>| Some(u64::from_le_bytes(v.get(r)?.try_into().ok()?));
    Some((n(0..8)?, n(8..16)?, n(16..24)?, *v.get(24)? == 1))
}

/// Draws `n` file ids for new files in `dir` from the id policy and
/// records them as delegated to `session`.
pub fn delegate(
    tx: &mut Tx,
    policy: &IdPolicy,
    dir: u64,
    n: usize,
    session: u64,
    now_ms: u64,
) -> Result<Vec<u64>, MdsError> {
    let mut d = tx.dir_inode(dir)?;
    let mut st = tx.state()?;
    let Some(meta) = d.dir.as_mut() else {
        return Err(err(Errno::NotDir, "not a directory"));
    };
    let mut ids = meta.ids.clone();
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let id = policy.file_id(&mut ids, &mut st.ids, &mut crate::records::taken(tx));
        tx.put(
            T::Delegated,
            &num_key(id),
            &record(session, dir, now_ms, false),
        )?;
        out.push(id);
    }
    meta.ids = ids;
    tx.put_inode(&d)?;
    tx.put_state(&st)?;
    Ok(out)
}

/// Forgets the delegations in `ids` that are `session`'s (a lease given
/// back: the numbers are never used, as ids never are twice).
pub fn undelegate(tx: &mut Tx, session: u64, ids: &[u64]) -> Result<(), MdsError> {
    for &id in ids {
        let mine = tx
            .get(T::Delegated, &num_key(id))?
            .and_then(|v| decode_record(&v))
            .is_some_and(|(s, _, _, made)| s == session && !made);
        if mine {
            tx.del(T::Delegated, &num_key(id))?;
        }
    }
    Ok(())
}

/// Whether the delegation record `(k, v)` was given before `before_ms`
/// and is not in `held` (numbers a live lease still holds: a holder that
/// makes files slowly may keep a number longer than any term).
pub fn expired(k: &[u8], v: &[u8], before_ms: u64, held: &HashSet<u64>) -> bool {
    let id = <[u8; 8]>::try_from(k).map(u64::from_be_bytes).ok();
    id.is_none_or(|id| !held.contains(&id))
        && decode_record(v).is_none_or(|(_, _, ms, _)| ms < before_ms)
}

/// Forgets up to `max` delegations given before `before_ms` and not in
/// `held` (their holders are gone: a live holder uses its numbers or
/// gives them back with its lease).
pub fn expire(
    tx: &mut Tx,
    before_ms: u64,
    held: &HashSet<u64>,
    max: usize,
) -> Result<usize, MdsError> {
    let mut old = Vec::new();
    tx.scan(
        T::Delegated,
        std::ops::Bound::Unbounded,
        std::ops::Bound::Unbounded,
        false,
        &mut |k, v| {
            if expired(k, v, before_ms, held) {
                old.push(k.to_vec());
            }
            old.len() < max
        },
    )?;
    for k in &old {
        tx.del(T::Delegated, k)?;
    }
    Ok(old.len())
}

/// What applying a holder's changes did.
#[derive(Debug, Default)]
pub struct Applied {
    /// Refused changes: (index, why).
    pub failed: Vec<(u32, MdsError)>,
    /// Files made (their session holds them open).
    pub opened: Vec<u64>,
    /// Inodes that lost their last name (orphans now).
    pub orphans: Vec<u64>,
}

/// Applies `ops`, in order, as `c` in `dir` for `session`.
pub fn apply(
    tx: &mut Tx,
    policy: &IdPolicy,
    c: &Creds,
    dir: u64,
    ops: &[DirOp],
    (session, holds): (u64, bool),
) -> Result<Applied, MdsError> {
    let mut out = Applied::default();
    for (i, op) in ops.iter().enumerate() {
        match apply_one(tx, policy, c, dir, op, (session, holds)) {
            Ok(Done::Made(ino)) => out.opened.push(ino),
            Ok(Done::Removed(orphan)) => out.orphans.extend(orphan),
            Ok(Done::Already) => {}
            Err(e) if e.errno == Errno::Io => return Err(e),
            Err(e) => out.failed.push((i as u32, e)),
        }
    }
    Ok(out)
}

enum Done {
    Made(u64),
    Removed(Option<u64>),
    Already,
}

fn apply_one(
    tx: &mut Tx,
    policy: &IdPolicy,
    c: &Creds,
    dir: u64,
    op: &DirOp,
    (session, holds): (u64, bool),
) -> Result<Done, MdsError> {
    match op {
        DirOp::Create { name, ino, mode } => {
            if tx.dentry(dir, name)? == Some((*ino, FileKind::File)) {
                return Ok(Done::Already);
            }
            let key = num_key(*ino);
            let rec = tx.get(T::Delegated, &key)?;
            let (ms, made) = match rec.as_deref().and_then(decode_record) {
                Some((s, d, ms, made)) if s == session && d == dir => (ms, made),
                _ => {
                    return Err(err(
                        Errno::Inval,
                        format!(
                            "inode number {ino:#x} was not delegated to this session for {dir:#x}"
                        ),
                    ));
                }
            };
            if made {
                // Made by this batch sent before (and maybe removed since).
                return Ok(Done::Already);
            }
            // The record reserves the number against the policy: lifted
            // for this create, kept as made after it, put back if refused.
            tx.del(T::Delegated, &key)?;
            let r = crate::ids::forcing(Some(*ino), || {
                ns::create(tx, policy, c, dir, name, *mode, true)
            });
            let done = match r {
                Ok((i, true)) if i.attr.ino == *ino => Ok(Done::Made(*ino)),
                Ok(_) => Err(err(Errno::Io, "a delegated inode number was not made")),
                Err(e) => Err(e),
            };
            let made = done.is_ok();
            tx.put(T::Delegated, &key, &record(session, dir, ms, made))?;
            done
        }
        DirOp::Unlink { name, ino } => match tx.dentry(dir, name)? {
            Some((i, _)) if i == *ino => Ok(Done::Removed(ns::unlink(tx, c, dir, name)?)),
            // Removed already (a resend), or named anew by someone else.
            _ => Ok(Done::Already),
        },
        // Only under the lease itself (or redone after a restart): a
        // batch sent again after the lease lapsed must not set attributes
        // over changes made since by others.
        DirOp::SetAttr { .. } if !holds => Err(err(
            Errno::Perm,
            format!(
                "attributes are changed in {dir:#x} only under its lease, which this session does not hold"
            ),
        )),
        DirOp::SetAttr { name, ino, set } => match tx.dentry(dir, name)? {
            Some((i, FileKind::File)) if i == *ino => {
                ns::setattr_leased(tx, c, *ino, set)?;
                Ok(Done::Already)
            }
            _ => Err(err(
                Errno::NoEnt,
                format!("{name:?} in {dir:#x} does not name file {ino:#x}"),
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_number_a_live_lease_holds_never_expires() {
        let (k, old, new) = (
            num_key(7),
            record(1, 2, 100, false),
            record(1, 2, 5_000, false),
        );
        let none = HashSet::new();
        let held: HashSet<u64> = [7].into_iter().collect();
        assert!(expired(&k, &old, 1_000, &none), "old and not held");
        assert!(!expired(&k, &old, 1_000, &held), "old but held");
        assert!(!expired(&k, &new, 1_000, &none), "recent");
        assert!(expired(&k, b"junk", 1_000, &none), "undecodable goes");
    }
}
