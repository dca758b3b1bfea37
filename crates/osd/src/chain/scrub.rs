//! Comparing a group's copies and repairing them from a good one.
//!
//! - **Scrub** (SCRUB GROUP, asked of the head by the MDS): under each
//!   object's chain lock, so no change of it is on its way down, the
//!   head's copy (size, version, user attributes, and with `deep` the
//!   digest of every byte) is compared with every other full member's; a
//!   copy that differs or is missing is replaced by the head's, and
//!   objects a member holds that the head does not are removed. The head
//!   is the reference because a chain's head holds everything its later
//!   members hold.
//! - **Read repair**: a read at the head that meets a checksum error
//!   fetches the object whole from the first other member whose copy
//!   reads, replaces the head's copy and reads again.

use std::collections::{HashMap, HashSet};

use bytes::Bytes;
use proto::chain::group_partition;
use proto::msg::{AttrKey, Command, Reply};
use proto::{ErrorCode, WireError};
use store::StoreError;

use super::{ChainView, Chains};
use crate::exec::{Ctx, map_err};

/// The store's own attribute pages are below this one.
const FIRST_USER_PAGE: u32 = 0x10;
/// Ids per local page.
const PAGE: usize = 1000;
/// Object ids start here.
const FIRST_OID: u64 = 0x1_0000;
/// Most problems reported.
const MAX_PROBLEMS: usize = 100;
/// Bytes fetched per READ in a repair.
const CHUNK: u64 = 1 << 20;

/// The digest of a list of attributes (user pages only, in order; not the
/// change stamp, which a copy that took the same bytes by another way, a
/// change that failed or a cut-short effect, may hold another of).
fn attr_hash(attrs: impl Iterator<Item = ((u32, u32), Vec<u8>)>) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    let mut v: Vec<((u32, u32), Vec<u8>)> = attrs
        .filter(|((page, _), _)| *page >= FIRST_USER_PAGE && *page != proto::chain::STAMP.page)
        .collect();
    v.sort();
    for ((page, number), value) in v {
        h.update(&page.to_le_bytes());
        h.update(&number.to_le_bytes());
        h.update(&(value.len() as u64).to_le_bytes());
        h.update(&value);
    }
    h.digest()
}

/// Size, version and hash of a DIGEST answer.
fn digest_of(r: Reply) -> Result<(u64, u64, u64), WireError> {
    match r {
        Reply::Digest {
            size,
            version,
            hash,
        } => Ok((size, version, hash)),
        other => Err(WireError::new(
            ErrorCode::Io,
            format!("DIGEST answered {other:?}"),
        )),
    }
}

/// What is compared of one copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct CopyDigest {
    /// Length in bytes.
    size: u64,
    /// The object's version.
    version: u64,
    /// Digest of every byte (deep scrub; else 0).
    content: u64,
    /// Digest of the user attributes.
    attrs: u64,
}

