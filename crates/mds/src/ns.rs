//! Namespace operations with POSIX semantics, each run inside one KV
//! transaction (so each is atomic: a crash leaves all of it or none).
//! Every operation checks everything before its first write; the KV also
//! undoes a failed operation's writes, as a second line of defence.

use posix::perm::{self, R, W, X};
use posix::{apply_setattr, check_name, check_xattr_name, new_attr};
use proto::layout::{Layout, LayoutSpec, data_oid};
use proto::mds::{
    Attr, Creds, Errno, FileKind, MdsError, PATH_MAX, ROOT_INO, SetAttr, XATTR_VALUE_MAX, XattrMode,
};

use crate::ids::IdPolicy;
use crate::kv::{T, Tx, View};
use crate::records::{DeleteJob, DirMeta, FsState, Inode, Records, dentry_key, num_key, xattr_key};

/// Most hard links to one file.
pub const LINK_MAX: u32 = 65_000;

use proto::clock::now_ns;

pub use crate::layouts::{MAX_OBJSETS, capped_stripes, extend_layout, homes_for, set_layout};

use proto::mds::err;

/// Formats an empty namespace: the root directory, owned by root, mode 0755.
pub fn format_root(
    tx: &mut Tx,
    policy: &IdPolicy,
    layout: LayoutSpec,
    now: i64,
) -> Result<(), MdsError> {
    let attr = Attr {
        rdev: 0,
        ino: ROOT_INO,
        kind: FileKind::Dir,
        mode: 0o755,
        nlink: 2,
        uid: 0,
        gid: 0,
        size: 0,
        atime: now,
        mtime: now,
        ctime: now,
    };
    tx.put_inode(&Inode {
        attr,
        parent: ROOT_INO,
        name: String::new(),
        layout: None,
        target: None,
        dir: Some(DirMeta {
            entries: 0,
            ids: policy.root(),
            default_layout: layout,
        }),
    })?;
    let st = FsState {
        cap_version: 1,
        inodes: 1,
        ..FsState::default()
    };
    tx.put_state(&st)
}

/// Looks `name` up in `parent` (needs search permission on `parent`).
pub fn lookup(v: &impl Records, c: &Creds, parent: u64, name: &str) -> Result<Inode, MdsError> {
    check_name(name)?;
    let dir = v.dir_inode(parent)?;
    perm::check(&dir.attr, c, X, "lookup")?;
    let (ino, _) = v.dentry(parent, name)?.ok_or_else(|| {
        err(
            Errno::NoEnt,
            format!("{name:?} not found in directory {parent:#x}"),
        )
    })?;
    v.live_inode(ino)
}

/// A directory the caller may add or remove names in.
fn writable_dir(tx: &Tx, c: &Creds, parent: u64, what: &str) -> Result<Inode, MdsError> {
    let dir = tx.dir_inode(parent)?;
    perm::check(&dir.attr, c, W | X, what)?;
    Ok(dir)
}

pub(crate) use crate::records::taken;

/// Inserts a new inode named `name` in `dir` (all checks done by the caller).
fn link_new(
    tx: &mut Tx,
    st: &mut FsState,
    dir: &mut Inode,
    name: &str,
    mut inode: Inode,
    now: i64,
) -> Result<Inode, MdsError> {
    inode.parent = dir.attr.ino;
    inode.name = name.to_string();
    tx.put_inode(&inode)?;
    add_entry(tx, dir, name, inode.attr.ino, inode.attr.kind, now)?;
    st.inodes += 1;
    tx.put_state(st)?;
    Ok(inode)
}

