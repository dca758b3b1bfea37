//! One function per namespace request: each reads a snapshot or runs one
//! transaction of [`crate::ns`] through the KV's group commit, and shapes
//! the reply (with grants and prefetch where the request carries them).

use std::sync::Arc;

use posix::perm::{self, R, W};
use proto::layout::LayoutSpec;
use proto::mds::{
    Creds, DirEntry, Errno, FileKind, LISTINGS_MAX_DIRS, LISTINGS_MAX_ENTRIES, MdsError, MdsReply,
    READDIR_MAX, ROOT_INO, XattrMode,
};

use super::{Mds, err};
use crate::kv::T;
use crate::ns;
use crate::records::{Inode, Records, num_key};

impl Mds {
    /// LOOKUP: the entry, its grants and prefetched neighbours.
    pub(super) fn lookup(
        &self,
        c: &Creds,
        parent: u64,
        name: &str,
        pf: u32,
    ) -> Result<MdsReply, MdsError> {
        let snap = self.kv.read()?;
        let i = ns::lookup(&snap, c, parent, name)?;
        Ok(MdsReply::Found(Box::new(self.found(
            &snap,
            c,
            i,
            (false, false),
            pf,
        )?)))
    }

    /// GETATTR.
    pub(super) fn getattr(&self, ino: u64) -> Result<MdsReply, MdsError> {
        Ok(MdsReply::Attr(self.kv.read()?.live_inode(ino)?.attr))
    }

    /// STAT: GETATTR answered as LOOKUP is, with grants and prefetched
    /// neighbours (Hendricks et al.: every metadata request may carry the
    /// server's prefetch, not only lookups).
    pub(super) fn stat(&self, c: &Creds, ino: u64, pf: u32) -> Result<MdsReply, MdsError> {
        let snap = self.kv.read()?;
        let i = snap.live_inode(ino)?;
        Ok(MdsReply::Found(Box::new(self.found(
            &snap,
            c,
            i,
            (false, false),
            pf,
        )?)))
    }

    /// OPEN: permission for the access asked (not again for a handle the
    /// session holds already: a renewal), then grants and prefetch.
    pub(super) fn open_file(
        &self,
        c: &Creds,
        ino: u64,
        write: bool,
        session: u64,
        pf: u32,
    ) -> Result<MdsReply, MdsError> {
        let snap = self.kv.read()?;
        let i = snap.live_inode(ino)?;
        if i.attr.kind == FileKind::Dir && write {
            return Err(err(Errno::IsDir, "cannot open a directory for writing"));
        }
        let held = self.session_holds(session, ino, write);
        // A file without a name is reachable only through what was open
        // before it lost it: another client's open comes from a stale
        // cached name (ESTALE, so the kernel looks the name up again).
        if i.attr.nlink == 0 && i.attr.kind != FileKind::Dir && !self.session_knows(session, ino) {
            return Err(err(
                Errno::Stale,
                format!("inode {ino:#x} was unlinked and this session does not hold it open"),
            ));
        }
        if !held {
            perm::check(&i.attr, c, if write { W } else { R }, "open")?;
        }
        self.note_open(session, ino, write)?;
        Ok(MdsReply::Found(Box::new(self.found(
            &snap,
            c,
            i,
            (write, held),
            pf,
        )?)))
    }

    /// CREATE: a file, opened for writing (grants, no prefetch; the
    /// session holds it open).
    pub(super) async fn create(
        &self,
        c: Creds,
        parent: u64,
        name: String,
        (mode, exclusive): (u32, bool),
        session: u64,
        early: Option<u64>,
    ) -> Result<MdsReply, MdsError> {
        let c2 = c.clone();
        let ((i, created), ack) = self
            .write_made(early, move |tx, policy| {
                ns::create(tx, policy, &c2, parent, &name, mode, exclusive)
            })
            .await?;
        if let Err(e) = self.note_open(session, i.attr.ino, true) {
            // The file is made: answering an error now would leave it
            // behind a failed request. Past its principal's bound of held
            // files the hold alone is not kept (only that principal's own
            // orphans can then go early).
            tracing::warn!(session, ino = i.attr.ino, error = %e, "create: hold not recorded");
        }
        if !created {
            // Opening an existing file for writing: outside its recovery.
            let ino = i.attr.ino;
            return self
                .outside_recovery(ino, || self.file_answer(&c, ino, Some(true), false))
                .await;
        }
        let snap = self.kv.read()?;
        let mut found = self.found(&snap, &c, i, (true, true), 0)?;
        // The change is made: a failed read only costs the client a getattr.
        found.dir = snap.inode(parent).ok().flatten().map(|d| d.attr);
        Ok(self.answer(MdsReply::Found(Box::new(found)), ack))
    }

