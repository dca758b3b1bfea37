//! Object-id policies (Hendricks et al. §3.2): how the MDS numbers new files and
//! directories. Pure code with no storage, so the trace simulator runs the
//! very same policies.
//!
//! * `create-order`: a counter.
//! * `pseudo-random`: a keyed hash of a counter (no locality at all).
//! * `child-closest` / `cousin-closest`: *namespace flattening*. An id is
//!   `[region][directory slots][file number]`. Each directory level owns a
//!   slot; a directory's children are numbered within it (file number 0 is
//!   the directory itself). Child-closest fills slots left to right (a
//!   subtree is one id range; depth-first neighbours are close);
//!   cousin-closest packs the path right-aligned, so directories of one
//!   level are close (breadth-first neighbours). When a directory is too
//!   deep or has too many subdirectories, it is re-rooted in the *deep*
//!   region under a fresh prefix; when it has too many files, the rest go to
//!   a prefix of the *wide* region; when either runs out of prefixes, the
//!   *final* region hands out ids in create order.
//!
//! Ids never reach 2^62 (see [`proto::layout::DATA_OID_TAG`]) and are never
//! reused: a number freed by unlink stays retired, so a stale capability can
//! never reach a new file's objects.

use serde::{Deserialize, Serialize};

/// Which policy a file system uses (fixed when it is created).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PolicyKind {
    /// Monotonic counter.
    CreateOrder,
    /// Hash of a counter.
    PseudoRandom,
    /// Namespace flattening, subtrees contiguous.
    ChildClosest,
    /// Namespace flattening, levels contiguous.
    CousinClosest,
}

impl PolicyKind {
    /// Every policy, in the order reports list them.
    pub const ALL: [PolicyKind; 4] = [
        PolicyKind::CreateOrder,
        PolicyKind::PseudoRandom,
        PolicyKind::ChildClosest,
        PolicyKind::CousinClosest,
    ];

    /// The name used in configs and reports.
    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::CreateOrder => "create-order",
            PolicyKind::PseudoRandom => "pseudo-random",
            PolicyKind::ChildClosest => "child-closest",
            PolicyKind::CousinClosest => "cousin-closest",
        }
    }

    /// Parses a name.
    pub fn parse(s: &str) -> Result<PolicyKind, proto::UnknownName> {
        PolicyKind::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| proto::UnknownName {
                what: "id policy",
                got: s.into(),
                expected: "create-order, pseudo-random, child-closest or cousin-closest",
            })
    }
}

/// Bit widths of the flattened id (defaults: Hendricks et al.'s prototype).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Geometry {
    /// Bits in an id (≤ 64).
    pub id_bits: u32,
    /// Bits naming the region (≥ 2; the seed's prototype used 4).
    pub region_bits: u32,
    /// Bits of the file number within a directory.
    pub file_bits: u32,
    /// Bits of one directory slot.
    pub slot_bits: u32,
    /// Directory slots in a deep-region id (the rest is the prefix).
    pub deep_slots: u32,
    /// File-number bits in a wide-region id (the rest is the prefix).
    pub wide_file_bits: u32,
}

impl Default for Geometry {
    fn default() -> Self {
        Geometry {
            id_bits: 64,
            region_bits: 4,
            file_bits: 10,
            slot_bits: 5,
            deep_slots: 5,
            wide_file_bits: 22,
        }
    }
}

/// Regions (the top `region_bits` of an id).
const PRIMARY: u64 = 0;
const DEEP: u64 = 1;
const WIDE: u64 = 2;
const FINAL: u64 = 3;

impl Geometry {
    /// Bits below the region field.
    fn body(&self) -> u32 {
        self.id_bits - self.region_bits
    }

    /// Directory slots in the primary region.
    pub fn primary_slots(&self) -> u32 {
        (self.body() - self.file_bits) / self.slot_bits
    }

    fn deep_prefix_bits(&self) -> u32 {
        self.body() - self.file_bits - self.deep_slots * self.slot_bits
    }

    fn wide_prefix_bits(&self) -> u32 {
        self.body() - self.wide_file_bits
    }

