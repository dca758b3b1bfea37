//! POSIX through a real mount, class by class, in both namespace modes,
//! as root and as another user: FIFOs, devices and sockets; files unlinked
//! or replaced while open (on this client, on another client, across an
//! MDS restart); calls on descriptors (permission checked at open);
//! timestamps; directory link counts; fallocate, SEEK_DATA/SEEK_HOLE and
//! copy_file_range; the longest names and paths; statfs inodes.
//!
//! A uid belongs to a whole process, so the checks as another user run
//! in a child: this binary again (copied where `nobody` may run it), with
//! that user's uid and gid and the directory to work in in the
//! environment. Hence no libtest harness (`harness = false`): `main` is
//! the test. Skipped (with a message) where FUSE cannot be mounted.
#![expect(clippy::unwrap_used, reason = "tests: a panic is the failure report")]

mod common;

use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// Set in the child: the directory its checks run in.
const WORKER: &str = "TESSERA_POSIX_WORKER";
/// The user the child runs as (`nobody`).
const OTHER: u32 = 65_534;

fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Runs a libc call returning -1 on failure; the errno, or 0.
fn call(r: i32) -> i32 {
    if r == -1 { errno() } else { 0 }
}

fn ns(m: &fs::Metadata) -> (i128, i128) {
    (
        i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
        i128::from(m.ctime()) * 1_000_000_000 + i128::from(m.ctime_nsec()),
    )
}

fn main() {
    if let Ok(dir) = std::env::var(WORKER) {
        // SAFETY: getuid cannot fail.
        let uid = unsafe { libc::getuid() };
        assert_eq!(uid, OTHER, "the worker runs as the other user");
        classes(Path::new(&dir), false);
        println!("worker: every class passed as uid {uid}");
        return;
    }
    if !can_mount() {
        return;
    }
    for mode in ["mds", "osd"] {
        let dir = tempfile::tempdir().unwrap();
        let metrics = free_port();
        let up = Up::start(dir.path(), &["--namespace", mode, "--metrics", &metrics]);
        // Counting checks first, while no unlinked file waits to be reaped.
        statfs_counts_inodes(&up.mp);
        if mode == "mds" {
            held_on_another_client(&up);
        }
        let mine = up.mp.join("root");
        fs::create_dir(&mine).unwrap();
        classes(&mine, true);
        // MDS mode: three OSDs, three replicas, so every copy_file_range
        // piece had its source and destination copies on the same OSDs.
        // (In the OSD-namespace mode a stripe is one replica group,
        // reached through its head: a piece moves on an OSD only where
        // both objects are in one group.)
        let copied = scrape(&metrics, "tessera_client_copied_on_osds_bytes_total");
        assert!(
            mode == "osd" || copied >= 300_000,
            "{mode}: copy_file_range copied {copied} bytes on the OSDs"
        );
        let shared = up.mp.join("shared");
        fs::create_dir(&shared).unwrap();
        fs::set_permissions(&shared, fs::Permissions::from_mode(0o1777)).unwrap();
        as_other_user(&shared, dir.path());
        up.stop();
        println!("{mode} namespace: every class passed as root and as uid {OTHER}");
    }
    held_across_an_mds_restart();
    println!("held across an MDS restart: passed");
}

/// The value of counter `name` at `http://addr/metrics`.
fn scrape(addr: &str, name: &str) -> u64 {
    use std::net::TcpStream;
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in:\n{body}"))
}

