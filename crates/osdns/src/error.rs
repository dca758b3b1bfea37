//! Errors of namespace operations: a POSIX errno (what the mount returns)
//! and a message saying what failed. Errnos are the one [`Errno`] of the
//! `posix` crate; OSD answers map to them through its one table.

use net::ConnError;
pub use posix::Errno;
use proto::mds::MdsError;

/// A failed namespace operation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct NsError {
    /// POSIX errno (the Linux value).
    pub errno: i32,
    /// What happened.
    pub message: String,
}

impl NsError {
    /// An error with `errno` and a message.
    pub fn new(errno: impl Into<i32>, message: impl Into<String>) -> NsError {
        NsError {
            errno: errno.into(),
            message: message.into(),
        }
    }

    /// A damaged on-OSD structure.
    pub fn corrupt(what: impl Into<String>) -> NsError {
        NsError::new(Errno::Io, format!("damaged namespace: {}", what.into()))
    }

    /// Whether this is `e`.
    pub fn is(&self, e: Errno) -> bool {
        self.errno == e.raw()
    }

    /// Whether the OSD said the object does not exist.
    pub fn is_missing(&self) -> bool {
        self.is(Errno::NoEnt)
    }

    /// An OSD failure on OSD `osd`, mapped by [`posix::errno::from_osd`];
    /// an OSD that cannot be reached is EIO.
    pub fn osd(osd: u32, e: &ConnError) -> NsError {
        let code = match e {
            ConnError::Remote(w) => posix::errno::from_osd(w.code),
            _ => Errno::Io,
        };
        NsError::new(code, format!("OSD {osd}: {e}"))
    }
}

impl From<MdsError> for NsError {
    fn from(e: MdsError) -> NsError {
        NsError::new(e.errno, e.message)
    }
}

/// Results of namespace operations.
pub type Result<T> = std::result::Result<T, NsError>;
