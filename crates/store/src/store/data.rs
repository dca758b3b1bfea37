//! Object data: read, write, append, truncate. Writes are copy-on-write at
//! the object's allocation unit (one 4 KiB block, or one large block for
//! large objects under the region policy), so an interrupted write leaves
//! the old bytes in place and never a mix.

use super::{Inner, MAX_OBJECT_SIZE, Store, commit, now_ns};
use crate::alloc::plan::{ObjectShape, PlanGeometry, goal_for, plan_write};
use crate::alloc::{AllocError, Class, Extent, Request};
use crate::device::{AlignedBuf, BLOCK};
use crate::error::{Result, StoreError};
use crate::format::label::Policy;
use crate::journal::block_crc;
use crate::journal::record::Record;
use crate::onode::{MapExtent, Onode};

/// What a writer needs to know of an object, copied out under the lock.
pub(super) struct Snapshot {
    pub(super) size: u64,
    pub(super) large: bool,
    pub(super) inline: Option<Box<[u8]>>,
    pub(super) extents: Vec<MapExtent>,
    pub(super) reserved: Vec<(u64, u64)>,
    pub(super) generation: u64,
}

impl Snapshot {
    /// What an object about to be created looks like.
    pub(super) fn empty() -> Snapshot {
        Snapshot {
            size: 0,
            large: false,
            inline: None,
            extents: Vec::new(),
            reserved: Vec::new(),
            generation: 0,
        }
    }
}

fn name(pid: u64, oid: u64) -> String {
    format!("object {pid:#x}/{oid:#x}")
}

impl Inner {
    pub(super) fn snapshot(&self, pid: u64, oid: u64) -> Result<Snapshot> {
        let st = self.lock_ok()?;
        let o = st
            .meta
            .objects
            .get(&(pid, oid))
            .ok_or(StoreError::NoObject { pid, oid })?;
        Ok(Snapshot {
            size: o.size,
            large: o.large,
            inline: o.inline.clone(),
            extents: o.extents.clone(),
            reserved: o.reserved.clone(),
            generation: o.generation,
        })
    }

    /// Reads the mapped pieces into `buf`, which holds logical blocks from
    /// `base`; verifies every block's crc.
    fn read_mapped(
        &self,
        pid: u64,
        oid: u64,
        pieces: &[MapExtent],
        base: u64,
        buf: &mut [u8],
    ) -> Result<()> {
        for p in pieces {
            let a = ((p.lblock - base) * BLOCK) as usize;
            let b = a + (p.len() * BLOCK) as usize;
            let dst = &mut buf[a..b];
            self.dev
                .read_at(dst, self.data_offset(p.pblock))
                .map_err(|e| {
                    StoreError::io(
                        format!("{} at byte {}", name(pid, oid), p.lblock * BLOCK),
                        e,
                    )
                })?;
            for (i, want) in p.crcs.iter().enumerate() {
                let blk = &dst[i * BLOCK as usize..(i + 1) * BLOCK as usize];
                let got = block_crc(blk);
                if got != *want {
                    return Err(StoreError::Checksum {
                        what: name(pid, oid),
                        offset: (p.lblock + i as u64) * BLOCK,
                        expected: *want,
                        actual: got,
                    });
                }
            }
        }
        Ok(())
    }

    /// Allocates `blocks` of `class`. `credit` is how many of them fill
    /// blocks the object had reserved: those may use reserved space, the
    /// rest must fit beside every reservation.
    fn allocate(
        &self,
        class: Class,
        blocks: u64,
        goal: Option<u64>,
        grow: u64,
        credit: u64,
    ) -> Result<Vec<Extent>> {
        let mut st = self.lock_ok()?;
        // Keep room for two checkpoints, however full the store (see
        // `reserve_blocks`): metadata can always commit, the store can always
        // be reopened.
        let reserve = super::reserve_blocks(st.meta.approx_bytes)
            + st.meta.reserved_blocks.saturating_sub(credit);
        let free = st.alloc.free_blocks();
        if free < blocks + reserve {
            return Err(StoreError::NoSpace {
                needed: blocks * BLOCK,
                free: free.saturating_sub(reserve) * BLOCK,
            });
        }
        st.alloc
            .allocate(&Request {
                blocks,
                goal,
                class,
                grow,
            })
            .map_err(|e| match e {
                AllocError::NoSpace { free, .. } => StoreError::NoSpace {
                    needed: blocks * BLOCK,
                    free: free * BLOCK,
                },
                other => StoreError::corrupt(other.to_string()),
            })
    }

