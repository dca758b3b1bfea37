//! Extended attributes, and what this client knows of files it made.
//!
//! A file, directory or link this client has just made has no extended
//! attributes (the MDS inherits none: there are no default ACLs), and the
//! kernel asks for `security.capability` before the first write into every
//! file — one MDS round trip per file written, on every `cp`, `tar x` or
//! compiler output. For the cache window after it made an inode
//! (`attr_timeout`, the bound every cached entry has), this client answers
//! "no such attribute" and an empty list itself; any change of the
//! inode's attributes it makes ends that. Another client's `setxattr` on
//! the new inode shows within the window, as its attributes would. Only
//! inodes that cannot have existed before count (an exclusive create, a
//! mkdir, mknod or symlink; a create under a directory lease), and only for
//! their owner or root, with a name the namespace would accept.
//! Bounded: [`MAX_BARE`] inodes (the oldest go first).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use proto::mds::{Creds, Errno, XattrMode};

use crate::client::Client;
use crate::error::{FsError, Result};

/// Inodes remembered at once.
pub const MAX_BARE: usize = 65_536;

#[derive(Default)]
struct State {
    made: HashMap<u64, Instant>,
    order: VecDeque<(u64, Instant)>,
}

/// Inodes this client made, known to have no extended attributes.
pub struct Bare {
    window: Duration,
    state: Mutex<State>,
}

impl Bare {
    /// Knowledge holds for `window` after the inode was made.
    pub fn new(window: Duration) -> Bare {
        Bare {
            window,
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// This client made `ino` just now.
    pub fn made(&self, ino: u64) {
        let now = Instant::now();
        let mut st = self.state();
        st.made.insert(ino, now);
        st.order.push_back((ino, now));
        while st.made.len() > MAX_BARE || st.order.len() > 2 * MAX_BARE {
            let Some((old, at)) = st.order.pop_front() else {
                break;
            };
            if st.made.get(&old) == Some(&at) {
                st.made.remove(&old);
            }
        }
    }

    /// Whether `ino` is known to have no extended attributes.
    pub fn bare(&self, ino: u64) -> bool {
        self.state()
            .made
            .get(&ino)
            .is_some_and(|at| at.elapsed() < self.window)
    }

    /// `ino`'s attributes are changing: nothing is known any more.
    pub fn forget(&self, ino: u64) {
        self.state().made.remove(&ino);
    }
}

impl Client {
    /// Whether this client may answer for `ino`'s attributes itself: it
    /// made it within the window, and the caller owns it (or is root), so
    /// the namespace's permission check would pass.
    fn answers_bare(&self, c: &Creds, ino: u64) -> bool {
        self.inner.bare.bare(ino)
            && self
                .inner
                .meta
                .cache()
                .peek(ino)
                .is_some_and(|x| c.uid == 0 || x.entry.attr.uid == c.uid)
    }

    /// Reads an extended attribute.
    pub async fn getxattr(&self, c: &Creds, ino: u64, name: &str) -> Result<Vec<u8>> {
        // A name the namespace would refuse is left for it to refuse.
        let valid = !name.is_empty()
            && name.len() <= 255
            && ["user.", "trusted.", "security.", "system."]
                .iter()
                .any(|p| name.starts_with(p) && name.len() > p.len());
        if valid && self.answers_bare(c, ino) {
            self.inner.meta.hit(false);
            return Err(FsError::new(
                Errno::NoData,
                format!("inode {ino:#x} has no extended attribute {name:?} (made here)"),
            ));
        }
        self.inner.ns.getxattr(c, ino, name).await
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
        self.inner.bare.forget(ino);
        self.inner.no_caps.forget(ino);
        self.inner.ns.setxattr(c, ino, name, value, mode).await
    }

    /// Names of the extended attributes.
    pub async fn listxattr(&self, c: &Creds, ino: u64) -> Result<Vec<String>> {
        if self.answers_bare(c, ino) {
            self.inner.meta.hit(false);
            return Ok(Vec::new());
        }
        self.inner.ns.listxattr(c, ino).await
    }

    /// Removes an extended attribute.
    pub async fn removexattr(&self, c: &Creds, ino: u64, name: &str) -> Result<()> {
        self.inner.bare.forget(ino);
        self.inner.ns.removexattr(c, ino, name).await
    }
}
