//! Redundancy with real daemons: an MDS process and OSD processes (each on
//! its own "host"), clients over real sockets. An OSD killed with SIGKILL
//! during a write storm loses no acknowledged write and catches up when it
//! comes back; OSDs whose disks are gone are marked out and recovery
//! restores every copy; a flipped byte in one copy's store image is found
//! by a deep scrub and repaired, and reads never return it; the MDS killed
//! during recovery finishes it after a restart; operators' mistakes get
//! specific errors.
#![expect(clippy::unwrap_used, reason = "tests: a panic is the failure report")]

use std::path::Path;
use std::time::{Duration, Instant};

use client::Client;
use proto::layout::Layout;
use proto::mds::{Creds, MdsReply, Op, ROOT_INO};

mod common;

use common::cluster::{
    CLUSTER, Cluster, MountGuard, content, copy_image, flip_in_image, read_file_in, root, runtime,
    tail, write_file_in,
};

/// Writes a whole file in the root and closes it (an acknowledged write).
async fn write_file(c: &Client, name: &str, data: &[u8]) -> client::Result<()> {
    write_file_in(c, ROOT_INO, name, data).await
}

async fn read_file(c: &Client, name: &str) -> Vec<u8> {
    read_file_in(c, ROOT_INO, name).await
}

/// Written files: (name, content seed, length).
type Files = Vec<(String, u64, usize)>;

/// Writes a file `PREFIX{seed}` for each seed, `len(seed)` bytes long.
async fn write_many(
    c: &Client,
    prefix: &str,
    seeds: std::ops::Range<u64>,
    len: impl Fn(u64) -> usize,
) -> Files {
    let mut files = Vec::new();
    for k in seeds {
        let (name, n) = (format!("{prefix}{k}"), len(k));
        write_file(c, &name, &content(k, n)).await.unwrap();
        files.push((name, k, n));
    }
    files
}

/// Every file reads back exactly.
async fn check_all(c: &Client, files: &Files) {
    for (name, k, len) in files {
        assert_eq!(read_file(c, name).await, content(*k, *len), "{name}");
    }
}

async fn layout_of(c: &Client, name: &str) -> Layout {
    let e = c.lookup(&root(), ROOT_INO, name).await.unwrap();
    c.layout(&root(), e.attr.ino).await.unwrap().unwrap()
}

#[test]
fn an_osd_killed_mid_storm_loses_no_acknowledged_write_and_catches_up() {
    let dir = tempfile::tempdir().unwrap();
    runtime().block_on(async {
        let mut cl = Cluster::start(dir.path(), 4, 2, "");
        cl.wait_healthy(30).await;
        let c = std::sync::Arc::new(cl.client().await);
        // Four writers; each file is acknowledged when its close returns.
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut tasks = Vec::new();
        for w in 0..4u64 {
            let (c, stop) = (c.clone(), stop.clone());
            tasks.push(tokio::spawn(async move {
                let mut done = Vec::new();
                let mut k = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let id = w * 1_000_000 + k;
                    let len = 4096 + (id as usize * 7919) % (300 << 10);
                    let name = format!("w{id}");
                    write_file(&c, &name, &content(id, len))
                        .await
                        .unwrap_or_else(|e| panic!("write {name} failed with one OSD down: {e}"));
                    done.push((name, id, len));
                    k += 1;
                }
                done
            }));
        }
        tokio::time::sleep(Duration::from_millis(1500)).await;
        cl.kill_osd(2);
        tokio::time::sleep(Duration::from_millis(2500)).await;
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let mut files = Vec::new();
        for t in tasks {
            files.extend(t.await.unwrap());
        }
        assert!(files.len() > 20, "only {} files written", files.len());
        // Every acknowledged file reads back exactly with the OSD down.
        check_all(&c, &files).await;
        let s = cl
            .wait_for("degraded", 20, |s| {
                s.health().level != "HEALTH_OK" && s.redundancy.degraded > 0
            })
            .await;
        assert!(s.osds.iter().any(|o| o.id == 2 && !o.up));
        // Some file written after the kill has OSD 2 recorded stale.
        let mut stale = 0;
        for (name, _, _) in &files {
            let l = layout_of(&c, name).await;
            stale += l.homes[0]
                .stripes
                .iter()
                .filter(|s| s.stale.contains(&2))
                .count();
        }
        assert!(stale > 0, "no copy on the killed OSD was recorded stale");
        // It comes back and catches up: HEALTH_OK, no stale copy left.
        cl.start_osd(2);
        let s = cl.wait_healthy(60).await;
        assert!(s.redundancy.bytes_recovered > 0, "nothing was copied");
        for (name, id, len) in &files {
            let l = layout_of(&c, name).await;
            for st in &l.homes[0].stripes {
                assert!(st.stale.is_empty(), "{name}: {st:?}");
                assert_eq!(st.fresh.len(), 2, "{name}: {st:?}");
            }
            assert_eq!(read_file(&c, name).await, content(*id, *len), "{name}");
        }
        // Every copy agrees, byte for byte.
        let text = cl.cli_ok(&["scrub", "--deep"]);
        assert!(text.contains("0 inconsistent"), "{text}");
    });
}

