//! One client connection: TCP, the handshake, then many tagged requests in
//! flight (pipelining: a writer task sends, a reader task matches replies
//! to waiters by tag). The same framing serves the OSD and the MDS
//! protocols; the handshake names which server is meant.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use proto::auth::{FrameSeal, HandshakeKeys, Proof, same};
use proto::msg::{Hello, Request, Response, Welcome, decode};
use proto::{ErrorCode, Frame, Kind, Limits, PROTOCOL_VERSION, WireError};
use tokio::io::{AsyncWriteExt, BufReader, BufWriter};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

use crate::auth::{IdentitySource, random_bytes};
use crate::frame_io::{frame, read_frame, write_frame};
use crate::wire::{self, Sent, SharedWire, Wire};

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

impl ConnError {
    /// What the peer answered, if it answered with an error (`None`: it
    /// did not answer — unreachable, lost, timed out, undecodable).
    pub fn remote_code(&self) -> Option<proto::ErrorCode> {
        match self {
            ConnError::Remote(w) => Some(w.code),
            _ => None,
        }
    }
}

/// How a client connects.
#[derive(Clone)]
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
    /// Who the connection speaks for (asked at every connect).
    pub identity: Arc<dyn IdentitySource>,
    /// Ask for encrypted frames.
    pub encrypt: bool,
    /// Close the connection when sent bytes stay unacknowledged this long
    /// (the kernel's TCP user timeout): set for the MDS and a group's
    /// members, where a dead leader must be noticed in seconds. Left
    /// unset for OSDs: a busy server stops reading (back-pressure), and
    /// its zero window must not cost the connection.
    pub dead_peer_after: Option<Duration>,
    /// How long a connect (the TCP handshake) may take; `None`: the
    /// per-request timeout. A live server's kernel answers a connect at
    /// once even while the server is busy, so a short one only shortens
    /// the wait for a peer that cannot be reached.
    pub connect_timeout: Option<Duration>,
}

impl std::fmt::Debug for ConnConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnConfig")
            .field("cluster_id", &self.cluster_id)
            .field("osd_id", &self.osd_id)
            .field("name", &self.name)
            .field("timeout", &self.timeout)
            .field("connections", &self.connections)
            .field("encrypt", &self.encrypt)
            .finish_non_exhaustive()
    }
}

impl ConnConfig {
    /// Defaults: 30 s timeout, 2 connections, frames authenticated but
    /// not encrypted.
    pub fn new(cluster_id: &str, osd_id: u32, identity: Arc<dyn IdentitySource>) -> Self {
        ConnConfig {
            cluster_id: cluster_id.into(),
            osd_id,
            name: "tessera-client".into(),
            timeout: Duration::from_secs(30),
            connections: 2,
            identity,
            encrypt: false,
            dead_peer_after: None,
            connect_timeout: None,
        }
    }
}

/// Most addresses a client takes from a welcome's `peers`.
pub const MAX_PEERS_KEPT: usize = 16;

/// What a handshake settled.
pub struct Welcomed {
    /// Largest payload the server accepts.
    pub max_payload: u32,
    /// The frames' seals (send, receive) when the server authenticated.
    pub seals: Option<(FrameSeal, FrameSeal)>,
    /// Other addresses of the same service (see `Welcome::Ok::peers`),
    /// bounded.
    pub peers: Vec<String>,
}

/// The peers a client keeps from a welcome: at most
/// [`MAX_PEERS_KEPT`], each non-empty and at most 255 bytes.
fn kept_peers(peers: Vec<String>) -> Vec<String> {
    peers
        .into_iter()
        .filter(|p| !p.is_empty() && p.len() <= 255)
        .take(MAX_PEERS_KEPT)
        .collect()
}

