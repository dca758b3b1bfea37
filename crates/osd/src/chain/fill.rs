//! Filling a joining member: the member right before it copies every
//! object of the group to it, each whole (attributes, data ranges, length,
//! version) under the object's chain lock, so an effect passed down
//! meanwhile lands either before the copy (and is in it) or after it (and
//! is applied on top). Objects the joiner holds that this member does not
//! (left from an earlier membership) are removed. Then the authority is
//! told, and the joiner counts as a full member.

use std::time::Duration;

use bytes::Bytes;
use net::ConnError;
use proto::chain::{STAMP, group_partition, staging_partition};
use proto::msg::{AttrKey, Command, MAX_ATTR_LIST, Reply, Request};
use proto::{ErrorCode, WireError};
use store::StoreError;

use super::{ChainView, Chains};
use crate::exec::map_err;

/// Object ids start here in every partition.
const FIRST_OID: u64 = 0x1_0000;
/// Bytes copied per WRITE.
const CHUNK: u64 = 1 << 20;
/// Ids per LIST.
const PAGE: u32 = 1000;
/// The store's attribute holding an object's version (u64 LE).
const VERSION: AttrKey = AttrKey {
    page: 0x1,
    number: 0x83,
};

/// What decides whether two copies of an object took the same changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Mark {
    /// The stamp of the last change taken whole (None: unmarked).
    stamp: Option<u64>,
    /// The capability revocation counter.
    version: u64,
}

/// The mark of this OSD's copy of `obj` (an unreadable one matches none).
fn mark_here(ctx: &crate::exec::Ctx, (pid, oid): (u64, u64)) -> Result<Mark, WireError> {
    let s = ctx.store.get()?;
    Ok(match s.stat(pid, oid) {
        Ok(st) => Mark {
            stamp: super::stamp::stamp_of(ctx, (pid, oid))?,
            version: st.version,
        },
        Err(_) => Mark {
            stamp: None,
            version: u64::MAX - 1,
        },
    })
}
/// The store's own attribute pages are below this one (not copied: the
/// joiner's store keeps its own).
const FIRST_USER_PAGE: u32 = 0x10;

fn io(e: ConnError) -> WireError {
    match e {
        ConnError::Remote(w) => w,
        other => WireError::new(ErrorCode::Io, other.to_string()),
    }
}

impl Chains {
    /// Fills `joiner` in `group`'s chain at `epoch`; returns the objects
    /// copied.
    pub(super) async fn fill(&self, group: u32, epoch: u64, joiner: u32) -> Result<u64, WireError> {
        let ctx = self
            .ctx
            .get()
            .cloned()
            .ok_or_else(|| WireError::new(ErrorCode::Busy, "the OSD is not serving yet"))?;
        let pid = group_partition(group);
        self.ensure_partition(&ctx, pid)?;
        let view = self.view().await?;
        let listed = self.remote_listing(&view, group, joiner).await?;
        let theirs: Vec<u64> = listed.iter().map(|(o, _)| *o).collect();
        // Objects the joiner holds with the stamp (and version) of the
        // head's copy took the same changes: skipped (catch-up). Stamps,
        // not clocks, decide (see `stamp`).
        let their_marks: std::collections::HashMap<u64, Mark> = listed.into_iter().collect();
        let (mut copied, mut unchanged, mut bytes) = (0u64, 0u64, 0u64);
        let started = std::time::Instant::now();
        let mut after = None;
        loop {
            self.still_filling(group, epoch, joiner)?;
            let page = ctx
                .store
                .get()?
                .list(pid, FIRST_OID, u64::MAX, after, PAGE as usize)
                .map_err(map_err)?;
            for oid in &page.ids {
                let _held = self.lock_objects(&Command::Remove { pid, oid: *oid }).await;
                if let Some(theirs) = their_marks.get(oid)
                    && theirs.stamp.is_some()
                    && *theirs == mark_here(&ctx, (pid, *oid))?
                {
                    unchanged += 1;
                    continue;
                }
                bytes += self.copy_object(&ctx, &view, group, joiner, *oid).await?;
                copied += 1;
                // Throttled as recovery is (`recovery_mib_per_sec`).
                let rate = u64::from(view.table.fill_mib_per_sec) << 20;
                if rate > 0 {
                    let due = Duration::from_secs_f64(bytes as f64 / rate as f64);
                    if let Some(wait) = due.checked_sub(started.elapsed()) {
                        drop(_held);
                        tokio::time::sleep(wait).await;
                    }
                }
            }
            match page.next {
                Some(n) => after = Some(n),
                None => break,
            }
        }
        for oid in theirs {
            let _held = self.lock_objects(&Command::Remove { pid, oid }).await;
            if let Err(StoreError::NoObject { .. }) = ctx.store.get()?.stat(pid, oid) {
                self.remote_remove(&view, group, joiner, oid).await?;
            }
        }
        self.still_filling(group, epoch, joiner)?;
        let v = self.authority.filled(group, epoch, joiner).await?;
        self.install(v);
        if unchanged > 0 {
            tracing::info!(
                group,
                osd = joiner,
                copied,
                unchanged,
                "caught up a returning member"
            );
        }
        Ok(copied)
    }

