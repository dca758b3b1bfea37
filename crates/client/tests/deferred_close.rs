//! Closes under a directory lease (`docs/CLIENT.md`, "Closes under a
//! lease"): a file made under a lease this client holds is closed without
//! waiting for its data to reach the OSDs, yet another client that opens
//! it at once — by its name, after a rename out of the directory, after
//! the lease went back idle — reads every byte; a removal loses nothing
//! else; and a write-back that fails after the close is reported by the
//! next `syncfs`. A real MDS and three OSDs on 127.0.0.1, in this process.
#![expect(clippy::unwrap_used, reason = "tests: a panic is the failure report")]

use std::time::Duration;

use client::{Client, ClientConfig};
use local::LocalCluster;
use mds::FormatOptions;
use mds::ids::{Geometry, IdPolicy, PolicyKind};
use proto::layout::LayoutSpec;
use proto::mds::Creds;

async fn cluster(dir: &tempfile::TempDir) -> LocalCluster {
    let opts = FormatOptions {
        cluster_id: "deferred".into(),
        policy: IdPolicy::new(PolicyKind::ChildClosest, Geometry::default()).unwrap(),
        layout: LayoutSpec {
            stripe_unit: 64 << 10,
            stripe_count: 3,
            object_size: 0,
            ..LayoutSpec::default()
        },
        wal_bytes: 8 << 20,
        namespace: Default::default(),
        dir_protocol: String::new(),
    };
    LocalCluster::start(dir.path(), 3, 256 << 20, &opts)
        .await
        .unwrap()
}

/// A client with early answers (so it takes leases) whose write-back
/// timer waits `delay` (long: only a lease's return or a request writes
/// closed files out).
async fn writer(c: &LocalCluster, delay: Duration) -> Client {
    let mut cfg = ClientConfig::new(&c.mds_addr(), &c.cluster_id, c.admin().unwrap());
    cfg.early_answers = true;
    cfg.writeback_delay = delay;
    Client::connect(cfg).await.unwrap()
}

/// A client that caches nothing.
async fn reader(c: &LocalCluster) -> Client {
    let mut cfg = ClientConfig::new(&c.mds_addr(), &c.cluster_id, c.admin().unwrap());
    cfg.attr_timeout = Duration::ZERO;
    Client::connect(cfg).await.unwrap()
}

fn root() -> Creds {
    Creds::root()
}

/// The content of file `i`: its own bytes, 3 to 200 KiB (across stripes).
fn content(i: usize) -> Vec<u8> {
    let len = 3000 + i * 7919 % (200 << 10);
    (0..len).map(|j| (j * 31 + i * 17) as u8).collect()
}

/// Makes `name` in `d`, writes `data` in 4 KiB writes, closes.
async fn make(c: &Client, d: u64, name: &str, data: &[u8]) -> u64 {
    let (e, fh) = c.create(&root(), d, name, 0o600, true).await.unwrap();
    for (k, part) in data.chunks(4096).enumerate() {
        c.write(fh, (k * 4096) as u64, part).await.unwrap();
    }
    c.release(fh).await.unwrap();
    e.attr.ino
}

/// What `name` in `d` reads through `c`, and its length as `c` sees it.
async fn read_back(c: &Client, d: u64, name: &str) -> (u64, Vec<u8>) {
    let e = c.lookup(&root(), d, name).await.unwrap();
    let fh = c.open(&root(), e.attr.ino, false).await.unwrap();
    let mut out = Vec::new();
    loop {
        let part = c.read(fh, out.len() as u64, 1 << 20).await.unwrap();
        if part.is_empty() {
            break;
        }
        out.extend_from_slice(&part);
    }
    c.release(fh).await.unwrap();
    (e.attr.size, out)
}

/// Files `f{i}` of `d`, for each `i` of `files`, read back through `c`
/// with their length and bytes as [`make`] wrote them.
async fn reads_all(c: &Client, d: u64, files: std::ops::Range<usize>) {
    for i in files {
        let (size, got) = read_back(c, d, &format!("f{i}")).await;
        assert_eq!(size, content(i).len() as u64, "f{i}'s length");
        assert!(got == content(i), "f{i}'s bytes");
    }
}

