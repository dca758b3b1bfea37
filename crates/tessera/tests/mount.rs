//! The whole system through a real FUSE mount, as root: `tessera up
//! --mount`, then unmodified programs (cp, diff, find, grep, fio) and our
//! own POSIX checks; storms from several processes; an OSD killed with
//! SIGKILL during reads; the prefetch benefit on a real source tree with
//! each object-id policy. Skipped (with a message) where FUSE cannot be
//! mounted (not root, or no /dev/fuse).
#![expect(clippy::unwrap_used, reason = "tests: a panic is the failure report")]

mod common;

use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use common::*;
use rand::{Rng, SeedableRng};

fn sh(script: &str) -> std::process::Output {
    Command::new("bash").args(["-c", script]).output().unwrap()
}

/// A real source tree the repository carries: this workspace's own sources
/// and docs (build output, fuzz corpora, state files and files holding the
/// word the tests grep for left out) under `into/real-tree`, each file
/// `copies` times in its directory (`name`, `name.1`, …). The repository
/// alone has about 4 files per directory; real projects have more, and
/// the copies give the tree that shape. Tests depend only on the
/// repository, never on what a cargo cache happens to hold.
fn real_tree(into: &Path, copies: usize) -> PathBuf {
    fn copy_dir(from: &Path, to: &Path, copies: usize) {
        std::fs::create_dir_all(to).unwrap();
        let mut entries: Vec<_> = std::fs::read_dir(from).unwrap().flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let name = e.file_name();
            let n = name.to_string_lossy();
            if matches!(n.as_ref(), "target" | "corpus" | "artifacts" | "coverage")
                || n.starts_with('.')
                || n.ends_with(".state")
            {
                continue;
            }
            let ft = e.file_type().unwrap();
            if ft.is_dir() {
                copy_dir(&e.path(), &to.join(&name), copies);
            } else if ft.is_file() {
                let bytes = std::fs::read(e.path()).unwrap();
                if bytes.windows(11).any(|w| w == b"NONEXISTENT") {
                    continue;
                }
                for i in 0..copies {
                    let dst = match i {
                        0 => to.join(&name),
                        i => to.join(format!("{n}.{i}")),
                    };
                    std::fs::write(dst, &bytes).unwrap();
                }
            }
        }
    }
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let root = into.join("real-tree");
    for part in ["crates", "docs", "fuzz"] {
        copy_dir(&workspace.join(part), &root.join(part), copies);
    }
    root
}

fn count_files(p: &Path) -> usize {
    let o = sh(&format!("find '{}' -type f | wc -l", p.display()));
    String::from_utf8_lossy(&o.stdout).trim().parse().unwrap()
}

/// fsx on a file of the mount: seeded random writes across stripe
/// boundaries, truncates up and down, reads, reopen; checked against a
/// reference after every step.
fn fsx(path: &Path, seed: u64, steps: usize) {
    let open = || {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .unwrap()
    };
    let mut f = open();
    let mut model: Vec<u8> = Vec::new();
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let max = 150_000u64;
    for step in 0..steps {
        let op = rng.random_range(0..100);
        if op < 50 {
            let off = rng.random_range(0..max);
            let len = rng.random_range(1..20_000u64).min(max - off);
            let b = rng.random::<u8>();
            let data: Vec<u8> = (0..len).map(|i| b.wrapping_add((i * 13) as u8)).collect();
            f.write_all_at(&data, off).unwrap();
            let end = (off + len) as usize;
            if model.len() < end {
                model.resize(end, 0);
            }
            model[off as usize..end].copy_from_slice(&data);
        } else if op < 62 {
            let size = rng.random_range(0..max);
            f.set_len(size).unwrap();
            model.resize(size as usize, 0);
        } else if op < 90 {
            let off = rng.random_range(0..max);
            let mut buf = vec![0u8; rng.random_range(1..30_000)];
            let n = f.read_at(&mut buf, off).unwrap();
            let lo = (off as usize).min(model.len());
            let hi = (off as usize + buf.len()).min(model.len());
            assert_eq!(&buf[..n], &model[lo..hi], "fsx step {step} seed {seed}");
        } else if op < 95 {
            f.sync_all().unwrap();
        } else {
            drop(f);
            f = open();
        }
        assert_eq!(
            f.metadata().unwrap().len(),
            model.len() as u64,
            "fsx step {step}: size"
        );
        let mut all = vec![0u8; model.len()];
        let mut at = 0;
        while at < all.len() {
            let n = f.read_at(&mut all[at..], at as u64).unwrap();
            assert!(n > 0, "fsx step {step}: short file");
            at += n;
        }
        assert!(
            all == model,
            "fsx step {step} seed {seed}: file differs from the reference"
        );
    }
}

