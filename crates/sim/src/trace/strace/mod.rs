//! `strace` output to nfsdump text: what an NFS client of the traced tree
//! would have asked its server, so `sim trace` can replay a real program
//! run on this machine (or through a Tessera mount) the way it replays
//! the Harvard traces.
//!
//! Record with the flags in [`STRACE_FLAGS`] and the calls in
//! [`SYSCALLS`] (`tessera sim record` does both). Each call on a path
//! under the traced root becomes, in order:
//! - one LOOKUP per path component the process has not looked up yet
//!   (positive with a handle, or `ENOENT` at the first missing one);
//! - then the call's own request: GETATTR for a stat, ACCESS, READLINK,
//!   CREATE / MKDIR / SYMLINK (after the LOOKUP of the new name that
//!   fails, as the kernel asks before it creates), REMOVE / RMDIR, RENAME,
//!   LINK, SETATTR for chmod, chown, utimes, truncate and an `O_TRUNC`
//!   open of an existing file, one READ (or WRITE, for a write-only open)
//!   per open of an existing file standing for its I/O, COMMIT for
//!   fsync, and one READDIRPLUS per
//!   directory read to its end (entries with handles and types).
//!
//! Handles are numbers the converter gives each name the first time the
//! run shows it exists; a rename moves them, a remove drops them. Paths
//! outside the root (libraries, `/proc`) are not part of the traced file
//! system and give nothing. Everything runs in one client (one mount).

mod names;
mod syntax;

use std::collections::{HashMap, HashSet};
use std::io::Write;

pub use syntax::{Lines, Syscall};
use syntax::{dirents, fd_path, string};

use super::event::Kind;

/// The system calls to record (`strace -e trace=…`).
pub const SYSCALLS: &str = "openat,open,creat,stat,lstat,newfstatat,statx,fstat,access,faccessat,faccessat2,readlink,readlinkat,getdents64,mkdir,mkdirat,unlink,unlinkat,rmdir,rename,renameat,renameat2,symlink,symlinkat,link,linkat,chmod,fchmod,fchmodat,chown,fchown,fchownat,lchown,utimensat,truncate,ftruncate,fsync,fdatasync,close,chdir,fchdir,execve,clone,clone3,fork,vfork";

/// The strace flags the converter needs: follow children, print
/// times, print descriptors' paths, print directory entries, whole strings.
pub const STRACE_FLAGS: [&str; 7] = ["-f", "-q", "-ttt", "-y", "-v", "-s", "65535"];

/// `strace` set up to record `command` as the converter needs it, into
/// the log at `log`.
pub fn strace_command(log: &std::path::Path, command: &[&str]) -> std::process::Command {
    let mut c = std::process::Command::new("strace");
    c.args(STRACE_FLAGS)
        .arg("-e")
        .arg(format!("trace={SYSCALLS}"))
        .arg("-o")
        .arg(log)
        .arg("--")
        .args(command);
    c
}

/// Converts a whole strace log read from `log` into nfsdump text written
/// to `out` (see [`Converter::new`] for `root` and `cwd`).
pub fn convert_log<W: Write>(
    log: impl std::io::BufRead,
    root: &str,
    cwd: &str,
    out: W,
) -> std::io::Result<(W, ConvertStats)> {
    let mut c = Converter::new(root, cwd, out);
    for line in log.split(b'\n') {
        c.line(&String::from_utf8_lossy(&line?))?;
    }
    let stats = c.stats.clone();
    Ok((c.finish()?, stats))
}

/// What the conversion did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConvertStats {
    /// Input lines.
    pub lines: u64,
    /// System calls parsed.
    pub calls: u64,
    /// NFS requests written (each a call and its reply).
    pub requests: u64,
    /// Calls on paths outside the traced root (nothing written).
    pub outside: u64,
}

/// A directory being read: its path and the entries (name, kind) so far.
type Reading = (String, Vec<(Vec<u8>, Kind)>);

#[derive(Default, Clone)]
struct Proc {
    cwd: String,
    /// Whether the process changed directory itself (a fork's late
    /// report must not undo it).
    cwd_set: bool,
    looked: HashSet<String>,
    /// Directories being read, by descriptor: (path, entries so far).
    reading: HashMap<i64, Reading>,
}

/// How one NFS request ends.
enum Reply {
    Ok(Vec<(String, String)>),
    Err(u32),
}

const ENOENT: u32 = 2;

