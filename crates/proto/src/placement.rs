//! Placement: which OSD holds each stripe object of a file. A deterministic
//! function of (object id, OSD map) so every client computes it without
//! asking anyone; part of the protocol, versioned by [`PLACEMENT_VERSION`].
//!
//! Version 1 is weighted rendezvous hashing in the straw2 form: every OSD
//! with a non-zero weight draws `-log2(u) / weight` where `u` is a uniform
//! 64-bit hash of (object id, OSD id) seen as a fraction in (0, 1); OSDs
//! ranked by smallest draw (ties by id); stripe `j` goes to the `j`-th. The
//! logarithm is computed in fixed point with integer arithmetic only, so
//! every platform agrees bit for bit (no libm). Adding an OSD of weight
//! `w` to a map of total weight `W` moves only the objects it wins, about
//! `w / (W + w)` of them; stripes of one object set are on distinct OSDs.

use serde::{Deserialize, Serialize};

/// Version of the placement function.
pub const PLACEMENT_VERSION: u32 = 1;
/// Weight of 1.0 (weights are 16.16 fixed point).
pub const WEIGHT_ONE: u32 = 0x1_0000;
const SEED: u64 = 0x7465_7373_6572_6131; // "tessera1"

/// One OSD in the map.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OsdEntry {
    /// OSD id (unique in the cluster).
    pub id: u32,
    /// Where it listens (`host:port`).
    pub addr: String,
    /// Relative weight, 16.16 fixed point; 0 = takes no new placements.
    pub weight: u32,
    /// Failure domain: the host it runs on, or `rack/host` (`tessera osd
    /// --rack`). Copies of one object go to distinct racks, then distinct
    /// hosts, as far as the map has them ([`pick_spread`]).
    pub host: String,
    /// Marked out (by the operator, or by the MDS after it was down longer
    /// than `out_after`): takes no placements, its copies are re-made elsewhere.
    pub out: bool,
}

impl OsdEntry {
    /// Whether placement may choose it (weight > 0 and not out).
    pub fn placeable(&self) -> bool {
        self.weight > 0 && !self.out
    }
}

/// The cluster's OSD map at one epoch: a few numbers per OSD, not a list of
/// objects. Epochs only grow; a file records the epoch it was placed with.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct OsdMap {
    /// Epoch (bumped on every change of membership, address or weight).
    pub epoch: u64,
    /// Placement function version.
    pub version: u32,
    /// OSDs, sorted by id.
    pub osds: Vec<OsdEntry>,
}

/// `-log2(x / 2^64)` for `x` in `[1, 2^64)`, in 32.32 fixed point (so
/// 1.0 = 2^32). Exact integer part, 32 fraction bits by repeated squaring.
pub fn neg_log2_fraction(x: u64) -> u64 {
    let x = x.max(1);
    let msb = 63 - u64::from(x.leading_zeros());
    // mantissa m in [1, 2) as 1.63 fixed point
    let mut m: u128 = u128::from(x) << (63 - msb);
    let mut frac: u64 = 0;
    for i in (0..32).rev() {
        m = (m * m) >> 63;
        if m >= (1u128 << 64) {
            m >>= 1;
            frac |= 1 << i;
        }
    }
    // log2(x) = msb + frac; -log2(x/2^64) = 64 - msb - frac
    ((64 - msb) << 32) - frac
}

/// The hash placement is built on: xxh3 of (object id, OSD id) with a fixed seed.
pub fn draw_hash(oid: u64, osd: u32) -> u64 {
    let mut b = [0u8; 12];
    b[..8].copy_from_slice(&oid.to_le_bytes());
    b[8..].copy_from_slice(&osd.to_le_bytes());
    xxhash_rust::xxh3::xxh3_64_with_seed(&b, SEED)
}

impl OsdMap {
    /// OSDs that take placements (weight > 0, not out).
    pub fn placeable(&self) -> usize {
        self.osds.iter().filter(|o| o.placeable()).count()
    }