/// This binary again as `nobody`, working in `dir`.
fn as_other_user(dir: &Path, scratch: &Path) {
    // Where `nobody` may execute it (the build directory may be closed).
    let bin_dir = scratch.join("worker");
    fs::create_dir_all(&bin_dir).unwrap();
    fs::set_permissions(scratch, fs::Permissions::from_mode(0o755)).unwrap();
    fs::set_permissions(&bin_dir, fs::Permissions::from_mode(0o755)).unwrap();
    let exe = bin_dir.join("posix_classes");
    fs::copy(std::env::current_exe().unwrap(), &exe).unwrap();
    fs::set_permissions(&exe, fs::Permissions::from_mode(0o755)).unwrap();
    let out = Command::new(&exe)
        .env(WORKER, dir)
        .env_remove("TESSERA_KEY_FILE")
        .uid(OTHER)
        .gid(OTHER)
        .current_dir("/")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "as uid {OTHER}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every class, in a fresh directory under `d` each.
fn classes(d: &Path, root: bool) {
    special_files(&d.join("special"), root);
    unlinked_while_open(&d.join("unlinked"));
    descriptor_calls(&d.join("fd"), root);
    timestamps(&d.join("times"), root);
    directory_links(&d.join("links"));
    fallocate_seek_and_copy(&d.join("alloc"));
    names_and_paths(&d.join("names"));
}

fn special_files(d: &Path, root: bool) {
    fs::create_dir(d).unwrap();
    let fifo = d.join("fifo");
    // SAFETY: a valid C string.
    assert_eq!(
        call(unsafe { libc::mkfifo(cstr(&fifo).as_ptr(), 0o640) }),
        0
    );
    let m = fs::metadata(&fifo).unwrap();
    assert!(m.file_type().is_fifo(), "mkfifo makes a FIFO");
    assert_eq!(m.mode() & 0o7777, 0o640);
    // It is a real pipe: the kernel serves it once opened.
    let mut p = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&fifo)
        .unwrap();
    p.write_all(b"through the pipe").unwrap();
    let mut b = [0u8; 16];
    p.read_exact(&mut b).unwrap();
    assert_eq!(&b, b"through the pipe");
    drop(p);
    let sock = d.join("sock");
    let l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let c = std::os::unix::net::UnixStream::connect(&sock).unwrap();
    drop((l, c));
    assert!(fs::metadata(&sock).unwrap().file_type().is_socket());
    let chr = d.join("null");
    let dev = libc::makedev(1, 3);
    // SAFETY: a valid C string.
    let r = call(unsafe { libc::mknod(cstr(&chr).as_ptr(), libc::S_IFCHR | 0o600, dev) });
    if root {
        assert_eq!(r, 0, "root makes a character device");
        let m = fs::metadata(&chr).unwrap();
        assert!(m.file_type().is_char_device());
        assert_eq!(m.rdev(), dev, "its device numbers");
        let blk = d.join("loop");
        let bdev = libc::makedev(7, 0);
        // SAFETY: a valid C string.
        let r = unsafe { libc::mknod(cstr(&blk).as_ptr(), libc::S_IFBLK | 0o600, bdev) };
        assert_eq!(call(r), 0);
        let m = fs::metadata(&blk).unwrap();
        assert!(m.file_type().is_block_device());
        assert_eq!(m.rdev(), bdev);
    } else {
        assert_eq!(r, libc::EPERM, "only root makes devices");
    }
    // readdir reports each kind.
    for e in fs::read_dir(d).unwrap() {
        let e = e.unwrap();
        let t = e.file_type().unwrap();
        let want = match e.file_name().to_str().unwrap() {
            "fifo" => t.is_fifo(),
            "sock" => t.is_socket(),
            "null" => t.is_char_device(),
            "loop" => t.is_block_device(),
            n => panic!("unexpected entry {n}"),
        };
        assert!(want, "d_type of {:?}", e.file_name());
    }
    // chmod, chown, link, rename, remove like any file.
    fs::set_permissions(&fifo, fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(fs::metadata(&fifo).unwrap().mode() & 0o7777, 0o600);
    if root {
        std::os::unix::fs::chown(&fifo, Some(1), Some(1)).unwrap();
        assert_eq!(fs::metadata(&fifo).unwrap().uid(), 1);
    }
    fs::hard_link(&fifo, d.join("fifo2")).unwrap();
    assert_eq!(fs::metadata(&fifo).unwrap().nlink(), 2);
    fs::rename(d.join("fifo2"), d.join("fifo3")).unwrap();
    assert!(fs::metadata(d.join("fifo3")).unwrap().file_type().is_fifo());
    for n in ["fifo", "fifo3", "sock"] {
        fs::remove_file(d.join(n)).unwrap();
    }
    if root {
        fs::remove_file(&chr).unwrap();
        fs::remove_file(d.join("loop")).unwrap();
    }
    assert_eq!(fs::read_dir(d).unwrap().count(), 0);
}

fn unlinked_while_open(d: &Path) {
    fs::create_dir(d).unwrap();
    let p = d.join("u");
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&p)
        .unwrap();
    f.write_at(b"hello", 0).unwrap();
    fs::remove_file(&p).unwrap();
    let m = f.metadata().unwrap();
    assert_eq!((m.nlink(), m.len()), (0, 5), "fstat after unlink");
    f.write_at(b" again", 5).unwrap();
    f.sync_all().unwrap();
    let mut b = [0u8; 11];
    f.read_exact_at(&mut b, 0).unwrap();
    assert_eq!(&b, b"hello again");
    assert!(fs::metadata(&p).is_err(), "the name is gone");
    drop(f);
    // Replaced by a rename: the old file lives on through its handle.
    fs::write(d.join("a"), b"new").unwrap();
    fs::write(d.join("b"), b"old").unwrap();
    let old = File::open(d.join("b")).unwrap();
    fs::rename(d.join("a"), d.join("b")).unwrap();
    let mut b = [0u8; 3];
    old.read_exact_at(&mut b, 0).unwrap();
    assert_eq!(&b, b"old");
    assert_eq!(old.metadata().unwrap().nlink(), 0);
    assert_eq!(fs::read(d.join("b")).unwrap(), b"new");
}

