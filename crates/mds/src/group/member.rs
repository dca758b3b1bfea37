//! A member's life. It opens its KV and raft log, answers its peers, and
//! joins the group (the first start of a pristine group initializes the
//! membership on every member; openraft makes that idempotent). While it
//! follows, its client address is closed: clients and OSDs, which know
//! every member's address, find the leader by trying them. When it is
//! elected it waits until everything committed before is applied
//! (`ensure_linearizable`), opens the MDS on its KV with raft as the KV's
//! durability, and serves exactly as a single MDS after a restart (clients
//! replay their early answers, OSDs report, leases start over).
//!
//! It steps down by restarting itself ([`StepDown`]): when raft says it no
//! longer leads, when it has not heard a majority acknowledge it for
//! [`QUORUM_LEASE`] (shorter than the time a follower waits before it may
//! vote for another, so an old leader stops answering before a new one
//! can be elected), or when a batch is refused. Its process ends without
//! running destructors, so its KV keeps nothing the group did not commit.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use openraft::{Raft, ServerState};
use tokio::sync::watch;

use super::peer::{PeerFront, PeerNet};
use super::sink::RaftSink;
use crate::config::MdsConfig;
use crate::kv::{Kv, KvPaths};
use crate::raft::Tc;
use crate::raft::log_store::LogStore;
use crate::raft::state_machine::KvMachine;
use crate::records::Records;
use crate::service::Mds;

/// A leader that has not heard a majority acknowledge it for this long
/// stops answering (followers refuse to vote for another for 800 ms
/// after their last heartbeat: see [`crate::raft::config`]).
pub const QUORUM_LEASE: Duration = Duration::from_millis(600);

/// Ends the process without unwinding (the binary re-executes itself);
/// called with why. Must not return.
pub type StepDown = Arc<dyn Fn(&str) + Send + Sync>;

/// How [`run`] ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Exit {
    /// Stopped as asked.
    Stopped,
}

/// What a running member exposes.
pub struct Running {
    /// Its raft.
    pub raft: Raft<Tc>,
    /// The MDS, while it leads.
    pub mds: watch::Receiver<Option<Arc<Mds>>>,
}

/// The runtime raft runs on (two threads: its core, replication and the
/// state machine's applies), kept for the process's life.
fn raft_runtime() -> Result<&'static tokio::runtime::Runtime, String> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("raft")
        .enable_all()
        .build()
        .map_err(|e| format!("raft runtime: {e}"))?;
    // A member lives as long as its process; a runtime cannot be dropped
    // from inside another's tasks.
    Ok(Box::leak(Box::new(rt)))
}

fn peer_limits() -> net::serve::ServeLimits {
    let mut l = crate::server::default_limits();
    l.frame.max_payload = super::peer::MAX_PEER_PAYLOAD;
    l.max_connections = 64;
    l.max_connections_per_principal = 64;
    l.max_in_flight = 16;
    l.max_inflight_bytes = 1 << 30;
    l
}

