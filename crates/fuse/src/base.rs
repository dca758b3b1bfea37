//! What every FUSE handler shares: [`TesseraFs`] (the client, its tokio
//! runtime, inode numbering, open directory listings, the callers' groups,
//! the kernel notifier, whether privileges are stripped here) and the
//! helpers the handlers in `fs.rs` call.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use client::Client;
use fuser::{Errno, FileHandle, Generation, INodeNo, ReplyEntry, Request};
use proto::mds::{Attr, Creds, DirEntry};
use tokio::runtime::Handle as Rt;

use crate::attr::{Inodes, file_attr};
use crate::locks;
use crate::request::{Groups, errno};

/// A directory listing taken at opendir, served by offset.
pub(crate) struct Listing {
    pub(crate) ino: u64,
    pub(crate) parent: u64,
    pub(crate) entries: Vec<DirEntry>,
    /// The client's commit number when it was read: its attributes are
    /// settled against later commits when given to the kernel.
    pub(crate) since: u64,
}

/// Tessera behind FUSE.
pub struct TesseraFs {
    pub(crate) inos: Inodes,
    pub(crate) client: Client,
    pub(crate) rt: Rt,
    pub(crate) ttl: Duration,
    pub(crate) dirs: Mutex<HashMap<u64, Arc<Listing>>>,
    pub(crate) next_dir: AtomicU64,
    pub(crate) groups: Groups,
    /// Tells the kernel to drop its caches of an inode (set once mounted).
    pub(crate) notifier: locks::Notifier,
    /// The kernel left set-id bits and file capabilities to this mount
    /// (`FUSE_HANDLE_KILLPRIV_V2` granted at init): writes, truncates,
    /// fallocate, copies into a file and chown strip them here.
    pub(crate) strips: bool,
    /// The ends lately given in short read answers ([`crate::short_reads`]).
    pub(crate) ends: crate::short_reads::Ends,
    /// The names handed to the kernel lately ([`crate::kernel_names`]).
    pub(crate) names: std::sync::Arc<crate::kernel_names::KernelNames>,
}

impl TesseraFs {
    /// A file system over `client`, running its calls on `rt`; the kernel
    /// caches entries and attributes for `ttl` (the client's window).
    pub fn new(client: Client, rt: Rt, ttl: Duration) -> TesseraFs {
        TesseraFs {
            inos: Inodes {
                root: client.root(),
            },
            client,
            rt,
            ttl,
            dirs: Mutex::new(HashMap::new()),
            next_dir: AtomicU64::new(1),
            groups: Groups::default(),
            notifier: locks::Notifier::default(),
            strips: false,
            ends: Default::default(),
            names: std::sync::Arc::new(crate::kernel_names::KernelNames::new(ttl)),
        }
    }

    /// Strips what a change of `ino` by `req`'s caller takes away (when
    /// the kernel left it to this mount): set-id bits when `set_id`, and
    /// file capabilities.
    pub(crate) fn strip(&self, req: &Request, ino: INodeNo, set_id: bool) -> Result<(), Errno> {
        if !self.strips {
            return Ok(());
        }
        let c = self.creds(req);
        self.run(
            self.client
                .strip_privileges(&c, self.inos.from_fuse(ino), set_id),
        )
    }

    /// Whether `req`'s caller may change `ino`'s owner or group at all
    /// (root, or its owner): only then does a chown strip anything first.
    pub(crate) fn may_chown(&self, req: &Request, ino: INodeNo) -> bool {
        let c = self.creds(req);
        req.uid() == 0
            || self
                .run(self.client.getattr(&c, self.inos.from_fuse(ino)))
                .is_ok_and(|a| a.uid == req.uid())
    }

    /// Where the mount puts the session's notifier once mounted.
    pub fn notifier(&self) -> locks::Notifier {
        self.notifier.clone()
    }

    /// The caller's credentials (see [`Groups::creds`]).
    pub(crate) fn creds(&self, req: &Request) -> Creds {
        self.groups.creds(req)
    }

    pub(crate) fn run<T>(&self, f: impl Future<Output = client::Result<T>>) -> Result<T, Errno> {
        self.rt.block_on(f).map_err(errno)
    }

    /// Answers with the entry `name` in `parent` (noted as handed to the
    /// kernel) or the error.
    pub(crate) fn entry(
        &self,
        reply: ReplyEntry,
        (parent, name): (fuser::INodeNo, &std::ffi::OsStr),
        r: Result<Attr, Errno>,
    ) {
        match r {
            Ok(a) => {
                let a = file_attr(&self.inos, &a);
                self.names.handed(parent, name, &a);
                reply.entry(&self.ttl, &a, Generation(0))
            }
            Err(e) => reply.error(e),
        }
    }

    pub(crate) fn listing(&self, fh: FileHandle) -> Option<Arc<Listing>> {
        self.dirs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&fh.0)
            .cloned()
    }
}
