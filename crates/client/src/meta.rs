//! The metadata this client holds, shared by the client and whichever
//! namespace answers it: the segmented-LRU cache of entries and
//! capabilities (fed by the MDS's prefetching), how long an entry counts as
//! fresh, and the counters of hits and misses.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use proto::layout::{Layout, data_oid};
use proto::mds::{Attr, DirEntry, Entry, Found, Grant};

use crate::cache::{Cached, MetaCache, Segment};
use crate::commits::Commits;
use crate::stats::Counters;

/// The shared metadata cache and counters.
pub struct Meta {
    cache: Mutex<MetaCache>,
    /// Counters (cache hits and misses, bytes, OSD errors).
    pub counters: Counters,
    /// How long a cached entry answers without asking again.
    pub attr_timeout: Duration,
    /// Prefetched directory listings.
    pub listings: crate::listings::Listings,
    /// This client's recent commits, which answers asked before them are
    /// settled against.
    pub commits: Commits,
}

impl Meta {
    /// An empty cache with `demand` + `prefetch` entries.
    pub fn new(demand: usize, prefetch: usize, attr_timeout: Duration) -> Meta {
        Meta {
            cache: Mutex::new(MetaCache::new(demand, prefetch)),
            counters: Counters::default(),
            attr_timeout,
            listings: crate::listings::Listings::new(attr_timeout),
            commits: Commits::new(attr_timeout),
        }
    }

    /// The cache, locked.
    pub fn cache(&self) -> std::sync::MutexGuard<'_, MetaCache> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `c` is young enough to answer from.
    pub fn fresh(&self, c: &Cached) -> bool {
        c.fetched.elapsed() < self.attr_timeout
    }

    /// Counts an answer from the cache (and a first use of a prefetched entry).
    pub fn hit(&self, first_prefetch_use: bool) {
        Counters::add(&self.counters.cache_hits, 1);
        if first_prefetch_use {
            Counters::add(&self.counters.prefetch_hits, 1);
        }
    }

    /// Counts a question the cache could not answer.
    pub fn miss(&self) {
        Counters::add(&self.counters.cache_misses, 1);
    }

    /// The attributes of `ino` if a fresh entry holds them (counted as a hit).
    pub fn fresh_attr(&self, ino: u64) -> Option<Attr> {
        let mut cache = self.cache();
        let x = match cache.peek(ino) {
            Some(x) if self.fresh(x) => cache.get(ino),
            _ => None,
        };
        drop(cache);
        x.map(|(x, first)| {
            self.hit(first);
            x.entry.attr
        })
    }

    /// Caches a lookup-style answer to a question asked at `since`
    /// ([`Commits::ask`]): the entry on demand, its prefetched neighbours
    /// (each with the range capabilities that cover it) as prefetch — each
    /// settled first against this client's later commits, in `f` too.
    pub fn absorb(&self, f: &mut Found, since: u64) {
        // Settled and cached under the cache's lock, which a commit holds
        // to record itself and update its entry: one sees the other.
        let mut c = self.cache();
        self.commits
            .settle_entry(&mut f.entry, &mut f.grants, since);
        let now = Instant::now();
        c.insert(
            Cached {
                entry: f.entry.clone(),
                grants: f.grants.clone(),
                fetched: now,
                layout_known: true,
                changed: false,
            },
            Segment::Demand,
        );
        for e in &mut f.prefetch {
            let oid = data_oid(e.attr.ino);
            let mut grants: Vec<Grant> = f
                .prefetch_grants
                .iter()
                .filter(|g| g.covers(oid, 0))
                .cloned()
                .collect();
            self.commits.settle_entry(e, &mut grants, since);
            // A neighbour cached and fresh keeps its attributes: the MDS
            // read this answer's snapshot before the request was answered,
            // and a size this client committed since (a file it just
            // closed) must not go back to the snapshot's. Missing grants
            // are taken, with the layout they name the OSDs of.
            if let Some(x) = c.peek(e.attr.ino)
                && self.fresh(x)
            {
                // A listing's entry has no layout or grants: those of the
                // prefetch are taken, together.
                if !x.layout_known || (x.grants.is_empty() && !grants.is_empty()) {
                    let layout = e.layout.clone();
                    c.update(e.attr.ino, |x| {
                        x.grants = grants;
                        x.entry.layout = layout;
                        x.layout_known = true;
                    });
                }
                continue;
            }
            c.insert(
                Cached {
                    entry: e.clone(),
                    grants,
                    fetched: now,
                    layout_known: true,
                    changed: false,
                },
                Segment::Prefetch,
            );
        }
    }

