//! Onodes: the per-object metadata the store keeps in memory and persists in
//! checkpoints and journal records: size, version, times, the block map with
//! one crc32c per 4 KiB block, inline data for tiny objects, reserved
//! (unwritten) block ranges, and attributes.
//!
//! Invariants: `extents` are sorted by logical block, non-overlapping, each
//! with one crc per block; an object with inline data has no extents; bytes
//! past `size` inside mapped blocks are zero (so growing an object never
//! exposes old bytes); reserved ranges are sorted, disjoint and never
//! overlap a mapped block.

use crate::StoreError;
use std::collections::BTreeMap;

use crate::alloc::Extent;
use crate::device::BLOCK;
use crate::format::codec::{DecodeError, Reader, Writer};

/// Largest attribute value in bytes.
pub const MAX_ATTR_LEN: usize = 64 * 1024;

/// One run of logical blocks mapped to contiguous physical blocks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapExtent {
    /// First logical block of the object.
    pub lblock: u64,
    /// First physical block (data-area relative).
    pub pblock: u64,
    /// crc32c of each 4 KiB block, in order; the length is the block count.
    pub crcs: Box<[u32]>,
}

impl MapExtent {
    /// Number of blocks.
    pub fn len(&self) -> u64 {
        self.crcs.len() as u64
    }
    /// Whether the extent maps no block.
    pub fn is_empty(&self) -> bool {
        self.crcs.is_empty()
    }
    /// One past the last logical block.
    pub fn lend(&self) -> u64 {
        self.lblock + self.len()
    }
    /// The physical blocks.
    pub fn physical(&self) -> Extent {
        Extent::new(self.pblock, self.len())
    }
    /// The sub-extent covering logical blocks `[a, b)` (must lie within).
    pub fn slice(&self, a: u64, b: u64) -> MapExtent {
        let i = (a - self.lblock) as usize;
        let j = (b - self.lblock) as usize;
        MapExtent {
            lblock: a,
            pblock: self.pblock + (a - self.lblock),
            crcs: self.crcs[i..j].into(),
        }
    }

    pub(crate) fn encode(&self, w: &mut Writer) {
        w.u64(self.lblock);
        w.u64(self.pblock);
        w.u32(self.crcs.len() as u32);
        for c in self.crcs.iter() {
            w.u32(*c);
        }
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<MapExtent, DecodeError> {
        let lblock = r.u64("extent.lblock")?;
        let pblock = r.u64("extent.pblock")?;
        let n = r.count(4, "extent.blocks")?;
        if n == 0 {
            return Err(DecodeError::new("extent.blocks", "empty extent"));
        }
        let mut crcs = Vec::with_capacity(n);
        for _ in 0..n {
            crcs.push(r.u32("extent.crc")?);
        }
        Ok(MapExtent {
            lblock,
            pblock,
            crcs: crcs.into(),
        })
    }
}

/// Metadata of one object.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Onode {
    /// Logical length in bytes.
    pub size: u64,
    /// Version number, used by the OSD for capability revocation.
    pub version: u64,
    /// Creation time (ns since the epoch).
    pub created: u64,
    /// Last data modification time.
    pub data_mtime: u64,
    /// Last attribute modification time.
    pub attr_mtime: u64,
    /// Last data access time (kept in memory, persisted by checkpoints only).
    pub atime: u64,
    /// Whether the object uses large blocks (region policy).
    pub large: bool,
    /// Data of a tiny object, kept in the onode itself.
    pub inline: Option<Box<[u8]>>,
    /// Block map.
    pub extents: Vec<MapExtent>,
    /// User attributes by (page, number).
    pub attrs: BTreeMap<(u32, u32), Box<[u8]>>,
    /// Reserved logical block ranges `[start, end)` (`fallocate`): space
    /// counted as used so a later write into them cannot run out of room,
    /// with no physical block behind them yet (they read as zeros). Writing,
    /// punching or truncating a block ends its reservation.
    pub reserved: Vec<(u64, u64)>,
    /// Bumped on every change to the block map (in memory only): lets a
    /// reader that saw a checksum mismatch tell a concurrent rewrite from rot.
    pub generation: u64,
}

impl Onode {
    /// Bytes of device space the object holds.
    pub fn used_bytes(&self) -> u64 {
        let blocks: u64 = self.extents.iter().map(|e| e.len()).sum();
        blocks * BLOCK + self.inline.as_ref().map_or(0, |d| d.len() as u64)
    }

    /// Blocks reserved in all.
    pub fn reserved_blocks(&self) -> u64 {
        self.reserved.iter().map(|(a, b)| b - a).sum()
    }

    /// Blocks reserved inside logical blocks `[a, b)`.
    pub fn reserved_in(&self, a: u64, b: u64) -> u64 {
        reserved_in(&self.reserved, a, b)
    }

    /// Ends the reservation of logical blocks `[a, b)`.
    pub fn unreserve(&mut self, a: u64, b: u64) {
        let mut kept = Vec::with_capacity(self.reserved.len() + 1);
        for &(x, y) in &self.reserved {
            if y <= a || x >= b {
                kept.push((x, y));
                continue;
            }
            if x < a {
                kept.push((x, a));
            }
            if y > b {
                kept.push((b, y));
            }
        }
        self.reserved = kept;
    }

