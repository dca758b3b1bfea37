//! A measurement probe, not part of the mount: a flat in-memory file system
//! (mkdir, create, lookup, getattr, flush, release, unlink, rmdir) served
//! either over the legacy `/dev/fuse` read/write loop (16 threads, as the
//! mount) or over FUSE over io_uring (Linux 6.14+: one queue per CPU, each
//! served by a thread bound to that CPU). It answers from memory, so what
//! it measures is the kernel transport alone (docs/BENCHMARKS.md, "One
//! shared directory: where the CPUs go").
//!
//! ```sh
//! cargo build --release --example transport_probe
//! sudo mkdir -p /mnt/probe
//! sudo ./target/release/examples/transport_probe /mnt/probe legacy &
//! sudo python3 scripts/shared-dir-storm.py /mnt/probe/s 8000 1,4,16
//! sudo umount /mnt/probe
//! echo Y | sudo tee /sys/module/fuse/parameters/enable_uring   # off by default
//! sudo ./target/release/examples/transport_probe /mnt/probe uring &
//! sudo python3 scripts/shared-dir-storm.py /mnt/probe/s 8000 1,4,16
//! sudo umount /mnt/probe; echo N | sudo tee /sys/module/fuse/parameters/enable_uring
//! ```
use std::collections::HashMap;
use std::fs::OpenOptions;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use io_uring::{IoUring, cqueue, opcode, squeue, types};

const LOOKUP: u32 = 1;
const FORGET: u32 = 2;
const GETATTR: u32 = 3;
const MKDIR: u32 = 9;
const UNLINK: u32 = 10;
const RMDIR: u32 = 11;
const OPEN: u32 = 14;
const STATFS: u32 = 17;
const RELEASE: u32 = 18;
const FLUSH: u32 = 25;
const INIT: u32 = 26;
const OPENDIR: u32 = 27;
const RELEASEDIR: u32 = 29;
const ACCESS: u32 = 34;
const CREATE: u32 = 35;
const INTERRUPT: u32 = 36;
const DESTROY: u32 = 38;
const BATCH_FORGET: u32 = 42;

#[derive(Clone, Copy)]
struct Node {
    mode: u32,
    nlink: u32,
}

/// Inodes by number, and entries by (parent, name).
type Tables = (HashMap<u64, Node>, HashMap<(u64, Vec<u8>), u64>);

struct Fs {
    nodes: Mutex<Tables>,
    next: AtomicU64,
    t0: u64,
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().expect("probe"))
}
fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().expect("probe"))
}

fn attr(out: &mut Vec<u8>, ino: u64, n: Node, t: u64) {
    out.extend_from_slice(&ino.to_le_bytes());
    out.extend_from_slice(&0u64.to_le_bytes()); // size
    out.extend_from_slice(&0u64.to_le_bytes()); // blocks
    for _ in 0..3 {
        out.extend_from_slice(&t.to_le_bytes());
    }
    for _ in 0..3 {
        out.extend_from_slice(&0u32.to_le_bytes());
    }
    out.extend_from_slice(&n.mode.to_le_bytes());
    out.extend_from_slice(&n.nlink.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes()); // uid
    out.extend_from_slice(&0u32.to_le_bytes()); // gid
    out.extend_from_slice(&0u32.to_le_bytes()); // rdev
    out.extend_from_slice(&4096u32.to_le_bytes()); // blksize
    out.extend_from_slice(&0u32.to_le_bytes()); // flags
}

fn entry(out: &mut Vec<u8>, ino: u64, n: Node, t: u64) {
    out.extend_from_slice(&ino.to_le_bytes());
    out.extend_from_slice(&0u64.to_le_bytes()); // generation
    out.extend_from_slice(&1u64.to_le_bytes()); // entry_valid
    out.extend_from_slice(&1u64.to_le_bytes()); // attr_valid
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    attr(out, ino, n, t);
}

fn cname(b: &[u8]) -> Vec<u8> {
    b.split(|c| *c == 0).next().unwrap_or(&[]).to_vec()
}

