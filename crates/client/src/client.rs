//! The client: namespace operations through the MDS (answered from the
//! metadata cache when fresh) — or, for a file system formatted with
//! `--namespace osd`, on the OSDs themselves (`on_osds`) — open files with
//! their data path straight to the OSDs, and a timer that writes buffered
//! data out.
//!
//! Consistency (see `docs/CLIENT.md`): close-to-open. Closing or fsyncing a
//! file writes its data to the OSDs (durable when they answer) and commits
//! its length and mtime to the MDS; an open in any client after that sees
//! them, except that a client answers lookups, getattrs and read-only opens
//! from entries younger than `attr_timeout` (default 1 s, 0 = always ask).
//! Within one client every handle sees every write at once.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use net::MdsClient;
use posix::{R, W, X};
use proto::layout::{Layout, LayoutSpec, data_oid};
use proto::mds::{
    Attr, ClusterStatus, Creds, DirEntry, Entry, FileKind, FsStat, Grant, MdsReply, Op, ROOT_INO,
    SetAttr, XattrMode,
};
use proto::rights;

use crate::cache::{Cached, MetaCache, Segment};
use crate::config::ClientConfig;
use crate::error::{Errno, FsError, Result};
use crate::file::{self, OpenInode};
use crate::on_osds::OsdNamespace;
use crate::osds::OsdSet;
use crate::stats::{ClientStats, Counters};

pub use proto::clock::{now_ms, now_ns};

/// An open file handle.
#[derive(Clone)]
struct Handle {
    inode: Arc<OpenInode>,
    write: bool,
}

/// Shared state of a client (what background tasks hold).
pub struct Inner {
    /// Settings.
    pub cfg: ClientConfig,
    /// MDS connection (counts mandatory and non-mandatory requests).
    pub mds: MdsClient,
    /// Maps and OSD connections.
    pub osds: OsdSet,
    /// Counters.
    pub counters: Counters,
    /// Bytes buffered or being written in the whole client.
    pub dirty_total: AtomicU64,
    /// The namespace on the OSDs, when the file system keeps it there
    /// (then the MDS only hands out maps and capabilities).
    pub ns: Option<Arc<OsdNamespace>>,
    cache: Mutex<MetaCache>,
    inodes: Mutex<HashMap<u64, Arc<OpenInode>>>,
    handles: Mutex<HashMap<u64, Handle>>,
    next_fh: AtomicU64,
}

/// A Tessera client. Cheap to clone; all clones share one cache and one set
/// of connections.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// POSIX permission check made in the client (namespace on the OSDs).
fn check(a: &Attr, c: &Creds, want: u32, what: &str) -> Result<()> {
    posix::perm::check(a, c, want, what).map_err(|e| FsError::new(e.errno.raw(), e.message))
}

/// The sticky-directory rule, made in the client.
fn sticky(dir: &Attr, victim: &Attr, c: &Creds) -> Result<()> {
    posix::perm::sticky(dir, victim, c).map_err(|e| FsError::new(e.errno.raw(), e.message))
}

/// Whether the sticky rule can refuse `c` anything in `dir` (so the victim
/// must be looked up to check it).
fn sticky_applies(dir: &Attr, c: &Creds) -> bool {
    dir.mode & 0o1000 != 0 && c.uid != 0 && c.uid != dir.uid
}

fn bad_reply(what: &str, r: &MdsReply) -> FsError {
    FsError::new(Errno::Io, format!("{what}: unexpected reply {r:?}"))
}