    /// Reserves the unmapped blocks of `[a, b)`; returns how many blocks
    /// became reserved.
    pub fn reserve(&mut self, a: u64, b: u64) -> u64 {
        let before = self.reserved_blocks();
        // The gaps between mapped extents inside [a, b).
        let mut at = a;
        let mut gaps = Vec::new();
        for e in self.mapped(a, b) {
            if e.lblock > at {
                gaps.push((at, e.lblock));
            }
            at = e.lend();
        }
        if at < b {
            gaps.push((at, b));
        }
        let mut all = std::mem::take(&mut self.reserved);
        all.extend(gaps);
        all.sort_unstable();
        for (x, y) in all {
            match self.reserved.last_mut() {
                Some((_, e)) if *e >= x => *e = (*e).max(y),
                _ => self.reserved.push((x, y)),
            }
        }
        self.reserved_blocks() - before
    }

    /// The mapped pieces of logical blocks `[a, b)`.
    pub fn mapped(&self, a: u64, b: u64) -> Vec<MapExtent> {
        let i = self.extents.partition_point(|e| e.lend() <= a);
        self.extents[i..]
            .iter()
            .take_while(|e| e.lblock < b)
            .map(|e| e.slice(e.lblock.max(a), e.lend().min(b)))
            .collect()
    }

    /// Unmaps logical blocks `[a, b)`, returning the physical blocks released.
    pub fn unmap(&mut self, a: u64, b: u64) -> Vec<Extent> {
        let mut freed = Vec::new();
        let mut kept = Vec::with_capacity(self.extents.len() + 1);
        for e in std::mem::take(&mut self.extents) {
            if e.lend() <= a || e.lblock >= b {
                kept.push(e);
                continue;
            }
            if e.lblock < a {
                kept.push(e.slice(e.lblock, a));
            }
            let (ca, cb) = (e.lblock.max(a), e.lend().min(b));
            freed.push(Extent::new(e.pblock + (ca - e.lblock), cb - ca));
            if e.lend() > b {
                kept.push(e.slice(b, e.lend()));
            }
        }
        self.extents = kept;
        freed
    }

    /// Maps new extents (whose logical range must already be unmapped).
    pub fn map(&mut self, new: Vec<MapExtent>) {
        self.extents.extend(new);
        self.extents.sort_unstable_by_key(|e| e.lblock);
    }

    /// Every physical extent the object owns.
    pub fn physical(&self) -> impl Iterator<Item = Extent> + '_ {
        self.extents.iter().map(|e| e.physical())
    }

    pub(crate) fn encode(&self, w: &mut Writer) {
        w.u64(self.size);
        w.u64(self.version);
        w.u64(self.created);
        w.u64(self.data_mtime);
        w.u64(self.attr_mtime);
        w.u64(self.atime);
        w.u8(u8::from(self.large)
            | if self.inline.is_some() { 2 } else { 0 }
            | if self.reserved.is_empty() { 0 } else { 4 });
        if let Some(d) = &self.inline {
            w.blob(d);
        }
        w.u32(self.extents.len() as u32);
        for e in &self.extents {
            e.encode(w);
        }
        if !self.reserved.is_empty() {
            w.u32(self.reserved.len() as u32);
            for (a, b) in &self.reserved {
                w.u64(*a);
                w.u64(*b);
            }
        }
        w.u32(self.attrs.len() as u32);
        for ((p, n), v) in &self.attrs {
            w.u32(*p);
            w.u32(*n);
            w.blob(v);
        }
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Onode, DecodeError> {
        let mut o = Onode {
            size: r.u64("onode.size")?,
            version: r.u64("onode.version")?,
            created: r.u64("onode.created")?,
            data_mtime: r.u64("onode.data_mtime")?,
            attr_mtime: r.u64("onode.attr_mtime")?,
            atime: r.u64("onode.atime")?,
            ..Onode::default()
        };
        let flags = r.u8("onode.flags")?;
        if flags & !7 != 0 {
            return Err(DecodeError::new(
                "onode.flags",
                format!("unknown flags {flags:#x}"),
            ));
        }
        o.large = flags & 1 != 0;
        if flags & 2 != 0 {
            o.inline = Some(r.blob(BLOCK as usize, "onode.inline")?.into());
        }
        let n = r.count(20, "onode.extents")?;
        for _ in 0..n {
            o.extents.push(MapExtent::decode(r)?);
        }
        if flags & 4 != 0 {
            let n = r.count(16, "onode.reserved")?;
            if n == 0 {
                return Err(DecodeError::new("onode.reserved", "flagged but empty"));
            }
            for _ in 0..n {
                let a = r.u64("reserved.first")?;
                let b = r.u64("reserved.end")?;
                o.reserved.push((a, b));
            }
        }
        let n = r.count(12, "onode.attrs")?;
        for _ in 0..n {
            let p = r.u32("attr.page")?;
            let num = r.u32("attr.number")?;
            let v = r.blob(MAX_ATTR_LEN, "attr.value")?;
            o.attrs.insert((p, num), v.into());
        }
        Ok(o)
    }

    /// Checks the structural invariants; describes the first violation.
    pub fn check(
        &self,
        large_blocks: u64,
        data_blocks: u64,
        inline_max: u32,
    ) -> Result<(), StoreError> {
        if let Some(d) = &self.inline {
            if !self.extents.is_empty() {
                return Err(StoreError::corrupt("has both inline data and extents"));
            }
            if d.len() as u64 != self.size || d.len() > inline_max as usize {
                return Err(StoreError::corrupt(format!(
                    "inline data of {} bytes, size {}",
                    d.len(),
                    self.size
                )));
            }
        }
        let end_block = self.size.div_ceil(BLOCK);
        let unit = if self.large { large_blocks } else { 1 };
        let mut prev = 0;
        for e in &self.extents {
            if e.is_empty() || e.lblock < prev {
                return Err(StoreError::corrupt(format!(
                    "extent at logical block {} overlaps or is out of order",
                    e.lblock
                )));
            }
            if e.pblock
                .checked_add(e.len())
                .is_none_or(|x| x > data_blocks)
            {
                return Err(StoreError::corrupt(format!(
                    "extent at logical block {} lies past the data area",
                    e.lblock
                )));
            }
            if e.lblock >= end_block.next_multiple_of(unit) {
                return Err(StoreError::corrupt(format!(
                    "block {} mapped past the object size {}",
                    e.lblock, self.size
                )));
            }
            if self.large && (e.lblock % unit != 0 || e.pblock % unit != 0 || e.len() % unit != 0) {
                return Err(StoreError::corrupt(format!(
                    "large extent at logical block {} is not large-block aligned",
                    e.lblock
                )));
            }
            prev = e.lend();
        }
        let mut prev = 0;
        for &(a, b) in &self.reserved {
            if a >= b || a < prev || b > crate::store::MAX_OBJECT_SIZE / BLOCK {
                return Err(StoreError::corrupt(format!(
                    "reserved range [{a}, {b}) is empty, out of order or past the largest object"
                )));
            }
            if self.inline.is_some() || !self.mapped(a, b).is_empty() {
                return Err(StoreError::corrupt(format!(
                    "reserved range [{a}, {b}) overlaps data"
                )));
            }
            prev = b;
        }
        Ok(())
    }
}

