//! Striped data I/O: a byte range of a file becomes pieces on stripe
//! objects (see `proto::layout`); pieces of one object that touch are merged
//! into one OSD request, and all requests of a range are issued in parallel
//! (each OSD connection is pipelined). Missing objects and bytes past an
//! object's end read as zeros (sparse files); writers create objects on
//! first write.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use net::{ConnError, OsdClient};
use proto::layout::{DATA_PARTITION, Layout};
use proto::mds::Grant;
use proto::{Capability, Command, ErrorCode, rights};
use tokio::task::JoinSet;

use crate::error::{Errno, FsError};

/// Largest single OSD request the client sends (pieces of one object are
/// merged up to this).
pub const MAX_REQUEST: u64 = 4 << 20;

/// One OSD request's worth of a range: object (`objset`, `stripe`), offset
/// in the object, and the file offset and length it covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    /// Object set.
    pub objset: u64,
    /// Stripe in the set.
    pub stripe: u32,
    /// Offset in the object.
    pub obj_offset: u64,
    /// Offset of the first byte in the range's buffer.
    pub buf_offset: u64,
    /// Length.
    pub len: u64,
}

/// Splits `[off, off + len)` of a file with `layout` into merged runs.
/// Invariant: runs cover the range exactly once, each within one object.
pub fn runs(layout: &Layout, off: u64, len: u64) -> Vec<Run> {
    let mut by_obj: BTreeMap<(u64, u32), Vec<Run>> = BTreeMap::new();
    for p in layout.spec.pieces(off, len) {
        let v = by_obj.entry((p.objset, p.stripe)).or_default();
        let r = Run {
            objset: p.objset,
            stripe: p.stripe,
            obj_offset: p.obj_offset,
            buf_offset: p.file_offset - off,
            len: p.len,
        };
        match v.last_mut() {
            Some(last)
                if last.obj_offset + last.len == r.obj_offset
                    && last.buf_offset + last.len == r.buf_offset
                    && last.len + r.len <= MAX_REQUEST =>
            {
                last.len += r.len
            }
            _ => v.push(r),
        }
    }
    by_obj.into_values().flatten().collect()
}

/// A resolved target: the OSD connection, object id and capability.
#[derive(Clone)]
pub struct Target {
    /// OSD id.
    pub osd: u32,
    /// Pool to it.
    pub client: Arc<OsdClient>,
    /// Object id.
    pub oid: u64,
    /// Capability for it.
    pub cap: Capability,
}

/// Finds a capability with `want` rights for `oid` on `osd` in `grants`.
pub fn cap_for(grants: &[Grant], osd: u32, oid: u64, want: u32) -> Option<Capability> {
    grants
        .iter()
        .filter(|g| g.covers(oid, want))
        .find_map(|g| g.cap_for(osd).cloned())
}

/// Whether an OSD error means the capability must be renewed.
pub fn cap_stale(e: &ConnError) -> bool {
    matches!(e, ConnError::Remote(w) if matches!(
        w.code,
        ErrorCode::CapExpired | ErrorCode::CapRevoked | ErrorCode::CapKeyVersion | ErrorCode::CapRights
    ))
}

/// Whether an OSD error is the network's (connect, lost, timeout), not the OSD's answer.
pub fn transport(e: &ConnError) -> bool {
    matches!(
        e,
        ConnError::Connect { .. } | ConnError::Lost(_) | ConnError::Timeout(_)
    )
}

/// A failed piece: the OSD and the error.
pub type PieceError = (u32, ConnError);

/// Reads every run into one buffer of `len` bytes (holes are zeros).
pub async fn read(targets: Vec<(Run, Target)>, len: u64) -> std::result::Result<Bytes, PieceError> {
    // One request (a small read): no task hop.
    if let [(r, t)] = &targets[..] {
        let data = read_one(r, t).await.map_err(|e| (t.osd, e))?;
        if r.buf_offset == 0 && data.len() as u64 == len {
            return Ok(data);
        }
        let mut buf = BytesMut::zeroed(len as usize);
        let n = data.len().min(r.len as usize);
        let at = r.buf_offset as usize;
        buf[at..at + n].copy_from_slice(&data[..n]);
        return Ok(buf.freeze());
    }
    let mut set = JoinSet::new();
    for (r, t) in targets {
        set.spawn(async move {
            read_one(&r, &t)
                .await
                .map(|d| (r, d))
                .map_err(|e| (t.osd, e))
        });
    }
    let mut buf = BytesMut::zeroed(len as usize);
    for (r, data) in join_all(set).await? {
        let n = data.len().min(r.len as usize);
        let at = r.buf_offset as usize;
        buf[at..at + n].copy_from_slice(&data[..n]);
    }
    Ok(buf.freeze())
}

