//! Mounting: checks the mount point (missing, not a directory, already a
//! mount point, not empty: each gets its own message), mounts with several request
//! threads, and unmounts cleanly when asked.

use std::path::{Path, PathBuf};
use std::time::Duration;

use client::Client;
use fuser::{BackgroundSession, Config, MountOption, SessionACL};

use crate::base::TesseraFs;

/// How to mount.
#[derive(Debug, Clone)]
pub struct MountOptions {
    /// Kernel request threads.
    pub threads: usize,
    /// How long the kernel caches entries and attributes.
    pub ttl: Duration,
    /// Let other users than the mounter use the mount (root mounts only).
    pub allow_other: bool,
    /// Mount over a directory that has entries (hidden while mounted).
    pub allow_nonempty: bool,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            threads: 16,
            ttl: Duration::from_secs(1),
            allow_other: true,
            allow_nonempty: false,
        }
    }
}

/// Whether `p` is a mount point (listed in /proc/self/mountinfo).
pub fn is_mount_point(p: &Path) -> bool {
    let Ok(canon) = p.canonicalize() else {
        return false;
    };
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    info.lines().any(|l| {
        l.split(' ')
            .nth(4)
            .is_some_and(|m| Path::new(&m.replace("\\040", " ")) == canon)
    })
}

/// Why a mount could not be made.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    /// The mount point does not exist.
    #[error("mount point {} does not exist (create it with: mkdir -p {})", .0.display(), .0.display())]
    Missing(PathBuf),
    /// The mount point is not a directory.
    #[error("mount point {} is not a directory", .0.display())]
    NotADirectory(PathBuf),
    /// The mount point has entries, which the mount would hide.
    #[error(
        "mount point {} is not empty: its files would be hidden while mounted (mount on an empty \
         directory, or pass --nonempty)",
        .0.display()
    )]
    NotEmpty(PathBuf),
    /// Something is already mounted there.
    #[error(
        "mount point {} is busy: something is already mounted there (unmount it with: umount {})",
        .0.display(),
        .0.display()
    )]
    Busy(PathBuf),
    /// There is no `/dev/fuse`.
    #[error("/dev/fuse is missing: load the fuse module (modprobe fuse)")]
    NoFuseDevice,
    /// Mounting needs root here.
    #[error(
        "cannot mount on {}: permission denied (mounting needs root; /dev/fuse is root-only here)",
        .0.display()
    )]
    PermissionDenied(PathBuf),
    /// Any other failure, with the path and what the OS said.
    #[error("cannot mount on {}: {source}", path.display())]
    Io {
        /// The mount point.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
}

/// Checks `p` can be mounted on (and is empty, unless `allow_nonempty`);
/// the error says what is wrong.
pub fn check_mount_point(p: &Path, allow_nonempty: bool) -> Result<PathBuf, MountError> {
    let io = |source| MountError::Io {
        path: p.into(),
        source,
    };
    let meta = std::fs::metadata(p).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            MountError::Missing(p.into())
        } else {
            io(e)
        }
    })?;
    if !meta.is_dir() {
        return Err(MountError::NotADirectory(p.into()));
    }
    if is_mount_point(p) {
        return Err(MountError::Busy(p.into()));
    }
    if !allow_nonempty && std::fs::read_dir(p).map_err(io)?.next().is_some() {
        return Err(MountError::NotEmpty(p.into()));
    }
    if !std::path::Path::new("/dev/fuse").exists() {
        return Err(MountError::NoFuseDevice);
    }
    p.canonicalize().map_err(io)
}

/// Mounts `client` on `mountpoint` in the background; requests run on `rt`.
/// Dropping or unmounting the session ends it.
pub fn mount(
    client: Client,
    rt: tokio::runtime::Handle,
    mountpoint: &Path,
    opts: &MountOptions,
) -> Result<BackgroundSession, MountError> {
    let mp = check_mount_point(mountpoint, opts.allow_nonempty)?;
    let fs = TesseraFs::new(client, rt, opts.ttl);
    let mut cfg = Config::default();
    cfg.mount_options = vec![
        MountOption::FSName("tessera".into()),
        MountOption::Subtype("tessera".into()),
        MountOption::DefaultPermissions,
    ];
    if opts.allow_other {
        cfg.acl = SessionACL::All;
    }
    cfg.n_threads = Some(opts.threads.max(1));
    cfg.clone_fd = true;
    let notifier = fs.notifier();
    let session = fuser::spawn_mount(fs, &mp, &cfg).map_err(|e| match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => MountError::PermissionDenied(mp.clone()),
        Some(libc::EBUSY) => MountError::Busy(mp.clone()),
        _ => MountError::Io {
            path: mp.clone(),
            source: e,
        },
    })?;
    let _ = notifier.set(session.notifier());
    Ok(session)
}