/// Closes are deferred under the lease, and a second client reading at
/// once — which makes the MDS call the lease back — sees every byte and
/// the right length: the lease's return writes the data out first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_client_reads_every_byte_of_files_closed_under_a_lease() {
    let dir = tempfile::tempdir().unwrap();
    let cl = cluster(&dir).await;
    let a = writer(&cl, Duration::from_secs(60)).await;
    let b = reader(&cl).await;
    let d = a.mkdir(&root(), 0, "d", 0o755).await.unwrap().attr.ino;
    for i in 0..40 {
        make(&a, d, &format!("f{i}"), &content(i)).await;
    }
    let st = a.stats();
    assert!(st.leases_granted >= 1, "{st:?}");
    assert!(
        st.deferred_closes >= 30,
        "closes under the lease leave their data for later: {st:?}"
    );
    reads_all(&b, d, 0..40).await;
    a.sync_all().await.unwrap();
    cl.stop().await.unwrap();
}

/// A file closed under the lease and then renamed into a directory the
/// lease does not cover is readable there at once by another client; a
/// removal after a deferred close takes that file only; a file reopened
/// by its writer after the close reads its own bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renames_removals_and_reopens_after_a_deferred_close_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let cl = cluster(&dir).await;
    let a = writer(&cl, Duration::from_secs(60)).await;
    let b = reader(&cl).await;
    let d = a.mkdir(&root(), 0, "d", 0o755).await.unwrap().attr.ino;
    let out = a.mkdir(&root(), 0, "out", 0o755).await.unwrap().attr.ino;
    for i in 0..6 {
        make(&a, d, &format!("f{i}"), &content(i)).await;
    }
    assert!(a.stats().deferred_closes >= 3, "{:?}", a.stats());
    // An editor's save: written, closed, renamed over elsewhere.
    make(&a, d, "tmp", &content(99)).await;
    a.rename(&root(), d, "tmp", out, "saved", false)
        .await
        .unwrap();
    let (size, got) = read_back(&b, out, "saved").await;
    assert_eq!(size, content(99).len() as u64);
    assert!(got == content(99), "the renamed file's bytes");
    // Removed after its close: the others keep theirs.
    make(&a, d, "gone", &content(7)).await;
    a.unlink(&root(), d, "gone").await.unwrap();
    // Reopened by its writer: its own bytes, before any write-out.
    let ino = make(&a, d, "again", &content(8)).await;
    let fh = a.open(&root(), ino, false).await.unwrap();
    let part = a.read(fh, 0, 1 << 20).await.unwrap();
    assert!(
        part[..] == content(8)[..part.len()],
        "the writer's own bytes"
    );
    a.release(fh).await.unwrap();
    a.sync_all().await.unwrap();
    reads_all(&b, d, 0..6).await;
    assert_eq!(
        b.lookup(&root(), d, "gone").await.unwrap_err().raw(),
        2,
        "removed"
    );
    cl.stop().await.unwrap();
}

/// With no other client and no request, the lease goes back idle and the
/// data is written out first: a client started after that reads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_gone_back_idle_wrote_its_closed_files_first() {
    let dir = tempfile::tempdir().unwrap();
    let cl = cluster(&dir).await;
    let a = writer(&cl, Duration::from_secs(60)).await;
    let d = a.mkdir(&root(), 0, "d", 0o755).await.unwrap().attr.ino;
    for i in 0..10 {
        make(&a, d, &format!("f{i}"), &content(i)).await;
    }
    assert!(a.stats().deferred_closes >= 5, "{:?}", a.stats());
    // Idle: the lease goes back (50 ms) after writing the files out.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let b = reader(&cl).await;
    reads_all(&b, d, 0..10).await;
    cl.stop().await.unwrap();
}