/// Waits for every request of a range; the first failure wins.
async fn join_all<T: 'static>(
    mut set: JoinSet<std::result::Result<T, PieceError>>,
) -> std::result::Result<Vec<T>, PieceError> {
    let mut out = Vec::new();
    let mut first_err = None;
    while let Some(j) = set.join_next().await {
        match j {
            Ok(Ok(v)) => out.push(v),
            Ok(Err(e)) => {
                first_err.get_or_insert(e);
            }
            Err(e) => {
                first_err.get_or_insert((u32::MAX, ConnError::Protocol(e.to_string())));
            }
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// Reads one run (a missing object is a hole: no bytes).
async fn read_one(r: &Run, t: &Target) -> std::result::Result<Bytes, ConnError> {
    let cmd = Command::Read {
        pid: DATA_PARTITION,
        oid: t.oid,
        offset: r.obj_offset,
        len: r.len as u32,
    };
    match t.client.run(Some(&t.cap), cmd, Bytes::new()).await {
        Ok(a) => Ok(a.data),
        Err(ConnError::Remote(w)) if w.code == ErrorCode::NoObject => Ok(Bytes::new()),
        Err(e) => Err(e),
    }
}

/// Writes one run's bytes to its object, creating the object if needed:
/// at object offset 0 with CREATE-AND-WRITE (one round trip for a new
/// object), else WRITE, falling back to CREATE + WRITE when the object is
/// missing. `known` says the object is known to exist.
pub async fn write_one(
    t: &Target,
    obj_offset: u64,
    data: Bytes,
    known: bool,
) -> std::result::Result<(), ConnError> {
    let pid = DATA_PARTITION;
    if !known && obj_offset == 0 {
        let cmd = Command::CreateAndWrite { pid, oid: t.oid };
        match t.client.run(Some(&t.cap), cmd, data.clone()).await {
            Err(ConnError::Remote(w)) if w.code == ErrorCode::Exists => {}
            other => return other.map(|_| ()),
        }
    }
    let cmd = Command::Write {
        pid,
        oid: t.oid,
        offset: obj_offset,
    };
    match t.client.run(Some(&t.cap), cmd.clone(), data.clone()).await {
        Err(ConnError::Remote(w)) if w.code == ErrorCode::NoObject => {
            let create = Command::Create {
                pid,
                oid: Some(t.oid),
                count: 1,
            };
            match t.client.run(Some(&t.cap), create, Bytes::new()).await {
                Ok(_) => {}
                Err(ConnError::Remote(w)) if w.code == ErrorCode::Exists => {}
                Err(e) => return Err(e),
            }
            t.client.run(Some(&t.cap), cmd, data).await.map(|_| ())
        }
        other => other.map(|_| ()),
    }
}

/// Writes runs of `data` in parallel; returns the objects written (so the
/// caller remembers they exist) or the first failure.
pub async fn write(
    targets: Vec<(Run, Target, bool)>,
    data: Bytes,
) -> std::result::Result<Vec<(u64, u32)>, PieceError> {
    if let [(r, t, known)] = &targets[..] {
        let part = data.slice(r.buf_offset as usize..(r.buf_offset + r.len) as usize);
        return write_one(t, r.obj_offset, part, *known)
            .await
            .map(|()| vec![(r.objset, r.stripe)])
            .map_err(|e| (t.osd, e));
    }
    let mut set = JoinSet::new();
    for (r, t, known) in targets {
        let part = data.slice(r.buf_offset as usize..(r.buf_offset + r.len) as usize);
        set.spawn(async move {
            write_one(&t, r.obj_offset, part, known)
                .await
                .map(|()| (r.objset, r.stripe))
                .map_err(|e| (t.osd, e))
        });
    }
    join_all(set).await
}

/// The rights a writer needs.
pub const WRITE_NEED: u32 = rights::WRITE | rights::CREATE;

/// Turns a piece failure into the error callers see.
pub fn piece_error((osd, e): PieceError) -> FsError {
    if osd == u32::MAX {
        return FsError::new(Errno::Io, e.to_string());
    }
    FsError::osd(osd, &e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::layout::LayoutSpec;

    fn layout(su: u32, sc: u32, os: u64) -> Layout {
        Layout {
            spec: LayoutSpec {
                stripe_unit: su,
                stripe_count: sc,
                object_size: os,
            },
            map_epoch: 1,
            objsets: vec![1, 2, 3],
        }
    }

    #[test]
    fn runs_cover_the_range_once_and_merge_per_object() {
        // One stripe: consecutive units of one object merge into one run.
        let r = runs(&layout(4096, 1, 0), 100, 3 * 4096);
        assert_eq!(r.len(), 1);
        assert_eq!((r[0].obj_offset, r[0].len), (100, 3 * 4096));
        // Three stripes: units alternate objects, so each object gets its
        // own runs and each run stays within a unit.
        let l = layout(4096, 3, 0);
        let r = runs(&l, 0, 7 * 4096);
        let total: u64 = r.iter().map(|x| x.len).sum();
        assert_eq!(total, 7 * 4096);
        let mut covered = vec![false; 7 * 4096];
        for x in &r {
            for b in x.buf_offset..x.buf_offset + x.len {
                assert!(!covered[b as usize], "byte {b} covered twice");
                covered[b as usize] = true;
            }
        }
        assert!(covered.iter().all(|&c| c));
        // Bounded objects roll over to the next object set.
        let r = runs(&layout(4096, 1, 8192), 0, 3 * 4096);
        assert_eq!(r.len(), 2);
        assert_eq!((r[1].objset, r[1].obj_offset, r[1].len), (1, 0, 4096));
    }
}
