//! What both trace formats parse into: metadata events over handles.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

/// Why a trace line was skipped (the report shows the first few).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LineError {
    /// Fewer fields than the format has; the usage it expects.
    #[error("expected: {0}")]
    Fields(&'static str),
    /// A time that is not a number.
    #[error("time {0:?} is not a number")]
    Time(String),
    /// A time that is infinite or NaN.
    #[error("time is not finite")]
    TimeNotFinite,
    /// A `%XX` / `\XX` escape cut short.
    #[error("truncated {0}XX escape")]
    TruncatedEscape(char),
    /// An escape that is not two hex digits.
    #[error("bad escape {0}")]
    BadEscape(String),
    /// A name that is not UTF-8 once unescaped.
    #[error("name is not UTF-8")]
    NotUtf8,
    /// A path that does not start at the root.
    #[error("path {0:?} is not absolute")]
    NotAbsolute(String),
    /// A path with an empty, `.` or `..` component.
    #[error("path {0:?} has an empty, . or .. component")]
    BadComponent(String),
    /// An operation with the wrong number of paths.
    #[error("{op} takes {paths} path(s)")]
    PathCount {
        /// The operation.
        op: String,
        /// Paths it takes.
        paths: usize,
    },
    /// An operation the format does not have.
    #[error("unknown operation {0:?}")]
    UnknownOp(String),
    /// A name that is not in quotes.
    #[error("name {0} is not quoted")]
    NotQuoted(String),
    /// A transport that is neither UDP nor TCP.
    #[error("transport {0:?} is not U or T")]
    Transport(String),
    /// A field that should be hex (xid, proc, status, file handle).
    #[error("{what} {got:?} is not hex")]
    NotHex {
        /// The field.
        what: &'static str,
        /// Its text.
        got: String,
    },
    /// A direction other than call or reply.
    #[error("direction {0:?} is not C3/R3")]
    Direction(String),
    /// A key given without a value.
    #[error("key {0} has no value")]
    NoValue(String),
    /// A key the operation needs is missing.
    #[error("no {0}")]
    Missing(String),
    /// An operation on the root that the root cannot take.
    #[error("cannot {0} /")]
    OnRoot(&'static str),
    /// A reply without a status field.
    #[error("reply without a status")]
    NoStatus,
    /// A reply whose procedure differs from its call's.
    #[error("reply proc {reply:x} does not match its call's {call:x}")]
    ProcMismatch {
        /// The reply's procedure.
        reply: u32,
        /// The call's procedure.
        call: u32,
    },
}

/// Decodes `<marker>XX` hex escapes (`%20` in the path format, `\20` in
/// nfsdump) into bytes; a truncated or non-hex escape is an error.
pub(crate) fn unescape(s: &str, marker: u8) -> Result<Vec<u8>, LineError> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == marker {
            let m = char::from(marker);
            let hex = s.get(i + 1..i + 3).ok_or(LineError::TruncatedEscape(m))?;
            out.push(
                u8::from_str_radix(hex, 16)
                    .map_err(|_| LineError::BadEscape(format!("{m}{hex}")))?,
            );
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Ok(out)
}

/// An interned file handle (an NFS file handle, or a path's current node).
pub type Handle = u32;

/// What a handle names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Kind {
    /// A regular file (or anything that is not a directory or symlink).
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Symlink,
}