impl Chains {
    /// SCRUB GROUP at the head.
    pub(super) async fn scrub_group(
        &self,
        ctx: &Ctx,
        group: u32,
        deep: bool,
    ) -> Result<Reply, WireError> {
        let view = self.refresh(None).await?;
        let chain = view.table.chain(group).cloned().unwrap_or_default();
        if chain.head() != Some(self.me) {
            return Err(super::not_head(format!(
                "OSD {} is not the head of group {group}",
                self.me
            )));
        }
        let pid = group_partition(group);
        self.ensure_partition(ctx, pid)?;
        let others: Vec<u32> = chain.members.iter().copied().skip(1).collect();
        let mut theirs: HashMap<u32, HashSet<u64>> = HashMap::new();
        for &m in &others {
            let ids = self.remote_ids(&view, group, m).await?;
            theirs.insert(m, ids.into_iter().collect());
        }
        let (mut objects, mut copies, mut inconsistent, mut repaired) = (0, 0, 0, 0);
        let mut problems = Vec::new();
        let mut note = |p: String| {
            if problems.len() < MAX_PROBLEMS {
                problems.push(p);
            }
        };
        let mut after = None;
        loop {
            let page = ctx
                .store
                .get()?
                .list(pid, FIRST_OID, u64::MAX, after, PAGE)
                .map_err(map_err)?;
            for &oid in &page.ids {
                let _held = self.lock_objects(&Command::Remove { pid, oid }).await;
                let mine = match self.local_digest(ctx, pid, oid, deep) {
                    Ok(d) => d,
                    // The head's own copy is bad: made again from the
                    // first member whose copy reads (then compared as
                    // usual), rather than stop the group's scrub.
                    Err(e) if e.code == ErrorCode::Checksum => {
                        inconsistent += 1;
                        match self
                            .heal_head(ctx, &view, (group, &others), oid, deep)
                            .await
                        {
                            Ok((from, d)) => {
                                repaired += 1;
                                note(format!(
                                    "group {group} object {oid:#x} on OSD {} (the head): {e}; \
                                     repaired from OSD {from}",
                                    self.me
                                ));
                                d
                            }
                            Err(why) => {
                                note(format!(
                                    "group {group} object {oid:#x} on OSD {} (the head): {e}; \
                                     no member's copy could repair it: {why}",
                                    self.me
                                ));
                                objects += 1;
                                continue;
                            }
                        }
                    }
                    Err(e) => return Err(e),
                };
                let Some(mine) = mine else {
                    continue;
                };
                objects += 1;
                for &m in &others {
                    theirs.get_mut(&m).map(|t| t.remove(&oid));
                    copies += 1;
                    let found = self.remote_digest(&view, group, m, oid, deep).await;
                    let why = match found {
                        Ok(Some(d)) if d == mine => continue,
                        Ok(Some(d)) => format!(
                            "differs (size, version, content, attributes {d:?}, head's {mine:?})"
                        ),
                        Ok(None) => "missing".to_string(),
                        Err(e) => format!("unreadable: {e}"),
                    };
                    inconsistent += 1;
                    match self.copy_object(ctx, &view, group, m, oid).await {
                        Ok(_) => {
                            repaired += 1;
                            note(format!(
                                "group {group} object {oid:#x} on OSD {m}: {why}; repaired from OSD {}",
                                self.me
                            ));
                        }
                        Err(e) => note(format!(
                            "group {group} object {oid:#x} on OSD {m}: {why}; repair failed: {e}"
                        )),
                    }
                }
            }
            match page.next {
                Some(n) => after = Some(n),
                None => break,
            }
        }
        for (m, extra) in theirs {
            for oid in extra {
                let _held = self.lock_objects(&Command::Remove { pid, oid }).await;
                if self.local_digest(ctx, pid, oid, false)?.is_some() {
                    continue;
                }
                inconsistent += 1;
                match self.remote_remove(&view, group, m, oid).await {
                    Ok(()) => {
                        repaired += 1;
                        note(format!(
                            "group {group} object {oid:#x} on OSD {m}: not on the head; removed"
                        ));
                    }
                    Err(e) => note(format!(
                        "group {group} object {oid:#x} on OSD {m}: not on the head; removal failed: {e}"
                    )),
                }
            }
        }
        Ok(Reply::Scrubbed {
            objects,
            copies,
            inconsistent,
            repaired,
            problems,
        })
    }

    /// This OSD's copy's digest; `None` when it does not hold the object.
    fn local_digest(
        &self,
        ctx: &Ctx,
        pid: u64,
        oid: u64,
        deep: bool,
    ) -> Result<Option<CopyDigest>, WireError> {
        let s = ctx.store.get()?;
        let d = tokio::task::block_in_place(|| crate::digest::digest(&s, pid, oid, deep));
        let (size, version, hash) = match d {
            Ok(r) => digest_of(r)?,
            Err(StoreError::NoObject { .. }) => return Ok(None),
            Err(e) => return Err(map_err(e)),
        };
        let attrs = s.list_attrs(pid, oid).map_err(map_err)?;
        Ok(Some(CopyDigest {
            size,
            version,
            content: hash,
            attrs: attr_hash(attrs.into_iter()),
        }))
    }

    /// Member `m`'s copy's digest; `None` when it does not hold the object.
    async fn remote_digest(
        &self,
        view: &ChainView,
        group: u32,
        m: u32,
        oid: u64,
        deep: bool,
    ) -> Result<Option<CopyDigest>, WireError> {
        let pid = group_partition(group);
        let d = self
            .remote(
                view,
                group,
                m,
                Command::Digest { pid, oid, deep },
                vec![],
                Bytes::new(),
            )
            .await;
        let (size, version, hash) = match d {
            Ok(r) => digest_of(r)?,
            Err(e) if e.code == ErrorCode::NoObject => return Ok(None),
            Err(e) => return Err(e),
        };
        let a = self
            .remote_answer(
                view,
                group,
                m,
                Command::GetAttributes { pid, oid },
                vec![],
                Bytes::new(),
            )
            .await?;
        let attrs = a.attrs.into_iter().map(|(k, v)| ((k.page, k.number), v));
        Ok(Some(CopyDigest {
            size,
            version,
            content: hash,
            attrs: attr_hash(attrs),
        }))
    }

