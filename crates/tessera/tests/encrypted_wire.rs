//! `mds format --encrypt` means every connection: a whole cluster of real
//! daemons (MDS and three OSD processes, three copies) in both namespace
//! modes is watched on the loopback interface while a file of known,
//! random content is written, read back and copied to a fresh OSD's
//! chains or copies; not one 32-byte window of that content may appear on
//! the wire. A control message sent in the clear over loopback during the
//! capture must be seen, so the capture itself is proved to work.
#![expect(clippy::unwrap_used, reason = "tests: a panic is the failure report")]

mod common;

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::cluster::{Cluster, read_file_in, runtime, write_file_in};
use proto::mds::ROOT_INO;

/// Everything that crosses the loopback interface while it runs
/// (AF_PACKET; needs root).
struct Capture {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<u8>>,
}

impl Capture {
    fn start() -> Option<Capture> {
        // SAFETY: plain socket(2); the result is checked.
        let fd = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW,
                i32::from((libc::ETH_P_ALL as u16).to_be()),
            )
        };
        if fd < 0 {
            return None;
        }
        let tv = libc::timeval {
            tv_sec: 0,
            tv_usec: 100_000,
        };
        // SAFETY: a valid fd and a timeval of the right size.
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as u32,
            );
        }
        // A receive buffer large enough that a busy machine drops nothing
        // (the default, some 200 KiB, once lost the control under load).
        let rcvbuf: libc::c_int = 64 << 20;
        // SAFETY: a valid fd and an int of the right size.
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVBUFFORCE,
                (&rcvbuf as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as u32,
            );
        }
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut all = Vec::new();
            let mut buf = vec![0u8; 1 << 17];
            while !s.load(Ordering::SeqCst) {
                // SAFETY: buf is valid for its length.
                let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
                if n > 0 {
                    all.extend_from_slice(&buf[..n as usize]);
                }
            }
            // SAFETY: fd is ours.
            unsafe { libc::close(fd) };
            all
        });
        Some(Capture { stop, thread })
    }

    fn finish(self) -> Vec<u8> {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.join().unwrap()
    }
}

/// Random bytes from a fixed seed (xorshift): nothing like them is on the
/// wire by chance.
fn secret_content(len: usize) -> Vec<u8> {
    let mut x = 0x5EC2_E7C0_47E4_7001u64;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Offsets in `hay` where some 32-byte window of `needle` appears.
fn leaks(hay: &[u8], needle: &[u8]) -> usize {
    let windows: std::collections::HashSet<&[u8]> = needle.chunks_exact(32).collect();
    hay.windows(32).filter(|w| windows.contains(w)).count()
}

fn run(namespace: &str) {
    let Some(cap) = Capture::start() else {
        eprintln!("SKIPPED: capturing loopback traffic needs root (AF_PACKET)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let data = secret_content(256 << 10);
    let control = secret_content(4 << 10)
        .iter()
        .map(|b| b ^ 0xA5)
        .collect::<Vec<u8>>();
    runtime().block_on(async {
        let mut cl = Cluster::start_formatted(
            dir.path(),
            3,
            3,
            "",
            &["--encrypt", "--namespace", namespace],
        );
        cl.wait_healthy(60).await;
        let c = cl.client().await;
        write_file_in(&c, ROOT_INO, "secret", &data).await.unwrap();
        assert_eq!(read_file_in(&c, ROOT_INO, "secret").await, data);
        // A fourth OSD: copies move to it between daemons (recovery or
        // chain fills), over OSD-to-OSD and MDS-to-OSD connections.
        cl.add_osd();
        cl.wait_healthy(60).await;
        if namespace == "mds" {
            let out = cl.cli(&["scrub", "/", "--deep"]);
            assert!(out.status.success(), "{out:?}");
        }
        assert_eq!(read_file_in(&c, ROOT_INO, "secret").await, data);
        // The control: the same capture sees bytes sent in the clear.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut s = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut r, _) = l.accept().unwrap();
        s.write_all(&control).unwrap();
        let mut got = vec![0u8; control.len()];
        std::io::Read::read_exact(&mut r, &mut got).unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
    });
    let wire = cap.finish();
    assert!(
        leaks(&wire, &control) > 0,
        "the capture did not see the control sent in the clear ({} bytes captured)",
        wire.len()
    );
    assert_eq!(
        leaks(&wire, &data),
        0,
        "file content crossed the wire in the clear ({namespace} namespace)"
    );
}

#[test]
fn with_encryption_required_no_byte_of_a_file_crosses_the_wire_in_the_clear() {
    run("mds");
}

#[test]
fn the_namespace_on_the_osds_is_encrypted_too() {
    run("osd");
}
