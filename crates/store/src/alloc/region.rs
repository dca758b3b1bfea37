//! OBFS regions. The data area is cut into fixed-size regions; a region is
//! free until first used, then holds only small (4 KiB) blocks or only large
//! blocks until it empties again. Large objects get whole large blocks (one
//! contiguous run each); a small object's blocks stay in one region when any
//! region can hold them, near the object's other blocks.
//!
//! Invariants: a Free region has no used unit; a Large region's used units
//! are aligned large blocks; `free` equals the sum of free blocks of all
//! regions; a trailing partial region (shorter than a region) is never Large.
//! The open-region indexes (Small regions with a free block, Large regions
//! with a free unit, Free regions) and the count of free large units always
//! agree with the regions, so finding the nearest region with room costs
//! O(log regions), not a scan of the device.

use crate::StoreError;
use std::collections::BTreeSet;

use super::{AllocError, Allocator, Class, Extent, Request, coalesce};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Free,
    Small,
    Large,
}

struct Region {
    start: u64,
    blocks: u64,
    kind: Kind,
    /// One bit per unit (a 4 KiB block in Small regions, a large block in Large ones).
    bits: Vec<u64>,
    used: u64,
}

impl Region {
    fn units(&self, large: u64) -> u64 {
        match self.kind {
            Kind::Large => self.blocks / large,
            _ => self.blocks,
        }
    }
    fn unit_len(&self, large: u64) -> u64 {
        if self.kind == Kind::Large { large } else { 1 }
    }
    fn free_blocks(&self, large: u64) -> u64 {
        self.blocks - self.used * self.unit_len(large)
    }
    fn get(&self, u: u64) -> bool {
        self.bits[(u / 64) as usize] >> (u % 64) & 1 == 1
    }
    fn set(&mut self, u: u64, v: bool) {
        let w = &mut self.bits[(u / 64) as usize];
        if v {
            *w |= 1 << (u % 64);
        } else {
            *w &= !(1 << (u % 64));
        }
    }
    fn become_kind(&mut self, kind: Kind, large: u64) {
        self.kind = kind;
        self.used = 0;
        let units = self.units(large);
        self.bits = vec![0; units.div_ceil(64) as usize];
    }
    /// Free runs of units as (first unit, length), in order.
    fn free_runs(&self, large: u64) -> Vec<(u64, u64)> {
        let units = self.units(large);
        let mut runs = Vec::new();
        let mut u = 0;
        while u < units {
            let w = self.bits[(u / 64) as usize];
            if u % 64 == 0 && w == u64::MAX {
                u += 64;
                continue;
            }
            if self.get(u) {
                u += 1;
                continue;
            }
            let s = u;
            while u < units && !self.get(u) {
                if u % 64 == 0 && self.bits[(u / 64) as usize] == 0 && u + 64 <= units {
                    u += 64;
                } else {
                    u += 1;
                }
            }
            runs.push((s, u - s));
        }
        runs
    }
}

/// OBFS-style region allocator with two block sizes.
pub struct RegionAllocator {
    total: u64,
    region_blocks: u64,
    large: u64,
    regions: Vec<Region>,
    free: u64,
    /// Small regions with at least one free block.
    small_open: BTreeSet<usize>,
    /// Large regions with at least one free large block.
    large_open: BTreeSet<usize>,
    /// Free (unused) regions.
    free_regions: BTreeSet<usize>,
    /// Large blocks available: free units of Large regions plus the units of
    /// full-size Free regions.
    large_free_units: u64,
    /// Each region's share of `large_free_units`.
    large_share: Vec<u64>,
}

/// Members of `set` ordered by distance from `g` (ties: the higher first).
fn nearest(set: &BTreeSet<usize>, g: usize) -> impl Iterator<Item = usize> + '_ {
    let mut up = set.range(g..).copied().peekable();
    let mut down = set.range(..g).rev().copied().peekable();
    std::iter::from_fn(move || match (up.peek(), down.peek()) {
        (Some(&a), Some(&b)) => {
            if a - g <= g - b {
                up.next()
            } else {
                down.next()
            }
        }
        (Some(_), None) => up.next(),
        (None, _) => down.next(),
    })
}