/// The unlucky case: the OSDs are gone when the deferred data is written.
/// The close had succeeded; the failure is not lost — the next `syncfs`
/// reports it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_back_failing_after_a_deferred_close_fails_the_next_syncfs() {
    let dir = tempfile::tempdir().unwrap();
    let mut cl = cluster(&dir).await;
    let a = writer(&cl, Duration::from_secs(60)).await;
    let d = a.mkdir(&root(), 0, "d", 0o755).await.unwrap().attr.ino;
    for i in 0..4 {
        make(&a, d, &format!("f{i}"), &content(i)).await;
    }
    let deferred = a.stats().deferred_closes;
    assert!(deferred >= 2, "{:?}", a.stats());
    for osd in 0..3 {
        cl.stop_osd(osd).await.unwrap();
    }
    // The lease goes back idle; writing the files out fails.
    let e = tokio::time::timeout(Duration::from_secs(120), a.sync_all())
        .await
        .expect("syncfs returns")
        .unwrap_err();
    assert_eq!(e.raw(), 5, "EIO: {e}");
    cl.stop().await.unwrap();
}

/// `futimens` on a file with buffered data (tar's order: write, set the
/// times, close) no longer writes the data out first, and the length
/// commit after it keeps the times it set; a write after the times
/// stamps its own time again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn times_set_over_buffered_data_survive_its_length_commit() {
    let dir = tempfile::tempdir().unwrap();
    let cl = cluster(&dir).await;
    let a = writer(&cl, Duration::from_secs(60)).await;
    let b = reader(&cl).await;
    let old = 1_000_000_000_000_000_000i64; // 2001
    let times = proto::mds::SetAttr {
        mtime: Some(proto::mds::SetTime::At(old)),
        ..Default::default()
    };
    for (name, write_after) in [("kept", false), ("written after", true)] {
        let (e, fh) = a.create(&root(), 0, name, 0o644, true).await.unwrap();
        let data = content(3);
        a.write(fh, 0, &data).await.unwrap();
        let at = a
            .setattr_via(&root(), e.attr.ino, times.clone(), Some(fh))
            .await
            .unwrap();
        assert_eq!(at.mtime, old);
        assert_eq!(at.size, data.len() as u64, "the writer sees its length");
        if write_after {
            a.write(fh, data.len() as u64, b"more").await.unwrap();
        }
        // The writer's own stat before any commit: a write after the
        // times were set moves the mtime, as on a local file system.
        let mine = a.getattr(&root(), e.attr.ino).await.unwrap();
        if write_after {
            assert!(
                mine.mtime > old,
                "{name}: the writer's stat shows the write's time"
            );
        } else {
            assert_eq!(
                mine.mtime, old,
                "{name}: the writer's stat shows the time set"
            );
        }
        a.fsync(fh).await.unwrap();
        a.release(fh).await.unwrap();
        let seen = b.lookup(&root(), 0, name).await.unwrap().attr;
        let len = data.len() as u64 + if write_after { 4 } else { 0 };
        assert_eq!(seen.size, len, "{name}: the length");
        if write_after {
            assert!(seen.mtime > old, "{name}: the later write's time");
            // The write's own time, not the commit's: it does not move.
            assert_eq!(seen.mtime, mine.mtime, "{name}: the mtime after the commit");
        } else {
            assert_eq!(seen.mtime, old, "{name}: the time set stays");
        }
    }
    cl.stop().await.unwrap();
}

