//! Where a write's new blocks go: the store's placement rules for one write,
//! as a pure function, so the store and the allocation-aging simulator
//! (`tessera sim alloc`) run the same decisions and never two copies of them.
//!
//! Rules (OBFS under the region policy, EBOFS under the extent policy):
//! - writes are copy-on-write at the object's allocation unit (one 4 KiB
//!   block, or one large block for a large object under the region policy):
//!   the units a write touches get new blocks and the old ones are freed;
//! - under the region policy a small object becomes large (rewritten whole
//!   in large blocks) once it reaches 3/4 of a large block, and a small
//!   object whose new blocks no longer fit in its region moves whole to a
//!   region with room — both only up to [`WHOLE_REWRITE_LIMIT`];
//! - the allocation goal is the block after the object's last extent before
//!   the write, else the object's first block.

use crate::device::BLOCK;

/// Largest object rewritten whole when it changes block size or region.
pub const WHOLE_REWRITE_LIMIT: u64 = 64 << 20;

/// The store's geometry as far as placement is concerned.
#[derive(Debug, Clone, Copy)]
pub struct PlanGeometry {
    /// The region policy (OBFS) rather than the extent policy (EBOFS).
    pub region: bool,
    /// Large-block size in 4 KiB blocks (region policy).
    pub large_blocks: u64,
}

impl PlanGeometry {
    /// Size in bytes from which a small object becomes large (region policy).
    pub fn large_threshold(&self) -> u64 {
        self.large_blocks * BLOCK * 3 / 4
    }
}

/// What placement needs to know of the object before the write.
#[derive(Debug, Clone, Copy)]
pub struct ObjectShape {
    /// Logical size in bytes.
    pub size: u64,
    /// Whether the object already uses large blocks.
    pub large: bool,
    /// Whether its bytes are inline in the onode (no blocks yet).
    pub inline: bool,
    /// Physical block of its first extent, if it has blocks.
    pub first_block: Option<u64>,
}

/// The outcome: which logical blocks get new physical blocks, and of which kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WritePlan {
    /// The object uses large blocks after this write.
    pub large: bool,
    /// The whole object is rewritten (conversion to large, or a move to
    /// another region); its old blocks are all freed.
    pub whole: bool,
    /// First logical block rewritten.
    pub first: u64,
    /// One past the last logical block rewritten (a multiple of the unit).
    pub end: u64,
    /// Blocks the object is expected to grow into after this write (see
    /// [`super::Request::grow`]): as many as it already has — so an object
    /// appended in small pieces gets geometrically larger extents — capped
    /// at [`GROW_MAX`]; 0 unless the write appends at the end.
    pub grow: u64,
}

/// Largest growth room asked for on an append, in blocks (16 MiB).
pub const GROW_MAX: u64 = 4096;

/// Plans a write of bytes `[off, end)`. `fits_with(blocks, goal)` is the
/// allocator's [`super::Allocator::fits_with`].
pub fn plan_write(
    geo: &PlanGeometry,
    obj: &ObjectShape,
    off: u64,
    end: u64,
    fits_with: impl FnOnce(u64, u64) -> bool,
) -> WritePlan {
    let new_size = obj.size.max(end);
    // Whole-object rewrites are bounded, so a far sparse write never builds
    // a huge buffer.
    let span_ok = new_size <= WHOLE_REWRITE_LIMIT;
    let small_region = geo.region && !obj.large && span_ok;
    let convert = small_region && new_size >= geo.large_threshold();
    // OBFS keeps a small object inside one region: if the new blocks no
    // longer fit where it lives, the whole object moves.
    let relocate = small_region
        && !convert
        && obj.first_block.is_some_and(|first| {
            let need = end.div_ceil(BLOCK) - off / BLOCK;
            !fits_with(need, first)
        });
    let large = obj.large || convert;
    let whole = convert || relocate;
    let unit = if large { geo.large_blocks } else { 1 };
    let (first, last) = if whole || obj.inline {
        (0, new_size.div_ceil(BLOCK).next_multiple_of(unit))
    } else {
        (
            off / BLOCK / unit * unit,
            end.div_ceil(BLOCK).next_multiple_of(unit),
        )
    };
    let appends = !whole && off >= obj.size && !obj.inline;
    WritePlan {
        large,
        whole,
        first,
        end: last,
        grow: if appends { first.min(GROW_MAX) } else { 0 },
    }
}

/// The allocation goal for new blocks starting at logical block `first`:
/// the physical block that would continue the object's last extent before
/// `first`, else its first physical block. `extents` yields
/// `(logical block, physical block)` in logical order.
pub fn goal_for(
    first: u64,
    extents: impl DoubleEndedIterator<Item = (u64, u64)> + Clone,
) -> Option<u64> {
    extents
        .clone()
        .rev()
        .find(|(l, _)| *l < first)
        .map(|(l, p)| p + (first - l))
        .or_else(|| extents.map(|(_, p)| p).next())
}

#[cfg(test)]
mod tests {
    use super::*;

    const REGION: PlanGeometry = PlanGeometry {
        region: true,
        large_blocks: 128,
    };

    fn shape(size: u64, large: bool, first_block: Option<u64>) -> ObjectShape {
        ObjectShape {
            size,
            large,
            inline: false,
            first_block,
        }
    }

    #[test]
    fn an_append_rewrites_only_the_units_it_touches() {
        let extent = PlanGeometry {
            region: false,
            large_blocks: 128,
        };
        let p = plan_write(
            &extent,
            &shape(8192, false, Some(10)),
            8192,
            12288,
            |_, _| true,
        );
        assert_eq!((p.first, p.end, p.large, p.whole), (2, 3, false, false));
        // A large object rewrites its whole partial large block.
        let p = plan_write(
            &REGION,
            &shape(1 << 20, true, Some(0)),
            1 << 20,
            (1 << 20) + 4096,
            |_, _| true,
        );
        assert_eq!((p.first, p.end, p.large, p.whole), (256, 384, true, false));
    }

    #[test]
    fn region_policy_converts_at_three_quarters_of_a_large_block_and_moves_when_full() {
        let t = REGION.large_threshold();
        assert_eq!(t, 384 << 10);
        let p = plan_write(
            &REGION,
            &shape(t - 4096, false, Some(5)),
            t - 4096,
            t,
            |_, _| true,
        );
        assert!(p.large && p.whole);
        assert_eq!((p.first, p.end), (0, 128));
        let p = plan_write(&REGION, &shape(4096, false, Some(5)), 4096, 8192, |_, _| {
            false
        });
        assert!(!p.large && p.whole);
        assert_eq!((p.first, p.end), (0, 2));
        let p = plan_write(&REGION, &shape(4096, false, Some(5)), 4096, 8192, |_, _| {
            true
        });
        assert!(!p.whole);
    }

    #[test]
    fn the_goal_continues_the_last_extent_before_the_write() {
        let map = [(0u64, 100u64), (4, 500)];
        assert_eq!(goal_for(6, map.iter().copied()), Some(502));
        assert_eq!(goal_for(2, map.iter().copied()), Some(102));
        assert_eq!(goal_for(0, map.iter().copied()), Some(100));
        assert_eq!(goal_for(0, std::iter::empty()), None);
    }
}