    /// Caches the entries of directory `dir` listed at `at` (with their
    /// attributes) as prefetch, for the lookups and stats that follow a
    /// listing; an entry already cached and fresh is left as it is (it may
    /// hold grants and a layout a listing lacks).
    /// The entries' attributes are settled first (in `entries` too)
    /// against this client's commits after `since`, when the listing was
    /// asked for.
    pub fn listed(&self, dir: u64, at: Instant, entries: &mut [DirEntry], since: u64) {
        let mut c = self.cache();
        for a in entries.iter_mut().filter_map(|e| e.attr.as_mut()) {
            self.commits.settle_attr(a, since);
        }
        for e in entries.iter() {
            let Some(attr) = &e.attr else {
                continue;
            };
            if c.peek(e.ino)
                .is_some_and(|x| x.fetched >= at || self.fresh(x))
            {
                continue;
            }
            c.insert(
                Cached {
                    entry: Entry {
                        parent: dir,
                        name: e.name.clone(),
                        attr: attr.clone(),
                        layout: None,
                    },
                    grants: Vec::new(),
                    fetched: at,
                    layout_known: false,
                    changed: false,
                },
                Segment::Prefetch,
            );
        }
    }

    /// Updates a cached entry's attributes from an answer to a question
    /// asked at `since`, settled first (in `a` too) against this client's
    /// later commits.
    pub fn cache_attr(&self, a: &mut Attr, since: u64) {
        let mut cache = self.cache();
        self.commits.settle_attr(a, since);
        cache.update(a.ino, |c| {
            c.entry.attr = a.clone();
            c.fetched = Instant::now();
            c.changed = false;
        });
    }

    /// This client committed the file's length (a close, fsync or
    /// write-back), its data written under `layout` with `grants`: the
    /// cached entry takes all three, and answers asked before are settled
    /// against them ([`Commits`]).
    pub fn cache_committed(&self, a: Attr, layout: Option<Layout>, grants: Vec<Grant>) {
        let mut cache = self.cache();
        self.commits
            .committed(a.ino, a.size, layout.clone(), grants.clone());
        cache.update(a.ino, |c| {
            let longer = match (&layout, &c.entry.layout) {
                (Some(new), Some(old)) => new.objsets.len() >= old.objsets.len(),
                (new, _) => new.is_some(),
            };
            if longer && c.layout_known {
                c.entry.layout = layout;
                c.grants = grants;
            }
            c.entry.attr = a;
            c.fetched = Instant::now();
            c.changed = false;
        });
    }

    /// This client set the file's length (a truncate): the cached entry
    /// takes the answer, and answers asked before take its length.
    pub fn cache_truncated(&self, a: Attr) {
        let mut cache = self.cache();
        self.commits.truncated(a.ino, a.size);
        cache.update(a.ino, |c| {
            c.entry.attr = a;
            c.fetched = Instant::now();
            c.changed = false;
        });
    }

    /// A namespace change in directory `dir` by this client: with the
    /// directory's attributes after it (`after`, from the answer) the
    /// cached entry takes them, unless it already holds later ones (answers
    /// to concurrent changes arrive in any order); without, it is marked
    /// out of date ([`Meta::changed`]).
    pub fn dir_changed(&self, dir: u64, after: Option<&Attr>) {
        let Some(a) = after.filter(|a| a.ino == dir) else {
            return self.changed(dir);
        };
        self.listings.forget(dir);
        let mut stale = false;
        self.cache().update(dir, |c| {
            if (a.ctime, a.mtime) >= (c.entry.attr.ctime, c.entry.attr.mtime) {
                c.entry.attr = a.clone();
                c.fetched = Instant::now();
                c.changed = false;
            } else {
                // Cached times ahead of the answer's (a lease's local
                // change stamps this client's clock): ask next time.
                stale = true;
            }
        });
        if stale {
            self.changed(dir);
        }
    }

    /// Whether `ino` is cached and out of date only through
    /// [`Meta::changed`].
    pub fn only_changed(&self, ino: u64) -> bool {
        self.cache().peek(ino).is_some_and(|c| c.changed)
    }

    /// Marks `ino`'s cached attributes as out of date (a namespace change
    /// in it moved its times, size or link count at the MDS): the next
    /// getattr asks again. Its name stays cached.
    pub fn changed(&self, ino: u64) {
        self.listings.forget(ino);
        let window = self.attr_timeout;
        let mut c = self.cache();
        match Instant::now().checked_sub(window) {
            Some(old) => c.update(ino, |e| {
                e.fetched = old;
                e.changed = true;
            }),
            None => c.remove(ino),
        }
    }

    /// The parent this client last saw for `ino`, if it has seen it.
    pub fn parent_of(&self, ino: u64) -> Option<u64> {
        self.cache().peek(ino).map(|c| c.entry.parent)
    }
}

