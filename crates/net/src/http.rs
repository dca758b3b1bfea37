//! A small HTTP/1.1 server for what daemons show people and scrapers:
//! `/metrics` and the MDS's dashboard. One request per connection, then
//! close; every cost bounded (connections at once, head and body size,
//! time to read and to write) so an open port costs an attacker as much
//! as it costs us. Written by hand because the whole of what it must do is
//! this file: a framework would bring more code than it saves.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// How much one HTTP server may be made to hold.
#[derive(Debug, Clone, Copy)]
pub struct HttpLimits {
    /// Connections served at once; more are answered 503 and closed.
    pub max_connections: usize,
    /// Of those, from one source address (so one host holding idle
    /// connections cannot lock out the others).
    pub max_per_source: usize,
    /// Loopback peers are not held to `max_per_source`: behind an SSH
    /// tunnel or a local proxy every user is 127.0.0.1, and a local
    /// user must not lock the others out by holding that address's share.
    pub loopback_unlimited: bool,
    /// Request line and headers, bytes.
    pub max_head: usize,
    /// Request body, bytes.
    pub max_body: usize,
    /// Time to receive the whole request.
    pub read_timeout: Duration,
    /// Time to send the whole answer.
    pub write_timeout: Duration,
}

impl Default for HttpLimits {
    /// 64 connections (16 per source address but loopback), 16 KiB of
    /// head, 16 KiB of body, 5 s to read the request, 30 s to send the
    /// answer.
    fn default() -> Self {
        HttpLimits {
            max_connections: 64,
            max_per_source: 16,
            loopback_unlimited: true,
            max_head: 16 << 10,
            max_body: 16 << 10,
            read_timeout: Duration::from_secs(5),
            write_timeout: Duration::from_secs(30),
        }
    }
}

/// A request as the handler sees it.
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// `GET`, `POST`, …
    pub method: String,
    /// The path, without the query.
    pub path: String,
    /// What followed `?` (empty when nothing did).
    pub query: String,
    /// Headers, names lower-cased, in order.
    pub headers: Vec<(String, String)>,
    /// The body (at most [`HttpLimits::max_body`] bytes).
    pub body: Vec<u8>,
    /// Who sent it.
    pub peer: Option<SocketAddr>,
    /// The address of ours it came to (on a wildcard bind, which
    /// interface: loopback or not).
    pub local: Option<SocketAddr>,
}

impl Request {
    /// The first header named `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The value of cookie `name`.
    pub fn cookie(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n == "cookie")
            .flat_map(|(_, v)| v.split(';'))
            .filter_map(|c| c.trim().split_once('='))
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v)
    }

    /// The value of query parameter `name` (not percent-decoded).
    pub fn param(&self, name: &str) -> Option<&str> {
        self.query
            .split('&')
            .filter_map(|p| p.split_once('='))
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v)
    }
}

/// An answer.
#[derive(Debug, Clone)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// `Content-Type`.
    pub content_type: &'static str,
    /// Further headers.
    pub headers: Vec<(&'static str, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Response {
    /// `status` with a plain-text body.
    pub fn text(status: u16, body: impl Into<String>) -> Response {
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            headers: Vec::new(),
            body: body.into().into_bytes(),
        }
    }

    /// 200 with `body` of type `content_type`.
    pub fn ok(content_type: &'static str, body: impl Into<Vec<u8>>) -> Response {
        Response {
            status: 200,
            content_type,
            headers: Vec::new(),
            body: body.into(),
        }
    }

    /// Adds a header.
    pub fn with(mut self, name: &'static str, value: impl Into<String>) -> Response {
        self.headers.push((name, value.into()));
        self
    }
}

/// What answers requests. It runs on a blocking thread, so it may read
/// the disk.
pub type Handler = Arc<dyn Fn(Request) -> Response + Send + Sync>;