    /// MKDIR.
    pub(super) async fn mkdir(
        &self,
        c: Creds,
        parent: u64,
        name: String,
        mode: u32,
    ) -> Result<MdsReply, MdsError> {
        // Never answered early (see `Op::may_answer_early`).
        let policy = self.sb.policy;
        let i = self
            .kv
            .write(move |tx| ns::mkdir(tx, &policy, &c, parent, &name, mode))
            .await?;
        self.made(&i, parent, crate::kv::Ack::default())
    }

    /// SYMLINK.
    pub(super) async fn symlink(
        &self,
        c: Creds,
        parent: u64,
        name: String,
        target: String,
        early: Option<u64>,
    ) -> Result<MdsReply, MdsError> {
        let (i, ack) = self
            .write_made(early, move |tx, policy| {
                ns::symlink(tx, policy, &c, parent, &name, &target)
            })
            .await?;
        self.made(&i, parent, ack)
    }

    /// MKNOD: a FIFO, device or socket.
    pub(super) async fn mknod(
        &self,
        c: Creds,
        parent: u64,
        name: String,
        (kind, mode, rdev): (FileKind, u32, u32),
        early: Option<u64>,
    ) -> Result<MdsReply, MdsError> {
        let (i, ack) = self
            .write_made(early, move |tx, policy| {
                ns::mknod(tx, policy, &c, parent, &name, (kind, mode, rdev))
            })
            .await?;
        self.made(&i, parent, ack)
    }

    /// LINK.
    pub(super) async fn link(
        &self,
        c: Creds,
        ino: u64,
        parent: u64,
        name: String,
        early: Option<u64>,
    ) -> Result<MdsReply, MdsError> {
        let (i, ack) = self
            .write_ns(early, move |tx| ns::link(tx, &c, ino, parent, &name))
            .await?;
        self.made(&i, parent, ack)
    }

    /// UNLINK: the last link leaves an orphan, reaped (objects deleted)
    /// once no client holds it open.
    pub(super) async fn unlink(
        &self,
        c: Creds,
        parent: u64,
        name: String,
        early: Option<u64>,
    ) -> Result<MdsReply, MdsError> {
        let (orphan, ack) = self
            .write_ns(early, move |tx| ns::unlink(tx, &c, parent, &name))
            .await?;
        self.orphaned(orphan).await?;
        Ok(self.answer(self.removed_from(parent), ack))
    }

    /// RMDIR.
    pub(super) async fn rmdir(
        &self,
        c: Creds,
        parent: u64,
        name: String,
        early: Option<u64>,
    ) -> Result<MdsReply, MdsError> {
        let ((), ack) = self
            .write_ns(early, move |tx| ns::rmdir(tx, &c, parent, &name))
            .await?;
        Ok(self.answer(self.removed_from(parent), ack))
    }

    /// RENAME `from` to `to`: answers the moved inode's entry under its
    /// new name, with the target directory's attributes after the change
    /// (a client renaming within one directory, as an atomic save does,
    /// then needs no GETATTR of it); a replaced file's last name gone
    /// leaves an orphan.
    pub(super) async fn rename(
        &self,
        c: Creds,
        from: (u64, String),
        to: (u64, String),
        noreplace: bool,
        early: Option<u64>,
    ) -> Result<MdsReply, MdsError> {
        let (dir, new_name) = (to.0, to.1.clone());
        let ((moved, orphan, unchanged), ack) = self
            .write_ns(early, move |tx| {
                // Two names of one file: POSIX says do nothing, and the
                // answer says so (the client then keeps both names).
                let same = tx.dentry(from.0, &from.1)?.map(|d| d.0)
                    == tx.dentry(to.0, &to.1)?.map(|d| d.0);
                let (moved, orphan) = ns::rename(tx, &c, from.0, &from.1, to.0, &to.1, noreplace)?;
                Ok((moved, orphan, same))
            })
            .await?;
        self.orphaned(orphan).await?;
        if unchanged {
            return Ok(self.answer(MdsReply::Done, ack));
        }
        let mut f = Self::bare(&moved);
        f.entry.parent = dir;
        f.entry.name = new_name;
        // The change is made: a failed read only costs the client a getattr.
        f.dir = self.dir_attr(dir).ok();
        Ok(self.answer(MdsReply::Found(Box::new(f)), ack))
    }

