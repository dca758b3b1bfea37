//! Tessera's own trace format: one operation per line, by path.
//!
//! ```text
//! # tessera trace v1 — '#' starts a comment; blank lines are skipped
//! <time> <client> <op> <path> [<path2>]
//! ```
//! - `time`: seconds (decimal); lines are replayed in file order, and
//!   times matter only to `sim trace --attr-timeout`.
//! - `client`: any token naming the client (host, process…).
//! - `op`: `stat` / `open` / `lookup` (resolve the path, then use its
//!   attributes), `readdir` (resolve, then list), `create` / `mkdir` /
//!   `symlink` (resolve the parent, then make the name), `unlink` / `rmdir`
//!   (resolve the parent, then remove), `rename FROM TO`, `setattr`.
//! - paths are absolute, `/`-separated, without empty components or `.`/`..`;
//!   a name with whitespace or `%` is written with `%XX` escapes.
//!
//! Resolving a path is what a client does: one lookup per component, each
//! of which its cache may answer. A path the trace never created is taken to
//! exist before the trace starts; a path it removed gives a negative lookup.

use std::collections::{BTreeMap, HashSet};

use super::event::{Handle, Kind, LineError, Op, Trace};

/// Parses a trace in the path format. Malformed lines are counted and skipped.
pub fn parse(text: &str) -> Trace {
    parse_lines(text.lines().map(|l| Ok(l.to_string()))).expect("reading a string cannot fail")
}

/// As [`parse`], from lines read one at a time (files of any size).
pub fn parse_lines(lines: impl Iterator<Item = std::io::Result<String>>) -> std::io::Result<Trace> {
    let mut p = Parser {
        t: Trace::default(),
        paths: BTreeMap::new(),
        removed: HashSet::new(),
    };
    let root = p.t.handle("/");
    p.t.root = Some(root);
    p.paths.insert(String::new(), (root, Kind::Dir));
    for (i, line) in lines.enumerate() {
        let line = line?;
        let n = i as u64 + 1;
        p.t.stats.lines += 1;
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        if let Err(why) = p.line(line) {
            p.t.stats.malformed(n, &why);
        }
    }
    Ok(p.t)
}

struct Parser {
    t: Trace,
    /// Current path (without the leading '/'; root is "") → node.
    paths: BTreeMap<String, (Handle, Kind)>,
    /// Paths removed by the trace and not made again.
    removed: HashSet<String>,
}

fn unescape(s: &str) -> Result<String, LineError> {
    let out = super::event::unescape(s, b'%')?;
    String::from_utf8(out).map_err(|_| LineError::NotUtf8)
}

/// Splits an absolute path into names.
fn components(path: &str) -> Result<Vec<String>, LineError> {
    let rest = path
        .strip_prefix('/')
        .ok_or_else(|| LineError::NotAbsolute(path.into()))?;
    if rest.is_empty() {
        return Ok(Vec::new());
    }
    rest.split('/')
        .map(|c| match c {
            "" | "." | ".." => Err(LineError::BadComponent(path.into())),
            c => unescape(c),
        })
        .collect()
}

impl Parser {
    fn line(&mut self, line: &str) -> Result<(), LineError> {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 4 {
            return Err(LineError::Fields("time client op path [path2]"));
        }
        let time: f64 = f[0].parse().map_err(|_| LineError::Time(f[0].into()))?;
        if !time.is_finite() {
            return Err(LineError::TimeNotFinite);
        }
        self.t.clock = time;
        let client = self.t.client(f[1]);
        let path = components(f[3])?;
        let want = if f[2] == "rename" { 5 } else { 4 };
        if f.len() != want {
            return Err(LineError::PathCount {
                op: f[2].into(),
                paths: want - 3,
            });
        }
        match f[2] {
            "stat" | "open" | "lookup" => {
                if let Some((h, k)) = self.walk(client, &path, None) {
                    self.t.push(
                        client,
                        Op::Use {
                            node: h,
                            kind: Some(k),
                        },
                    );
                }
            }
            "setattr" => {
                if let Some((h, _)) = self.walk(client, &path, None) {
                    self.t.push(client, Op::Modify { node: h });
                }
            }
            "readdir" => {
                if let Some((h, _)) = self.walk(client, &path, Some(Kind::Dir)) {
                    let prefix = if path.is_empty() {
                        String::new()
                    } else {
                        format!("{}/", path.join("/"))
                    };
                    let entries = self
                        .paths
                        .range(prefix.clone()..)
                        .take_while(|(p, _)| p.starts_with(&prefix))
                        .filter(|(p, _)| !p.is_empty() && !p[prefix.len()..].contains('/'))
                        .map(|(p, &node)| (p[prefix.len()..].to_string(), Some(node)))
                        .collect();
                    self.t.push(client, Op::Readdir { dir: h, entries });
                }
            }
            op @ ("create" | "mkdir" | "symlink") => {
                let kind = match op {
                    "mkdir" => Kind::Dir,
                    "symlink" => Kind::Symlink,
                    _ => Kind::File,
                };
                let (name, parent) = path.split_last().ok_or(LineError::OnRoot("create"))?;
                if let Some((dir, _)) = self.walk(client, parent, Some(Kind::Dir)) {
                    let key = path.join("/");
                    let child = self.t.fresh_handle(&format!("/{key}"));
                    self.forget(&key);
                    self.removed.remove(&key);
                    self.paths.insert(key, (child, kind));
                    self.t.push(
                        client,
                        Op::Create {
                            dir,
                            name: name.clone(),
                            child,
                            kind,
                        },
                    );
                }
            }
            "unlink" | "rmdir" => {
                let (name, parent) = path.split_last().ok_or(LineError::OnRoot("remove"))?;
                if let Some((dir, _)) = self.walk(client, parent, Some(Kind::Dir)) {
                    let key = path.join("/");
                    self.forget(&key);
                    self.removed.insert(key);
                    self.t.push(
                        client,
                        Op::Remove {
                            dir,
                            name: name.clone(),
                        },
                    );
                }
            }
            "rename" => {
                let to = components(f[4])?;
                let (from_name, from_parent) =
                    path.split_last().ok_or(LineError::OnRoot("rename"))?;
                let (to_name, to_parent) =
                    to.split_last().ok_or(LineError::OnRoot("rename onto"))?;
                let Some((from_dir, _)) = self.walk(client, from_parent, Some(Kind::Dir)) else {
                    return Ok(());
                };
                let Some((to_dir, _)) = self.walk(client, to_parent, Some(Kind::Dir)) else {
                    return Ok(());
                };
                // The source must exist (taken to pre-exist if never seen).
                self.walk(client, &path, None);
                let (a, b) = (path.join("/"), to.join("/"));
                self.forget(&b);
                for (p, v) in self.take_subtree(&a) {
                    self.paths.insert(format!("{b}{}", &p[a.len()..]), v);
                }
                self.removed.insert(a);
                self.removed.remove(&b);
                self.t.push(
                    client,
                    Op::Rename {
                        from_dir,
                        from: from_name.clone(),
                        to_dir,
                        to: to_name.clone(),
                    },
                );
            }
            other => return Err(LineError::UnknownOp(other.into())),
        }
        Ok(())
    }

