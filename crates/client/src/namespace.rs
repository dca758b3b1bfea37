//! The one seam between the client and where the namespace lives. The
//! [`Client`](crate::Client) keeps what is the same in every mode — the
//! metadata cache, open files, write-back, the data path — and asks a
//! [`Namespace`] for everything else: the MDS ([`crate::on_mds`]), or the
//! directories kept on the OSDs ([`crate::on_osds`], which also makes the
//! POSIX checks the MDS would have made). Replicated I/O and other
//! namespaces go behind the same trait.
//!
//! Answers that name an inode come back as a [`Found`] (the entry, its
//! capabilities, and any prefetched neighbours); the client caches them.

use std::future::Future;
use std::pin::Pin;

use proto::layout::{Layout, LayoutSpec};
use proto::mds::{Attr, Creds, DirEntry, FileKind, Found, Listing, SetAttr, XattrMode};

use crate::error::Result;

/// What removing a name did, as far as the namespace knows.
#[derive(Debug, Clone, Default)]
pub struct Removed {
    /// The inode the name named (the client drops it from its cache).
    pub ino: Option<u64>,
    /// The directory's attributes after the removal.
    pub dir: Option<Attr>,
}

/// A namespace call in flight.
pub type NsFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T>> + Send + 'a>>;

/// Tells a namespace whether this client still has an inode open (so an
/// inode that loses its last name goes at the last release, not now).
pub type OpenHere<'a> = &'a (dyn Fn(u64) -> bool + Sync);

/// Where the namespace lives, seen from one client. Every call is made as
/// the caller `c`; errors carry the POSIX errno the mount returns.
/// What a rename's answer tells the client.
#[derive(Debug, Clone, Default)]
pub struct Renamed {
    /// The moved inode, when the namespace knows it.
    pub moved: Option<u64>,
    /// Its entry under the new name, with the target directory's
    /// attributes after the change (MDS namespace).
    pub found: Option<Found>,
    /// Nothing changed: both names were links to one file (POSIX: do
    /// nothing), so both stay.
    pub unchanged: bool,
}

impl Renamed {
    /// A rename whose answer names only the moved inode.
    pub fn of(moved: u64) -> Renamed {
        Renamed::moved(moved, false)
    }

    /// A rename of `moved` that changed nothing when `unchanged` (two
    /// links of one file).
    pub fn moved(moved: u64, unchanged: bool) -> Renamed {
        Renamed {
            moved: Some(moved),
            found: None,
            unchanged,
        }
    }
}

