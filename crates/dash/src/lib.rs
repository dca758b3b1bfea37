//! Tessera's web dashboard: the cluster in a browser, served by the MDS on
//! its HTTP port beside `/metrics`. The page (HTML, CSS and JavaScript in
//! `assets/`, embedded in the binary: no JavaScript toolchain) logs in with
//! a principal's key or a token (`proto::token`), then polls
//! `/api/state` and `/api/history` and redraws without reloading.
//!
//! Map: [`cluster_metrics`] (the status as gauges on `/metrics`), [`sessions`] (login, cookies, bounds), [`view`] (the state as
//! JSON), [`history`] (the last hour in memory), [`routes`] (what each
//! path answers, with the security headers).

pub mod cluster_metrics;
pub mod history;
pub mod routes;
pub mod sessions;
pub mod view;

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;

/// Extra Prometheus text appended to the MDS's `/metrics` (a mount's
/// client when `tessera up` mounts one).
pub type ExtraMetrics = Arc<dyn Fn() -> String + Send + Sync>;

/// The dashboard of one MDS.
pub struct Dashboard {
    /// The MDS it shows.
    pub mds: Arc<mds::Mds>,
    /// Who is logged in.
    pub sessions: sessions::Sessions,
    /// The last hour.
    pub history: history::History,
    /// What the state names as the MDS's addresses.
    pub facts: view::MdsFacts,
    /// Appended to `/metrics`.
    pub extra_metrics: Option<ExtraMetrics>,
    /// Host headers accepted (set when bound to loopback, so a page of
    /// another site cannot reach the dashboard by rebinding a DNS name to
    /// 127.0.0.1); `None` accepts any.
    pub hosts: Option<Vec<String>>,
}

impl Dashboard {
    /// The dashboard of `mds` (serving clients on `mds_addr`), to be
    /// served on `http`.
    pub fn new(mds: Arc<mds::Mds>, mds_addr: &str, http: SocketAddr) -> Arc<Dashboard> {
        let hosts = http.ip().is_loopback().then(|| {
            let p = http.port();
            vec![
                format!("127.0.0.1:{p}"),
                format!("localhost:{p}"),
                format!("[::1]:{p}"),
                http.to_string(),
            ]
        });
        Arc::new(Dashboard {
            sessions: sessions::Sessions::new(&mds.sb.cluster_id),
            mds,
            history: history::History::default(),
            facts: view::MdsFacts {
                addr: mds_addr.into(),
                http: format!("http://{http}/"),
            },
            extra_metrics: None,
            hosts,
        })
    }

    /// The same with more `/metrics` text.
    pub fn with_metrics(mut self: Arc<Self>, extra: ExtraMetrics) -> Arc<Dashboard> {
        if let Some(d) = Arc::get_mut(&mut self) {
            d.extra_metrics = Some(extra);
        }
        self
    }

    /// Keeps the history: one point every [`history::INTERVAL`], until
    /// the task is dropped.
    pub async fn sample(self: Arc<Self>) {
        let mut sampler = history::Sampler::default();
        let mut tick = tokio::time::interval(history::INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tick.tick().await;
            let d = self.clone();
            let osds = tokio::task::spawn_blocking(move || d.mds.status().map(|s| s.osds)).await;
            let Ok(Ok(osds)) = osds else { continue };
            let m = &self.mds.metrics;
            let p = sampler.sample(
                proto::clock::now_ms(),
                &osds,
                m.mandatory() + m.non_mandatory(),
            );
            self.history.push(p);
        }
    }
}

/// Serves the dashboard (and `/metrics`) on `listener`, and keeps its
/// history, until the task is dropped.
pub async fn serve(listener: TcpListener, dash: Arc<Dashboard>) {
    /// Stops the sampler when the server's task ends or is dropped.
    struct AbortOnDrop(tokio::task::JoinHandle<()>);
    impl Drop for AbortOnDrop {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
    let _sampler = AbortOnDrop(tokio::spawn(dash.clone().sample()));
    let handler: net::http::Handler = Arc::new(move |req| routes::answer(&dash, req));
    net::http::serve(listener, handler, net::http::HttpLimits::default()).await;
}

/// Binds `addr` for the dashboard. When `fallback` (the default address
/// was not asked for by name) and it is taken, binds an ephemeral port on
/// the same interface instead, so a second local cluster still gets one.
pub async fn bind(addr: SocketAddr, fallback: bool) -> std::io::Result<TcpListener> {
    match TcpListener::bind(addr).await {
        Ok(l) => Ok(l),
        Err(e) if fallback && e.kind() == std::io::ErrorKind::AddrInUse => {
            TcpListener::bind(SocketAddr::new(addr.ip(), 0)).await
        }
        Err(e) => Err(e),
    }
}
