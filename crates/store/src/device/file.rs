//! A device on a block device or a regular file, opened with O_DIRECT so the
//! host page cache neither helps nor hides anything; `flush` is fdatasync,
//! which on a block device also flushes the drive's volatile cache.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use super::{BLOCK, Device, check_io};

/// A raw block device or a preallocated regular file.
pub struct FileDevice {
    file: File,
    path: PathBuf,
    len: u64,
    direct: bool,
    block_device: bool,
}

impl FileDevice {
    /// Opens an existing block device or file for direct I/O, taking an
    /// exclusive advisory lock so two processes (say a running OSD and an
    /// operator's `tessera store` command) never open one store at once.
    ///
    /// Falls back to buffered I/O (with a warning) only where the host file
    /// system rejects O_DIRECT (tmpfs); `flush` is still fdatasync there.
    pub fn open(path: &Path) -> io::Result<Self> {
        Self::open_with(path, true)
    }

    /// As [`FileDevice::open`]; `lock: false` skips the lock (only for tests
    /// that simulate a crashed process still holding it).
    pub fn open_with(path: &Path, lock: bool) -> io::Result<Self> {
        let meta = std::fs::metadata(path)?;
        let block_device = meta.file_type().is_block_device();
        if !block_device && !meta.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{} is neither a block device nor a regular file",
                    path.display()
                ),
            ));
        }
        let (file, direct) = match Self::open_flags(path, libc::O_DIRECT) {
            Ok(f) => (f, true),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                tracing::warn!(path = %path.display(), "O_DIRECT not supported here; using buffered I/O with fdatasync");
                (Self::open_flags(path, 0)?, false)
            }
            Err(e) => return Err(e),
        };
        if lock {
            // SAFETY: flock on a valid fd; no memory is passed.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
                let e = io::Error::last_os_error();
                return Err(if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
                    io::Error::new(
                        io::ErrorKind::WouldBlock,
                        format!(
                            "{} is in use by another process (a running `tessera osd`?)",
                            path.display()
                        ),
                    )
                } else {
                    e
                });
            }
        }
        let len = if block_device {
            block_device_size(&file)?
        } else {
            meta.len()
        };
        let len = len - len % BLOCK;
        Ok(FileDevice {
            file,
            path: path.to_owned(),
            len,
            direct,
            block_device,
        })
    }

    /// Creates (or extends) a regular file of `len` bytes with its space
    /// preallocated, then opens it. Refuses to shrink an existing file.
    pub fn create(path: &Path, len: u64) -> io::Result<Self> {
        let len = len - len % BLOCK;
        // Owner-only: a store image holds every object's bytes.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(path)?;
        let cur = file.metadata()?.len();
        if cur > len {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{} is already {cur} bytes, larger than the requested {len}",
                    path.display()
                ),
            ));
        }
        // SAFETY: fd is valid; fallocate has no memory-safety preconditions.
        let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len as libc::off_t) };
        if rc != 0 {
            let err = io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::ENOSPC) {
                return Err(err);
            }
            // File systems without fallocate: extend sparsely instead.
            file.set_len(len)?;
        }
        file.sync_all()?;
        drop(file);
        Self::open(path)
    }

    fn open_flags(path: &Path, flags: i32) -> io::Result<File> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(flags)
            .open(path)
    }

    /// Whether I/O bypasses the page cache.
    pub fn is_direct(&self) -> bool {
        self.direct
    }

    /// Whether the path is a block device (rather than a regular file).
    pub fn is_block_device(&self) -> bool {
        self.block_device
    }
}

fn block_device_size(file: &File) -> io::Result<u64> {
    const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;
    let mut size: u64 = 0;
    // SAFETY: BLKGETSIZE64 writes one u64 through the pointer we pass.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), BLKGETSIZE64, &mut size as *mut u64) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(size)
}

impl Device for FileDevice {
    fn len(&self) -> u64 {
        self.len
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        check_io(buf, offset, self.len)?;
        self.file.read_exact_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        check_io(buf, offset, self.len)?;
        self.file.write_all_at(buf, offset)
    }
    fn flush(&self) -> io::Result<()> {
        self.file.sync_data()
    }
    fn describe(&self) -> String {
        self.path.display().to_string()
    }
}
