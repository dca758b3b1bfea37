//! Open files: one [`OpenInode`] per inode open in this client, shared by
//! every handle on it, so all handles of one client see each other's
//! writes at once. It holds the layout and capabilities, a bounded
//! write-back buffer of dirty extents (written out in stripe-sized chunks
//! behind the writer, on fsync, close, memory pressure and a timer), and a
//! read-ahead window that grows on sequential reads.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use proto::layout::Layout;
use proto::mds::{Creds, Grant};
use proto::rights;

use crate::caps::{ensure_caps, mark_stale, renew};
use crate::error::{Errno, FsError, Result};
use crate::open_file::{FileState, Flight, OpenInode};
use crate::state::Inner;
use crate::stats::Counters;
use crate::striped::{
    self, PieceError, Replica, Run, Target, WRITE_NEED, cap_stale, piece_error, transport,
};
use proto::clock::now_ns;

/// Write-behind requests in flight per file before a writer waits.
const MAX_INFLIGHT: usize = 4;

/// Resolves runs to OSD targets (every fresh copy) with `want` rights;
/// `None` when a capability is missing (the caller renews and tries again).
pub(crate) async fn targets(
    inner: &Inner,
    layout: &Layout,
    grants: &[Grant],
    runs: Vec<Run>,
    want: u32,
) -> Result<Option<Vec<(Run, Target)>>> {
    let mut out = Vec::with_capacity(runs.len());
    let mut placed: Option<(u64, u64, Vec<Vec<u32>>)> = None;
    for r in runs {
        let (oid, stripes) = match &placed {
            Some((set, oid, s)) if *set == r.objset => (*oid, s.clone()),
            _ => {
                let (oid, s) = inner.osds.place(&inner.mds, layout, r.objset).await?;
                placed = Some((r.objset, oid, s.clone()));
                (oid, s)
            }
        };
        let fresh = stripes.get(r.stripe as usize).cloned().unwrap_or_default();
        if fresh.is_empty() {
            return Err(FsError::new(
                Errno::Io,
                format!("object {oid:#x} stripe {} has no fresh copy", r.stripe),
            ));
        }
        let mut copies = Vec::with_capacity(fresh.len());
        for osd in fresh {
            let Some(cap) = striped::cap_for(grants, osd, oid, want) else {
                return Ok(None);
            };
            let client = inner.osds.client(&inner.mds, osd).await?;
            let reroute = inner.osds.grouped().then(|| reroute(inner, osd));
            copies.push(Replica {
                osd,
                client,
                cap,
                reroute,
            });
        }
        // The quorum counts against the copies placed (fresh and stale),
        // not only the fresh ones left: a stripe whose other copies went
        // stale cannot take writes on fewer than `min_replicas` copies.
        let placed = layout
            .homes
            .get(r.objset as usize)
            .and_then(|h| h.stripes.get(r.stripe as usize))
            .map_or(copies.len(), |c| c.fresh.len() + c.stale.len());
        let quorum = layout.spec.min_copies().min(placed);
        out.push((
            r,
            Target {
                oid,
                copies,
                quorum,
            },
        ));
    }
    Ok(Some(out))
}

/// Finds group `g`'s head again (credentials fetched anew, at most every
/// 200 ms by the namespace client's own limit on retries).
fn reroute(inner: &Inner, g: u32) -> striped::Reroute {
    let osds = inner.osds.clone();
    Arc::new(move || {
        let osds = osds.clone();
        Box::pin(async move { osds.group_route(g, true).await.ok() })
    })
}

/// What a write-behind request needs to know about its file.
struct WriteJob {
    ino: u64,
    creds: Creds,
    layout: Layout,
    grants: Vec<Grant>,
    existing: HashSet<(u64, u32)>,
}

/// A finished write-behind request.
#[derive(Debug)]
pub struct WriteDone {
    /// The objects written (object set, stripe).
    pub done: Vec<(u64, u32)>,
    /// The layout and capabilities the file must use from now on, when
    /// they changed (a copy was recorded stale, or they were renewed).
    pub changed: Option<(Layout, Vec<Grant>)>,
    /// The error the write ends with even so (fewer copies than the
    /// quorum took it).
    pub failed: Option<FsError>,
}

