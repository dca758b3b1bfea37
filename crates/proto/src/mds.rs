//! Messages between clients (and OSDs) and the metadata server. They travel
//! in the same frames as OSD messages ([`crate::frame`]): a Hello naming
//! [`MDS_ID`], then `Request` frames carrying an [`MdsRequest`] and
//! `Response` frames carrying an [`MdsResponse`]. No bulk payloads.

use serde::{Deserialize, Serialize};

use crate::cap::Capability;
use crate::layout::{Layout, LayoutSpec};
use crate::placement::OsdMap;

pub use crate::replay::{
    EarlyReply, REPLAY_MAX, REPLAY_MAX_BYTES, ReplayOp, SEAL_LEN, replay_footprint,
};
pub use crate::report::{OsdLoad, OsdReport, StoreMark};
pub use crate::status::{ClusterStatus, Health, OsdRates, OsdStatus, Redundancy, ScrubReport};

/// The id a Hello names to reach the metadata server.
pub const MDS_ID: u32 = u32::MAX;
/// Longest name of one directory entry, in bytes.
pub const NAME_MAX: usize = 255;
/// Longest symlink target, in bytes.
pub const PATH_MAX: usize = 4096;
/// Longest extended-attribute name.
pub const XATTR_NAME_MAX: usize = 255;
/// Largest extended-attribute value.
pub const XATTR_VALUE_MAX: usize = 64 * 1024;
/// Most entries one readdir page returns.
pub const READDIR_MAX: u32 = 4096;
/// The inode number (namespace id) of the root directory.
pub const ROOT_INO: u64 = 0;

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

