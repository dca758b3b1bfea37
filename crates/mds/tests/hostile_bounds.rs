//! Authenticated but hostile: what a principal holding an ordinary key may
//! send, over real sockets to live daemons. Nested and mangled headers of
//! every request kind, replayed inode numbers outside the id space, the
//! open-file table flooded from many sessions, copies marked stale
//! without write rights, admins with less than every right, idle sockets
//! that never say Hello, and inode numbers below a directory the caller
//! may not search. Each is refused; the daemons go on serving everyone.
#![expect(clippy::unwrap_used, reason = "tests: a panic is the failure report")]

mod common;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use mds::ids::PolicyKind;
use net::auth::{Identity, IdentitySource, TicketsFromMds};
use net::raw::RawSession;
use net::{ConnConfig, MdsClient};
use proto::mds::{
    Access, Creds, Errno, MDS_ID, MdsReply, MdsRequest, MdsResponse, Op, PrincipalSpec, ROOT_INO,
    ReplayOp, UidMap,
};
use proto::{Frame, Kind};

const T: Duration = Duration::from_secs(5);

async fn add(admin: &MdsClient, spec: PrincipalSpec) -> Result<Identity, Errno> {
    let name = spec.name.clone();
    match admin.call(Op::AuthAdd(spec)).await {
        Ok(MdsReply::PrincipalKey { info, wrapped_key }) => {
            let own = admin.identity().key.unwrap();
            let secret = proto::auth::unwrap_session_key(&own, &wrapped_key).unwrap();
            Ok(Identity::principal(&name, info.key_version, secret))
        }
        Err(net::CallError::Mds(e)) => Err(e.errno),
        r => panic!("{r:?}"),
    }
}

/// A principal of the whole tree, not an admin: its identity.
async fn key(admin: &MdsClient, name: &str, access: Access, uids: UidMap) -> Identity {
    add(admin, spec(name, "/", access, uids, false))
        .await
        .unwrap()
}

/// An exclusive create of `name` in `parent`.
fn create(parent: u64, name: &str, mode: u32) -> Op {
    Op::Create {
        parent,
        name: name.into(),
        mode,
        exclusive: true,
    }
}

fn spec(name: &str, path: &str, access: Access, uids: UidMap, admin: bool) -> PrincipalSpec {
    PrincipalSpec {
        name: name.into(),
        path: path.into(),
        access,
        uids,
        admin,
    }
}

fn errno(r: Result<MdsReply, net::CallError>) -> Errno {
    match r {
        Err(net::CallError::Mds(e)) => e.errno,
        other => panic!("expected an MDS error, got {other:?}"),
    }
}

fn user(uid: u32) -> Creds {
    Creds {
        uid,
        gid: uid,
        groups: vec![],
    }
}

async fn make(c: &MdsClient, creds: Creds, op: Op) -> u64 {
    match c.call_as(creds, op).await.unwrap() {
        MdsReply::Found(f) => f.entry.attr.ino,
        r => panic!("{r:?}"),
    }
}

fn mds_request(session: u64, op: Op) -> MdsRequest {
    MdsRequest {
        creds: Creds::root(),
        prefetch: 0,
        session,
        early: false,
        op,
    }
}

fn raw_frame(opcode: u16, tag: u64, header: Vec<u8>) -> Frame {
    Frame {
        kind: Kind::Request,
        opcode,
        tag,
        header: Bytes::from(header),
        payload: Bytes::new(),
    }
}

/// Sends `header` on a fresh authenticated connection: the server must
/// answer with an error or close the connection — never run it.
async fn send_hostile(addr: &str, server: u32, id: &Identity, opcode: u16, header: Vec<u8>) {
    let cfg = ConnConfig::new(CLUSTER, server, Arc::new(id.clone()));
    let mut raw = RawSession::open(addr, &cfg, id).await.unwrap();
    // A header past the frame limit may be refused by closing the
    // connection before it is all sent: a refusal too.
    if raw.send(raw_frame(opcode, 7, header)).await.is_err() {
        return;
    }
    if let Ok(f) = raw.recv(T).await {
        if server == MDS_ID {
            let r: MdsResponse = proto::msg::decode(&f.header).unwrap();
            assert!(r.result.is_err(), "a hostile header ran: {:?}", r.result);
        } else {
            let r: proto::Response = proto::msg::decode(&f.header).unwrap();
            assert!(r.result.is_err(), "a hostile header ran: {:?}", r.result);
        }
    }
}

fn replay(op: Op, ino: Option<u64>) -> Op {
    Op::Replay {
        instance: 1,
        ops: vec![ReplayOp {
            transno: 1,
            creds: Creds::root(),
            op,
            ino,
            seal: [0; proto::mds::SEAL_LEN],
        }],
    }
}

/// A REPLAY nested `depth` times, as one MDS request's header.
fn nested_replay(depth: usize) -> Vec<u8> {
    let inner = Op::GetAttr { ino: 0x5A5A_5A5A };
    let x = proto::msg::encode(&inner);
    let l1 = proto::msg::encode(&mds_request(1, replay(inner.clone(), None)));
    let l2 = proto::msg::encode(&mds_request(1, replay(replay(inner, None), None)));
    proto::nesting::deepen(&l1, &l2, &x, depth).unwrap()
}

