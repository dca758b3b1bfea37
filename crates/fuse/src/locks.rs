//! The kernel's lock requests in the client's terms. With
//! `FUSE_POSIX_LOCKS` and `FUSE_FLOCK_LOCKS` the kernel hands every
//! `fcntl` and `flock` lock to the file system instead of keeping it in
//! this machine; the client has the MDS arbitrate them between mounts.
//! The kernel ends a range "to the end of the file" at `OFFSET_MAX`
//! (`i64::MAX`); the wire says `u64::MAX`.

use std::sync::Arc;

use fuser::{Errno, LockOwner};
use proto::locks::{LockKind, LockSpec};

use crate::attr::Inodes;
use crate::kernel_names::KernelNames;

/// The kernel's lock request as a [`LockSpec`] (EINVAL for an unknown type
/// or a range ending before it starts).
pub fn spec(owner: LockOwner, start: u64, end: u64, typ: i32, pid: u32) -> Result<LockSpec, Errno> {
    let kind = match typ {
        libc::F_RDLCK => LockKind::Read,
        libc::F_WRLCK => LockKind::Write,
        libc::F_UNLCK => LockKind::Unlock,
        _ => return Err(Errno::from_i32(libc::EINVAL)),
    };
    let end = if end >= i64::MAX as u64 {
        u64::MAX
    } else {
        end
    };
    if start > end {
        return Err(Errno::from_i32(libc::EINVAL));
    }
    Ok(LockSpec {
        owner: owner.0,
        start,
        end,
        kind,
        pid,
    })
}

/// A range's end as the kernel says it.
pub fn kernel_end(end: u64) -> u64 {
    end.min(i64::MAX as u64)
}

/// The mounted session's notifier, shared by the file system (which
/// exists before the session does) and the mount that sets it.
pub type Notifier = std::sync::Arc<std::sync::OnceLock<fuser::Notifier>>;

/// Has the kernel drop its cached attributes and pages of inode `ino`
/// (as the kernel numbers it).
pub fn drop_kernel_cache(n: &Notifier, ino: fuser::INodeNo) {
    if let Some(n) = n.get()
        && let Err(e) = n.inval_inode(ino, 0, 0)
    {
        tracing::debug!(ino = ino.0, error = %e, "the kernel did not drop its cache of a locked file");
    }
}

/// Has the kernel drop its cached attributes of inode `ino` (as the
/// kernel numbers it), not its pages: safe inside a request that holds a
/// page locked (a read).
pub fn drop_kernel_attrs(n: &Notifier, ino: fuser::INodeNo) {
    if let Some(n) = n.get()
        && let Err(e) = n.inval_inode(ino, -1, 0)
    {
        tracing::debug!(ino = ino.0, error = %e, "the kernel did not drop its cached attributes");
    }
}

/// Has the kernel forget the names it was given lately in `parent`
/// ([`KernelNames`]; blocking: call it off the request threads).
fn drop_names(n: &Notifier, names: &KernelNames, parent: fuser::INodeNo) {
    let Some(n) = n.get() else { return };
    for name in names.take(parent) {
        if let Err(e) = n.inval_entry(parent, &name) {
            tracing::debug!(parent = parent.0, error = %e, "the kernel did not forget a name");
        }
    }
}

/// Whether process `pid`, waiting in a lock request, has gone or has a
/// signal to take (what would interrupt the wait on a local file system:
/// `flock -w`, `alarm`, Ctrl-C, a kill). fuser does not pass the kernel's
/// interrupts on, so the wait looks for itself.
pub fn interrupted(pid: u32) -> bool {
    let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return true;
    };
    let field = |name: &str| {
        s.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .unwrap_or(0)
    };
    let pending = field("SigPnd:") | field("ShdPnd:");
    pending & !field("SigBlk:") != 0
}

/// Runs one lock request of the kernel's (`setlk`): the client asks the
/// MDS (waiting, if `l` says so, until `waiter` has a signal), and after a
/// granted lock the kernel's cache of inode `ino` and the names it holds
/// beside it are dropped — off the request threads, since dropping them
/// waits for pages whose reads those threads serve.
pub async fn set(
    client: client::Client,
    (notifier, names, inos): (Notifier, Arc<KernelNames>, Inodes),
    ino: fuser::INodeNo,
    c: proto::mds::Creds,
    fh: u64,
    l: (LockSpec, bool),
    waiter: u32,
) -> Result<(), Errno> {
    let (l, wait) = l;
    let gave_up = move || interrupted(waiter);
    let r = client
        .setlk(&c, fh, l, wait, &gave_up)
        .await
        .map_err(crate::request::errno);
    if r.is_ok() && l.kind != LockKind::Unlock {
        // And the names beside it ([`crate::kernel_names`]): where the
        // kernel was given the file's name, else where the client last
        // saw it. The client forgot its own names there when the lock was
        // granted, unless its cache no longer knew the file.
        let seen = client.parent_of(inos.from_fuse(ino));
        let dir = names
            .parent_of(ino)
            .or_else(|| seen.map(|d| inos.to_fuse(d)));
        if let Some(d) = dir
            && seen != Some(inos.from_fuse(d))
        {
            client.forget_names_in(inos.from_fuse(d), inos.from_fuse(ino));
        }
        let _ = tokio::task::spawn_blocking(move || {
            drop_kernel_cache(&notifier, ino);
            if let Some(dir) = dir {
                drop_names(&notifier, &names, dir);
            }
        })
        .await;
    }
    r
}

/// A lock's type as `struct flock` says it.
pub fn typ(kind: LockKind) -> i32 {
    match kind {
        LockKind::Read => libc::F_RDLCK,
        LockKind::Write => libc::F_WRLCK,
        LockKind::Unlock => libc::F_UNLCK,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_ranges_map_both_ways() {
        let l = spec(LockOwner(7), 10, i64::MAX as u64, libc::F_WRLCK, 42).unwrap();
        assert_eq!(
            (l.owner, l.start, l.end, l.kind),
            (7, 10, u64::MAX, LockKind::Write)
        );
        assert_eq!(kernel_end(l.end), i64::MAX as u64);
        assert!(spec(LockOwner(1), 5, 4, libc::F_RDLCK, 1).is_err());
        assert!(spec(LockOwner(1), 0, 4, 99, 1).is_err());
        assert_eq!(typ(LockKind::Unlock), libc::F_UNLCK);
    }

    #[test]
    fn a_live_process_without_signals_is_not_interrupted() {
        assert!(!interrupted(std::process::id()));
        assert!(interrupted(u32::MAX), "a process that is gone");
    }
}
