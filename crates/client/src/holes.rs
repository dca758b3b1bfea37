//! Holes in open files: `fallocate` (reserve, punch a hole, zero a range)
//! and SEEK_DATA / SEEK_HOLE, answered from where the OSDs hold data.
//!
//! A punch or zeroing goes to every fresh copy of each stripe object the
//! range touches (the OSD unmaps whole allocation units and writes zeros
//! at the edges); a copy that misses it is recorded stale as a missed write
//! is. A reservation (mode 0, KEEP_SIZE) goes to every fresh copy of each
//! stripe object the range touches, one RESERVE per object: the OSD keeps
//! the room for that range (an unwritten range in its store), so a later
//! write there does not run out of space.

use std::sync::Arc;

use bytes::Bytes;
use net::ConnError;
use proto::layout::DATA_PARTITION;
use proto::msg::{Command, Reply};
use proto::{ErrorCode, rights};

use crate::caps::{ensure_caps, mark_stale};
use crate::error::{Errno, FsError, Result};
use crate::file::{commit, targets, truncated};
use crate::open_file::{FileState, OpenInode};
use crate::state::Inner;
use crate::striped::{self, run_copy};

/// `fallocate` mode bits (Linux `FALLOC_FL_*`).
pub mod mode {
    /// Do not change the length.
    pub const KEEP_SIZE: i32 = 0x01;
    /// Deallocate the range (with KEEP_SIZE).
    pub const PUNCH_HOLE: i32 = 0x02;
    /// Remove the range, shifting what follows (not supported).
    pub const COLLAPSE_RANGE: i32 = 0x08;
    /// Make the range read as zeros.
    pub const ZERO_RANGE: i32 = 0x10;
    /// Insert a hole, shifting what follows (not supported).
    pub const INSERT_RANGE: i32 = 0x20;
}

fn inval(m: impl Into<String>) -> FsError {
    FsError::new(Errno::Inval, m)
}

/// Checks a `fallocate` request: what it does, in which range.
pub fn check(off: u64, len: u64, m: i32) -> Result<u64> {
    use mode::*;
    if m & (COLLAPSE_RANGE | INSERT_RANGE) != 0 {
        return Err(FsError::new(
            Errno::OpNotSupp,
            "fallocate: COLLAPSE_RANGE and INSERT_RANGE are not supported",
        ));
    }
    if m & !(KEEP_SIZE | PUNCH_HOLE | ZERO_RANGE) != 0 {
        return Err(FsError::new(
            Errno::OpNotSupp,
            format!("fallocate: mode {m:#x} is not supported"),
        ));
    }
    if m & PUNCH_HOLE != 0 && (m & KEEP_SIZE == 0 || m & ZERO_RANGE != 0) {
        return Err(FsError::new(
            Errno::OpNotSupp,
            "fallocate: PUNCH_HOLE goes with KEEP_SIZE alone",
        ));
    }
    if len == 0 {
        return Err(inval("fallocate: length 0"));
    }
    off.checked_add(len)
        .filter(|&e| e < (1u64 << 62))
        .ok_or_else(|| FsError::new(Errno::FBig, "fallocate past the largest file size"))
}

/// Makes `[off, off + len)` of open file `f` read as zeros (clipped to its
/// length), freeing whole allocation units on the OSDs.
pub async fn zero(inner: &Arc<Inner>, f: &OpenInode, off: u64, len: u64) -> Result<()> {
    let mut st = f.st.lock().await;
    commit(inner, f.ino, &mut st).await?;
    let end = off.saturating_add(len).min(st.size);
    if off >= end {
        return Ok(());
    }
    let ino = f.ino;
    for attempt in 0..3 {
        ensure_caps(inner, ino, &mut st, true, 0).await?;
        let Some(layout) = st.layout.clone() else {
            return Err(FsError::new(
                Errno::Io,
                format!("inode {ino} has no layout"),
            ));
        };
        // Object sets never made hold nothing to punch.
        let sets = layout.objsets.len() as u64;
        let runs: Vec<_> = striped::runs(&layout, off, end - off)
            .into_iter()
            .filter(|r| r.objset < sets)
            .collect();
        let Some(ts) = targets(inner, &layout, &st.grants, runs, rights::WRITE).await? else {
            st.grants.clear();
            continue;
        };
        let renew = on_every_copy(inner, ino, &mut st, ts, "punch", |oid, r| Command::Punch {
            pid: DATA_PARTITION,
            oid,
            offset: r.obj_offset,
            len: r.len,
        })
        .await?;
        if renew && attempt < 2 {
            st.grants.clear();
            continue;
        }
        // Cached bytes of the range are gone; the mtime moves.
        let size = st.size;
        truncated(f, &mut st, size);
        st.mark_modified();
        return commit(inner, ino, &mut st).await;
    }
    Err(FsError::new(
        Errno::Access,
        format!("no write capability for inode {ino}"),
    ))
}

