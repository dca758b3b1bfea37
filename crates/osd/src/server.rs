//! The OSD as a [`net::serve::Service`]: its handshake (cluster and OSD
//! id), how a request is admitted (a READ's reply is reserved in the byte
//! budget before it runs), and how it runs (on this worker, blocking, with
//! metrics). Connections, limits and timeouts are the shared server
//! loop's; shutdown drains it, then closes the store, which flushes it.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use net::serve::{Admitted, ServeLimits, Server, Service};
use proto::auth::{Credential, MDS_PRINCIPAL, Secret, Ticket};
use proto::msg::{Hello, Request, Response, Welcome, decode};
use proto::{ErrorCode, Frame, PROTOCOL_VERSION, WireError};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::exec::{Ctx, execute_admitted};
use crate::metrics::{CodeLabel, DirLabel, Metrics, OpLabel};

/// Server settings.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Cluster id clients must name.
    pub cluster_id: String,
    /// This OSD's id.
    pub osd_id: u32,
    /// Connection limits and timeouts (the shared server loop's).
    pub serve: ServeLimits,
}

impl ServerConfig {
    /// Defaults for a cluster and OSD id.
    pub fn new(cluster_id: &str, osd_id: u32) -> Self {
        ServerConfig {
            cluster_id: cluster_id.into(),
            osd_id,
            serve: ServeLimits::default(),
        }
    }
}

/// A running OSD.
pub struct Osd {
    ctx: Arc<Ctx>,
    cfg: ServerConfig,
    chains: Option<Arc<crate::chain::Chains>>,
    /// Its metrics.
    pub metrics: Arc<Metrics>,
}

impl Osd {
    /// An OSD serving `ctx` with `cfg`.
    pub fn new(ctx: Ctx, cfg: ServerConfig) -> Arc<Osd> {
        Arc::new(Osd {
            ctx: Arc::new(ctx),
            metrics: Arc::new(Metrics::new()),
            cfg,
            chains: None,
        })
    }