    /// The answer to a change that made (or linked) `i` in `parent`: the
    /// entry and the directory's attributes after it.
    fn made(&self, i: &Inode, parent: u64, ack: crate::kv::Ack) -> Result<MdsReply, MdsError> {
        let mut f = Self::bare(i);
        // The change is made: a failed read only costs the client a getattr.
        f.dir = self.dir_attr(parent).ok();
        Ok(self.answer(MdsReply::Found(Box::new(f)), ack))
    }

    /// The answer to a removal from `parent`: its attributes now (or
    /// `Done` if they cannot be read: the change is made all the same).
    fn removed_from(&self, parent: u64) -> MdsReply {
        self.dir_attr(parent).map_or(MdsReply::Done, MdsReply::Attr)
    }

    /// A directory's attributes as they are now.
    pub(super) fn dir_attr(&self, ino: u64) -> Result<proto::mds::Attr, MdsError> {
        Ok(self.kv.read()?.live_inode(ino)?.attr)
    }

    /// READLINK.
    pub(super) fn readlink(&self, ino: u64) -> Result<MdsReply, MdsError> {
        let i = self.kv.read()?.live_inode(ino)?;
        i.target
            .map(MdsReply::Target)
            .ok_or_else(|| err(Errno::Inval, format!("inode {ino:#x} is not a symlink")))
    }

    /// READDIR: one page of entries after `after`, with attributes if `plus`.
    pub(super) fn readdir(
        &self,
        c: &Creds,
        ino: u64,
        after: Option<&str>,
        max: u32,
        plus: bool,
    ) -> Result<MdsReply, MdsError> {
        let snap = self.kv.read()?;
        let dir = snap.dir_inode(ino)?;
        perm::check(&dir.attr, c, R, "readdir")?;
        let max = max.clamp(1, READDIR_MAX) as usize;
        let (mut list, mut more) = snap.list_dir(ino, after, max)?;
        let mut page_bytes = REPLY_NAME_BYTES;
        more |= cut_to_bytes(&mut list, &mut page_bytes);
        let entries = dir_entries(&snap, list, plus)?;
        Ok(MdsReply::Dir { entries, more })
    }

    /// READDIR PREFETCH: a READDIR page with attributes; the first page
    /// also carries whole listings of the directories a depth-first walker
    /// (`find`, `du`, a build scanning its tree: each reads a directory,
    /// then its subdirectories in name order) reads next — `ino`'s subtree
    /// in pre-order, then its later siblings' and its ancestors' later
    /// siblings' — those the caller may search into and list, up to `pf`
    /// directories (at most LISTINGS_MAX_DIRS) and LISTINGS_MAX_ENTRIES
    /// entries in all. A directory that would not fit whole ends the walk.
    pub(super) fn readdir_prefetch(
        &self,
        c: &Creds,
        ino: u64,
        (after, max): (Option<&str>, u32),
        (pf, session): (u32, u64),
    ) -> Result<MdsReply, MdsError> {
        let (entries, more) = match self.readdir(c, ino, after, max, true)? {
            MdsReply::Dir { entries, more } => (entries, more),
            other => return Ok(other),
        };
        let dirs = (pf as usize).min(LISTINGS_MAX_DIRS);
        let listings = if after.is_none() && !more && dirs > 0 {
            self.walk_after(c, (ino, session), &entries, dirs)?
        } else {
            Vec::new()
        };
        Ok(MdsReply::DirPrefetch {
            entries,
            more,
            listings,
        })
    }