impl Fs {
    /// Handles one request: returns (error, out args), or None for no reply.
    fn handle(
        &self,
        op: u32,
        nodeid: u64,
        arg0: &[u8],
        rest: &[u8],
        out: &mut Vec<u8>,
    ) -> Option<i32> {
        let t = self.t0;
        match op {
            FORGET | BATCH_FORGET | INTERRUPT => None,
            LOOKUP => {
                let name = cname(rest);
                let g = self.nodes.lock().expect("probe");
                match g.1.get(&(nodeid, name)) {
                    Some(&ino) => {
                        entry(out, ino, g.0[&ino], t);
                        Some(0)
                    }
                    None => Some(-libc::ENOENT),
                }
            }
            GETATTR => {
                let g = self.nodes.lock().expect("probe");
                match g.0.get(&nodeid) {
                    Some(&n) => {
                        out.extend_from_slice(&1u64.to_le_bytes());
                        out.extend_from_slice(&0u32.to_le_bytes());
                        out.extend_from_slice(&0u32.to_le_bytes());
                        attr(out, nodeid, n, t);
                        Some(0)
                    }
                    None => Some(-libc::ENOENT),
                }
            }
            MKDIR | CREATE => {
                let name = cname(rest);
                let mode = u32_at(arg0, 4);
                let mut g = self.nodes.lock().expect("probe");
                if g.1.contains_key(&(nodeid, name.clone())) {
                    return Some(-libc::EEXIST);
                }
                let ino = self.next.fetch_add(1, Ordering::Relaxed);
                let n = if op == MKDIR {
                    Node {
                        mode: libc::S_IFDIR | (mode & 0o7777),
                        nlink: 2,
                    }
                } else {
                    Node {
                        mode: libc::S_IFREG | (mode & 0o7777),
                        nlink: 1,
                    }
                };
                g.0.insert(ino, n);
                g.1.insert((nodeid, name), ino);
                entry(out, ino, n, t);
                if op == CREATE {
                    out.extend_from_slice(&ino.to_le_bytes()); // fh
                    out.extend_from_slice(&0u32.to_le_bytes());
                    out.extend_from_slice(&0i32.to_le_bytes());
                }
                Some(0)
            }
            UNLINK | RMDIR => {
                let name = cname(rest);
                let mut g = self.nodes.lock().expect("probe");
                match g.1.remove(&(nodeid, name)) {
                    Some(ino) => {
                        g.0.remove(&ino);
                        Some(0)
                    }
                    None => Some(-libc::ENOENT),
                }
            }
            OPEN | OPENDIR => {
                out.extend_from_slice(&nodeid.to_le_bytes());
                out.extend_from_slice(&0u32.to_le_bytes());
                out.extend_from_slice(&0i32.to_le_bytes());
                Some(0)
            }
            RELEASE | RELEASEDIR | FLUSH | ACCESS => Some(0),
            STATFS => {
                out.extend_from_slice(&[0u8; 80]);
                Some(0)
            }
            DESTROY => Some(0),
            _ => Some(-libc::ENOSYS),
        }
    }
}

/// Size of each op's first (fixed) argument.
fn arg0_size(op: u32) -> usize {
    match op {
        GETATTR => 16,
        MKDIR => 8,
        OPEN | OPENDIR | ACCESS | FORGET => 8,
        RELEASE | RELEASEDIR | FLUSH => 24,
        CREATE => 16,
        INIT => 64,
        INTERRUPT => 8,
        BATCH_FORGET => 8,
        _ => 0,
    }
}

fn reply_legacy(fd: i32, unique: u64, err: i32, out: &[u8]) {
    let mut buf = Vec::with_capacity(16 + out.len());
    let len = if err == 0 { 16 + out.len() } else { 16 } as u32;
    buf.extend_from_slice(&len.to_le_bytes());
    buf.extend_from_slice(&err.to_le_bytes());
    buf.extend_from_slice(&unique.to_le_bytes());
    if err == 0 {
        buf.extend_from_slice(out);
    }
    let r = unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
    if r < 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ENOENT) {
            eprintln!("reply write: {e}");
        }
    }
}

