//! File layouts: how a file's bytes map onto stripe objects (RAID-0 over
//! OSDs, as in Lustre and Ceph). Bytes are cut into stripe units dealt round
//! robin over `stripe_count` objects; each object holds at most
//! `object_size` bytes (0 = unbounded), after which the next *object set* of
//! `stripe_count` objects begins. Object set `s` has its own object id
//! (`Layout::objsets[s]`), so its objects are placed independently.

use serde::{Deserialize, Serialize};

/// The OSD partition holding file data (the store's default partition).
pub const DATA_PARTITION: u64 = 0x10000;

/// Namespace ids (inode numbers) are below 2^62; the object holding a
/// namespace id's data on the OSDs has this bit set too, which keeps data
/// ids clear of the store's reserved low ids and preserves their order (so a
/// range of inode numbers is a range of object ids).
pub const DATA_OID_TAG: u64 = 1 << 62;

/// Whether `n` can name an inode: below [`DATA_OID_TAG`] (the tag marks
/// object ids, so an inode number carrying it would name another file's
/// objects). The root is 0.
pub fn is_inode_number(n: u64) -> bool {
    n < DATA_OID_TAG
}

/// The OSD object id of namespace id `ino` (first object set of a file).
pub fn data_oid(ino: u64) -> u64 {
    ino | DATA_OID_TAG
}

/// Default stripe unit: 512 KiB.
pub const DEFAULT_STRIPE_UNIT: u32 = 512 << 10;
/// Default stripe count.
pub const DEFAULT_STRIPE_COUNT: u32 = 1;
/// Smallest stripe unit (one block).
pub const MIN_STRIPE_UNIT: u32 = 4096;
/// Largest stripe unit.
pub const MAX_STRIPE_UNIT: u32 = 64 << 20;
/// Most stripes per object set.
pub const MAX_STRIPE_COUNT: u32 = 256;
/// Most copies of an object.
pub const MAX_REPLICAS: u8 = 5;

/// Layout parameters, as set on a directory (inherited) or a new file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayoutSpec {
    /// Bytes per stripe unit (multiple of 4 KiB).
    pub stripe_unit: u32,
    /// Objects per object set (capped at the placeable OSDs when a file is placed).
    pub stripe_count: u32,
    /// Largest object in bytes, a multiple of `stripe_unit`; 0 = unbounded.
    pub object_size: u64,
    /// Copies of every stripe object, on distinct OSDs (1..=[`MAX_REPLICAS`]).
    pub replicas: u8,
    /// Fewest fresh copies a write may be acknowledged with; 0 = the
    /// default, `replicas - 1` but at least 1 (see [`LayoutSpec::min_copies`]).
    pub min_replicas: u8,
}

impl Default for LayoutSpec {
    fn default() -> Self {
        LayoutSpec {
            stripe_unit: DEFAULT_STRIPE_UNIT,
            stripe_count: DEFAULT_STRIPE_COUNT,
            object_size: 0,
            replicas: 1,
            min_replicas: 0,
        }
    }
}

/// Which invariant of a [`LayoutSpec`] does not hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    /// The stripe unit is out of range or not 4 KiB-aligned.
    #[error(
        "stripe unit {got}: must be a multiple of 4096 between {MIN_STRIPE_UNIT} and {MAX_STRIPE_UNIT}"
    )]
    StripeUnit {
        /// The stripe unit given.
        got: u32,
    },
    /// The stripe count is out of range.
    #[error("stripe count {got}: must be 1..={MAX_STRIPE_COUNT}")]
    StripeCount {
        /// The stripe count given.
        got: u32,
    },
    /// The object size is not a multiple of the stripe unit.
    #[error(
        "object size {got}: must be 0 (unbounded) or a multiple of the stripe unit {stripe_unit}"
    )]
    ObjectSize {
        /// The object size given.
        got: u64,
        /// The stripe unit it must be a multiple of.
        stripe_unit: u32,
    },
    /// The replica count is out of range.
    #[error("replicas {got}: must be 1..={MAX_REPLICAS}")]
    Replicas {
        /// The replica count given.
        got: u8,
    },
    /// The write quorum is larger than the replica count.
    #[error("min replicas {got}: must be 0 (default) or 1..={replicas}, the replica count")]
    MinReplicas {
        /// The quorum given.
        got: u8,
        /// The replica count.
        replicas: u8,
    },
}

impl LayoutSpec {
    /// Fewest fresh copies a write needs: `min_replicas`, or by default
    /// `replicas - 1` but at least 1.
    pub fn min_copies(&self) -> usize {
        match self.min_replicas {
            0 => usize::from(self.replicas.saturating_sub(1)).max(1),
            m => usize::from(m),
        }
    }