/// Writes one extent to every fresh copy (renewing layout and
/// capabilities once if an OSD refuses them, and retrying once if an OSD
/// moved). Copies that missed the write while enough others have it are
/// recorded stale at the MDS before this returns.
async fn write_extent(
    inner: Arc<Inner>,
    job: WriteJob,
    off: u64,
    data: Bytes,
) -> Result<WriteDone> {
    let WriteJob {
        ino,
        creds,
        mut layout,
        mut grants,
        existing,
    } = job;
    let len = data.len() as u64;
    let mut renewed = false;
    let res = async {
        for attempt in 0..3 {
            let rs = striped::runs(&layout, off, len);
            let Some(ts) = targets(&inner, &layout, &grants, rs, WRITE_NEED).await? else {
                if attempt < 2 {
                    (layout, grants) = renew(&inner, ino, &creds, true, &layout).await?;
                    renewed = true;
                    continue;
                }
                return Err(FsError::new(
                    Errno::Access,
                    format!("no write capability for inode {ino}"),
                ));
            };
            let ts = ts
                .into_iter()
                .map(|(r, t)| {
                    let known = existing.contains(&(r.objset, r.stripe));
                    (r, t, known)
                })
                .collect();
            let written = match striped::write(ts, data.clone()).await {
                (w, None) => Ok(w),
                (w, Some(e)) => {
                    // Part of the write reached no copy: it fails, but the
                    // copies other parts missed are recorded stale first.
                    if !cap_stale(&e.error) {
                        for m in &w.missed {
                            let (set, stripe, osd) = (&m.objset, &m.stripe, &m.osd);
                            let f = mark_stale(&inner, &creds, ino, *set, *stripe, *osd).await?;
                            if let Some(l) = f.entry.layout {
                                layout = l;
                                grants = f.grants;
                            }
                        }
                    }
                    Err(e)
                }
            };
            match written {
                Ok(w) if w.missed.is_empty() && w.short.is_empty() => {
                    Counters::add(&inner.meta.counters.bytes_written, len);
                    return Ok(WriteDone {
                        done: w.done,
                        changed: renewed.then(|| (layout.clone(), grants.clone())),
                        failed: None,
                    });
                }
                Ok(w) => {
                    // An OSD that restarted elsewhere gets the write again.
                    let mut moved = false;
                    if attempt == 0 {
                        for m in &w.missed {
                            let (osd, e) = (&m.osd, &m.error);
                            if transport(e) && inner.osds.moved(&inner.mds, *osd).await {
                                moved = true;
                            }
                        }
                    }
                    if moved {
                        continue;
                    }
                    Counters::add(&inner.meta.counters.osd_errors, w.missed.len() as u64);
                    for m in &w.missed {
                        let (set, stripe, osd, e) = (&m.objset, &m.stripe, &m.osd, &m.error);
                        tracing::warn!(ino, osd, error = %e, "a copy missed a write; recording it stale");
                        let f = mark_stale(&inner, &creds, ino, *set, *stripe, *osd).await?;
                        if let Some(l) = f.entry.layout {
                            layout = l;
                            grants = f.grants;
                        }
                    }
                    // Short only because copies were refused for want of
                    // room: ENOSPC, as on a local disk; any other cause
                    // of a short object keeps it EIO.
                    let full = w.short.len() == w.short_for_room.len();
                    let short = (!w.short.is_empty()).then(|| {
                        FsError::new(
                            if full { Errno::NoSpc } else { Errno::Io },
                            format!(
                                "inode {ino:#x}: fewer than {} copies could be written{}; \
                                 the copies that missed the write are recorded stale",
                                layout.spec.min_copies(),
                                if full { " (an OSD is full)" } else { "" }
                            ),
                        )
                    });
                    if short.is_none() {
                        Counters::add(&inner.meta.counters.bytes_written, len);
                    }
                    return Ok(WriteDone {
                        done: w.done,
                        changed: Some((layout.clone(), grants.clone())),
                        failed: short,
                    });
                }
                Err(e) if attempt < 2 && cap_stale(&e.error) => {
                    (layout, grants) = renew(&inner, ino, &creds, true, &layout).await?;
                    renewed = true;
                }
                Err(PieceError {
                    osd: Some(osd),
                    error,
                }) if attempt == 0
                    && transport(&error)
                    && inner.osds.moved(&inner.mds, osd).await => {}
                Err(e) => {
                    Counters::add(&inner.meta.counters.osd_errors, 1);
                    return Err(piece_error(e));
                }
            }
        }
        Err(FsError::new(
            Errno::Io,
            "write failed after renewing capabilities",
        ))
    }
    .await;
    inner.dirty_total.fetch_sub(len, Ordering::Relaxed);
    res
}

