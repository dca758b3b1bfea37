//! The OSD server: accepts connections, checks each one's handshake, reads
//! tagged requests and answers them in any order as they complete.
//!
//! Limits: frames are bounded before allocation ([`proto::Limits`]); each
//! connection runs at most `max_in_flight` requests (then stops reading: TCP
//! backpressure); all connections together hold at most `max_inflight_bytes`
//! of payload. A connection idle longer than `idle_timeout`, or a frame that
//! does not arrive within `io_timeout` once started, closes that connection
//! only. Shutdown stops accepting and reading, finishes what is in flight
//! (up to `drain_timeout`), then closes the store, which flushes it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use proto::msg::{Hello, Request, Response, Welcome, decode};
use proto::{ErrorCode, Frame, Kind, Limits, PROTOCOL_VERSION, WireError};
use tokio::io::{AsyncWriteExt, BufReader, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc, watch};

use crate::exec::{Ctx, execute};
use crate::metrics::{CodeLabel, DirLabel, Metrics, OpLabel};
use crate::wire::{ReadError, frame, read_body, read_frame, read_prefix, write_frame};

/// Server settings.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Cluster id clients must name.
    pub cluster_id: String,
    /// This OSD's id.
    pub osd_id: u32,
    /// Frame size limits.
    pub limits: Limits,
    /// Requests processed at once per connection.
    pub max_in_flight: u32,
    /// Payload bytes in flight across all connections.
    pub max_inflight_bytes: u64,
    /// Close a connection with no request for this long.
    pub idle_timeout: Duration,
    /// Close a connection whose started frame does not complete in this time.
    pub io_timeout: Duration,
    /// Longest wait for in-flight requests at shutdown.
    pub drain_timeout: Duration,
    /// Connections served at once; more are closed at accept.
    pub max_connections: usize,
}

impl ServerConfig {
    /// Defaults for a cluster and OSD id.
    pub fn new(cluster_id: &str, osd_id: u32) -> Self {
        ServerConfig {
            cluster_id: cluster_id.into(),
            osd_id,
            limits: Limits::default(),
            max_in_flight: 64,
            max_inflight_bytes: 512 << 20,
            idle_timeout: Duration::from_secs(300),
            io_timeout: Duration::from_secs(30),
            drain_timeout: Duration::from_secs(30),
            max_connections: 1024,
        }
    }
}

/// A running OSD.
pub struct Osd {
    ctx: Arc<Ctx>,
    cfg: ServerConfig,
    /// Its metrics.
    pub metrics: Arc<Metrics>,
    bytes: Arc<Semaphore>,
}

const BYTE_UNIT: u64 = 4096;

/// A request's slot on its connection and its share of the byte budget.
type Permits = Option<(
    tokio::sync::OwnedSemaphorePermit,
    tokio::sync::OwnedSemaphorePermit,
)>;

impl Osd {
    /// An OSD serving `ctx` with `cfg`.
    pub fn new(ctx: Ctx, cfg: ServerConfig) -> Arc<Osd> {
        let units =
            (cfg.max_inflight_bytes / BYTE_UNIT).clamp(1, u64::from(u32::MAX >> 3)) as usize;
        Arc::new(Osd {
            ctx: Arc::new(ctx),
            metrics: Arc::new(Metrics::new()),
            bytes: Arc::new(Semaphore::new(units)),
            cfg,
        })
    }

    /// The store handle (for the metrics endpoint and shutdown).
    pub fn store(&self) -> Arc<crate::exec::StoreHandle> {
        self.ctx.store.clone()
    }

    /// Serves until `shutdown` turns true; then drains and closes the store.
    pub async fn serve(
        self: Arc<Self>,
        listener: TcpListener,
        shutdown: watch::Receiver<bool>,
    ) -> Result<(), store::StoreError> {
        let me = self.clone();
        crate::listen::accept_until(
            listener,
            shutdown,
            self.cfg.max_connections,
            self.cfg.drain_timeout,
            move |sock, stop| me.clone().connection(sock, stop),
        )
        .await;
        let store = self.ctx.store.clone();
        tokio::task::spawn_blocking(move || store.close())
            .await
            .unwrap_or_else(|_| Err(store::StoreError::invalid("store", "close panicked")))
    }

