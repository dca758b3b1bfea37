//! POSIX byte-range locks on one file (`fcntl` `F_SETLK`/`F_GETLK`), the
//! rules a lock server applies: a lock conflicts with another owner's
//! overlapping lock when either is a write lock; an owner's own locks never
//! conflict with each other — a new lock replaces whatever the owner held
//! over its range (splitting what it cuts) and merges with the owner's
//! touching locks of the same kind; an unlock removes the owner's locks
//! from its range only. Ranges are inclusive, `u64::MAX` is "to the end
//! of the file".
//!
//! `flock` is served by the same table as a whole-file lock of the open
//! file's own owner, as the Linux NFS client emulates it (nfs(5),
//! "local_lock"): the two kinds then conflict with each other, which they
//! do not on a local file system.

use proto::locks::{LockKind, LockSpec};

/// What a lock request does to its owner's range: `Some(write)` to lock
/// it (exclusively if `write`), `None` to unlock it.
pub fn kind_of(kind: LockKind) -> Option<bool> {
    match kind {
        LockKind::Read => Some(false),
        LockKind::Write => Some(true),
        LockKind::Unlock => None,
    }
}

/// One held lock: `owner`'s lock on bytes `start..=end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range<K> {
    /// Who holds it.
    pub owner: K,
    /// First byte.
    pub start: u64,
    /// Last byte (inclusive; `u64::MAX` to the end of the file).
    pub end: u64,
    /// A write (exclusive) lock; otherwise read (shared).
    pub write: bool,
    /// The holder's process id, as `F_GETLK` reports it.
    pub pid: u32,
}

impl<K> Range<K> {
    /// The lock as the wire says it, naming `owner`.
    pub fn spec(&self, owner: u64) -> LockSpec {
        LockSpec {
            owner,
            start: self.start,
            end: self.end,
            kind: if self.write {
                LockKind::Write
            } else {
                LockKind::Read
            },
            pid: self.pid,
        }
    }

    fn overlaps(&self, start: u64, end: u64) -> bool {
        self.start <= end && start <= self.end
    }

    /// Whether it overlaps `start..=end` or ends right before or starts
    /// right after it.
    fn touches(&self, start: u64, end: u64) -> bool {
        self.overlaps(start, end)
            || (end != u64::MAX && self.start == end + 1)
            || (start != 0 && self.end == start - 1)
    }
}

/// The locks held on one file.
#[derive(Debug, Clone)]
pub struct FileLocks<K> {
    held: Vec<Range<K>>,
}

impl<K> Default for FileLocks<K> {
    fn default() -> Self {
        FileLocks { held: Vec::new() }
    }
}

impl<K: Copy + Eq> FileLocks<K> {
    /// The first lock of another owner that a lock of `owner` on
    /// `start..=end` (`write` or read) would conflict with.
    pub fn conflict(&self, owner: K, start: u64, end: u64, write: bool) -> Option<Range<K>> {
        self.held
            .iter()
            .find(|r| r.owner != owner && r.overlaps(start, end) && (write || r.write))
            .copied()
    }

    /// Sets `owner`'s lock on `start..=end` to `kind` (`Some(write)`), or
    /// removes it (`None`). Does not check conflicts (see
    /// [`FileLocks::conflict`]). Answers how many ranges the owner holds
    /// after it.
    pub fn set(&mut self, owner: K, start: u64, end: u64, kind: Option<bool>, pid: u32) -> usize {
        let (mut lo, mut hi) = (start, end);
        let mut out = Vec::with_capacity(self.held.len() + 2);
        for r in self.held.drain(..) {
            if r.owner != owner {
                out.push(r);
                continue;
            }
            if kind == Some(r.write) && r.touches(start, end) {
                lo = lo.min(r.start);
                hi = hi.max(r.end);
                continue;
            }
            if !r.overlaps(start, end) {
                out.push(r);
                continue;
            }
            if r.start < start {
                out.push(Range {
                    end: start - 1,
                    ..r
                });
            }
            if r.end > end {
                out.push(Range {
                    start: end + 1,
                    ..r
                });
            }
        }
        if let Some(write) = kind {
            out.push(Range {
                owner,
                start: lo,
                end: hi,
                write,
                pid,
            });
        }
        self.held = out;
        self.held.iter().filter(|r| r.owner == owner).count()
    }

    /// Removes every lock whose owner `gone` says is gone; answers how many.
    pub fn drop_owners(&mut self, gone: impl Fn(&K) -> bool) -> usize {
        let before = self.held.len();
        self.held.retain(|r| !gone(&r.owner));
        before - self.held.len()
    }

