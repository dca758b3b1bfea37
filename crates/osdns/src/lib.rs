//! The namespace on the OSDs (Ali et al.): no metadata server in the
//! metadata path. A directory is an OSD object whose entries are attributes
//! on a hash page (name hash → attribute number), collisions chained through
//! a list page; inserts and removes are one compare-and-swap round trip in
//! the atomic protocol, or lock / look up / change / unlock in the
//! lock-based one. A file's metadata lives in attributes of its first
//! stripe object. Operations are ordered so a client that dies between two
//! OSD commands never leaves an entry naming a missing object; `fsck`
//! finishes or undoes what it left. See `docs/OSD-NAMESPACE.md`.

pub mod dir;
pub mod error;
pub mod format;
pub mod fs;
pub mod fsck;
pub mod hash;
pub mod rename;
pub mod transport;

pub use error::{NsError, Result};
pub use format::{Dirent, Inode, Kind, Protocol};
pub use fs::{DirRef, OsdFs};
pub use hash::DirHash;
pub use transport::{Authority, Credentials, MdsAuthority, Osds};
