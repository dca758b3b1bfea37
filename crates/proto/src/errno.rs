//! POSIX error numbers as the MDS protocol carries them: each [`Errno`]
//! travels as its Linux number (a postcard varint), never as a position
//! in the enum, so reordering or adding variants cannot change what a
//! number means on the wire. A number this build does not know (a newer
//! peer's) is read as EIO: the error's message still says what failed.
//! `errno_numbers_are_pinned` holds the table.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// POSIX error numbers (Linux values), so clients and FUSE map them 1:1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Errno {
    /// EPERM.
    Perm,
    /// ENOENT.
    NoEnt,
    /// EIO.
    Io,
    /// EACCES.
    Access,
    /// EBUSY.
    Busy,
    /// EEXIST.
    Exist,
    /// EXDEV.
    XDev,
    /// ENOTDIR.
    NotDir,
    /// EISDIR.
    IsDir,
    /// EINVAL.
    Inval,
    /// EFBIG.
    FBig,
    /// ENOSPC.
    NoSpc,
    /// EMLINK.
    MLink,
    /// ERANGE.
    Range,
    /// ENAMETOOLONG.
    NameTooLong,
    /// ENOTEMPTY.
    NotEmpty,
    /// ELOOP.
    Loop,
    /// ENODATA (no such extended attribute).
    NoData,
    /// ESTALE (the inode is gone).
    Stale,
    /// EPROTO (undecodable request).
    Proto,
    /// EBADF (no such open file).
    BadF,
    /// EOPNOTSUPP (not supported by this namespace).
    OpNotSupp,
    /// EROFS (a read-only principal asked for a change).
    RoFs,
    /// ENXIO (SEEK_DATA/SEEK_HOLE at or past the end).
    NxIo,
    /// EAGAIN (a lock held by another owner is in the way).
    Again,
    /// ENOLCK (the principal holds its bound of locks).
    NoLck,
    /// EINTR (a process waiting for a lock was interrupted).
    Intr,
}

impl Errno {
    /// The Linux errno value.
    pub fn raw(self) -> i32 {
        match self {
            Errno::Perm => 1,
            Errno::NoEnt => 2,
            Errno::Io => 5,
            Errno::Access => 13,
            Errno::Busy => 16,
            Errno::Exist => 17,
            Errno::XDev => 18,
            Errno::NotDir => 20,
            Errno::IsDir => 21,
            Errno::Inval => 22,
            Errno::FBig => 27,
            Errno::NoSpc => 28,
            Errno::MLink => 31,
            Errno::Range => 34,
            Errno::NameTooLong => 36,
            Errno::NotEmpty => 39,
            Errno::Loop => 40,
            Errno::NoData => 61,
            Errno::Proto => 71,
            Errno::Stale => 116,
            Errno::BadF => 9,
            Errno::OpNotSupp => 95,
            Errno::RoFs => 30,
            Errno::NxIo => 6,
            Errno::Again => 11,
            Errno::NoLck => 37,
            Errno::Intr => 4,
        }
    }
}

impl From<Errno> for i32 {
    fn from(e: Errno) -> i32 {
        e.raw()
    }
}

impl Errno {
    /// Every errno the protocol carries.
    pub const ALL: [Errno; 27] = [
        Errno::Perm,
        Errno::NoEnt,
        Errno::Io,
        Errno::Access,
        Errno::Busy,
        Errno::Exist,
        Errno::XDev,
        Errno::NotDir,
        Errno::IsDir,
        Errno::Inval,
        Errno::FBig,
        Errno::NoSpc,
        Errno::MLink,
        Errno::Range,
        Errno::NameTooLong,
        Errno::NotEmpty,
        Errno::Loop,
        Errno::NoData,
        Errno::Stale,
        Errno::Proto,
        Errno::BadF,
        Errno::OpNotSupp,
        Errno::RoFs,
        Errno::NxIo,
        Errno::Again,
        Errno::NoLck,
        Errno::Intr,
    ];

    /// The errno whose Linux number is `n`, if the protocol carries it.
    pub fn from_raw(n: i32) -> Option<Errno> {
        Errno::ALL.into_iter().find(|e| e.raw() == n)
    }
}

impl Serialize for Errno {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u16(self.raw() as u16)
    }
}

impl<'de> Deserialize<'de> for Errno {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Errno, D::Error> {
        let n = u16::deserialize(d)?;
        Ok(Errno::from_raw(i32::from(n)).unwrap_or(Errno::Io))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The numbers on the wire are Linux's, whatever the enum's order.
    #[test]
    fn errno_numbers_are_pinned() {
        let pinned = [
            (Errno::Perm, 1),
            (Errno::NoEnt, 2),
            (Errno::Io, 5),
            (Errno::NxIo, 6),
            (Errno::BadF, 9),
            (Errno::Again, 11),
            (Errno::Access, 13),
            (Errno::Busy, 16),
            (Errno::Exist, 17),
            (Errno::XDev, 18),
            (Errno::NotDir, 20),
            (Errno::IsDir, 21),
            (Errno::Inval, 22),
            (Errno::FBig, 27),
            (Errno::NoSpc, 28),
            (Errno::RoFs, 30),
            (Errno::MLink, 31),
            (Errno::Range, 34),
            (Errno::NameTooLong, 36),
            (Errno::NoLck, 37),
            (Errno::Intr, 4),
            (Errno::NotEmpty, 39),
            (Errno::Loop, 40),
            (Errno::NoData, 61),
            (Errno::Proto, 71),
            (Errno::OpNotSupp, 95),
            (Errno::Stale, 116),
        ];
        assert_eq!(pinned.len(), Errno::ALL.len(), "a new errno needs its pin");
        for (e, n) in pinned {
            assert_eq!(e.raw(), n);
            let bytes = postcard::to_allocvec(&e).expect("encodes");
            let want = postcard::to_allocvec(&(n as u16)).expect("encodes");
            assert_eq!(bytes, want, "{e:?} on the wire");
            assert_eq!(postcard::from_bytes::<Errno>(&bytes).expect("decodes"), e);
        }
        let unknown = postcard::to_allocvec(&3u16).expect("encodes");
        assert_eq!(
            postcard::from_bytes::<Errno>(&unknown).expect("decodes"),
            Errno::Io,
            "a number this build does not know reads as EIO"
        );
    }
}