/// The client's side of the handshake on a fresh stream: sends the Hello
/// for `id`, checks the server's proof, sends the client's, and returns
/// the server's payload limit and the frame seals (send, receive) of an
/// authenticated connection (`None` for an `--insecure` OSD).
pub async fn handshake<R, W>(
    rd: &mut R,
    wr: &mut W,
    id: &crate::auth::Identity,
    cfg: &ConnConfig,
    cerr: impl Fn(std::io::Error) -> ConnError,
) -> Result<Welcomed, ConnError>
where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    let hello = Hello {
        version: PROTOCOL_VERSION,
        cluster_id: cfg.cluster_id.clone(),
        osd_id: cfg.osd_id,
        client: cfg.name.clone(),
        credential: id.credential.clone(),
        nonce: random_bytes(),
        encrypt: cfg.encrypt,
    };
    let hello_bytes = Bytes::from(proto::msg::encode(&hello));
    let limits = Limits {
        max_header: 16 << 20,
        max_payload: u32::MAX,
    };
    send_now(
        wr,
        Frame {
            kind: Kind::Hello,
            opcode: 0,
            tag: 0,
            header: hello_bytes.clone(),
            payload: Bytes::new(),
        },
    )
    .await
    .map_err(|e| cerr(std::io::Error::other(e.to_string())))?;
    let welcome =
        |f: Frame| decode::<Welcome>(&f.header).map_err(|e| ConnError::Protocol(e.to_string()));
    let f = read_frame(rd, &limits, cfg.timeout, cfg.timeout, None)
        .await
        .map_err(|e| cerr(std::io::Error::other(e.to_string())))?;
    let unauthenticated =
        |why: &str| ConnError::Refused(WireError::new(ErrorCode::Unauthenticated, why));
    let (max_payload, seals, peers) = match welcome(f)? {
        Welcome::Refused(e) => return Err(ConnError::Refused(e)),
        Welcome::Ok {
            max_payload, peers, ..
        } => {
            if id.key.is_some() {
                return Err(unauthenticated(
                    "the server did not authenticate itself (an --insecure OSD, or not a \
                         Tessera server of this cluster): refusing to use it",
                ));
            }
            (max_payload, None, peers)
        }
        Welcome::Challenge {
            nonce,
            proof,
            encrypt,
        } => {
            let key = id.key.ok_or_else(|| {
                unauthenticated("the server asks for a key and this client has none")
            })?;
            if cfg.encrypt && !encrypt {
                return Err(unauthenticated(
                    "the server answered without the encryption asked for",
                ));
            }
            let keys = HandshakeKeys::derive(&key, &hello_bytes, &nonce, encrypt);
            if !same(&keys.server_proof, &proof) {
                return Err(unauthenticated(
                    "the server could not prove it holds this key: not the real server, or \
                         the key was rotated",
                ));
            }
            send_now(
                wr,
                frame(
                    Kind::Hello,
                    0,
                    0,
                    &Proof {
                        proof: keys.client_proof,
                    },
                    Bytes::new(),
                ),
            )
            .await
            .map_err(|e| cerr(std::io::Error::other(e.to_string())))?;
            let f = read_frame(rd, &limits, cfg.timeout, cfg.timeout, None)
                .await
                .map_err(|e| cerr(std::io::Error::other(e.to_string())))?;
            match welcome(f)? {
                Welcome::Ok {
                    max_payload, peers, ..
                } => (
                    max_payload,
                    Some((
                        FrameSeal::new(&keys.client_to_server, encrypt),
                        FrameSeal::new(&keys.server_to_client, encrypt),
                    )),
                    peers,
                ),
                Welcome::Refused(e) => return Err(ConnError::Refused(e)),
                Welcome::Challenge { .. } => {
                    return Err(ConnError::Protocol("a second challenge".into()));
                }
            }
        }
    };
    Ok(Welcomed {
        max_payload,
        seals,
        peers: kept_peers(peers),
    })
}

/// Writes one handshake frame and flushes it.
async fn send_now<W: tokio::io::AsyncWrite + Unpin>(wr: &mut W, f: Frame) -> std::io::Result<()> {
    write_frame(wr, &f).await?;
    wr.flush().await
}

type Waiters = Arc<Mutex<HashMap<u64, oneshot::Sender<Result<Frame, ConnError>>>>>;

/// One pipelined connection.
pub struct Connection {
    tx: mpsc::Sender<Frame>,
    wire: SharedWire,
    waiters: Waiters,
    next_tag: AtomicU64,
    alive: Arc<AtomicBool>,
    timeout: Duration,
    /// Largest payload the OSD accepts.
    pub max_payload: u32,
    /// Whether frames are encrypted.
    pub encrypted: bool,
    /// Other addresses of the same service its welcome named.
    peers: Vec<String>,
}

fn lock(
    w: &Waiters,
) -> std::sync::MutexGuard<'_, HashMap<u64, oneshot::Sender<Result<Frame, ConnError>>>> {
    w.lock().unwrap_or_else(|e| e.into_inner())
}

/// What the MDS's clients and a group's members set as
/// [`ConnConfig::dead_peer_after`]: a peer whose host died or whose
/// network was cut sends no reset, and without it a request would wait
/// out the whole reply timeout.
pub const DEAD_PEER_AFTER: Duration = Duration::from_secs(3);