    /// The listings a depth-first walker reads after directory `start`
    /// (whose `entries` it has): see [`Mds::readdir_prefetch`].
    fn walk_after(
        &self,
        c: &Creds,
        (start, session): (u64, u64),
        entries: &[DirEntry],
        dirs: usize,
    ) -> Result<Vec<proto::mds::Listing>, MdsError> {
        /// Ancestors whose later subdirectories the walk may continue to.
        const LEVELS: usize = 16;
        let snap = self.kv.read()?;
        let searchable = |ino: u64| {
            snap.dir_inode(ino)
                .is_ok_and(|d| perm::check(&d.attr, c, perm::X, "search").is_ok())
        };
        let subdirs = |dir: u64, list: &[DirEntry]| -> Vec<u64> {
            if !searchable(dir) {
                return Vec::new();
            }
            list.iter()
                .filter(|e| e.kind == FileKind::Dir)
                .map(|e| e.ino)
                .collect()
        };
        // A stack of directories to read, the next on top: the start's
        // subdirectories above its later siblings, above its parent's
        // later siblings, and so on up.
        let mut stack: Vec<u64> = Vec::new();
        let mut at = snap.dir_inode(start)?;
        // Listing an ancestor to find later siblings needs read on it, not
        // only search; and the walk never climbs above the caller's root.
        let listable = |ino: u64| {
            snap.dir_inode(ino)
                .is_ok_and(|d| perm::allowed(&d.attr, c, R | perm::X))
        };
        let top = super::search::top();
        for _ in 0..LEVELS {
            let (parent, name) = (at.parent, at.name.clone());
            if parent == at.attr.ino || at.attr.ino == top || !listable(parent) {
                break;
            }
            let (later, _) = snap.list_dir(parent, Some(&name), LISTINGS_MAX_ENTRIES)?;
            let mut next: Vec<u64> = later
                .into_iter()
                .filter(|(_, _, k)| *k == FileKind::Dir)
                .map(|(_, i, _)| i)
                .collect();
            next.reverse();
            // Nearer levels are read first: they go above.
            next.append(&mut stack);
            stack = next;
            at = snap.dir_inode(parent)?;
        }
        let mut own = subdirs(start, entries);
        own.reverse();
        stack.extend(own);
        let mut budget = LISTINGS_MAX_ENTRIES;
        let mut bytes = REPLY_NAME_BYTES;
        let mut out = Vec::new();
        while let Some(d) = stack.pop() {
            if out.len() >= dirs {
                break;
            }
            let Ok(dir) = snap.dir_inode(d) else {
                continue;
            };
            // Another session's leased directory: its names are the
            // holder's to answer for (its changes may not be here yet, and
            // a file it made may have its data only in its memory).
            if perm::check(&dir.attr, c, R, "readdir").is_err() || self.leased_by_other(d, session)
            {
                continue;
            }
            let (mut list, more) = snap.list_dir(d, None, budget)?;
            if more || cut_to_bytes(&mut list, &mut bytes) {
                break;
            }
            budget -= list.len();
            let listing = dir_entries(&snap, list, true)?;
            let mut below = subdirs(d, &listing);
            below.reverse();
            stack.extend(below);
            out.push(proto::mds::Listing {
                ino: d,
                entries: listing,
            });
        }
        Ok(out)
    }

