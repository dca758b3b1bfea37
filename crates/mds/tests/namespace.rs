//! The MDS over 127.0.0.1 with real OSDs: every namespace operation and
//! its errors, capabilities (issue, prefetch ranges, revocation observed at
//! the OSD), truncation, the delete queue, and a 16-client storm.
#![expect(clippy::unwrap_used, reason = "tests: a panic is the failure report")]

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use mds::ids::PolicyKind;
use proto::layout::{DATA_PARTITION, LayoutSpec};
use proto::mds::{
    Creds, Errno, FileKind, Found, MdsReply, Op, ROOT_INO, SetAttr, SetTime, XattrMode,
};
use proto::{Command, ErrorCode};

fn found(r: MdsReply) -> Found {
    match r {
        MdsReply::Found(f) => *f,
        other => panic!("expected Found, got {other:?}"),
    }
}

async fn errno(c: &net::MdsClient, op: Op) -> Errno {
    match c.call(op).await {
        Err(net::CallError::Mds(e)) => e.errno,
        other => panic!("expected an error, got {other:?}"),
    }
}

async fn create(c: &net::MdsClient, parent: u64, name: &str) -> Found {
    found(
        c.call(Op::Create {
            parent,
            name: name.into(),
            mode: 0o644,
            exclusive: true,
        })
        .await
        .unwrap(),
    )
}

