//! Files' layouts in the namespace: a directory's default, an empty
//! file's own, object sets added as a file grows, and where the copies
//! of an object set go. Each runs inside the caller's KV transaction.

use posix::perm::{self, W};
use proto::clock::now_ns;
use proto::layout::{Copies, Homes, LayoutSpec, data_oid};
use proto::mds::{Creds, Errno, FileKind, MdsError};
use proto::placement::OsdMap;

use crate::ids::IdPolicy;
use crate::kv::{T, Tx};
use crate::records::{Inode, Records, num_key, taken};

use proto::mds::err;

/// Sets a directory's default layout (new files in it and new
/// subdirectories inherit it) or an empty file's layout.
pub fn set_layout(tx: &mut Tx, c: &Creds, ino: u64, spec: LayoutSpec) -> Result<Inode, MdsError> {
    spec.validate()
        .map_err(|m| err(Errno::Inval, m.to_string()))?;
    let mut i = tx.live_inode(ino)?;
    perm::owner(&i.attr, c, "set layout")?;
    match (i.attr.kind, i.dir.as_mut(), i.layout.as_mut()) {
        (FileKind::Dir, Some(d), _) => d.default_layout = spec,
        (FileKind::File, _, Some(l)) => {
            if i.attr.size != 0 {
                return Err(err(
                    Errno::Busy,
                    "a file's layout can only change while it is empty",
                ));
            }
            let st = tx.state()?;
            let map = tx.map(st.map_epoch)?.unwrap_or_default();
            l.spec = LayoutSpec {
                stripe_count: capped_stripes(&spec, &map),
                ..spec
            };
            // Empty: no data to move, so the copies are placed afresh.
            l.map_epoch = map.epoch;
            l.homes = l
                .objsets
                .iter()
                .map(|&oid| homes_for(&map, &l.spec, oid))
                .collect();
        }
        _ => return Err(err(Errno::Inval, "only directories and files have layouts")),
    }
    i.attr.ctime = now_ns();
    tx.put_inode(&i)?;
    Ok(i)
}

/// Most object sets a file may have: every open signs a grant per object
/// set, so this bounds an open's work and reply (security finding 8).
pub const MAX_OBJSETS: u64 = 4096;

/// Allocates object sets of a file up to `objset` (bounded object size;
/// `opened` as for [`commit_size`]).
pub fn extend_layout(
    tx: &mut Tx,
    policy: &IdPolicy,
    c: &Creds,
    (ino, objset): (u64, u64),
    opened: bool,
) -> Result<Inode, MdsError> {
    let mut i = tx.live_inode(ino)?;
    if !opened && c.uid != i.attr.uid {
        perm::check(&i.attr, c, W, "extend layout")?;
    }
    let Some(l) = i.layout.as_ref() else {
        return Err(err(Errno::Inval, "only files have layouts"));
    };
    if l.spec.object_size == 0 {
        return Err(err(
            Errno::Inval,
            "this file's objects are unbounded: it has one object set",
        ));
    }
    if objset >= MAX_OBJSETS {
        let set_bytes = l.spec.object_size * u64::from(l.spec.stripe_count);
        return Err(err(
            Errno::FBig,
            format!(
                "object set {objset} is beyond a file's {MAX_OBJSETS} object sets ({} bytes with \
                 object size {} × stripe count {}); give the file a larger object size",
                set_bytes.saturating_mul(MAX_OBJSETS),
                l.spec.object_size,
                l.spec.stripe_count
            ),
        ));
    }
    let mut st = tx.state()?;
    let map = tx.map(st.map_epoch)?.unwrap_or_default();
    let mut added = Vec::new();
    let have = l.objsets.len() as u64;
    for _ in have..=objset {
        let id = policy.loose_id(&mut st.ids, &mut taken(tx));
        tx.put(T::Objsets, &num_key(id), &ino.to_le_bytes())?;
        added.push(data_oid(id));
    }
    if let Some(l) = i.layout.as_mut() {
        if l.homes.len() == l.objsets.len() {
            let spec = l.spec;
            l.homes
                .extend(added.iter().map(|&oid| homes_for(&map, &spec, oid)));
        }
        l.objsets.extend(added);
    }
    tx.put_state(&st)?;
    tx.put_inode(&i)?;
    Ok(i)
}

/// The stripe count a new file gets: what its spec asks, but no more than
/// the OSDs can hold with every stripe's copies on distinct OSDs (at least 1).
pub fn capped_stripes(spec: &LayoutSpec, map: &OsdMap) -> u32 {
    let per = map.placeable() as u32 / u32::from(spec.replicas.max(1));
    spec.stripe_count.min(per).max(1)
}

/// Where the copies of object set `oid` go under `map` (see
/// [`OsdMap::place_copies`]); all fresh.
pub fn homes_for(map: &OsdMap, spec: &LayoutSpec, oid: u64) -> Homes {
    Homes {
        stripes: map
            .place_copies(oid, spec.stripe_count, u32::from(spec.replicas.max(1)))
            .into_iter()
            .map(|fresh| Copies {
                fresh,
                stale: Vec::new(),
            })
            .collect(),
    }
}
