//! Directory leases over 127.0.0.1 with real OSDs: one session at a time
//! holds a directory's lease (with its names and delegated inode
//! numbers); the holder's batched changes are applied in order, checked,
//! and idempotent; a create may only name an inode number delegated to
//! its session for that directory; another session's request in the
//! directory waits until the lease is given back, and the holder learns
//! that someone waits; given back, its unused numbers are void, and a
//! directory two sessions used gets no lease for a while. Then, for each
//! id policy: numbers delegated are never made by a plain create.
#![expect(clippy::unwrap_used, reason = "tests: a panic is the failure report")]

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::*;
use mds::ids::PolicyKind;
use proto::mds::{
    DIR_OPS_MAX, DirLease, DirOp, Errno, LEASE_IDS, LEASE_IDS_MAX, MdsError, MdsReply, Op,
    ROOT_INO, SetAttr, SetTime,
};

async fn create(c: &net::MdsClient, dir: u64, name: &str) -> u64 {
    match c
        .call(Op::Create {
            parent: dir,
            name: name.into(),
            mode: 0o644,
            exclusive: true,
        })
        .await
        .unwrap()
    {
        MdsReply::Found(f) => f.entry.attr.ino,
        other => panic!("{other:?}"),
    }
}

async fn lease(c: &net::MdsClient, dir: u64) -> Result<DirLease, MdsError> {
    match c.call(Op::DirLease { dir }).await {
        Ok(MdsReply::Lease(l)) => Ok(*l),
        Ok(other) => panic!("{other:?}"),
        Err(net::CallError::Mds(e)) => Err(e),
        Err(e) => panic!("{e}"),
    }
}

/// (refused: (index, errno), contended).
async fn ops(c: &net::MdsClient, dir: u64, ops: Vec<DirOp>) -> (Vec<(u32, Errno)>, bool) {
    match c.call(Op::DirOps { dir, ops }).await.unwrap() {
        MdsReply::DirDone {
            failed, contended, ..
        } => (
            failed.into_iter().map(|(i, e)| (i, e.errno)).collect(),
            contended,
        ),
        other => panic!("{other:?}"),
    }
}

/// The numbers a batch's answer delegated.
async fn ops_ids(c: &net::MdsClient, dir: u64, ops: Vec<DirOp>) -> Vec<u64> {
    match c.call(Op::DirOps { dir, ops }).await.unwrap() {
        MdsReply::DirDone { failed, ids, .. } => {
            assert!(failed.is_empty(), "{failed:?}");
            ids
        }
        other => panic!("{other:?}"),
    }
}

fn mk(name: &str, ino: u64) -> DirOp {
    DirOp::Create {
        name: name.into(),
        ino,
        mode: 0o644,
    }
}

async fn names(c: &net::MdsClient, dir: u64) -> Vec<(String, u64)> {
    c.readdir_all(dir, false)
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.name, e.ino))
        .collect()
}

