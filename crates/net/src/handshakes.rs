//! Connections still in their handshake: a small table of their own, so
//! peers that never prove a key cannot take the room of those that do.
//!
//! An unauthenticated peer costs a socket and a task until it proves a key
//! or gives up. Counted with established connections, 1,024 idle sockets
//! would lock everyone out for the handshake's whole timeout. So a server
//! keeps at most [`HandshakeLimits::max`] handshakes at once and
//! [`HandshakeLimits::per_address`] from one address; a new one beyond
//! either bound evicts the *oldest* handshake (of that address, or of
//! all), whose connection then closes. A real client finishes its
//! handshake in one round trip, so idle sockets — however many — are
//! always the ones evicted; each also has a short deadline of its own.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;

/// Bounds on connections that have not yet proved a key.
#[derive(Debug, Clone, Copy)]
pub struct HandshakeLimits {
    /// Handshakes in progress at once, over all peers.
    pub max: usize,
    /// Handshakes in progress at once from one IP address.
    pub per_address: usize,
    /// Longest a handshake may take, from accept to the last proof.
    pub timeout: Duration,
}

impl Default for HandshakeLimits {
    /// 128 at once, 32 per address, 5 s each.
    fn default() -> Self {
        HandshakeLimits {
            max: 128,
            per_address: 32,
            timeout: Duration::from_secs(5),
        }
    }
}

#[derive(Default)]
struct Table {
    next: u64,
    /// Order of arrival → (address, the eviction signal's sender).
    open: BTreeMap<u64, (IpAddr, oneshot::Sender<()>)>,
    per_address: HashMap<IpAddr, usize>,
}

impl Table {
    fn evict(&mut self, seq: u64) {
        if let Some((ip, _signal)) = self.open.remove(&seq) {
            self.forget(ip);
        }
    }

    fn forget(&mut self, ip: IpAddr) {
        if let Some(n) = self.per_address.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                self.per_address.remove(&ip);
            }
        }
    }
}

/// The handshakes of one server.
#[derive(Clone, Default)]
pub struct Handshakes {
    limits: HandshakeLimits,
    table: Arc<Mutex<Table>>,
}

/// One handshake's place in the table; leaving it (drop) frees the place.
pub struct Slot {
    seq: u64,
    table: Arc<Mutex<Table>>,
    /// Resolves when a newer handshake evicted this one.
    pub evicted: oneshot::Receiver<()>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((ip, _)) = t.open.remove(&self.seq) {
            t.forget(ip);
        }
    }
}

impl Handshakes {
    /// A table with these bounds.
    pub fn new(limits: HandshakeLimits) -> Handshakes {
        Handshakes {
            limits,
            table: Arc::default(),
        }
    }

    /// The bounds.
    pub fn limits(&self) -> HandshakeLimits {
        self.limits
    }

    /// Handshakes in progress now.
    pub fn len(&self) -> usize {
        self.table
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .open
            .len()
    }

    /// Whether none is in progress.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Registers a handshake from `ip`, evicting the oldest of that
    /// address or of all when a bound is reached.
    pub fn enter(&self, ip: IpAddr) -> Slot {
        let mut t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        if t.per_address.get(&ip).copied().unwrap_or(0) >= self.limits.per_address.max(1) {
            let oldest = t.open.iter().find(|(_, (a, _))| *a == ip).map(|(s, _)| *s);
            if let Some(s) = oldest {
                t.evict(s);
            }
        }
        while t.open.len() >= self.limits.max.max(1) {
            let Some(s) = t.open.keys().next().copied() else {
                break;
            };
            t.evict(s);
        }
        let seq = t.next;
        t.next += 1;
        let (tx, rx) = oneshot::channel();
        t.open.insert(seq, (ip, tx));
        *t.per_address.entry(ip).or_default() += 1;
        Slot {
            seq,
            table: self.table.clone(),
            evicted: rx,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(n: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, n])
    }

    #[test]
    fn the_oldest_handshake_goes_first_and_leaving_frees_its_place() {
        let h = Handshakes::new(HandshakeLimits {
            max: 3,
            per_address: 2,
            timeout: Duration::from_secs(1),
        });
        let mut a1 = h.enter(ip(1));
        let mut a2 = h.enter(ip(1));
        // A third from the same address evicts its own oldest.
        let mut a3 = h.enter(ip(1));
        assert!(
            a1.evicted
                .try_recv()
                .is_err_and(|e| e == oneshot::error::TryRecvError::Closed)
        );
        assert!(
            a2.evicted
                .try_recv()
                .is_err_and(|e| e == oneshot::error::TryRecvError::Empty)
        );
        assert_eq!(h.len(), 2);
        // Another address fills the table; the next evicts the oldest of all.
        let _b1 = h.enter(ip(2));
        let _b2 = h.enter(ip(2));
        assert!(
            a2.evicted
                .try_recv()
                .is_err_and(|e| e == oneshot::error::TryRecvError::Closed)
        );
        assert_eq!(h.len(), 3);
        drop(a3.evicted.try_recv());
        drop(a3);
        drop(a1);
        assert_eq!(h.len(), 2);
    }
}