/// Metadata operations.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    /// Find `name` in `parent` (with prefetch).
    Lookup {
        /// Directory.
        parent: u64,
        /// Name.
        name: String,
    },
    /// Attributes of an inode.
    GetAttr {
        /// Inode.
        ino: u64,
    },
    /// Change attributes (chmod, chown, utimens, truncate).
    SetAttr {
        /// Inode.
        ino: u64,
        /// Changes.
        set: SetAttr,
    },
    /// Create a regular file (returns it opened for writing).
    Create {
        /// Directory.
        parent: u64,
        /// Name.
        name: String,
        /// Permission bits (umask already applied).
        mode: u32,
        /// Fail with EEXIST if the name exists (O_EXCL); else open it.
        exclusive: bool,
    },
    /// Make a directory.
    Mkdir {
        /// Directory.
        parent: u64,
        /// Name.
        name: String,
        /// Permission bits.
        mode: u32,
    },
    /// Make a symbolic link.
    Symlink {
        /// Directory.
        parent: u64,
        /// Name.
        name: String,
        /// Target path.
        target: String,
    },
    /// Make a FIFO, device or socket (`mknod`).
    Mknod {
        /// Directory.
        parent: u64,
        /// Name.
        name: String,
        /// Which (a special kind; devices need root).
        kind: FileKind,
        /// Permission bits (umask already applied).
        mode: u32,
        /// Device number (devices; 0 otherwise).
        rdev: u32,
    },
    /// Add a hard link to a file.
    Link {
        /// The file.
        ino: u64,
        /// Directory of the new name.
        parent: u64,
        /// New name.
        name: String,
    },
    /// Remove a non-directory name. Answers the directory's attributes
    /// after the removal.
    Unlink {
        /// Directory.
        parent: u64,
        /// Name.
        name: String,
    },
    /// Remove an empty directory. Answers the parent's attributes after
    /// the removal.
    Rmdir {
        /// Directory.
        parent: u64,
        /// Name.
        name: String,
    },
    /// Move a name, atomically replacing the target by POSIX rules.
    Rename {
        /// Source directory.
        parent: u64,
        /// Source name.
        name: String,
        /// Target directory.
        new_parent: u64,
        /// Target name.
        new_name: String,
        /// Fail with EEXIST instead of replacing (RENAME_NOREPLACE).
        noreplace: bool,
    },
    /// A symlink's target.
    Readlink {
        /// Inode.
        ino: u64,
    },
    /// One page of a directory, in name order after `after`.
    Readdir {
        /// Directory.
        ino: u64,
        /// Continue after this name.
        after: Option<String>,
        /// Most entries (≤ READDIR_MAX).
        max: u32,
        /// Return attributes too (readdirplus).
        plus: bool,
    },
    /// File-system totals.
    Statfs,
    /// Read an extended attribute.
    GetXattr {
        /// Inode.
        ino: u64,
        /// Name.
        name: String,
    },
    /// Set an extended attribute.
    SetXattr {
        /// Inode.
        ino: u64,
        /// Name.
        name: String,
        /// Value.
        value: Vec<u8>,
        /// Create/replace rule.
        mode: XattrMode,
    },
    /// Names of an inode's extended attributes.
    ListXattr {
        /// Inode.
        ino: u64,
    },
    /// Remove an extended attribute.
    RemoveXattr {
        /// Inode.
        ino: u64,
        /// Name.
        name: String,
    },
    /// Capabilities for a file's objects (open, or renewal before expiry).
    Open {
        /// Inode.
        ino: u64,
        /// Whether writing is wanted.
        write: bool,
    },
    /// The request's session's open files (sent every
    /// [`HOLD_INTERVAL_MS`] while it has any, and once after it closed
    /// its last): the MDS keeps them alive past their last name until the
    /// session stops holding them or goes silent.
    Holding {
        /// (inode, opened for writing), at most [`HELD_MAX`].
        held: Vec<(u64, bool)>,
    },
    /// The client wrote up to `size` bytes (only ever grows the length).
    CommitSize {
        /// Inode.
        ino: u64,
        /// New length if larger.
        size: u64,
        /// Modification time.
        mtime: i64,
    },
    /// Allocate object sets up to `objset` (files with a bounded object size).
    ExtendLayout {
        /// Inode.
        ino: u64,
        /// Highest object set needed.
        objset: u64,
    },
    /// The layout of a file, or a directory's default for new files.
    GetLayout {
        /// Inode.
        ino: u64,
    },
    /// Set a directory's default layout, or an empty file's layout.
    SetLayout {
        /// Inode.
        ino: u64,
        /// Parameters.
        spec: LayoutSpec,
    },
    /// The OSD map (current, or a past epoch a file was placed with).
    GetMap {
        /// Epoch, or the current one.
        epoch: Option<u64>,
    },
    /// An OSD registers or heartbeats.
    Report(OsdReport),
    /// Cluster status: OSDs up/down with space, request counts.
    Status,
    /// Resolve a path from the root, one entry per component.
    Resolve {
        /// Absolute path.
        path: String,
    },
    /// Namespace-on-OSDs mode: the map and a capability over every
    /// namespace object (what a client needs to work without the MDS).
    NamespaceGrant,
    /// Namespace-on-OSDs mode: record the root directory's OSD (first
    /// caller wins; the answer says the recorded one).
    NamespaceRoot {
        /// OSD holding the root directory object.
        osd: u32,
    },
    /// A write to a copy failed: record the copy as stale (durably, and
    /// fenced from readers) before the write is acknowledged. Answers the
    /// file's entry with its new layout.
    MarkStale {
        /// Inode.
        ino: u64,
        /// Object set.
        objset: u64,
        /// Stripe.
        stripe: u32,
        /// OSD whose copy missed the write.
        osd: u32,
    },
    /// Operator: mark an OSD out (its copies are re-made elsewhere) or
    /// back in. Refused when it would leave an object without a fresh
    /// copy, unless `force`.
    SetOsdOut {
        /// OSD id.
        osd: u32,
        /// Out (true) or in (false).
        out: bool,
        /// Even if objects would have no fresh copy left.
        force: bool,
    },
    /// Compare every copy of the objects under `ino` (a file, or a
    /// directory's whole subtree; the root = everything) and repair
    /// those that differ.
    Scrub {
        /// Where to start.
        ino: u64,
        /// Compare every block's content (else sizes and versions).
        deep: bool,
    },
    /// A ticket for OSD `osd`: what the caller presents there to connect.
    Ticket {
        /// The OSD.
        osd: u32,
    },
    /// Who the caller is: its principal, root, access and uid mapping.
    Whoami,
    /// Add a principal (admin only); the reply carries its key, wrapped
    /// with the caller's key.
    AuthAdd(PrincipalSpec),
    /// List principals (admin only).
    AuthList,
    /// Remove a principal (admin only): its connections stop at once.
    AuthRemove {
        /// Principal name.
        name: String,
    },
    /// Give a principal a new key (admin only): the old one stops working
    /// at once at the MDS, at the OSDs when its tickets expire.
    AuthRotate {
        /// Principal name.
        name: String,
    },
    /// GETATTR with prefetch: answers `Found` — the inode's entry (under
    /// its first name; an orphan's is not to be cached by name), the read
    /// grants its caller may have, and the neighbours the request's
    /// `prefetch` asks for, as LOOKUP does.
    Stat {
        /// Inode.
        ino: u64,
    },
    /// READDIR (always with attributes) whose first page also carries
    /// whole listings of directories below `ino` — breadth first, those the
    /// caller may list, within [`LISTINGS_MAX_DIRS`] and
    /// [`LISTINGS_MAX_ENTRIES`] — as the request's `prefetch` asks (0: none).
    /// Answers [`MdsReply::DirPrefetch`].
    ReaddirPrefetch {
        /// Directory.
        ino: u64,
        /// Continue after this name.
        after: Option<String>,
        /// Most entries (≤ READDIR_MAX).
        max: u32,
    },
    /// Wait until every operation the MDS has acknowledged is durable
    /// (fsync of a directory, syncfs, unmount). Answers [`MdsReply::Synced`].
    Sync,
    /// Sent first on every new connection by a client that asks for early
    /// answers: the namespace changes this session saw acknowledged early
    /// and not yet durable, for a restarted MDS to redo in their original
    /// order (an MDS that did not restart has them all). Answers
    /// [`MdsReply::Replayed`].
    Replay {
        /// The MDS instance that acknowledged them.
        instance: u64,
        /// In transno order, at most [`REPLAY_MAX`].
        ops: Vec<ReplayOp>,
    },
    /// (An OSD, namespace on the OSDs with replicas.) The replica chains,
    /// where its successors listen, and what it presents to them.
    /// Answers [`MdsReply::Chains`].
    Chains,
    /// (An OSD.) It could not pass an effect to `osd`, its successor in
    /// `group`'s chain at `epoch`: drop `osd` once it is down (at once if
    /// it `refused` the effect). Answers
    /// [`MdsReply::Chains`] after the change, or unchanged when `osd` is
    /// still up after a lease.
    ChainDrop {
        /// The group.
        group: u32,
        /// The chain's epoch the caller saw.
        epoch: u64,
        /// The successor that failed.
        osd: u32,
        /// It answered, with an error it gives every time (it is alive but
        /// cannot take the effect): dropped at once, without waiting for
        /// it to be down.
        refused: bool,
    },
    /// (An OSD.) It started again without having shut down cleanly: it
    /// may hold changes it never passed down, or have lost its store.
    /// A store the MDS does not know (`store`) leaves every chain; else
    /// every chain where another full member is heard from drops it (it
    /// is filled again later), and one where none is keeps it alone.
    /// Answers [`MdsReply::Chains`].
    ChainRestarted {
        /// The store it runs on now.
        store: StoreMark,
    },
    /// (An OSD.) It has filled `osd`, the first joining member after it
    /// in `group`'s chain at `epoch`: count `osd` as a full member.
    /// Answers [`MdsReply::Chains`].
    ChainFilled {
        /// The group.
        group: u32,
        /// The chain's epoch the fill ran under.
        epoch: u64,
        /// The member filled.
        osd: u32,
    },
    /// A lease on a directory's names ([`MdsReply::Lease`]): while it
    /// lasts, no other session changes or reads the directory's names, so
    /// the holder may create and remove files in it on its own and send
    /// the changes after ([`Op::DirOps`]). Refused (EBUSY) while another
    /// session holds it or the directory is too large; needs write and
    /// search permission on it and a principal whose uids are trusted.
    DirLease {
        /// The directory.
        dir: u64,
    },
    /// Changes the holder of a directory's lease made on its own, applied
    /// in order, each checked as the synchronous request would be; each
    /// create names an inode number the MDS delegated to the session.
    /// Idempotent: a create whose name already names its inode, or a
    /// removal whose name no longer names its inode, is already done.
    /// Answers [`MdsReply::DirDone`].
    DirOps {
        /// The directory.
        dir: u64,
        /// At most [`DIR_OPS_MAX`], in the order they were made.
        ops: Vec<DirOp>,
    },
    /// Gives a directory's lease back (the unused delegated inode numbers
    /// with it). Answers [`MdsReply::Done`].
    DirRelease {
        /// The directory.
        dir: u64,
    },
    /// Sets or removes a byte-range lock of the session's owner on `ino`
    /// (EAGAIN when another owner's lock conflicts; EBUSY while a
    /// restarted MDS waits for sessions to reclaim their locks).
    Lock {
        /// Inode.
        ino: u64,
        /// The lock.
        lock: crate::locks::LockSpec,
    },
    /// Which lock of another owner would conflict with `lock` (F_GETLK).
    TestLock {
        /// Inode.
        ino: u64,
        /// The lock that would be asked for.
        lock: crate::locks::LockSpec,
    },
    /// The session's locks (sent every [`HOLD_INTERVAL_MS`] while it holds
    /// any): keeps them alive, and re-takes them at a restarted MDS.
    LocksHeld {
        /// (inode, lock), at most [`crate::locks::LOCKS_REPORT_MAX`].
        locks: Vec<(u64, crate::locks::LockSpec)>,
    },
}

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
}

