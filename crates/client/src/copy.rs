//! `copy_file_range`: bytes copied between two open files without passing
//! through the kernel's page cache, and — where a piece's source and
//! destination objects have their copies on the same OSDs — without
//! leaving those OSDs (COPY, each OSD reading its own copy of the source).
//!
//! A piece is a byte range inside one source object and one destination
//! object. It is copied on the OSDs when every fresh copy of the
//! destination object sits on an OSD that also holds a fresh copy of the
//! source object; otherwise (or when an OSD cannot: the source object is
//! missing there, an older OSD) this client reads it and writes it, as
//! `read` and `write` would. A destination copy that misses a COPY is
//! recorded stale, as one that misses a write is.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use net::ConnError;
use proto::layout::{DATA_PARTITION, Layout};
use proto::msg::{Command, MAX_COPY};
use proto::rights;

use crate::caps::{ensure_caps, mark_stale};
use crate::error::{Errno, FsError, Result};
use crate::file::{self, commit, targets};
use crate::open_file::OpenInode;
use crate::state::Inner;
use crate::stats::Counters;
use crate::striped::{Run, Target, WRITE_NEED, run_copy};

/// Most bytes one call copies (the caller asks again for the rest, as
/// `copy_file_range` allows).
pub const MAX_CALL: u64 = 64 << 20;

/// Pieces copied on the OSDs at once.
const PARALLEL: usize = 8;

/// A stripe object of a file: (object set, stripe).
type ObjectKey = (u64, u32);

/// A byte range of the copy inside one source object and one destination
/// object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Piece {
    /// Offset from the start of the copy.
    at: u64,
    len: u64,
    src: (u64, u32, u64),
    dst: (u64, u32, u64),
}

/// Cuts the copy of `len` bytes from `off_in` (layout `s`) to `off_out`
/// (layout `d`) into pieces that each stay inside one object of either
/// file, merging neighbours that continue each other in both objects (up
/// to [`MAX_COPY`] bytes).
fn pieces(s: &Layout, off_in: u64, d: &Layout, off_out: u64, len: u64) -> Vec<Piece> {
    let (sp, dp) = (s.spec.pieces(off_in, len), d.spec.pieces(off_out, len));
    let (mut i, mut j, mut at) = (0, 0, 0u64);
    let mut by_pair: BTreeMap<(ObjectKey, ObjectKey), Vec<Piece>> = BTreeMap::new();
    while i < sp.len() && j < dp.len() {
        let (a, b) = (&sp[i], &dp[j]);
        let (ua, ub) = (
            at - (a.file_offset - off_in),
            at - (b.file_offset - off_out),
        );
        let n = (a.len - ua).min(b.len - ub);
        let p = Piece {
            at,
            len: n,
            src: (a.objset, a.stripe, a.obj_offset + ua),
            dst: (b.objset, b.stripe, b.obj_offset + ub),
        };
        let v = by_pair
            .entry(((a.objset, a.stripe), (b.objset, b.stripe)))
            .or_default();
        match v.last_mut() {
            Some(l)
                if l.src.2 + l.len == p.src.2
                    && l.dst.2 + l.len == p.dst.2
                    && l.at + l.len == p.at
                    && l.len + p.len <= u64::from(MAX_COPY) =>
            {
                l.len += p.len
            }
            _ => v.push(p),
        }
        at += n;
        if ua + n == a.len {
            i += 1;
        }
        if ub + n == b.len {
            j += 1;
        }
    }
    let mut out: Vec<Piece> = by_pair.into_values().flatten().collect();
    out.sort_by_key(|p| p.at);
    out
}

fn run_of((objset, stripe, obj_offset): (u64, u32, u64), len: u64) -> Run {
    Run {
        objset,
        stripe,
        obj_offset,
        buf_offset: 0,
        len,
    }
}