impl RegionAllocator {
    /// An allocator over `total` blocks in regions of `region_blocks`, with
    /// large blocks of `large` 4 KiB blocks (`region_blocks` a multiple of it).
    pub fn new(total: u64, region_blocks: u64, large: u64) -> Self {
        assert!(large > 0 && region_blocks >= large && region_blocks.is_multiple_of(large));
        let mut regions = Vec::new();
        let mut s = 0;
        while s < total {
            let blocks = region_blocks.min(total - s);
            regions.push(Region {
                start: s,
                blocks,
                kind: Kind::Free,
                bits: Vec::new(),
                used: 0,
            });
            s += blocks;
        }
        let n = regions.len();
        let mut a = RegionAllocator {
            total,
            region_blocks,
            large,
            regions,
            free: total,
            small_open: BTreeSet::new(),
            large_open: BTreeSet::new(),
            free_regions: BTreeSet::new(),
            large_free_units: 0,
            large_share: vec![0; n],
        };
        for r in 0..n {
            a.reindex(r);
        }
        a
    }

    /// Brings region `r`'s index entries up to date after a change to it.
    fn reindex(&mut self, r: usize) {
        let large = self.large;
        let reg = &self.regions[r];
        let room = reg.used < reg.units(large);
        let (small, big, free) = match reg.kind {
            Kind::Free => (false, false, true),
            Kind::Small => (room, false, false),
            Kind::Large => (false, room, false),
        };
        let share = match reg.kind {
            Kind::Large => reg.units(large) - reg.used,
            Kind::Free if reg.blocks == self.region_blocks => reg.blocks / large,
            _ => 0,
        };
        for (set, member) in [
            (&mut self.small_open, small),
            (&mut self.large_open, big),
            (&mut self.free_regions, free),
        ] {
            if member {
                set.insert(r);
            } else {
                set.remove(&r);
            }
        }
        self.large_free_units = self.large_free_units - self.large_share[r] + share;
        self.large_share[r] = share;
    }

    fn become_kind(&mut self, r: usize, kind: Kind) {
        self.regions[r].become_kind(kind, self.large);
        self.reindex(r);
    }

    fn region_of(&self, block: u64) -> usize {
        (block / self.region_blocks) as usize
    }

    /// Region indexes ordered by distance from `g`.
    fn by_distance(&self, g: usize) -> impl Iterator<Item = usize> + use<> {
        let n = self.regions.len();
        let g = g.min(n.saturating_sub(1));
        (0..n).flat_map(move |d| {
            let a = g.checked_sub(d).filter(|_| d > 0);
            let b = (g + d < n).then_some(g + d);
            [b, a].into_iter().flatten()
        })
    }

    fn take_units(&mut self, r: usize, first: u64, n: u64) -> Extent {
        let large = self.large;
        let reg = &mut self.regions[r];
        for u in first..first + n {
            reg.set(u, true);
        }
        reg.used += n;
        let ul = reg.unit_len(large);
        let start = reg.start;
        self.free -= n * ul;
        self.reindex(r);
        Extent::new(start + first * ul, n * ul)
    }

    /// Allocates up to `n` small blocks inside region `r`: one run of `n` if
    /// any (first fit from the goal), else the largest runs in turn.
    fn small_in_region(&mut self, r: usize, n: u64, goal: Option<u64>) -> Vec<Extent> {
        let runs = self.regions[r].free_runs(self.large);
        let start = self.regions[r].start;
        let from = goal
            .filter(|g| self.region_of(*g) == r)
            .map_or(0, |g| g - start);
        let fit = runs
            .iter()
            .filter(|(s, l)| *l >= n && s + l > from)
            .map(|&(s, _)| s.max(from))
            .find(|&s| runs.iter().any(|&(rs, rl)| rs <= s && s + n <= rs + rl))
            .or_else(|| runs.iter().find(|(_, l)| *l >= n).map(|&(s, _)| s));
        if let Some(s) = fit {
            return vec![self.take_units(r, s, n)];
        }
        let mut runs = runs;
        runs.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let mut out = Vec::new();
        let mut left = n;
        for (s, l) in runs {
            if left == 0 {
                break;
            }
            let t = l.min(left);
            out.push(self.take_units(r, s, t));
            left -= t;
        }
        out
    }

    fn allocate_small(&mut self, n: u64, goal: Option<u64>) -> Result<Vec<Extent>, AllocError> {
        let g = goal.map_or(0, |g| self.region_of(g));
        let large = self.large;
        // 1. A small region with room for the whole request, nearest first.
        let found = nearest(&self.small_open, g).find(|&r| self.regions[r].free_blocks(large) >= n);
        if let Some(r) = found {
            return Ok(self.small_in_region(r, n, goal));
        }
        // 2. A fresh region, if the request fits in one.
        let found = nearest(&self.free_regions, g).find(|&r| self.regions[r].blocks >= n);
        if let Some(r) = found {
            self.become_kind(r, Kind::Small);
            return Ok(self.small_in_region(r, n, goal));
        }
        // 3. Spread over small and free regions (only a request larger than a
        //    region, or a nearly full device, gets here).
        let avail: u64 = self
            .regions
            .iter()
            .filter(|r| r.kind != Kind::Large)
            .map(|r| r.free_blocks(large))
            .sum();
        if avail < n {
            return Err(AllocError::NoSpace {
                wanted: n,
                free: avail,
            });
        }
        let mut out = Vec::new();
        let mut left = n;
        for r in self.by_distance(g) {
            if left == 0 {
                break;
            }
            match self.regions[r].kind {
                Kind::Large => continue,
                Kind::Free => self.become_kind(r, Kind::Small),
                Kind::Small => {}
            }
            let f = self.regions[r].free_blocks(large).min(left);
            if f > 0 {
                out.extend(self.small_in_region(r, f, goal));
                left -= f;
            }
        }
        Ok(out)
    }

