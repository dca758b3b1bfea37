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

/// How long an answer of the MDS's status is reused: requests for the
/// state and `/metrics` cost the MDS at most one status a second, however
/// many arrive.
pub const STATUS_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(1);

/// The MDS's status, or why it could not say.
pub type StatusAnswer = Result<Arc<proto::mds::ClusterStatus>, proto::mds::MdsError>;

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
    /// Serve the pages and the API to connections that reach a
    /// non-loopback address (plain HTTP: tokens cross the network in the
    /// clear). Without it those connections get `/metrics` only; a
    /// connection to a loopback address gets the dashboard, for a
    /// request naming a loopback host.
    pub remote: bool,
    status: std::sync::Mutex<Option<(std::time::Instant, StatusAnswer)>>,
}

impl Dashboard {
    /// The dashboard of `mds` (serving clients on `mds_addr`), to be
    /// served on `http`; `remote` as [`Dashboard::remote`].
    pub fn new(
        mds: Arc<mds::Mds>,
        mds_addr: &str,
        http: SocketAddr,
        remote: bool,
    ) -> Arc<Dashboard> {
        Arc::new(Dashboard {
            sessions: sessions::Sessions::new(&mds.sb.cluster_id),
            mds,
            history: history::History::default(),
            facts: view::MdsFacts {
                addr: mds_addr.into(),
                http: format!("http://{http}/"),
            },
            extra_metrics: None,
            remote,
            status: std::sync::Mutex::new(None),
        })
    }

    /// The same with more `/metrics` text.
    pub fn with_metrics(mut self: Arc<Self>, extra: ExtraMetrics) -> Arc<Dashboard> {
        if let Some(d) = Arc::get_mut(&mut self) {
            d.extra_metrics = Some(extra);
        }
        self
    }

    /// The MDS's status (or its failure), at most [`STATUS_MAX_AGE`] old.
    pub fn status(&self) -> StatusAnswer {
        let mut c = self.status.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, s)) = c.as_ref()
            && at.elapsed() < STATUS_MAX_AGE
        {
            return s.clone();
        }
        let s = self.mds.status().map(Arc::new);
        *c = Some((std::time::Instant::now(), s.clone()));
        s
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
            let osds =
                tokio::task::spawn_blocking(move || d.status().map(|s| s.osds.clone())).await;
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

/// Binds `addr` for the dashboard and `/metrics`. A taken port is an
/// error, never another port: a page someone else put on the address
/// people were told to open must not be mistaken for this one.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}