/// One metadata operation, as the server saw it succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Name `name` in directory `dir` resolved to `child` (`None`: it did
    /// not exist — a negative lookup).
    Lookup {
        /// Directory searched.
        dir: Handle,
        /// Name looked up.
        name: String,
        /// What it named.
        child: Option<(Handle, Kind)>,
    },
    /// Attributes of a handle were needed (getattr, access, readlink).
    Use {
        /// The handle.
        node: Handle,
        /// Its kind, if the reply said.
        kind: Option<Kind>,
    },
    /// A new name `name` in `dir` for the new `child` (create, mkdir, symlink).
    Create {
        /// Parent directory.
        dir: Handle,
        /// New name.
        name: String,
        /// The new node.
        child: Handle,
        /// Its kind.
        kind: Kind,
    },
    /// Name `name` removed from `dir` (remove, rmdir).
    Remove {
        /// Parent directory.
        dir: Handle,
        /// Name removed.
        name: String,
    },
    /// A rename.
    Rename {
        /// Source directory.
        from_dir: Handle,
        /// Source name.
        from: String,
        /// Target directory.
        to_dir: Handle,
        /// Target name.
        to: String,
    },
    /// A directory listing with the entries the reply carried.
    Readdir {
        /// The directory.
        dir: Handle,
        /// (name, handle and kind if the reply carried them).
        entries: Vec<(String, Option<(Handle, Kind)>)>,
    },
    /// The file's data read or written (read, write, commit): needs the
    /// file's layout and capability, which a listing does not carry.
    Data {
        /// The handle.
        node: Handle,
    },
    /// Attributes changed (setattr, a truncate).
    Modify {
        /// The handle.
        node: Handle,
    },
}

/// An operation by one client.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Client number (dense, in order of first appearance).
    pub client: u32,
    /// What it did.
    pub op: Op,
    /// When, in the trace's seconds (only differences matter).
    pub time: f64,
}

/// How parsing went; nothing malformed stops it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParseStats {
    /// Lines read.
    pub lines: u64,
    /// Events produced.
    pub events: u64,
    /// Lines that could not be parsed (skipped).
    pub malformed: u64,
    /// Replies whose call was not in the trace (skipped).
    pub orphan_replies: u64,
    /// Calls that never got a reply (skipped).
    pub unanswered_calls: u64,
    /// Failed operations (error replies other than a negative lookup; skipped).
    pub failed: u64,
    /// Well-formed records of operations the simulator ignores.
    pub ignored: u64,
    /// The first few malformed lines, as `line N: reason`.
    pub examples: Vec<String>,
}

impl ParseStats {
    /// Counts a malformed line, keeping the first few reasons.
    pub fn malformed(&mut self, line: u64, why: &LineError) {
        self.malformed += 1;
        if self.examples.len() < 5 {
            self.examples.push(format!("line {line}: {why}"));
        }
    }
}

/// A parsed trace: events plus the handle and client tables.
#[derive(Debug, Default)]
pub struct Trace {
    /// Events in trace order.
    pub events: Vec<Event>,
    /// Handle names (file handles in hex, or the first path of a node).
    pub handles: Vec<String>,
    /// Client names (host addresses), by client number.
    pub clients: Vec<String>,
    /// The handle of the root, if the format names one.
    pub root: Option<Handle>,
    /// Parse statistics.
    pub stats: ParseStats,
    /// The time of the record being parsed (stamped on each event pushed).
    pub clock: f64,
    handle_ids: HashMap<String, Handle>,
    client_ids: HashMap<String, u32>,
}

/// Appends `name` to `list` under the next number (replacing what `index`
/// held for it) and returns the number.
fn append(list: &mut Vec<String>, index: &mut HashMap<String, u32>, name: &str) -> u32 {
    let n = list.len() as u32;
    list.push(name.to_string());
    index.insert(name.to_string(), n);
    n
}

impl Trace {
    /// The handle for `name`, interned.
    pub fn handle(&mut self, name: &str) -> Handle {
        match self.handle_ids.get(name) {
            Some(&h) => h,
            None => append(&mut self.handles, &mut self.handle_ids, name),
        }
    }

    /// A handle that no name maps to yet (a new node behind a reused path).
    pub fn fresh_handle(&mut self, name: &str) -> Handle {
        append(&mut self.handles, &mut self.handle_ids, name)
    }

    /// The client number for `name`, interned.
    pub fn client(&mut self, name: &str) -> u32 {
        match self.client_ids.get(name) {
            Some(&c) => c,
            None => append(&mut self.clients, &mut self.client_ids, name),
        }
    }

    /// Appends an event.
    pub fn push(&mut self, client: u32, op: Op) {
        self.stats.events += 1;
        self.events.push(Event {
            client,
            op,
            time: self.clock,
        });
    }
}
