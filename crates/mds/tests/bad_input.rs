//! Bad input on every surface the MDS adds: the wire (garbage, wrong
//! handshakes, undecodable requests), OSD reports (forged, unknown, replayed),
//! its config file, its database file, formatting over an existing one.
//! Each gets a clear error and loses nothing.
#![expect(clippy::unwrap_used, reason = "tests: a panic is the failure report")]

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use mds::ids::{Geometry, IdPolicy, PolicyKind};
use net::frame_io::{frame, read_frame, write_frame};
use proto::mds::{Creds, Errno, MDS_ID, MdsReply, MdsResponse, Op, ROOT_INO};
use proto::msg::{Hello, Welcome, decode};
use proto::{Kind, Limits, PROTOCOL_VERSION};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

const T: Duration = Duration::from_secs(5);

fn limits() -> Limits {
    Limits {
        max_header: 1 << 20,
        max_payload: 0,
    }
}

async fn hello(addr: &str, cluster: &str, id: u32) -> (TcpStream, Welcome) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let h = Hello {
        version: PROTOCOL_VERSION,
        cluster_id: cluster.into(),
        osd_id: id,
        client: "raw".into(),
        credential: proto::auth::Credential::None,
        nonce: [1; 16],
        encrypt: false,
    };
    write_frame(&mut s, &frame(Kind::Hello, 0, 0, &h, Bytes::new()))
        .await
        .unwrap();
    let f = read_frame(&mut s, &limits(), T, T, None).await.unwrap();
    (s, decode::<Welcome>(&f.header).unwrap())
}

