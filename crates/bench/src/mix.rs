//! The OBFS/LLNL object mix: 80 % of objects are one stripe unit (512 KiB),
//! 20 % uniform between 1 KiB and 512 KiB. Sizes and contents derive from the
//! object id, so every target gets exactly the same objects.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Largest object (the stripe unit).
pub const LARGE: usize = 512 << 10;

/// Size of object `id` in the mix.
pub fn size_of(id: u64, seed: u64) -> usize {
    let mut rng = SmallRng::seed_from_u64(id ^ seed.rotate_left(17));
    if rng.random_bool(0.8) {
        LARGE
    } else {
        rng.random_range(1024..=LARGE)
    }
}

/// Contents of object `id` at `version` (rewrites change the bytes).
pub fn contents(id: u64, seed: u64, version: u64) -> Vec<u8> {
    let n = size_of(id, seed);
    let mut rng = SmallRng::seed_from_u64(id.wrapping_mul(31) ^ version ^ seed);
    let mut v = vec![0u8; n];
    rng.fill(&mut v[..]);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eighty_percent_are_stripe_units() {
        let large = (0..10_000u64).filter(|&i| size_of(i, 1) == LARGE).count();
        assert!((7_700..8_300).contains(&large), "{large}");
        assert!((0..1000u64).all(|i| (1024..=LARGE).contains(&size_of(i, 2))));
        assert_eq!(contents(5, 1, 0), contents(5, 1, 0));
        assert_ne!(contents(5, 1, 0), contents(5, 1, 1));
    }
}