impl DirOp {
    /// The name it changes.
    pub fn name(&self) -> &str {
        match self {
            DirOp::Create { name, .. } | DirOp::Unlink { name, .. } => name,
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

/// What a principal may do, as an operator asks for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrincipalSpec {
    /// `client.NAME`.
    pub name: String,
    /// Absolute path of the subtree it is confined to (`/` = everything).
    pub path: String,
    /// Read-only or read-write.
    pub access: Access,
    /// How its claimed uids are treated.
    pub uids: UidMap,
    /// May manage principals and OSDs (out/in, scrub).
    pub admin: bool,
}

/// Read-only or read-write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Access {
    /// Every change refused with EROFS.
    ReadOnly,
    /// Changes allowed (as permissions allow).
    ReadWrite,
}

/// How the MDS treats the uid and gids a principal's requests claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum UidMap {
    /// As claimed (root included): for trusted hosts.
    Trusted,
    /// As claimed, but uid 0 and gid 0 become nobody (65534).
    SquashRoot,
    /// Always this uid and gid, whatever is claimed.
    Fixed {
        /// User id.
        uid: u32,
        /// Group id.
        gid: u32,
    },
}

impl UidMap {
    /// The credentials the MDS acts with when a request claims `c`.
    pub fn apply(&self, c: Creds) -> Creds {
        const NOBODY: u32 = 65534;
        match *self {
            UidMap::Trusted => c,
            UidMap::SquashRoot => {
                let sq = |x: u32| if x == 0 { NOBODY } else { x };
                Creds {
                    uid: sq(c.uid),
                    gid: sq(c.gid),
                    groups: c.groups.into_iter().map(sq).collect(),
                }
            }
            UidMap::Fixed { uid, gid } => Creds {
                uid,
                gid,
                groups: Vec::new(),
            },
        }
    }

