//! The OSD over real sockets on 127.0.0.1 with a file-backed store: every
//! command, the capability rejection matrix, concurrent atomics, bad frames,
//! handshakes.

#![expect(clippy::unwrap_used, reason = "tests: a panic is the failure report")]

use std::sync::Arc;

use bytes::Bytes;
use net::{ConnConfig, ConnError, OsdClient};
use osd::exec::{Ctx, ROOT, StoreHandle};
use osd::server::{Osd, ServerConfig};
use proto::auth::MDS_PRINCIPAL;
use proto::clock::now_ms;
use proto::msg::{AttrKey, Command, Reply, Request};
use proto::{Capability, ErrorCode, KeyRing, rights};
use store::device::{Device, FileDevice};
use store::{FormatOptions, OpenOptions, Store};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const K1: [u8; 32] = [0x11; 32];
const K2: [u8; 32] = [0x22; 32];
const OSD: u32 = 7;
const P: u64 = store::DEFAULT_PARTITION;

struct TestOsd {
    addr: String,
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<Result<(), store::StoreError>>,
    _dir: tempfile::TempDir,
}

async fn start(insecure: bool) -> TestOsd {
    start_with(insecure, |_| {}).await
}

async fn start_with(insecure: bool, tweak: impl FnOnce(&mut ServerConfig)) -> TestOsd {
    start_opened(insecure, &OpenOptions::default(), tweak).await
}

async fn start_opened(
    insecure: bool,
    opts: &OpenOptions,
    tweak: impl FnOnce(&mut ServerConfig),
) -> TestOsd {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("osd.img");
    let dev: Arc<dyn Device> = Arc::new(FileDevice::create(&path, 128 << 20).unwrap());
    store::format(dev.clone(), &FormatOptions::default()).unwrap();
    let s = Store::open(dev, opts).unwrap();
    let keys = (!insecure).then(|| KeyRing::new(vec![(1, K1), (2, K2)]).unwrap());
    let ctx = Ctx::new(Arc::new(StoreHandle::new(path, s)), keys, OSD);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let mut cfg = ServerConfig::new("test", OSD);
    tweak(&mut cfg);
    let osd = Osd::new(ctx, cfg);
    let (stop, rx) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(osd.serve(listener, rx));
    TestOsd {
        addr,
        stop,
        task,
        _dir: dir,
    }
}

fn cap(pid: u64, lo: u64, hi: u64, r: u32) -> Capability {
    proto::CapSpec {
        partition: pid,
        oid_lo: lo,
        oid_hi: hi,
        rights: r,
        expiry_ms: now_ms() + 60_000,
        version: 1000,
        holder: MDS_PRINCIPAL,
    }
    .sign(&K2, 2, OSD)
}

/// What a capability over every object of partition `pid` grants.
fn whole(pid: u64, rights: u32, expiry_ms: u64, version: u64) -> proto::CapSpec {
    proto::CapSpec {
        partition: pid,
        oid_lo: 0,
        oid_hi: u64::MAX,
        rights,
        expiry_ms,
        version,
        holder: MDS_PRINCIPAL,
    }
}

fn all(pid: u64) -> Capability {
    cap(pid, 0, u64::MAX, rights::ALL)
}

/// Who the tests connect as: the MDS principal, with tickets minted with the OSD's key.
fn minted() -> Arc<dyn net::auth::IdentitySource> {
    net::auth::MintWithOsdKeys::one(KeyRing::new(vec![(1, K1), (2, K2)]).unwrap())
}

fn anonymous() -> Arc<dyn net::auth::IdentitySource> {
    Arc::new(net::auth::Identity::anonymous())
}

async fn client(addr: &str, conns: usize) -> OsdClient {
    let mut cfg = ConnConfig::new("test", OSD, minted());
    cfg.connections = conns;
    OsdClient::connect(addr, cfg).await.unwrap()
}

/// A client of an `--insecure` OSD (no credential, nothing sealed).
async fn anon_client(addr: &str, conns: usize) -> OsdClient {
    let mut cfg = ConnConfig::new("test", OSD, anonymous());
    cfg.connections = conns;
    OsdClient::connect(addr, cfg).await.unwrap()
}

