//! Rename on the OSDs, crash-safe through an intent record (see
//! `docs/OSD-NAMESPACE.md`, "Rename").
//!
//! 1. Look up the source entry (and the destination's, if any).
//! 2. Write the intent on the moved inode's first object by CAS from empty:
//!    source, destination, the entry it replaces. One rename per inode at a
//!    time; a directory moving to another parent also holds the
//!    file-system rename lock, and its new parent's ancestors are checked
//!    so a directory never moves under itself.
//! 3. Insert the destination entry (or swap the replaced entry for it).
//!    From here on the rename has happened: recovery finishes it.
//! 4. Remove the source entry.
//! 5. Drop the replaced inode (link count down; a file whose count reaches
//!    zero is handed back for the caller to destroy, now or at its last
//!    local close, as unlink does; an empty directory is removed).
//! 6. Clear the intent and, for a directory, point its parent at the new
//!    directory, in one commit.
//!
//! Recovery ([`crate::fsck`]) of an intent: if the destination entry names
//! the moved inode, do 4–6; otherwise clear the intent (the rename never
//! happened).

use proto::layout::data_oid;
use proto::mds::ROOT_INO;

use crate::error::{Errno, NsError, Result};
use crate::format::*;
use crate::fs::{DirRef, OsdFs};

/// How long a rename waits for another client's rename of the same entry
/// before it answers EBUSY.
const RENAME_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// What a rename did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Moved {
    /// The moved inode.
    pub ino: u64,
    /// The replaced file when that was its last name: (ino, OSD, record),
    /// for the caller to remove with [`OsdFs::destroy`] (until then fsck
    /// sees an orphan).
    pub replaced: Option<(u64, u32, Inode)>,
    /// Nothing changed: both names were links to one file (POSIX: do
    /// nothing), so both stay.
    pub unchanged: bool,
}