    /// Parses `trusted`, `squash-root` or `fixed:UID:GID`.
    pub fn parse(s: &str) -> Result<UidMap, String> {
        match s {
            "trusted" => Ok(UidMap::Trusted),
            "squash-root" => Ok(UidMap::SquashRoot),
            _ => {
                let bad = || {
                    format!(
                        "uid mapping {s:?}: use trusted, squash-root or fixed:UID:GID (numbers)"
                    )
                };
                let rest = s.strip_prefix("fixed:").ok_or_else(bad)?;
                let (u, g) = rest.split_once(':').ok_or_else(bad)?;
                Ok(UidMap::Fixed {
                    uid: u.parse().map_err(|_| bad())?,
                    gid: g.parse().map_err(|_| bad())?,
                })
            }
        }
    }
}

impl std::fmt::Display for UidMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UidMap::Trusted => write!(f, "trusted"),
            UidMap::SquashRoot => write!(f, "squash-root"),
            UidMap::Fixed { uid, gid } => write!(f, "fixed:{uid}:{gid}"),
        }
    }
}

/// A principal as the MDS reports it (never with its key).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrincipalInfo {
    /// Its id (capabilities name it as their holder).
    pub id: u64,
    /// What it may do.
    pub spec: PrincipalSpec,
    /// Inode of its root directory.
    pub root_ino: u64,
    /// Current key version.
    pub key_version: u32,
    /// When it was added (ms since the epoch).
    pub created_ms: u64,
}