    /// Checks the invariants; the error says which one failed.
    pub fn validate(&self) -> Result<(), LayoutError> {
        let su = self.stripe_unit;
        if !(MIN_STRIPE_UNIT..=MAX_STRIPE_UNIT).contains(&su) || !su.is_multiple_of(4096) {
            return Err(LayoutError::StripeUnit { got: su });
        }
        if !(1..=MAX_STRIPE_COUNT).contains(&self.stripe_count) {
            return Err(LayoutError::StripeCount {
                got: self.stripe_count,
            });
        }
        if self.object_size != 0 && !self.object_size.is_multiple_of(u64::from(su)) {
            return Err(LayoutError::ObjectSize {
                got: self.object_size,
                stripe_unit: su,
            });
        }
        if !(1..=MAX_REPLICAS).contains(&self.replicas) {
            return Err(LayoutError::Replicas { got: self.replicas });
        }
        if self.min_replicas > self.replicas {
            return Err(LayoutError::MinReplicas {
                got: self.min_replicas,
                replicas: self.replicas,
            });
        }
        Ok(())
    }
}

/// A placed file's layout: the spec, the OSD map epoch its objects were
/// placed with, and the object id of each object set made so far.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layout {
    /// Parameters (stripe count already capped to the OSDs at placement).
    pub spec: LayoutSpec,
    /// OSD map epoch used for placement.
    pub map_epoch: u64,
    /// Object id per object set; `objsets[0]` is the file's id.
    pub objsets: Vec<u64>,
    /// Where each object set's copies are (one entry per object set), as
    /// the MDS recorded them at placement and after every recovery; empty
    /// for a layout placed by the map of `map_epoch` alone (one copy).
    pub homes: Vec<Homes>,
}

/// The copies of one object set: per stripe, the OSDs holding a fresh copy
/// (the first is read first) and those holding a stale one (missed writes;
/// never read, caught up by recovery).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Homes {
    /// One entry per stripe.
    pub stripes: Vec<Copies>,
}

/// The copies of one stripe object.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Copies {
    /// OSDs with every acknowledged write.
    pub fresh: Vec<u32>,
    /// OSDs that missed a write (recorded before the write was acknowledged).
    pub stale: Vec<u32>,
}

impl Homes {
    /// Every OSD holding any copy of any stripe of the set.
    pub fn osds(&self) -> impl Iterator<Item = u32> + '_ {
        self.stripes
            .iter()
            .flat_map(|c| c.fresh.iter().chain(c.stale.iter()).copied())
    }
}

/// Where one byte range of a file lives: object set, stripe index, offset
/// in the object, length (never crossing a stripe unit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    /// Object set number.
    pub objset: u64,
    /// Stripe index within the set (0..stripe_count).
    pub stripe: u32,
    /// Byte offset within the object.
    pub obj_offset: u64,
    /// File offset of the piece.
    pub file_offset: u64,
    /// Length in bytes.
    pub len: u64,
}

impl LayoutSpec {
    /// Maps file offset `off` to its piece, up to `len` bytes or the end of
    /// its stripe unit, whichever is first.
    pub fn locate(&self, off: u64, len: u64) -> Piece {
        let su = u64::from(self.stripe_unit);
        let sc = u64::from(self.stripe_count);
        let unit = off / su;
        let within = off % su;
        let stripe = (unit % sc) as u32;
        let row = unit / sc;
        let (objset, row_in_obj) = if self.object_size == 0 {
            (0, row)
        } else {
            let rows = self.object_size / su;
            (row / rows, row % rows)
        };
        Piece {
            objset,
            stripe,
            obj_offset: row_in_obj * su + within,
            file_offset: off,
            len: len.min(su - within),
        }
    }

    /// The file offset of byte `obj_offset` of stripe object (`objset`,
    /// `stripe`): the inverse of [`LayoutSpec::locate`].
    pub fn file_offset(&self, objset: u64, stripe: u32, obj_offset: u64) -> u64 {
        let su = u64::from(self.stripe_unit);
        let sc = u64::from(self.stripe_count);
        let rows = if self.object_size == 0 {
            0
        } else {
            self.object_size / su
        };
        let row = objset * rows + obj_offset / su;
        (row * sc + u64::from(stripe)) * su + obj_offset % su
    }

    /// Splits `[off, off + len)` into pieces, in file order.
    pub fn pieces(&self, off: u64, len: u64) -> Vec<Piece> {
        let mut out = Vec::new();
        let (mut at, end) = (off, off.saturating_add(len));
        while at < end {
            let p = self.locate(at, end - at);
            at += p.len;
            out.push(p);
        }
        out
    }

