//! What a client knows of what it just made or moved, against a real
//! cluster on 127.0.0.1: a new file's extended attributes (none) are
//! answered without the MDS within the cache window, and no longer once
//! this client sets one or the window passes; a rename within a directory
//! brings the directory's attributes and the moved entry with its answer.
#![expect(clippy::unwrap_used, reason = "tests: a panic is the failure report")]

use std::time::Duration;

use client::{Client, ClientConfig};
use local::LocalCluster;
use mds::FormatOptions;
use proto::layout::LayoutSpec;
use proto::mds::{Creds, Errno, XattrMode};

async fn setup(dir: &tempfile::TempDir) -> (LocalCluster, Client, Client) {
    let opts = FormatOptions::new("madehere", LayoutSpec::default());
    let cl = LocalCluster::start(dir.path(), 3, 256 << 20, &opts)
        .await
        .unwrap();
    let cfg = || ClientConfig::new(&cl.mds_addr(), &cl.cluster_id, cl.admin().unwrap());
    let a = Client::connect(cfg()).await.unwrap();
    let b = Client::connect(cfg()).await.unwrap();
    (cl, a, b)
}

fn asked(c: &Client) -> u64 {
    let s = c.stats();
    s.mds_mandatory + s.mds_non_mandatory + s.mds_absent
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_files_missing_xattrs_cost_no_request_and_a_set_one_is_seen() {
    let dir = tempfile::tempdir().unwrap();
    let (cl, a, b) = setup(&dir).await;
    let r = Creds::root();
    let (e, fh) = a.create(&r, a.root(), "f", 0o644, true).await.unwrap();
    let ino = e.attr.ino;
    let before = asked(&a);
    for name in ["security.capability", "user.k"] {
        let err = a.getxattr(&r, ino, name).await.unwrap_err();
        assert_eq!(err.errno, Errno::NoData, "{err}");
    }
    assert!(a.listxattr(&r, ino).await.unwrap().is_empty());
    assert_eq!(
        asked(&a),
        before,
        "answered by the client that made the file"
    );
    // This client's own change ends what it knew.
    a.setxattr(&r, ino, "user.k", b"v", XattrMode::Either)
        .await
        .unwrap();
    assert_eq!(a.getxattr(&r, ino, "user.k").await.unwrap(), b"v");
    assert_eq!(
        a.listxattr(&r, ino).await.unwrap(),
        vec!["user.k".to_string()]
    );
    // Another client never took the shortcut: it sees the attribute.
    assert_eq!(b.getxattr(&r, ino, "user.k").await.unwrap(), b"v");
    a.release(fh).await.unwrap();
    // A file made and then given an attribute by another client: within
    // the window the maker may not see it (as with attributes); after it,
    // it does.
    let (e2, fh2) = a.create(&r, a.root(), "g", 0o644, true).await.unwrap();
    b.setxattr(&r, e2.attr.ino, "user.x", b"1", XattrMode::Either)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(a.getxattr(&r, e2.attr.ino, "user.x").await.unwrap(), b"1");
    a.release(fh2).await.unwrap();
    // A second name for an old file is not a new file.
    let l = a.link(&r, ino, a.root(), "f2").await.unwrap();
    assert_eq!(a.getxattr(&r, l.attr.ino, "user.k").await.unwrap(), b"v");
    // Nor is a create that is not exclusive: it may open a file that was
    // there, attributes and all (a setcap binary must keep showing its
    // capability, or a write would not strip it).
    let (h, fh3) = b.create(&r, b.root(), "h", 0o755, true).await.unwrap();
    b.setxattr(
        &r,
        h.attr.ino,
        "security.capability",
        b"caps",
        XattrMode::Either,
    )
    .await
    .unwrap();
    b.release(fh3).await.unwrap();
    let (again, fh4) = a.create(&r, a.root(), "h", 0o755, false).await.unwrap();
    assert_eq!(again.attr.ino, h.attr.ino);
    assert_eq!(
        a.getxattr(&r, h.attr.ino, "security.capability")
            .await
            .unwrap(),
        b"caps"
    );
    a.release(fh4).await.unwrap();
    // Only the owner (or root) is answered without the MDS; a name the
    // namespace may refuse is left to it.
    let (n, fh5) = a.create(&r, a.root(), "n", 0o600, true).await.unwrap();
    let before = asked(&a);
    let stranger = Creds {
        uid: 4242,
        gid: 4242,
        groups: vec![],
    };
    let err = a
        .getxattr(&stranger, n.attr.ino, "user.k")
        .await
        .unwrap_err();
    assert_eq!(err.errno, Errno::Access, "{err}");
    a.getxattr(&r, n.attr.ino, "nonamespace").await.unwrap_err();
    assert_eq!(asked(&a), before + 2, "both were the namespace's to answer");
    a.release(fh5).await.unwrap();
    cl.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rename_within_a_directory_brings_its_attributes_and_the_moved_entry() {
    let dir = tempfile::tempdir().unwrap();
    let (cl, a, _b) = setup(&dir).await;
    let r = Creds::root();
    let d = a.mkdir(&r, a.root(), "d", 0o755).await.unwrap().attr.ino;
    let (tmp, fh) = a.create(&r, d, "out.tmp", 0o644, true).await.unwrap();
    a.write(fh, 0, b"compiled").await.unwrap();
    a.release(fh).await.unwrap();
    let d0 = a.getattr(&r, d).await.unwrap();
    a.rename(&r, d, "out.tmp", d, "out", false).await.unwrap();
    let before = asked(&a);
    let d1 = a.getattr(&r, d).await.unwrap();
    let moved = a.lookup(&r, d, "out").await.unwrap();
    let st = a.getattr(&r, tmp.attr.ino).await.unwrap();
    assert_eq!(asked(&a), before, "the rename's answer carried them");
    assert_eq!(moved.attr.ino, tmp.attr.ino);
    assert_eq!(st.size, 8);
    assert!(
        (d1.mtime, d1.ctime) >= (d0.mtime, d0.ctime),
        "{d0:?} then {d1:?}"
    );
    // The old name is gone, from this client's cache too.
    let gone = a.lookup(&r, d, "out.tmp").await.unwrap_err();
    assert_eq!(gone.errno, Errno::NoEnt);
    // What the MDS says of the directory matches what the client kept.
    let fresh = _b.getattr(&r, d).await.unwrap();
    assert_eq!(
        (fresh.mtime, fresh.ctime, fresh.nlink),
        (d1.mtime, d1.ctime, d1.nlink)
    );
    cl.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_links_target_is_read_from_the_mds_once() {
    let dir = tempfile::tempdir().unwrap();
    let (cl, a, b) = setup(&dir).await;
    let r = Creds::root();
    let l = b.symlink(&r, b.root(), "l", "some/where").await.unwrap();
    let before = asked(&a);
    for _ in 0..3 {
        assert_eq!(a.readlink(&r, l.attr.ino).await.unwrap(), "some/where");
    }
    assert_eq!(asked(&a), before + 1);
    // Removed elsewhere, a new link of the same name is a new inode: its
    // own target.
    b.unlink(&r, b.root(), "l").await.unwrap();
    let l2 = b.symlink(&r, b.root(), "l", "else/where").await.unwrap();
    assert_ne!(l2.attr.ino, l.attr.ino);
    assert_eq!(a.readlink(&r, l2.attr.ino).await.unwrap(), "else/where");
    cl.stop().await.unwrap();
}

/// A rename of one hard link onto another of the same file does nothing
/// (POSIX): both names stay, in this client's view too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rename_between_two_links_of_one_file_keeps_both_names() {
    let dir = tempfile::tempdir().unwrap();
    let (cl, a, b) = setup(&dir).await;
    let r = Creds::root();
    let d = a.mkdir(&r, a.root(), "d", 0o755).await.unwrap().attr.ino;
    let (x, fh) = a.create(&r, d, "x", 0o644, true).await.unwrap();
    a.release(fh).await.unwrap();
    a.link(&r, x.attr.ino, d, "y").await.unwrap();
    // Two misses make this client fetch the directory's names (a
    // program creating files asks for each new name first)...
    a.lookup(&r, d, "nothing1").await.unwrap_err();
    a.lookup(&r, d, "nothing2").await.unwrap_err();
    // ...and both names looked up, as the kernel does before a rename.
    a.lookup(&r, d, "x").await.unwrap();
    a.lookup(&r, d, "y").await.unwrap();
    a.rename(&r, d, "x", d, "y", false).await.unwrap();
    for name in ["x", "y"] {
        let here = a.lookup(&r, d, name).await.unwrap();
        assert_eq!(here.attr.ino, x.attr.ino, "{name} on this client");
        let there = b.lookup(&r, d, name).await.unwrap();
        assert_eq!(there.attr.ino, x.attr.ino, "{name} at the MDS");
    }
    assert_eq!(a.getattr(&r, x.attr.ino).await.unwrap().nlink, 2);
    cl.stop().await.unwrap();
}
