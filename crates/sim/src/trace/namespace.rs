//! Phase one: the namespace a trace touches, and its object ids under each
//! policy.
//!
//! Every handle becomes a node; a successful lookup, create or listing
//! gives a node its parent and name (the first one seen wins; a link that
//! would make a cycle is ignored). Nodes whose parent the trace never shows
//! hang under the root. Nodes that exist before the trace are numbered
//! first, depth-first from the root with children in order of first
//! appearance (as if the tree had been restored from a backup, the way a
//! file system is usually populated); nodes the trace creates are numbered
//! when their create comes, in trace order. Numbers come from the MDS's own
//! [`IdPolicy`].

use std::collections::{HashMap, HashSet};

use mds::ids::{Counters, DirIds, Geometry, IdPolicy, PolicyKind, ROOT_ID};
use serde::{Deserialize, Serialize};

use super::event::{Handle, Kind, Op, Trace};

/// One reconstructed node.
#[derive(Debug, Clone)]
pub struct Node {
    /// Parent directory (`None` only for the root).
    pub parent: Option<Handle>,
    /// Name in the parent (first one seen).
    pub name: String,
    /// Kind (a node used as a directory is one).
    pub kind: Kind,
    /// Index of the event that created it, if the trace did.
    pub created: Option<usize>,
    /// Children in order of first appearance.
    pub children: Vec<Handle>,
}

/// Sizes of a reconstructed namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shape {
    /// Nodes in all.
    pub nodes: u64,
    /// Directories.
    pub dirs: u64,
    /// Nodes that existed before the trace.
    pub preexisting: u64,
    /// Nodes the trace created.
    pub created: u64,
    /// Nodes whose parent the trace never showed (put under the root).
    pub orphans: u64,
}

/// The reconstructed namespace.
#[derive(Debug)]
pub struct Namespace {
    /// Nodes by handle.
    pub nodes: HashMap<Handle, Node>,
    /// The root's handle.
    pub root: Handle,
    /// Its shape.
    pub shape: Shape,
    /// Nodes whose parent the trace never showed (hung under the root).
    pub orphans: HashSet<Handle>,
}

impl Namespace {
    /// Reconstructs the namespace of `t`.
    pub fn build(t: &Trace) -> Namespace {
        let root = t.root.unwrap_or(Handle::MAX);
        let mut ns = Namespace {
            nodes: HashMap::new(),
            root,
            shape: Shape::default(),
            orphans: HashSet::new(),
        };
        ns.nodes.insert(
            root,
            Node {
                parent: None,
                name: String::new(),
                kind: Kind::Dir,
                created: None,
                children: Vec::new(),
            },
        );
        for (i, e) in t.events.iter().enumerate() {
            match &e.op {
                Op::Lookup { dir, name, child } => {
                    ns.dir(*dir);
                    if let Some((c, k)) = child {
                        ns.link(*dir, name, *c, *k, None);
                    }
                }
                Op::Use { node, kind } => ns.touch(*node, kind.unwrap_or(Kind::File)),
                Op::Modify { node } | Op::Data { node } => ns.touch(*node, Kind::File),
                Op::Create {
                    dir,
                    name,
                    child,
                    kind,
                } => {
                    ns.dir(*dir);
                    ns.link(*dir, name, *child, *kind, Some(i));
                }
                Op::Remove { dir, .. } => ns.dir(*dir),
                Op::Rename {
                    from_dir, to_dir, ..
                } => {
                    ns.dir(*from_dir);
                    ns.dir(*to_dir);
                }
                Op::Readdir { dir, entries } => {
                    ns.dir(*dir);
                    for (name, child) in entries {
                        if let Some((c, k)) = child {
                            ns.link(*dir, name, *c, *k, None);
                        }
                    }
                }
            }
        }
        // Orphans hang under the root, in order of first appearance.
        let mut orphans: Vec<Handle> = ns
            .nodes
            .iter()
            .filter(|(h, n)| n.parent.is_none() && **h != root)
            .map(|(h, _)| *h)
            .collect();
        orphans.sort_unstable();
        ns.shape.orphans = orphans.len() as u64;
        for h in orphans {
            ns.orphans.insert(h);
            ns.nodes.get_mut(&h).expect("listed").parent = Some(root);
            ns.nodes.get_mut(&root).expect("root").children.push(h);
        }
        ns.shape.nodes = ns.nodes.len() as u64;
        ns.shape.dirs = ns.nodes.values().filter(|n| n.kind == Kind::Dir).count() as u64;
        ns.shape.created = ns.nodes.values().filter(|n| n.created.is_some()).count() as u64;
        ns.shape.preexisting = ns.shape.nodes - ns.shape.created;
        ns
    }

    /// Orphans that head no subtree: where they fit is unclear, so
    /// accesses to them are ignored (Hendricks et al. §4.2). An orphan
    /// with children is the top of a subtree the trace shows.
    pub fn unplaced(&self) -> HashSet<Handle> {
        self.orphans
            .iter()
            .filter(|h| self.nodes[h].children.is_empty())
            .copied()
            .collect()
    }