fn cstr(p: &Path) -> std::ffi::CString {
    std::ffi::CString::new(p.to_str().unwrap()).unwrap()
}

/// The POSIX calls unmodified programs make, on the mount.
fn posix_calls(mp: &Path) {
    let d = mp.join("posix");
    std::fs::create_dir(&d).unwrap();
    let f = d.join("file");
    std::fs::write(&f, b"hello world").unwrap();
    // symlink, readlink, hard link
    std::os::unix::fs::symlink("file", d.join("sym")).unwrap();
    assert_eq!(
        std::fs::read_link(d.join("sym")).unwrap(),
        Path::new("file")
    );
    assert_eq!(std::fs::read(d.join("sym")).unwrap(), b"hello world");
    std::fs::hard_link(&f, d.join("hard")).unwrap();
    assert_eq!(std::fs::metadata(&f).unwrap().nlink(), 2);
    // chmod, chown, utimens, truncate
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o640)).unwrap();
    assert_eq!(std::fs::metadata(&f).unwrap().mode() & 0o7777, 0o640);
    std::os::unix::fs::chown(&f, Some(1234), Some(5678)).unwrap();
    let m = std::fs::metadata(&f).unwrap();
    assert_eq!((m.uid(), m.gid()), (1234, 5678));
    let times = [
        libc::timespec {
            tv_sec: 1_000_000,
            tv_nsec: 5,
        },
        libc::timespec {
            tv_sec: 2_000_000,
            tv_nsec: 7,
        },
    ];
    // SAFETY: valid path and two timespecs.
    let r = unsafe { libc::utimensat(libc::AT_FDCWD, cstr(&f).as_ptr(), times.as_ptr(), 0) };
    assert_eq!(r, 0);
    assert_eq!(std::fs::metadata(&f).unwrap().mtime(), 2_000_000);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&f)
        .unwrap()
        .set_len(5)
        .unwrap();
    assert_eq!(std::fs::read(&f).unwrap(), b"hello");
    // rename over an existing file, across directories
    std::fs::create_dir(d.join("sub")).unwrap();
    std::fs::write(d.join("sub/target"), b"old").unwrap();
    std::fs::rename(&f, d.join("sub/target")).unwrap();
    assert_eq!(std::fs::read(d.join("sub/target")).unwrap(), b"hello");
    assert!(!f.exists());
    // rmdir of a non-empty directory, unlink, rmdir
    let e = std::fs::remove_dir(d.join("sub")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOTEMPTY));
    std::fs::remove_file(d.join("sub/target")).unwrap();
    std::fs::remove_dir(d.join("sub")).unwrap();
    // mknod of a regular file
    let n = d.join("node");
    // SAFETY: valid path.
    assert_eq!(
        unsafe { libc::mknod(cstr(&n).as_ptr(), libc::S_IFREG | 0o600, 0) },
        0
    );
    assert!(std::fs::metadata(&n).unwrap().is_file());
    // extended attributes
    let name = std::ffi::CString::new("user.color").unwrap();
    // SAFETY: valid path, name and buffers with their lengths.
    unsafe {
        assert_eq!(
            libc::setxattr(
                cstr(&n).as_ptr(),
                name.as_ptr(),
                b"blue".as_ptr().cast(),
                4,
                0
            ),
            0
        );
        let mut buf = [0u8; 64];
        let k = libc::getxattr(
            cstr(&n).as_ptr(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            64,
        );
        assert_eq!(&buf[..k as usize], b"blue");
        let k = libc::listxattr(cstr(&n).as_ptr(), buf.as_mut_ptr().cast(), 64);
        assert_eq!(&buf[..k as usize], b"user.color\0");
        assert_eq!(libc::removexattr(cstr(&n).as_ptr(), name.as_ptr()), 0);
        assert!(
            libc::getxattr(
                cstr(&n).as_ptr(),
                name.as_ptr(),
                buf.as_mut_ptr().cast(),
                64
            ) < 0
        );
    }
    // statfs
    // SAFETY: valid path and a zeroed struct to fill.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::statvfs(cstr(mp).as_ptr(), &mut st) }, 0);
    assert!(st.f_blocks > 0 && st.f_bfree <= st.f_blocks);
    // readdir lists exactly what is there
    let mut names: Vec<String> = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["hard", "node", "sym"]);
    // Bad names and unsupported requests get specific errors.
    let long = d.join("x".repeat(300));
    let e = std::fs::write(&long, b"x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENAMETOOLONG), "{e}");
    use std::os::unix::ffi::OsStrExt;
    // Names are bytes: one that is not UTF-8 is kept as it is; a UTF-8
    // name holding a code point Tessera escapes bytes with is refused.
    let raw = d.join(std::ffi::OsStr::from_bytes(b"raw\xffname"));
    std::fs::write(&raw, b"x").unwrap();
    assert_eq!(std::fs::read(&raw).unwrap(), b"x");
    std::fs::remove_file(&raw).unwrap();
    let bad = d.join("bad\u{10fec3}name");
    let e = std::fs::write(&bad, b"x").unwrap_err();
    assert_eq!(
        e.raw_os_error(),
        Some(libc::EINVAL),
        "escape code points: {e}"
    );
    // A FIFO is made (every class of special file is in posix_classes.rs).
    let fifo = d.join("fifo");
    // SAFETY: valid path.
    let r = unsafe { libc::mknod(cstr(&fifo).as_ptr(), libc::S_IFIFO | 0o600, 0) };
    assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
    std::fs::remove_file(&fifo).unwrap();
    let (a, b) = (cstr(&d.join("hard")), cstr(&d.join("node")));
    // SAFETY: valid paths; RENAME_EXCHANGE is refused, nothing moves.
    let r = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    assert_eq!(
        (r, std::io::Error::last_os_error().raw_os_error()),
        (-1, Some(libc::EINVAL))
    );
    // O_EXCL on an existing name
    let e = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(d.join("hard"))
        .unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EEXIST));
}