/// Creates a regular file; if it exists and `exclusive` is false, returns
/// the existing file (after checking it may be opened for writing).
/// Returns the inode and whether it was created.
pub fn create(
    tx: &mut Tx,
    policy: &IdPolicy,
    c: &Creds,
    parent: u64,
    name: &str,
    mode: u32,
    exclusive: bool,
) -> Result<(Inode, bool), MdsError> {
    check_name(name)?;
    let mut dir = tx.dir_inode(parent)?;
    perm::check(&dir.attr, c, X, "create")?;
    if let Some((ino, kind)) = tx.dentry(parent, name)? {
        if exclusive {
            return Err(err(Errno::Exist, format!("{name:?} exists in {parent:#x}")));
        }
        if kind == FileKind::Dir {
            return Err(err(Errno::IsDir, format!("{name:?} is a directory")));
        }
        let i = tx.live_inode(ino)?;
        perm::check(&i.attr, c, W, "open for writing")?;
        return Ok((i, false));
    }
    perm::check(&dir.attr, c, W | X, "create")?;
    let mut st = tx.state()?;
    let map = tx
        .map(st.map_epoch)?
        .filter(|m| m.placeable() > 0)
        .ok_or_else(|| {
            err(
                Errno::NoSpc,
                "no OSD has registered with the MDS yet: nowhere to put data",
            )
        })?;
    let meta = dir
        .dir
        .as_mut()
        .ok_or_else(|| err(Errno::NotDir, "not a directory"))?;
    let mut spec = meta.default_layout;
    let ino = {
        let mut ids = meta.ids.clone();
        let id = policy.file_id(&mut ids, &mut st.ids, &mut taken(tx));
        if let Some(m) = dir.dir.as_mut() {
            m.ids = ids;
        }
        id
    };
    spec.stripe_count = capped_stripes(&spec, &map);
    let now = now_ns();
    let inode = Inode {
        attr: new_attr(ino, FileKind::File, mode, c, &dir.attr, now),
        parent,
        name: name.into(),
        layout: Some(Layout {
            spec,
            map_epoch: map.epoch,
            objsets: vec![data_oid(ino)],
            homes: vec![homes_for(&map, &spec, data_oid(ino))],
        }),
        target: None,
        dir: None,
    };
    Ok((link_new(tx, &mut st, &mut dir, name, inode, now)?, true))
}

/// Makes a directory.
pub fn mkdir(
    tx: &mut Tx,
    policy: &IdPolicy,
    c: &Creds,
    parent: u64,
    name: &str,
    mode: u32,
) -> Result<Inode, MdsError> {
    check_name(name)?;
    let mut dir = writable_dir(tx, c, parent, "mkdir")?;
    if tx.dentry(parent, name)?.is_some() {
        return Err(err(Errno::Exist, format!("{name:?} exists in {parent:#x}")));
    }
    if dir.attr.nlink >= LINK_MAX {
        return Err(err(
            Errno::MLink,
            format!("directory {parent:#x} has too many subdirectories"),
        ));
    }
    let mut st = tx.state()?;
    let meta = dir
        .dir
        .as_ref()
        .ok_or_else(|| err(Errno::NotDir, "not a directory"))?;
    let default_layout = meta.default_layout;
    let mut ids = meta.ids.clone();
    let (ino, child_ids) = policy.dir_id(&mut ids, &mut st.ids, &mut taken(tx));
    if let Some(m) = dir.dir.as_mut() {
        m.ids = ids;
    }
    let now = now_ns();
    let inode = Inode {
        attr: new_attr(ino, FileKind::Dir, mode, c, &dir.attr, now),
        parent,
        name: name.into(),
        layout: None,
        target: None,
        dir: Some(DirMeta {
            entries: 0,
            ids: child_ids,
            default_layout,
        }),
    };
    link_new(tx, &mut st, &mut dir, name, inode, now)
}

/// For a new non-directory `name` in `dir` (EEXIST if taken): the state
/// and an inode number from `dir`'s id policy (the directory's id state is
/// updated in `dir`, stored by [`link_new`]).
fn new_name_and_id(
    tx: &Tx,
    policy: &IdPolicy,
    dir: &mut Inode,
    name: &str,
) -> Result<(FsState, u64), MdsError> {
    let parent = dir.attr.ino;
    if tx.dentry(parent, name)?.is_some() {
        return Err(err(Errno::Exist, format!("{name:?} exists in {parent:#x}")));
    }
    let mut st = tx.state()?;
    let meta = dir
        .dir
        .as_mut()
        .ok_or_else(|| err(Errno::NotDir, "not a directory"))?;
    let ino = policy.file_id(&mut meta.ids, &mut st.ids, &mut taken(tx));
    Ok((st, ino))
}

/// Makes a symbolic link.
pub fn symlink(
    tx: &mut Tx,
    policy: &IdPolicy,
    c: &Creds,
    parent: u64,
    name: &str,
    target: &str,
) -> Result<Inode, MdsError> {
    check_name(name)?;
    let len = posix::raw_len(target);
    if target.is_empty() || len > PATH_MAX || target.contains('\0') {
        return Err(err(
            Errno::Inval,
            format!("symlink target of {len} bytes: must be 1..={PATH_MAX} bytes without NUL"),
        ));
    }
    let mut dir = writable_dir(tx, c, parent, "symlink")?;
    let (mut st, ino) = new_name_and_id(tx, policy, &mut dir, name)?;
    let now = now_ns();
    let mut attr = new_attr(ino, FileKind::Symlink, 0o777, c, &dir.attr, now);
    attr.size = len as u64;
    let inode = Inode {
        attr,
        parent,
        name: name.into(),
        layout: None,
        target: Some(target.into()),
        dir: None,
    };
    link_new(tx, &mut st, &mut dir, name, inode, now)
}