fn descriptor_calls(d: &Path, root: bool) {
    fs::create_dir(d).unwrap();
    // Mode 0, opened O_RDWR by its creator: every call on the descriptor works.
    let p = d.join("mode0");
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o000)
        .open(&p)
        .unwrap();
    f.write_at(b"abc", 0).unwrap();
    f.set_len(10)
        .expect("ftruncate of a mode-0 file opened O_RDWR");
    f.sync_all().unwrap();
    let mut b = [9u8; 10];
    f.read_exact_at(&mut b, 0).unwrap();
    assert_eq!(&b, b"abc\0\0\0\0\0\0\0");
    assert_eq!(f.metadata().unwrap().len(), 10);
    drop(f);
    // Write permission taken away after open: the descriptor keeps it.
    let p = d.join("chmodded");
    let f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(&p)
        .unwrap();
    f.set_permissions(fs::Permissions::from_mode(0o444))
        .unwrap();
    f.write_at(b"still mine", 0).unwrap();
    f.sync_all().expect("fsync after fchmod 0444");
    f.set_len(5).expect("ftruncate after fchmod 0444");
    drop(f);
    assert_eq!(fs::read(&p).unwrap(), b"still");
    // A new open is checked against the bits now.
    let r = OpenOptions::new().write(true).open(&p);
    if root {
        r.unwrap();
    } else {
        assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::EACCES));
    }
}

