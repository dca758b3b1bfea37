//! The [`Namespace`] of a file system that keeps its namespace on the OSDs
//! (Ali et al.; `docs/OSD-NAMESPACE.md`): each call becomes the short
//! sequence of OSD commands of [`osdns`], with the POSIX permission checks
//! the MDS would have made done here, in the client, with the same rules
//! (the `posix` crate: permissions, setattr, setgid inheritance). The
//! attributes those checks read come from the client's metadata cache
//! while fresh, as the client's own getattr does.
//!
//! Inode records live on the OSD that placement chose when the inode was
//! made; directory entries say which. This client remembers the OSD of
//! every inode it has seen named (`homes`); an inode it has not seen is
//! looked for where placement puts it under the current map.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use osdns::fs::Owner;
use osdns::{DirRef, Dirent, Inode, Kind, NsError, OsdFs, Osds};
use posix::{R, W};
use proto::layout::{DATA_PARTITION, Layout, LayoutSpec, data_oid};
use proto::mds::{
    Attr, Creds, DirEntry, Entry, FileKind, Found, Grant, ROOT_INO, SetAttr, XattrMode,
};

use crate::config::ClientConfig;
use crate::error::{Errno, FsError, Result};
use crate::meta::{Meta, found};
use crate::namespace::{Namespace, NsFuture, OpenHere, Removed, Renamed};

/// How long this client's directory locks and marks block others if it
/// dies (Ali et al. leases).
pub const LEASE: Duration = Duration::from_secs(5);

/// Stat requests in flight at once when readdir fetches attributes.
const READDIR_STATS: usize = 32;

mod checks;
mod removal;

fn kind(k: Kind) -> FileKind {
    match k {
        Kind::File => FileKind::File,
        Kind::Dir => FileKind::Dir,
        Kind::Symlink => FileKind::Symlink,
        Kind::Fifo => FileKind::Fifo,
        Kind::CharDev => FileKind::CharDev,
        Kind::BlockDev => FileKind::BlockDev,
        Kind::Socket => FileKind::Socket,
    }
}

/// The namespace's record kind for a POSIX kind.
fn ns_kind(k: FileKind) -> Kind {
    match k {
        FileKind::File => Kind::File,
        FileKind::Dir => Kind::Dir,
        FileKind::Symlink => Kind::Symlink,
        FileKind::Fifo => Kind::Fifo,
        FileKind::CharDev => Kind::CharDev,
        FileKind::BlockDev => Kind::BlockDev,
        FileKind::Socket => Kind::Socket,
    }
}

/// POSIX attributes of inode `ino` from its record (a directory's link
/// count and times as [`OsdFs::stat`] fills them in).
pub fn attr(ino: u64, i: &Inode) -> Attr {
    Attr {
        ino,
        kind: kind(i.kind),
        mode: i.mode,
        nlink: i.nlink,
        uid: i.uid,
        gid: i.gid,
        size: i.size,
        atime: i.atime,
        mtime: i.mtime,
        ctime: i.ctime,
        rdev: i.rdev,
    }
}

/// The data layout of file `ino` (one object set: stripe objects share
/// the inode's object id on the OSDs placement picks).
pub fn layout(ino: u64, i: &Inode) -> Option<Layout> {
    i.layout.as_ref().map(|l| Layout {
        spec: l.spec,
        map_epoch: l.map_epoch,
        objsets: vec![data_oid(ino)],
        homes: Vec::new(),
    })
}

/// POSIX permission check made in the client, with the shared rules.
fn check(a: &Attr, c: &Creds, want: u32, what: &str) -> Result<()> {
    posix::perm::check(a, c, want, what).map_err(FsError::from)
}

/// Whether the sticky rule can refuse `c` anything in `dir` (so the victim
/// must be looked up to check it).
fn sticky_applies(dir: &Attr, c: &Creds) -> bool {
    dir.mode & 0o1000 != 0 && c.uid != 0 && c.uid != dir.uid
}