#[test]
fn real_tree_fsx_fio_and_posix_calls_on_a_mount() {
    if !can_mount() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let up = Up::start(dir.path(), &[]);
    let t = up.target();
    let tgt: Vec<&str> = t.iter().map(String::as_str).collect();
    // `fsck --namespace` is for a namespace on the OSDs: here it says the
    // MDS keeps it, not that the MDS cannot be reached.
    let mut args = vec!["fsck", "--namespace"];
    args.extend(&tgt);
    let o = bin().args(&args).output().unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && e.contains("keeps its namespace in the MDS"),
        "{e}"
    );
    assert!(!e.contains("cannot reach"), "{e}");
    // A real source tree in and back out.
    let src = real_tree(dir.path(), 2);
    let dst = up.mp.join("tree");
    let o = sh(&format!("cp -r '{}' '{}'", src.display(), dst.display()));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = sh(&format!("diff -r '{}' '{}'", src.display(), dst.display()));
    assert!(
        o.status.success() && o.stdout.is_empty(),
        "diff -r: {}",
        String::from_utf8_lossy(&o.stdout)
    );
    let files = count_files(&src);
    let o = sh(&format!(
        "cd '{}' && find . -type f | xargs grep -c NONEXISTENT",
        dst.display()
    ));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.stderr.is_empty(),
        "grep: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(
        out.lines().count(),
        files,
        "grep read every one of the {files} files"
    );
    assert!(
        out.lines().all(|l| l.ends_with(":0")),
        "no file contains the word"
    );
    // fsx on a striped file (4 KiB units over 3 OSDs).
    std::fs::create_dir(up.mp.join("fsx")).unwrap();
    let mut args = vec![
        "layout",
        "set",
        "/fsx",
        "--stripe-unit",
        "4K",
        "--stripe-count",
        "3",
    ];
    args.extend_from_slice(&tgt);
    ok(&args);
    fsx(&up.mp.join("fsx/file"), 7, 300);
    // fio with data verification.
    std::fs::create_dir(up.mp.join("fio")).unwrap();
    for job in [
        "--rw=write --bs=1M --size=64M --fsync_on_close=1",
        "--rw=randwrite --bs=4k --size=8M",
        "--rw=randrw --bs=16k --size=8M",
    ] {
        let o = sh(&format!(
            "cd '{}' && fio --name=v --directory='{}' {job} --verify_state_save=0 --verify=crc32c --do_verify=1 --ioengine=psync --output-format=terse",
            dir.path().display(),
            up.mp.join("fio").display()
        ));
        let out =
            String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
        assert!(
            o.status.success() && !out.contains("verify"),
            "fio {job}: {out}"
        );
    }
    posix_calls(&up.mp);
    // The CLI sees what the mount wrote.
    let mut args = vec!["ls", "-l", "/posix"];
    args.extend_from_slice(&tgt);
    let ls = ok(&args);
    assert!(
        ls.contains("hard") && ls.contains("node") && ls.contains("sym"),
        "{ls}"
    );
    up.stop();
}