    /// Checks the widths fit together; the error names the problem.
    pub fn validate(&self) -> Result<(), GeometryError> {
        let g = self;
        if g.id_bits > 64 || g.region_bits < 2 || g.id_bits < g.region_bits + 8 {
            return Err(GeometryError::Widths {
                id_bits: g.id_bits,
                region_bits: g.region_bits,
            });
        }
        if g.body() > 60 {
            return Err(GeometryError::BodyTooWide { body: g.body() });
        }
        if !(1..=30).contains(&g.file_bits) || !(1..=16).contains(&g.slot_bits) {
            return Err(GeometryError::FileOrSlotBits {
                file_bits: g.file_bits,
                slot_bits: g.slot_bits,
            });
        }
        if g.file_bits >= g.body() || g.primary_slots() == 0 {
            return Err(GeometryError::NoPrimarySlot);
        }
        if g.deep_slots == 0 || g.file_bits + g.deep_slots * g.slot_bits >= g.body() {
            return Err(GeometryError::DeepSlots {
                deep_slots: g.deep_slots,
            });
        }
        if g.wide_file_bits == 0 || g.wide_file_bits >= g.body() {
            return Err(GeometryError::WideFileBits {
                wide_file_bits: g.wide_file_bits,
            });
        }
        Ok(())
    }

    fn region(&self, r: u64) -> u64 {
        r << self.body()
    }

    /// Which region an id is in (0 primary, 1 deep, 2 wide, 3 final).
    pub fn region_of(&self, id: u64) -> u64 {
        id >> self.body()
    }
}

/// Where a directory numbers its children.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Space {
    /// Create-order / pseudo-random: no per-directory structure.
    Flat,
    /// A slotted space: primary (prefix 0) or deep region.
    Slotted {
        /// Region (primary or deep).
        region: u64,
        /// Deep-region prefix (0 in the primary region).
        prefix: u64,
        /// Slot values from the space's root down to this directory (each ≥ 1).
        path: Vec<u16>,
    },
    /// Out of prefixes: everything in create order in the final region.
    Final,
}

/// A directory's id-allocation state (kept in its inode).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirIds {
    /// Its space.
    pub space: Space,
    /// Next file number in the slotted space (starts at 1).
    pub next_file: u64,
    /// Next subdirectory slot value (starts at 1).
    pub next_dir: u64,
    /// Overflow for files: (wide prefix, next number).
    pub wide: Option<(u64, u64)>,
}

impl DirIds {
    fn new(space: Space) -> DirIds {
        DirIds {
            space,
            next_file: 1,
            next_dir: 1,
            wide: None,
        }
    }
}

/// File-system-wide counters (kept by the MDS with the namespace).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// Create-order / pseudo-random sequence.
    pub seq: u64,
    /// Next deep-region prefix.
    pub deep_next: u64,
    /// Next wide-region prefix.
    pub wide_next: u64,
    /// Next final-region number.
    pub final_next: u64,
}

/// A policy with its geometry: the MDS's (and the simulator's) id source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdPolicy {
    /// Which policy.
    pub kind: PolicyKind,
    /// Bit widths.
    pub geo: Geometry,
}

/// The root directory's id under every policy.
pub const ROOT_ID: u64 = 0;

fn mask(bits: u32) -> u64 {
    if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    }
}

/// The prefetch choice (Hendricks et al. §3.1): of the inodes above `ino` (ascending
/// ids) and below it (descending ids), the `n` whose ids are closest to
/// `ino`, ties to the higher id. The MDS and the trace simulator both use it.
pub fn nearest_by_id<T>(
    ino: u64,
    above: impl IntoIterator<Item = T>,
    below: impl IntoIterator<Item = T>,
    n: usize,
    id: impl Fn(&T) -> u64,
) -> Vec<T> {
    let (mut a, mut b) = (above.into_iter().peekable(), below.into_iter().peekable());
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let take_a = match (a.peek(), b.peek()) {
            (Some(x), Some(y)) => id(x) - ino <= ino - id(y),
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => break,
        };
        let next = if take_a { a.next() } else { b.next() };
        out.extend(next);
    }
    out
}

