//! The metadata this client holds, shared by the client and whichever
//! namespace answers it: the segmented-LRU cache of entries and
//! capabilities (fed by the MDS's prefetching), how long an entry counts as
//! fresh, and the counters of hits and misses.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use proto::layout::data_oid;
use proto::mds::{Attr, DirEntry, Entry, Found, Grant};

use crate::cache::{Cached, MetaCache, Segment};
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
}

impl Meta {
    /// An empty cache with `demand` + `prefetch` entries.
    pub fn new(demand: usize, prefetch: usize, attr_timeout: Duration) -> Meta {
        Meta {
            cache: Mutex::new(MetaCache::new(demand, prefetch)),
            counters: Counters::default(),
            attr_timeout,
            listings: crate::listings::Listings::new(attr_timeout),
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

    /// Caches a lookup-style answer: the entry on demand, its prefetched
    /// neighbours (each with the range capabilities that cover it) as prefetch.
    pub fn absorb(&self, f: &Found) {
        let now = Instant::now();
        let mut c = self.cache();
        let mut found = Cached {
            entry: f.entry.clone(),
            grants: f.grants.clone(),
            fetched: now,
            layout_known: true,
            changed: false,
            committed: None,
        };
        if let Some(old) = c.peek(f.entry.attr.ino) {
            self.keep_committed(old, &mut found);
        }
        c.insert(found, Segment::Demand);
        for e in &f.prefetch {
            let oid = data_oid(e.attr.ino);
            let grants: Vec<Grant> = f
                .prefetch_grants
                .iter()
                .filter(|g| g.covers(oid, 0))
                .cloned()
                .collect();
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
                    committed: None,
                },
                Segment::Prefetch,
            );
        }
    }

