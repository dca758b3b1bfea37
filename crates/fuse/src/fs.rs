//! The FUSE file system: each kernel request becomes a client-library call
//! run on the client's tokio runtime (fuser's worker threads block on it,
//! so several requests are in progress at once).

use std::ffi::OsStr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use client::FsError;
use fuser::{
    AccessFlags, CopyFileRangeFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags,
    Generation, INodeNo, InitFlags, KernelConfig, LockOwner, OpenAccMode, OpenFlags, RenameFlags,
    ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry,
    ReplyLock, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow,
    WriteFlags,
};
use proto::mds::{FileKind, SetAttr, XattrMode};

use crate::attr::{file_attr, kind, kind_of_mode};
use crate::base::{Listing, TesseraFs};
use crate::locks;
use crate::request::{done, may, name, set_time, xattr_name};

impl Filesystem for TesseraFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let _ = config.set_max_write(1 << 20);
        let _ = config.set_max_readahead(1 << 20);
        let _ = config.add_capabilities(
            InitFlags::FUSE_MAX_PAGES
                | InitFlags::FUSE_DO_READDIRPLUS
                | InitFlags::FUSE_READDIRPLUS_AUTO
                | InitFlags::FUSE_PARALLEL_DIROPS
                // Locks between mounts: the kernel passes them on.
                | InitFlags::FUSE_POSIX_LOCKS
                | InitFlags::FUSE_FLOCK_LOCKS,
        );
        // Asked for alone (a kernel before 5.11 does not offer it, and
        // fuser grants a set of flags all or none): set-id bits and file
        // capabilities are then stripped here (client::privs) and the
        // kernel stops asking for security.capability before every write.
        self.strips = config
            .add_capabilities(InitFlags::FUSE_HANDLE_KILLPRIV_V2)
            .is_ok();
        Ok(())
    }

    fn lookup(&self, req: &Request, parent: INodeNo, n: &OsStr, reply: ReplyEntry) {
        let c = self.creds(req);
        let r = name(n).and_then(|n| {
            self.run(self.client.lookup(&c, self.inos.from_fuse(parent), &n))
                .map(|e| e.attr)
        });
        self.entry(reply, (parent, n), r);
    }

    fn getattr(&self, req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let c = self.creds(req);
        match self.run(self.client.getattr(&c, self.inos.from_fuse(ino))) {
            Ok(a) => reply.attr(&self.ttl, &file_attr(&self.inos, &a)),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<std::time::SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<std::time::SystemTime>,
        _chgtime: Option<std::time::SystemTime>,
        _bkuptime: Option<std::time::SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        // A truncate by anyone but root drops the set-id bits, and so
        // does any chown (to the same owner too) that may go ahead; a
        // truncate or chown drops file capabilities.
        let chown = uid.is_some() || gid.is_some();
        let set_id = (size.is_some() && req.uid() != 0) || (chown && self.may_chown(req, ino));
        if (size.is_some() || chown)
            && let Err(e) = self.strip(req, ino, set_id)
        {
            return reply.error(e);
        }
        let c = self.creds(req);
        let ino = self.inos.from_fuse(ino);
        let set = SetAttr {
            mode: mode.map(|m| m & 0o7777),
            uid,
            gid,
            size,
            atime: atime.map(set_time),
            mtime: mtime.map(set_time),
            via_handle: false,
        };
        match self.run(self.client.setattr_via(&c, ino, set, fh.map(|f| f.0))) {
            Ok(a) => reply.attr(&self.ttl, &file_attr(&self.inos, &a)),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        let c = self.creds(req);
        match self.run(self.client.readlink(&c, self.inos.from_fuse(ino))) {
            Ok(t) => reply.data(posix::name_to_bytes(&t).as_ref()),
            Err(e) => reply.error(e),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        n: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let Some(k) = kind_of_mode(mode) else {
            reply.error(Errno::from_i32(libc::EINVAL));
            return;
        };
        let c = self.creds(req);
        let at = parent;
        let parent = self.inos.from_fuse(parent);
        let perm = mode & !umask & 0o7777;
        let r = name(n).and_then(|n| {
            self.run(async {
                if k != FileKind::File {
                    return Ok(self.client.mknod(&c, parent, &n, k, perm, rdev).await?.attr);
                }
                let (e, fh) = self.client.create(&c, parent, &n, perm, true).await?;
                self.client.release(fh).await?;
                Ok(e.attr)
            })
        });
        self.entry(reply, (at, n), r);
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        n: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let c = self.creds(req);
        let r = name(n).and_then(|n| {
            self.run(
                self.client
                    .mkdir(&c, self.inos.from_fuse(parent), &n, mode & !umask & 0o7777),
            )
            .map(|e| e.attr)
        });
        self.entry(reply, (parent, n), r);
    }

    fn unlink(&self, req: &Request, parent: INodeNo, n: &OsStr, reply: ReplyEmpty) {
        let c = self.creds(req);
        done(
            reply,
            name(n).and_then(|n| self.run(self.client.unlink(&c, self.inos.from_fuse(parent), &n))),
        );
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, n: &OsStr, reply: ReplyEmpty) {
        let c = self.creds(req);
        done(
            reply,
            name(n).and_then(|n| self.run(self.client.rmdir(&c, self.inos.from_fuse(parent), &n))),
        );
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &std::path::Path,
        reply: ReplyEntry,
    ) {
        let c = self.creds(req);
        let r = name(link_name).and_then(|n| {
            let t = crate::request::target(target)?;
            self.run(self.client.symlink(&c, self.inos.from_fuse(parent), &n, &t))
                .map(|e| e.attr)
        });
        self.entry(reply, (parent, link_name), r);
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        n: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        if !(flags - RenameFlags::RENAME_NOREPLACE).is_empty() {
            // RENAME_EXCHANGE and RENAME_WHITEOUT are not supported.
            reply.error(Errno::from_i32(libc::EINVAL));
            return;
        }
        let c = self.creds(req);
        let noreplace = flags.contains(RenameFlags::RENAME_NOREPLACE);
        let r = name(n).and_then(|a| {
            let b = name(newname)?;
            self.run(self.client.rename(
                &c,
                self.inos.from_fuse(parent),
                &a,
                self.inos.from_fuse(newparent),
                &b,
                noreplace,
            ))
        });
        done(reply, r);
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let c = self.creds(req);
        let r = name(newname).and_then(|n| {
            self.run(self.client.link(
                &c,
                self.inos.from_fuse(ino),
                self.inos.from_fuse(newparent),
                &n,
            ))
            .map(|e| e.attr)
        });
        self.entry(reply, (newparent, newname), r);
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let c = self.creds(req);
        let write = flags.acc_mode() != OpenAccMode::O_RDONLY;
        match self.run(self.client.open(&c, self.inos.from_fuse(ino), write)) {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let r = self.run(self.client.read_checked(fh.0, offset, size));
        let mount = (&self.client, &self.notifier, &self.ends);
        crate::short_reads::answer(r, mount, (ino, fh.0), (offset, size), reply);
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        // What the kernel leaves to us (FUSE_HANDLE_KILLPRIV_V2): the
        // set-id bits when the writer lacks CAP_FSETID, and capabilities.
        let set_id = write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID);
        if let Err(e) = self.strip(req, ino, set_id) {
            return reply.error(e);
        }
        if flags.0 & libc::O_APPEND != 0 {
            // The kernel's offset is its cached length, which may predate
            // another mount's appends (closed before this open): the end
            // is the client's. If it differs, the kernel's pages and
            // length are dropped once this write is answered.
            return match self.run(self.client.write_append(fh.0, data)) {
                Ok((n, at)) => {
                    reply.written(n);
                    if at != offset {
                        let notifier = self.notifier.clone();
                        std::thread::spawn(move || locks::drop_kernel_cache(&notifier, ino));
                    }
                }
                Err(e) => reply.error(e),
            };
        }
        match self.run(self.client.write(fh.0, offset, data)) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        let r = self.run(self.client.close(fh.0));
        // A process's close drops its POSIX locks on the file.
        let u = self.run(
            self.client
                .unlock_owner(self.inos.from_fuse(ino), lock_owner.0),
        );
        done(reply, r.and(u));
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        // The open file's own locks (flock, OFD) go with it: the client
        // knows which owners locked through the handle.
        done(reply, self.run(self.client.release(fh.0)));
    }

    fn getlk(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        reply: ReplyLock,
    ) {
        let c = self.creds(req);
        let r = locks::spec(lock_owner, start, end, typ, pid)
            .and_then(|l| self.run(self.client.getlk(&c, fh.0, l)));
        match r {
            Ok(Some(x)) => {
                reply.locked(x.start, locks::kernel_end(x.end), locks::typ(x.kind), x.pid)
            }
            Ok(None) => reply.locked(0, 0, libc::F_UNLCK, 0),
            Err(e) => reply.error(e),
        }
    }

    fn setlk(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        sleep: bool,
        reply: ReplyEmpty,
    ) {
        let c = self.creds(req);
        let l = match locks::spec(lock_owner, start, end, typ, pid) {
            Ok(l) => l,
            Err(e) => return reply.error(e),
        };
        let set = locks::set(
            self.client.clone(),
            (self.notifier.clone(), self.names.clone(), self.inos),
            ino,
            c,
            fh.0,
            (l, sleep),
            req.pid(),
        );
        // A wait may be long: it must not hold one of the request threads.
        self.rt.spawn(async move { done(reply, set.await) });
    }

    /// No ioctls (a terminal check, `isatty`, is the usual caller): ENOTTY,
    /// quietly.
    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: fuser::IoctlFlags,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: fuser::ReplyIoctl,
    ) {
        reply.error(Errno::from_i32(libc::ENOTTY));
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        done(reply, self.run(self.client.fsync(fh.0)));
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        done(reply, self.run(self.client.sync_namespace()));
    }

    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        if let Err(e) = self.strip(req, ino, req.uid() != 0) {
            return reply.error(e);
        }
        let c = self.creds(req);
        done(
            reply,
            self.run(self.client.fallocate(&c, fh.0, offset, length, mode)),
        );
    }

    fn copy_file_range(
        &self,
        req: &Request,
        _ino_in: INodeNo,
        fh_in: FileHandle,
        offset_in: u64,
        ino_out: INodeNo,
        fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        _flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        // The kernel checked the descriptors' modes and passes no flags.
        if let Err(e) = self.strip(req, ino_out, req.uid() != 0) {
            return reply.error(e);
        }
        match self.run(
            self.client
                .copy_range(fh_in.0, offset_in, fh_out.0, offset_out, len),
        ) {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(e),
        }
    }

    fn lseek(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        // The kernel asks only for SEEK_DATA and SEEK_HOLE.
        let data = match whence {
            libc::SEEK_DATA => true,
            libc::SEEK_HOLE => false,
            _ => return reply.error(Errno::from_i32(libc::EINVAL)),
        };
        let Ok(off) = u64::try_from(offset) else {
            return reply.error(Errno::from_i32(libc::ENXIO));
        };
        match self.run(self.client.seek_data(fh.0, off, data)) {
            Ok(n) => reply.offset(n as i64),
            Err(e) => reply.error(e),
        }
    }

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let c = self.creds(req);
        let dir = self.inos.from_fuse(ino);
        let r = self.run(async {
            let a = self.client.getattr(&c, dir).await?;
            if a.kind != FileKind::Dir {
                return Err(FsError::new(
                    client::error::Errno::NotDir,
                    "not a directory",
                ));
            }
            // "..": the parent this client last saw (the kernel keeps its own).
            let parent = self.client.parent_hint(dir);
            let since = self.client.commit_number();
            let entries = self.client.readdir(&c, dir).await?;
            Ok(Listing {
                ino: dir,
                parent,
                entries,
                since,
            })
        });
        match r {
            Ok(l) => {
                let fh = self.next_dir.fetch_add(1, Ordering::Relaxed);
                self.dirs
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(fh, Arc::new(l));
                reply.opened(FileHandle(fh), FopenFlags::empty());
            }
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let Some(l) = self.listing(fh) else {
            reply.error(Errno::from_i32(libc::EBADF));
            return;
        };
        let dots = [(l.ino, "."), (l.parent, "..")];
        let total = l.entries.len() as u64 + 2;
        for i in offset..total {
            let full = if i < 2 {
                let (ino, n) = dots[i as usize];
                reply.add(self.inos.to_fuse(ino), i + 1, FileType::Directory, n)
            } else {
                let e = &l.entries[(i - 2) as usize];
                reply.add(
                    self.inos.to_fuse(e.ino),
                    i + 1,
                    kind(e.kind),
                    crate::request::os_name(&e.name),
                )
            };
            if full {
                break;
            }
        }
        reply.ok();
    }

    fn readdirplus(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let Some(l) = self.listing(fh) else {
            reply.error(Errno::from_i32(libc::EBADF));
            return;
        };
        let c = self.creds(req);
        let total = l.entries.len() as u64 + 2;
        for i in offset..total {
            let full = if i < 2 {
                let ino = if i == 0 { l.ino } else { l.parent };
                let Ok(a) = self.run(self.client.getattr(&c, ino)) else {
                    continue;
                };
                let n = if i == 0 { "." } else { ".." };
                reply.add(
                    self.inos.to_fuse(ino),
                    i + 1,
                    n,
                    &self.ttl,
                    &file_attr(&self.inos, &a),
                    Generation(0),
                )
            } else {
                let e = &l.entries[(i - 2) as usize];
                let a: FileAttr = match &e.attr {
                    // As the mount knows it now: it may have written or
                    // committed more since the listing was read.
                    Some(a) => file_attr(&self.inos, &self.client.as_known(a.clone(), l.since)),
                    None => match self.run(self.client.getattr(&c, e.ino)) {
                        Ok(a) => file_attr(&self.inos, &a),
                        Err(_) => continue,
                    },
                };
                self.names
                    .handed(ino, &crate::request::os_name(&e.name), &a);
                reply.add(
                    self.inos.to_fuse(e.ino),
                    i + 1,
                    crate::request::os_name(&e.name),
                    &self.ttl,
                    &a,
                    Generation(0),
                )
            };
            if full {
                break;
            }
        }
        reply.ok();
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.dirs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&fh.0);
        reply.ok();
    }

    fn statfs(&self, req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let c = self.creds(req);
        match self.run(self.client.statfs(&c)) {
            Ok(s) => {
                let bs = 4096u64;
                let blocks = s.capacity / bs;
                let free = s.capacity.saturating_sub(s.used) / bs;
                reply.statfs(
                    blocks,
                    free,
                    free,
                    s.inodes + (1 << 32),
                    1 << 32,
                    bs as u32,
                    s.name_max,
                    bs as u32,
                );
            }
            Err(e) => reply.error(e),
        }
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        n: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let c = self.creds(req);
        let mode = if flags & libc::XATTR_CREATE != 0 {
            XattrMode::Create
        } else if flags & libc::XATTR_REPLACE != 0 {
            XattrMode::Replace
        } else {
            XattrMode::Either
        };
        let r = xattr_name(n).and_then(|n| {
            self.run(
                self.client
                    .setxattr(&c, self.inos.from_fuse(ino), n, value, mode),
            )
        });
        done(reply, r);
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, n: &OsStr, size: u32, reply: ReplyXattr) {
        let c = self.creds(req);
        match xattr_name(n)
            .and_then(|n| self.run(self.client.getxattr(&c, self.inos.from_fuse(ino), n)))
        {
            Ok(v) if size == 0 => reply.size(v.len() as u32),
            Ok(v) if v.len() > size as usize => reply.error(Errno::from_i32(libc::ERANGE)),
            Ok(v) => reply.data(&v),
            Err(e) => reply.error(e),
        }
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let c = self.creds(req);
        match self.run(self.client.listxattr(&c, self.inos.from_fuse(ino))) {
            Ok(names) => {
                let buf = crate::request::xattr_list(&names);
                if size == 0 {
                    reply.size(buf.len() as u32);
                } else if buf.len() > size as usize {
                    reply.error(Errno::from_i32(libc::ERANGE));
                } else {
                    reply.data(&buf);
                }
            }
            Err(e) => reply.error(e),
        }
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, n: &OsStr, reply: ReplyEmpty) {
        let c = self.creds(req);
        done(
            reply,
            xattr_name(n)
                .and_then(|n| self.run(self.client.removexattr(&c, self.inos.from_fuse(ino), n))),
        );
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        let c = self.creds(req);
        match self.run(self.client.getattr(&c, self.inos.from_fuse(ino))) {
            Ok(a) if may(&a, &c, mask) => reply.ok(),
            Ok(_) => reply.error(Errno::from_i32(libc::EACCES)),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        n: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let c = self.creds(req);
        let exclusive = flags & libc::O_EXCL != 0;
        let r = name(n).and_then(|n| {
            self.run(self.client.create(
                &c,
                self.inos.from_fuse(parent),
                &n,
                mode & !umask & 0o7777,
                exclusive,
            ))
        });
        match r {
            Ok((e, fh)) => {
                let a = file_attr(&self.inos, &e.attr);
                self.names.handed(parent, n, &a);
                reply.created(
                    &self.ttl,
                    &a,
                    Generation(0),
                    FileHandle(fh),
                    FopenFlags::empty(),
                )
            }
            Err(e) => reply.error(e),
        }
    }
}
