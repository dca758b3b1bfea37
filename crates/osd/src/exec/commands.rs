//! The commands themselves, by family (an object's life, its data, its
//! attributes), and the attribute lists a request piggybacks on its
//! command. [`super::run`] has taken the locks and made every check
//! before any of these runs.

use bytes::Bytes;
use proto::WireError;
use proto::msg::{AttrKey, Command, MAX_PAGE_BYTES, Reply, Request};
use store::{Store, StoreError};

use super::need::target;
use super::{Ctx, map_err};

/// Which family of commands a command belongs to.
enum Family {
    /// Partitions and objects made, removed, moved, versioned, counted.
    Objects,
    /// An object's bytes.
    Data,
    /// An object's attributes, and listings of objects.
    Attributes,
    /// Not served here (a chain's command on an OSD without chains).
    Elsewhere,
}

/// The table: each command's family.
fn family(cmd: &Command) -> Family {
    match cmd {
        Command::Forward(_) | Command::ScrubGroup { .. } => Family::Elsewhere,
        Command::Read { .. }
        | Command::Write { .. }
        | Command::Append { .. }
        | Command::CreateAndWrite { .. }
        | Command::Truncate { .. }
        | Command::Punch { .. }
        | Command::Reserve { .. }
        | Command::Copy { .. }
        | Command::DataRanges { .. }
        | Command::Digest { .. } => Family::Data,
        Command::List { .. }
        | Command::GetAttributes { .. }
        | Command::SetAttributes { .. }
        | Command::Cas { .. }
        | Command::FetchAdd { .. }
        | Command::GetPage { .. } => Family::Attributes,
        Command::Format { .. }
        | Command::Statfs
        | Command::CreatePartition { .. }
        | Command::RemovePartition { .. }
        | Command::Create { .. }
        | Command::Remove { .. }
        | Command::Install { .. }
        | Command::RemoveObjects { .. }
        | Command::Flush { .. }
        | Command::SetVersion { .. } => Family::Objects,
    }
}

/// Runs `req`'s command on `s` (FORMAT excepted: [`super::run`] runs it);
/// a READ's bytes go to `out`.
pub(super) fn command(
    ctx: &Ctx,
    holder: u64,
    s: &Store,
    req: &Request,
    payload: &Bytes,
    out: &mut Bytes,
) -> Result<Reply, WireError> {
    match family(&req.cmd) {
        Family::Elsewhere => {
            return Err(WireError::bad(
                "command",
                format!(
                    "{} reaches only an OSD that keeps replica chains",
                    req.cmd.name()
                ),
            ));
        }
        Family::Objects => objects(s, holder, req),
        Family::Data => data(s, req, payload, out),
        Family::Attributes => attributes(ctx, s, req),
    }
    .map_err(map_err)
}

/// A command outside its family (the table above and a match below
/// disagree: a bug, answered as one).
fn misfiled(cmd: &Command) -> StoreError {
    StoreError::Failed(format!("{} dispatched to the wrong family", cmd.name()))
}

fn objects(s: &Store, holder: u64, req: &Request) -> Result<Reply, StoreError> {
    match &req.cmd {
        Command::CreatePartition { pid } => s.create_partition(*pid).map(|()| Reply::Done),
        Command::RemovePartition { pid } => s.remove_partition(*pid).map(|()| Reply::Done),
        Command::Create {
            pid,
            oid: Some(oid),
            count: 1,
        } if !req.set.is_empty() => {
            // One object with attributes: one commit, so a crash leaves the
            // object with all of them or no object at all.
            s.create_with_attrs(*pid, *oid, &set_list(&req.set))
                .map(|()| Reply::Created(vec![*oid]))
        }
        Command::Create { pid, oid, count } => {
            let mut ids = Vec::with_capacity(*count as usize);
            for i in 0..u64::from(*count) {
                let want = oid.map(|o| o + i);
                match s.create(*pid, want) {
                    Ok(id) => ids.push(id),
                    Err(e) if ids.is_empty() => return Err(e),
                    Err(_) => break,
                }
            }
            Ok(Reply::Created(ids))
        }
        Command::Remove { pid, oid } => s.remove(*pid, *oid).map(|()| Reply::Done),
        Command::Install { pid, oid } => install(s, holder, *pid, *oid),
        Command::RemoveObjects { pid, oids } => s
            .remove_many(*pid, oids)
            .map(|(removed, absent)| Reply::Removed { removed, absent }),
        Command::Flush { .. } => s.flush().map(|()| Reply::Done),
        Command::SetVersion { pid, oid, version } => {
            s.set_version(*pid, *oid, *version).map(|()| Reply::Done)
        }
        Command::Statfs => {
            let f = s.statfs();
            Ok(Reply::Statfs {
                total_bytes: f.total_bytes,
                free_bytes: f.free_bytes,
                objects: f.objects,
            })
        }
        other => Err(misfiled(other)),
    }
}

