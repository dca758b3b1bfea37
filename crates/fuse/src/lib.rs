//! The FUSE mount: Tessera as a POSIX file system for unmodified programs.
//! [`base::TesseraFs`] answers the kernel's requests with the client library
//! (several request threads, bridged onto the client's tokio runtime);
//! [`request`] reads what each request carries; [`locks`] maps the
//! kernel's lock requests, [`kernel_names`] the names to forget after
//! one; [`short_reads`] orders answers shorter than
//! asked; [`mount`] checks the mount point and mounts.

pub mod attr;
pub mod base;
pub mod fs;
pub mod kernel_names;
pub mod locks;
pub mod mount;
pub mod request;
pub mod short_reads;

/// A running mount (unmounted by `umount_and_join` or when dropped).
pub use fuser::BackgroundSession;
pub use mount::{MountError, MountOptions, mount};