/// A FORWARD nested `depth` times, as one OSD request's header.
fn nested_forward(depth: usize) -> Vec<u8> {
    let inner = proto::Command::DataRanges {
        pid: 0x5A5A_5A5A_5A5A,
        oid: 0x5A5A_5A5A_5A5A,
    };
    let fwd = |op| {
        proto::Command::Forward(Box::new(proto::chain::Forward {
            group: 1,
            epoch: 1,
            op,
            origin: 1,
            id: 1,
            reply: proto::Reply::Done,
            attrs: vec![],
        }))
    };
    let req = |cmd| proto::Request {
        cap: None,
        id: 1,
        cmd,
        get: vec![],
        set: vec![],
    };
    let x = proto::msg::encode(&inner);
    let l1 = proto::msg::encode(&req(fwd(inner.clone())));
    let l2 = proto::msg::encode(&req(fwd(fwd(inner))));
    proto::nesting::deepen(&l1, &l2, &x, depth).unwrap()
}

/// Sample requests of many kinds, encoded: what the mangling starts from.
fn sample_requests() -> Vec<(u16, Vec<u8>)> {
    let ops = vec![
        Op::Lookup {
            parent: ROOT_INO,
            name: "x".into(),
        },
        Op::GetAttr { ino: ROOT_INO },
        Op::Readdir {
            ino: ROOT_INO,
            after: None,
            max: 10,
            plus: true,
        },
        Op::Mkdir {
            parent: ROOT_INO,
            name: "m".into(),
            mode: 0o755,
        },
        Op::Holding {
            held: vec![(ROOT_INO, false); 3],
        },
        Op::DirOps {
            dir: ROOT_INO,
            ops: vec![],
        },
        replay(
            Op::Unlink {
                parent: ROOT_INO,
                name: "u".into(),
            },
            None,
        ),
        Op::Status,
        Op::AuthList,
        Op::GroupAdd {
            id: 4,
            addr: "127.0.0.1:7404".into(),
            peer: "x".repeat(300),
        },
        Op::GroupRemove { id: u64::MAX },
    ];
    ops.into_iter()
        .map(|op| {
            let r = mds_request(3, op);
            (r.op.opcode(), proto::msg::encode(&r))
        })
        .collect()
}

/// A tiny deterministic generator (xorshift), so a failure reproduces.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_and_mangled_headers_never_stop_a_daemon() {
    let cl = Cluster::start(1, spec_layout(), PolicyKind::ChildClosest).await;
    let admin = cl.client();
    let ro = key(&admin, "client.ro", Access::ReadOnly, UidMap::SquashRoot).await;
    // Nested REPLAYs to the MDS, from a read-only key: shallow and deep
    // enough to overflow any stack if decoded recursively.
    for depth in [2, 3, 64, 200_000] {
        send_hostile(&cl.mds_addr, MDS_ID, &ro, 0x100, nested_replay(depth)).await;
    }
    // Nested FORWARDs to the OSD, from a client's ticket.
    let tickets = TicketsFromMds::new(Arc::new(MdsClient::new(
        &cl.mds_addr,
        CLUSTER,
        ro.clone(),
        1,
    )));
    let ticket = tickets.identity(0).await.unwrap();
    let osd = cl.osd0_addr();
    for depth in [2, 64, 200_000] {
        send_hostile(&osd, 0, &ticket, 0, nested_forward(depth)).await;
    }
    // Mangled encodings of many request kinds: truncated, bytes flipped,
    // lengths made huge. Fixed seed: a failure reproduces.
    let mut rng = Rng(0x7E55_E7A5_0001);
    let samples = sample_requests();
    for round in 0..300 {
        let (opcode, mut h) = samples[round % samples.len()].clone();
        match rng.below(3) {
            0 => h.truncate(rng.below(h.len())),
            1 => {
                for _ in 0..=rng.below(4) {
                    let at = rng.below(h.len());
                    h[at] = rng.next() as u8;
                }
            }
            _ => {
                let at = rng.below(h.len());
                h.splice(at..at, [0xff, 0xff, 0xff, 0xff, 0x0f]);
            }
        }
        let cfg = ConnConfig::new(CLUSTER, MDS_ID, Arc::new(ro.clone()));
        let mut raw = RawSession::open(&cl.mds_addr, &cfg, &ro).await.unwrap();
        raw.send(raw_frame(opcode, 9, h)).await.unwrap();
        let _ = raw.recv(T).await; // an answer or a close: either is fine
    }
    // Both daemons still serve everyone, and nothing changed.
    both_still_serve(&cl, &admin, 0x1_0077).await;
    match admin
        .call(Op::Lookup {
            parent: ROOT_INO,
            name: "m".into(),
        })
        .await
    {
        Err(net::CallError::Mds(e)) => assert_eq!(e.errno, Errno::NoEnt),
        r => panic!("a mangled mkdir ran: {r:?}"),
    }
    cl.stop().await;
}

/// `n` requests of every kind from `strategy`, from a fixed seed (a
/// failure reproduces), encoded.
fn generated<S: proptest::strategy::Strategy>(strategy: S, n: usize) -> Vec<Vec<u8>>
where
    S::Value: serde::Serialize,
{
    use proptest::strategy::ValueTree;
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &[0x7e; 32]);
    let mut runner = TestRunner::new_with_rng(Config::default(), rng);
    (0..n)
        .map(|_| proto::msg::encode(&strategy.new_tree(&mut runner).unwrap().current()))
        .collect()
}

