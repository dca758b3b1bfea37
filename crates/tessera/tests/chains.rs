//! The namespace on the OSDs with two copies, with real daemons: an MDS
//! process (the chains' authority) and four OSD processes on their own
//! "hosts". 64 clients racing exclusive creates of one name (a
//! compare-and-swap on the directory's slot) while the head of the
//! directory's chain is killed with SIGKILL: exactly one winner per name.
//! A write storm through the mount while an OSD is killed: every
//! acknowledged file reads back, the status says degraded, the chains are
//! filled again once the OSD returns (HEALTH_OK), and then every file
//! still reads back with another member killed, so the fill copied it.
//! Two disks lost at once with three copies of five OSDs, and the MDS
//! killed while the chains refill: every chain is whole again on the
//! others and every file reads back.
#![expect(clippy::unwrap_used, reason = "tests: a panic is the failure report")]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::cluster::{
    Cluster, MountGuard, content, copy_image, flip_in_image, read_file_in, root, runtime,
    write_file_in,
};

async fn write_file(c: &client::Client, dir: u64, name: &str, data: &[u8]) {
    write_file_in(c, dir, name, data).await.unwrap();
}

async fn read_file(c: &client::Client, dir: u64, name: &str) -> Vec<u8> {
    read_file_in(c, dir, name).await
}
use proto::mds::{MdsReply, NamespaceGrant, Op, ROOT_INO};

/// Formats with the namespace on the OSDs and two copies, starts four
/// OSDs, and waits for every chain to be full.
fn start(dir: &std::path::Path) -> Cluster {
    Cluster::start_formatted(dir, 4, 2, "", &["--namespace", "osd"])
}

/// Three OSDs keeping `replicas` copies, with a lease long enough that an
/// OSD restarted at once never counts as down; waits for HEALTH_OK.
async fn start_long_lease(dir: &std::path::Path, replicas: u8) -> Cluster {
    let cl = Cluster::start_formatted(
        dir,
        3,
        replicas,
        "down_after_ms = 30000",
        &["--namespace", "osd"],
    );
    cl.wait_healthy(60).await;
    cl
}

/// The namespace grant: the root's group and the chains.
async fn grant(cl: &Cluster) -> NamespaceGrant {
    let m = net::MdsClient::new(&cl.mds_addr, common::cluster::CLUSTER, cl.admin(), 1);
    match m.call(Op::NamespaceGrant).await.unwrap() {
        MdsReply::Namespace(g) => *g,
        other => panic!("namespace grant answered {other:?}"),
    }
}

/// OSD `id`'s disk replaced (it is stopped): a new, empty store.
fn new_empty_store(cl: &Cluster, id: u32) {
    std::fs::remove_file(cl.osd_dir(id).join("store.img")).unwrap();
    local::provision_osd(
        &cl.osd_dir(id),
        id,
        common::cluster::CLUSTER,
        512 << 20,
        &cl.dir.join("mds").join("keys"),
    )
    .unwrap();
}

/// The head of the root directory's chain (once the root is made).
async fn root_head(cl: &Cluster) -> (u32, Vec<u32>) {
    let g = grant(cl).await;
    let group = g.root_osd.expect("the root is made");
    let c = g
        .chains
        .expect("chains are kept")
        .chain(group)
        .unwrap()
        .clone();
    (c.head().unwrap(), c.members)
}

#[test]
fn sixty_four_clients_race_exclusive_creates_while_the_head_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    runtime().block_on(async {
        let mut cl = start(dir.path());
        cl.wait_healthy(60).await;
        let first = cl.client().await;
        let (head, members) = root_head(&cl).await;
        assert_eq!(
            members.len(),
            2,
            "two copies of the root's group: {members:?}"
        );
        let mut clients = vec![Arc::new(first)];
        while clients.len() < 64 {
            clients.push(Arc::new(cl.client().await));
        }
        const ROUNDS: u32 = 8;
        for round in 0..ROUNDS {
            let name = format!("race-{round}");
            let tasks: Vec<_> = clients
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let (c, name) = (c.clone(), name.clone());
                    tokio::spawn(async move {
                        match c.create(&root(), ROOT_INO, &name, 0o644, true).await {
                            Ok((e, fh)) => {
                                c.release(fh).await.unwrap();
                                Some((i, e.attr.ino))
                            }
                            Err(e) if e.raw() == libc::EEXIST => None,
                            Err(e) => panic!("client {i}, {name}: {e}"),
                        }
                    })
                })
                .collect();
            if round == 3 {
                // The head of the root's chain dies mid-race.
                tokio::time::sleep(Duration::from_millis(5)).await;
                cl.kill_osd(head);
            }
            let mut won = Vec::new();
            for t in tasks {
                if let Some(w) = t.await.unwrap() {
                    won.push(w);
                }
            }
            assert_eq!(won.len(), 1, "{name}: winners {won:?}");
            // Everyone sees the winner's file.
            let e = clients[17].lookup(&root(), ROOT_INO, &name).await.unwrap();
            assert_eq!(e.attr.ino, won[0].1, "{name}");
        }
        let (new_head, _) = root_head(&cl).await;
        assert_ne!(new_head, head, "the chain has a new head");
        let listed = clients[5].readdir(&root(), ROOT_INO).await.unwrap();
        for round in 0..ROUNDS {
            let n = format!("race-{round}");
            assert_eq!(listed.iter().filter(|d| d.name == n).count(), 1, "{n}");
        }
    });
}

