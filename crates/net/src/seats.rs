//! Authenticated connections by principal, and who gives way when a
//! daemon is full. No principal can keep another out:
//!
//! - a principal at its own bound gets a seat by taking its own idlest
//!   connection's (so one key on many mounts never locks out its newest);
//! - when the daemon is full, a principal holding fewer connections than
//!   the one holding the most takes that one's idlest connection's seat
//!   (so a flood of connections by one key evicts only that key's), one
//!   holding as many takes its own idlest's, and one holding none is
//!   refused only when every principal holds one;
//! - each principal's connections together hold at most half of the
//!   server's in-flight byte budget (each connection a quarter), so slow
//!   readers under one key cannot stall everyone else.
//!
//! The cluster's own principals (the MDS, and OSDs as chain members) are
//! never evicted, never refused and not counted: a flood of clients
//! cannot cut a chain or the MDS off an OSD.
//!
//! A connection evicted is told through its seat and closes at once,
//! abandoning the replies it has not written; its seat is free at once
//! (the server's file-descriptor bound keeps a margin for the moment
//! those take to close).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Instant;

use tokio::sync::{Notify, Semaphore};

/// Authenticated connections held now, per principal id (what a server
/// counts against [`crate::serve::ServeLimits::max_connections_per_principal`]; shared
/// with whoever shows it).
pub type PrincipalCounts = Arc<Mutex<HashMap<u64, usize>>>;

/// One connection's seat.
struct Seated {
    id: u64,
    /// When it last read a request (ms since the table's epoch).
    last: Arc<AtomicU64>,
    evict: Arc<Notify>,
}

#[derive(Default)]
struct State {
    next_id: u64,
    total: usize,
    by_principal: HashMap<u64, Vec<Seated>>,
    /// Each principal's share of the byte budget, while any connection
    /// of it (seated or evicted and closing) holds it: a principal that
    /// reconnects never gets a fresh share beside its old one.
    budgets: HashMap<u64, Weak<Semaphore>>,
}

/// Whether `principal` is one of the cluster's own (the MDS, an OSD as
/// a chain member): never evicted, refused or counted.
fn infrastructure(principal: u64) -> bool {
    principal == proto::auth::MDS_PRINCIPAL || principal >= 1 << 63
}

/// The seats of one server.
pub struct Seats {
    state: Mutex<State>,
    limit: usize,
    per_principal: usize,
    budget_units: usize,
    counts: PrincipalCounts,
    epoch: Instant,
}

/// A connection's place; leaving (drop) frees it.
pub struct Seat {
    seats: Arc<Seats>,
    principal: u64,
    id: u64,
    last: Arc<AtomicU64>,
    /// Told when another connection takes this seat.
    pub evicted: Arc<Notify>,
    /// The principal's share of the byte budget (none for the cluster's
    /// own principals).
    pub budget: Option<Arc<Semaphore>>,
}

/// Why a seat was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// The daemon is full and every principal holds one connection.
    Full,
}

