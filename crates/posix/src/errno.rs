//! The one errno of every namespace: [`Errno`] (the wire carries it, so it
//! is defined in `proto`), and the one mapping from what an OSD answers to
//! what a POSIX caller sees.

use proto::ErrorCode;
pub use proto::mds::Errno;

/// The errno a POSIX caller gets when an OSD answers with `code`: a
/// missing object is ENOENT, an existing one EEXIST, a full OSD ENOSPC,
/// everything else (damage, refused capabilities, protocol errors) EIO.
pub fn from_osd(code: ErrorCode) -> Errno {
    match code {
        ErrorCode::NoObject => Errno::NoEnt,
        ErrorCode::Exists => Errno::Exist,
        ErrorCode::NoSpace | ErrorCode::Bound => Errno::NoSpc,
        _ => Errno::Io,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn osd_codes_map_once() {
        assert_eq!(from_osd(ErrorCode::NoObject), Errno::NoEnt);
        assert_eq!(from_osd(ErrorCode::Exists), Errno::Exist);
        assert_eq!(from_osd(ErrorCode::NoSpace), Errno::NoSpc);
        assert_eq!(from_osd(ErrorCode::Bound), Errno::NoSpc);
        assert_eq!(from_osd(ErrorCode::Checksum), Errno::Io);
        assert_eq!(from_osd(ErrorCode::CapRevoked), Errno::Io);
        assert_eq!(i32::from(Errno::NoEnt), 2);
        assert_eq!(Errno::OpNotSupp.raw(), 95);
        assert_eq!(Errno::BadF.raw(), 9);
    }
}
