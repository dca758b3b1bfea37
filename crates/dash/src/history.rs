//! The last hour of the cluster's throughput, kept in memory at a fixed
//! size: one point every [`INTERVAL`] (OSD data moved and requests, MDS
//! requests), at most [`POINTS`] of them.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

/// Time between two points.
pub const INTERVAL: Duration = Duration::from_secs(5);
/// Points kept: an hour.
pub const POINTS: usize = 720;

/// One sample of the whole cluster.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Point {
    /// Its place in the ring's order (1, 2, …; set when it is kept): what
    /// a reader asks for points after, whatever the clock did.
    pub seq: u64,
    /// When (ms since the epoch).
    pub t_ms: u64,
    /// Object data bytes read from OSDs per second (every copy counted).
    pub read_bps: u64,
    /// Object data bytes written to OSDs per second (every copy counted).
    pub write_bps: u64,
    /// OSD reads per second.
    pub read_iops: u64,
    /// OSD writes per second.
    pub write_iops: u64,
    /// MDS requests per second (mandatory and non-mandatory).
    pub meta_ops: u64,
}

/// The ring of points.
#[derive(Debug)]
pub struct History {
    points: Mutex<VecDeque<Point>>,
    cap: usize,
}

/// The last sequence number given (points are numbered from 1).
fn last_seq(q: &VecDeque<Point>) -> u64 {
    q.back().map_or(0, |p| p.seq)
}

impl Default for History {
    fn default() -> Self {
        History::with_capacity(POINTS)
    }
}

impl History {
    /// A ring keeping at most `cap` points.
    pub fn with_capacity(cap: usize) -> History {
        History {
            points: Mutex::new(VecDeque::with_capacity(cap.min(POINTS))),
            cap: cap.max(1),
        }
    }

    /// Adds a point (numbering it), dropping the oldest when full.
    pub fn push(&self, mut p: Point) {
        let mut q = self.points.lock().unwrap_or_else(|e| e.into_inner());
        p.seq = last_seq(&q) + 1;
        while q.len() >= self.cap {
            q.pop_front();
        }
        q.push_back(p);
    }

    /// The points numbered after `seq`, oldest first.
    pub fn after(&self, seq: u64) -> Vec<Point> {
        let q = self.points.lock().unwrap_or_else(|e| e.into_inner());
        q.iter().filter(|p| p.seq > seq).copied().collect()
    }

    /// Points held.
    pub fn len(&self) -> usize {
        self.points.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether no point is held yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Turns the cluster's counters into points: remembers the MDS's request
/// count between samples.
#[derive(Debug, Default)]
pub struct Sampler {
    last: Option<(std::time::Instant, u64)>,
}

impl Sampler {
    /// A point at `t_ms` from the OSDs' current rates and the MDS's
    /// request count `mds_requests` (since it started).
    pub fn sample(
        &mut self,
        t_ms: u64,
        osds: &[proto::mds::OsdStatus],
        mds_requests: u64,
    ) -> Point {
        let now = std::time::Instant::now();
        let meta_ops = match self.last {
            Some((at, n)) if mds_requests >= n => {
                let ms = now.duration_since(at).as_millis().max(1);
                ((u128::from(mds_requests - n) * 1000) / ms) as u64
            }
            _ => 0,
        };
        self.last = Some((now, mds_requests));
        let up = osds.iter().filter(|o| o.up);
        let mut p = Point {
            t_ms,
            meta_ops,
            ..Point::default()
        };
        for o in up {
            p.read_bps = p.read_bps.saturating_add(o.rates.bytes_out);
            p.write_bps = p.write_bps.saturating_add(o.rates.bytes_in);
            p.read_iops = p.read_iops.saturating_add(o.rates.reads);
            p.write_iops = p.write_iops.saturating_add(o.rates.writes);
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_keeps_the_newest_points_only() {
        let h = History::with_capacity(3);
        for t in 1..=5 {
            h.push(Point {
                t_ms: t,
                ..Point::default()
            });
        }
        let ts: Vec<u64> = h.after(0).iter().map(|p| p.t_ms).collect();
        assert_eq!(ts, [3, 4, 5]);
        assert_eq!(h.after(4).len(), 1);
        assert!(h.after(5).is_empty());
        // A clock stepping back does not hide new points.
        h.push(Point {
            t_ms: 1,
            ..Point::default()
        });
        assert_eq!(h.after(5).len(), 1);
    }

    #[test]
    fn down_osds_and_a_restarted_mds_count_nothing() {
        let mut s = Sampler::default();
        let osd = |up, bytes_out| proto::mds::OsdStatus {
            id: 0,
            addr: String::new(),
            weight: 0,
            up,
            is_in: true,
            host: String::new(),
            last_seen_ms: None,
            capacity: 0,
            used: 0,
            objects: 0,
            rates: proto::mds::OsdRates {
                bytes_out,
                ..Default::default()
            },
        };
        let p = s.sample(1, &[osd(true, 10), osd(false, 1_000)], 100);
        assert_eq!(
            (p.read_bps, p.meta_ops),
            (10, 0),
            "first sample has no rate"
        );
        let p = s.sample(2, &[], 50);
        assert_eq!(p.meta_ops, 0, "the count went down: a new MDS");
    }
}