/// chmod, chown and utimens of a file made under the lease are answered
/// by the lease (no round trip to the MDS each) and reach the MDS with
/// its other changes: a second client sees them; one that takes a right
/// away still goes to the MDS and holds too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attribute_changes_of_files_made_under_a_lease_are_answered_there() {
    let dir = tempfile::tempdir().unwrap();
    let cl = cluster(&dir).await;
    let a = writer(&cl, Duration::from_secs(60)).await;
    let b = reader(&cl).await;
    let d = a.mkdir(&root(), 0, "d", 0o755).await.unwrap().attr.ino;
    for i in 0..3 {
        make(&a, d, &format!("warm{i}"), b"x").await;
    }
    let old = 1_000_000_000_000_000_000i64;
    let (e, fh) = a.create(&root(), d, "f", 0o600, true).await.unwrap();
    a.write(fh, 0, &content(5)).await.unwrap();
    let answered = a.stats().lease_answered;
    let me = root();
    let set = |s: proto::mds::SetAttr| a.setattr_via(&me, e.attr.ino, s, Some(fh));
    set(proto::mds::SetAttr {
        mtime: Some(proto::mds::SetTime::At(old)),
        ..Default::default()
    })
    .await
    .unwrap();
    set(proto::mds::SetAttr {
        uid: Some(0),
        gid: Some(0),
        ..Default::default()
    })
    .await
    .unwrap();
    let at = set(proto::mds::SetAttr {
        mode: Some(0o644),
        ..Default::default()
    })
    .await
    .unwrap();
    assert_eq!((at.mode & 0o7777, at.mtime), (0o644, old));
    assert_eq!(at.size, content(5).len() as u64, "the writer's length");
    assert!(
        a.stats().lease_answered >= answered + 3,
        "answered under the lease: {:?}",
        a.stats()
    );
    a.release(fh).await.unwrap();
    let seen = b.lookup(&root(), d, "f").await.unwrap().attr;
    assert_eq!(
        (seen.mode & 0o7777, seen.mtime, seen.size),
        (0o644, old, content(5).len() as u64)
    );
    // Taking rights away goes to the MDS (and revokes there); after it,
    // what the lease recorded of the file (0640) is stale, so a chmod
    // back to 0640 — no change by that record, but taking o+r away from
    // the real 0604 — goes to the MDS too, and holds.
    let (e2, fh2) = a.create(&root(), d, "g", 0o640, true).await.unwrap();
    for mode in [0o604, 0o640] {
        a.setattr_via(
            &root(),
            e2.attr.ino,
            proto::mds::SetAttr {
                mode: Some(mode),
                ..Default::default()
            },
            Some(fh2),
        )
        .await
        .unwrap();
    }
    a.release(fh2).await.unwrap();
    a.sync_namespace().await.unwrap();
    let seen = b.lookup(&root(), d, "g").await.unwrap().attr;
    assert_eq!(seen.mode & 0o7777, 0o640);
    cl.stop().await.unwrap();
}

