//! Real programs, and the patterns they rely on, through two FUSE mounts
//! of one cluster (separate daemons), in both namespace modes: locks
//! between mounts (`fcntl`, `F_GETLK`, `flock(1)`, a blocking wait, release
//! at close), sqlite3 writing one database from both mounts, a chmod of a
//! file whose data is still buffered, explicit mtimes kept (`tar` then
//! `tar -d`), a hole punched after a truncate, `cp -a` keeping modes,
//! long names, a file re-made under a name the other mount still
//! caches, an editor's atomic saves under readers on both mounts, a
//! non-owner's write to a set-id file, names that are not UTF-8, and
//! `df` at the replica count.
//! Each of these failed on an earlier landing. Skipped
//! (with a message) where FUSE cannot be mounted.
#![expect(clippy::unwrap_used, reason = "tests: a panic is the failure report")]

mod common;

use std::io::Write as _;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;

/// A little more than the mounts' attribute timeout (1 s by default).
const ATTR_TIMEOUT: Duration = Duration::from_millis(1200);

fn sh(script: &str) -> std::process::Output {
    Command::new("bash").args(["-c", script]).output().unwrap()
}

fn sh_ok(script: &str) -> String {
    let o = sh(script);
    assert!(
        o.status.success(),
        "{script}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `fcntl(F_SETLK/F_SETLKW/F_GETLK)` on `fd`: the answer, and for F_GETLK
/// the lock found in the way (type, start, len).
fn fcntl_lock(fd: i32, cmd: i32, typ: i32, start: i64, len: i64) -> (i32, (i32, i64, i64)) {
    // SAFETY: a zeroed flock is a valid value; fcntl fills it in.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = typ as i16;
    fl.l_whence = libc::SEEK_SET as i16;
    fl.l_start = start;
    fl.l_len = len;
    // SAFETY: fd is open; fl lives across the call.
    let r = unsafe { libc::fcntl(fd, cmd, &mut fl) };
    let r = if r < 0 {
        std::io::Error::last_os_error().raw_os_error().unwrap()
    } else {
        0
    };
    (r, (fl.l_type as i32, fl.l_start, fl.l_len))
}

fn open_rw(p: &Path) -> std::fs::File {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(p)
        .unwrap()
}

fn locks_between_mounts(a: &Path, b: &Path) {
    let fa = open_rw(&a.join("locked"));
    let fb = open_rw(&b.join("locked"));
    let (x, y) = (fa.as_raw_fd(), fb.as_raw_fd());
    assert_eq!(fcntl_lock(x, libc::F_SETLK, libc::F_WRLCK, 0, 10).0, 0);
    assert_eq!(
        fcntl_lock(y, libc::F_SETLK, libc::F_WRLCK, 5, 10).0,
        libc::EAGAIN,
        "an overlapping write lock on the other mount is refused"
    );
    assert_eq!(
        fcntl_lock(y, libc::F_SETLK, libc::F_RDLCK, 9, 1).0,
        libc::EAGAIN
    );
    assert_eq!(
        fcntl_lock(y, libc::F_SETLK, libc::F_WRLCK, 10, 10).0,
        0,
        "a disjoint range is free"
    );
    let (r, found) = fcntl_lock(y, libc::F_GETLK, libc::F_WRLCK, 0, 0);
    assert_eq!(
        (r, found),
        (0, (libc::F_WRLCK, 0, 10)),
        "F_GETLK names the holder's range"
    );
    // A blocking wait is granted once the holder closes its descriptor.
    let waiter = std::thread::spawn(move || {
        let t = Instant::now();
        let r = fcntl_lock(y, libc::F_SETLKW, libc::F_WRLCK, 0, 10).0;
        (r, t.elapsed(), fb)
    });
    std::thread::sleep(Duration::from_millis(600));
    assert!(
        !waiter.is_finished(),
        "the wait waits while the lock is held"
    );
    drop(fa);
    let (r, waited, fb) = waiter.join().unwrap();
    assert_eq!(r, 0);
    assert!(waited >= Duration::from_millis(500), "{waited:?}");
    let fa = open_rw(&a.join("locked"));
    assert_eq!(
        fcntl_lock(fa.as_raw_fd(), libc::F_SETLK, libc::F_RDLCK, 0, 1).0,
        libc::EAGAIN,
        "now the other mount holds it"
    );
    drop(fb);
    assert_eq!(
        fcntl_lock(fa.as_raw_fd(), libc::F_SETLK, libc::F_RDLCK, 0, 1).0,
        0
    );
    drop(fa);
    // flock(1): one holder at a time across the mounts, released at exit.
    let held = Command::new("flock")
        .args(["-n", a.join("flocked").to_str().unwrap(), "sleep", "2"])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    let o = sh(&format!("flock -n '{}' true", b.join("flocked").display()));
    assert!(
        !o.status.success(),
        "flock -n on the other mount while held"
    );
    let mut held = held;
    assert!(held.wait().unwrap().success());
    sh_ok(&format!("flock -n '{}' true", b.join("flocked").display()));
}

fn sqlite_from_two_mounts(a: &Path, b: &Path) {
    let db = |m: &Path| m.join("shared.db").display().to_string();
    sh_ok(&format!(
        "sqlite3 '{}' 'create table t (who text, n int)'",
        db(a)
    ));
    // The other mount may still answer from its listing of the directory
    // without the new database for up to the attribute timeout
    // (close-to-open, docs/CLIENT.md).
    std::thread::sleep(ATTR_TIMEOUT);
    let writer = |m: &Path, who: &str| {
        let script = format!(
            "for i in $(seq 1 60); do echo \"begin; insert into t values ('{who}', $i); commit;\"; done \
             | sqlite3 -cmd '.timeout 60000' '{}'",
            db(m)
        );
        std::thread::spawn(move || sh(&script))
    };
    // And one sqlite3 process per insert, as scripts do: each start
    // checks for a hot journal the other mount may just have removed
    // (a stale "it exists" there ended inserts with "unable to open
    // database file").
    let one_by_one = |m: &Path, who: &str| {
        let script = format!(
            "for i in $(seq 1 40); do sqlite3 -cmd '.timeout 60000' '{}' \
             \"insert into t values ('{who}', $i); select count(*) from t;\" > /dev/null || exit 1; done",
            db(m)
        );
        std::thread::spawn(move || sh(&script))
    };
    let (wa, wb) = (writer(a, "a"), writer(b, "b"));
    let (pa, pb) = (one_by_one(a, "pa"), one_by_one(b, "pb"));
    for w in [wa, wb, pa, pb] {
        let o = w.join().unwrap();
        assert!(
            o.status.success() && o.stderr.is_empty(),
            "sqlite3: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    for m in [a, b] {
        let rows = sh_ok(&format!(
            "sqlite3 '{}' 'select who, count(*) from t group by who; pragma integrity_check'",
            db(m)
        ));
        assert_eq!(
            rows, "a|60\nb|60\npa|40\npb|40\nok\n",
            "every committed row, seen from {m:?}"
        );
    }
}

/// Appenders on two mounts that take an `flock` before they open the file
/// to append (as `flock FILE -c 'cmd >> FILE'` does; docs/CLIENT.md:
/// `O_APPEND` alone is not atomic between mounts, as on NFS) lose no
/// line.
fn appends_under_flock_from_two_mounts(a: &Path, b: &Path) {
    let writer = |m: &Path, who: &'static str| {
        let p = m.join("appended.log");
        std::thread::spawn(move || {
            for i in 0..150 {
                let l = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&p)
                    .unwrap();
                // SAFETY: l is open.
                assert_eq!(unsafe { libc::flock(l.as_raw_fd(), libc::LOCK_EX) }, 0);
                let f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
                use std::io::Write;
                (&f).write_all(format!("{who} {i:04}\n").as_bytes())
                    .unwrap();
                drop(f);
                // SAFETY: l is open.
                assert_eq!(unsafe { libc::flock(l.as_raw_fd(), libc::LOCK_UN) }, 0);
            }
        })
    };
    let (x, y) = (writer(a, "a"), writer(b, "b"));
    x.join().unwrap();
    y.join().unwrap();
    std::thread::sleep(ATTR_TIMEOUT);
    for m in [a, b] {
        let text = std::fs::read_to_string(m.join("appended.log")).unwrap();
        let mut lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 300, "every append kept, seen from {m:?}");
        lines.sort_unstable();
        lines.dedup();
        assert_eq!(lines.len(), 300, "no line overwritten by another");
    }
}

