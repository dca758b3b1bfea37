//! Open files through a [`Client`]: handles (open, install, close),
//! reads and writes, flush and fsync, and the calls made on a descriptor
//! (fallocate, copy_file_range, SEEK_DATA/SEEK_HOLE). The data path itself
//! is [`crate::file`]; the namespace calls are in [`crate::client`].

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use proto::layout::data_oid;
use proto::mds::{Creds, Entry, FileKind, Grant};
use proto::rights;

use crate::client::Client;
use crate::error::{Errno, FsError, Result};
use crate::file;
use crate::open_file::OpenInode;
use crate::state::{Handle, lock};

impl Client {
    /// `fallocate` on handle `fh` (open for writing): mode 0 and
    /// KEEP_SIZE reserve room for the range on the OSDs (ENOSPC when the
    /// cluster or an OSD lacks it; mode 0 also sets the length to at least
    /// `off + len`); PUNCH_HOLE | KEEP_SIZE and
    /// ZERO_RANGE make the range read as zeros, freeing whole allocation
    /// units on the OSDs (ZERO_RANGE without KEEP_SIZE also extends the
    /// length). COLLAPSE_RANGE and INSERT_RANGE: EOPNOTSUPP.
    pub async fn fallocate(&self, c: &Creds, fh: u64, off: u64, len: u64, m: i32) -> Result<()> {
        use crate::holes::{self, mode};
        let h = self.handle(fh)?;
        if !h.write {
            return Err(FsError::new(Errno::BadF, "handle not open for writing"));
        }
        let end = holes::check(off, len, m)?;
        if m & (mode::PUNCH_HOLE | mode::ZERO_RANGE) != 0 {
            holes::zero(&self.inner, &h.inode, off, len).await?;
        } else {
            let s = self.statfs(c).await?;
            let free = s.capacity.saturating_sub(s.used);
            if free < len {
                return Err(FsError::new(
                    Errno::NoSpc,
                    format!("fallocate of {len} bytes: the cluster has {free} bytes free"),
                ));
            }
            holes::reserve(&self.inner, &h.inode, off, len).await?;
        }
        if m & mode::KEEP_SIZE == 0 {
            holes::grow(&self.inner, &h.inode, end).await?;
        }
        Ok(())
    }

    /// `copy_file_range` from handle `fh_in` at `off_in` to handle `fh_out`
    /// (open for writing) at `off_out`: up to `len` bytes (at most
    /// [`crate::copy::MAX_CALL`] per call), copied on the OSDs where both
    /// files' objects share them. Answers the bytes copied (0 at the
    /// source's end).
    pub async fn copy_range(
        &self,
        fh_in: u64,
        off_in: u64,
        fh_out: u64,
        off_out: u64,
        len: u64,
    ) -> Result<u64> {
        let (i, o) = (self.handle(fh_in)?, self.handle(fh_out)?);
        if !o.write {
            return Err(FsError::new(Errno::BadF, "handle not open for writing"));
        }
        crate::copy::copy_range(&self.inner, &i.inode, off_in, &o.inode, off_out, len).await
    }

    /// SEEK_DATA (`data`) or SEEK_HOLE from `off` on handle `fh`.
    pub async fn seek_data(&self, fh: u64, off: u64, data: bool) -> Result<u64> {
        let h = self.handle(fh)?;
        crate::holes::seek(&self.inner, &h.inode, off, data).await
    }

    /// Registers a handle on an inode (sharing the open state of other
    /// handles). `since`: the commit number `e` was asked at
    /// ([`crate::commits`]; `None` for a file this client just made): a
    /// length this client committed after it is taken.
    pub(crate) async fn install(
        &self,
        c: &Creds,
        mut e: Entry,
        mut grants: Vec<Grant>,
        write: bool,
        since: Option<u64>,
    ) -> (Entry, u64) {
        // A closed file being written out may leave `inodes` while this
        // waits for its lock, its length committed after `e` was asked
        // for: then the entry is settled again and the one there now taken.
        loop {
            let f = self.open_inode(c, &mut e, &mut grants, write, since);
            if let Some(fh) = self
                .install_on(f, c, &mut e, &mut grants, write, since)
                .await
            {
                // The length this client wrote, if the entry predates it.
                return (self.sized(e), fh);
            }
            tracing::debug!(
                ino = e.attr.ino,
                "an open inode left while waited for: taking the current one"
            );
        }
    }