#[test]
fn two_lost_disks_with_three_copies_are_recovered_on_the_others() {
    let dir = tempfile::tempdir().unwrap();
    runtime().block_on(async {
        let mut cl = Cluster::start(dir.path(), 5, 3, "");
        cl.wait_healthy(30).await;
        let c = cl.client().await;
        let files = write_many(&c, "f", 0..24, |k| (k as usize * 37_337) % (900 << 10) + 1).await;
        // Two disks lost at once: processes killed, images deleted.
        for id in [1, 4] {
            cl.kill_osd(id);
            std::fs::remove_file(cl.osd_dir(id).join("store.img")).unwrap();
        }
        cl.wait_for("two OSDs down", 20, |s| {
            s.osds.iter().filter(|o| !o.up).count() == 2
        })
        .await;
        // Operator errors first: an unknown OSD, nothing changed.
        let out = cl.cli(&["osd", "out", "99"]);
        assert!(!out.status.success());
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("OSD 99 is not in the map"),
            "{out:?}"
        );
        for id in ["1", "4"] {
            let out = cl.cli(&["osd", "out", id]);
            assert!(out.status.success(), "{out:?}");
        }
        let s = cl.wait_healthy(90).await;
        assert!(s.osds.iter().filter(|o| !o.is_in).count() == 2);
        for (name, k, len) in &files {
            let l = layout_of(&c, name).await;
            for st in &l.homes[0].stripes {
                assert_eq!(st.fresh.len(), 3, "{name}: {st:?}");
                assert!(st.stale.is_empty(), "{name}: {st:?}");
                assert!(
                    !st.fresh.contains(&1) && !st.fresh.contains(&4),
                    "{name}: {st:?}"
                );
                // three distinct hosts (one OSD per host here)
                let mut f = st.fresh.clone();
                f.sort_unstable();
                f.dedup();
                assert_eq!(f.len(), 3);
            }
            assert_eq!(read_file(&c, name).await, content(*k, *len), "{name}");
        }
    });
}