    /// Makes the head's bad copy of `oid` again from the first of
    /// `members` whose copy reads whole; answers that member and the new
    /// digest.
    pub(super) async fn heal_head(
        &self,
        ctx: &Ctx,
        view: &ChainView,
        (group, members): (u32, &[u32]),
        oid: u64,
        deep: bool,
    ) -> Result<(u32, Option<CopyDigest>), String> {
        let pid = group_partition(group);
        let mut why = String::from("no other member");
        for &m in members {
            match self.repair_from(ctx, view, group, m, oid).await {
                Ok(()) => match self.local_digest(ctx, pid, oid, deep) {
                    Ok(d) => return Ok((m, d)),
                    Err(e) => why = format!("from OSD {m}: still bad: {e}"),
                },
                Err(e) => why = format!("from OSD {m}: {e}"),
            }
        }
        Err(why)
    }

    /// Replaces this OSD's copy of `oid` with member `from`'s (the caller
    /// holds the object's lock).
    pub(super) async fn repair_from(
        &self,
        ctx: &Ctx,
        view: &ChainView,
        group: u32,
        from: u32,
        oid: u64,
    ) -> Result<(), WireError> {
        let pid = group_partition(group);
        let digest = Command::Digest {
            pid,
            oid,
            deep: false,
        };
        let (size, version, _) = digest_of(
            self.remote(view, group, from, digest, vec![], Bytes::new())
                .await?,
        )?;
        let attrs: Vec<((u32, u32), Vec<u8>)> = self
            .remote_answer(
                view,
                group,
                from,
                Command::GetAttributes { pid, oid },
                vec![],
                Bytes::new(),
            )
            .await?
            .attrs
            .into_iter()
            .filter(|(k, _)| k.page >= FIRST_USER_PAGE)
            .map(|(k, v): (AttrKey, Vec<u8>)| ((k.page, k.number), v))
            .collect();
        let ranges = match self
            .remote(
                view,
                group,
                from,
                Command::DataRanges { pid, oid },
                vec![],
                Bytes::new(),
            )
            .await?
        {
            Reply::DataRanges(r) => r,
            other => {
                return Err(WireError::new(
                    ErrorCode::Io,
                    format!("DATA RANGES answered {other:?}"),
                ));
            }
        };
        let mut pieces: Vec<(u64, Bytes)> = Vec::new();
        for (off, len) in ranges {
            let mut at = off;
            while at < off + len {
                let n = CHUNK.min(off + len - at);
                let cmd = Command::Read {
                    pid,
                    oid,
                    offset: at,
                    len: n as u32,
                };
                let a = self
                    .remote_answer(view, group, from, cmd, vec![], Bytes::new())
                    .await?;
                pieces.push((at, a.data));
                at += n;
            }
        }
        // Built aside and installed in one step: a crash part-way leaves
        // the old copy, not a part of the new one.
        let aside = proto::chain::staging_partition(group, self.me);
        self.ensure_partition(ctx, aside)?;
        let s = ctx.store.get()?;
        let built = tokio::task::block_in_place(|| {
            match s.remove(aside, oid) {
                Ok(()) | Err(StoreError::NoObject { .. }) => {}
                Err(e) => return Err(e),
            }
            s.create_with_attrs(aside, oid, &attrs)?;
            for (at, data) in &pieces {
                if !data.is_empty() {
                    s.write(aside, oid, *at, data)?;
                }
            }
            s.truncate(aside, oid, size)?;
            if version > 0 {
                s.set_version(aside, oid, version)?;
            }
            s.move_object((aside, oid), (pid, oid))
        });
        if let Err(e) = built {
            // What was built aside is space, not data.
            let _ = s.remove(aside, oid);
            return Err(map_err(e));
        }
        tracing::warn!(
            group,
            oid,
            from,
            "repaired a bad copy from the next chain member"
        );
        Ok(())
    }
}
