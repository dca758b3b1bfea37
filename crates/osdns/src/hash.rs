//! The directory hash: name → attribute number on the hash page. Part of
//! the on-OSD format, so it is specified and versioned (never `std`'s
//! randomly keyed hasher): version 1 is XXH3-64 of the name's UTF-8 bytes
//! with seed [`SEED`], folded to 32 bits as `lo ^ hi`, with 0 (never a
//! slot number) mapped to 1. A directory records the hash it was made with
//! in its header, so a later version never misreads an old directory.

use serde::{Deserialize, Serialize};

/// Seed of hash version 1 ("tesseraD" in ASCII).
pub const SEED: u64 = 0x7465_7373_6572_6144;

/// A directory's hash function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum DirHash {
    /// Version 1: folded XXH3-64 (see the module doc).
    V1,
    /// For tests: version 1 reduced to `buckets` slots (1..=buckets), so
    /// distinct names collide and the chains are exercised.
    Collide {
        /// Number of distinct slots.
        buckets: u32,
    },
}

impl DirHash {
    /// The attribute number of `name` on the hash page (never 0).
    pub fn slot(self, name: &str) -> u32 {
        let h = xxhash_rust::xxh3::xxh3_64_with_seed(name.as_bytes(), SEED);
        let v = (h as u32) ^ ((h >> 32) as u32);
        match self {
            DirHash::V1 => v.max(1),
            DirHash::Collide { buckets } => v % buckets.max(1) + 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_1_is_stable() {
        // Fixed values: changing them breaks every directory on disk.
        let a = DirHash::V1.slot("hello");
        let b = DirHash::V1.slot("hello");
        assert_eq!(a, b);
        assert_ne!(DirHash::V1.slot("hello"), DirHash::V1.slot("hellp"));
        assert_eq!(DirHash::V1.slot("dirent-56"), GOLDEN_DIRENT_56);
    }

    const GOLDEN_DIRENT_56: u32 = 2_191_361_872;

    #[test]
    fn collide_stays_in_range() {
        let h = DirHash::Collide { buckets: 3 };
        for i in 0..100 {
            let s = h.slot(&format!("n{i}"));
            assert!((1..=3).contains(&s));
        }
    }
}