#[test]
fn a_flipped_byte_is_never_read_and_deep_scrub_repairs_it() {
    let dir = tempfile::tempdir().unwrap();
    runtime().block_on(async {
        let mut cl = Cluster::start(dir.path(), 3, 2, "");
        cl.wait_healthy(30).await;
        let c = cl.client().await;
        let data = content(77, 256 << 10);
        write_file(&c, "precious", &data).await.unwrap();
        let l = layout_of(&c, "precious").await;
        let victim = l.homes[0].stripes[0].fresh[0];
        // Rot on a quiet disk: the OSD stops cleanly (its store checkpointed),
        // then a byte of its copy flips.
        cl.stop_osd(victim);
        let needle = &data[100_000..100_064];
        assert!(
            flip_in_image(&cl.osd_dir(victim).join("store.img"), needle),
            "the data is not in OSD {victim}'s image"
        );
        cl.start_osd(victim);
        cl.wait_for("OSD back", 30, |s| s.osds.iter().all(|o| o.up))
            .await;
        // A deep scrub finds the bad copy and repairs it from the good one.
        let text = cl.cli_ok(&["scrub", "/precious", "--deep"]);
        assert!(text.contains("1 inconsistent, 1 repaired"), "{text}");
        assert!(text.contains(&format!("OSD {victim}")), "{text}");
        let text = cl.cli_text(&["scrub", "--deep"]);
        assert!(text.contains("0 inconsistent"), "{text}");
        // Corrupt the preferred copy again: reads still return the right
        // bytes (from the other copy), and the bad copy gets repaired.
        // (A new client: the first one may still hold the layout of before the repair.)
        let l = layout_of(&cl.client().await, "precious").await;
        let victim = l.homes[0].stripes[0].fresh[0];
        cl.stop_osd(victim);
        assert!(flip_in_image(&cl.osd_dir(victim).join("store.img"), needle));
        cl.start_osd(victim);
        cl.wait_for("OSD back", 30, |s| s.osds.iter().all(|o| o.up))
            .await;
        let before = cl.status().await.unwrap().redundancy.bytes_recovered;
        // The read reports the bad copy and recovery re-copies it. (Until the
        // restarted OSD has its lease it answers NotReady and the read just
        // uses the other copy: read again until the repair shows.)
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let c2 = cl.client().await;
            assert_eq!(read_file(&c2, "precious").await, data);
            tokio::time::sleep(Duration::from_millis(500)).await;
            let now = cl.status().await.unwrap().redundancy.bytes_recovered;
            if now >= before + data.len() as u64 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "reads never got the bad copy repaired\n{}",
                tail(&cl.dir.join("mds.log"))
            );
        }
        let text = cl.cli_text(&["scrub", "--deep"]);
        assert!(
            text.contains("0 inconsistent"),
            "read did not get the copy repaired: {text}"
        );
        // A copy that cannot be asked (its OSD killed, its lease not run
        // out yet): the scrub says it is incomplete and exits 2, and
        // status warns until a scrub checks everything again.
        cl.kill_osd(victim);
        let out = cl.cli(&["scrub"]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(2), "{text}");
        assert!(
            text.contains("INCOMPLETE: 1 could not be checked"),
            "{text}"
        );
        let status = cl.cli_text(&["status"]);
        assert!(
            status.contains("the last scrub could not check 1"),
            "{status}"
        );
    });
}

#[test]
fn recovery_finishes_after_the_mds_is_killed_during_it() {
    let dir = tempfile::tempdir().unwrap();
    runtime().block_on(async {
        // Slow recovery, so the MDS dies in the middle of it.
        let mut cl = Cluster::start(dir.path(), 4, 2, "recovery_mib_per_sec = 4");
        cl.wait_healthy(30).await;
        let c = cl.client().await;
        let files = write_many(&c, "g", 1000..1012, |_| 1 << 20).await;
        cl.kill_osd(3);
        let out = cl.cli(&["osd", "out", "3"]);
        assert!(out.status.success(), "{out:?}");
        cl.wait_for("recovery under way", 30, |s| {
            s.redundancy.bytes_recovered > 0
        })
        .await;
        cl.kill_mds();
        cl.start_mds();
        let s = cl.wait_healthy(120).await;
        assert_eq!(s.redundancy.degraded, 0);
        let c = cl.client().await;
        for (name, k, len) in &files {
            let l = layout_of(&c, name).await;
            assert_eq!(l.homes[0].stripes[0].fresh.len(), 2, "{name}");
            assert!(!l.homes[0].stripes[0].fresh.contains(&3), "{name}");
            assert_eq!(read_file(&c, name).await, content(*k, *len), "{name}");
        }
    });
}

