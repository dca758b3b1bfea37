//! The calls that name two paths (rename, link, symlink) and removals:
//! what they do to the converter's names, and the requests they become.

use std::io::Write;

use super::syntax::{Syscall, string};
use super::{Converter, Reply, last_name, quote};
use crate::trace::event::Kind;

impl<W: Write> Converter<W> {
    /// A name removed (or moved out of the traced tree).
    pub(super) fn remove(&mut self, pid: u32, path: &str, rmdir: bool) -> std::io::Result<()> {
        if path == self.root {
            self.forget(path);
            return Ok(());
        }
        let kind = if rmdir {
            Kind::Dir
        } else {
            self.kind_known(path).unwrap_or(Kind::File)
        };
        self.walk(pid, path, Some(kind), true)?;
        let (parent, leaf) = last_name(path);
        if let Some(&dir) = self.handles.get(parent) {
            let keys = format!("fh {dir:08x} name {}", quote(leaf.as_bytes()));
            let (proc, name) = if kind == Kind::Dir {
                (0xd, "rmdir")
            } else {
                (0xc, "remove")
            };
            self.request(proc, name, &keys, Reply::Ok(Vec::new()))?;
        }
        self.forget(path);
        Ok(())
    }

    /// Rename, link and symlink: a source (a path, or a symlink's text)
    /// and a new name.
    pub(super) fn two_names(&mut self, c: &Syscall) -> std::io::Result<()> {
        let pid = c.pid;
        let a = &c.args;
        let arg = |i: usize| a.get(i).map(String::as_str);
        let (from, to) = match c.name.as_str() {
            "rename" | "link" => ((None, 0), (None, 1)),
            "symlink" => ((None, 0), (None, 1)),
            "symlinkat" => ((None, 0), (Some(1), 2)),
            _ => ((Some(0), 1), (Some(2), 3)),
        };
        let path = |me: &mut Self, (d, i): (Option<usize>, usize)| -> Option<String> {
            let p = a.get(i).and_then(|x| string(x))?;
            Some(me.resolve(pid, d.and_then(arg), &p))
        };
        let Some(to) = path(self, to) else {
            return Ok(());
        };
        if c.result.is_err() {
            return Ok(());
        }
        if c.name.starts_with("symlink") {
            if !self.under_root(&to) {
                self.stats.outside += 1;
                return Ok(());
            }
            return self.create(pid, &to, Kind::Symlink, 0xa, "symlink");
        }
        let Some(from) = path(self, from) else {
            return Ok(());
        };
        let rename = c.name.starts_with("rename");
        match (self.under_root(&from), self.under_root(&to)) {
            (false, false) => {
                self.stats.outside += 1;
                return Ok(());
            }
            // Moved out of the traced tree: for its server, a removal.
            (true, false) if rename => return self.remove(pid, &from, false),
            (true, false) => return Ok(()),
            // Moved or linked in from outside: a new name.
            (false, true) => return self.create(pid, &to, Kind::File, 8, "create"),
            (true, true) if from == to => return Ok(()),
            (true, true) => {}
        }
        let kind = self.kind_known(&from).unwrap_or(Kind::File);
        let Some(fh) = self.walk(pid, &from, Some(kind), true)? else {
            return Ok(());
        };
        let (to_parent, to_leaf) = last_name(&to);
        let to_parent = to_parent.to_string();
        let Some(dir2) = self.walk(pid, &to_parent, Some(Kind::Dir), true)? else {
            return Ok(());
        };
        // The kernel looks the new name up before it links or renames.
        let target_kind = self.kind_known(&to);
        self.walk(pid, &to, target_kind, true)?;
        let q2 = quote(to_leaf.as_bytes());
        if c.name.starts_with("link") {
            let keys = format!("fh {fh:08x} fh2 {dir2:08x} name2 {q2}");
            self.request(0xf, "link", &keys, Reply::Ok(Vec::new()))?;
            self.handles.insert(to.clone(), fh);
            return Ok(());
        }
        let (from_parent, from_leaf) = last_name(&from);
        let Some(&dir) = self.handles.get(from_parent) else {
            return Ok(());
        };
        let keys = format!(
            "fh {dir:08x} name {} fh2 {dir2:08x} name2 {q2}",
            quote(from_leaf.as_bytes())
        );
        self.request(0xe, "rename", &keys, Reply::Ok(Vec::new()))?;
        // Every name at or below `from` moves under `to`.
        self.forget(&to);
        let below = format!("{from}/");
        let moved: Vec<(String, u64)> = self
            .handles
            .iter()
            .filter(|(p, _)| *p == &from || p.starts_with(&below))
            .map(|(p, h)| (format!("{to}{}", &p[from.len()..]), *h))
            .collect();
        self.forget(&from);
        self.handles.extend(moved);
        self.proc(pid).looked.insert(to);
        Ok(())
    }
}
