//! The on-OSD format of the namespace: which attribute holds what, and how
//! each value is encoded. Documented in `docs/FORMAT.md` ("Namespace on
//! the OSDs"). Every value starts with a format version byte; decoders
//! refuse other versions and malformed bytes with a message naming the
//! field.

use proto::layout::LayoutSpec;
use proto::msg::AttrKey;
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::hash::DirHash;

/// Version byte of every value below.
pub const FORMAT_VERSION: u8 = 3;

/// Page of an inode's own attributes (on the file's first object).
pub const PAGE_INODE: u32 = 0x100;
/// The inode record ([`Inode`]).
pub const INODE: AttrKey = AttrKey {
    page: PAGE_INODE,
    number: 1,
};
/// A rename in progress that moves this inode ([`Intent`]).
pub const INTENT: AttrKey = AttrKey {
    page: PAGE_INODE,
    number: 2,
};
/// Page of extended attributes: number = hash of the name (probing on
/// collision), value = name length (u16 LE), name, value.
pub const PAGE_XATTR: u32 = 0x101;

/// Page of a directory's own state.
pub const PAGE_DIR: u32 = 0x110;
/// The directory header ([`DirHeader`]), fixed at mkdir.
pub const DIR_HEADER: AttrKey = AttrKey {
    page: PAGE_DIR,
    number: 1,
};
/// The directory lock of the lock-based protocol ([`Lease`]).
pub const DIR_LOCK: AttrKey = AttrKey {
    page: PAGE_DIR,
    number: 2,
};
/// Counter (u64 LE, fetch-and-add) of the next list-page slot.
pub const DIR_LIST_NEXT: AttrKey = AttrKey {
    page: PAGE_DIR,
    number: 3,
};
/// Set (a [`Lease`]) while an rmdir is removing the directory.
pub const DIR_DYING: AttrKey = AttrKey {
    page: PAGE_DIR,
    number: 4,
};
/// When an entry was last added to or removed from the directory (i64 ns
/// LE): its mtime and ctime when newer than its inode record's. Set with
/// the entry change itself (the set list of the swapping CAS).
pub const DIR_CHANGED: AttrKey = AttrKey {
    page: PAGE_DIR,
    number: 5,
};
/// Counter (u64 LE, fetch-and-add) of the directory's subdirectories: its
/// link count is 2 + this.
pub const DIR_SUBDIRS: AttrKey = AttrKey {
    page: PAGE_DIR,
    number: 6,
};
/// Hash page: number = name hash, value = the chain's head [`Slot`].
pub const PAGE_HASH: u32 = 0x111;
/// List page: number = slot, value = a chained [`Slot`].
pub const PAGE_LIST: u32 = 0x112;
/// Bucket locks of the atomic protocol's collision path: number = hash.
pub const PAGE_BUCKET_LOCK: u32 = 0x113;

/// Page of file-system-wide state, on the root directory's object.
pub const PAGE_FS: u32 = 0x120;
/// Inode-number counter (u64 LE, fetch-and-add; clients take batches).
pub const FS_NEXT_INO: AttrKey = AttrKey {
    page: PAGE_FS,
    number: 1,
};
/// Inode counter (i64 LE as u64, fetch-and-add): inodes made minus
/// removed, as clients flush their counts (statfs; fsck recounts).
pub const FS_INODES: AttrKey = AttrKey {
    page: PAGE_FS,
    number: 3,
};
/// Rename lock ([`Lease`]): held while a directory moves to another parent.
pub const FS_RENAME_LOCK: AttrKey = AttrKey {
    page: PAGE_FS,
    number: 2,
};

/// The store's creation time of an object (T10 timestamps page, u64 ns LE).
pub const CREATED: AttrKey = AttrKey {
    page: 0x3,
    number: 0x1,
};

/// The attribute key of hash-page slot `n`.
pub fn hash_key(n: u32) -> AttrKey {
    AttrKey {
        page: PAGE_HASH,
        number: n,
    }
}

/// The attribute key of list-page slot `n`.
pub fn list_key(n: u32) -> AttrKey {
    AttrKey {
        page: PAGE_LIST,
        number: n,
    }
}

