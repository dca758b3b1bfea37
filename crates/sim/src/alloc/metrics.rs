//! What an aging run measures, sampled at log-spaced operation counts
//! (ten samples per decade from 1,000 operations): the fragmentation of
//! objects (extents per object, extent sizes, a histogram of extent sizes in
//! powers of two — EBOFS figures 4–6) and of free space.

use serde::{Deserialize, Serialize};
use store::alloc::Allocator;

use super::model::Obj;

/// Histogram buckets: bucket `i` counts extents of `[2^i, 2^(i+1))` 4 KiB
/// blocks; the last one also holds everything larger.
pub const HISTOGRAM_BUCKETS: usize = 20;

/// One sample of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Operations done when it was taken.
    pub ops: u64,
    /// Fraction of the device in use.
    pub utilization: f64,
    /// Objects holding at least one block.
    pub objects: u64,
    /// Mean extents per object (1.0 is ideal).
    pub extents_per_object: f64,
    /// Objects made of more than one extent.
    pub multi_extent_objects: u64,
    /// Mean extent size of multi-extent objects, KiB (EBOFS figure 5).
    pub multi_extent_kib: f64,
    /// Mean extent size over all objects, KiB.
    pub extent_kib: f64,
    /// Extents by size, in powers of two of 4 KiB blocks (figure 6).
    pub histogram: Vec<u64>,
    /// Free extents (maximal free runs).
    pub free_extents: u64,
    /// Mean free extent, KiB.
    pub free_extent_kib: f64,
    /// Largest free run, KiB.
    pub largest_free_kib: f64,
    /// 1 − largest free run ÷ free space: 0 when free space is one run.
    pub free_fragmentation: f64,
}

impl Sample {
    pub(crate) fn take<'a>(
        ops: u64,
        alloc: &dyn Allocator,
        objs: impl Iterator<Item = &'a Obj>,
    ) -> Sample {
        let kib = |blocks: u64| blocks as f64 * 4.0;
        let mut objects = 0u64;
        let mut extents = 0u64;
        let mut blocks = 0u64;
        let mut multi = 0u64;
        let mut multi_extents = 0u64;
        let mut multi_blocks = 0u64;
        let mut histogram = vec![0u64; HISTOGRAM_BUCKETS];
        for o in objs.filter(|o| !o.map.is_empty()) {
            let n = o.map.len() as u64;
            let b: u64 = o.map.iter().map(|p| p.n).sum();
            objects += 1;
            extents += n;
            blocks += b;
            if n > 1 {
                multi += 1;
                multi_extents += n;
                multi_blocks += b;
            }
            for p in &o.map {
                let i = (63 - p.n.leading_zeros()) as usize;
                histogram[i.min(HISTOGRAM_BUCKETS - 1)] += 1;
            }
        }
        let free = alloc.free_extents();
        let free_blocks = alloc.free_blocks();
        let largest = free.iter().map(|e| e.len).max().unwrap_or(0);
        let ratio = |a: f64, b: u64| if b == 0 { 0.0 } else { a / b as f64 };
        Sample {
            ops,
            utilization: ratio(
                (alloc.total_blocks() - free_blocks) as f64,
                alloc.total_blocks(),
            ),
            objects,
            extents_per_object: ratio(extents as f64, objects),
            multi_extent_objects: multi,
            multi_extent_kib: ratio(kib(multi_blocks), multi_extents),
            extent_kib: ratio(kib(blocks), extents),
            histogram,
            free_extents: free.len() as u64,
            free_extent_kib: ratio(kib(free_blocks), free.len() as u64),
            largest_free_kib: kib(largest),
            free_fragmentation: if free_blocks == 0 {
                0.0
            } else {
                1.0 - largest as f64 / free_blocks as f64
            },
        }
    }
}

/// When the next sample is due: ten per decade, starting at 1,000 operations.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SampleClock {
    step: u32,
    /// Operation count of the next sample.
    pub next: u64,
}

impl Default for SampleClock {
    fn default() -> Self {
        SampleClock {
            step: 0,
            next: 1000,
        }
    }
}

impl SampleClock {
    /// Moves past `ops`.
    pub fn advance(&mut self, ops: u64) {
        while self.next <= ops {
            self.step += 1;
            self.next = (1000.0 * 10f64.powf(f64::from(self.step) / 10.0)).round() as u64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_ten_per_decade() {
        let mut c = SampleClock::default();
        let mut seen = vec![c.next];
        while c.next < 1_000_000 {
            c.advance(c.next);
            seen.push(c.next);
        }
        assert_eq!(seen.len(), 31);
        assert_eq!(seen[10], 10_000);
        assert_eq!(seen[30], 1_000_000);
        assert_eq!(seen[1], 1259);
    }
}