impl OsdFs {
    /// Renames `src`/`name` to `dst`/`new_name`, replacing a destination of
    /// a compatible kind (an empty directory by a directory, a non-directory
    /// by a non-directory) unless `noreplace`.
    pub async fn rename(
        &self,
        src: &DirRef,
        name: &str,
        dst: &DirRef,
        new_name: &str,
        noreplace: bool,
    ) -> Result<Moved> {
        // Another client's rename of the same entry (or of a directory on
        // the way) in progress: waited for and tried again from the
        // lookup, as a local file system would serialize them — the
        // second then finds the name gone (ENOENT) or moves it on. EBUSY
        // only once one stays in progress for RENAME_WAIT (a client that
        // died in the middle of one).
        let deadline = std::time::Instant::now() + RENAME_WAIT;
        let mut pause = std::time::Duration::from_millis(5);
        loop {
            match self.rename_once(src, name, dst, new_name, noreplace).await {
                Err(e) if e.errno == Errno::Busy && std::time::Instant::now() < deadline => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(std::time::Duration::from_millis(200));
                }
                r => return r,
            }
        }
    }

    /// [`OsdFs::rename`] once.
    async fn rename_once(
        &self,
        src: &DirRef,
        name: &str,
        dst: &DirRef,
        new_name: &str,
        noreplace: bool,
    ) -> Result<Moved> {
        crate::fs::check_name(new_name)?;
        let moving = self.lookup(src, name).await?;
        let target = self.find(dst, new_name).await?;
        if let Some(t) = &target {
            if t.ino == moving.ino {
                return Ok(Moved {
                    ino: moving.ino,
                    replaced: None,
                    unchanged: true,
                });
            }
            if noreplace {
                return Err(NsError::new(Errno::Exist, format!("{new_name}: exists")));
            }
            match (moving.kind == Kind::Dir, t.kind == Kind::Dir) {
                (true, false) => {
                    return Err(NsError::new(
                        Errno::NotDir,
                        format!("{new_name}: not a directory"),
                    ));
                }
                (false, true) => {
                    return Err(NsError::new(
                        Errno::IsDir,
                        format!("{new_name}: is a directory"),
                    ));
                }
                (true, true) => {
                    let td = self.dir(t.ino, t.osd).await?;
                    if !self.is_empty(&td).await? {
                        return Err(NsError::new(
                            Errno::NotEmpty,
                            format!("{new_name}: directory not empty"),
                        ));
                    }
                }
                _ => {}
            }
        }
        let root_osd = self.root_osd()?;
        let moves_dir = moving.kind == Kind::Dir && src.ino != dst.ino;
        let rename_lock = if moves_dir {
            let (held, _) = self
                .acquire(root_osd, data_oid(ROOT_INO), FS_RENAME_LOCK, Vec::new())
                .await?;
            Some(held)
        } else {
            None
        };
        let r = match self
            .rename_steps(src, &moving, dst, new_name, target.as_ref(), moves_dir)
            .await
        {
            // The destination changed between the lookup and the insert
            // (another client made or replaced the name): a rename that
            // may replace tries again (`rename`), one that may not has
            // its answer.
            Err(e) if e.errno == Errno::Exist && !noreplace => {
                Err(NsError::new(Errno::Busy, e.message))
            }
            r => r,
        };
        if let Some(held) = rename_lock {
            self.release(root_osd, data_oid(ROOT_INO), FS_RENAME_LOCK, held)
                .await?;
        }
        r.map(|replaced| Moved {
            ino: moving.ino,
            replaced,
            unchanged: false,
        })
    }

    async fn rename_steps(
        &self,
        src: &DirRef,
        moving: &Dirent,
        dst: &DirRef,
        new_name: &str,
        target: Option<&Dirent>,
        moves_dir: bool,
    ) -> Result<Option<(u64, u32, Inode)>> {
        if moves_dir {
            // The new parent must not be the moved directory or below it.
            let mut cur = (dst.ino, dst.osd);
            let mut hops = 0;
            while cur.0 != ROOT_INO {
                if cur.0 == moving.ino {
                    return Err(NsError::new(
                        Errno::Inval,
                        "cannot move a directory under itself",
                    ));
                }
                cur = self.stat(cur.0, cur.1).await?.parent;
                hops += 1;
                if hops > 4096 {
                    return Err(crate::error::corrupt("parent pointers loop"));
                }
            }
        }
        let intent = Intent {
            version: FORMAT_VERSION,
            src: ((src.ino, src.osd), moving.name.clone()),
            dst: ((dst.ino, dst.osd), new_name.into()),
            replaced: target.map(|t| (t.kind, t.ino, t.osd)),
            at_ms: proto::clock::now_ms(),
        };
        let oid = data_oid(moving.ino);
        let bytes = encode(&intent);
        let (ok, ..) = self
            .osds
            .cas(
                moving.osd,
                oid,
                INTENT,
                Vec::new(),
                bytes.clone(),
                Vec::new(),
            )
            .await?;
        if !ok {
            return Err(NsError::new(
                Errno::Busy,
                format!("{}: another rename of it is in progress", moving.name),
            ));
        }
        let new_ent = Dirent {
            name: new_name.into(),
            ..moving.clone()
        };
        let placed = match target {
            None => self.insert(dst, &new_ent).await?.is_ok(),
            Some(t) => self.replace(dst, t, &new_ent).await?,
        };
        if !placed {
            self.osds
                .cas(moving.osd, oid, INTENT, bytes, Vec::new(), Vec::new())
                .await?;
            return Err(NsError::new(
                Errno::Exist,
                format!("{new_name}: changed by another client meanwhile"),
            ));
        }
        let dead = self.finish_rename(moving, &intent, bytes).await?;
        if src.ino == dst.ino {
            // The moved inode's ctime (a move to another directory set it
            // with the parent): a compare-and-swap, so a concurrent change
            // of the inode is not lost.
            match self.update(moving.ino, moving.osd, |_| Ok(())).await {
                Err(e) if !e.is(crate::error::Errno::NoEnt) => return Err(e),
                _ => {}
            }
        }
        // Link counts of the directories (2 + subdirectories).
        if moves_dir {
            self.count_subdirs((dst.ino, dst.osd), 1).await?;
            self.count_subdirs((src.ino, src.osd), -1).await?;
        }
        if target.is_some_and(|t| t.kind == Kind::Dir) {
            self.count_subdirs((dst.ino, dst.osd), -1).await?;
        }
        Ok(dead)
    }

    /// Steps 4–6 of a rename whose destination entry is in place (also
    /// what recovery runs). Returns a replaced file left with no names.
    pub async fn finish_rename(
        &self,
        moving: &Dirent,
        intent: &Intent,
        raw: Vec<u8>,
    ) -> Result<Option<(u64, u32, Inode)>> {
        let ((sino, sosd), sname) = &intent.src;
        let src = self.dir(*sino, *sosd).await;
        match src {
            Ok(src) => {
                let old = Dirent {
                    name: sname.clone(),
                    ..moving.clone()
                };
                self.remove(&src, &old).await?;
            }
            Err(e) if e.is(crate::error::Errno::NoEnt) => {}
            Err(e) => return Err(e),
        }
        let mut dead = None;
        if let Some((kind, ino, osd)) = intent.replaced {
            dead = self.drop_replaced(kind, ino, osd).await?;
        }
        let oid = data_oid(moving.ino);
        let (dst, _) = &intent.dst;
        let mut set = vec![(INTENT, Vec::new())];
        let raw_inode = self.osds.get1(moving.osd, oid, INODE).await?;
        if !raw_inode.is_empty() {
            let mut i = Inode::decode(&raw_inode)?;
            if i.parent != *dst {
                i.parent = *dst;
                i.ctime = i.ctime.max(proto::clock::now_ns());
                set.push((INODE, i.encode()));
            }
        }
        let cur = self.osds.get1(moving.osd, oid, INTENT).await?;
        if cur == raw {
            self.osds.set(moving.osd, oid, set).await?;
        }
        Ok(dead)
    }

    /// The replaced inode lost a name: a file's count goes down (returned
    /// at zero, to destroy); an (empty) directory is removed.
    async fn drop_replaced(
        &self,
        kind: Kind,
        ino: u64,
        osd: u32,
    ) -> Result<Option<(u64, u32, Inode)>> {
        if kind == Kind::Dir {
            self.osds.remove(osd, data_oid(ino)).await?;
            self.count_inodes(-1).await?;
            return Ok(None);
        }
        match self
            .update(ino, osd, |i| {
                i.nlink = i.nlink.saturating_sub(1);
                Ok(())
            })
            .await
        {
            Ok(i) if i.nlink == 0 => Ok(Some((ino, osd, i))),
            Ok(_) => Ok(None),
            Err(e) if e.is(crate::error::Errno::NoEnt) => Ok(None),
            Err(e) => Err(e),
        }
    }
}
