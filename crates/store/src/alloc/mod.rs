//! Block allocation. Both seed policies sit behind [`Allocator`], chosen at
//! mkfs and recorded in the label:
//! - [`ExtentAllocator`] (EBOFS): free extents bucketed by size, each bucket
//!   ordered by position; "closest good fit" near a goal block.
//! - [`RegionAllocator`] (OBFS): fixed-size regions, each holding either small
//!   (4 KiB) blocks or large blocks; large objects get whole large blocks,
//!   small ones stay inside one region.
//!
//! Addresses are 4 KiB block numbers relative to the start of the data area.
//! Invariant of both: a block is either free or owned by exactly one caller;
//! `free_blocks()` equals the size of `free_extents()`. Free space is never
//! stored on disk; it is rebuilt at open from the blocks that metadata owns.

mod extent;
pub mod plan;
mod region;

pub use extent::ExtentAllocator;
pub use region::RegionAllocator;

/// A run of contiguous blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Extent {
    /// First block (data-area relative).
    pub start: u64,
    /// Number of blocks (> 0).
    pub len: u64,
}

impl Extent {
    /// A new extent.
    pub fn new(start: u64, len: u64) -> Self {
        Extent { start, len }
    }
    /// One past the last block.
    pub fn end(&self) -> u64 {
        self.start + self.len
    }
}

/// What kind of data an allocation holds; the region policy keeps kinds apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Data of a small object (4 KiB blocks).
    Small,
    /// Data of a large object: the request is a multiple of the large-block
    /// size and every returned extent is one whole, aligned large block.
    Large,
    /// Store metadata (checkpoint chunks), placed like small data.
    Meta,
}

/// An allocation request.
#[derive(Debug, Clone, Copy)]
pub struct Request {
    /// Blocks wanted.
    pub blocks: u64,
    /// Block to allocate near (end of the object's previous extent), if any.
    pub goal: Option<u64>,
    /// What the blocks will hold.
    pub class: Class,
    /// Blocks the caller expects to append right after these (0: none). The
    /// extent policy then prefers a free extent with that much room beyond
    /// the request, so a growing object stays in few extents.
    pub grow: u64,
}

/// Allocation failures.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocError {
    /// Not enough free space of the right kind.
    #[error("no space: wanted {wanted} blocks, {free} free")]
    NoSpace {
        /// Blocks requested.
        wanted: u64,
        /// Blocks free.
        free: u64,
    },
    /// A block was claimed or freed twice, or lies outside the device.
    #[error("block {block} {reason}")]
    Conflict {
        /// First offending block.
        block: u64,
        /// What went wrong.
        reason: &'static str,
    },
}

/// Summary of free-space shape, for `statfs`, fsck and the aging simulator.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FreeStats {
    /// Free blocks.
    pub free_blocks: u64,
    /// Number of free extents (maximal runs).
    pub free_extents: u64,
    /// Largest free run in blocks.
    pub largest_free: u64,
}

/// A block allocator over `[0, total_blocks)`.
pub trait Allocator: Send {
    /// Allocates `req.blocks` blocks, as few extents as the policy manages.
    fn allocate(&mut self, req: &Request) -> Result<Vec<Extent>, AllocError>;
    /// Returns an owned extent to free space.
    fn free(&mut self, ext: Extent) -> Result<(), AllocError>;
    /// Marks an extent as owned while rebuilding state at open.
    fn reserve(&mut self, ext: Extent, class: Class) -> Result<(), AllocError>;
    /// Free blocks.
    fn free_blocks(&self) -> u64;
    /// Blocks managed.
    fn total_blocks(&self) -> u64;
    /// The free space as sorted, maximal (coalesced) runs.
    fn free_extents(&self) -> Vec<Extent>;
    /// Verifies internal invariants; describes the first violation.
    fn check(&self) -> Result<(), crate::error::StoreError>;
    /// Policy name.
    fn name(&self) -> &'static str;

    /// Whether `blocks` small blocks can be placed in the same placement
    /// group (region) as `goal`. Policies without groups always say yes.
    fn fits_with(&self, _blocks: u64, _goal: u64) -> bool {
        true
    }

    /// Free-space shape summary.
    fn free_stats(&self) -> FreeStats {
        let f = self.free_extents();
        FreeStats {
            free_blocks: self.free_blocks(),
            free_extents: f.len() as u64,
            largest_free: f.iter().map(|e| e.len).max().unwrap_or(0),
        }
    }
}

/// Merges sorted extents that touch into maximal runs.
pub fn coalesce(mut v: Vec<Extent>) -> Vec<Extent> {
    v.sort_unstable();
    let mut out: Vec<Extent> = Vec::with_capacity(v.len());
    for e in v {
        match out.last_mut() {
            Some(last) if last.end() == e.start => last.len += e.len,
            _ => out.push(e),
        }
    }
    out
}

#[cfg(test)]
mod proptests;