fn timestamps(d: &Path, root: bool) {
    fs::create_dir(d).unwrap();
    let (a, b) = (d.join("a"), d.join("b"));
    fs::create_dir(&a).unwrap();
    fs::create_dir(&b).unwrap();
    // A directory's mtime and ctime move with every entry change, at once.
    let step = |what: &str, dirs: &[&Path], change: &dyn Fn()| {
        let before: Vec<_> = dirs.iter().map(|x| ns(&fs::metadata(x).unwrap())).collect();
        std::thread::sleep(Duration::from_millis(5));
        change();
        for (x, (m0, c0)) in dirs.iter().zip(before) {
            let (m1, c1) = ns(&fs::metadata(x).unwrap());
            assert!(
                m1 > m0 && c1 > c0,
                "{what}: {} times did not move",
                x.display()
            );
        }
    };
    step("create", &[&a], &|| fs::write(a.join("f"), b"x").unwrap());
    step("link", &[&b], &|| {
        fs::hard_link(a.join("f"), b.join("l")).unwrap()
    });
    step("symlink", &[&a], &|| {
        std::os::unix::fs::symlink("f", a.join("s")).unwrap()
    });
    step("mkfifo", &[&a], &|| {
        // SAFETY: a valid C string.
        let r = unsafe { libc::mkfifo(cstr(&a.join("p")).as_ptr(), 0o600) };
        assert_eq!(call(r), 0);
    });
    step("unlink", &[&b], &|| fs::remove_file(b.join("l")).unwrap());
    step("rename", &[&a, &b], &|| {
        fs::rename(a.join("s"), b.join("s")).unwrap()
    });
    step("mkdir", &[&a], &|| fs::create_dir(a.join("d")).unwrap());
    step("rmdir", &[&a], &|| fs::remove_dir(a.join("d")).unwrap());
    // A file's ctime moves on every change of its inode.
    let f = a.join("f");
    let ctime = |p: &Path| ns(&fs::metadata(p).unwrap()).1;
    type Change<'a> = (&'a str, Box<dyn Fn() + 'a>);
    let changes: Vec<Change> = vec![
        (
            "chmod",
            Box::new(|| fs::set_permissions(&f, fs::Permissions::from_mode(0o600)).unwrap()),
        ),
        (
            "link",
            Box::new(|| fs::hard_link(&f, a.join("f2")).unwrap()),
        ),
        (
            "unlink",
            Box::new(|| fs::remove_file(a.join("f2")).unwrap()),
        ),
        (
            "truncate",
            Box::new(|| {
                File::options()
                    .write(true)
                    .open(&f)
                    .unwrap()
                    .set_len(1)
                    .unwrap()
            }),
        ),
    ];
    for (what, change) in changes {
        let c0 = ctime(&f);
        std::thread::sleep(Duration::from_millis(5));
        change();
        assert!(ctime(&f) > c0, "{what}: ctime did not move");
    }
    if root {
        let c0 = ctime(&f);
        std::thread::sleep(Duration::from_millis(5));
        std::os::unix::fs::chown(&f, Some(2), Some(2)).unwrap();
        assert!(ctime(&f) > c0, "chown: ctime did not move");
    }
    let c0 = ctime(&f);
    std::thread::sleep(Duration::from_millis(5));
    fs::rename(&f, a.join("g")).unwrap();
    assert!(ctime(&a.join("g")) > c0, "rename: ctime did not move");
    // utimensat: explicit times, UTIME_NOW and UTIME_OMIT on either field.
    let g = cstr(&a.join("g"));
    let set = |at: libc::timespec, mt: libc::timespec| {
        // SAFETY: a valid C string and two timespecs.
        let r = unsafe { libc::utimensat(libc::AT_FDCWD, g.as_ptr(), [at, mt].as_ptr(), 0) };
        assert_eq!(call(r), 0, "utimensat");
        let m = fs::metadata(a.join("g")).unwrap();
        (m.atime(), m.mtime())
    };
    let t = |s: i64, n: i64| libc::timespec {
        tv_sec: s,
        tv_nsec: n,
    };
    assert_eq!(set(t(1_000, 0), t(2_000, 0)), (1_000, 2_000));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let (at, mt) = set(t(0, libc::UTIME_OMIT), t(0, libc::UTIME_NOW));
    assert!(
        at == 1_000 && mt >= now - 5,
        "OMIT atime, NOW mtime: {at} {mt}"
    );
    let (at, mt2) = set(t(0, libc::UTIME_NOW), t(0, libc::UTIME_OMIT));
    assert!(
        at >= now - 5 && mt2 == mt,
        "NOW atime, OMIT mtime: {at} {mt2}"
    );
    // An explicit directory mtime sticks (what tar and cp -p restore).
    let ad = cstr(&a);
    // SAFETY: a valid C string and two timespecs.
    let r = unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            ad.as_ptr(),
            [t(3_000, 0), t(4_000, 0)].as_ptr(),
            0,
        )
    };
    assert_eq!(call(r), 0);
    assert_eq!(fs::metadata(&a).unwrap().mtime(), 4_000);
}