#[test]
fn bad_replica_settings_and_unsafe_outs_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    runtime().block_on(async {
        let cl = Cluster::start(dir.path(), 2, 1, "");
        cl.wait_healthy(30).await;
        for (args, says) in [
            (
                vec!["layout", "set", "/", "--replicas", "0"],
                "replicas 0: must be 1..=5",
            ),
            (
                vec!["layout", "set", "/", "--replicas", "6"],
                "replicas 6: must be 1..=5",
            ),
            (
                vec![
                    "layout",
                    "set",
                    "/",
                    "--replicas",
                    "2",
                    "--min-replicas",
                    "3",
                ],
                "min replicas 3",
            ),
        ] {
            let out = cl.cli(&args);
            assert!(!out.status.success(), "{args:?}");
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(err.contains(says), "{args:?}: {err}");
        }
        // More replicas than OSDs: accepted, and the status says why it is degraded.
        let out = cl.cli(&["layout", "set", "/", "--replicas", "3"]);
        assert!(out.status.success(), "{out:?}");
        let s = cl
            .wait_for("degraded warning", 20, |s| {
                s.health()
                    .reasons
                    .iter()
                    .any(|r| r.contains("ask for 3 copies but only 2 OSDs are in"))
            })
            .await;
        assert_eq!(s.health().level, "HEALTH_WARN");
        // A file with one copy: its OSD cannot go out without --force.
        let out = cl.cli(&["layout", "set", "/", "--replicas", "1"]);
        assert!(out.status.success(), "{out:?}");
        let c = cl.client().await;
        write_file(&c, "single", b"only copy").await.unwrap();
        let osd = layout_of(&c, "single").await.homes[0].stripes[0].fresh[0];
        let out = cl.cli(&["osd", "out", &osd.to_string()]);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("only fresh copy") && err.contains("--force"),
            "{err}"
        );
        let s = cl.status().await.unwrap();
        assert!(
            s.osds.iter().all(|o| o.is_in),
            "refused, yet something changed"
        );
    });
}

/// Every file reads back what was written to it; a mismatch says the
/// lengths and where the bytes first differ.
fn reads_back(files: &[(std::path::PathBuf, u64, usize)]) {
    for (p, id, len) in files {
        let got = std::fs::read(p).unwrap();
        let want = content(*id, *len);
        let first = got.iter().zip(&want).position(|(a, b)| a != b);
        assert!(
            got == want,
            "{} ({id}): read {} bytes, wrote {}; first difference at {first:?}",
            p.display(),
            got.len(),
            want.len()
        );
    }
}

