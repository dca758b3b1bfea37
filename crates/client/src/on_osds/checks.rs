//! The permission checks the MDS would make, made here, in the client,
//! before each change to a namespace kept on the OSDs: search, write and
//! the sticky rule on directories, who may change extended attributes.

use proto::mds::{Attr, Creds, FileKind, Found};

use super::{OsdNamespace, check, sticky_applies};
use crate::error::{Errno, FsError, Result};
use crate::meta::found;
use posix::{W, X};

/// The permission checks the MDS makes, made here before each change.
impl OsdNamespace {
    /// Attributes of `ino` from the client's cache while fresh, else from
    /// its record (and cached), counted as the client's getattr counts.
    pub(super) async fn cached_attr(&self, ino: u64) -> Result<Attr> {
        if let Some(a) = self.meta.fresh_attr(ino) {
            return Ok(a);
        }
        self.meta.miss();
        let asked = self.meta.commits.ask();
        let mut a = self.getattr(ino).await?;
        self.meta.cache_attr(&mut a, asked.since());
        Ok(a)
    }

    /// A directory `c` may search (`what` names the operation in the error).
    pub(super) async fn searchable(&self, c: &Creds, dir: u64, what: &str) -> Result<Attr> {
        let a = self.cached_attr(dir).await?;
        if a.kind != FileKind::Dir {
            return Err(FsError::new(
                Errno::NotDir,
                format!("{what}: inode {dir} is not a directory"),
            ));
        }
        check(&a, c, X, what)?;
        Ok(a)
    }

    /// A directory `c` may add names to.
    pub(super) async fn changeable(&self, c: &Creds, dir: u64, what: &str) -> Result<Attr> {
        let a = self.searchable(c, dir, what).await?;
        check(&a, c, W | X, what)?;
        Ok(a)
    }

    /// `c` may remove `name` from `dir` (write and search on it, and the
    /// sticky rule).
    pub(super) async fn removable(
        &self,
        c: &Creds,
        dir: u64,
        name: &str,
        what: &str,
    ) -> Result<()> {
        let a = self.changeable(c, dir, what).await?;
        if sticky_applies(&a, c) {
            let v = self.lookup_entry(dir, name).await?;
            posix::perm::sticky(&a, &v.attr, c).map_err(FsError::from)?;
        }
        Ok(())
    }

    /// `c` may change `ino`'s extended attributes (the owner, root, or
    /// write permission).
    pub(super) async fn xattr_writable(&self, c: &Creds, ino: u64, what: &str) -> Result<()> {
        let a = self.cached_attr(ino).await?;
        if c.uid != 0 && c.uid != a.uid {
            check(&a, c, W, what)?;
        }
        Ok(())
    }

    /// A new name in `parent` (checked for write and search): mkdir and symlink.
    pub(super) async fn make_checked(
        &self,
        c: &Creds,
        parent: u64,
        name: &str,
        kind: (FileKind, u32, u32),
        target: Option<String>,
    ) -> Result<Found> {
        let pa = self.changeable(c, parent, "make").await?;
        let (e, _) = self.make(c, parent, &pa, name, kind, target, true).await?;
        Ok(found(e, self.grants().await?))
    }
}
