//! What the MDS says about files: who asks (`Creds`), attributes,
//! entries and the capabilities granted with them, attribute changes,
//! lookups' answers with their prefetched neighbours, directory pages and
//! file-system statistics.

use serde::{Deserialize, Serialize};

use crate::cap::Capability;
use crate::layout::Layout;

/// Who is asking: the client machine is trusted to say (Hendricks et al.'s model).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Creds {
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
}

impl Creds {
    /// The superuser.
    pub fn root() -> Creds {
        Creds::default()
    }
}

/// What an inode is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FileKind {
    /// Regular file.
    File,
    /// Directory.
    Dir,
    /// Symbolic link.
    Symlink,
    /// Named pipe (FIFO).
    Fifo,
    /// Character device (its numbers in [`Attr::rdev`]).
    CharDev,
    /// Block device (its numbers in [`Attr::rdev`]).
    BlockDev,
    /// Unix-domain socket.
    Socket,
}

impl FileKind {
    /// A FIFO, device or socket: an inode with no data and no target,
    /// which the kernel, not the file system, serves once it is opened.
    pub fn is_special(self) -> bool {
        matches!(
            self,
            FileKind::Fifo | FileKind::CharDev | FileKind::BlockDev | FileKind::Socket
        )
    }

    /// A device (making one needs root, as `mknod(2)` does).
    pub fn is_device(self) -> bool {
        matches!(self, FileKind::CharDev | FileKind::BlockDev)
    }
}

/// POSIX attributes of an inode. Times are nanoseconds since the Unix epoch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attr {
    /// Inode number (also the object id of the file's first object set).
    pub ino: u64,
    /// Kind.
    pub kind: FileKind,
    /// Permission bits incl. setuid/setgid/sticky (0o7777).
    pub mode: u32,
    /// Hard links (directories: 2 + subdirectories).
    pub nlink: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Length in bytes (symlinks: target length; directories: entries).
    pub size: u64,
    /// Last access.
    pub atime: i64,
    /// Last data change.
    pub mtime: i64,
    /// Last status change.
    pub ctime: i64,
    /// Devices: the device number (Linux `dev_t` encoding, as `makedev`);
    /// 0 for everything else.
    pub rdev: u32,
}

/// One named inode as a lookup returns it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Directory holding the name.
    pub parent: u64,
    /// The name.
    pub name: String,
    /// Attributes.
    pub attr: Attr,
    /// Files: where the data is.
    pub layout: Option<Layout>,
}

/// Capabilities for an object-id range, one per OSD (each OSD has its own
/// key), all with the same rights and expiry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    /// Lowest object id covered.
    pub lo: u64,
    /// Highest object id covered.
    pub hi: u64,
    /// Rights (see [`crate::rights`]).
    pub rights: u32,
    /// Expiry, ms since the epoch (renew before).
    pub expiry_ms: u64,
    /// (OSD id, capability for it).
    pub caps: Vec<(u32, Capability)>,
}

impl Grant {
    /// The capability for OSD `osd`.
    pub fn cap_for(&self, osd: u32) -> Option<&Capability> {
        self.caps.iter().find(|c| c.0 == osd).map(|c| &c.1)
    }

    /// Whether it covers `oid` with at least `rights`.
    pub fn covers(&self, oid: u64, rights: u32) -> bool {
        (self.lo..=self.hi).contains(&oid) && self.rights & rights == rights
    }
}

/// A time to set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SetTime {
    /// The server's clock.
    Now,
    /// This instant (ns since the epoch).
    At(i64),
}

/// Attribute changes; `None` leaves a field alone.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SetAttr {
    /// New permission bits.
    pub mode: Option<u32>,
    /// New owner.
    pub uid: Option<u32>,
    /// New group.
    pub gid: Option<u32>,
    /// New length (truncate down or extend with a hole).
    pub size: Option<u64>,
    /// New access time.
    pub atime: Option<SetTime>,
    /// New modification time.
    pub mtime: Option<SetTime>,
    /// Made through a descriptor opened for writing (`ftruncate`): a
    /// truncate is then not checked against the file's permission bits,
    /// which POSIX checks at open only. The MDS honours it only if the
    /// request's session holds the file open for writing.
    pub via_handle: bool,
}

/// How SETXATTR treats an existing name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum XattrMode {
    /// Create or replace.
    Either,
    /// Fail with EEXIST if present.
    Create,
    /// Fail with ENODATA if absent.
    Replace,
}

/// A lookup-style answer: the entry, capabilities for its objects, and
/// prefetched neighbours (numerically closest ids) with their grants.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Found {
    /// The entry asked for.
    pub entry: Entry,
    /// Capabilities for its objects (files only).
    pub grants: Vec<Grant>,
    /// Prefetched entries.
    pub prefetch: Vec<Entry>,
    /// Range capabilities for the prefetched files.
    pub prefetch_grants: Vec<Grant>,
    /// After a change in a directory (create, mkdir, symlink, mknod,
    /// link): the directory's attributes as the change left them, so the
    /// client need not ask again for its times and link count.
    pub dir: Option<Attr>,
}

/// One readdir entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirEntry {
    /// Name.
    pub name: String,
    /// Inode.
    pub ino: u64,
    /// Kind.
    pub kind: FileKind,
    /// Attributes (readdirplus only).
    pub attr: Option<Attr>,
}

/// File-system totals.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsStat {
    /// Bytes of OSD capacity (OSDs up).
    pub capacity: u64,
    /// Bytes used.
    pub used: u64,
    /// Inodes in the namespace.
    pub inodes: u64,
    /// Longest name.
    pub name_max: u32,
}