fn code(e: ConnError) -> ErrorCode {
    match e {
        ConnError::Remote(w) => w.code,
        other => panic!("expected an error reply, got {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_end_to_end() {
    let t = start(false).await;
    let c = client(&t.addr, 2).await;
    let a = all(P);
    let root = cap(ROOT, 0, u64::MAX, rights::ALL);
    // Partitions.
    c.run(
        Some(&root),
        Command::CreatePartition { pid: 0x20000 },
        Bytes::new(),
    )
    .await
    .unwrap();
    let e = c
        .run(
            Some(&root),
            Command::CreatePartition { pid: 0x20000 },
            Bytes::new(),
        )
        .await
        .unwrap_err();
    assert_eq!(code(e), ErrorCode::Exists);
    // Create one, many, and store-picked.
    let r = c
        .run(
            Some(&a),
            Command::Create {
                pid: P,
                oid: Some(0x10010),
                count: 3,
            },
            Bytes::new(),
        )
        .await
        .unwrap();
    assert_eq!(r.reply, Reply::Created(vec![0x10010, 0x10011, 0x10012]));
    let r = c
        .run(
            Some(&a),
            Command::Create {
                pid: P,
                oid: None,
                count: 1,
            },
            Bytes::new(),
        )
        .await
        .unwrap();
    assert!(matches!(r.reply, Reply::Created(ref v) if v.len() == 1));
    // Write / read / append / create-and-write.
    let data: Vec<u8> = (0..700_000u32).map(|i| (i * 7 % 251) as u8).collect();
    c.write(Some(&a), P, 0x10010, 0, Bytes::from(data.clone()))
        .await
        .unwrap();
    let got = c.read(Some(&a), P, 0x10010, 0, 1 << 20).await.unwrap();
    assert_eq!(&got[..], &data[..]);
    let r = c
        .run(
            Some(&a),
            Command::Read {
                pid: P,
                oid: 0x10010,
                offset: 699_990,
                len: 100,
            },
            Bytes::new(),
        )
        .await
        .unwrap();
    assert_eq!(r.data.len(), 10);
    assert_eq!(r.reply, Reply::Read { size: 700_000 });
    let r = c
        .run(
            Some(&a),
            Command::Append {
                pid: P,
                oid: 0x10010,
            },
            Bytes::from_static(b"tail"),
        )
        .await
        .unwrap();
    assert_eq!(r.reply, Reply::Appended { offset: 700_000 });
    c.create_and_write(Some(&a), P, 0x10100, Bytes::from_static(b"small object"))
        .await
        .unwrap();
    assert_eq!(
        &c.read(Some(&a), P, 0x10100, 0, 100).await.unwrap()[..],
        b"small object"
    );
    // Attributes: set and get lists piggybacked on a write.
    let k = AttrKey {
        page: 0x10,
        number: 1,
    };
    let len_key = AttrKey {
        page: 1,
        number: 0x82,
    };
    let r = c
        .call(
            Request {
                cap: Some(a.clone()),
                id: 0,
                cmd: Command::Write {
                    pid: P,
                    oid: 0x10100,
                    offset: 0,
                },
                get: vec![k, len_key],
                set: vec![(k, b"v1".to_vec())],
            },
            Bytes::from_static(b"SMALL"),
        )
        .await
        .unwrap();
    assert_eq!(
        r.attrs,
        vec![(k, b"v1".to_vec()), (len_key, 12u64.to_le_bytes().to_vec())]
    );
    let r = c
        .run(
            Some(&a),
            Command::GetAttributes {
                pid: P,
                oid: 0x10100,
            },
            Bytes::new(),
        )
        .await
        .unwrap();
    assert!(r.attrs.iter().any(|(kk, v)| *kk == k && v == b"v1"));
    c.call(
        Request {
            cap: Some(a.clone()),
            id: 0,
            cmd: Command::SetAttributes {
                pid: P,
                oid: 0x10100,
            },
            get: vec![],
            set: vec![(k, b"v2".to_vec())],
        },
        Bytes::new(),
    )
    .await
    .unwrap();
    // CAS and fetch-and-add.
    let r = c
        .run(
            Some(&a),
            Command::Cas {
                pid: P,
                oid: 0x10100,
                key: k,
                expected: b"v2".to_vec(),
                new: b"v3".to_vec(),
            },
            Bytes::new(),
        )
        .await
        .unwrap();
    assert_eq!(
        r.reply,
        Reply::Cas {
            swapped: true,
            old: b"v2".to_vec()
        }
    );
    let r = c
        .run(
            Some(&a),
            Command::Cas {
                pid: P,
                oid: 0x10100,
                key: k,
                expected: Vec::new(),
                new: b"x".to_vec(),
            },
            Bytes::new(),
        )
        .await
        .unwrap();
    assert_eq!(
        r.reply,
        Reply::Cas {
            swapped: false,
            old: b"v3".to_vec()
        }
    );
    let ctr = AttrKey {
        page: 0x11,
        number: 0,
    };
    c.run(
        Some(&a),
        Command::FetchAdd {
            pid: P,
            oid: 0x10100,
            key: ctr,
            delta: 5,
        },
        Bytes::new(),
    )
    .await
    .unwrap();
    let r = c
        .run(
            Some(&a),
            Command::FetchAdd {
                pid: P,
                oid: 0x10100,
                key: ctr,
                delta: 1,
            },
            Bytes::new(),
        )
        .await
        .unwrap();
    assert_eq!(r.reply, Reply::FetchAdd { old: 5 });
    // List with attributes per entry, paginated.
    let r = c
        .run(
            Some(&a),
            Command::List {
                pid: P,
                lo: 0x10000,
                hi: 0x10fff,
                after: None,
                max: 2,
                attrs: vec![len_key],
            },
            Bytes::new(),
        )
        .await
        .unwrap();
    let Reply::Listed { entries, next } = r.reply else {
        panic!()
    };
    assert_eq!(entries.len(), 2);
    assert!(next.is_some());
    // Flush, statfs, version, remove.
    c.run(Some(&a), Command::Flush { pid: P }, Bytes::new())
        .await
        .unwrap();
    let r = c
        .run(Some(&root), Command::Statfs, Bytes::new())
        .await
        .unwrap();
    assert!(matches!(r.reply, Reply::Statfs { objects, .. } if objects >= 5));
    c.run(
        Some(&a),
        Command::SetVersion {
            pid: P,
            oid: 0x10011,
            version: 5,
        },
        Bytes::new(),
    )
    .await
    .unwrap();
    c.run(
        Some(&a),
        Command::Remove {
            pid: P,
            oid: 0x10011,
        },
        Bytes::new(),
    )
    .await
    .unwrap();
    let e = c.read(Some(&a), P, 0x10011, 0, 1).await.unwrap_err();
    assert_eq!(code(e), ErrorCode::NoObject);
    c.run(
        Some(&root),
        Command::RemovePartition { pid: 0x20000 },
        Bytes::new(),
    )
    .await
    .unwrap();
    // A payload on a command that takes none is a bad request naming the field.
    let e = c
        .run(
            Some(&a),
            Command::Remove {
                pid: P,
                oid: 0x10012,
            },
            Bytes::from_static(b"x"),
        )
        .await
        .unwrap_err();
    assert_eq!(code(e), ErrorCode::BadRequest);
    // Format wipes everything.
    c.run(
        Some(&root),
        Command::Format {
            policy: "region".into(),
        },
        Bytes::new(),
    )
    .await
    .unwrap();
    let e = c.read(Some(&a), P, 0x10010, 0, 1).await.unwrap_err();
    assert_eq!(code(e), ErrorCode::NoObject);
    t.stop.send(true).unwrap();
    t.task.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capability_rejection_matrix() {
    let t = start(false).await;
    let c = client(&t.addr, 1).await;
    c.create_and_write(Some(&all(P)), P, 0x10000, Bytes::from_static(b"x"))
        .await
        .unwrap();
    let read = |cap: Option<Capability>| {
        let c = &c;
        async move { c.read(cap.as_ref(), P, 0x10000, 0, 1).await }
    };
    assert!(
        read(Some(cap(P, 0x10000, 0x10000, rights::READ)))
            .await
            .is_ok(),
        "a good capability works"
    );
    let old_key = whole(P, rights::READ, now_ms() + 60_000, 1000).sign(&K1, 1, OSD);
    assert!(
        read(Some(old_key)).await.is_ok(),
        "the previous key version still verifies"
    );
    assert_eq!(code(read(None).await.unwrap_err()), ErrorCode::CapMissing);
    let mut forged = cap(P, 0x10000, 0x10000, rights::READ);
    forged.oid_hi = u64::MAX;
    assert_eq!(
        code(read(Some(forged)).await.unwrap_err()),
        ErrorCode::CapForged
    );
    let expired = whole(P, rights::READ, now_ms() - 1, 1000).sign(&K2, 2, OSD);
    assert_eq!(
        code(read(Some(expired)).await.unwrap_err()),
        ErrorCode::CapExpired
    );
    assert_eq!(
        code(
            read(Some(cap(P, 0x20000, 0x30000, rights::READ)))
                .await
                .unwrap_err()
        ),
        ErrorCode::CapOutOfRange
    );
    assert_eq!(
        code(
            read(Some(cap(0x30000, 0, u64::MAX, rights::READ)))
                .await
                .unwrap_err()
        ),
        ErrorCode::CapOutOfRange
    );
    assert_eq!(
        code(
            read(Some(cap(P, 0, u64::MAX, rights::WRITE)))
                .await
                .unwrap_err()
        ),
        ErrorCode::CapRights
    );
    // A deep digest reads the whole object for 24 bytes of answer: a
    // reader's capability gets the shallow one only.
    let digest = |deep: bool, r: u32| {
        let c = &c;
        async move {
            c.run(
                Some(&cap(P, 0, u64::MAX, r)),
                Command::Digest {
                    pid: P,
                    oid: 0x10000,
                    deep,
                },
                Bytes::new(),
            )
            .await
        }
    };
    assert!(digest(false, rights::READ).await.is_ok());
    assert_eq!(
        code(digest(true, rights::READ).await.unwrap_err()),
        ErrorCode::CapRights
    );
    assert!(digest(true, rights::READ | rights::REVOKE).await.is_ok());
    let unknown = whole(P, rights::READ, now_ms() + 60_000, 1000).sign(&K2, 9, OSD);
    assert_eq!(
        code(read(Some(unknown)).await.unwrap_err()),
        ErrorCode::CapKeyVersion
    );
    let other_osd = whole(P, rights::READ, now_ms() + 60_000, 1000).sign(&K2, 2, OSD + 1);
    assert_eq!(
        code(read(Some(other_osd)).await.unwrap_err()),
        ErrorCode::CapForged
    );
    // Revocation (Hendricks et al.): bump the object's version to the capability's.
    let older = whole(P, rights::READ, now_ms() + 60_000, 500).sign(&K2, 2, OSD);
    assert!(read(Some(older.clone())).await.is_ok());
    c.run(
        Some(&all(P)),
        Command::SetVersion {
            pid: P,
            oid: 0x10000,
            version: 500,
        },
        Bytes::new(),
    )
    .await
    .unwrap();
    assert_eq!(
        code(read(Some(older)).await.unwrap_err()),
        ErrorCode::CapRevoked
    );
    assert!(
        read(Some(cap(P, 0, u64::MAX, rights::READ))).await.is_ok(),
        "a newer capability still works"
    );
    // LIST with attributes per entry needs GET_ATTR, and withholds the
    // attributes of objects revoked after the capability was issued.
    let len_key = AttrKey {
        page: 1,
        number: 0x82,
    };
    let list = Command::List {
        pid: P,
        lo: 0,
        hi: u64::MAX,
        after: None,
        max: 10,
        attrs: vec![len_key],
    };
    let e = c
        .run(
            Some(&cap(P, 0, u64::MAX, rights::LIST)),
            list.clone(),
            Bytes::new(),
        )
        .await
        .unwrap_err();
    assert_eq!(code(e), ErrorCode::CapRights);
    let old_list =
        whole(P, rights::LIST | rights::GET_ATTR, now_ms() + 60_000, 500).sign(&K2, 2, OSD);
    let r = c.run(Some(&old_list), list, Bytes::new()).await.unwrap();
    let Reply::Listed { entries, .. } = r.reply else {
        panic!()
    };
    assert_eq!(
        entries,
        vec![(0x10000, vec![])],
        "ids listed, revoked attributes withheld"
    );
    // A read longer than the payload limit is refused, not attempted.
    let e = c
        .run(
            Some(&all(P)),
            Command::Read {
                pid: P,
                oid: 0x10000,
                offset: 0,
                len: u32::MAX,
            },
            Bytes::new(),
        )
        .await
        .unwrap_err();
    assert_eq!(code(e), ErrorCode::BadRequest);
    t.stop.send(true).unwrap();
    t.task.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_clients_race_atomics() {
    let t = start(false).await;
    let c = client(&t.addr, 1).await;
    c.create_and_write(Some(&all(P)), P, 0x10000, Bytes::new())
        .await
        .unwrap();
    let ctr = AttrKey {
        page: 0x10,
        number: 1,
    };
    let name = AttrKey {
        page: 0x20,
        number: 42,
    };
    let mut tasks = Vec::new();
    for i in 0..64u32 {
        let addr = t.addr.clone();
        tasks.push(tokio::spawn(async move {
            let c = client(&addr, 1).await;
            let a = all(P);
            for _ in 0..10 {
                c.run(
                    Some(&a),
                    Command::FetchAdd {
                        pid: P,
                        oid: 0x10000,
                        key: ctr,
                        delta: 1,
                    },
                    Bytes::new(),
                )
                .await
                .unwrap();
            }
            let r = c
                .run(
                    Some(&a),
                    Command::Cas {
                        pid: P,
                        oid: 0x10000,
                        key: name,
                        expected: Vec::new(),
                        new: format!("client {i}").into_bytes(),
                    },
                    Bytes::new(),
                )
                .await
                .unwrap();
            matches!(r.reply, Reply::Cas { swapped: true, .. })
        }));
    }
    let mut winners = 0;
    for t in tasks {
        if t.await.unwrap() {
            winners += 1;
        }
    }
    assert_eq!(winners, 1, "exactly one insert wins");
    let r = c
        .run(
            Some(&all(P)),
            Command::FetchAdd {
                pid: P,
                oid: 0x10000,
                key: ctr,
                delta: 0,
            },
            Bytes::new(),
        )
        .await
        .unwrap();
    assert_eq!(r.reply, Reply::FetchAdd { old: 640 });
    t.stop.send(true).unwrap();
    t.task.await.unwrap().unwrap();
}

async fn raw_handshake(addr: &str) -> tokio::net::TcpStream {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let hello = proto::msg::Hello {
        version: proto::PROTOCOL_VERSION,
        cluster_id: "test".into(),
        osd_id: OSD,
        client: "raw".into(),
        credential: proto::auth::Credential::None,
        nonce: [0; 16],
        encrypt: false,
    };
    s.write_all(&net::frame_io::frame(proto::Kind::Hello, 0, 0, &hello, Bytes::new()).to_vec())
        .await
        .unwrap();
    let mut pre = [0u8; 32];
    s.read_exact(&mut pre).await.unwrap();
    let p = proto::Prefix::decode(&pre, &proto::Limits::default()).unwrap();
    let mut rest = vec![0u8; (p.header_len + p.payload_len) as usize];
    s.read_exact(&mut rest).await.unwrap();
    s
}

async fn read_response(s: &mut tokio::net::TcpStream) -> Option<proto::Response> {
    let mut pre = [0u8; 32];
    tokio::time::timeout(std::time::Duration::from_secs(5), s.read_exact(&mut pre))
        .await
        .ok()?
        .ok()?;
    let p = proto::Prefix::decode(&pre, &proto::Limits::default()).unwrap();
    let mut rest = vec![0u8; (p.header_len + p.payload_len) as usize];
    s.read_exact(&mut rest).await.unwrap();
    Some(proto::msg::decode(&rest[..p.header_len as usize]).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_frames_get_an_error_or_a_close_and_nothing_else_suffers() {
    // Unsealed frames by hand: an --insecure OSD (the frame layer is the
    // same; sealed frames are tested in the hostile-client suite).
    let t = start(true).await;
    let good = anon_client(&t.addr, 1).await;
    good.create_and_write(Some(&all(P)), P, 0x10000, Bytes::from_static(b"keep"))
        .await
        .unwrap();
    // Garbage instead of a handshake: closed.
    let mut s = tokio::net::TcpStream::connect(&t.addr).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n.............")
        .await
        .unwrap();
    let mut b = [0u8; 64];
    let n = tokio::time::timeout(std::time::Duration::from_secs(5), s.read(&mut b))
        .await
        .unwrap()
        .unwrap_or(0);
    assert!(
        n == 0 || b[..4] == proto::frame::MAGIC,
        "closed, or a refusal"
    );
    // A frame whose header crc is wrong: an error reply, the connection goes on.
    let mut s = raw_handshake(&t.addr).await;
    let req = Request {
        cap: Some(all(P)),
        id: 0,
        cmd: Command::Read {
            pid: P,
            oid: 0x10000,
            offset: 0,
            len: 4,
        },
        get: vec![],
        set: vec![],
    };
    let mut bytes = net::frame_io::frame(proto::Kind::Request, 6, 77, &req, Bytes::new()).to_vec();
    bytes[33] ^= 0xff;
    s.write_all(&bytes).await.unwrap();
    let r = read_response(&mut s).await.expect("an error reply");
    assert_eq!(r.result.unwrap_err().code, ErrorCode::BadRequest);
    let ok = net::frame_io::frame(proto::Kind::Request, 6, 78, &req, Bytes::new()).to_vec();
    s.write_all(&ok).await.unwrap();
    assert!(
        read_response(&mut s).await.unwrap().result.is_ok(),
        "same connection still serves"
    );
    // A header that is valid framing but not a request: an error reply.
    let junk = proto::Frame {
        kind: proto::Kind::Request,
        opcode: 1,
        tag: 5,
        header: Bytes::from_static(&[0xff; 40]),
        payload: Bytes::new(),
    };
    s.write_all(&junk.to_vec()).await.unwrap();
    assert_eq!(
        read_response(&mut s)
            .await
            .unwrap()
            .result
            .unwrap_err()
            .code,
        ErrorCode::BadRequest
    );
    // An oversized frame announced: an error, then a close.
    let mut huge = net::frame_io::frame(proto::Kind::Request, 6, 79, &req, Bytes::new()).prefix();
    huge[20..24].copy_from_slice(&u32::MAX.to_le_bytes());
    s.write_all(&huge).await.unwrap();
    let r = read_response(&mut s).await;
    assert!(r.is_none() || r.unwrap().result.is_err());
    // Truncated frame then close: the server just drops the connection.
    let mut s2 = raw_handshake(&t.addr).await;
    s2.write_all(&ok[..40]).await.unwrap();
    drop(s2);
    // Random bytes after a handshake.
    let mut s3 = raw_handshake(&t.addr).await;
    s3.write_all(&[0x5a; 300]).await.unwrap();
    drop(s3);
    // Everyone else carries on.
    assert_eq!(
        &good.read(Some(&all(P)), P, 0x10000, 0, 10).await.unwrap()[..],
        b"keep"
    );
    t.stop.send(true).unwrap();
    t.task.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handshake_refuses_wrong_cluster_or_osd_and_insecure_mode_needs_no_caps() {
    let t = start(true).await;
    let e = OsdClient::connect(&t.addr, ConnConfig::new("other", OSD, anonymous()))
        .await
        .err()
        .unwrap();
    assert!(
        matches!(e, ConnError::Refused(ref w) if w.message.contains("cluster")),
        "{e}"
    );
    assert!(
        !e.to_string().contains("\"test\""),
        "the real cluster id is not echoed: {e}"
    );
    let e = OsdClient::connect(&t.addr, ConnConfig::new("test", OSD + 1, anonymous()))
        .await
        .err()
        .unwrap();
    assert!(matches!(e, ConnError::Refused(_)), "{e}");
    let c = anon_client(&t.addr, 4).await;
    c.create_and_write(None, P, 0x10000, Bytes::from_static(b"no caps here"))
        .await
        .unwrap();
    // Pipelining: many requests in flight on few connections, replies matched by tag.
    let mut futs = Vec::new();
    for i in 0..200u64 {
        futs.push(c.read(None, P, 0x10000, i % 12, 1));
    }
    for (i, f) in futs.into_iter().enumerate() {
        assert_eq!(f.await.unwrap()[0], b"no caps here"[i % 12]);
    }
    t.stop.send(true).unwrap();
    t.task.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_slow_connections_are_closed_others_are_not() {
    let t = start_with(true, |c| {
        c.serve.idle_timeout = std::time::Duration::from_millis(300);
        c.serve.io_timeout = std::time::Duration::from_millis(300);
    })
    .await;
    // Idle after the handshake: closed.
    let mut idle = raw_handshake(&t.addr).await;
    let mut b = [0u8; 8];
    let n = tokio::time::timeout(std::time::Duration::from_secs(5), idle.read(&mut b))
        .await
        .unwrap()
        .unwrap_or(0);
    assert_eq!(n, 0, "an idle connection is closed");
    // A frame that starts but never finishes: closed.
    let mut slow = raw_handshake(&t.addr).await;
    let req = Request {
        cap: Some(all(P)),
        id: 0,
        cmd: Command::Statfs,
        get: vec![],
        set: vec![],
    };
    let bytes = net::frame_io::frame(proto::Kind::Request, 17, 1, &req, Bytes::new()).to_vec();
    slow.write_all(&bytes[..10]).await.unwrap();
    let n = tokio::time::timeout(std::time::Duration::from_secs(5), slow.read(&mut b))
        .await
        .unwrap()
        .unwrap_or(0);
    assert_eq!(n, 0, "a slow frame closes its connection");
    // A busy client is unaffected.
    let c = anon_client(&t.addr, 1).await;
    for _ in 0..5 {
        c.run(
            Some(&cap(ROOT, 0, 0, rights::LIST)),
            Command::Statfs,
            Bytes::new(),
        )
        .await
        .unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    t.stop.send(true).unwrap();
    t.task.await.unwrap().unwrap();
}

/// Versions only grow: a revocation that arrives after a newer one (a
/// retried or reordered SET VERSION) changes nothing, so the capabilities
/// the newer one revoked stay revoked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_revocation_cannot_revive_capabilities() {
    let t = start(false).await;
    let c = client(&t.addr, 1).await;
    c.create_and_write(Some(&all(P)), P, 0x20000, Bytes::from_static(b"x"))
        .await
        .unwrap();
    let issued_at = |version: u64| {
        proto::CapSpec {
            partition: P,
            oid_lo: 0,
            oid_hi: u64::MAX,
            rights: rights::READ,
            expiry_ms: now_ms() + 60_000,
            version,
            holder: MDS_PRINCIPAL,
        }
        .sign(&K2, 2, OSD)
    };
    let set = |version: u64| Command::SetVersion {
        pid: P,
        oid: 0x20000,
        version,
    };
    c.run(Some(&all(P)), set(500), Bytes::new()).await.unwrap();
    c.run(Some(&all(P)), set(300), Bytes::new()).await.unwrap();
    let e = c
        .read(Some(&issued_at(400)), P, 0x20000, 0, 1)
        .await
        .unwrap_err();
    assert_eq!(
        code(e),
        ErrorCode::CapRevoked,
        "revoked at 500 stays revoked"
    );
    assert!(
        c.read(Some(&issued_at(501)), P, 0x20000, 0, 1)
            .await
            .is_ok(),
        "a capability issued after the newest revocation works"
    );
    let _ = t.stop.send(true);
    t.task.await.unwrap().unwrap();
}

/// Security finding 1: a READ whose capability does not verify is refused
/// when it is admitted, before the server reserves budget for its reply;
/// a good one is admitted with its reply's size.
#[test]
fn a_bad_capability_is_refused_before_reply_memory_is_reserved() {
    use net::serve::Service;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("osd.img");
    let dev: Arc<dyn Device> = Arc::new(FileDevice::create(&path, 64 << 20).unwrap());
    store::format(dev.clone(), &FormatOptions::default()).unwrap();
    let s = Store::open(dev, &OpenOptions::default()).unwrap();
    let keys = KeyRing::new(vec![(1, K1), (2, K2)]).unwrap();
    let ctx = Ctx::new(Arc::new(StoreHandle::new(path, s)), Some(keys), OSD);
    let osd = Osd::new(ctx, ServerConfig::new("test", OSD));
    let read = |c: Capability| {
        let req = Request {
            cap: Some(c),
            id: 0,
            cmd: Command::Read {
                pid: P,
                oid: 0x10000,
                offset: 0,
                len: 4 << 20,
            },
            get: vec![],
            set: vec![],
        };
        proto::Frame {
            kind: proto::Kind::Request,
            opcode: 6,
            tag: 1,
            header: Bytes::from(proto::msg::encode(&req)),
            payload: Bytes::new(),
        }
    };
    let mds_peer = osd::server::Peer {
        principal_id: MDS_PRINCIPAL,
        name: "mds".into(),
    };
    let mut forged = cap(P, 0, u64::MAX, rights::READ);
    forged.mac[0] ^= 1;
    match osd.admit(&mds_peer, &read(forged)) {
        Err(e) => assert_eq!(e.code, ErrorCode::CapForged, "{e}"),
        Ok(a) => panic!("admitted with {} reply bytes to reserve", a.reply_bytes),
    }
    let a = osd
        .admit(&mds_peer, &read(cap(P, 0, u64::MAX, rights::READ)))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(a.reply_bytes, 4 << 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reserve_and_copy_check_both_capabilities() {
    let t = start(false).await;
    let c = client(&t.addr, 2).await;
    let root = cap(ROOT, 0, u64::MAX, rights::ALL);
    async fn free_bytes(c: &OsdClient, root: &Capability) -> u64 {
        match c
            .run(Some(root), Command::Statfs, Bytes::new())
            .await
            .unwrap()
            .reply
        {
            Reply::Statfs { free_bytes, .. } => free_bytes,
            r => panic!("{r:?}"),
        }
    }
    let (src, dst) = (0x30001u64, 0x30002u64);
    let wc = |oid| cap(P, oid, oid, rights::WRITE | rights::CREATE);
    // RESERVE creates a missing object, empty, and takes room.
    let before = free_bytes(&c, &root).await;
    let reserve = |len| Command::Reserve {
        pid: P,
        oid: 0x30000,
        offset: 0,
        len,
    };
    c.run(Some(&wc(0x30000)), reserve(8 << 20), Bytes::new())
        .await
        .unwrap();
    assert!(
        before - free_bytes(&c, &root).await >= 8 << 20,
        "room taken"
    );
    let e = c
        .run(Some(&wc(0x30000)), reserve(0), Bytes::new())
        .await
        .unwrap_err();
    assert_eq!(code(e), ErrorCode::BadRequest);
    let e = c
        .run(
            Some(&cap(P, 0x30000, 0x30000, rights::WRITE)),
            reserve(1),
            Bytes::new(),
        )
        .await
        .unwrap_err();
    assert_eq!(
        code(e),
        ErrorCode::CapRights,
        "RESERVE may create: CREATE needed"
    );
    // COPY: the bytes move inside the OSD.
    let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
    c.create_and_write(Some(&all(P)), P, src, Bytes::from(data.clone()))
        .await
        .unwrap();
    let copy = |offset, src_offset, len, src_cap: Option<Capability>| Command::Copy {
        pid: P,
        oid: dst,
        offset,
        src_oid: src,
        src_offset,
        len,
        src_cap: src_cap.map(Box::new),
    };
    let rsrc = cap(P, src, src, rights::READ);
    let a = c
        .run(
            Some(&wc(dst)),
            copy(4096, 10, 50_000, Some(rsrc.clone())),
            Bytes::new(),
        )
        .await
        .unwrap();
    assert_eq!(a.reply, Reply::Copied { len: 50_000 });
    let got = c.read(Some(&all(P)), P, dst, 0, 60_000).await.unwrap();
    assert_eq!(&got[..4096], &[0u8; 4096][..], "a new object: zeros before");
    assert_eq!(&got[4096..], &data[10..50_010]);
    // Past the source's end: zeros.
    c.run(
        Some(&wc(dst)),
        copy(0, 99_000, 4000, Some(rsrc.clone())),
        Bytes::new(),
    )
    .await
    .unwrap();
    let got = c.read(Some(&all(P)), P, dst, 0, 4000).await.unwrap();
    assert_eq!(&got[..1000], &data[99_000..]);
    assert!(got[1000..].iter().all(|&b| b == 0));
    // Every bad source capability is refused, and nothing is written.
    let wrong = [
        (None, ErrorCode::CapMissing),
        (Some(cap(P, src, src, rights::WRITE)), ErrorCode::CapRights),
        (
            Some(cap(P, dst, dst, rights::READ)),
            ErrorCode::CapOutOfRange,
        ),
    ];
    for (sc, want) in wrong {
        let e = c
            .run(Some(&wc(dst)), copy(0, 0, 100, sc), Bytes::new())
            .await
            .unwrap_err();
        assert_eq!(code(e), want);
    }
    let mut forged = rsrc.clone();
    forged.mac[0] ^= 1;
    let e = c
        .run(Some(&wc(dst)), copy(0, 0, 100, Some(forged)), Bytes::new())
        .await
        .unwrap_err();
    assert_eq!(code(e), ErrorCode::CapForged);
    let got = c.read(Some(&all(P)), P, dst, 0, 1000).await.unwrap();
    assert_eq!(&got[..1000], &data[99_000..], "unchanged");
    // The destination needs its own rights.
    let e = c
        .run(
            Some(&cap(P, dst, dst, rights::READ)),
            copy(0, 0, 100, Some(rsrc.clone())),
            Bytes::new(),
        )
        .await
        .unwrap_err();
    assert_eq!(code(e), ErrorCode::CapRights);
    // Bad lengths and overlapping ranges of one object.
    for (len, (o, so, obj)) in [
        (0, (0, 0, dst)),
        (proto::msg::MAX_COPY + 1, (0, 0, dst)),
        (100, (50, 0, src)),
    ] {
        let cmd = Command::Copy {
            pid: P,
            oid: obj,
            offset: o,
            src_oid: src,
            src_offset: so,
            len,
            src_cap: Some(Box::new(rsrc.clone())),
        };
        let e = c.run(Some(&all(P)), cmd, Bytes::new()).await.unwrap_err();
        assert_eq!(code(e), ErrorCode::BadRequest);
    }
    // A missing source is NoObject.
    let e = c
        .run(
            Some(&wc(dst)),
            Command::Copy {
                pid: P,
                oid: dst,
                offset: 0,
                src_oid: 0x3_9999,
                src_offset: 0,
                len: 10,
                src_cap: Some(Box::new(cap(P, 0x3_9999, 0x3_9999, rights::READ))),
            },
            Bytes::new(),
        )
        .await
        .unwrap_err();
    assert_eq!(code(e), ErrorCode::NoObject);
    t.stop.send(true).unwrap();
    t.task.await.unwrap().unwrap();
}

/// REMOVE OBJECTS removes what exists, counts the ids that named nothing,
/// needs a partition-wide right (a file's REMOVE capability is not
/// enough), and refuses an empty or oversized list and a group's partition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remove_objects_removes_many_and_needs_a_partition_right() {
    let t = start(false).await;
    let c = client(&t.addr, 1).await;
    let a = all(P);
    for oid in [0x10100u64, 0x10101, 0x10105] {
        c.run(
            Some(&a),
            Command::Create {
                pid: P,
                oid: Some(oid),
                count: 1,
            },
            Bytes::new(),
        )
        .await
        .unwrap();
    }
    let many = |oids: Vec<u64>| Command::RemoveObjects { pid: P, oids };
    // A capability with REMOVE over the range, without PARTITION: refused,
    // and nothing removed.
    let narrow = cap(P, 0x10100, 0x10105, rights::REMOVE);
    let e = c
        .run(Some(&narrow), many(vec![0x10100, 0x10105]), Bytes::new())
        .await
        .unwrap_err();
    assert_eq!(code(e), ErrorCode::CapRights);
    let r = c
        .run(
            Some(&a),
            many(vec![0x10100, 0x10101, 0x10102, 0x10105]),
            Bytes::new(),
        )
        .await
        .unwrap();
    assert_eq!(
        r.reply,
        Reply::Removed {
            removed: 3,
            absent: 1
        }
    );
    for oid in [0x10100u64, 0x10101, 0x10105] {
        let e = c
            .run(
                Some(&a),
                Command::GetAttributes { pid: P, oid },
                Bytes::new(),
            )
            .await
            .unwrap_err();
        assert_eq!(code(e), ErrorCode::NoObject, "{oid:#x} is gone");
    }
    // Again: every id is absent now, which is no error (a retried pass).
    let r = c
        .run(Some(&a), many(vec![0x10100, 0x10101]), Bytes::new())
        .await
        .unwrap();
    assert_eq!(
        r.reply,
        Reply::Removed {
            removed: 0,
            absent: 2
        }
    );
    for bad in [
        many(Vec::new()),
        many((0..=proto::msg::MAX_REMOVE_OBJECTS as u64).collect()),
        Command::RemoveObjects {
            pid: proto::chain::group_partition(1),
            oids: vec![1],
        },
    ] {
        let e = c
            .run(Some(&all(bad.partition().unwrap())), bad, Bytes::new())
            .await
            .unwrap_err();
        assert_eq!(code(e), ErrorCode::BadRequest);
    }
    let _ = t.stop.send(true);
    t.task.await.unwrap().unwrap();
}

/// Whoever may write attributes can make an OSD hold only so much of
/// them (all of them live in memory): past the bound, changes that add
/// are refused with BOUND, nothing of them made, and the OSD goes on serving; a
/// listing of everything too large for one answer is refused before it
/// is built, and paging still lists it all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attributes_past_the_metadata_bound_are_refused_and_the_osd_serves_on() {
    let opts = OpenOptions {
        max_attr_bytes: 2 << 20,
        ..OpenOptions::default()
    };
    let osd = start_opened(false, &opts, |_| {}).await;
    let c = client(&osd.addr, 2).await;
    let a = all(P);
    let oid = 0x10200;
    c.run(
        Some(&a),
        Command::Create {
            pid: P,
            oid: Some(oid),
            count: 1,
        },
        Bytes::new(),
    )
    .await
    .unwrap();
    let set = |n: u32| Request {
        cap: Some(a.clone()),
        id: 0,
        cmd: Command::SetAttributes { pid: P, oid },
        get: vec![],
        set: vec![(
            AttrKey {
                page: 0x100,
                number: n,
            },
            vec![n as u8; 60 << 10],
        )],
    };
    let mut n = 0u32;
    let refused = loop {
        match c.call(set(n), Bytes::new()).await {
            Ok(_) => n += 1,
            Err(e) => break code(e),
        }
        assert!(n < 100, "2 MiB of metadata took 100 values of 60 KiB");
    };
    assert_eq!(refused, ErrorCode::Bound);
    assert!((25..=35).contains(&n), "{n} values of 60 KiB in 2 MiB");
    // A write whose set list would pass the bound is refused before the
    // write is made: the object's data is unchanged.
    let mut write = set(n + 1);
    write.cmd = Command::Write {
        pid: P,
        oid,
        offset: 0,
    };
    let e = c
        .call(write, Bytes::from_static(b"DATA"))
        .await
        .unwrap_err();
    assert_eq!(code(e), ErrorCode::Bound);
    let read = c
        .run(
            Some(&a),
            Command::Read {
                pid: P,
                oid,
                offset: 0,
                len: 16,
            },
            Bytes::new(),
        )
        .await
        .unwrap();
    assert!(read.data.is_empty(), "the write was made: {:?}", read.data);
    // Everything else still works: a read, a page of the list, a removal
    // (after which one more fits).
    let first = c
        .run(
            Some(&a),
            Command::GetPage {
                pid: P,
                oid,
                page: 0x100,
                after: None,
                max: 8,
            },
            Bytes::new(),
        )
        .await
        .unwrap();
    let Reply::Page { attrs, next } = first.reply else {
        panic!("{:?}", first.reply)
    };
    assert_eq!((attrs.len(), next), (8, Some(7)));
    // All of them at once would pass the answer's bound: refused, not built.
    let e = c
        .run(
            Some(&a),
            Command::GetAttributes { pid: P, oid },
            Bytes::new(),
        )
        .await
        .unwrap_err();
    let ConnError::Remote(w) = e else {
        panic!("{e}")
    };
    assert_eq!(w.code, ErrorCode::BadRequest);
    assert!(w.message.contains("list them by page"), "{}", w.message);
    let mut remove = set(0);
    remove.set[0].1.clear();
    c.call(remove, Bytes::new()).await.unwrap();
    c.call(set(n), Bytes::new()).await.unwrap();
    let _ = osd.stop.send(true);
    osd.task.await.unwrap().unwrap();
}