/// Serves `handler` on `listener` under `limits` until the task is
/// dropped.
pub async fn serve(listener: TcpListener, handler: Handler, limits: HttpLimits) {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    // Refusals answered at once (a 503 each, for 1 s at most); beyond
    // that a refused connection is closed without one.
    let refusals = Arc::new(Semaphore::new(16));
    let sources: Sources = Arc::default();
    loop {
        let Ok((sock, peer)) = listener.accept().await else {
            // Out of descriptors: let some close before trying again.
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let handler = handler.clone();
        let per_source = if limits.loopback_unlimited && peer.ip().to_canonical().is_loopback() {
            usize::MAX
        } else {
            limits.max_per_source
        };
        let source = SourceSlot::take(
            &sources,
            crate::handshakes::source_of(peer.ip()),
            per_source,
        );
        let slot = slots.clone().try_acquire_owned();
        let (Some(source), Ok(slot)) = (source, slot) else {
            if let Ok(r) = refusals.clone().try_acquire_owned() {
                tokio::spawn(async move {
                    let _r = r;
                    let busy = Response::text(503, "too many connections; try again\n");
                    let _ = tokio::time::timeout(Duration::from_secs(1), send(sock, busy)).await;
                });
            }
            continue;
        };
        tokio::spawn(async move {
            let _slots = (slot, source);
            let answer =
                match tokio::time::timeout(limits.read_timeout, read_request(&sock, &limits)).await
                {
                    Ok(Ok(mut req)) => {
                        req.peer = Some(peer);
                        req.local = sock.local_addr().ok();
                        match tokio::task::spawn_blocking(move || handler(req)).await {
                            Ok(r) => r,
                            Err(_) => Response::text(500, "the handler failed\n"),
                        }
                    }
                    Ok(Err(r)) => r,
                    Err(_) => Response::text(408, "request not received in time\n"),
                };
            let _ = tokio::time::timeout(limits.write_timeout, send(sock, answer)).await;
        });
    }
}

/// Connections held now per source address.
type Sources = Arc<std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>>;

/// One connection's place among its source's; dropping it frees it.
struct SourceSlot {
    ip: std::net::IpAddr,
    sources: Sources,
}

impl SourceSlot {
    fn take(sources: &Sources, ip: std::net::IpAddr, max: usize) -> Option<SourceSlot> {
        let mut m = sources.lock().unwrap_or_else(|e| e.into_inner());
        let n = m.entry(ip).or_insert(0);
        if *n >= max.max(1) {
            return None;
        }
        *n += 1;
        Some(SourceSlot {
            ip,
            sources: sources.clone(),
        })
    }
}

impl Drop for SourceSlot {
    fn drop(&mut self) {
        let mut m = self.sources.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = m.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.ip);
            }
        }
    }
}

/// Reads one request, or the answer that refuses it.
async fn read_request(sock: &TcpStream, limits: &HttpLimits) -> Result<Request, Response> {
    let mut buf = Vec::with_capacity(1024);
    let mut searched: usize = 0;
    let head_end = loop {
        // Only the bytes read since the last look (and 3 before them).
        let from = searched.saturating_sub(3);
        if let Some(i) = buf[from..].windows(4).position(|w| w == b"\r\n\r\n") {
            break from + i;
        }
        searched = buf.len();
        if buf.len() > limits.max_head {
            return Err(Response::text(431, "request head too large\n"));
        }
        if read_some(sock, &mut buf, limits.max_head + 4).await? == 0 {
            return Err(Response::text(400, "connection closed mid-request\n"));
        }
    };
    let head = std::str::from_utf8(&buf[..head_end])
        .map_err(|_| Response::text(400, "request head is not UTF-8\n"))?;
    let mut lines = head.split("\r\n");
    let line = lines.next().unwrap_or_default();
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Response::text(400, "bad request line\n"));
    };
    if !version.starts_with("HTTP/1.") {
        return Err(Response::text(505, "HTTP/1.x only\n"));
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let mut req = Request {
        method: method.into(),
        path: path.into(),
        query: query.into(),
        ..Request::default()
    };
    for l in lines {
        // No folded lines, no space before the colon, no bare CR or LF:
        // a proxy in front must not read this request another way.
        let Some((n, v)) = l.split_once(':') else {
            return Err(Response::text(400, "bad header line\n"));
        };
        let name_ok = !n.is_empty()
            && n.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        if !name_ok || v.contains(['\r', '\n']) {
            return Err(Response::text(400, "bad header line\n"));
        }
        req.headers.push((n.to_ascii_lowercase(), v.trim().into()));
    }
    if req.header("transfer-encoding").is_some() {
        return Err(Response::text(411, "send a Content-Length\n"));
    }
    // Headers a proxy and this server must not pick differently from.
    for once in ["host", "origin", "authorization", "content-length"] {
        if req.headers.iter().filter(|(n, _)| n == once).count() > 1 {
            return Err(Response::text(400, format!("header {once} given twice\n")));
        }
    }
    let mut lengths = req.headers.iter().filter(|(n, _)| n == "content-length");
    let len: usize = match (lengths.next(), lengths.next()) {
        (None, _) => 0,
        (Some((_, v)), None) if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) => v
            .parse()
            .map_err(|_| Response::text(413, "request body too large\n"))?,
        _ => return Err(Response::text(400, "bad or repeated Content-Length\n")),
    };
    if len > limits.max_body {
        return Err(Response::text(413, "request body too large\n"));
    }
    let mut body = buf.split_off(head_end + 4);
    while body.len() < len {
        if read_some(sock, &mut body, len).await? == 0 {
            return Err(Response::text(400, "connection closed mid-body\n"));
        }
    }
    body.truncate(len);
    req.body = body;
    Ok(req)
}

