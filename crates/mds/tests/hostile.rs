//! A hostile client over real sockets: no key, a wrong key, a key claiming
//! uid 0, a path-restricted key trying to escape, a capability replayed by
//! another principal, a frame altered in flight, a rotated and a removed
//! key. Each is refused with a specific error and changes nothing.
#![expect(clippy::unwrap_used, reason = "tests: a panic is the failure report")]

mod common;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use mds::ids::PolicyKind;
use net::auth::{Identity, TicketsFromMds};
use net::{ConnConfig, ConnError, MdsClient, OsdClient};
use proto::mds::{
    Access, Creds, Errno, MDS_ID, MdsReply, MdsResponse, Op, PrincipalSpec, ROOT_INO, UidMap,
};
use proto::{ErrorCode, Kind};

const T: Duration = Duration::from_secs(5);

async fn write(
    c: &OsdClient,
    cap: proto::Capability,
    oid: u64,
    data: &'static [u8],
) -> Result<net::Answer, ConnError> {
    c.run(
        Some(&cap),
        proto::Command::CreateAndWrite {
            pid: proto::layout::DATA_PARTITION,
            oid,
        },
        Bytes::from_static(data),
    )
    .await
}

/// Adds a principal as admin; returns its identity.
async fn add(admin: &MdsClient, name: &str, path: &str, uids: UidMap, access: Access) -> Identity {
    let spec = PrincipalSpec {
        name: name.into(),
        path: path.into(),
        access,
        uids,
        admin: false,
    };
    match admin.call(Op::AuthAdd(spec)).await.unwrap() {
        MdsReply::PrincipalKey { info, wrapped_key } => {
            let own = admin.identity().key.unwrap();
            let secret = proto::auth::unwrap_session_key(&own, &wrapped_key).unwrap();
            Identity::principal(name, info.key_version, secret)
        }
        r => panic!("{r:?}"),
    }
}

fn errno(r: Result<MdsReply, net::CallError>) -> Errno {
    match r {
        Err(net::CallError::Mds(e)) => e.errno,
        other => panic!("expected an MDS error, got {other:?}"),
    }
}

fn refused(r: Result<MdsReply, net::CallError>) -> String {
    match r {
        Err(net::CallError::Transport(ConnError::Refused(e))) => {
            assert_eq!(e.code, ErrorCode::Unauthenticated, "{e}");
            e.message
        }
        other => panic!("expected a refused handshake, got {other:?}"),
    }
}

