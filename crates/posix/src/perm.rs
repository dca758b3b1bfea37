//! POSIX permission checks for the caller's credentials (the client machine
//! is trusted to state them, as in Hendricks et al.).

use proto::mds::{Attr, Creds, Errno, FileKind, MdsError};

/// Read.
pub const R: u32 = 4;
/// Write.
pub const W: u32 = 2;
/// Execute / search.
pub const X: u32 = 1;

/// Whether `c` is in group `gid`.
pub fn in_group(c: &Creds, gid: u32) -> bool {
    c.gid == gid || c.groups.contains(&gid)
}

/// Whether `c` may access `a` for `want` (a mask of R, W, X). Root may do
/// anything except execute a file with no execute bit at all.
pub fn allowed(a: &Attr, c: &Creds, want: u32) -> bool {
    if c.uid == 0 {
        return want & X == 0 || a.kind == FileKind::Dir || a.mode & 0o111 != 0;
    }
    let bits = if c.uid == a.uid {
        (a.mode >> 6) & 7
    } else if in_group(c, a.gid) {
        (a.mode >> 3) & 7
    } else {
        a.mode & 7
    };
    bits & want == want
}

/// [`allowed`] or EACCES naming what was refused.
pub fn check(a: &Attr, c: &Creds, want: u32, what: &str) -> Result<(), MdsError> {
    if allowed(a, c, want) {
        return Ok(());
    }
    let need: String = [(R, 'r'), (W, 'w'), (X, 'x')]
        .iter()
        .filter(|(b, _)| want & b != 0)
        .map(|(_, ch)| *ch)
        .collect();
    Err(MdsError::new(
        Errno::Access,
        format!(
            "{what}: uid {} needs '{need}' on inode {:#x} (mode {:o}, owner {}:{})",
            c.uid, a.ino, a.mode, a.uid, a.gid
        ),
    ))
}

/// Owner or root, else EPERM.
pub fn owner(a: &Attr, c: &Creds, what: &str) -> Result<(), MdsError> {
    if c.uid == 0 || c.uid == a.uid {
        return Ok(());
    }
    Err(MdsError::new(
        Errno::Perm,
        format!(
            "{what}: only the owner (uid {}) or root may do this, not uid {}",
            a.uid, c.uid
        ),
    ))
}

/// The sticky-directory rule for removing or renaming `victim` out of `dir`.
pub fn sticky(dir: &Attr, victim: &Attr, c: &Creds) -> Result<(), MdsError> {
    if dir.mode & 0o1000 == 0 || c.uid == 0 || c.uid == dir.uid || c.uid == victim.uid {
        return Ok(());
    }
    Err(MdsError::new(
        Errno::Perm,
        format!(
            "sticky directory {:#x}: uid {} may not remove inode {:#x} owned by {}",
            dir.ino, c.uid, victim.ino, victim.uid
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(mode: u32, uid: u32, gid: u32, kind: FileKind) -> Attr {
        Attr {
            ino: 9,
            kind,
            mode,
            nlink: 1,
            uid,
            gid,
            size: 0,
            atime: 0,
            mtime: 0,
            ctime: 0,
            rdev: 0,
        }
    }

    #[test]
    fn owner_group_other_and_root() {
        let a = attr(0o640, 10, 20, FileKind::File);
        let me = Creds {
            uid: 10,
            gid: 1,
            groups: vec![],
        };
        let grp = Creds {
            uid: 11,
            gid: 5,
            groups: vec![20],
        };
        let other = Creds {
            uid: 12,
            gid: 5,
            groups: vec![],
        };
        assert!(allowed(&a, &me, R | W));
        assert!(allowed(&a, &grp, R) && !allowed(&a, &grp, W));
        assert!(!allowed(&a, &other, R));
        assert!(allowed(&a, &Creds::root(), R | W));
        assert!(
            !allowed(&a, &Creds::root(), X),
            "root cannot exec a non-executable file"
        );
        assert!(allowed(
            &attr(0o700, 1, 1, FileKind::Dir),
            &Creds::root(),
            X
        ));
        assert_eq!(
            check(&a, &other, R, "open").unwrap_err().errno,
            Errno::Access
        );
        assert_eq!(owner(&a, &other, "chmod").unwrap_err().errno, Errno::Perm);
        let sticky_dir = attr(0o1777, 0, 0, FileKind::Dir);
        assert!(sticky(&sticky_dir, &a, &other).is_err());
        assert!(sticky(&sticky_dir, &a, &me).is_ok());
    }
}
