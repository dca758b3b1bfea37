//! The shared server loop over real sockets, with a small service that
//! answers each request with as many bytes as it asks for: a client that
//! never reads its replies cannot hold the byte budget past the write
//! timeout, and others are served again once its connection is dropped.
#![expect(clippy::unwrap_used, reason = "tests: a panic is the failure report")]

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use net::frame_io::{frame, read_frame, write_frame};
use net::serve::{Admitted, ServeLimits, Server, Service};
use proto::msg::{Hello, Welcome, decode, encode};
use proto::{ErrorCode, Frame, Kind, Limits, PROTOCOL_VERSION, WireError};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

/// Answers a request whose header is a `u32` n with n bytes of payload.
struct Bulk;

impl Service for Bulk {
    type Request = u32;
    /// The principal a client named `p:N` speaks for (N), else none.
    type Peer = Option<u64>;

    /// Everyone, unauthenticated: this loop test sends frames by hand.
    fn authenticate(
        &self,
        h: &Hello,
    ) -> Result<(Option<proto::auth::Secret>, Option<u64>), WireError> {
        Ok((
            None,
            h.client.strip_prefix("p:").and_then(|n| n.parse().ok()),
        ))
    }

    fn principal_of(&self, peer: &Option<u64>) -> Option<u64> {
        *peer
    }

    fn welcome(&self) -> Welcome {
        Welcome::Ok {
            version: PROTOCOL_VERSION,
            cluster_id: "t".into(),
            osd_id: 0,
            max_payload: 8 << 20,
            max_in_flight: 8,
            peers: Vec::new(),
        }
    }

    fn admit(&self, _peer: &Option<u64>, f: &Frame) -> Result<Admitted<u32>, WireError> {
        let n: u32 = decode(&f.header)?;
        Ok(Admitted {
            request: n,
            reply_bytes: u64::from(n),
            quick: n <= QUICK,
        })
    }

    async fn handle(self: Arc<Self>, _peer: Arc<Option<u64>>, n: u32, _f: Frame) -> (Bytes, Bytes) {
        if n == SLOW {
            tokio::time::sleep(SLOW_FOR).await;
        }
        (
            Bytes::from(encode(&Ok::<u32, WireError>(n))),
            Bytes::from(vec![7u8; n as usize]),
        )
    }

    fn error_header(&self, err: WireError) -> Bytes {
        Bytes::from(encode(&Err::<u32, WireError>(err)))
    }
}

/// `Bulk` requests for at most this many bytes are quick: a connection
/// with nothing else in flight answers them itself.
const QUICK: u32 = 4096;

/// A quick request that waits [`SLOW_FOR`] before it answers (as a read
/// behind a lock or a network call would).
const SLOW: u32 = 4095;

/// How long a [`SLOW`] request waits.
const SLOW_FOR: Duration = Duration::from_millis(800);

/// Frames with up to 8 MiB of payload.
fn big_frames() -> Limits {
    Limits {
        max_header: 4096,
        max_payload: 8 << 20,
    }
}

async fn hello(addr: &str) -> TcpStream {
    hello_as(addr, "test").await
}

/// A connection whose Hello names `client` (`p:N` speaks for principal N).
async fn hello_as(addr: &str, client: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let h = Hello {
        version: PROTOCOL_VERSION,
        cluster_id: "t".into(),
        osd_id: 0,
        client: client.into(),
        credential: proto::auth::Credential::None,
        nonce: [0; 16],
        encrypt: false,
    };
    write_frame(&mut s, &frame(Kind::Hello, 0, 0, &h, Bytes::new()))
        .await
        .unwrap();
    let lim = Limits {
        max_header: 4096,
        max_payload: 0,
    };
    let t = Duration::from_secs(5);
    let f = read_frame(&mut s, &lim, t, t, None).await.unwrap();
    assert!(matches!(
        decode::<Welcome>(&f.header).unwrap(),
        Welcome::Ok { .. }
    ));
    s
}

/// A `Bulk` server with an 8 MiB byte budget and `write_timeout`: its
/// address, its stop switch and its task.
async fn serve_bulk(
    write_timeout: Duration,
) -> (
    String,
    tokio::sync::watch::Sender<bool>,
    tokio::task::JoinHandle<bool>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let limits = ServeLimits {
        frame: big_frames(),
        max_connections: 8,
        max_connections_per_principal: 512,
        handshake: Default::default(),
        max_in_flight: 8,
        max_inflight_bytes: 8 << 20,
        idle_timeout: Duration::from_secs(60),
        io_timeout: Duration::from_secs(5),
        write_timeout,
        drain_timeout: Duration::from_secs(1),
    };
    let (stop, rx) = tokio::sync::watch::channel(false);
    let server = tokio::spawn(Server::new(Arc::new(Bulk), limits).serve(listener, rx));
    (addr, stop, server)
}

