//! Search permission along the path to an inode named by number.
//!
//! A path walk checks search (`x`) on every directory it passes; a request
//! that names an inode by number skips the walk, so without this check a
//! caller could read attributes, listings or capabilities of anything
//! below a directory it may not enter (`0700` of another user) once it
//! learnt or guessed a number. Every request that names an inode, and
//! every neighbour a prefetch would hand out, is checked here against the
//! directories above it, up to the principal's root. The superuser (after
//! uid mapping) may search everything, so its requests skip the walk.

use std::collections::HashMap;

use posix::perm::{self, R, X};
use proto::mds::{Creds, Errno, FileKind, MdsError, MdsRequest, Op, ROOT_INO};

use super::{Mds, err};
use crate::records::{Inode, Records};

tokio::task_local! {
    /// The root of the principal the request being answered comes from.
    pub(super) static TOP: u64;
}

/// The directory the walk stops at: the caller's principal's root.
pub(super) fn top() -> u64 {
    TOP.try_with(|t| *t).unwrap_or(ROOT_INO)
}

/// Most directories one walk visits before it calls the chain a loop.
const WALK_MAX: usize = 4096;

/// Whether `c` may search every directory above `ino` up to [`top`]
/// (`memo` remembers directories already decided, for a batch of
/// neighbours). A walk that reaches the global root without passing a
/// confined principal's root is refused: the inode is outside its
/// subtree (root's too: uid 0 skips the permission bits, not the walk,
/// when confined). A file whose recorded directory is gone (an orphan) has
/// nothing above it: its own bits alone decide, and for a confined
/// principal it is outside (nothing shows it was inside). A file with several names
/// is judged by the directory its last name was made in (linking needs
/// ownership or read and write on the file, so nobody can move that
/// directory under a closed one for others).
pub(super) fn searchable(
    v: &impl Records,
    c: &Creds,
    ino: u64,
    memo: &mut HashMap<u64, bool>,
) -> Result<bool, MdsError> {
    let top = top();
    let confined = top != ROOT_INO;
    if ino == top || (!confined && (c.uid == 0 || ino == ROOT_INO)) {
        return Ok(true);
    }
    if ino == ROOT_INO {
        return Ok(false); // above a confined principal's root
    }
    let Some(first) = v.inode(ino)? else {
        return Ok(true); // the handler answers "no such inode"
    };
    let mut at = first.attr.ino;
    let mut dir = first.parent;
    let mut seen = Vec::new();
    let verdict = 'walk: {
        for _ in 0..WALK_MAX {
            if at == top {
                break 'walk true;
            }
            if at == ROOT_INO {
                // Reached the global root without passing the principal's:
                // outside its subtree.
                break 'walk top == ROOT_INO;
            }
            if let Some(&known) = memo.get(&dir) {
                break 'walk known;
            }
            let Some(d) = v.inode(dir)? else {
                // Its recorded directory is gone (an orphan, or a file whose
                // other name was in it): nothing above it to judge by — nor
                // to tell whether it was inside a confined principal's
                // subtree, so for one it is not.
                break 'walk !confined && first.attr.kind != FileKind::Dir;
            };
            seen.push(dir);
            // Root searches anything; a confined root still walks, to
            // find its principal's root on the way.
            if c.uid != 0 && !perm::allowed(&d.attr, c, X) {
                break 'walk false;
            }
            (at, dir) = (dir, d.parent);
        }
        return Err(err(
            Errno::Loop,
            "directory parent chain does not reach the root",
        ));
    };
    for d in seen {
        memo.insert(d, verdict);
    }
    Ok(verdict)
}

/// Whether `c` could have found `x` itself: search on every directory
/// above it and read on the directory that lists it (what a prefetch may
/// name).
pub(super) fn visible(
    v: &impl Records,
    c: &Creds,
    x: &Inode,
    memo: &mut HashMap<u64, bool>,
) -> Result<bool, MdsError> {
    if c.uid == 0 && top() == ROOT_INO {
        return Ok(true);
    }
    let listed = match v.inode(x.parent)? {
        Some(d) => perm::allowed(&d.attr, c, R | X),
        None => false,
    };
    Ok(listed && searchable(v, c, x.attr.ino, memo)?)
}

/// The inode a request works on through an open descriptor, if it is one
/// of those (a session holding the file open skips the walk, as POSIX
/// does: a descriptor keeps working after its directory is closed off).
fn through_descriptor(op: &Op) -> Option<u64> {
    match op {
        Op::Open { ino, .. }
        | Op::GetAttr { ino }
        | Op::Stat { ino }
        | Op::SetAttr { ino, .. }
        | Op::SetXattr { ino, .. }
        | Op::RemoveXattr { ino, .. }
        | Op::GetXattr { ino, .. }
        | Op::ListXattr { ino }
        | Op::CommitSize { ino, .. }
        | Op::ExtendLayout { ino, .. }
        | Op::GetLayout { ino }
        | Op::MarkStale { ino, .. }
        | Op::Lock { ino, .. }
        | Op::TestLock { ino, .. } => Some(*ino),
        _ => None,
    }
}

impl Mds {
    /// Refuses `req` (EACCES) when an inode it names (`named`, from
    /// [`super::auth::inodes_named`]) lies below a directory the caller
    /// may not search: each must be reachable by a path walk.
    pub(super) fn check_search(&self, req: &MdsRequest, named: &[u64]) -> Result<(), MdsError> {
        let c = &req.creds;
        if c.uid == 0 {
            return Ok(());
        }
        if named.is_empty() {
            return Ok(());
        }
        let write = matches!(req.op, Op::Open { write: true, .. });
        if let Some(ino) = through_descriptor(&req.op)
            && self.session_holds(req.session, ino, write)
        {
            return Ok(());
        }
        let snap = self.kv.read()?;
        let mut memo = HashMap::new();
        for &ino in named {
            if !searchable(&snap, c, ino, &mut memo)? {
                return Err(err(
                    Errno::Access,
                    format!(
                        "{}: uid {} may not search a directory above inode {ino:#x}",
                        req.op.name(),
                        c.uid
                    ),
                ));
            }
        }
        Ok(())
    }
}
