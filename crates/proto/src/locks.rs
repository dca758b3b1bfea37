//! The lock messages' parts: a byte-range lock as a client asks for it
//! (POSIX `fcntl` locks, and `flock` as a whole-file lock of its open
//! file), and the bounds the MDS keeps on them.

use serde::{Deserialize, Serialize};

/// What a lock request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LockKind {
    /// A shared (read) lock.
    Read,
    /// An exclusive (write) lock.
    Write,
    /// Removes the owner's locks in the range.
    Unlock,
}

/// One lock: what an owner asks for, or holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockSpec {
    /// The lock owner within the client's session (the kernel's owner
    /// id: a process's file table for `fcntl`, an open file for `flock`).
    pub owner: u64,
    /// First byte.
    pub start: u64,
    /// Last byte, inclusive (`u64::MAX`: to the end of the file).
    pub end: u64,
    /// Lock, or unlock.
    pub kind: LockKind,
    /// The locking process's id (what `F_GETLK` reports to others).
    pub pid: u32,
}

/// Most locks (ranges) one principal's sessions may hold together; more is
/// ENOLCK.
pub const LOCKS_PER_PRINCIPAL: usize = 65_536;
/// Most locks (ranges) one principal may hold on one file: no principal
/// fills a file's bound alone.
pub const LOCKS_PER_PRINCIPAL_FILE: usize = 1024;
/// Most locks (ranges) one file may carry, all owners together; more is
/// ENOLCK. Bounds the work of every lock request on the file.
pub const LOCKS_PER_FILE: usize = 4096;
/// Most locks one session reports at once in a LOCKS HELD.
pub const LOCKS_REPORT_MAX: usize = 16_384;
