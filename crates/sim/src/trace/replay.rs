//! Phase two: the trace replayed per client through the client's own
//! metadata cache ([`MetaCache`], a segmented LRU), counted as Hendricks
//! et al. count it (§4.2; docs/SIMULATORS.md has the table):
//!
//! - **Mandatory**: changes to the namespace — create, mkdir, symlink,
//!   remove, rename. They reach the MDS whatever the cache holds. A
//!   create's reply is cached; a rename moves the cached entry; a remove
//!   drops it.
//! - **Non-mandatory**: every other access to an object the namespace
//!   holds — a lookup, a stat, an access check, a read or write, an
//!   attribute or length change (the model lets clients settle lengths
//!   themselves), a commit. One the client's cache answers costs nothing
//!   (a read or write needs an entry with the file's layout, which only an
//!   MDS answer carries, not a listing);
//!   otherwise it is an MDS request whose answer is cached on demand and,
//!   with prefetch N, brings the N live inodes with the nearest object ids
//!   into the prefetch segment (the MDS's own choice, [`nearest_by_id`]).
//! - **A directory listing** is non-mandatory too. The client keeps no
//!   listing it read, but a listing the MDS sent ahead answers one read:
//!   with prefetch N, each listing the MDS serves carries the next N
//!   directories (at most [`LISTINGS_MAX_DIRS`]) of a depth-first walk —
//!   the live client's and the MDS's own behaviour. A listing's entries
//!   (READDIRPLUS carries their attributes) enter the prefetch segment.
//! - **Ignored**: accesses to objects the reconstructed namespace does not
//!   hold — a lookup of a name that does not exist, and any access to a
//!   handle whose place the trace never shows (an orphan with no
//!   children), as "where they fit is unclear".
//! - Each client has its own cache; the namespace they change is shared.
//!   Other clients' caches are not invalidated (the simulator counts
//!   requests, not staleness).

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::time::Instant;

use client::cache::{Cached, MetaCache, Segment};
use mds::ids::nearest_by_id;
use proto::mds::{Attr, Entry, FileKind, LISTINGS_MAX_DIRS, LISTINGS_MAX_ENTRIES};
use serde::{Deserialize, Serialize};

use super::event::{Handle, Kind, Op, Trace};
use super::namespace::Namespace;

/// Prefetched listings a client holds at once (the live client's bound).
pub const HELD_LISTINGS: usize = 1024;

/// Cache and prefetch settings of a replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayConfig {
    /// Neighbours prefetched per MDS answer (0: none).
    pub prefetch: usize,
    /// Demand-segment entries.
    pub demand_entries: usize,
    /// Prefetch-segment entries.
    pub prefetch_entries: usize,
    /// How long a cached entry or a listing sent ahead answers, in
    /// milliseconds of trace time (the live client's `attr_timeout`);
    /// `None`: until evicted, as Hendricks et al.'s simulator keeps them.
    #[serde(default)]
    pub attr_timeout_ms: Option<u64>,
}

