//! EBOFS "closest good fit". Free extents live in two indexes: by start (to
//! coalesce on free) and in size buckets, each ordered by position (to find an
//! extent of about the right size near a goal in O(log n)).
//!
//! Invariants: `by_start` holds disjoint, non-adjacent extents (always
//! coalesced); every extent is in exactly the bucket its length maps to;
//! `free` is the sum of their lengths.

use crate::StoreError;
use std::collections::{BTreeMap, BTreeSet};

use super::{AllocError, Allocator, Class, Extent, Request};

/// How many entries of the goal's own bucket to inspect before moving to a
/// larger bucket (whose extents all fit).
const SCAN_LIMIT: usize = 16;

/// EBOFS-style extent allocator.
pub struct ExtentAllocator {
    total: u64,
    free: u64,
    by_start: BTreeMap<u64, u64>,
    buckets: Vec<BTreeSet<u64>>,
    shift: u32,
}

impl ExtentAllocator {
    /// An allocator over `total` blocks, all free, with one bucket per power of two.
    pub fn new(total: u64) -> Self {
        Self::with_spacing(total, 1)
    }

    /// As [`ExtentAllocator::new`] but with one bucket per `spacing` powers of
    /// two (1 = tightest grouping; larger = coarser buckets).
    pub fn with_spacing(total: u64, spacing: u32) -> Self {
        let shift = spacing.max(1);
        let mut a = ExtentAllocator {
            total,
            free: 0,
            by_start: BTreeMap::new(),
            buckets: vec![BTreeSet::new(); (64 / shift + 1) as usize],
            shift,
        };
        if total > 0 {
            a.insert(Extent::new(0, total));
        }
        a
    }

    fn bucket(&self, len: u64) -> usize {
        ((63 - len.leading_zeros()) / self.shift) as usize
    }

    fn insert(&mut self, e: Extent) {
        self.by_start.insert(e.start, e.len);
        let b = self.bucket(e.len);
        self.buckets[b].insert(e.start);
        self.free += e.len;
    }

    fn remove(&mut self, e: Extent) {
        self.by_start.remove(&e.start);
        let b = self.bucket(e.len);
        self.buckets[b].remove(&e.start);
        self.free -= e.len;
    }

    /// The free extent closest to `goal` in bucket `b` with at least `n` blocks.
    fn nearest_in_bucket(&self, b: usize, n: u64, goal: u64, limit: usize) -> Option<Extent> {
        let set = &self.buckets[b];
        let fits = |s: &u64| {
            let len = self.by_start[s];
            (len >= n).then_some(Extent::new(*s, len))
        };
        let after = set.range(goal..).take(limit).find_map(fits);
        let before = set.range(..goal).rev().take(limit).find_map(fits);
        let dist = |e: &Extent| {
            if goal < e.start {
                e.start - goal
            } else {
                goal.saturating_sub(e.end() - 1)
            }
        };
        match (after, before) {
            (Some(a), Some(b)) => Some(if dist(&b) <= dist(&a) { b } else { a }),
            (a, b) => a.or(b),
        }
    }

    /// Takes `n` blocks out of free extent `e`, as close to `goal` as possible.
    fn carve(&mut self, e: Extent, n: u64, goal: u64) -> Extent {
        self.remove(e);
        let start = if goal <= e.start {
            e.start
        } else if goal + n <= e.end() {
            goal
        } else {
            e.end() - n
        };
        if start > e.start {
            self.insert(Extent::new(e.start, start - e.start));
        }
        if start + n < e.end() {
            self.insert(Extent::new(start + n, e.end() - start - n));
        }
        Extent::new(start, n)
    }

    /// The free extent containing `block`, if any.
    fn containing(&self, block: u64) -> Option<Extent> {
        let (&s, &l) = self.by_start.range(..=block).next_back()?;
        (block < s + l).then_some(Extent::new(s, l))
    }
}

