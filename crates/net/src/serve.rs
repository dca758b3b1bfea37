//! The one server loop every Tessera daemon runs. A [`Service`] (the OSD,
//! the MDS) says what a handshake and a request mean; this module owns how
//! they travel and what they may cost:
//!
//! - at most `max_connections` at once (more are closed at accept);
//! - the handshake in a tiny frame budget, within `io_timeout`;
//! - frames bounded before allocation ([`proto::Limits`]);
//! - at most `max_in_flight` requests per connection (then the loop stops
//!   reading: TCP backpressure);
//! - all connections together hold at most `max_inflight_bytes` of request
//!   bodies and announced reply data, reserved before the body is read and
//!   released only once the reply is written — so a client that never reads
//!   its replies cannot make the server hold more than the budget;
//! - a connection idle for `idle_timeout`, a frame that does not finish
//!   within `io_timeout` once started, or a reply the peer does not take
//!   within `write_timeout` closes that connection only;
//! - shutdown stops accepting and reading, and gives what is in flight up
//!   to `drain_timeout`.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use proto::auth::{FrameSeal, HandshakeKeys, Proof, Secret, same};
use proto::msg::{Hello, Welcome, decode};
use proto::{ErrorCode, Frame, Kind, Limits, WireError};
use tokio::io::{AsyncWriteExt, BufReader, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};

use crate::auth::random_bytes;
use crate::frame_io::{ReadError, frame, read_body, read_frame, read_prefix, write_frame};
use crate::wire::{self, Sent, Wire};

/// What every server connection may cost; the same knobs for every daemon.
#[derive(Debug, Clone)]
pub struct ServeLimits {
    /// Frame size limits after the handshake.
    pub frame: Limits,
    /// Authenticated connections served at once; more are closed after
    /// their handshake.
    pub max_connections: usize,
    /// Authenticated connections one principal may hold at once; a new
    /// one beyond it takes the seat of that principal's idlest. Whatever
    /// it is, no principal keeps another out ([`crate::seats`]).
    pub max_connections_per_principal: usize,
    /// Connections still in their handshake: a bound, a bound per
    /// address and a deadline of their own (see [`crate::handshakes`]).
    pub handshake: crate::handshakes::HandshakeLimits,
    /// Requests processed at once per connection.
    pub max_in_flight: u32,
    /// Request bodies and reply data in flight across all connections.
    pub max_inflight_bytes: u64,
    /// Close a connection with no request for this long.
    pub idle_timeout: Duration,
    /// Close a connection whose started frame does not complete in this time.
    pub io_timeout: Duration,
    /// Close a connection whose peer does not take a reply in this time.
    pub write_timeout: Duration,
    /// Longest wait for in-flight requests at shutdown.
    pub drain_timeout: Duration,
}

/// Authenticated connections a daemon serves at once by default (a
/// mount holds two to the MDS and two to each OSD it uses).
pub const DEFAULT_MAX_CONNECTIONS: usize = 4096;

impl Default for ServeLimits {
    /// Defaults sized for an OSD: 4,096 connections (any principal may
    /// hold them all while nobody else needs one), 64 requests each,
    /// 512 MiB in flight, 5 min idle, 30 s per frame and per reply.
    fn default() -> Self {
        ServeLimits {
            frame: Limits::default(),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_connections_per_principal: DEFAULT_MAX_CONNECTIONS,
            handshake: Default::default(),
            max_in_flight: 64,
            max_inflight_bytes: 512 << 20,
            idle_timeout: Duration::from_secs(300),
            io_timeout: Duration::from_secs(30),
            write_timeout: Duration::from_secs(30),
            drain_timeout: Duration::from_secs(30),
        }
    }
}

/// A request the service accepted, and the reply data it will announce.
pub struct Admitted<R> {
    /// The decoded request.
    pub request: R,
    /// Bytes of reply payload to reserve in the budget before it runs.
    pub reply_bytes: u64,
    /// A short request (a small read) that the connection runs itself,
    /// without a task of its own, when nothing else of the connection is
    /// in flight: a request at depth one then costs no thread wake-up
    /// between reading it and answering it.
    pub quick: bool,
}