    fn allocate_large(&mut self, n: u64, goal: Option<u64>) -> Result<Vec<Extent>, AllocError> {
        let large = self.large;
        if !n.is_multiple_of(large) {
            return Err(AllocError::Conflict {
                block: n,
                reason: "large request is not a whole number of large blocks",
            });
        }
        let want = n / large;
        let g = goal.map_or(0, |g| self.region_of(g));
        if self.large_free_units < want {
            return Err(AllocError::NoSpace {
                wanted: n,
                free: self.large_free_units * large,
            });
        }
        let mut out = Vec::new();
        // Large regions with room first, then fresh full-size regions; each
        // nearest to the goal first.
        while (out.len() as u64) < want {
            let open = nearest(&self.large_open, g).next();
            let r = match open {
                Some(r) => r,
                None => {
                    let full = self.region_blocks;
                    let fresh =
                        nearest(&self.free_regions, g).find(|&r| self.regions[r].blocks == full);
                    let r = fresh.expect("large_free_units counts a full-size free region");
                    self.become_kind(r, Kind::Large);
                    r
                }
            };
            for (s, l) in self.regions[r].free_runs(large) {
                for u in s..s + l {
                    if out.len() as u64 == want {
                        break;
                    }
                    out.push(self.take_units(r, u, 1));
                }
            }
        }
        Ok(out)
    }

    fn release_if_empty(&mut self, r: usize) {
        if self.regions[r].used == 0 {
            self.regions[r].kind = Kind::Free;
            self.regions[r].bits = Vec::new();
        }
        self.reindex(r);
    }

    /// Splits an extent into (region, first unit, units) pieces, checking
    /// alignment for large regions.
    fn pieces(&self, ext: Extent) -> Result<Vec<(usize, u64, u64)>, AllocError> {
        if ext.len == 0 || ext.end() > self.total {
            return Err(AllocError::Conflict {
                block: ext.start,
                reason: "outside the device",
            });
        }
        let mut out = Vec::new();
        let mut b = ext.start;
        while b < ext.end() {
            let r = self.region_of(b);
            let reg = &self.regions[r];
            let end = ext.end().min(reg.start + reg.blocks);
            out.push((r, b, end));
            b = end;
        }
        Ok(out
            .into_iter()
            .map(|(r, s, e)| (r, s - self.regions[r].start, e - s))
            .collect())
    }
}

impl Allocator for RegionAllocator {
    fn allocate(&mut self, req: &Request) -> Result<Vec<Extent>, AllocError> {
        if req.blocks == 0 {
            return Ok(Vec::new());
        }
        match req.class {
            Class::Large => self.allocate_large(req.blocks, req.goal),
            Class::Small | Class::Meta => self.allocate_small(req.blocks, req.goal),
        }
    }

    fn free(&mut self, ext: Extent) -> Result<(), AllocError> {
        let large = self.large;
        for (r, off, len) in self.pieces(ext)? {
            let reg = &self.regions[r];
            let (first, n) = match reg.kind {
                Kind::Free => {
                    return Err(AllocError::Conflict {
                        block: ext.start,
                        reason: "freed twice (region already free)",
                    });
                }
                Kind::Small => (off, len),
                Kind::Large => {
                    if !off.is_multiple_of(large) || !len.is_multiple_of(large) {
                        return Err(AllocError::Conflict {
                            block: ext.start,
                            reason: "freed a partial large block",
                        });
                    }
                    (off / large, len / large)
                }
            };
            if let Some(u) = (first..first + n).find(|&u| !reg.get(u)) {
                return Err(AllocError::Conflict {
                    block: reg.start + u * reg.unit_len(large),
                    reason: "freed twice",
                });
            }
            let reg = &mut self.regions[r];
            for u in first..first + n {
                reg.set(u, false);
            }
            reg.used -= n;
            self.free += n * reg.unit_len(large);
            self.release_if_empty(r);
        }
        Ok(())
    }