#[test]
fn storms_from_several_processes_leave_a_consistent_namespace() {
    if !can_mount() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let up = Up::start(dir.path(), &[]);
    std::fs::create_dir(up.mp.join("shared")).unwrap();
    // Four processes: each creates, writes, renames (within its own
    // directory and into the shared one), unlinks and makes and removes
    // directories; what survives is determined by the script.
    let script = |p: usize| {
        format!(
            r#"set -e; cd '{mp}'; mkdir w{p}
for i in $(seq 1 60); do
  echo "p{p} file $i" > w{p}/f$i
  mv w{p}/f$i w{p}/g$i
  if [ $((i % 3)) -eq 0 ]; then rm w{p}/g$i
  elif [ $((i % 5)) -eq 0 ]; then mv w{p}/g$i shared/p{p}-$i; fi
  mkdir w{p}/d$i; rmdir w{p}/d$i
done"#,
            mp = up.mp.display()
        )
    };
    let kids: Vec<Child> = (0..4)
        .map(|p| {
            Command::new("bash")
                .args(["-c", &script(p)])
                .spawn()
                .unwrap()
        })
        .collect();
    for mut k in kids {
        assert!(k.wait().unwrap().success());
    }
    for p in 0..4 {
        let mut want: Vec<String> = Vec::new();
        let mut shared: Vec<String> = Vec::new();
        for i in 1..=60 {
            if i % 3 == 0 {
                continue;
            }
            if i % 5 == 0 {
                shared.push(format!("p{p}-{i}"));
            } else {
                want.push(format!("g{i}"));
            }
        }
        let mut got: Vec<String> = std::fs::read_dir(up.mp.join(format!("w{p}")))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        got.sort();
        want.sort();
        assert_eq!(got, want, "process {p}'s directory");
        for n in &want {
            let i = &n[1..];
            let body = std::fs::read_to_string(up.mp.join(format!("w{p}/{n}"))).unwrap();
            assert_eq!(body, format!("p{p} file {i}\n"));
        }
        for n in &shared {
            let i = n.rsplit('-').next().unwrap();
            let body = std::fs::read_to_string(up.mp.join("shared").join(n)).unwrap();
            assert_eq!(body, format!("p{p} file {i}\n"));
        }
    }
    let total = std::fs::read_dir(up.mp.join("shared")).unwrap().count();
    assert_eq!(total, 4 * 8, "shared directory holds every moved file once");
    up.stop();
    // Running `tessera up` again brings the same cluster back with its data;
    // the file commands find it from the data directory.
    let up = Up::start(dir.path(), &[]);
    let body = std::fs::read_to_string(up.mp.join("w0/g1")).unwrap();
    assert_eq!(body, "p0 file 1\n");
    let t = up.target();
    let tgt: Vec<&str> = t.iter().map(String::as_str).collect();
    let cli = |args: &[&str]| {
        let mut a = args.to_vec();
        a.extend_from_slice(&tgt);
        ok(&a)
    };
    let local = dir.path().join("local.bin");
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 253) as u8).collect();
    std::fs::write(&local, &data).unwrap();
    cli(&["mkdir", "-p", "/cli/a/b"]);
    cli(&["put", local.to_str().unwrap(), "/cli/a/b/"]);
    assert!(
        std::fs::read(up.mp.join("cli/a/b/local.bin")).unwrap() == data,
        "put is visible in the mount"
    );
    let back = dir.path().join("back.bin");
    cli(&["get", "/cli/a/b/local.bin", back.to_str().unwrap()]);
    assert!(std::fs::read(&back).unwrap() == data);
    let st = cli(&["stat", "/cli/a/b/local.bin"]);
    assert!(
        st.contains("size: 3000000") && st.contains("object set 0"),
        "{st}"
    );
    let ls = cli(&["ls", "/cli/a/b"]);
    assert_eq!(ls.trim(), "local.bin");
    cli(&["rm", "-r", "/cli"]);
    // Another client's change shows in the mount within the 1 s window.
    let mut gone = false;
    for _ in 0..30 {
        if !up.mp.join("cli").exists() {
            gone = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        gone,
        "the removal is visible in the mount after the cache window"
    );
    let status = cli(&["status"]);
    assert_eq!(status.matches(" up,in ").count(), 3, "{status}");
    assert!(status.starts_with("HEALTH_OK"), "{status}");
    // Bad requests get a clear error and change nothing.
    let fail = |args: &[&str], want: &str| {
        let mut a = args.to_vec();
        a.extend_from_slice(&tgt);
        let o = bin().args(&a).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(
            !o.status.success() && err.contains(want),
            "tessera {a:?}: {err}"
        );
    };
    fail(&["get", "/nope", back.to_str().unwrap()], "/nope");
    fail(
        &["get", "/w0", back.to_str().unwrap()],
        "not a regular file",
    );
    fail(&["rm", "/w0"], "is a directory (use -r)");
    fail(&["mkdir", "/w0"], "/w0");
    fail(
        &["put", local.to_str().unwrap(), "/missing/dir/"],
        "no such directory",
    );
    fail(&["ls", "relative"], "absolute");
    assert!(!up.mp.join("missing").exists());
    assert_eq!(
        std::fs::read_dir(up.mp.join("w0")).unwrap().count(),
        32,
        "nothing lost"
    );
    up.stop();
}