    /// Fails when the chain changed under the fill (it starts again from
    /// the new view).
    fn still_filling(&self, group: u32, epoch: u64, joiner: u32) -> Result<(), WireError> {
        let ok = self.current().is_some_and(|(v, _)| {
            v.table
                .chain(group)
                .is_some_and(|c| c.epoch == epoch && c.joining.first() == Some(&joiner))
        });
        if ok {
            Ok(())
        } else {
            Err(WireError::new(
                ErrorCode::StaleChain,
                format!("group {group}'s chain changed during the fill"),
            ))
        }
    }

    /// Every object id the joiner holds in the group's partition.
    pub(super) async fn remote_ids(
        &self,
        view: &ChainView,
        group: u32,
        joiner: u32,
    ) -> Result<Vec<u64>, WireError> {
        Ok(self
            .remote_listing(view, group, joiner)
            .await?
            .into_iter()
            .map(|(o, _)| o)
            .collect())
    }

    /// Every object the joiner holds in the group's partition, with its
    /// stamp and version there.
    async fn remote_listing(
        &self,
        view: &ChainView,
        group: u32,
        joiner: u32,
    ) -> Result<Vec<(u64, Mark)>, WireError> {
        let pid = group_partition(group);
        let keys = [STAMP, VERSION];
        let mut ids = Vec::new();
        let mut after = None;
        loop {
            let cmd = Command::List {
                pid,
                lo: FIRST_OID,
                hi: u64::MAX,
                after,
                max: PAGE,
                attrs: keys.to_vec(),
            };
            match self
                .remote(view, group, joiner, cmd, vec![], Bytes::new())
                .await
            {
                Ok(Reply::Listed { entries, next }) => {
                    ids.extend(entries.into_iter().map(|(o, attrs)| {
                        let get = |k: AttrKey| {
                            attrs
                                .iter()
                                .find(|(a, _)| *a == k)
                                .and_then(|(_, v)| v.as_slice().try_into().ok())
                                .map(u64::from_le_bytes)
                        };
                        let mark = Mark {
                            stamp: get(STAMP),
                            version: get(VERSION).unwrap_or(u64::MAX),
                        };
                        (o, mark)
                    }));
                    match next {
                        Some(n) => after = Some(n),
                        None => return Ok(ids),
                    }
                }
                Ok(other) => {
                    return Err(WireError::new(
                        ErrorCode::Io,
                        format!("LIST answered {other:?}"),
                    ));
                }
                // A joiner that never held the group has no partition yet.
                Err(e) if e.code == ErrorCode::NoPartition => return Ok(ids),
                Err(e) => return Err(e),
            }
        }
    }

    /// Copies one object whole to the joiner (the caller holds its lock);
    /// returns its length.
    pub(super) async fn copy_object(
        &self,
        ctx: &crate::exec::Ctx,
        view: &ChainView,
        group: u32,
        joiner: u32,
        oid: u64,
    ) -> Result<u64, WireError> {
        let pid = group_partition(group);
        let s = ctx.store.get()?;
        let st = match s.stat(pid, oid) {
            Ok(st) => st,
            Err(StoreError::NoObject { .. }) => return Ok(0),
            Err(e) => return Err(map_err(e)),
        };
        let attrs: Vec<(AttrKey, Vec<u8>)> = s
            .list_attrs(pid, oid)
            .map_err(map_err)?
            .into_iter()
            .filter(|((page, _), _)| *page >= FIRST_USER_PAGE)
            .map(|((page, number), v)| (AttrKey { page, number }, v))
            .collect();
        let ranges = s.data_ranges(pid, oid).map_err(map_err)?;
        // Built aside (the group's staging partition there), then
        // installed in one step: a copy cut short by a crash of either
        // side leaves the member's old copy whole.
        let (target, pid) = (pid, staging_partition(group, self.me));
        self.remote_remove_in(view, group, joiner, (pid, oid))
            .await?;
        let mut batches = attr_batches(attrs).into_iter();
        let first = batches.next().unwrap_or_default();
        let create = Command::Create {
            pid,
            oid: Some(oid),
            count: 1,
        };
        self.remote(view, group, joiner, create, first, Bytes::new())
            .await?;
        for b in batches {
            self.remote(
                view,
                group,
                joiner,
                Command::SetAttributes { pid, oid },
                b,
                Bytes::new(),
            )
            .await?;
        }
        for (off, len) in ranges {
            let mut at = off;
            while at < off + len {
                let n = CHUNK.min(off + len - at);
                let data = s.read(target, oid, at, n).map_err(map_err)?;
                if !data.is_empty() {
                    let write = Command::Write {
                        pid,
                        oid,
                        offset: at,
                    };
                    self.remote(view, group, joiner, write, vec![], Bytes::from(data))
                        .await?;
                }
                at += n;
            }
        }
        self.remote(
            view,
            group,
            joiner,
            Command::Truncate {
                pid,
                oid,
                len: st.size,
            },
            vec![],
            Bytes::new(),
        )
        .await?;
        if st.version > 0 {
            let sv = Command::SetVersion {
                pid,
                oid,
                version: st.version,
            };
            self.remote(view, group, joiner, sv, vec![], Bytes::new())
                .await?;
        }
        let install = Command::Install { pid: target, oid };
        self.remote(view, group, joiner, install, vec![], Bytes::new())
            .await?;
        Ok(st.size)
    }