    pub(super) fn unallocate(&self, extents: Vec<Extent>) {
        let mut st = self.lock();
        for e in extents {
            let _ = st.alloc.free(e);
        }
    }

    /// Writes `buf` (logical blocks from `first`) to new blocks of `kind`
    /// (class, expected growth) and returns the mapping; `reserved` are the
    /// object's reserved ranges (blocks written there use their
    /// reservation). Frees everything on failure.
    #[expect(
        clippy::too_many_arguments,
        reason = "one allocation and write: the object, where, what, and the hints the allocator takes"
    )]
    pub(super) fn write_new(
        &self,
        pid: u64,
        oid: u64,
        (class, grow): (Class, u64),
        first: u64,
        buf: &AlignedBuf,
        goal: Option<u64>,
        reserved: &[(u64, u64)],
    ) -> Result<Vec<MapExtent>> {
        let blocks = buf.len() as u64 / BLOCK;
        let credit = crate::onode::reserved_in(reserved, first, first + blocks);
        let extents = self.allocate(class, blocks, goal, grow, credit)?;
        let mut out = Vec::with_capacity(extents.len());
        let mut l = first;
        for e in &extents {
            let a = ((l - first) * BLOCK) as usize;
            let b = a + (e.len * BLOCK) as usize;
            if let Err(err) = self.dev.write_at(&buf[a..b], self.data_offset(e.start)) {
                self.unallocate(extents);
                return Err(StoreError::io(
                    format!("{} at byte {}", name(pid, oid), l * BLOCK),
                    err,
                ));
            }
            let crcs: Box<[u32]> = buf[a..b].chunks(BLOCK as usize).map(block_crc).collect();
            out.push(MapExtent {
                lblock: l,
                pblock: e.start,
                crcs,
            });
            l += e.len;
        }
        Ok(out)
    }

    /// Writes an inline object's bytes `d` to a new block 0: the record
    /// that maps it (to commit with what needs it) and the mapping.
    pub(super) fn move_inline(
        &self,
        pid: u64,
        oid: u64,
        d: &[u8],
        size: u64,
        mtime: u64,
    ) -> Result<(Record, Vec<MapExtent>)> {
        let block0 = AlignedBuf::from_slice(d);
        let m = self.write_new(pid, oid, (Class::Small, 0), 0, &block0, None, &[])?;
        let rec = Record::SetData {
            pid,
            oid,
            first: 0,
            end: 1,
            extents: m.clone(),
            size,
            mtime,
            large: false,
        };
        Ok((rec, m))
    }

    /// The write itself, with the object's stripe lock held; returns the
    /// batch to wait for.
    ///
    /// With `create`, the object must not exist yet and is created by the
    /// same commit (T10 CREATE AND WRITE): one flush instead of two.
    pub(crate) fn write_locked(
        &self,
        pid: u64,
        oid: u64,
        off: u64,
        data: &[u8],
        create: bool,
    ) -> Result<u64> {
        let mtime = now_ns();
        let snap = if create {
            let st = self.lock_ok()?;
            if !st.meta.partitions.contains_key(&pid) {
                return Err(StoreError::NoPartition(pid));
            }
            if st.meta.objects.contains_key(&(pid, oid)) {
                return Err(StoreError::ObjectExists { pid, oid });
            }
            Snapshot::empty()
        } else {
            self.snapshot(pid, oid)?
        };
        let mut recs = Vec::with_capacity(2);
        if create {
            recs.push(Record::CreateObject {
                pid,
                oid,
                time: mtime,
            });
        }
        let end = off + data.len() as u64;
        let new_size = snap.size.max(end);
        if snap.extents.is_empty()
            && snap.reserved.is_empty()
            && new_size <= u64::from(self.label.inline_max)
        {
            let mut v = snap.inline.map(|d| d.to_vec()).unwrap_or_default();
            v.resize(new_size as usize, 0);
            v[off as usize..end as usize].copy_from_slice(data);
            let mut st = self.lock_ok()?;
            if create && st.meta.objects.contains_key(&(pid, oid)) {
                return Err(StoreError::ObjectExists { pid, oid });
            }
            recs.push(Record::SetInline {
                pid,
                oid,
                data: v,
                mtime,
            });
            return commit::log(self, &mut st, &recs);
        }
        let mut snap = snap;
        // A write that does not touch block 0 of an inline object first moves
        // the inline bytes into block 0 (same commit), so the buffer below
        // covers only the blocks written, however far away they are.
        let mut moved: Vec<Extent> = Vec::new();
        if off >= BLOCK
            && let Some(d) = snap.inline.take()
        {
            let (rec, m) = self.move_inline(pid, oid, &d, snap.size, mtime)?;
            moved = m.iter().map(|e| e.physical()).collect();
            recs.push(rec);
            snap.extents = m;
        }
        let result = self.write_blocks(pid, oid, off, data, &snap, recs, create, mtime);
        if result.is_err() && !moved.is_empty() {
            self.unallocate(moved);
        }
        result
    }

    /// The block part of a write (see [`Inner::write_locked`]).
    #[expect(
        clippy::too_many_arguments,
        reason = "the block step of a write takes the write and the state it works on; a struct would be built only to be taken apart"
    )]
    fn write_blocks(
        &self,
        pid: u64,
        oid: u64,
        off: u64,
        data: &[u8],
        snap: &Snapshot,
        mut recs: Vec<Record>,
        create: bool,
        mtime: u64,
    ) -> Result<u64> {
        let end = off + data.len() as u64;
        let new_size = snap.size.max(end);
        let geo = PlanGeometry {
            region: self.label.policy == Policy::Region,
            large_blocks: self.label.large_blocks(),
        };
        let shape = ObjectShape {
            size: snap.size,
            large: snap.large,
            inline: snap.inline.is_some(),
            first_block: snap.extents.first().map(|e| e.pblock),
        };
        let plan = plan_write(&geo, &shape, off, end, |need, goal| {
            self.lock().alloc.fits_with(need, goal)
        });
        let (large, whole, b0, b1) = (plan.large, plan.whole, plan.first, plan.end);
        let unit = if large { geo.large_blocks } else { 1 };
        let mut buf = AlignedBuf::zeroed(((b1 - b0) * BLOCK) as usize);
        if let Some(d) = &snap.inline {
            buf[..d.len()].copy_from_slice(d);
        }
        let probe = Onode {
            extents: snap.extents.clone(),
            ..Onode::default()
        };
        if whole {
            self.read_mapped(pid, oid, &probe.mapped(b0, b1), b0, &mut buf)?;
        } else {
            if off > b0 * BLOCK {
                self.read_mapped(pid, oid, &probe.mapped(b0, b0 + unit), b0, &mut buf)?;
            }
            if end < b1 * BLOCK && (b1 - unit > b0 || off == b0 * BLOCK) {
                let tail = b1 - unit;
                let mut tmp = AlignedBuf::zeroed((unit * BLOCK) as usize);
                self.read_mapped(pid, oid, &probe.mapped(tail, b1), tail, &mut tmp)?;
                let at = ((tail - b0) * BLOCK) as usize;
                buf[at..at + tmp.len()].copy_from_slice(&tmp);
            }
        }
        let at = (off - b0 * BLOCK) as usize;
        buf[at..at + data.len()].copy_from_slice(data);
        let goal = goal_for(b0, snap.extents.iter().map(|e| (e.lblock, e.pblock)));
        let class = if large { Class::Large } else { Class::Small };
        let mapped =
            self.write_new(pid, oid, (class, plan.grow), b0, &buf, goal, &snap.reserved)?;
        let mut st = match self.lock_ok() {
            Ok(st) => st,
            Err(e) => {
                self.unallocate(mapped.iter().map(|m| m.physical()).collect());
                return Err(e);
            }
        };
        let still = st.meta.objects.get(&(pid, oid)).map(|o| o.generation);
        let expected = if create { None } else { Some(snap.generation) };
        if still != expected {
            drop(st);
            self.unallocate(mapped.iter().map(|m| m.physical()).collect());
            return Err(if create {
                StoreError::ObjectExists { pid, oid }
            } else {
                StoreError::NoObject { pid, oid }
            });
        }
        let physical: Vec<Extent> = mapped.iter().map(|m| m.physical()).collect();
        recs.push(Record::SetData {
            pid,
            oid,
            first: b0,
            end: b1,
            extents: mapped,
            size: new_size,
            mtime,
            large,
        });
        commit::log(self, &mut st, &recs).inspect_err(|_| {
            // Nothing was applied: the new blocks were never referenced.
            for x in physical {
                let _ = st.alloc.free(x);
            }
        })
    }
}