/// A small create-order MDS format for the tests that format by hand.
fn format_options() -> mds::FormatOptions {
    mds::FormatOptions {
        cluster_id: CLUSTER.into(),
        policy: IdPolicy::new(PolicyKind::CreateOrder, Geometry::default()).unwrap(),
        layout: spec(4096, 1),
        wal_bytes: 1 << 20,
        namespace: Default::default(),
        dir_protocol: String::new(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wire_refuses_garbage_and_wrong_peers_and_keeps_serving() {
    let cl = Cluster::start(1, spec(4096, 1), PolicyKind::ChildClosest).await;
    let addr = cl.mds_addr.clone();
    // garbage before the handshake: closed, nothing else affected
    let mut g = TcpStream::connect(&addr).await.unwrap();
    g.write_all(b"GET / HTTP/1.1\r\n\r\nnot a frame at all")
        .await
        .unwrap();
    assert!(read_frame(&mut g, &limits(), T, T, None).await.is_err());
    // wrong cluster, and a Hello naming an OSD instead of the MDS
    match hello(&addr, "other", MDS_ID).await.1 {
        Welcome::Refused(e) => {
            assert!(e.message.contains("cluster"), "{e}");
            assert!(
                !e.message.contains(CLUSTER),
                "the real id is not echoed: {e}"
            );
        }
        w => panic!("{w:?}"),
    }
    match hello(&addr, CLUSTER, 3).await.1 {
        Welcome::Refused(e) => assert!(e.message.contains("not OSD 3"), "{e}"),
        w => panic!("{w:?}"),
    }
    // no credential: refused, naming what to pass
    match hello(&addr, CLUSTER, MDS_ID).await.1 {
        Welcome::Refused(e) => {
            assert_eq!(e.code, proto::ErrorCode::Unauthenticated);
            assert!(e.message.contains("--key-file"), "{e}");
        }
        w => panic!("{w:?}"),
    }
    // an undecodable request gets EPROTO, and the connection keeps working
    let cfg = net::ConnConfig::new(CLUSTER, MDS_ID, std::sync::Arc::new(cl.admin()));
    let mut s = net::raw::RawSession::open(&addr, &cfg, &cl.admin())
        .await
        .unwrap();
    let junk = proto::Frame {
        kind: Kind::Request,
        opcode: 0x100,
        tag: 7,
        header: Bytes::from_static(&[0xff, 0xff, 0xff, 0x01, 0x02]),
        payload: Bytes::new(),
    };
    s.send(junk).await.unwrap();
    let f = s.recv(T).await.unwrap();
    assert_eq!(f.tag, 7);
    let r: MdsResponse = decode(&f.header).unwrap();
    assert_eq!(r.result.unwrap_err().errno, Errno::Proto);
    let good = proto::mds::MdsRequest {
        creds: Creds::root(),
        prefetch: 0,
        session: 0,
        early: false,
        op: Op::GetAttr { ino: ROOT_INO },
    };
    s.send(frame(Kind::Request, 0x100, 8, &good, Bytes::new()))
        .await
        .unwrap();
    let f = s.recv(T).await.unwrap();
    let r: MdsResponse = decode(&f.header).unwrap();
    assert!(matches!(r.result, Ok(MdsReply::Attr(_))));
    // and ordinary clients were never disturbed
    let c = cl.client();
    mkdir(&c, ROOT_INO, "still-fine").await;
    cl.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_unknown_and_replayed_osd_reports_are_refused() {
    let cl = Cluster::start(1, spec(4096, 1), PolicyKind::ChildClosest).await;
    let c = cl.client();
    let epoch = |r: MdsReply| match r {
        MdsReply::Status(s) => s.epoch,
        r => panic!("{r:?}"),
    };
    let before = epoch(c.call(Op::Status).await.unwrap());
    let mut r = cl.report("10.9.9.9:1", proto::clock::now_ms() + 1000, "test-host");
    // forged: signed with the wrong key
    r.sign(CLUSTER, &[7; 32]);
    // a client principal may not report at all
    let e = c.call(Op::Report(r.clone())).await.unwrap_err();
    assert!(e.to_string().contains("only OSDs report"), "{e}");
    // reports come over a connection authenticated as that OSD
    let c = cl.osd_mds_client(0);
    let e = c.call(Op::Report(r.clone())).await.unwrap_err();
    assert_eq!(e.errno(), 13, "{e}");
    assert!(e.to_string().contains("MAC"), "{e}");
    // unknown OSD id
    let mut u = r.clone();
    u.osd_id = 42;
    let e = c.call(Op::Report(u)).await.unwrap_err();
    assert!(e.to_string().contains("may not report for OSD 42"), "{e}");
    // an OSD whose key the MDS does not hold cannot even connect
    let stranger = net::MdsClient::new(
        &cl.mds_addr,
        CLUSTER,
        net::auth::Identity::principal("osd.42", 1, [7; 32]),
        1,
    );
    let e = stranger.call(Op::Status).await.unwrap_err();
    assert!(e.to_string().contains("could not prove"), "{e}");
    // replayed: a correctly signed report older than one already seen
    let key = cl.osd_key(0);
    let mut old = r.clone();
    old.addr = cl.osd0_addr();
    old.at_ms = proto::clock::now_ms() - 10_000;
    old.sign(CLUSTER, &key);
    let e = c.call(Op::Report(old.clone())).await.unwrap_err();
    assert_eq!(e.errno(), 13, "{e}");
    assert!(e.to_string().contains("replayed"), "{e}");
    // a clock far off is refused too
    old.at_ms = 1_000;
    old.sign(CLUSTER, &key);
    let e = c.call(Op::Report(old)).await.unwrap_err();
    assert!(e.to_string().contains("clock"), "{e}");
    // nothing changed: no new map epoch, the OSD keeps its address
    assert_eq!(epoch(c.call(Op::Status).await.unwrap()), before);
    cl.stop().await;
}

/// Copies of one signed report racing each other: exactly one passes the
/// replay check (the check and the claim of its time are one step).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_copies_of_one_report_pass_once() {
    let cl = Cluster::start(1, spec(4096, 1), PolicyKind::ChildClosest).await;
    let key = cl.osd_key(0);
    for round in 0..5u64 {
        let mut r = cl.report(
            &cl.osd0_addr(),
            proto::clock::now_ms() + 60_000 + round,
            "test-host",
        );
        r.sign(CLUSTER, &key);
        let clients: Vec<_> = (0..16)
            .map(|_| std::sync::Arc::new(cl.osd_mds_client(0)))
            .collect();
        let tasks: Vec<_> = clients
            .iter()
            .map(|c| {
                let (c, r) = (c.clone(), r.clone());
                tokio::spawn(async move { c.call(Op::Report(r)).await })
            })
            .collect();
        let mut passed = 0;
        for t in tasks {
            match t.await.unwrap() {
                Ok(_) => passed += 1,
                Err(e) => assert!(e.to_string().contains("replayed"), "{e}"),
            }
        }
        assert_eq!(passed, 1, "round {round}: one copy of a report passes");
    }
    cl.stop().await;
}

/// `status` counts every queued delete (not the worker's batch of 10,000),
/// and a malformed queue key is an error naming it, never sequence 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_counts_the_whole_delete_queue_and_refuses_a_bad_key() {
    use mds::kv::T as Table;
    let dir = tempfile::tempdir().unwrap();
    let opts = format_options();
    mds::service::format(dir.path(), &opts).unwrap();
    // No delete worker runs on this MDS: the queue stays as written.
    let m = mds::Mds::open(dir.path()).unwrap();
    let job = postcard::to_allocvec(&mds::records::DeleteJob {
        ino: 7,
        layout: proto::layout::Layout {
            spec: spec(4096, 1),
            map_epoch: 1,
            objsets: vec![7],
            homes: Vec::new(),
        },
    })
    .unwrap();
    let n = mds::service::DELETE_BATCH as u64 + 250;
    let j = job.clone();
    m.kv.write(move |tx| {
        for seq in 1..=n {
            tx.put(Table::DeleteQueue, &seq.to_be_bytes(), &j)?;
        }
        Ok(())
    })
    .await
    .unwrap();
    assert_eq!(m.status().unwrap().delete_queue, n);
    assert_eq!(m.delete_queue().unwrap().len(), mds::service::DELETE_BATCH);
    m.kv.write(move |tx| tx.put(Table::DeleteQueue, &[0], &job))
        .await
        .unwrap();
    let e = m.status().unwrap_err();
    assert!(e.message.contains("key of 1 bytes, expected 8"), "{e}");
    // It sorts first, so the worker's batch meets it too.
    let e = m.delete_queue().map(|q| q.len()).unwrap_err();
    assert!(e.message.contains("key of 1 bytes"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_config_damaged_database_and_format_over_are_clear_errors() {
    let cl = Cluster::start(1, spec(4096, 1), PolicyKind::ChildClosest).await;
    let c = cl.client();
    mkdir(&c, ROOT_INO, "keep-me").await;
    let dir = cl.mds_dir();
    let mut cl = cl;
    cl.mds.take().unwrap().stop().await;
    // formatting over an existing file system is refused
    let opts = format_options();
    let e = mds::service::format(&dir, &opts).unwrap_err();
    assert_eq!(e.errno, Errno::Exist, "{e}");
    // a config with an unknown field names it
    let cfg = dir.join("mds.toml");
    let good = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, format!("{good}\nprefetch_maximum = 3\n")).unwrap();
    let e = match mds::Mds::open(&dir) {
        Err(e) => e,
        Ok(_) => panic!("opened with a bad config"),
    };
    assert!(e.message.contains("prefetch_maximum"), "{e}");
    std::fs::write(&cfg, &good).unwrap();
    // a damaged database is an error, not a panic; a copy of the good one still opens
    let db = dir.join("mds.redb");
    let saved = std::fs::read(&db).unwrap();
    let mut bad = saved.clone();
    for b in bad.iter_mut().take(4096) {
        *b ^= 0x5a;
    }
    std::fs::write(&db, &bad).unwrap();
    match mds::Mds::open(&dir) {
        Err(e) => assert!(e.message.contains("mds.redb"), "{e}"),
        Ok(_) => panic!("opened a damaged database"),
    }
    std::fs::write(&db, &saved).unwrap();
    // nothing was lost through any of it
    let m = local::LocalMds::start(&dir, &cl.mds_addr).await.unwrap();
    cl.mds = Some(m);
    let e = cl.client().resolve("/keep-me").await.unwrap();
    assert_eq!(e.name, "keep-me");
    check_clean(&cl.mds.as_ref().unwrap().mds);
    cl.stop().await;
}

/// Whatever the umask, the MDS's directory, log, database, config and key
/// copies, and an OSD's directory, store image and key file are
/// owner-only: 0700 directories, 0600 files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn format_and_provision_make_owner_only_files_and_directories() {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let dir = tempfile::tempdir().unwrap();
    let mds_dir = dir.path().join("cluster/mds");
    let opts = format_options();
    mds::service::format(&mds_dir, &opts).unwrap();
    let osd_dir = dir.path().join("cluster/osd-0");
    local::provision_osd(&osd_dir, 0, CLUSTER, 64 << 20, &mds_dir.join("keys")).unwrap();
    for d in [
        dir.path().join("cluster"),
        mds_dir.clone(),
        mds_dir.join("keys"),
        osd_dir.clone(),
    ] {
        assert_eq!(mode(&d), 0o700, "{}", d.display());
    }
    let mut files = vec![osd_dir.join("store.img"), osd_dir.join("key.toml")];
    for e in std::fs::read_dir(&mds_dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            files.push(p);
        }
    }
    files.push(mds_dir.join("keys/osd-0.toml"));
    assert!(files.len() >= 5, "{files:?}");
    for f in files {
        assert_eq!(mode(&f), 0o600, "{}", f.display());
    }
}

/// The redundancy operations refuse bad input with a specific errno and
/// change nothing: MARK STALE of what a file does not have, of its last
/// fresh copy or by someone who may not read it; OSD OUT/IN and SCRUB by
/// anyone but root or of an unknown OSD; a report with an empty host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redundancy_operations_refuse_bad_input() {
    let cl = Cluster::start(1, spec(4096, 1), PolicyKind::ChildClosest).await;
    let c = cl.client();
    let f = match c
        .call(Op::Create {
            parent: ROOT_INO,
            name: "f".into(),
            mode: 0o600,
            exclusive: true,
        })
        .await
        .unwrap()
    {
        MdsReply::Found(f) => f,
        r => panic!("{r:?}"),
    };
    let ino = f.entry.attr.ino;
    let layout = f.entry.layout.clone().unwrap();
    let osd = layout.homes[0].stripes[0].fresh[0];
    let errno = |r: Result<MdsReply, net::CallError>| r.unwrap_err().errno();
    let stale = |objset, stripe, osd| Op::MarkStale {
        ino,
        objset,
        stripe,
        osd,
    };
    assert_eq!(errno(c.call(stale(5, 0, osd)).await), Errno::Inval.raw());
    assert_eq!(errno(c.call(stale(0, 9, osd)).await), Errno::Inval.raw());
    // The only fresh copy cannot be set aside.
    assert_eq!(errno(c.call(stale(0, 0, osd)).await), Errno::Io.raw());
    let user = Creds {
        uid: 1000,
        gid: 1000,
        groups: vec![],
    };
    assert_eq!(
        errno(c.call_as(user.clone(), stale(0, 0, osd)).await),
        Errno::Access.raw()
    );
    let not_a_file = Op::MarkStale {
        ino: ROOT_INO,
        objset: 0,
        stripe: 0,
        osd,
    };
    assert_eq!(errno(c.call(not_a_file).await), Errno::Inval.raw());
    for op in [
        Op::SetOsdOut {
            osd,
            out: true,
            force: true,
        },
        Op::Scrub {
            ino: ROOT_INO,
            deep: true,
        },
        Op::AdoptGroup { group: osd, osd },
        Op::GroupAdd {
            id: 4,
            addr: "127.0.0.1:7404".into(),
            peer: "127.0.0.1:7504".into(),
        },
        Op::GroupRemove { id: 1 },
    ] {
        assert_eq!(errno(c.call_as(user.clone(), op).await), Errno::Perm.raw());
    }
    let e = c
        .call(Op::SetOsdOut {
            osd: 99,
            out: true,
            force: false,
        })
        .await
        .unwrap_err();
    assert_eq!(e.errno(), Errno::NoEnt.raw());
    assert!(e.to_string().contains("OSD 99 is not in the map"), "{e}");
    // Without replica chains (the namespace in the MDS) there is no group
    // to adopt.
    let e = c.call(Op::AdoptGroup { group: 0, osd }).await.unwrap_err();
    assert_eq!(e.errno(), Errno::Inval.raw());
    assert!(e.to_string().contains("keeps no replica chains"), "{e}");
    // A single MDS has no group members to add or remove.
    for op in [
        Op::GroupAdd {
            id: 4,
            addr: "127.0.0.1:7404".into(),
            peer: "127.0.0.1:7504".into(),
        },
        Op::GroupRemove { id: 1 },
    ] {
        let e = c.call(op).await.unwrap_err();
        assert_eq!(e.errno(), Errno::Inval.raw());
        assert!(e.to_string().contains("not a replicated group"), "{e}");
    }
    // A report with an empty host is refused (after its MAC checks out).
    let key = cl.osd_key(0);
    let mut r = cl.report(&cl.osd0_addr(), proto::clock::now_ms() + 60_000, "");
    r.sign(CLUSTER, &key);
    let e = cl.osd_mds_client(0).call(Op::Report(r)).await.unwrap_err();
    assert_eq!(e.errno(), Errno::Inval.raw());
    assert!(e.to_string().contains("host"), "{e}");
    // Nothing changed: the copy is still fresh, the OSD still in.
    let now = match c.call(Op::GetLayout { ino }).await.unwrap() {
        MdsReply::Layout { layout, .. } => layout.unwrap(),
        r => panic!("{r:?}"),
    };
    assert_eq!(now.homes, layout.homes);
    match c.call(Op::Status).await.unwrap() {
        MdsReply::Status(s) => assert!(s.osds.iter().all(|o| o.is_in)),
        r => panic!("{r:?}"),
    }
    cl.stop().await;
}

/// The requests added for POSIX through the mount refuse bad input with a
/// specific errno and change nothing: MKNOD of a regular file or a
/// directory, of a device by a non-root caller, over an existing name;
/// HOLDING without a session or with more files than allowed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mknod_and_holding_refuse_bad_input() {
    use proto::mds::FileKind;
    let cl = Cluster::start(1, spec(4096, 1), PolicyKind::ChildClosest).await;
    let mut c = cl.client();
    let errno = |r: Result<MdsReply, net::CallError>| r.unwrap_err().errno();
    let e = |x: Errno| x.raw();
    let mknod = |name: &str, kind| Op::Mknod {
        parent: ROOT_INO,
        name: name.into(),
        kind,
        mode: 0o644,
        rdev: 0x103,
    };
    for kind in [FileKind::File, FileKind::Dir, FileKind::Symlink] {
        assert_eq!(
            errno(c.call(mknod("x", kind)).await),
            e(Errno::Inval),
            "{kind:?}"
        );
    }
    let user = Creds {
        uid: 1000,
        gid: 1000,
        groups: Vec::new(),
    };
    assert_eq!(
        errno(
            c.call_as(user.clone(), mknod("dev", FileKind::CharDev))
                .await
        ),
        e(Errno::Perm)
    );
    c.call(mknod("fifo", FileKind::Fifo)).await.unwrap();
    assert_eq!(
        errno(c.call(mknod("fifo", FileKind::Socket)).await),
        e(Errno::Exist)
    );
    let held = vec![(ROOT_INO, false); proto::mds::HELD_MAX + 1];
    assert_eq!(
        errno(c.call(Op::Holding { held }).await),
        e(Errno::Inval),
        "too many held files"
    );
    c.session = 0;
    assert_eq!(
        errno(c.call(Op::Holding { held: Vec::new() }).await),
        e(Errno::Inval),
        "no session"
    );
    // Nothing but the one FIFO was made.
    match c
        .call(Op::Readdir {
            ino: ROOT_INO,
            after: None,
            max: 100,
            plus: false,
        })
        .await
        .unwrap()
    {
        MdsReply::Dir { entries, .. } => {
            let names: Vec<_> = entries.iter().map(|e| e.name.as_str()).collect();
            assert_eq!(names, ["fifo"]);
        }
        r => panic!("{r:?}"),
    }
    check_clean(&cl.mds.as_ref().unwrap().mds);
    cl.stop().await;
}

