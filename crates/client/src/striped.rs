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

/// One copy of a stripe object: its OSD, the connection pool to it and
/// the capability for it.
#[derive(Clone)]
pub struct Replica {
    /// OSD id.
    pub osd: u32,
    /// Pool to it.
    pub client: Arc<OsdClient>,
    /// Capability for the object there.
    pub cap: Capability,
    /// With replica groups: how to reach the group's head again after
    /// its chain changed.
    pub reroute: Option<Reroute>,
}

/// Finds a replica group's head (and a capability for it) again: a new
/// pool and capability, or `None` when the credentials cannot be had.
pub type Reroute = Arc<
    dyn Fn() -> std::pin::Pin<
            Box<dyn std::future::Future<Output = Option<(Arc<OsdClient>, Capability)>> + Send>,
        > + Send
        + Sync,
>;

/// A resolved target: the object id and its fresh copies (read in order;
/// written all at once), and how many copies a write needs.
#[derive(Clone)]
pub struct Target {
    /// Object id.
    pub oid: u64,
    /// Fresh copies, the preferred one first.
    pub copies: Vec<Replica>,
    /// Fewest copies a write may succeed on.
    pub quorum: usize,
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

/// Whether the OSD refused for want of room (ENOSPC, or a store bound
/// reached, which the mount reports as ENOSPC too).
pub fn no_space(e: &ConnError) -> bool {
    matches!(e, ConnError::Remote(w) if matches!(w.code, ErrorCode::NoSpace | ErrorCode::Bound))
}

/// Whether the OSD says it has no lease yet (starting): worth a short wait.
fn not_ready(e: &ConnError) -> bool {
    matches!(e, ConnError::Remote(w) if w.code == ErrorCode::NotReady)
}

/// Whether an error says the copy's bytes are bad (a block failed its checksum).
pub fn corrupt(e: &ConnError) -> bool {
    matches!(e, ConnError::Remote(w) if matches!(w.code, ErrorCode::Checksum | ErrorCode::Io))
}

/// Runs `cmd` on one copy, waiting out a starting OSD's missing lease for
/// up to about two seconds.
pub(crate) async fn run_copy(
    c: &Replica,
    cmd: Command,
    data: Bytes,
) -> std::result::Result<net::Answer, ConnError> {
    if let Some(reroute) = &c.reroute {
        return run_in_group(c, reroute, cmd, data).await;
    }
    let mut wait = std::time::Duration::from_millis(20);
    let mut r = c.client.run(Some(&c.cap), cmd.clone(), data.clone()).await;
    for _ in 0..7 {
        match &r {
            Err(e) if not_ready(e) => {}
            _ => return r,
        }
        tokio::time::sleep(wait).await;
        wait *= 2;
        r = c.client.run(Some(&c.cap), cmd.clone(), data.clone()).await;
    }
    r
}

/// Runs `cmd` at a replica group's head with one request id, finding the
/// head again while its chain changes.
async fn run_in_group(
    c: &Replica,
    reroute: &Reroute,
    cmd: Command,
    data: Bytes,
) -> std::result::Result<net::Answer, ConnError> {
    let id = u64::from_le_bytes(net::auth::random_bytes::<8>()) | 1;
    let started = std::time::Instant::now();
    let (mut client, mut cap) = (c.client.clone(), c.cap.clone());
    loop {
        let r = client
            .run_id(Some(&cap), cmd.clone(), data.clone(), id)
            .await;
        match r {
            Err(e) if net::chain_retryable(&e) && started.elapsed() < net::CHAIN_RETRY => {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                if let Some((cl, cp)) = reroute().await {
                    (client, cap) = (cl, cp);
                }
            }
            r => return r,
        }
    }
}

/// A failed piece.
#[derive(Debug, Clone)]
pub struct PieceError {
    /// The OSD that failed it; `None` when no OSD was asked (no fresh
    /// copy) or the task writing it failed.
    pub osd: Option<u32>,
    /// What failed.
    pub error: ConnError,
}

impl PieceError {
    /// A failure at OSD `osd`.
    fn at(osd: u32, error: ConnError) -> PieceError {
        PieceError {
            osd: Some(osd),
            error,
        }
    }