/// A lookup-style answer that carries only an entry and its grants (what a
/// namespace without prefetch answers).
pub fn found(entry: Entry, grants: Vec<Grant>) -> Found {
    Found {
        entry,
        grants,
        prefetch: Vec::new(),
        prefetch_grants: Vec::new(),
        dir: None,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proto::mds::{Attr, Entry, FileKind};

    /// A plain file's entry in directory 1, for the client's unit tests.
    pub(crate) fn entry(ino: u64, size: u64) -> Entry {
        Entry {
            parent: 1,
            name: format!("f{ino}"),
            attr: Attr {
                ino,
                kind: FileKind::File,
                mode: 0o644,
                nlink: 1,
                uid: 0,
                gid: 0,
                size,
                atime: 0,
                mtime: 0,
                ctime: 0,
                rdev: 0,
            },
            layout: None,
        }
    }

    fn found(e: Entry, prefetch: Vec<Entry>) -> Found {
        Found {
            entry: e,
            grants: Vec::new(),
            prefetch,
            prefetch_grants: Vec::new(),
            dir: None,
        }
    }

    /// A neighbour prefetched from a snapshot read before this client
    /// committed a file's size does not take the size back (a file just
    /// written and closed read as empty or short).
    #[test]
    fn a_prefetched_neighbour_never_replaces_a_fresh_entry() {
        let m = Meta::new(64, 64, Duration::from_secs(1));
        m.absorb(&mut found(entry(7, 0), Vec::new()), 0);
        m.cache_attr(&mut entry(7, 4096).attr, 0);
        m.absorb(&mut found(entry(8, 0), vec![entry(7, 0)]), 0);
        assert_eq!(m.fresh_attr(7).map(|a| a.size), Some(4096));
        // The entry asked for is the answer itself: it is taken.
        m.absorb(&mut found(entry(7, 10), Vec::new()), 0);
        assert_eq!(m.fresh_attr(7).map(|a| a.size), Some(10));
        // A listed entry (no layout known) keeps its attributes and takes
        // the prefetch's layout and grants, so an open needs no MDS.
        let listing = proto::mds::DirEntry {
            name: "f9".into(),
            ino: 9,
            kind: FileKind::File,
            attr: Some(entry(9, 300).attr),
        };
        m.listed(1, Instant::now(), &mut [listing], 0);
        assert!(!m.cache().peek(9).unwrap().layout_known);
        let mut neighbour = entry(9, 0);
        neighbour.layout = Some(proto::layout::Layout {
            spec: Default::default(),
            map_epoch: 1,
            objsets: vec![9],
            homes: Vec::new(),
        });
        m.absorb(&mut found(entry(8, 0), vec![neighbour]), 0);
        let x = m.cache().peek(9).cloned().unwrap();
        assert!(x.layout_known && x.entry.layout.is_some());
        assert_eq!(x.entry.attr.size, 300);
        // A neighbour not cached, or cached and stale, is taken.
        let short = Meta::new(64, 64, Duration::ZERO);
        short.absorb(&mut found(entry(7, 5), Vec::new()), 0);
        short.absorb(&mut found(entry(8, 0), vec![entry(7, 6)]), 0);
        assert_eq!(short.cache().peek(7).map(|x| x.entry.attr.size), Some(6));
    }

    /// An answer asked for before this client committed a length (a
    /// setattr or stat that raced a write-out) arrives after the commit:
    /// cached and returned with the committed length and layout; one
    /// asked for after a truncate here takes the truncate's length.
    #[test]
    fn answers_asked_before_a_commit_here_never_take_its_length_back() {
        let m = Meta::new(64, 64, Duration::from_secs(5));
        let laid = |ino, size, sets: Vec<u64>| {
            let mut e = entry(ino, size);
            e.layout = Some(proto::layout::Layout {
                spec: Default::default(),
                map_epoch: 1,
                objsets: sets,
                homes: Vec::new(),
            });
            e
        };
        m.absorb(
            &mut found(laid(7, 0, vec![7]), Vec::new()),
            m.commits.last(),
        );
        let early = m.commits.ask();
        let long = laid(7, 4164, vec![7, 70]);
        m.cache_committed(long.attr.clone(), long.layout.clone(), Vec::new());
        let mut a = entry(7, 0).attr;
        m.cache_attr(&mut a, early.since());
        assert_eq!(a.size, 4164, "the answer itself is settled");
        assert_eq!(m.fresh_attr(7).map(|a| a.size), Some(4164));
        let mut f = found(laid(7, 10, vec![7]), vec![entry(9, 1)]);
        m.absorb(&mut f, early.since());
        assert_eq!(f.entry.attr.size, 4164);
        let x = m.cache().peek(7).cloned().unwrap();
        assert_eq!(x.entry.layout.unwrap().objsets, vec![7, 70]);
        // Asked after the commit: taken as it is (another client's truncate).
        let late = m.commits.ask();
        let mut a = entry(7, 50).attr;
        m.cache_attr(&mut a, late.since());
        assert_eq!(m.fresh_attr(7).map(|a| a.size), Some(50));
        // A truncate here: answers from before it take its length.
        m.cache_truncated(entry(7, 100).attr);
        let mut a = entry(7, 4164).attr;
        m.cache_attr(&mut a, late.since());
        assert_eq!(a.size, 100);
    }
}
