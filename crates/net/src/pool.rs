//! A small pool of pipelined connections to one server, made on first use
//! and remade when one dies.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::connection::{ConnConfig, ConnError, Connection};

/// A small pool of pipelined connections to one server (an OSD, or the
/// MDS: the handshake names which), made on first use and remade when one dies.
pub struct Pool {
    addr: String,
    cfg: ConnConfig,
    conns: Vec<tokio::sync::Mutex<Option<Arc<Connection>>>>,
    next: AtomicUsize,
}

impl Pool {
    /// A pool of `cfg.connections` connections to `addr`.
    pub fn new(addr: &str, cfg: ConnConfig) -> Pool {
        let n = cfg.connections.max(1);
        Pool {
            addr: addr.into(),
            cfg,
            conns: (0..n).map(|_| tokio::sync::Mutex::new(None)).collect(),
            next: AtomicUsize::new(0),
        }
    }

    /// Whether every connection made so far is still alive (one being
    /// made counts as alive; none made yet, as not).
    pub fn all_alive(&self) -> bool {
        self.conns.iter().all(|slot| match slot.try_lock() {
            Ok(c) => c.as_ref().is_some_and(|c| c.is_alive()),
            Err(_) => true,
        })
    }

    /// Connections in the pool.
    pub fn size(&self) -> usize {
        self.conns.len()
    }

    /// The next slot, round robin.
    pub fn pick(&self) -> usize {
        self.next.fetch_add(1, Ordering::Relaxed) % self.conns.len()
    }

    /// Connection `i` (mod the size), connecting if it is absent or dead.
    pub async fn conn(&self, i: usize) -> Result<Arc<Connection>, ConnError> {
        Ok(self.conn_fresh(i, |_| async { Ok(()) }).await?.0)
    }

    /// Like [`Pool::conn`], and says whether the connection is new; a new
    /// one is first given to `setup` (while no other caller can have it),
    /// and kept only if that succeeds.
    pub async fn conn_fresh<F, Fut>(
        &self,
        i: usize,
        setup: F,
    ) -> Result<(Arc<Connection>, bool), ConnError>
    where
        F: FnOnce(Arc<Connection>) -> Fut,
        Fut: std::future::Future<Output = Result<(), ConnError>>,
    {
        let mut slot = self.conns[i % self.conns.len()].lock().await;
        if let Some(c) = slot.as_ref().filter(|c| c.is_alive()) {
            return Ok((c.clone(), false));
        }
        let c = Arc::new(Connection::connect(&self.addr, &self.cfg).await?);
        setup(c.clone()).await?;
        *slot = Some(c.clone());
        Ok((c, true))
    }
}