async fn mkdir(c: &MdsClient, parent: u64, name: &str, creds: Creds) -> Result<u64, Errno> {
    match c
        .call_as(
            creds,
            Op::Mkdir {
                parent,
                name: name.into(),
                mode: 0o755,
            },
        )
        .await
    {
        Ok(MdsReply::Found(f)) => Ok(f.entry.attr.ino),
        r => Err(errno(r)),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_clients_are_refused_and_change_nothing() {
    let cl = Cluster::start(1, spec(4096, 1), PolicyKind::ChildClosest).await;
    let admin = cl.client();
    let sub = mkdir(&admin, ROOT_INO, "sub", Creds::root()).await.unwrap();
    let secret_dir = mkdir(&admin, ROOT_INO, "private", Creds::root())
        .await
        .unwrap();

    // A wrong key for a real principal: refused at the handshake.
    let wrong = MdsClient::new(
        &cl.mds_addr,
        CLUSTER,
        Identity::principal("client.admin", 1, [9; 32]),
        1,
    );
    let m = refused(wrong.call(Op::Status).await);
    assert!(m.contains("could not prove"), "{m}");
    // An unknown principal.
    let ghost = MdsClient::new(
        &cl.mds_addr,
        CLUSTER,
        Identity::principal("client.ghost", 1, [9; 32]),
        1,
    );
    assert!(refused(ghost.call(Op::Status).await).contains("could not prove"));

    // A squash-root key claiming uid 0: acts as nobody.
    let bob_id = add(
        &admin,
        "client.bob",
        "/",
        UidMap::SquashRoot,
        Access::ReadWrite,
    )
    .await;
    let bob = MdsClient::new(&cl.mds_addr, CLUSTER, bob_id.clone(), 1);
    assert_eq!(
        mkdir(&bob, ROOT_INO, "by-bob", Creds::root()).await,
        Err(Errno::Access)
    );
    // A fixed-uid key is that user whatever it claims.
    let fx = add(
        &admin,
        "client.fx",
        "/",
        UidMap::Fixed {
            uid: 1234,
            gid: 1234,
        },
        Access::ReadWrite,
    )
    .await;
    let fx = MdsClient::new(&cl.mds_addr, CLUSTER, fx, 1);
    assert_eq!(
        mkdir(&fx, ROOT_INO, "by-fx", Creds::root()).await,
        Err(Errno::Access)
    );
    // Not an admin: cannot manage principals, nor the MDS group.
    assert_eq!(errno(bob.call(Op::AuthList).await), Errno::Perm);
    assert_eq!(
        errno(bob.call(Op::GroupRemove { id: 1 }).await),
        Errno::Perm
    );
    // A read-only key cannot change anything.
    let ro = add(&admin, "client.ro", "/", UidMap::Trusted, Access::ReadOnly).await;
    let ro = MdsClient::new(&cl.mds_addr, CLUSTER, ro, 1);
    assert_eq!(
        mkdir(&ro, ROOT_INO, "by-ro", Creds::root()).await,
        Err(Errno::RoFs)
    );

    // A key confined to /sub: its root is /sub, and nothing outside is reachable.
    let carol_id = add(
        &admin,
        "client.carol",
        "/sub",
        UidMap::Trusted,
        Access::ReadWrite,
    )
    .await;
    let carol = MdsClient::new(&cl.mds_addr, CLUSTER, carol_id, 1);
    match carol.call(Op::Whoami).await.unwrap() {
        MdsReply::Principal(p) => assert_eq!(p.root_ino, sub),
        r => panic!("{r:?}"),
    }
    let inside = mkdir(&carol, sub, "mine", Creds::root()).await.unwrap();
    assert_eq!(
        errno(carol.call(Op::GetAttr { ino: ROOT_INO }).await),
        Errno::Access
    );
    assert_eq!(
        errno(
            carol
                .call(Op::Readdir {
                    ino: secret_dir,
                    after: None,
                    max: 10,
                    plus: true
                })
                .await
        ),
        Errno::Access
    );
    assert_eq!(
        mkdir(&carol, secret_dir, "x", Creds::root()).await,
        Err(Errno::Access)
    );
    let escape = Op::Rename {
        parent: sub,
        name: "mine".into(),
        new_parent: ROOT_INO,
        new_name: "escaped".into(),
        noreplace: false,
    };
    assert_eq!(errno(carol.call(escape).await), Errno::Access);
    let link_out = Op::Link {
        ino: inside,
        parent: secret_dir,
        name: "l".into(),
    };
    assert_eq!(errno(carol.call(link_out).await), Errno::Access);
    // "/" resolves to its own root.
    let e = carol.resolve("/mine").await.unwrap();
    assert_eq!(e.attr.ino, inside);
    // Prefetch would hand out the numerically closest inodes (the admin's
    // lookup gets its neighbours outside /sub); a confined principal's gets
    // nothing from outside.
    let lookup = Op::Lookup {
        parent: sub,
        name: "mine".into(),
    };
    let outside = |f: &proto::mds::Found| {
        f.prefetch
            .iter()
            .filter(|e| e.parent != sub && e.attr.ino != inside)
            .count()
    };
    match admin.call(lookup.clone()).await.unwrap() {
        MdsReply::Found(f) => assert!(outside(&f) > 0, "the admin sees neighbours outside /sub"),
        r => panic!("{r:?}"),
    }
    match carol.call(lookup).await.unwrap() {
        MdsReply::Found(f) => {
            assert_eq!(outside(&f), 0, "{:?}", f.prefetch);
            assert!(f.prefetch_grants.is_empty());
        }
        r => panic!("{r:?}"),
    }

    // A capability issued to the admin, replayed on a connection
    // authenticated as bob: the OSD refuses it.
    let f = match admin
        .call(Op::Create {
            parent: ROOT_INO,
            name: "f".into(),
            mode: 0o644,
            exclusive: true,
        })
        .await
        .unwrap()
    {
        MdsReply::Found(f) => f,
        r => panic!("{r:?}"),
    };
    let l = f.entry.layout.clone().unwrap();
    let osd = l.homes[0].stripes[0].fresh[0];
    let admin_cap = f.grants[0].cap_for(osd).unwrap().clone();
    let osd_addr = cl.osds[osd as usize].as_ref().unwrap().addr.to_string();
    let bob_osd = OsdClient::new(
        &osd_addr,
        ConnConfig::new(
            CLUSTER,
            osd,
            TicketsFromMds::new(Arc::new(MdsClient::new(
                &cl.mds_addr,
                CLUSTER,
                bob_id.clone(),
                1,
            ))),
        ),
    );
    let oid = l.objsets[0];
    // The admin's own bytes, through its own ticket.
    let admin_osd = cl.admin_osd_client(osd);
    write(&admin_osd, admin_cap.clone(), oid, b"admin's")
        .await
        .unwrap();
    match write(&bob_osd, admin_cap.clone(), oid, b"mine now").await {
        Err(ConnError::Remote(e)) => {
            assert_eq!(e.code, ErrorCode::CapForged, "{e}");
            assert!(e.message.contains("issued to principal"), "{e}");
        }
        r => panic!("a replayed capability was accepted: {r:?}"),
    }
    // Without a ticket at all, the OSD refuses the connection.
    let anon = OsdClient::new(
        &osd_addr,
        ConnConfig::new(CLUSTER, osd, Arc::new(Identity::anonymous())),
    );
    assert!(
        matches!(write(&anon, admin_cap.clone(), oid, b"mine now").await, Err(ConnError::Refused(e)) if e.code == ErrorCode::Unauthenticated)
    );

    // An expired ticket (sealed with the right key): refused, saying so.
    let stale = proto::auth::Ticket {
        principal_id: 1,
        principal: "client.admin".into(),
        osd_id: osd,
        expires_ms: proto::clock::now_ms() - 1,
        session_key: [3; 32],
    }
    .seal(&cl.osd_key(osd), 1, [5; 12]);
    let expired = Identity {
        credential: proto::auth::Credential::Ticket(stale),
        key: Some([3; 32]),
    };
    let late = OsdClient::new(&osd_addr, ConnConfig::new(CLUSTER, osd, Arc::new(expired)));
    match write(&late, admin_cap.clone(), oid, b"mine now").await {
        Err(ConnError::Refused(e)) => {
            assert_eq!(e.code, ErrorCode::Unauthenticated);
            assert!(e.message.contains("expired"), "{e}");
        }
        r => panic!("an expired ticket was accepted: {r:?}"),
    }

    // A frame altered in flight (its crcs fixed up, as a proxy could):
    // the tag fails, the connection closes, nothing runs.
    let mut raw = net::raw::RawSession::open(
        &cl.mds_addr,
        &ConnConfig::new(CLUSTER, MDS_ID, Arc::new(cl.admin())),
        &cl.admin(),
    )
    .await
    .unwrap();
    let req = proto::mds::MdsRequest {
        creds: Creds::root(),
        prefetch: 0,
        session: 0,
        early: false,
        op: Op::Mkdir {
            parent: ROOT_INO,
            name: "tampered".into(),
            mode: 0o755,
        },
    };
    let f = net::frame_io::frame(Kind::Request, 0x100, 1, &req, Bytes::new());
    let mut bytes = raw.seal(f);
    let hlen = u32::from_le_bytes(bytes[16..20].try_into().unwrap()) as usize;
    // "tampered" → "tamperee", then recompute the header crc.
    let at = 32 + hlen - 6;
    bytes[at] ^= 0x01;
    let head: [u8; 24] = bytes[..24].try_into().unwrap();
    let crc = crc32c::crc32c_append(crc32c::crc32c(&head), &bytes[32..32 + hlen]);
    bytes[24..28].copy_from_slice(&crc.to_le_bytes());
    raw.send_bytes(&bytes).await.unwrap();
    // The server answers with an error naming the tag, then closes.
    let f = raw.recv(T).await.unwrap();
    let r: MdsResponse = proto::msg::decode(&f.header).unwrap();
    let e = r.result.unwrap_err();
    assert!(e.message.contains("authentication tag"), "{e}");
    assert!(raw.recv(T).await.is_err(), "the connection is closed");
    // A captured frame replayed on a new connection: it fails there too.
    let mut raw2 = net::raw::RawSession::open(
        &cl.mds_addr,
        &ConnConfig::new(CLUSTER, MDS_ID, Arc::new(cl.admin())),
        &cl.admin(),
    )
    .await
    .unwrap();
    bytes[at] ^= 0x01;
    let crc = crc32c::crc32c_append(crc32c::crc32c(&head), &bytes[32..32 + hlen]);
    bytes[24..28].copy_from_slice(&crc.to_le_bytes());
    raw2.send_bytes(&bytes).await.unwrap();
    if let Ok(f) = raw2.recv(T).await {
        let r: MdsResponse = proto::msg::decode(&f.header).unwrap();
        assert!(r.result.is_err(), "a replayed frame ran");
    }
    for name in [
        "tampered", "tamperee", "by-bob", "by-fx", "by-ro", "escaped",
    ] {
        assert_eq!(
            errno(
                admin
                    .call(Op::Lookup {
                        parent: ROOT_INO,
                        name: name.into()
                    })
                    .await
            ),
            Errno::NoEnt,
            "{name} must not exist"
        );
    }

    // Rotation: the old key stops at once (new connections refused, the
    // open one answered EACCES); the new key works.
    let rotated = match admin
        .call(Op::AuthRotate {
            name: "client.bob".into(),
        })
        .await
        .unwrap()
    {
        MdsReply::PrincipalKey { info, wrapped_key } => {
            let secret =
                proto::auth::unwrap_session_key(&admin.identity().key.unwrap(), &wrapped_key)
                    .unwrap();
            Identity::principal("client.bob", info.key_version, secret)
        }
        r => panic!("{r:?}"),
    };
    assert_eq!(errno(bob.call(Op::Status).await), Errno::Access);
    let old = MdsClient::new(&cl.mds_addr, CLUSTER, bob_id, 1);
    assert!(refused(old.call(Op::Status).await).contains("could not prove"));
    let new = MdsClient::new(&cl.mds_addr, CLUSTER, rotated.clone(), 1);
    assert!(matches!(
        new.call(Op::Status).await,
        Ok(MdsReply::Status(_))
    ));
    // Removal: the same, at once.
    admin
        .call(Op::AuthRemove {
            name: "client.bob".into(),
        })
        .await
        .unwrap();
    assert_eq!(errno(new.call(Op::Status).await), Errno::Access);
    assert_eq!(
        errno(
            admin
                .call(Op::AuthRemove {
                    name: "client.admin".into()
                })
                .await
        ),
        Errno::Perm
    );
    // Bad principal specs are refused with what is wrong.
    let bad = PrincipalSpec {
        name: "bob".into(),
        path: "/".into(),
        access: Access::ReadWrite,
        uids: UidMap::Trusted,
        admin: false,
    };
    assert_eq!(
        errno(admin.call(Op::AuthAdd(bad.clone())).await),
        Errno::Inval
    );
    let not_dir = PrincipalSpec {
        name: "client.z".into(),
        path: "/f".into(),
        ..bad
    };
    assert_eq!(errno(admin.call(Op::AuthAdd(not_dir)).await), Errno::NotDir);
    // Nothing the attacks tried changed anything: the admin's bytes are
    // intact and the namespace checks clean.
    assert_eq!(
        &admin_osd
            .read(Some(&admin_cap), proto::layout::DATA_PARTITION, oid, 0, 100)
            .await
            .unwrap()[..],
        b"admin's"
    );
    check_clean(&cl.mds.as_ref().unwrap().mds);
    cl.stop().await;
}

/// A TCP proxy between a client and `upstream` that forwards everything,
/// except that in the client's first request after the handshake it flips
/// the header's last byte and fixes the header's crc (so only the
/// authentication tag can notice). Returns the address to connect to.
async fn flipping_proxy(upstream: String) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        let (client, _) = l.accept().await.unwrap();
        let server = tokio::net::TcpStream::connect(&upstream).await.unwrap();
        let (mut cr, mut cw) = client.into_split();
        let (mut sr, mut sw) = server.into_split();
        tokio::spawn(async move { tokio::io::copy(&mut sr, &mut cw).await });
        // Hello and Proof (no tags), then the first sealed request.
        for n in 0..3 {
            let mut pre = [0u8; 32];
            cr.read_exact(&mut pre).await.unwrap();
            let hlen = u32::from_le_bytes(pre[16..20].try_into().unwrap()) as usize;
            let plen = u32::from_le_bytes(pre[20..24].try_into().unwrap()) as usize;
            let tag = if n == 2 { 16 } else { 0 };
            let mut rest = vec![0u8; hlen + plen + tag];
            cr.read_exact(&mut rest).await.unwrap();
            if n == 2 {
                rest[hlen - 1] ^= 0x01;
                let crc = crc32c::crc32c_append(crc32c::crc32c(&pre[..24]), &rest[..hlen]);
                pre[24..28].copy_from_slice(&crc.to_le_bytes());
            }
            sw.write_all(&pre).await.unwrap();
            sw.write_all(&rest).await.unwrap();
        }
        let _ = tokio::io::copy(&mut cr, &mut sw).await;
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_altered_in_flight_by_a_proxy_is_refused() {
    let cl = Cluster::start(1, spec(4096, 1), PolicyKind::ChildClosest).await;
    let proxy = flipping_proxy(cl.mds_addr.clone()).await;
    let through = MdsClient::new(&proxy, CLUSTER, cl.admin(), 1);
    let r = through
        .call(Op::Mkdir {
            parent: ROOT_INO,
            name: "via-proxy".into(),
            mode: 0o755,
        })
        .await;
    match r {
        Err(net::CallError::Mds(e)) => {
            assert_eq!(e.errno, Errno::Proto);
            assert!(e.message.contains("authentication tag"), "{e}");
        }
        other => panic!("an altered request was answered: {other:?}"),
    }
    // The connection is gone, and nothing was made.
    let admin = cl.client();
    assert_eq!(
        errno(
            admin
                .call(Op::Lookup {
                    parent: ROOT_INO,
                    name: "via-proxy".into(),
                })
                .await
        ),
        Errno::NoEnt
    );
    check_clean(&cl.mds.as_ref().unwrap().mds);
    cl.stop().await;
}