fn setattr_on_buffered_data(a: &Path, b: &Path) {
    // chmod of a file whose bytes are still buffered: the length stays.
    let p = a.join("buffered");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&p)
        .unwrap();
    use std::io::Write;
    f.write_all(&[b'x'; 1000]).unwrap();
    f.set_permissions(std::fs::Permissions::from_mode(0o600))
        .unwrap();
    assert_eq!(std::fs::metadata(&p).unwrap().len(), 1000);
    f.write_all(b"yy").unwrap();
    drop(f);
    let got = std::fs::read(&p).unwrap();
    assert_eq!(got.len(), 1002, "an append after fchmod appends");
    assert_eq!(&got[..3], b"xxx");
    // utimensat after writing through the same descriptor: kept at close.
    let p = a.join("stamped");
    let f = std::fs::File::create(&p).unwrap();
    (&f).write_all(&[7u8; 5000]).unwrap();
    let when = std::time::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    f.set_times(
        std::fs::FileTimes::new()
            .set_modified(when)
            .set_accessed(when),
    )
    .unwrap();
    drop(f);
    // The other mount may answer from what it cached for up to the
    // attribute timeout (close-to-open, docs/CLIENT.md).
    std::thread::sleep(ATTR_TIMEOUT);
    for m in [a, b] {
        let md = std::fs::metadata(m.join("stamped")).unwrap();
        assert_eq!((md.mtime(), md.len()), (1_000_000_000, 5000), "{m:?}");
    }
}

