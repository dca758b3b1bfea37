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

/// Four clients moving the same 40 files at random among three
/// directories: each rename either moves the file or finds it gone
/// (ENOENT) — never EBUSY because another client's rename of it was in
/// progress, never EEXIST because the destination name appeared
/// meanwhile — and every file is in exactly one directory at the end.
async fn renames_race(p: Protocol) {
    let c = common::cluster(3).await;
    let fs = c.formatted(p, DirHash::V1).await;
    let root = fs.root().await.unwrap();
    let mut dirs = Vec::new();
    for name in ["x", "y", "z"] {
        let (d, _, _) = fs
            .make(&root, name, Kind::Dir, OWNER, None, true)
            .await
            .unwrap();
        dirs.push((d.ino, d.osd));
    }
    let first = fs.dir(dirs[0].0, dirs[0].1).await.unwrap();
    for i in 0..40 {
        fs.make(&first, &format!("f{i}"), Kind::File, OWNER, None, true)
            .await
            .unwrap();
    }
    let mut tasks = tokio::task::JoinSet::new();
    for (k, f) in clients(&c, 4).await.into_iter().enumerate() {
        let dirs = dirs.clone();
        tasks.spawn(async move {
            // A seeded xorshift: the same moves every run.
            let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ (k as u64 + 11);
            let mut next = |n: u64| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x % n) as usize
            };
            let (mut moved, mut gone) = (0, 0);
            for _ in 0..60 {
                let (a, b) = (next(3), next(3));
                let name = format!("f{}", next(40));
                let src = f.dir(dirs[a].0, dirs[a].1).await.unwrap();
                let dst = f.dir(dirs[b].0, dirs[b].1).await.unwrap();
                match f.rename(&src, &name, &dst, &name, false).await {
                    Ok(_) => moved += 1,
                    Err(e) if e.raw() == libc::ENOENT => gone += 1,
                    Err(e) => panic!("client {k}: rename {name} {a}->{b}: {e}"),
                }
            }
            (moved, gone)
        });
    }
    let mut moved = 0;
    while let Some(r) = tasks.join_next().await {
        moved += r.unwrap().0;
    }
    assert!(moved > 0, "{p:?}: no rename went through");
    let mut all = Vec::new();
    for (ino, osd) in &dirs {
        all.extend(names(&fs, &fs.dir(*ino, *osd).await.unwrap()).await);
    }
    all.sort();
    let mut want: Vec<String> = (0..40).map(|i| format!("f{i}")).collect();
    want.sort();
    assert_eq!(all, want, "{p:?}: every file in exactly one directory");
    let r = osdns::fsck::fsck(&fs, false, 0).await.unwrap();
    assert!(r.clean(), "{p:?}: {:?}", r.lines());
    c.c.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn atomic_renames_race_without_spurious_errors() {
    renames_race(Protocol::Atomic).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_renames_race_without_spurious_errors() {
    renames_race(Protocol::Lock).await;
}