pub trait Namespace: Send + Sync {
    /// `name` in directory `parent`.
    fn lookup<'a>(&'a self, c: &'a Creds, parent: u64, name: &'a str) -> NsFuture<'a, Found>;

    /// Attributes of `ino`.
    fn getattr<'a>(&'a self, c: &'a Creds, ino: u64) -> NsFuture<'a, Attr>;

    /// Attributes of `ino` as a lookup-style answer with the neighbours
    /// the namespace prefetches with them, for the cache; `None` when this
    /// namespace prefetches nothing (the caller uses [`Namespace::getattr`]).
    fn stat<'a>(&'a self, _c: &'a Creds, _ino: u64) -> NsFuture<'a, Option<Found>> {
        Box::pin(async { Ok(None) })
    }

    /// chmod, chown, utimens, truncate (the client has written out its
    /// buffered data before a truncate; `set.via_handle` says it is made
    /// through a descriptor open for writing).
    fn setattr<'a>(&'a self, c: &'a Creds, ino: u64, set: &'a SetAttr) -> NsFuture<'a, Attr>;

    /// A regular file `name` in `parent`, made (or, unless `exclusive`,
    /// found) and opened for writing: its entry and write capabilities.
    fn create<'a>(
        &'a self,
        c: &'a Creds,
        parent: u64,
        name: &'a str,
        mode: u32,
        exclusive: bool,
    ) -> NsFuture<'a, Found>;

    /// A directory `name` in `parent`.
    fn mkdir<'a>(
        &'a self,
        c: &'a Creds,
        parent: u64,
        name: &'a str,
        mode: u32,
    ) -> NsFuture<'a, Found>;

    /// A symbolic link `name` in `parent` pointing at `target`.
    fn symlink<'a>(
        &'a self,
        c: &'a Creds,
        parent: u64,
        name: &'a str,
        target: &'a str,
    ) -> NsFuture<'a, Found>;

    /// A FIFO, device or socket `name` in `parent` (`rdev`: a device's number).
    fn mknod<'a>(
        &'a self,
        c: &'a Creds,
        parent: u64,
        name: &'a str,
        kind: FileKind,
        mode: u32,
        rdev: u32,
    ) -> NsFuture<'a, Found>;

    /// A new name `name` in `parent` for `ino`.
    fn link<'a>(
        &'a self,
        c: &'a Creds,
        ino: u64,
        parent: u64,
        name: &'a str,
    ) -> NsFuture<'a, Found>;

    /// Removes the name; says which inode it named and the directory's
    /// attributes after, when the namespace knows them.
    fn unlink<'a>(
        &'a self,
        c: &'a Creds,
        parent: u64,
        name: &'a str,
        open_here: OpenHere<'a>,
    ) -> NsFuture<'a, Removed>;

    /// Removes the empty directory `name`; the parent's attributes after,
    /// when the namespace knows them.
    fn rmdir<'a>(&'a self, c: &'a Creds, parent: u64, name: &'a str) -> NsFuture<'a, Option<Attr>>;

    /// Renames `from` to `to` atomically (POSIX replace rules; `noreplace`
    /// fails with EEXIST). Returns the moved inode when the namespace
    /// knows it (its ctime changed: the client's cached attributes of it
    /// are out of date).
    fn rename<'a>(
        &'a self,
        c: &'a Creds,
        from: (u64, &'a str),
        to: (u64, &'a str),
        noreplace: bool,
        open_here: OpenHere<'a>,
    ) -> NsFuture<'a, Renamed>;

    /// A symlink's target.
    fn readlink<'a>(&'a self, c: &'a Creds, ino: u64) -> NsFuture<'a, String>;

    /// Every entry of directory `ino`, in name order, with attributes.
    fn readdir<'a>(&'a self, c: &'a Creds, ino: u64) -> NsFuture<'a, Vec<DirEntry>>;

    /// [`Namespace::readdir`], with whole listings of directories below
    /// `ino` that the namespace prefetched with it (none by default).
    fn readdir_prefetch<'a>(
        &'a self,
        c: &'a Creds,
        ino: u64,
    ) -> NsFuture<'a, (Vec<DirEntry>, Vec<Listing>)> {
        Box::pin(async move { Ok((self.readdir(c, ino).await?, Vec::new())) })
    }

    /// Every entry of directory `ino` with its name, inode and kind only
    /// (what `ls` without `-l` needs; no attributes are fetched).
    fn readdir_names<'a>(&'a self, c: &'a Creds, ino: u64) -> NsFuture<'a, Vec<DirEntry>>;

    /// Extended attribute `name` of `ino`.
    fn getxattr<'a>(&'a self, c: &'a Creds, ino: u64, name: &'a str) -> NsFuture<'a, Vec<u8>>;

    /// Sets extended attribute `name` (create-only, replace-only or either).
    fn setxattr<'a>(
        &'a self,
        c: &'a Creds,
        ino: u64,
        name: &'a str,
        value: &'a [u8],
        mode: XattrMode,
    ) -> NsFuture<'a, ()>;

    /// Names of `ino`'s extended attributes.
    fn listxattr<'a>(&'a self, c: &'a Creds, ino: u64) -> NsFuture<'a, Vec<String>>;

    /// Removes extended attribute `name`.
    fn removexattr<'a>(&'a self, c: &'a Creds, ino: u64, name: &'a str) -> NsFuture<'a, ()>;

    /// A file's layout (`None` for directories and symlinks).
    fn layout<'a>(&'a self, c: &'a Creds, ino: u64) -> NsFuture<'a, Option<Layout>>;

    /// Sets a directory's default layout or an empty file's layout.
    fn set_layout<'a>(&'a self, c: &'a Creds, ino: u64, spec: LayoutSpec) -> NsFuture<'a, ()>;

    /// Opens `ino` (permission for reading, or writing if `write`): its
    /// entry and the capabilities for its objects. Also renews them.
    fn open<'a>(&'a self, c: &'a Creds, ino: u64, write: bool) -> NsFuture<'a, Found>;

    /// Object sets of file `ino` up to `objset`, with write capabilities.
    fn extend_layout<'a>(&'a self, c: &'a Creds, ino: u64, objset: u64) -> NsFuture<'a, Found>;

    /// Records the length and mtime this client's writes made (the length
    /// only grows).
    fn commit_size<'a>(
        &'a self,
        c: &'a Creds,
        ino: u64,
        size: u64,
        mtime: i64,
    ) -> NsFuture<'a, Attr>;

    /// The last handle of `ino` in this client closed.
    fn released<'a>(&'a self, ino: u64) -> NsFuture<'a, ()>;

    /// Removes the objects of files with no name left whose wait is over
    /// (`all`: of every waiting one), where this client removes them
    /// itself (the namespace on the OSDs); `open_here` says which are
    /// open in this client (they wait for their last release).
    fn remove_due<'a>(&'a self, _open_here: OpenHere<'a>, _all: bool) -> NsFuture<'a, ()> {
        Box::pin(async { Ok(()) })
    }

    /// Whether an open for reading may take `ino` though it has no name
    /// left (a name resolved just before an unlink or rename-over took it). The MDS
    /// decides by its sessions (no); with the namespace on the OSDs the
    /// client that removed the name keeps the objects for a cache window
    /// or its last release (yes: a read after that answers ESTALE).
    fn may_open_unlinked(&self, _ino: u64) -> bool {
        false
    }

    /// The files this client holds open now, (inode, for writing): a
    /// namespace that keeps unlinked files for their holders hears it
    /// every [`proto::mds::HOLD_INTERVAL_MS`] while there are any.
    fn holding(&self, held: Vec<(u64, bool)>) -> NsFuture<'_, ()>;

    /// Inodes in the file system, when the namespace counts them itself
    /// (`None`: the MDS's statfs says).
    fn inodes(&self) -> NsFuture<'_, Option<u64>>;
}