/// The unlucky case of git's loose objects and tar's read-only files: a
/// file its owner made 0444 (writable through the creating descriptor,
/// as POSIX allows), closed under the lease with its data still
/// buffered, and the MDS restarts before the data is written. The
/// restarted MDS knows no hold and judges by the mode; the writer tells
/// it what it holds, its owner's write is given back, and another client
/// reads every byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_file_closed_under_a_lease_is_written_after_an_mds_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut cl = cluster(&dir).await;
    let a = writer(&cl, Duration::from_secs(3600)).await;
    let user = Creds {
        uid: 1000,
        gid: 1000,
        groups: vec![],
    };
    let d = a.mkdir(&root(), 0, "d", 0o777).await.unwrap().attr.ino;
    // A few creates first: the lease comes with the directory's use.
    for i in 0..4 {
        make(&a, d, &format!("f{i}"), &content(i)).await;
    }
    // Small enough to stay buffered until the lease goes back.
    let data = content(11)[..2000].to_vec();
    let (_, fh) = a.create(&user, d, "object", 0o444, true).await.unwrap();
    for (k, part) in data.chunks(4096).enumerate() {
        a.write(fh, (k * 4096) as u64, part).await.unwrap();
    }
    a.release(fh).await.unwrap();
    assert!(a.stats().deferred_closes >= 3, "{:?}", a.stats());
    // The creates reach the MDS (any other request sends the lease's
    // queue first) and its log; the data stays buffered. The restarted
    // MDS then knows the file, not that it is held.
    a.getattr(&root(), 0).await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    let (mds_dir, addr) = (cl.root.join("mds"), cl.mds_addr());
    cl.mds.take().unwrap().stop().await;
    // Away for 2 s: the lease's idle return tries to write the files out
    // meanwhile. Their layouts and capabilities came with the batch's
    // answer, but this client has no connection yet to some of their
    // OSDs, and a connection needs a ticket from the MDS: those writes
    // fail, and the bytes are put back for the next try (without that,
    // the 0444 file read back empty: its bytes had left the buffer).
    tokio::time::sleep(Duration::from_millis(2000)).await;
    cl.mds = Some(local::LocalMds::start(&mds_dir, &addr).await.unwrap());
    // The restarted MDS knows no hold and judges the 0444 file by its
    // mode: a write open refused with EACCES makes the client tell it
    // what it holds and ask again.
    let obj = a.lookup(&user, d, "object").await.unwrap().attr.ino;
    let fh = a.open(&user, obj, true).await.unwrap();
    a.release(fh).await.unwrap();
    // A syncfs reports the failed tries with EIO until one succeeds; any
    // other error — the write-back refused — fails the test, and so does
    // data dropped after an EIO (the read-back below).
    let mut tries = 0;
    while let Err(e) = tokio::time::timeout(Duration::from_secs(120), a.sync_all())
        .await
        .expect("syncfs returns")
    {
        assert_eq!(e.raw(), 5, "{e}");
        tries += 1;
        assert!(tries < 100, "the MDS stays unreachable: {e}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let b = reader(&cl).await;
    let seen = b.lookup(&root(), d, "object").await.unwrap().attr;
    assert_eq!((seen.uid, seen.mode & 0o7777), (1000, 0o444));
    let (size, got) = read_back(&b, d, "object").await;
    assert_eq!(size, data.len() as u64, "the length");
    assert!(got == data, "the bytes");
    reads_all(&b, d, 0..4).await;
    cl.stop().await.unwrap();
}

/// The write-back timer writes closed files out (and forgets them) while
/// their writer opens them again: every reopen reads every byte, and an
/// append through a create that is not exclusive lands after them. An
/// entry asked of the MDS while a write-out committed the length holds
/// the length from before: taken as it was, the reopen read an empty
/// file (`tar -d` after `tar -x` on one mount) and the append wrote over
/// the start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reopens_racing_the_write_back_timer_see_the_whole_file() {
    let dir = tempfile::tempdir().unwrap();
    let cl = cluster(&dir).await;
    let a = writer(&cl, Duration::ZERO).await;
    let d = a.mkdir(&root(), 0, "d", 0o755).await.unwrap().attr.ino;
    let tail = b"appended\n";
    let times = proto::mds::SetAttr {
        mtime: Some(proto::mds::SetTime::At(1_000_000_000_000_000_000)),
        ..Default::default()
    };
    for round in 0..60 {
        let mut made = Vec::new();
        for i in 0..16 {
            made.push(make(&a, d, &format!("r{round}f{i}"), &content(i)).await);
        }
        // As tar does after each file: its times, then its mode.
        for &ino in &made {
            let a1 = a.setattr(&root(), ino, times.clone()).await.unwrap();
            let mode = proto::mds::SetAttr {
                mode: Some(0o640),
                ..Default::default()
            };
            let a2 = a.setattr(&root(), ino, mode).await.unwrap();
            let i = made.iter().position(|&x| x == ino).unwrap();
            let want = content(i).len() as u64;
            assert_eq!(
                (a1.size, a2.size),
                (want, want),
                "r{round}f{i} after setattrs"
            );
        }
        for (i, &ino) in made.iter().enumerate() {
            let name = format!("r{round}f{i}");
            let size = a.getattr(&root(), ino).await.unwrap().size;
            assert_eq!(size, content(i).len() as u64, "{name}'s length, stat");
            if i % 2 == 0 {
                let (size, got) = read_back(&a, d, &name).await;
                assert_eq!(size, content(i).len() as u64, "{name}'s length");
                assert!(got == content(i), "{name}'s bytes: {} read", got.len());
            } else {
                let (e, fh) = a.create(&root(), d, &name, 0o600, false).await.unwrap();
                assert_eq!(
                    e.attr.size,
                    content(i).len() as u64,
                    "{name}'s length at create"
                );
                a.write(fh, e.attr.size, tail).await.unwrap();
                a.release(fh).await.unwrap();
            }
        }
        for i in (1..16).step_by(2) {
            let name = format!("r{round}f{i}");
            let (_, got) = read_back(&a, d, &name).await;
            let mut want = content(i);
            want.extend_from_slice(tail);
            assert!(got == want, "{name} after its append: {} bytes", got.len());
        }
    }
    a.sync_all().await.unwrap();
    cl.stop().await.unwrap();
}