    /// Drops `key` and everything under it from the current namespace.
    fn forget(&mut self, key: &str) {
        self.take_subtree(key);
    }

    /// Removes `key` and everything under it; returns them with their nodes.
    fn take_subtree(&mut self, key: &str) -> Vec<(String, (Handle, Kind))> {
        let under: Vec<String> = self
            .paths
            .range(key.to_string()..)
            .take_while(|(p, _)| p.starts_with(key))
            .filter(|(p, _)| p.len() == key.len() || p.as_bytes()[key.len()] == b'/')
            .map(|(p, _)| p.clone())
            .collect();
        under
            .into_iter()
            .filter_map(|p| self.paths.remove(&p).map(|v| (p, v)))
            .collect()
    }

    /// Resolves `path` component by component, emitting one lookup each;
    /// `leaf` is the kind the last component must have if it is new.
    /// `None` when a component was removed by the trace (a negative lookup).
    fn walk(&mut self, client: u32, path: &[String], leaf: Option<Kind>) -> Option<(Handle, Kind)> {
        let mut cur = self.paths[""];
        let mut key = String::new();
        for (i, name) in path.iter().enumerate() {
            if !key.is_empty() {
                key.push('/');
            }
            key.push_str(name);
            let last = i + 1 == path.len();
            let child = match self.paths.get(&key) {
                Some(&c) => Some(c),
                None if self.removed.contains(&key) => None,
                None => {
                    let kind = if last {
                        leaf.unwrap_or(Kind::File)
                    } else {
                        Kind::Dir
                    };
                    let h = self.t.handle(&format!("/{key}"));
                    self.paths.insert(key.clone(), (h, kind));
                    Some((h, kind))
                }
            };
            self.t.push(
                client,
                Op::Lookup {
                    dir: cur.0,
                    name: name.clone(),
                    child,
                },
            );
            cur = child?;
        }
        Some(cur)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_resolves_one_component_at_a_time() {
        let t = parse("0 c1 stat /a/b\n");
        assert_eq!(t.events.len(), 3);
        let a = t.handles.iter().position(|h| h == "/a").unwrap() as Handle;
        assert!(
            matches!(&t.events[0].op, Op::Lookup { dir: 0, name, child: Some((h, Kind::Dir)) } if name == "a" && *h == a)
        );
        assert!(matches!(&t.events[2].op, Op::Use { .. }));
    }

    #[test]
    fn removed_paths_give_negative_lookups_and_malformed_lines_are_counted() {
        let t = parse(
            "0 c stat /x\n1 c unlink /x\n2 c stat /x\nnot a line\n3 c frobnicate /x\n4 c stat relative\n5 c create /x\n6 c stat /x\n",
        );
        assert_eq!(t.stats.malformed, 3, "{:?}", t.stats.examples);
        let negative = t
            .events
            .iter()
            .filter(|e| matches!(e.op, Op::Lookup { child: None, .. }))
            .count();
        assert_eq!(negative, 1);
        // The file made again is a new node.
        let uses = used_nodes(&t);
        assert_eq!(uses.len(), 2);
        assert_ne!(uses[0], uses[1]);
    }

    /// The nodes whose attributes the trace used, in order.
    fn used_nodes(t: &Trace) -> Vec<Handle> {
        t.events
            .iter()
            .filter_map(|e| match e.op {
                Op::Use { node, .. } => Some(node),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn rename_moves_a_subtree() {
        let t = parse("0 c stat /d/f\n1 c rename /d /e\n2 c stat /e/f\n3 c stat /d/f\n");
        let uses = used_nodes(&t);
        assert_eq!(uses.len(), 2, "the last stat fails: /d is gone");
        assert_eq!(uses[0], uses[1], "the same file under its new name");
    }
}
