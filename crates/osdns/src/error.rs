//! Errors of namespace operations: a POSIX errno (what the mount returns)
//! and a message saying what failed.

use osd::client::ClientError;
use proto::ErrorCode;

/// Linux errno values used here.
pub mod errno {
    /// No such file or directory.
    pub const ENOENT: i32 = 2;
    /// I/O error.
    pub const EIO: i32 = 5;
    /// Permission denied.
    pub const EACCES: i32 = 13;
    /// Device or resource busy.
    pub const EBUSY: i32 = 16;
    /// File exists.
    pub const EEXIST: i32 = 17;
    /// Cross-device link (not used) / invalid cross-directory move.
    pub const EXDEV: i32 = 18;
    /// Not a directory.
    pub const ENOTDIR: i32 = 20;
    /// Is a directory.
    pub const EISDIR: i32 = 21;
    /// Invalid argument.
    pub const EINVAL: i32 = 22;
    /// No space left on device.
    pub const ENOSPC: i32 = 28;
    /// Too many links.
    pub const EMLINK: i32 = 31;
    /// Name too long.
    pub const ENAMETOOLONG: i32 = 36;
    /// Directory not empty.
    pub const ENOTEMPTY: i32 = 39;
    /// No such attribute.
    pub const ENODATA: i32 = 61;
    /// Operation not supported.
    pub const EOPNOTSUPP: i32 = 95;
    /// Operation not permitted.
    pub const EPERM: i32 = 1;
}

/// A failed namespace operation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct NsError {
    /// POSIX errno.
    pub errno: i32,
    /// What happened.
    pub message: String,
}

impl NsError {
    /// An error with `errno` and a message.
    pub fn new(errno: i32, message: impl Into<String>) -> NsError {
        NsError {
            errno,
            message: message.into(),
        }
    }

    /// A damaged on-OSD structure.
    pub fn corrupt(what: impl Into<String>) -> NsError {
        NsError::new(errno::EIO, format!("damaged namespace: {}", what.into()))
    }

    /// Whether the OSD said the object does not exist.
    pub fn is_missing(&self) -> bool {
        self.errno == errno::ENOENT
    }

    /// An OSD failure on OSD `osd`: missing objects are ENOENT, a full OSD
    /// ENOSPC, the rest EIO.
    pub fn osd(osd: u32, e: &ClientError) -> NsError {
        let code = match e {
            ClientError::Remote(w) => match w.code {
                ErrorCode::NoObject => errno::ENOENT,
                ErrorCode::Exists => errno::EEXIST,
                ErrorCode::NoSpace => errno::ENOSPC,
                _ => errno::EIO,
            },
            _ => errno::EIO,
        };
        NsError::new(code, format!("OSD {osd}: {e}"))
    }
}

/// Results of namespace operations.
pub type Result<T> = std::result::Result<T, NsError>;