/// Runs the member in `dir` until `stop` turns true. `started` is given
/// the raft handle and the MDS (once it leads) as soon as they exist.
pub async fn run(
    dir: &Path,
    mut stop: watch::Receiver<bool>,
    step_down: StepDown,
    started: impl FnOnce(Running),
) -> Result<Exit, String> {
    let cfg = MdsConfig::load(&dir.join("mds.toml")).map_err(|e| e.to_string())?;
    let group = cfg
        .group
        .clone()
        .ok_or_else(|| format!("{}: no [group] in mds.toml", dir.display()))?;
    let me = group
        .me()
        .cloned()
        .ok_or_else(|| format!("member {} is not among the members", group.id))?;
    let key = super::files::load_key(dir)?;
    let paths = KvPaths::new(dir);
    let db = redb::Builder::new()
        .set_cache_size(cfg.cache_mib << 20)
        .open(&paths.db)
        .map_err(|e| format!("{}: {e}", paths.db.display()))?;
    let db = Arc::new(db);
    let cluster_id = crate::kv::read_db(&*db)
        .and_then(|r| r.superblock())
        .map_err(|e| e.to_string())?
        .cluster_id;
    let log = LogStore::open(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if log.member() != group.id {
        return Err(format!(
            "{}: this raft log is member {}'s, and mds.toml says member {}: a member's \
             directory cannot be copied to make another (its vote would come along)",
            dir.display(),
            log.member(),
            group.id
        ));
    }
    let mut sm = KvMachine::open(db.clone(), dir).map_err(|e| e.to_string())?;
    let log = if sm.awaiting_snapshot() {
        fresh_log_if_joining(dir, log, group.log_bytes).await?
    } else {
        log
    };
    let log_watch = log.clone();
    let log_gate = log.clone();
    let (origin_slot, quiesce_slot) = (sm.live_origin(), sm.quiesce_slot());
    let heard = super::peer::Heard::default();
    let net = PeerNet {
        me: group.id,
        cluster_id: cluster_id.clone(),
        key,
        heard: heard.clone(),
        down: Default::default(),
    };
    // The client address, bound now but not listened on until this member
    // leads (a follower's refuses connections): a member that could not
    // serve must not stand for election at all.
    let client = bind_client(&me.addr)?;
    refuse_if_reverted(&net, &group, &log, &mut sm).await?;
    never_resume_leading(&log, group.id).await?;
    let raft_cfg = Arc::new(crate::raft::config(&cluster_id)?);
    let group_id = group.id;
    // Raft on a runtime of its own: requests keeping this one's workers
    // busy must not hold back heartbeats (the leader would lose its lease).
    let raft_rt = raft_runtime()?;
    let raft = raft_rt
        .spawn(async move { Raft::new(group_id, raft_cfg, net, log, sm).await })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    let front = Arc::new(PeerFront {
        raft: raft.clone(),
        cluster_id: cluster_id.clone(),
        key,
        dir: dir.to_path_buf(),
        receiving: tokio::sync::Mutex::new(None),
    });
    let peer_listener = tokio::net::TcpListener::bind(&me.peer)
        .await
        .map_err(|e| format!("peer listener {}: {e}", me.peer))?;
    let peers = net::serve::Server::new(front, peer_limits());
    tokio::spawn(peers.serve(peer_listener, stop.clone()));
    let members = super::peer::membership(&group.members);
    let joining = crate::raft::state_machine::awaiting_snapshot_path(dir).exists();
    if !joining && !raft.is_initialized().await.map_err(|e| e.to_string())? {
        // Every member of a pristine group does this; all but the first
        // to be heard are told the group exists. A member that joined
        // later never does: the leader tells it the group.
        if let Err(e) = raft.initialize(members).await {
            tracing::info!(error = %e, "group already initialized");
        }
    }
    tokio::spawn(snapshot_when_full(raft.clone(), log_watch));
    let (mds_tx, mds_rx) = watch::channel(None);
    started(Running {
        raft: raft.clone(),
        mds: mds_rx,
    });
    if !follow(&raft, group.id, &mut stop).await? {
        let _ = raft.shutdown().await;
        return Ok(Exit::Stopped);
    }
    let origin = u64::from_le_bytes(net::auth::random_bytes()).max(1);
    origin_slot.store(origin, Ordering::SeqCst);
    let sink = RaftSink::start(raft.clone(), origin, log_gate);
    let kv = Arc::new(
        Kv::open_group(db.clone(), Mds::kv_options(&cfg), sink).map_err(|e| e.to_string())?,
    );
    // From here the KV may hold batches the group has not committed.
    let guard = Speculating(Some(step_down.clone()));
    {
        let kv = kv.clone();
        *quiesce_slot.lock().unwrap_or_else(|e| e.into_inner()) =
            Some(Arc::new(move |f: &mut dyn FnMut()| kv.quiesced(f)));
    }
    let d = dir.to_path_buf();
    let mds = tokio::task::spawn_blocking(move || Mds::open_on(&d, cfg, kv))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string());
    let mds = match mds {
        Ok(m) => m,
        Err(e) => {
            guard.step_down(&format!("could not take over: {e}"));
            return Err(e);
        }
    };
    let _ = mds
        .group_status
        .set(status_of(raft.clone(), group.id, heard.clone()));
    let _ = mds
        .group_admin
        .set(super::admin::admin(raft.clone(), heard.clone()));
    lead(&raft, mds, (client, &me.addr), stop, guard, mds_tx).await
}