fn directory_links(d: &Path) {
    fs::create_dir(d).unwrap();
    let n = |p: &Path| fs::metadata(p).unwrap().nlink();
    let (a, b) = (d.join("a"), d.join("b"));
    fs::create_dir(&a).unwrap();
    fs::create_dir(&b).unwrap();
    assert_eq!(n(d), 4, "2 + two subdirectories");
    fs::create_dir(a.join("s")).unwrap();
    assert_eq!((n(&a), n(&b)), (3, 2));
    fs::rename(a.join("s"), b.join("s")).unwrap();
    assert_eq!(
        (n(&a), n(&b)),
        (2, 3),
        "a moved subdirectory counts in its new parent"
    );
    fs::create_dir(a.join("t")).unwrap();
    fs::rename(a.join("t"), b.join("s")).unwrap();
    assert_eq!((n(&a), n(&b)), (2, 3), "replacing an empty directory");
    fs::remove_dir(b.join("s")).unwrap();
    assert_eq!(n(&b), 2);
}

fn fallocate(f: &File, mode: i32, off: i64, len: i64) -> i32 {
    use std::os::fd::AsRawFd;
    // SAFETY: an open descriptor.
    call(unsafe { libc::fallocate(f.as_raw_fd(), mode, off, len) })
}

fn seek(f: &File, off: i64, whence: i32) -> Result<i64, i32> {
    use std::os::fd::AsRawFd;
    // SAFETY: an open descriptor.
    let r = unsafe { libc::lseek(f.as_raw_fd(), off, whence) };
    if r < 0 { Err(errno()) } else { Ok(r) }
}

