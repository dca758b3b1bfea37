//! Reads that reach the end of a file as this client knows it. A
//! read-only open within the cache window takes the length from the
//! cache and asks nobody, so another client may have rewritten the file
//! since: the objects then hold bytes past that end, or end before it.
//! Cut to the old length, the new bytes read as a torn mix of two
//! versions (`echo short > f` here, `seq 100 > f` on another mount, then
//! `cat f` here printed six bytes of the new file). So such a read asks
//! the objects for the whole range the kernel asked for; when their bytes
//! stop somewhere other than the known end, it asks the namespace for the
//! length (at most once per cache window per file), takes it, and says
//! whether the file grew — the mount then drops the kernel's cached
//! attributes, whose length cuts reads too. (A shrink needs nothing more:
//! the kernel takes a short answer as the new end, unless its attributes
//! were dropped during the read.) A sparse file's tail (a hole up to the
//! end) costs that one question per window.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use proto::mds::Creds;

use crate::error::{Errno, FsError, Result};
use crate::open_file::{FileState, OpenInode};
use crate::state::Inner;

/// Reads `[off, off + asked)` of `f`, which crosses the end of the file
/// as known here (`st` held, nothing buffered): the bytes up to the end,
/// and whether the file grew under the read.
pub(crate) async fn read(
    inner: &Arc<Inner>,
    f: &OpenInode,
    mut st: tokio::sync::MutexGuard<'_, FileState>,
    off: u64,
    asked: u64,
) -> Result<(Bytes, bool)> {
    let known = st.size - off;
    st.seq_next = st.seq_next.max(off + known);
    crate::caps::ensure_caps(inner, f.ino, &mut st, false, 0).await?;
    let Some(layout) = st.layout.clone() else {
        return Ok((Bytes::from(vec![0u8; known as usize]), false));
    };
    let (grants, creds, gen_) = (st.grants.clone(), st.creds.clone(), st.gen_);
    drop(st);
    let read = crate::file::read_range_to((inner, f.ino, &creds), &layout, grants, off, asked);
    let (data, end) = read.await?;
    let cut = |data: &Bytes, n: u64| data.slice(0..n.min(data.len() as u64) as usize);
    if end == known {
        return Ok((cut(&data, known), false));
    }
    let Some(size) = length_now(inner, &creds, f.ino).await? else {
        return Ok((cut(&data, known), false));
    };
    let mut st = f.st.lock().await;
    // Written, truncated or read anew here meanwhile: this client's
    // length stands.
    if st.gen_ != gen_ || st.busy() || st.modified || size == st.size {
        let n = st.size.saturating_sub(off);
        return Ok((cut(&data, n), false));
    }
    tracing::debug!(
        ino = f.ino,
        was = st.size,
        now = size,
        "another client changed the file's length since this one had it"
    );
    let grew = size > st.size;
    crate::file::truncated(f, &mut st, size);
    Ok((cut(&data, size.saturating_sub(off)), grew))
}

/// The namespace's length of `ino`, cached for the client — `None` if
/// asked within the cache window already or if the namespace cannot
/// answer; ESTALE if the file was removed.
async fn length_now(inner: &Arc<Inner>, creds: &Creds, ino: u64) -> Result<Option<u64>> {
    let window = inner.meta.attr_timeout.max(Duration::from_millis(100));
    if inner.eof_checked.lately(ino, window) {
        return Ok(None);
    }
    let asked = inner.meta.commits.ask();
    match inner.ns.getattr(creds, ino).await {
        Ok(mut a) => {
            inner.eof_checked.found(ino, window);
            inner.meta.cache_attr(&mut a, asked.since());
            Ok(Some(a.size))
        }
        Err(e) if e.is(Errno::NoEnt) || e.is(Errno::Stale) => {
            inner.meta.cache().remove(ino);
            Err(FsError::new(
                Errno::Stale,
                format!("inode {ino:#x} was removed while this client read it: {e}"),
            ))
        }
        Err(e) => {
            tracing::debug!(ino, error = %e, "a read at the end of a file could not ask for its length");
            Ok(None)
        }
    }
}