/// Makes a FIFO, device or socket (devices only by root, as `mknod(2)`).
pub fn mknod(
    tx: &mut Tx,
    policy: &IdPolicy,
    c: &Creds,
    parent: u64,
    name: &str,
    (kind, mode, rdev): (FileKind, u32, u32),
) -> Result<Inode, MdsError> {
    check_name(name)?;
    if !kind.is_special() {
        return Err(err(
            Errno::Inval,
            format!(
                "mknod makes FIFOs, devices and sockets, not a {}",
                posix::kind_name(kind)
            ),
        ));
    }
    if kind.is_device() && c.uid != 0 {
        return Err(err(
            Errno::Perm,
            format!("only root may make a {}", posix::kind_name(kind)),
        ));
    }
    let mut dir = writable_dir(tx, c, parent, "mknod")?;
    let (mut st, ino) = new_name_and_id(tx, policy, &mut dir, name)?;
    let now = now_ns();
    let mut attr = new_attr(ino, kind, mode, c, &dir.attr, now);
    if kind.is_device() {
        attr.rdev = rdev;
    }
    let inode = Inode {
        attr,
        parent,
        name: name.into(),
        layout: None,
        target: None,
        dir: None,
    };
    link_new(tx, &mut st, &mut dir, name, inode, now)
}

/// Adds a hard link `parent/name` to file `ino`.
pub fn link(tx: &mut Tx, c: &Creds, ino: u64, parent: u64, name: &str) -> Result<Inode, MdsError> {
    check_name(name)?;
    let mut dir = writable_dir(tx, c, parent, "link")?;
    let mut i = tx.live_inode(ino)?;
    if i.attr.kind == FileKind::Dir {
        return Err(err(
            Errno::Perm,
            "hard links to directories are not allowed",
        ));
    }
    if i.attr.nlink == 0 {
        return Err(err(
            Errno::NoEnt,
            format!("inode {ino:#x} has no name left (unlinked)"),
        ));
    }
    if c.uid != 0 && c.uid != i.attr.uid && !perm::allowed(&i.attr, c, perm::R | perm::W) {
        // Linux's protected hard links: a name for someone else's file
        // only with read and write on it (a link moves the directory its
        // search permission is judged by, and keeps the file alive).
        return Err(err(
            Errno::Perm,
            format!(
                "link: uid {} neither owns inode {ino:#x} nor may read and write it",
                c.uid
            ),
        ));
    }
    if tx.dentry(parent, name)?.is_some() {
        return Err(err(Errno::Exist, format!("{name:?} exists in {parent:#x}")));
    }
    if i.attr.nlink >= LINK_MAX {
        return Err(err(
            Errno::MLink,
            format!("inode {ino:#x} has {LINK_MAX} links"),
        ));
    }
    let now = now_ns();
    i.attr.nlink += 1;
    i.attr.ctime = now;
    i.parent = parent;
    i.name = name.into();
    tx.put_inode(&i)?;
    add_entry(tx, &mut dir, name, ino, i.attr.kind, now)?;
    Ok(i)
}

/// Drops one link of non-directory `i`. The last one leaves the inode in
/// place with no name (nlink 0) and records it as an orphan: a client may
/// still hold it open, so its data goes only when the MDS reaps it
/// ([`reap_orphan`]). Returns the orphan's inode.
fn drop_link(tx: &mut Tx, mut i: Inode, now: i64) -> Result<Option<u64>, MdsError> {
    i.attr.nlink = i.attr.nlink.saturating_sub(1);
    i.attr.ctime = now;
    tx.put_inode(&i)?;
    if i.attr.nlink > 0 {
        // The back-pointer stays on some remaining name (for prefetch entries).
        return Ok(None);
    }
    tx.put_orphan(i.attr.ino, (now / 1_000_000).max(0) as u64)?;
    Ok(Some(i.attr.ino))
}