pub(super) fn check_range(off: u64, len: u64) -> Result<u64> {
    off.checked_add(len)
        .filter(|&e| e <= MAX_OBJECT_SIZE)
        .ok_or_else(|| {
            StoreError::invalid(
                "offset",
                format!("{off} + {len} exceeds the largest object size {MAX_OBJECT_SIZE}"),
            )
        })
}

impl Store {
    /// Writes `data` at byte `offset`, growing the object as needed (the gap,
    /// if any, reads as zeros). Durable when it returns.
    pub fn write(&self, pid: u64, oid: u64, offset: u64, data: &[u8]) -> Result<()> {
        super::objects::check_ids(pid, oid)?;
        check_range(offset, data.len() as u64)?;
        let seq = {
            let _g = self.inner.stripe(pid, oid);
            if data.is_empty() {
                self.inner.snapshot(pid, oid)?;
                return Ok(());
            }
            self.inner.write_locked(pid, oid, offset, data, false)?
        };
        commit::wait(&self.inner, self.inner.lock(), seq)
    }

    /// Creates object `oid` holding `data`, in one durable commit (T10
    /// CREATE AND WRITE). Fails with `ObjectExists` if the id is taken.
    pub fn create_and_write(&self, pid: u64, oid: u64, data: &[u8]) -> Result<()> {
        super::objects::check_ids(pid, oid)?;
        check_range(0, data.len() as u64)?;
        let seq = {
            let _g = self.inner.stripe(pid, oid);
            self.inner.write_locked(pid, oid, 0, data, true)?
        };
        commit::wait(&self.inner, self.inner.lock(), seq)
    }

