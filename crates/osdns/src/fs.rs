//! Namespace operations on the OSDs, each a short sequence of OSD commands
//! ordered so a client that dies between any two of them leaves nothing
//! that names a missing object: objects (with their attributes, in one
//! commit) are made before the entry that names them, entries are removed
//! before the objects they name. What an interrupted sequence can leave —
//! an orphan object, a leftover lock or mark, a half-done rename — is
//! finished or undone by [`crate::fsck`].
//!
//! This layer is mechanism only: POSIX permission checks are made by the
//! client above it (see `docs/OSD-NAMESPACE.md`, "Trust").

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use proto::layout::{LayoutSpec, data_oid};
use proto::mds::ROOT_INO;

use crate::error::{Errno, NsError, Result};
use crate::format::*;
use crate::hash::DirHash;
use crate::transport::{Osds, pick};

/// Inode numbers a client takes from the file-system counter at a time.
pub const ID_BATCH: u64 = 1024;

/// A directory as an operation needs it: inode, OSD and its fixed header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirRef {
    /// Inode number.
    pub ino: u64,
    /// OSD of its object.
    pub osd: u32,
    /// Hash and protocol.
    pub header: DirHeader,
}

/// A namespace client. Cheap to share (`Arc`); one per mount or tool.
pub struct OsdFs {
    /// Maps, capabilities, connections.
    pub osds: Arc<Osds>,
    /// This client's id in leases (random).
    pub owner: u64,
    /// How long locks and marks this client takes stay valid if it dies.
    pub lease: Duration,
    /// Layout of new files.
    pub layout: LayoutSpec,
    ids: tokio::sync::Mutex<(u64, u64)>,
    headers: Mutex<HashMap<u64, DirHeader>>,
    /// Inodes this client made minus removed, not yet added to the
    /// file system's counter.
    inode_delta: std::sync::atomic::AtomicI64,
}

/// A client adds its inode count to the shared counter once it is this
/// far off (and at every statfs).
const INODE_FLUSH: i64 = 256;

use proto::clock::now_ns;

/// A client id for leases: unique per process and instance in practice
/// (hash of the clock, the process id and a counter).
fn client_id() -> u64 {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut b = [0u8; 24];
    b[..8].copy_from_slice(&now_ns().to_le_bytes());
    b[8..16].copy_from_slice(&u64::from(std::process::id()).to_le_bytes());
    b[16..].copy_from_slice(&N.fetch_add(1, Ordering::Relaxed).to_le_bytes());
    xxhash_rust::xxh3::xxh3_64(&b) | 1
}

/// Checks a name with the shared rule (`posix::check_name`): 1..=255
/// bytes, no '/' or NUL, not "." or "..".
pub fn check_name(name: &str) -> Result<()> {
    Ok(posix::check_name(name)?)
}

/// Who makes an inode, with what.
#[derive(Debug, Clone, Copy)]
pub struct Owner {
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Permission bits.
    pub mode: u32,
    /// Devices: the device number (0 for everything else).
    pub rdev: u32,
}

impl OsdFs {
    /// A namespace client over `osds`; `lease` bounds how long a dead
    /// client's locks block others.
    pub fn new(osds: Arc<Osds>, lease: Duration, layout: LayoutSpec) -> OsdFs {
        OsdFs {
            osds,
            owner: client_id(),
            lease,
            layout,
            ids: tokio::sync::Mutex::new((0, 0)),
            headers: Mutex::new(HashMap::new()),
            inode_delta: std::sync::atomic::AtomicI64::new(0),
        }
    }

    /// Counts `n` inodes made (or removed, negative); adds the count to the
    /// file system's counter once it is [`INODE_FLUSH`] off.
    pub(crate) async fn count_inodes(&self, n: i64) -> Result<()> {
        let d = self.inode_delta.fetch_add(n, Ordering::Relaxed) + n;
        if d.abs() >= INODE_FLUSH {
            self.flush_inodes().await?;
        }
        Ok(())
    }

    async fn flush_inodes(&self) -> Result<u64> {
        let d = self.inode_delta.swap(0, Ordering::Relaxed);
        let root = (self.root_osd()?, data_oid(ROOT_INO));
        match self
            .osds
            .fetch_add(root.0, root.1, FS_INODES, d as u64)
            .await
        {
            Ok(old) => Ok((old as i64 + d).max(0) as u64),
            Err(e) => {
                self.inode_delta.fetch_add(d, Ordering::Relaxed);
                Err(e)
            }
        }
    }

