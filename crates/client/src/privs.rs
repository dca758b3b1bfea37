//! What a write takes away. Linux strips a file's set-user-id bit (and its
//! set-group-id bit, when group-executable) when someone without
//! `CAP_FSETID` writes or truncates it, and its file capabilities
//! (`security.capability`) on any write, truncate or change of owner. A
//! FUSE kernel left to do it asks for `security.capability` before every
//! write: a second round trip per `write(2)`. The mount instead tells the
//! kernel it strips them itself (`FUSE_HANDLE_KILLPRIV_V2`), and does so
//! here: set-id bits with a chmod that only drops them (the MDS allows
//! that to anyone who may write the file), capabilities by removing the
//! attribute. That a file has no capability attribute is remembered for
//! the cache window (`attr_timeout`, the bound every cached entry has), so
//! a run of writes costs one MDS request per window, not one per write.
//! Bounded: [`MAX_KNOWN`] inodes.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use proto::mds::{Creds, Errno, FileKind, SetAttr};

use crate::client::Client;
use crate::error::Result;

/// Inodes remembered without a capability attribute at once.
pub const MAX_KNOWN: usize = 65_536;

/// The name of file capabilities' attribute.
pub const CAPABILITY_XATTR: &str = "security.capability";

/// Inodes lately found without a capability attribute.
pub struct NoCaps {
    window: Duration,
    known: Mutex<HashMap<u64, Instant>>,
}

impl NoCaps {
    /// Knowledge holds for `window`.
    pub fn new(window: Duration) -> NoCaps {
        NoCaps {
            window,
            known: Mutex::default(),
        }
    }

    fn known(&self, ino: u64) -> bool {
        self.known
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&ino)
            .is_some_and(|at| at.elapsed() < self.window)
    }

    fn learn(&self, ino: u64) {
        let mut m = self.known.lock().unwrap_or_else(|e| e.into_inner());
        if m.len() >= MAX_KNOWN {
            let window = self.window;
            m.retain(|_, at| at.elapsed() < window);
            if m.len() >= MAX_KNOWN {
                m.clear();
            }
        }
        m.insert(ino, Instant::now());
    }

    /// `ino`'s attributes are changing: nothing is known any more.
    pub fn forget(&self, ino: u64) {
        self.known
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&ino);
    }
}

impl Client {
    /// Strips what a write, truncate or change of owner of `ino` by `c`
    /// takes away: the set-id bits when `set_id` (a caller without
    /// `CAP_FSETID`, as the kernel says), and any capability attribute.
    /// A failure fails the change that asked (a file is never left
    /// written with its privileges).
    pub async fn strip_privileges(&self, c: &Creds, ino: u64, set_id: bool) -> Result<()> {
        if set_id {
            self.strip_set_id(c, ino).await?;
        }
        if self.inner.no_caps.known(ino) || self.inner.bare.bare(ino) {
            return Ok(());
        }
        // Ask first (a read: no log record), remove only what is there.
        let has = match self.getxattr(c, ino, CAPABILITY_XATTR).await {
            Ok(_) => true,
            Err(e) if e.is(Errno::NoData) => false,
            // May write but not read: try the removal, which asks for
            // the right to write only.
            Err(e) if e.is(Errno::Access) => true,
            Err(e) => return Err(e),
        };
        if has {
            match self.removexattr(c, ino, CAPABILITY_XATTR).await {
                Ok(()) => {}
                Err(e) if e.is(Errno::NoData) => {}
                // A writer through a descriptor opened before its right
                // to write was taken away may still write (POSIX checks at
                // open) but may not change attributes: its write goes on,
                // and the next one asks again.
                Err(e) if e.is(Errno::Access) || e.is(Errno::Perm) => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        self.inner.no_caps.learn(ino);
        Ok(())
    }

    /// Drops `ino`'s set-user-id bit, and its set-group-id bit when it is
    /// group-executable. The cached mode says whether there is anything
    /// to drop (as the kernel's did); the change is computed from the
    /// namespace's mode now, so it never writes back a stale mode.
    async fn strip_set_id(&self, c: &Creds, ino: u64) -> Result<()> {
        let kill = |mode: u32| 0o4000 | if mode & 0o010 != 0 { 0o2000 } else { 0 };
        let cached = self.getattr(c, ino).await?;
        if cached.kind != FileKind::File || cached.mode & kill(cached.mode) == 0 {
            return Ok(());
        }
        let now = self.inner.ns.getattr(c, ino).await?;
        let k = kill(now.mode);
        if now.mode & k == 0 {
            return Ok(());
        }
        let set = SetAttr {
            mode: Some(now.mode & 0o7777 & !k),
            ..SetAttr::default()
        };
        self.setattr(c, ino, set).await?;
        Ok(())
    }
}
