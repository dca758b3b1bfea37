//! Names and attributes through a [`Client`]: lookup, getattr and
//! setattr, answered from the cache while fresh, always with the length
//! this client knows of a file it writes (which the namespace may not
//! have yet). An answer asked for while this client wrote a file out and
//! forgot it is asked for again ([`crate::state::Departures`]): it may
//! hold the length from before the commit.

use proto::mds::{Attr, Creds, Entry, FileKind, SetAttr};

use crate::client::Client;
use crate::error::{Errno, FsError, Result};
use crate::file;
use crate::state::lock;

/// How many times a lookup or stat asks again while files this client
/// wrote out leave its open inodes ([`crate::state::Departures`]) before
/// taking the answer it has.
const STEADY_TRIES: u32 = 4;

impl Client {
    /// `e` with the length this client knows of its file, if longer.
    pub(crate) fn sized(&self, mut e: Entry) -> Entry {
        e.attr = self.with_local_size(e.attr);
        e
    }

    pub(crate) fn with_local_size(&self, mut a: Attr) -> Attr {
        if let Some(s) = self.inner.local_size(a.ino) {
            a.size = a.size.max(s);
        }
        a
    }

    /// Finds `name` in directory `parent`.
    pub async fn lookup(&self, c: &Creds, parent: u64, name: &str) -> Result<Entry> {
        let mut tries = 0;
        loop {
            let marks = self.inner.departures.marks();
            let e = self.lookup_once(c, parent, name).await?;
            tries += 1;
            if tries == STEADY_TRIES || !marks.moved(&self.inner.departures, e.attr.ino) {
                return Ok(e);
            }
        }
    }

    /// [`Client::lookup`], once: its length may predate a commit of a
    /// file this client wrote out and forgot meanwhile.
    async fn lookup_once(&self, c: &Creds, parent: u64, name: &str) -> Result<Entry> {
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
        // A directory is never taken from a lookup that skips the lease's
        // queue (`lookup_listed`): it would be asked twice, so it waits
        // for the queue like any request.
        if let Some(Some((ino, kind))) = leased
            && kind != FileKind::Dir
            && let Some(f) = self
                .inner
                .leases
                .lookup_listed(c, parent, name, ino, |f| meta.absorb(f))
                .await
        {
            return Ok(self.sized(f.entry));
        }
        let f = match self.inner.ns.lookup(c, parent, name).await {
            Ok(f) => f,
            Err(e) => {
                tracing::trace!(parent, name, error = %e, "lookup: the namespace says");
                if e.errno == Errno::NoEnt.raw() && self.inner.absent.missed(parent) {
                    self.list_names(c, parent).await;
                }
                return Err(e);
            }
        };
        self.inner.meta.absorb(&f);
        Ok(self.sized(f.entry))
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
        let mut tries = 0;
        loop {
            let seen = self.inner.departures.mark(ino);
            let a = self.getattr_once(c, ino).await?;
            tries += 1;
            if tries == STEADY_TRIES || self.inner.departures.mark(ino) == seen {
                return Ok(a);
            }
        }
    }

    /// [`Client::getattr`], once: its length may predate a commit of a
    /// file this client wrote out and forgot meanwhile.
    async fn getattr_once(&self, c: &Creds, ino: u64) -> Result<Attr> {
        if let Some(a) = self.inner.meta.fresh_attr(ino) {
            return Ok(self.with_local_size(a));
        }
        self.inner.meta.miss();
        if self.inner.meta.only_changed(ino) {
            // A directory this client just changed: its new times and link
            // count, without the neighbours a cold stat prefetches.
            let a = self.inner.ns.getattr(c, ino).await?;
            self.inner.meta.cache_attr(a.clone());
            return Ok(self.with_local_size(a));
        }
        let a = match self.inner.ns.stat(c, ino).await? {
            // An orphan (open, unlinked) has no name to be cached under.
            Some(f) if f.entry.attr.nlink > 0 || f.entry.attr.kind == FileKind::Dir => {
                self.inner.meta.absorb(&f);
                f.entry.attr
            }
            Some(f) => f.entry.attr,
            None => {
                let a = self.inner.ns.getattr(c, ino).await?;
                self.inner.meta.cache_attr(a.clone());
                a
            }
        };
        Ok(self.with_local_size(a))
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
        let open = lock(&self.inner.inodes).get(&ino).cloned();
        let mut guard = match &open {
            Some(f) => Some(f.st.lock().await),
            None => None,
        };
        let a = match self.inner.leases.setattr(c, ino, &set) {
            // A file made under a lease this client holds: answered here.
            Some(r) => r?,
            None => {
                // Buffered data goes out before a truncate. New times do
                // not wait for it: the length commit that follows keeps them.
                if let Some(st) = guard.as_mut()
                    && set.size.is_some()
                {
                    file::commit(&self.inner, ino, st).await?;
                }
                let r = self.inner.ns.setattr(c, ino, &set).await;
                // Changed (or maybe changed) by the MDS: no longer the lease's.
                self.inner.leases.unmade(ino);
                r?
            }
        };
        if let Some(st) = guard.as_mut()
            && set.mtime.is_some()
            && set.size.is_none()
        {
            st.times_set = true;
        }
        if let (Some(f), Some(st), Some(size)) = (&open, guard.as_mut(), set.size) {
            file::truncated(f, st, size);
        }
        // The MDS (or the lease) knows the committed length; this client
        // may hold more — read while the file's state is held, so a
        // write-out cannot commit it and forget the file in between.
        let a = self.with_local_size(a);
        drop(guard);
        if set.size.is_some() {
            self.inner.meta.cache_truncated(a.clone());
        } else {
            self.inner.meta.cache_attr(a.clone());
        }
        Ok(a)
    }
}