/// Why a [`Geometry`]'s widths do not fit together.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GeometryError {
    /// The id or region width is out of range.
    #[error(
        "id_bits {id_bits} / region_bits {region_bits}: need region_bits ≥ 2 and id_bits ≤ 64 with room for a body"
    )]
    Widths {
        /// Bits in an id.
        id_bits: u32,
        /// Bits naming the region.
        region_bits: u32,
    },
    /// Ids would reach 2^62.
    #[error("id_bits - region_bits = {body} > 60: ids must stay below 2^62")]
    BodyTooWide {
        /// Bits below the region.
        body: u32,
    },
    /// The file or slot width is out of range.
    #[error("file_bits {file_bits} must be 1..=30 and slot_bits {slot_bits} 1..=16")]
    FileOrSlotBits {
        /// Bits of the file number.
        file_bits: u32,
        /// Bits of a directory slot.
        slot_bits: u32,
    },
    /// Nothing is left for a directory slot.
    #[error("no room for a directory slot after the file number")]
    NoPrimarySlot,
    /// The deep region has no slot or no prefix.
    #[error("deep_slots {deep_slots}: the deep region needs ≥ 1 slot and a prefix")]
    DeepSlots {
        /// Slots asked for.
        deep_slots: u32,
    },
    /// The wide region has no prefix.
    #[error("wide_file_bits {wide_file_bits}: the wide region needs a prefix")]
    WideFileBits {
        /// File bits asked for.
        wide_file_bits: u32,
    },
}

impl IdPolicy {
    /// A policy; fails if the geometry does not fit.
    pub fn new(kind: PolicyKind, geo: Geometry) -> Result<IdPolicy, GeometryError> {
        geo.validate()?;
        Ok(IdPolicy { kind, geo })
    }

    /// The root directory's allocation state.
    pub fn root(&self) -> DirIds {
        match self.kind {
            PolicyKind::CreateOrder | PolicyKind::PseudoRandom => DirIds::new(Space::Flat),
            _ => DirIds::new(Space::Slotted {
                region: PRIMARY,
                prefix: 0,
                path: Vec::new(),
            }),
        }
    }

    fn max_depth(&self, region: u64) -> usize {
        if region == PRIMARY {
            self.geo.primary_slots() as usize
        } else {
            self.geo.deep_slots as usize
        }
    }

    /// The id of file number `f` in a slotted space.
    fn slotted_id(&self, region: u64, prefix: u64, path: &[u16], f: u64) -> u64 {
        let g = &self.geo;
        let depth = self.max_depth(region) as u32;
        let slots_bits = depth * g.slot_bits;
        let mut id = g.region(region) | (prefix << (g.file_bits + slots_bits)) | f;
        match self.kind {
            PolicyKind::ChildClosest => {
                for (i, &v) in path.iter().enumerate() {
                    let shift = g.file_bits + (depth - 1 - i as u32) * g.slot_bits;
                    id |= u64::from(v) << shift;
                }
            }
            _ => {
                let mut packed = 0u64;
                for &v in path {
                    packed = (packed << g.slot_bits) | u64::from(v);
                }
                id |= packed << g.file_bits;
            }
        }
        id
    }

    fn next_seq(&self, c: &mut Counters, taken: &mut dyn FnMut(u64) -> bool) -> u64 {
        let body = mask(self.geo.body());
        loop {
            c.seq += 1;
            let id = match self.kind {
                PolicyKind::PseudoRandom => {
                    xxhash_rust::xxh3::xxh3_64_with_seed(&c.seq.to_le_bytes(), 0x1d5) & body
                }
                _ => c.seq & body,
            };
            if id != ROOT_ID && !taken(id) {
                return id;
            }
        }
    }

    fn next_final(&self, c: &mut Counters, taken: &mut dyn FnMut(u64) -> bool) -> u64 {
        loop {
            c.final_next += 1;
            let id = self.geo.region(FINAL) | (c.final_next & mask(self.geo.body()));
            if !taken(id) {
                return id;
            }
        }
    }

    /// An id outside any directory's numbering (extra object sets of a
    /// large file): the counter for flat policies, the final region otherwise.
    pub fn loose_id(&self, c: &mut Counters, taken: &mut dyn FnMut(u64) -> bool) -> u64 {
        match self.kind {
            PolicyKind::CreateOrder | PolicyKind::PseudoRandom => self.next_seq(c, taken),
            _ => self.next_final(c, taken),
        }
    }