    /// Inodes in the file system (this client's count added first; other
    /// clients' counts within [`INODE_FLUSH`] each).
    pub async fn inodes(&self) -> Result<u64> {
        self.flush_inodes().await
    }

    /// Sets the inode counter (fsck, after counting every inode).
    pub(crate) async fn set_inodes(&self, n: u64) -> Result<()> {
        let root = (self.root_osd()?, data_oid(ROOT_INO));
        self.osds
            .set(root.0, root.1, vec![(FS_INODES, n.to_le_bytes().to_vec())])
            .await
    }

    /// The root directory's OSD.
    pub fn root_osd(&self) -> Result<u32> {
        self.osds.creds().root_osd.ok_or_else(|| {
            NsError::new(
                Errno::Io,
                "the namespace on the OSDs is not made yet (run `tessera up --namespace osd`)",
            )
        })
    }

    /// Makes the root directory (once; later calls find it) with `protocol`
    /// and `hash` for it and, by inheritance, every directory below.
    pub async fn format(&self, protocol: Protocol, hash: DirHash) -> Result<DirRef> {
        if let Some(osd) = self.osds.creds().root_osd {
            return self.dir(ROOT_INO, osd).await;
        }
        let map = self.osds.map();
        let osd = *map.place(data_oid(ROOT_INO), 1).first().ok_or_else(|| {
            NsError::new(Errno::Io, "no OSD takes placements: cannot make the root")
        })?;
        let header = DirHeader {
            version: FORMAT_VERSION,
            hash,
            protocol,
        };
        let inode = self.new_inode(
            Kind::Dir,
            Owner {
                uid: 0,
                gid: 0,
                mode: 0o755,
                rdev: 0,
            },
            (ROOT_INO, osd),
            None,
            None,
        );
        let attrs = vec![
            (INODE, inode.encode()),
            (DIR_HEADER, header.encode()),
            (FS_NEXT_INO, 1u64.to_le_bytes().to_vec()),
            // The root is the first inode.
            (FS_INODES, 1u64.to_le_bytes().to_vec()),
        ];
        match self.osds.create(osd, data_oid(ROOT_INO), attrs).await {
            Err(e) if e.is(Errno::Exist) => {}
            r => r?,
        }
        let recorded = self.osds.authority().set_root(osd).await?;
        self.osds.refresh().await?;
        self.dir(ROOT_INO, recorded).await
    }

    /// The root directory, made first (with the protocol recorded when the
    /// file system was formatted, and hash version 1) if no client has
    /// made it yet.
    pub async fn open_or_make_root(&self) -> Result<DirRef> {
        let c = self.osds.creds();
        if c.root_osd.is_some() {
            return self.root().await;
        }
        let p = match c.dir_protocol.as_str() {
            "" => Protocol::Atomic,
            s => Protocol::parse(s).map_err(|m| NsError::new(Errno::Inval, m.to_string()))?,
        };
        self.format(p, DirHash::V1).await
    }

    /// The root directory.
    pub async fn root(&self) -> Result<DirRef> {
        self.dir(ROOT_INO, self.root_osd()?).await
    }