/// Reads what is there (up to `cap` bytes in `buf` in all).
async fn read_some(sock: &TcpStream, buf: &mut Vec<u8>, cap: usize) -> Result<usize, Response> {
    let mut chunk = [0u8; 4096];
    let want = cap.saturating_sub(buf.len()).clamp(1, chunk.len());
    loop {
        sock.readable()
            .await
            .map_err(|_| Response::text(400, "read failed\n"))?;
        match sock.try_read(&mut chunk[..want]) {
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                return Ok(n);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(_) => return Err(Response::text(400, "read failed\n")),
        }
    }
}

/// Sends `r` and closes.
async fn send(mut sock: TcpStream, r: Response) -> std::io::Result<()> {
    let reason = match r.status {
        200 => "OK",
        204 => "No Content",
        303 => "See Other",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        411 => "Length Required",
        413 => "Content Too Large",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "Error",
    };
    let mut head = format!(
        "HTTP/1.1 {} {reason}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
        r.status,
        r.content_type,
        r.body.len()
    );
    for (n, v) in &r.headers {
        // A value never ends the header early.
        let v: String = v.chars().filter(|c| *c != '\r' && *c != '\n').collect();
        head.push_str(&format!("{n}: {v}\r\n"));
    }
    head.push_str("\r\n");
    sock.write_all(head.as_bytes()).await?;
    sock.write_all(&r.body).await?;
    sock.shutdown().await?;
    // Drain what the client still sends so closing does not reset the
    // answer away; a client that neither sends nor closes gets 1 s.
    let mut sink = [0u8; 1024];
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        while sock.read(&mut sink).await.unwrap_or(0) > 0 {}
    })
    .await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn server(limits: HttpLimits) -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let at = l.local_addr().expect("addr");
        let h: Handler = Arc::new(|r: Request| {
            Response::text(200, format!("{} {} {}", r.method, r.path, r.body.len()))
        });
        tokio::spawn(serve(l, h, limits));
        at
    }

    async fn ask(at: SocketAddr, raw: &[u8]) -> String {
        let mut s = TcpStream::connect(at).await.expect("connect");
        s.write_all(raw).await.expect("send");
        let mut out = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
        String::from_utf8_lossy(&out).into_owned()
    }

    #[tokio::test]
    async fn requests_a_proxy_could_read_another_way_are_refused() {
        let at = server(HttpLimits::default()).await;
        let ok = ask(
            at,
            b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc",
        )
        .await;
        assert!(
            ok.starts_with("HTTP/1.1 200") && ok.ends_with("POST /x 3"),
            "{ok}"
        );
        for bad in [
            &b"POST /x HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc"[..],
            b"POST /x HTTP/1.1\r\nContent-Length: +3\r\n\r\nabc",
            b"POST /x HTTP/1.1\r\nContent-Length : 3\r\n\r\nabc",
            b"GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n",
            b"GET / HTTP/1.1\r\nno colon\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
            b"GET /  HTTP/1.1\r\n\r\n",
            b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
        ] {
            let a = ask(at, bad).await;
            assert!(
                a.starts_with("HTTP/1.1 400") || a.starts_with("HTTP/1.1 411"),
                "{:?} -> {a}",
                String::from_utf8_lossy(bad)
            );
        }
        let huge = ask(
            at,
            b"POST /x HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n",
        )
        .await;
        assert!(huge.starts_with("HTTP/1.1 413"), "{huge}");
    }

    #[tokio::test]
    async fn one_source_cannot_hold_every_connection() {
        let limits = HttpLimits {
            max_per_source: 4,
            loopback_unlimited: false,
            read_timeout: Duration::from_secs(3),
            ..HttpLimits::default()
        };
        let at = server(limits).await;
        // Four idle connections from this address hold its share...
        let mut idle = Vec::new();
        for _ in 0..4 {
            idle.push(TcpStream::connect(at).await.expect("connect"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        let refused = ask(at, b"GET / HTTP/1.1\r\n\r\n").await;
        assert!(refused.starts_with("HTTP/1.1 503"), "{refused}");
        // ...and are let go after the read timeout.
        drop(idle);
        tokio::time::sleep(Duration::from_millis(200)).await;
        let served = ask(at, b"GET / HTTP/1.1\r\n\r\n").await;
        assert!(served.starts_with("HTTP/1.1 200"), "{served}");
    }
}
