//! Messages between clients (and OSDs) and the metadata server. They travel
//! in the same frames as OSD messages ([`crate::frame`]): a Hello naming
//! [`MDS_ID`], then `Request` frames carrying an [`MdsRequest`] and
//! `Response` frames carrying an [`MdsResponse`]. No bulk payloads.

use serde::{Deserialize, Serialize};

use crate::layout::{Layout, LayoutSpec};
use crate::placement::OsdMap;

pub use crate::errno::Errno;
pub use crate::replay::{
    EarlyReply, REPLAY_MAX, REPLAY_MAX_BYTES, ReplayOp, SEAL_LEN, replay_footprint,
};

mod attrs;
mod classes;
pub use classes::OpClass;
mod leases;
mod principals;

pub use crate::report::{OsdLoad, OsdReport, StoreMark};
pub use crate::status::{ClusterStatus, Health, OsdRates, OsdStatus, Redundancy, ScrubReport};
pub use attrs::*;
pub use leases::*;
pub use principals::*;

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
    /// Operator: a replica group that lost every full copy (its members'
    /// stores came back new or older) is served again from OSD `osd`'s
    /// copy as it is — older, or empty — accepting the loss of anything
    /// newer; the other members are then filled whole from it. Refused
    /// for a group that still has a member, and for an OSD that is not
    /// up and in.
    AdoptGroup {
        /// The replica group.
        group: u32,
        /// The OSD whose copy the group adopts (it becomes the head).
        osd: u32,
    },
    /// Operator, replicated MDS group: add member `id` (a directory made
    /// by `tessera mds join`) as a learner; the leader makes it a voting
    /// member once it has caught up. Refused for an id the group has or
    /// had, and by an MDS that is not a group's leader.
    GroupAdd {
        /// The new member's id (never reused).
        id: u64,
        /// Where clients and OSDs reach it while it leads (`host:port`).
        addr: String,
        /// Where the other members reach it (`host:port`).
        peer: String,
    },
    /// Operator, replicated MDS group: remove member `id` (voting or
    /// not). Refused when it would leave the group without a voter.
    GroupRemove {
        /// The member.
        id: u64,
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
        /// The files this batch made: entry, layout and write capabilities
        /// as a CREATE answers them (no prefetch, no range grants), so the first
        /// write to a file made under the lease needs no OPEN. A file the
        /// MDS could not describe is left out (the client then opens it).
        made: Vec<Found>,
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

/// [`MdsError::new`], short: the one helper every layer that answers
/// with an MDS error uses (the namespace, layouts, delegation, POSIX rules
/// and the service).
pub fn err(errno: Errno, message: impl Into<String>) -> MdsError {
    MdsError::new(errno, message)
}

/// A response from the MDS.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MdsResponse {
    /// Answer or error.
    pub result: Result<MdsReply, MdsError>,
}