async fn names(c: &net::MdsClient, dir: u64, page: u32) -> Vec<String> {
    let mut out = Vec::new();
    let mut after = None;
    loop {
        match c
            .call(Op::Readdir {
                ino: dir,
                after: after.clone(),
                max: page,
                plus: true,
            })
            .await
            .unwrap()
        {
            MdsReply::Dir { entries, more } => {
                assert!(
                    entries.iter().all(|e| e.attr.is_some()),
                    "readdirplus gives attributes"
                );
                out.extend(entries.iter().map(|e| e.name.clone()));
                after = entries.last().map(|e| e.name.clone());
                if !more {
                    return out;
                }
            }
            r => panic!("{r:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_namespace_operation_and_error() {
    let cl = Cluster::start(3, spec(512 << 10, 3), PolicyKind::ChildClosest).await;
    let c = cl.client();
    let a = mkdir(&c, ROOT_INO, "a").await;
    assert_eq!(
        errno(
            &c,
            Op::Mkdir {
                parent: ROOT_INO,
                name: "a".into(),
                mode: 0o755
            }
        )
        .await,
        Errno::Exist
    );
    let f = create(&c, a, "f").await;
    let fl = f.entry.layout.clone().unwrap();
    assert_eq!(fl.spec.stripe_count, 3);
    assert_eq!(f.grants.len(), 1);
    assert_eq!(f.grants[0].caps.len(), 3, "one capability per OSD");
    let ino = f.entry.attr.ino;
    assert_eq!(
        errno(
            &c,
            Op::Create {
                parent: a,
                name: "f".into(),
                mode: 0o644,
                exclusive: true
            }
        )
        .await,
        Errno::Exist
    );
    let again = found(
        c.call(Op::Create {
            parent: a,
            name: "f".into(),
            mode: 0o644,
            exclusive: false,
        })
        .await
        .unwrap(),
    );
    assert_eq!(
        again.entry.attr.ino, ino,
        "non-exclusive create opens the existing file"
    );
    // lookups and name checks
    let l = found(
        c.call(Op::Lookup {
            parent: a,
            name: "f".into(),
        })
        .await
        .unwrap(),
    );
    assert_eq!(l.entry.attr.ino, ino);
    assert_eq!(
        errno(
            &c,
            Op::Lookup {
                parent: a,
                name: "nope".into()
            }
        )
        .await,
        Errno::NoEnt
    );
    assert_eq!(
        errno(
            &c,
            Op::Lookup {
                parent: ino,
                name: "x".into()
            }
        )
        .await,
        Errno::NotDir
    );
    for (bad, want) in [
        ("x/y", Errno::Inval),
        ("", Errno::Inval),
        ("..", Errno::Inval),
        ("a\0b", Errno::Inval),
    ] {
        assert_eq!(
            errno(
                &c,
                Op::Create {
                    parent: a,
                    name: bad.into(),
                    mode: 0o644,
                    exclusive: true
                }
            )
            .await,
            want,
            "{bad:?}"
        );
    }
    let long = "n".repeat(256);
    assert_eq!(
        errno(
            &c,
            Op::Mkdir {
                parent: a,
                name: long,
                mode: 0o755
            }
        )
        .await,
        Errno::NameTooLong
    );
    assert_eq!(
        errno(&c, Op::GetAttr { ino: 0xdead_beef }).await,
        Errno::Stale
    );
    // setattr: chmod, chown, utimens, truncate up
    let set = SetAttr {
        mode: Some(0o600),
        uid: Some(5),
        gid: Some(6),
        atime: Some(SetTime::At(123)),
        mtime: Some(SetTime::Now),
        size: Some(10_000),
        via_handle: false,
    };
    let at = match c.call(Op::SetAttr { ino, set }).await.unwrap() {
        MdsReply::Attr(a) => a,
        r => panic!("{r:?}"),
    };
    assert_eq!(
        (at.mode, at.uid, at.gid, at.atime, at.size),
        (0o600, 5, 6, 123, 10_000)
    );
    assert_eq!(
        errno(
            &c,
            Op::SetAttr {
                ino: a,
                set: SetAttr {
                    size: Some(0),
                    ..Default::default()
                }
            }
        )
        .await,
        Errno::IsDir
    );
    // symlinks
    let s = found(
        c.call(Op::Symlink {
            parent: a,
            name: "l".into(),
            target: "f".into(),
        })
        .await
        .unwrap(),
    );
    assert_eq!(s.entry.attr.kind, FileKind::Symlink);
    assert_eq!(
        c.call(Op::Readlink {
            ino: s.entry.attr.ino
        })
        .await
        .unwrap(),
        MdsReply::Target("f".into())
    );
    assert_eq!(errno(&c, Op::Readlink { ino }).await, Errno::Inval);
    // hard links
    let g = found(
        c.call(Op::Link {
            ino,
            parent: a,
            name: "g".into(),
        })
        .await
        .unwrap(),
    );
    assert_eq!(g.entry.attr.nlink, 2);
    assert_eq!(
        errno(
            &c,
            Op::Link {
                ino: a,
                parent: ROOT_INO,
                name: "a2".into()
            }
        )
        .await,
        Errno::Perm
    );
    assert_eq!(
        errno(
            &c,
            Op::Link {
                ino,
                parent: a,
                name: "g".into()
            }
        )
        .await,
        Errno::Exist
    );
    // readdir, paginated, sorted
    assert_eq!(names(&c, a, 2).await, vec!["f", "g", "l"]);
    assert_eq!(getattr(&c, a).await.size, 3);
    // rename: across directories, replacing, and every refusal
    let b = mkdir(&c, ROOT_INO, "b").await;
    c.call(Op::Rename {
        parent: a,
        name: "g".into(),
        new_parent: b,
        new_name: "g2".into(),
        noreplace: false,
    })
    .await
    .unwrap();
    assert_eq!(names(&c, a, 10).await, vec!["f", "l"]);
    assert_eq!(names(&c, b, 10).await, vec!["g2"]);
    let h = create(&c, b, "h").await.entry.attr.ino;
    assert_eq!(
        errno(
            &c,
            Op::Rename {
                parent: b,
                name: "g2".into(),
                new_parent: b,
                new_name: "h".into(),
                noreplace: true
            }
        )
        .await,
        Errno::Exist
    );
    c.call(Op::Rename {
        parent: b,
        name: "g2".into(),
        new_parent: b,
        new_name: "h".into(),
        noreplace: false,
    })
    .await
    .unwrap();
    assert_eq!(names(&c, b, 10).await, vec!["h"]);
    assert_eq!(
        errno(&c, Op::GetAttr { ino: h }).await,
        Errno::Stale,
        "replaced file is gone"
    );
    assert_eq!(
        getattr(&c, ino).await.nlink,
        2,
        "still two names: a/f and b/h"
    );
    let sub = mkdir(&c, a, "sub").await;
    let _ = mkdir(&c, sub, "deeper").await;
    assert_eq!(
        errno(
            &c,
            Op::Rename {
                parent: ROOT_INO,
                name: "a".into(),
                new_parent: sub,
                new_name: "x".into(),
                noreplace: false
            }
        )
        .await,
        Errno::Inval
    );
    assert_eq!(
        errno(
            &c,
            Op::Rename {
                parent: a,
                name: "f".into(),
                new_parent: ROOT_INO,
                new_name: "b".into(),
                noreplace: false
            }
        )
        .await,
        Errno::IsDir
    );
    assert_eq!(
        errno(
            &c,
            Op::Rename {
                parent: ROOT_INO,
                name: "b".into(),
                new_parent: a,
                new_name: "f".into(),
                noreplace: false
            }
        )
        .await,
        Errno::NotDir
    );
    assert_eq!(
        errno(
            &c,
            Op::Rename {
                parent: ROOT_INO,
                name: "b".into(),
                new_parent: a,
                new_name: "sub".into(),
                noreplace: false
            }
        )
        .await,
        Errno::NotEmpty
    );
    assert_eq!(
        errno(
            &c,
            Op::Rename {
                parent: a,
                name: "missing".into(),
                new_parent: a,
                new_name: "x".into(),
                noreplace: false
            }
        )
        .await,
        Errno::NoEnt
    );
    // a directory moved over an empty one; nlinks follow
    let e = mkdir(&c, ROOT_INO, "empty").await;
    c.call(Op::Rename {
        parent: a,
        name: "sub".into(),
        new_parent: ROOT_INO,
        new_name: "empty".into(),
        noreplace: false,
    })
    .await
    .unwrap();
    assert_eq!(errno(&c, Op::GetAttr { ino: e }).await, Errno::Stale);
    assert_eq!(getattr(&c, a).await.nlink, 2);
    // unlink / rmdir
    assert_eq!(
        errno(
            &c,
            Op::Unlink {
                parent: ROOT_INO,
                name: "a".into()
            }
        )
        .await,
        Errno::IsDir
    );
    assert_eq!(
        errno(
            &c,
            Op::Rmdir {
                parent: a,
                name: "f".into()
            }
        )
        .await,
        Errno::NotDir
    );
    assert_eq!(
        errno(
            &c,
            Op::Rmdir {
                parent: ROOT_INO,
                name: "a".into()
            }
        )
        .await,
        Errno::NotEmpty
    );
    c.call(Op::Unlink {
        parent: a,
        name: "l".into(),
    })
    .await
    .unwrap();
    assert_eq!(
        errno(
            &c,
            Op::Unlink {
                parent: a,
                name: "l".into()
            }
        )
        .await,
        Errno::NoEnt
    );
    // extended attributes
    c.call(Op::SetXattr {
        ino,
        name: "user.k".into(),
        value: b"v1".to_vec(),
        mode: XattrMode::Create,
    })
    .await
    .unwrap();
    assert_eq!(
        errno(
            &c,
            Op::SetXattr {
                ino,
                name: "user.k".into(),
                value: b"v".to_vec(),
                mode: XattrMode::Create
            }
        )
        .await,
        Errno::Exist
    );
    assert_eq!(
        errno(
            &c,
            Op::SetXattr {
                ino,
                name: "user.none".into(),
                value: b"v".to_vec(),
                mode: XattrMode::Replace
            }
        )
        .await,
        Errno::NoData
    );
    assert_eq!(
        c.call(Op::GetXattr {
            ino,
            name: "user.k".into()
        })
        .await
        .unwrap(),
        MdsReply::Xattr(b"v1".to_vec())
    );
    assert_eq!(
        c.call(Op::ListXattr { ino }).await.unwrap(),
        MdsReply::XattrNames(vec!["user.k".into()])
    );
    c.call(Op::RemoveXattr {
        ino,
        name: "user.k".into(),
    })
    .await
    .unwrap();
    assert_eq!(
        errno(
            &c,
            Op::GetXattr {
                ino,
                name: "user.k".into()
            }
        )
        .await,
        Errno::NoData
    );
    assert_eq!(
        errno(
            &c,
            Op::SetXattr {
                ino,
                name: "user.big".into(),
                value: vec![0; 70_000],
                mode: XattrMode::Either
            }
        )
        .await,
        Errno::Range
    );
    // permissions of an ordinary user
    let user = Creds {
        uid: 1000,
        gid: 1000,
        groups: vec![],
    };
    assert_eq!(
        c.call_as(
            user.clone(),
            Op::Mkdir {
                parent: ROOT_INO,
                name: "u".into(),
                mode: 0o755
            }
        )
        .await
        .unwrap_err()
        .errno(),
        13
    );
    let private = mkdir(&c, ROOT_INO, "private").await;
    c.call(Op::SetAttr {
        ino: private,
        set: SetAttr {
            mode: Some(0o700),
            ..Default::default()
        },
    })
    .await
    .unwrap();
    let _ = create(&c, private, "secret").await;
    assert_eq!(
        c.call_as(
            user.clone(),
            Op::Lookup {
                parent: private,
                name: "secret".into()
            }
        )
        .await
        .unwrap_err()
        .errno(),
        13
    );
    assert_eq!(
        c.call_as(user.clone(), Op::Open { ino, write: false })
            .await
            .unwrap_err()
            .errno(),
        13,
        "0600 file of uid 5"
    );
    assert_eq!(
        c.call_as(
            user.clone(),
            Op::SetAttr {
                ino,
                set: SetAttr {
                    mode: Some(0o777),
                    ..Default::default()
                }
            }
        )
        .await
        .unwrap_err()
        .errno(),
        1
    );
    // A length commit from a session that holds no handle: its owner may
    // (a close answered early is redone so after an MDS restart, before
    // any hold is known again), no one else without the right to write.
    let ro = create(&c, ROOT_INO, "read-only, of uid 5")
        .await
        .entry
        .attr
        .ino;
    c.call(Op::SetAttr {
        ino: ro,
        set: SetAttr {
            mode: Some(0o444),
            uid: Some(5),
            ..Default::default()
        },
    })
    .await
    .unwrap();
    let fresh = cl.client();
    let commit = Op::CommitSize {
        ino: ro,
        size: 77_777,
        mtime: 0,
    };
    assert_eq!(
        fresh
            .call_as(user.clone(), commit.clone())
            .await
            .unwrap_err()
            .errno(),
        13,
        "a commit by a non-owner who may not write"
    );
    let owner = Creds {
        uid: 5,
        gid: 5,
        groups: vec![],
    };
    match fresh.call_as(owner, commit).await.unwrap() {
        MdsReply::Attr(a) => assert_eq!(a.size, 77_777),
        r => panic!("{r:?}"),
    }
    // statfs, map, layouts
    match c.call(Op::Statfs).await.unwrap() {
        MdsReply::Statfs(s) => {
            assert!(s.capacity > 0);
            assert_eq!(s.name_max, 255);
        }
        r => panic!("{r:?}"),
    }
    match c.call(Op::GetMap { epoch: None }).await.unwrap() {
        MdsReply::Map(m) => assert_eq!(m.osds.len(), 3),
        r => panic!("{r:?}"),
    }
    let d = mkdir(&c, ROOT_INO, "striped").await;
    c.call(Op::SetLayout {
        ino: d,
        spec: spec(64 << 10, 2),
    })
    .await
    .unwrap();
    assert_eq!(
        errno(
            &c,
            Op::SetLayout {
                ino: d,
                spec: spec(1000, 2)
            }
        )
        .await,
        Errno::Inval
    );
    let sub = mkdir(&c, d, "inherits").await;
    let nf = create(&c, sub, "x").await;
    assert_eq!(nf.entry.layout.unwrap().spec, spec(64 << 10, 2));
    match c.call(Op::GetLayout { ino: d }).await.unwrap() {
        MdsReply::Layout {
            spec: s,
            layout: None,
        } => assert_eq!(s, spec(64 << 10, 2)),
        r => panic!("{r:?}"),
    }
    // resolve a path
    match c
        .call(Op::Resolve {
            path: "/striped/inherits/x".into(),
        })
        .await
        .unwrap()
    {
        MdsReply::Path(p) => assert_eq!(p.last().unwrap().attr.ino, nf.entry.attr.ino),
        r => panic!("{r:?}"),
    }
    let m = cl.mds.as_ref().unwrap().mds.clone();
    check_clean(&m);
    // the counts of mandatory and non-mandatory requests are kept
    let st = m.status().unwrap();
    assert!(st.mandatory > 20 && st.non_mandatory > 10, "{st:?}");
    cl.stop().await;
}

/// Writes one stripe object of a file with the capability the MDS granted.
async fn write_stripe(
    cl: &Cluster,
    f: &Found,
    osd: u32,
    data: &[u8],
) -> Result<(), net::ConnError> {
    let oid = f.entry.layout.as_ref().unwrap().objsets[0];
    let cap = f.grants[0].cap_for(osd).unwrap();
    let c = cl.admin_osd_client(osd);
    c.run(
        Some(cap),
        Command::CreateAndWrite {
            pid: DATA_PARTITION,
            oid,
        },
        Bytes::copy_from_slice(data),
    )
    .await
    .map(|_| ())
}

/// After a mass removal the ids next to a live file are orphans (held
/// open here, so they stay): a prefetch reads a bounded run of them
/// (`NEIGHBOUR_SCAN` records per neighbour it may return) instead of every
/// one, so a lookup there does not cost O(orphans); a live file within
/// the run is still prefetched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefetch_reads_a_bounded_run_of_orphans() {
    let cl = Cluster::start_holding(1, spec(4096, 1), PolicyKind::CreateOrder).await;
    let c = cl.client();
    let dir = mkdir(&c, ROOT_INO, "d").await;
    // near, 20 orphans, far, 200 orphans, last: ids in create order.
    let mut names = vec!["near".to_string()];
    names.extend((0..20).map(|i| format!("o{i}")));
    names.push("far".into());
    names.extend((20..220).map(|i| format!("o{i}")));
    names.push("last".into());
    let mut ino = Vec::new();
    for n in &names {
        ino.push(create(&c, dir, n).await.entry.attr.ino);
    }
    assert!(ino.windows(2).all(|w| w[0] < w[1]), "ids in create order");
    for n in names.iter().filter(|n| n.starts_with('o')) {
        c.call(Op::Unlink {
            parent: dir,
            name: n.clone(),
        })
        .await
        .unwrap();
    }
    let prefetched = |name: &str| {
        let c = &c;
        let name = name.to_string();
        async move {
            let f = found(c.call(Op::Lookup { parent: dir, name }).await.unwrap());
            f.prefetch
                .into_iter()
                .map(|e| e.name)
                .collect::<Vec<String>>()
        }
    };
    // 32 neighbours at most: 96 records a side. "far" is 21 records from
    // "near" and 201 from "last".
    let from_near = prefetched("near").await;
    assert!(from_near.contains(&"far".to_string()), "{from_near:?}");
    assert!(!from_near.iter().any(|n| n.starts_with('o')), "no orphan");
    let from_last = prefetched("last").await;
    assert!(
        !from_last.contains(&"far".to_string()),
        "a neighbour past 200 orphans is not looked for: {from_last:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capabilities_revocation_truncation_and_deletion_at_the_osds() {
    let cl = Cluster::start(3, spec(4096, 3), PolicyKind::ChildClosest).await;
    let c = cl.client();
    let f = create(&c, ROOT_INO, "data").await;
    let l = f.entry.layout.clone().unwrap();
    let map = match c
        .call(Op::GetMap {
            epoch: Some(l.map_epoch),
        })
        .await
        .unwrap()
    {
        MdsReply::Map(m) => m,
        r => panic!("{r:?}"),
    };
    let osds = map.place(l.objsets[0], 3);
    assert_eq!(osds.len(), 3);
    // 3 stripe objects of 4096, 4096, 2000 bytes = a 10192-byte file
    for (j, &o) in osds.iter().enumerate() {
        let len = if j == 2 { 2000 } else { 4096 };
        write_stripe(&cl, &f, o, &vec![j as u8 + 1; len])
            .await
            .unwrap();
    }
    c.call(Op::CommitSize {
        ino: f.entry.attr.ino,
        size: 10_192,
        mtime: 1,
    })
    .await
    .unwrap();
    // chmod narrows permissions: the old write capability is revoked at the OSD
    c.call(Op::SetAttr {
        ino: f.entry.attr.ino,
        set: SetAttr {
            mode: Some(0o444),
            ..Default::default()
        },
    })
    .await
    .unwrap();
    let oc = cl.admin_osd_client(osds[0]);
    let old = f.grants[0].cap_for(osds[0]).unwrap();
    let e = oc
        .run(
            Some(old),
            Command::Write {
                pid: DATA_PARTITION,
                oid: l.objsets[0],
                offset: 0,
            },
            Bytes::from_static(b"x"),
        )
        .await
        .unwrap_err();
    match e {
        net::ConnError::Remote(w) => assert_eq!(w.code, ErrorCode::CapRevoked, "{w}"),
        e => panic!("{e}"),
    }
    // a fresh read capability works
    let r = found(
        c.call(Op::Open {
            ino: f.entry.attr.ino,
            write: false,
        })
        .await
        .unwrap(),
    );
    let data = oc
        .read(
            r.grants[0].cap_for(osds[0]),
            DATA_PARTITION,
            l.objsets[0],
            0,
            8192,
        )
        .await
        .unwrap();
    assert_eq!(&data[..], &vec![1u8; 4096][..]);
    // truncate down to 5000: stripe 0 keeps 4096, stripe 1 keeps 904, stripe 2 nothing
    c.call(Op::SetAttr {
        ino: f.entry.attr.ino,
        set: SetAttr {
            size: Some(5000),
            ..Default::default()
        },
    })
    .await
    .unwrap();
    let r = found(
        c.call(Op::Open {
            ino: f.entry.attr.ino,
            write: false,
        })
        .await
        .unwrap(),
    );
    for (j, &o) in osds.iter().enumerate() {
        let oc = cl.admin_osd_client(o);
        let got = oc
            .read(
                r.grants[0].cap_for(o),
                DATA_PARTITION,
                l.objsets[0],
                0,
                8192,
            )
            .await
            .unwrap();
        assert_eq!(got.len(), [4096, 904, 0][j], "stripe {j}");
    }
    assert_eq!(getattr(&c, f.entry.attr.ino).await.size, 5000);
    // prefetch: neighbours come with one range capability that works at the OSD
    let dir = mkdir(&c, ROOT_INO, "many").await;
    let mut files = Vec::new();
    for i in 0..40 {
        let nf = create(&c, dir, &format!("f{i:02}")).await;
        let o = map.place(nf.entry.layout.as_ref().unwrap().objsets[0], 3)[0];
        write_stripe(&cl, &nf, o, b"hello").await.unwrap();
        files.push(nf);
    }
    let got = found(
        c.call(Op::Lookup {
            parent: dir,
            name: "f10".into(),
        })
        .await
        .unwrap(),
    );
    assert_eq!(got.prefetch.len(), 32);
    assert!(
        got.prefetch
            .iter()
            .all(|e| e.attr.ino != got.entry.attr.ino)
    );
    assert_eq!(
        got.prefetch_grants.len(),
        1,
        "rights agree: one range capability"
    );
    let g = &got.prefetch_grants[0];
    let other = got
        .prefetch
        .iter()
        .find(|e| e.name == "f11")
        .expect("the next sibling is prefetched");
    let oid = other.layout.as_ref().unwrap().objsets[0];
    assert!(g.covers(oid, proto::rights::READ));
    let o = map.place(oid, 3)[0];
    let oc = cl.admin_osd_client(o);
    assert_eq!(
        &oc.read(g.cap_for(o), DATA_PARTITION, oid, 0, 100)
            .await
            .unwrap()[..],
        b"hello"
    );
    let mut c0 = cl.client();
    c0.prefetch = 0;
    assert!(
        found(
            c0.call(Op::Lookup {
                parent: dir,
                name: "f10".into()
            })
            .await
            .unwrap()
        )
        .prefetch
        .is_empty()
    );
    // unlink: the delete queue removes the objects from the OSDs
    let before = cl.all_objects().await.len();
    c.call(Op::Unlink {
        parent: ROOT_INO,
        name: "data".into(),
    })
    .await
    .unwrap();
    let m = cl.mds.as_ref().unwrap().mds.clone();
    assert!(drained(&m, 200).await);
    assert_eq!(cl.all_objects().await.len(), before - 3);
    check_clean(&m);
    cl.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_queue_survives_an_osd_down_and_an_mds_restart() {
    let mut cl = Cluster::start(2, spec(4096, 2), PolicyKind::CreateOrder).await;
    let c = cl.client();
    let f = create(&c, ROOT_INO, "doomed").await;
    let l = f.entry.layout.clone().unwrap();
    let map = match c.call(Op::GetMap { epoch: None }).await.unwrap() {
        MdsReply::Map(m) => m,
        r => panic!("{r:?}"),
    };
    for o in map.place(l.objsets[0], 2) {
        write_stripe(&cl, &f, o, b"bytes").await.unwrap();
    }
    // OSD 1 goes away; the unlink still succeeds, the deletion waits
    let down = cl.osds[1].take().unwrap();
    down.stop().await.unwrap();
    c.call(Op::Unlink {
        parent: ROOT_INO,
        name: "doomed".into(),
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let m = cl.mds.as_ref().unwrap().mds.clone();
    assert_eq!(
        m.delete_queue().unwrap().len(),
        1,
        "kept while an OSD is down"
    );
    drop(m);
    // restart the MDS, then the OSD
    let dir = cl.mds_dir();
    cl.mds.take().unwrap().stop().await;
    let m2 = local::LocalMds::start(&dir, &cl.mds_addr).await.unwrap();
    assert_eq!(
        m2.mds.delete_queue().unwrap().len(),
        1,
        "the queue is durable"
    );
    cl.mds = Some(m2);
    let o = local::LocalOsd::start(
        &local::osd_dir(cl.dir.path(), 1),
        "127.0.0.1:0",
        Some(cl.mds_addr.clone()),
    )
    .await
    .unwrap();
    cl.osds[1] = Some(o);
    let m = cl.mds.as_ref().unwrap().mds.clone();
    assert!(drained(&m, 300).await, "drained once the OSD is back");
    assert!(cl.all_objects().await.is_empty(), "no orphans");
    check_clean(&m);
    cl.stop().await;
}

/// Security finding 4: a prefetch range capability covers only the ids of
/// the entries it came with, split where the caller may not read a file
/// and wherever ids are not consecutive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefetch_ranges_never_cover_what_the_caller_may_not_read() {
    let cl = Cluster::start(2, spec(4096, 1), PolicyKind::ChildClosest).await;
    let c = cl.client();
    let dir = mkdir(&c, ROOT_INO, "mixed").await;
    let mut inos = Vec::new();
    for i in 0..12 {
        inos.push(create(&c, dir, &format!("m{i:02}")).await.entry.attr.ino);
    }
    // m05 is the owner's only; m08 is removed (a hole in the ids).
    c.call(Op::SetAttr {
        ino: inos[5],
        set: SetAttr {
            mode: Some(0o600),
            ..Default::default()
        },
    })
    .await
    .unwrap();
    c.call(Op::Unlink {
        parent: dir,
        name: "m08".into(),
    })
    .await
    .unwrap();
    let user = Creds {
        uid: 1000,
        gid: 1000,
        groups: vec![],
    };
    let got = found(
        c.call_as(
            user,
            Op::Lookup {
                parent: dir,
                name: "m02".into(),
            },
        )
        .await
        .unwrap(),
    );
    assert!(!got.prefetch_grants.is_empty());
    let readable: Vec<u64> = got
        .prefetch
        .iter()
        .chain(std::iter::once(&got.entry))
        .filter(|e| e.attr.mode & 0o004 != 0)
        .map(|e| proto::layout::data_oid(e.attr.ino))
        .collect();
    for g in &got.prefetch_grants {
        for oid in g.lo..=g.hi {
            assert!(
                readable.contains(&oid),
                "range {:#x}..={:#x} covers {oid:#x}, which is not a readable prefetched entry",
                g.lo,
                g.hi
            );
        }
    }
    let covered = |ino: u64| {
        let oid = proto::layout::data_oid(ino);
        got.prefetch_grants
            .iter()
            .any(|g| g.covers(oid, proto::rights::READ))
    };
    assert!(!covered(inos[5]), "the unreadable file is covered");
    assert!(!covered(inos[8]), "the removed file's id is covered");
    assert!(covered(inos[3]) && covered(inos[10]));
}

/// Security finding 8: one EXTEND LAYOUT cannot give a file more object
/// sets than an open can reasonably sign grants for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_layout_is_bounded() {
    let bounded = LayoutSpec {
        object_size: 4096,
        ..spec(4096, 1)
    };
    let cl = Cluster::start(1, bounded, PolicyKind::ChildClosest).await;
    let c = cl.client();
    let f = create(&c, ROOT_INO, "sparse").await;
    let ino = f.entry.attr.ino;
    let big = mds::ns::MAX_OBJSETS;
    assert_eq!(
        errno(&c, Op::ExtendLayout { ino, objset: big }).await,
        Errno::FBig
    );
    assert_eq!(
        errno(
            &c,
            Op::ExtendLayout {
                ino,
                objset: 1 << 20
            }
        )
        .await,
        Errno::FBig
    );
    let got = found(c.call(Op::ExtendLayout { ino, objset: 63 }).await.unwrap());
    assert_eq!(got.entry.layout.as_ref().unwrap().objsets.len(), 64);
    assert_eq!(got.grants.len(), 64, "one grant per object set");
    let open = found(c.call(Op::Open { ino, write: false }).await.unwrap());
    assert_eq!(open.grants.len(), 64);
}

/// An open carries capabilities for the OSDs a file's copies are on, not
/// for every OSD of the cluster: with 6 OSDs, one stripe and two copies,
/// each grant names exactly the two OSDs its object set's copies are on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_name_only_the_osds_a_files_copies_are_on() {
    let layout = LayoutSpec {
        replicas: 2,
        min_replicas: 1,
        object_size: 1 << 20,
        ..spec(1 << 20, 1)
    };
    let cl = Cluster::start(6, layout, PolicyKind::ChildClosest).await;
    let c = cl.client();
    let f = create(&c, ROOT_INO, "f").await;
    let ino = f.entry.attr.ino;
    // A second object set, placed on its own pair of OSDs.
    let MdsReply::Found(g) = c.call(Op::ExtendLayout { ino, objset: 1 }).await.unwrap() else {
        panic!("no layout answer")
    };
    let l = g.entry.layout.clone().unwrap();
    assert_eq!(l.objsets.len(), 2);
    let opened = found(c.call(Op::Open { ino, write: true }).await.unwrap());
    assert_eq!(opened.grants.len(), 2);
    for (k, grant) in opened.grants.iter().enumerate() {
        let mut named: Vec<u32> = grant.caps.iter().map(|(o, _)| *o).collect();
        named.sort_unstable();
        let mut homes: Vec<u32> = l.homes[k].stripes[0].fresh.clone();
        homes.sort_unstable();
        assert_eq!(homes.len(), 2, "two copies of object set {k}");
        assert_eq!(named, homes, "object set {k}");
        assert!(grant.covers(l.objsets[k], proto::rights::WRITE));
    }
    cl.stop().await;
}
