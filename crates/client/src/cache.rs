//! The client's metadata cache: a segmented LRU (Hendricks et al. §3.1.2). Entries
//! the application asked for live in the *demand* segment; entries the MDS
//! sent along unasked (prefetched neighbours) wait in the *prefetch*
//! segment and are promoted to the demand segment on first use, so a burst
//! of prefetch can never push out what the application is actually using.
//! Each segment evicts its least recently used entry when full.
//!
//! The cache maps inode numbers to entries and `(parent, name)` to inode
//! numbers. Entries carry the time they were fetched; callers decide how old
//! an entry may be (the consistency window, see `docs/CLIENT.md`).

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use proto::mds::{Entry, Grant};

/// Which segment an entry is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Segment {
    /// Fetched because the application asked.
    Demand,
    /// Sent along by the MDS; not used yet.
    Prefetch,
}

/// One cached inode.
#[derive(Debug, Clone)]
pub struct Cached {
    /// The entry (attributes, layout, name and parent at fetch time).
    pub entry: Entry,
    /// Read capabilities that came with it (prefetch range grants included).
    pub grants: Vec<Grant>,
    /// When the MDS answered.
    pub fetched: Instant,
    /// Whether `entry.layout` is known (readdirplus entries carry no layout).
    pub layout_known: bool,
    /// Out of date only because this client changed names in it (a
    /// directory): refreshing it needs its attributes, not a prefetch.
    pub changed: bool,
}

struct Slot {
    value: Cached,
    segment: Segment,
    tick: u64,
}

/// The segmented LRU. Invariant: every inode is in exactly one segment, each
/// segment holds at most its capacity, and the name index only points at
/// cached inodes.
pub struct MetaCache {
    slots: HashMap<u64, Slot>,
    names: HashMap<(u64, String), u64>,
    lru: [BTreeMap<u64, u64>; 2],
    cap: [usize; 2],
    tick: u64,
}

fn seg_idx(s: Segment) -> usize {
    match s {
        Segment::Demand => 0,
        Segment::Prefetch => 1,
    }
}

