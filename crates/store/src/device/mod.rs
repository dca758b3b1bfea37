//! Block devices the store runs on. Everything the store reads or writes goes
//! through [`Device`], so the same store code runs on a raw block device or a
//! file with O_DIRECT ([`FileDevice`]), in memory ([`MemDevice`]), and on a
//! device that models power loss and I/O errors ([`FaultDevice`]).
//!
//! Invariant for every implementation: offsets and lengths are multiples of
//! [`SECTOR`]; a write is durable only after a later [`Device::flush`] returns.

mod aligned;
mod fault;
mod file;
mod mem;

pub use aligned::AlignedBuf;
pub use fault::{CrashMode, FaultConfig, FaultDevice};
pub use file::FileDevice;
pub use mem::MemDevice;

use std::io;

/// Smallest unit a device writes atomically; torn writes tear at this size.
pub const SECTOR: u64 = 512;
/// Alignment of I/O buffers and the store's block size.
pub const BLOCK: u64 = 4096;

/// A block device: positioned reads and writes plus a durability barrier.
pub trait Device: Send + Sync {
    /// Size of the device in bytes (a multiple of [`BLOCK`]).
    fn len(&self) -> u64;
    /// Whether the device has no blocks at all.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Reads `buf.len()` bytes at `offset`; both aligned to [`SECTOR`].
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// Writes `buf` at `offset`; not durable until [`Device::flush`].
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Makes every completed write durable (fdatasync / cache flush).
    fn flush(&self) -> io::Result<()>;
    /// A short description for logs and errors (path or kind).
    fn describe(&self) -> String;
}

/// Checks the alignment contract of [`Device`] for one request: offset,
/// length and buffer address all sector-aligned (what O_DIRECT demands, so
/// the in-memory devices catch a misaligned buffer in tests too).
pub(crate) fn check_io(buf: &[u8], offset: u64, dev_len: u64) -> io::Result<()> {
    let len = buf.len();
    if !offset.is_multiple_of(SECTOR)
        || !(len as u64).is_multiple_of(SECTOR)
        || !(buf.as_ptr() as u64).is_multiple_of(SECTOR)
    {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "unaligned I/O: offset {offset}, length {len}, buffer address {:p}",
                buf.as_ptr()
            ),
        ));
    }
    if offset
        .checked_add(len as u64)
        .is_none_or(|end| end > dev_len)
    {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("I/O past end of device: offset {offset}, length {len}, device {dev_len}"),
        ));
    }
    Ok(())
}

/// A shared device is a device (tests keep a handle to inspect or crash it).
impl<D: Device + ?Sized> Device for std::sync::Arc<D> {
    fn len(&self) -> u64 {
        (**self).len()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        (**self).read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        (**self).write_at(buf, offset)
    }
    fn flush(&self) -> io::Result<()> {
        (**self).flush()
    }
    fn describe(&self) -> String {
        (**self).describe()
    }
}