/// What a daemon plugs into the loop: who may connect and the meaning of
/// a request. Everything else (the handshake's proofs, sealed frames,
/// limits, timeouts, ordering) is the loop's.
pub trait Service: Send + Sync + 'static {
    /// A request decoded by [`Service::admit`].
    type Request: Send + 'static;
    /// Who a connection speaks for, once authenticated.
    type Peer: Send + Sync + 'static;

    /// Checks a peer's Hello (version, cluster, server id, credential):
    /// the key the peer must prove and who it then is, or why not. A
    /// `None` key accepts the peer unauthenticated (only an `--insecure`
    /// OSD does that).
    fn authenticate(&self, hello: &Hello) -> Result<(Option<Secret>, Self::Peer), WireError>;

    /// Whether every connection must be encrypted (else only those that ask).
    fn requires_encryption(&self) -> bool {
        false
    }

    /// The `Welcome::Ok` an authenticated peer gets (the limits it must respect).
    fn welcome(&self) -> Welcome;

    /// The principal a peer speaks for, when connections are counted per
    /// principal ([`ServeLimits::max_connections_per_principal`]).
    fn principal_of(&self, _peer: &Self::Peer) -> Option<u64> {
        None
    }

    /// Decodes and checks a request frame before any work or reply memory
    /// is committed to it; an error is answered at once.
    fn admit(&self, peer: &Self::Peer, f: &Frame) -> Result<Admitted<Self::Request>, WireError>;

    /// Runs one admitted request; returns the reply's header and payload.
    fn handle(
        self: Arc<Self>,
        peer: Arc<Self::Peer>,
        request: Self::Request,
        f: Frame,
    ) -> impl Future<Output = (Bytes, Bytes)> + Send;

    /// The reply header that carries only `err` (bad frame, refused request).
    fn error_header(&self, err: WireError) -> Bytes;

    /// Called when a connection opens (`true`) or closes (`false`).
    fn connection_event(&self, _open: bool) {}

    /// Called for every frame that did not parse.
    fn bad_frame(&self) {}
}

/// One byte-budget unit: budgets are counted in 4 KiB pages.
const BYTE_UNIT: u64 = 4096;

/// A request's slot on its connection and its share of the byte budget,
/// released when its reply has been written.
type Permits = Option<(Budget, OwnedSemaphorePermit)>;

/// A reservation in the byte budget: the connection's share and the
/// server's whole budget, both given back when it is dropped.
struct Budget {
    _connection: OwnedSemaphorePermit,
    _principal: Option<OwnedSemaphorePermit>,
    _server: OwnedSemaphorePermit,
}

/// The part of the byte budget one connection may hold at once (so a
/// single peer that never reads its replies cannot take all of it).
const CONNECTION_SHARE: u64 = 4;

/// The part of the byte budget all of one principal's connections may
/// hold together (so slow readers under one key cannot take all of it).
const PRINCIPAL_SHARE: u64 = 2;

/// Completes when `evict` (a seat's) is told; never without one.
async fn told(evict: &Option<Arc<tokio::sync::Notify>>) {
    match evict {
        Some(n) => n.notified().await,
        None => std::future::pending().await,
    }
}

/// Authenticated sockets a server holds at most: evicted connections
/// close after what they have in flight, so this is an eighth more than
/// the connections seated.
fn sockets(limits: &ServeLimits) -> usize {
    limits.max_connections.max(1) + limits.max_connections / 8 + 8
}

/// The shares a connection reserves from before the server's budget.
struct Shares {
    connection: Arc<Semaphore>,
    principal: Option<Arc<Semaphore>>,
}

/// Polls `fut` once on this task: `None` when it finished (or panicked,
/// as a task of its own would have: logged, its permits given back), else
/// the rest to run elsewhere.
async fn first_step<F>(fut: F) -> Option<std::pin::Pin<Box<F>>>
where
    F: Future<Output = ()>,
{
    let mut fut = Box::pin(fut);
    let done = std::future::poll_fn(|cx| {
        let step = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| fut.as_mut().poll(cx)));
        std::task::Poll::Ready(match step {
            Ok(p) => p.is_ready(),
            Err(_) => {
                tracing::error!("a request handler panicked");
                true
            }
        })
    })
    .await;
    (!done).then_some(fut)
}

