//! Files made under a directory lease this client holds: no other client
//! can name them until the lease goes back, so their closes may leave the
//! data buffered (`docs/CLIENT.md`, "Closes under a lease") and their
//! attribute changes — chmod, chown, utimens that take no right away —
//! are answered here and sent with the lease's other changes, as
//! [`DirOp::SetAttr`].

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use proto::mds::{Attr, Creds, DirOp, Found, SetAttr};

use super::{Dir, DirLeases, lock};
use crate::error::Result;

/// The directory (and its state) whose usable lease made `ino`.
fn made_in(dirs: &mut HashMap<u64, Dir>, ino: u64) -> Option<(u64, &mut Dir)> {
    dirs.iter_mut()
        .find(|(_, d)| {
            d.lease
                .as_ref()
                .is_some_and(|h| h.usable() && h.made.contains_key(&ino))
        })
        .map(|(&dir, d)| (dir, d))
}

/// Answers for made files kept at most (past it they are dropped: the
/// first write of such a file then asks with an OPEN).
const MADE_ANSWERS_MAX: usize = 4096;

/// An answer kept longer is not used (its capabilities may be near their
/// end, and the file's copies may have moved since).
const MADE_ANSWER_FRESH: std::time::Duration = std::time::Duration::from_secs(30);

impl DirLeases {
    /// Keeps what the MDS answered for the files a DIR OPS made, for
    /// their first writes ([`DirLeases::take_made`]).
    pub(super) fn keep_made(&self, made: Vec<Found>) {
        if made.is_empty() {
            return;
        }
        let mut m = lock(&self.made_answers);
        if m.len() + made.len() > MADE_ANSWERS_MAX {
            // Files never written (empty ones) leave theirs behind.
            m.retain(|_, (at, _)| at.elapsed() < MADE_ANSWER_FRESH);
        }
        if m.len() + made.len() > MADE_ANSWERS_MAX {
            m.clear();
        }
        let now = Instant::now();
        for f in made.into_iter().take(MADE_ANSWERS_MAX) {
            m.insert(f.entry.attr.ino, (now, f));
        }
    }

    /// Forgets the answer kept for `ino`: newer capabilities came another
    /// way, and a later [`DirLeases::take_made`] must not go back to it.
    pub fn forget_made(&self, ino: u64) {
        lock(&self.made_answers).remove(&ino);
    }

    /// The layout and write capabilities of `ino`, a file this client
    /// made under a lease, once the MDS has the create: what a first
    /// write needs, without an OPEN. Waits for the changes queued before
    /// it ([`DirLeases::drain`]); `None` when the MDS did not answer
    /// them (then the caller opens the file as usual).
    pub async fn take_made(&self, ino: u64) -> Option<Found> {
        if lock(&self.made_answers).is_empty() && self.pending.load(Ordering::SeqCst) == 0 {
            return None;
        }
        self.drain().await.ok()?;
        lock(&self.made_answers)
            .remove(&ino)
            .filter(|(at, _)| at.elapsed() < MADE_ANSWER_FRESH)
            .map(|(_, f)| f)
    }

    /// Whether `ino` was made under a lease this client still holds: no
    /// other client can name it, so its length here is the file's.
    pub fn made_under_lease(&self, ino: u64) -> bool {
        made_in(&mut lock(&self.dirs), ino).is_some()
    }

    /// Whether a close of `ino` may leave its data buffered, to be
    /// written by the write-back timer or before the lease goes back:
    /// true when `ino` was made under a lease this client still holds, so
    /// no other client can name it until the lease is back (every lookup,
    /// listing or change in the directory by another client waits for
    /// that, and this client writes the data out first). What the close
    /// would have reported then goes to the next `syncfs` or `fsync` of
    /// a directory ([`DirLeases::note_failure`]).
    pub fn defer_close(&self, ino: u64) -> bool {
        if !self.ticking.load(Ordering::SeqCst) || self.flusher.get().is_none() {
            return false;
        }
        let mut dirs = lock(&self.dirs);
        let Some((_, d)) = made_in(&mut dirs, ino) else {
            return false;
        };
        d.deferred.insert(ino);
        self.deferred_closes.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// A rename or link through the MDS: a file made under a lease may
    /// now have a name outside it, so no close defers any longer for the
    /// files made before it (new ones still do).
    pub fn renamed_or_linked(&self) {
        for h in lock(&self.dirs)
            .values_mut()
            .filter_map(|d| d.lease.as_mut())
        {
            h.made.clear();
        }
    }

    /// `ino` changed through the MDS (a SETATTR, a removal): what the
    /// lease recorded of it is no longer sure, so its attribute changes
    /// and closes go the usual way from now on.
    pub fn unmade(&self, ino: u64) {
        for h in lock(&self.dirs)
            .values_mut()
            .filter_map(|d| d.lease.as_mut())
        {
            h.made.remove(&ino);
        }
    }

    /// This client committed a file's length and times (`a`, the MDS's
    /// answer to the commit): a file made under a lease keeps them, so
    /// an attribute change answered there afterwards starts from them —
    /// not from the length it was made with.
    pub fn committed(&self, a: &Attr) {
        let mut dirs = lock(&self.dirs);
        let Some((_, d)) = made_in(&mut dirs, a.ino) else {
            return;
        };
        if let Some((_, attr)) = d.lease.as_mut().and_then(|h| h.made.get_mut(&a.ino)) {
            attr.size = a.size;
            attr.mtime = attr.mtime.max(a.mtime);
            attr.ctime = attr.ctime.max(a.ctime);
        }
    }

    /// Changes the attributes of `ino`, a file made under a lease this
    /// client holds, under that lease: the attributes after, or `None`
    /// when the MDS must answer (a length, a change that takes a right
    /// away, no such lease). The change is checked as the MDS would
    /// (`posix::apply_setattr`) and queued as [`DirOp::SetAttr`].
    pub fn setattr(self: &Arc<Self>, c: &Creds, ino: u64, set: &SetAttr) -> Option<Result<Attr>> {
        if set.size.is_some() || !self.ticking.load(Ordering::SeqCst) {
            return None;
        }
        let mut dirs = lock(&self.dirs);
        let (dir, d) = made_in(&mut dirs, ino)?;
        let h = d.lease.as_mut()?;
        let (name, attr) = h.made.get(&ino)?.clone();
        let mut after = attr;
        match posix::apply_setattr(&mut after, c, set, proto::clock::now_ns()) {
            Err(e) => return Some(Err(e.into())),
            // Takes a right away: durable first, and OSDs told (the MDS).
            Ok(true) => return None,
            Ok(false) => {}
        }
        h.made.insert(ino, (name.clone(), after.clone()));
        h.used = Instant::now();
        let set = SetAttr {
            via_handle: false,
            ..set.clone()
        };
        self.queue(d, dir, c, DirOp::SetAttr { name, ino, set });
        self.answered.fetch_add(1, Ordering::Relaxed);
        Some(Ok(after))
    }
}