    /// Every lock held.
    pub fn held(&self) -> &[Range<K>] {
        &self.held
    }

    /// Whether no lock is held.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A byte-by-byte model over a small file: who holds each byte how.
    #[derive(Clone, Default)]
    struct Model {
        bytes: Vec<Vec<(u8, bool)>>,
    }

    const SIZE: u64 = 24;

    impl Model {
        fn new() -> Model {
            Model {
                bytes: vec![Vec::new(); SIZE as usize + 1],
            }
        }
        /// Byte index for a range end (`u64::MAX` is the last cell).
        fn cell(x: u64) -> usize {
            x.min(SIZE) as usize
        }
        fn conflict(&self, owner: u8, start: u64, end: u64, write: bool) -> bool {
            (Self::cell(start)..=Self::cell(end)).any(|i| {
                self.bytes[i]
                    .iter()
                    .any(|&(o, w)| o != owner && (w || write))
            })
        }
        fn set(&mut self, owner: u8, start: u64, end: u64, kind: Option<bool>) {
            for i in Self::cell(start)..=Self::cell(end) {
                self.bytes[i].retain(|&(o, _)| o != owner);
                if let Some(w) = kind {
                    self.bytes[i].push((owner, w));
                }
            }
        }
    }

    fn of(t: &FileLocks<u8>) -> Model {
        let mut m = Model::new();
        for r in t.held() {
            for i in Model::cell(r.start)..=Model::cell(r.end) {
                m.bytes[i].push((r.owner, r.write));
            }
        }
        for b in &mut m.bytes {
            b.sort_unstable();
        }
        m
    }

    /// A tiny deterministic generator (xorshift), so failures reproduce.
    fn next(s: &mut u64) -> u64 {
        *s ^= *s << 13;
        *s ^= *s >> 7;
        *s ^= *s << 17;
        *s
    }

    #[test]
    fn the_table_agrees_with_a_byte_model_and_stays_disjoint_and_merged() {
        let mut seed = 0x5eed_1234_u64;
        for _round in 0..400 {
            let mut t = FileLocks::<u8>::default();
            let mut m = Model::new();
            for _ in 0..40 {
                let owner = (next(&mut seed) % 3) as u8;
                let a = next(&mut seed) % SIZE;
                let b = match next(&mut seed) % 5 {
                    0 => u64::MAX,
                    _ => a + next(&mut seed) % (SIZE - a),
                };
                let kind = match next(&mut seed) % 3 {
                    0 => None,
                    1 => Some(false),
                    _ => Some(true),
                };
                let write = kind == Some(true);
                let blocked = kind.is_some() && m.conflict(owner, a, b, write);
                if kind.is_some() {
                    let found = t.conflict(owner, a, b, write).is_some();
                    assert_eq!(
                        found,
                        blocked,
                        "{owner} {a}..={b} {kind:?} in {:?}",
                        t.held()
                    );
                }
                if !blocked {
                    t.set(owner, a, b, kind, 7);
                    m.set(owner, a, b, kind);
                }
                let mut want = m.clone();
                for x in &mut want.bytes {
                    x.sort_unstable();
                }
                assert_eq!(of(&t).bytes, want.bytes);
                // One owner's ranges never overlap, and same-kind ranges of
                // one owner never touch (they would have been merged).
                for (i, x) in t.held().iter().enumerate() {
                    for y in &t.held()[i + 1..] {
                        if x.owner == y.owner {
                            assert!(!x.overlaps(y.start, y.end), "{x:?} {y:?}");
                            if x.write == y.write {
                                assert!(!x.touches(y.start, y.end), "{x:?} {y:?}");
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn readers_share_a_writer_excludes_and_unlock_splits() {
        let mut t = FileLocks::<u8>::default();
        t.set(1, 0, 99, Some(false), 1);
        assert!(t.conflict(2, 50, 60, false).is_none());
        assert_eq!(t.conflict(2, 50, 60, true).map(|r| r.owner), Some(1));
        assert!(
            t.conflict(1, 0, u64::MAX, true).is_none(),
            "own locks never conflict"
        );
        assert_eq!(t.set(1, 40, 49, None, 1), 2);
        assert!(t.conflict(2, 40, 49, true).is_none());
        assert_eq!(t.drop_owners(|&o| o == 1), 2);
        assert!(t.is_empty());
    }
}