/// What copying the pieces on the OSDs left to this client: the pieces
/// it must copy itself.
async fn on_osds(
    inner: &Arc<Inner>,
    dst: &OpenInode,
    src: (&Layout, &[proto::mds::Grant]),
    all: Vec<Piece>,
    off_out: u64,
) -> Result<Vec<Piece>> {
    let (slayout, sgrants) = src;
    let sets = slayout.objsets.len() as u64;
    let mut st = dst.st.lock().await;
    // The destination's buffered bytes go out first: a COPY must not be
    // overwritten later by older bytes written behind it.
    commit(inner, dst.ino, &mut st).await?;
    let last = all.iter().map(|p| p.dst.0).max().unwrap_or(0);
    ensure_caps(inner, dst.ino, &mut st, true, last).await?;
    let Some(dlayout) = st.layout.clone() else {
        return Ok(all);
    };
    // Source objects never made are holes: this client writes their zeros.
    let (with_src, mut left): (Vec<Piece>, Vec<Piece>) =
        all.into_iter().partition(|p| p.src.0 < sets);
    let sruns = with_src.iter().map(|p| run_of(p.src, p.len)).collect();
    let druns = with_src.iter().map(|p| run_of(p.dst, p.len)).collect();
    let (Some(sts), Some(dts)) = (
        targets(inner, slayout, sgrants, sruns, rights::READ).await?,
        targets(inner, &dlayout, &st.grants, druns, WRITE_NEED).await?,
    ) else {
        // A capability is missing: the client path renews it.
        left.extend(with_src);
        return Ok(left);
    };
    let mut copied = 0u64;
    let mut end = 0u64;
    // Up to PARALLEL pieces at once, answers taken in order.
    let mut set = tokio::task::JoinSet::new();
    let mut jobs = with_src.into_iter().zip(sts).zip(dts).enumerate();
    let mut results = Vec::new();
    loop {
        while set.len() < PARALLEL {
            let Some((i, ((p, (_, s)), (dr, d)))) = jobs.next() else {
                break;
            };
            set.spawn(async move { (i, p, dr, copy_piece(&p, &s, &d).await) });
        }
        match set.join_next().await {
            Some(Ok(r)) => results.push(r),
            Some(Err(e)) => return Err(FsError::new(Errno::Io, format!("copy task: {e}"))),
            None => break,
        }
    }
    results.sort_by_key(|r| r.0);
    for (_, p, dr, outcome) in results {
        match outcome {
            Some(missed) => {
                for (osd, e) in missed {
                    tracing::warn!(ino = dst.ino, osd, error = %e, "a copy missed a COPY; recording it stale");
                    let found =
                        mark_stale(inner, &st.creds, dst.ino, dr.objset, dr.stripe, osd).await?;
                    if let Some(l) = found.entry.layout {
                        st.layout = Some(l);
                        st.grants = found.grants;
                    }
                }
                st.existing.insert((dr.objset, dr.stripe));
                copied += p.len;
                end = end.max(off_out + p.at + p.len);
            }
            None => left.push(p),
        }
    }
    if copied > 0 {
        Counters::add(&inner.meta.counters.bytes_copied_on_osds, copied);
        // Cached bytes of the destination may be older than the copy.
        let size = st.size.max(end);
        file::truncated(dst, &mut st, size);
        dst.size.store(size, Ordering::Relaxed);
        st.mark_modified();
        commit(inner, dst.ino, &mut st).await?;
    }
    Ok(left)
}

/// Copies piece `p` on the OSDs when every destination copy's OSD holds a
/// source copy: `Some(copies that missed it)` when at least one took it
/// (the caller records the others stale), `None` when this client must copy
/// it instead (nothing was acknowledged that it would contradict).
async fn copy_piece(p: &Piece, s: &Target, d: &Target) -> Option<Vec<(u32, ConnError)>> {
    let pairs: Vec<_> = d
        .copies
        .iter()
        .map(|c| (c, s.copies.iter().find(|x| x.osd == c.osd)))
        .collect();
    if pairs.iter().any(|(_, x)| x.is_none()) {
        return None;
    }
    let mut done = 0;
    let mut missed = Vec::new();
    for (c, sc) in pairs {
        let sc = sc?;
        let cmd = Command::Copy {
            pid: DATA_PARTITION,
            oid: d.oid,
            offset: p.dst.2,
            src_oid: s.oid,
            src_offset: p.src.2,
            len: p.len as u32,
            src_cap: Some(Box::new(sc.cap.clone())),
        };
        match run_copy(c, cmd, Bytes::new()).await {
            Ok(_) => done += 1,
            Err(e) => missed.push((c.osd, e)),
        }
    }
    // Fewer than the quorum (or none) took it: this client writes it, and
    // the write path deals with the copies that fail.
    (done >= d.quorum.max(1)).then_some(missed)
}