/// REPLAY refuses what no client keeps (more than REPLAY_MAX operations,
/// an operation that is never answered early) and changes nothing; a
/// replay to the MDS that answered the operations redoes nothing; SYNC
/// answers the durable transno; a client taking early answers gets them
/// (after its session's first, durable, change) and keeps none once
/// synced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_refuses_bad_input_and_early_answers_are_kept_until_durable() {
    use proto::mds::ReplayOp;
    let cl = Cluster::start(1, spec(4096, 1), PolicyKind::ChildClosest).await;
    let c = cl.client();
    let errno = |r: Result<MdsReply, net::CallError>| r.unwrap_err().errno();
    let op = |name: &str| ReplayOp {
        transno: 1,
        creds: Creds::root(),
        op: Op::Create {
            parent: ROOT_INO,
            name: name.into(),
            mode: 0o644,
            exclusive: true,
        },
        ino: None,
        seal: [0; proto::mds::SEAL_LEN],
    };
    let too_many = Op::Replay {
        instance: 7,
        ops: vec![op("a"); proto::mds::REPLAY_MAX + 1],
    };
    assert_eq!(errno(c.call(too_many).await), Errno::Inval.raw());
    let mut lookup = op("b");
    lookup.op = Op::Lookup {
        parent: ROOT_INO,
        name: "b".into(),
    };
    let not_early = Op::Replay {
        instance: 7,
        ops: vec![lookup],
    };
    assert_eq!(errno(c.call(not_early).await), Errno::Inval.raw());
    // Operations no early answer sealed for this session: each refused
    // (EACCES), none made — even at a transno counted durable.
    let mut durable_looking = op("e");
    durable_looking.transno = 0;
    let mut later = op("c");
    later.transno = 2;
    match c
        .call(Op::Replay {
            instance: 7,
            ops: vec![durable_looking, later],
        })
        .await
        .unwrap()
    {
        MdsReply::Replayed { results, .. } => {
            assert_eq!(results.len(), 2);
            for r in &results {
                assert_eq!(r.as_ref().unwrap_err().errno, Errno::Access);
            }
        }
        r => panic!("{r:?}"),
    }
    // Early answers: the first change of the session is durable, later
    // ones come early and are kept until synced.
    c.set_early(true);
    let mut inos = Vec::new();
    for name in ["d1", "d2", "d3"] {
        let op = Op::Create {
            parent: ROOT_INO,
            name: name.into(),
            mode: 0o644,
            exclusive: true,
        };
        match c.call(op).await.unwrap() {
            MdsReply::Found(f) => inos.push(f.entry.attr.ino),
            r => panic!("{r:?}"),
        }
    }
    let mds = &cl.mds.as_ref().unwrap().mds;
    let early = mds.metrics.early_answers.get();
    assert_eq!(early, 2, "the session's later creates were answered early");
    let text = mds.metrics.render(&mds.kv.stats);
    for line in [
        "tessera_mds_early_answers_total 2",
        "tessera_mds_replay_waiting_sessions 0",
        "tessera_mds_replayed_total 0",
    ] {
        assert!(text.contains(line), "{line} in\n{text}");
    }
    // A close's length commit and a chmod or utimens without a length
    // come early too; a truncate does not, nor a request whose
    // credentials alone would fill much of a REPLAY.
    let ino = inos[0];
    let set = |s: proto::mds::SetAttr| Op::SetAttr { ino, set: s };
    let chmod = set(proto::mds::SetAttr {
        mode: Some(0o664),
        ..Default::default()
    });
    c.call(chmod).await.unwrap();
    let commit = Op::CommitSize {
        ino,
        size: 10,
        mtime: 0,
    };
    c.call(commit).await.unwrap();
    assert_eq!(mds.metrics.early_answers.get(), 4);
    let truncate = set(proto::mds::SetAttr {
        size: Some(5),
        ..Default::default()
    });
    c.call(truncate).await.unwrap();
    let many = Creds {
        uid: 0,
        gid: 0,
        groups: (0..10_000).collect(),
    };
    let create = Op::Create {
        parent: ROOT_INO,
        name: "d4".into(),
        mode: 0o644,
        exclusive: true,
    };
    c.call_as(many, create).await.unwrap();
    assert_eq!(
        mds.metrics.early_answers.get(),
        4,
        "a truncate and a create by a user in 10,000 groups were durable"
    );
    assert!(c.sync().await.is_ok());
    assert_eq!(c.undurable(), 0, "nothing kept once synced");
    match c.call(Op::Sync).await.unwrap() {
        MdsReply::Synced { durable } => assert!(durable >= 1, "{durable}"),
        r => panic!("{r:?}"),
    }
    let names = c.readdir_all(ROOT_INO, false).await.unwrap();
    let names: Vec<_> = names.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["d1", "d2", "d3", "d4"], "nothing else was made");
    check_clean(&cl.mds.as_ref().unwrap().mds);
    cl.stop().await;
}