    fn reserve(&mut self, ext: Extent, class: Class) -> Result<(), AllocError> {
        let large = self.large;
        let want = if class == Class::Large {
            Kind::Large
        } else {
            Kind::Small
        };
        for (r, off, len) in self.pieces(ext)? {
            if self.regions[r].kind == Kind::Free {
                if want == Kind::Large && self.regions[r].blocks != self.region_blocks {
                    return Err(AllocError::Conflict {
                        block: ext.start,
                        reason: "large block in the partial last region",
                    });
                }
                self.become_kind(r, want);
            }
            let reg = &self.regions[r];
            if reg.kind != want {
                return Err(AllocError::Conflict {
                    block: ext.start,
                    reason: "in a region of the other block size",
                });
            }
            let (first, n) = if want == Kind::Large {
                if !off.is_multiple_of(large) || !len.is_multiple_of(large) {
                    return Err(AllocError::Conflict {
                        block: ext.start,
                        reason: "large extent not aligned to large blocks",
                    });
                }
                (off / large, len / large)
            } else {
                (off, len)
            };
            if let Some(u) = (first..first + n).find(|&u| reg.get(u)) {
                return Err(AllocError::Conflict {
                    block: reg.start + u * reg.unit_len(large),
                    reason: "owned twice",
                });
            }
            self.take_units(r, first, n);
        }
        Ok(())
    }

    fn free_blocks(&self) -> u64 {
        self.free
    }
    fn total_blocks(&self) -> u64 {
        self.total
    }
    fn free_extents(&self) -> Vec<Extent> {
        let large = self.large;
        let mut v = Vec::new();
        for reg in &self.regions {
            match reg.kind {
                Kind::Free => v.push(Extent::new(reg.start, reg.blocks)),
                _ => {
                    let ul = reg.unit_len(large);
                    for (s, l) in reg.free_runs(large) {
                        v.push(Extent::new(reg.start + s * ul, l * ul));
                    }
                }
            }
        }
        coalesce(v)
    }
    fn check(&self) -> Result<(), StoreError> {
        let large = self.large;
        let mut free = 0;
        for (i, reg) in self.regions.iter().enumerate() {
            let counted = reg
                .bits
                .iter()
                .map(|w| u64::from(w.count_ones()))
                .sum::<u64>();
            match reg.kind {
                Kind::Free if reg.used != 0 || counted != 0 => {
                    return Err(StoreError::corrupt(format!(
                        "region {i} is free but has used units"
                    )));
                }
                Kind::Large if reg.blocks != self.region_blocks => {
                    return Err(StoreError::corrupt(format!(
                        "partial region {i} holds large blocks"
                    )));
                }
                Kind::Small | Kind::Large if counted != reg.used => {
                    return Err(StoreError::corrupt(format!(
                        "region {i}: {counted} bits set, used count {}",
                        reg.used
                    )));
                }
                Kind::Small | Kind::Large if reg.used == 0 => {
                    return Err(StoreError::corrupt(format!(
                        "region {i} is empty but not returned to free"
                    )));
                }
                _ => {}
            }
            free += reg.free_blocks(large);
        }
        if free != self.free {
            return Err(StoreError::corrupt(format!(
                "free count {} but regions sum to {free}",
                self.free
            )));
        }
        let mut units = 0;
        for (i, reg) in self.regions.iter().enumerate() {
            let room = reg.used < reg.units(large);
            let want = (
                reg.kind == Kind::Small && room,
                reg.kind == Kind::Large && room,
                reg.kind == Kind::Free,
            );
            let have = (
                self.small_open.contains(&i),
                self.large_open.contains(&i),
                self.free_regions.contains(&i),
            );
            if want != have {
                return Err(StoreError::corrupt(format!(
                    "region {i} indexed as (small, large, free) = {have:?}, should be {want:?}"
                )));
            }
            units += match reg.kind {
                Kind::Large => reg.units(large) - reg.used,
                Kind::Free if reg.blocks == self.region_blocks => reg.blocks / large,
                _ => 0,
            };
        }
        if units != self.large_free_units {
            return Err(StoreError::corrupt(format!(
                "{} free large blocks counted, regions hold {units}",
                self.large_free_units
            )));
        }
        Ok(())
    }
    fn name(&self) -> &'static str {
        "region"
    }
    fn fits_with(&self, blocks: u64, goal: u64) -> bool {
        let r = &self.regions[self.region_of(goal.min(self.total.saturating_sub(1)))];
        r.kind == Kind::Small && r.free_blocks(self.large) >= blocks
    }
}
