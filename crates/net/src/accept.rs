//! The accept loop every Tessera daemon runs (OSD and MDS): accept until
//! shutdown, refuse connections beyond a limit, then give the connections
//! in progress a bounded time to finish.

use std::future::Future;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

/// Serves `listener` with `serve_one` until `shutdown` turns true (at most
/// `max` connections at once; more are closed at accept), then waits up to
/// `drain` for open connections and aborts the rest. Returns whether every
/// connection finished by itself.
pub async fn accept_until<F, Fut>(
    listener: TcpListener,
    mut shutdown: watch::Receiver<bool>,
    max: usize,
    drain: Duration,
    serve_one: F,
) -> bool
where
    F: Fn(TcpStream, watch::Receiver<bool>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            acc = listener.accept() => match acc {
                Ok((sock, peer)) if conns.len() >= max => {
                    tracing::warn!(%peer, limit = max, "too many connections; refusing one");
                    drop(sock);
                }
                Ok((sock, peer)) => {
                    tracing::debug!(%peer, "connection");
                    conns.spawn(serve_one(sock, shutdown.clone()));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            _ = shutdown.changed() => break,
        }
    }
    drop(listener);
    tracing::info!(
        connections = conns.len(),
        "shutting down: draining in-flight requests"
    );
    let drained = tokio::time::timeout(drain, async { while conns.join_next().await.is_some() {} })
        .await
        .is_ok();
    if !drained {
        tracing::warn!("drain timeout: closing with requests still in flight");
        conns.abort_all();
    }
    drained
}