    /// The object set holding file offset `off`.
    pub fn objset_of(&self, off: u64) -> u64 {
        self.locate(off, 1).objset
    }

    /// Bytes stripe object (`objset`, `stripe`) holds when the file is
    /// `size` bytes long (what truncate must cut each object to).
    pub fn object_len(&self, size: u64, objset: u64, stripe: u32) -> u64 {
        if size == 0 {
            return 0;
        }
        let su = u64::from(self.stripe_unit);
        let sc = u64::from(self.stripe_count);
        let set_bytes = if self.object_size == 0 {
            u64::MAX
        } else {
            self.object_size * sc
        };
        let set_start = objset.saturating_mul(set_bytes);
        if size <= set_start {
            return 0;
        }
        let in_set = (size - set_start).min(set_bytes);
        let full_rows = in_set / (su * sc);
        let rest = in_set % (su * sc);
        let extra = rest.saturating_sub(u64::from(stripe) * su).min(su);
        full_rows * su + extra
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(su: u32, sc: u32, os: u64) -> LayoutSpec {
        LayoutSpec {
            stripe_unit: su,
            stripe_count: sc,
            object_size: os,
            ..LayoutSpec::default()
        }
    }

    proptest::proptest! {
        #[test]
        fn file_offset_inverts_locate(
            su_k in 1u32..64, sc in 1u32..8, rows in 0u64..5, off in 0u64..(1 << 30)
        ) {
            let su = su_k * 4096;
            let s = spec(su, sc, rows * u64::from(su));
            let p = s.locate(off, 1);
            proptest::prop_assert_eq!(s.file_offset(p.objset, p.stripe, p.obj_offset), off);
        }
    }

    #[test]
    fn round_robin_and_object_sets() {
        let s = spec(4096, 3, 8192);
        let p: Vec<(u64, u32, u64)> = s
            .pieces(0, 4096 * 7)
            .iter()
            .map(|p| (p.objset, p.stripe, p.obj_offset))
            .collect();
        assert_eq!(
            p,
            vec![
                (0, 0, 0),
                (0, 1, 0),
                (0, 2, 0),
                (0, 0, 4096),
                (0, 1, 4096),
                (0, 2, 4096),
                (1, 0, 0)
            ]
        );
        let q = s.pieces(4000, 200);
        assert_eq!(q.len(), 2);
        assert_eq!((q[0].len, q[1].len, q[1].stripe), (96, 104, 1));
    }

    #[test]
    fn object_lengths_sum_to_file_size() {
        for (su, sc, os) in [(4096, 3, 8192), (4096, 1, 0), (8192, 4, 0), (4096, 2, 4096)] {
            let s = spec(su, sc, os);
            for size in [0u64, 1, 4095, 4096, 4097, 12_288, 12_289, 40_000, 100_000] {
                let sets = if os == 0 {
                    1
                } else {
                    size.div_ceil(os * u64::from(sc)).max(1)
                };
                let mut sum = 0;
                for set in 0..sets {
                    for j in 0..sc {
                        sum += s.object_len(size, set, j);
                    }
                }
                assert_eq!(sum, size, "{s:?} size {size}");
                // the last byte lives in an object long enough to hold it
                if size > 0 {
                    let p = s.locate(size - 1, 1);
                    assert_eq!(s.object_len(size, p.objset, p.stripe), p.obj_offset + 1);
                }
            }
        }
    }

    #[test]
    fn validation() {
        assert!(LayoutSpec::default().validate().is_ok());
        assert!(spec(1000, 1, 0).validate().is_err());
        assert!(spec(4096, 0, 0).validate().is_err());
        assert!(spec(4096, 2, 6000).validate().is_err());
        let mut s = spec(4096, 1, 0);
        for (r, m, ok, quorum) in [
            (1, 0, true, 1),
            (2, 0, true, 1),
            (3, 0, true, 2),
            (5, 5, true, 5),
        ] {
            s.replicas = r;
            s.min_replicas = m;
            assert_eq!(s.validate().is_ok(), ok);
            assert_eq!(s.min_copies(), quorum, "R={r}");
        }
        s.replicas = 0;
        assert_eq!(s.validate(), Err(LayoutError::Replicas { got: 0 }));
        s.replicas = 6;
        assert!(s.validate().is_err());
        s.replicas = 2;
        s.min_replicas = 3;
        assert_eq!(
            s.validate(),
            Err(LayoutError::MinReplicas {
                got: 3,
                replicas: 2
            })
        );
    }
}
