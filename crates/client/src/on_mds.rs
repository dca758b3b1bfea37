//! The namespace kept by the MDS: each [`Namespace`] call is one MDS
//! request (READDIR pages until the directory ends), made as the caller.
//! Lookups and opens come back with the MDS's prefetched neighbours.

use std::sync::Arc;

use net::MdsClient;
use proto::layout::{Layout, LayoutSpec};
use proto::mds::{
    Attr, Creds, DirEntry, FileKind, Found, Listing, MdsReply, Op, SetAttr, XattrMode,
};

use crate::error::{Errno, FsError, Result};
use crate::namespace::{Namespace, NsFuture, OpenHere, Removed, Renamed};

/// The MDS as the namespace.
pub struct MdsNamespace {
    mds: Arc<MdsClient>,
    /// Changes answered under directory leases: sent before any request.
    leases: Option<Arc<crate::leases::DirLeases>>,
}

/// The error for an answer of the wrong kind.
pub fn bad_reply(what: &str, r: &MdsReply) -> FsError {
    FsError::new(Errno::Io, format!("{what}: unexpected reply {r:?}"))
}

impl MdsNamespace {
    /// The namespace of the MDS `mds` talks to.
    pub fn new(mds: Arc<MdsClient>) -> MdsNamespace {
        MdsNamespace { mds, leases: None }
    }

    /// The same, whose every request waits for the changes `leases`
    /// answered before it (so the MDS sees them first).
    pub fn with_leases(mds: Arc<MdsClient>, leases: Arc<crate::leases::DirLeases>) -> MdsNamespace {
        MdsNamespace {
            mds,
            leases: Some(leases),
        }
    }

    async fn call(&self, c: &Creds, op: Op) -> Result<MdsReply> {
        if let Some(l) = &self.leases {
            l.drain().await?;
        }
        self.mds
            .call_as(c.clone(), op)
            .await
            .map_err(crate::error::from_call)
    }

    async fn found(&self, c: &Creds, op: Op, what: &str) -> Result<Found> {
        match self.call(c, op).await? {
            MdsReply::Found(f) => Ok(*f),
            r => Err(bad_reply(what, &r)),
        }
    }

    async fn attr(&self, c: &Creds, op: Op, what: &str) -> Result<Attr> {
        match self.call(c, op).await? {
            MdsReply::Attr(a) => Ok(a),
            r => Err(bad_reply(what, &r)),
        }
    }

    async fn done(&self, c: &Creds, op: Op) -> Result<()> {
        self.call(c, op).await.map(|_| ())
    }

    /// A removal's answer: the directory's attributes after it.
    async fn dir_after(&self, c: &Creds, op: Op) -> Result<Option<Attr>> {
        match self.call(c, op).await? {
            MdsReply::Attr(a) => Ok(Some(a)),
            _ => Ok(None),
        }
    }

    /// A whole directory, page by page (with attributes if `plus`; names
    /// only are fetched to answer lookups of absent names, and counted so).
    async fn list(&self, c: &Creds, ino: u64, plus: bool) -> Result<Vec<DirEntry>> {
        let mut out: Vec<DirEntry> = Vec::new();
        loop {
            let after = out.last().map(|e| e.name.clone());
            let op = Op::Readdir {
                ino,
                after,
                max: 1000,
                plus,
            };
            let reply = if plus {
                self.call(c, op).await?
            } else {
                if let Some(l) = &self.leases {
                    l.drain().await?;
                }
                self.mds
                    .call_as_absent(c.clone(), op)
                    .await
                    .map_err(crate::error::from_call)?
            };
            match reply {
                MdsReply::Dir { entries, more } => {
                    out.extend(entries);
                    if !more {
                        return Ok(out);
                    }
                }
                r => return Err(bad_reply("readdir", &r)),
            }
        }
    }
}

