//! What a crash of the MDS may cost a program working through the mount:
//! nothing it saw complete. Separate daemon processes; four threads create
//! files (each with a little data, fsync'd) through a real `tessera mount`
//! while the MDS is killed with SIGKILL and restarted; every create the
//! program saw succeed is there afterwards with its data, on this mount
//! and on a fresh one. A second test holds the MDS's log flushes back so
//! the kill finds namespace changes answered early and not yet durable:
//! the mount replays them to the restarted MDS, and what a killed mount
//! had made durable with fsyncdir survives it (docs/CLIENT.md,
//! "Durability"). A third kills the MDS (flushes held back 50 ms) in an
//! unsynced storm of creates and renames by four threads: everything
//! acknowledged is there after the replay (with replay turned off by hand
//! it fails: "acknowledged and is gone"). Skipped (with a message) where
//! FUSE cannot be mounted.
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
    let (mds, before, done) =
        kill_mid_storm(&mut mds, d, &mds_addr, cluster, (&stop, workers), &done);
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
    stop_daemons(osds, mds);
}

/// Lets the storm of `workers` run 1.5 s, kills the MDS of `d` with
/// SIGKILL, restarts it, lets the storm go on 1.5 s, stops it: the new
/// MDS, how many changes were acknowledged before the kill, and all
/// acknowledged ones.
fn kill_mid_storm(
    mds: &mut std::process::Child,
    d: &std::path::Path,
    addr: &str,
    cluster: &str,
    (stop, workers): (&AtomicBool, Vec<std::thread::JoinHandle<()>>),
    done: &Mutex<Vec<PathBuf>>,
) -> (std::process::Child, usize, Vec<PathBuf>) {
    std::thread::sleep(Duration::from_millis(1500));
    let before = done.lock().unwrap().len();
    mds.kill().unwrap();
    mds.wait().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let mds = serve_mds(&d.join("mds"), addr);
    wait_osds_up(addr, cluster, 3);
    std::thread::sleep(Duration::from_millis(1500));
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    let all = done.lock().unwrap().clone();
    (mds, before, all)
}

/// Restarts the MDS of `d` (cleanly) with `(key, value)` settings changed
/// in its mds.toml.
fn restart_with(
    mds: &mut std::process::Child,
    d: &std::path::Path,
    addr: &str,
    set: &[(&str, &str)],
) -> std::process::Child {
    // SAFETY: signalling our own child.
    unsafe { libc::kill(mds.id() as i32, libc::SIGTERM) };
    mds.wait().unwrap();
    let cfg = d.join("mds").join("mds.toml");
    let text = std::fs::read_to_string(&cfg).unwrap();
    let text = text
        .lines()
        .map(|l| {
            set.iter()
                .find(|(k, _)| l.starts_with(&format!("{k} =")))
                .map_or(l.to_string(), |(k, v)| format!("{k} = {v}"))
        })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(&cfg, text).unwrap();
    serve_mds(&d.join("mds"), addr)
}

fn names(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

/// Files being written: (name, open file, content, mtime to set).
type Writing = Vec<(String, std::fs::File, Vec<u8>, u64)>;

/// Makes read-only (0444) files in `a` and writes the first half of each,
/// fsync'd (so the create and that part are durable); they stay open.
fn start_writing(a: &std::path::Path) -> Writing {
    use std::os::unix::fs::OpenOptionsExt;
    (0..20u64)
        .map(|i| {
            let name = format!("d{i:02}");
            let data = format!("data {i}\n").repeat(100 + i as usize).into_bytes();
            let mut f = std::fs::OpenOptions::new()
                .create_new(true)
                .write(true)
                .mode(0o444)
                .open(a.join(&name))
                .unwrap();
            f.write_all(&data[..data.len() / 2]).unwrap();
            f.sync_all().unwrap();
            (name, f, data, 1_000_000 + i)
        })
        .collect()
}

/// Writes the rest of each file and closes it (the close that commits
/// the length is answered early), then gives it mode 0555 (a chmod that
/// takes no right away) and an explicit mtime; answers (name, content,
/// mtime).
fn finish_writing(a: &std::path::Path, files: Writing) -> Vec<(String, Vec<u8>, u64)> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = Vec::new();
    for (name, mut f, data, mtime) in files {
        f.write_all(&data[data.len() / 2..]).unwrap();
        drop(f);
        std::fs::set_permissions(a.join(&name), std::fs::Permissions::from_mode(0o555)).unwrap();
        std::fs::File::open(a.join(&name))
            .unwrap()
            .set_modified(std::time::UNIX_EPOCH + Duration::from_secs(mtime))
            .unwrap();
        out.push((name, data, mtime));
    }
    out
}