/// One admitted request and what its answer needs: the service that runs
/// it, the connection's wire (or its writer task, should the wire be busy)
/// and the permits given back once the reply is written.
struct Answer<S: Service> {
    service: Arc<S>,
    peer: Arc<S::Peer>,
    tx: mpsc::Sender<(Frame, Permits)>,
    wire: wire::SharedWire,
    max_header: usize,
    write_timeout: Duration,
    permits: Permits,
}

impl<S: Service> Answer<S> {
    /// Runs the request and sends its reply.
    async fn run(self, request: S::Request, f: Frame) {
        let (opcode, tag) = (f.opcode, f.tag);
        let max_header = self.max_header;
        let (mut header, mut payload) = self.service.clone().handle(self.peer, request, f).await;
        if header.len() > max_header {
            header = self.service.error_header(WireError::bad(
                "reply",
                format!(
                    "the reply header would be {} bytes, limit {max_header}; ask for less",
                    header.len()
                ),
            ));
            payload = Bytes::new();
        }
        let r = frame_raw(opcode, tag, header, payload);
        match wire::send_now(&self.wire, r, self.write_timeout) {
            Sent::Done => drop(self.permits),
            Sent::Queue(r) => {
                let _ = self.tx.send((r, self.permits)).await;
            }
            Sent::Failed(e) => {
                // Broken off: the reading loop stops at its next request.
                tracing::debug!(error = %e, "reply not written; closing");
            }
        }
    }
}

/// A server: a service and the limits it is served under.
pub struct Server<S: Service> {
    service: Arc<S>,
    limits: ServeLimits,
    bytes: Arc<Semaphore>,
    handshakes: crate::handshakes::Handshakes,
    established: Arc<Semaphore>,
    seats: Arc<crate::seats::Seats>,
}

pub use crate::seats::PrincipalCounts;

impl<S: Service> Server<S> {
    /// Serves `service` under `limits`.
    pub fn new(service: Arc<S>, limits: ServeLimits) -> Arc<Server<S>> {
        Self::counting_in(service, limits, Arc::default())
    }

    /// [`Server::new`], counting each principal's connections in `counts`.
    pub fn counting_in(
        service: Arc<S>,
        limits: ServeLimits,
        counts: PrincipalCounts,
    ) -> Arc<Server<S>> {
        let units = (limits.max_inflight_bytes / BYTE_UNIT).clamp(1, u64::from(u32::MAX >> 3));
        let seats = crate::seats::Seats::new(
            limits.max_connections,
            limits.max_connections_per_principal,
            (units / PRINCIPAL_SHARE).max(1) as usize,
            counts,
        );
        let sockets = sockets(&limits);
        Arc::new(Server {
            service,
            bytes: Arc::new(Semaphore::new(units as usize)),
            handshakes: crate::handshakes::Handshakes::new(limits.handshake),
            established: Arc::new(Semaphore::new(sockets)),
            seats,
            limits,
        })
    }

    /// The limits this server runs under.
    pub fn limits(&self) -> &ServeLimits {
        &self.limits
    }

    /// Accepts on `listener` until `shutdown` turns true, then drains.
    /// Returns whether every connection finished by itself.
    pub async fn serve(
        self: Arc<Self>,
        listener: TcpListener,
        shutdown: watch::Receiver<bool>,
    ) -> bool {
        let me = self.clone();
        crate::accept::accept_until(
            listener,
            shutdown,
            sockets(&self.limits) + self.limits.handshake.max,
            self.limits.drain_timeout,
            move |sock, stop| me.clone().connection(sock, stop),
        )
        .await
    }

