//! The on-disk format: byte layouts of every structure the store writes,
//! their encoders and checked decoders. `docs/FORMAT.md` describes the same
//! layouts for people; the two must agree.
//!
//! Conventions: little-endian integers; every structure starts with an
//! 8-byte magic and ends its checksummed span with a crc32c; decoders check
//! lengths before allocating and never panic on arbitrary input.

pub mod codec;
pub mod label;
pub mod signature;
pub mod slot;

/// The newest on-disk format version this build writes and reads.
pub const FORMAT_VERSION: u32 = 3;

/// Block number of the label (immutable geometry).
pub const LABEL_BLOCK: u64 = 0;
/// Block numbers of the two commit slots (alternating superblocks).
pub const SLOT_BLOCKS: [u64; 2] = [1, 2];
/// First block of the journal region.
pub const JOURNAL_FIRST_BLOCK: u64 = 3;
