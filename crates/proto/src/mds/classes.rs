//! What each MDS operation is: Hendricks et al.'s mandatory or
//! non-mandatory class, whether it may be answered early, its name in
//! metrics, and the other questions the server and client ask of an `Op`.

use super::Op;

impl Op {
    /// Whether it is mandatory in Hendricks et al.'s sense for a system
    /// whose metadata server manages file lengths — their prototype's rule
    /// (§4.1), which is this system's: it changes the namespace, a length
    /// or attributes, so it must reach the MDS at once and no prefetch
    /// avoids it. (Their trace simulator, §4.2, lets clients manage
    /// lengths and counts length updates as non-mandatory; `sim trace`
    /// follows that rule: `docs/SIMULATORS.md`.)
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
    /// non-mandatory): [`OpClass::Metadata`].
    pub fn is_access(&self) -> bool {
        self.class() == OpClass::Metadata
    }

    /// What kind of request it is. Every operation is named here, so a new
    /// one must be placed.
    pub fn class(&self) -> OpClass {
        match self {
            Op::Lookup { .. }
            | Op::GetAttr { .. }
            | Op::SetAttr { .. }
            | Op::Create { .. }
            | Op::Mkdir { .. }
            | Op::Symlink { .. }
            | Op::Mknod { .. }
            | Op::Link { .. }
            | Op::Unlink { .. }
            | Op::Rmdir { .. }
            | Op::Rename { .. }
            | Op::Readlink { .. }
            | Op::Readdir { .. }
            | Op::ReaddirPrefetch { .. }
            | Op::Stat { .. }
            | Op::Resolve { .. }
            | Op::GetXattr { .. }
            | Op::SetXattr { .. }
            | Op::ListXattr { .. }
            | Op::RemoveXattr { .. }
            | Op::Open { .. }
            | Op::CommitSize { .. }
            | Op::ExtendLayout { .. }
            | Op::GetLayout { .. }
            | Op::SetLayout { .. }
            | Op::DirOps { .. } => OpClass::Metadata,
            Op::Holding { .. }
            | Op::Sync
            | Op::Replay { .. }
            | Op::DirLease { .. }
            | Op::DirRelease { .. }
            | Op::Lock { .. }
            | Op::TestLock { .. }
            | Op::LocksHeld { .. }
            | Op::MarkStale { .. } => OpClass::Session,
            Op::Statfs
            | Op::Ticket { .. }
            | Op::Whoami
            | Op::GetMap { .. }
            | Op::Status
            | Op::Report(_)
            | Op::NamespaceGrant
            | Op::NamespaceRoot { .. }
            | Op::SetOsdOut { .. }
            | Op::AdoptGroup { .. }
            | Op::GroupAdd { .. }
            | Op::GroupRemove { .. }
            | Op::Scrub { .. }
            | Op::Chains
            | Op::ChainDrop { .. }
            | Op::ChainFilled { .. }
            | Op::ChainRestarted { .. }
            | Op::AuthAdd(_)
            | Op::AuthList
            | Op::AuthRemove { .. }
            | Op::AuthRotate { .. } => OpClass::Cluster,
        }
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

    /// Whether it only reads: sending it again changes nothing, so a
    /// client whose connection broke before the answer (a leader that
    /// died or stepped down) may send it again to whoever leads next.
    /// `Open` is here: it hands out capabilities and notes the session as
    /// a holder, which a second time leaves as the first did.
    pub fn is_read_only(&self) -> bool {
        matches!(
            self,
            Op::Lookup { .. }
                | Op::GetAttr { .. }
                | Op::Open { .. }
                | Op::Readlink { .. }
                | Op::Readdir { .. }
                | Op::ReaddirPrefetch { .. }
                | Op::Stat { .. }
                | Op::Resolve { .. }
                | Op::GetXattr { .. }
                | Op::ListXattr { .. }
                | Op::GetLayout { .. }
                | Op::TestLock { .. }
                | Op::Statfs
                | Op::Ticket { .. }
                | Op::Whoami
                | Op::GetMap { .. }
                | Op::Status
                | Op::Chains
                | Op::AuthList
        )
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
            Op::AdoptGroup { .. } => "adoptgroup",
            Op::GroupAdd { .. } => "groupadd",
            Op::GroupRemove { .. } => "groupremove",
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

/// What kind of request an [`Op`] is ([`Op::class`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpClass {
    /// An access to the metadata of files and directories: what Hendricks
    /// et al. count, as mandatory or non-mandatory ([`Op::mandatory`]).
    Metadata,
    /// A session's own bookkeeping with the MDS: its open files, locks,
    /// syncs and replays, directory leases asked for or given back
    /// (coordination the paper's clients do not have; the changes made
    /// under a lease are counted, as DIR OPS), a copy marked stale.
    Session,
    /// About the cluster rather than a file: tickets for OSD connections,
    /// the OSD map, who the caller is, status and space, an OSD's report,
    /// the namespace-on-OSDs grants, out and in, scrub, chains,
    /// principals. An MDS whose namespace lives on the OSDs answers only
    /// these (and locks).
    Cluster,
}

#[cfg(test)]
mod tests {
    use super::super::Op;

    /// The classes the live counters and `/metrics` use (the agreement
    /// with `sim trace` depends on them).
    #[test]
    fn each_request_is_in_its_class() {
        let lookup = Op::Lookup {
            parent: 1,
            name: "a".into(),
        };
        assert!(lookup.is_access() && !lookup.mandatory());
        let create = Op::Create {
            parent: 1,
            name: "a".into(),
            mode: 0o644,
            exclusive: true,
        };
        assert!(create.is_access() && create.mandatory());
        let ops = Op::DirOps {
            dir: 1,
            ops: Vec::new(),
        };
        assert!(ops.is_access() && ops.mandatory());
        // Coordination and the cluster: no metadata access at all.
        for op in [
            Op::DirLease { dir: 1 },
            Op::DirRelease { dir: 1 },
            Op::Whoami,
            Op::Status,
            Op::Statfs,
            Op::Sync,
            Op::Chains,
        ] {
            assert!(!op.is_access() && !op.mandatory(), "{}", op.name());
        }
        // Sent again after a lost answer only if it reads.
        assert!(lookup.is_read_only() && Op::Status.is_read_only());
        assert!(!create.is_read_only() && !Op::Sync.is_read_only());
        assert!(!Op::Holding { held: Vec::new() }.is_read_only());
    }
}
