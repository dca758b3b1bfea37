//! The names this mount handed the kernel lately, by directory, so a lock
//! can have the kernel forget those beside the locked file. The kernel
//! keeps a name it was given for the entry timeout without asking again;
//! a program that checks a neighbour under a lock (sqlite's hot-journal
//! check: `stat` then `open` of `DB-journal` once it holds a lock on
//! `DB`) must not find one another mount removed meanwhile — it ended
//! inserts from two mounts with "unable to open database file". Only
//! names handed out within the entry timeout are kept (older ones the
//! kernel asks about again anyway), at most [`NAMES_MAX`].

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fuser::INodeNo;

use crate::locks::Notifier;

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
}

impl KernelNames {
    /// Names the kernel keeps for `ttl`.
    pub fn new(ttl: Duration) -> KernelNames {
        KernelNames {
            ttl,
            by_dir: Mutex::new(Dirs::default()),
        }
    }

    /// The kernel was given `name` in directory `parent`.
    pub fn handed(&self, parent: INodeNo, name: &OsStr) {
        if self.ttl.is_zero() {
            return;
        }
        let mut d = self.by_dir.lock().unwrap_or_else(|e| e.into_inner());
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

/// Has the kernel forget the names it was given lately in `parent`
/// (blocking: call it off the request threads).
pub fn drop_names(n: &Notifier, names: &Arc<KernelNames>, parent: INodeNo) {
    let Some(n) = n.get() else { return };
    for name in names.take(parent) {
        if let Err(e) = n.inval_entry(parent, &name) {
            tracing::debug!(parent = parent.0, error = %e, "the kernel did not forget a name");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_kept_by_directory_within_the_timeout_and_bounded() {
        let k = KernelNames::new(Duration::from_secs(60));
        k.handed(INodeNo(2), OsStr::new("db-journal"));
        k.handed(INodeNo(2), OsStr::new("db"));
        k.handed(INodeNo(2), OsStr::new("db"));
        k.handed(INodeNo(3), OsStr::new("other"));
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
            k.handed(INodeNo(4), OsStr::new(&format!("n{i}")));
        }
        assert!(k.by_dir.lock().unwrap().count <= NAMES_MAX);
        // Names past the timeout are not handed back.
        let short = KernelNames::new(Duration::from_millis(1));
        short.handed(INodeNo(2), OsStr::new("old"));
        std::thread::sleep(Duration::from_millis(5));
        assert!(short.take(INodeNo(2)).is_empty());
    }
}