    /// SETATTR: chmod, chown, utimens, truncate (through a handle the
    /// session holds for writing, a truncate skips the permission check).
    /// One without a length may be answered early (`early`, which
    /// [`Mds::early_for`] gives only such a one); one that
    /// takes rights away (of any inode) is made durable before it is
    /// answered and before any OSD hears of it, so a lost change can never
    /// leave OSDs refusing a version the MDS hands out again, nor a
    /// replay after a crash run under the rights it took away.
    pub(super) async fn setattr(
        self: &Arc<Self>,
        c: Creds,
        ino: u64,
        mut set: proto::mds::SetAttr,
        (session, early): (u64, Option<u64>),
    ) -> Result<MdsReply, MdsError> {
        if set.via_handle && !self.session_holds(session, ino, true) {
            set.via_handle = false;
        }
        // No recovery copy interleaves with what this does to the objects.
        let _held = self.hold(ino).await;
        // Shrinking a file: revoke old capabilities, then cut the objects,
        // then record the length (so stale bytes can never reappear); the
        // length is not answered in between (`truncating`).
        let mut shrink = None;
        if let Some(size) = set.size {
            let i = self.kv.read()?.live_inode(ino)?;
            if i.attr.kind == FileKind::File && size < i.attr.size {
                shrink = Some(self.truncating.begin(ino));
                // Every rule of the whole setattr is checked before any
                // object is cut: a refused change must leave the data.
                let mut probe = i.attr.clone();
                posix::apply_setattr(&mut probe, &c, &set, 0)?;
                if let Some(l) = &i.layout {
                    let v = self.bump_version().await?;
                    self.revoke(ino, l, v).await?;
                    self.truncate_objects(ino, l, size).await?;
                }
            }
        }
        // A change that takes rights away commits with its revocation: the
        // version every older capability is refused at is taken and
        // recorded as pending in the same transaction, so an MDS crash
        // before the OSDs are reached leaves it to be retried, not lost.
        let ((done, pending), mut ack) = self
            .write_ns(early, move |tx| {
                let done = ns::setattr(tx, &c, ino, &set)?;
                let mut pending = None;
                if done.revoke && done.inode.layout.is_some() {
                    let v = tx.take_cap_version()?;
                    tx.put(T::Revocations, &num_key(ino), &v.to_le_bytes())?;
                    pending = Some(v);
                }
                Ok((done, pending))
            })
            .await?;
        // The length is recorded: those waiting for it may have it.
        drop(shrink);
        if done.revoke && ack.transno != 0 {
            ack.durable = self.kv.sync().await?;
        }
        if let (Some(v), Some(l)) = (pending, &done.inode.layout) {
            self.finish_revocation(ino, l, v).await;
        }
        Ok(self.answer(MdsReply::Attr(done.inode.attr), ack))
    }

    /// GETXATTR.
    pub(super) fn getxattr(&self, c: &Creds, ino: u64, name: &str) -> Result<MdsReply, MdsError> {
        Ok(MdsReply::Xattr(ns::getxattr(
            &self.kv.read()?,
            c,
            ino,
            name,
        )?))
    }

    /// LISTXATTR.
    pub(super) fn listxattr(&self, ino: u64) -> Result<MdsReply, MdsError> {
        let snap = self.kv.read()?;
        snap.live_inode(ino)?;
        Ok(MdsReply::XattrNames(snap.xattr_names(ino)?))
    }

    /// SETXATTR.
    pub(super) async fn setxattr(
        &self,
        c: Creds,
        ino: u64,
        name: String,
        value: Vec<u8>,
        mode: XattrMode,
    ) -> Result<MdsReply, MdsError> {
        self.kv
            .write(move |tx| ns::setxattr(tx, &c, ino, &name, &value, mode))
            .await?;
        Ok(MdsReply::Done)
    }

    /// REMOVEXATTR.
    pub(super) async fn removexattr(
        &self,
        c: Creds,
        ino: u64,
        name: String,
    ) -> Result<MdsReply, MdsError> {
        self.kv
            .write(move |tx| ns::removexattr(tx, &c, ino, &name))
            .await?;
        Ok(MdsReply::Done)
    }

    /// COMMIT SIZE: a writer's length and mtime (the length only grows);
    /// answered early for `early`'s session.
    pub(super) async fn commit_size(
        &self,
        c: Creds,
        ino: u64,
        (size, mtime): (u64, i64),
        (session, early): (u64, Option<u64>),
    ) -> Result<MdsReply, MdsError> {
        let opened = self.session_holds(session, ino, true);
        let (i, ack) = self
            .write_ns(early, move |tx| {
                ns::commit_size(tx, &c, ino, (size, mtime), opened)
            })
            .await?;
        Ok(self.answer(MdsReply::Attr(i.attr), ack))
    }

