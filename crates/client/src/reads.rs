//! Reads of an open file: from the read-ahead window, waiting for a
//! window being fetched, or from the objects — with read-ahead on
//! sequential access, and the end of the file checked against the
//! objects ([`crate::eof`]).

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::OnceCell;

use crate::caps::ensure_caps;
use crate::error::Result;
use crate::file::{flush_all, read_range_to, truncated};
use crate::open_file::{FileState, OpenInode};
use crate::state::Inner;

/// Serves `[off, off + len)` from the read-ahead buffer if it holds it.
fn from_ra(st: &FileState, off: u64, len: u64) -> Option<Bytes> {
    let (ro, buf) = st.ra.as_ref()?;
    if *ro <= off && off + len <= ro + buf.len() as u64 {
        let at = (off - ro) as usize;
        return Some(buf.slice(at..at + len as usize));
    }
    None
}

/// On sequential access, starts fetching the window after the read-ahead
/// buffer once the reader is past its middle (so the next window is on its
/// way while this one is consumed).
fn read_ahead_next(inner: &Arc<Inner>, f: &OpenInode, st: &mut FileState, pos: u64) {
    let (Some((ro, buf)), None, Some(layout)) = (&st.ra, &st.pending, &st.layout) else {
        return;
    };
    let end = ro + buf.len() as u64;
    // Never read ahead over bytes still buffered here (they would be stale).
    if st.window == 0 || pos < ro + buf.len() as u64 / 2 || end >= st.size || st.busy() {
        return;
    }
    let want = st.window.min(st.size - end);
    let cell: Arc<OnceCell<Option<Bytes>>> = Arc::new(OnceCell::new());
    st.pending = Some((end, end + want, st.gen_, cell.clone()));
    let (inner, ino, creds, layout, grants) = (
        inner.clone(),
        f.ino,
        st.creds.clone(),
        layout.clone(),
        st.grants.clone(),
    );
    tokio::spawn(async move {
        cell.get_or_init(|| async {
            // Only what the objects held: a read past it goes to the
            // objects again, and asks whether the file shrank.
            read_range_to((&inner, ino, &creds), &layout, grants, end, want)
                .await
                .ok()
                .map(|(d, to)| d.slice(0..to as usize))
        })
        .await;
    });
}

/// Reads up to `len` bytes at `off` (short at end of file), with read-ahead
/// on sequential access: a window that doubles up to `readahead_max`, the
/// next window fetched in the background, and concurrent readers of a
/// window being fetched waiting for it instead of fetching it again.
pub async fn read(inner: &Arc<Inner>, f: &OpenInode, off: u64, len: u32) -> Result<Bytes> {
    read_checked(inner, f, off, len).await.map(|(b, _)| b)
}

/// [`read`], also saying whether the file grew under the read: another
/// client rewrote it since this one had its length ([`crate::eof`]).
pub async fn read_checked(
    inner: &Arc<Inner>,
    f: &OpenInode,
    off: u64,
    len: u32,
) -> Result<(Bytes, bool)> {
    let asked = u64::from(len);
    let mut st = f.st.lock().await;
    if st.dirty_overlaps(off, asked) {
        flush_all(inner, f.ino, &mut st).await?;
    }
    if off >= st.size || asked == 0 {
        return Ok((Bytes::new(), false));
    }
    let len = asked.min(st.size - off);
    // Up to the end of the file as known here, with nothing buffered:
    // whether the objects agree with that end (not from a read-ahead
    // window, which was fetched up to it).
    if off + asked >= st.size && !st.busy() && !st.modified {
        return read_at_end(inner, f, st, off, asked).await;
    }
    if let Some(out) = from_ra(&st, off, len) {
        st.seq_next = st.seq_next.max(off + len);
        read_ahead_next(inner, f, &mut st, off + len);
        return Ok((out, false));
    }
    // A window being fetched that holds the range: wait for it.
    if let Some((lo, hi, g, cell)) = st.pending.clone()
        && g == st.gen_
        && lo <= off
        && off + len <= hi
    {
        drop(st);
        let got = cell.get_or_init(|| async { None }).await.clone();
        let mut st = f.st.lock().await;
        if let Some(data) = got
            && st.gen_ == g
        {
            if st
                .pending
                .as_ref()
                .is_some_and(|p| Arc::ptr_eq(&p.3, &cell))
            {
                st.pending = None;
                st.ra = Some((lo, data));
            }
            let at = (off - lo) as usize;
            let out = match &st.ra {
                Some((ro, b)) if *ro == lo && at + len as usize <= b.len() => {
                    b.slice(at..at + len as usize)
                }
                _ => return unchanged(read_direct(inner, f, st, off, len, len).await),
            };
            st.seq_next = st.seq_next.max(off + len);
            read_ahead_next(inner, f, &mut st, off + len);
            return Ok((out, false));
        }
        return unchanged(read_direct(inner, f, st, off, len, len).await);
    }
    // Sequential (allowing the kernel's concurrent reads to arrive a little
    // out of order): grow the window.
    let near = 2 * inner.cfg.readahead_max.max(1 << 20);
    let sequential = off > 0 && off + near >= st.seq_next && off <= st.seq_next + near;
    st.window = if sequential {
        (st.window.max(len) * 2).min(inner.cfg.readahead_max)
    } else {
        0
    };
    let want = if st.busy() {
        // Buffered writes elsewhere in the file: no read-ahead over them.
        len
    } else {
        len.max(st.window).min(st.size - off)
    };
    unchanged(read_direct(inner, f, st, off, len, want).await)
}

