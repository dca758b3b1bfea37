//! Phase two: the trace replayed per client through the client's own
//! metadata cache ([`MetaCache`], a segmented LRU).
//!
//! - A lookup or attribute use the client's cache can answer costs nothing.
//!   Otherwise it is a *non-mandatory* MDS request: the answer is cached in
//!   the demand segment and, with prefetch N, the N live inodes with the
//!   nearest object ids come along into the prefetch segment (the MDS's own
//!   choice, [`nearest_by_id`]). A negative lookup always goes to the MDS.
//! - A directory listing is a *non-mandatory* request too (it changes
//!   nothing), but the cache keeps no listings, so every one reaches the MDS.
//! - Creates, removes, renames and attribute changes are *mandatory*: they
//!   reach the MDS whatever the cache holds. A create's reply is cached; a
//!   remove or rename drops the entry.
//! - Each client has its own cache; the namespace they change is shared.
//!   Other clients' caches are not invalidated (the simulator counts
//!   requests, not staleness).

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use client::cache::{Cached, MetaCache, Segment};
use mds::ids::nearest_by_id;
use proto::mds::{Attr, Entry, FileKind};
use serde::{Deserialize, Serialize};

use super::event::{Handle, Kind, Op, Trace};
use super::namespace::Namespace;

/// Cache and prefetch settings of a replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayConfig {
    /// Neighbours prefetched per MDS answer (0: none).
    pub prefetch: usize,
    /// Demand-segment entries.
    pub demand_entries: usize,
    /// Prefetch-segment entries.
    pub prefetch_entries: usize,
}

impl Default for ReplayConfig {
    fn default() -> Self {
        ReplayConfig {
            prefetch: 32,
            demand_entries: 2000,
            prefetch_entries: 1000,
        }
    }
}

/// MDS requests of one client.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Requests {
    /// Requests that reach the MDS whatever the cache holds.
    pub mandatory: u64,
    /// Requests a cache could have answered.
    pub non_mandatory: u64,
    /// Prefetched entries that were used before being evicted.
    pub prefetch_hits: u64,
}

impl Requests {
    /// All requests.
    pub fn total(&self) -> u64 {
        self.mandatory + self.non_mandatory
    }
}

fn file_kind(k: Kind) -> FileKind {
    match k {
        Kind::File => FileKind::File,
        Kind::Dir => FileKind::Dir,
        Kind::Symlink => FileKind::Symlink,
    }
}

struct State<'a> {
    ids: &'a HashMap<Handle, u64>,
    /// Live inodes by id, for neighbour choice.
    live: BTreeMap<u64, Handle>,
    /// Current (parent, name) of each live node.
    place: HashMap<Handle, (Handle, String)>,
    /// Current names.
    names: HashMap<(Handle, String), Handle>,
    kinds: HashMap<Handle, Kind>,
    now: Instant,
}

impl State<'_> {
    fn cached(&self, h: Handle) -> Cached {
        let (parent, name) = self.place.get(&h).cloned().unwrap_or((h, String::new()));
        let id = self.ids[&h];
        Cached {
            entry: Entry {
                parent: self.ids[&parent],
                name,
                attr: Attr {
                    ino: id,
                    kind: file_kind(self.kinds.get(&h).copied().unwrap_or(Kind::File)),
                    mode: 0o644,
                    nlink: 1,
                    uid: 0,
                    gid: 0,
                    size: 0,
                    atime: 0,
                    mtime: 0,
                    ctime: 0,
                    rdev: 0,
                },
                layout: None,
            },
            grants: Vec::new(),
            fetched: self.now,
            layout_known: false,
            changed: false,
        }
    }

    /// An MDS answer for `h`: the entry itself, plus neighbours.
    fn fetch(&self, cache: &mut MetaCache, h: Handle, n: usize) {
        cache.insert(self.cached(h), Segment::Demand);
        if n == 0 {
            return;
        }
        let id = self.ids[&h];
        let above = self.live.range(id + 1..).take(n);
        let below = self.live.range(..id).rev().take(n);
        for (_, &nh) in nearest_by_id(id, above, below, n, |(i, _)| **i) {
            cache.insert(self.cached(nh), Segment::Prefetch);
        }
    }

    fn unlink(&mut self, cache: &mut MetaCache, dir: Handle, name: &str) {
        if let Some(h) = self.names.remove(&(dir, name.to_string())) {
            self.live.remove(&self.ids[&h]);
            self.place.remove(&h);
            cache.remove(self.ids[&h]);
        }
    }
}