    /// A new file's id in directory `parent` (updating its state), or the
    /// id [`forcing`] names when that is free.
    pub fn file_id(
        &self,
        parent: &mut DirIds,
        c: &mut Counters,
        taken: &mut dyn FnMut(u64) -> bool,
    ) -> u64 {
        if let Some(id) = FORCED.with(|f| f.take())
            && id != ROOT_ID
            && proto::layout::is_inode_number(id)
            && !taken(id)
        {
            return id;
        }
        let g = self.geo;
        match parent.space.clone() {
            Space::Flat => self.next_seq(c, taken),
            Space::Final => self.next_final(c, taken),
            Space::Slotted {
                region,
                prefix,
                path,
            } => {
                while parent.next_file <= mask(g.file_bits) {
                    let id = self.slotted_id(region, prefix, &path, parent.next_file);
                    parent.next_file += 1;
                    if !taken(id) {
                        return id;
                    }
                }
                // Too many files: continue in a wide-region prefix.
                loop {
                    match parent.wide {
                        Some((p, n)) if n <= mask(g.wide_file_bits) => {
                            parent.wide = Some((p, n + 1));
                            let id = g.region(WIDE) | (p << g.wide_file_bits) | n;
                            if !taken(id) {
                                return id;
                            }
                        }
                        _ => {
                            if c.wide_next > mask(g.wide_prefix_bits()) {
                                return self.next_final(c, taken);
                            }
                            parent.wide = Some((c.wide_next, 0));
                            c.wide_next += 1;
                        }
                    }
                }
            }
        }
    }

    /// A new directory's id in `parent`, and its own allocation state.
    pub fn dir_id(
        &self,
        parent: &mut DirIds,
        c: &mut Counters,
        taken: &mut dyn FnMut(u64) -> bool,
    ) -> (u64, DirIds) {
        let g = self.geo;
        match parent.space.clone() {
            Space::Flat => (self.next_seq(c, taken), DirIds::new(Space::Flat)),
            Space::Final => (self.next_final(c, taken), DirIds::new(Space::Final)),
            Space::Slotted {
                region,
                prefix,
                path,
            } => {
                if path.len() < self.max_depth(region) {
                    while parent.next_dir <= mask(g.slot_bits) {
                        let mut p = path.clone();
                        p.push(parent.next_dir as u16);
                        parent.next_dir += 1;
                        let id = self.slotted_id(region, prefix, &p, 0);
                        if !taken(id) {
                            return (
                                id,
                                DirIds::new(Space::Slotted {
                                    region,
                                    prefix,
                                    path: p,
                                }),
                            );
                        }
                    }
                }
                // Too deep or too many subdirectories: re-root in the deep region.
                while c.deep_next <= mask(g.deep_prefix_bits()) {
                    let p = c.deep_next;
                    c.deep_next += 1;
                    let id = self.slotted_id(DEEP, p, &[], 0);
                    if !taken(id) {
                        return (
                            id,
                            DirIds::new(Space::Slotted {
                                region: DEEP,
                                prefix: p,
                                path: Vec::new(),
                            }),
                        );
                    }
                }
                (self.next_final(c, taken), DirIds::new(Space::Final))
            }
        }
    }
}

thread_local! {
    static FORCED: std::cell::Cell<Option<u64>> = const { std::cell::Cell::new(None) };
}

