//! The client's error: a POSIX errno (what FUSE and callers act on) plus a
//! message saying what failed and where. Errnos are the one [`Errno`] of
//! the `posix` crate; OSD answers map to them through its one table.

use net::{CallError, ConnError};
pub use posix::Errno;
use proto::mds::MdsError;

/// A failed client operation.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct FsError {
    /// POSIX errno (the Linux value).
    pub errno: i32,
    /// What happened.
    pub message: String,
}

impl FsError {
    /// An error with `errno` and a message.
    pub fn new(errno: impl Into<i32>, message: impl Into<String>) -> FsError {
        FsError {
            errno: errno.into(),
            message: message.into(),
        }
    }

    /// Whether this is `e`.
    pub fn is(&self, e: Errno) -> bool {
        self.errno == e.raw()
    }

    /// An OSD failure on OSD `osd`, mapped by [`posix::errno::from_osd`];
    /// an OSD that cannot be reached is EIO.
    pub fn osd(osd: u32, e: &ConnError) -> FsError {
        let code = match e {
            ConnError::Remote(w) => posix::errno::from_osd(w.code),
            _ => Errno::Io,
        };
        FsError::new(code, format!("OSD {osd}: {e}"))
    }
}

impl From<CallError> for FsError {
    fn from(e: CallError) -> FsError {
        FsError::new(e.errno(), e.to_string())
    }
}

impl From<osdns::NsError> for FsError {
    fn from(e: osdns::NsError) -> FsError {
        FsError::new(e.errno, e.message)
    }
}

impl From<MdsError> for FsError {
    fn from(e: MdsError) -> FsError {
        FsError::new(e.errno, e.message)
    }
}

/// Client results.
pub type Result<T> = std::result::Result<T, FsError>;
