//! Early answers and their replay: what a client keeps of an operation
//! answered before it was durable, and sends again to a restarted MDS.

use serde::{Deserialize, Serialize};

use crate::mds::{Creds, MdsReply, Op};

/// Bytes of an early answer's seal.
pub const SEAL_LEN: usize = 16;

/// Most operations a client keeps acknowledged but not yet durable (it
/// asks for a [`Op::Sync`] before it would hold more), and so most one
/// [`Op::Replay`] carries.
pub const REPLAY_MAX: usize = 4096;

/// Most bytes of operations a client keeps for replay (estimated from
/// their names and targets; one REPLAY stays well inside a frame header).
pub const REPLAY_MAX_BYTES: usize = 512 << 10;

/// Roughly how many bytes `op`, sent as `creds`, adds to a REPLAY (the
/// credentials travel with every operation: a user in many groups makes
/// each one larger).
pub fn replay_footprint(creds: &Creds, op: &Op) -> usize {
    16 + 5 * creds.groups.len() + op_footprint(op)
}

/// The operation's part of [`replay_footprint`].
fn op_footprint(op: &Op) -> usize {
    let names = match op {
        Op::Create { name, .. } | Op::Mknod { name, .. } | Op::Link { name, .. } => name.len(),
        Op::Unlink { name, .. } | Op::Rmdir { name, .. } | Op::Mkdir { name, .. } => name.len(),
        Op::Symlink { name, target, .. } => name.len() + target.len(),
        Op::Rename { name, new_name, .. } => name.len() + new_name.len(),
        Op::DirOps { ops, .. } => {
            return ops.iter().map(|o| o.name().len() + 96).sum::<usize>() + 32;
        }
        _ => 0,
    };
    names + 96
}

/// One early-acknowledged operation, as a client replays it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayOp {
    /// Its place in the MDS's order of early-acknowledged operations.
    pub transno: u64,
    /// The caller identity it was sent with.
    pub creds: Creds,
    /// The operation (one that [`Op::may_answer_early`]); never itself a
    /// REPLAY (refused while decoding).
    #[serde(deserialize_with = "crate::nesting::once")]
    pub op: Op,
    /// The inode its answer named: a replayed create, symlink or mknod
    /// makes that inode number again (it is free unless something else
    /// took it, and then the replay is reported as failed).
    pub ino: Option<u64>,
    /// The seal its early answer carried ([`EarlyReply::seal`]).
    pub seal: [u8; SEAL_LEN],
}

/// An answer given before the operation is durable: the client keeps the
/// operation until `durable` reaches `transno`, and replays it if the MDS
/// restarts first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EarlyReply {
    /// The operation's place in the MDS's order.
    pub transno: u64,
    /// Every operation up to this transno is durable.
    pub durable: u64,
    /// The MDS instance (random per start).
    pub instance: u64,
    /// The MDS's MAC over the session, the transno, the credentials, the
    /// operation and the inode it named, with a key only the MDS holds
    /// (kept across restarts): a replay must carry it, so no session can
    /// replay an operation it was not answered, or at a place in the
    /// order it was not given.
    pub seal: [u8; SEAL_LEN],
    /// The answer itself; never itself an early answer (refused while
    /// decoding).
    #[serde(deserialize_with = "crate::nesting::once")]
    pub reply: MdsReply,
}
