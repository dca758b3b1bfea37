//! The names this mount handed the kernel lately, by directory, so a lock
//! can have the kernel forget those beside the locked file. The kernel
//! keeps a name it was given for the entry timeout without asking again;
//! a program that checks a neighbour under a lock (sqlite's hot-journal
//! check: `stat` then `open` of `DB-journal` once it holds a lock on
//! `DB`) must not find one another mount removed meanwhile — it ended
//! inserts from two mounts with "unable to open database file". Only
//! names of files that are not directories are kept (forgetting a
//! directory's name would unhash it under a process's working directory
//! and detach mounts on it), and only those handed out within the entry
//! timeout (older ones the kernel asks about again anyway), at most
//! [`NAMES_MAX`]. The directory each file was last handed out in is
//! kept too (bounded the same way), so a lock finds its neighbours even
//! when the client's own cache no longer holds the file.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use fuser::INodeNo;

/// Names kept at most; past it the oldest go first, then all (a lock
/// then leaves the kernel's names as they are, until their timeout).
pub const NAMES_MAX: usize = 100_000;

/// Names handed to the kernel, by directory (as the kernel numbers them).
pub struct KernelNames {
    ttl: Duration,
    by_dir: Mutex<Dirs>,
}

#[derive(Default)]
struct Dirs {
    names: HashMap<u64, HashMap<OsString, Instant>>,
    count: usize,
    /// The directory each file was last handed out in.
    parents: HashMap<u64, u64>,
}

impl KernelNames {
    /// Names the kernel keeps for `ttl`.
    pub fn new(ttl: Duration) -> KernelNames {
        KernelNames {
            ttl,
            by_dir: Mutex::new(Dirs::default()),
        }
    }

    /// The kernel was given `name` in directory `parent`, naming file
    /// `child` (directories are not noted).
    pub fn handed(&self, parent: INodeNo, name: &OsStr, child: &fuser::FileAttr) {
        if self.ttl.is_zero() || child.kind == fuser::FileType::Directory {
            return;
        }
        let mut d = self.by_dir.lock().unwrap_or_else(|e| e.into_inner());
        if d.parents.len() >= NAMES_MAX {
            d.parents.clear();
        }
        d.parents.insert(child.ino.0, parent.0);
        if d.count >= NAMES_MAX {
            let ttl = self.ttl;
            d.names
                .values_mut()
                .for_each(|m| m.retain(|_, t| t.elapsed() < ttl));
            d.names.retain(|_, m| !m.is_empty());
            d.count = d.names.values().map(HashMap::len).sum();
            if d.count >= NAMES_MAX {
                *d = Dirs::default();
            }
        }
        let fresh = d
            .names
            .entry(parent.0)
            .or_default()
            .insert(name.to_os_string(), Instant::now())
            .is_none();
        if fresh {
            d.count += 1;
        }
    }

    /// The directory file `ino` was last handed out in, if noted.
    pub fn parent_of(&self, ino: INodeNo) -> Option<INodeNo> {
        let d = self.by_dir.lock().unwrap_or_else(|e| e.into_inner());
        d.parents.get(&ino.0).map(|p| INodeNo(*p))
    }

    /// Takes the names handed out in `parent` within the timeout (the
    /// others are forgotten too).
    pub fn take(&self, parent: INodeNo) -> Vec<OsString> {
        let mut d = self.by_dir.lock().unwrap_or_else(|e| e.into_inner());
        let Some(m) = d.names.remove(&parent.0) else {
            return Vec::new();
        };
        d.count = d.count.saturating_sub(m.len());
        m.into_iter()
            .filter(|(_, t)| t.elapsed() < self.ttl)
            .map(|(n, _)| n)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(ino: u64) -> fuser::FileAttr {
        let t = std::time::SystemTime::UNIX_EPOCH;
        fuser::FileAttr {
            ino: INodeNo(ino),
            size: 0,
            blocks: 0,
            atime: t,
            mtime: t,
            ctime: t,
            crtime: t,
            kind: fuser::FileType::RegularFile,
            perm: 0o644,
            nlink: 1,
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }

    #[test]
    fn names_are_kept_by_directory_within_the_timeout_and_bounded() {
        let k = KernelNames::new(Duration::from_secs(60));
        k.handed(INodeNo(2), OsStr::new("db-journal"), &file(11));
        k.handed(INodeNo(2), OsStr::new("db"), &file(10));
        k.handed(INodeNo(2), OsStr::new("db"), &file(10));
        k.handed(INodeNo(3), OsStr::new("other"), &file(12));
        // A directory's name is never noted.
        let mut sub = file(13);
        sub.kind = fuser::FileType::Directory;
        k.handed(INodeNo(2), OsStr::new("sub"), &sub);
        assert_eq!(k.parent_of(INodeNo(10)), Some(INodeNo(2)));
        assert_eq!(k.parent_of(INodeNo(13)), None);
        let mut got = k.take(INodeNo(2));
        got.sort();
        assert_eq!(
            got,
            vec![OsString::from("db"), OsString::from("db-journal")]
        );
        // Taken once; the other directory's stay.
        assert!(k.take(INodeNo(2)).is_empty());
        assert_eq!(k.take(INodeNo(3)), vec![OsString::from("other")]);
        // Past the bound, the count never exceeds it.
        for i in 0..NAMES_MAX + 10 {
            k.handed(
                INodeNo(4),
                OsStr::new(&format!("n{i}")),
                &file(100 + i as u64),
            );
        }
        let d = k.by_dir.lock().unwrap();
        assert!(d.count <= NAMES_MAX && d.parents.len() <= NAMES_MAX);
        drop(d);
        // Names past the timeout are not handed back.
        let short = KernelNames::new(Duration::from_millis(1));
        short.handed(INodeNo(2), OsStr::new("old"), &file(5));
        std::thread::sleep(Duration::from_millis(5));
        assert!(short.take(INodeNo(2)).is_empty());
    }
}
