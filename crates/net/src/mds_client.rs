//! The Rust client of the MDS protocol: pipelined requests over a small
//! pool of connections, with counters of mandatory and non-mandatory
//! requests (the measure of what prefetching saves in Hendricks et al.,
//! "Improving small file performance in object-based storage", 2006).

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::auth::Identity;
use crate::connection::{ConnConfig, ConnError, Connection};
use crate::pool::Pool;
use bytes::Bytes;
use proto::mds::{
    Creds, DirEntry, Entry, MDS_ID, MdsError, MdsReply, MdsRequest, MdsResponse, Op, REPLAY_MAX,
    ROOT_INO, ReplayOp,
};
use proto::msg::decode;

/// How many times a request that only reads is sent before a lost
/// connection is reported ([`MdsClient::call`]).
const READ_TRIES: u64 = 4;

/// Why a call failed: transport or the MDS's answer.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    /// Could not reach the MDS or the connection broke.
    #[error("MDS unreachable: {0}")]
    Transport(#[from] ConnError),
    /// The MDS answered with an error.
    #[error(transparent)]
    Mds(#[from] MdsError),
}

impl CallError {
    /// The errno to hand to POSIX callers: the MDS's, or EIO when it
    /// could not be reached.
    pub fn code(&self) -> proto::mds::Errno {
        match self {
            CallError::Transport(_) => proto::mds::Errno::Io,
            CallError::Mds(e) => e.errno,
        }
    }

    /// [`CallError::code`] as its Linux number.
    pub fn errno(&self) -> i32 {
        self.code().raw()
    }
}

/// A connection pool to one MDS.
pub struct MdsClient {
    pool: Pool,
    identity: Identity,
    /// Identity sent with every request.
    pub creds: Creds,
    /// Entries to ask prefetched with lookups and opens.
    pub prefetch: u32,
    /// Mandatory requests sent.
    pub mandatory: AtomicU64,
    /// Non-mandatory requests sent.
    pub non_mandatory: AtomicU64,
    /// Requests about names that do not exist: a lookup answered ENOENT,
    /// and the name lists that let the client answer such lookups itself.
    /// Hendricks et al.'s accounting ignores accesses to objects the
    /// namespace does not hold; they are counted here, not as non-mandatory.
    pub absent: AtomicU64,
    /// This client's session (random, never 0), sent with every request:
    /// the MDS counts the files it opens and creates as held by it.
    pub session: u64,
    /// Whether namespace changes may be answered before they are durable
    /// (set by [`MdsClient::set_early`]).
    early: AtomicBool,
    /// Early answers not yet known durable, to replay after an MDS restart.
    log: std::sync::Mutex<ReplayLog>,
    /// Held while a replay is under way.
    replaying: tokio::sync::Mutex<()>,
    /// Operations a restarted MDS redid from this client's replay.
    pub replayed: AtomicU64,
    /// Operations a restarted MDS could not redo (reported, logged).
    pub replay_failed: AtomicU64,
    /// When this client was last answered early.
    last_early: std::sync::Mutex<Option<std::time::Instant>>,
}

/// How long after its last early answer a client's session may still be
/// recorded at the MDS (its idle time, with margin): while it may, a
/// restarted MDS waits for this client, which therefore reconnects.
const RECORDED_FOR: std::time::Duration = std::time::Duration::from_secs(3);

/// The early answers a client keeps until they are durable.
#[derive(Debug, Default)]
struct ReplayLog {
    /// The MDS instance that gave them.
    instance: u64,
    /// In transno order.
    ops: VecDeque<ReplayOp>,
    /// Their estimated bytes ([`proto::mds::replay_footprint`]).
    bytes: usize,
    /// Early-capable requests sent and not yet answered, and their bytes:
    /// counted against the bounds before they are sent.
    in_flight: (usize, usize),
    /// Whether this client ever asked for early answers (then every new
    /// connection starts with a replay, so a restarted MDS hears from it).
    used: bool,
}

impl ReplayLog {
    /// Drops what `instance` says is durable.
    fn durable(&mut self, instance: u64, durable: u64) {
        if instance == self.instance {
            // Answers arrive in any order: drop every durable one.
            let before = self.ops.len();
            self.ops.retain(|o| o.transno > durable);
            if self.ops.len() != before {
                self.bytes = self
                    .ops
                    .iter()
                    .map(|o| proto::mds::replay_footprint(&o.creds, &o.op))
                    .sum();
            }
        }
    }
}

impl MdsClient {
    /// A client of the MDS at `addr` in `cluster_id` that authenticates
    /// as `identity` (connects on first use).
    pub fn new(addr: &str, cluster_id: &str, identity: Identity, connections: usize) -> MdsClient {
        Self::with_encryption(addr, cluster_id, identity, connections, false)
    }

    /// Like [`MdsClient::new`], asking for encrypted frames when `encrypt`.
    pub fn with_encryption(
        addr: &str,
        cluster_id: &str,
        identity: Identity,
        connections: usize,
        encrypt: bool,
    ) -> MdsClient {
        let mut cfg = ConnConfig::new(cluster_id, MDS_ID, std::sync::Arc::new(identity.clone()));
        cfg.dead_peer_after = Some(crate::connection::DEAD_PEER_AFTER);
        cfg.name = "tessera-client".into();
        cfg.connections = connections.max(1);
        cfg.encrypt = encrypt;
        MdsClient {
            pool: Pool::new(addr, cfg),
            identity,
            creds: Creds::root(),
            prefetch: 32,
            mandatory: AtomicU64::new(0),
            non_mandatory: AtomicU64::new(0),
            absent: AtomicU64::new(0),
            session: u64::from_le_bytes(crate::auth::random_bytes()).max(1),
            early: AtomicBool::new(false),
            log: std::sync::Mutex::new(ReplayLog::default()),
            replaying: tokio::sync::Mutex::new(()),
            replayed: AtomicU64::new(0),
            replay_failed: AtomicU64::new(0),
            last_early: std::sync::Mutex::new(None),
        }
    }

    /// For a long-lived client to call every fraction of a second: while
    /// it holds changes not yet durable, or its session may still be
    /// recorded at the MDS, it makes sure it is connected — so a
    /// restarted MDS, which waits for it, hears its replay at once rather
    /// than at its next request.
    pub async fn keep_replayable(&self) {
        let recent = self
            .last_early
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some_and(|t| t.elapsed() < RECORDED_FOR);
        if (self.undurable() > 0 || (recent && !self.pool.all_alive()))
            && let Err(e) = self.sync_call().await
        {
            tracing::debug!(error = %e, "keeping the MDS connection for replay");
        }
    }

    /// Asks the MDS to answer namespace changes before they are durable:
    /// this client then keeps each until the MDS says it is durable, and
    /// replays what a restarted MDS lost (only a long-lived client, such as
    /// a mount, should: a process that exits takes its list with it; it
    /// calls [`MdsClient::sync`] before it goes).
    pub fn set_early(&self, on: bool) {
        self.early.store(on, Ordering::SeqCst);
    }

    /// Early answers held, not yet known durable.
    pub fn undurable(&self) -> usize {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).ops.len()
    }

    /// Returns once every namespace change this client saw answered is
    /// durable at the MDS (fsync of a directory, syncfs, unmount).
    pub async fn sync(&self) -> Result<(), CallError> {
        if self.undurable() == 0 {
            return Ok(());
        }
        self.sync_call().await
    }

    /// One SYNC to the MDS (its answer prunes the replay list).
    async fn sync_call(&self) -> Result<(), CallError> {
        match Box::pin(self.call(Op::Sync)).await? {
            MdsReply::Synced { .. } => Ok(()),
            other => Err(unexpected(&other)),
        }
    }

    /// Sends this client's replay list on `c`, a new connection: an MDS
    /// that restarted redoes the operations (after every other client's
    /// earlier ones), one that did not has them already.
    async fn replay_on(&self, c: Arc<Connection>) -> Result<(), ConnError> {
        let _one = self.replaying.lock().await;
        let (instance, ops) = {
            let log = self.log.lock().unwrap_or_else(|e| e.into_inner());
            if !log.used {
                return Ok(());
            }
            (log.instance, log.ops.iter().cloned().collect::<Vec<_>>())
        };
        let sent = ops.len();
        let req = MdsRequest {
            creds: self.creds.clone(),
            session: self.session,
            prefetch: 0,
            early: true,
            op: Op::Replay { instance, ops },
        };
        let f = c.call_raw(req.op.opcode(), &req, Bytes::new()).await?;
        let resp: MdsResponse =
            decode(&f.header).map_err(|e| ConnError::Protocol(e.to_string()))?;
        let (now, results) = match resp.result {
            Ok(MdsReply::Replayed { instance, results }) => (instance, results),
            Ok(other) => return Err(ConnError::Protocol(format!("unexpected reply {other:?}"))),
            Err(e) => return Err(ConnError::Protocol(format!("replay refused: {e}"))),
        };
        if now == instance {
            return Ok(());
        }
        // A restarted MDS: what was sent is redone (durably) or lost.
        let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        for _ in 0..sent.min(log.ops.len()) {
            if let Some(o) = log.ops.pop_front() {
                log.bytes = log
                    .bytes
                    .saturating_sub(proto::mds::replay_footprint(&o.creds, &o.op));
            }
        }
        log.instance = now;
        let failed: Vec<_> = results.iter().filter_map(|r| r.as_ref().err()).collect();
        self.replayed
            .fetch_add((results.len() - failed.len()) as u64, Ordering::Relaxed);
        if !failed.is_empty() {
            self.replay_failed
                .fetch_add(failed.len() as u64, Ordering::Relaxed);
            tracing::error!(
                failed = failed.len(),
                first = %failed[0],
                "the restarted MDS could not redo some acknowledged namespace changes"
            );
        } else if sent > 0 {
            tracing::info!(operations = sent, "replayed to the restarted MDS");
        }
        Ok(())
    }

    /// The identity this client authenticates as (its key unwraps the
    /// session keys of the tickets the MDS hands it).
    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    /// Whether this client's connections to the MDS are encrypted (asked,
    /// or required by the MDS); connects if needed.
    pub async fn encrypted(&self) -> bool {
        match self.pool.conn(0).await {
            Ok(c) => c.encrypted,
            Err(_) => false,
        }
    }

    /// Sends `op` with this client's credentials.
    pub async fn call(&self, op: Op) -> Result<MdsReply, CallError> {
        self.call_as(self.creds.clone(), op).await
    }

    /// Sends `op` as `creds`.
    pub async fn call_as(&self, creds: Creds, op: Op) -> Result<MdsReply, CallError> {
        let lookup = matches!(op, Op::Lookup { .. });
        if op.mandatory() {
            self.mandatory.fetch_add(1, Ordering::Relaxed);
        } else if op.is_access() {
            self.non_mandatory.fetch_add(1, Ordering::Relaxed);
        }
        let result = self.call_counted(creds, op).await;
        if lookup
            && let Err(CallError::Mds(e)) = &result
            && e.errno == proto::mds::Errno::NoEnt
        {
            self.non_mandatory.fetch_sub(1, Ordering::Relaxed);
            self.absent.fetch_add(1, Ordering::Relaxed);
        }
        result
    }

    /// [`MdsClient::call_as`] for a request made only to answer lookups
    /// of names that do not exist (a client's name list): counted as
    /// `absent`.
    pub async fn call_as_absent(&self, creds: Creds, op: Op) -> Result<MdsReply, CallError> {
        self.absent.fetch_add(1, Ordering::Relaxed);
        self.call_counted(creds, op).await
    }

    /// [`MdsClient::call_as`] once counted.
    async fn call_counted(&self, creds: Creds, op: Op) -> Result<MdsReply, CallError> {
        let foot = proto::mds::replay_footprint(&creds, &op);
        // One that would take a large part of a REPLAY by itself (a user
        // in very many groups) is answered durably instead.
        let early = self.early.load(Ordering::SeqCst)
            && op.may_answer_early()
            && foot <= proto::mds::REPLAY_MAX_BYTES / 16;
        if early {
            // Bounded, counting what is in flight: wait for the MDS's
            // flush rather than hold more than one REPLAY may carry.
            loop {
                {
                    let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
                    let (n, b) = log.in_flight;
                    if log.ops.len() + n < REPLAY_MAX
                        && log.bytes + b + foot <= proto::mds::REPLAY_MAX_BYTES
                    {
                        log.in_flight = (n + 1, b + foot);
                        log.used = true;
                        break;
                    }
                }
                self.sync_call().await?;
            }
        }
        let result = if op.is_read_only() {
            self.send_read(creds, op).await
        } else {
            self.send(creds, op, early, foot).await
        };
        if early {
            let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
            let (n, b) = log.in_flight;
            log.in_flight = (n.saturating_sub(1), b.saturating_sub(foot));
        }
        result
    }

    /// [`MdsClient::send`] for a request that only reads: a connection
    /// lost before the answer (a leader that died or stepped down) is
    /// followed by the same request to whoever accepts next, a few times
    /// within [`crate::pool::FAILOVER_WAIT`]. Writes are not sent again:
    /// the first may have run.
    async fn send_read(&self, creds: Creds, op: Op) -> Result<MdsReply, CallError> {
        let deadline = std::time::Instant::now() + crate::pool::FAILOVER_WAIT;
        let mut tries = 0;
        loop {
            tries += 1;
            match self.send(creds.clone(), op.clone(), false, 0).await {
                Err(CallError::Transport(ConnError::Lost(why)))
                    if tries < READ_TRIES && std::time::Instant::now() < deadline =>
                {
                    tracing::debug!(op = op.name(), %why, "connection lost: asking again");
                    tokio::time::sleep(std::time::Duration::from_millis(50 * tries)).await;
                }
                r => return r,
            }
        }
    }

    async fn send(
        &self,
        creds: Creds,
        op: Op,
        early: bool,
        foot: usize,
    ) -> Result<MdsReply, CallError> {
        let kept = early.then(|| (creds.clone(), op.clone()));
        let req = MdsRequest {
            creds,
            session: self.session,
            prefetch: self.prefetch,
            early,
            op,
        };
        let (c, _) = self
            .pool
            .conn_fresh(self.pool.pick(), |c| self.replay_on(c))
            .await?;
        let f = c.call_raw(req.op.opcode(), &req, Bytes::new()).await?;
        let resp: MdsResponse =
            decode(&f.header).map_err(|e| ConnError::Protocol(e.to_string()))?;
        match resp.result? {
            reply if early => {
                // The session may be recorded now, early answer or not.
                *self.last_early.lock().unwrap_or_else(|e| e.into_inner()) =
                    Some(std::time::Instant::now());
                let MdsReply::Early(e) = reply else {
                    return Ok(reply);
                };
                let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
                // Nothing is held from another instance (a replay empties
                // the list first), so this is the MDS we talk to.
                log.instance = e.instance;
                log.durable(e.instance, e.durable);
                if let Some((creds, op)) = kept.filter(|_| e.transno > e.durable) {
                    log.bytes += foot;
                    // Answers of concurrent requests arrive in any order;
                    // the list stays in transno order (replays must be).
                    let at = log.ops.partition_point(|o| o.transno < e.transno);
                    log.ops.insert(
                        at,
                        ReplayOp {
                            transno: e.transno,
                            creds,
                            op,
                            ino: e.reply.named_ino(),
                            seal: e.seal,
                        },
                    );
                }
                Ok(e.reply)
            }
            MdsReply::Synced { durable } => {
                let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
                let instance = log.instance;
                log.durable(instance, durable);
                Ok(MdsReply::Synced { durable })
            }
            other => Ok(other),
        }
    }

    /// Resolves an absolute path to its entry.
    pub async fn resolve(&self, path: &str) -> Result<Entry, CallError> {
        match self.call(Op::Resolve { path: path.into() }).await? {
            MdsReply::Path(mut v) => v.pop().ok_or_else(|| {
                CallError::Transport(ConnError::Protocol("empty path reply".into()))
            }),
            other => Err(unexpected(&other)),
        }
    }

    /// Every entry of directory `ino`, in name order, page by page.
    pub async fn readdir_all(&self, ino: u64, plus: bool) -> Result<Vec<DirEntry>, CallError> {
        let mut out: Vec<DirEntry> = Vec::new();
        loop {
            let after = out.last().map(|e| e.name.clone());
            match self
                .call(Op::Readdir {
                    ino,
                    after,
                    max: 1000,
                    plus,
                })
                .await?
            {
                MdsReply::Dir { entries, more } => {
                    out.extend(entries);
                    if !more {
                        return Ok(out);
                    }
                }
                other => return Err(unexpected(&other)),
            }
        }
    }

    /// The root's inode number.
    pub fn root(&self) -> u64 {
        ROOT_INO
    }
}

/// The error for a reply of the wrong kind.
pub fn unexpected(r: &MdsReply) -> CallError {
    CallError::Transport(ConnError::Protocol(format!("unexpected reply {r:?}")))
}