async fn ask(s: &mut TcpStream, tag: u64, n: u32) {
    write_frame(s, &frame(Kind::Request, 1, tag, &n, Bytes::new()))
        .await
        .unwrap();
    s.flush().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_cannot_hold_the_byte_budget() {
    // Room for two 4 MiB replies in all.
    let (addr, stop, server) = serve_bulk(Duration::from_millis(400)).await;
    // The hog asks for far more than the socket buffers hold and never reads.
    let mut hog = hello(&addr).await;
    for tag in 1..=6 {
        ask(&mut hog, tag, 4 << 20).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Another client is served once the hog's stuck write times out.
    let mut other = hello(&addr).await;
    let t0 = Instant::now();
    ask(&mut other, 99, 4 << 20).await;
    let lim = big_frames();
    let f = read_frame(
        &mut other,
        &lim,
        Duration::from_secs(10),
        Duration::from_secs(10),
        None,
    )
    .await
    .unwrap();
    assert_eq!(f.tag, 99);
    assert_eq!(f.payload.len(), 4 << 20);
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "served {:?} after asking",
        t0.elapsed()
    );
    // The hog's connection is closed: reading it ends (after whatever the
    // socket buffers held), it does not block.
    let drained = tokio::time::timeout(Duration::from_secs(10), async {
        let mut buf = vec![0u8; 1 << 20];
        loop {
            use tokio::io::AsyncReadExt;
            match hog.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(drained.is_ok(), "the hog's connection was closed");
    let _ = stop.send(true);
    server.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_request_is_answered_and_the_connection_goes_on() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (stop, rx) = tokio::sync::watch::channel(false);
    let limits = ServeLimits {
        frame: big_frames(),
        ..ServeLimits::default()
    };
    let server = tokio::spawn(Server::new(Arc::new(Bulk), limits).serve(listener, rx));
    let mut c = hello(&addr).await;
    // A header that is not a u32: refused with an error on its tag.
    write_frame(&mut c, &frame(Kind::Request, 1, 5, &"nope", Bytes::new()))
        .await
        .unwrap();
    ask(&mut c, 6, 16).await;
    let lim = big_frames();
    let t = Duration::from_secs(5);
    // Replies carry their request's tag and may come in either order.
    let mut got = [
        read_frame(&mut c, &lim, t, t, None).await.unwrap(),
        read_frame(&mut c, &lim, t, t, None).await.unwrap(),
    ];
    got.sort_by_key(|f| f.tag);
    assert_eq!(got[0].tag, 5);
    let e = decode::<Result<u32, WireError>>(&got[0].header)
        .unwrap()
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::BadRequest, "{e}");
    assert_eq!((got[1].tag, got[1].payload.len()), (6, 16));
    let _ = stop.send(true);
    server.await.unwrap();
}

/// A request whose reply takes the whole byte budget is served: its body
/// and reply are reserved together, never one while waiting for the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_as_large_as_the_budget_is_served() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let limits = ServeLimits {
        frame: big_frames(),
        max_inflight_bytes: 8 << 20,
        ..ServeLimits::default()
    };
    let (stop, rx) = tokio::sync::watch::channel(false);
    let server = tokio::spawn(Server::new(Arc::new(Bulk), limits).serve(listener, rx));
    let mut c = hello(&addr).await;
    let lim = big_frames();
    for tag in 1..=3 {
        ask(&mut c, tag, 8 << 20).await;
        let t = Duration::from_secs(10);
        let f = read_frame(&mut c, &lim, t, t, None).await.unwrap();
        assert_eq!((f.tag, f.payload.len()), (tag, 8 << 20));
    }
    let _ = stop.send(true);
    server.await.unwrap();
}

/// Security finding 1: one connection holds at most its share (a quarter)
/// of the byte budget, so others are served at once even while its stuck
/// replies have not timed out yet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_connection_holds_only_its_share_of_the_budget() {
    // A write timeout far longer than the test: only the share lets others in.
    let (addr, stop, server) = serve_bulk(Duration::from_secs(60)).await;
    let mut hog = hello(&addr).await;
    // 3 MiB replies: the hog's first holds 3 MiB of the 8 MiB budget and
    // the connection's whole 2 MiB share, so its next ones wait.
    for tag in 1..=6 {
        ask(&mut hog, tag, 3 << 20).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut other = hello(&addr).await;
    let t0 = Instant::now();
    ask(&mut other, 99, 3 << 20).await;
    let lim = big_frames();
    let f = read_frame(
        &mut other,
        &lim,
        Duration::from_secs(5),
        Duration::from_secs(5),
        None,
    )
    .await
    .unwrap();
    assert_eq!((f.tag, f.payload.len()), (99, 3 << 20));
    assert!(
        t0.elapsed() < Duration::from_secs(2),
        "served only {:?} after asking",
        t0.elapsed()
    );
    drop(hog);
    let _ = stop.send(true);
    server.await.unwrap();
}

/// Slow readers under one key hold at most half of the byte budget
/// together (each connection a quarter): four connections of one
/// principal that never read their replies leave another principal
/// served at once. Without the principal's share they would hold it all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_principals_slow_readers_hold_only_half_the_budget() {
    let (addr, stop, server) = serve_bulk(Duration::from_secs(60)).await;
    let mut hogs = Vec::new();
    for _ in 0..4 {
        let mut hog = hello_as(&addr, "p:1").await;
        for tag in 1..=4 {
            ask(&mut hog, tag, 3 << 20).await;
        }
        hogs.push(hog);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut other = hello_as(&addr, "p:2").await;
    let t0 = Instant::now();
    ask(&mut other, 99, 3 << 20).await;
    let lim = big_frames();
    let t = Duration::from_secs(5);
    let f = read_frame(&mut other, &lim, t, t, None).await.unwrap();
    assert_eq!((f.tag, f.payload.len()), (99, 3 << 20));
    assert!(
        t0.elapsed() < Duration::from_secs(2),
        "served only {:?} after asking",
        t0.elapsed()
    );
    drop(hogs);
    let _ = stop.send(true);
    server.await.unwrap();
}

/// Quick requests are answered on the connection's own task when they are
/// alone, and on tasks of their own when others are in flight: either
/// way every request gets its own reply, at depth one and pipelined.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quick_requests_are_answered_alone_and_pipelined() {
    let (addr, stop, server) = serve_bulk(Duration::from_secs(5)).await;
    let mut c = hello(&addr).await;
    let lim = big_frames();
    let t = Duration::from_secs(5);
    // Depth one: each request alone on the connection.
    for tag in 1..=20u64 {
        let n = (tag as u32 * 97) % QUICK;
        ask(&mut c, tag, n).await;
        let f = read_frame(&mut c, &lim, t, t, None).await.unwrap();
        assert_eq!((f.tag, f.payload.len()), (tag, n as usize));
    }
    // Pipelined: quick and bulk requests mixed, all sent before any reply
    // is read (at most 8 run at once; the rest wait for a slot).
    let sizes: Vec<u32> = (0..40u32)
        .map(|i| if i % 3 == 0 { 64 << 10 } else { i * 100 })
        .collect();
    for (i, n) in sizes.iter().enumerate() {
        ask(&mut c, 100 + i as u64, *n).await;
    }
    let mut seen = std::collections::BTreeMap::new();
    for _ in 0..sizes.len() {
        let f = read_frame(&mut c, &lim, t, t, None).await.unwrap();
        assert!(f.payload.iter().all(|b| *b == 7));
        assert!(
            seen.insert(f.tag, f.payload.len()).is_none(),
            "tag {} twice",
            f.tag
        );
    }
    for (i, n) in sizes.iter().enumerate() {
        assert_eq!(
            seen.get(&(100 + i as u64)),
            Some(&(*n as usize)),
            "request {i}"
        );
    }
    let _ = stop.send(true);
    server.await.unwrap();
}

/// A quick request that has to wait does not hold its connection: the
/// requests sent after it are read and answered meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quick_request_that_waits_does_not_hold_its_connection() {
    let (addr, stop, server) = serve_bulk(Duration::from_secs(5)).await;
    let mut c = hello(&addr).await;
    let lim = big_frames();
    let t = Duration::from_secs(5);
    let t0 = Instant::now();
    ask(&mut c, 1, SLOW).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    ask(&mut c, 2, 10).await;
    let first = read_frame(&mut c, &lim, t, t, None).await.unwrap();
    assert_eq!((first.tag, first.payload.len()), (2, 10));
    assert!(
        t0.elapsed() < SLOW_FOR,
        "answered after {:?}: it waited for the slow request",
        t0.elapsed()
    );
    let second = read_frame(&mut c, &lim, t, t, None).await.unwrap();
    assert_eq!((second.tag, second.payload.len()), (1, SLOW as usize));
    let _ = stop.send(true);
    server.await.unwrap();
}
