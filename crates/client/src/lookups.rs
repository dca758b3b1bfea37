//! Names and attributes through a [`Client`]: lookup, getattr and
//! setattr, answered from the cache while fresh, always with the length
//! this client knows of a file it writes (which the namespace may not
//! have yet). Every answer is settled against the lengths this client
//! committed after it was asked for ([`crate::commits`]): it may have
//! been made before the commit and arrive after it, when the file is no
//! longer open here.

use proto::mds::{Attr, Creds, Entry, FileKind, Found, SetAttr};

use std::sync::Arc;

use crate::client::Client;
use crate::error::{Errno, FsError, Result};
use crate::file;
use crate::open_file::{FileState, OpenInode};
use crate::state::{Held, lock};

impl Client {
    /// `e` with the length this client knows of its file, if longer.
    pub(crate) fn sized(&self, mut e: Entry) -> Entry {
        e.attr = self.with_local_size(e.attr);
        e
    }

    /// The number of this client's last length commit: an answer kept
    /// from now is settled with it later ([`Client::as_known`]).
    pub fn commit_number(&self) -> u64 {
        self.inner.meta.commits.last()
    }

    /// `a`, read when the commit number was `since`, as this client knows
    /// the file now: with the lengths it committed since, and what it
    /// holds unwritten.
    pub fn as_known(&self, mut a: Attr, since: u64) -> Attr {
        let local = self.inner.local_size(a.ino);
        self.inner.meta.commits.settle_attr(&mut a, since);
        Held::apply(local, &mut a);
        a
    }

    /// Caches `f`, an answer to a question asked at commit number `since`,
    /// and makes it what this client knows: the length it holds of the
    /// file read first, then the answer settled against the commits after
    /// `since` — a write-out records its commit before it forgets the
    /// file, so one of the two has the length.
    pub(crate) fn take_found(&self, f: &mut Found, since: u64) {
        let local = self.inner.local_size(f.entry.attr.ino);
        self.inner.meta.absorb(f, since);
        Held::apply(local, &mut f.entry.attr);
    }

    /// [`Client::take_found`] of an answer that is only attributes.
    fn take_attr(&self, a: &mut Attr, since: u64) {
        let local = self.inner.local_size(a.ino);
        self.inner.meta.cache_attr(a, since);
        Held::apply(local, a);
    }

    /// `a` with the length this client holds of an open file, if longer
    /// (and the time of a write not committed yet, if later).
    pub(crate) fn with_local_size(&self, mut a: Attr) -> Attr {
        Held::apply(self.inner.local_size(a.ino), &mut a);
        a
    }

    /// Finds `name` in directory `parent`.
    pub async fn lookup(&self, c: &Creds, parent: u64, name: &str) -> Result<Entry> {
        let meta = &self.inner.meta;
        // A held lease knows every name in its directory: a name it does
        // not list is absent, whatever the cache holds.
        let leased = self.inner.leases.lookup(parent, name);
        if leased == Some(None) {
            tracing::trace!(parent, name, "lookup: absent under the lease");
            meta.hit(false);
            return Err(FsError::new(
                Errno::NoEnt,
                format!("{name:?} not found in directory {parent:#x} (held under its lease)"),
            ));
        }
        let cached = {
            let mut cache = meta.cache();
            match cache.ino_of(parent, name) {
                // Under a lease, only the inode the lease lists.
                Some(ino) if leased.is_none_or(|l| l.map(|x| x.0) == Some(ino)) => {
                    match cache.peek(ino) {
                        Some(x) if meta.fresh(x) => cache.get(ino),
                        _ => None,
                    }
                }
                _ => None,
            }
        };
        if let Some((x, first)) = cached {
            meta.hit(first);
            return Ok(self.sized(x.entry));
        }
        // A name the lease lists is there, whatever an older listing said.
        if leased.is_none() && self.inner.absent.absent(parent, name) {
            tracing::trace!(parent, name, "lookup: absent from the recent list");
            meta.hit(false);
            return Err(FsError::new(
                Errno::NoEnt,
                format!("{name:?} not found in directory {parent:#x} (its recent list)"),
            ));
        }
        meta.miss();
        let asked = meta.commits.ask();
        // A directory is never taken from a lookup that skips the lease's
        // queue (`lookup_listed`): it would be asked twice, so it waits
        // for the queue like any request.
        if let Some(Some((ino, kind))) = leased
            && kind != FileKind::Dir
            && let Some(f) = self
                .inner
                .leases
                .lookup_listed(c, parent, name, ino, |f| self.take_found(f, asked.since()))
                .await
        {
            return Ok(f.entry);
        }
        let mut f = match self.inner.ns.lookup(c, parent, name).await {
            Ok(f) => f,
            Err(e) => {
                tracing::trace!(parent, name, error = %e, "lookup: the namespace says");
                if e.is(Errno::NoEnt) && self.inner.absent.missed(parent) {
                    self.list_names(c, parent).await;
                }
                return Err(e);
            }
        };
        self.take_found(&mut f, asked.since());
        Ok(f.entry)
    }

    /// Fetches `dir`'s names for [`crate::absent`] (small directories the
    /// caller may list; anything else is simply not kept).
    async fn list_names(&self, c: &Creds, dir: u64) {
        let small = self
            .inner
            .meta
            .fresh_attr(dir)
            .is_none_or(|a| a.size <= crate::absent::MAX_NAMES as u64);
        if !small {
            return;
        }
        let at = std::time::Instant::now();
        if let Ok(list) = self.inner.ns.readdir_names(c, dir).await {
            self.inner
                .absent
                .listed(dir, at, list.into_iter().map(|e| e.name));
        }
    }

