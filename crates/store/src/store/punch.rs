//! Holes: punching a byte range out of an object (the whole allocation
//! units inside it are unmapped and their blocks freed; the parts of units
//! at its edges that hold data are overwritten with zeros), reserving space
//! for a range (`fallocate`), and the byte ranges an object holds data in
//! (what SEEK_DATA and SEEK_HOLE answer).
//!
//! A reservation is an unwritten range: the store is copy-on-write, so
//! blocks allocated ahead would be replaced by the first write anyway.
//! What a reservation guarantees instead is room: its blocks count as used,
//! and a later write that fills them may use that room when nothing else is
//! left. (A rewrite of blocks already written still needs fresh blocks for
//! its copy, as on every copy-on-write file system.)

use super::data::check_range;
use super::{Store, commit, now_ns};
use crate::device::BLOCK;
use crate::error::{Result, StoreError};
use crate::journal::record::Record;
use crate::onode::Onode;

impl Store {
    /// Makes `[offset, offset + len)` read as zeros without changing the
    /// object's size. Whole allocation units inside the range are unmapped
    /// (their blocks freed) and their reservations end, past the size too;
    /// partial units at the edges that hold data get zeros written. Durable
    /// when it returns.
    pub fn punch(&self, pid: u64, oid: u64, offset: u64, len: u64) -> Result<()> {
        super::objects::check_ids(pid, oid)?;
        let asked = check_range(offset, len)?;
        let snap = self.inner.snapshot(pid, oid)?;
        let end = asked.min(snap.size);
        // Room reserved past the object's size (a stripe object is often
        // shorter than its file) is given back too.
        let reserved = !snap.reserved.is_empty();
        if offset >= end && !reserved {
            return Ok(());
        }
        if snap.inline.is_some() {
            return if offset < end {
                self.write(pid, oid, offset, &vec![0; (end - offset) as usize])
            } else {
                Ok(())
            };
        }
        let unit = if snap.large {
            self.inner.label.large_blocks()
        } else {
            1
        };
        let unit_bytes = unit * BLOCK;
        // Whole units inside the range: [a, b) in units (past the size only
        // reservations are there to end).
        let whole_end = if reserved { asked } else { end };
        let (a, b) = (offset.div_ceil(unit_bytes), whole_end / unit_bytes);
        let edges = if a < b {
            vec![(offset, a * unit_bytes), (b * unit_bytes, end)]
        } else {
            vec![(offset, end)]
        };
        for (x, y) in edges.into_iter().filter(|(x, y)| x < y) {
            let probe = Onode {
                extents: snap.extents.clone(),
                ..Onode::default()
            };
            if !probe.mapped(x / BLOCK, y.div_ceil(BLOCK)).is_empty() {
                self.write(pid, oid, x, &vec![0; (y - x) as usize])?;
            }
        }
        if a >= b {
            return Ok(());
        }
        let seq = {
            let _g = self.inner.stripe(pid, oid);
            let now = self.inner.snapshot(pid, oid)?;
            if now.inline.is_some() || now.large != snap.large {
                // Rewritten in another shape meanwhile: zeros, the slow way.
                drop(_g);
                let (x, y) = (a * unit_bytes, (b * unit_bytes).min(now.size));
                return if x < y {
                    self.write(pid, oid, x, &vec![0; (y - x) as usize])
                } else {
                    Ok(())
                };
            }
            let mut st = self.inner.lock_ok()?;
            commit::log(
                &self.inner,
                &mut st,
                &[Record::SetData {
                    pid,
                    oid,
                    first: a * unit,
                    end: b * unit,
                    extents: Vec::new(),
                    size: now.size,
                    mtime: now_ns(),
                    large: now.large,
                }],
            )?
        };
        commit::wait(&self.inner, self.inner.lock(), seq)
    }

    /// Reserves room for `[offset, offset + len)`: the blocks there that
    /// hold no data become reserved (counted as used; they read as zeros)
    /// without changing the size. With `create`, a missing object is
    /// created empty by the same commit. Refused with `NoSpace` when the
    /// store cannot hold it beside every other reservation. Durable when it
    /// returns.
    pub fn reserve(&self, pid: u64, oid: u64, offset: u64, len: u64, create: bool) -> Result<()> {
        super::objects::check_ids(pid, oid)?;
        let end = check_range(offset, len)?;
        if len == 0 {
            return Err(StoreError::invalid("length", "a reservation of 0 bytes"));
        }
        let inner = &self.inner;
        let seq = {
            let _g = inner.stripe(pid, oid);
            let mtime = now_ns();
            let mut recs = Vec::with_capacity(3);
            let snap = match inner.snapshot(pid, oid) {
                Ok(s) => s,
                Err(StoreError::NoObject { .. }) if create => {
                    recs.push(Record::CreateObject {
                        pid,
                        oid,
                        time: mtime,
                    });
                    super::data::Snapshot::empty()
                }
                Err(e) => return Err(e),
            };
            let unit = if snap.large {
                inner.label.large_blocks()
            } else {
                1
            };
            let a = offset / BLOCK / unit * unit;
            let b = end.div_ceil(BLOCK).next_multiple_of(unit);
            // Inline bytes move to block 0 first, in the same commit.
            let mut moved = Vec::new();
            let mut extents = snap.extents;
            if let Some(d) = &snap.inline {
                let (rec, m) = inner.move_inline(pid, oid, d, snap.size, mtime)?;
                moved = m.iter().map(|e| e.physical()).collect();
                recs.push(rec);
                extents = m;
            }
            let mut probe = Onode {
                extents,
                reserved: snap.reserved,
                ..Onode::default()
            };
            let added = probe.reserve(a, b);
            let mut st = match inner.lock_ok() {
                Ok(st) => st,
                Err(e) => {
                    inner.unallocate(moved);
                    return Err(e);
                }
            };
            let free = st.alloc.free_blocks();
            let keep = super::reserve_blocks(st.meta.approx_bytes + 64) + st.meta.reserved_blocks;
            if free < keep + added {
                drop(st);
                inner.unallocate(moved);
                return Err(StoreError::NoSpace {
                    needed: added * BLOCK,
                    free: free.saturating_sub(keep) * BLOCK,
                });
            }
            recs.push(Record::Reserve {
                pid,
                oid,
                first: a,
                end: b,
            });
            match commit::log(inner, &mut st, &recs) {
                Ok(seq) => seq,
                Err(e) => {
                    drop(st);
                    inner.unallocate(moved);
                    return Err(e);
                }
            }
        };
        commit::wait(inner, inner.lock(), seq)
    }

    /// The byte ranges `(offset, len)` of the object that hold data, in
    /// order, up to its size; everything else reads as zeros (a hole).
    pub fn data_ranges(&self, pid: u64, oid: u64) -> Result<Vec<(u64, u64)>> {
        super::objects::check_ids(pid, oid)?;
        let snap = self.inner.snapshot(pid, oid)?;
        if snap.inline.is_some() {
            return Ok(if snap.size > 0 {
                vec![(0, snap.size)]
            } else {
                Vec::new()
            });
        }
        let mut out: Vec<(u64, u64)> = Vec::new();
        for e in &snap.extents {
            let start = e.lblock * BLOCK;
            if start >= snap.size {
                break;
            }
            let stop = (e.lend() * BLOCK).min(snap.size);
            match out.last_mut() {
                Some((o, l)) if *o + *l == start => *l += stop - start,
                _ => out.push((start, stop - start)),
            }
        }
        Ok(out)
    }
}
