//! Replica chains over real sockets: three OSD servers, each on its own
//! runtime with a file-backed store, one group's chain across them, and a
//! small authority that keeps the chain table as the MDS would. The
//! races kill a member (head, middle or tail) in the middle of 64 clients
//! racing compare-and-swaps and fetch-and-adds, and check that every
//! compare-and-swap has exactly one winner, that no fetch-and-add is lost
//! or counted twice, and that every member left holds the same values.

#![expect(clippy::unwrap_used, reason = "tests: a panic is the failure report")]

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use net::auth::{BoxFuture as IdFuture, Identity, IdentitySource, mint_ticket};
use net::{ConnConfig, ConnError, OsdClient};
use osd::chain::{BoxFuture, ChainAuthority, ChainView, Chains};
use osd::exec::{Ctx, StoreHandle};
use osd::server::{Osd, ServerConfig};
use proto::chain::{ChainTable, group_partition, member_name, member_principal};
use proto::clock::now_ms;
use proto::msg::{AttrKey, Command, Reply, Request};
use proto::{CapSpec, Capability, ErrorCode, KeyRing, WireError, rights};
use store::device::{Device, FileDevice};
use store::{FormatOptions, OpenOptions, Store};

const CLUSTER: &str = "chains";
const GROUP: u32 = 1;
const OBJ: u64 = 0x4_2424;
const CLIENT: u64 = 7;

fn ring(osd: u32) -> KeyRing {
    KeyRing::new(vec![(1, [osd as u8 + 0x40; 32])]).unwrap()
}

/// The chain table and where the OSDs listen, shared by every OSD's view
/// of the authority.
#[derive(Default)]
struct Table {
    table: ChainTable,
    addrs: HashMap<u32, String>,
    /// OSDs the authority knows are down (as the MDS does once their
    /// lease ran out); only those are dropped when a member asks.
    down: Vec<u32>,
}

#[derive(Clone)]
struct Authority {
    me: u32,
    shared: Arc<Mutex<Table>>,
}

impl Authority {
    fn view(&self) -> ChainView {
        let t = self.shared.lock().unwrap();
        let mut caps = HashMap::new();
        for (g, c) in &t.table.chains {
            if let Some(next) = c.successor(self.me) {
                let spec = CapSpec {
                    partition: group_partition(*g),
                    oid_lo: 0,
                    oid_hi: u64::MAX,
                    rights: rights::ALL,
                    expiry_ms: now_ms() + 600_000,
                    version: u64::MAX,
                    holder: member_principal(self.me),
                };
                caps.insert((*g, next), spec.sign(&[next as u8 + 0x40; 32], 1, next));
            }
        }
        ChainView {
            table: t.table.clone(),
            addrs: t.addrs.clone(),
            caps,
        }
    }
}

impl ChainAuthority for Authority {
    fn restarted(&self, _: proto::mds::StoreMark) -> BoxFuture<'_, Result<ChainView, WireError>> {
        let v = self.view();
        Box::pin(async move { Ok(v) })
    }

    fn filled(&self, _: u32, _: u64, _: u32) -> BoxFuture<'_, Result<ChainView, WireError>> {
        let v = self.view();
        Box::pin(async move { Ok(v) })
    }

    fn fetch(&self) -> BoxFuture<'_, Result<ChainView, WireError>> {
        let v = self.view();
        Box::pin(async move { Ok(v) })
    }

    fn drop_member(
        &self,
        group: u32,
        epoch: u64,
        osd: u32,
        _refused: bool,
    ) -> BoxFuture<'_, Result<ChainView, WireError>> {
        {
            let mut t = self.shared.lock().unwrap();
            let c = t.table.chain(group).cloned().unwrap();
            if c.epoch == epoch && c.successor(self.me) == Some(osd) && t.down.contains(&osd) {
                let members = c.members.iter().copied().filter(|m| *m != osd).collect();
                let joining = c.joining.iter().copied().filter(|m| *m != osd).collect();
                t.table.set(group, members, joining);
            }
        }
        let v = self.view();
        Box::pin(async move { Ok(v) })
    }
}

/// OSD `me`'s tickets to the other members, as principal `osd.me`.
struct MemberTickets(u32);

impl IdentitySource for MemberTickets {
    fn identity(&self, osd_id: u32) -> IdFuture<'_, Result<Identity, ConnError>> {
        let me = self.0;
        Box::pin(async move {
            Ok(mint_ticket(
                &ring(osd_id),
                osd_id,
                member_principal(me),
                &member_name(me),
            )
            .unwrap()
            .0)
        })
    }
}

