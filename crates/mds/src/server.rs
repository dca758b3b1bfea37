//! The MDS as a [`net::serve::Service`]: the same frames as the OSD
//! protocol (a Hello naming [`MDS_ID`], then tagged requests answered in
//! any order), each request in its own task so slow ones (group-commit
//! waits, OSD revocations) never hold up others on the connection. The
//! connection cap, in-flight bounds, byte budget and timeouts are the
//! shared server loop's, the same as every daemon's.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use net::serve::{Admitted, ServeLimits, Server, Service};
use proto::auth::Secret;
use proto::mds::{Errno, MDS_ID, MdsError, MdsRequest, MdsResponse};
use proto::msg::{Hello, Welcome, decode};
use proto::{Frame, Limits, PROTOCOL_VERSION, WireError};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::metrics::ReqClass;
use crate::service::{Caller, Mds};

/// The MDS's limits: requests carry no payload and headers up to 1 MiB;
/// 256 requests in flight per connection, 4,096 connections (`mds.toml`
/// `max_connections`), 64 MiB of requests in flight in all, 10 min idle,
/// 10 s to drain at shutdown.
pub fn default_limits() -> ServeLimits {
    ServeLimits {
        frame: Limits {
            max_header: 1 << 20,
            max_payload: 0,
        },
        max_connections: net::serve::DEFAULT_MAX_CONNECTIONS,
        max_connections_per_principal: net::serve::DEFAULT_MAX_CONNECTIONS,
        handshake: Default::default(),
        max_in_flight: 256,
        max_inflight_bytes: 64 << 20,
        idle_timeout: Duration::from_secs(600),
        io_timeout: Duration::from_secs(30),
        write_timeout: Duration::from_secs(30),
        drain_timeout: Duration::from_secs(10),
    }
}

/// Serves until `shutdown` turns true, then drains and closes the KV.
pub async fn serve(mds: Arc<Mds>, listener: TcpListener, shutdown: watch::Receiver<bool>) {
    let mut limits = default_limits();
    limits.max_connections = mds.cfg.max_connections.clamp(1, 1 << 20);
    limits.max_connections_per_principal = limits.max_connections;
    serve_with(mds, listener, shutdown, limits).await;
}

/// [`serve`] under other limits.
pub async fn serve_with(
    mds: Arc<Mds>,
    listener: TcpListener,
    shutdown: watch::Receiver<bool>,
    limits: ServeLimits,
) {
    if mds.replay_pending() {
        tokio::spawn(mds.clone().replay_worker());
    }
    let front = Arc::new(Front {
        mds: mds.clone(),
        max_in_flight: limits.max_in_flight,
    });
    Server::counting_in(front, limits, mds.connections.clone())
        .serve(listener, shutdown)
        .await;
    let kv = mds.kv.clone();
    let _ = tokio::task::spawn_blocking(move || kv.close()).await;
}

/// The MDS seen from the server loop.
struct Front {
    mds: Arc<Mds>,
    max_in_flight: u32,
}

impl Service for Front {
    /// Requests are decoded in their own task, not on the connection's
    /// reader: an MDS reply carries no payload, so nothing needs reserving
    /// before a request runs.
    type Request = ();
    type Peer = Caller;

    fn authenticate(&self, h: &Hello) -> Result<(Option<Secret>, Caller), WireError> {
        self.mds.authenticate(h)
    }

    fn requires_encryption(&self) -> bool {
        self.mds.cfg.require_encryption
    }

    fn principal_of(&self, peer: &Caller) -> Option<u64> {
        match peer {
            Caller::Client { id, .. } => Some(*id),
            Caller::Osd(_) => None,
        }
    }

    fn welcome(&self) -> Welcome {
        Welcome::Ok {
            version: PROTOCOL_VERSION,
            cluster_id: self.mds.sb.cluster_id.clone(),
            osd_id: MDS_ID,
            max_payload: 0,
            max_in_flight: self.max_in_flight,
            // A group's leader names every member: clients whose list
            // misses one that joined learn it here.
            peers: self
                .mds
                .group_status
                .get()
                .map(|f| f().members.into_iter().map(|m| m.addr).collect())
                .unwrap_or_default(),
        }
    }

    fn admit(&self, _peer: &Caller, _f: &Frame) -> Result<Admitted<()>, WireError> {
        Ok(Admitted {
            request: (),
            reply_bytes: 0,
            quick: false,
        })
    }

    async fn handle(self: Arc<Self>, caller: Arc<Caller>, _: (), f: Frame) -> (Bytes, Bytes) {
        let started = Instant::now();
        let result = match decode::<MdsRequest>(&f.header) {
            Ok(req) => {
                let (name, class) = (req.op.name(), ReqClass::of(&req.op));
                let result = self.mds.serve_request(&caller, req).await;
                let errno = result.as_ref().err().map(|e| format!("{:?}", e.errno));
                self.mds.metrics.count(
                    name,
                    class,
                    started.elapsed().as_secs_f64(),
                    errno.as_deref(),
                );
                result
            }
            Err(e) => {
                self.mds
                    .metrics
                    .count("undecodable", ReqClass::Other, 0.0, Some("Proto"));
                Err(MdsError::new(
                    Errno::Proto,
                    format!("request: {}", e.message),
                ))
            }
        };
        let resp = MdsResponse { result };
        (Bytes::from(proto::msg::encode(&resp)), Bytes::new())
    }

    fn error_header(&self, err: WireError) -> Bytes {
        let resp = MdsResponse {
            result: Err(MdsError::new(
                Errno::Proto,
                format!("request: {}", err.message),
            )),
        };
        Bytes::from(proto::msg::encode(&resp))
    }
}