impl MetaCache {
    /// A cache of `demand` + `prefetch` entries (Hendricks et al.: 2,000 + 1,000).
    pub fn new(demand: usize, prefetch: usize) -> MetaCache {
        MetaCache {
            slots: HashMap::new(),
            names: HashMap::new(),
            lru: [BTreeMap::new(), BTreeMap::new()],
            cap: [demand.max(1), prefetch],
            tick: 0,
        }
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Entries in one segment.
    pub fn segment_len(&self, s: Segment) -> usize {
        self.lru[seg_idx(s)].len()
    }

    /// Inserts or replaces an entry in `segment`. A demand insert of an
    /// entry in the prefetch segment moves it; a prefetch insert never
    /// demotes a demand entry (it only refreshes its value).
    pub fn insert(&mut self, value: Cached, segment: Segment) {
        let ino = value.entry.attr.ino;
        let segment = match self.slots.get(&ino) {
            Some(s) if s.segment == Segment::Demand => Segment::Demand,
            _ => segment,
        };
        if self.cap[seg_idx(segment)] == 0 {
            return;
        }
        self.remove(ino);
        self.tick += 1;
        let key = (value.entry.parent, value.entry.name.clone());
        self.names.insert(key, ino);
        self.lru[seg_idx(segment)].insert(self.tick, ino);
        self.slots.insert(
            ino,
            Slot {
                value,
                segment,
                tick: self.tick,
            },
        );
        self.evict(segment);
    }

    fn evict(&mut self, segment: Segment) {
        let i = seg_idx(segment);
        while self.lru[i].len() > self.cap[i] {
            let Some((_, ino)) = self.lru[i].pop_first() else {
                break;
            };
            self.drop_slot(ino);
        }
    }

    fn drop_slot(&mut self, ino: u64) -> Option<Slot> {
        let s = self.slots.remove(&ino)?;
        let key = (s.value.entry.parent, s.value.entry.name.clone());
        if self.names.get(&key) == Some(&ino) {
            self.names.remove(&key);
        }
        Some(s)
    }

    /// Forgets an inode.
    pub fn remove(&mut self, ino: u64) {
        if let Some(s) = self.drop_slot(ino) {
            self.lru[seg_idx(s.segment)].remove(&s.tick);
        }
    }

    /// Forgets the name `(parent, name)` and the inode it pointed at.
    pub fn remove_name(&mut self, parent: u64, name: &str) {
        if let Some(ino) = self.names.remove(&(parent, name.to_string())) {
            self.remove(ino);
        }
    }

    /// Forgets every name cached in directory `parent` (and the inodes
    /// they point at) but `keep`'s.
    pub fn remove_children(&mut self, parent: u64, keep: u64) {
        let inos: Vec<u64> = self
            .names
            .iter()
            .filter(|((p, _), ino)| *p == parent && **ino != keep)
            .map(|(_, ino)| *ino)
            .collect();
        self.names
            .retain(|(p, _), ino| *p != parent || *ino == keep);
        for ino in inos {
            self.remove(ino);
        }
    }

    /// Uses an inode: returns it, marks it recently used, and promotes it to
    /// the demand segment if it was prefetched. The flag says whether it
    /// was a prefetched entry's first use.
    pub fn get(&mut self, ino: u64) -> Option<(Cached, bool)> {
        let s = self.slots.get_mut(&ino)?;
        let was_prefetch = s.segment == Segment::Prefetch;
        self.lru[seg_idx(s.segment)].remove(&s.tick);
        self.tick += 1;
        s.tick = self.tick;
        s.segment = Segment::Demand;
        self.lru[0].insert(self.tick, ino);
        let v = s.value.clone();
        self.evict(Segment::Demand);
        Some((v, was_prefetch))
    }

    /// Looks a name up without touching recency.
    pub fn ino_of(&self, parent: u64, name: &str) -> Option<u64> {
        self.names.get(&(parent, name.to_string())).copied()
    }

    /// Reads an entry without touching recency.
    pub fn peek(&self, ino: u64) -> Option<&Cached> {
        self.slots.get(&ino).map(|s| &s.value)
    }

    /// Updates an entry's value in place (keeps its segment and recency).
    pub fn update(&mut self, ino: u64, f: impl FnOnce(&mut Cached)) {
        if let Some(s) = self.slots.get_mut(&ino) {
            f(&mut s.value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(ino: u64) -> Cached {
        Cached {
            entry: Entry {
                parent: 0,
                ..crate::meta::tests::entry(ino, 0)
            },
            grants: Vec::new(),
            fetched: Instant::now(),
            layout_known: true,
            changed: false,
        }
    }

    #[test]
    fn prefetch_burst_never_evicts_demand_entries() {
        let mut m = MetaCache::new(3, 2);
        for i in 1..=3 {
            m.insert(c(i), Segment::Demand);
        }
        for i in 10..20 {
            m.insert(c(i), Segment::Prefetch);
        }
        assert_eq!(m.segment_len(Segment::Demand), 3);
        assert_eq!(m.segment_len(Segment::Prefetch), 2);
        for i in 1..=3 {
            assert!(m.peek(i).is_some(), "demand entry {i} survived");
        }
        // Only the two most recent prefetches remain.
        assert!(m.peek(18).is_some() && m.peek(19).is_some() && m.peek(17).is_none());
    }

    #[test]
    fn first_use_promotes_and_lru_evicts_the_oldest() {
        let mut m = MetaCache::new(2, 2);
        m.insert(c(1), Segment::Demand);
        m.insert(c(2), Segment::Demand);
        m.insert(c(5), Segment::Prefetch);
        let (_, first) = m.get(5).unwrap();
        assert!(first, "first use of a prefetched entry is reported");
        let (_, again) = m.get(5).unwrap();
        assert!(!again);
        // Promotion pushed the least recently used demand entry (1) out.
        assert!(m.peek(1).is_none());
        assert_eq!(m.segment_len(Segment::Demand), 2);
        assert_eq!(m.segment_len(Segment::Prefetch), 0);
        assert_eq!(m.ino_of(0, "f5"), Some(5));
        assert_eq!(m.ino_of(0, "f1"), None, "name index follows eviction");
        // Using 2 makes 5 the oldest.
        m.get(2);
        m.insert(c(7), Segment::Demand);
        assert!(m.peek(5).is_none() && m.peek(2).is_some());
    }

    #[test]
    fn prefetch_insert_does_not_demote() {
        let mut m = MetaCache::new(2, 1);
        m.insert(c(1), Segment::Demand);
        m.insert(c(1), Segment::Prefetch);
        assert_eq!(m.segment_len(Segment::Demand), 1);
        assert_eq!(m.segment_len(Segment::Prefetch), 0);
        m.remove_name(0, "f1");
        assert!(m.is_empty());
    }
}