/// Blocks of sorted disjoint `ranges` inside `[a, b)`.
pub(crate) fn reserved_in(ranges: &[(u64, u64)], a: u64, b: u64) -> u64 {
    ranges
        .iter()
        .map(|&(x, y)| y.min(b).saturating_sub(x.max(a)))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ext(l: u64, p: u64, n: usize) -> MapExtent {
        MapExtent {
            lblock: l,
            pblock: p,
            crcs: vec![0; n].into(),
        }
    }

    #[test]
    fn unmap_splits_and_frees_the_middle() {
        let mut o = Onode {
            size: 10 * BLOCK,
            extents: vec![ext(0, 100, 10)],
            ..Onode::default()
        };
        let freed = o.unmap(3, 5);
        assert_eq!(freed, vec![Extent::new(103, 2)]);
        assert_eq!(o.extents, vec![ext(0, 100, 3), ext(5, 105, 5)]);
        assert_eq!(o.mapped(2, 6).len(), 2);
    }

    #[test]
    fn reservations_skip_data_merge_and_end_where_written() {
        let mut o = Onode {
            size: 10 * BLOCK,
            extents: vec![ext(4, 100, 2)],
            ..Onode::default()
        };
        assert_eq!(o.reserve(0, 10), 8, "blocks 4 and 5 hold data");
        assert_eq!(o.reserved, vec![(0, 4), (6, 10)]);
        assert_eq!(o.reserve(8, 12), 2);
        assert_eq!(o.reserved, vec![(0, 4), (6, 12)]);
        assert_eq!(o.reserved_in(2, 7), 3);
        o.unreserve(1, 2);
        o.unreserve(10, 100);
        assert_eq!(o.reserved, vec![(0, 1), (2, 4), (6, 10)]);
        assert_eq!(o.reserved_blocks(), 7);
        o.check(1, 1000, 512).unwrap();
        let mut w = Writer::new();
        o.encode(&mut w);
        assert_eq!(Onode::decode(&mut Reader::new(&w.buf)).unwrap(), o);
        o.reserved.push((5, 6));
        assert!(o.check(1, 1000, 512).is_err(), "block 5 holds data");
    }

    #[test]
    fn encode_round_trip() {
        let mut o = Onode {
            size: 5,
            inline: Some(b"hello".to_vec().into()),
            ..Onode::default()
        };
        o.attrs.insert((0x10, 1), b"v".to_vec().into());
        let mut w = Writer::new();
        o.encode(&mut w);
        let back = Onode::decode(&mut Reader::new(&w.buf)).unwrap();
        assert_eq!(back, o);
    }
}