    /// The open inode `e` names: the one in `inodes`, or a new one there
    /// — `e` (and its `grants`) settled first against the commits after
    /// `since`, under the inodes' lock: a write-out commits before it
    /// forgets its file there, so a file not among them had its commit
    /// recorded.
    fn open_inode(
        &self,
        c: &Creds,
        e: &mut Entry,
        grants: &mut Vec<Grant>,
        write: bool,
        since: Option<u64>,
    ) -> Arc<OpenInode> {
        let ino = e.attr.ino;
        let mut m = lock(&self.inner.inodes);
        if let Some(since) = since {
            self.inner.meta.commits.settle_entry(e, grants, since);
        }
        m.entry(ino)
            .or_insert_with(|| {
                Arc::new(OpenInode::new(
                    ino,
                    e.layout.clone(),
                    grants.to_vec(),
                    write,
                    c.clone(),
                    e.attr.size,
                ))
            })
            .clone()
    }

    /// [`Handles::install`] on `f`, the inode's current open state.
    /// `e` is settled again once the state is held: a truncate here
    /// records itself while it holds the state, and must not be undone by
    /// a longer length asked for before it.
    async fn install_on(
        &self,
        f: Arc<OpenInode>,
        c: &Creds,
        e: &mut Entry,
        grants: &mut Vec<Grant>,
        write: bool,
        since: Option<u64>,
    ) -> Option<u64> {
        {
            let mut st = f.st.lock().await;
            // Written out and forgotten while this waited: not to be used.
            if !lock(&self.inner.inodes)
                .get(&f.ino)
                .is_some_and(|g| Arc::ptr_eq(g, &f))
            {
                return None;
            }
            if let Some(since) = since {
                self.inner.meta.commits.settle_entry(e, grants, since);
            }
            if st.handles > 0 {
                // Another handle has it open: keep what this client wrote,
                // take newer capabilities and a longer length from the MDS.
                // Capabilities name the OSDs of the layout they came with:
                // the two are taken together, and never from a layout with
                // fewer object sets than the one in use.
                let wanted =
                    write && !st.write_caps || grants.iter().any(|g| g.rights & rights::WRITE != 0);
                let not_older = match (&e.layout, &st.layout) {
                    (Some(new), Some(cur)) => new.objsets.len() >= cur.objsets.len(),
                    (new, _) => new.is_some() || st.layout.is_none(),
                };
                if wanted && not_older {
                    st.grants = grants.to_vec();
                    if e.layout.is_some() {
                        st.layout = e.layout.clone();
                    }
                    st.write_caps |= write;
                    st.creds = c.clone();
                }
                if !st.busy() && e.attr.size > st.size {
                    st.size = e.attr.size;
                    f.size.store(st.size, Ordering::Relaxed);
                    st.new_generation();
                }
                if st.layout.is_none() {
                    st.layout = e.layout.clone();
                }
            }
            st.handles += 1;
        }
        let fh = self.inner.next_fh.fetch_add(1, Ordering::Relaxed);
        lock(&self.inner.handles).insert(fh, Handle { inode: f, write });
        Some(fh)
    }

    /// Opens a file; read-only opens are answered from the cache when a
    /// fresh entry with a read capability is there (what prefetch buys).
    pub async fn open(&self, c: &Creds, ino: u64, write: bool) -> Result<u64> {
        let cached = if write {
            None
        } else {
            // The cache follows this client's commits: settled from now.
            let since = self.inner.meta.commits.last();
            self.cached_for_reading(ino).map(|(e, g)| (e, g, since))
        };
        let (entry, grants, since) = match cached {
            Some(x) => x,
            None => self.entry_to_open(c, ino, write).await?,
        };
        Ok(self.install(c, entry, grants, write, Some(since)).await.1)
    }

