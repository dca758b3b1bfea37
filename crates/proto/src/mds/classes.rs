//! What each MDS operation is: Hendricks et al.'s mandatory or
//! non-mandatory class, whether it may be answered early, its name in
//! metrics, and the other questions the server and client ask of an `Op`.

use super::Op;

impl Op {
    /// Whether Hendricks et al. counts it as mandatory (it changes the namespace or
    /// the length, so it must reach the MDS at once; no prefetch avoids it).
    pub fn mandatory(&self) -> bool {
        self.may_answer_early()
            || matches!(
                self,
                Op::Mkdir { .. }
                    | Op::SetAttr { .. }
                    | Op::SetXattr { .. }
                    | Op::RemoveXattr { .. }
                    | Op::CommitSize { .. }
                    | Op::ExtendLayout { .. }
                    | Op::SetLayout { .. }
            )
    }

    /// Whether it is a metadata access at all (counted as mandatory or
    /// non-mandatory). Not: a session's report of its open files, its
    /// locks, a sync or replay; a directory lease asked for or given back
    /// (coordination this system adds, which the paper's clients do not
    /// have: the changes made under it are counted, as DIR OPS); and a
    /// request about the cluster rather than a file (a ticket for an OSD
    /// connection, the OSD map, who the caller is, the cluster's status,
    /// an OSD's report, administration).
    pub fn is_access(&self) -> bool {
        !matches!(
            self,
            Op::Holding { .. }
                | Op::Sync
                | Op::Replay { .. }
                | Op::DirLease { .. }
                | Op::DirRelease { .. }
                | Op::Lock { .. }
                | Op::TestLock { .. }
                | Op::LocksHeld { .. }
                | Op::Ticket { .. }
                | Op::Whoami
                | Op::GetMap { .. }
                | Op::Status
                | Op::Report(_)
                | Op::Chains
                | Op::AuthAdd(_)
                | Op::AuthList
                | Op::AuthRemove { .. }
                | Op::AuthRotate { .. }
        )
    }

    /// Whether the MDS may answer it before it is durable (when the
    /// request asks for [`MdsRequest::early`]): changes whose only effects
    /// are in the MDS's own tables — namespace changes, a writer's length
    /// commit (a close), and a chmod, chown or utimens that sets no length
    /// (a truncate cuts objects on the OSDs first, so it stays durable).
    /// Not mkdir: a directory's inode number also fixes its children's
    /// numbering, so a replay could not make it again whatever was lost
    /// before it.
    pub fn may_answer_early(&self) -> bool {
        match self {
            Op::SetAttr { set, .. } => set.size.is_none(),
            _ => matches!(
                self,
                Op::Create { .. }
                    | Op::Symlink { .. }
                    | Op::Mknod { .. }
                    | Op::Link { .. }
                    | Op::Unlink { .. }
                    | Op::Rmdir { .. }
                    | Op::Rename { .. }
                    | Op::DirOps { .. }
                    | Op::CommitSize { .. }
            ),
        }
    }

    /// A short name for logs and metrics.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Lookup { .. } => "lookup",
            Op::GetAttr { .. } => "getattr",
            Op::SetAttr { .. } => "setattr",
            Op::Create { .. } => "create",
            Op::Mkdir { .. } => "mkdir",
            Op::Symlink { .. } => "symlink",
            Op::Mknod { .. } => "mknod",
            Op::Link { .. } => "link",
            Op::Unlink { .. } => "unlink",
            Op::Rmdir { .. } => "rmdir",
            Op::Rename { .. } => "rename",
            Op::Readlink { .. } => "readlink",
            Op::Readdir { .. } => "readdir",
            Op::Statfs => "statfs",
            Op::GetXattr { .. } => "getxattr",
            Op::SetXattr { .. } => "setxattr",
            Op::ListXattr { .. } => "listxattr",
            Op::RemoveXattr { .. } => "removexattr",
            Op::Open { .. } => "open",
            Op::Holding { .. } => "holding",
            Op::Lock { .. } => "lock",
            Op::TestLock { .. } => "testlock",
            Op::LocksHeld { .. } => "locksheld",
            Op::CommitSize { .. } => "commitsize",
            Op::ExtendLayout { .. } => "extendlayout",
            Op::GetLayout { .. } => "getlayout",
            Op::SetLayout { .. } => "setlayout",
            Op::GetMap { .. } => "getmap",
            Op::Report(_) => "report",
            Op::Status => "status",
            Op::Resolve { .. } => "resolve",
            Op::NamespaceGrant => "namespacegrant",
            Op::NamespaceRoot { .. } => "namespaceroot",
            Op::MarkStale { .. } => "markstale",
            Op::SetOsdOut { .. } => "setosdout",
            Op::Scrub { .. } => "scrub",
            Op::Ticket { .. } => "ticket",
            Op::Whoami => "whoami",
            Op::AuthAdd(_) => "authadd",
            Op::AuthList => "authlist",
            Op::AuthRemove { .. } => "authremove",
            Op::AuthRotate { .. } => "authrotate",
            Op::Stat { .. } => "stat",
            Op::ReaddirPrefetch { .. } => "readdir",
            Op::Sync => "sync",
            Op::Replay { .. } => "replay",
            Op::Chains => "chains",
            Op::ChainDrop { .. } => "chaindrop",
            Op::ChainFilled { .. } => "chainfilled",
            Op::ChainRestarted { .. } => "chainrestarted",
            Op::DirLease { .. } => "dirlease",
            Op::DirOps { .. } => "dirops",
            Op::DirRelease { .. } => "dirrelease",
        }
    }

    /// Opcode in the frame prefix (for traces; the header says the rest).
    pub fn opcode(&self) -> u16 {
        0x100
    }
}