fn data(s: &Store, req: &Request, payload: &Bytes, out: &mut Bytes) -> Result<Reply, StoreError> {
    match &req.cmd {
        Command::Read {
            pid,
            oid,
            offset,
            len,
        } => s
            .read(*pid, *oid, *offset, u64::from(*len))
            .and_then(|data| {
                let size = s.stat(*pid, *oid)?.size;
                *out = Bytes::from(data);
                Ok(Reply::Read { size })
            }),
        Command::Write { pid, oid, offset } => {
            s.write(*pid, *oid, *offset, payload).map(|()| Reply::Done)
        }
        Command::Append { pid, oid } => s
            .append(*pid, *oid, payload)
            .map(|offset| Reply::Appended { offset }),
        Command::CreateAndWrite { pid, oid } => s
            .create_and_write(*pid, *oid, payload)
            .map(|()| Reply::Done),
        Command::Truncate { pid, oid, len } => s.truncate(*pid, *oid, *len).map(|()| Reply::Done),
        Command::Punch {
            pid,
            oid,
            offset,
            len,
        } => s.punch(*pid, *oid, *offset, *len).map(|()| Reply::Done),
        Command::Reserve {
            pid,
            oid,
            offset,
            len,
        } => s
            .reserve(*pid, *oid, *offset, *len, true)
            .map(|()| Reply::Done),
        Command::Copy {
            pid,
            oid,
            offset,
            src_oid,
            src_offset,
            len,
            ..
        } => copy(s, *pid, (*src_oid, *src_offset), (*oid, *offset), *len),
        Command::DataRanges { pid, oid } => s.data_ranges(*pid, *oid).map(|mut r| {
            if r.len() > proto::msg::MAX_DATA_RANGES {
                let (o, _) = r[proto::msg::MAX_DATA_RANGES - 1];
                let (lo, ll) = r[r.len() - 1];
                r.truncate(proto::msg::MAX_DATA_RANGES);
                r[proto::msg::MAX_DATA_RANGES - 1] = (o, lo + ll - o);
            }
            Reply::DataRanges(r)
        }),
        Command::Digest { pid, oid, deep } => crate::digest::digest(s, *pid, *oid, *deep),
        other => Err(misfiled(other)),
    }
}

fn attributes(ctx: &Ctx, s: &Store, req: &Request) -> Result<Reply, StoreError> {
    match &req.cmd {
        Command::List {
            pid,
            lo,
            hi,
            after,
            max,
            attrs: want,
        } => s
            .list(*pid, *lo, *hi, *after, *max as usize)
            .and_then(|page| {
                let mut entries = Vec::with_capacity(page.ids.len());
                // Attributes of objects revoked after the capability was issued
                // are withheld (the id itself is covered by LIST).
                let cap_version = if ctx.keys.is_some() {
                    req.cap.as_ref().map(|c| c.version)
                } else {
                    None
                };
                for id in page.ids {
                    let mut a = Vec::new();
                    let revoked = match cap_version {
                        Some(v) if !want.is_empty() => s.stat(*pid, id)?.version >= v,
                        _ => false,
                    };
                    for k in want.iter().filter(|_| !revoked) {
                        if let Some(v) = s.get_attr(*pid, id, k.page, k.number)? {
                            a.push((*k, v));
                        }
                    }
                    entries.push((id, a));
                }
                Ok(Reply::Listed {
                    entries,
                    next: page.next,
                })
            }),
        Command::GetAttributes { .. } | Command::SetAttributes { .. } => Ok(Reply::Done),
        Command::Cas {
            pid,
            oid,
            key,
            expected,
            new,
        } => s
            .cas_attr(*pid, *oid, key.page, key.number, expected, new)
            .map(|o| Reply::Cas {
                swapped: o.swapped,
                old: o.old,
            }),
        Command::FetchAdd {
            pid,
            oid,
            key,
            delta,
        } => s
            .fetch_add(*pid, *oid, key.page, key.number, *delta)
            .map(|old| Reply::FetchAdd { old }),
        Command::GetPage {
            pid,
            oid,
            page,
            after,
            max,
        } => s
            .page_attrs(*pid, *oid, *page, *after, *max as usize, MAX_PAGE_BYTES)
            .map(|(attrs, next)| Reply::Page { attrs, next }),
        other => Err(misfiled(other)),
    }
}

