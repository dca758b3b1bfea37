//! What the kernel's requests carry, in the client's terms: the caller's
//! credentials (supplementary groups read from /proc and cached), path
//! components and attribute names, times, the permission an `access`
//! asks; and the one way errors and empty answers go back.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use client::FsError;
use fuser::{AccessFlags, Errno, ReplyEmpty, Request, TimeOrNow};
use proto::mds::{Attr, Creds, SetTime};

use crate::attr::ns;

/// A process's supplementary groups and when they were read.
type GroupsAt = (Instant, Arc<Vec<u32>>);

/// How long a process's supplementary groups are reused before /proc is read again.
const GROUPS_TTL: Duration = Duration::from_secs(1);

/// A client error as the kernel takes it (logged at debug).
pub fn errno(e: FsError) -> Errno {
    tracing::debug!("fuse: {e}");
    Errno::from_i32(e.raw())
}

/// Answers an operation that returns nothing.
pub fn done(reply: ReplyEmpty, r: Result<(), Errno>) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

/// A path component as the namespace takes it: longer than `NAME_MAX`
/// bytes is ENAMETOOLONG for every operation (lookup included), as on a
/// local file system; bytes that are not UTF-8 are carried as escapes
/// (`posix::names::name_from_bytes`).
pub fn name(n: &OsStr) -> Result<std::borrow::Cow<'_, str>, Errno> {
    if n.len() > proto::mds::NAME_MAX {
        return Err(Errno::from_i32(libc::ENAMETOOLONG));
    }
    escaped(n)
}

/// A LISTXATTR answer: each name followed by a NUL.
pub fn xattr_list(names: &[String]) -> Vec<u8> {
    let mut buf = Vec::new();
    for n in names {
        buf.extend_from_slice(n.as_bytes());
        buf.push(0);
    }
    buf
}

/// A symlink's target as the namespace keeps it (escaped as a name is).
pub fn target(t: &std::path::Path) -> Result<std::borrow::Cow<'_, str>, Errno> {
    escaped(t.as_os_str())
}

/// Bytes as the namespace keeps them (`posix::names::name_from_bytes`).
fn escaped(n: &OsStr) -> Result<std::borrow::Cow<'_, str>, Errno> {
    use std::os::unix::ffi::OsStrExt;
    posix::name_from_bytes(n.as_bytes()).map_err(|_| Errno::from_i32(libc::EINVAL))
}

/// The bytes a name or target kept by the namespace stands for.
pub fn os_name(n: &str) -> std::borrow::Cow<'_, OsStr> {
    use std::os::unix::ffi::OsStrExt;
    match posix::name_to_bytes(n) {
        std::borrow::Cow::Borrowed(b) => std::borrow::Cow::Borrowed(OsStr::from_bytes(b)),
        std::borrow::Cow::Owned(v) => {
            std::borrow::Cow::Owned(std::os::unix::ffi::OsStringExt::from_vec(v))
        }
    }
}

/// An extended attribute's name (its length is checked by the namespace:
/// ERANGE, as Linux answers).
pub fn xattr_name(n: &OsStr) -> Result<&str, Errno> {
    n.to_str().ok_or(Errno::from_i32(libc::EINVAL))
}

/// A time a setattr gives.
pub fn set_time(t: TimeOrNow) -> SetTime {
    match t {
        TimeOrNow::Now => SetTime::Now,
        TimeOrNow::SpecificTime(s) => SetTime::At(ns(s)),
    }
}

/// Whether `c` may access `a` as `mask` asks (`access(2)`), by the shared
/// POSIX rules.
pub fn may(a: &Attr, c: &Creds, mask: AccessFlags) -> bool {
    use posix::perm::{R, W, X};
    let want = [
        (AccessFlags::R_OK, R),
        (AccessFlags::W_OK, W),
        (AccessFlags::X_OK, X),
    ]
    .into_iter()
    .filter(|(f, _)| mask.contains(*f))
    .fold(0, |w, (_, b)| w | b);
    posix::perm::allowed(a, c, want)
}

/// The caller's supplementary groups (from /proc; empty if it has exited).
fn supplementary_groups(pid: u32) -> Vec<u32> {
    let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return Vec::new();
    };
    s.lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .map(|g| {
            g.split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Supplementary groups per process, read from /proc at most once a
/// second per process.
#[derive(Default)]
pub struct Groups {
    by_pid: Mutex<HashMap<u32, GroupsAt>>,
}

impl Groups {
    /// The caller's credentials: uid and gid from the request, supplementary
    /// groups from /proc (root needs none), cached per process for a second
    /// so a busy non-root process does not read /proc on every request.
    pub fn creds(&self, req: &Request) -> Creds {
        let (uid, gid) = (req.uid(), req.gid());
        if uid == 0 {
            return Creds {
                uid,
                gid,
                groups: Vec::new(),
            };
        }
        let pid = req.pid();
        let cached = {
            let cache = self.by_pid.lock().unwrap_or_else(|e| e.into_inner());
            cache
                .get(&pid)
                .filter(|(at, _)| at.elapsed() < GROUPS_TTL)
                .map(|(_, g)| g.clone())
        };
        let groups = match cached {
            Some(g) => g,
            None => {
                let g = Arc::new(supplementary_groups(pid));
                let mut cache = self.by_pid.lock().unwrap_or_else(|e| e.into_inner());
                if cache.len() > 4096 {
                    cache.retain(|_, (at, _)| at.elapsed() < GROUPS_TTL);
                }
                cache.insert(pid, (Instant::now(), g.clone()));
                g
            }
        };
        Creds {
            uid,
            gid,
            groups: groups.to_vec(),
        }
    }
}