/// Reads `[off, off + asked)` of `f`, which crosses the end of the file
/// as known here (`st` held, nothing buffered): the bytes up to the end,
/// and whether the file grew under the read ([`crate::eof`]).
async fn read_at_end(
    inner: &Arc<Inner>,
    f: &OpenInode,
    mut st: tokio::sync::MutexGuard<'_, FileState>,
    off: u64,
    asked: u64,
) -> Result<(Bytes, bool)> {
    let known = st.size - off;
    // Never more than the kernel asked (it refuses a longer answer).
    let limit = asked;
    let Some(layout) = ready(inner, f, &mut st, off + known).await? else {
        return Ok((Bytes::from(vec![0u8; known as usize]), false));
    };
    // What was asked and at least a page past the end, but only within
    // the stripe unit of the first byte past the end (the next unit is
    // another object, most often absent: a question to the namespace,
    // `crate::gone`). An end on a unit's boundary reads a page of the
    // next unit's object.
    let su = u64::from(layout.spec.stripe_unit.max(1));
    let unit_end = (st.size + 1).div_ceil(su).saturating_mul(su);
    let asked = asked.max(known + 4096).min(unit_end - off);
    let (grants, creds, gen_) = (st.grants.clone(), st.creds.clone(), st.gen_);
    drop(st);
    let read = read_range_to((inner, f.ino, &creds), &layout, grants, off, asked);
    let (data, end) = read.await?;
    let cut = |n: u64| data.slice(0..n.min(limit).min(data.len() as u64) as usize);
    if end == known {
        return Ok((cut(known), false));
    }
    let parts = (&*inner.ns, &*inner.meta, &inner.eof_checked);
    let seen = off + end;
    let Some(size) = crate::eof::length_now(parts, &creds, (f.ino, gen_), seen).await? else {
        return Ok((cut(known), false));
    };
    let mut st = f.st.lock().await;
    // Written, truncated or read anew here meanwhile: this client's
    // length stands.
    if st.gen_ != gen_ || st.busy() || st.modified || size == st.size {
        return Ok((cut(st.size.saturating_sub(off)), false));
    }
    tracing::debug!(
        ino = f.ino,
        was = st.size,
        now = size,
        "another client changed the file's length"
    );
    let grew = size > st.size;
    truncated(f, &mut st, size);
    Ok((cut(size.saturating_sub(off)), grew))
}

/// Before a read of `f` up to `end`: notes where the next sequential
/// read starts, makes sure the capabilities are current, and gives the
/// layout (None: the file has no objects yet, so reads as zeros).
async fn ready(
    inner: &Arc<Inner>,
    f: &OpenInode,
    st: &mut FileState,
    end: u64,
) -> Result<Option<proto::layout::Layout>> {
    st.seq_next = st.seq_next.max(end);
    ensure_caps(inner, f.ino, st, false, 0).await?;
    Ok(st.layout.clone())
}

/// A read's bytes, the file's length as it was.
fn unchanged(r: Result<Bytes>) -> Result<(Bytes, bool)> {
    r.map(|b| (b, false))
}

/// Fetches `[off, off + want)` (readers of it meanwhile wait for it), keeps
/// it as the read-ahead buffer when it is more than asked, returns `len` bytes.
async fn read_direct(
    inner: &Arc<Inner>,
    f: &OpenInode,
    mut st: tokio::sync::MutexGuard<'_, FileState>,
    off: u64,
    len: u64,
    want: u64,
) -> Result<Bytes> {
    let Some(layout) = ready(inner, f, &mut st, off + len).await? else {
        return Ok(Bytes::from(vec![0u8; len as usize]));
    };
    let grants = st.grants.clone();
    let creds = st.creds.clone();
    let gen_ = st.gen_;
    let cell: Arc<OnceCell<Option<Bytes>>> = Arc::new(OnceCell::new());
    if want > len {
        st.pending = Some((off, off + want, gen_, cell.clone()));
    }
    drop(st);
    let res = read_range_to((inner, f.ino, &creds), &layout, grants, off, want).await;
    // Only what the objects held is kept for the reads after this one.
    let _ = cell.set(res.as_ref().ok().map(|(d, to)| d.slice(0..*to as usize)));
    let (data, to) = res?;
    if to < len {
        // The objects stop inside the range: a hole, or the file shrank
        // on another client since this one had its length.
        let parts = (&*inner.ns, &*inner.meta, &inner.short_checked);
        let size = crate::eof::length_now(parts, &creds, (f.ino, gen_), 0).await?;
        let mut st = f.st.lock().await;
        tracing::debug!(
            ino = f.ino,
            off,
            len,
            objects_end = off + to,
            namespace = ?size,
            known = st.size,
            "a read found the objects stopping short"
        );
        if let Some(size) = size
            && size < st.size
            && st.gen_ == gen_
            && !st.busy()
            && !st.modified
        {
            truncated(f, &mut st, size);
        }
        // A shorter length — found by this read or by one beside it (the
        // kernel reads ahead in parallel) — cuts this one too: zeros past
        // the new end would make a torn mix of two versions.
        if st.size < off + len && !st.busy() && !st.modified {
            return Ok(data.slice(0..st.size.saturating_sub(off).min(len) as usize));
        }
    }
    let data = data.slice(0..(to as usize).max(len as usize));
    let out = data.slice(0..len as usize);
    if want > len {
        let mut st = f.st.lock().await;
        if st
            .pending
            .as_ref()
            .is_some_and(|p| Arc::ptr_eq(&p.3, &cell))
        {
            st.pending = None;
        }
        if st.gen_ == gen_ {
            st.ra = Some((off, data));
            read_ahead_next(inner, f, &mut st, off + len);
        }
    }
    Ok(out)
}
