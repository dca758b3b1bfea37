//! The state one client shares with its background tasks ([`Inner`]):
//! settings, connections, the metadata cache, the namespace, and the
//! inodes and handles open in it. A leaf the client and the file I/O both
//! build on.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use net::MdsClient;
use proto::mds::{Creds, Entry, Grant};

use crate::config::ClientConfig;
use crate::error::{Errno, Result};
use crate::meta::Meta;
use crate::namespace::Namespace;
use crate::open_file::OpenInode;
use crate::osds::OsdSet;

/// An open file handle.
#[derive(Clone)]
pub(crate) struct Handle {
    pub(crate) inode: Arc<OpenInode>,
    pub(crate) write: bool,
}

/// Shared state of a client (what background tasks hold).
pub struct Inner {
    /// Settings.
    pub cfg: ClientConfig,
    /// MDS connection: maps and status in every mode, the namespace in
    /// MDS mode (counts mandatory and non-mandatory requests).
    pub mds: Arc<MdsClient>,
    /// Maps and OSD connections.
    pub osds: Arc<OsdSet>,
    /// The metadata cache and counters (shared with the namespace).
    pub meta: Arc<Meta>,
    /// Names known absent (fresh directory lists).
    pub absent: crate::absent::Absent,
    /// Inodes this client made, known to have no extended attributes.
    pub bare: crate::xattrs::Bare,
    /// Inodes lately found without file capabilities.
    pub no_caps: crate::privs::NoCaps,
    /// Symbolic links' targets read before.
    pub targets: crate::targets::Targets,
    /// Where the namespace lives.
    pub ns: Arc<dyn Namespace>,
    /// Directory leases (MDS namespace with early answers only).
    pub leases: Arc<crate::leases::DirLeases>,
    /// The byte-range locks this client holds.
    pub locks: crate::locks::HeldLocks,
    /// Bytes buffered or being written in the whole client.
    pub dirty_total: AtomicU64,
    pub(crate) inodes: Mutex<HashMap<u64, Arc<OpenInode>>>,
    /// Files that read a hole and were found present lately.
    pub(crate) present: crate::gone::Present,
    /// Files whose length a read at their end asked for lately.
    pub(crate) eof_checked: crate::gone::Present,
    /// Files a read found their objects stopping short in lately.
    pub(crate) short_checked: crate::gone::Present,
    pub(crate) handles: Mutex<HashMap<u64, Handle>>,
    pub(crate) next_fh: AtomicU64,
    /// The principal this client authenticated as.
    pub principal: proto::mds::PrincipalInfo,
    /// Its root directory (ROOT_INO unless confined to a subtree).
    pub root: u64,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Inner {
    /// Asks the namespace for a file's entry and capabilities (OPEN: a
    /// non-mandatory request, also used to renew capabilities).
    pub async fn open_grants(
        &self,
        ino: u64,
        creds: &Creds,
        write: bool,
    ) -> Result<(Entry, Vec<Grant>)> {
        let (e, g, _) = self.open_grants_since(ino, creds, write).await?;
        Ok((e, g))
    }

    /// [`Inner::open_grants`], and the commit number it was asked at
    /// ([`crate::commits`]): the answer is settled against the commits
    /// before it arrived, and must be against any after it until used.
    pub(crate) async fn open_grants_since(
        &self,
        ino: u64,
        creds: &Creds,
        write: bool,
    ) -> Result<(Entry, Vec<Grant>, u64)> {
        self.meta.miss();
        self.leases.forget_made(ino);
        let asked = self.meta.commits.ask();
        let mut f = if write {
            self.as_writer(ino, || self.ns.open(creds, ino, true))
                .await?
        } else {
            self.ns.open(creds, ino, false).await?
        };
        self.meta.absorb(&mut f, asked.since());
        Ok((f.entry, f.grants, asked.since()))
    }

    /// Runs `call`, a request the MDS lets through because this session
    /// holds `ino` open for writing (an open or renewal for writing, a
    /// length commit, a longer layout: POSIX checks the mode at open
    /// only). Refused with EACCES
    /// while this client does hold it for writing — an MDS that restarted
    /// and has not heard this client's holds yet judges by the mode, and a
    /// file made 0444 then refuses its own writer — it tells the MDS what
    /// it holds and runs `call` once more.
    pub(crate) async fn as_writer<T, F, Fut>(&self, ino: u64, call: F) -> Result<T>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        match call().await {
            Err(e) if e.is(Errno::Access) && self.held_for_writing(ino) => {
                self.ns.holding(self.held()).await?;
                call().await
            }
            r => r,
        }
    }

    /// Whether this client holds `ino` open for writing (a handle that
    /// writes, or a close whose data is still to be written).
    fn held_for_writing(&self, ino: u64) -> bool {
        self.held().iter().any(|&(i, w)| i == ino && w)
    }

    /// What this client holds of an open inode that the namespace may
    /// not have yet: its length and the time of its last write.
    pub(crate) fn local_size(&self, ino: u64) -> Option<Held> {
        lock(&self.inodes).get(&ino).map(|f| Held {
            size: f.size.load(Ordering::Relaxed),
            written_ns: f.written_ns.load(Ordering::Relaxed),
        })
    }

    /// The files open in this client: (inode, some handle writes), at
    /// most [`proto::mds::HELD_MAX`].
    pub(crate) fn held(&self) -> Vec<(u64, bool)> {
        let mut m: HashMap<u64, bool> = HashMap::new();
        for h in lock(&self.handles).values() {
            *m.entry(h.inode.ino).or_default() |= h.write;
        }
        // Closed with data still to write (a close under a lease): held
        // for writing until written, so the MDS lets its write-back on.
        for &ino in lock(&self.inodes).keys() {
            m.entry(ino).or_insert(true);
        }
        let mut v: Vec<(u64, bool)> = m.into_iter().collect();
        v.sort_unstable();
        v.truncate(proto::mds::HELD_MAX);
        v
    }

    /// Forgets open inode `f` if it is still the one in `inodes`.
    pub(crate) fn forget_open(&self, f: &Arc<OpenInode>) {
        let mut inodes = lock(&self.inodes);
        if inodes.get(&f.ino).is_some_and(|g| Arc::ptr_eq(g, f)) {
            inodes.remove(&f.ino);
        }
    }

    /// Whether this client has `ino` open.
    pub(crate) fn is_open(&self, ino: u64) -> bool {
        lock(&self.inodes).contains_key(&ino)
    }
}

/// What this client holds of an open file beyond the namespace's answer
/// ([`Inner::local_size`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Held {
    /// The length, with writes not committed yet.
    pub size: u64,
    /// When it last wrote data not committed yet (0: none since the times
    /// were last set).
    pub written_ns: i64,
}

impl Held {
    /// `a` as this client knows it: the longer length, and the later
    /// modification and change times.
    pub(crate) fn apply(held: Option<Held>, a: &mut proto::mds::Attr) {
        let Some(h) = held else { return };
        a.size = a.size.max(h.size);
        if h.written_ns > 0 {
            a.mtime = a.mtime.max(h.written_ns);
            a.ctime = a.ctime.max(h.written_ns);
        }
    }
}
