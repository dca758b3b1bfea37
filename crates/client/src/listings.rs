//! Prefetched directory listings: a READDIR answered by the MDS carries
//! whole listings of the directories below it (breadth first, as many as
//! its prefetch allows), so a program walking a tree (`find`, `du`, a
//! build scanning its sources) reads most directories without asking.
//! Hendricks et al. count a directory read as a non-mandatory access; this
//! is how the live client saves it.
//!
//! A listing answers while it is younger than the cache window
//! (`attr_timeout`, the bound every cached entry has) and is used once: a
//! second read of the same directory asks again. Any change this client
//! makes in a directory drops its listing; another client's change shows
//! within the window, as its attributes would. Bounded: [`MAX_DIRS`]
//! listings, [`MAX_ENTRIES`] entries in all (the oldest go first).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use proto::mds::{DirEntry, Listing};

/// Listings kept at once.
pub const MAX_DIRS: usize = 1024;
/// Entries kept at once, over all listings.
pub const MAX_ENTRIES: usize = 65_536;

#[derive(Default)]
struct State {
    /// Each listing with when it was fetched and the commit number it
    /// was asked at ([`crate::commits`]).
    by_dir: HashMap<u64, (Instant, u64, Vec<DirEntry>)>,
    /// Insertion order, for eviction (may name listings already gone).
    order: VecDeque<u64>,
    entries: usize,
}

/// The prefetched listings this client holds.
pub struct Listings {
    window: Duration,
    state: Mutex<State>,
}

impl Listings {
    /// Listings answer for `window` after they were fetched.
    pub fn new(window: Duration) -> Listings {
        Listings {
            window,
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps `listings`, fetched at `at`, asked for at commit number
    /// `since` (their attributes are settled against later commits when
    /// used).
    pub fn insert(&self, at: Instant, since: u64, listings: Vec<Listing>) {
        let mut st = self.state();
        for l in listings {
            if l.entries.len() > MAX_ENTRIES {
                continue;
            }
            st.entries += l.entries.len();
            if let Some((_, _, old)) = st.by_dir.insert(l.ino, (at, since, l.entries)) {
                st.entries -= old.len();
            }
            st.order.push_back(l.ino);
        }
        while st.by_dir.len() > MAX_DIRS || st.entries > MAX_ENTRIES {
            let Some(d) = st.order.pop_front() else {
                break;
            };
            if let Some((_, _, old)) = st.by_dir.remove(&d) {
                st.entries -= old.len();
            }
        }
        if st.order.len() > 4 * MAX_DIRS {
            let State { by_dir, order, .. } = &mut *st;
            order.retain(|d| by_dir.contains_key(d));
        }
    }

    /// `dir`'s listing, when it was fetched and the commit number it was
    /// asked at, if one is fresh (taken: each is used once).
    pub fn take(&self, dir: u64) -> Option<(Instant, u64, Vec<DirEntry>)> {
        let mut st = self.state();
        let (at, since, entries) = st.by_dir.remove(&dir)?;
        st.entries -= entries.len();
        (at.elapsed() < self.window).then_some((at, since, entries))
    }

    /// Forgets `dir`'s listing (this client changed the directory).
    pub fn forget(&self, dir: u64) {
        let mut st = self.state();
        if let Some((_, _, old)) = st.by_dir.remove(&dir) {
            st.entries -= old.len();
        }
    }

    /// Listings held.
    pub fn len(&self) -> usize {
        self.state().by_dir.len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::mds::FileKind;

    fn listing(ino: u64, n: usize) -> Listing {
        Listing {
            ino,
            entries: (0..n)
                .map(|i| DirEntry {
                    name: format!("f{i}"),
                    ino: 1000 + i as u64,
                    kind: FileKind::File,
                    attr: None,
                })
                .collect(),
        }
    }

    #[test]
    fn listings_are_used_once_forgotten_on_change_and_bounded() {
        let l = Listings::new(Duration::from_secs(60));
        let now = Instant::now();
        l.insert(now, 0, vec![listing(1, 3), listing(2, 2)]);
        assert_eq!(l.take(1).map(|(_, _, e)| e.len()), Some(3));
        assert!(l.take(1).is_none(), "used once");
        l.forget(2);
        assert!(l.take(2).is_none(), "forgotten");
        // The oldest go first past the entry bound.
        l.insert(
            now,
            0,
            vec![listing(3, MAX_ENTRIES / 2), listing(4, MAX_ENTRIES / 2)],
        );
        l.insert(now, 0, vec![listing(5, 10)]);
        assert!(l.take(3).is_none(), "evicted");
        assert!(l.take(4).is_some() && l.take(5).is_some());
        assert!(l.is_empty());
        // Past the window: not answered.
        let old = Listings::new(Duration::from_millis(1));
        old.insert(now, 0, vec![listing(6, 1)]);
        std::thread::sleep(Duration::from_millis(5));
        assert!(old.take(6).is_none());
    }
}