/// The attribute key of the bucket lock for hash `n`.
pub fn bucket_lock_key(n: u32) -> AttrKey {
    AttrKey {
        page: PAGE_BUCKET_LOCK,
        number: n,
    }
}

/// Longest name in bytes.
pub const NAME_MAX: usize = 255;

/// What an entry names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Kind {
    /// Regular file.
    File,
    /// Directory.
    Dir,
    /// Symbolic link.
    Symlink,
    /// Named pipe.
    Fifo,
    /// Character device.
    CharDev,
    /// Block device.
    BlockDev,
    /// Unix-domain socket.
    Socket,
}

impl Kind {
    fn code(self) -> u8 {
        match self {
            Kind::File => 1,
            Kind::Dir => 2,
            Kind::Symlink => 3,
            Kind::Fifo => 4,
            Kind::CharDev => 5,
            Kind::BlockDev => 6,
            Kind::Socket => 7,
        }
    }

    fn from_code(c: u8) -> Result<Kind> {
        Ok(match c {
            1 => Kind::File,
            2 => Kind::Dir,
            3 => Kind::Symlink,
            4 => Kind::Fifo,
            5 => Kind::CharDev,
            6 => Kind::BlockDev,
            7 => Kind::Socket,
            _ => return Err(crate::error::corrupt(format!("entry kind {c}"))),
        })
    }
}

/// A directory entry: the child's name, kind, inode number and the OSD
/// holding its first object (where its metadata is).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dirent {
    /// Name in the directory.
    pub name: String,
    /// Kind of the child.
    pub kind: Kind,
    /// Inode number (its first object is `data_oid(ino)`).
    pub ino: u64,
    /// OSD of the first object.
    pub osd: u32,
}

/// A hash-page or list-page value: an entry plus the chain fields. The mark
/// bit says a collision-path operation owns the chain (fast paths, which
/// compare against unmarked values, then fail and take the slow path);
/// `next` is the list-page slot of the following entry (0 = end).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slot {
    /// Chain owned by a slow-path operation.
    pub mark: bool,
    /// Next list-page slot (0 = none).
    pub next: u32,
    /// The entry.
    pub ent: Dirent,
}

const SLOT_FIXED: usize = 1 + 1 + 4 + 1 + 8 + 4;

impl Slot {
    /// An unchained, unmarked slot holding `ent`.
    pub fn new(ent: Dirent) -> Slot {
        Slot {
            mark: false,
            next: 0,
            ent,
        }
    }

    /// Bytes: version, flags (bit 0 = mark), next (u32 LE), kind, ino (u64
    /// LE), osd (u32 LE), name (UTF-8, the rest).
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(SLOT_FIXED + self.ent.name.len());
        v.push(FORMAT_VERSION);
        v.push(u8::from(self.mark));
        v.extend_from_slice(&self.next.to_le_bytes());
        v.push(self.ent.kind.code());
        v.extend_from_slice(&self.ent.ino.to_le_bytes());
        v.extend_from_slice(&self.ent.osd.to_le_bytes());
        v.extend_from_slice(self.ent.name.as_bytes());
        v
    }

    /// Parses [`Slot::encode`]'s bytes.
    pub fn decode(b: &[u8]) -> Result<Slot> {
        if b.len() < SLOT_FIXED + 1 {
            return Err(crate::error::corrupt(format!(
                "directory slot of {} bytes (at least {} needed)",
                b.len(),
                SLOT_FIXED + 1
            )));
        }
        if b[0] != FORMAT_VERSION {
            return Err(crate::error::corrupt(format!(
                "directory slot format version {} (this build reads {FORMAT_VERSION})",
                b[0]
            )));
        }
        if b[1] & !1 != 0 {
            return Err(crate::error::corrupt(format!(
                "directory slot flags {:#x}",
                b[1]
            )));
        }
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let mut ino = [0u8; 8];
        ino.copy_from_slice(&b[7..15]);
        let name = std::str::from_utf8(&b[SLOT_FIXED..])
            .map_err(|_| crate::error::corrupt("directory entry name is not UTF-8"))?;
        if posix::raw_len(name) > NAME_MAX || name.contains('/') || name.contains('\0') {
            return Err(crate::error::corrupt(format!(
                "directory entry name {name:?}"
            )));
        }
        Ok(Slot {
            mark: b[1] & 1 != 0,
            next: u32_at(2),
            ent: Dirent {
                name: name.to_string(),
                kind: Kind::from_code(b[6])?,
                ino: u64::from_le_bytes(ino),
                osd: u32_at(15),
            },
        })
    }
}