impl Seats {
    /// `limit` connections in all, `per_principal` each; a principal's
    /// connections share `budget_units` units of the byte budget. `counts`
    /// mirrors the connections per principal for whoever shows them.
    pub fn new(
        limit: usize,
        per_principal: usize,
        budget_units: usize,
        counts: PrincipalCounts,
    ) -> Arc<Seats> {
        Arc::new(Seats {
            state: Mutex::default(),
            limit: limit.max(1),
            per_principal: per_principal.max(1),
            budget_units: budget_units.max(1),
            counts,
            epoch: Instant::now(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// A seat for a new connection of `principal`, evicting whoever the
    /// rules above say gives way; `Full` when nobody does.
    pub fn take(self: &Arc<Self>, principal: u64) -> Result<Seat, Refused> {
        let last = Arc::new(AtomicU64::new(self.now()));
        let evicted = Arc::new(Notify::new());
        if infrastructure(principal) {
            return Ok(Seat {
                seats: self.clone(),
                principal,
                id: 0,
                last,
                evicted,
                budget: None,
            });
        }
        let mut st = self.lock();
        let mine = st.by_principal.get(&principal).map_or(0, Vec::len);
        if mine >= self.per_principal {
            self.evict_idlest(&mut st, principal);
        } else if st.total >= self.limit {
            let largest = st
                .by_principal
                .iter()
                .map(|(p, s)| (s.len(), *p != principal, *p))
                .max();
            match largest {
                Some((n, _, p)) if n > mine + 1 => self.evict_idlest(&mut st, p),
                // As many as any other: its own idlest gives way.
                _ if mine > 0 => self.evict_idlest(&mut st, principal),
                _ => return Err(Refused::Full),
            }
        }
        st.next_id += 1;
        let id = st.next_id;
        st.total += 1;
        st.by_principal.entry(principal).or_default().push(Seated {
            id,
            last: last.clone(),
            evict: evicted.clone(),
        });
        let budget = match st.budgets.get(&principal).and_then(Weak::upgrade) {
            Some(b) => b,
            None => {
                let b = Arc::new(Semaphore::new(self.budget_units));
                if st.budgets.len() > 2 * st.by_principal.len() + 64 {
                    st.budgets.retain(|_, w| w.strong_count() > 0);
                }
                st.budgets.insert(principal, Arc::downgrade(&b));
                b
            }
        };
        *self
            .counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(principal)
            .or_default() += 1;
        Ok(Seat {
            seats: self.clone(),
            principal,
            id,
            last,
            evicted,
            budget: Some(budget),
        })
    }

    /// Removes `principal`'s idlest connection from the table and tells it.
    fn evict_idlest(&self, st: &mut State, principal: u64) {
        let Some(seated) = st.by_principal.get_mut(&principal) else {
            return;
        };
        let Some(i) = (0..seated.len()).min_by_key(|i| seated[*i].last.load(Ordering::Relaxed))
        else {
            return;
        };
        let gone = seated.swap_remove(i);
        gone.evict.notify_one();
        tracing::info!(
            principal,
            "a connection gives way to another principal's (or to its own newer one)"
        );
        self.forget(st, principal);
    }

    /// Counts one connection of `principal` gone.
    fn forget(&self, st: &mut State, principal: u64) {
        st.total -= 1;
        if st.by_principal.get(&principal).is_some_and(Vec::is_empty) {
            st.by_principal.remove(&principal);
        }
        let mut c = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = c.get_mut(&principal) {
            *n -= 1;
            if *n == 0 {
                c.remove(&principal);
            }
        }
    }

    /// Connections seated now.
    pub fn len(&self) -> usize {
        self.lock().total
    }

    /// Whether no connection is seated.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Seat {
    /// Notes that the connection read a request now (the idlest gives way).
    pub fn touch(&self) {
        self.last.store(self.seats.now(), Ordering::Relaxed);
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        if self.id == 0 {
            return; // the cluster's own: never counted
        }
        let mut st = self.seats.lock();
        let Some(seated) = st.by_principal.get_mut(&self.principal) else {
            return;
        };
        // An evicted seat is gone from the table already.
        if let Some(i) = seated.iter().position(|s| s.id == self.id) {
            seated.swap_remove(i);
            self.seats.forget(&mut st, self.principal);
        }
    }
}

#[cfg(test)]
mod tests {

    use super::*;

    fn seats(limit: usize, per: usize) -> Arc<Seats> {
        Seats::new(limit, per, 8, Arc::default())
    }

    fn evicted(s: &Seat) -> bool {
        let n = s.evicted.notified();
        tokio::pin!(n);
        n.as_mut().enable()
    }

    #[test]
    fn a_flooding_principal_only_ever_evicts_its_own() {
        let t = seats(8, 8);
        let mut flood: Vec<Seat> = (0..8).map(|_| t.take(1).unwrap()).collect();
        for (i, s) in flood.iter().enumerate() {
            s.last.store(100 + i as u64, Ordering::Relaxed);
        }
        // Another principal gets in: the flooder's idlest goes.
        let other = t.take(2).unwrap();
        assert!(evicted(&flood[0]));
        assert!(flood[1..].iter().all(|s| !evicted(s)));
        assert_eq!(t.len(), 8);
        // The flooder's new ones take its own seats, never the other's.
        for _ in 0..20 {
            flood.push(t.take(1).unwrap());
        }
        assert!(!evicted(&other));
        assert_eq!(t.len(), 8);
        assert_eq!(t.counts.lock().unwrap()[&2], 1);
        assert_eq!(t.counts.lock().unwrap()[&1], 7);
        // Dropping every seat, evicted or not, leaves the table empty.
        drop(flood);
        drop(other);
        assert!(t.is_empty());
        assert!(t.counts.lock().unwrap().is_empty());
    }

    #[test]
    fn a_full_table_of_equals_gives_a_newcomers_own_seat_or_refuses_it() {
        let t = seats(4, 4);
        let a: Vec<Seat> = (0..2).map(|_| t.take(1).unwrap()).collect();
        let b: Vec<Seat> = (0..2).map(|_| t.take(2).unwrap()).collect();
        // Principal 3 holds none, fewer than 2 - 1: it gets in.
        let c = t.take(3).unwrap();
        assert_eq!(a.iter().chain(&b).filter(|s| evicted(s)).count(), 1);
        // Now 3 holds one, the largest two (not more than one more): its
        // own idlest gives way.
        let c2 = t.take(3).unwrap();
        assert!(evicted(&c));
        drop((c, c2));
        // A table of one connection per principal refuses a newcomer.
        let one = seats(2, 2);
        let _x = one.take(1).unwrap();
        let _y = one.take(2).unwrap();
        assert!(matches!(one.take(3), Err(Refused::Full)));
    }

    #[test]
    fn one_key_on_many_mounts_replaces_its_idlest_at_its_bound() {
        let t = seats(100, 3);
        let s: Vec<Seat> = (0..3).map(|_| t.take(9).unwrap()).collect();
        s[0].last.store(50, Ordering::Relaxed);
        s[1].last.store(10, Ordering::Relaxed);
        s[2].last.store(70, Ordering::Relaxed);
        let _new = t.take(9).unwrap();
        assert!(evicted(&s[1]));
        assert!(!evicted(&s[0]) && !evicted(&s[2]));
        assert_eq!(t.len(), 3);
    }

    #[test]
    fn a_principal_shares_one_budget_across_its_connections() {
        let t = seats(10, 10);
        let a = t.take(1).unwrap();
        let b = t.take(1).unwrap();
        let c = t.take(2).unwrap();
        let (ab, bb, cb) = (
            a.budget.clone().unwrap(),
            b.budget.clone().unwrap(),
            c.budget.clone().unwrap(),
        );
        assert!(Arc::ptr_eq(&ab, &bb));
        assert!(!Arc::ptr_eq(&ab, &cb));
        let held = ab.clone().try_acquire_many_owned(8).unwrap();
        assert!(bb.try_acquire().is_err());
        assert!(cb.try_acquire().is_ok());
        // Evicted and reconnected, a principal finds its old share, still
        // held by the connection that is closing: not a fresh one.
        drop((a, b));
        let again = t.take(1).unwrap();
        assert!(Arc::ptr_eq(again.budget.as_ref().unwrap(), &ab));
        drop((again, bb, cb, held, ab));
        let fresh = t.take(1).unwrap();
        assert_eq!(fresh.budget.as_ref().unwrap().available_permits(), 8);
    }

    #[test]
    fn the_clusters_own_principals_are_never_evicted_refused_or_counted() {
        let t = seats(2, 2);
        let mds = t.take(proto::auth::MDS_PRINCIPAL).unwrap();
        let member = t.take(proto::chain::member_principal(3)).unwrap();
        let _x = t.take(1).unwrap();
        let _y = t.take(2).unwrap();
        let mut kept = Vec::new();
        for _ in 0..10 {
            kept.extend(t.take(1).ok());
            kept.extend(t.take(5).ok());
        }
        assert!(!evicted(&mds) && !evicted(&member));
        assert!(mds.budget.is_none());
        assert_eq!(t.len(), 2);
        let more = t.take(proto::chain::member_principal(4)).unwrap();
        assert_eq!(t.len(), 2);
        drop((mds, member, more));
        assert_eq!(t.len(), 2);
        drop(kept);
    }
}
