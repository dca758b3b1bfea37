//! Members over the real peer protocol (TCP on 127.0.0.1, the mutual
//! handshake, encrypted frames): three agree; a fourth, added after the
//! others purged their logs, catches up from a snapshot sent in pieces;
//! a wrong key, a principal that is not a member and a client of the MDS
//! protocol are all refused at the handshake.
#![expect(clippy::unwrap_used, reason = "tests: a panic is the failure report")]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use mds::group::peer::{Heard, PEER_ID, PeerFront, PeerNet, principal};
use mds::kv::Write;
use mds::raft::{Batch, Digester, Member, Tc, config, open_member};
use openraft::Raft;

const CLUSTER: &str = "peers";

struct Node {
    raft: Raft<Tc>,
    kv: Digester,
    addr: String,
    _stop: tokio::sync::watch::Sender<bool>,
}

async fn start(id: u64, dir: &std::path::Path, key: [u8; 32]) -> Node {
    let (log, sm) = open_member(dir, 2 << 20).unwrap();
    let kv = Digester::of(&sm);
    let net = PeerNet {
        me: id,
        cluster_id: CLUSTER.into(),
        key,
        heard: Heard::default(),
        down: Default::default(),
    };
    let raft = Raft::new(id, Arc::new(config(CLUSTER).unwrap()), net, log, sm)
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let front = Arc::new(PeerFront {
        raft: raft.clone(),
        cluster_id: CLUSTER.into(),
        key,
        dir: dir.to_path_buf(),
        receiving: tokio::sync::Mutex::new(None),
    });
    let (stop, rx) = tokio::sync::watch::channel(false);
    let mut limits = mds::server::default_limits();
    limits.frame.max_payload = mds::group::peer::MAX_PEER_PAYLOAD;
    tokio::spawn(net::serve::Server::new(front, limits).serve(listener, rx));
    Node {
        raft,
        kv,
        addr,
        _stop: stop,
    }
}

fn batch(i: u64) -> Batch {
    // About 20 KB a batch: 60 of them fill a 2 MiB ring past half.
    let writes = vec![Write::Put(
        0,
        i.to_be_bytes().to_vec(),
        vec![i as u8; 20_000],
    )];
    Batch {
        origin: 9,
        seq: i,
        writes: postcard::to_allocvec(&writes).unwrap(),
    }
}

async fn leader(nodes: &[&Node]) -> usize {
    for _ in 0..200 {
        for (i, n) in nodes.iter().enumerate() {
            let m = n.raft.metrics().borrow().clone();
            if m.current_leader == Some(m.id) {
                return i;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no leader");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_agree_over_the_wire_and_a_new_one_catches_up_from_a_snapshot() {
    let dirs: Vec<tempfile::TempDir> = (0..4).map(|_| tempfile::tempdir().unwrap()).collect();
    let key = [7u8; 32];
    let mut nodes = Vec::new();
    for id in 1..=3u64 {
        nodes.push(start(id, dirs[id as usize - 1].path(), key).await);
    }
    let members: BTreeMap<u64, Member> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            (
                i as u64 + 1,
                Member {
                    addr: n.addr.clone(),
                    client: String::new(),
                },
            )
        })
        .collect();
    nodes[0].raft.initialize(members).await.unwrap();
    let refs: Vec<&Node> = nodes.iter().collect();
    let l = leader(&refs).await;
    let mut last = 0;
    for i in 0..60 {
        last = nodes[l]
            .raft
            .client_write(batch(i))
            .await
            .unwrap()
            .log_id
            .index;
    }
    for n in &nodes {
        n.raft
            .wait(Some(Duration::from_secs(20)))
            .applied_index_at_least(Some(last), "applied")
            .await
            .unwrap();
        n.raft.trigger().snapshot().await.unwrap();
        n.raft
            .wait(Some(Duration::from_secs(20)))
            .metrics(|m| m.snapshot.is_some_and(|s| s.index >= last), "snapshot")
            .await
            .unwrap();
        n.raft.trigger().purge_log(last).await.unwrap();
    }
    let d: Vec<u64> = nodes.iter().map(|n| n.kv.digest().unwrap()).collect();
    assert!(d.iter().all(|x| *x == d[0]), "members differ: {d:?}");
    // A fourth member, empty, learns from the leader's snapshot (about
    // 1.2 MB: one piece).
    let fourth = start(4, dirs[3].path(), key).await;
    let l = leader(&refs).await;
    nodes[l]
        .raft
        .add_learner(
            4,
            Member {
                addr: fourth.addr.clone(),
                client: String::new(),
            },
            true,
        )
        .await
        .unwrap();
    fourth
        .raft
        .wait(Some(Duration::from_secs(20)))
        .applied_index_at_least(Some(last), "caught up")
        .await
        .unwrap();
    assert_eq!(fourth.kv.digest().unwrap(), d[0], "the learner differs");
    assert!(dirs[3].path().join("snapshot.img").exists());

    // Strangers at the peer port.
    let try_as = |name: String, k: [u8; 32], target: u32| {
        let addr = nodes[0].addr.clone();
        async move {
            let id = net::auth::Identity::principal(&name, 1, k);
            let mut cfg = net::connection::ConnConfig::new(CLUSTER, target, Arc::new(id));
            cfg.encrypt = true;
            net::connection::Connection::connect(&addr, &cfg).await
        }
    };
    assert!(
        try_as(principal(2), key, PEER_ID).await.is_ok(),
        "a member is let in"
    );
    assert!(
        try_as(principal(2), [8u8; 32], PEER_ID).await.is_err(),
        "a wrong key"
    );
    // A key holder the group does not list (a member removed, or one
    // that joined while this member was away) is let in, so it can hear
    // a leader this member does not know yet, but its vote requests are
    // refused: a removed member cannot disturb the group.
    let stranger = try_as(principal(9), key, PEER_ID).await.unwrap();
    let vote = openraft::raft::VoteRequest::<u64>::new(openraft::Vote::new(99, 9), None);
    let f = stranger
        .call_raw(
            mds::group::peer::RAFT_VOTE,
            &(),
            bytes::Bytes::from(postcard::to_allocvec(&vote).unwrap()),
        )
        .await
        .unwrap();
    let r: Result<(), String> = proto::msg::decode(&f.header).unwrap();
    assert!(
        r.as_ref().is_err_and(|e| e.contains("not in this group")),
        "{r:?}"
    );
    assert!(
        try_as(principal(2), key, proto::mds::MDS_ID).await.is_err(),
        "the MDS protocol's id"
    );
    for n in nodes.iter().chain([&fourth]) {
        n.raft.shutdown().await.unwrap();
    }
}