fn legacy_loop(fs: &Fs, fd: i32) {
    let mut buf = vec![0u8; 1 << 20];
    let mut out = Vec::new();
    loop {
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) | Some(libc::ENOENT) | Some(libc::EAGAIN) => continue,
                _ => return,
            }
        }
        let b = &buf[..n as usize];
        let op = u32_at(b, 4);
        let unique = u64_at(b, 8);
        let nodeid = u64_at(b, 16);
        let body = &b[40..];
        let s = arg0_size(op).min(body.len());
        out.clear();
        if let Some(err) = fs.handle(op, nodeid, &body[..s], &body[s..], &mut out) {
            reply_legacy(fd, unique, err, &out);
        }
    }
}

const HDR: usize = 128 + 128 + 32;
const PAYLOAD: usize = 1 << 20;
const CMD_REGISTER: u32 = 1;
const CMD_COMMIT: u32 = 2;

fn uring_cmd(
    fd: i32,
    cmd_op: u32,
    qid: u16,
    commit_id: u64,
    iov: *const libc::iovec,
    tag: u64,
) -> squeue::Entry128 {
    let mut cmd = [0u8; 80];
    cmd[8..16].copy_from_slice(&commit_id.to_le_bytes());
    cmd[16..18].copy_from_slice(&qid.to_le_bytes());
    let mut e = opcode::UringCmd80::new(types::Fd(fd), cmd_op)
        .cmd(cmd)
        .addr(Some(iov as u64))
        .build()
        .user_data(tag);
    // sqe->len = 2 iovecs (the crate has no setter for it).
    unsafe {
        let p = (&mut e as *mut squeue::Entry128).cast::<u8>();
        std::ptr::write_unaligned(p.add(24).cast::<u32>(), 2);
    }
    e
}