/// Refuses to start when a leader saw this member hold more than its log
/// does ([`super::reverted`]): asks the members `mds.toml` names and
/// those the KV's last applied membership names.
async fn refuse_if_reverted(
    net: &PeerNet,
    group: &crate::config::GroupConfig,
    log: &LogStore,
    sm: &mut KvMachine,
) -> Result<(), String> {
    use openraft::storage::{RaftLogStorage, RaftStateMachine};
    let mut log = log.clone();
    let state = log.get_log_state().await.map_err(|e| e.to_string())?;
    let vote = log.read_vote().await.map_err(|e| e.to_string())?;
    let (_, membership) = sm.applied_state().await.map_err(|e| e.to_string())?;
    let mut peers: BTreeMap<u64, String> = group
        .members
        .iter()
        .map(|m| (m.id, m.peer.clone()))
        .collect();
    for (id, m) in membership.membership().nodes() {
        peers.insert(*id, m.addr.clone());
    }
    super::reverted::refuse_if_reverted(
        net,
        group.id,
        vote.map_or(0, |v| v.leader_id().term),
        state.last_log_id.map_or(0, |l| l.index),
        peers.into_iter().collect(),
    )
    .await
}

/// A member still waiting for its first snapshot (`mds join`; the caller
/// checks) that was
/// sent log entries instead (by a leader that had not purged its log)
/// cannot apply them and would refuse them at every start: its log is
/// made anew. It is a learner that has voted for no one, so nothing it
/// held counts anywhere.
async fn fresh_log_if_joining(
    dir: &Path,
    log: LogStore,
    log_bytes: u64,
) -> Result<LogStore, String> {
    use openraft::storage::RaftLogStorage;
    let mut probe = log.clone();
    let state = probe.get_log_state().await.map_err(|e| e.to_string())?;
    if state.last_log_id.is_none() {
        return Ok(log);
    }
    let member = log.member();
    drop((probe, log));
    tracing::warn!("joined, and sent entries before a snapshot: starting the raft log anew");
    let what = |e: std::io::Error| format!("{}: {e}", dir.display());
    let (ring, state) = crate::raft::log_store::paths(dir);
    std::fs::remove_file(&ring).map_err(what)?;
    std::fs::remove_file(&state).map_err(what)?;
    crate::raft::log_store::create(dir, log_bytes, member).map_err(what)?;
    LogStore::open(dir).map_err(what)
}

/// Binds (without listening) the member's client address.
fn bind_client(addr: &str) -> Result<socket2::Socket, String> {
    use std::net::ToSocketAddrs;
    let what = |e: &dyn std::fmt::Display| format!("client address {addr}: {e}");
    let at = addr
        .to_socket_addrs()
        .map_err(|e| what(&e))?
        .next()
        .ok_or_else(|| what(&"resolves to nothing"))?;
    let s = socket2::Socket::new(
        socket2::Domain::for_address(at),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )
    .map_err(|e| what(&e))?;
    s.set_reuse_address(true).map_err(|e| what(&e))?;
    s.bind(&at.into()).map_err(|e| {
        what(&format!(
            "{e}: this member could not serve clients if elected, so it does not start"
        ))
    })?;
    Ok(s)
}

