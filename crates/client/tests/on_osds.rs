//! The client with the namespace on the OSDs (Ali et al.), on a real cluster
//! on 127.0.0.1: POSIX permission rules made in the client (search, write,
//! sticky directories, owner-only chmod and chown, setgid inheritance),
//! close-to-open lengths and truncate through the inode records, a file
//! unlinked while open, and rename seen by a second client.
#![expect(clippy::unwrap_used, reason = "tests: a panic is the failure report")]

use std::time::Duration;

use client::{Client, ClientConfig};
use local::LocalCluster;
use mds::FormatOptions;
use mds::ids::{Geometry, IdPolicy, PolicyKind};
use proto::layout::LayoutSpec;
use proto::mds::{Creds, NamespaceMode, SetAttr};

const EPERM: i32 = 1;
const ENOENT: i32 = 2;
const EACCES: i32 = 13;

async fn cluster(dir: &tempfile::TempDir, protocol: &str) -> LocalCluster {
    let opts = FormatOptions {
        cluster_id: "onosds".into(),
        policy: IdPolicy::new(PolicyKind::ChildClosest, Geometry::default()).unwrap(),
        layout: LayoutSpec {
            stripe_unit: 4096,
            stripe_count: 3,
            object_size: 0,
            ..LayoutSpec::default()
        },
        wal_bytes: 8 << 20,
        namespace: NamespaceMode::Osd,
        dir_protocol: protocol.into(),
    };
    let c = LocalCluster::start(dir.path(), 3, 256 << 20, &opts)
        .await
        .unwrap();
    // Placement needs the OSDs registered before the root is made.
    let m = c.mds_client(1).unwrap();
    for _ in 0..400 {
        if let Ok(proto::mds::MdsReply::Status(s)) = m.call(proto::mds::Op::Status).await
            && s.osds.iter().filter(|o| o.up).count() == 3
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    c
}

async fn client(c: &LocalCluster, attr_timeout: Duration) -> Client {
    let mut cfg = ClientConfig::new(&c.mds_addr(), &c.cluster_id, c.admin().unwrap());
    cfg.attr_timeout = attr_timeout;
    Client::connect(cfg).await.unwrap()
}

fn user(uid: u32, gid: u32) -> Creds {
    Creds {
        uid,
        gid,
        groups: Vec::new(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permissions_are_enforced_by_the_client() {
    let dir = tempfile::tempdir().unwrap();
    let cl = cluster(&dir, "atomic").await;
    let c = client(&cl, Duration::ZERO).await;
    let root = Creds::root();
    let (u1, u2) = (user(1000, 1000), user(2000, 2000));
    // A private directory: no search, no create for others.
    let p = c.mkdir(&root, 0, "priv", 0o700).await.unwrap();
    let e = c
        .create(&u1, p.attr.ino, "x", 0o644, true)
        .await
        .unwrap_err();
    assert_eq!(e.raw(), EACCES, "{e}");
    c.create(&root, p.attr.ino, "secret", 0o600, true)
        .await
        .unwrap();
    let e = c.lookup(&u1, p.attr.ino, "secret").await.unwrap_err();
    assert_eq!(e.raw(), EACCES, "{e}");
    // A sticky world-writable directory: only the owner removes a name.
    let t = c.mkdir(&root, 0, "tmp", 0o1777).await.unwrap();
    let (mine, fh) = c
        .create(&u1, t.attr.ino, "mine", 0o600, true)
        .await
        .unwrap();
    c.release(fh).await.unwrap();
    assert_eq!((mine.attr.uid, mine.attr.gid), (1000, 1000));
    let e = c.unlink(&u2, t.attr.ino, "mine").await.unwrap_err();
    assert_eq!(e.raw(), EPERM, "{e}");
    let e = c
        .rename(&u2, t.attr.ino, "mine", t.attr.ino, "stolen", false)
        .await
        .unwrap_err();
    assert_eq!(e.raw(), EPERM, "{e}");
    // Someone else's 0600 file: no open; chmod and chown are the owner's.
    let e = c.open(&u2, mine.attr.ino, false).await.unwrap_err();
    assert_eq!(e.raw(), EACCES, "{e}");
    let chmod = SetAttr {
        mode: Some(0o666),
        ..Default::default()
    };
    let e = c
        .setattr(&u2, mine.attr.ino, chmod.clone())
        .await
        .unwrap_err();
    assert_eq!(e.raw(), EPERM, "{e}");
    let chown = SetAttr {
        uid: Some(2000),
        ..Default::default()
    };
    let e = c.setattr(&u1, mine.attr.ino, chown).await.unwrap_err();
    assert_eq!(e.raw(), EPERM, "{e}");
    let a = c.setattr(&u1, mine.attr.ino, chmod).await.unwrap();
    assert_eq!(a.mode, 0o666);
    c.open(&u2, mine.attr.ino, false).await.unwrap();
    c.unlink(&u1, t.attr.ino, "mine").await.unwrap();
    // A setgid directory hands its group down.
    let sg = c.mkdir(&root, 0, "sg", 0o2777).await.unwrap();
    c.setattr(
        &root,
        sg.attr.ino,
        SetAttr {
            gid: Some(50),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let (f, fh) = c.create(&u1, sg.attr.ino, "f", 0o644, true).await.unwrap();
    c.release(fh).await.unwrap();
    assert_eq!(f.attr.gid, 50);
    let d = c.mkdir(&u1, sg.attr.ino, "d", 0o755).await.unwrap();
    assert_eq!((d.attr.gid, d.attr.mode & 0o2000), (50, 0o2000));
    cl.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lengths_truncate_unlinked_open_files_and_rename() {
    let dir = tempfile::tempdir().unwrap();
    let cl = cluster(&dir, "lock").await;
    let a = client(&cl, Duration::from_secs(1)).await;
    let b = client(&cl, Duration::ZERO).await;
    let root = Creds::root();
    // Close-to-open: b sees a's length and bytes after a closes.
    let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    let (e, fh) = a.create(&root, 0, "f", 0o644, true).await.unwrap();
    a.write(fh, 0, &data).await.unwrap();
    a.release(fh).await.unwrap();
    let seen = b.lookup(&root, 0, "f").await.unwrap();
    assert_eq!(seen.attr.size, data.len() as u64);
    let fh = b.open(&root, e.attr.ino, false).await.unwrap();
    let got = b.read(fh, 0, 1 << 20).await.unwrap();
    assert!(got[..] == data[..], "b reads what a wrote");
    b.release(fh).await.unwrap();
    // Truncate down by a; b reads the short file, and the cut bytes do
    // not come back when a extends it again.
    let cut = SetAttr {
        size: Some(10),
        ..Default::default()
    };
    a.setattr(&root, e.attr.ino, cut).await.unwrap();
    let grow = SetAttr {
        size: Some(20_000),
        ..Default::default()
    };
    a.setattr(&root, e.attr.ino, grow).await.unwrap();
    let fh = b.open(&root, e.attr.ino, false).await.unwrap();
    let got = b.read(fh, 0, 1 << 20).await.unwrap();
    assert_eq!(got.len(), 20_000);
    assert_eq!(&got[..10], &data[..10]);
    assert!(got[10..].iter().all(|&x| x == 0), "cut bytes stay cut");
    b.release(fh).await.unwrap();
    // Unlinked while open in a: still readable there; gone after release.
    let fh = a.open(&root, e.attr.ino, false).await.unwrap();
    a.unlink(&root, 0, "f").await.unwrap();
    assert_eq!(a.read(fh, 0, 10).await.unwrap()[..], data[..10]);
    assert_eq!(b.lookup(&root, 0, "f").await.unwrap_err().raw(), ENOENT);
    a.release(fh).await.unwrap();
    // Its objects wait a cache window (docs/CLIENT.md); a sync removes them.
    a.sync_all().await.unwrap();
    let e = b.getattr(&root, e.attr.ino).await.unwrap_err();
    assert_eq!(e.raw(), ENOENT, "{e}");
    // A file replaced by a rename while open here: readable until released.
    let (x, fh) = a.create(&root, 0, "x", 0o644, true).await.unwrap();
    a.write(fh, 0, b"old bytes").await.unwrap();
    a.fsync(fh).await.unwrap();
    let (y, fy) = a.create(&root, 0, "y", 0o644, true).await.unwrap();
    a.release(fy).await.unwrap();
    a.rename(&root, 0, "y", 0, "x", false).await.unwrap();
    assert_eq!(&a.read(fh, 0, 9).await.unwrap()[..], b"old bytes");
    assert_eq!(b.lookup(&root, 0, "x").await.unwrap().attr.ino, y.attr.ino);
    a.release(fh).await.unwrap();
    a.sync_all().await.unwrap();
    let e = b.getattr(&root, x.attr.ino).await.unwrap_err();
    assert_eq!(e.raw(), ENOENT, "{e}");
    a.unlink(&root, 0, "x").await.unwrap();
    // Rename across directories, seen by b.
    let d1 = a.mkdir(&root, 0, "d1", 0o755).await.unwrap();
    let d2 = a.mkdir(&root, 0, "d2", 0o755).await.unwrap();
    let (g, fh) = a
        .create(&root, d1.attr.ino, "g", 0o644, true)
        .await
        .unwrap();
    a.release(fh).await.unwrap();
    a.rename(&root, d1.attr.ino, "g", d2.attr.ino, "h", false)
        .await
        .unwrap();
    assert_eq!(
        b.lookup(&root, d2.attr.ino, "h").await.unwrap().attr.ino,
        g.attr.ino
    );
    assert!(b.readdir(&root, d1.attr.ino).await.unwrap().is_empty());
    let names: Vec<String> = b
        .readdir(&root, 0)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, ["d1", "d2"]);
    cl.stop().await.unwrap();
}

/// A rename of one hard link onto another of the same file does nothing
/// (POSIX): both names stay, in this client's view of a directory whose
/// names it has listed too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rename_between_two_links_of_one_file_keeps_both_names() {
    let dir = tempfile::tempdir().unwrap();
    let cl = cluster(&dir, "atomic").await;
    let a = client(&cl, Duration::from_secs(1)).await;
    let b = client(&cl, Duration::ZERO).await;
    let r = Creds::root();
    let (x, fh) = a.create(&r, 0, "x", 0o644, true).await.unwrap();
    a.release(fh).await.unwrap();
    a.link(&r, x.attr.ino, 0, "y").await.unwrap();
    a.lookup(&r, 0, "nothing1").await.unwrap_err();
    a.lookup(&r, 0, "nothing2").await.unwrap_err();
    a.rename(&r, 0, "x", 0, "y", false).await.unwrap();
    for name in ["x", "y"] {
        let here = a.lookup(&r, 0, name).await.unwrap();
        assert_eq!(here.attr.ino, x.attr.ino, "{name} on this client");
        let there = b.lookup(&r, 0, name).await.unwrap();
        assert_eq!(there.attr.ino, x.attr.ino, "{name} on the OSDs");
    }
    cl.stop().await.unwrap();
}

/// Writes `data` to a new file `name` in the root through `c`, closed.
async fn put(c: &Client, name: &str, data: &[u8]) -> u64 {
    let root = Creds::root();
    let (e, fh) = c.create(&root, 0, name, 0o644, true).await.unwrap();
    c.write(fh, 0, data).await.unwrap();
    c.release(fh).await.unwrap();
    e.attr.ino
}

/// Reads all of `ino` through `c`: its bytes, or the errno of the open
/// or the read.
async fn get(c: &Client, ino: u64) -> Result<Vec<u8>, i32> {
    let root = Creds::root();
    let fh = c.open(&root, ino, false).await.map_err(|e| e.raw())?;
    let r = c.read(fh, 0, 1 << 20).await.map_err(|e| e.raw());
    c.release(fh).await.unwrap();
    r.map(|b| b.to_vec())
}

/// Another client removes or replaces a file this one read a moment
/// ago (its entry and read capability still cached, so the open is
/// answered here): the read finds the objects gone and answers ESTALE —
/// never the old length of zeros (an editor's save, read by another
/// mount, came back as zero bytes). A sparse file's holes still read as
/// zeros.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_removed_by_another_client_never_reads_as_zeros() {
    const ESTALE: i32 = 116;
    let dir = tempfile::tempdir().unwrap();
    let cl = cluster(&dir, "atomic").await;
    let a = client(&cl, Duration::ZERO).await;
    let b = client(&cl, Duration::from_secs(30)).await;
    let root = Creds::root();
    let old: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8 + 1).collect();
    for round in 0..2 {
        let name = format!("cfg{round}");
        let ino = put(&a, &name, &old).await;
        let e = b.lookup(&root, 0, &name).await.unwrap();
        assert_eq!(get(&b, e.attr.ino).await, Ok(old.clone()));
        if round == 0 {
            put(&a, "tmp", b"new contents").await;
            a.rename(&root, 0, "tmp", 0, &name, false).await.unwrap();
        } else {
            a.unlink(&root, 0, &name).await.unwrap();
        }
        match get(&b, ino).await {
            Ok(got) => assert!(
                got == old,
                "round {round}: {} bytes, not the old ones",
                got.len()
            ),
            Err(errno) => assert_eq!(errno, ESTALE, "round {round}"),
        }
    }
    // Holes of a file that is there read as zeros.
    let (e, fh) = a.create(&root, 0, "sparse", 0o644, true).await.unwrap();
    a.write(fh, 3 << 20, b"end").await.unwrap();
    a.release(fh).await.unwrap();
    let fh = b.open(&root, e.attr.ino, false).await.unwrap();
    let got = b.read(fh, 0, 4096).await.unwrap();
    assert!(got.len() == 4096 && got.iter().all(|&x| x == 0));
    b.release(fh).await.unwrap();
    cl.stop().await.unwrap();
}
