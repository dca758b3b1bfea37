//! Seeded random file operations through real mounts, checked against an
//! in-memory model after every one: writes across stripe units, reads,
//! truncates up and down, punched holes, zeroed ranges, fallocate,
//! copy_file_range, chmod and utimens on a file with buffered data, fsync,
//! close and reopen, and a read through mmap. First on one mount, then on
//! two mounts taking turns under `fcntl` locks (the other mount's writes
//! and length must be what a lock holder sees). Both namespace modes. A
//! failure names the seed and the step, and reproduces with them.
#![expect(clippy::unwrap_used, reason = "tests: a panic is the failure report")]

mod common;

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;

use common::*;
use rand::rngs::SmallRng as StdRng;
use rand::{Rng, SeedableRng};

/// Largest offset the operations reach (several 4 KiB stripe units and
/// object boundaries, as formatted below).
const SPAN: u64 = 96 * 1024;

fn open(p: &Path) -> File {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(p)
        .unwrap()
}

fn fallocate(f: &File, mode: i32, off: u64, len: u64) {
    // SAFETY: f is open.
    let r = unsafe { libc::fallocate(f.as_raw_fd(), mode, off as i64, len as i64) };
    assert_eq!(
        r,
        0,
        "fallocate {mode:#x} {off}+{len}: {}",
        std::io::Error::last_os_error()
    );
}

fn set_lock(f: &File, typ: i32) {
    // SAFETY: a zeroed flock is valid; fd is open.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = typ as i16;
    fl.l_whence = libc::SEEK_SET as i16;
    // SAFETY: as above.
    let r = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETLKW, &mut fl) };
    assert_eq!(r, 0, "lock: {}", std::io::Error::last_os_error());
}

/// The model: what the file must hold.
struct Model {
    bytes: Vec<u8>,
}

impl Model {
    fn grow(&mut self, to: u64) {
        if to as usize > self.bytes.len() {
            self.bytes.resize(to as usize, 0);
        }
    }
}

/// Checks the file against the model through `f` (length, every byte)
/// and, every few steps, through a shared mapping.
fn check(f: &File, m: &Model, what: &str, mmap: bool) {
    let len = f.metadata().unwrap().len();
    assert_eq!(len, m.bytes.len() as u64, "{what}: length");
    let mut got = vec![0u8; m.bytes.len()];
    if let Err(e) = f.read_exact_at(&mut got, 0) {
        panic!("{what}: reading {} bytes: {e}", got.len());
    }
    if let Some(i) = got.iter().zip(&m.bytes).position(|(a, b)| a != b) {
        panic!("{what}: byte {i} is {} (want {})", got[i], m.bytes[i]);
    }
    if mmap && len > 0 {
        // SAFETY: a read-only shared mapping of an open file, unmapped below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len as usize,
                libc::PROT_READ,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED, "{what}: mmap");
        // SAFETY: the mapping is len bytes long.
        let mapped = unsafe { std::slice::from_raw_parts(p as *const u8, len as usize) };
        assert!(mapped == &m.bytes[..], "{what}: the mapping differs");
        // SAFETY: unmapping what was mapped.
        unsafe { libc::munmap(p, len as usize) };
    }
}