/// How a directory's entries are inserted and removed (Ali et al. §V-B).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Protocol {
    /// One compare-and-swap per insert or remove.
    Atomic,
    /// Lock the directory, look up, change, unlock.
    Lock,
}

impl Protocol {
    /// Parses "atomic" or "lock".
    pub fn parse(s: &str) -> std::result::Result<Protocol, proto::UnknownName> {
        match s {
            "atomic" => Ok(Protocol::Atomic),
            "lock" => Ok(Protocol::Lock),
            _ => Err(proto::UnknownName {
                what: "directory protocol",
                got: s.into(),
                expected: "atomic or lock",
            }),
        }
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Atomic => "atomic",
            Protocol::Lock => "lock",
        }
    }
}

/// Fixed when a directory is made: how its entries are hashed and which
/// protocol changes them (inherited by subdirectories).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirHeader {
    /// Format version.
    pub version: u8,
    /// Hash function.
    pub hash: DirHash,
    /// Insert/remove protocol.
    pub protocol: Protocol,
}

/// A file's layout as the inode keeps it: the spec and the OSD-map epoch
/// its stripes were placed with (all stripes share the object id
/// `data_oid(ino)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct InodeLayout {
    /// Stripe unit, count, object size (always 0 here: one object set).
    pub spec: LayoutSpec,
    /// Map epoch of placement.
    pub map_epoch: u64,
}

/// An inode's metadata, kept in attribute [`INODE`] of its first object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inode {
    /// Format version.
    pub version: u8,
    /// Kind.
    pub kind: Kind,
    /// Permission bits (0o7777).
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Names referring to it (files); directories keep 2.
    pub nlink: u32,
    /// Length in bytes (symlinks: target length).
    pub size: u64,
    /// Times, ns since the epoch.
    pub atime: i64,
    /// Last data change.
    pub mtime: i64,
    /// Last status change.
    pub ctime: i64,
    /// The directory it was made in or last moved to: (ino, OSD). For
    /// directories this is `..`; fsck uses it to find half-done moves.
    pub parent: (u64, u32),
    /// Files: where the data is.
    pub layout: Option<InodeLayout>,
    /// Symlinks: the target.
    pub target: Option<String>,
    /// Devices: the device number (0 for everything else).
    pub rdev: u32,
}

/// Encodes a versioned postcard value.
pub fn encode<T: Serialize>(v: &T) -> Vec<u8> {
    postcard::to_allocvec(v).unwrap_or_else(|e| unreachable!("postcard on owned data: {e}"))
}

/// Decodes a postcard value, naming `what` on failure; trailing bytes are
/// an error.
pub fn decode<'a, T: Deserialize<'a>>(what: &str, b: &'a [u8]) -> Result<T> {
    let (v, rest) =
        postcard::take_from_bytes(b).map_err(|e| crate::error::corrupt(format!("{what}: {e}")))?;
    if !rest.is_empty() {
        return Err(crate::error::corrupt(format!(
            "{what}: {} trailing bytes",
            rest.len()
        )));
    }
    Ok(v)
}

impl Inode {
    /// Bytes of the record.
    pub fn encode(&self) -> Vec<u8> {
        encode(self)
    }

    /// Parses and checks the version.
    pub fn decode(b: &[u8]) -> Result<Inode> {
        let i: Inode = decode("inode record", b)?;
        if i.version != FORMAT_VERSION {
            return Err(crate::error::corrupt(format!(
                "inode record format version {}",
                i.version
            )));
        }
        // A layout that would divide by zero or overflow in the data path
        // (a stripe unit of 0, a stripe count of 0) is damage, not a file.
        if let Some(l) = &i.layout {
            l.spec
                .validate()
                .map_err(|e| crate::error::corrupt(format!("inode record layout: {e}")))?;
        }
        Ok(i)
    }
}

impl DirHeader {
    /// Bytes of the header.
    pub fn encode(&self) -> Vec<u8> {
        encode(self)
    }

