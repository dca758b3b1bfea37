//! An open file's capabilities and the layout they came with: renewed
//! before they expire or when a write needs rights or object sets it has
//! not, taken from the answer to the DIR OPS that made a file under a
//! directory lease, and a copy recorded stale through the MDS. The two are
//! only ever used together (a capability names the OSDs of its layout).

use proto::clock::now_ms;
use proto::layout::Layout;
use proto::mds::{Creds, Found, Grant};
use proto::rights;

use crate::error::{Errno, FsError, Result};
use crate::open_file::FileState;
use crate::state::Inner;

/// New capabilities *and* the layout they were issued with (a copy a
/// newer capability may reach could have been recorded stale meanwhile, so
/// the two are only ever used together). Keeps `old` when the answer has
/// no layout.
pub(crate) async fn renew(
    inner: &Inner,
    ino: u64,
    creds: &Creds,
    write: bool,
    old: &Layout,
) -> Result<(Layout, Vec<Grant>)> {
    let (entry, grants) = inner.open_grants(ino, creds, write).await?;
    Ok((entry.layout.unwrap_or_else(|| old.clone()), grants))
}

/// Asks the MDS to record a copy stale (and fence it); answers the file's
/// new layout and capabilities.
pub(crate) async fn mark_stale(
    inner: &Inner,
    creds: &Creds,
    ino: u64,
    objset: u64,
    stripe: u32,
    osd: u32,
) -> Result<Found> {
    let op = proto::mds::Op::MarkStale {
        ino,
        objset,
        stripe,
        osd,
    };
    match inner
        .mds
        .call_as(creds.clone(), op)
        .await
        .map_err(crate::error::from_call)?
    {
        proto::mds::MdsReply::Found(f) => Ok(*f),
        other => Err(FsError::new(
            Errno::Io,
            format!("MARK STALE answered {other:?}"),
        )),
    }
}

/// Makes sure the state holds capabilities with `write` rights (and, for
/// writers, object sets up to `objset`), renewing before they expire.
pub(crate) async fn ensure_caps(
    inner: &Inner,
    ino: u64,
    st: &mut FileState,
    write: bool,
    objset: u64,
) -> Result<()> {
    let margin = inner.cfg.cap_margin.as_millis() as u64;
    let soon = now_ms() + margin;
    let expiring = st.grants.iter().any(|g| g.expiry_ms < soon);
    // No capabilities at all: a file made under a directory lease (none
    // until it is first read or written), or a caller that dropped
    // refused ones and wants them renewed.
    if expiring || (write && !st.write_caps) || st.grants.is_empty() {
        // Made under a lease: the DIR OPS that made it answered for it.
        // Only for a file that never had a layout here: one that had
        // has newer capabilities to renew than the batch's answer.
        let made = if st.grants.is_empty() && st.layout.is_none() {
            inner.leases.take_made(ino).await.filter(|f| {
                f.entry.layout.is_some()
                    && !f.grants.is_empty()
                    && f.grants
                        .iter()
                        .all(|g| g.rights & rights::WRITE != 0 && g.expiry_ms >= soon)
            })
        } else {
            None
        };
        let (entry, grants) = match made {
            Some(f) => (f.entry, f.grants),
            None => {
                inner
                    .open_grants(ino, &st.creds, write || st.write_caps)
                    .await?
            }
        };
        st.layout = entry.layout;
        st.grants = grants;
        st.write_caps = write || st.write_caps;
    }
    let have = st.layout.as_ref().map_or(0, |l| l.objsets.len() as u64);
    if write && objset >= have {
        let creds = &st.creds;
        let f = inner
            .as_writer(ino, || inner.ns.extend_layout(creds, ino, objset))
            .await?;
        let (layout, grants) = extended(ino, objset, f)?;
        st.layout = Some(layout);
        st.grants = grants;
    }
    Ok(())
}

/// What an answer to EXTEND LAYOUT gives: a layout that reaches `objset`
/// and its grants, or EIO (so a write never goes on with a layout too
/// short for it; an answer of the wrong kind is EIO in the namespace).
fn extended(ino: u64, objset: u64, f: Found) -> Result<(Layout, Vec<Grant>)> {
    match f.entry.layout {
        Some(l) if l.objsets.len() as u64 > objset => Ok((l, f.grants)),
        l => Err(FsError::new(
            Errno::Io,
            format!(
                "inode {ino:#x}: EXTEND LAYOUT to object set {objset} answered {} object sets",
                l.map_or(0, |l| l.objsets.len())
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wrong_answer_to_extend_layout_is_eio() {
        use proto::layout::LayoutSpec;
        use proto::mds::{Attr, Entry, FileKind};
        let found = |objsets: Vec<u64>| Found {
            entry: Entry {
                parent: 1,
                name: "f".into(),
                attr: Attr {
                    ino: 9,
                    kind: FileKind::File,
                    mode: 0o644,
                    nlink: 1,
                    uid: 0,
                    gid: 0,
                    size: 0,
                    atime: 0,
                    mtime: 0,
                    ctime: 0,
                    rdev: 0,
                },
                layout: Some(Layout {
                    spec: LayoutSpec::default(),
                    map_epoch: 1,
                    objsets,
                    homes: Vec::new(),
                }),
            },
            grants: Vec::new(),
            prefetch: Vec::new(),
            prefetch_grants: Vec::new(),
            dir: None,
        };
        let (l, _) = extended(9, 1, found(vec![9, 10])).unwrap();
        assert_eq!(l.objsets.len(), 2);
        let e = extended(9, 2, found(vec![9, 10])).unwrap_err();
        assert!(e.is(Errno::Io), "{e}");
        assert!(e.message.contains("answered 2 object sets"), "{e}");
    }
}