/// Collects finished write-behind requests; waits for them all (`all`), or
/// for those overlapping `[lo, hi)`, or until fewer than the limit remain.
async fn reap(st: &mut FileState, all: bool, range: Option<(u64, u64)>) {
    let mut keep = VecDeque::new();
    let flights: Vec<Flight> = st.inflight.drain(..).collect();
    let n = flights.len();
    for (i, (lo, hi, h)) in flights.into_iter().enumerate() {
        let overlaps = range.is_some_and(|(a, b)| lo < b && hi > a);
        let over_limit = n - i >= MAX_INFLIGHT;
        if all || overlaps || over_limit || h.is_finished() {
            match h.await {
                Ok(Ok(WriteDone {
                    done,
                    changed,
                    failed,
                })) => {
                    st.existing.extend(done);
                    if let Some((l, g)) = changed {
                        st.layout = Some(l);
                        st.grants = g;
                    }
                    if let Some(e) = failed {
                        st.error.get_or_insert(e);
                        st.lost = true;
                    }
                }
                Ok(Err(e)) => {
                    st.error.get_or_insert(e);
                    st.lost = true;
                }
                Err(e) => {
                    st.error
                        .get_or_insert(FsError::new(Errno::Io, e.to_string()));
                    st.lost = true;
                }
            }
        } else {
            keep.push_back((lo, hi, h));
        }
    }
    st.inflight = keep;
}

/// Starts writing out every dirty extent (write-behind).
pub async fn start_flush(inner: &Arc<Inner>, ino: u64, st: &mut FileState) -> Result<()> {
    if st.dirty.is_empty() {
        return Ok(());
    }
    let last = st
        .dirty
        .iter()
        .next_back()
        .map(|(&a, v)| a + v.len() as u64 - 1)
        .unwrap_or(0);
    let top = st.layout.as_ref().map_or(0, |l| l.spec.objset_of(last));
    ensure_caps(inner, ino, st, true, top).await?;
    let Some(layout) = st.layout.clone() else {
        return Err(FsError::new(
            Errno::Io,
            format!("inode {ino} has no layout"),
        ));
    };
    let extents: Vec<(u64, Vec<u8>)> = std::mem::take(&mut st.dirty).into_iter().collect();
    st.dirty_bytes = 0;
    st.dirty_since = None;
    for (off, v) in extents {
        // Split big extents so write-behind overlaps writing with buffering.
        let chunk = inner.cfg.flush_chunk.max(4096) as usize;
        let data = Bytes::from(v);
        let mut at = 0usize;
        while at < data.len() {
            let n = chunk.min(data.len() - at);
            let part = data.slice(at..at + n);
            let lo = off + at as u64;
            let hi = lo + n as u64;
            reap(st, false, Some((lo, hi))).await;
            let job = WriteJob {
                ino,
                creds: st.creds.clone(),
                layout: layout.clone(),
                grants: st.grants.clone(),
                existing: st.existing.clone(),
            };
            let task = write_extent(inner.clone(), job, lo, part);
            st.inflight.push_back((lo, hi, tokio::spawn(task)));
            at += n;
        }
    }
    Ok(())
}

/// What the write-back timer does: writes out everything and waits for
/// it, leaving a write-behind failure (data that left the buffer and was
/// not written) with the file for its next fsync or close to report; a
/// failure before any data left the buffer (capabilities, a layout) is
/// only returned, the data still buffered.
pub async fn flush_in_background(inner: &Arc<Inner>, ino: u64, st: &mut FileState) -> Result<()> {
    let r = start_flush(inner, ino, st).await;
    reap(st, true, None).await;
    r?;
    match &st.error {
        Some(e) => Err(e.clone()),
        None => Ok(()),
    }
}

/// Writes out everything and waits for it; reports any write-behind failure.
pub async fn flush_all(inner: &Arc<Inner>, ino: u64, st: &mut FileState) -> Result<()> {
    let r = start_flush(inner, ino, st).await;
    reap(st, true, None).await;
    r?;
    st.take_error()
}