    /// A fresh cached entry of `ino` with a read capability, if there is one.
    fn cached_for_reading(&self, ino: u64) -> Option<(Entry, Vec<Grant>)> {
        let margin = self.inner.cfg.cap_margin.as_millis() as u64;
        let mut cache = self.inner.meta.cache();
        let usable = cache.peek(ino).is_some_and(|x| {
            self.inner.meta.fresh(x)
                && x.layout_known
                && (x.entry.attr.kind != FileKind::File
                    || x.grants.iter().any(|g| {
                        g.covers(data_oid(ino), rights::READ)
                            && g.expiry_ms > proto::clock::now_ms() + margin
                    }))
        });
        let (x, first) = if usable { cache.get(ino)? } else { return None };
        self.inner.meta.hit(first);
        Some((x.entry, x.grants))
    }

    /// `ino`'s entry and capabilities asked of the namespace for an open.
    /// With the commit number it was asked at.
    async fn entry_to_open(
        &self,
        c: &Creds,
        ino: u64,
        write: bool,
    ) -> Result<(Entry, Vec<Grant>, u64)> {
        // Open here, or for reading where the namespace lets an unlinked
        // file be opened (a name resolved just before an unlink or rename
        // took it). Never for writing: the kernel must look the name up
        // again (a write to the unlinked file would be lost).
        let held_here = self.inner.is_open(ino) || (!write && self.inner.ns.may_open_unlinked(ino));
        let r = self
            .inner
            .open_grants_since(ino, c, write)
            .await
            .and_then(|(e, g, since)| {
                // Without a name, a file is reachable only through what was
                // open before (the MDS checks its sessions); with the
                // namespace on the OSDs, while its objects are kept.
                if e.attr.nlink == 0 && e.attr.kind != FileKind::Dir && !held_here {
                    return Err(FsError::new(
                        Errno::Stale,
                        format!("inode {ino:#x} was unlinked"),
                    ));
                }
                Ok((e, g, since))
            });
        match r {
            Ok(x) => Ok(x),
            // An inode that is gone, reached through a cached name of a
            // file removed elsewhere: ESTALE makes the kernel look the
            // name up again, and that look must reach the namespace.
            Err(e) if e.is(Errno::Stale) || e.is(Errno::NoEnt) => {
                self.inner.meta.cache().remove(ino);
                Err(FsError::new(Errno::Stale, e.message))
            }
            Err(e) => Err(e),
        }
    }

    pub(crate) fn handle(&self, fh: u64) -> Result<Handle> {
        lock(&self.inner.handles)
            .get(&fh)
            .cloned()
            .ok_or_else(|| FsError::new(Errno::BadF, format!("no open file handle {fh}")))
    }

    /// Reads up to `len` bytes at `off`.
    pub async fn read(&self, fh: u64, off: u64, len: u32) -> Result<Bytes> {
        let h = self.handle(fh)?;
        crate::reads::read(&self.inner, &h.inode, off, len).await
    }

    /// [`Client::read`], also saying whether the file grew under the read
    /// (another client rewrote it since this one had its length): a
    /// kernel that caches the length must drop it. (A shrink shows in the
    /// answer, short of what was asked.)
    pub async fn read_checked(&self, fh: u64, off: u64, len: u32) -> Result<(Bytes, bool)> {
        let h = self.handle(fh)?;
        crate::reads::read_checked(&self.inner, &h.inode, off, len).await
    }

