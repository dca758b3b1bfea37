//! Names known absent: a lookup of a name that is not there costs an MDS
//! round trip, and a program creating files asks for each new name first
//! (the kernel's LOOKUP before CREATE). Once a directory has had two such
//! misses within the cache window, the client fetches its list of names;
//! while that list is younger than the window (`attr_timeout`, the same
//! bound every cached entry has), a name not in it is answered "absent"
//! without asking. The client's own changes keep the list current; another
//! client's new name shows within the window, as its attributes would.
//! Bounded: directories of at most [`MAX_NAMES`] entries, [`MAX_DIRS`]
//! directories.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Directories with more entries are always asked (their list would cost
/// more to fetch than it saves).
pub const MAX_NAMES: usize = 10_000;

/// Directories whose names are kept at once.
pub const MAX_DIRS: usize = 256;

/// What is known of one directory.
#[derive(Default)]
struct Dir {
    /// Its names, and when they were listed.
    names: Option<(Instant, HashSet<String>)>,
    /// Misses (names asked for and not there) since `since`.
    misses: u32,
    since: Option<Instant>,
}

/// The directories whose names this client knows.
pub struct Absent {
    window: Duration,
    dirs: Mutex<HashMap<u64, Dir>>,
}

impl Absent {
    /// Lists count for `window` after they were fetched.
    pub fn new(window: Duration) -> Absent {
        Absent {
            window,
            dirs: Mutex::new(HashMap::new()),
        }
    }

    fn dirs(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Dir>> {
        self.dirs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `name` is known absent from `dir` (a fresh list lacks it).
    pub fn absent(&self, dir: u64, name: &str) -> bool {
        self.dirs().get(&dir).is_some_and(|d| {
            d.names
                .as_ref()
                .is_some_and(|(at, n)| at.elapsed() < self.window && !n.contains(name))
        })
    }

    /// Counts a lookup in `dir` that found nothing; true when the directory
    /// is worth listing (the second miss within the window, no fresh list).
    pub fn missed(&self, dir: u64) -> bool {
        if self.window.is_zero() {
            return false;
        }
        let mut dirs = self.dirs();
        if dirs.len() >= MAX_DIRS && !dirs.contains_key(&dir) {
            let w = self.window;
            dirs.retain(|_, d| {
                d.since.is_some_and(|t| t.elapsed() < w)
                    || d.names.as_ref().is_some_and(|(t, _)| t.elapsed() < w)
            });
            if dirs.len() >= MAX_DIRS {
                return false;
            }
        }
        let d = dirs.entry(dir).or_default();
        if d.since.is_none_or(|t| t.elapsed() >= self.window) {
            d.since = Some(Instant::now());
            d.misses = 0;
        }
        d.misses += 1;
        let fresh = d
            .names
            .as_ref()
            .is_some_and(|(t, _)| t.elapsed() < self.window);
        d.misses >= 2 && !fresh
    }

    /// Records `dir`'s names as listed at `at` (too many: nothing kept).
    pub fn listed(&self, dir: u64, at: Instant, names: impl Iterator<Item = String>) {
        let names: HashSet<String> = names.take(MAX_NAMES + 1).collect();
        let mut dirs = self.dirs();
        let d = dirs.entry(dir).or_default();
        d.names = (names.len() <= MAX_NAMES).then_some((at, names));
    }

    /// This client added `name` to `dir`.
    pub fn added(&self, dir: u64, name: &str) {
        let mut dirs = self.dirs();
        if let Some(d) = dirs.get_mut(&dir)
            && let Some((_, n)) = d.names.as_mut()
        {
            if n.len() >= MAX_NAMES {
                d.names = None;
            } else {
                n.insert(name.to_string());
            }
        }
    }

    /// This client removed `name` from `dir`.
    pub fn removed(&self, dir: u64, name: &str) {
        if let Some((_, n)) = self.dirs().get_mut(&dir).and_then(|d| d.names.as_mut()) {
            n.remove(name);
        }
    }

    /// Drops what is known of `dir` (an outcome this client cannot tell).
    pub fn forget(&self, dir: u64) {
        self.dirs().remove(&dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_list_answers_and_follows_this_clients_changes() {
        let a = Absent::new(Duration::from_secs(60));
        assert!(!a.absent(1, "x"), "nothing known: ask");
        assert!(!a.missed(1), "one miss is not worth a listing");
        assert!(a.missed(1), "the second is");
        a.listed(1, Instant::now(), ["a".to_string()].into_iter());
        assert!(a.absent(1, "x") && !a.absent(1, "a"));
        assert!(!a.missed(1), "a fresh list needs no new one");
        a.added(1, "x");
        assert!(!a.absent(1, "x"), "created here: present");
        a.removed(1, "a");
        assert!(a.absent(1, "a"), "removed here: absent");
        a.forget(1);
        assert!(!a.absent(1, "zzz"), "forgotten: ask again");
    }

    #[test]
    fn an_old_list_or_a_huge_directory_answers_nothing() {
        let a = Absent::new(Duration::from_millis(1));
        a.listed(2, Instant::now(), std::iter::empty());
        std::thread::sleep(Duration::from_millis(5));
        assert!(!a.absent(2, "x"), "older than the window");
        let a = Absent::new(Duration::from_secs(60));
        a.listed(3, Instant::now(), (0..=MAX_NAMES).map(|i| i.to_string()));
        assert!(!a.absent(3, "x"), "more names than kept");
        let off = Absent::new(Duration::ZERO);
        assert!(!off.missed(4) && !off.missed(4), "no window: never listed");
    }
}