    /// EXTEND LAYOUT: object sets up to `objset`, with write grants.
    pub(super) async fn extend_layout(
        &self,
        c: Creds,
        ino: u64,
        objset: u64,
        session: u64,
    ) -> Result<MdsReply, MdsError> {
        self.wait_not_recovering(ino).await;
        let (policy, c2) = (self.sb.policy, c.clone());
        let opened = self.session_holds(session, ino, true);
        self.kv
            .write(move |tx| ns::extend_layout(tx, &policy, &c2, (ino, objset), opened))
            .await?;
        // Its grants, outside any recovery of the file.
        self.outside_recovery(ino, || self.file_answer(&c, ino, Some(true), opened))
            .await
    }

    /// GET LAYOUT: a file's layout, or a directory's default.
    pub(super) fn get_layout(&self, ino: u64) -> Result<MdsReply, MdsError> {
        let i = self.kv.read()?.live_inode(ino)?;
        match (i.layout, i.dir) {
            (Some(l), _) => Ok(MdsReply::Layout {
                spec: l.spec,
                layout: Some(l),
            }),
            (None, Some(d)) => Ok(MdsReply::Layout {
                spec: d.default_layout,
                layout: None,
            }),
            _ => Err(err(Errno::Inval, "symlinks have no layout")),
        }
    }

    /// SET LAYOUT: a directory's default or an empty file's layout.
    pub(super) async fn set_layout(
        &self,
        c: Creds,
        ino: u64,
        spec: LayoutSpec,
    ) -> Result<MdsReply, MdsError> {
        let i = self
            .kv
            .write(move |tx| ns::set_layout(tx, &c, ino, spec))
            .await?;
        let spec = i
            .layout
            .as_ref()
            .map(|l| l.spec)
            .or(i.dir.as_ref().map(|d| d.default_layout))
            .unwrap_or_default();
        Ok(MdsReply::Layout {
            spec,
            layout: i.layout,
        })
    }

    /// RESOLVE: every entry along an absolute, normalised path.
    pub(super) fn resolve(&self, c: &Creds, path: &str) -> Result<MdsReply, MdsError> {
        let snap = self.kv.read()?;
        let root = snap.live_inode(ROOT_INO)?;
        let mut out = vec![Self::entry(&root)];
        let mut at = ROOT_INO;
        for comp in path.split('/').filter(|s| !s.is_empty() && *s != ".") {
            if comp == ".." {
                return Err(err(
                    Errno::Inval,
                    "'..' is not resolved by the MDS; pass a normalised path",
                ));
            }
            let i = ns::lookup(&snap, c, at, comp)?;
            at = i.attr.ino;
            out.push(Self::entry(&i));
        }
        Ok(MdsReply::Path(out))
    }
}

/// Most bytes of names, with [`ENTRY_BYTES`] each for the rest of an
/// entry, that one READDIR page — and apart from it, one prefetch's
/// listings — carries: a reply stays well under the 1 MiB frame whatever
/// the names (a 255-byte name that is not UTF-8 is 1,020 bytes escaped).
const REPLY_NAME_BYTES: usize = 384 << 10;
/// What an entry costs besides its name (its attributes encoded, at most
/// about 100 bytes).
const ENTRY_BYTES: usize = 128;

/// Cuts `list` where it would pass `budget` bytes (keeping at least one
/// entry) and takes what it keeps from the budget; true if it cut.
fn cut_to_bytes(list: &mut Vec<(String, u64, FileKind)>, budget: &mut usize) -> bool {
    let mut used = 0usize;
    for (i, (name, _, _)) in list.iter().enumerate() {
        used += name.len() + ENTRY_BYTES;
        if used > *budget && i > 0 {
            list.truncate(i);
            return true;
        }
    }
    *budget = budget.saturating_sub(used);
    false
}

/// A listing's entries as READDIR answers them (with attributes if `plus`).
fn dir_entries(
    snap: &impl Records,
    list: Vec<(String, u64, FileKind)>,
    plus: bool,
) -> Result<Vec<DirEntry>, MdsError> {
    let mut out = Vec::with_capacity(list.len());
    for (name, child, kind) in list {
        let attr = if plus {
            snap.inode(child)?.map(|i| i.attr)
        } else {
            None
        };
        out.push(DirEntry {
            name,
            ino: child,
            kind,
            attr,
        });
    }
    Ok(out)
}