/// Runs `f` (one job, on this thread) with the next file id it asks for
/// being `want` when that id is free: a replayed create makes the inode
/// number it first made, whatever was lost before it.
pub fn forcing<R>(want: Option<u64>, f: impl FnOnce() -> R) -> R {
    FORCED.with(|c| c.set(want));
    let r = f();
    FORCED.with(|c| c.set(None));
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// Hendricks et al.'s Table 1 example: 32-bit ids, 4-bit slots.
    fn table1(kind: PolicyKind) -> IdPolicy {
        IdPolicy::new(
            kind,
            Geometry {
                id_bits: 32,
                region_bits: 4,
                file_bits: 4,
                slot_bits: 4,
                deep_slots: 2,
                wide_file_bits: 8,
            },
        )
        .unwrap()
    }

    fn never(_: u64) -> bool {
        false
    }

    #[test]
    fn a_forced_id_is_made_when_free_and_only_once() {
        let p = table1(PolicyKind::ChildClosest);
        let mut c = Counters::default();
        let mut root = p.root();
        let plain = p.file_id(&mut root.clone(), &mut c.clone(), &mut never);
        let want = plain + 5;
        let got = forcing(Some(want), || p.file_id(&mut root, &mut c, &mut never));
        assert_eq!(got, want, "a free forced id is made");
        // The next file is numbered as before, the forced id not consumed.
        assert_eq!(
            p.file_id(&mut root.clone(), &mut c.clone(), &mut never),
            plain
        );
        // Taken: the policy's own id instead.
        let mut taken = |id: u64| id == want;
        let got = forcing(Some(want), || p.file_id(&mut root, &mut c, &mut taken));
        assert_eq!(got, plain);
        // Only the job that asked: the next call is not forced.
        assert_ne!(p.file_id(&mut root, &mut c, &mut never), want);
    }

    /// /home is the 4th subdirectory of /, person the 10th of /home,
    /// submit.ps and submit.pdf the 7th and 8th files of /home/person.
    fn table1_ids(kind: PolicyKind) -> [u64; 4] {
        let p = table1(kind);
        let mut c = Counters::default();
        let mut root = p.root();
        root.next_dir = 4;
        let (home, mut home_ids) = p.dir_id(&mut root, &mut c, &mut never);
        home_ids.next_dir = 0xa;
        let (person, mut person_ids) = p.dir_id(&mut home_ids, &mut c, &mut never);
        person_ids.next_file = 7;
        let ps = p.file_id(&mut person_ids, &mut c, &mut never);
        let pdf = p.file_id(&mut person_ids, &mut c, &mut never);
        [home, person, ps, pdf]
    }

    #[test]
    fn seed_004_table_1() {
        assert_eq!(
            table1_ids(PolicyKind::ChildClosest),
            [0x0400_0000, 0x04a0_0000, 0x04a0_0007, 0x04a0_0008]
        );
        assert_eq!(
            table1_ids(PolicyKind::CousinClosest),
            [0x0000_0040, 0x0000_04a0, 0x0000_04a7, 0x0000_04a8]
        );
    }

    /// Builds a tree wide and deep enough to overflow every region and
    /// checks ids are unique, below 2^62, and in the expected regions.
    #[test]
    fn overflow_goes_deep_wide_then_final_and_ids_stay_unique() {
        for kind in PolicyKind::ALL {
            let geo = Geometry {
                id_bits: 16,
                region_bits: 4,
                file_bits: 3,
                slot_bits: 2,
                deep_slots: 2,
                wide_file_bits: 4,
            };
            let p = IdPolicy::new(kind, geo).unwrap();
            let mut c = Counters::default();
            let mut seen = HashSet::new();
            seen.insert(ROOT_ID);
            let take = |id: u64, seen: &mut HashSet<u64>| {
                assert!(id < 1 << 62);
                assert!(seen.insert(id), "{kind:?}: id {id:#x} given twice");
            };
            // a chain 20 deep, each level with 5 subdirs and 40 files
            let mut dir = p.root();
            let mut regions = HashSet::new();
            for _ in 0..20 {
                let mut next = None;
                for _ in 0..5 {
                    let (id, ids) = p.dir_id(&mut dir, &mut c, &mut |x| seen.contains(&x));
                    take(id, &mut seen);
                    regions.insert(geo.region_of(id));
                    next.get_or_insert(ids);
                }
                for _ in 0..40 {
                    let id = p.file_id(&mut dir, &mut c, &mut |x| seen.contains(&x));
                    take(id, &mut seen);
                    regions.insert(geo.region_of(id));
                }
                dir = next.unwrap();
            }
            match kind {
                PolicyKind::ChildClosest | PolicyKind::CousinClosest => {
                    assert_eq!(regions.len(), 4, "{kind:?} used regions {regions:?}")
                }
                _ => assert_eq!(regions, HashSet::from([0]), "{kind:?}"),
            }
        }
    }

    #[test]
    fn default_geometry_matches_the_seed_prototype() {
        let g = Geometry::default();
        g.validate().unwrap();
        assert_eq!(g.primary_slots(), 10);
        let p = IdPolicy::new(PolicyKind::ChildClosest, g).unwrap();
        let mut c = Counters::default();
        let mut root = p.root();
        let (a, mut a_ids) = p.dir_id(&mut root, &mut c, &mut never);
        assert_eq!(a, 1 << (10 + 9 * 5));
        let f = p.file_id(&mut a_ids, &mut c, &mut never);
        assert_eq!(f, a + 1);
        assert!(
            Geometry {
                region_bits: 2,
                ..g
            }
            .validate()
            .is_err()
        );
    }
}