/// [`flush_all`], then tells the MDS the new length and modification time.
pub async fn commit(inner: &Arc<Inner>, ino: u64, st: &mut FileState) -> Result<()> {
    flush_all(inner, ino, st).await?;
    if st.modified {
        // Times set since the last write stay (`i64::MIN` never wins the
        // namespace's "later of the two").
        let mtime = match (st.times_set, st.written_at) {
            (true, _) => i64::MIN,
            // The last write's time, not the commit's (a close under a
            // lease commits up to a second later).
            (false, at) if at > 0 => at,
            (false, _) => now_ns(),
        };
        let (creds, size) = (&st.creds, st.size);
        let a = inner
            .as_writer(ino, || inner.ns.commit_size(creds, ino, size, mtime))
            .await?;
        st.modified = false;
        st.written_at = 0;
        // The namespace's length is now this client's: a read that asked
        // for it before this commit must not take its older answer as a
        // shrink by another client (it checks the generation).
        st.new_generation();
        inner.leases.committed(&a);
        inner
            .meta
            .cache_committed(a, st.layout.clone(), st.grants.clone());
    }
    Ok(())
}

/// Before an `O_APPEND` write to `f` with nothing buffered or uncommitted
/// here: the length from the namespace, as NFS revalidates it. Another
/// mount may have truncated or appended since this descriptor learnt the
/// length; appended at the old end, a file truncated elsewhere got zeros
/// between its new end and the append (20 of 20 runs). A file made under
/// a lease this client holds needs no question (nobody else can name it).
pub async fn refresh_append_end(inner: &Arc<Inner>, f: &OpenInode) -> Result<()> {
    if inner.leases.made_under_lease(f.ino) {
        return Ok(());
    }
    let mut st = f.st.lock().await;
    if st.busy() || st.modified {
        return Ok(());
    }
    take_namespace_length(inner, f, &mut st, "an append").await
}

/// With `f`'s state `st` held and nothing of it buffered or uncommitted
/// here: takes the namespace's length of the file (another client may
/// have changed it since this one learnt it). ESTALE if the file was
/// removed; with the namespace away, the length known here stands
/// (logged for `what`).
pub async fn take_namespace_length(
    inner: &Arc<Inner>,
    f: &OpenInode,
    st: &mut FileState,
    what: &str,
) -> Result<()> {
    let asked = inner.meta.commits.ask();
    let mut a = match inner.ns.getattr(&st.creds, f.ino).await {
        Ok(a) => a,
        Err(e) if crate::gone::removed(&e) => {
            return Err(crate::gone::stale(&inner.meta, f.ino, &e));
        }
        Err(e) => {
            tracing::debug!(ino = f.ino, error = %e, what, "could not ask for the length");
            return Ok(());
        }
    };
    if a.size != st.size {
        truncated(f, st, a.size);
    }
    inner.meta.cache_attr(&mut a, asked.since());
    Ok(())
}

/// Buffers a write; writes out when the buffer reaches a chunk or the
/// client is over its memory limit.
pub async fn write(inner: &Arc<Inner>, f: &OpenInode, off: u64, data: &[u8]) -> Result<u32> {
    write_at(inner, f, Some(off), data).await.map(|(n, _)| n)
}

/// [`write`] at `off`, or at the end of the file as this client knows it
/// (`None`: an `O_APPEND` write). Answers the bytes written and where.
pub async fn write_at(
    inner: &Arc<Inner>,
    f: &OpenInode,
    off: Option<u64>,
    data: &[u8],
) -> Result<(u32, u64)> {
    let mut st = f.st.lock().await;
    let off = off.unwrap_or(st.size);
    st.take_error()?;
    if !st.write_caps {
        return Err(FsError::new(Errno::BadF, "file not open for writing"));
    }
    let end = off
        .checked_add(data.len() as u64)
        .filter(|&e| e < (1u64 << 62))
        .ok_or_else(|| FsError::new(Errno::FBig, "write past the largest file size"))?;
    reap(&mut st, false, Some((off, end))).await;
    let delta = st.add_dirty(off, data);
    if delta >= 0 {
        inner.dirty_total.fetch_add(delta as u64, Ordering::Relaxed);
    } else {
        inner
            .dirty_total
            .fetch_sub((-delta) as u64, Ordering::Relaxed);
    }
    st.size = st.size.max(end);
    f.size.store(st.size, Ordering::Relaxed);
    st.mark_modified();
    st.written_at = now_ns();
    f.written_ns.store(st.written_at, Ordering::Relaxed);
    st.new_generation();
    st.ra = None;
    st.pending = None;
    st.dirty_since.get_or_insert_with(Instant::now);
    let pressure = inner.dirty_total.load(Ordering::Relaxed) > inner.cfg.writeback_limit;
    if st.dirty_bytes >= inner.cfg.flush_chunk || pressure {
        start_flush(inner, f.ino, &mut st).await?;
        if pressure {
            reap(&mut st, true, None).await;
            st.take_error()?;
        }
    }
    Ok((data.len() as u32, off))
}

