//! A small pool of pipelined connections to one server, made on first use
//! and remade when one dies. The server may be a replicated MDS group: an
//! address list `a,b,c` of which only the leader accepts connections; a
//! pool then connects to whichever does, and while none does (a
//! failover) keeps trying for [`FAILOVER_WAIT`] before it fails.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::connection::{ConnConfig, ConnError, Connection};

/// How long a pool of several addresses keeps looking for one that
/// accepts (a group electing a new leader takes about 1–2 s).
pub const FAILOVER_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// How long one member of several may take to accept a connection.
pub const MEMBER_CONNECT: std::time::Duration = std::time::Duration::from_secs(2);

/// A small pool of pipelined connections to one server (an OSD, or the
/// MDS: the handshake names which), made on first use and remade when one dies.
pub struct Pool {
    /// The addresses given, then those the server's welcomes named (a
    /// group's members that joined later).
    addrs: std::sync::Mutex<Vec<String>>,
    /// The address that accepted last.
    current: AtomicUsize,
    cfg: ConnConfig,
    conns: Vec<tokio::sync::Mutex<Option<Arc<Connection>>>>,
    next: AtomicUsize,
}

impl Pool {
    /// A pool of `cfg.connections` connections to `addr` (or to
    /// whichever of a comma-separated list accepts).
    pub fn new(addr: &str, cfg: ConnConfig) -> Pool {
        let n = cfg.connections.max(1);
        let mut addrs: Vec<String> = addr
            .split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .map(String::from)
            .collect();
        if addrs.is_empty() {
            addrs.push(addr.into());
        }
        Pool {
            addrs: std::sync::Mutex::new(addrs),
            current: AtomicUsize::new(0),
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
        let c = Arc::new(self.connect_any().await?);
        setup(c.clone()).await?;
        *slot = Some(c.clone());
        Ok((c, true))
    }

    /// The addresses tried, in order.
    pub fn addrs(&self) -> Vec<String> {
        self.addrs.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Adds the addresses a welcome named that the pool does not know
    /// yet (after the others, so the order of those tried stays put),
    /// up to `crate::connection::MAX_PEERS_KEPT` in all.
    fn learn(&self, peers: &[String]) {
        let mut addrs = self.addrs.lock().unwrap_or_else(|e| e.into_inner());
        for p in peers {
            if addrs.len() >= crate::connection::MAX_PEERS_KEPT.max(1) {
                break;
            }
            if !addrs.contains(p) {
                tracing::info!(addr = %p, "learned another member's address");
                addrs.push(p.clone());
            }
        }
    }

    /// A connection to the one address that accepts: the last that did
    /// first, then the others in turn; with several addresses, rounds go
    /// on for [`FAILOVER_WAIT`] while none accepts.
    async fn connect_any(&self) -> Result<Connection, ConnError> {
        let deadline = std::time::Instant::now() + FAILOVER_WAIT;
        loop {
            let addrs = self.addrs();
            let n = addrs.len();
            let start = self.current.load(Ordering::Relaxed);
            let mut last = None;
            // Addresses that did not accept at all (an election may be
            // under way); answers that refused are not waited for again.
            let mut closed = 0;
            for k in 0..n {
                let i = (start + k) % n;
                let attempt = Connection::connect(&addrs[i], &self.cfg);
                // A member whose host is gone may not even refuse: with
                // several addresses, none is waited on for long.
                let r = if n > 1 {
                    tokio::time::timeout(MEMBER_CONNECT, attempt)
                        .await
                        .unwrap_or_else(|_| {
                            Err(ConnError::Connect {
                                addr: addrs[i].clone(),
                                why: format!("no answer within {MEMBER_CONNECT:?}"),
                            })
                        })
                } else {
                    attempt.await
                };
                match r {
                    Ok(c) => {
                        self.current.store(i, Ordering::Relaxed);
                        self.learn(c.peers());
                        return Ok(c);
                    }
                    // Refused or unreachable: perhaps not the leader.
                    Err(e @ ConnError::Connect { .. }) => {
                        self.current.store((i + 1) % n, Ordering::Relaxed);
                        closed += 1;
                        last = Some(e);
                    }
                    // A handshake refused by one of several: try the next
                    // (the one answering may be stepping down); the
                    // refusal is reported if none accepts.
                    Err(e) if n > 1 => {
                        self.current.store((i + 1) % n, Ordering::Relaxed);
                        last = Some(e);
                    }
                    Err(e) => return Err(e),
                }
            }
            let e = last.unwrap_or_else(|| ConnError::Lost("no address".into()));
            if n == 1 || closed == 0 || std::time::Instant::now() >= deadline {
                return Err(e);
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
}
