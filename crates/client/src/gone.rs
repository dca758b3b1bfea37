//! Reads that found an object on no copy. That is a hole — or the file
//! was removed since this client had its layout: another client unlinked
//! or replaced it (with the namespace on the OSDs its objects go at
//! once), while a read-only open here was answered from the cache or a
//! descriptor was open. Read as zeros, the file came back with its old
//! length and no bytes (an editor's save read by another mount). So a
//! read that met an absent object asks the namespace whether the inode
//! is still there, at most once per cache window per file, and answers
//! ESTALE if not — as NFS does for a file removed under a client.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use proto::mds::Creds;

use crate::error::{Errno, FsError, Result};
use crate::meta::Meta;
use crate::namespace::Namespace;

/// Files asked about lately, kept at most.
const CHECKED_MAX: usize = 4096;

/// For each file the namespace was asked about lately: when, what the
/// read saw then (`seen`: where the objects' bytes stopped, or 0) and the
/// length the namespace gave, if it was asked for one. A question is not
/// asked again within the cache window about what was seen the same way
/// (`gone`: a hole; `eof`: a sparse tail, or a file shrunk elsewhere) —
/// the answer then is the one remembered, so concurrent reads of one
/// file (the kernel's read-ahead) agree on its length.
#[derive(Default)]
pub struct Present {
    checked: Mutex<HashMap<u64, Asked>>,
}

/// One question about a file: when, what the read saw, the length given
/// and the generation of the client's state of the file it was given for.
#[derive(Clone, Copy)]
struct Asked {
    at: Instant,
    seen: u64,
    size: Option<u64>,
    gen_: u64,
}

impl Present {
    /// Whether `ino` was asked about within `window`, having seen `seen`.
    pub(crate) fn lately(&self, ino: u64, seen: u64, window: Duration) -> bool {
        let m = self.checked.lock().unwrap_or_else(|e| e.into_inner());
        m.get(&ino)
            .is_some_and(|a| a.seen == seen && a.at.elapsed() < window)
    }

    /// If `ino` was asked about within `window` having seen `seen`, for
    /// the same generation `gen_` of the client's state of it (a length
    /// set since — a truncate, a revalidation under a lock, a shrink
    /// found — makes the answer old): the length it was given then.
    pub(crate) fn recent(&self, ino: u64, seen: u64, window: Duration, gen_: u64) -> Option<u64> {
        let m = self.checked.lock().unwrap_or_else(|e| e.into_inner());
        m.get(&ino)
            .filter(|a| a.seen == seen && a.gen_ == gen_ && a.at.elapsed() < window)
            .and_then(|a| a.size)
    }

    /// `ino` was asked about now, having seen `seen`, and was given
    /// `size` (if a length was asked for) for generation `gen_`.
    pub(crate) fn found(
        &self,
        ino: u64,
        seen: u64,
        window: Duration,
        (size, gen_): (Option<u64>, u64),
    ) {
        let mut m = self.checked.lock().unwrap_or_else(|e| e.into_inner());
        if m.len() >= CHECKED_MAX {
            m.retain(|_, a| a.at.elapsed() < window);
            if m.len() >= CHECKED_MAX {
                m.clear();
            }
        }
        let at = Instant::now();
        m.insert(
            ino,
            Asked {
                at,
                seen,
                size,
                gen_,
            },
        );
    }
}

/// After a read of `ino` met an object on no copy: `Ok` if the file is
/// still there (the object is a hole), ESTALE if it was removed — as
/// `ns` says, remembered in `present`. A namespace that cannot answer
/// leaves the read as it was (holes).
pub async fn check(
    (ns, meta, present): (&dyn Namespace, &Meta, &Present),
    creds: &Creds,
    ino: u64,
) -> Result<()> {
    let window = meta.attr_timeout.max(Duration::from_millis(100));
    if present.lately(ino, 0, window) {
        return Ok(());
    }
    match ns.getattr(creds, ino).await {
        Ok(_) => {
            present.found(ino, 0, window, (None, 0));
            Ok(())
        }
        Err(e) if removed(&e) => Err(stale(meta, ino, &e)),
        Err(e) => {
            tracing::debug!(ino, error = %e, "a read met a hole; the namespace did not say whether the file is there");
            Ok(())
        }
    }
}

/// Whether the namespace's answer `e` says the inode is gone.
pub fn removed(e: &FsError) -> bool {
    e.is(Errno::NoEnt) || e.is(Errno::Stale)
}

/// ESTALE for a read of `ino` that the namespace says was removed
/// (`e`), its cached entry dropped.
pub fn stale(meta: &Meta, ino: u64, e: &FsError) -> FsError {
    meta.cache().remove(ino);
    FsError::new(
        Errno::Stale,
        format!("inode {ino:#x} was removed while this client read it: {e}"),
    )
}