    /// A failure at no OSD in particular.
    fn nowhere(why: String) -> PieceError {
        PieceError {
            osd: None,
            error: ConnError::Protocol(why),
        }
    }
}

/// A copy that missed a write.
#[derive(Debug, Clone)]
pub struct Missed {
    /// Its object set.
    pub objset: u64,
    /// Its stripe.
    pub stripe: u32,
    /// The OSD holding it.
    pub osd: u32,
    /// Why it missed.
    pub error: ConnError,
}

/// A copy found bad while reading: (object set, stripe, OSD).
pub type BadCopy = (u64, u32, u32);

/// What a striped read found.
pub struct Read {
    /// `len` bytes (holes are zeros).
    pub data: Bytes,
    /// Copies that failed their checksums while another copy answered.
    pub bad: Vec<BadCopy>,
    /// Some object read was on no copy: a hole — or a file removed since
    /// its layout was had, which the caller may check.
    pub absent: bool,
    /// How far into the buffer the objects' bytes reached (past it, the
    /// objects ended: zeros).
    pub end: u64,
}

/// Reads every run into one buffer of `len` bytes (holes are zeros); also
/// says which copies failed their checksums (another copy answered) and
/// whether an object was on no copy.
pub async fn read(targets: Vec<(Run, Target)>, len: u64) -> std::result::Result<Read, PieceError> {
    // One request (a small read): no task hop.
    if let [(r, t)] = &targets[..] {
        let (data, bad, absent) = read_one(r, t).await?;
        let n = data.len().min(r.len as usize);
        let end = r.buf_offset + n as u64;
        if r.buf_offset == 0 && data.len() as u64 == len {
            return Ok(Read {
                data,
                bad,
                absent,
                end,
            });
        }
        let mut buf = BytesMut::zeroed(len as usize);
        let at = r.buf_offset as usize;
        buf[at..at + n].copy_from_slice(&data[..n]);
        let data = buf.freeze();
        return Ok(Read {
            data,
            bad,
            absent,
            end,
        });
    }
    let mut set = JoinSet::new();
    for (r, t) in targets {
        set.spawn(async move { read_one(&r, &t).await.map(|d| (r, d)) });
    }
    let mut buf = BytesMut::zeroed(len as usize);
    let (mut bad, mut absent, mut end) = (Vec::new(), false, 0);
    for (r, (data, b, gone)) in join_all(set).await? {
        let n = data.len().min(r.len as usize);
        let at = r.buf_offset as usize;
        buf[at..at + n].copy_from_slice(&data[..n]);
        if n > 0 {
            end = end.max(r.buf_offset + n as u64);
        }
        bad.extend(b);
        absent |= gone;
    }
    let data = buf.freeze();
    Ok(Read {
        data,
        bad,
        absent,
        end,
    })
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
                first_err.get_or_insert(PieceError::nowhere(e.to_string()));
            }
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// Reads one run from the first copy that answers (a missing object is a
/// hole: no bytes, and `true`). A capability the OSD refuses ends the
/// read (the caller renews its layout and capabilities); any other
/// failure tries the next copy.
async fn read_one(
    r: &Run,
    t: &Target,
) -> std::result::Result<(Bytes, Vec<BadCopy>, bool), PieceError> {
    let cmd = Command::Read {
        pid: DATA_PARTITION,
        oid: t.oid,
        offset: r.obj_offset,
        len: r.len as u32,
    };
    let mut first: Option<PieceError> = None;
    let mut bad = Vec::new();
    // A copy without the object is a hole only if no other copy has it
    // (a copy that lost the object, say to a torn journal, must not read
    // as zeros while another holds the bytes).
    let mut missing = Vec::new();
    for c in &t.copies {
        match run_copy(c, cmd.clone(), Bytes::new()).await {
            Ok(a) => {
                bad.extend(missing.iter().map(|&o| (r.objset, r.stripe, o)));
                return Ok((a.data, bad, false));
            }
            Err(ConnError::Remote(w)) if w.code == ErrorCode::NoObject => missing.push(c.osd),
            Err(e) if cap_stale(&e) => return Err(PieceError::at(c.osd, e)),
            Err(e) => {
                if corrupt(&e) {
                    bad.push((r.objset, r.stripe, c.osd));
                }
                first.get_or_insert(PieceError::at(c.osd, e));
            }
        }
    }
    if missing.len() == t.copies.len() || (first.is_none() && !missing.is_empty()) {
        return Ok((Bytes::new(), bad, true));
    }
    Err(first
        .unwrap_or_else(|| PieceError::nowhere(format!("object {:#x} has no fresh copy", t.oid))))
}

/// Writes one run's bytes to one copy, creating the object if needed:
/// at object offset 0 with CREATE-AND-WRITE (one round trip for a new
/// object), else WRITE, falling back to CREATE + WRITE when the object is
/// missing. `known` says the object is known to exist.
pub async fn write_copy(
    c: &Replica,
    oid: u64,
    obj_offset: u64,
    data: Bytes,
    known: bool,
) -> std::result::Result<(), ConnError> {
    let pid = DATA_PARTITION;
    if !known && obj_offset == 0 {
        let cmd = Command::CreateAndWrite { pid, oid };
        match run_copy(c, cmd, data.clone()).await {
            Err(ConnError::Remote(w)) if w.code == ErrorCode::Exists => {}
            other => return other.map(|_| ()),
        }
    }
    let cmd = Command::Write {
        pid,
        oid,
        offset: obj_offset,
    };
    match run_copy(c, cmd.clone(), data.clone()).await {
        Err(ConnError::Remote(w)) if w.code == ErrorCode::NoObject => {
            let create = Command::Create {
                pid,
                oid: Some(oid),
                count: 1,
            };
            match run_copy(c, create, Bytes::new()).await {
                Ok(_) => {}
                Err(ConnError::Remote(w)) if w.code == ErrorCode::Exists => {}
                Err(e) => return Err(e),
            }
            run_copy(c, cmd, data).await.map(|_| ())
        }
        other => other.map(|_| ()),
    }
}

/// What a write did: the objects written (object set, stripe) and the
/// copies that failed while enough others succeeded (object set, stripe,
/// OSD, error) — the caller must have those recorded stale before it
/// acknowledges the write.
#[derive(Default)]
pub struct Written {
    /// Objects written (on at least their quorum of copies).
    pub done: Vec<(u64, u32)>,
    /// Copies that missed the write.
    pub missed: Vec<Missed>,
    /// Objects written on some copies but fewer than their quorum: the
    /// write must fail (EIO) once the copies that missed it are recorded
    /// stale (so the copies that have the bytes are the fresh ones).
    pub short: Vec<(u64, u32)>,
    /// Of `short` (one entry per run), the runs that would have reached
    /// their quorum but for copies refused for want of room: when every
    /// short run is one, the write fails with ENOSPC.
    pub short_for_room: Vec<(u64, u32)>,
}

/// Writes one run to every copy at once. A refused capability on any copy
/// fails the run (the layout is out of date); otherwise it succeeds when
/// at least the quorum of copies has the bytes.
async fn write_run(
    r: Run,
    t: Target,
    part: Bytes,
    known: bool,
) -> std::result::Result<Written, PieceError> {
    let mut results = Vec::with_capacity(t.copies.len());
    if let [c] = &t.copies[..] {
        results.push((c.osd, write_copy(c, t.oid, r.obj_offset, part, known).await));
    } else {
        let mut set = JoinSet::new();
        let mut osd_of = std::collections::HashMap::new();
        for c in t.copies.iter().cloned() {
            let part = part.clone();
            let (oid, osd) = (t.oid, c.osd);
            let h = set.spawn(async move {
                let res = write_copy(&c, oid, r.obj_offset, part, known).await;
                (c.osd, res)
            });
            osd_of.insert(h.id(), osd);
        }
        while let Some(j) = set.join_next_with_id().await {
            match j {
                Ok((_, x)) => results.push(x),
                // A task that failed: its copy missed the write.
                Err(e) => match osd_of.get(&e.id()) {
                    Some(&osd) => results.push((osd, Err(ConnError::Protocol(e.to_string())))),
                    None => tracing::error!(error = %e, "a write task failed, its OSD unknown"),
                },
            }
        }
    }
    let ok = results.iter().filter(|(_, r)| r.is_ok()).count();
    let mut out = Written::default();
    let mut first = None;
    for (osd, res) in results {
        if let Err(e) = res {
            if cap_stale(&e) {
                return Err(PieceError::at(osd, e));
            }
            if first.is_none() {
                first = Some(PieceError::at(osd, e.clone()));
            }
            out.missed.push(Missed {
                objset: r.objset,
                stripe: r.stripe,
                osd,
                error: e,
            });
        }
    }
    if ok == 0 {
        return Err(first.unwrap_or_else(|| {
            PieceError::nowhere(format!("object {:#x} has no fresh copy to write", t.oid))
        }));
    }
    if ok < t.quorum.max(1) {
        out.short.push((r.objset, r.stripe));
        let refused = out.missed.iter().filter(|m| no_space(&m.error)).count();
        if ok + refused >= t.quorum.max(1) {
            out.short_for_room.push((r.objset, r.stripe));
        }
    } else {
        out.done.push((r.objset, r.stripe));
    }
    Ok(out)
}

/// Writes runs of `data` in parallel, each to all its copies. Returns
/// what every run that reached a copy did, and the first failure of a run
/// that reached none (the copies the others missed must be recorded stale
/// even then: the write fails, but its copies must not differ silently).
pub async fn write(
    targets: Vec<(Run, Target, bool)>,
    data: Bytes,
) -> (Written, Option<PieceError>) {
    if targets.len() == 1 {
        let (r, t, known) = targets.into_iter().next().expect("one target");
        let part = data.slice(r.buf_offset as usize..(r.buf_offset + r.len) as usize);
        return match write_run(r, t, part, known).await {
            Ok(w) => (w, None),
            Err(e) => (Written::default(), Some(e)),
        };
    }
    let mut set = JoinSet::new();
    for (r, t, known) in targets {
        let part = data.slice(r.buf_offset as usize..(r.buf_offset + r.len) as usize);
        set.spawn(write_run(r, t, part, known));
    }
    let mut out = Written::default();
    let mut first = None;
    while let Some(j) = set.join_next().await {
        match j {
            Ok(Ok(w)) => {
                out.done.extend(w.done);
                out.missed.extend(w.missed);
                out.short.extend(w.short);
                out.short_for_room.extend(w.short_for_room);
            }
            Ok(Err(e)) => {
                first.get_or_insert(e);
            }
            Err(e) => {
                first.get_or_insert(PieceError::nowhere(e.to_string()));
            }
        }
    }
    (out, first)
}

/// The rights a writer needs.
pub const WRITE_NEED: u32 = rights::WRITE | rights::CREATE;

/// Turns a piece failure into the error callers see.
pub fn piece_error(p: PieceError) -> FsError {
    match p.osd {
        Some(osd) => crate::error::osd(osd, &p.error),
        None => FsError::new(Errno::Io, p.error.to_string()),
    }
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
                ..LayoutSpec::default()
            },
            map_epoch: 1,
            objsets: vec![1, 2, 3],
            homes: Vec::new(),
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