/// The clients' tickets, as principal 7.
struct ClientTickets;

impl IdentitySource for ClientTickets {
    fn identity(&self, osd_id: u32) -> IdFuture<'_, Result<Identity, ConnError>> {
        Box::pin(async move {
            Ok(mint_ticket(&ring(osd_id), osd_id, CLIENT, "client.race")
                .unwrap()
                .0)
        })
    }
}

struct Member {
    rt: Option<tokio::runtime::Runtime>,
    _dir: tempfile::TempDir,
}

fn start_member(id: u32, shared: Arc<Mutex<Table>>) -> Member {
    let drain = ServerConfig::new(CLUSTER, id).serve.drain_timeout;
    let s = start_stoppable(id, shared, drain);
    // Never stopped: it runs until its runtime is shut down.
    let stop = s.stop;
    s.rt.spawn(async move {
        let _keep = stop;
        std::future::pending::<()>().await
    });
    Member {
        rt: Some(s.rt),
        _dir: s.dir,
    }
}

/// A client's request to OSD `osd`, with a capability for it.
fn client_request(osd: u32, id: u64, cmd: Command, set: Vec<(AttrKey, Vec<u8>)>) -> Request {
    Request {
        cap: Some(client_cap(osd)),
        id,
        cmd,
        get: Vec::new(),
        set,
    }
}

/// Stops every member still running.
/// OSDs 1..=n started, one chain of them (head first) for `GROUP`, and
/// a client of the group.
fn chain_of(n: u32) -> (Arc<Mutex<Table>>, HashMap<u32, Member>, GroupClient) {
    let shared = Arc::new(Mutex::new(Table::default()));
    let members: HashMap<u32, Member> = (1..=n)
        .map(|id| (id, start_member(id, shared.clone())))
        .collect();
    shared
        .lock()
        .unwrap()
        .table
        .set(GROUP, (1..=n).collect(), vec![]);
    let client = GroupClient {
        shared: shared.clone(),
        conns: Mutex::new(HashMap::new()),
    };
    (shared, members, client)
}

