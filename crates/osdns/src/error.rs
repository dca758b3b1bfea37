//! Errors of namespace operations: the one [`posix::Error`] (a POSIX
//! errno, what the mount returns, and a message saying what failed).
//! OSD answers map to errnos through `posix`'s one table.

use net::ConnError;
pub use posix::Errno;
pub use posix::Error as NsError;

/// A damaged on-OSD structure.
pub fn corrupt(what: impl Into<String>) -> NsError {
    NsError::new(Errno::Io, format!("damaged namespace: {}", what.into()))
}

/// A failure on OSD `osd` ([`posix::Error::osd`]).
pub fn osd(osd: u32, e: &ConnError) -> NsError {
    NsError::osd(osd, e.remote_code(), e)
}

/// Results of namespace operations.
pub type Result<T> = std::result::Result<T, NsError>;