/// A streaming converter: feed strace lines, read nfsdump text from `out`.
pub struct Converter<W: Write> {
    root: String,
    start_cwd: String,
    out: W,
    lines: Lines,
    procs: HashMap<u32, Proc>,
    handles: HashMap<String, u64>,
    kinds: HashMap<u64, Kind>,
    next: u64,
    xid: u32,
    /// The time of the call being converted.
    now: f64,
    /// Statistics so far.
    pub stats: ConvertStats,
}

/// Resolves `p` against `base` lexically (`.` and `..` collapse; a `..`
/// above `/` stays at `/`). The root is "".
pub fn normalize(base: &str, p: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    let full = if p.starts_with('/') {
        p.to_string()
    } else {
        format!("{base}/{p}")
    };
    for c in full.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    parts.iter().map(|c| format!("/{c}")).collect()
}

fn kind_of_mode(s: &str) -> Option<Kind> {
    if s.contains("S_IFDIR") {
        Some(Kind::Dir)
    } else if s.contains("S_IFLNK") {
        Some(Kind::Symlink)
    } else if s.contains("S_IFREG") {
        Some(Kind::File)
    } else {
        None
    }
}

/// The kind a stat call's result buffer shows (`{st_mode=S_IFDIR|…`).
fn stat_kind(c: &Syscall) -> Option<Kind> {
    c.args
        .iter()
        .filter(|a| a.starts_with('{'))
        .find_map(|a| kind_of_mode(a))
}

fn ftype(k: Kind) -> &'static str {
    match k {
        Kind::File => "1",
        Kind::Dir => "2",
        Kind::Symlink => "5",
    }
}

/// A name as nfsdump quotes it: bytes outside printable ASCII, space,
/// quote and backslash as `\XX`.
fn quote(name: &[u8]) -> String {
    let mut s = String::from("\"");
    for &b in name {
        if b.is_ascii_graphic() && b != b'"' && b != b'\\' {
            s.push(char::from(b));
        } else {
            s.push_str(&format!("\\{b:02x}"));
        }
    }
    s.push('"');
    s
}

fn last_name(path: &str) -> (&str, &str) {
    path.rsplit_once('/').unwrap_or(("", path))
}

impl<W: Write> Converter<W> {
    /// Converts calls on paths under `root`; processes start in `cwd`
    /// (where the traced command ran). Both absolute.
    pub fn new(root: &str, cwd: &str, out: W) -> Converter<W> {
        let root = normalize("", root);
        let mut c = Converter {
            root: root.clone(),
            start_cwd: normalize("", cwd),
            out,
            lines: Lines::default(),
            procs: HashMap::new(),
            handles: HashMap::new(),
            kinds: HashMap::new(),
            next: 1,
            xid: 0,
            now: 0.0,
            stats: ConvertStats::default(),
        };
        c.handle(&root, Kind::Dir);
        c
    }

    /// Feeds one line of strace output.
    pub fn line(&mut self, line: &str) -> std::io::Result<()> {
        self.stats.lines += 1;
        if let Some(pid) = syntax::exited(line) {
            // Its directory reads end; its state goes (pids are reused).
            let mut fds: Vec<i64> = self.proc(pid).reading.keys().copied().collect();
            fds.sort_unstable();
            for fd in fds {
                self.listed(pid, fd)?;
            }
            self.procs.remove(&pid);
            return Ok(());
        }
        if let Some(call) = self.lines.line(line) {
            self.stats.calls += 1;
            self.now = call.time;
            self.call(&call)?;
        }
        Ok(())
    }

    /// Ends the conversion (directories still being read are listed) and
    /// gives the output back.
    pub fn finish(mut self) -> std::io::Result<W> {
        let mut open: Vec<(u32, i64)> = self
            .procs
            .iter()
            .flat_map(|(p, st)| st.reading.keys().map(move |fd| (*p, *fd)))
            .collect();
        open.sort_unstable();
        for (pid, fd) in open {
            self.listed(pid, fd)?;
        }
        Ok(self.out)
    }

    fn under_root(&self, p: &str) -> bool {
        p == self.root || p.starts_with(&format!("{}/", self.root))
    }

    fn handle(&mut self, path: &str, kind: Kind) -> u64 {
        let h = match self.handles.get(path) {
            Some(h) => *h,
            None => {
                let h = self.next;
                self.next += 1;
                self.handles.insert(path.to_string(), h);
                h
            }
        };
        self.kinds.insert(h, kind);
        h
    }

