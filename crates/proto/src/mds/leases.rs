//! Directory leases as the protocol carries them: the operations a lease
//! holder sends in batches, the lease itself, and the listings a directory
//! read brings along.

use serde::{Deserialize, Serialize};

use super::{Attr, DirEntry, FileKind, SetAttr};

/// Most changes one [`Op::DirOps`] carries.
pub const DIR_OPS_MAX: usize = 256;

/// Directories with more names get no lease (their names would cost more
/// to send than the lease saves).
pub const LEASE_NAMES_MAX: usize = 10_000;

/// Inode numbers the MDS delegates with a lease, and keeps delegated to
/// its holder at least (topped up with a [`MdsReply::DirDone`] once half
/// are used).
pub const LEASE_IDS: usize = 64;

/// Most inode numbers the MDS keeps delegated to one lease's holder: a
/// holder that makes many files between batches gets up to this many, so
/// it does not run out before the next top-up arrives.
///
/// No more than a batch's worth: with the default geometry a directory
/// has 1,024 nearby file numbers, and numbers a lease gives back unused
/// are never used again, so a larger pool would spend a directory's
/// nearby numbers (and the prefetch's locality) in a few leases.
pub const LEASE_IDS_MAX: usize = DIR_OPS_MAX;

/// How long a holder may use a lease after its last answered request
/// about it (the grant or a [`Op::DirOps`]): the MDS keeps it for twice
/// this since it last heard of it, so changes sent in time arrive in it.
pub const LEASE_TERM_MS: u64 = 5_000;

/// One change made by the holder of a directory's lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum DirOp {
    /// A regular file made with `O_CREAT|O_EXCL` semantics.
    Create {
        /// Its name.
        name: String,
        /// The inode number (delegated to the session).
        ino: u64,
        /// Permission bits, as the create asked (the session holds the
        /// file open, as after a synchronous create, until its next
        /// report of what it holds).
        mode: u32,
    },
    /// A name of a non-directory removed.
    Unlink {
        /// The name.
        name: String,
        /// The inode it named.
        ino: u64,
    },
    /// Attributes of a file made under the lease changed (chmod, chown,
    /// utimens): never a length, never a change that takes a right away
    /// (both go to the MDS as SETATTR). Checked as SETATTR would be.
    SetAttr {
        /// Its name in the directory.
        name: String,
        /// The inode it names.
        ino: u64,
        /// The change (`size` must be `None`).
        set: SetAttr,
    },
}

impl DirOp {
    /// The name it changes.
    pub fn name(&self) -> &str {
        match self {
            DirOp::Create { name, .. }
            | DirOp::Unlink { name, .. }
            | DirOp::SetAttr { name, .. } => name,
        }
    }
}

/// A lease on a directory's names, as granted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirLease {
    /// The directory's attributes when granted.
    pub attr: Attr,
    /// Every name in it: (name, inode, kind).
    pub names: Vec<(String, u64, FileKind)>,
    /// Inode numbers for new files, in the order to use them.
    pub ids: Vec<u64>,
}

/// Most directories whose listings one READDIR PREFETCH carries.
pub const LISTINGS_MAX_DIRS: usize = 64;
/// Most entries, over all its listings, one READDIR PREFETCH carries.
pub const LISTINGS_MAX_ENTRIES: usize = 4096;

/// A whole directory listing with attributes (prefetched).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Listing {
    /// The directory.
    pub ino: u64,
    /// Every entry, in name order, with attributes.
    pub entries: Vec<DirEntry>,
}
