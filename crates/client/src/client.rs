//! The client: namespace calls through one [`Namespace`] — the MDS, or
//! for a file system formatted with `--namespace osd` the OSDs themselves —
//! answered from the metadata cache while fresh; open files with their
//! data path straight to the OSDs ([`crate::handles`]); and a timer that
//! writes buffered data out. Nothing here depends on which namespace
//! answers.
//!
//! Consistency (see `docs/CLIENT.md`): close-to-open. Closing or fsyncing a
//! file writes its data to the OSDs (durable when they answer) and commits
//! its length and mtime to the namespace; an open in any client after that
//! sees them, except that a client answers lookups, getattrs and read-only
//! opens from entries younger than `attr_timeout` (default 1 s, 0 = always
//! ask). Within one client every handle sees every write at once.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use net::MdsClient;
use proto::layout::{Layout, LayoutSpec};
use proto::mds::{
    Attr, ClusterStatus, Creds, DirEntry, Entry, FileKind, Found, FsStat, MdsReply, Op,
};

use crate::config::ClientConfig;
use crate::error::{Errno, FsError, Result};
use crate::file;
use crate::leases::DirLeases;
use crate::meta::Meta;
use crate::namespace::Namespace;
use crate::on_mds::{MdsNamespace, bad_reply};
use crate::on_osds::OsdNamespace;
use crate::open_file::OpenInode;
use crate::osds::OsdSet;
use crate::state::{Inner, lock};
use crate::stats::ClientStats;

/// A Tessera client. Cheap to clone; all clones share one cache and one set
/// of connections.
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
}