/// A namespace on the OSDs, as one client sees it.
pub struct OsdNamespace {
    /// The namespace client (maps, capability, connections).
    pub fs: Arc<OsdFs>,
    meta: Arc<Meta>,
    homes: Mutex<HashMap<u64, u32>>,
    /// Files with no name left, whose objects go later.
    removals: removal::Removals,
}

impl OsdNamespace {
    /// Asks the MDS which mode the file system is in: `Some` when the
    /// namespace is on the OSDs (connected, root made), `None` when the MDS
    /// keeps it.
    pub async fn probe(
        cfg: &ClientConfig,
        mds: Arc<net::MdsClient>,
        meta: Arc<Meta>,
    ) -> Result<Option<OsdNamespace>> {
        let auth = Arc::new(osdns::MdsAuthority::new(mds));
        let osds = match Osds::new(&cfg.cluster_id, auth, cfg.osd_connections).await {
            Ok(o) => o,
            // The MDS refuses the namespace grant exactly when it keeps
            // the namespace itself.
            Err(e) if e.is(Errno::Inval) => return Ok(None),
            Err(e) => {
                return Err(FsError::new(
                    e.errno,
                    format!("cannot reach the MDS at {}: {}", cfg.mds_addr, e.message),
                ));
            }
        };
        let layout = match osds.creds().layout {
            l if l.stripe_count == 0 => LayoutSpec::default(),
            l => l,
        };
        let fs = Arc::new(OsdFs::new(Arc::new(osds), LEASE, layout));
        fs.open_or_make_root().await?;
        Ok(Some(OsdNamespace {
            fs,
            removals: removal::Removals::new(meta.attr_timeout),
            meta,
            homes: Mutex::new(HashMap::new()),
        }))
    }

    fn homes(&self) -> std::sync::MutexGuard<'_, HashMap<u64, u32>> {
        self.homes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The OSD holding `ino`'s record.
    fn home(&self, ino: u64) -> Result<u32> {
        if ino == proto::mds::ROOT_INO {
            return self.fs.root_osd();
        }
        if let Some(o) = self.homes().get(&ino) {
            return Ok(*o);
        }
        self.fs
            .osds
            .map()
            .place(data_oid(ino), 1)
            .first()
            .copied()
            .ok_or_else(|| FsError::new(Errno::Io, "no OSD takes placements"))
    }

    fn learn(&self, e: &Dirent) {
        let mut h = self.homes();
        if h.len() > 1 << 20 {
            h.clear(); // placement finds most again; bounded memory
        }
        h.insert(e.ino, e.osd);
    }

    /// The capabilities for file data (one range grant over every
    /// namespace object, renewed by the namespace client).
    pub async fn grants(&self) -> Result<Vec<Grant>> {
        Ok(vec![self.fs.osds.fresh_creds().await?.grant.clone()])
    }

    async fn dir(&self, ino: u64) -> Result<DirRef> {
        self.fs.dir(ino, self.home(ino)?).await
    }

    /// The record of `ino`.
    pub async fn inode(&self, ino: u64) -> Result<Inode> {
        self.fs.stat(ino, self.home(ino)?).await
    }

    /// Attributes of `ino`.
    pub async fn getattr(&self, ino: u64) -> Result<Attr> {
        Ok(attr(ino, &self.inode(ino).await?))
    }

    fn entry(parent: u64, name: &str, ino: u64, i: &Inode) -> Entry {
        Entry {
            parent,
            name: name.into(),
            attr: attr(ino, i),
            layout: layout(ino, i),
        }
    }

    /// `name` in `parent` (the caller checked search permission).
    pub async fn lookup_entry(&self, parent: u64, name: &str) -> Result<Entry> {
        let d = self.dir(parent).await?;
        let e = self.fs.lookup(&d, name).await?;
        self.learn(&e);
        let i = self.fs.stat(e.ino, e.osd).await?;
        Ok(Self::entry(parent, name, e.ino, &i))
    }

