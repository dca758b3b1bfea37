//! Unit tests of the lease table's bounds (`super::leases`).

use super::*;

fn lease(holder: u64, principal: u64) -> Lease {
    Lease {
        holder,
        principal,
        heard: Instant::now(),
        contended: false,
        ids: Vec::new(),
        target: LEASE_IDS,
    }
}

fn held_by(l: &Leases, principal: u64) -> usize {
    l.held.values().filter(|x| x.principal == principal).count()
}

#[test]
fn a_principal_at_its_bound_is_refused_and_only_it() {
    let mut l = Leases::default();
    for d in 0..LEASES_PER_PRINCIPAL as u64 {
        l.make_room(d, 1, 7).unwrap();
        l.put(d, lease(1, 7));
    }
    let e = l.make_room(1 << 40, 2, 7).unwrap_err();
    assert_eq!(e.errno, Errno::Busy);
    assert!(e.message.contains("this principal holds"), "{}", e.message);
    // Its own lease again is no new one; another principal is let in.
    l.make_room(5, 1, 7).unwrap();
    l.make_room(1 << 40, 3, 8).unwrap();
    // Once its leases lapse (its client died), they are swept.
    for x in l.held.values_mut() {
        x.heard -= Duration::from_millis(3 * LEASE_TERM_MS);
    }
    l.swept = None;
    l.make_room(1 << 40, 2, 7).unwrap();
    assert_eq!(held_by(&l, 7), 0);
    assert!(!l.per_principal.contains_key(&7));
}

#[test]
fn a_full_table_takes_no_live_lease_and_sweeps_lapsed_ones() {
    let mut l = Leases::default();
    for i in 0..LEASES_MAX as u64 {
        l.put(i, lease(i % 8, i % 8));
    }
    let e = l.make_room(1 << 51, 99, 20).unwrap_err();
    assert!(
        e.message.contains("directory leases are held"),
        "{}",
        e.message
    );
    assert_eq!(l.held.len(), LEASES_MAX);
    // A directory leased already needs no new room (whether its lease
    // may be taken is judged before).
    l.make_room(3, 99, 20).unwrap();
    // Lapsed leases make room, but one a request is under way in stays.
    for d in [10, 11] {
        l.held.get_mut(&d).unwrap().heard -= Duration::from_millis(3 * LEASE_TERM_MS);
    }
    l.active.entry(11).or_default().insert(11 % 8, 1);
    l.swept = None;
    l.make_room(1 << 51, 99, 20).unwrap();
    assert!(!l.held.contains_key(&10) && l.held.contains_key(&11));
    let counted: usize = l.per_principal.values().sum();
    assert_eq!(counted, l.held.len());
}

#[test]
fn the_memory_of_recent_users_stays_bounded_under_a_burst() {
    let mut l = Leases::default();
    for d in 0..(RECENT_MAX as u64 + 1_000) {
        l.used(d, d);
        assert!(l.recent.len() <= RECENT_MAX);
    }
    assert!(l.recent.contains_key(&(RECENT_MAX as u64 + 999)));
}