    fn proc(&mut self, pid: u32) -> &mut Proc {
        let cwd = self.start_cwd.clone();
        self.procs.entry(pid).or_insert_with(|| Proc {
            cwd,
            ..Proc::default()
        })
    }

    /// The absolute path a (dirfd, path) pair names.
    fn resolve(&mut self, pid: u32, dirfd: Option<&str>, path: &[u8]) -> String {
        let p = String::from_utf8_lossy(path).into_owned();
        let base = match dirfd.and_then(fd_path) {
            Some((_, d)) if !p.starts_with('/') => d,
            _ => self.proc(pid).cwd.clone(),
        };
        normalize(&base, &p)
    }

    fn request(&mut self, proc: u32, name: &str, keys: &str, reply: Reply) -> std::io::Result<()> {
        self.xid = self.xid.wrapping_add(1);
        // Without timestamps, a microsecond per request keeps the order.
        let t = if self.now > 0.0 {
            self.now
        } else {
            f64::from(self.xid) / 1e6
        };
        let (x, p) = (self.xid, proc);
        writeln!(
            self.out,
            "{t:.6} 31.0300 30.0801 U C3 {x:x} {p:x} {name} {keys} con = 82 len = 100"
        )?;
        let (status, rkeys) = match reply {
            Reply::Ok(k) => ("OK".to_string(), k),
            Reply::Err(e) => (format!("{e:x}"), Vec::new()),
        };
        let rk: String = rkeys.iter().map(|(k, v)| format!(" {k} {v}")).collect();
        writeln!(
            self.out,
            "{t:.6} 30.0801 31.0300 U R3 {x:x} {p:x} {name} {status}{rk} status=0 pl = 0 con = 82 len = 100"
        )?;
        self.stats.requests += 1;
        Ok(())
    }

    /// Looks up every component of `path` this process has not looked up.
    /// `last` says what the final component is: `Some(kind)` if it exists,
    /// `None` if the call showed it does not. Intermediate components
    /// exist if the converter knows them or the call succeeded (`ok`).
    /// Returns the final component's handle, if it exists.
    fn walk(
        &mut self,
        pid: u32,
        path: &str,
        last: Option<Kind>,
        ok: bool,
    ) -> std::io::Result<Option<u64>> {
        if path == self.root {
            return Ok(Some(self.handle(path, Kind::Dir)));
        }
        if !self.under_root(path) {
            return Ok(None);
        }
        let rel = path[self.root.len()..].to_string();
        let comps: Vec<&str> = rel.split('/').filter(|c| !c.is_empty()).collect();
        let mut cur = self.root.clone();
        for (i, comp) in comps.iter().enumerate() {
            let is_last = i + 1 == comps.len();
            let child = format!("{cur}/{comp}");
            let known = self.handles.get(&child).copied();
            let exists = if is_last {
                last.is_some()
            } else {
                known.is_some() || ok
            };
            let looked = self.proc(pid).looked.contains(&child);
            if !(looked && known.is_some() && exists) {
                let dir = self.handle(&cur, Kind::Dir);
                let keys = format!("fh {dir:08x} name {}", quote(comp.as_bytes()));
                if !exists {
                    self.request(3, "lookup", &keys, Reply::Err(ENOENT))?;
                    self.forget(&child);
                    return Ok(None);
                }
                let kind = if is_last {
                    last.unwrap_or(Kind::File)
                } else {
                    Kind::Dir
                };
                let h = self.handle(&child, kind);
                let reply = vec![
                    ("fh".into(), format!("{h:08x}")),
                    ("ftype".into(), ftype(kind).into()),
                ];
                self.request(3, "lookup", &keys, Reply::Ok(reply))?;
                self.proc(pid).looked.insert(child.clone());
            } else if is_last && let Some(k) = last {
                self.handle(&child, k);
            }
            if !exists {
                return Ok(None);
            }
            cur = child;
        }
        Ok(self.handles.get(path).copied())
    }

    /// Drops `path` and everything below it (removed, or renamed away).
    fn forget(&mut self, path: &str) {
        // The root itself stays (its handle is the mount's); only a
        // directory has names below it, so only then is everything scanned.
        let dir = path == self.root || self.kind_known(path) == Some(Kind::Dir);
        if path != self.root {
            self.handles.remove(path);
        }
        for st in self.procs.values_mut() {
            st.looked.remove(path);
        }
        if dir {
            let below = format!("{path}/");
            self.handles.retain(|p, _| !p.starts_with(&below));
            for st in self.procs.values_mut() {
                st.looked.retain(|p| !p.starts_with(&below));
            }
        }
    }