/// Sets keepalive probes on `sock` (after 1 s idle, every 1 s; an idle
/// connection to a vanished peer is closed in a few seconds instead of
/// kept for minutes) and, when asked, the kernel's user timeout. Best
/// effort: a system without them keeps the reply timeout alone.
fn notice_dead_peers(sock: &TcpStream, user_timeout: Option<Duration>) {
    let s = socket2::SockRef::from(sock);
    let probes = socket2::TcpKeepalive::new()
        .with_time(Duration::from_secs(1))
        .with_interval(Duration::from_secs(1))
        .with_retries(2);
    let _ = s.set_tcp_keepalive(&probes);
    if user_timeout.is_some() {
        let _ = s.set_tcp_user_timeout(user_timeout);
    }
}

impl Connection {
    /// Connects and performs the handshake.
    pub async fn connect(addr: &str, cfg: &ConnConfig) -> Result<Connection, ConnError> {
        let cerr = |why: String| ConnError::Connect {
            addr: addr.into(),
            why,
        };
        let connect_within = cfg.connect_timeout.unwrap_or(cfg.timeout);
        let sock = tokio::time::timeout(connect_within, TcpStream::connect(addr))
            .await
            .map_err(|_| cerr("timed out".into()))?
            .map_err(|e| cerr(e.to_string()))?;
        let _ = sock.set_nodelay(true);
        notice_dead_peers(&sock, cfg.dead_peer_after);
        let (rd, wr) = sock.into_split();
        let mut rd = BufReader::with_capacity(256 << 10, rd);
        let mut wr = BufWriter::with_capacity(256 << 10, wr);
        let id = cfg.identity.identity(cfg.osd_id).await?;
        let Welcomed {
            max_payload,
            mut seals,
            peers,
        } = handshake(&mut rd, &mut wr, &id, cfg, |e| cerr(e.to_string())).await?;
        let limits = Limits {
            max_header: 16 << 20,
            max_payload: u32::MAX,
        };
        let encrypted = seals.as_ref().is_some_and(|(s, _)| s.encrypts());
        let (send_seal, mut recv_seal) = match seals.take() {
            Some((s, r)) => (Some(s), Some(r)),
            None => (None, None),
        };
        let (tx, mut rx) = mpsc::channel::<Frame>(256);
        let wire = Wire::shared(wr, send_seal);
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
                    recv_seal.as_mut(),
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
        let (a3, wire3) = (alive.clone(), wire.clone());
        tokio::spawn(async move {
            let _broken_at_exit = wire3.break_on_drop();
            // What is queued goes out in one flush, the wire held
            // throughout (a direct sender finds it free only when the
            // buffer is empty).
            'frames: while let Some(f) = rx.recv().await {
                let mut w = wire3.lock().await;
                let mut next = Some(f);
                while let Some(f) = next.take() {
                    if w.write(f).await.is_err() {
                        break 'frames;
                    }
                    next = rx.try_recv().ok();
                }
                if w.flush().await.is_err() {
                    break;
                }
            }
            a3.store(false, Ordering::SeqCst);
            wire3.lock().await.shutdown().await;
        });
        Ok(Connection {
            tx,
            wire,
            waiters,
            next_tag: AtomicU64::new(1),
            alive,
            timeout: cfg.timeout,
            max_payload,
            encrypted,
            peers,
        })
    }

    /// Other addresses of the same service, as its welcome named them
    /// (a replicated MDS group's members).
    pub fn peers(&self) -> &[String] {
        &self.peers
    }

    /// Whether the connection still works.
    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst) && !self.wire.is_broken()
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
        let lost = |why: String| {
            lock(&self.waiters).remove(&tag);
            Err(ConnError::Lost(why))
        };
        match wire::send_now(&self.wire, f, self.timeout) {
            Sent::Done => {}
            Sent::Queue(f) => {
                if self.tx.send(f).await.is_err() {
                    return lost("connection closed".into());
                }
            }
            Sent::Failed(e) => {
                self.alive.store(false, Ordering::SeqCst);
                return lost(e.to_string());
            }
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

#[cfg(test)]
mod peer_tests {
    use super::kept_peers;

    #[test]
    fn a_welcome_names_at_most_sixteen_short_peers() {
        let mut named: Vec<String> = vec![String::new(), "x".repeat(256)];
        named.extend((0..1000).map(|i| format!("10.0.0.{i}:7400")));
        let kept = kept_peers(named);
        assert_eq!(kept.len(), crate::connection::MAX_PEERS_KEPT);
        assert_eq!(kept[0], "10.0.0.0:7400");
        assert!(kept.iter().all(|p| !p.is_empty() && p.len() <= 255));
    }
}
