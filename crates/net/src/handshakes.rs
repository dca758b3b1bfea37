//! Connections still in their handshake: a small table of their own, so
//! peers that never prove a key cannot take the room of those that do.
//!
//! An unauthenticated peer costs a socket and a task until it proves a key
//! or gives up. Counted with established connections, 1,024 idle sockets
//! would lock everyone out for the handshake's whole timeout. So a server
//! keeps [`HandshakeLimits::max`] handshakes at once and
//! [`HandshakeLimits::per_address`] from one address; a new one beyond
//! either bound evicts the *oldest* handshake (of that address, or of
//! all) once that one has waited [`EVICTABLE_AFTER`], and its connection
//! closes. A real client finishes its handshake in a round trip or two,
//! so idle sockets — however many — are the ones evicted, while a burst
//! of real clients arriving together (64 mounts starting at once) is
//! admitted beyond the bound, up to [`BURST`] times it; past that the
//! oldest goes whatever its age (idle sockets are older than a client
//! that just connected). Each handshake also has a deadline of its own.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a handshake must have waited before a newer one may evict it.
pub const EVICTABLE_AFTER: Duration = Duration::from_millis(500);
/// How far past its bounds the table admits handshakes that are all
/// younger than [`EVICTABLE_AFTER`].
pub const BURST: usize = 4;

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
    /// Order of arrival → (address, arrival, the eviction signal's sender).
    open: BTreeMap<u64, (IpAddr, Instant, oneshot::Sender<()>)>,
    per_address: HashMap<IpAddr, usize>,
}

impl Table {
    fn evict(&mut self, seq: u64) {
        if let Some((ip, _, _signal)) = self.open.remove(&seq) {
            self.forget(ip);
        }
    }

    /// The oldest handshake (of `ip`, if given).
    fn oldest(&self, ip: Option<IpAddr>) -> Option<u64> {
        self.open
            .iter()
            .find(|(_, (a, _, _))| ip.is_none_or(|ip| *a == ip))
            .map(|(s, _)| *s)
    }

    /// The oldest handshake (of `ip`, if given) that may be evicted now.
    fn evictable(&self, ip: Option<IpAddr>) -> Option<u64> {
        let (seq, (_, at, _)) = self
            .open
            .iter()
            .find(|(_, (a, _, _))| ip.is_none_or(|ip| *a == ip))?;
        (at.elapsed() >= EVICTABLE_AFTER).then_some(*seq)
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
        if let Some((ip, _, _)) = t.open.remove(&self.seq) {
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
    /// address or of all when a bound is reached (see the module comment);
    /// `None` when the table is full of young handshakes. IPv6 addresses
    /// count by their /64 (one host commonly holds a whole /64).
    pub fn enter(&self, ip: IpAddr) -> Option<Slot> {
        let ip = source_of(ip);
        let mut t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        let per = self.limits.per_address.max(1);
        let max = self.limits.max.max(1);
        let mine = t.per_address.get(&ip).copied().unwrap_or(0);
        if mine >= per {
            match t.evictable(Some(ip)) {
                Some(s) => t.evict(s),
                // A burst past its bound too: the oldest goes even so.
                None if mine >= per * BURST => {
                    if let Some(s) = t.oldest(Some(ip)) {
                        t.evict(s);
                    }
                }
                None => {}
            }
        }
        while t.open.len() >= max {
            match t.evictable(None) {
                Some(s) => t.evict(s),
                None if t.open.len() >= max * BURST => match t.oldest(None) {
                    Some(s) => t.evict(s),
                    None => return None,
                },
                None => break,
            }
        }
        let seq = t.next;
        t.next += 1;
        let (tx, rx) = oneshot::channel();
        t.open.insert(seq, (ip, Instant::now(), tx));
        *t.per_address.entry(ip).or_default() += 1;
        Some(Slot {
            seq,
            table: self.table.clone(),
            evicted: rx,
        })
    }
}

/// What connections are counted under, here and by the HTTP server (and
/// failed dashboard logins): an IPv4 address (IPv4-mapped IPv6 included),
/// or an IPv6 /64 (one host commonly holds a whole /64).
pub fn source_of(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let mut o = v6.octets();
            o[8..].fill(0);
            IpAddr::from(o)
        }
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(n: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, n])
    }

    fn gone(s: &mut Slot) -> bool {
        s.evicted.try_recv() == Err(oneshot::error::TryRecvError::Closed)
    }

    #[test]
    fn young_handshakes_are_admitted_in_a_burst_and_old_ones_evicted() {
        let h = Handshakes::new(HandshakeLimits {
            max: 3,
            per_address: 2,
            timeout: Duration::from_secs(1),
        });
        // A burst from one address: admitted past the bound, up to BURST×.
        let mut burst: Vec<Slot> = (0..2 * BURST).map(|_| h.enter(ip(1)).unwrap()).collect();
        assert!(burst.iter_mut().all(|s| !gone(s)));
        // Past the burst bound, the oldest of that address gives way.
        let _next = h.enter(ip(1)).unwrap();
        assert!(gone(&mut burst[0]));
        assert!(!gone(&mut burst[1]));
        drop(burst);
        drop(_next);
        assert!(h.is_empty());
        // Idle ones, once old enough, give way to newcomers.
        let mut idle: Vec<Slot> = (0..3).map(|n| h.enter(ip(2 + n)).unwrap()).collect();
        std::thread::sleep(EVICTABLE_AFTER + Duration::from_millis(20));
        let _fresh = h.enter(ip(9)).unwrap();
        assert!(gone(&mut idle[0]), "the oldest went first");
        assert!(!gone(&mut idle[1]));
        assert_eq!(h.len(), 3);
        // IPv4-mapped IPv6 counts as its IPv4 address, each its own.
        let mapped = |n: u8| IpAddr::from(std::net::Ipv4Addr::new(10, 0, 0, n).to_ipv6_mapped());
        assert_eq!(source_of(mapped(7)), IpAddr::from([10, 0, 0, 7]));
        assert_ne!(source_of(mapped(7)), source_of(mapped(8)));
        // IPv6 counts by /64.
        let a = IpAddr::from([0x2001, 0xdb8, 0, 1, 0, 0, 0, 1]);
        let b = IpAddr::from([0x2001, 0xdb8, 0, 1, 0xffff, 0, 0, 2]);
        let h = Handshakes::new(HandshakeLimits {
            max: 100,
            per_address: 1,
            timeout: Duration::from_secs(1),
        });
        let mut x = h.enter(a).unwrap();
        let _y: Vec<_> = (0..BURST - 1).map(|_| h.enter(b).unwrap()).collect();
        let _z = h.enter(b).unwrap();
        assert!(gone(&mut x), "one /64 is one address");
    }
}