/// Copies up to `len` bytes (at most [`MAX_CALL`]) from `src` at `off_in`
/// to `dst` at `off_out`; answers how many (0 at or past the source's
/// end). The ranges may not overlap within one file (EINVAL).
pub async fn copy_range(
    inner: &Arc<Inner>,
    src: &OpenInode,
    off_in: u64,
    dst: &OpenInode,
    off_out: u64,
    len: u64,
) -> Result<u64> {
    let len = len.min(MAX_CALL);
    if src.ino == dst.ino && off_in < off_out.saturating_add(len) && off_out < off_in + len {
        return Err(FsError::new(
            Errno::Inval,
            "copy_file_range: the ranges overlap within one file",
        ));
    }
    // The source's bytes on the OSDs, its length, layout and capabilities.
    let (slayout, sgrants, size) = {
        let mut st = src.st.lock().await;
        commit(inner, src.ino, &mut st).await?;
        // Another client may have rewritten the file since this one had
        // its length (an open within the cache window): copied to the old
        // length, a shrunk file came out padded with zeros (`cp` of a file
        // cut from 4 MiB to 512 KiB elsewhere made 4 MiB). Nothing is
        // buffered here now, so the namespace's length is the file's.
        file::take_namespace_length(inner, src, &mut st, "a copy").await?;
        let write = st.write_caps;
        ensure_caps(inner, src.ino, &mut st, write, 0).await?;
        (st.layout.clone(), st.grants.clone(), st.size)
    };
    if off_in >= size {
        return Ok(0);
    }
    let len = len.min(size - off_in);
    off_out
        .checked_add(len)
        .filter(|&e| e < (1u64 << 62))
        .ok_or_else(|| FsError::new(Errno::FBig, "copy past the largest file size"))?;
    let dlayout = {
        let mut st = dst.st.lock().await;
        let write = st.write_caps;
        ensure_caps(inner, dst.ino, &mut st, write, 0).await?;
        st.layout.clone()
    };
    let left = match (&slayout, &dlayout) {
        (Some(s), Some(d)) => {
            let all = pieces(s, off_in, d, off_out, len);
            on_osds(inner, dst, (s, &sgrants), all, off_out).await?
        }
        _ => vec![Piece {
            at: 0,
            len,
            src: (0, 0, 0),
            dst: (0, 0, 0),
        }],
    };
    // The rest through this client, a stripe-sized chunk at a time.
    for p in left {
        let mut at = p.at;
        while at < p.at + p.len {
            let n = (p.at + p.len - at).min(4 << 20);
            let data = crate::reads::read(inner, src, off_in + at, n as u32).await?;
            let mut data = data.to_vec();
            data.resize(n as usize, 0);
            file::write(inner, dst, off_out + at, &data).await?;
            at += n;
        }
    }
    Ok(len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::layout::LayoutSpec;

    fn layout(stripe_unit: u32, stripe_count: u32, object_size: u64) -> Layout {
        Layout {
            spec: LayoutSpec {
                stripe_unit,
                stripe_count,
                object_size,
                ..LayoutSpec::default()
            },
            map_epoch: 1,
            objsets: Vec::new(),
            homes: Vec::new(),
        }
    }

    #[test]
    fn pieces_tile_the_copy_and_stay_inside_objects() {
        let cases = [
            (layout(65536, 1, 1 << 20), 0, layout(65536, 1, 1 << 20), 0),
            (
                layout(65536, 4, 1 << 20),
                1000,
                layout(131072, 2, 1 << 21),
                77,
            ),
            (layout(4096, 3, 0), 5, layout(65536, 1, 262144), 70000),
        ];
        for (s, off_in, d, off_out) in cases {
            let len = 3_000_000;
            let ps = pieces(&s, off_in, &d, off_out, len);
            // The pieces tile [0, len) once.
            let mut at = 0;
            for p in &ps {
                assert_eq!(p.at, at, "{ps:?}");
                at += p.len;
                // Each piece is where both layouts put it.
                let a = s.spec.locate(off_in + p.at, 1);
                let b = d.spec.locate(off_out + p.at, 1);
                assert_eq!((a.objset, a.stripe, a.obj_offset), p.src);
                assert_eq!((b.objset, b.stripe, b.obj_offset), p.dst);
                let a2 = s.spec.locate(off_in + p.at + p.len - 1, 1);
                let b2 = d.spec.locate(off_out + p.at + p.len - 1, 1);
                assert_eq!((a2.objset, a2.stripe), (p.src.0, p.src.1));
                assert_eq!((b2.objset, b2.stripe), (p.dst.0, p.dst.1));
                assert_eq!(
                    a2.obj_offset,
                    p.src.2 + p.len - 1,
                    "contiguous in the source"
                );
                assert_eq!(
                    b2.obj_offset,
                    p.dst.2 + p.len - 1,
                    "contiguous in the destination"
                );
                assert!(p.len <= u64::from(MAX_COPY));
            }
            assert_eq!(at, len);
        }
        // Same unstriped layout, same offsets: one piece per object.
        let l = layout(65536, 1, 1 << 20);
        assert_eq!(pieces(&l, 0, &l, 0, 3 << 20).len(), 3);
    }
}
