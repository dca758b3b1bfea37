//! Holes: punching a byte range out of an object (the whole allocation
//! units inside it are unmapped and their blocks freed; the parts of units
//! at its edges that hold data are overwritten with zeros), and the byte
//! ranges an object holds data in (what SEEK_DATA and SEEK_HOLE answer).

use super::data::check_range;
use super::{Store, commit, now_ns};
use crate::device::BLOCK;
use crate::error::Result;
use crate::journal::record::Record;
use crate::onode::Onode;

impl Store {
    /// Makes `[offset, offset + len)` read as zeros without changing the
    /// object's size (nothing happens past its end). Whole allocation
    /// units inside the range are unmapped (their blocks freed); partial
    /// units at the edges that hold data get zeros written. Durable when it
    /// returns.
    pub fn punch(&self, pid: u64, oid: u64, offset: u64, len: u64) -> Result<()> {
        super::objects::check_ids(pid, oid)?;
        check_range(offset, len)?;
        let snap = self.inner.snapshot(pid, oid)?;
        let end = (offset + len).min(snap.size);
        if offset >= end {
            return Ok(());
        }
        if snap.inline.is_some() {
            return self.write(pid, oid, offset, &vec![0; (end - offset) as usize]);
        }
        let unit = if snap.large {
            self.inner.label.large_blocks()
        } else {
            1
        };
        let unit_bytes = unit * BLOCK;
        // Whole units inside the range: [a, b) in units.
        let (a, b) = (offset.div_ceil(unit_bytes), end / unit_bytes);
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
