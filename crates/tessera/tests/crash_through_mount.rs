//! What a crash of the MDS may cost a program working through the mount:
//! nothing it saw complete. Separate daemon processes; four threads create
//! files (each with a little data, fsync'd) through a real `tessera mount`
//! while the MDS is killed with SIGKILL and restarted; every create the
//! program saw succeed is there afterwards with its data, on this mount
//! and on a fresh one. Namespace operations are durable before they return
//! (see docs/CLIENT.md, "Durability"). Skipped (with a message) where FUSE
//! cannot be mounted.
#![expect(clippy::unwrap_used, reason = "tests: a panic is the failure report")]

mod common;

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;

#[test]
fn acknowledged_creates_survive_an_mds_killed_mid_storm() {
    if !can_mount() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cluster = "crash";
    let (mut mds, osds, _, mds_addr) = daemons(d, cluster, &[]);
    let mp = d.join("mnt");
    let mut m = mount_fg(&mds_addr, cluster, &mp, &[]);
    let stop = Arc::new(AtomicBool::new(false));
    let done: Arc<Mutex<Vec<PathBuf>>> = Arc::default();
    let failed = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let workers: Vec<_> = (0..4)
        .map(|k| {
            let (stop, done, failed) = (stop.clone(), done.clone(), failed.clone());
            let dir = mp.join(format!("w{k}"));
            std::fs::create_dir(&dir).unwrap();
            std::thread::spawn(move || {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let p = dir.join(format!("f{i}"));
                    i += 1;
                    let r = std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .open(&p)
                        .and_then(|mut f| {
                            f.write_all(p.to_str().unwrap().as_bytes())?;
                            f.sync_all()
                        });
                    match r {
                        Ok(()) => done.lock().unwrap().push(p),
                        Err(_) => {
                            failed.fetch_add(1, Ordering::Relaxed);
                            std::thread::sleep(Duration::from_millis(20));
                        }
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1500));
    let before = done.lock().unwrap().len();
    mds.kill().unwrap();
    mds.wait().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let mds = serve_mds(&d.join("mds"), &mds_addr);
    wait_osds_up(&mds_addr, cluster, 3);
    std::thread::sleep(Duration::from_millis(1500));
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    let done = done.lock().unwrap().clone();
    assert!(
        before > 20,
        "the storm ran before the kill ({before} files)"
    );
    assert!(
        done.len() > before,
        "creates went on after the restart ({} then {})",
        before,
        done.len()
    );
    let check = |root: &std::path::Path| {
        for p in &done {
            let q = root.join(p.strip_prefix(&mp).unwrap());
            let got = std::fs::read(&q)
                .unwrap_or_else(|e| panic!("{} was acknowledged, now: {e}", q.display()));
            assert_eq!(got, p.to_str().unwrap().as_bytes(), "{}", q.display());
        }
    };
    check(&mp);
    // A fresh mount (no cache) sees the same.
    let mp2 = d.join("mnt2");
    let mut m2 = mount_fg(&mds_addr, cluster, &mp2, &[]);
    check(&mp2);
    println!(
        "{} creates acknowledged ({} before the kill), {} failed while the MDS was down",
        done.len(),
        before,
        failed.load(Ordering::Relaxed)
    );
    sigint_wait(&mut m2);
    sigint_wait(&mut m);
    for mut c in osds.into_iter().chain([mds]) {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
        assert!(c.wait().unwrap().success());
    }
}
