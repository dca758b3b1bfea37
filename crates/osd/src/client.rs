//! The Rust client of the OSD protocol. A [`Connection`] is one TCP
//! connection with many tagged requests in flight (pipelining: a writer task
//! sends, a reader task matches replies to waiters by tag). An [`OsdClient`]
//! is a small pool of connections to one OSD that reconnects when one dies
//! and retries a request once only when the command is idempotent.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use proto::msg::{AttrKey, Command, Hello, Reply, Request, Response, Welcome, decode};
use proto::{Capability, Frame, Kind, Limits, PROTOCOL_VERSION, WireError};
use tokio::io::{AsyncWriteExt, BufReader, BufWriter};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

use crate::wire::{frame, read_frame, write_frame};

/// Client failures.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ClientError {
    /// Could not connect.
    #[error("cannot connect to {addr}: {why}")]
    Connect {
        /// Address.
        addr: String,
        /// Reason.
        why: String,
    },
    /// The OSD refused the handshake.
    #[error("handshake refused: {0}")]
    Refused(WireError),
    /// The connection broke; the request may or may not have run.
    #[error("connection lost: {0}")]
    Lost(String),
    /// No reply within the timeout; the request may or may not have run.
    #[error("no reply within {0:?}")]
    Timeout(Duration),
    /// The OSD answered with an error.
    #[error("{0}")]
    Remote(WireError),
    /// The reply did not decode.
    #[error("protocol error: {0}")]
    Protocol(String),
}

/// How a client connects.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Cluster the OSD must belong to.
    pub cluster_id: String,
    /// The OSD's id.
    pub osd_id: u32,
    /// Name sent in the handshake.
    pub name: String,
    /// Per-request timeout.
    pub timeout: Duration,
    /// Connections in the pool.
    pub connections: usize,
}

impl ClientConfig {
    /// Defaults: 30 s timeout, 2 connections.
    pub fn new(cluster_id: &str, osd_id: u32) -> Self {
        ClientConfig {
            cluster_id: cluster_id.into(),
            osd_id,
            name: "tessera-client".into(),
            timeout: Duration::from_secs(30),
            connections: 2,
        }
    }
}

type Waiters = Arc<Mutex<HashMap<u64, oneshot::Sender<Result<Frame, ClientError>>>>>;

/// One pipelined connection.
pub struct Connection {
    tx: mpsc::Sender<Frame>,
    waiters: Waiters,
    next_tag: AtomicU64,
    alive: Arc<AtomicBool>,
    timeout: Duration,
    /// Largest payload the OSD accepts.
    pub max_payload: u32,
}

fn lock(
    w: &Waiters,
) -> std::sync::MutexGuard<'_, HashMap<u64, oneshot::Sender<Result<Frame, ClientError>>>> {
    w.lock().unwrap_or_else(|e| e.into_inner())
}

impl Connection {
    /// Connects and performs the handshake.
    pub async fn connect(addr: &str, cfg: &ClientConfig) -> Result<Connection, ClientError> {
        let cerr = |why: String| ClientError::Connect {
            addr: addr.into(),
            why,
        };
        let sock = tokio::time::timeout(cfg.timeout, TcpStream::connect(addr))
            .await
            .map_err(|_| cerr("timed out".into()))?
            .map_err(|e| cerr(e.to_string()))?;
        let _ = sock.set_nodelay(true);
        let (rd, wr) = sock.into_split();
        let mut rd = BufReader::with_capacity(256 << 10, rd);
        let mut wr = BufWriter::with_capacity(256 << 10, wr);
        let hello = Hello {
            version: PROTOCOL_VERSION,
            cluster_id: cfg.cluster_id.clone(),
            osd_id: cfg.osd_id,
            client: cfg.name.clone(),
        };
        write_frame(&mut wr, &frame(Kind::Hello, 0, 0, &hello, Bytes::new()))
            .await
            .map_err(|e| cerr(e.to_string()))?;
        wr.flush().await.map_err(|e| cerr(e.to_string()))?;
        let limits = Limits {
            max_header: 16 << 20,
            max_payload: u32::MAX,
        };
        let f = read_frame(&mut rd, &limits, cfg.timeout, cfg.timeout)
            .await
            .map_err(|e| cerr(e.to_string()))?;
        let max_payload =
            match decode::<Welcome>(&f.header).map_err(|e| ClientError::Protocol(e.to_string()))? {
                Welcome::Ok { max_payload, .. } => max_payload,
                Welcome::Refused(e) => return Err(ClientError::Refused(e)),
            };
        let (tx, mut rx) = mpsc::channel::<Frame>(256);
        let waiters: Waiters = Arc::new(Mutex::new(HashMap::new()));
        let alive = Arc::new(AtomicBool::new(true));
        let (w2, a2) = (waiters.clone(), alive.clone());
        tokio::spawn(async move {
            let why = loop {
                match read_frame(
                    &mut rd,
                    &limits,
                    Duration::from_secs(u64::MAX >> 20),
                    Duration::from_secs(60),
                )
                .await
                {
                    Ok(f) => {
                        if let Some(w) = lock(&w2).remove(&f.tag) {
                            let _ = w.send(Ok(f));
                        }
                    }
                    Err(e) => break e.to_string(),
                }
            };
            a2.store(false, Ordering::SeqCst);
            for (_, w) in lock(&w2).drain() {
                let _ = w.send(Err(ClientError::Lost(why.clone())));
            }
        });
        let a3 = alive.clone();
        tokio::spawn(async move {
            while let Some(f) = rx.recv().await {
                if write_frame(&mut wr, &f).await.is_err()
                    || (rx.is_empty() && wr.flush().await.is_err())
                {
                    break;
                }
            }
            a3.store(false, Ordering::SeqCst);
            let _ = wr.shutdown().await;
        });
        Ok(Connection {
            tx,
            waiters,
            next_tag: AtomicU64::new(1),
            alive,
            timeout: cfg.timeout,
            max_payload,
        })
    }