    /// The entry of OSD `id`.
    pub fn osd(&self, id: u32) -> Option<&OsdEntry> {
        self.osds.iter().find(|o| o.id == id)
    }

    /// Each placeable OSD's weighted straw2 draw for object set `oid`
    /// (the smallest wins).
    fn draws(&self, oid: u64) -> Vec<(u128, &OsdEntry)> {
        self.osds
            .iter()
            .filter(|o| o.placeable())
            .map(|o| {
                let l = u128::from(neg_log2_fraction(draw_hash(oid, o.id)));
                ((l << 32) / u128::from(o.weight), o)
            })
            .collect()
    }

    /// Every placeable OSD ranked for object set `oid` (smallest draw first).
    pub fn ranking(&self, oid: u64) -> Vec<&OsdEntry> {
        let mut draws = self.draws(oid);
        draws.sort_unstable_by_key(|d| (d.0, d.1.id));
        draws.into_iter().map(|d| d.1).collect()
    }

    /// The copies of object set `oid`: for each of `stripes` stripes, up to
    /// `replicas` OSDs. Walks the ranking: no OSD holds two copies of one
    /// set (its stripe objects share the id); the copies of one stripe go
    /// to distinct racks, then hosts, while the ranking has one not yet
    /// used for that stripe ([`pick_spread`]). With fewer placeable OSDs than `stripes × replicas`, later
    /// stripes get fewer copies (the set is *degraded* until OSDs are added).
    /// With one copy and one host this is [`OsdMap::place`].
    pub fn place_copies(&self, oid: u64, stripes: u32, replicas: u32) -> Vec<Vec<u32>> {
        let ranking = self.ranking(oid);
        let mut used = vec![false; ranking.len()];
        let mut out = Vec::with_capacity(stripes as usize);
        for _ in 0..stripes {
            let mut copies: Vec<u32> = Vec::new();
            let mut hosts: Vec<&str> = Vec::new();
            for _ in 0..replicas {
                let free = (0..ranking.len())
                    .filter(|&i| !used[i])
                    .map(|i| (i, ranking[i].host.as_str()));
                let Some(i) = pick_spread(free, &hosts) else {
                    break;
                };
                used[i] = true;
                hosts.push(&ranking[i].host);
                copies.push(ranking[i].id);
            }
            out.push(copies);
        }
        out
    }

    /// OSD ids for `count` stripe objects of object set `oid`, in stripe
    /// order; distinct while `count` ≤ the placeable OSDs (then it is capped
    /// there). Empty when no OSD is placeable.
    pub fn place(&self, oid: u64, count: u32) -> Vec<u32> {
        let mut draws: Vec<(u128, u32)> = self
            .draws(oid)
            .into_iter()
            .map(|(d, o)| (d, o.id))
            .collect();
        let n = (count as usize).min(draws.len());
        if n == 0 {
            return Vec::new();
        }
        draws.select_nth_unstable(n - 1);
        draws.truncate(n);
        draws.sort_unstable();
        draws.into_iter().map(|d| d.1).collect()
    }

    /// The address of OSD `id`.
    pub fn addr(&self, id: u32) -> Option<&str> {
        self.osd(id).map(|o| o.addr.as_str())
    }
}

/// The rack of a failure domain: the part of `host` before its `/`, or
/// the host itself (a host named without a rack is a rack of its own).
pub fn rack_of(host: &str) -> &str {
    host.split_once('/').map_or(host, |(rack, _)| rack)
}

