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
    /// Serve the web dashboard and Prometheus `/metrics` here. Loopback by
    /// default: to reach it from elsewhere, use an SSH tunnel or give an
    /// address explicitly (login still needs a key or a token; traffic
    /// is plain HTTP). When the default port is taken another is chosen
    /// and printed.
    #[arg(long, alias = "metrics", value_name = "ADDR")]
    pub http: Option<SocketAddr>,
    /// Serve no dashboard and no `/metrics`.
    #[arg(long, conflicts_with = "http")]
    pub no_http: bool,
}

/// Starts the dashboard of `mds` (serving clients on `mds_addr`) as the
/// arguments say, with `extra` appended to `/metrics`; answers the
/// address it listens on (`None` with `--no-http`).
pub async fn start(
    a: &HttpArgs,
    mds: Arc<mds::Mds>,
    mds_addr: &str,
    extra: Option<dash::ExtraMetrics>,
) -> anyhow::Result<Option<SocketAddr>> {
    if a.no_http {
        return Ok(None);
    }
    let (addr, fallback) = match a.http {
        Some(x) => (x, false),
        None => (DEFAULT_HTTP.parse().context("default HTTP address")?, true),
    };
    let l = dash::bind(addr, fallback)
        .await
        .with_context(|| format!("cannot listen on {addr} for the dashboard and /metrics"))?;
    let at = l.local_addr()?;
    let mut d = dash::Dashboard::new(mds, mds_addr, at);
    if let Some(e) = extra {
        d = d.with_metrics(e);
    }
    tokio::spawn(dash::serve(l, d));
    Ok(Some(at))
}