    /// Appends `data` at the current end; returns the offset it was written at.
    pub fn append(&self, pid: u64, oid: u64, data: &[u8]) -> Result<u64> {
        super::objects::check_ids(pid, oid)?;
        let (seq, off) = {
            let _g = self.inner.stripe(pid, oid);
            let off = self.inner.snapshot(pid, oid)?.size;
            check_range(off, data.len() as u64)?;
            if data.is_empty() {
                return Ok(off);
            }
            (self.inner.write_locked(pid, oid, off, data, false)?, off)
        };
        commit::wait(&self.inner, self.inner.lock(), seq)?;
        Ok(off)
    }

    /// Reads up to `len` bytes at `offset`; a read past the end is short
    /// (empty at or beyond the end), holes read as zeros, and every block is
    /// checked against its checksum.
    pub fn read(&self, pid: u64, oid: u64, offset: u64, len: u64) -> Result<Vec<u8>> {
        super::objects::check_ids(pid, oid)?;
        check_range(offset, len)?;
        let mut attempts = 0;
        loop {
            let (size, inline, pieces, generation, b0) = {
                let mut st = self.inner.lock();
                let mut o = st
                    .meta
                    .objects
                    .get_mut(&(pid, oid))
                    .ok_or(StoreError::NoObject { pid, oid })?;
                o.atime = now_ns();
                let end = o.size.min(offset + len);
                let b0 = offset / BLOCK;
                let pieces = if end > offset {
                    o.mapped(b0, end.div_ceil(BLOCK))
                } else {
                    Vec::new()
                };
                (o.size, o.inline.clone(), pieces, o.generation, b0)
            };
            if offset >= size {
                return Ok(Vec::new());
            }
            let n = len.min(size - offset) as usize;
            if let Some(d) = inline {
                return Ok(d[offset as usize..offset as usize + n].to_vec());
            }
            let b1 = (offset + n as u64).div_ceil(BLOCK);
            let mut buf = AlignedBuf::zeroed(((b1 - b0) * BLOCK) as usize);
            match self.inner.read_mapped(pid, oid, &pieces, b0, &mut buf) {
                Ok(()) => {
                    let at = (offset - b0 * BLOCK) as usize;
                    return Ok(buf[at..at + n].to_vec());
                }
                Err(StoreError::Checksum { .. })
                    if attempts < 3 && self.generation(pid, oid) != Some(generation) =>
                {
                    // The object was rewritten while we read it; its old
                    // blocks may already hold new data. Read again.
                    attempts += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn generation(&self, pid: u64, oid: u64) -> Option<u64> {
        self.inner
            .lock()
            .meta
            .objects
            .get(&(pid, oid))
            .map(|o| o.generation)
    }

    /// Sets the logical length; shrinking releases whole allocation units past
    /// the new end, growing leaves a hole that reads as zeros.
    pub fn truncate(&self, pid: u64, oid: u64, size: u64) -> Result<()> {
        super::objects::check_ids(pid, oid)?;
        check_range(size, 0)?;
        let inner = &self.inner;
        let seq = {
            let _g = inner.stripe(pid, oid);
            let snap = inner.snapshot(pid, oid)?;
            let mtime = now_ns();
            if let Some(d) = &snap.inline {
                if size <= u64::from(inner.label.inline_max) {
                    let mut v = d.to_vec();
                    v.resize(size as usize, 0);
                    let mut st = inner.lock_ok()?;
                    commit::log(
                        inner,
                        &mut st,
                        &[Record::SetInline {
                            pid,
                            oid,
                            data: v,
                            mtime,
                        }],
                    )?
                } else {
                    // Moves the inline bytes to blocks, then sets the size.
                    inner.write_locked(pid, oid, size - 1, &[0], false)?
                }
            } else {
                let unit = if snap.large {
                    inner.label.large_blocks()
                } else {
                    1
                };
                let unit_bytes = unit * BLOCK;
                let mut recs = Vec::new();
                let boundary = size / unit_bytes * unit;
                let probe = Onode {
                    extents: snap.extents.clone(),
                    ..Onode::default()
                };
                let pieces = probe.mapped(boundary, boundary + unit);
                if size < snap.size && !size.is_multiple_of(unit_bytes) && !pieces.is_empty() {
                    // Zero the tail of the unit that now holds the end, so a
                    // later growth reads zeros there, not the old bytes.
                    let mut buf = AlignedBuf::zeroed(unit_bytes as usize);
                    inner.read_mapped(pid, oid, &pieces, boundary, &mut buf)?;
                    buf[(size - boundary * BLOCK) as usize..].fill(0);
                    let class = if snap.large {
                        Class::Large
                    } else {
                        Class::Small
                    };
                    let goal = pieces.first().map(|p| p.pblock);
                    let mapped = inner.write_new(
                        pid,
                        oid,
                        (class, 0),
                        boundary,
                        &buf,
                        goal,
                        &snap.reserved,
                    )?;
                    recs.push(Record::SetData {
                        pid,
                        oid,
                        first: boundary,
                        end: boundary + unit,
                        extents: mapped,
                        size: snap.size,
                        mtime,
                        large: snap.large,
                    });
                }
                recs.push(Record::Truncate {
                    pid,
                    oid,
                    size,
                    mtime,
                });
                let mut st = match inner.lock_ok() {
                    Ok(st) => st,
                    Err(e) => {
                        if let Some(Record::SetData { extents, .. }) = recs.first() {
                            inner.unallocate(extents.iter().map(|m| m.physical()).collect());
                        }
                        return Err(e);
                    }
                };
                commit::log(inner, &mut st, &recs)?
            }
        };
        commit::wait(inner, inner.lock(), seq)
    }
}