    /// Parses and checks the version.
    pub fn decode(b: &[u8]) -> Result<DirHeader> {
        let h: DirHeader = decode("directory header", b)?;
        if h.version != FORMAT_VERSION {
            return Err(crate::error::corrupt(format!(
                "directory header format version {}",
                h.version
            )));
        }
        Ok(h)
    }
}

/// A lock or "in progress" mark with an owner and an expiry: once expired
/// another client may take it over (the owner is presumed dead).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// Format version.
    pub version: u8,
    /// The owning client (random per client).
    pub owner: u64,
    /// Expiry, ms since the epoch.
    pub expiry_ms: u64,
}

impl Lease {
    /// Bytes of the lease.
    pub fn encode(&self) -> Vec<u8> {
        encode(self)
    }

    /// Parses a lease.
    pub fn decode(b: &[u8]) -> Result<Lease> {
        decode("lease", b)
    }
}

/// A rename in progress, recorded on the moved inode's first object before
/// the new name is inserted and cleared after the old one is removed.
/// Recovery: if the destination entry names the moved inode, the rename
/// finishes (old entry removed, replaced inode dropped); otherwise it is
/// undone (intent cleared).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Intent {
    /// Format version.
    pub version: u8,
    /// Source directory (ino, OSD) and name.
    pub src: ((u64, u32), String),
    /// Destination directory (ino, OSD) and name.
    pub dst: ((u64, u32), String),
    /// The destination entry it replaces, if any: (kind, ino, OSD).
    pub replaced: Option<(Kind, u64, u32)>,
    /// When it was written (ms since the epoch).
    pub at_ms: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn slots_round_trip(mark: bool, next: u32, k in 0u8..7, ino: u64, osd: u32,
                            name in "[a-zA-Z0-9._ -]{1,255}") {
            let s = Slot {
                mark,
                next,
                ent: Dirent { name, kind: Kind::from_code(k + 1).unwrap(), ino, osd },
            };
            prop_assert_eq!(Slot::decode(&s.encode()).unwrap(), s);
        }

        #[test]
        fn garbage_slots_are_errors_not_panics(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = Slot::decode(&b);
            let _ = Inode::decode(&b);
            let _ = DirHeader::decode(&b);
            let _ = Lease::decode(&b);
            let _ = decode::<Intent>("intent", &b);
        }
    }

    #[test]
    fn bad_slots_say_what_is_wrong() {
        let s = Slot::new(Dirent {
            name: "a".into(),
            kind: Kind::File,
            ino: 7,
            osd: 1,
        })
        .encode();
        let mut v = s.clone();
        v[0] = 9;
        assert!(
            Slot::decode(&v)
                .unwrap_err()
                .message
                .contains("format version 9")
        );
        let mut v = s.clone();
        v[6] = 8;
        assert!(
            Slot::decode(&v)
                .unwrap_err()
                .message
                .contains("entry kind 8")
        );
        assert!(
            Slot::decode(&s[..5])
                .unwrap_err()
                .message
                .contains("5 bytes")
        );
        let mut v = s;
        v.push(b'/');
        assert!(Slot::decode(&v).unwrap_err().message.contains("name"));
    }

    #[test]
    fn an_inode_record_with_an_impossible_layout_is_damage_not_a_file() {
        let mut i = Inode {
            version: FORMAT_VERSION,
            kind: Kind::File,
            mode: 0o644,
            uid: 0,
            gid: 0,
            nlink: 1,
            size: 0,
            atime: 0,
            mtime: 0,
            ctime: 0,
            parent: (1, 0),
            layout: Some(InodeLayout {
                spec: LayoutSpec::default(),
                map_epoch: 1,
            }),
            target: None,
            rdev: 0,
        };
        assert!(Inode::decode(&i.encode()).is_ok());
        for (su, sc) in [(0, 1), (4096, 0), (1000, 1)] {
            i.layout = Some(InodeLayout {
                spec: LayoutSpec {
                    stripe_unit: su,
                    stripe_count: sc,
                    object_size: 0,
                    ..LayoutSpec::default()
                },
                map_epoch: 1,
            });
            let e = Inode::decode(&i.encode()).unwrap_err();
            assert_eq!(e.raw(), libc::EIO, "{e}");
            assert!(e.message.contains("layout"), "{e}");
        }
    }
}