/// The first candidate (index, failure domain), in ranking order, in a
/// rack none of `used` is in; else on a host none of `used` is on; else
/// the first. So copies spread over racks first, then hosts, and still
/// land somewhere when the map has too few of either.
pub fn pick_spread<'a>(
    candidates: impl Iterator<Item = (usize, &'a str)> + Clone,
    used: &[&str],
) -> Option<usize> {
    let racks: Vec<&str> = used.iter().map(|h| rack_of(h)).collect();
    candidates
        .clone()
        .find(|(_, h)| !racks.contains(&rack_of(h)))
        .or_else(|| candidates.clone().find(|(_, h)| !used.contains(h)))
        .or_else(|| candidates.clone().next())
        .map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(n: u32) -> OsdMap {
        OsdMap {
            epoch: 1,
            version: PLACEMENT_VERSION,
            osds: (0..n)
                .map(|id| OsdEntry {
                    id,
                    addr: format!("127.0.0.1:{}", 7000 + id),
                    weight: WEIGHT_ONE,
                    host: String::new(),
                    out: false,
                })
                .collect(),
        }
    }

    #[test]
    fn fixed_point_log_matches_float() {
        for x in [
            1u64,
            2,
            3,
            1000,
            1 << 40,
            u64::MAX / 3,
            u64::MAX - 1,
            u64::MAX,
        ] {
            let got = neg_log2_fraction(x) as f64 / 4294967296.0;
            let want = -((x as f64) / 18446744073709551616.0).log2();
            assert!((got - want).abs() < 1e-6, "x={x} got {got} want {want}");
        }
    }

    #[test]
    fn stripes_land_on_distinct_osds() {
        let m = map(5);
        for oid in 0..2000u64 {
            let p = m.place(oid, 4);
            assert_eq!(p.len(), 4);
            let mut s = p.clone();
            s.sort_unstable();
            s.dedup();
            assert_eq!(s.len(), 4, "oid {oid}: {p:?}");
            // a prefix of a longer ranking: count does not reshuffle stripes
            assert_eq!(&m.place(oid, 5)[..4], &p[..]);
        }
        assert_eq!(m.place(7, 9).len(), 5, "capped at the placeable OSDs");
        assert!(OsdMap::default().place(7, 1).is_empty());
    }

    #[test]
    fn adding_one_osd_moves_about_its_share() {
        for n in [2u32, 4, 8, 16] {
            let before = map(n);
            let after = map(n + 1);
            let total = 20_000u64;
            let moved = (0..total)
                .filter(|&oid| before.place(oid, 1) != after.place(oid, 1))
                .count() as f64;
            let want = total as f64 / f64::from(n + 1);
            assert!(
                (moved - want).abs() < want * 0.1,
                "n={n}: moved {moved}, expected about {want}"
            );
            // every moved object moved to the new OSD
            for oid in 0..total {
                let (a, b) = (before.place(oid, 1), after.place(oid, 1));
                assert!(a == b || b == vec![n]);
            }
        }
    }

    #[test]
    fn weights_are_respected() {
        let mut m = map(3);
        m.osds[2].weight = 2 * WEIGHT_ONE;
        let mut hits = [0u32; 3];
        for oid in 0..40_000u64 {
            hits[m.place(oid, 1)[0] as usize] += 1;
        }
        // expected shares 1/4, 1/4, 1/2
        assert!((hits[2] as f64 / 40_000.0 - 0.5).abs() < 0.02, "{hits:?}");
        m.osds[0].weight = 0;
        assert!((0..1000).all(|oid| m.place(oid, 2).iter().all(|&o| o != 0)));
    }

    #[test]
    fn placement_is_pinned() {
        // Changing these answers changes the protocol: bump PLACEMENT_VERSION.
        let m = map(4);
        let got: Vec<Vec<u32>> = (0..4).map(|oid| m.place(oid, 4)).collect();
        assert_eq!(got, PINNED.to_vec());
    }

    #[test]
    fn copies_spread_over_racks_before_hosts() {
        // Rack r1 holds four hosts, r2 two, r3 one: ranking order alone
        // would often put two of three copies in r1.
        let mut m = map(7);
        for o in &mut m.osds {
            let rack = ["r1", "r1", "r1", "r1", "r2", "r2", "r3"][o.id as usize];
            o.host = format!("{rack}/h{}", o.id);
        }
        for oid in 0..2000u64 {
            let c = m.place_copies(oid, 1, 3);
            let racks: std::collections::BTreeSet<&str> = c[0]
                .iter()
                .map(|&id| rack_of(&m.osd(id).unwrap().host))
                .collect();
            assert_eq!(racks.len(), 3, "oid {oid}: {c:?} not on three racks");
        }
        // Two racks for three copies: both racks, and three hosts.
        for o in &mut m.osds {
            let rack = if o.id < 4 { "r1" } else { "r2" };
            o.host = format!("{rack}/h{}", o.id);
        }
        for oid in 0..500u64 {
            let c = m.place_copies(oid, 1, 3);
            let hosts: Vec<&str> = c[0]
                .iter()
                .map(|&id| m.osd(id).unwrap().host.as_str())
                .collect();
            let racks: std::collections::BTreeSet<&str> =
                hosts.iter().map(|h| rack_of(h)).collect();
            assert_eq!((racks.len(), hosts.len()), (2, 3), "oid {oid}: {hosts:?}");
        }
        assert_eq!(rack_of("r1/h1"), "r1");
        assert_eq!(rack_of("h1"), "h1", "a host without a rack is its own");
        let cands = [(0, "r1/a"), (1, "r1/b"), (2, "r2/c")];
        assert_eq!(pick_spread(cands.iter().copied(), &["r1/a"]), Some(2));
        assert_eq!(pick_spread(cands[..2].iter().copied(), &["r1/a"]), Some(1));
        assert_eq!(pick_spread(cands[..1].iter().copied(), &["r1/a"]), Some(0));
        assert_eq!(pick_spread(std::iter::empty(), &[]), None);
    }

    #[test]
    fn copies_are_distinct_and_spread_over_hosts() {
        let mut m = map(6);
        // hosts a, a, b, b, c, c
        for o in &mut m.osds {
            o.host = ["a", "b", "c"][o.id as usize / 2].into();
        }
        for oid in 0..2000u64 {
            let c = m.place_copies(oid, 2, 3);
            assert_eq!(c.len(), 2);
            let all: Vec<u32> = c.iter().flatten().copied().collect();
            let mut s = all.clone();
            s.sort_unstable();
            s.dedup();
            assert_eq!(s.len(), 6, "oid {oid}: {c:?} repeats an OSD");
            for stripe in &c {
                let mut hosts: Vec<&str> = stripe
                    .iter()
                    .map(|&id| m.osd(id).unwrap().host.as_str())
                    .collect();
                hosts.sort_unstable();
                hosts.dedup();
                // first stripe always finds three hosts; the second takes what is left
                assert!(hosts.len() >= 2 || stripe.len() < 2, "oid {oid}: {c:?}");
            }
            assert_eq!(
                c[0].iter()
                    .map(|&id| m.osd(id).unwrap().host.clone())
                    .collect::<std::collections::BTreeSet<_>>()
                    .len(),
                3,
                "oid {oid}: first stripe not on three hosts: {c:?}"
            );
        }
        // one copy on one host: the same answer as `place`
        let m = map(5);
        for oid in 0..500u64 {
            let c: Vec<u32> = m.place_copies(oid, 3, 1).into_iter().flatten().collect();
            assert_eq!(c, m.place(oid, 3));
        }
        // too few OSDs: later stripes come up short, never a repeat
        let c = map(3).place_copies(9, 2, 2);
        assert_eq!((c[0].len(), c[1].len()), (2, 1));
        // out OSDs are never chosen
        let mut m = map(4);
        m.osds[1].out = true;
        assert!((0..500).all(|oid| m.place_copies(oid, 1, 3)[0].iter().all(|&o| o != 1)));
    }

    const PINNED: [[u32; 4]; 4] = [[0, 2, 1, 3], [1, 2, 0, 3], [1, 2, 0, 3], [3, 1, 2, 0]];
}
