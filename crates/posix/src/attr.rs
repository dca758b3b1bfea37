//! The attribute rules every namespace shares (the MDS's and the one kept
//! on the OSDs): what a new inode starts with, and what setattr may change.

use proto::mds::{Attr, Creds, Errno, FileKind, MdsError, SetAttr, SetTime};

use crate::perm::{self, W};

use proto::mds::err;

/// A fresh attribute block for an inode `c` makes in directory `parent`
/// (setgid directories hand down their group; shared with clients of a
/// namespace kept on the OSDs).
pub fn new_attr(ino: u64, kind: FileKind, mode: u32, c: &Creds, parent: &Attr, now: i64) -> Attr {
    // setgid directories hand their group down (and setgid to subdirectories).
    let (gid, mode) = if parent.mode & 0o2000 != 0 {
        let m = if kind == FileKind::Dir {
            mode | 0o2000
        } else {
            mode
        };
        (parent.gid, m)
    } else {
        (c.gid, mode)
    };
    Attr {
        ino,
        kind,
        mode: mode & 0o7777,
        nlink: if kind == FileKind::Dir { 2 } else { 1 },
        uid: c.uid,
        gid,
        size: 0,
        atime: now,
        mtime: now,
        ctime: now,
        rdev: 0,
    }
}

/// What `kind` is called in error messages.
pub fn kind_name(k: FileKind) -> &'static str {
    match k {
        FileKind::File => "regular file",
        FileKind::Dir => "directory",
        FileKind::Symlink => "symlink",
        FileKind::Fifo => "FIFO",
        FileKind::CharDev => "character device",
        FileKind::BlockDev => "block device",
        FileKind::Socket => "socket",
    }
}

/// The POSIX rules of setattr on one attribute block (shared by the MDS
/// and by clients of a namespace kept on the OSDs): checks `c` may make
/// each change, applies them at time `now`, and says whether some access
/// was taken away (capabilities issued before must then be revoked).
/// Nothing is changed when a check fails.
pub fn apply_setattr(a: &mut Attr, c: &Creds, set: &SetAttr, now: i64) -> Result<bool, MdsError> {
    let mut b = a.clone();
    let mut revoke = false;
    if let Some(mode) = set.mode {
        let mut m = mode & 0o7777;
        // A writer's kernel clears the set-id bits of a file it writes
        // (`file_remove_privs`) with a chmod in the writer's name: that
        // alone needs only the right to write, not ownership.
        let old = b.mode & 0o7777;
        // Regular files only: a directory's setgid is its group's
        // inheritance, no write clears it.
        let only_drops_set_id =
            b.kind == FileKind::File && m & !old == 0 && old & !m != 0 && (old & !m) & !0o6000 == 0;
        if !(only_drops_set_id && perm::allowed(&b, c, W)) {
            perm::owner(&b, c, "chmod")?;
        }
        if c.uid != 0 && b.kind != FileKind::Dir && !perm::in_group(c, b.gid) {
            m &= !0o2000; // non-members cannot set setgid
        }
        if (b.mode & !m) & 0o777 != 0 {
            revoke = true; // some permission was taken away
        }
        b.mode = m;
    }
    if set.uid.is_some() || set.gid.is_some() {
        let new_uid = set.uid.unwrap_or(b.uid);
        let new_gid = set.gid.unwrap_or(b.gid);
        if c.uid != 0 {
            if new_uid != b.uid {
                return Err(err(Errno::Perm, "only root may change a file's owner"));
            }
            perm::owner(&b, c, "chgrp")?;
            if new_gid != b.gid && !perm::in_group(c, new_gid) {
                return Err(err(
                    Errno::Perm,
                    format!("uid {} is not in group {new_gid}", c.uid),
                ));
            }
        }
        if new_uid != b.uid || new_gid != b.gid {
            revoke = true;
            if b.kind != FileKind::Dir {
                b.mode &= !0o6000; // chown clears setuid/setgid
            }
        }
        b.uid = new_uid;
        b.gid = new_gid;
    }
    if let Some(size) = set.size {
        match b.kind {
            FileKind::Dir => return Err(err(Errno::IsDir, "cannot truncate a directory")),
            FileKind::File => {}
            k => {
                return Err(err(
                    Errno::Inval,
                    format!("cannot truncate a {}", kind_name(k)),
                ));
            }
        }
        // Through a descriptor opened for writing the check was made at
        // open (the caller has verified the handle).
        if !set.via_handle {
            perm::check(&b, c, W, "truncate")?;
        }
        if size < b.size {
            revoke = true;
        }
        if size != b.size {
            b.size = size;
            b.mtime = now;
        }
    }
    for (t, field) in [(set.atime, 0), (set.mtime, 1)] {
        let Some(t) = t else { continue };
        match t {
            SetTime::Now => {
                if c.uid != 0 && c.uid != b.uid && !perm::allowed(&b, c, W) {
                    return Err(err(
                        Errno::Access,
                        "setting times to now needs ownership or write permission",
                    ));
                }
            }
            SetTime::At(_) => perm::owner(&b, c, "utimens")?,
        }
        let v = match t {
            SetTime::Now => now,
            SetTime::At(v) => v,
        };
        if field == 0 {
            b.atime = v;
        } else {
            b.mtime = v;
        }
    }
    b.ctime = now;
    *a = b;
    Ok(revoke)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(mode: u32) -> Attr {
        Attr {
            ino: 9,
            kind: FileKind::File,
            mode,
            nlink: 1,
            uid: 10,
            gid: 20,
            size: 0,
            atime: 0,
            mtime: 0,
            ctime: 0,
            rdev: 0,
        }
    }

    fn chmod(mode: u32) -> SetAttr {
        SetAttr {
            mode: Some(mode),
            ..Default::default()
        }
    }

    #[test]
    fn a_writer_may_only_clear_the_set_id_bits() {
        let writer = Creds {
            uid: 11,
            gid: 5,
            groups: vec![],
        };
        // What the kernel asks when a non-owner writes a 06777 file.
        let mut a = file(0o6777);
        apply_setattr(&mut a, &writer, &chmod(0o0777), 1).unwrap();
        assert_eq!(a.mode, 0o777);
        let mut a = file(0o4777);
        apply_setattr(&mut a, &writer, &chmod(0o0777), 1).unwrap();
        assert_eq!(a.mode, 0o777);
        // Anything else stays the owner's: the same mode, another bit
        // cleared or set with them, or no right to write.
        let mut dir = file(0o2777);
        dir.kind = FileKind::Dir;
        let e = apply_setattr(&mut dir, &writer, &chmod(0o777), 1).unwrap_err();
        assert_eq!(
            e.errno,
            Errno::Perm,
            "a directory's setgid stays its owner's"
        );
        for (from, to) in [
            (0o6777, 0o6777),
            (0o777, 0o777),
            (0o6777, 0o0775),
            (0o4777, 0o1777),
            (0o6775, 0o0775),
        ] {
            let e = apply_setattr(&mut file(from), &writer, &chmod(to), 1).unwrap_err();
            assert_eq!(e.errno, Errno::Perm, "{from:o} -> {to:o}");
        }
    }
}
