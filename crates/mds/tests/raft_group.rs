//! Three members replicating the KV through openraft in one process,
//! over an in-memory network that can cut a member off: every member's KV
//! ends up with the same contents (compared by digest), a new leader takes
//! over when the leader stops, a stopped member catches up when it comes
//! back from its files, and a member added with nothing catches up from a
//! snapshot once the leader's log was purged.
#![expect(clippy::unwrap_used, reason = "tests: a panic is the failure report")]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mds::kv::Write;
use mds::raft::{Batch, Digester, Member, SnapshotFile, Tc, config, open_member};
use openraft::error::{
    Fatal, RPCError, RaftError, RemoteError, ReplicationClosed, StreamingError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse,
};
use openraft::{Raft, Snapshot, Vote};

type Node = Raft<Tc>;

/// The members' handles and data directories; members in `cut` neither
/// send nor receive.
#[derive(Clone, Default)]
struct Net {
    nodes: Arc<Mutex<BTreeMap<u64, (Node, PathBuf)>>>,
    kvs: Arc<Mutex<BTreeMap<u64, Digester>>>,
    cut: Arc<Mutex<BTreeSet<u64>>>,
}

struct Link {
    from: u64,
    to: u64,
    net: Net,
}

fn unreachable<E: std::error::Error>(why: &str) -> RPCError<u64, Member, E> {
    RPCError::Unreachable(Unreachable::new(&std::io::Error::other(why.to_string())))
}

impl Net {
    fn target(&self, from: u64, to: u64) -> Option<(Node, PathBuf)> {
        let cut = self.cut.lock().unwrap();
        if cut.contains(&from) || cut.contains(&to) {
            return None;
        }
        self.nodes.lock().unwrap().get(&to).cloned()
    }
}

struct Factory {
    me: u64,
    net: Net,
}

impl RaftNetworkFactory<Tc> for Factory {
    type Network = Link;
    async fn new_client(&mut self, target: u64, _node: &Member) -> Link {
        Link {
            from: self.me,
            to: target,
            net: self.net.clone(),
        }
    }
}

impl RaftNetwork<Tc> for Link {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<Tc>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RPCError<u64, Member, RaftError<u64>>> {
        let (raft, _) = self
            .net
            .target(self.from, self.to)
            .ok_or_else(|| unreachable("cut"))?;
        raft.append_entries(rpc)
            .await
            .map_err(|e| RPCError::RemoteError(RemoteError::new(self.to, e)))
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        _option: RPCOption,
    ) -> Result<VoteResponse<u64>, RPCError<u64, Member, RaftError<u64>>> {
        let (raft, _) = self
            .net
            .target(self.from, self.to)
            .ok_or_else(|| unreachable("cut"))?;
        raft.vote(rpc)
            .await
            .map_err(|e| RPCError::RemoteError(RemoteError::new(self.to, e)))
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote<u64>,
        snapshot: Snapshot<Tc>,
        _cancel: impl std::future::Future<Output = ReplicationClosed> + Send + 'static,
        _option: RPCOption,
    ) -> Result<SnapshotResponse<u64>, StreamingError<Tc, Fatal<u64>>> {
        let Some((raft, dir)) = self.net.target(self.from, self.to) else {
            return Err(StreamingError::Unreachable(Unreachable::new(
                &std::io::Error::other("cut"),
            )));
        };
        // As a network would: the image travels to the receiver's
        // incoming file, and the receiver installs that.
        let incoming = dir.join("snapshot.incoming");
        std::fs::copy(&snapshot.snapshot.path, &incoming)
            .map_err(|e| StreamingError::Unreachable(Unreachable::new(&e)))?;
        let moved = Snapshot {
            meta: snapshot.meta,
            snapshot: Box::new(SnapshotFile { path: incoming }),
        };
        raft.install_full_snapshot(vote, moved)
            .await
            .map_err(|e| StreamingError::RemoteError(RemoteError::new(self.to, e)))
    }
}

async fn start(net: &Net, id: u64, dir: &Path) -> Node {
    let (log, sm) = open_member(dir, 8 << 20).expect("open member");
    net.kvs.lock().unwrap().insert(id, Digester::of(&sm));
    let cfg = Arc::new(config("test").expect("config"));
    let raft = Raft::new(
        id,
        cfg,
        Factory {
            me: id,
            net: net.clone(),
        },
        log,
        sm,
    )
    .await
    .expect("raft");
    net.nodes
        .lock()
        .unwrap()
        .insert(id, (raft.clone(), dir.to_path_buf()));
    raft
}

async fn stop(net: &Net, id: u64) {
    let node = net.nodes.lock().unwrap().remove(&id);
    net.kvs.lock().unwrap().remove(&id);
    if let Some((raft, _)) = node {
        raft.shutdown().await.expect("shutdown");
    }
}

fn batch(i: u64) -> Batch {
    let writes = vec![
        Write::Put(
            0,
            i.to_be_bytes().to_vec(),
            format!("inode {i}").into_bytes(),
        ),
        Write::Put(
            1,
            [&i.to_be_bytes()[..], b"name"].concat(),
            vec![i as u8; 40],
        ),
        Write::Del(0, (i.saturating_sub(3)).to_be_bytes().to_vec()),
    ];
    Batch {
        origin: 7,
        seq: i,
        writes: postcard::to_allocvec(&writes).unwrap(),
    }
}