    /// The length of the file open as `fh` as this client knows it now
    /// (None: no such handle).
    pub fn known_size(&self, fh: u64) -> Option<u64> {
        let h = self.handle(fh).ok()?;
        Some(h.inode.size.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// Writes `data` at `off` (buffered; durable after fsync or close).
    pub async fn write(&self, fh: u64, off: u64, data: &[u8]) -> Result<u32> {
        let h = self.handle(fh)?;
        if !h.write {
            return Err(FsError::new(Errno::BadF, "handle not open for writing"));
        }
        file::write(&self.inner, &h.inode, off, data).await
    }

    /// An `O_APPEND` write of `data` on handle `fh`: at the end of the
    /// file as this client knows it — its length from the namespace at
    /// open (close-to-open: another mount's appends closed before are
    /// there) and its own writes since — whatever offset the kernel,
    /// whose cached length may be older, asked for. Answers the bytes
    /// written and where they went.
    pub async fn write_append(&self, fh: u64, data: &[u8]) -> Result<(u32, u64)> {
        let h = self.handle(fh)?;
        if !h.write {
            return Err(FsError::new(Errno::BadF, "handle not open for writing"));
        }
        file::refresh_append_end(&self.inner, &h.inode).await?;
        file::write_at(&self.inner, &h.inode, None, data).await
    }

    /// Writes buffered data out and commits the length (fsync).
    pub async fn flush(&self, fh: u64) -> Result<()> {
        let h = self.handle(fh)?;
        let mut st = h.inode.st.lock().await;
        file::commit(&self.inner, h.inode.ino, &mut st).await
    }

    /// A close of handle `fh` (FUSE's FLUSH): writes buffered data out and
    /// commits the length — unless the file was made under a directory
    /// lease this client still holds, when nobody else can name it until
    /// the lease goes back: its data is then left to the write-back timer
    /// and to the lease's return, which writes it out first, so the next
    /// open anywhere still sees it (`docs/CLIENT.md`, "Closes under a
    /// lease"). A failure found since is reported either way.
    pub async fn close(&self, fh: u64) -> Result<()> {
        let h = self.handle(fh)?;
        let mut st = h.inode.st.lock().await;
        self.close_or_defer(h.inode.ino, &mut st).await
    }

    /// What the close of `ino`'s descriptor does with its state `st`: the
    /// last descriptor's close of a file with something to write out or
    /// commit leaves it for later when the lease allows
    /// ([`crate::leases::DirLeases::defer_close`]) and fewer than
    /// [`crate::closed::DEFERRED_MAX`] files are open or so kept (reporting
    /// only a failure found since); any other writes out and commits.
    async fn close_or_defer(&self, ino: u64, st: &mut crate::open_file::FileState) -> Result<()> {
        let may_defer = st.handles <= 1
            && (st.modified || st.busy())
            && lock(&self.inner.inodes).len() < crate::closed::DEFERRED_MAX;
        if may_defer && self.inner.leases.defer_close(ino) {
            return st.take_error();
        }
        file::commit(&self.inner, ino, st).await
    }

    /// fsync: when it returns, every byte written through this client to
    /// the file is on the OSDs' devices, and its length and every
    /// namespace change this client saw answered are in the MDS log.
    pub async fn fsync(&self, fh: u64) -> Result<()> {
        self.flush(fh).await?;
        self.sync_namespace().await
    }

    /// Returns once every namespace change this client saw answered is
    /// durable at the MDS (fsync of a directory; at once when nothing was
    /// answered early).
    pub async fn sync_namespace(&self) -> Result<()> {
        self.inner.leases.drain().await?;
        if let Some(e) = self.inner.leases.take_refused() {
            return Err(FsError::new(
                Errno::Io,
                format!("a change answered under a directory lease was refused: {e}"),
            ));
        }
        self.inner
            .mds
            .sync()
            .await
            .map_err(|e| FsError::new(e.code(), format!("sync with the MDS: {e}")))
    }

    /// Closes a handle (writes out and commits if it was the last).
    pub async fn release(&self, fh: u64) -> Result<()> {
        let h = self.handle(fh)?;
        let r = {
            let mut st = h.inode.st.lock().await;
            // A deferred close keeps it open in this client, without
            // handles, until the timer or the lease's return writes it out.
            let r = self.close_or_defer(h.inode.ino, &mut st).await;
            st.handles = st.handles.saturating_sub(1);
            if st.handles == 0 && !st.busy() && !st.modified {
                self.inner.forget_open(&h.inode);
            }
            r
        };
        // After the changes are out: the next holder sees them.
        let unlocked = self.release_locks(fh, h.inode.ino).await;
        lock(&self.inner.handles).remove(&fh);
        if !self.inner.is_open(h.inode.ino) {
            self.inner.ns.released(h.inode.ino).await?;
        }
        r.and(unlocked)
    }
}