fn fallocate_seek_and_copy(d: &Path) {
    fs::create_dir(d).unwrap();
    const M: i64 = 1 << 20;
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(d.join("f"))
        .unwrap();
    f.write_all_at(&vec![b'a'; 4 << 20], 0).unwrap();
    let punch = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
    assert_eq!(fallocate(&f, punch, M, M), 0, "punch a hole");
    assert_eq!(f.metadata().unwrap().len(), 4 << 20, "KEEP_SIZE");
    let mut b = vec![1u8; M as usize];
    f.read_exact_at(&mut b, M as u64).unwrap();
    assert!(b.iter().all(|&x| x == 0), "the hole reads zeros");
    f.read_exact_at(&mut b[..4], 2 << 20).unwrap();
    assert_eq!(&b[..4], b"aaaa", "the data after it stays");
    assert_eq!(
        seek(&f, 0, libc::SEEK_HOLE),
        Ok(M),
        "SEEK_HOLE finds the hole"
    );
    assert_eq!(
        seek(&f, M, libc::SEEK_DATA),
        Ok(2 * M),
        "SEEK_DATA skips it"
    );
    assert_eq!(seek(&f, 5, libc::SEEK_DATA), Ok(5));
    assert_eq!(
        seek(&f, 3 * M, libc::SEEK_HOLE),
        Ok(4 * M),
        "the end is a hole"
    );
    assert_eq!(seek(&f, 4 * M, libc::SEEK_DATA), Err(libc::ENXIO));
    assert_eq!(fallocate(&f, libc::FALLOC_FL_ZERO_RANGE, 100, 1000), 0);
    f.read_exact_at(&mut b[..1100], 0).unwrap();
    assert!(b[..100].iter().all(|&x| x == b'a') && b[100..1100].iter().all(|&x| x == 0));
    assert_eq!(fallocate(&f, 0, 4 * M, M), 0, "mode 0 past the end");
    assert_eq!(f.metadata().unwrap().len(), 5 << 20, "grows the file");
    f.read_exact_at(&mut b[..4096], 4 << 20).unwrap();
    assert!(
        b[..4096].iter().all(|&x| x == 0),
        "reserved room reads zeros"
    );
    f.write_all_at(b"into the room", (4 << 20) + 100).unwrap();
    f.sync_all().unwrap();
    f.read_exact_at(&mut b[..13], (4 << 20) + 100).unwrap();
    assert_eq!(&b[..13], b"into the room");
    assert_eq!(fallocate(&f, libc::FALLOC_FL_KEEP_SIZE, 5 * M, M), 0);
    assert_eq!(f.metadata().unwrap().len(), 5 << 20);
    assert_eq!(
        fallocate(&f, libc::FALLOC_FL_COLLAPSE_RANGE, 0, M),
        libc::EOPNOTSUPP
    );
    assert_eq!(
        fallocate(&f, libc::FALLOC_FL_PUNCH_HOLE, 0, M),
        libc::EOPNOTSUPP
    );
    assert_eq!(
        fallocate(&f, 0, 0, 1 << 60),
        libc::ENOSPC,
        "more than the cluster holds"
    );
    // copy_file_range copies.
    let src: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    fs::write(d.join("src"), &src).unwrap();
    let (i, o) = (
        File::open(d.join("src")).unwrap(),
        File::create(d.join("dst")).unwrap(),
    );
    use std::os::fd::AsRawFd;
    let mut left = src.len();
    while left > 0 {
        // SAFETY: two open descriptors, null offsets (the file positions).
        let n = unsafe {
            libc::copy_file_range(
                i.as_raw_fd(),
                std::ptr::null_mut(),
                o.as_raw_fd(),
                std::ptr::null_mut(),
                left,
                0,
            )
        };
        assert!(n > 0, "copy_file_range: errno {}", errno());
        left -= n as usize;
    }
    drop((i, o));
    assert_eq!(fs::read(d.join("dst")).unwrap(), src);
}

fn names_and_paths(d: &Path) {
    fs::create_dir(d).unwrap();
    let long = "n".repeat(255);
    let p = d.join(&long);
    fs::write(&p, b"max").unwrap();
    assert_eq!(fs::read(&p).unwrap(), b"max");
    let other = d.join("m".repeat(255));
    fs::rename(&p, &other).unwrap();
    fs::hard_link(&other, &p).unwrap();
    fs::remove_file(&other).unwrap();
    let e = fs::write(d.join("n".repeat(256)), b"").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENAMETOOLONG));
    let target = "t".repeat(4095);
    std::os::unix::fs::symlink(&target, d.join("sl")).unwrap();
    assert_eq!(fs::read_link(d.join("sl")).unwrap().as_os_str().len(), 4095);
    // A path close to PATH_MAX (4096 with its NUL), used whole.
    let mut deep = d.to_path_buf();
    while deep.as_os_str().len() + 1 + 200 + 1 + 40 < 4095 {
        deep.push("d".repeat(200));
        fs::create_dir(&deep).unwrap();
    }
    let rest = 4095 - deep.as_os_str().len() - 1;
    let leaf: PathBuf = deep.join("f".repeat(rest.min(255)));
    assert!(leaf.as_os_str().len() >= 4000, "{}", leaf.as_os_str().len());
    fs::write(&leaf, b"deep").unwrap();
    assert_eq!(fs::read(&leaf).unwrap(), b"deep");
    fs::remove_file(&leaf).unwrap();
}