    /// An OSD that is a member of replica chains: requests for a group's
    /// partition, and effects passed down a chain, go through `chains`.
    pub fn chained(ctx: Ctx, cfg: ServerConfig, chains: Arc<crate::chain::Chains>) -> Arc<Osd> {
        let ctx = Arc::new(ctx);
        chains.attach(ctx.clone());
        Arc::new(Osd {
            ctx,
            metrics: Arc::new(Metrics::new()),
            cfg,
            chains: Some(chains),
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
        let limits = self.cfg.serve.clone();
        let drained = Server::new(self.clone(), limits)
            .serve(listener, shutdown)
            .await;
        if let Some(c) = &self.chains {
            // A request still running when the drain gave up may have made
            // a change here that is not down its chain yet (and not yet
            // among the unsent either): no marker, so the next start asks
            // the MDS to take this OSD out of its chains and fill it again.
            if drained {
                c.shut_down_cleanly();
            } else {
                tracing::warn!(
                    "requests still running when the drain timed out: no clean-shutdown \
                     marker; at its next start this OSD rejoins its chains through the MDS"
                );
            }
        }
        let store = self.ctx.store.clone();
        tokio::task::spawn_blocking(move || store.close())
            .await
            .unwrap_or_else(|_| Err(store::StoreError::invalid("store", "close panicked")))
    }

    fn count(&self, op: &str, started: Instant, in_bytes: u64, resp: &Response, out: u64) {
        let m = &self.metrics;
        let busy = started.elapsed();
        m.load.add(busy, in_bytes, out);
        m.ops.get_or_create(&OpLabel { op: op.into() }).inc();
        m.latency
            .get_or_create(&OpLabel { op: op.into() })
            .observe(busy.as_secs_f64());
        m.bytes
            .get_or_create(&DirLabel { dir: "in".into() })
            .inc_by(in_bytes);
        m.bytes
            .get_or_create(&DirLabel { dir: "out".into() })
            .inc_by(out);
        if let Err(e) = &resp.result {
            m.errors
                .get_or_create(&CodeLabel {
                    code: format!("{:?}", e.code),
                })
                .inc();
        }
    }
}

/// Who an OSD connection speaks for: the principal its ticket names.
#[derive(Debug, Clone)]
pub struct Peer {
    /// Capabilities must name this holder.
    pub principal_id: u64,
    /// For logs.
    pub name: String,
}

impl Service for Osd {
    type Request = Request;
    type Peer = Peer;

    fn principal_of(&self, peer: &Peer) -> Option<u64> {
        Some(peer.principal_id)
    }

    fn requires_encryption(&self) -> bool {
        self.ctx
            .lease
            .as_ref()
            .is_some_and(|l| l.requires_encryption())
    }

    fn authenticate(&self, h: &Hello) -> Result<(Option<Secret>, Peer), WireError> {
        let refuse = |why: String| Err(WireError::new(ErrorCode::Handshake, why));
        if h.version != PROTOCOL_VERSION {
            return refuse(format!(
                "protocol version {} not supported (this OSD speaks {PROTOCOL_VERSION})",
                h.version
            ));
        }
        if h.cluster_id != self.cfg.cluster_id {
            // The real cluster id is not echoed: a stranger learns nothing.
            return refuse(format!(
                "this OSD does not belong to cluster {:?}",
                h.cluster_id
            ));
        }
        if h.osd_id != self.cfg.osd_id {
            return refuse(format!("this is OSD {}, not {}", self.cfg.osd_id, h.osd_id));
        }
        let Some(keys) = &self.ctx.keys else {
            // --insecure: no capabilities are checked, so no one is either.
            return Ok((
                None,
                Peer {
                    principal_id: MDS_PRINCIPAL,
                    name: h.client.clone(),
                },
            ));
        };
        let unauthenticated = |why: String| Err(WireError::new(ErrorCode::Unauthenticated, why));
        let Credential::Ticket(t) = &h.credential else {
            return unauthenticated(
                "this OSD accepts only tickets the MDS issued (connect through the MDS with a \
                 principal's key)"
                    .into(),
            );
        };
        let Some(key) = keys.key(t.key_version) else {
            return unauthenticated(format!(
                "ticket sealed with key version {}, which this OSD does not hold",
                t.key_version
            ));
        };
        match Ticket::open(t, key, self.cfg.osd_id, proto::clock::now_ms()) {
            Ok(tk) => Ok((
                Some(tk.session_key),
                Peer {
                    principal_id: tk.principal_id,
                    name: tk.principal,
                },
            )),
            Err(e) => unauthenticated(e.to_string()),
        }
    }

    fn welcome(&self) -> Welcome {
        Welcome::Ok {
            version: PROTOCOL_VERSION,
            cluster_id: self.cfg.cluster_id.clone(),
            osd_id: self.cfg.osd_id,
            max_payload: self.cfg.serve.frame.max_payload,
            max_in_flight: self.cfg.serve.max_in_flight,
            peers: Vec::new(),
        }
    }

    fn admit(&self, peer: &Peer, f: &Frame) -> Result<Admitted<Request>, WireError> {
        let req: Request = decode(&f.header)?;
        // A bad capability is refused before any reply memory is reserved.
        crate::exec::precheck(&self.ctx, peer.principal_id, &req)?;
        // A COPY holds its bytes in memory as a READ's reply does.
        let read_len = match req.cmd {
            proto::Command::Read { len, .. } | proto::Command::Copy { len, .. } => u64::from(len),
            _ => 0,
        };
        let max = self.cfg.serve.frame.max_payload;
        if read_len > u64::from(max) {
            return Err(WireError::bad(
                "len",
                format!(
                    "a {} of {read_len} bytes exceeds the {max}-byte payload limit; split it",
                    req.cmd.name()
                ),
            ));
        }
        Ok(Admitted {
            quick: crate::exec::quick(&req),
            request: req,
            reply_bytes: read_len,
        })
    }

    async fn handle(self: Arc<Self>, peer: Arc<Peer>, req: Request, f: Frame) -> (Bytes, Bytes) {
        let started = Instant::now();
        let in_bytes = f.payload.len() as u64;
        let ctx = self.ctx.clone();
        if let Some(chains) = &self.chains
            && crate::chain::Chains::handles(&req)
        {
            let name = req.cmd.name();
            let (resp, out) = chains
                .serve(&ctx, peer.principal_id, &peer.name, req, f.payload)
                .await;
            self.count(name, started, in_bytes, &resp, out.len() as u64);
            return (Bytes::from(proto::msg::encode(&resp)), out);
        }
        let (resp, out) = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            crate::exec::blocking(&req, || {
                execute_admitted(&ctx, peer.principal_id, &req, f.payload)
            })
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
        self.count(req.cmd.name(), started, in_bytes, &resp, out.len() as u64);
        (Bytes::from(proto::msg::encode(&resp)), out)
    }

    fn error_header(&self, err: WireError) -> Bytes {
        Bytes::from(proto::msg::encode(&Response {
            result: Err(err),
            attrs: Vec::new(),
        }))
    }

    fn connection_event(&self, open: bool) {
        if open {
            self.metrics.connections.inc();
        } else {
            self.metrics.connections.dec();
        }
    }

    fn bad_frame(&self) {
        self.metrics
            .errors
            .get_or_create(&CodeLabel {
                code: "BadFrame".into(),
            })
            .inc();
    }
}