/// A file made and written under a lease, written out by another change
/// (a removal writes every closed file out first) while its lease is
/// still held: a chmod answered under the lease afterwards says its
/// length, and an open from the cache reads every byte (the lease kept
/// the length it was made with, 0).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chmod_under_the_lease_after_a_write_out_keeps_the_length() {
    let dir = tempfile::tempdir().unwrap();
    let cl = cluster(&dir).await;
    let a = writer(&cl, Duration::from_secs(60)).await;
    let d = a.mkdir(&root(), 0, "d", 0o755).await.unwrap().attr.ino;
    for i in 0..8 {
        let name = format!("x{i}");
        let ino = make(&a, d, &name, &content(i)).await;
        make(&a, d, "scratch", b"tmp").await;
        a.unlink(&root(), d, "scratch").await.unwrap();
        let mode = proto::mds::SetAttr {
            mode: Some(0o755),
            ..Default::default()
        };
        let at = a.setattr(&root(), ino, mode).await.unwrap();
        assert_eq!(
            at.size,
            content(i).len() as u64,
            "{name}'s length after chmod"
        );
        let (size, got) = read_back(&a, d, &name).await;
        assert_eq!(size, content(i).len() as u64, "{name}'s length");
        assert!(got == content(i), "{name}'s bytes: {} read", got.len());
    }
    let st = a.stats();
    assert!(st.deferred_closes >= 8, "closes under the lease: {st:?}");
    a.sync_all().await.unwrap();
    cl.stop().await.unwrap();
}

/// A truncate by this client racing an open of the same file here: once
/// both are done, the open sees the truncated length and so does a stat
/// (an open made from the length before the truncate kept it, and its
/// length went into the truncate's answer and the cache).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncate_racing_an_open_here_is_not_undone() {
    let dir = tempfile::tempdir().unwrap();
    let cl = cluster(&dir).await;
    let a = writer(&cl, Duration::from_secs(60)).await;
    let d = a.mkdir(&root(), 0, "d", 0o755).await.unwrap().attr.ino;
    let zero = proto::mds::SetAttr {
        size: Some(0),
        ..Default::default()
    };
    for round in 0..60 {
        let ino = make(&a, d, &format!("t{round}"), &content(round)).await;
        a.sync_all().await.unwrap();
        let _ = a.getattr(&root(), ino).await.unwrap();
        let (t, o) = (a.clone(), a.clone());
        let z = zero.clone();
        let truncate = tokio::spawn(async move { t.setattr(&root(), ino, z).await.unwrap() });
        let open = tokio::spawn(async move { o.open(&root(), ino, false).await.unwrap() });
        let answered = truncate.await.unwrap();
        let fh = open.await.unwrap();
        assert_eq!(answered.size, 0, "round {round}: the truncate's answer");
        assert_eq!(
            a.getattr(&root(), ino).await.unwrap().size,
            0,
            "round {round}: stat"
        );
        let got = a.read(fh, 0, 1 << 20).await.unwrap();
        assert!(got.is_empty(), "round {round}: {} bytes read", got.len());
        a.release(fh).await.unwrap();
    }
    cl.stop().await.unwrap();
}