/// statfs: used inodes = files - free, and a create or remove shows at once.
fn statfs_counts_inodes(mp: &Path) {
    let used = || {
        let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: a valid C string and a statvfs to fill.
        assert_eq!(call(unsafe { libc::statvfs(cstr(mp).as_ptr(), &mut s) }), 0);
        assert!(
            s.f_ffree > 0 && s.f_files > s.f_ffree,
            "{} {}",
            s.f_files,
            s.f_ffree
        );
        s.f_files - s.f_ffree
    };
    let before = used();
    let d = mp.join("statfs");
    fs::create_dir(&d).unwrap();
    for i in 0..3 {
        fs::write(d.join(i.to_string()), b"").unwrap();
    }
    assert_eq!(used(), before + 4, "a directory and three files");
    fs::remove_file(d.join("0")).unwrap();
    fs::remove_dir_all(&d).unwrap();
    // An unlinked file goes once no client holds it; wait for that.
    let t = Instant::now();
    while used() != before {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "{} != {before}",
            used()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Held open on a second mount of the same cluster, a file stays readable
/// there after the first mount unlinks it, past the MDS's grace period,
/// and goes after the second mount closes it.
fn held_on_another_client(up: &Up) {
    let mp2 = up.data.join("mnt2");
    let mut m2 = mount_fg(&up.mds_addr(), "tessera", &mp2, &[]);
    let p1 = up.mp.join("held");
    fs::write(&p1, b"kept for the holder").unwrap();
    let h = File::open(mp2.join("held")).unwrap();
    let inodes = || status_inodes(&up.mds_addr(), "tessera");
    let with = inodes();
    fs::remove_file(&p1).unwrap();
    std::thread::sleep(Duration::from_secs(11));
    let mut b = [0u8; 19];
    h.read_exact_at(&mut b, 0).unwrap();
    assert_eq!(&b, b"kept for the holder", "read on the other client");
    assert_eq!(inodes(), with, "kept while held");
    drop(h);
    let t = Instant::now();
    while inodes() != with - 1 {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "not reaped after the last close"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    sigint_wait(&mut m2);
}

fn status_inodes(mds: &str, cluster: &str) -> u64 {
    let o = bin()
        .args(["status", "--mds", mds, "--cluster", cluster, "--json"])
        .output()
        .unwrap();
    let s = String::from_utf8_lossy(&o.stdout);
    let at = s.find("\"inodes\":").unwrap_or_else(|| panic!("{s}"));
    s[at + 9..]
        .trim_start()
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// Separate daemons: a file open on the mount is unlinked, the MDS is
/// killed with SIGKILL and restarted; past the grace period the file is
/// still readable and writable through its descriptor (the orphan list is
/// durable, the client re-announces it), and after the last close it goes
/// (nothing leaks).
fn held_across_an_mds_restart() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cluster = "orphans";
    let (mut mds, osds, _, mds_addr) = daemons(d, cluster, &[]);
    let mp = d.join("mnt");
    let mut m = mount_fg(&mds_addr, cluster, &mp, &[]);
    let p = mp.join("orphan");
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&p)
        .unwrap();
    f.write_all_at(b"before", 0).unwrap();
    f.sync_all().unwrap();
    let with = status_inodes(&mds_addr, cluster);
    fs::remove_file(&p).unwrap();
    mds.kill().unwrap();
    mds.wait().unwrap();
    let mds = serve_mds(&d.join("mds"), &mds_addr);
    wait_osds_up(&mds_addr, cluster, 3);
    std::thread::sleep(Duration::from_secs(11));
    assert_eq!(
        status_inodes(&mds_addr, cluster),
        with,
        "the orphan survived"
    );
    f.write_all_at(b" and after", 6).unwrap();
    f.sync_all().unwrap();
    let mut b = [0u8; 16];
    f.read_exact_at(&mut b, 0).unwrap();
    assert_eq!(&b, b"before and after");
    assert_eq!(f.metadata().unwrap().nlink(), 0);
    drop(f);
    let t = Instant::now();
    while status_inodes(&mds_addr, cluster) != with - 1 {
        assert!(t.elapsed() < Duration::from_secs(30), "the orphan leaked");
        std::thread::sleep(Duration::from_millis(200));
    }
    sigint_wait(&mut m);
    stop_daemons(osds, mds);
}