impl Default for ReplayConfig {
    fn default() -> Self {
        ReplayConfig {
            prefetch: 32,
            demand_entries: 2000,
            prefetch_entries: 1000,
            attr_timeout_ms: None,
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
    /// Prefetched entries (and listings) that were used before being evicted.
    pub prefetch_hits: u64,
    /// Accesses not counted: objects the reconstructed namespace does not
    /// hold (names that do not exist, handles with no known place).
    #[serde(default)]
    pub ignored: u64,
}

impl std::iter::Sum for Requests {
    /// Clients' requests added up.
    fn sum<I: Iterator<Item = Requests>>(it: I) -> Requests {
        it.fold(Requests::default(), |a, r| Requests {
            mandatory: a.mandatory + r.mandatory,
            non_mandatory: a.non_mandatory + r.non_mandatory,
            prefetch_hits: a.prefetch_hits + r.prefetch_hits,
            ignored: a.ignored + r.ignored,
        })
    }
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

/// One client: its cache (with when each entry was fetched) and the
/// listings the MDS sent ahead (with when).
struct Client {
    cache: MetaCache,
    fetched: HashMap<u64, f64>,
    /// Held listings: when each was sent, and its place in `order`.
    listings: HashMap<Handle, (f64, u64)>,
    /// Listings in the order they came, for eviction; an entry whose
    /// number no longer matches its listing is stale and skipped.
    order: VecDeque<(Handle, u64)>,
    serial: u64,
    /// The window entries answer for (seconds; infinite without a timeout).
    window: f64,
    now: f64,
}

impl Client {
    fn new(cfg: &ReplayConfig) -> Client {
        Client {
            cache: MetaCache::new(cfg.demand_entries, cfg.prefetch_entries),
            fetched: HashMap::new(),
            listings: HashMap::new(),
            order: VecDeque::new(),
            serial: 0,
            window: cfg
                .attr_timeout_ms
                .map_or(f64::INFINITY, |ms| ms as f64 / 1000.0),
            now: 0.0,
        }
    }

    fn insert(&mut self, c: Cached, seg: Segment) {
        self.fetched.insert(c.entry.attr.ino, self.now);
        self.cache.insert(c, seg);
    }

    /// Whether `ino` is cached and younger than the window.
    fn fresh(&self, ino: u64) -> bool {
        self.cache.peek(ino).is_some()
            && self
                .fetched
                .get(&ino)
                .is_some_and(|t| self.now - t < self.window)
    }

    fn hold_listing(&mut self, dir: Handle) {
        self.serial += 1;
        self.listings.insert(dir, (self.now, self.serial));
        self.order.push_back((dir, self.serial));
        while self.listings.len() > HELD_LISTINGS {
            let Some((old, n)) = self.order.pop_front() else {
                break;
            };
            if self.listings.get(&old).is_some_and(|(_, m)| *m == n) {
                self.listings.remove(&old);
            }
        }
        // Stale places are dropped once they outnumber the held listings.
        if self.order.len() > 2 * HELD_LISTINGS.max(self.listings.len()) {
            let held = &self.listings;
            self.order
                .retain(|(d, n)| held.get(d).is_some_and(|(_, m)| m == n));
        }
    }

    /// Uses the listing of `dir` sent ahead, if one is held and young.
    fn take_listing(&mut self, dir: Handle) -> bool {
        self.listings
            .remove(&dir)
            .is_some_and(|(t, _)| self.now - t < self.window)
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
    /// Current children of each directory, in name order (as the MDS lists).
    children: HashMap<Handle, BTreeMap<String, Handle>>,
    kinds: HashMap<Handle, Kind>,
    /// Handles whose place the trace never shows (accesses are ignored).
    unplaced: HashSet<Handle>,
    now: Instant,
}

impl State<'_> {
    /// What the client caches of `h`; `layout`: whether it came from an
    /// MDS answer (with the layout and capabilities) rather than a listing.
    fn cached(&self, h: Handle, layout: bool) -> Cached {
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
            layout_known: layout,
            changed: false,
        }
    }

    /// An MDS answer for `h`: the entry itself, plus neighbours.
    fn fetch(&self, cl: &mut Client, h: Handle, n: usize) {
        cl.insert(self.cached(h, true), Segment::Demand);
        if n == 0 {
            return;
        }
        let id = self.ids[&h];
        let above = self.live.range(id + 1..).take(n);
        let below = self.live.range(..id).rev().take(n);
        for (_, &nh) in nearest_by_id(id, above, below, n, |(i, _)| **i) {
            cl.insert(self.cached(nh, true), Segment::Prefetch);
        }
    }

    fn link(&mut self, dir: Handle, name: &str, h: Handle) {
        self.place.insert(h, (dir, name.to_string()));
        self.names.insert((dir, name.to_string()), h);
        self.children
            .entry(dir)
            .or_default()
            .insert(name.to_string(), h);
    }

    fn unlink(&mut self, cache: &mut MetaCache, dir: Handle, name: &str) {
        if let Some(h) = self.names.remove(&(dir, name.to_string())) {
            self.live.remove(&self.ids[&h]);
            self.place.remove(&h);
            cache.remove(self.ids[&h]);
            if let Some(c) = self.children.get_mut(&dir) {
                c.remove(name);
            }
        }
    }

    fn subdirs(&self, dir: Handle, after: Option<&str>) -> Vec<Handle> {
        let Some(c) = self.children.get(&dir) else {
            return Vec::new();
        };
        let range: Box<dyn Iterator<Item = (&String, &Handle)>> = match after {
            Some(a) => Box::new(
                c.range::<str, _>((std::ops::Bound::Excluded(a), std::ops::Bound::Unbounded)),
            ),
            None => Box::new(c.iter()),
        };
        range
            .filter(|(_, h)| self.kinds.get(h) == Some(&Kind::Dir))
            .map(|(_, h)| *h)
            .collect()
    }

    /// The directories a depth-first walker reads after `start`, as the
    /// MDS sends them ahead with a listing of `start`: its subdirectories,
    /// then later siblings of it and of its ancestors (16 levels up), at
    /// most `dirs` of them and [`LISTINGS_MAX_ENTRIES`] entries in all.
    fn walk_after(&self, start: Handle, dirs: usize) -> Vec<Handle> {
        let mut stack: Vec<Handle> = Vec::new();
        let mut at = start;
        for _ in 0..16 {
            let Some((parent, name)) = self.place.get(&at) else {
                break;
            };
            let mut next = self.subdirs(*parent, Some(name));
            next.reverse();
            next.append(&mut stack);
            stack = next;
            at = *parent;
        }
        let mut own = self.subdirs(start, None);
        own.reverse();
        stack.extend(own);
        let mut out = Vec::new();
        let mut budget = LISTINGS_MAX_ENTRIES;
        while let Some(d) = stack.pop() {
            if out.len() >= dirs {
                break;
            }
            let n = self.children.get(&d).map_or(0, BTreeMap::len);
            if n > budget {
                break;
            }
            budget -= n;
            let mut below = self.subdirs(d, None);
            below.reverse();
            stack.extend(below);
            out.push(d);
        }
        out
    }

    /// A listing's entries, with their attributes, as prefetch (an entry
    /// already cached and fresh stays as it is).
    fn listed(&self, cl: &mut Client, dir: Handle) {
        let Some(c) = self.children.get(&dir) else {
            return;
        };
        for h in c.values() {
            if !cl.fresh(self.ids[h]) {
                cl.insert(self.cached(*h, false), Segment::Prefetch);
            }
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
        children: HashMap::new(),
        kinds: ns.nodes.iter().map(|(h, n)| (*h, n.kind)).collect(),
        unplaced: ns.unplaced(),
        now: Instant::now(),
    };
    for (h, n) in &ns.nodes {
        if n.created.is_none() {
            st.live.insert(ids[h], *h);
            if let Some(p) = n.parent {
                st.link(p, &n.name, *h);
            }
        }
    }
    let mut clients: Vec<Client> = Vec::new();
    let mut out = vec![Requests::default(); t.clients.len()];
    for e in &t.events {
        let c = e.client as usize;
        while clients.len() <= c {
            clients.push(Client::new(cfg));
        }
        clients[c].now = e.time;
        step(&mut st, &mut clients[c], &mut out[c], &e.op, cfg);
    }
    out
}

/// An access to `h` that the cache may answer (`hit`).
fn access(st: &State, cl: &mut Client, r: &mut Requests, h: Handle, hit: bool, cfg: &ReplayConfig) {
    if st.unplaced.contains(&h) {
        r.ignored += 1;
    } else if hit {
        if let Some((_, first_use)) = cl.cache.get(st.ids[&h])
            && first_use
        {
            r.prefetch_hits += 1;
        }
    } else {
        r.non_mandatory += 1;
        st.fetch(cl, h, cfg.prefetch);
    }
}

fn step(st: &mut State, cl: &mut Client, r: &mut Requests, op: &Op, cfg: &ReplayConfig) {
    let ids = st.ids;
    match op {
        Op::Lookup { dir, name, child } => match child {
            Some((h, _)) => {
                let hit = cl.cache.ino_of(ids[dir], name) == Some(ids[h]) && cl.fresh(ids[h]);
                access(st, cl, r, *h, hit, cfg);
            }
            // A name the namespace does not hold: ignored (§4.2).
            None => r.ignored += 1,
        },
        Op::Use { node, .. } | Op::Modify { node } => {
            let hit = cl.fresh(ids[node]);
            access(st, cl, r, *node, hit, cfg);
        }
        // Reading or writing needs the layout, which a listing lacks.
        Op::Data { node } => {
            let hit =
                cl.fresh(ids[node]) && cl.cache.peek(ids[node]).is_some_and(|x| x.layout_known);
            access(st, cl, r, *node, hit, cfg);
        }
        Op::Readdir { dir, .. } => {
            if st.unplaced.contains(dir) && !st.children.contains_key(dir) {
                r.ignored += 1;
                return;
            }
            if cl.take_listing(*dir) {
                r.prefetch_hits += 1;
            } else {
                r.non_mandatory += 1;
                let n = cfg.prefetch.min(LISTINGS_MAX_DIRS);
                if n > 0 {
                    for d in st.walk_after(*dir, n) {
                        cl.hold_listing(d);
                    }
                }
            }
            st.listed(cl, *dir);
        }
        Op::Create {
            dir, name, child, ..
        } => {
            r.mandatory += 1;
            st.unlink(&mut cl.cache, *dir, name);
            st.live.insert(ids[child], *child);
            st.link(*dir, name, *child);
            cl.insert(st.cached(*child, true), Segment::Demand);
            cl.listings.remove(dir);
        }
        Op::Remove { dir, name } => {
            r.mandatory += 1;
            st.unlink(&mut cl.cache, *dir, name);
            cl.listings.remove(dir);
        }
        Op::Rename {
            from_dir,
            from,
            to_dir,
            to,
        } => {
            r.mandatory += 1;
            cl.listings.remove(from_dir);
            cl.listings.remove(to_dir);
            if let Some(h) = st.names.remove(&(*from_dir, from.clone())) {
                if let Some(c) = st.children.get_mut(from_dir) {
                    c.remove(from);
                }
                st.unlink(&mut cl.cache, *to_dir, to);
                st.link(*to_dir, to, h);
                // The client made the change: its entry moves with it.
                let layout = cl.cache.peek(ids[&h]).is_some_and(|x| x.layout_known);
                cl.cache.remove(ids[&h]);
                cl.insert(st.cached(h, layout), Segment::Demand);
            }
        }
    }
}
