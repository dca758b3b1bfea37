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
    /// Bytes of file data at `copies` copies the cluster holds and can
    /// still take (`used / copies + avail`: raw room no placement can
    /// reach counts as neither).
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
    let raw_capacity = live.iter().fold(0u64, |a, o| a.saturating_add(o.capacity));
    let raw_used = live
        .iter()
        .fold(0u64, |a, o| a.saturating_add(o.used.min(o.capacity)));
    let copies = replicas.clamp(1, (live.len() as u32).max(1));
    let free = |o: &OsdStatus| o.capacity.saturating_sub(o.used) as f64;
    let total_free: f64 = live.iter().map(|o| free(o)).sum();
    let takers: Vec<&&OsdStatus> = live.iter().filter(|o| o.weight > 0).collect();
    let weights: Vec<f64> = takers.iter().map(|o| f64::from(o.weight)).collect();
    let shares = shares(&weights, copies);
    // Each OSD takes its share of the raw bytes written: it is full once
    // `free / share` raw bytes are written in all.
    let by_fullest = takers
        .iter()
        .zip(&shares)
        .filter(|(_, s)| **s > 0.0)
        .map(|(o, s)| free(o) / s)
        .fold(f64::INFINITY, f64::min);
    // Too few OSDs take data to hold `copies` copies: nothing can be placed.
    let placeable = shares.iter().sum::<f64>() > 1.0 - 1e-9;
    let raw_avail = if by_fullest.is_finite() && placeable {
        by_fullest.min(total_free)
    } else {
        0.0
    };
    let used = raw_used / u64::from(copies);
    let avail = (raw_avail / f64::from(copies)) as u64;
    Space {
        raw_capacity,
        raw_used,
        // What is stored plus what can still be: space no placement can
        // reach (a lone large OSD) is neither.
        capacity: used.saturating_add(avail),
        avail,
        copies,
    }
}

/// Each OSD's part of the raw bytes written at `copies` copies: by weight,
/// but never more than one copy of each object (1 / `copies`), the excess
/// going to the others by weight (water-filling). The parts sum to less
/// than 1 when too few OSDs take data to hold every copy.
fn shares(weights: &[f64], copies: u32) -> Vec<f64> {
    let cap = 1.0 / f64::from(copies);
    let mut share = vec![0.0; weights.len()];
    let mut capped = vec![false; weights.len()];
    let mut left = 1.0;
    for _ in 0..=weights.len() {
        let open: f64 = (0..weights.len())
            .filter(|&i| !capped[i])
            .map(|i| weights[i])
            .sum();
        if open <= 0.0 || left <= 1e-12 {
            break;
        }
        for i in (0..weights.len()).filter(|&i| !capped[i]) {
            share[i] = left * weights[i] / open;
        }
        let over: Vec<usize> = (0..weights.len())
            .filter(|&i| !capped[i] && share[i] > cap)
            .collect();
        if over.is_empty() {
            break;
        }
        for i in over {
            share[i] = cap;
            capped[i] = true;
            left -= cap;
        }
    }
    share
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
            rates: Default::default(),
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
            mds_group: None,
        };
        assert_eq!(status(84).health().level, "HEALTH_OK");
        let h = status(86).health();
        assert_eq!(h.level, "HEALTH_WARN");
        assert_eq!(h.reasons, ["OSD 1 is nearly full (86 % used)"]);
        let h = status(96).health();
        assert_eq!(h.level, "HEALTH_ERR");
        assert_eq!(h.reasons, ["OSD 1 is full (96 % used)"]);
        // A group that lost every full copy is an error of its own, not
        // counted again among the unavailable ones.
        let mut lost = status(10);
        lost.redundancy.groups = 3;
        lost.redundancy.groups_unavailable = 2;
        lost.redundancy.groups_lost = 1;
        let h = lost.health();
        assert_eq!(h.level, "HEALTH_ERR");
        assert!(
            h.reasons[0].starts_with("1 replica groups lost every full copy"),
            "{h:?}"
        );
        assert_eq!(h.reasons[1], "1 replica groups unavailable (no member up)");
        // A link cut between two members that are both up: the group's
        // writes fail, so it is an error, with the link named.
        let mut cut = status(10);
        cut.redundancy.groups = 3;
        cut.redundancy.groups_cut = 1;
        cut.redundancy.cut_links = vec![(2, 1, 3)];
        let h = cut.health();
        assert_eq!(h.level, "HEALTH_ERR");
        assert_eq!(
            h.reasons,
            [
                "1 replica groups cannot take writes: a member cannot reach its successor though \
              both are up (group 2: OSD 1 cannot reach OSD 3)"
            ]
        );
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
    fn one_osd_holds_at_most_one_copy_of_each_object() {
        // Weights 1 and 3 at two copies: every object has a copy on each,
        // so the small one bounds it (10 GiB), not its weight (20 GiB).
        let osds = vec![osd(1, 10 * GIB, 0, 1 << 16), osd(2, 30 * GIB, 0, 3 << 16)];
        let s = usable(&osds, 2);
        assert_eq!(s.avail, 10 * GIB);
        assert_eq!(
            s.capacity,
            10 * GIB,
            "the big OSD's extra room is not usable"
        );
        let sh = shares(&[1.0, 1.0, 6.0], 2);
        assert!(
            (sh[2] - 0.5).abs() < 1e-9 && (sh[0] - 0.25).abs() < 1e-9,
            "{sh:?}"
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
        // What is stored (7 GiB raw at two copies) plus what still fits.
        assert_eq!(s.capacity, 7 * GIB / 2 + 3 * GIB / 2);
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
        // One OSD takes new data and holds one copy of each object:
        // nothing can be placed at two copies.
        assert_eq!(s.avail, 0);
        assert_eq!(
            usable(&[], 3),
            Space {
                copies: 1,
                ..Space::default()
            }
        );
    }
}
