//! The cluster map as the MDS keeps it: the persistent OSD map (epochs in
//! the KV, so files placed with an old epoch still find their objects) and
//! the live view from heartbeats (up/down, space), kept in memory only.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use proto::KeyRing;
use proto::mds::{Errno, MdsError, OsdLoad, OsdRates, OsdReport, OsdStatus};
use proto::placement::{OsdEntry, OsdMap, PLACEMENT_VERSION};

/// What the last heartbeat of an OSD said.
#[derive(Debug, Clone)]
pub struct Live {
    /// When it arrived.
    pub seen: Instant,
    /// The OSD's clock then (replays must be newer).
    pub at_ms: u64,
    /// Capacity.
    pub capacity: u64,
    /// Used.
    pub used: u64,
    /// Objects.
    pub objects: u64,
    /// What it had served when it sent the report.
    pub load: OsdLoad,
    /// Its rates between this report and the one before.
    pub rates: OsdRates,
}

/// The rates between two load reports sent `ms` apart (by the OSD's own
/// clock, so reports delayed on the way and delivered together do not make
/// a spike). A restarted OSD (any counter going down) or reports under
/// 50 ms apart give zeros; a rate never wraps.
pub fn rates(old: &OsdLoad, new: &OsdLoad, ms: u64) -> OsdRates {
    let went_down = new.requests < old.requests
        || new.reads < old.reads
        || new.writes < old.writes
        || new.bytes_in < old.bytes_in
        || new.bytes_out < old.bytes_out
        || new.busy_us < old.busy_us;
    if ms < 50 || went_down {
        return OsdRates::default();
    }
    let per_s = |a: u64, b: u64| {
        u64::try_from((u128::from(b - a) * 1000) / u128::from(ms)).unwrap_or(u64::MAX)
    };
    let served = new.requests - old.requests;
    OsdRates {
        requests: per_s(old.requests, new.requests),
        reads: per_s(old.reads, new.reads),
        writes: per_s(old.writes, new.writes),
        bytes_in: per_s(old.bytes_in, new.bytes_in),
        bytes_out: per_s(old.bytes_out, new.bytes_out),
        latency_us: (new.busy_us - old.busy_us).checked_div(served).unwrap_or(0),
    }
}

/// Live state of every OSD that reported since this MDS started.
#[derive(Debug, Default)]
pub struct LiveMap {
    /// By OSD id.
    pub osds: HashMap<u32, Live>,
    /// The newest report time accepted per OSD, claimed before its map
    /// change is written (a replay of it, or of anything older, is
    /// refused even while that write is in flight).
    pub claimed: HashMap<u32, u64>,
}

/// Verifies a report's MAC against the OSD's key ring.
pub fn verify_report(r: &OsdReport, cluster_id: &str, ring: &KeyRing) -> Result<(), MdsError> {
    if r.verify(cluster_id, ring) {
        return Ok(());
    }
    Err(MdsError::new(
        Errno::Access,
        format!(
            "OSD {} report: MAC does not verify with its key (version {})",
            r.osd_id, r.key_version
        ),
    ))
}

/// The map after `r` registers: `None` when nothing placement-relevant
/// changed (address and weight the same).
pub fn map_after(current: &OsdMap, r: &OsdReport) -> Option<OsdMap> {
    match current.osds.iter().find(|o| o.id == r.osd_id) {
        Some(o) if o.addr == r.addr && o.weight == r.weight && o.host == r.host => None,
        _ => {
            let mut m = current.clone();
            m.epoch += 1;
            m.version = PLACEMENT_VERSION;
            match m.osds.iter_mut().find(|o| o.id == r.osd_id) {
                Some(o) => {
                    o.addr = r.addr.clone();
                    o.weight = r.weight;
                    o.host = r.host.clone();
                }
                None => m.osds.push(OsdEntry {
                    id: r.osd_id,
                    addr: r.addr.clone(),
                    weight: r.weight,
                    host: r.host.clone(),
                    out: false,
                }),
            }
            m.osds.sort_by_key(|o| o.id);
            Some(m)
        }
    }
}

impl LiveMap {
    /// Status rows for every OSD in `map`. One not heard from since this
    /// MDS `started` counts as up until a lease has passed since then: it
    /// may still hold the lease an earlier MDS (a group's former leader)
    /// granted, and is fenced only after that, so a failover does not
    /// show every OSD down until each reports again.
    pub fn status(
        &self,
        map: &OsdMap,
        down_after: Duration,
        started: std::time::Instant,
    ) -> Vec<OsdStatus> {
        map.osds
            .iter()
            .map(|o| {
                let l = self.osds.get(&o.id);
                OsdStatus {
                    id: o.id,
                    addr: o.addr.clone(),
                    weight: o.weight,
                    up: l.map_or(started, |l| l.seen).elapsed() < down_after,
                    is_in: !o.out,
                    host: o.host.clone(),
                    last_seen_ms: l.map(|l| l.seen.elapsed().as_millis() as u64),
                    capacity: l.map_or(0, |l| l.capacity),
                    used: l.map_or(0, |l| l.used),
                    objects: l.map_or(0, |l| l.objects),
                    rates: l
                        .filter(|l| l.seen.elapsed() < down_after)
                        .map_or_else(Default::default, |l| l.rates),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_never_wrap_nor_follow_a_restart() {
        let a = OsdLoad {
            requests: 100,
            writes: 10,
            reads: 20,
            bytes_in: 1 << 20,
            bytes_out: 2 << 20,
            busy_us: 5_000,
        };
        let b = OsdLoad {
            requests: 300,
            writes: 110,
            reads: 120,
            bytes_in: 3 << 20,
            bytes_out: 2 << 20,
            busy_us: 25_000,
        };
        let r = rates(&a, &b, 2_000);
        assert_eq!(
            (r.requests, r.writes, r.bytes_in, r.bytes_out),
            (100, 50, 1 << 20, 0)
        );
        assert_eq!(r.latency_us, 100, "20 ms over 200 requests");
        assert_eq!(rates(&b, &a, 2_000), OsdRates::default(), "a restarted OSD");
        assert_eq!(
            rates(&a, &b, 10),
            OsdRates::default(),
            "reports 10 ms apart"
        );
        let huge = OsdLoad {
            bytes_in: u64::MAX,
            ..b
        };
        assert_eq!(
            rates(&a, &huge, 50).bytes_in,
            u64::MAX,
            "clamped, not wrapped"
        );
    }
}
