//! The client's error: the one [`posix::Error`] — a POSIX errno (what
//! FUSE and callers act on) plus a message saying what failed and where.
//! OSD answers map to errnos through `posix`'s one table.

use net::{CallError, ConnError};
pub use posix::Errno;
pub use posix::Error as FsError;

/// A failure on OSD `osd` ([`posix::Error::osd`]).
pub fn osd(osd: u32, e: &ConnError) -> FsError {
    FsError::osd(osd, e.remote_code(), e)
}

/// A failed MDS call: the MDS's errno, or EIO when it could not be reached.
pub fn from_call(e: CallError) -> FsError {
    FsError::new(e.code(), e.to_string())
}

/// Client results.
pub type Result<T> = std::result::Result<T, FsError>;