/// Reads `[off, off + len)` from the stripe objects, each run from the
/// first fresh copy that answers (renewing layout and capabilities once if
/// an OSD refuses them). Copies that failed their checksums while another
/// copy answered are reported to the MDS, which repairs them.
pub async fn read_range(
    inner: &Arc<Inner>,
    ino: u64,
    creds: &Creds,
    layout: &Layout,
    grants: Vec<Grant>,
    off: u64,
    len: u64,
) -> Result<Bytes> {
    let r = read_range_to((inner, ino, creds), layout, grants, off, len).await;
    r.map(|(data, _)| data)
}

/// [`read_range`], also saying how far into the range the objects' bytes
/// reached.
pub async fn read_range_to(
    (inner, ino, creds): (&Arc<Inner>, u64, &Creds),
    layout: &Layout,
    mut grants: Vec<Grant>,
    off: u64,
    len: u64,
) -> Result<(Bytes, u64)> {
    let mut layout = layout.clone();
    for attempt in 0..2 {
        let rs = striped::runs(&layout, off, len);
        // Object sets not allocated yet are holes.
        let have = layout.objsets.len() as u64;
        let rs: Vec<Run> = rs.into_iter().filter(|r| r.objset < have).collect();
        let Some(ts) = targets(inner, &layout, &grants, rs, rights::READ).await? else {
            if attempt == 0 {
                (layout, grants) = renew(inner, ino, creds, false, &layout).await?;
                continue;
            }
            return Err(FsError::new(
                Errno::Access,
                format!("no read capability for inode {ino}"),
            ));
        };
        match striped::read(ts, len).await {
            Ok(striped::Read {
                data: b,
                bad,
                absent,
                end,
            }) => {
                if absent {
                    let parts = (&*inner.ns, &*inner.meta, &inner.present);
                    crate::gone::check(parts, creds, ino).await?;
                }
                Counters::add(&inner.meta.counters.bytes_read, len);
                if !bad.is_empty() {
                    let (inner, creds) = (inner.clone(), creds.clone());
                    tokio::spawn(async move {
                        for (set, stripe, osd) in bad {
                            tracing::warn!(ino, osd, "a copy failed its checksums; reporting it");
                            let _ = mark_stale(&inner, &creds, ino, set, stripe, osd).await;
                        }
                    });
                }
                return Ok((b, end));
            }
            Err(e) if attempt == 0 && cap_stale(&e.error) => {
                (layout, grants) = renew(inner, ino, creds, false, &layout).await?;
            }
            Err(PieceError {
                osd: Some(osd),
                error,
            }) if attempt == 0 && transport(&error) && inner.osds.moved(&inner.mds, osd).await => {}
            Err(e) => {
                Counters::add(&inner.meta.counters.osd_errors, 1);
                return Err(piece_error(e));
            }
        }
    }
    Err(FsError::new(
        Errno::Io,
        "read failed after renewing capabilities",
    ))
}

/// Whether the timer should write this file out now.
pub fn due(st: &FileState, delay: Duration) -> bool {
    st.dirty_since.is_some_and(|t| t.elapsed() >= delay) || !st.inflight.is_empty() || st.modified
}

/// After a truncate by this client: the new length, caches dropped.
pub fn truncated(f: &OpenInode, st: &mut FileState, size: u64) {
    st.size = size;
    f.size.store(size, Ordering::Relaxed);
    st.ra = None;
    st.pending = None;
    st.new_generation();
    st.seq_next = 0;
}
