//! A loop device with direct I/O over a fully written file: the same block
//! device for Tessera and every baseline (without `--direct-io=on` the loop
//! device goes through the page cache and benchmarks lie; a sparse or
//! fallocated backing file would charge first writes with host metadata).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

/// An attached loop device, detached on drop.
pub struct LoopDev {
    /// `/dev/loopN`.
    pub path: PathBuf,
    backing: PathBuf,
}

/// Runs a command, failing with its stderr.
pub fn run(cmd: &str, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .with_context(|| format!("cannot run {cmd} (is it installed? .ci/run installs it)"))?;
    if !out.status.success() {
        bail!(
            "{cmd} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Writes a file of `len` zero bytes and syncs it, so later O_DIRECT writes
/// never land on unwritten (fallocated or sparse) extents.
pub fn write_zeros(path: &Path, len: u64) -> anyhow::Result<()> {
    use std::io::Write;
    let mut f =
        std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    let chunk = vec![0u8; 8 << 20];
    let mut left = len;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        f.write_all(&chunk[..n])?;
        left -= n as u64;
    }
    f.sync_all()?;
    Ok(())
}

impl LoopDev {
    /// Writes a `len`-byte backing file of zeros at `backing` and attaches it.
    pub fn create(backing: &Path, len: u64) -> anyhow::Result<LoopDev> {
        write_zeros(backing, len)?;
        let dev = run(
            "losetup",
            &[
                "-f",
                "--show",
                "--direct-io=on",
                backing.to_str().unwrap_or_default(),
            ],
        )?;
        Ok(LoopDev {
            path: PathBuf::from(dev.trim()),
            backing: backing.to_owned(),
        })
    }

    /// Path as a string.
    pub fn dev(&self) -> &str {
        self.path.to_str().unwrap_or_default()
    }
}

impl Drop for LoopDev {
    fn drop(&mut self) {
        let _ = run("losetup", &["-d", self.dev()]);
        let _ = std::fs::remove_file(&self.backing);
    }
}

/// A file system mounted on a device, unmounted on drop.
pub struct Mount {
    /// Mount point.
    pub dir: PathBuf,
}

impl Mount {
    /// Makes `fs` (ext4 or xfs) on `dev` and mounts it at `dir`.
    pub fn make(fs: &str, dev: &str, dir: &Path) -> anyhow::Result<Mount> {
        match fs {
            "ext4" => run("mkfs.ext4", &["-q", "-F", dev])?,
            "xfs" => run("mkfs.xfs", &["-q", "-f", dev])?,
            other => bail!("unknown file system {other}"),
        };
        std::fs::create_dir_all(dir)?;
        run("mount", &[dev, dir.to_str().unwrap_or_default()])?;
        Ok(Mount {
            dir: dir.to_owned(),
        })
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = run("umount", &[self.dir.to_str().unwrap_or_default()]);
    }
}

/// Flushes dirty data and drops the page cache (needs root).
pub fn drop_caches() {
    // SAFETY: sync(2) has no preconditions.
    unsafe { libc::sync() };
    let _ = std::fs::write("/proc/sys/vm/drop_caches", "3");
}