/// Each of `written` is in `a` with its content, mode 0555 and mtime.
fn check_written(a: &std::path::Path, written: &[(String, Vec<u8>, u64)]) {
    use std::os::unix::fs::MetadataExt;
    for (name, data, mtime) in written {
        let m = std::fs::metadata(a.join(name)).unwrap();
        assert_eq!(m.len(), data.len() as u64, "{name}: length after replay");
        assert_eq!(m.mode() & 0o777, 0o555, "{name}: mode after replay");
        assert_eq!(m.mtime() as u64, *mtime, "{name}: mtime after replay");
        assert_eq!(&std::fs::read(a.join(name)).unwrap(), data, "{name}");
    }
}

#[test]
fn early_answered_changes_are_replayed_to_a_restarted_mds() {
    if !can_mount() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cluster = "replay";
    let (mut mds, osds, _, mds_addr) = daemons(d, cluster, &[]);
    // Every log flush held back 400 ms: a kill right after the changes
    // finds them answered and not durable.
    let mut mds = restart_with(
        &mut mds,
        d,
        &mds_addr,
        &[("wal_flush_delay_ms", "400"), ("replay_window_ms", "4000")],
    );
    wait_osds_up(&mds_addr, cluster, 3);
    let mp = d.join("mnt");
    let stats = d.join("stats.json");
    let mut m = mount_fg(
        &mds_addr,
        cluster,
        &mp,
        &["--stats-file", stats.to_str().unwrap()],
    );
    // A second mount changes the same directory, interleaved: the MDS
    // must redo both mounts' changes in their one order.
    let mpb = d.join("mntb");
    let stats_b = d.join("stats-b.json");
    let mut mb = mount_fg(
        &mds_addr,
        cluster,
        &mpb,
        &["--stats-file", stats_b.to_str().unwrap()],
    );
    let a = mp.join("a");
    std::fs::create_dir(&a).unwrap();
    std::fs::create_dir(a.join("sub")).unwrap();
    let writing = start_writing(&a);
    for i in 0..200 {
        std::fs::File::create(a.join(format!("f{i:03}"))).unwrap();
        std::fs::File::create(mpb.join("a").join(format!("g{i:03}"))).unwrap();
    }
    for i in 0..50 {
        std::fs::rename(
            a.join(format!("f{i:03}")),
            a.join("sub").join(format!("m{i:03}")),
        )
        .unwrap();
    }
    for i in 50..100 {
        std::fs::remove_file(a.join(format!("f{i:03}"))).unwrap();
    }
    std::os::unix::fs::symlink("f150", a.join("link")).unwrap();
    // Closes, chmods and utimens are answered early too: files made
    // read-only and written (their owner's close is redone without the
    // hold a restarted MDS does not know yet), given more rights (a chmod
    // that takes none away) and explicit mtimes.
    let written = finish_writing(&a, writing);
    let want_a = names(&a);
    let want_sub = names(&a.join("sub"));
    assert_eq!(want_a.len(), 100 + 200 + 2 + written.len(), "{want_a:?}");
    // Kill at once: the last changes are not in the log yet.
    mds.kill().unwrap();
    mds.wait().unwrap();
    let restarted = std::time::Instant::now();
    let mut mds = serve_mds(&d.join("mds"), &mds_addr);
    // Past the mount's attribute window, so listing asks the MDS (and the
    // mount's new connection replays first).
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        names(&a),
        want_a,
        "after the replay, through the same mount"
    );
    // Both mounts came back by themselves: the MDS did not wait out its
    // 4 s window for the one that made no request.
    let served = restarted.elapsed();
    assert!(
        served < Duration::from_millis(3500),
        "served after {served:?}"
    );
    assert_eq!(names(&a.join("sub")), want_sub);
    assert_eq!(
        std::fs::read_link(a.join("link")).unwrap().to_str(),
        Some("f150")
    );
    let mp2 = d.join("mnt2");
    let mut m2 = mount_fg(&mds_addr, cluster, &mp2, &[]);
    assert_eq!(names(&mp2.join("a")), want_a, "on a fresh mount");
    check_written(&mp2.join("a"), &written);
    assert_eq!(names(&mp2.join("a").join("sub")), want_sub);
    assert_eq!(names(&mpb.join("a")), want_a, "through the second mount");
    sigint_wait(&mut m2);
    sigint_wait(&mut mb);
    let st_b: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats_b).unwrap()).unwrap();
    println!("second mount's counters: {st_b}");
    assert!(st_b["replayed"].as_u64().unwrap() > 0);
    assert_eq!(st_b["replay_failed"].as_u64(), Some(0));
    sigint_wait(&mut m);
    let st: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    println!("first mount's counters: {st}");
    let replayed = st["replayed"].as_u64().unwrap();
    assert!(replayed > 0, "the mount replayed the changes the MDS lost");
    assert_eq!(st["replay_failed"].as_u64(), Some(0));

    // A mount killed with the MDS loses what it had not made durable, and
    // keeps what fsync of the directory made durable.
    let mut m = mount_fg(&mds_addr, cluster, &mp, &[]);
    let b = mp.join("b");
    std::fs::create_dir(&b).unwrap();
    for i in 0..50 {
        std::fs::File::create(b.join(format!("x{i:02}"))).unwrap();
    }
    std::fs::File::open(&b).unwrap().sync_all().unwrap();
    for i in 0..50 {
        std::fs::File::create(b.join(format!("y{i:02}"))).unwrap();
    }
    m.kill().unwrap();
    m.wait().unwrap();
    let _ = std::process::Command::new("umount")
        .arg("-l")
        .arg(&mp)
        .status();
    mds.kill().unwrap();
    mds.wait().unwrap();
    let t = std::time::Instant::now();
    let mds = serve_mds(&d.join("mds"), &mds_addr);
    while std::net::TcpStream::connect(&mds_addr).is_err() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "the MDS listens again"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The operator sees the wait (status is not held by it); the OSDs
    // may not have reported to the new MDS yet, so the level varies.
    let o = bin()
        .args(["status", "--mds", &mds_addr, "--cluster", cluster])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.starts_with("HEALTH_") && text.contains("waiting for 1 client sessions to replay"),
        "{text}"
    );
    let mp3 = d.join("mnt3");
    let mut m3 = mount_fg(&mds_addr, cluster, &mp3, &[]);
    let got = names(&mp3.join("b"));
    let waited = t.elapsed();
    for i in 0..50 {
        assert!(
            got.contains(&format!("x{i:02}")),
            "fsync'd x{i:02} lost: {got:?}"
        );
    }
    assert_eq!(
        names(&mp3.join("a")),
        want_a,
        "replayed changes are durable"
    );
    check_written(&mp3.join("a"), &written);
    assert!(
        waited >= Duration::from_millis(3000),
        "the MDS waited for the dead mount's replay ({waited:?})"
    );
    println!(
        "after the second crash: {} of 50 unsynced creates of the killed mount survived; \
         served after {waited:?}",
        got.iter().filter(|n| n.starts_with('y')).count()
    );
    sigint_wait(&mut m3);
    stop_daemons(osds, mds);
}

