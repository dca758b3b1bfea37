//! Read answers shorter than asked, in an order the kernel can take. The
//! kernel reads ahead with several requests at once (`FUSE_ASYNC_READ`)
//! and takes the first short answer it processes as the file's new end,
//! ignoring the short answers of requests sent before that one changed
//! it. When another client shrank a file this mount still has the old
//! length of, every request past the new end is answered short: if the
//! one farthest out were processed first, its offset would become the
//! end, and the bytes between the true end and it would read as zeros (a
//! file cut from 3 MiB to 1 MiB elsewhere read here as 1 MiB and 256 KiB
//! of zeros). So an answer ending past the length the client knows waits,
//! briefly, for the answer ending at that length to be given first (one
//! that reached it: an older end, from before the file last changed
//! length, does not count).

use std::collections::HashMap;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use fuser::{INodeNo, ReplyData};

use crate::locks;

/// How long an answer past the known end waits for one at it: a request
/// at the end sent with it is being served by another thread by then; a
/// read past the end alone (a `pread` there) pays this once.
const WAIT_FOR_END: Duration = Duration::from_millis(100);
// (Each read past the end alone waits again: a program reading there
// after a shrink elsewhere is rare, and the wait is bounded.)

/// Ends remembered at most; older than [`KEPT`] are dropped first.
const ENDS_MAX: usize = 4096;

/// How long an end given is remembered.
const KEPT: Duration = Duration::from_secs(2);

/// Ends kept per inode (the latest).
const ENDS_PER_FILE: usize = 8;

/// For each inode (as the kernel numbers it), the ends the latest short
/// answers gave and when.
#[derive(Default)]
pub struct Ends {
    given: Mutex<HashMap<u64, Vec<(u64, Instant)>>>,
    changed: Condvar,
}

impl Ends {
    /// A short answer ending at `end` was given to the kernel.
    fn given(&self, ino: u64, end: u64) {
        let mut m = self.given.lock().unwrap_or_else(|e| e.into_inner());
        if m.len() >= ENDS_MAX {
            m.retain(|_, v| v.iter().any(|(_, t)| t.elapsed() < KEPT));
            if m.len() >= ENDS_MAX {
                m.clear();
            }
        }
        let v = m.entry(ino).or_default();
        v.retain(|(e, t)| *e != end && t.elapsed() < KEPT);
        if v.len() >= ENDS_PER_FILE {
            v.remove(0);
        }
        v.push((end, Instant::now()));
        drop(m);
        self.changed.notify_all();
    }

    /// Waits (at most `wait`) until a short answer ending exactly at `at`
    /// (the length the client knows now: the answer of the request that
    /// reached it) was given lately; says whether one was. An answer that
    /// ended elsewhere, before the file last changed length, does not
    /// count.
    fn wait_for(&self, ino: u64, at: u64, wait: Duration) -> bool {
        let deadline = Instant::now() + wait;
        let mut m = self.given.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if m.get(&ino)
                .is_some_and(|v| v.iter().any(|&(end, t)| end == at && t.elapsed() < KEPT))
            {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            m = self
                .changed
                .wait_timeout(m, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

/// What answering a read needs of the mount: its client, the notifier
/// and the ends given.
pub type Mount<'a> = (&'a client::Client, &'a locks::Notifier, &'a Ends);

/// Answers the kernel's read of `len` bytes at `off` through handle `fh`
/// with the client's answer `r` (bytes, and whether the file grew).
pub fn answer(
    r: Result<(impl AsRef<[u8]>, bool), fuser::Errno>,
    (client, notifier, ends): Mount<'_>,
    (ino, fh): (INodeNo, u64),
    (off, len): (u64, u32),
    reply: ReplyData,
) {
    let (data, grew) = match r {
        Ok(r) => r,
        Err(e) => return reply.error(e),
    };
    if grew {
        // Before the answer: the reader's next read past the kernel's old
        // length asks for the new one.
        locks::drop_kernel_attrs(notifier, ino);
    }
    let data = data.as_ref();
    if data.len() as u64 >= u64::from(len) {
        return reply.data(data);
    }
    let end = off + data.len() as u64;
    if let Some(known) = client.known_size(fh)
        && end > known
        && !ends.wait_for(ino.0, known, WAIT_FOR_END)
    {
        tracing::debug!(
            ino = ino.0,
            end,
            known,
            "a read past the end was answered before one at it"
        );
    }
    reply.data(data);
    ends.given(ino.0, end);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_ends_when_an_end_at_or_before_it_is_given() {
        let ends = std::sync::Arc::new(Ends::default());
        // Nothing given: the wait runs out.
        assert!(!ends.wait_for(7, 100, Duration::from_millis(20)));
        // An end past the one waited for does not count, nor one before
        // it (an older length).
        ends.given(7, 300);
        ends.given(7, 40);
        assert!(!ends.wait_for(7, 100, Duration::from_millis(20)));
        let e = ends.clone();
        let waiter = std::thread::spawn(move || e.wait_for(7, 100, Duration::from_secs(5)));
        std::thread::sleep(Duration::from_millis(20));
        ends.given(7, 100);
        assert!(waiter.join().unwrap());
        // A later answer past it does not hide it from later waiters.
        ends.given(7, 500);
        assert!(ends.wait_for(7, 100, Duration::ZERO));
        // Each file keeps its latest few.
        for e in 0..20 {
            ends.given(9, e);
        }
        assert!(ends.given.lock().unwrap()[&9].len() <= ENDS_PER_FILE);
        // Another inode's end is its own.
        assert!(!ends.wait_for(8, 100, Duration::from_millis(10)));
    }
}