/// Where a file system's namespace lives, fixed at format time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum NamespaceMode {
    /// In the MDS's database (the MDS answers every metadata operation).
    #[default]
    Mds,
    /// On the OSDs (Ali et al.); the MDS only hands out maps and capabilities.
    Osd,
}

impl NamespaceMode {
    /// Parses "mds" or "osd".
    pub fn parse(s: &str) -> Result<NamespaceMode, crate::UnknownName> {
        match s {
            "mds" => Ok(NamespaceMode::Mds),
            "osd" => Ok(NamespaceMode::Osd),
            _ => Err(crate::UnknownName {
                what: "namespace mode",
                got: s.into(),
                expected: "mds or osd",
            }),
        }
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            NamespaceMode::Mds => "mds",
            NamespaceMode::Osd => "osd",
        }
    }
}

/// What a namespace-on-OSDs client gets from the MDS.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamespaceGrant {
    /// Current OSD map.
    pub map: OsdMap,
    /// Capabilities over all namespace objects.
    pub grant: Grant,
    /// OSD of the root directory, once it is made.
    pub root_osd: Option<u32>,
    /// Directory protocol to make the root with ("atomic" or "lock").
    pub dir_protocol: String,
    /// Layout of new files.
    pub layout: crate::layout::LayoutSpec,
    /// The replica chains, when the file system keeps copies (then
    /// `grant.caps` holds, per group, a capability for the group's head
    /// over the group's partition).
    pub chains: Option<crate::chain::ChainTable>,
}

/// What an OSD needs to take part in the replica chains.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainGrant {
    /// Every group's chain.
    pub table: crate::chain::ChainTable,
    /// Where the OSD's successors listen: (OSD, address).
    pub addrs: Vec<(u32, String)>,
    /// (group, successor, capability over the group's partition on the
    /// successor, held by the asking OSD).
    pub caps: Vec<(u32, u32, crate::cap::Capability)>,
    /// (successor, ticket naming the asking OSD, session key wrapped
    /// with the asking OSD's key).
    pub tickets: Vec<(u32, crate::auth::SealedTicket, Vec<u8>)>,
}

impl Op {
    /// Whether Hendricks et al. counts it as mandatory (it changes the namespace or
    /// the length, so it must reach the MDS at once; no prefetch avoids it).
    pub fn mandatory(&self) -> bool {
        self.may_answer_early()
            || matches!(
                self,
                Op::Mkdir { .. }
                    | Op::SetAttr { .. }
                    | Op::SetXattr { .. }
                    | Op::RemoveXattr { .. }
                    | Op::CommitSize { .. }
                    | Op::ExtendLayout { .. }
                    | Op::SetLayout { .. }
            )
    }

    /// Whether it is a metadata access at all (counted as mandatory or
    /// non-mandatory): a session's report of its open files is not.
    pub fn is_access(&self) -> bool {
        !matches!(
            self,
            Op::Holding { .. }
                | Op::Sync
                | Op::Replay { .. }
                | Op::DirRelease { .. }
                | Op::Lock { .. }
                | Op::TestLock { .. }
                | Op::LocksHeld { .. }
        )
    }

    /// Whether the MDS may answer it before it is durable (when the
    /// request asks for [`MdsRequest::early`]): changes whose only effects
    /// are in the MDS's own tables — namespace changes, a writer's length
    /// commit (a close), and a chmod, chown or utimens that sets no length
    /// (a truncate cuts objects on the OSDs first, so it stays durable).
    /// Not mkdir: a directory's inode number also fixes its children's
    /// numbering, so a replay could not make it again whatever was lost
    /// before it.
    pub fn may_answer_early(&self) -> bool {
        match self {
            Op::SetAttr { set, .. } => set.size.is_none(),
            _ => matches!(
                self,
                Op::Create { .. }
                    | Op::Symlink { .. }
                    | Op::Mknod { .. }
                    | Op::Link { .. }
                    | Op::Unlink { .. }
                    | Op::Rmdir { .. }
                    | Op::Rename { .. }
                    | Op::DirOps { .. }
                    | Op::CommitSize { .. }
            ),
        }
    }