impl Inner {
    fn fresh(&self, c: &Cached) -> bool {
        c.fetched.elapsed() < self.cfg.attr_timeout
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, MetaCache> {
        lock(&self.cache)
    }

    /// Caches a lookup-style answer: the entry on demand, its neighbours as prefetch.
    fn absorb(&self, f: &proto::mds::Found) {
        let now = Instant::now();
        let mut c = self.cache();
        c.insert(
            Cached {
                entry: f.entry.clone(),
                grants: f.grants.clone(),
                fetched: now,
                layout_known: true,
            },
            Segment::Demand,
        );
        for e in &f.prefetch {
            let oid = data_oid(e.attr.ino);
            let grants: Vec<Grant> = f
                .prefetch_grants
                .iter()
                .filter(|g| g.covers(oid, 0))
                .cloned()
                .collect();
            c.insert(
                Cached {
                    entry: e.clone(),
                    grants,
                    fetched: now,
                    layout_known: true,
                },
                Segment::Prefetch,
            );
        }
    }

    /// Caches an entry answered from the namespace on the OSDs.
    fn remember(&self, entry: Entry, grants: Vec<Grant>) {
        self.cache().insert(
            Cached {
                entry,
                grants,
                fetched: Instant::now(),
                layout_known: true,
            },
            Segment::Demand,
        );
    }

    /// Updates a cached entry's attributes (after an operation returned them).
    pub fn cache_attr(&self, a: Attr) {
        self.cache().update(a.ino, |c| {
            c.entry.attr = a;
            c.fetched = Instant::now();
        });
    }

    /// Asks the MDS for a file's entry and capabilities (OPEN: a
    /// non-mandatory request, also used to renew capabilities).
    pub async fn open_grants(
        &self,
        ino: u64,
        creds: &Creds,
        write: bool,
    ) -> Result<(Entry, Vec<Grant>)> {
        Counters::add(&self.counters.cache_misses, 1);
        if let Some(ns) = &self.ns {
            let i = ns.inode(ino).await?;
            let a = crate::on_osds::attr(ino, &i);
            if a.kind == FileKind::Dir && write {
                return Err(FsError::new(
                    Errno::IsDir,
                    "cannot open a directory for writing",
                ));
            }
            check(&a, creds, if write { W } else { R }, "open")?;
            let parent = self.cache().peek(ino).map_or(ROOT_INO, |c| c.entry.parent);
            let entry = Entry {
                parent,
                name: String::new(),
                layout: crate::on_osds::layout(ino, &i),
                attr: a,
            };
            let grants = ns.grants().await?;
            self.remember(entry.clone(), grants.clone());
            return Ok((entry, grants));
        }
        match self
            .mds
            .call_as(creds.clone(), Op::Open { ino, write })
            .await?
        {
            MdsReply::Found(f) => {
                self.absorb(&f);
                Ok((f.entry, f.grants))
            }
            r => Err(bad_reply("open", &r)),
        }
    }

    /// The size this client knows for an open inode (its writes may not be
    /// committed yet).
    fn local_size(&self, ino: u64) -> Option<u64> {
        lock(&self.inodes)
            .get(&ino)
            .map(|f| f.size.load(Ordering::Relaxed))
    }
}

impl Client {
    /// A client of the cluster `cfg` names; checks the MDS answers and
    /// fetches the OSD map.
    pub async fn connect(cfg: ClientConfig) -> Result<Client> {
        let mut mds = MdsClient::new(&cfg.mds_addr, &cfg.cluster_id, cfg.mds_connections);
        mds.prefetch = cfg.prefetch;
        let osds = OsdSet::new(&cfg.cluster_id, cfg.osd_connections);
        let ns = OsdNamespace::probe(&cfg).await?.map(Arc::new);
        let inner = Arc::new(Inner {
            ns,
            cache: Mutex::new(MetaCache::new(cfg.cache_demand, cfg.cache_prefetch)),
            cfg,
            mds,
            osds,
            counters: Counters::default(),
            dirty_total: AtomicU64::new(0),
            inodes: Mutex::new(HashMap::new()),
            handles: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
        });
        inner.osds.refresh(&inner.mds).await.map_err(|e| {
            FsError::new(
                e.errno,
                format!("cannot reach the MDS at {}: {e}", inner.cfg.mds_addr),
            )
        })?;
        let weak = Arc::downgrade(&inner);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(250));
            loop {
                tick.tick().await;
                let Some(inner) = weak.upgrade() else { return };
                writeback_tick(&inner).await;
            }
        });
        Ok(Client { inner })
    }

    /// The shared state (for the FUSE layer and tools).
    pub fn inner(&self) -> &Arc<Inner> {
        &self.inner
    }

    /// The root directory's inode number.
    pub fn root(&self) -> u64 {
        ROOT_INO
    }

    /// Default credentials (root), for tools.
    pub fn creds(&self) -> Creds {
        self.inner.mds.creds.clone()
    }

    /// Counters: MDS requests (mandatory / non-mandatory), cache hits, bytes.
    pub fn stats(&self) -> ClientStats {
        let c = &self.inner.counters;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ClientStats {
            mds_mandatory: l(&self.inner.mds.mandatory),
            mds_non_mandatory: l(&self.inner.mds.non_mandatory),
            cache_hits: l(&c.cache_hits),
            prefetch_hits: l(&c.prefetch_hits),
            cache_misses: l(&c.cache_misses),
            bytes_read: l(&c.bytes_read),
            bytes_written: l(&c.bytes_written),
            osd_errors: l(&c.osd_errors),
        }
    }

    fn hit(&self, first_prefetch_use: bool) {
        Counters::add(&self.inner.counters.cache_hits, 1);
        if first_prefetch_use {
            Counters::add(&self.inner.counters.prefetch_hits, 1);
        }
    }

    fn miss(&self) {
        Counters::add(&self.inner.counters.cache_misses, 1);
    }

    async fn call(&self, c: &Creds, op: Op) -> Result<MdsReply> {
        Ok(self.inner.mds.call_as(c.clone(), op).await?)
    }

    fn with_local_size(&self, mut a: Attr) -> Attr {
        if let Some(s) = self.inner.local_size(a.ino) {
            a.size = a.size.max(s);
        }
        a
    }

    /// Finds `name` in directory `parent`.
    pub async fn lookup(&self, c: &Creds, parent: u64, name: &str) -> Result<Entry> {
        let cached = {
            let mut cache = self.inner.cache();
            match cache.ino_of(parent, name) {
                Some(ino) => match cache.peek(ino) {
                    Some(x) if self.inner.fresh(x) => cache.get(ino),
                    _ => None,
                },
                None => None,
            }
        };
        if let Some((x, first)) = cached {
            self.hit(first);
            let mut e = x.entry;
            e.attr = self.with_local_size(e.attr);
            return Ok(e);
        }
        self.miss();
        if let Some(ns) = &self.inner.ns {
            self.searchable(c, parent, "lookup").await?;
            let e = ns.lookup(parent, name).await?;
            self.inner.remember(e.clone(), ns.grants().await?);
            let mut e = e;
            e.attr = self.with_local_size(e.attr);
            return Ok(e);
        }
        match self
            .call(
                c,
                Op::Lookup {
                    parent,
                    name: name.into(),
                },
            )
            .await?
        {
            MdsReply::Found(f) => {
                self.inner.absorb(&f);
                let mut e = f.entry;
                e.attr = self.with_local_size(e.attr);
                Ok(e)
            }
            r => Err(bad_reply("lookup", &r)),
        }
    }

    /// Attributes of `ino`.
    pub async fn getattr(&self, c: &Creds, ino: u64) -> Result<Attr> {
        let cached = {
            let mut cache = self.inner.cache();
            match cache.peek(ino) {
                Some(x) if self.inner.fresh(x) => cache.get(ino),
                _ => None,
            }
        };
        if let Some((x, first)) = cached {
            self.hit(first);
            return Ok(self.with_local_size(x.entry.attr));
        }
        self.miss();
        if let Some(ns) = &self.inner.ns {
            let a = ns.getattr(ino).await?;
            self.inner.cache_attr(a.clone());
            return Ok(self.with_local_size(a));
        }
        match self.call(c, Op::GetAttr { ino }).await? {
            MdsReply::Attr(a) => {
                self.inner.cache_attr(a.clone());
                Ok(self.with_local_size(a))
            }
            r => Err(bad_reply("getattr", &r)),
        }
    }

    /// chmod, chown, utimens, truncate. A truncate first writes out this
    /// client's buffered data for the file.
    pub async fn setattr(&self, c: &Creds, ino: u64, set: SetAttr) -> Result<Attr> {
        let open = lock(&self.inner.inodes).get(&ino).cloned();
        let mut guard = match &open {
            Some(f) => Some(f.st.lock().await),
            None => None,
        };
        if let (Some(st), Some(_)) = (guard.as_mut(), set.size) {
            file::commit(&self.inner, ino, st).await?;
        }
        let a = match &self.inner.ns {
            Some(ns) => ns.setattr(c, ino, &set).await?,
            None => {
                let r = self
                    .call(
                        c,
                        Op::SetAttr {
                            ino,
                            set: set.clone(),
                        },
                    )
                    .await;
                match r? {
                    MdsReply::Attr(a) => a,
                    r => return Err(bad_reply("setattr", &r)),
                }
            }
        };
        if let (Some(f), Some(st), Some(size)) = (&open, guard.as_mut(), set.size) {
            file::truncated(f, st, size);
        }
        drop(guard);
        self.inner.cache_attr(a.clone());
        Ok(a)
    }

    /// Creates a regular file and opens it for writing: (entry, handle).
    pub async fn create(
        &self,
        c: &Creds,
        parent: u64,
        name: &str,
        mode: u32,
        exclusive: bool,
    ) -> Result<(Entry, u64)> {
        if let Some(ns) = &self.inner.ns {
            let pa = self.changeable(c, parent, "create").await?;
            let (e, created) = ns
                .make(c, parent, &pa, name, FileKind::File, mode, None, exclusive)
                .await?;
            if !created {
                check(&e.attr, c, W, "open for writing")?;
            }
            let grants = ns.grants().await?;
            self.inner.remember(e.clone(), grants.clone());
            let fh = self.install(c, &e, grants, true).await;
            return Ok((e, fh));
        }
        let op = Op::Create {
            parent,
            name: name.into(),
            mode,
            exclusive,
        };
        match self.call(c, op).await? {
            MdsReply::Found(f) => {
                self.inner.absorb(&f);
                let fh = self.install(c, &f.entry, f.grants.clone(), true).await;
                Ok((f.entry, fh))
            }
            r => Err(bad_reply("create", &r)),
        }
    }

    async fn entry_op(&self, c: &Creds, op: Op, what: &str) -> Result<Entry> {
        match self.call(c, op).await? {
            MdsReply::Found(f) => {
                self.inner.absorb(&f);
                Ok(f.entry)
            }
            r => Err(bad_reply(what, &r)),
        }
    }

    /// Makes a directory.
    pub async fn mkdir(&self, c: &Creds, parent: u64, name: &str, mode: u32) -> Result<Entry> {
        if self.inner.ns.is_some() {
            return self
                .ns_make(c, parent, name, FileKind::Dir, mode, None)
                .await;
        }
        let op = Op::Mkdir {
            parent,
            name: name.into(),
            mode,
        };
        self.entry_op(c, op, "mkdir").await
    }

    /// Makes a symbolic link.
    pub async fn symlink(&self, c: &Creds, parent: u64, name: &str, target: &str) -> Result<Entry> {
        if self.inner.ns.is_some() {
            let t = Some(target.to_string());
            return self
                .ns_make(c, parent, name, FileKind::Symlink, 0o777, t)
                .await;
        }
        let op = Op::Symlink {
            parent,
            name: name.into(),
            target: target.into(),
        };
        self.entry_op(c, op, "symlink").await
    }

    /// Adds a hard link.
    pub async fn link(&self, c: &Creds, ino: u64, parent: u64, name: &str) -> Result<Entry> {
        if let Some(ns) = &self.inner.ns {
            self.changeable(c, parent, "link").await?;
            let e = ns.link(ino, parent, name).await?;
            self.inner.remember(e.clone(), ns.grants().await?);
            return Ok(e);
        }
        let op = Op::Link {
            ino,
            parent,
            name: name.into(),
        };
        let e = self.entry_op(c, op, "link").await?;
        Ok(e)
    }

    /// Removes a file name.
    pub async fn unlink(&self, c: &Creds, parent: u64, name: &str) -> Result<()> {
        let ino = self.inner.cache().ino_of(parent, name);
        self.inner.cache().remove_name(parent, name);
        let r = match &self.inner.ns {
            Some(ns) => {
                self.removable(c, parent, name, "unlink").await?;
                let open = |i: u64| lock(&self.inner.inodes).contains_key(&i);
                ns.unlink(parent, name, &open).await.map(|i| {
                    self.inner.cache().remove(i);
                    MdsReply::Done
                })
            }
            None => {
                self.call(
                    c,
                    Op::Unlink {
                        parent,
                        name: name.into(),
                    },
                )
                .await
            }
        };
        if let Some(i) = ino {
            self.inner.cache().remove(i);
        }
        r.map(|_| ())
    }

    /// Removes an empty directory.
    pub async fn rmdir(&self, c: &Creds, parent: u64, name: &str) -> Result<()> {
        self.inner.cache().remove_name(parent, name);
        if let Some(ns) = &self.inner.ns {
            self.removable(c, parent, name, "rmdir").await?;
            return ns.rmdir(parent, name).await;
        }
        self.call(
            c,
            Op::Rmdir {
                parent,
                name: name.into(),
            },
        )
        .await
        .map(|_| ())
    }

    /// Renames atomically (POSIX replace rules; `noreplace` fails with EEXIST).
    pub async fn rename(
        &self,
        c: &Creds,
        parent: u64,
        name: &str,
        new_parent: u64,
        new_name: &str,
        noreplace: bool,
    ) -> Result<()> {
        {
            let mut cache = self.inner.cache();
            cache.remove_name(parent, name);
            cache.remove_name(new_parent, new_name);
        }
        if let Some(ns) = &self.inner.ns {
            self.removable(c, parent, name, "rename (source)").await?;
            let da = self.changeable(c, new_parent, "rename (target)").await?;
            if sticky_applies(&da, c)
                && let Ok(t) = ns.lookup(new_parent, new_name).await
            {
                sticky(&da, &t.attr, c)?;
            }
            let open = |i: u64| lock(&self.inner.inodes).contains_key(&i);
            return ns
                .rename((parent, name), (new_parent, new_name), noreplace, &open)
                .await;
        }
        self.call(
            c,
            Op::Rename {
                parent,
                name: name.into(),
                new_parent,
                new_name: new_name.into(),
                noreplace,
            },
        )
        .await
        .map(|_| ())
    }

    /// A symlink's target.
    pub async fn readlink(&self, c: &Creds, ino: u64) -> Result<String> {
        if let Some(ns) = &self.inner.ns {
            return ns.readlink(ino).await;
        }
        match self.call(c, Op::Readlink { ino }).await? {
            MdsReply::Target(t) => Ok(t),
            r => Err(bad_reply("readlink", &r)),
        }
    }

    /// Every entry of a directory, in name order, with attributes.
    pub async fn readdir(&self, c: &Creds, ino: u64) -> Result<Vec<DirEntry>> {
        let mut out: Vec<DirEntry> = Vec::new();
        if let Some(ns) = &self.inner.ns {
            let a = self.getattr(c, ino).await?;
            check(&a, c, R, "readdir")?;
            out = ns.readdir(ino).await?;
        }
        while self.inner.ns.is_none() {
            let after = out.last().map(|e| e.name.clone());
            match self
                .call(
                    c,
                    Op::Readdir {
                        ino,
                        after,
                        max: 1000,
                        plus: true,
                    },
                )
                .await?
            {
                MdsReply::Dir { entries, more } => {
                    out.extend(entries);
                    if !more {
                        break;
                    }
                }
                r => return Err(bad_reply("readdir", &r)),
            }
        }
        for e in &mut out {
            if let Some(a) = e.attr.take() {
                e.attr = Some(self.with_local_size(a));
            }
        }
        Ok(out)
    }

    /// File-system totals.
    pub async fn statfs(&self, c: &Creds) -> Result<FsStat> {
        // Space comes from the OSDs' reports to the MDS in both modes.
        match self.call(c, Op::Statfs).await? {
            MdsReply::Statfs(s) => Ok(s),
            r => Err(bad_reply("statfs", &r)),
        }
    }

    /// Cluster status (OSDs, space, MDS request counts).
    pub async fn status(&self) -> Result<ClusterStatus> {
        match self.call(&self.creds(), Op::Status).await? {
            MdsReply::Status(s) => Ok(*s),
            r => Err(bad_reply("status", &r)),
        }
    }

    /// Reads an extended attribute.
    pub async fn getxattr(&self, c: &Creds, ino: u64, name: &str) -> Result<Vec<u8>> {
        if let Some(ns) = &self.inner.ns {
            check(&ns.getattr(ino).await?, c, R, "getxattr")?;
            return ns.getxattr(ino, name).await;
        }
        match self
            .call(
                c,
                Op::GetXattr {
                    ino,
                    name: name.into(),
                },
            )
            .await?
        {
            MdsReply::Xattr(v) => Ok(v),
            r => Err(bad_reply("getxattr", &r)),
        }
    }

    /// Sets an extended attribute.
    pub async fn setxattr(
        &self,
        c: &Creds,
        ino: u64,
        name: &str,
        value: &[u8],
        mode: XattrMode,
    ) -> Result<()> {
        if let Some(ns) = &self.inner.ns {
            self.xattr_writable(c, ino, "setxattr").await?;
            return ns.setxattr(ino, name, Some(value), mode).await;
        }
        let op = Op::SetXattr {
            ino,
            name: name.into(),
            value: value.to_vec(),
            mode,
        };
        self.call(c, op).await.map(|_| ())
    }

    /// Names of the extended attributes.
    pub async fn listxattr(&self, c: &Creds, ino: u64) -> Result<Vec<String>> {
        if let Some(ns) = &self.inner.ns {
            return ns.listxattr(ino).await;
        }
        match self.call(c, Op::ListXattr { ino }).await? {
            MdsReply::XattrNames(v) => Ok(v),
            r => Err(bad_reply("listxattr", &r)),
        }
    }

    /// Removes an extended attribute.
    pub async fn removexattr(&self, c: &Creds, ino: u64, name: &str) -> Result<()> {
        if let Some(ns) = &self.inner.ns {
            self.xattr_writable(c, ino, "removexattr").await?;
            return ns.setxattr(ino, name, None, XattrMode::Either).await;
        }
        let op = Op::RemoveXattr {
            ino,
            name: name.into(),
        };
        self.call(c, op).await.map(|_| ())
    }

    /// Sets a directory's default layout or an empty file's layout.
    pub async fn set_layout(&self, c: &Creds, ino: u64, spec: LayoutSpec) -> Result<()> {
        if self.inner.ns.is_some() {
            return Err(FsError::new(
                Errno::Inval,
                "layouts cannot be set on a file system whose namespace is on the OSDs: \
                 new files take the client's default layout",
            ));
        }
        self.call(c, Op::SetLayout { ino, spec }).await.map(|_| ())
    }

    /// A file's layout.
    pub async fn layout(&self, c: &Creds, ino: u64) -> Result<Option<Layout>> {
        if let Some(ns) = &self.inner.ns {
            return Ok(crate::on_osds::layout(ino, &ns.inode(ino).await?));
        }
        match self.call(c, Op::GetLayout { ino }).await? {
            MdsReply::Layout { layout, .. } => Ok(layout),
            r => Err(bad_reply("getlayout", &r)),
        }
    }

    /// Namespace on the OSDs: a directory `c` may search (`what` names the
    /// operation in the error).
    async fn searchable(&self, c: &Creds, dir: u64, what: &str) -> Result<Attr> {
        let a = self.getattr(c, dir).await?;
        if a.kind != FileKind::Dir {
            return Err(FsError::new(
                Errno::NotDir,
                format!("{what}: inode {dir} is not a directory"),
            ));
        }
        check(&a, c, X, what)?;
        Ok(a)
    }

    /// Namespace on the OSDs: a directory `c` may add names to.
    async fn changeable(&self, c: &Creds, dir: u64, what: &str) -> Result<Attr> {
        let a = self.searchable(c, dir, what).await?;
        check(&a, c, W | X, what)?;
        Ok(a)
    }

    /// Namespace on the OSDs: `c` may remove `name` from `dir` (write and
    /// search on it, and the sticky rule).
    async fn removable(&self, c: &Creds, dir: u64, name: &str, what: &str) -> Result<()> {
        let a = self.changeable(c, dir, what).await?;
        if sticky_applies(&a, c)
            && let Some(ns) = &self.inner.ns
        {
            let v = ns.lookup(dir, name).await?;
            sticky(&a, &v.attr, c)?;
        }
        Ok(())
    }

    /// Namespace on the OSDs: `c` may change `ino`'s extended attributes
    /// (the owner, root, or write permission).
    async fn xattr_writable(&self, c: &Creds, ino: u64, what: &str) -> Result<()> {
        let a = self.getattr(c, ino).await?;
        if c.uid != 0 && c.uid != a.uid {
            check(&a, c, W, what)?;
        }
        Ok(())
    }

    /// Namespace on the OSDs: mkdir and symlink.
    async fn ns_make(
        &self,
        c: &Creds,
        parent: u64,
        name: &str,
        k: FileKind,
        mode: u32,
        target: Option<String>,
    ) -> Result<Entry> {
        let Some(ns) = &self.inner.ns else {
            return Err(FsError::new(Errno::Io, "not a namespace on the OSDs"));
        };
        let pa = self.changeable(c, parent, "make").await?;
        let (e, _) = ns.make(c, parent, &pa, name, k, mode, target, true).await?;
        self.inner.remember(e.clone(), ns.grants().await?);
        Ok(e)
    }

    /// Registers a handle on an inode (sharing the open state of other handles).
    async fn install(&self, c: &Creds, e: &Entry, grants: Vec<Grant>, write: bool) -> u64 {
        let ino = e.attr.ino;
        let f = {
            let mut m = lock(&self.inner.inodes);
            m.entry(ino)
                .or_insert_with(|| {
                    Arc::new(OpenInode::new(
                        ino,
                        e.layout.clone(),
                        grants.clone(),
                        write,
                        c.clone(),
                        e.attr.size,
                    ))
                })
                .clone()
        };
        {
            let mut st = f.st.lock().await;
            if st.handles > 0 {
                // Another handle has it open: keep what this client wrote,
                // take newer capabilities and a longer length from the MDS.
                if write && !st.write_caps || grants.iter().any(|g| g.rights & rights::WRITE != 0) {
                    st.grants = grants;
                    st.write_caps |= write;
                    st.creds = c.clone();
                }
                if !st.busy() {
                    st.size = st.size.max(e.attr.size);
                    f.size.store(st.size, Ordering::Relaxed);
                }
                if st.layout.is_none() {
                    st.layout = e.layout.clone();
                }
            }
            st.handles += 1;
        }
        let fh = self.inner.next_fh.fetch_add(1, Ordering::Relaxed);
        lock(&self.inner.handles).insert(fh, Handle { inode: f, write });
        fh
    }

    /// Opens a file; read-only opens are answered from the cache when a
    /// fresh entry with a read capability is there (what prefetch buys).
    pub async fn open(&self, c: &Creds, ino: u64, write: bool) -> Result<u64> {
        if !write {
            let margin = self.inner.cfg.cap_margin.as_millis() as u64;
            let cached = {
                let mut cache = self.inner.cache();
                let usable = cache.peek(ino).is_some_and(|x| {
                    self.inner.fresh(x)
                        && x.layout_known
                        && (x.entry.attr.kind != FileKind::File
                            || x.grants.iter().any(|g| {
                                g.covers(data_oid(ino), rights::READ)
                                    && g.expiry_ms > now_ms() + margin
                            }))
                });
                if usable { cache.get(ino) } else { None }
            };
            if let Some((x, first)) = cached {
                self.hit(first);
                return Ok(self.install(c, &x.entry, x.grants, false).await);
            }
        }
        let (entry, grants) = self.inner.open_grants(ino, c, write).await?;
        Ok(self.install(c, &entry, grants, write).await)
    }

    fn handle(&self, fh: u64) -> Result<Handle> {
        lock(&self.inner.handles)
            .get(&fh)
            .cloned()
            .ok_or_else(|| FsError::new(Errno::BadF, format!("no open file handle {fh}")))
    }

    /// Reads up to `len` bytes at `off`.
    pub async fn read(&self, fh: u64, off: u64, len: u32) -> Result<Bytes> {
        let h = self.handle(fh)?;
        file::read(&self.inner, &h.inode, off, len).await
    }

    /// Writes `data` at `off` (buffered; durable after fsync or close).
    pub async fn write(&self, fh: u64, off: u64, data: &[u8]) -> Result<u32> {
        let h = self.handle(fh)?;
        if !h.write {
            return Err(FsError::new(Errno::BadF, "handle not open for writing"));
        }
        file::write(&self.inner, &h.inode, off, data).await
    }

    /// Writes buffered data out and commits the length (close and fsync).
    pub async fn flush(&self, fh: u64) -> Result<()> {
        let h = self.handle(fh)?;
        let mut st = h.inode.st.lock().await;
        file::commit(&self.inner, h.inode.ino, &mut st).await
    }

    /// fsync: when it returns, every byte written through this client to
    /// the file is on the OSDs' devices and its length is in the MDS log.
    pub async fn fsync(&self, fh: u64) -> Result<()> {
        self.flush(fh).await
    }

    /// Closes a handle (writes out and commits if it was the last).
    pub async fn release(&self, fh: u64) -> Result<()> {
        let h = self.handle(fh)?;
        let r = {
            let mut st = h.inode.st.lock().await;
            let r = file::commit(&self.inner, h.inode.ino, &mut st).await;
            st.handles = st.handles.saturating_sub(1);
            if st.handles == 0 && !st.busy() {
                lock(&self.inner.inodes).remove(&h.inode.ino);
            }
            r
        };
        lock(&self.inner.handles).remove(&fh);
        if let Some(ns) = &self.inner.ns
            && !lock(&self.inner.inodes).contains_key(&h.inode.ino)
        {
            ns.released(h.inode.ino).await?;
        }
        r
    }

    /// The parent directory this client last saw for `ino` (the root if unknown).
    pub fn parent_hint(&self, ino: u64) -> u64 {
        self.inner
            .cache()
            .peek(ino)
            .map_or(ROOT_INO, |c| c.entry.parent)
    }

    /// Resolves an absolute path (each component through the cache).
    pub async fn resolve(&self, c: &Creds, path: &str) -> Result<Entry> {
        let mut cur: Option<Entry> = None;
        let mut ino = ROOT_INO;
        for part in path.split('/').filter(|p| !p.is_empty() && *p != ".") {
            let e = self.lookup(c, ino, part).await?;
            ino = e.attr.ino;
            cur = Some(e);
        }
        match cur {
            Some(e) => Ok(e),
            None => Ok(Entry {
                parent: ROOT_INO,
                name: String::new(),
                attr: self.getattr(c, ROOT_INO).await?,
                layout: None,
            }),
        }
    }

    /// Writes out every open file's buffered data and commits lengths.
    pub async fn sync_all(&self) -> Result<()> {
        let files: Vec<Arc<OpenInode>> = lock(&self.inner.inodes).values().cloned().collect();
        let mut first = Ok(());
        for f in files {
            let mut st = f.st.lock().await;
            if let Err(e) = file::commit(&self.inner, f.ino, &mut st).await
                && first.is_ok()
            {
                first = Err(e);
            }
        }
        first
    }
}

/// One pass of the write-back timer: files with data older than the delay
/// are written out and their lengths committed.
async fn writeback_tick(inner: &Arc<Inner>) {
    let files: Vec<Arc<OpenInode>> = lock(&inner.inodes).values().cloned().collect();
    for f in files {
        let Ok(mut st) = f.st.try_lock() else {
            continue;
        };
        if file::due(&st, inner.cfg.writeback_delay)
            && let Err(e) = file::commit(inner, f.ino, &mut st).await
        {
            tracing::warn!(ino = f.ino, "write-back failed: {e}");
        }
    }
}