#[test]
fn a_write_storm_through_the_mount_survives_an_osd_kill() {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 || !Path::new("/dev/fuse").exists() {
        eprintln!("SKIPPED: FUSE mounts need root and /dev/fuse");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime();
    let mut cl = Cluster::start(dir.path(), 4, 2, "");
    rt.block_on(cl.wait_healthy(30));
    let m = MountGuard::new(&cl, &dir.path().join("mnt"));
    let mp = m.mp.clone();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers: Vec<_> = (0..3u64)
        .map(|w| {
            let (mp, stop) = (mp.clone(), stop.clone());
            std::thread::spawn(move || {
                use std::io::Write;
                let mut done = Vec::new();
                let mut k = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let id = 7_000_000 + w * 100_000 + k;
                    let len = 1 + (id as usize * 104_729) % (600 << 10);
                    let p = mp.join(format!("m{id}"));
                    let mut f = std::fs::File::create(&p).unwrap();
                    f.write_all(&content(id, len)).unwrap();
                    f.sync_all().unwrap_or_else(|e| {
                        panic!("fsync of {} with one OSD down: {e}", p.display())
                    });
                    drop(f);
                    done.push((p, id, len));
                    k += 1;
                }
                done
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1500));
    cl.kill_osd(3);
    std::thread::sleep(Duration::from_millis(3000));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let files: Vec<_> = writers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    assert!(files.len() > 10, "only {} files", files.len());
    reads_back(&files);
    let text = cl.cli_text(&["status"]);
    assert!(text.starts_with("HEALTH_WARN"), "{text}");
    assert!(text.contains("OSDs down (3)"), "{text}");
    cl.start_osd(3);
    rt.block_on(cl.wait_healthy(60));
    reads_back(&files);
    drop(m);
}

#[test]
fn an_added_osd_gets_its_share_and_copies_follow_out_and_in() {
    let dir = tempfile::tempdir().unwrap();
    runtime().block_on(async {
        let mut cl = Cluster::start(dir.path(), 3, 2, "");
        cl.wait_healthy(30).await;
        let c = cl.client().await;
        let files = write_many(&c, "b", 500..540, |k| 1 + (k as usize * 7717) % (200 << 10)).await;
        let on = |ls: &[Layout], osd: u32| {
            ls.iter()
                .filter(|l| l.homes[0].stripes[0].fresh.contains(&osd))
                .count()
        };
        let layouts = |c: Client, names: Vec<String>| async move {
            let mut out = Vec::new();
            for n in names {
                out.push(layout_of(&c, &n).await);
            }
            out
        };
        let names: Vec<String> = files.iter().map(|f| f.0.clone()).collect();
        // A fourth OSD joins: backfill gives it its share (about half of
        // the files have a copy there with two copies on four OSDs).
        let four = cl.add_osd();
        cl.wait_for("the new OSD up", 30, |s| {
            s.osds.len() == 4 && s.osds.iter().all(|o| o.up)
        })
        .await;
        // Recovery passes run every 300 ms here: wait until one has moved
        // copies and the cluster is healthy again.
        let deadline = Instant::now() + Duration::from_secs(60);
        let ls = loop {
            let ls = layouts(cl.client().await, names.clone()).await;
            let s = cl.status().await.unwrap();
            if on(&ls, four) > 0 && s.health().level == "HEALTH_OK" && s.redundancy.misplaced == 0 {
                break ls;
            }
            assert!(Instant::now() < deadline, "no backfill: {:?}", s.health());
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let n4 = on(&ls, four);
        assert!(
            (8..=32).contains(&n4),
            "OSD {four} holds copies of {n4} of 40 files"
        );
        for l in &ls {
            assert_eq!(l.homes[0].stripes[0].fresh.len(), 2, "{l:?}");
        }
        check_all(&c, &files).await;
        // Out: its copies move away; in: they come back.
        let settle = |want: usize| {
            let (cl, names) = (&cl, names.clone());
            async move {
                let deadline = Instant::now() + Duration::from_secs(60);
                loop {
                    let ls = layouts(cl.client().await, names.clone()).await;
                    let s = cl.status().await.unwrap();
                    if on(&ls, four) == want && s.health().level == "HEALTH_OK" {
                        return;
                    }
                    assert!(
                        Instant::now() < deadline,
                        "OSD {four} holds {} copies, want {want}: {:?}",
                        on(&ls, four),
                        s.health()
                    );
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        };
        assert!(cl.cli(&["osd", "out", &four.to_string()]).status.success());
        settle(0).await;
        assert!(cl.cli(&["osd", "in", &four.to_string()]).status.success());
        // The same share comes back (placement is a function of the map).
        settle(n4).await;
        let c = cl.client().await;
        check_all(&c, &files).await;
    });
}

#[test]
fn too_few_copies_fail_the_write_with_eio_and_nothing_reads_stale() {
    let dir = tempfile::tempdir().unwrap();
    runtime().block_on(async {
        // Three copies, writes need two (the default R - 1).
        let mut cl = Cluster::start(dir.path(), 3, 3, "");
        cl.wait_healthy(30).await;
        let c = cl.client().await;
        let first = content(900, 300 << 10);
        write_file(&c, "q", &first).await.unwrap();
        // One OSD down: writes go on (two copies), the third is recorded stale.
        cl.kill_osd(1);
        let second = content(901, 300 << 10);
        write_file(&c, "q", &second).await.unwrap();
        let l = layout_of(&c, "q").await;
        assert_eq!(l.homes[0].stripes[0].stale, vec![1], "{l:?}");
        // Two down: below the quorum, the write fails with EIO.
        cl.kill_osd(2);
        let third = content(902, 300 << 10);
        let e = write_file(&c, "q", &third).await.unwrap_err();
        assert!(e.is(proto::mds::Errno::Io), "{e}");
        // That failure recorded the second copy stale: one fresh copy is
        // left, and a write still needs two (the quorum counts the copies
        // placed, not the fresh ones left) — also from another client.
        let l = layout_of(&cl.client().await, "q").await;
        assert_eq!(l.homes[0].stripes[0].fresh, vec![3], "{l:?}");
        for client in [&c, &cl.client().await] {
            let e = write_file(client, "q", &third).await.unwrap_err();
            assert!(e.is(proto::mds::Errno::Io), "acknowledged on one copy: {e}");
        }
        // The OSDs come back: never the stale copy's old bytes; recovery
        // brings every copy to one content and HEALTH_OK.
        cl.start_osd(1);
        cl.start_osd(2);
        cl.wait_healthy(60).await;
        let c2 = cl.client().await;
        let got = read_file(&c2, "q").await;
        assert_ne!(got, first, "a stale copy was read");
        let text = cl.cli_text(&["scrub", "--deep"]);
        assert!(text.contains("0 inconsistent"), "{text}");
    });
}

/// Security (issue 20, finding 3): a chmod whose revocation cannot reach
/// an OSD — down, and the MDS itself restarted before it comes back — still
/// revokes every older capability there before that OSD serves anyone.
#[test]
fn a_revocation_that_misses_a_down_osd_is_applied_before_it_serves_again() {
    let dir = tempfile::tempdir().unwrap();
    runtime().block_on(async {
        let mut cl = Cluster::start(dir.path(), 2, 1, "");
        cl.wait_healthy(30).await;
        let c = cl.client().await;
        write_file(&c, "secret", b"top secret").await.unwrap();
        let ino = c
            .lookup(&root(), ROOT_INO, "secret")
            .await
            .unwrap()
            .attr
            .ino;
        let l = layout_of(&c, "secret").await;
        let (oid, osd) = (l.objsets[0], l.homes[0].stripes[0].fresh[0]);
        // A user may read it now and holds a capability.
        let user = Creds {
            uid: 1000,
            gid: 1000,
            groups: vec![],
        };
        let m = std::sync::Arc::new(net::MdsClient::new(&cl.mds_addr, CLUSTER, cl.admin(), 1));
        let tickets = net::auth::TicketsFromMds::new(m.clone());
        let f = match m
            .call_as(user, Op::Open { ino, write: false })
            .await
            .unwrap()
        {
            MdsReply::Found(f) => f,
            other => panic!("{other:?}"),
        };
        let cap = f.grants[0].cap_for(osd).unwrap().clone();
        let osd_addr = cl.osd_addrs[osd as usize - 1].clone();
        let read = || async {
            let mut cfg = net::ConnConfig::new(CLUSTER, osd, tickets.clone());
            cfg.timeout = Duration::from_secs(5);
            let oc = net::OsdClient::new(&osd_addr, cfg);
            let cmd = proto::Command::Read {
                pid: proto::layout::DATA_PARTITION,
                oid,
                offset: 0,
                len: 64,
            };
            oc.run(Some(&cap), cmd, bytes::Bytes::new()).await
        };
        assert_eq!(&read().await.unwrap().data[..], b"top secret");
        // Its OSD goes down; the owner takes the right away.
        cl.kill_osd(osd);
        let chmod = m
            .call(Op::SetAttr {
                ino,
                set: proto::mds::SetAttr {
                    mode: Some(0o600),
                    ..Default::default()
                },
            })
            .await;
        assert!(chmod.is_ok(), "the chmod is committed: {chmod:?}");
        // The MDS restarts before the OSD comes back: the pending revocation
        // is in its database, and applied before the OSD gets a lease.
        cl.kill_mds();
        cl.start_mds();
        cl.start_osd(osd);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match read().await {
                Err(net::ConnError::Remote(e)) if e.code == proto::ErrorCode::CapRevoked => break,
                Err(net::ConnError::Remote(e)) if e.code == proto::ErrorCode::NotReady => {}
                Err(net::ConnError::Connect { .. }) => {}
                other => panic!("the old capability still works: {other:?}"),
            }
            assert!(Instant::now() < deadline, "the OSD never came back");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
}

#[test]
fn an_osd_back_on_an_empty_or_older_store_serves_none_of_its_old_copies() {
    let dir = tempfile::tempdir().unwrap();
    runtime().block_on(async {
        let mut cl = Cluster::start(dir.path(), 3, 3, "");
        cl.wait_healthy(30).await;
        let c = cl.client().await;
        let mut files = write_many(&c, "f", 0..12, |k| 1000 + k as usize * 90_001).await;
        // A copy of OSD 2's store as it is now (stopped cleanly for it).
        let img2 = cl.osd_dir(2).join("store.img");
        let old2 = dir.path().join("old2.img");
        cl.stop_osd(2);
        copy_image(&img2, &old2);
        cl.start_osd(2);
        cl.wait_healthy(30).await;
        // Files rewritten and added since: the old copy lacks them.
        for k in 0..4u64 {
            c.unlink(&root(), ROOT_INO, &format!("f{k}")).await.unwrap();
        }
        files.retain(|(n, _, _)| !["f0", "f1", "f2", "f3"].contains(&n.as_str()));
        files.extend(write_many(&c, "f", 100..104, |k| 5000 + k as usize).await);
        for k in 0..4u64 {
            let (name, n) = (format!("f{k}"), 7000 + k as usize);
            write_file(&c, &name, &content(k + 500, n)).await.unwrap();
            files.push((name, k + 500, n));
        }
        // Let OSD 2 report its store's newer state.
        tokio::time::sleep(Duration::from_millis(1000)).await;
        // OSD 1's disk is replaced by an empty one; OSD 2 comes back on
        // the older copy of its store.
        cl.kill_osd(1);
        cl.kill_osd(2);
        std::fs::remove_file(cl.osd_dir(1).join("store.img")).unwrap();
        local::provision_osd(
            &cl.osd_dir(1),
            1,
            CLUSTER,
            512 << 20,
            &cl.dir.join("mds").join("keys"),
        )
        .unwrap();
        copy_image(&old2, &img2);
        cl.start_osd(1);
        cl.start_osd(2);
        // Both are seen, their copies set aside, and recovery makes them
        // again (HEALTH_OK only once no copy is stale).
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let log = std::fs::read_to_string(cl.dir.join("mds.log")).unwrap();
            if log.contains("did not run on before")
                && log.contains("older copy of its store")
                && log.matches("set aside every copy").count() == 2
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{}",
                tail(&cl.dir.join("mds.log"))
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        cl.wait_healthy(90).await;
        // With OSD 3 (the only one that kept its store) gone, OSDs 1 and
        // 2 serve every file exactly: recovery made their copies again.
        cl.kill_osd(3);
        cl.wait_for("OSD 3 down", 30, |s| {
            s.osds.iter().any(|o| o.id == 3 && !o.up)
        })
        .await;
        let fresh = cl.client().await;
        check_all(&fresh, &files).await;
    });
}