    /// Makes a file, directory or symlink named `name` in `parent` (whose
    /// attributes `pa` the caller has checked for write and search).
    #[expect(
        clippy::too_many_arguments,
        reason = "one maker for every kind of inode: each argument is a field of what is made"
    )]
    pub async fn make(
        &self,
        c: &Creds,
        parent: u64,
        pa: &Attr,
        name: &str,
        (k, mode, rdev): (FileKind, u32, u32),
        target: Option<String>,
        exclusive: bool,
    ) -> Result<(Entry, bool)> {
        let a = posix::new_attr(0, k, mode, c, pa, 0);
        let o = Owner {
            uid: a.uid,
            gid: a.gid,
            mode: a.mode,
            rdev,
        };
        let d = self.dir(parent).await?;
        let (e, i, created) = self
            .fs
            .make(&d, name, ns_kind(k), o, target, exclusive)
            .await?;
        self.learn(&e);
        Ok((Self::entry(parent, name, e.ino, &i), created))
    }

    /// Adds name `name` in `parent` for `ino`.
    pub async fn link_entry(&self, ino: u64, parent: u64, name: &str) -> Result<Entry> {
        let d = self.dir(parent).await?;
        let (e, i) = self.fs.link(ino, self.home(ino)?, &d, name).await?;
        self.learn(&e);
        Ok(Self::entry(parent, name, ino, &i))
    }

    /// Removes name `name`; the inode's objects go now, or at the last
    /// release when `open_here` says this client still has it open.
    pub async fn unlink_name(
        &self,
        parent: u64,
        name: &str,
        open_here: &(dyn Fn(u64) -> bool + Sync),
    ) -> Result<u64> {
        let d = self.dir(parent).await?;
        let (e, last) = self.fs.unlink(&d, name).await?;
        if let Some(i) = last {
            self.gone(e.ino, e.osd, i, open_here(e.ino)).await?;
        }
        Ok(e.ino)
    }

    /// Removes the empty directory `name`.
    pub async fn rmdir_name(&self, parent: u64, name: &str) -> Result<()> {
        let d = self.dir(parent).await?;
        self.fs.rmdir(&d, name).await?;
        Ok(())
    }

    /// Renames (POSIX rules; the caller checked permissions). A file it
    /// replaces that had no other name goes as an unlinked one does: now,
    /// or at the last release when `open_here` says it is open here.
    pub async fn rename_names(
        &self,
        (parent, name): (u64, &str),
        (new_parent, new_name): (u64, &str),
        noreplace: bool,
        open_here: &(dyn Fn(u64) -> bool + Sync),
    ) -> Result<Renamed> {
        let s = self.dir(parent).await?;
        let d = self.dir(new_parent).await?;
        let m = self.fs.rename(&s, name, &d, new_name, noreplace).await?;
        if let Some((ino, osd, i)) = m.replaced {
            self.gone(ino, osd, i, open_here(ino)).await?;
        }
        Ok(Renamed::moved(m.ino, m.unchanged))
    }

    /// A symlink's target.
    pub async fn readlink(&self, ino: u64) -> Result<String> {
        let i = self.inode(ino).await?;
        i.target
            .ok_or_else(|| FsError::new(Errno::Inval, format!("inode {ino} is not a symlink")))
    }

    /// Every entry of `ino`, in name order, with attributes (fetched
    /// `READDIR_STATS` at a time).
    pub async fn readdir(&self, ino: u64) -> Result<Vec<DirEntry>> {
        let d = self.dir(ino).await?;
        let mut ents = self.fs.readdir_all(&d).await?;
        ents.sort_by(|a, b| a.name.cmp(&b.name));
        for e in &ents {
            self.learn(e);
        }
        let mut out = Vec::with_capacity(ents.len());
        for chunk in ents.chunks(READDIR_STATS) {
            let mut set = tokio::task::JoinSet::new();
            for (n, e) in chunk.iter().enumerate() {
                let fs = self.fs.clone();
                let (i, o) = (e.ino, e.osd);
                set.spawn(async move { (n, fs.stat(i, o).await) });
            }
            let mut attrs = vec![None; chunk.len()];
            while let Some(r) = set.join_next().await {
                let (n, r) = r.map_err(|e| FsError::new(Errno::Io, format!("stat task: {e}")))?;
                // An entry removed since the listing has no record: left
                // without attributes (the kernel asks again).
                attrs[n] = r.ok().map(|i| attr(chunk[n].ino, &i));
            }
            for (e, a) in chunk.iter().zip(attrs) {
                out.push(DirEntry {
                    name: e.name.clone(),
                    ino: e.ino,
                    kind: kind(e.kind),
                    attr: a,
                });
            }
        }
        Ok(out)
    }

    /// Changes attributes with the MDS's POSIX rules. A shrinking
    /// truncate records the length first, then cuts the stripe objects:
    /// cut first, a reader on another client that asked for the length in
    /// between took the cut objects for holes and read zeros nobody wrote
    /// (`cat new > f` under a reader elsewhere). Recorded first, a reader
    /// sees the old bytes or the new length, never a mix with zeros. A
    /// crash between the two leaves bytes past the new end, which a later
    /// extension of the file would show (docs/CLIENT.md). A truncate that
    /// grows the file does not cut past the old end: another client's
    /// write there, out but not yet committed, would be lost.
    pub async fn setattr_checked(&self, c: &Creds, ino: u64, set: &SetAttr) -> Result<Attr> {
        let osd = self.home(ino)?;
        let mut shrunk = None;
        if let Some(size) = set.size {
            // A truncate is checked before anything changes (nothing does
            // when refused); other changes are checked in the CAS.
            let cur = self.fs.stat(ino, osd).await?;
            let mut probe = attr(ino, &cur);
            posix::apply_setattr(&mut probe, c, set, 0).map_err(FsError::from)?;
            if cur.kind == Kind::File && size < cur.size {
                shrunk = Some((cur, size));
            }
        }
        let now = proto::clock::now_ns();
        let c = c.clone();
        let explicit_mtime = set.mtime.is_some();
        let set = set.clone();
        let i = self
            .fs
            .update(ino, osd, move |i| {
                let mut a = attr(ino, i);
                posix::apply_setattr(&mut a, &c, &set, now).map_err(NsError::from)?;
                i.mode = a.mode;
                i.uid = a.uid;
                i.gid = a.gid;
                i.size = a.size;
                i.atime = a.atime;
                i.mtime = a.mtime;
                i.ctime = a.ctime;
                Ok(())
            })
            .await?;
        if let Some((cur, size)) = shrunk {
            self.cut(ino, &cur, size).await?;
        }
        if i.kind != Kind::Dir {
            return Ok(attr(ino, &i));
        }
        if explicit_mtime {
            // An explicit mtime replaces the time entry changes recorded.
            self.fs.forget_entry_changes(ino, osd).await?;
        }
        Ok(attr(ino, &self.fs.stat(ino, osd).await?))
    }

    /// Cuts every stripe object of `ino` to what a file of `size` bytes holds.
    async fn cut(&self, ino: u64, i: &Inode, size: u64) -> Result<()> {
        let Some(l) = &i.layout else { return Ok(()) };
        let oid = data_oid(ino);
        let map = self
            .fs
            .osds
            .map_of(l.map_epoch)
            .unwrap_or_else(|| self.fs.osds.map());
        for (j, osd) in map.place(oid, l.spec.stripe_count).into_iter().enumerate() {
            let len = l.spec.object_len(size, 0, j as u32);
            let cmd = proto::Command::Truncate {
                pid: DATA_PARTITION,
                oid,
                len,
            };
            match self.fs.osds.call(osd, cmd, Vec::new(), Vec::new()).await {
                Err(e) if e.is(Errno::NoEnt) => {} // a stripe never written
                r => {
                    r?;
                }
            }
        }
        Ok(())
    }

    /// Records a file's new length and modification time after this
    /// client's writes reached the OSDs (never shrinks it).
    pub async fn commit_size(&self, ino: u64, size: u64, mtime: i64) -> Result<Attr> {
        let i = self
            .fs
            .update(ino, self.home(ino)?, move |i| {
                i.size = i.size.max(size);
                i.mtime = i.mtime.max(mtime);
                Ok(())
            })
            .await?;
        Ok(attr(ino, &i))
    }

    /// Reads extended attribute `name`.
    pub async fn getxattr(&self, ino: u64, name: &str) -> Result<Vec<u8>> {
        posix::check_xattr_name(name).map_err(FsError::from)?;
        self.fs.getxattr(ino, self.home(ino)?, name).await
    }

    /// Sets (`Some`) or removes (`None`) extended attribute `name`.
    pub async fn setxattr(
        &self,
        ino: u64,
        name: &str,
        value: Option<&[u8]>,
        mode: XattrMode,
    ) -> Result<()> {
        posix::check_xattr_name(name).map_err(FsError::from)?;
        if let Some(v) = value
            && v.len() > proto::mds::XATTR_VALUE_MAX
        {
            return Err(FsError::new(
                proto::mds::Errno::Range,
                format!(
                    "value of {} bytes; limit {}",
                    v.len(),
                    proto::mds::XATTR_VALUE_MAX
                ),
            ));
        }
        let osd = self.home(ino)?;
        self.fs
            .setxattr(
                ino,
                osd,
                name,
                value,
                mode == XattrMode::Create,
                mode == XattrMode::Replace,
            )
            .await?;
        self.fs.update(ino, osd, |_| Ok(())).await.map(|_| ())
    }

    /// Names of `ino`'s extended attributes.
    pub async fn listxattr(&self, ino: u64) -> Result<Vec<String>> {
        self.fs.listxattr(ino, self.home(ino)?).await
    }
}