impl Namespace for MdsNamespace {
    fn lookup<'a>(&'a self, c: &'a Creds, parent: u64, name: &'a str) -> NsFuture<'a, Found> {
        let op = Op::Lookup {
            parent,
            name: name.into(),
        };
        Box::pin(self.found(c, op, "lookup"))
    }

    fn getattr<'a>(&'a self, c: &'a Creds, ino: u64) -> NsFuture<'a, Attr> {
        Box::pin(self.attr(c, Op::GetAttr { ino }, "getattr"))
    }

    fn stat<'a>(&'a self, c: &'a Creds, ino: u64) -> NsFuture<'a, Option<Found>> {
        Box::pin(async move { self.found(c, Op::Stat { ino }, "stat").await.map(Some) })
    }

    fn setattr<'a>(&'a self, c: &'a Creds, ino: u64, set: &'a SetAttr) -> NsFuture<'a, Attr> {
        let op = Op::SetAttr {
            ino,
            set: set.clone(),
        };
        Box::pin(self.attr(c, op, "setattr"))
    }

    fn create<'a>(
        &'a self,
        c: &'a Creds,
        parent: u64,
        name: &'a str,
        mode: u32,
        exclusive: bool,
    ) -> NsFuture<'a, Found> {
        let op = Op::Create {
            parent,
            name: name.into(),
            mode,
            exclusive,
        };
        Box::pin(self.found(c, op, "create"))
    }

    fn mkdir<'a>(
        &'a self,
        c: &'a Creds,
        parent: u64,
        name: &'a str,
        mode: u32,
    ) -> NsFuture<'a, Found> {
        let op = Op::Mkdir {
            parent,
            name: name.into(),
            mode,
        };
        Box::pin(self.found(c, op, "mkdir"))
    }

    fn symlink<'a>(
        &'a self,
        c: &'a Creds,
        parent: u64,
        name: &'a str,
        target: &'a str,
    ) -> NsFuture<'a, Found> {
        let op = Op::Symlink {
            parent,
            name: name.into(),
            target: target.into(),
        };
        Box::pin(self.found(c, op, "symlink"))
    }

    fn mknod<'a>(
        &'a self,
        c: &'a Creds,
        parent: u64,
        name: &'a str,
        kind: FileKind,
        mode: u32,
        rdev: u32,
    ) -> NsFuture<'a, Found> {
        let op = Op::Mknod {
            parent,
            name: name.into(),
            kind,
            mode,
            rdev,
        };
        Box::pin(self.found(c, op, "mknod"))
    }

    fn link<'a>(
        &'a self,
        c: &'a Creds,
        ino: u64,
        parent: u64,
        name: &'a str,
    ) -> NsFuture<'a, Found> {
        let op = Op::Link {
            ino,
            parent,
            name: name.into(),
        };
        Box::pin(self.found(c, op, "link"))
    }

    fn unlink<'a>(
        &'a self,
        c: &'a Creds,
        parent: u64,
        name: &'a str,
        _open_here: OpenHere<'a>,
    ) -> NsFuture<'a, Removed> {
        // The MDS keeps an unlinked file's objects until it deletes them
        // from its queue; it names no inode back, only the directory.
        let op = Op::Unlink {
            parent,
            name: name.into(),
        };
        Box::pin(async move {
            Ok(Removed {
                ino: None,
                dir: self.dir_after(c, op).await?,
            })
        })
    }

    fn rmdir<'a>(&'a self, c: &'a Creds, parent: u64, name: &'a str) -> NsFuture<'a, Option<Attr>> {
        let op = Op::Rmdir {
            parent,
            name: name.into(),
        };
        Box::pin(self.dir_after(c, op))
    }

    fn rename<'a>(
        &'a self,
        c: &'a Creds,
        from: (u64, &'a str),
        to: (u64, &'a str),
        noreplace: bool,
        _open_here: OpenHere<'a>,
    ) -> NsFuture<'a, Renamed> {
        let op = Op::Rename {
            parent: from.0,
            name: from.1.into(),
            new_parent: to.0,
            new_name: to.1.into(),
            noreplace,
        };
        Box::pin(async move {
            Ok(match self.call(c, op).await? {
                MdsReply::Found(f) => Renamed {
                    moved: Some(f.entry.attr.ino),
                    found: Some(*f),
                    unchanged: false,
                },
                // An MDS of before the target directory came with it.
                MdsReply::Attr(a) => Renamed::of(a.ino),
                MdsReply::Done => Renamed {
                    unchanged: true,
                    ..Renamed::default()
                },
                _ => Renamed::default(),
            })
        })
    }

    fn readlink<'a>(&'a self, c: &'a Creds, ino: u64) -> NsFuture<'a, String> {
        Box::pin(async move {
            match self.call(c, Op::Readlink { ino }).await? {
                MdsReply::Target(t) => Ok(t),
                r => Err(bad_reply("readlink", &r)),
            }
        })
    }

    fn readdir_prefetch<'a>(
        &'a self,
        c: &'a Creds,
        ino: u64,
    ) -> NsFuture<'a, (Vec<DirEntry>, Vec<Listing>)> {
        Box::pin(async move {
            let mut out: Vec<DirEntry> = Vec::new();
            let mut prefetched = Vec::new();
            loop {
                let after = out.last().map(|e| e.name.clone());
                let op = Op::ReaddirPrefetch {
                    ino,
                    after,
                    max: 1000,
                };
                match self.call(c, op).await? {
                    MdsReply::DirPrefetch {
                        entries,
                        more,
                        listings,
                    } => {
                        out.extend(entries);
                        prefetched.extend(listings);
                        if !more {
                            return Ok((out, prefetched));
                        }
                    }
                    r => return Err(bad_reply("readdir", &r)),
                }
            }
        })
    }

    fn readdir<'a>(&'a self, c: &'a Creds, ino: u64) -> NsFuture<'a, Vec<DirEntry>> {
        Box::pin(self.list(c, ino, true))
    }

    fn readdir_names<'a>(&'a self, c: &'a Creds, ino: u64) -> NsFuture<'a, Vec<DirEntry>> {
        Box::pin(self.list(c, ino, false))
    }

    fn getxattr<'a>(&'a self, c: &'a Creds, ino: u64, name: &'a str) -> NsFuture<'a, Vec<u8>> {
        Box::pin(async move {
            let op = Op::GetXattr {
                ino,
                name: name.into(),
            };
            match self.call(c, op).await? {
                MdsReply::Xattr(v) => Ok(v),
                r => Err(bad_reply("getxattr", &r)),
            }
        })
    }

    fn setxattr<'a>(
        &'a self,
        c: &'a Creds,
        ino: u64,
        name: &'a str,
        value: &'a [u8],
        mode: XattrMode,
    ) -> NsFuture<'a, ()> {
        let op = Op::SetXattr {
            ino,
            name: name.into(),
            value: value.to_vec(),
            mode,
        };
        Box::pin(self.done(c, op))
    }

    fn listxattr<'a>(&'a self, c: &'a Creds, ino: u64) -> NsFuture<'a, Vec<String>> {
        Box::pin(async move {
            match self.call(c, Op::ListXattr { ino }).await? {
                MdsReply::XattrNames(v) => Ok(v),
                r => Err(bad_reply("listxattr", &r)),
            }
        })
    }

    fn removexattr<'a>(&'a self, c: &'a Creds, ino: u64, name: &'a str) -> NsFuture<'a, ()> {
        let op = Op::RemoveXattr {
            ino,
            name: name.into(),
        };
        Box::pin(self.done(c, op))
    }

    fn layout<'a>(&'a self, c: &'a Creds, ino: u64) -> NsFuture<'a, Option<Layout>> {
        Box::pin(async move {
            match self.call(c, Op::GetLayout { ino }).await? {
                MdsReply::Layout { layout, .. } => Ok(layout),
                r => Err(bad_reply("getlayout", &r)),
            }
        })
    }

    fn set_layout<'a>(&'a self, c: &'a Creds, ino: u64, spec: LayoutSpec) -> NsFuture<'a, ()> {
        Box::pin(self.done(c, Op::SetLayout { ino, spec }))
    }

    fn open<'a>(&'a self, c: &'a Creds, ino: u64, write: bool) -> NsFuture<'a, Found> {
        Box::pin(self.found(c, Op::Open { ino, write }, "open"))
    }

    fn extend_layout<'a>(&'a self, c: &'a Creds, ino: u64, objset: u64) -> NsFuture<'a, Found> {
        Box::pin(async move {
            match self.call(c, Op::ExtendLayout { ino, objset }).await? {
                MdsReply::Found(f) => Ok(*f),
                other => Err(FsError::new(
                    Errno::Io,
                    format!("inode {ino:#x}: EXTEND LAYOUT answered {other:?}, expected the file"),
                )),
            }
        })
    }

    fn commit_size<'a>(
        &'a self,
        c: &'a Creds,
        ino: u64,
        size: u64,
        mtime: i64,
    ) -> NsFuture<'a, Attr> {
        Box::pin(self.attr(c, Op::CommitSize { ino, size, mtime }, "commit size"))
    }

    fn released<'a>(&'a self, _ino: u64) -> NsFuture<'a, ()> {
        Box::pin(async { Ok(()) })
    }

    fn holding(&self, held: Vec<(u64, bool)>) -> NsFuture<'_, ()> {
        let op = Op::Holding { held };
        Box::pin(async move {
            self.mds
                .call(op)
                .await
                .map(|_| ())
                .map_err(crate::error::from_call)
        })
    }

    fn inodes(&self) -> NsFuture<'_, Option<u64>> {
        Box::pin(async { Ok(None) })
    }
}