/// Every daemon a separate process, the mount through `tessera mount`: an
/// OSD holding stripes of a file is killed with SIGKILL; reads of the file
/// fail with EIO (never wrong data); once the OSD restarts, the data reads
/// back. Also: the mount command's messages for a missing and a busy
/// mount point, and background mounting.
#[test]
fn osd_killed_during_reads_gives_eio_then_data_returns() {
    if !can_mount() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let p = |x: &str| d.join(x).to_str().unwrap().to_string();
    let cluster = "killtest";
    let (mds, mut osds, addrs, mds_addr) = daemons(
        d,
        cluster,
        // One copy of each object: this test is about a read with no copy left.
        &[
            "--stripe-unit",
            "64K",
            "--stripe-count",
            "3",
            "--replicas",
            "1",
        ],
    );
    // Clear messages for a missing mount point, then a busy one.
    let o = bin()
        .args(["mount", &mds_addr, &p("nowhere"), "--cluster", cluster])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("does not exist"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let mp = d.join("mnt");
    let mut m = mount_fg(&mds_addr, cluster, &mp, &[]);
    let o = bin()
        .args([
            "mount",
            &mds_addr,
            mp.to_str().unwrap(),
            "--cluster",
            cluster,
        ])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("busy"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // An 8 MiB file striped over the three OSDs.
    let data: Vec<u8> = (0..8u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    std::fs::write(mp.join("striped"), &data).unwrap();
    drop_caches();
    assert!(std::fs::read(mp.join("striped")).unwrap() == data);
    // SIGKILL OSD 1 and read again.
    osds[1].kill().unwrap();
    osds[1].wait().unwrap();
    drop_caches();
    let e = std::fs::read(mp.join("striped")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    // Bytes that do come back are right.
    let f = std::fs::File::open(mp.join("striped")).unwrap();
    let mut buf = vec![0u8; 65536];
    let mut good = 0;
    for off in (0..data.len()).step_by(65536) {
        if let Ok(n) = f.read_at(&mut buf, off as u64) {
            assert_eq!(&buf[..n], &data[off..off + n], "never wrong data");
            good += 1;
        }
    }
    assert!(
        good > 0 && good < 128,
        "stripes on the live OSDs still read ({good})"
    );
    drop(f);
    // Restart it (same store, same address): the data is back.
    osds[1] = start_osd(d, 1, &addrs[1], &mds_addr);
    wait_osds_up(&mds_addr, cluster, 3);
    drop_caches();
    let mut back = false;
    for _ in 0..50 {
        if std::fs::read(mp.join("striped")).is_ok_and(|b| b == data) {
            back = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(back, "data reads back after the OSD restarts");
    sigint_wait(&mut m);
    // Background mode: the command returns once mounted; umount ends it.
    let out = ok(&[
        "mount",
        &mds_addr,
        mp.to_str().unwrap(),
        "--cluster",
        cluster,
    ]);
    assert!(out.contains("mounted"), "{out}");
    assert!(std::fs::read(mp.join("striped")).unwrap() == data);
    assert!(Command::new("umount").arg(&mp).status().unwrap().success());
    stop_daemons(osds, mds);
}

/// The prefetch benefit on a real tree: MDS requests of `find | xargs grep`
/// through a fresh mount with N = 32 and N = 0, for each object-id policy.
#[test]
fn prefetch_benefit_on_a_real_tree_per_policy() {
    if !can_mount() {
        return;
    }
    let tree_dir = tempfile::tempdir().unwrap();
    let src = real_tree(tree_dir.path(), 4);
    let files = count_files(&src);
    let mut table = Vec::new();
    for policy in [
        "child-closest",
        "cousin-closest",
        "create-order",
        "pseudo-random",
    ] {
        let dir = tempfile::tempdir().unwrap();
        let up = Up::start(dir.path(), &["--policy", policy]);
        let o = sh(&format!(
            "cp -r '{}' '{}'",
            src.display(),
            up.mp.join("tree").display()
        ));
        assert!(o.status.success());
        let mds = up.mds_addr();
        let mut row = Vec::new();
        for n in ["32", "0"] {
            let mp = dir.path().join(format!("m{n}"));
            let stats = dir.path().join(format!("stats{n}.json"));
            let mut m = mount_fg(
                &mds,
                "tessera",
                &mp,
                &["--prefetch", n, "--stats-file", stats.to_str().unwrap()],
            );
            let o = sh(&format!(
                "cd '{}/tree' && find . -type f | xargs grep -c NONEXISTENT | wc -l",
                mp.display()
            ));
            assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), files.to_string());
            sigint_wait(&mut m);
            let s: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
            let total = s["mds_mandatory"].as_u64().unwrap()
                + s["mds_non_mandatory"].as_u64().unwrap()
                + s["mds_absent"].as_u64().unwrap();
            row.push(total);
        }
        let saved = 100.0 * (1.0 - row[0] as f64 / row[1] as f64);
        println!(
            "{policy:>15}: N=32 {:>5} MDS requests, N=0 {:>5}: {saved:.0} % fewer ({files} files)",
            row[0], row[1]
        );
        table.push((policy, row[0], row[1]));
        up.stop();
    }
    let (_, with, without) = table[0];
    assert!(
        with * 2 < without,
        "child-closest prefetch at least halves MDS requests"
    );
}

/// The namespace on the OSDs (Ali et al.) behind a real mount, every daemon
/// a separate process: `mds format --namespace osd --dir-protocol lock`,
/// the mount (its client makes the root), a real source tree in and back
/// out, fsx on a file striped over the three OSDs, and the same POSIX calls
/// as the MDS mode; then `tessera fsck --namespace` finds nothing.
#[test]
fn mount_with_the_namespace_on_the_osds() {
    if !can_mount() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cluster = "nsmount";
    let (mds, osds, _, mds_addr) = daemons(
        d,
        cluster,
        &[
            "--namespace",
            "osd",
            "--dir-protocol",
            "lock",
            "--stripe-unit",
            "4K",
            "--stripe-count",
            "3",
        ],
    );
    // The first client to connect (here `tessera ls`) makes the root.
    let o = bin()
        .args(["ls", "/", "--mds", &mds_addr, "--cluster", cluster])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mp = d.join("mnt");
    let mut m = mount_fg(&mds_addr, cluster, &mp, &[]);
    // A failure below leaves no daemon or mount behind.
    let _guard = PanicGuard::new(osds.iter().chain([&mds, &m]), &[&mp]);
    let src = real_tree(d, 2);
    let dst = mp.join("tree");
    let o = sh(&format!("cp -r '{}' '{}'", src.display(), dst.display()));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    drop_caches();
    let o = sh(&format!("diff -r '{}' '{}'", src.display(), dst.display()));
    assert!(
        o.status.success() && o.stdout.is_empty(),
        "diff -r: {}",
        String::from_utf8_lossy(&o.stdout)
    );
    std::fs::create_dir(mp.join("fsx")).unwrap();
    fsx(&mp.join("fsx/file"), 11, 200);
    posix_calls(&mp);
    // An unlinked file stays readable through an open handle.
    let f = mp.join("posix/kept");
    std::fs::write(&f, b"still here").unwrap();
    let h = std::fs::File::open(&f).unwrap();
    std::fs::remove_file(&f).unwrap();
    let mut b = [0u8; 10];
    h.read_at(&mut b, 0).unwrap();
    assert_eq!(&b, b"still here");
    drop(h);
    // Remove the tree again, then check the namespace on the OSDs.
    let o = sh(&format!("rm -r '{}'", dst.display()));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    sigint_wait(&mut m);
    let out = ok(&[
        "fsck",
        "--namespace",
        "--mds",
        &mds_addr,
        "--cluster",
        cluster,
    ]);
    assert!(out.contains("namespace is consistent"), "{out}");
    stop_daemons(osds, mds);
}

/// `tessera up --namespace osd --mount` (atomic protocol): the same POSIX
/// calls, and the mount's files listed by the CLI.
#[test]
fn up_mounts_a_namespace_on_the_osds() {
    if !can_mount() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let up = Up::start(dir.path(), &["--namespace", "osd"]);
    posix_calls(&up.mp);
    let t = up.target();
    let mut args = vec!["ls", "-l", "/posix"];
    args.extend(t.iter().map(String::as_str));
    let ls = ok(&args);
    assert!(
        ls.contains("hard") && ls.contains("node") && ls.contains("sym"),
        "{ls}"
    );
    let mut args = vec!["fsck", "--namespace"];
    args.extend(t.iter().map(String::as_str));
    let out = ok(&args);
    assert!(out.contains("namespace is consistent"), "{out}");
    // The status counts what the OSDs hold, not the MDS's empty tables.
    let mut args = vec!["status"];
    args.extend(t.iter().map(String::as_str));
    // (HEALTH_WARN while a new group's member fills: not checked here.)
    let st = String::from_utf8_lossy(&bin().args(&args).output().unwrap().stdout).into_owned();
    assert!(
        st.contains("namespace on the OSDs")
            && !st.contains("inodes 1 ")
            && !st.contains("0 stripe objects"),
        "{st}"
    );
    up.stop();
}

/// The README's restricted client: `tessera auth add` a key confined to a
/// subtree with root squashed, mount with it: the subtree is its root,
/// what it writes lands there owned by nobody, nothing outside is
/// reachable; a read-only key's writes fail with EROFS; a rotated key
/// stops the mount that used it.
#[test]
fn a_confined_key_mounts_its_subtree_only() {
    if !can_mount() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let up = Up::start(dir.path(), &[]);
    let data = up.data.to_str().unwrap().to_string();
    ok(&["mkdir", "-p", "/projects/lab", "--data", &data]);
    std::fs::set_permissions(
        up.mp.join("projects/lab"),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    std::fs::write(up.mp.join("secret"), b"admin only").unwrap();
    let lab_key = dir.path().join("lab.key");
    let ro_key = dir.path().join("ro.key");
    ok(&[
        "auth",
        "add",
        "client.lab",
        "--path",
        "/projects/lab",
        "--uids",
        "squash-root",
        "--out",
        lab_key.to_str().unwrap(),
        "--data",
        &data,
    ]);
    ok(&[
        "auth",
        "add",
        "client.ro",
        "--access",
        "ro",
        "--out",
        ro_key.to_str().unwrap(),
        "--data",
        &data,
    ]);
    let listed = ok(&["auth", "ls", "--data", &data]);
    assert!(
        listed.contains("client.lab") && listed.contains("/projects/lab"),
        "{listed}"
    );
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&lab_key).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let mds = up.mds_addr();
    let lab = dir.path().join("lab");
    let mut m = mount_fg(
        &mds,
        "tessera",
        &lab,
        &["--key-file", lab_key.to_str().unwrap()],
    );
    std::fs::write(lab.join("mine.txt"), b"lab data").unwrap();
    std::fs::create_dir(lab.join("d")).unwrap();
    // It landed in /projects/lab, owned by nobody (root squashed).
    let there = up.mp.join("projects/lab/mine.txt");
    assert_eq!(std::fs::read(&there).unwrap(), b"lab data");
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(&there).unwrap().uid(), 65534);
    // Its root is the subtree: the admin's file is not there to find.
    assert!(!lab.join("secret").exists());
    let mut names: Vec<String> = std::fs::read_dir(&lab)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["d", "mine.txt"]);
    // Its CLI view is the same subtree.
    let ls = ok(&[
        "ls",
        "/",
        "--mds",
        &mds,
        "--key-file",
        lab_key.to_str().unwrap(),
    ]);
    assert!(ls.contains("mine.txt") && !ls.contains("secret"), "{ls}");
    // A read-only key reads everything it may and changes nothing.
    let ro = dir.path().join("ro");
    let mut r = mount_fg(
        &mds,
        "tessera",
        &ro,
        &["--key-file", ro_key.to_str().unwrap()],
    );
    assert_eq!(
        std::fs::read(ro.join("projects/lab/mine.txt")).unwrap(),
        b"lab data"
    );
    let e = std::fs::write(ro.join("new"), b"x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{e}");
    sigint_wait(&mut r);
    // Rotating the lab's key stops the mount that used the old one.
    ok(&[
        "auth",
        "rotate",
        "client.lab",
        "--out",
        dir.path().join("lab2.key").to_str().unwrap(),
        "--data",
        &data,
    ]);
    let e = std::fs::read_dir(lab.join("d")).map(|_| ()).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EACCES), "{e}");
    sigint_wait(&mut m);
    up.stop();
}