    /// A short name for logs and metrics.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Lookup { .. } => "lookup",
            Op::GetAttr { .. } => "getattr",
            Op::SetAttr { .. } => "setattr",
            Op::Create { .. } => "create",
            Op::Mkdir { .. } => "mkdir",
            Op::Symlink { .. } => "symlink",
            Op::Mknod { .. } => "mknod",
            Op::Link { .. } => "link",
            Op::Unlink { .. } => "unlink",
            Op::Rmdir { .. } => "rmdir",
            Op::Rename { .. } => "rename",
            Op::Readlink { .. } => "readlink",
            Op::Readdir { .. } => "readdir",
            Op::Statfs => "statfs",
            Op::GetXattr { .. } => "getxattr",
            Op::SetXattr { .. } => "setxattr",
            Op::ListXattr { .. } => "listxattr",
            Op::RemoveXattr { .. } => "removexattr",
            Op::Open { .. } => "open",
            Op::Holding { .. } => "holding",
            Op::Lock { .. } => "lock",
            Op::TestLock { .. } => "testlock",
            Op::LocksHeld { .. } => "locksheld",
            Op::CommitSize { .. } => "commitsize",
            Op::ExtendLayout { .. } => "extendlayout",
            Op::GetLayout { .. } => "getlayout",
            Op::SetLayout { .. } => "setlayout",
            Op::GetMap { .. } => "getmap",
            Op::Report(_) => "report",
            Op::Status => "status",
            Op::Resolve { .. } => "resolve",
            Op::NamespaceGrant => "namespacegrant",
            Op::NamespaceRoot { .. } => "namespaceroot",
            Op::MarkStale { .. } => "markstale",
            Op::SetOsdOut { .. } => "setosdout",
            Op::Scrub { .. } => "scrub",
            Op::Ticket { .. } => "ticket",
            Op::Whoami => "whoami",
            Op::AuthAdd(_) => "authadd",
            Op::AuthList => "authlist",
            Op::AuthRemove { .. } => "authremove",
            Op::AuthRotate { .. } => "authrotate",
            Op::Stat { .. } => "stat",
            Op::ReaddirPrefetch { .. } => "readdir",
            Op::Sync => "sync",
            Op::Replay { .. } => "replay",
            Op::Chains => "chains",
            Op::ChainDrop { .. } => "chaindrop",
            Op::ChainFilled { .. } => "chainfilled",
            Op::ChainRestarted { .. } => "chainrestarted",
            Op::DirLease { .. } => "dirlease",
            Op::DirOps { .. } => "dirops",
            Op::DirRelease { .. } => "dirrelease",
        }
    }

    /// Opcode in the frame prefix (for traces; the header says the rest).
    pub fn opcode(&self) -> u16 {
        0x100
    }
}

/// How often a client session with open files tells the MDS which.
pub const HOLD_INTERVAL_MS: u64 = 2_000;

/// A session the MDS has not heard from for this long holds nothing (the
/// MDS's default; `hold_expiry_ms` in its configuration).
pub const HOLD_EXPIRY_MS: u64 = 4 * HOLD_INTERVAL_MS;

/// Most open files one session may report.
pub const HELD_MAX: usize = 65_536;

/// A request to the MDS.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MdsRequest {
    /// Caller identity.
    pub creds: Creds,
    /// Most related entries to prefetch with a lookup/open (server caps it).
    pub prefetch: u32,
    /// The client session (random per client; 0: none). An open or
    /// create counts as the session holding the file open: it outlives
    /// its last name while held, and a capability renewal or truncate
    /// through a handle the session holds is not checked against the
    /// permission bits again (POSIX checks them at open only).
    pub session: u64,
    /// The client keeps and replays early answers ([`EarlyReply`]): the
    /// MDS may answer an operation that [`Op::may_answer_early`] before
    /// it is durable.
    pub early: bool,
    /// The operation.
    pub op: Op,
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