    fn kind_known(&self, path: &str) -> Option<Kind> {
        self.handles
            .get(path)
            .and_then(|h| self.kinds.get(h))
            .copied()
    }

    /// A request on the handle of an existing path (walked first).
    fn on_path(
        &mut self,
        pid: u32,
        path: &str,
        kind: Option<Kind>,
        proc: u32,
        name: &str,
    ) -> std::io::Result<()> {
        let kind = kind.or_else(|| self.kind_known(path)).unwrap_or(Kind::File);
        if let Some(h) = self.walk(pid, path, Some(kind), true)? {
            let mut reply = Vec::new();
            if proc == 1 {
                reply.push(("ftype".to_string(), ftype(kind).to_string()));
            }
            self.request(proc, name, &format!("fh {h:08x}"), Reply::Ok(reply))?;
        }
        Ok(())
    }

    /// A call that failed: the lookups up to the missing component.
    fn failed(&mut self, pid: u32, path: &str, err: &str) -> std::io::Result<()> {
        if err == "ENOENT" {
            // The first component not known to exist is the missing one.
            let known = self.handles.contains_key(path);
            if known {
                self.forget(path);
            }
            self.walk(pid, path, None, false)?;
        }
        Ok(())
    }

    /// A new name (create, mkdir, symlink) at `path`.
    fn create(
        &mut self,
        pid: u32,
        path: &str,
        kind: Kind,
        proc: u32,
        name: &str,
    ) -> std::io::Result<()> {
        let (parent, leaf) = last_name(path);
        let parent = parent.to_string();
        if path == self.root || !self.under_root(&parent) {
            self.handle(path, kind);
            return Ok(());
        }
        let Some(dir) = self.walk(pid, &parent, Some(Kind::Dir), true)? else {
            return Ok(());
        };
        self.forget(path);
        let keys = format!("fh {dir:08x} name {}", quote(leaf.as_bytes()));
        self.request(3, "lookup", &keys, Reply::Err(ENOENT))?;
        let h = self.handle(path, kind);
        self.proc(pid).looked.insert(path.to_string());
        let reply = vec![
            ("fh".into(), format!("{h:08x}")),
            ("ftype".into(), ftype(kind).into()),
        ];
        self.request(proc, name, &keys, Reply::Ok(reply))
    }

    /// Lists what a process read of the directory on descriptor `fd`.
    fn listed(&mut self, pid: u32, fd: i64) -> std::io::Result<()> {
        let Some((dir, entries)) = self.proc(pid).reading.remove(&fd) else {
            return Ok(());
        };
        let Some(&dh) = self.handles.get(&dir) else {
            return Ok(());
        };
        let mut keys = Vec::new();
        for (i, (name, kind)) in entries.iter().enumerate() {
            let child = format!("{dir}/{}", String::from_utf8_lossy(name));
            let h = self.handle(&child, *kind);
            keys.push((format!("name-{i}"), quote(name)));
            keys.push((format!("fh-{i}"), format!("{h:08x}")));
            keys.push((format!("ftype-{i}"), ftype(*kind).to_string()));
        }
        self.request(0x11, "readdirp", &format!("fh {dh:08x}"), Reply::Ok(keys))
    }

