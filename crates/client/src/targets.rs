//! Symbolic links' targets. A link's target never changes (there is no
//! call that rewrites one) and inode numbers are never reused, so a target
//! read once stays right for as long as it is kept: a build resolving the
//! same links over and over asks the MDS once per link. Bounded:
//! [`MAX_TARGETS`] links (the oldest go first).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use proto::mds::Creds;

use crate::client::Client;
use crate::error::Result;

/// Targets kept at once.
pub const MAX_TARGETS: usize = 4096;

/// The link targets this client has read.
#[derive(Default)]
pub struct Targets {
    state: Mutex<(HashMap<u64, String>, VecDeque<u64>)>,
}

impl Targets {
    /// `ino`'s target, if read before.
    pub fn get(&self, ino: u64) -> Option<String> {
        let st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.0.get(&ino).cloned()
    }

    /// Keeps `ino`'s target.
    pub fn put(&self, ino: u64, target: &str) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if st.0.insert(ino, target.to_string()).is_none() {
            st.1.push_back(ino);
        }
        while st.0.len() > MAX_TARGETS {
            let Some(old) = st.1.pop_front() else {
                break;
            };
            st.0.remove(&old);
        }
    }
}

impl Client {
    /// A symlink's target (read from the namespace once).
    pub async fn readlink(&self, c: &Creds, ino: u64) -> Result<String> {
        if let Some(t) = self.inner.targets.get(ino) {
            self.inner.meta.hit(false);
            return Ok(t);
        }
        let t = self.inner.ns.readlink(c, ino).await?;
        self.inner.targets.put(ino, &t);
        Ok(t)
    }
}