async fn leader(net: &Net, among: &[u64]) -> u64 {
    for _ in 0..200 {
        let nodes: Vec<Node> = {
            let n = net.nodes.lock().unwrap();
            among
                .iter()
                .filter_map(|i| n.get(i).map(|x| x.0.clone()))
                .collect()
        };
        for raft in nodes {
            let m = raft.metrics().borrow().clone();
            if m.current_leader == Some(m.id) && among.contains(&m.id) {
                return m.id;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no leader among {among:?} within 10 s");
}

fn node(net: &Net, id: u64) -> Node {
    net.nodes.lock().unwrap()[&id].0.clone()
}

/// Writes `range` through whichever of `among` leads (asking again when
/// leadership moves); returns the last log index.
async fn write(net: &Net, among: &[u64], range: std::ops::Range<u64>) -> u64 {
    let mut last = 0;
    for i in range {
        let mut tries = 0;
        loop {
            let lead = leader(net, among).await;
            match node(net, lead).client_write(batch(i)).await {
                Ok(r) => {
                    last = r.log_id.index;
                    break;
                }
                Err(e) => {
                    tries += 1;
                    assert!(tries < 50, "write {i} refused 50 times: {e}");
                }
            }
        }
    }
    last
}

async fn digests(net: &Net, ids: &[u64], index: u64) -> Vec<u64> {
    let mut out = Vec::new();
    for id in ids {
        let raft = node(net, *id);
        raft.wait(Some(Duration::from_secs(10)))
            .applied_index_at_least(Some(index), "applied")
            .await
            .expect("applied in time");
        let kv = net.kvs.lock().unwrap()[id].clone();
        out.push(kv.digest().expect("digest"));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_agree_survive_a_leader_stop_and_catch_up_by_snapshot() {
    let dirs: Vec<tempfile::TempDir> = (0..4).map(|_| tempfile::tempdir().unwrap()).collect();
    let net = Net::default();
    for id in 1..=3 {
        start(&net, id, dirs[id as usize - 1].path()).await;
    }
    let members: BTreeMap<u64, Member> = (1..=3)
        .map(|i| {
            (
                i,
                Member {
                    addr: format!("m{i}"),
                    client: String::new(),
                },
            )
        })
        .collect();
    node(&net, 1).initialize(members).await.expect("initialize");

    let first = leader(&net, &[1, 2, 3]).await;
    let last = write(&net, &[1, 2, 3], 0..60).await;
    let d = digests(&net, &[1, 2, 3], last).await;
    assert!(d.iter().all(|x| *x == d[0]), "members differ: {d:?}");

    // The leader stops: the other two elect one and go on.
    stop(&net, first).await;
    let rest: Vec<u64> = (1..=3).filter(|i| *i != first).collect();
    let second = leader(&net, &rest).await;
    assert_ne!(second, first);
    let last = write(&net, &rest, 60..120).await;
    let d2 = digests(&net, &rest, last).await;
    assert!(d2.iter().all(|x| *x == d2[0]), "members differ: {d2:?}");
    assert_ne!(d2[0], d[0], "the second leader's writes changed nothing");

    // The old leader comes back from its files and catches up.
    start(&net, first, dirs[first as usize - 1].path()).await;
    let d3 = digests(&net, &[1, 2, 3], last).await;
    assert!(d3.iter().all(|x| *x == d2[0]), "after the return: {d3:?}");

    // The leader snapshots and purges its log; a new, empty member can then
    // catch up only from the snapshot.
    // Every member does, so whoever leads next must send the snapshot.
    for id in 1..=3 {
        let raft = node(&net, id);
        raft.trigger().snapshot().await.expect("snapshot");
        raft.wait(Some(Duration::from_secs(10)))
            .metrics(
                |m| m.snapshot.is_some_and(|p| p.index >= last),
                "snapshot built",
            )
            .await
            .expect("snapshot in time");
        raft.trigger().purge_log(last).await.expect("purge");
        raft.wait(Some(Duration::from_secs(10)))
            .metrics(|m| m.purged.is_some_and(|p| p.index >= last), "purged")
            .await
            .expect("purged in time");
    }
    start(&net, 4, dirs[3].path()).await;
    // Leadership may move meanwhile (the returned member may stand for
    // election): ask whoever leads.
    let mut added = false;
    for _ in 0..20 {
        let lead = leader(&net, &[1, 2, 3]).await;
        if node(&net, lead)
            .add_learner(
                4,
                Member {
                    addr: "m4".into(),
                    client: String::new(),
                },
                true,
            )
            .await
            .is_ok()
        {
            added = true;
            break;
        }
    }
    assert!(added, "no leader added the learner");
    let d4 = digests(&net, &[4], last).await;
    assert_eq!(d4[0], d2[0], "the learner's KV differs after the snapshot");
    assert!(
        dirs[3].path().join("snapshot.img").exists(),
        "the learner keeps the installed image as its snapshot"
    );

    // A member cut off misses writes, then catches up when healed.
    let lead = leader(&net, &[1, 2, 3]).await;
    let off = (1..=3).find(|i| *i != lead).unwrap();
    net.cut.lock().unwrap().insert(off);
    let last = write(&net, &[1, 2, 3], 120..150).await;
    net.cut.lock().unwrap().clear();
    let d5 = digests(&net, &[1, 2, 3, 4], last).await;
    assert!(d5.iter().all(|x| *x == d5[0]), "after healing: {d5:?}");
    for id in 1..=4 {
        stop(&net, id).await;
    }
}