fn tar_keeps_every_mtime(a: &Path, work: &Path) {
    let src = work.join("tar-src");
    for i in 0..40 {
        let d = src.join(format!("d{}", i % 5));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join(format!("f{i}")), vec![i as u8; 3000 + i * 97]).unwrap();
    }
    sh_ok(&format!(
        "touch -d '2001-02-03 04:05:06' '{0}'/d*/f1* && chmod 0755 '{0}'/d1/f1 && \
         tar -C '{0}' -czf '{1}/t.tgz' .",
        src.display(),
        work.display()
    ));
    let dst = a.join("untarred");
    std::fs::create_dir(&dst).unwrap();
    sh_ok(&format!(
        "tar -C '{}' -xzf '{}/t.tgz'",
        dst.display(),
        work.display()
    ));
    let d = sh(&format!(
        "tar -C '{}' -dzf '{}/t.tgz'",
        dst.display(),
        work.display()
    ));
    assert!(
        d.status.success(),
        "tar -d: {}",
        String::from_utf8_lossy(&d.stdout)
    );
    // cp -a keeps modes and times (ACLs are refused, so it falls back to
    // the mode bits).
    let copy = a.join("copied");
    sh_ok(&format!("cp -a '{}' '{}'", src.display(), copy.display()));
    let o = sh_ok(&format!(
        "cd '{}' && find . -printf '%p %m %T@\\n' | sort; cd '{}' && find . -printf '%p %m %T@\\n' | sort",
        src.display(),
        copy.display()
    ));
    let lines: Vec<&str> = o.lines().collect();
    let (x, y) = lines.split_at(lines.len() / 2);
    assert_eq!(x, y, "cp -a: same modes and mtimes");
    let o = sh(&format!(
        "setfacl -m u:nobody:r '{}/d0/f0' 2>&1",
        copy.display()
    ));
    assert!(!o.status.success(), "setfacl is refused, not ignored");
}

fn punch_after_truncate(a: &Path) {
    let p = a.join("punched");
    let f = open_rw(&p);
    let data: Vec<u8> = (0..228_065u32).map(|i| (i % 251) as u8).collect();
    use std::os::unix::fs::FileExt;
    f.write_all_at(&data, 0).unwrap();
    f.set_len(177_180).unwrap();
    // SAFETY: fd is open.
    let r = unsafe {
        libc::fallocate(
            f.as_raw_fd(),
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            87_125,
            11_557,
        )
    };
    assert_eq!(r, 0, "punch: {}", std::io::Error::last_os_error());
    drop(f);
    let got = std::fs::read(&p).unwrap();
    let mut want = data[..177_180].to_vec();
    want[87_125..87_125 + 11_557].fill(0);
    assert!(got == want, "the hole reads as zeros, the rest as written");
}