#[test]
fn a_write_storm_through_the_mount_survives_an_osd_kill_and_the_chains_refill() {
    if !common::can_mount() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime();
    let mut cl = start(dir.path());
    rt.block_on(cl.wait_healthy(60));
    let m = MountGuard::new(&cl, &dir.path().join("mnt"));
    let mp = m.mp.clone();
    let (victim, members) = rt.block_on(root_head(&cl));
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..3u64)
        .map(|w| {
            let (mp, stop) = (mp.clone(), stop.clone());
            std::thread::spawn(move || {
                use std::io::Write;
                let d = mp.join(format!("w{w}"));
                std::fs::create_dir(&d).unwrap();
                let mut done = Vec::new();
                let mut k = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let id = w * 100_000 + k;
                    let len = 1 + (id as usize * 104_729) % (200 << 10);
                    let tmp = d.join(format!("t{id}"));
                    let mut f = std::fs::File::create(&tmp).unwrap();
                    f.write_all(&content(id, len)).unwrap();
                    f.sync_all().unwrap_or_else(|e| {
                        panic!("fsync of {} with an OSD down: {e}", tmp.display())
                    });
                    drop(f);
                    let p = d.join(format!("f{id}"));
                    std::fs::rename(&tmp, &p).unwrap();
                    done.push((p, id, len));
                    k += 1;
                }
                done
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1500));
    cl.kill_osd(victim);
    std::thread::sleep(Duration::from_millis(4000));
    stop.store(true, Ordering::Relaxed);
    let files: Vec<_> = writers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    assert!(files.len() > 10, "only {} files", files.len());
    let check = |files: &[(std::path::PathBuf, u64, usize)]| {
        for (p, id, len) in files {
            assert_eq!(
                std::fs::read(p).unwrap(),
                content(*id, *len),
                "{}",
                p.display()
            );
        }
    };
    check(&files);
    let text = cl.cli_text(&["status"]);
    assert!(text.starts_with("HEALTH_WARN"), "{text}");
    assert!(text.contains(&format!("OSDs down ({victim})")), "{text}");
    // The OSD returns; every chain is full again (the returning OSD is
    // filled like any new member).
    cl.start_osd(victim);
    rt.block_on(cl.wait_healthy(90));
    check(&files);
    // The other member of the root's group dies: the fill made the copies
    // it leaves.
    let other = members.into_iter().find(|m| *m != victim).unwrap();
    cl.kill_osd(other);
    check(&files);
    let listed = std::fs::read_dir(mp.join("w0")).unwrap().count();
    assert!(listed > 0);
    drop(m);
}

#[test]
fn two_lost_disks_with_three_copies_are_refilled_on_the_others_across_an_mds_restart() {
    let dir = tempfile::tempdir().unwrap();
    runtime().block_on(async {
        let mut cl = Cluster::start_formatted(dir.path(), 5, 3, "", &["--namespace", "osd"]);
        cl.wait_healthy(60).await;
        let c = cl.client().await;
        // A tree: directories on every group, files of every size class
        // (empty, small, several stripes, with a hole).
        let mut files = Vec::new();
        for d in 0..6u64 {
            let e = c
                .mkdir(&root(), ROOT_INO, &format!("d{d}"), 0o755)
                .await
                .unwrap();
            for k in 0..8u64 {
                let id = d * 100 + k;
                let len = match k % 4 {
                    0 => 0,
                    1 => 100 + id as usize,
                    2 => (1 << 20) + 4096 * id as usize,
                    _ => 70_000,
                };
                let name = format!("f{k}");
                write_file(&c, e.attr.ino, &name, &content(id, len)).await;
                files.push((e.attr.ino, name, id, len));
            }
        }
        // Two disks are lost at once: stopped, their stores deleted,
        // marked out by the operator.
        for id in [2, 4] {
            cl.stop_osd(id);
            std::fs::remove_file(cl.dir.join(format!("osd-{id}")).join("store.img")).unwrap();
        }
        for id in ["2", "4"] {
            cl.cli_ok(&["osd", "out", id]);
        }
        // The MDS dies while the chains are being refilled, and restarts.
        tokio::time::sleep(Duration::from_millis(700)).await;
        cl.kill_mds();
        cl.start_mds();
        let s = cl
            .wait_for("HEALTH_OK without the lost OSDs", 120, |s| {
                s.health().level == "HEALTH_OK" && s.redundancy.groups > 0
            })
            .await;
        assert_eq!(s.redundancy.groups_degraded, 0);
        let g = grant(&cl).await;
        for (group, chain) in &g.chains.unwrap().chains {
            assert_eq!(chain.members.len(), 3, "group {group}: {chain:?}");
            assert!(
                !chain.holds(2) && !chain.holds(4),
                "group {group} still names a lost OSD: {chain:?}"
            );
        }
        // Every file reads back exactly, through a fresh client too.
        let fresh = cl.client().await;
        for (d, name, id, len) in &files {
            assert_eq!(read_file(&c, *d, name).await, content(*id, *len), "{name}");
            assert_eq!(
                read_file(&fresh, *d, name).await,
                content(*id, *len),
                "{name}"
            );
        }
        let listed = fresh.readdir(&root(), ROOT_INO).await.unwrap();
        assert_eq!(listed.iter().filter(|e| e.name.starts_with('d')).count(), 6);
    });
}