impl Client {
    /// A client of the cluster `cfg` names; checks the MDS answers, learns
    /// where the namespace lives and fetches the OSD map.
    pub async fn connect(cfg: ClientConfig) -> Result<Client> {
        let mut mds = MdsClient::with_encryption(
            &cfg.mds_addr,
            &cfg.cluster_id,
            cfg.identity.clone(),
            cfg.mds_connections,
            cfg.encrypt,
        );
        mds.prefetch = cfg.prefetch;
        mds.set_early(cfg.early_answers);
        let mds = Arc::new(mds);
        // Who this client is, and where its root is (a principal confined
        // to a subtree sees that directory as its root).
        let me = match mds.call(Op::Whoami).await {
            Ok(MdsReply::Principal(p)) => p,
            Ok(r) => {
                return Err(FsError::new(
                    Errno::Io,
                    format!("the MDS answered Whoami with {r:?}"),
                ));
            }
            Err(e) => {
                return Err(FsError::new(
                    e.code(),
                    format!("cannot reach the MDS at {}: {e}", cfg.mds_addr),
                ));
            }
        };
        // An MDS that requires encryption encrypts this client's OSD
        // connections too.
        let encrypt = cfg.encrypt || mds.encrypted().await;
        let tickets = net::auth::TicketsFromMds::new(mds.clone());
        let osds = Arc::new(OsdSet::new(
            &cfg.cluster_id,
            cfg.osd_connections,
            tickets.clone(),
            encrypt,
        ));
        let meta = Arc::new(Meta::new(
            cfg.cache_demand,
            cfg.cache_prefetch,
            cfg.attr_timeout,
        ));
        let mut leases = DirLeases::new(mds.clone(), false);
        let ns: Arc<dyn Namespace> =
            match OsdNamespace::probe(&cfg, mds.clone(), meta.clone()).await? {
                Some(ns) => {
                    // With replica chains, file data goes through the
                    // groups' heads too.
                    if ns.fs.osds.creds().chains.is_some() {
                        osds.use_groups(ns.fs.osds.clone());
                    }
                    Arc::new(ns)
                }
                None => {
                    leases = DirLeases::new(mds.clone(), cfg.early_answers && cfg.dir_leases);
                    Arc::new(MdsNamespace::with_leases(mds.clone(), leases.clone()))
                }
            };
        let inner = Arc::new(Inner {
            ns,
            leases,
            absent: crate::absent::Absent::new(cfg.attr_timeout),
            bare: crate::xattrs::Bare::new(cfg.attr_timeout),
            no_caps: crate::privs::NoCaps::new(cfg.attr_timeout),
            targets: Default::default(),
            meta,
            cfg,
            mds,
            osds,
            dirty_total: AtomicU64::new(0),
            locks: Default::default(),
            inodes: Mutex::new(HashMap::new()),
            present: Default::default(),
            eof_checked: Default::default(),
            short_checked: Default::default(),
            handles: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            root: me.root_ino,
            principal: *me,
        });
        inner.osds.refresh(&inner.mds).await.map_err(|e| {
            FsError::new(
                e.errno,
                format!("cannot reach the MDS at {}: {e}", inner.cfg.mds_addr),
            )
        })?;
        let weak = Arc::downgrade(&inner);
        inner.leases.set_flusher(Box::new(move |inos| {
            let weak = weak.clone();
            Box::pin(async move {
                if let Some(inner) = weak.upgrade() {
                    crate::closed::write_out(&inner, Some(&inos)).await;
                }
            })
        }));
        let weak = Arc::downgrade(&inner);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(250));
            loop {
                tick.tick().await;
                let Some(inner) = weak.upgrade() else { return };
                writeback_tick(&inner).await;
            }
        });
        if inner.cfg.early_answers {
            // A restarted MDS waits for this client's replay: be there.
            let weak = Arc::downgrade(&inner);
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_millis(300));
                loop {
                    tick.tick().await;
                    let Some(inner) = weak.upgrade() else { return };
                    inner.mds.keep_replayable().await;
                }
            });
        }
        let weak = Arc::downgrade(&inner);
        tokio::spawn(async move {
            let period = Duration::from_millis(proto::mds::HOLD_INTERVAL_MS);
            let mut tick = tokio::time::interval(period);
            let mut told_some = false;
            loop {
                tick.tick().await;
                let Some(inner) = weak.upgrade() else { return };
                let held = inner.held();
                // Nothing open, and the MDS knows: nothing to say.
                if !held.is_empty() || told_some {
                    let some = !held.is_empty();
                    match inner.ns.holding(held).await {
                        Ok(()) => told_some = some,
                        Err(e) => {
                            tracing::debug!(error = %e, "telling the MDS the open files failed")
                        }
                    }
                }
                // After the holds: a restarted MDS judges taken-back locks
                // by what the session holds open.
                crate::locks::report(&inner).await;
            }
        });
        Ok(Client { inner })
    }

    /// The shared state (for the FUSE layer and tools).
    pub fn inner(&self) -> &Arc<Inner> {
        &self.inner
    }

    /// The root directory's inode number (a confined principal's own root).
    pub fn root(&self) -> u64 {
        self.inner.root
    }

    /// The principal this client is.
    pub fn principal(&self) -> &proto::mds::PrincipalInfo {
        &self.inner.principal
    }

    /// Default credentials (root), for tools.
    pub fn creds(&self) -> Creds {
        self.inner.mds.creds.clone()
    }

    /// Counters: MDS requests (mandatory / non-mandatory), cache hits, bytes.
    pub fn stats(&self) -> ClientStats {
        let c = &self.inner.meta.counters;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ClientStats {
            mds_mandatory: l(&self.inner.mds.mandatory),
            mds_non_mandatory: l(&self.inner.mds.non_mandatory),
            mds_absent: l(&self.inner.mds.absent),
            cache_hits: l(&c.cache_hits),
            prefetch_hits: l(&c.prefetch_hits),
            cache_misses: l(&c.cache_misses),
            bytes_read: l(&c.bytes_read),
            bytes_written: l(&c.bytes_written),
            osd_errors: l(&c.osd_errors),
            bytes_copied_on_osds: l(&c.bytes_copied_on_osds),
            replayed: l(&self.inner.mds.replayed),
            replay_failed: l(&self.inner.mds.replay_failed),
            leases_granted: l(&self.inner.leases.granted),
            lease_answered: l(&self.inner.leases.answered),
            lease_lookups: l(&self.inner.leases.looked_up),
            deferred_closes: l(&self.inner.leases.deferred_closes),
        }
    }

    async fn call(&self, c: &Creds, op: Op) -> Result<MdsReply> {
        // statfs counts the inodes this client made under a lease too.
        self.inner.leases.drain().await?;
        self.inner
            .mds
            .call_as(c.clone(), op)
            .await
            .map_err(crate::error::from_call)
    }

    /// After an operation that adds `name` to `parent`: known present, or
    /// (it failed, perhaps half-way) nothing known of `parent`.
    pub(crate) fn named<T>(&self, parent: u64, name: &str, r: &Result<T>) {
        match r {
            Ok(_) => self.inner.absent.added(parent, name),
            Err(_) => {
                self.inner.absent.forget(parent);
                self.inner.leases.forget(parent);
            }
        }
    }

    /// After an operation that made `name` in `parent`: what the lease,
    /// the cache and the directory's cached attributes learn from it.
    /// `new`: the operation cannot have answered an existing inode (an
    /// exclusive create, mkdir, mknod, symlink), which then has no
    /// extended attributes. `since`: the commit number the operation was
    /// asked at ([`crate::commits`]).
    fn made(
        &self,
        parent: u64,
        name: &str,
        r: Result<Found>,
        new: bool,
        since: u64,
    ) -> Result<Found> {
        self.named(parent, name, &r);
        let mut f = r?;
        let made = (f.entry.attr.ino, f.entry.attr.kind);
        self.inner
            .leases
            .changed(parent, name, Some(made), f.dir.as_ref());
        self.take_found(&mut f, since);
        self.inner.meta.dir_changed(parent, f.dir.as_ref());
        if new {
            self.inner.bare.made(f.entry.attr.ino);
        }
        Ok(f)
    }

    /// After an operation that removes `name` from `parent`.
    fn unnamed<T>(&self, parent: u64, name: &str, r: &Result<T>, dir: Option<&Attr>) {
        match r {
            Ok(_) => {
                self.inner.absent.removed(parent, name);
                self.inner.leases.changed(parent, name, None, dir);
            }
            Err(_) => {
                self.inner.absent.forget(parent);
                self.inner.leases.forget(parent);
            }
        }
    }

    /// Makes a FIFO, device or socket (`mknod`; devices need root).
    pub async fn mknod(
        &self,
        c: &Creds,
        parent: u64,
        name: &str,
        kind: FileKind,
        mode: u32,
        rdev: u32,
    ) -> Result<Entry> {
        let asked = self.inner.meta.commits.ask();
        let r = self.inner.ns.mknod(c, parent, name, kind, mode, rdev).await;
        let f = self.made(parent, name, r, true, asked.since())?;
        Ok(f.entry)
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
        if let Some(r) = self
            .inner
            .leases
            .create(c, parent, name, mode, exclusive)
            .await
        {
            // Answered under the directory's lease: the MDS hears of it
            // next; the file's layout and capabilities come at its first
            // read or write.
            let (entry, dir) = r?;
            self.inner.absent.added(parent, name);
            let mut f = Found {
                entry,
                grants: Vec::new(),
                prefetch: Vec::new(),
                prefetch_grants: Vec::new(),
                dir: Some(dir),
            };
            self.inner
                .meta
                .absorb(&mut f, self.inner.meta.commits.last());
            self.inner.meta.dir_changed(parent, f.dir.as_ref());
            self.inner.bare.made(f.entry.attr.ino);
            return Ok(self.install(c, f.entry, Vec::new(), true, None).await);
        }
        // A create that is not exclusive may open a file that was there —
        // one this client may have written out and forgotten meanwhile,
        // its length committed after the answer was made: settled.
        let asked = self.inner.meta.commits.ask();
        let r = self.inner.ns.create(c, parent, name, mode, exclusive).await;
        let f = self.made(parent, name, r, exclusive, asked.since())?;
        let since = Some(asked.since());
        Ok(self.install(c, f.entry, f.grants, true, since).await)
    }

    /// Makes a directory.
    pub async fn mkdir(&self, c: &Creds, parent: u64, name: &str, mode: u32) -> Result<Entry> {
        let asked = self.inner.meta.commits.ask();
        let r = self.inner.ns.mkdir(c, parent, name, mode).await;
        let f = self.made(parent, name, r, true, asked.since())?;
        // Nobody else knows it yet: files are likely to follow.
        self.inner.leases.made_here(f.entry.attr.ino);
        Ok(f.entry)
    }

    /// Makes a symbolic link.
    pub async fn symlink(&self, c: &Creds, parent: u64, name: &str, target: &str) -> Result<Entry> {
        let asked = self.inner.meta.commits.ask();
        let r = self.inner.ns.symlink(c, parent, name, target).await;
        let f = self.made(parent, name, r, true, asked.since())?;
        Ok(f.entry)
    }

    /// Adds a hard link.
    pub async fn link(&self, c: &Creds, ino: u64, parent: u64, name: &str) -> Result<Entry> {
        // A second name could be reached without this client's lease.
        crate::closed::write_out(&self.inner, None).await;
        self.inner.leases.renamed_or_linked();
        let asked = self.inner.meta.commits.ask();
        let r = self.inner.ns.link(c, ino, parent, name).await;
        // With the length this client knows, if longer (a descriptor may
        // still hold data the namespace has not had).
        let f = self.made(parent, name, r, false, asked.since())?;
        Ok(f.entry)
    }

    /// Removes a file name.
    pub async fn unlink(&self, c: &Creds, parent: u64, name: &str) -> Result<()> {
        // A closed file's data goes out before its name may go (and with
        // it the objects the data would be written to).
        crate::closed::write_out(&self.inner, None).await;
        if let Some(r) = self.inner.leases.unlink(c, parent, name).await {
            let (ino, dir) = r?;
            self.inner.absent.removed(parent, name);
            let mut cache = self.inner.meta.cache();
            cache.remove_name(parent, name);
            cache.remove(ino);
            drop(cache);
            self.inner.meta.dir_changed(parent, Some(&dir));
            return Ok(());
        }
        let ino = self.inner.meta.cache().ino_of(parent, name);
        self.inner.meta.cache().remove_name(parent, name);
        let open = |i: u64| self.inner.is_open(i);
        let r = self.inner.ns.unlink(c, parent, name, &open).await;
        let dir = r.as_ref().ok().and_then(|r| r.dir.as_ref());
        self.unnamed(parent, name, &r, dir);
        let removed = r.as_ref().ok().and_then(|r| r.ino);
        for i in [ino, removed].into_iter().flatten() {
            self.inner.meta.cache().remove(i);
            self.inner.leases.unmade(i);
        }
        self.inner.meta.dir_changed(parent, dir);
        r.map(|_| ())
    }

    /// Removes an empty directory.
    pub async fn rmdir(&self, c: &Creds, parent: u64, name: &str) -> Result<()> {
        self.inner.meta.cache().remove_name(parent, name);
        let r = self.inner.ns.rmdir(c, parent, name).await;
        let dir = r.as_ref().ok().and_then(|d| d.as_ref());
        self.unnamed(parent, name, &r, dir);
        self.inner.meta.dir_changed(parent, dir);
        r.map(|_| ())
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
        // Closed files' data goes out first: a file moved to a directory
        // this client holds no lease on could be opened elsewhere at once,
        // and a replaced one is removed.
        crate::closed::write_out(&self.inner, None).await;
        self.inner.leases.renamed_or_linked();
        let (cached, replaced) = {
            let mut cache = self.inner.meta.cache();
            let moved = cache.ino_of(parent, name);
            let replaced = cache.ino_of(new_parent, new_name);
            cache.remove_name(parent, name);
            cache.remove_name(new_parent, new_name);
            (moved, replaced)
        };
        let open = |i: u64| self.inner.is_open(i);
        let asked = self.inner.meta.commits.ask();
        let r = self
            .inner
            .ns
            .rename(c, (parent, name), (new_parent, new_name), noreplace, &open)
            .await;
        if r.as_ref().is_ok_and(|x| x.unchanged) {
            // Two links of one file: nothing changed, both names stay.
            return Ok(());
        }
        // The reply carries the target directory's attributes, not the
        // source's (the same one in a rename within a directory).
        let found = r.as_ref().ok().and_then(|x| x.found.clone());
        let target = found.as_ref().and_then(|f| f.dir.clone());
        self.unnamed(
            parent,
            name,
            &r,
            target.as_ref().filter(|_| parent == new_parent),
        );
        self.named(new_parent, new_name, &r);
        // What the new name names, and its kind, this lease does not know.
        self.inner.leases.forget(new_parent);
        if parent != new_parent || target.is_none() {
            self.inner.meta.changed(parent);
        }
        self.inner.meta.dir_changed(new_parent, target.as_ref());
        // The moved inode's ctime (and a directory's parent) changed; a
        // replaced one lost a link.
        let moved = r.as_ref().ok().and_then(|x| x.moved);
        for i in [cached, moved, replaced].into_iter().flatten() {
            self.inner.meta.changed(i);
        }
        // A replaced file may be gone, its objects too: an open of it
        // must ask the namespace (ESTALE has the kernel look the name up
        // again), not read its old entry's objects as holes.
        if let Some(i) = replaced.filter(|&i| Some(i) != moved) {
            self.inner.meta.cache().remove(i);
        }
        // The moved entry as it is now, under its new name — unless this
        // client has it open (a close or flush racing with the rename may
        // have newer attributes than the rename's answer).
        if let Some(mut f) = found.filter(|f| !self.inner.is_open(f.entry.attr.ino)) {
            self.inner.meta.absorb(&mut f, asked.since());
        }
        r.map(|_| ())
    }

    /// Every entry of a directory, in name order, with attributes.
    pub async fn readdir(&self, c: &Creds, ino: u64) -> Result<Vec<DirEntry>> {
        let meta = &self.inner.meta;
        // Held until the listing is settled: the commits after it stay.
        let asked = meta.commits.ask();
        let (at, since, mut out, kept) = match meta.listings.take(ino) {
            Some((at, since, out)) => {
                meta.hit(true);
                (at, since, out, true)
            }
            None => {
                let at = std::time::Instant::now();
                let (out, listings) = self.inner.ns.readdir_prefetch(c, ino).await?;
                meta.listings.insert(at, asked.since(), listings);
                (at, asked.since(), out, false)
            }
        };
        // The lengths held here first, then the listing settled against
        // this client's commits since it was asked for (and cached).
        let local: Vec<_> = out.iter().map(|e| self.inner.local_size(e.ino)).collect();
        self.inner
            .absent
            .listed(ino, at, out.iter().map(|e| e.name.clone()));
        meta.listed(ino, at, &mut out, since);
        for (e, held) in out.iter_mut().zip(local) {
            // A kept listing: this client's fresher attributes win.
            if kept && let Some(x) = meta.cache().peek(e.ino).filter(|x| x.fetched > at) {
                e.attr = Some(x.entry.attr.clone());
            }
            if let Some(a) = e.attr.as_mut() {
                crate::state::Held::apply(held, a);
            }
        }
        Ok(out)
    }

    /// File-system totals.
    pub async fn statfs(&self, c: &Creds) -> Result<FsStat> {
        // Space comes from the OSDs' reports to the MDS in both modes;
        // inodes from the namespace where it counts them.
        let mut s = match self.call(c, Op::Statfs).await? {
            MdsReply::Statfs(s) => s,
            r => return Err(bad_reply("statfs", &r)),
        };
        if let Some(n) = self.inner.ns.inodes().await? {
            s.inodes = n;
        }
        Ok(s)
    }

    /// Cluster status (OSDs, space, MDS request counts).
    pub async fn status(&self) -> Result<ClusterStatus> {
        match self.call(&self.creds(), Op::Status).await? {
            MdsReply::Status(s) => Ok(*s),
            r => Err(bad_reply("status", &r)),
        }
    }

    /// Sets a directory's default layout or an empty file's layout.
    pub async fn set_layout(&self, c: &Creds, ino: u64, spec: LayoutSpec) -> Result<()> {
        self.inner.ns.set_layout(c, ino, spec).await
    }

    /// A file's layout.
    pub async fn layout(&self, c: &Creds, ino: u64) -> Result<Option<Layout>> {
        self.inner.ns.layout(c, ino).await
    }

    /// The parent directory this client last saw for `ino` (the root if unknown).
    pub fn parent_hint(&self, ino: u64) -> u64 {
        self.inner.meta.parent_of(ino).unwrap_or(self.root())
    }

    /// Resolves an absolute path (each component through the cache).
    pub async fn resolve(&self, c: &Creds, path: &str) -> Result<Entry> {
        let mut cur: Option<Entry> = None;
        let root = self.root();
        let mut ino = root;
        for part in path.split('/').filter(|p| !p.is_empty() && *p != ".") {
            let e = self.lookup(c, ino, part).await?;
            ino = e.attr.ino;
            cur = Some(e);
        }
        match cur {
            Some(e) => Ok(e),
            None => Ok(Entry {
                parent: root,
                name: String::new(),
                attr: self.getattr(c, root).await?,
                layout: None,
            }),
        }
    }

    /// Writes out every open file's buffered data, commits lengths, and
    /// makes every namespace change this client saw answered durable.
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
        let open = |i: u64| self.inner.is_open(i);
        let removed = self.inner.ns.remove_due(&open, true).await;
        first.and(removed).and(self.sync_namespace().await)
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
        // Closed ones, below.
        if st.handles == 0 || !file::due(&st, inner.cfg.writeback_delay) {
            continue;
        }
        // Data that could not be written is out of the buffer: its error
        // stays with the file, so the next write, fsync or close reports
        // it (a timer that only logged it let an fsync succeed after it).
        if let Err(e) = file::flush_in_background(inner, f.ino, &mut st).await {
            tracing::warn!(ino = f.ino, "write-back failed: {e}");
            continue;
        }
        if let Err(e) = file::commit(inner, f.ino, &mut st).await {
            // Only the length's commit: fsync and close commit it again.
            tracing::warn!(ino = f.ino, "write-back's length commit failed: {e}");
        }
    }
    crate::closed::write_out_older(inner, None, Some(inner.cfg.writeback_delay)).await;
    let open = |i: u64| inner.is_open(i);
    if let Err(e) = inner.ns.remove_due(&open, false).await {
        tracing::warn!("removing unlinked files' objects: {e}");
    }
}