/// openraft restores a member whose saved vote says it led as the leader
/// of that term at once, without an election. A member restarts when it
/// steps down (it lost its majority, or could not serve), and its data may
/// have been restored from a copy: resuming would make it lead again at
/// once (a loop while it cannot serve), and a copy missing entries it had
/// appended in that term would write different entries at the same
/// positions, which followers cannot tell apart. So the vote is kept
/// (it still voted for itself in that term, and votes for no one else in
/// it) but no longer counts as an elected leader's: the member starts as
/// a follower and leads again only by winning an election in a later term,
/// which a member whose log is behind cannot.
async fn never_resume_leading(log: &LogStore, me: u64) -> Result<(), String> {
    use openraft::storage::RaftLogStorage;
    let mut log = log.clone();
    let Some(vote) = log.read_vote().await.map_err(|e| e.to_string())? else {
        return Ok(());
    };
    if vote.is_committed() && vote.leader_id().voted_for() == Some(me) {
        let term = vote.leader_id().term;
        log.save_vote(&openraft::Vote::new(term, me))
            .await
            .map_err(|e| e.to_string())?;
        tracing::info!(term, "led before this start: starts as a follower");
    }
    Ok(())
}

/// Held while the KV may hold batches the group has not committed: ends
/// the process through the step-down (no destructor runs, so those
/// batches cannot be made durable) on every way out but a drained stop.
struct Speculating(Option<StepDown>);

impl Speculating {
    fn step_down(&self, why: &str) {
        if let Some(s) = &self.0 {
            s(why);
        }
        // A step-down that returned: end here all the same.
        // SAFETY: _exit ends the process at once, running nothing.
        unsafe { libc::_exit(75) }
    }
}

impl Drop for Speculating {
    fn drop(&mut self) {
        if self.0.is_some() {
            self.step_down("left the lead without draining");
        }
    }
}

/// The group as the leader `leader` sees it (its members as raft records
/// them, voters and learners), for the status.
fn status_of(
    raft: Raft<Tc>,
    leader: u64,
    heard: super::peer::Heard,
) -> crate::service::GroupStatusFn {
    Box::new(move || {
        let m = raft.metrics().borrow().clone();
        let last_log = m.last_log_index.unwrap_or(0);
        let heard = heard.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let group = m.membership_config.membership();
        let members = group
            .nodes()
            .map(|(&id, node)| {
                let me = id == leader;
                proto::status::GroupMemberStatus {
                    id,
                    addr: node.client.clone(),
                    voter: group.voter_ids().any(|v| v == id),
                    matched: if me {
                        Some(last_log)
                    } else {
                        crate::raft::matched(&m, id)
                    },
                    heard_ms: if me {
                        Some(0)
                    } else {
                        heard.get(&id).map(|t| t.elapsed().as_millis() as u64)
                    },
                }
            })
            .collect();
        proto::status::GroupStatus {
            leader,
            term: m.current_term,
            last_log,
            applied: m.last_applied.map_or(0, |l| l.index),
            members,
        }
    })
}

/// Follows until elected and sure of it (true), or stopped (false).
/// Nothing is opened before that, so an election lost meanwhile costs
/// nothing.
async fn follow(
    raft: &Raft<Tc>,
    me: u64,
    stop: &mut watch::Receiver<bool>,
) -> Result<bool, String> {
    let mut metrics = raft.metrics();
    // A member that joined learns the group from a snapshot taken before
    // it was added: it is removed only once it has been seen in the group
    // and is no longer.
    let mut seen_in_group = false;
    loop {
        let (leads, in_group, committed) = {
            let m = metrics.borrow();
            let group = m.membership_config.membership();
            // Applied means committed: an uncommitted change may yet be
            // undone by another leader.
            let committed = m.membership_config.log_id().is_some_and(|at| {
                m.last_applied
                    .is_some_and(|applied| applied.index >= at.index)
            });
            (
                m.state == ServerState::Leader && m.current_leader == Some(me),
                group.get_node(&me).is_some(),
                committed,
            )
        };
        seen_in_group |= in_group;
        if seen_in_group && !in_group && committed {
            return Err(format!(
                "member {me} was removed from the group (`tessera mds remove`): it no longer \
                 serves; to bring this host back, make a new member with `tessera mds join`"
            ));
        }
        if leads {
            tracing::info!(member = me, "elected: taking over");
            // Everything committed before is applied once this returns.
            match raft.ensure_linearizable().await {
                Ok(_) => return Ok(true),
                Err(e) => tracing::info!(error = %e, "not the leader after all"),
            }
        }
        tokio::select! {
            _ = stop.changed() => return Ok(false),
            r = metrics.changed() => r.map_err(|_| "raft stopped".to_string())?,
        }
    }
}