    /// Whether the connection still works.
    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }

    /// Sends one request and waits for its reply.
    pub async fn call(
        &self,
        req: &Request,
        payload: Bytes,
    ) -> Result<(Response, Bytes), ClientError> {
        let f = self.call_raw(req.cmd.opcode(), req, payload).await?;
        let resp: Response = decode(&f.header).map_err(|e| ClientError::Protocol(e.to_string()))?;
        Ok((resp, f.payload))
    }

    /// Sends any request header (the same framing serves the MDS protocol)
    /// and returns the reply frame undecoded.
    pub async fn call_raw<T: serde::Serialize>(
        &self,
        opcode: u16,
        header: &T,
        payload: Bytes,
    ) -> Result<Frame, ClientError> {
        let tag = self.next_tag.fetch_add(1, Ordering::Relaxed);
        let (wtx, wrx) = oneshot::channel();
        lock(&self.waiters).insert(tag, wtx);
        let f = frame(Kind::Request, opcode, tag, header, payload);
        if self.tx.send(f).await.is_err() {
            lock(&self.waiters).remove(&tag);
            return Err(ClientError::Lost("connection closed".into()));
        }
        let f = match tokio::time::timeout(self.timeout, wrx).await {
            Err(_) => {
                lock(&self.waiters).remove(&tag);
                return Err(ClientError::Timeout(self.timeout));
            }
            Ok(Err(_)) => return Err(ClientError::Lost("connection closed".into())),
            Ok(Ok(r)) => r?,
        };
        Ok(f)
    }
}

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

/// A small pool of pipelined connections to one server (an OSD, or the
/// MDS: the handshake names which), made on first use and remade when one dies.
pub struct Pool {
    addr: String,
    cfg: ClientConfig,
    conns: Vec<tokio::sync::Mutex<Option<Arc<Connection>>>>,
    next: AtomicUsize,
}

impl Pool {
    /// A pool of `cfg.connections` connections to `addr`.
    pub fn new(addr: &str, cfg: ClientConfig) -> Pool {
        let n = cfg.connections.max(1);
        Pool {
            addr: addr.into(),
            cfg,
            conns: (0..n).map(|_| tokio::sync::Mutex::new(None)).collect(),
            next: AtomicUsize::new(0),
        }
    }

    /// Connections in the pool.
    pub fn size(&self) -> usize {
        self.conns.len()
    }

    /// The next slot, round robin.
    pub fn pick(&self) -> usize {
        self.next.fetch_add(1, Ordering::Relaxed) % self.conns.len()
    }

    /// Connection `i` (mod the size), connecting if it is absent or dead.
    pub async fn conn(&self, i: usize) -> Result<Arc<Connection>, ClientError> {
        let mut slot = self.conns[i % self.conns.len()].lock().await;
        if let Some(c) = slot.as_ref().filter(|c| c.is_alive()) {
            return Ok(c.clone());
        }
        let c = Arc::new(Connection::connect(&self.addr, &self.cfg).await?);
        *slot = Some(c.clone());
        Ok(c)
    }
}

/// A pool of connections to one OSD.
pub struct OsdClient {
    pool: Pool,
}

impl OsdClient {
    /// A pool (connections are made on first use).
    pub fn new(addr: &str, cfg: ClientConfig) -> OsdClient {
        OsdClient {
            pool: Pool::new(addr, cfg),
        }
    }

    /// Connects every pooled connection now (fails fast on a bad address or handshake).
    pub async fn connect(addr: &str, cfg: ClientConfig) -> Result<OsdClient, ClientError> {
        let c = OsdClient::new(addr, cfg);
        for i in 0..c.pool.size() {
            c.pool.conn(i).await?;
        }
        Ok(c)
    }

    /// Sends a request; retries once on a fresh connection if the connection
    /// broke and the command is idempotent.
    pub async fn call(&self, req: Request, payload: Bytes) -> Result<Answer, ClientError> {
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
                        Err(e) => Err(ClientError::Remote(e)),
                    };
                }
                Err(ClientError::Lost(_)) if attempt == 0 && req.cmd.idempotent() => attempt += 1,
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
    ) -> Result<Answer, ClientError> {
        self.call(
            Request {
                cap: cap.cloned(),
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
    ) -> Result<Vec<u64>, ClientError> {
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
                r => return Err(ClientError::Protocol(format!("LIST answered {r:?}"))),
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
    ) -> Result<Bytes, ClientError> {
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
    ) -> Result<(), ClientError> {
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
    ) -> Result<(), ClientError> {
        self.run(cap, Command::CreateAndWrite { pid, oid }, data)
            .await
            .map(|_| ())
    }
}
