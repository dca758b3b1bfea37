//! Starting the MDS's HTTP port: the web dashboard and `/metrics` (used by
//! `tessera up` and `tessera mds serve`).

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;

/// Where the dashboard listens unless told otherwise: loopback only.
pub const DEFAULT_HTTP: &str = "127.0.0.1:7480";

/// The HTTP options of a command that runs an MDS.
#[derive(clap::Args, Clone, Debug)]
pub struct HttpArgs {
    /// Serve the web dashboard and Prometheus `/metrics` here (default
    /// 127.0.0.1:7480: this machine only; reach it from elsewhere through
    /// an SSH tunnel). On an address that is not loopback only `/metrics`
    /// is served, unless --dashboard-plain-http.
    #[arg(long, alias = "metrics", value_name = "ADDR")]
    pub http: Option<SocketAddr>,
    /// Serve no dashboard and no `/metrics`.
    #[arg(long, conflicts_with = "http")]
    pub no_http: bool,
    /// Serve the dashboard on a non-loopback --http address too, over
    /// plain HTTP: its login tokens cross the network in the clear.
    #[arg(long)]
    pub dashboard_plain_http: bool,
}

/// Binds the HTTP port the arguments ask for (`None` with `--no-http`):
/// done before the daemons start, so a taken port stops the command
/// before it has started anything.
pub async fn listen(a: &HttpArgs) -> anyhow::Result<Option<tokio::net::TcpListener>> {
    if a.no_http {
        return Ok(None);
    }
    let addr = match a.http {
        Some(x) => x,
        None => DEFAULT_HTTP.parse().context("default HTTP address")?,
    };
    let l = dash::bind(addr).await.with_context(|| {
        format!(
            "cannot listen on {addr} for the dashboard and /metrics (is another cluster's MDS there? \
             pass --http 127.0.0.1:PORT, or --no-http)"
        )
    })?;
    Ok(Some(l))
}

/// Serves the dashboard of `mds` (serving clients on `mds_addr`) on `l`,
/// with `extra` appended to `/metrics`; answers the address.
pub fn start(
    a: &HttpArgs,
    l: tokio::net::TcpListener,
    mds: Arc<mds::Mds>,
    mds_addr: &str,
    extra: Option<dash::ExtraMetrics>,
) -> anyhow::Result<SocketAddr> {
    let at = l.local_addr()?;
    let mut d = dash::Dashboard::new(mds, mds_addr, at, a.dashboard_plain_http);
    if let Some(e) = extra {
        d = d.with_metrics(e);
    }
    if !at.ip().is_loopback() && !a.dashboard_plain_http {
        eprintln!(
            "note: {at} is not loopback: serving /metrics only (--dashboard-plain-http serves the dashboard there too)"
        );
    }
    tokio::spawn(dash::serve(l, d));
    Ok(at)
}