fn long_names_and_stale_names(a: &Path, b: &Path) {
    let long = "n".repeat(256);
    for r in [
        std::fs::metadata(a.join(&long)).map(|_| ()),
        std::fs::remove_file(a.join(&long)),
        std::fs::remove_dir(a.join(&long)),
        std::fs::set_permissions(a.join(&long), std::fs::Permissions::from_mode(0o644)),
    ] {
        assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::ENAMETOOLONG));
    }
    // One mount makes and removes a journal; the other, which has just
    // seen it, makes its own under the same name, then removes it.
    for i in 0..4 {
        let j = |m: &Path| m.join("db-journal");
        std::fs::write(j(a), [i as u8; 512]).unwrap();
        std::thread::sleep(ATTR_TIMEOUT);
        assert!(std::fs::metadata(j(b)).is_ok());
        std::fs::remove_file(j(a)).unwrap();
        std::fs::write(j(b), [1u8; 100]).unwrap();
        assert_eq!(std::fs::read(j(b)).unwrap(), vec![1u8; 100]);
        std::fs::remove_file(j(b)).unwrap_or_else(|e| panic!("round {i}: {e}"));
    }
}

/// An editor's atomic save (write a temporary file, fsync, close, rename
/// it over the file) 250 times while a reader on the same mount and one
/// on the other read the file in a loop: every rename succeeds and every
/// read sees one whole version, never an empty or torn file.
fn atomic_saves_under_readers(a: &Path, b: &Path) {
    use std::sync::atomic::{AtomicBool, Ordering};
    const LEN: usize = 4096;
    std::fs::write(a.join("doc.txt"), [b'@'; LEN]).unwrap();
    // A name new to the other mount shows once its list of names is
    // older than the attribute window (docs/CLIENT.md, "Names known
    // absent"); from then on the name is never missing.
    std::thread::sleep(ATTR_TIMEOUT);
    let stop = AtomicBool::new(false);
    let read_loop = |m: &Path| {
        let (mut reads, mut bad) = (0u32, Vec::new());
        while !stop.load(Ordering::Relaxed) {
            match std::fs::read(m.join("doc.txt")) {
                Ok(d) => {
                    reads += 1;
                    // Zeros are no version (a removed file's objects
                    // read as holes).
                    if d.len() != LEN || d[0] == 0 || d.iter().any(|&c| c != d[0]) {
                        bad.push(format!("{} bytes, first {:?}", d.len(), d.first()));
                    }
                }
                Err(e) => bad.push(format!("read: {e}")),
            }
        }
        (reads, bad)
    };
    let (same, other) = std::thread::scope(|s| {
        let same = s.spawn(|| read_loop(a));
        let other = s.spawn(|| read_loop(b));
        for i in 0..250u32 {
            let tmp = a.join(format!(".doc.txt.{i}.tmp"));
            let mut f = std::fs::File::create(&tmp).unwrap();
            std::io::Write::write_all(&mut f, &[b'A' + (i % 26) as u8; LEN]).unwrap();
            f.sync_all().unwrap();
            drop(f);
            std::fs::rename(&tmp, a.join("doc.txt"))
                .unwrap_or_else(|e| panic!("save {i}: rename: {e}"));
        }
        stop.store(true, Ordering::Relaxed);
        (same.join().unwrap(), other.join().unwrap())
    });
    println!(
        "atomic saves: reads on the same mount {}, on the other {}",
        same.0, other.0
    );
    assert!(
        same.1.is_empty(),
        "same mount: {:?}",
        &same.1[..same.1.len().min(5)]
    );
    assert!(
        other.1.is_empty(),
        "other mount: {:?}",
        &other.1[..other.1.len().min(5)]
    );
    assert!(same.0 > 0 && other.0 > 0);
    assert_eq!(
        std::fs::read(a.join("doc.txt")).unwrap(),
        [b'A' + 249 % 26; LEN]
    );
}