/// Removes orphan `ino` for good: the inode, its extended attributes, and
/// (queued for deletion, returned) its objects. Nothing happens to an
/// inode that has a name again or is gone already, beyond forgetting the
/// orphan record.
pub fn reap_orphan(tx: &mut Tx, ino: u64) -> Result<Option<DeleteJob>, MdsError> {
    tx.del(T::Orphans, &num_key(ino))?;
    let Some(i) = tx.inode(ino)? else {
        return Ok(None);
    };
    if i.attr.nlink > 0 || i.attr.kind == FileKind::Dir {
        return Ok(None);
    }
    let mut st = tx.state()?;
    tx.drop_inode(&i)?;
    st.inodes = st.inodes.saturating_sub(1);
    let job = i.layout.clone().map(|layout| DeleteJob {
        ino: i.attr.ino,
        layout,
    });
    if let Some(j) = &job {
        tx.queue_delete(&mut st, j)?;
    }
    tx.put_state(&st)?;
    Ok(job)
}

/// Adds the entry `name` → `ino` to `dir` and stores `dir` with its entry
/// count, link count (for a subdirectory) and times updated.
fn add_entry(
    tx: &mut Tx,
    dir: &mut Inode,
    name: &str,
    ino: u64,
    kind: FileKind,
    now: i64,
) -> Result<(), MdsError> {
    tx.put_dentry(dir.attr.ino, name, ino, kind)?;
    let meta = dir
        .dir
        .as_mut()
        .ok_or_else(|| err(Errno::NotDir, "not a directory"))?;
    meta.entries += 1;
    dir.attr.size = meta.entries;
    if kind == FileKind::Dir {
        dir.attr.nlink += 1;
    }
    dir.attr.mtime = now;
    dir.attr.ctime = now;
    tx.put_inode(dir)
}

/// Removes the entry `name` from `dir`; the mirror of [`add_entry`].
fn remove_entry(
    tx: &mut Tx,
    dir: &mut Inode,
    name: &str,
    was_dir: bool,
    now: i64,
) -> Result<(), MdsError> {
    tx.del(T::Dentries, &dentry_key(dir.attr.ino, name))?;
    let meta = dir
        .dir
        .as_mut()
        .ok_or_else(|| err(Errno::NotDir, "not a directory"))?;
    meta.entries = meta.entries.saturating_sub(1);
    dir.attr.size = meta.entries;
    if was_dir {
        dir.attr.nlink = dir.attr.nlink.saturating_sub(1);
    }
    dir.attr.mtime = now;
    dir.attr.ctime = now;
    tx.put_inode(dir)
}

/// Removes a non-directory name. Returns the inode if that was its last
/// name (it is an orphan now).
pub fn unlink(tx: &mut Tx, c: &Creds, parent: u64, name: &str) -> Result<Option<u64>, MdsError> {
    check_name(name)?;
    let mut dir = writable_dir(tx, c, parent, "unlink")?;
    let (ino, kind) = tx
        .dentry(parent, name)?
        .ok_or_else(|| err(Errno::NoEnt, format!("{name:?} not found in {parent:#x}")))?;
    if kind == FileKind::Dir {
        return Err(err(
            Errno::IsDir,
            format!("{name:?} is a directory: use rmdir"),
        ));
    }
    let i = tx.live_inode(ino)?;
    perm::sticky(&dir.attr, &i.attr, c)?;
    let now = now_ns();
    remove_entry(tx, &mut dir, name, false, now)?;
    drop_link(tx, i, now)
}

/// Removes an empty directory.
pub fn rmdir(tx: &mut Tx, c: &Creds, parent: u64, name: &str) -> Result<(), MdsError> {
    check_name(name)?;
    let mut dir = writable_dir(tx, c, parent, "rmdir")?;
    let (ino, kind) = tx
        .dentry(parent, name)?
        .ok_or_else(|| err(Errno::NoEnt, format!("{name:?} not found in {parent:#x}")))?;
    if kind != FileKind::Dir {
        return Err(err(Errno::NotDir, format!("{name:?} is not a directory")));
    }
    let victim = tx.live_inode(ino)?;
    if victim.dir.as_ref().map(|d| d.entries).unwrap_or(0) > 0 {
        return Err(err(
            Errno::NotEmpty,
            format!("directory {name:?} is not empty"),
        ));
    }
    perm::sticky(&dir.attr, &victim.attr, c)?;
    let now = now_ns();
    let mut st = tx.state()?;
    remove_entry(tx, &mut dir, name, true, now)?;
    tx.drop_inode(&victim)?;
    st.inodes = st.inodes.saturating_sub(1);
    tx.put_state(&st)
}

