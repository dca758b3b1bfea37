//! The `tessera osd` daemon as a real process: clients write while it is
//! killed with SIGKILL; after a restart every acknowledged write reads back
//! exact and fsck is clean; SIGTERM stops it cleanly with exit 0; `/metrics`
//! answers.

#![expect(clippy::unwrap_used, reason = "tests: a panic is the failure report")]

use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use net::keys::KeyFile;
use net::{ConnConfig, OsdClient};
use proto::rights;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_tessera")
}

/// Two distinct free ports (both bound at once, so they cannot coincide).
fn free_ports() -> (u16, u16) {
    let a = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let b = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    (
        a.local_addr().unwrap().port(),
        b.local_addr().unwrap().port(),
    )
}

fn spawn_osd(img: &Path, key: &Path, port: u16, mport: u16) -> Child {
    Command::new(bin())
        .args([
            "osd",
            "--store",
            img.to_str().unwrap(),
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--key-file",
            key.to_str().unwrap(),
            "--metrics",
            &format!("127.0.0.1:{mport}"),
        ])
        .stdout(Stdio::piped())
        .stderr(
            std::fs::File::create(img.with_extension("log"))
                .map(Stdio::from)
                .unwrap_or(Stdio::null()),
        )
        .spawn()
        .unwrap()
}

async fn connect(port: u16, log: &Path, ring: &proto::KeyRing) -> OsdClient {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut cfg = ConnConfig::new("ci", 3, net::auth::MintWithOsdKeys::one(ring.clone()));
        cfg.connections = 4;
        cfg.timeout = Duration::from_secs(10);
        match OsdClient::connect(&format!("127.0.0.1:{port}"), cfg).await {
            Ok(c) => return c,
            Err(e) if Instant::now() > deadline => panic!(
                "OSD never came up: {e}; its log: {}",
                std::fs::read_to_string(log).unwrap_or_default()
            ),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

fn object(id: u64) -> Vec<u8> {
    let n = (id.wrapping_mul(2_654_435_761) % 600_000) as usize + 1;
    (0..n)
        .map(|i| (i as u64 ^ id.wrapping_mul(31)) as u8)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_loses_no_acknowledged_write_and_sigterm_is_clean() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("osd.img");
    let key = dir.path().join("osd.key");
    assert!(
        Command::new(bin())
            .args(["mkfs", img.to_str().unwrap(), "--size", "512M"])
            .status()
            .unwrap()
            .success()
    );
    assert!(
        Command::new(bin())
            .args([
                "keygen",
                "--out",
                key.to_str().unwrap(),
                "--cluster",
                "ci",
                "--osd-id",
                "3"
            ])
            .status()
            .unwrap()
            .success()
    );
    let kf = KeyFile::load(&key).unwrap();
    let ring = kf.ring().unwrap();
    let (kv, secret) = ring.newest().unwrap();
    let cap = proto::CapSpec {
        partition: store::DEFAULT_PARTITION,
        oid_lo: 0,
        oid_hi: u64::MAX,
        rights: rights::ALL,
        expiry_ms: proto::clock::now_ms() + 600_000,
        version: u64::MAX,
        holder: proto::auth::MDS_PRINCIPAL,
    }
    .sign(secret, kv, 3);
    let (port, mport) = free_ports();
    let mut child = spawn_osd(&img, &key, port, mport);
    let c = Arc::new(connect(port, &img.with_extension("log"), &ring).await);

    // /metrics answers while serving.
    let body = tokio::task::spawn_blocking(move || {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", mport)).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut b = String::new();
        s.read_to_string(&mut b).unwrap();
        b
    })
    .await
    .unwrap();
    assert!(
        body.starts_with("HTTP/1.1 200") && body.contains("tessera_osd_store_free_bytes"),
        "{body}"
    );

    // Writers run until the OSD is killed under them.
    let acked: Arc<Mutex<HashMap<u64, usize>>> = Arc::default();
    let mut writers = Vec::new();
    for w in 0..8u64 {
        let (c, cap, acked) = (c.clone(), cap.clone(), acked.clone());
        writers.push(tokio::spawn(async move {
            for i in 0.. {
                let id = 0x10000 + w + 8 * i;
                let data = object(id);
                match c
                    .create_and_write(
                        Some(&cap),
                        store::DEFAULT_PARTITION,
                        id,
                        Bytes::from(data.clone()),
                    )
                    .await
                {
                    Ok(()) => {
                        acked.lock().unwrap().insert(id, data.len());
                    }
                    Err(_) => break,
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    for w in writers {
        w.await.unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    assert!(
        acked.len() > 20,
        "only {} writes acknowledged before the kill",
        acked.len()
    );

    // Restart: every acknowledged write is there, exact.
    let child = spawn_osd(&img, &key, port, mport);
    let c = connect(port, &img.with_extension("log"), &ring).await;
    for (id, len) in &acked {
        let got = c
            .read(Some(&cap), store::DEFAULT_PARTITION, *id, 0, 1 << 20)
            .await
            .unwrap();
        assert_eq!(got.len(), *len, "object {id:#x}");
        assert!(got[..] == object(*id)[..], "object {id:#x} differs");
    }
    drop(c);
    // SIGTERM: drain, flush, exit 0.
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "exit status {:?}; log: {}",
        out.status,
        std::fs::read_to_string(img.with_extension("log")).unwrap_or_default()
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("stopped cleanly"));
    let fsck = Command::new(bin())
        .args(["fsck", img.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        fsck.status.success(),
        "{}",
        String::from_utf8_lossy(&fsck.stdout)
    );
}