/// Replays `t` over namespace `ns` numbered by `ids`; returns each client's requests.
pub fn replay(
    t: &Trace,
    ns: &Namespace,
    ids: &HashMap<Handle, u64>,
    cfg: &ReplayConfig,
) -> Vec<Requests> {
    let mut st = State {
        ids,
        live: BTreeMap::new(),
        place: HashMap::new(),
        names: HashMap::new(),
        kinds: ns.nodes.iter().map(|(h, n)| (*h, n.kind)).collect(),
        now: Instant::now(),
    };
    for (h, n) in &ns.nodes {
        if n.created.is_none() {
            st.live.insert(ids[h], *h);
            if let Some(p) = n.parent {
                st.place.insert(*h, (p, n.name.clone()));
                st.names.insert((p, n.name.clone()), *h);
            }
        }
    }
    let mut caches: Vec<MetaCache> = Vec::new();
    let mut out = vec![Requests::default(); t.clients.len()];
    for e in &t.events {
        let c = e.client as usize;
        while caches.len() <= c {
            caches.push(MetaCache::new(cfg.demand_entries, cfg.prefetch_entries));
        }
        let cache = &mut caches[c];
        let r = &mut out[c];
        let use_node =
            |st: &State, cache: &mut MetaCache, r: &mut Requests, h: Handle, hit: bool| {
                if hit {
                    if let Some((_, first_use)) = cache.get(ids[&h])
                        && first_use
                    {
                        r.prefetch_hits += 1;
                    }
                } else {
                    r.non_mandatory += 1;
                    st.fetch(cache, h, cfg.prefetch);
                }
            };
        match &e.op {
            Op::Lookup { dir, name, child } => match child {
                Some((h, _)) => {
                    let hit = cache.ino_of(ids[dir], name) == Some(ids[h])
                        && cache.peek(ids[h]).is_some();
                    use_node(&st, cache, r, *h, hit);
                }
                None => r.non_mandatory += 1,
            },
            Op::Use { node, .. } => {
                let hit = cache.peek(ids[node]).is_some();
                use_node(&st, cache, r, *node, hit);
            }
            // A listing changes nothing: non-mandatory, as Hendricks et
            // al. count it; the cache holds no listings, so it always asks.
            Op::Readdir { .. } => r.non_mandatory += 1,
            Op::Modify { .. } => r.mandatory += 1,
            Op::Create {
                dir, name, child, ..
            } => {
                r.mandatory += 1;
                st.unlink(cache, *dir, name);
                st.live.insert(ids[child], *child);
                st.place.insert(*child, (*dir, name.clone()));
                st.names.insert((*dir, name.clone()), *child);
                cache.insert(st.cached(*child), Segment::Demand);
            }
            Op::Remove { dir, name } => {
                r.mandatory += 1;
                st.unlink(cache, *dir, name);
            }
            Op::Rename {
                from_dir,
                from,
                to_dir,
                to,
            } => {
                r.mandatory += 1;
                if let Some(h) = st.names.remove(&(*from_dir, from.clone())) {
                    st.unlink(cache, *to_dir, to);
                    st.names.insert((*to_dir, to.clone()), h);
                    st.place.insert(h, (*to_dir, to.clone()));
                    cache.remove(ids[&h]);
                }
            }
        }
    }
    out
}