    /// Reserves `bytes` of the global budget (capped at the whole budget),
    /// or `None` when the server shuts down or the connection's writer has
    /// given up while waiting.
    async fn reserve(
        &self,
        share: &Shares,
        bytes: u64,
        shutdown: &mut watch::Receiver<bool>,
        tx: &mpsc::Sender<(Frame, Permits)>,
    ) -> Option<Budget> {
        // The connection's share first (capped at the share, so one large
        // request can never wait for more than the share holds), then the
        // server's budget.
        let units = self.units(bytes);
        let mine = units.min(self.share_units());
        let both = async {
            let c = share
                .connection
                .clone()
                .acquire_many_owned(mine)
                .await
                .ok()?;
            let p = match &share.principal {
                Some(p) => {
                    let n = units.min(self.principal_units());
                    Some(p.clone().acquire_many_owned(n).await.ok()?)
                }
                None => None,
            };
            let s = self.bytes.clone().acquire_many_owned(units).await.ok()?;
            Some(Budget {
                _connection: c,
                _principal: p,
                _server: s,
            })
        };
        tokio::select! {
            b = both => b,
            _ = shutdown.changed() => None,
            _ = tx.closed() => None,
        }
    }

    /// Budget units one principal's connections may hold: half the budget.
    fn principal_units(&self) -> u32 {
        let total = (self.limits.max_inflight_bytes / BYTE_UNIT).max(1);
        (total / PRINCIPAL_SHARE).max(1) as u32
    }

    /// Budget units one connection may hold: a quarter of the budget.
    fn share_units(&self) -> u32 {
        let total = (self.limits.max_inflight_bytes / BYTE_UNIT).max(1);
        (total / CONNECTION_SHARE).max(1) as u32
    }

    fn units(&self, bytes: u64) -> u32 {
        let total = (self.limits.max_inflight_bytes / BYTE_UNIT).max(1);
        bytes.div_ceil(BYTE_UNIT).clamp(1, total) as u32
    }