fn stop_all(members: &mut HashMap<u32, Member>) {
    for m in members.values_mut() {
        if let Some(rt) = m.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// A client of the group: sends to the head the table names, with a
/// capability for it, and retries (same request id) while the chain
/// changes.
struct GroupClient {
    shared: Arc<Mutex<Table>>,
    conns: Mutex<HashMap<u32, Arc<OsdClient>>>,
}

fn client_cap(osd: u32) -> Capability {
    CapSpec {
        partition: group_partition(GROUP),
        oid_lo: 0,
        oid_hi: u64::MAX,
        rights: rights::ALL & !rights::REVOKE,
        expiry_ms: now_ms() + 600_000,
        version: 1 << 40,
        holder: CLIENT,
    }
    .sign(&[osd as u8 + 0x40; 32], 1, osd)
}

impl GroupClient {
    fn head(&self) -> (u32, String) {
        let t = self.shared.lock().unwrap();
        let h = t.table.chain(GROUP).unwrap().head().unwrap();
        (h, t.addrs[&h].clone())
    }

    fn conn(&self, osd: u32, addr: &str) -> Arc<OsdClient> {
        self.conns
            .lock()
            .unwrap()
            .entry(osd)
            .or_insert_with(|| {
                let mut cfg = ConnConfig::new(CLUSTER, osd, Arc::new(ClientTickets));
                cfg.connections = 2;
                cfg.timeout = Duration::from_secs(5);
                Arc::new(OsdClient::new(addr, cfg))
            })
            .clone()
    }

    async fn call(
        &self,
        id: u64,
        cmd: Command,
        get: Vec<AttrKey>,
    ) -> (Reply, Vec<(AttrKey, Vec<u8>)>) {
        for _ in 0..500 {
            let (osd, addr) = self.head();
            let req = Request {
                cap: Some(client_cap(osd)),
                id,
                cmd: cmd.clone(),
                get: get.clone(),
                set: Vec::new(),
            };
            match self.conn(osd, &addr).call(req, Bytes::new()).await {
                Ok(a) => return (a.reply, a.attrs),
                Err(ConnError::Remote(w))
                    if !matches!(
                        w.code,
                        ErrorCode::NotHead
                            | ErrorCode::NotReady
                            | ErrorCode::StaleChain
                            | ErrorCode::Io
                    ) =>
                {
                    panic!("{cmd:?} failed: {w}")
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
        panic!("{cmd:?}: no answer after 500 tries");
    }
}

fn key(n: u32) -> AttrKey {
    AttrKey {
        page: 0x1_0000,
        number: n,
    }
}

const COUNTER: u32 = 0xffff;
const ROUNDS: u32 = 12;
const RACERS: u64 = 64;
const KILL_ROUND: u32 = 4;

/// Kills chain position `victim` (0 = head) during round 4 of 12 rounds
/// of 64 racers, then checks winners, the counter, and that every member
/// left answers the same.
async fn race_with_a_kill(victim: usize) {
    let (shared, mut members, client) = chain_of(3);
    let client = Arc::new(client);
    let ids = Arc::new(AtomicU64::new(1));
    let next_id = || ids.fetch_add(1, Ordering::Relaxed);
    client
        .call(
            next_id(),
            Command::Create {
                pid: group_partition(GROUP),
                oid: Some(OBJ),
                count: 1,
            },
            vec![],
        )
        .await;
    let killed = shared.lock().unwrap().table.chain(GROUP).unwrap().members[victim];
    let mut winners = Vec::new();
    for round in 0..ROUNDS {
        let mut tasks = Vec::new();
        let answered = Arc::new(AtomicU64::new(0));
        for r in 0..RACERS {
            let client = client.clone();
            let answered = answered.clone();
            let (add1, cas_id, add2) = (next_id(), next_id(), next_id());
            tasks.push(tokio::spawn(async move {
                let add = |id| {
                    client.call(
                        id,
                        Command::FetchAdd {
                            pid: group_partition(GROUP),
                            oid: OBJ,
                            key: key(COUNTER),
                            delta: 1,
                        },
                        vec![],
                    )
                };
                add(add1).await;
                answered.fetch_add(1, Ordering::SeqCst);
                let (reply, _) = client
                    .call(
                        cas_id,
                        Command::Cas {
                            pid: group_partition(GROUP),
                            oid: OBJ,
                            key: key(round),
                            expected: Vec::new(),
                            new: (r + 1).to_le_bytes().to_vec(),
                        },
                        vec![],
                    )
                    .await;
                add(add2).await;
                match reply {
                    Reply::Cas { swapped, .. } => (r + 1, swapped),
                    other => panic!("CAS answered {other:?}"),
                }
            }));
        }
        if round == KILL_ROUND {
            // Kill the member while the round's changes are in flight;
            // the authority notices it (as the MDS does when its lease
            // runs out) a little later and drops it from the chain; until
            // then the members before it wait, and clients of a dead head
            // retry.
            while answered.load(Ordering::SeqCst) < RACERS / 4 {
                tokio::time::sleep(Duration::from_micros(100)).await;
            }
            members
                .get_mut(&killed)
                .unwrap()
                .rt
                .take()
                .unwrap()
                .shutdown_background();
            let shared = shared.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(300)).await;
                let mut t = shared.lock().unwrap();
                t.down.push(killed);
                let c = t.table.chain(GROUP).cloned().unwrap();
                if c.holds(killed) {
                    let m = c.members.iter().copied().filter(|m| *m != killed).collect();
                    t.table.set(GROUP, m, vec![]);
                }
            });
        }
        let mut won = Vec::new();
        for t in tasks {
            let (who, swapped) = t.await.unwrap();
            if swapped {
                won.push(who);
            }
        }
        assert_eq!(
            won.len(),
            1,
            "round {round}: compare-and-swap winners {won:?} (killed chain position {victim}, OSD {killed})"
        );
        winners.push(won[0]);
    }
    // Every member left answers the same: make each the head in turn.
    let left = shared
        .lock()
        .unwrap()
        .table
        .chain(GROUP)
        .unwrap()
        .members
        .clone();
    assert_eq!(left.len(), 2, "the killed member left the chain: {left:?}");
    assert!(!left.contains(&killed));
    for head in &left {
        let order: Vec<u32> = std::iter::once(*head)
            .chain(left.iter().copied().filter(|m| m != head))
            .collect();
        shared.lock().unwrap().table.set(GROUP, order, vec![]);
        let mut want: Vec<AttrKey> = (0..ROUNDS).map(key).collect();
        want.push(key(COUNTER));
        let (_, attrs) = client
            .call(
                next_id(),
                Command::GetAttributes {
                    pid: group_partition(GROUP),
                    oid: OBJ,
                },
                want,
            )
            .await;
        let got: HashMap<u32, Vec<u8>> = attrs.into_iter().map(|(k, v)| (k.number, v)).collect();
        for round in 0..ROUNDS {
            assert_eq!(
                got.get(&round),
                Some(&winners[round as usize].to_le_bytes().to_vec()),
                "OSD {head}, round {round}: the value is not the winner's"
            );
        }
        assert_eq!(
            got.get(&COUNTER),
            Some(&(2 * u64::from(ROUNDS) * RACERS).to_le_bytes().to_vec()),
            "OSD {head}: every acknowledged fetch-and-add counted exactly once"
        );
    }
    stop_all(&mut members);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_winner_when_the_head_is_killed_mid_race() {
    race_with_a_kill(0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_winner_when_the_middle_is_killed_mid_race() {
    race_with_a_kill(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_winner_when_the_tail_is_killed_mid_race() {
    race_with_a_kill(2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_chain_members_pass_effects_and_only_the_head_serves() {
    let (shared, mut members, client) = chain_of(2);
    let addr2 = shared.lock().unwrap().addrs[&2].clone();
    let forged = proto::chain::Forward {
        group: GROUP,
        epoch: 1,
        op: Command::SetAttributes {
            pid: group_partition(GROUP),
            oid: OBJ,
        },
        origin: CLIENT,
        id: 9,
        reply: Reply::Done,
        attrs: Vec::new(),
    };
    // A client with a valid capability for the tail still cannot pass it
    // an effect, whatever epoch it names.
    for epoch in [1, 1 << 40] {
        let mut f = forged.clone();
        f.epoch = epoch;
        let req = client_request(
            2,
            0,
            Command::Forward(Box::new(f)),
            vec![(key(1), b"forged".to_vec())],
        );
        let started = std::time::Instant::now();
        match client.conn(2, &addr2).call(req, Bytes::new()).await {
            Err(ConnError::Remote(w)) => {
                assert_eq!(w.code, ErrorCode::CapForged, "{w}");
                assert!(w.message.contains("only chain members"), "{w}");
            }
            other => panic!("a client's FORWARD answered {other:?}"),
        }
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "refused at once"
        );
    }
    // Only the MDS scrubs a group.
    let scrub = client_request(
        2,
        0,
        Command::ScrubGroup {
            group: GROUP,
            deep: true,
        },
        Vec::new(),
    );
    match client.conn(2, &addr2).call(scrub, Bytes::new()).await {
        Err(ConnError::Remote(w)) => {
            assert_eq!(w.code, ErrorCode::CapForged, "{w}");
            assert!(w.message.contains("only the MDS"), "{w}");
        }
        other => panic!("a client's SCRUB GROUP answered {other:?}"),
    }
    // A member that is not the head refuses a client's request.
    let req = client_request(
        2,
        0,
        Command::GetAttributes {
            pid: group_partition(GROUP),
            oid: OBJ,
        },
        Vec::new(),
    );
    match client.conn(2, &addr2).call(req, Bytes::new()).await {
        Err(ConnError::Remote(w)) => assert_eq!(w.code, ErrorCode::NotHead, "{w}"),
        other => panic!("a non-head member answered {other:?}"),
    }
    // A client may neither write a group's staging partition, where
    // fills and repairs build copies, nor install a staged copy: not at
    // the head, not at another member.
    let addr1 = shared.lock().unwrap().addrs[&1].clone();
    for (osd, addr) in [(1, &addr1), (2, &addr2)] {
        for cmd in [
            Command::Create {
                pid: proto::chain::staging_partition(GROUP, 1),
                oid: Some(OBJ),
                count: 1,
            },
            Command::Install {
                pid: group_partition(GROUP),
                oid: OBJ,
            },
        ] {
            let req = client_request(osd, 0, cmd.clone(), Vec::new());
            match client.conn(osd, addr).call(req, Bytes::new()).await {
                Err(ConnError::Remote(w)) => {
                    assert_eq!(w.code, ErrorCode::BadRequest, "{cmd:?} at {osd}: {w}")
                }
                other => panic!("a client's {cmd:?} at OSD {osd} answered {other:?}"),
            }
        }
    }
    // Three copies asked for, one member left: a change is refused with
    // EIO rather than kept on too few; a read is served.
    {
        let mut t = shared.lock().unwrap();
        t.table.replicas = 3;
        t.table.set(GROUP, vec![1], vec![]);
        // (Three OSD ids, so three copies are possible.)
        t.table.set(GROUP + 1, vec![2], vec![]);
        t.table.set(GROUP + 2, vec![1], vec![]);
    }
    client
        .call(
            77,
            Command::List {
                pid: group_partition(GROUP),
                lo: 0x1_0000,
                hi: u64::MAX,
                after: None,
                max: 10,
                attrs: Vec::new(),
            },
            vec![],
        )
        .await;
    let set = client_request(
        1,
        78,
        Command::SetAttributes {
            pid: group_partition(GROUP),
            oid: OBJ,
        },
        vec![(key(1), b"x".to_vec())],
    );
    match client.conn(1, &addr1).call(set, Bytes::new()).await {
        Err(ConnError::Remote(w)) => {
            assert_eq!(w.code, ErrorCode::Io, "{w}");
            assert!(w.message.contains("fewer than the 2"), "{w}");
        }
        other => panic!("a change on too few copies answered {other:?}"),
    }
    // An unnamed create has no place in a group.
    match client
        .conn(1, &addr1)
        .call(
            client_request(
                1,
                0,
                Command::Create {
                    pid: group_partition(GROUP),
                    oid: None,
                    count: 1,
                },
                Vec::new(),
            ),
            Bytes::new(),
        )
        .await
    {
        Err(ConnError::Remote(w)) => assert_eq!(w.code, ErrorCode::BadRequest, "{w}"),
        other => panic!("an unnamed create answered {other:?}"),
    }
    stop_all(&mut members);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_that_fails_part_way_leaves_no_member_different() {
    let (shared, mut members, client) = chain_of(2);
    let pid = group_partition(GROUP);
    create_obj(&client, 1).await;
    // The swap is made, then its set list fails (a page the store keeps
    // itself is read-only): the head answers the error, and the member
    // gets the head's whole object rather than stay without the swap.
    let addr1 = shared.lock().unwrap().addrs[&1].clone();
    let req = client_request(
        1,
        2,
        Command::Cas {
            pid,
            oid: OBJ,
            key: key(5),
            expected: Vec::new(),
            new: b"swapped".to_vec(),
        },
        vec![(AttrKey { page: 1, number: 1 }, b"x".to_vec())],
    );
    match client.conn(1, &addr1).call(req, Bytes::new()).await {
        Err(ConnError::Remote(w)) => assert_eq!(w.code, ErrorCode::ReadOnly, "{w}"),
        other => panic!("a CAS with a read-only set list answered {other:?}"),
    }
    // Both members answer the same value (each made head in turn).
    let mut seen = Vec::new();
    for order in [vec![1, 2], vec![2, 1]] {
        shared.lock().unwrap().table.set(GROUP, order, vec![]);
        let (_, attrs) = client
            .call(0, Command::GetAttributes { pid, oid: OBJ }, vec![key(5)])
            .await;
        seen.push(attrs);
    }
    assert_eq!(seen[0], seen[1], "the members differ after a failed change");
    stop_all(&mut members);
}

/// A member whose shutdown can be awaited: its runtime, its store's
/// directory, its stop switch, and a receiver that fires once `serve`
/// has returned (after the drain and the store's close).
struct Stoppable {
    rt: tokio::runtime::Runtime,
    dir: tempfile::TempDir,
    stop: tokio::sync::watch::Sender<bool>,
    done: tokio::sync::oneshot::Receiver<()>,
}

/// Starts member `id` (as [`start_member`]) whose server gives requests
/// still running at shutdown `drain` to finish.
fn start_stoppable(id: u32, shared: Arc<Mutex<Table>>, drain: Duration) -> Stoppable {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("osd.img");
    let dev: Arc<dyn Device> = Arc::new(FileDevice::create(&path, 64 << 20).unwrap());
    store::format(dev.clone(), &FormatOptions::default()).unwrap();
    let s = Store::open(dev, &OpenOptions::default()).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let ctx = Ctx::new(Arc::new(StoreHandle::new(path, s)), Some(ring(id)), id);
    let auth = Arc::new(Authority {
        me: id,
        shared: shared.clone(),
    });
    let chains = Chains::new(id, CLUSTER, auth, Arc::new(MemberTickets(id)));
    let mut cfg = ServerConfig::new(CLUSTER, id);
    cfg.serve.drain_timeout = drain;
    let osd = Osd::chained(ctx, cfg, chains.clone());
    let (epochs, rx) = tokio::sync::watch::channel(0u64);
    rt.spawn(async move {
        let _keep = epochs;
        chains.run(rx).await;
    });
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    shared
        .lock()
        .unwrap()
        .addrs
        .insert(id, listener.local_addr().unwrap().to_string());
    let (stop, rx) = tokio::sync::watch::channel(false);
    let (tell, done) = tokio::sync::oneshot::channel();
    rt.spawn(async move {
        let listener = tokio::net::TcpListener::from_std(listener).unwrap();
        let _ = osd.serve(listener, rx).await;
        let _ = tell.send(());
    });
    Stoppable {
        rt,
        dir,
        stop,
        done,
    }
}

impl Stoppable {
    /// Stops the member, waits until `serve` has returned, and says
    /// whether it left the clean-shutdown marker beside its store.
    async fn shut_down(self) -> bool {
        self.stop.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(10), self.done)
            .await
            .unwrap()
            .unwrap();
        let clean = self.dir.path().join("osd.img.chains-clean").exists();
        self.rt.shutdown_background();
        clean
    }
}

/// A head stopped while a change is still on its way down its chain (the
/// next member takes the connection and never answers) leaves no
/// clean-shutdown marker, so its next start rejoins through the
/// authority; a member stopped with nothing in flight leaves one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_shutdown_with_nothing_in_flight_is_clean() {
    let drain = Duration::from_millis(300);

    // Nothing in flight: clean.
    let shared = Arc::new(Mutex::new(Table::default()));
    let lone = start_stoppable(1, shared.clone(), drain);
    shared.lock().unwrap().table.set(GROUP, vec![1], vec![]);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(lone.shut_down().await, "an idle member's shutdown is clean");

    // A change on its way down to a member that never answers.
    let shared = Arc::new(Mutex::new(Table::default()));
    let hole = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    shared
        .lock()
        .unwrap()
        .addrs
        .insert(2, hole.local_addr().unwrap().to_string());
    let head = start_stoppable(1, shared.clone(), drain);
    shared.lock().unwrap().table.set(GROUP, vec![1, 2], vec![]);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let client = GroupClient {
        shared: shared.clone(),
        conns: Mutex::new(HashMap::new()),
    };
    let addr = shared.lock().unwrap().addrs[&1].clone();
    let conn = client.conn(1, &addr);
    let create = client_request(
        1,
        1,
        Command::Create {
            pid: group_partition(GROUP),
            oid: Some(OBJ),
            count: 1,
        },
        vec![],
    );
    let stuck = tokio::spawn(async move { conn.call(create, Bytes::new()).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !stuck.is_finished(),
        "the change was answered: {:?}",
        stuck.await
    );
    assert!(
        !head.shut_down().await,
        "stopped with a change not down its chain, yet marked clean"
    );
    stuck.abort();
    drop(hole);
}

/// Creates the test object `OBJ` in the group's partition (request id `id`).
async fn create_obj(client: &GroupClient, id: u64) {
    let pid = group_partition(GROUP);
    client
        .call(
            id,
            Command::Create {
                pid,
                oid: Some(OBJ),
                count: 1,
            },
            vec![],
        )
        .await;
}

/// `req`, sent to the head at `addr`, is refused as a bad request whose
/// message says `says`.
async fn refused_as_bad(client: &GroupClient, addr: &str, req: Request, says: &str) {
    match client.conn(1, addr).call(req, Bytes::new()).await {
        Err(ConnError::Remote(w)) => {
            assert_eq!(w.code, ErrorCode::BadRequest, "{w}");
            assert!(w.message.contains(says), "{w}");
        }
        other => panic!("answered {other:?}, not refused as bad ({says:?})"),
    }
}

/// The head holds no value for `k` on the test object.
async fn assert_unset(client: &GroupClient, pid: u64, k: AttrKey) {
    let (_, attrs) = client
        .call(0, Command::GetAttributes { pid, oid: OBJ }, vec![k])
        .await;
    assert!(
        attrs.iter().all(|(a, v)| *a != k || v.is_empty()),
        "{attrs:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_too_large_to_forward_is_refused_at_the_head_and_costs_no_member() {
    let (shared, mut members, client) = chain_of(2);
    let pid = group_partition(GROUP);
    create_obj(&client, 1).await;
    // Fourteen 60 KiB attributes: 840 KiB of header, under the frame
    // limit (1 MiB), but its FORWARD (the set list, the change, the
    // answer) would not fit the next member's.
    let set: Vec<(AttrKey, Vec<u8>)> = (0..14)
        .map(|n| (key(100 + n), vec![n as u8; 60 << 10]))
        .collect();
    let addr1 = shared.lock().unwrap().addrs[&1].clone();
    let req = client_request(1, 3, Command::SetAttributes { pid, oid: OBJ }, set);
    refused_as_bad(&client, &addr1, req, "cannot be passed down").await;
    // Nothing applied at the head, both members still in the chain.
    assert_unset(&client, pid, key(100)).await;
    let members_now = shared
        .lock()
        .unwrap()
        .table
        .chain(GROUP)
        .unwrap()
        .members
        .clone();
    assert_eq!(members_now, vec![1, 2], "a member was dropped");
    // The same attributes in batches that fit go down the chain to both.
    for chunk in 0..2u32 {
        let set: Vec<(AttrKey, Vec<u8>)> = (0..7)
            .map(|n| (key(100 + chunk * 7 + n), vec![1u8; 60 << 10]))
            .collect();
        let req = client_request(
            1,
            10 + u64::from(chunk),
            Command::SetAttributes { pid, oid: OBJ },
            set,
        );
        client
            .conn(1, &addr1)
            .call(req, Bytes::new())
            .await
            .unwrap();
    }
    let mut seen = Vec::new();
    for order in [vec![1, 2], vec![2, 1]] {
        shared.lock().unwrap().table.set(GROUP, order, vec![]);
        let (_, attrs) = client
            .call(0, Command::GetAttributes { pid, oid: OBJ }, vec![key(113)])
            .await;
        seen.push(attrs);
    }
    assert_eq!(seen[0], seen[1], "the members differ");
    assert_eq!(seen[0].len(), 1);
    shared.lock().unwrap().table.set(GROUP, vec![1, 2], vec![]);
    // A listing that sets an attribute on the way: its FORWARD would carry
    // the listing's answer (here 840 KiB of attributes), past a member's
    // limit. Refused at the head before anything is set.
    let get_page = Command::GetPage {
        pid,
        oid: OBJ,
        page: 0x1_0000,
        after: None,
        max: 4096,
    };
    let req = client_request(1, 20, get_page, vec![(key(999), b"x".to_vec())]);
    refused_as_bad(&client, &addr1, req, "with a set list").await;
    assert_unset(&client, pid, key(999)).await;
    // A create of no objects is refused, and the connection goes on.
    let none = Command::Create {
        pid,
        oid: Some(OBJ + 1),
        count: 0,
    };
    let req = client_request(1, 21, none, vec![]);
    refused_as_bad(&client, &addr1, req, "").await;
    // The same connection still serves (a panic in the admission took its
    // task down).
    let req = client_request(1, 22, Command::GetAttributes { pid, oid: OBJ }, vec![]);
    client
        .conn(1, &addr1)
        .call(req, Bytes::new())
        .await
        .expect("the connection still serves");
    let members_now = shared
        .lock()
        .unwrap()
        .table
        .chain(GROUP)
        .unwrap()
        .members
        .clone();
    assert_eq!(members_now, vec![1, 2], "a member was dropped");
    stop_all(&mut members);
}

/// The copy floor holds for the whole change, not only when it starts: a
/// change that finds three members, two of which are down and dropped
/// while it is passed on, is not acknowledged on the one copy left (it
/// was, before), and the group then refuses changes until it has members
/// again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_is_never_acknowledged_on_fewer_copies_than_the_floor() {
    let (shared, mut members, client) = chain_of(3);
    {
        let mut t = shared.lock().unwrap();
        t.table.replicas = 3;
        // One group per OSD, as a cluster of three has: the floor is two.
        t.table.set(2, vec![2, 3, 1], vec![]);
        t.table.set(3, vec![3, 1, 2], vec![]);
    }
    let pid = group_partition(GROUP);
    let create = Command::Create {
        pid,
        oid: Some(OBJ),
        count: 1,
    };
    client.call(1, create, vec![]).await;
    for id in [2, 3] {
        if let Some(rt) = members.get_mut(&id).unwrap().rt.take() {
            rt.shutdown_background();
        }
    }
    shared.lock().unwrap().down.extend([2, 3]);
    let addr1 = shared.lock().unwrap().addrs[&1].clone();
    let cas = |id, new: &[u8]| {
        let cmd = Command::Cas {
            pid,
            oid: OBJ,
            key: key(5),
            expected: Vec::new(),
            new: new.to_vec(),
        };
        client_request(1, id, cmd, vec![])
    };
    match client
        .conn(1, &addr1)
        .call(cas(2, b"one copy"), Bytes::new())
        .await
    {
        Err(ConnError::Remote(w)) => assert_eq!(w.code, ErrorCode::Busy, "{w}"),
        other => panic!("a change left on one copy of three was answered {other:?}"),
    }
    let t = shared.lock().unwrap().table.chain(GROUP).cloned().unwrap();
    assert_eq!(t.members, vec![1], "both dead members dropped");
    match client
        .conn(1, &addr1)
        .call(cas(3, b"again"), Bytes::new())
        .await
    {
        Err(ConnError::Remote(w)) => {
            assert!(matches!(w.code, ErrorCode::Busy | ErrorCode::Io), "{w}")
        }
        other => panic!("a change on a group of one copy was answered {other:?}"),
    }
    stop_all(&mut members);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_change_moves_the_objects_stamp_and_clients_cannot_set_it() {
    let (shared, mut members, client) = chain_of(2);
    let pid = group_partition(GROUP);
    let stamp = |attrs: Vec<(AttrKey, Vec<u8>)>| {
        attrs
            .into_iter()
            .find(|(k, _)| *k == proto::chain::STAMP)
            .map(|(_, v)| v)
    };
    create_obj(&client, 1).await;
    let get = || {
        client.call(
            0,
            Command::GetAttributes { pid, oid: OBJ },
            vec![proto::chain::STAMP],
        )
    };
    let made = stamp(get().await.1).expect("a created object is stamped");
    assert_eq!(made.len(), 8);
    let mut seen = vec![made];
    for id in 2..6u64 {
        client
            .call(
                id,
                Command::Truncate {
                    pid,
                    oid: OBJ,
                    len: id * 100,
                },
                vec![],
            )
            .await;
        let now = stamp(get().await.1).unwrap();
        assert!(!seen.contains(&now), "change {id} kept an earlier stamp");
        seen.push(now);
    }
    // A read moves nothing.
    client
        .call(
            0,
            Command::Read {
                pid,
                oid: OBJ,
                offset: 0,
                len: 10,
            },
            vec![],
        )
        .await;
    assert_eq!(stamp(get().await.1).as_ref(), seen.last());
    let addr1 = shared.lock().unwrap().addrs[&1].clone();
    let forged = client_request(
        1,
        9,
        Command::SetAttributes { pid, oid: OBJ },
        vec![(proto::chain::STAMP, seen[0].clone())],
    );
    refused_as_bad(&client, &addr1, forged, "replica chains' own").await;
    let swap = client_request(
        1,
        10,
        Command::Cas {
            pid,
            oid: OBJ,
            key: proto::chain::STAMP,
            expected: seen.last().unwrap().clone(),
            new: seen[0].clone(),
        },
        vec![],
    );
    refused_as_bad(&client, &addr1, swap, "replica chains' own").await;
    assert_eq!(stamp(get().await.1).as_ref(), seen.last());
    stop_all(&mut members);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_that_makes_its_destination_makes_it_on_every_member() {
    let (shared, mut members, client) = chain_of(2);
    let pid = group_partition(GROUP);
    let addr1 = shared.lock().unwrap().addrs[&1].clone();
    create_obj(&client, 1).await;
    let data = Bytes::from(vec![7u8; 5000]);
    let w = client_request(
        1,
        2,
        Command::Write {
            pid,
            oid: OBJ,
            offset: 0,
        },
        vec![],
    );
    client.conn(1, &addr1).call(w, data.clone()).await.unwrap();
    let dest = OBJ + 1;
    let copy = client_request(
        1,
        3,
        Command::Copy {
            pid,
            oid: dest,
            offset: 100,
            src_oid: OBJ,
            src_offset: 0,
            len: 5000,
            src_cap: Some(Box::new(client_cap(1))),
        },
        vec![],
    );
    client
        .conn(1, &addr1)
        .call(copy, Bytes::new())
        .await
        .unwrap();
    // Member 2 alone, as head: the destination is there, whole.
    shared.lock().unwrap().table.set(GROUP, vec![2], vec![]);
    let (reply, _) = client
        .call(
            0,
            Command::Read {
                pid,
                oid: dest,
                offset: 0,
                len: 6000,
            },
            vec![],
        )
        .await;
    assert_eq!(reply, Reply::Read { size: 5100 }, "member 2 lacks the copy");
    let addr2 = shared.lock().unwrap().addrs[&2].clone();
    let read = client_request(
        2,
        0,
        Command::Read {
            pid,
            oid: dest,
            offset: 100,
            len: 5000,
        },
        vec![],
    );
    let got = client
        .conn(2, &addr2)
        .call(read, Bytes::new())
        .await
        .unwrap();
    assert_eq!(got.data, data, "member 2's copy differs");
    stop_all(&mut members);
}