    async fn connection(self: Arc<Self>, sock: TcpStream, mut shutdown: watch::Receiver<bool>) {
        let _ = sock.set_nodelay(true);
        self.metrics.connections.inc();
        let (rd, wr) = sock.into_split();
        let mut rd = BufReader::with_capacity(256 << 10, rd);
        let mut wr = BufWriter::with_capacity(256 << 10, wr);
        if let Err(e) = self.handshake(&mut rd, &mut wr).await {
            tracing::debug!(error = %e, "handshake failed");
            self.metrics.connections.dec();
            return;
        }
        // Each reply travels with the permits of its request, released only
        // once it is written: a client that does not read cannot make the OSD
        // hold more than its budget.
        let (tx, mut rx) = mpsc::channel::<(Frame, Permits)>(self.cfg.max_in_flight as usize + 4);
        let writer = tokio::spawn(async move {
            while let Some((f, permits)) = rx.recv().await {
                let written = write_frame(&mut wr, &f).await;
                drop(permits);
                if written.is_err() {
                    break;
                }
                if rx.is_empty() && wr.flush().await.is_err() {
                    break;
                }
            }
            let _ = wr.flush().await;
            let _ = wr.shutdown().await;
        });
        let slots = Arc::new(Semaphore::new(self.cfg.max_in_flight as usize));
        loop {
            let permit = match slots.clone().acquire_owned().await {
                Ok(p) => p,
                Err(_) => break,
            };
            let got = tokio::select! {
                r = read_prefix(&mut rd, &self.cfg.limits, self.cfg.idle_timeout, self.cfg.io_timeout) => r,
                _ = shutdown.changed() => break,
            };
            // Reserve the body's bytes in the global budget before reading
            // (and allocating) it.
            let total_units = (self.cfg.max_inflight_bytes / BYTE_UNIT).max(1);
            let got = match got {
                Ok(p) => {
                    let body = u64::from(p.header_len) + u64::from(p.payload_len);
                    let units = body.div_ceil(BYTE_UNIT).clamp(1, total_units) as u32;
                    match self.bytes.clone().acquire_many_owned(units).await {
                        Ok(permit) => read_body(&mut rd, &p, self.cfg.io_timeout)
                            .await
                            .map(|f| (f, permit)),
                        Err(_) => break,
                    }
                }
                Err(e) => Err(e),
            };
            let (f, mut bytes_permit) = match got {
                Ok(f) => f,
                Err(ReadError::Bad { err, tag, in_sync }) => {
                    tracing::debug!(error = %err, "bad frame");
                    self.metrics
                        .errors
                        .get_or_create(&CodeLabel {
                            code: "BadFrame".into(),
                        })
                        .inc();
                    let resp = Response {
                        result: Err(WireError::bad("frame", err)),
                        attrs: Vec::new(),
                    };
                    let reply = frame(Kind::Response, 0, tag.unwrap_or(0), &resp, Bytes::new());
                    let _ = tx.send((reply, None)).await;
                    if in_sync {
                        continue;
                    }
                    break;
                }
                Err(e) => {
                    tracing::debug!(error = %e, "connection ends");
                    break;
                }
            };
            if f.kind != Kind::Request {
                let resp = Response {
                    result: Err(WireError::bad(
                        "frame kind",
                        format!("{:?} after the handshake", f.kind),
                    )),
                    attrs: Vec::new(),
                };
                let reply = frame(Kind::Response, f.opcode, f.tag, &resp, Bytes::new());
                let _ = tx.send((reply, None)).await;
                break;
            }
            let req: Request = match decode(&f.header) {
                Ok(r) => r,
                Err(e) => {
                    let resp = Response {
                        result: Err(e),
                        attrs: Vec::new(),
                    };
                    let reply = frame(Kind::Response, f.opcode, f.tag, &resp, Bytes::new());
                    let _ = tx.send((reply, None)).await;
                    continue;
                }
            };
            let read_len = match req.cmd {
                proto::Command::Read { len, .. } => u64::from(len),
                _ => 0,
            };
            if read_len > u64::from(self.cfg.limits.max_payload) {
                let resp = Response {
                    result: Err(WireError::bad(
                        "len",
                        format!(
                            "{read_len} exceeds the {}-byte payload limit; read in pieces",
                            self.cfg.limits.max_payload
                        ),
                    )),
                    attrs: Vec::new(),
                };
                let reply = frame(Kind::Response, f.opcode, f.tag, &resp, Bytes::new());
                let _ = tx.send((reply, None)).await;
                continue;
            }
            if read_len > 0 {
                // The reply's data, too, before the read allocates it.
                let units = read_len.div_ceil(BYTE_UNIT).clamp(1, total_units) as u32;
                match self.bytes.clone().acquire_many_owned(units).await {
                    Ok(p) => bytes_permit.merge(p),
                    Err(_) => break,
                }
            }
            let me = self.clone();
            let tx = tx.clone();
            tokio::spawn(async move {
                let started = Instant::now();
                let op = req.cmd.name();
                let opcode = f.opcode;
                let tag = f.tag;
                let in_bytes = f.payload.len() as u64;
                let ctx = me.ctx.clone();
                let (resp, out) =
                    // The store call blocks (device I/O, group-commit wait): run it
                    // on this worker and let tokio hand its other tasks to another
                    // worker; one thread hop fewer per request than spawn_blocking.
                    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        tokio::task::block_in_place(|| execute(&ctx, &req, f.payload))
                    })) {
                        Ok(r) => r,
                        Err(_) => (
                            Response {
                                result: Err(WireError::new(
                                    ErrorCode::Failed,
                                    "request handler panicked",
                                )),
                                attrs: Vec::new(),
                            },
                            Bytes::new(),
                        ),
                    };
                let m = &me.metrics;
                m.ops.get_or_create(&OpLabel { op: op.into() }).inc();
                m.latency
                    .get_or_create(&OpLabel { op: op.into() })
                    .observe(started.elapsed().as_secs_f64());
                m.bytes
                    .get_or_create(&DirLabel { dir: "in".into() })
                    .inc_by(in_bytes);
                m.bytes
                    .get_or_create(&DirLabel { dir: "out".into() })
                    .inc_by(out.len() as u64);
                if let Err(e) = &resp.result {
                    m.errors
                        .get_or_create(&CodeLabel {
                            code: format!("{:?}", e.code),
                        })
                        .inc();
                }
                let mut reply = frame(Kind::Response, opcode, tag, &resp, out);
                if reply.header.len() > me.cfg.limits.max_header as usize {
                    let too_big = Response {
                        result: Err(WireError::bad(
                            "reply",
                            format!(
                                "attributes make a {}-byte reply header, limit {}; ask for fewer",
                                reply.header.len(),
                                me.cfg.limits.max_header
                            ),
                        )),
                        attrs: Vec::new(),
                    };
                    reply = frame(Kind::Response, opcode, tag, &too_big, Bytes::new());
                }
                let _ = tx.send((reply, Some((bytes_permit, permit)))).await;
            });
        }
        // Finish what is in flight on this connection before closing it.
        let _ = slots.acquire_many(self.cfg.max_in_flight).await;
        drop(tx);
        let _ = writer.await;
        self.metrics.connections.dec();
    }

    async fn handshake<R, W>(&self, rd: &mut R, wr: &mut W) -> Result<(), String>
    where
        R: tokio::io::AsyncRead + Unpin,
        W: tokio::io::AsyncWrite + Unpin,
    {
        // Before a peer has said who it is, it gets no room for big frames.
        let hello_limits = Limits {
            max_header: 4096,
            max_payload: 0,
        };
        let f = read_frame(rd, &hello_limits, self.cfg.io_timeout, self.cfg.io_timeout)
            .await
            .map_err(|e| e.to_string())?;
        let refuse = |why: String| Welcome::Refused(WireError::new(ErrorCode::Handshake, why));
        let answer = if f.kind != Kind::Hello {
            refuse(format!("expected Hello, got {:?}", f.kind))
        } else {
            match decode::<Hello>(&f.header) {
                Err(e) => refuse(e.to_string()),
                Ok(h) if h.version != PROTOCOL_VERSION => refuse(format!(
                    "protocol version {} not supported (this OSD speaks {PROTOCOL_VERSION})",
                    h.version
                )),
                Ok(h) if h.cluster_id != self.cfg.cluster_id => refuse(format!(
                    "this OSD belongs to cluster {:?}, not {:?}",
                    self.cfg.cluster_id, h.cluster_id
                )),
                Ok(h) if h.osd_id != self.cfg.osd_id => {
                    refuse(format!("this is OSD {}, not {}", self.cfg.osd_id, h.osd_id))
                }
                Ok(_) => Welcome::Ok {
                    version: PROTOCOL_VERSION,
                    cluster_id: self.cfg.cluster_id.clone(),
                    osd_id: self.cfg.osd_id,
                    max_payload: self.cfg.limits.max_payload,
                    max_in_flight: self.cfg.max_in_flight,
                },
            }
        };
        let ok = matches!(answer, Welcome::Ok { .. });
        write_frame(wr, &frame(Kind::Welcome, 0, f.tag, &answer, Bytes::new()))
            .await
            .map_err(|e| e.to_string())?;
        wr.flush().await.map_err(|e| e.to_string())?;
        if ok {
            Ok(())
        } else {
            Err(format!("refused: {answer:?}"))
        }
    }
}