    fn call(&mut self, c: &Syscall) -> std::io::Result<()> {
        let pid = c.pid;
        let a = &c.args;
        let arg = |i: usize| a.get(i).map(String::as_str).unwrap_or("");
        let s = |i: usize| a.get(i).and_then(|x| string(x));
        // (dirfd, path) of the calls that take one, by argument position.
        let at = |dfd: Option<usize>, p: usize| -> Option<(Option<String>, Vec<u8>)> {
            Some((dfd.map(|d| arg(d).to_string()), s(p)?))
        };
        let target = match c.name.as_str() {
            "open" | "creat" | "stat" | "lstat" | "access" | "readlink" | "mkdir" | "unlink"
            | "rmdir" | "chmod" | "chown" | "lchown" | "truncate" | "chdir" | "execve" => {
                at(None, 0)
            }
            "openat" | "newfstatat" | "statx" | "faccessat" | "faccessat2" | "readlinkat"
            | "mkdirat" | "unlinkat" | "fchmodat" | "fchownat" => at(Some(0), 1),
            "utimensat" if s(1).is_some() => at(Some(0), 1),
            _ => None,
        };
        let path = match &target {
            Some((dfd, p)) if !p.is_empty() => Some(self.resolve(pid, dfd.as_deref(), p)),
            _ => None,
        };
        // Calls on a descriptor (or an empty path with AT_EMPTY_PATH).
        let fd_target = match c.name.as_str() {
            "fstat" | "fchmod" | "fchown" | "ftruncate" | "fsync" | "fdatasync" | "getdents64"
            | "close" | "fchdir" | "utimensat" | "newfstatat" | "statx" => {
                fd_path(arg(0)).map(|(n, p)| (n, normalize("", &p)))
            }
            _ => None,
        };
        match c.name.as_str() {
            "clone" | "clone3" | "fork" | "vfork" => {
                if let Ok(child) = c.result
                    && child > 0
                {
                    // The child may have run (and been seen) before this
                    // result was printed: keep what it did itself.
                    let cwd = self.proc(pid).cwd.clone();
                    let ch = self.proc(child as u32);
                    if !ch.cwd_set {
                        ch.cwd = cwd;
                    }
                }
                return Ok(());
            }
            "close" => {
                if let Some((fd, _)) = fd_target {
                    self.listed(pid, fd)?;
                }
                return Ok(());
            }
            "chdir" | "fchdir" if c.result.is_ok() => {
                let to = path.clone().or(fd_target.clone().map(|(_, p)| p));
                if let Some(to) = to {
                    self.proc(pid).cwd = to.clone();
                    self.proc(pid).cwd_set = true;
                    if self.under_root(&to) {
                        self.walk(pid, &to, Some(Kind::Dir), true)?;
                    }
                }
                return Ok(());
            }
            "execve" if c.result.is_ok() => self.proc(pid).looked.clear(),
            "rename" | "renameat" | "renameat2" | "link" | "linkat" | "symlink" | "symlinkat" => {
                return self.two_names(c);
            }
            _ => {}
        }
        match (&path, &fd_target) {
            (Some(p), _) if self.under_root(p) => {
                let p = p.clone();
                self.on_named(c, &p)
            }
            (None, Some((fd, p))) if self.under_root(p) => {
                let (fd, p) = (*fd, p.clone());
                self.on_fd(c, fd, &p)
            }
            _ => {
                self.stats.outside += 1;
                Ok(())
            }
        }
    }

    /// A call naming a path under the root.
    fn on_named(&mut self, c: &Syscall, path: &str) -> std::io::Result<()> {
        let pid = c.pid;
        let arg = |i: usize| c.args.get(i).map(String::as_str).unwrap_or("");
        let err = match &c.result {
            Ok(_) => None,
            Err(e) => Some(e.as_str()),
        };
        let mode_kind = stat_kind(c);
        match c.name.as_str() {
            "open" | "openat" | "creat" => {
                // A descriptor number reused: what was read on it is done.
                if let Ok(fd) = c.result {
                    self.listed(pid, fd)?;
                }
                let flags = if c.name == "creat" {
                    "O_CREAT|O_WRONLY|O_TRUNC"
                } else if c.name == "open" {
                    arg(1)
                } else {
                    arg(2)
                };
                let dir = flags.contains("O_DIRECTORY");
                let known = self.handles.contains_key(path);
                match err {
                    None if flags.contains("O_CREAT") && (flags.contains("O_EXCL") || !known) => {
                        self.create(pid, path, Kind::File, 8, "create")
                    }
                    None => {
                        let kind = if dir { Some(Kind::Dir) } else { None };
                        let kind = kind.or_else(|| self.kind_known(path)).unwrap_or(Kind::File);
                        let h = self.walk(pid, path, Some(kind), true)?;
                        let Some(h) = h else {
                            return Ok(());
                        };
                        if flags.contains("O_TRUNC") && known {
                            self.request(
                                2,
                                "setattr",
                                &format!("fh {h:08x}"),
                                Reply::Ok(Vec::new()),
                            )?;
                        }
                        // Opening a file's data needs its layout: one READ
                        // or WRITE per open stands for the I/O that follows.
                        if kind == Kind::File && !flags.contains("O_PATH") {
                            let (p, n) = if flags.contains("O_WRONLY") {
                                (7, "write")
                            } else {
                                (6, "read")
                            };
                            self.request(p, n, &format!("fh {h:08x}"), Reply::Ok(Vec::new()))?;
                        }
                        Ok(())
                    }
                    Some("EEXIST") => {
                        let kind = self.kind_known(path).unwrap_or(Kind::File);
                        self.walk(pid, path, Some(kind), true).map(|_| ())
                    }
                    Some(e) => self.failed(pid, path, e),
                }
            }
            "stat" | "lstat" | "newfstatat" | "statx" => match err {
                None => self.on_path(pid, path, mode_kind, 1, "getattr"),
                Some(e) => self.failed(pid, path, e),
            },
            "access" | "faccessat" | "faccessat2" => match err {
                None => self.on_path(pid, path, None, 4, "access"),
                Some(e) => self.failed(pid, path, e),
            },
            "readlink" | "readlinkat" => match err {
                None => self.on_path(pid, path, Some(Kind::Symlink), 5, "readlink"),
                Some(e) => self.failed(pid, path, e),
            },
            "execve" => match err {
                None => self.on_path(pid, path, Some(Kind::File), 4, "access"),
                Some(e) => self.failed(pid, path, e),
            },
            "mkdir" | "mkdirat" => match err {
                None => self.create(pid, path, Kind::Dir, 9, "mkdir"),
                Some("EEXIST") => self.walk(pid, path, Some(Kind::Dir), true).map(|_| ()),
                Some(e) => self.failed(pid, path, e),
            },
            "unlink" | "unlinkat" | "rmdir" => match err {
                None => {
                    let rmdir = c.name == "rmdir" || arg(2).contains("AT_REMOVEDIR");
                    self.remove(pid, path, rmdir)
                }
                Some(e) => self.failed(pid, path, e),
            },
            "chmod" | "chown" | "lchown" | "truncate" | "fchmodat" | "fchownat" | "utimensat" => {
                match err {
                    None => self.on_path(pid, path, None, 2, "setattr"),
                    Some(e) => self.failed(pid, path, e),
                }
            }
            _ => Ok(()),
        }
    }