impl Namespace for OsdNamespace {
    fn lookup<'a>(&'a self, c: &'a Creds, parent: u64, name: &'a str) -> NsFuture<'a, Found> {
        Box::pin(async move {
            self.searchable(c, parent, "lookup").await?;
            let e = self.lookup_entry(parent, name).await?;
            Ok(found(e, self.grants().await?))
        })
    }

    fn getattr<'a>(&'a self, _c: &'a Creds, ino: u64) -> NsFuture<'a, Attr> {
        Box::pin(self.getattr(ino))
    }

    fn setattr<'a>(&'a self, c: &'a Creds, ino: u64, set: &'a SetAttr) -> NsFuture<'a, Attr> {
        Box::pin(self.setattr_checked(c, ino, set))
    }

    fn create<'a>(
        &'a self,
        c: &'a Creds,
        parent: u64,
        name: &'a str,
        mode: u32,
        exclusive: bool,
    ) -> NsFuture<'a, Found> {
        Box::pin(async move {
            let pa = self.changeable(c, parent, "create").await?;
            let (e, created) = self
                .make(
                    c,
                    parent,
                    &pa,
                    name,
                    (FileKind::File, mode, 0),
                    None,
                    exclusive,
                )
                .await?;
            if !created {
                check(&e.attr, c, W, "open for writing")?;
            }
            Ok(found(e, self.grants().await?))
        })
    }

    fn mkdir<'a>(
        &'a self,
        c: &'a Creds,
        parent: u64,
        name: &'a str,
        mode: u32,
    ) -> NsFuture<'a, Found> {
        Box::pin(self.make_checked(c, parent, name, (FileKind::Dir, mode, 0), None))
    }

    fn symlink<'a>(
        &'a self,
        c: &'a Creds,
        parent: u64,
        name: &'a str,
        target: &'a str,
    ) -> NsFuture<'a, Found> {
        let kind = (FileKind::Symlink, 0o777, 0);
        Box::pin(self.make_checked(c, parent, name, kind, Some(target.to_string())))
    }

    fn mknod<'a>(
        &'a self,
        c: &'a Creds,
        parent: u64,
        name: &'a str,
        kind: FileKind,
        mode: u32,
        rdev: u32,
    ) -> NsFuture<'a, Found> {
        Box::pin(async move {
            if !kind.is_special() {
                return Err(FsError::new(
                    Errno::Inval,
                    format!(
                        "mknod makes FIFOs, devices and sockets, not a {}",
                        posix::kind_name(kind)
                    ),
                ));
            }
            if kind.is_device() && c.uid != 0 {
                return Err(FsError::new(
                    Errno::Perm,
                    format!("only root may make a {}", posix::kind_name(kind)),
                ));
            }
            let rdev = if kind.is_device() { rdev } else { 0 };
            self.make_checked(c, parent, name, (kind, mode, rdev), None)
                .await
        })
    }

    fn link<'a>(
        &'a self,
        c: &'a Creds,
        ino: u64,
        parent: u64,
        name: &'a str,
    ) -> NsFuture<'a, Found> {
        Box::pin(async move {
            self.changeable(c, parent, "link").await?;
            let e = self.link_entry(ino, parent, name).await?;
            Ok(found(e, self.grants().await?))
        })
    }

    fn unlink<'a>(
        &'a self,
        c: &'a Creds,
        parent: u64,
        name: &'a str,
        open_here: OpenHere<'a>,
    ) -> NsFuture<'a, Removed> {
        Box::pin(async move {
            self.removable(c, parent, name, "unlink").await?;
            let ino = self.unlink_name(parent, name, open_here).await?;
            Ok(Removed {
                ino: Some(ino),
                dir: None,
            })
        })
    }

    fn rmdir<'a>(&'a self, c: &'a Creds, parent: u64, name: &'a str) -> NsFuture<'a, Option<Attr>> {
        Box::pin(async move {
            self.removable(c, parent, name, "rmdir").await?;
            self.rmdir_name(parent, name).await.map(|()| None)
        })
    }

    fn rename<'a>(
        &'a self,
        c: &'a Creds,
        from: (u64, &'a str),
        to: (u64, &'a str),
        noreplace: bool,
        open_here: OpenHere<'a>,
    ) -> NsFuture<'a, Renamed> {
        Box::pin(async move {
            self.removable(c, from.0, from.1, "rename (source)").await?;
            let da = self.changeable(c, to.0, "rename (target)").await?;
            if sticky_applies(&da, c)
                && let Ok(t) = self.lookup_entry(to.0, to.1).await
            {
                posix::perm::sticky(&da, &t.attr, c).map_err(FsError::from)?;
            }
            self.rename_names(from, to, noreplace, open_here).await
        })
    }

    fn readlink<'a>(&'a self, _c: &'a Creds, ino: u64) -> NsFuture<'a, String> {
        Box::pin(self.readlink(ino))
    }

    fn readdir<'a>(&'a self, c: &'a Creds, ino: u64) -> NsFuture<'a, Vec<DirEntry>> {
        Box::pin(async move {
            let a = self.cached_attr(ino).await?;
            check(&a, c, R, "readdir")?;
            self.readdir(ino).await
        })
    }

    fn readdir_names<'a>(&'a self, c: &'a Creds, ino: u64) -> NsFuture<'a, Vec<DirEntry>> {
        Box::pin(async move {
            let a = self.cached_attr(ino).await?;
            check(&a, c, R, "readdir")?;
            let d = self.dir(ino).await?;
            let mut ents = self.fs.readdir_all(&d).await?;
            ents.sort_by(|a, b| a.name.cmp(&b.name));
            Ok(ents
                .into_iter()
                .map(|e| {
                    self.learn(&e);
                    DirEntry {
                        name: e.name,
                        ino: e.ino,
                        kind: kind(e.kind),
                        attr: None,
                    }
                })
                .collect())
        })
    }

    fn getxattr<'a>(&'a self, c: &'a Creds, ino: u64, name: &'a str) -> NsFuture<'a, Vec<u8>> {
        Box::pin(async move {
            check(&self.getattr(ino).await?, c, R, "getxattr")?;
            self.getxattr(ino, name).await
        })
    }

    fn setxattr<'a>(
        &'a self,
        c: &'a Creds,
        ino: u64,
        name: &'a str,
        value: &'a [u8],
        mode: XattrMode,
    ) -> NsFuture<'a, ()> {
        Box::pin(async move {
            self.xattr_writable(c, ino, "setxattr").await?;
            self.setxattr(ino, name, Some(value), mode).await
        })
    }

    fn listxattr<'a>(&'a self, _c: &'a Creds, ino: u64) -> NsFuture<'a, Vec<String>> {
        Box::pin(self.listxattr(ino))
    }

    fn removexattr<'a>(&'a self, c: &'a Creds, ino: u64, name: &'a str) -> NsFuture<'a, ()> {
        Box::pin(async move {
            self.xattr_writable(c, ino, "removexattr").await?;
            self.setxattr(ino, name, None, XattrMode::Either).await
        })
    }

    fn layout<'a>(&'a self, _c: &'a Creds, ino: u64) -> NsFuture<'a, Option<Layout>> {
        Box::pin(async move { Ok(layout(ino, &self.inode(ino).await?)) })
    }

    fn set_layout<'a>(&'a self, _c: &'a Creds, _ino: u64, _spec: LayoutSpec) -> NsFuture<'a, ()> {
        Box::pin(async {
            Err(FsError::new(
                Errno::Inval,
                "layouts cannot be set on a file system whose namespace is on the OSDs: \
                 new files take the client's default layout",
            ))
        })
    }

    fn open<'a>(&'a self, c: &'a Creds, ino: u64, write: bool) -> NsFuture<'a, Found> {
        Box::pin(async move {
            let i = self.inode(ino).await?;
            let a = attr(ino, &i);
            if a.kind == FileKind::Dir && write {
                return Err(FsError::new(
                    Errno::IsDir,
                    "cannot open a directory for writing",
                ));
            }
            check(&a, c, if write { W } else { R }, "open")?;
            let entry = Entry {
                parent: self.meta.parent_of(ino).unwrap_or(ROOT_INO),
                name: String::new(),
                layout: layout(ino, &i),
                attr: a,
            };
            Ok(found(entry, self.grants().await?))
        })
    }

    fn extend_layout<'a>(&'a self, _c: &'a Creds, ino: u64, objset: u64) -> NsFuture<'a, Found> {
        Box::pin(async move {
            Err(FsError::new(
                Errno::Inval,
                format!(
                    "inode {ino:#x}: object set {objset} asked for, but a file on a namespace \
                     kept on the OSDs has one object set"
                ),
            ))
        })
    }

    fn commit_size<'a>(
        &'a self,
        _c: &'a Creds,
        ino: u64,
        size: u64,
        mtime: i64,
    ) -> NsFuture<'a, Attr> {
        Box::pin(self.commit_size(ino, size, mtime))
    }

    fn released<'a>(&'a self, ino: u64) -> NsFuture<'a, ()> {
        Box::pin(self.released(ino))
    }

    fn remove_due<'a>(&'a self, open_here: OpenHere<'a>, all: bool) -> NsFuture<'a, ()> {
        Box::pin(self.remove_due(open_here, all))
    }

    fn may_open_unlinked(&self, _ino: u64) -> bool {
        true
    }

    fn holding(&self, _held: Vec<(u64, bool)>) -> NsFuture<'_, ()> {
        // No server keeps unlinked files here: this client defers their
        // removal to its own last release (see `unlink_name`).
        Box::pin(async { Ok(()) })
    }

    fn inodes(&self) -> NsFuture<'_, Option<u64>> {
        Box::pin(async { Ok(Some(self.fs.inodes().await?)) })
    }
}