/// Whether directory `anc` is `ino` or one of its ancestors.
fn is_ancestor(tx: &Tx, anc: u64, mut ino: u64) -> Result<bool, MdsError> {
    for _ in 0..100_000 {
        if ino == anc {
            return Ok(true);
        }
        if ino == ROOT_INO {
            return Ok(false);
        }
        ino = tx.live_inode(ino)?.parent;
    }
    Err(err(
        Errno::Loop,
        "directory parent chain does not reach the root",
    ))
}

/// Renames atomically. Returns the moved inode, and a replaced file's
/// inode if that was its last name (it is an orphan now).
pub fn rename(
    tx: &mut Tx,
    c: &Creds,
    parent: u64,
    name: &str,
    new_parent: u64,
    new_name: &str,
    noreplace: bool,
) -> Result<(Inode, Option<u64>), MdsError> {
    check_name(name)?;
    check_name(new_name)?;
    let src_dir = writable_dir(tx, c, parent, "rename (source)")?;
    let dst_dir = writable_dir(tx, c, new_parent, "rename (target)")?;
    let (ino, kind) = tx
        .dentry(parent, name)?
        .ok_or_else(|| err(Errno::NoEnt, format!("{name:?} not found in {parent:#x}")))?;
    let mut moving = tx.live_inode(ino)?;
    perm::sticky(&src_dir.attr, &moving.attr, c)?;
    let is_dir = kind == FileKind::Dir;
    if is_dir && is_ancestor(tx, ino, new_parent)? {
        return Err(err(
            Errno::Inval,
            "cannot move a directory into itself or below it",
        ));
    }
    let target = tx.dentry(new_parent, new_name)?;
    if let Some((tino, tkind)) = target {
        if tino == ino {
            return Ok((moving, None)); // same file: POSIX says do nothing
        }
        if noreplace {
            return Err(err(
                Errno::Exist,
                format!("{new_name:?} exists in {new_parent:#x}"),
            ));
        }
        let t = tx.live_inode(tino)?;
        perm::sticky(&dst_dir.attr, &t.attr, c)?;
        if is_dir && tkind != FileKind::Dir {
            return Err(err(
                Errno::NotDir,
                format!("{new_name:?} is not a directory"),
            ));
        }
        if !is_dir && tkind == FileKind::Dir {
            return Err(err(Errno::IsDir, format!("{new_name:?} is a directory")));
        }
        if tkind == FileKind::Dir && t.dir.as_ref().map(|d| d.entries).unwrap_or(0) > 0 {
            return Err(err(
                Errno::NotEmpty,
                format!("directory {new_name:?} is not empty"),
            ));
        }
    }
    // All checks passed: write.
    let now = now_ns();
    let mut st = tx.state()?;
    let mut orphan = None;
    if let Some((tino, tkind)) = target {
        let t = tx.live_inode(tino)?;
        let mut d = tx.dir_inode(new_parent)?;
        remove_entry(tx, &mut d, new_name, tkind == FileKind::Dir, now)?;
        if tkind == FileKind::Dir {
            tx.drop_inode(&t)?;
            st.inodes = st.inodes.saturating_sub(1);
        } else {
            orphan = drop_link(tx, t, now)?;
        }
    }
    let mut s = tx.dir_inode(parent)?;
    remove_entry(tx, &mut s, name, is_dir, now)?;
    let mut d = tx.dir_inode(new_parent)?;
    add_entry(tx, &mut d, new_name, ino, kind, now)?;
    // Re-read: the inode may have changed above if it was also the target's dir.
    moving = tx.live_inode(moving.attr.ino)?;
    moving.parent = new_parent;
    moving.name = new_name.into();
    moving.attr.ctime = now;
    tx.put_inode(&moving)?;
    tx.put_state(&st)?;
    Ok((moving, orphan))
}

/// What a setattr changed that the caller must act on at the OSDs.
#[derive(Debug, Clone)]
pub struct SetAttrDone {
    /// The inode after.
    pub inode: Inode,
    /// Permissions narrowed: capabilities issued before must be revoked.
    pub revoke: bool,
}

/// Applies attribute changes with POSIX permission rules. A size change on
/// a file only records the length; shrinking objects is the caller's job
/// (done before this, see the server).
pub fn setattr(tx: &mut Tx, c: &Creds, ino: u64, set: &SetAttr) -> Result<SetAttrDone, MdsError> {
    let mut i = tx.live_inode(ino)?;
    let revoke = apply_setattr(&mut i.attr, c, set, now_ns())?;
    tx.put_inode(&i)?;
    Ok(SetAttrDone { inode: i, revoke })
}