/// A directory's times and link count follow every change in it, seen at
/// once through the mount (the client used to answer `stat` of the parent
/// from its cache): mtime and ctime move on create, mkdir, link, symlink,
/// unlink, rmdir and rename (both parents); link counts are 2 + the
/// subdirectories, kept right by a rename across parents. The MDS mode
/// (the OSD mode keeps neither yet: see the note on issue 21).
#[test]
fn directory_times_and_link_counts_follow_changes_at_once() {
    if !can_mount() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let up = Up::start(dir.path(), &[]);
    let mp = up.mp.clone();
    use std::os::unix::fs::MetadataExt;
    let nlink = |p: &Path| std::fs::metadata(p).unwrap().nlink();
    let times = |p: &Path| {
        let m = std::fs::metadata(p).unwrap();
        (
            m.mtime() as i128 * 1_000_000_000 + i128::from(m.mtime_nsec()),
            m.ctime() as i128 * 1_000_000_000 + i128::from(m.ctime_nsec()),
        )
    };
    let (a, b) = (mp.join("a"), mp.join("b"));
    let root0 = nlink(&mp);
    std::fs::create_dir(&a).unwrap();
    std::fs::create_dir(&b).unwrap();
    assert_eq!(nlink(&mp), root0 + 2, "two new subdirectories");
    std::fs::create_dir(a.join("sub")).unwrap();
    assert_eq!((nlink(&a), nlink(&b)), (3, 2));
    // Every change moves the parent's mtime and ctime, visible at once.
    let step = |what: &str, dirs: &[&Path], change: &dyn Fn()| {
        let before: Vec<_> = dirs.iter().map(|d| times(d)).collect();
        std::thread::sleep(Duration::from_millis(5));
        change();
        for (d, (m0, c0)) in dirs.iter().zip(before) {
            let (m1, c1) = times(d);
            assert!(
                m1 > m0 && c1 > c0,
                "{what}: {} times did not move",
                d.display()
            );
        }
    };
    step("create", &[&b], &|| {
        std::fs::write(b.join("f"), b"x").unwrap()
    });
    step("link", &[&a], &|| {
        std::fs::hard_link(b.join("f"), a.join("l")).unwrap()
    });
    step("symlink", &[&b], &|| {
        std::os::unix::fs::symlink("f", b.join("s")).unwrap()
    });
    step("unlink", &[&a], &|| {
        std::fs::remove_file(a.join("l")).unwrap()
    });
    step("mkdir", &[&b], &|| {
        std::fs::create_dir(b.join("d")).unwrap()
    });
    step("rmdir", &[&b], &|| {
        std::fs::remove_dir(b.join("d")).unwrap()
    });
    step("rename across parents", &[&a, &b], &|| {
        std::fs::rename(a.join("sub"), b.join("sub")).unwrap()
    });
    assert_eq!(
        (nlink(&a), nlink(&b)),
        (2, 3),
        "the moved subdirectory counts in its new parent"
    );
    std::fs::remove_dir(b.join("sub")).unwrap();
    assert_eq!(nlink(&b), 2);
    up.stop();
}