/// Successful answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MdsReply {
    /// Lookup, create, mkdir, symlink, link, open.
    Found(Box<Found>),
    /// Attributes.
    Attr(Attr),
    /// A readdir page; `more` when entries follow the last one.
    Dir {
        /// Entries.
        entries: Vec<DirEntry>,
        /// Whether the directory has more.
        more: bool,
    },
    /// A symlink target.
    Target(String),
    /// Statfs.
    Statfs(FsStat),
    /// An extended attribute value.
    Xattr(Vec<u8>),
    /// Extended attribute names.
    XattrNames(Vec<String>),
    /// A layout (files) or a directory's default.
    Layout {
        /// The parameters.
        spec: LayoutSpec,
        /// The placed layout (files).
        layout: Option<Layout>,
    },
    /// An OSD map.
    Map(OsdMap),
    /// A report was accepted: the current epoch and when to report next.
    Reported {
        /// Map epoch.
        epoch: u64,
        /// Heartbeat interval.
        interval_ms: u64,
        /// How long, from sending this report, the OSD may serve clients
        /// without another accepted report (the MDS waits this long before
        /// it counts a silent OSD's copies as fenced).
        lease_ms: u64,
        /// Epoch of the replica chains (0 = none): the OSD asks for them
        /// again when it changes.
        chains_epoch: u64,
    },
    /// What a scrub found and did.
    Scrubbed(ScrubReport),
    /// Status.
    Status(Box<ClusterStatus>),
    /// Resolved path: one entry per component (root first).
    Path(Vec<Entry>),
    /// Namespace-on-OSDs credentials.
    Namespace(Box<NamespaceGrant>),
    /// A ticket for one OSD and its session key, wrapped with the
    /// caller's key ([`crate::auth::wrap_session_key`]).
    Ticket {
        /// What to present to the OSD.
        ticket: crate::auth::SealedTicket,
        /// The session key, wrapped.
        wrapped_key: Vec<u8>,
        /// When the ticket stops being accepted (ms since the epoch).
        expires_ms: u64,
    },
    /// One principal.
    Principal(Box<PrincipalInfo>),
    /// A principal with its new key, wrapped with the caller's key.
    PrincipalKey {
        /// The principal.
        info: Box<PrincipalInfo>,
        /// Its key, wrapped ([`crate::auth::wrap_session_key`]).
        wrapped_key: Vec<u8>,
    },
    /// Principals.
    Principals(Vec<PrincipalInfo>),
    /// Done, nothing to return.
    Done,
    /// A READDIR PREFETCH page: as [`MdsReply::Dir`], with prefetched
    /// listings (first page only).
    DirPrefetch {
        /// Entries.
        entries: Vec<DirEntry>,
        /// Whether the directory has more.
        more: bool,
        /// Whole listings of directories below it.
        listings: Vec<Listing>,
    },
    /// An answer given before the operation was durable.
    Early(Box<EarlyReply>),
    /// Everything acknowledged is durable, up to this transno.
    Synced {
        /// The durable transno.
        durable: u64,
    },
    /// What became of a replay: one result per operation, in order.
    Replayed {
        /// The MDS instance now answering.
        instance: u64,
        /// Per operation: redone or already had (Ok), or why not.
        results: Vec<Result<(), MdsError>>,
    },
    /// The replica chains and an OSD's part in them.
    Chains(Box<ChainGrant>),
    /// A directory's lease.
    Lease(Box<DirLease>),
    /// What became of an [`Op::DirOps`].
    DirDone {
        /// The changes refused: (index in the request, why).
        failed: Vec<(u32, MdsError)>,
        /// Another session waits for the directory: finish what is queued
        /// and give the lease back.
        contended: bool,
        /// More inode numbers for new files.
        ids: Vec<u64>,
        /// The directory's attributes after the changes.
        dir: Option<Attr>,
    },
    /// The lock of another owner a TEST LOCK found in the way, if any.
    LockedBy(Option<crate::locks::LockSpec>),
}

impl MdsReply {
    /// The inode an answer to a namespace change names (made, linked or
    /// moved; a removal's directory): what a replay of it must name again.
    pub fn named_ino(&self) -> Option<u64> {
        match self {
            MdsReply::Found(f) => Some(f.entry.attr.ino),
            MdsReply::Attr(a) => Some(a.ino),
            _ => None,
        }
    }
}

/// POSIX error numbers (Linux values), so clients and FUSE map them 1:1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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
        }
    }
}

impl From<Errno> for i32 {
    fn from(e: Errno) -> i32 {
        e.raw()
    }
}

/// An MDS error: the errno and what exactly was wrong.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{errno:?} (errno {}): {message}", errno.raw())]
pub struct MdsError {
    /// POSIX error.
    pub errno: Errno,
    /// Details for people.
    pub message: String,
}

impl MdsError {
    /// A new error.
    pub fn new(errno: Errno, message: impl Into<String>) -> Self {
        MdsError {
            errno,
            message: message.into(),
        }
    }
}

/// A response from the MDS.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MdsResponse {
    /// Answer or error.
    pub result: Result<MdsReply, MdsError>,
}
