//! Conversions between Tessera's metadata and the kernel's: inode numbers
//! (FUSE's root is 1, Tessera's is 0, so FUSE = Tessera + 1; a principal
//! confined to a subtree sees that directory as FUSE's root), attributes,
//! file types, times.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{FileAttr, FileType, INodeNo};
use proto::mds::{Attr, FileKind};

/// Block size reported to programs (their preferred I/O size).
pub const BLKSIZE: u32 = 128 << 10;

/// The mapping between Tessera's inode numbers and the kernel's: the
/// mount's root (the principal's root directory) is the kernel's 1, and
/// Tessera's root (never seen by a confined principal) takes the number
/// the mount's root would have had.
#[derive(Debug, Clone, Copy)]
pub struct Inodes {
    /// The Tessera inode the mount shows as its root.
    pub root: u64,
}

impl Inodes {
    /// The kernel's inode number for a Tessera inode.
    pub fn to_fuse(&self, ino: u64) -> INodeNo {
        let n = if ino == self.root {
            0
        } else if ino == 0 {
            self.root
        } else {
            ino
        };
        INodeNo(n + 1)
    }

    /// The Tessera inode for a kernel inode number.
    pub fn from_fuse(&self, ino: INodeNo) -> u64 {
        match ino.0.saturating_sub(1) {
            0 => self.root,
            n if n == self.root => 0,
            n => n,
        }
    }
}

/// The kernel's file type.
pub fn kind(k: FileKind) -> FileType {
    match k {
        FileKind::File => FileType::RegularFile,
        FileKind::Dir => FileType::Directory,
        FileKind::Symlink => FileType::Symlink,
        FileKind::Fifo => FileType::NamedPipe,
        FileKind::CharDev => FileType::CharDevice,
        FileKind::BlockDev => FileType::BlockDevice,
        FileKind::Socket => FileType::Socket,
    }
}

/// The kind a `mknod` mode's file-type bits ask for (0 means a regular file).
pub fn kind_of_mode(mode: u32) -> Option<FileKind> {
    Some(match mode & libc::S_IFMT {
        0 | libc::S_IFREG => FileKind::File,
        libc::S_IFIFO => FileKind::Fifo,
        libc::S_IFCHR => FileKind::CharDev,
        libc::S_IFBLK => FileKind::BlockDev,
        libc::S_IFSOCK => FileKind::Socket,
        _ => return None,
    })
}

/// Nanoseconds since the epoch as a time (negative times clamp to the epoch).
pub fn time(ns: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(ns.max(0) as u64)
}

/// A time as nanoseconds since the epoch.
pub fn ns(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// The kernel's attributes for `a`.
pub fn file_attr(inos: &Inodes, a: &Attr) -> FileAttr {
    FileAttr {
        ino: inos.to_fuse(a.ino),
        size: a.size,
        blocks: a.size.div_ceil(512),
        atime: time(a.atime),
        mtime: time(a.mtime),
        ctime: time(a.ctime),
        crtime: time(a.ctime),
        kind: kind(a.kind),
        perm: (a.mode & 0o7777) as u16,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        blksize: BLKSIZE,
        flags: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inode_numbers_and_times_round_trip() {
        let whole = Inodes { root: 0 };
        assert_eq!(whole.to_fuse(0), INodeNo(1));
        assert_eq!(whole.from_fuse(whole.to_fuse(41)), 41);
        let confined = Inodes { root: 41 };
        assert_eq!(confined.to_fuse(41), INodeNo(1));
        for i in [0, 1, 5, 41, 42, 1 << 40] {
            assert_eq!(confined.from_fuse(confined.to_fuse(i)), i);
        }
        let t = 1_700_000_000_123_456_789;
        assert_eq!(ns(time(t)), t);
        let a = Attr {
            ino: 7,
            kind: FileKind::Dir,
            mode: 0o40755,
            nlink: 2,
            uid: 1,
            gid: 2,
            size: 1000,
            atime: 0,
            mtime: t,
            ctime: t,
            rdev: 0,
        };
        let f = file_attr(&Inodes { root: 0 }, &a);
        assert_eq!((f.perm, f.kind, f.blocks), (0o755, FileType::Directory, 2));
    }
}