    fn touch(&mut self, h: Handle, kind: Kind) {
        self.nodes.entry(h).or_insert_with(|| Node {
            parent: None,
            name: format!("#{h}"),
            kind,
            created: None,
            children: Vec::new(),
        });
    }

    fn dir(&mut self, h: Handle) {
        self.touch(h, Kind::Dir);
        self.nodes.get_mut(&h).expect("touched").kind = Kind::Dir;
    }

    fn is_ancestor(&self, a: Handle, mut of: Handle) -> bool {
        for _ in 0..10_000 {
            if of == a {
                return true;
            }
            match self.nodes.get(&of).and_then(|n| n.parent) {
                Some(p) => of = p,
                None => return false,
            }
        }
        true
    }

    fn link(&mut self, dir: Handle, name: &str, child: Handle, kind: Kind, created: Option<usize>) {
        self.touch(child, kind);
        if kind == Kind::Dir {
            self.dir(child);
        }
        let free = self.nodes[&child].parent.is_none() && child != self.root;
        if free && !self.is_ancestor(child, dir) {
            let n = self.nodes.get_mut(&child).expect("touched");
            n.parent = Some(dir);
            n.name = name.to_string();
            n.created = n.created.or(created);
            self.nodes.get_mut(&dir).expect("dir").children.push(child);
        }
    }

    /// Object ids of every node under `policy` (the root gets the MDS's root id).
    pub fn assign_ids(
        &self,
        t: &Trace,
        policy: PolicyKind,
    ) -> Result<HashMap<Handle, u64>, StudyError> {
        let mut n = Numbering {
            ns: self,
            policy: IdPolicy::new(policy, Geometry::default())?,
            ids: HashMap::from([(self.root, ROOT_ID)]),
            dirs: HashMap::new(),
            counters: Counters::default(),
            taken: HashSet::from([ROOT_ID]),
        };
        n.dirs.insert(self.root, n.policy.root());
        // Pre-existing nodes depth-first; a created node's subtree waits for it.
        for &c in &self.nodes[&self.root].children {
            if self.nodes[&c].created.is_none() {
                n.subtree(c);
            }
        }
        for e in &t.events {
            if let Op::Create { child, .. } = &e.op
                && self.nodes[child].parent.is_some()
                && self.nodes[child].created.is_some()
                && !n.ids.contains_key(child)
            {
                n.subtree(*child);
            }
        }
        // Anything left (a created node whose create was not the link that
        // placed it) is numbered last, parents first.
        let mut rest: Vec<Handle> = self
            .nodes
            .keys()
            .filter(|h| !n.ids.contains_key(h))
            .copied()
            .collect();
        rest.sort_unstable();
        while !rest.is_empty() {
            let before = rest.len();
            rest.retain(|&h| {
                let parent = self.nodes[&h].parent.expect("not the root");
                if n.ids.contains_key(&parent) {
                    n.number(h);
                    false
                } else {
                    true
                }
            });
            if rest.len() == before {
                return Err(StudyError::Unrooted);
            }
        }
        Ok(n.ids)
    }
}

/// One policy's numbering in progress.
struct Numbering<'a> {
    ns: &'a Namespace,
    policy: IdPolicy,
    ids: HashMap<Handle, u64>,
    dirs: HashMap<Handle, DirIds>,
    counters: Counters,
    taken: HashSet<u64>,
}

impl Numbering<'_> {
    /// Numbers node `h`; its parent must be numbered.
    fn number(&mut self, h: Handle) {
        let n = &self.ns.nodes[&h];
        let parent = n.parent.expect("only the root has no parent");
        let pd = self
            .dirs
            .get_mut(&parent)
            .expect("a parent is numbered before its children");
        let taken = &self.taken;
        let mut is_taken = |id: u64| taken.contains(&id);
        let id = if n.kind == Kind::Dir {
            let (id, d) = self.policy.dir_id(pd, &mut self.counters, &mut is_taken);
            self.dirs.insert(h, d);
            id
        } else {
            self.policy.file_id(pd, &mut self.counters, &mut is_taken)
        };
        self.taken.insert(id);
        self.ids.insert(h, id);
    }

    /// Numbers `start`, then depth-first the descendants the trace did not
    /// create (children in order of first appearance).
    fn subtree(&mut self, start: Handle) {
        let mut stack = vec![start];
        while let Some(h) = stack.pop() {
            if self.ids.contains_key(&h) {
                continue;
            }
            self.number(h);
            let nodes = &self.ns.nodes;
            stack.extend(
                nodes[&h]
                    .children
                    .iter()
                    .rev()
                    .filter(|c| nodes[c].created.is_none()),
            );
        }
    }
}

/// Why a policy study cannot number the reconstructed namespace.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StudyError {
    /// The id policy's geometry does not fit.
    #[error(transparent)]
    Geometry(#[from] mds::ids::GeometryError),
    /// A node cannot be reached from the root.
    #[error("the reconstructed namespace has a node with no path to the root")]
    Unrooted,
}
