//! The one error of a file-system operation above the wire — the client's,
//! the namespace on the OSDs' and the mount's: the [`Errno`] a POSIX
//! caller acts on, and a message saying what failed and where. (The MDS's
//! wire error, `proto::mds::MdsError`, carries the same two and converts
//! into it.)

use std::fmt::Display;

use proto::ErrorCode;
use proto::mds::MdsError;

use crate::errno::{Errno, from_osd};

/// A failed file-system operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    /// What a POSIX caller gets.
    pub errno: Errno,
    /// What happened.
    pub message: String,
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

impl Error {
    /// An error with `errno` and a message.
    pub fn new(errno: Errno, message: impl Into<String>) -> Error {
        Error {
            errno,
            message: message.into(),
        }
    }

    /// Whether this is `e`.
    pub fn is(&self, e: Errno) -> bool {
        self.errno == e
    }

    /// The Linux number of its errno.
    pub fn raw(&self) -> i32 {
        self.errno.raw()
    }

    /// A failure on OSD `osd`: its answer's `code` mapped by
    /// [`from_osd`], or EIO when it did not answer (`None`: unreachable,
    /// lost, timed out); `what` says what failed.
    pub fn osd(osd: u32, code: Option<ErrorCode>, what: &dyn Display) -> Error {
        let errno = code.map_or(Errno::Io, from_osd);
        Error::new(errno, format!("OSD {osd}: {what}"))
    }
}

impl From<MdsError> for Error {
    fn from(e: MdsError) -> Error {
        Error::new(e.errno, e.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_keeps_its_errno_and_says_its_message() {
        let e = Error::new(Errno::NoEnt, "no such name");
        assert!(e.is(Errno::NoEnt) && !e.is(Errno::Io));
        assert_eq!((e.raw(), e.to_string()), (2, "no such name".to_string()));
        let m: Error = MdsError::new(Errno::Stale, "gone").into();
        assert_eq!(m, Error::new(Errno::Stale, "gone"));
        let full = Error::osd(3, Some(ErrorCode::NoSpace), &"write refused");
        assert_eq!(full.errno, Errno::NoSpc);
        assert_eq!(full.message, "OSD 3: write refused");
        assert_eq!(Error::osd(3, None, &"lost").errno, Errno::Io);
    }
}
