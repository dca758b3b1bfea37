//! Prometheus metrics of an OSD and the `/metrics` HTTP endpoint (one GET
//! on `net::http`'s small server).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
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

/// What the OSD has served since it started, as its heartbeat reports it
/// ([`proto::mds::OsdLoad`]).
#[derive(Debug, Default)]
pub struct LoadCounters {
    requests: AtomicU64,
    writes: AtomicU64,
    reads: AtomicU64,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    busy_us: AtomicU64,
}

impl LoadCounters {
    /// Counts one request that took `busy` and moved these payload bytes.
    pub fn add(&self, busy: Duration, bytes_in: u64, bytes_out: u64) {
        let o = Ordering::Relaxed;
        self.requests.fetch_add(1, o);
        if bytes_in > 0 {
            self.writes.fetch_add(1, o);
            self.bytes_in.fetch_add(bytes_in, o);
        }
        if bytes_out > 0 {
            self.reads.fetch_add(1, o);
            self.bytes_out.fetch_add(bytes_out, o);
        }
        self.busy_us
            .fetch_add(u64::try_from(busy.as_micros()).unwrap_or(u64::MAX), o);
    }

    /// The totals now.
    pub fn snapshot(&self) -> proto::mds::OsdLoad {
        let o = Ordering::Relaxed;
        proto::mds::OsdLoad {
            requests: self.requests.load(o),
            writes: self.writes.load(o),
            reads: self.reads.load(o),
            bytes_in: self.bytes_in.load(o),
            bytes_out: self.bytes_out.load(o),
            busy_us: self.busy_us.load(o),
        }
    }
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
    /// Totals reported to the MDS with every heartbeat.
    pub load: LoadCounters,
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
        // The codes an operator alerts on exist from the start (at zero),
        // so a dashboard's rate() has a series before the first failure.
        {
            use proto::ErrorCode as E;
            for c in [
                E::NoSpace,
                E::Bound,
                E::Checksum,
                E::Io,
                E::Failed,
                E::Busy,
                E::NotReady,
                E::Unauthenticated,
                E::CapForged,
                E::CapExpired,
            ] {
                let _ = errors.get_or_create(&CodeLabel {
                    code: format!("{c:?}"),
                });
            }
        }
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
            load: LoadCounters::default(),
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
/// metrics) until the task is dropped, on the bounded HTTP server of the
/// connection layer.
pub async fn serve_text(listener: TcpListener, render: Render) {
    let handler: net::http::Handler = Arc::new(move |req: net::http::Request| {
        if req.method == "GET" && req.path == "/metrics" {
            net::http::Response::ok("text/plain; version=0.0.4; charset=utf-8", render())
        } else {
            net::http::Response::text(404, "only /metrics is served here\n")
        }
    });
    net::http::serve(listener, handler, net::http::HttpLimits::default()).await
}