/// A batch's answer carries what a CREATE would have answered for each
/// file it made (layout and write capabilities), so the holder's first
/// write needs no OPEN; a batch sent again makes nothing and carries none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_answers_the_layouts_of_the_files_it_made() {
    let cl = Cluster::start(3, spec(512 << 10, 3), PolicyKind::ChildClosest).await;
    let a = cl.client();
    let d = mkdir(&a, ROOT_INO, "d").await;
    let l = lease(&a, d).await.unwrap();
    let batch = vec![
        mk("x", l.ids[0]),
        mk("y", l.ids[1]),
        DirOp::Unlink {
            name: "x".into(),
            ino: l.ids[0],
        },
    ];
    let made = |r: MdsReply| match r {
        MdsReply::DirDone { failed, made, .. } => {
            assert!(failed.is_empty(), "{failed:?}");
            made
        }
        other => panic!("{other:?}"),
    };
    let first = made(
        a.call(Op::DirOps {
            dir: d,
            ops: batch.clone(),
        })
        .await
        .unwrap(),
    );
    let y = first
        .iter()
        .find(|f| f.entry.attr.ino == l.ids[1])
        .expect("the file made and kept is answered for");
    assert!(y.entry.layout.is_some(), "{y:?}");
    assert!(!y.grants.is_empty());
    for g in &y.grants {
        assert_ne!(
            g.rights & proto::rights::WRITE,
            0,
            "write capabilities: {g:?}"
        );
        assert!(!g.caps.is_empty());
    }
    assert!(
        first.len() <= 2,
        "only the files this batch made: {first:?}"
    );
    let again = made(a.call(Op::DirOps { dir: d, ops: batch }).await.unwrap());
    assert!(again.is_empty(), "a resent batch made nothing: {again:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_holder_its_changes_in_order_and_others_wait() {
    let cl = Cluster::start(3, spec(512 << 10, 3), PolicyKind::ChildClosest).await;
    let (a, b) = (cl.client(), cl.client());
    let d = mkdir(&a, ROOT_INO, "d").await;
    let old = create(&a, d, "old").await;

    let l = lease(&a, d).await.unwrap();
    assert_eq!(l.attr.ino, d);
    assert_eq!(
        l.names,
        vec![("old".to_string(), old, proto::mds::FileKind::File)]
    );
    assert_eq!(l.ids.len(), LEASE_IDS);
    let distinct: HashSet<u64> = l.ids.iter().copied().collect();
    assert_eq!(distinct.len(), LEASE_IDS, "delegated numbers are distinct");
    assert!(!distinct.contains(&old) && !distinct.contains(&d));
    assert_eq!(
        lease(&b, d).await.unwrap_err().errno,
        Errno::Busy,
        "one holder at a time"
    );

    // In order: made, then removed, then made again under a new number.
    let batch = vec![
        mk("x", l.ids[0]),
        mk("y", l.ids[1]),
        DirOp::Unlink {
            name: "old".into(),
            ino: old,
        },
        DirOp::Unlink {
            name: "y".into(),
            ino: l.ids[1],
        },
        mk("y", l.ids[2]),
    ];
    assert_eq!(ops(&a, d, batch.clone()).await, (vec![], false));
    let want = vec![("x".to_string(), l.ids[0]), ("y".to_string(), l.ids[2])];
    assert_eq!(names(&a, d).await, want);
    // Sent twice (an answer lost with a connection): taken as once.
    assert_eq!(ops(&a, d, batch).await, (vec![], false));
    assert_eq!(names(&a, d).await, want);

    // Refused, each alone: a number never delegated, one delegated for
    // another directory, an existing name, a name not allowed.
    let e = mkdir(&a, ROOT_INO, "e").await;
    let le = lease(&a, e).await.unwrap();
    let (failed, _) = ops(
        &a,
        d,
        vec![
            mk("z1", old + 1_000_000),
            mk("z2", le.ids[0]),
            mk("x", l.ids[3]),
            mk("a/b", l.ids[4]),
            mk("fine", l.ids[5]),
        ],
    )
    .await;
    assert_eq!(
        failed,
        vec![
            (0, Errno::Inval),
            (1, Errno::Inval),
            (2, Errno::Exist),
            (3, Errno::Inval)
        ]
    );
    assert!(
        names(&a, d)
            .await
            .iter()
            .any(|(n, i)| n == "fine" && *i == l.ids[5])
    );
    // Too many changes at once, or none.
    let many: Vec<DirOp> = (0..proto::mds::DIR_OPS_MAX + 1)
        .map(|i| DirOp::Unlink {
            name: format!("n{i}"),
            ino: 1,
        })
        .collect();
    for bad in [many, Vec::new()] {
        match a.call(Op::DirOps { dir: d, ops: bad }).await {
            Err(net::CallError::Mds(e)) => assert_eq!(e.errno, Errno::Inval),
            other => panic!("{other:?}"),
        }
    }

    // Another session's lookup in the directory waits for the lease.
    let b = std::sync::Arc::new(b);
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move {
            b.call(Op::Lookup {
                parent: d,
                name: "w".into(),
            })
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(
        !waiter.is_finished(),
        "the lookup waits while the lease is held"
    );
    // The holder hears that someone waits, and may still finish.
    let (failed, contended) = ops(&a, d, vec![mk("w", l.ids[6])]).await;
    assert!(failed.is_empty() && contended, "{failed:?} {contended}");
    assert!(!waiter.is_finished());
    a.call(Op::DirRelease { dir: d }).await.unwrap();
    let found = tokio::time::timeout(Duration::from_secs(2), waiter)
        .await
        .expect("the lookup runs once the lease is back")
        .unwrap()
        .unwrap();
    match found {
        MdsReply::Found(f) => assert_eq!(f.entry.attr.ino, l.ids[6], "it sees the holder's change"),
        other => panic!("{other:?}"),
    }
    // Given back, its unused numbers are void.
    let (failed, contended) = ops(&a, d, vec![mk("late", l.ids[7])]).await;
    assert_eq!(failed, vec![(0, Errno::Inval)]);
    assert!(contended, "no lease: the answer says give it back");
    // A directory two sessions used gets no lease for two seconds (they
    // would pass it back and forth); then the other session may take it.
    assert_eq!(lease(&b, d).await.unwrap_err().errno, Errno::Busy);
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let lb = lease(&b, d).await.unwrap();
    assert_eq!(lb.names.len(), 4, "{:?}", lb.names);
    assert!(
        lb.ids.iter().all(|i| !distinct.contains(i)),
        "fresh numbers"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delegated_numbers_are_never_made_by_anyone_else() {
    for policy in [
        PolicyKind::CreateOrder,
        PolicyKind::PseudoRandom,
        PolicyKind::ChildClosest,
        PolicyKind::CousinClosest,
    ] {
        let cl = Cluster::start(1, spec(512 << 10, 1), policy).await;
        let (a, b) = (cl.client(), cl.client());
        let d = mkdir(&a, ROOT_INO, "d").await;
        let l = lease(&a, d).await.unwrap();
        a.call(Op::DirRelease { dir: d }).await.unwrap();
        let l2 = lease(&a, d).await.unwrap();
        let held: HashSet<u64> = l2.ids.iter().copied().collect();
        assert!(
            l.ids.iter().all(|i| !held.contains(i)),
            "{policy:?}: numbers are delegated once"
        );
        // While they are delegated, plain creates by the holder in the
        // directory and by another session next to it never take them.
        let e = mkdir(&b, ROOT_INO, "e").await;
        let mut made = HashSet::new();
        for i in 0..2 * LEASE_IDS {
            made.insert(create(&a, d, &format!("f{i}")).await);
            made.insert(create(&b, e, &format!("f{i}")).await);
        }
        assert!(
            made.is_disjoint(&held),
            "{policy:?}: a create took a delegated number"
        );
        // And each is still the holder's to use.
        let batch: Vec<DirOp> = l2.ids.iter().map(|&i| mk(&format!("g{i}"), i)).collect();
        assert_eq!(ops(&a, d, batch).await, (vec![], false), "{policy:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_that_makes_files_fast_gets_more_numbers() {
    let cl = Cluster::start(1, spec(512 << 10, 1), PolicyKind::ChildClosest).await;
    let a = cl.client();
    let d = mkdir(&a, ROOT_INO, "d").await;
    let l = lease(&a, d).await.unwrap();
    let mut unused: Vec<u64> = l.ids;
    let mut seen: HashSet<u64> = unused.iter().copied().collect();
    let mut n = 0;
    let mut make = |unused: &mut Vec<u64>, k: usize| -> Vec<DirOp> {
        let k = k.min(unused.len());
        unused
            .drain(..k)
            .map(|i| {
                n += 1;
                mk(&format!("f{n}"), i)
            })
            .collect()
    };
    // A slow holder: fewer than half used, nothing more yet.
    let batch = make(&mut unused, 3);
    assert!(ops_ids(&a, d, batch).await.is_empty());
    // Half used in one batch of 30: topped up to eight batches' worth.
    let batch = make(&mut unused, 30);
    let mut more = ops_ids(&a, d, batch).await;
    assert_eq!(
        unused.len() + more.len(),
        256,
        "8 x 30 rounded up to a power of two"
    );
    // Batches as large as they come: never more than the cap held, and
    // never less than half of it after a top-up.
    for _ in 0..6 {
        assert!(
            more_distinct(&mut seen, &more),
            "numbers are delegated once"
        );
        unused.extend(more);
        let batch = make(&mut unused, DIR_OPS_MAX);
        more = ops_ids(&a, d, batch).await;
        assert!(unused.len() + more.len() <= LEASE_IDS_MAX);
        assert!(unused.len() + more.len() >= LEASE_IDS_MAX / 2);
    }
    // Every number delegated works, once.
    while !unused.is_empty() {
        let batch = make(&mut unused, DIR_OPS_MAX);
        let more = ops_ids(&a, d, batch).await;
        assert!(
            more_distinct(&mut seen, &more),
            "numbers are delegated once"
        );
    }
    assert_eq!(names(&a, d).await.len(), n);
}

/// Adds `ids` to `seen`: false if any was there already.
fn more_distinct(seen: &mut HashSet<u64>, ids: &[u64]) -> bool {
    ids.iter().all(|i| seen.insert(*i))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_is_refused_where_it_cannot_be_held() {
    let cl = Cluster::start(1, spec(512 << 10, 1), PolicyKind::ChildClosest).await;
    let a = cl.client();
    let d = mkdir(&a, ROOT_INO, "d").await;
    let f = create(&a, d, "f").await;
    // Not a directory; no such inode (ESTALE, as for any stale handle).
    assert_eq!(lease(&a, f).await.unwrap_err().errno, Errno::NotDir);
    assert_eq!(
        lease(&a, d + 999_999).await.unwrap_err().errno,
        Errno::Stale
    );
    // A caller who may not write in it (d is 0755, owned by root).
    let mut other = cl.client();
    other.creds = proto::mds::Creds {
        uid: 1000,
        gid: 1000,
        groups: Vec::new(),
    };
    assert_eq!(lease(&other, d).await.unwrap_err().errno, Errno::Access);
    // Nothing was granted, nothing changed: a lease is still there to take,
    // and giving back one never held is harmless.
    a.call(Op::DirRelease { dir: d }).await.unwrap();
    let l = lease(&a, d).await.unwrap();
    assert_eq!(l.names.len(), 1);
    assert_eq!(names(&a, d).await, vec![("f".to_string(), f)]);
}

/// A holder's attribute change of a file in the leased directory is
/// applied as SETATTR would be; a length, a change that takes a right
/// away, a name that does not name the inode, and a change the caller may
/// not make are each refused alone, leaving the file as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_changes_attributes_of_its_files_and_nothing_more() {
    let cl = Cluster::start(3, spec(512 << 10, 3), PolicyKind::ChildClosest).await;
    let a = cl.client();
    let d = mkdir(&a, ROOT_INO, "d").await;
    let l = lease(&a, d).await.unwrap();
    let (f, g) = (l.ids[0], l.ids[1]);
    let old = 1_000_000_000_000_000_000i64;
    let set = |s: SetAttr| DirOp::SetAttr {
        name: "f".into(),
        ino: f,
        set: s,
    };
    let batch = vec![
        DirOp::Create {
            name: "f".into(),
            ino: f,
            mode: 0o600,
        },
        set(SetAttr {
            mode: Some(0o644),
            ..Default::default()
        }),
        set(SetAttr {
            mtime: Some(SetTime::At(old)),
            uid: Some(0),
            gid: Some(0),
            ..Default::default()
        }),
    ];
    assert_eq!(ops(&a, d, batch).await, (vec![], false));
    let at = getattr(&a, f).await;
    assert_eq!((at.mode & 0o7777, at.mtime), (0o644, old));

    let user = proto::mds::Creds {
        uid: 1000,
        gid: 1000,
        groups: vec![],
    };
    let refused = vec![
        // 0: a length.
        set(SetAttr {
            size: Some(10),
            ..Default::default()
        }),
        // 1: takes read rights away.
        set(SetAttr {
            mode: Some(0o600),
            ..Default::default()
        }),
        // 2: the name names another inode (nothing).
        DirOp::SetAttr {
            name: "f".into(),
            ino: g,
            set: SetAttr {
                mode: Some(0o644),
                ..Default::default()
            },
        },
    ];
    let (failed, _) = ops(&a, d, refused).await;
    let errnos: Vec<(u32, Errno)> = failed;
    assert_eq!(
        errnos,
        vec![(0, Errno::Inval), (1, Errno::Perm), (2, Errno::NoEnt)]
    );
    // Not the owner: as SETATTR, EPERM.
    let r = a
        .call_as(
            user,
            Op::DirOps {
                dir: d,
                ops: vec![set(SetAttr {
                    mode: Some(0o666),
                    ..Default::default()
                })],
            },
        )
        .await;
    match r {
        Ok(MdsReply::DirDone { failed, .. }) => {
            assert_eq!(failed.len(), 1, "{failed:?}");
        }
        // Refused whole (a stranger's batch in another's lease).
        Err(_) => {}
        Ok(other) => panic!("{other:?}"),
    }
    let at = getattr(&a, f).await;
    assert_eq!(
        (at.mode & 0o7777, at.mtime, at.size),
        (0o644, old, 0),
        "unchanged"
    );
    // The lease given back, a batch sent again (its answer lost) sets no
    // attributes over what others changed since.
    a.call(Op::DirRelease { dir: d }).await.unwrap();
    let again = vec![set(SetAttr {
        mode: Some(0o666),
        ..Default::default()
    })];
    assert_eq!(ops(&a, d, again).await.0, vec![(0, Errno::Perm)]);
    assert_eq!(getattr(&a, f).await.mode & 0o7777, 0o644, "unchanged");
    cl.stop().await;
}

/// The listings a directory read hands out in passing never include a
/// directory another session holds the lease of (its names are the
/// holder's to answer for); once the lease is back they do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_listing_of_a_leased_directory_is_handed_out_in_passing() {
    let cl = Cluster::start(3, spec(512 << 10, 3), PolicyKind::ChildClosest).await;
    let (a, b) = (cl.client(), cl.client());
    let p = mkdir(&a, ROOT_INO, "p").await;
    let d = mkdir(&a, p, "d").await;
    create(&a, d, "inside").await;
    assert!(listed(&b, p).await.contains(&d), "listed when not leased");
    lease(&a, d).await.unwrap();
    assert!(
        !listed(&b, p).await.contains(&d),
        "not while another holds it"
    );
    assert!(
        listed(&a, p).await.contains(&d),
        "the holder's own reads list it"
    );
    a.call(Op::DirRelease { dir: d }).await.unwrap();
    assert!(listed(&b, p).await.contains(&d), "listed again once back");
    // Nor are a leased directory's files handed out as a lookup's
    // neighbours (the lookup of the directory itself names only `p`).
    let inside = match a
        .call(Op::Lookup {
            parent: d,
            name: "inside".into(),
        })
        .await
        .unwrap()
    {
        MdsReply::Found(f) => f.entry.attr.ino,
        other => panic!("{other:?}"),
    };
    assert!(
        near(&b, p, "d").await.contains(&inside),
        "a neighbour when not leased"
    );
    lease(&a, d).await.unwrap();
    assert!(
        !near(&b, p, "d").await.contains(&inside),
        "not while another holds the lease"
    );
    assert!(
        near(&a, p, "d").await.contains(&inside),
        "the holder's own lookups keep it"
    );
    cl.stop().await;
}

/// The directories whose listings a READDIR PREFETCH of `dir` brought.
async fn listed(c: &net::MdsClient, dir: u64) -> Vec<u64> {
    let op = Op::ReaddirPrefetch {
        ino: dir,
        after: None,
        max: 1000,
    };
    match c.call(op).await.unwrap() {
        MdsReply::DirPrefetch { listings, .. } => listings.iter().map(|l| l.ino).collect(),
        other => panic!("{other:?}"),
    }
}

/// The inode numbers a lookup of `name` in `parent` brought as neighbours.
async fn near(c: &net::MdsClient, parent: u64, name: &str) -> Vec<u64> {
    let op = Op::Lookup {
        parent,
        name: name.into(),
    };
    match c.call(op).await.unwrap() {
        MdsReply::Found(f) => f.prefetch.iter().map(|e| e.attr.ino).collect(),
        other => panic!("{other:?}"),
    }
}

/// Client `b` creating a file in `d`, started, and seen waiting for the
/// lease another holds: when it started, and its task.
async fn waiting_creator(
    b: net::MdsClient,
    d: u64,
) -> (std::time::Instant, tokio::task::JoinHandle<u64>) {
    let started = std::time::Instant::now();
    let waiter = tokio::spawn(async move { create(&b, d, "theirs").await });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(
        !waiter.is_finished(),
        "the other client waits for the lease"
    );
    (started, waiter)
}

/// A holder asking for its lease again while another client waits for it
/// is refused (EBUSY), so the lease still lapses: before, each ask made it
/// afresh, and a holder asking every few seconds kept the directory, and
/// everyone waiting on it, for good. The waiter gets in once the lease
/// lapses (two terms unheard).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_cannot_keep_a_waited_for_lease_by_asking_again() {
    let cl = Cluster::start(3, spec(512 << 10, 3), PolicyKind::ChildClosest).await;
    let (a, b) = (cl.client(), cl.client());
    let d = mkdir(&a, ROOT_INO, "d").await;
    lease(&a, d).await.unwrap();
    // Asked again with nobody waiting: renewed, as before.
    lease(&a, d).await.unwrap();
    let (started, waiter) = waiting_creator(b, d).await;
    let mut refused = 0;
    while !waiter.is_finished() {
        match lease(&a, d).await {
            Err(e) => {
                assert_eq!(e.errno, Errno::Busy, "{e}");
                refused += 1;
            }
            Ok(_) => {
                // Granted only once the waiter was through: it finishes
                // at once (a lease granted while it waited would hold it).
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                assert!(
                    waiter.is_finished(),
                    "a waited-for lease was granted to its holder again"
                );
                break;
            }
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "the waiter never got in"
        );
        tokio::time::sleep(std::time::Duration::from_millis(1000)).await;
    }
    waiter.await.unwrap();
    assert!(refused > 0);
    // Giving it back and asking for it again at once (the two sent
    // together, on two connections of one session) does not get it again
    // while another waits: before, the ask after the give-back made it
    // afresh, ahead of the waiter.
    let (a, b) = (cl.client(), cl.client());
    let mut a2 = cl.client();
    a2.session = a.session;
    let e = mkdir(&a, ROOT_INO, "e").await;
    lease(&a, e).await.unwrap();
    let (started, waiter) = waiting_creator(b, e).await;
    while !waiter.is_finished() {
        let (_, again) = tokio::join!(a.call(Op::DirRelease { dir: e }), lease(&a2, e));
        if again.is_ok() {
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            assert!(
                waiter.is_finished(),
                "a lease given back was granted again ahead of a waiter"
            );
            break;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "the waiter never got in"
        );
    }
    waiter.await.unwrap();
    cl.stop().await;
}