/// A lease holder's change of a file's attributes ([`DirOp::SetAttr`]):
/// as [`setattr`], but never a length and never a change that takes a
/// right away — those are made durable before they are answered and
/// revoke capabilities at the OSDs, which a batch answered early must not.
///
/// [`DirOp::SetAttr`]: proto::mds::DirOp::SetAttr
pub fn setattr_leased(tx: &mut Tx, c: &Creds, ino: u64, set: &SetAttr) -> Result<(), MdsError> {
    if set.size.is_some() {
        return Err(err(Errno::Inval, "a length is not changed under a lease"));
    }
    let mut i = tx.live_inode(ino)?;
    if apply_setattr(&mut i.attr, c, set, now_ns())? {
        return Err(err(
            Errno::Perm,
            "a change that takes a right away is not made under a lease",
        ));
    }
    tx.put_inode(&i)
}

/// Grows a file's recorded length (never shrinks it) after client writes.
/// `opened`: the caller holds it open for writing, so the permission bits
/// were checked at open and are not again (POSIX).
pub fn commit_size(
    tx: &mut Tx,
    c: &Creds,
    ino: u64,
    (size, mtime): (u64, i64),
    opened: bool,
) -> Result<Inode, MdsError> {
    let mut i = tx.live_inode(ino)?;
    if i.attr.kind != FileKind::File {
        return Err(err(Errno::Inval, "only files have data"));
    }
    // Its owner may always (it could give itself the right): so a close
    // answered early is redone after an MDS restart — when no hold is
    // known yet — even on a file it made read-only after opening it.
    if !opened && c.uid != i.attr.uid {
        perm::check(&i.attr, c, W, "write")?;
    }
    if size > i.attr.size || mtime > i.attr.mtime {
        i.attr.size = i.attr.size.max(size);
        i.attr.mtime = i.attr.mtime.max(mtime);
        i.attr.ctime = i.attr.ctime.max(mtime);
        tx.put_inode(&i)?;
    }
    Ok(i)
}

/// Sets an extended attribute.
pub fn setxattr(
    tx: &mut Tx,
    c: &Creds,
    ino: u64,
    name: &str,
    value: &[u8],
    mode: XattrMode,
) -> Result<(), MdsError> {
    check_xattr_name(name)?;
    if value.len() > XATTR_VALUE_MAX {
        return Err(err(
            Errno::Range,
            format!("value of {} bytes; limit {XATTR_VALUE_MAX}", value.len()),
        ));
    }
    let mut i = tx.live_inode(ino)?;
    if c.uid != 0 && c.uid != i.attr.uid {
        perm::check(&i.attr, c, W, "setxattr")?;
    }
    let key = xattr_key(ino, name);
    let exists = tx.get(T::Xattrs, &key)?.is_some();
    match (mode, exists) {
        (XattrMode::Create, true) => {
            return Err(err(Errno::Exist, format!("xattr {name:?} exists")));
        }
        (XattrMode::Replace, false) => {
            return Err(err(Errno::NoData, format!("no xattr {name:?}")));
        }
        _ => {}
    }
    tx.put(T::Xattrs, &key, value)?;
    i.attr.ctime = now_ns();
    tx.put_inode(&i)
}

/// Removes an extended attribute.
pub fn removexattr(tx: &mut Tx, c: &Creds, ino: u64, name: &str) -> Result<(), MdsError> {
    check_xattr_name(name)?;
    let mut i = tx.live_inode(ino)?;
    if c.uid != 0 && c.uid != i.attr.uid {
        perm::check(&i.attr, c, W, "removexattr")?;
    }
    let key = xattr_key(ino, name);
    if tx.get(T::Xattrs, &key)?.is_none() {
        return Err(err(Errno::NoData, format!("no xattr {name:?}")));
    }
    tx.del(T::Xattrs, &key)?;
    i.attr.ctime = now_ns();
    tx.put_inode(&i)
}

/// Reads an extended attribute (needs read permission).
pub fn getxattr(v: &impl Records, c: &Creds, ino: u64, name: &str) -> Result<Vec<u8>, MdsError> {
    check_xattr_name(name)?;
    let i = v.live_inode(ino)?;
    perm::check(&i.attr, c, R, "getxattr")?;
    v.get(T::Xattrs, &xattr_key(ino, name))?
        .ok_or_else(|| err(Errno::NoData, format!("no xattr {name:?}")))
}
