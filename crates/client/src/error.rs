//! The client's error: a POSIX errno (what FUSE and callers act on) plus a
//! message saying what failed and where.

use mds::CallError;
use osd::client::ClientError;

/// Linux errno values the client produces itself.
pub mod errno {
    /// I/O error.
    pub const EIO: i32 = 5;
    /// Bad file handle.
    pub const EBADF: i32 = 9;
    /// Invalid argument.
    pub const EINVAL: i32 = 22;
    /// File too large.
    pub const EFBIG: i32 = 27;
    /// No space left.
    pub const ENOSPC: i32 = 28;
    /// Is a directory.
    pub const EISDIR: i32 = 21;
    /// No such file.
    pub const ENOENT: i32 = 2;
    /// Permission denied.
    pub const EACCES: i32 = 13;
    /// Not a directory.
    pub const ENOTDIR: i32 = 20;
}

/// A failed client operation.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct FsError {
    /// POSIX errno.
    pub errno: i32,
    /// What happened.
    pub message: String,
}

impl FsError {
    /// An error with `errno` and a message.
    pub fn new(errno: i32, message: impl Into<String>) -> FsError {
        FsError {
            errno,
            message: message.into(),
        }
    }

    /// An OSD failure on OSD `osd` (EIO, or ENOSPC when the OSD is full).
    pub fn osd(osd: u32, e: &ClientError) -> FsError {
        let code = match e {
            ClientError::Remote(w) if w.code == proto::ErrorCode::NoSpace => errno::ENOSPC,
            _ => errno::EIO,
        };
        FsError::new(code, format!("OSD {osd}: {e}"))
    }
}

impl From<CallError> for FsError {
    fn from(e: CallError) -> FsError {
        FsError::new(e.errno(), e.to_string())
    }
}

/// Client results.
pub type Result<T> = std::result::Result<T, FsError>;