    /// Directory `ino` on `osd` (its header is read once, then cached: it
    /// never changes). ENOTDIR when the object is not a directory.
    pub async fn dir(&self, ino: u64, osd: u32) -> Result<DirRef> {
        if let Some(h) = self
            .headers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&ino)
        {
            return Ok(DirRef {
                ino,
                osd,
                header: *h,
            });
        }
        let raw = self.osds.get1(osd, data_oid(ino), DIR_HEADER).await?;
        if raw.is_empty() {
            return Err(NsError::new(
                Errno::NotDir,
                format!("inode {ino} is not a directory"),
            ));
        }
        let header = DirHeader::decode(&raw)?;
        self.headers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(ino, header);
        Ok(DirRef { ino, osd, header })
    }

    /// A fresh inode number (from this client's batch; a new batch is one
    /// fetch-and-add on the root object).
    pub async fn alloc_ino(&self) -> Result<u64> {
        let mut ids = self.ids.lock().await;
        if ids.0 >= ids.1 {
            let first = self
                .osds
                .fetch_add(self.root_osd()?, data_oid(ROOT_INO), FS_NEXT_INO, ID_BATCH)
                .await?;
            if first >= proto::layout::DATA_OID_TAG - ID_BATCH {
                return Err(NsError::new(Errno::NoSpc, "inode numbers exhausted"));
            }
            *ids = (first.max(1), first + ID_BATCH);
        }
        let ino = ids.0;
        ids.0 += 1;
        Ok(ino)
    }

    fn new_inode(
        &self,
        kind: Kind,
        o: Owner,
        parent: (u64, u32),
        layout: Option<InodeLayout>,
        target: Option<String>,
    ) -> Inode {
        let t = now_ns();
        Inode {
            version: FORMAT_VERSION,
            kind,
            mode: o.mode & 0o7777,
            uid: o.uid,
            gid: o.gid,
            nlink: if kind == Kind::Dir { 2 } else { 1 },
            size: target.as_ref().map_or(0, |s| posix::raw_len(s) as u64),
            atime: t,
            mtime: t,
            ctime: t,
            parent,
            layout,
            target,
            rdev: o.rdev,
        }
    }

    /// Looks `name` up in `d` (ENOENT when absent).
    pub async fn lookup(&self, d: &DirRef, name: &str) -> Result<Dirent> {
        check_name(name)?;
        self.find(d, name)
            .await?
            .ok_or_else(|| NsError::new(Errno::NoEnt, format!("{name}: no such entry")))
    }

    /// The inode record of `ino` on `osd`; for a directory with its link
    /// count (2 + its subdirectories) and its times (moved by entry
    /// changes) filled in from the directory's own counters, read in the
    /// same request. (Not a record to compare-and-swap against.)
    pub async fn stat(&self, ino: u64, osd: u32) -> Result<Inode> {
        let attrs = self
            .osds
            .get(osd, data_oid(ino), vec![INODE, DIR_CHANGED, DIR_SUBDIRS])
            .await?;
        let raw = pick(&attrs, INODE);
        if raw.is_empty() {
            return Err(NsError::new(
                Errno::NoEnt,
                format!("inode {ino} has no record"),
            ));
        }
        let mut i = Inode::decode(&raw)?;
        if i.kind == Kind::Dir {
            let word = |k| {
                let v = pick(&attrs, k);
                <[u8; 8]>::try_from(v.as_slice()).map_or(0, u64::from_le_bytes)
            };
            let changed = word(DIR_CHANGED) as i64;
            i.mtime = i.mtime.max(changed);
            i.ctime = i.ctime.max(changed);
            // A counter a crash left below zero reads as none.
            let subdirs = (word(DIR_SUBDIRS) as i64).clamp(0, i64::from(u32::MAX) - 2);
            i.nlink = 2 + subdirs as u32;
        }
        Ok(i)
    }

    /// Drops the time directory `ino`'s entries last changed (its times are
    /// then its record's: after an explicit mtime was set).
    pub async fn forget_entry_changes(&self, ino: u64, osd: u32) -> Result<()> {
        self.osds
            .set(osd, data_oid(ino), vec![(DIR_CHANGED, Vec::new())])
            .await
    }

    /// Adds `delta` to directory `d`'s subdirectory count.
    pub(crate) async fn count_subdirs(&self, d: (u64, u32), delta: i64) -> Result<()> {
        self.osds
            .fetch_add(d.1, data_oid(d.0), DIR_SUBDIRS, delta as u64)
            .await
            .map(|_| ())
    }

    /// Changes inode `ino` with `f` by compare-and-swap (retried when
    /// another client changed it in between); returns the new record.
    pub async fn update(
        &self,
        ino: u64,
        osd: u32,
        f: impl Fn(&mut Inode) -> Result<()>,
    ) -> Result<Inode> {
        let oid = data_oid(ino);
        let mut raw = self.osds.get1(osd, oid, INODE).await?;
        loop {
            if raw.is_empty() {
                return Err(NsError::new(
                    Errno::NoEnt,
                    format!("inode {ino} has no record"),
                ));
            }
            let mut i = Inode::decode(&raw)?;
            f(&mut i)?;
            i.ctime = i.ctime.max(now_ns());
            let (ok, old, _) = self
                .osds
                .cas(osd, oid, INODE, raw, i.encode(), Vec::new())
                .await?;
            if ok {
                return Ok(i);
            }
            raw = old;
        }
    }

    /// Makes an inode object and names it `name` in `d`. With `exclusive`
    /// false an existing file of that name is returned instead (created =
    /// false). Order: object with its attributes (one commit), then the
    /// entry; if the name is taken the object is removed again.
    pub async fn make(
        &self,
        d: &DirRef,
        name: &str,
        kind: Kind,
        o: Owner,
        target: Option<String>,
        exclusive: bool,
    ) -> Result<(Dirent, Inode, bool)> {
        check_name(name)?;
        let ino = self.alloc_ino().await?;
        let oid = data_oid(ino);
        let map = self.osds.map();
        let (osd, layout) = match kind {
            Kind::File => {
                let mut spec = self.layout;
                spec.stripe_count = spec.stripe_count.min(map.placeable() as u32).max(1);
                spec.object_size = 0;
                let osds = map.place(oid, spec.stripe_count);
                (
                    osds.first().copied(),
                    Some(InodeLayout {
                        spec,
                        map_epoch: map.epoch,
                    }),
                )
            }
            _ => (map.place(oid, 1).first().copied(), None),
        };
        let osd = osd.ok_or_else(|| NsError::new(Errno::NoSpc, "no OSD takes placements"))?;
        let inode = self.new_inode(kind, o, (d.ino, d.osd), layout, target);
        let mut attrs = vec![(INODE, inode.encode())];
        if kind == Kind::Dir {
            let header = DirHeader {
                version: FORMAT_VERSION,
                ..d.header
            };
            attrs.push((DIR_HEADER, header.encode()));
        }
        self.osds.create(osd, oid, attrs).await?;
        let ent = Dirent {
            name: name.into(),
            kind,
            ino,
            osd,
        };
        match self.insert(d, &ent).await {
            Ok(Ok(())) => {
                if kind == Kind::Dir {
                    self.count_subdirs((d.ino, d.osd), 1).await?;
                }
                self.count_inodes(1).await?;
                Ok((ent, inode, true))
            }
            Ok(Err(existing)) => {
                self.osds.remove(osd, oid).await?;
                if exclusive || existing.kind != Kind::File || kind != Kind::File {
                    return Err(NsError::new(Errno::Exist, format!("{name}: exists")));
                }
                let i = self.stat(existing.ino, existing.osd).await?;
                Ok((existing, i, false))
            }
            Err(e) => {
                // Not named (or the directory went away): drop the object.
                // If this fails too, fsck finds the orphan.
                let _ = self.osds.remove(osd, oid).await;
                Err(e)
            }
        }
    }

    /// Removes name `name` (not a directory) from `d`. Returns the entry and,
    /// when that was its last name, the inode, whose objects the caller
    /// removes with [`OsdFs::destroy`] (now, or when the last local open
    /// closes). Order: the entry goes first, so a crash leaves at worst an
    /// orphan, never a dangling name.
    pub async fn unlink(&self, d: &DirRef, name: &str) -> Result<(Dirent, Option<Inode>)> {
        let ent = self.lookup(d, name).await?;
        if ent.kind == Kind::Dir {
            return Err(NsError::new(
                Errno::IsDir,
                format!("{name}: is a directory"),
            ));
        }
        if !self.remove(d, &ent).await? {
            return Err(NsError::new(
                Errno::NoEnt,
                format!("{name}: removed meanwhile"),
            ));
        }
        let i = self
            .update(ent.ino, ent.osd, |i| {
                i.nlink = i.nlink.saturating_sub(1);
                Ok(())
            })
            .await;
        match i {
            Ok(i) if i.nlink == 0 => Ok((ent, Some(i))),
            Ok(_) => Ok((ent, None)),
            Err(e) if e.is(crate::error::Errno::NoEnt) => Ok((ent, None)),
            Err(e) => Err(e),
        }
    }

    /// Removes the objects of an inode that has no names left: the other
    /// stripes first, the first object (with the metadata) last.
    pub async fn destroy(&self, ino: u64, osd: u32, i: &Inode) -> Result<()> {
        let oid = data_oid(ino);
        if let Some(l) = &i.layout {
            let map = self
                .osds
                .map_of(l.map_epoch)
                .unwrap_or_else(|| self.osds.map());
            for o in map.place(oid, l.spec.stripe_count) {
                if o != osd {
                    self.osds.remove(o, oid).await?;
                }
            }
        }
        self.osds.remove(osd, oid).await?;
        self.count_inodes(-1).await
    }

    /// Removes the empty directory `name` from `d` (ENOTEMPTY otherwise).
    ///
    /// 1. Mark the directory dying (a lease, by CAS; under its lock in the
    ///    lock protocol). 2. Check it is empty; if not, clear the mark and
    ///    fail. 3. Remove its entry from `d`. 4. Remove its object.
    ///
    /// A create racing with it reads the mark right after its own insert:
    /// if its insert came before step 2, step 2 sees it and the rmdir backs
    /// off; if after, the create sees the mark and waits for the outcome,
    /// then keeps its entry (mark cleared) or fails with ENOENT (object
    /// gone). So no create succeeds into a removed directory.
    pub async fn rmdir(&self, d: &DirRef, name: &str) -> Result<Dirent> {
        let ent = self.lookup(d, name).await?;
        if ent.kind != Kind::Dir {
            return Err(NsError::new(
                Errno::NotDir,
                format!("{name}: not a directory"),
            ));
        }
        let child = self.dir(ent.ino, ent.osd).await?;
        let oid = data_oid(child.ino);
        let lock = match child.header.protocol {
            Protocol::Lock => Some(self.acquire(child.osd, oid, DIR_LOCK, Vec::new()).await?.0),
            Protocol::Atomic => None,
        };
        let (marked, dying, _) = {
            let mine = self.lease().encode();
            self.osds
                .cas(
                    child.osd,
                    oid,
                    DIR_DYING,
                    Vec::new(),
                    mine.clone(),
                    Vec::new(),
                )
                .await
                .map(|(ok, _, a)| (ok, mine, a))?
        };
        let unlock = |lock: Option<Vec<u8>>| async move {
            match lock {
                Some(h) => self.release(child.osd, oid, DIR_LOCK, h).await,
                None => Ok(()),
            }
        };
        if !marked {
            unlock(lock).await?;
            return Err(NsError::new(
                Errno::Busy,
                format!("{name}: being removed by another client"),
            ));
        }
        if !self.is_empty(&child).await? {
            self.osds
                .cas(child.osd, oid, DIR_DYING, dying, Vec::new(), Vec::new())
                .await?;
            unlock(lock).await?;
            return Err(NsError::new(
                Errno::NotEmpty,
                format!("{name}: directory not empty"),
            ));
        }
        unlock(lock).await?;
        if !self.remove(d, &ent).await? {
            self.osds
                .cas(child.osd, oid, DIR_DYING, dying, Vec::new(), Vec::new())
                .await?;
            return Err(NsError::new(
                Errno::NoEnt,
                format!("{name}: removed meanwhile"),
            ));
        }
        self.osds.remove(child.osd, oid).await?;
        self.count_subdirs((d.ino, d.osd), -1).await?;
        self.count_inodes(-1).await?;
        self.headers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&child.ino);
        Ok(ent)
    }

    /// Adds name `name` in `d` for file `ino` (hard link): the link count
    /// goes up first, then the entry; if the name is taken it goes back
    /// down. A crash in between leaves the count one high (fsck recounts).
    pub async fn link(
        &self,
        ino: u64,
        osd: u32,
        d: &DirRef,
        name: &str,
    ) -> Result<(Dirent, Inode)> {
        check_name(name)?;
        let i = self
            .update(ino, osd, |i| {
                if i.kind == Kind::Dir {
                    return Err(NsError::new(Errno::Perm, "hard links to directories"));
                }
                i.nlink = i
                    .nlink
                    .checked_add(1)
                    .ok_or_else(|| NsError::new(Errno::MLink, "too many links"))?;
                Ok(())
            })
            .await?;
        let ent = Dirent {
            name: name.into(),
            kind: i.kind,
            ino,
            osd,
        };
        match self.insert(d, &ent).await? {
            Ok(()) => Ok((ent, i)),
            Err(_) => {
                self.update(ino, osd, |i| {
                    i.nlink = i.nlink.saturating_sub(1);
                    Ok(())
                })
                .await?;
                Err(NsError::new(Errno::Exist, format!("{name}: exists")))
            }
        }
    }

    /// Extended attribute `name` of `ino` (ENODATA when absent).
    pub async fn getxattr(&self, ino: u64, osd: u32, name: &str) -> Result<Vec<u8>> {
        let all = self.osds.page_all(osd, data_oid(ino), PAGE_XATTR).await?;
        all.into_iter()
            .find_map(|(_, v)| {
                split_xattr(&v)
                    .filter(|(n, _)| *n == name)
                    .map(|(_, v)| v.to_vec())
            })
            .ok_or_else(|| NsError::new(Errno::NoData, format!("no attribute {name}")))
    }

    /// Names of `ino`'s extended attributes.
    pub async fn listxattr(&self, ino: u64, osd: u32) -> Result<Vec<String>> {
        let all = self.osds.page_all(osd, data_oid(ino), PAGE_XATTR).await?;
        Ok(all
            .iter()
            .filter_map(|(_, v)| split_xattr(v).map(|(n, _)| n.to_string()))
            .collect())
    }

    /// Sets (or with `None` removes) extended attribute `name`. `create`
    /// fails on an existing one, `replace` on a missing one.
    pub async fn setxattr(
        &self,
        ino: u64,
        osd: u32,
        name: &str,
        value: Option<&[u8]>,
        create: bool,
        replace: bool,
    ) -> Result<()> {
        let oid = data_oid(ino);
        let base = crate::hash::DirHash::V1.slot(name);
        let all = self.osds.page_all(osd, oid, PAGE_XATTR).await?;
        let existing = all
            .iter()
            .find(|(_, v)| split_xattr(v).is_some_and(|(n, _)| n == name));
        match (existing, value) {
            (Some(_), Some(_)) if create => {
                Err(NsError::new(Errno::Exist, format!("{name} exists")))
            }
            (None, None) => Err(NsError::new(Errno::NoData, format!("no attribute {name}"))),
            (None, Some(_)) if replace => {
                Err(NsError::new(Errno::NoData, format!("no attribute {name}")))
            }
            (Some((n, old)), v) => {
                let new = v.map(|v| join_xattr(name, v)).unwrap_or_default();
                let (ok, ..) = self
                    .osds
                    .cas(osd, oid, xattr_key(*n), old.clone(), new, Vec::new())
                    .await?;
                if ok {
                    Ok(())
                } else {
                    Err(NsError::new(
                        Errno::Busy,
                        format!("{name} changed meanwhile"),
                    ))
                }
            }
            (None, Some(v)) => {
                let bytes = join_xattr(name, v);
                let mut n = base;
                loop {
                    let (ok, ..) = self
                        .osds
                        .cas(
                            osd,
                            oid,
                            xattr_key(n),
                            Vec::new(),
                            bytes.clone(),
                            Vec::new(),
                        )
                        .await?;
                    if ok {
                        return Ok(());
                    }
                    n = n.wrapping_add(1).max(1);
                }
            }
        }
    }

    /// OSD commands this client has sent.
    pub fn round_trips(&self) -> u64 {
        self.osds.sent.load(Ordering::Relaxed)
    }

    /// Whether `v` (an attribute list) holds `key`.
    pub fn has(v: &proto::msg::AttrList, key: proto::msg::AttrKey) -> bool {
        !pick(v, key).is_empty()
    }
}

fn xattr_key(n: u32) -> proto::msg::AttrKey {
    proto::msg::AttrKey {
        page: PAGE_XATTR,
        number: n,
    }
}

fn join_xattr(name: &str, v: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(2 + name.len() + v.len());
    b.extend_from_slice(&(name.len() as u16).to_le_bytes());
    b.extend_from_slice(name.as_bytes());
    b.extend_from_slice(v);
    b
}

fn split_xattr(b: &[u8]) -> Option<(&str, &[u8])> {
    let n = u16::from_le_bytes([*b.first()?, *b.get(1)?]) as usize;
    let name = std::str::from_utf8(b.get(2..2 + n)?).ok()?;
    Some((name, &b[2 + n..]))
}