/// One random operation through `f` (the file at `path`), applied to the
/// model too. Answers the file to go on with (a reopen replaces it).
fn step(rng: &mut StdRng, f: File, path: &Path, src: &File, m: &mut Model) -> (File, String) {
    let off = rng.random_range(0..SPAN);
    let len = rng.random_range(1..16 * 1024u64);
    let what = match rng.random_range(0..100) {
        0..35 => {
            let b = rng.random::<u8>() | 1;
            f.write_all_at(&vec![b; len as usize], off).unwrap();
            m.grow(off + len);
            m.bytes[off as usize..(off + len) as usize].fill(b);
            format!("write {off}+{len} of {b}")
        }
        35..45 => {
            f.set_len(off).unwrap();
            m.bytes.resize(off as usize, 0);
            format!("truncate to {off}")
        }
        45..55 => {
            fallocate(
                &f,
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                off,
                len,
            );
            let end = ((off + len) as usize).min(m.bytes.len());
            if (off as usize) < end {
                m.bytes[off as usize..end].fill(0);
            }
            format!("punch {off}+{len}")
        }
        55..62 => {
            fallocate(&f, libc::FALLOC_FL_ZERO_RANGE, off, len);
            m.grow(off + len);
            m.bytes[off as usize..(off + len) as usize].fill(0);
            format!("zero range {off}+{len}")
        }
        62..68 => {
            fallocate(&f, 0, off, len);
            m.grow(off + len);
            format!("fallocate {off}+{len}")
        }
        68..76 => {
            let src_len = src.metadata().unwrap().len();
            let from = rng.random_range(0..src_len);
            let mut done = 0u64;
            while done < len {
                // SAFETY: both descriptors are open; offsets live across the call.
                let (mut a, mut b) = ((from + done) as i64, (off + done) as i64);
                let n = unsafe {
                    libc::copy_file_range(
                        src.as_raw_fd(),
                        &mut a,
                        f.as_raw_fd(),
                        &mut b,
                        (len - done) as usize,
                        0,
                    )
                };
                assert!(
                    n >= 0,
                    "copy_file_range: {}",
                    std::io::Error::last_os_error()
                );
                if n == 0 {
                    break;
                }
                done += n as u64;
            }
            let mut want = vec![0u8; done as usize];
            src.read_exact_at(&mut want, from).unwrap();
            m.grow(off + done);
            m.bytes[off as usize..(off + done) as usize].copy_from_slice(&want);
            format!("copy {done} from {from} to {off}")
        }
        76..84 => {
            // chmod and new times on a file whose bytes may be buffered.
            let b = rng.random::<u8>() | 1;
            f.write_all_at(&[b; 700], off).unwrap();
            m.grow(off + 700);
            m.bytes[off as usize..off as usize + 700].fill(b);
            f.set_permissions(std::fs::Permissions::from_mode(0o600 | (off as u32 & 0o44)))
                .unwrap();
            assert_eq!(
                f.metadata().unwrap().len(),
                m.bytes.len() as u64,
                "after chmod"
            );
            let when = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_500_000_000 + off);
            f.set_modified(when).unwrap();
            format!("write 700 at {off}, chmod, mtime")
        }
        84..92 => {
            f.sync_all().unwrap();
            "fsync".into()
        }
        _ => {
            drop(f);
            return (open(path), "close and reopen".into());
        }
    };
    (f, what)
}

fn source(dir: &Path) -> File {
    let p = dir.join("model-src");
    let data: Vec<u8> = (0..SPAN as usize * 2)
        .map(|i| (i * 7 % 251) as u8 | 1)
        .collect();
    std::fs::write(&p, &data).unwrap();
    File::open(&p).unwrap()
}

fn one_mount(mp: &Path, seed: u64, steps: usize) {
    let mut rng = StdRng::seed_from_u64(seed);
    let path = mp.join(format!("model-{seed}"));
    let src = source(mp);
    let mut f = open(&path);
    let mut m = Model { bytes: Vec::new() };
    for i in 0..steps {
        let (g, what) = step(&mut rng, f, &path, &src, &mut m);
        f = g;
        check(
            &f,
            &m,
            &format!("seed {seed} step {i} ({what})"),
            i % 16 == 0,
        );
    }
    drop(f);
    // The last mtime set sticks past the close's length commit.
    let md = std::fs::metadata(&path).unwrap();
    assert_eq!(md.len(), m.bytes.len() as u64);
    assert!(
        md.mtime() >= 1_500_000_000 || steps < 50,
        "mtime {}",
        md.mtime()
    );
}

/// Two mounts take turns on one file: the writer holds a write lock for
/// its step; the other then takes a read lock and must see every byte
/// and the length.
fn two_mounts(a: &Path, b: &Path, seed: u64, steps: usize) {
    let mut rng = StdRng::seed_from_u64(seed);
    let name = format!("shared-{seed}");
    let src = source(a);
    let dirs = [a, b];
    let mut files = [Some(open(&a.join(&name))), Some(open(&b.join(&name)))];
    let mut m = Model { bytes: Vec::new() };
    for i in 0..steps {
        let w = usize::from(rng.random_bool(0.5));
        let f = files[w].take().unwrap();
        set_lock(&f, libc::F_WRLCK);
        let (f, what) = step(&mut rng, f, &dirs[w].join(&name), &src, &mut m);
        set_lock(&f, libc::F_UNLCK);
        files[w] = Some(f);
        let other = files[1 - w].as_ref().unwrap();
        set_lock(other, libc::F_RDLCK);
        let what = format!("seed {seed} step {i} ({what} on mount {w}), read on the other");
        check(other, &m, &what, false);
        set_lock(other, libc::F_UNLCK);
    }
}

fn run(cluster: &str, format_extra: &[&str]) {
    with_two_mounts(cluster, format_extra, |a, b, _, _| {
        for seed in [1, 2] {
            one_mount(a, seed, 250);
        }
        two_mounts(a, b, 3, 120);
    });
}

#[test]
fn random_operations_match_the_model_namespace_on_the_mds() {
    run("model-mds", &["--stripe-unit", "4K", "--stripe-count", "3"]);
}

#[test]
fn random_operations_match_the_model_namespace_on_the_osds() {
    run(
        "model-osd",
        &[
            "--namespace",
            "osd",
            "--stripe-unit",
            "4K",
            "--stripe-count",
            "3",
        ],
    );
}