    /// Removes `oid` from member `to`'s copy of the group (done when it
    /// was not there).
    pub(super) async fn remote_remove(
        &self,
        view: &ChainView,
        group: u32,
        to: u32,
        oid: u64,
    ) -> Result<(), WireError> {
        self.remote_remove_in(view, group, to, (group_partition(group), oid))
            .await
    }

    /// Removes object `(pid, oid)` on member `to` (a partition of `group`:
    /// its own or its staging one); done when it was not there.
    async fn remote_remove_in(
        &self,
        view: &ChainView,
        group: u32,
        to: u32,
        (pid, oid): (u64, u64),
    ) -> Result<(), WireError> {
        match self
            .remote(
                view,
                group,
                to,
                Command::Remove { pid, oid },
                vec![],
                Bytes::new(),
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.code == ErrorCode::NoObject => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// One command on member `to` of `group`'s chain, as the member before
    /// it or the head.
    pub(super) async fn remote(
        &self,
        view: &ChainView,
        group: u32,
        to: u32,
        cmd: Command,
        set: Vec<(AttrKey, Vec<u8>)>,
        data: Bytes,
    ) -> Result<Reply, WireError> {
        self.remote_answer(view, group, to, cmd, set, data)
            .await
            .map(|a| a.reply)
    }

    /// [`Chains::remote`] with the whole answer (attributes, data).
    pub(super) async fn remote_answer(
        &self,
        view: &ChainView,
        group: u32,
        to: u32,
        cmd: Command,
        set: Vec<(AttrKey, Vec<u8>)>,
        data: Bytes,
    ) -> Result<net::Answer, WireError> {
        let req = Request {
            cap: view.caps.get(&(group, to)).cloned(),
            id: 0,
            cmd,
            get: Vec::new(),
            set,
        };
        let c = self.peer(view, to).map_err(io)?;
        c.call(req, data).await.map_err(io)
    }
}

/// Splits an object's attributes into set lists a member takes: at most
/// [`MAX_ATTR_LIST`] each and at most [`super::FORWARDABLE_HEADER`] bytes
/// each (one attribute is at most 64 KiB, so every list fits).
fn attr_batches(attrs: Vec<(AttrKey, Vec<u8>)>) -> Vec<Vec<(AttrKey, Vec<u8>)>> {
    let mut out: Vec<Vec<(AttrKey, Vec<u8>)>> = Vec::new();
    let mut bytes = 0usize;
    for a in attrs {
        let n = a.1.len() + 32;
        match out.last_mut() {
            Some(b) if b.len() < MAX_ATTR_LIST && bytes + n <= super::FORWARDABLE_HEADER => {
                bytes += n;
                b.push(a);
            }
            _ => {
                bytes = n;
                out.push(vec![a]);
            }
        }
    }
    out
}

#[cfg(test)]
mod batch_tests {
    use super::*;

    #[test]
    fn attribute_batches_are_bounded_in_count_and_bytes() {
        let big: Vec<_> = (0..100u32)
            .map(|i| {
                (
                    AttrKey {
                        page: FIRST_USER_PAGE,
                        number: i,
                    },
                    vec![7u8; 60 << 10],
                )
            })
            .collect();
        let b = attr_batches(big);
        assert!(b.len() >= 12, "{}", b.len());
        for l in &b {
            let bytes: usize = l.iter().map(|a| a.1.len()).sum();
            assert!(bytes <= super::super::FORWARDABLE_HEADER);
        }
        assert_eq!(b.iter().map(Vec::len).sum::<usize>(), 100);
        let small: Vec<_> = (0..3000u32)
            .map(|i| {
                (
                    AttrKey {
                        page: FIRST_USER_PAGE,
                        number: i,
                    },
                    vec![1u8; 4],
                )
            })
            .collect();
        let b = attr_batches(small);
        assert_eq!(b.len(), 3);
        assert!(b.iter().all(|l| l.len() <= MAX_ATTR_LIST));
    }
}