fn uring_loop(fs: &Fs, fd: i32, qid: u16, depth: usize) {
    let mut cpus: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    unsafe {
        libc::CPU_SET(qid as usize, &mut cpus);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &cpus);
    }
    let mut ring: IoUring<squeue::Entry128, cqueue::Entry> = IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .build(depth as u32 * 2)
        .expect("ring");
    let mut hdrs: Vec<Box<[u8; HDR]>> = (0..depth).map(|_| Box::new([0u8; HDR])).collect();
    let mut pays: Vec<Vec<u8>> = (0..depth).map(|_| vec![0u8; PAYLOAD]).collect();
    let iovs: Vec<Box<[libc::iovec; 2]>> = (0..depth)
        .map(|i| {
            Box::new([
                libc::iovec {
                    iov_base: hdrs[i].as_mut_ptr().cast(),
                    iov_len: HDR,
                },
                libc::iovec {
                    iov_base: pays[i].as_mut_ptr().cast(),
                    iov_len: PAYLOAD,
                },
            ])
        })
        .collect();
    for (i, iov) in iovs.iter().enumerate() {
        let e = uring_cmd(fd, CMD_REGISTER, qid, 0, iov.as_ptr(), i as u64);
        unsafe { ring.submission().push(&e).expect("sq") };
    }
    ring.submit().expect("submit");
    let mut out = Vec::new();
    loop {
        if let Err(e) = ring.submit_and_wait(1) {
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            eprintln!("q{qid}: {e}");
            return;
        }
        let done: Vec<(u64, i32)> = ring
            .completion()
            .map(|c| (c.user_data(), c.result()))
            .collect();
        for (i, res) in done {
            if res < 0 {
                eprintln!("q{qid}: cqe {res}");
                return;
            }
            let i = i as usize;
            let h = &mut hdrs[i];
            let op = u32_at(&h[..], 4);
            let unique = u64_at(&h[..], 8);
            let nodeid = u64_at(&h[..], 16);
            let commit_id = u64_at(&h[..], 256 + 8);
            let psz = u32_at(&h[..], 256 + 16) as usize;
            let s = arg0_size(op);
            out.clear();
            let err = {
                let arg0 = &h[128..128 + s];
                let rest = &pays[i][..psz];
                fs.handle(op, nodeid, arg0, rest, &mut out).unwrap_or(0)
            };
            let payload = if err == 0 { out.len() } else { 0 };
            let len = (16 + payload) as u32;
            h[0..4].copy_from_slice(&len.to_le_bytes());
            h[4..8].copy_from_slice(&err.to_le_bytes());
            h[8..16].copy_from_slice(&unique.to_le_bytes());
            pays[i][..payload].copy_from_slice(&out[..payload]);
            h[256 + 16..256 + 20].copy_from_slice(&(payload as u32).to_le_bytes());
            let e = uring_cmd(fd, CMD_COMMIT, qid, commit_id, iovs[i].as_ptr(), i as u64);
            unsafe { ring.submission().push(&e).expect("sq") };
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mnt = &args[1];
    let mode = args[2].as_str();
    let threads: usize = args.get(3).map(|s| s.parse().expect("probe")).unwrap_or(16);
    let dev = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .expect("/dev/fuse");
    let fd = dev.as_raw_fd();
    let opts =
        format!("fd={fd},rootmode=40000,user_id=0,group_id=0,default_permissions,allow_other");
    let src = std::ffi::CString::new("fx").expect("probe");
    let tgt = std::ffi::CString::new(mnt.as_str()).expect("probe");
    let ty = std::ffi::CString::new("fuse").expect("probe");
    let o = std::ffi::CString::new(opts).expect("probe");
    let r = unsafe {
        libc::mount(
            src.as_ptr(),
            tgt.as_ptr(),
            ty.as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            o.as_ptr().cast(),
        )
    };
    assert_eq!(r, 0, "mount: {}", std::io::Error::last_os_error());
    let t0 = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("probe")
        .as_secs();
    let fs: &'static Fs = Box::leak(Box::new(Fs {
        nodes: Mutex::new((
            HashMap::from([(
                1,
                Node {
                    mode: libc::S_IFDIR | 0o755,
                    nlink: 2,
                },
            )]),
            HashMap::new(),
        )),
        next: AtomicU64::new(2),
        t0,
    }));
    // INIT over read(2).
    let mut buf = vec![0u8; 1 << 20];
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    assert!(n > 0);
    let b = &buf[..n as usize];
    assert_eq!(u32_at(b, 4), INIT);
    let unique = u64_at(b, 8);
    let (major, minor, flags, flags2) =
        (u32_at(b, 40), u32_at(b, 44), u32_at(b, 52), u32_at(b, 56));
    eprintln!("INIT {major}.{minor} flags={flags:#x} flags2={flags2:#x}");
    let want_uring = mode == "uring";
    let ext: u32 = 1 << 30;
    let max_pages_f: u32 = 1 << 22;
    let pdirops: u32 = 1 << 18;
    let uring_bit: u32 = 1 << (41 - 32);
    if want_uring && flags2 & uring_bit == 0 {
        eprintln!("kernel does not offer FUSE_OVER_IO_URING (enable_uring?)");
    }
    let mut out = Vec::new();
    out.extend_from_slice(&7u32.to_le_bytes());
    out.extend_from_slice(&minor.to_le_bytes());
    out.extend_from_slice(&(128u32 << 10).to_le_bytes()); // max_readahead
    out.extend_from_slice(&((ext | max_pages_f | pdirops) & flags).to_le_bytes());
    out.extend_from_slice(&64u16.to_le_bytes()); // max_background
    out.extend_from_slice(&48u16.to_le_bytes()); // congestion_threshold
    out.extend_from_slice(&(128u32 << 10).to_le_bytes()); // max_write
    out.extend_from_slice(&1u32.to_le_bytes()); // time_gran
    out.extend_from_slice(&32u16.to_le_bytes()); // max_pages
    out.extend_from_slice(&0u16.to_le_bytes()); // map_alignment
    out.extend_from_slice(&(if want_uring { uring_bit & flags2 } else { 0 }).to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes()); // max_stack_depth
    out.extend_from_slice(&[0u8; 24]);
    reply_legacy(fd, unique, 0, &out);
    let mut hs = Vec::new();
    let legacy_threads = if want_uring { 1 } else { threads };
    for _ in 0..legacy_threads {
        hs.push(std::thread::spawn(move || legacy_loop(fs, fd)));
    }
    if want_uring {
        let ncpu = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        for q in 0..ncpu {
            hs.push(std::thread::spawn(move || uring_loop(fs, fd, q as u16, 8)));
        }
    }
    let _ = std::io::stderr().flush();
    eprintln!("serving {mnt} ({mode})");
    for h in hs {
        let _ = h.join();
    }
    drop(dev);
}