    /// A call on a descriptor whose path is under the root.
    fn on_fd(&mut self, c: &Syscall, fd: i64, path: &str) -> std::io::Result<()> {
        let pid = c.pid;
        if c.result.is_err() {
            return Ok(());
        }
        let mode_kind = stat_kind(c);
        match c.name.as_str() {
            "fstat" | "newfstatat" | "statx" => {
                let kind = mode_kind
                    .or_else(|| self.kind_known(path))
                    .unwrap_or(Kind::File);
                let h = self.handle(path, kind);
                let reply = vec![("ftype".to_string(), ftype(kind).to_string())];
                self.request(1, "getattr", &format!("fh {h:08x}"), Reply::Ok(reply))
            }
            "fchmod" | "fchown" | "ftruncate" | "utimensat" => {
                let kind = self.kind_known(path).unwrap_or(Kind::File);
                let h = self.handle(path, kind);
                self.request(2, "setattr", &format!("fh {h:08x}"), Reply::Ok(Vec::new()))
            }
            "fsync" | "fdatasync" => {
                let kind = self.kind_known(path).unwrap_or(Kind::File);
                let h = self.handle(path, kind);
                self.request(
                    0x15,
                    "commit",
                    &format!("fh {h:08x}"),
                    Reply::Ok(Vec::new()),
                )
            }
            "getdents64" => {
                let n = c.result.clone().unwrap_or(0);
                if n == 0 {
                    return self.listed(pid, fd);
                }
                let entries: Vec<(Vec<u8>, Kind)> =
                    dirents(c.args.get(1).map(String::as_str).unwrap_or(""))
                        .into_iter()
                        .filter(|(n, _)| n != b"." && n != b"..")
                        .map(|(n, t)| {
                            let k = match t.as_str() {
                                "DT_DIR" => Kind::Dir,
                                "DT_LNK" => Kind::Symlink,
                                _ => Kind::File,
                            };
                            (n, k)
                        })
                        .collect();
                self.handle(path, Kind::Dir);
                // A different directory on a reused descriptor: the old read is done.
                if self
                    .proc(pid)
                    .reading
                    .get(&fd)
                    .is_some_and(|(p, _)| p != path)
                {
                    self.listed(pid, fd)?;
                }
                let reading = &mut self.proc(pid).reading;
                reading
                    .entry(fd)
                    .or_insert_with(|| (path.to_string(), Vec::new()))
                    .1
                    .extend(entries);
                Ok(())
            }
            _ => Ok(()),
        }
    }
}
