//! Files that hold secrets or a cluster's identity (key files, `mds.toml`,
//! `cluster.toml`): written owner-only and atomically — a crash leaves the
//! old file or the new one, never a part of one — and durably (the file and
//! its directory are flushed before the call returns). Their directories
//! are made owner-only.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

/// Writes `bytes` to `path`: a 0600 temporary in the same directory,
/// written and flushed, renamed over `path`, then the directory flushed.
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::other(format!("{}: not a file name", path.display())))?;
    // A fresh, unpredictable name opened with O_EXCL (which never follows
    // a symlink): a file or link someone else put in the directory is
    // never followed, truncated or left readable by them.
    let (tmp, mut f) = {
        let mut tries = 0;
        loop {
            let tag: [u8; 8] = crate::auth::random_bytes();
            let tmp = dir.join(format!(
                ".{}.tmp-{}",
                name.to_string_lossy(),
                tag.iter().map(|b| format!("{b:02x}")).collect::<String>()
            ));
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)
            {
                Ok(f) => break (tmp, f),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && tries < 8 => {
                    tries += 1;
                }
                Err(e) => return Err(e),
            }
        }
    };
    let written = (|| {
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        std::fs::File::open(dir)?.sync_all()
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// Creates `dir` and any missing parents owner-only (0700). A directory
/// that already exists keeps its mode.
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn private_files_replace_whole_and_leave_no_temporary() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("a/b");
        create_private_dir(&dir).unwrap();
        assert_eq!(mode(&dir), 0o700);
        let p = dir.join("secret.toml");
        write_private(&p, b"one").unwrap();
        assert_eq!(mode(&p), 0o600);
        write_private(&p, b"two, longer").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two, longer");
        assert_eq!(mode(&p), 0o600);
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("secret.toml")]);
        assert!(write_private(&d.path().join("missing/x"), b"x").is_err());
    }
}