impl Allocator for ExtentAllocator {
    fn allocate(&mut self, req: &Request) -> Result<Vec<Extent>, AllocError> {
        let n = req.blocks;
        if n == 0 {
            return Ok(Vec::new());
        }
        if n > self.free {
            return Err(AllocError::NoSpace {
                wanted: n,
                free: self.free,
            });
        }
        // An object growing into free space right after its last extent
        // continues there: one extent, however the buckets are spaced.
        if let Some(g) = req.goal
            && let Some(e) = self.containing(g)
            && g + n <= e.end()
        {
            return Ok(vec![self.carve(e, n, g)]);
        }
        let goal = req.goal.unwrap_or(0);
        // A growing object: the nearest free extent with room to grow. A
        // much larger extent is split in the middle (room both for this
        // object and for the one that ends where the extent begins).
        if req.grow > 0 {
            let want = n.saturating_add(req.grow);
            for b in self.bucket(want)..self.buckets.len() {
                if let Some(e) = self.nearest_in_bucket(b, want, goal, SCAN_LIMIT) {
                    let at = if e.len >= 4 * want {
                        e.start + (e.len - n) / 2
                    } else {
                        e.start
                    };
                    return Ok(vec![self.carve(e, n, at)]);
                }
            }
        }
        let first = self.bucket(n);
        for b in first..self.buckets.len() {
            let limit = if b == first { SCAN_LIMIT } else { 1 };
            if let Some(e) = self.nearest_in_bucket(b, n, goal, limit) {
                return Ok(vec![self.carve(e, n, goal)]);
            }
        }
        // Nothing fits whole: piece it together from the largest extents,
        // each placed as close as possible to the end of the previous one.
        let mut out = Vec::new();
        let mut left = n;
        let mut g = goal;
        while left > 0 {
            let b = (0..self.buckets.len())
                .rev()
                .find(|&b| !self.buckets[b].is_empty());
            let Some(b) = b else { break };
            let Some(e) = self.nearest_in_bucket(b, 1, g, usize::MAX) else {
                break;
            };
            let take = left.min(e.len);
            let got = self.carve(e, take, g);
            g = got.end();
            left -= take;
            out.push(got);
        }
        debug_assert_eq!(left, 0);
        Ok(out)
    }

    fn free(&mut self, ext: Extent) -> Result<(), AllocError> {
        if ext.len == 0 || ext.end() > self.total {
            return Err(AllocError::Conflict {
                block: ext.start,
                reason: "freed outside the device",
            });
        }
        let mut merged = ext;
        if let Some((&s, &l)) = self.by_start.range(..ext.end()).next_back()
            && s + l > ext.start
        {
            return Err(AllocError::Conflict {
                block: s.max(ext.start),
                reason: "freed twice",
            });
        }
        if let Some((&s, &l)) = self.by_start.range(..ext.start).next_back()
            && s + l == ext.start
        {
            self.remove(Extent::new(s, l));
            merged = Extent::new(s, l + merged.len);
        }
        if let Some(&l) = self.by_start.get(&ext.end()) {
            self.remove(Extent::new(ext.end(), l));
            merged.len += l;
        }
        self.insert(merged);
        Ok(())
    }

    fn reserve(&mut self, ext: Extent, _class: Class) -> Result<(), AllocError> {
        let Some(e) = self.containing(ext.start) else {
            return Err(AllocError::Conflict {
                block: ext.start,
                reason: "owned twice or outside the device",
            });
        };
        if ext.end() > e.end() {
            return Err(AllocError::Conflict {
                block: e.end(),
                reason: "owned twice or outside the device",
            });
        }
        self.carve(e, ext.len, ext.start);
        Ok(())
    }

    fn free_blocks(&self) -> u64 {
        self.free
    }
    fn total_blocks(&self) -> u64 {
        self.total
    }
    fn free_extents(&self) -> Vec<Extent> {
        self.by_start
            .iter()
            .map(|(&s, &l)| Extent::new(s, l))
            .collect()
    }
    fn check(&self) -> Result<(), StoreError> {
        let mut sum = 0;
        let mut prev_end: Option<u64> = None;
        for (&s, &l) in &self.by_start {
            if l == 0 || s + l > self.total {
                return Err(StoreError::corrupt(format!(
                    "free extent {s}+{l} is empty or past the end"
                )));
            }
            if let Some(p) = prev_end
                && p >= s
            {
                return Err(StoreError::corrupt(format!(
                    "free extent {s}+{l} overlaps or touches the previous one"
                )));
            }
            if !self.buckets[self.bucket(l)].contains(&s) {
                return Err(StoreError::corrupt(format!(
                    "free extent {s}+{l} missing from its size bucket"
                )));
            }
            prev_end = Some(s + l);
            sum += l;
        }
        let in_buckets: usize = self.buckets.iter().map(|b| b.len()).sum();
        if in_buckets != self.by_start.len() {
            return Err(StoreError::corrupt(format!(
                "{} extents in buckets, {} by position",
                in_buckets,
                self.by_start.len()
            )));
        }
        if sum != self.free {
            return Err(StoreError::corrupt(format!(
                "free count {} but extents sum to {sum}",
                self.free
            )));
        }
        Ok(())
    }
    fn name(&self) -> &'static str {
        "extent"
    }
}
