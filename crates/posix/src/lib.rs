//! The POSIX rules every Tessera namespace shares — the MDS's, the one kept
//! on the OSDs, and the client that checks permissions itself in the
//! latter mode — so a rule edited here changes them all alike and none of
//! them depends on another's crate:
//!
//! - [`perm`]: permission checks for a caller's credentials;
//! - [`attr`]: a new inode's attributes (setgid inheritance) and the rules
//!   of setattr;
//! - [`names`]: path-component and extended-attribute name checks;
//! - [`locks`]: POSIX byte-range locks on one file (and `flock` as NFS
//!   emulates it);
//! - [`errno`]: the one [`Errno`] and the one mapping from OSD errors;
//! - [`error`]: the one [`Error`] of the client, the namespace on the OSDs
//!   and the mount.

pub mod attr;
pub mod errno;
pub mod error;
pub mod locks;
pub mod names;
pub mod perm;

pub use attr::{apply_setattr, kind_name, new_attr};
pub use errno::Errno;
pub use error::Error;
pub use names::{check_name, check_xattr_name, name_from_bytes, name_to_bytes, raw_len};
pub use perm::{R, W, X};