/// The default mount (early answers, no fsync): four threads create empty
/// files and rename every other one, the MDS (its log flushes held back
/// 50 ms) is killed with SIGKILL mid-storm and restarted; every change a
/// thread saw succeed is there after the replay, on that mount and on a
/// fresh one.
#[test]
fn an_unsynced_storm_survives_an_mds_killed_mid_storm() {
    if !can_mount() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cluster = "storm";
    let (mut mds, osds, _, mds_addr) = daemons(d, cluster, &[]);
    // Each log flush held back 50 ms, so the kill always finds changes
    // answered and not durable (without replay, this test fails).
    let mut mds = restart_with(&mut mds, d, &mds_addr, &[("wal_flush_delay_ms", "50")]);
    wait_osds_up(&mds_addr, cluster, 3);
    let mp = d.join("mnt");
    let mut m = mount_fg(&mds_addr, cluster, &mp, &[]);
    let stop = Arc::new(AtomicBool::new(false));
    let done: Arc<Mutex<Vec<PathBuf>>> = Arc::default();
    let workers: Vec<_> = (0..4)
        .map(|k| {
            let (stop, done) = (stop.clone(), done.clone());
            let dir = mp.join(format!("w{k}"));
            std::fs::create_dir(&dir).unwrap();
            std::thread::spawn(move || {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let p = dir.join(format!("e{i}"));
                    i += 1;
                    let made = std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .open(&p)
                        .map(drop);
                    let p = match made {
                        Ok(()) if i.is_multiple_of(2) => {
                            let q = dir.join(format!("r{i}"));
                            match std::fs::rename(&p, &q) {
                                Ok(()) => Some(q),
                                // The rename's fate is unknown; the name
                                // it started from may or may not remain.
                                Err(_) => None,
                            }
                        }
                        Ok(()) => Some(p),
                        Err(_) => {
                            std::thread::sleep(Duration::from_millis(20));
                            None
                        }
                    };
                    if let Some(p) = p {
                        done.lock().unwrap().push(p);
                    }
                }
            })
        })
        .collect();
    let (mds, before, done) =
        kill_mid_storm(&mut mds, d, &mds_addr, cluster, (&stop, workers), &done);
    assert!(before > 50, "the storm ran before the kill ({before})");
    assert!(done.len() > before, "and after the restart");
    // Past the attribute window: every check asks the MDS.
    std::thread::sleep(Duration::from_millis(1200));
    let check = |root: &std::path::Path| {
        for p in &done {
            let q = root.join(p.strip_prefix(&mp).unwrap());
            assert!(
                std::fs::symlink_metadata(&q).is_ok(),
                "{} was acknowledged and is gone",
                q.display()
            );
        }
    };
    check(&mp);
    let mp2 = d.join("mnt2");
    let mut m2 = mount_fg(&mds_addr, cluster, &mp2, &[]);
    check(&mp2);
    println!(
        "{} changes acknowledged ({before} before the kill), all there",
        done.len()
    );
    sigint_wait(&mut m2);
    sigint_wait(&mut m);
    stop_daemons(osds, mds);
}