    /// Attributes of `ino`.
    pub async fn getattr(&self, c: &Creds, ino: u64) -> Result<Attr> {
        let meta = &self.inner.meta;
        // The length held here first, then the cache: a write-out updates
        // the cache before it forgets the file.
        let local = self.inner.local_size(ino);
        if let Some(mut a) = meta.fresh_attr(ino) {
            Held::apply(local, &mut a);
            return Ok(a);
        }
        meta.miss();
        let asked = meta.commits.ask();
        if meta.only_changed(ino) {
            // A directory this client just changed: its new times and link
            // count, without the neighbours a cold stat prefetches.
            let mut a = self.inner.ns.getattr(c, ino).await?;
            self.take_attr(&mut a, asked.since());
            return Ok(a);
        }
        let a = match self.inner.ns.stat(c, ino).await? {
            // An orphan (open, unlinked) has no name to be cached under.
            Some(mut f) if f.entry.attr.nlink > 0 || f.entry.attr.kind == FileKind::Dir => {
                self.take_found(&mut f, asked.since());
                f.entry.attr
            }
            Some(f) => self.as_known(f.entry.attr, asked.since()),
            None => {
                let mut a = self.inner.ns.getattr(c, ino).await?;
                self.take_attr(&mut a, asked.since());
                a
            }
        };
        Ok(a)
    }

    /// chmod, chown, utimens, truncate. A truncate first writes out this
    /// client's buffered data for the file.
    pub async fn setattr(&self, c: &Creds, ino: u64, set: SetAttr) -> Result<Attr> {
        self.setattr_via(c, ino, set, None).await
    }

    /// [`Client::setattr`] through handle `fh` (`ftruncate`, `futimens`):
    /// a truncate through a handle open for writing is not checked against
    /// the permission bits again (POSIX checks them at open).
    pub async fn setattr_via(
        &self,
        c: &Creds,
        ino: u64,
        mut set: SetAttr,
        fh: Option<u64>,
    ) -> Result<Attr> {
        // New permissions or owner of a directory: its lease's checks
        // would be out of date.
        self.inner.leases.forget(ino);
        set.via_handle = fh
            .and_then(|fh| lock(&self.inner.handles).get(&fh).cloned())
            .is_some_and(|h| h.write && h.inode.ino == ino);
        // The file's open state here, held — the one among the open
        // inodes once locked: a write-out may forget it while this waits
        // (then the one there now, if any).
        loop {
            let open = lock(&self.inner.inodes).get(&ino).cloned();
            let mut guard = match &open {
                Some(f) => Some(f.st.lock().await),
                None => None,
            };
            if let Some(f) = &open
                && !lock(&self.inner.inodes)
                    .get(&ino)
                    .is_some_and(|x| Arc::ptr_eq(x, f))
            {
                continue;
            }
            let st = guard.as_deref_mut();
            return self.setattr_held(c, ino, &set, open.as_ref(), st).await;
        }
    }

    /// [`Client::setattr_via`] with the file's open state `st` held (if it
    /// is open here).
    async fn setattr_held(
        &self,
        c: &Creds,
        ino: u64,
        set: &SetAttr,
        open: Option<&Arc<OpenInode>>,
        mut st: Option<&mut FileState>,
    ) -> Result<Attr> {
        // The lease's answer is this client's own: settled from now.
        let mut asked = None;
        let a = match self.inner.leases.setattr(c, ino, set) {
            // A file made under a lease this client holds: answered here.
            Some(r) => r?,
            None => {
                // Buffered data goes out before a truncate. New times do
                // not wait for it: the length commit that follows keeps them.
                if let Some(st) = st.as_deref_mut()
                    && set.size.is_some()
                {
                    file::commit(&self.inner, ino, st).await?;
                }
                asked = Some(self.inner.meta.commits.ask());
                let r = self.inner.ns.setattr(c, ino, set).await;
                // Changed (or maybe changed) by the MDS: no longer the lease's.
                self.inner.leases.unmade(ino);
                r?
            }
        };
        if let Some(st) = st.as_deref_mut()
            && set.mtime.is_some()
            && set.size.is_none()
        {
            st.times_set = true;
            // The times set win over the writes before them.
            if let Some(f) = open {
                f.written_ns.store(0, std::sync::atomic::Ordering::Relaxed);
            }
        }
        if let (Some(f), Some(st), Some(size)) = (open, st, set.size) {
            file::truncated(f, st, size);
        }
        if let (None, Some(size)) = (open, set.size) {
            // Recorded first: an open made from here on settles to it, and
            // one made before is truncated now (unless it wrote since).
            self.inner.meta.cache_truncated(a.clone());
            self.truncated_meanwhile(ino, size).await;
            return Ok(self.with_local_size(a));
        }
        // The MDS (or the lease) knows the committed length; this client
        // may hold more — read while the file's state is held, so a
        // write-out cannot commit it and forget the file in between.
        let mut a = self.with_local_size(a);
        if set.size.is_some() {
            self.inner.meta.cache_truncated(a.clone());
        } else {
            let since = asked.as_ref().map_or(self.commit_number(), |q| q.since());
            self.inner.meta.cache_attr(&mut a, since);
        }
        Ok(a)
    }

    /// A truncate of `ino` to `size` by this client while the file was not
    /// open here: an open that began meanwhile made its state from the
    /// length before, which the truncate now sets.
    async fn truncated_meanwhile(&self, ino: u64, size: u64) {
        let Some(f) = lock(&self.inner.inodes).get(&ino).cloned() else {
            return;
        };
        let mut st = f.st.lock().await;
        if !st.busy() && !st.modified {
            file::truncated(&f, &mut st, size);
        }
    }
}
