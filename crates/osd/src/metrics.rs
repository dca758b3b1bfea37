//! Prometheus metrics of an OSD and the `/metrics` HTTP endpoint (a small
//! handler of our own: one GET, one text response; no web framework).

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::exec::StoreHandle;

/// Label: command name.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OpLabel {
    /// Command.
    pub op: String,
}

/// Label: error code.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CodeLabel {
    /// Error code name.
    pub code: String,
}

/// Label: direction of bytes.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DirLabel {
    /// "in" (written by clients) or "out" (read by clients).
    pub dir: String,
}

/// Every metric an OSD exports.
pub struct Metrics {
    registry: Registry,
    /// Requests by command.
    pub ops: Family<OpLabel, Counter>,
    /// Errors by code.
    pub errors: Family<CodeLabel, Counter>,
    /// Payload bytes by direction.
    pub bytes: Family<DirLabel, Counter>,
    /// Request latency by command, seconds.
    pub latency: Family<OpLabel, Histogram>,
    /// Open connections.
    pub connections: Gauge,
    store_total: Gauge,
    store_free: Gauge,
    store_objects: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A registry with every metric registered.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("tessera_osd");
        let ops = Family::<OpLabel, Counter>::default();
        let errors = Family::<CodeLabel, Counter>::default();
        let bytes = Family::<DirLabel, Counter>::default();
        let latency = Family::<OpLabel, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(2e-5, 2.0, 20))
        });
        let connections = Gauge::default();
        let (store_total, store_free, store_objects) =
            (Gauge::default(), Gauge::default(), Gauge::default());
        registry.register("requests", "Requests served, by command", ops.clone());
        registry.register(
            "errors",
            "Requests that failed, by error code",
            errors.clone(),
        );
        registry.register(
            "payload_bytes",
            "Object data bytes moved, by direction",
            bytes.clone(),
        );
        registry.register(
            "request_seconds",
            "Request latency in seconds, by command",
            latency.clone(),
        );
        registry.register(
            "connections",
            "Open client connections",
            connections.clone(),
        );
        registry.register(
            "store_total_bytes",
            "Data area of the store",
            store_total.clone(),
        );
        registry.register(
            "store_free_bytes",
            "Free bytes in the store",
            store_free.clone(),
        );
        registry.register(
            "store_objects",
            "Objects in the store",
            store_objects.clone(),
        );
        Metrics {
            registry,
            ops,
            errors,
            bytes,
            latency,
            connections,
            store_total,
            store_free,
            store_objects,
        }
    }

    /// The text exposition, with store gauges refreshed.
    pub fn render(&self, store: &StoreHandle) -> String {
        if let Ok(s) = store.get() {
            let f = s.statfs();
            self.store_total.set(f.total_bytes as i64);
            self.store_free.set(f.free_bytes as i64);
            self.store_objects.set(f.objects as i64);
        }
        let mut out = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// Serves `GET /metrics` on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, metrics: Arc<Metrics>, store: Arc<StoreHandle>) {
    serve_text(listener, Arc::new(move || metrics.render(&store))).await
}

/// What a `/metrics` endpoint answers with: the text exposition, rendered
/// fresh for each scrape.
pub type Render = Arc<dyn Fn() -> String + Send + Sync>;

/// Serves `GET /metrics` with whatever `render` produces (any daemon's
/// metrics) until the task is dropped.
pub async fn serve_text(listener: TcpListener, render: Render) {
    loop {
        let Ok((mut sock, _)) = listener.accept().await else {
            continue;
        };
        let render = render.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 8192];
            let mut n = 0;
            let read = tokio::time::timeout(Duration::from_secs(5), async {
                while n < buf.len() {
                    let k = sock.read(&mut buf[n..]).await?;
                    if k == 0 {
                        break;
                    }
                    n += k;
                    if buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
                        break;
                    }
                }
                Ok::<_, std::io::Error>(())
            })
            .await;
            if !matches!(read, Ok(Ok(()))) {
                return;
            }
            let req = String::from_utf8_lossy(&buf[..n]);
            let (status, ctype, body) =
                if req.starts_with("GET /metrics ") || req.starts_with("GET /metrics?") {
                    (
                        "200 OK",
                        "text/plain; version=0.0.4; charset=utf-8",
                        render(),
                    )
                } else {
                    (
                        "404 Not Found",
                        "text/plain",
                        "only /metrics is served here\n".to_string(),
                    )
                };
            let head = format!(
                "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = sock.write_all(head.as_bytes()).await;
            let _ = sock.write_all(body.as_bytes()).await;
        });
    }
}