/// The request's set and get attribute lists, acting on the command's
/// object after the command ran (`reply`); what was got goes to `attrs`.
pub(super) fn piggyback(
    s: &Store,
    req: &Request,
    reply: &Reply,
    attrs: &mut Vec<(AttrKey, Vec<u8>)>,
) -> Result<(), WireError> {
    // Piggybacked attribute lists act on the command's object.
    let obj = target(&req.cmd).or(match req.cmd {
        Command::CreateAndWrite { pid, oid } => Some((pid, oid)),
        Command::Create {
            pid,
            oid: Some(o),
            count: 1,
        } => Some((pid, o)),
        _ => None,
    });
    if (!req.set.is_empty()
        || !req.get.is_empty()
        || matches!(req.cmd, Command::GetAttributes { .. }))
        && obj.is_none()
    {
        return Err(WireError::bad(
            "attribute list",
            format!("{} acts on no single object", req.cmd.name()),
        ));
    }
    if let Some((pid, oid)) = obj {
        let created_with_set = matches!(req.cmd, Command::Create { .. });
        // A compare-and-swap's set list goes with the swap: applied only
        // when it swapped (a directory entry and its directory's change
        // time, in one request).
        let cas_failed = matches!(*reply, Reply::Cas { swapped: false, .. });
        if !req.set.is_empty() && !created_with_set && !cas_failed {
            // All of the set list in one commit.
            s.set_attrs(pid, oid, &set_list(&req.set))
                .map_err(map_err)?;
        }
        if matches!(req.cmd, Command::GetAttributes { .. }) && req.get.is_empty() {
            for ((page, number), v) in s
                .list_attrs_within(pid, oid, MAX_PAGE_BYTES)
                .map_err(map_err)?
            {
                attrs.push((AttrKey { page, number }, v));
            }
        } else {
            for k in &req.get {
                if let Some(v) = s.get_attr(pid, oid, k.page, k.number).map_err(map_err)? {
                    attrs.push((*k, v));
                }
            }
        }
    }
    Ok(())
}

/// INSTALL from `principal` (a chain member): the copy of `oid` it staged
/// replaces the object.
fn install(s: &Store, principal: u64, pid: u64, oid: u64) -> Result<Reply, StoreError> {
    let Some(group) = proto::chain::partition_group(pid) else {
        return Err(StoreError::invalid("partition", "not a replica group's"));
    };
    if principal & (1 << 63) == 0 {
        return Err(StoreError::invalid(
            "principal",
            "only a chain member installs",
        ));
    }
    let from = proto::chain::staging_partition(group, principal as u32);
    s.move_object((from, oid), (pid, oid)).map(|()| Reply::Done)
}

/// Copies `len` bytes of `src` at `src_off` to `dst` at `dst_off` (COPY):
/// read through the store's checksums, then one durable write (bytes past
/// the source's end are zeros); a missing destination is created.
fn copy(
    s: &Store,
    pid: u64,
    (src, src_off): (u64, u64),
    (dst, dst_off): (u64, u64),
    len: u32,
) -> Result<Reply, StoreError> {
    let mut data = s.read(pid, src, src_off, u64::from(len))?;
    data.resize(len as usize, 0);
    match s.write(pid, dst, dst_off, &data) {
        Err(StoreError::NoObject { .. }) if dst_off == 0 => s.create_and_write(pid, dst, &data),
        Err(StoreError::NoObject { .. }) => {
            match s.create(pid, Some(dst)) {
                Ok(_) | Err(StoreError::ObjectExists { .. }) => {}
                Err(e) => return Err(e),
            }
            s.write(pid, dst, dst_off, &data)
        }
        other => other,
    }?;
    Ok(Reply::Copied { len })
}

/// A request's set list in the store's terms.
pub(super) fn set_list(set: &[(AttrKey, Vec<u8>)]) -> Vec<((u32, u32), Vec<u8>)> {
    set.iter()
        .map(|(k, v)| ((k.page, k.number), v.clone()))
        .collect()
}