/// Serves clients and OSDs while this member leads.
async fn lead(
    raft: &Raft<Tc>,
    mds: Arc<Mds>,
    (client, addr): (socket2::Socket, &str),
    mut stop: watch::Receiver<bool>,
    mut guard: Speculating,
    mds_tx: watch::Sender<Option<Arc<Mds>>>,
) -> Result<Exit, String> {
    let listening = client
        .listen(1024)
        .and_then(|()| client.set_nonblocking(true))
        .and_then(|()| tokio::net::TcpListener::from_std(client.into()));
    let listener = match listening {
        Ok(l) => l,
        Err(e) => {
            guard.step_down(&format!("cannot listen on {addr}: {e}"));
            return Err(e.to_string());
        }
    };
    let (serve_stop, serve_rx) = watch::channel(false);
    let serving = tokio::spawn(crate::server::serve(mds.clone(), listener, serve_rx));
    let workers = [
        tokio::spawn(mds.clone().delete_worker()),
        tokio::spawn(mds.clone().recovery_worker()),
        tokio::spawn(super::admin::promote(raft.clone())),
    ];
    let _ = mds_tx.send(Some(mds.clone()));
    tracing::info!(%addr, "leading: serving clients and OSDs");
    let mut tick = tokio::time::interval(Duration::from_millis(25));
    // openraft computes the quorum ack's age when it reports metrics: a
    // raft loop that is stuck reports nothing, so the age is the last
    // report's plus the time since that report was seen.
    let mut reports = raft.metrics();
    let mut seen = std::time::Instant::now();
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            _ = tick.tick() => {}
        }
        if reports.has_changed().unwrap_or(false) {
            reports.borrow_and_update();
            seen = std::time::Instant::now();
        }
        let m = reports.borrow().clone();
        let voters = m.membership_config.membership().voter_ids().count();
        let lease = Duration::from_millis(m.millis_since_quorum_ack.unwrap_or(u64::MAX))
            .saturating_add(seen.elapsed());
        if m.state != ServerState::Leader {
            guard.step_down(&format!("no longer the leader (term {})", m.current_term));
        } else if voters > 1 && lease > QUORUM_LEASE {
            guard.step_down(&format!("no majority heard for {lease:?}"));
        } else if mds.kv.has_failed() {
            guard.step_down("a batch was not replicated");
        }
    }
    // A clean stop: drain (the KV's close waits for every batch to be
    // replicated), then leave the group's raft.
    for w in workers {
        w.abort();
    }
    let _ = serve_stop.send(true);
    // Drained only if the server ended by itself (it closes the KV, which
    // waits for every batch to be replicated) and nothing failed.
    let ended = tokio::time::timeout(Duration::from_secs(15), serving).await;
    if !matches!(ended, Ok(Ok(()))) || mds.kv.has_failed() || !mds.kv.all_durable() {
        guard.step_down("could not replicate everything before stopping");
    }
    // Drained: everything the KV holds is committed.
    guard.0 = None;
    let _ = mds_tx.send(None);
    let _ = raft.shutdown().await;
    Ok(Exit::Stopped)
}

/// Asks for a snapshot (after which openraft purges the log up to it)
/// whenever the raft log ring is over half full.
async fn snapshot_when_full(raft: Raft<Tc>, log: LogStore) {
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    loop {
        tick.tick().await;
        if raft.metrics().borrow().running_state.is_err() {
            return;
        }
        if log.live_bytes() > log.capacity() / 2 {
            let _ = raft.trigger().snapshot().await;
            // Let the snapshot and the purge land before looking again.
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }
}