/// A user who is not the owner appends to a 06777 file: the write
/// succeeds and clears the set-id bits (the kernel asks with a chmod in
/// the writer's name). Needs root to act as `nobody`; skipped otherwise.
fn set_id_bits_cleared_by_a_writer(a: &Path) {
    // SAFETY: a plain query.
    if unsafe { libc::geteuid() } != 0 {
        println!("not root: the set-id write is not tried");
        return;
    }
    let p = a.join("setid");
    std::fs::write(&p, b"x\n").unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o6777)).unwrap();
    let o = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "sh",
            "-c",
        ])
        .arg(format!("echo hi >> '{}'", p.display()))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let m = std::fs::metadata(&p).unwrap();
    assert_eq!(m.mode() & 0o7777, 0o777, "set-id bits cleared by the write");
    assert_eq!(std::fs::read(&p).unwrap(), b"x\nhi\n");

    // Root (CAP_FSETID) keeps them; a truncate by another user drops them.
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o6777)).unwrap();
    std::fs::OpenOptions::new()
        .append(true)
        .open(&p)
        .unwrap()
        .write_all(b"root\n")
        .unwrap();
    let m = std::fs::metadata(&p).unwrap();
    assert_eq!(
        m.mode() & 0o7777,
        0o6777,
        "root's write keeps the set-id bits"
    );
    let o = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "truncate",
            "-s",
            "2",
        ])
        .arg(&p)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let m = std::fs::metadata(&p).unwrap();
    assert_eq!(
        (m.mode() & 0o7777, m.len()),
        (0o777, 2),
        "truncate by nobody"
    );

    // A chown, to the same owner too, drops them (as Linux's chown does).
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o6777)).unwrap();
    std::os::unix::fs::chown(&p, Some(0), Some(0)).unwrap();
    let m = std::fs::metadata(&p).unwrap();
    assert_eq!(m.mode() & 0o7777, 0o777, "chown to the same owner");

    // File capabilities go with any write, root's included.
    let caps = a.join("caps");
    std::fs::write(&caps, b"bin").unwrap();
    let cpath = std::ffi::CString::new(caps.as_os_str().as_encoded_bytes()).unwrap();
    let name = c"security.capability";
    // VFS_CAP_REVISION_2, CAP_NET_BIND_SERVICE permitted.
    let mut value = Vec::new();
    for w in [0x0200_0000u32, 1 << 10, 0, 0, 0] {
        value.extend_from_slice(&w.to_le_bytes());
    }
    // SAFETY: valid C strings and a buffer of the length given.
    let r = unsafe {
        libc::setxattr(
            cpath.as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    assert_eq!(r, 0, "setxattr: {}", std::io::Error::last_os_error());
    let has_caps = || {
        let mut buf = [0u8; 64];
        // SAFETY: as above; the buffer is 64 bytes.
        let n = unsafe {
            libc::getxattr(
                cpath.as_ptr(),
                name.as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        n >= 0
    };
    assert!(has_caps(), "the capability was set");
    std::fs::OpenOptions::new()
        .append(true)
        .open(&caps)
        .unwrap()
        .write_all(b"patched")
        .unwrap();
    assert!(!has_caps(), "a write left the file's capabilities");
}

/// Names and symlink targets that are not UTF-8 (Linux names are bytes):
/// `cp -a` of such a tree matches it byte for byte (`diff -r`), the other
/// mount lists the same bytes, renames and 255-byte Latin-1 names work,
/// 256 bytes is ENAMETOOLONG.
fn names_that_are_not_utf8(a: &Path, b: &Path, work: &Path) {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let src = work.join("bytes-src");
    let names: [&[u8]; 6] = [
        b"caf\xe9",
        b"\xff\xfe",
        "caf\u{e9}".as_bytes(),
        b"mix \xe9 \xc3\xa9 \xc0\xaf",
        &[b'x'; 255],
        &[0xe9; 255],
    ];
    std::fs::create_dir_all(src.join(OsStr::from_bytes(b"dir\xe8"))).unwrap();
    for n in names {
        std::fs::write(src.join(OsStr::from_bytes(n)), n).unwrap();
    }
    std::os::unix::fs::symlink(OsStr::from_bytes(b"caf\xe9"), src.join("link")).unwrap();
    sh_ok(&format!(
        "cp -a '{}' '{}'",
        src.display(),
        a.join("bytes").display()
    ));
    sh_ok(&format!(
        "diff -r '{}' '{}'",
        src.display(),
        a.join("bytes").display()
    ));
    std::thread::sleep(ATTR_TIMEOUT);
    let mut here: Vec<_> = std::fs::read_dir(b.join("bytes"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    let mut there: Vec<_> = std::fs::read_dir(&src)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    here.sort();
    there.sort();
    assert_eq!(here, there, "the other mount lists the same bytes");
    let link = b.join("bytes").join("link");
    assert_eq!(
        std::fs::read_link(&link).unwrap().as_os_str().as_bytes(),
        b"caf\xe9"
    );
    assert_eq!(std::fs::symlink_metadata(&link).unwrap().len(), 4);
    let from = a.join("bytes").join(OsStr::from_bytes(b"caf\xe9"));
    let to = a.join("bytes").join(OsStr::from_bytes(b"new\xe1"));
    std::fs::rename(&from, &to).unwrap();
    assert_eq!(std::fs::read(&to).unwrap(), b"caf\xe9");
    let long = a.join(OsStr::from_bytes(&[0xe9; 256]));
    assert_eq!(
        std::fs::write(long, b"").unwrap_err().raw_os_error(),
        Some(libc::ENAMETOOLONG)
    );
    std::fs::remove_dir_all(a.join("bytes")).unwrap();
}

/// `df` tells what a user can write: three OSDs at three copies (the
/// default) hold one OSD's worth of data, not three; `status` shows the
/// raw space and the usable space on its own line.
fn df_counts_the_copies(a: &Path, mds_addr: &str, cluster: &str) {
    let o = bin()
        .args(["status", "--json", "--mds", mds_addr, "--cluster", cluster])
        .output()
        .unwrap();
    let st: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let raw: u64 = st["osds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["capacity"].as_u64().unwrap())
        .sum();
    let p = std::ffi::CString::new(a.to_str().unwrap()).unwrap();
    // SAFETY: a valid path and a zeroed struct for the kernel to fill.
    let mut v: libc::statvfs = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::statvfs(p.as_ptr(), &mut v) }, 0);
    let size = v.f_blocks * v.f_frsize;
    let avail = v.f_bavail * v.f_frsize;
    assert!(
        size <= raw / 3 && size >= raw / 3 - raw / 100,
        "df size {size} for {raw} raw bytes at three copies"
    );
    assert!(
        avail <= size && avail > size / 2,
        "df avail {avail} of {size}"
    );
    let text = String::from_utf8(
        bin()
            .args(["status", "--mds", mds_addr, "--cluster", cluster])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    assert!(
        text.lines()
            .any(|l| l.starts_with("space: raw ") && l.contains("at 3 copies")),
        "{text}"
    );
}

/// Files written and closed, then appended to with `>>` and checked with
/// `stat` and `cmp` while the mount's write-back timer writes them out
/// (an append through a create that answered the namespace's older
/// length wrote over the file's start; a stat raced the commit).
fn appends_and_stats_racing_the_write_back(a: &Path) {
    let d = a.join("appends");
    std::fs::create_dir(&d).unwrap();
    let script = format!(
        "cd '{}' && for i in $(seq 1 120); do yes abcdefghij | head -c $((4000 + i)) > f$i; done && \
         sleep 0.9 && for i in $(seq 1 120); do echo tail >> f$i; \
           s=$(stat -c %s f$i); [ $s -eq $((4005 + i)) ] || {{ echo \"f$i: $s\"; exit 1; }}; done && \
         for i in $(seq 1 120); do (yes abcdefghij | head -c $((4000 + i)); echo tail) | cmp - f$i || exit 1; done",
        d.display()
    );
    sh_ok(&script);
}

/// Appends with `>>` taking turns between two mounts, each closed before
/// the other's begins, well within the attribute timeout: every line
/// stays (the kernel appended at the length it had cached, over the
/// other mount's line).
fn appends_taking_turns_between_mounts(a: &Path, b: &Path) {
    let (fa, fb) = (a.join("turns.log"), b.join("turns.log"));
    sh_ok(&format!(
        "printf 'line0\\n' > '{0}'; for i in $(seq 1 20); do echo a$i >> '{1}'; echo b$i >> '{0}'; done",
        fa.display(),
        fb.display()
    ));
    let mut want = vec!["line0".to_string()];
    for i in 1..=20 {
        want.push(format!("a{i}"));
        want.push(format!("b{i}"));
    }
    std::thread::sleep(ATTR_TIMEOUT);
    for f in [&fa, &fb] {
        let text = std::fs::read_to_string(f).unwrap();
        let got: Vec<&str> = text.lines().collect();
        assert_eq!(got, want, "seen through {f:?}");
    }
}

/// A file rewritten on one mount and read on another within the cache
/// window, growing and shrinking: the reader sees one whole version,
/// never the new bytes cut to the old length (`cat` printed six bytes of
/// the new file) or the new length padded with zeros.
fn rewrites_on_another_mount_read_whole(a: &Path, b: &Path) {
    for i in 0..8 {
        let (ra, rb) = (a.join(format!("grow{i}")), b.join(format!("grow{i}")));
        let (sa, sb) = (a.join(format!("shrink{i}")), b.join(format!("shrink{i}")));
        let script = format!(
            "printf 'short{i}\\n' > '{ra}'; cat '{ra}' > /dev/null; seq 1 {n} > '{rb}'; \
             seq 1 {n} > '{sa}'; cat '{sa}' > /dev/null; printf 'tiny{i}\\n' > '{sb}'; \
             cat '{ra}'; echo ---; cat '{sa}'",
            ra = ra.display(),
            rb = rb.display(),
            sa = sa.display(),
            sb = sb.display(),
            n = 60 + i,
        );
        let out = sh_ok(&script);
        let (grown, shrunk) = out.split_once("---\n").expect("both outputs");
        let seq: String = (1..=60 + i).map(|k| format!("{k}\n")).collect();
        let old = format!("short{i}\n");
        assert!(
            grown == seq || grown == old,
            "round {i}: a file grown on the other mount read as {grown:?}"
        );
        let (tiny, was) = (format!("tiny{i}\n"), seq);
        assert!(
            shrunk == tiny || shrunk == was,
            "round {i}: a file shrunk on the other mount read as {shrunk:?}"
        );
    }
    // Grown, read, then shrunk within the window; and a file of whole
    // stripe units (1 MiB) grown to 3 MiB, then shrunk back to 1 MiB.
    let (ta, tb) = (a.join("twice"), b.join("twice"));
    let (ba, bb) = (a.join("big"), b.join("big"));
    let script = format!(
        "printf 'a\\n' > '{ta}'; printf '%0100d\\n' 0 > '{tb}'; cat '{ta}' > /dev/null; \
         printf 'new\\n' > '{tb}'; cat '{ta}'; \
         head -c 1M /dev/zero | tr '\\0' x > '{ba}'; cat '{ba}' > /dev/null; \
         head -c 3M /dev/zero | tr '\\0' y > '{bb}'; cat '{ba}' | md5sum; \
         head -c 3M /dev/zero | tr '\\0' y | md5sum; \
         head -c 1M /dev/zero | tr '\\0' z > '{bb}'; cat '{ba}' | md5sum; \
         head -c 1M /dev/zero | tr '\\0' z | md5sum",
        ta = ta.display(),
        tb = tb.display(),
        ba = ba.display(),
        bb = bb.display(),
    );
    let out = sh_ok(&script);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.first(), Some(&"new"), "shrunk after growing: {out:?}");
    assert_eq!(lines.get(1), lines.get(2), "1 MiB grown to 3 MiB: {out:?}");
    assert_eq!(lines.get(3), lines.get(4), "3 MiB shrunk to 1 MiB: {out:?}");
}

/// A file rewritten in place (`cat new > f`: a truncate, then writes) on
/// one mount while another reads it in a loop: a read may see the old
/// version, the new one or a part of one, but never zeros nobody wrote.
/// With the objects cut before the shorter length was recorded, a reader
/// that asked for the length in between read the cut objects as holes
/// (OSD namespace: 13–23 reads with zeros per 15 s; MDS: 2). With the
/// namespace on the OSDs (`whole_only_at_start`) a read racing the
/// writer's own write-out can still meet a chunk not yet written (about
/// one read in 100,000, docs/CLIENT.md): there only a read whose first
/// byte is zero — what the cut objects gave — fails the test; the others
/// are printed.
fn rewrites_in_place_under_a_reader(a: &Path, b: &Path, whole_only_at_start: bool) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let versions: Vec<Vec<u8>> = [16usize, 4096, 100_000, 600_000, 1_500_000]
        .iter()
        .enumerate()
        .map(|(v, &n)| (0..n).map(|k| ((v * 37 + k) % 250 + 1) as u8).collect())
        .collect();
    let (wa, rb) = (a.join("in-place"), b.join("in-place"));
    std::fs::write(&wa, &versions[0]).unwrap();
    let stop = AtomicBool::new(false);
    let (writes, reads, zeros) = std::thread::scope(|s| {
        let writer = s.spawn(|| {
            let mut n = 0usize;
            let until = std::time::Instant::now() + std::time::Duration::from_secs(6);
            while std::time::Instant::now() < until {
                std::fs::write(&wa, &versions[n * 7 % versions.len()]).unwrap();
                n += 1;
            }
            stop.store(true, Ordering::Relaxed);
            n
        });
        let reader = s.spawn(|| {
            let (mut reads, mut zeros) = (0usize, Vec::new());
            while !stop.load(Ordering::Relaxed) {
                let Ok(d) = std::fs::read(&rb) else { continue };
                reads += 1;
                if let Some(z) = d.iter().position(|&x| x == 0) {
                    zeros.push((d.len(), z));
                }
            }
            (reads, zeros)
        });
        let w = writer.join().unwrap();
        let (r, z) = reader.join().unwrap();
        (w, r, z)
    });
    assert!(
        writes > 20 && reads > 20,
        "{writes} rewrites, {reads} reads"
    );
    let mut zeros = zeros;
    if whole_only_at_start {
        let inside: Vec<_> = zeros.iter().filter(|z| z.1 > 0).copied().collect();
        if !inside.is_empty() {
            eprintln!(
                "{} of {reads} reads met zeros past their start (a chunk not yet written out): {:?}",
                inside.len(),
                &inside[..inside.len().min(5)]
            );
        }
        zeros.retain(|z| z.1 == 0);
    }
    assert!(
        zeros.is_empty(),
        "{} of {reads} reads during {writes} rewrites had zeros (length, first zero): {:?}",
        zeros.len(),
        &zeros[..zeros.len().min(5)]
    );
}

/// `cp` (coreutils copies with `copy_file_range`) of a file another mount
/// has just rewritten shorter, within the cache window: the copy is the
/// new file, not the new bytes padded with zeros to the old length (4 of
/// 4 runs made 4 MiB out of 512 KiB before the copy asked for the length).
fn cp_of_a_file_shrunk_elsewhere(a: &Path, b: &Path) {
    let script = format!(
        "head -c 4M /dev/urandom > '{ax}'; cat '{ax}' > /dev/null; \
         head -c 524287 /dev/urandom > '{bx}'; cp '{ax}' '{ay}'; \
         stat -c %s '{ay}'; cmp '{bx}' '{ay}' && echo same",
        ax = a.join("cp-src").display(),
        bx = b.join("cp-src").display(),
        ay = a.join("cp-dst").display(),
    );
    let out = sh_ok(&script);
    assert_eq!(
        out, "524287\nsame\n",
        "cp of a file shrunk on the other mount"
    );
}

/// An `O_APPEND` descriptor held open while another mount truncates and
/// rewrites the file appends at the file's end, not at the end it knew:
/// the file was `HDR` and 199 zero bytes before the append (20 of 20).
fn append_after_a_truncate_elsewhere(a: &Path, b: &Path) {
    use std::fs::{File, OpenOptions};
    let (pa, pb) = (a.join("append-trunc"), b.join("append-trunc"));
    std::fs::write(&pa, vec![b'x'; 200]).unwrap();
    let mut appender = OpenOptions::new().append(true).open(&pb).unwrap();
    appender.write_all(b"B1\n").unwrap();
    appender.sync_all().unwrap();
    let mut f = File::create(&pa).unwrap();
    f.write_all(b"HDR\n").unwrap();
    f.sync_all().unwrap();
    drop(f);
    appender.write_all(b"B2\n").unwrap();
    appender.sync_all().unwrap();
    drop(appender);
    let got = std::fs::read(&pb).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&got),
        "HDR\nB2\n",
        "an append after another mount's truncate"
    );
}

fn run(cluster: &str, format_extra: &[&str]) {
    with_two_mounts(cluster, format_extra, |a, b, d, mds_addr| {
        locks_between_mounts(a, b);
        sqlite_from_two_mounts(a, b);
        appends_under_flock_from_two_mounts(a, b);
        appends_taking_turns_between_mounts(a, b);
        rewrites_on_another_mount_read_whole(a, b);
        rewrites_in_place_under_a_reader(a, b, format_extra.contains(&"osd"));
        cp_of_a_file_shrunk_elsewhere(a, b);
        append_after_a_truncate_elsewhere(a, b);
        setattr_on_buffered_data(a, b);
        tar_keeps_every_mtime(a, d);
        appends_and_stats_racing_the_write_back(a);
        punch_after_truncate(a);
        long_names_and_stale_names(a, b);
        atomic_saves_under_readers(a, b);
        set_id_bits_cleared_by_a_writer(a);
        names_that_are_not_utf8(a, b, d);
        df_counts_the_copies(a, mds_addr, cluster);
    });
}

#[test]
fn real_programs_on_two_mounts_namespace_on_the_mds() {
    run("progs-mds", &[]);
}

#[test]
fn real_programs_on_two_mounts_namespace_on_the_osds() {
    run("progs-osd", &["--namespace", "osd"]);
}
