//! Directories on the OSDs under concurrency, on a real cluster: one
//! winner among same-name creates, every distinct name present once, and
//! collision chains (a test hash with 4 slots) under concurrent inserts and
//! removes — for both protocols. Each ends with fsck finding nothing.

#![expect(clippy::unwrap_used, reason = "tests: a panic is the failure report")]

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;

use osdns::fs::Owner;
use osdns::{DirHash, Kind, OsdFs, Protocol};

const OWNER: Owner = Owner {
    uid: 0,
    gid: 0,
    mode: 0o644,
    rdev: 0,
};

async fn clients(c: &common::Cluster, n: usize) -> Vec<Arc<OsdFs>> {
    let mut v = Vec::new();
    for _ in 0..n {
        v.push(c.client().await);
    }
    v
}

async fn names(fs: &OsdFs, d: &osdns::DirRef) -> Vec<String> {
    let mut v: Vec<String> = fs
        .readdir_all(d)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    v.sort();
    v
}

async fn same_and_distinct(p: Protocol) {
    let c = common::cluster(3).await;
    let fs = c.formatted(p, DirHash::V1).await;
    let root = fs.root().await.unwrap();
    let (d, _, _) = fs
        .make(&root, "race", Kind::Dir, OWNER, None, true)
        .await
        .unwrap();
    let dir = fs.dir(d.ino, d.osd).await.unwrap();
    let cl = clients(&c, 64).await;
    // 64 clients, one name.
    let mut tasks = tokio::task::JoinSet::new();
    for f in cl.clone() {
        tasks.spawn(async move { f.make(&dir, "same", Kind::File, OWNER, None, true).await });
    }
    let (mut won, mut exists) = (0, 0);
    while let Some(r) = tasks.join_next().await {
        match r.unwrap() {
            Ok(_) => won += 1,
            Err(e) if e.raw() == libc::EEXIST => exists += 1,
            Err(e) => panic!("unexpected error {e}"),
        }
    }
    assert_eq!((won, exists), (1, 63), "{p:?}: one winner, 63 EEXIST");
    assert_eq!(names(&fs, &dir).await, ["same"]);
    // 64 clients, 64 names, 4 each.
    let mut tasks = tokio::task::JoinSet::new();
    for (i, f) in cl.iter().cloned().enumerate() {
        tasks.spawn(async move {
            for j in 0..4 {
                f.make(&dir, &format!("c{i}-{j}"), Kind::File, OWNER, None, true)
                    .await
                    .unwrap();
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
    let got = names(&fs, &dir).await;
    let mut want: Vec<String> = (0..64)
        .flat_map(|i| (0..4).map(move |j| format!("c{i}-{j}")))
        .collect();
    want.push("same".into());
    want.sort();
    assert!(
        got == want,
        "{p:?}: readdir lists {} names, want {}",
        got.len(),
        want.len()
    );
    let r = osdns::fsck::fsck(&fs, false, 0).await.unwrap();
    assert!(r.clean(), "{p:?}: {:?}", r.lines());
    assert_eq!(r.files, 257);
    c.c.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn atomic_one_winner_and_all_distinct_names() {
    same_and_distinct(Protocol::Atomic).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_one_winner_and_all_distinct_names() {
    same_and_distinct(Protocol::Lock).await;
}

async fn chains(p: Protocol) {
    let c = common::cluster(2).await;
    let fs = c.formatted(p, DirHash::Collide { buckets: 4 }).await;
    let root = fs.root().await.unwrap();
    let cl = clients(&c, 16).await;
    // Insert 16 × 12 names into 4 slots, then remove every other one while
    // inserting more, all at once.
    let mut tasks = tokio::task::JoinSet::new();
    for (i, f) in cl.iter().cloned().enumerate() {
        tasks.spawn(async move {
            for j in 0..12 {
                f.make(&root, &format!("n{i}-{j}"), Kind::File, OWNER, None, true)
                    .await
                    .unwrap();
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
    let mut tasks = tokio::task::JoinSet::new();
    for (i, f) in cl.iter().cloned().enumerate() {
        tasks.spawn(async move {
            for j in 0..12 {
                if j % 2 == 0 {
                    let (e, last) = f.unlink(&root, &format!("n{i}-{j}")).await.unwrap();
                    f.destroy(e.ino, e.osd, &last.expect("last link"))
                        .await
                        .unwrap();
                } else {
                    f.make(&root, &format!("m{i}-{j}"), Kind::File, OWNER, None, true)
                        .await
                        .unwrap();
                }
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
    let got: BTreeSet<String> = names(&fs, &root).await.into_iter().collect();
    let want: BTreeSet<String> = (0..16)
        .flat_map(|i| {
            (0..12)
                .filter(|j| j % 2 == 1)
                .flat_map(move |j| [format!("n{i}-{j}"), format!("m{i}-{j}")])
        })
        .collect();
    assert!(
        got == want,
        "{p:?}: {} names listed, want {}",
        got.len(),
        want.len()
    );
    for n in &want {
        assert_eq!(fs.lookup(&root, n).await.unwrap().name, *n);
    }
    for i in 0..16 {
        let e = fs.lookup(&root, &format!("n{i}-0")).await.unwrap_err();
        assert_eq!(e.raw(), libc::ENOENT);
    }
    // A name already chained is refused, with the existing entry.
    let e = fs
        .make(&root, "n3-5", Kind::File, OWNER, None, true)
        .await
        .unwrap_err();
    assert_eq!(e.raw(), libc::EEXIST);
    let r = osdns::fsck::fsck(&fs, false, 0).await.unwrap();
    assert!(r.clean(), "{p:?}: {:?}", r.lines());
    c.c.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn atomic_collision_chains_under_concurrent_inserts_and_removes() {
    chains(Protocol::Atomic).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_collision_chains_under_concurrent_inserts_and_removes() {
    chains(Protocol::Lock).await;
}

/// Lookups and readdir take no lock, so they race removes that free list
/// slots under them. A name present throughout must be found by every
/// lookup and listed once by every readdir: the walk starts again from the
/// head when a slot vanishes (the first CI run of
/// the chain test above caught a lookup reporting damage here instead).
async fn lookups_race_removes(p: Protocol) {
    let c = common::cluster(1).await;
    let fs = c.formatted(p, DirHash::Collide { buckets: 1 }).await;
    let root = fs.root().await.unwrap();
    // One chain: "head", then the churned names, then "stable" at the end
    // (each insert links in right after the head).
    fs.make(&root, "head", Kind::File, OWNER, None, true)
        .await
        .unwrap();
    fs.make(&root, "stable", Kind::File, OWNER, None, true)
        .await
        .unwrap();
    let churn = c.client().await;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let done = stop.clone();
    let writer = tokio::spawn(async move {
        for round in 0..20 {
            for j in 0..8 {
                churn
                    .make(
                        &root,
                        &format!("c{round}-{j}"),
                        Kind::File,
                        OWNER,
                        None,
                        true,
                    )
                    .await
                    .unwrap();
            }
            for j in 0..8 {
                let (e, last) = churn.unlink(&root, &format!("c{round}-{j}")).await.unwrap();
                churn.destroy(e.ino, e.osd, &last.unwrap()).await.unwrap();
            }
        }
        done.store(true, std::sync::atomic::Ordering::SeqCst);
    });
    let mut readers = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let reader = c.client().await;
        let stop = stop.clone();
        readers.spawn(async move {
            let mut lookups = 0u32;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let e = reader.lookup(&root, "stable").await.unwrap();
                assert_eq!(e.name, "stable");
                lookups += 1;
                if lookups.is_multiple_of(8) {
                    let all = reader.readdir_all(&root).await.unwrap();
                    let n = |x: &str| all.iter().filter(|e| e.name == x).count();
                    assert_eq!((n("head"), n("stable")), (1, 1), "readdir lost a name");
                }
            }
            lookups
        });
    }
    writer.await.unwrap();
    let mut lookups = 0;
    while let Some(n) = readers.join_next().await {
        lookups += n.unwrap();
    }
    eprintln!("{p:?}: {lookups} lookups during the churn");
    assert!(
        lookups > 10,
        "{p:?}: only {lookups} lookups overlapped the churn"
    );
    let r = osdns::fsck::fsck(&fs, false, 0).await.unwrap();
    assert!(r.clean(), "{p:?}: {:?}", r.lines());
    c.c.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn atomic_lookups_race_removes_on_a_chain() {
    lookups_race_removes(Protocol::Atomic).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_lookups_race_removes_on_a_chain() {
    lookups_race_removes(Protocol::Lock).await;
}