    async fn connection(self: Arc<Self>, sock: TcpStream, mut shutdown: watch::Receiver<bool>) {
        let _ = sock.set_nodelay(true);
        let Ok(addr) = sock.peer_addr() else { return };
        let (rd, wr) = sock.into_split();
        let mut rd = BufReader::with_capacity(256 << 10, rd);
        let mut wr = BufWriter::with_capacity(256 << 10, wr);
        let Some(mut slot) = self.handshakes.enter(addr.ip()) else {
            tracing::warn!(%addr, "too many handshakes at once; closing one");
            return;
        };
        let deadline = self.limits.handshake.timeout;
        let shaken = tokio::select! {
            r = tokio::time::timeout(deadline, self.handshake(&mut rd, &mut wr)) => match r {
                Ok(r) => r,
                Err(_) => {
                    tracing::debug!(%addr, ?deadline, "handshake too slow; closing");
                    return;
                }
            },
            _ = &mut slot.evicted => {
                tracing::debug!(%addr, "handshake evicted by a newer one; closing");
                return;
            }
        };
        drop(slot);
        let Some((peer, seals, _established, seat)) = self.place(addr, shaken) else {
            return;
        };
        let evicted = seat.as_ref().map(|s| s.evicted.clone());
        let peer = Arc::new(peer);
        let encrypted = seals.as_ref().is_some_and(|(s, _)| s.encrypts());
        let (send_seal, mut recv_seal) = match seals {
            Some((s, r)) => (Some(s), Some(r)),
            None => (None, None),
        };
        self.service.connection_event(true);
        let (tx, mut rx) =
            mpsc::channel::<(Frame, Permits)>(self.limits.max_in_flight as usize + 4);
        let write_timeout = self.limits.write_timeout;
        // When the write in progress last made progress (ms since `epoch`,
        // plus one), or 0 while the writer waits for a reply: a watchdog
        // closes the connection when a write makes no progress for the
        // write timeout (a slow reader is fine; a stalled one is not). One
        // atomic store per chunk instead of a timer per reply.
        let epoch = Instant::now();
        let busy = Arc::new(AtomicU64::new(0));
        let busy_w = busy.clone();
        let wire = Wire::shared(wr, send_seal);
        let wire_w = wire.clone();
        let writer = tokio::spawn(async move {
            let _broken_at_exit = wire_w.break_on_drop();
            let stamp = || epoch.elapsed().as_millis() as u64 + 1;
            // What is queued goes out in one flush, the wire held
            // throughout (a handler sending its own reply finds it free
            // only when the buffer is empty).
            'frames: while let Some(first) = rx.recv().await {
                let mut w = wire_w.lock().await;
                let mut next = Some(first);
                while let Some((f, permits)) = next.take() {
                    busy_w.store(stamp(), Ordering::Relaxed);
                    let written = w
                        .write_progress(f, || busy_w.store(stamp(), Ordering::Relaxed))
                        .await;
                    drop(permits);
                    if let Err(e) = written {
                        tracing::debug!(error = %e, "reply not written; closing");
                        break 'frames;
                    }
                    next = rx.try_recv().ok();
                }
                busy_w.store(stamp(), Ordering::Relaxed);
                let flushed = w.flush().await;
                busy_w.store(0, Ordering::Relaxed);
                if let Err(e) = flushed {
                    tracing::debug!(error = %e, "reply not written; closing");
                    break;
                }
            }
            busy_w.store(0, Ordering::Relaxed);
            // Dropping the receiver makes every further reply fail to send,
            // which stops the reading loop too.
            drop(rx);
            let _ = tokio::time::timeout(write_timeout, async {
                wire_w.lock().await.shutdown().await;
            })
            .await;
        });
        let watched = writer.abort_handle();
        let wire_d = wire.clone();
        tokio::spawn(async move {
            let limit_ms = write_timeout.as_millis() as u64;
            let mut tick =
                tokio::time::interval((write_timeout / 4).max(Duration::from_millis(10)));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            while !watched.is_finished() {
                tick.tick().await;
                let started = busy.load(Ordering::Relaxed);
                let now = epoch.elapsed().as_millis() as u64 + 1;
                if started != 0 && now.saturating_sub(started) > limit_ms {
                    tracing::debug!(timeout = ?write_timeout, "peer does not take replies; closing");
                    watched.abort();
                    // The writer may have stopped within a frame: close
                    // the socket (nothing more is sent on it).
                    wire_d.break_off();
                    let _ = tokio::time::timeout(write_timeout, async {
                        wire_d.lock().await.shutdown().await;
                    })
                    .await;
                    break;
                }
            }
        });
        let slots = Arc::new(Semaphore::new(self.limits.max_in_flight as usize));
        let share = Shares {
            connection: Arc::new(Semaphore::new(self.share_units() as usize)),
            principal: seat.as_ref().and_then(|s| s.budget.clone()),
        };
        let lim = &self.limits;
        let reply = |opcode: u16, tag: u64, err: WireError| {
            frame_raw(opcode, tag, self.service.error_header(err), Bytes::new())
        };
        loop {
            let Ok(slot) = slots.clone().acquire_owned().await else {
                break;
            };
            if tx.is_closed() || wire.is_broken() {
                break;
            }
            if !encrypted && self.service.requires_encryption() {
                // Encryption became required after this connection began
                // (an OSD learns it from the MDS): no clear frame after that.
                tracing::info!("closing a clear connection: encryption is now required");
                break;
            }
            let got = tokio::select! {
                r = read_prefix(&mut rd, &lim.frame, lim.idle_timeout, lim.io_timeout) => r,
                _ = shutdown.changed() => break,
                // The writer gave up (the peer does not take replies).
                _ = tx.closed() => break,
                // Another connection took this one's seat: it closes now,
                // abandoning the replies it has not written.
                _ = told(&evicted) => {
                    wire.break_off();
                    break;
                }
            };
            if let Some(s) = &seat {
                s.touch();
            }
            // Reserve the body's bytes in the global budget before reading
            // (and allocating) it.
            let got = match got {
                Ok(p) => {
                    let body = u64::from(p.header_len) + u64::from(p.payload_len);
                    let Some(permit) = self.reserve(&share, body, &mut shutdown, &tx).await else {
                        break;
                    };
                    read_body(&mut rd, &p, lim.io_timeout, recv_seal.as_mut())
                        .await
                        .map(|f| (f, permit))
                }
                Err(e) => Err(e),
            };
            let (f, mut bytes_permit) = match got {
                Ok(f) => f,
                Err(ReadError::Bad { err, tag, in_sync }) => {
                    tracing::debug!(error = %err, "bad frame");
                    self.service.bad_frame();
                    let r = reply(0, tag.unwrap_or(0), WireError::bad("frame", err));
                    let _ = tx.send((r, None)).await;
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
            if !encrypted && self.service.requires_encryption() {
                break; // required while this frame was read: not served
            }
            if f.kind != Kind::Request {
                let err = WireError::bad("frame kind", format!("{:?} after the handshake", f.kind));
                let _ = tx.send((reply(f.opcode, f.tag, err), None)).await;
                break;
            }
            let admitted = match self.service.admit(&peer, &f) {
                Ok(a) => a,
                Err(err) => {
                    let _ = tx.send((reply(f.opcode, f.tag, err), None)).await;
                    continue;
                }
            };
            if admitted.reply_bytes > 0 {
                // The reply's data, too, before the request allocates it:
                // body and reply in one reservation (never hold one share
                // while waiting for another, which could wait forever).
                let body = (f.header.len() + f.payload.len()) as u64;
                drop(bytes_permit);
                let all = body + admitted.reply_bytes;
                let Some(p) = self.reserve(&share, all, &mut shutdown, &tx).await else {
                    break;
                };
                bytes_permit = p;
            }
            let answer = Answer {
                service: self.service.clone(),
                peer: peer.clone(),
                tx: tx.clone(),
                wire: wire.clone(),
                max_header: lim.frame.max_header as usize,
                write_timeout,
                permits: Some((bytes_permit, slot)),
            };
            // The connection's only request, and a short one: started
            // here, so a reply ready at once costs no hop to another task
            // (and on a small machine no thread wake-up). One that must
            // wait for anything (a lock, the network) goes on as a task of
            // its own, so the connection reads on meanwhile.
            let alone = slots.available_permits() + 1 >= self.limits.max_in_flight as usize;
            let run = answer.run(admitted.request, f);
            if admitted.quick && alone {
                if let Some(rest) = first_step(run).await {
                    tokio::spawn(rest);
                }
            } else {
                tokio::spawn(run);
            }
        }
        // Finish what is in flight on this connection before closing it.
        let _ = slots.acquire_many(self.limits.max_in_flight).await;
        drop(tx);
        let _ = writer.await;
        self.service.connection_event(false);
    }

    /// After a handshake: the peer, its seals, a socket permit and its
    /// seat, or `None` (logged) when it is refused.
    #[expect(clippy::type_complexity, reason = "one private call site")]
    fn place(
        &self,
        addr: std::net::SocketAddr,
        shaken: Result<(S::Peer, Option<(FrameSeal, FrameSeal)>), HandshakeError>,
    ) -> Option<(
        S::Peer,
        Option<(FrameSeal, FrameSeal)>,
        OwnedSemaphorePermit,
        Option<crate::seats::Seat>,
    )> {
        let (peer, seals) = match shaken {
            Ok(p) => p,
            Err(HandshakeError::Refused(e)) if e.code == ErrorCode::Unauthenticated => {
                tracing::warn!(error = %e, "authentication refused");
                return None;
            }
            Err(e) => {
                tracing::debug!(error = %e, "handshake failed");
                return None;
            }
        };
        // The socket permit first: a connection refused for want of one
        // must not have evicted anyone (evicted ones close at once, so
        // the margin of sockets is free again soon).
        let Ok(established) = self.established.clone().try_acquire_owned() else {
            tracing::warn!(%addr, limit = self.limits.max_connections, "too many sockets; closing one");
            return None;
        };
        let seat = match self.service.principal_of(&peer) {
            None => None,
            Some(p) => match self.seats.take(p) {
                Ok(seat) => Some(seat),
                Err(_) => {
                    tracing::warn!(%addr, principal = p, limit = self.limits.max_connections, "too many connections, and every principal holds one; closing it");
                    return None;
                }
            },
        };
        Some((peer, seals, established, seat))
    }

    /// Reads the Hello, asks the service who the peer is, and — for a
    /// peer with a key — sends a challenge with the server's proof and
    /// checks the client's proof. Returns the peer and the frame seals
    /// (send, receive) of an authenticated connection.
    async fn handshake<R, W>(
        &self,
        rd: &mut R,
        wr: &mut W,
    ) -> Result<(S::Peer, Option<(FrameSeal, FrameSeal)>), HandshakeError>
    where
        R: tokio::io::AsyncRead + Unpin,
        W: tokio::io::AsyncWrite + Unpin,
    {
        // Before a peer has proved who it is, it gets no room for big frames.
        let hello_limits = Limits {
            max_header: 4096,
            max_payload: 0,
        };
        let io = self.limits.io_timeout;
        let wt = self.limits.write_timeout;
        let refuse = |code: ErrorCode, why: String| WireError::new(code, why);
        let f = read_frame(rd, &hello_limits, io, io, None).await?;
        let who = if f.kind != Kind::Hello {
            Err(refuse(
                ErrorCode::Handshake,
                format!("expected Hello, got {:?}", f.kind),
            ))
        } else {
            decode::<Hello>(&f.header)
                .map_err(|e| refuse(ErrorCode::Handshake, e.to_string()))
                .and_then(|h| Ok((h.encrypt, self.service.authenticate(&h)?)))
        };
        let (asked, (key, peer)) = match who {
            Ok(w) => w,
            Err(e) => {
                answer(wr, f.tag, Welcome::Refused(e.clone()), wt).await?;
                return Err(HandshakeError::Refused(e));
            }
        };
        let Some(key) = key else {
            answer(wr, f.tag, self.service.welcome(), wt).await?;
            return Ok((peer, None));
        };
        let encrypt = asked || self.service.requires_encryption();
        let nonce = random_bytes();
        let keys = HandshakeKeys::derive(&key, &f.header, &nonce, encrypt);
        let challenge = Welcome::Challenge {
            nonce,
            proof: keys.server_proof,
            encrypt,
        };
        answer(wr, f.tag, challenge, wt).await?;
        let p = read_frame(rd, &hello_limits, io, io, None).await?;
        let proved = p.kind == Kind::Hello
            && decode::<Proof>(&p.header).is_ok_and(|pr| same(&pr.proof, &keys.client_proof));
        if !proved {
            let e = refuse(
                ErrorCode::Unauthenticated,
                "the client could not prove it holds the key it names (wrong, rotated or \
                 removed key)"
                    .into(),
            );
            answer(wr, p.tag, Welcome::Refused(e.clone()), wt).await?;
            return Err(HandshakeError::Refused(e));
        }
        answer(wr, p.tag, self.service.welcome(), wt).await?;
        Ok((
            peer,
            Some((
                FrameSeal::new(&keys.server_to_client, encrypt),
                FrameSeal::new(&keys.client_to_server, encrypt),
            )),
        ))
    }
}

/// Writes one handshake answer within the write timeout.
async fn answer<W: tokio::io::AsyncWrite + Unpin>(
    w: &mut W,
    tag: u64,
    welcome: Welcome,
    wt: Duration,
) -> Result<(), HandshakeError> {
    let f = frame(Kind::Welcome, 0, tag, &welcome, Bytes::new());
    tokio::time::timeout(wt, async {
        write_frame(w, &f).await?;
        w.flush().await
    })
    .await
    .map_err(|_| HandshakeError::WriteTimeout(wt))?
    .map_err(HandshakeError::Write)
}

/// Why a handshake did not open a connection.
#[derive(Debug, thiserror::Error)]
enum HandshakeError {
    /// The Hello did not arrive or did not parse as a frame.
    #[error("reading the hello: {0}")]
    Read(#[from] ReadError),
    /// The Welcome could not be written.
    #[error("writing the welcome: {0}")]
    Write(#[from] std::io::Error),
    /// The peer did not take the Welcome in time.
    #[error("the welcome was not taken within {0:?}")]
    WriteTimeout(Duration),
    /// The service refused the peer.
    #[error("refused: {0}")]
    Refused(WireError),
}

/// A response frame from an encoded header.
fn frame_raw(opcode: u16, tag: u64, header: Bytes, payload: Bytes) -> Frame {
    Frame {
        kind: Kind::Response,
        opcode,
        tag,
        header,
        payload,
    }
}