/// Reserves room for `[off, off + len)` of open file `f` on every fresh
/// copy of each stripe object the range touches (creating the objects and
/// extending the layout as a write would). ENOSPC when an OSD cannot hold
/// it; a copy that fails otherwise is recorded stale.
pub async fn reserve(inner: &Arc<Inner>, f: &OpenInode, off: u64, len: u64) -> Result<()> {
    let mut st = f.st.lock().await;
    let ino = f.ino;
    for attempt in 0..3 {
        let last = match &st.layout {
            Some(l) => l.spec.objset_of(off + len - 1),
            None => 0,
        };
        ensure_caps(inner, ino, &mut st, true, last).await?;
        let Some(layout) = st.layout.clone() else {
            return Err(FsError::new(
                Errno::Io,
                format!("inode {ino} has no layout"),
            ));
        };
        // One request per object: the pieces of one object in a file
        // range are one contiguous range of the object.
        let mut per_object: std::collections::BTreeMap<(u64, u32), (u64, u64)> =
            std::collections::BTreeMap::new();
        for p in layout.spec.pieces(off, len) {
            let e = per_object
                .entry((p.objset, p.stripe))
                .or_insert((p.obj_offset, p.obj_offset));
            e.0 = e.0.min(p.obj_offset);
            e.1 = e.1.max(p.obj_offset + p.len);
        }
        let runs = per_object
            .into_iter()
            .map(|((objset, stripe), (a, b))| striped::Run {
                objset,
                stripe,
                obj_offset: a,
                buf_offset: 0,
                len: b - a,
            })
            .collect();
        let Some(ts) = targets(inner, &layout, &st.grants, runs, striped::WRITE_NEED).await? else {
            st.grants.clear();
            continue;
        };
        let renew = on_every_copy(inner, ino, &mut st, ts, "reservation", |oid, r| {
            Command::Reserve {
                pid: DATA_PARTITION,
                oid,
                offset: r.obj_offset,
                len: r.len,
            }
        })
        .await?;
        if renew && attempt < 2 {
            st.grants.clear();
            continue;
        }
        return Ok(());
    }
    Err(FsError::new(
        Errno::Access,
        format!("no write capability for inode {ino}"),
    ))
}

/// Runs `cmd` (built for each object and run) on every fresh copy of each
/// target, in order. A copy without the object counts as done (nothing to
/// change there); a full OSD fails the call with ENOSPC; a copy that fails
/// otherwise, while another took it, is recorded stale at the MDS (the
/// file's layout and grants follow); none taking it is EIO. Answers whether
/// a capability was refused (the caller renews and runs it again).
async fn on_every_copy(
    inner: &Arc<Inner>,
    ino: u64,
    st: &mut FileState,
    ts: Vec<(striped::Run, striped::Target)>,
    what: &str,
    cmd: impl Fn(u64, &striped::Run) -> Command,
) -> Result<bool> {
    for (r, t) in ts {
        let c0 = cmd(t.oid, &r);
        let mut missed = Vec::new();
        let mut exists = false;
        for c in &t.copies {
            match run_copy(c, c0.clone(), Bytes::new()).await {
                Ok(_) => exists = true,
                Err(ConnError::Remote(w)) if w.code == ErrorCode::NoObject => {}
                Err(ConnError::Remote(w)) if w.code == ErrorCode::NoSpace => {
                    return Err(FsError::new(
                        Errno::NoSpc,
                        format!(
                            "inode {ino:#x}: OSD {} has no room for the {what}: {w}",
                            c.osd
                        ),
                    ));
                }
                Err(e) if striped::cap_stale(&e) => return Ok(true),
                Err(e) => missed.push((c.osd, e)),
            }
        }
        if exists {
            st.existing.insert((r.objset, r.stripe));
        }
        if missed.len() == t.copies.len() {
            let (osd, e) = missed.swap_remove(0);
            return Err(FsError::new(
                Errno::Io,
                format!("inode {ino:#x}: the {what} failed on every copy (OSD {osd}: {e})"),
            ));
        }
        for (osd, e) in missed {
            tracing::warn!(ino, osd, error = %e, what, "a copy missed it; recording it stale");
            let found = mark_stale(inner, &st.creds, ino, r.objset, r.stripe, osd).await?;
            if let Some(l) = found.entry.layout {
                st.layout = Some(l);
                st.grants = found.grants;
            }
        }
    }
    Ok(false)
}

