//! The Rust client of the OSD protocol: a [`Pool`] of connections to one
//! OSD that retries a request once, on a fresh connection, only when the
//! command is idempotent.

use bytes::Bytes;
use proto::Capability;
use proto::msg::{AttrKey, Command, Reply, Request};

use crate::connection::{ConnConfig, ConnError};
use crate::pool::Pool;

/// A successful reply: what the command returned, requested attributes, data.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The command's result.
    pub reply: Reply,
    /// Attributes from the get list.
    pub attrs: Vec<(AttrKey, Vec<u8>)>,
    /// Data (READ).
    pub data: Bytes,
}

/// How long a command to a replica group keeps being retried while its
/// chain changes (a head that died is replaced once its lease runs out).
pub const CHAIN_RETRY: std::time::Duration = std::time::Duration::from_secs(30);

/// Whether a failed command to a replica group is worth retrying at the
/// group's (maybe new) head, with fresh credentials: the connection
/// failed, the OSD is not (or not yet, or no longer) the head, or the
/// capability was made for another head.
pub fn chain_retryable(e: &ConnError) -> bool {
    use proto::ErrorCode as C;
    match e {
        ConnError::Remote(w) => matches!(
            w.code,
            C::NotHead
                | C::NotReady
                | C::StaleChain
                | C::Busy
                | C::CapExpired
                | C::CapForged
                | C::CapKeyVersion
        ),
        ConnError::Connect { .. } | ConnError::Lost(_) | ConnError::Timeout(_) => true,
        _ => false,
    }
}

/// A pool of connections to one OSD.
pub struct OsdClient {
    pool: Pool,
    partition: Option<u64>,
}

impl OsdClient {
    /// A pool (connections are made on first use).
    pub fn new(addr: &str, cfg: ConnConfig) -> OsdClient {
        OsdClient {
            pool: Pool::new(addr, cfg),
            partition: None,
        }
    }

    /// A pool whose every command is sent in partition `pid` (whatever
    /// partition it names): how a replica group's head is reached by code
    /// that addresses objects in the data partition.
    pub fn in_partition(addr: &str, cfg: ConnConfig, pid: u64) -> OsdClient {
        OsdClient {
            pool: Pool::new(addr, cfg),
            partition: Some(pid),
        }
    }

    /// Connects every pooled connection now (fails fast on a bad address or handshake).
    pub async fn connect(addr: &str, cfg: ConnConfig) -> Result<OsdClient, ConnError> {
        let c = OsdClient::new(addr, cfg);
        for i in 0..c.pool.size() {
            c.pool.conn(i).await?;
        }
        Ok(c)
    }

    /// Sends a request; retries once on a fresh connection if the connection
    /// broke and the command is idempotent.
    pub async fn call(&self, mut req: Request, payload: Bytes) -> Result<Answer, ConnError> {
        if let Some(pid) = self.partition {
            req.cmd = req.cmd.in_partition(pid);
        }
        let i = self.pool.pick();
        let mut attempt = 0;
        loop {
            let c = self.pool.conn(i + attempt).await?;
            match c.call(&req, payload.clone()).await {
                Ok((resp, data)) => {
                    return match resp.result {
                        Ok(reply) => Ok(Answer {
                            reply,
                            attrs: resp.attrs,
                            data,
                        }),
                        Err(e) => Err(ConnError::Remote(e)),
                    };
                }
                Err(ConnError::Lost(_)) if attempt == 0 && req.cmd.idempotent() => attempt += 1,
                Err(e) => return Err(e),
            }
        }
    }

    /// Shorthand: a request with no attribute lists.
    pub async fn run(
        &self,
        cap: Option<&Capability>,
        cmd: Command,
        payload: Bytes,
    ) -> Result<Answer, ConnError> {
        self.run_id(cap, cmd, payload, 0).await
    }

    /// [`OsdClient::run`] with a request id (the same on every retry of
    /// one change, so a replica chain makes it once).
    pub async fn run_id(
        &self,
        cap: Option<&Capability>,
        cmd: Command,
        payload: Bytes,
        id: u64,
    ) -> Result<Answer, ConnError> {
        self.call(
            Request {
                cap: cap.cloned(),
                id,
                cmd,
                get: Vec::new(),
                set: Vec::new(),
            },
            payload,
        )
        .await
    }

    /// Every object id in `[lo, hi]` of partition `pid`, page by page.
    pub async fn list_all(
        &self,
        cap: Option<&Capability>,
        pid: u64,
        lo: u64,
        hi: u64,
    ) -> Result<Vec<u64>, ConnError> {
        let mut out = Vec::new();
        let mut after = None;
        loop {
            let cmd = Command::List {
                pid,
                lo,
                hi,
                after,
                max: 1000,
                attrs: Vec::new(),
            };
            match self.run(cap, cmd, Bytes::new()).await?.reply {
                Reply::Listed { entries, next } => {
                    out.extend(entries.into_iter().map(|e| e.0));
                    match next {
                        Some(n) => after = Some(n),
                        None => return Ok(out),
                    }
                }
                r => return Err(ConnError::Protocol(format!("LIST answered {r:?}"))),
            }
        }
    }

    /// Reads `len` bytes at `offset`.
    pub async fn read(
        &self,
        cap: Option<&Capability>,
        pid: u64,
        oid: u64,
        offset: u64,
        len: u32,
    ) -> Result<Bytes, ConnError> {
        Ok(self
            .run(
                cap,
                Command::Read {
                    pid,
                    oid,
                    offset,
                    len,
                },
                Bytes::new(),
            )
            .await?
            .data)
    }

    /// Writes `data` at `offset`.
    pub async fn write(
        &self,
        cap: Option<&Capability>,
        pid: u64,
        oid: u64,
        offset: u64,
        data: Bytes,
    ) -> Result<(), ConnError> {
        self.run(cap, Command::Write { pid, oid, offset }, data)
            .await
            .map(|_| ())
    }

    /// Creates an object holding `data`.
    pub async fn create_and_write(
        &self,
        cap: Option<&Capability>,
        pid: u64,
        oid: u64,
        data: Bytes,
    ) -> Result<(), ConnError> {
        self.run(cap, Command::CreateAndWrite { pid, oid }, data)
            .await
            .map(|_| ())
    }
}