    /// Caches the entries of directory `dir` listed at `at` (with their
    /// attributes) as prefetch, for the lookups and stats that follow a
    /// listing; an entry already cached and fresh is left as it is (it may
    /// hold grants and a layout a listing lacks).
    pub fn listed(&self, dir: u64, at: Instant, entries: &[DirEntry]) {
        let mut c = self.cache();
        for e in entries {
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
                    committed: None,
                },
                Segment::Prefetch,
            );
        }
    }

    /// Updates a cached entry's attributes (after an operation returned
    /// them) — not to a shorter length than this client committed within
    /// the consistency window (an answer made before that commit).
    pub fn cache_attr(&self, mut a: Attr) {
        self.cache().update(a.ino, |c| {
            if self.committed_lately(c) {
                a.size = a.size.max(c.entry.attr.size);
            }
            c.entry.attr = a;
            c.fetched = Instant::now();
            c.changed = false;
        });
    }

    /// [`Meta::cache_attr`] after this client committed the file's length
    /// (a close, fsync or write-back): later answers made before it keep
    /// this length and layout for the consistency window.
    pub fn cache_committed(&self, a: Attr) {
        self.cache().update(a.ino, |c| {
            c.entry.attr = a;
            c.fetched = Instant::now();
            c.changed = false;
            c.committed = Some(Instant::now());
        });
    }

    /// [`Meta::cache_attr`] after this client set the file's length
    /// (a truncate): shorter is now right.
    pub fn cache_truncated(&self, a: Attr) {
        self.cache().update(a.ino, |c| {
            c.entry.attr = a;
            c.fetched = Instant::now();
            c.changed = false;
            c.committed = None;
        });
    }

    /// Whether this client committed `c`'s length within the window.
    fn committed_lately(&self, c: &Cached) -> bool {
        c.committed.is_some_and(|t| t.elapsed() < self.attr_timeout)
    }

    /// `new` (an answer about to replace `old`) with the length and the
    /// layout `old` holds from a commit of this client within the window,
    /// when those are longer.
    fn keep_committed(&self, old: &Cached, new: &mut Cached) {
        if !self.committed_lately(old) {
            return;
        }
        new.committed = old.committed;
        let a = &mut new.entry.attr;
        a.size = a.size.max(old.entry.attr.size);
        let sets = |c: &Cached| c.entry.layout.as_ref().map(|l| l.objsets.len());
        if old.layout_known && sets(old) > sets(new) {
            // Capabilities name the OSDs of their layout: the two together.
            new.entry.layout = old.entry.layout.clone();
            new.grants = old.grants.clone();
            new.layout_known = true;
        }
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
mod tests {
    use super::*;
    use proto::mds::{Attr, Entry, FileKind};

    fn entry(ino: u64, size: u64) -> Entry {
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
        m.absorb(&found(entry(7, 0), Vec::new()));
        m.cache_attr(entry(7, 4096).attr);
        m.absorb(&found(entry(8, 0), vec![entry(7, 0)]));
        assert_eq!(m.fresh_attr(7).map(|a| a.size), Some(4096));
        // The entry asked for is the answer itself: it is taken.
        m.absorb(&found(entry(7, 10), Vec::new()));
        assert_eq!(m.fresh_attr(7).map(|a| a.size), Some(10));
        // A listed entry (no layout known) keeps its attributes and takes
        // the prefetch's layout and grants, so an open needs no MDS.
        let listing = proto::mds::DirEntry {
            name: "f9".into(),
            ino: 9,
            kind: FileKind::File,
            attr: Some(entry(9, 300).attr),
        };
        m.listed(1, Instant::now(), &[listing]);
        assert!(!m.cache().peek(9).unwrap().layout_known);
        let mut neighbour = entry(9, 0);
        neighbour.layout = Some(proto::layout::Layout {
            spec: Default::default(),
            map_epoch: 1,
            objsets: vec![9],
            homes: Vec::new(),
        });
        m.absorb(&found(entry(8, 0), vec![neighbour]));
        let x = m.cache().peek(9).cloned().unwrap();
        assert!(x.layout_known && x.entry.layout.is_some());
        assert_eq!(x.entry.attr.size, 300);
        // A neighbour not cached, or cached and stale, is taken.
        let short = Meta::new(64, 64, Duration::ZERO);
        short.absorb(&found(entry(7, 5), Vec::new()));
        short.absorb(&found(entry(8, 0), vec![entry(7, 6)]));
        assert_eq!(short.cache().peek(7).map(|x| x.entry.attr.size), Some(6));
    }

    /// Answers made before this client committed a length (a setattr or
    /// stat that raced a write-out) arrive after the commit's: they keep
    /// the committed length and the longer layout for the window; a
    /// truncate by this client takes the length down; after the window an
    /// answer is taken as it is.
    #[test]
    fn answers_older_than_a_commit_here_never_take_its_length_back() {
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
        m.absorb(&found(laid(7, 0, vec![7]), Vec::new()));
        m.cache_committed(entry(7, 4164).attr);
        m.cache_attr(entry(7, 0).attr);
        assert_eq!(m.fresh_attr(7).map(|a| a.size), Some(4164));
        m.cache()
            .update(7, |c| c.entry.layout = laid(7, 0, vec![7, 70]).layout);
        m.absorb(&found(laid(7, 10, vec![7]), Vec::new()));
        let x = m.cache().peek(7).cloned().unwrap();
        assert_eq!(x.entry.attr.size, 4164);
        assert_eq!(x.entry.layout.unwrap().objsets, vec![7, 70]);
        // Longer answers are taken.
        m.cache_attr(entry(7, 9000).attr);
        assert_eq!(m.fresh_attr(7).map(|a| a.size), Some(9000));
        m.cache_truncated(entry(7, 100).attr);
        assert_eq!(m.fresh_attr(7).map(|a| a.size), Some(100));
        m.cache_attr(entry(7, 50).attr);
        assert_eq!(m.fresh_attr(7).map(|a| a.size), Some(50));
        // Past the window, what the namespace says.
        let short = Meta::new(64, 64, Duration::ZERO);
        short.absorb(&found(entry(8, 0), Vec::new()));
        short.cache_committed(entry(8, 4164).attr);
        short.cache_attr(entry(8, 3).attr);
        assert_eq!(short.cache().peek(8).map(|x| x.entry.attr.size), Some(3));
    }
}