/// Grows open file `f` to at least `size` bytes (the new part a hole).
pub async fn grow(inner: &Arc<Inner>, f: &OpenInode, size: u64) -> Result<()> {
    let mut st = f.st.lock().await;
    if size > st.size {
        st.size = size;
        f.size.store(size, std::sync::atomic::Ordering::Relaxed);
        // A new length: lengths learnt for the old one no longer hold
        // (`crate::eof::length_now` keys them by generation).
        st.new_generation();
        st.mark_modified();
        commit(inner, f.ino, &mut st).await?;
    }
    Ok(())
}

/// Where open file `f` holds data: merged file ranges `(start, end)`,
/// within its length.
async fn data_ranges(inner: &Arc<Inner>, f: &OpenInode) -> Result<(Vec<(u64, u64)>, u64)> {
    let mut st = f.st.lock().await;
    commit(inner, f.ino, &mut st).await?;
    let size = st.size;
    let write = st.write_caps;
    ensure_caps(inner, f.ino, &mut st, write, 0).await?;
    let Some(layout) = st.layout.clone() else {
        return Ok((Vec::new(), size));
    };
    let spec = layout.spec;
    let mut out = Vec::new();
    for objset in 0..layout.objsets.len() as u64 {
        let runs: Vec<_> = (0..spec.stripe_count)
            .map(|stripe| striped::Run {
                objset,
                stripe,
                obj_offset: 0,
                buf_offset: 0,
                len: 1,
            })
            .collect();
        let ts = targets(inner, &layout, &st.grants, runs, rights::READ)
            .await?
            .ok_or_else(|| FsError::new(Errno::Access, "no read capability"))?;
        for (r, t) in ts {
            let cmd = Command::DataRanges {
                pid: DATA_PARTITION,
                oid: t.oid,
            };
            let mut answer = None;
            for c in &t.copies {
                match run_copy(c, cmd.clone(), Bytes::new()).await {
                    Ok(a) => {
                        answer = Some(a.reply);
                        break;
                    }
                    Err(ConnError::Remote(w)) if w.code == ErrorCode::NoObject => {
                        answer = Some(Reply::DataRanges(Vec::new()));
                        break;
                    }
                    Err(e) => tracing::debug!(osd = c.osd, error = %e, "data ranges: next copy"),
                }
            }
            let Some(Reply::DataRanges(ranges)) = answer else {
                return Err(FsError::new(
                    Errno::Io,
                    format!("no copy of object {:#x} answered where its data is", t.oid),
                ));
            };
            // Each object range, cut at stripe-unit boundaries, is a run of
            // the file.
            let su = u64::from(spec.stripe_unit);
            for (o, l) in ranges {
                let mut at = o;
                while at < o + l {
                    let n = (su - at % su).min(o + l - at);
                    let start = spec.file_offset(objset, r.stripe, at);
                    out.push((start, start + n));
                    at += n;
                }
            }
        }
    }
    out.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(out.len());
    for (a, b) in out {
        let b = b.min(size);
        if a >= b {
            continue;
        }
        match merged.last_mut() {
            Some((_, e)) if *e >= a => *e = (*e).max(b),
            _ => merged.push((a, b)),
        }
    }
    Ok((merged, size))
}

/// SEEK_DATA (`data`) or SEEK_HOLE from `off`: the next offset at or after
/// `off` that holds data, or that is in a hole (the end of the file counts
/// as one). ENXIO at or past the end, or when no data follows.
pub async fn seek(inner: &Arc<Inner>, f: &OpenInode, off: u64, data: bool) -> Result<u64> {
    let (ranges, size) = data_ranges(inner, f).await?;
    let nxio = || FsError::new(Errno::NxIo, format!("offset {off} is at or past the end"));
    if off >= size {
        return Err(nxio());
    }
    if data {
        return ranges
            .iter()
            .find(|&&(_, e)| e > off)
            .map(|&(s, _)| s.max(off))
            .ok_or_else(nxio);
    }
    Ok(ranges
        .iter()
        .find(|&&(s, e)| s <= off && off < e)
        .map_or(off, |&(_, e)| e))
}