/// `h` damaged one of four ways: cut short, bytes changed, a huge length
/// inserted, or wrapped in itself (a REPLAY or FORWARD of it).
fn mangle(rng: &mut Rng, mut h: Vec<u8>) -> Vec<u8> {
    match rng.below(4) {
        0 => h.truncate(rng.below(h.len())),
        1 => {
            for _ in 0..=rng.below(4) {
                let at = rng.below(h.len());
                h[at] = rng.next() as u8;
            }
        }
        2 => {
            let at = rng.below(h.len());
            h.splice(at..at, [0xff, 0xff, 0xff, 0xff, 0x0f]);
        }
        _ => {
            let copy = h.clone();
            h.extend_from_slice(&copy);
        }
    }
    h
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generated_requests_of_every_kind_mangled_leave_both_daemons_serving() {
    let cl = Cluster::start(1, spec_layout(), PolicyKind::ChildClosest).await;
    let admin = cl.client();
    let ro = key(&admin, "client.ro", Access::ReadOnly, UidMap::SquashRoot).await;
    let mut rng = Rng(0x00C0_FFEE_1234_5678);
    let cfg = ConnConfig::new(CLUSTER, MDS_ID, Arc::new(ro.clone()));
    let mut raw = RawSession::open(&cl.mds_addr, &cfg, &ro).await.unwrap();
    for (n, h) in generated(proto::strategies::mds_request(), 400)
        .into_iter()
        .enumerate()
    {
        let h = mangle(&mut rng, h);
        if raw.send(raw_frame(0x100, n as u64, h)).await.is_err() || raw.recv(T).await.is_err() {
            // Closed by the server: a new connection for the next one.
            raw = RawSession::open(&cl.mds_addr, &cfg, &ro).await.unwrap();
        }
    }
    let tickets = TicketsFromMds::new(Arc::new(MdsClient::new(
        &cl.mds_addr,
        CLUSTER,
        ro.clone(),
        1,
    )));
    let ticket = tickets.identity(0).await.unwrap();
    let osd = cl.osd0_addr();
    let ocfg = ConnConfig::new(CLUSTER, 0, Arc::new(ticket.clone()));
    let mut raw = RawSession::open(&osd, &ocfg, &ticket).await.unwrap();
    for (n, h) in generated(proto::strategies::osd_request(), 400)
        .into_iter()
        .enumerate()
    {
        let h = mangle(&mut rng, h);
        if raw.send(raw_frame(0, n as u64, h)).await.is_err() || raw.recv(T).await.is_err() {
            raw = RawSession::open(&osd, &ocfg, &ticket).await.unwrap();
        }
    }
    both_still_serve(&cl, &admin, 0x1_0078).await;
    check_clean(&cl.mds.as_ref().unwrap().mds);
    cl.stop().await;
}

/// The MDS answers the admin and OSD 0 takes a write to object `oid`.
async fn both_still_serve(cl: &Cluster, admin: &MdsClient, oid: u64) {
    assert!(matches!(
        admin.call(Op::Status).await,
        Ok(MdsReply::Status(_))
    ));
    let (c, cap) = cl.osd_client(0);
    c.run(
        Some(&cap),
        proto::Command::CreateAndWrite {
            pid: proto::layout::DATA_PARTITION,
            oid,
        },
        Bytes::from_static(b"still here"),
    )
    .await
    .unwrap();
}

fn spec_layout() -> proto::layout::LayoutSpec {
    common::spec(4096, 1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replays_and_requests_cannot_name_object_ids_as_inodes() {
    let cl = Cluster::start(1, spec_layout(), PolicyKind::ChildClosest).await;
    let admin = cl.client();
    let victim = make(&admin, Creds::root(), create(ROOT_INO, "victim", 0o600)).await;
    let rw = key(&admin, "client.rw", Access::ReadWrite, UidMap::SquashRoot).await;
    let rw = MdsClient::new(&cl.mds_addr, CLUSTER, rw, 1);
    // A replayed create naming the victim's data object id as its inode.
    let forged = replay(
        create(ROOT_INO, "twin", 0o644),
        Some(proto::layout::data_oid(victim)),
    );
    assert_eq!(errno(rw.call(forged).await), Errno::Inval);
    // The same number in any request is refused as not an inode number.
    for ino in [proto::layout::data_oid(victim), u64::MAX, 1 << 63] {
        assert_eq!(errno(rw.call(Op::GetAttr { ino }).await), Errno::Inval);
    }
    assert_eq!(
        errno(
            admin
                .call(Op::Lookup {
                    parent: ROOT_INO,
                    name: "twin".into()
                })
                .await
        ),
        Errno::NoEnt
    );
    check_clean(&cl.mds.as_ref().unwrap().mds);
    cl.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_sessions_holding_files_refuses_only_its_own_principal() {
    let cl = Cluster::start_holding(1, spec_layout(), PolicyKind::ChildClosest).await;
    let admin = cl.client();
    let secret = make(&admin, Creds::root(), create(ROOT_INO, "secret", 0o600)).await;
    let ro = key(&admin, "client.ro", Access::ReadOnly, UidMap::SquashRoot).await;
    let mut ro = MdsClient::new(&cl.mds_addr, CLUSTER, ro, 2);
    // 600 sessions, each claiming to hold every inode it can name (most
    // of which do not exist) — more than the per-principal bound.
    let held: Vec<(u64, bool)> = (1..4096u64).map(|i| (i, true)).collect();
    for s in 1..=600u64 {
        ro.session = s;
        ro.call_as(user(1000), Op::Holding { held: held.clone() })
            .await
            .unwrap();
    }
    // A report grants nothing: the 0600 file stays closed to it.
    ro.session = 5;
    let open = Op::Open {
        ino: secret,
        write: false,
    };
    assert_eq!(errno(ro.call_as(user(1000), open).await), Errno::Access);
    // Everyone else still opens and creates: no EBUSY.
    let mut other = cl.client();
    for i in 0..50 {
        other.session = 900_000 + i;
        make(
            &other,
            Creds::root(),
            Op::Create {
                parent: ROOT_INO,
                name: format!("after-{i}"),
                mode: 0o644,
                exclusive: true,
            },
        )
        .await;
    }
    cl.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rights_match_effects() {
    let cl = Cluster::start(3, common::spec(4096, 1), PolicyKind::ChildClosest).await;
    let admin = cl.client();
    let f = match admin.call(create(ROOT_INO, "f", 0o644)).await.unwrap() {
        MdsReply::Found(f) => f,
        r => panic!("{r:?}"),
    };
    let l = f.entry.layout.clone().unwrap();
    let osd = l.homes[0].stripes[0].fresh[0];
    let mark = Op::MarkStale {
        ino: f.entry.attr.ino,
        objset: 0,
        stripe: 0,
        osd,
    };
    // Read-only: refused as a change.
    let ro = key(&admin, "client.ro", Access::ReadOnly, UidMap::Trusted).await;
    let ro = MdsClient::new(&cl.mds_addr, CLUSTER, ro, 1);
    assert_eq!(errno(ro.call(mark.clone()).await), Errno::RoFs);
    // Read-write, but the file is only readable for this uid: a reader's
    // report is confirmed by the MDS first, and this copy reads whole.
    let rw = key(&admin, "client.rw", Access::ReadWrite, UidMap::Trusted).await;
    let rw = MdsClient::new(&cl.mds_addr, CLUSTER, rw, 1);
    assert_eq!(errno(rw.call_as(user(1000), mark.clone()).await), Errno::Io);
    match admin
        .call(Op::GetLayout {
            ino: f.entry.attr.ino,
        })
        .await
        .unwrap()
    {
        MdsReply::Layout { layout, .. } => {
            assert!(
                layout.unwrap().homes[0].stripes[0].fresh.contains(&osd),
                "copy set aside"
            )
        }
        r => panic!("{r:?}"),
    }
    // Admins have every right or none: --admin with a path, ro or mapped
    // uids is refused; only client.admin rotates client.admin.
    for bad in [
        spec(
            "client.a1",
            "/sub",
            Access::ReadWrite,
            UidMap::Trusted,
            true,
        ),
        spec("client.a2", "/", Access::ReadOnly, UidMap::Trusted, true),
        spec(
            "client.a3",
            "/",
            Access::ReadWrite,
            UidMap::SquashRoot,
            true,
        ),
    ] {
        assert_eq!(add(&admin, bad).await.err(), Some(Errno::Inval));
    }
    let other = add(
        &admin,
        spec("client.ops", "/", Access::ReadWrite, UidMap::Trusted, true),
    )
    .await
    .unwrap();
    let other = MdsClient::new(&cl.mds_addr, CLUSTER, other, 1);
    assert_eq!(
        errno(
            other
                .call(Op::AuthRotate {
                    name: "client.admin".into()
                })
                .await
        ),
        Errno::Perm
    );
    assert!(matches!(
        admin.call(Op::Status).await,
        Ok(MdsReply::Status(_))
    ));
    cl.stop().await;
}

/// Raises this process's open-file limit to its hard limit, as the
/// daemons do (a test opening 10,000 sockets needs it).
fn raise_open_file_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write `lim`.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_sockets_that_never_say_hello_lock_nobody_out() {
    raise_open_file_limit();
    let cl = Cluster::start(1, spec_layout(), PolicyKind::ChildClosest).await;
    let admin = cl.client();
    // 10,000 sockets that never say Hello, half at the MDS, half at an
    // OSD (each past its handshake cap and its 4,096 connections).
    let mut idle = Vec::new();
    for addr in [cl.mds_addr.clone(), cl.osd0_addr()] {
        for _ in 0..5_000 {
            if let Ok(s) = tokio::net::TcpStream::connect(&addr).await {
                idle.push(s);
            }
        }
    }
    assert!(idle.len() >= 9_500, "only {} sockets opened", idle.len());
    // A fresh client, with its own new connections, works at once.
    let fresh = MdsClient::new(&cl.mds_addr, CLUSTER, cl.admin(), 1);
    let t0 = std::time::Instant::now();
    let r = tokio::time::timeout(Duration::from_secs(10), fresh.call(Op::Status)).await;
    assert!(matches!(r, Ok(Ok(MdsReply::Status(_)))), "{r:?}");
    let f = make(&admin, Creds::root(), create(ROOT_INO, "g", 0o644)).await;
    let _ = f;
    let (osd, cap) = cl.osd_client(0);
    let read = osd.read(Some(&cap), proto::layout::DATA_PARTITION, 1, 0, 1);
    let r = tokio::time::timeout(Duration::from_secs(10), read).await;
    assert!(
        !matches!(
            r,
            Err(_)
                | Ok(Err(
                    net::ConnError::Connect { .. } | net::ConnError::Refused(_)
                ))
        ),
        "the OSD answers a new client while idle sockets wait: {r:?}"
    );
    assert!(t0.elapsed() < Duration::from_secs(10));
    drop(idle);
    cl.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inode_numbers_below_an_unsearchable_directory_grant_nothing() {
    let cl = Cluster::start(1, spec_layout(), PolicyKind::ChildClosest).await;
    let admin = cl.client();
    let private = make(
        &admin,
        Creds::root(),
        Op::Mkdir {
            parent: ROOT_INO,
            name: "private".into(),
            mode: 0o700,
        },
    )
    .await;
    let inner = mkdir(&admin, private, "inner").await;
    let file = make(
        &admin,
        Creds::root(),
        create(inner, "readable-by-all", 0o644),
    )
    .await;
    let rw_id = key(&admin, "client.rw", Access::ReadWrite, UidMap::SquashRoot).await;
    let rw = MdsClient::new(&cl.mds_addr, CLUSTER, rw_id.clone(), 1);
    let u = user(1000);
    for op in [
        Op::GetAttr { ino: file },
        Op::Stat { ino: file },
        Op::Open {
            ino: file,
            write: false,
        },
        Op::Readdir {
            ino: inner,
            after: None,
            max: 10,
            plus: true,
        },
        Op::Lookup {
            parent: inner,
            name: "readable-by-all".into(),
        },
        Op::ListXattr { ino: file },
    ] {
        let name = op.name();
        assert_eq!(
            errno(rw.call_as(u.clone(), op).await),
            Errno::Access,
            "{name}"
        );
    }
    // Prefetch from a file next to them names none of them.
    let next = make(&admin, Creds::root(), create(ROOT_INO, "public", 0o644)).await;
    let pf = MdsClient::new(&cl.mds_addr, CLUSTER, rw_id.clone(), 1);
    match pf.call_as(u.clone(), Op::Stat { ino: next }).await.unwrap() {
        MdsReply::Found(f) => {
            let named: Vec<u64> = f.prefetch.iter().map(|e| e.attr.ino).collect();
            assert!(
                !named.contains(&file) && !named.contains(&inner),
                "{named:?}"
            );
        }
        r => panic!("{r:?}"),
    }
    // Root (trusted) still reaches it, and the directory was what kept
    // uid 1000 out: the file itself is readable by all.
    assert!(matches!(
        admin.call(Op::Stat { ino: file }).await,
        Ok(MdsReply::Found(_))
    ));
    let _ = private;
    cl.stop().await;
}

/// Whether a raw session still answers (evicted ones are closed).
async fn answers(raw: &mut RawSession, tag: u64) -> bool {
    let status = mds_request(0, Op::Status);
    let f = net::frame_io::frame(Kind::Request, 0x100, tag, &status, Bytes::new());
    raw.send(f).await.is_ok() && raw.recv(T).await.is_ok()
}

/// One key flooding the MDS with connections never keeps another out,
/// and never locks out its own newest either: when the MDS is full
/// (`max_connections`, 16 here), its own idlest give way; a principal
/// holding fewer takes a seat of the one holding the most, and keeps it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_key_cannot_take_every_connection() {
    let cl = Cluster::start_set(
        1,
        spec_layout(),
        PolicyKind::ChildClosest,
        "max_connections = 16",
    )
    .await;
    let admin = cl.client();
    let ro = key(&admin, "client.ro", Access::ReadOnly, UidMap::SquashRoot).await;
    let other = key(&admin, "client.other", Access::ReadOnly, UidMap::SquashRoot).await;
    drop(admin);
    let cfg = ConnConfig::new(CLUSTER, MDS_ID, Arc::new(ro.clone()));
    let mut flood = Vec::new();
    for n in 0..40u64 {
        let mut raw = RawSession::open(&cl.mds_addr, &cfg, &ro).await.unwrap();
        assert!(
            answers(&mut raw, n).await,
            "the flooder's newest ({n}) is served"
        );
        flood.push(raw);
    }
    let mut open = 0;
    for (n, raw) in flood.iter_mut().enumerate() {
        open += usize::from(answers(raw, 100 + n as u64).await);
    }
    assert!(
        open <= 16,
        "{open} of one key's connections still served, past the 16"
    );
    // Another principal gets in, and stays in while the flood goes on.
    let ocfg = ConnConfig::new(CLUSTER, MDS_ID, Arc::new(other.clone()));
    let mut mine = RawSession::open(&cl.mds_addr, &ocfg, &other).await.unwrap();
    assert!(answers(&mut mine, 1).await);
    for n in 0..40u64 {
        let mut raw = RawSession::open(&cl.mds_addr, &cfg, &ro).await.unwrap();
        assert!(answers(&mut raw, 200 + n).await);
        flood.push(raw);
        assert!(
            answers(&mut mine, 300 + n).await,
            "the other principal's connection was taken"
        );
    }
    drop(flood);
    cl.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_key_records_a_bounded_number_of_early_answered_sessions() {
    let cl = Cluster::start(1, spec_layout(), PolicyKind::ChildClosest).await;
    let admin = cl.client();
    let rw = key(&admin, "client.rw", Access::ReadWrite, UidMap::Trusted).await;
    let cfg = ConnConfig::new(CLUSTER, MDS_ID, Arc::new(rw.clone()));
    let mut raw = RawSession::open(&cl.mds_addr, &cfg, &rw).await.unwrap();
    let mut early = 0;
    // A session's first change is answered durable (it records the
    // session); its second may be early.
    for (n, s) in (1..=100u64).flat_map(|s| [s, s]).enumerate() {
        let req = MdsRequest {
            creds: Creds::root(),
            prefetch: 0,
            session: s * 7919,
            early: true,
            op: create(ROOT_INO, &format!("s{n}"), 0o644),
        };
        let f = net::frame_io::frame(Kind::Request, 0x100, n as u64, &req, Bytes::new());
        raw.send(f).await.unwrap();
        let r: MdsResponse = proto::msg::decode(&raw.recv(T).await.unwrap().header).unwrap();
        match r.result.unwrap() {
            MdsReply::Early(_) => early += 1,
            MdsReply::Found(_) => {} // answered durable: past the bound
            other => panic!("{other:?}"),
        }
    }
    let bound = mds::service::EARLY_SESSIONS_PER_PRINCIPAL;
    assert_eq!(
        early, bound,
        "early answers for at most {bound} sessions of one key"
    );
    // Every create was made, early or not.
    for n in 0..200 {
        let op = Op::Lookup {
            parent: ROOT_INO,
            name: format!("s{n}"),
        };
        assert!(matches!(admin.call(op).await, Ok(MdsReply::Found(_))));
    }
    cl.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_stay_within_a_principal_its_subtree_and_its_rights() {
    use proto::locks::{LockKind, LockSpec};
    let lk = |kind, start, end| LockSpec {
        owner: 7,
        start,
        end,
        kind,
        pid: 1,
    };
    let cl = Cluster::start(1, spec_layout(), PolicyKind::ChildClosest).await;
    let admin = cl.client();
    let a = mkdir(&admin, ROOT_INO, "a").await;
    let outside = make(&admin, Creds::root(), create(ROOT_INO, "outside", 0o644)).await;
    let inside = make(&admin, Creds::root(), create(a, "inside", 0o644)).await;
    // A confined key claiming uid 0 reaches nothing outside its subtree,
    // not even to learn who holds a lock there.
    let conf = add(
        &admin,
        spec(
            "client.conf",
            "/a",
            Access::ReadWrite,
            UidMap::Trusted,
            false,
        ),
    )
    .await
    .unwrap();
    let conf = MdsClient::new(&cl.mds_addr, CLUSTER, conf, 1);
    admin
        .call(Op::Lock {
            ino: outside,
            lock: lk(LockKind::Write, 0, u64::MAX),
        })
        .await
        .unwrap();
    for op in [
        Op::Lock {
            ino: outside,
            lock: lk(LockKind::Read, 0, 0),
        },
        Op::TestLock {
            ino: outside,
            lock: lk(LockKind::Write, 0, u64::MAX),
        },
    ] {
        assert_eq!(errno(conf.call(op).await), Errno::Access);
    }
    // Its report of a lock outside takes nothing (and is not an error).
    conf.call(Op::LocksHeld {
        locks: vec![(outside, lk(LockKind::Write, 0, 5))],
    })
    .await
    .unwrap();
    // Another principal's unlock of the same owner number, on a file it
    // may not name, is refused; the admin's lock stays either way.
    let unlock = Op::Lock {
        ino: outside,
        lock: lk(LockKind::Unlock, 0, u64::MAX),
    };
    assert_eq!(
        errno(conf.call(unlock).await),
        Errno::Access,
        "{outside:#x}"
    );
    match admin
        .call(Op::TestLock {
            ino: outside,
            lock: LockSpec {
                owner: 8,
                ..lk(LockKind::Read, 0, 0)
            },
        })
        .await
        .unwrap()
    {
        MdsReply::LockedBy(Some(l)) => assert_eq!((l.start, l.kind), (0, LockKind::Write)),
        r => panic!("the admin's lock must still be there: {r:?}"),
    }
    // Inside, a read-only file (for uid 1000) takes read locks only;
    // ranges past where a file can reach are refused.
    let rw = key(&admin, "client.rw", Access::ReadWrite, UidMap::Trusted).await;
    let rw = MdsClient::new(&cl.mds_addr, CLUSTER, rw, 1);
    let u = user(1000);
    let lock = |kind, start, end| Op::Lock {
        ino: inside,
        lock: lk(kind, start, end),
    };
    rw.call_as(u.clone(), lock(LockKind::Read, 0, 9))
        .await
        .unwrap();
    assert_eq!(
        errno(rw.call_as(u.clone(), lock(LockKind::Write, 0, 9)).await),
        Errno::BadF
    );
    assert_eq!(
        errno(
            rw.call_as(u.clone(), lock(LockKind::Read, 1 << 63, u64::MAX))
                .await
        ),
        Errno::Inval
    );
    assert_eq!(
        errno(rw.call_as(u.clone(), lock(LockKind::Read, 9, 3)).await),
        Errno::Inval
    );
    // A directory, a missing inode: the same refusal as no right.
    for ino in [a, inside + 1_000_000] {
        let op = Op::Lock {
            ino,
            lock: lk(LockKind::Read, 0, 0),
        };
        assert_eq!(errno(rw.call_as(u.clone(), op).await), Errno::BadF);
    }
    assert!(cl.mds.as_ref().unwrap().mds.locks_count() >= 2);
    cl.stop().await;
}

/// Pages of a directory of the longest names that are not UTF-8 (1,020
/// bytes each as escapes): every READDIR page fits its frame, so the
/// directory lists whole, and a prefetching READDIR of its parent answers
/// too (before the pages were cut by bytes, 1,000 such names made the
/// directory impossible to list).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directories_of_the_longest_names_still_list() {
    let cl = Cluster::start(1, spec_layout(), PolicyKind::ChildClosest).await;
    let c = cl.client();
    let mkdir = Op::Mkdir {
        parent: ROOT_INO,
        name: "long".into(),
        mode: 0o755,
    };
    let dir = make(&c, Creds::root(), mkdir).await;
    let mut want = Vec::new();
    for i in 0..1100u32 {
        let mut b = vec![0xe9u8; 251];
        b.extend_from_slice(format!("{i:04}").as_bytes());
        let n = posix::name_from_bytes(&b).unwrap().into_owned();
        make(&c, Creds::root(), create(dir, &n, 0o644)).await;
        want.push(n);
    }
    want.sort();
    let (mut got, mut after, mut pages) = (Vec::new(), None, 0);
    loop {
        let readdir = Op::Readdir {
            ino: dir,
            after: after.clone(),
            max: 4096,
            plus: true,
        };
        match c.call(readdir).await.unwrap() {
            MdsReply::Dir { entries, more } => {
                assert!(!entries.is_empty());
                pages += 1;
                after = entries.last().map(|e| e.name.clone());
                got.extend(entries.into_iter().map(|e| e.name));
                if !more {
                    break;
                }
            }
            r => panic!("{r:?}"),
        }
    }
    got.sort();
    assert_eq!(got, want);
    assert!(pages >= 3, "{pages} pages");
    let prefetch = Op::ReaddirPrefetch {
        ino: ROOT_INO,
        after: None,
        max: 1000,
    };
    match c.call(prefetch).await.unwrap() {
        MdsReply::DirPrefetch { .. } => {}
        r => panic!("{r:?}"),
    }
    cl.stop().await;
}

/// Sends `op` early-answerable on `session` over a raw connection as `id`;
/// the MDS's answer (an early one carries its seal).
async fn raw_call(addr: &str, id: &Identity, session: u64, op: Op) -> MdsReply {
    let cfg = ConnConfig::new(CLUSTER, MDS_ID, Arc::new(id.clone()));
    let mut raw = RawSession::open(addr, &cfg, id).await.unwrap();
    let mut req = mds_request(session, op);
    req.early = true;
    let opcode = req.op.opcode();
    raw.send(raw_frame(opcode, 1, proto::msg::encode(&req)))
        .await
        .unwrap();
    let f = raw.recv(T).await.unwrap();
    let r: MdsResponse = proto::msg::decode(&f.header).unwrap();
    r.result.unwrap()
}

/// An early answer's seal binds the operation to the session it was
/// answered on, to its transno, and to its content: a replay of it from
/// another session or principal, at another place, or changed in any part,
/// is refused; only the exact one from its own session is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_carries_only_what_the_mds_sealed_for_that_session() {
    let cl = Cluster::start(1, spec_layout(), PolicyKind::ChildClosest).await;
    let mut admin = cl.client();
    let other = key(&admin, "client.other", Access::ReadWrite, UidMap::Trusted).await;
    let me = admin.identity().clone();
    const S: u64 = 0x5e55_1011;
    // The session's first change is answered durable; the next early.
    raw_call(&cl.mds_addr, &me, S, create(ROOT_INO, "first", 0o644)).await;
    let op = create(ROOT_INO, "second", 0o644);
    let e = match raw_call(&cl.mds_addr, &me, S, op.clone()).await {
        MdsReply::Early(e) => *e,
        r => panic!("not answered early: {r:?}"),
    };
    assert_ne!(e.seal, [0; proto::mds::SEAL_LEN]);
    let sealed = ReplayOp {
        transno: e.transno,
        creds: Creds::root(),
        op: op.clone(),
        ino: e.reply.named_ino(),
        seal: e.seal,
    };
    let replay = |ops: Vec<ReplayOp>| Op::Replay {
        instance: e.instance,
        ops,
    };
    // Its own session, exactly as answered: taken.
    admin.session = S;
    match admin.call(replay(vec![sealed.clone()])).await.unwrap() {
        MdsReply::Replayed { results, .. } => assert!(results[0].is_ok(), "{results:?}"),
        r => panic!("{r:?}"),
    }
    // The same operation twice, or out of order: not a client's list.
    assert_eq!(
        errno(
            admin
                .call(replay(vec![sealed.clone(), sealed.clone()]))
                .await
        ),
        Errno::Inval
    );
    // Anything changed, another instance named, another session or
    // principal: that operation is refused (EACCES) and not made; the
    // sealed one beside it still counts.
    let refused = |r: Result<MdsReply, net::CallError>, what: &str| match r.unwrap() {
        MdsReply::Replayed { results, .. } => {
            let last = results.last().unwrap();
            assert_eq!(last.as_ref().unwrap_err().errno, Errno::Access, "{what}");
        }
        r => panic!("{what}: {r:?}"),
    };
    let mut changed = Vec::new();
    let mut c = sealed.clone();
    c.transno += 1;
    changed.push(("a later transno", c));
    let mut c = sealed.clone();
    c.op = create(ROOT_INO, "forged", 0o644);
    c.transno += 1;
    changed.push(("another operation", c));
    let mut c = sealed.clone();
    c.creds = user(1000);
    c.transno += 1;
    changed.push(("other credentials", c));
    let mut c = sealed.clone();
    c.ino = c.ino.map(|i| i + 1);
    c.transno += 1;
    changed.push(("another inode", c));
    for (what, c) in changed {
        let r = admin.call(replay(vec![sealed.clone(), c])).await;
        refused(r, what);
    }
    let other_instance = Op::Replay {
        instance: e.instance + 1,
        ops: vec![sealed.clone()],
    };
    refused(admin.call(other_instance).await, "another instance");
    admin.session = S + 1;
    let r = admin.call(replay(vec![sealed.clone()])).await;
    refused(r, "another session of the same principal");
    let mut thief = MdsClient::new(&cl.mds_addr, CLUSTER, other, 1);
    thief.session = S;
    refused(thief.call(replay(vec![sealed])).await, "another principal");
    assert_eq!(
        errno(
            cl.client()
                .call(Op::Lookup {
                    parent: ROOT_INO,
                    name: "forged".into()
                })
                .await
        ),
        Errno::NoEnt
    );
    check_clean(&cl.mds.as_ref().unwrap().mds);
    cl.stop().await;
}

/// A hold for writing re-announced to a restarted MDS (which knows no
/// holds) is judged by the mode, and by whose files the principal may act
/// as the owner of — those it could chmod itself: a fixed-uid key gets
/// writing back on its own 0444 file and not on another uid's; a
/// root-squashing key on anyone's but root's; a read-only key on none (no
/// write lock through the report either).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_re_announced_hold_gives_writing_back_only_to_who_could_chmod() {
    let cl = Cluster::start_holding(1, spec_layout(), PolicyKind::ChildClosest).await;
    let admin = cl.client();
    let mut files = Vec::new();
    for (name, uid) in [("of-5", 5), ("of-root", 0)] {
        let ino = make(&admin, Creds::root(), create(ROOT_INO, name, 0o644)).await;
        let set = proto::mds::SetAttr {
            mode: Some(0o444),
            uid: Some(uid),
            ..Default::default()
        };
        admin.call(Op::SetAttr { ino, set }).await.unwrap();
        files.push(ino);
    }
    let (of5, of_root) = (files[0], files[1]);
    let fixed = |uid| UidMap::Fixed { uid, gid: uid };
    let rw = Access::ReadWrite;
    let keys = [
        ("client.five", rw, fixed(5)),
        ("client.six", rw, fixed(6)),
        ("client.squash", rw, UidMap::SquashRoot),
        ("client.ro", Access::ReadOnly, UidMap::SquashRoot),
    ];
    let mut clients = Vec::new();
    for (name, access, uids) in keys {
        clients.push(MdsClient::new(
            &cl.mds_addr,
            CLUSTER,
            key(&admin, name, access, uids).await,
            1,
        ));
    }
    let cases = [
        (0, of5, true),
        (1, of5, false),
        (2, of5, true),
        (2, of_root, false),
    ];
    for (n, (k, ino, allowed)) in cases.into_iter().enumerate() {
        let c = &mut clients[k];
        c.session = 9000 + n as u64;
        c.call_as(
            user(5),
            Op::Holding {
                held: vec![(ino, true)],
            },
        )
        .await
        .unwrap();
        let r = c.call_as(user(5), Op::Open { ino, write: true }).await;
        match (allowed, r) {
            (true, Ok(MdsReply::Found(f))) => assert!(
                f.grants
                    .iter()
                    .any(|g| g.rights & proto::rights::WRITE != 0),
                "case {n}: write grants"
            ),
            (false, Err(e)) => assert_eq!(e.errno(), 13, "case {n}"),
            (_, r) => panic!("case {n}: {r:?}"),
        }
    }
    // The read-only key: its report is taken (it keeps files alive) but
    // grants no writing, so no write lock on a file it may not write.
    let ro = &mut clients[3];
    ro.session = 9100;
    ro.call_as(
        user(5),
        Op::Holding {
            held: vec![(of5, true)],
        },
    )
    .await
    .unwrap();
    let lock = Op::Lock {
        ino: of5,
        lock: proto::locks::LockSpec {
            owner: 1,
            start: 0,
            end: u64::MAX,
            kind: proto::locks::LockKind::Write,
            pid: 1,
        },
    };
    assert_eq!(errno(ro.call_as(user(5), lock.clone()).await), Errno::BadF);
    // Nor claiming root, which may write anything: it opens nothing for
    // writing.
    assert_eq!(errno(ro.call_as(user(0), lock).await), Errno::BadF);
    cl.stop().await;
}

/// A confined principal claiming uid 0 holds nothing outside its subtree:
/// its report of a file elsewhere keeps no orphan alive (before, uid 0
/// skipped the walk that finds the principal's root, and a report kept
/// any file it named from being reaped, for good).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confined_root_keeps_nothing_outside_its_subtree_alive() {
    let cl = Cluster::start_set(
        1,
        spec_layout(),
        PolicyKind::ChildClosest,
        "hold_expiry_ms = 1000",
    )
    .await;
    let admin = cl.client();
    mkdir(&admin, ROOT_INO, "a").await;
    let outside = make(&admin, Creds::root(), create(ROOT_INO, "outside", 0o644)).await;
    let conf = spec(
        "client.conf",
        "/a",
        Access::ReadWrite,
        UidMap::Trusted,
        false,
    );
    let mut conf = MdsClient::new(&cl.mds_addr, CLUSTER, add(&admin, conf).await.unwrap(), 1);
    conf.session = 4242;
    let report = Op::Holding {
        held: vec![(outside, true)],
    };
    conf.call_as(user(0), report.clone()).await.unwrap();
    admin
        .call(Op::Unlink {
            parent: ROOT_INO,
            name: "outside".into(),
        })
        .await
        .unwrap();
    let m = cl.mds.as_ref().unwrap().mds.clone();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while m.orphan_count().unwrap() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the orphan outside the confined principal's subtree is kept alive by its report"
        );
        // The report goes on, as a live session's does.
        conf.call_as(user(0), report.clone()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    cl.stop().await;
}
