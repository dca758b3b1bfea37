//! One client connection: TCP, the handshake, then many tagged requests in
//! flight (pipelining: a writer task sends, a reader task matches replies
//! to waiters by tag). The same framing serves the OSD and the MDS
//! protocols; the handshake names which server is meant.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use proto::msg::{Hello, Request, Response, Welcome, decode};
use proto::{Frame, Kind, Limits, PROTOCOL_VERSION, WireError};
use tokio::io::{AsyncWriteExt, BufReader, BufWriter};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

use crate::frame_io::{frame, read_frame, write_frame};

/// Why a call over a connection failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ConnError {
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
pub struct ConnConfig {
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

impl ConnConfig {
    /// Defaults: 30 s timeout, 2 connections.
    pub fn new(cluster_id: &str, osd_id: u32) -> Self {
        ConnConfig {
            cluster_id: cluster_id.into(),
            osd_id,
            name: "tessera-client".into(),
            timeout: Duration::from_secs(30),
            connections: 2,
        }
    }
}

type Waiters = Arc<Mutex<HashMap<u64, oneshot::Sender<Result<Frame, ConnError>>>>>;

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
) -> std::sync::MutexGuard<'_, HashMap<u64, oneshot::Sender<Result<Frame, ConnError>>>> {
    w.lock().unwrap_or_else(|e| e.into_inner())
}

impl Connection {
    /// Connects and performs the handshake.
    pub async fn connect(addr: &str, cfg: &ConnConfig) -> Result<Connection, ConnError> {
        let cerr = |why: String| ConnError::Connect {
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
            match decode::<Welcome>(&f.header).map_err(|e| ConnError::Protocol(e.to_string()))? {
                Welcome::Ok { max_payload, .. } => max_payload,
                Welcome::Refused(e) => return Err(ConnError::Refused(e)),
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
                let _ = w.send(Err(ConnError::Lost(why.clone())));
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
    ) -> Result<(Response, Bytes), ConnError> {
        let f = self.call_raw(req.cmd.opcode(), req, payload).await?;
        let resp: Response = decode(&f.header).map_err(|e| ConnError::Protocol(e.to_string()))?;
        Ok((resp, f.payload))
    }

    /// Sends any request header (the same framing serves the MDS protocol)
    /// and returns the reply frame undecoded.
    pub async fn call_raw<T: serde::Serialize>(
        &self,
        opcode: u16,
        header: &T,
        payload: Bytes,
    ) -> Result<Frame, ConnError> {
        let tag = self.next_tag.fetch_add(1, Ordering::Relaxed);
        let (wtx, wrx) = oneshot::channel();
        lock(&self.waiters).insert(tag, wtx);
        let f = frame(Kind::Request, opcode, tag, header, payload);
        if self.tx.send(f).await.is_err() {
            lock(&self.waiters).remove(&tag);
            return Err(ConnError::Lost("connection closed".into()));
        }
        let f = match tokio::time::timeout(self.timeout, wrx).await {
            Err(_) => {
                lock(&self.waiters).remove(&tag);
                return Err(ConnError::Timeout(self.timeout));
            }
            Ok(Err(_)) => return Err(ConnError::Lost("connection closed".into())),
            Ok(Ok(r)) => r?,
        };
        Ok(f)
    }
}
