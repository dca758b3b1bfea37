//! The Rust client of the MDS protocol: pipelined requests over a small
//! pool of connections, with counters of mandatory and non-mandatory
//! requests (the measure of what prefetching saves in Hendricks et al.,
//! "Improving small file performance in object-based storage", 2006).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::auth::Identity;
use crate::connection::{ConnConfig, ConnError};
use crate::pool::Pool;
use bytes::Bytes;
use proto::mds::{
    Creds, DirEntry, Entry, MDS_ID, MdsError, MdsReply, MdsRequest, MdsResponse, Op, ROOT_INO,
};
use proto::msg::decode;

/// Why a call failed: transport or the MDS's answer.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    /// Could not reach the MDS or the connection broke.
    #[error("MDS unreachable: {0}")]
    Transport(#[from] ConnError),
    /// The MDS answered with an error.
    #[error(transparent)]
    Mds(#[from] MdsError),
}

impl CallError {
    /// The errno to hand to POSIX callers.
    pub fn errno(&self) -> i32 {
        match self {
            CallError::Transport(_) => 5,
            CallError::Mds(e) => e.errno.raw(),
        }
    }
}

/// A connection pool to one MDS.
pub struct MdsClient {
    pool: Pool,
    identity: Identity,
    /// Identity sent with every request.
    pub creds: Creds,
    /// Entries to ask prefetched with lookups and opens.
    pub prefetch: u32,
    /// Mandatory requests sent.
    pub mandatory: AtomicU64,
    /// Non-mandatory requests sent.
    pub non_mandatory: AtomicU64,
    /// This client's session (random, never 0), sent with every request:
    /// the MDS counts the files it opens and creates as held by it.
    pub session: u64,
}

impl MdsClient {
    /// A client of the MDS at `addr` in `cluster_id` that authenticates
    /// as `identity` (connects on first use).
    pub fn new(addr: &str, cluster_id: &str, identity: Identity, connections: usize) -> MdsClient {
        Self::with_encryption(addr, cluster_id, identity, connections, false)
    }

    /// Like [`MdsClient::new`], asking for encrypted frames when `encrypt`.
    pub fn with_encryption(
        addr: &str,
        cluster_id: &str,
        identity: Identity,
        connections: usize,
        encrypt: bool,
    ) -> MdsClient {
        let mut cfg = ConnConfig::new(cluster_id, MDS_ID, std::sync::Arc::new(identity.clone()));
        cfg.name = "tessera-client".into();
        cfg.connections = connections.max(1);
        cfg.encrypt = encrypt;
        MdsClient {
            pool: Pool::new(addr, cfg),
            identity,
            creds: Creds::root(),
            prefetch: 32,
            mandatory: AtomicU64::new(0),
            non_mandatory: AtomicU64::new(0),
            session: u64::from_le_bytes(crate::auth::random_bytes()).max(1),
        }
    }

    /// The identity this client authenticates as (its key unwraps the
    /// session keys of the tickets the MDS hands it).
    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    /// Whether this client's connections to the MDS are encrypted (asked,
    /// or required by the MDS); connects if needed.
    pub async fn encrypted(&self) -> bool {
        match self.pool.conn(0).await {
            Ok(c) => c.encrypted,
            Err(_) => false,
        }
    }

    /// Sends `op` with this client's credentials.
    pub async fn call(&self, op: Op) -> Result<MdsReply, CallError> {
        self.call_as(self.creds.clone(), op).await
    }

    /// Sends `op` as `creds`.
    pub async fn call_as(&self, creds: Creds, op: Op) -> Result<MdsReply, CallError> {
        if op.mandatory() {
            self.mandatory.fetch_add(1, Ordering::Relaxed);
        } else if op.is_access() {
            self.non_mandatory.fetch_add(1, Ordering::Relaxed);
        }
        let req = MdsRequest {
            creds,
            session: self.session,
            prefetch: self.prefetch,
            op,
        };
        let c = self.pool.conn(self.pool.pick()).await?;
        let f = c.call_raw(req.op.opcode(), &req, Bytes::new()).await?;
        let resp: MdsResponse =
            decode(&f.header).map_err(|e| ConnError::Protocol(e.to_string()))?;
        Ok(resp.result?)
    }

    /// Resolves an absolute path to its entry.
    pub async fn resolve(&self, path: &str) -> Result<Entry, CallError> {
        match self.call(Op::Resolve { path: path.into() }).await? {
            MdsReply::Path(mut v) => v.pop().ok_or_else(|| {
                CallError::Transport(ConnError::Protocol("empty path reply".into()))
            }),
            other => Err(unexpected(&other)),
        }
    }

    /// Every entry of directory `ino`, in name order, page by page.
    pub async fn readdir_all(&self, ino: u64, plus: bool) -> Result<Vec<DirEntry>, CallError> {
        let mut out: Vec<DirEntry> = Vec::new();
        loop {
            let after = out.last().map(|e| e.name.clone());
            match self
                .call(Op::Readdir {
                    ino,
                    after,
                    max: 1000,
                    plus,
                })
                .await?
            {
                MdsReply::Dir { entries, more } => {
                    out.extend(entries);
                    if !more {
                        return Ok(out);
                    }
                }
                other => return Err(unexpected(&other)),
            }
        }
    }

    /// The root's inode number.
    pub fn root(&self) -> u64 {
        ROOT_INO
    }
}

/// The error for a reply of the wrong kind.
pub fn unexpected(r: &MdsReply) -> CallError {
    CallError::Transport(ConnError::Protocol(format!("unexpected reply {r:?}")))
}