#[test]
fn a_flipped_byte_in_a_chain_copy_is_repaired_by_deep_scrub_and_by_a_read() {
    let dir = tempfile::tempdir().unwrap();
    runtime().block_on(async {
        // A long lease: an OSD stopped for a moment keeps its place in
        // its chains (so its bad copy is not simply refilled).
        let mut cl = start_long_lease(dir.path(), 3).await;
        let c = cl.client().await;
        let data = content(77, 256 << 10);
        write_file(&c, ROOT_INO, "precious", &data).await;
        let ino = c
            .lookup(&root(), ROOT_INO, "precious")
            .await
            .unwrap()
            .attr
            .ino;
        let g = grant(&cl).await;
        let group = proto::chain::placement_map(&g.map).place(proto::layout::data_oid(ino), 1)[0];
        let chain = g.chains.unwrap().chain(group).unwrap().clone();
        let (head, tail) = (chain.members[0], *chain.members.last().unwrap());
        let needle = &data[100_000..100_064];
        let rot = |cl: &mut Cluster, osd: u32| {
            cl.stop_osd(osd);
            assert!(
                flip_in_image(&cl.dir.join(format!("osd-{osd}")).join("store.img"), needle),
                "the data is not in OSD {osd}'s image"
            );
            cl.start_osd(osd);
            // Back once it listens again (with a long lease it never
            // counted as down).
            let addr = cl.osd_addrs[osd as usize - 1].clone();
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            while std::net::TcpStream::connect(&addr).is_err() {
                assert!(
                    std::time::Instant::now() < deadline,
                    "OSD {osd} did not come back"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        };
        // Rot in the tail's copy: a deep scrub finds it and repairs it.
        rot(&mut cl, tail);
        let text = cl.cli_ok(&["scrub", "--deep"]);
        assert!(text.contains("1 inconsistent, 1 repaired"), "{text}");
        assert!(text.contains(&format!("OSD {tail}")), "{text}");
        let text = cl.cli_ok(&["scrub", "--deep"]);
        assert!(text.contains("0 inconsistent"), "{text}");
        // Rot in the head's copy: a read returns the right bytes (the head
        // repairs its copy from the next member first), and afterwards a
        // deep scrub finds nothing left to repair.
        rot(&mut cl, head);
        let fresh = cl.client().await;
        assert_eq!(read_file(&fresh, ROOT_INO, "precious").await, data);
        let text = cl.cli_ok(&["scrub", "--deep"]);
        assert!(text.contains("0 inconsistent"), "{text}");
        assert!(
            std::fs::read_to_string(cl.dir.join(format!("osd-{head}")).join("osd.log"))
                .unwrap()
                .contains("repaired a bad copy"),
            "the head did not log its repair"
        );
        // Rot in the head's copy and the next member's: a deep scrub (no
        // read first) makes the head's copy again from the tail's — the
        // first member whose copy reads — and then the middle's from the
        // head (before, the scrub of the group stopped at the head's bad
        // copy and nothing was repaired).
        let middle = chain.members[1];
        rot(&mut cl, head);
        rot(&mut cl, middle);
        let text = cl.cli_ok(&["scrub", "--deep"]);
        assert!(text.contains("2 inconsistent, 2 repaired"), "{text}");
        assert!(
            text.contains(&format!("repaired from OSD {tail}")),
            "{text}"
        );
        let text = cl.cli_ok(&["scrub", "--deep"]);
        assert!(text.contains("0 inconsistent"), "{text}");
        assert_eq!(
            read_file(&cl.client().await, ROOT_INO, "precious").await,
            data
        );
        // Rot in the head's and the next member's copies, then a read with
        // no scrub first: the head makes its copy again from the first
        // member whose copy reads — the tail — and the read returns the
        // right bytes (before, it tried the next member only: EIO); a
        // deep scrub then repairs the middle's copy from the head.
        rot(&mut cl, head);
        rot(&mut cl, middle);
        assert_eq!(
            read_file(&cl.client().await, ROOT_INO, "precious").await,
            data
        );
        let text = cl.cli_ok(&["scrub", "--deep"]);
        assert!(text.contains("1 inconsistent, 1 repaired"), "{text}");
        // A head that cannot be reached (stopped, its lease not lapsed):
        // the scrub says it is incomplete and exits 2, and status warns
        // until a scrub checks everything again.
        cl.stop_osd(head);
        let out = cl.cli(&["scrub"]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(2), "{text}");
        assert!(text.contains("INCOMPLETE"), "{text}");
        let status = cl.cli_text(&["status"]);
        assert!(
            status.contains("the last scrub could not check"),
            "{status}"
        );
    });
}

/// A new cluster's OSDs start on stores just formatted: nothing to pass
/// down, so none leaves its chains to be filled again (every OSD of a new
/// cluster used to, and a namespace on the OSDs could not be made
/// meanwhile).
#[test]
fn a_new_clusters_osds_keep_their_chain_places_at_their_first_start() {
    let dir = tempfile::tempdir().unwrap();
    runtime().block_on(async {
        let cl = start_long_lease(dir.path(), 3).await;
        let t = grant(&cl).await.chains.unwrap();
        assert!(!t.chains.is_empty());
        for (g, c) in &t.chains {
            assert!(c.left.is_empty(), "group {g}: an OSD left at start: {t:?}");
        }
        drop(cl);
    });
}

#[test]
fn a_head_killed_and_restarted_within_its_lease_leaves_its_chains_and_is_refilled() {
    let dir = tempfile::tempdir().unwrap();
    runtime().block_on(async {
        // A long lease: the head is back before the MDS could see it down.
        let mut cl = start_long_lease(dir.path(), 2).await;
        let c = cl.client().await;
        let mut files = Vec::new();
        for k in 0..20u64 {
            let name = format!("before{k}");
            write_file(&c, ROOT_INO, &name, &content(k, 5000 + k as usize)).await;
            files.push((name, k, 5000 + k as usize));
        }
        let (head, _) = root_head(&cl).await;
        cl.kill_osd(head);
        cl.start_osd(head);
        // It may hold changes it never passed down: it leaves every chain
        // another member holds, so it heads none of them now.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let g = grant(&cl).await;
            let t = g.chains.unwrap();
            if t.chains.iter().all(|(_, ch)| ch.head() != Some(head)) {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "OSD {head} still heads a chain: {t:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // The MDS's log is written by a background writer: the line may
        // come a moment after the chains changed.
        let logged = std::time::Instant::now() + Duration::from_secs(10);
        while !std::fs::read_to_string(cl.dir.join("mds.log"))
            .unwrap()
            .contains("left its chains")
        {
            assert!(
                std::time::Instant::now() < logged,
                "no restart seen by the MDS"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // Writes and reads go on, and it is filled again: HEALTH_OK with
        // every chain whole.
        for k in 20..30u64 {
            let name = format!("after{k}");
            write_file(&c, ROOT_INO, &name, &content(k, 7000)).await;
            files.push((name, k, 7000));
        }
        cl.wait_for("every chain whole", 60, |s| {
            s.health().level == "HEALTH_OK" && s.redundancy.groups_degraded == 0
        })
        .await;
        let fresh = cl.client().await;
        for (name, k, len) in &files {
            assert_eq!(
                read_file(&fresh, ROOT_INO, name).await,
                content(*k, *len),
                "{name}"
            );
        }
    });
}

#[test]
fn a_returning_osd_is_sent_only_what_changed_while_it_was_away() {
    let dir = tempfile::tempdir().unwrap();
    runtime().block_on(async {
        // Three copies on three OSDs, so the returning one holds every
        // group. Every OSD's clock is four minutes behind the MDS's (the
        // MDS takes reports up to five minutes off): catch-up must not
        // depend on clocks. It once compared the stores' times with when
        // the MDS last heard the OSD less `chain_catch_up_margin_ms`, and
        // here sent none of the changes (that setting is now unused).
        let mut cl = Cluster::start_formatted(
            dir.path(),
            3,
            3,
            "chain_catch_up_margin_ms = 1000",
            &["--namespace", "osd"],
        );
        cl.wait_healthy(60).await;
        for id in 1..=3 {
            cl.stop_osd(id);
            cl.set_osd_clock(id, "-4m");
            cl.start_osd(id);
        }
        cl.wait_healthy(60).await;
        let c = cl.client().await;
        let len = |k: u64| 3000 + k as usize * 100;
        for k in 0..20u64 {
            write_file(&c, ROOT_INO, &format!("old{k}"), &content(k, len(k))).await;
        }
        let away = 3;
        cl.kill_osd(away);
        cl.wait_for("the OSD dropped from its chains", 30, |s| {
            s.redundancy.groups_degraded > 0
        })
        .await;
        // While it is away: five files rewritten, ten made.
        for k in 0..5u64 {
            write_file(&c, ROOT_INO, &format!("old{k}"), &content(k + 1000, len(k))).await;
        }
        for k in 0..10u64 {
            write_file(&c, ROOT_INO, &format!("new{k}"), &content(k + 2000, 4000)).await;
        }
        cl.start_osd(away);
        cl.wait_healthy(60).await;
        let log = std::fs::read_to_string(cl.dir.join("osd-1").join("osd.log")).unwrap()
            + &std::fs::read_to_string(cl.dir.join("osd-2").join("osd.log")).unwrap();
        let unchanged: u64 = log
            .lines()
            .filter(|l| l.contains("caught up a returning member"))
            .filter_map(|l| {
                l.split("unchanged=")
                    .nth(1)?
                    .split_whitespace()
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .sum();
        assert!(
            unchanged > 0,
            "nothing was left out of the catch-up:\n{log}"
        );
        // The returning OSD alone: every file reads back from it, so what
        // the catch-up left out was right there already.
        cl.kill_osd(1);
        cl.kill_osd(2);
        let fresh = cl.client().await;
        for k in 0..20u64 {
            let want = if k < 5 {
                content(k + 1000, len(k))
            } else {
                content(k, len(k))
            };
            assert!(
                read_file(&fresh, ROOT_INO, &format!("old{k}")).await == want,
                "old{k} does not read back as last written"
            );
        }
        for k in 0..10u64 {
            assert!(
                read_file(&fresh, ROOT_INO, &format!("new{k}")).await == content(k + 2000, 4000),
                "new{k} does not read back as written"
            );
        }
    });
}

#[test]
fn chain_operations_refuse_bad_callers_and_bad_input_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    runtime().block_on(async {
        for r in ["0", "6"] {
            let out = std::process::Command::new(common::BIN)
                .args(["mds", "format", "--cluster", "x", "--namespace", "osd"])
                .arg("--data")
                .arg(dir.path().join(format!("bad{r}")))
                .args(["--replicas", r])
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                !out.status.success() && err.contains("must be 1..=5"),
                "{err}"
            );
            assert!(!dir.path().join(format!("bad{r}")).join("mds.redb").exists());
        }
        let cl = start(&dir.path().join("c"));
        cl.wait_healthy(60).await;
        let before = grant(&cl).await.chains.unwrap();
        // A client principal (even the admin) may ask none of the OSDs' ops.
        let admin = net::MdsClient::new(&cl.mds_addr, common::cluster::CLUSTER, cl.admin(), 1);
        for op in [
            Op::Chains,
            Op::ChainRestarted {
                store: proto::mds::StoreMark::default(),
            },
            Op::ChainDrop {
                group: 1,
                epoch: 1,
                osd: 2,
                refused: true,
            },
            Op::ChainFilled {
                group: 1,
                epoch: 1,
                osd: 2,
            },
        ] {
            let name = op.name();
            match admin.call(op).await {
                Err(e) => assert_eq!(e.errno(), libc::EACCES, "{name}: {e}"),
                Ok(r) => panic!("{name} by a client answered {r:?}"),
            }
        }
        // An OSD may not drop or count members of chains where it is not
        // the member before them: nothing changes.
        let kf = net::keys::KeyFile::load(&cl.dir.join("osd-1").join("key.toml")).unwrap();
        let (v, k) = kf.newest().unwrap();
        let osd1 = net::MdsClient::new(
            &cl.mds_addr,
            common::cluster::CLUSTER,
            net::auth::Identity::principal("osd.1", v, k),
            1,
        );
        for (g, c) in &before.chains {
            for m in c.order().filter(|m| c.successor(1) != Some(*m)) {
                let drop = Op::ChainDrop {
                    group: *g,
                    epoch: c.epoch,
                    osd: m,
                    refused: true,
                };
                assert!(matches!(osd1.call(drop).await, Ok(MdsReply::Chains(_))));
                let fill = Op::ChainFilled {
                    group: *g,
                    epoch: c.epoch,
                    osd: m,
                };
                assert!(matches!(osd1.call(fill).await, Ok(MdsReply::Chains(_))));
            }
        }
        let stale = Op::ChainDrop {
            group: 1,
            epoch: 0,
            osd: 2,
            refused: true,
        };
        assert!(matches!(osd1.call(stale).await, Ok(MdsReply::Chains(_))));
        let unknown = Op::ChainDrop {
            group: 999,
            epoch: 1,
            osd: 2,
            refused: true,
        };
        match osd1.call(unknown).await {
            Err(e) => assert_eq!(e.errno(), libc::ENOENT, "{e}"),
            Ok(r) => panic!("a drop in an unknown group answered {r:?}"),
        }
        assert_eq!(
            grant(&cl).await.chains.unwrap(),
            before,
            "the chains changed"
        );
        // Another principal's key cannot speak for an OSD.
        let forged = net::MdsClient::new(
            &cl.mds_addr,
            common::cluster::CLUSTER,
            net::auth::Identity::principal("osd.1", v, [0x55; 32]),
            1,
        );
        assert!(forged.call(Op::Chains).await.is_err());
    });
}

#[test]
fn an_added_osd_gets_its_share_of_the_existing_groups() {
    let dir = tempfile::tempdir().unwrap();
    runtime().block_on(async {
        let mut cl = Cluster::start_formatted(dir.path(), 3, 2, "", &["--namespace", "osd"]);
        cl.wait_healthy(60).await;
        let c = cl.client().await;
        for k in 0..30u64 {
            write_file(
                &c,
                ROOT_INO,
                &format!("f{k}"),
                &content(k, 2000 + 300 * k as usize),
            )
            .await;
        }
        let before = grant(&cl).await.chains.unwrap();
        let added = cl.add_osd();
        // Backfill: some existing group moves a copy to the new OSD; the
        // chains settle with two copies each.
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let (group, gone) = loop {
            let t = grant(&cl).await.chains.unwrap();
            let settled = t
                .chains
                .iter()
                .all(|(_, ch)| ch.joining.is_empty() && ch.members.len() == 2);
            let moved = t.chains.iter().find_map(|(g, ch)| {
                let old = before.chain(*g)?;
                let gone = old.members.iter().copied().find(|m| !ch.holds(*m))?;
                ch.members.contains(&added).then_some((*g, gone))
            });
            if let (true, Some(m)) = (settled, moved) {
                break m;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no group moved to OSD {added}: {t:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        cl.wait_healthy(60).await;
        // That group's head dies: the new OSD alone serves its objects.
        let head = grant(&cl)
            .await
            .chains
            .unwrap()
            .chain(group)
            .unwrap()
            .head()
            .unwrap();
        assert_ne!(head, added);
        let _ = gone;
        cl.kill_osd(head);
        let fresh = cl.client().await;
        for k in 0..30u64 {
            assert_eq!(
                read_file(&fresh, ROOT_INO, &format!("f{k}")).await,
                content(k, 2000 + 300 * k as usize),
                "f{k}"
            );
        }
    });
}

/// Full disks (three OSDs of 128 MiB, three copies): writes fail with
/// ENOSPC, not EIO, before a store is out of room; no member is dropped
/// (before, a full member was dropped and the group refilled onto full
/// disks, degraded for good); deletes still work and make room for new
/// writes; every file written is intact.
/// Writes `name` in the root once the cluster has room again (ENOSPC
/// until then), within `secs` seconds of trying; `after` names what made
/// room, for the failure.
async fn write_when_room(c: &client::Client, name: &str, data: &[u8], secs: u64, after: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    loop {
        let _ = c.unlink(&root(), ROOT_INO, name).await;
        match write_file_in(c, ROOT_INO, name, data).await {
            Ok(()) => return,
            Err(e) if std::time::Instant::now() < deadline => {
                assert_eq!(e.raw(), libc::ENOSPC, "{e}");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => panic!("no room after {after}: {e}"),
        }
    }
}

/// Two copies on four OSDs: stores fill unevenly, so a head with room
/// meets a full member. The write answers ENOSPC in seconds (it once
/// waited for room on the member past any client's patience), and the
/// file it was for can still be removed.
#[test]
fn a_full_member_behind_a_head_with_room_answers_enospc_promptly() {
    let dir = tempfile::tempdir().unwrap();
    runtime().block_on(async {
        let cl = Cluster::start_sized(dir.path(), (4, 128 << 20), 2, "", &["--namespace", "osd"]);
        cl.wait_healthy(60).await;
        let c = cl.client().await;
        let mut names = Vec::new();
        let mut refused = 0;
        for k in 0..80u64 {
            let name = format!("f{k}");
            let started = std::time::Instant::now();
            let r = write_file_in(&c, ROOT_INO, &name, &content(k, 4 << 20)).await;
            let took = started.elapsed();
            assert!(
                took < Duration::from_secs(12),
                "{name}: answered after {took:?}: {r:?}"
            );
            names.push(name);
            match r {
                Ok(()) => {}
                Err(e) => {
                    assert_eq!(e.raw(), libc::ENOSPC, "{e}");
                    refused += 1;
                    if refused == 6 {
                        break;
                    }
                }
            }
        }
        assert!(
            refused > 0,
            "four 128 MiB stores at two copies took 80 files of 4 MiB"
        );
        for name in &names {
            match c.unlink(&root(), ROOT_INO, name).await {
                Ok(()) => {}
                Err(e) => assert_eq!(e.raw(), libc::ENOENT, "removing {name}: {e}"),
            }
        }
        c.sync_all().await.unwrap();
        // Room again: a new file is taken and reads back.
        let data = content(7777, 4 << 20);
        write_when_room(&c, "after", &data, 30, "every file was removed").await;
        assert_eq!(read_file(&cl.client().await, ROOT_INO, "after").await, data);
    });
}

#[test]
fn full_disks_refuse_writes_with_enospc_and_deletes_make_room() {
    let dir = tempfile::tempdir().unwrap();
    runtime().block_on(async {
        let cl = Cluster::start_sized(dir.path(), (3, 128 << 20), 3, "", &["--namespace", "osd"]);
        cl.wait_healthy(60).await;
        let c = cl.client().await;
        let mut kept = Vec::new();
        let refused = loop {
            let name = format!("f{}", kept.len());
            let data = content(kept.len() as u64, 4 << 20);
            match write_file_in(&c, ROOT_INO, &name, &data).await {
                Ok(()) => kept.push((name, data)),
                Err(e) => break e,
            }
            assert!(
                kept.len() < 40,
                "128 MiB stores took {} files of 4 MiB",
                kept.len()
            );
        };
        assert_eq!(refused.raw(), libc::ENOSPC, "{refused}");
        let st = cl.status().await.unwrap();
        assert_eq!(
            st.redundancy.groups_degraded, 0,
            "a full member was dropped"
        );
        // Health counts space from the OSDs' reports: a heartbeat later.
        let st = cl
            .wait_for("a full OSD named in health", 10, |s| {
                s.health().reasons.iter().any(|r| r.contains("full"))
            })
            .await;
        assert!(st.health().level != "HEALTH_OK", "{:?}", st.health());
        for (name, _) in kept.drain(..3) {
            c.unlink(&root(), ROOT_INO, &name).await.unwrap();
        }
        let data = content(999, 4 << 20);
        // Room comes back once the removals are durable on the stores.
        write_when_room(&c, "after", &data, 20, "three deletes").await;
        kept.push(("after".into(), data));
        let fresh = cl.client().await;
        for (name, data) in &kept {
            assert_eq!(&read_file(&fresh, ROOT_INO, name).await, data, "{name}");
        }
        assert_eq!(cl.status().await.unwrap().redundancy.groups_degraded, 0);
    });
}

#[test]
fn every_osd_crashed_at_once_with_a_store_lost_and_one_rewound_loses_no_file() {
    let dir = tempfile::tempdir().unwrap();
    runtime().block_on(async {
        let mut cl = Cluster::start_formatted(dir.path(), 3, 3, "", &["--namespace", "osd"]);
        cl.wait_healthy(60).await;
        let c = cl.client().await;
        let mut files = std::collections::BTreeMap::new();
        for k in 0..20u64 {
            let (name, len) = (format!("f{k}"), 3000 + 997 * k as usize);
            write_file(&c, ROOT_INO, &name, &content(k, len)).await;
            files.insert(name, (k, len));
        }
        // A copy of OSD 3's store as it is now (stopped cleanly for it).
        let img3 = cl.osd_dir(3).join("store.img");
        let old3 = dir.path().join("old3.img");
        cl.stop_osd(3);
        copy_image(&img3, &old3);
        cl.start_osd(3);
        cl.wait_healthy(60).await;
        // Then more files, and some rewritten: the old copy lacks them.
        for k in (20..40u64).chain(0..5) {
            let (name, len) = (format!("f{k}"), 5000 + 13 * k as usize);
            let id = k + 1000;
            if k < 5 {
                c.unlink(&root(), ROOT_INO, &name).await.unwrap();
            }
            write_file(&c, ROOT_INO, &name, &content(id, len)).await;
            files.insert(name, (id, len));
        }
        // Let OSD 3 report the store's newer state to the MDS.
        tokio::time::sleep(Duration::from_millis(1000)).await;
        // Every OSD crashes at once; every lease lapses (one by one).
        for id in 1..=3 {
            cl.kill_osd(id);
        }
        tokio::time::sleep(Duration::from_millis(4000)).await;
        // OSD 1's disk is replaced by an empty one; OSD 3 comes back on
        // the older copy of its store. Only OSD 2 holds every file.
        new_empty_store(&cl, 1);
        copy_image(&old3, &img3);
        for id in 1..=3 {
            cl.start_osd(id);
        }
        let s = cl
            .wait_for("HEALTH_OK with every chain whole", 120, |s| {
                s.health().level == "HEALTH_OK" && s.redundancy.groups == 3
            })
            .await;
        assert_eq!(s.redundancy.groups_degraded, 0);
        let log = std::fs::read_to_string(cl.dir.join("mds.log")).unwrap();
        assert!(
            log.contains("did not run on before"),
            "OSD 1's new store unseen"
        );
        assert!(
            log.contains("older copy of its store"),
            "OSD 3's old store unseen"
        );
        // Every acknowledged file reads back exactly, through a fresh
        // client, and once more with OSD 2 (the only survivor) gone: the
        // others were filled from it.
        let fresh = cl.client().await;
        let names: Vec<String> = fresh
            .readdir(&root(), ROOT_INO)
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .filter(|n| n.starts_with('f'))
            .collect();
        assert_eq!(names.len(), files.len(), "{names:?}");
        for (name, (id, len)) in &files {
            assert_eq!(
                read_file(&fresh, ROOT_INO, name).await,
                content(*id, *len),
                "{name}"
            );
        }
        cl.kill_osd(2);
        cl.wait_for("OSD 2 down", 30, |s| {
            s.osds.iter().any(|o| o.id == 2 && !o.up)
        })
        .await;
        let again = cl.client().await;
        for (name, (id, len)) in &files {
            assert_eq!(
                read_file(&again, ROOT_INO, name).await,
                content(*id, *len),
                "{name}"
            );
        }
    });
}

/// `tessera osd out` of a live head drains it (before, the head stayed
/// for good): its groups get a member elsewhere, then its lease is not
/// renewed, the next member takes over as head once it has certainly
/// stopped answering, and the OSD ends up up, out and in no chain. Writes
/// go on through the drain; every file reads back, and nothing needs the
/// drained OSD afterwards (it is killed and every file still reads).
#[test]
fn an_out_head_hands_its_groups_over_and_ends_in_no_chain() {
    let dir = tempfile::tempdir().unwrap();
    runtime().block_on(async {
        let mut cl = start(dir.path());
        cl.wait_healthy(60).await;
        let c = cl.client().await;
        // Some large enough that filling a new member takes a while.
        let len = |k: u64| {
            if k.is_multiple_of(5) {
                1 << 20
            } else {
                1000 + 700 * k as usize
            }
        };
        for k in 0..20u64 {
            write_file(&c, ROOT_INO, &format!("f{k}"), &content(k, len(k))).await;
        }
        let (head, _) = root_head(&cl).await;
        cl.cli_ok(&["osd", "out", &head.to_string()]);
        let mut k = 20u64;
        let deadline = std::time::Instant::now() + Duration::from_secs(90);
        loop {
            write_file(&c, ROOT_INO, &format!("f{k}"), &content(k, len(k))).await;
            k += 1;
            let t = grant(&cl).await.chains.unwrap();
            // Never fewer than two full copies of any group on the way.
            assert!(
                t.chains.iter().all(|(_, ch)| ch.members.len() >= 2),
                "a group lost a copy to the drain: {t:?}"
            );
            let drained = t.chains.iter().all(|(_, ch)| !ch.holds(head));
            let settled = t
                .chains
                .iter()
                .all(|(_, ch)| ch.joining.is_empty() && ch.members.len() == 2);
            if drained && settled {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "OSD {head} still in a chain: {t:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert_ne!(root_head(&cl).await.0, head);
        let log = std::fs::read_to_string(cl.dir.join("mds.log")).unwrap();
        assert!(log.contains("(a drain)"), "the MDS did not log the drain");
        cl.wait_for("the drained OSD up again, and out", 60, |s| {
            s.osds.iter().any(|o| o.id == head && o.up && !o.is_in)
                && s.health().level == "HEALTH_OK"
        })
        .await;
        cl.kill_osd(head);
        let fresh = cl.client().await;
        for j in 0..k {
            let name = format!("f{j}");
            assert_eq!(
                read_file(&fresh, ROOT_INO, &name).await,
                content(j, len(j)),
                "{name}"
            );
        }
    });
}

/// A replica group loses both its copies (one member's disk replaced,
/// the other's store put back to an older copy) while the other groups
/// keep theirs: the group stays unavailable until the operator adopts
/// the older copy. Then the files whose objects live in that group read
/// back as they were in it (a rewrite after it is gone), those in the
/// other groups as they are, and the new disk is filled. Refused: without
/// `--accept-loss`, an unknown group, the root directory's group (it holds
/// the inode counter), a group that is not lost, an OSD that is not up.
#[test]
fn a_lost_group_is_served_again_from_an_older_copy_the_operator_adopts() {
    let dir = tempfile::tempdir().unwrap();
    runtime().block_on(async {
        let mut cl = start(dir.path());
        cl.wait_healthy(60).await;
        let c = cl.client().await;
        let len = |k: u64| 3000 + 7 * k as usize;
        for k in 0..24u64 {
            write_file(&c, ROOT_INO, &format!("f{k}"), &content(k, len(k))).await;
        }
        // A group that does not share both members with the root's.
        let g = grant(&cl).await;
        let root_group = g.root_osd.unwrap();
        let t = g.chains.unwrap();
        let pair = |grp: u32| {
            let mut m = t.chain(grp).unwrap().members.clone();
            m.sort_unstable();
            m
        };
        let (group, members) = t
            .chains
            .iter()
            .map(|(grp, _)| (*grp, pair(*grp)))
            .find(|(grp, m)| *grp != root_group && *m != pair(root_group))
            .expect("a group apart from the root's");
        let (a, b) = (members[0], members[1]);
        // Which files live in that group (their objects' placement).
        let map = c.inner().osds.refresh(&c.inner().mds).await.unwrap();
        let mut in_group = std::collections::BTreeSet::new();
        for k in 0..24u64 {
            let ino = c
                .lookup(&root(), ROOT_INO, &format!("f{k}"))
                .await
                .unwrap()
                .attr
                .ino;
            if map.place(proto::layout::data_oid(ino), 1).first() == Some(&group) {
                in_group.insert(k);
            }
        }
        assert!(!in_group.is_empty(), "no file in group {group}");
        // OSD b's store copied aside, then every file rewritten.
        let img_b = cl.osd_dir(b).join("store.img");
        let old_b = dir.path().join("old.img");
        cl.stop_osd(b);
        copy_image(&img_b, &old_b);
        cl.start_osd(b);
        cl.wait_healthy(60).await;
        for k in 0..24u64 {
            write_file(&c, ROOT_INO, &format!("f{k}"), &content(100 + k, len(k))).await;
        }
        tokio::time::sleep(Duration::from_millis(1000)).await;
        cl.kill_osd(a);
        cl.kill_osd(b);
        tokio::time::sleep(Duration::from_millis(4000)).await;
        new_empty_store(&cl, a);
        copy_image(&old_b, &img_b);
        cl.start_osd(a);
        cl.start_osd(b);
        let s = cl
            .wait_for("the group lost", 60, |s| {
                s.redundancy.groups_lost >= 1 && s.osds.iter().all(|o| o.up)
            })
            .await;
        assert_eq!(s.health().level, "HEALTH_ERR", "{:?}", s.health());
        let lost: Vec<u32> = grant(&cl)
            .await
            .chains
            .unwrap()
            .chains
            .iter()
            .filter(|(_, ch)| ch.members.is_empty())
            .map(|(grp, _)| *grp)
            .collect();
        assert!(
            lost.contains(&group) && !lost.contains(&root_group),
            "{lost:?}"
        );
        let err = |args: &[&str]| String::from_utf8_lossy(&cl.cli(args).stderr).into_owned();
        let (gs, bs) = (group.to_string(), b.to_string());
        assert!(err(&["osd", "adopt-group", &gs, "--from", &bs]).contains("--accept-loss"));
        let acc = "--accept-loss";
        assert!(
            err(&["osd", "adopt-group", "99", "--from", &bs, acc]).contains("no replica group 99")
        );
        let rg = root_group.to_string();
        assert!(err(&["osd", "adopt-group", &rg, "--from", &bs, acc]).contains("root directory"));
        assert!(err(&["osd", "adopt-group", &gs, "--from", "9", acc]).contains("OSD 9 is not up"));
        for grp in &lost {
            let gs = grp.to_string();
            cl.cli_ok(&["osd", "adopt-group", &gs, "--from", &bs, acc]);
            // Asked again (a lost answer): done, not refused.
            cl.cli_ok(&["osd", "adopt-group", &gs, "--from", &bs, acc]);
        }
        let a_s = a.to_string();
        assert!(err(&["osd", "adopt-group", &gs, "--from", &a_s, acc]).contains("is not lost"));
        cl.wait_for("HEALTH_OK, every chain whole again", 120, |s| {
            s.health().level == "HEALTH_OK" && s.redundancy.groups_degraded == 0
        })
        .await;
        // The adopted group's files as they were in the older copy; the
        // others as they are now.
        let fresh = cl.client().await;
        for k in 0..24u64 {
            let want = if in_group.contains(&k) { k } else { 100 + k };
            let name = format!("f{k}");
            assert_eq!(
                read_file(&fresh, ROOT_INO, &name).await,
                content(want, len(k)),
                "{name}"
            );
        }
        // The filled copies hold it all: OSD b killed, still read back.
        cl.kill_osd(b);
        let after = cl.client().await;
        for &k in &in_group {
            let name = format!("f{k}");
            assert_eq!(
                read_file(&after, ROOT_INO, &name).await,
                content(k, len(k)),
                "{name}"
            );
        }
    });
}