/// Directory leases across two mounts of one cluster (docs/CLIENT.md,
/// "Directory leases"): a mount alone in a directory creates and removes
/// under its lease, and the other mount sees exactly the result (its
/// requests wait for the lease to come back); two mounts racing
/// `O_CREAT|O_EXCL` on the same names never both win one.
#[test]
fn two_mounts_share_a_directory_one_lease_at_a_time() {
    if !can_mount() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cluster = "leases";
    let (mds, osds, _, mds_addr) = daemons(d, cluster, &[]);
    let (mpa, mpb) = (d.join("mnta"), d.join("mntb"));
    let stats = d.join("stats-a.json");
    let mut ma = mount_fg(
        &mds_addr,
        cluster,
        &mpa,
        &["--stats-file", stats.to_str().unwrap()],
    );
    let mut mb = mount_fg(&mds_addr, cluster, &mpb, &[]);
    let _guard = PanicGuard::new(osds.iter().chain([&mds, &ma, &mb]), &[&mpa, &mpb]);
    let sorted = |p: &Path| {
        let mut v: Vec<String> = std::fs::read_dir(p)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    };

    let solo = mpa.join("solo");
    std::fs::create_dir(&solo).unwrap();
    for i in 0..300 {
        std::fs::File::create_new(solo.join(format!("f{i:03}"))).unwrap();
    }
    for i in 0..100 {
        std::fs::remove_file(solo.join(format!("f{i:03}"))).unwrap();
    }
    assert!(
        std::fs::File::create_new(solo.join("f150")).is_err(),
        "O_EXCL on an existing name fails under the lease too"
    );
    let want: Vec<String> = (100..300).map(|i| format!("f{i:03}")).collect();
    assert_eq!(
        sorted(&mpb.join("solo")),
        want,
        "the other mount sees it all"
    );
    assert_eq!(sorted(&solo), want);

    // Both mounts race for the same names, from opposite ends.
    std::fs::create_dir(mpa.join("race")).unwrap();
    let n = 400;
    let racer = |root: PathBuf, reverse: bool| {
        std::thread::spawn(move || {
            let mut won = vec![false; n];
            for k in 0..n {
                let i = if reverse { n - 1 - k } else { k };
                match std::fs::File::create_new(root.join("race").join(format!("r{i:03}"))) {
                    Ok(_) => won[i] = true,
                    Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists, "{e}"),
                }
            }
            won
        })
    };
    let (a, b) = (racer(mpa.clone(), false), racer(mpb.clone(), true));
    let (a, b) = (a.join().unwrap(), b.join().unwrap());
    for i in 0..n {
        assert!(
            a[i] != b[i],
            "r{i:03}: won by {}",
            if a[i] { "both" } else { "neither" }
        );
    }
    let all: Vec<String> = (0..n).map(|i| format!("r{i:03}")).collect();
    assert_eq!(sorted(&mpa.join("race")), all);
    assert_eq!(sorted(&mpb.join("race")), all);

    sigint_wait(&mut mb);
    sigint_wait(&mut ma);
    let st: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    println!("first mount's counters: {st}");
    assert!(
        st["lease_answered"].as_u64().unwrap() >= 300,
        "the lone mount answered under its lease"
    );
    stop_daemons(osds, mds);
}
