//! What a user can write: the cluster's raw space seen through its copies
//! (as `ceph df`'s MAX AVAIL does), and how full each OSD may get before
//! health says so.

use crate::mds::OsdStatus;

/// An OSD this full (used / capacity) makes health WARN ("nearly full").
pub const NEARFULL: f64 = 0.85;
/// An OSD this full makes health ERR ("full").
pub const FULL: f64 = 0.95;

/// Raw and usable space of the OSDs that are up and in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Space {
    /// Bytes of capacity, every copy counted.
    pub raw_capacity: u64,
    /// Bytes used, every copy counted.
    pub raw_used: u64,
    /// Bytes of file data the cluster holds at `copies` copies.
    pub capacity: u64,
    /// Bytes of file data that can still be written at `copies` copies:
    /// placement spreads data by weight, so the OSD that fills first
    /// bounds it, and each byte written costs `copies` bytes.
    pub avail: u64,
    /// Copies counted (the replica count asked for, at most the OSDs in).
    pub copies: u32,
}

/// The space of `osds` (those up and in) at `replicas` copies.
pub fn usable(osds: &[OsdStatus], replicas: u32) -> Space {
    let live: Vec<&OsdStatus> = osds.iter().filter(|o| o.up && o.is_in).collect();
    let raw_capacity: u64 = live.iter().map(|o| o.capacity).sum();
    let raw_used: u64 = live.iter().map(|o| o.used.min(o.capacity)).sum();
    let copies = replicas.clamp(1, (live.len() as u32).max(1));
    let free = |o: &OsdStatus| o.capacity.saturating_sub(o.used) as f64;
    let total_free: f64 = live.iter().map(|o| free(o)).sum();
    let weights: f64 = live.iter().map(|o| f64::from(o.weight)).sum();
    // Each OSD takes `weight / weights` of the data written (times the
    // copies): it is full once `free / share` bytes are written in all.
    let by_fullest = live
        .iter()
        .filter(|o| o.weight > 0)
        .map(|o| free(o) / (f64::from(o.weight) / weights))
        .fold(f64::INFINITY, f64::min);
    let raw_avail = if weights > 0.0 {
        by_fullest.min(total_free)
    } else {
        0.0
    };
    Space {
        raw_capacity,
        raw_used,
        capacity: raw_capacity / u64::from(copies),
        avail: (raw_avail / f64::from(copies)) as u64,
        copies,
    }
}

/// The fill ratio of an OSD (0 when it reports no capacity).
pub fn fill_ratio(o: &OsdStatus) -> f64 {
    if o.capacity == 0 {
        0.0
    } else {
        o.used as f64 / o.capacity as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn osd(id: u32, capacity: u64, used: u64, weight: u32) -> OsdStatus {
        OsdStatus {
            id,
            addr: String::new(),
            weight,
            up: true,
            is_in: true,
            host: String::new(),
            last_seen_ms: None,
            capacity,
            used,
            objects: 0,
        }
    }

    const GIB: u64 = 1 << 30;

    #[test]
    fn health_warns_at_85_and_errs_at_95_percent_full() {
        let status = |used: u64| crate::mds::ClusterStatus {
            cluster_id: "c".into(),
            epoch: 1,
            osds: vec![
                osd(1, 100 * GIB, used * GIB, 1 << 16),
                osd(2, 100 * GIB, 0, 1 << 16),
            ],
            inodes: 1,
            id_policy: String::new(),
            mandatory: 0,
            non_mandatory: 0,
            delete_queue: 0,
            orphans: 0,
            redundancy: crate::mds::Redundancy {
                checked: true,
                max_replicas: 2,
                ..Default::default()
            },
            replay_wait: None,
        };
        assert_eq!(status(84).health().level, "HEALTH_OK");
        let h = status(86).health();
        assert_eq!(h.level, "HEALTH_WARN");
        assert_eq!(h.reasons, ["OSD 1 is nearly full (86 % used)"]);
        let h = status(96).health();
        assert_eq!(h.level, "HEALTH_ERR");
        assert_eq!(h.reasons, ["OSD 1 is full (96 % used)"]);
    }

    #[test]
    fn three_even_osds_at_three_copies_hold_one_osd_of_data() {
        let osds: Vec<_> = (1..=3).map(|i| osd(i, 8 * GIB, 0, 1 << 16)).collect();
        let s = usable(&osds, 3);
        assert_eq!(
            (s.raw_capacity, s.capacity, s.avail, s.copies),
            (24 * GIB, 8 * GIB, 8 * GIB, 3)
        );
    }

    #[test]
    fn the_fullest_osd_bounds_what_can_be_written() {
        // Equal weights, one OSD nearly full: data lands evenly, so it
        // fills first — 1 GiB free there is 3 GiB of raw writes in all.
        let osds = vec![
            osd(1, 8 * GIB, 7 * GIB, 1 << 16),
            osd(2, 8 * GIB, 0, 1 << 16),
            osd(3, 8 * GIB, 0, 1 << 16),
        ];
        let s = usable(&osds, 2);
        assert_eq!(s.avail, 3 * GIB / 2);
        assert_eq!(s.capacity, 12 * GIB);
    }

    #[test]
    fn down_out_and_weightless_osds_hold_nothing_new() {
        let mut osds = vec![osd(1, 8 * GIB, 0, 1 << 16), osd(2, 8 * GIB, 0, 0)];
        osds.push(OsdStatus {
            up: false,
            ..osd(3, 8 * GIB, 0, 1 << 16)
        });
        let s = usable(&osds, 3);
        assert_eq!(s.copies, 2, "at most the OSDs in and up");
        assert_eq!(s.raw_capacity, 16 * GIB);
        assert_eq!(s.avail, 8 * GIB / 2);
        assert_eq!(
            usable(&[], 3),
            Space {
                copies: 1,
                ..Space::default()
            }
        );
    }
}
